//! x
#![deny(missing_docs)]
pub mod cosign;
pub mod keys;
mod sigstore_key;
