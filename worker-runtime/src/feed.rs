//! Unpacking a layer while it downloads.
//!
//! A [`LayerFeed`] is what the download of one layer tells the unpacker: the content store's
//! ingest file the bytes land in, how many of them are written so far, and whether the blob
//! was published (size and digest verified) or the download stopped. A [`FeedReader`] reads
//! that file as it grows, waiting when it has caught up, and ends only once the blob is
//! published. So the bytes the unpacker inflates are the bytes that go through the blob
//! hasher into the store (read back from the page cache), the download never waits for the
//! unpacker, and memory stays bounded: the file is the buffer.
//!
//! What makes the result trustworthy is not the reader: a root built from feeds counts only
//! when every layer's DiffID matched (the uncompressed stream is exactly the one the verified
//! config names) *and* every layer's download ended published (the caller waits for that).
//! If a download starts over (a registry that ignores the range, a continuation that did not
//! verify and was fetched again from the start), bytes already read may not be the final
//! ones: the reader then fails, and the caller builds the root again from the verified blobs.

use std::fs::File;
use std::io::{self, Read};
use std::os::unix::fs::{FileExt as _, MetadataExt as _};
use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex};

/// How a layer's download ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// The blob is in the store, verified.
    Published,
    /// The pull gave up on it (failed, or cancelled).
    Stopped,
}

#[derive(Debug, Default)]
struct State {
    /// Bumped whenever bytes already announced may change (another file, or a shorter one).
    epoch: u64,
    /// The file being written, opened for reading, with its device and inode.
    file: Option<(Arc<File>, (u64, u64))>,
    /// Bytes of `file` written so far.
    written: u64,
    end: Option<End>,
}

/// One layer's download, as the unpacker sees it. The downloader calls [`LayerFeed::begin`],
/// [`LayerFeed::written`] and [`LayerFeed::published`]; whoever runs the downloads calls
/// [`LayerFeed::stop`] once they ended, so a reader never waits for a download that is over.
#[derive(Debug, Default)]
pub(crate) struct LayerFeed {
    state: Mutex<State>,
    changed: Condvar,
}

impl LayerFeed {
    fn update(&self, f: impl FnOnce(&mut State)) {
        let mut st = self.state.lock().unwrap_or_else(|e| e.into_inner());
        f(&mut st);
        drop(st);
        self.changed.notify_all();
    }

    /// Bytes are (about to be) written into `file`, which already holds `written` of them (a
    /// resumed download). Another file than before, or fewer bytes, starts a new epoch.
    pub(crate) fn begin(&self, file: File, written: u64) {
        let id = file
            .metadata()
            .map(|m| (m.dev(), m.ino()))
            .unwrap_or((u64::MAX, u64::MAX));
        self.update(|st| {
            let same = st.file.as_ref().is_some_and(|(_, old)| *old == id);
            if st.file.is_some() && (!same || written < st.written) {
                st.epoch += 1;
            }
            st.file = Some((Arc::new(file), id));
            st.written = written;
        });
    }

    /// The file now holds `written` bytes.
    pub(crate) fn written(&self, written: u64) {
        self.update(|st| st.written = written);
    }

    /// The blob is in the store, verified.
    pub(crate) fn published(&self) {
        self.update(|st| st.end = Some(End::Published));
    }

    /// The download ended without publishing (a no-op once published).
    pub(crate) fn stop(&self) {
        self.update(|st| {
            st.end.get_or_insert(End::Stopped);
        });
    }
}

/// Reads a layer blob of `size` bytes through its [`LayerFeed`]: from the ingest file while it
/// downloads, or from `blob_path` when it was already in the store.
#[derive(Debug)]
pub(crate) struct FeedReader {
    feed: Arc<LayerFeed>,
    blob_path: PathBuf,
    size: u64,
    file: Option<Arc<File>>,
    epoch: u64,
    pos: u64,
}

impl FeedReader {
    /// A reader of the blob at `blob_path` (`size` bytes) fed by `feed`.
    pub(crate) fn new(feed: Arc<LayerFeed>, blob_path: PathBuf, size: u64) -> FeedReader {
        FeedReader {
            feed,
            blob_path,
            size,
            file: None,
            epoch: 0,
            pos: 0,
        }
    }
}

