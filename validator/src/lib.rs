//! The OCI model every other part of the toolchain stands on.
//!
//! - [`Digest`] and [`Algorithm`]: the only digests accepted (sha256, sha512), parsed once.
//! - [`VerifyingReader`], [`DigestingReader`], [`DigestingWriter`]: one-pass hashing and
//!   verification of streams (sync `std::io`, and tokio traits behind the `tokio` feature).
//!
//! This crate does no network I/O and starts no async runtime; it touches the file system only
//! in its image-layout module. It re-exports [`oci_spec`] because those types are part of its API.
#![deny(missing_docs)]

mod digest;
mod verify;

pub use digest::{Algorithm, Digest, DigestError, Digester};
pub use oci_spec;
pub use verify::{DigestingReader, DigestingWriter, VerifyError, VerifyingReader};
