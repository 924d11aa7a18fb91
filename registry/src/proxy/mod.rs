//! Pull-through caching (`[[proxy]]` in registry.toml): repositories under a local prefix are
//! filled on demand from upstream registries, tried in order (zot-style, not distribution's
//! single upstream).
//!
//! - A manifest GET or HEAD by digest that the repository lacks is fetched from the first
//!   upstream that has it and serves it verified (digest, size limit, the same document rules
//!   as a push), and stored; then the request is served from the store. An upstream whose
//!   manifest fails verification is passed over like one that is down or lacks it: the next
//!   is asked, and nothing of the bad one is stored.
//! - A manifest by tag is revalidated at the upstreams once its last check is older than the
//!   rule's `tag_ttl_secs`; when no upstream answers, the cached tag is served (stale), so a
//!   site keeps working while the upstream is down. With nothing cached, a failure of every
//!   upstream is `503 UNAVAILABLE` whose detail names each upstream and why it failed; only
//!   when every upstream answered "not found" is it `404 MANIFEST_UNKNOWN`.
//! - A blob the repository lacks is fetched once however many requests ask for it at the same
//!   time (one fetch per digest in this process; the others wait for it and are served from
//!   the store). The fetch goes through the registry's own upload path, so the bytes become
//!   visible only after `finish_upload` verified size and digest. The request that started the
//!   fetch gets the bytes as they arrive, except the last chunk, which is sent only after the
//!   verification succeeded: a client either receives verified bytes or sees the transfer
//!   fail. When an upstream's bytes fail verification the fetch goes on at the next upstream
//!   (that client's transfer has failed; the waiting and later requests get the verified
//!   blob). The fetch runs on its own task and completes even when that client goes away.
//! - Referrers of a proxied repository ([`Proxy::referrers`]) are the cached ones merged with
//!   what the upstreams list (their referrers API, or the `sha256-<hex>` tag schema for a
//!   registry without it); the listed signatures and SBOMs are then fetched on demand like any
//!   manifest and blob. Each upstream's answer is kept for the rule's `tag_ttl_secs`; one that
//!   fails or does not answer within `REFERRERS_TIMEOUT` contributes its last answer and is
//!   left alone for `REFERRERS_RETRY_AFTER`.
//! - containerd's mirror requests (`/v2/NAME/...?ns=HOST`) are the requests for
//!   `PREFIX/NAME` of the rule with an upstream at `HOST` (`NAME` without that upstream's
//!   repository prefix; [`Proxy::local_name_for_namespace`]); when rules share an upstream's
//!   repositories, the first rule serves them ([`mirror_ambiguities`], warned at start).
//!
//! Upstreams are reached with `registry-client`, the workspace's one HTTP stack: a 401's
//! challenge is answered with Basic credentials or a bearer token from its realm (tokens
//! cached per scope), credentials come from the rule's `auth_file` (a docker `config.json` or
//! containers `auth.json`, credential helpers included; none: anonymous, never the process's
//! own docker config), TLS trusts the rule's `ca_files` and `certs.d` directories (per host;
//! default docker's and containers' `/etc/*/certs.d`) or skips verification with `insecure`,
//! and transient failures are retried with [`UPSTREAM_RETRY`]. Revalidation times are kept
//! in memory: they only decide when to ask again, never what is served, so a restarted
//! replica revalidates once more.
//!
//! The modules: [`upstream`] (an upstream's URL, a `[[proxy]]` rule and the client that
//! reaches it), [`manifests`] (fetching, verifying and caching manifests and tags),
//! [`admission`] (`only_signed`: which images may be cached), [`referrers`] (the merged
//! referrers listing and its per-upstream answers) and [`blobs`] (the single-flight blob fetch
//! through the upload path). This module holds the cache itself and its routing.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use registry_client::Client;
use registry_client::sync::SignaturePolicy;
use validator::{Digest, Name, RegistryHost, error_chain};

mod admission;
mod blobs;
mod manifests;
mod referrers;
mod upstream;

pub use upstream::{ProxyRule, UPSTREAM_RETRY, Upstream, mirror_ambiguities};

use blobs::FetchEnd;
use referrers::Listed;

/// A rule with a client per upstream (or why it could not be built).
#[derive(Debug)]
struct Routed {
    rule: ProxyRule,
    clients: Vec<Result<Client, String>>,
    /// The rule's `only_signed` policy, loaded at start (or why it could not be: then every
    /// fetch from an upstream is refused with that reason).
    policy: Option<Result<SignaturePolicy, String>>,
}

impl Routed {
    /// Each upstream with its client, in order.
    fn upstreams(&self) -> impl Iterator<Item = (&Upstream, &Result<Client, String>)> {
        self.rule.upstreams.iter().zip(&self.clients)
    }
}

