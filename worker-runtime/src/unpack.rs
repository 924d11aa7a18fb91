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

use std::collections::{HashSet, VecDeque};
use std::ffi::CString;
use std::fs::{File, FileTimes, Permissions};
use std::io::{self, BufRead, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use validator::{
    Algorithm, Compression, Digest, DigestingReader, EntryKind, LayerLimits, TarEntry, TarError,
    TarReader, decompress_layer, normalize_entry_path,
};

/// Symlinks followed while resolving one path (Linux uses 40 too).
const MAX_SYMLINK_HOPS: u32 = 40;
/// Deepest directory tree removed or walked.
const MAX_DEPTH: usize = 4096;
/// Latest mtime set (9999-12-31); later or negative times are clamped.
const MAX_MTIME: i64 = 253_402_300_799;

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

/// A directory held open by descriptor; every path below it is resolved relative to it.
#[derive(Debug)]
pub struct RootDir {
    fd: OwnedFd,
    path: PathBuf,
}

impl RootDir {
    /// Opens an existing directory (not through a symlink).
    pub fn open(path: &Path) -> io::Result<RootDir> {
        let fd = rfs::openat(
            rfs::CWD,
            path,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        Ok(RootDir {
            fd,
            path: path.to_owned(),
        })
    }

    /// The path it was opened at.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl RootDir {
    /// Writes a file at `path` inside the root, resolving it as the zone will (symlinks stay
    /// inside the root), creating parents and replacing what is there; used to place files
    /// the worker adds to a root (the entrypoint's SMF manifest).
    pub fn write_file(&self, path: &str, bytes: &[u8], mode: u32) -> io::Result<()> {
        let norm = normalize_entry_path(path.as_bytes())
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
        let (parent, leaf) = parent_and_leaf(&norm);
        if leaf.is_empty() {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "no file name"));
        }
        let pfd = self
            .resolve_dir(parent, true, Follow::InRoot)
            .map_err(ResolveError::into_io)?;
        remove_all_at(pfd.as_fd(), leaf, 0)?;
        let fd = rfs::openat(
            pfd.as_fd(),
            leaf,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )?;
        let mut f = File::from(fd);
        f.write_all(bytes)?;
        f.set_permissions(Permissions::from_mode(mode & 0o777))?;
        Ok(())
    }
}

/// Whether symlinks met while resolving a directory are followed (inside the root) or stop it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Follow {
    InRoot,
    Never,
}

#[derive(Debug)]
enum ResolveError {
    Missing,
    NotDir,
    TooManyLinks,
    TooDeep,
    Os(Errno),
}

impl ResolveError {
    fn into_io(self) -> io::Error {
        match self {
            ResolveError::Missing => io::Error::from(Errno::NOENT),
            ResolveError::NotDir => {
                io::Error::new(io::ErrorKind::NotADirectory, "a parent is not a directory")
            }
            ResolveError::TooManyLinks => {
                io::Error::other(format!("more than {MAX_SYMLINK_HOPS} symlinks"))
            }
            ResolveError::TooDeep => io::Error::other("the path nests too deep"),
            ResolveError::Os(e) => io::Error::from(e),
        }
    }
}

