//! The `[notifications]` table: delivery settings and the `[[notifications.endpoints]]` list,
//! parsed once into [`NotificationsConfig`] with every duration, pattern and name checked.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use config_toml::{HumanDuration, format_duration};

use crate::auth::acl::Pattern;

/// What an event reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Action {
    /// A manifest or blob was pushed.
    Push,
    /// A blob was mounted from another repository.
    Mount,
    /// A manifest, tag or blob was deleted.
    Delete,
    /// A manifest or blob was pulled (GET, not HEAD); off unless an endpoint lists it.
    Pull,
    /// A governance rule refused a request (quota, immutable tag, index size); the event's
    /// `reason` says which rule and why. Off unless an endpoint lists it.
    Refuse,
    /// A scrub quarantined corrupt bytes, or withdrew a manifest whose blob it quarantined;
    /// the event's `reason` says which. Off unless an endpoint lists it.
    Quarantine,
}

impl Action {
    /// The name in the envelope and in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Push => "push",
            Action::Mount => "mount",
            Action::Delete => "delete",
            Action::Pull => "pull",
            Action::Refuse => "refuse",
            Action::Quarantine => "quarantine",
        }
    }

    fn parse(s: &str) -> Option<Action> {
        [
            Action::Push,
            Action::Mount,
            Action::Delete,
            Action::Pull,
            Action::Refuse,
            Action::Quarantine,
        ]
        .into_iter()
        .find(|a| a.as_str() == s)
    }
}

/// One webhook receiver with its filters.
#[derive(Debug, Clone, PartialEq)]
pub struct Endpoint {
    /// Its name: names its outbox in the store, so `[A-Za-z0-9._-]`, not starting with `.`.
    pub name: String,
    /// Where events are POSTed.
    pub url: String,
    /// Extra request headers (a name may repeat).
    pub headers: Vec<(String, String)>,
    /// The whole request's time limit.
    pub timeout: Duration,
    /// The wait before the first retry; it doubles with every failure up to `max_backoff`.
    pub backoff: Duration,
    /// The longest wait between retries.
    pub max_backoff: Duration,
    /// An event still undelivered this long after it happened is given up (dead-lettered).
    pub max_age: Duration,
    /// The actions sent (default push, mount, delete).
    pub actions: Vec<Action>,
    /// Target media types sent; empty: all (tag deletes carry none and always pass).
    pub media_types: Vec<String>,
    /// Repository globs sent (`*` one component, `**` any depth); empty: all.
    pub repositories: Vec<Pattern>,
    /// PEM files of CAs trusted for this endpoint's HTTPS besides the system roots
    /// (`ca_files`, as `[[proxy]]` spells it): receivers inside a company usually have a
    /// certificate from a private CA.
    pub ca_files: Vec<PathBuf>,
    /// HTTPS without verifying the endpoint's certificate (`insecure`; tests and lab setups).
    pub insecure: bool,
}

impl Endpoint {
    /// Whether an event passes this endpoint's filters.
    pub fn wants(&self, action: Action, repository: &str, media_type: Option<&str>) -> bool {
        self.actions.contains(&action)
            && (self.repositories.is_empty()
                || self.repositories.iter().any(|p| p.matches(repository)))
            && match media_type {
                Some(m) if !self.media_types.is_empty() => self.media_types.iter().any(|t| t == m),
                _ => true,
            }
    }

    /// Whether this endpoint needs an HTTP client of its own (CA files or `insecure`); the
    /// others share the notifier's default client.
    pub fn own_tls(&self) -> bool {
        !self.ca_files.is_empty() || self.insecure
    }

    /// The HTTP client that reaches this endpoint: the workspace's one HTTP setup
    /// ([`registry_client::ClientBuilder`]: rustls, connect and read timeouts) with the
    /// endpoint's CA files and `insecure`, as `[[proxy]]` upstreams get theirs. Reads every CA
    /// file now, so one that cannot be used fails here, naming it.
    pub fn http_client(&self) -> Result<reqwest::Client, registry_client::ClientError> {
        let mut b = registry_client::ClientBuilder::default().insecure(self.insecure);
        for f in &self.ca_files {
            b = b.ca_file(f);
        }
        b.http_client()
    }

    /// The wait after `attempts` failed deliveries.
    pub fn retry_after(&self, attempts: u32) -> Duration {
        let factor = 1u32
            .checked_shl(attempts.saturating_sub(1))
            .unwrap_or(u32::MAX);
        self.backoff
            .checked_mul(factor)
            .unwrap_or(self.max_backoff)
            .min(self.max_backoff)
    }
}

