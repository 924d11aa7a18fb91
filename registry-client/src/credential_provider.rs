//! kubelet's exec credential provider plugins (`credentialprovider.kubelet.k8s.io/v1`): for a
//! registry host that matches one of a provider's `match_images` patterns, the plugin is run
//! with a `CredentialProviderRequest` on stdin and answers a `CredentialProviderResponse` on
//! stdout (`auth` by pattern, `cacheKeyType`, `cacheDuration`). Answers are cached for
//! `cacheDuration` (else the provider's default; `0` means not cached) under the registry
//! (`Registry`, and `Image` here, where the request names the registry host) or for every
//! host (`Global`).
//!
//! Patterns are kubelet's `matchImages`: a host with an optional port and path; `*` globs
//! within one domain segment (`*.registry.io` matches `a.registry.io`, not `registry.io` or
//! `a.b.registry.io`); a port in the pattern must equal the host's, and a pattern without one
//! matches only hosts without one.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use serde_json::Value;
use validator::{DoubleStar, Glob, GlobSyntax};

use crate::credentials::{Credential, CredentialError};
use crate::reference::canonical_host;

/// The API version of the protocol.
pub const API_VERSION: &str = "credentialprovider.kubelet.k8s.io/v1";

/// One configured plugin (kubelet's `CredentialProviderConfig.providers[]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialProvider {
    /// Its name (the executable's name in the plugin directory).
    pub name: String,
    /// The executable.
    pub command: PathBuf,
    /// Arguments.
    pub args: Vec<String>,
    /// Environment variables added for the plugin.
    pub env: Vec<(String, String)>,
    /// Host patterns it answers for.
    pub match_images: Vec<String>,
    /// How long answers are kept when the response names no `cacheDuration`.
    pub default_cache_duration: Duration,
}

/// Whether `host` (`name[:port]`) matches a `matchImages` pattern. Both are compared in the
/// canonical spelling of hosts ([`validator::RegistryHost`]): lower case, no trailing `.`,
/// no default port (`:443`, `:80`), Docker Hub as `docker.io`; so `REG.example:443` matches
/// the pattern `reg.example`, and `*.Example.com:443` matches `a.example.com`.
pub fn matches(pattern: &str, host: &str) -> bool {
    let pattern = pattern
        .strip_prefix("https://")
        .or_else(|| pattern.strip_prefix("http://"))
        .unwrap_or(pattern);
    let p_host = pattern.split('/').next().unwrap_or(pattern);
    let p_host = if p_host.contains('*') {
        p_host.to_ascii_lowercase()
    } else {
        canonical_host(p_host)
    };
    let split = |h: &str| -> (String, Option<String>) {
        let (n, port) = match h.rsplit_once(':') {
            Some((n, port)) => (n, Some(port.trim_start_matches('0').to_owned())),
            None => (h, None),
        };
        let port = port.filter(|p| p != "443" && p != "80");
        (n.strip_suffix('.').unwrap_or(n).to_owned(), port)
    };
    let ((pn, pp), (hn, hp)) = (split(&p_host), split(&canonical_host(host)));
    if pp != hp {
        return false;
    }
    // `*` within one dot-separated label, so the pattern and the host have as many labels.
    let labels = GlobSyntax {
        separator: Some(b'.'),
        question: false,
        double_star: DoubleStar::Plain,
    };
    Glob::new(&pn, labels).matches(&hn)
}

/// A Go duration (`1h30m`, `10s`, `500ms`, `0`).
pub fn parse_duration(s: &str) -> Option<Duration> {
    if s == "0" {
        return Some(Duration::ZERO);
    }
    let mut total = 0f64;
    let mut rest = s;
    if rest.is_empty() {
        return None;
    }
    while !rest.is_empty() {
        let n = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .unwrap_or(rest.len());
        let value: f64 = rest[..n].parse().ok()?;
        rest = &rest[n..];
        let u = rest
            .find(|c: char| c.is_ascii_digit())
            .unwrap_or(rest.len());
        let unit = match &rest[..u] {
            "h" => 3600.0,
            "m" => 60.0,
            "s" => 1.0,
            "ms" => 1e-3,
            "us" | "µs" => 1e-6,
            "ns" => 1e-9,
            _ => return None,
        };
        rest = &rest[u..];
        total += value * unit;
    }
    Some(Duration::from_secs_f64(total))
}

struct Cached {
    auth: Vec<(String, Credential)>,
    until: Instant,
}

/// The configured plugins and their cached answers (shared by clones of a keychain).
#[derive(Default)]
pub struct Providers {
    list: Vec<CredentialProvider>,
    /// (provider index, cache key: the host, or "" for Global) → answer.
    cache: Mutex<HashMap<(usize, String), Cached>>,
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers")
            .field("list", &self.list)
            .finish_non_exhaustive()
    }
}

impl Providers {
    /// Plugins consulted in order.
    pub fn new(list: Vec<CredentialProvider>) -> Providers {
        Providers {
            list,
            cache: Mutex::default(),
        }
    }

