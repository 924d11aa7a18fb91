//! HTTP depot client (pkg's transport, for the read operations).

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{self, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use flate2::read::ZlibDecoder;

use super::tls::{TlsFileError, TlsProblem, TlsSettings, classify, describe};
use crate::action::{Action, ActionKind};
use crate::cache::{CacheError, PayloadCache};
use crate::catalog::{Catalog, CatalogAttrs, CatalogError, CatalogPart};
use crate::fmri::{Fmri, quote};
use crate::manifest::{Manifest, ManifestError};
use crate::payload::{Check, HashAlg, PayloadHashes, hash_hex};
use crate::repo::{MAX_METADATA_BYTES, PackageRef, PackageRepository};

/// Errors from talking to a depot. Each names the URL or package involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DepotError {
    /// The server answered 404: the resource, or this operation version, does not exist.
    #[error("{url}: not found")]
    NotFound {
        /// The URL.
        url: String,
    },
    /// The depot does not serve the publisher.
    #[error(
        "{origin}: the depot does not serve publisher {publisher}; it serves {}",
        crate::repo::served_list(served)
    )]
    UnknownPublisher {
        /// The depot.
        origin: String,
        /// The publisher asked for.
        publisher: String,
        /// The publishers it serves (from `publisher/0`).
        served: Vec<String>,
    },
    /// A pattern names no publisher and the depot serves several.
    #[error(
        "{origin}: the depot serves {}; name one in the pattern (pkg://PUBLISHER/NAME)",
        crate::repo::served_list(served)
    )]
    AmbiguousPublisher {
        /// The depot.
        origin: String,
        /// The publishers it serves.
        served: Vec<String>,
    },
    /// The server refused access (401 or 403). Not retried.
    #[error("{url}: access denied (http {status})")]
    Denied {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// Another unexpected HTTP status.
    #[error("{url}: http status {status}")]
    Status {
        /// The URL.
        url: String,
        /// The status code.
        status: u16,
    },
    /// The request failed in transport (after retries, if transient).
    #[error("{url}: request failed")]
    Transport {
        /// The URL.
        url: String,
        /// The transport error.
        #[source]
        source: Box<ureq::Error>,
    },
    /// The TLS connection to an `https://` depot failed: its certificate is not trusted,
    /// it does not speak TLS, or the handshake did not finish in time. Not retried.
    #[error("{url}: tls failure: {}", describe(*problem, url))]
    Tls {
        /// The URL.
        url: String,
        /// What went wrong, in short.
        problem: TlsProblem,
        /// The transport error.
        #[source]
        source: Box<ureq::Error>,
    },
    /// A CA file, `certs.d` entry or client certificate of the TLS settings is unusable.
    #[error("TLS settings for {origin}")]
    TlsFile {
        /// The depot origin.
        origin: String,
        /// The error (names the file).
        #[source]
        source: TlsFileError,
    },
    /// Reading the response body failed (after retries, if transient).
    #[error("{url}: reading the response failed")]
    Body {
        /// The URL.
        url: String,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// The server does not offer an operation version this client speaks.
    #[error("{origin}: server does not support {op} version {versions:?}")]
    Unsupported {
        /// The depot origin.
        origin: String,
        /// The operation.
        op: String,
        /// The versions this client would accept.
        versions: Vec<u32>,
    },
    /// The `versions/0` document is malformed.
    #[error("{url}: malformed versions document")]
    Versions {
        /// The URL.
        url: String,
    },
    /// A catalog file is malformed or its signature does not match.
    #[error("publisher {publisher}: bad catalog from depot")]
    Catalog {
        /// The publisher.
        publisher: String,
        /// The catalog error (names the file).
        #[source]
        source: CatalogError,
    },
    /// The manifest does not match the catalog's SHA-1.
    #[error(
        "package {fmri}: manifest from {url} is corrupt: sha-1 {actual}, catalog says {expected}"
    )]
    ManifestCorrupt {
        /// The package.
        fmri: String,
        /// Where it came from.
        url: String,
        /// The catalog's value.
        expected: String,
        /// The downloaded manifest's SHA-1.
        actual: String,
    },
    /// The manifest does not parse.
    #[error("package {fmri}: manifest is invalid")]
    ManifestInvalid {
        /// The package.
        fmri: String,
        /// The parse error.
        #[source]
        source: ManifestError,
    },
    /// A payload failed verification or could not be cached.
    #[error("package {fmri}: payload for {action}")]
    Payload {
        /// The package.
        fmri: String,
        /// The action, e.g. `file usr/bin/ls`.
        action: String,
        /// What went wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
}

