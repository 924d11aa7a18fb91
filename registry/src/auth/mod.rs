//! Authentication and authorisation of the registry API (`[auth]` in the configuration).
//!
//! - [`AuthConfig`]: the `[auth]` table parsed into types once ([`acl::Acl`] with its groups
//!   and rules, the htpasswd path, the token settings); bad entries are errors naming the key.
//! - [`Auth`]: what the server runs with: the users of the htpasswd file (bcrypt, with a short
//!   cache of successful checks), the ACL, and optionally the token [`token::Issuer`] and
//!   [`token::Verifier`].
//! - The middleware in `http` runs on every `/v2/` request before the handler reads a byte of
//!   the body: it works out the repository and action of the request, authenticates the caller
//!   (Basic, Bearer, or none) and answers 401 `UNAUTHORIZED` with a challenge or 403 `DENIED`,
//!   or passes the caller on to the handler as an [`Access`] (the catalog filters by it, a
//!   cross-repository mount checks its source with it).
//!
//! Without an `[auth]` table nothing of this runs and the registry is open, as before.

pub mod acl;
mod htpasswd;
pub(crate) mod http;
pub mod token;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use serde::Deserialize;

use acl::{Acl, Action, Actions, FileRule, Who};
use htpasswd::Htpasswd;
use token::{Issuer, Verified, Verifier};

