//! One tar entry applied: its path checked (normalized, not twice in a layer, not the root),
//! its parent resolved inside the root, whatever was at its leaf removed, then the file,
//! directory, symlink or hard link created with `*at()` calls relative to the parent's
//! descriptor, its owner, mode and mtime set. Directory attributes wait for the end of the
//! layer (`finish`), deepest first, so writing children does not disturb them.

use std::collections::HashSet;
use std::ffi::CString;
use std::fs::{File, FileTimes, Permissions};
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, SystemTime};

use rustix::fs::{self as rfs, AtFlags, FileType, Mode, OFlags};
use rustix::io::Errno;
use validator::{EntryKind, TarEntry, TarReader, normalize_entry_path};

use super::root::{Follow, ResolveError, file_type_at, parent_and_leaf, remove_all_at};
use super::{Applier, DirAttrs, LayerStats, RootDir, UnpackError, UnpackOptions};

/// Latest mtime set (9999-12-31); later or negative times are clamped.
const MAX_MTIME: i64 = 253_402_300_799;

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

impl<'a> Applier<'a> {
    pub(super) fn new(root: &'a RootDir, opts: &'a UnpackOptions) -> Self {
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

    pub(super) fn refuse(e: &TarEntry, reason: impl Into<String>) -> UnpackError {
        UnpackError::Refused {
            path: String::from_utf8_lossy(&e.path).into_owned(),
            offset: e.offset,
            reason: reason.into(),
        }
    }

    pub(super) fn io(
        e: &TarEntry,
        op: &'static str,
    ) -> impl FnOnce(io::Error) -> UnpackError + use<> {
        let (path, offset) = (String::from_utf8_lossy(&e.path).into_owned(), e.offset);
        move |source| UnpackError::Io {
            path,
            offset,
            op,
            source,
        }
    }

    pub(super) fn errno(
        e: &TarEntry,
        op: &'static str,
    ) -> impl FnOnce(Errno) -> UnpackError + use<> {
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

    pub(super) fn mark(&mut self, path: &[u8]) {
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

    pub(super) fn apply<R: Read>(
        &mut self,
        e: &TarEntry,
        tar: &mut TarReader<R>,
    ) -> Result<(), UnpackError> {
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

    /// Sets directory attributes, deepest first, without following any symlink.
    pub(super) fn finish(&mut self) -> Result<(), UnpackError> {
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
