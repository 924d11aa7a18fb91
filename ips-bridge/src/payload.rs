//! Payloads: the gzip files named by the SHA-1 of their content, and their verification.
//!
//! pkg fetches a payload by its positional SHA-1, may check the stored gzip bytes against the
//! best compressed hash (`gzip:sha512t_256`, `gzip:sha256`, then `chash`), and checks the
//! decompressed content against the best uncompressed hash (`file:sha512t_256`,
//! `file:sha256`, then the SHA-1). Everything here streams with fixed-size buffers.
//!
//! Two levels of checking ([`Check`]): [`Check::Stored`] checks every hash and is for bytes
//! that arrive from elsewhere (a depot download before it enters the payload cache, as pkg's
//! transport checks a download's compressed hash) and for repository checks (`pkgrepo
//! verify`), where the stored file itself is the subject. [`Check::Content`] is for reading
//! content out of a repository or cache to install it: what is installed is the decompressed
//! content, and its best hash is always checked, so the compressed hash is skipped unless it
//! is the stronger of the two (a SHA-1 content hash beside a `gzip:sha512t_256`). A damaged
//! gzip stream that still inflates to content with the right hash installs the right bytes;
//! one that does not fails the content hash, `pkg.size` or the gzip CRC.

use std::fmt;
use std::io::{self, Read, Write};

use flate2::Compression;
use flate2::read::MultiGzDecoder;
use flate2::write::GzEncoder;
use sha1::Sha1;
use sha2::{Digest, Sha256, Sha512_256};

use crate::action::Action;

/// Why a payload failed verification or could not be read.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PayloadError {
    /// The bytes do not match the expected hash.
    #[error("payload {name}: {which} hash mismatch: expected {expected}, got {actual}")]
    Mismatch {
        /// The payload's file name (its SHA-1).
        name: String,
        /// Which hash, e.g. `file:sha512t_256` or `chash`.
        which: String,
        /// The expected hex digest.
        expected: String,
        /// The computed hex digest.
        actual: String,
    },
    /// The decompressed size differs from `pkg.size`.
    #[error("payload {name}: size mismatch: expected {expected} bytes, got {actual}")]
    Size {
        /// The payload's file name.
        name: String,
        /// `pkg.size`.
        expected: u64,
        /// The actual size.
        actual: u64,
    },
    /// The stored payload is not valid gzip (including a bad CRC).
    #[error("payload {name}: invalid gzip data")]
    Gzip {
        /// The payload's file name.
        name: String,
        /// The decoder's error.
        #[source]
        source: io::Error,
    },
    /// An attribute that names a hash is malformed or the action has no usable hash.
    #[error("action {action}: {message}")]
    BadAttribute {
        /// The action's key (path or license name).
        action: String,
        /// What is wrong.
        message: String,
    },
    /// Reading or writing failed.
    #[error("payload {name}: i/o error")]
    Io {
        /// The payload's file name.
        name: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
}

/// Hash algorithms pkg uses for payloads, least preferred first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum HashAlg {
    /// SHA-1: the positional hash and `chash`.
    Sha1,
    /// SHA-256 (`sha256`).
    Sha256,
    /// FIPS 180-4 SHA-512/256 (`sha512t_256`), not truncated SHA-512.
    Sha512t256,
}

impl HashAlg {
    /// The name used in `pkg.content-hash` values.
    pub fn name(self) -> &'static str {
        match self {
            Self::Sha1 => "sha1",
            Self::Sha256 => "sha256",
            Self::Sha512t256 => "sha512t_256",
        }
    }

    fn from_name(s: &str) -> Option<Self> {
        Some(match s {
            "sha1" => Self::Sha1,
            "sha256" => Self::Sha256,
            "sha512t_256" => Self::Sha512t256,
            _ => return None,
        })
    }

    fn hex_len(self) -> usize {
        match self {
            Self::Sha1 => 40,
            Self::Sha256 | Self::Sha512t256 => 64,
        }
    }

    /// A new incremental hasher.
    pub fn hasher(self) -> Hasher {
        Hasher(match self {
            Self::Sha1 => HasherInner::Sha1(Sha1::new()),
            Self::Sha256 => HasherInner::Sha256(Sha256::new()),
            Self::Sha512t256 => HasherInner::Sha512t256(Sha512_256::new()),
        })
    }
}

