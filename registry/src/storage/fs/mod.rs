//! The filesystem store: the embedded default.
//!
//! Every key is a relative path under the root. Documents are written to a temporary file under
//! `<root>/.tmp`, fsynced (unless not durable: see [`durable`]) and renamed into place, under one of 256 stripe locks in
//! `<root>/.stripes` (chosen by a hash of the key) so that conditional writes are atomic across
//! threads and processes sharing the directory; a holder that keeps one too long (a stopped
//! process) has it revoked (see `stripe.rs`). Staging areas are plain files at their key, held
//! with an exclusive `flock` while a writer has them open; a commit hard-links the staging file to
//! the destination (which fails if the destination exists, so publishing never overwrites) and
//! then unlinks the staging name. Keys never start a segment with `.`, so the helper directories
//! cannot collide with stored keys.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;

use futures_util::{StreamExt, stream};

use super::{
    BoxFuture, BoxReader, ByteStream, Document, Etag, Key, ObjectMeta, PutMode, Store, StoreError,
    StoreResult, StoreWriter, layout, past_end,
};

mod stripe;
mod window;
mod writer;

use window::{Window, map_window};
use writer::FsWriter;

const NAME: &str = "fs";
const LOCK_STRIPES: u32 = 256;
/// How long opening a staging area waits for a just-dropped writer to let go of it.
const LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Whether a document written with `mode` at `key` is made durable (its file and directory
/// `fsync`ed) before the write returns. Two kinds are not, each saving the two `fsync`s that
/// dominated a small push on this store:
/// - a stamp (see `PutMode::Stamp`);
/// - an upload session's state ([`layout::is_upload`]). After a machine crash it may be older
///   than the last PATCH or gone: the staging bytes past its offset are cut off on the next
///   resume, and a lost or torn state answers `BLOB_UPLOAD_UNKNOWN`, so the client starts the
///   upload again. The staging bytes themselves are still synced before a state that counts
///   them is written (`FsWriter::suspend`), so a state never claims bytes that are not on disk,
///   which a digest check alone could not catch (the hash state covers them unread).
fn durable(key: &Key, mode: &PutMode) -> bool {
    !matches!(mode, PutMode::Stamp) && !layout::is_upload(key)
}

/// A [`Store`] on a local directory.
#[derive(Debug, Clone)]
pub struct FsStore {
    inner: Arc<Inner>,
    /// Blob reads of at least this many bytes go out with `sendfile` (see [`Window`]); `None`
    /// when the connections cannot send from files (TLS, `sendfile = false`).
    send_from: Option<u64>,
}

#[derive(Debug)]
struct Inner {
    root: PathBuf,
    /// The version (content hash) of documents as last read, by the identity of the file that
    /// held it, for [`Store::get_if_changed`]: a document is replaced by renaming a new file
    /// over it, so a file with the same inode, size and times still holds the same bytes, and a
    /// `stat` answers "unchanged" without reading and hashing the document. Only files last
    /// changed more than [`RACY_MARGIN`] before the read are remembered (see there).
    versions: std::sync::Mutex<std::collections::HashMap<Key, (FileId, Etag)>>,
    /// When a staging write last took too long on an async worker (see `writer.rs`), for
    /// every writer of the store to write on blocking threads for a while.
    slow_writes: writer::SlowWrites,
    /// The stripe locks of conditional writes and deletes (see [`Inner::lock`]).
    stripes: stripe::Stripes,
}

/// How long one holder may keep a stripe lock before a waiter revokes it: the holder's
/// critical section is a read, a compare and two renames (microseconds), so a holder this slow
/// is stopped (SIGSTOP, a debugger, ctrl-z on an `rdctl` sharing the directory) or stalled. A
/// second is well inside the shortest garbage-collection lease (2 s), so no request waits
/// behind a stopped collector for longer than its lease.
const STRIPE_REVOKE_AFTER: std::time::Duration = std::time::Duration::from_secs(1);

/// What identifies one version of a document file (see `Inner::versions`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileId {
    dev: u64,
    ino: u64,
    size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
}

