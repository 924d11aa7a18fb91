//! kubelet's exec credential provider plugins (`credentialprovider.kubelet.k8s.io/v1`): for a
//! registry host that matches one of a provider's `match_images` patterns, the plugin is run
//! with a `CredentialProviderRequest` naming the image (the full reference,
//! `host/repository:tag` or `host/repository@digest`, for a request about a manifest, as
//! kubelet sends it; `host/repository` for others in a repository; the host alone outside
//! one) on stdin and answers a `CredentialProviderResponse` on
//! stdout (`auth` by pattern, `cacheKeyType`, `cacheDuration`). Answers are cached for
//! `cacheDuration` (else the provider's default; `0` means not cached) under the image
//! (`Image`), the registry (`Registry`) or for every host (`Global`).
//!
//! As kubelet does, a plugin gets one minute ([`PLUGIN_TIMEOUT`]) and is killed after it;
//! callers that ask for the same image while a plugin runs for it wait for that run and share
//! its answer (one run per image for concurrent pulls, cached or not). [`Providers::get`]
//! blocks while a plugin runs: the client calls it on a blocking thread, never on the async
//! workers.
//!
//! Patterns are kubelet's `matchImages` (and the keys of a response's `auth`): a host with an
//! optional port and path; `*` globs within one domain segment (`*.registry.io` matches
//! `a.registry.io`, not `registry.io` or `a.b.registry.io`); a port in the pattern must equal
//! the host's, and a pattern without one matches only hosts without one. A path in the
//! pattern must be a prefix of the image's repository, whole segment by segment
//! (`reg.example/team-a` matches `reg.example/team-a/web`, not `reg.example/team-b` nor
//! `reg.example/team-ab`: kubelet compares the path as a plain string prefix). Of the `auth`
//! entries that match, the most specific serves (the longest path, then a host without `*`),
//! as kubelet's keyring tries the most specific first.
//!
//! Answers are cached entry by entry under their key: a later answer for the same key adds
//! its entries (replacing those of the same pattern), so answers a plugin gave for two paths
//! of one registry both stay. A cached answer serves an image only when one of its entries
//! matches it; otherwise the plugin is asked for that image.

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

/// Whether `host` (`name[:port]`) matches a `matchImages` pattern's host (its path is not
/// looked at: [`matches_image`] compares that). Both are compared in the
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

/// How specifically `pattern` matches `image` (`host[/repository[:tag|@digest]]`): the number
/// of path segments the pattern names, then whether its host has no `*`; `None` when it does
/// not match (the host as [`matches`], the pattern's path a segment-wise prefix of the
/// image's repository).
fn specificity(pattern: &str, image: &str) -> Option<(usize, bool)> {
    let pattern = pattern
        .strip_prefix("https://")
        .or_else(|| pattern.strip_prefix("http://"))
        .unwrap_or(pattern);
    let (p_host, p_path) = pattern.split_once('/').unwrap_or((pattern, ""));
    let (i_host, i_path) = image.split_once('/').unwrap_or((image, ""));
    // The repository alone: no digest, no tag (a `:` after the last `/`).
    let i_path = i_path.split_once('@').map_or(i_path, |(r, _)| r);
    let i_path = match i_path.rsplit_once(':') {
        Some((r, tag)) if !tag.contains('/') => r,
        _ => i_path,
    };
    if !matches(p_host, i_host) {
        return None;
    }
    let p_path = p_path.trim_end_matches('/');
    if p_path.is_empty() {
        return Some((0, !p_host.contains('*')));
    }
    let under = i_path
        .strip_prefix(p_path)
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'));
    under.then(|| (p_path.split('/').count(), !p_host.contains('*')))
}