impl DepotError {
    /// True for errors worth retrying: transport failures, truncated bodies, 5xx, 408, 429.
    /// A connect timeout (which covers the TLS handshake) is not: a server that did not
    /// answer within the timeout is not expected to the next time, and retrying it is what
    /// made an `https://` URL at a plain HTTP server hang for minutes.
    pub fn is_transient(&self) -> bool {
        match self {
            Self::Status { status, .. } => *status >= 500 || matches!(status, 408 | 429),
            Self::Transport { source, .. } => matches!(
                **source,
                ureq::Error::Io(_)
                    | ureq::Error::Timeout(
                        ureq::Timeout::RecvResponse
                            | ureq::Timeout::RecvBody
                            | ureq::Timeout::SendRequest
                            | ureq::Timeout::SendBody
                            | ureq::Timeout::PerRead
                            | ureq::Timeout::PerWrite
                    )
                    | ureq::Error::ConnectionFailed
            ),
            Self::Body { .. } => true,
            _ => false,
        }
    }
}

/// How many times and how patiently the client retries transient failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Attempts in total (at least 1).
    pub attempts: u32,
    /// Delay before the first retry; doubled for each further one.
    pub backoff: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            attempts: 4,
            backoff: Duration::from_millis(250),
        }
    }
}

/// How long connecting, the TLS handshake included, may take.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
/// How long the client waits for response headers, and for each read or write.
pub(crate) const IO_TIMEOUT: Duration = Duration::from_secs(60);

/// A client for one depot origin (e.g. `https://pkg.openindiana.org/hipster/`).
///
/// [`DepotClient::connect`] reads `versions/0/` and every later request uses an operation
/// version the server advertised: `catalog/1`, `manifest/0`, `file/1` (else `file/0`),
/// `publisher/0`. Catalog and manifest responses may be gzip or deflate encoded; payloads
/// are fetched without content encoding and verified before use. `https://` origins are
/// reached with the [`TlsSettings`] given to [`DepotClientBuilder::tls`].
pub struct DepotClient {
    origin: String,
    agent: ureq::Agent,
    ops: BTreeMap<String, Vec<u32>>,
    server: String,
    retry: RetryPolicy,
    cache: Option<PayloadCache>,
}

/// Builds a [`DepotClient`]: retry policy, TLS settings and connect timeout.
#[derive(Debug, Clone)]
pub struct DepotClientBuilder {
    origin: String,
    retry: RetryPolicy,
    tls: TlsSettings,
    connect_timeout: Duration,
}

impl DepotClientBuilder {
    /// The retry policy (default [`RetryPolicy::default`]).
    pub fn retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    /// How to trust `https://` origins (default: the system's roots, verified).
    pub fn tls(mut self, tls: TlsSettings) -> Self {
        self.tls = tls;
        self
    }

    /// How long connecting and the TLS handshake may take (default 10 s).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = timeout;
        self
    }

    /// Reads the TLS settings (a bad file fails here, naming it), connects and negotiates
    /// operation versions.
    pub fn connect(self) -> Result<DepotClient, DepotError> {
        let origin = if self.origin.ends_with('/') {
            self.origin
        } else {
            format!("{}/", self.origin)
        };
        let tls = self
            .tls
            .config_for(&origin)
            .map_err(|source| DepotError::TlsFile {
                origin: origin.clone(),
                source,
            })?;
        let config = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .tls_config(tls)
            .timeout_connect(Some(self.connect_timeout))
            .timeout_recv_response(Some(IO_TIMEOUT))
            .timeout_per_read(Some(IO_TIMEOUT))
            .timeout_per_write(Some(IO_TIMEOUT))
            .user_agent(concat!("ips-bridge/", env!("CARGO_PKG_VERSION")))
            .build();
        let mut client = DepotClient {
            origin,
            agent: config.into(),
            ops: BTreeMap::new(),
            server: String::new(),
            retry: self.retry,
            cache: None,
        };
        let url = format!("{}versions/0/", client.origin);
        let body = client.get_bytes(&url, true, 1 << 20)?;
        let text =
            String::from_utf8(body).map_err(|_| DepotError::Versions { url: url.clone() })?;
        let mut lines = text.lines();
        client.server = lines
            .next()
            .filter(|l| l.starts_with("pkg-server"))
            .ok_or_else(|| DepotError::Versions { url: url.clone() })?
            .to_owned();
        for line in lines.filter(|l| !l.trim().is_empty()) {
            let mut words = line.split_whitespace();
            let op = words.next().expect("non-empty line");
            let versions = words
                .map(str::parse)
                .collect::<Result<Vec<u32>, _>>()
                .map_err(|_| DepotError::Versions { url: url.clone() })?;
            client.ops.insert(op.to_owned(), versions);
        }
        Ok(client)
    }
}

