//! A reader that runs its source on another thread, a bounded number of chunks ahead.
//!
//! Unpacking a layer is three kinds of work on one stream: inflating, hashing the uncompressed
//! bytes (the DiffID) and writing files. On one thread they add up; with decompression moved
//! here they overlap on a second core, and memory stays bounded by `DEPTH` chunks in flight.
//! The reader hands each drained chunk back, so the thread fills the same few buffers again
//! instead of allocating (and zeroing) a fresh 256 KiB for every chunk of the layer.

use std::io::{self, Read};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::{Receiver, Sender, SyncSender, channel, sync_channel};
use std::thread::{Scope, ScopedJoinHandle};

/// Bytes per chunk handed across.
const CHUNK: usize = 256 * 1024;
/// Chunks the source may run ahead of the reader.
const DEPTH: usize = 4;

/// What crosses the channel: data, the source's error, or the end (an empty chunk), so that a
/// source thread that died without saying so is told apart from a stream that ended.
type Message = io::Result<Vec<u8>>;

/// Starts reading `src` on a thread of `scope`. The returned reader yields the same bytes and
/// the same errors, in order; dropping it stops the thread at its next chunk. Join the handle
/// after dropping the reader: `Err` means the thread panicked.
pub(crate) fn spawn<'scope, 'env, R: Read + Send + 'scope>(
    scope: &'scope Scope<'scope, 'env>,
    name: &str,
    src: R,
) -> io::Result<(Reader, ScopedJoinHandle<'scope, ()>)> {
    let (tx, rx) = sync_channel(DEPTH);
    // Unbounded, but it never holds more than the chunks in flight: at most DEPTH + 3 buffers
    // exist (DEPTH queued, one blocked in `send`, one being read, one handed back).
    let (back, spare) = channel();
    let allocated = Arc::new(AtomicUsize::new(0));
    let counter = allocated.clone();
    let handle = std::thread::Builder::new()
        .name(name.to_owned())
        .spawn_scoped(scope, move || produce(src, &tx, &spare, &counter))?;
    Ok((
        Reader {
            rx,
            back,
            allocated,
            chunk: Vec::new(),
            pos: 0,
            ended: false,
        },
        handle,
    ))
}

fn produce<R: Read>(
    mut src: R,
    tx: &SyncSender<Message>,
    spare: &Receiver<Vec<u8>>,
    allocated: &AtomicUsize,
) {
    loop {
        // A returned buffer keeps its (initialised) length; only a new one is zeroed.
        let mut buf = match spare.try_recv() {
            Ok(mut b) => {
                b.resize(CHUNK, 0);
                b
            }
            Err(_) => {
                allocated.fetch_add(1, Ordering::Relaxed);
                vec![0u8; CHUNK]
            }
        };
        let mut filled = 0;
        while filled < CHUNK {
            match src.read(&mut buf[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // Bytes read before the error go first, as a direct reader would give them.
                    if filled > 0 {
                        buf.truncate(filled);
                        if tx.send(Ok(buf)).is_err() {
                            return;
                        }
                    }
                    let _ = tx.send(Err(e));
                    return;
                }
            }
        }
        let end = filled < CHUNK;
        buf.truncate(filled);
        if filled > 0 && tx.send(Ok(buf)).is_err() {
            return; // the reader is gone
        }
        if end {
            let _ = tx.send(Ok(Vec::new()));
            return;
        }
    }
}

/// The reading end of [`spawn`].
pub(crate) struct Reader {
    rx: Receiver<Message>,
    /// Drained chunks go back to the thread for refilling.
    back: Sender<Vec<u8>>,
    /// Buffers the thread has allocated so far (the rest were refills); read by the tests.
    #[cfg_attr(not(test), allow(dead_code))]
    allocated: Arc<AtomicUsize>,
    chunk: Vec<u8>,
    pos: usize,
    ended: bool,
}

#[cfg(test)]
impl Reader {
    /// How many chunk buffers the thread has allocated so far.
    fn buffers_allocated(&self) -> usize {
        self.allocated.load(Ordering::Relaxed)
    }
}

