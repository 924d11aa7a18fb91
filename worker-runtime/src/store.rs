//! The local content store, shared by every zone on the node.
//!
//! ```text
//! <store>/.rdctl-owner                 ownership mark (kind content-store)
//! <store>/blobs/<alg>/<hex>            verified blobs, read-only; present means verified
//! <store>/ingest/<alg>-<hex>.partial   a download in progress (never read as a blob)
//! ```
//!
//! A blob is downloaded into its `.partial` file while it is hashed; only when the stream
//! ended with size and digest matched is the file synced and renamed to its digest path. So a
//! reader of `blobs/` never sees unverified or partial content.
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

use std::collections::HashMap;
use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use registry_client::{Client, ClientError};
use validator::Name;
use validator::{Digest, VerifyError};

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

/// The content-addressed, verify-before-visible blob store.
#[derive(Debug, Clone)]
pub struct ContentStore {
    dir: PathBuf,
    /// One lock per digest being downloaded (zones of one pass share layers).
    downloads: Arc<Mutex<HashMap<Digest, Arc<tokio::sync::Mutex<()>>>>>,
    /// Where received bytes are counted.
    metrics: Option<Arc<crate::metrics::Metrics>>,
}

/// What [`ContentStore::fetch`] did, for metrics and logs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct FetchStats {
    /// Bytes received from the registry.
    pub downloaded: u64,
    /// Bytes of an earlier partial download that were kept (0 when nothing was resumed).
    pub resumed_from: u64,
}

/// The `.partial` name of a digest (`sha256-<hex>.partial`), and back.
fn partial_name(d: &Digest) -> String {
    format!("{}-{}.partial", d.algorithm().as_str(), d.encoded())
}

fn digest_of_partial(name: &str) -> Option<Digest> {
    let (alg, hex) = name.strip_suffix(".partial")?.split_once('-')?;
    Digest::parse(&format!("{alg}:{hex}")).ok()
}

