//! Pull-through caching (`[[proxy]]` in registry.toml): repositories under a local prefix are
//! filled on demand from upstream registries, tried in order (zot-style, not distribution's
//! single upstream).
//!
//! - A manifest GET or HEAD by digest that the repository lacks is fetched from the first
//!   upstream that has it, checked against the digest and by the same document rules as a
//!   push, and stored; then the request is served from the store.
//! - A manifest by tag is revalidated at the upstreams once its last check is older than the
//!   rule's `tag_ttl_secs`; when no upstream answers, the cached tag is served (stale), so a
//!   site keeps working while the upstream is down.
//! - A blob the repository lacks is fetched once however many requests ask for it at the same
//!   time (one fetch per digest in this process; the others wait for it and are served from
//!   the store). The fetch goes through the registry's own upload path, so the bytes become
//!   visible only after `finish_upload` verified size and digest. The request that started the
//!   fetch gets the bytes as they arrive, except the last chunk, which is sent only after the
//!   verification succeeded: a client either receives verified bytes or sees the transfer
//!   fail. The fetch runs on its own task and completes even when that client goes away.
//!
//! The upstream fetcher is this module's own small HTTP client (`reqwest`): the registry crate
//! does not depend on `registry-client` (crate arrows point down), and the only part a
//! pull-through needs is a verified GET, which is short. A rule with `auth_file` sends HTTP
//! Basic credentials; they come from an [`UpstreamCredentials`] the process injects (`rdctl
//! registry serve` reads the docker `config.json` / `auth.json` with `registry-client`'s one
//! parser), looked up at every fetch so a rewritten file counts. There is no token (Bearer)
//! flow: an upstream that answers with a token challenge is not reachable with credentials.
//! Revalidation times are kept in memory: they only decide when to ask again, never what is
//! served, so a restarted replica revalidates once more.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt as _;
use validator::{Algorithm, Digest, Name, Tag};

use crate::errors::{ApiError, ApiResult, Code};
use crate::repo::{ManifestLink, Repos};

/// Media types asked for when fetching a manifest.
const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// One upstream: a base URL (`http[s]://HOST[:PORT]`) and a repository prefix there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `http://HOST[:PORT]` or `https://HOST[:PORT]`.
    pub base: String,
    /// Repository prefix at the upstream (no leading or trailing `/`).
    pub prefix: Option<String>,
}

impl Upstream {
    /// Parses `http[s]://HOST[:PORT][/PREFIX]`.
    pub fn parse(s: &str) -> Result<Upstream, String> {
        let (scheme, rest) = s
            .split_once("://")
            .filter(|(sch, _)| matches!(*sch, "http" | "https"))
            .ok_or_else(|| format!("{s:?} is not an http:// or https:// URL"))?;
        let rest = rest.trim_end_matches('/');
        let (host, prefix) = match rest.split_once('/') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
        {
            return Err(format!("{s:?}: bad host {host:?}"));
        }
        if let Some(p) = prefix {
            Name::parse(p).map_err(|e| format!("{s:?}: prefix {p:?}: {e}"))?;
        }
        Ok(Upstream {
            base: format!("{scheme}://{host}"),
            prefix: prefix.map(str::to_owned),
        })
    }

    fn repository(&self, remote: &str) -> String {
        match &self.prefix {
            Some(p) => format!("{p}/{remote}"),
            None => remote.to_owned(),
        }
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.base)?;
        if let Some(p) = &self.prefix {
            write!(f, "/{p}")?;
        }
        Ok(())
    }
}

/// Finds the credentials for an upstream host in an auth file (`[[proxy]] auth_file`,
/// `[[sync]] auth_file`): the process injects it, this crate reads no credential files.
pub trait UpstreamCredentials: Send + Sync + std::fmt::Debug {
    /// User name and password for `host` (`HOST[:PORT]`) in `file`; `None`: anonymous. The
    /// error names the file and what is wrong.
    fn basic(&self, file: &Path, host: &str) -> Result<Option<(String, String)>, String>;
}

