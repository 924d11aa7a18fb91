//! The workspace's Distribution client: resolve references, pull manifests and blobs (blobs
//! stream through [`validator::VerifyingReader`], so reading one to EOF without an error means
//! it verified), and push blobs (skipped when present; monolithic when small, chunked when
//! large) and manifests.
//!
//! Failure policy: 401 and 403 are final ([`ClientError::Unauthorized`]); 5xx, 429, connection
//! errors and truncated bodies are retried with exponential backoff ([`Retry`]). Blob downloads
//! resume a truncated body with a `Range` request from the last byte received. Memory per
//! request is bounded by the chunk size, whatever the blob size.
//!
//! TLS is not compiled in yet (plain HTTP only); it comes with the TLS work.

use std::fmt;
use std::io;
use std::pin::Pin;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use reqwest::header::{ACCEPT, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, LOCATION, RANGE};
use reqwest::{Method, StatusCode, Url};
use tokio::io::{AsyncRead, AsyncReadExt};
use validator::{Digest, VerifyError, VerifyingReader};

use crate::names::{Name, Tag};

/// Media types a manifest GET accepts.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// Largest manifest accepted from a registry.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// Why a reference string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {input:?}: {reason}")]
pub struct ReferenceError {
    /// The input (shortened).
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// `registry[:port]/name[:tag][@digest]`, parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    registry: String,
    name: Name,
    tag: Option<Tag>,
    digest: Option<Digest>,
}

impl Reference {
    /// Parses a reference. The registry host is required (no implicit Docker Hub).
    pub fn parse(input: &str) -> Result<Reference, ReferenceError> {
        let err = |reason: &str| ReferenceError {
            input: input.chars().take(300).collect(),
            reason: reason.to_owned(),
        };
        let (rest, digest) = match input.split_once('@') {
            Some((r, d)) => (r, Some(Digest::parse(d).map_err(|e| err(&e.to_string()))?)),
            None => (input, None),
        };
        let (registry, path) = rest
            .split_once('/')
            .ok_or_else(|| err("no registry host before the repository name"))?;
        if registry.is_empty()
            || !registry
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
        {
            return Err(err("bad registry host"));
        }
        // A ':' after the last '/' separates the tag.
        let (name, tag) = match path.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => {
                (n, Some(Tag::parse(t).map_err(|e| err(&e.to_string()))?))
            }
            _ => (path, None),
        };
        let name = Name::parse(name).map_err(|e| err(&e.to_string()))?;
        Ok(Reference {
            registry: registry.to_owned(),
            name,
            tag,
            digest,
        })
    }

    /// A reference to `name` by digest in the same registry.
    pub fn with_digest(&self, digest: Digest) -> Reference {
        Reference {
            registry: self.registry.clone(),
            name: self.name.clone(),
            tag: None,
            digest: Some(digest),
        }
    }

    /// The registry host (and port).
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// The repository name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The tag, if any.
    pub fn tag(&self) -> Option<&Tag> {
        self.tag.as_ref()
    }

    /// The digest, if any.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// What goes after `/manifests/`: the digest, else the tag, else `latest`.
    fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.to_string(),
            (None, None) => "latest".to_owned(),
        }
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.name)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// What a manifest resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// The manifest's media type.
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
}

/// Classes of [`ClientError`] for callers to branch on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The manifest, blob or repository does not exist.
    NotFound,
    /// 401 or 403: final, never retried.
    Unauthorized,
    /// Server or network trouble that outlasted the retries.
    Transient,
    /// Content did not match its digest or size.
    Verify,
    /// The request or the registry's answer was invalid.
    Invalid,
}

