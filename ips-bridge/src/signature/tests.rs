//! The fixtures in `testdata/` were made with the real tools (pkg5 at the commit docs/ips.md
//! names): `openssl` made a root CA, an intermediate CA (`pathlen:0`) and a signing
//! certificate (`digitalSignature`), plus a certificate with `keyEncipherment` too and a
//! second root with the same name as the first; `pkgsend publish` then `pkgsign -k signer.key
//! -c signer.pem -i intermediate.pem` made `signed.p5m` and `tricky.p5m`; `*.msg` is what
//! pkg5's own `SignatureAction.actions_to_str` returns for each (the text the signature
//! covers).

use std::collections::BTreeMap;

use super::*;

const SIGNED: &str = include_str!("testdata/signed.p5m");
const SIGNED_MSG: &str = include_str!("testdata/signed.msg");
const TRICKY: &str = include_str!("testdata/tricky.p5m");
const TRICKY_MSG: &str = include_str!("testdata/tricky.msg");
const ROOT: &[u8] = include_bytes!("testdata/root.pem");
const OTHER_ROOT: &[u8] = include_bytes!("testdata/other-root.pem");
const INTERMEDIATE: &[u8] = include_bytes!("testdata/intermediate.pem");
const SIGNER: &[u8] = include_bytes!("testdata/signer.pem");
const ENCIPHERER: &[u8] = include_bytes!("testdata/encipherer.pem");

fn sha1(b: &[u8]) -> String {
    crate::hash_hex(crate::HashAlg::Sha1, b)
}

/// A repository's file store holding the certificates, by SHA-1; counts fetches.
struct Store {
    files: BTreeMap<String, Vec<u8>>,
    fetched: Vec<String>,
}

impl Store {
    fn new(certs: &[&[u8]]) -> Store {
        Store {
            files: certs.iter().map(|c| (sha1(c), c.to_vec())).collect(),
            fetched: Vec::new(),
        }
    }

    fn verify(
        &mut self,
        manifest: &Manifest,
        policy: SignaturePolicy,
        anchors: &TrustAnchors,
    ) -> Result<SignatureReport, SignatureError> {
        let mut fetch = |a: &Action| -> Result<Vec<u8>, Box<dyn std::error::Error + Send + Sync>> {
            let h = a.hash().unwrap().to_owned();
            self.fetched.push(h.clone());
            let bytes = self.files.get(&h).ok_or("no such file")?.clone();
            // What a repository checks before handing a payload out.
            assert_eq!(sha1(&bytes), h);
            Ok(bytes)
        };
        verify_manifest(manifest, policy, Some(anchors), &mut fetch)
    }
}

fn anchors(pem: &[u8]) -> TrustAnchors {
    TrustAnchors::from_pem(pem, "test root").unwrap()
}

#[test]
fn the_signed_text_is_pkg5s_byte_for_byte() {
    for (text, msg) in [(SIGNED, SIGNED_MSG), (TRICKY, TRICKY_MSG)] {
        let m = Manifest::parse(text).unwrap();
        let sig = m.by_kind(ActionKind::Signature).next().unwrap();
        assert_eq!(signed_message(&m, sig), msg);
    }
}

#[test]
fn a_pkgsign_signature_verifies_through_its_intermediate_to_the_root() {
    let m = Manifest::parse(SIGNED).unwrap();
    let mut store = Store::new(&[SIGNER, INTERMEDIATE]);
    let report = store
        .verify(&m, SignaturePolicy::RequireSignatures, &anchors(ROOT))
        .unwrap();
    assert_eq!(report.signed_by, ["CN=Test Signer"]);
    // The signing certificate, then the chain, each by the SHA-1 the action names.
    assert_eq!(store.fetched, [sha1(SIGNER), sha1(INTERMEDIATE)]);
    let tricky = Manifest::parse(TRICKY).unwrap();
    Store::new(&[SIGNER, INTERMEDIATE])
        .verify(&tricky, SignaturePolicy::Verify, &anchors(ROOT))
        .unwrap();
}

#[test]
fn a_changed_manifest_does_not_verify() {
    let text = SIGNED.replace("mode=0555", "mode=4555");
    let m = Manifest::parse(&text).unwrap();
    let err = Store::new(&[SIGNER, INTERMEDIATE])
        .verify(&m, SignaturePolicy::Verify, &anchors(ROOT))
        .unwrap_err();
    assert!(
        matches!(err, SignatureError::Mismatch { ref subject, .. } if subject == "CN=Test Signer"),
        "{err}"
    );
    // A dropped action too.
    let text = SIGNED.replace("dir group=sys mode=0755 owner=root path=usr\n", "");
    assert_ne!(text, SIGNED);
    let m = Manifest::parse(&text).unwrap();
    assert!(matches!(
        Store::new(&[SIGNER, INTERMEDIATE]).verify(&m, SignaturePolicy::Verify, &anchors(ROOT)),
        Err(SignatureError::Mismatch { .. })
    ));
}

