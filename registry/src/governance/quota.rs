//! `[[quota]]`: per-repository limits on bytes and manifests, counted on the unique content of
//! each repository (a layer two of its manifests share counts once; the same layer in another
//! repository counts there too).
//!
//! # The usage document
//!
//! Each repository a quota rule matches has one usage document
//! ([`layout::repository_usage`]): every manifest the repository holds, with its own size and
//! the size of each blob it references, and the totals derived from them. A manifest PUT
//! reserves its manifest in that document with a conditional write *before* the manifest is
//! linked, and therefore before the PUT is acknowledged; the limit is checked inside the
//! write, so when replicas race, each retry sees the others' reservations and the sum never
//! passes the limit. Pushing a manifest the document already holds changes nothing and is
//! always allowed (also after a limit was lowered). A PUT refused for quota answers `DENIED`
//! (403) and writes nothing but the manifest's bytes, which garbage collection reclaims.
//!
//! # Staying correct
//!
//! - Deletes: [`crate::repo::Repos::delete_manifest`] (the DELETE handler, retention and
//!   garbage collection all remove manifests through it) drops the manifest's entry before
//!   it unlinks it, so a crash in between can over-count, never under-count.
//! - Garbage collection deletes untagged manifests through the same call; blobs it reclaims
//!   were no longer referenced by any counted manifest, so they were not counted.
//! - A reservation whose PUT failed later leaves an entry without a link (over-counting). A
//!   reservation about to be refused drops such entries older than [`PENDING_GRACE`] first
//!   ([`prune_failed`], at most once a minute per repository), so failed PUTs cannot hold a
//!   repository at its limit. [`recount`] (`rdctl registry usage --recount`) rebuilds the
//!   whole document from the manifest links in the store, keeping unlinked entries younger
//!   than [`PENDING_GRACE`] (PUTs still running) and dropping older ones.
//! - A repository that gains a quota rule has no document yet: its first reservation counts
//!   what the store holds first (one listing of the repository, once).

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use validator::{Digest, Name};

use super::{RuleError, list_globs, parse_repositories};
use crate::auth::acl::Pattern;
use crate::errors::{ApiError, ApiResult, Code};
use crate::repo::Repos;
use crate::storage::layout::{self, RepoPart};

/// Unlinked entries younger than this are reservations of PUTs still running; a recount keeps
/// them.
pub const PENDING_GRACE: Duration = Duration::from_secs(600);
/// Least time between two [`prune_failed`] runs of one repository.
const PRUNE_EVERY: Duration = Duration::from_secs(60);
/// Largest usage document read.
const USAGE_LIMIT: u64 = 64 << 20;

/// One `[[quota]]` entry as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileQuota {
    repositories: Vec<String>,
    /// `"10GiB"` or a whole number of bytes; `max_bytes` is the older name.
    #[serde(alias = "max_bytes")]
    max_size: Option<config_toml::ByteSize>,
    max_manifests: Option<u64>,
}

/// Each repository matching `repositories` may hold at most `max_bytes` of unique content and
/// `max_manifests` manifests (either may be absent: no limit, usage still counted).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QuotaRule {
    /// Position in the file (`quota[0]` is the first).
    pub index: usize,
    /// Repository globs.
    pub repositories: Vec<Pattern>,
    /// Byte limit per repository.
    pub max_bytes: Option<u64>,
    /// Manifest limit per repository.
    pub max_manifests: Option<u64>,
}

impl QuotaRule {
    pub(crate) fn from_file(index: usize, f: FileQuota) -> Result<QuotaRule, RuleError> {
        Ok(QuotaRule {
            index,
            repositories: parse_repositories("quota", index, f.repositories)?,
            max_bytes: f.max_size.map(u64::from),
            max_manifests: f.max_manifests,
        })
    }
}

impl fmt::Display for QuotaRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "quota[{}] (repositories {})",
            self.index,
            list_globs(self.repositories.iter().map(Pattern::as_str))
        )
    }
}

