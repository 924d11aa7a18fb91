//! The local content store, shared by every zone on the node.
//!
//! ```text
//! <store>/.rdctl-owner                 ownership mark (kind content-store)
//! <store>/blobs/<alg>/<hex>            verified blobs, read-only; present means verified
//! <store>/ingest/<alg>-<hex>.partial   a download in progress (never read as a blob)
//! ```
//!
//! A blob is downloaded into its `.partial` file while it is hashed; only when the stream
//! ended with size and digest matched is the file synced and published under its digest path
//! (read-only, without clobbering). So a reader of `blobs/` never sees unverified or partial
//! content. Staging, resuming, the checks and the publish are the validator's one ingest
//! ([`validator::BlobDir`]); this module adds the registry side (ranges, retries, metrics).
//!
//! **Resuming.** A worker killed or cut off mid-download leaves the `.partial` file. The next
//! fetch of that digest (after a restart, or on the next pass) re-reads the partial file once
//! to rebuild the hash state, then asks the registry for the rest with `Range:
//! bytes=<length>-`, appends, and verifies the whole blob as usual. Re-reading costs one
//! sequential local read (hashing runs near 1 GB/s) and is always right: a hash state saved
//! beside the file could disagree with the bytes that really reached the disk before a crash.
//! Bytes that are wrong for any reason (a torn write, a registry that changed the blob) fail
//! the final digest check; the partial file is then deleted and the next attempt starts over.
//! A registry that ignores the range (answers 200) restarts the file from zero. Downloads of
//! one digest are serialised, so zones sharing a layer never write the same partial file.
//!
//! **Progress.** With [`ContentStore::with_progress`], every fetch reports to a
//! [`registry_client::progress::Progress`] under the same contract as `rdctl pull`'s copies: a
//! blob already in the store is `blob_present`; a download is `blob_started` with the bytes a
//! partial file already held, then advanced by every piece received, then finished once
//! (copied when it verified and was published, failed otherwise). A fetch that is cancelled
//! (its future dropped, as on ctrl-c) drops the handle unfinished, and its partial file stays.

use std::collections::HashMap;
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::AsyncReadExt;

use registry_client::progress::{BlobOutcome, BlobProgress, Progress};
use registry_client::transfer::Content;
use registry_client::{Client, ClientError};
use validator::Name;
use validator::{BlobDir, Digest, Existing, Ingest, IngestError, VerifyError};

use crate::owner::{self, OwnerMark, OwnershipError};

/// A content-store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store directory is not ours.
    #[error("content store")]
    Ownership(#[from] OwnershipError),
    /// A local file operation failed.
    #[error("{path}: {op} failed")]
    Io {
        /// The path.
        path: PathBuf,
        /// The operation.
        op: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The registry refused or failed to serve the blob.
    #[error("fetching blob {digest}")]
    Fetch {
        /// The blob.
        digest: Digest,
        /// The cause.
        #[source]
        source: ClientError,
    },
    /// The blob's bytes did not match its descriptor.
    #[error("blob {digest} does not verify")]
    Verify {
        /// The blob.
        digest: Digest,
        /// The mismatch.
        #[source]
        source: VerifyError,
    },
    /// Reading the blob stream failed (after the client's retries).
    #[error("downloading blob {digest} failed")]
    Download {
        /// The blob.
        digest: Digest,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// A blob could not be staged or published.
    #[error("storing blob {digest}")]
    Ingest {
        /// The blob.
        digest: Digest,
        /// The cause.
        #[source]
        source: IngestError,
    },
    /// A stored document is larger than the caller allows.
    #[error("blob {digest} is {size} bytes, more than the {limit} bytes allowed for it")]
    TooLarge {
        /// The blob.
        digest: Digest,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
}

fn io_err(path: &Path, op: &'static str) -> impl FnOnce(io::Error) -> StoreError + use<> {
    let path = path.to_owned();
    move |source| StoreError::Io { path, op, source }
}

/// A size or digest mismatch as [`StoreError::Verify`], anything else as
/// [`StoreError::Ingest`].
fn ingest_err(digest: &Digest) -> impl FnOnce(IngestError) -> StoreError + use<'_> {
    move |source| match source.verify_error() {
        Some(v) => StoreError::Verify {
            digest: digest.clone(),
            source: v,
        },
        None => StoreError::Ingest {
            digest: digest.clone(),
            source,
        },
    }
}

/// A download cancelled because no bytes arrived for `waited`.
fn stalled(digest: &Digest, waited: std::time::Duration) -> StoreError {
    StoreError::Download {
        digest: digest.clone(),
        source: io::Error::new(
            io::ErrorKind::TimedOut,
            format!(
                "no bytes received for {} s (image_pull_progress_deadline_secs)",
                waited.as_secs()
            ),
        ),
    }
}

/// Runs blocking file work (the ingest) off the async threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    match tokio::task::spawn_blocking(f).await {
        Ok(v) => v,
        Err(e) => std::panic::resume_unwind(e.into_panic()),
    }
}

