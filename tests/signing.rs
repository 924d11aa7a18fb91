//! Signing with rdctl and the real cosign (v2.6, offline: no transparency log), both ways, at
//! our registry (referrers API) and at Debian's `docker-registry` (CNCF distribution 2.8: tag
//! scheme only), in a layout (`cosign verify --local-image`); the refusals (wrong key, a
//! signature replayed from another image, a tampered payload) each with its own reason; and
//! `rdctl copy`/`pull`/`push` carrying cosign's `.sig`/`.att` tags so cosign verifies at the
//! destination. `rdctl build --sign-key --attest` output is verified by cosign.

use std::fs;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

use crate::transfer::umoci_image;
use crate::util::{Distribution, Server, ok, rdctl, s, tail, tempdir, tool};

pub(crate) const PASSWORD: &str = "correct horse";

/// cosign in `dir`, offline-minded: the key password in the environment, a private HOME.
pub(crate) fn cosign(dir: &Path) -> Command {
    let mut c = tool("cosign");
    c.current_dir(dir)
        .env("COSIGN_PASSWORD", PASSWORD)
        .env("HOME", dir)
        .env("TUF_ROOT", dir.join("tuf"))
        .env_remove("COSIGN_EXPERIMENTAL")
        .env_remove("COSIGN_REPOSITORY");
    c
}

/// rdctl in `dir` with the key password in cosign's variable.
pub(crate) fn rd(dir: &Path) -> Command {
    let mut c = rdctl();
    c.current_dir(dir)
        .env("COSIGN_PASSWORD", PASSWORD)
        .env_remove("RDCTL_PASSWORD");
    c
}

pub(crate) fn cosign_sign(dir: &Path, key: &str, image: &str) {
    ok(cosign(dir).args([
        "sign",
        "--yes",
        "--key",
        key,
        "--tlog-upload=false",
        "--allow-http-registry",
        image,
    ]));
}

fn cosign_verify(dir: &Path, key: &str, image: &str) -> Output {
    cosign(dir)
        .args([
            "verify",
            "--key",
            key,
            "--insecure-ignore-tlog=true",
            "--allow-http-registry",
            image,
        ])
        .output()
        .unwrap()
}

fn cosign_verify_ok(dir: &Path, key: &str, image: &str) {
    let out = cosign_verify(dir, key, image);
    assert!(
        out.status.success(),
        "cosign verify --key {key} {image} failed:\n{}",
        tail(&out.stderr)
    );
}

fn cosign_verify_attestation(dir: &Path, key: &str, kind: &str, image: &str) {
    ok(cosign(dir).args([
        "verify-attestation",
        "--key",
        key,
        "--type",
        kind,
        "--insecure-ignore-tlog=true",
        "--allow-http-registry",
        image,
    ]));
}

/// Both key pairs: `cosign.key` from cosign, `ours.key` from `rdctl key generate`.
fn keys(dir: &Path) {
    ok(cosign(dir).arg("generate-key-pair"));
    ok(rd(dir).args(["key", "generate", "--output-key-prefix", "ours"]));
    ok(rd(dir).args(["key", "generate", "--output-key-prefix", "stranger"]));
}

/// A small image pushed to `reference`; returns its manifest digest.
pub(crate) fn pushed_image(dir: &Path, motd: &str, reference: &str) -> String {
    let work = dir.join(format!("img-{}", motd.len()));
    fs::create_dir_all(&work).unwrap();
    let layout = umoci_image(&work, motd);
    let out = ok(rdctl().args(["push", "--json", &format!("{}:v1", s(&layout)), reference]));
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    v["root"]["digest"].as_str().unwrap().to_owned()
}