/// A repository's usage and its limits.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Usage {
    /// The repository.
    pub repository: String,
    /// Bytes of unique content (manifests, configs, layers).
    pub bytes: u64,
    /// Manifests.
    pub manifests: u64,
    /// The byte limit, if any.
    pub max_bytes: Option<u64>,
    /// The manifest limit, if any.
    pub max_manifests: Option<u64>,
    /// The rule (`quota[0]`), if one matches.
    pub rule: Option<String>,
    /// Whether the numbers come from the usage document (false: counted from the store).
    pub tracked: bool,
}

/// One manifest in the usage document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Entry {
    size: u64,
    /// Referenced blobs and their sizes.
    #[serde(default)]
    blobs: BTreeMap<String, u64>,
    /// When it was reserved (Unix seconds).
    at: u64,
    /// The epoch of the manifest link it was recorded with (`""`: the legacy key); garbage
    /// collection forgets it only with that link.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    epoch: String,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct UsageDoc {
    bytes: u64,
    manifests: u64,
    entries: BTreeMap<String, Entry>,
    /// When a refused reservation last dropped the reservations of failed PUTs (Unix seconds;
    /// see [`prune_failed`]).
    #[serde(default)]
    pruned: u64,
}

impl UsageDoc {
    /// Totals over unique digests.
    fn totals(&self) -> (u64, u64) {
        let mut unique: BTreeMap<&str, u64> = BTreeMap::new();
        for (d, e) in &self.entries {
            unique.insert(d, e.size);
            for (b, s) in &e.blobs {
                unique.insert(b, *s);
            }
        }
        let bytes = unique.values().fold(0u64, |a, s| a.saturating_add(*s));
        (bytes, self.entries.len() as u64)
    }