/// A registry operation failed. Every variant names the URL involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ClientError {
    /// 401/403.
    #[error("{url}: access denied ({status}); check credentials and permissions")]
    Unauthorized {
        /// The URL.
        url: String,
        /// 401 or 403.
        status: u16,
    },
    /// 404.
    #[error("{url}: not found ({code})")]
    NotFound {
        /// The URL.
        url: String,
        /// The OCI error code, if the registry sent one.
        code: String,
    },
    /// Another 4xx answer, or an unexpected status.
    #[error("{url}: registry answered {status} {code}: {message}")]
    Registry {
        /// The URL.
        url: String,
        /// The status.
        status: u16,
        /// The OCI error code, if any.
        code: String,
        /// The error message or body excerpt.
        message: String,
    },
    /// 5xx, 429, connection or body errors outlasted the retries.
    #[error("{url}: still failing after {attempts} attempts: {last}")]
    Transient {
        /// The URL.
        url: String,
        /// Attempts made.
        attempts: u32,
        /// The last failure.
        last: String,
    },
    /// Content did not verify.
    #[error("{url}: content does not verify")]
    Verify {
        /// The URL.
        url: String,
        /// The mismatch.
        #[source]
        source: VerifyError,
    },
    /// The registry's answer broke the protocol (missing header, bad digest header).
    #[error("{url}: {reason}")]
    Protocol {
        /// The URL.
        url: String,
        /// What was wrong.
        reason: String,
    },
    /// Reading the content to push failed.
    #[error("reading the blob {digest} to push failed")]
    Source {
        /// The blob.
        digest: Digest,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The HTTP client could not be built or a request could not be formed.
    #[error("http client error for {url}")]
    Http {
        /// The URL.
        url: String,
        /// The cause.
        #[source]
        source: reqwest::Error,
    },
}

impl ClientError {
    /// The error's class.
    pub fn kind(&self) -> ErrorKind {
        match self {
            ClientError::Unauthorized { .. } => ErrorKind::Unauthorized,
            ClientError::NotFound { .. } => ErrorKind::NotFound,
            ClientError::Transient { .. } => ErrorKind::Transient,
            ClientError::Verify { .. } => ErrorKind::Verify,
            ClientError::Registry { .. }
            | ClientError::Protocol { .. }
            | ClientError::Source { .. }
            | ClientError::Http { .. } => ErrorKind::Invalid,
        }
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
    fn delay(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(16);
        self.base_delay.saturating_mul(factor).min(self.max_delay)
    }
}

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    plain_http: bool,
    retry: Retry,
    chunk_size: u64,
    timeout: Option<Duration>,
}

impl ClientBuilder {
    /// Talk plain HTTP to every registry (loopback hosts always use it).
    pub fn plain_http(mut self, yes: bool) -> Self {
        self.plain_http = yes;
        self
    }

    /// The retry policy.
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }

    /// Blobs above this size are pushed in chunks of this size (default 8 MiB); it also bounds
    /// the memory one push holds.
    pub fn chunk_size(mut self, bytes: u64) -> Self {
        self.chunk_size = bytes.max(1);
        self
    }

    /// Timeout for connecting and for each read (default none).
    pub fn timeout(mut self, t: Duration) -> Self {
        self.timeout = Some(t);
        self
    }

    /// Builds the client.
    pub fn build(self) -> Result<Client, ClientError> {
        let mut b =
            reqwest::Client::builder().user_agent(concat!("rdctl/", env!("CARGO_PKG_VERSION")));
        if let Some(t) = self.timeout {
            b = b.connect_timeout(t).read_timeout(t);
        }
        let http = b.build().map_err(|source| ClientError::Http {
            url: String::new(),
            source,
        })?;
        Ok(Client {
            http,
            plain_http: self.plain_http,
            retry: Retry {
                attempts: self.retry.attempts.max(1),
                ..self.retry
            },
            chunk_size: self.chunk_size,
        })
    }
}

/// Whether a push uploaded the blob or found it already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// The registry already had it.
    Skipped,
    /// It was uploaded.
    Uploaded,
}

/// A verified blob stream: reading it to EOF without an error means size and digest matched.
pub type BlobReader = VerifyingReader<Pin<Box<dyn AsyncRead + Send>>>;

/// A Distribution client. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    plain_http: bool,
    retry: Retry,
    chunk_size: u64,
}

fn is_loopback(host: &str) -> bool {
    let h = host.rsplit_once(':').map_or(host, |(h, p)| {
        if p.bytes().all(|b| b.is_ascii_digit()) {
            h
        } else {
            host
        }
    });
    h == "localhost" || h.starts_with("127.") || h == "[::1]"
}

