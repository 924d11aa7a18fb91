//! Registry credentials from docker `config.json` and containers `auth.json` files, and from
//! docker credential helpers.
//!
//! Files searched, first match wins ([`Keychain::from_env`]):
//! 1. the file given by the caller (`--auth-file`, the worker's `auth_file`),
//! 2. `$REGISTRY_AUTH_FILE` (podman, skopeo, buildah),
//! 3. `$DOCKER_CONFIG/config.json`, else `~/.docker/config.json`,
//! 4. `$XDG_RUNTIME_DIR/containers/auth.json`, then `$XDG_CONFIG_HOME/containers/auth.json`
//!    (`~/.config/containers/auth.json`), as containers-auth.json(5) reads them.
//!
//! `rdctl login` writes the first of 1–3 ([`Keychain::login_file`]), so what one logs in with
//! is what every later command finds first.
//!
//! Within a file, for a host: `credHelpers.<host>` (run `docker-credential-<name> get`), then
//! `auths.<host>` (`auth` = base64 `user:password`, or `identitytoken`), then `credsStore`.
//! Keys written as URLs (`https://host/v1/`, older docker) match their host. Hosts are
//! compared in their canonical spelling ([`validator::RegistryHost`]): `LocalHost:5000`,
//! `localhost:5000` and `localhost.:5000` are one key, `reg.example:443` is `reg.example`, and
//! `https://index.docker.io/v1/`, `index.docker.io` and `docker.io` are all Docker Hub.
//!
//! [`AuthFile`] edits one file: unknown keys are kept, the new file is written to a temporary
//! file with mode 0600, synced and renamed over the old one, so a crash leaves either the old
//! or the new file, never a partial one.

use std::io::{self, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use serde_json::{Map, Value};

use crate::reference::canonical_host;

/// A credential for one registry host.
#[derive(Clone, PartialEq, Eq)]
pub enum Credential {
    /// User name and password (sent as Basic, or to the token endpoint).
    Basic {
        /// User name.
        username: String,
        /// Password.
        password: String,
    },
    /// An OAuth2 refresh token (docker's `identitytoken`), exchanged at the token endpoint.
    IdentityToken {
        /// User name, if recorded.
        username: String,
        /// The refresh token.
        token: String,
    },
}

impl std::fmt::Debug for Credential {
    // Never print secrets, even in debug logs.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credential::Basic { username, .. } => write!(f, "Basic({username}, ***)"),
            Credential::IdentityToken { username, .. } => {
                write!(f, "IdentityToken({username}, ***)")
            }
        }
    }
}

impl Credential {
    /// The user name.
    pub fn username(&self) -> &str {
        match self {
            Credential::Basic { username, .. } | Credential::IdentityToken { username, .. } => {
                username
            }
        }
    }
}

/// A credential file or helper could not be read or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CredentialError {
    /// Reading or writing the file failed.
    #[error("{}: {action}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// What was being done.
        action: &'static str,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// The file is not a JSON object of the expected shape.
    #[error("{}: {reason}", path.display())]
    Format {
        /// The file.
        path: PathBuf,
        /// What is wrong (with line and column for JSON errors, the key path otherwise).
        reason: String,
    },
    /// A kubelet credential provider plugin failed or answered nonsense.
    #[error("credential provider {provider} for {host}: {reason}")]
    Provider {
        /// The provider's name.
        provider: String,
        /// The registry host.
        host: String,
        /// What happened.
        reason: String,
    },
    /// A credential helper failed.
    #[error("credential helper docker-credential-{helper} {action} for {host}: {reason}")]
    Helper {
        /// The helper's name.
        helper: String,
        /// `get`, `store` or `erase`.
        action: &'static str,
        /// The registry host.
        host: String,
        /// What happened.
        reason: String,
    },
}

/// Where a credential came from (for messages: never the secret itself).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// An `auths` entry in this file.
    File(PathBuf),
    /// This credential helper.
    Helper(String),
    /// This kubelet credential provider plugin.
    Provider(String),
    /// Given directly by the caller.
    Explicit,
}

