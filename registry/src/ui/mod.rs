//! The registry's web pages (`[ui] enabled`, on by default): server-rendered HTML with no
//! JavaScript and no outside fetches, for people who want to see inside the registry.
//!
//! - `/` and `/ui` redirect to `/ui/`, the repositories (a `?q=` filter, pages of
//!   [`PAGE`]).
//! - `/ui/r/<name>`: a repository's tags (digest, size, platform, age, signed), pages of
//!   [`PAGE`] tags.
//! - `/ui/r/<name>@<digest>` and `/ui/r/<name>:<tag>`: an image (its config, layers with the
//!   packages each came from, the SBOM's packages from the package index, its referrers), or
//!   an index with its platforms.
//! - `/ui/search?name=&version=`: the package search, through the same query parser and
//!   [`pkgindex::search`] as `GET /v2/_rd/packages`.
//! - `/ui/login`: asks a browser for Basic credentials.
//!
//! **Access.** With `[auth]`, every page authenticates the caller as the API does (Basic
//! against the htpasswd file, also when the API speaks Bearer tokens; or a bearer token), and
//! answers 401 with a Basic challenge when anonymous callers may see nothing. Pages show only
//! repositories the caller may pull (what the catalog lists), and a repository or image the
//! caller may not pull is 404, as one that does not exist, so no page tells which names exist.
//! Markup and escaping are in `html`; the data come from [`Repos`] and [`pkgindex`].

mod html;
mod pages;
pub(crate) mod rows;

use std::collections::{BTreeMap, BTreeSet};

pub(crate) use rows::{RepoRow, RowCache};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use futures_util::StreamExt;
use serde_json::Value;
use validator::{Digest, Name, Tag};

use crate::auth::Access;
use crate::errors::{ApiError, ApiResult, Code};
use crate::pkgindex::{self, Query};
use crate::repo::Repos;
use crate::state::AppState;
use crate::storage::layout;
use html::Who;

/// Rows per page of the repository list and of a repository's tags.
pub(crate) const PAGE: usize = 100;
/// Manifests and configs read at once for a tag page.
const CONCURRENCY: usize = 16;
/// The config label the builder writes the stop timeout under.
const STOP_TIMEOUT_LABEL: &str = "org.reddwarf.image.stop-timeout";

/// The web page routes (merged by [`crate::router`] when the UI is on).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/", get(|| async { Redirect::to("/ui/") }))
        .route("/ui", get(|| async { Redirect::to("/ui/") }))
        .route("/ui/", get(catalog))
        .route("/ui/search", get(search))
        .route("/ui/login", get(login))
        .route("/ui/r/{*rest}", get(repository_or_image))
        .route("/ui/{*rest}", get(unknown))
}

/// Who is looking: no `[auth]` (None) or an authenticated caller.
struct Viewer(Option<Access>);

impl Viewer {
    async fn of(state: &AppState, headers: &HeaderMap) -> Result<Viewer, Response> {
        crate::auth::http::ui_caller(state, headers)
            .await
            .map(Viewer)
    }

    /// Whether the caller may see `repo` (pull it).
    fn sees(&self, repo: &str) -> bool {
        self.0.as_ref().is_none_or(|a| a.lists(repo))
    }

    fn who(&self) -> Who<'_> {
        match &self.0 {
            None => Who::Open,
            Some(a) => a.user().map_or(Who::Anonymous, Who::User),
        }
    }
}

/// An HTML answer. Pages are never cached: they depend on the caller and change with pushes.
fn answer(status: StatusCode, html: String) -> Response {
    let mut r = (status, html).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // Defence in depth behind the escaping: no scripts, nothing from elsewhere.
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    r
}

/// The same 404 for what does not exist and what the caller may not see.
fn not_found(v: &Viewer) -> Response {
    answer(
        StatusCode::NOT_FOUND,
        html::page(
            "Not found",
            v.who(),
            "<p>There is no such page, or it is not yours to see.</p><p><a href=\"/ui/\">All repositories</a></p>",
        ),
    )
}

/// A store failure: logged in full, answered as a generic 500 page.
fn failed(v: &Viewer, e: ApiError) -> Response {
    tracing::error!(error = %e, "web page failed");
    answer(
        StatusCode::INTERNAL_SERVER_ERROR,
        html::page(
            "Something went wrong",
            v.who(),
            "<p>The registry could not read what this page shows; the registry's log says why.</p>",
        ),
    )
}

fn params(query: Option<&str>) -> Vec<(String, String)> {
    query
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default()
}

fn param<'a>(p: &'a [(String, String)], key: &str) -> Option<&'a str> {
    p.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The order of the repository list (`?sort=`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CatalogSort {
    /// By name, A to Z (the default; paged with `last=`).
    Name,
    /// Most tags first.
    Tags,
    /// Largest first (the sum of the distinct content of its tagged images).
    Size,
    /// Most recent push first.
    Pushed,
}

impl CatalogSort {
    fn parse(s: Option<&str>) -> CatalogSort {
        match s {
            Some("tags") => CatalogSort::Tags,
            Some("size") => CatalogSort::Size,
            Some("pushed") => CatalogSort::Pushed,
            _ => CatalogSort::Name,
        }
    }

    pub(crate) fn as_str(self) -> &'static str {
        match self {
            CatalogSort::Name => "name",
            CatalogSort::Tags => "tags",
            CatalogSort::Size => "size",
            CatalogSort::Pushed => "pushed",
        }
    }
}

