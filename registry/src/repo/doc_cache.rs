//! The parsed-document cache of [`super::Repos`]: large index documents kept parsed at the
//! version they were read at, so paging a large tag index or catalog does not parse it whole
//! for every page.

use std::sync::Arc;

use crate::storage::Key;

/// Large index documents (a repository's tag index, the catalog) as parsed at a known version.
///
/// A page of a tag list needs a few entries of an index of any size; parsing the whole index
/// for each page made paging a 10,000-tag repository quadratic (docs/benchmarks.md, "Growth").
/// Every read still asks the store whether the document changed ([`Store::get_if_changed`]),
/// so a replica sees other replicas' writes as soon as it would without the cache; what is
/// saved is the parse, and on S3 the body. Bounded by the stored size of what it holds.
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
/// Documents smaller than this are parsed on every read: cheap, and not worth the memory.
const DOC_CACHE_MIN: usize = 16 << 10;

impl DocCache {
    pub(super) fn lookup(
        &self,
        key: &Key,
    ) -> Option<(crate::storage::Etag, Arc<dyn std::any::Any + Send + Sync>)> {
        let mut inner = self.docs.lock().unwrap_or_else(|e| e.into_inner());
        inner.clock += 1;
        let now = inner.clock;
        let e = inner.entries.get_mut(key)?;
        e.used = now;
        Some((e.etag.clone(), e.doc.clone()))
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
        if !(DOC_CACHE_MIN..=DOC_CACHE_BYTES / 2).contains(&size) {
            return;
        }
        while inner.bytes + size > DOC_CACHE_BYTES {
            let Some(oldest) = inner
                .entries
                .iter()
                .min_by_key(|(_, e)| e.used)
                .map(|(k, _)| k.clone())
            else {
                break;
            };
            if let Some(e) = inner.entries.remove(&oldest) {
                inner.bytes -= e.size;
            }
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

    pub(super) fn forget(&self, key: &Key) {
        let mut inner = self.docs.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(old) = inner.entries.remove(key) {
            inner.bytes -= old.size;
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
        let size = DOC_CACHE_BYTES / 8;
        for i in 0..20 {
            let key = Key::new(format!("repositories/r{i}/_tags")).unwrap();
            cache.insert(&key, crate::storage::Etag(i.to_string()), doc.clone(), size);
            let inner = cache.docs.lock().unwrap();
            assert!(inner.bytes <= DOC_CACHE_BYTES, "{} bytes held", inner.bytes);
        }
        let inner = cache.docs.lock().unwrap();
        assert_eq!(inner.entries.len(), 8);
        assert_eq!(inner.bytes, 8 * size);
        drop(inner);
        // The least recently used went first; small and oversized documents are not held.
        let key = |i: usize| Key::new(format!("repositories/r{i}/_tags")).unwrap();
        assert!(cache.lookup(&key(11)).is_none() && cache.lookup(&key(12)).is_some());
        cache.insert(&key(30), crate::storage::Etag("s".into()), doc.clone(), 10);
        cache.insert(
            &key(31),
            crate::storage::Etag("l".into()),
            doc,
            DOC_CACHE_BYTES,
        );
        assert!(cache.lookup(&key(30)).is_none() && cache.lookup(&key(31)).is_none());
    }
}
