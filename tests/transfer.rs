//! `rdctl push`, `rdctl pull` and `rdctl copy` against the real `rdctl registry serve`, with
//! layouts made by umoci and what was pushed read back by skopeo.

use std::path::Path;
use std::process::Output;

use crate::util::{Server, ok, rdctl, s, tail, tempdir, tool, validate_json};

const UMOCI: &str = "umoci-0.6";
const INDEX_MT: &str = "application/vnd.oci.image.index.v1+json";

/// A layout at `img` with `img:v1` (linux/amd64, one layer holding /etc/motd).
pub(crate) fn umoci_image(dir: &Path, motd: &str) -> std::path::PathBuf {
    let img = dir.join("img");
    ok(tool(UMOCI).args(["init", "--layout", s(&img)]));
    ok(tool(UMOCI).args(["new", "--image", &format!("{}:base", s(&img))]));
    let src = dir.join("motd");
    std::fs::write(&src, motd).unwrap();
    ok(tool(UMOCI).args([
        "insert",
        "--rootless",
        "--image",
        &format!("{}:base", s(&img)),
        "--tag",
        "v1",
        s(&src),
        "/etc/motd",
    ]));
    img
}

fn index_json(layout: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap()
}

/// The `index.json` entry tagged `tag`.
fn entry(layout: &Path, tag: &str) -> serde_json::Value {
    let index = index_json(layout);
    index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .cloned()
        .unwrap_or_else(|| panic!("no entry tagged {tag} in {}: {index}", layout.display()))
}

fn digest_of(layout: &Path, tag: &str) -> String {
    entry(layout, tag)["digest"].as_str().unwrap().to_owned()
}

fn blob_path(layout: &Path, digest: &str) -> std::path::PathBuf {
    let (alg, hex) = digest.split_once(':').unwrap();
    layout.join("blobs").join(alg).join(hex)
}

fn blob_json(layout: &Path, digest: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(blob_path(layout, digest)).unwrap()).unwrap()
}

fn stdout(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Runs rdctl expecting failure with exit 2; returns stderr.
fn fails_with_2(args: &[&str]) -> String {
    let out = rdctl().args(args).output().expect("run rdctl");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "rdctl {args:?} should exit 2; stdout:\n{}\nstderr:\n{err}",
        tail(&out.stdout)
    );
    err
}

/// The sha256 of what skopeo reads raw from the registry.
fn skopeo_raw_digest(reference: &str) -> (String, serde_json::Value) {
    let out = ok(tool("skopeo").args([
        "inspect",
        "--tls-verify=false",
        "--raw",
        &format!("docker://{reference}"),
    ]));
    (
        validator::Digest::sha256(&out.stdout).to_string(),
        serde_json::from_slice(&out.stdout).expect("skopeo printed a JSON manifest"),
    )
}

