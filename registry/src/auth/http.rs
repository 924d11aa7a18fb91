//! The HTTP side of access control: the middleware on `/v2/`, the challenges, and the token
//! endpoint (`GET /token` of the Docker token protocol, `POST /token` of its OAuth2 variant).

use std::sync::Arc;

use axum::body::Body;
use axum::extract::{RawQuery, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use base64::Engine as _;

use super::acl::{Action, Who};
use super::token::{self, Scope};
use super::{Access, Auth, Caller};
use crate::api::Route;
use crate::errors::{ApiError, Code};
use crate::state::AppState;

/// What a request needs, worked out from its method and path alone (before any body byte).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Need {
    /// Any valid identity: `/v2/` itself, and paths that name no endpoint (so that they do not
    /// tell strangers which repositories exist).
    Login,
    /// `GET /v2/_catalog`.
    Catalog,
    /// An action on a repository. A mount also names its source, which goes into challenges so
    /// that token clients ask for it; the upload handler checks it and falls back to a plain
    /// upload without it.
    Repo {
        name: String,
        action: Action,
        mount_from: Option<String>,
    },
}

impl Need {
    /// GET and HEAD pull, DELETE deletes, every other method pushes.
    pub(crate) fn of(method: &Method, path: &str, query: Option<&str>) -> Need {
        let Some(rest) = path.strip_prefix("/v2/") else {
            return Need::Login;
        };
        let Some(route) = Route::parse(rest) else {
            return Need::Login;
        };
        let action = match *method {
            Method::GET | Method::HEAD => Action::Pull,
            Method::DELETE => Action::Delete,
            _ => Action::Push,
        };
        let (name, action) = match route {
            // The package search answers only repositories the caller may pull, as the catalog
            // lists them, so it needs what the catalog needs; the sync status names upstreams
            // and repositories across the registry, so it needs the catalog's access too.
            Route::Catalog | Route::PackageSearch | Route::SyncStatus => return Need::Catalog,
            // Upload sessions belong to the push: reading their status or cancelling them
            // needs push too, as in distribution.
            Route::Upload { name, .. } => (name, Action::Push),
            Route::Blob { name, .. }
            | Route::Manifest { name, .. }
            | Route::Tags { name }
            | Route::Referrers { name, .. }
            | Route::Packages { name, .. } => (name, action),
        };
        let mount_from = (action == Action::Push && *method == Method::POST)
            .then(|| {
                let q = query?;
                let pairs: Vec<(String, String)> =
                    form_urlencoded::parse(q.as_bytes()).into_owned().collect();
                pairs.iter().find(|(k, _)| k == "mount")?;
                pairs.into_iter().find(|(k, _)| k == "from").map(|(_, v)| v)
            })
            .flatten();
        Need::Repo {
            name,
            action,
            mount_from,
        }
    }

    /// The scopes a token must carry, as written in a challenge (space-separated).
    fn scope(&self) -> Option<String> {
        match self {
            Need::Login => None,
            Need::Catalog => Some(Scope::Catalog.render()),
            Need::Repo {
                name,
                action,
                mount_from,
            } => {
                // Clients push with a token for pull and push (they check what exists first).
                let actions = match action {
                    Action::Push => "pull,push",
                    a => a.as_str(),
                };
                let mut s = format!("repository:{name}:{actions}");
                if let Some(from) = mount_from {
                    s.push_str(&format!(" repository:{from}:pull"));
                }
                Some(s)
            }
        }
    }
}

/// What the middleware does with a request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Decision {
    Allow,
    /// 401: credentials would help.
    Login,
    /// 401 with `error="insufficient_scope"`: a token for the right scope would help.
    InsufficientScope,
    /// 403: this caller may not.
    Deny,
}