/// `rdctl verify … --json`: (exit code, document, stderr).
pub(crate) fn verify(dir: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = rd(dir)
        .arg("verify")
        .args(args)
        .arg("--json")
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rdctl verify {args:?} printed no JSON ({e}):\n{}",
            tail(&out.stderr)
        )
    });
    (
        out.status.code().unwrap(),
        doc,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn key_ids(doc: &Value) -> Vec<String> {
    doc["signatures"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["key_id"].as_str().unwrap().to_owned())
        .collect()
}

pub(crate) fn key_id(dir: &Path, public: &str) -> String {
    let pem = fs::read(dir.join(public)).unwrap();
    trust::VerifyingKey::from_pem(&pem, public)
        .unwrap()
        .key_id()
        .as_str()
        .to_owned()
}

const SBOM: &str = r#"{"spdxVersion":"SPDX-2.3","dataLicense":"CC0-1.0","SPDXID":"SPDXRef-DOCUMENT","name":"test","documentNamespace":"https://example.invalid/test","creationInfo":{"created":"2026-01-01T00:00:00Z","creators":["Tool: test"]},"packages":[]}"#;

const PROVENANCE: &str = r#"{"buildDefinition":{"buildType":"https://example.invalid/build/v1","externalParameters":{"source":"test"}},"runDetails":{"builder":{"id":"https://example.invalid/builder"}}}"#;

#[test]
fn our_registry_cosign_and_rdctl_both_ways() {
    let dir = tempdir();
    let d = dir.path();
    keys(d);
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let repo = format!("{}/signed/app", reg.host());
    let digest = pushed_image(d, "signed both ways\n", &format!("{repo}:v1"));
    let by_digest = format!("{repo}@{digest}");
    let tagged = format!("{repo}:v1");

    // Unsigned: exit 1 and a reason.
    let (code, doc, stderr) = verify(d, &["--key", "cosign.pub", &tagged]);
    assert_eq!(code, 1, "{doc}");
    assert_eq!(doc["verified"], false);
    assert!(stderr.contains("no signatures found"), "{stderr}");

    // cosign signs, rdctl verifies (tag resolved to the same digest).
    cosign_sign(d, "cosign.key", &by_digest);
    let (code, doc, stderr) = verify(d, &["--key", "cosign.pub", &tagged]);
    assert_eq!(code, 0, "{stderr}\n{doc}");
    assert_eq!(doc["digest"], digest.as_str());
    assert_eq!(key_ids(&doc), vec![key_id(d, "cosign.pub")]);
    assert_eq!(doc["signatures"][0]["docker_reference"], repo.as_str());

    // rdctl signs (with an annotation), cosign verifies; both signatures stay.
    let signed = ok(rd(d).args([
        "sign",
        "--key",
        "ours.key",
        "-a",
        "team=zones",
        "--json",
        &tagged,
    ]));
    let signed: Value = serde_json::from_slice(&signed.stdout).unwrap();
    assert_eq!(signed["layers"], 2, "{signed}");
    // Our registry has the referrers API: the signature went out as a referrer too.
    assert!(signed["referrer"].is_string(), "{signed}");
    cosign_verify_ok(d, "ours.pub", &by_digest);
    cosign_verify_ok(d, "cosign.pub", &by_digest);
    let out = ok(cosign(d).args([
        "verify",
        "--key",
        "ours.pub",
        "--insecure-ignore-tlog=true",
        "--allow-http-registry",
        "-a",
        "team=zones",
        &by_digest,
    ]));
    assert!(tail(&out.stdout).contains("team"), "{}", tail(&out.stdout));
    let (code, doc, _) = verify(d, &["--key", "ours.pub", "--key", "cosign.pub", &tagged]);
    assert_eq!(code, 0);
    // Each signature once, though the referrer repeats the tag's layers.
    assert_eq!(doc["signatures"].as_array().unwrap().len(), 2, "{doc}");
    let ids = key_ids(&doc);
    assert!(
        ids.contains(&key_id(d, "ours.pub")) && ids.contains(&key_id(d, "cosign.pub")),
        "{doc}"
    );
    let text =
        String::from_utf8(ok(rd(d).args(["verify", "--key", "ours.pub", &tagged])).stdout).unwrap();
    assert!(
        text.contains(&digest) && text.contains("team=zones"),
        "{text}"
    );

    // A key that signed nothing: refused, and the reason counts the others' signatures.
    let (code, doc, stderr) = verify(d, &["--key", "stranger.pub", &tagged]);
    assert_eq!(code, 1, "{doc}");
    assert!(
        stderr.contains("no signature by the given key(s)")
            && stderr.contains("do not verify with the given key(s): another key, or the payload was changed after signing"),
        "{stderr}"
    );
    assert!(
        doc["rejected"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| r["reason"] == "bad_signature"),
        "{doc}"
    );

    // Attestations: cosign's spdxjson read by rdctl, rdctl's slsaprovenance1 read by cosign.
    fs::write(d.join("sbom.json"), SBOM).unwrap();
    ok(cosign(d).args([
        "attest",
        "--yes",
        "--key",
        "cosign.key",
        "--type",
        "spdxjson",
        "--predicate",
        "sbom.json",
        "--tlog-upload=false",
        "--allow-http-registry",
        &by_digest,
    ]));
    let (code, doc, stderr) = verify(
        d,
        &["--key", "cosign.pub", "--attestation", "spdxjson", &tagged],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        doc["attestations"][0]["predicate_type"],
        "https://spdx.dev/Document"
    );
    let (code, _, stderr) = verify(
        d,
        &[
            "--key",
            "cosign.pub",
            "--attestation",
            "slsaprovenance1",
            &tagged,
        ],
    );
    assert_eq!(code, 1);
    assert!(
        stderr.contains("no verified attestation of type slsaprovenance1"),
        "{stderr}"
    );
    fs::write(d.join("provenance.json"), PROVENANCE).unwrap();
    ok(rd(d).args([
        "attest",
        "--key",
        "ours.key",
        "--type",
        "slsaprovenance1",
        "--predicate",
        "provenance.json",
        &tagged,
    ]));
    cosign_verify_attestation(d, "ours.pub", "slsaprovenance1", &by_digest);
    cosign_verify_attestation(d, "cosign.pub", "spdxjson", &by_digest);
    let (code, doc, stderr) = verify(
        d,
        &[
            "--key",
            "ours.pub",
            "--key",
            "cosign.pub",
            "--attestation",
            "spdxjson",
            "--attestation",
            "slsaprovenance1",
            &tagged,
        ],
    );
    assert_eq!(code, 0, "{stderr}\n{doc}");
    assert_eq!(
        doc["policy_evidence"]["attestations"]
            .as_array()
            .unwrap()
            .len(),
        2
    );

    // --replace drops the earlier attestation of the same type.
    ok(rd(d).args([
        "attest",
        "--key",
        "ours.key",
        "--type",
        "slsaprovenance1",
        "--predicate",
        "provenance.json",
        "--replace",
        &tagged,
    ]));
    let (_, doc, _) = verify(d, &["--key", "ours.pub", "--key", "cosign.pub", &tagged]);
    assert_eq!(doc["attestations"].as_array().unwrap().len(), 2, "{doc}");

    // rdctl key generate never overwrites.
    let out = rd(d)
        .args(["key", "generate", "--output-key-prefix", "ours"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("not overwriting"),
        "{}",
        tail(&out.stderr)
    );
}

#[test]
fn distribution_tag_scheme_both_ways() {
    let dir = tempdir();
    let d = dir.path();
    keys(d);
    let store = tempdir();
    let dist = Distribution::start(
        store.path(),
        &format!(
            "  filesystem:\n    rootdirectory: {}\n",
            s(&store.path().join("data"))
        ),
    );
    let repo = format!("{}/signed/app", dist.host());
    let digest = pushed_image(d, "at distribution\n", &format!("{repo}:v1"));
    let by_digest = format!("{repo}@{digest}");

    // rdctl signs (no referrers API there: the tag only), cosign verifies.
    let signed = ok(rd(d).args(["sign", "--key", "cosign.key", "--json", &by_digest]));
    let signed: Value = serde_json::from_slice(&signed.stdout).unwrap();
    assert_eq!(signed["referrer"], Value::Null, "{signed}");
    cosign_verify_ok(d, "cosign.pub", &by_digest);

    // cosign signs with the key rdctl generated (cosign's own file format), rdctl verifies.
    cosign_sign(d, "ours.key", &by_digest);
    let (code, doc, stderr) = verify(
        d,
        &[
            "--key",
            "ours.pub",
            "--key",
            "cosign.pub",
            &format!("{repo}:v1"),
        ],
    );
    assert_eq!(code, 0, "{stderr}");
    let ids = key_ids(&doc);
    assert!(
        ids.contains(&key_id(d, "ours.pub")) && ids.contains(&key_id(d, "cosign.pub")),
        "{doc}"
    );
    let out = ok(cosign(d).args(["public-key", "--key", "ours.key"]));
    assert_eq!(out.stdout, fs::read(d.join("ours.pub")).unwrap());
}

#[test]
fn refusals_name_their_reason() {
    let dir = tempdir();
    let d = dir.path();
    keys(d);
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let repo = format!("{}/replay/app", reg.host());
    let a = pushed_image(d, "image a\n", &format!("{repo}:a"));
    let b = pushed_image(d, "image b, different\n", &format!("{repo}:b"));
    ok(rd(d).args(["sign", "--key", "ours.key", &format!("{repo}:a")]));
    // A's signature manifest copied onto B's .sig tag: a valid signature, of another image.
    let sig_tag = |digest: &str| format!("{}.sig", digest.replace(':', "-"));
    ok(rdctl().args(["tag", &format!("{repo}:{}", sig_tag(&a)), &sig_tag(&b)]));
    let (code, doc, stderr) = verify(d, &["--key", "ours.pub", &format!("{repo}:b")]);
    assert_eq!(code, 1, "{doc}");
    assert!(
        stderr.contains(&format!("1 over another digest ({a})")),
        "{stderr}"
    );
    assert_eq!(doc["rejected"][0]["reason"], "digest_mismatch", "{doc}");
    let out = cosign_verify(d, "ours.pub", &format!("{repo}@{b}"));
    assert!(
        !out.status.success(),
        "cosign accepted a replayed signature"
    );

    // In a layout: signed by rdctl, read by cosign --local-image; then the payload tampered.
    let work = d.join("layout");
    fs::create_dir_all(&work).unwrap();
    let layout = umoci_image(&work, "in a layout\n");
    let reference = format!("oci:{}:v1", s(&layout));
    ok(rd(d).args(["sign", "--key", "ours.key", &reference]));
    ok(rd(d).args(["verify", "--key", "ours.pub", &reference]));
    // The signed layout is still a valid layout as a whole: cosign's manifests are artifacts.
    ok(rdctl().args(["validate", s(&layout)]));
    ok(cosign(d).args([
        "verify",
        "--key",
        "ours.pub",
        "--insecure-ignore-tlog=true",
        "--local-image",
        s(&layout),
    ]));
    // Without a tag the choice is still between umoci's two images (base and v1): cosign's
    // entries are not images to choose.
    let out = rd(d)
        .args([
            "verify",
            "--key",
            "ours.pub",
            &format!("oci:{}", s(&layout)),
        ])
        .output()
        .unwrap();
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("index.json has 2 entries"),
        "{}",
        tail(&out.stderr)
    );
    let (_, doc, _) = verify(d, &["--key", "ours.pub", &reference]);
    let payload = doc["signatures"][0]["layer"].as_str().unwrap().to_owned();
    let path = layout
        .join("blobs/sha256")
        .join(payload.trim_start_matches("sha256:"));
    let mut bytes = fs::read(&path).unwrap();
    let at = bytes.len() - 10;
    bytes[at] ^= 1;
    let mut perms = fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    fs::set_permissions(&path, perms).unwrap();
    fs::write(&path, bytes).unwrap();
    let (code, doc, stderr) = verify(d, &["--key", "ours.pub", &reference]);
    assert_eq!(code, 1, "{doc}");
    assert_eq!(doc["rejected"][0]["reason"], "payload_tampered", "{doc}");
    assert!(stderr.contains("tampered payload"), "{stderr}");
}

#[test]
fn copy_keeps_trust() {
    let dir = tempdir();
    let d = dir.path();
    keys(d);
    let data = tempdir();
    let a = Server::start(data.path(), &[]);
    let store = tempdir();
    let b = Distribution::start(
        store.path(),
        &format!(
            "  filesystem:\n    rootdirectory: {}\n",
            s(&store.path().join("data"))
        ),
    );
    let src = format!("{}/trusted/app", a.host());
    let digest = pushed_image(d, "travels signed\n", &format!("{src}:v1"));
    cosign_sign(d, "cosign.key", &format!("{src}@{digest}"));
    fs::write(d.join("sbom.json"), SBOM).unwrap();
    ok(rd(d).args([
        "attest",
        "--key",
        "ours.key",
        "--type",
        "spdxjson",
        "--predicate",
        "sbom.json",
        &format!("{src}:v1"),
    ]));

    // Registry to registry.
    let dst = format!("{}/copied/app", b.host());
    ok(rdctl().args(["copy", &format!("{src}:v1"), &format!("{dst}:v1")]));
    cosign_verify_ok(d, "cosign.pub", &format!("{dst}@{digest}"));
    cosign_verify_attestation(d, "ours.pub", "spdxjson", &format!("{dst}@{digest}"));

    // Through a layout: pull (cosign reads the layout), push elsewhere, cosign verifies there.
    let pulled = d.join("pulled");
    ok(rdctl().args(["pull", &format!("{src}:v1"), &format!("{}:v1", s(&pulled))]));
    ok(cosign(d).args([
        "verify",
        "--key",
        "cosign.pub",
        "--insecure-ignore-tlog=true",
        "--local-image",
        s(&pulled),
    ]));
    let again = format!("{}/through-layout/app", b.host());
    ok(rdctl().args([
        "push",
        &format!("{}:v1", s(&pulled)),
        &format!("{again}:v1"),
    ]));
    cosign_verify_ok(d, "cosign.pub", &format!("{again}@{digest}"));
    let (code, _, stderr) = verify(
        d,
        &[
            "--key",
            "ours.pub",
            "--attestation",
            "spdxjson",
            &format!("{again}:v1"),
        ],
    );
    assert_eq!(code, 1, "only cosign.key signed; ours.key only attested");
    assert!(
        stderr.contains("another key, or the payload was changed"),
        "{stderr}"
    );
    let (code, _, stderr) = verify(
        d,
        &[
            "--key",
            "ours.pub",
            "--key",
            "cosign.pub",
            "--attestation",
            "spdxjson",
            &format!("{again}:v1"),
        ],
    );
    assert_eq!(code, 0, "{stderr}");

    // --no-referrers leaves them behind.
    let bare = format!("{}/bare/app", b.host());
    ok(rdctl().args([
        "copy",
        "--no-referrers",
        &format!("{src}:v1"),
        &format!("{bare}:v1"),
    ]));
    assert!(
        !cosign_verify(d, "cosign.pub", &format!("{bare}@{digest}"))
            .status
            .success()
    );
}

#[test]
fn build_sign_key_attest_verifies_with_cosign() {
    use crate::builder_e2e::{TOOL_BIN, image_file, publish_fixture};
    use crate::ips_cli::Depot;
    let dir = tempdir();
    let d = dir.path();
    keys(d);
    let repo_dir = publish_fixture(d, TOOL_BIN);
    let depot = Depot::start(&repo_dir, d);
    let work = d.join("work");
    fs::create_dir_all(&work).unwrap();
    let image = work.join("image.toml");
    fs::write(&image, image_file(&depot.url)).unwrap();
    ok(rdctl().args(["lock", s(&image)]));
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let repo = format!("{}/built/app", reg.host());
    let out: PathBuf = work.join("out");
    let built = ok(rd(d).env("SOURCE_DATE_EPOCH", "1700000000").args([
        "build",
        s(&image),
        "--output",
        s(&out),
        "--push",
        &format!("{repo}:1.0"),
        "--sign-key",
        "ours.key",
        "--attest",
        "--json",
        "--quiet",
    ]));
    let summary: Value = serde_json::from_slice(&built.stdout).unwrap();
    let digest = summary["manifest"].as_str().unwrap();
    assert_eq!(summary["signed"].as_array().unwrap().len(), 3, "{summary}");
    let by_digest = format!("{repo}@{digest}");
    cosign_verify_ok(d, "ours.pub", &by_digest);
    cosign_verify_attestation(d, "ours.pub", "spdxjson", &by_digest);
    cosign_verify_attestation(d, "ours.pub", "slsaprovenance1", &by_digest);
    let (code, doc, stderr) = verify(
        d,
        &[
            "--key",
            "ours.pub",
            "--attestation",
            "spdxjson",
            "--attestation",
            "slsaprovenance1",
            &format!("{repo}:1.0"),
        ],
    );
    assert_eq!(code, 0, "{stderr}\n{doc}");
    assert_eq!(doc["signatures"][0]["docker_reference"], repo.as_str());
    // The layout is signed too (cosign --local-image reads it).
    ok(cosign(d).args([
        "verify",
        "--key",
        "ours.pub",
        "--insecure-ignore-tlog=true",
        "--local-image",
        s(&out),
    ]));
}

#[test]
fn password_sources_and_key_formats() {
    let dir = tempdir();
    let d = dir.path();
    let work = d.join("layout");
    fs::create_dir_all(&work).unwrap();
    let layout = umoci_image(&work, "keys\n");
    let reference = format!("oci:{}:v1", s(&layout));
    fs::write(d.join("pw.txt"), "from a file\n").unwrap();

    // --password-file wins over the environment.
    ok(rd(d).args([
        "key",
        "generate",
        "--output-key-prefix",
        "filekey",
        "--password-file",
        "pw.txt",
    ]));
    let pem = fs::read_to_string(d.join("filekey.key")).unwrap();
    assert!(
        pem.starts_with("-----BEGIN ENCRYPTED SIGSTORE PRIVATE KEY-----"),
        "{pem}"
    );
    let out = ok(cosign(d).env("COSIGN_PASSWORD", "from a file").args([
        "public-key",
        "--key",
        "filekey.key",
    ]));
    assert_eq!(out.stdout, fs::read(d.join("filekey.pub")).unwrap());
    ok(rd(d).args([
        "sign",
        "--key",
        "filekey.key",
        "--password-file",
        "pw.txt",
        &reference,
    ]));
    // COSIGN_PASSWORD alone is the wrong password here; RDCTL_PASSWORD comes before it.
    let out = rd(d)
        .args(["sign", "--key", "filekey.key", &reference])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("filekey.key"),
        "{}",
        tail(&out.stderr)
    );
    ok(rd(d).env("RDCTL_PASSWORD", "from a file").args([
        "sign",
        "--key",
        "filekey.key",
        &reference,
    ]));
    ok(rd(d).args(["verify", "--key", "filekey.pub", &reference]));

    // An unencrypted PKCS#8 key: no password asked, and cosign imports it.
    let generated = ok(rd(d).args([
        "key",
        "generate",
        "--format",
        "pkcs8",
        "--no-password",
        "--output-key-prefix",
        "plain",
        "--json",
    ]));
    let doc: Value = serde_json::from_slice(&generated.stdout).unwrap();
    assert_eq!(doc["encrypted"], false, "{doc}");
    assert_eq!(doc["key_id"], key_id(d, "plain.pub"));
    ok(rdctl()
        .current_dir(d)
        .env_remove("COSIGN_PASSWORD")
        .env_remove("RDCTL_PASSWORD")
        .args(["sign", "--key", "plain.key", &reference]));
    ok(cosign(d).args([
        "import-key-pair",
        "--key",
        "plain.key",
        "--output-key-prefix",
        "imported",
        "--yes",
    ]));
    assert_eq!(
        fs::read(d.join("imported.pub")).unwrap(),
        fs::read(d.join("plain.pub")).unwrap()
    );
    let (code, doc, stderr) = verify(
        d,
        &["--key", "plain.pub", "--key", "filekey.pub", &reference],
    );
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(doc["signatures"].as_array().unwrap().len(), 2, "{doc}");
    // cosign's format without a password is refused with the way out.
    let out = rd(d)
        .args([
            "key",
            "generate",
            "--no-password",
            "--output-key-prefix",
            "x",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--format pkcs8"),
        "{}",
        tail(&out.stderr)
    );
    assert!(!d.join("x.key").exists());
}

/// Issue 51: `rdctl build --sign-key` without `--push` does not write the output directory
/// (`./image`) as the signature's `docker-reference`: the image has no registry name yet, so
/// the payload names none, and `verify` does not say "for ./image".
#[test]
fn build_sign_key_without_push_names_no_directory_as_the_reference() {
    use crate::builder_e2e::{TOOL_BIN, image_file, publish_fixture};
    let dir = tempdir();
    let d = dir.path();
    keys(d);
    let repo_dir = publish_fixture(d, TOOL_BIN);
    let image = d.join("image.toml");
    fs::write(&image, image_file(s(&repo_dir))).unwrap();
    ok(rd(d).args(["lock", "image.toml"]));
    ok(rd(d).args([
        "build",
        "image.toml",
        "--output",
        "./image",
        "--sign-key",
        "ours.key",
        "--quiet",
    ]));
    let (code, doc, stderr) = verify(d, &["--key", "ours.pub", "./image:1.0"]);
    assert_eq!(code, 0, "{stderr}\n{doc}");
    assert_eq!(doc["signatures"][0]["docker_reference"], "", "{doc:#}");
    let text = ok(rd(d).args(["verify", "--key", "ours.pub", "./image:1.0"]));
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(
        !text.contains("for ./image") && !text.contains("for image"),
        "{text}"
    );
    ok(cosign(d).args([
        "verify",
        "--key",
        "ours.pub",
        "--insecure-ignore-tlog=true",
        "--local-image",
        "./image",
    ]));
}
