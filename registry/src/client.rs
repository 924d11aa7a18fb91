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
//! Authentication ([`auth`](self) module docs): credentials come from a [`Keychain`] (docker
//! `config.json`, containers `auth.json`, credential helpers); a 401's `WWW-Authenticate`
//! challenge is answered once with Basic credentials or a bearer token from the realm, tokens
//! are cached per scope until they expire, and credentials never follow a redirect to another
//! host.
//!
//! Transport: rustls with the system roots, plus CA files given to the builder and docker's
//! `certs.d` layout (`<dir>/<host>/*.crt` CAs, `client.cert`/`client.key` for mutual TLS).
//! `https` is used unless plain HTTP is asked for; loopback hosts default to plain HTTP unless
//! TLS is configured for them (a CA file, a `certs.d` entry, or `insecure`).

mod auth;
pub mod challenge;
pub mod credentials;
pub mod login;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use reqwest::header::{
    ACCEPT, AUTHORIZATION, CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, HeaderValue, LOCATION,
    RANGE,
};
use reqwest::{Method, StatusCode, Url};
use tokio::io::{AsyncRead, AsyncReadExt};
use validator::{Digest, VerifyError, VerifyingReader};

use crate::names::{Name, Tag};

pub use credentials::{AuthFile, Credential, CredentialError, Env as AuthEnv, Keychain};
pub use login::{LoginError, LoginOutcome, Stored};

/// Where docker and the containers tools keep per-host TLS material; pass them to
/// [`ClientBuilder::cert_dirs`] to read them as those tools do.
pub const DEFAULT_CERT_DIRS: &[&str] = &["/etc/containers/certs.d", "/etc/docker/certs.d"];

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
    /// 401/403 (also from the token endpoint).
    #[error("registry {registry}: {status} {}: {detail} ({url})", if *status == 403 { "Forbidden" } else { "Unauthorized" })]
    Unauthorized {
        /// The URL.
        url: String,
        /// The registry host.
        registry: String,
        /// 401 or 403.
        status: u16,
        /// What was sent and what the registry said (never the secret).
        detail: String,
    },
    /// The credential store could not be read.
    #[error("registry {registry}: cannot read credentials")]
    Credentials {
        /// The registry host.
        registry: String,
        /// The cause (boxed: it is large and rare).
        #[source]
        source: Box<CredentialError>,
    },
    /// A CA file or client certificate could not be loaded.
    #[error("{}: {reason}", path.display())]
    Tls {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
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
            ClientError::Unauthorized { .. } | ClientError::Credentials { .. } => {
                ErrorKind::Unauthorized
            }
            ClientError::NotFound { .. } => ErrorKind::NotFound,
            ClientError::Transient { .. } => ErrorKind::Transient,
            ClientError::Verify { .. } => ErrorKind::Verify,
            ClientError::Registry { .. }
            | ClientError::Protocol { .. }
            | ClientError::Source { .. }
            | ClientError::Tls { .. }
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

/// How to reach registries: credentials and TLS, the settings `rdctl`'s client flags and the
/// worker's `worker.toml` share. [`ClientOptions::builder`] turns them into a [`ClientBuilder`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientOptions {
    /// Read credentials from this file first (`--auth-file`); the environment's files follow
    /// ([`Keychain::from_env`]).
    pub auth_file: Option<PathBuf>,
    /// Extra CA certificates (PEM files) trusted for every registry.
    pub ca_files: Vec<PathBuf>,
    /// `certs.d`-style directories (`<dir>/<host:port>/*.crt`, `client.cert`/`client.key`);
    /// empty means [`DEFAULT_CERT_DIRS`].
    pub cert_dirs: Vec<PathBuf>,
    /// Use TLS without verifying certificates.
    pub insecure: bool,
    /// Plain HTTP to every registry.
    pub plain_http: bool,
}

impl ClientOptions {
    /// A builder with these settings and a keychain over `env`'s credential files.
    pub fn builder(&self, env: &AuthEnv) -> ClientBuilder {
        let mut b = Client::builder()
            .plain_http(self.plain_http)
            .insecure(self.insecure)
            .keychain(Keychain::from_env(self.auth_file.as_deref(), env));
        for f in &self.ca_files {
            b = b.ca_file(f);
        }
        if self.cert_dirs.is_empty() {
            b.cert_dirs(DEFAULT_CERT_DIRS.iter().map(PathBuf::from))
        } else {
            b.cert_dirs(self.cert_dirs.iter().cloned())
        }
    }