/// One `[[proxy]]` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRule {
    /// Local repository prefix: `PREFIX/NAME` is `NAME` at the upstreams.
    pub prefix: String,
    /// Tried in order.
    pub upstreams: Vec<Upstream>,
    /// A tag is revalidated at the upstreams once its last check is this old.
    pub tag_ttl: Duration,
    /// A docker `config.json` / containers `auth.json` with the upstreams' credentials (none:
    /// anonymous).
    pub auth_file: Option<PathBuf>,
}

/// How a blob fetch ended: `None` while it runs, then `Ok` or why it failed.
type FetchEnd = Option<Result<(), String>>;

/// The pull-through cache of one registry process.
#[derive(Debug)]
pub(crate) struct Proxy {
    rules: Vec<ProxyRule>,
    http: reqwest::Client,
    credentials: Option<Arc<dyn UpstreamCredentials>>,
    /// When each `(repository, tag)` was last revalidated.
    checked: Mutex<HashMap<(String, String), Instant>>,
    /// Blob fetches under way, by digest: a receiver that turns `Some` when the fetch ended
    /// (`Ok` or the reason it failed).
    inflight: Mutex<HashMap<Digest, tokio::sync::watch::Receiver<FetchEnd>>>,
}

/// What an upstream answered for a manifest.
enum Fetched {
    Found {
        bytes: Bytes,
        content_type: Option<String>,
        digest_header: Option<String>,
    },
    Missing,
}

impl Proxy {
    /// A cache over `rules`; `None` without rules. `credentials` resolves the rules'
    /// `auth_file`s.
    pub(crate) fn new(
        rules: Vec<ProxyRule>,
        credentials: Option<Arc<dyn UpstreamCredentials>>,
    ) -> Option<Arc<Proxy>> {
        if rules.is_empty() {
            return None;
        }
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            .read_timeout(Duration::from_secs(60))
            .build()
            .expect("an HTTP client with default TLS settings");
        Some(Arc::new(Proxy {
            rules,
            http,
            credentials,
            checked: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
        }))
    }

    /// A GET of `url` at upstream `u` of `rule`, with the rule's credentials for its host.
    fn get(
        &self,
        rule: &ProxyRule,
        u: &Upstream,
        url: &str,
    ) -> Result<reqwest::RequestBuilder, String> {
        let req = self.http.get(url);
        let Some(file) = &rule.auth_file else {
            return Ok(req);
        };
        let Some(creds) = &self.credentials else {
            return Err(format!(
                "{url}: {} is set but this process reads no credential files",
                file.display()
            ));
        };
        let host = u.base.split_once("://").map_or("", |(_, h)| h);
        Ok(match creds.basic(file, host)? {
            Some((user, password)) => req.basic_auth(user, Some(password)),
            None => req,
        })
    }

    /// The rule for a local repository and the name at the upstreams.
    fn route(&self, name: &Name) -> Option<(&ProxyRule, String)> {
        self.rules.iter().find_map(|r| {
            let rest = name.as_str().strip_prefix(&r.prefix)?.strip_prefix('/')?;
            Some((r, rest.to_owned()))
        })
    }