    fn refresh(&mut self) {
        (self.bytes, self.manifests) = self.totals();
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Reserves manifest `d` (`size` bytes, referencing `blobs`, which the repository links) in
/// the usage of `name` under `rule`; `DENIED` when that would pass a limit. Call after the
/// references were checked and before the manifest is linked.
pub(crate) async fn reserve(
    repos: &Repos,
    metrics: &QuotaMetrics,
    name: &Name,
    rule: &QuotaRule,
    d: &Digest,
    (size, epoch): (u64, &str),
    blobs: &[Digest],
) -> ApiResult<()> {
    let key = layout::repository_usage(name);
    if repos
        .store()
        .stat(&key)
        .await
        .is_err_and(|e| e.is_not_found())
    {
        recount(repos, name).await?;
    }
    let mut entry = Entry {
        size,
        blobs: BTreeMap::new(),
        at: now_secs(),
        epoch: epoch.to_owned(),
    };
    for b in blobs {
        let s = repos.blob_linked(name, b).await?.ok_or_else(|| {
            ApiError::new(
                Code::ManifestBlobUnknown,
                format!("blob {b} is not in {name}"),
            )
        })?;
        entry.blobs.insert(b.to_string(), s);
    }
    let mut pruned_now = false;
    loop {
        let (doc, refused) = reserve_entry(repos, (name, rule, &key), d, &entry).await?;
        let Some(msg) = refused else {
            metrics.observe(name.as_str(), rule, doc.bytes, doc.manifests);
            return Ok(());
        };
        // At the limit: reservations of PUTs that failed after reserving may be what fills it.
        // A prune that fails leaves the refusal as it was.
        if !pruned_now && now_secs().saturating_sub(doc.pruned) >= PRUNE_EVERY.as_secs() {
            pruned_now = true;
            match prune_failed(repos, name, &key).await {
                Ok(0) => {}
                Ok(_) => continue,
                Err(e) => {
                    tracing::warn!(repository = %name, error = %e, "could not drop the quota reservations of failed PUTs");
                }
            }
        }
        metrics.denied.fetch_add(1, Ordering::Relaxed);
        tracing::info!(repository = %name, digest = %d, "{msg}");
        return Err(ApiError::new(Code::Denied, msg).with_reason());
    }
}

/// One try at [`reserve`]'s conditional write: the document as written (or as read, when
/// nothing changed) and the refusal, if the entry would pass a limit.
async fn reserve_entry(
    repos: &Repos,
    (name, rule, key): (&Name, &QuotaRule, &crate::storage::Key),
    d: &Digest,
    entry: &Entry,
) -> ApiResult<(UsageDoc, Option<String>)> {
    let mut refused = None;
    let doc = repos
        .update::<UsageDoc, _>(key, |u| {
            refused = None;
            // Pushed again: the entry stays, recorded with the link just written, and marked
            // as reserved now when it was not for a while (so [`prune_failed`] leaves it).
            if let Some(e) = u.entries.get_mut(d.as_str()) {
                let stale = entry.at.saturating_sub(e.at) >= PENDING_GRACE.as_secs() / 2;
                if e.epoch == entry.epoch && !stale {
                    return false;
                }
                e.epoch.clone_from(&entry.epoch);
                e.at = e.at.max(entry.at);
                return true;
            }
            u.entries.insert(d.to_string(), entry.clone());
            let (bytes, manifests) = u.totals();
            let over = [
                (rule.max_bytes, bytes, "bytes"),
                (rule.max_manifests, manifests, "manifests"),
            ]
            .into_iter()
            .find(|(max, n, _)| max.is_some_and(|m| *n > m));
            if let Some((max, n, what)) = over {
                u.entries.remove(d.as_str());
                refused = Some(format!(
                    "quota exceeded for {name}: pushing {d} would make {n} {what}, over the limit of {} set by {rule} (now {} bytes in {} manifests)",
                    max.unwrap_or_default(),
                    u.bytes,
                    u.manifests,
                ));
                return false;
            }
            u.refresh();
            true
        })
        .await?;
    Ok((doc, refused))
}

/// Drops from the usage of `name` the entries of manifests the repository does not link at
/// any epoch and that nobody reserved for [`PENDING_GRACE`]: reservations of PUTs that failed
/// after reserving (a store error writing the link, a replica stopped). Run by a reservation
/// about to be refused, at most once per [`PRUNE_EVERY`] per repository, so a failed PUT
/// cannot keep a repository at its limit; one listing of the repository's manifest links. A
/// PUT of a manifest whose entry is older than half the grace marks it again before linking,
/// so an entry that is old here has no PUT still on its way. Returns how many went.
async fn prune_failed(repos: &Repos, name: &Name, key: &crate::storage::Key) -> ApiResult<usize> {
    let linked: std::collections::BTreeSet<String> = repos
        .store()
        .list(&layout::manifest_links(name))
        .await?
        .iter()
        .filter_map(|k| match layout::parse_repo_key(k) {
            Some((n, RepoPart::ManifestLink(d, _))) if &n == name => Some(d.to_string()),
            _ => None,
        })
        .collect();
    let now = now_secs();
    let mut dropped = 0;
    repos
        .update::<UsageDoc, _>(key, |u| {
            let before = u.entries.len();
            u.entries.retain(|d, e| {
                linked.contains(d) || now.saturating_sub(e.at) < PENDING_GRACE.as_secs()
            });
            dropped = before - u.entries.len();
            u.pruned = now;
            u.refresh();
            true
        })
        .await?;
    if dropped > 0 {
        tracing::info!(repository = %name, dropped, "dropped the quota reservations of failed manifest PUTs");
    }
    Ok(dropped)
}

/// Quota usage's part in manifest deletes: the manifest's entry leaves the usage document
/// ([`forget`]).
pub(crate) struct QuotaHook;

impl crate::repo::hooks::RepoHook for QuotaHook {
    fn name(&self) -> &'static str {
        "quota usage"
    }

    fn on_delete<'a>(
        &'a self,
        repos: &'a Repos,
        name: &'a Name,
        d: &'a Digest,
        leaving: crate::repo::hooks::Leaving<'a>,
    ) -> crate::storage::BoxFuture<'a, ApiResult<()>> {
        Box::pin(forget(repos, name, d, Some(leaving.epoch())))
    }
}

