//! `login` and `logout`: check a credential against a registry, then keep it where docker,
//! podman and every `rdctl` command look for it.
//!
//! [`login`] sends `GET /v2/` with the credential through the same challenge flow as any
//! request (Basic, or a bearer token fetched from the realm with the credential), and only
//! after the registry accepted it writes the credential: to the credential helper the file
//! names for the host (`credHelpers.<host>`, else `credsStore`), otherwise into the file's
//! `auths` (mode 0600, atomic replace; see [`AuthFile::save`]). A refused credential is never
//! written. [`logout`] removes the host's entry from the file and asks the helper, if one is
//! named, to erase its copy.
//!
//! Which file: [`Keychain::login_file`] (`--auth-file`, else `$REGISTRY_AUTH_FILE`, else
//! `$DOCKER_CONFIG/config.json` or `~/.docker/config.json`), the first file every command
//! reads, so what one logs in with is what the next command finds.

use std::path::{Path, PathBuf};

use super::credentials::{self, AuthFile, Credential, CredentialError};
use super::keychain::Keychain;
use super::{Client, ClientBuilder, ClientError};

/// Why a login or logout failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LoginError {
    /// The registry argument is not `host[:port]`.
    #[error("invalid registry {input:?}: {reason}")]
    Registry {
        /// What was given.
        input: String,
        /// What is wrong.
        reason: String,
    },
    /// The registry refused the credential, or could not be asked; nothing was written.
    #[error("login to {registry} failed; nothing was saved")]
    Check {
        /// The registry host.
        registry: String,
        /// The cause.
        #[source]
        source: Box<ClientError>,
    },
    /// The credential file or helper could not be read or written.
    #[error("cannot store the credential for {registry}")]
    Store {
        /// The registry host.
        registry: String,
        /// The cause.
        #[source]
        source: CredentialError,
    },
}

/// Where a credential was written to or removed from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Stored {
    /// An `auths` entry of this file.
    File(PathBuf),
    /// This credential helper (`docker-credential-<name>`), named in this file.
    Helper {
        /// The helper's name.
        helper: String,
        /// The file naming it.
        file: PathBuf,
    },
}

impl std::fmt::Display for Stored {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Stored::File(p) => write!(f, "{}", p.display()),
            Stored::Helper { helper, file } => {
                write!(
                    f,
                    "docker-credential-{helper} (named in {})",
                    file.display()
                )
            }
        }
    }
}

/// What [`login`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoginOutcome {
    /// The registry host the credential is kept for.
    pub registry: String,
    /// Where it went.
    pub stored: Stored,
    /// Whether the registry asked for credentials (a challenge on a 401, or on the 200 of an
    /// anonymous `/v2/`), and so checked them. A registry that lets anyone in and names no
    /// challenge never looks at them, so they are saved unchecked (as docker does); callers
    /// say so.
    pub challenged: bool,
}

/// The registry host for a `login`/`logout` argument: `host[:port]`, also given as a URL
/// (`https://host:port/`, `https://host/v2/`), as docker accepts it. The host is returned in
/// its canonical spelling ([`validator::RegistryHost`]), as references keep it, so the entry
/// written is the one every spelling finds (a port other than 443 or 80 makes a different
/// entry, as it does in references).
pub fn registry_host(input: &str) -> Result<String, LoginError> {
    let err = |reason: &str| LoginError::Registry {
        input: input.chars().take(300).collect(),
        reason: reason.to_owned(),
    };
    let trimmed = input.trim();
    let rest = trimmed
        .strip_prefix("https://")
        .or_else(|| trimmed.strip_prefix("http://"))
        .unwrap_or(trimmed);
    let host = rest.split('/').next().unwrap_or("");
    let path = &rest[host.len()..];
    if !matches!(path, "" | "/" | "/v1/" | "/v2/" | "/v1" | "/v2") {
        return Err(err("a registry is host[:port], without a repository path"));
    }
    if host.is_empty() {
        return Err(err("no host"));
    }
    if !host
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
    {
        return Err(err("a host has only letters, digits, '.', '-', ':' and []"));
    }
    validator::RegistryHost::parse(host)
        .map(|h| h.to_string())
        .map_err(|e| err(&e.reason))
}

