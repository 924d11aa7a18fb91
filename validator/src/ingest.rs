//! The one way a blob enters a content directory's `blobs/<alg>/<hex>` (an OCI image layout,
//! the worker's content store, the builder's layer cache), after containerd's content
//! `Writer` (`core/content/content.go`, `plugins/content/local/writer.go`).
//!
//! ```text
//! <root>/blobs/<alg>/<hex>              published blobs: present means size and digest verified
//! <staging>/<alg>-<hex>.partial         an ingest whose digest is known in advance (resumable)
//! <staging>/.tmp-*                      an ingest whose digest is known only at the end
//! ```
//!
//! The lifecycle: [`BlobDir::ingest`] (expected digest and size known) or
//! [`BlobDir::ingest_unnamed`] (a layer being compressed) opens an [`Ingest`], a writer that
//! hashes and counts as it writes; [`Ingest::finish`] ends the writing ([`StagedBlob`]: digest
//! and size known, nothing published); [`StagedBlob::commit`] checks the size, then the
//! digest, syncs the file and publishes it without clobbering (`renameat2(RENAME_NOREPLACE)`,
//! or `link` + `unlink` where that is missing). Nothing can be read under a digest name before
//! its commit succeeded.
//!
//! **Resuming.** An ingest of a known digest writes to `<alg>-<hex>.partial`. Opening it again
//! continues that file: its bytes are re-hashed once (a saved hash state could disagree with
//! what really reached the disk before a crash), [`Ingest::offset`] says where to continue, and
//! the final commit verifies the whole blob, so wrong bytes of any origin are caught there. A
//! partial file longer than the expected size is started over. An ingest dropped without a
//! commit keeps its partial file (that is what makes it resumable); [`Ingest::discard`] removes
//! it. A commit that finds the wrong size or digest removes the partial file: its bytes can
//! never become that blob. An unnamed ingest dropped before its publish leaves nothing.
//!
//! **Concurrency.** The partial file is locked while an ingest holds it. A second ingest of
//! the same digest that finds it locked writes to a temporary file of its own instead of
//! waiting; both commit, one publishes, and the other finds the blob already there, which is
//! success. On a platform without file locks the caller must serialise ingests of one digest
//! (the worker does).
//!
//! **Already there.** Publishing a blob that is already present counts as success
//! (containerd's `AlreadyExists`). With [`Existing::Check`] the present file is first checked
//! (size, then digest, read once); a damaged one is replaced by the bytes just hashed, so a
//! caller that validates what it wrote without reading it back (`ValidateOptions::
//! written_blobs`) can trust the layout holds those bytes. [`Existing::Trust`] is for a store
//! where present means verified and nobody else writes (the worker's).
//!
//! **Modes.** Files are created 0644 less the umask, like any file the user writes (tempfile's
//! own default, 0600, would give a layout only its writer can read); [`BlobDir::read_only`]
//! makes published blobs 0444.
//!
//! Failures after publication (syncing the directory, removing a staged name) are ignored:
//! the blob is published and cannot be taken back.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

use crate::digest::{Algorithm, Digest, Digester};
use crate::verify::VerifyError;

/// The most bytes one `write` to a file hands the kernel: [`Ingest`] writes a larger buffer
/// in pieces (a short write, which `write_all` and `io::copy` continue), and so does the
/// registry's filesystem store with its staging files.
///
/// The page cache takes a write into folios as large as the write (ext4 and XFS since Linux
/// 6.16), and a folio above 32 KiB (order 4 and up) comes from the buddy allocator's large
/// free blocks, not from the per-CPU lists of pages freed a moment ago. In a VM whose balloon
/// driver reports free memory to the host (virtio-balloon free page reporting: Firecracker,
/// QEMU with `free-page-reporting=on`, several clouds), those blocks are the ones handed
/// back, and the first write into each faults it in on the host inside the kernel's copy.
/// Measured on this project's VM, a 256 MiB monolithic push with 256 KiB writes made 106-367
/// MiB/s at 2.5-9.5 CPU s per GiB, and with 32 KiB writes 542-730 MiB/s at 1.2-1.7; 1 MiB
/// writes (the worker's download chunks, the builder's layer buffer) fare as badly
/// (docs/benchmarks.md, "Write size"). On bare metal the extra syscalls cost microseconds.
pub const WRITE_PIECE: usize = 32 << 10;