/// Drops manifest `d` from the usage of `name` (nothing when the repository has no usage
/// document or the manifest is not in it); with `epoch`, only an entry recorded with the link
/// of that epoch (garbage collection: see [`crate::repo::hooks::RepoHook::on_delete`]).
pub(crate) async fn forget(
    repos: &Repos,
    name: &Name,
    d: &Digest,
    epoch: Option<&str>,
) -> ApiResult<()> {
    repos
        .update::<UsageDoc, _>(&layout::repository_usage(name), |u| {
            let Some(entry) = u.entries.get(d.as_str()) else {
                return false;
            };
            if epoch.is_some_and(|e| e != entry.epoch) {
                return false;
            }
            u.entries.remove(d.as_str());
            u.refresh();
            true
        })
        .await?;
    Ok(())
}

/// Counts what the store holds for `name`: one entry per linked manifest, with the blobs its
/// config and layers reference that the repository links.
async fn count(repos: &Repos, name: &Name) -> ApiResult<BTreeMap<String, Entry>> {
    let mut out = BTreeMap::new();
    let keys = repos.store().list(&layout::repository(name)).await?;
    for k in keys {
        let Some((n, RepoPart::ManifestLink(d, _))) = layout::parse_repo_key(&k) else {
            continue;
        };
        // A link at two epochs (a collector's DELETE of the old one still to come) is one
        // manifest.
        if &n != name || out.contains_key(d.as_str()) {
            continue;
        }
        let Some(link) = repos.manifest_link(name, &d).await? else {
            continue;
        };
        let mut blobs = BTreeMap::new();
        let bytes =
            match crate::tombstone::get_data(repos.store().as_ref(), &d, link.size.max(4 << 20))
                .await
            {
                Ok(doc) => doc.bytes,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            };
        if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&bytes) {
            let config = v.get("config").into_iter();
            let layers = v
                .get("layers")
                .and_then(|l| l.as_array())
                .into_iter()
                .flatten();
            for desc in config.chain(layers) {
                let Some(b) = desc
                    .get("digest")
                    .and_then(|s| s.as_str())
                    .and_then(|s| Digest::parse(s).ok())
                else {
                    continue;
                };
                if let Some(size) = repos.blob_linked(name, &b).await? {
                    blobs.insert(b.to_string(), size);
                }
            }
        }
        out.insert(
            d.to_string(),
            Entry {
                size: link.size,
                blobs,
                at: 0,
                epoch: repos.manifest_link_epoch(name, &d).await?,
            },
        );
    }
    Ok(out)
}

/// Rebuilds the usage document of `name` from the store (see the module docs) and returns the
/// totals.
pub(crate) async fn recount(repos: &Repos, name: &Name) -> ApiResult<(u64, u64)> {
    let counted = count(repos, name).await?;
    let now = now_secs();
    let doc = repos
        .update::<UsageDoc, _>(&layout::repository_usage(name), |u| {
            let pending: Vec<(String, Entry)> = u
                .entries
                .iter()
                .filter(|(d, e)| {
                    !counted.contains_key(*d) && now.saturating_sub(e.at) < PENDING_GRACE.as_secs()
                })
                .map(|(d, e)| (d.clone(), e.clone()))
                .collect();
            let mut entries = counted.clone();
            entries.extend(pending);
            // Written even when unchanged, so a repository without a document gets one.
            u.entries = entries;
            u.refresh();
            true
        })
        .await?;
    Ok((doc.bytes, doc.manifests))
}

