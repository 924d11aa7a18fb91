//! The parsed-document cache of [`super::Repos`]: index documents (tag indexes, the catalog)
//! kept parsed at the version they were read at, so paging a large tag index or catalog does
//! not parse it whole for every page, and resolving a tag (every manifest HEAD and GET by tag)
//! costs one "has it changed?" question to the store instead of a read and a parse.

use std::sync::Arc;

use bytes::Bytes;
use validator::Digest;

use crate::errors::ApiResult;
use crate::storage::{Key, layout};

/// Index documents (a repository's tag index, the catalog) as parsed at a known version.
///
/// A page of a tag list needs a few entries of an index of any size; parsing the whole index
/// for each page made paging a 10,000-tag repository quadratic (docs/benchmarks.md, "Growth").
/// A manifest HEAD by tag needs one entry: reading, hashing and parsing a 100-tag index for it
/// was a third of the request's CPU (docs/benchmarks.md, "Small requests: profile").
/// Every read still asks the store whether the document changed ([`Store::get_if_changed`]),
/// so a replica sees other replicas' writes as soon as it would without the cache; what is
/// saved is the parse, and on S3 the body. Bounded by the stored size of what it holds plus
/// [`ENTRY_OVERHEAD`] per entry; when full, the least recently used quarter goes at once, so
/// a walk over many repositories (garbage collection's mark, retention) costs amortized
/// O(log n) per document, not a scan of the cache for each.
///
/// [`Store::get_if_changed`]: crate::storage::Store::get_if_changed
#[derive(Debug, Default)]
pub(super) struct DocCache {
    docs: std::sync::Mutex<DocCacheInner>,
}

#[derive(Debug, Default)]
struct DocCacheInner {
    /// Key → (version, parsed document, stored size, last use).
    entries: std::collections::HashMap<Key, CachedDoc>,
    bytes: usize,
    clock: u64,
}

#[derive(Debug)]
struct CachedDoc {
    etag: crate::storage::Etag,
    doc: Arc<dyn std::any::Any + Send + Sync>,
    size: usize,
    used: u64,
}

/// Stored bytes of parsed documents one replica keeps (parsed, they take about twice that).
const DOC_CACHE_BYTES: usize = 32 << 20;
/// What an entry costs beyond its document's stored size (its key, its map slot, the parsed
/// form's headers), counted against [`DOC_CACHE_BYTES`] so many small documents stay bounded.
const ENTRY_OVERHEAD: usize = 256;

impl DocCache {
    #[cfg(test)]
    pub(super) fn lookup(
        &self,
        key: &Key,
    ) -> Option<(crate::storage::Etag, Arc<dyn std::any::Any + Send + Sync>)> {
        self.lookup_within(key, u64::MAX)
    }

    /// [`DocCache::lookup`] of a document stored in at most `limit` bytes.
    fn lookup_within(
        &self,
        key: &Key,
        limit: u64,
    ) -> Option<(crate::storage::Etag, Arc<dyn std::any::Any + Send + Sync>)> {
        let mut inner = self.docs.lock().unwrap_or_else(|e| e.into_inner());
        inner.clock += 1;
        let now = inner.clock;
        let e = inner.entries.get_mut(key)?;
        e.used = now;
        (e.size as u64 <= limit).then(|| (e.etag.clone(), e.doc.clone()))
    }

    pub(super) fn insert(
        &self,
        key: &Key,
        etag: crate::storage::Etag,
        doc: Arc<dyn std::any::Any + Send + Sync>,
        size: usize,
    ) {
        let mut inner = self.docs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = inner.entries.remove(key) {
            inner.bytes -= old.size;
        }
        let size = size + ENTRY_OVERHEAD;
        if size > DOC_CACHE_BYTES / 2 {
            return;
        }
        if inner.bytes + size > DOC_CACHE_BYTES {
            inner.evict_to(DOC_CACHE_BYTES * 3 / 4 - size);
        }
        inner.clock += 1;
        let used = inner.clock;
        inner.bytes += size;
        inner.entries.insert(
            key.clone(),
            CachedDoc {
                etag,
                doc,
                size,
                used,
            },
        );
    }

    /// Forgets a document (it is gone from the store).
    pub(super) fn forget(&self, key: &Key) {
        let mut inner = self.docs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = inner.entries.remove(key) {
            inner.bytes -= old.size;
        }
    }
}

impl DocCacheInner {
    /// Drops the least recently used entries until at most `budget` bytes are held.
    fn evict_to(&mut self, budget: usize) {
        let mut by_use: Vec<(u64, Key)> = self
            .entries
            .iter()
            .map(|(k, e)| (e.used, k.clone()))
            .collect();
        by_use.sort_unstable_by_key(|(used, _)| *used);
        for (_, k) in by_use {
            if self.bytes <= budget {
                break;
            }
            if let Some(e) = self.entries.remove(&k) {
                self.bytes -= e.size;
            }
        }
    }
}