/// The content-addressed, verify-before-visible blob store.
#[derive(Debug, Clone)]
pub struct ContentStore {
    dir: PathBuf,
    /// `blobs/` and the `ingest/` staging area: read-only blobs, present means verified.
    blobs: BlobDir,
    /// One lock per digest being downloaded (zones of one pass share layers).
    downloads: Arc<Mutex<HashMap<Digest, Arc<tokio::sync::Mutex<()>>>>>,
    /// Where received bytes are counted.
    metrics: Option<Arc<crate::metrics::Metrics>>,
    /// A download that receives no bytes for this long is cancelled (kept for resuming).
    progress_deadline: Option<std::time::Duration>,
    /// Where byte progress of each fetch is reported (see the module docs).
    progress: Option<Reporter>,
}

/// A shared [`Progress`] reporter (`Debug` for the store's sake).
#[derive(Clone)]
struct Reporter(Arc<dyn Progress>);

impl std::fmt::Debug for Reporter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Reporter")
    }
}

/// What [`ContentStore::fetch`] did, for metrics and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Bytes received from the registry.
    pub downloaded: u64,
    /// Bytes of an earlier partial download that were kept (0 when nothing was resumed).
    pub resumed_from: u64,
}

impl ContentStore {
    /// Opens (creating and marking when new) the store at `dir` for `worker_id`, and removes
    /// ingest files left by an interrupted run. Only one worker may use a store at a time (the
    /// scheduler holds the state directory's lock).
    pub fn open(dir: &Path, worker_id: &str) -> Result<ContentStore, StoreError> {
        owner::claim(dir, &OwnerMark::new(worker_id, "content-store"))?;
        let store = ContentStore {
            dir: dir.to_owned(),
            blobs: BlobDir::new(dir, dir.join("ingest"))
                .read_only(true)
                .on_existing(Existing::Trust),
            downloads: Arc::default(),
            metrics: None,
            progress_deadline: None,
            progress: None,
        };
        for sub in ["blobs/sha256", "blobs/sha512"] {
            let p = dir.join(sub);
            std::fs::create_dir_all(&p).map_err(io_err(&p, "creating the blob directory"))?;
        }
        let ingest = store.ingest_dir();
        std::fs::create_dir_all(&ingest)
            .map_err(io_err(&ingest, "creating the ingest directory"))?;
        // Partial downloads are kept for resuming; anything else (temporary files of small
        // documents) is removed.
        let entries = std::fs::read_dir(&ingest).map_err(io_err(&ingest, "listing downloads"))?;
        for e in entries {
            let e = e.map_err(io_err(&ingest, "listing downloads"))?;
            let keep = e.file_type().is_ok_and(|t| t.is_file())
                && e.file_name()
                    .to_str()
                    .and_then(BlobDir::digest_of_partial)
                    .is_some();
            if !keep {
                let p = e.path();
                let removed = if e.file_type().is_ok_and(|t| t.is_dir()) {
                    std::fs::remove_dir_all(&p)
                } else {
                    std::fs::remove_file(&p)
                };
                removed.map_err(io_err(&p, "clearing a stale download"))?;
            }
        }
        Ok(store)
    }

    /// Cancels a download that receives no bytes for `deadline` (kubelet's
    /// `--image-pull-progress-deadline`); what arrived is kept for the next attempt.
    pub fn with_progress_deadline(mut self, deadline: std::time::Duration) -> Self {
        self.progress_deadline = Some(deadline);
        self
    }

    /// Reports each fetch's byte progress to `progress` (see the module docs): `rdctl worker
    /// run` draws bars on a terminal and logs otherwise.
    pub fn with_progress(mut self, progress: Arc<dyn Progress>) -> Self {
        self.progress = Some(Reporter(progress));
        self
    }

    /// Counts the bytes downloads receive and resume in `metrics`.
    pub fn with_metrics(mut self, metrics: Arc<crate::metrics::Metrics>) -> Self {
        self.metrics = Some(metrics);
        self
    }

