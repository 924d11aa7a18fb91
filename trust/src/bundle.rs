//! Sigstore bundles on images, as cosign v3 writes and reads them by default: an OCI 1.1
//! referrer of the image whose one layer is a bundle (`application/vnd.dev.sigstore.bundle.v0.3
//! +json`), and whose `artifactType` says so.
//!
//! A bundle carries its signed content in one of two forms:
//!
//! - a DSSE envelope of an in-toto statement about the image (`dsseEnvelope`). A plain
//!   signature (`cosign sign`) is a statement of predicate type [`COSIGN_SIGN_PREDICATE`]; an
//!   attestation (`cosign attest`) is a statement of its own predicate type;
//! - a message signature (`messageSignature`): an ECDSA signature over the manifest bytes,
//!   whose SHA-256 is the image digest itself.
//!
//! Verification here is key-based and offline, as `cosign verify --key K
//! --insecure-ignore-tlog=true`: the envelope or message signature must verify with one of
//! the given keys and name the expected digest. Transparency-log entries and timestamps the
//! bundle may carry are reported ([`Bundle::tlog_entries`]) but not required.
//!
//! The bundle's `verificationMaterial` is unauthenticated: its public-key hint or certificate
//! never chooses a key. Only the caller's keys do.

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde::Deserialize;
use serde_json::{Value, json};
use validator::Digest;

use crate::cosign::{AttachedManifest, BlobDescriptor, SignatureError, SignatureLayer, check_blob};
use crate::dsse::{DsseError, Envelope, IN_TOTO_PAYLOAD_TYPE};
use crate::intoto::{STATEMENT_V1, Statement, Subject};
use crate::keys::{KeyId, SigningKey, VerifyingKey};

/// The media type (and referrer `artifactType`) of a v0.3 bundle, what cosign v3 writes.
pub const BUNDLE_V03_MEDIA_TYPE: &str = "application/vnd.dev.sigstore.bundle.v0.3+json";
/// The predicate type of the statement inside a plain `cosign sign` bundle.
pub const COSIGN_SIGN_PREDICATE: &str = "https://sigstore.dev/cosign/sign/v1";
/// The referrer annotation saying what the bundle holds (`dsse-envelope` or
/// `message-signature`).
pub const CONTENT_ANNOTATION: &str = "dev.sigstore.bundle.content";
/// The referrer annotation naming the statement's predicate type.
pub const PREDICATE_ANNOTATION: &str = "dev.sigstore.bundle.predicateType";
/// The referrer annotation with the signing time.
pub const CREATED_ANNOTATION: &str = "org.opencontainers.image.created";
/// The OCI empty descriptor's media type: a bundle referrer's config.
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";
/// The OCI empty blob.
pub const EMPTY_BLOB: &[u8] = b"{}";
/// The largest bundle read (the same bound as a signature payload).
pub const MAX_BUNDLE_BYTES: u64 = 4 << 20;

/// True for every spelling of a sigstore bundle media type: `…bundle.v0.3+json` (and any later
/// `v0.N`) and the older `application/vnd.dev.sigstore.bundle+json;version=0.N`.
pub fn is_bundle_media_type(media_type: &str) -> bool {
    let mt = media_type.trim();
    if let Some(rest) = mt.strip_prefix("application/vnd.dev.sigstore.bundle.v") {
        return rest.strip_suffix("+json").is_some_and(|v| {
            v.split('.')
                .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
        });
    }
    mt.strip_prefix("application/vnd.dev.sigstore.bundle+json")
        .is_some_and(|params| {
            params.is_empty()
                || params
                    .split(';')
                    .skip(1)
                    .any(|p| p.trim().starts_with("version="))
        })
}

/// What a bundle signs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BundleContent {
    /// A DSSE envelope (of an in-toto statement, for images).
    Dsse(Envelope),
    /// A signature over a message whose digest the bundle names.
    MessageSignature {
        /// The message digest (`SHA2_256` in the bundle).
        digest: Digest,
        /// The DER ECDSA signature.
        signature: Vec<u8>,
    },
}