impl super::Repos {
    /// Reads the document at `key` (at most `limit` bytes) through the replica's document
    /// cache: one store request every time (a conditional one when a copy is held), `parse`
    /// only when the document changed. `None` when it is not there.
    pub(super) async fn read_cached<T>(
        &self,
        key: &Key,
        limit: u64,
        parse: impl FnOnce(&Bytes) -> ApiResult<T>,
    ) -> ApiResult<Option<Arc<T>>>
    where
        T: Send + Sync + 'static,
    {
        let held = self
            .parsed
            .lookup_within(key, limit)
            .and_then(|(etag, doc)| Some((etag, doc.downcast::<T>().ok()?)));
        let fresh = match &held {
            Some((etag, _)) => self.store.get_if_changed(key, limit, etag).await,
            None => self.store.get(key, limit).await.map(Some),
        };
        match fresh {
            // "Unchanged" is only ever asked about a held version.
            Ok(None) => Ok(held.map(|(_, doc)| doc)),
            Ok(Some(d)) => {
                let doc = Arc::new(parse(&d.bytes)?);
                self.parsed.insert(key, d.etag, doc.clone(), d.bytes.len());
                Ok(Some(doc))
            }
            Err(e) if e.is_not_found() => {
                self.parsed.forget(key);
                Ok(None)
            }
            Err(e) => Err(e.into()),
        }
    }

    /// Reads a manifest's bytes (bounded by `limit`).
    ///
    /// Kept in the document cache beside the tag indexes: a manifest GET then asks the store
    /// only whether the bytes are still there unchanged (one `stat` on the request's own worker
    /// on the filesystem store, a conditional GET on S3) instead of reading them on the
    /// blocking pool, so a GET by tag costs what a HEAD does. A manifest garbage collection
    /// deleted or a scrub withdrew is gone from its key, which the question notices.
    pub async fn manifest_bytes(&self, d: &Digest, limit: u64) -> ApiResult<Bytes> {
        let key = layout::blob_data(d);
        match self.read_cached(&key, limit, |b| Ok(b.clone())).await? {
            Some(bytes) => Ok((*bytes).clone()),
            // Not at the legacy key: at the record's epoch (not cached: a revived copy).
            None => Ok(
                crate::tombstone::get_epoch_data(self.store.as_ref(), d, limit, &key)
                    .await?
                    .bytes,
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_parsed_document_cache_stays_within_its_budget() {
        let cache = DocCache::default();
        let doc: Arc<dyn std::any::Any + Send + Sync> = Arc::new(());
        let entry = DOC_CACHE_BYTES / 8;
        let size = entry - ENTRY_OVERHEAD;
        for i in 0..20 {
            let key = Key::new(format!("repositories/r{i}/_tags")).unwrap();
            cache.insert(&key, crate::storage::Etag(i.to_string()), doc.clone(), size);
            let inner = cache.docs.lock().unwrap();
            assert!(inner.bytes <= DOC_CACHE_BYTES, "{} bytes held", inner.bytes);
        }
        // Full at the 9th, 12th, 15th and 18th: the oldest went, three at a time.
        let inner = cache.docs.lock().unwrap();
        assert_eq!(inner.entries.len(), 8);
        assert_eq!(inner.bytes, 8 * entry);
        drop(inner);
        // The least recently used went first; small documents are held, oversized ones not.
        let key = |i: usize| Key::new(format!("repositories/r{i}/_tags")).unwrap();
        assert!(cache.lookup(&key(11)).is_none() && cache.lookup(&key(12)).is_some());
        cache.insert(&key(30), crate::storage::Etag("s".into()), doc.clone(), 10);
        cache.insert(
            &key(31),
            crate::storage::Etag("l".into()),
            doc,
            DOC_CACHE_BYTES,
        );
        assert!(cache.lookup(&key(30)).is_some() && cache.lookup(&key(31)).is_none());
        // r12 was used last before r30 came: it outlived r13, which was not.
        assert!(cache.lookup(&key(12)).is_some() && cache.lookup(&key(13)).is_none());
    }

    /// A walk over many repositories (GC's mark reads every tag index) stays within the budget
    /// counted per entry, however small the documents.
    #[test]
    fn many_small_documents_stay_within_the_budget() {
        let cache = DocCache::default();
        let doc: Arc<dyn std::any::Any + Send + Sync> = Arc::new(());
        let n = 2 * DOC_CACHE_BYTES / ENTRY_OVERHEAD;
        for i in 0..n {
            let key = Key::new(format!("repositories/r{i}/_tags")).unwrap();
            cache.insert(&key, crate::storage::Etag(i.to_string()), doc.clone(), 2);
        }
        let inner = cache.docs.lock().unwrap();
        assert!(inner.bytes <= DOC_CACHE_BYTES, "{} bytes held", inner.bytes);
        assert!(inner.entries.len() <= DOC_CACHE_BYTES / ENTRY_OVERHEAD);
        let last = Key::new(format!("repositories/r{}/_tags", n - 1)).unwrap();
        assert!(inner.entries.contains_key(&last), "the newest is held");
    }
}