    /// The store's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn ingest_dir(&self) -> PathBuf {
        self.blobs.staging().to_owned()
    }

    /// Where a verified blob lives. Safe to build from a [`Digest`]: its algorithm and hex
    /// were validated when it was parsed (CVE-2024-3727 built paths from unvalidated ones).
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        self.blobs.blob_path(d)
    }

    /// True when the blob is present with `size` bytes.
    pub fn contains(&self, d: &Digest, size: u64) -> bool {
        std::fs::symlink_metadata(self.blob_path(d)).is_ok_and(|m| m.is_file() && m.len() == size)
    }

    /// Where a download of `d` in progress lives.
    pub fn partial_path(&self, d: &Digest) -> PathBuf {
        self.blobs.partial_path(d)
    }

    fn download_lock(&self, d: &Digest) -> Arc<tokio::sync::Mutex<()>> {
        let mut map = self.downloads.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, l| Arc::strong_count(l) > 1);
        map.entry(d.clone()).or_default().clone()
    }

    /// Fetches a blob from `registry`/`name` unless present: resumes a partial download (see
    /// the module docs), hashes while writing, and publishes the file only after size and
    /// digest matched. A transport failure keeps the partial file for the next attempt;
    /// content that does not verify is deleted.
    pub async fn fetch(
        &self,
        client: &Client,
        registry: &str,
        name: &Name,
        digest: &Digest,
        size: u64,
        progress: Option<&crate::throttle::PullProgress>,
    ) -> Result<(PathBuf, FetchStats), StoreError> {
        self.fetch_fed(client, registry, name, digest, size, progress, None)
            .await
    }

    /// [`ContentStore::fetch`], telling `feed` where the bytes land as they are written and
    /// when the blob is published, so that it can be unpacked while it downloads.
    #[allow(clippy::too_many_arguments)]
    pub(crate) async fn fetch_fed(
        &self,
        client: &Client,
        registry: &str,
        name: &Name,
        digest: &Digest,
        size: u64,
        progress: Option<&crate::throttle::PullProgress>,
        feed: Option<&crate::feed::LayerFeed>,
    ) -> Result<(PathBuf, FetchStats), StoreError> {
        let published = || {
            if let Some(f) = feed {
                f.published();
            }
        };
        let target = self.blob_path(digest);
        let add = |n: u64| {
            if let Some(p) = progress {
                p.add(n);
            }
        };
        let content = Content {
            digest: digest.clone(),
            size,
            // The store knows blobs by digest and size only.
            media_type: "application/octet-stream".to_owned(),
        };
        let present = || {
            add(size);
            published();
            if let Some(r) = &self.progress {
                r.0.blob_present(&content);
            }
            Ok((target.clone(), FetchStats::default()))
        };
        if self.contains(digest, size) {
            return present();
        }
        let lock = self.download_lock(digest);
        let _one_download = lock.lock().await;
        if self.contains(digest, size) {
            return present();
        }
        let (blobs, d) = (self.blobs.clone(), digest.clone());
        let want_reader = feed.is_some();
        let (mut ingest, feed_file) = blocking(move || {
            let ingest = blobs.ingest(&d, size)?;
            // A second descriptor of the file being written, for the unpacker.
            let feed_file = want_reader
                .then(|| std::fs::File::open(ingest.path()))
                .transpose()
                .map_err(|source| IngestError::Io {
                    op: "open for reading",
                    path: ingest.path().to_owned(),
                    source,
                })?;
            Ok::<_, IngestError>((ingest, feed_file))
        })
        .await
        .map_err(ingest_err(digest))?;
        let mut have = ingest.offset();
        let fetch_err = |source| StoreError::Fetch {
            digest: digest.clone(),
            source,
        };
        let (start, reader) = if have == size {
            // Everything arrived before the interruption; only the check is left.
            (
                have,
                Box::pin(tokio::io::empty()) as std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
            )
        } else {
            let get = client.get_blob_from(registry, name, digest, have);
            let got = match self.progress_deadline {
                Some(d) => match tokio::time::timeout(d, get).await {
                    Ok(r) => r,
                    Err(_) => {
                        if have == 0 {
                            ingest.discard();
                        }
                        return Err(stalled(digest, d));
                    }
                },
                None => get.await,
            };
            match got {
                Ok(r) => r,
                Err(e) => {
                    if have == 0 {
                        ingest.discard();
                    }
                    return Err(fetch_err(e));
                }
            }
        };
        if start != have {
            // The registry sent the whole blob: start the file over.
            ingest.truncate().map_err(ingest_err(digest))?;
            have = 0;
        }
        let resumed_from = have;
        if let (Some(f), Some(r)) = (feed, feed_file) {
            f.begin(r, have);
        }
        add(have);
        let reported: Box<dyn BlobProgress> = match &self.progress {
            Some(r) => r.0.blob_started(&content, have),
            None => Box::new(registry_client::progress::NoProgress),
        };
        if have > 0 {
            tracing::info!(%digest, from = have, of = size, "resuming a partial download");
            if let Some(m) = &self.metrics {
                m.bytes(0, have);
            }
        }
        let received = self
            .receive(ingest, reader, digest, size, feed, &|n| {
                add(n);
                reported.advance(n);
            })
            .await;
        reported.finish(if received.is_ok() {
            BlobOutcome::Copied
        } else {
            BlobOutcome::Failed
        });
        let written = received?;
        published();
        Ok((
            target,
            FetchStats {
                downloaded: written - resumed_from,
                resumed_from,
            },
        ))
    }

    /// Reads `reader` to its end into `ingest`, gathering received bytes into 1 MiB chunks,
    /// each written (and hashed) by the ingest on a blocking thread, telling `on_bytes` of every
    /// piece read; then verifies and publishes the blob. The bytes in the file at the end
    /// (`Ok`); on a failure, what arrived stays for the next attempt unless it can never verify.
    async fn receive(
        &self,
        mut ingest: Ingest,
        mut reader: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
        digest: &Digest,
        size: u64,
        feed: Option<&crate::feed::LayerFeed>,
        on_bytes: &(dyn Fn(u64) + Sync),
    ) -> Result<u64, StoreError> {
        let mut buf = vec![0u8; 1 << 20];
        let mut ended = false;
        while !ended {
            let mut filled = 0;
            while filled < buf.len() {
                let read = reader.read(&mut buf[filled..]);
                let read = match self.progress_deadline {
                    Some(d) => match tokio::time::timeout(d, read).await {
                        Ok(r) => r,
                        Err(_) => {
                            tracing::warn!(%digest, size, "download stalled; cancelled");
                            let _ = write_chunk(ingest, buf, filled).await;
                            return Err(stalled(digest, d));
                        }
                    },
                    None => read.await,
                };
                let n = match read {
                    Ok(n) => n,
                    Err(e) => {
                        // Keep what arrived for the next attempt.
                        let _ = write_chunk(ingest, buf, filled).await;
                        return Err(StoreError::Download {
                            digest: digest.clone(),
                            source: e,
                        });
                    }
                };
                if n == 0 {
                    ended = true;
                    break;
                }
                if let Some(m) = &self.metrics {
                    m.bytes(n as u64, 0);
                }
                on_bytes(n as u64);
                filled += n;
            }
            (ingest, buf) = match write_chunk(ingest, buf, filled).await {
                Ok(v) => {
                    if let Some(f) = feed {
                        f.written(v.0.offset());
                    }
                    v
                }
                Err(failed) => {
                    let (ingest, e) = *failed;
                    return Err(match VerifyError::from_io(&e) {
                        // More bytes than the descriptor's size: they can never verify.
                        Some(v) => {
                            let source = v.clone();
                            ingest.discard();
                            StoreError::Verify {
                                digest: digest.clone(),
                                source,
                            }
                        }
                        None => io_err(ingest.path(), "writing the download")(e),
                    });
                }
            };
        }
        let written = ingest.offset();
        let d = digest.clone();
        blocking(move || ingest.commit(size, &d))
            .await
            .map_err(ingest_err(digest))?;
        Ok(written)
    }

    /// Stores small verified bytes (a manifest fetched and checked by the client) under their
    /// digest.
    pub fn put_bytes(&self, digest: &Digest, bytes: &[u8]) -> Result<PathBuf, StoreError> {
        let found = Digest::of(digest.algorithm(), bytes);
        if &found != digest {
            return Err(StoreError::Verify {
                digest: digest.clone(),
                source: VerifyError::DigestMismatch {
                    expected: digest.clone(),
                    found,
                },
            });
        }
        let target = self.blob_path(digest);
        if self.contains(digest, bytes.len() as u64) {
            return Ok(target);
        }
        let size = bytes.len() as u64;
        let mut ingest = self
            .blobs
            .ingest(digest, size)
            .map_err(ingest_err(digest))?;
        if ingest.offset() > 0 {
            ingest.truncate().map_err(ingest_err(digest))?;
        }
        if let Err(e) = ingest.write_all(bytes) {
            return Err(io_err(ingest.path(), "writing")(e));
        }
        ingest.commit(size, digest).map_err(ingest_err(digest))?;
        Ok(target)
    }

    /// Reads a stored blob of at most `limit` bytes (configs, manifests).
    pub fn read_small(&self, digest: &Digest, limit: u64) -> Result<Vec<u8>, StoreError> {
        let path = self.blob_path(digest);
        let file = std::fs::File::open(&path).map_err(io_err(&path, "opening the blob"))?;
        let mut out = Vec::new();
        file.take(limit + 1)
            .read_to_end(&mut out)
            .map_err(io_err(&path, "reading the blob"))?;
        if out.len() as u64 > limit {
            return Err(StoreError::TooLarge {
                digest: digest.clone(),
                size: out.len() as u64,
                limit,
            });
        }
        Ok(out)
    }

    /// Removes blobs not in `keep` and older than `min_age`, oldest first, until `to_free`
    /// bytes are gone or none is left; returns how many and how many bytes.
    pub fn remove_oldest_unused(
        &self,
        keep: &std::collections::HashSet<Digest>,
        min_age: std::time::Duration,
        to_free: u64,
    ) -> Result<(usize, u64), StoreError> {
        let now = std::time::SystemTime::now();
        let mut candidates = Vec::new();
        for alg in ["sha256", "sha512"] {
            let dir = self.dir.join("blobs").join(alg);
            let entries = std::fs::read_dir(&dir).map_err(io_err(&dir, "listing blobs"))?;
            for e in entries {
                let e = e.map_err(io_err(&dir, "listing blobs"))?;
                let Some(name) = e.file_name().to_str().map(str::to_owned) else {
                    continue;
                };
                let Ok(d) = Digest::parse(&format!("{alg}:{name}")) else {
                    continue;
                };
                if keep.contains(&d) {
                    continue;
                }
                let Ok(m) = std::fs::symlink_metadata(e.path()) else {
                    continue;
                };
                let modified = m.modified().unwrap_or(now);
                if now.duration_since(modified).unwrap_or_default() < min_age {
                    continue;
                }
                candidates.push((modified, e.path(), m.len()));
            }
        }
        candidates.sort();
        let (mut n, mut freed) = (0, 0u64);
        for (_, p, len) in candidates {
            if freed >= to_free {
                break;
            }
            std::fs::remove_file(&p).map_err(io_err(&p, "removing an unused blob"))?;
            n += 1;
            freed = freed.saturating_add(len);
        }
        Ok((n, freed))
    }

    /// Removes the blobs (and partial downloads) not in `keep` that were last written more
    /// than `grace` ago; returns how many blobs were removed. Only called between passes, when
    /// no download is in flight.
    pub fn retain(
        &self,
        keep: &std::collections::HashSet<Digest>,
        grace: std::time::Duration,
    ) -> Result<usize, StoreError> {
        let mut removed = 0;
        let now = std::time::SystemTime::now();
        for alg in ["sha256", "sha512"] {
            let dir = self.dir.join("blobs").join(alg);
            let entries = std::fs::read_dir(&dir).map_err(io_err(&dir, "listing blobs"))?;
            for e in entries {
                let e = e.map_err(io_err(&dir, "listing blobs"))?;
                let name = e.file_name();
                let Some(name) = name.to_str() else { continue };
                let Ok(d) = Digest::parse(&format!("{alg}:{name}")) else {
                    continue;
                };
                if keep.contains(&d) {
                    continue;
                }
                let p = e.path();
                let age = std::fs::symlink_metadata(&p)
                    .and_then(|m| m.modified())
                    .ok()
                    .and_then(|t| now.duration_since(t).ok())
                    .unwrap_or_default();
                if age >= grace {
                    std::fs::remove_file(&p).map_err(io_err(&p, "removing an unused blob"))?;
                    removed += 1;
                }
            }
        }
        let ingest = self.ingest_dir();
        for e in std::fs::read_dir(&ingest).map_err(io_err(&ingest, "listing downloads"))? {
            let e = e.map_err(io_err(&ingest, "listing downloads"))?;
            let Some(d) = e.file_name().to_str().and_then(BlobDir::digest_of_partial) else {
                continue;
            };
            let age = e
                .metadata()
                .and_then(|m| m.modified())
                .ok()
                .and_then(|t| now.duration_since(t).ok())
                .unwrap_or_default();
            if !keep.contains(&d) && age >= grace {
                let p = e.path();
                std::fs::remove_file(&p).map_err(io_err(&p, "removing a stale download"))?;
            }
        }
        Ok(removed)
    }
}

