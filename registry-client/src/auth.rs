//! The client side of registry authentication: what to send in `Authorization`, learned from
//! each host's `WWW-Authenticate` challenge.
//!
//! - A host that never challenged gets no credentials (anonymous first, as docker does).
//! - After a `Basic` challenge the host's credentials go with every request to that host.
//! - After a `Bearer` challenge a token is fetched from the realm (with the host's credentials
//!   as Basic, or an identity token as an OAuth2 refresh-token grant, or anonymously), cached
//!   per host and scope until `expires_in` runs out, and sent with every request in that scope.
//! - A 401 is answered once per request: the challenge is recorded, a stale token dropped and a
//!   new one fetched, then the request is sent again. A second 401 is final.
//! - Credentials go only to the registry host itself and its token realm: never to a host a
//!   redirect led to (reqwest drops `Authorization` when a redirect changes host or port, and a
//!   challenge from another host is not answered).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use reqwest::header::{AUTHORIZATION, HeaderMap, HeaderValue, WWW_AUTHENTICATE};
use reqwest::{StatusCode, Url};

use super::challenge::{self, Auth, BearerChallenge};
use super::credentials::{Credential, CredentialError, Source};
use super::keychain::Keychain;

/// Longest token endpoint answer read.
const MAX_TOKEN_ANSWER: u64 = 1 << 20;

/// Token lifetime when the endpoint names none (the token specification's default).
const DEFAULT_EXPIRES_IN: u64 = 60;

/// A cached bearer token.
#[derive(Clone)]
struct Token {
    value: String,
    /// When to stop using it: a little before the endpoint's `expires_in` runs out.
    renew_at: Instant,
}

/// Per-host challenges and per-scope tokens, shared by clones of a [`super::Client`].
#[derive(Default)]
pub(super) struct AuthState {
    /// Shared with the blocking threads that run its lookups.
    pub(super) keychain: std::sync::Arc<Keychain>,
    challenges: Mutex<HashMap<String, Auth>>,
    tokens: Mutex<HashMap<(String, String), Token>>,
    /// Token fetches made (tests and metrics read it).
    pub(super) token_fetches: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for AuthState {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthState")
            .field("keychain", &self.keychain)
            .finish_non_exhaustive()
    }
}

/// What a failed token fetch reports.
pub(super) enum TokenError {
    /// The endpoint refused the credentials (401/403).
    Refused {
        realm: Url,
        status: u16,
        body: String,
    },
    /// Anything else: network, bad answer.
    Other { realm: Url, reason: String },
}

/// Renew this long before the endpoint's expiry (a tenth of the lifetime, at most 30 s), so a
/// token never expires between the check and the request.
fn renew_at(now: Instant, expires_in: u64) -> Instant {
    let life = Duration::from_secs(expires_in.max(1));
    now + life - (life / 10).min(Duration::from_secs(30))
}

impl AuthState {
    pub(super) fn new(keychain: Keychain) -> AuthState {
        AuthState {
            keychain: std::sync::Arc::new(keychain),
            ..AuthState::default()
        }
    }

    /// The credential for `host` (reading `image`, `host/repository`, when known). The lookup
    /// may run credential helpers and provider plugins (up to a minute each): it runs on a
    /// blocking thread, never on the async workers.
    pub(super) async fn credential(
        &self,
        host: &str,
        image: Option<String>,
    ) -> Result<Option<(Credential, Source)>, super::ClientError> {
        let keychain = self.keychain.clone();
        let h = host.to_owned();
        let found = tokio::task::spawn_blocking(move || keychain.get_for(&h, image.as_deref()))
            .await
            .map_err(|e| super::ClientError::Credentials {
                registry: host.to_owned(),
                source: Box::new(CredentialError::Provider {
                    provider: "keychain".into(),
                    host: host.to_owned(),
                    reason: format!("the lookup's thread failed: {e}"),
                }),
            })?;
        found.map_err(|source| super::ClientError::Credentials {
            registry: host.to_owned(),
            source: Box::new(source),
        })
    }

    pub(super) fn challenge(&self, host: &str) -> Option<Auth> {
        self.challenges
            .lock()
            .expect("auth lock")
            .get(host)
            .cloned()
    }

