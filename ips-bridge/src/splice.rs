//! Reading a stored payload member by member, handing out both its raw deflate data and its
//! content, so a writer of gzip streams can reuse the publisher's compression instead of
//! deflating the content again (`rdctl build` splices payloads into gzip layers this way).
//!
//! The content is verified exactly as [`PayloadHashes::verify_checked`] verifies it (best
//! content hash, `pkg.size`, `pkg.csize`, each member's CRC-32 and ISIZE, and the stored
//! hash when [`Check`] asks for it), in the same pass, with fixed-size buffers. Unlike
//! [`PayloadHashes::reader`], which reads only the first gzip member, every member is read and
//! the content is their concatenation, as pkg's Python `gzip` module reads a payload; bytes
//! after the last member that do not start another member are read (for the stored hash and
//! `pkg.csize`) and ignored.

use std::io::{self, Read};
use std::sync::mpsc::sync_channel;

use flate2::{Crc, Decompress, FlushDecompress, Status};

use crate::payload::{Check, HashingReader, PayloadError, PayloadHashes};

/// Receives a stored payload one gzip member at a time (see
/// [`PayloadHashes::splice_checked`]). Success is known only when `splice_checked` returns:
/// on error, whatever the sink wrote must be discarded.
pub trait GzipSink {
    /// A gzip member starts; `index` is 0 for the first. Its header was parsed and is not
    /// passed on (a writer of its own stream writes its own, fixed header).
    fn begin_member(&mut self, index: u64) -> io::Result<()>;
    /// The next raw deflate bytes of the current member, exactly as stored.
    fn deflated(&mut self, data: &[u8]) -> io::Result<()>;
    /// The next decompressed bytes of the current member.
    fn content(&mut self, data: &[u8]) -> io::Result<()>;
    /// The current member's deflate data ended; `trailer` is its stored CRC-32 and ISIZE
    /// (little endian), already checked against the content.
    fn end_member(&mut self, trailer: [u8; 8]) -> io::Result<()>;
}

const BUF: usize = 64 * 1024;
/// Content size (`pkg.size`) from which the content hash runs on a thread of its own.
const HASH_THREAD_MIN: u64 = 256 * 1024;
/// Content chunks queued for the hashing thread.
const HASH_QUEUE: usize = 8;

/// Gzip header flags (RFC 1952 §2.3.1).
const FHCRC: u8 = 0x02;
const FEXTRA: u8 = 0x04;
const FNAME: u8 = 0x08;
const FCOMMENT: u8 = 0x10;
const RESERVED: u8 = 0xe0;

/// The stored bytes, buffered, counted and hashed as they are read.
struct Input<R> {
    inner: HashingReader<R>,
    buf: Vec<u8>,
    pos: usize,
    end: usize,
}