/// Errors of ingests and atomic file writes. Every variant names the file.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum IngestError {
    /// A file operation failed.
    #[error("{path}: {op}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The bytes written are not the expected size.
    #[error("{path}: {found} bytes written for {digest}, expected {expected}")]
    SizeMismatch {
        /// The staged file (removed).
        path: PathBuf,
        /// The digest the blob was expected to have.
        digest: Digest,
        /// The expected size.
        expected: u64,
        /// The size written.
        found: u64,
    },
    /// The bytes written do not have the expected digest.
    #[error("{path}: content digest {found} does not match the expected {expected}")]
    DigestMismatch {
        /// The staged file (removed).
        path: PathBuf,
        /// The expected digest.
        expected: Digest,
        /// The digest of the bytes written.
        found: Digest,
    },
}

impl IngestError {
    /// The mismatch as a [`VerifyError`], when this is one (a size or digest mismatch).
    pub fn verify_error(&self) -> Option<VerifyError> {
        match self {
            IngestError::SizeMismatch {
                digest,
                expected,
                found,
                ..
            } if found < expected => Some(VerifyError::TooShort {
                expected_digest: digest.clone(),
                expected: *expected,
                found: *found,
            }),
            IngestError::SizeMismatch {
                digest, expected, ..
            } => Some(VerifyError::TooLong {
                expected_digest: digest.clone(),
                expected: *expected,
            }),
            IngestError::DigestMismatch {
                expected, found, ..
            } => Some(VerifyError::DigestMismatch {
                expected: expected.clone(),
                found: found.clone(),
            }),
            IngestError::Io { .. } => None,
        }
    }
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> IngestError + 'a {
    move |source| IngestError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// What a publish does when a blob of that digest is already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Existing {
    /// Keep it: present means verified (a store nobody else writes).
    Trust,
    /// Keep it when its size and digest check out (read once), else replace it with the bytes
    /// just hashed.
    Check,
}

/// How a commit ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Published {
    /// The blob is now in place.
    New,
    /// The blob was already there (and, with [`Existing::Check`], checked out).
    AlreadyThere,
    /// A damaged file under the digest's name was replaced ([`Existing::Check`]).
    Replaced,
}

/// A directory of blobs, `<root>/blobs/<alg>/<hex>`, and its staging area; see the module
/// docs.
#[derive(Debug, Clone)]
pub struct BlobDir {
    root: PathBuf,
    staging: PathBuf,
    read_only: bool,
    existing: Existing,
}

impl BlobDir {
    /// Blobs under `root/blobs`, staged in `staging` (on the same file system). Published
    /// blobs are 0644 less the umask; one already there is trusted.
    pub fn new(root: impl Into<PathBuf>, staging: impl Into<PathBuf>) -> BlobDir {
        BlobDir {
            root: root.into(),
            staging: staging.into(),
            read_only: false,
            existing: Existing::Trust,
        }
    }

    /// Makes published blobs read-only (0444), as a content store keeps them.
    pub fn read_only(mut self, read_only: bool) -> BlobDir {
        self.read_only = read_only;
        self
    }

    /// Sets what a publish does with a blob already there.
    pub fn on_existing(mut self, existing: Existing) -> BlobDir {
        self.existing = existing;
        self
    }

    /// The directory holding `blobs/`.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The staging area.
    pub fn staging(&self) -> &Path {
        &self.staging
    }

