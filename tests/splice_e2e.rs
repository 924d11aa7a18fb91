//! Gzip layers with spliced payloads (each IPS payload's stored deflate data copied into the
//! layer as a gzip member of its own) read by every client we ship to: `rdctl validate`, the
//! worker's unpack, GNU gzip and tar, Go's `compress/gzip` (crane export, skopeo, umoci 0.6)
//! and Debian's umoci 0.4.7. One payload is stored as two gzip members (as `cat a.gz b.gz`
//! makes; pkg's Python `gzip` reads it as one file): its first member is spliced, the rest of
//! its content deflated by rdctl (the fallback).

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::Command;

use ips_bridge::{HashAlg, hash_hex};

use crate::util::{Server, ok, rdctl, s, tail, tempdir, tool};
use crate::worker_e2e::{Node, assert_same_tree, ips_image};

const PUBLISHER: &str = "example.org";

/// About 1 MiB of text, compressible like source or documentation.
fn big_text() -> Vec<u8> {
    (0..120_000u32)
        .flat_map(|i| {
            format!("line {} of {}\n", i, i.wrapping_mul(2_654_435_761) % 977).into_bytes()
        })
        .collect()
}

fn multi_text() -> Vec<u8> {
    (0..40_000u32)
        .flat_map(|i| format!("{} multi\n", i % 3001).into_bytes())
        .collect()
}

fn gzip_member(content: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
    e.write_all(content).unwrap();
    e.finish().unwrap()
}

/// The stored payload file of `content` in the repository (named by its SHA-1).
fn payload_path(repo: &Path, content: &[u8]) -> PathBuf {
    let sha1 = hash_hex(HashAlg::Sha1, content);
    repo.join("publisher")
        .join(PUBLISHER)
        .join("file")
        .join(&sha1[..2])
        .join(&sha1)
}

/// `demo/data`: `big.txt` published from the proto directory (one gzip member, spliced) and
/// `multi.txt`, whose payload is put into the repository as two gzip members first and
/// published by its hashes. The image file then includes it.
fn publish_data(dir: &Path, image: &Path) {
    let repo = dir.join("repo");
    let proto = dir.join("proto-data");
    std::fs::create_dir_all(proto.join("usr/share/data")).unwrap();
    std::fs::write(proto.join("usr/share/data/big.txt"), big_text()).unwrap();
    let multi = multi_text();
    let (a, b) = multi.split_at(multi.len() / 3);
    let stored = [gzip_member(a), gzip_member(b)].concat();
    let path = payload_path(&repo, &multi);
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(&path, &stored).unwrap();
    let manifest = format!(
        "set name=pkg.fmri value=pkg:/demo/data@1.0,5.11-2024.0:20240103T000000Z
set name=pkg.summary value=\"Data files\"
depend type=require fmri=system/core@1.0
dir path=usr/share mode=0755 owner=root group=sys
dir path=usr/share/data mode=0755 owner=root group=bin
file path=usr/share/data/big.txt mode=0444 owner=root group=bin
file {sha1} path=usr/share/data/multi.txt mode=0444 owner=root group=bin chash={chash} pkg.size={size} pkg.csize={csize} pkg.content-hash=file:sha512t_256:{file} pkg.content-hash=gzip:sha512t_256:{gzip}
",
        sha1 = hash_hex(HashAlg::Sha1, &multi),
        chash = hash_hex(HashAlg::Sha1, &stored),
        size = multi.len(),
        csize = stored.len(),
        file = hash_hex(HashAlg::Sha512t256, &multi),
        gzip = hash_hex(HashAlg::Sha512t256, &stored),
    );
    let m = dir.join("data.p5m");
    std::fs::write(&m, manifest).unwrap();
    ok(rdctl().args([
        "ips",
        "publish",
        "--repo",
        s(&repo),
        "--publisher",
        PUBLISHER,
        "--proto",
        s(&proto),
        s(&m),
    ]));
    let text = std::fs::read_to_string(image).unwrap();
    let text = text.replace(
        "include = [\"demo/tool\"]",
        "include = [\"demo/tool\", \"demo/data\"]",
    );
    std::fs::write(image, text).unwrap();
    ok(rdctl().arg("lock").arg(image));
}

/// The one layer blob of the image tagged `1.0` in `layout`.
fn layer_blob(layout: &Path) -> Vec<u8> {
    let blob = |d: &str| {
        let (alg, hex) = d.split_once(':').unwrap();
        std::fs::read(layout.join("blobs").join(alg).join(hex)).unwrap()
    };
    let json = |b: Vec<u8>| serde_json::from_slice::<serde_json::Value>(&b).unwrap();
    let index = json(std::fs::read(layout.join("index.json")).unwrap());
    let entry = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == "1.0")
        .unwrap();
    let manifest = json(blob(entry["digest"].as_str().unwrap()));
    let layers = manifest["layers"].as_array().unwrap();
    assert_eq!(layers.len(), 1);
    assert_eq!(
        layers[0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+gzip"
    );
    blob(layers[0]["digest"].as_str().unwrap())
}

/// The gzip members of `gz`, each read on its own.
fn members(gz: &[u8]) -> usize {
    let mut n = 0;
    let mut rest = gz;
    while !rest.is_empty() {
        let mut d = flate2::bufread::GzDecoder::new(rest);
        std::io::copy(&mut d, &mut std::io::sink()).unwrap();
        rest = d.into_inner();
        n += 1;
    }
    n
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack.windows(needle.len()).any(|w| w == needle)
}

