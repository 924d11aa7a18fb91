//! Pull-through caching (`[[proxy]]` in registry.toml): repositories under a local prefix are
//! filled on demand from upstream registries, tried in order (zot-style, not distribution's
//! single upstream).
//!
//! - A manifest GET or HEAD by digest that the repository lacks is fetched from the first
//!   upstream that has it and serves it verified (digest, size limit, the same document rules
//!   as a push), and stored; then the request is served from the store. An upstream whose
//!   manifest fails verification is passed over like one that is down or lacks it: the next
//!   is asked, and nothing of the bad one is stored.
//! - A manifest by tag is revalidated at the upstreams once its last check is older than the
//!   rule's `tag_ttl_secs`; when no upstream answers, the cached tag is served (stale), so a
//!   site keeps working while the upstream is down. With nothing cached, a failure of every
//!   upstream is `503 UNAVAILABLE` whose detail names each upstream and why it failed; only
//!   when every upstream answered "not found" is it `404 MANIFEST_UNKNOWN`.
//! - A blob the repository lacks is fetched once however many requests ask for it at the same
//!   time (one fetch per digest in this process; the others wait for it and are served from
//!   the store). The fetch goes through the registry's own upload path, so the bytes become
//!   visible only after `finish_upload` verified size and digest. The request that started the
//!   fetch gets the bytes as they arrive, except the last chunk, which is sent only after the
//!   verification succeeded: a client either receives verified bytes or sees the transfer
//!   fail. When an upstream's bytes fail verification the fetch goes on at the next upstream
//!   (that client's transfer has failed; the waiting and later requests get the verified
//!   blob). The fetch runs on its own task and completes even when that client goes away.
//! - Referrers of a proxied repository ([`Proxy::referrers`]) are the cached ones merged with
//!   what the upstreams list (their referrers API, or the `sha256-<hex>` tag schema for a
//!   registry without it); the listed signatures and SBOMs are then fetched on demand like any
//!   manifest and blob. Each upstream's answer is kept for the rule's `tag_ttl_secs`; one that
//!   fails or does not answer within `REFERRERS_TIMEOUT` contributes its last answer and is
//!   left alone for `REFERRERS_RETRY_AFTER`.
//! - containerd's mirror requests (`/v2/NAME/...?ns=HOST`) are the requests for
//!   `PREFIX/NAME` of the rule with an upstream at `HOST` (`NAME` without that upstream's
//!   repository prefix; [`Proxy::local_name_for_namespace`]); when rules share an upstream's
//!   repositories, the first rule serves them ([`mirror_ambiguities`], warned at start).
//!
//! Upstreams are reached with `registry-client`, the workspace's one HTTP stack: a 401's
//! challenge is answered with Basic credentials or a bearer token from its realm (tokens
//! cached per scope), credentials come from the rule's `auth_file` (a docker `config.json` or
//! containers `auth.json`, credential helpers included; none: anonymous, never the process's
//! own docker config), TLS trusts the rule's `ca_files` and `certs.d` directories (per host;
//! default docker's and containers' `/etc/*/certs.d`) or skips verification with `insecure`,
//! and transient failures are retried with [`UPSTREAM_RETRY`]. Revalidation times are kept
//! in memory: they only decide when to ask again, never what is served, so a restarted
//! replica revalidates once more.

use std::collections::{HashMap, HashSet};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt as _;
use registry_client::sync::{SignaturePolicy, SignedCheckError, check_signed};
use registry_client::{AuthEnv, Client, ClientError, ErrorKind, Keychain, Reference, Retry};
use validator::{Digest, Name, RegistryHost, Tag, error_chain};

use crate::errors::{ApiError, ApiResult, Code};
use crate::repo::{ManifestLink, Repos};

/// How the cache retries an upstream's transient failures (5xx, 429, cut connections): three
/// attempts 200 ms and 400 ms apart, so a dead upstream costs a client about a second before
/// the next upstream or the cache answers.
pub const UPSTREAM_RETRY: Retry = Retry {
    attempts: 3,
    base_delay: Duration::from_millis(200),
    max_delay: Duration::from_secs(2),
};

/// Connect and read timeout for upstream requests.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// How long one upstream's referrers listing may take (retries included) before the listing
/// goes on without it (with its last answer, when there is one).
const REFERRERS_TIMEOUT: Duration = Duration::from_secs(5);

/// After an upstream's referrers listing failed, it is not asked again for that subject for
/// this long (or the rule's `tag_ttl_secs` when shorter); its last answer is served meanwhile.
const REFERRERS_RETRY_AFTER: Duration = Duration::from_secs(30);