/// The facts of one repository's row, from `cache` while its tag index is unchanged.
async fn repo_row(repos: &Repos, cache: &RowCache, name: String) -> ApiResult<RepoRow> {
    let Ok(n) = Name::parse(&name) else {
        return Ok(RepoRow {
            name,
            tags: 0,
            size: 0,
            pushed: None,
        });
    };
    let version = match repos.store().stat(&layout::tags(&n)).await {
        Ok(meta) => Some((meta.modified, meta.size)),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(row) = cache.get(&name, version) {
        return Ok(row);
    }
    let tags = repos.tag_map(&n).await?;
    let digests: BTreeSet<&Digest> = tags
        .iter()
        .filter(|(t, _)| !is_cosign_tag(t))
        .map(|(_, d)| d)
        .collect();
    let mut c = Counted::default();
    for d in &digests {
        if let Some(m) = read_manifest(repos, 16 << 20, d).await? {
            content_of(repos, d, &m, &mut c).await?;
        }
    }
    let row = RepoRow {
        tags: tags.iter().filter(|(t, _)| !is_cosign_tag(t)).count(),
        size: c.total(),
        pushed: version.and_then(|(m, _)| m.duration_since(UNIX_EPOCH).ok().map(|t| t.as_secs())),
        name: name.clone(),
    };
    // Kept under the stat read before the tags: a tag set meanwhile changes the stat, so the
    // next request sums the row up again.
    cache.insert(version, row.clone());
    Ok(row)
}

/// `GET /ui/?q=&sort=&last=|start=`: the repositories the caller may pull, filtered by `q`
/// (a part of the name), with their tag count, size and last push, sorted by `sort` (`name`,
/// `tags`, `size`, `pushed`). By name a page is read after `last`; in the other orders every
/// matching repository is summed up to sort them, and a page starts at `start`.
async fn catalog(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let v = match Viewer::of(&state, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let p = params(query.as_deref());
    let q = param(&p, "q").unwrap_or("").trim().to_lowercase();
    let sort = CatalogSort::parse(param(&p, "sort"));
    let repos = &state.app().repos;
    let all = match repos.catalog().await {
        Ok(a) => a,
        Err(e) => return failed(&v, e),
    };
    let shown: Vec<String> = all
        .into_iter()
        .filter(|r| v.sees(r) && (q.is_empty() || r.contains(&q)))
        .collect();
    let (names, start) = if sort == CatalogSort::Name {
        let (rows, _) = crate::handlers::page(shown.clone(), Some(PAGE), param(&p, "last"));
        (rows, 0)
    } else {
        let start = param(&p, "start")
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or(0);
        (shown.clone(), start)
    };
    let rows: Vec<ApiResult<RepoRow>> = futures_util::stream::iter(names)
        .map(|n| repo_row(repos, &state.app().ui_rows, n))
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let mut rows = match rows.into_iter().collect::<ApiResult<Vec<RepoRow>>>() {
        Ok(r) => r,
        Err(e) => return failed(&v, e),
    };
    let next = match sort {
        CatalogSort::Name => {
            let after = rows.last().map(|r| r.name.clone());
            let more = after.as_deref().is_some_and(|l| {
                let i = shown.partition_point(|x| x.as_str() <= l);
                i < shown.len()
            });
            after
                .filter(|_| more)
                .map(|l| format!("last={}", html::Q(&l)))
        }
        _ => {
            match sort {
                CatalogSort::Tags => rows.sort_by_key(|r| std::cmp::Reverse(r.tags)),
                CatalogSort::Size => rows.sort_by_key(|r| std::cmp::Reverse(r.size)),
                _ => rows.sort_by_key(|r| std::cmp::Reverse(r.pushed)),
            }
            let total = rows.len();
            rows = rows.into_iter().skip(start).take(PAGE).collect();
            (start + PAGE < total).then(|| format!("start={}", start + PAGE))
        }
    };
    answer(
        StatusCode::OK,
        html::page(
            "Repositories",
            v.who(),
            &pages::catalog(&q, sort, &rows, next.as_deref(), now()),
        ),
    )
}

/// `GET /ui/login[?next=/ui/...]`: a 401 Basic challenge until the browser sends
/// credentials, then on to `next` (a page of this UI only) or the repositories.
async fn login(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let p = params(query.as_deref());
    // Only a path of these pages: never another host (`//host`, `/\host`).
    let next = param(&p, "next")
        .filter(|n| n.starts_with("/ui/") && !n.contains("//") && !n.contains('\\'))
        .unwrap_or("/ui/");
    match Viewer::of(&state, &headers).await {
        Ok(v) if matches!(v.who(), Who::Anonymous) => {
            crate::auth::http::ui_login_challenge(&state).unwrap_or_else(|| not_found(&v))
        }
        Ok(_) => Redirect::to(next).into_response(),
        Err(r) => r,
    }
}

async fn unknown(State(state): State<AppState>, headers: HeaderMap) -> Response {
    match Viewer::of(&state, &headers).await {
        Ok(v) => not_found(&v),
        Err(r) => r,
    }
}

/// What `/ui/r/<rest>` names.
#[derive(Debug, PartialEq)]
enum Target {
    Repository(String),
    ByDigest(String, String),
    ByTag(String, String),
}

impl Target {
    /// `name`, `name@digest` or `name:tag` (names hold neither `@` nor `:`).
    fn parse(rest: &str) -> Target {
        let rest = rest.trim_end_matches('/');
        if let Some((n, d)) = rest.split_once('@') {
            return Target::ByDigest(n.to_owned(), d.to_owned());
        }
        let last = rest.rsplit('/').next().unwrap_or(rest);
        if let Some((_, t)) = last.split_once(':') {
            let n = &rest[..rest.len() - t.len() - 1];
            return Target::ByTag(n.to_owned(), t.to_owned());
        }
        Target::Repository(rest.to_owned())
    }

    fn name(&self) -> &str {
        match self {
            Target::Repository(n) | Target::ByDigest(n, _) | Target::ByTag(n, _) => n,
        }
    }
}

async fn repository_or_image(
    State(state): State<AppState>,
    Path(rest): Path<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let v = match Viewer::of(&state, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let target = Target::parse(&rest);
    // Checked before anything is read: a name the caller may not pull is 404 like a missing one.
    let Some(name) = Name::parse(target.name())
        .ok()
        .filter(|n| v.sees(n.as_str()))
    else {
        return not_found(&v);
    };
    let repos = &state.app().repos;
    let r = match target {
        Target::Repository(_) => {
            let p = params(query.as_deref());
            let host = pull_host(&headers);
            let keys = state.app().config.ui_trusted_keys.clone();
            repository(repos, &keys, &name, &host, param(&p, "last")).await
        }
        Target::ByDigest(_, d) => match Digest::parse(&d) {
            Ok(d) => image(&state, &name, d).await,
            Err(_) => Ok(None),
        },
        Target::ByTag(_, t) => match Tag::parse(&t) {
            Ok(t) => match repos.resolve_tag_target(&name, &t).await {
                Ok(Some(target)) => image(&state, &name, target.digest).await,
                Ok(None) => Ok(None),
                Err(e) => Err(e),
            },
            Err(_) => Ok(None),
        },
    };
    match r {
        Ok(Some((title, body))) => answer(StatusCode::OK, html::page(&title, v.who(), &body)),
        Ok(None) => not_found(&v),
        Err(e) => failed(&v, e),
    }
}

/// One tag page's facts about a manifest.
#[derive(Debug, Clone, Default)]
pub(crate) struct Summary {
    pub size: u64,
    pub platforms: Vec<String>,
    /// `created` of the config (or the index's annotation), in seconds since 1970.
    pub created: Option<u64>,
    pub index: bool,
}

/// A manifest or index, parsed, with its config when it is an image.
struct Manifest {
    doc: Value,
    bytes: u64,
    config: Option<Value>,
}

fn is_index(doc: &Value) -> bool {
    doc.get("manifests").is_some()
}

async fn read_manifest(repos: &Repos, limit: u64, d: &Digest) -> ApiResult<Option<Manifest>> {
    let bytes = match repos.manifest_bytes(d, limit).await {
        Ok(b) => b,
        Err(e) if e.code == Code::Internal => return Err(e),
        Err(_) => return Ok(None),
    };
    let Ok(doc) = serde_json::from_slice::<Value>(&bytes) else {
        return Ok(None);
    };
    let config = match doc
        .get("config")
        .and_then(|c| c.get("digest"))
        .and_then(Value::as_str)
        .and_then(|d| Digest::parse(d).ok())
    {
        Some(c) if !is_index(&doc) => {
            match repos
                .store()
                .get(&layout::blob_data(&c), validator::MAX_CONFIG_SIZE as u64)
                .await
            {
                Ok(b) => serde_json::from_slice::<Value>(&b.bytes).ok(),
                Err(e) if e.is_not_found() => None,
                // A config larger than configs may be (a foreign artifact) is shown without it.
                Err(crate::storage::StoreError::TooLarge { .. }) => None,
                Err(e) => return Err(e.into()),
            }
        }
        _ => None,
    };
    Ok(Some(Manifest {
        bytes: bytes.len() as u64,
        doc,
        config,
    }))
}

fn platform_of(v: &Value) -> Option<String> {
    let os = v.get("os")?.as_str().filter(|s| !s.is_empty())?;
    let arch = v.get("architecture")?.as_str().filter(|s| !s.is_empty())?;
    Some(match v.get("variant").and_then(Value::as_str) {
        Some(var) => format!("{os}/{arch}/{var}"),
        None => format!("{os}/{arch}"),
    })
}

/// The facts of `m`, whose [`image_size`] is `size`.
fn summary(m: &Manifest, size: u64) -> Summary {
    if is_index(&m.doc) {
        let platforms = m.doc["manifests"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|x| platform_of(x.get("platform")?))
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect()
            })
            .unwrap_or_default();
        let created = m
            .doc
            .get("annotations")
            .and_then(|a| a.get("org.opencontainers.image.created"))
            .and_then(Value::as_str)
            .and_then(parse_time);
        return Summary {
            size,
            platforms,
            created,
            index: true,
        };
    }
    Summary {
        size,
        platforms: m
            .config
            .as_ref()
            .and_then(platform_of)
            .into_iter()
            .collect(),
        created: m
            .config
            .as_ref()
            .and_then(|c| c.get("created")?.as_str())
            .and_then(parse_time),
        index: false,
    }
}

/// Distinct digests and their sizes: what one definition of size counts.
#[derive(Default)]
struct Counted(BTreeMap<String, u64>);

impl Counted {
    fn add(&mut self, digest: &str, size: u64) {
        self.0.entry(digest.to_owned()).or_insert(size);
    }

    /// The config and layers of an image manifest.
    fn add_blobs(&mut self, doc: &Value) {
        let config = doc.get("config").into_iter();
        let layers = doc
            .get("layers")
            .and_then(Value::as_array)
            .into_iter()
            .flatten();
        for d in config.chain(layers) {
            if let (Some(digest), Some(size)) = (
                d.get("digest").and_then(Value::as_str),
                d.get("size").and_then(Value::as_u64),
            ) {
                self.add(digest, size);
            }
        }
    }

    fn total(&self) -> u64 {
        self.0.values().sum()
    }
}

/// An image's size, the one definition the page, `rdctl inspect` and `rdctl ls` share
/// (docs/api.md, "Image size"): the manifest's own bytes, its config and its layers; for an
/// index, its own bytes plus each platform manifest with that manifest's config and layers.
/// Every distinct digest counts once (a layer two platforms share, a config two tags share).
async fn image_size(repos: &Repos, d: &Digest, m: &Manifest) -> ApiResult<u64> {
    let mut c = Counted::default();
    content_of(repos, d, m, &mut c).await?;
    Ok(c.total())
}

/// Adds what [`image_size`] counts for one manifest or index to `c`.
async fn content_of(repos: &Repos, d: &Digest, m: &Manifest, c: &mut Counted) -> ApiResult<()> {
    c.add(d.as_str(), m.bytes);
    if !is_index(&m.doc) {
        c.add_blobs(&m.doc);
        return Ok(());
    }
    let children = m.doc["manifests"].as_array().cloned().unwrap_or_default();
    for child in children {
        let (Some(cd), Some(size)) = (
            child.get("digest").and_then(Value::as_str),
            child.get("size").and_then(Value::as_u64),
        ) else {
            continue;
        };
        c.add(cd, size);
        let Ok(cd) = Digest::parse(cd) else { continue };
        // A platform manifest, read once per page through the document cache; a nested
        // index counts its own bytes only.
        if let Ok(Some(bytes)) = repos
            .manifest_bytes(&cd, 16 << 20)
            .await
            .map(Some)
            .or_else(|e| {
                if e.code == Code::Internal {
                    Err(e)
                } else {
                    Ok(None)
                }
            })
            && let Ok(doc) = serde_json::from_slice::<Value>(&bytes)
            && !is_index(&doc)
        {
            c.add_blobs(&doc);
        }
    }
    Ok(())
}

/// Seconds since 1970 of an RFC 3339 time (before 1970 is no time for an image's age).
fn parse_time(t: &str) -> Option<u64> {
    validator::parse_rfc3339(t).and_then(|s| u64::try_from(s).ok())
}

/// Whether a referrer's artifact type is a signature's (cosign, Notary).
fn is_signature(artifact_type: &str) -> bool {
    artifact_type.starts_with("application/vnd.dev.cosign.artifact.sig")
        || artifact_type.contains("signature")
        || artifact_type.contains("notary")
}

/// Whether `t` is one of cosign's tags (`sha256-<64 hex>.sig`, `.att`, `.sbom`).
fn is_cosign_tag(t: &str) -> bool {
    let Some((base, suffix)) = t.rsplit_once('.') else {
        return false;
    };
    matches!(suffix, "sig" | "att" | "sbom")
        && base.strip_prefix("sha256-").is_some_and(|hex| {
            hex.len() == 64
                && hex
                    .bytes()
                    .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        })
}

/// cosign's tag for a subject's signatures: `sha256-<hex>.sig`.
fn cosign_tag(d: &Digest, suffix: &str) -> String {
    format!("{}-{}.{suffix}", d.algorithm().as_str(), d.encoded())
}

/// What the page says about an image's signatures.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Signed {
    /// No signature referrer or `.sig` tag.
    No,
    /// A signature exists, but none verifies with a key of `[ui] trusted_keys`.
    Unverified,
    /// A signature verifies with this key (its short id).
    By(String),
}

