//! The one wrapper every store runs behind in the server: it counts operations and failures
//! into [`Metrics`] and traces each call with its key and duration, so a store implementation
//! only implements storage. (Key checking needs no wrapper: a [`Key`] is checked when built.)

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;

use super::{
    BoxFuture, BoxReader, ByteStream, Document, ErrorKind, Etag, Key, ObjectMeta, PutMode, Store,
    StoreResult, StoreWriter,
};
use crate::metrics::Metrics;

/// A store with metrics and tracing.
#[derive(Debug)]
pub struct Instrumented {
    inner: Arc<dyn Store>,
    metrics: Arc<Metrics>,
}

impl Instrumented {
    /// Wraps `inner`, recording into `metrics`.
    pub fn new(inner: Arc<dyn Store>, metrics: Arc<Metrics>) -> Instrumented {
        Instrumented { inner, metrics }
    }

    fn record<T>(&self, op: &'static str, key: &Key, started: Instant, r: &StoreResult<T>) {
        let failed =
            matches!(r, Err(e) if matches!(e.kind(), ErrorKind::Backend | ErrorKind::InvalidKey));
        self.metrics.store_op(self.inner.name(), op, failed);
        match r {
            Err(e) if failed => {
                tracing::warn!(store = self.inner.name(), op, key = %key, elapsed = ?started.elapsed(), error = %e, "store operation failed");
            }
            _ => {
                tracing::trace!(store = self.inner.name(), op, key = %key, elapsed = ?started.elapsed(), "store operation")
            }
        }
    }
}

impl Store for Instrumented {
    fn min_chunk_length(&self) -> Option<u64> {
        self.inner.min_chunk_length()
    }

    fn staging_readable(&self) -> bool {
        self.inner.staging_readable()
    }

    fn name(&self) -> &'static str {
        self.inner.name()
    }

    fn get<'a>(&'a self, key: &'a Key, limit: u64) -> BoxFuture<'a, StoreResult<Document>> {
        Box::pin(async move {
            let t = Instant::now();
            let r = self.inner.get(key, limit).await;
            self.record("get", key, t, &r);
            r
        })
    }

    fn get_if_changed<'a>(
        &'a self,
        key: &'a Key,
        limit: u64,
        known: &'a Etag,
    ) -> BoxFuture<'a, StoreResult<Option<Document>>> {
        Box::pin(async move {
            let t = Instant::now();
            let r = self.inner.get_if_changed(key, limit, known).await;
            self.record("get", key, t, &r);
            r
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a Key,
        bytes: Bytes,
        mode: PutMode,
    ) -> BoxFuture<'a, StoreResult<Etag>> {
        Box::pin(async move {
            let t = Instant::now();
            let r = self.inner.put(key, bytes, mode).await;
            self.record("put", key, t, &r);
            r
        })
    }

    fn read<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
    ) -> BoxFuture<'a, StoreResult<(ObjectMeta, BoxReader)>> {
        Box::pin(async move {
            let t = Instant::now();
            let r = self.inner.read(key, offset).await;
            self.record("read", key, t, &r);
            r
        })
    }

    fn read_chunks<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'a, StoreResult<(ObjectMeta, ByteStream)>> {
        Box::pin(async move {
            let t = Instant::now();
            let r = self.inner.read_chunks(key, offset, len).await;
            self.record("read", key, t, &r);
            r
        })
    }

    fn writer<'a>(
        &'a self,
        staging: &'a Key,
        resume_at: Option<u64>,
    ) -> BoxFuture<'a, StoreResult<Box<dyn StoreWriter>>> {
        Box::pin(async move {
            let t = Instant::now();
            let r = self.inner.writer(staging, resume_at).await;
            self.record("writer", staging, t, &r);
            r
        })
    }

    fn stat<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, StoreResult<ObjectMeta>> {
        Box::pin(async move {
            let t = Instant::now();
            let r = self.inner.stat(key).await;
            self.record("stat", key, t, &r);
            r
        })
    }

    fn list<'a>(&'a self, prefix: &'a Key) -> BoxFuture<'a, StoreResult<Vec<Key>>> {
        Box::pin(async move {
            let t = Instant::now();
            let r = self.inner.list(prefix).await;
            self.record("list", prefix, t, &r);
            r
        })
    }

    fn list_page<'a>(
        &'a self,
        prefix: &'a Key,
        start_after: Option<&'a Key>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Key>>> {
        Box::pin(async move {
            let t = Instant::now();
            let r = self.inner.list_page(prefix, start_after, limit).await;
            self.record("list", prefix, t, &r);
            r
        })
    }

    fn delete<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            let t = Instant::now();
            let r = self.inner.delete(key).await;
            self.record("delete", key, t, &r);
            r
        })
    }
}