impl Read for Reader {
    fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
        if out.is_empty() {
            return Ok(0);
        }
        while self.pos == self.chunk.len() {
            if self.ended {
                return Ok(0);
            }
            match self.rx.recv() {
                Ok(Ok(chunk)) if chunk.is_empty() => self.ended = true,
                Ok(Ok(chunk)) => {
                    let done = std::mem::replace(&mut self.chunk, chunk);
                    if done.capacity() == CHUNK {
                        // The thread may be gone (source ended): the buffer is then just freed.
                        let _ = self.back.send(done);
                    }
                    self.pos = 0;
                }
                Ok(Err(e)) => {
                    self.ended = true;
                    return Err(e);
                }
                Err(_) => {
                    self.ended = true;
                    return Err(io::Error::other(
                        "the decompression thread stopped before the end of the stream",
                    ));
                }
            }
        }
        let n = out.len().min(self.chunk.len() - self.pos);
        out[..n].copy_from_slice(&self.chunk[self.pos..self.pos + n]);
        self.pos += n;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Yields `data` in odd-sized reads, then fails with `err` if given.
    struct Source {
        data: Vec<u8>,
        pos: usize,
        err: Option<io::ErrorKind>,
    }

    impl Read for Source {
        fn read(&mut self, out: &mut [u8]) -> io::Result<usize> {
            if self.pos == self.data.len() {
                return match self.err.take() {
                    Some(k) => Err(io::Error::new(k, "bad block")),
                    None => Ok(0),
                };
            }
            let n = out.len().min(7919).min(self.data.len() - self.pos);
            out[..n].copy_from_slice(&self.data[self.pos..self.pos + n]);
            self.pos += n;
            Ok(n)
        }
    }

    fn data(len: usize) -> Vec<u8> {
        (0..len).map(|i| (i * 31 % 251) as u8).collect()
    }

    #[test]
    fn same_bytes_in_order_at_every_size_through_a_few_buffers() {
        for len in [
            0,
            1,
            CHUNK - 1,
            CHUNK,
            CHUNK + 1,
            3 * CHUNK + 12345,
            64 * CHUNK + 5,
        ] {
            let want = data(len);
            let src = Source {
                data: want.clone(),
                pos: 0,
                err: None,
            };
            std::thread::scope(|s| {
                let (mut r, h) = spawn(s, "t", src).unwrap();
                let mut got = Vec::new();
                r.read_to_end(&mut got).unwrap();
                assert_eq!(got.len(), want.len());
                assert!(got == want, "len {len}");
                assert_eq!(r.read(&mut [0u8; 8]).unwrap(), 0, "stays at the end");
                // Up to 65 chunks went through; without the refill each is a new allocation.
                let n = r.buffers_allocated();
                assert!(
                    (1..=DEPTH + 3).contains(&n),
                    "len {len}: {n} buffers allocated"
                );
                drop(r);
                h.join().unwrap();
            });
        }
    }

    #[test]
    fn the_source_error_arrives_after_its_bytes() {
        let want = data(CHUNK + 100);
        let src = Source {
            data: want.clone(),
            pos: 0,
            err: Some(io::ErrorKind::InvalidData),
        };
        std::thread::scope(|s| {
            let (mut r, h) = spawn(s, "t", src).unwrap();
            let mut got = vec![0u8; want.len()];
            r.read_exact(&mut got).unwrap();
            assert!(got == want);
            let e = r.read(&mut [0u8; 8]).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert_eq!(e.to_string(), "bad block");
            drop(r);
            h.join().unwrap();
        });
    }

    #[test]
    fn dropping_the_reader_early_stops_the_thread() {
        // Far more than DEPTH chunks: the thread must notice the reader is gone, not block.
        let src = Source {
            data: data(64 * CHUNK),
            pos: 0,
            err: None,
        };
        std::thread::scope(|s| {
            let (mut r, h) = spawn(s, "t", src).unwrap();
            let mut first = [0u8; 10];
            r.read_exact(&mut first).unwrap();
            drop(r);
            h.join().unwrap();
        });
    }

    #[test]
    fn a_thread_that_dies_is_an_error_not_an_end() {
        struct Panics;
        impl Read for Panics {
            fn read(&mut self, _: &mut [u8]) -> io::Result<usize> {
                panic!("decoder bug");
            }
        }
        std::thread::scope(|s| {
            let (mut r, h) = spawn(s, "t", Panics).unwrap();
            let e = r.read(&mut [0u8; 8]).unwrap_err();
            assert!(e.to_string().contains("stopped before the end"), "{e}");
            drop(r);
            assert!(h.join().is_err());
        });
    }
}