/// Whether `image` (`host[/repository[:tag|@digest]]`) matches a `matchImages` pattern or an
/// `auth` key: the host as [`matches`], and the pattern's path (if any) a prefix of the
/// repository, whole segments.
pub fn matches_image(pattern: &str, image: &str) -> bool {
    specificity(pattern, image).is_some()
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

/// One cached `auth` entry: its pattern, credential, and when it expires.
struct Cached {
    pattern: String,
    credential: Credential,
    until: Instant,
}

/// The longest a plugin may run (kubelet's limit on one exec plugin call).
pub const PLUGIN_TIMEOUT: Duration = Duration::from_secs(60);

/// One plugin call that others for the same image wait on: its answer, with when it came,
/// so a caller that arrived while it ran takes it instead of running the plugin again.
type Flight = std::sync::Arc<Mutex<Option<(Instant, Result<Answer, String>)>>>;

/// The configured plugins and their cached answers (shared by clones of a keychain).
pub struct Providers {
    list: Vec<CredentialProvider>,
    /// (provider index, cache key: the image, the host, or "" for Global) → the entries of
    /// the answers cached under it.
    cache: Mutex<HashMap<(usize, String), Vec<Cached>>>,
    /// (provider index, image) → the call in flight or just made: concurrent pulls of one
    /// image run the plugin once.
    flights: Mutex<HashMap<(usize, String), Flight>>,
    /// How long a plugin may run before it is killed.
    timeout: Duration,
}

impl Default for Providers {
    fn default() -> Self {
        Providers::new(Vec::new())
    }
}

impl std::fmt::Debug for Providers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Providers")
            .field("list", &self.list)
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl Providers {
    /// Plugins consulted in order, each killed after [`PLUGIN_TIMEOUT`].
    pub fn new(list: Vec<CredentialProvider>) -> Providers {
        Providers {
            list,
            cache: Mutex::default(),
            flights: Mutex::default(),
            timeout: PLUGIN_TIMEOUT,
        }
    }

    /// Another limit on a plugin's run than kubelet's minute (tests).
    pub fn with_timeout(mut self, timeout: Duration) -> Providers {
        self.timeout = timeout;
        self
    }

    /// A cached credential for `image`: the most specific unexpired entry that matches it,
    /// under the first key that has one.
    fn cached(&self, i: usize, keys: [&str; 3], image: &str) -> Option<Credential> {
        let now = Instant::now();
        let cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
        keys.iter().find_map(|key| {
            let entries = cache.get(&(i, (*key).to_owned()))?;
            pick(
                entries
                    .iter()
                    .filter(|c| c.until > now)
                    .map(|c| (c.pattern.as_str(), &c.credential)),
                image,
            )
        })
    }

    /// The credential for `image` on `host` from the first matching plugin that has one, and
    /// the plugin's name; `None` when no plugin matches or none answers for the image.
    /// `image` (`host/repository`, with a tag or digest where the caller knows one; the host
    /// alone outside a repository) is what the plugin is told and what its `matchImages`
    /// and `auth` keys are matched against, path included; callers asking for one image at the
    /// same time share one run of the plugin. Blocks while a plugin runs (at most the
    /// timeout): async callers call it on a blocking thread.
    pub fn get(
        &self,
        host: &str,
        image: &str,
    ) -> Result<Option<(Credential, String)>, CredentialError> {
        for (i, p) in self.list.iter().enumerate() {
            if !p.match_images.iter().any(|m| matches_image(m, image)) {
                continue;
            }
            let keys = [image, host, ""];
            if let Some(hit) = self.cached(i, keys, image) {
                return Ok(Some((hit, p.name.clone())));
            }
            let arrived = Instant::now();
            let flight = self
                .flights
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry((i, image.to_owned()))
                .or_default()
                .clone();
            let mut slot = flight.lock().unwrap_or_else(|e| e.into_inner());
            let answer = match &*slot {
                // Another caller ran the plugin while this one waited: its answer serves.
                Some((at, answer)) if *at >= arrived => answer.clone(),
                _ => {
                    // The cache may have been filled while this caller waited for the slot.
                    if let Some(hit) = self.cached(i, keys, image) {
                        return Ok(Some((hit, p.name.clone())));
                    }
                    let answer = run(p, host, image, self.timeout).map_err(|e| match e {
                        CredentialError::Provider { reason, .. } => reason,
                        other => other.to_string(),
                    });
                    *slot = Some((Instant::now(), answer.clone()));
                    answer
                }
            };
            drop(slot);
            let (auth, key, ttl) = answer.map_err(|reason| CredentialError::Provider {
                provider: p.name.clone(),
                host: host.to_owned(),
                reason,
            })?;
            let found = pick(auth.iter().map(|(k, c)| (k.as_str(), c)), image);
            let ttl = ttl.unwrap_or(p.default_cache_duration);
            if !ttl.is_zero() {
                let key = match key.as_str() {
                    "Global" => String::new(),
                    "Image" => image.to_owned(),
                    _ => host.to_owned(),
                };
                let mut cache = self.cache.lock().unwrap_or_else(|e| e.into_inner());
                let entries = cache.entry((i, key)).or_default();
                let now = Instant::now();
                entries.retain(|c| c.until > now && !auth.iter().any(|(k, _)| *k == c.pattern));
                entries.extend(auth.into_iter().map(|(pattern, credential)| Cached {
                    pattern,
                    credential,
                    until: arrived + ttl,
                }));
            }
            if let Some(c) = found {
                return Ok(Some((c, p.name.clone())));
            }
        }
        Ok(None)
    }
}

/// The credential of the most specific `auth` entry matching `image` (the first of equals).
fn pick<'a>(
    auth: impl Iterator<Item = (&'a str, &'a Credential)>,
    image: &str,
) -> Option<Credential> {
    let mut best: Option<((usize, bool), &Credential)> = None;
    for (pattern, c) in auth {
        if let Some(s) = specificity(pattern, image)
            && best.is_none_or(|(b, _)| s > b)
        {
            best = Some((s, c));
        }
    }
    best.map(|(_, c)| c.clone())
}