#[test]
fn another_root_with_the_same_name_is_not_trusted() {
    let m = Manifest::parse(SIGNED).unwrap();
    let err = Store::new(&[SIGNER, INTERMEDIATE])
        .verify(&m, SignaturePolicy::RequireSignatures, &anchors(OTHER_ROOT))
        .unwrap_err();
    let SignatureError::BrokenChain {
        subject, issuer, ..
    } = &err
    else {
        panic!("{err}");
    };
    assert_eq!(
        (subject.as_str(), issuer.as_str()),
        ("CN=Test Intermediate CA", "CN=Test Root CA")
    );
    assert!(
        err.to_string().contains("is neither a trust anchor"),
        "{err}"
    );
}

#[test]
fn a_missing_intermediate_breaks_the_chain() {
    let m = Manifest::parse(SIGNED).unwrap();
    // The intermediate is a trust anchor's issuer's child: without it nothing signs the leaf.
    let mut store = Store::new(&[SIGNER]);
    let err = store
        .verify(&m, SignaturePolicy::Verify, &anchors(ROOT))
        .unwrap_err();
    assert!(
        matches!(err, SignatureError::Fetch { ref hash, .. } if *hash == sha1(INTERMEDIATE)),
        "{err}"
    );
    // The intermediate trusted directly is enough (pkg ends the walk at any anchor).
    Store::new(&[SIGNER, INTERMEDIATE])
        .verify(&m, SignaturePolicy::Verify, &anchors(INTERMEDIATE))
        .unwrap();
}

#[test]
fn an_unsigned_package_passes_verify_and_fails_require_signatures() {
    let text: String = SIGNED
        .lines()
        .filter(|l| !l.starts_with("signature "))
        .map(|l| format!("{l}\n"))
        .collect();
    let m = Manifest::parse(&text).unwrap();
    let mut store = Store::new(&[]);
    assert_eq!(
        store
            .verify(&m, SignaturePolicy::Verify, &anchors(ROOT))
            .unwrap(),
        SignatureReport::default()
    );
    let err = store
        .verify(&m, SignaturePolicy::RequireSignatures, &anchors(ROOT))
        .unwrap_err();
    assert_eq!(err.to_string(), "not signed: no signature action");
    // Ignore does not even fetch the certificates of a signed one.
    let m = Manifest::parse(SIGNED).unwrap();
    store
        .verify(&m, SignaturePolicy::Ignore, &anchors(OTHER_ROOT))
        .unwrap();
    assert!(store.fetched.is_empty());
}

#[test]
fn a_digest_signature_is_checked_but_does_not_satisfy_require_signatures() {
    let base = "set name=pkg.fmri value=pkg://example.org/demo/d@1.0:20260101T000000Z\n\
                dir group=bin mode=0755 owner=root path=opt\n";
    let unsigned = Manifest::parse(&format!(
        "{base}signature algorithm=sha256 value=00 version=0\n"
    ))
    .unwrap();
    let sig = unsigned.by_kind(ActionKind::Signature).next().unwrap();
    let digest = hex::encode(Sha2::Sha256.digest(signed_message(&unsigned, sig).as_bytes()));
    let m = Manifest::parse(&format!(
        "{base}signature algorithm=sha256 value={digest} version=0\n"
    ))
    .unwrap();
    let report = Store::new(&[])
        .verify(&m, SignaturePolicy::Verify, &anchors(ROOT))
        .unwrap();
    assert_eq!(report.digests, 1);
    let err = Store::new(&[])
        .verify(&m, SignaturePolicy::RequireSignatures, &anchors(ROOT))
        .unwrap_err();
    assert!(
        err.to_string().contains("1 unsigned digest(s) only"),
        "{err}"
    );
    assert!(matches!(
        Store::new(&[]).verify(&unsigned, SignaturePolicy::Verify, &anchors(ROOT)),
        Err(SignatureError::Mismatch { .. })
    ));
}

