//! The staging-file writer of [`super::FsStore`]: upload bytes gathered into batches and
//! written at their offsets (on the request's own worker while the kernel takes them at once,
//! on blocking threads after that), then made durable and renamed into place.

use std::fs::{self, File};
use std::io;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio::io::AsyncWrite;

use super::{
    BoxFuture, Inner, Key, NAME, ObjectMeta, StoreError, StoreResult, StoreWriter, backend,
    blocking, map_io, sync_dir, with_parent,
};
use validator::WRITE_PIECE;

/// Bytes a staging file's writer gathers before it writes them out.
/// Upload bodies arrive as frames of a few KiB (a chunked PATCH: 8-32 KiB), and each write is
/// a blocking-thread round trip; two buffers of this size per writer (one filling, one being
/// written) are all the memory an upload holds, whatever its frames.
const WRITE_BATCH: usize = 256 << 10;

/// Writes `bytes` at `at` in [`WRITE_PIECE`]-sized `pwrite`s: a batch larger than that would
/// have the page cache fault in large free blocks a VM's balloon gave back to the host (see
/// there).
fn write_pieces(file: &std::fs::File, bytes: &[u8], at: u64) -> io::Result<()> {
    use std::os::unix::fs::FileExt as _;
    let mut offset = at;
    for piece in bytes.chunks(WRITE_PIECE) {
        file.write_all_at(piece, offset)?;
        offset += piece.len() as u64;
    }
    Ok(())
}

/// The longest a batch's write may take on the request's async worker before the writer
/// moves its later writes to blocking threads. A batch's copy into the page cache takes tens
/// of microseconds; a write that takes longer is one the kernel throttled (dirty pages over
/// the limit, memory reclaim) or a slow filesystem, and those stall every request that worker
/// runs, so they go to the blocking pool from then on.
const SLOW_INLINE_WRITE: std::time::Duration = std::time::Duration::from_millis(4);

/// How long every writer of a store writes on blocking threads after one write was slow on an
/// async worker: a disk that throttled one upload is likely to throttle the others, and each
/// would otherwise stall its worker once before it learns.
const SLOW_WRITE_COOLDOWN: std::time::Duration = std::time::Duration::from_secs(10);

/// When a store's staging write was last slow on an async worker (see [`SLOW_INLINE_WRITE`]).
#[derive(Debug, Default)]
pub(super) struct SlowWrites(std::sync::Mutex<Option<std::time::Instant>>);

impl SlowWrites {
    fn record(&self, at: std::time::Instant) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(at);
    }

    /// Whether writes may run on async workers now (no slow write in the cooldown).
    fn inline_allowed(&self) -> bool {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_none_or(|at| at.elapsed() >= SLOW_WRITE_COOLDOWN)
    }
}

/// A write of a full batch running on a blocking thread; it hands the buffer back for reuse.
type BatchWrite = tokio::task::JoinHandle<(Vec<u8>, io::Result<()>)>;

/// A staging file held under an exclusive `flock`.
///
/// Writes are gathered into a [`WRITE_BATCH`]-sized buffer (the only copy of the bytes in user
/// space), and a full buffer is written at its offset (in [`WRITE_PIECE`]s).
///
/// That write runs on the request's async worker, as a Go server's write runs on its
/// goroutine, while the kernel takes a batch at memory speed: the bytes are still in the
/// core's cache from being received and hashed, and there is no round trip through the
/// blocking pool. On the streamed push of `bench/run.sh` (4 clients, 128 MiB blobs) that took
/// the server from 1.90 to 1.65 CPU seconds per GiB and from 725 to 871 MiB/s, where a write
/// on a blocking thread overlapping the next batch's receiving did not pay for its thread
/// hops. Once one write takes longer than [`SLOW_INLINE_WRITE`], the writer's later batches go
/// to a blocking thread, written while the next one fills, and so do every other writer's of
/// the store for [`SLOW_WRITE_COOLDOWN`]: a throttled or slow disk stalls a worker for one
/// write, not once per upload. A failed write poisons the writer: every later
/// call fails, and the upload code never records an offset past the bytes known to be written.
pub(super) struct FsWriter {
    inner: Arc<Inner>,
    key: Key,
    path: PathBuf,
    file: Arc<File>,
    /// Bytes accepted so far, buffered ones included.
    size: u64,
    /// The size the file was opened at: when nothing was written since, a suspend or a commit
    /// has nothing to make durable (what lies below it was synced by the suspend that wrote
    /// it), so the `fsync` is skipped: an upload's POST opens and suspends an empty file.
    opened: u64,
    /// Offset in the file where `buf` goes.
    at: u64,
    /// Bytes gathered for the next write.
    buf: Vec<u8>,
    /// The buffer of the last finished write, cleared, for the next batch.
    spare: Option<Vec<u8>>,
    in_flight: Option<BatchWrite>,
    /// Batches are written on the async worker (until one is slow, see [`SLOW_INLINE_WRITE`]).
    inline: bool,
    failed: bool,
}

