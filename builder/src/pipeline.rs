//! Payloads read ahead of the layer writer: worker threads read, inflate and verify the
//! payloads of one layer while the writer thread appends them to the tar in order.
//!
//! The writer thread of a layer does the tar headers, their compression, the DiffID and the
//! layer digest; reading a payload, inflating it and checking its content hash (most of a
//! build's CPU) is independent from one payload to the next. [`Payloads::start`] hands the
//! layer's payloads, in tar order, to `workers` threads; each worker streams one payload at a
//! time into a bounded channel of [`Piece`]s (the payload's raw deflate chunks and content
//! chunks, as [`ips_bridge::GzipSink`] hands them out), and the writer takes the channels in
//! tar order ([`Payloads::next`]) and replays each into the layer. The layer's bytes are the
//! ones a serial build writes, whatever the number of workers.
//!
//! Memory is bounded whatever the layer and payload sizes: a channel holds at most
//! [`CHUNKS`] pieces of at most 64 KiB (the splice buffer), and at most [`AHEAD`] × `workers`
//! channels wait for the writer besides the one it reads, so no more than
//! (4 × `workers` + 1) MiB of payload data is queued (9 MiB with two workers). A payload
//! without `pkg.size` is spooled to a temporary file by its worker, as before.
//!
//! Stopping: a worker's error (unreadable file, hash mismatch) is the last piece of its
//! payload and fails the build when the writer reaches that payload, naming the package and
//! path. When the writer stops early (that error, or an error writing the layer), it drops
//! the channels: workers see their sends fail and end, the feeder sees its send fail and
//! ends, and the threads are joined by the caller's scope.

use std::fs::File;
use std::io::{BufWriter, Seek};
use std::path::Path;
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::Scope;

use crate::BuildError;
use crate::compose::{Content, Node, Package};

/// Pieces queued per payload channel.
pub(crate) const CHUNKS: usize = 16;
/// Payload channels that may wait for the writer, per worker.
pub(crate) const AHEAD: usize = 4;
/// Chunk buffers kept for reuse.
const POOL: usize = 64;

/// Part of one payload, in the order the writer appends it.
pub(crate) enum Piece {
    /// A gzip member of the stored payload starts (0 for the first).
    Member(u64),
    /// Raw deflate bytes of the current member, as stored (gzip layers only).
    Deflated(Vec<u8>),
    /// Verified content of the current member.
    Content(Vec<u8>),
    /// The current member's CRC-32 and ISIZE.
    End([u8; 8]),
    /// A payload without `pkg.size`: its content, spooled, and its size.
    Spooled(File, u64),
    /// The payload was read and verified (the content size), or why not. Always last.
    Done(Result<u64, BuildError>),
}

/// One payload to read: the tar path, the node whose content it is, and its channel.
struct Job<'t> {
    path: &'t str,
    node: &'t Node,
    tx: SyncSender<Piece>,
}

/// The payloads of one layer, read ahead by worker threads; taken in tar order.
pub(crate) struct Payloads {
    order: Receiver<Receiver<Piece>>,
    pool: Arc<Pool>,
}

/// Chunk buffers handed back by the writer for the workers to fill again.
#[derive(Default)]
pub(crate) struct Pool(Mutex<Vec<Vec<u8>>>);

impl Pool {
    fn take(&self, data: &[u8]) -> Vec<u8> {
        let mut v = self
            .0
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .pop()
            .unwrap_or_default();
        v.clear();
        v.extend_from_slice(data);
        v
    }

    pub(crate) fn give(&self, v: Vec<u8>) {
        let mut free = self.0.lock().unwrap_or_else(PoisonError::into_inner);
        if free.len() < POOL {
            free.push(v);
        }
    }
}