/// Checks `credential` against `registry` with a client built from `builder` (its TLS
/// settings; its keychain is replaced by the one credential), then stores it for `registry`
/// with the helper `file` names for the host, else in `file` itself.
pub async fn login(
    builder: ClientBuilder,
    registry: &str,
    credential: Credential,
    file: &Path,
) -> Result<LoginOutcome, LoginError> {
    let check = |source: ClientError| LoginError::Check {
        registry: registry.to_owned(),
        source: Box::new(source),
    };
    let client: Client = builder
        .keychain(Keychain::empty().with_credential(registry, credential.clone()))
        .build()
        .map_err(check)?;
    client.check_login(registry).await.map_err(check)?;
    let challenged = client.auth.challenge(registry).is_some();
    let stored = store(file, registry, &credential).map_err(|source| LoginError::Store {
        registry: registry.to_owned(),
        source,
    })?;
    Ok(LoginOutcome {
        registry: registry.to_owned(),
        stored,
        challenged,
    })
}

/// Writes `credential` for `registry`: to the helper `file` names for the host, else into
/// the file's `auths`. An `auths` entry left from before a helper was configured is removed,
/// so the file never holds a stale secret beside the helper's.
pub fn store(
    file: &Path,
    registry: &str,
    credential: &Credential,
) -> Result<Stored, CredentialError> {
    let mut f = AuthFile::load(file)?;
    if let Some(helper) = f.helper(registry).map(str::to_owned) {
        credentials::helper_store(&helper, registry, credential)?;
        if f.remove(registry) {
            f.save()?;
        }
        return Ok(Stored::Helper {
            helper,
            file: file.to_owned(),
        });
    }
    f.set(registry, credential);
    f.save()?;
    Ok(Stored::File(file.to_owned()))
}

/// Removes `registry`'s credential: its `auths` entries in `file`, and the copy held by the
/// helper `file` names for the host. Returns where something was removed (empty: the host
/// had no credential there).
pub fn logout(file: &Path, registry: &str) -> Result<Vec<Stored>, LoginError> {
    let store_err = |source| LoginError::Store {
        registry: registry.to_owned(),
        source,
    };
    let mut f = AuthFile::load(file).map_err(store_err)?;
    let mut removed = Vec::new();
    if let Some(helper) = f.helper(registry).map(str::to_owned) {
        // Ask first: erasing what the helper does not hold is not an error, but then
        // nothing was removed.
        if credentials::helper_get(&helper, registry)
            .map_err(store_err)?
            .is_some()
        {
            credentials::helper_erase(&helper, registry).map_err(store_err)?;
            removed.push(Stored::Helper {
                helper,
                file: file.to_owned(),
            });
        }
    }
    if f.remove(registry) {
        f.save().map_err(store_err)?;
        removed.push(Stored::File(file.to_owned()));
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registry_host_accepts_docker_forms() {
        for (input, host) in [
            ("reg.example:5000", "reg.example:5000"),
            ("https://reg.example:5000/", "reg.example:5000"),
            ("https://reg.example/v2/", "reg.example"),
            ("http://127.0.0.1:5000", "127.0.0.1:5000"),
            ("[::1]:5000", "[::1]:5000"),
            ("LOCALHOST:5000", "localhost:5000"),
            ("https://Reg.Example:443/v2/", "reg.example"),
            ("https://index.docker.io/v1/", "docker.io"),
            ("[0:0::1]:5000", "[::1]:5000"),
        ] {
            assert_eq!(registry_host(input).unwrap(), host, "{input}");
        }
        for (input, why) in [
            ("", "no host"),
            ("https://", "no host"),
            ("reg.example/zones/app", "without a repository path"),
            ("reg example", "only letters"),
            ("127.1:5000", "dotted-quad"),
        ] {
            let e = registry_host(input).unwrap_err().to_string();
            assert!(e.contains(why), "{input}: {e}");
        }
    }

    #[test]
    fn store_and_logout_edit_the_file_only() {
        let d = tempfile::tempdir().unwrap();
        let file = d.path().join("config.json");
        std::fs::write(&file, r#"{"auths": {"other:1": {"auth": "eDp5"}}, "x": 1}"#).unwrap();
        let cred = Credential::Basic {
            username: "u".into(),
            password: "p".into(),
        };
        assert_eq!(
            store(&file, "reg:5000", &cred).unwrap(),
            Stored::File(file.clone())
        );
        assert_eq!(
            AuthFile::load(&file).unwrap().get("reg:5000").unwrap(),
            Some(cred)
        );
        assert_eq!(
            logout(&file, "reg:5000").unwrap(),
            [Stored::File(file.clone())]
        );
        assert_eq!(logout(&file, "reg:5000").unwrap(), []);
        let f = AuthFile::load(&file).unwrap();
        assert!(f.get("reg:5000").unwrap().is_none());
        assert!(f.get("other:1").unwrap().is_some());
        let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        assert_eq!(v["x"], 1, "unknown keys survive");
    }
}