impl FileId {
    fn of(m: &fs::Metadata) -> FileId {
        use std::os::unix::fs::MetadataExt as _;
        FileId {
            dev: m.dev(),
            ino: m.ino(),
            size: m.size(),
            mtime_ns: i128::from(m.mtime()) * 1_000_000_000 + i128::from(m.mtime_nsec()),
            ctime_ns: i128::from(m.ctime()) * 1_000_000_000 + i128::from(m.ctime_nsec()),
        }
    }

    /// Whether the file's last change is more than [`RACY_MARGIN`] in the past (a file time in
    /// the future, after a clock step, is not).
    fn settled(&self) -> bool {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos() as i128);
        now - self.mtime_ns.max(self.ctime_ns) > RACY_MARGIN.as_nanos() as i128
    }
}

/// A document file changed less than this before it was read is read again by the next
/// [`Store::get_if_changed`] instead of being trusted by its identity. File times tick
/// coarsely (a few ms on ext4 and ZFS), and a freed inode number is soon handed out again: two
/// versions of the same size written within one tick into a reused inode would look the same
/// to a `stat`. A version remembered only once its file is older than this margin cannot meet
/// that twin, since any later write carries a later time (git's "racy clean" rule).
const RACY_MARGIN: std::time::Duration = std::time::Duration::from_millis(100);
/// Versions remembered at most (forgotten all at once beyond it; a forgotten one costs a read).
const VERSION_ENTRIES: usize = 4096;

impl FsStore {
    /// Opens (creating if needed) a store rooted at `root`.
    pub fn open(root: impl Into<PathBuf>) -> io::Result<FsStore> {
        let root = root.into();
        fs::create_dir_all(root.join(".tmp"))?;
        let stripes = stripe::Stripes::open(root.join(".stripes"), STRIPE_REVOKE_AFTER)?;
        Ok(FsStore {
            inner: Arc::new(Inner {
                root,
                versions: Default::default(),
                slow_writes: Default::default(),
                stripes,
            }),
            send_from: None,
        })
    }

    /// Makes blob reads (`Store::read_chunks`) of at least `min` bytes windows that a plain
    /// TCP connection sends with `sendfile`, and smaller ones pre-faulted mappings that it
    /// copies from; `None` (the default) copies every read.
    #[must_use]
    pub fn send_from_file(mut self, min: Option<u64>) -> FsStore {
        self.send_from = min;
        self
    }

    /// The root directory.
    pub fn root(&self) -> &Path {
        &self.inner.root
    }
}

fn backend(key: &Key, source: io::Error) -> StoreError {
    StoreError::Backend {
        store: NAME,
        key: key.as_str().to_owned(),
        source,
    }
}

fn not_found(key: &Key) -> StoreError {
    StoreError::NotFound {
        store: NAME,
        key: key.clone(),
    }
}

fn map_io(key: &Key, e: io::Error) -> StoreError {
    if e.kind() == io::ErrorKind::NotFound {
        not_found(key)
    } else {
        backend(key, e)
    }
}

fn etag_of(bytes: &[u8]) -> Etag {
    Etag(validator::Digest::sha256(bytes).encoded().to_owned())
}

/// Opens a stored object for reading, with its size and time (a directory is not an object).
fn open_object(inner: &Inner, k: &Key) -> StoreResult<(File, ObjectMeta)> {
    let f = File::open(inner.path(k)).map_err(|e| map_io(k, e))?;
    let m = f.metadata().map_err(|e| backend(k, e))?;
    if m.is_dir() {
        return Err(not_found(k));
    }
    let meta = ObjectMeta {
        size: m.len(),
        modified: m.modified().map_err(|e| backend(k, e))?,
    };
    Ok((f, meta))
}

/// Runs blocking filesystem work off the async threads.
async fn blocking<T: Send + 'static>(
    key: &Key,
    f: impl FnOnce() -> StoreResult<T> + Send + 'static,
) -> StoreResult<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(backend(key, io::Error::other(e))),
    }
}

