//! The garbage collector's write barrier on [`Repos`]: a request holds a digest before it
//! relies on its content, and waits for (or releases) a collector's tombstone on it
//! ([`crate::tombstone`]). The race analysis is in `docs/gc.md`, "Why an acknowledged push
//! loses nothing".

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use validator::Digest;

use super::{LINK_LIMIT, Repos};
use crate::errors::{ApiError, ApiResult, Code};
use crate::storage::{Key, PutMode, StoreError, layout};
use crate::tombstone::{Epochs, Tombstone, Verdict};

/// How long a request waits for a collector to finish with a digest it holds a tombstone on.
const TOMBSTONE_WAIT: Duration = Duration::from_secs(30);
/// A waiting request looks at the tombstone again after this, doubling each time up to
/// [`TOMBSTONE_POLL_MAX`] (a collector deletes a digest's candidates in a few store requests;
/// one that died expires after the lease's time to live).
const TOMBSTONE_POLL_MIN: Duration = Duration::from_millis(10);
/// The longest pause between two looks at a tombstone.
const TOMBSTONE_POLL_MAX: Duration = Duration::from_millis(500);

/// What a request learnt by holding a digest ([`Repos::hold`]): the epochs at which it writes
/// and checks the digest's keys, and whether the bytes exist at the current one.
#[derive(Debug, Clone, Default)]
pub struct Held {
    pub(crate) epochs: Epochs,
    /// The bytes exist at the current epoch.
    pub data: bool,
}

impl Repos {
    /// Protects digest `d` from a concurrent collector before a request relies on its content
    /// or writes it, and says where: rewrites the hold record of the bytes' current epoch,
    /// then reads the digest's record (releasing a collector's tombstone still deciding, or
    /// waiting for an older collector's), then looks whether the bytes exist at that epoch.
    /// No collector can delete a key of the returned epochs on the strength of a decision made
    /// before this call (a collector that commits later moves what it deletes to new epochs).
    /// The write-then-read order against the collector's tombstone-then-read order is what makes
    /// this safe without locks (see `crate::gc`).
    pub async fn hold(&self, d: &Digest) -> ApiResult<Held> {
        let epochs = self.hold_epochs(d).await?;
        let data = match self.store.stat(&epochs.data_key(d)).await {
            Ok(_) => true,
            Err(e) if e.is_not_found() => false,
            Err(e) => return Err(e.into()),
        };
        Ok(Held { epochs, data })
    }

