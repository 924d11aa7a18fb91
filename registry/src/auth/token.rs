//! Docker registry bearer tokens: JWTs whose `access` claim lists resources and actions
//! (`{"type":"repository","name":"app","actions":["pull"]}`), signed with ES256 or RS256.
//! [`Issuer`] signs them for the built-in token endpoint; [`Verifier`] checks tokens of the
//! built-in issuer and of trusted external issuers, each by its public key.

use std::path::Path;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};

use super::AuthError;
use super::acl::{Action, Actions};

/// Allowed clock difference between the issuer and this registry.
const LEEWAY_SECS: u64 = 5;

/// One entry of the `access` claim.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ResourceActions {
    /// `repository` or `registry`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The repository name, or `catalog`.
    pub name: String,
    /// Granted actions (`pull`, `push`, `delete`, `*`).
    pub actions: Vec<String>,
}

/// The claims of a registry token.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Claims {
    /// Issuer.
    pub iss: String,
    /// Subject: the user name, empty for anonymous callers.
    #[serde(default)]
    pub sub: String,
    /// Audience: the registry's service name.
    pub aud: String,
    /// Expiry (seconds since the epoch).
    pub exp: u64,
    /// Not before.
    #[serde(default)]
    pub nbf: u64,
    /// Issued at.
    #[serde(default)]
    pub iat: u64,
    /// Token id.
    #[serde(default)]
    pub jti: String,
    /// What the bearer may do.
    #[serde(default)]
    pub access: Vec<ResourceActions>,
}

impl Claims {
    /// The actions granted on repository `name`.
    pub fn repository_actions(&self, name: &str) -> Actions {
        self.access
            .iter()
            .filter(|r| r.kind == "repository" && r.name == name)
            .flat_map(|r| r.actions.iter())
            .fold(Actions::NONE, |acc, a| match a.as_str() {
                "*" => Actions::ALL,
                a => Action::parse(a).map_or(acc, |a| acc.with(a)),
            })
    }

    /// Whether the token grants listing the catalog (`registry:catalog:*`).
    pub fn catalog(&self) -> bool {
        self.access.iter().any(|r| {
            r.kind == "registry" && r.name == "catalog" && r.actions.iter().any(|a| a == "*")
        })
    }
}

/// One requested scope of a token request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// `repository:<name>:<actions>`
    Repository {
        /// The repository.
        name: String,
        /// The actions asked for.
        actions: Actions,
    },
    /// `registry:catalog:*`
    Catalog,
}

