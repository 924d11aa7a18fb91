//! Signing with the current cosign (v3.1.3: sigstore bundle v0.3 referrers by default) and
//! rdctl, both ways, offline and key-based: at our registry (referrers API), at CNCF
//! distribution v3 and at Debian's distribution 2.8 (neither has the referrers API: cosign's
//! `sha256-<hex>` tag-schema index). cosign v3 signs and attests, rdctl verifies and inspects;
//! rdctl signs and attests with `--format bundle`, cosign v3 verifies; a bundle whose statement
//! was changed after signing and pushed again is refused with words an operator can act on.
//! cosign v2.6.5 keeps its own tests (tests/signing.rs); here it reads rdctl's legacy format
//! beside the bundles.

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::signing::{PASSWORD, key_id, pushed_image, rd, verify};
use crate::util::{Distribution, Server, ok, s, tail, tempdir, tool};

/// cosign v3 in `dir`: the key password in the environment, a private HOME and TUF root.
fn cosign3(dir: &Path) -> Command {
    let mut c = tool("cosign3");
    c.current_dir(dir)
        .env("COSIGN_PASSWORD", PASSWORD)
        .env("HOME", dir)
        .env("TUF_ROOT", dir.join("tuf"))
        .env_remove("COSIGN_EXPERIMENTAL")
        .env_remove("COSIGN_REPOSITORY");
    c
}

/// Keys (`cosign.key` from cosign v3, `ours.key` and `stranger.key` from rdctl) and an empty
/// signing config: cosign v3 signs offline with it (no Rekor, no TSA).
fn setup(dir: &Path) {
    ok(cosign3(dir).arg("generate-key-pair"));
    ok(rd(dir).args(["key", "generate", "--output-key-prefix", "ours"]));
    ok(rd(dir).args(["key", "generate", "--output-key-prefix", "stranger"]));
    ok(cosign3(dir).args(["signing-config", "create", "--out", "sc.json"]));
    fs::write(dir.join("sbom.json"), SBOM).unwrap();
}

const SBOM: &str = r#"{"spdxVersion":"SPDX-2.3","dataLicense":"CC0-1.0","SPDXID":"SPDXRef-DOCUMENT","name":"bundles","documentNamespace":"https://example.invalid/bundles","creationInfo":{"created":"2026-01-01T00:00:00Z","creators":["Tool: test"]},"packages":[]}"#;

fn cosign3_sign(dir: &Path, key: &str, image: &str) {
    ok(cosign3(dir).args([
        "sign",
        "--yes",
        "--key",
        key,
        "--signing-config",
        "sc.json",
        "--allow-http-registry",
        image,
    ]));
}

fn cosign3_attest(dir: &Path, key: &str, image: &str) {
    ok(cosign3(dir).args([
        "attest",
        "--yes",
        "--key",
        key,
        "--signing-config",
        "sc.json",
        "--type",
        "spdxjson",
        "--predicate",
        "sbom.json",
        "--allow-http-registry",
        image,
    ]));
}