    /// Where a blob lives. Safe because a [`Digest`] holds only a known algorithm and
    /// lowercase hex.
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        blob_path(&self.root, digest)
    }

    /// Where the ingest of `digest` in progress lives (`<alg>-<hex>.partial`).
    pub fn partial_path(&self, digest: &Digest) -> PathBuf {
        self.staging.join(format!(
            "{}-{}.partial",
            digest.algorithm().as_str(),
            digest.encoded()
        ))
    }

    /// The digest a staging file name belongs to, when it is a partial file's name.
    pub fn digest_of_partial(file_name: &str) -> Option<Digest> {
        let (alg, hex) = file_name.strip_suffix(".partial")?.split_once('-')?;
        Digest::parse(&format!("{alg}:{hex}")).ok()
    }

    fn create_staging(&self) -> Result<(), IngestError> {
        fs::create_dir_all(&self.staging).map_err(io_err("create directory", &self.staging))
    }

    /// Opens the ingest of a blob whose digest and size are known: continues its partial file
    /// when there is one (re-hashed; see [`Ingest::offset`]), else starts it. Writes past
    /// `size` are refused.
    pub fn ingest(&self, digest: &Digest, size: u64) -> Result<Ingest, IngestError> {
        self.create_staging()?;
        let path = self.partial_path(digest);
        // A concurrent ingest may publish (and so unlink) the partial file between our open
        // and our lock: then the file we hold is the blob itself. Reopen until the name and
        // the locked file agree.
        for _ in 0..8 {
            let file = open_partial(&path)?;
            match file.try_lock() {
                Ok(()) => {}
                Err(fs::TryLockError::WouldBlock) => return self.unnamed(digest, size),
                Err(fs::TryLockError::Error(e)) if e.kind() == io::ErrorKind::Unsupported => {}
                Err(fs::TryLockError::Error(e)) => return Err(io_err("lock", &path)(e)),
            }
            if !same_file(&file, &path) {
                continue;
            }
            let mut ingest = Ingest {
                dir: self.clone(),
                file,
                staged: Staged::Partial(path),
                digester: digest.algorithm().digester(),
                written: 0,
                expected: Some((digest.clone(), size)),
            };
            ingest.rehash()?;
            return Ok(ingest);
        }
        // The name keeps changing under us: write apart, the commit settles it.
        self.unnamed(digest, size)
    }

    fn unnamed(&self, digest: &Digest, size: u64) -> Result<Ingest, IngestError> {
        let mut ingest = self.ingest_unnamed(digest.algorithm())?;
        ingest.expected = Some((digest.clone(), size));
        Ok(ingest)
    }

    /// Opens the ingest of a blob whose digest is known only once it is written (a layer being
    /// compressed): a temporary file of its own, removed when the ingest is dropped before its
    /// publish.
    pub fn ingest_unnamed(&self, algorithm: Algorithm) -> Result<Ingest, IngestError> {
        self.create_staging()?;
        let tmp = temp_file_in(&self.staging)
            .map_err(io_err("create temporary file in", &self.staging))?;
        let (file, path) = tmp.into_parts();
        Ok(Ingest {
            dir: self.clone(),
            file,
            staged: Staged::Temp(path),
            digester: algorithm.digester(),
            written: 0,
            expected: None,
        })
    }
}

/// `<root>/blobs/<alg>/<hex>`.
pub(crate) fn blob_path(root: &Path, digest: &Digest) -> PathBuf {
    root.join("blobs")
        .join(digest.algorithm().as_str())
        .join(digest.encoded())
}

fn open_partial(path: &Path) -> Result<File, IngestError> {
    let mut o = OpenOptions::new();
    o.create(true).read(true).append(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        o.mode(0o644);
    }
    o.open(path).map_err(io_err("open", path))
}

#[cfg(unix)]
fn same_file(file: &File, path: &Path) -> bool {
    use std::os::unix::fs::MetadataExt;
    match (file.metadata(), fs::metadata(path)) {
        (Ok(a), Ok(b)) => a.dev() == b.dev() && a.ino() == b.ino(),
        _ => false,
    }
}

#[cfg(not(unix))]
fn same_file(_: &File, path: &Path) -> bool {
    path.is_file()
}

/// The name an ingest writes under.
#[derive(Debug)]
enum Staged {
    /// `<alg>-<hex>.partial`: kept when the ingest is dropped.
    Partial(PathBuf),
    /// A temporary name: removed when dropped.
    Temp(tempfile::TempPath),
}

impl Staged {
    fn path(&self) -> &Path {
        match self {
            Staged::Partial(p) => p,
            Staged::Temp(p) => p,
        }
    }

