//! Scrub end to end on a filesystem store and on SeaweedFS: a byte flipped behind the
//! registry's back is found by `rdctl registry scrub` (and by the `[scrub]` schedule of a
//! serving registry, seen in its metrics and report file), the blob is then answered with
//! `BLOB_UNKNOWN` (never a 500 or the wrong bytes), and a re-push of the same digest heals it.

use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::registry_e2e::http;
use crate::registry_gc::{digest, push_blob, push_image};
use crate::registry_s3::{s3_server, seaweed};
use crate::util::{Server, rdctl, s, tail, tempdir};

const LAYER: &[u8] = b"layer bytes that will rot on disk";

/// Runs `rdctl registry scrub --json` with the store flags; the exit code and the report.
fn scrub(store: &[&str]) -> (i32, Value, Output) {
    let out = rdctl()
        .args(["registry", "scrub", "--json"])
        .args(store)
        .output()
        .expect("run rdctl registry scrub");
    let report = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("scrub printed no JSON ({e}); stderr: {}", tail(&out.stderr)));
    (out.status.code().unwrap_or(-1), report, out)
}

/// GET of a blob: status, error code (if any), body.
fn get_blob(server: &Server, repo: &str, d: &str) -> (u16, String, Vec<u8>) {
    let (status, _, body) = http(
        server.addr,
        "GET",
        &format!("/v2/{repo}/blobs/{d}"),
        &[],
        b"",
    );
    let code = serde_json::from_slice::<Value>(&body)
        .ok()
        .and_then(|v| v["errors"][0]["code"].as_str().map(str::to_owned))
        .unwrap_or_default();
    (status, code, body)
}

/// The scenario, given a way to flip one byte of a stored blob and the scrub's store flags.
fn find_quarantine_heal(server: &Server, store: &[&str], flip: &dyn Fn(&str)) {
    let m = push_image(server, "team/app", "v1", b"{\"c\":1}", LAYER);
    let layer = digest(LAYER);
    let (code, report, _) = scrub(store);
    assert_eq!(code, 0, "clean before: {report:#}");
    assert_eq!(report["blobs_checked"], 3, "{report:#}");
    assert_eq!(report["manifests_checked"], 1, "{report:#}");

    flip(&layer);
    // Before the scrub the same-size damage is not detected by a GET (no full hash per GET).
    let (code, report, _) = scrub(store);
    assert_eq!(code, 1, "{report:#}");
    let corrupt = report["corrupt_blobs"].as_array().unwrap();
    assert_eq!(corrupt.len(), 1, "{report:#}");
    assert_eq!(corrupt[0]["digest"], layer.as_str());
    assert_eq!(corrupt[0]["quarantined"], true);
    assert_ne!(corrupt[0]["found"], layer.as_str());
    let problems = report["manifest_problems"].as_array().unwrap();
    assert_eq!(problems.len(), 1, "{report:#}");
    assert_eq!(problems[0]["digest"], m.as_str());
    assert!(
        problems[0]["problem"].as_str().unwrap().contains(&layer),
        "{report:#}"
    );

    // The manifest naming the quarantined layer is withdrawn: 404 by tag and digest, GET and
    // HEAD alike, naming the layer, so clients push the image again.
    let withdrawn = report["withdrawn_manifests"].as_array().unwrap();
    assert_eq!(withdrawn.len(), 1, "{report:#}");
    assert_eq!(withdrawn[0]["digest"], m.as_str(), "{report:#}");
    assert!(
        withdrawn[0]["because"].as_str().unwrap().contains(&layer),
        "{report:#}"
    );
    assert_manifest_withdrawn(server, "team/app", &["v1", &m], &layer);

    for _ in 0..2 {
        let (status, code, body) = get_blob(server, "team/app", &layer);
        assert_eq!(
            (status, code.as_str()),
            (404, "BLOB_UNKNOWN"),
            "{}",
            String::from_utf8_lossy(&body)
        );
    }
    let (status, _, _) = http(
        server.addr,
        "HEAD",
        &format!("/v2/team/app/blobs/{layer}"),
        &[],
        b"",
    );
    assert_eq!(status, 404);

    // A re-push of the same digest heals the blob; the image's re-push heals the manifest;
    // the scrub is clean again.
    assert_eq!(push_blob(server, "team/app", LAYER), layer);
    let (status, _, body) = get_blob(server, "team/app", &layer);
    assert_eq!((status, body.as_slice()), (200, LAYER));
    assert_eq!(push_image(server, "team/app", "v1", b"{\"c\":1}", LAYER), m);
    let (status, _, _) = http(
        server.addr,
        "HEAD",
        "/v2/team/app/manifests/v1",
        &[("accept", crate::registry_gc::MANIFEST)],
        b"",
    );
    assert_eq!(status, 200);
    let (code, report, _) = scrub(store);
    assert_eq!(code, 0, "healed: {report:#}");
}

