//! Layouts made by real tools must validate; broken ones made by real tools must not.
//!
//! umoci v0.6.0 (Go module, `.tools/bin/umoci-0.6`) and Debian's umoci 0.4.7 create, insert and
//! repack; skopeo copies with gzip and zstd. Every image is then checked deeply by `rdctl
//! validate`, and the DiffIDs it reports are compared with what the tools wrote.

use std::path::Path;
use std::process::Command;

use crate::util::{ok, rules, s, tempdir, tool, validate_json};

/// new → config (command, StopSignal) → insert a file → unpack → change → repack, and an
/// illumos variant. The repack starts from the inserted image when `repack_inserted`.
fn build_with(umoci: &str, dir: &Path, insert: bool, repack_inserted: bool) {
    let img = dir.join("img");
    ok(tool(umoci).args(["init", "--layout", s(&img)]));
    ok(tool(umoci).args(["new", "--image", &format!("{}:base", s(&img))]));
    ok(tool(umoci).args([
        "config",
        "--image",
        &format!("{}:base", s(&img)),
        "--tag",
        "cfg",
        "--config.cmd",
        "/usr/bin/app",
        "--config.stopsignal",
        "SIGPWR",
        "--config.workingdir",
        "/srv",
    ]));
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("etc")).unwrap();
    std::fs::write(src.join("etc/motd"), b"hello from umoci\n").unwrap();
    if insert {
        ok(tool(umoci).args([
            "insert",
            "--rootless",
            "--image",
            &format!("{}:cfg", s(&img)),
            "--tag",
            "inserted",
            s(&src.join("etc/motd")),
            "/etc/motd",
        ]));
    }
    // unpack → change the root → repack: umoci's own diff of the bundle becomes a new layer.
    let bundle = dir.join("bundle");
    let from = if repack_inserted { "inserted" } else { "cfg" };
    ok(tool(umoci).args([
        "unpack",
        "--rootless",
        "--image",
        &format!("{}:{from}", s(&img)),
        s(&bundle),
    ]));
    let rootfs = bundle.join("rootfs");
    std::fs::create_dir_all(rootfs.join("usr/bin")).unwrap();
    std::fs::write(rootfs.join("usr/bin/app"), b"#!/bin/sh\necho app\n").unwrap();
    std::os::unix::fs::symlink("usr/bin", rootfs.join("bin")).unwrap();
    std::fs::hard_link(rootfs.join("usr/bin/app"), rootfs.join("usr/bin/app2")).unwrap();
    ok(tool(umoci).args([
        "repack",
        "--image",
        &format!("{}:repacked", s(&img)),
        s(&bundle),
    ]));
    // An illumos image: umoci cannot unpack it (no runtime config for illumos), so its layer is
    // added raw, from a GNU tar of the same tree.
    ok(tool(umoci).args([
        "config",
        "--image",
        &format!("{}:cfg", s(&img)),
        "--tag",
        "illumos",
        "--os",
        "illumos",
    ]));
    ok(tool(umoci).args([
        "raw",
        "add-layer",
        "--image",
        &format!("{}:illumos", s(&img)),
        s(&layer_tar(dir, &rootfs)),
    ]));
}

/// A plain tar of `root`'s contents (GNU tar, sorted, numeric owners).
fn layer_tar(dir: &Path, root: &Path) -> std::path::PathBuf {
    let out = dir.join("layer.tar");
    ok(Command::new("tar")
        .args([
            "--sort=name",
            "--numeric-owner",
            "--owner=0",
            "--group=0",
            "-cf",
        ])
        .arg(&out)
        .arg("-C")
        .arg(root)
        .arg("."));
    out
}

fn assert_valid(target: &str, images: usize) -> serde_json::Value {
    let (code, report) = validate_json(&[target]);
    assert_eq!(code, 0, "{target}: {report:#}");
    assert_eq!(
        report["images"].as_array().unwrap().len(),
        images,
        "{report:#}"
    );
    report
}

