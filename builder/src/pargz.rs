//! Parallel gzip whose bytes do not depend on the number of threads.
//!
//! The input is cut into fixed blocks; each block is deflated on its own, primed with the 32 KiB
//! of input before it as the dictionary (so matches reach back as far as in one stream) and
//! ended with a sync flush (byte-aligned, not final); the last block is finished. The raw
//! deflate pieces, concatenated in order, form one deflate stream, wrapped in a fixed gzip header
//! and a trailer whose CRC-32 is combined from the blocks' CRCs. This is the scheme pigz uses;
//! any gzip reader decodes it. Because a block's output depends only on its own bytes, the
//! previous 32 KiB and the level, the layer digest is the same on one core or sixty-four, so a
//! build is reproducible across machines while still using all of them.
//!
//! Memory is bounded: at most `4 × threads` blocks are in flight; `write` waits for the oldest
//! to come back before queueing more.

use std::collections::VecDeque;
use std::io::{self, Write};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

use flate2::{Compress, Compression, FlushCompress, Status};

/// Uncompressed bytes per block (pigz's default, 128 KiB).
pub(crate) const BLOCK: usize = 128 << 10;
/// The deflate window: how much preceding input primes each block.
const DICT: usize = 32 << 10;
/// The largest last block of a member that is deflated on the writer's thread.
const INLINE_MAX: usize = 16 << 10;
/// Blocks in flight per worker thread (the queue and the pieces waiting to be written). The
/// writer thread also inflates and hashes payloads, at a rate that varies from file to file;
/// with 2 per thread a 2-core build of the bench tree used 1.71 of the 2 cores, with 4 it ran
/// about 9% shorter (same bytes, about 2 MiB more memory).
const IN_FLIGHT_PER_THREAD: usize = 4;

struct Job {
    dict: Arc<Vec<u8>>,
    data: Arc<Vec<u8>>,
    last: bool,
    level: u32,
    done: SyncSender<io::Result<Piece>>,
}

/// One compressed block and the CRC of its input.
struct Piece {
    deflated: Vec<u8>,
    crc: crc32fast::Hasher,
}

fn deflate_block(dict: &[u8], data: &[u8], last: bool, level: u32) -> io::Result<Piece> {
    deflate_block_with(
        &mut Compress::new(Compression::new(level), false),
        dict,
        data,
        last,
    )
}

/// [`deflate_block`] with a compressor that was just created or reset (the same bytes: a
/// reset deflate stream starts as a new one, without allocating and clearing its tables
/// again, which a few hundred bytes of tar headers would not pay for).
fn deflate_block_with(c: &mut Compress, dict: &[u8], data: &[u8], last: bool) -> io::Result<Piece> {
    if !dict.is_empty() {
        c.set_dictionary(dict).map_err(io::Error::other)?;
    }
    let flush = if last {
        FlushCompress::Finish
    } else {
        FlushCompress::Sync
    };
    let mut out = Vec::with_capacity(data.len() / 2 + 64);
    loop {
        let consumed = c.total_in() as usize;
        let status = c
            .compress_vec(&data[consumed..], &mut out, flush)
            .map_err(io::Error::other)?;
        let input_done = c.total_in() as usize == data.len();
        // Done when all input is in and the flush left spare room (nothing pending), or the
        // stream ended.
        if status == Status::StreamEnd || (!last && input_done && out.len() < out.capacity()) {
            break;
        }
        out.reserve(out.capacity().max(4096));
    }
    let mut crc = crc32fast::Hasher::new();
    crc.update(data);
    Ok(Piece { deflated: out, crc })
}

/// Worker threads taking [`Job`]s from one queue; they end when the queue's sender goes.
struct Pool {
    jobs: Option<SyncSender<Job>>,
    workers: Vec<JoinHandle<()>>,
}

