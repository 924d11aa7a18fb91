//! Streaming blobs between layouts and registries: bounded channels between blocking file I/O
//! and async HTTP.

use std::io::{self, Read};
use std::pin::Pin;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt};
use validator::{Digest, ImageLayout};

use super::Content;
use crate::image::endpoint::{Dest, Source};
use crate::progress::{BlobOutcome, BlobProgress, CountingAsyncRead, CountingRead, Progress};
use crate::{Client, Reference};
use std::sync::Arc;

/// Buffer size for streaming between blocking file I/O and async HTTP.
const STREAM_BUF: usize = 64 << 10;

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Streams one blob from source to destination, verified on the way, reporting its bytes to
/// `progress` (see [`crate::progress`]: one start, the bytes read, one finish).
pub(super) async fn copy_blob(
    client: &Client,
    source: &Source<'_>,
    dest: &Dest,
    c: &Content,
    progress: &dyn Progress,
) -> Result<(), BoxError> {
    let (digest, size) = (c.digest.clone(), c.size);
    if let (Source::Registry(_, from), Dest::Layout(dst)) = (source, dest) {
        // Started inside, once the bytes a partial download already has are known.
        return pull_into_layout(client, from, dst, c, progress).await;
    }
    let handle: Arc<dyn BlobProgress> = Arc::from(progress.blob_started(c, 0));
    let result = async {
        match (source, dest) {
            (Source::Layout(src), Dest::Layout(dst)) => {
                let (src, dst) = (src.clone(), dst.clone());
                let handle = handle.clone();
                tokio::task::spawn_blocking(move || -> Result<(), BoxError> {
                    let r = CountingRead {
                        inner: src.open_blob(&digest, size)?,
                        progress: handle,
                    };
                    dst.write_blob(r, digest.algorithm(), Some((&digest, size)))?;
                    Ok(())
                })
                .await??;
            }
            (Source::Layout(src), Dest::Registry(r)) => {
                let file = src.open_blob(&digest, size)?;
                let reader = CountingAsyncRead {
                    inner: blocking_reader(file),
                    progress: handle.clone(),
                };
                client
                    .push_blob(r.registry(), r.name(), &digest, size, reader)
                    .await?;
            }
            (Source::Registry(_, from), Dest::Registry(to)) => {
                let body = client
                    .get_blob(from.registry(), from.name(), &digest, size)
                    .await?;
                let body = CountingAsyncRead {
                    inner: body,
                    progress: handle.clone(),
                };
                client
                    .push_blob(to.registry(), to.name(), &digest, size, body)
                    .await?;
            }
            (Source::Registry(..), Dest::Layout(_)) => unreachable!("handled above"),
        }
        Ok(())
    }
    .await;
    handle.finish(match result {
        Ok(()) => BlobOutcome::Copied,
        Err(_) => BlobOutcome::Failed,
    });
    result
}

/// Turns a blocking reader into an async one: a blocking thread reads 64 KiB at a time into a
/// small bounded channel.
pub(crate) fn blocking_reader<R: Read + Send + 'static>(mut r: R) -> impl AsyncRead + Unpin + Send {
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        loop {
            let mut buf = vec![0u8; STREAM_BUF];
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    break;
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    tokio_util::io::StreamReader::new(Box::pin(stream))
}

/// A blocking reader fed by an async task through a bounded channel. The channel closing is
/// the end of the data only when the feeder set `ended` first; otherwise the feeder was
/// cancelled (ctrl-c dropped the copy) and reading fails, so a partial download is kept
/// rather than committed short and thrown away.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<io::Result<Bytes>>,
    cur: Bytes,
    ended: Arc<std::sync::atomic::AtomicBool>,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(e),
                None if self.ended.load(std::sync::atomic::Ordering::Acquire) => return Ok(0),
                None => {
                    // Not `Interrupted`: `io::copy` retries that.
                    return Err(io::Error::other("the download was stopped before its end"));
                }
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur.advance(n);
        Ok(n)
    }
}

/// Downloads a blob into a layout through the layout's ingest: a `.partial` left by an
/// interrupted pull is continued with a `Range` request (its bytes re-hashed, not fetched
/// again), the bytes are written on a blocking thread fed through a bounded channel, and the
/// blob is published only once the whole file's size and digest matched. A failed download
/// keeps the partial file for the next attempt; one that does not verify removes it.
async fn pull_into_layout(
    client: &Client,
    from: &Reference,
    layout: &ImageLayout,
    blob: &Content,
    progress: &dyn Progress,
) -> Result<(), BoxError> {
    let (digest, size) = (&blob.digest, blob.size);
    let (l, d) = (layout.clone(), digest.clone());
    let ingest = tokio::task::spawn_blocking(move || l.ingest(&d, size)).await??;
    let have = ingest.offset();
    let handle = progress.blob_started(blob, have);
    let result = pull_rest(client, from, ingest, digest, size, have, handle.as_ref()).await;
    handle.finish(match result {
        Ok(()) => BlobOutcome::Copied,
        Err(_) => BlobOutcome::Failed,
    });
    result
}

/// The download part of [`pull_into_layout`]: from `have` to the end, into `ingest`.
async fn pull_rest(
    client: &Client,
    from: &Reference,
    mut ingest: validator::Ingest,
    digest: &Digest,
    size: u64,
    have: u64,
    progress: &dyn BlobProgress,
) -> Result<(), BoxError> {
    let (start, mut body): (u64, Pin<Box<dyn AsyncRead + Send>>) = if have == size {
        (have, Box::pin(tokio::io::empty()))
    } else {
        client
            .get_blob_from(from.registry(), from.name(), digest, have)
            .await?
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(4);
    let ended = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ended_w = ended.clone();
    let d = digest.clone();
    let writer = tokio::task::spawn_blocking(move || -> Result<(), BoxError> {
        if start != have {
            // The registry ignored the range and sends the whole blob: start over.
            ingest.truncate()?;
        }
        let mut reader = ChannelReader {
            rx,
            cur: Bytes::new(),
            ended: ended_w,
        };
        io::copy(&mut reader, &mut ingest)?;
        ingest.commit(size, &d)?;
        Ok(())
    });
    let mut buf = vec![0u8; STREAM_BUF];
    loop {
        match body.read(&mut buf).await {
            Ok(0) => {
                ended.store(true, std::sync::atomic::Ordering::Release);
                break;
            }
            Ok(n) => {
                if tx
                    .send(Ok(Bytes::copy_from_slice(&buf[..n])))
                    .await
                    .is_err()
                {
                    break; // the writer stopped; its error says why
                }
                progress.advance(n as u64);
            }
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                break;
            }
        }
    }
    drop(tx);
    writer.await??;
    Ok(())
}