    /// Takes `host` to want Basic credentials when it has not challenged yet (a registry that
    /// lets anonymous callers in never does, yet answers a known user more).
    pub(super) fn presume_basic(&self, host: &str) {
        self.challenges
            .lock()
            .expect("auth lock")
            .entry(host.to_owned())
            .or_insert(Auth::Basic);
    }

    /// Records the challenge of a 401 from `host`; `None` if it offered nothing usable.
    pub(super) fn record(
        &self,
        host: &str,
        headers: &HeaderMap,
    ) -> Result<Option<Auth>, challenge::ChallengeError> {
        let mut all = Vec::new();
        for v in headers.get_all(WWW_AUTHENTICATE) {
            let s = v.to_str().map_err(|_| challenge::ChallengeError {
                offset: 0,
                reason: "header is not ASCII",
            })?;
            all.extend(challenge::parse(s)?);
        }
        if all.is_empty() {
            return Ok(None);
        }
        let auth = challenge::select(&all)?;
        if let Some(a) = &auth {
            self.challenges
                .lock()
                .expect("auth lock")
                .insert(host.to_owned(), a.clone());
        }
        Ok(auth)
    }

    pub(super) fn cached_token(&self, host: &str, scope: &str) -> Option<String> {
        let mut tokens = self.tokens.lock().expect("auth lock");
        let key = (host.to_owned(), scope.to_owned());
        match tokens.get(&key) {
            Some(t) if Instant::now() < t.renew_at => Some(t.value.clone()),
            Some(_) => {
                tokens.remove(&key);
                None
            }
            None => None,
        }
    }

    pub(super) fn forget_token(&self, host: &str, scope: &str) {
        self.tokens
            .lock()
            .expect("auth lock")
            .remove(&(host.to_owned(), scope.to_owned()));
    }

    /// Fetches a token for `scopes` from the challenge's realm and caches it under `key`.
    pub(super) async fn fetch_token(
        &self,
        http: &reqwest::Client,
        host: &str,
        key: &str,
        bearer: &BearerChallenge,
        scopes: &[String],
        cred: Option<&Credential>,
    ) -> Result<String, TokenError> {
        self.token_fetches
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let realm = bearer.realm.clone();
        let other = |reason: String| TokenError::Other {
            realm: realm.clone(),
            reason,
        };
        let req = match cred {
            // OAuth2 refresh-token grant (docker's identitytoken).
            Some(Credential::IdentityToken { token, .. }) => {
                let mut form = form_body(&[
                    ("grant_type", "refresh_token"),
                    ("refresh_token", token),
                    ("client_id", "rdctl"),
                ]);
                if let Some(s) = &bearer.service {
                    form.append_pair("service", s);
                }
                if !scopes.is_empty() {
                    form.append_pair("scope", &scopes.join(" "));
                }
                http.post(realm.clone())
                    .header(
                        reqwest::header::CONTENT_TYPE,
                        "application/x-www-form-urlencoded",
                    )
                    .body(form.finish())
            }
            _ => {
                let mut url = realm.clone();
                {
                    let mut q = url.query_pairs_mut();
                    if let Some(s) = &bearer.service {
                        q.append_pair("service", s);
                    }
                    for s in scopes {
                        q.append_pair("scope", s);
                    }
                    if let Some(Credential::Basic { username, .. }) = cred {
                        q.append_pair("account", username);
                    }
                }
                let rb = http.get(url);
                match cred {
                    Some(Credential::Basic { username, password }) => {
                        rb.header(AUTHORIZATION, basic_header(username, password))
                    }
                    _ => rb,
                }
            }
        };
        let resp = req
            .send()
            .await
            .map_err(|e| other(validator::error_chain(&e)))?;
        let status = resp.status();
        let body = crate::body::read_limited(resp, MAX_TOKEN_ANSWER)
            .await
            .map_err(|e| match e {
                crate::body::ReadError::TooLarge => {
                    other(format!("answer larger than {MAX_TOKEN_ANSWER} bytes"))
                }
                crate::body::ReadError::Body(e) => other(e),
            })?;
        if status == StatusCode::UNAUTHORIZED || status == StatusCode::FORBIDDEN {
            return Err(TokenError::Refused {
                realm: realm.clone(),
                status: status.as_u16(),
                body: String::from_utf8_lossy(&body[..body.len().min(300)]).into_owned(),
            });
        }
        if !status.is_success() {
            return Err(other(format!(
                "answered {status}: {}",
                String::from_utf8_lossy(&body[..body.len().min(300)])
            )));
        }
        #[derive(serde::Deserialize)]
        struct Answer {
            #[serde(default)]
            token: Option<String>,
            #[serde(default)]
            access_token: Option<String>,
            #[serde(default)]
            expires_in: Option<u64>,
        }
        let a: Answer = serde_json::from_slice(&body)
            .map_err(|e| other(format!("answer is not token JSON: {e}")))?;
        let value = a
            .token
            .filter(|t| !t.is_empty())
            .or(a.access_token.filter(|t| !t.is_empty()))
            .ok_or_else(|| other("answer has no token".to_owned()))?;
        // A token goes into a header: refuse anything that cannot.
        if HeaderValue::from_str(&format!("Bearer {value}")).is_err() {
            return Err(other(
                "token has characters not allowed in a header".to_owned(),
            ));
        }
        let expires_in = a.expires_in.unwrap_or(DEFAULT_EXPIRES_IN);
        self.tokens.lock().expect("auth lock").insert(
            (host.to_owned(), key.to_owned()),
            Token {
                value: value.clone(),
                renew_at: renew_at(Instant::now(), expires_in),
            },
        );
        Ok(value)
    }
}