    /// The file `login` writes and `logout` edits ([`Keychain::login_file`]).
    pub fn login_file(&self, env: &AuthEnv) -> Option<PathBuf> {
        Keychain::login_file(self.auth_file.as_deref(), env)
    }
}

/// Builds a [`Client`].
#[derive(Debug, Clone)]
pub struct ClientBuilder {
    plain_http: bool,
    insecure: bool,
    retry: Retry,
    chunk_size: u64,
    timeout: Option<Duration>,
    keychain: Keychain,
    ca_files: Vec<PathBuf>,
    cert_dirs: Vec<PathBuf>,
}

impl Default for ClientBuilder {
    fn default() -> Self {
        Client::builder()
    }
}

impl ClientBuilder {
    /// Talk plain HTTP to every registry.
    pub fn plain_http(mut self, yes: bool) -> Self {
        self.plain_http = yes;
        self
    }

    /// Use TLS without verifying the registry's certificate (skopeo's `--tls-verify=false`,
    /// without its fallback to plain HTTP). Only when the operator asks for it.
    pub fn insecure(mut self, yes: bool) -> Self {
        self.insecure = yes;
        self
    }

    /// Where credentials come from (default: none, anonymous access).
    pub fn keychain(mut self, keychain: Keychain) -> Self {
        self.keychain = keychain;
        self
    }

    /// Trust this PEM file's CA certificates for every registry (in addition to the system's).
    pub fn ca_file(mut self, path: impl Into<PathBuf>) -> Self {
        self.ca_files.push(path.into());
        self
    }