impl Payloads {
    /// Starts a feeder and `workers` (at least one) threads in `scope` reading `nodes` (tar
    /// path and node of each file whose content is a payload, in tar order). `deflated`: hand out the raw deflate data
    /// (a gzip layer splices it); otherwise only the content.
    pub(crate) fn start<'scope, 't: 'scope>(
        scope: &'scope Scope<'scope, '_>,
        nodes: Vec<(&'t str, &'t Node)>,
        packages: &'t [Package<'t>],
        staging: &'t Path,
        workers: usize,
        deflated: bool,
    ) -> Payloads {
        let workers = workers.max(1);
        let (order_tx, order) = sync_channel::<Receiver<Piece>>(AHEAD * workers);
        // A rendezvous: a job is handed over only when a worker is free to start it, so jobs
        // start in tar order and none waits in this channel with its memory.
        let (work_tx, work_rx) = sync_channel::<Job<'t>>(0);
        let work_rx = Arc::new(Mutex::new(work_rx));
        let pool = Arc::new(Pool::default());
        scope.spawn(move || {
            for (path, node) in nodes {
                let (tx, rx) = sync_channel(CHUNKS);
                // Either fails only when the writer or every worker is gone: stop.
                if order_tx.send(rx).is_err() || work_tx.send(Job { path, node, tx }).is_err() {
                    return;
                }
            }
        });
        for _ in 0..workers {
            let work_rx = work_rx.clone();
            let pool = pool.clone();
            scope.spawn(move || {
                loop {
                    let job = match work_rx
                        .lock()
                        .unwrap_or_else(PoisonError::into_inner)
                        .recv()
                    {
                        Ok(job) => job,
                        Err(_) => return,
                    };
                    let done = read(
                        job.path, job.node, packages, staging, deflated, &job.tx, &pool,
                    );
                    // The writer may be gone; then so is the build.
                    let _ = job.tx.send(Piece::Done(done));
                }
            });
        }
        Payloads { order, pool }
    }

    /// The next payload's pieces, in tar order; `None` once they have all been taken (or a
    /// reader thread died, which the scope then reports).
    pub(crate) fn next(&self) -> Option<Receiver<Piece>> {
        self.order.recv().ok()
    }

    /// Where the writer hands back chunk buffers it has appended.
    pub(crate) fn pool(&self) -> &Pool {
        &self.pool
    }
}

/// Reads one payload into `tx`: spliced piece by piece when it has `pkg.size`, spooled to a
/// file otherwise. Errors name the package and the path the action installs.
fn read(
    path: &str,
    node: &Node,
    packages: &[Package<'_>],
    staging: &Path,
    deflated: bool,
    tx: &SyncSender<Piece>,
    pool: &Pool,
) -> Result<u64, BuildError> {
    let Content::Payload { pkg, action } = &node.content else {
        unreachable!("only payload files are read ahead");
    };
    let pkg = &packages[*pkg];
    // Errors name the path the package's action installs (a hardlinked file may be
    // carried at another path of its link group).
    let path = action.key().unwrap_or(path);
    let payload_err = |source| BuildError::Payload {
        package: pkg.fmri.to_string(),
        path: path.to_owned(),
        source,
    };
    let io_err = |source| BuildError::Io {
        path: staging.to_owned(),
        source,
    };
    match action.get("pkg.size").and_then(|s| s.parse::<u64>().ok()) {
        Some(size) => {
            let mut sink = Forward {
                tx,
                pool,
                deflated,
                left: size,
            };
            let n = pkg
                .source
                .splice_payload(&pkg.fmri, action, &mut sink)
                .map_err(payload_err)?;
            if n != size {
                return Err(BuildError::PayloadSize {
                    package: pkg.fmri.to_string(),
                    path: path.to_owned(),
                    expected: size,
                    actual: n,
                });
            }
            Ok(n)
        }
        None => {
            let mut spool = tempfile::tempfile_in(staging).map_err(io_err)?;
            let size = pkg
                .source
                .payload(&pkg.fmri, action, &mut BufWriter::new(&mut spool))
                .map_err(payload_err)?;
            spool.rewind().map_err(io_err)?;
            // The writer may be gone; `Done` is then not read either.
            let _ = tx.send(Piece::Spooled(spool, size));
            Ok(size)
        }
    }
}

/// Sends what the repository hands out to the writer. No more than `pkg.size` bytes of
/// content go out (the payload's check would fail the build anyway).
struct Forward<'a> {
    tx: &'a SyncSender<Piece>,
    pool: &'a Pool,
    deflated: bool,
    left: u64,
}

impl Forward<'_> {
    fn send(&self, piece: Piece) -> std::io::Result<()> {
        self.tx
            .send(piece)
            .map_err(|_| std::io::Error::other("the layer writer stopped"))
    }
}

impl ips_bridge::GzipSink for Forward<'_> {
    fn begin_member(&mut self, index: u64) -> std::io::Result<()> {
        self.send(Piece::Member(index))
    }

    fn deflated(&mut self, data: &[u8]) -> std::io::Result<()> {
        if self.deflated {
            self.send(Piece::Deflated(self.pool.take(data)))?;
        }
        Ok(())
    }

    fn content(&mut self, data: &[u8]) -> std::io::Result<()> {
        self.left = self
            .left
            .checked_sub(data.len() as u64)
            .ok_or_else(|| std::io::Error::other("payload content is longer than its pkg.size"))?;
        self.send(Piece::Content(self.pool.take(data)))
    }

    fn end_member(&mut self, trailer: [u8; 8]) -> std::io::Result<()> {
        self.send(Piece::End(trailer))
    }
}