impl Client {
    /// A builder with defaults.
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            plain_http: false,
            retry: Retry::default(),
            chunk_size: 8 << 20,
            timeout: Some(Duration::from_secs(60)),
        }
    }

    fn base(&self, registry: &str) -> String {
        let scheme = if self.plain_http || is_loopback(registry) {
            "http"
        } else {
            "https"
        };
        format!("{scheme}://{registry}")
    }

    fn url(&self, registry: &str, path: &str) -> Result<Url, ClientError> {
        let s = format!("{}{path}", self.base(registry));
        Url::parse(&s).map_err(|e| ClientError::Protocol {
            url: s.clone(),
            reason: format!("not a valid URL: {e}"),
        })
    }

    /// Sends with retries. 401/403 are final; 5xx/429 and transport errors are retried.
    async fn send(
        &self,
        url: &Url,
        build: &(dyn Fn() -> reqwest::RequestBuilder + Sync),
    ) -> Result<reqwest::Response, ClientError> {
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt - 1)).await;
            }
            match build().send().await {
                Ok(resp) => {
                    let st = resp.status();
                    if st == StatusCode::UNAUTHORIZED || st == StatusCode::FORBIDDEN {
                        return Err(ClientError::Unauthorized {
                            url: url.to_string(),
                            status: st.as_u16(),
                        });
                    }
                    if st.is_server_error() || st == StatusCode::TOO_MANY_REQUESTS {
                        last = format!("status {st}");
                        tracing::debug!(%url, attempt, status = %st, "transient answer, retrying");
                        continue;
                    }
                    return Ok(resp);
                }
                Err(e) if e.is_builder() => {
                    return Err(ClientError::Http {
                        url: url.to_string(),
                        source: e,
                    });
                }
                Err(e) => {
                    last = error_chain(&e);
                    tracing::debug!(%url, attempt, error = %last, "request failed, retrying");
                }
            }
        }
        Err(ClientError::Transient {
            url: url.to_string(),
            attempts: self.retry.attempts,
            last,
        })
    }

    /// Turns an unexpected answer into an error (reads a bounded body for the OCI code).
    async fn unexpected(url: &Url, resp: reqwest::Response) -> ClientError {
        let status = resp.status().as_u16();
        let body = read_limited(resp, 64 << 10).await.unwrap_or_default();
        let (code, message) = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| {
                let e = v.get("errors")?.get(0)?;
                Some((
                    e.get("code")?.as_str()?.to_owned(),
                    e.get("message")
                        .and_then(|m| m.as_str())
                        .unwrap_or("")
                        .to_owned(),
                ))
            })
            .unwrap_or_else(|| {
                (
                    String::new(),
                    String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
                )
            });
        if status == 404 {
            return ClientError::NotFound {
                url: url.to_string(),
                code,
            };
        }
        ClientError::Registry {
            url: url.to_string(),
            status,
            code,
            message,
        }
    }

    /// Resolves a reference to its manifest descriptor (HEAD, falling back to GET when the
    /// registry sends no digest header).
    pub async fn resolve(&self, r: &Reference) -> Result<Descriptor, ClientError> {
        let url = self.url(
            r.registry(),
            &format!("/v2/{}/manifests/{}", r.name(), r.manifest_ref()),
        )?;
        let resp = self
            .send(&url, &|| {
                self.http.head(url.clone()).header(ACCEPT, MANIFEST_ACCEPT)
            })
            .await?;
        if resp.status() != StatusCode::OK {
            return Err(Self::unexpected(&url, resp).await);
        }
        let h = resp.headers();
        let media_type = header_str(h, CONTENT_TYPE.as_str())
            .map(|s| s.split(';').next().unwrap_or(s).trim().to_owned());
        let digest = header_str(h, "docker-content-digest").and_then(|d| Digest::parse(d).ok());
        let size = header_str(h, CONTENT_LENGTH.as_str()).and_then(|s| s.parse().ok());
        match (media_type, digest, size) {
            (Some(media_type), Some(digest), Some(size)) => {
                if let Some(want) = r.digest()
                    && want != &digest
                {
                    return Err(ClientError::Protocol {
                        url: url.to_string(),
                        reason: format!("asked for {want}, registry answered {digest}"),
                    });
                }
                Ok(Descriptor {
                    media_type,
                    digest,
                    size,
                })
            }
            _ => self.get_manifest(r).await.map(|(d, _)| d),
        }
    }

    /// Fetches a manifest (at most [`MAX_MANIFEST_BYTES`]) and checks its digest: against the
    /// reference's digest, else against the registry's `Docker-Content-Digest`.
    pub async fn get_manifest(&self, r: &Reference) -> Result<(Descriptor, Bytes), ClientError> {
        let url = self.url(
            r.registry(),
            &format!("/v2/{}/manifests/{}", r.name(), r.manifest_ref()),
        )?;
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt - 1)).await;
            }
            let resp = self
                .send(&url, &|| {
                    self.http.get(url.clone()).header(ACCEPT, MANIFEST_ACCEPT)
                })
                .await?;
            if resp.status() != StatusCode::OK {
                return Err(Self::unexpected(&url, resp).await);
            }
            let media_type = header_str(resp.headers(), CONTENT_TYPE.as_str())
                .map(|s| s.split(';').next().unwrap_or(s).trim().to_owned())
                .unwrap_or_default();
            let header_digest =
                header_str(resp.headers(), "docker-content-digest").map(str::to_owned);
            let body = match read_limited(resp, MAX_MANIFEST_BYTES).await {
                Ok(b) => b,
                Err(ReadError::TooLarge) => {
                    return Err(ClientError::Protocol {
                        url: url.to_string(),
                        reason: format!("manifest is larger than {MAX_MANIFEST_BYTES} bytes"),
                    });
                }
                Err(ReadError::Body(e)) => {
                    last = e;
                    continue;
                }
            };
            let expected = match (r.digest(), header_digest) {
                (Some(d), _) => d.clone(),
                (None, Some(h)) => Digest::parse(&h).map_err(|e| ClientError::Protocol {
                    url: url.to_string(),
                    reason: format!("bad Docker-Content-Digest: {e}"),
                })?,
                (None, None) => Digest::sha256(&body),
            };
            let found = Digest::of(expected.algorithm(), &body);
            if found != expected {
                return Err(ClientError::Verify {
                    url: url.to_string(),
                    source: VerifyError::DigestMismatch { expected, found },
                });
            }
            let desc = Descriptor {
                media_type,
                digest: found,
                size: body.len() as u64,
            };
            return Ok((desc, body));
        }
        Err(ClientError::Transient {
            url: url.to_string(),
            attempts: self.retry.attempts,
            last,
        })
    }

    /// The size of a blob if the repository has it.
    pub async fn blob_exists(
        &self,
        registry: &str,
        name: &Name,
        digest: &Digest,
    ) -> Result<Option<u64>, ClientError> {
        let url = self.url(registry, &format!("/v2/{name}/blobs/{digest}"))?;
        let resp = self.send(&url, &|| self.http.head(url.clone())).await?;
        match resp.status() {
            StatusCode::OK => Ok(
                header_str(resp.headers(), CONTENT_LENGTH.as_str()).and_then(|s| s.parse().ok())
            ),
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(Self::unexpected(&url, resp).await),
        }
    }

    /// Streams a blob, verified against `digest` and `size`. A body cut short is resumed with
    /// a `Range` request from the last byte received (up to the retry budget).
    pub async fn get_blob(
        &self,
        registry: &str,
        name: &Name,
        digest: &Digest,
        size: u64,
    ) -> Result<BlobReader, ClientError> {
        let url = self.url(registry, &format!("/v2/{name}/blobs/{digest}"))?;
        let resp = self.send(&url, &|| self.http.get(url.clone())).await?;
        if resp.status() != StatusCode::OK {
            return Err(Self::unexpected(&url, resp).await);
        }
        let stream = ResumingBody {
            client: self.clone(),
            url,
            offset: 0,
            resumes_left: self.retry.attempts.saturating_sub(1),
        }
        .into_stream(resp.bytes_stream().boxed());
        let reader: Pin<Box<dyn AsyncRead + Send>> =
            Box::pin(tokio_util::io::StreamReader::new(stream));
        Ok(VerifyingReader::new(reader, digest.clone(), size))
    }

    /// Streams a blob's bytes from byte `offset` on (a `Range: bytes=<offset>-` request when
    /// `offset > 0`), for callers that resume a partial download they keep on disk. Returns
    /// where the stream really starts: `offset` when the registry answered 206 for that range,
    /// 0 when it ignored the range and sent the whole blob (200). The bytes are NOT verified:
    /// the caller hashes what it already has plus these and checks size and digest. A body
    /// cut short is resumed like [`Client::get_blob`]'s.
    pub async fn get_blob_from(
        &self,
        registry: &str,
        name: &Name,
        digest: &Digest,
        offset: u64,
    ) -> Result<(u64, Pin<Box<dyn AsyncRead + Send>>), ClientError> {
        let url = self.url(registry, &format!("/v2/{name}/blobs/{digest}"))?;
        let range = format!("bytes={offset}-");
        let resp = self
            .send(&url, &|| {
                let req = self.http.get(url.clone());
                if offset > 0 {
                    req.header(RANGE, range.clone())
                } else {
                    req
                }
            })
            .await?;
        let start = match resp.status() {
            StatusCode::OK => 0,
            StatusCode::PARTIAL_CONTENT
                if offset > 0
                    && header_str(resp.headers(), CONTENT_RANGE.as_str())
                        .is_some_and(|v| v.starts_with(&format!("bytes {offset}-"))) =>
            {
                offset
            }
            _ => return Err(Self::unexpected(&url, resp).await),
        };
        let stream = ResumingBody {
            client: self.clone(),
            url,
            offset: start,
            resumes_left: self.retry.attempts.saturating_sub(1),
        }
        .into_stream(resp.bytes_stream().boxed());
        Ok((start, Box::pin(tokio_util::io::StreamReader::new(stream))))
    }

    /// Pushes a blob of `size` bytes read from `source`, unless the repository already has it.
    /// Blobs up to the chunk size go in one PUT; larger ones in chunked PATCHes, each retried
    /// from the offset the registry reports.
    pub async fn push_blob<R: AsyncRead + Unpin + Send>(
        &self,
        registry: &str,
        name: &Name,
        digest: &Digest,
        size: u64,
        mut source: R,
    ) -> Result<PushOutcome, ClientError> {
        if self.blob_exists(registry, name, digest).await?.is_some() {
            return Ok(PushOutcome::Skipped);
        }
        let src_err = |source: io::Error| ClientError::Source {
            digest: digest.clone(),
            source,
        };
        let mut digester = digest.algorithm().digester();
        let mut location = self.start_upload(registry, name).await?;
        let mut sent: u64 = 0;
        let mut buf = BytesMut::new();
        loop {
            buf.clear();
            let want = self.chunk_size.min(size - sent);
            buf.reserve(usize::try_from(want).unwrap_or(usize::MAX));
            let mut limited = (&mut source).take(want);
            let mut n: u64 = 0;
            while n < want {
                let r = limited.read_buf(&mut buf).await.map_err(src_err)?;
                if r == 0 {
                    break;
                }
                n += r as u64;
            }
            if n < want {
                return Err(src_err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the source ended after {} of {size} bytes", sent + n),
                )));
            }
            digester.update(&buf);
            let chunk = buf.split().freeze();
            let last = sent + n == size;
            if last && sent == 0 {
                // Small blob: one PUT carries everything.
                self.finish_upload(registry, name, &location, digest, chunk)
                    .await?;
                break;
            }
            if !chunk.is_empty() {
                location = self.patch_chunk(&location, sent, chunk).await?;
                sent += n;
            }
            if last || n == 0 {
                self.finish_upload(registry, name, &location, digest, Bytes::new())
                    .await?;
                break;
            }
        }
        // The source must end where promised and hash to the digest.
        let mut probe = [0u8; 1];
        if source.read(&mut probe).await.map_err(src_err)? != 0 {
            return Err(src_err(io::Error::other(format!(
                "the source is longer than {size} bytes"
            ))));
        }
        let found = digester.finish();
        if &found != digest {
            return Err(ClientError::Verify {
                url: format!("{}/v2/{name}/blobs/{digest}", self.base(registry)),
                source: VerifyError::DigestMismatch {
                    expected: digest.clone(),
                    found,
                },
            });
        }
        Ok(PushOutcome::Uploaded)
    }

    async fn start_upload(&self, registry: &str, name: &Name) -> Result<Url, ClientError> {
        let url = self.url(registry, &format!("/v2/{name}/blobs/uploads/"))?;
        let resp = self
            .send(&url, &|| {
                self.http.post(url.clone()).header(CONTENT_LENGTH, 0)
            })
            .await?;
        if resp.status() != StatusCode::ACCEPTED {
            return Err(Self::unexpected(&url, resp).await);
        }
        location(&url, &resp)
    }

    /// PATCHes one chunk at `start`; on a transient failure asks the registry where the upload
    /// stands and resends what it lacks.
    async fn patch_chunk(&self, loc: &Url, start: u64, chunk: Bytes) -> Result<Url, ClientError> {
        let end = start + chunk.len() as u64 - 1;
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt - 1)).await;
                // Where does the upload stand?
                let st = self.http.get(loc.clone()).send().await;
                if let Ok(resp) = st
                    && resp.status() == StatusCode::NO_CONTENT
                    && let Some(have) =
                        header_str(resp.headers(), RANGE.as_str()).and_then(range_end)
                    && have > end
                {
                    return location(loc, &resp);
                }
            }
            let req = self
                .http
                .request(Method::PATCH, loc.clone())
                .header(CONTENT_TYPE, "application/octet-stream")
                .header(CONTENT_RANGE, format!("{start}-{end}"))
                .header(CONTENT_LENGTH, chunk.len())
                .body(chunk.clone());
            match req.send().await {
                Ok(resp) if resp.status() == StatusCode::ACCEPTED => return location(loc, &resp),
                Ok(resp)
                    if resp.status() == StatusCode::UNAUTHORIZED
                        || resp.status() == StatusCode::FORBIDDEN =>
                {
                    return Err(ClientError::Unauthorized {
                        url: loc.to_string(),
                        status: resp.status().as_u16(),
                    });
                }
                Ok(resp)
                    if resp.status().is_server_error()
                        || resp.status() == StatusCode::TOO_MANY_REQUESTS =>
                {
                    last = format!("status {}", resp.status());
                }
                Ok(resp) => return Err(Self::unexpected(loc, resp).await),
                Err(e) => last = error_chain(&e),
            }
        }
        Err(ClientError::Transient {
            url: loc.to_string(),
            attempts: self.retry.attempts,
            last,
        })
    }

    /// Closes an upload with its digest (and maybe the whole body).
    async fn finish_upload(
        &self,
        registry: &str,
        name: &Name,
        loc: &Url,
        digest: &Digest,
        body: Bytes,
    ) -> Result<(), ClientError> {
        let mut url = loc.clone();
        url.query_pairs_mut().append_pair("digest", digest.as_str());
        let result = self
            .send(&url, &|| {
                self.http
                    .put(url.clone())
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .header(CONTENT_LENGTH, body.len())
                    .body(body.clone())
            })
            .await;
        match result {
            Ok(resp) if resp.status() == StatusCode::CREATED => Ok(()),
            // A retried PUT may find its upload already committed by the first attempt.
            Ok(resp) if resp.status() == StatusCode::NOT_FOUND => {
                if self.blob_exists(registry, name, digest).await?.is_some() {
                    Ok(())
                } else {
                    Err(Self::unexpected(&url, resp).await)
                }
            }
            Ok(resp) => Err(Self::unexpected(&url, resp).await),
            Err(e) => Err(e),
        }
    }

    /// Pushes a manifest under the reference's tag or digest; returns its digest.
    pub async fn push_manifest(
        &self,
        r: &Reference,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<Digest, ClientError> {
        let digest = match r.digest() {
            Some(d) => Digest::of(d.algorithm(), &bytes),
            None => Digest::sha256(&bytes),
        };
        let url = self.url(
            r.registry(),
            &format!("/v2/{}/manifests/{}", r.name(), r.manifest_ref()),
        )?;
        let resp = self
            .send(&url, &|| {
                self.http
                    .put(url.clone())
                    .header(CONTENT_TYPE, media_type)
                    .body(bytes.clone())
            })
            .await?;
        if resp.status() != StatusCode::CREATED {
            return Err(Self::unexpected(&url, resp).await);
        }
        if let Some(h) = header_str(resp.headers(), "docker-content-digest")
            && h != digest.as_str()
        {
            return Err(ClientError::Protocol {
                url: url.to_string(),
                reason: format!("registry stored {h}, the manifest is {digest}"),
            });
        }
        Ok(digest)
    }
}

