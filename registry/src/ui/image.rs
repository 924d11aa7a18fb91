//! An image's page (`/ui/r/<name>@<digest>` or `:<tag>`): its manifest or index, config,
//! packages, referrers, signature state, and for an artifact its document.

use serde_json::Value;
use validator::{Digest, Name};

use super::manifest::{is_index, read_manifest, summary};
use super::signatures::{cosign_tag, is_cosign_tag, is_signature, signatures_of, signed};
use super::{Artifact, ArtifactDocument, DOCUMENT_SHOWN, ImageView, Referrer, now, pages, short};
use crate::errors::ApiResult;
use crate::pkgindex;
use crate::repo::Repos;
use crate::state::AppState;

/// The image config media types (everything else in `config` makes an artifact).
fn is_image_config(media_type: &str) -> bool {
    matches!(
        media_type,
        "application/vnd.oci.image.config.v1+json"
            | "application/vnd.docker.container.image.v1+json"
    )
}

/// The artifact facts of `doc`, a manifest of `name`; None for an image or an index. Its
/// document is only read when `name` links that blob (as `/v2/<name>/blobs/` would serve it):
/// an artifact naming another repository's blob shows no document.
pub(super) async fn artifact_of(
    repos: &Repos,
    name: &Name,
    doc: &Value,
) -> ApiResult<Option<Artifact>> {
    if is_index(doc) {
        return Ok(None);
    }
    let config_type = doc
        .get("config")
        .and_then(|c| c.get("mediaType"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let artifact_type = doc.get("artifactType").and_then(Value::as_str);
    let subject = doc
        .get("subject")
        .and_then(|s| s.get("digest"))
        .and_then(Value::as_str)
        .and_then(|d| Digest::parse(d).ok());
    if artifact_type.is_none() && subject.is_none() && is_image_config(config_type) {
        return Ok(None);
    }
    let layer = doc
        .get("layers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|l| {
            l.get("mediaType").and_then(Value::as_str).is_some_and(|m| {
                m.contains("spdx") || m.contains("cyclonedx") || m.ends_with("json")
            })
        });
    let document = match layer {
        None => None,
        Some(l) => {
            let digest = l
                .get("digest")
                .and_then(Value::as_str)
                .and_then(|d| Digest::parse(d).ok());
            let size = l.get("size").and_then(Value::as_u64).unwrap_or(0);
            match digest {
                None => None,
                Some(digest) if repos.blob_linked(name, &digest).await?.is_none() => None,
                Some(digest) => {
                    let text = if size <= DOCUMENT_SHOWN {
                        match crate::tombstone::get_data(
                            repos.store().as_ref(),
                            &digest,
                            DOCUMENT_SHOWN,
                        )
                        .await
                        {
                            Ok(b) => match serde_json::from_slice::<Value>(&b.bytes) {
                                Ok(v) => serde_json::to_string_pretty(&v).ok(),
                                Err(_) => String::from_utf8(b.bytes.to_vec()).ok(),
                            },
                            Err(e) if e.is_not_found() => None,
                            Err(crate::storage::StoreError::TooLarge { .. }) => None,
                            Err(e) => return Err(e.into()),
                        }
                    } else {
                        None
                    };
                    Some(ArtifactDocument {
                        digest,
                        media_type: l
                            .get("mediaType")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        size,
                        text,
                    })
                }
            }
        }
    };
    Ok(Some(Artifact {
        artifact_type: artifact_type.unwrap_or(config_type).to_owned(),
        subject,
        subject_tags: Vec::new(),
        document,
    }))
}

pub(super) fn kind_of(artifact_type: &str) -> &'static str {
    let t = artifact_type;
    if is_signature(t) {
        "signature"
    } else if t.contains("spdx") || t.contains("cyclonedx") || t.contains("sbom") {
        "sbom"
    } else if t.contains("in-toto") || t.contains("attestation") || t.contains("dsse") {
        "attestation"
    } else {
        "other"
    }
}

/// The referrers of `digest` in `name`: those the referrers API lists, then cosign's
/// `.sig`, `.att` and `.sbom` tags for it (among `tag_map`) that the API does not list.
pub(super) async fn referrers_of(
    repos: &Repos,
    name: &Name,
    digest: &Digest,
    tag_map: &[(String, Digest)],
) -> ApiResult<Vec<Referrer>> {
    let mut referrers: Vec<Referrer> = repos
        .referrers(name, digest)
        .await?
        .iter()
        .filter_map(|r| {
            let d = Digest::parse(r.get("digest")?.as_str()?).ok()?;
            let t = r
                .get("artifactType")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            Some(Referrer {
                kind: kind_of(&t),
                artifact_type: t,
                digest: d,
                found_by: "referrers API",
            })
        })
        .collect();
    for (suffix, kind) in [
        ("sig", "signature"),
        ("att", "attestation"),
        ("sbom", "sbom"),
    ] {
        let tag = cosign_tag(digest, suffix);
        if let Some((_, d)) = tag_map.iter().find(|(t, _)| *t == tag)
            && !referrers.iter().any(|r| r.digest == *d)
        {
            referrers.push(Referrer {
                kind,
                artifact_type: String::new(),
                digest: d.clone(),
                found_by: "cosign tag",
            });
        }
    }
    Ok(referrers)
}

/// An image (or index) of `name`; None when the repository does not hold it.
pub(super) async fn image(
    state: &AppState,
    name: &Name,
    digest: Digest,
) -> ApiResult<Option<(String, String)>> {
    let repos = &state.app().repos;
    let Some(link) = repos.manifest_link(name, &digest).await? else {
        return Ok(None);
    };
    let limit = state.app().config.max_manifest_bytes.max(4 << 20);
    let Some(m) = read_manifest(repos, limit, &digest).await? else {
        return Ok(None);
    };
    let tag_map = repos.tag_map(name).await?;
    let tags: Vec<String> = tag_map
        .iter()
        .filter(|(_, d)| *d == digest)
        .map(|(t, _)| t.clone())
        .collect();
    let referrers = referrers_of(repos, name, &digest, &tag_map).await?;
    let packages = pkgindex::packages_of(repos, name, &digest).await?.packages;
    let mut artifact = artifact_of(repos, name, &m.doc).await?;
    if let Some(a) = &mut artifact
        && let Some(subject) = &a.subject
    {
        a.subject_tags = (tag_map.iter())
            .filter(|(t, d)| d == subject && !is_cosign_tag(t))
            .map(|(t, _)| t.clone())
            .collect();
    }
    let sigs = signatures_of(repos, name, &digest, &tag_map).await?;
    let signed = signed(
        repos,
        name,
        &state.app().config.ui_trusted_keys,
        &digest,
        &sigs,
    )
    .await?;
    let view = ImageView {
        name,
        digest: &digest,
        media_type: link.media_type,
        doc: &m.doc,
        config: m.config.as_ref(),
        summary: summary(repos, &digest, &m).await?,
        tags,
        packages,
        referrers,
        artifact,
        signed,
        now: now(),
    };
    Ok(Some((
        format!("{}@{}", name, short(&digest)),
        pages::image(&view),
    )))
}
