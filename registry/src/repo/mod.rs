//! Repository metadata over a [`Store`]: blob and manifest links, the tag index, referrer
//! indexes and the catalog. Every index is a small document replaced with a conditional write
//! and retried on conflict, so concurrent requests on any number of replicas never lose an update.

use std::collections::BTreeSet;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use validator::Digest;

use crate::errors::{ApiError, ApiResult, Code};
use crate::storage::{Key, ObjectMeta, PutMode, Store, StoreError, layout};
use validator::{Name, Tag};

mod barrier;
mod manifests;
pub use crate::tombstone::Epochs;
pub use barrier::Held;
mod doc_cache;
pub(crate) mod hooks;
mod tags;
mod unlink;

use doc_cache::DocCache;
use hooks::{Hooks, TagVeto};
use tags::{TagEntry, TagsDoc};
pub(crate) use tags::{TagTarget, is_cosign_tag};

/// Largest index document (tags, referrers, catalog, package index), read or written.
pub(crate) const INDEX_LIMIT: u64 = 64 << 20;
/// Largest link document read.
const LINK_LIMIT: u64 = 64 << 10;
/// Conditional-write attempts before giving up.
const MAX_ATTEMPTS: usize = 1000;

/// How often a request links again when the link's epoch moved while it wrote it (each move
/// is a DELETE of the same link racing it).
pub(crate) const LINK_ATTEMPTS: usize = 8;
/// Longest time between a manifest PUT's holds and the end of its publication that garbage
/// collection's grace window covers; a PUT that took longer holds its references again before
/// it answers. See `docs/gc.md`, "Why an acknowledged push loses nothing".
pub const REFERENCE_WINDOW: Duration = Duration::from_secs(1);

/// What a manifest link records.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ManifestLink {
    pub media_type: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subject: Option<Digest>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct BlobLink {
    size: u64,
}

/// A subject's referrers in one repository: the descriptors the referrers API answers, and
/// the epoch of each referrer's manifest link when it was listed (absent: the legacy epoch),
/// so a collector forgets only an entry of the link it deleted (`docs/gc.md`, "Epochs").
#[derive(Debug, Default, Serialize, Deserialize)]
struct ReferrersDoc {
    manifests: Vec<serde_json::Value>,
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    epochs: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct CatalogDoc {
    repositories: BTreeSet<String>,
}

/// Whether the index document `bytes` lists `child` in its `manifests`.
fn lists_child(bytes: &[u8], child: &Digest) -> bool {
    #[derive(Deserialize)]
    struct Entry {
        digest: String,
    }
    #[derive(Deserialize)]
    struct Index {
        #[serde(default)]
        manifests: Vec<Entry>,
    }
    serde_json::from_slice::<Index>(bytes)
        .is_ok_and(|i| i.manifests.iter().any(|m| m.digest == child.as_str()))
}

/// At most `n` names from `rest` (all without `n`), and whether any follow.
pub(crate) fn take_page<'a>(
    mut rest: impl Iterator<Item = &'a String>,
    n: Option<usize>,
) -> (Vec<String>, bool) {
    let page = rest
        .by_ref()
        .take(n.unwrap_or(usize::MAX))
        .cloned()
        .collect();
    (page, rest.next().is_some())
}

/// Repository-level operations on a store.
#[derive(Debug, Clone)]
pub(crate) struct Repos {
    store: Arc<dyn Store>,
    parsed: Arc<DocCache>,
    /// The features' part in deletes (`crate::features::repo_hooks`); none by default.
    hooks: Hooks,
}

fn corrupt(key: &Key, e: serde_json::Error) -> ApiError {
    ApiError::internal(format!("stored document {key} is not valid: {e}"))
}

impl Repos {
    pub fn new(store: Arc<dyn Store>) -> Repos {
        Repos {
            store,
            parsed: Arc::default(),
            hooks: Hooks::default(),
        }
    }