impl fmt::Display for HashAlg {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// An incremental hasher for one [`HashAlg`].
#[derive(Clone)]
pub struct Hasher(HasherInner);

#[derive(Clone)]
enum HasherInner {
    Sha1(Sha1),
    Sha256(Sha256),
    Sha512t256(Sha512_256),
}

impl Hasher {
    /// Feeds bytes.
    pub fn update(&mut self, data: &[u8]) {
        match &mut self.0 {
            HasherInner::Sha1(h) => h.update(data),
            HasherInner::Sha256(h) => h.update(data),
            HasherInner::Sha512t256(h) => h.update(data),
        }
    }

    /// The lower-case hex digest.
    pub fn finish_hex(self) -> String {
        match self.0 {
            HasherInner::Sha1(h) => hex::encode(h.finalize()),
            HasherInner::Sha256(h) => hex::encode(h.finalize()),
            HasherInner::Sha512t256(h) => hex::encode(h.finalize()),
        }
    }
}

/// The hex digest of `data` with `alg`.
pub fn hash_hex(alg: HashAlg, data: &[u8]) -> String {
    let mut h = alg.hasher();
    h.update(data);
    h.finish_hex()
}

/// Which hashes a payload read checks (see the module docs for when to use which).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Every hash: the stored bytes' best compressed hash as well as the content's.
    Stored,
    /// The content's best hash, sizes and the gzip CRC; the stored bytes' compressed hash
    /// only when its algorithm is stronger than the content hash's.
    Content,
}

/// One expected digest: which bytes, which algorithm, which value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExpectedHash {
    /// The attribute form, e.g. `file:sha512t_256`, `chash` or `hash` (the SHA-1).
    pub which: String,
    /// The algorithm.
    pub alg: HashAlg,
    /// The expected lower-case hex digest.
    pub hex: String,
}

/// What a `file`, `license` or `signature` action says about its payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadHashes {
    /// The name the payload is stored and fetched under (the SHA-1 of its content).
    pub name: String,
    /// The best hash of the stored gzip bytes, if any.
    pub compressed: Option<ExpectedHash>,
    /// The best hash of the uncompressed content.
    pub uncompressed: ExpectedHash,
    /// `pkg.size`, the uncompressed size, if given.
    pub size: Option<u64>,
    /// `pkg.csize`, the stored size, if given.
    pub csize: Option<u64>,
}

