//! `rdctl registry gc` and the `[gc]` schedule of `rdctl registry serve`, end to end on a
//! filesystem store: a dry run reports without touching the store, the grace window keeps
//! young content, a real run deletes exactly the unreachable content, and a serving registry
//! with `gc.interval` collects by itself (seen in its metrics) while tagged images stay.

use std::path::Path;
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

use crate::registry_e2e::http;
use crate::util::{Server, ok, rdctl, s, tempdir};

pub(crate) const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

pub(crate) fn digest(data: &[u8]) -> String {
    let hex: String = Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

pub(crate) fn push_blob(server: &Server, repo: &str, data: &[u8]) -> String {
    let d = digest(data);
    let (status, _, body) = http(
        server.addr,
        "POST",
        &format!("/v2/{repo}/blobs/uploads/?digest={d}"),
        &[("content-type", "application/octet-stream")],
        data,
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    d
}

/// Pushes config and layer, then a manifest under `reference`; returns the manifest's digest.
pub(crate) fn push_image(
    server: &Server,
    repo: &str,
    reference: &str,
    config: &[u8],
    layer: &[u8],
) -> String {
    let c = push_blob(server, repo, config);
    let l = push_blob(server, repo, layer);
    let m = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": l, "size": layer.len()}],
    }))
    .unwrap();
    let (status, _, body) = http(
        server.addr,
        "PUT",
        &format!("/v2/{repo}/manifests/{reference}"),
        &[("content-type", MANIFEST)],
        &m,
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    digest(&m)
}

pub(crate) fn get(server: &Server, path: &str) -> u16 {
    http(server.addr, "GET", path, &[("accept", MANIFEST)], b"").0
}

fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if !p.to_string_lossy().contains("/.") {
                out.push(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

fn gc_json(data: &Path, args: &[&str]) -> serde_json::Value {
    let out = ok(rdctl()
        .args(["registry", "gc", "--data", s(data), "--json"])
        .args(args));
    serde_json::from_slice(&out.stdout).expect("gc --json prints JSON")
}

#[test]
fn gc_cli_and_schedule_collect_only_unreachable_content() {
    let data = tempdir();
    let repo = "gc/app";
    let (kept, old) = {
        let server = Server::start(data.path(), &[]);
        let kept = push_image(&server, repo, "v1", b"{\"c\":1}", b"layer kept");
        let old = push_image(&server, repo, "old", b"{\"c\":0}", b"layer old");
        let (status, _, _) = http(
            server.addr,
            "DELETE",
            &format!("/v2/{repo}/manifests/old"),
            &[],
            b"",
        );
        assert_eq!(status, 202);
        push_blob(&server, repo, b"orphan");
        (kept, old)
    };

    // Dry run: the report names the unreachable content; the store is unchanged.
    let before = files(data.path());
    let dry = gc_json(
        data.path(),
        &["--dry-run", "--grace", "0", "--delete-untagged"],
    );
    assert_eq!(files(data.path()), before, "a dry run changed the store");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["deleted_blobs"], 4, "{dry:#}");
    assert_eq!(dry["deleted_manifest_links"], 1, "{dry:#}");
    let listed: Vec<&str> = dry["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["digest"].as_str().unwrap())
        .collect();
    for d in [
        &old,
        &digest(b"orphan"),
        &digest(b"layer old"),
        &digest(b"{\"c\":0}"),
    ] {
        assert!(listed.contains(&d.as_str()), "{d} not in {listed:?}");
    }

    // Inside the grace window nothing goes; the text report says so.
    let out = ok(rdctl().args([
        "registry",
        "gc",
        "--data",
        s(data.path()),
        "--grace",
        "1h",
        "--delete-untagged",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("deleted: 0 blobs"), "{text}");
    assert_eq!(files(data.path()), before);

    // Untagged manifests kept by default: only the orphan goes.
    let r = gc_json(data.path(), &["--grace", "0"]);
    assert_eq!(
        (r["deleted_blobs"].as_u64(), r["deleted_bytes"].as_u64()),
        (Some(1), Some(6)),
        "{r:#}"
    );
    let r = gc_json(data.path(), &["--grace", "0", "--delete-untagged"]);
    assert_eq!(r["deleted_blobs"], 3, "{r:#}");
    assert_eq!(
        gc_json(
            data.path(),
            &["--grace", "0", "--delete-untagged", "--dry-run"]
        )["deleted"],
        serde_json::json!([])
    );

    // A serving registry with a schedule collects by itself.
    let config = data.path().join("registry.toml");
    std::fs::write(
        &config,
        "[gc]\ninterval = \"1s\"\ngrace = \"3s\"\ndelete_untagged = true\n",
    )
    .unwrap();
    let server = Server::start(data.path(), &["--config", s(&config)]);
    let orphan = push_blob(&server, repo, b"orphan 2");
    let started = Instant::now();
    loop {
        let (_, _, metrics) = http(server.addr, "GET", "/metrics", &[], b"");
        let metrics = String::from_utf8_lossy(&metrics).into_owned();
        if metrics.contains("registry_gc_deleted_objects_total{kind=\"blob\"} 1\n") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the scheduled collection deleted nothing within a minute:\n{metrics}\nlog:\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(get(&server, &format!("/v2/{repo}/blobs/{orphan}")), 404);
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/{old}")), 404);
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/v1")), 200);
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/{kept}")), 200);
    for b in [b"layer kept".as_slice(), b"{\"c\":1}"] {
        let (status, _, body) = http(
            server.addr,
            "GET",
            &format!("/v2/{repo}/blobs/{}", digest(b)),
            &[],
            b"",
        );
        assert_eq!((status, body.as_slice()), (200, b));
    }
    assert!(
        server.log_shows("garbage collection finished"),
        "{}",
        server.log_tail()
    );
}

/// Output into a pipe nobody reads (`rdctl registry gc | head -0`) ends the command quietly:
/// exit 0, no panic message.
#[test]
fn gc_into_a_closed_pipe_exits_quietly() {
    let data = tempdir();
    for json in [false, true] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = rdctl();
        cmd.args(["registry", "gc", "--data", s(data.path()), "--dry-run"]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "json={json}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "json={json}: {stderr}");
    }
}

/// Writes `gc/lock` as a collector from pid 4242 on host "ghost" leaves it, last renewed `ago`.
fn write_lease(data: &Path, ttl_secs: u64, ago: Duration) {
    let path = data.join("gc/lock");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let body = serde_json::json!({
        "run": "dead-run", "renewal": 3, "pid": 4242, "host": "ghost",
        "started": 1_700_000_000u64, "ttl_secs": ttl_secs,
    });
    std::fs::write(&path, body.to_string()).unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(std::time::SystemTime::now() - ago).unwrap();
}

/// `rdctl registry gc --break-lease`: nothing to break; a live lease refused (naming its holder)
/// unless forced; a stale one broken, printing who held it and since when; then a run completes.
#[test]
fn gc_break_lease() {
    let data = tempdir();
    let break_lease = |extra: &[&str]| {
        rdctl()
            .args(["registry", "gc", "--data", s(data.path()), "--break-lease"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = break_lease(&[]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no garbage collection lease"));

    // Live: the run and a plain break are refused.
    write_lease(data.path(), 3600, Duration::ZERO);
    let run = rdctl()
        .args(["registry", "gc", "--data", s(data.path())])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("--break-lease"));
    let out = break_lease(&[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is live")
            && stderr.contains("pid 4242 on ghost")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(data.path().join("gc/lock").exists());
    let out = ok(rdctl().args([
        "registry",
        "gc",
        "--data",
        s(data.path()),
        "--break-lease",
        "--force",
    ]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("held by pid 4242 on ghost (run dead-run) since 2023-11-14T22:13:20Z")
            && stdout.contains("live, forced"),
        "{stdout}"
    );
    assert!(!data.path().join("gc/lock").exists());

    // Stale: broken without --force, as JSON.
    write_lease(data.path(), 60, Duration::from_secs(600));
    let out = ok(rdctl().args([
        "registry",
        "gc",
        "--data",
        s(data.path()),
        "--break-lease",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["host"], "ghost", "{v}");
    assert!(v["age_secs"].as_u64().unwrap() >= 600, "{v}");
    assert!(!data.path().join("gc/lock").exists());
    gc_json(data.path(), &["--grace", "0s"]);

    // --force alone is a usage error.
    let out = rdctl()
        .args(["registry", "gc", "--data", s(data.path()), "--force"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
