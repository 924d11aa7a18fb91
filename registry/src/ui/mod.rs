//! The registry's web pages (`[ui] enabled`, on by default): server-rendered HTML with no
//! JavaScript and no outside fetches, for people who want to see inside the registry.
//!
//! - `/` and `/ui` redirect to `/ui/`, the repositories (a `?q=` filter, pages of
//!   [`PAGE`]).
//! - `/ui/r/<name>`: a repository's tags (digest, size, platform, age, signed, referrers,
//!   and each tag's full digest and pull commands), pages of [`PAGE`] tags.
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
//!
//! The modules: [`catalog`] (the repository list), [`repository`] (a repository's tags),
//! [`image`] (an image, index or artifact), [`search`] (the package search), [`manifest`]
//! (reading manifests and configs, sizes and summaries), [`signatures`] (finding and verifying
//! an image's signatures), `pages` (each page's body), `html` (escaping and the frame) and
//! [`rows`] (the repository list's row cache). This module holds the routes, who is looking,
//! the answers every page shares and the view types the handlers fill and `pages` renders.

mod catalog;
mod html;
mod image;
mod manifest;
mod pages;
mod repository;
pub(crate) mod rows;
mod search;
mod signatures;

use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Path, RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use serde_json::Value;
use validator::{Digest, Name, Tag};

use crate::auth::Access;
use crate::errors::ApiError;
use crate::state::AppState;
use html::Who;
pub(crate) use rows::{RepoRow, RowCache};

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
        .route("/ui/", get(catalog::catalog))
        .route("/ui/search", get(search::search))
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
            let host = repository::pull_host(&headers, state.app().config.https);
            let keys = state.app().config.ui_trusted_keys.clone();
            repository::repository(repos, &keys, &name, &host, param(&p, "last")).await
        }
        Target::ByDigest(_, d) => match Digest::parse(&d) {
            Ok(d) => image::image(&state, &name, d).await,
            Err(_) => Ok(None),
        },
        Target::ByTag(_, t) => match Tag::parse(&t) {
            Ok(t) => match repos.resolve_tag_target(&name, &t).await {
                Ok(Some(target)) => image::image(&state, &name, target.digest).await,
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
    /// Its image size (docs/api.md, "Image size").
    pub size: u64,
    pub platforms: Vec<String>,
    /// `created` of the config; for an index, the newest of its images' (docs/api.md, "Image
    /// created time"); in seconds since 1970.
    pub created: Option<u64>,
    pub index: bool,
    /// An index's entries, in its order.
    pub children: Vec<Child>,
}

/// One entry of an index: its platform, and the size and created time of the image under it.
#[derive(Debug, Clone)]
pub(crate) struct Child {
    pub digest: Digest,
    pub platform: Option<String>,
    pub size: u64,
    pub created: Option<u64>,
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

/// One row of a tag page.
pub(crate) struct TagRow {
    pub tag: String,
    pub digest: Digest,
    pub summary: Option<Summary>,
    pub signed: Signed,
    /// The kind ([`Referrer::kind`]) of each of its referrers.
    pub referrers: Vec<&'static str>,
}

/// How a client reaches this registry: the host people pull from, and whether it answers
/// plain HTTP there (then skopeo, podman and rdctl need to be told).
pub(crate) struct PullHost {
    pub host: String,
    pub plain_http: bool,
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
    /// The subject's tags in the artifact's repository (cosign's not counted).
    pub subject_tags: Vec<String>,
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

/// The first 12 hex digits of a digest.
pub(crate) fn short(d: &Digest) -> &str {
    let e = d.encoded();
    &e[..e.len().min(12)]
}

#[cfg(test)]
mod tests {
    use super::catalog::repo_row;
    use super::image::{artifact_of, kind_of};
    use super::manifest::parse_time;
    use super::signatures::{cosign_tag, is_cosign_tag};
    use super::*;
    use crate::repo::Repos;
    use crate::storage::layout;

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
        repos
            .put_manifest_bytes(&d, &crate::repo::Epochs::default(), bytes.clone())
            .await
            .unwrap();
        let name = Name::parse("team/app").unwrap();
        let link = crate::repo::ManifestLink {
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            size: bytes.len() as u64,
            subject: None,
        };
        repos
            .link_manifest(&name, &d, &crate::repo::Epochs::default(), &link)
            .await
            .unwrap();
        let tag = |t: &str| Tag::parse(t).unwrap();
        repos
            .set_tag(&name, &tag("v1"), &d, (&link, ""), None)
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
            .set_tag(&name, &tag("v2"), &d, (&link, ""), None)
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
            .link_blob(&private, &d, &Default::default(), secret.len() as u64)
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