/// A parsed sigstore bundle (only what key-based verification needs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bundle {
    /// The bundle's own `mediaType`.
    pub media_type: String,
    /// The signed content.
    pub content: BundleContent,
    /// How many transparency-log entries it carries (not checked offline).
    pub tlog_entries: usize,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct BundleWire {
    #[serde(default)]
    media_type: String,
    #[serde(default)]
    verification_material: Option<MaterialWire>,
    #[serde(default)]
    dsse_envelope: Option<Value>,
    #[serde(default)]
    message_signature: Option<MessageWire>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MaterialWire {
    #[serde(default)]
    tlog_entries: Vec<Value>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct MessageWire {
    message_digest: Option<MessageDigestWire>,
    #[serde(default)]
    signature: String,
}

#[derive(Deserialize)]
struct MessageDigestWire {
    #[serde(default)]
    algorithm: String,
    #[serde(default)]
    digest: String,
}

fn malformed(what: &str, detail: impl Into<String>) -> SignatureError {
    SignatureError::Malformed {
        what: what.to_owned(),
        detail: detail.into(),
    }
}

impl Bundle {
    /// Reads bundle JSON; `what` names it in errors (a layer digest).
    pub fn parse(bytes: &[u8], what: &str) -> Result<Bundle, SignatureError> {
        let wire: BundleWire =
            serde_json::from_slice(bytes).map_err(|e| malformed(what, e.to_string()))?;
        if !is_bundle_media_type(&wire.media_type) {
            return Err(malformed(
                what,
                format!(
                    "mediaType is {:?}, not a sigstore bundle ({BUNDLE_V03_MEDIA_TYPE})",
                    wire.media_type
                ),
            ));
        }
        let tlog_entries = wire
            .verification_material
            .map(|m| m.tlog_entries.len())
            .unwrap_or(0);
        let content = match (wire.dsse_envelope, wire.message_signature) {
            (Some(env), None) => {
                let raw = serde_json::to_vec(&env).expect("a JSON value serializes");
                let env = Envelope::from_json(&raw)
                    .map_err(|e| malformed(what, format!("dsseEnvelope: {e}")))?;
                BundleContent::Dsse(env)
            }
            (None, Some(m)) => {
                let d = m
                    .message_digest
                    .ok_or_else(|| malformed(what, "messageSignature has no messageDigest"))?;
                if d.algorithm != "SHA2_256" {
                    return Err(malformed(
                        what,
                        format!(
                            "messageSignature.messageDigest.algorithm is {:?}; only SHA2_256 names an image digest",
                            d.algorithm
                        ),
                    ));
                }
                let raw = STANDARD.decode(d.digest.trim()).map_err(|e| {
                    malformed(what, format!("messageSignature.messageDigest.digest: {e}"))
                })?;
                let digest =
                    Digest::parse(&format!("sha256:{}", hex::encode(&raw))).map_err(|e| {
                        malformed(what, format!("messageSignature.messageDigest.digest: {e}"))
                    })?;
                let signature = STANDARD
                    .decode(m.signature.trim())
                    .map_err(|e| malformed(what, format!("messageSignature.signature: {e}")))?;
                BundleContent::MessageSignature { digest, signature }
            }
            (Some(_), Some(_)) => {
                return Err(malformed(
                    what,
                    "both dsseEnvelope and messageSignature are set (a bundle holds one)",
                ));
            }
            (None, None) => {
                return Err(malformed(
                    what,
                    "neither dsseEnvelope nor messageSignature is set",
                ));
            }
        };
        Ok(Bundle {
            media_type: wire.media_type,
            content,
            tlog_entries,
        })
    }
}

/// A bundle that verified, and what it says.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedBundle {
    /// The key that verified it.
    pub key_id: KeyId,
    /// The statement's predicate type; [`COSIGN_SIGN_PREDICATE`] for a message signature.
    pub predicate_type: String,
    /// The statement's first subject name (the signed repository), empty when none is given.
    pub subject_name: String,
    /// The predicate (`null` for signatures).
    pub predicate: Value,
    /// The first subject's annotations (`cosign sign -a`).
    pub annotations: BTreeMap<String, Value>,
    /// Transparency-log entries carried (not checked).
    pub tlog_entries: usize,
}

impl VerifiedBundle {
    /// True for a plain signature (`cosign sign`), false for an attestation.
    pub fn is_signature(&self) -> bool {
        self.predicate_type == COSIGN_SIGN_PREDICATE
    }
}

/// Checks one bundle layer with its fetched bytes, in the order the legacy checks use: the
/// bytes hash to the layer digest ([`SignatureError::PayloadTampered`]); the bundle parses; its
/// envelope or message signature verifies with one of `keys` ([`SignatureError::BadSignature`],
/// naming the keys tried); the statement (or the message digest) names `expected_manifest`
/// ([`SignatureError::DigestMismatch`]). Only verified bytes are parsed as a statement.
pub fn verify_bundle_layer(
    keys: &[VerifyingKey],
    layer: &BlobDescriptor,
    bytes: &[u8],
    expected_manifest: &Digest,
) -> Result<VerifiedBundle, SignatureError> {
    check_blob(layer, bytes)?;
    let what = format!("sigstore bundle {}", layer.digest);
    let bundle = Bundle::parse(bytes, &what)?;
    let bad = || SignatureError::BadSignature {
        layer: layer.digest.clone(),
        tried: crate::cosign::short_ids(keys),
    };
    match bundle.content {
        BundleContent::MessageSignature { digest, signature } => {
            // The signature is over the manifest bytes, so over the digest: check the digest
            // first (it is what was signed) and then the signature over it.
            if signature.is_empty() {
                return Err(SignatureError::NoSignature {
                    what: Some(format!("layer {}", layer.digest)),
                });
            }
            let key = keys
                .iter()
                .find(|k| k.verify_prehashed_der(&digest_bytes(&digest), &signature))
                .ok_or_else(bad)?;
            if &digest != expected_manifest {
                return Err(SignatureError::DigestMismatch {
                    expected: expected_manifest.clone(),
                    found: digest.to_string(),
                });
            }
            Ok(VerifiedBundle {
                key_id: key.key_id().clone(),
                predicate_type: COSIGN_SIGN_PREDICATE.to_owned(),
                subject_name: String::new(),
                predicate: Value::Null,
                annotations: BTreeMap::new(),
                tlog_entries: bundle.tlog_entries,
            })
        }
        BundleContent::Dsse(env) => {
            if env.payload_type != IN_TOTO_PAYLOAD_TYPE {
                return Err(malformed(
                    &what,
                    format!(
                        "payloadType is {:?}, expected {IN_TOTO_PAYLOAD_TYPE:?}",
                        env.payload_type
                    ),
                ));
            }
            let verified = env.verify(keys).map_err(|e| match e {
                DsseError::NoSignature => SignatureError::NoSignature {
                    what: Some(format!("layer {}", layer.digest)),
                },
                DsseError::BadSignature { .. } => bad(),
                other => malformed(&what, other.to_string()),
            })?;
            let statement: Statement = serde_json::from_slice(verified.payload).map_err(|e| {
                malformed(
                    &format!("in-toto statement in {}", layer.digest),
                    e.to_string(),
                )
            })?;
            if !statement.is_about(expected_manifest) {
                return Err(SignatureError::DigestMismatch {
                    expected: expected_manifest.clone(),
                    found: statement.subject_digests(),
                });
            }
            let first = statement.subject.first();
            Ok(VerifiedBundle {
                key_id: verified.key_id,
                subject_name: first.map(|s| s.name.clone()).unwrap_or_default(),
                annotations: first.map(|s| s.annotations.clone()).unwrap_or_default(),
                predicate_type: statement.predicate_type,
                predicate: statement.predicate,
                tlog_entries: bundle.tlog_entries,
            })
        }
    }
}

fn digest_bytes(d: &Digest) -> Vec<u8> {
    hex::decode(d.encoded()).expect("a parsed digest is hex")
}

/// A v1 in-toto statement about one image (`name` is `HOST/REPO`), as cosign v3 puts in its
/// bundles: [`COSIGN_SIGN_PREDICATE`] with an empty predicate for a plain signature.
pub fn statement(name: &str, digest: &Digest, predicate_type: &str, predicate: Value) -> Statement {
    Statement {
        statement_type: STATEMENT_V1.to_owned(),
        predicate_type: predicate_type.to_owned(),
        subject: vec![Subject::image(name, digest)],
        predicate,
    }
}

/// Signs `statement` into a v0.3 bundle (a DSSE envelope, no transparency-log entries), with
/// the public-key hint cosign v3 writes: the base64 SHA-256 of the key's SubjectPublicKeyInfo
/// (a hint only: verifiers choose keys themselves).
pub fn sign_bundle(key: &SigningKey, statement: &Statement) -> Vec<u8> {
    let env = Envelope::sign(key, IN_TOTO_PAYLOAD_TYPE, &statement.to_bytes());
    let id = key.verifying_key().key_id().as_str();
    let hint = STANDARD
        .encode(hex::decode(id.trim_start_matches("sha256:")).expect("a key id is sha256 hex"));
    let env: Value = serde_json::from_slice(&env.to_json()).expect("the envelope is JSON");
    let doc = json!({
        "mediaType": BUNDLE_V03_MEDIA_TYPE,
        "verificationMaterial": {
            "publicKey": {"hint": hint},
        },
        "dsseEnvelope": env,
    });
    serde_json::to_vec(&doc).expect("the bundle serializes")
}

/// The referrer manifest that carries `bundle` for `subject`, as cosign v3 writes it: empty
/// config, the bundle as the one layer, `artifactType` [`BUNDLE_V03_MEDIA_TYPE`], and the
/// content, predicate-type and (when given) creation-time annotations.
pub fn bundle_referrer(
    bundle: &[u8],
    predicate_type: &str,
    subject: &BlobDescriptor,
    created: Option<&str>,
) -> AttachedManifest {
    let layer = BlobDescriptor {
        media_type: BUNDLE_V03_MEDIA_TYPE.to_owned(),
        size: bundle.len() as u64,
        digest: Digest::sha256(bundle),
    };
    let mut annotations = BTreeMap::new();
    annotations.insert(CONTENT_ANNOTATION.to_owned(), "dsse-envelope".to_owned());
    annotations.insert(PREDICATE_ANNOTATION.to_owned(), predicate_type.to_owned());
    if let Some(t) = created {
        annotations.insert(CREATED_ANNOTATION.to_owned(), t.to_owned());
    }
    let doc = json!({
        "schemaVersion": 2,
        "mediaType": crate::cosign::OCI_MANIFEST_MEDIA_TYPE,
        "artifactType": BUNDLE_V03_MEDIA_TYPE,
        "config": {
            "mediaType": EMPTY_MEDIA_TYPE,
            "size": EMPTY_BLOB.len(),
            "digest": Digest::sha256(EMPTY_BLOB),
        },
        "layers": [{
            "mediaType": layer.media_type,
            "size": layer.size,
            "digest": layer.digest,
        }],
        "subject": {
            "mediaType": subject.media_type,
            "size": subject.size,
            "digest": subject.digest,
        },
        "annotations": annotations,
    });
    let manifest = serde_json::to_vec(&doc).expect("the manifest serializes");
    AttachedManifest {
        manifest_digest: Digest::sha256(&manifest),
        manifest,
        config: EMPTY_BLOB.to_vec(),
        config_digest: Digest::sha256(EMPTY_BLOB),
        layers: vec![SignatureLayer {
            payload: layer,
            signature_b64: String::new(),
            annotations: BTreeMap::new(),
        }],
        layer_added: true,
    }
}

/// The bundle layers of a referrer manifest (layers of a bundle media type).
pub fn bundle_layers(manifest: &[u8]) -> Result<Vec<BlobDescriptor>, SignatureError> {
    Ok(crate::cosign::parse_layers(manifest)?
        .into_iter()
        .filter(|l| is_bundle_media_type(&l.payload.media_type))
        .map(|l| l.payload)
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keys::generate;

    fn image() -> Digest {
        Digest::sha256(b"image manifest")
    }

    fn desc(bytes: &[u8]) -> BlobDescriptor {
        BlobDescriptor {
            media_type: BUNDLE_V03_MEDIA_TYPE.to_owned(),
            size: bytes.len() as u64,
            digest: Digest::sha256(bytes),
        }
    }

    #[test]
    fn media_type_spellings() {
        for ok in [
            "application/vnd.dev.sigstore.bundle.v0.3+json",
            "application/vnd.dev.sigstore.bundle.v0.4+json",
            "application/vnd.dev.sigstore.bundle+json;version=0.1",
            "application/vnd.dev.sigstore.bundle+json;version=0.2",
            "application/vnd.dev.sigstore.bundle+json; version=0.2",
        ] {
            assert!(is_bundle_media_type(ok), "{ok}");
        }
        for bad in [
            "application/vnd.dev.sigstore.bundle.v+json",
            "application/vnd.dev.sigstore.bundle.vx.3+json",
            "application/vnd.dev.sigstore.bundle+jsonx",
            "application/vnd.dsse.envelope.v1+json",
            "",
        ] {
            assert!(!is_bundle_media_type(bad), "{bad}");
        }
    }

    #[test]
    fn signature_and_attestation_bundles_verify_with_reasons() {
        let k = generate();
        let keys = [k.verifying().clone()];
        let sig = sign_bundle(
            &k.signing,
            &statement("r.example/app", &image(), COSIGN_SIGN_PREDICATE, json!({})),
        );
        let v = verify_bundle_layer(&keys, &desc(&sig), &sig, &image()).unwrap();
        assert!(v.is_signature());
        assert_eq!(v.subject_name, "r.example/app");
        assert_eq!(&v.key_id, k.verifying().key_id());

        let att = sign_bundle(
            &k.signing,
            &statement(
                "r.example/app",
                &image(),
                crate::intoto::PREDICATE_SPDX,
                json!({"n": 1}),
            ),
        );
        let v = verify_bundle_layer(&keys, &desc(&att), &att, &image()).unwrap();
        assert!(!v.is_signature());
        assert_eq!(v.predicate["n"], 1);

        // Another key: the message names the key tried and says a change is possible too.
        let other = generate();
        let e = verify_bundle_layer(&[other.verifying().clone()], &desc(&sig), &sig, &image())
            .unwrap_err();
        assert!(matches!(e, SignatureError::BadSignature { .. }));
        let text = e.to_string();
        assert!(text.contains(other.verifying().key_id().short()), "{text}");
        assert!(text.contains("changed after signing"), "{text}");
        // About another image.
        let e = verify_bundle_layer(&keys, &desc(&sig), &sig, &Digest::sha256(b"x")).unwrap_err();
        assert!(matches!(e, SignatureError::DigestMismatch { .. }), "{e}");
        // Bytes that are not the layer's.
        let mut t = sig.clone();
        t.push(b' ');
        let e = verify_bundle_layer(&keys, &desc(&sig), &t, &image()).unwrap_err();
        assert!(matches!(e, SignatureError::PayloadTampered { .. }), "{e}");
        // A statement edited and the bundle re-pushed with a matching digest: bad signature.
        let mut doc: Value = serde_json::from_slice(&sig).unwrap();
        let mut st: Value = serde_json::from_slice(
            &STANDARD
                .decode(doc["dsseEnvelope"]["payload"].as_str().unwrap())
                .unwrap(),
        )
        .unwrap();
        st["subject"][0]["name"] = json!("r.example/evil");
        doc["dsseEnvelope"]["payload"] = json!(STANDARD.encode(serde_json::to_vec(&st).unwrap()));
        let edited = serde_json::to_vec(&doc).unwrap();
        let e = verify_bundle_layer(&keys, &desc(&edited), &edited, &image()).unwrap_err();
        assert!(matches!(e, SignatureError::BadSignature { .. }), "{e}");
    }

    #[test]
    fn message_signature_bundles() {
        let k = generate();
        let manifest = b"{\"schemaVersion\":2}";
        let digest = Digest::sha256(manifest);
        let sig = k.signing.sign_der(manifest);
        let doc = json!({
            "mediaType": "application/vnd.dev.sigstore.bundle+json;version=0.2",
            "verificationMaterial": {"publicKey": {"hint": "x"}, "tlogEntries": [{"logIndex": "1"}]},
            "messageSignature": {
                "messageDigest": {"algorithm": "SHA2_256", "digest": STANDARD.encode(digest_bytes(&digest))},
                "signature": STANDARD.encode(&sig),
            },
        });
        let b = serde_json::to_vec(&doc).unwrap();
        let v = verify_bundle_layer(&[k.verifying().clone()], &desc(&b), &b, &digest).unwrap();
        assert!(v.is_signature());
        assert_eq!(v.tlog_entries, 1);
        let e = verify_bundle_layer(&[k.verifying().clone()], &desc(&b), &b, &image()).unwrap_err();
        assert!(matches!(e, SignatureError::DigestMismatch { .. }), "{e}");
    }

    #[test]
    fn malformed_bundles_name_the_field() {
        let k = generate();
        for (doc, words) in [
            (json!({"mediaType": "text/plain"}), "not a sigstore bundle"),
            (
                json!({"mediaType": BUNDLE_V03_MEDIA_TYPE}),
                "neither dsseEnvelope",
            ),
            (
                json!({"mediaType": BUNDLE_V03_MEDIA_TYPE, "messageSignature": {"messageDigest": {"algorithm": "SHA2_512", "digest": ""}, "signature": ""}}),
                "SHA2_256",
            ),
        ] {
            let b = serde_json::to_vec(&doc).unwrap();
            let e = verify_bundle_layer(&[k.verifying().clone()], &desc(&b), &b, &image())
                .unwrap_err()
                .to_string();
            assert!(e.contains(words), "{e}");
        }
    }

    #[test]
    fn referrer_shape() {
        let k = generate();
        let b = sign_bundle(
            &k.signing,
            &statement("r.example/app", &image(), COSIGN_SIGN_PREDICATE, json!({})),
        );
        let subject = BlobDescriptor {
            media_type: crate::cosign::OCI_MANIFEST_MEDIA_TYPE.to_owned(),
            size: 10,
            digest: image(),
        };
        let m = bundle_referrer(
            &b,
            COSIGN_SIGN_PREDICATE,
            &subject,
            Some("2026-01-01T00:00:00Z"),
        );
        let doc: Value = serde_json::from_slice(&m.manifest).unwrap();
        assert_eq!(doc["artifactType"], BUNDLE_V03_MEDIA_TYPE);
        assert_eq!(doc["config"]["mediaType"], EMPTY_MEDIA_TYPE);
        assert_eq!(doc["subject"]["digest"], image().as_str());
        assert_eq!(
            doc["annotations"][PREDICATE_ANNOTATION],
            COSIGN_SIGN_PREDICATE
        );
        assert_eq!(bundle_layers(&m.manifest).unwrap(), vec![desc(&b)]);
    }
}