/// Largest signature manifest and payload read to verify a signature.
const SIGNATURE_LIMIT: u64 = 1 << 20;

/// Whether one of `sigs` (signature manifests: referrers or the `.sig` tag's) verifies over
/// `subject` with one of `keys`: cosign's simple-signing layers (`cosign sign`, v2) and
/// sigstore bundles (v3), through the `trust` crate's checks, the ones `rdctl verify` runs.
/// Only what `name` links is read (as `/v2/<name>/…` would serve it): a signature manifest
/// naming another repository's blob does not reach that blob's bytes.
async fn signed(
    repos: &Repos,
    name: &Name,
    keys: &[trust::VerifyingKey],
    subject: &Digest,
    sigs: &[Digest],
) -> ApiResult<Signed> {
    if sigs.is_empty() {
        return Ok(Signed::No);
    }
    if keys.is_empty() {
        return Ok(Signed::Unverified);
    }
    let read = |d: Digest| async move {
        match repos
            .store()
            .get(&layout::blob_data(&d), SIGNATURE_LIMIT)
            .await
        {
            Ok(b) => Ok(Some(b.bytes)),
            Err(e) if e.is_not_found() => Ok(None),
            Err(crate::storage::StoreError::TooLarge { .. }) => Ok(None),
            Err(e) => Err(ApiError::from(e)),
        }
    };
    let blob = |d: Digest| async move {
        if repos.blob_linked(name, &d).await?.is_none() {
            return Ok(None);
        }
        read(d).await
    };
    for sig in sigs {
        if repos.manifest_link(name, sig).await?.is_none() {
            continue;
        }
        let Some(manifest) = read(sig.clone()).await? else {
            continue;
        };
        if let Ok(layers) = trust::cosign::signature_layers(&manifest) {
            for l in layers {
                if let Some(payload) = blob(l.payload.digest.clone()).await?
                    && let Ok(v) =
                        trust::cosign::verify_signature_layer(keys, &l, &payload, subject)
                {
                    return Ok(Signed::By(v.key_id.short().to_owned()));
                }
            }
        }
        if let Ok(layers) = trust::bundle::bundle_layers(&manifest) {
            for l in layers {
                if let Some(bytes) = blob(l.digest.clone()).await?
                    && let Ok(v) = trust::bundle::verify_bundle_layer(keys, &l, &bytes, subject)
                    && v.is_signature()
                {
                    return Ok(Signed::By(v.key_id.short().to_owned()));
                }
            }
        }
    }
    Ok(Signed::Unverified)
}