impl Pool {
    fn new(threads: usize) -> Pool {
        let (tx, rx) = sync_channel::<Job>(threads * IN_FLIGHT_PER_THREAD);
        let rx = Arc::new(Mutex::new(rx));
        let workers = (0..threads)
            .map(|_| {
                let rx: Arc<Mutex<Receiver<Job>>> = rx.clone();
                std::thread::spawn(move || {
                    loop {
                        // The lock is held only to take one job.
                        let job = match rx.lock() {
                            Ok(r) => r.recv(),
                            Err(_) => return,
                        };
                        let Ok(job) = job else { return };
                        let r = deflate_block(&job.dict, &job.data, job.last, job.level);
                        // The writer may be gone (dropped mid-layer): nothing to report to.
                        let _ = job.done.send(r);
                    }
                })
            })
            .collect();
        Pool {
            jobs: Some(tx),
            workers,
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.jobs.take();
        for w in self.workers.drain(..) {
            let _ = w.join();
        }
    }
}

/// A gzip encoder compressing blocks on `threads` threads (inline when 1); same bytes for any
/// thread count.
pub(crate) struct ParGzEncoder<W: Write> {
    out: W,
    level: u32,
    pool: Option<Pool>,
    max_in_flight: usize,
    in_flight: VecDeque<Receiver<io::Result<Piece>>>,
    buf: Vec<u8>,
    dict: Arc<Vec<u8>>,
    crc: crc32fast::Hasher,
    total: u64,
    header_written: bool,
    /// The compressor of blocks deflated on the writer's thread, reused.
    inline: Option<Box<Compress>>,
}

impl<W: Write> ParGzEncoder<W> {
    pub(crate) fn new(out: W, level: u32, threads: u32) -> ParGzEncoder<W> {
        let threads = threads.max(1) as usize;
        ParGzEncoder {
            out,
            level: level.min(9),
            pool: (threads > 1).then(|| Pool::new(threads)),
            max_in_flight: threads * IN_FLIGHT_PER_THREAD,
            in_flight: VecDeque::new(),
            buf: Vec::with_capacity(BLOCK),
            dict: Arc::new(Vec::new()),
            crc: crc32fast::Hasher::new(),
            total: 0,
            header_written: false,
            inline: None,
        }
    }

    fn header(&mut self) -> io::Result<()> {
        if self.header_written {
            return Ok(());
        }
        self.header_written = true;
        // A fixed header: no name, mtime 0, XFL as gzip sets it for the level, OS "unknown",
        // so the bytes do not depend on the build machine or time.
        let xfl = match self.level {
            9 => 2,
            1 => 4,
            _ => 0,
        };
        self.out
            .write_all(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, xfl, 255])
    }

    fn write_piece(&mut self, piece: Piece) -> io::Result<()> {
        self.out.write_all(&piece.deflated)?;
        self.crc.combine(&piece.crc);
        Ok(())
    }

    fn wait_oldest(&mut self) -> io::Result<()> {
        if let Some(rx) = self.in_flight.pop_front() {
            let piece = rx
                .recv()
                .map_err(|_| io::Error::other("a gzip worker thread died"))??;
            self.write_piece(piece)?;
        }
        Ok(())
    }

    /// Compresses the buffered block (the next block's dictionary is its tail).
    fn submit(&mut self, last: bool) -> io::Result<()> {
        self.header()?;
        let data = Arc::new(std::mem::replace(&mut self.buf, Vec::with_capacity(BLOCK)));
        let dict = std::mem::replace(
            &mut self.dict,
            Arc::new(data[data.len().saturating_sub(DICT)..].to_vec()),
        );
        self.total += data.len() as u64;
        let level = self.level;
        // A small last block with nothing in flight (the tar headers between spliced
        // payloads) is deflated here: handing it to a worker would only add a round trip.
        // The bytes are the same either way (`deflate_block` depends on its inputs only).
        let inline = last && self.in_flight.is_empty() && data.len() <= INLINE_MAX;
        let jobs = self.pool.as_ref().and_then(|p| p.jobs.clone());
        let Some(jobs) = jobs.filter(|_| !inline) else {
            let c = self
                .inline
                .get_or_insert_with(|| Box::new(Compress::new(Compression::new(level), false)));
            c.reset();
            let piece = deflate_block_with(c, &dict, &data, last)?;
            return self.write_piece(piece);
        };
        while self.in_flight.len() >= self.max_in_flight {
            self.wait_oldest()?;
        }
        let (done, rx) = sync_channel(1);
        let job = Job {
            dict,
            data,
            last,
            level,
            done,
        };
        jobs.send(job)
            .map_err(|_| io::Error::other("the gzip worker threads are gone"))?;
        self.in_flight.push_back(rx);
        Ok(())
    }