fn decide(auth: &Auth, caller: &Caller, need: &Need) -> Decision {
    let anonymous_ok = auth.acl.anonymous_allowed();
    match (need, caller) {
        // With tokens on, `/v2/` answers an anonymous caller 401 with the challenge, as Docker
        // Hub, Harbor, GitLab and Quay do, even where anonymous callers may pull: docker (moby)
        // reads the challenge only from a 401 on `GET /v2/`, and after a 200 there it never
        // sends credentials (`docker login` "succeeds" with any password, `docker push`
        // fails). Anonymous callers of every client then take an anonymous token from the
        // token endpoint, which the ACL scopes. With Basic alone this cannot work for docker
        // both ways (a 401 here makes docker refuse anonymous pulls for want of a password),
        // so Basic keeps the 200 below; see `Auth::start_hint`.
        (Need::Login, Caller::Anonymous) if auth.tokens.is_some() => Decision::Login,
        (Need::Login, Caller::Anonymous) | (Need::Catalog, Caller::Anonymous) => {
            if anonymous_ok {
                Decision::Allow
            } else {
                Decision::Login
            }
        }
        (Need::Login, _) | (Need::Catalog, Caller::User(_)) => Decision::Allow,
        (Need::Catalog, Caller::Token(t)) => {
            if t.claims.catalog() {
                Decision::Allow
            } else {
                Decision::InsufficientScope
            }
        }
        (Need::Repo { name, action, .. }, Caller::Anonymous) => {
            if auth.acl.granted(Who::Anonymous, name).contains(*action) {
                Decision::Allow
            } else {
                Decision::Login
            }
        }
        (Need::Repo { name, action, .. }, Caller::User(u)) => {
            if auth.acl.granted(Who::User(u), name).contains(*action) {
                Decision::Allow
            } else {
                Decision::Deny
            }
        }
        (Need::Repo { name, action, .. }, Caller::Token(t)) => {
            if t.claims.repository_actions(name).contains(*action) {
                return Decision::Allow;
            }
            if !t.builtin {
                // An external issuer decides; a token for this scope may exist.
                return Decision::InsufficientScope;
            }
            // Our own token: the ACL says whether a new token would help.
            let who = if t.claims.sub.is_empty() {
                Who::Anonymous
            } else {
                Who::User(&t.claims.sub)
            };
            match (auth.acl.granted(who, name).contains(*action), who) {
                (true, _) => Decision::InsufficientScope,
                (false, Who::Anonymous) => Decision::Login,
                (false, Who::User(_)) => Decision::Deny,
            }
        }
    }
}

/// Authenticates from the `Authorization` header: none is anonymous; a bad one is an error
/// (401 even where anonymous callers would be let in, so a typo never passes as anonymous).
async fn authenticate(auth: &Auth, headers: &HeaderMap) -> Result<Caller, String> {
    let Some(v) = headers.get(header::AUTHORIZATION) else {
        return Ok(Caller::Anonymous);
    };
    let v = v
        .to_str()
        .map_err(|_| "the Authorization header is not text".to_owned())?;
    let (scheme, value) = v.split_once(' ').unwrap_or((v, ""));
    let value = value.trim();
    if scheme.eq_ignore_ascii_case("basic") {
        let (user, password) = basic_credentials(value)?;
        if no_credential(&user, &password) {
            return Ok(Caller::Anonymous);
        }
        if auth.check_password(&user, &password).await {
            Ok(Caller::User(user))
        } else {
            Err("wrong user name or password".to_owned())
        }
    } else if scheme.eq_ignore_ascii_case("bearer") {
        let Some(t) = &auth.tokens else {
            return Err("this registry takes no bearer tokens".to_owned());
        };
        t.verifier.verify(value).map(|v| Caller::Token(Box::new(v)))
    } else {
        Err(format!("unsupported authorization scheme {scheme:?}"))
    }
}

/// Basic credentials with an empty user name and an empty password (`Basic Og==`) are no
/// credential at all: containers/image clients (skopeo, podman, buildah) send them on every
/// request after a Basic challenge when they have nothing for the registry, so anonymous
/// pulls by them depend on reading them as anonymous. No user can have an empty name, so
/// nothing else can mean this.
fn no_credential(user: &str, password: &str) -> bool {
    user.is_empty() && password.is_empty()
}

fn basic_credentials(value: &str) -> Result<(String, String), String> {
    let raw = base64::engine::general_purpose::STANDARD
        .decode(value)
        .map_err(|_| "malformed Basic credentials".to_owned())?;
    let text = String::from_utf8(raw).map_err(|_| "malformed Basic credentials".to_owned())?;
    let (user, password) = text
        .split_once(':')
        .ok_or_else(|| "malformed Basic credentials".to_owned())?;
    Ok((user.to_owned(), password.to_owned()))
}

/// The token endpoint clients are sent to: the configured realm, else `/token` on the host
/// the client used.
fn token_realm(auth: &Auth, headers: &HeaderMap, https: bool) -> String {
    if let Some(r) = auth.tokens.as_ref().and_then(|t| t.realm.clone()) {
        return r;
    }
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .unwrap_or("localhost");
    let scheme = if https { "https" } else { "http" };
    format!("{scheme}://{host}/token")
}

fn quoted(s: &str) -> String {
    s.replace('\\', "\\\\").replace('"', "\\\"")
}