/// Writes one chunk through the ingest on a blocking thread; the ingest comes back either way
/// (on an error, to be kept for resuming or discarded).
async fn write_chunk(
    mut ingest: Ingest,
    buf: Vec<u8>,
    len: usize,
) -> Result<(Ingest, Vec<u8>), Box<(Ingest, io::Error)>> {
    blocking(move || match ingest.write_all(&buf[..len]) {
        Ok(()) => Ok((ingest, buf)),
        Err(e) => Err(Box::new((ingest, e))),
    })
    .await
}

#[cfg(test)]
mod tests {
    use super::*;
    use registry::storage::FsStore;
    use registry::{AppState, RegistryConfig, router};

    /// Every progress call, as text: `present`, `started R`, `+N`, `Copied`/`Failed`.
    #[derive(Clone, Default)]
    struct Calls(Arc<Mutex<Vec<String>>>);

    impl Calls {
        fn push(&self, s: String) {
            self.0.lock().unwrap().push(s);
        }
        fn take(&self) -> Vec<String> {
            std::mem::take(&mut *self.0.lock().unwrap())
        }
    }

    impl BlobProgress for Calls {
        fn advance(&self, bytes: u64) {
            self.push(format!("+{bytes}"));
        }
        fn finish(&self, outcome: BlobOutcome) {
            self.push(format!("{outcome:?}"));
        }
    }

