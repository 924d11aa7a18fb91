//! The HTTP depot protocol: a client for pkg depots and a read-only server over a file
//! repository.

mod client;
mod server;

pub use client::{DepotClient, DepotError, RetryPolicy};
pub use server::{DepotServer, VERSIONS};