/// The `WWW-Authenticate` value for `need`.
fn challenge(
    auth: &Auth,
    need: &Need,
    headers: &HeaderMap,
    https: bool,
    error: Option<&str>,
) -> HeaderValue {
    let text = match &auth.tokens {
        Some(t) => {
            let mut s = format!(
                "Bearer realm=\"{}\",service=\"{}\"",
                quoted(&token_realm(auth, headers, https)),
                quoted(&t.service)
            );
            if let Some(scope) = need.scope() {
                s.push_str(&format!(",scope=\"{}\"", quoted(&scope)));
            }
            if let Some(e) = error {
                s.push_str(&format!(",error=\"{e}\""));
            }
            s
        }
        None => format!("Basic realm=\"{}\",charset=\"UTF-8\"", quoted(&auth.realm)),
    };
    HeaderValue::from_str(&text).unwrap_or_else(|_| HeaderValue::from_static("Basic"))
}

fn unauthorized(
    auth: &Auth,
    need: &Need,
    headers: &HeaderMap,
    https: bool,
    error: Option<&str>,
    detail: String,
) -> Response {
    ApiError::new(Code::Unauthorized, detail)
        .with_header(
            header::WWW_AUTHENTICATE,
            challenge(auth, need, headers, https, error),
        )
        .into_response()
}

fn describe(need: &Need) -> String {
    match need.scope() {
        Some(s) => format!("access to {s}"),
        None => "access to the registry".to_owned(),
    }
}

/// The middleware on every `/v2/` route. With no `[auth]`, it passes everything.
pub(crate) async fn middleware(
    State(state): State<AppState>,
    mut req: Request,
    next: Next,
) -> Response {
    let Some(auth) = state.app().config.auth.clone() else {
        return next.run(req).await;
    };
    let https = state.app().config.https || req.uri().scheme_str() == Some("https");
    // HTTP/2 requests carry the host in the `:authority` pseudo-header, which hyper puts in
    // the URI, not in `Host`; the token realm is built from `Host`.
    if !req.headers().contains_key(header::HOST)
        && let Some(host) = req
            .uri()
            .authority()
            .and_then(|a| header::HeaderValue::from_str(a.as_str()).ok())
    {
        req.headers_mut().insert(header::HOST, host);
    }
    let need = Need::of(req.method(), req.uri().path(), req.uri().query());
    let caller = match authenticate(&auth, req.headers()).await {
        Ok(c) => c,
        Err(reason) => {
            tracing::info!(%reason, path = req.uri().path(), "credentials refused");
            let error = auth.tokens.as_ref().map(|_| "invalid_token");
            return unauthorized(&auth, &need, req.headers(), https, error, reason);
        }
    };
    match decide(&auth, &caller, &need) {
        Decision::Allow => {
            // An anonymous `GET /v2/` that is let in (Basic auth, some rule names anonymous)
            // still carries the challenge. containers/image clients (skopeo, podman, buildah)
            // take the challenges of this ping, and only those, as the way to authenticate
            // every later request: with none they send no credentials, even after a login,
            // and a 401 on a push is final for them. Clients that read challenges only from a
            // 401 (docker, containerd, crane, oras) ignore it; `rdctl login` answers it to
            // check the credential.
            let ping = need == Need::Login
                && matches!(caller, Caller::Anonymous)
                && req.uri().path() == "/v2/";
            let ping_challenge = ping.then(|| challenge(&auth, &need, req.headers(), https, None));
            req.extensions_mut().insert(Access { auth, caller });
            let mut resp = next.run(req).await;
            if let Some(c) = ping_challenge
                && resp.status().is_success()
            {
                resp.headers_mut().insert(header::WWW_AUTHENTICATE, c);
            }
            resp
        }
        Decision::Login => unauthorized(
            &auth,
            &need,
            req.headers(),
            https,
            None,
            format!("{} needs credentials", describe(&need)),
        ),
        Decision::InsufficientScope => unauthorized(
            &auth,
            &need,
            req.headers(),
            https,
            Some("insufficient_scope"),
            format!("the token does not grant {}", describe(&need)),
        ),
        Decision::Deny => ApiError::new(
            Code::Denied,
            format!("{} is not granted to this user", describe(&need)),
        )
        .into_response(),
    }
}

