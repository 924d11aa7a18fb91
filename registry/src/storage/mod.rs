//! The storage seam: an object-safe [`Store`], held as `Arc<dyn Store>`, with two stores,
//! [`FsStore`] (a directory; the default) and [`S3Store`] (SeaweedFS's S3 gateway or any S3
//! with conditional writes), both wrapped by [`Instrumented`] (metrics and tracing for every
//! store). [`resolve_s3_credentials`] picks the S3 keys from the configuration, `AWS_*` and
//! the shared AWS files. Handlers never see which store runs.
//!
//! The contract is cut down to what a filesystem and SeaweedFS can both do atomically:
//!
//! - small documents: [`Store::get`] and [`Store::put`] with a [`PutMode`] (create only, replace
//!   only if the [`Etag`] still matches, or overwrite);
//! - streaming reads from an offset: [`Store::read`], and [`Store::read_chunks`] for response
//!   bodies (the fs store hands out mapped windows of the blob file);
//! - staged writes: [`Store::writer`] opens a staging area named by a key; bytes written there are
//!   invisible to every read until [`StoreWriter::commit`] publishes them under another key (a
//!   blob's digest key), and a staging area can be suspended and resumed at a known offset by any
//!   process ([`StoreWriter::suspend`]); [`Store::min_chunk_length`] (advertised as
//!   `OCI-Chunk-Min-Length`) and [`Store::staging_readable`] (whether staged bytes can be read
//!   back before commit) describe the store to the upload code;
//! - [`Store::stat`], [`Store::list`] (only for garbage collection, never on the request path), and
//!   [`Store::delete`].
//!
//! There is deliberately no move or server-side copy. Keys are built only by [`layout`] and are
//! checked by [`Key::new`], so no store ever sees an unchecked path. Every store passes the one
//! conformance suite in `registry/tests/conformance/`.

pub mod layout;

pub(crate) mod file_region;
mod fs;
mod instrumented;
#[cfg(feature = "s3")]
mod s3;
mod s3_credentials;

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::SystemTime;

use bytes::Bytes;
use futures_util::Stream;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite};

pub use fs::FsStore;
pub use instrumented::Instrumented;
#[cfg(feature = "s3")]
pub use s3::{BlobRedirect, BucketProblem, MAX_REDIRECT_EXPIRY, S3Config, S3Store};
#[cfg(feature = "s3")]
pub use s3_credentials::resolve as resolve_s3_credentials;
pub use s3_credentials::{CredentialSource, CredentialsError, S3CredentialSettings, S3Credentials};

/// A boxed future, so that [`Store`] stays object safe.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A streaming reader handed out by a store.
pub type BoxReader = Pin<Box<dyn AsyncRead + Send>>;

/// An object's bytes as a stream of chunks, ready to be a response body.
pub type ByteStream = Pin<Box<dyn Stream<Item = std::io::Result<Bytes>> + Send>>;

/// Chunk size of the default [`Store::read_chunks`]: large enough that a body costs few
/// wake-ups, small enough that memory per response stays flat.
const READ_CHUNK: usize = 256 << 10;

/// Result of a store operation.
pub type StoreResult<T> = Result<T, StoreError>;

/// Largest key accepted, in bytes.
pub const MAX_KEY_LEN: usize = 1024;

/// The error for a read of `offset..offset + len` from an object of `size` bytes.
pub(crate) fn past_end(
    store: &'static str,
    key: &Key,
    offset: u64,
    len: u64,
    size: u64,
) -> StoreError {
    StoreError::PreconditionFailed {
        store,
        key: key.clone(),
        reason: format!("{len} bytes from offset {offset} run past the end ({size} bytes)"),
    }
}

/// A checked storage key: `/`-separated segments of `[A-Za-z0-9._-]`, none empty, `.` or `..`,
/// none starting with `.`, at most [`MAX_KEY_LEN`] bytes.
///
/// Every key is also a safe relative path on a filesystem and a safe S3 object name.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Key(String);

