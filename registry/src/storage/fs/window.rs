//! The mapped windows [`Store::read_chunks`](super::super::Store::read_chunks) serves a blob
//! in: copied from a pre-faulted mapping, or sent with `sendfile` from the file.

use std::fs::File;
use std::io;
use std::sync::Arc;

use bytes::Bytes;

/// Bytes per mapped window of `Store::read_chunks`. Two are in flight per response (one
/// being written to the socket, the next being faulted in), so memory per response stays flat
/// whatever the blob size.
const MAP_WINDOW: u64 = 2 << 20;
/// Bytes per window sent with `sendfile` ([`Window::Sent`]): such a window is address space
/// only (never faulted in), so it can be large; each window costs a `mmap`, a `munmap` and a
/// blocking-thread hop, which at [`MAP_WINDOW`] were a few per cent of a large pull's CPU.
const SEND_WINDOW: u64 = 32 << 20;

/// How a window of a blob read reaches the socket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Window {
    /// Copied from the mapping into the socket: faulted in when mapped, on the blocking
    /// thread, so a page that is not in the page cache never stalls the async worker that
    /// writes it out.
    Copied,
    /// Sent with `sendfile` from the file: registered (see `storage::file_region`) so the
    /// connection finds the file and offset of each slice, and not faulted in, since the
    /// mapping is never read (the kernel reads the page cache for the socket).
    Sent,
}

impl Window {
    /// Bytes per window.
    pub(super) fn size(self) -> u64 {
        match self {
            Window::Copied => MAP_WINDOW,
            Window::Sent => SEND_WINDOW,
        }
    }
}

/// Maps `len` bytes of `file` from `offset`, for `how`.
pub(super) fn map_window(
    file: &Arc<File>,
    offset: u64,
    len: u64,
    how: Window,
) -> io::Result<Bytes> {
    if len == 0 {
        return Ok(Bytes::new());
    }
    let len = usize::try_from(len).map_err(io::Error::other)?;
    let mut opts = memmap2::MmapOptions::new();
    opts.offset(offset).len(len);
    if how == Window::Copied {
        opts.populate();
    }
    // SAFETY: a mapping is unsound only if the file shrinks underneath it (the access then
    // faults with SIGBUS). `read_chunks` serves committed objects, and those are never
    // truncated or rewritten in place: a document is written under `.tmp` and renamed, a blob is
    // a staging file hard-linked into place by the writer that holds its lock, and deleting
    // either only unlinks the name, which leaves an open mapping valid. The caller checked
    // that `offset + len` lies within the file.
    let map = unsafe { opts.map(&**file)? };
    Ok(match how {
        Window::Copied => Bytes::from_owner(map),
        Window::Sent => Bytes::from_owner(crate::storage::file_region::MappedWindow::new(
            map,
            file.clone(),
            offset,
        )),
    })
}