/// The pull-through cache of one registry process.
#[derive(Debug)]
pub(crate) struct Proxy {
    rules: Vec<Arc<Routed>>,
    /// When each `(repository, tag)` was last revalidated.
    checked: Mutex<HashMap<(String, String), Instant>>,
    /// Blob fetches under way, by digest: a receiver that turns `Some` when the fetch ended
    /// (`Ok` or the reason it failed).
    inflight: Mutex<HashMap<Digest, tokio::sync::watch::Receiver<FetchEnd>>>,
    /// For `only_signed` rules: `(repository, digest)` of the manifests and blobs an admitted
    /// (or cached) manifest names, which may then be fetched from the upstreams.
    admitted: Mutex<HashSet<(String, Digest)>>,
    /// Each upstream's last referrers answer, by `(repository, subject, upstream number)`.
    listed: Mutex<HashMap<(String, Digest, usize), Listed>>,
}

impl Proxy {
    /// A cache over `rules`; `None` without rules. An upstream whose client cannot be built
    /// (the configuration check reports that at start) fails each fetch with that reason.
    pub(crate) fn new(rules: Vec<ProxyRule>) -> Option<Arc<Proxy>> {
        if rules.is_empty() {
            return None;
        }
        for a in mirror_ambiguities(&rules) {
            tracing::warn!(ambiguity = %a, "[[proxy]] rules share an upstream host; mirror requests (?ns=) go to the first");
        }
        let rules = rules
            .into_iter()
            .map(|rule| {
                let clients = rule
                    .upstreams
                    .iter()
                    .map(|u| {
                        rule.client_for(u)
                            .map_err(|e| format!("{u}: {}", error_chain(&e)))
                    })
                    .collect();
                let policy = rule.only_signed.as_ref().map(|p| {
                    SignaturePolicy::load(p).map_err(|e| {
                        format!("only_signed policy {}: {}", p.display(), error_chain(&e))
                    })
                });
                Arc::new(Routed {
                    rule,
                    clients,
                    policy,
                })
            })
            .collect();
        Some(Arc::new(Proxy {
            rules,
            checked: Mutex::new(HashMap::new()),
            inflight: Mutex::new(HashMap::new()),
            admitted: Mutex::new(HashSet::new()),
            listed: Mutex::new(HashMap::new()),
        }))
    }

    /// The rule for a local repository and the name at the upstreams.
    fn route(&self, name: &Name) -> Option<(&Arc<Routed>, String)> {
        self.rules.iter().find_map(|r| {
            let rest = name
                .as_str()
                .strip_prefix(&r.rule.prefix)?
                .strip_prefix('/')?;
            Some((r, rest.to_owned()))
        })
    }

    /// The local repository a containerd mirror request for `name` with `ns=host` means:
    /// `PREFIX/REST` of the rule with an upstream at `host` whose repository prefix `name`
    /// is under (`REST` is `name` without that prefix). Hosts are compared in canonical
    /// spelling (`Docker.IO`, `index.docker.io` and `registry-1.docker.io` are `docker.io`);
    /// the error names the host asked for and never the configured upstreams (it is answered
    /// before authentication).
    pub(crate) fn local_name_for_namespace(
        &self,
        host: &str,
        name: &str,
    ) -> Result<String, String> {
        let want = RegistryHost::parse(host).map_err(|e| format!("ns={host:?}: {e}"))?;
        for r in &self.rules {
            for u in r.rule.upstreams.iter().filter(|u| u.host() == want) {
                let rest = match &u.prefix {
                    None => Some(name),
                    Some(p) => name
                        .strip_prefix(p.as_str())
                        .and_then(|n| n.strip_prefix('/')),
                };
                if let Some(rest) = rest {
                    return Ok(format!("{}/{rest}", r.rule.prefix));
                }
            }
        }
        // The upstreams are internal hosts: the log names them, the (unauthenticated) caller
        // learns only that the ns it asked for is not served.
        let served: Vec<String> = self
            .rules
            .iter()
            .flat_map(|r| r.rule.upstreams.iter().map(|u| u.to_string()))
            .collect();
        tracing::debug!(ns = %host, repository = %name, upstreams = %served.join(", "), "mirror request for a host no [[proxy]] rule serves");
        Err(format!(
            "ns={host:?}: this registry mirrors no repository {name:?} of {want}"
        ))
    }
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;
    use std::time::Duration;

    use super::*;

    /// A rule with the defaults a test does not care about (also used by the sibling modules'
    /// tests).
    pub(super) fn rule(prefix: &str, upstreams: &[&str]) -> ProxyRule {
        ProxyRule {
            prefix: prefix.into(),
            upstreams: upstreams
                .iter()
                .map(|u| Upstream::parse(u).unwrap())
                .collect(),
            tag_ttl: Duration::from_secs(1),
            auth_file: None,
            ca_files: Vec::new(),
            cert_dirs: Vec::new(),
            insecure: false,
            only_signed: None,
        }
    }