impl Key {
    /// Checks and wraps a key.
    pub fn new(key: impl Into<String>) -> StoreResult<Key> {
        let key = key.into();
        if key.is_empty() || key.len() > MAX_KEY_LEN || !key.split('/').all(segment_ok) {
            return Err(StoreError::InvalidKey { key: shorten(&key) });
        }
        Ok(Key(key))
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// This key followed by `/` and `segment` (checked like any key).
    pub fn join(&self, segment: &str) -> StoreResult<Key> {
        Key::new(format!("{}/{segment}", self.0))
    }
}

fn segment_ok(s: &str) -> bool {
    !s.is_empty()
        && !s.starts_with('.')
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

fn shorten(s: &str) -> String {
    const MAX: usize = 200;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({})", self.0)
    }
}

/// An opaque version tag of a stored document, used for conditional replacement.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Etag(pub String);

/// How [`Store::put`] treats an existing document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PutMode {
    /// Fail with [`StoreError::AlreadyExists`] when the key exists.
    Create,
    /// Replace only when the current version is this one; otherwise
    /// [`StoreError::PreconditionFailed`] (also when the key is gone).
    Replace(Etag),
    /// Write unconditionally.
    Overwrite,
    /// Write unconditionally a record that need not survive a crash of the machine: a store may
    /// skip making it durable. For hold records (`crate::repo::Repos::hold`): they matter only
    /// to a collector running at the same time as the request that wrote them, which sees the
    /// store's current state whether or not it reached the disk, and a crash ends both; what a
    /// push publishes is durable and carries its own age.
    Stamp,
}

/// A small document read whole.
#[derive(Debug, Clone)]
pub struct Document {
    /// The content.
    pub bytes: Bytes,
    /// Its version, for [`PutMode::Replace`].
    pub etag: Etag,
}

/// What [`Store::stat`] knows about an object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Size in bytes.
    pub size: u64,
    /// Last modification.
    pub modified: SystemTime,
}

/// A store operation failed. Each variant names the store and the key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// Nothing is stored under the key.
    #[error("{store}: key {key} not found")]
    NotFound {
        /// The store's name.
        store: &'static str,
        /// The key.
        key: Key,
    },
    /// A create-only write found the key taken.
    #[error("{store}: key {key} already exists")]
    AlreadyExists {
        /// The store's name.
        store: &'static str,
        /// The key.
        key: Key,
    },
    /// A conditional write or a resume found another version or offset.
    #[error("{store}: precondition failed on key {key}: {reason}")]
    PreconditionFailed {
        /// The store's name.
        store: &'static str,
        /// The key.
        key: Key,
        /// What did not match.
        reason: String,
    },
    /// The string is not a legal key.
    #[error("invalid storage key {key:?}")]
    InvalidKey {
        /// The rejected key (shortened when long).
        key: String,
    },
    /// A document is larger than the caller's limit.
    #[error("{store}: document {key} is larger than {limit} bytes")]
    TooLarge {
        /// The store's name.
        store: &'static str,
        /// The key.
        key: Key,
        /// The limit.
        limit: u64,
    },
    /// The backend failed (I/O, network, service).
    #[error("{store}: backend error on key {key}")]
    Backend {
        /// The store's name.
        store: &'static str,
        /// The key.
        key: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Coarse classes of [`StoreError`] for callers to branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// See [`StoreError::NotFound`].
    NotFound,
    /// See [`StoreError::AlreadyExists`].
    AlreadyExists,
    /// See [`StoreError::PreconditionFailed`].
    PreconditionFailed,
    /// See [`StoreError::InvalidKey`].
    InvalidKey,
    /// See [`StoreError::TooLarge`].
    TooLarge,
    /// See [`StoreError::Backend`].
    Backend,
}

