//! Which file, and where in it, a slice of a mapped blob window shows: the connection layer
//! asks this to send those bytes with `sendfile(2)` instead of copying them from the mapping
//! into the socket (`crate::conn`).
//!
//! The filesystem store serves a blob GET as a stream of mapped windows of the blob's file
//! ([`MappedWindow`]); the response body stays an ordinary axum body, so every check before the
//! first byte (rights, link, quarantine), every header and every other protocol path is
//! unchanged. Only the last step differs: when hyper hands a plain TCP socket a slice that lies
//! inside a live window, that slice *is* the file's bytes from a known offset, so the socket can
//! be told to take them from the file (page cache to socket, no copy through user space). The
//! substitution is exact whatever the protocol framing around the slice (HTTP/1.1 or h2), since
//! it sends the same bytes; TLS never sees it, because the TLS stream encrypts into its own
//! buffers and only those reach the socket.
//!
//! A window registers its address range when made and removes it before it is unmapped, so a
//! slice found here is alive and shows exactly the file's bytes (committed objects are never
//! changed in place; an unlinked file keeps its bytes for the descriptor).

use std::collections::BTreeMap;
use std::fs::File;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, RwLock};

/// A mapped window of a file, registered while it lives.
#[derive(Debug)]
pub(crate) struct MappedWindow {
    map: memmap2::Mmap,
}

#[derive(Debug)]
struct Region {
    len: usize,
    file: Arc<File>,
    offset: u64,
}

/// Live windows by start address.
static REGIONS: LazyLock<RwLock<BTreeMap<usize, Region>>> = LazyLock::new(Default::default);
/// How many windows live: a socket write skips the lookup while there are none.
static LIVE: AtomicUsize = AtomicUsize::new(0);
/// Bytes sent from files by `sendfile` (`registry_blob_bytes_sent_from_file_total`).
static SENT: AtomicU64 = AtomicU64::new(0);

impl MappedWindow {
    /// Registers `map`, which shows `file` from `offset`.
    pub(crate) fn new(map: memmap2::Mmap, file: Arc<File>, offset: u64) -> MappedWindow {
        if !map.is_empty() {
            let region = Region {
                len: map.len(),
                file,
                offset,
            };
            REGIONS
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .insert(map.as_ptr() as usize, region);
            LIVE.fetch_add(1, Ordering::Release);
        }
        MappedWindow { map }
    }
}

impl AsRef<[u8]> for MappedWindow {
    fn as_ref(&self) -> &[u8] {
        &self.map
    }
}

impl Drop for MappedWindow {
    fn drop(&mut self) {
        // Before the map field is unmapped: no lookup can find an address that is gone.
        if !self.map.is_empty() {
            REGIONS
                .write()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&(self.map.as_ptr() as usize));
            LIVE.fetch_sub(1, Ordering::Release);
        }
    }
}

/// The file and offset `slice` shows, when it lies wholly inside a live window.
pub(crate) fn lookup(slice: &[u8]) -> Option<(Arc<File>, u64)> {
    if slice.is_empty() || LIVE.load(Ordering::Acquire) == 0 {
        return None;
    }
    let start = slice.as_ptr() as usize;
    let regions = REGIONS.read().unwrap_or_else(|e| e.into_inner());
    let (&base, region) = regions.range(..=start).next_back()?;
    let within = start - base;
    (within + slice.len() <= region.len)
        .then(|| (region.file.clone(), region.offset + within as u64))
}

/// Counts bytes a socket took from a file.
pub(crate) fn sent(n: usize) {
    SENT.fetch_add(n as u64, Ordering::Relaxed);
}

/// Bytes sent from files so far.
pub fn sent_total() -> u64 {
    SENT.load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write as _;

    #[test]
    fn a_slice_of_a_live_window_names_its_file_and_offset_until_the_window_is_dropped() {
        let mut f = tempfile::tempfile().unwrap();
        f.write_all(&vec![7u8; 3 * 4096]).unwrap();
        let f = Arc::new(f);
        // SAFETY: the temporary file is not changed while mapped.
        let map = unsafe { memmap2::MmapOptions::new().offset(4096).len(8192).map(&*f) }.unwrap();
        let window = MappedWindow::new(map, f.clone(), 4096);
        let bytes = window.as_ref();
        let (_, at) = lookup(&bytes[100..200]).unwrap();
        assert_eq!(at, 4196);
        assert_eq!(lookup(bytes).unwrap().1, 4096);
        // Past its end, and a slice of other memory.
        let copy = bytes[..10].to_vec();
        assert!(lookup(&copy).is_none());
        let start = bytes.as_ptr() as usize;
        assert!(REGIONS.read().unwrap().contains_key(&start));
        drop(window);
        assert!(!REGIONS.read().unwrap().contains_key(&start));
    }
}