    /// These repositories with `hooks` installed (called in order on every manifest delete).
    pub(crate) fn with_hooks(self, hooks: Hooks) -> Repos {
        Repos { hooks, ..self }
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub(crate) async fn read<T: DeserializeOwned>(
        &self,
        key: &Key,
        limit: u64,
    ) -> ApiResult<Option<T>> {
        match self.store.get(key, limit).await {
            Ok(doc) => Ok(Some(
                serde_json::from_slice(&doc.bytes).map_err(|e| corrupt(key, e))?,
            )),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Reads an index document through the replica's cache of parsed documents: one store
    /// request every time (a conditional one when a parsed copy is held), a parse only when the
    /// document changed.
    async fn read_shared<T>(&self, key: &Key) -> ApiResult<Option<Arc<T>>>
    where
        T: DeserializeOwned + Send + Sync + 'static,
    {
        self.read_cached(key, INDEX_LIMIT, |bytes| {
            serde_json::from_slice(bytes).map_err(|e| corrupt(key, e))
        })
        .await
    }

    /// Read-modify-write of an index document with a conditional put; `f` returns false when
    /// nothing needs writing. A document that would grow past [`INDEX_LIMIT`] is not written
    /// (`DENIED`, naming it): written, it could no longer be read, and every later change to
    /// it would fail.
    pub(crate) async fn update<T, F>(&self, key: &Key, f: F) -> ApiResult<T>
    where
        T: Default + Serialize + DeserializeOwned,
        F: FnMut(&mut T) -> bool,
    {
        self.update_within(key, INDEX_LIMIT, f).await
    }

    async fn update_within<T, F>(&self, key: &Key, limit: u64, mut f: F) -> ApiResult<T>
    where
        T: Default + Serialize + DeserializeOwned,
        F: FnMut(&mut T) -> bool,
    {
        self.update_reading(key, limit, || async { Ok(()) }, |doc, ()| f(doc))
            .await
    }

    /// [`Repos::update`] with `read` awaited between each read of the document and its
    /// conditional write, and `f` deciding with both: what `read` sees is at least as new as
    /// the document (a DELETE's tag pass reads the tag index, then the digest's record).
    pub(crate) async fn update_reading<T, X, R, Fut, F>(
        &self,
        key: &Key,
        limit: u64,
        mut read: R,
        mut f: F,
    ) -> ApiResult<T>
    where
        T: Default + Serialize + DeserializeOwned,
        R: FnMut() -> Fut,
        Fut: std::future::Future<Output = ApiResult<X>>,
        F: FnMut(&mut T, X) -> bool,
    {
        for _ in 0..MAX_ATTEMPTS {
            let (mut doc, mode) = match self.store.get(key, limit).await {
                Ok(d) => (
                    serde_json::from_slice::<T>(&d.bytes).map_err(|e| corrupt(key, e))?,
                    PutMode::Replace(d.etag),
                ),
                Err(e) if e.is_not_found() => (T::default(), PutMode::Create),
                Err(e) => return Err(e.into()),
            };
            let seen = read().await?;
            if !f(&mut doc, seen) {
                return Ok(doc);
            }
            let bytes = serde_json::to_vec(&doc).map_err(ApiError::internal)?;
            if bytes.len() as u64 > limit {
                return Err(ApiError::new(
                    Code::Denied,
                    format!(
                        "{key} would be {} bytes, over the {limit} byte limit of an index \
                         document; remove entries from it (tags, referrers) first",
                        bytes.len()
                    ),
                )
                .with_reason());
            }
            match self.store.put(key, Bytes::from(bytes), mode).await {
                Ok(_) => return Ok(doc),
                Err(StoreError::PreconditionFailed { .. } | StoreError::AlreadyExists { .. }) => {
                    tokio::task::yield_now().await;
                }
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::internal(format!(
            "gave up updating {key} after {MAX_ATTEMPTS} conflicting writes"
        )))
    }

    // ---- repositories and the catalog ----

    pub async fn exists(&self, name: &Name) -> ApiResult<bool> {
        match self.store.stat(&layout::repository_marker(name)).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Creates the repository on first push and lists it in the catalog.
    pub async fn ensure(&self, name: &Name) -> ApiResult<()> {
        if self.exists(name).await? {
            return Ok(());
        }
        let marker = layout::repository_marker(name);
        match self
            .store
            .put(&marker, Bytes::from_static(b"{}"), PutMode::Create)
            .await
        {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        self.update::<CatalogDoc, _>(&layout::catalog(), |c| {
            c.repositories.insert(name.as_str().to_owned())
        })
        .await?;
        Ok(())
    }

    pub async fn catalog(&self) -> ApiResult<Vec<String>> {
        let doc = self.read_shared::<CatalogDoc>(&layout::catalog()).await?;
        Ok(doc
            .map(|d| d.repositories.iter().cloned().collect())
            .unwrap_or_default())
    }

    /// One page of the catalog (repository names in byte order) after `last`, of the names
    /// `keep` accepts, and whether more follow: a page costs one store request and the names
    /// it passes over, not a copy of the whole catalog (see [`DocCache`]).
    pub async fn catalog_page(
        &self,
        n: Option<usize>,
        last: Option<&str>,
        keep: impl Fn(&str) -> bool,
    ) -> ApiResult<(Vec<String>, bool)> {
        let Some(doc) = self.read_shared::<CatalogDoc>(&layout::catalog()).await? else {
            return Ok((Vec::new(), false));
        };
        let after = (
            last.map_or(Bound::Unbounded, Bound::Excluded),
            Bound::Unbounded,
        );
        let rest = doc.repositories.range::<str, _>(after).filter(|r| keep(r));
        Ok(take_page(rest, n))
    }

    // ---- blobs ----

    /// Size of a committed blob anywhere in the registry (for a read: any epoch's copy).
    pub async fn blob_stat(&self, d: &Digest) -> ApiResult<Option<ObjectMeta>> {
        Ok(self.blob_find(d).await?.map(|(_, m)| m))
    }

    /// Where a committed blob can be read, and its size: the legacy key, or the current
    /// epoch's (`crate::tombstone::find_data`).
    pub async fn blob_find(&self, d: &Digest) -> ApiResult<Option<(Key, ObjectMeta)>> {
        Ok(crate::tombstone::find_data(self.store.as_ref(), d).await?)
    }

    /// Size of a blob the repository may serve (for a read: the legacy link, or else the one
    /// of the current epoch).
    pub async fn blob_linked(&self, name: &Name, d: &Digest) -> ApiResult<Option<u64>> {
        Ok(self.blob_link_find(name, d).await?.map(|(_, size)| size))
    }

    /// The key and size of the repository's link to `d`, as [`Repos::blob_linked`] finds it.
    async fn blob_link_find(&self, name: &Name, d: &Digest) -> ApiResult<Option<(Key, u64)>> {
        crate::tombstone::find_per_epoch(
            self.store.as_ref(),
            d,
            layout::blob_link(name, d),
            |e| (!e.blob_link(name).is_empty()).then(|| e.blob_link_key(name, d)),
            |k| async move {
                Ok::<_, ApiError>(self.read::<BlobLink>(&k, LINK_LIMIT).await?.map(|l| l.size))
            },
        )
        .await
    }

    /// Size of the repository's link to `d` at the epoch a hold gave (what a request that
    /// acknowledges content relies on: a link of an earlier epoch may be being deleted).
    pub async fn blob_linked_at(
        &self,
        name: &Name,
        d: &Digest,
        epochs: &Epochs,
    ) -> ApiResult<Option<u64>> {
        let link: Option<BlobLink> = self
            .read(&epochs.blob_link_key(name, d), LINK_LIMIT)
            .await?;
        Ok(link.map(|l| l.size))
    }

    /// True when the repository links `d` at the epoch a hold gave. A link of an earlier epoch
    /// (a collector committed to deleting it, and its DELETE may still be on the way) is
    /// written again at the current epoch first: the client saw it (a HEAD answers from it
    /// until it is gone) and relies on it, and the repository did have the blob.
    pub(crate) async fn relink_blob(
        &self,
        name: &Name,
        d: &Digest,
        epochs: &Epochs,
    ) -> ApiResult<bool> {
        if self.blob_linked_at(name, d, epochs).await?.is_some() {
            return Ok(true);
        }
        let Some((_, size)) = self.blob_link_find(name, d).await? else {
            return Ok(false);
        };
        self.link_blob(name, d, epochs, size).await?;
        Ok(true)
    }

    /// Links blob `d` into the repository at the epoch a hold of `d` gave, then checks that
    /// the record still names that epoch for the link. A DELETE of the link that moved it to a
    /// fresh epoch after the hold (`unlink`) has deleted the keys of the epoch it left, so a
    /// link written there is dead (the legacy key: visible, but a collector removes it without
    /// a grace window); the upload or mount then comes after the DELETE and links again at the
    /// new epoch, held again (and the bytes copied there if a collector's commit moved them).
    pub async fn link_blob(
        &self,
        name: &Name,
        d: &Digest,
        epochs: &Epochs,
        size: u64,
    ) -> ApiResult<()> {
        self.ensure(name).await?;
        let bytes =
            Bytes::from(serde_json::to_vec(&BlobLink { size }).map_err(ApiError::internal)?);
        let mut epochs = std::borrow::Cow::Borrowed(epochs);
        for _ in 0..LINK_ATTEMPTS {
            self.store
                .put(
                    &epochs.blob_link_key(name, d),
                    bytes.clone(),
                    PutMode::Overwrite,
                )
                .await?;
            let now = self.link_epoch(name, d, unlink::LinkKind::Blob).await?;
            if now == epochs.blob_link(name) {
                return Ok(());
            }
            tracing::info!(repository = %name, digest = %d, written = epochs.blob_link(name), current = %now, "a DELETE moved the blob's link while it was being linked: linking it again");
            let held = self.hold_epochs(d).await?;
            if !self.revive(d, &held).await? {
                return Err(ApiError::new(
                    Code::BlobUnknown,
                    format!("blob {d} was deleted while it was linked into {name}"),
                ));
            }
            epochs = std::borrow::Cow::Owned(held);
        }
        Err(ApiError::internal(format!(
            "gave up linking {d} into {name}: its link moved to another epoch during each of \
             {LINK_ATTEMPTS} attempts"
        )))
    }

    /// Removes a blob link (wherever a read finds it); false when there was none. The link
    /// moves to a fresh epoch first, so a re-upload or mount after this answered writes a key
    /// no store DELETE of this request can reach, however late it lands (`unlink`).
    pub async fn unlink_blob(&self, name: &Name, d: &Digest) -> ApiResult<bool> {
        let Some((found, _)) = self.blob_link_find(name, d).await? else {
            return Ok(false);
        };
        let old = self
            .retire_link_epoch(name, d, unlink::LinkKind::Blob)
            .await?;
        self.delete_retired(unlink::LinkKind::Blob, name, d, &old, found)
            .await?;
        Ok(true)
    }

    /// The indexes in the repository that list `child` among their `manifests`, at most
    /// `limit` of them (the DELETE handler's `MANIFEST_REFERENCED` check). No document maps a
    /// child to its indexes, so this walks the repository's manifest links a page at a time:
    /// one link read per manifest, and the bytes of each index (the cost of a DELETE by
    /// digest, documented in `docs/api.md`). An index whose bytes cannot be read or parsed
    /// lists nothing.
    pub async fn indexes_listing(
        &self,
        name: &Name,
        child: &Digest,
        limit: usize,
    ) -> ApiResult<Vec<Digest>> {
        use futures_util::StreamExt as _;
        /// Keys per listing page, and links read at once.
        const PAGE: usize = 1000;
        const CONCURRENCY: usize = 16;
        let prefix = layout::manifest_links(name);
        let mut after: Option<Key> = None;
        let mut found = Vec::new();
        loop {
            let page = self.store.list_page(&prefix, after.as_ref(), PAGE).await?;
            let end = page.len() < PAGE;
            after = page.last().cloned();
            // A link at two epochs (a collector's DELETE of the old one still to come) is one
            // manifest.
            let candidates: BTreeSet<Digest> = page
                .iter()
                .filter_map(layout::parse_repo_key)
                .filter_map(|(n, part)| match part {
                    layout::RepoPart::ManifestLink(d, _) if n == *name && d != *child => Some(d),
                    _ => None,
                })
                .collect();
            let mut checks = futures_util::stream::iter(candidates)
                .map(|d| async move {
                    let Some(link) = self.manifest_link(name, &d).await? else {
                        return Ok::<_, ApiError>(None);
                    };
                    if !validator::MediaType::parse(&link.media_type).is_ok_and(|m| m.is_index()) {
                        return Ok(None);
                    }
                    let bytes = match self.manifest_bytes(&d, link.size.max(LINK_LIMIT)).await {
                        Ok(b) => b,
                        Err(_) => return Ok(None),
                    };
                    Ok(lists_child(&bytes, child).then_some(d))
                })
                .buffer_unordered(CONCURRENCY);
            while let Some(r) = checks.next().await {
                if let Some(d) = r? {
                    found.push(d);
                    if found.len() >= limit {
                        found.sort();
                        found.dedup();
                        return Ok(found);
                    }
                }
            }
            if end {
                found.sort();
                found.dedup();
                return Ok(found);
            }
        }
    }

    // ---- tags ----

    async fn read_tag(&self, name: &Name, tag: &Tag) -> ApiResult<Option<TagEntry>> {
        let doc = self.read_shared::<TagsDoc>(&layout::tags(name)).await?;
        Ok(doc.and_then(|d| d.tags.get(tag.as_str()).cloned()))
    }

    /// The manifest a tag points at, with its media type and size: one read of the tag index
    /// (one more, of the link, for an entry written before tags carried them). A tag is set
    /// only after its manifest was linked and removed before the link goes, so the manifest of
    /// a tag found here is in the repository.
    /// The digest of every tag of the repository (for garbage collection's mark).
    pub async fn tag_digests(&self, name: &Name) -> ApiResult<Vec<Digest>> {
        let doc = self.read_shared::<TagsDoc>(&layout::tags(name)).await?;
        Ok(doc
            .map(|d| d.tags.values().map(|e| e.digest().clone()).collect())
            .unwrap_or_default())
    }

    /// Every tag of the repository with the digest it points at, in tag order.
    pub async fn tag_map(&self, name: &Name) -> ApiResult<Vec<(String, Digest)>> {
        let doc = self.read_shared::<TagsDoc>(&layout::tags(name)).await?;
        Ok(doc
            .map(|d| {
                d.tags
                    .iter()
                    .map(|(t, e)| (t.clone(), e.digest().clone()))
                    .collect()
            })
            .unwrap_or_default())
    }

    /// When an image tag of the repository was last set, moved or removed (cosign's tags
    /// not counted), in seconds since 1970; None when the tag index does not say (no image
    /// tag changed since it began to be recorded).
    pub async fn last_tag_change(&self, name: &Name) -> ApiResult<Option<u64>> {
        let doc = self.read_shared::<TagsDoc>(&layout::tags(name)).await?;
        Ok(doc.and_then(|d| d.pushed))
    }

    pub async fn resolve_tag_target(&self, name: &Name, tag: &Tag) -> ApiResult<Option<TagTarget>> {
        match self.read_tag(name, tag).await? {
            None => Ok(None),
            Some(TagEntry::Target(t)) => Ok(Some(t)),
            Some(TagEntry::Digest(digest)) => {
                Ok(self.manifest_link(name, &digest).await?.map(|l| TagTarget {
                    digest,
                    media_type: l.media_type,
                    size: l.size,
                    epoch: String::new(),
                }))
            }
        }
    }

    /// Points a tag at the manifest `link` describes (linked into the repository first, at
    /// `epoch`: see [`TagTarget::epoch`]).
    /// With a `veto` (an immutable-tag rule), a tag that already points at another digest is
    /// left alone and the call answers the veto's refusal; the check runs inside the
    /// conditional write, so a racing writer on another replica cannot slip in between.
    pub async fn set_tag(
        &self,
        name: &Name,
        tag: &Tag,
        d: &Digest,
        (link, epoch): (&ManifestLink, &str),
        veto: Option<&dyn TagVeto>,
    ) -> ApiResult<()> {
        let entry = TagEntry::Target(TagTarget {
            digest: d.clone(),
            media_type: link.media_type.clone(),
            size: link.size,
            epoch: epoch.to_owned(),
        });
        let mut taken_by = None;
        self.update::<TagsDoc, _>(&layout::tags(name), |t| {
            taken_by = None;
            if let (Some(_), Some(old)) = (veto, t.tags.get(tag.as_str()))
                && old.digest() != d
            {
                taken_by = Some(old.digest().clone());
                return false;
            }
            let old = t.tags.insert(tag.as_str().to_owned(), entry.clone());
            if old.as_ref() == Some(&entry) {
                return false;
            }
            t.changed(tag.as_str());
            true
        })
        .await?;
        match (veto, taken_by) {
            (Some(rule), Some(old)) => Err(rule.refusal(name, tag, &old, d)),
            _ => Ok(()),
        }
    }

    /// Removes a tag; false when it did not exist.
    pub async fn delete_tag(&self, name: &Name, tag: &Tag) -> ApiResult<bool> {
        let mut removed = false;
        self.update::<TagsDoc, _>(&layout::tags(name), |t| {
            removed = t.tags.remove(tag.as_str()).is_some();
            if removed {
                t.changed(tag.as_str());
            }
            removed
        })
        .await?;
        Ok(removed)
    }

    /// Removes a tag only while it still points at `d` (retention's conditional removal);
    /// false when it is gone or points elsewhere.
    pub async fn delete_tag_if(&self, name: &Name, tag: &Tag, d: &Digest) -> ApiResult<bool> {
        let mut removed = false;
        self.update::<TagsDoc, _>(&layout::tags(name), |t| {
            removed = t.tags.get(tag.as_str()).is_some_and(|e| e.digest() == d);
            if removed {
                t.tags.remove(tag.as_str());
                t.changed(tag.as_str());
            }
            removed
        })
        .await?;
        Ok(removed)
    }

    /// One page of the tags in lexical (byte) order: at most `n` tags after `last`, and
    /// whether more follow; `None` when the repository does not exist. A page costs one store
    /// request and the tags it returns, whatever the size of the index (see [`DocCache`]).
    pub async fn tags_page(
        &self,
        name: &Name,
        n: Option<usize>,
        last: Option<&str>,
    ) -> ApiResult<Option<(Vec<String>, bool)>> {
        let Some(doc) = self.read_shared::<TagsDoc>(&layout::tags(name)).await? else {
            return Ok(self.exists(name).await?.then(|| (Vec::new(), false)));
        };
        let after = (
            last.map_or(Bound::Unbounded, Bound::Excluded),
            Bound::Unbounded,
        );
        let rest = doc.tags.range::<str, _>(after).map(|(t, _)| t);
        Ok(Some(take_page(rest, n)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_index_reads_bare_digests_and_targets() {
        let d = Digest::sha256(b"m");
        let old = format!(r#"{{"tags":{{"old":"{d}"}}}}"#);
        let doc: TagsDoc = serde_json::from_str(&old).unwrap();
        assert_eq!(doc.tags["old"], TagEntry::Digest(d.clone()));
        let target = TagEntry::Target(TagTarget {
            digest: d.clone(),
            media_type: "application/vnd.oci.image.manifest.v1+json".to_owned(),
            size: 7,
            epoch: "0a1b".to_owned(),
        });
        let doc = TagsDoc {
            tags: [("new".to_owned(), target.clone())].into(),
            pushed: None,
        };
        let json = serde_json::to_string(&doc).unwrap();
        assert!(json.contains(r#""mediaType":"#), "{json}");
        let back: TagsDoc = serde_json::from_str(&json).unwrap();
        assert_eq!(back.tags["new"], target);
        assert_eq!(back.tags["new"].digest(), &d);
    }

    fn target(d: &Digest) -> TagEntry {
        TagEntry::Target(TagTarget {
            digest: d.clone(),
            media_type: "application/vnd.oci.image.manifest.v1+json".to_owned(),
            size: 7,
            epoch: String::new(),
        })
    }

    /// The last push is a change of an image tag: setting, moving or removing cosign's
    /// signature tag leaves it as it was; an image tag's set, move or removal records it.
    #[tokio::test]
    async fn a_signature_tag_is_no_push_of_the_repository() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(crate::storage::FsStore::open(dir.path()).unwrap());
        let repos = Repos::new(store.clone());
        let name = Name::parse("team/app").unwrap();
        repos.ensure(&name).await.unwrap();
        let (image, sig) = (Digest::sha256(b"image"), Digest::sha256(b"signature"));
        let link = ManifestLink {
            media_type: "application/vnd.oci.image.manifest.v1+json".to_owned(),
            size: 7,
            subject: None,
        };
        assert_eq!(repos.last_tag_change(&name).await.unwrap(), None);
        let v1 = Tag::parse("v1").unwrap();
        repos
            .set_tag(&name, &v1, &image, (&link, ""), None)
            .await
            .unwrap();
        assert!(repos.last_tag_change(&name).await.unwrap().is_some());
        // Back-date the record, as if the image had been pushed long ago.
        let key = layout::tags(&name);
        repos
            .update::<TagsDoc, _>(&key, |t| {
                t.pushed = Some(1);
                true
            })
            .await
            .unwrap();
        let cosign = Tag::parse(&format!("sha256-{}.sig", image.encoded())).unwrap();
        repos
            .set_tag(&name, &cosign, &sig, (&link, ""), None)
            .await
            .unwrap();
        repos.delete_tag(&name, &cosign).await.unwrap();
        repos
            .set_tag(&name, &cosign, &sig, (&link, ""), None)
            .await
            .unwrap();
        assert_eq!(repos.last_tag_change(&name).await.unwrap(), Some(1));
        // Setting an image tag to what it already is changes nothing either.
        repos
            .set_tag(&name, &v1, &image, (&link, ""), None)
            .await
            .unwrap();
        assert_eq!(repos.last_tag_change(&name).await.unwrap(), Some(1));
        let v2 = Tag::parse("v2").unwrap();
        repos
            .set_tag(&name, &v2, &sig, (&link, ""), None)
            .await
            .unwrap();
        let pushed = repos.last_tag_change(&name).await.unwrap().unwrap();
        assert!(pushed > 1_700_000_000, "{pushed}");
        repos
            .update::<TagsDoc, _>(&key, |t| {
                t.pushed = Some(1);
                true
            })
            .await
            .unwrap();
        repos.delete_tag(&name, &v2).await.unwrap();
        assert!(repos.last_tag_change(&name).await.unwrap().unwrap() > 1);
    }

    /// Pages of a large tag index come from one parse held by the replica, and a write by
    /// another replica (another `Repos` on the same store) shows on the next page at once.
    #[tokio::test]
    async fn tag_pages_use_the_parsed_index_and_see_other_replicas_writes() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(crate::storage::FsStore::open(dir.path()).unwrap());
        let (a, b) = (Repos::new(store.clone()), Repos::new(store.clone()));
        let name = Name::parse("grow/big").unwrap();
        a.ensure(&name).await.unwrap();
        let d = Digest::sha256(b"m");
        let doc = TagsDoc {
            tags: (0..1000)
                .map(|i| (format!("t{i:04}"), target(&d)))
                .collect(),
            pushed: None,
        };
        let key = layout::tags(&name);
        store
            .put(
                &key,
                serde_json::to_vec(&doc).unwrap().into(),
                PutMode::Overwrite,
            )
            .await
            .unwrap();

        let (mut all, mut last) = (Vec::new(), None::<String>);
        loop {
            let (page, more) = a
                .tags_page(&name, Some(100), last.as_deref())
                .await
                .unwrap()
                .unwrap();
            assert!(page.len() <= 100);
            last = page.last().cloned();
            all.extend(page);
            if !more {
                break;
            }
        }
        let want: Vec<String> = doc.tags.keys().cloned().collect();
        assert_eq!(all, want);
        let (etag, _) = a.parsed.lookup(&key).expect("the index is held parsed");

        let link = ManifestLink {
            media_type: "application/vnd.oci.image.manifest.v1+json".to_owned(),
            size: 7,
            subject: None,
        };
        let added = Tag::parse("t0500x").unwrap();
        b.set_tag(&name, &added, &d, (&link, ""), None)
            .await
            .unwrap();
        let (page, more) = a
            .tags_page(&name, Some(2), Some("t0500"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((page, more), (vec!["t0500x".into(), "t0501".into()], true));
        assert_ne!(
            a.parsed.lookup(&key).unwrap().0,
            etag,
            "the new version is held"
        );
        assert_eq!(
            a.resolve_tag_target(&name, &added)
                .await
                .unwrap()
                .map(|t| t.digest),
            Some(d.clone())
        );

        // The last page, a page past the end, and an index that is gone.
        let (page, more) = a
            .tags_page(&name, Some(5), Some("t0997"))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((page, more), (vec!["t0998".into(), "t0999".into()], false));
        let (page, more) = a.tags_page(&name, None, Some("u")).await.unwrap().unwrap();
        assert_eq!((page, more), (Vec::<String>::new(), false));
        store.delete(&key).await.unwrap();
        assert_eq!(
            a.tags_page(&name, Some(5), None).await.unwrap(),
            Some((Vec::new(), false))
        );
        assert!(a.parsed.lookup(&key).is_none());
        let unknown = Name::parse("grow/none").unwrap();
        assert_eq!(a.tags_page(&unknown, None, None).await.unwrap(), None);
    }

    /// An index document never grows past the limit: the change that would is refused and
    /// the document stays as it was, readable.
    #[tokio::test]
    async fn index_documents_do_not_grow_past_the_limit() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(crate::storage::FsStore::open(dir.path()).unwrap());
        let repos = Repos::new(store.clone());
        let key = layout::referrers(&Name::parse("a/b").unwrap(), &Digest::sha256(b"s"));
        let add = |n: usize| {
            move |r: &mut ReferrersDoc| {
                r.manifests
                    .push(serde_json::json!({"annotations": {"x": "y".repeat(n)}}));
                true
            }
        };
        repos
            .update_within::<ReferrersDoc, _>(&key, 1024, add(400))
            .await
            .unwrap();
        let e = repos
            .update_within::<ReferrersDoc, _>(&key, 1024, add(700))
            .await
            .unwrap_err();
        assert_eq!(e.code, Code::Denied);
        assert!(e.to_string().contains("over the 1024 byte limit"), "{e}");
        let kept: ReferrersDoc =
            serde_json::from_slice(&store.get(&key, 1024).await.unwrap().bytes).unwrap();
        assert_eq!(kept.manifests.len(), 1);
    }

    /// Catalog pages pass over names the caller may not list without counting them, and say
    /// "more" only when a listable name follows.
    #[tokio::test]
    async fn catalog_pages_filter_without_losing_their_size() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(crate::storage::FsStore::open(dir.path()).unwrap());
        let repos = Repos::new(store);
        for n in ["a/1", "b/1", "a/2", "b/2", "a/3", "b/3"] {
            repos.ensure(&Name::parse(n).unwrap()).await.unwrap();
        }
        let only_a = |r: &str| r.starts_with("a/");
        let page = repos.catalog_page(Some(2), None, only_a).await.unwrap();
        assert_eq!(page, (vec!["a/1".into(), "a/2".into()], true));
        let page = repos
            .catalog_page(Some(2), Some("a/2"), only_a)
            .await
            .unwrap();
        assert_eq!(page, (vec!["a/3".into()], false));
        let page = repos
            .catalog_page(Some(1), Some("a/1"), only_a)
            .await
            .unwrap();
        assert_eq!(page, (vec!["a/2".into()], true));
        let page = repos
            .catalog_page(None, Some("a/3"), |_| true)
            .await
            .unwrap();
        assert_eq!(
            page,
            (vec!["b/1".into(), "b/2".into(), "b/3".into()], false)
        );
    }
}