impl std::fmt::Display for Source {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Source::File(p) => write!(f, "{}", p.display()),
            Source::Helper(h) => write!(f, "docker-credential-{h}"),
            Source::Provider(p) => write!(f, "credential provider {p}"),
            Source::Explicit => f.write_str("the command line"),
        }
    }
}

/// The canonical host of an `auths` or `credHelpers` key: `https://host/v1/` and `host/path`
/// both give `host`, spelled as [`validator::RegistryHost`] spells it.
fn key_host(key: &str) -> String {
    let k = key
        .strip_prefix("https://")
        .or_else(|| key.strip_prefix("http://"))
        .unwrap_or(key);
    canonical_host(k.split('/').next().unwrap_or(k))
}

/// The server name a credential helper is asked about for the canonical `host`: Docker Hub as
/// docker itself names it to helpers (`https://index.docker.io/v1/`), every other host as is.
pub(crate) fn helper_server(host: &str) -> &str {
    if host == validator::DOCKER_HUB {
        "https://index.docker.io/v1/"
    } else {
        host
    }
}

/// The entry of `map` for the canonical host `host`: the key spelled exactly so first, then
/// the first key with the same canonical host.
fn entry_for<'a>(map: &'a Map<String, Value>, host: &str) -> Option<(&'a str, &'a Value)> {
    map.get_key_value(host)
        .or_else(|| map.iter().find(|(k, _)| key_host(k) == host))
        .map(|(k, v)| (k.as_str(), v))
}

/// One docker `config.json` / containers `auth.json`, kept as JSON so unknown keys survive.
#[derive(Debug, Clone)]
pub struct AuthFile {
    path: PathBuf,
    doc: Map<String, Value>,
}

impl AuthFile {
    /// Reads `path`; a missing file is an empty one.
    pub fn load(path: &Path) -> Result<AuthFile, CredentialError> {
        let bytes = match std::fs::read(path) {
            Ok(b) => b,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(AuthFile {
                    path: path.to_owned(),
                    doc: Map::new(),
                });
            }
            Err(source) => {
                return Err(CredentialError::Io {
                    path: path.to_owned(),
                    action: "cannot read",
                    source,
                });
            }
        };
        let fmt = |reason: String| CredentialError::Format {
            path: path.to_owned(),
            reason,
        };
        // An empty file (touched, never written) is an empty configuration, as docker treats it.
        if bytes.iter().all(u8::is_ascii_whitespace) {
            return Ok(AuthFile {
                path: path.to_owned(),
                doc: Map::new(),
            });
        }
        let doc: Value = serde_json::from_slice(&bytes).map_err(|e| {
            fmt(format!(
                "not JSON (line {}, column {}): {e}",
                e.line(),
                e.column()
            ))
        })?;
        let Value::Object(doc) = doc else {
            return Err(fmt("not a JSON object".to_owned()));
        };
        for key in ["auths", "credHelpers"] {
            if doc.get(key).is_some_and(|v| !v.is_object()) {
                return Err(fmt(format!("{key} is not an object")));
            }
        }
        if doc.get("credsStore").is_some_and(|v| !v.is_string()) {
            return Err(fmt("credsStore is not a string".to_owned()));
        }
        Ok(AuthFile {
            path: path.to_owned(),
            doc,
        })
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The credential helper for `host` (`credHelpers.<host>`, else `credsStore`).
    pub fn helper(&self, host: &str) -> Option<&str> {
        self.host_helper(&canonical_host(host))
            .or_else(|| self.doc.get("credsStore").and_then(Value::as_str))
            .filter(|s| !s.is_empty())
    }

    /// `credHelpers.<host>` for the canonical `host`, whatever spelling the key has.
    pub(crate) fn host_helper(&self, host: &str) -> Option<&str> {
        self.doc
            .get("credHelpers")
            .and_then(Value::as_object)
            .and_then(|h| entry_for(h, host))
            .and_then(|(_, v)| v.as_str())
    }

    fn auths(&self) -> Option<&Map<String, Value>> {
        self.doc.get("auths").and_then(Value::as_object)
    }