/// Upstream referrers answers kept (one per repository, subject and upstream); when full the
/// oldest is dropped.
const REFERRERS_CACHED: usize = 4096;

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
        RegistryHost::parse(host).map_err(|e| format!("{s:?}: bad host {host:?}: {e}"))?;
        if let Some(p) = prefix {
            Name::parse(p).map_err(|e| format!("{s:?}: prefix {p:?}: {e}"))?;
        }
        Ok(Upstream {
            base: format!("{scheme}://{host}"),
            prefix: prefix.map(str::to_owned),
        })
    }

    /// `HOST[:PORT]` as written.
    fn authority(&self) -> &str {
        self.base.split_once("://").map_or("", |(_, h)| h)
    }

    /// The canonical `HOST[:PORT]` (how `registry-client` names the registry).
    pub fn host(&self) -> RegistryHost {
        RegistryHost::parse(self.authority()).expect("checked by Upstream::parse")
    }

    /// True for an `http://` upstream.
    pub fn plain_http(&self) -> bool {
        self.base.starts_with("http://")
    }

    /// Whether `self` and `other` name some repository in common: the same host (canonical
    /// spelling) and repository prefixes of which one is under the other (no prefix: every
    /// repository of the host). A containerd `?ns=` request for such a repository could
    /// mean either.
    pub fn overlaps(&self, other: &Upstream) -> bool {
        if self.host() != other.host() {
            return false;
        }
        match (&self.prefix, &other.prefix) {
            (None, _) | (_, None) => true,
            (Some(a), Some(b)) => {
                a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"))
            }
        }
    }

    fn repository(&self, remote: &str) -> String {
        match &self.prefix {
            Some(p) => format!("{p}/{remote}"),
            None => remote.to_owned(),
        }
    }

    /// The client reference of `remote` at this upstream: `reference` is a tag or a digest.
    fn reference(&self, remote: &str, reference: &str) -> Result<Reference, String> {
        let sep = if reference.contains(':') { '@' } else { ':' };
        let s = format!(
            "{}/{}{sep}{reference}",
            self.host(),
            self.repository(remote)
        );
        Reference::parse(&s).map_err(|e| format!("{self}: {e}"))
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

/// One `[[proxy]]` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRule {
    /// Local repository prefix: `PREFIX/NAME` is `NAME` at the upstreams.
    pub prefix: String,
    /// Tried in order.
    pub upstreams: Vec<Upstream>,
    /// A tag is revalidated at the upstreams once its last check is this old.
    pub tag_ttl: Duration,
    /// A docker `config.json` / containers `auth.json` with the upstreams' credentials and
    /// credential helpers (none: anonymous).
    pub auth_file: Option<PathBuf>,
    /// PEM files of CAs trusted for every upstream of the rule (besides the system's).
    pub ca_files: Vec<PathBuf>,
    /// `certs.d`-style directories (`<dir>/<host:port>/*.crt`, `client.cert`/`client.key`);
    /// empty: [`registry_client::DEFAULT_CERT_DIRS`].
    pub cert_dirs: Vec<PathBuf>,
    /// TLS without verifying the upstreams' certificates.
    pub insecure: bool,
    /// An admission policy file in the worker's format: cache and serve only the images it
    /// admits (`only_signed`; none: every image). See [`Proxy`]'s admission rules.
    pub only_signed: Option<PathBuf>,
}

impl ProxyRule {
    /// The client that reaches upstream `u` of this rule: its credentials, CAs and `certs.d`,
    /// TLS unless `u` is `http://`, the cache's retry policy. Fails naming a CA or `certs.d`
    /// file that cannot be read.
    pub fn client_for(&self, u: &Upstream) -> Result<Client, ClientError> {
        let keychain = match &self.auth_file {
            // Only the configured file: a server never reads its user's docker config.
            Some(f) => Keychain::from_env(Some(f), &AuthEnv::default()),
            None => Keychain::empty(),
        };
        let mut b = Client::builder()
            .plain_http(u.plain_http())
            .tls(!u.plain_http())
            .insecure(self.insecure)
            .keychain(keychain)
            .retry(UPSTREAM_RETRY)
            .timeout(UPSTREAM_TIMEOUT);
        for f in &self.ca_files {
            b = b.ca_file(f);
        }
        b = if self.cert_dirs.is_empty() {
            b.cert_dirs(registry_client::DEFAULT_CERT_DIRS.iter().map(PathBuf::from))
        } else {
            b.cert_dirs(self.cert_dirs.iter().cloned())
        };
        b.build()
    }
}

/// Pairs of rules with upstreams that reach the same repositories of one host (see
/// [`Upstream::overlaps`]), each as a sentence naming both rules and upstreams. A containerd
/// mirror request (`?ns=HOST`) for such a repository goes to the first rule in file order:
/// that is documented, not refused, because one upstream under two rules is a legitimate
/// setup (other credentials or another `only_signed` policy per local prefix).
pub fn mirror_ambiguities(rules: &[ProxyRule]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, first) in rules.iter().enumerate() {
        for later in &rules[i + 1..] {
            for u in &later.upstreams {
                if let Some(f) = first.upstreams.iter().find(|f| f.overlaps(u)) {
                    found.push(format!(
                        "[[proxy]] {:?} upstream {f} and [[proxy]] {:?} upstream {u} reach the same repositories; ?ns= requests for them go to {:?}",
                        first.prefix, later.prefix, first.prefix
                    ));
                }
            }
        }
    }
    found
}

/// How a blob fetch ended: `None` while it runs, then `Ok` or why it failed.
type FetchEnd = Option<Result<(), String>>;

/// A rule with a client per upstream (or why it could not be built).
#[derive(Debug)]
struct Routed {
    rule: ProxyRule,
    clients: Vec<Result<Client, String>>,
    /// The rule's `only_signed` policy, loaded at start (or why it could not be: then every
    /// fetch from an upstream is refused with that reason).
    policy: Option<Result<SignaturePolicy, String>>,
}

impl Routed {
    /// Each upstream with its client, in order.
    fn upstreams(&self) -> impl Iterator<Item = (&Upstream, &Result<Client, String>)> {
        self.rule.upstreams.iter().zip(&self.clients)
    }
}