impl Read for FeedReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        let feed = self.feed.clone();
        let mut st = feed.state.lock().unwrap_or_else(|e| e.into_inner());
        let (file, avail) = loop {
            if self.file.is_some() && st.epoch != self.epoch {
                return Err(io::Error::other(
                    "the layer's download started over while it was being unpacked",
                ));
            }
            if st.end == Some(End::Stopped) {
                return Err(io::Error::other(
                    "the layer's download stopped before the blob verified",
                ));
            }
            if self.file.is_none() {
                if st.end == Some(End::Published) {
                    self.file = Some(Arc::new(File::open(&self.blob_path)?));
                } else if let Some((f, _)) = &st.file {
                    self.file = Some(f.clone());
                    self.epoch = st.epoch;
                } else {
                    st = feed.changed.wait(st).unwrap_or_else(|e| e.into_inner());
                    continue;
                }
            }
            let published = st.end == Some(End::Published);
            let avail = if published { self.size } else { st.written };
            if self.pos < avail {
                break (self.file.clone().expect("set above"), avail);
            }
            if published {
                return Ok(0);
            }
            st = feed.changed.wait(st).unwrap_or_else(|e| e.into_inner());
        };
        drop(st);
        let want = usize::try_from(avail - self.pos)
            .unwrap_or(usize::MAX)
            .min(buf.len());
        let n = file.read_at(&mut buf[..want], self.pos)?;
        if n == 0 {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "the layer's file ends at {} of {avail} bytes written",
                    self.pos
                ),
            ));
        }
        self.pos += n as u64;
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    fn reader_thread(
        feed: &Arc<LayerFeed>,
        path: PathBuf,
        size: u64,
    ) -> std::thread::JoinHandle<io::Result<Vec<u8>>> {
        let mut r = FeedReader::new(feed.clone(), path, size);
        std::thread::spawn(move || {
            let mut out = Vec::new();
            r.read_to_end(&mut out).map(|_| out)
        })
    }

    #[test]
    fn follows_a_growing_file_and_ends_when_published() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("partial");
        let mut w = File::create(&path).unwrap();
        let feed = Arc::new(LayerFeed::default());
        let r = reader_thread(&feed, dir.path().join("absent-blob"), 12);
        w.write_all(b"abcd").unwrap();
        feed.begin(File::open(&path).unwrap(), 4);
        w.write_all(b"efghijkl").unwrap();
        feed.written(8);
        feed.written(12);
        // All bytes are there, but the reader ends only once the blob verified.
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert!(!r.is_finished(), "ended before the blob was published");
        feed.published();
        assert_eq!(r.join().unwrap().unwrap(), b"abcdefghijkl");
    }

    #[test]
    fn reads_a_blob_already_in_the_store() {
        let dir = tempfile::tempdir().unwrap();
        let blob = dir.path().join("blob");
        std::fs::write(&blob, b"stored").unwrap();
        let feed = Arc::new(LayerFeed::default());
        feed.published();
        let r = reader_thread(&feed, blob, 6);
        assert_eq!(r.join().unwrap().unwrap(), b"stored");
    }

    #[test]
    fn a_download_that_starts_over_or_stops_fails_the_reader() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("partial");
        std::fs::write(&path, b"0123").unwrap();
        let feed = Arc::new(LayerFeed::default());
        let mut r = FeedReader::new(feed.clone(), dir.path().join("blob"), 8);
        feed.begin(File::open(&path).unwrap(), 4);
        let mut first = [0u8; 4];
        r.read_exact(&mut first).unwrap();
        assert_eq!(&first, b"0123");
        // Started over from zero in the same file (a registry that ignored the range).
        feed.begin(File::open(&path).unwrap(), 0);
        let e = r.read(&mut first).unwrap_err();
        assert!(e.to_string().contains("started over"), "{e}");

        let feed = Arc::new(LayerFeed::default());
        let r = reader_thread(&feed, dir.path().join("blob"), 8);
        feed.begin(File::open(&path).unwrap(), 4);
        feed.stop();
        let e = r.join().unwrap().unwrap_err();
        assert!(e.to_string().contains("stopped"), "{e}");
        // Stopping after the publish changes nothing.
        let feed = Arc::new(LayerFeed::default());
        feed.published();
        feed.stop();
        assert_eq!(
            feed.state.lock().unwrap().end,
            Some(End::Published),
            "published stays published"
        );
    }
}
