//! Interoperability with the real cosign (v2.6, `.tools/bin/cosign`, built by
//! scripts/install-deps.sh), offline: no registry, no transparency log.
//!
//! A missing cosign fails these tests with the way to install it; they never skip.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use trust::cosign::{self, SimpleSigning};
use trust::dsse::{Envelope, IN_TOTO_PAYLOAD_TYPE};
use trust::intoto::{PREDICATE_SLSA_V1, Statement};
use trust::{SigningKey, VerifyingKey};
use zeroize::Zeroizing;

fn cosign_bin() -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let local = root.join(".tools/bin/cosign");
    if local.is_file() {
        return local;
    }
    let on_path = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join("cosign"))
            .find(|p| p.is_file())
    });
    on_path.unwrap_or_else(|| {
        panic!("cosign is not installed: run scripts/install-deps.sh (it builds .tools/bin/cosign)")
    })
}

/// cosign in `dir`, with a password in the environment and no network-facing defaults.
fn cosign(dir: &Path, password: &str) -> Command {
    let mut c = Command::new(cosign_bin());
    c.current_dir(dir)
        .env("COSIGN_PASSWORD", password)
        .env("HOME", dir)
        .env("TUF_ROOT", dir.join("tuf"))
        .env_remove("COSIGN_EXPERIMENTAL")
        .env_remove("COSIGN_REPOSITORY");
    c
}

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn pw(s: &'static str) -> impl FnMut() -> Result<Zeroizing<String>, trust::keys::PasswordError> {
    move || Ok(Zeroizing::new(s.to_owned()))
}

fn payload() -> Vec<u8> {
    let digest = validator::Digest::sha256(b"an image manifest");
    SimpleSigning::new("registry.example.com/app", &digest, None).to_bytes()
}

#[test]
fn cosign_key_signs_with_us_and_cosign_verifies() {
    let dir = tempfile::tempdir().unwrap();
    run(cosign(dir.path(), "pw").arg("generate-key-pair"));
    let key_pem = std::fs::read(dir.path().join("cosign.key")).unwrap();
    let key = SigningKey::from_pem(&key_pem, "cosign.key", &mut pw("pw")).unwrap();
    // Our reading of cosign.pub is the same key.
    let pub_pem = std::fs::read(dir.path().join("cosign.pub")).unwrap();
    let public = VerifyingKey::from_pem(&pub_pem, "cosign.pub").unwrap();
    assert_eq!(key.verifying_key(), &public);

    let wrong = SigningKey::from_pem(&key_pem, "cosign.key", &mut pw("nope")).unwrap_err();
    assert!(
        matches!(wrong, trust::KeyError::WrongPassword { .. }),
        "{wrong}"
    );

    let body = payload();
    std::fs::write(dir.path().join("payload.json"), &body).unwrap();
    std::fs::write(dir.path().join("payload.sig"), cosign::sign(&key, &body)).unwrap();
    run(cosign(dir.path(), "pw").args([
        "verify-blob",
        "--key",
        "cosign.pub",
        "--signature",
        "payload.sig",
        "--insecure-ignore-tlog=true",
        "payload.json",
    ]));
    // And a signature over other bytes is refused.
    std::fs::write(dir.path().join("other.json"), b"{}").unwrap();
    let out = cosign(dir.path(), "pw")
        .args([
            "verify-blob",
            "--key",
            "cosign.pub",
            "--signature",
            "payload.sig",
            "--insecure-ignore-tlog=true",
            "other.json",
        ])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "cosign accepted a signature over other bytes"
    );
}

#[test]
fn cosign_signs_and_we_verify() {
    let dir = tempfile::tempdir().unwrap();
    run(cosign(dir.path(), "pw").arg("generate-key-pair"));
    let body = payload();
    std::fs::write(dir.path().join("payload.json"), &body).unwrap();
    let out = run(cosign(dir.path(), "pw").args([
        "sign-blob",
        "--yes",
        "--key",
        "cosign.key",
        "--tlog-upload=false",
        "payload.json",
    ]));
    let sig = String::from_utf8(out.stdout).unwrap();
    let out = run(cosign(dir.path(), "pw").args(["public-key", "--key", "cosign.key"]));
    let public = VerifyingKey::from_pem(&out.stdout, "cosign public-key").unwrap();
    cosign::verify(&public, &body, sig.trim()).unwrap();
    let mut other = body.clone();
    other.push(b' ');
    assert!(cosign::verify(&public, &other, sig.trim()).is_err());
}