    /// GET a manifest at the upstreams in order; the first that has it answers.
    async fn fetch_manifest(
        &self,
        rule: &ProxyRule,
        remote: &str,
        reference: &str,
        limit: u64,
    ) -> Result<Fetched, String> {
        let mut errors = Vec::new();
        for u in &rule.upstreams {
            let url = format!(
                "{}/v2/{}/manifests/{reference}",
                u.base,
                u.repository(remote)
            );
            let req = match self.get(rule, u, &url) {
                Ok(r) => r,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            match self.get_manifest(req, &url, limit).await {
                Ok(Fetched::Missing) => errors.push(format!("{url}: not found")),
                Ok(found) => return Ok(found),
                Err(e) => errors.push(e),
            }
        }
        if errors.iter().all(|e| e.ends_with(": not found")) {
            return Ok(Fetched::Missing);
        }
        Err(errors.join("; "))
    }

    async fn get_manifest(
        &self,
        req: reqwest::RequestBuilder,
        url: &str,
        limit: u64,
    ) -> Result<Fetched, String> {
        let resp = req
            .header(header::ACCEPT, MANIFEST_ACCEPT)
            .send()
            .await
            .map_err(|e| format!("{url}: {}", validator::error_chain(&e)))?;
        match resp.status() {
            StatusCode::OK => {}
            StatusCode::NOT_FOUND => return Ok(Fetched::Missing),
            s => return Err(format!("{url}: upstream answered {s}")),
        }
        let h = resp.headers();
        let text = |k: &str| h.get(k).and_then(|v| v.to_str().ok()).map(str::to_owned);
        let content_type =
            text("content-type").map(|c| c.split(';').next().unwrap_or_default().trim().to_owned());
        let digest_header = text("docker-content-digest");
        let mut body = resp.bytes_stream();
        let mut buf = Vec::new();
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| format!("{url}: {}", validator::error_chain(&e)))?;
            if (buf.len() + chunk.len()) as u64 > limit {
                return Err(format!("{url}: manifest larger than {limit} bytes"));
            }
            buf.extend_from_slice(&chunk);
        }
        Ok(Fetched::Found {
            bytes: Bytes::from(buf),
            content_type,
            digest_header,
        })
    }

    /// Makes sure `name` has the manifest `reference` names when the repository is proxied:
    /// fetches a digest it lacks, revalidates a tag whose check is older than the TTL (a
    /// failed revalidation keeps the cached tag). Does nothing for other repositories.
    pub(crate) async fn ensure_manifest(
        &self,
        repos: &Repos,
        name: &Name,
        reference: &str,
        limit: u64,
    ) -> ApiResult<()> {
        let Some((rule, remote)) = self.route(name) else {
            return Ok(());
        };
        let tag = if reference.contains(':') {
            let Ok(d) = Digest::parse(reference) else {
                return Ok(()); // the handler refuses it
            };
            if repos.manifest_link(name, &d).await?.is_some() {
                return Ok(());
            }
            None
        } else {
            let Ok(t) = Tag::parse(reference) else {
                return Ok(());
            };
            let key = (name.as_str().to_owned(), t.as_str().to_owned());
            let fresh = self
                .checked
                .lock()
                .expect("proxy tag checks")
                .get(&key)
                .is_some_and(|at| at.elapsed() < rule.tag_ttl);
            if fresh && repos.resolve_tag_target(name, &t).await?.is_some() {
                return Ok(());
            }
            Some(t)
        };
        let fetched = self.fetch_manifest(rule, &remote, reference, limit).await;
        let (bytes, content_type, digest_header) = match fetched {
            Ok(Fetched::Found {
                bytes,
                content_type,
                digest_header,
            }) => (bytes, content_type, digest_header),
            Ok(Fetched::Missing) => {
                tracing::debug!(repository = %name, reference, "not at any upstream");
                return Ok(());
            }
            Err(e) => {
                // Upstream down: what is cached is served; a miss is a miss.
                tracing::warn!(repository = %name, reference, error = %e, "upstreams unavailable; serving the cache");
                return Ok(());
            }
        };
        let digest = match (&tag, Digest::parse(reference)) {
            (None, Ok(want)) => {
                let got = Digest::of(want.algorithm(), &bytes);
                if got != want {
                    tracing::warn!(repository = %name, %want, %got, "upstream sent a manifest that does not match its digest; not cached");
                    return Err(ApiError::new(
                        Code::ManifestUnknown,
                        format!("the upstream of {name} served {got} for {want}"),
                    ));
                }
                want
            }
            _ => {
                let algorithm = digest_header
                    .as_deref()
                    .and_then(|h| Digest::parse(h).ok())
                    .map(|d| d.algorithm())
                    .unwrap_or(Algorithm::Sha256);
                let got = Digest::of(algorithm, &bytes);
                if let Some(h) = &digest_header
                    && h != got.as_str()
                {
                    tracing::warn!(repository = %name, reference, header = %h, %got, "upstream's digest header does not match the manifest; not cached");
                    return Err(ApiError::new(
                        Code::ManifestUnknown,
                        format!("the upstream of {name} served {got} for {reference}, saying {h}"),
                    ));
                }
                got
            }
        };
        let checked = crate::manifest_rules::check_document(&bytes, content_type.as_deref())?;
        repos.put_manifest_bytes(&digest, bytes.clone()).await?;
        let link = ManifestLink {
            media_type: checked.media_type.clone(),
            size: bytes.len() as u64,
            subject: checked.subject.clone(),
        };
        repos.link_manifest(name, &digest, &link).await?;
        if let Some(subject) = &checked.subject {
            // Listed under its subject as a pushed referrer is.
            let mut desc = serde_json::json!({
                "mediaType": checked.media_type,
                "digest": digest.as_str(),
                "size": bytes.len(),
            });
            if let Some(t) = &checked.artifact_type {
                desc["artifactType"] = serde_json::Value::String(t.clone());
            }
            if let Some(a) = &checked.annotations {
                desc["annotations"] = a.clone();
            }
            repos.add_referrer(name, subject, &digest, desc).await?;
        }
        if let Some(t) = &tag {
            // The cache follows its upstream: `[[immutable]]` rules govern pushes, not this.
            repos.set_tag(name, t, &digest, &link, None).await?;
            self.checked.lock().expect("proxy tag checks").insert(
                (name.as_str().to_owned(), t.as_str().to_owned()),
                Instant::now(),
            );
        }
        tracing::info!(repository = %name, reference, %digest, "manifest cached from upstream");
        Ok(())
    }

    /// For a proxied repository that lacks blob `d`: fetches it once. The request that starts
    /// the fetch (and asked for the whole blob with GET) gets a streaming response; every
    /// other request waits for the fetch and gets `None`, to be served from the store.
    pub(crate) async fn blob(
        self: &Arc<Self>,
        repos: &Repos,
        name: &Name,
        d: &Digest,
        stream_to_caller: bool,
    ) -> ApiResult<Option<Response>> {
        let Some((rule, remote)) = self.route(name) else {
            return Ok(None);
        };
        let rule = rule.clone();
        let (rx, leader) = {
            let mut inflight = self.inflight.lock().expect("proxy fetches");
            match inflight.get(d) {
                Some(rx) => (rx.clone(), None),
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    inflight.insert(d.clone(), rx.clone());
                    (rx, Some(tx))
                }
            }
        };
        let Some(done) = leader else {
            // Someone else fetches it: wait, then the store answers.
            return fetched(rx, name, d).await;
        };
        // This request fetches: find an upstream that has the blob.
        let mut errors = Vec::new();
        let mut found = None;
        for u in &rule.upstreams {
            let url = format!("{}/v2/{}/blobs/{d}", u.base, u.repository(&remote));
            let req = match self.get(&rule, u, &url) {
                Ok(r) => r,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            match req.send().await {
                Ok(r) if r.status() == StatusCode::OK => {
                    found = Some((url, r));
                    break;
                }
                Ok(r) => errors.push(format!("{url}: upstream answered {}", r.status())),
                Err(e) => errors.push(format!("{url}: {}", validator::error_chain(&e))),
            }
        }
        let Some((url, resp)) = found else {
            let e = errors.join("; ");
            self.finish(d, &done, Err(e.clone()));
            return Err(unavailable(name, d, &e));
        };
        let size = resp.content_length();
        let (tx, body_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
        let client = (stream_to_caller && size.is_some()).then_some(tx);
        let me = Arc::clone(self);
        let (repos, name2, d2) = (repos.clone(), name.clone(), d.clone());
        tokio::spawn(async move {
            let r = me.store_blob(&repos, &name2, &d2, &url, resp, client).await;
            me.finish(&d2, &done, r);
        });
        if !stream_to_caller || size.is_none() {
            return fetched(rx, name, d).await;
        }
        let stream = futures_util::stream::unfold(body_rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let r = Response::builder()
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header("docker-content-digest", d.as_str())
            .header(header::CONTENT_LENGTH, size.expect("checked above"))
            .body(Body::from_stream(stream))
            .map_err(ApiError::internal)?;
        Ok(Some(r))
    }

    fn finish(
        &self,
        d: &Digest,
        done: &tokio::sync::watch::Sender<FetchEnd>,
        r: Result<(), String>,
    ) {
        self.inflight.lock().expect("proxy fetches").remove(d);
        let _ = done.send(Some(r));
    }

    /// Writes the upstream body through an upload (verified on commit, then linked into the
    /// repository), passing each chunk on to `client` one chunk behind; the last chunk goes to
    /// the client only after the commit verified the digest, else the client's body fails.
    async fn store_blob(
        &self,
        repos: &Repos,
        name: &Name,
        d: &Digest,
        url: &str,
        resp: reqwest::Response,
        client: Option<tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>>,
    ) -> Result<(), String> {
        let held: Arc<Mutex<Option<Bytes>>> = Arc::new(Mutex::new(None));
        let upload = repos
            .start_upload(name, Some(d.algorithm()))
            .await
            .map_err(|e| format!("starting the upload of {d}: {}", e.detail))?;
        let (h, c) = (held.clone(), client.clone());
        let body = resp.bytes_stream().then(move |item| {
            let (h, c) = (h.clone(), c.clone());
            async move {
                let b = item.map_err(|e| validator::error_chain(&e))?;
                let prev = h.lock().expect("held chunk").replace(b.clone());
                if let (Some(prev), Some(c)) = (prev, &c) {
                    // A client that went away does not stop the cache fill.
                    let _ = c.send(Ok(prev)).await;
                }
                Ok::<Bytes, String>(b)
            }
        });
        let r = repos
            .finish_upload(name, upload, body, None, None, d)
            .await
            .map(|_| ())
            .map_err(|e| format!("{url}: {}", e.detail));
        if let Some(c) = client {
            match &r {
                Ok(()) => {
                    let last = held.lock().expect("held chunk").take();
                    if let Some(last) = last {
                        let _ = c.send(Ok(last)).await;
                    }
                }
                Err(e) => {
                    let _ = c
                        .send(Err(std::io::Error::other(format!(
                            "the upstream's bytes for {d} did not verify: {e}"
                        ))))
                        .await;
                }
            }
        }
        match &r {
            Ok(()) => tracing::info!(repository = %name, digest = %d, "blob cached from upstream"),
            Err(e) => {
                tracing::warn!(repository = %name, digest = %d, error = %e, "blob from upstream refused; not cached")
            }
        }
        r
    }
}

fn unavailable(name: &Name, d: &Digest, why: &str) -> ApiError {
    ApiError::new(
        Code::BlobUnknown,
        format!("blob {d} is not in {name} and its upstreams could not supply it: {why}"),
    )
}

/// What a blob fetch led by another request (or handed to a task) ended with: `None` once the
/// store has the blob, so the caller answers from it.
async fn fetched(
    mut rx: tokio::sync::watch::Receiver<FetchEnd>,
    name: &Name,
    d: &Digest,
) -> ApiResult<Option<Response>> {
    let result = rx
        .wait_for(Option::is_some)
        .await
        .map_err(ApiError::internal)?
        .clone()
        .expect("waited for Some");
    match result {
        Ok(()) => Ok(None),
        Err(e) => Err(unavailable(name, d, &e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upstreams_parse_and_routes_strip_the_prefix() {
        let u = Upstream::parse("http://127.0.0.1:5000/zones/").unwrap();
        assert_eq!(u.base, "http://127.0.0.1:5000");
        assert_eq!(u.repository("apps/web"), "zones/apps/web");
        assert_eq!(Upstream::parse("https://reg.example").unwrap().prefix, None);
        for bad in ["reg.example", "ftp://x", "http://", "http://h/UPPER"] {
            assert!(Upstream::parse(bad).is_err(), "{bad}");
        }
        let p = Proxy::new(
            vec![ProxyRule {
                prefix: "central".into(),
                upstreams: vec![u],
                tag_ttl: Duration::from_secs(1),
                auth_file: None,
            }],
            None,
        )
        .unwrap();
        let n = Name::parse("central/apps/web").unwrap();
        assert_eq!(p.route(&n).map(|(_, r)| r), Some("apps/web".to_owned()));
        assert!(p.route(&Name::parse("centralx/a").unwrap()).is_none());
        assert!(p.route(&Name::parse("central").unwrap()).is_none());
    }
}