#[test]
fn push_pull_round_trip_second_push_skips_and_skopeo_reads_it() {
    let dir = tempdir();
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let reg = server.host();
    let img = umoci_image(dir.path(), "pushed by rdctl\n");
    let want = digest_of(&img, "v1");
    let remote = format!("{reg}/xfer/img:v1");

    let first = stdout(&ok(rdctl().args([
        "push",
        &format!("{}:v1", s(&img)),
        &remote,
    ])));
    assert!(
        first.contains(&want)
            && first.contains("2 blob(s) copied")
            && first.contains("0 blob(s) skipped"),
        "first push:\n{first}"
    );

    // skopeo reads back exactly the manifest bytes of the layout, and the config behind it.
    let (raw, manifest) = skopeo_raw_digest(&remote);
    assert_eq!(raw, want, "skopeo sees a different manifest");
    assert_eq!(manifest["layers"].as_array().map(Vec::len), Some(1));
    let inspect = ok(tool("skopeo").args([
        "inspect",
        "--tls-verify=false",
        &format!("docker://{remote}"),
    ]));
    let info: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(info["Architecture"], "amd64", "{info}");
    assert_eq!(info["Digest"], want.as_str());

    // pull into a new layout: same digest, and the layout validates deeply.
    let back = dir.path().join("back");
    let pulled = stdout(&ok(rdctl().args(["pull", &remote, s(&back)])));
    assert!(pulled.contains("2 blob(s) copied"), "pull:\n{pulled}");
    assert_eq!(
        digest_of(&back, "v1"),
        want,
        "the tag comes from the reference"
    );
    assert_eq!(
        std::fs::read(blob_path(&back, &want)).unwrap(),
        std::fs::read(blob_path(&img, &want)).unwrap(),
        "manifest bytes changed"
    );
    ok(rdctl().args(["validate", &format!("{}:v1", s(&back))]));
    // An explicit layout tag wins over the reference's.
    ok(rdctl().args(["pull", &remote, &format!("{}:again", s(&back))]));
    assert_eq!(digest_of(&back, "again"), want);
    assert_eq!(digest_of(&back, "v1"), want, "the v1 entry was kept");

    // A second push uploads nothing.
    let second = stdout(&ok(rdctl().args([
        "push",
        &format!("{}:v1", s(&img)),
        &remote,
    ])));
    assert!(
        second.contains("0 blob(s) copied (0 bytes)") && second.contains("2 blob(s) skipped"),
        "second push:\n{second}"
    );
    assert_eq!(
        second.matches("skipped blob sha256:").count(),
        2,
        "{second}"
    );

    // An unknown tag is a clear failure with exit 2.
    let err = fails_with_2(&["pull", &format!("{reg}/xfer/img:nope"), s(&back)]);
    assert!(
        err.contains("xfer/img:nope") && err.contains("not found"),
        "stderr:\n{err}"
    );
    drop(server);
}