#[test]
fn our_keys_import_into_cosign() {
    let dir = tempfile::tempdir().unwrap();
    let pair = trust::generate();
    // cosign import-key-pair reads unencrypted PEM only (PKCS#1, SEC1, PKCS#8).
    std::fs::write(
        dir.path().join("ours.pem"),
        pair.signing.to_pkcs8_pem(None).unwrap(),
    )
    .unwrap();
    run(cosign(dir.path(), "pw").args([
        "import-key-pair",
        "--key",
        "ours.pem",
        "--output-key-prefix",
        "imported",
        "--yes",
    ]));
    let out = run(cosign(dir.path(), "pw").args(["public-key", "--key", "imported.key"]));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        pair.verifying().to_pem()
    );
    // cosign's re-encryption of our key reads back as our key.
    let imported = std::fs::read(dir.path().join("imported.key")).unwrap();
    let back = SigningKey::from_pem(&imported, "imported.key", &mut pw("pw")).unwrap();
    assert_eq!(back.verifying_key(), pair.verifying());

    // A file in cosign's own format written by us is read by cosign.
    std::fs::write(
        dir.path().join("native.key"),
        pair.signing.to_cosign_pem("pw2").unwrap(),
    )
    .unwrap();
    let out = run(cosign(dir.path(), "pw2").args(["public-key", "--key", "native.key"]));
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        pair.verifying().to_pem()
    );

    // An encrypted PKCS#8 file is refused by import-key-pair (it wants a plain key).
    std::fs::write(
        dir.path().join("enc.pem"),
        pair.signing.to_pkcs8_pem(Some("pw")).unwrap(),
    )
    .unwrap();
    let out = cosign(dir.path(), "pw")
        .args([
            "import-key-pair",
            "--key",
            "enc.pem",
            "--output-key-prefix",
            "enc",
            "--yes",
        ])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "cosign imported an encrypted PKCS#8 key"
    );
}

#[test]
fn blob_attestations_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    run(cosign(dir.path(), "pw").arg("generate-key-pair"));
    let key_pem = std::fs::read(dir.path().join("cosign.key")).unwrap();
    let key = SigningKey::from_pem(&key_pem, "cosign.key", &mut pw("pw")).unwrap();
    let public = key.verifying_key().clone();

    let artifact = b"an artifact\n";
    std::fs::write(dir.path().join("artifact"), artifact).unwrap();
    let digest = validator::Digest::sha256(artifact);
    let predicate = serde_json::json!({
        "buildDefinition": {"buildType": "https://reddwarf.invalid/rdctl/build/v1",
                            "externalParameters": {}},
        "runDetails": {"builder": {"id": "https://reddwarf.invalid/rdctl"}}
    });

    // Ours → cosign.
    let statement = Statement::for_image("artifact", &digest, PREDICATE_SLSA_V1, predicate.clone());
    let env = Envelope::sign(&key, IN_TOTO_PAYLOAD_TYPE, &statement.to_bytes());
    std::fs::write(dir.path().join("ours.intoto.json"), env.to_json()).unwrap();
    run(cosign(dir.path(), "pw").args([
        "verify-blob-attestation",
        "--key",
        "cosign.pub",
        "--signature",
        "ours.intoto.json",
        "--type",
        "slsaprovenance1",
        "--insecure-ignore-tlog=true",
        "artifact",
    ]));

    // cosign → ours.
    std::fs::write(dir.path().join("predicate.json"), predicate.to_string()).unwrap();
    run(cosign(dir.path(), "pw").args([
        "attest-blob",
        "--yes",
        "--key",
        "cosign.key",
        "--predicate",
        "predicate.json",
        "--type",
        "slsaprovenance1",
        "--tlog-upload=false",
        "--output-signature",
        "theirs.intoto.json",
        "artifact",
    ]));
    let theirs = std::fs::read(dir.path().join("theirs.intoto.json")).unwrap();
    let env = Envelope::from_json(&theirs).unwrap();
    assert_eq!(env.payload_type, IN_TOTO_PAYLOAD_TYPE);
    let verified = env.verify(&[public]).unwrap();
    let statement: Statement = serde_json::from_slice(verified.payload).unwrap();
    assert_eq!(statement.predicate_type, PREDICATE_SLSA_V1);
    assert!(statement.is_about(&digest), "{statement:?}");
}