/// The data files and the tool, as a client unpacked them into `root`.
fn assert_files(who: &str, root: &Path) {
    let read = |p: &str| std::fs::read(root.join(p)).unwrap_or_else(|e| panic!("{who}: {p}: {e}"));
    assert!(
        read("usr/share/data/big.txt") == big_text(),
        "{who}: big.txt"
    );
    assert!(
        read("usr/share/data/multi.txt") == multi_text(),
        "{who}: multi.txt"
    );
    assert_eq!(read("usr/bin/tool"), b"#!/bin/sh\necho tool\n", "{who}");
}

/// The regular files of a tar stream, by path.
fn tar_files(tar: &[u8]) -> std::collections::BTreeMap<String, Vec<u8>> {
    let mut ar = tar::Archive::new(tar);
    ar.entries()
        .unwrap()
        .filter_map(|e| {
            let mut e = e.unwrap();
            if e.header().entry_type() != tar::EntryType::Regular {
                return None;
            }
            let path = e.path().unwrap().display().to_string();
            let mut v = Vec::new();
            e.read_to_end(&mut v).unwrap();
            Some((path.trim_start_matches("./").to_owned(), v))
        })
        .collect()
}

#[test]
fn spliced_gzip_layers_are_read_by_every_client() {
    let t = tempdir();
    let dir = t.path();
    let image = ips_image(dir);
    publish_data(dir, &image);
    let server = Server::start(&dir.join("registry"), &[]);
    let host = server.host();
    let reference = format!("{host}/splice/img:1.0");
    let layout = dir.join("layout");
    ok(rdctl()
        .arg("build")
        .arg(&image)
        .args(["--output", s(&layout), "--push", &reference])
        .env("SOURCE_DATE_EPOCH", "1700000000"));

    // The big payload's deflate data is in the layer as published; the two-member payload's
    // first member too, its second member's content deflated again by rdctl.
    let layer = layer_blob(&layout);
    let repo = dir.join("repo");
    let big = std::fs::read(payload_path(&repo, &big_text())).unwrap();
    assert!(contains(&layer, &big[10..big.len() - 8]), "big.txt spliced");
    let multi = multi_text();
    let first = gzip_member(&multi[..multi.len() / 3]);
    let second = gzip_member(&multi[multi.len() / 3..]);
    assert!(
        contains(&layer, &first[10..first.len() - 8]),
        "first member spliced"
    );
    assert!(
        !contains(&layer, &second[10..second.len() - 8]),
        "second member deflated again"
    );
    // Spliced members alternate with ours (headers and padding): many members.
    assert!(members(&layer) > 10, "{} members", members(&layer));

    // Our validator (deep: every member decompressed, the DiffID checked).
    let out = ok(rdctl().args(["validate", &format!("{}:1.0", s(&layout)), "--json"]));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["valid"], true, "{report:#}");

    // GNU gzip and tar.
    let gz = dir.join("layer.tar.gz");
    std::fs::write(&gz, &layer).unwrap();
    let gunzip = ok(Command::new("gzip").arg("-dc").arg(&gz));
    let files = tar_files(&gunzip.stdout);
    assert!(files["usr/share/data/big.txt"] == big_text());
    assert!(files["usr/share/data/multi.txt"] == multi_text());
    let gnu_root = dir.join("gnu-tar");
    std::fs::create_dir_all(&gnu_root).unwrap();
    ok(Command::new("tar")
        .arg("-xzf")
        .arg(&gz)
        .arg("-C")
        .arg(&gnu_root));
    assert_files("GNU tar -z", &gnu_root);

    // Go's compress/gzip: crane flattens the pushed image's layers into a tar.
    let exported = dir.join("crane.tar");
    ok(tool("crane").args(["export", "--insecure", &reference, s(&exported)]));
    let files = tar_files(&std::fs::read(&exported).unwrap());
    assert!(
        files["usr/share/data/big.txt"] == big_text(),
        "crane export"
    );
    assert!(
        files["usr/share/data/multi.txt"] == multi_text(),
        "crane export"
    );

    // skopeo copies the pushed image into a layout (blobs as they are), umoci 0.6 and
    // Debian's umoci 0.4.7 unpack it.
    let copied = dir.join("skopeo");
    ok(tool("skopeo").args([
        "copy",
        "--quiet",
        "--src-tls-verify=false",
        &format!("docker://{reference}"),
        &format!("oci:{}:1.0", s(&copied)),
    ]));
    let umoci06 = dir.join("umoci-0.6");
    ok(tool("umoci-0.6").args([
        "raw",
        "unpack",
        "--rootless",
        "--image",
        &format!("{}:1.0", s(&copied)),
        s(&umoci06),
    ]));
    assert_files("umoci 0.6", &umoci06);
    let umoci047 = dir.join("umoci-0.4.7");
    ok(Command::new("umoci").args([
        "raw",
        "unpack",
        "--rootless",
        "--image",
        &format!("{}:1.0", s(&copied)),
        s(&umoci047),
    ]));
    assert_files("umoci 0.4.7", &umoci047);

    // The worker pulls, verifies and unpacks it: the same tree as umoci's.
    let node = Node::new(&dir.join("node"));
    node.zone("spliced", &reference);
    let out = node.run_once();
    assert!(
        out.status.success(),
        "worker run failed: {}\nstderr:\n{}",
        out.status,
        tail(&out.stderr)
    );
    assert_files("worker", &node.root("spliced"));
    assert_same_tree("spliced", &node.root("spliced"), &umoci06, false);
}