#[test]
fn umoci_0_6_layouts_validate() {
    let dir = tempdir();
    build_with("umoci-0.6", dir.path(), true, true);
    let img = dir.path().join("img");
    let report = assert_valid(s(&img), 5);
    let repacked = assert_valid(&format!("{}:repacked", s(&img)), 1);
    let image = &repacked["images"][0];
    assert_eq!(image["stop_signal"], "SIGPWR");
    // The inserted layer and the repacked diff.
    assert_eq!(image["layers"].as_array().unwrap().len(), 2);
    let (code, illumos) = validate_json(&[
        "--platform",
        "illumos/amd64",
        &format!("{}:illumos", s(&img)),
    ]);
    assert_eq!(code, 0, "{illumos:#}");
    assert_eq!(illumos["images"][0]["platform"]["os"], "illumos");
    // `umoci new` makes an image with no layers and no command: warnings, not errors.
    for r in rules(&report) {
        assert!(r == "nothing-to-run" || r == "no-layers", "{report:#}");
    }
}

#[test]
fn debian_umoci_layouts_validate_and_its_truncated_insert_is_caught() {
    let dir = tempdir();
    build_with("umoci", dir.path(), true, false);
    let img = dir.path().join("img");
    assert_valid(&format!("{}:repacked", s(&img)), 1);
    assert_valid(&format!("{}:cfg", s(&img)), 1);
    assert_valid(&format!("{}:illumos", s(&img)), 1);
    // umoci 0.4.7's `insert` writes a layer whose tar stream stops inside the file's padding,
    // without end blocks; GNU tar refuses it too. The validator must say so.
    let (code, report) = validate_json(&[&format!("{}:inserted", s(&img))]);
    assert_eq!(code, 1, "{report:#}");
    assert!(
        rules(&report).contains(&"tar-truncated".to_owned()),
        "{report:#}"
    );
    let layer = report["images"][0]["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let blob = img
        .join("blobs/sha256")
        .join(layer.trim_start_matches("sha256:"));
    let gnu = Command::new("tar").arg("-tzf").arg(&blob).output().unwrap();
    assert!(
        !gnu.status.success(),
        "GNU tar accepted the layer the validator refused"
    );
}

#[test]
fn skopeo_copies_validate_in_gzip_and_zstd() {
    let dir = tempdir();
    build_with("umoci-0.6", dir.path(), false, false);
    let src = format!("oci:{}:repacked", s(&dir.path().join("img")));
    for (name, extra) in [
        ("gzip", vec![]),
        ("zstd", vec!["--dest-compress-format", "zstd"]),
    ] {
        let dst = dir.path().join(format!("copy-{name}"));
        let mut cmd = tool("skopeo");
        cmd.args(["--insecure-policy", "copy"])
            .args(&extra)
            .arg(&src)
            .arg(format!("oci:{}:v1", s(&dst)));
        ok(&mut cmd);
        let report = assert_valid(&format!("{}:v1", s(&dst)), 1);
        if name == "zstd" {
            let m = &report["images"][0]["manifest"];
            let bytes = std::fs::read(
                dst.join("blobs/sha256")
                    .join(m.as_str().unwrap().trim_start_matches("sha256:")),
            )
            .unwrap();
            assert!(
                String::from_utf8_lossy(&bytes).contains("tar+zstd"),
                "skopeo did not write zstd"
            );
        }
    }
}

#[test]
fn tampering_with_a_real_layout_is_caught() {
    let dir = tempdir();
    build_with("umoci-0.6", dir.path(), false, false);
    let img = dir.path().join("img");
    let report = assert_valid(&format!("{}:repacked", s(&img)), 1);
    let layer = report["images"][0]["layers"][0]["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let blob = img
        .join("blobs/sha256")
        .join(layer.trim_start_matches("sha256:"));
    let mut bytes = std::fs::read(&blob).unwrap();
    let n = bytes.len();
    bytes[n / 2] ^= 0x55;
    std::fs::write(&blob, &bytes).unwrap();
    let (code, report) = validate_json(&[&format!("{}:repacked", s(&img))]);
    assert_eq!(code, 1);
    assert!(
        rules(&report).contains(&"blob-digest".to_owned()),
        "{report:#}"
    );
}