fn cosign3_verifies(dir: &Path, key: &str, image: &str, attestation: bool) {
    let mut c = cosign3(dir);
    if attestation {
        c.args(["verify-attestation", "--type", "spdxjson"]);
    } else {
        c.arg("verify");
    }
    let out = c
        .args([
            "--key",
            key,
            "--insecure-ignore-tlog=true",
            "--allow-http-registry",
            image,
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "cosign v3 {} --key {key} {image} failed:\n{}",
        if attestation {
            "verify-attestation"
        } else {
            "verify"
        },
        tail(&out.stderr)
    );
}

/// Everything both ways at one registry; `found_by` is how rdctl finds a referrer there.
fn both_ways(d: &Path, host: &str, found_by: &str) {
    let repo = format!("{host}/bundles/app");

    // cosign v3 signs and attests (bundles only, no .sig/.att tag); rdctl verifies.
    let digest = pushed_image(d, "signed by cosign v3\n", &format!("{repo}:v1"));
    let by_digest = format!("{repo}@{digest}");
    cosign3_sign(d, "cosign.key", &by_digest);
    cosign3_attest(d, "cosign.key", &by_digest);
    let (code, doc, stderr) = verify(
        d,
        &[
            "--key",
            "cosign.pub",
            "--attestation",
            "spdxjson",
            &format!("{repo}:v1"),
        ],
    );
    assert_eq!(code, 0, "{stderr}\n{doc}");
    assert_eq!(doc["signatures"].as_array().unwrap().len(), 1, "{doc}");
    assert_eq!(doc["signatures"][0]["key_id"], key_id(d, "cosign.pub"));
    assert_eq!(
        doc["signatures"][0]["origin"]["found_by"], found_by,
        "{doc}"
    );
    assert_eq!(
        doc["attestations"][0]["predicate_type"], "https://spdx.dev/Document",
        "{doc}"
    );

    // Another key: refused, naming the key tried and both possible causes.
    let (code, doc, stderr) = verify(d, &["--key", "stranger.pub", &by_digest]);
    assert_eq!(code, 1, "{doc}");
    let short = &key_id(d, "stranger.pub")[..19];
    let message = doc["rejected"][0]["message"].as_str().unwrap();
    assert!(
        message.contains(short) && message.contains("changed after signing"),
        "{message}"
    );
    assert!(
        stderr.contains("another key, or the payload was changed"),
        "{stderr}"
    );

    // inspect tells the bundles apart by their predicate type.
    let out = ok(rd(d).args(["inspect", "--json", &by_digest]));
    let i: Value = serde_json::from_slice(&out.stdout).unwrap();
    let mut kinds: Vec<&str> = i["referrers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["artifact_type"] == "application/vnd.dev.sigstore.bundle.v0.3+json")
        .map(|r| r["kind"].as_str().unwrap())
        .collect();
    kinds.sort();
    // cosign's tag-schema index drops the predicate annotation: there both read as signatures
    // until verified, and verification (above) tells them apart.
    if found_by == "referrers-api" {
        assert_eq!(kinds, ["attestation", "signature"], "{i}");
    } else {
        assert_eq!(kinds.len(), 2, "{i}");
    }

    // rdctl signs and attests as bundles; cosign v3 verifies both.
    let digest = pushed_image(d, "signed by rdctl, bundles\n", &format!("{repo}:v2"));
    let by_digest = format!("{repo}@{digest}");
    let out = ok(rd(d).args([
        "sign", "--key", "ours.key", "--format", "bundle", "--json", &by_digest,
    ]));
    let signed: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(signed["referrer"].is_string(), "{signed}");
    ok(rd(d).args([
        "attest",
        "--key",
        "ours.key",
        "--format",
        "bundle",
        "--type",
        "spdxjson",
        "--predicate",
        "sbom.json",
        &by_digest,
    ]));
    cosign3_verifies(d, "ours.pub", &by_digest, false);
    cosign3_verifies(d, "ours.pub", &by_digest, true);
    // No legacy tag was written for them.
    let tag = format!("{}.sig", digest.replace(':', "-"));
    let out = rd(d)
        .args(["inspect", &format!("{repo}:{tag}")])
        .output()
        .unwrap();
    assert!(!out.status.success(), "a .sig tag was written");

    // rdctl's legacy signature (the default) is read by cosign v3 too, on an image without
    // bundles: cosign v3 reads the .sig tag only when it finds no bundle referrer.
    let digest = pushed_image(d, "signed by rdctl, legacy\n", &format!("{repo}:v3"));
    ok(rd(d).args(["sign", "--key", "ours.key", &format!("{repo}:v3")]));
    cosign3_verifies(d, "ours.pub", &format!("{repo}@{digest}"), false);
}

#[test]
fn cosign_v3_bundles_at_our_registry() {
    let dir = tempdir();
    setup(dir.path());
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    both_ways(dir.path(), &reg.host(), "referrers-api");
}

/// The filesystem storage section of a distribution config in `store`.
fn fs_storage(store: &Path) -> String {
    format!(
        "  filesystem:\n    rootdirectory: {}\n",
        s(&store.join("data"))
    )
}

#[test]
fn cosign_v3_bundles_at_distribution_v3() {
    let dir = tempdir();
    setup(dir.path());
    let store = tempdir();
    let dist = Distribution::start_v3(store.path(), &fs_storage(store.path()));
    both_ways(dir.path(), &dist.host(), "referrers-tag");
}

#[test]
fn cosign_v3_bundles_at_distribution_2_8() {
    let dir = tempdir();
    setup(dir.path());
    let store = tempdir();
    let dist = Distribution::start(store.path(), &fs_storage(store.path()));
    both_ways(dir.path(), &dist.host(), "referrers-tag");
}

/// A statement changed after signing, its bundle and referrer pushed again with matching
/// digests (what a registry cannot tell from a real one): refused as not verifying with the
/// key, never as "no signatures".
#[test]
fn a_bundle_changed_after_signing_is_refused_with_both_causes() {
    let dir = tempdir();
    let d = dir.path();
    setup(d);
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let repo = format!("{}/bundles/edited", reg.host());
    let digest = pushed_image(d, "edited later\n", &format!("{repo}:v1"));
    let work = d.join("pulled");
    ok(rd(d).args([
        "sign",
        "--key",
        "ours.key",
        "--format",
        "bundle",
        &format!("{repo}:v1"),
    ]));
    // Read the bundle back through rdctl's JSON, edit the statement, push the edited bundle
    // as a new referrer with rdctl's raw copy path (a layout carrying only the referrer).
    let (_, doc, _) = verify(d, &["--key", "ours.pub", &format!("{repo}:v1")]);
    let layer = doc["signatures"][0]["layer"].as_str().unwrap().to_owned();
    ok(rd(d).args([
        "pull",
        &format!("{repo}:v1"),
        &format!("oci:{}:v1", s(&work)),
    ]));
    let blob = |dg: &str| {
        work.join("blobs/sha256")
            .join(dg.trim_start_matches("sha256:"))
    };
    let mut bundle: Value = serde_json::from_slice(&fs::read(blob(&layer)).unwrap()).unwrap();
    use base64::Engine;
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut st: Value = serde_json::from_slice(
        &b64.decode(bundle["dsseEnvelope"]["payload"].as_str().unwrap())
            .unwrap(),
    )
    .unwrap();
    st["subject"][0]["name"] = Value::from("evil.example/other");
    bundle["dsseEnvelope"]["payload"] = Value::from(b64.encode(serde_json::to_vec(&st).unwrap()));
    let edited = serde_json::to_vec(&bundle).unwrap();
    // The pulled layout has the referrer: rewrite its one layer to the edited bundle.
    let index: Value = serde_json::from_slice(&fs::read(work.join("index.json")).unwrap()).unwrap();
    let referrer = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["artifactType"] == "application/vnd.dev.sigstore.bundle.v0.3+json")
        .unwrap_or_else(|| panic!("no bundle referrer pulled: {index}"))["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let mut m: Value = serde_json::from_slice(&fs::read(blob(&referrer)).unwrap()).unwrap();
    let edited_digest = trust_digest(&edited);
    fs::write(blob(&edited_digest), &edited).unwrap();
    m["layers"][0]["digest"] = Value::from(edited_digest.clone());
    m["layers"][0]["size"] = Value::from(edited.len());
    let m = serde_json::to_vec(&m).unwrap();
    let md = trust_digest(&m);
    fs::write(blob(&md), &m).unwrap();
    let mut index = index;
    for e in index["manifests"].as_array_mut().unwrap() {
        if e["digest"] == referrer.as_str() {
            e["digest"] = Value::from(md.clone());
            e["size"] = Value::from(m.len());
        }
    }
    fs::write(work.join("index.json"), serde_json::to_vec(&index).unwrap()).unwrap();
    // A fresh repository gets the image and only the edited referrer.
    let edited_repo = format!("{}/bundles/edited2", reg.host());
    ok(rd(d).args([
        "push",
        &format!("oci:{}:v1", s(&work)),
        &format!("{edited_repo}:v1"),
    ]));
    let (code, doc, stderr) = verify(d, &["--key", "ours.pub", &format!("{edited_repo}:v1")]);
    assert_eq!(code, 1, "{doc}");
    assert!(!stderr.contains("no signatures found"), "{stderr}");
    assert!(
        stderr.contains("another key, or the payload was changed after signing"),
        "{stderr}"
    );
    assert_eq!(doc["rejected"][0]["layer"], edited_digest.as_str(), "{doc}");
    assert_eq!(doc["digest"], digest.as_str());
}

fn trust_digest(bytes: &[u8]) -> String {
    validator::Digest::sha256(bytes).to_string()
}

/// The worker admits an image that only cosign v3 signed (a bundle, no `.sig` tag) under a
/// `signed` rule with cosign's key and a required SPDX attestation (also a bundle), and
/// refuses its unsigned neighbour: before this, the bundle was invisible and the image read as
/// unsigned.
#[test]
fn the_worker_admits_an_image_signed_and_attested_by_cosign_v3() {
    use crate::worker_policy::{illumos_image, policy_node};
    let dir = tempdir();
    let d = dir.path();
    setup(d);
    let data = tempdir();
    let reg = Server::start(data.path(), &[]);
    let signed = format!("{}/prod/signed:1", reg.host());
    let unsigned = format!("{}/prod/unsigned:1", reg.host());
    let digest = illumos_image(d, "signed", &signed);
    illumos_image(d, "unsigned", &unsigned);
    let by_digest = format!("{}/prod/signed@{digest}", reg.host());
    cosign3_sign(d, "cosign.key", &by_digest);
    cosign3_attest(d, "cosign.key", &by_digest);
    fs::write(
        d.join("policy.toml"),
        "[[rule]]\nmatch = \"**/prod/*\"\naction = \"signed\"\nkeys = [\"cosign.pub\"]\n\
         require_attestations = [\"spdxjson\"]\n",
    )
    .unwrap();
    let node = policy_node(&d.join("node"), "../policy.toml", "");
    node.zone("signed", &signed);
    node.zone("unsigned", &unsigned);
    let out = node.run_once();
    assert!(!out.status.success(), "the unsigned zone fails the pass");
    let st = node.status();
    assert_eq!(st["signed"]["phase"], "Ready", "{:#}", st["signed"]);
    assert_eq!(st["signed"]["current_digest"], digest.as_str());
    assert_eq!(
        st["signed"]["admission"]["attestations"],
        serde_json::json!(["https://spdx.dev/Document"]),
        "{:#}",
        st["signed"]
    );
    assert!(
        st["signed"]["admission"]["keys"][0]
            .as_str()
            .is_some_and(|k| key_id(d, "cosign.pub").starts_with(k)),
        "{:#}",
        st["signed"]
    );
    assert!(node.root("signed").is_dir(), "the signed zone exists");
    assert_eq!(st["unsigned"]["phase"], "Denied", "{:#}", st["unsigned"]);
    assert!(!node.root("unsigned").exists());
}

/// Copies carry cosign v3's bundles: registry (referrers API) to distribution v3 (tag schema),
/// through a layout, and by `rdctl sync`; cosign v3 and rdctl verify at every destination.
#[test]
fn copy_pull_push_and_sync_carry_bundles() {
    let dir = tempdir();
    let d = dir.path();
    setup(d);
    let data = tempdir();
    let a = Server::start(data.path(), &[]);
    let store = tempdir();
    let b = Distribution::start_v3(store.path(), &fs_storage(store.path()));
    let src = format!("{}/trusted/app", a.host());
    let digest = pushed_image(d, "travels with bundles\n", &format!("{src}:v1"));
    cosign3_sign(d, "cosign.key", &format!("{src}@{digest}"));
    cosign3_attest(d, "cosign.key", &format!("{src}@{digest}"));
    let verified_at = |reference: &str| {
        let (code, doc, stderr) = verify(
            d,
            &[
                "--key",
                "cosign.pub",
                "--attestation",
                "spdxjson",
                reference,
            ],
        );
        assert_eq!(code, 0, "{reference}: {stderr}\n{doc}");
    };

    // Registry to registry (referrers API to the tag schema).
    let dst = format!("{}/copied/app", b.host());
    ok(rd(d).args(["copy", &format!("{src}:v1"), &format!("{dst}:v1")]));
    cosign3_verifies(d, "cosign.pub", &format!("{dst}@{digest}"), false);
    cosign3_verifies(d, "cosign.pub", &format!("{dst}@{digest}"), true);
    verified_at(&format!("{dst}:v1"));

    // Through a layout.
    let pulled = d.join("pulled");
    ok(rd(d).args([
        "pull",
        &format!("{src}:v1"),
        &format!("oci:{}:v1", s(&pulled)),
    ]));
    verified_at(&format!("oci:{}:v1", s(&pulled)));
    let again = format!("{}/through-layout/app", b.host());
    ok(rd(d).args([
        "push",
        &format!("oci:{}:v1", s(&pulled)),
        &format!("{again}:v1"),
    ]));
    cosign3_verifies(d, "cosign.pub", &format!("{again}@{digest}"), false);
    verified_at(&format!("{again}:v1"));

    // sync, registry to registry (source prefix `trusted`, destination prefix `synced`).
    ok(rd(d).args([
        "sync",
        &format!("{}/trusted", a.host()),
        &format!("{}/synced", b.host()),
    ]));
    verified_at(&format!("{}/synced/app:v1", b.host()));
    cosign3_verifies(
        d,
        "cosign.pub",
        &format!("{}/synced/app@{digest}", b.host()),
        true,
    );
}
