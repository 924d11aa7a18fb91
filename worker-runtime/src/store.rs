//! The local content store, shared by every zone on the node.
//!
//! ```text
//! <store>/.rdctl-owner            ownership mark (kind content-store)
//! <store>/blobs/<alg>/<hex>       verified blobs, read-only; present means verified
//! <store>/ingest/<hex>.<random>   downloads in progress (never read as blobs)
//! ```
//!
//! A blob is streamed into `ingest/` through the client's verifying reader; only when the
//! stream ended with size and digest matched is the file synced and renamed to its digest path
//! (an existing blob with that name counts as success: same digest, same bytes). So a reader
//! of `blobs/` never sees unverified or partial content, and a worker killed mid-download leaves
//! only an ingest file, removed when the store is next opened.

use std::io::{self, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use registry::Name;
use registry::client::{Client, ClientError};
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
}

impl ContentStore {
    /// Opens (creating and marking when new) the store at `dir` for `worker_id`, and removes
    /// ingest files left by an interrupted run. Only one worker may use a store at a time (the
    /// scheduler holds the state directory's lock).
    pub fn open(dir: &Path, worker_id: &str) -> Result<ContentStore, StoreError> {
        owner::claim(dir, &OwnerMark::new(worker_id, "content-store"))?;
        let store = ContentStore {
            dir: dir.to_owned(),
        };
        for sub in ["blobs/sha256", "blobs/sha512"] {
            let p = dir.join(sub);
            std::fs::create_dir_all(&p).map_err(io_err(&p, "creating the blob directory"))?;
        }
        let ingest = store.ingest_dir();
        if ingest.exists() {
            std::fs::remove_dir_all(&ingest)
                .map_err(io_err(&ingest, "clearing stale downloads"))?;
        }
        std::fs::create_dir_all(&ingest)
            .map_err(io_err(&ingest, "creating the ingest directory"))?;
        Ok(store)
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

    /// Fetches a blob from `registry`/`name` unless present, streaming it through the
    /// client's verifying reader into an ingest file that is published only after it verified.
    pub async fn fetch(
        &self,
        client: &Client,
        registry: &str,
        name: &Name,
        digest: &Digest,
        size: u64,
    ) -> Result<PathBuf, StoreError> {
        let target = self.blob_path(digest);
        if self.contains(digest, size) {
            return Ok(target);
        }
        let reader = client
            .get_blob(registry, name, digest, size)
            .await
            .map_err(|source| StoreError::Fetch {
                digest: digest.clone(),
                source,
            })?;
        let ingest = self.ingest_dir();
        let tmp = tempfile::Builder::new()
            .prefix(&format!("{}.", digest.encoded()))
            .tempfile_in(&ingest)
            .map_err(io_err(&ingest, "creating a download file"))?;
        let file = tmp
            .reopen()
            .map_err(io_err(tmp.path(), "opening the download file"))?;
        let mut out = tokio::fs::File::from_std(file);
        let mut reader = tokio::io::BufReader::with_capacity(1 << 20, reader);
        if let Err(e) = tokio::io::copy_buf(&mut reader, &mut out).await {
            return Err(match VerifyError::from_io(&e) {
                Some(v) => StoreError::Verify {
                    digest: digest.clone(),
                    source: v.clone(),
                },
                None => StoreError::Download {
                    digest: digest.clone(),
                    source: e,
                },
            });
        }
        // copy_buf returned at EOF without error: the verifying reader checked size and digest.
        out.sync_all()
            .await
            .map_err(io_err(tmp.path(), "syncing the download"))?;
        drop(out);
        self.publish(tmp, &target)?;
        Ok(target)
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
        if let Some(parent) = target.parent()
            && let Ok(d) = std::fs::File::open(parent)
        {
            // The rename is durable only once the directory is synced; a failure here is
            // logged, because the blob is published and cannot be taken back.
            if let Err(e) = d.sync_all() {
                tracing::warn!(dir = %parent.display(), error = %e, "syncing the blob directory failed");
            }
        }
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

    /// Removes the blobs not in `keep` that were stored more than `grace` ago; returns how
    /// many were removed. Only called between passes, when no download is in flight.
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
        Ok(removed)
    }
}