    impl Progress for Calls {
        fn blob_started(&self, blob: &Content, resumed: u64) -> Box<dyn BlobProgress> {
            self.push(format!("started {} {resumed}", blob.size));
            Box::new(self.clone())
        }
        fn blob_present(&self, blob: &Content) {
            self.push(format!("present {}", blob.size));
        }
    }

    /// The calls with the `+N` between the first and the last summed into one `+SUM`.
    fn summed(calls: Vec<String>) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        let mut sum = None;
        for c in calls {
            match c.strip_prefix('+').and_then(|n| n.parse::<u64>().ok()) {
                Some(n) => *sum.get_or_insert(0) += n,
                None => {
                    if let Some(s) = sum.take() {
                        out.push(format!("+{s}"));
                    }
                    out.push(c);
                }
            }
        }
        out
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn fetch_reports_downloads_present_blobs_and_failed_checks() {
        let t = tempfile::tempdir().unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let host = listener.local_addr().unwrap().to_string();
        let app = router(AppState::new(
            Arc::new(FsStore::open(t.path().join("registry")).unwrap()),
            RegistryConfig::default(),
        ));
        let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = Client::builder().build().unwrap();
        let name = Name::parse("unit/progress").unwrap();
        let blob: Vec<u8> = (0..3u32 << 20).map(|i| (i % 251) as u8).collect();
        let size = blob.len() as u64;
        let digest = Digest::sha256(&blob);
        client
            .push_blob(&host, &name, &digest, size, blob.as_slice())
            .await
            .unwrap();
        let calls = Calls::default();
        let store = ContentStore::open(&t.path().join("content"), "unit")
            .unwrap()
            .with_progress(Arc::new(calls.clone()));

        // Downloaded: started, every byte, copied.
        store
            .fetch(&client, &host, &name, &digest, size, None)
            .await
            .unwrap();
        assert_eq!(
            summed(calls.take()),
            [
                format!("started {size} 0"),
                format!("+{size}"),
                "Copied".into()
            ]
        );
        // In the store: present, nothing moves.
        store
            .fetch(&client, &host, &name, &digest, size, None)
            .await
            .unwrap();
        assert_eq!(calls.take(), [format!("present {size}")]);

        // A descriptor one byte short: the bytes can never verify; the download finishes
        // failed (and its file is gone).
        let other = ContentStore::open(&t.path().join("other"), "unit")
            .unwrap()
            .with_progress(Arc::new(calls.clone()));
        let e = other
            .fetch(&client, &host, &name, &digest, size - 1, None)
            .await
            .unwrap_err();
        assert!(matches!(e, StoreError::Verify { .. }), "{e:?}");
        let seen = summed(calls.take());
        assert_eq!(seen.first(), Some(&format!("started {} 0", size - 1)));
        assert_eq!(seen.last().map(String::as_str), Some("Failed"), "{seen:?}");
        assert!(!other.partial_path(&digest).exists());
        server.abort();
    }
}