    /// Ends the current gzip member (compresses what is left, writes the trailer) and starts
    /// a new one: the next bytes written start a fresh deflate stream with its own header.
    /// Nothing is written when nothing was since the last member ended.
    pub(crate) fn end_member(&mut self) -> io::Result<()> {
        if !self.header_written && self.buf.is_empty() {
            return Ok(());
        }
        self.submit(true)?;
        while !self.in_flight.is_empty() {
            self.wait_oldest()?;
        }
        let crc = std::mem::replace(&mut self.crc, crc32fast::Hasher::new()).finalize();
        let mut trailer = [0u8; 8];
        trailer[..4].copy_from_slice(&crc.to_le_bytes());
        trailer[4..].copy_from_slice(&(self.total as u32).to_le_bytes());
        self.out.write_all(&trailer)?;
        self.total = 0;
        self.dict = Arc::new(Vec::new());
        self.header_written = false;
        Ok(())
    }

    /// Writes bytes straight to the output between members (a member made elsewhere, such
    /// as a payload's deflate data under a header and trailer). Ends the current member
    /// first.
    pub(crate) fn write_raw(&mut self, data: &[u8]) -> io::Result<()> {
        self.end_member()?;
        self.out.write_all(data)
    }

    /// Compresses what is left, writes the trailer and returns the inner writer. The stream
    /// always ends with a member of its own (an empty input still makes one gzip member).
    pub(crate) fn finish(mut self) -> io::Result<W> {
        if !self.header_written && self.buf.is_empty() {
            self.header()?;
        }
        self.end_member()?;
        self.out.flush()?;
        self.pool.take();
        Ok(self.out)
    }
}

