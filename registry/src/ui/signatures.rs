//! An image's signatures on the pages: cosign's tags and signature referrers found, and
//! verified with the `[ui] trusted_keys` through the `trust` crate.

use serde_json::Value;
use validator::{Digest, Name};

use super::Signed;
use crate::errors::{ApiError, ApiResult};
use crate::repo::Repos;

/// Whether a referrer's artifact type is a signature's (cosign, Notary).
pub(super) fn is_signature(artifact_type: &str) -> bool {
    artifact_type.starts_with("application/vnd.dev.cosign.artifact.sig")
        || artifact_type.contains("signature")
        || artifact_type.contains("notary")
}

pub(super) use crate::repo::is_cosign_tag;

/// cosign's tag for a subject's signatures: `sha256-<hex>.sig`.
pub(super) fn cosign_tag(d: &Digest, suffix: &str) -> String {
    format!("{}-{}.{suffix}", d.algorithm().as_str(), d.encoded())
}

/// Largest signature manifest and payload read to verify a signature.
const SIGNATURE_LIMIT: u64 = 1 << 20;

/// Whether one of `sigs` (signature manifests: referrers or the `.sig` tag's) verifies over
/// `subject` with one of `keys`: cosign's simple-signing layers (`cosign sign`, v2) and
/// sigstore bundles (v3), through the `trust` crate's checks, the ones `rdctl verify` runs.
/// Only what `name` links is read (as `/v2/<name>/…` would serve it): a signature manifest
/// naming another repository's blob does not reach that blob's bytes.
pub(super) async fn signed(
    repos: &Repos,
    name: &Name,
    keys: &[trust::VerifyingKey],
    subject: &Digest,
    sigs: &[Digest],
) -> ApiResult<Signed> {
    if sigs.is_empty() {
        return Ok(Signed::No);
    }
    if keys.is_empty() {
        return Ok(Signed::Unverified);
    }
    let read = |d: Digest| async move {
        match crate::tombstone::get_data(repos.store().as_ref(), &d, SIGNATURE_LIMIT).await {
            Ok(b) => Ok(Some(b.bytes)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(crate::storage::StoreError::TooLarge { .. }) => Ok(None),
            Err(e) => Err(ApiError::from(e)),
        }
    };
    let blob = |d: Digest| async move {
        if repos.blob_linked(name, &d).await?.is_none() {
            return Ok(None);
        }
        read(d).await
    };
    for sig in sigs {
        if repos.manifest_link(name, sig).await?.is_none() {
            continue;
        }
        let Some(manifest) = read(sig.clone()).await? else {
            continue;
        };
        if let Ok(layers) = trust::cosign::signature_layers(&manifest) {
            for l in layers {
                if let Some(payload) = blob(l.payload.digest.clone()).await?
                    && let Ok(v) =
                        trust::cosign::verify_signature_layer(keys, &l, &payload, subject)
                {
                    return Ok(Signed::By(v.key_id.short().to_owned()));
                }
            }
        }
        if let Ok(layers) = trust::bundle::bundle_layers(&manifest) {
            for l in layers {
                if let Some(bytes) = blob(l.digest.clone()).await?
                    && let Ok(v) = trust::bundle::verify_bundle_layer(keys, &l, &bytes, subject)
                    && v.is_signature()
                {
                    return Ok(Signed::By(v.key_id.short().to_owned()));
                }
            }
        }
    }
    Ok(Signed::Unverified)
}

/// The signature manifests of `d`: its signature referrers and cosign's `.sig` tag.
pub(super) async fn signatures_of(
    repos: &Repos,
    name: &Name,
    d: &Digest,
    tag_map: &[(String, Digest)],
) -> ApiResult<Vec<Digest>> {
    let mut sigs: Vec<Digest> = repos
        .referrers(name, d)
        .await?
        .iter()
        .filter(|r| {
            r.get("artifactType")
                .and_then(Value::as_str)
                .is_some_and(is_signature)
        })
        .filter_map(|r| Digest::parse(r.get("digest")?.as_str()?).ok())
        .collect();
    let tag = cosign_tag(d, "sig");
    if let Some((_, s)) = tag_map.iter().find(|(t, _)| *t == tag)
        && !sigs.contains(s)
    {
        sigs.push(s.clone());
    }
    Ok(sigs)
}
