//! The garbage collector's write barrier on [`Repos`]: a request holds a digest before it
//! relies on its content, and waits for (or releases) a collector's tombstone on it
//! ([`crate::tombstone`]). The race analysis is in `docs/gc.md`, "Why an acknowledged push
//! loses nothing".

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use validator::Digest;

use super::{LINK_LIMIT, Repos};
use crate::errors::{ApiError, ApiResult, Code};
use crate::storage::{PutMode, StoreError, layout};
use crate::tombstone::{Tombstone, Verdict};

/// How long a request waits for a collector to finish with a digest it holds a tombstone on.
const TOMBSTONE_WAIT: Duration = Duration::from_secs(30);
/// A waiting request looks at the tombstone again after this, doubling each time up to
/// [`TOMBSTONE_POLL_MAX`] (a collector deletes a digest's candidates in a few store requests;
/// one that died expires after the lease's time to live).
const TOMBSTONE_POLL_MIN: Duration = Duration::from_millis(10);
/// The longest pause between two looks at a tombstone.
const TOMBSTONE_POLL_MAX: Duration = Duration::from_millis(500);

impl Repos {
    /// Protects digest `d` from a concurrent collector before a request relies on its content:
    /// rewrites the digest's hold record, then waits while a collector holds a tombstone on it,
    /// then looks whether the bytes still exist. True: they exist, and no collector can delete
    /// them (or the repository links to them) on the strength of a decision made before this
    /// call. The write-then-read order against the collector's tombstone-then-read order is what
    /// makes this safe without locks (see `crate::gc`).
    pub async fn hold(&self, d: &Digest) -> ApiResult<bool> {
        loop {
            let at = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|t| t.as_nanos())
                .unwrap_or(0);
            // The stamp changes the bytes, so the version (an S3 ETag) changes with every hold.
            let stamp = format!("{{\"at\":{at}}}");
            self.store
                .put(
                    &layout::blob_used(d),
                    Bytes::from(stamp),
                    PutMode::Overwrite,
                )
                .await?;
            // Released a collector's tombstone: hold again, so a collector that tombstones the
            // digest from now on sees this request.
            if self.wait_for_collector(d).await? {
                break;
            }
        }
        Ok(self.blob_stat(d).await?.is_some())
    }

    /// Waits until no collector is deleting under a tombstone on `d`. True: there is no
    /// tombstone (or a released one). False: this call released one (a conditional replace on
    /// the version read): a collector still deciding, which then deletes nothing of `d`; or
    /// one that committed to deleting and expired (it died). What was deleted is gone, the rest
    /// stays.
    async fn wait_for_collector(&self, d: &Digest) -> ApiResult<bool> {
        let key = layout::blob_tombstone(d);
        let started = Instant::now();
        let mut pause = TOMBSTONE_POLL_MIN;
        loop {
            let doc = match self.store.get(&key, LINK_LIMIT).await {
                Err(e) if e.is_not_found() => return Ok(true),
                Err(e) => return Err(e.into()),
                Ok(doc) => doc,
            };
            let tombstone = Tombstone::parse(&doc.bytes);
            if tombstone.released() {
                return Ok(true);
            }
            let verdict = tombstone
                .verdict(self.store.as_ref(), &key)
                .await
                .map_err(|e| {
                    ApiError::internal(format!("judging the collector's tombstone {key}: {e}"))
                })?;
            if verdict == Verdict::Release {
                match self
                    .store
                    .put(&key, Tombstone::released_body(), PutMode::Replace(doc.etag))
                    .await
                {
                    Ok(_) => {
                        tracing::info!(key = %key, "released a garbage collection's tombstone");
                        return Ok(false);
                    }
                    // Rewritten or removed meanwhile: look again.
                    Err(StoreError::PreconditionFailed { .. }) => continue,
                    Err(e) if e.is_not_found() => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            if started.elapsed() > TOMBSTONE_WAIT {
                // A collector is still deleting (or, an older one, deciding); the client
                // retries later.
                return Err(ApiError::new(
                    Code::TooManyRequests,
                    format!("{d} is held by a garbage collection ({key}); retry later"),
                ));
            }
            let left = TOMBSTONE_WAIT.saturating_sub(started.elapsed());
            tokio::time::sleep(pause.min(left).max(TOMBSTONE_POLL_MIN)).await;
            pause = (pause * 2).min(TOMBSTONE_POLL_MAX);
        }
    }
}
