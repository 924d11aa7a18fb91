//! cosign attestations on an image: DSSE envelopes of in-toto statements, one per layer of
//! the manifest at `sha256-<hex>.att`, each layer annotated with its `predicateType` and an
//! empty signature annotation (the signature is inside the envelope).

use std::collections::BTreeMap;

use serde_json::Value;
use validator::Digest;

use crate::cosign::{
    AttachedManifest, BlobDescriptor, Join, SIGNATURE_ANNOTATION, SignatureError, SignatureLayer,
    build, check_blob, join_layers, parse_layers,
};
use crate::dsse::{DSSE_MEDIA_TYPE, DsseError, Envelope, IN_TOTO_PAYLOAD_TYPE};
use crate::intoto::Statement;
use crate::keys::{KeyId, SigningKey, VerifyingKey};

/// The layer annotation naming the statement's predicate type.
pub const PREDICATE_TYPE_ANNOTATION: &str = "predicateType";

/// Signs `statement` into a DSSE envelope (the layer blob's bytes).
pub fn sign_statement(key: &SigningKey, statement: &Statement) -> Vec<u8> {
    Envelope::sign(key, IN_TOTO_PAYLOAD_TYPE, &statement.to_bytes()).to_json()
}

/// Adds an attestation layer to the `.att` manifest. Without `replace` it is appended (cosign
/// never treats attestation layers as duplicates, their signature annotation being empty).
/// With `replace` (`cosign attest --replace`) the new layer comes first, followed by the
/// existing layers of other predicate types. The predicate type of an existing layer is read
/// from its `predicateType` annotation, which cosign always writes, so no blob is fetched.
pub fn append_attestation(
    existing: Option<&[u8]>,
    envelope: &[u8],
    predicate_type: &str,
    replace: bool,
) -> Result<AttachedManifest, SignatureError> {
    let new = SignatureLayer {
        payload: BlobDescriptor {
            media_type: DSSE_MEDIA_TYPE.to_owned(),
            size: envelope.len() as u64,
            digest: Digest::sha256(envelope),
        },
        signature_b64: String::new(),
        annotations: BTreeMap::from([
            (
                PREDICATE_TYPE_ANNOTATION.to_owned(),
                predicate_type.to_owned(),
            ),
            (SIGNATURE_ANNOTATION.to_owned(), String::new()),
        ]),
    };
    let never = |_: &SignatureLayer| false;
    let same_type = |l: &SignatureLayer| {
        l.annotations
            .get(PREDICATE_TYPE_ANNOTATION)
            .map(String::as_str)
            == Some(predicate_type)
    };
    let join = if replace {
        Join::ReplaceFirst { drop: &same_type }
    } else {
        Join::Append {
            is_duplicate: &never,
        }
    };
    let (layers, added) = join_layers(existing, new, join)?;
    Ok(build(layers, None, added))
}

/// The DSSE layers of an `.att` manifest; [`SignatureError::NoSignature`] when there are none.
pub fn attestation_layers(manifest: &[u8]) -> Result<Vec<SignatureLayer>, SignatureError> {
    let layers: Vec<_> = parse_layers(manifest)?
        .into_iter()
        .filter(|l| l.payload.media_type == DSSE_MEDIA_TYPE)
        .collect();
    if layers.is_empty() {
        return Err(SignatureError::NoSignature { what: None });
    }
    Ok(layers)
}

/// An attestation layer that passed every check.
#[derive(Debug, Clone, PartialEq)]
pub struct VerifiedAttestation {
    /// The key whose signature verified.
    pub key_id: KeyId,
    /// The statement's predicate type (from the signed statement, not the annotation).
    pub predicate_type: String,
    /// The predicate.
    pub predicate: Value,
    /// The whole signed statement.
    pub statement: Statement,
}

