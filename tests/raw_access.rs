//! Raw access as crane and oras users expect it (issue 37): `rdctl manifest get`, `digest`,
//! `config` and `blob get` give the bytes crane gives, verified; `rdctl artifact put|get`
//! interoperate with the real oras both ways; `rdctl sbom --document` prints the SPDX
//! document byte for byte.

use std::path::Path;

use crate::transfer::umoci_image;
use crate::util::{Server, ok, rdctl, s, tempdir, tool};

fn sha256(bytes: &[u8]) -> String {
    validator::Digest::sha256(bytes).to_string()
}

fn crane(args: &[&str]) -> Vec<u8> {
    let mut all = args.to_vec();
    all.push("--insecure");
    ok(tool("crane").args(&all)).stdout
}

fn oras(args: &[&str]) -> Vec<u8> {
    let mut all = args.to_vec();
    all.push("--plain-http");
    ok(tool("oras").args(&all)).stdout
}

#[test]
fn manifest_digest_config_and_blob_match_crane() {
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, "raw\n");
    let server = Server::start(&dir.join("data"), &[]);
    let remote = format!("{}/raw/a:v1", server.host());
    let layout = format!("{}:v1", s(&img));
    ok(rdctl().args(["push", &layout, &remote]));

    let manifest = ok(rdctl().args(["manifest", "get", &remote])).stdout;
    assert_eq!(manifest, crane(&["manifest", &remote]));
    let digest = String::from_utf8(ok(rdctl().args(["digest", &remote])).stdout).unwrap();
    assert_eq!(digest.trim(), sha256(&manifest));
    assert_eq!(
        digest.trim(),
        String::from_utf8(crane(&["digest", &remote]))
            .unwrap()
            .trim()
    );
    // The same from the layout, and by digest.
    assert_eq!(
        ok(rdctl().args(["manifest", "get", &layout])).stdout,
        manifest
    );
    let by_digest = format!("{}/raw/a@{}", server.host(), digest.trim());
    assert_eq!(
        ok(rdctl().args(["manifest", "get", &by_digest])).stdout,
        manifest
    );

    let config = ok(rdctl().args(["config", &remote])).stdout;
    assert_eq!(config, crane(&["config", &remote]));
    assert_eq!(ok(rdctl().args(["config", &layout])).stdout, config);

    let m: serde_json::Value = serde_json::from_slice(&manifest).unwrap();
    let layer = m["layers"][0]["digest"].as_str().unwrap();
    let blob_ref = format!("{}/raw/a@{layer}", server.host());
    let out = dir.join("layer.tar.gz");
    ok(rdctl().args(["blob", "get", &blob_ref, "-o", s(&out)]));
    let bytes = std::fs::read(&out).unwrap();
    assert_eq!(sha256(&bytes), layer);
    assert_eq!(bytes, crane(&["blob", &blob_ref]));
    assert_eq!(ok(rdctl().args(["blob", "get", &blob_ref])).stdout, bytes);
    let layout_blob = format!("oci:{}@{layer}", s(&img));
    assert_eq!(
        ok(rdctl().args(["blob", "get", &layout_blob])).stdout,
        bytes
    );

    // A blob whose bytes do not match its digest fails and leaves no file behind.
    let hex = layer.trim_start_matches("sha256:");
    let file = img.join("blobs/sha256").join(hex);
    let mut bad = bytes.clone();
    let last = bad.len() - 1;
    bad[last] ^= 0xff;
    std::fs::write(&file, &bad).unwrap();
    let broken = dir.join("broken.tar.gz");
    let o = rdctl()
        .args(["blob", "get", &layout_blob, "-o", s(&broken)])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(hex), "{err}");
    assert!(!broken.exists(), "a blob that did not verify was kept");
    // A blob is named by digest; a tag is refused with what to write.
    let o = rdctl().args(["blob", "get", &remote]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("a blob is named by digest"), "{err}");
    let missing = format!("{}/raw/a@sha256:{}", server.host(), "0".repeat(64));
    let o = rdctl().args(["blob", "get", &missing]).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("not found"), "{err}");
    drop(server);
}

