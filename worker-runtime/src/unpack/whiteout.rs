//! Whiteouts (image-spec `layer.md`): `.wh.<name>` deletes a lower layer's entry, and
//! `.wh..wh..opq` hides every lower child of its directory but keeps this layer's entries,
//! wherever in the layer they appear. A whiteout of a path this layer created is refused.

use std::os::fd::{AsFd, BorrowedFd};

use rustix::fs::FileType;
use validator::{EntryKind, TarEntry};

use super::root::{Follow, ResolveError, file_type_at, join, list_dir, open_dir_at, remove_all_at};
use super::{Applier, MAX_DEPTH, UnpackError};

impl Applier<'_> {
    pub(super) fn whiteout(
        &mut self,
        e: &TarEntry,
        parent: &[u8],
        rest: &[u8],
    ) -> Result<(), UnpackError> {
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
}
