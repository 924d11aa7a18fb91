//! Byte progress of blob transfers: the seam a front end (`rdctl`'s terminal bars) plugs into
//! [`crate::transfer::copy_with_progress`] and [`crate::sync::run_with_progress`].
//!
//! The contract, per blob a copy handles:
//! - a blob the destination already has is reported once with [`Progress::blob_present`] and
//!   moves no bytes;
//! - a blob that is transferred gets one [`Progress::blob_started`] (with the bytes a resumed
//!   download already had), then [`BlobProgress::advance`] for every piece read from the
//!   source, then exactly one [`BlobProgress::finish`]: `resumed` plus the advanced bytes equal
//!   the blob's size when it finished with [`BlobOutcome::Copied`]. A copy that is cancelled
//!   (its future dropped) drops the handle without finishing it.
//!
//! The library prints nothing: every method has a no-op default, and [`NoProgress`] is the
//! reporter [`crate::transfer::copy`] uses.

use crate::image::Content;

/// How one blob transfer ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BlobOutcome {
    /// All its bytes are at the destination, verified.
    Copied,
    /// The transfer failed; a download keeps what arrived for the next attempt.
    Failed,
}

/// Receives byte progress of one blob transfer (see the module docs).
pub trait BlobProgress: Send + Sync {
    /// `bytes` more were read from the source and handed to the destination.
    fn advance(&self, bytes: u64) {
        let _ = bytes;
    }
    /// The transfer ended; called once.
    fn finish(&self, outcome: BlobOutcome) {
        let _ = outcome;
    }
}

/// Receives progress of a copy's blobs (see the module docs).
pub trait Progress: Send + Sync {
    /// `blob` starts to move; `resumed` of its bytes were already at the destination (a
    /// partial download continued with `Range`). The handle gets the rest.
    fn blob_started(&self, blob: &Content, resumed: u64) -> Box<dyn BlobProgress> {
        let _ = (blob, resumed);
        Box::new(NoProgress)
    }
    /// The destination already had `blob`; nothing moves.
    fn blob_present(&self, blob: &Content) {
        let _ = blob;
    }
}

/// Reports nothing.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoProgress;

impl Progress for NoProgress {}
impl BlobProgress for NoProgress {}

/// A blocking reader that reports what it reads.
pub(crate) struct CountingRead<R> {
    pub(crate) inner: R,
    pub(crate) progress: std::sync::Arc<dyn BlobProgress>,
}

impl<R: std::io::Read> std::io::Read for CountingRead<R> {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let n = self.inner.read(buf)?;
        if n > 0 {
            self.progress.advance(n as u64);
        }
        Ok(n)
    }
}

/// An async reader that reports what it reads.
pub(crate) struct CountingAsyncRead<R> {
    pub(crate) inner: R,
    pub(crate) progress: std::sync::Arc<dyn BlobProgress>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for CountingAsyncRead<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let before = buf.filled().len();
        let p = std::pin::Pin::new(&mut self.inner).poll_read(cx, buf);
        if let std::task::Poll::Ready(Ok(())) = &p {
            let n = buf.filled().len() - before;
            if n > 0 {
                self.progress.advance(n as u64);
            }
        }
        p
    }
}
