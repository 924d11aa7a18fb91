//! Scheduled sync (`[[sync]]` in registry.toml): two replicas of our registry on one store
//! mirror CNCF distribution 2.8 (Debian's `docker-registry`, no referrers API: referrers travel
//! through the tag schema) every second. The sync converges (20 images, each with an SBOM
//! referrer), the next run copies no blob, one replica runs at a time (the runs in the state
//! document never overlap), the state survives a restart, an upstream with Basic auth refuses
//! an entry without credentials (the 401 shows in the status) and serves one with them (and
//! so does a `[[proxy]]` rule with the same `auth_file`), and an upstream tag deletion is kept
//! by default and removed with `on_upstream_delete = "delete"`.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use validator::{ImageLayout, IndexEntry, Replaces, Tag};

use crate::registry_e2e::http;
use crate::sync::head_digest;
use crate::util::{Distribution, Server, ok, rdctl, s, tempdir};

const MANIFEST_MT: &str = "application/vnd.oci.image.manifest.v1+json";
const SBOM_TYPE: &str = "application/spdx+json";

/// One image of the seed layout: where it goes upstream, its digest and its SBOM's.
struct Seeded {
    repo: String,
    tag: String,
    digest: String,
    sbom: String,
}

/// Writes `n` distinct single-layer images into one layout, tagged `i0`…, each with an SBOM
/// referrer listed untagged in `index.json` (as the builder lists its SBOM).
fn seed_layout(dir: &Path, n: usize) -> (std::path::PathBuf, Vec<(String, String, String)>) {
    let root = dir.join("seed");
    let l = ImageLayout::create(&root).unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let mut tar = tar::Builder::new(Vec::new());
        let body = format!("image {i}\n");
        let mut h = tar::Header::new_ustar();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_cksum();
        tar.append_data(&mut h, "etc/motd", body.as_bytes())
            .unwrap();
        let layer = tar.into_inner().unwrap();
        let layer_d = l.write_document(&layer).unwrap();
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "amd64", "os": "illumos",
            "rootfs": {"type": "layers", "diff_ids": [layer_d.to_string()]},
        }))
        .unwrap();
        let config_d = l.write_document(&config).unwrap();
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": MANIFEST_MT,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_d.to_string(), "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layer_d.to_string(), "size": layer.len()}],
        }))
        .unwrap();
        let image = l.write_document(&manifest).unwrap();
        let tag = Tag::parse(&format!("i{i}")).unwrap();
        l.set_tag(
            &tag,
            IndexEntry::new(MANIFEST_MT, image.clone(), manifest.len() as u64),
        )
        .unwrap();
        let empty = l.write_document(b"{}").unwrap();
        let payload = format!(r#"{{"spdxVersion":"SPDX-2.3","name":"image {i}"}}"#);
        let blob = l.write_document(payload.as_bytes()).unwrap();
        let sbom = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": MANIFEST_MT, "artifactType": SBOM_TYPE,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty.to_string(), "size": 2},
            "layers": [{"mediaType": SBOM_TYPE, "digest": blob.to_string(), "size": payload.len()}],
            "subject": {"mediaType": MANIFEST_MT, "digest": image.to_string(), "size": manifest.len()},
        }))
        .unwrap();
        let sbom_d = l.write_document(&sbom).unwrap();
        let mut entry = IndexEntry::new(MANIFEST_MT, sbom_d.clone(), sbom.len() as u64);
        entry.artifact_type = Some(SBOM_TYPE.to_owned());
        l.add_untagged(entry, Replaces::SameDigest).unwrap();
        out.push((tag.to_string(), image.to_string(), sbom_d.to_string()));
    }
    (root, out)
}