    /// Read per-host TLS material from these `certs.d`-style directories: `<dir>/<host>/*.crt`
    /// are CAs for `<host>` (`host:port` as in the reference), `*.cert` with the matching
    /// `*.key` a client certificate. Directories that do not exist are skipped.
    pub fn cert_dirs(mut self, dirs: impl IntoIterator<Item = impl Into<PathBuf>>) -> Self {
        self.cert_dirs.extend(dirs.into_iter().map(Into::into));
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

    fn http(
        &self,
        cas: &[reqwest::Certificate],
        identity: Option<reqwest::Identity>,
    ) -> Result<reqwest::Client, ClientError> {
        let mut b = reqwest::Client::builder()
            .user_agent(concat!("rdctl/", env!("CARGO_PKG_VERSION")))
            .use_rustls_tls();
        if let Some(t) = self.timeout {
            b = b.connect_timeout(t).read_timeout(t);
        }
        for c in cas {
            b = b.add_root_certificate(c.clone());
        }
        if let Some(id) = identity {
            b = b.identity(id);
        }
        if self.insecure {
            b = b.danger_accept_invalid_certs(true);
        }
        b.build().map_err(|source| ClientError::Http {
            url: String::new(),
            source,
        })
    }

    /// Builds the client (reads every CA file and `certs.d` entry now, so a bad one fails
    /// here, naming the file).
    pub fn build(self) -> Result<Client, ClientError> {
        let mut global = Vec::new();
        for f in &self.ca_files {
            global.extend(read_cas(f)?);
        }
        let http = self.http(&global, None)?;
        let mut per_host = HashMap::new();
        for dir in &self.cert_dirs {
            let Ok(entries) = std::fs::read_dir(dir) else {
                continue;
            };
            for e in entries.flatten() {
                let host = e.file_name().to_string_lossy().into_owned();
                if per_host.contains_key(&host) || !e.path().is_dir() {
                    continue;
                }
                let (cas, identity) = read_host_dir(&e.path())?;
                let mut all = global.clone();
                all.extend(cas);
                per_host.insert(host, self.http(&all, identity)?);
            }
        }
        Ok(Client {
            http,
            per_host: Arc::new(per_host),
            tls_configured: !global.is_empty() || self.insecure,
            auth: Arc::new(auth::AuthState::new(self.keychain)),
            plain_http: self.plain_http,
            retry: Retry {
                attempts: self.retry.attempts.max(1),
                ..self.retry
            },
            chunk_size: self.chunk_size,
        })
    }
}

fn tls_err(path: &Path, reason: String) -> ClientError {
    ClientError::Tls {
        path: path.to_owned(),
        reason,
    }
}

/// Every certificate in a PEM file.
fn read_cas(path: &Path) -> Result<Vec<reqwest::Certificate>, ClientError> {
    let pem = std::fs::read(path).map_err(|e| tls_err(path, format!("cannot read: {e}")))?;
    let certs = reqwest::Certificate::from_pem_bundle(&pem)
        .map_err(|e| tls_err(path, format!("not PEM certificates: {e}")))?;
    if certs.is_empty() {
        return Err(tls_err(path, "no PEM certificate in it".to_owned()));
    }
    Ok(certs)
}

/// A `certs.d/<host>` directory: `*.crt` CAs; `X.cert` with `X.key` a client identity.
fn read_host_dir(
    dir: &Path,
) -> Result<(Vec<reqwest::Certificate>, Option<reqwest::Identity>), ClientError> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(|e| tls_err(dir, format!("cannot list: {e}")))?
        .flatten()
        .map(|e| e.path())
        .collect();
    files.sort();
    let mut cas = Vec::new();
    let mut identity = None;
    for f in &files {
        match f.extension().and_then(|e| e.to_str()) {
            Some("crt") => cas.extend(read_cas(f)?),
            Some("cert") => {
                let key = f.with_extension("key");
                let mut pem =
                    std::fs::read(f).map_err(|e| tls_err(f, format!("cannot read: {e}")))?;
                let k = std::fs::read(&key).map_err(|e| {
                    tls_err(
                        &key,
                        format!("cannot read the key for the client certificate: {e}"),
                    )
                })?;
                pem.push(b'\n');
                pem.extend_from_slice(&k);
                identity = Some(
                    reqwest::Identity::from_pem(&pem)
                        .map_err(|e| tls_err(f, format!("not a PEM certificate and key: {e}")))?,
                );
            }
            _ => {}
        }
    }
    Ok((cas, identity))
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

/// A Distribution client. Cheap to clone; clones share cached challenges and tokens.
#[derive(Debug, Clone)]
pub struct Client {
    http: reqwest::Client,
    /// Hosts with their own TLS material (`certs.d`).
    per_host: Arc<HashMap<String, reqwest::Client>>,
    /// A CA file or `insecure` was given: loopback hosts use TLS too.
    tls_configured: bool,
    auth: Arc<auth::AuthState>,
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

/// `host[:port]` of a URL as a reference spells it (the port only when it is explicit).
fn authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or("");
    match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    }
}

/// What a request needs access to: the registry host, and the repository with `pull` or
/// `pull,push` (none for `/v2/`).
#[derive(Debug, Clone, Copy)]
struct Scope<'a> {
    host: &'a str,
    repo: Option<(&'a Name, bool)>,
}

impl<'a> Scope<'a> {
    fn pull(host: &'a str, name: &'a Name) -> Self {
        Scope {
            host,
            repo: Some((name, false)),
        }
    }

    fn push(host: &'a str, name: &'a Name) -> Self {
        Scope {
            host,
            repo: Some((name, true)),
        }
    }

    /// The token scope, `repository:<name>:pull[,push]`, or empty.
    fn token_scope(&self) -> String {
        match self.repo {
            Some((n, false)) => format!("repository:{n}:pull"),
            Some((n, true)) => format!("repository:{n}:pull,push"),
            None => String::new(),
        }
    }
}

type Attempt = Result<reqwest::Response, reqwest::Error>;

impl Client {
    /// A builder with defaults.
    pub fn builder() -> ClientBuilder {
        ClientBuilder {
            plain_http: false,
            insecure: false,
            retry: Retry::default(),
            chunk_size: 8 << 20,
            timeout: Some(Duration::from_secs(60)),
            keychain: Keychain::empty(),
            ca_files: Vec::new(),
            cert_dirs: Vec::new(),
        }
    }

