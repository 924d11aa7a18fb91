//! A Docker schema 2 image (manifest and manifest list, as `docker push` writes them) pulled
//! into an OCI image layout: `rdctl pull` writes it with OCI media types, as `skopeo copy` to
//! `oci:` does, so the real skopeo reads the layout by tag; every digest that changed is
//! reported; the config and layers stay byte for byte. `--keep-media-types` keeps the Docker
//! documents byte-exact (digests kept), which skopeo's `oci:` transport cannot find by tag.

use std::fs;
use std::io::Write as _;
use std::path::Path;

use serde_json::{Value, json};

use crate::package_search::put_blob;
use crate::registry_e2e::http;
use crate::util::{Server, ok, rdctl, s, tempdir, tool};

const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";
const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// A gzipped tar holding one file.
fn layer(name: &str, text: &str) -> Vec<u8> {
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(text.len() as u64);
    h.set_mode(0o644);
    h.set_cksum();
    tar.append_data(&mut h, name, text.as_bytes()).unwrap();
    let tar = tar.into_inner().unwrap();
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.write_all(&tar).unwrap();
    gz.finish().unwrap()
}

fn put(
    reg: &Server,
    repo: &str,
    reference: &str,
    media_type: &str,
    doc: &Value,
) -> (String, usize) {
    let bytes = serde_json::to_vec(doc).unwrap();
    let (st, _, body) = http(
        reg.addr,
        "PUT",
        &format!("/v2/{repo}/manifests/{reference}"),
        &[("content-type", media_type)],
        &bytes,
    );
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));
    (validator::Digest::sha256(&bytes).to_string(), bytes.len())
}

/// A Docker schema 2 image for `arch`; its manifest's digest and size, config and layer digests.
fn docker_image(reg: &Server, repo: &str, arch: &str) -> (String, usize, String, String) {
    let l = layer("hello", &format!("hello from {arch}\n"));
    let config = json!({
        "architecture": arch, "os": "linux", "created": "2024-01-01T00:00:00Z", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [validator::Digest::sha256(&flate2_decode(&l)).to_string()]},
    });
    let config = serde_json::to_vec(&config).unwrap();
    let (c, ld) = (put_blob(reg, repo, &config), put_blob(reg, repo, &l));
    let m = json!({
        "schemaVersion": 2,
        "mediaType": DOCKER_MANIFEST,
        "config": {"mediaType": "application/vnd.docker.container.image.v1+json", "size": config.len(), "digest": c},
        "layers": [{"mediaType": "application/vnd.docker.image.rootfs.diff.tar.gzip", "size": l.len(), "digest": ld}],
    });
    let (d, size) = put(reg, repo, arch, DOCKER_MANIFEST, &m);
    (d, size, c, ld)
}

fn flate2_decode(gz: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    std::io::Read::read_to_end(&mut flate2::read::GzDecoder::new(gz), &mut out).unwrap();
    out
}

fn index_json(layout: &Path) -> Value {
    serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap()
}

fn blob(layout: &Path, digest: &str) -> Value {
    let path = layout
        .join("blobs/sha256")
        .join(digest.trim_start_matches("sha256:"));
    serde_json::from_slice(&fs::read(&path).unwrap()).unwrap()
}

