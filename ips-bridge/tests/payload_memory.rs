//! Memory stays flat while a 1 GiB payload streams through verification.
//!
//! Its own test binary so that no other test disturbs the process's peak memory. Linux only:
//! it reads the peak resident set size (VmHWM) from /proc/self/status.
#![cfg(target_os = "linux")]

use std::io::{self, Read, Write};

use flate2::Compression;
use flate2::read::GzEncoder;
use ips_bridge::{Action, HashAlg, PayloadHashes};

const SIZE: u64 = 1 << 30;

/// A deterministic, mildly compressible byte stream of `SIZE` bytes.
struct Content {
    pos: u64,
}

impl Read for Content {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        // Whole 4 KiB blocks: the block pattern, with the block number in its first 8 bytes.
        let left = SIZE - self.pos;
        let n = buf.len().min(left as usize) / 4096 * 4096;
        let n = if n == 0 {
            buf.len().min(left as usize)
        } else {
            n
        };
        let mut block = [0u8; 4096];
        for (i, b) in block.iter_mut().enumerate() {
            *b = (i % 251) as u8;
        }
        for (k, chunk) in buf[..n].chunks_mut(4096).enumerate() {
            let index = self.pos / 4096 + k as u64;
            block[..8].copy_from_slice(&index.to_le_bytes());
            chunk.copy_from_slice(&block[..chunk.len()]);
        }
        self.pos += n as u64;
        Ok(n)
    }
}

fn stored() -> GzEncoder<Content> {
    GzEncoder::new(Content { pos: 0 }, Compression::fast())
}

struct Hashing(ips_bridge::Hasher, ips_bridge::Hasher, u64);

impl Write for Hashing {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.update(buf);
        self.1.update(buf);
        self.2 += buf.len() as u64;
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

fn peak_rss_kib() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[test]
fn one_gib_payload_verifies_in_bounded_memory() {
    // Expected hashes, computed in a first streaming pass.
    let mut content = Hashing(HashAlg::Sha1.hasher(), HashAlg::Sha512t256.hasher(), 0);
    io::copy(&mut Content { pos: 0 }, &mut content).unwrap();
    let mut gz = Hashing(HashAlg::Sha1.hasher(), HashAlg::Sha512t256.hasher(), 0);
    io::copy(&mut stored(), &mut gz).unwrap();
    let action = Action::parse(&format!(
        "file {} chash={} pkg.content-hash=file:sha512t_256:{} pkg.content-hash=gzip:sha512t_256:{} pkg.size={} pkg.csize={} path=big",
        content.0.finish_hex(),
        gz.0.finish_hex(),
        content.1.finish_hex(),
        gz.1.finish_hex(),
        content.2,
        gz.2,
    ))
    .unwrap();
    let hashes = PayloadHashes::from_action(&action).unwrap();

    let before = peak_rss_kib();
    let n = hashes.verify(stored(), io::sink()).unwrap();
    let after = peak_rss_kib();
    assert_eq!(n, SIZE);
    let growth = after.saturating_sub(before);
    assert!(
        growth < 32 * 1024,
        "peak RSS grew by {growth} KiB while verifying 1 GiB"
    );

    // And the same stream with one changed content byte fails at the end.
    struct Corrupt(Content);
    impl Read for Corrupt {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let start = self.0.pos;
            let n = self.0.read(buf)?;
            if start <= SIZE / 2 && SIZE / 2 < start + n as u64 {
                buf[(SIZE / 2 - start) as usize] ^= 1;
            }
            Ok(n)
        }
    }
    let corrupt = GzEncoder::new(Corrupt(Content { pos: 0 }), Compression::fast());
    assert!(hashes.verify(corrupt, io::sink()).is_err());
}