    fn base(&self, registry: &str) -> String {
        let tls = !self.plain_http
            && (self.tls_configured
                || self.per_host.contains_key(registry)
                || !is_loopback(registry));
        let scheme = if tls { "https" } else { "http" };
        format!("{scheme}://{registry}")
    }

    /// The HTTP client for a URL's host (its own when `certs.d` has an entry for it).
    fn http_for(&self, url: &Url) -> &reqwest::Client {
        self.per_host.get(&authority(url)).unwrap_or(&self.http)
    }

    fn url(&self, registry: &str, path: &str) -> Result<Url, ClientError> {
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

    /// [`Client::check_login`] on a runtime of its own, for callers without one.
    pub fn check_login_blocking(&self, registry: &str) -> Result<(), ClientError> {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ClientError::Protocol {
                url: registry.to_owned(),
                reason: format!("cannot start a runtime: {e}"),
            })?;
        rt.block_on(self.check_login(registry))
    }

    /// The `Authorization` header for a request in `scope` to `url`, from what the host asked
    /// for before: nothing for a host that never challenged, or for another host.
    async fn authorization(
        &self,
        scope: &Scope<'_>,
        url: &Url,
    ) -> Result<Option<HeaderValue>, ClientError> {
        if authority(url) != scope.host {
            return Ok(None);
        }
        match self.auth.challenge(scope.host) {
            None => Ok(None),
            Some(challenge::Auth::Basic) => Ok(match self.auth.credential(scope.host)? {
                Some((Credential::Basic { username, password }, _)) => {
                    Some(auth::basic_header(&username, &password))
                }
                _ => None,
            }),
            Some(challenge::Auth::Bearer(b)) => {
                let key = scope.token_scope();
                if let Some(t) = self.auth.cached_token(scope.host, &key) {
                    return Ok(auth::bearer_header(&t));
                }
                let scopes: Vec<String> =
                    (!key.is_empty()).then(|| key.clone()).into_iter().collect();
                let t = self.token(scope, &key, &b, &scopes).await?;
                Ok(auth::bearer_header(&t))
            }
        }
    }

    async fn token(
        &self,
        scope: &Scope<'_>,
        key: &str,
        b: &challenge::BearerChallenge,
        scopes: &[String],
    ) -> Result<String, ClientError> {
        let cred = self.auth.credential(scope.host)?;
        let http = self.http_for(&b.realm);
        self.auth
            .fetch_token(
                http,
                scope.host,
                key,
                b,
                scopes,
                cred.as_ref().map(|(c, _)| c),
            )
            .await
            .map_err(|e| match e {
                auth::TokenError::Refused {
                    realm,
                    status,
                    body,
                } => ClientError::Unauthorized {
                    url: realm.to_string(),
                    registry: scope.host.to_owned(),
                    status,
                    detail: format!(
                        "the token endpoint refused {}{}",
                        who(cred.as_ref()),
                        if body.trim().is_empty() {
                            String::new()
                        } else {
                            format!(": {}", body.trim())
                        }
                    ),
                },
                auth::TokenError::Other { realm, reason } => ClientError::Protocol {
                    url: realm.to_string(),
                    reason: format!("token endpoint for {}: {reason}", scope.host),
                },
            })
    }

    /// Answers a 401's challenge: true when the request should be sent again (new
    /// credentials or a fresh token to offer), false when there is nothing new to try.
    async fn answer_challenge(
        &self,
        scope: &Scope<'_>,
        resp: &reqwest::Response,
        sent: bool,
    ) -> Result<bool, ClientError> {
        let learned = match self.auth.record(scope.host, resp.headers()) {
            Ok(a) => a,
            Err(e) => {
                return Err(ClientError::Protocol {
                    url: resp.url().to_string(),
                    reason: e.to_string(),
                });
            }
        };
        match learned {
            None => Ok(false),
            // Basic credentials already sent were refused; unsent ones are worth a try.
            Some(challenge::Auth::Basic) => Ok(!sent
                && matches!(
                    self.auth.credential(scope.host)?,
                    Some((Credential::Basic { .. }, _))
                )),
            Some(challenge::Auth::Bearer(b)) => {
                let key = scope.token_scope();
                self.auth.forget_token(scope.host, &key);
                let mut scopes = b.scopes.clone();
                if !key.is_empty() && !scopes.contains(&key) {
                    scopes.push(key.clone());
                }
                self.token(scope, &key, &b, &scopes).await?;
                Ok(true)
            }
        }
    }

