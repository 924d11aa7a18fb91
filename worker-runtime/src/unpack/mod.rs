//! Safe layer application: one layer's tar stream applied onto a root directory, never writing
//! outside it.
//!
//! Every path is resolved from a held descriptor of the root, one component at a time with
//! `openat(O_NOFOLLOW | O_DIRECTORY)`. A symlink met on the way is read and resolution goes on
//! *inside* the root, as if the root were `/` (absolute targets restart at the root, `..` stops
//! at it): the semantics of Linux `RESOLVE_IN_ROOT`, written portably because illumos has no
//! `openat2`. The leaf of an entry is never followed: it is created with `*at()` calls relative
//! to its parent's descriptor (`O_CREAT | O_EXCL | O_NOFOLLOW`, `mkdirat`, `symlinkat`,
//! `linkat` without `AT_SYMLINK_FOLLOW`), after removing whatever was there (so a regular file
//! over a hard-linked path unlinks it instead of truncating the shared inode).
//!
//! Layer semantics (image-spec `layer.md`): whiteouts `.wh.<name>` delete lower-layer entries,
//! `.wh..wh..opq` hides every lower child of its directory but not this layer's entries,
//! wherever it appears; a directory over a directory only changes attributes, anything else is
//! removed first. Refused (the whole layer fails): unsafe names, the same path twice, entries
//! replacing the root, hard links to directories, symlinks or missing paths, ids not below 2^31,
//! whiteouts of paths this layer created. Dropped: character and block devices (illumos zone
//! installs delete them too) and extended attributes (Linux namespaces mean nothing in a zone).
//!
//! The caller (the `verify` module) compares the returned DiffID before the root counts.
//!
//! This module holds the options, errors and the entry points ([`apply_layer`],
//! [`apply_stream`]); `root` holds [`RootDir`] and in-root resolution, `entry` applies one tar
//! entry, `whiteout` the whiteouts and opaque markers.

mod copy;
mod entry;
mod root;
mod whiteout;

use std::collections::HashSet;
use std::io::{self, BufRead, Read};

use validator::{
    Algorithm, Compression, Digest, DigestingReader, LayerLimits, TarError, TarReader,
    decompress_layer,
};

pub use copy::CopiedTree;
pub use root::RootDir;

/// Symlinks followed while resolving one path (Linux uses 40 too).
const MAX_SYMLINK_HOPS: u32 = 40;
/// Deepest directory tree removed or walked.
const MAX_DEPTH: usize = 4096;
/// How layers are applied.
#[derive(Debug, Clone)]
pub struct UnpackOptions {
    /// Size, entry, path and zstd-window limits.
    pub limits: LayerLimits,
    /// Apply the entries' uid/gid (needs root). When off, setuid/setgid bits are dropped too,
    /// because they would apply to the wrong owner.
    pub chown: bool,
}

impl Default for UnpackOptions {
    fn default() -> Self {
        UnpackOptions {
            limits: LayerLimits::default(),
            chown: rustix::process::geteuid().is_root(),
        }
    }
}

/// What applying one layer did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LayerStats {
    /// The digest of the whole uncompressed stream, trailing bytes included.
    pub diff_id: Option<Digest>,
    /// Bytes of uncompressed stream.
    pub uncompressed_size: u64,
    /// Tar entries read.
    pub entries: u64,
    /// Device nodes dropped.
    pub devices_dropped: u64,
    /// Extended attributes not applied.
    pub xattrs_dropped: u64,
    /// Whiteouts and opaque markers applied.
    pub whiteouts: u64,
}