impl PayloadHashes {
    /// Reads the hash attributes of an action (pkg's choice of hashes, see the module docs).
    pub fn from_action(action: &Action) -> Result<Self, PayloadError> {
        let key = action.key().unwrap_or("?").to_owned();
        let bad = |message: String| PayloadError::BadAttribute {
            action: format!("{} {key}", action.kind()),
            message,
        };
        let mut file: Vec<ExpectedHash> = Vec::new();
        let mut gzip: Vec<ExpectedHash> = Vec::new();
        for v in action.get_all("pkg.content-hash") {
            let mut parts = v.splitn(3, ':');
            let (Some(extract), Some(alg), Some(hex)) = (parts.next(), parts.next(), parts.next())
            else {
                return Err(bad(format!("malformed pkg.content-hash {v:?}")));
            };
            let Some(alg) = HashAlg::from_name(alg) else {
                // Unknown algorithms are skipped, as pkg skips hashes it does not support.
                continue;
            };
            let e = ExpectedHash {
                which: format!("{extract}:{}", alg.name()),
                alg,
                hex: checked_hex(hex, alg)
                    .ok_or_else(|| bad(format!("malformed digest in {v:?}")))?,
            };
            match extract {
                "file" => file.push(e),
                "gzip" => gzip.push(e),
                // gelf hashes need ELF-aware hashing and are not needed to install.
                _ => {}
            }
        }
        let sha1 = match action.hash() {
            Some(h) if h != "NOHASH" => Some(
                checked_hex(h, HashAlg::Sha1)
                    .ok_or_else(|| bad(format!("malformed hash {h:?}")))?,
            ),
            _ => None,
        };
        if let Some(c) = action.get("chash") {
            gzip.push(ExpectedHash {
                which: "chash".into(),
                alg: HashAlg::Sha1,
                hex: checked_hex(c, HashAlg::Sha1)
                    .ok_or_else(|| bad(format!("malformed chash {c:?}")))?,
            });
        }
        if let Some(h) = &sha1 {
            file.push(ExpectedHash {
                which: "hash".into(),
                alg: HashAlg::Sha1,
                hex: h.clone(),
            });
        }
        let name = match &sha1 {
            Some(h) => h.clone(),
            None => file
                .iter()
                .min_by_key(|e| e.alg)
                .map(|e| e.hex.clone())
                .ok_or_else(|| bad("no payload hash".into()))?,
        };
        let best = |v: &mut Vec<ExpectedHash>| {
            v.sort_by_key(|e| e.alg);
            v.pop()
        };
        let uncompressed = best(&mut file).ok_or_else(|| bad("no payload hash".into()))?;
        let num = |k: &str| -> Result<Option<u64>, PayloadError> {
            action
                .get(k)
                .map(|v| v.parse().map_err(|_| bad(format!("invalid {k} {v:?}"))))
                .transpose()
        };
        Ok(Self {
            name,
            compressed: best(&mut gzip),
            uncompressed,
            size: num("pkg.size")?,
            csize: num("pkg.csize")?,
        })
    }

    /// Checks stored gzip bytes against the compressed hash without decompressing. With no
    /// compressed hash this only reads the stream. Returns the number of bytes read.
    pub fn verify_stored<R: Read>(&self, mut stored: R) -> Result<u64, PayloadError> {
        let mut h = self.compressed.as_ref().map(|e| e.alg.hasher());
        let mut buf = vec![0u8; 64 * 1024];
        let mut n = 0u64;
        loop {
            let got = stored.read(&mut buf).map_err(|source| self.io(source))?;
            if got == 0 {
                break;
            }
            n += got as u64;
            if let Some(h) = &mut h {
                h.update(&buf[..got]);
            }
        }
        if let (Some(h), Some(e)) = (h, &self.compressed) {
            self.compare(e, h.finish_hex())?;
        }
        Ok(n)
    }

    /// The compressed hash `check` asks for: none for [`Check::Content`] unless it is
    /// stronger than the content hash (SHA-1 content beside a SHA-512/256 of the stored
    /// bytes), since the content hash alone decides what is installed.
    pub fn stored_hash(&self, check: Check) -> Option<&ExpectedHash> {
        self.compressed
            .as_ref()
            .filter(|c| check == Check::Stored || c.alg > self.uncompressed.alg)
    }

    /// Streams a stored payload through verification into `out`: the stored bytes are hashed
    /// with the compressed hash (if any), decompressed, written to `out` and hashed with the
    /// uncompressed hash. Success is reported only after the whole stream checked out, so
    /// whatever was written to `out` must be discarded on error. Returns the content size.
    pub fn verify<R: Read, W: Write>(&self, stored: R, out: W) -> Result<u64, PayloadError> {
        self.verify_checked(Check::Stored, stored, out)
    }

    /// [`PayloadHashes::verify`] with the hashes `check` asks for.
    pub fn verify_checked<R: Read, W: Write>(
        &self,
        check: Check,
        stored: R,
        out: W,
    ) -> Result<u64, PayloadError> {
        let mut reader = self.reader_checked(check, stored);
        let mut out = out;
        let mut buf = vec![0u8; 64 * 1024];
        let mut n = 0u64;
        loop {
            let got = match reader.read(&mut buf) {
                Ok(0) => break,
                Ok(g) => g,
                Err(e) => return Err(reader.take_error().unwrap_or_else(|| self.io(e))),
            };
            out.write_all(&buf[..got])
                .map_err(|source| self.io(source))?;
            n += got as u64;
        }
        Ok(n)
    }