#[test]
fn a_docker_image_pulled_into_a_layout_gets_oci_media_types_and_skopeo_reads_it() {
    let dir = tempdir();
    let d = dir.path();
    let reg = Server::start(&d.join("data"), &[]);
    let host = reg.host();
    let repo = "docker/hello";
    let (amd64, amd64_size, config, layer) = docker_image(&reg, repo, "amd64");
    let (arm64, arm64_size, _, _) = docker_image(&reg, repo, "arm64");
    let list = json!({
        "schemaVersion": 2,
        "mediaType": DOCKER_LIST,
        "manifests": [
            {"mediaType": DOCKER_MANIFEST, "size": amd64_size, "digest": amd64,
             "platform": {"architecture": "amd64", "os": "linux"}},
            {"mediaType": DOCKER_MANIFEST, "size": arm64_size, "digest": arm64,
             "platform": {"architecture": "arm64", "os": "linux"}},
        ],
    });
    let (list_digest, _) = put(&reg, repo, "all", DOCKER_LIST, &list);

    // One manifest: written with OCI media types, the change printed, skopeo reads it by tag.
    let out = d.join("one");
    let pulled = ok(rdctl().args(["pull", &format!("{host}/{repo}:amd64"), s(&out)]));
    let text = String::from_utf8(pulled.stdout).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("converted {amd64} ({DOCKER_MANIFEST}) to sha256:")))
        .unwrap_or_else(|| panic!("no conversion reported: {text}"));
    assert!(line.contains(&format!("({OCI_MANIFEST})")), "{line}");
    let entry = &index_json(&out)["manifests"][0];
    assert_eq!(entry["mediaType"], OCI_MANIFEST, "{entry}");
    let new = entry["digest"].as_str().unwrap().to_owned();
    assert!(line.contains(&new), "{line} names {new}");
    assert_ne!(new, amd64);
    let m = blob(&out, &new);
    assert_eq!(m["mediaType"], OCI_MANIFEST);
    assert_eq!(
        m["config"]["mediaType"],
        "application/vnd.oci.image.config.v1+json"
    );
    assert_eq!(
        m["layers"][0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    // Config and layer byte for byte.
    assert_eq!(
        (
            m["config"]["digest"].as_str(),
            m["layers"][0]["digest"].as_str()
        ),
        (Some(config.as_str()), Some(layer.as_str()))
    );
    let inspected = ok(tool("skopeo").args(["inspect", &format!("oci:{}:amd64", s(&out))]));
    let v: Value = serde_json::from_slice(&inspected.stdout).unwrap();
    assert_eq!(v["Digest"], new.as_str(), "{v:#}");
    assert_eq!(v["Layers"][0], layer.as_str(), "{v:#}");
    ok(tool("skopeo").args([
        "copy",
        &format!("oci:{}:amd64", s(&out)),
        &format!("dir:{}", s(&d.join("dir"))),
    ]));
    assert!(
        d.join("dir")
            .join(layer.trim_start_matches("sha256:"))
            .is_file()
    );

    // A manifest list: an OCI index of OCI manifests; --json reports the three changes.
    let out = d.join("list");
    let pulled = ok(rdctl().args(["pull", "--json", &format!("{host}/{repo}:all"), s(&out)]));
    let report: Value = serde_json::from_slice(&pulled.stdout).unwrap();
    let converted = report["converted"].as_array().unwrap();
    let from: Vec<&str> = converted
        .iter()
        .map(|c| c["from"]["digest"].as_str().unwrap())
        .collect();
    assert_eq!(from.len(), 3, "{report:#}");
    for d in [&amd64, &arm64, &list_digest] {
        assert!(from.contains(&d.as_str()), "{d}: {report:#}");
    }
    let root = converted.last().unwrap();
    assert_eq!(root["from"]["digest"], list_digest.as_str());
    assert_eq!(root["to"]["media_type"], OCI_INDEX);
    assert_eq!(report["root"]["digest"], root["to"]["digest"], "{report:#}");
    let raw = ok(tool("skopeo").args(["inspect", "--raw", &format!("oci:{}:all", s(&out))]));
    let index: Value = serde_json::from_slice(&raw.stdout).unwrap();
    assert_eq!(index["mediaType"], OCI_INDEX, "{index:#}");
    for m in index["manifests"].as_array().unwrap() {
        assert_eq!(m["mediaType"], OCI_MANIFEST, "{index:#}");
    }
    ok(tool("skopeo").args([
        "copy",
        "--all",
        &format!("oci:{}:all", s(&out)),
        &format!("oci:{}:all", s(&d.join("copied"))),
    ]));
    // rdctl reads what it wrote.
    ok(rdctl().args(["inspect", &format!("oci:{}:all", s(&out))]));

    // --keep-media-types: byte-exact, digests kept; skopeo's oci: transport finds no OCI
    // descriptor for the tag (the reason pulls convert by default).
    let out = d.join("kept");
    let pulled = ok(rdctl().args([
        "pull",
        "--keep-media-types",
        &format!("{host}/{repo}:amd64"),
        s(&out),
    ]));
    assert!(!String::from_utf8_lossy(&pulled.stdout).contains("converted"));
    let entry = &index_json(&out)["manifests"][0];
    assert_eq!(
        (entry["digest"].as_str(), entry["mediaType"].as_str()),
        (Some(amd64.as_str()), Some(DOCKER_MANIFEST))
    );
    let refused = tool("skopeo")
        .args(["inspect", &format!("oci:{}:amd64", s(&out))])
        .output()
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("no descriptor found"),
        "{}",
        String::from_utf8_lossy(&refused.stderr)
    );
}
