//! Streaming verification: hash and count bytes as they pass, in one pass.
//!
//! [`VerifyingReader`] is the gate every untrusted blob goes through: it refuses to read past
//! the expected size, and it reports end-of-stream only after size and digest both matched, so a
//! consumer that reads to EOF without an error has verified content. [`DigestingReader`] and
//! [`DigestingWriter`] hash without an expectation (DiffIDs, uploads whose digest is named at
//! the end).

use std::io::{self, Read, Write};

use crate::digest::{Algorithm, Digest, Digester};

/// Content did not match its descriptor.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VerifyError {
    /// More bytes arrived than the descriptor's size.
    #[error("content of {expected_digest} is longer than its declared size {expected} bytes")]
    TooLong {
        /// The digest the content was expected to have.
        expected_digest: Digest,
        /// The declared size.
        expected: u64,
    },
    /// The stream ended before the descriptor's size.
    #[error("content of {expected_digest} ended after {found} bytes, expected {expected}")]
    TooShort {
        /// The digest the content was expected to have.
        expected_digest: Digest,
        /// The declared size.
        expected: u64,
        /// Bytes actually read.
        found: u64,
    },
    /// Size matched, digest did not.
    #[error("content digest mismatch: expected {expected}, computed {found}")]
    DigestMismatch {
        /// The declared digest.
        expected: Digest,
        /// The digest of the bytes read.
        found: Digest,
    },
}

impl VerifyError {
    /// Finds a [`VerifyError`] inside an I/O error produced by the verifying adapters.
    pub fn from_io(err: &io::Error) -> Option<&VerifyError> {
        err.get_ref().and_then(|e| e.downcast_ref::<VerifyError>())
    }
}

impl From<VerifyError> for io::Error {
    fn from(e: VerifyError) -> Self {
        io::Error::new(io::ErrorKind::InvalidData, e)
    }
}

/// Tracks progress against an expected size and digest.
#[derive(Debug, Clone)]
struct Expectation {
    digester: Option<Digester>,
    expected: Digest,
    size: u64,
    count: u64,
    verified: bool,
    /// The verdict once a mismatch was found; later reads repeat it.
    failed: Option<VerifyError>,
}

impl Expectation {
    fn new(expected: Digest, size: u64) -> Self {
        Expectation {
            digester: Some(expected.algorithm().digester()),
            expected,
            size,
            count: 0,
            verified: false,
            failed: None,
        }
    }

    /// How many bytes may be requested next: one more than remaining, to detect overlong input.
    fn window(&self, buf_len: usize) -> usize {
        let remaining = self.size - self.count;
        let allowed = remaining.saturating_add(1);
        usize::try_from(allowed).map_or(buf_len, |a| a.min(buf_len))
    }

    fn consume(&mut self, bytes: &[u8]) -> Result<(), VerifyError> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let n = bytes.len() as u64;
        if self.count + n > self.size {
            let e = VerifyError::TooLong {
                expected_digest: self.expected.clone(),
                expected: self.size,
            };
            self.failed = Some(e.clone());
            return Err(e);
        }
        self.count += n;
        if let Some(d) = self.digester.as_mut() {
            d.update(bytes);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), VerifyError> {
        if self.verified {
            return Ok(());
        }
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        let result = if self.count != self.size {
            Err(VerifyError::TooShort {
                expected_digest: self.expected.clone(),
                expected: self.size,
                found: self.count,
            })
        } else {
            match self.digester.take().map(Digester::finish) {
                Some(found) if found == self.expected => Ok(()),
                Some(found) => Err(VerifyError::DigestMismatch {
                    expected: self.expected.clone(),
                    found,
                }),
                None => {
                    unreachable!("the digester is only taken by a finish that records its verdict")
                }
            }
        };
        match &result {
            Ok(()) => self.verified = true,
            Err(e) => self.failed = Some(e.clone()),
        }
        result
    }
}

/// A reader that verifies size and digest of everything read through it.
///
/// It never yields more than `size` bytes, and returns `Ok(0)` (end of stream) only once the
/// content verified; any mismatch is an [`io::ErrorKind::InvalidData`] error carrying a
/// [`VerifyError`] (see [`VerifyError::from_io`]).
#[derive(Debug)]
pub struct VerifyingReader<R> {
    inner: R,
    exp: Expectation,
}

impl<R> VerifyingReader<R> {
    /// Wraps `inner`, expecting exactly `size` bytes with digest `expected`.
    pub fn new(inner: R, expected: Digest, size: u64) -> Self {
        VerifyingReader {
            inner,
            exp: Expectation::new(expected, size),
        }
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.exp.count
    }

    /// True once end of stream was reached and the content matched.
    pub fn is_verified(&self) -> bool {
        self.exp.verified
    }

    /// The inner reader.
    pub fn into_inner(self) -> R {
        self.inner
    }
}

impl<R: Read> Read for VerifyingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.exp.verified {
            return Ok(0);
        }
        let window = self.exp.window(buf.len());
        let n = self.inner.read(&mut buf[..window])?;
        if n == 0 {
            self.exp.finish()?;
            return Ok(0);
        }
        self.exp.consume(&buf[..n])?;
        Ok(n)
    }
}