/// A blob written into `layout`'s `blobs/sha256/`; returns its digest.
fn put_blob(layout: &Path, bytes: &[u8]) -> validator::Digest {
    let d = validator::Digest::sha256(bytes);
    let dir = layout.join("blobs/sha256");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(d.encoded()), bytes).unwrap();
    d
}

/// An OCI layout as `cosign save` writes it, which `cosign verify --local-image` reads: the
/// image manifest and the signature and attestation manifests in `index.json`, told apart by
/// a `kind` annotation. Returns the image manifest's digest.
fn image_layout(
    layout: &Path,
    image_manifest: &[u8],
    sigs: Option<&cosign::AttachedManifest>,
    atts: Option<&cosign::AttachedManifest>,
    blobs: &[&[u8]],
) -> validator::Digest {
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let image = put_blob(layout, image_manifest);
    let entry = |bytes: &[u8], digest: &validator::Digest, kind: &str| {
        serde_json::json!({
            "mediaType": cosign::OCI_MANIFEST_MEDIA_TYPE,
            "size": bytes.len(),
            "digest": digest.as_str(),
            "annotations": {"kind": kind},
        })
    };
    let mut manifests = vec![entry(
        image_manifest,
        &image,
        "dev.cosignproject.cosign/image",
    )];
    for (m, kind) in [
        (sigs, "dev.cosignproject.cosign/sigs"),
        (atts, "dev.cosignproject.cosign/atts"),
    ] {
        if let Some(m) = m {
            put_blob(layout, &m.config);
            put_blob(layout, &m.manifest);
            manifests.push(entry(&m.manifest, &m.manifest_digest, kind));
        }
    }
    for b in blobs {
        put_blob(layout, b);
    }
    let index = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": manifests,
    });
    std::fs::write(layout.join("index.json"), index.to_string()).unwrap();
    image
}

/// A small, valid image manifest (with its config blob written to the layout).
fn test_image(layout: &Path) -> Vec<u8> {
    let config =
        br#"{"architecture":"amd64","os":"illumos","rootfs":{"type":"layers","diff_ids":[]}}"#;
    let d = put_blob(layout, config);
    serde_json::json!({
        "schemaVersion": 2,
        "mediaType": cosign::OCI_MANIFEST_MEDIA_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "size": config.len(), "digest": d.as_str()},
        "layers": [],
    })
    .to_string()
    .into_bytes()
}