    /// A reader of the decompressed content that verifies everything at end of stream and
    /// fails there (with [`io::ErrorKind::InvalidData`]) on any mismatch.
    pub fn reader<R: Read>(&self, stored: R) -> VerifyingReader<R> {
        self.reader_checked(Check::Stored, stored)
    }

    /// [`PayloadHashes::reader`] with the hashes `check` asks for.
    pub fn reader_checked<R: Read>(&self, check: Check, stored: R) -> VerifyingReader<R> {
        VerifyingReader {
            hashes: self.clone(),
            decoder: MultiGzDecoder::new(HashingReader {
                inner: stored,
                hasher: self.stored_hash(check).map(|e| (e.clone(), e.alg.hasher())),
                count: 0,
            }),
            hasher: Some(self.uncompressed.alg.hasher()),
            count: 0,
            error: None,
            done: false,
        }
    }

    pub(crate) fn compare(&self, e: &ExpectedHash, actual: String) -> Result<(), PayloadError> {
        if actual == e.hex {
            Ok(())
        } else {
            Err(PayloadError::Mismatch {
                name: self.name.clone(),
                which: e.which.clone(),
                expected: e.hex.clone(),
                actual,
            })
        }
    }

    pub(crate) fn io(&self, source: io::Error) -> PayloadError {
        PayloadError::Io {
            name: self.name.clone(),
            source,
        }
    }
}

fn checked_hex(h: &str, alg: HashAlg) -> Option<String> {
    (h.len() == alg.hex_len() && h.bytes().all(|c| c.is_ascii_hexdigit()))
        .then(|| h.to_ascii_lowercase())
}

pub(crate) struct HashingReader<R> {
    pub(crate) inner: R,
    /// The compressed hash being checked, if any, and its running hash.
    pub(crate) hasher: Option<(ExpectedHash, Hasher)>,
    pub(crate) count: u64,
}

impl<R: Read> Read for HashingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        if let Some((_, h)) = &mut self.hasher {
            h.update(&buf[..n]);
        }
        self.count += n as u64;
        Ok(n)
    }
}

/// Decompresses a stored payload and verifies it at end of stream. See
/// [`PayloadHashes::reader`].
pub struct VerifyingReader<R> {
    hashes: PayloadHashes,
    decoder: MultiGzDecoder<HashingReader<R>>,
    hasher: Option<Hasher>,
    count: u64,
    error: Option<PayloadError>,
    done: bool,
}

impl<R: Read> VerifyingReader<R> {
    /// The verification error behind a failed read, if that is why it failed.
    pub fn take_error(&mut self) -> Option<PayloadError> {
        self.error.take()
    }

    fn finish(&mut self) -> Result<(), PayloadError> {
        let h = &self.hashes;
        // Drain whatever follows the gzip member so the stored hash covers the whole file.
        let stored = self.decoder.get_mut();
        io::copy(stored, &mut io::sink()).map_err(|source| h.io(source))?;
        if let Some((e, hasher)) = stored.hasher.take() {
            h.compare(&e, hasher.finish_hex())?;
        }
        // The content hash before the sizes: other content is reported as such, whatever
        // its size.
        let hasher = self.hasher.take().expect("finish runs once");
        h.compare(&h.uncompressed, hasher.finish_hex())?;
        if let Some(csize) = h.csize
            && csize != stored.count
        {
            return Err(PayloadError::Size {
                name: format!("{} (stored)", h.name),
                expected: csize,
                actual: stored.count,
            });
        }
        if let Some(size) = h.size
            && size != self.count
        {
            return Err(PayloadError::Size {
                name: h.name.clone(),
                expected: size,
                actual: self.count,
            });
        }
        Ok(())
    }
}

