//! The auth session and retry loop every request goes through: `Authorization` from what the
//! host asked for before, one answered challenge per request, 401/403 final, 5xx/429 and
//! transport errors retried with backoff.

use reqwest::header::{AUTHORIZATION, HeaderValue, WWW_AUTHENTICATE};
use reqwest::{StatusCode, Url};
use validator::Name;

use crate::auth;
use crate::body::read_limited;
use crate::challenge;
use crate::client::Client;
use crate::credentials::{self, Credential};
use crate::error::ClientError;
use crate::reference::authority;
use validator::error_chain;

/// What a request needs access to: the registry host, and the repository with `pull` or
/// `pull,push` (none for `/v2/`).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Scope<'a> {
    pub(crate) host: &'a str,
    pub(crate) repo: Option<(&'a Name, Access)>,
    /// The manifest's tag or digest, for requests about one (what a credential provider
    /// plugin is told as part of the image, as kubelet tells it).
    pub(crate) manifest_ref: Option<&'a str>,
}

/// What a request does in its repository: the right it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Access {
    Pull,
    Push,
    Delete,
}

impl<'a> Scope<'a> {
    pub(crate) fn pull(host: &'a str, name: &'a Name) -> Self {
        Scope {
            host,
            repo: Some((name, Access::Pull)),
            manifest_ref: None,
        }
    }

    pub(crate) fn push(host: &'a str, name: &'a Name) -> Self {
        Scope {
            host,
            repo: Some((name, Access::Push)),
            manifest_ref: None,
        }
    }

    /// Deleting a manifest or tag: the `delete` right (distribution's token action).
    pub(crate) fn delete(host: &'a str, name: &'a Name) -> Self {
        Scope {
            host,
            repo: Some((name, Access::Delete)),
            manifest_ref: None,
        }
    }

    /// The same scope for a request about the manifest `tag_or_digest`.
    pub(crate) fn for_manifest(self, tag_or_digest: &'a str) -> Self {
        Scope {
            manifest_ref: Some(tag_or_digest),
            ..self
        }
    }

    /// The image a credential provider plugin is told about: `host/repository`, with
    /// `:tag` or `@digest` for a request about a manifest (the full reference, as kubelet
    /// sends it), or `None` for requests outside a repository.
    pub(crate) fn image(&self) -> Option<String> {
        self.repo.map(|(n, _)| match self.manifest_ref {
            // A digest is `algorithm:hex`; a tag has no `:`.
            Some(d) if d.contains(':') => format!("{}/{n}@{d}", self.host),
            Some(t) => format!("{}/{n}:{t}", self.host),
            None => format!("{}/{n}", self.host),
        })
    }

    /// The token scope, `repository:<name>:pull[,push|,delete]`, or empty.
    pub(crate) fn token_scope(&self) -> String {
        match self.repo {
            Some((n, Access::Pull)) => format!("repository:{n}:pull"),
            Some((n, Access::Push)) => format!("repository:{n}:pull,push"),
            Some((n, Access::Delete)) => format!("repository:{n}:pull,delete"),
            None => String::new(),
        }
    }
}

pub(crate) type Attempt = Result<reqwest::Response, reqwest::Error>;

impl Client {
    /// Checks that the registry accepts this client's credentials: `GET /v2/`, answering a
    /// challenge as any request would (`rdctl login` runs this before saving).
    ///
    /// A registry that lets anonymous callers in may still name its challenge on the 200 (ours
    /// with Basic auth and an anonymous rule, zot): it takes credentials, and says whether they
    /// are right once asked with them. That challenge is answered too, and `/v2/` asked again
    /// (Basic: a wrong password answers 401; Bearer: the token endpoint refuses it), so a wrong
    /// credential is refused here rather than saved unchecked. A 200 without a challenge tells
    /// nothing, and the credential is not sent to a registry that never asked for it.
    pub async fn check_login(&self, registry: &str) -> Result<(), ClientError> {
        let url = self.url(registry, "/v2/")?;
        let scope = Scope {
            host: registry,
            repo: None,
            manifest_ref: None,
        };
        let get = || self.http_for(&url).get(url.clone());
        let resp = self.send(&scope, &url, &get).await?;
        if resp.status() != StatusCode::OK {
            return Err(Self::unexpected(&url, resp).await);
        }
        let offered = self.auth.challenge(registry).is_none()
            && resp.headers().contains_key(WWW_AUTHENTICATE)
            // A challenge that does not parse is ignored here as on any 200.
            && matches!(self.auth.record(registry, resp.headers()), Ok(Some(_)));
        if offered {
            let resp = self.send(&scope, &url, &get).await?;
            if resp.status() != StatusCode::OK {
                return Err(Self::unexpected(&url, resp).await);
            }
        }
        Ok(())
    }

