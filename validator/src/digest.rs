//! Content digests: the only way a digest string enters the toolchain.
//!
//! A [`Digest`] is parsed once at the edge and is then known to be `sha256:` followed by 64
//! lowercase hex characters or `sha512:` followed by 128. Other algorithms that the OCI grammar
//! admits (blake3, vendor ones) are refused with a typed error: nothing here could verify them,
//! and a digest that cannot be verified must never name a blob or a path (CVE-2024-3727).

use std::fmt;
use std::str::FromStr;

use sha2::Digest as _;

/// A digest algorithm that the toolchain can compute and verify.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Algorithm {
    /// SHA-256, the algorithm every OCI implementation must support.
    Sha256,
    /// SHA-512, which the OCI specs allow.
    Sha512,
}

impl Algorithm {
    /// The algorithm's name as it appears before the `:` of a digest.
    pub fn as_str(self) -> &'static str {
        match self {
            Algorithm::Sha256 => "sha256",
            Algorithm::Sha512 => "sha512",
        }
    }

    /// Length of the hex-encoded hash.
    pub fn hex_len(self) -> usize {
        match self {
            Algorithm::Sha256 => 64,
            Algorithm::Sha512 => 128,
        }
    }

    /// A new incremental hasher for this algorithm.
    pub fn digester(self) -> Digester {
        Digester::new(self)
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = DigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "sha256" => Ok(Algorithm::Sha256),
            "sha512" => Ok(Algorithm::Sha512),
            other => Err(DigestError::UnsupportedAlgorithm {
                input: shorten(other),
            }),
        }
    }
}

/// Why a string is not a digest the toolchain accepts.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DigestError {
    /// The string has no `:` between algorithm and encoded hash.
    #[error("digest {input:?} has no ':' between algorithm and hash")]
    MissingSeparator {
        /// The offending input (shortened when long).
        input: String,
    },
    /// The algorithm part does not follow the OCI grammar.
    #[error("digest {input:?} has a malformed algorithm (expected lowercase [a-z0-9] components)")]
    MalformedAlgorithm {
        /// The offending input (shortened when long).
        input: String,
    },
    /// A grammar-valid algorithm that the toolchain cannot verify.
    #[error("digest algorithm {input:?} is not supported (only sha256 and sha512)")]
    UnsupportedAlgorithm {
        /// The algorithm as given (shortened when long).
        input: String,
    },
    /// The encoded hash has the wrong length for its algorithm.
    #[error("digest {input:?}: {algorithm} needs {expected} hex characters, found {found}")]
    WrongLength {
        /// The offending input (shortened when long).
        input: String,
        /// The algorithm named by the digest.
        algorithm: Algorithm,
        /// The required length.
        expected: usize,
        /// The length found.
        found: usize,
    },
    /// The encoded hash holds something other than lowercase hex.
    #[error("digest {input:?}: the hash must be lowercase hex")]
    NotLowercaseHex {
        /// The offending input (shortened when long).
        input: String,
    },
}

/// Keep error messages bounded whatever the input.
fn shorten(s: &str) -> String {
    const MAX: usize = 160;
    if s.len() <= MAX {
        return s.to_owned();
    }
    let mut end = MAX;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

/// A validated content digest (`sha256:<64 hex>` or `sha512:<128 hex>`).
///
/// Its [`Display`](fmt::Display) form is canonical and is safe to use as a path component
/// (see [`Digest::encoded`]) because parsing admits only lowercase hex.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Digest {
    algorithm: Algorithm,
    /// The whole `alg:hex` string, kept to hand out `&str` without allocation.
    repr: Box<str>,
}