    /// Removes the staged file; a failure is ignored (nothing will read it as a blob).
    fn remove(self) {
        match self {
            Staged::Partial(p) => {
                let _ = fs::remove_file(p);
            }
            Staged::Temp(p) => {
                let _ = p.close();
            }
        }
    }
}

/// A blob being written; see [`BlobDir::ingest`] and the module docs.
#[derive(Debug)]
pub struct Ingest {
    dir: BlobDir,
    file: File,
    staged: Staged,
    digester: Digester,
    written: u64,
    expected: Option<(Digest, u64)>,
}

impl Ingest {
    /// Bytes in the file so far: where a resumed ingest continues.
    pub fn offset(&self) -> u64 {
        self.written
    }

    /// The file being written (for error messages).
    pub fn path(&self) -> &Path {
        self.staged.path()
    }

    /// Re-hashes the bytes already in the file (a resumed partial).
    fn rehash(&mut self) -> Result<(), IngestError> {
        let path = self.staged.path().to_owned();
        let len = self
            .file
            .metadata()
            .map_err(io_err("read the size of", &path))?
            .len();
        if self.expected.as_ref().is_some_and(|(_, size)| len > *size) {
            return self.truncate();
        }
        self.file
            .seek(SeekFrom::Start(0))
            .map_err(io_err("rewind", &path))?;
        let mut buf = vec![0u8; 1 << 20];
        let mut reader = (&self.file).take(len);
        loop {
            let n = reader.read(&mut buf).map_err(io_err("re-read", &path))?;
            if n == 0 {
                break;
            }
            self.digester.update(&buf[..n]);
            self.written += n as u64;
        }
        Ok(())
    }

    /// Starts over: empties the file and the hash (a source that can only send the whole
    /// blob).
    pub fn truncate(&mut self) -> Result<(), IngestError> {
        self.file
            .set_len(0)
            .and_then(|()| self.file.seek(SeekFrom::Start(0)))
            .map_err(io_err("truncate", self.staged.path()))?;
        self.digester = self.digester.algorithm().digester();
        self.written = 0;
        Ok(())
    }

    /// Removes what was written (content known to be wrong). A failure is ignored.
    pub fn discard(self) {
        self.staged.remove();
    }

    /// Ends the writing: digest and size are known, nothing is published yet.
    pub fn finish(self) -> Result<StagedBlob, IngestError> {
        let Ingest {
            dir,
            file,
            staged,
            digester,
            written,
            expected,
        } = self;
        Ok(StagedBlob {
            dir,
            file,
            staged,
            digest: digester.finish(),
            size: written,
            expected,
        })
    }

    /// [`Ingest::finish`], then [`StagedBlob::commit`].
    pub fn commit(self, size: u64, expected: &Digest) -> Result<Published, IngestError> {
        self.finish()?.commit(size, expected)
    }
}

impl Write for Ingest {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if let Some((digest, size)) = &self.expected
            && self.written + buf.len() as u64 > *size
        {
            return Err(VerifyError::TooLong {
                expected_digest: digest.clone(),
                expected: *size,
            }
            .into());
        }
        let n = self.file.write(&buf[..buf.len().min(WRITE_PIECE)])?;
        self.digester.update(&buf[..n]);
        self.written += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.file.flush()
    }
}

/// A blob written in full and hashed, not yet published; see [`Ingest::finish`]. Dropped
/// without a commit it is kept when it was a partial file, removed otherwise.
#[derive(Debug)]
pub struct StagedBlob {
    dir: BlobDir,
    file: File,
    staged: Staged,
    digest: Digest,
    size: u64,
    expected: Option<(Digest, u64)>,
}

impl StagedBlob {
    /// The digest of the bytes written.
    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    /// The number of bytes written.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Publishes the blob if it has `size` bytes and then the digest `expected`: checks the
    /// size, then the digest (on a mismatch the staged file is removed and nothing is
    /// published), syncs the file and publishes it without clobbering.
    pub fn commit(self, size: u64, expected: &Digest) -> Result<Published, IngestError> {
        if self.size != size {
            let err = IngestError::SizeMismatch {
                path: self.staged.path().to_owned(),
                digest: expected.clone(),
                expected: size,
                found: self.size,
            };
            self.staged.remove();
            return Err(err);
        }
        if &self.digest != expected {
            let err = IngestError::DigestMismatch {
                path: self.staged.path().to_owned(),
                expected: expected.clone(),
                found: self.digest.clone(),
            };
            self.staged.remove();
            return Err(err);
        }
        self.publish_checked()
    }