fn sync_dir(dir: &Path) -> io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Creates `path`'s parent directories (again, if a concurrent delete pruned them) and runs `op`.
///
/// Another request's [`Inner::prune`] can remove an ancestor that just became empty while this
/// one creates it (`create_dir_all` makes `uploads/`, a finished upload's prune removes it,
/// and the `mkdir` of `uploads/ID` below it fails), so a parent that vanished while being
/// made counts as one more try, not a failure (before this, `bench/run.sh`'s four clients
/// pushing 1 MiB blobs got a 500 on an upload's POST).
fn with_parent<T>(path: &Path, mut op: impl FnMut() -> io::Result<T>) -> io::Result<T> {
    const PARENT_TRIES: u32 = 8;
    let parent = path.parent().expect("keys have a parent under the root");
    let mut tries = 0;
    loop {
        match op() {
            Err(e) if e.kind() == io::ErrorKind::NotFound && tries < PARENT_TRIES => {
                tries += 1;
                match fs::create_dir_all(parent) {
                    // Removed between two of its `mkdir`s (NotFound), or between a `mkdir`
                    // that found it and the check that it is a directory (AlreadyExists).
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::NotFound | io::ErrorKind::AlreadyExists
                        ) && tries < PARENT_TRIES => {}
                    r => r?,
                }
            }
            other => return other,
        }
    }
}

impl Inner {
    fn path(&self, key: &Key) -> PathBuf {
        self.root.join(key.as_str())
    }

    /// Takes the stripe lock of `key`.
    fn lock(&self, key: &Key) -> io::Result<stripe::Held> {
        let digest = validator::Digest::sha256(key.as_str().as_bytes());
        let stripe = u32::from_str_radix(&digest.encoded()[..4], 16).unwrap_or(0) % LOCK_STRIPES;
        self.stripes.lock(stripe)
    }

    fn temp_path(&self) -> PathBuf {
        self.root
            .join(".tmp")
            .join(uuid::Uuid::new_v4().as_simple().to_string())
    }

    fn read_doc(&self, key: &Key, limit: u64) -> StoreResult<Document> {
        self.read_doc_id(key, limit).map(|(doc, _)| doc)
    }

    /// Whether the document at `key` is still the version whose etag is `known`: its file's
    /// identity (one `stat`) equals the settled identity recorded with that etag.
    fn unchanged(&self, key: &Key, known: &Etag) -> StoreResult<bool> {
        let meta = fs::metadata(self.path(key)).map_err(|e| map_io(key, e))?;
        if meta.is_dir() {
            return Err(not_found(key));
        }
        let id = FileId::of(&meta);
        let versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
        Ok(versions
            .get(key)
            .is_some_and(|(i, e)| *i == id && e == known))
    }

    /// The read half of [`Store::get_if_changed`], once [`Inner::unchanged`] said no: the
    /// document (`None` when its bytes are still those of `known` after all), its file's
    /// identity recorded with its etag once the file is settled.
    fn read_changed(&self, key: &Key, limit: u64, known: &Etag) -> StoreResult<Option<Document>> {
        let (doc, id) = self.read_doc_id(key, limit)?;
        if id.settled() {
            let mut versions = self.versions.lock().unwrap_or_else(|e| e.into_inner());
            if versions.len() >= VERSION_ENTRIES {
                versions.clear();
            }
            versions.insert(key.clone(), (id, doc.etag.clone()));
        }
        Ok((doc.etag != *known).then_some(doc))
    }

    /// A document with the identity of the file it was read from (`fstat` of the open file,
    /// so the two always belong together).
    fn read_doc_id(&self, key: &Key, limit: u64) -> StoreResult<(Document, FileId)> {
        let path = self.path(key);
        let mut f = File::open(&path).map_err(|e| map_io(key, e))?;
        let meta = f.metadata().map_err(|e| backend(key, e))?;
        if meta.is_dir() {
            return Err(not_found(key));
        }
        if meta.len() > limit {
            return Err(StoreError::TooLarge {
                store: NAME,
                key: key.clone(),
                limit,
            });
        }
        let mut buf = Vec::with_capacity(meta.len() as usize);
        Read::by_ref(&mut f)
            .take(limit.saturating_add(1))
            .read_to_end(&mut buf)
            .map_err(|e| backend(key, e))?;
        if buf.len() as u64 > limit {
            return Err(StoreError::TooLarge {
                store: NAME,
                key: key.clone(),
                limit,
            });
        }
        let etag = etag_of(&buf);
        Ok((
            Document {
                bytes: Bytes::from(buf),
                etag,
            },
            FileId::of(&meta),
        ))
    }