    /// The `auths` entry for `host` (exact key first, then URL-style keys).
    pub fn get(&self, host: &str) -> Result<Option<Credential>, CredentialError> {
        let Some(auths) = self.auths() else {
            return Ok(None);
        };
        let host = canonical_host(host);
        let Some((key, entry)) = entry_for(auths, &host) else {
            return Ok(None);
        };
        let fmt = |reason: String| CredentialError::Format {
            path: self.path.clone(),
            reason: format!("auths.{key}: {reason}"),
        };
        let str_field = |name: &str| entry.get(name).and_then(Value::as_str).unwrap_or("");
        let (mut username, mut password) = (String::new(), String::new());
        let auth = str_field("auth");
        if !auth.is_empty() {
            let raw = B64
                .decode(auth.trim())
                .map_err(|e| fmt(format!("auth is not base64: {e}")))?;
            let s = String::from_utf8(raw).map_err(|_| fmt("auth is not UTF-8".to_owned()))?;
            let (u, p) = s
                .split_once(':')
                .ok_or_else(|| fmt("auth is not base64 of user:password".to_owned()))?;
            (username, password) = (u.to_owned(), p.to_owned());
        } else if !str_field("username").is_empty() {
            (username, password) = (
                str_field("username").to_owned(),
                str_field("password").to_owned(),
            );
        }
        let token = str_field("identitytoken");
        if !token.is_empty() {
            return Ok(Some(Credential::IdentityToken {
                username,
                token: token.to_owned(),
            }));
        }
        if username.is_empty() && password.is_empty() {
            return Ok(None);
        }
        Ok(Some(Credential::Basic { username, password }))
    }

    /// Sets `auths.<host>` to the credential, keeping other keys of the entry and the file.
    pub fn set(&mut self, host: &str, cred: &Credential) {
        let auths = self
            .doc
            .entry("auths")
            .or_insert_with(|| Value::Object(Map::new()));
        if !auths.is_object() {
            *auths = Value::Object(Map::new());
        }
        let Value::Object(auths) = auths else {
            unreachable!("made an object above")
        };
        // An entry for the same registry under another spelling (`https://index.docker.io/v1/`
        // as docker writes it) is updated rather than joined by a second one.
        let host = canonical_host(host);
        let key = entry_for(auths, &host).map_or(host, |(k, _)| k.to_owned());
        let entry = auths
            .entry(key)
            .or_insert_with(|| Value::Object(Map::new()));
        if !entry.is_object() {
            *entry = Value::Object(Map::new());
        }
        let Value::Object(entry) = entry else {
            unreachable!("made an object above")
        };
        for k in ["username", "password", "identitytoken", "auth"] {
            entry.remove(k);
        }
        match cred {
            Credential::Basic { username, password } => {
                entry.insert(
                    "auth".into(),
                    Value::String(B64.encode(format!("{username}:{password}"))),
                );
            }
            Credential::IdentityToken { username, token } => {
                entry.insert(
                    "auth".into(),
                    Value::String(B64.encode(format!("{username}:"))),
                );
                entry.insert("identitytoken".into(), Value::String(token.clone()));
            }
        }
    }

    /// Removes every `auths` entry for `host` (also URL-style keys); true if one was there.
    pub fn remove(&mut self, host: &str) -> bool {
        let Some(Value::Object(auths)) = self.doc.get_mut("auths") else {
            return false;
        };
        let before = auths.len();
        let host = canonical_host(host);
        auths.retain(|k, _| key_host(k) != host);
        before != auths.len()
    }

    /// Writes the file atomically with mode 0600 (its directory is created with 0700).
    pub fn save(&self) -> Result<(), CredentialError> {
        let io_err = |action, source| CredentialError::Io {
            path: self.path.clone(),
            action,
            source,
        };
        let dir = match self.path.parent() {
            Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
            _ => PathBuf::from("."),
        };
        if !dir.exists() {
            let mut b = std::fs::DirBuilder::new();
            b.recursive(true);
            #[cfg(unix)]
            std::os::unix::fs::DirBuilderExt::mode(&mut b, 0o700);
            b.create(&dir)
                .map_err(|e| io_err("cannot create the directory", e))?;
        }
        let mut bytes = serde_json::to_vec_pretty(&self.doc).expect("a JSON map serializes");
        bytes.push(b'\n');
        let mut tmp = tempfile::Builder::new()
            .prefix(".rdctl-auth-")
            .permissions(private_mode())
            .tempfile_in(&dir)
            .map_err(|e| io_err("cannot create a temporary file beside", e))?;
        tmp.write_all(&bytes)
            .and_then(|()| tmp.as_file().sync_all())
            .map_err(|e| io_err("cannot write", e))?;
        tmp.persist(&self.path)
            .map_err(|e| io_err("cannot replace", e.error))?;
        // The rename is durable only once the directory is synced.
        if let Ok(d) = std::fs::File::open(&dir) {
            let _ = d.sync_all();
        }
        Ok(())
    }
}