    /// The credential for `host` from the first matching plugin that has one, and the
    /// plugin's name; `None` when no plugin matches or none answers for the host.
    pub fn get(&self, host: &str) -> Result<Option<(Credential, String)>, CredentialError> {
        for (i, p) in self.list.iter().enumerate() {
            if !p.match_images.iter().any(|m| matches(m, host)) {
                continue;
            }
            let now = Instant::now();
            {
                let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                for key in [host, ""] {
                    if let Some(c) = cache.get(&(i, key.to_owned()))
                        && c.until > now
                    {
                        return Ok(pick(&c.auth, host).map(|c| (c, p.name.clone())));
                    }
                }
            }
            let (auth, key, ttl) = run(p, host)?;
            let found = pick(&auth, host);
            let ttl = ttl.unwrap_or(p.default_cache_duration);
            if !ttl.is_zero() {
                let key = match key.as_str() {
                    "Global" => String::new(),
                    _ => host.to_owned(),
                };
                self.cache.lock().unwrap_or_else(|e| e.into_inner()).insert(
                    (i, key),
                    Cached {
                        auth,
                        until: now + ttl,
                    },
                );
            }
            if let Some(c) = found {
                return Ok(Some((c, p.name.clone())));
            }
        }
        Ok(None)
    }
}

fn pick(auth: &[(String, Credential)], host: &str) -> Option<Credential> {
    auth.iter()
        .find(|(pattern, _)| matches(pattern, host))
        .map(|(_, c)| c.clone())
}

/// A plugin's answer: `auth` entries by pattern, `cacheKeyType`, `cacheDuration`.
type Answer = (Vec<(String, Credential)>, String, Option<Duration>);

/// Runs the plugin for `host`.
fn run(p: &CredentialProvider, host: &str) -> Result<Answer, CredentialError> {
    let fail = |reason: String| CredentialError::Provider {
        provider: p.name.clone(),
        host: host.to_owned(),
        reason,
    };
    let request = serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": "CredentialProviderRequest",
        "image": host,
    });
    let mut child = Command::new(&p.command)
        .args(&p.args)
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| fail(format!("cannot run {}: {e}", p.command.display())))?;
    if let Some(mut stdin) = child.stdin.take() {
        stdin
            .write_all(request.to_string().as_bytes())
            .map_err(|e| fail(format!("writing the request: {e}")))?;
    }
    let out = child
        .wait_with_output()
        .map_err(|e| fail(format!("waiting for it: {e}")))?;
    if !out.status.success() {
        let err = String::from_utf8_lossy(&out.stderr);
        return Err(fail(format!("exited with {}: {}", out.status, err.trim())));
    }
    let v: Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| fail(format!("the response is not JSON: {e}")))?;
    if v["apiVersion"] != API_VERSION || v["kind"] != "CredentialProviderResponse" {
        return Err(fail(format!(
            "the response is {} {}, not {API_VERSION} CredentialProviderResponse",
            v["apiVersion"], v["kind"]
        )));
    }
    let key = v["cacheKeyType"].as_str().unwrap_or("Registry").to_owned();
    if !matches!(key.as_str(), "Image" | "Registry" | "Global") {
        return Err(fail(format!(
            "cacheKeyType {key:?} is not Image, Registry or Global"
        )));
    }
    let ttl = match v.get("cacheDuration").and_then(Value::as_str) {
        Some(d) => Some(
            parse_duration(d)
                .ok_or_else(|| fail(format!("cacheDuration {d:?} is not a duration")))?,
        ),
        None => None,
    };
    let mut auth = Vec::new();
    if let Some(map) = v["auth"].as_object() {
        for (pattern, a) in map {
            let field = |k: &str| a[k].as_str().unwrap_or_default().to_owned();
            auth.push((
                pattern.clone(),
                Credential::Basic {
                    username: field("username"),
                    password: field("password"),
                },
            ));
        }
    }
    Ok((auth, key, ttl))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_glob_within_segments_and_match_ports() {
        for (p, h, want) in [
            ("*.registry.io", "a.registry.io", true),
            ("*.registry.io", "registry.io", false),
            ("*.registry.io", "a.b.registry.io", false),
            ("registry.io:8080", "registry.io:8080", true),
            ("registry.io:8080", "registry.io", false),
            ("registry.io", "registry.io:8080", false),
            (
                "*.dkr.ecr.*.amazonaws.com",
                "123.dkr.ecr.eu-west-1.amazonaws.com",
                true,
            ),
            ("reg*.example", "registry.example", true),
            ("https://registry.io/path", "registry.io", true),
            // Spellings of one host: case, trailing dot, default and padded ports.
            ("registry.io", "REGISTRY.io", true),
            ("Registry.IO", "registry.io:443", true),
            ("registry.io:443", "registry.io", true),
            ("registry.io.", "registry.io:80", true),
            ("registry.io:8080", "Registry.io.:08080", true),
            ("*.Registry.io:443", "A.registry.io", true),
            ("LOCALHOST:5000", "localhost:5000", true),
            ("index.docker.io", "docker.io", true),
            ("docker.io", "registry-1.docker.io", true),
            ("[0:0::1]:5000", "[::1]:5000", true),
            ("registry.io:8080", "registry.io:443", false),
            ("docker.io", "docker.io:5000", false),
        ] {
            assert_eq!(matches(p, h), want, "{p} vs {h}");
        }
    }

    #[test]
    fn durations_are_go_durations() {
        assert_eq!(parse_duration("0"), Some(Duration::ZERO));
        assert_eq!(parse_duration("10s"), Some(Duration::from_secs(10)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        assert_eq!(parse_duration("500ms"), Some(Duration::from_millis(500)));
        assert_eq!(parse_duration("ten"), None);
        assert_eq!(parse_duration(""), None);
    }
}
