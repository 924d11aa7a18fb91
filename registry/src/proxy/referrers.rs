//! Referrers of proxied repositories: the cached ones merged with what each upstream lists,
//! each upstream's answer kept for the rule's TTL (bounded, oldest dropped), a slow or failing
//! upstream left alone for a while.

use std::time::{Duration, Instant};

use registry_client::Client;
use validator::{Digest, Name, error_chain};

use super::{Proxy, Upstream};

/// How long one upstream's referrers listing may take (retries included) before the listing
/// goes on without it (with its last answer, when there is one).
const REFERRERS_TIMEOUT: Duration = Duration::from_secs(5);

/// After an upstream's referrers listing failed, it is not asked again for that subject for
/// this long (or the rule's `tag_ttl_secs` when shorter); its last answer is served meanwhile.
const REFERRERS_RETRY_AFTER: Duration = Duration::from_secs(30);

/// Upstream referrers answers kept (one per repository, subject and upstream); when full the
/// oldest is dropped.
const REFERRERS_CACHED: usize = 4096;

/// One upstream's referrers of one subject, as last asked.
#[derive(Debug, Clone)]
pub(super) struct Listed {
    /// When the upstream was last asked.
    asked: Instant,
    /// Whether that failed (then `manifests` is the answer before, if any).
    failed: bool,
    /// The descriptors it listed.
    manifests: Option<Vec<serde_json::Value>>,
}

impl Listed {
    /// Whether the upstream need not be asked again yet.
    fn fresh(&self, ttl: Duration) -> bool {
        let for_ = if self.failed {
            ttl.min(REFERRERS_RETRY_AFTER)
        } else {
            ttl
        };
        self.asked.elapsed() < for_
    }
}

impl Proxy {
    /// The referrers of `subject` in a proxied repository: `cached` (what the store lists)
    /// merged with what each upstream lists, cached entries first, one entry per digest. Each
    /// upstream's answer is kept for the rule's `tag_ttl_secs` (so repeated listings do not
    /// reach the upstreams again); an upstream that cannot be asked within
    /// [`REFERRERS_TIMEOUT`] is logged and contributes its last answer (or nothing), and is
    /// not asked again for that subject for [`REFERRERS_RETRY_AFTER`]: the listing never fails
    /// or stalls for it. `None` for repositories that are not proxied.
    pub(crate) async fn referrers(
        &self,
        name: &Name,
        subject: &Digest,
        cached: Vec<serde_json::Value>,
    ) -> Option<Vec<serde_json::Value>> {
        let (routed, remote) = self.route(name)?;
        let ttl = routed.rule.tag_ttl;
        let mut merged = cached;
        for (index, (u, client)) in routed.upstreams().enumerate() {
            let key = (name.as_str().to_owned(), subject.clone(), index);
            let last = self.listed.lock().unwrap().get(&key).cloned();
            let listed = match last {
                Some(l) if l.fresh(ttl) => l.manifests.unwrap_or_default(),
                last => {
                    let stale = last.and_then(|l| l.manifests);
                    let entry = match self.ask_referrers(u, client, &remote, subject).await {
                        Ok(list) => Listed {
                            asked: Instant::now(),
                            failed: false,
                            manifests: Some(list),
                        },
                        Err(e) => {
                            tracing::warn!(repository = %name, %subject, upstream = %u, error = %e, "upstream referrers unavailable; listing the cached ones");
                            Listed {
                                asked: Instant::now(),
                                failed: true,
                                manifests: stale,
                            }
                        }
                    };
                    let list = entry.manifests.clone().unwrap_or_default();
                    self.remember_listed(key, entry);
                    list
                }
            };
            for v in listed {
                let digest = v.get("digest").and_then(|d| d.as_str());
                let known = merged
                    .iter()
                    .any(|m| m.get("digest").and_then(|d| d.as_str()) == digest);
                if !known {
                    merged.push(v);
                }
            }
        }
        Some(merged)
    }

    /// What upstream `u` lists as referrers of `subject` in `remote`, within
    /// [`REFERRERS_TIMEOUT`].
    async fn ask_referrers(
        &self,
        u: &Upstream,
        client: &Result<Client, String>,
        remote: &str,
        subject: &Digest,
    ) -> Result<Vec<serde_json::Value>, String> {
        let c = client.as_ref().map_err(Clone::clone)?;
        let r = u.reference(remote, subject.as_str())?;
        let list = tokio::time::timeout(REFERRERS_TIMEOUT, c.referrers(&r, subject))
            .await
            .map_err(|_| format!("no answer within {REFERRERS_TIMEOUT:?}"))?
            .map_err(|e| error_chain(&e))?;
        Ok(list
            .manifests
            .iter()
            .filter_map(|m| serde_json::to_value(m).ok())
            .collect())
    }

    /// Keeps an upstream's referrers answer, dropping the oldest when [`REFERRERS_CACHED`]
    /// are kept.
    fn remember_listed(&self, key: (String, Digest, usize), entry: Listed) {
        let mut listed = self.listed.lock().unwrap();
        if listed.len() >= REFERRERS_CACHED
            && !listed.contains_key(&key)
            && let Some(oldest) = listed
                .iter()
                .min_by_key(|(_, l)| l.asked)
                .map(|(k, _)| k.clone())
        {
            listed.remove(&oldest);
        }
        listed.insert(key, entry);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::proxy::tests::rule;

    #[test]
    fn kept_referrers_answers_are_bounded() {
        let p = Proxy::new(vec![rule("c", &["http://127.0.0.1:5000"])]).unwrap();
        let at = Instant::now();
        for i in 0..REFERRERS_CACHED + 10 {
            let d = Digest::parse(&format!("sha256:{i:064x}")).unwrap();
            p.remember_listed(
                ("c/a".to_owned(), d, 0),
                Listed {
                    asked: at + Duration::from_millis(i as u64),
                    failed: false,
                    manifests: Some(Vec::new()),
                },
            );
        }
        let listed = p.listed.lock().unwrap();
        assert_eq!(listed.len(), REFERRERS_CACHED);
        // The oldest went first.
        let first = Digest::parse(&format!("sha256:{:064x}", 0)).unwrap();
        assert!(!listed.contains_key(&("c/a".to_owned(), first, 0)));
    }
}