    /// Why a 401/403 is final, for the error message.
    async fn denied(&self, scope: &Scope<'_>, url: &Url, resp: reqwest::Response) -> ClientError {
        let status = resp.status().as_u16();
        let landed = resp.url().clone();
        if authority(&landed) != scope.host {
            // A redirect target (a CDN, presigned storage) refused: its challenge is never
            // answered with the registry's credentials.
            return ClientError::Unauthorized {
                url: landed.to_string(),
                registry: scope.host.to_owned(),
                status,
                detail: format!(
                    "the redirect target {} refused the request (registry credentials are never sent to another host)",
                    authority(&landed)
                ),
            };
        }
        let challenge_error = resp
            .headers()
            .get(reqwest::header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| challenge::parse(v).ok())
            .and_then(|cs| {
                cs.into_iter()
                    .find_map(|c| c.param("error").map(str::to_owned))
            });
        let (code, message) = match Self::unexpected(url, resp).await {
            ClientError::Registry { code, message, .. } => (code, message),
            _ => (String::new(), String::new()),
        };
        let cred = self.auth.credential(scope.host).ok().flatten();
        let mut detail = match (&cred, status) {
            (None, 401) => format!(
                "authentication required and no credentials for {} (log in first)",
                scope.host
            ),
            (_, 401) => format!("{} refused", who(cred.as_ref())),
            _ => format!("{} may not do this", who(cred.as_ref())),
        };
        if let Some((n, push)) = scope.repo {
            detail.push_str(&format!(
                " ({} {n})",
                if push { "push to" } else { "pull from" }
            ));
        }
        if !code.is_empty() {
            detail.push_str(&format!("; registry says {code}: {message}"));
        }
        if let Some(e) = challenge_error {
            detail.push_str(&format!("; challenge error {e}"));
        }
        ClientError::Unauthorized {
            url: url.to_string(),
            registry: scope.host.to_owned(),
            status,
            detail,
        }
    }

    /// One request with authentication: adds `Authorization`, answers one 401 challenge and
    /// resends. `Ok(Err(_))` is a transport error (retryable), `Err(_)` is final.
    async fn attempt(
        &self,
        scope: &Scope<'_>,
        url: &Url,
        build: &(dyn Fn() -> reqwest::RequestBuilder + Sync),
    ) -> Result<Attempt, ClientError> {
        let mut answered = false;
        loop {
            let header = self.authorization(scope, url).await?;
            let sent = header.is_some();
            let mut rb = build();
            if let Some(h) = header {
                rb = rb.header(AUTHORIZATION, h);
            }
            let resp = match rb.send().await {
                Ok(r) => r,
                Err(e) => return Ok(Err(e)),
            };
            let st = resp.status();
            if st == StatusCode::UNAUTHORIZED
                && !answered
                && authority(resp.url()) == scope.host
                && self.answer_challenge(scope, &resp, sent).await?
            {
                answered = true;
                continue;
            }
            if st == StatusCode::UNAUTHORIZED || st == StatusCode::FORBIDDEN {
                return Err(self.denied(scope, url, resp).await);
            }
            return Ok(Ok(resp));
        }
    }