/// The caller of a web page (`/ui/`): None without `[auth]` (everything is visible), else the
/// authenticated caller, whose pages show only repositories it may pull. Browsers speak Basic,
/// so the pages challenge with Basic even when the API challenges with Bearer: the user name
/// and password are checked against the same htpasswd file the token endpoint uses, and a
/// bearer token (from a script) is accepted as on the API. 401 with a Basic challenge for bad
/// credentials, and for anonymous callers when the ACL grants anonymous callers nothing.
pub(crate) async fn ui_caller(
    state: &AppState,
    headers: &HeaderMap,
) -> Result<Option<Access>, Response> {
    let Some(auth) = state.app().config.auth.clone() else {
        return Ok(None);
    };
    let refuse = |auth: &Auth, detail: &str| {
        ApiError::new(Code::Unauthorized, detail)
            .with_header(header::WWW_AUTHENTICATE, basic_challenge(auth))
            .into_response()
    };
    let caller = match authenticate(&auth, headers).await {
        Ok(c) => c,
        Err(reason) => {
            tracing::info!(%reason, "web page credentials refused");
            return Err(refuse(&auth, &reason));
        }
    };
    if matches!(caller, Caller::Anonymous) && !auth.acl.anonymous_allowed() {
        return Err(refuse(&auth, "log in to see this registry"));
    }
    Ok(Some(Access { auth, caller }))
}

/// The Basic challenge the web pages' login link answers with.
pub(crate) fn ui_login_challenge(state: &AppState) -> Option<Response> {
    let auth = state.app().config.auth.clone()?;
    Some(
        ApiError::new(Code::Unauthorized, "log in to see this registry")
            .with_header(header::WWW_AUTHENTICATE, basic_challenge(&auth))
            .into_response(),
    )
}

/// The token answer of both token endpoints.
fn token_answer(token: String, expires_in: u64, issued_at: u64, scope: Option<String>) -> Response {
    let mut body = serde_json::json!({
        "token": token,
        "access_token": token,
        "expires_in": expires_in,
        "issued_at": validator::rfc3339(issued_at),
    });
    if let Some(s) = scope {
        body["scope"] = serde_json::Value::String(s);
    }
    (
        StatusCode::OK,
        [(header::CACHE_CONTROL, "no-store")],
        axum::Json(body),
    )
        .into_response()
}

/// An OAuth2-style error (`{"error": ..., "error_description": ...}`).
fn oauth_error(status: StatusCode, error: &str, description: String) -> Response {
    (
        status,
        axum::Json(serde_json::json!({ "error": error, "error_description": description })),
    )
        .into_response()
}

fn token_auth(state: &AppState) -> Option<Arc<Auth>> {
    state
        .app()
        .config
        .auth
        .clone()
        .filter(|a| a.issues_tokens())
}

/// 401 for a token request with bad credentials, with a Basic challenge (the token endpoint
/// takes Basic credentials).
fn token_unauthorized(auth: &Auth, detail: &str) -> Response {
    ApiError::new(Code::Unauthorized, detail)
        .with_header(header::WWW_AUTHENTICATE, basic_challenge(auth))
        .into_response()
}

/// The Basic challenge of the token endpoint.
fn basic_challenge(auth: &Auth) -> HeaderValue {
    HeaderValue::from_str(&format!(
        "Basic realm=\"{}\",charset=\"UTF-8\"",
        quoted(&auth.realm)
    ))
    .unwrap_or_else(|_| HeaderValue::from_static("Basic"))
}

/// Issues a token for `user` and `scopes` after the service check.
fn issue(
    auth: &Auth,
    user: Option<&str>,
    service: Option<&str>,
    scopes: &[Scope],
    oauth: bool,
) -> Response {
    let t = auth
        .tokens
        .as_ref()
        .expect("only routed when tokens are on");
    if let Some(s) = service
        && s != t.service
    {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("this registry is service {:?}, not {s:?}", t.service),
        );
    }
    let issued_at = token::now();
    match auth.issue(user, scopes) {
        Some(Ok(tok)) => {
            let expires_in = t.issuer.as_ref().map_or(0, |i| i.expiry.as_secs());
            let scope = oauth.then(|| {
                scopes
                    .iter()
                    .map(Scope::render)
                    .collect::<Vec<_>>()
                    .join(" ")
            });
            tracing::info!(
                user = user.unwrap_or("(anonymous)"),
                scopes = scopes.len(),
                "token issued"
            );
            token_answer(tok, expires_in, issued_at, scope)
        }
        Some(Err(e)) => ApiError::internal(e).into_response(),
        None => ApiError::new(Code::NameUnknown, "this registry issues no tokens").into_response(),
    }
}

