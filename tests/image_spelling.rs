//! One spelling of an image for every command (issue 37): a layout is `oci:DIR[:TAG|@DIGEST]`
//! or, without `oci:`, `DIR[:TAG|@DIGEST]` when DIR starts with `/` or `.` or is a directory
//! here; skopeo's other transports are refused by name; `rdctl rm REPO@DIGEST` of a manifest
//! an index still lists is refused (MANIFEST_REFERENCED) unless `--force`.

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

use crate::transfer::umoci_image;
use crate::util::{Server, ok, rdctl, s, tail, tempdir};

/// rdctl run in `dir`, so relative spellings are relative to it.
fn rd(dir: &Path) -> Command {
    let mut c = rdctl();
    c.current_dir(dir);
    c
}

fn json(dir: &Path, args: &[&str]) -> Value {
    let out = ok(rd(dir).args(args).arg("--json"));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", tail(&out.stdout)))
}

fn fails(dir: &Path, args: &[&str]) -> String {
    let out: Output = rd(dir).args(args).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?} should exit 2: {}{err}",
        tail(&out.stdout)
    );
    err
}

fn digest_of(layout: &Path, tag: &str) -> String {
    let index: Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_owned()
}

fn tags(dir: &Path, layout: &str) -> Vec<String> {
    json(dir, &["ls", layout])["tags"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|t| t["tag"].as_str().map(str::to_owned))
        .collect()
}

#[test]
fn every_command_takes_dir_and_oci_dir_for_a_layout() {
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, "hello\n");
    let digest = digest_of(&img, "v1");
    let abs = s(&img).to_owned();
    ok(rd(dir)
        .args(["key", "generate", "--output-key-prefix", "k"])
        .env("COSIGN_PASSWORD", ""));
    for (i, (layout, image)) in [
        ("./img".to_owned(), "./img:v1".to_owned()),
        ("oci:img".to_owned(), "oci:img:v1".to_owned()),
        ("img".to_owned(), "img:v1".to_owned()),
        (abs.clone(), format!("{abs}:v1")),
        (format!("oci:{abs}"), format!("oci:{abs}:v1")),
    ]
    .into_iter()
    .enumerate()
    {
        let by_digest = format!("{layout}@{digest}");
        for spelled in [&image, &by_digest] {
            assert_eq!(
                json(dir, &["inspect", spelled])["digest"],
                digest,
                "{spelled}"
            );
            let v = json(dir, &["validate", spelled]);
            assert_eq!(v["valid"], true, "{spelled}: {v:#}");
            assert_eq!(v["images"][0]["manifest"], digest, "{spelled}: {v:#}");
        }
        let extra = format!("t{i}");
        assert_eq!(json(dir, &["tag", &image, &extra])["digest"], digest);
        assert!(tags(dir, &layout).contains(&extra), "{layout}");
        ok(rd(dir).args(["rm", &format!("{layout}:{extra}")]));
        assert!(!tags(dir, &layout).contains(&extra), "{layout}");
        // sbom and verify read the layout (which has neither SBOM nor signature).
        for args in [
            vec!["sbom", image.as_str()],
            vec!["verify", "--key", "k.pub", image.as_str()],
        ] {
            let out = rd(dir).args(&args).output().unwrap();
            let err = String::from_utf8_lossy(&out.stderr);
            assert!(!out.status.success(), "{args:?}");
            assert!(
                !err.contains("invalid image reference") && !err.contains("write oci:"),
                "{args:?} did not take the spelling: {err}"
            );
        }
    }
    // A layout that does not exist yet, spelled as a path, is a layout: copy writes it.
    ok(rd(dir).args(["copy", "./img:v1", "./copy:v1"]));
    assert_eq!(digest_of(&dir.join("copy"), "v1"), digest);
    // A name that is neither a path nor a registry reference fails at once, naming both.
    let err = fails(dir, &["inspect", "nothere:v1"]);
    assert!(err.contains("no registry host"), "{err}");
    let err = fails(dir, &["validate", "nothere:v1"]);
    assert!(
        err.contains("no such file, directory or layout:tag"),
        "{err}"
    );
    // A directory here whose name also names a registry is not guessed: both spellings.
    std::fs::create_dir_all(dir.join("reg.example/app")).unwrap();
    std::fs::create_dir_all(dir.join("localhost")).unwrap();
    for args in [
        vec!["inspect", "reg.example/app:1.0"],
        vec!["ls", "localhost:5000"],
    ] {
        let err = fails(dir, &args);
        assert!(
            err.contains("is a directory here") && err.contains("docker://"),
            "{args:?}: {err}"
        );
    }
}