    /// Sends with retries. 401/403 are final (after answering one challenge); 5xx/429 and
    /// transport errors are retried.
    async fn send(
        &self,
        scope: &Scope<'_>,
        url: &Url,
        build: &(dyn Fn() -> reqwest::RequestBuilder + Sync),
    ) -> Result<reqwest::Response, ClientError> {
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt - 1)).await;
            }
            match self.attempt(scope, url, build).await? {
                Ok(resp) => {
                    let st = resp.status();
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
        let scope = Scope::pull(r.registry(), r.name());
        let resp = self
            .send(&scope, &url, &|| {
                self.http_for(&url)
                    .head(url.clone())
                    .header(ACCEPT, MANIFEST_ACCEPT)
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
        let scope = Scope::pull(r.registry(), r.name());
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt - 1)).await;
            }
            let resp = self
                .send(&scope, &url, &|| {
                    self.http_for(&url)
                        .get(url.clone())
                        .header(ACCEPT, MANIFEST_ACCEPT)
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
        self.blob_exists_in(&Scope::pull(registry, name), digest)
            .await
    }

    async fn blob_exists_in(
        &self,
        scope: &Scope<'_>,
        digest: &Digest,
    ) -> Result<Option<u64>, ClientError> {
        let name = scope.repo.expect("a blob scope names its repository").0;
        let url = self.url(scope.host, &format!("/v2/{name}/blobs/{digest}"))?;
        let resp = self
            .send(scope, &url, &|| self.http_for(&url).head(url.clone()))
            .await?;
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
        let scope = Scope::pull(registry, name);
        let resp = self
            .send(&scope, &url, &|| self.http_for(&url).get(url.clone()))
            .await?;
        if resp.status() != StatusCode::OK {
            return Err(Self::unexpected(&url, resp).await);
        }
        let stream = ResumingBody {
            client: self.clone(),
            registry: registry.to_owned(),
            name: name.clone(),
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
            .send(&Scope::pull(registry, name), &url, &|| {
                let req = self.http_for(&url).get(url.clone());
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
            registry: registry.to_owned(),
            name: name.clone(),
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
        if self
            .blob_exists_in(&Scope::push(registry, name), digest)
            .await?
            .is_some()
        {
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
                location = self
                    .patch_chunk(registry, name, &location, sent, chunk)
                    .await?;
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
            .send(&Scope::push(registry, name), &url, &|| {
                self.http_for(&url)
                    .post(url.clone())
                    .header(CONTENT_LENGTH, 0)
            })
            .await?;
        if resp.status() != StatusCode::ACCEPTED {
            return Err(Self::unexpected(&url, resp).await);
        }
        location(&url, &resp)
    }

    /// PATCHes one chunk at `start`; on a transient failure asks the registry where the upload
    /// stands and resends what it lacks.
    async fn patch_chunk(
        &self,
        registry: &str,
        name: &Name,
        loc: &Url,
        start: u64,
        chunk: Bytes,
    ) -> Result<Url, ClientError> {
        let scope = Scope::push(registry, name);
        let end = start + chunk.len() as u64 - 1;
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt - 1)).await;
                // Where does the upload stand?
                let st = self
                    .attempt(&scope, loc, &|| self.http_for(loc).get(loc.clone()))
                    .await?;
                if let Ok(resp) = st
                    && resp.status() == StatusCode::NO_CONTENT
                    && let Some(have) =
                        header_str(resp.headers(), RANGE.as_str()).and_then(range_end)
                    && have > end
                {
                    return location(loc, &resp);
                }
            }
            let req = || {
                self.http_for(loc)
                    .request(Method::PATCH, loc.clone())
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .header(CONTENT_RANGE, format!("{start}-{end}"))
                    .header(CONTENT_LENGTH, chunk.len())
                    .body(chunk.clone())
            };
            match self.attempt(&scope, loc, &req).await? {
                Ok(resp) if resp.status() == StatusCode::ACCEPTED => return location(loc, &resp),
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
        let scope = Scope::push(registry, name);
        let result = self
            .send(&scope, &url, &|| {
                self.http_for(&url)
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
                if self.blob_exists_in(&scope, digest).await?.is_some() {
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
            .send(&Scope::push(r.registry(), r.name()), &url, &|| {
                self.http_for(&url)
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

/// "user alice (from /path)" or "anonymous access", for messages.
fn who(cred: Option<&(Credential, credentials::Source)>) -> String {
    match cred {
        Some((c, src)) => format!("user {:?} (credentials from {src})", c.username()),
        None => "anonymous access".to_owned(),
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
    registry: String,
    name: Name,
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
                    let http = st.client.http_for(&url).clone();
                    let scope = Scope::pull(&st.registry, &st.name);
                    let resp = st
                        .client
                        .send(&scope, &url, &|| {
                            http.get(url.clone()).header(RANGE, range.clone())
                        })
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
