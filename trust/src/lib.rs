//! x
#![deny(missing_docs)]
pub mod attestation;
pub mod cosign;
pub mod dsse;
mod glob;
pub mod intoto;
pub mod keys;
pub mod policy;
pub mod slsa;
mod sigstore_key;
