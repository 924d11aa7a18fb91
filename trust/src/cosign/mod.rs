//! cosign image signatures made with a key: the simple-signing payload, the ECDSA signature
//! over it, the manifest at `sha256-<hex>.sig` (or an OCI 1.1 referrer) that carries them,
//! and the checks `cosign verify --key … --insecure-ignore-tlog` makes.

mod manifest;
mod payload;

use std::collections::BTreeMap;

use base64::Engine;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;
use validator::Digest;

use crate::keys::{KeyId, SigningKey, VerifyingKey};

pub use manifest::{AttachedManifest, BlobDescriptor, SignatureLayer, parse_layers};
pub(crate) use manifest::{Join, build, join_layers};

pub use payload::{SIMPLE_SIGNING_TYPE, SimpleSigning};

/// Media type of a simple-signing payload layer.
pub const SIMPLE_SIGNING_MEDIA_TYPE: &str = "application/vnd.dev.cosign.simplesigning.v1+json";
/// Layer annotation holding the base64 signature (empty on attestation layers).
pub const SIGNATURE_ANNOTATION: &str = "dev.cosignproject.cosign/signature";
/// Layer annotation for a certificate (keyless signing; never written by this crate).
pub const CERTIFICATE_ANNOTATION: &str = "dev.sigstore.cosign/certificate";
/// Layer annotation for a certificate chain (keyless signing).
pub const CHAIN_ANNOTATION: &str = "dev.sigstore.cosign/chain";
/// Layer annotation for a Rekor bundle (only after a transparency-log upload).
pub const BUNDLE_ANNOTATION: &str = "dev.sigstore.cosign/bundle";
/// The manifest media type cosign writes.
pub const OCI_MANIFEST_MEDIA_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
/// The config media type of a legacy (tag-scheme) signature manifest.
pub const OCI_CONFIG_MEDIA_TYPE: &str = "application/vnd.oci.image.config.v1+json";
/// The config media type (and so the referrers `artifactType`) of a signature referrer.
pub const ARTIFACT_SIG_CONFIG_MEDIA_TYPE: &str = "application/vnd.dev.cosign.artifact.sig.v1+json";
/// cosign refuses signature manifests with more layers than this.
pub const MAX_LAYERS: usize = 1000;

/// A signature or attestation could not be read, or did not verify.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SignatureError {
    /// Nothing to verify: no manifest, no layers, or no signature on any layer.
    #[error("no signatures found{}", for_what(.what))]
    NoSignature {
        /// What was looked at (a tag, a layer digest), when known.
        what: Option<String>,
    },
    /// No layer's signature verified with any of the keys: signed by another key, or the
    /// payload (or statement) was changed after signing. Both look alike to a verifier.
    #[error(
        "signature on {layer} does not verify with {}: signed by another key, or the payload was changed after signing",
        keys_tried(.tried)
    )]
    BadSignature {
        /// The layer (payload digest) whose signature failed.
        layer: Digest,
        /// The short ids of the keys tried.
        tried: Vec<String>,
    },
    /// The signed payload names another manifest: a signature replayed onto this tag.
    #[error("signed payload is for manifest {found}, not {expected}")]
    DigestMismatch {
        /// The manifest being verified.
        expected: Digest,
        /// The manifest the payload names.
        found: String,
    },
    /// The payload blob's bytes do not hash to the layer's digest.
    #[error("payload blob does not match its layer digest {expected} (got {actual})")]
    PayloadTampered {
        /// The layer's digest.
        expected: Digest,
        /// The digest of the bytes fetched.
        actual: Digest,
    },
    /// A manifest, payload, envelope or signature field is not what cosign writes.
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// Which document or field.
        what: String,
        /// What is wrong.
        detail: String,
    },
}

fn keys_tried(tried: &[String]) -> String {
    match tried {
        [] => "no key (none was given)".to_owned(),
        [one] => format!("the key tried ({one})"),
        many => format!("any of the {} keys tried ({})", many.len(), many.join(", ")),
    }
}

/// The short ids of `keys`, for [`SignatureError::BadSignature`].
pub(crate) fn short_ids(keys: &[VerifyingKey]) -> Vec<String> {
    keys.iter().map(|k| k.key_id().short().to_owned()).collect()
}

fn for_what(what: &Option<String>) -> String {
    what.as_ref()
        .map(|w| format!(" for {w}"))
        .unwrap_or_default()
}

/// The tag cosign keeps signatures of `digest` under: `sha256-<hex>.sig`.
pub fn signature_tag(digest: &Digest) -> String {
    suffixed_tag(digest, "sig")
}

/// The tag cosign keeps attestations of `digest` under: `sha256-<hex>.att`.
pub fn attestation_tag(digest: &Digest) -> String {
    suffixed_tag(digest, "att")
}

fn suffixed_tag(digest: &Digest, suffix: &str) -> String {
    format!("{}-{}.{suffix}", digest.algorithm(), digest.encoded())
}

/// Signs `payload` (the exact blob bytes) and returns the standard, padded base64 of the DER
/// ECDSA-SHA256 signature, the value of [`SIGNATURE_ANNOTATION`].
pub fn sign(key: &SigningKey, payload: &[u8]) -> String {
    STANDARD.encode(key.sign_der(payload))
}

/// Checks a base64 signature (standard alphabet) over `payload`.
pub fn verify(
    key: &VerifyingKey,
    payload: &[u8],
    signature_b64: &str,
) -> Result<(), SignatureError> {
    let der = STANDARD
        .decode(signature_b64.trim())
        .map_err(|e| SignatureError::Malformed {
            what: "signature".to_owned(),
            detail: format!("not base64: {e}"),
        })?;
    if key.verify_der(payload, &der) {
        Ok(())
    } else {
        Err(SignatureError::BadSignature {
            layer: Digest::sha256(payload),
            tried: short_ids(std::slice::from_ref(key)),
        })
    }
}