impl<R: Read> Input<R> {
    /// Reads more when the buffer is used up; `false` at end of file.
    fn fill(&mut self) -> io::Result<bool> {
        if self.pos < self.end {
            return Ok(true);
        }
        self.pos = 0;
        self.end = 0;
        loop {
            match self.inner.read(&mut self.buf) {
                Ok(n) => {
                    self.end = n;
                    return Ok(n > 0);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    fn byte(&mut self) -> io::Result<Option<u8>> {
        if !self.fill()? {
            return Ok(None);
        }
        self.pos += 1;
        Ok(Some(self.buf[self.pos - 1]))
    }

    /// The next two bytes without consuming them (fewer at end of file).
    fn peek2(&mut self) -> io::Result<&[u8]> {
        if self.end - self.pos < 2 {
            self.buf.copy_within(self.pos..self.end, 0);
            self.end -= self.pos;
            self.pos = 0;
            while self.end < 2 {
                let n = self.inner.read(&mut self.buf[self.end..])?;
                if n == 0 {
                    break;
                }
                self.end += n;
            }
        }
        Ok(&self.buf[self.pos..self.end.min(self.pos + 2)])
    }
}

fn bad(msg: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.to_owned())
}

impl PayloadHashes {
    /// Streams a stored payload into `sink` member by member (raw deflate bytes and content,
    /// see the module docs), verifying the content with the hashes `check` asks for. Returns
    /// the content size; on error, whatever `sink` received must be discarded.
    pub fn splice_checked<R: Read>(
        &self,
        check: Check,
        stored: R,
        sink: &mut dyn GzipSink,
    ) -> Result<u64, PayloadError> {
        let mut input = Input {
            inner: HashingReader {
                inner: stored,
                hasher: self.stored_hash(check).map(|e| (e.clone(), e.alg.hasher())),
                count: 0,
            },
            buf: vec![0u8; BUF],
            pos: 0,
            end: 0,
        };
        let alg = self.uncompressed.alg;
        // A large payload's content is hashed on a second thread while this one inflates it
        // (the content hash is about as much work as the inflate); chunks are copied into
        // recycled buffers, at most `HASH_QUEUE` of them waiting.
        let threaded = self.size.is_some_and(|n| n >= HASH_THREAD_MIN);
        let (walked, content) = std::thread::scope(|scope| {
            if !threaded {
                let mut h = alg.hasher();
                let r = self.walk_members(&mut input, &mut |c| h.update(c), sink);
                return (r, h);
            }
            let (tx, rx) = sync_channel::<Vec<u8>>(HASH_QUEUE);
            let (free_tx, free_rx) = sync_channel::<Vec<u8>>(HASH_QUEUE + 2);
            let hashing = scope.spawn(move || {
                let mut h = alg.hasher();
                for chunk in rx {
                    h.update(&chunk);
                    let _ = free_tx.try_send(chunk);
                }
                h
            });
            let r = self.walk_members(
                &mut input,
                &mut |c| {
                    let mut v = free_rx.try_recv().unwrap_or_default();
                    v.clear();
                    v.extend_from_slice(c);
                    // The thread only ends once `tx` is dropped.
                    let _ = tx.send(v);
                },
                sink,
            );
            drop(tx);
            let h = match hashing.join() {
                Ok(h) => h,
                Err(panic) => std::panic::resume_unwind(panic),
            };
            (r, h)
        });
        let size = walked.map_err(|source| {
            if source.kind() == io::ErrorKind::InvalidData {
                PayloadError::Gzip {
                    name: self.name.clone(),
                    source,
                }
            } else {
                self.io(source)
            }
        })?;
        // What follows the last member is read for the stored hash and size, and ignored.
        io::copy(&mut input.inner, &mut io::sink()).map_err(|source| self.io(source))?;
        let stored = input.inner;
        if let Some((e, hasher)) = stored.hasher {
            self.compare(&e, hasher.finish_hex())?;
        }
        // The content hash before the sizes, as `VerifyingReader` does.
        self.compare(&self.uncompressed, content.finish_hex())?;
        if let Some(csize) = self.csize
            && csize != stored.count
        {
            return Err(PayloadError::Size {
                name: format!("{} (stored)", self.name),
                expected: csize,
                actual: stored.count,
            });
        }
        if let Some(expected) = self.size
            && expected != size
        {
            return Err(PayloadError::Size {
                name: self.name.clone(),
                expected,
                actual: size,
            });
        }
        Ok(size)
    }

    fn walk_members<R: Read>(
        &self,
        input: &mut Input<R>,
        content: &mut dyn FnMut(&[u8]),
        sink: &mut dyn GzipSink,
    ) -> io::Result<u64> {
        let mut out = vec![0u8; BUF];
        let mut total = 0u64;
        let mut index = 0u64;
        loop {
            read_header(input)?;
            sink.begin_member(index)?;
            let mut d = Decompress::new(false);
            let mut crc = Crc::new();
            loop {
                let more = input.fill()?;
                let avail = &input.buf[input.pos..input.end];
                let (in0, out0) = (d.total_in(), d.total_out());
                let status = d
                    .decompress(avail, &mut out, FlushDecompress::None)
                    .map_err(|e| bad(&format!("invalid deflate data: {e}")))?;
                let used = (d.total_in() - in0) as usize;
                let produced = (d.total_out() - out0) as usize;
                if used > 0 {
                    sink.deflated(&avail[..used])?;
                    input.pos += used;
                }
                if produced > 0 {
                    let o = &out[..produced];
                    crc.update(o);
                    content(o);
                    sink.content(o)?;
                    total += produced as u64;
                }
                if status == Status::StreamEnd {
                    break;
                }
                if used == 0 && produced == 0 && !more {
                    return Err(bad("gzip member truncated"));
                }
            }
            let mut trailer = [0u8; 8];
            for b in &mut trailer {
                *b = input.byte()?.ok_or_else(|| bad("gzip trailer truncated"))?;
            }
            let stored_crc = u32::from_le_bytes(trailer[..4].try_into().expect("4 bytes"));
            let stored_len = u32::from_le_bytes(trailer[4..].try_into().expect("4 bytes"));
            if stored_crc != crc.sum() {
                return Err(bad("gzip CRC-32 mismatch"));
            }
            if stored_len != crc.amount() {
                return Err(bad("gzip ISIZE mismatch"));
            }
            sink.end_member(trailer)?;
            index += 1;
            if input.peek2()? != [0x1f, 0x8b] {
                return Ok(total);
            }
        }
    }
}

/// Reads one gzip member header (RFC 1952 §2.3), which must use deflate and no reserved flag.
fn read_header<R: Read>(input: &mut Input<R>) -> io::Result<()> {
    let mut fixed = [0u8; 10];
    for b in &mut fixed {
        *b = input.byte()?.ok_or_else(|| bad("gzip header truncated"))?;
    }
    if fixed[..2] != [0x1f, 0x8b] {
        return Err(bad("not gzip data"));
    }
    if fixed[2] != 8 {
        return Err(bad("gzip compression method is not deflate"));
    }
    let flags = fixed[3];
    if flags & RESERVED != 0 {
        return Err(bad("gzip header has reserved flags set"));
    }
    let mut next = || input.byte()?.ok_or_else(|| bad("gzip header truncated"));
    if flags & FEXTRA != 0 {
        let len = usize::from(next()?) | usize::from(next()?) << 8;
        for _ in 0..len {
            next()?;
        }
    }
    for flag in [FNAME, FCOMMENT] {
        if flags & flag != 0 {
            while next()? != 0 {}
        }
    }
    if flags & FHCRC != 0 {
        next()?;
        next()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;
    use crate::action::Action;

    /// Records what a sink is given.
    #[derive(Default)]
    struct Record {
        members: Vec<(Vec<u8>, Vec<u8>, [u8; 8])>,
    }

    impl GzipSink for Record {
        fn begin_member(&mut self, index: u64) -> io::Result<()> {
            assert_eq!(index as usize, self.members.len());
            self.members.push((Vec::new(), Vec::new(), [0; 8]));
            Ok(())
        }
        fn deflated(&mut self, data: &[u8]) -> io::Result<()> {
            self.members.last_mut().unwrap().0.extend_from_slice(data);
            Ok(())
        }
        fn content(&mut self, data: &[u8]) -> io::Result<()> {
            self.members.last_mut().unwrap().1.extend_from_slice(data);
            Ok(())
        }
        fn end_member(&mut self, trailer: [u8; 8]) -> io::Result<()> {
            self.members.last_mut().unwrap().2 = trailer;
            Ok(())
        }
    }

    fn hashes_for(content: &[u8], stored: &[u8]) -> PayloadHashes {
        let mut a = Action::parse("file path=a mode=0644 owner=root group=bin").unwrap();
        let info = crate::payload::compress(content, io::sink()).unwrap();
        info.apply_to(&mut a);
        // The stored bytes may differ from `compress`'s: record theirs.
        a.set("pkg.csize", &stored.len().to_string());
        a.set(
            "chash",
            &crate::payload::hash_hex(crate::payload::HashAlg::Sha1, stored),
        );
        a.remove("pkg.content-hash");
        a.push(
            "pkg.content-hash",
            &format!("file:sha512t_256:{}", info.file_sha512t_256),
        );
        PayloadHashes::from_action(&a).unwrap()
    }

    fn gzip_with_header(header: &[u8], content: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::DeflateEncoder::new(Vec::new(), flate2::Compression::new(9));
        e.write_all(content).unwrap();
        let mut v = header.to_vec();
        v.extend(e.finish().unwrap());
        v.extend(crc32(content).to_le_bytes());
        v.extend((content.len() as u32).to_le_bytes());
        v
    }

    fn crc32(data: &[u8]) -> u32 {
        let mut c = Crc::new();
        c.update(data);
        c.sum()
    }

    fn sample() -> Vec<u8> {
        (0..300_000u32)
            .flat_map(|i| format!("{} ", i % 1013).into_bytes())
            .collect()
    }

    #[test]
    fn one_member_hands_out_its_deflate_body_and_content() {
        let content = sample();
        let mut stored = Vec::new();
        crate::payload::compress(&content[..], &mut stored).unwrap();
        let h = hashes_for(&content, &stored);
        let mut r = Record::default();
        let n = h
            .splice_checked(Check::Stored, &stored[..], &mut r)
            .unwrap();
        assert_eq!(n, content.len() as u64);
        assert_eq!(r.members.len(), 1);
        let (deflated, got, trailer) = &r.members[0];
        assert!(got == &content);
        // The body is the stored bytes between the 10-byte header and the 8-byte trailer.
        assert!(deflated[..] == stored[10..stored.len() - 8]);
        assert_eq!(trailer[..], stored[stored.len() - 8..]);
    }

    #[test]
    fn headers_with_every_optional_field_are_skipped() {
        let content = sample();
        let header = [
            &[
                0x1f,
                0x8b,
                8,
                FEXTRA | FNAME | FCOMMENT | FHCRC,
                1,
                2,
                3,
                4,
                0,
                3,
            ][..],
            &[3, 0, b'a', b'b', b'c'],
            b"name.txt\0",
            b"a comment\0",
            &[0xaa, 0xbb],
        ]
        .concat();
        let stored = gzip_with_header(&header, &content);
        let h = hashes_for(&content, &stored);
        let mut r = Record::default();
        h.splice_checked(Check::Stored, &stored[..], &mut r)
            .unwrap();
        assert!(r.members[0].1 == content);
        assert!(r.members[0].0[..] == stored[header.len()..stored.len() - 8]);
    }

    #[test]
    fn several_members_are_one_content_and_trailing_bytes_are_ignored() {
        let content = sample();
        let (a, b) = content.split_at(100_000);
        let plain = [0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 255];
        let mut stored = gzip_with_header(&plain, a);
        stored.extend(gzip_with_header(&plain, b));
        stored.extend([0u8; 7]);
        let h = hashes_for(&content, &stored);
        let mut r = Record::default();
        h.splice_checked(Check::Stored, &stored[..], &mut r)
            .unwrap();
        assert_eq!(r.members.len(), 2);
        assert!([&r.members[0].1[..], &r.members[1].1[..]].concat() == content);
        // The same when the stored bytes arrive a few at a time (member edges inside reads).
        for chunk in [1, 7, 4096] {
            let mut again = Record::default();
            h.splice_checked(Check::Stored, Trickle(&stored[..], chunk), &mut again)
                .unwrap();
            assert!(again.members == r.members, "reads of {chunk}");
        }
    }

    /// A reader that returns at most `.1` bytes per read.
    struct Trickle<'a>(&'a [u8], usize);

    impl Read for Trickle<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = buf.len().min(self.1).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    #[test]
    fn damage_is_reported() {
        let content = sample();
        let mut stored = Vec::new();
        crate::payload::compress(&content[..], &mut stored).unwrap();
        let h = hashes_for(&content, &stored);
        // A CRC that does not match.
        let mut bad_crc = stored.clone();
        let n = bad_crc.len();
        bad_crc[n - 8] ^= 1;
        let r = h.splice_checked(Check::Content, &bad_crc[..], &mut Record::default());
        assert!(matches!(r, Err(PayloadError::Gzip { .. })), "{r:?}");
        // Cut short.
        let r = h.splice_checked(Check::Content, &stored[..n / 2], &mut Record::default());
        assert!(matches!(r, Err(PayloadError::Gzip { .. })), "{r:?}");
        // Other content with a valid gzip stream.
        let mut other_stored = Vec::new();
        crate::payload::compress(&b"other"[..], &mut other_stored).unwrap();
        let r = h.splice_checked(Check::Content, &other_stored[..], &mut Record::default());
        assert!(matches!(r, Err(PayloadError::Mismatch { .. })), "{r:?}");
        // Not gzip at all.
        let r = h.splice_checked(Check::Content, &content[..], &mut Record::default());
        assert!(matches!(r, Err(PayloadError::Gzip { .. })), "{r:?}");
    }
}
