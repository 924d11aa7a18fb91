//! The root a layer is applied onto, and path resolution inside it: [`RootDir`] holds the
//! root by descriptor, and every directory below it is reached one component at a time with
//! `openat(O_NOFOLLOW | O_DIRECTORY)`, a symlink met on the way resolved *inside* the root
//! (Linux `RESOLVE_IN_ROOT`, written portably: illumos has no `openat2`). Also the
//! descriptor-relative helpers the applier builds on (stat, list, remove a tree) that never
//! follow a symlink.

use std::collections::VecDeque;
use std::fs::{File, Permissions};
use std::io::{self, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use validator::normalize_entry_path;

use super::{MAX_DEPTH, MAX_SYMLINK_HOPS};

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
pub(super) enum Follow {
    InRoot,
    Never,
}

#[derive(Debug)]
pub(super) enum ResolveError {
    Missing,
    NotDir,
    TooManyLinks,
    TooDeep,
    Os(Errno),
}

impl ResolveError {
    pub(super) fn into_io(self) -> io::Error {
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

pub(super) fn open_dir_at(dir: BorrowedFd<'_>, name: &[u8]) -> Result<OwnedFd, Errno> {
    rfs::openat(
        dir,
        name,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
        Mode::empty(),
    )
}

pub(super) fn file_type_at(dir: BorrowedFd<'_>, name: &[u8]) -> Result<Option<FileType>, Errno> {
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
    pub(super) fn resolve_dir(
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
pub(super) fn remove_all_at(dir: BorrowedFd<'_>, name: &[u8], depth: usize) -> io::Result<()> {
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
pub(super) fn list_dir(dir: BorrowedFd<'_>) -> io::Result<Vec<Vec<u8>>> {
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

pub(super) fn parent_and_leaf(path: &[u8]) -> (&[u8], &[u8]) {
    match path.iter().rposition(|&b| b == b'/') {
        Some(i) => (&path[..i], &path[i + 1..]),
        None => (&[], path),
    }
}

pub(super) fn join(a: &[u8], b: &[u8]) -> Vec<u8> {
    if a.is_empty() {
        return b.to_vec();
    }
    let mut v = Vec::with_capacity(a.len() + 1 + b.len());
    v.extend_from_slice(a);
    v.push(b'/');
    v.extend_from_slice(b);
    v
}