/// The signature manifests of `d`: its signature referrers and cosign's `.sig` tag.
async fn signatures_of(
    repos: &Repos,
    name: &Name,
    d: &Digest,
    tag_map: &[(String, Digest)],
) -> ApiResult<Vec<Digest>> {
    let mut sigs: Vec<Digest> = repos
        .referrers(name, d)
        .await?
        .iter()
        .filter(|r| {
            r.get("artifactType")
                .and_then(Value::as_str)
                .is_some_and(is_signature)
        })
        .filter_map(|r| Digest::parse(r.get("digest")?.as_str()?).ok())
        .collect();
    let tag = cosign_tag(d, "sig");
    if let Some((_, s)) = tag_map.iter().find(|(t, _)| *t == tag)
        && !sigs.contains(s)
    {
        sigs.push(s.clone());
    }
    Ok(sigs)
}

/// One row of a tag page.
pub(crate) struct TagRow {
    pub tag: String,
    pub digest: Digest,
    pub summary: Option<Summary>,
    pub signed: Signed,
}

/// The registry as a client names it in a pull: the `Host` the browser used (behind a
/// proxy that keeps the client's `Host`, the name people reach).
fn pull_host(headers: &HeaderMap) -> String {
    headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or("HOST")
        .to_owned()
}

/// A repository's tags, one page after `last`; None when the repository does not exist.
async fn repository(
    repos: &Repos,
    keys: &[trust::VerifyingKey],
    name: &Name,
    host: &str,
    last: Option<&str>,
) -> ApiResult<Option<(String, String)>> {
    if !repos.exists(name).await? {
        return Ok(None);
    }
    let everything = repos.tag_map(name).await?;
    // cosign's signature, attestation and SBOM tags are listed with their image (on its page,
    // as referrers), not as tags of their own.
    let (cosign, all): (Vec<_>, Vec<_>) = everything.iter().partition(|(t, _)| is_cosign_tag(t));
    let start = last.map_or(0, |l| all.partition_point(|(t, _)| t.as_str() <= l));
    let rows = &all[start..];
    let more = rows.len() > PAGE;
    let rows = &rows[..rows.len().min(PAGE)];
    // Each distinct manifest of the page is read once, however many tags point at it.
    let digests: BTreeSet<Digest> = rows.iter().map(|(_, d)| (*d).clone()).collect();
    let everything = &everything;
    let facts: Vec<ApiResult<(Digest, Option<Summary>, Signed)>> =
        futures_util::stream::iter(digests)
            .map(|d| async move {
                let s = match read_manifest(repos, 16 << 20, &d).await? {
                    Some(m) => Some(summary(&m, image_size(repos, &d, &m).await?)),
                    None => None,
                };
                let sigs = signatures_of(repos, name, &d, everything).await?;
                let signed = signed(repos, name, keys, &d, &sigs).await?;
                Ok((d, s, signed))
            })
            .buffer_unordered(CONCURRENCY)
            .collect()
            .await;
    let mut by_digest = BTreeMap::new();
    for f in facts {
        let (d, s, signed) = f?;
        by_digest.insert(d, (s, signed));
    }
    let rows: Vec<TagRow> = rows
        .iter()
        .map(|(t, d)| {
            let (s, signed) = by_digest.get(d).cloned().unwrap_or((None, Signed::No));
            TagRow {
                tag: t.clone(),
                digest: d.clone(),
                summary: s,
                signed,
            }
        })
        .collect();
    Ok(Some((
        name.to_string(),
        pages::repository(name, host, all.len(), cosign.len(), &rows, more, now()),
    )))
}