impl DepotClient {
    /// Connects to `origin` and negotiates operation versions.
    pub fn connect(origin: &str) -> Result<Self, DepotError> {
        Self::builder(origin).connect()
    }

    /// [`DepotClient::connect`] with a retry policy.
    pub fn connect_with(origin: &str, retry: RetryPolicy) -> Result<Self, DepotError> {
        Self::builder(origin).retry(retry).connect()
    }

    /// A builder for a client of `origin`, for TLS settings, retries and timeouts.
    pub fn builder(origin: &str) -> DepotClientBuilder {
        DepotClientBuilder {
            origin: origin.to_owned(),
            retry: RetryPolicy::default(),
            tls: TlsSettings::default(),
            connect_timeout: CONNECT_TIMEOUT,
        }
    }

    /// Uses `cache` for payloads fetched through [`PackageRepository::payload`]; without a
    /// cache those stream straight from the depot (and are not retried).
    pub fn with_cache(mut self, cache: PayloadCache) -> Self {
        self.cache = Some(cache);
        self
    }

    /// The origin URL (with a trailing slash).
    pub fn origin(&self) -> &str {
        &self.origin
    }

    /// The `pkg-server ...` line the depot sent.
    pub fn server(&self) -> &str {
        &self.server
    }

    /// The operations and versions the server advertised.
    pub fn operations(&self) -> &BTreeMap<String, Vec<u32>> {
        &self.ops
    }

    /// The highest version of `op` in `wanted` that the server supports.
    pub fn negotiate(&self, op: &str, wanted: &[u32]) -> Result<u32, DepotError> {
        let offered = self.ops.get(op).map(Vec::as_slice).unwrap_or(&[]);
        wanted
            .iter()
            .copied()
            .filter(|v| offered.contains(v))
            .max()
            .ok_or_else(|| DepotError::Unsupported {
                origin: self.origin.clone(),
                op: op.to_owned(),
                versions: wanted.to_vec(),
            })
    }

    fn op_url(&self, publisher: Option<&str>, op: &str, version: u32, arg: &str) -> String {
        // pkg inserts the publisher when the server speaks `publisher 1`.
        let with_pub = self.ops.get("publisher").is_some_and(|v| v.contains(&1));
        match publisher {
            Some(p) if with_pub => format!("{}{p}/{op}/{version}/{arg}", self.origin),
            _ => format!("{}{op}/{version}/{arg}", self.origin),
        }
    }