#[test]
fn copy_between_registries_and_multi_platform_with_and_without_platform() {
    let dir = tempdir();
    let (d1, d2) = (tempdir(), tempdir());
    let one = Server::start(d1.path(), &[]);
    let two = Server::start(d2.path(), &[]);
    let (r1, r2) = (one.host(), two.host());

    // An index over linux/amd64 and linux/arm64 images sharing one layer.
    let img = umoci_image(dir.path(), "two platforms\n");
    ok(tool(UMOCI).args([
        "config",
        "--image",
        &format!("{}:v1", s(&img)),
        "--tag",
        "arm",
        "--architecture",
        "arm64",
    ]));
    let (amd, arm) = (entry(&img, "v1"), entry(&img, "arm"));
    let amd_digest = amd["digest"].as_str().unwrap().to_owned();
    let arm_digest = arm["digest"].as_str().unwrap().to_owned();
    assert_ne!(amd_digest, arm_digest);
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": INDEX_MT,
        "manifests": [
            {"mediaType": amd["mediaType"], "digest": amd_digest, "size": amd["size"],
             "platform": {"os": "linux", "architecture": "amd64"}},
            {"mediaType": arm["mediaType"], "digest": arm_digest, "size": arm["size"],
             "platform": {"os": "linux", "architecture": "arm64"}},
        ]
    });
    let index_bytes = serde_json::to_vec(&index).unwrap();
    let layout = validator::ImageLayout::open(&img).unwrap();
    let index_digest = layout.write_document(&index_bytes).unwrap().to_string();
    let mut top = index_json(&img);
    top["manifests"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "mediaType": INDEX_MT, "digest": index_digest, "size": index_bytes.len(),
            "annotations": {"org.opencontainers.image.ref.name": "multi"}
        }));
    std::fs::write(img.join("index.json"), serde_json::to_vec(&top).unwrap()).unwrap();
    ok(rdctl().args(["validate", &format!("{}:multi", s(&img))]));

    // layout → registry one: the whole index.
    let pushed = stdout(&ok(rdctl().args([
        "push",
        &format!("{}:multi", s(&img)),
        &format!("{r1}/multi/img:1"),
    ])));
    // one shared layer and two configs; three documents.
    assert!(
        pushed.contains(
            "3 manifest(s) written, 0 already there, 0 referrer(s) written, 3 blob(s) copied"
        ),
        "push:\n{pushed}"
    );

    // registry one → registry two, whole graph: the index digest is unchanged.
    let copied = stdout(&ok(rdctl().args([
        "copy",
        &format!("docker://{r1}/multi/img:1"),
        &format!("docker://{r2}/other/img:2"),
    ])));
    assert!(copied.contains("3 blob(s) copied"), "copy:\n{copied}");
    let (raw, doc) = skopeo_raw_digest(&format!("{r2}/other/img:2"));
    assert_eq!(raw, index_digest);
    assert_eq!(doc["manifests"].as_array().map(Vec::len), Some(2));
    // Both platforms arrived: pull from registry two and validate deeply.
    let back = dir.path().join("back");
    ok(rdctl().args(["pull", &format!("{r2}/other/img:2"), s(&back)]));
    assert_eq!(digest_of(&back, "2"), index_digest);
    let (code, report) = crate::util::validate_json(&[&format!("{}:2", s(&back))]);
    assert_eq!(code, 0, "{report}");
    assert_eq!(
        report["images"].as_array().map(Vec::len),
        Some(2),
        "{report}"
    );

    // --platform: only the arm64 manifest, which becomes the tagged root (two repos, one server).
    let arm_only = stdout(&ok(rdctl().args([
        "copy",
        "--platform",
        "linux/arm64",
        &format!("{r1}/multi/img:1"),
        &format!("{r1}/arm/only:1"),
    ])));
    assert!(
        arm_only.contains("1 manifest(s)") && arm_only.contains(&arm_digest),
        "copy --platform:\n{arm_only}"
    );
    let (raw, doc) = skopeo_raw_digest(&format!("{r1}/arm/only:1"));
    assert_eq!(raw, arm_digest);
    assert!(doc.get("layers").is_some(), "not an image manifest: {doc}");
    let cfg = ok(tool("skopeo").args([
        "inspect",
        "--tls-verify=false",
        &format!("docker://{r1}/arm/only:1"),
    ]));
    let cfg: serde_json::Value = serde_json::from_slice(&cfg.stdout).unwrap();
    assert_eq!(cfg["Architecture"], "arm64");

    // layout → layout with --platform, and a platform the index lacks.
    let amd_layout = dir.path().join("amd");
    ok(rdctl().args([
        "copy",
        "--platform",
        "linux/amd64",
        &format!("oci:{}:multi", s(&img)),
        &format!("oci:{}:amd", s(&amd_layout)),
    ]));
    assert_eq!(digest_of(&amd_layout, "amd"), amd_digest);
    ok(rdctl().args(["validate", &format!("{}:amd", s(&amd_layout))]));
    let err = fails_with_2(&[
        "pull",
        "--platform",
        "illumos/amd64",
        &format!("{r1}/multi/img:1"),
        s(&dir.path().join("none")),
    ]);
    assert!(
        err.contains("no manifest for platform illumos/amd64") && err.contains(&index_digest),
        "stderr:\n{err}"
    );
    drop((one, two));
}