/// A plugin's answer: `auth` entries by pattern, `cacheKeyType`, `cacheDuration`.
type Answer = (Vec<(String, Credential)>, String, Option<Duration>);

/// Reads a child's pipe on its own thread (so neither pipe can fill and stall the plugin),
/// keeping at most 1 MiB.
fn drain(pipe: Option<impl std::io::Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(mut p) = pipe {
            let _ = std::io::Read::read_to_end(&mut std::io::Read::take(&mut p, 1 << 20), &mut out);
            let _ = std::io::copy(&mut p, &mut std::io::sink());
        }
        out
    })
}

/// Starts `command`, trying again for a moment while its file is busy.
///
/// Linux refuses to exec a file that some process holds open for writing (ETXTBSY). A plugin
/// just installed or rewritten is held so briefly, and so is any file written by a process
/// that forks elsewhere at that moment: the child inherits the writer's descriptor until it
/// execs. Both pass within milliseconds, so the spawn is tried again for about 300 ms.
fn spawn(command: &mut Command) -> std::io::Result<std::process::Child> {
    let mut waits = [5u64, 10, 20, 40, 75, 150].into_iter();
    loop {
        match command.spawn() {
            Err(e) if e.kind() == std::io::ErrorKind::ExecutableFileBusy => match waits.next() {
                Some(ms) => std::thread::sleep(Duration::from_millis(ms)),
                None => return Err(e),
            },
            other => return other,
        }
    }
}

/// Runs the plugin for `image` on `host`, killing it after `timeout`.
fn run(
    p: &CredentialProvider,
    host: &str,
    image: &str,
    timeout: Duration,
) -> Result<Answer, CredentialError> {
    let fail = |reason: String| CredentialError::Provider {
        provider: p.name.clone(),
        host: host.to_owned(),
        reason,
    };
    let request = serde_json::json!({
        "apiVersion": API_VERSION,
        "kind": "CredentialProviderRequest",
        "image": image,
    });
    let mut command = Command::new(&p.command);
    command
        .args(&p.args)
        .envs(p.env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = spawn(&mut command)
        .map_err(|e| fail(format!("cannot run {}: {e}", p.command.display())))?;
    let stdout = drain(child.stdout.take());
    let stderr = drain(child.stderr.take());
    if let Some(mut stdin) = child.stdin.take() {
        // A plugin that exits without reading its request is judged by its exit status.
        let _ = stdin.write_all(request.to_string().as_bytes());
    }
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() >= timeout => {
                let _ = child.kill();
                let _ = child.wait();
                return Err(fail(format!(
                    "did not answer within {} s; killed",
                    timeout.as_secs_f64()
                )));
            }
            Ok(None) => std::thread::sleep(Duration::from_millis(10)),
            Err(e) => return Err(fail(format!("waiting for it: {e}"))),
        }
    };
    let out = std::process::Output {
        status,
        stdout: stdout.join().unwrap_or_default(),
        stderr: stderr.join().unwrap_or_default(),
    };
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
pub(crate) mod tests {
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

