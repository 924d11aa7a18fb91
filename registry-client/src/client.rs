//! The [`Client`] itself: shared HTTP clients, URLs, and the small helpers every request uses.

use std::collections::HashMap;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use reqwest::header::LOCATION;
use reqwest::{StatusCode, Url};

use validator::{RegistryHost, error_chain};

use crate::auth;
use crate::error::ClientError;
use crate::session::Scope;
use crate::transport::{ClientBuilder, Retry, authority};

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
    /// A builder with defaults.
    pub fn builder() -> ClientBuilder {
        ClientBuilder::default()
    }

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

    /// Checks that the registry accepts this client's credentials: `GET /v2/`, answering a
    /// challenge as any request would (`rdctl login` runs this before saving).
    pub async fn check_login(&self, registry: &str) -> Result<(), ClientError> {
        let url = self.url(registry, "/v2/")?;
        let scope = Scope {
            host: registry,
            repo: None,
        };
        let resp = self
            .send(&scope, &url, &|| self.http_for(&url).get(url.clone()))
            .await?;
        if resp.status() != StatusCode::OK {
            return Err(Self::unexpected(&url, resp).await);
        }
        Ok(())
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

pub(crate) enum ReadError {
    TooLarge,
    Body(String),
}

pub(crate) async fn read_limited(resp: reqwest::Response, limit: u64) -> Result<Bytes, ReadError> {
    let mut stream = resp.bytes_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| ReadError::Body(error_chain(&e)))?;
        if buf.len() as u64 + chunk.len() as u64 > limit {
            return Err(ReadError::TooLarge);
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(buf.freeze())
}