impl Digest {
    /// Parses and validates a digest string.
    pub fn parse(input: &str) -> Result<Self, DigestError> {
        let Some((alg, encoded)) = input.split_once(':') else {
            return Err(DigestError::MissingSeparator {
                input: shorten(input),
            });
        };
        if !algorithm_grammar_ok(alg) {
            return Err(DigestError::MalformedAlgorithm {
                input: shorten(input),
            });
        }
        let algorithm: Algorithm = alg.parse()?;
        if encoded.len() != algorithm.hex_len() {
            return Err(DigestError::WrongLength {
                input: shorten(input),
                algorithm,
                expected: algorithm.hex_len(),
                found: encoded.len(),
            });
        }
        if !encoded
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        {
            return Err(DigestError::NotLowercaseHex {
                input: shorten(input),
            });
        }
        Ok(Digest {
            algorithm,
            repr: input.into(),
        })
    }

    /// Builds a digest from raw hash bytes (for example a hasher's output).
    ///
    /// # Panics
    /// When `bytes` does not have the algorithm's output length; that is a programming error.
    pub fn from_bytes(algorithm: Algorithm, bytes: &[u8]) -> Self {
        assert_eq!(
            bytes.len() * 2,
            algorithm.hex_len(),
            "hash length does not match {algorithm}"
        );
        Digest {
            algorithm,
            repr: format!("{algorithm}:{}", hex::encode(bytes)).into(),
        }
    }

    /// Digest of a byte slice (for small documents; stream large content through [`Digester`]).
    pub fn of(algorithm: Algorithm, bytes: &[u8]) -> Self {
        let mut d = Digester::new(algorithm);
        d.update(bytes);
        d.finish()
    }

    /// The SHA-256 digest of a byte slice.
    pub fn sha256(bytes: &[u8]) -> Self {
        Self::of(Algorithm::Sha256, bytes)
    }

    /// The algorithm.
    pub fn algorithm(&self) -> Algorithm {
        self.algorithm
    }

    /// The lowercase hex hash, without the algorithm (safe as a path component).
    pub fn encoded(&self) -> &str {
        &self.repr[self.algorithm.as_str().len() + 1..]
    }

    /// The canonical `alg:hex` form.
    pub fn as_str(&self) -> &str {
        &self.repr
    }
}

/// `component (sep component)*` with `component ::= [a-z0-9]+` and `sep ::= [+._-]`.
fn algorithm_grammar_ok(alg: &str) -> bool {
    !alg.is_empty()
        && alg.split(['+', '.', '_', '-']).all(|c| {
            !c.is_empty()
                && c.bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
        })
}

impl fmt::Display for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.repr)
    }
}

impl fmt::Debug for Digest {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digest({})", self.repr)
    }
}

impl FromStr for Digest {
    type Err = DigestError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Digest::parse(s)
    }
}

impl TryFrom<&str> for Digest {
    type Error = DigestError;

    fn try_from(s: &str) -> Result<Self, Self::Error> {
        Digest::parse(s)
    }
}

impl serde::Serialize for Digest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.repr)
    }
}

impl<'de> serde::Deserialize<'de> for Digest {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Digest::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl From<&Digest> for oci_spec::image::Digest {
    fn from(d: &Digest) -> Self {
        // Our grammar is a strict subset of oci-spec's, so this cannot fail.
        d.as_str()
            .parse()
            .expect("a validated digest parses as an oci-spec digest")
    }
}

impl TryFrom<&oci_spec::image::Digest> for Digest {
    type Error = DigestError;

    fn try_from(d: &oci_spec::image::Digest) -> Result<Self, Self::Error> {
        Digest::parse(d.as_ref())
    }
}

/// An incremental hasher for one [`Algorithm`].
///
/// sha2 picks its SHA-NI (x86) or ARMv8 path at run time, so this is as fast as the CPU allows.
#[derive(Clone)]
pub struct Digester {
    inner: Inner,
}

#[derive(Clone)]
enum Inner {
    Sha256(sha2::Sha256),
    Sha512(sha2::Sha512),
}

impl Digester {
    /// A new hasher.
    pub fn new(algorithm: Algorithm) -> Self {
        let inner = match algorithm {
            Algorithm::Sha256 => Inner::Sha256(sha2::Sha256::new()),
            Algorithm::Sha512 => Inner::Sha512(sha2::Sha512::new()),
        };
        Digester { inner }
    }