    /// A fresh directory for one test's plugin and what it records.
    pub(crate) fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!("rdctl-cp-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    /// A plugin that records each request, sleeps `secs`, then answers `user` for every host
    /// with `cacheDuration` `ttl`.
    pub(crate) fn plugin(dir: &std::path::Path, secs: &str, ttl: &str) -> CredentialProvider {
        let script = dir.join("plugin");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nn=$$\ncat > \"{d}/request.$n\"\nsleep {secs}\n\
                 printf '{{\"apiVersion\":\"{API_VERSION}\",\"kind\":\"CredentialProviderResponse\",\
                 \"cacheKeyType\":\"Image\",\"cacheDuration\":\"{ttl}\",\
                 \"auth\":{{\"*.example\":{{\"username\":\"user\",\"password\":\"pw\"}}}}}}'\n",
                d = dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        CredentialProvider {
            name: "plugin".into(),
            command: script,
            args: vec![],
            env: vec![],
            match_images: vec!["*.example".into()],
            default_cache_duration: Duration::ZERO,
        }
    }

    /// The requests the plugin received, as the `image` each named.
    pub(crate) fn requests(dir: &std::path::Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .filter_map(|e| {
                let e = e.unwrap();
                e.file_name()
                    .to_string_lossy()
                    .starts_with("request.")
                    .then(|| {
                        let r: Value =
                            serde_json::from_slice(&std::fs::read(e.path()).unwrap()).unwrap();
                        assert_eq!(r["kind"], "CredentialProviderRequest");
                        r["image"].as_str().unwrap().to_owned()
                    })
            })
            .collect();
        v.sort();
        v
    }

    #[test]
    fn concurrent_lookups_of_one_image_run_the_plugin_once_and_name_the_image() {
        let dir = scratch("flight");
        // Not cached ("0s"): only the single-flight can spare the second run.
        let providers = Providers::new(vec![plugin(&dir, "0.3", "0s")]);
        std::thread::scope(|s| {
            let mut runs = Vec::new();
            for i in 0..6 {
                let image = if i < 4 {
                    "reg.example/apps/web"
                } else {
                    "reg.example/apps/db"
                };
                let p = &providers;
                runs.push(s.spawn(move || p.get("reg.example", image).unwrap()));
            }
            for r in runs {
                let (c, name) = r.join().unwrap().expect("a credential");
                assert_eq!(name, "plugin");
                assert!(matches!(c, Credential::Basic { username, .. } if username == "user"));
            }
        });
        assert_eq!(
            requests(&dir),
            ["reg.example/apps/db", "reg.example/apps/web"],
            "one run per image"
        );
        // Later (not concurrent) lookups run it again: nothing was cached.
        providers
            .get("reg.example", "reg.example/apps/web")
            .unwrap();
        assert_eq!(requests(&dir).len(), 3);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_plugin_whose_file_is_still_open_for_writing_runs_once_it_is_closed() {
        let dir = scratch("busy");
        let p = plugin(&dir, "0", "0s");
        // Hold the script open for writing, as an installer (or a process forked while it
        // was written) does, and close it 60 ms later: exec fails with ETXTBSY until then.
        let writer = std::fs::OpenOptions::new()
            .append(true)
            .open(&p.command)
            .unwrap();
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(60));
            drop(writer);
        });
        let c = Providers::new(vec![p]).get("reg.example", "reg.example/apps/web");
        closer.join().unwrap();
        let (c, name) = c.unwrap().expect("a credential");
        assert_eq!(name, "plugin");
        assert!(matches!(c, Credential::Basic { username, .. } if username == "user"));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn a_plugin_that_does_not_answer_in_time_is_killed_and_named() {
        let dir = scratch("slow");
        let providers =
            Providers::new(vec![plugin(&dir, "30", "0s")]).with_timeout(Duration::from_millis(200));
        let e = providers
            .get("reg.example", "reg.example/apps/web")
            .unwrap_err()
            .to_string();
        assert_eq!(
            e,
            "credential provider plugin for reg.example: did not answer within 0.2 s; killed"
        );
        assert_eq!(Providers::new(vec![]).timeout, PLUGIN_TIMEOUT);
        assert_eq!(PLUGIN_TIMEOUT, Duration::from_secs(60));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn image_patterns_match_the_host_and_a_whole_segment_path_prefix() {
        for (p, image, want) in [
            ("reg.example/team-a", "reg.example/team-a/web", true),
            ("reg.example/team-a", "reg.example/team-a", true),
            ("reg.example/team-a/", "reg.example/team-a/web:1.4", true),
            ("reg.example/team-a", "reg.example/team-a@sha256:00", true),
            ("reg.example/team-a", "reg.example/team-b/web", false),
            ("reg.example/team-a", "reg.example/team-ab/web", false),
            ("reg.example/team-a", "reg.example", false),
            ("reg.example/team-a/web", "reg.example/team-a", false),
            ("*.example/team-a", "reg.example/team-a/web", true),
            ("reg.example", "reg.example/team-b/web:2", true),
            (
                "https://reg.example:5000/apps",
                "reg.example:5000/apps/web",
                true,
            ),
            ("reg.example:5000/apps", "reg.example/apps/web", false),
            ("reg.example/apps", "other.example/apps/web", false),
        ] {
            assert_eq!(matches_image(p, image), want, "{p} vs {image}");
        }
    }

    /// A plugin running `body` (a shell script fragment; the request is in `$req`) whose
    /// answers it prints, recording each request.
    fn answering(dir: &std::path::Path, body: &str, match_images: &str) -> CredentialProvider {
        let script = dir.join("plugin");
        std::fs::write(
            &script,
            format!(
                "#!/bin/sh\nreq=$(cat)\nprintf '%s' \"$req\" > \"{d}/request.$$\"\n{body}\n",
                d = dir.display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        CredentialProvider {
            name: "paths".into(),
            command: script,
            args: vec![],
            env: vec![],
            match_images: vec![match_images.into()],
            default_cache_duration: Duration::ZERO,
        }
    }

    /// A response body with `auth` entries (pattern, username), cached under the registry.
    fn response(entries: &[(&str, &str)]) -> String {
        let auth: serde_json::Map<String, Value> = entries
            .iter()
            .map(|(k, u)| {
                (
                    (*k).to_owned(),
                    serde_json::json!({"username": u, "password": "pw"}),
                )
            })
            .collect();
        serde_json::json!({
            "apiVersion": API_VERSION,
            "kind": "CredentialProviderResponse",
            "cacheKeyType": "Registry",
            "cacheDuration": "1h",
            "auth": auth,
        })
        .to_string()
    }

    fn user(found: Option<(Credential, String)>) -> Option<String> {
        found.map(|(c, _)| match c {
            Credential::Basic { username, .. } => username,
            other => panic!("{other:?}"),
        })
    }

    #[test]
    fn path_scoped_auth_entries_give_each_repository_its_credential() {
        let dir = scratch("paths");
        let body = response(&[("reg.example/team-a", "A"), ("reg.example/team-b", "B")]);
        let providers = Providers::new(vec![answering(
            &dir,
            &format!("printf '%s' '{body}'"),
            "reg.example",
        )]);
        let get = |image: &str| user(providers.get("reg.example", image).unwrap());
        assert_eq!(get("reg.example/team-b/web:1.4").as_deref(), Some("B"));
        assert_eq!(get("reg.example/team-a/web").as_deref(), Some("A"));
        assert_eq!(requests(&dir).len(), 1, "the second came from the cache");
        // No entry covers team-ab (nor the host alone): no credential.
        assert_eq!(get("reg.example/team-ab/web"), None);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn the_most_specific_auth_entry_wins_and_match_images_sees_the_path() {
        let dir = scratch("specific");
        let body = response(&[
            ("*.example", "any"),
            ("reg.example", "host"),
            ("reg.example/team-a", "team"),
            ("reg.example/team-a/web", "repo"),
        ]);
        let providers = Providers::new(vec![answering(
            &dir,
            &format!("printf '%s' '{body}'"),
            "reg.example/team-a",
        )]);
        let get = |image: &str| user(providers.get("reg.example", image).unwrap());
        assert_eq!(get("reg.example/team-a/web").as_deref(), Some("repo"));
        assert_eq!(get("reg.example/team-a/db").as_deref(), Some("team"));
        // matchImages names team-a: the plugin is not asked for team-b.
        assert_eq!(get("reg.example/team-b/web"), None);
        assert_eq!(requests(&dir).len(), 1);
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn answers_for_two_paths_of_one_registry_are_both_cached() {
        let dir = scratch("merge");
        // The plugin answers only for the team the request names.
        let a = response(&[("reg.example/team-a", "A")]);
        let b = response(&[("reg.example/team-b", "B")]);
        let providers = Providers::new(vec![answering(
            &dir,
            &format!("case \"$req\" in *team-a*) printf '%s' '{a}';; *) printf '%s' '{b}';; esac"),
            "reg.example",
        )]);
        let get = |image: &str| user(providers.get("reg.example", image).unwrap());
        assert_eq!(get("reg.example/team-a/web").as_deref(), Some("A"));
        // team-a's cached answer does not cover team-b: the plugin is asked for it.
        assert_eq!(get("reg.example/team-b/web").as_deref(), Some("B"));
        assert_eq!(get("reg.example/team-a/web").as_deref(), Some("A"));
        assert_eq!(get("reg.example/team-b/db").as_deref(), Some("B"));
        assert_eq!(
            requests(&dir),
            ["reg.example/team-a/web", "reg.example/team-b/web"]
        );
        let _ = std::fs::remove_dir_all(&dir);
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