#[test]
fn our_signature_manifest_verifies_with_cosign() {
    let dir = tempfile::tempdir().unwrap();
    run(cosign(dir.path(), "pw").arg("generate-key-pair"));
    let key_pem = std::fs::read(dir.path().join("cosign.key")).unwrap();
    let key = SigningKey::from_pem(&key_pem, "cosign.key", &mut pw("pw")).unwrap();
    let other = trust::generate();

    let layout = dir.path().join("image");
    std::fs::create_dir(&layout).unwrap();
    let image = test_image(&layout);
    let digest = validator::Digest::sha256(&image);

    // Two signatures accumulate: one by a stranger, one by cosign.key.
    let p = SimpleSigning::new("registry.example.com/app", &digest, None).to_bytes();
    let first = cosign::append_signature(
        None,
        &p,
        &cosign::sign(&other.signing, &p),
        other.verifying(),
    )
    .unwrap();
    let sigs = cosign::append_signature(
        Some(&first.manifest),
        &p,
        &cosign::sign(&key, &p),
        key.verifying_key(),
    )
    .unwrap();
    assert_eq!(sigs.layers.len(), 2);
    image_layout(&layout, &image, Some(&sigs), None, &[&p]);
    let out = run(cosign(dir.path(), "pw").args([
        "verify",
        "--key",
        "cosign.pub",
        "--insecure-ignore-tlog=true",
        "--local-image",
        "image",
    ]));
    let verified: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(
        verified[0]["critical"]["image"]["docker-manifest-digest"],
        digest.as_str()
    );

    // A valid signature of another manifest, replayed onto this one: cosign refuses, as we do.
    let replayed = dir.path().join("replayed");
    std::fs::create_dir(&replayed).unwrap();
    let image = test_image(&replayed);
    let digest = validator::Digest::sha256(&image);
    let elsewhere = validator::Digest::sha256(b"another manifest");
    let p = SimpleSigning::new("registry.example.com/app", &elsewhere, None).to_bytes();
    let sigs =
        cosign::append_signature(None, &p, &cosign::sign(&key, &p), key.verifying_key()).unwrap();
    image_layout(&replayed, &image, Some(&sigs), None, &[&p]);
    let out = cosign(dir.path(), "pw")
        .args([
            "verify",
            "--key",
            "cosign.pub",
            "--insecure-ignore-tlog=true",
            "--local-image",
            "replayed",
        ])
        .output()
        .unwrap();
    assert!(
        !out.status.success(),
        "cosign accepted a replayed signature"
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("invalid or missing digest in claim"),
        "cosign refused for another reason:\n{stderr}"
    );
    let layer = &cosign::signature_layers(&sigs.manifest).unwrap()[0];
    let e = cosign::verify_signature_layer(&[key.verifying_key().clone()], layer, &p, &digest)
        .unwrap_err();
    assert!(
        matches!(e, trust::SignatureError::DigestMismatch { .. }),
        "{e}"
    );
}

#[test]
fn our_attestation_manifest_verifies_with_cosign() {
    let dir = tempfile::tempdir().unwrap();
    run(cosign(dir.path(), "pw").arg("generate-key-pair"));
    let key_pem = std::fs::read(dir.path().join("cosign.key")).unwrap();
    let key = SigningKey::from_pem(&key_pem, "cosign.key", &mut pw("pw")).unwrap();

    let layout = dir.path().join("image");
    std::fs::create_dir(&layout).unwrap();
    let image = test_image(&layout);
    let digest = validator::Digest::sha256(&image);
    let provenance = trust::slsa::Provenance::for_rdctl_build(&trust::slsa::RdctlBuild {
        image_file: "image.toml",
        image_file_digest: &validator::Digest::sha256(b"image.toml"),
        lockfile: None,
        publishers: &[],
        packages: &[],
        builder_id: "https://reddwarf.invalid/rdctl",
        rdctl_version: "0.1.0",
        source_date_epoch: Some(1_700_000_000),
        invocation_id: None,
    });
    let statement = Statement::for_image(
        "registry.example.com/app",
        &digest,
        PREDICATE_SLSA_V1,
        provenance.to_value(),
    );
    let envelope = trust::attestation::sign_statement(&key, &statement);
    let atts =
        trust::attestation::append_attestation(None, &envelope, PREDICATE_SLSA_V1, false).unwrap();
    image_layout(&layout, &image, None, Some(&atts), &[&envelope]);
    run(cosign(dir.path(), "pw").args([
        "verify-attestation",
        "--key",
        "cosign.pub",
        "--type",
        "slsaprovenance1",
        "--insecure-ignore-tlog=true",
        "--local-image",
        "image",
    ]));
    // And through our own check.
    let layer = &trust::attestation::attestation_layers(&atts.manifest).unwrap()[0];
    let v = trust::attestation::verify_attestation_layer(
        &[key.verifying_key().clone()],
        layer,
        &envelope,
        &digest,
    )
    .unwrap();
    assert_eq!(v.predicate_type, PREDICATE_SLSA_V1);
}