fn open_dir_at(dir: BorrowedFd<'_>, name: &[u8]) -> Result<OwnedFd, Errno> {
    rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

fn file_type_at(dir: BorrowedFd<'_>, name: &[u8]) -> Result<Option<FileType>, Errno> {
    match rfs::statat(dir, name, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(st) => Ok(Some(FileType::from_raw_mode(st.st_mode as _))),
        Err(Errno::NOENT) => Ok(None),
        Err(e) => Err(e),
    }
}

impl RootDir {
    /// Opens the directory at `path` (components separated by `/`) inside the root. With
    /// `create`, missing directories are made (mode 0755, attributes come later from their own
    /// entries).
    fn resolve_dir(
        &self,
        path: &[u8],
        create: bool,
        follow: Follow,
    ) -> Result<OwnedFd, ResolveError> {
        let root = self
            .fd
            .try_clone()
            .map_err(|e| ResolveError::Os(Errno::from_io_error(&e).unwrap_or(Errno::IO)))?;
        let mut stack: Vec<OwnedFd> = vec![root];
        let mut todo: VecDeque<Vec<u8>> = path.split(|&b| b == b'/').map(<[u8]>::to_vec).collect();
        let mut hops = 0u32;
        while let Some(comp) = todo.pop_front() {
            match comp.as_slice() {
                b"" | b"." => continue,
                b".." => {
                    // Never above the root.
                    if stack.len() > 1 {
                        stack.pop();
                    }
                    continue;
                }
                _ => {}
            }
            if stack.len() > MAX_DEPTH {
                return Err(ResolveError::TooDeep);
            }
            let cur = stack.last().expect("the root stays on the stack").as_fd();
            match open_dir_at(cur, &comp) {
                Ok(fd) => stack.push(fd),
                Err(Errno::NOENT) if create => {
                    match rfs::mkdirat(cur, comp.as_slice(), Mode::from_raw_mode(0o755)) {
                        Ok(()) | Err(Errno::EXIST) => {}
                        Err(e) => return Err(ResolveError::Os(e)),
                    }
                    todo.push_front(comp);
                }
                Err(Errno::NOENT) => return Err(ResolveError::Missing),
                // O_NOFOLLOW on a symlink gives ELOOP (EMLINK on FreeBSD); O_DIRECTORY on
                // anything else that is no directory gives ENOTDIR.
                Err(Errno::LOOP | Errno::NOTDIR | Errno::MLINK) => {
                    let ft = file_type_at(cur, &comp).map_err(ResolveError::Os)?;
                    if ft != Some(FileType::Symlink) {
                        return Err(ResolveError::NotDir);
                    }
                    if follow == Follow::Never {
                        return Err(ResolveError::NotDir);
                    }
                    hops += 1;
                    if hops > MAX_SYMLINK_HOPS {
                        return Err(ResolveError::TooManyLinks);
                    }
                    let target = rfs::readlinkat(cur, comp.as_slice(), Vec::new())
                        .map_err(ResolveError::Os)?;
                    let target = target.as_bytes();
                    if target.starts_with(b"/") {
                        // Absolute targets are re-rooted: start again at the root.
                        stack.truncate(1);
                    }
                    for c in target.split(|&b| b == b'/').rev() {
                        todo.push_front(c.to_vec());
                    }
                }
                Err(e) => return Err(ResolveError::Os(e)),
            }
        }
        Ok(stack.pop().expect("the root stays on the stack"))
    }
}

/// Removes `name` in `dir` and, when it is a directory, everything below it, never following a
/// symlink.
fn remove_all_at(dir: BorrowedFd<'_>, name: &[u8], depth: usize) -> io::Result<()> {
    match file_type_at(dir, name)? {
        None => Ok(()),
        Some(FileType::Directory) => {
            if depth > MAX_DEPTH {
                return Err(io::Error::other("directory tree nests too deep to remove"));
            }
            let sub = open_dir_at(dir, name)?;
            for child in list_dir(sub.as_fd())? {
                remove_all_at(sub.as_fd(), &child, depth + 1)?;
            }
            rfs::unlinkat(dir, name, AtFlags::REMOVEDIR)?;
            Ok(())
        }
        Some(_) => {
            rfs::unlinkat(dir, name, AtFlags::empty())?;
            Ok(())
        }
    }
}

/// The names in a directory, without `.` and `..`.
fn list_dir(dir: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    for e in rfs::Dir::read_from(dir)? {
        let e = e?;
        let n = e.file_name().to_bytes();
        if n != b"." && n != b".." {
            out.push(n.to_vec());
        }
    }
    Ok(out)
}

fn cstring(b: &[u8]) -> Option<CString> {
    CString::new(b).ok()
}

fn mtime_of(secs: i64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(secs.clamp(0, MAX_MTIME) as u64)
}

fn timestamps(secs: i64) -> rfs::Timestamps {
    let t = rustix::fs::Timespec {
        tv_sec: secs.clamp(0, MAX_MTIME) as _,
        tv_nsec: 0,
    };
    rfs::Timestamps {
        last_access: t,
        last_modification: t,
    }
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

fn parent_and_leaf(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a.is_empty() {
        return b.to_vec();
    }
    let mut v = Vec::with_capacity(a.len() + 1 + b.len());
    v.extend_from_slice(a);
    v.push(b'/');
    v.extend_from_slice(b);
    v
}

impl<'a> Applier<'a> {
    fn new(root: &'a RootDir, opts: &'a UnpackOptions) -> Self {
        Applier {
            root,
            opts,
            seen: HashSet::new(),
            touched: HashSet::new(),
            dirs: Vec::new(),
            stats: LayerStats::default(),
            copy_buf: vec![0u8; 64 * 1024],
        }
    }

    fn refuse(e: &TarEntry, reason: impl Into<String>) -> UnpackError {
        UnpackError::Refused {
            path: String::from_utf8_lossy(&e.path).into_owned(),
            offset: e.offset,
            reason: reason.into(),
        }
    }

    fn io(e: &TarEntry, op: &'static str) -> impl FnOnce(io::Error) -> UnpackError + use<> {
        let (path, offset) = (String::from_utf8_lossy(&e.path).into_owned(), e.offset);
        move |source| UnpackError::Io {
            path,
            offset,
            op,
            source,
        }
    }

    fn errno(e: &TarEntry, op: &'static str) -> impl FnOnce(Errno) -> UnpackError + use<> {
        let (path, offset) = (String::from_utf8_lossy(&e.path).into_owned(), e.offset);
        move |errno| UnpackError::Io {
            path,
            offset,
            op,
            source: io::Error::from(errno),
        }
    }

    /// Checks the name and returns it normalised.
    fn checked_path(&self, e: &TarEntry) -> Result<Vec<u8>, UnpackError> {
        let path = normalize_entry_path(&e.path).map_err(|why| Self::refuse(e, why))?;
        let lim = &self.opts.limits.tar;
        if path.len() > lim.max_path_len {
            return Err(Self::refuse(
                e,
                format!("path is {} bytes, limit {}", path.len(), lim.max_path_len),
            ));
        }
        if let Some(c) = path
            .split(|&b| b == b'/')
            .find(|c| c.len() > lim.max_component_len)
        {
            return Err(Self::refuse(
                e,
                format!(
                    "a path component is {} bytes, limit {}",
                    c.len(),
                    lim.max_component_len
                ),
            ));
        }
        if e.uid >= 1 << 31 || e.gid >= 1 << 31 {
            // CVE-2024-40635: ids that overflow int32 became root.
            return Err(Self::refuse(
                e,
                format!("uid {} / gid {} not below 2^31", e.uid, e.gid),
            ));
        }
        Ok(path)
    }

    fn mark(&mut self, path: &[u8]) {
        let mut p = path;
        while !p.is_empty() && self.touched.insert(p.to_vec()) {
            p = parent_and_leaf(p).0;
        }
    }

    fn parent(&self, e: &TarEntry, parent: &[u8], create: bool) -> Result<OwnedFd, UnpackError> {
        self.root
            .resolve_dir(parent, create, Follow::InRoot)
            .map_err(|r| Self::io(e, "resolving the parent directory")(r.into_io()))
    }

    fn apply<R: Read>(&mut self, e: &TarEntry, tar: &mut TarReader<R>) -> Result<(), UnpackError> {
        self.stats.entries += 1;
        let path = self.checked_path(e)?;
        if !self.seen.insert(path.clone()) {
            return Err(Self::refuse(
                e,
                "the same path appears twice in this layer (image-spec: MUST NOT)",
            ));
        }
        if path.is_empty() {
            // `.` or `./`: the root's own attributes stay ours; anything but a directory would
            // replace the root (CVE-2021-29136).
            return if e.kind == EntryKind::Directory {
                Ok(())
            } else {
                Err(Self::refuse(
                    e,
                    "an entry other than a directory for the root",
                ))
            };
        }
        let (parent, leaf) = parent_and_leaf(&path);
        if let Some(rest) = leaf.strip_prefix(b".wh.") {
            return self.whiteout(e, parent, rest);
        }
        self.stats.xattrs_dropped += e.xattrs.len() as u64;
        if matches!(e.kind, EntryKind::CharDevice | EntryKind::BlockDevice) {
            // Zones get their devices from the platform; illumos zone installs delete nodes too.
            self.stats.devices_dropped += 1;
            return Ok(());
        }
        self.mark(&path);
        let pfd = self.parent(e, parent, true)?;
        let pfd = pfd.as_fd();
        let existing = file_type_at(pfd, leaf).map_err(Self::errno(e, "stat"))?;
        if e.kind == EntryKind::Directory {
            match existing {
                Some(FileType::Directory) => {}
                Some(_) => {
                    rfs::unlinkat(pfd, leaf, AtFlags::empty())
                        .map_err(Self::errno(e, "removing the old entry"))?;
                    rfs::mkdirat(pfd, leaf, Mode::from_raw_mode(0o755))
                        .map_err(Self::errno(e, "mkdir"))?;
                }
                None => rfs::mkdirat(pfd, leaf, Mode::from_raw_mode(0o755))
                    .map_err(Self::errno(e, "mkdir"))?,
            }
            self.dirs.push(DirAttrs {
                path,
                mode: e.mode,
                uid: e.uid,
                gid: e.gid,
                mtime: e.mtime,
            });
            return Ok(());
        }
        // The hard link target is checked before anything is removed: a link to itself must
        // not delete its own target.
        let link_source = if e.kind == EntryKind::HardLink {
            Some(self.link_source(e, &path)?)
        } else {
            None
        };
        if existing.is_some() {
            remove_all_at(pfd, leaf, 0).map_err(Self::io(e, "removing the old entry"))?;
        }
        match e.kind {
            EntryKind::Regular => self.regular(e, pfd, leaf, tar),
            EntryKind::Symlink => self.symlink(e, pfd, leaf),
            EntryKind::HardLink => {
                let (sfd, sleaf) = link_source.expect("computed above for hard links");
                rfs::linkat(sfd.as_fd(), sleaf.as_slice(), pfd, leaf, AtFlags::empty())
                    .map_err(Self::errno(e, "link"))
            }
            EntryKind::Fifo => {
                rfs::mkfifoat(pfd, leaf, Mode::from_raw_mode(0o600))
                    .map_err(Self::errno(e, "mkfifo"))?;
                self.owner_at(e, pfd, leaf)?;
                rfs::chmodat(
                    pfd,
                    leaf,
                    Mode::from_raw_mode(self.mode(e)),
                    AtFlags::empty(),
                )
                .map_err(Self::errno(e, "chmod"))?;
                rfs::utimensat(pfd, leaf, &timestamps(e.mtime), AtFlags::SYMLINK_NOFOLLOW)
                    .map_err(Self::errno(e, "utimensat"))
            }
            EntryKind::Directory | EntryKind::CharDevice | EntryKind::BlockDevice => {
                unreachable!("handled above")
            }
        }
    }

    /// The permission bits to set: setuid/setgid only when the owner is applied too.
    fn mode(&self, e: &TarEntry) -> u32 {
        if self.opts.chown {
            e.mode & 0o7777
        } else {
            e.mode & 0o1777
        }
    }

    fn owner_at(&self, e: &TarEntry, dir: BorrowedFd<'_>, leaf: &[u8]) -> Result<(), UnpackError> {
        if !self.opts.chown {
            return Ok(());
        }
        rfs::chownat(
            dir,
            leaf,
            Some(rfs::Uid::from_raw(e.uid as u32)),
            Some(rfs::Gid::from_raw(e.gid as u32)),
            AtFlags::SYMLINK_NOFOLLOW,
        )
        .map_err(Self::errno(e, "chown"))
    }

    fn regular<R: Read>(
        &mut self,
        e: &TarEntry,
        dir: BorrowedFd<'_>,
        leaf: &[u8],
        tar: &mut TarReader<R>,
    ) -> Result<(), UnpackError> {
        let fd = rfs::openat(
            dir,
            leaf,
            OFlags::WRONLY | OFlags::CREATE | OFlags::EXCL | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::from_raw_mode(0o600),
        )
        .map_err(Self::errno(e, "create"))?;
        let mut file = File::from(fd);
        let buf = &mut self.copy_buf;
        loop {
            let n = tar.read_data(buf)?;
            if n == 0 {
                break;
            }
            file.write_all(&buf[..n]).map_err(Self::io(e, "write"))?;
        }
        if self.opts.chown {
            // Before chmod: chown clears setuid/setgid.
            std::os::unix::fs::fchown(&file, Some(e.uid as u32), Some(e.gid as u32))
                .map_err(Self::io(e, "chown"))?;
        }
        file.set_permissions(Permissions::from_mode(self.mode(e)))
            .map_err(Self::io(e, "chmod"))?;
        let t = mtime_of(e.mtime);
        file.set_times(FileTimes::new().set_accessed(t).set_modified(t))
            .map_err(Self::io(e, "set times"))?;
        Ok(())
    }

    fn symlink(
        &mut self,
        e: &TarEntry,
        dir: BorrowedFd<'_>,
        leaf: &[u8],
    ) -> Result<(), UnpackError> {
        if e.link_name.is_empty() {
            return Err(Self::refuse(e, "symlink with an empty target"));
        }
        if e.link_name.len() > self.opts.limits.tar.max_path_len {
            return Err(Self::refuse(
                e,
                "symlink target is longer than the path limit",
            ));
        }
        // The target is stored as written: absolute targets mean the zone's own root once the
        // zone runs, and every resolution done here treats them relative to the root.
        let target = cstring(&e.link_name)
            .ok_or_else(|| Self::refuse(e, "NUL byte in the symlink target"))?;
        rfs::symlinkat(target.as_c_str(), dir, leaf).map_err(Self::errno(e, "symlink"))?;
        self.owner_at(e, dir, leaf)?;
        rfs::utimensat(dir, leaf, &timestamps(e.mtime), AtFlags::SYMLINK_NOFOLLOW)
            .map_err(Self::errno(e, "utimensat"))
    }

    /// The existing, non-directory, non-symlink path a hard link points at.
    fn link_source(&self, e: &TarEntry, path: &[u8]) -> Result<(OwnedFd, Vec<u8>), UnpackError> {
        let target = normalize_entry_path(&e.link_name).map_err(|why| {
            Self::refuse(
                e,
                format!(
                    "hard link target {:?}: {why}",
                    String::from_utf8_lossy(&e.link_name)
                ),
            )
        })?;
        if target.is_empty() {
            return Err(Self::refuse(e, "hard link to the root"));
        }
        if target == path {
            return Err(Self::refuse(e, "hard link to itself"));
        }
        let (tparent, tleaf) = parent_and_leaf(&target);
        let tfd = self
            .root
            .resolve_dir(tparent, false, Follow::InRoot)
            .map_err(|r| match r {
                ResolveError::Missing | ResolveError::NotDir => {
                    Self::refuse(e, "hard link target does not exist")
                }
                other => Self::io(e, "resolving the hard link target")(other.into_io()),
            })?;
        match file_type_at(tfd.as_fd(), tleaf).map_err(Self::errno(e, "stat"))? {
            None => Err(Self::refuse(e, "hard link target does not exist")),
            Some(FileType::Directory) => Err(Self::refuse(e, "hard link to a directory")),
            // linkat without AT_SYMLINK_FOLLOW links the symlink itself on Linux, but POSIX
            // leaves link(2) on a symlink open; refusing is the same on every system.
            Some(FileType::Symlink) => Err(Self::refuse(e, "hard link to a symlink")),
            Some(_) => Ok((tfd, tleaf.to_vec())),
        }
    }

    fn whiteout(&mut self, e: &TarEntry, parent: &[u8], rest: &[u8]) -> Result<(), UnpackError> {
        if e.kind != EntryKind::Regular {
            return Err(Self::refuse(e, "a whiteout must be a regular file"));
        }
        if rest == b".wh..opq" {
            self.stats.whiteouts += 1;
            return self.opaque(e, parent);
        }
        if rest.is_empty() || rest == b"." || rest == b".." {
            return Err(Self::refuse(e, "a whiteout must name an entry"));
        }
        if rest.starts_with(b".wh.") {
            return Err(Self::refuse(
                e,
                "only .wh..wh..opq is a defined whiteout meta name",
            ));
        }
        let target = join(parent, rest);
        if self.touched.contains(&target) {
            return Err(Self::refuse(
                e,
                "whiteout of a path this layer created (whiteouts apply to lower layers only)",
            ));
        }
        self.stats.whiteouts += 1;
        let pfd = match self.root.resolve_dir(parent, false, Follow::InRoot) {
            Ok(fd) => fd,
            // Nothing below to hide.
            Err(ResolveError::Missing | ResolveError::NotDir) => return Ok(()),
            Err(r) => {
                return Err(Self::io(e, "resolving the whiteout's directory")(
                    r.into_io(),
                ));
            }
        };
        remove_all_at(pfd.as_fd(), rest, 0).map_err(Self::io(e, "removing the whited-out entry"))
    }

    /// Removes every child of `dir` that this layer did not create, keeping this layer's
    /// entries wherever they sit relative to the marker.
    fn opaque(&mut self, e: &TarEntry, dir: &[u8]) -> Result<(), UnpackError> {
        let fd = match self.root.resolve_dir(dir, false, Follow::InRoot) {
            Ok(fd) => fd,
            Err(ResolveError::Missing | ResolveError::NotDir) => return Ok(()),
            Err(r) => return Err(Self::io(e, "resolving the opaque directory")(r.into_io())),
        };
        // The directory itself belongs to this layer from here on.
        self.mark(dir);
        self.prune(e, fd.as_fd(), dir, 0)
    }

    fn prune(
        &self,
        e: &TarEntry,
        fd: BorrowedFd<'_>,
        dir: &[u8],
        depth: usize,
    ) -> Result<(), UnpackError> {
        if depth > MAX_DEPTH {
            return Err(Self::refuse(e, "directory tree nests too deep"));
        }
        for child in list_dir(fd).map_err(Self::io(e, "listing the opaque directory"))? {
            let cpath = join(dir, &child);
            if self.touched.contains(&cpath) {
                if file_type_at(fd, &child).map_err(Self::errno(e, "stat"))?
                    == Some(FileType::Directory)
                {
                    let sub = open_dir_at(fd, &child).map_err(Self::errno(e, "open"))?;
                    self.prune(e, sub.as_fd(), &cpath, depth + 1)?;
                }
            } else {
                remove_all_at(fd, &child, 0)
                    .map_err(Self::io(e, "removing a lower-layer entry"))?;
            }
        }
        Ok(())
    }

    /// Sets directory attributes, deepest first, without following any symlink.
    fn finish(&mut self) -> Result<(), UnpackError> {
        let mut dirs = std::mem::take(&mut self.dirs);
        dirs.sort_by_key(|d| std::cmp::Reverse(d.path.len()));
        for d in dirs {
            let fd = match self.root.resolve_dir(&d.path, false, Follow::Never) {
                Ok(fd) => fd,
                // Replaced later in the layer by a whiteout or an opaque marker.
                Err(ResolveError::Missing | ResolveError::NotDir) => continue,
                Err(r) => {
                    return Err(UnpackError::Io {
                        path: String::from_utf8_lossy(&d.path).into_owned(),
                        offset: 0,
                        op: "reopening a directory",
                        source: r.into_io(),
                    });
                }
            };
            let file = File::from(fd);
            let fail = |op: &'static str| {
                let p = String::from_utf8_lossy(&d.path).into_owned();
                move |source| UnpackError::Io {
                    path: p,
                    offset: 0,
                    op,
                    source,
                }
            };
            let mode = if self.opts.chown {
                std::os::unix::fs::fchown(&file, Some(d.uid as u32), Some(d.gid as u32))
                    .map_err(fail("chown"))?;
                d.mode & 0o7777
            } else {
                d.mode & 0o1777
            };
            file.set_permissions(Permissions::from_mode(mode))
                .map_err(fail("chmod"))?;
            let t = mtime_of(d.mtime);
            file.set_times(FileTimes::new().set_accessed(t).set_modified(t))
                .map_err(fail("set times"))?;
        }
        Ok(())
    }
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