    /// The algorithm this hasher computes.
    pub fn algorithm(&self) -> Algorithm {
        match self.inner {
            Inner::Sha256(_) => Algorithm::Sha256,
            Inner::Sha512(_) => Algorithm::Sha512,
        }
    }

    /// Feeds bytes.
    pub fn update(&mut self, bytes: &[u8]) {
        match &mut self.inner {
            Inner::Sha256(h) => h.update(bytes),
            Inner::Sha512(h) => h.update(bytes),
        }
    }

    /// The digest of everything fed so far.
    pub fn finish(self) -> Digest {
        match self.inner {
            Inner::Sha256(h) => Digest::from_bytes(Algorithm::Sha256, &h.finalize()),
            Inner::Sha512(h) => Digest::from_bytes(Algorithm::Sha512, &h.finalize()),
        }
    }
}

/// A saved [`Digester`] state that could not be restored.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("saved digester state of {len} bytes is not a sha256 or sha512 state")]
pub struct DigesterStateError {
    /// Length of the rejected state.
    pub len: usize,
}

/// Tags in front of a saved state, naming its algorithm.
const STATE_SHA256: u8 = 1;
const STATE_SHA512: u8 = 2;

impl Digester {
    /// Saves the hash state (algorithm tag + the hasher's serialized state, including bytes
    /// buffered short of a block), so hashing can resume later, in another process, with
    /// [`Digester::restore_state`]. A SHA-256 state is 105 bytes, a SHA-512 state 209.
    pub fn save_state(&self) -> Vec<u8> {
        use sha2::digest::common::hazmat::SerializableState;
        let (tag, state): (u8, &[u8]) = match &self.inner {
            Inner::Sha256(h) => (STATE_SHA256, &h.serialize()),
            Inner::Sha512(h) => (STATE_SHA512, &h.serialize()),
        };
        let mut out = Vec::with_capacity(1 + state.len());
        out.push(tag);
        out.extend_from_slice(state);
        out
    }

    /// Restores a hasher saved by [`Digester::save_state`].
    pub fn restore_state(saved: &[u8]) -> Result<Self, DigesterStateError> {
        use sha2::digest::common::hazmat::SerializableState;
        let err = || DigesterStateError { len: saved.len() };
        let (tag, state) = saved.split_first().ok_or_else(err)?;
        let inner = match *tag {
            STATE_SHA256 => {
                let state = state.try_into().map_err(|_| err())?;
                Inner::Sha256(sha2::Sha256::deserialize(state).map_err(|_| err())?)
            }
            STATE_SHA512 => {
                let state = state.try_into().map_err(|_| err())?;
                Inner::Sha512(sha2::Sha512::deserialize(state).map_err(|_| err())?)
            }
            _ => return Err(err()),
        };
        Ok(Digester { inner })
    }
}

impl fmt::Debug for Digester {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Digester({})", self.algorithm())
    }
}