#[test]
fn a_tampered_blob_fails_the_push_naming_it_and_tags_nothing() {
    let dir = tempdir();
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let reg = server.host();
    let img = umoci_image(dir.path(), "tampered\n");
    let manifest = blob_json(&img, &digest_of(&img, "v1"));
    let layer = manifest["layers"][0]["digest"].as_str().unwrap().to_owned();
    // Same size, one byte changed.
    let path = blob_path(&img, &layer);
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&path, &bytes).unwrap();

    let remote = format!("{reg}/tamper/img:v1");
    let err = fails_with_2(&["push", &format!("{}:v1", s(&img)), &remote]);
    assert!(
        err.contains(&layer),
        "the error does not name {layer}:\n{err}"
    );
    // Nothing is tagged at the destination.
    let err = fails_with_2(&["pull", &remote, s(&dir.path().join("pulled"))]);
    assert!(err.contains("not found"), "stderr:\n{err}");
    let inspect = tool("skopeo")
        .args([
            "inspect",
            "--tls-verify=false",
            "--raw",
            &format!("docker://{remote}"),
        ])
        .output()
        .unwrap();
    assert!(!inspect.status.success(), "skopeo found the tag");

    // Copying the same layout into another layout fails the same way and tags nothing there.
    let other = dir.path().join("other");
    let err = fails_with_2(&[
        "copy",
        &format!("oci:{}:v1", s(&img)),
        &format!("oci:{}:v1", s(&other)),
    ]);
    assert!(err.contains(&layer), "stderr:\n{err}");
    assert!(
        !other.exists(),
        "a failed copy leaves no layout at its destination"
    );
    assert!(
        !blob_path(&dir.path().join(".other.partial"), &layer).exists(),
        "the bad blob was published"
    );
    drop(server);
}

/// A pull into a new directory appears there only when it succeeded: a missing tag leaves
/// nothing, a pull that fails half way keeps what it fetched in a hidden sibling that the
/// rerun resumes from. A push of a layout missing a blob fails before the first upload, and
/// the registry has no repository for it. A layout path given where a registry reference is
/// expected gets the `oci:` spelling suggested.
#[test]
fn failed_pulls_and_pushes_leave_nothing_half_written() {
    let dir = tempdir();
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let reg = server.host();
    let img = umoci_image(dir.path(), &"half written\n".repeat(500));
    let remote = format!("{reg}/edges/img:v1");
    ok(rdctl().args(["push", &format!("{}:v1", s(&img)), &remote]));

    // A tag that is not there: no layout, no sibling.
    let pulled = dir.path().join("pulled");
    let err = fails_with_2(&["pull", &format!("{reg}/edges/img:nope"), s(&pulled)]);
    assert!(err.contains("not found"), "{err}");
    assert!(!pulled.exists());
    assert!(!dir.path().join(".pulled.partial").exists());

    // The layer goes missing at the registry: the pull fails naming it and leaves no
    // layout; once it is back, the rerun completes from what the first run fetched.
    let manifest = blob_json(&img, &digest_of(&img, "v1"));
    let layer = manifest["layers"][0]["digest"].as_str().unwrap().to_owned();
    let config = manifest["config"]["digest"].as_str().unwrap().to_owned();
    let hex = layer.trim_start_matches("sha256:");
    let stored = data
        .path()
        .join("blobs/sha256")
        .join(&hex[..2])
        .join(hex)
        .join("data");
    assert!(
        stored.is_file(),
        "the fs store keeps blobs at {}",
        stored.display()
    );
    let aside = data.path().join("aside");
    std::fs::rename(&stored, &aside).unwrap();
    let err = fails_with_2(&["pull", &remote, s(&pulled)]);
    assert!(err.contains(&layer), "{err}");
    assert!(!pulled.exists(), "a failed pull leaves no layout");
    let staged = dir.path().join(".pulled.partial");
    assert!(
        blob_path(&staged, &config).is_file(),
        "what the first run verified stays for the rerun"
    );
    std::fs::rename(&aside, &stored).unwrap();
    let out = ok(rdctl().args(["pull", "--json", &remote, s(&pulled)]));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(
        report.to_string().contains(&config),
        "the report names the config: {report}"
    );
    assert!(!staged.exists(), "the sibling became the layout");
    assert_eq!(validate_json(&[&format!("{}:v1", s(&pulled))]).0, 0);

    // A layout with a blob missing: refused before any upload, no repository created.
    let broken = dir.path().join("broken");
    ok(rdctl().args([
        "copy",
        &format!("oci:{}:v1", s(&img)),
        &format!("oci:{}:v1", s(&broken)),
    ]));
    std::fs::remove_file(blob_path(&broken, &layer)).unwrap();
    let err = fails_with_2(&[
        "push",
        &format!("{}:v1", s(&broken)),
        &format!("{reg}/never/created:v1"),
    ]);
    assert!(
        err.contains(&format!("blob {layer} named by"))
            && err.contains("is missing from")
            && err.contains("nothing was copied"),
        "{err}"
    );
    let repos = stdout(&ok(rdctl().args(["ls", "--json", &reg])));
    assert!(!repos.contains("never/created"), "{repos}");
    assert!(repos.contains("edges/img"), "{repos}");

    // `copy DIR:TAG REF`: a path is a layout without oci: too (one spelling everywhere).
    ok(rdctl().args([
        "copy",
        &format!("{}:v1", s(&img)),
        &format!("{reg}/edges/other:v1"),
    ]));
    let tags = stdout(&ok(rdctl().args([
        "ls",
        "--json",
        &format!("{reg}/edges/other"),
    ])));
    assert!(tags.contains("\"v1\""), "{tags}");
}

