//! The network-free core of cosign-compatible image signing ("Trusted images"): key files,
//! signatures and attestations in the formats `cosign` v2 reads and writes, and the
//! admission policy a worker applies to what it found.
//!
//! - [`keys`]: ECDSA P-256 [`SigningKey`] / [`VerifyingKey`] read from plain, encrypted
//!   (PBES2) and SEC1 PEM and from cosign's own `ENCRYPTED SIGSTORE PRIVATE KEY` files;
//!   written as PKCS#8 (encrypted or not), as cosign's format, and public keys as the
//!   `PUBLIC KEY` PEM `cosign public-key` prints. A [`KeyId`] (`sha256:<hex of SPKI DER>`)
//!   names a key in messages and in policy evidence.
//! - [`cosign`]: the simple-signing payload ([`cosign::SimpleSigning`]), base64 DER
//!   ECDSA-SHA256 signatures ([`cosign::sign`], [`cosign::verify`]), the `sha256-<hex>.sig`
//!   manifest (accumulating layers as cosign does, or as an OCI 1.1 referrer) and the
//!   per-layer check [`cosign::verify_signature_layer`], whose [`SignatureError`] tells an
//!   unsigned image, a wrong key, a replayed signature and a tampered payload apart.
//! - [`dsse`], [`intoto`], [`slsa`]: DSSE v1 envelopes and their PAE, in-toto statements
//!   (v0.1, as `cosign attest` writes) with cosign's `--type` names, and a typed SLSA v1
//!   provenance predicate for `rdctl build`.
//! - [`attestation`]: the `sha256-<hex>.att` manifest (append, and `--replace` by predicate
//!   type) and [`attestation::verify_attestation_layer`].
//! - [`bundle`]: sigstore bundles (v0.3, what cosign v3 writes by default): DSSE envelopes of
//!   in-toto statements or message signatures, as OCI 1.1 referrers of the image; verified
//!   with keys, offline.
//! - [`policy`]: `[[rule]]`s matching image names by glob, with `accept`, `reject` or
//!   `signed` (keys, threshold, required attestations, digest pin, and conditions on what
//!   the attestations say: packages an SBOM must not list, the SLSA builder and source),
//!   evaluated against the [`policy::Evidence`] a caller gathered into a [`policy::Decision`].
//!
//! The crate does no network I/O and starts no runtime: callers fetch manifests and blobs and
//! pass their bytes in, and push what the manifest builders return. It reads files only in
//! [`Policy::load`] (the policy and the key files it names). Signing is deterministic
//! (RFC 6979); verification accepts cosign's randomised signatures. Only keys are supported:
//! no certificates, no Rekor or transparency-log checks (the equivalent of `cosign … --insecure-ignore-tlog`).
//! Secrets (private scalars, decrypted key bytes, passwords) are zeroized when dropped.
#![deny(missing_docs)]

pub mod attestation;
pub mod bundle;
pub mod cosign;
pub mod dsse;
mod glob;
pub mod intoto;
pub mod keys;
pub mod policy;
mod sigstore_key;
pub mod slsa;

pub use cosign::SignatureError;
pub use keys::{KeyError, KeyId, KeyPair, SigningKey, VerifyingKey, generate};
pub use policy::{Decision, DenyReason, Evidence, Policy, PolicyError};