/// A reader that hashes and counts what passes through, with no expectation.
#[derive(Debug)]
pub struct DigestingReader<R> {
    inner: R,
    digester: Digester,
    count: u64,
}

impl<R> DigestingReader<R> {
    /// Wraps `inner`, hashing with `algorithm`.
    pub fn new(inner: R, algorithm: Algorithm) -> Self {
        DigestingReader {
            inner,
            digester: algorithm.digester(),
            count: 0,
        }
    }

    /// Bytes read so far.
    pub fn bytes_read(&self) -> u64 {
        self.count
    }

    /// The inner reader, by reference.
    pub fn get_ref(&self) -> &R {
        &self.inner
    }

    /// The inner reader, mutably; bytes read from it directly are not hashed.
    pub fn get_mut(&mut self) -> &mut R {
        &mut self.inner
    }

    /// Digest and size of everything read so far, and the inner reader.
    pub fn finish(self) -> (R, Digest, u64) {
        (self.inner, self.digester.finish(), self.count)
    }
}

impl<R: Read> Read for DigestingReader<R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.inner.read(buf)?;
        self.digester.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }
}

/// A writer that hashes and counts what is written through it.
#[derive(Debug)]
pub struct DigestingWriter<W> {
    inner: W,
    digester: Digester,
    count: u64,
}

impl<W> DigestingWriter<W> {
    /// Wraps `inner`, hashing with `algorithm`.
    pub fn new(inner: W, algorithm: Algorithm) -> Self {
        DigestingWriter {
            inner,
            digester: algorithm.digester(),
            count: 0,
        }
    }

    /// Bytes written so far.
    pub fn bytes_written(&self) -> u64 {
        self.count
    }

    /// The inner writer, by reference.
    pub fn get_ref(&self) -> &W {
        &self.inner
    }

    /// Digest and size of everything written, and the inner writer.
    pub fn finish(self) -> (W, Digest, u64) {
        (self.inner, self.digester.finish(), self.count)
    }

    /// Checks what was written against an expected digest and size.
    pub fn verify(self, expected: &Digest, size: u64) -> Result<W, VerifyError> {
        let alg = expected.algorithm();
        if alg != self.digester.algorithm() {
            // A different algorithm cannot match; report it as a digest mismatch.
            let found = self.digester.finish();
            return Err(VerifyError::DigestMismatch {
                expected: expected.clone(),
                found,
            });
        }
        let (inner, found, count) = self.finish();
        if count > size {
            return Err(VerifyError::TooLong {
                expected_digest: expected.clone(),
                expected: size,
            });
        }
        if count < size {
            return Err(VerifyError::TooShort {
                expected_digest: expected.clone(),
                expected: size,
                found: count,
            });
        }
        if &found != expected {
            return Err(VerifyError::DigestMismatch {
                expected: expected.clone(),
                found,
            });
        }
        Ok(inner)
    }
}

impl<W: Write> Write for DigestingWriter<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.digester.update(&buf[..n]);
        self.count += n as u64;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

#[cfg(feature = "tokio")]
mod async_impls {
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

    use super::*;

