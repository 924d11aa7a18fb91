//! Upstreams of the pull-through cache: an upstream's URL and repository prefix, a `[[proxy]]`
//! rule, the `registry-client` that reaches each upstream (credentials, CAs, `certs.d`,
//! retries, timeouts), and the rules whose upstreams overlap.

use std::path::PathBuf;
use std::time::Duration;

use registry_client::{AuthEnv, Client, ClientError, Keychain, Reference, Retry};
use validator::{Name, RegistryHost};

/// How the cache retries an upstream's transient failures (5xx, 429, cut connections): three
/// attempts 200 ms and 400 ms apart, so a dead upstream costs a client about a second before
/// the next upstream or the cache answers.
pub const UPSTREAM_RETRY: Retry = Retry {
    attempts: 3,
    base_delay: Duration::from_millis(200),
    max_delay: Duration::from_secs(2),
};

/// Connect and read timeout for upstream requests.
const UPSTREAM_TIMEOUT: Duration = Duration::from_secs(30);

/// One upstream: a base URL (`http[s]://HOST[:PORT]`) and a repository prefix there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Upstream {
    /// `http://HOST[:PORT]` or `https://HOST[:PORT]`.
    pub base: String,
    /// Repository prefix at the upstream (no leading or trailing `/`).
    pub prefix: Option<String>,
}

impl Upstream {
    /// Parses `http[s]://HOST[:PORT][/PREFIX]`.
    pub fn parse(s: &str) -> Result<Upstream, String> {
        let (scheme, rest) = s
            .split_once("://")
            .filter(|(sch, _)| matches!(*sch, "http" | "https"))
            .ok_or_else(|| format!("{s:?} is not an http:// or https:// URL"))?;
        let rest = rest.trim_end_matches('/');
        let (host, prefix) = match rest.split_once('/') {
            Some((h, p)) => (h, Some(p)),
            None => (rest, None),
        };
        if host.is_empty()
            || !host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b':' | b'[' | b']'))
        {
            return Err(format!("{s:?}: bad host {host:?}"));
        }
        RegistryHost::parse(host).map_err(|e| format!("{s:?}: bad host {host:?}: {e}"))?;
        if let Some(p) = prefix {
            Name::parse(p).map_err(|e| format!("{s:?}: prefix {p:?}: {e}"))?;
        }
        Ok(Upstream {
            base: format!("{scheme}://{host}"),
            prefix: prefix.map(str::to_owned),
        })
    }

    /// `HOST[:PORT]` as written.
    pub(super) fn authority(&self) -> &str {
        self.base.split_once("://").map_or("", |(_, h)| h)
    }

    /// The canonical `HOST[:PORT]` (how `registry-client` names the registry).
    pub fn host(&self) -> RegistryHost {
        RegistryHost::parse(self.authority()).expect("checked by Upstream::parse")
    }

    /// True for an `http://` upstream.
    pub fn plain_http(&self) -> bool {
        self.base.starts_with("http://")
    }

    /// Whether `self` and `other` name some repository in common: the same host (canonical
    /// spelling) and repository prefixes of which one is under the other (no prefix: every
    /// repository of the host). A containerd `?ns=` request for such a repository could
    /// mean either.
    pub fn overlaps(&self, other: &Upstream) -> bool {
        if self.host() != other.host() {
            return false;
        }
        match (&self.prefix, &other.prefix) {
            (None, _) | (_, None) => true,
            (Some(a), Some(b)) => {
                a == b || a.starts_with(&format!("{b}/")) || b.starts_with(&format!("{a}/"))
            }
        }
    }

    pub(super) fn repository(&self, remote: &str) -> String {
        match &self.prefix {
            Some(p) => format!("{p}/{remote}"),
            None => remote.to_owned(),
        }
    }

    /// The client reference of `remote` at this upstream: `reference` is a tag or a digest.
    pub(super) fn reference(&self, remote: &str, reference: &str) -> Result<Reference, String> {
        let sep = if reference.contains(':') { '@' } else { ':' };
        let s = format!(
            "{}/{}{sep}{reference}",
            self.host(),
            self.repository(remote)
        );
        Reference::parse(&s).map_err(|e| format!("{self}: {e}"))
    }
}