    fn put_doc(&self, key: &Key, bytes: &[u8], mode: &PutMode) -> StoreResult<Etag> {
        // The new version is written and made durable before the stripe lock is taken: the
        // lock covers only the check and the rename, so a process stopped while it holds the
        // lock is rare, and every other request waits microseconds, not an fsync.
        let tmp = self.temp_path();
        let durable = durable(key, mode);
        let written = (|| {
            let mut f = File::create_new(&tmp)?;
            f.write_all(bytes)?;
            if durable {
                f.sync_all()?;
            }
            Ok(())
        })();
        if let Err(e) = written {
            let _ = fs::remove_file(&tmp);
            return Err(backend(key, e));
        }
        let r = self.put_locked(key, &tmp, mode);
        if r.is_err() {
            let _ = fs::remove_file(&tmp);
        }
        r?;
        if durable {
            let path = self.path(key);
            sync_dir(path.parent().expect("parent")).map_err(|e| backend(key, e))?;
        }
        Ok(etag_of(bytes))
    }

    /// The part of [`Inner::put_doc`] under the stripe lock: the mode's check, then the rename
    /// of the durable temporary file `tmp` into place.
    fn put_locked(&self, key: &Key, tmp: &Path, mode: &PutMode) -> StoreResult<()> {
        let lock = self.lock(key).map_err(|e| backend(key, e))?;
        let path = self.path(key);
        match mode {
            PutMode::Create => {
                if path.exists() {
                    return Err(StoreError::AlreadyExists {
                        store: NAME,
                        key: key.clone(),
                    });
                }
            }
            PutMode::Replace(want) => {
                let current = match self.read_doc(key, u64::MAX) {
                    Ok(doc) => doc.etag,
                    Err(StoreError::NotFound { .. }) => {
                        return Err(StoreError::PreconditionFailed {
                            store: NAME,
                            key: key.clone(),
                            reason: "the document is gone".to_owned(),
                        });
                    }
                    Err(e) => return Err(e),
                };
                if &current != want {
                    return Err(StoreError::PreconditionFailed {
                        store: NAME,
                        key: key.clone(),
                        reason: "the document changed".to_owned(),
                    });
                }
            }
            PutMode::Overwrite | PutMode::Stamp => {}
        }
        // Through the lock, so that a holder stopped here and revoked changes nothing later.
        let staged = lock.stage(tmp).map_err(|e| backend(key, e))?;
        let published = with_parent(&path, || lock.publish(&staged, &path));
        if published.is_err() {
            lock.unstage(&staged, tmp);
        }
        published.map_err(|e| backend(key, e))
    }

    /// Removes empty directories from `path`'s parent up to (not including) the root.
    fn prune(&self, path: &Path) {
        let mut dir = path.parent();
        while let Some(d) = dir {
            if d == self.root || fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
    }

    /// Appends to `out`, in key order, the keys under directory `dir` (whose key prefix is
    /// `rel`, ending in `/`) that sort after `after`, until `out` holds `limit`. Entries of a
    /// directory are ordered as their keys are: a subdirectory by its name followed by `/`.
    /// A subdirectory whose keys all sort at or before `after` is not read.
    fn page_into(
        &self,
        dir: &Path,
        rel: &str,
        after: Option<&str>,
        limit: usize,
        out: &mut Vec<Key>,
    ) -> io::Result<()> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry?;
            let Ok(name) = entry.file_name().into_string() else {
                continue;
            };
            let mut sort = format!("{rel}{name}");
            if entry.file_type()?.is_dir() {
                sort.push('/');
            }
            names.push(sort);
        }
        names.sort_unstable();
        for path in names {
            if out.len() >= limit {
                break;
            }
            if let Some(sub) = path.strip_suffix('/') {
                // Every key below starts with `path`: all of them are at or before `after`
                // when `after` sorts after `path` without starting with it.
                if after.is_some_and(|a| a > path.as_str() && !a.starts_with(path.as_str())) {
                    continue;
                }
                self.page_into(&self.root.join(sub), &path, after, limit, out)?;
            } else if after.is_none_or(|a| path.as_str() > a)
                && let Ok(k) = Key::new(path)
            {
                out.push(k);
            }
        }
        Ok(())
    }

    fn list_into(&self, dir: &Path, out: &mut Vec<Key>) -> io::Result<()> {
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
        for entry in entries {
            let entry = entry?;
            let ty = entry.file_type()?;
            let path = entry.path();
            if ty.is_dir() {
                self.list_into(&path, out)?;
            } else if let Ok(rel) = path.strip_prefix(&self.root)
                && let Some(rel) = rel.to_str()
                && let Ok(k) = Key::new(rel)
            {
                out.push(k);
            }
        }
        Ok(())
    }
}