    #[test]
    fn upstreams_parse_and_routes_strip_the_prefix() {
        let u = Upstream::parse("http://127.0.0.1:5000/zones/").unwrap();
        assert_eq!(u.base, "http://127.0.0.1:5000");
        assert_eq!(u.repository("apps/web"), "zones/apps/web");
        assert_eq!(
            u.reference("apps/web", "1").unwrap().to_string(),
            "127.0.0.1:5000/zones/apps/web:1"
        );
        assert_eq!(Upstream::parse("https://reg.example").unwrap().prefix, None);
        for bad in [
            "reg.example",
            "ftp://x",
            "http://",
            "http://h/UPPER",
            "http://h:99999",
        ] {
            assert!(Upstream::parse(bad).is_err(), "{bad}");
        }
        let p = Proxy::new(vec![rule("central", &["http://127.0.0.1:5000/zones/"])]).unwrap();
        let n = Name::parse("central/apps/web").unwrap();
        assert_eq!(p.route(&n).map(|(_, r)| r), Some("apps/web".to_owned()));
        assert!(p.route(&Name::parse("centralx/a").unwrap()).is_none());
        assert!(p.route(&Name::parse("central").unwrap()).is_none());
    }

    #[test]
    fn mirror_namespaces_map_to_rules_by_canonical_host() {
        let p = Proxy::new(vec![
            rule("hub", &["https://registry-1.docker.io"]),
            rule(
                "local",
                &["http://LocalHost:5000", "https://quay.io:443/team"],
            ),
        ])
        .unwrap();
        for (ns, name, local) in [
            ("docker.io", "library/nginx", "hub/library/nginx"),
            ("index.docker.io", "library/nginx", "hub/library/nginx"),
            ("Docker.IO", "a", "hub/a"),
            ("localhost:5000", "apps/web", "local/apps/web"),
            ("quay.io", "team/app", "local/app"),
            ("quay.io:443", "team/x/y", "local/x/y"),
        ] {
            assert_eq!(
                p.local_name_for_namespace(ns, name).as_deref(),
                Ok(local),
                "{ns} {name}"
            );
        }
        // Answered before authentication: names the ns asked for, never an upstream.
        let e = p.local_name_for_namespace("ghcr.io", "a").unwrap_err();
        assert!(e.contains("ghcr.io"), "{e}");
        for internal in [
            "docker.io",
            "LocalHost",
            "localhost",
            "5000",
            "quay.io",
            "team",
        ] {
            assert!(!e.contains(internal), "{internal} disclosed: {e}");
        }
        // Not under the upstream's prefix: not that upstream's repository.
        assert!(p.local_name_for_namespace("quay.io", "other/app").is_err());
        assert!(p.local_name_for_namespace("bad host", "a").is_err());
    }

    #[test]
    fn rules_sharing_an_upstream_host_are_reported_and_the_first_serves_ns() {
        let overlap = |a: &str, b: &str| {
            Upstream::parse(a)
                .unwrap()
                .overlaps(&Upstream::parse(b).unwrap())
        };
        assert!(overlap("https://quay.io", "https://quay.io:443/team"));
        assert!(overlap("https://quay.io/team", "https://quay.io/team/sub"));
        assert!(overlap(
            "https://index.docker.io",
            "https://registry-1.docker.io"
        ));
        assert!(!overlap("https://quay.io/team", "https://quay.io/teams"));
        assert!(!overlap("https://quay.io/a", "https://quay.io/b"));
        assert!(!overlap("http://h:5000", "http://h:5001"));
        let rules = vec![
            rule("signed", &["https://reg.example/apps"]),
            rule("other", &["https://quay.io/b"]),
            rule("all", &["https://quay.io/a", "https://reg.example"]),
        ];
        let found = mirror_ambiguities(&rules);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(
            found[0].contains("\"signed\"")
                && found[0].contains("\"all\"")
                && found[0].contains("https://reg.example/apps"),
            "{found:?}"
        );
        // First in file order wins for ?ns=; disjoint prefixes at one host stay distinct.
        let p = Proxy::new(rules).unwrap();
        assert_eq!(
            p.local_name_for_namespace("reg.example", "apps/web")
                .as_deref(),
            Ok("signed/web")
        );
        assert_eq!(
            p.local_name_for_namespace("reg.example", "x/web")
                .as_deref(),
            Ok("all/x/web")
        );
        assert_eq!(
            p.local_name_for_namespace("quay.io", "a/x").as_deref(),
            Ok("all/x")
        );
        assert_eq!(
            p.local_name_for_namespace("quay.io", "b/x").as_deref(),
            Ok("other/x")
        );
    }

    #[test]
    fn a_bad_ca_file_names_the_file() {
        let mut r = rule("c", &["https://reg.example"]);
        r.ca_files = vec![PathBuf::from("/nonexistent/ca.pem")];
        let e = error_chain(&r.client_for(&r.upstreams[0]).unwrap_err());
        assert!(e.contains("/nonexistent/ca.pem"), "{e}");
    }
}