/// `GET /token?service=...&scope=...`: Basic credentials or none (anonymous).
pub(crate) async fn token_get(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let Some(auth) = token_auth(&state) else {
        return ApiError::new(Code::NameUnknown, "this registry issues no tokens").into_response();
    };
    let pairs: Vec<(String, String)> = query
        .as_deref()
        .map(|q| form_urlencoded::parse(q.as_bytes()).into_owned().collect())
        .unwrap_or_default();
    let user = match headers.get(header::AUTHORIZATION) {
        None => None,
        Some(v) => {
            let v = v.to_str().unwrap_or("");
            let (scheme, value) = v.split_once(' ').unwrap_or((v, ""));
            if !scheme.eq_ignore_ascii_case("basic") {
                return token_unauthorized(&auth, "the token endpoint takes Basic credentials");
            }
            match basic_credentials(value.trim()) {
                Ok((u, p)) if no_credential(&u, &p) => None,
                Ok((u, p)) if auth.check_password(&u, &p).await => Some(u),
                Ok(_) => return token_unauthorized(&auth, "wrong user name or password"),
                Err(e) => return token_unauthorized(&auth, &e),
            }
        }
    };
    let scopes = Scope::parse_all(
        pairs
            .iter()
            .filter(|(k, _)| k == "scope")
            .map(|(_, v)| v.as_str()),
    );
    let service = pairs
        .iter()
        .find(|(k, _)| k == "service")
        .map(|(_, v)| v.as_str());
    issue(&auth, user.as_deref(), service, &scopes, false)
}

/// Largest form accepted by `POST /token`.
const MAX_FORM_BYTES: usize = 64 << 10;

/// `POST /token` with `grant_type=password` (OAuth2, as containerd and docker send it).
pub(crate) async fn token_post(State(state): State<AppState>, body: Body) -> Response {
    let Some(auth) = token_auth(&state) else {
        return ApiError::new(Code::NameUnknown, "this registry issues no tokens").into_response();
    };
    let Ok(bytes) = axum::body::to_bytes(body, MAX_FORM_BYTES).await else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            format!("the form is larger than {MAX_FORM_BYTES} bytes or was cut off"),
        );
    };
    let pairs: Vec<(String, String)> = form_urlencoded::parse(&bytes).into_owned().collect();
    let get = |k: &str| {
        pairs
            .iter()
            .find(|(key, _)| key == k)
            .map(|(_, v)| v.as_str())
    };
    match get("grant_type") {
        Some("password") => {}
        other => {
            return oauth_error(
                StatusCode::BAD_REQUEST,
                "unsupported_grant_type",
                format!("grant_type {other:?} is not supported; use password"),
            );
        }
    }
    let (Some(user), Some(password)) = (get("username"), get("password")) else {
        return oauth_error(
            StatusCode::BAD_REQUEST,
            "invalid_request",
            "grant_type=password needs username and password".to_owned(),
        );
    };
    if !auth.check_password(user, password).await {
        // RFC 7235 §3.1: every 401 carries a challenge; the credentials this endpoint
        // takes are a user name and password, as Basic on GET.
        let mut r = oauth_error(
            StatusCode::UNAUTHORIZED,
            "invalid_grant",
            "wrong user name or password".to_owned(),
        );
        r.headers_mut()
            .insert(header::WWW_AUTHENTICATE, basic_challenge(&auth));
        return r;
    }
    let scopes = Scope::parse_all(
        pairs
            .iter()
            .filter(|(k, _)| k == "scope")
            .map(|(_, v)| v.as_str()),
    );
    issue(&auth, Some(user), get("service"), &scopes, true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn needs_from_method_and_path() {
        let n = |m: Method, p: &str, q: Option<&str>| Need::of(&m, p, q);
        let repo = |name: &str, action, from: Option<&str>| Need::Repo {
            name: name.to_owned(),
            action,
            mount_from: from.map(str::to_owned),
        };
        assert_eq!(n(Method::GET, "/v2/", None), Need::Login);
        assert_eq!(n(Method::GET, "/v2/nope", None), Need::Login);
        assert_eq!(n(Method::GET, "/v2/_catalog", None), Need::Catalog);
        assert_eq!(
            n(Method::HEAD, "/v2/a/b/manifests/x", None),
            repo("a/b", Action::Pull, None)
        );
        assert_eq!(
            n(Method::DELETE, "/v2/a/blobs/sha256:x", None),
            repo("a", Action::Delete, None)
        );
        assert_eq!(
            n(Method::GET, "/v2/a/blobs/uploads/u1", None),
            repo("a", Action::Push, None)
        );
        assert_eq!(
            n(Method::DELETE, "/v2/a/blobs/uploads/u1", None),
            repo("a", Action::Push, None)
        );
        assert_eq!(
            n(
                Method::POST,
                "/v2/a/blobs/uploads/",
                Some("mount=sha256:x&from=b/c")
            ),
            repo("a", Action::Push, Some("b/c"))
        );
        assert_eq!(
            repo("a", Action::Push, Some("b/c")).scope().unwrap(),
            "repository:a:pull,push repository:b/c:pull"
        );
    }
}