impl FsWriter {
    pub(super) fn new(inner: Arc<Inner>, key: Key, path: PathBuf, file: File, at: u64) -> FsWriter {
        FsWriter {
            inner,
            key,
            path,
            file: Arc::new(file),
            size: at,
            opened: at,
            at,
            buf: Vec::new(),
            spare: None,
            in_flight: None,
            inline: true,
            failed: false,
        }
    }

    /// Waits for the running write (if any), then writes the gathered bytes (if any), or
    /// starts writing them on a blocking thread. Ready means no write is waiting to start; one
    /// may still be running there.
    fn poll_start(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.failed {
            return Poll::Ready(Err(io::Error::other(format!(
                "an earlier write to staging area {} failed",
                self.key
            ))));
        }
        if let Some(task) = self.in_flight.as_mut() {
            let done = std::task::ready!(std::future::Future::poll(Pin::new(task), cx));
            self.in_flight = None;
            let result = match done {
                Ok((mut spare, r)) => {
                    spare.clear();
                    self.spare = Some(spare);
                    r
                }
                Err(e) => Err(io::Error::other(e)),
            };
            if let Err(e) = result {
                self.failed = true;
                return Poll::Ready(Err(e));
            }
        }
        if self.buf.is_empty() {
            return Poll::Ready(Ok(()));
        }
        if self.inline && self.inner.slow_writes.inline_allowed() {
            let started = std::time::Instant::now();
            if let Err(e) = write_pieces(&self.file, &self.buf, self.at) {
                self.failed = true;
                return Poll::Ready(Err(e));
            }
            self.at += self.buf.len() as u64;
            self.buf.clear();
            let took = started.elapsed();
            if took > SLOW_INLINE_WRITE {
                tracing::debug!(key = %self.key, ?took, "a staging write was slow; this upload's later writes, and every upload's for a while, go to blocking threads");
                self.inline = false;
                self.inner.slow_writes.record(started + took);
            }
            return Poll::Ready(Ok(()));
        }
        let next = self
            .spare
            .take()
            .unwrap_or_else(|| Vec::with_capacity(WRITE_BATCH));
        let bytes = std::mem::replace(&mut self.buf, next);
        let (file, at) = (self.file.clone(), self.at);
        self.at += bytes.len() as u64;
        self.in_flight = Some(tokio::task::spawn_blocking(move || {
            let r = write_pieces(&file, &bytes, at);
            (bytes, r)
        }));
        Poll::Ready(Ok(()))
    }

    /// Writes out everything gathered and waits for it.
    async fn drain(&mut self) -> io::Result<()> {
        std::future::poll_fn(|cx| self.poll_drain(cx)).await
    }

    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        loop {
            std::task::ready!(self.poll_start(cx))?;
            if self.in_flight.is_none() && self.buf.is_empty() {
                return Poll::Ready(Ok(()));
            }
        }
    }

    async fn sync(&mut self) -> StoreResult<()> {
        self.drain().await.map_err(|e| backend(&self.key, e))?;
        if self.size == self.opened {
            return Ok(());
        }
        let file = self.file.clone();
        blocking(&self.key, {
            let key = self.key.clone();
            move || file.sync_all().map_err(|e| backend(&key, e))
        })
        .await
    }
}