/// The pull-through cache of one registry process.
#[derive(Debug)]
pub(crate) struct Proxy {
    rules: Vec<Arc<Routed>>,
    /// When each `(repository, tag)` was last revalidated.
    checked: Mutex<HashMap<(String, String), Instant>>,
    /// Blob fetches under way, by digest: a receiver that turns `Some` when the fetch ended
    /// (`Ok` or the reason it failed).
    inflight: Mutex<HashMap<Digest, tokio::sync::watch::Receiver<FetchEnd>>>,
    /// For `only_signed` rules: `(repository, digest)` of the manifests and blobs an admitted
    /// (or cached) manifest names, which may then be fetched from the upstreams.
    admitted: Mutex<HashSet<(String, Digest)>>,
    /// Each upstream's last referrers answer, by `(repository, subject, upstream number)`.
    listed: Mutex<HashMap<(String, Digest, usize), Listed>>,
}

/// One upstream's referrers of one subject, as last asked.
#[derive(Debug, Clone)]
struct Listed {
    /// When the upstream was last asked.
    asked: Instant,
    /// Whether that failed (then `manifests` is the answer before, if any).
    failed: bool,
    /// The descriptors it listed.
    manifests: Option<Vec<serde_json::Value>>,
}

impl Listed {
    /// Whether the upstream need not be asked again yet.
    fn fresh(&self, ttl: Duration) -> bool {
        let for_ = if self.failed {
            ttl.min(REFERRERS_RETRY_AFTER)
        } else {
            ttl
        };
        self.asked.elapsed() < for_
    }
}

/// What the upstreams answered for a manifest.
enum Fetched {
    /// Verified bytes from `upstream` (the rule's upstream number `index`).
    Found {
        index: usize,
        upstream: String,
        digest: Digest,
        bytes: Bytes,
        checked: Box<crate::manifest_rules::CheckedManifest>,
    },
    /// Every upstream answered "not found".
    Missing,
    /// Some upstream failed (down, refused, bad content): each one's error.
    Failed(Vec<String>),
}

impl Proxy {
    /// A cache over `rules`; `None` without rules. An upstream whose client cannot be built
    /// (the configuration check reports that at start) fails each fetch with that reason.
    pub(crate) fn new(rules: Vec<ProxyRule>) -> Option<Arc<Proxy>> {
        if rules.is_empty() {
            return None;
        }
        for a in mirror_ambiguities(&rules) {
            tracing::warn!(ambiguity = %a, "[[proxy]] rules share an upstream host; mirror requests (?ns=) go to the first");
        }
        let rules = rules
            .into_iter()
            .map(|rule| {
                let clients = rule
                    .upstreams
                    .iter()
                    .map(|u| {
                        rule.client_for(u)
                            .map_err(|e| format!("{u}: {}", error_chain(&e)))
                    })
                    .collect();
                let policy = rule.only_signed.as_ref().map(|p| {
                    SignaturePolicy::load(p).map_err(|e| {
                        format!("only_signed policy {}: {}", p.display(), error_chain(&e))
                    })
                });
                Arc::new(Routed {
                    rule,
                    clients,
                    policy,
                })
            })
            .collect();
        Some(Arc::new(Proxy {
            rules,
            checked: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            admitted: Mutex::new(HashSet::new()),
            listed: Mutex::new(HashMap::new()),
        }))
    }

    /// The rule for a local repository and the name at the upstreams.
    fn route(&self, name: &Name) -> Option<(&Arc<Routed>, String)> {
        self.rules.iter().find_map(|r| {
            let rest = name
                .as_str()
                .strip_prefix(&r.rule.prefix)?
                .strip_prefix('/')?;
            Some((r, rest.to_owned()))
        })
    }

    /// The local repository a containerd mirror request for `name` with `ns=host` means:
    /// `PREFIX/REST` of the rule with an upstream at `host` whose repository prefix `name`
    /// is under (`REST` is `name` without that prefix). Hosts are compared in canonical
    /// spelling (`Docker.IO`, `index.docker.io` and `registry-1.docker.io` are `docker.io`);
    /// the error names the host asked for and never the configured upstreams (it is answered
    /// before authentication).
    pub(crate) fn local_name_for_namespace(
        &self,
        host: &str,
        name: &str,
    ) -> Result<String, String> {
        let want = RegistryHost::parse(host).map_err(|e| format!("ns={host:?}: {e}"))?;
        for r in &self.rules {
            for u in r.rule.upstreams.iter().filter(|u| u.host() == want) {
                let rest = match &u.prefix {
                    None => Some(name),
                    Some(p) => name
                        .strip_prefix(p.as_str())
                        .and_then(|n| n.strip_prefix('/')),
                };
                if let Some(rest) = rest {
                    return Ok(format!("{}/{rest}", r.rule.prefix));
                }
            }
        }
        // The upstreams are internal hosts: the log names them, the (unauthenticated) caller
        // learns only that the ns it asked for is not served.
        let served: Vec<String> = self
            .rules
            .iter()
            .flat_map(|r| r.rule.upstreams.iter().map(|u| u.to_string()))
            .collect();
        tracing::debug!(ns = %host, repository = %name, upstreams = %served.join(", "), "mirror request for a host no [[proxy]] rule serves");
        Err(format!(
            "ns={host:?}: this registry mirrors no repository {name:?} of {want}"
        ))
    }