impl Scope {
    /// Parses the `scope` values of a token request (each may hold several, space-separated).
    /// Scopes of other kinds, or with unknown actions, are skipped: a token grants what it can
    /// and nothing for the rest, as the token protocol says.
    pub fn parse_all<'a>(values: impl IntoIterator<Item = &'a str>) -> Vec<Scope> {
        let mut out = Vec::new();
        for v in values {
            for s in v.split(' ').filter(|s| !s.is_empty()) {
                // `type:name:actions`; names may hold `:` (a registry host with a port), so the
                // actions are after the last colon.
                let Some((kind, rest)) = s.split_once(':') else {
                    continue;
                };
                let Some((name, actions)) = rest.rsplit_once(':') else {
                    continue;
                };
                // `repository(plugin)` is a resource class of the same type.
                let kind = kind.split('(').next().unwrap_or(kind);
                match kind {
                    "repository" => {
                        let actions = actions.split(',').fold(Actions::NONE, |acc, a| match a {
                            "*" => Actions::ALL,
                            a => Action::parse(a).map_or(acc, |a| acc.with(a)),
                        });
                        out.push(Scope::Repository {
                            name: name.to_owned(),
                            actions,
                        });
                    }
                    "registry" if name == "catalog" && actions.split(',').any(|a| a == "*") => {
                        out.push(Scope::Catalog)
                    }
                    _ => {}
                }
            }
        }
        out
    }

    /// The scope as written in a challenge.
    pub fn render(&self) -> String {
        match self {
            Scope::Repository { name, actions } => {
                let a: Vec<&str> = actions.iter().map(Action::as_str).collect();
                format!("repository:{name}:{}", a.join(","))
            }
            Scope::Catalog => "registry:catalog:*".to_owned(),
        }
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn read_pem(key: &'static str, path: &Path) -> Result<Vec<u8>, AuthError> {
    std::fs::read(path).map_err(|source| AuthError::Read {
        what: key,
        path: path.to_owned(),
        source,
    })
}

fn key_error(key: &'static str, path: &Path, reason: impl Into<String>) -> AuthError {
    AuthError::Key {
        key,
        path: path.to_owned(),
        reason: reason.into(),
    }
}

/// Reads a public key (PEM, `BEGIN PUBLIC KEY`): an EC key verifies ES256 and ES384 tokens, an
/// RSA key RS256/384/512 and PS256/384/512.
pub(crate) fn load_public_key(
    key: &'static str,
    path: &Path,
) -> Result<(DecodingKey, Vec<Algorithm>), AuthError> {
    let pem = read_pem(key, path)?;
    if let Ok(k) = DecodingKey::from_ec_pem(&pem) {
        return Ok((k, vec![Algorithm::ES256, Algorithm::ES384]));
    }
    match DecodingKey::from_rsa_pem(&pem) {
        Ok(k) => Ok((
            k,
            vec![
                Algorithm::RS256,
                Algorithm::RS384,
                Algorithm::RS512,
                Algorithm::PS256,
                Algorithm::PS384,
                Algorithm::PS512,
            ],
        )),
        Err(e) => Err(key_error(
            key,
            path,
            format!("not a PEM EC or RSA public key ({e})"),
        )),
    }
}

/// Signs tokens for the built-in token endpoint.
pub struct Issuer {
    key: EncodingKey,
    algorithm: Algorithm,
    /// `iss` of the tokens.
    pub issuer: String,
    /// `aud` of the tokens.
    pub service: String,
    /// How long tokens live.
    pub expiry: Duration,
}

impl std::fmt::Debug for Issuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Issuer")
            .field("algorithm", &self.algorithm)
            .field("issuer", &self.issuer)
            .field("service", &self.service)
            .field("expiry", &self.expiry)
            .finish_non_exhaustive()
    }
}

impl Issuer {
    /// Reads a PKCS#8 PEM private key: P-256 signs ES256, RSA signs RS256.
    pub(crate) fn load(
        path: &Path,
        issuer: String,
        service: String,
        expiry: Duration,
    ) -> Result<Issuer, AuthError> {
        let pem = read_pem("auth.token.signing_key", path)?;
        let (key, algorithm) = if let Ok(k) = EncodingKey::from_ec_pem(&pem) {
            (k, Algorithm::ES256)
        } else {
            match EncodingKey::from_rsa_pem(&pem) {
                Ok(k) => (k, Algorithm::RS256),
                Err(e) => {
                    return Err(key_error(
                        "auth.token.signing_key",
                        path,
                        format!("not a PKCS#8 PEM P-256 or RSA private key ({e})"),
                    ));
                }
            }
        };
        let issuer = Issuer {
            key,
            algorithm,
            issuer,
            service,
            expiry,
        };
        // Sign once now, so a key of the wrong curve fails at start and not on the first login.
        issuer
            .sign("", Vec::new(), now_secs())
            .map_err(|e| key_error("auth.token.signing_key", path, e))?;
        Ok(issuer)
    }

    /// A token for `sub` granting `access`, issued at `iat` (seconds since the epoch).
    pub(crate) fn sign(
        &self,
        sub: &str,
        access: Vec<ResourceActions>,
        iat: u64,
    ) -> Result<String, String> {
        let claims = Claims {
            iss: self.issuer.clone(),
            sub: sub.to_owned(),
            aud: self.service.clone(),
            exp: iat + self.expiry.as_secs(),
            nbf: iat.saturating_sub(LEEWAY_SECS),
            iat,
            jti: uuid::Uuid::new_v4().to_string(),
            access,
        };
        jsonwebtoken::encode(&Header::new(self.algorithm), &claims, &self.key)
            .map_err(|e| format!("cannot sign a token: {e}"))
    }
}