/// One referrer of an image.
pub(crate) struct Referrer {
    pub kind: &'static str,
    pub artifact_type: String,
    pub digest: Digest,
    pub found_by: &'static str,
}

/// Everything the image page shows.
pub(crate) struct ImageView<'a> {
    pub name: &'a Name,
    pub digest: &'a Digest,
    pub media_type: String,
    pub doc: &'a Value,
    pub config: Option<&'a Value>,
    pub summary: Summary,
    pub tags: Vec<String>,
    pub packages: Vec<validator::SpdxPackage>,
    pub referrers: Vec<Referrer>,
    /// Set when the manifest is an artifact (a signature, an SBOM), not a runnable image.
    pub artifact: Option<Artifact>,
    /// Whether a signature of it verifies, and by which key.
    pub signed: Signed,
    pub now: u64,
}

/// What the page shows of an artifact: its type, the image it refers to, and its document.
pub(crate) struct Artifact {
    /// `artifactType`, or the config's media type when there is none.
    pub artifact_type: String,
    /// The manifest's `subject`: the image this artifact is about.
    pub subject: Option<Digest>,
    /// The first SPDX, CycloneDX or other JSON layer.
    pub document: Option<ArtifactDocument>,
}

/// An artifact's document layer, with its text when it is small enough to show.
pub(crate) struct ArtifactDocument {
    pub digest: Digest,
    pub media_type: String,
    pub size: u64,
    /// The text (pretty-printed when it is JSON); None when over [`DOCUMENT_SHOWN`] bytes or
    /// not UTF-8.
    pub text: Option<String>,
}