    /// GET a manifest at the upstreams in order; the first whose answer verifies wins.
    async fn fetch_manifest(
        &self,
        routed: &Routed,
        remote: &str,
        reference: &str,
        limit: u64,
    ) -> Fetched {
        let mut errors = Vec::new();
        for (index, (u, client)) in routed.upstreams().enumerate() {
            let client = match client {
                Ok(c) => c,
                Err(e) => {
                    errors.push(e.clone());
                    continue;
                }
            };
            let r = match u.reference(remote, reference) {
                Ok(r) => r,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let (desc, bytes) = match client.get_manifest(&r).await {
                Ok(found) => found,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => {
                    if e.kind() == ErrorKind::Verify {
                        tracing::warn!(upstream = %u, reference = %r, error = %error_chain(&e), "upstream sent a manifest that does not match its digest; not cached, trying the next upstream");
                    }
                    errors.push(format!("{u}: {}", error_chain(&e)));
                    continue;
                }
            };
            if bytes.len() as u64 > limit {
                errors.push(format!(
                    "{u}: manifest {} is {} bytes, more than this registry accepts ({limit})",
                    desc.digest,
                    bytes.len()
                ));
                continue;
            }
            let media_type = (!desc.media_type.is_empty()).then_some(desc.media_type.as_str());
            match crate::manifest_rules::check_document(&bytes, media_type) {
                Ok(checked) => {
                    return Fetched::Found {
                        index,
                        upstream: u.to_string(),
                        digest: desc.digest,
                        bytes,
                        checked: Box::new(checked),
                    };
                }
                Err(e) => {
                    tracing::warn!(upstream = %u, reference = %r, error = %e.detail, "upstream sent a manifest this registry refuses; not cached, trying the next upstream");
                    errors.push(format!(
                        "{u}: {} is not a valid manifest: {}",
                        desc.digest, e.detail
                    ));
                }
            }
        }
        if errors.is_empty() {
            Fetched::Missing
        } else {
            Fetched::Failed(errors)
        }
    }

    /// Makes sure `name` has the manifest `reference` names when the repository is proxied:
    /// fetches a digest it lacks, revalidates a tag whose check is older than the TTL (a
    /// failed revalidation keeps the cached tag; with nothing cached it is a 503 naming the
    /// upstreams). Does nothing for other repositories.
    pub(crate) async fn ensure_manifest(
        &self,
        repos: &Repos,
        name: &Name,
        reference: &str,
        limit: u64,
    ) -> ApiResult<()> {
        let Some((routed, remote)) = self.route(name) else {
            return Ok(());
        };
        let tag = if reference.contains(':') {
            let Ok(d) = Digest::parse(reference) else {
                return Ok(()); // the handler refuses it
            };
            if repos.manifest_link(name, &d).await?.is_some() {
                self.note_cached(routed, repos, name, &d, limit).await;
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
                .is_some_and(|at| at.elapsed() < routed.rule.tag_ttl);
            if fresh && let Some(target) = repos.resolve_tag_target(name, &t).await? {
                self.note_cached(routed, repos, name, &target.digest, limit)
                    .await;
                return Ok(());
            }
            Some(t)
        };
        let (index, upstream, digest, bytes, checked) = match self
            .fetch_manifest(routed, &remote, reference, limit)
            .await
        {
            Fetched::Found {
                index,
                upstream,
                digest,
                bytes,
                checked,
            } => (index, upstream, digest, bytes, checked),
            Fetched::Missing => {
                tracing::debug!(repository = %name, reference, "not at any upstream");
                return Ok(());
            }
            Fetched::Failed(errors) => {
                let errors = errors.join("; ");
                let cached = match &tag {
                    Some(t) => repos.resolve_tag_target(name, t).await?.is_some(),
                    None => false,
                };
                if cached {
                    tracing::warn!(repository = %name, reference, error = %errors, "upstreams unavailable; serving the cache");
                    return Ok(());
                }
                tracing::warn!(repository = %name, reference, error = %errors, "upstreams unavailable and nothing cached");
                return Err(ApiError::new(
                        Code::Unavailable,
                        format!(
                            "{name}:{reference} is not cached and its upstreams could not supply it: {errors}"
                        ),
                    )
                    .with_reason());
            }
        };
        if routed.policy.is_some() {
            // `only_signed`: decided before anything of it is stored.
            self.admit(
                routed,
                repos,
                name,
                &remote,
                index,
                tag.as_ref(),
                &digest,
                &checked,
            )
            .await?;
        }
        repos.put_manifest_bytes(&digest, bytes.clone()).await?;
        let link = ManifestLink {
            media_type: checked.media_type.clone(),
            size: bytes.len() as u64,
            subject: checked.subject.clone(),
        };
        repos.link_manifest(name, &digest, &link).await?;
        if let Some(subject) = &checked.subject {
            // Listed under its subject as a pushed referrer is.
            repos
                .add_referrer(
                    name,
                    subject,
                    &digest,
                    descriptor(&checked, &digest, bytes.len()),
                )
                .await?;
        }
        if let Some(t) = &tag {
            // The cache follows its upstream: `[[immutable]]` rules govern pushes, not this.
            repos.set_tag(name, t, &digest, &link, None).await?;
            self.checked.lock().expect("proxy tag checks").insert(
                (name.as_str().to_owned(), t.as_str().to_owned()),
                Instant::now(),
            );
        }
        tracing::info!(repository = %name, reference, %digest, %upstream, "manifest cached from upstream");
        Ok(())
    }

    /// Whether `(name, d)` was admitted in this process (an admitted manifest, or a blob or
    /// platform manifest one names).
    fn is_admitted(&self, name: &Name, d: &Digest) -> bool {
        self.admitted
            .lock()
            .expect("proxy admissions")
            .contains(&(name.as_str().to_owned(), d.clone()))
    }

    /// Records manifest `d` of `name` as admitted, with the blobs and platform manifests it
    /// names.
    fn record(&self, name: &Name, d: &Digest, checked: &crate::manifest_rules::CheckedManifest) {
        let mut admitted = self.admitted.lock().expect("proxy admissions");
        for x in std::iter::once(d)
            .chain(&checked.blobs)
            .chain(&checked.manifests)
        {
            admitted.insert((name.as_str().to_owned(), x.clone()));
        }
    }

    /// For an `only_signed` rule: a manifest the cache holds (stored before, so admitted then,
    /// or before the rule had `only_signed`) is served as it is, and what it names may be
    /// fetched. Best effort: a manifest that cannot be read records nothing.
    async fn note_cached(
        &self,
        routed: &Routed,
        repos: &Repos,
        name: &Name,
        d: &Digest,
        limit: u64,
    ) {
        if routed.policy.is_none() || self.is_admitted(name, d) {
            return;
        }
        let Ok(Some(link)) = repos.manifest_link(name, d).await else {
            return;
        };
        let Ok(bytes) = repos.manifest_bytes(d, limit.max(link.size)).await else {
            return;
        };
        if let Ok(checked) =
            crate::manifest_rules::check_document(&bytes, Some(link.media_type.as_str()))
        {
            self.record(name, d, &checked);
        }
    }

    /// `only_signed`: admits manifest `digest` of `name` (fetched from upstream `index`) or
    /// answers `403 DENIED` naming the rule, the image, the keys tried and why:
    /// - cosign's `.sig`/`.att`/`.sbom` tags and the tag schema's `sha256-<hex>` tags, and any
    ///   manifest with a `subject` (cosign v3 bundles, SBOMs), are admitted when the image
    ///   they belong to is: without them no client could verify anything;
    /// - a manifest an admitted index lists (a platform's) is admitted with it;
    /// - any other manifest must verify under the rule's policy ([`check_signed`] at the
    ///   upstream that served it; an index by its own digest, as cosign signs it).
    #[allow(clippy::too_many_arguments)]
    async fn admit(
        &self,
        routed: &Routed,
        repos: &Repos,
        name: &Name,
        remote: &str,
        index: usize,
        tag: Option<&Tag>,
        digest: &Digest,
        checked: &crate::manifest_rules::CheckedManifest,
    ) -> ApiResult<()> {
        let belongs_to = match (tag, &checked.subject) {
            (_, Some(subject)) => Some(subject.clone()),
            (Some(t), None) if registry_client::manage::tag_name_kind(t.as_str()).is_some() => {
                let base = t.as_str().split('.').next().unwrap_or_default();
                base.split_once('-')
                    .and_then(|(alg, hex)| Digest::parse(&format!("{alg}:{hex}")).ok())
            }
            _ => None,
        };
        let image = belongs_to.as_ref().unwrap_or(digest);
        let admitted = self.is_admitted(name, image)
            || repos.manifest_link(name, image).await?.is_some()
            || (belongs_to.is_none() && !repos.indexes_listing(name, image, 1).await?.is_empty());
        if !admitted {
            self.check(routed, name, remote, index, image).await?;
        }
        self.admitted
            .lock()
            .expect("proxy admissions")
            .insert((name.as_str().to_owned(), image.clone()));
        self.record(name, digest, checked);
        Ok(())
    }

    /// [`check_signed`] of `digest` at upstream `index` of the rule; a refusal is `403
    /// DENIED`, a policy that could not be loaded too, signatures that could not be read
    /// `503 UNAVAILABLE`.
    async fn check(
        &self,
        routed: &Routed,
        name: &Name,
        remote: &str,
        index: usize,
        digest: &Digest,
    ) -> ApiResult<()> {
        let prefix = &routed.rule.prefix;
        let denied = |why: String| {
            tracing::warn!(repository = %name, %digest, rule = %prefix, reason = %why, "only_signed: refused; nothing cached");
            ApiError::new(
                Code::Denied,
                format!("[[proxy]] {prefix:?} only_signed refused {name}@{digest}: {why}"),
            )
            .with_reason()
        };
        let policy = match &routed.policy {
            Some(Ok(p)) => p,
            Some(Err(e)) => return Err(denied(e.clone())),
            None => return Ok(()),
        };
        let (u, client) = routed
            .upstreams()
            .nth(index)
            .expect("the upstream that served the manifest");
        let client = client.as_ref().map_err(|e| denied(e.clone()))?;
        let r = u
            .reference(remote, digest.as_str())
            .map_err(|e| denied(e.clone()))?;
        match check_signed(client, policy, &r, digest).await {
            Ok(a) => {
                tracing::info!(repository = %name, %digest, rule = ?a.rule, keys = ?a.keys, "only_signed: admitted");
                Ok(())
            }
            Err(SignedCheckError::Refused(refusal)) => {
                Err(denied(format!("{} ({})", refusal, refusal.reason)))
            }
            Err(e) => {
                let why = error_chain(&e);
                tracing::warn!(repository = %name, %digest, error = %why, "only_signed: signatures unreadable; nothing cached");
                Err(ApiError::new(
                    Code::Unavailable,
                    format!(
                        "[[proxy]] {prefix:?} only_signed could not check {name}@{digest}: {why}"
                    ),
                )
                .with_reason())
            }
        }
    }

    /// The referrers of `subject` in a proxied repository: `cached` (what the store lists)
    /// merged with what each upstream lists, cached entries first, one entry per digest. Each
    /// upstream's answer is kept for the rule's `tag_ttl_secs` (so repeated listings do not
    /// reach the upstreams again); an upstream that cannot be asked within
    /// [`REFERRERS_TIMEOUT`] is logged and contributes its last answer (or nothing), and is
    /// not asked again for that subject for [`REFERRERS_RETRY_AFTER`]: the listing never fails
    /// or stalls for it. `None` for repositories that are not proxied.
    pub(crate) async fn referrers(
        &self,
        name: &Name,
        subject: &Digest,
        cached: Vec<serde_json::Value>,
    ) -> Option<Vec<serde_json::Value>> {
        let (routed, remote) = self.route(name)?;
        let ttl = routed.rule.tag_ttl;
        let mut merged = cached;
        for (index, (u, client)) in routed.upstreams().enumerate() {
            let key = (name.as_str().to_owned(), subject.clone(), index);
            let last = self.listed.lock().unwrap().get(&key).cloned();
            let listed = match last {
                Some(l) if l.fresh(ttl) => l.manifests.unwrap_or_default(),
                last => {
                    let stale = last.and_then(|l| l.manifests);
                    let entry = match self.ask_referrers(u, client, &remote, subject).await {
                        Ok(list) => Listed {
                            asked: Instant::now(),
                            failed: false,
                            manifests: Some(list),
                        },
                        Err(e) => {
                            tracing::warn!(repository = %name, %subject, upstream = %u, error = %e, "upstream referrers unavailable; listing the cached ones");
                            Listed {
                                asked: Instant::now(),
                                failed: true,
                                manifests: stale,
                            }
                        }
                    };
                    let list = entry.manifests.clone().unwrap_or_default();
                    self.remember_listed(key, entry);
                    list
                }
            };
            for v in listed {
                let digest = v.get("digest").and_then(|d| d.as_str());
                let known = merged
                    .iter()
                    .any(|m| m.get("digest").and_then(|d| d.as_str()) == digest);
                if !known {
                    merged.push(v);
                }
            }
        }
        Some(merged)
    }

    /// What upstream `u` lists as referrers of `subject` in `remote`, within
    /// [`REFERRERS_TIMEOUT`].
    async fn ask_referrers(
        &self,
        u: &Upstream,
        client: &Result<Client, String>,
        remote: &str,
        subject: &Digest,
    ) -> Result<Vec<serde_json::Value>, String> {
        let c = client.as_ref().map_err(Clone::clone)?;
        let r = u.reference(remote, subject.as_str())?;
        let list = tokio::time::timeout(REFERRERS_TIMEOUT, c.referrers(&r, subject))
            .await
            .map_err(|_| format!("no answer within {REFERRERS_TIMEOUT:?}"))?
            .map_err(|e| error_chain(&e))?;
        Ok(list
            .manifests
            .iter()
            .filter_map(|m| serde_json::to_value(m).ok())
            .collect())
    }

    /// Keeps an upstream's referrers answer, dropping the oldest when [`REFERRERS_CACHED`]
    /// are kept.
    fn remember_listed(&self, key: (String, Digest, usize), entry: Listed) {
        let mut listed = self.listed.lock().unwrap();
        if listed.len() >= REFERRERS_CACHED
            && !listed.contains_key(&key)
            && let Some(oldest) = listed
                .iter()
                .min_by_key(|(_, l)| l.asked)
                .map(|(k, _)| k.clone())
        {
            listed.remove(&oldest);
        }
        listed.insert(key, entry);
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
        let Some((routed, remote)) = self.route(name) else {
            return Ok(None);
        };
        if routed.policy.is_some() && !self.is_admitted(name, d) {
            // `only_signed`: only the blobs of manifests admitted (or cached) here.
            let why = format!(
                "[[proxy]] {:?} only_signed: blob {d} is not part of an image admitted in {name} \
                 (request its manifest first; a signed image's blobs are fetched after it)",
                routed.rule.prefix
            );
            tracing::warn!(repository = %name, digest = %d, "only_signed: blob of no admitted image; not fetched");
            return Err(ApiError::new(Code::Denied, why).with_reason());
        }
        let routed = Arc::clone(routed);
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
        // This request fetches: the first upstream that has the blob streams it.
        let mut errors = Vec::new();
        let Some(first) = open_blob(&routed, 0, &remote, d, &mut errors).await else {
            let e = errors.join("; ");
            self.finish(d, &done, Err(e.clone()));
            return Err(unavailable(name, d, &e));
        };
        let size = first.size;
        let (tx, body_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
        let client = stream_to_caller.then_some(tx);
        let me = Arc::clone(self);
        let (repos, name2, d2) = (repos.clone(), name.clone(), d.clone());
        tokio::spawn(async move {
            let mut errors = errors;
            let mut next = Some(first);
            let mut client = client;
            let mut result = Err(String::new());
            while let Some(open) = next.take() {
                let index = open.index;
                match me
                    .store_blob(&repos, &name2, &d2, open, client.take())
                    .await
                {
                    Ok(()) => {
                        result = Ok(());
                        break;
                    }
                    Err(e) => {
                        // Bad bytes (or a failed transfer) from this upstream: the next one.
                        errors.push(e);
                        next = open_blob(&routed, index + 1, &remote, &d2, &mut errors).await;
                    }
                }
            }
            if result.is_err() {
                result = Err(errors.join("; "));
            }
            me.finish(&d2, &done, result);
        });
        if !stream_to_caller {
            return fetched(rx, name, d).await;
        }
        let stream = futures_util::stream::unfold(body_rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let r = Response::builder()
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header("docker-content-digest", d.as_str())
            .header(header::CONTENT_LENGTH, size)
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

    /// Writes an upstream's blob through an upload (verified on commit, then linked into the
    /// repository), passing each chunk on to `client` one chunk behind; the last chunk goes to
    /// the client only after the commit verified the digest, else the client's body fails.
    async fn store_blob(
        &self,
        repos: &Repos,
        name: &Name,
        d: &Digest,
        open: OpenBlob,
        client: Option<tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>>,
    ) -> Result<(), String> {
        let held: Arc<Mutex<Option<Bytes>>> = Arc::new(Mutex::new(None));
        let upload = repos
            .start_upload(name, Some(d.algorithm()))
            .await
            .map_err(|e| format!("starting the upload of {d}: {}", e.detail))?;
        let (h, c) = (held.clone(), client.clone());
        let upstream = open.upstream.clone();
        let body = tokio_util::io::ReaderStream::new(open.reader).then(move |item| {
            let (h, c, upstream) = (h.clone(), c.clone(), upstream.clone());
            async move {
                let b = item.map_err(|e| format!("{upstream}: {}", error_chain(&e)))?;
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
            .map_err(|e| format!("{}: {}", open.upstream, e.detail));
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
            Ok(()) => {
                tracing::info!(repository = %name, digest = %d, upstream = %open.upstream, "blob cached from upstream")
            }
            Err(e) => {
                tracing::warn!(repository = %name, digest = %d, error = %e, "blob from upstream refused; not cached")
            }
        }
        r
    }
}

/// The descriptor a referrers listing shows for a cached manifest with a subject.
fn descriptor(
    checked: &crate::manifest_rules::CheckedManifest,
    digest: &Digest,
    size: usize,
) -> serde_json::Value {
    let mut desc = serde_json::json!({
        "mediaType": checked.media_type,
        "digest": digest.as_str(),
        "size": size,
    });
    if let Some(t) = &checked.artifact_type {
        desc["artifactType"] = serde_json::Value::String(t.clone());
    }
    if let Some(a) = &checked.annotations {
        desc["annotations"] = a.clone();
    }
    desc
}

/// An upstream's blob body, not yet verified (the upload verifies it).
struct OpenBlob {
    /// Which upstream of the rule (its index) and how it prints.
    index: usize,
    upstream: String,
    size: u64,
    reader: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
}

/// Opens blob `d` at the first upstream from `from` on that has it (its size from a HEAD, then
/// a GET that resumes a cut body); what each upstream that could not answered goes to
/// `errors` ("not found" included, so the final message names every upstream).
async fn open_blob(
    routed: &Routed,
    from: usize,
    remote: &str,
    d: &Digest,
    errors: &mut Vec<String>,
) -> Option<OpenBlob> {
    for (index, (u, client)) in routed.upstreams().enumerate().skip(from) {
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                errors.push(e.clone());
                continue;
            }
        };
        let repo = match Name::parse(&u.repository(remote)) {
            Ok(n) => n,
            Err(e) => {
                errors.push(format!("{u}: {e}"));
                continue;
            }
        };
        let host = u.host();
        let size = match client.blob_exists(host.as_str(), &repo, d).await {
            Ok(Some(size)) => size,
            Ok(None) => {
                errors.push(format!("{u}: blob not found"));
                continue;
            }
            Err(e) => {
                errors.push(format!("{u}: {}", error_chain(&e)));
                continue;
            }
        };
        match client.get_blob_from(host.as_str(), &repo, d, 0).await {
            Ok((_, reader)) => {
                return Some(OpenBlob {
                    index,
                    upstream: u.to_string(),
                    size,
                    reader,
                });
            }
            Err(e) => errors.push(format!("{u}: {}", error_chain(&e))),
        }
    }
    None
}

fn unavailable(name: &Name, d: &Digest, why: &str) -> ApiError {
    let all_missing = why.split("; ").all(|e| e.ends_with(": blob not found"));
    let code = if all_missing {
        Code::BlobUnknown
    } else {
        Code::Unavailable
    };
    ApiError::new(
        code,
        format!("blob {d} is not in {name} and its upstreams could not supply it: {why}"),
    )
    .with_reason()
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

    fn rule(prefix: &str, upstreams: &[&str]) -> ProxyRule {
        ProxyRule {
            prefix: prefix.into(),
            upstreams: upstreams
                .iter()
                .map(|u| Upstream::parse(u).unwrap())
                .collect(),
            tag_ttl: Duration::from_secs(1),
            auth_file: None,
            ca_files: Vec::new(),
            cert_dirs: Vec::new(),
            insecure: false,
            only_signed: None,
        }
    }

    #[test]
    fn upstreams_parse_and_routes_strip_the_prefix() {
        let u = Upstream::parse("http://127.0.0.1:5000/zones/").unwrap();
        assert_eq!(u.base, "http://127.0.0.1:5000");
        assert_eq!(u.repository("apps/web"), "zones/apps/web");
        assert_eq!(
            u.reference("apps/web", "1").unwrap().to_string(),
            "127.0.0.1:5000/zones/apps/web:1"
        );
        assert_eq!(Upstream::parse("https://reg.example").unwrap().prefix, None);
        for bad in [
            "reg.example",
            "ftp://x",
            "http://",
            "http://h/UPPER",
            "http://h:99999",
        ] {
            assert!(Upstream::parse(bad).is_err(), "{bad}");
        }
        let p = Proxy::new(vec![rule("central", &["http://127.0.0.1:5000/zones/"])]).unwrap();
        let n = Name::parse("central/apps/web").unwrap();
        assert_eq!(p.route(&n).map(|(_, r)| r), Some("apps/web".to_owned()));
        assert!(p.route(&Name::parse("centralx/a").unwrap()).is_none());
        assert!(p.route(&Name::parse("central").unwrap()).is_none());
    }

    #[test]
    fn mirror_namespaces_map_to_rules_by_canonical_host() {
        let p = Proxy::new(vec![
            rule("hub", &["https://registry-1.docker.io"]),
            rule(
                "local",
                &["http://LocalHost:5000", "https://quay.io:443/team"],
            ),
        ])
        .unwrap();
        for (ns, name, local) in [
            ("docker.io", "library/nginx", "hub/library/nginx"),
            ("index.docker.io", "library/nginx", "hub/library/nginx"),
            ("Docker.IO", "a", "hub/a"),
            ("localhost:5000", "apps/web", "local/apps/web"),
            ("quay.io", "team/app", "local/app"),
            ("quay.io:443", "team/x/y", "local/x/y"),
        ] {
            assert_eq!(
                p.local_name_for_namespace(ns, name).as_deref(),
                Ok(local),
                "{ns} {name}"
            );
        }
        // Answered before authentication: names the ns asked for, never an upstream.
        let e = p.local_name_for_namespace("ghcr.io", "a").unwrap_err();
        assert!(e.contains("ghcr.io"), "{e}");
        for internal in [
            "docker.io",
            "LocalHost",
            "localhost",
            "5000",
            "quay.io",
            "team",
        ] {
            assert!(!e.contains(internal), "{internal} disclosed: {e}");
        }
        // Not under the upstream's prefix: not that upstream's repository.
        assert!(p.local_name_for_namespace("quay.io", "other/app").is_err());
        assert!(p.local_name_for_namespace("bad host", "a").is_err());
    }

    #[test]
    fn rules_sharing_an_upstream_host_are_reported_and_the_first_serves_ns() {
        let overlap = |a: &str, b: &str| {
            Upstream::parse(a)
                .unwrap()
                .overlaps(&Upstream::parse(b).unwrap())
        };
        assert!(overlap("https://quay.io", "https://quay.io:443/team"));
        assert!(overlap("https://quay.io/team", "https://quay.io/team/sub"));
        assert!(overlap(
            "https://index.docker.io",
            "https://registry-1.docker.io"
        ));
        assert!(!overlap("https://quay.io/team", "https://quay.io/teams"));
        assert!(!overlap("https://quay.io/a", "https://quay.io/b"));
        assert!(!overlap("http://h:5000", "http://h:5001"));
        let rules = vec![
            rule("signed", &["https://reg.example/apps"]),
            rule("other", &["https://quay.io/b"]),
            rule("all", &["https://quay.io/a", "https://reg.example"]),
        ];
        let found = mirror_ambiguities(&rules);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("\"signed\"")
                && found[0].contains("\"all\"")
                && found[0].contains("https://reg.example/apps"),
            "{found:?}"
        );
        // First in file order wins for ?ns=; disjoint prefixes at one host stay distinct.
        let p = Proxy::new(rules).unwrap();
        assert_eq!(
            p.local_name_for_namespace("reg.example", "apps/web")
                .as_deref(),
            Ok("signed/web")
        );
        assert_eq!(
            p.local_name_for_namespace("reg.example", "x/web")
                .as_deref(),
            Ok("all/x/web")
        );
        assert_eq!(
            p.local_name_for_namespace("quay.io", "a/x").as_deref(),
            Ok("all/x")
        );
        assert_eq!(
            p.local_name_for_namespace("quay.io", "b/x").as_deref(),
            Ok("other/x")
        );
    }

    #[test]
    fn kept_referrers_answers_are_bounded() {
        let p = Proxy::new(vec![rule("c", &["http://127.0.0.1:5000"])]).unwrap();
        let at = Instant::now();
        for i in 0..REFERRERS_CACHED + 10 {
            let d = Digest::parse(&format!("sha256:{i:064x}")).unwrap();
            p.remember_listed(
                ("c/a".to_owned(), d, 0),
                Listed {
                    asked: at + Duration::from_millis(i as u64),
                    failed: false,
                    manifests: Some(Vec::new()),
                },
            );
        }
        let listed = p.listed.lock().unwrap();
        assert_eq!(listed.len(), REFERRERS_CACHED);
        // The oldest went first.
        let first = Digest::parse(&format!("sha256:{:064x}", 0)).unwrap();
        assert!(!listed.contains_key(&("c/a".to_owned(), first, 0)));
    }

    #[test]
    fn a_bad_ca_file_names_the_file() {
        let mut r = rule("c", &["https://reg.example"]);
        r.ca_files = vec![PathBuf::from("/nonexistent/ca.pem")];
        let e = error_chain(&r.client_for(&r.upstreams[0]).unwrap_err());
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}
