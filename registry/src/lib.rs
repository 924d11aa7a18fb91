//! OCI Distribution v1.1 registry: the server behind `rdctl registry serve` (feature `server`,
//! on by default) and the client used by the builder, the worker and `rdctl copy` (always built).
//!
//! Its job: every distribution-spec endpoint over a storage trait with a filesystem store and an
//! S3 store (SeaweedFS), upload sessions kept in the store, referrers, GC and access control.
//! It depends only on `validator` among workspace crates.
//!
//! Nothing is implemented yet: this crate holds no code until the registry issue lands.