    /// Publishes the blob under the digest of what was written (a blob named by its
    /// content), or, when the ingest was opened for an expected digest and size, commits
    /// against those.
    pub fn publish(self) -> Result<Published, IngestError> {
        match self.expected.clone() {
            Some((digest, size)) => self.commit(size, &digest),
            None => self.publish_checked(),
        }
    }

    fn publish_checked(self) -> Result<Published, IngestError> {
        let StagedBlob {
            dir,
            file,
            staged,
            digest,
            size,
            ..
        } = self;
        let src = staged.path().to_owned();
        file.sync_all().map_err(io_err("sync", &src))?;
        #[cfg(unix)]
        if dir.read_only {
            use std::os::unix::fs::PermissionsExt;
            file.set_permissions(fs::Permissions::from_mode(0o444))
                .map_err(io_err("make read-only", &src))?;
        }
        let dest = dir.blob_path(&digest);
        let parent = dest.parent().unwrap_or(&dir.root).to_owned();
        fs::create_dir_all(&parent).map_err(io_err("create directory", &parent))?;
        // A verified partial file is kept for the next attempt when publishing fails; a
        // temporary one goes.
        let keep_on_error = matches!(staged, Staged::Partial(_));
        let temp = match staged {
            Staged::Partial(p) => {
                tempfile::TempPath::try_from_path(p).map_err(io_err("publish", &src))?
            }
            Staged::Temp(t) => t,
        };
        let outcome = match temp.persist_noclobber(&dest) {
            Ok(()) => Published::New,
            Err(e) if e.error.kind() == io::ErrorKind::AlreadyExists => {
                let ours = e.path;
                match dir.existing {
                    Existing::Trust => {
                        let _ = ours.close();
                        Published::AlreadyThere
                    }
                    Existing::Check if holds(&dest, &digest, size) => {
                        let _ = ours.close();
                        Published::AlreadyThere
                    }
                    Existing::Check => {
                        // Damaged: the bytes just hashed take its place (an atomic rename, so
                        // a reader sees the old file or the new one).
                        ours.persist(&dest).map_err(|e| {
                            if keep_on_error {
                                let _ = e.path.keep();
                            }
                            io_err("replace a damaged blob at", &dest)(e.error)
                        })?;
                        Published::Replaced
                    }
                }
            }
            Err(e) => {
                if keep_on_error {
                    let _ = e.path.keep();
                }
                return Err(io_err("publish", &dest)(e.error));
            }
        };
        sync_dir(&parent);
        // The lock on a partial file is released only now, after its name is gone.
        drop(file);
        Ok(outcome)
    }
}

/// True when `path` holds `size` bytes with digest `digest` (read once).
fn holds(path: &Path, digest: &Digest, size: u64) -> bool {
    let Ok(f) = File::open(path) else {
        return false;
    };
    if !f.metadata().is_ok_and(|m| m.is_file() && m.len() == size) {
        return false;
    }
    let mut r = crate::verify::VerifyingReader::new(f, digest.clone(), size);
    io::copy(&mut r, &mut io::sink()).is_ok()
}

/// A temporary file that becomes a user-facing file by rename (layout files, blobs, a
/// lockfile, layer-cache entries). Created 0644 less the umask, as any other file the user
/// writes: tempfile's default of 0600 would leave files that only their writer can read (a
/// registry, a web server or a colleague could not).
fn temp_file_in(dir: &Path) -> io::Result<tempfile::NamedTempFile> {
    let mut b = tempfile::Builder::new();
    b.prefix(".tmp-");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(fs::Permissions::from_mode(0o644));
    }
    b.tempfile_in(dir)
}