impl<W: Write> Write for ParGzEncoder<W> {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(BLOCK - self.buf.len());
        self.buf.extend_from_slice(&data[..n]);
        if self.buf.len() == BLOCK {
            self.submit(false)?;
        }
        Ok(n)
    }

    /// Only the inner writer is flushed: a block is compressed when full or at `finish`, so
    /// flushing never changes the bytes.
    fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use super::*;

    fn sample(len: usize) -> Vec<u8> {
        // Compressible but not trivial: repeating text with a counter, and some noise.
        let mut v = Vec::with_capacity(len);
        let mut x: u32 = 1;
        while v.len() < len {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if x.is_multiple_of(7) {
                v.extend_from_slice(&x.to_le_bytes());
            } else {
                v.extend_from_slice(
                    format!("line {} of the sample text\n", v.len() % 977).as_bytes(),
                );
            }
        }
        v.truncate(len);
        v
    }

    fn gz(data: &[u8], level: u32, threads: u32, chunk: usize) -> Vec<u8> {
        let mut e = ParGzEncoder::new(Vec::new(), level, threads);
        for c in data.chunks(chunk.max(1)) {
            e.write_all(c).unwrap();
        }
        e.finish().unwrap()
    }

    fn gunzip(gz: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        flate2::read::GzDecoder::new(gz)
            .read_to_end(&mut out)
            .unwrap();
        out
    }

    #[test]
    fn round_trips_at_every_size_around_block_edges() {
        for len in [
            0,
            1,
            100,
            BLOCK - 1,
            BLOCK,
            BLOCK + 1,
            3 * BLOCK + 17,
            DICT - 1,
        ] {
            let data = sample(len);
            for threads in [1, 3] {
                let z = gz(&data, 6, threads, 10_000);
                assert_eq!(gunzip(&z), data, "len {len}, {threads} threads");
            }
        }
    }

    #[test]
    fn bytes_do_not_depend_on_threads_or_write_sizes() {
        let data = sample(5 * BLOCK + 12_345);
        for level in [1, 6, 9] {
            let one = gz(&data, level, 1, 1 << 20);
            for (threads, chunk) in [(2, 4096), (4, 77), (8, BLOCK)] {
                assert!(
                    gz(&data, level, threads, chunk) == one,
                    "level {level}: {threads} threads, writes of {chunk}"
                );
            }
        }
    }

    #[test]
    fn the_system_gzip_reads_it_and_the_trailer_is_right() {
        let data = sample(2 * BLOCK + 999);
        let z = gz(&data, 6, 2, 5000);
        assert_eq!(&z[..4], &[0x1f, 0x8b, 8, 0], "magic, deflate, no flags");
        assert_eq!(&z[4..8], &[0, 0, 0, 0], "mtime 0");
        assert_eq!(z[9], 255, "OS unknown");
        let n = z.len();
        assert_eq!(
            u32::from_le_bytes(z[n - 4..].try_into().unwrap()),
            data.len() as u32
        );
        assert_eq!(
            u32::from_le_bytes(z[n - 8..n - 4].try_into().unwrap()),
            crc32fast::hash(&data)
        );
        let Ok(mut child) = std::process::Command::new("gzip")
            .args(["-d", "-c"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
        else {
            panic!("gzip(1) is needed for this test");
        };
        let mut stdin = child.stdin.take().unwrap();
        let writer = std::thread::spawn(move || stdin.write_all(&z));
        let out = child.wait_with_output().unwrap();
        writer.join().unwrap().unwrap();
        assert!(out.status.success());
        assert!(out.stdout == data, "gzip -d gives the input back");
    }

    #[test]
    fn members_ended_between_raw_bytes_read_back_and_do_not_depend_on_threads() {
        let a = sample(3 * BLOCK + 5);
        let b = sample(700);
        // A complete member made elsewhere, written as it is between ours.
        let mut other = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(9));
        other.write_all(b"spliced in").unwrap();
        let other = other.finish().unwrap();
        let run = |threads| {
            let mut e = ParGzEncoder::new(Vec::new(), 6, threads);
            e.write_all(&a).unwrap();
            e.write_raw(&other).unwrap();
            // Nothing written since: no empty member.
            e.end_member().unwrap();
            e.write_raw(&other).unwrap();
            e.write_all(&b).unwrap();
            e.finish().unwrap()
        };
        let one = run(1);
        assert!(run(3) == one);
        let mut got = Vec::new();
        flate2::read::MultiGzDecoder::new(&one[..])
            .read_to_end(&mut got)
            .unwrap();
        let want = [&a[..], b"spliced in", b"spliced in", &b[..]].concat();
        assert!(got == want);
        // Four members: ours, the two spliced ones, ours.
        let mut members = 0;
        let mut rest = &one[..];
        while !rest.is_empty() {
            let mut d = flate2::bufread::GzDecoder::new(rest);
            io::copy(&mut d, &mut io::sink()).unwrap();
            rest = d.into_inner();
            members += 1;
        }
        assert_eq!(members, 4);
    }

    #[test]
    fn compresses_about_as_well_as_one_stream() {
        let data = sample(8 * BLOCK);
        let ours = gz(&data, 6, 2, 1 << 16).len();
        let mut one = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
        one.write_all(&data).unwrap();
        let one = one.finish().unwrap().len();
        // The dictionary keeps matches across blocks; only the flush markers (5 bytes per
        // block) and restarted Huffman tables cost anything.
        assert!(
            (ours as f64) < one as f64 * 1.03 + 64.0,
            "parallel {ours} bytes vs one stream {one}"
        );
    }
}
