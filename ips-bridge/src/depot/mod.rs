//! The HTTP depot protocol: a client for pkg depots and a read-only server over a file
//! repository.

mod client;
mod query;
mod search;
mod server;
mod terminator;
mod tls;

pub use client::{DepotClient, DepotClientBuilder, DepotError, RetryPolicy};
pub use server::{DepotServer, VERSIONS};
pub use terminator::ServerTls;
pub use tls::{TlsFileError, TlsProblem, TlsSettings};