    /// The `Authorization` header for a request in `scope` to `url`, from what the host asked
    /// for before: nothing for a host that never challenged, or for another host.
    pub(crate) async fn authorization(
        &self,
        scope: &Scope<'_>,
        url: &Url,
    ) -> Result<Option<HeaderValue>, ClientError> {
        if authority(url) != scope.host {
            return Ok(None);
        }
        match self.auth.challenge(scope.host) {
            None => Ok(None),
            Some(challenge::Auth::Basic) => Ok(
                match self.auth.credential(scope.host, scope.image()).await? {
                    Some((Credential::Basic { username, password }, _)) => {
                        Some(auth::basic_header(&username, &password))
                    }
                    _ => None,
                },
            ),
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

    /// For requests whose answer depends on who asks but that anonymous callers may also make
    /// (the package search, filtered by the caller's pull rights): sends the Basic credential
    /// stored for `host` from the first request instead of waiting for a challenge that never
    /// comes. A registry that wants tokens answers 401 with its challenge, which is then
    /// followed as usual.
    pub(crate) async fn offer_credentials(&self, host: &str) -> Result<(), ClientError> {
        if self.auth.challenge(host).is_none()
            && matches!(
                self.auth.credential(host, None).await?,
                Some((Credential::Basic { .. }, _))
            )
        {
            self.auth.presume_basic(host);
        }
        Ok(())
    }

    pub(crate) async fn token(
        &self,
        scope: &Scope<'_>,
        key: &str,
        b: &challenge::BearerChallenge,
        scopes: &[String],
    ) -> Result<String, ClientError> {
        let cred = self.auth.credential(scope.host, scope.image()).await?;
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
    pub(crate) async fn answer_challenge(
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
                    self.auth.credential(scope.host, scope.image()).await?,
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
    pub(crate) async fn denied(
        &self,
        scope: &Scope<'_>,
        url: &Url,
        resp: reqwest::Response,
    ) -> ClientError {
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
        let cred = self
            .auth
            .credential(scope.host, scope.image())
            .await
            .ok()
            .flatten();
        let mut detail = match (&cred, status) {
            (None, 401) => format!(
                "authentication required and no credentials for {} (log in first)",
                scope.host
            ),
            (_, 401) => format!("{} refused", who(cred.as_ref())),
            _ => format!("{} may not do this", who(cred.as_ref())),
        };
        if let Some((n, access)) = scope.repo {
            detail.push_str(&format!(
                " ({} {n})",
                match access {
                    Access::Pull => "pull from",
                    Access::Push => "push to",
                    Access::Delete => "delete in",
                }
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
    pub(crate) async fn attempt(
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
    pub(crate) async fn send(
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
                        last = transient_answer(resp).await;
                        tracing::debug!(%url, attempt, answer = %last, "transient answer, retrying");
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
    pub(crate) async fn unexpected(url: &Url, resp: reqwest::Response) -> ClientError {
        let status = resp.status().as_u16();
        let (code, message) = error_body(resp).await;
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
}

/// The OCI error code and message of an error answer (the message followed by its `detail`
/// when that is a string, as our registry puts the specifics there), or no code and the start
/// of the body when it is not an OCI error.
pub(crate) async fn error_body(resp: reqwest::Response) -> (String, String) {
    let body = read_limited(resp, 64 << 10).await.unwrap_or_default();
    serde_json::from_slice::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            let e = v.get("errors")?.get(0)?;
            let mut message = e
                .get("message")
                .and_then(|m| m.as_str())
                .unwrap_or("")
                .to_owned();
            if let Some(detail) = e.get("detail").and_then(|d| d.as_str()) {
                if !message.is_empty() {
                    message.push_str(": ");
                }
                message.push_str(detail);
            }
            Some((e.get("code")?.as_str()?.to_owned(), message))
        })
        .unwrap_or_else(|| {
            (
                String::new(),
                String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
            )
        })
}

/// What a transient error answer said, for the error a client sees once the retries are
/// spent: "status 503 Service Unavailable: UNAVAILABLE: …".
pub(crate) async fn transient_answer(resp: reqwest::Response) -> String {
    let status = resp.status();
    match error_body(resp).await {
        (code, message) if !code.is_empty() => format!("status {status}: {code}: {message}"),
        (_, excerpt) if !excerpt.trim().is_empty() => {
            format!("status {status}: {}", excerpt.trim())
        }
        _ => format!("status {status}"),
    }
}

/// "user alice (from /path)" or "anonymous access", for messages.
pub(crate) fn who(cred: Option<&(Credential, credentials::Source)>) -> String {
    match cred {
        Some((c, src)) => format!("user {:?} (credentials from {src})", c.username()),
        None => "anonymous access".to_owned(),
    }
}