/// The largest artifact document shown inline (a bigger one is offered as a download).
pub(crate) const DOCUMENT_SHOWN: u64 = 1 << 20;

/// The image config media types (everything else in `config` makes an artifact).
fn is_image_config(media_type: &str) -> bool {
    matches!(
        media_type,
        "application/vnd.oci.image.config.v1+json"
            | "application/vnd.docker.container.image.v1+json"
    )
}

/// The artifact facts of `doc`, a manifest of `name`; None for an image or an index. Its
/// document is only read when `name` links that blob (as `/v2/<name>/blobs/` would serve it):
/// an artifact naming another repository's blob shows no document.
async fn artifact_of(repos: &Repos, name: &Name, doc: &Value) -> ApiResult<Option<Artifact>> {
    if is_index(doc) {
        return Ok(None);
    }
    let config_type = doc
        .get("config")
        .and_then(|c| c.get("mediaType"))
        .and_then(Value::as_str)
        .unwrap_or("");
    let artifact_type = doc.get("artifactType").and_then(Value::as_str);
    let subject = doc
        .get("subject")
        .and_then(|s| s.get("digest"))
        .and_then(Value::as_str)
        .and_then(|d| Digest::parse(d).ok());
    if artifact_type.is_none() && subject.is_none() && is_image_config(config_type) {
        return Ok(None);
    }
    let layer = doc
        .get("layers")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .find(|l| {
            l.get("mediaType").and_then(Value::as_str).is_some_and(|m| {
                m.contains("spdx") || m.contains("cyclonedx") || m.ends_with("json")
            })
        });
    let document = match layer {
        None => None,
        Some(l) => {
            let digest = l
                .get("digest")
                .and_then(Value::as_str)
                .and_then(|d| Digest::parse(d).ok());
            let size = l.get("size").and_then(Value::as_u64).unwrap_or(0);
            match digest {
                None => None,
                Some(digest) if repos.blob_linked(name, &digest).await?.is_none() => None,
                Some(digest) => {
                    let text = if size <= DOCUMENT_SHOWN {
                        match repos
                            .store()
                            .get(&layout::blob_data(&digest), DOCUMENT_SHOWN)
                            .await
                        {
                            Ok(b) => match serde_json::from_slice::<Value>(&b.bytes) {
                                Ok(v) => serde_json::to_string_pretty(&v).ok(),
                                Err(_) => String::from_utf8(b.bytes.to_vec()).ok(),
                            },
                            Err(e) if e.is_not_found() => None,
                            Err(crate::storage::StoreError::TooLarge { .. }) => None,
                            Err(e) => return Err(e.into()),
                        }
                    } else {
                        None
                    };
                    Some(ArtifactDocument {
                        digest,
                        media_type: l
                            .get("mediaType")
                            .and_then(Value::as_str)
                            .unwrap_or("")
                            .to_owned(),
                        size,
                        text,
                    })
                }
            }
        }
    };
    Ok(Some(Artifact {
        artifact_type: artifact_type.unwrap_or(config_type).to_owned(),
        subject,
        document,
    }))
}