impl<R: Read> Read for VerifyingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.done {
            return Ok(0);
        }
        if self.error.is_some() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "payload failed verification",
            ));
        }
        match self.decoder.read(buf) {
            Ok(0) if !buf.is_empty() => {
                if let Err(e) = self.finish() {
                    let msg = e.to_string();
                    self.error = Some(e);
                    return Err(io::Error::new(io::ErrorKind::InvalidData, msg));
                }
                self.done = true;
                Ok(0)
            }
            Ok(n) => {
                if let Some(h) = &mut self.hasher {
                    h.update(&buf[..n]);
                }
                self.count += n as u64;
                Ok(n)
            }
            Err(source) => {
                let e = PayloadError::Gzip {
                    name: self.hashes.name.clone(),
                    source,
                };
                let msg = e.to_string();
                self.error = Some(e);
                Err(io::Error::new(io::ErrorKind::InvalidData, msg))
            }
        }
    }
}

/// What [`compress`] computed for a payload: everything a published action records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadInfo {
    /// SHA-1 of the content: the positional hash and the stored file name.
    pub sha1: String,
    /// SHA-512/256 of the content (`pkg.content-hash=file:sha512t_256:`).
    pub file_sha512t_256: String,
    /// SHA-1 of the stored gzip bytes (`chash`).
    pub chash: String,
    /// SHA-512/256 of the stored gzip bytes (`pkg.content-hash=gzip:sha512t_256:`).
    pub gzip_sha512t_256: String,
    /// Content size (`pkg.size`).
    pub size: u64,
    /// Stored size (`pkg.csize`).
    pub csize: u64,
}

impl PayloadInfo {
    /// Records the hashes and sizes on an action as pkg's publisher does: positional hash,
    /// `chash`, `pkg.content-hash` (file and gzip), `pkg.size`, `pkg.csize`.
    pub fn apply_to(&self, action: &mut Action) {
        action.set_hash(Some(self.sha1.clone()));
        action.set("chash", &self.chash);
        action.remove("pkg.content-hash");
        action.push(
            "pkg.content-hash",
            &format!("file:sha512t_256:{}", self.file_sha512t_256),
        );
        action.push(
            "pkg.content-hash",
            &format!("gzip:sha512t_256:{}", self.gzip_sha512t_256),
        );
        action.set("pkg.size", &self.size.to_string());
        action.set("pkg.csize", &self.csize.to_string());
    }
}

struct HashingWriter<W> {
    inner: W,
    sha1: Hasher,
    sha512: Hasher,
    count: u64,
}

impl<W: Write> Write for HashingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.sha1.update(&buf[..n]);
        self.sha512.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// Compresses content into pkg's payload container while hashing both sides: a single gzip
