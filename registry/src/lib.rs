//! OCI Distribution v1.1 registry: the server behind `rdctl registry serve` (feature `server`,
//! on by default) and, later, the client used by the builder, the worker and `rdctl copy`.
//!
//! Main types, from the bottom up:
//!
//! - [`storage::Store`]: the object-safe storage seam (`Arc<dyn Store>`), with
//!   [`storage::FsStore`] as the embedded default; [`storage::layout`] is the only code that
//!   builds keys. Blobs are content-addressed and visible only after their size and digest
//!   were verified; tags, referrers and the catalog are small index documents replaced with
//!   conditional writes.
//! - Upload sessions keep their offset and hash state in the store, so they survive restarts
//!   and could be continued by another replica.
//! - [`api::router`] declares every route; one handler module per API area answers with the
//!   OCI error table in [`errors`].
//! - [`server::serve`] runs it with graceful, bounded shutdown (on the caller's runtime),
//!   configured by [`server::ServeConfig`].
//!
//! Invariants: a blob key holds only bytes whose digest equals the key; nothing can be read
//! before commit; all registry state lives in the store. It depends only on `validator`
//! among workspace crates.
#![deny(missing_docs)]

pub mod api;
pub mod auth;
pub mod errors;
pub mod gc;
mod handlers;
pub mod metrics;
pub mod ratelimit;
mod repo;
pub mod server;
pub mod storage;
pub mod tls;
mod upload;

pub use server::{GcSchedule, ServeConfig, ServeError, serve};