/// GET and HEAD of each reference answer 404; the GET's error is `MANIFEST_UNKNOWN` and its
/// message names the quarantined `layer`.
fn assert_manifest_withdrawn(server: &Server, repo: &str, references: &[&str], layer: &str) {
    for reference in references {
        for method in ["GET", "HEAD"] {
            let (status, _, body) = http(
                server.addr,
                method,
                &format!("/v2/{repo}/manifests/{reference}"),
                &[("accept", crate::registry_gc::MANIFEST)],
                b"",
            );
            assert_eq!(
                status,
                404,
                "{method} {reference}: {}",
                String::from_utf8_lossy(&body)
            );
            if method == "GET" {
                let v: Value = serde_json::from_slice(&body).expect("an error body");
                assert_eq!(v["errors"][0]["code"], "MANIFEST_UNKNOWN", "{v:#}");
                let message = v["errors"][0]["message"].as_str().unwrap_or_default();
                assert!(
                    message.contains("withdrawn by a scrub") && message.contains(layer),
                    "{v:#}"
                );
            }
        }
    }
}

/// crane copies an image again into a registry where a scrub quarantined one of its layers:
/// the withdrawn manifest answers 404, so crane uploads the missing layer and puts the
/// manifest, and the image is whole again (before, HEAD said 200 and crane copied nothing).
#[test]
fn scrub_withdrawn_image_is_healed_by_a_crane_copy() {
    let (src_data, data) = (tempdir(), tempdir());
    let source = Server::start(src_data.path(), &[]);
    let server = Server::start(data.path(), &[]);
    let config = b"{\"c\":\"crane\"}";
    let m = push_image(&source, "team/app", "v1", config, LAYER);
    assert_eq!(push_image(&server, "team/app", "v1", config, LAYER), m);
    let layer = digest(LAYER);
    flip_file(&blob_file(data.path(), &layer));
    let (code, report, _) = scrub(&["--data", s(data.path())]);
    assert_eq!(code, 1, "{report:#}");
    assert_manifest_withdrawn(&server, "team/app", &["v1", &m], &layer);

    crate::util::ok(crate::util::tool("crane").args([
        "copy",
        "--insecure",
        &format!("{}/team/app:v1", source.addr),
        &format!("{}/team/app:v1", server.addr),
    ]));
    let (status, _, body) = get_blob(&server, "team/app", &layer);
    assert_eq!((status, body.as_slice()), (200, LAYER));
    let (status, headers, _) = http(
        server.addr,
        "HEAD",
        "/v2/team/app/manifests/v1",
        &[("accept", crate::registry_gc::MANIFEST)],
        b"",
    );
    assert_eq!(status, 200);
    assert!(format!("{headers:?}").contains(&m), "{headers:?}");
    let (code, report, _) = scrub(&["--data", s(data.path())]);
    assert_eq!(code, 0, "healed: {report:#}");
}

/// The blob's file in an fs store.
fn blob_file(data: &Path, d: &str) -> std::path::PathBuf {
    let hex = d.strip_prefix("sha256:").unwrap();
    data.join(format!("blobs/sha256/{}/{hex}/data", &hex[..2]))
}