    impl<R: AsyncRead + Unpin> AsyncRead for VerifyingReader<R> {
        fn poll_read(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &mut ReadBuf<'_>,
        ) -> Poll<io::Result<()>> {
            let this = self.get_mut();
            if this.exp.verified || buf.remaining() == 0 {
                return Poll::Ready(Ok(()));
            }
            let window = this.exp.window(buf.remaining());
            let mut limited = buf.take(window);
            match Pin::new(&mut this.inner).poll_read(cx, &mut limited) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
                Poll::Ready(Ok(())) => {
                    let n = limited.filled().len();
                    if n == 0 {
                        return Poll::Ready(this.exp.finish().map_err(Into::into));
                    }
                    this.exp.consume(limited.filled())?;
                    // SAFETY: `limited` wrote `n` initialised bytes into `buf`'s unfilled part.
                    unsafe { buf.assume_init(n) };
                    buf.advance(n);
                    Poll::Ready(Ok(()))
                }
            }
        }
    }

    impl<W: AsyncWrite + Unpin> AsyncWrite for DigestingWriter<W> {
        fn poll_write(
            self: Pin<&mut Self>,
            cx: &mut Context<'_>,
            buf: &[u8],
        ) -> Poll<io::Result<usize>> {
            let this = self.get_mut();
            match Pin::new(&mut this.inner).poll_write(cx, buf) {
                Poll::Ready(Ok(n)) => {
                    this.digester.update(&buf[..n]);
                    this.count += n as u64;
                    Poll::Ready(Ok(n))
                }
                other => other,
            }
        }

        fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().inner).poll_flush(cx)
        }

        fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
            Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Reads in odd-sized pieces to exercise partial reads.
    struct Dribble<'a>(&'a [u8], usize);
    impl Read for Dribble<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let n = self.0.len().min(buf.len()).min(self.1);
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    fn read_all(r: impl Read) -> io::Result<Vec<u8>> {
        let mut out = Vec::new();
        let mut r = r;
        r.read_to_end(&mut out)?;
        Ok(out)
    }

    #[test]
    fn verifies_matching_content_in_any_chunking() {
        let data: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let d = Digest::sha256(&data);
        for chunk in [1, 7, 512, 4096, 100_000] {
            let mut r = VerifyingReader::new(Dribble(&data, chunk), d.clone(), data.len() as u64);
            let out = read_all(&mut r).unwrap();
            assert_eq!(out, data);
            assert!(r.is_verified());
        }
    }

    #[test]
    fn reading_again_after_a_mismatch_repeats_the_error() {
        let d = Digest::sha256(b"abc");
        let mut r = VerifyingReader::new(&b"abd"[..], d, 3);
        let mut buf = [0u8; 8];
        assert_eq!(r.read(&mut buf).unwrap(), 3);
        for _ in 0..3 {
            let e = r.read(&mut buf).unwrap_err();
            assert!(matches!(
                VerifyError::from_io(&e),
                Some(VerifyError::DigestMismatch { .. })
            ));
        }
    }

    #[test]
    fn zero_length_content() {
        let d = Digest::sha256(b"");
        let mut r = VerifyingReader::new(&b""[..], d, 0);
        assert!(read_all(&mut r).unwrap().is_empty());
        assert!(r.is_verified());
    }

    #[test]
    fn detects_wrong_digest_short_and_long() {
        let data = b"hello world";
        let d = Digest::sha256(data);
        let err = read_all(VerifyingReader::new(&b"hello worle"[..], d.clone(), 11)).unwrap_err();
        assert!(matches!(
            VerifyError::from_io(&err),
            Some(VerifyError::DigestMismatch { .. })
        ));
        let err = read_all(VerifyingReader::new(&data[..5], d.clone(), 11)).unwrap_err();
        assert!(matches!(
            VerifyError::from_io(&err),
            Some(VerifyError::TooShort { found: 5, .. })
        ));
        let err = read_all(VerifyingReader::new(&b"hello world!"[..], d.clone(), 11)).unwrap_err();
        assert!(matches!(
            VerifyError::from_io(&err),
            Some(VerifyError::TooLong { .. })
        ));
        // Right digest, wrong declared size.
        let err = read_all(VerifyingReader::new(&data[..], d, 10)).unwrap_err();
        assert!(matches!(
            VerifyError::from_io(&err),
            Some(VerifyError::TooLong { .. })
        ));
    }

    #[test]
    fn never_yields_more_than_declared() {
        let d = Digest::sha256(b"abc");
        let mut r = VerifyingReader::new(&b"abcdefgh"[..], d, 3);
        let mut buf = [0u8; 64];
        let mut total = 0;
        loop {
            match r.read(&mut buf) {
                Ok(0) => panic!("must not verify"),
                Ok(n) => total += n,
                Err(_) => break,
            }
        }
        assert!(total <= 3);
    }

    #[test]
    fn digesting_writer_and_reader_agree() {
        let data = vec![42u8; 70_000];
        let mut w = DigestingWriter::new(Vec::new(), Algorithm::Sha512);
        w.write_all(&data).unwrap();
        let expected = Digest::of(Algorithm::Sha512, &data);
        let inner = w.verify(&expected, data.len() as u64).unwrap();
        assert_eq!(inner, data);

        let mut r = DigestingReader::new(&data[..], Algorithm::Sha512);
        io::copy(&mut r, &mut io::sink()).unwrap();
        let (_, d, n) = r.finish();
        assert_eq!((d, n), (expected, 70_000));
    }

    #[test]
    fn digesting_writer_reports_size_and_digest_mismatch() {
        let mut w = DigestingWriter::new(Vec::new(), Algorithm::Sha256);
        w.write_all(b"abc").unwrap();
        assert!(matches!(
            w.verify(&Digest::sha256(b"abc"), 4),
            Err(VerifyError::TooShort { .. })
        ));
        let mut w = DigestingWriter::new(Vec::new(), Algorithm::Sha256);
        w.write_all(b"abd").unwrap();
        assert!(matches!(
            w.verify(&Digest::sha256(b"abc"), 3),
            Err(VerifyError::DigestMismatch { .. })
        ));
    }

    #[tokio::test]
    #[cfg(feature = "tokio")]
    async fn async_verifying_reader() {
        use tokio::io::AsyncReadExt;
        let data = vec![7u8; 5000];
        let d = Digest::sha256(&data);
        let mut r = VerifyingReader::new(&data[..], d.clone(), 5000);
        let mut out = Vec::new();
        AsyncReadExt::read_to_end(&mut r, &mut out).await.unwrap();
        assert_eq!(out, data);
        let mut r = VerifyingReader::new(&data[..4999], d, 5000);
        assert!(
            AsyncReadExt::read_to_end(&mut r, &mut Vec::new())
                .await
                .is_err()
        );
    }
}