#[test]
fn other_transports_are_named_as_unsupported() {
    let tmp = tempdir();
    let dir = tmp.path();
    std::fs::write(dir.join("k.pub"), "not a key").unwrap();
    for (input, transport) in [
        ("oci-archive:img.tar", "oci-archive"),
        ("oci-archive:img.tar:v1", "oci-archive"),
        ("docker-archive:img.tar", "docker-archive"),
        ("docker-daemon:busybox:latest", "docker-daemon"),
        ("containers-storage:localhost/app:1", "containers-storage"),
    ] {
        let want =
            format!("transport {transport}: is not supported; use oci:DIR or a registry reference");
        for args in [
            vec!["inspect", input],
            vec!["ls", input],
            vec!["tag", input, "x"],
            vec!["rm", input],
            vec!["sbom", input],
            vec!["validate", input],
            vec!["verify", "--key", "k.pub", input],
            vec!["push", input, "127.0.0.1:9/a:1"],
            vec!["pull", "127.0.0.1:9/a:1", input],
            vec!["copy", input, "oci:out:1"],
        ] {
            let err = fails(dir, &args);
            assert!(err.contains(&want), "{args:?}: {err}");
        }
    }
}

/// The index the test pushes: one entry, the `v1` manifest of `img`, tagged `multi`.
fn add_index(img: &Path, child: &str) {
    let size = std::fs::metadata(
        img.join("blobs/sha256")
            .join(child.split_once(':').unwrap().1),
    )
    .unwrap()
    .len();
    let index = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": child,
            "size": size,
            "platform": {"os": "linux", "architecture": "amd64"},
        }],
    }))
    .unwrap();
    let d = validator::Digest::sha256(&index);
    std::fs::write(img.join("blobs/sha256").join(d.encoded()), &index).unwrap();
    let path = img.join("index.json");
    let mut top: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    top["manifests"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": d.as_str(),
            "size": index.len(),
            "annotations": {"org.opencontainers.image.ref.name": "multi"},
        }));
    std::fs::write(&path, serde_json::to_vec(&top).unwrap()).unwrap();
}

#[test]
fn rm_refuses_a_manifest_an_index_lists_unless_forced() {
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, "hello\n");
    let child = digest_of(&img, "v1");
    add_index(&img, &child);
    let server = Server::start(&dir.join("data"), &[]);
    let repo = format!("{}/zones/app", server.host());
    ok(rd(dir).args(["push", "./img:multi", &format!("{repo}:multi")]));
    let by_digest = format!("{repo}@{child}");
    let err = fails(dir, &["rm", &by_digest]);
    assert!(
        err.contains("an index in") && err.contains("still lists this manifest"),
        "{err}"
    );
    assert!(
        err.contains("MANIFEST_REFERENCED") && err.contains("--force"),
        "{err}"
    );
    assert_eq!(
        json(dir, &["inspect", &by_digest])["digest"],
        child,
        "still there"
    );
    let out = json(dir, &["rm", "--force", &by_digest]);
    assert_eq!(out["removed"], true, "{out:#}");
    let err = fails(dir, &["inspect", &by_digest]);
    assert!(
        err.contains("not found") || err.contains("MANIFEST_UNKNOWN"),
        "{err}"
    );
    drop(server);
}

/// Issue 51: `docker://` names a registry image on every side of every command, so pull does
/// not write a directory `./docker:` and push does not look for a layout named `docker:`.
#[test]
fn docker_scheme_is_a_registry_on_both_sides_of_push_and_pull() {
    let tmp = tempdir();
    let dir = tmp.path();
    umoci_image(dir, "hello\n");
    let server = Server::start(&dir.join("data"), &[]);
    let host = server.host();
    ok(rd(dir).args(["push", "./img:v1", &format!("{host}/demo/hello:1.0")]));
    let registry_dst = format!("docker://{host}/x/y:1");
    let err = fails(
        dir,
        &["pull", &format!("{host}/demo/hello:1.0"), &registry_dst],
    );
    assert!(err.contains("names a registry image"), "{err}");
    assert!(err.contains("rdctl copy"), "{err}");
    assert!(
        !dir.join("docker:").exists(),
        "pull wrote a directory docker: for {registry_dst}"
    );
    let err = fails(
        dir,
        &[
            "push",
            &format!("docker://{host}/demo/hello:1.0"),
            &format!("{host}/x:1"),
        ],
    );
    assert!(err.contains("names a registry image"), "{err}");
    assert!(!err.contains("not an OCI image layout"), "{err}");
    // A layout spelled oci: where push writes to a registry is named as a layout.
    let err = fails(dir, &["push", "./img:v1", "oci:other:v1"]);
    assert!(err.contains("names an OCI image layout"), "{err}");
    drop(server);
}

/// Issue 51: `rm --dry-run REPO@DIGEST` of a manifest an index lists answers what `rm` would:
/// refused with MANIFEST_REFERENCED, naming the index; with `--force` it plans the removal.
#[test]
fn rm_dry_run_of_a_manifest_an_index_lists_is_refused_like_the_run() {
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, "hello\n");
    let child = digest_of(&img, "v1");
    add_index(&img, &child);
    let index = digest_of(&img, "multi");
    let server = Server::start(&dir.join("data"), &[]);
    let repo = format!("{}/zones/app", server.host());
    ok(rd(dir).args(["push", "./img:multi", &format!("{repo}:multi")]));
    let by_digest = format!("{repo}@{child}");
    let dry = fails(dir, &["rm", "--dry-run", &by_digest]);
    let real = fails(dir, &["rm", &by_digest]);
    for err in [&dry, &real] {
        assert!(
            err.contains("MANIFEST_REFERENCED") && err.contains("--force"),
            "{err}"
        );
        assert!(err.contains("still lists this manifest"), "{err}");
    }
    assert!(dry.contains(&index), "the dry run names the index: {dry}");
    let planned = json(dir, &["rm", "--dry-run", "--force", &by_digest]);
    assert_eq!(planned["dry_run"], true, "{planned:#}");
    assert_eq!(planned["listed_by"][0], index.as_str(), "{planned:#}");
    assert_eq!(
        json(dir, &["inspect", &by_digest])["digest"],
        child,
        "a dry run removes nothing"
    );
    drop(server);
}

