//! Per-client rate limit (`[rate_limit]`): a token bucket per client IP address (GCRA, from
//! the `governor` crate). A request over the limit gets 429 with the OCI code
//! `TOOMANYREQUESTS` and `Retry-After` in whole seconds.
//!
//! The buckets live in the process: each replica limits on its own, and a restart forgets
//! them. That is acceptable for a limit (it only ever lets more through, never corrupts
//! state), unlike registry data, which lives in the store. The key is the connection's peer
//! address; behind a reverse proxy every client shares the proxy's bucket, so limit there
//! instead.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::extract::connect_info::ConnectInfo;
use axum::http::{HeaderValue, header};
use governor::clock::{Clock, DefaultClock};
use governor::{DefaultKeyedRateLimiter, Quota};

use crate::errors::{ApiError, Code};

/// The `[rate_limit]` table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RateLimit {
    /// Requests each client may make per second, sustained (`rate_limit.requests_per_second`).
    pub requests_per_second: NonZeroU32,
    /// Requests a client may make at once after being idle (`rate_limit.burst`; default
    /// `requests_per_second`).
    pub burst: NonZeroU32,
}

/// The remote address of a connection, attached to every request by the accept loop
/// ([`crate::conn`], plain or TLS) as `ConnectInfo<PeerAddr>`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// How many checks pass between two sweeps of idle buckets.
const SWEEP_EVERY: u64 = 1024;

/// The buckets of every client.
#[derive(Debug)]
pub(crate) struct Limiter {
    buckets: DefaultKeyedRateLimiter<IpAddr>,
    checks: AtomicU64,
}

impl Limiter {
    pub(crate) fn new(limit: RateLimit) -> Limiter {
        Limiter {
            buckets: DefaultKeyedRateLimiter::keyed(
                Quota::per_second(limit.requests_per_second).allow_burst(limit.burst),
            ),
            checks: AtomicU64::new(0),
        }
    }

    /// Takes one request from the client's bucket, or says when it may come back.
    pub(crate) fn check(&self, client: IpAddr) -> Result<(), ApiError> {
        // Buckets of clients that came back to full are dropped now and then, so memory
        // follows the active clients, not every address ever seen.
        if self.checks.fetch_add(1, Ordering::Relaxed) % SWEEP_EVERY == SWEEP_EVERY - 1 {
            self.buckets.retain_recent();
        }
        self.buckets.check_key(&client).map_err(|not_until| {
            let wait = not_until.wait_time_from(DefaultClock::default().now());
            // Whole seconds, rounded up: a client that waits this long gets through.
            let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
            let secs = secs.max(1);
            ApiError::new(
                Code::TooManyRequests,
                format!("more than the allowed request rate from {client}; retry in {secs} s"),
            )
            .with_header(header::RETRY_AFTER, HeaderValue::from(secs))
        })
    }
}

/// The client's IP address; requests that came without one (in-process tests) share one
/// bucket.
pub(crate) fn client_ip(peer: Option<&ConnectInfo<PeerAddr>>) -> IpAddr {
    peer.map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.0.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_429_with_retry_after_per_client() {
        let limiter = Limiter::new(RateLimit {
            requests_per_second: NonZeroU32::new(1).unwrap(),
            burst: NonZeroU32::new(2).unwrap(),
        });
        let a = IpAddr::from([10, 0, 0, 1]);
        let b = IpAddr::from([10, 0, 0, 2]);
        limiter.check(a).unwrap();
        limiter.check(a).unwrap();
        let e = limiter.check(a).unwrap_err();
        assert_eq!(e.code, Code::TooManyRequests);
        let resp = axum::response::IntoResponse::into_response(e);
        assert_eq!(resp.status(), 429);
        assert_eq!(resp.headers()[header::RETRY_AFTER], "1");
        // Another client has its own bucket.
        limiter.check(b).unwrap();
    }
}