fn files_in(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().into_string().unwrap(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn artifacts_travel_between_rdctl_and_oras_both_ways() {
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, "artifacts\n");
    let server = Server::start(&dir.join("data"), &[]);
    let host = server.host();
    let image = format!("{host}/art/app:v1");
    ok(rdctl().args(["push", &format!("{}:v1", s(&img)), &image]));

    // rdctl puts a referrer of the image; oras finds it and pulls the same files.
    let src = dir.join("src");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("notes.txt"), "release notes\n").unwrap();
    std::fs::write(src.join("data.json"), "{\"a\": 1}\n").unwrap();
    let put = ok(rdctl().current_dir(&src).args([
        "artifact",
        "put",
        "--artifact-type",
        "application/vnd.example.notes",
        "--subject",
        &image,
        &format!("{host}/art/app"),
        "notes.txt",
        "data.json:application/json",
    ]));
    let digest = String::from_utf8(put.stdout).unwrap().trim().to_owned();
    assert!(digest.starts_with("sha256:"), "{digest}");
    let found: serde_json::Value = serde_json::from_slice(&oras(&[
        "discover",
        "--format",
        "json",
        "--artifact-type",
        "application/vnd.example.notes",
        &image,
    ]))
    .unwrap();
    assert_eq!(
        found["referrers"][0]["digest"].as_str(),
        Some(digest.as_str()),
        "{found}"
    );
    let by_oras = dir.join("by-oras");
    oras(&[
        "pull",
        "-o",
        s(&by_oras),
        &format!("{host}/art/app@{digest}"),
    ]);
    assert_eq!(files_in(&by_oras), files_in(&src));
    let fetched: serde_json::Value = serde_json::from_slice(&oras(&[
        "manifest",
        "fetch",
        &format!("{host}/art/app@{digest}"),
    ]))
    .unwrap();
    assert_eq!(fetched["artifactType"], "application/vnd.example.notes");
    assert_eq!(fetched["layers"][1]["mediaType"], "application/json");
    assert_eq!(
        fetched["subject"]["digest"].as_str().map(str::to_owned),
        Some(
            String::from_utf8(ok(rdctl().args(["digest", &image])).stdout)
                .unwrap()
                .trim()
                .to_owned()
        )
    );

    // oras pushes; rdctl gets the same files.
    let from_oras = dir.join("from-oras");
    std::fs::create_dir(&from_oras).unwrap();
    std::fs::write(from_oras.join("hello.txt"), "hello from oras\n").unwrap();
    let mut push = tool("oras");
    push.current_dir(&from_oras).args([
        "push",
        "--plain-http",
        "--artifact-type",
        "application/vnd.example.hello",
        &format!("{host}/art/hello:1"),
        "hello.txt:text/plain",
    ]);
    ok(&mut push);
    let by_rdctl = dir.join("by-rdctl");
    let got = ok(rdctl().args([
        "artifact",
        "get",
        &format!("{host}/art/hello:1"),
        "-o",
        s(&by_rdctl),
    ]));
    let text = String::from_utf8_lossy(&got.stdout);
    assert!(text.contains("application/vnd.example.hello"), "{text}");
    assert_eq!(files_in(&by_rdctl), files_in(&from_oras));
    // And rdctl's own artifact back, without a subject, by tag.
    let plain = ok(rdctl().current_dir(&src).args([
        "artifact",
        "put",
        "--artifact-type",
        "application/vnd.example.notes",
        &format!("{host}/art/notes:1"),
        "notes.txt",
    ]));
    assert!(!plain.stdout.is_empty());
    let back = dir.join("back");
    ok(rdctl().args([
        "artifact",
        "get",
        &format!("{host}/art/notes:1"),
        "-o",
        s(&back),
    ]));
    assert_eq!(
        std::fs::read(back.join("notes.txt")).unwrap(),
        b"release notes\n"
    );
    // A subject in another repository is refused by name.
    let o = rdctl()
        .current_dir(&src)
        .args([
            "artifact",
            "put",
            "--artifact-type",
            "application/vnd.example.notes",
            "--subject",
            &image,
            &format!("{host}/art/other"),
            "notes.txt",
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is not in") && err.contains("art/other"),
        "{err}"
    );
    drop(server);
}

#[test]
fn sbom_document_prints_the_spdx_document_itself() {
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, "sbom\n");
    let server = Server::start(&dir.join("data"), &[]);
    let host = server.host();
    let image = format!("{host}/sb/app:v1");
    ok(rdctl().args(["push", &format!("{}:v1", s(&img)), &image]));
    let spdx = "{\"spdxVersion\": \"SPDX-2.3\", \"name\": \"app\",\n \"packages\": [{\"name\": \"web/server/nginx\", \"versionInfo\": \"1.24.0\"}]}\n";
    std::fs::write(dir.join("sbom.spdx.json"), spdx).unwrap();
    ok(rdctl().current_dir(dir).args([
        "artifact",
        "put",
        "--artifact-type",
        "application/spdx+json",
        "--subject",
        &image,
        &format!("{host}/sb/app"),
        "sbom.spdx.json:application/spdx+json",
    ]));
    let doc = ok(rdctl().args(["sbom", "--document", &image])).stdout;
    assert_eq!(doc, spdx.as_bytes());
    let listed = String::from_utf8(ok(rdctl().args(["sbom", &image])).stdout).unwrap();
    assert!(listed.contains("web/server/nginx"), "{listed}");
    drop(server);
}

