//! Test support for the S3 store: start SeaweedFS on loopback, create buckets, and inject S3
//! faults through a proxy. Only ever a `[dev-dependencies]` entry.
//!
//! Nothing is implemented yet: this crate holds no code until the S3 store issue lands.