fn private_mode() -> std::fs::Permissions {
    #[cfg(unix)]
    {
        std::os::unix::fs::PermissionsExt::from_mode(0o600)
    }
    #[cfg(not(unix))]
    {
        std::fs::metadata(".").expect("cwd").permissions()
    }
}

/// Runs `docker-credential-<helper> <action>` with `input` on stdin; returns stdout.
fn run_helper(
    helper: &str,
    action: &'static str,
    host: &str,
    input: &[u8],
) -> Result<Result<Vec<u8>, String>, CredentialError> {
    let err = |reason: String| CredentialError::Helper {
        helper: helper.to_owned(),
        action,
        host: host.to_owned(),
        reason,
    };
    let mut child = Command::new(format!("docker-credential-{helper}"))
        .arg(action)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| err(format!("cannot run it: {e}")))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(input)
            .map_err(|e| err(format!("cannot write its input: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| err(format!("cannot wait for it: {e}")))?;
    if out.status.success() {
        Ok(Ok(out.stdout))
    } else {
        let msg = String::from_utf8_lossy(if out.stdout.is_empty() {
            &out.stderr
        } else {
            &out.stdout
        })
        .trim()
        .chars()
        .take(300)
        .collect();
        Ok(Err(msg))
    }
}

/// Asks a credential helper for `host`'s credential (`None` when it has none).
pub fn helper_get(helper: &str, host: &str) -> Result<Option<Credential>, CredentialError> {
    let out = match run_helper(helper, "get", host, host.as_bytes())? {
        Ok(out) => out,
        // The helper protocol's "not found" answer.
        Err(msg) if msg.contains("credentials not found") => return Ok(None),
        Err(msg) => {
            return Err(CredentialError::Helper {
                helper: helper.to_owned(),
                action: "get",
                host: host.to_owned(),
                reason: format!("failed: {msg}"),
            });
        }
    };
    #[derive(serde::Deserialize)]
    struct Answer {
        #[serde(rename = "Username", default)]
        username: String,
        #[serde(rename = "Secret", default)]
        secret: String,
    }
    let a: Answer = serde_json::from_slice(&out).map_err(|e| CredentialError::Helper {
        helper: helper.to_owned(),
        action: "get",
        host: host.to_owned(),
        reason: format!("answer is not the helper JSON: {e}"),
    })?;
    if a.secret.is_empty() {
        return Ok(None);
    }
    // Docker's convention: the user name `<token>` marks an identity token.
    Ok(Some(if a.username == "<token>" {
        Credential::IdentityToken {
            username: String::new(),
            token: a.secret,
        }
    } else {
        Credential::Basic {
            username: a.username,
            password: a.secret,
        }
    }))
}

/// Stores a credential with a helper.
pub fn helper_store(helper: &str, host: &str, cred: &Credential) -> Result<(), CredentialError> {
    let (user, secret) = match cred {
        Credential::Basic { username, password } => (username.as_str(), password.as_str()),
        Credential::IdentityToken { token, .. } => ("<token>", token.as_str()),
    };
    let input = serde_json::json!({"ServerURL": host, "Username": user, "Secret": secret});
    match run_helper(helper, "store", host, input.to_string().as_bytes())? {
        Ok(_) => Ok(()),
        Err(msg) => Err(CredentialError::Helper {
            helper: helper.to_owned(),
            action: "store",
            host: host.to_owned(),
            reason: format!("failed: {msg}"),
        }),
    }
}

/// Erases a helper's credential for `host`; a helper that has none is fine.
pub fn helper_erase(helper: &str, host: &str) -> Result<(), CredentialError> {
    match run_helper(helper, "erase", host, host.as_bytes())? {
        Ok(_) => Ok(()),
        Err(msg) if msg.contains("credentials not found") => Ok(()),
        Err(msg) => Err(CredentialError::Helper {
            helper: helper.to_owned(),
            action: "erase",
            host: host.to_owned(),
            reason: format!("failed: {msg}"),
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::keychain::{Env, Keychain};

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let p = dir.join(name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(&p, text).unwrap();
        p
    }

    /// Every spelling of a registry finds the entry written under any other spelling, and
    /// login/logout edit that one entry instead of adding a second.
    #[test]
    fn every_spelling_of_a_host_finds_its_entry() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "config.json",
            &format!(
                r#"{{"auths": {{
                    "https://index.docker.io/v1/": {{"auth": "{}"}},
                    "LocalHost:5000": {{"auth": "{}"}},
                    "reg.example:443": {{"auth": "{}"}},
                    "[0:0:0:0:0:0:0:1]:5000": {{"auth": "{}"}}
                }}}}"#,
                B64.encode("hub:pw"),
                B64.encode("local:pw"),
                B64.encode("reg:pw"),
                B64.encode("six:pw"),
            ),
        );
        let f = AuthFile::load(&p).unwrap();
        for (host, user) in [
            ("docker.io", "hub"),
            ("index.docker.io", "hub"),
            ("registry-1.docker.io", "hub"),
            ("Docker.IO:443", "hub"),
            ("localhost:5000", "local"),
            ("LOCALHOST:5000", "local"),
            ("localhost.:05000", "local"),
            ("reg.example", "reg"),
            ("REG.example.", "reg"),
            ("reg.example:80", "reg"),
            ("[::1]:5000", "six"),
        ] {
            let c = f.get(host).unwrap().unwrap_or_else(|| panic!("{host}"));
            assert_eq!(c.username(), user, "{host}");
            let k = Keychain::from_env(Some(&p), &Env::default());
            assert_eq!(k.get(host).unwrap().unwrap().0.username(), user, "{host}");
        }
        // Other ports and hosts are other registries.
        for host in [
            "localhost:5001",
            "reg.example:8443",
            "docker.io:5000",
            "[::2]:5000",
        ] {
            assert!(f.get(host).unwrap().is_none(), "{host}");
        }
        let mut f = f;
        f.set(
            "INDEX.docker.io",
            &Credential::Basic {
                username: "hub2".into(),
                password: "x".into(),
            },
        );
        assert_eq!(f.get("docker.io").unwrap().unwrap().username(), "hub2");
        assert_eq!(f.auths().unwrap().len(), 4, "updated, not added");
        assert!(f.remove("localhost:5000"));
        assert!(f.get("LOCALHOST:5000").unwrap().is_none());
        assert_eq!(helper_server("docker.io"), "https://index.docker.io/v1/");
    }

    #[test]
    fn reads_auth_identitytoken_and_url_keys() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "config.json",
            &format!(
                r#"{{"auths": {{
                    "reg.example:5000": {{"auth": "{}"}},
                    "https://old.example/v1/": {{"auth": "{}"}},
                    "tok.example": {{"auth": "{}", "identitytoken": "refresh-1"}},
                    "empty.example": {{}}
                }}, "psFormat": "table"}}"#,
                B64.encode("alice:s3:cret"),
                B64.encode("bob:pw"),
                B64.encode("carol:"),
            ),
        );
        let f = AuthFile::load(&p).unwrap();
        assert_eq!(
            f.get("reg.example:5000").unwrap(),
            Some(Credential::Basic {
                username: "alice".into(),
                password: "s3:cret".into()
            })
        );
        assert_eq!(f.get("old.example").unwrap().unwrap().username(), "bob");
        assert_eq!(
            f.get("tok.example").unwrap(),
            Some(Credential::IdentityToken {
                username: "carol".into(),
                token: "refresh-1".into()
            })
        );
        assert_eq!(f.get("empty.example").unwrap(), None);
        assert_eq!(f.get("other.example").unwrap(), None);
    }

    #[test]
    fn bad_files_name_the_file_and_the_key() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "a.json",
            "{\"auths\": {\n  \"h\": {\"auth\": \"%%\"}}}",
        );
        let e = AuthFile::load(&p)
            .unwrap()
            .get("h")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("a.json") && e.contains("auths.h") && e.contains("base64"),
            "{e}"
        );
        let p = write(d.path(), "b.json", "{\"auths\": [}");
        let e = AuthFile::load(&p).unwrap_err().to_string();
        assert!(e.contains("b.json") && e.contains("line 1"), "{e}");
        let p = write(d.path(), "c.json", "{\"auths\": []}");
        let e = AuthFile::load(&p).unwrap_err().to_string();
        assert!(e.contains("auths is not an object"), "{e}");
        let p = write(d.path(), "d.json", "");
        assert!(AuthFile::load(&p).unwrap().get("h").unwrap().is_none());
    }

    #[test]
    fn set_remove_save_keep_unknown_keys_and_mode() {
        let d = tempfile::tempdir().unwrap();
        let p = write(
            d.path(),
            "cfg/config.json",
            r#"{"auths": {"keep.example": {"auth": "eDp5", "email": "x@y"}}, "credHelpers": {}, "detachKeys": "ctrl-e"}"#,
        );
        let mut f = AuthFile::load(&p).unwrap();
        let cred = Credential::Basic {
            username: "u".into(),
            password: "p".into(),
        };
        f.set("new.example", &cred);
        f.set("keep.example", &cred);
        f.save().unwrap();
        let v: Value = serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap();
        assert_eq!(v["detachKeys"], "ctrl-e");
        assert_eq!(v["auths"]["keep.example"]["email"], "x@y");
        assert_eq!(v["auths"]["new.example"]["auth"], B64.encode("u:p"));
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let mut f = AuthFile::load(&p).unwrap();
        assert!(f.remove("new.example"));
        assert!(!f.remove("new.example"));
        f.save().unwrap();
        let f = AuthFile::load(&p).unwrap();
        assert!(f.get("new.example").unwrap().is_none());
        assert_eq!(f.get("keep.example").unwrap(), Some(cred));
        // No temporary file is left beside it.
        let names: Vec<_> = std::fs::read_dir(p.parent().unwrap())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["config.json"]);
    }

    #[test]
    fn precedence_of_files() {
        let d = tempfile::tempdir().unwrap();
        let env = Env {
            home: Some(d.path().join("home")),
            docker_config: None,
            registry_auth_file: Some(d.path().join("raf.json")),
            xdg_runtime_dir: Some(d.path().join("run")),
            xdg_config_home: None,
        };
        let k = Keychain::from_env(Some(&d.path().join("explicit.json")), &env);
        let rel: Vec<_> = k
            .files()
            .iter()
            .map(|p| {
                p.strip_prefix(d.path())
                    .unwrap()
                    .to_str()
                    .unwrap()
                    .to_owned()
            })
            .collect();
        assert_eq!(
            rel,
            [
                "explicit.json",
                "raf.json",
                "home/.docker/config.json",
                "run/containers/auth.json",
                "home/.config/containers/auth.json"
            ]
        );
        let entry = |u: &str| {
            format!(
                r#"{{"auths":{{"h":{{"auth":"{}"}}}}}}"#,
                B64.encode(format!("{u}:p"))
            )
        };
        write(d.path(), "run/containers/auth.json", &entry("podman"));
        assert_eq!(k.get("h").unwrap().unwrap().0.username(), "podman");
        write(d.path(), "home/.docker/config.json", &entry("docker"));
        let k = k.clone(); // a fresh cache
        let (c, src) = k.get("h").unwrap().unwrap();
        assert_eq!(c.username(), "docker");
        assert_eq!(src, Source::File(d.path().join("home/.docker/config.json")));
        let env2 = Env {
            docker_config: Some(d.path().join("dc")),
            ..env.clone()
        };
        assert_eq!(
            Keychain::login_file(
                None,
                &Env {
                    registry_auth_file: None,
                    ..env2.clone()
                }
            ),
            Some(d.path().join("dc/config.json"))
        );
        assert_eq!(
            Keychain::login_file(None, &env2),
            Some(d.path().join("raf.json"))
        );
    }
}