/// The `[notifications]` table after checking.
#[derive(Debug, Clone, PartialEq)]
pub struct NotificationsConfig {
    /// The receivers; none: events are neither recorded nor sent.
    pub endpoints: Vec<Endpoint>,
    /// How often each replica looks at the outbox (default 1 s).
    pub poll_interval: Duration,
    /// How long a replica's claim on an entry lasts before another replica may deliver it
    /// (default 30 s; longer than any endpoint's timeout).
    pub lease: Duration,
    /// The `source.addr` of recorded events: set by `serve` to the address it listens on.
    pub source_addr: String,
    /// Proxies whose `X-Forwarded-For` names the client in an event's `request.addr`
    /// (`notifications.trusted_proxies`: addresses or CIDR ranges); empty: the connection's
    /// address, whatever the headers say.
    pub trusted_proxies: Vec<IpRange>,
}

/// An address or a CIDR range (`10.0.0.1`, `10.0.0.0/8`, `fd00::/8`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    net: IpAddr,
    prefix: u8,
}

impl IpRange {
    /// Parses `ADDR` or `ADDR/PREFIX`.
    pub fn parse(s: &str) -> Result<IpRange, String> {
        let (addr, prefix) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let net: IpAddr = addr
            .parse()
            .map_err(|_| format!("{s:?} is not an IP address or CIDR range"))?;
        let max = if net.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => max,
            Some(p) => match p.parse::<u8>() {
                Ok(p) if p <= max => p,
                _ => {
                    return Err(format!(
                        "{s:?} has a prefix length over {max} or not a number"
                    ));
                }
            },
        };
        Ok(IpRange { net, prefix })
    }

    /// Whether `ip` is in the range.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = match ip {
            IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
            v4 => v4,
        };
        match (self.net, ip) {
            (IpAddr::V4(n), IpAddr::V4(a)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(n) & mask == u32::from(a) & mask
            }
            (IpAddr::V6(n), IpAddr::V6(a)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(n) & mask == u128::from(a) & mask
            }
            _ => false,
        }
    }
}

impl Default for NotificationsConfig {
    fn default() -> Self {
        NotificationsConfig {
            endpoints: Vec::new(),
            poll_interval: Duration::from_secs(1),
            lease: Duration::from_secs(30),
            source_addr: String::new(),
            trusted_proxies: Vec::new(),
        }
    }
}

/// The `[notifications]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileNotifications {
    poll_interval: Option<HumanDuration>,
    lease: Option<HumanDuration>,
    #[serde(default)]
    trusted_proxies: Vec<String>,
    #[serde(default)]
    endpoints: Vec<FileEndpoint>,
}