/// A layer could not be applied. Whatever was written is in the staging root, which the caller
/// removes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum UnpackError {
    /// The compressed stream could not be opened (magic bytes disagree with the media type, or
    /// the decoder refused it).
    #[error("the layer stream cannot be decoded")]
    Open(#[source] io::Error),
    /// The tar stream is malformed, ambiguous, truncated, over a limit, or did not decompress.
    #[error("the layer's tar stream is unusable")]
    Tar(#[from] TarError),
    /// An entry that must not be applied.
    #[error("entry {path:?} (tar offset {offset}) refused: {reason}")]
    Refused {
        /// The entry's name as stored.
        path: String,
        /// Offset of its header.
        offset: u64,
        /// Why.
        reason: String,
    },
    /// A file-system call failed while applying an entry.
    #[error("entry {path:?} (tar offset {offset}): {op} failed")]
    Io {
        /// The entry's name as stored.
        path: String,
        /// Offset of its header.
        offset: u64,
        /// The operation.
        op: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// Reading the bytes after the tar end blocks failed.
    #[error("reading the end of the uncompressed stream failed")]
    Trailing(#[source] io::Error),
    /// The uncompressed stream does not hash to the config's `diff_ids` entry.
    #[error("uncompressed digest {found} differs from diff_id {expected}")]
    DiffId {
        /// From the config.
        expected: Digest,
        /// Computed.
        found: Digest,
    },
}

/// A directory's attributes, applied after the layer so that its children can be written
/// first and its mtime is not disturbed by them.
struct DirAttrs {
    path: Vec<u8>,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: i64,
}

/// Applies the entries of one layer.
struct Applier<'a> {
    root: &'a RootDir,
    opts: &'a UnpackOptions,
    /// Paths of this layer's entries (duplicates are refused).
    seen: HashSet<Vec<u8>>,
    /// Those paths and all their ancestors: what an opaque marker must keep.
    touched: HashSet<Vec<u8>>,
    dirs: Vec<DirAttrs>,
    stats: LayerStats,
    /// One copy buffer for every file of the layer (not 64 KiB allocated and zeroed per file).
    copy_buf: Vec<u8>,
}

/// Applies one layer blob onto `root`, decompressing (`compression` from the media type,
/// confirmed by magic bytes) and hashing the uncompressed stream on the way, and checks it
/// against `expected_diff_id`. Memory stays bounded whatever the layer size.
pub fn apply_layer<R: BufRead + Send>(
    root: &RootDir,
    blob: R,
    compression: Compression,
    expected_diff_id: &Digest,
    opts: &UnpackOptions,
) -> Result<LayerStats, UnpackError> {
    let stats = apply_stream(root, blob, compression, expected_diff_id.algorithm(), opts)?;
    let found = stats.diff_id.clone().expect("apply_stream sets the digest");
    if &found != expected_diff_id {
        return Err(UnpackError::DiffId {
            expected: expected_diff_id.clone(),
            found,
        });
    }
    Ok(stats)
}

/// [`apply_layer`] without a DiffID to compare: returns the computed one.
pub fn apply_stream<R: BufRead + Send>(
    root: &RootDir,
    blob: R,
    compression: Compression,
    algorithm: Algorithm,
    opts: &UnpackOptions,
) -> Result<LayerStats, UnpackError> {
    let stream = decompress_layer(blob, compression, &opts.limits).map_err(UnpackError::Open)?;
    if compression == Compression::None {
        return apply_tar(root, stream, algorithm, opts);
    }
    // Inflating on a second thread overlaps it with hashing and writing files.
    std::thread::scope(|s| {
        let (ahead, inflater) =
            crate::readahead::spawn(s, "layer-inflate", stream).map_err(UnpackError::Open)?;
        let result = apply_tar(root, ahead, algorithm, opts);
        if inflater.join().is_err() {
            return Err(UnpackError::Open(io::Error::other(
                "the decompression thread panicked",
            )));
        }
        result
    })
}

/// Applies an uncompressed tar stream, hashing it on the way. Consumes `stream`, so a
/// read-ahead thread feeding it sees the reader gone when this returns, even on an error.
fn apply_tar<S: Read>(
    root: &RootDir,
    stream: S,
    algorithm: Algorithm,
    opts: &UnpackOptions,
) -> Result<LayerStats, UnpackError> {
    let hashing = DigestingReader::new(stream, algorithm);
    let mut tar = TarReader::new(hashing, opts.limits.tar.clone());
    let mut applier = Applier::new(root, opts);
    while let Some(entry) = tar.next_entry()? {
        applier.apply(&entry, &mut tar)?;
    }
    applier.finish()?;
    // Bytes after the end blocks are part of the DiffID (containerd and umoci drain them too).
    let mut hashing = tar.into_inner();
    io::copy(&mut hashing, &mut io::sink()).map_err(UnpackError::Trailing)?;
    let (_, digest, size) = hashing.finish();
    let mut stats = applier.stats;
    stats.diff_id = Some(digest);
    stats.uncompressed_size = size;
    Ok(stats)
}