/// Pushes the seed images to `host`, 4 at a time: image `i` goes to `zones/app{i % 4}:1.{i / 4}`.
fn push_seed(
    layout: &Path,
    seed: &[(String, String, String)],
    host: &str,
    extra: &[&str],
) -> Vec<Seeded> {
    let out: Vec<Seeded> = seed
        .iter()
        .enumerate()
        .map(|(i, (_, d, sbom))| Seeded {
            repo: format!("app{}", i % 4),
            tag: format!("1.{}", i / 4),
            digest: d.clone(),
            sbom: sbom.clone(),
        })
        .collect();
    let pairs: Vec<_> = seed.iter().zip(&out).collect();
    std::thread::scope(|sc| {
        for chunk in pairs.chunks(5) {
            sc.spawn(move || {
                for ((tag, _, _), img) in chunk {
                    ok(rdctl().arg("push").args(extra).args([
                        &format!("{}:{tag}", s(layout)),
                        &format!("{host}/zones/{}:{}", img.repo, img.tag),
                    ]));
                }
            });
        }
    });
    out
}

fn get_json(addr: SocketAddr, path: &str) -> serde_json::Value {
    let (status, _, body) = http(addr, "GET", path, &[], b"");
    assert_eq!(
        status,
        200,
        "GET {path}: {}",
        String::from_utf8_lossy(&body)
    );
    serde_json::from_slice(&body).unwrap()
}