impl StoreError {
    /// The error's class.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StoreError::NotFound { .. } => ErrorKind::NotFound,
            StoreError::AlreadyExists { .. } => ErrorKind::AlreadyExists,
            StoreError::PreconditionFailed { .. } => ErrorKind::PreconditionFailed,
            StoreError::InvalidKey { .. } => ErrorKind::InvalidKey,
            StoreError::TooLarge { .. } => ErrorKind::TooLarge,
            StoreError::Backend { .. } => ErrorKind::Backend,
        }
    }

    /// True for [`ErrorKind::NotFound`].
    pub fn is_not_found(&self) -> bool {
        self.kind() == ErrorKind::NotFound
    }
}

/// A staging area being written. Its bytes are invisible until [`StoreWriter::commit`].
///
/// Write through the [`AsyncWrite`] impl, then end with exactly one of `suspend`, `commit` or
/// `cancel`. Dropping a writer without ending it leaves the staging area at an unknown length;
/// the next [`Store::writer`] resume cuts it back to the offset the caller recorded.
pub trait StoreWriter: AsyncWrite + Send + Unpin {
    /// Bytes in the staging area so far (including bytes from before a resume).
    fn size(&self) -> u64;

    /// Makes everything written durable and releases the staging area for a later resume.
    /// Returns the durable size.
    fn suspend(self: Box<Self>) -> BoxFuture<'static, StoreResult<u64>>;

    /// Makes the staged bytes durable and publishes them under `dest`, create-only:
    /// [`StoreError::AlreadyExists`] when `dest` already holds an object (the staging area is
    /// removed either way). The staging area is gone afterwards.
    fn commit(self: Box<Self>, dest: Key) -> BoxFuture<'static, StoreResult<ObjectMeta>>;

    /// Drops the staging area and its bytes.
    fn cancel(self: Box<Self>) -> BoxFuture<'static, StoreResult<()>>;
}

/// An object store holding blobs, documents and staging areas. Held as `Arc<dyn Store>`.
pub trait Store: Send + Sync + fmt::Debug {
    /// A short name for errors and logs (`fs`, `s3`).
    fn name(&self) -> &'static str;

    /// The smallest write that maps to one durable unit of the backend (an S3 part), which the
    /// registry advertises as `OCI-Chunk-Min-Length`. Smaller chunks still work (they are staged
    /// in the store until enough bytes gather), at a few more requests each. `None`: no minimum.
    fn min_chunk_length(&self) -> Option<u64> {
        None
    }

    /// Whether [`Store::read`] of a staging key returns the bytes written to it so far (once the
    /// writer is flushed), before it is committed. True for the filesystem, where a staging area
    /// is a plain file; false for S3, where staged bytes are multipart parts nobody can read
    /// until the upload completes. Uploads use it to hash only SHA-256 while bytes stream in
    /// and verify any other algorithm by reading the staged bytes back at the end.
    fn staging_readable(&self) -> bool {
        false
    }

    /// Reads a whole document of at most `limit` bytes ([`StoreError::TooLarge`] otherwise).
    fn get<'a>(&'a self, key: &'a Key, limit: u64) -> BoxFuture<'a, StoreResult<Document>>;

