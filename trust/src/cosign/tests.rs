use super::*;
use crate::keys::generate;

fn image() -> Digest {
    Digest::sha256(b"the image manifest")
}

fn signed(key: &SigningKey, digest: &Digest) -> (Vec<u8>, String) {
    let payload = SimpleSigning::new("registry.example.com/app", digest, None).to_bytes();
    let sig = sign(key, &payload);
    (payload, sig)
}

#[test]
fn tags_from_digest() {
    let d = image();
    assert_eq!(signature_tag(&d), format!("sha256-{}.sig", d.encoded()));
    assert_eq!(attestation_tag(&d), format!("sha256-{}.att", d.encoded()));
}

#[test]
fn sign_and_verify() {
    let k = generate();
    let (payload, sig) = signed(&k.signing, &image());
    verify(k.verifying(), &payload, &sig).unwrap();
    let other = generate();
    assert!(matches!(
        verify(other.verifying(), &payload, &sig),
        Err(SignatureError::BadSignature { .. })
    ));
    let mut tampered = payload.clone();
    tampered[5] ^= 1;
    assert!(verify(k.verifying(), &tampered, &sig).is_err());
}

#[test]
fn manifest_accumulates_and_dedups() {
    let a = generate();
    let b = generate();
    let (p1, s1) = signed(&a.signing, &image());
    let first = append_signature(None, &p1, &s1, a.verifying()).unwrap();
    assert!(first.layer_added);
    let doc: Value = serde_json::from_slice(&first.manifest).unwrap();
    assert_eq!(doc["mediaType"], OCI_MANIFEST_MEDIA_TYPE);
    assert_eq!(doc["config"]["mediaType"], OCI_CONFIG_MEDIA_TYPE);
    assert_eq!(doc["config"]["digest"], first.config_digest.as_str());
    assert_eq!(doc["layers"][0]["mediaType"], SIMPLE_SIGNING_MEDIA_TYPE);
    assert_eq!(
        doc["layers"][0]["annotations"][SIGNATURE_ANNOTATION],
        s1.as_str()
    );
    assert!(doc.get("subject").is_none());
    assert_eq!(first.manifest_digest, Digest::sha256(&first.manifest));
    let cfg: Value = serde_json::from_slice(&first.config).unwrap();
    assert_eq!(cfg["rootfs"]["diff_ids"][0], Digest::sha256(&p1).as_str());
    assert_eq!(cfg["history"].as_array().unwrap().len(), 1);

    // Same key, same payload: a duplicate (cosign compares by verifying, since its
    // signatures are randomised; ours are deterministic, RFC 6979).
    let s1b = sign(&a.signing, &p1);
    let again = append_signature(Some(&first.manifest), &p1, &s1b, a.verifying()).unwrap();
    assert!(!again.layer_added);
    assert_eq!(again.layers.len(), 1);

    // Another key: appended after the first.
    let s2 = sign(&b.signing, &p1);
    let second = append_signature(Some(&first.manifest), &p1, &s2, b.verifying()).unwrap();
    assert!(second.layer_added);
    let layers = signature_layers(&second.manifest).unwrap();
    assert_eq!(layers.len(), 2);
    assert_eq!(layers[0].signature_b64, s1);
    assert_eq!(layers[1].signature_b64, s2);
    let cfg: Value = serde_json::from_slice(&second.config).unwrap();
    assert_eq!(cfg["rootfs"]["diff_ids"].as_array().unwrap().len(), 2);
}

#[test]
fn referrer_has_subject_and_artifact_config() {
    let k = generate();
    let (p, s) = signed(&k.signing, &image());
    let subject = BlobDescriptor {
        media_type: OCI_MANIFEST_MEDIA_TYPE.to_owned(),
        size: 1234,
        digest: image(),
    };
    let m = append_signature_referrer(None, &p, &s, k.verifying(), &subject).unwrap();
    let doc: Value = serde_json::from_slice(&m.manifest).unwrap();
    assert_eq!(doc["subject"]["digest"], image().as_str());
    assert_eq!(doc["subject"]["size"], 1234);
    assert_eq!(doc["config"]["mediaType"], ARTIFACT_SIG_CONFIG_MEDIA_TYPE);
}

#[test]
fn verify_layer_outcomes() {
    let k = generate();
    let other = generate();
    let (p, s) = signed(&k.signing, &image());
    let m = append_signature(None, &p, &s, k.verifying()).unwrap();
    let layers = signature_layers(&m.manifest).unwrap();
    let keys = [other.verifying().clone(), k.verifying().clone()];

    let ok = verify_signature_layer(&keys, &layers[0], &p, &image()).unwrap();
    assert_eq!(&ok.key_id, k.verifying().key_id());
    assert_eq!(ok.docker_reference, "registry.example.com/app");

    let e = verify_signature_layer(&keys[..1], &layers[0], &p, &image()).unwrap_err();
    match &e {
        SignatureError::BadSignature { tried, .. } => {
            assert_eq!(tried, &[other.verifying().key_id().short().to_owned()])
        }
        other => panic!("{other}"),
    }
    // The words an operator reads: the key tried, and that a change after signing looks
    // the same as another key.
    let text = e.to_string();
    assert!(text.contains(other.verifying().key_id().short()), "{text}");
    assert!(
        text.contains("or the payload was changed after signing"),
        "{text}"
    );

    let mut tampered = p.clone();
    tampered[0] = b' ';
    let e = verify_signature_layer(&keys, &layers[0], &tampered, &image()).unwrap_err();
    assert!(matches!(e, SignatureError::PayloadTampered { .. }), "{e}");

    // A valid signature of another manifest replayed onto this one.
    let e = verify_signature_layer(&keys, &layers[0], &p, &Digest::sha256(b"other")).unwrap_err();
    assert!(matches!(e, SignatureError::DigestMismatch { .. }), "{e}");
}

#[test]
fn no_signature_and_malformed() {
    let empty = br#"{"schemaVersion":2,"config":{"mediaType":"x","size":0,"digest":"sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},"layers":[]}"#;
    assert!(matches!(
        signature_layers(empty),
        Err(SignatureError::NoSignature { .. })
    ));
    assert!(matches!(
        signature_layers(b"{"),
        Err(SignatureError::Malformed { .. })
    ));
}
