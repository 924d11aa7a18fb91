//! Streaming blobs between layouts and registries: bounded channels between blocking file I/O
//! and async HTTP.

use std::io::{self, Read};
use std::pin::Pin;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt};
use validator::{Digest, ImageLayout};

use super::Content;
use crate::image::endpoint::{Dest, Source};
use crate::{Client, Reference};

/// Buffer size for streaming between blocking file I/O and async HTTP.
const STREAM_BUF: usize = 64 << 10;

pub(super) type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Streams one blob from source to destination, verified on the way.
pub(super) async fn copy_blob(
    client: &Client,
    source: &Source<'_>,
    dest: &Dest,
    c: &Content,
) -> Result<(), BoxError> {
    let (digest, size) = (c.digest.clone(), c.size);
    match (source, dest) {
        (Source::Layout(src), Dest::Layout(dst)) => {
            let (src, dst) = (src.clone(), dst.clone());
            tokio::task::spawn_blocking(move || -> Result<(), BoxError> {
                let r = src.open_blob(&digest, size)?;
                dst.write_blob(r, digest.algorithm(), Some((&digest, size)))?;
                Ok(())
            })
            .await??;
        }
        (Source::Layout(src), Dest::Registry(r)) => {
            let file = src.open_blob(&digest, size)?;
            let reader = blocking_reader(file);
            client
                .push_blob(r.registry(), r.name(), &digest, size, reader)
                .await?;
        }
        (Source::Registry(_, from), Dest::Layout(dst)) => {
            pull_into_layout(client, from, dst, &digest, size).await?;
        }
        (Source::Registry(_, from), Dest::Registry(to)) => {
            let body = client
                .get_blob(from.registry(), from.name(), &digest, size)
                .await?;
            client
                .push_blob(to.registry(), to.name(), &digest, size, body)
                .await?;
        }
    }
    Ok(())
}

/// Turns a blocking reader into an async one: a blocking thread reads 64 KiB at a time into a
/// small bounded channel.
fn blocking_reader<R: Read + Send + 'static>(mut r: R) -> impl AsyncRead + Unpin + Send {
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

/// A blocking reader fed by an async task through a bounded channel.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<io::Result<Bytes>>,
    cur: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
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
    digest: &Digest,
    size: u64,
) -> Result<(), BoxError> {
    let (l, d) = (layout.clone(), digest.clone());
    let mut ingest = tokio::task::spawn_blocking(move || l.ingest(&d, size)).await??;
    let have = ingest.offset();
    let (start, mut body): (u64, Pin<Box<dyn AsyncRead + Send>>) = if have == size {
        (have, Box::pin(tokio::io::empty()))
    } else {
        client
            .get_blob_from(from.registry(), from.name(), digest, have)
            .await?
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(4);
    let d = digest.clone();
    let writer = tokio::task::spawn_blocking(move || -> Result<(), BoxError> {
        if start != have {
            // The registry ignored the range and sends the whole blob: start over.
            ingest.truncate()?;
        }
        let mut reader = ChannelReader {
            rx,
            cur: Bytes::new(),
        };
        io::copy(&mut reader, &mut ingest)?;
        ingest.commit(size, &d)?;
        Ok(())
    });
    let mut buf = vec![0u8; STREAM_BUF];
    loop {
        match body.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                if tx
                    .send(Ok(Bytes::copy_from_slice(&buf[..n])))
                    .await
                    .is_err()
                {
                    break; // the writer stopped; its error says why
                }
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