/// A pull into a layout goes through the layout's ingest: a `.partial` left by an interrupted
/// pull is continued (only the rest is fetched) and published once the whole blob verified;
/// a partial holding wrong bytes fails the blob naming it, is removed, and the next pull
/// succeeds.
#[test]
fn pulls_continue_a_partial_blob_and_drop_one_that_does_not_verify() {
    let dir = tempdir();
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let img = umoci_image(dir.path(), &"a partial pull resumes\n".repeat(2000));
    let remote = format!("{}/xfer/partial:v1", server.host());
    ok(rdctl().args(["push", &format!("{}:v1", s(&img)), &remote]));
    let manifest: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            img.join("blobs/sha256")
                .join(digest_of(&img, "v1").trim_start_matches("sha256:")),
        )
        .unwrap(),
    )
    .unwrap();
    let layer = manifest["layers"][0]["digest"].as_str().unwrap().to_owned();
    let hex = layer.trim_start_matches("sha256:");
    let bytes = std::fs::read(img.join("blobs/sha256").join(hex)).unwrap();
    assert!(bytes.len() > 64, "the layer is big enough to cut");

    // The first half of the layer is already there, as an interrupted pull leaves it.
    let good = dir.path().join("good");
    std::fs::create_dir_all(good.join("ingest")).unwrap();
    let partial = good.join("ingest").join(format!("sha256-{hex}.partial"));
    std::fs::write(&partial, &bytes[..bytes.len() / 2]).unwrap();
    ok(rdctl().args(["pull", &remote, s(&good)]));
    assert_eq!(
        std::fs::read(good.join("blobs/sha256").join(hex)).unwrap(),
        bytes
    );
    assert!(
        !partial.exists(),
        "the partial was published, not left behind"
    );
    assert_eq!(validate_json(&[&format!("{}:v1", s(&good))]).0, 0);

    // A partial whose bytes are wrong: the blob fails to verify and names the layer; the
    // partial is gone, so the next pull starts over and succeeds.
    let bad = dir.path().join("bad");
    std::fs::create_dir_all(bad.join("ingest")).unwrap();
    let partial = bad.join("ingest").join(format!("sha256-{hex}.partial"));
    std::fs::write(&partial, vec![b'x'; bytes.len() / 2]).unwrap();
    let out = rdctl()
        .args(["pull", "--json", &remote, s(&bad)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(err["error"]["kind"], "invalid", "{err}");
    assert!(
        err["error"]["message"].as_str().unwrap().contains(&layer),
        "{err}"
    );
    assert!(!partial.exists(), "wrong bytes never stay to be resumed");
    assert!(!bad.join("blobs/sha256").join(hex).exists());
    ok(rdctl().args(["pull", &remote, s(&bad)]));
    assert_eq!(
        std::fs::read(bad.join("blobs/sha256").join(hex)).unwrap(),
        bytes
    );
}