fn kind_of(artifact_type: &str) -> &'static str {
    let t = artifact_type;
    if is_signature(t) {
        "signature"
    } else if t.contains("spdx") || t.contains("cyclonedx") || t.contains("sbom") {
        "sbom"
    } else if t.contains("in-toto") || t.contains("attestation") || t.contains("dsse") {
        "attestation"
    } else {
        "other"
    }
}

/// An image (or index) of `name`; None when the repository does not hold it.
async fn image(
    state: &AppState,
    name: &Name,
    digest: Digest,
) -> ApiResult<Option<(String, String)>> {
    let repos = &state.app().repos;
    let Some(link) = repos.manifest_link(name, &digest).await? else {
        return Ok(None);
    };
    let limit = state.app().config.max_manifest_bytes.max(4 << 20);
    let Some(m) = read_manifest(repos, limit, &digest).await? else {
        return Ok(None);
    };
    let tag_map = repos.tag_map(name).await?;
    let tags: Vec<String> = tag_map
        .iter()
        .filter(|(_, d)| *d == digest)
        .map(|(t, _)| t.clone())
        .collect();
    let mut referrers: Vec<Referrer> = repos
        .referrers(name, &digest)
        .await?
        .iter()
        .filter_map(|r| {
            let d = Digest::parse(r.get("digest")?.as_str()?).ok()?;
            let t = r
                .get("artifactType")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_owned();
            Some(Referrer {
                kind: kind_of(&t),
                artifact_type: t,
                digest: d,
                found_by: "referrers API",
            })
        })
        .collect();
    for (suffix, kind) in [
        ("sig", "signature"),
        ("att", "attestation"),
        ("sbom", "sbom"),
    ] {
        let tag = cosign_tag(&digest, suffix);
        if let Some((_, d)) = tag_map.iter().find(|(t, _)| *t == tag)
            && !referrers.iter().any(|r| r.digest == *d)
        {
            referrers.push(Referrer {
                kind,
                artifact_type: String::new(),
                digest: d.clone(),
                found_by: "cosign tag",
            });
        }
    }
    let packages = pkgindex::packages_of(repos, name, &digest).await?.packages;
    let artifact = artifact_of(repos, name, &m.doc).await?;
    let sigs = signatures_of(repos, name, &digest, &tag_map).await?;
    let signed = signed(
        repos,
        name,
        &state.app().config.ui_trusted_keys,
        &digest,
        &sigs,
    )
    .await?;
    let view = ImageView {
        name,
        digest: &digest,
        media_type: link.media_type,
        doc: &m.doc,
        config: m.config.as_ref(),
        summary: summary(&m, image_size(repos, &digest, &m).await?),
        tags,
        packages,
        referrers,
        artifact,
        signed,
        now: now(),
    };
    Ok(Some((
        format!("{}@{}", name, short(&digest)),
        pages::image(&view),
    )))
}

/// The first 12 hex digits of a digest.
pub(crate) fn short(d: &Digest) -> &str {
    let e = d.encoded();
    &e[..e.len().min(12)]
}