/// The usage of every repository in the catalog: from its usage document when it has one
/// (rebuilt first with `recount`), otherwise counted from the store without writing anything.
pub async fn report(
    store: std::sync::Arc<dyn crate::storage::Store>,
    governance: &super::Governance,
    recount_docs: bool,
) -> ApiResult<Vec<Usage>> {
    let repos = Repos::new(store);
    let mut out = Vec::new();
    for repo in repos.catalog().await? {
        let Ok(name) = Name::parse(&repo) else {
            continue;
        };
        let rule = governance.quota_rule(&repo);
        let stored: Option<UsageDoc> = repos
            .read(&layout::repository_usage(&name), USAGE_LIMIT)
            .await?;
        let ((bytes, manifests), tracked) = match (stored, rule.is_some() && recount_docs) {
            (_, true) => (recount(&repos, &name).await?, true),
            (Some(doc), false) => ((doc.bytes, doc.manifests), true),
            (None, false) => {
                let mut doc = UsageDoc {
                    entries: count(&repos, &name).await?,
                    ..UsageDoc::default()
                };
                doc.refresh();
                ((doc.bytes, doc.manifests), false)
            }
        };
        out.push(Usage {
            repository: repo,
            bytes,
            manifests,
            max_bytes: rule.and_then(|r| r.max_bytes),
            max_manifests: rule.and_then(|r| r.max_manifests),
            rule: rule.map(|r| format!("quota[{}]", r.index)),
            tracked,
        });
    }
    Ok(out)
}

/// Bytes, manifests and the two limits of one repository.
type Seen = (u64, u64, Option<u64>, Option<u64>);

/// Quota metrics: the last usage this replica saw per repository, and refusals.
#[derive(Debug, Default)]
pub struct QuotaMetrics {
    usage: Mutex<BTreeMap<String, Seen>>,
    denied: AtomicU64,
}

impl QuotaMetrics {
    fn observe(&self, repository: &str, rule: &QuotaRule, bytes: u64, manifests: u64) {
        self.usage.lock().expect("metrics lock").insert(
            repository.to_owned(),
            (bytes, manifests, rule.max_bytes, rule.max_manifests),
        );
    }
}

impl crate::metrics::MetricSource for QuotaMetrics {
    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let usage = self.usage.lock().expect("metrics lock");
        out.push_str("# TYPE registry_quota_usage_bytes gauge\n");
        for (r, (b, ..)) in usage.iter() {
            let _ = writeln!(out, "registry_quota_usage_bytes{{repository=\"{r}\"}} {b}");
        }
        out.push_str("# TYPE registry_quota_usage_manifests gauge\n");
        for (r, (_, m, ..)) in usage.iter() {
            let _ = writeln!(
                out,
                "registry_quota_usage_manifests{{repository=\"{r}\"}} {m}"
            );
        }
        out.push_str("# TYPE registry_quota_limit_bytes gauge\n");
        for (r, (_, _, max, _)) in usage.iter() {
            if let Some(max) = max {
                let _ = writeln!(
                    out,
                    "registry_quota_limit_bytes{{repository=\"{r}\"}} {max}"
                );
            }
        }
        out.push_str("# TYPE registry_quota_limit_manifests gauge\n");
        for (r, (.., max)) in usage.iter() {
            if let Some(max) = max {
                let _ = writeln!(
                    out,
                    "registry_quota_limit_manifests{{repository=\"{r}\"}} {max}"
                );
            }
        }
        let _ = writeln!(
            out,
            "# TYPE registry_quota_denied_total counter\nregistry_quota_denied_total {}",
            self.denied.load(Ordering::Relaxed)
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_count_unique_content() {
        let e = |size, blobs: &[(&str, u64)]| Entry {
            size,
            blobs: blobs.iter().map(|(d, s)| (d.to_string(), *s)).collect(),
            at: 0,
            epoch: String::new(),
        };
        let mut doc = UsageDoc::default();
        doc.entries
            .insert("m1".into(), e(10, &[("c1", 5), ("l", 100)]));
        doc.entries
            .insert("m2".into(), e(20, &[("c2", 6), ("l", 100)]));
        doc.refresh();
        assert_eq!((doc.bytes, doc.manifests), (10 + 20 + 5 + 6 + 100, 2));
    }
}