impl std::fmt::Display for Upstream {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}", self.base)?;
        if let Some(p) = &self.prefix {
            write!(f, "/{p}")?;
        }
        Ok(())
    }
}

/// One `[[proxy]]` rule.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProxyRule {
    /// Local repository prefix: `PREFIX/NAME` is `NAME` at the upstreams.
    pub prefix: String,
    /// Tried in order.
    pub upstreams: Vec<Upstream>,
    /// A tag is revalidated at the upstreams once its last check is this old.
    pub tag_ttl: Duration,
    /// A docker `config.json` / containers `auth.json` with the upstreams' credentials and
    /// credential helpers (none: anonymous).
    pub auth_file: Option<PathBuf>,
    /// PEM files of CAs trusted for every upstream of the rule (besides the system's).
    pub ca_files: Vec<PathBuf>,
    /// `certs.d`-style directories (`<dir>/<host:port>/*.crt`, `client.cert`/`client.key`);
    /// empty: [`registry_client::DEFAULT_CERT_DIRS`].
    pub cert_dirs: Vec<PathBuf>,
    /// TLS without verifying the upstreams' certificates.
    pub insecure: bool,
    /// An admission policy file in the worker's format: cache and serve only the images it
    /// admits (`only_signed`; none: every image). See [`Proxy`]'s admission rules.
    pub only_signed: Option<PathBuf>,
}

impl ProxyRule {
    /// The client that reaches upstream `u` of this rule: its credentials, CAs and `certs.d`,
    /// TLS unless `u` is `http://`, the cache's retry policy. Fails naming a CA or `certs.d`
    /// file that cannot be read.
    pub fn client_for(&self, u: &Upstream) -> Result<Client, ClientError> {
        let keychain = match &self.auth_file {
            // Only the configured file: a server never reads its user's docker config.
            Some(f) => Keychain::from_env(Some(f), &AuthEnv::default()),
            None => Keychain::empty(),
        };
        let mut b = Client::builder()
            .plain_http(u.plain_http())
            .tls(!u.plain_http())
            .insecure(self.insecure)
            .keychain(keychain)
            .retry(UPSTREAM_RETRY)
            .timeout(UPSTREAM_TIMEOUT);
        for f in &self.ca_files {
            b = b.ca_file(f);
        }
        b = if self.cert_dirs.is_empty() {
            b.cert_dirs(registry_client::DEFAULT_CERT_DIRS.iter().map(PathBuf::from))
        } else {
            b.cert_dirs(self.cert_dirs.iter().cloned())
        };
        b.build()
    }
}

/// Pairs of rules with upstreams that reach the same repositories of one host (see
/// [`Upstream::overlaps`]), each as a sentence naming both rules and upstreams. A containerd
/// mirror request (`?ns=HOST`) for such a repository goes to the first rule in file order:
/// that is documented, not refused, because one upstream under two rules is a legitimate
/// setup (other credentials or another `only_signed` policy per local prefix).
pub fn mirror_ambiguities(rules: &[ProxyRule]) -> Vec<String> {
    let mut found = Vec::new();
    for (i, first) in rules.iter().enumerate() {
        for later in &rules[i + 1..] {
            for u in &later.upstreams {
                if let Some(f) = first.upstreams.iter().find(|f| f.overlaps(u)) {
                    found.push(format!(
                        "[[proxy]] {:?} upstream {f} and [[proxy]] {:?} upstream {u} reach the same repositories; ?ns= requests for them go to {:?}",
                        first.prefix, later.prefix, first.prefix
                    ));
                }
            }
        }
    }
    found
}