impl std::io::Write for Digester {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.update(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const EMPTY256: &str =
        "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855";

    #[test]
    fn parses_and_displays_canonically() {
        let d = Digest::parse(EMPTY256).unwrap();
        assert_eq!(d.algorithm(), Algorithm::Sha256);
        assert_eq!(d.to_string(), EMPTY256);
        assert_eq!(d.encoded(), &EMPTY256[7..]);
        assert_eq!(Digest::sha256(b""), d);
    }

    #[test]
    fn sha512_of_empty() {
        let d = Digest::of(Algorithm::Sha512, b"");
        assert!(d.as_str().starts_with("sha512:cf83e1357eefb8bd"));
        assert_eq!(d.encoded().len(), 128);
        assert_eq!(Digest::parse(d.as_str()).unwrap(), d);
    }

    #[test]
    fn rejects_bad_digests_with_typed_errors() {
        use DigestError::*;
        type Check = fn(&DigestError) -> bool;
        let cases: &[(&str, Check)] = &[
            ("", |e| matches!(e, MissingSeparator { .. })),
            ("sha256", |e| matches!(e, MissingSeparator { .. })),
            ("SHA256:abc", |e| matches!(e, MalformedAlgorithm { .. })),
            ("sha256+:abc", |e| matches!(e, MalformedAlgorithm { .. })),
            (":abc", |e| matches!(e, MalformedAlgorithm { .. })),
            ("md5:d41d8cd98f00b204e9800998ecf8427e", |e| {
                matches!(e, UnsupportedAlgorithm { .. })
            }),
            (
                "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262",
                |e| matches!(e, UnsupportedAlgorithm { .. }),
            ),
            ("sha256:abc", |e| matches!(e, WrongLength { found: 3, .. })),
            (
                "sha256:E3B0C44298FC1C149AFBF4C8996FB92427AE41E4649B934CA495991B7852B855",
                |e| matches!(e, NotLowercaseHex { .. }),
            ),
            (
                "sha256:../../../../etc/passwd/aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
                |e| matches!(e, NotLowercaseHex { .. }),
            ),
            (
                "sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b85g",
                |e| matches!(e, NotLowercaseHex { .. }),
            ),
        ];
        for (input, check) in cases {
            let err = Digest::parse(input).expect_err(input);
            assert!(check(&err), "{input:?} gave {err:?}");
            assert!(!err.to_string().is_empty());
        }
    }

    #[test]
    fn long_input_is_shortened_in_errors() {
        let long = format!("sha256:{}", "a".repeat(10_000));
        let msg = Digest::parse(&long).unwrap_err().to_string();
        assert!(msg.len() < 400, "{msg}");
    }

    #[test]
    fn serde_round_trip_and_rejection() {
        let d: Digest = serde_json::from_str(&format!("\"{EMPTY256}\"")).unwrap();
        assert_eq!(
            serde_json::to_string(&d).unwrap(),
            format!("\"{EMPTY256}\"")
        );
        assert!(serde_json::from_str::<Digest>("\"sha256:abc\"").is_err());
    }

    #[test]
    fn saved_state_resumes_exactly() {
        let data: Vec<u8> = (0..1000u32).map(|i| (i * 7 % 251) as u8).collect();
        for alg in [Algorithm::Sha256, Algorithm::Sha512] {
            // Split points inside a block, on a block boundary and at the ends.
            for split in [0, 1, 63, 64, 127, 128, 500, 1000] {
                let mut first = Digester::new(alg);
                first.update(&data[..split]);
                let saved = first.save_state();
                let mut resumed = Digester::restore_state(&saved).unwrap();
                assert_eq!(resumed.algorithm(), alg);
                resumed.update(&data[split..]);
                assert_eq!(
                    resumed.finish(),
                    Digest::of(alg, &data),
                    "{alg} split {split}"
                );
            }
        }
        assert_eq!(Digester::new(Algorithm::Sha256).save_state().len(), 105);
    }

    #[test]
    fn corrupt_saved_state_is_refused() {
        let saved = Digester::new(Algorithm::Sha256).save_state();
        for bad in [&[][..], &saved[..10], &[9u8; 105][..], &saved[1..]] {
            let err = Digester::restore_state(bad).unwrap_err();
            assert_eq!(err.len, bad.len());
        }
        let mut long = saved.clone();
        long.push(0);
        assert!(Digester::restore_state(&long).is_err());
    }

    #[test]
    fn converts_to_and_from_oci_spec() {
        let d = Digest::parse(EMPTY256).unwrap();
        let o: oci_spec::image::Digest = (&d).into();
        assert_eq!(Digest::try_from(&o).unwrap(), d);
    }
}