fn form_body(pairs: &[(&str, &str)]) -> form_urlencoded::Serializer<'static, String> {
    let mut s = form_urlencoded::Serializer::new(String::new());
    for (k, v) in pairs {
        s.append_pair(k, v);
    }
    s
}

/// `Basic base64(user:password)`.
pub(super) fn basic_header(username: &str, password: &str) -> HeaderValue {
    let mut v = HeaderValue::from_str(&format!(
        "Basic {}",
        B64.encode(format!("{username}:{password}"))
    ))
    .expect("base64 is a valid header value");
    v.set_sensitive(true);
    v
}

/// `Bearer <token>` (checked when the token was fetched).
pub(super) fn bearer_header(token: &str) -> Option<HeaderValue> {
    let mut v = HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
    v.set_sensitive(true);
    Some(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A plugin that takes half a second does not hold the async thread: on a one-thread
    /// runtime a timer set beside the lookup fires while the plugin runs.
    #[tokio::test(flavor = "current_thread")]
    async fn credential_lookups_run_off_the_async_thread() {
        use crate::credential_provider::tests::{plugin, requests, scratch};
        let dir = scratch("offruntime");
        let state =
            AuthState::new(Keychain::empty().with_providers(vec![plugin(&dir, "0.5", "0s")]));
        let lookup = async {
            let c = state
                .credential("reg.example", Some("reg.example/apps/web".into()))
                .await
                .unwrap();
            (c, Instant::now())
        };
        let timer = async {
            tokio::time::sleep(Duration::from_millis(20)).await;
            Instant::now()
        };
        let ((found, looked_up), ticked) = tokio::join!(lookup, timer);
        assert!(matches!(found, Some((_, Source::Provider(ref n))) if n == "plugin"));
        assert!(
            ticked < looked_up,
            "the timer fired only after the plugin finished: the lookup blocked the runtime"
        );
        assert_eq!(requests(&dir), ["reg.example/apps/web"]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn renewal_comes_before_expiry() {
        let now = Instant::now();
        assert_eq!(renew_at(now, 60), now + Duration::from_secs(54));
        assert_eq!(renew_at(now, 3600), now + Duration::from_secs(3570));
        assert_eq!(renew_at(now, 0), now + Duration::from_millis(900));
    }

    #[test]
    fn basic_header_is_base64_of_user_colon_password() {
        assert_eq!(basic_header("a", "b:c").to_str().unwrap(), "Basic YTpiOmM=");
    }
}