/// member at level 9 with the fixed header `1f 8b 08 00 00000000 02 ff` (no name, mtime 0),
/// so the stored bytes and `chash` are deterministic.
pub fn compress<R: Read, W: Write>(mut content: R, stored: W) -> io::Result<PayloadInfo> {
    let out = HashingWriter {
        inner: stored,
        sha1: HashAlg::Sha1.hasher(),
        sha512: HashAlg::Sha512t256.hasher(),
        count: 0,
    };
    // flate2's builder writes mtime 0, XFL 2 for level 9 and OS 255 by default.
    let mut enc = GzEncoder::new(out, Compression::best());
    let mut sha1 = HashAlg::Sha1.hasher();
    let mut sha512 = HashAlg::Sha512t256.hasher();
    let mut buf = vec![0u8; 64 * 1024];
    let mut size = 0u64;
    loop {
        let n = content.read(&mut buf)?;
        if n == 0 {
            break;
        }
        sha1.update(&buf[..n]);
        sha512.update(&buf[..n]);
        enc.write_all(&buf[..n])?;
        size += n as u64;
    }
    let out = enc.finish()?;
    Ok(PayloadInfo {
        sha1: sha1.finish_hex(),
        file_sha512t_256: sha512.finish_hex(),
        chash: out.sha1.finish_hex(),
        gzip_sha512t_256: out.sha512.finish_hex(),
        size,
        csize: out.count,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY_SHA1: &str = "da39a3ee5e6b4b0d3255bfef95601890afd80709";
    const EMPTY_SHA512T256: &str =
        "c672b8d1ef56ed28ab87c3622c5114069bdd3ad7b8f9737498d0c01ecef0967a";

    fn stored(content: &[u8]) -> (Vec<u8>, PayloadInfo) {
        let mut out = Vec::new();
        let info = compress(content, &mut out).unwrap();
        (out, info)
    }

    fn action_for(info: &PayloadInfo) -> Action {
        let mut a = Action::parse("file NOHASH path=x").unwrap();
        info.apply_to(&mut a);
        a
    }

    #[test]
    fn empty_payload_vectors() {
        assert_eq!(hash_hex(HashAlg::Sha1, b""), EMPTY_SHA1);
        assert_eq!(hash_hex(HashAlg::Sha512t256, b""), EMPTY_SHA512T256);
        let (_, info) = stored(b"");
        assert_eq!(info.sha1, EMPTY_SHA1);
        assert_eq!(info.file_sha512t_256, EMPTY_SHA512T256);
        assert_eq!(info.size, 0);
    }

    #[test]
    fn sha512_256_is_not_truncated_sha512() {
        use sha2::Sha512;
        let truncated = hex::encode(&Sha512::digest(b"")[..32]);
        assert_ne!(truncated, EMPTY_SHA512T256);
        // FIPS 180-4 example for "abc".
        assert_eq!(
            hash_hex(HashAlg::Sha512t256, b"abc"),
            "53048e2681941ef99b2e29b76b4c7dabe4c2d0c634fc6d46e0e2f13107e7af23"
        );
    }

    #[test]
    fn fixed_gzip_header() {
        let (gz, info) = stored(b"hello\n");
        assert_eq!(&gz[..10], &[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 2, 0xff]);
        assert_eq!(info.csize, gz.len() as u64);
        assert_eq!(info.chash, hash_hex(HashAlg::Sha1, &gz));
        // Deterministic.
        assert_eq!(stored(b"hello\n").0, gz);
    }

    #[test]
    fn chooses_best_hashes_and_fetch_name() {
        let (_, info) = stored(b"data");
        let a = action_for(&info);
        let h = PayloadHashes::from_action(&a).unwrap();
        assert_eq!(h.name, info.sha1);
        assert_eq!(h.uncompressed.which, "file:sha512t_256");
        assert_eq!(h.compressed.as_ref().unwrap().which, "gzip:sha512t_256");
        // sha256 beats SHA-1, chash is the last resort for the stored bytes.
        let a = Action::parse(&format!(
            "file {} chash={} pkg.content-hash=file:sha256:{} path=x",
            info.sha1,
            info.chash,
            "ab".repeat(32)
        ))
        .unwrap();
        let h = PayloadHashes::from_action(&a).unwrap();
        assert_eq!(h.uncompressed.which, "file:sha256");
        assert_eq!(h.compressed.unwrap().which, "chash");
        // Only a SHA-1.
        let a = Action::parse(&format!("file {} path=x", info.sha1)).unwrap();
        let h = PayloadHashes::from_action(&a).unwrap();
        assert_eq!(
            (h.uncompressed.which.as_str(), h.compressed),
            ("hash", None)
        );
        // No SHA-1: the least preferred file hash names the payload.
        let a = Action::parse(&format!(
            "file hash=NOHASH pkg.content-hash=file:sha512t_256:{} pkg.content-hash=file:sha256:{} path=x",
            "cd".repeat(32),
            "ab".repeat(32)
        ))
        .unwrap();
        let h = PayloadHashes::from_action(&a).unwrap();
        assert_eq!(h.name, "ab".repeat(32));
        assert_eq!(h.uncompressed.hex, "cd".repeat(32));
        assert!(PayloadHashes::from_action(&Action::parse("file NOHASH path=x").unwrap()).is_err());
        assert!(
            PayloadHashes::from_action(&Action::parse("file abc path=x").unwrap()).is_err(),
            "a short SHA-1 is malformed"
        );
    }

    #[test]
    fn verifies_good_payload() {
        let content = b"the quick brown fox\n".repeat(1000);
        let (gz, info) = stored(&content);
        let h = PayloadHashes::from_action(&action_for(&info)).unwrap();
        h.verify_stored(&gz[..]).unwrap();
        let mut out = Vec::new();
        assert_eq!(h.verify(&gz[..], &mut out).unwrap(), content.len() as u64);
        assert_eq!(out, content);
    }

    #[test]
    fn a_payload_of_several_gzip_members_is_read_whole() {
        // pkg reads every member (Python's gzip does); so does the builder's splice. A reader
        // that stopped after the first would fail the content hash of a valid payload.
        let (first, _) = stored(b"first member\n");
        let (second, _) = stored(b"second member\n");
        let gz = [first, second].concat();
        let content = b"first member\nsecond member\n";
        let a = Action::parse(&format!(
            "file {} pkg.content-hash=file:sha512t_256:{} pkg.size={} path=x",
            hash_hex(HashAlg::Sha1, content),
            hash_hex(HashAlg::Sha512t256, content),
            content.len()
        ))
        .unwrap();
        let h = PayloadHashes::from_action(&a).unwrap();
        let mut out = Vec::new();
        assert_eq!(h.verify(&gz[..], &mut out).unwrap(), content.len() as u64);
        assert_eq!(out, content);
    }

    #[test]
    fn detects_corruption_by_each_hash() {
        let content = b"payload".repeat(100);
        let (gz, info) = stored(&content);
        // Flip one byte of the deflate data.
        let mut bad = gz.clone();
        bad[20] ^= 0x55;
        let h = PayloadHashes::from_action(&action_for(&info)).unwrap();
        match h.verify_stored(&bad[..]) {
            Err(PayloadError::Mismatch { which, .. }) => assert_eq!(which, "gzip:sha512t_256"),
            r => panic!("{r:?}"),
        }
        assert!(h.verify(&bad[..], io::sink()).is_err());
        // Without compressed hashes the content hash still catches a different payload.
        let (other_gz, _) = stored(b"other content");
        let only_file = Action::parse(&format!(
            "file {} pkg.content-hash=file:sha512t_256:{} path=x",
            info.sha1, info.file_sha512t_256
        ))
        .unwrap();
        let h = PayloadHashes::from_action(&only_file).unwrap();
        match h.verify(&other_gz[..], io::sink()) {
            Err(PayloadError::Mismatch { which, name, .. }) => {
                assert_eq!(which, "file:sha512t_256");
                assert_eq!(name, info.sha1);
            }
            r => panic!("{r:?}"),
        }
        // A truncated gzip stream is invalid gzip.
        match h.verify(&gz[..gz.len() - 4], io::sink()) {
            Err(PayloadError::Gzip { .. }) => {}
            r => panic!("{r:?}"),
        }
        // A damaged CRC trailer is corruption too (flate2 checks it; pkg's gunzip does not).
        let mut bad_crc = gz.clone();
        let at = gz.len() - 8;
        bad_crc[at] ^= 0xff;
        match h.verify(&bad_crc[..], io::sink()) {
            Err(PayloadError::Gzip { .. }) => {}
            r => panic!("{r:?}"),
        }
        // pkg.size is checked too.
        let sized = Action::parse(&format!("file {} pkg.size=1 path=x", info.sha1)).unwrap();
        let h = PayloadHashes::from_action(&sized).unwrap();
        assert!(matches!(
            h.verify(&gz[..], io::sink()),
            Err(PayloadError::Size { .. })
        ));
    }

    #[test]
    fn content_check_skips_only_a_weaker_or_equal_stored_hash() {
        let content = b"the same content, stored twice\n".repeat(500);
        let (gz, info) = stored(&content);
        // The same content in other gzip bytes (another level): the stored hashes differ.
        let mut other = GzEncoder::new(Vec::new(), Compression::fast());
        other.write_all(&content).unwrap();
        let other = other.finish().unwrap();
        assert_ne!(other, gz);
        let mut a = action_for(&info);
        a.remove("pkg.csize");
        let h = PayloadHashes::from_action(&a).unwrap();
        assert_eq!(h.stored_hash(Check::Content), None);
        assert_eq!(
            h.stored_hash(Check::Stored).unwrap().which,
            "gzip:sha512t_256"
        );
        // A repository check refuses the other bytes; reading the content accepts them,
        // because what is installed is exactly the published content.
        match h.verify_checked(Check::Stored, &other[..], io::sink()) {
            Err(PayloadError::Mismatch { which, .. }) => assert_eq!(which, "gzip:sha512t_256"),
            r => panic!("{r:?}"),
        }
        let mut out = Vec::new();
        h.verify_checked(Check::Content, &other[..], &mut out)
            .unwrap();
        assert_eq!(out, content);
        // Other content in valid gzip still fails, on the content hash, naming the payload.
        let (evil, _) = stored(b"#!/bin/sh\necho evil\n");
        match h.verify_checked(Check::Content, &evil[..], io::sink()) {
            Err(PayloadError::Mismatch { which, name, .. }) => {
                assert_eq!(which, "file:sha512t_256");
                assert_eq!(name, info.sha1);
            }
            r => panic!("{r:?}"),
        }
        // A SHA-1 content hash beside a SHA-512/256 of the stored bytes: the stronger
        // stored hash is still checked when reading content.
        let weak = Action::parse(&format!(
            "file {} pkg.content-hash=gzip:sha512t_256:{} path=x",
            info.sha1, info.gzip_sha512t_256
        ))
        .unwrap();
        let h = PayloadHashes::from_action(&weak).unwrap();
        assert_eq!(h.uncompressed.which, "hash");
        assert_eq!(
            h.stored_hash(Check::Content).unwrap().which,
            "gzip:sha512t_256"
        );
        match h.verify_checked(Check::Content, &other[..], io::sink()) {
            Err(PayloadError::Mismatch { which, .. }) => assert_eq!(which, "gzip:sha512t_256"),
            r => panic!("{r:?}"),
        }
        // chash (SHA-1) beside a SHA-1 content hash: equal strength, skipped.
        let sha1_only =
            Action::parse(&format!("file {} chash={} path=x", info.sha1, info.chash)).unwrap();
        let h = PayloadHashes::from_action(&sha1_only).unwrap();
        assert_eq!(h.stored_hash(Check::Content), None);
        h.verify_checked(Check::Content, &other[..], io::sink())
            .unwrap();
        // pkg.csize is still checked on every read (it costs nothing).
        let h = PayloadHashes::from_action(&action_for(&info)).unwrap();
        assert!(matches!(
            h.verify_checked(Check::Content, &other[..], io::sink()),
            Err(PayloadError::Size { .. })
        ));
    }

    #[test]
    fn reader_fails_only_at_end() {
        let content = vec![7u8; 300_000];
        let (gz, info) = stored(&content);
        let mut a = action_for(&info);
        a.remove("chash");
        a.remove("pkg.content-hash");
        a.remove("pkg.csize");
        a.push(
            "pkg.content-hash",
            &format!("file:sha256:{}", "00".repeat(32)),
        );
        let h = PayloadHashes::from_action(&a).unwrap();
        let mut r = h.reader(&gz[..]);
        let mut buf = vec![0u8; 1000];
        assert!(r.read(&mut buf).unwrap() > 0);
        let err = io::copy(&mut r, &mut io::sink()).unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert!(matches!(
            r.take_error(),
            Some(PayloadError::Mismatch { .. })
        ));
    }
}
