//! Manifests as the pages see them: a manifest or index read with its config, its summary
//! (size, platforms, creation time) and the one definition of an image's size.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;
use validator::Digest;

use super::{Child, Summary};
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

/// The facts of `m` (digest `d`): its [`image_size`], platforms and created time, one
/// definition each (docs/api.md, "Image size" and "Image created time"); for an index, each
/// platform's own facts too, and its created time is the newest of its images'.
pub(super) async fn summary(repos: &Repos, d: &Digest, m: &Manifest) -> ApiResult<Summary> {
    let size = image_size(repos, d, m).await?;
    if is_index(&m.doc) {
        let children = children(repos, m).await?;
        let platforms = (children.iter())
            .filter_map(|c| c.platform.clone())
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        return Ok(Summary {
            size,
            platforms,
            created: children.iter().filter_map(|c| c.created).max(),
            index: true,
            children,
        });
    }
    Ok(Summary {
        size,
        platforms: m
            .config
            .as_ref()
            .and_then(platform_of)
            .into_iter()
            .collect(),
        created: created_of(m),
        index: false,
        children: Vec::new(),
    })
}

/// An image's created time: its config's `created` (none before 1970, such as the zero time
/// cosign writes).
fn created_of(m: &Manifest) -> Option<u64> {
    m.config
        .as_ref()
        .and_then(|c| c.get("created")?.as_str())
        .and_then(parse_time)
}

/// The entries of index `m` in its order, each with the size and created time of the image
/// under it (a manifest the registry cannot read counts its descriptor's size).
async fn children(repos: &Repos, m: &Manifest) -> ApiResult<Vec<Child>> {
    let mut out = Vec::new();
    for entry in m.doc["manifests"].as_array().into_iter().flatten() {
        let Some(digest) = entry
            .get("digest")
            .and_then(Value::as_str)
            .and_then(|d| Digest::parse(d).ok())
        else {
            continue;
        };
        let own = entry.get("size").and_then(Value::as_u64).unwrap_or(0);
        let (size, created) = match read_manifest(repos, 16 << 20, &digest).await? {
            Some(cm) => (image_size(repos, &digest, &cm).await?, created_of(&cm)),
            None => (own, None),
        };
        out.push(Child {
            platform: entry.get("platform").and_then(platform_of),
            digest,
            size,
            created,
        });
    }
    Ok(out)
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