/// The status entry named `name` from `GET /v2/_rd/sync`.
fn status(addr: SocketAddr, name: &str) -> serde_json::Value {
    let v = get_json(addr, "/v2/_rd/sync");
    v["sync"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no sync entry {name}: {v:#}"))
        .clone()
}

/// Waits (at most 20 s) until `check` accepts the status of `name`; returns that status.
fn wait_status(
    addr: SocketAddr,
    name: &str,
    what: &str,
    logs: &dyn Fn() -> String,
    check: &dyn Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let st = status(addr, name);
        if check(&st) {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "sync {name}: {what} within 20 s; status:\n{st:#}\nlogs:\n{}",
            logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn runs_ok(st: &serde_json::Value) -> u64 {
    st["runs_ok"].as_u64().unwrap_or(0)
}

#[test]
fn scheduled_sync_converges_on_one_replica_at_a_time_and_survives_a_restart() {
    let dir = tempdir();
    let d = dir.path();
    fs::create_dir_all(d.join("up")).unwrap();
    let upstream = Distribution::start(
        &d.join("up"),
        &format!(
            "  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n",
            s(&d.join("up/data"))
        ),
    );
    let (layout, seed) = seed_layout(d, 20);
    let images = push_seed(&layout, &seed, &upstream.host(), &[]);

    // A registry with Basic auth (htpasswd) as a second upstream, holding one image.
    let users = d.join("htpasswd");
    fs::write(
        &users,
        format!("sync:{}\n", bcrypt::hash("sync-pw", 4).unwrap()),
    )
    .unwrap();
    let locked_cfg = d.join("locked.toml");
    fs::write(&locked_cfg, format!(
            "[auth]\nhtpasswd = {:?}\n\n[[auth.acl]]\nsubjects = [\"sync\"]\nrepositories = [\"**\"]\nactions = [\"*\"]\n",
            s(&users)
        )).unwrap();
    let locked = Server::start(&d.join("locked-data"), &["--config", s(&locked_cfg)]);
    let creds = d.join("auth.json");
    {
        use base64::Engine as _;
        let auth = base64::engine::general_purpose::STANDARD.encode("sync:sync-pw");
        fs::write(
            &creds,
            serde_json::json!({"auths": {locked.host(): {"auth": auth}}}).to_string(),
        )
        .unwrap();
    }
    ok(rdctl().args([
        "push",
        "--auth-file",
        s(&creds),
        &format!("{}:i0", s(&layout)),
        &format!("{}/zones/app0:1.0", locked.host()),
    ]));

    let config = d.join("registry.toml");
    fs::write(
        &config,
        format!(
            "[[sync]]\nname = \"central\"\nupstream = \"http://{up}/zones\"\ndestination = \"mirror\"\ninterval = \"1s\"\n\n\
             [[sync]]\nname = \"pruned\"\nupstream = \"http://{up}/zones\"\nrepositories = [\"app0\"]\ndestination = \"pruned\"\ninterval = \"1s\"\non_upstream_delete = \"delete\"\n\n\
             [[sync]]\nname = \"no-creds\"\nupstream = \"http://{lk}/zones\"\nrepositories = [\"app0\"]\ndestination = \"no-creds\"\ninterval = \"1s\"\n\n\
             [[sync]]\nname = \"with-creds\"\nupstream = \"http://{lk}/zones\"\nrepositories = [\"app0\"]\ndestination = \"with-creds\"\ninterval = \"1s\"\nauth_file = {creds:?}\n\n\
             [[proxy]]\nprefix = \"cached\"\nupstreams = [\"http://{lk}/zones\"]\nauth_file = {creds:?}\n\n\
             [[proxy]]\nprefix = \"anon\"\nupstreams = [\"http://{lk}/zones\"]\n",
            up = upstream.host(),
            lk = locked.host(),
            creds = s(&creds),
        ),
    )
    .unwrap();
    let data = d.join("data");
    let args = ["--config", s(&config)];
    let (a, b) = (Server::start(&data, &args), Server::start(&data, &args));
    let logs = || format!("replica a:\n{}\nreplica b:\n{}", a.log_tail(), b.log_tail());

    // Converges: every image and its SBOM, and then a run that copies no blob.
    let first = wait_status(a.addr, "central", "converge and run again", &logs, &|st| {
        runs_ok(st) >= 2 && st["last_run"]["images"] == 20
    });
    assert_eq!(first["last_run"]["blobs_copied"], 0, "{first:#}");
    assert_eq!(first["last_run"]["images_copied"], 0, "{first:#}");
    assert!(first["last_error"].is_null(), "{first:#}");
    for img in &images {
        let repo = format!("mirror/{}", img.repo);
        assert_eq!(
            head_digest(b.addr, &repo, &img.tag).as_deref(),
            Some(img.digest.as_str()),
            "{repo}:{}",
            img.tag
        );
        let referrers = get_json(b.addr, &format!("/v2/{repo}/referrers/{}", img.digest));
        let found: Vec<&str> = referrers["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|m| m["digest"].as_str())
            .collect();
        assert_eq!(
            found,
            [img.sbom.as_str()],
            "referrers of {repo}:{}",
            img.tag
        );
    }
    // The other replica reports the same in its metrics.
    let metrics = String::from_utf8(http(b.addr, "GET", "/metrics", &[], b"").2).unwrap();
    for line in [
        "registry_sync_last_run_blobs_copied{sync=\"central\"} 0",
        "registry_sync_last_run_images{sync=\"central\"} 20",
        "registry_sync_last_run_failed{sync=\"central\"} 0",
    ] {
        assert!(metrics.contains(line), "{line} not in:\n{metrics}");
    }
    assert!(
        metrics.contains("registry_sync_lag_seconds{sync=\"central\"}"),
        "{metrics}"
    );

    // Basic auth upstream: without credentials a 401 in the status, with them a copy.
    let denied = wait_status(a.addr, "no-creds", "fail", &logs, &|st| {
        st["runs_failed"].as_u64().unwrap_or(0) >= 1
    });
    let err = denied["last_error"]
        .as_str()
        .unwrap_or_default()
        .to_lowercase();
    assert!(
        err.contains("401") || err.contains("unauthorized"),
        "{denied:#}"
    );
    assert!(denied["last_success_ms"].is_null(), "{denied:#}");
    wait_status(
        a.addr,
        "with-creds",
        "copy with credentials",
        &logs,
        &|st| runs_ok(st) >= 1,
    );
    assert_eq!(
        head_digest(a.addr, "with-creds/app0", "1.0").as_deref(),
        Some(images[0].digest.as_str())
    );
    assert_eq!(head_digest(a.addr, "no-creds/app0", "1.0"), None);
    // The pull-through cache reads the same auth file: with it a pull fills the cache,
    // without it the upstream refuses and nothing is cached.
    assert_eq!(
        head_digest(b.addr, "cached/app0", "1.0").as_deref(),
        Some(images[0].digest.as_str())
    );
    assert_eq!(head_digest(b.addr, "anon/app0", "1.0"), None);

    // Upstream deletes app0:1.1 (distribution deletes by digest, with its tags).
    let gone = images
        .iter()
        .find(|i| i.repo == "app0" && i.tag == "1.1")
        .unwrap();
    let (st, _, body) = http(
        upstream.addr(),
        "DELETE",
        &format!("/v2/zones/app0/manifests/{}", gone.digest),
        &[],
        b"",
    );
    assert_eq!(st, 202, "{}", String::from_utf8_lossy(&body));
    let deleted_at = {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap();
        now.as_millis() as u64
    };
    let after = |st: &serde_json::Value| {
        st["last_success_ms"].as_u64().unwrap_or(0) > deleted_at
            && st["history"].as_array().unwrap().last().unwrap()["started_ms"]
                .as_u64()
                .unwrap()
                > deleted_at
    };
    let pruned = wait_status(
        a.addr,
        "pruned",
        "run after the upstream deletion",
        &logs,
        &after,
    );
    assert_eq!(pruned["last_run"]["tags_deleted"], 1, "{pruned:#}");
    wait_status(
        a.addr,
        "central",
        "run after the upstream deletion",
        &logs,
        &after,
    );
    assert_eq!(
        head_digest(a.addr, "pruned/app0", "1.1"),
        None,
        "deleted with delete"
    );
    assert_eq!(
        head_digest(a.addr, "mirror/app0", "1.1").as_deref(),
        Some(gone.digest.as_str()),
        "kept by default"
    );
    assert!(head_digest(a.addr, "pruned/app0", "1.0").is_some());

    // One replica at a time: no two runs of any entry overlap, and both replicas took part
    // in the schedule under the same lease.
    let before = status(a.addr, "central");
    let history = before["history"].as_array().unwrap();
    assert!(history.len() >= 3, "{before:#}");
    for w in history.windows(2) {
        assert!(
            w[1]["started_ms"].as_u64() >= w[0]["finished_ms"].as_u64(),
            "runs overlap: {:#}",
            serde_json::Value::Array(w.to_vec())
        );
    }

    // A restart keeps the state: a new replica answers the same counts and goes on from them.
    drop(a);
    drop(b);
    let before = status_from(&data, &config);
    let c = Server::start(&data, &args);
    let kept = status(c.addr, "central");
    assert!(
        runs_ok(&kept) >= runs_ok(&before),
        "{kept:#} after {before:#}"
    );
    assert_eq!(kept["last_success_ms"], before["last_success_ms"]);
    let next = wait_status(
        c.addr,
        "central",
        "run after the restart",
        &|| c.log_tail(),
        &|st| runs_ok(st) > runs_ok(&before),
    );
    assert_eq!(next["last_run"]["blobs_copied"], 0, "{next:#}");
}

/// The status of `central` as `rdctl registry sync-status --json` reads it from the store.
fn status_from(data: &Path, config: &Path) -> serde_json::Value {
    let out = rdctl()
        .args([
            "registry",
            "sync-status",
            "--json",
            "--config",
            s(config),
            "--data",
            s(data),
        ])
        .output()
        .unwrap();
    // 1: the entry without credentials failed, as it should.
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        crate::util::tail(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    // The text form is a table whose columns line up (as `rdctl ls`), not tab-separated.
    let text = rdctl()
        .args([
            "registry",
            "sync-status",
            "--config",
            s(config),
            "--data",
            s(data),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8(text.stdout).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert!(!text.contains('\t') && lines.len() >= 2, "{text}");
    let col = lines[0].find("UPSTREAM").unwrap();
    assert!(
        lines[1..]
            .iter()
            .all(|l| l.as_bytes()[col - 2..col] == *b"  "),
        "UPSTREAM column not aligned:\n{text}"
    );
    v["sync"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "central")
        .unwrap()
        .clone()
}