impl Store for FsStore {
    fn name(&self) -> &'static str {
        NAME
    }

    fn staging_readable(&self) -> bool {
        true
    }

    fn get<'a>(&'a self, key: &'a Key, limit: u64) -> BoxFuture<'a, StoreResult<Document>> {
        let inner = self.inner.clone();
        let k = key.clone();
        Box::pin(blocking(key, move || inner.read_doc(&k, limit)))
    }

    fn get_if_changed<'a>(
        &'a self,
        key: &'a Key,
        limit: u64,
        known: &'a Etag,
    ) -> BoxFuture<'a, StoreResult<Option<Document>>> {
        let inner = self.inner.clone();
        let (k, known) = (key.clone(), known.clone());
        Box::pin(async move {
            // The common answer of a manifest HEAD/GET by tag ("the tag index is the version
            // the cache holds") is one `stat` and a map lookup: answered here, as `stat` below
            // is. A hop to the blocking pool and back costs more than the syscall does when the
            // inode is cached, which it is for every document a registry serves often; an
            // uncached one holds this worker for one inode read. Reading a changed document
            // stays on the blocking pool.
            if inner.unchanged(&k, &known)? {
                return Ok(None);
            }
            let key = k.clone();
            blocking(&key, move || inner.read_changed(&k, limit, &known)).await
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a Key,
        bytes: Bytes,
        mode: PutMode,
    ) -> BoxFuture<'a, StoreResult<Etag>> {
        let inner = self.inner.clone();
        let k = key.clone();
        Box::pin(blocking(key, move || inner.put_doc(&k, &bytes, &mode)))
    }

    fn read<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
    ) -> BoxFuture<'a, StoreResult<(ObjectMeta, BoxReader)>> {
        let inner = self.inner.clone();
        let k = key.clone();
        Box::pin(async move {
            let (meta, file) = blocking(key, move || {
                let (mut f, meta) = open_object(&inner, &k)?;
                if offset > meta.size {
                    return Err(StoreError::PreconditionFailed {
                        store: NAME,
                        key: k.clone(),
                        reason: format!("offset {offset} is past the end ({} bytes)", meta.size),
                    });
                }
                f.seek(SeekFrom::Start(offset))
                    .map_err(|e| backend(&k, e))?;
                Ok((meta, f))
            })
            .await?;
            let reader: BoxReader = Box::pin(tokio::fs::File::from_std(file));
            Ok((meta, reader))
        })
    }

    /// Blob GETs: the socket is handed mapped windows of the file, so the kernel copies page
    /// cache to socket once and no byte passes through a user-space buffer (with `tokio::fs`
    /// every 256 KiB took a blocking-thread round trip and two copies, and a large pull ran at
    /// two thirds of a `sendfile` server's rate). Only for committed objects: see [`map_window`].
    fn read_chunks<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'a, StoreResult<(ObjectMeta, ByteStream)>> {
        let inner = self.inner.clone();
        let k = key.clone();
        let how = match self.send_from {
            Some(min) if len >= min => Window::Sent,
            _ => Window::Copied,
        };
        Box::pin(async move {
            // Opening and the first window share one blocking call: a blob of up to one
            // window costs a single thread hop.
            let (meta, file, first) = blocking(key, move || {
                let (f, meta) = open_object(&inner, &k)?;
                if offset.saturating_add(len) > meta.size {
                    return Err(past_end(NAME, &k, offset, len, meta.size));
                }
                let f = Arc::new(f);
                let first =
                    map_window(&f, offset, len.min(how.size()), how).map_err(|e| backend(&k, e))?;
                Ok((meta, f, first))
            })
            .await?;
            let end = offset + len;
            let rest = (offset + first.len() as u64..end)
                .step_by(how.size() as usize)
                .map(move |start| {
                    let f = file.clone();
                    let n = (end - start).min(how.size());
                    async move {
                        tokio::task::spawn_blocking(move || map_window(&f, start, n, how))
                            .await
                            .unwrap_or_else(|e| Err(io::Error::other(e)))
                    }
                });
            let body = stream::once(async move { Ok(first) }).chain(stream::iter(rest).buffered(2));
            Ok((meta, Box::pin(body) as ByteStream))
        })
    }

    fn writer<'a>(
        &'a self,
        staging: &'a Key,
        resume_at: Option<u64>,
    ) -> BoxFuture<'a, StoreResult<Box<dyn StoreWriter>>> {
        let inner = self.inner.clone();
        let k = staging.clone();
        Box::pin(async move {
            let path = inner.path(&k);
            let p = path.clone();
            let k2 = k.clone();
            let (file, size) = blocking(&k, move || {
                let mut opts = OpenOptions::new();
                opts.write(true).truncate(false);
                if resume_at.is_none() {
                    opts.create(true);
                }
                let f = with_parent(&p, || opts.open(&p)).map_err(|e| map_io(&k2, e))?;
                // A writer dropped a moment ago (its request ended or was cut off) can still
                // hold the lock: its last batch may be being written on a blocking thread,
                // which owns the file until the write is done. Wait that out, briefly; a live
                // writer keeps the lock far longer and the caller is refused.
                let deadline = std::time::Instant::now() + LOCK_WAIT;
                loop {
                    match f.try_lock() {
                        Ok(()) => break,
                        Err(fs::TryLockError::WouldBlock)
                            if std::time::Instant::now() < deadline =>
                        {
                            std::thread::sleep(std::time::Duration::from_millis(5));
                        }
                        Err(fs::TryLockError::WouldBlock) => {
                            return Err(StoreError::PreconditionFailed {
                                store: NAME,
                                key: k2.clone(),
                                reason: "another writer has the staging area open".to_owned(),
                            });
                        }
                        Err(fs::TryLockError::Error(e)) => return Err(backend(&k2, e)),
                    }
                }
                let len = f.metadata().map_err(|e| backend(&k2, e))?.len();
                let at = resume_at.unwrap_or(0);
                if len < at {
                    return Err(StoreError::PreconditionFailed {
                        store: NAME,
                        key: k2.clone(),
                        reason: format!("staging area holds {len} bytes, resume needs {at}"),
                    });
                }
                f.set_len(at).map_err(|e| backend(&k2, e))?;
                Ok((f, at))
            })
            .await?;
            let w: Box<dyn StoreWriter> = Box::new(FsWriter::new(inner, k, path, file, size));
            Ok(w)
        })
    }

    fn stat<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, StoreResult<ObjectMeta>> {
        // One `stat`, on this worker: see `get_if_changed` for why it is not worth a hop to
        // the blocking pool (a HEAD of a blob or manifest is this call alone).
        Box::pin(async move {
            let m = fs::metadata(self.inner.path(key)).map_err(|e| map_io(key, e))?;
            if m.is_dir() {
                return Err(not_found(key));
            }
            Ok(ObjectMeta {
                size: m.len(),
                modified: m.modified().map_err(|e| backend(key, e))?,
            })
        })
    }

    fn list<'a>(&'a self, prefix: &'a Key) -> BoxFuture<'a, StoreResult<Vec<Key>>> {
        let inner = self.inner.clone();
        let k = prefix.clone();
        Box::pin(blocking(prefix, move || {
            let mut out = Vec::new();
            let path = inner.path(&k);
            if path.is_file() {
                out.push(k.clone());
            } else {
                inner
                    .list_into(&path, &mut out)
                    .map_err(|e| backend(&k, e))?;
            }
            out.sort();
            Ok(out)
        }))
    }

    fn list_page<'a>(
        &'a self,
        prefix: &'a Key,
        start_after: Option<&'a Key>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Key>>> {
        let inner = self.inner.clone();
        let k = prefix.clone();
        let after = start_after.map(|a| a.as_str().to_owned());
        Box::pin(blocking(prefix, move || {
            let mut out = Vec::new();
            let rel = format!("{}/", k.as_str());
            inner
                .page_into(&inner.path(&k), &rel, after.as_deref(), limit, &mut out)
                .map_err(|e| backend(&k, e))?;
            Ok(out)
        }))
    }

    fn delete<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, StoreResult<()>> {
        let inner = self.inner.clone();
        let k = key.clone();
        Box::pin(blocking(key, move || {
            let path = inner.path(&k);
            {
                let lock = inner.lock(&k).map_err(|e| backend(&k, e))?;
                if path.is_dir() {
                    return Err(not_found(&k));
                }
                lock.remove(&path).map_err(|e| map_io(&k, e))?;
            }
            // Outside the lock: pruning races with creation anyway (see `with_parent`).
            inner.prune(&path);
            Ok(())
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A stripe lock kept too long (its holder stopped or stalled) is revoked: the waiting write
    /// goes through, and the old holder's pending rename then fails with a retryable error and
    /// changes nothing (its new version's bytes are removed, not published).
    /// A stamp replaces what is there like an overwrite (only its durability differs), and goes
    /// through the stripe lock: no temporary file is left behind.
    #[test]
    fn a_stamp_is_an_overwrite_that_leaves_nothing_behind() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        let key = Key::new("blobs/sha256/ab/abcd/used").unwrap();
        for body in [&b"{\"at\":1}"[..], b"{\"at\":2}"] {
            let etag = store.inner.put_doc(&key, body, &PutMode::Stamp).unwrap();
            let doc = store.inner.read_doc(&key, 1 << 10).unwrap();
            assert_eq!((doc.bytes.as_ref(), doc.etag), (body, etag));
        }
        let tmp = std::fs::read_dir(dir.path().join(".tmp")).unwrap().count();
        assert_eq!(tmp, 0);
    }

    /// A read of at least `send_from_file`'s size hands out registered windows (the
    /// connection finds their file and sends from it); a shorter one, or any read without the
    /// setting, plain mappings that are copied.
    #[tokio::test]
    async fn reads_from_the_sendfile_size_on_are_registered_windows() {
        let dir = tempfile::tempdir().unwrap();
        let key = Key::new("blobs/sha256/cd/cdef/data").unwrap();
        let plain = FsStore::open(dir.path()).unwrap();
        let path = plain.inner.path(&key);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(&path, vec![5u8; 8192]).unwrap();
        let store = plain.clone().send_from_file(Some(4096));
        let first = |store: FsStore, offset: u64, len: u64| {
            let key = key.clone();
            async move {
                let (_, mut body) = store.read_chunks(&key, offset, len).await.unwrap();
                body.next().await.unwrap().unwrap()
            }
        };
        let sent = first(store.clone(), 100, 4096).await;
        assert_eq!(sent.len(), 4096);
        let (_, at) = super::super::file_region::lookup(&sent).expect("a registered window");
        assert_eq!(at, 100);
        for copied in [first(store, 100, 4095).await, first(plain, 0, 8192).await] {
            assert!(copied.iter().all(|&b| b == 5));
            assert!(super::super::file_region::lookup(&copied).is_none());
        }
    }

    #[test]
    fn a_stripe_lock_kept_too_long_is_revoked_and_its_holder_changes_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = FsStore::open(dir.path()).unwrap();
        Arc::get_mut(&mut store.inner).unwrap().stripes.revoke_after =
            std::time::Duration::from_millis(200);
        let key = Key::new("repositories/a/_tags").unwrap();
        let stale = store.inner.lock(&key).unwrap();
        let started = std::time::Instant::now();
        store
            .inner
            .put_doc(&key, b"new", &PutMode::Overwrite)
            .unwrap();
        assert!(started.elapsed() >= std::time::Duration::from_millis(200));
        assert!(started.elapsed() < std::time::Duration::from_secs(3));

        // The stale holder goes on with the write it had checked.
        let tmp = store.inner.temp_path();
        fs::write(&tmp, b"late").unwrap();
        let err = stale.stage(&tmp).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::TimedOut, "{err}");
        assert!(err.to_string().contains("took it over"), "{err}");
        let path = store.inner.path(&key);
        assert!(stale.remove(&path).is_err());
        drop(stale);
        assert_eq!(store.inner.read_doc(&key, 10).unwrap().bytes, &b"new"[..]);

        // The lock is usable again, by this process and through a fresh store handle.
        store
            .inner
            .put_doc(&key, b"again", &PutMode::Overwrite)
            .unwrap();
        let other = FsStore::open(dir.path()).unwrap();
        other
            .inner
            .put_doc(&key, b"other", &PutMode::Overwrite)
            .unwrap();
        assert_eq!(store.inner.read_doc(&key, 10).unwrap().bytes, &b"other"[..]);
    }

    /// Read-modify-write increments under one stripe lock from several threads, some of whose
    /// holders stall inside the lock and are revoked: every increment that reported success is
    /// counted exactly once (no two holders ever changed the counter at once), and every
    /// revoked one reports the retryable error.
    #[test]
    fn revocation_keeps_mutual_exclusion() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = FsStore::open(dir.path()).unwrap();
        Arc::get_mut(&mut store.inner).unwrap().stripes.revoke_after =
            std::time::Duration::from_millis(20);
        let key = Key::new("counter").unwrap();
        store.inner.put_doc(&key, b"0", &PutMode::Create).unwrap();
        let (ok, revoked) = (
            std::sync::atomic::AtomicU64::new(0),
            std::sync::atomic::AtomicU64::new(0),
        );
        std::thread::scope(|s| {
            for t in 0..4u32 {
                let (inner, ok, revoked, key) = (&store.inner, &ok, &revoked, &key);
                s.spawn(move || {
                    for n in 0..40u32 {
                        let lock = inner.lock(key).unwrap();
                        let now: u64 = std::str::from_utf8(&inner.read_doc(key, 32).unwrap().bytes)
                            .unwrap()
                            .parse()
                            .unwrap();
                        if (n + t) % 10 == 0 {
                            std::thread::sleep(std::time::Duration::from_millis(150));
                        }
                        let tmp = inner.temp_path();
                        fs::write(&tmp, (now + 1).to_string()).unwrap();
                        let r = lock
                            .stage(&tmp)
                            .and_then(|st| lock.publish(&st, &inner.path(key)));
                        match r {
                            Ok(()) => ok.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
                            Err(e) => {
                                assert_eq!(e.kind(), io::ErrorKind::TimedOut, "{e}");
                                let _ = fs::remove_file(&tmp);
                                revoked.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
                            }
                        };
                    }
                });
            }
        });
        let count: u64 = std::str::from_utf8(&store.inner.read_doc(&key, 32).unwrap().bytes)
            .unwrap()
            .parse()
            .unwrap();
        let (ok, revoked) = (ok.into_inner(), revoked.into_inner());
        assert_eq!(count, ok, "{revoked} revoked");
        assert!(revoked > 0, "no holder was revoked");
        assert_eq!(ok + revoked, 160);
    }

    /// Keys created under a shared parent while other threads remove theirs (and prune the
    /// parent when it empties) are always created.
    #[test]
    fn a_parent_pruned_while_another_key_creates_it_is_made_again() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        std::thread::scope(|s| {
            for t in 0..4 {
                let inner = &store.inner;
                s.spawn(move || {
                    for n in 0..3000 {
                        let path = inner.path(&Key::new(format!("uploads/{t}-{n}/data")).unwrap());
                        with_parent(&path, || File::create(&path))
                            .unwrap_or_else(|e| panic!("creating {}: {e}", path.display()));
                        fs::remove_file(&path).unwrap();
                        inner.prune(&path);
                    }
                });
            }
        });
        assert!(!dir.path().join("uploads").exists());
    }
}