impl ContentStore {
    /// Opens (creating and marking when new) the store at `dir` for `worker_id`, and removes
    /// ingest files left by an interrupted run. Only one worker may use a store at a time (the
    /// scheduler holds the state directory's lock).
    pub fn open(dir: &Path, worker_id: &str) -> Result<ContentStore, StoreError> {
        owner::claim(dir, &OwnerMark::new(worker_id, "content-store"))?;
        let store = ContentStore {
            dir: dir.to_owned(),
            downloads: Arc::default(),
            metrics: None,
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
                && e.file_name().to_str().and_then(digest_of_partial).is_some();
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
        self.dir.join("ingest")
    }

    /// Where a verified blob lives. Safe to build from a [`Digest`]: its algorithm and hex
    /// were validated when it was parsed (CVE-2024-3727 built paths from unvalidated ones).
    pub fn blob_path(&self, d: &Digest) -> PathBuf {
        self.dir
            .join("blobs")
            .join(d.algorithm().as_str())
            .join(d.encoded())
    }

    /// True when the blob is present with `size` bytes.
    pub fn contains(&self, d: &Digest, size: u64) -> bool {
        std::fs::symlink_metadata(self.blob_path(d)).is_ok_and(|m| m.is_file() && m.len() == size)
    }

    /// Where a download of `d` in progress lives.
    pub fn partial_path(&self, d: &Digest) -> PathBuf {
        self.ingest_dir().join(partial_name(d))
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
    ) -> Result<(PathBuf, FetchStats), StoreError> {
        let target = self.blob_path(digest);
        if self.contains(digest, size) {
            return Ok((target, FetchStats::default()));
        }
        let lock = self.download_lock(digest);
        let _one_download = lock.lock().await;
        if self.contains(digest, size) {
            return Ok((target, FetchStats::default()));
        }
        let partial = self.partial_path(digest);
        let mut file = tokio::fs::OpenOptions::new()
            .create(true)
            .read(true)
            .append(true)
            .open(&partial)
            .await
            .map_err(io_err(&partial, "opening the download file"))?;
        let mut have = file
            .metadata()
            .await
            .map_err(io_err(&partial, "reading the download's size"))?
            .len();
        let mut digester = digest.algorithm().digester();
        if have > size {
            file.set_len(0)
                .await
                .map_err(io_err(&partial, "truncating the download"))?;
            have = 0;
        }
        if have > 0 {
            // Rebuild the hash state from the bytes on disk (read once).
            let mut buf = vec![0u8; 1 << 20];
            let mut read = 0u64;
            while read < have {
                let n = file
                    .read(&mut buf)
                    .await
                    .map_err(io_err(&partial, "re-reading the partial download"))?;
                if n == 0 {
                    break;
                }
                let n = n.min(usize::try_from(have - read).unwrap_or(usize::MAX));
                digester.update(&buf[..n]);
                read += n as u64;
            }
            have = read;
        }
        let fetch_err = |source| StoreError::Fetch {
            digest: digest.clone(),
            source,
        };
        let (start, mut reader) = if have == size {
            // Everything arrived before the interruption; only the check is left.
            (
                have,
                Box::pin(tokio::io::empty()) as std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
            )
        } else {
            match client.get_blob_from(registry, name, digest, have).await {
                Ok(r) => r,
                Err(e) => {
                    if have == 0 {
                        let _ = std::fs::remove_file(&partial);
                    }
                    return Err(fetch_err(e));
                }
            }
        };
        if start != have {
            // The registry sent the whole blob: start the file over.
            file.set_len(0)
                .await
                .map_err(io_err(&partial, "truncating the download"))?;
            digester = digest.algorithm().digester();
            have = 0;
        }
        let stats = FetchStats {
            downloaded: 0,
            resumed_from: have,
        };
        if have > 0 {
            tracing::info!(%digest, from = have, of = size, "resuming a partial download");
            if let Some(m) = &self.metrics {
                m.bytes(0, have);
            }
        }
        let verify_failed = |e: VerifyError| {
            let _ = std::fs::remove_file(&partial);
            StoreError::Verify {
                digest: digest.clone(),
                source: e,
            }
        };
        let mut written = have;
        let mut buf = vec![0u8; 1 << 20];
        loop {
            let n = match reader.read(&mut buf).await {
                Ok(n) => n,
                Err(e) => {
                    // Keep what arrived for the next attempt.
                    let _ = file.flush().await;
                    return Err(StoreError::Download {
                        digest: digest.clone(),
                        source: e,
                    });
                }
            };
            if n == 0 {
                break;
            }
            if let Some(m) = &self.metrics {
                m.bytes(n as u64, 0);
            }
            if written + n as u64 > size {
                return Err(verify_failed(VerifyError::TooLong {
                    expected_digest: digest.clone(),
                    expected: size,
                }));
            }
            digester.update(&buf[..n]);
            file.write_all(&buf[..n])
                .await
                .map_err(io_err(&partial, "writing the download"))?;
            written += n as u64;
        }
        if written < size {
            return Err(verify_failed(VerifyError::TooShort {
                expected_digest: digest.clone(),
                expected: size,
                found: written,
            }));
        }
        let found = digester.finish();
        if &found != digest {
            return Err(verify_failed(VerifyError::DigestMismatch {
                expected: digest.clone(),
                found,
            }));
        }
        file.sync_all()
            .await
            .map_err(io_err(&partial, "syncing the download"))?;
        drop(file);
        self.publish_file(&partial, &target)?;
        Ok((
            target,
            FetchStats {
                downloaded: written - stats.resumed_from,
                ..stats
            },
        ))
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
        let ingest = self.ingest_dir();
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!("{}.", digest.encoded()))
            .tempfile_in(&ingest)
            .map_err(io_err(&ingest, "creating a temporary file"))?;
        std::io::Write::write_all(&mut tmp, bytes).map_err(io_err(tmp.path(), "writing"))?;
        tmp.as_file()
            .sync_all()
            .map_err(io_err(tmp.path(), "syncing"))?;
        self.publish(tmp, &target)?;
        Ok(target)
    }

    /// Publishes a verified download (rename; an existing blob of that digest has the same
    /// bytes).
    fn publish_file(&self, src: &Path, target: &Path) -> Result<(), StoreError> {
        std::fs::set_permissions(src, std::fs::Permissions::from_mode(0o444))
            .map_err(io_err(src, "making the blob read-only"))?;
        std::fs::rename(src, target).map_err(io_err(target, "publishing the blob"))?;
        sync_parent(target);
        Ok(())
    }

    fn publish(&self, tmp: tempfile::NamedTempFile, target: &Path) -> Result<(), StoreError> {
        tmp.as_file()
            .set_permissions(std::fs::Permissions::from_mode(0o444))
            .map_err(io_err(tmp.path(), "making the blob read-only"))?;
        match tmp.persist_noclobber(target) {
            Ok(_) => {}
            // Another download of the same digest won: same bytes.
            Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => {}
            Err(e) => return Err(io_err(target, "publishing the blob")(e.error)),
        }
        sync_parent(target);
        Ok(())
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
            let Some(d) = e.file_name().to_str().and_then(digest_of_partial) else {
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

/// Makes a rename into `target`'s directory durable; a failure is logged, because the blob is
/// published and cannot be taken back.
fn sync_parent(target: &Path) {
    if let Some(parent) = target.parent()
        && let Ok(d) = std::fs::File::open(parent)
        && let Err(e) = d.sync_all()
    {
        tracing::warn!(dir = %parent.display(), error = %e, "syncing the blob directory failed");
    }
}