fn header_str<'a>(h: &'a reqwest::header::HeaderMap, name: &str) -> Option<&'a str> {
    h.get(name).and_then(|v| v.to_str().ok())
}

/// The last byte of a `Range: 0-<last>` upload header.
fn range_end(v: &str) -> Option<u64> {
    let (_, end) = v.split_once('-')?;
    end.trim().parse().ok()
}

fn location(base: &Url, resp: &reqwest::Response) -> Result<Url, ClientError> {
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

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut src = e.source();
    while let Some(x) = src {
        s.push_str(": ");
        s.push_str(&x.to_string());
        src = x.source();
    }
    s
}

enum ReadError {
    TooLarge,
    Body(String),
}

async fn read_limited(resp: reqwest::Response, limit: u64) -> Result<Bytes, ReadError> {
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

/// A blob body that resumes with `Range` after a transport error.
struct ResumingBody {
    client: Client,
    url: Url,
    offset: u64,
    resumes_left: u32,
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

impl ResumingBody {
    fn into_stream(self, first: ByteStream) -> impl Stream<Item = io::Result<Bytes>> + Send {
        futures_util::stream::unfold(
            (self, Some(first), false),
            |(mut st, mut body, done)| async move {
                if done {
                    return None;
                }
                loop {
                    if let Some(b) = body.as_mut() {
                        match b.next().await {
                            Some(Ok(bytes)) => {
                                st.offset += bytes.len() as u64;
                                return Some((Ok(bytes), (st, body, false)));
                            }
                            None => return None,
                            Some(Err(e)) => {
                                if st.resumes_left == 0 {
                                    let err = io::Error::other(format!(
                                        "{}: body cut at byte {}: {}",
                                        st.url,
                                        st.offset,
                                        error_chain(&e)
                                    ));
                                    return Some((Err(err), (st, None, true)));
                                }
                                tracing::debug!(url = %st.url, offset = st.offset, "blob body cut, resuming");
                                st.resumes_left -= 1;
                            }
                        }
                    }
                    let attempt = st.client.retry.attempts - st.resumes_left;
                    tokio::time::sleep(st.client.retry.delay(attempt)).await;
                    let range = format!("bytes={}-", st.offset);
                    let url = st.url.clone();
                    let http = st.client.http.clone();
                    let resp = st
                        .client
                        .send(&url, &|| http.get(url.clone()).header(RANGE, range.clone()))
                        .await;
                    match resp {
                        Ok(r)
                            if r.status() == StatusCode::PARTIAL_CONTENT
                                && header_str(r.headers(), CONTENT_RANGE.as_str()).is_some_and(
                                    |v| v.starts_with(&format!("bytes {}-", st.offset)),
                                ) =>
                        {
                            body = Some(r.bytes_stream().boxed());
                        }
                        Ok(r) => {
                            let err = io::Error::other(format!(
                                "{}: resuming at byte {} got status {} without the range",
                                st.url,
                                st.offset,
                                r.status()
                            ));
                            return Some((Err(err), (st, None, true)));
                        }
                        Err(e) => {
                            let err = io::Error::other(e.to_string());
                            return Some((Err(err), (st, None, true)));
                        }
                    }
                }
            },
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let r = Reference::parse("127.0.0.1:5000/a/b:v1").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.name().as_str(), "a/b");
        assert_eq!(r.tag().unwrap().as_str(), "v1");
        assert_eq!(r.to_string(), "127.0.0.1:5000/a/b:v1");
        let d = Digest::sha256(b"");
        let r = Reference::parse(&format!("reg.example/x@{d}")).unwrap();
        assert_eq!(r.digest(), Some(&d));
        assert_eq!(r.manifest_ref(), d.to_string());
        assert_eq!(
            Reference::parse("reg.example/x").unwrap().manifest_ref(),
            "latest"
        );
        for bad in [
            "noslash",
            "/x",
            "reg/UPPER",
            "reg/x:-bad",
            "reg/x@sha256:abc",
            "re g/x",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
        assert!(
            is_loopback("127.0.0.1:5000")
                && is_loopback("localhost")
                && !is_loopback("reg.example:443")
        );
    }

    #[test]
    fn backoff_doubles_up_to_the_cap() {
        let r = Retry {
            attempts: 5,
            base_delay: Duration::from_millis(100),
            max_delay: Duration::from_millis(350),
        };
        assert_eq!(r.delay(1), Duration::from_millis(100));
        assert_eq!(r.delay(2), Duration::from_millis(200));
        assert_eq!(r.delay(3), Duration::from_millis(350));
    }
}
