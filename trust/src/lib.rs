//! x
#![deny(missing_docs)]
pub mod attestation;
pub mod cosign;
pub mod dsse;
pub mod intoto;
pub mod keys;
pub mod slsa;
mod sigstore_key;