fn signature_layer(payload: &[u8], signature_b64: &str) -> SignatureLayer {
    SignatureLayer {
        payload: BlobDescriptor {
            media_type: SIMPLE_SIGNING_MEDIA_TYPE.to_owned(),
            size: payload.len() as u64,
            digest: Digest::sha256(payload),
        },
        signature_b64: signature_b64.to_owned(),
        annotations: BTreeMap::from([(SIGNATURE_ANNOTATION.to_owned(), signature_b64.to_owned())]),
    }
}

/// Adds a signature to the `.sig` manifest as `cosign sign` does: the existing layers (oldest
/// first) and the new one at the end, unless a layer with the same payload and annotations
/// already carries a signature by `signer` (then `layer_added` is false).
pub fn append_signature(
    existing: Option<&[u8]>,
    payload: &[u8],
    signature_b64: &str,
    signer: &VerifyingKey,
) -> Result<AttachedManifest, SignatureError> {
    let (layers, added) = signature_layers_with(existing, payload, signature_b64, signer)?;
    Ok(build(layers, None, added))
}

/// The same layer set as [`append_signature`], as an OCI 1.1 referrer of `subject` (the
/// signed manifest's descriptor): `subject` set, config media type
/// [`ARTIFACT_SIG_CONFIG_MEDIA_TYPE`], no top-level `artifactType` (cosign's
/// `--registry-referrers-mode oci-1-1`). It is pushed by digest, not by tag.
pub fn append_signature_referrer(
    existing: Option<&[u8]>,
    payload: &[u8],
    signature_b64: &str,
    signer: &VerifyingKey,
    subject: &BlobDescriptor,
) -> Result<AttachedManifest, SignatureError> {
    let (layers, added) = signature_layers_with(existing, payload, signature_b64, signer)?;
    Ok(build(layers, Some(subject), added))
}

fn signature_layers_with(
    existing: Option<&[u8]>,
    payload: &[u8],
    signature_b64: &str,
    signer: &VerifyingKey,
) -> Result<(Vec<SignatureLayer>, bool), SignatureError> {
    let new = signature_layer(payload, signature_b64);
    let same_signer = |l: &SignatureLayer| {
        !l.signature_b64.is_empty()
            && (l.signature_b64 == signature_b64
                || verify(signer, payload, &l.signature_b64).is_ok())
    };
    join_layers(
        existing,
        new,
        Join::Append {
            is_duplicate: &same_signer,
        },
    )
}

/// The simple-signing layers of a `.sig` manifest; [`SignatureError::NoSignature`] when there
/// are none.
pub fn signature_layers(manifest: &[u8]) -> Result<Vec<SignatureLayer>, SignatureError> {
    let layers: Vec<_> = parse_layers(manifest)?
        .into_iter()
        .filter(|l| {
            l.payload.media_type == SIMPLE_SIGNING_MEDIA_TYPE && !l.signature_b64.is_empty()
        })
        .collect();
    if layers.is_empty() {
        return Err(SignatureError::NoSignature { what: None });
    }
    Ok(layers)
}

/// A signature layer that passed every check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VerifiedSignature {
    /// The key that verified it.
    pub key_id: KeyId,
    /// `critical.identity.docker-reference` of the payload.
    pub docker_reference: String,
    /// The signed manifest digest (equal to the expected one).
    pub digest: Digest,
    /// The payload's `optional` annotations.
    pub optional: Option<BTreeMap<String, Value>>,
}

/// Checks one layer with its fetched payload bytes, in this order: the bytes hash to the
/// layer digest ([`SignatureError::PayloadTampered`]); the signature verifies with one of
/// `keys` ([`SignatureError::BadSignature`]); the payload parses and names
/// `expected_manifest` ([`SignatureError::DigestMismatch`]). Only verified bytes are parsed.
pub fn verify_signature_layer(
    keys: &[VerifyingKey],
    layer: &SignatureLayer,
    payload: &[u8],
    expected_manifest: &Digest,
) -> Result<VerifiedSignature, SignatureError> {
    check_blob(&layer.payload, payload)?;
    if layer.signature_b64.is_empty() {
        return Err(SignatureError::NoSignature {
            what: Some(format!("layer {}", layer.payload.digest)),
        });
    }
    let der =
        STANDARD
            .decode(layer.signature_b64.trim())
            .map_err(|e| SignatureError::Malformed {
                what: format!("signature annotation of layer {}", layer.payload.digest),
                detail: format!("not base64: {e}"),
            })?;
    let key = keys
        .iter()
        .find(|k| k.verify_der(payload, &der))
        .ok_or_else(|| SignatureError::BadSignature {
            layer: layer.payload.digest.clone(),
            tried: short_ids(keys),
        })?;
    let parsed = SimpleSigning::parse(payload)?;
    if &parsed.manifest_digest != expected_manifest {
        return Err(SignatureError::DigestMismatch {
            expected: expected_manifest.clone(),
            found: parsed.manifest_digest.to_string(),
        });
    }
    Ok(VerifiedSignature {
        key_id: key.key_id().clone(),
        docker_reference: parsed.docker_reference,
        digest: parsed.manifest_digest,
        optional: parsed.optional,
    })
}

/// The fetched bytes are the blob the descriptor names.
pub(crate) fn check_blob(desc: &BlobDescriptor, bytes: &[u8]) -> Result<(), SignatureError> {
    let actual = Digest::of(desc.digest.algorithm(), bytes);
    if actual != desc.digest || bytes.len() as u64 != desc.size {
        return Err(SignatureError::PayloadTampered {
            expected: desc.digest.clone(),
            actual,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests;