/// Issue 51: a title with directories (`sub/inner.txt`, as `oras push sub/inner.txt` writes
/// it) is restored under the output directory as `oras pull` restores it; a title that would
/// leave the output directory (`..`, absolute) is refused by name and nothing is written.
#[test]
fn artifact_get_restores_titles_with_directories_inside_the_output_only() {
    use crate::package_search::{put_blob, put_manifest};
    let tmp = tempdir();
    let dir = tmp.path();
    let server = Server::start(&dir.join("data"), &[]);
    let host = server.host();
    let src = dir.join("src");
    std::fs::create_dir_all(src.join("sub/deeper")).unwrap();
    std::fs::write(src.join("top.txt"), "top\n").unwrap();
    std::fs::write(src.join("sub/inner.txt"), "inner\n").unwrap();
    std::fs::write(src.join("sub/deeper/leaf.txt"), "leaf\n").unwrap();
    let mut push = tool("oras");
    push.current_dir(&src).args([
        "push",
        "--plain-http",
        "--artifact-type",
        "application/vnd.example.tree",
        &format!("{host}/art/tree:1"),
        "top.txt",
        "sub/inner.txt",
        "sub/deeper/leaf.txt",
    ]);
    ok(&mut push);
    let by_oras = dir.join("by-oras");
    oras(&["pull", "-o", s(&by_oras), &format!("{host}/art/tree:1")]);
    let by_rdctl = dir.join("by-rdctl");
    let got = ok(rdctl().args([
        "artifact",
        "get",
        &format!("{host}/art/tree:1"),
        "-o",
        s(&by_rdctl),
    ]));
    let text = String::from_utf8_lossy(&got.stdout);
    assert!(!text.contains("skipped"), "{text}");
    for f in ["top.txt", "sub/inner.txt", "sub/deeper/leaf.txt"] {
        assert_eq!(
            std::fs::read(by_rdctl.join(f)).unwrap_or_default(),
            std::fs::read(by_oras.join(f)).unwrap(),
            "{f}: rdctl and oras restore it alike ({text})"
        );
    }
    // Titles that leave the output directory are refused, naming the title.
    let empty = put_blob(&server, "art/evil", b"{}");
    let layer = put_blob(&server, "art/evil", b"evil\n");
    for (tag, title) in [
        ("up", "../escaped.txt"),
        ("abs", "/tmp/escaped.txt"),
        ("mid", "sub/../../escaped.txt"),
    ] {
        let m = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/vnd.example.evil",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
            "layers": [{"mediaType": "text/plain", "digest": layer, "size": 5,
                        "annotations": {"org.opencontainers.image.title": title}}],
        });
        put_manifest(&server, "art/evil", tag, &m);
        let out_dir = dir.join("out").join(tag);
        let o = rdctl()
            .args([
                "artifact",
                "get",
                &format!("{host}/art/evil:{tag}"),
                "-o",
                s(&out_dir),
            ])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{title}: {err}");
        assert!(err.contains(title), "{title}: {err}");
        assert!(!dir.join("escaped.txt").exists() && !dir.join("out/escaped.txt").exists());
    }
    assert!(!Path::new("/tmp/escaped.txt").exists());
    drop(server);
}
