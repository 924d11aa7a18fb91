//! Copying a tree out of a verified root: how a volume is seeded from the image's content at
//! its path, with the image's owners, modes and bytes (as Docker seeds a named volume).
//!
//! The path is resolved inside the root as the zone will resolve it (a symlink on the way
//! stays inside the root); below it nothing is followed: every entry is read with
//! `*at(…, AT_SYMLINK_NOFOLLOW)` from its parent's descriptor and made the same way in the
//! destination. Symlinks are copied as symlinks, hard links become separate copies, and other
//! file types (FIFOs, sockets; devices never reach a root) are left out.

use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use validator::normalize_entry_path;

use super::MAX_DEPTH;
use super::root::{Follow, ResolveError, RootDir, list_dir, open_dir_at};

/// What was at the path a tree was copied from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopiedTree {
    /// Whether the root had a directory there (else `dest` was made empty, root's, 0755).
    pub found: bool,
    /// Entries copied below the path.
    pub entries: u64,
}

impl RootDir {
    /// Copies the directory at `path` in the root into `dest`, a new directory (its parent
    /// must exist, it must not), with owners (when `chown`) and modes. Without `chown`
    /// setuid and setgid bits are dropped, as the unpacker drops them. When the root has no
    /// directory at `path`, `dest` is made empty with mode 0755.
    pub fn copy_out(&self, path: &str, dest: &Path, chown: bool) -> io::Result<CopiedTree> {
        let norm = normalize_entry_path(path.trim_start_matches('/').as_bytes())
            .map_err(|why| io::Error::new(io::ErrorKind::InvalidInput, why))?;
        std::fs::create_dir(dest)?;
        let dfd = rfs::openat(
            rfs::CWD,
            dest,
            OFlags::RDONLY | OFlags::DIRECTORY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
            Mode::empty(),
        )?;
        let src = match self.resolve_dir(&norm, false, Follow::InRoot) {
            Ok(fd) => fd,
            Err(ResolveError::Missing | ResolveError::NotDir) => {
                rfs::fchmod(&dfd, Mode::from_raw_mode(0o755))?;
                return Ok(CopiedTree {
                    found: false,
                    entries: 0,
                });
            }
            Err(e) => return Err(e.into_io()),
        };
        let mut entries = 0;
        copy_dir(src.as_fd(), dfd.as_fd(), chown, 0, &mut entries)?;
        let st = rfs::fstat(&src)?;
        set_attrs(dfd.as_fd(), st.st_uid, st.st_gid, st.st_mode as u32, chown)?;
        Ok(CopiedTree {
            found: true,
            entries,
        })
    }
}

/// Owner first (chown clears setuid/setgid), then the mode.
fn set_attrs(fd: BorrowedFd<'_>, uid: u32, gid: u32, mode: u32, chown: bool) -> io::Result<()> {
    let mut mode = mode & 0o7777;
    if chown {
        rfs::fchown(
            fd,
            Some(rfs::Uid::from_raw(uid)),
            Some(rfs::Gid::from_raw(gid)),
        )?;
    } else {
        mode &= !0o6000;
    }
    rfs::fchmod(fd, Mode::from_raw_mode(mode as _))?;
    Ok(())
}

fn copy_dir(
    src: BorrowedFd<'_>,
    dst: BorrowedFd<'_>,
    chown: bool,
    depth: usize,
    entries: &mut u64,
) -> io::Result<()> {
    if depth > MAX_DEPTH {
        return Err(io::Error::other(
            "the directory tree nests too deep to copy",
        ));
    }
    let mut names = list_dir(src)?;
    names.sort();
    for name in names {
        let st = rfs::statat(src, name.as_slice(), AtFlags::SYMLINK_NOFOLLOW)?;
        let (uid, gid, mode) = (st.st_uid, st.st_gid, st.st_mode as u32);
        match FileType::from_raw_mode(st.st_mode as _) {
            FileType::Directory => {
                rfs::mkdirat(dst, name.as_slice(), Mode::from_raw_mode(0o700))?;
                let s = open_dir_at(src, &name)?;
                let d = open_dir_at(dst, &name)?;
                copy_dir(s.as_fd(), d.as_fd(), chown, depth + 1, entries)?;
                // After the contents: a read-only directory mode must not stop the copy.
                set_attrs(d.as_fd(), uid, gid, mode, chown)?;
            }
            FileType::RegularFile => {
                let from = rfs::openat(
                    src,
                    name.as_slice(),
                    OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::CLOEXEC,
                    Mode::empty(),
                )?;
                let to = rfs::openat(
                    dst,
                    name.as_slice(),
                    OFlags::WRONLY
                        | OFlags::CREATE
                        | OFlags::EXCL
                        | OFlags::NOFOLLOW
                        | OFlags::CLOEXEC,
                    Mode::from_raw_mode(0o600),
                )?;
                let (mut from, mut to) = (File::from(from), File::from(to));
                io::copy(&mut from, &mut to)?;
                set_attrs(to.as_fd(), uid, gid, mode, chown)?;
            }
            FileType::Symlink => {
                let target = rfs::readlinkat(src, name.as_slice(), Vec::new())?;
                rfs::symlinkat(target.as_c_str(), dst, name.as_slice())?;
                if chown {
                    rfs::chownat(
                        dst,
                        name.as_slice(),
                        Some(rfs::Uid::from_raw(uid)),
                        Some(rfs::Gid::from_raw(gid)),
                        AtFlags::SYMLINK_NOFOLLOW,
                    )?;
                }
            }
            _ => continue,
        }
        *entries += 1;
    }
    Ok(())
}
