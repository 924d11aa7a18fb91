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
//! - [`server::serve`] and [`server::serve_blocking`] run it with graceful, bounded shutdown,
//!   configured by [`server::ServeConfig`].
//!
//! Invariants: a blob key holds only bytes whose digest equals the key; nothing can be read
//! before commit; all registry state lives in the store. It depends only on `validator`
//! among workspace crates.
#![deny(missing_docs)]

pub mod client;
pub mod names;
pub mod transfer;

#[cfg(feature = "server")]
pub mod api;
#[cfg(feature = "server")]
pub mod auth;
#[cfg(feature = "server")]
pub mod errors;
#[cfg(feature = "server")]
pub mod gc;
#[cfg(feature = "server")]
mod handlers;
#[cfg(feature = "server")]
pub mod metrics;
#[cfg(feature = "server")]
pub mod ratelimit;
#[cfg(feature = "server")]
mod repo;
#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "server")]
pub mod storage;
#[cfg(feature = "server")]
pub mod tls;
#[cfg(feature = "server")]
mod upload;

pub use names::{Name, Tag};
#[cfg(feature = "server")]
pub use server::{GcSchedule, ServeConfig, ServeError, serve, serve_blocking};
