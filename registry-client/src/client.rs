//! The [`Client`] itself: shared HTTP clients, URLs, and the small helpers every request uses.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use reqwest::Url;
use reqwest::header::LOCATION;

use validator::RegistryHost;

use crate::auth;
use crate::error::ClientError;
use crate::reference::authority;

/// A Distribution client. Cheap to clone; clones share cached challenges and tokens.
#[derive(Debug, Clone)]
pub struct Client {
    pub(crate) http: reqwest::Client,
    /// Hosts with their own TLS material (`certs.d`).
    pub(crate) per_host: Arc<HashMap<String, reqwest::Client>>,
    /// A CA file or `insecure` was given: loopback hosts use TLS too.
    pub(crate) tls_configured: bool,
    pub(crate) auth: Arc<auth::AuthState>,
    pub(crate) plain_http: bool,
    pub(crate) retry: Retry,
    pub(crate) chunk_size: u64,
    /// Blob uploads in flight, one per destination and digest at a time (clones share it).
    pub(crate) blob_flights:
        Arc<crate::transfer::flight::SingleFlight<crate::transfer::flight::BlobKey>>,
}

impl Client {
    /// `scheme://HOST[:PORT]` of `registry`, decided on its canonical spelling: plain HTTP
    /// for a loopback host (unless TLS is configured), Docker Hub at `registry-1.docker.io`.
    pub(crate) fn base(&self, registry: &str) -> String {
        let host = RegistryHost::parse(registry).ok();
        let key = host.as_ref().map_or(registry, RegistryHost::as_str);
        let tls = !self.plain_http
            && (self.tls_configured
                || self.per_host.contains_key(key)
                || !host.as_ref().is_some_and(RegistryHost::is_loopback));
        let scheme = if tls { "https" } else { "http" };
        let endpoint = host.as_ref().map_or(registry, RegistryHost::endpoint);
        format!("{scheme}://{endpoint}")
    }

    /// The HTTP client for a URL's host (its own when `certs.d` has an entry for it).
    pub(crate) fn http_for(&self, url: &Url) -> &reqwest::Client {
        self.per_host.get(&authority(url)).unwrap_or(&self.http)
    }

    pub(crate) fn url(&self, registry: &str, path: &str) -> Result<Url, ClientError> {
        let s = format!("{}{path}", self.base(registry));
        Url::parse(&s).map_err(|e| ClientError::Protocol {
            url: s.clone(),
            reason: format!("not a valid URL: {e}"),
        })
    }

    /// Token endpoint fetches so far (each one is a round trip the cache did not save).
    pub fn token_fetches(&self) -> u64 {
        self.auth
            .token_fetches
            .load(std::sync::atomic::Ordering::Relaxed)
    }
}

/// Retry policy for transient failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retry {
    /// Attempts per request, the first included (at least 1).
    pub attempts: u32,
    /// Delay before the first retry; doubled each time.
    pub base_delay: Duration,
    /// Longest delay between attempts.
    pub max_delay: Duration,
}

impl Default for Retry {
    fn default() -> Self {
        Retry {
            attempts: 5,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
        }
    }
}

impl Retry {
    pub(crate) fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

pub(crate) fn header_str<'a>(h: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

pub(crate) fn location(base: &Url, resp: &reqwest::Response) -> Result<Url, ClientError> {
    let loc =
        header_str(resp.headers(), LOCATION.as_str()).ok_or_else(|| ClientError::Protocol {
            url: base.to_string(),
            reason: "the registry sent no Location".to_owned(),
        })?;
    base.join(loc).map_err(|e| ClientError::Protocol {
        url: base.to_string(),
        reason: format!("bad Location {loc:?}: {e}"),
    })
}