    fn with_retries<T>(
        &self,
        mut f: impl FnMut() -> Result<T, DepotError>,
    ) -> Result<T, DepotError> {
        let mut delay = self.retry.backoff;
        let mut attempt = 1;
        loop {
            match f() {
                Err(e) if e.is_transient() && attempt < self.retry.attempts.max(1) => {
                    std::thread::sleep(delay);
                    delay *= 2;
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    fn request(
        &self,
        url: &str,
        decode: bool,
    ) -> Result<ureq::http::Response<ureq::Body>, DepotError> {
        let req = self.agent.get(url);
        let req = if decode {
            req.header("Accept-Encoding", "gzip, deflate")
        } else {
            req.header("Accept-Encoding", "identity")
        };
        let resp =
            req.call().map_err(
                |e| match classify(&e).filter(|_| url.starts_with("https://")) {
                    Some(problem) => DepotError::Tls {
                        url: url.to_owned(),
                        problem,
                        source: Box::new(e),
                    },
                    None => DepotError::Transport {
                        url: url.to_owned(),
                        source: Box::new(e),
                    },
                },
            )?;
        let status = resp.status().as_u16();
        match status {
            200 => Ok(resp),
            404 => Err(DepotError::NotFound {
                url: url.to_owned(),
            }),
            401 | 403 => Err(DepotError::Denied {
                url: url.to_owned(),
                status,
            }),
            _ => Err(DepotError::Status {
                url: url.to_owned(),
                status,
            }),
        }
    }

    /// GETs a (small) document, decoding gzip or deflate content encoding when `decode`.
    fn get_bytes(&self, url: &str, decode: bool, limit: u64) -> Result<Vec<u8>, DepotError> {
        self.with_retries(|| {
            let resp = self.request(url, decode)?;
            let deflate = decode
                && resp
                    .headers()
                    .get("content-encoding")
                    .and_then(|v| v.to_str().ok())
                    .is_some_and(|v| v.eq_ignore_ascii_case("deflate"));
            let body_err = |source| DepotError::Body {
                url: url.to_owned(),
                source,
            };
            let reader = resp.into_body().into_with_config().limit(limit).reader();
            let mut out = Vec::new();
            if deflate {
                ZlibDecoder::new(reader)
                    .take(limit + 1)
                    .read_to_end(&mut out)
                    .map_err(body_err)?;
                if out.len() as u64 > limit {
                    return Err(body_err(io::Error::other("response too large")));
                }
            } else {
                let mut reader = reader;
                reader.read_to_end(&mut out).map_err(body_err)?;
            }
            Ok(out)
        })
    }

    /// A catalog file (`catalog.attrs`, a part or an update log) of `publisher`.
    pub fn catalog_file(&self, publisher: &str, name: &str) -> Result<Vec<u8>, DepotError> {
        let v = self.negotiate("catalog", &[1])?;
        self.get_bytes(
            &self.op_url(Some(publisher), "catalog", v, &quote(name)),
            true,
            MAX_METADATA_BYTES,
        )
    }

    /// The catalog of `publisher`: attrs and the base, dependency and summary parts,
    /// signatures verified where present (attrs' `signature-sha-1` included).
    pub fn catalog(&self, publisher: &str) -> Result<Catalog, DepotError> {
        let cat_err = |source| DepotError::Catalog {
            publisher: publisher.to_owned(),
            source,
        };
        let attrs_bytes = match self.catalog_file(publisher, "catalog.attrs") {
            Err(DepotError::NotFound { url }) => {
                // pkg's depot answers 404 for a publisher it does not serve: say which it does.
                let served = self.publishers().unwrap_or_default();
                if served.iter().any(|p| p == publisher) {
                    return Err(DepotError::NotFound { url });
                }
                return Err(DepotError::UnknownPublisher {
                    origin: self.origin().to_owned(),
                    publisher: publisher.to_owned(),
                    served,
                });
            }
            other => other?,
        };
        let attrs = CatalogAttrs::parse(&attrs_bytes).map_err(cat_err)?;
        let mut catalog = Catalog {
            created: Some(attrs.created.clone()),
            ..Catalog::default()
        };
        for (name, info) in &attrs.parts {
            if !matches!(
                name.as_str(),
                "catalog.base.C" | "catalog.dependency.C" | "catalog.summary.C"
            ) {
                continue;
            }
            let bytes = self.catalog_file(publisher, name)?;
            let part = CatalogPart::parse(name, &bytes).map_err(cat_err)?;
            if let Some(sig) = &info.signature_sha1 {
                // Checked on the bytes as served (cut before `_SIGNATURE`), so the result does
                // not depend on how a JSON serialiser escapes non-ASCII text.
                let text = String::from_utf8_lossy(&bytes);
                let actual = crate::catalog::unsigned_sha1(&text)
                    .unwrap_or_else(|| hash_hex(HashAlg::Sha1, &bytes));
                if &actual != sig {
                    return Err(cat_err(CatalogError::Signature {
                        file: name.clone(),
                        expected: sig.clone(),
                        actual,
                    }));
                }
            }
            match name.as_str() {
                "catalog.base.C" => catalog.base = part,
                "catalog.dependency.C" => catalog.dependency = part,
                _ => catalog.summary = part,
            }
        }
        Ok(catalog)
    }

    /// Every package version in `publisher`'s catalog.
    pub fn packages(&self, publisher: &str) -> Result<Vec<PackageRef>, DepotError> {
        let catalog = self.catalog(publisher)?;
        catalog
            .base
            .entries()
            .iter()
            .filter_map(|e| {
                e.fmri().ok().map(|fmri| {
                    Ok(PackageRef {
                        fmri,
                        manifest_sha1: e.signature_sha1().map(str::to_owned),
                    })
                })
            })
            .collect()
    }

    /// The raw manifest of a package, checked against the catalog's SHA-1 when given.
    /// The URL keeps a literal `@` between the quoted stem and version.
    pub fn manifest_bytes(&self, package: &PackageRef) -> Result<Vec<u8>, DepotError> {
        let v = self.negotiate("manifest", &[0])?;
        let arg = package
            .fmri
            .url_path()
            .ok_or_else(|| DepotError::NotFound {
                url: package.fmri.to_string(),
            })?;
        let url = self.op_url(package.fmri.publisher(), "manifest", v, &arg);
        let bytes = self.get_bytes(&url, true, MAX_METADATA_BYTES)?;
        if let Some(expected) = &package.manifest_sha1 {
            let actual = hash_hex(HashAlg::Sha1, &bytes);
            if &actual != expected {
                return Err(DepotError::ManifestCorrupt {
                    fmri: package.fmri.to_string(),
                    url,
                    expected: expected.clone(),
                    actual,
                });
            }
        }
        Ok(bytes)
    }

    /// The parsed manifest of a package (checked as [`DepotClient::manifest_bytes`]).
    pub fn manifest(&self, package: &PackageRef) -> Result<Manifest, DepotError> {
        let bytes = self.manifest_bytes(package)?;
        Manifest::parse_bytes(&bytes).map_err(|source| DepotError::ManifestInvalid {
            fmri: package.fmri.to_string(),
            source,
        })
    }

    /// Streams the stored (gzip) payload named `name` of `publisher` into `out`, using
    /// `file/1` when offered, else `file/0`. Not verified: see [`DepotClient::fetch_payload`].
    pub fn download_payload<W: Write>(
        &self,
        publisher: Option<&str>,
        name: &str,
        out: &mut W,
    ) -> Result<u64, DepotError> {
        let v = self.negotiate("file", &[0, 1])?;
        let url = self.op_url(publisher, "file", v, &quote(name));
        let resp = self.request(&url, false)?;
        let mut reader = resp.into_body().into_with_config().reader();
        io::copy(&mut reader, out).map_err(|source| DepotError::Body { url, source })
    }

    /// Fetches, verifies and caches the payload of a `file`, `license` or `signature` action
    /// of `package`, retrying transient failures. Returns the cached stored payload's path.
    pub fn fetch_payload(
        &self,
        cache: &PayloadCache,
        package: &Fmri,
        action: &Action,
    ) -> Result<PathBuf, DepotError> {
        let what = format!("{} {}", action.kind(), action.key().unwrap_or("?"));
        let payload_err = |source: Box<dyn std::error::Error + Send + Sync>| DepotError::Payload {
            fmri: package.to_string(),
            action: what.clone(),
            source,
        };
        let hashes = PayloadHashes::from_action(action).map_err(|e| payload_err(Box::new(e)))?;
        self.with_retries(|| {
            let r = cache.get_or_fetch(&hashes, |f: &mut File| {
                self.download_payload(package.publisher(), &hashes.name, f)
                    .map(|_| ())
            });
            match r {
                Ok(p) => Ok(p),
                Err(CacheError::Fetch { source, .. }) => Err(source),
                // A payload that fails verification is reported, not retried: a depot
                // serving bad data is not a transient failure.
                Err(CacheError::Verify { source, .. }) => Err(payload_err(Box::new(source))),
                Err(CacheError::Io { path, source }) => Err(payload_err(Box::new(io::Error::new(
                    source.kind(),
                    format!("{}: {source}", path.display()),
                )))),
            }
        })
    }

    /// The payload of `action` member by member into `sink` (see
    /// [`PayloadHashes::splice_checked`]): through the cache when there is one (content
    /// checked), else straight from the depot (every hash checked). On error, whatever `sink`
    /// received must be discarded.
    pub fn splice_payload(
        &self,
        package: &Fmri,
        action: &Action,
        sink: &mut dyn crate::GzipSink,
    ) -> Result<u64, DepotError> {
        self.payload_stream(package, action, |hashes, check, stored| {
            hashes.splice_checked(check, stored, sink)
        })
    }

    /// Opens the stored payload of `action` and hands it to `consume` with the hashes to
    /// check: from the payload cache when there is one (every hash was checked when the
    /// download entered the cache; reading it back checks the content that is used, see
    /// [`Check`]), else straight from the depot (bytes from the network: every hash, as when
    /// they enter the cache). Errors name the package and action.
    fn payload_stream<T>(
        &self,
        package: &Fmri,
        action: &Action,
        consume: impl FnOnce(&PayloadHashes, Check, &mut dyn Read) -> Result<T, crate::PayloadError>,
    ) -> Result<T, DepotError> {
        let what = format!("{} {}", action.kind(), action.key().unwrap_or("?"));
        let payload_err = |source: Box<dyn std::error::Error + Send + Sync>| DepotError::Payload {
            fmri: package.to_string(),
            action: what.clone(),
            source,
        };
        let hashes = PayloadHashes::from_action(action).map_err(|e| payload_err(Box::new(e)))?;
        match &self.cache {
            Some(cache) => {
                let path = self.fetch_payload(cache, package, action)?;
                let file = File::open(&path).map_err(|e| payload_err(Box::new(e)))?;
                consume(&hashes, Check::Content, &mut io::BufReader::new(file))
                    .map_err(|e| payload_err(Box::new(e)))
            }
            None => {
                let v = self.negotiate("file", &[0, 1])?;
                let url = self.op_url(package.publisher(), "file", v, &quote(&hashes.name));
                let resp = self.request(&url, false)?;
                let reader = resp.into_body().into_with_config().reader();
                consume(&hashes, Check::Stored, &mut io::BufReader::new(reader))
                    .map_err(|e| payload_err(Box::new(e)))
            }
        }
    }

    /// Fetches every payload a manifest needs (file and license actions) into the cache.
    pub fn fetch_all(
        &self,
        cache: &PayloadCache,
        package: &Fmri,
        manifest: &Manifest,
    ) -> Result<Vec<PathBuf>, DepotError> {
        manifest
            .actions()
            .iter()
            .filter(|a| matches!(a.kind(), ActionKind::File | ActionKind::License))
            .map(|a| self.fetch_payload(cache, package, a))
            .collect()
    }

    /// The publishers the depot serves (the names in its unprefixed `publisher/0`).
    ///
    /// Version 0, as pkg's own client asks: pkg.depotd advertises `publisher 1` too but
    /// answers an unprefixed `publisher/1/` with 500.
    pub fn publishers(&self) -> Result<Vec<String>, DepotError> {
        let v = self.negotiate("publisher", &[0])?;
        let url = self.op_url(None, "publisher", v, "");
        let bytes = self.get_bytes(&url, true, 16 << 20)?;
        let doc: serde_json::Value =
            serde_json::from_slice(&bytes).map_err(|e| DepotError::Body {
                url,
                source: io::Error::new(io::ErrorKind::InvalidData, e),
            })?;
        let mut names: Vec<String> = doc["publishers"]
            .as_array()
            .map(Vec::as_slice)
            .unwrap_or_default()
            .iter()
            .filter_map(|p| p["name"].as_str().map(str::to_owned))
            .collect();
        names.sort();
        Ok(names)
    }

    /// The `publisher/0` document (p5i JSON) for `publisher`.
    pub fn publisher_info(&self, publisher: &str) -> Result<serde_json::Value, DepotError> {
        let v = self.negotiate("publisher", &[0, 1])?;
        let url = self.op_url(Some(publisher), "publisher", v, "");
        let bytes = self.get_bytes(&url, true, 16 << 20)?;
        serde_json::from_slice(&bytes).map_err(|e| DepotError::Body {
            url,
            source: io::Error::new(io::ErrorKind::InvalidData, e),
        })
    }
}

impl PackageRepository for DepotClient {
    type Error = DepotError;

    /// The publisher the depot serves, from its unprefixed `publisher/0`: `None` when it
    /// lists none, an error when it lists several (which one pkg.depotd serves unprefixed is
    /// not in the document) or cannot be read.
    fn default_publisher(&self) -> Result<Option<String>, DepotError> {
        let mut served = self.publishers()?;
        match served.len() {
            0 | 1 => Ok(served.pop()),
            _ => Err(DepotError::AmbiguousPublisher {
                origin: self.origin.clone(),
                served,
            }),
        }
    }

    fn packages(&self, publisher: &str) -> Result<Vec<PackageRef>, DepotError> {
        DepotClient::packages(self, publisher)
    }

    fn manifest_bytes(&self, package: &PackageRef) -> Result<Vec<u8>, DepotError> {
        DepotClient::manifest_bytes(self, package)
    }

    fn manifest(&self, package: &PackageRef) -> Result<Manifest, DepotError> {
        DepotClient::manifest(self, package)
    }

    fn payload(
        &self,
        package: &Fmri,
        action: &Action,
        out: &mut dyn Write,
    ) -> Result<u64, DepotError> {
        self.payload_stream(package, action, |hashes, check, stored| {
            hashes.verify_checked(check, stored, out)
        })
    }
}