/// Writes a small file atomically: an exclusive temporary file in the same directory
/// (0644 less the umask), synced, renamed over `dest`, the directory synced. A reader sees the
/// old content or the new, never a part.
pub fn write_file_atomic(dest: &Path, bytes: &[u8]) -> io::Result<()> {
    let dir = dest
        .parent()
        .filter(|d| !d.as_os_str().is_empty())
        .unwrap_or(Path::new("."));
    let mut tmp = temp_file_in(dir)?;
    tmp.write_all(bytes)?;
    tmp.as_file().sync_all()?;
    tmp.persist(dest).map_err(|e| e.error)?;
    sync_dir(dir);
    Ok(())
}

/// Makes a rename durable. Failure is not reported: the data is already published.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dir() -> (tempfile::TempDir, BlobDir) {
        let t = tempfile::tempdir().unwrap();
        let b = BlobDir::new(t.path(), t.path().join("ingest"));
        (t, b)
    }

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = fs::read_dir(dir)
            .map(|r| {
                r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }

    /// What the umask leaves of `mode`, seen on a file made the ordinary way.
    #[cfg(unix)]
    fn umasked(dir: &Path, mode: u32) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        let plain = dir.join("plain");
        fs::write(&plain, b"").unwrap();
        let m = fs::metadata(&plain).unwrap().permissions().mode() & 0o777;
        fs::remove_file(plain).unwrap();
        mode & m
    }

    #[cfg(unix)]
    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_large_write_goes_to_the_file_in_pieces_and_all_of_it_is_hashed() {
        let (_t, b) = dir();
        let data: Vec<u8> = (0..(3 * WRITE_PIECE + 5) as u32)
            .map(|i| (i % 251) as u8)
            .collect();
        let d = Digest::sha256(&data);
        let mut w = b.ingest(&d, data.len() as u64).unwrap();
        // One call takes one piece; write_all goes on with the rest.
        assert_eq!(w.write(&data).unwrap(), WRITE_PIECE);
        w.write_all(&data[WRITE_PIECE..]).unwrap();
        w.commit(data.len() as u64, &d).unwrap();
        assert!(fs::read(b.blob_path(&d)).unwrap() == data);
    }

    #[test]
    fn a_partial_ingest_is_resumed_and_rehashed() {
        let (_t, b) = dir();
        let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
        let d = Digest::sha256(&data);
        let size = data.len() as u64;
        let mut w = b.ingest(&d, size).unwrap();
        assert_eq!(w.offset(), 0);
        w.write_all(&data[..1_234_567]).unwrap();
        drop(w);
        // Dropped without a commit: the partial file stays, nothing is published.
        assert_eq!(
            names(b.staging()),
            [format!("sha256-{}.partial", d.encoded())]
        );
        assert!(!b.blob_path(&d).exists());
        let mut w = b.ingest(&d, size).unwrap();
        assert_eq!(w.offset(), 1_234_567);
        w.write_all(&data[1_234_567..]).unwrap();
        assert_eq!(w.commit(size, &d).unwrap(), Published::New);
        assert!(fs::read(b.blob_path(&d)).unwrap() == data);
        assert!(names(b.staging()).is_empty());
    }

    #[test]
    fn wrong_bytes_in_a_partial_fail_the_commit_and_go() {
        let (_t, b) = dir();
        let d = Digest::sha256(b"hello world");
        let mut w = b.ingest(&d, 11).unwrap();
        w.write_all(b"HELLO").unwrap();
        drop(w);
        let mut w = b.ingest(&d, 11).unwrap();
        assert_eq!(w.offset(), 5);
        w.write_all(b" world").unwrap();
        let err = w.commit(11, &d).unwrap_err();
        match &err {
            IngestError::DigestMismatch {
                expected, found, ..
            } => {
                assert_eq!(expected, &d);
                assert_eq!(found, &Digest::sha256(b"HELLO world"));
            }
            other => panic!("{other}"),
        }
        assert!(!b.blob_path(&d).exists());
        assert!(names(b.staging()).is_empty(), "the partial file is removed");
        // The next attempt starts over and succeeds.
        let mut w = b.ingest(&d, 11).unwrap();
        assert_eq!(w.offset(), 0);
        w.write_all(b"hello world").unwrap();
        assert_eq!(w.commit(11, &d).unwrap(), Published::New);
    }

    #[test]
    fn a_partial_longer_than_the_blob_is_started_over() {
        let (_t, b) = dir();
        let d = Digest::sha256(b"abc");
        fs::create_dir_all(b.staging()).unwrap();
        fs::write(b.partial_path(&d), b"abcdef").unwrap();
        let mut w = b.ingest(&d, 3).unwrap();
        assert_eq!(w.offset(), 0);
        w.write_all(b"abc").unwrap();
        assert_eq!(w.commit(3, &d).unwrap(), Published::New);
        assert_eq!(fs::read(b.blob_path(&d)).unwrap(), b"abc");
    }

    #[test]
    fn a_size_mismatch_names_both_sizes_and_publishes_nothing() {
        let (_t, b) = dir();
        let d = Digest::sha256(b"hello");
        let mut w = b.ingest_unnamed(Algorithm::Sha256).unwrap();
        w.write_all(b"hell").unwrap();
        let err = w.commit(5, &d).unwrap_err();
        assert!(
            matches!(&err, IngestError::SizeMismatch { expected: 5, found: 4, digest, .. } if digest == &d),
            "{err}"
        );
        let msg = err.to_string();
        assert!(msg.contains("4 bytes") && msg.contains("expected 5") && msg.contains(d.as_str()));
        assert_eq!(
            err.verify_error(),
            Some(VerifyError::TooShort {
                expected_digest: d.clone(),
                expected: 5,
                found: 4
            })
        );
        assert!(!b.blob_path(&d).exists());
        assert!(names(b.staging()).is_empty());
    }

    #[test]
    fn a_digest_mismatch_names_both_digests_and_removes_the_partial() {
        let (_t, b) = dir();
        let want = Digest::sha256(b"hello");
        let mut w = b.ingest(&want, 5).unwrap();
        w.write_all(b"hellO").unwrap();
        let err = w.commit(5, &want).unwrap_err();
        let msg = err.to_string();
        let found = Digest::sha256(b"hellO");
        assert!(
            msg.contains(want.as_str()) && msg.contains(found.as_str()),
            "{msg}"
        );
        assert!(
            msg.contains(".partial"),
            "the message names the file: {msg}"
        );
        assert!(!b.blob_path(&want).exists());
        assert!(!b.blob_path(&found).exists());
        assert!(names(b.staging()).is_empty());
    }

    #[test]
    fn writes_past_the_expected_size_are_refused() {
        let (_t, b) = dir();
        let d = Digest::sha256(b"hello");
        let mut w = b.ingest(&d, 5).unwrap();
        let err = w.write_all(b"hello!").unwrap_err();
        assert!(matches!(
            VerifyError::from_io(&err),
            Some(VerifyError::TooLong { expected: 5, .. })
        ));
        assert_eq!(w.offset(), 0);
        w.discard();
        assert!(names(b.staging()).is_empty());
    }

    #[test]
    fn a_blob_already_there_is_success() {
        let (_t, b) = dir();
        let d = Digest::sha256(b"same");
        for (i, want) in [Published::New, Published::AlreadyThere]
            .into_iter()
            .enumerate()
        {
            let mut w = if i == 0 {
                b.ingest(&d, 4).unwrap()
            } else {
                b.ingest_unnamed(Algorithm::Sha256).unwrap()
            };
            w.write_all(b"same").unwrap();
            assert_eq!(w.commit(4, &d).unwrap(), want);
        }
        assert_eq!(fs::read(b.blob_path(&d)).unwrap(), b"same");
        assert!(names(b.staging()).is_empty());
    }

    #[test]
    fn a_damaged_blob_is_replaced_only_when_checked() {
        let (_t, b) = dir();
        let d = Digest::sha256(b"good");
        let path = b.blob_path(&d);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        // Trusted: present means verified, the file is kept as found.
        fs::write(&path, b"bad!").unwrap();
        let mut w = b.ingest(&d, 4).unwrap();
        w.write_all(b"good").unwrap();
        assert_eq!(w.commit(4, &d).unwrap(), Published::AlreadyThere);
        assert_eq!(fs::read(&path).unwrap(), b"bad!");
        // Checked: the same size with other bytes, and another size, are both replaced by the
        // bytes just hashed; a good file is kept.
        let b = b.on_existing(Existing::Check);
        for (found, want) in [
            (&b"bad!"[..], Published::Replaced),
            (&b"longer"[..], Published::Replaced),
            (&b"good"[..], Published::AlreadyThere),
        ] {
            fs::write(&path, found).unwrap();
            let mut w = b.ingest_unnamed(Algorithm::Sha256).unwrap();
            w.write_all(b"good").unwrap();
            assert_eq!(w.finish().unwrap().publish().unwrap(), want);
            assert_eq!(fs::read(&path).unwrap(), b"good");
        }
        assert!(names(b.staging()).is_empty());
    }

    #[test]
    fn concurrent_publishers_of_one_digest_both_succeed_with_one_file() {
        let data: Vec<u8> = (0..2_000_000u32).map(|i| (i % 241) as u8).collect();
        let d = Digest::sha256(&data);
        for existing in [Existing::Trust, Existing::Check] {
            let (t, b) = dir();
            let b = b.on_existing(existing);
            let barrier = std::sync::Barrier::new(4);
            let outcomes: Vec<Published> = std::thread::scope(|s| {
                let hs: Vec<_> = (0..4)
                    .map(|_| {
                        s.spawn(|| {
                            let mut w = b.ingest(&d, data.len() as u64).unwrap();
                            barrier.wait();
                            for c in data.chunks(64 * 1024) {
                                w.write_all(c).unwrap();
                            }
                            w.commit(data.len() as u64, &d).unwrap()
                        })
                    })
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap()).collect()
            });
            assert_eq!(
                outcomes.iter().filter(|o| **o == Published::New).count(),
                1,
                "{outcomes:?}"
            );
            assert_eq!(names(&t.path().join("blobs/sha256")), [d.encoded()]);
            assert!(fs::read(b.blob_path(&d)).unwrap() == data);
            assert!(names(b.staging()).is_empty(), "{:?}", names(b.staging()));
        }
    }

    #[test]
    fn an_unnamed_ingest_dropped_leaves_nothing() {
        let (_t, b) = dir();
        let mut w = b.ingest_unnamed(Algorithm::Sha512).unwrap();
        w.write_all(b"abandoned").unwrap();
        let staged = w.finish().unwrap();
        assert_eq!(
            staged.digest(),
            &Digest::of(Algorithm::Sha512, b"abandoned")
        );
        drop(staged);
        assert!(names(b.staging()).is_empty());
        assert!(!b.root().join("blobs").exists());
    }

    #[cfg(unix)]
    #[test]
    fn files_are_0644_less_the_umask_and_read_only_on_request() {
        let (t, b) = dir();
        let d = Digest::sha256(b"x");
        let mut w = b.ingest(&d, 1).unwrap();
        assert_eq!(mode(w.path()), umasked(t.path(), 0o644), "partial file");
        w.write_all(b"x").unwrap();
        let _ = w.commit(1, &d).unwrap();
        assert_eq!(mode(&b.blob_path(&d)), umasked(t.path(), 0o644));
        let w = b.ingest_unnamed(Algorithm::Sha256).unwrap();
        assert_eq!(mode(w.path()), umasked(t.path(), 0o644), "temporary file");
        drop(w);
        let ro = b.clone().read_only(true);
        let d = Digest::sha256(b"y");
        let mut w = ro.ingest(&d, 1).unwrap();
        w.write_all(b"y").unwrap();
        let _ = w.commit(1, &d).unwrap();
        assert_eq!(mode(&ro.blob_path(&d)), 0o444);
        let f = t.path().join("file.json");
        write_file_atomic(&f, b"{}").unwrap();
        assert_eq!(mode(&f), umasked(t.path(), 0o644));
        assert_eq!(fs::read(&f).unwrap(), b"{}");
    }

    #[test]
    fn partial_names_round_trip() {
        let (_t, b) = dir();
        let d = Digest::sha256(b"n");
        let p = b.partial_path(&d);
        let name = p.file_name().unwrap().to_str().unwrap();
        assert_eq!(BlobDir::digest_of_partial(name), Some(d));
        assert_eq!(BlobDir::digest_of_partial(".tmp-abc"), None);
        assert_eq!(BlobDir::digest_of_partial("md5-00.partial"), None);
    }
}