impl AsyncWrite for FsWriter {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if this.failed || this.buf.len() >= WRITE_BATCH {
            std::task::ready!(this.poll_start(cx))?;
        }
        if data.is_empty() {
            return Poll::Ready(Ok(0));
        }
        if this.buf.capacity() == 0 {
            this.buf.reserve_exact(WRITE_BATCH);
        }
        let n = (WRITE_BATCH - this.buf.len()).min(data.len());
        this.buf.extend_from_slice(&data[..n]);
        this.size += n as u64;
        // A full batch starts at once when nothing else is being written; otherwise the next
        // call waits for the running write first.
        if this.buf.len() >= WRITE_BATCH && this.in_flight.is_none() {
            // Cannot be pending without a write in flight; an error is sticky and comes back
            // from the next call.
            let _ = this.poll_start(cx);
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_drain(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_drain(cx)
    }
}

impl StoreWriter for FsWriter {
    fn size(&self) -> u64 {
        self.size
    }

    fn suspend(mut self: Box<Self>) -> BoxFuture<'static, StoreResult<u64>> {
        Box::pin(async move {
            self.sync().await?;
            Ok(self.size)
        })
    }

    fn commit(mut self: Box<Self>, dest: Key) -> BoxFuture<'static, StoreResult<ObjectMeta>> {
        Box::pin(async move {
            self.sync().await?;
            let FsWriter {
                inner,
                key,
                path,
                file,
                size,
                ..
            } = *self;
            let d = dest.clone();
            blocking(&dest, move || {
                let target = inner.path(&d);
                let linked = with_parent(&target, || fs::hard_link(&path, &target));
                // The staging name goes whether or not the destination was free.
                if let Err(e) = fs::remove_file(&path) {
                    tracing::warn!(key = %key, error = %e, "could not remove a committed staging file");
                } else {
                    inner.prune(&path);
                }
                drop(file);
                match linked {
                    Ok(()) => {}
                    Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                        return Err(StoreError::AlreadyExists {
                            store: NAME,
                            key: d.clone(),
                        });
                    }
                    Err(e) => return Err(backend(&d, e)),
                }
                // Published: failures from here on are logged, not returned.
                if let Err(e) = sync_dir(target.parent().expect("parent")) {
                    tracing::warn!(key = %d, error = %e, "could not sync a blob directory");
                }
                // The hard link keeps the staging file's time (its last PATCH); a published
                // object is as old as its publication, which garbage collection's grace window
                // relies on.
                let now = std::time::SystemTime::now();
                if let Err(e) = File::open(&target).and_then(|f| f.set_modified(now)) {
                    tracing::warn!(key = %d, error = %e, "could not set a blob's modification time");
                }
                let modified = fs::metadata(&target)
                    .and_then(|m| m.modified())
                    .unwrap_or(now);
                Ok(ObjectMeta { size, modified })
            })
            .await
        })
    }

    fn cancel(mut self: Box<Self>) -> BoxFuture<'static, StoreResult<()>> {
        Box::pin(async move {
            // The running write (if any) ends first, so the file is not written after its
            // name is gone; its outcome does not matter any more.
            if let Some(task) = self.in_flight.take() {
                let _ = task.await;
            }
            let FsWriter {
                inner,
                key,
                path,
                file,
                ..
            } = *self;
            drop(file);
            let k = key.clone();
            blocking(&key, move || {
                fs::remove_file(&path).map_err(|e| map_io(&k, e))?;
                inner.prune(&path);
                Ok(())
            })
            .await
        })
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt as _;

    use super::super::{FsStore, Store as _};
    use super::*;

    /// Deterministic bytes that differ at every offset (so a misplaced batch shows).
    fn pattern(len: usize, seed: u64) -> Vec<u8> {
        let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect()
    }

    /// Writes `data` in pieces of the given sizes (cycled) and returns the writer.
    async fn write_in(w: &mut Box<dyn StoreWriter>, data: &[u8], sizes: &[usize]) {
        let mut pos = 0;
        for &n in sizes.iter().cycle() {
            if pos == data.len() {
                break;
            }
            let end = (pos + n).min(data.len());
            w.write_all(&data[pos..end]).await.unwrap();
            pos = end;
        }
    }

    fn staged(store: &FsStore, key: &Key) -> Vec<u8> {
        fs::read(store.inner.path(key)).unwrap()
    }

    /// Writes frames whose sizes straddle batch boundaries in every way (tiny, prime, one byte
    /// short of a batch, exactly a batch, and larger than two batches in one call) to `w`, and
    /// checks the staged bytes.
    async fn odd_frames_keep_every_byte_in_order(
        store: &FsStore,
        key: &Key,
        mut w: Box<dyn StoreWriter>,
    ) {
        let sizes = [
            1,
            4093,
            WRITE_BATCH - 1,
            7,
            WRITE_BATCH,
            2 * WRITE_BATCH + 3,
            32 << 10,
        ];
        let data = pattern(5 * WRITE_BATCH + 12_345, 1);
        write_in(&mut w, &data, &sizes).await;
        assert_eq!(w.size(), data.len() as u64);
        assert_eq!(w.suspend().await.unwrap(), data.len() as u64);
        let got = staged(store, key);
        assert_eq!(got.len(), data.len());
        assert!(got == data, "staged bytes differ from the written ones");
        assert_eq!(
            validator::Digest::sha256(&got),
            validator::Digest::sha256(&data)
        );
    }

    #[tokio::test]
    async fn frames_of_odd_sizes_across_batches_keep_every_byte_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        let key = Key::new("uploads/a/data").unwrap();
        let w = store.writer(&key, None).await.unwrap();
        odd_frames_keep_every_byte_in_order(&store, &key, w).await;
    }

    /// The same, with every batch written on a blocking thread while the next fills (the
    /// path a writer takes after a slow write).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batches_written_on_blocking_threads_keep_every_byte_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        let key = Key::new("uploads/d/data").unwrap();
        // A slow write a moment ago: the store's writers use blocking threads for a while.
        store.inner.slow_writes.record(std::time::Instant::now());
        let w = store.writer(&key, None).await.unwrap();
        odd_frames_keep_every_byte_in_order(&store, &key, w).await;
    }

    #[test]
    fn a_batch_written_in_pieces_lands_at_its_offset_whole() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = fs::File::create(&path).unwrap();
        let head = vec![7u8; 11];
        write_pieces(&file, &head, 0).unwrap();
        let batch: Vec<u8> = (0..(2 * WRITE_PIECE + 3) as u32)
            .map(|i| (i % 241) as u8)
            .collect();
        write_pieces(&file, &batch, head.len() as u64).unwrap();
        assert_eq!(fs::read(&path).unwrap(), [head, batch].concat());
    }

    #[test]
    fn a_slow_write_sends_the_stores_writes_to_blocking_threads_for_a_while() {
        let slow = SlowWrites::default();
        assert!(slow.inline_allowed());
        slow.record(std::time::Instant::now());
        assert!(!slow.inline_allowed());
        if let Some(long_ago) = std::time::Instant::now()
            .checked_sub(SLOW_WRITE_COOLDOWN + std::time::Duration::from_secs(1))
        {
            slow.record(long_ago);
            assert!(slow.inline_allowed());
        }
    }

    #[tokio::test]
    async fn a_resume_after_a_partial_batch_continues_at_the_recorded_offset() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        let key = Key::new("uploads/b/data").unwrap();
        let data = pattern(3 * WRITE_BATCH + 777, 2);
        let cut = WRITE_BATCH + 4321;
        let mut w = store.writer(&key, None).await.unwrap();
        write_in(&mut w, &data[..cut], &[9000]).await;
        let offset = w.suspend().await.unwrap();
        assert_eq!(offset, cut as u64);
        // Bytes a crashed request left past the offset are cut off on resume.
        let mut w = store.writer(&key, Some(offset)).await.unwrap();
        write_in(&mut w, &pattern(WRITE_BATCH + 5, 3), &[1000]).await;
        drop(w);
        let mut w = store.writer(&key, Some(offset)).await.unwrap();
        assert_eq!(w.size(), offset);
        write_in(&mut w, &data[cut..], &[3, 65_536, 11]).await;
        let meta = w.commit(Key::new("blobs/b/data").unwrap()).await.unwrap();
        assert_eq!(meta.size, data.len() as u64);
        assert!(staged(&store, &Key::new("blobs/b/data").unwrap()) == data);
    }

    #[tokio::test]
    async fn flush_makes_gathered_bytes_readable_before_a_batch_fills() {
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path()).unwrap();
        let key = Key::new("uploads/c/data").unwrap();
        let data = pattern(1000, 4);
        let mut w = store.writer(&key, None).await.unwrap();
        w.write_all(&data).await.unwrap();
        w.flush().await.unwrap();
        assert!(staged(&store, &key) == data);
        w.cancel().await.unwrap();
        assert!(!store.inner.path(&key).exists());
    }
}