/// A key tokens are checked with.
struct Trusted {
    issuer: String,
    key: DecodingKey,
    algorithms: Vec<Algorithm>,
    builtin: bool,
}

/// Checks tokens: signature by the key of the token's issuer, `exp`, `nbf`, `iss` and `aud`.
pub struct Verifier {
    service: String,
    trusted: Vec<Trusted>,
}

impl std::fmt::Debug for Verifier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let issuers: Vec<&str> = self.trusted.iter().map(|t| t.issuer.as_str()).collect();
        f.debug_struct("Verifier")
            .field("service", &self.service)
            .field("issuers", &issuers)
            .finish()
    }
}

/// A checked token.
#[derive(Debug, Clone)]
pub struct Verified {
    /// Its claims.
    pub claims: Claims,
    /// Whether the built-in issuer signed it (then its subject is one of our users and the ACL
    /// applies to it).
    pub builtin: bool,
}

impl Verifier {
    pub(crate) fn new(service: String) -> Verifier {
        Verifier {
            service,
            trusted: Vec::new(),
        }
    }

    /// Trusts tokens of `issuer` signed by the key in `path`.
    pub(crate) fn trust(
        &mut self,
        key: &'static str,
        issuer: String,
        path: &Path,
        builtin: bool,
    ) -> Result<(), AuthError> {
        let (k, algorithms) = load_public_key(key, path)?;
        self.trusted.push(Trusted {
            issuer,
            key: k,
            algorithms,
            builtin,
        });
        Ok(())
    }

    /// Whether `token` verifies with the built-in issuer's key (used at start to check that
    /// the public key belongs to the signing key).
    pub(crate) fn verify(&self, token: &str) -> Result<Verified, String> {
        // The issuer picks the key; the claim is read unverified only for that choice, and the
        // verification below checks it again.
        let unverified: Claims = jsonwebtoken::dangerous::insecure_decode(token)
            .map(|d| d.claims)
            .map_err(|e| format!("malformed token: {e}"))?;
        let mut last = format!("issuer {:?} is not trusted", unverified.iss);
        for t in self.trusted.iter().filter(|t| t.issuer == unverified.iss) {
            let mut v = Validation::new(t.algorithms[0]);
            v.algorithms = t.algorithms.clone();
            v.leeway = LEEWAY_SECS;
            v.validate_nbf = true;
            v.set_audience(&[&self.service]);
            v.set_issuer(&[&t.issuer]);
            v.set_required_spec_claims(&["exp", "iss", "aud"]);
            match jsonwebtoken::decode::<Claims>(token, &t.key, &v) {
                Ok(d) => {
                    return Ok(Verified {
                        claims: d.claims,
                        builtin: t.builtin,
                    });
                }
                Err(e) => last = format!("token refused: {e}"),
            }
        }
        Err(last)
    }
}

pub(crate) fn now() -> u64 {
    now_secs()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scopes_parse_from_the_right_and_skip_unknown_kinds() {
        let got = Scope::parse_all([
            "repository:a/b:pull,push",
            "repository:host:5000/x:pull registry:catalog:* other:x:y",
            "repository(plugin):p:*",
            "nonsense",
        ]);
        let pull = Actions::NONE.with(Action::Pull);
        assert_eq!(
            got,
            vec![
                Scope::Repository {
                    name: "a/b".into(),
                    actions: pull.with(Action::Push)
                },
                Scope::Repository {
                    name: "host:5000/x".into(),
                    actions: pull
                },
                Scope::Catalog,
                Scope::Repository {
                    name: "p".into(),
                    actions: Actions::ALL
                },
            ]
        );
        assert_eq!(got[0].render(), "repository:a/b:pull,push");
    }
}