#[test]
fn signatures_pkg_cannot_verify_are_skipped_as_pkg_skips_them() {
    let base = "set name=pkg.fmri value=pkg://example.org/demo/d@1.0:20260101T000000Z\n";
    for (sig, why) in [
        (
            "signature abc algorithm=ecdsa-sha256 value=00",
            "unknown algorithm",
        ),
        (
            "signature abc algorithm=rsa-sha256 value=00 version=1",
            "version",
        ),
        (
            "signature abc algorithm=rsa-sha256 value=00 variant.arch=i386",
            "variant",
        ),
    ] {
        let m = Manifest::parse(&format!("{base}{sig}\n")).unwrap();
        let report = Store::new(&[])
            .verify(&m, SignaturePolicy::Verify, &anchors(ROOT))
            .unwrap();
        assert!(report.skipped[0].contains(why), "{sig}: {report:?}");
        let err = Store::new(&[])
            .verify(&m, SignaturePolicy::RequireSignatures, &anchors(ROOT))
            .unwrap_err();
        assert!(err.to_string().contains(why), "{err}");
    }
    for (sig, why) in [
        (
            "signature algorithm=rsa-sha256 value=00",
            "names no certificate",
        ),
        ("signature abc algorithm=rsa-sha256 value=xyz", "not hex"),
        ("signature abc value=00", "no algorithm"),
    ] {
        let m = Manifest::parse(&format!("{base}{sig}\n")).unwrap();
        let err = Store::new(&[])
            .verify(&m, SignaturePolicy::Verify, &anchors(ROOT))
            .unwrap_err();
        assert!(
            matches!(err, SignatureError::Malformed { .. }) && err.to_string().contains(why),
            "{err}"
        );
    }
}

#[test]
fn key_usage_and_ca_constraints_are_pkgs() {
    let leaf = |pem: &[u8]| Cert::from_pem_all(pem, "t").unwrap().remove(0);
    let int = leaf(INTERMEDIATE);
    let root = anchors(ROOT);
    // keyEncipherment is not a usage pkg accepts on any certificate.
    let err = root
        .verify_chain(&leaf(ENCIPHERER), std::slice::from_ref(&int))
        .unwrap_err();
    assert!(err.to_string().contains("not one pkg accepts"), "{err}");
    // A CA certificate cannot sign manifests (no digitalSignature)...
    let err = root.verify_chain(&int, &[]).unwrap_err();
    assert!(err.to_string().contains("lacks digitalSignature"), "{err}");
    // ...and a leaf cannot stand in for a CA: the chain breaks at the signer.
    let signer = leaf(SIGNER);
    let err = root.verify_chain(&leaf(ENCIPHERER), std::slice::from_ref(&signer));
    assert!(err.is_err());
    assert!(int.check_extensions(x509::Usage::CertSigning, 0).is_ok());
    // pathlen:0 allows no CA below the intermediate.
    let err = int
        .check_extensions(x509::Usage::CertSigning, 1)
        .unwrap_err();
    assert!(
        err.to_string().contains("path length constraint 0"),
        "{err}"
    );
    // A self-signed root that is not an anchor.
    let other = leaf(OTHER_ROOT);
    let err = root.verify_chain(&other, &[]).unwrap_err();
    assert!(err.to_string().contains("lacks digitalSignature"), "{err}");
}

#[test]
fn trust_anchor_directories_name_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let err = TrustAnchors::load_dir(dir.path()).unwrap_err();
    assert!(
        matches!(err, SignatureError::NoTrustAnchors { .. }),
        "{err}"
    );
    std::fs::write(dir.path().join("root.pem"), ROOT).unwrap();
    std::fs::write(dir.path().join(".hidden"), "not a certificate").unwrap();
    assert_eq!(TrustAnchors::load_dir(dir.path()).unwrap().len(), 1);
    std::fs::write(dir.path().join("notes.txt"), "not a certificate").unwrap();
    let err = TrustAnchors::load_dir(dir.path()).unwrap_err();
    assert!(err.to_string().contains("notes.txt"), "{err}");
    let err = TrustAnchors::load_dir(&dir.path().join("absent")).unwrap_err();
    assert!(matches!(err, SignatureError::TrustAnchorIo { .. }), "{err}");
}

#[test]
fn policies_read_as_pkg_names_them() {
    for p in [
        SignaturePolicy::Ignore,
        SignaturePolicy::Verify,
        SignaturePolicy::RequireSignatures,
    ] {
        assert_eq!(p.name().parse::<SignaturePolicy>(), Ok(p));
    }
    assert!(
        "require-names"
            .parse::<SignaturePolicy>()
            .unwrap_err()
            .contains("not supported")
    );
    assert!("strict".parse::<SignaturePolicy>().is_err());
}