/// A header value: one string or a list (distribution writes lists).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
enum HeaderValues {
    One(String),
    Many(Vec<String>),
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileEndpoint {
    name: String,
    url: String,
    #[serde(default)]
    disabled: bool,
    #[serde(default)]
    headers: BTreeMap<String, HeaderValues>,
    timeout: Option<HumanDuration>,
    backoff: Option<HumanDuration>,
    max_backoff: Option<HumanDuration>,
    max_age: Option<HumanDuration>,
    actions: Option<Vec<String>>,
    #[serde(default)]
    media_types: Vec<String>,
    #[serde(default)]
    repositories: Vec<String>,
    #[serde(default)]
    ca_files: Vec<PathBuf>,
    insecure: Option<bool>,
}

/// A bad entry: the key (`notifications.endpoints.url`) and what is wrong (naming the
/// endpoint).
pub(crate) type SettingError = (&'static str, String);

/// `v` (`"30s"` or whole seconds, read by config-toml), or `default`; zero is refused.
fn duration(
    key: &'static str,
    v: Option<HumanDuration>,
    default: Duration,
) -> Result<Duration, SettingError> {
    match v {
        None => Ok(default),
        Some(d) if d.0.is_zero() => Err((key, format!("\"{d}\" must be longer than 0"))),
        Some(d) => Ok(d.0),
    }
}

impl FileNotifications {
    /// Checks the table.
    pub(crate) fn check(self) -> Result<NotificationsConfig, SettingError> {
        let d = NotificationsConfig::default();
        let poll_interval = duration(
            "notifications.poll_interval",
            self.poll_interval,
            d.poll_interval,
        )?;
        let lease = duration("notifications.lease", self.lease, d.lease)?;
        let trusted_proxies = self
            .trusted_proxies
            .iter()
            .map(|p| IpRange::parse(p).map_err(|r| ("notifications.trusted_proxies", r)))
            .collect::<Result<_, _>>()?;
        let mut endpoints: Vec<Endpoint> = Vec::new();
        for (i, e) in self.endpoints.into_iter().enumerate() {
            if e.disabled {
                continue;
            }
            let name = e.name.clone();
            let at = |r: String| format!("endpoint {i} ({name:?}): {r}");
            let d = |key, v, default| duration(key, v, default).map_err(|(k, r)| (k, at(r)));
            if crate::storage::Key::new(&e.name).is_err() || e.name.contains('/') {
                return Err((
                    "notifications.endpoints.name",
                    at(
                        "must be letters, digits, '.', '_' or '-', not starting with '.'"
                            .to_owned(),
                    ),
                ));
            }
            if endpoints.iter().any(|x| x.name == e.name) {
                return Err((
                    "notifications.endpoints.name",
                    at("is used twice".to_owned()),
                ));
            }
            if !(e.url.starts_with("http://") || e.url.starts_with("https://")) {
                return Err((
                    "notifications.endpoints.url",
                    at(format!("{:?} is not an http(s) URL", e.url)),
                ));
            }
            let mut headers = Vec::new();
            for (hname, values) in e.headers {
                let values = match values {
                    HeaderValues::One(v) => vec![v],
                    HeaderValues::Many(v) => v,
                };
                for v in values {
                    if axum::http::HeaderName::try_from(hname.as_str()).is_err()
                        || axum::http::HeaderValue::try_from(v.as_str()).is_err()
                    {
                        return Err((
                            "notifications.endpoints.headers",
                            at(format!("{hname:?} is not a valid header")),
                        ));
                    }
                    headers.push((hname.clone(), v));
                }
            }
            let actions = match e.actions {
                None => vec![Action::Push, Action::Mount, Action::Delete],
                Some(list) => list
                    .iter()
                    .map(|a| {
                        Action::parse(a).ok_or_else(|| {
                            (
                                "notifications.endpoints.actions",
                                at(format!(
                                    "{a:?} is not one of push, mount, delete, pull, refuse, quarantine"
                                )),
                            )
                        })
                    })
                    .collect::<Result<_, _>>()?,
            };
            let repositories = e
                .repositories
                .iter()
                .map(|p| {
                    Pattern::parse(p).map_err(|r| ("notifications.endpoints.repositories", at(r)))
                })
                .collect::<Result<_, _>>()?;
            let timeout = d(
                "notifications.endpoints.timeout",
                e.timeout,
                Duration::from_secs(5),
            )?;
            if timeout >= lease {
                return Err((
                    "notifications.endpoints.timeout",
                    at(format!(
                        "\"{}\" must be shorter than notifications.lease (\"{}\")",
                        format_duration(timeout),
                        format_duration(lease)
                    )),
                ));
            }
            let backoff = d(
                "notifications.endpoints.backoff",
                e.backoff,
                Duration::from_secs(1),
            )?;
            let max_backoff = d(
                "notifications.endpoints.max_backoff",
                e.max_backoff,
                Duration::from_secs(300),
            )?;
            let endpoint = Endpoint {
                name: e.name,
                url: e.url,
                headers,
                timeout,
                backoff,
                max_backoff: max_backoff.max(backoff),
                max_age: d(
                    "notifications.endpoints.max_age",
                    e.max_age,
                    Duration::from_secs(24 * 3600),
                )?,
                actions,
                media_types: e.media_types,
                repositories,
                ca_files: e.ca_files,
                insecure: e.insecure.unwrap_or(false),
            };
            // A CA file that cannot be read fails the start here, naming it (as `[[proxy]]`
            // does), instead of every delivery failing later.
            if endpoint.own_tls() {
                endpoint.http_client().map_err(|err| {
                    (
                        "notifications.endpoints.ca_files",
                        at(validator::error_chain(&err)),
                    )
                })?;
            }
            endpoints.push(endpoint);
        }
        Ok(NotificationsConfig {
            endpoints,
            poll_interval,
            lease,
            source_addr: String::new(),
            trusted_proxies,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trusted_proxy_ranges() {
        let r = IpRange::parse("10.1.0.0/16").unwrap();
        assert!(r.contains("10.1.200.3".parse().unwrap()));
        assert!(r.contains("::ffff:10.1.0.9".parse().unwrap()));
        assert!(!r.contains("10.2.0.1".parse().unwrap()));
        assert!(!r.contains("fd00::1".parse().unwrap()));
        let one = IpRange::parse("127.0.0.1").unwrap();
        assert!(one.contains("127.0.0.1".parse().unwrap()));
        assert!(!one.contains("127.0.0.2".parse().unwrap()));
        assert!(
            IpRange::parse("fd00::/8")
                .unwrap()
                .contains("fd12::1".parse().unwrap())
        );
        assert!(
            IpRange::parse("0.0.0.0/0")
                .unwrap()
                .contains("8.8.8.8".parse().unwrap())
        );
        for bad in ["10.0.0.0/33", "host", "10.0.0.0/x", ""] {
            assert!(IpRange::parse(bad).is_err(), "{bad}");
        }
    }

    fn parse(toml_text: &str) -> Result<NotificationsConfig, SettingError> {
        config_toml::from_str::<FileNotifications>(toml_text, &[])
            .expect("toml")
            .check()
    }

    #[test]
    fn endpoints_parse_with_defaults_and_filters() {
        let c = parse(
            r#"
            poll_interval = "200ms"
            [[endpoints]]
            name = "hook"
            url = "http://127.0.0.1:9/events"
            headers = { Authorization = ["Bearer x"], X-One = "1" }
            actions = ["push", "pull"]
            media_types = ["application/vnd.oci.image.manifest.v1+json"]
            repositories = ["team/**"]
            [[endpoints]]
            name = "off"
            url = "http://127.0.0.1:9/"
            disabled = true
            "#,
        )
        .unwrap();
        assert_eq!(c.poll_interval, Duration::from_millis(200));
        assert_eq!(c.endpoints.len(), 1);
        let e = &c.endpoints[0];
        assert_eq!(e.headers.len(), 2);
        let m = Some("application/vnd.oci.image.manifest.v1+json");
        assert!(e.wants(Action::Push, "team/a/b", m));
        assert!(e.wants(Action::Pull, "team/a", None));
        assert!(!e.wants(Action::Delete, "team/a", m));
        assert!(!e.wants(Action::Push, "other/a", m));
        assert!(!e.wants(Action::Push, "team/a", Some("application/octet-stream")));
        assert_eq!(e.retry_after(1), Duration::from_secs(1));
        assert_eq!(e.retry_after(4), Duration::from_secs(8));
        assert_eq!(e.retry_after(40), Duration::from_secs(300));

        let d = parse("[[endpoints]]\nname = \"a\"\nurl = \"https://h/\"\n").unwrap();
        assert_eq!(
            d.endpoints[0].actions,
            [Action::Push, Action::Mount, Action::Delete]
        );
        assert!(!d.endpoints[0].wants(Action::Pull, "x", None));

        for (bad, key) in [
            (
                "[[endpoints]]\nname = \"a/b\"\nurl = \"http://h/\"\n",
                "name",
            ),
            ("[[endpoints]]\nname = \"a\"\nurl = \"ftp://h/\"\n", "url"),
            (
                "[[endpoints]]\nname = \"a\"\nurl = \"http://h/\"\nactions = [\"poke\"]\n",
                "actions",
            ),
            (
                "[[endpoints]]\nname = \"a\"\nurl = \"http://h/\"\ntimeout = \"1m\"\n",
                "timeout",
            ),
            (
                "[[endpoints]]\nname = \"a\"\nurl = \"http://h/\"\nrepositories = [\"A\"]\n",
                "repositories",
            ),
            (
                "[[endpoints]]\nname = \"a\"\nurl = \"http://h/\"\n[[endpoints]]\nname = \"a\"\nurl = \"http://h/\"\n",
                "name",
            ),
        ] {
            let (k, _) = parse(bad).unwrap_err();
            assert!(k.ends_with(key), "{bad}: {k}");
        }
    }

    #[test]
    fn tls_keys_parse_and_a_missing_ca_file_is_named_with_its_key() {
        let dir = tempfile::tempdir().unwrap();
        let key = rcgen::KeyPair::generate().unwrap();
        let ca = rcgen::CertificateParams::new(Vec::<String>::new())
            .unwrap()
            .self_signed(&key)
            .unwrap();
        let ca_file = dir.path().join("ca.pem");
        std::fs::write(&ca_file, ca.pem()).unwrap();
        let c = parse(&format!(
            "[[endpoints]]\nname = \"a\"\nurl = \"https://h/\"\nca_files = [{ca_file:?}]\n\
             [[endpoints]]\nname = \"b\"\nurl = \"https://h/\"\ninsecure = true\n\
             [[endpoints]]\nname = \"c\"\nurl = \"https://h/\"\n"
        ))
        .unwrap();
        let [a, b, plain] = &c.endpoints[..] else {
            panic!("{c:?}")
        };
        assert_eq!((a.ca_files.clone(), a.insecure), (vec![ca_file], false));
        assert!(b.insecure && b.ca_files.is_empty());
        assert!(a.own_tls() && b.own_tls() && !plain.own_tls());

        // In registry.toml: the start fails naming the key, the endpoint and the file.
        let missing = dir.path().join("missing-ca.pem");
        let file = dir.path().join("registry.toml");
        std::fs::write(
            &file,
            format!(
                "[[notifications.endpoints]]\nname = \"hook\"\nurl = \"https://h/\"\n\
                 ca_files = [{missing:?}]\n"
            ),
        )
        .unwrap();
        let e = crate::config::ServeConfig::load_with_env(Some(&file), &|_| None).unwrap_err();
        let chain = validator::error_chain(&e);
        assert!(
            chain.contains("invalid notifications.endpoints.ca_files")
                && chain.contains("\"hook\"")
                && chain.contains(&*missing.to_string_lossy()),
            "{chain}"
        );
    }
}
