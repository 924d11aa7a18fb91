//! Our clients against a standard registry: CNCF distribution 2.8 (Debian's `docker-registry`)
//! storing in SeaweedFS through its own s3 driver. `rdctl build --push` pushes to it, `rdctl
//! pull` and `rdctl copy` read from it, and the worker provisions a zone from it; what comes back
//! is byte-identical to what was built and passes the validator.

use std::fs;
use std::path::Path;

use s3_fixtures::SeaweedFs;

use crate::registry_e2e::{header, http};
use crate::util::{Distribution, Server, rdctl, s, tail, tempdir};
use crate::worker_e2e::{Node, ips_image};

fn seaweed() -> &'static SeaweedFs {
    SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"))
}

/// Distribution on `bucket` of the shared SeaweedFS (under `/dist` in the bucket). Redirects
/// off: blobs flow through the registry (SeaweedFS is not reachable as the registry's public
/// S3 endpoint in general, and clients must not need it).
fn start_on_seaweed(dir: &Path, bucket: &str) -> Distribution {
    Distribution::start(
        dir,
        &format!(
            "  s3:\n    accesskey: test\n    secretkey: test-secret\n    \
             region: us-east-1\n    regionendpoint: {endpoint}\n    bucket: {bucket}\n    \
             secure: false\n    v4auth: true\n    rootdirectory: /dist\n  \
             delete:\n    enabled: true\n  redirect:\n    disable: true\n",
            endpoint = seaweed().endpoint(),
        ),
    )
}

fn json(b: &[u8]) -> serde_json::Value {
    serde_json::from_slice(b).unwrap_or_else(|e| panic!("not JSON ({e}): {}", tail(b)))
}

/// The digest of the manifest tagged `tag` in an OCI layout.
fn layout_digest(layout: &Path, tag: &str) -> String {
    let index = json(&fs::read(layout.join("index.json")).unwrap());
    index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap_or_else(|| panic!("no {tag} in {}: {index:#}", layout.display()))["digest"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn assert_valid(layout: &Path, tag: &str) {
    let v = rdctl()
        .args(["validate", &format!("{}:{tag}", s(layout)), "--json"])
        .output()
        .unwrap();
    assert_eq!(
        v.status.code(),
        Some(0),
        "{} does not validate: {:#}",
        layout.display(),
        json(&v.stdout)
    );
}

#[test]
fn build_pull_copy_and_worker_against_distribution_on_seaweedfs() {
    let bucket = seaweed().bucket().unwrap_or_else(|e| panic!("{e}"));
    let t = tempdir();
    let dir = t.path();
    let dist = start_on_seaweed(dir, &bucket);
    let host = dist.host();
    let fail = |what: &str, out: &std::process::Output| -> String {
        format!(
            "{what} failed: {}\nstderr:\n{}\ndistribution log:\n{}",
            out.status,
            tail(&out.stderr),
            dist.log_tail()
        )
    };

    // rdctl build pushes straight to distribution.
    let image = ips_image(dir);
    let built = dir.join("built");
    let reference = format!("{host}/zones/dist:1.0");
    let out = rdctl()
        .arg("build")
        .arg(&image)
        .args(["--output", s(&built), "--push", &reference, "--json"])
        .env("SOURCE_DATE_EPOCH", "1700000000")
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", fail("rdctl build --push", &out));
    let summary = json(&out.stdout);
    let manifest = summary["manifest"].as_str().unwrap().to_owned();
    // One identity: the registry's tag names the image manifest, as the layout's index.json
    // does (which also carries the platform).
    assert_eq!(manifest, layout_digest(&built, "1.0"));

    // Distribution kept it in the bucket, under its root directory.
    let keys = seaweed().list_keys(&bucket).unwrap();
    let hex = manifest.trim_start_matches("sha256:");
    assert!(
        keys.iter()
            .any(|k| k.starts_with("dist/docker/registry/v2/blobs/") && k.contains(hex)),
        "the manifest is not in the bucket: {keys:?}"
    );

    // rdctl pull gets the same manifest back, and the layout validates.
    let pulled = dir.join("pulled");
    let out = rdctl()
        .args(["pull", &reference, &format!("{}:1.0", s(&pulled))])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", fail("rdctl pull", &out));
    assert_eq!(layout_digest(&pulled, "1.0"), manifest);
    assert!(
        pulled.join("blobs/sha256").join(hex).is_file(),
        "the image manifest was not pulled"
    );
    assert_valid(&pulled, "1.0");

    // rdctl copy from distribution into our registry, by tag; the digest survives.
    let ours = Server::start(&dir.join("ours"), &[]);
    let copied = format!("{}/mirror/dist:1.0", ours.host());
    let out = rdctl()
        .args(["copy", &reference, &copied, "--json"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", fail("rdctl copy", &out));
    let (status, headers, _) = http(
        ours.host().parse().unwrap(),
        "HEAD",
        "/v2/mirror/dist/manifests/1.0",
        &[("accept", "application/vnd.oci.image.manifest.v1+json")],
        b"",
    );
    assert_eq!(status, 200);
    assert_eq!(header(&headers, "docker-content-digest"), manifest);
    // And back again under another name: distribution answers mounts and HEADs for it.
    let back = format!("{host}/zones/dist-copy:2.0");
    let out = rdctl().args(["copy", &copied, &back]).output().unwrap();
    assert!(out.status.success(), "{}", fail("rdctl copy back", &out));

    // The worker provisions a zone from distribution: verified, unpacked, described.
    let node = Node::new(&dir.join("node"));
    node.zone("fromdist", &back);
    let out = node.run_once();
    assert!(
        out.status.success(),
        "{}",
        fail("rdctl worker run --once", &out)
    );
    let root = node.root("fromdist");
    assert_eq!(
        fs::read(root.join("usr/bin/tool")).unwrap(),
        b"#!/bin/sh\necho tool\n"
    );
    let d = node.description("fromdist");
    assert_eq!(d["stop_signal"], "SIGUSR2", "{d:#}");
}