/// Checks one attestation layer with its fetched envelope bytes: the bytes hash to the layer
/// digest, the envelope's payload type is in-toto, a signature verifies with one of `keys`,
/// and the signed statement has a subject with `expected_manifest`'s digest.
pub fn verify_attestation_layer(
    keys: &[VerifyingKey],
    layer: &SignatureLayer,
    envelope: &[u8],
    expected_manifest: &Digest,
) -> Result<VerifiedAttestation, SignatureError> {
    check_blob(&layer.payload, envelope)?;
    let what = || format!("DSSE envelope {}", layer.payload.digest);
    let env = Envelope::from_json(envelope).map_err(|e| SignatureError::Malformed {
        what: what(),
        detail: e.to_string(),
    })?;
    if env.payload_type != IN_TOTO_PAYLOAD_TYPE {
        return Err(SignatureError::Malformed {
            what: what(),
            detail: format!(
                "payloadType is \"{}\", expected \"{IN_TOTO_PAYLOAD_TYPE}\"",
                env.payload_type
            ),
        });
    }
    let verified = env.verify(keys).map_err(|e| match e {
        DsseError::NoSignature => SignatureError::NoSignature {
            what: Some(format!("layer {}", layer.payload.digest)),
        },
        DsseError::BadSignature { .. } => SignatureError::BadSignature {
            layer: layer.payload.digest.clone(),
            tried: crate::cosign::short_ids(keys),
        },
        other => SignatureError::Malformed {
            what: what(),
            detail: other.to_string(),
        },
    })?;
    let statement: Statement =
        serde_json::from_slice(verified.payload).map_err(|e| SignatureError::Malformed {
            what: format!("in-toto statement in {}", layer.payload.digest),
            detail: e.to_string(),
        })?;
    if !statement.is_about(expected_manifest) {
        return Err(SignatureError::DigestMismatch {
            expected: expected_manifest.clone(),
            found: statement.subject_digests(),
        });
    }
    Ok(VerifiedAttestation {
        key_id: verified.key_id,
        predicate_type: statement.predicate_type.clone(),
        predicate: statement.predicate.clone(),
        statement,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::intoto::{PREDICATE_SLSA_V1, PREDICATE_SPDX};
    use crate::keys::generate;

    fn image() -> Digest {
        Digest::sha256(b"image")
    }

    fn attest(key: &SigningKey, digest: &Digest, ptype: &str) -> Vec<u8> {
        let st = Statement::for_image("r.example/app", digest, ptype, serde_json::json!({"n": 1}));
        sign_statement(key, &st)
    }

    #[test]
    fn layers_accumulate_and_replace() {
        let k = generate();
        let e1 = attest(&k.signing, &image(), PREDICATE_SPDX);
        let e2 = attest(&k.signing, &image(), PREDICATE_SLSA_V1);
        let m1 = append_attestation(None, &e1, PREDICATE_SPDX, false).unwrap();
        let doc: Value = serde_json::from_slice(&m1.manifest).unwrap();
        assert_eq!(doc["layers"][0]["mediaType"], DSSE_MEDIA_TYPE);
        assert_eq!(
            doc["layers"][0]["annotations"]["predicateType"],
            PREDICATE_SPDX
        );
        assert_eq!(doc["layers"][0]["annotations"][SIGNATURE_ANNOTATION], "");
        // The same envelope again is appended: attestation layers are never duplicates.
        let m2 = append_attestation(Some(&m1.manifest), &e1, PREDICATE_SPDX, false).unwrap();
        let m3 = append_attestation(Some(&m2.manifest), &e2, PREDICATE_SLSA_V1, false).unwrap();
        assert_eq!(attestation_layers(&m3.manifest).unwrap().len(), 3);
        // Replacing SPDX: the new one first, the SLSA layer kept, the two old SPDX dropped.
        let e3 = attest(&k.signing, &image(), PREDICATE_SPDX);
        let m4 = append_attestation(Some(&m3.manifest), &e3, PREDICATE_SPDX, true).unwrap();
        let layers = attestation_layers(&m4.manifest).unwrap();
        assert_eq!(layers.len(), 2);
        assert_eq!(layers[0].payload.digest, Digest::sha256(&e3));
        assert_eq!(layers[1].payload.digest, Digest::sha256(&e2));
    }

    #[test]
    fn verify_outcomes() {
        let k = generate();
        let env = attest(&k.signing, &image(), PREDICATE_SPDX);
        let m = append_attestation(None, &env, PREDICATE_SPDX, false).unwrap();
        let layer = &attestation_layers(&m.manifest).unwrap()[0];
        let keys = [k.verifying().clone()];
        let v = verify_attestation_layer(&keys, layer, &env, &image()).unwrap();
        assert_eq!(v.predicate_type, PREDICATE_SPDX);
        assert_eq!(v.predicate["n"], 1);
        assert_eq!(&v.key_id, k.verifying().key_id());

        let e = verify_attestation_layer(&[generate().verifying().clone()], layer, &env, &image())
            .unwrap_err();
        assert!(matches!(e, SignatureError::BadSignature { .. }), "{e}");
        let e = verify_attestation_layer(&keys, layer, &env, &Digest::sha256(b"x")).unwrap_err();
        assert!(matches!(e, SignatureError::DigestMismatch { .. }), "{e}");
        let mut t = env.clone();
        t.push(b' ');
        let e = verify_attestation_layer(&keys, layer, &t, &image()).unwrap_err();
        assert!(matches!(e, SignatureError::PayloadTampered { .. }), "{e}");
    }
}