/// Issue 51: `rdctl rm oci:DIR@DIGEST` of a signed image removes its `sha256-<hex>.sig` tag
/// as the same command does at a registry.
#[test]
fn rm_by_digest_in_a_layout_removes_the_signature_tag_as_at_a_registry() {
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, "hello\n");
    let digest = digest_of(&img, "v1");
    ok(rd(dir)
        .args(["key", "generate", "--output-key-prefix", "k"])
        .env("COSIGN_PASSWORD", ""));
    let server = Server::start(&dir.join("data"), &[]);
    let repo = format!("{}/zones/signed", server.host());
    ok(rd(dir).args(["push", "./img:v1", &format!("{repo}:v1")]));
    for image in ["oci:img:v1".to_owned(), format!("{repo}:v1")] {
        ok(rd(dir)
            .args(["sign", "--key", "k.key", &image])
            .env("COSIGN_PASSWORD", ""));
    }
    let sig = format!("{}.sig", digest.replacen(':', "-", 1));
    let all_tags = |target: &str| -> Vec<String> {
        json(dir, &["ls", "--all", target])["tags"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|t| t["tag"].as_str().map(str::to_owned))
            .collect()
    };
    assert!(
        all_tags("oci:img").contains(&sig),
        "{:?}",
        all_tags("oci:img")
    );
    assert!(all_tags(&repo).contains(&sig), "{:?}", all_tags(&repo));
    let mut attached = Vec::new();
    for target in [format!("oci:img@{digest}"), format!("{repo}@{digest}")] {
        let plan = json(dir, &["rm", &target]);
        attached.push(plan["attached_tags"].clone());
    }
    assert_eq!(attached[0], attached[1], "layout and registry plans agree");
    assert!(
        attached[0]
            .as_array()
            .unwrap()
            .iter()
            .any(|t| t == sig.as_str()),
        "{attached:?}"
    );
    assert!(
        !all_tags("oci:img").contains(&sig),
        "the layout kept {sig}: {:?}",
        all_tags("oci:img")
    );
    assert!(!all_tags(&repo).contains(&sig), "{:?}", all_tags(&repo));
    drop(server);
}

/// Issue 51: small error messages say what to write. `rdctl config` of an index of several
/// manifests names `--platform` (the reference is valid); `copy` to a name that is neither a
/// layout here nor a registry reference suggests `./NAME` and `oci:NAME`; a refused DELETE
/// (409) is said once and briefly.
#[test]
fn small_errors_say_what_to_write() {
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, "hello\n");
    let child = digest_of(&img, "v1");
    add_index(&img, &child);
    // A second platform entry makes the index ambiguous without --platform.
    let index = digest_of(&img, "multi");
    let path = img
        .join("blobs/sha256")
        .join(index.split_once(':').unwrap().1);
    let mut doc: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    let mut second = doc["manifests"][0].clone();
    second["platform"]["architecture"] = "arm64".into();
    doc["manifests"].as_array_mut().unwrap().push(second);
    let bytes = serde_json::to_vec(&doc).unwrap();
    let d = validator::Digest::sha256(&bytes);
    std::fs::write(img.join("blobs/sha256").join(d.encoded()), &bytes).unwrap();
    let top_path = img.join("index.json");
    let top = std::fs::read_to_string(&top_path)
        .unwrap()
        .replace(&index, d.as_str());
    let top = top.replace(
        &format!("\"size\":{}", std::fs::metadata(&path).unwrap().len()),
        &format!("\"size\":{}", bytes.len()),
    );
    std::fs::write(&top_path, top).unwrap();
    let err = fails(dir, &["config", "./img:multi"]);
    assert!(!err.contains("invalid image reference"), "{err}");
    assert!(
        err.contains("--platform") && err.contains("linux/arm64"),
        "{err}"
    );

    let err = fails(dir, &["copy", "img:v1", "newdir:v1"]);
    assert!(
        err.contains("./newdir:v1") && err.contains("oci:newdir:v1"),
        "{err}"
    );

    let server = Server::start(&dir.join("data"), &[]);
    let repo = format!("{}/zones/app", server.host());
    ok(rd(dir).args(["push", "./img:multi", &format!("{repo}:multi")]));
    let err = fails(dir, &["rm", &format!("{repo}@{child}")]);
    assert_eq!(err.matches("MANIFEST_REFERENCED").count(), 1, "{err}");
    assert!(err.len() < 450, "{} characters: {err}", err.len());
    drop(server);
}