    /// Reads a whole document like [`Store::get`] unless its version is still `known`: `None`
    /// then, and the caller keeps the copy it parsed before. This is what lets a replica keep
    /// large index documents (a repository's tags, the catalog) parsed in memory and still see
    /// every other replica's writes: each read asks the store, and only the answer's body is
    /// saved. The default reads the document and compares versions (the filesystem store's
    /// version is its content hash, so a read costs the bytes but not the parse); S3 asks with
    /// `If-None-Match` and gets a bodiless 304 when nothing changed.
    fn get_if_changed<'a>(
        &'a self,
        key: &'a Key,
        limit: u64,
        known: &'a Etag,
    ) -> BoxFuture<'a, StoreResult<Option<Document>>> {
        Box::pin(async move {
            let doc = self.get(key, limit).await?;
            Ok((doc.etag != *known).then_some(doc))
        })
    }

    /// Writes a whole document atomically (a reader sees the old or the new bytes, never a mix).
    fn put<'a>(
        &'a self,
        key: &'a Key,
        bytes: Bytes,
        mode: PutMode,
    ) -> BoxFuture<'a, StoreResult<Etag>>;

    /// Streams an object from `offset` to its end. An offset equal to the size gives an empty
    /// stream; past the size is [`StoreError::PreconditionFailed`].
    fn read<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
    ) -> BoxFuture<'a, StoreResult<(ObjectMeta, BoxReader)>>;

    /// Streams `len` bytes of an object from `offset` as chunks, the way a blob GET sends them.
    /// The caller has the size from [`Store::stat`]; a range past the object's end is
    /// [`StoreError::PreconditionFailed`]. The default wraps [`Store::read`]; the filesystem
    /// store overrides it to hand the socket mapped file windows, so no byte is copied in user
    /// space (the copy and the thread hop per chunk made large pulls slower than a `sendfile`
    /// server).
    fn read_chunks<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'a, StoreResult<(ObjectMeta, ByteStream)>> {
        Box::pin(async move {
            let (meta, reader) = self.read(key, offset).await?;
            if offset.saturating_add(len) > meta.size {
                return Err(past_end(self.name(), key, offset, len, meta.size));
            }
            let stream = tokio_util::io::ReaderStream::with_capacity(reader.take(len), READ_CHUNK);
            Ok((meta, Box::pin(stream) as ByteStream))
        })
    }

    /// Opens the staging area `staging`. With `resume_at: None` it starts empty (discarding
    /// anything left there). With `Some(offset)` it continues an area suspended earlier, cut back
    /// to `offset` bytes; [`StoreError::NotFound`] when there is none, and
    /// [`StoreError::PreconditionFailed`] when it holds fewer bytes or another writer has it open.
    fn writer<'a>(
        &'a self,
        staging: &'a Key,
        resume_at: Option<u64>,
    ) -> BoxFuture<'a, StoreResult<Box<dyn StoreWriter>>>;

    /// Size and modification time of a published object or document.
    fn stat<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, StoreResult<ObjectMeta>>;

    /// Every published key under `prefix` (recursively), sorted. Staging areas are listed as
    /// their staging key. For garbage collection only: never on the request path.
    fn list<'a>(&'a self, prefix: &'a Key) -> BoxFuture<'a, StoreResult<Vec<Key>>>;

    /// One page of the published keys under `prefix/` (recursively, not `prefix` itself) in
    /// the store's listing order, after `start_after` in that order, at most `limit` of them;
    /// fewer than `limit` only at the end. The next page starts after the last key returned.
    /// The order is byte order, except that SeaweedFS lists directory by directory (`a/1`
    /// before `a-x`); either way the keys under one directory come together and keys of one
    /// directory level (no `/` after the prefix) come in byte order. A page costs the keys it
    /// returns (plus, on the filesystem, the entries of the directories it passes through),
    /// never the whole prefix: for walks over a store of any size (garbage collection) and for
    /// paged listings.
    fn list_page<'a>(
        &'a self,
        prefix: &'a Key,
        start_after: Option<&'a Key>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Key>>>;

    /// Deletes an object, a document or a staging area. [`StoreError::NotFound`] when absent.
    fn delete<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, StoreResult<()>>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_checked() {
        for good in ["a", "blobs/sha256/ab/abcd/data", "r/_tags", "a.b-c_d/E"] {
            assert_eq!(Key::new(good).unwrap().as_str(), good);
        }
        for bad in [
            "", "/a", "a/", "a//b", "../x", "a/../b", "a/./b", ".hidden", "a b", "a\\b", "é",
            "a~lock",
        ] {
            let err = Key::new(bad).unwrap_err();
            assert_eq!(err.kind(), ErrorKind::InvalidKey, "{bad:?}");
        }
        assert!(Key::new("a".repeat(MAX_KEY_LEN + 1)).is_err());
        assert!(Key::new("a").unwrap().join("..").is_err());
    }
}