fn flip_file(path: &Path) {
    let mut perms = std::fs::metadata(path).expect("blob file").permissions();
    perms.set_mode(0o644);
    std::fs::set_permissions(path, perms).unwrap();
    let mut bytes = std::fs::read(path).unwrap();
    bytes[3] ^= 0x20;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn scrub_fs_finds_a_flipped_byte_quarantines_and_heals() {
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    find_quarantine_heal(&server, &["--data", s(data.path())], &|d| {
        flip_file(&blob_file(data.path(), d))
    });
    // The corrupt layer and the withdrawn manifest.
    let record = std::fs::read_dir(data.path().join("_rd/quarantine/sha256"))
        .expect("a quarantine")
        .count();
    assert_eq!(record, 2);
}

/// A manifest whose bytes were quarantined is unknown to a GET and to a HEAD alike (a HEAD
/// that said 200 would send a client to a GET that says 404), by tag and by digest, until the
/// same manifest is pushed again.
#[test]
fn scrub_quarantined_manifest_is_unknown_to_get_and_head_until_pushed_again() {
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let m = push_image(&server, "team/app", "v1", b"{\"c\":3}", LAYER);
    flip_file(&blob_file(data.path(), &m));
    let (code, report, _) = scrub(&["--data", s(data.path())]);
    assert_eq!(code, 1, "{report:#}");
    assert_eq!(
        report["corrupt_blobs"][0]["digest"],
        m.as_str(),
        "{report:#}"
    );
    for reference in ["v1", m.as_str()] {
        for method in ["GET", "HEAD"] {
            let (status, _, body) = http(
                server.addr,
                method,
                &format!("/v2/team/app/manifests/{reference}"),
                &[("accept", crate::registry_gc::MANIFEST)],
                b"",
            );
            assert_eq!(status, 404, "{method} {reference}");
            if method == "GET" {
                let v: Value = serde_json::from_slice(&body).expect("an error body");
                assert_eq!(v["errors"][0]["code"], "MANIFEST_UNKNOWN", "{v:#}");
            }
        }
    }
    assert_eq!(
        push_image(&server, "team/app", "v1", b"{\"c\":3}", LAYER),
        m
    );
    for method in ["GET", "HEAD"] {
        let (status, _, body) = http(
            server.addr,
            method,
            "/v2/team/app/manifests/v1",
            &[("accept", crate::registry_gc::MANIFEST)],
            b"",
        );
        assert_eq!(status, 200, "{method}: {}", String::from_utf8_lossy(&body));
    }
    let (code, report, _) = scrub(&["--data", s(data.path())]);
    assert_eq!(code, 0, "healed: {report:#}");
}

#[test]
fn scrub_s3_finds_a_flipped_byte_quarantines_and_heals() {
    let sw = seaweed();
    let bucket = sw.bucket().unwrap_or_else(|e| panic!("{e}"));
    let data = tempdir();
    let server = s3_server(data.path(), &bucket, &[]);
    let endpoint = sw.endpoint();
    let store = [
        "--s3-endpoint",
        endpoint.as_str(),
        "--s3-bucket",
        bucket.as_str(),
        "--s3-prefix",
        "reg",
    ];
    // Behind the registry's back: straight to the S3 gateway (no identities: unsigned works).
    find_quarantine_heal(&server, &store, &|d| {
        let hex = d.strip_prefix("sha256:").unwrap();
        let path = format!("/{bucket}/reg/blobs/sha256/{}/{hex}/data", &hex[..2]);
        let (status, _, mut bytes) = http(sw.s3_addr(), "GET", &path, &[], b"");
        assert_eq!(status, 200, "{path}");
        bytes[3] ^= 0x20;
        let (status, _, body) = http(sw.s3_addr(), "PUT", &path, &[], &bytes);
        assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    });
}

/// The `[scrub]` schedule of a serving registry finds the damage by itself: metrics and the
/// report file say so, and the blob is no longer served.
#[test]
fn scrub_schedule_reports_in_metrics_and_file() {
    let data = tempdir();
    let dir = tempdir();
    let report = dir.path().join("scrub.json");
    let cfg = dir.path().join("registry.toml");
    std::fs::write(
        &cfg,
        format!(
            "[scrub]\ninterval = \"300ms\"\nrate = 100000000\nreport = \"{}\"\n",
            report.display()
        ),
    )
    .unwrap();
    let server = Server::start(data.path(), &["--config", s(&cfg)]);
    push_image(&server, "team/app", "v1", b"{\"c\":2}", LAYER);
    let layer = digest(LAYER);
    flip_file(&blob_file(data.path(), &layer));
    // Runs come every 300 ms: the one that found the flip counts it, later ones still report
    // the manifest whose layer is quarantined (and rewrite the file).
    let start = Instant::now();
    loop {
        let (_, _, body) = http(server.addr, "GET", "/metrics", &[], b"");
        let text = String::from_utf8_lossy(&body).into_owned();
        let written = std::fs::read_to_string(&report).unwrap_or_default();
        if text.contains("registry_scrub_corrupt_blobs_total 1") && written.contains(&layer) {
            assert!(!text.contains("registry_scrub_last_problems 0"), "{text}");
            let v: Value = serde_json::from_str(&written).expect("a JSON report");
            assert!(v["blobs_checked"].as_u64().unwrap() >= 2, "{v:#}");
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "no scheduled scrub found it; log:\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let (status, code, _) = get_blob(&server, "team/app", &layer);
    assert_eq!((status, code.as_str()), (404, "BLOB_UNKNOWN"));
}
