//! Manifests as the pages see them: a manifest or index read with its config, its summary
//! (size, platforms, creation time) and the one definition of an image's size.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use validator::Digest;

use super::Summary;
use crate::errors::{ApiResult, Code};
use crate::repo::Repos;

/// A manifest or index, parsed, with its config when it is an image.
pub(super) struct Manifest {
    pub(super) doc: Value,
    pub(super) bytes: u64,
    pub(super) config: Option<Value>,
}

pub(super) fn is_index(doc: &Value) -> bool {
    doc.get("manifests").is_some()
}

pub(super) async fn read_manifest(
    repos: &Repos,
    limit: u64,
    d: &Digest,
) -> ApiResult<Option<Manifest>> {
    let bytes = match repos.manifest_bytes(d, limit).await {
        Ok(b) => b,
        Err(e) if e.code == Code::Internal => return Err(e),
        Err(_) => return Ok(None),
    };
    let Ok(doc) = serde_json::from_slice::<Value>(&bytes) else {
        return Ok(None);
    };
    let config = match doc
        .get("config")
        .and_then(|c| c.get("digest"))
        .and_then(Value::as_str)
        .and_then(|d| Digest::parse(d).ok())
    {
        Some(c) if !is_index(&doc) => {
            match crate::tombstone::get_data(
                repos.store().as_ref(),
                &c,
                validator::MAX_CONFIG_SIZE as u64,
            )
            .await
            {
                Ok(b) => serde_json::from_slice::<Value>(&b.bytes).ok(),
                Err(e) if e.is_not_found() => None,
                // A config larger than configs may be (a foreign artifact) is shown without it.
                Err(crate::storage::StoreError::TooLarge { .. }) => None,
                Err(e) => return Err(e.into()),
            }
        }
        _ => None,
    };
    Ok(Some(Manifest {
        bytes: bytes.len() as u64,
        doc,
        config,
    }))
}

pub(super) fn platform_of(v: &Value) -> Option<String> {
    let os = v.get("os")?.as_str().filter(|s| !s.is_empty())?;
    let arch = v.get("architecture")?.as_str().filter(|s| !s.is_empty())?;
    Some(match v.get("variant").and_then(Value::as_str) {
        Some(var) => format!("{os}/{arch}/{var}"),
        None => format!("{os}/{arch}"),
    })
}

/// The facts of `m`, whose [`image_size`] is `size`.
pub(super) fn summary(m: &Manifest, size: u64) -> Summary {
    if is_index(&m.doc) {
        let platforms = m.doc["manifests"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| platform_of(x.get("platform")?))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect()
            })
            .unwrap_or_default();
        let created = m
            .doc
            .get("annotations")
            .and_then(|a| a.get("org.opencontainers.image.created"))
            .and_then(Value::as_str)
            .and_then(parse_time);
        return Summary {
            size,
            platforms,
            created,
            index: true,
        };
    }
    Summary {
        size,
        platforms: m
            .config
            .as_ref()
            .and_then(platform_of)
            .into_iter()
            .collect(),
        created: m
            .config
            .as_ref()
            .and_then(|c| c.get("created")?.as_str())
            .and_then(parse_time),
        index: false,
    }
}

/// Distinct digests and their sizes: what one definition of size counts.
#[derive(Default)]
pub(super) struct Counted(BTreeMap<String, u64>);

impl Counted {
    fn add(&mut self, digest: &str, size: u64) {
        self.0.entry(digest.to_owned()).or_insert(size);
    }

    /// The config and layers of an image manifest.
    fn add_blobs(&mut self, doc: &Value) {
        let config = doc.get("config").into_iter();
        let layers = doc
            .get("layers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for d in config.chain(layers) {
            if let (Some(digest), Some(size)) = (
                d.get("digest").and_then(Value::as_str),
                d.get("size").and_then(Value::as_u64),
            ) {
                self.add(digest, size);
            }
        }
    }

    pub(super) fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

/// An image's size, the one definition the page, `rdctl inspect` and `rdctl ls` share
/// (docs/api.md, "Image size"): the manifest's own bytes, its config and its layers; for an
/// index, its own bytes plus each platform manifest with that manifest's config and layers.
/// Every distinct digest counts once (a layer two platforms share, a config two tags share).
pub(super) async fn image_size(repos: &Repos, d: &Digest, m: &Manifest) -> ApiResult<u64> {
    let mut c = Counted::default();
    content_of(repos, d, m, &mut c).await?;
    Ok(c.total())
}

/// Adds what [`image_size`] counts for one manifest or index to `c`.
pub(super) async fn content_of(
    repos: &Repos,
    d: &Digest,
    m: &Manifest,
    c: &mut Counted,
) -> ApiResult<()> {
    c.add(d.as_str(), m.bytes);
    if !is_index(&m.doc) {
        c.add_blobs(&m.doc);
        return Ok(());
    }
    let children = m.doc["manifests"].as_array().cloned().unwrap_or_default();
    for child in children {
        let (Some(cd), Some(size)) = (
            child.get("digest").and_then(Value::as_str),
            child.get("size").and_then(Value::as_u64),
        ) else {
            continue;
        };
        c.add(cd, size);
        let Ok(cd) = Digest::parse(cd) else { continue };
        // A platform manifest, read once per page through the document cache; a nested
        // index counts its own bytes only.
        if let Ok(Some(bytes)) = repos
            .manifest_bytes(&cd, 16 << 20)
            .await
            .map(Some)
            .or_else(|e| {
                if e.code == Code::Internal {
                    Err(e)
                } else {
                    Ok(None)
                }
            })
            && let Ok(doc) = serde_json::from_slice::<Value>(&bytes)
            && !is_index(&doc)
        {
            c.add_blobs(&doc);
        }
    }
    Ok(())
}

/// Seconds since 1970 of an RFC 3339 time (before 1970 is no time for an image's age).
pub(super) fn parse_time(t: &str) -> Option<u64> {
    validator::parse_rfc3339(t).and_then(|s| u64::try_from(s).ok())
}