    /// Makes sure the bytes of `d` exist at the epoch a hold gave, copying them there from a
    /// copy of an earlier epoch when that is all there is (verified on the way). A collector
    /// that committed to deleting the earlier copy moved the digest to a new epoch, but until
    /// its DELETE arrives the earlier copy still answers a client's HEAD, so the client skips
    /// the upload and relies on it: the copy here lets that push go on instead of failing until
    /// the DELETE lands (however long a stopped collector takes). True when the bytes are
    /// there; false when no copy is left (the client uploads them).
    pub(crate) async fn revive(&self, d: &Digest, epochs: &Epochs) -> ApiResult<bool> {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let dest = epochs.data_key(d);
        let Some((from, _)) = crate::tombstone::find_data(self.store.as_ref(), d).await? else {
            return Ok(false);
        };
        if from == dest {
            return Ok(true);
        }
        let (_, mut reader) = match self.store.read(&from, 0).await {
            Ok(r) => r,
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e.into()),
        };
        let staging = layout::upload_data(&uuid::Uuid::new_v4());
        let mut w = self.store.writer(&staging, None).await?;
        let mut digester = d.algorithm().digester();
        let mut buf = vec![0u8; 256 << 10];
        loop {
            let n = match reader.read(&mut buf).await {
                Ok(0) => break,
                Ok(n) => n,
                Err(e) => {
                    // The earlier copy went while it was read (its DELETE arrived).
                    let _ = w.cancel().await;
                    tracing::info!(digest = %d, error = %e, "an earlier copy of a blob went while it was copied to the current epoch");
                    return Ok(false);
                }
            };
            digester.update(&buf[..n]);
            if let Err(e) = w.write_all(&buf[..n]).await {
                let _ = w.cancel().await;
                return Err(ApiError::internal(format!("copying {d} to {dest}: {e}")));
            }
        }
        if digester.finish() != *d {
            let _ = w.cancel().await;
            return Ok(false);
        }
        match w.commit(dest).await {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// [`Repos::hold`] without the look at the bytes (an upload that is about to write them).
    pub(crate) async fn hold_epochs(&self, d: &Digest) -> ApiResult<Epochs> {
        // The legacy epoch first: a digest no collector ever committed on has no other, and
        // this then costs what a hold always cost (one write, one read).
        let mut epoch = String::new();
        loop {
            let at = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map(|t| t.as_nanos())
                .unwrap_or(0);
            // The stamp changes the bytes, so the version (an S3 ETag) changes with every hold.
            let stamp = format!("{{\"at\":{at}}}");
            self.store
                .put(
                    &layout::blob_used_at(d, &epoch),
                    Bytes::from(stamp),
                    PutMode::Stamp,
                )
                .await?;
            // Released a collector's tombstone: hold again, so a collector that tombstones the
            // digest from now on sees this request. Held at an epoch that is no longer the
            // bytes' current one: hold at the current one, which is the one a collector reads.
            match self.wait_for_collector(d).await? {
                Some(epochs) if epochs.data() == epoch => return Ok(epochs),
                Some(epochs) => epoch = epochs.data().to_owned(),
                None => {}
            }
        }
    }

    /// Waits until no collector is deleting under a tombstone on `d` at a key a request
    /// writes. `Some(epochs)`: the digest's current epochs (no record, an idle or released one,
    /// or a collector that committed under epochs: it deletes only keys of earlier ones).
    /// `None`: this call released a tombstone (a conditional replace on the version read): a
    /// collector still deciding, which then deletes nothing of `d`; or one that committed to
    /// deleting manifest links (legacy keys) and expired (it died). What was deleted is gone,
    /// the rest stays.
    async fn wait_for_collector(&self, d: &Digest) -> ApiResult<Option<Epochs>> {
        let key = layout::blob_tombstone(d);
        let mut patience = Patience::new();
        loop {
            let doc = match self.store.get(&key, LINK_LIMIT).await {
                Err(e) if e.is_not_found() => return Ok(Some(Epochs::default())),
                Err(e) => return Err(e.into()),
                Ok(doc) => doc,
            };
            let tombstone = Tombstone::parse(&doc.bytes);
            let verdict = tombstone
                .verdict(self.store.as_ref(), &key)
                .await
                .map_err(|e| {
                    ApiError::internal(format!("judging the collector's tombstone {key}: {e}"))
                })?;
            match verdict {
                Verdict::Proceed => return Ok(Some(tombstone.epochs)),
                Verdict::Release => {
                    match self
                        .store
                        .put(
                            &key,
                            Tombstone::released_body(&tombstone.epochs),
                            PutMode::Replace(doc.etag),
                        )
                        .await
                    {
                        Ok(_) => {
                            tracing::info!(key = %key, "released a garbage collection's tombstone");
                            return Ok(None);
                        }
                        // Rewritten or removed meanwhile: look again.
                        Err(StoreError::PreconditionFailed { .. }) => continue,
                        Err(e) if e.is_not_found() => continue,
                        Err(e) => return Err(e.into()),
                    }
                }
                Verdict::Wait => {}
            }
            patience.wait(d, &key).await?;
        }
    }
}

/// How long a request has waited for a collector deleting under a tombstone, and how long it
/// pauses before its next look.
pub(super) struct Patience {
    started: Instant,
    pause: Duration,
}

impl Patience {
    pub(super) fn new() -> Patience {
        Patience {
            started: Instant::now(),
            pause: TOMBSTONE_POLL_MIN,
        }
    }

    /// Pauses before the next look at the tombstone `key` on `d`, doubling the pause each
    /// time; `429 TOOMANYREQUESTS` once the request has waited [`TOMBSTONE_WAIT`].
    pub(super) async fn wait(&mut self, d: &Digest, key: &Key) -> ApiResult<()> {
        if self.started.elapsed() > TOMBSTONE_WAIT {
            // A collector is still deleting manifest links (or, an older one, deciding);
            // the client retries later.
            return Err(ApiError::new(
                Code::TooManyRequests,
                format!("{d} is held by a garbage collection ({key}); retry later"),
            ));
        }
        let left = TOMBSTONE_WAIT.saturating_sub(self.started.elapsed());
        tokio::time::sleep(self.pause.min(left).max(TOMBSTONE_POLL_MIN)).await;
        self.pause = (self.pause * 2).min(TOMBSTONE_POLL_MAX);
        Ok(())
    }
}