/// Why the access-control settings cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// A setting has a bad value.
    #[error("invalid {key}: {reason}")]
    Setting {
        /// The key (`auth.acl[2].subjects[0]`).
        key: String,
        /// What is wrong.
        reason: String,
    },
    /// A file named by a setting cannot be read.
    #[error("cannot read {what} {path}")]
    Read {
        /// The setting or kind of file.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A line of the htpasswd file is not acceptable.
    #[error("{path}:{line}: {reason}")]
    Htpasswd {
        /// The file.
        path: PathBuf,
        /// The line (1-based).
        line: usize,
        /// What is wrong.
        reason: String,
    },
    /// A key file is not a usable key.
    #[error("{key} {path}: {reason}")]
    Key {
        /// The setting.
        key: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
}

/// The `[auth]` table, parsed. Files it names are read by [`Auth::load`].
#[derive(Debug, Clone, PartialEq)]
pub struct AuthConfig {
    /// Realm of Basic challenges (`auth.realm`, default `"rdctl registry"`).
    pub realm: String,
    /// The htpasswd file of users (`auth.htpasswd`); without it only anonymous rules and
    /// tokens of external issuers can grant anything.
    pub htpasswd: Option<PathBuf>,
    /// How long a successful password check is remembered (`auth.cache`, default 60 s).
    pub cache_ttl: Duration,
    /// Groups and rules.
    pub acl: Acl,
    /// Bearer tokens (`[auth.token]`).
    pub token: Option<TokenConfig>,
}

/// The `[auth.token]` table, parsed.
#[derive(Debug, Clone, PartialEq)]
pub struct TokenConfig {
    /// The audience of tokens, and `service` of challenges (`auth.token.service`).
    pub service: String,
    /// Where clients get tokens (`auth.token.realm`); default: `/token` on the host the
    /// client asked.
    pub realm: Option<String>,
    /// `iss` of tokens this registry signs (`auth.token.issuer`, default `"rdctl-registry"`).
    pub issuer: String,
    /// Private key of the built-in token endpoint (`auth.token.signing_key`).
    pub signing_key: Option<PathBuf>,
    /// Its public half (`auth.token.public_key`), required with `signing_key`.
    pub public_key: Option<PathBuf>,
    /// Lifetime of issued tokens (`auth.token.expiry`, default 300 s).
    pub expiry: Duration,
    /// External issuers whose tokens are accepted (`[[auth.token.trusted]]`).
    pub trusted: Vec<TrustedIssuer>,
}

/// An external token issuer.
#[derive(Debug, Clone, PartialEq)]
pub struct TrustedIssuer {
    /// Its `iss`.
    pub issuer: String,
    /// Its public key (PEM).
    pub public_key: PathBuf,
}

/// The `[auth]` table as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileAuth {
    realm: Option<String>,
    htpasswd: Option<PathBuf>,
    #[serde(alias = "cache_secs")]
    cache: Option<config_toml::HumanDuration>,
    groups: Option<BTreeMap<String, Vec<String>>>,
    acl: Option<Vec<FileRule>>,
    token: Option<FileToken>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileToken {
    service: Option<String>,
    realm: Option<String>,
    issuer: Option<String>,
    signing_key: Option<PathBuf>,
    public_key: Option<PathBuf>,
    #[serde(alias = "expiry_secs")]
    expiry: Option<config_toml::HumanDuration>,
    trusted: Option<Vec<FileTrusted>>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTrusted {
    issuer: String,
    public_key: PathBuf,
}

impl AuthConfig {
    pub(crate) fn from_file(f: FileAuth) -> Result<AuthConfig, AuthError> {
        let bad = |key: &str, reason: &str| AuthError::Setting {
            key: key.to_owned(),
            reason: reason.to_owned(),
        };
        let acl = Acl::from_file(f.groups.unwrap_or_default(), f.acl.unwrap_or_default())?;
        let token = match f.token {
            None => None,
            Some(t) => {
                let service = t
                    .service
                    .filter(|s| !s.is_empty())
                    .ok_or_else(|| bad("auth.token.service", "is required with [auth.token]"))?;
                if t.signing_key.is_some() != t.public_key.is_some() {
                    return Err(bad(
                        "auth.token.public_key",
                        "signing_key and public_key go together (the public key checks the tokens the registry signs)",
                    ));
                }
                let trusted: Vec<TrustedIssuer> = t
                    .trusted
                    .unwrap_or_default()
                    .into_iter()
                    .map(|x| TrustedIssuer {
                        issuer: x.issuer,
                        public_key: x.public_key,
                    })
                    .collect();
                if t.signing_key.is_none() && trusted.is_empty() {
                    return Err(bad(
                        "auth.token",
                        "needs signing_key (the built-in token endpoint) or at least one [[auth.token.trusted]] issuer",
                    ));
                }
                if t.signing_key.is_none() && t.realm.is_none() {
                    return Err(bad(
                        "auth.token.realm",
                        "is required when tokens come only from external issuers (it is their token URL)",
                    ));
                }
                if t.expiry.is_some_and(|e| e.0.is_zero()) {
                    return Err(bad("auth.token.expiry", "\"0\" must be longer than 0"));
                }
                Some(TokenConfig {
                    service,
                    realm: t.realm,
                    issuer: t.issuer.unwrap_or_else(|| "rdctl-registry".to_owned()),
                    signing_key: t.signing_key,
                    public_key: t.public_key,
                    expiry: t.expiry.map_or(Duration::from_secs(300), Duration::from),
                    trusted,
                })
            }
        };
        Ok(AuthConfig {
            realm: f.realm.unwrap_or_else(|| "rdctl registry".to_owned()),
            htpasswd: f.htpasswd,
            cache_ttl: f.cache.map_or(Duration::from_secs(60), Duration::from),
            acl,
            token,
        })
    }
}

/// The running access control: users, ACL and token keys.
#[derive(Debug)]
pub struct Auth {
    realm: String,
    users: Option<Users>,
    acl: Acl,
    tokens: Option<Tokens>,
}

/// The htpasswd users, replaced whole when the file is read again (SIGHUP): a check sees one
/// version of the file, and the replacement starts with an empty cache of successful checks, so
/// a removed user or a changed password stops working at once rather than after the cache TTL.
#[derive(Debug)]
struct Users {
    path: PathBuf,
    ttl: Duration,
    current: RwLock<Arc<Htpasswd>>,
}

#[derive(Debug)]
struct Tokens {
    service: String,
    realm: Option<String>,
    issuer: Option<Issuer>,
    verifier: Verifier,
}

impl Auth {
    /// Reads the files the configuration names (htpasswd, keys) and checks that the built-in
    /// issuer's public key verifies what its private key signs.
    pub fn load(c: &AuthConfig) -> Result<Auth, AuthError> {
        let users = match &c.htpasswd {
            Some(p) => Some(Users {
                path: p.clone(),
                ttl: c.cache_ttl,
                current: RwLock::new(Arc::new(Htpasswd::load(p, c.cache_ttl)?)),
            }),
            None => None,
        };
        let tokens = match &c.token {
            None => None,
            Some(t) => {
                let mut verifier = Verifier::new(t.service.clone());
                let issuer = match (&t.signing_key, &t.public_key) {
                    (Some(private), Some(public)) => {
                        let issuer =
                            Issuer::load(private, t.issuer.clone(), t.service.clone(), t.expiry)?;
                        verifier.trust("auth.token.public_key", t.issuer.clone(), public, true)?;
                        let probe =
                            issuer
                                .sign("", Vec::new(), token::now())
                                .map_err(|reason| AuthError::Key {
                                    key: "auth.token.signing_key",
                                    path: private.clone(),
                                    reason,
                                })?;
                        verifier.verify(&probe).map_err(|reason| AuthError::Key {
                            key: "auth.token.public_key",
                            path: public.clone(),
                            reason: format!("does not verify what signing_key signs ({reason})"),
                        })?;
                        Some(issuer)
                    }
                    _ => None,
                };
                for (i, x) in t.trusted.iter().enumerate() {
                    if issuer.is_some() && x.issuer == t.issuer {
                        return Err(AuthError::Setting {
                            key: format!("auth.token.trusted[{i}].issuer"),
                            reason: format!(
                                "{:?} is the built-in issuer's name (auth.token.issuer)",
                                x.issuer
                            ),
                        });
                    }
                    verifier.trust(
                        "auth.token.trusted.public_key",
                        x.issuer.clone(),
                        &x.public_key,
                        false,
                    )?;
                }
                Some(Tokens {
                    service: t.service.clone(),
                    realm: t.realm.clone(),
                    issuer,
                    verifier,
                })
            }
        };
        Ok(Auth {
            realm: c.realm.clone(),
            users,
            acl: c.acl.clone(),
            tokens,
        })
    }

    /// Reads the htpasswd file again (on SIGHUP). When it is good its users replace the ones in
    /// use and the path and user count are returned; when it is not, the users in use stay and
    /// the error names the file (and line). None without an htpasswd file.
    pub fn reload_users(&self) -> Option<Result<(&Path, usize), AuthError>> {
        let users = self.users.as_ref()?;
        Some(Htpasswd::load(&users.path, users.ttl).map(|fresh| {
            let n = fresh.len();
            *users.current.write().expect("users lock") = Arc::new(fresh);
            (users.path.as_path(), n)
        }))
    }

    /// What an operator should know at start about this configuration, if anything: with
    /// Basic auth alone and a rule for anonymous callers, docker cannot both pull anonymously
    /// and log in and push. Such a registry answers an anonymous `GET /v2/` with 200 (docker
    /// pulls need that, and skopeo reads the challenge the 200 carries), and docker (moby)
    /// takes a 200 there to mean "no auth": it never sends credentials, so `docker login`
    /// accepts any password and `docker push` fails with "authentication required".
    /// `[auth.token]` serves both (docs/auth.md, "docker").
    pub fn start_hint(&self) -> Option<&'static str> {
        (self.tokens.is_none() && self.acl.anonymous_allowed()).then_some(
            "Basic auth with a rule for anonymous callers: docker clients pull anonymously but \
             never send credentials here (docker login accepts any password, docker push fails \
             with \"authentication required\"); skopeo, podman, crane, oras and rdctl work; \
             configure [auth.token] for docker logins and pushes (docs/auth.md, \"docker\")",
        )
    }

    /// Whether the registry answers `/token` itself.
    pub fn issues_tokens(&self) -> bool {
        self.tokens.as_ref().is_some_and(|t| t.issuer.is_some())
    }

    /// A token for `user` (None: anonymous) with the given scopes, granted as far as the ACL
    /// allows; the same answer the token endpoint gives. None when the registry issues no
    /// tokens.
    pub fn issue(
        &self,
        user: Option<&str>,
        scopes: &[token::Scope],
    ) -> Option<Result<String, String>> {
        let t = self.tokens.as_ref()?;
        let issuer = t.issuer.as_ref()?;
        Some(issuer.sign(user.unwrap_or(""), self.grant(user, scopes), token::now()))
    }

    /// The `access` claim for a token request: each scope as far as the ACL allows.
    fn grant(&self, user: Option<&str>, scopes: &[token::Scope]) -> Vec<token::ResourceActions> {
        let who = user.map_or(Who::Anonymous, Who::User);
        let mut out = Vec::new();
        for s in scopes {
            match s {
                token::Scope::Repository { name, actions } => {
                    let granted = self.acl.granted(who, name).intersect(*actions);
                    out.push(token::ResourceActions {
                        kind: "repository".to_owned(),
                        name: name.clone(),
                        actions: granted.iter().map(|a| a.as_str().to_owned()).collect(),
                    });
                }
                token::Scope::Catalog => {
                    if user.is_some() || self.acl.anonymous_allowed() {
                        out.push(token::ResourceActions {
                            kind: "registry".to_owned(),
                            name: "catalog".to_owned(),
                            actions: vec!["*".to_owned()],
                        });
                    }
                }
            }
        }
        out
    }

    /// Checks a Basic user and password.
    async fn check_password(&self, user: &str, password: &str) -> bool {
        let Some(users) = &self.users else {
            return false;
        };
        // Cloned out of the lock: the check awaits bcrypt and must not hold it.
        let current = Arc::clone(&users.current.read().expect("users lock"));
        current.verify(user, password).await
    }
}

/// Who made a request, once authenticated.
#[derive(Debug, Clone)]
pub(crate) enum Caller {
    /// No credentials.
    Anonymous,
    /// A user of the htpasswd file (Basic).
    User(String),
    /// A verified bearer token.
    Token(Box<Verified>),
}

/// The caller of a request that passed the middleware, for handlers that decide more (the
/// catalog filters by it; a mount checks its source repository).
#[derive(Debug, Clone)]
pub(crate) struct Access {
    auth: Arc<Auth>,
    caller: Caller,
}

impl Access {
    /// What the caller may do on `repo`.
    pub(crate) fn actions(&self, repo: &str) -> Actions {
        match &self.caller {
            Caller::Anonymous => self.auth.acl.granted(Who::Anonymous, repo),
            Caller::User(u) => self.auth.acl.granted(Who::User(u), repo),
            Caller::Token(t) => t.claims.repository_actions(repo),
        }
    }

    /// The user name the caller authenticated as (a token's subject); None when anonymous.
    pub(crate) fn user(&self) -> Option<&str> {
        match &self.caller {
            Caller::Anonymous => None,
            Caller::User(u) => Some(u),
            Caller::Token(t) => Some(&t.claims.sub)
                .filter(|s| !s.is_empty())
                .map(|s| s.as_str()),
        }
    }

    /// Whether the caller may do `a` on `repo`.
    pub(crate) fn may(&self, repo: &str, a: Action) -> bool {
        self.actions(repo).contains(a)
    }

    /// Whether the catalog shows `repo` to the caller: a repository it may pull. A token of the
    /// built-in issuer carries only the catalog scope, so its subject's ACL decides; a token of
    /// an external issuer with the catalog scope sees every repository (its issuer decided).
    pub(crate) fn lists(&self, repo: &str) -> bool {
        match &self.caller {
            Caller::Token(t) if t.builtin => {
                let who = if t.claims.sub.is_empty() {
                    Who::Anonymous
                } else {
                    Who::User(&t.claims.sub)
                };
                self.auth.acl.granted(who, repo).contains(Action::Pull)
            }
            Caller::Token(_) => true,
            _ => self.may(repo, Action::Pull),
        }
    }
}