/// `GET /ui/search?name=&version=&last=`: the package search form and its results.
async fn search(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let v = match Viewer::of(&state, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let p = params(query.as_deref());
    let (name, version) = (
        param(&p, "name").unwrap_or(""),
        param(&p, "version").unwrap_or(""),
    );
    if name.trim().is_empty() {
        let body = pages::search(name, version, None);
        return answer(StatusCode::OK, html::page("Package search", v.who(), &body));
    }
    // The API's own parser and search: the page finds what `/v2/_rd/packages` finds.
    let q: Query = match Query::from_params(Some(name), Some(version), None, param(&p, "last")) {
        Ok(q) => q,
        Err(e) => {
            let body = pages::search(name, version, Some(Err(&e.detail)));
            return answer(
                StatusCode::BAD_REQUEST,
                html::page("Package search", v.who(), &body),
            );
        }
    };
    match pkgindex::search(&state.app().repos, v.0.as_ref(), &q).await {
        Ok(found) => {
            let body = pages::search(name, version, Some(Ok(&found)));
            answer(StatusCode::OK, html::page("Package search", v.who(), &body))
        }
        Err(e) => failed(&v, e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_repository_row_is_summed_up_again_only_after_a_tag_change() {
        let dir = tempfile::tempdir().unwrap();
        let store: std::sync::Arc<dyn crate::storage::Store> =
            std::sync::Arc::new(crate::storage::FsStore::open(dir.path()).unwrap());
        let repos = Repos::new(store);
        let manifest = |layer: u64| {
            bytes::Bytes::from(
                serde_json::to_vec(&serde_json::json!({
                    "schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": Digest::sha256(b"config").to_string(), "size": 6},
                    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": Digest::sha256(b"layer").to_string(), "size": layer}],
                }))
                .unwrap(),
            )
        };
        let bytes = manifest(1000);
        let d = Digest::sha256(&bytes);
        repos.put_manifest_bytes(&d, bytes.clone()).await.unwrap();
        let name = Name::parse("team/app").unwrap();
        let link = crate::repo::ManifestLink {
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            size: bytes.len() as u64,
            subject: None,
        };
        repos.link_manifest(&name, &d, &link).await.unwrap();
        let tag = |t: &str| Tag::parse(t).unwrap();
        repos
            .set_tag(&name, &tag("v1"), &d, &link, None)
            .await
            .unwrap();
        let cache = RowCache::default();
        let first = repo_row(&repos, &cache, name.to_string()).await.unwrap();
        // Config, layer and the manifest's own bytes.
        assert_eq!(
            (first.tags, first.size),
            (1, 1006 + bytes.len() as u64),
            "{first:?}"
        );
        // Bytes changed under the same tags (only a test can do that: manifests are immutable
        // by digest): the row is not read again.
        repos
            .store()
            .put(
                &layout::blob_data(&d),
                manifest(5000),
                crate::storage::PutMode::Overwrite,
            )
            .await
            .unwrap();
        let again = repo_row(&repos, &cache, name.to_string()).await.unwrap();
        assert_eq!(again, first);
        // A tag change sums it up afresh.
        repos
            .set_tag(&name, &tag("v2"), &d, &link, None)
            .await
            .unwrap();
        let after = repo_row(&repos, &cache, name.to_string()).await.unwrap();
        assert_eq!(
            (after.tags, after.size),
            (2, 5006 + manifest(5000).len() as u64),
            "{after:?}"
        );
    }

    #[tokio::test]
    async fn an_artifact_shows_no_document_its_repository_does_not_link() {
        let dir = tempfile::tempdir().unwrap();
        let store: std::sync::Arc<dyn crate::storage::Store> =
            std::sync::Arc::new(crate::storage::FsStore::open(dir.path()).unwrap());
        let repos = Repos::new(store);
        let secret = br#"{"spdxVersion":"SPDX-2.3","name":"private-inventory"}"#;
        let d = Digest::sha256(secret);
        repos
            .store()
            .put(
                &layout::blob_data(&d),
                bytes::Bytes::from_static(secret),
                crate::storage::PutMode::Create,
            )
            .await
            .unwrap();
        let private = Name::parse("private/app").unwrap();
        repos
            .link_blob(&private, &d, secret.len() as u64)
            .await
            .unwrap();
        // A referrer pushed to another repository naming the private blob as its document.
        let doc = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/spdx+json",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": Digest::sha256(b"{}").to_string(), "size": 2},
            "layers": [{"mediaType": "application/spdx+json", "digest": d.to_string(), "size": secret.len()}],
        });
        let other = Name::parse("team/app").unwrap();
        let a = artifact_of(&repos, &other, &doc).await.unwrap().unwrap();
        assert!(a.document.is_none(), "{:?}", a.document.map(|d| d.text));
        // The repository that links it shows it.
        let a = artifact_of(&repos, &private, &doc).await.unwrap().unwrap();
        let text = a.document.and_then(|d| d.text).expect("document text");
        assert!(text.contains("private-inventory"), "{text}");
    }

    #[test]
    fn targets() {
        assert_eq!(
            Target::parse("zones/app"),
            Target::Repository("zones/app".into())
        );
        assert_eq!(
            Target::parse("zones/app:1.0"),
            Target::ByTag("zones/app".into(), "1.0".into())
        );
        assert_eq!(
            Target::parse("zones/app@sha256:ab"),
            Target::ByDigest("zones/app".into(), "sha256:ab".into())
        );
        assert_eq!(Target::parse("app/"), Target::Repository("app".into()));
    }

    #[test]
    fn times() {
        assert_eq!(parse_time("2024-01-02T03:04:05Z"), Some(1_704_164_645));
        assert_eq!(parse_time("2024-01-02T03:04:05.123Z"), Some(1_704_164_645));
        assert_eq!(parse_time("2024-01-02T05:04:05+02:00"), Some(1_704_164_645));
        assert_eq!(parse_time("2000-02-29T23:59:59Z"), Some(951_868_799));
        assert_eq!(parse_time("yesterday"), None);
        for secs in [0, 951_782_400, 1_767_225_599, 4_107_542_400] {
            assert_eq!(parse_time(&validator::rfc3339(secs)), Some(secs));
        }
    }

    #[test]
    fn cosign_tags_and_kinds() {
        let d = Digest::sha256(b"x");
        assert_eq!(cosign_tag(&d, "sig"), format!("sha256-{}.sig", d.encoded()));
        assert!(is_cosign_tag(&cosign_tag(&d, "sig")));
        assert!(is_cosign_tag(&cosign_tag(&d, "att")));
        assert!(!is_cosign_tag("sha256-abc.sig"));
        assert!(!is_cosign_tag("1.0"));
        assert_eq!(
            kind_of("application/vnd.dev.cosign.artifact.sig.v1+json"),
            "signature"
        );
        assert_eq!(kind_of("application/spdx+json"), "sbom");
        assert_eq!(kind_of("application/vnd.in-toto+json"), "attestation");
        assert_eq!(kind_of("application/x"), "other");
    }
}
