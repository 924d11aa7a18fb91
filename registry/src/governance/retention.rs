//! `[[retention]]` policies: which tags (and the manifests only they kept) go.
//!
//! # What one policy decides
//!
//! A policy applies to the repositories its globs match. For each tag there, it *keeps* the
//! tag when any of these holds, and otherwise *removes* it:
//!
//! 1. the tag matches `keep_tags`;
//! 2. the tag is among the `keep_newest` newest tags of the repository (newest by the time its
//!    manifest was last pushed; ties by tag name);
//! 3. the manifest was pulled within `keep_pulled_within`;
//! 4. with `keep_referenced` (the default), a signature, SBOM or other referrer refers to the
//!    manifest;
//! 5. with `older_than`, the manifest was pushed more recently than that.
//!
//! # How policies combine (precedence)
//!
//! - An `[[immutable]]` rule covering the tag keeps it, whatever the policies say.
//! - Keeping wins: a tag goes only when *every* policy matching its repository removes it, so
//!   no policy ever deletes a tag (or the only tag of a manifest) that another policy keeps.
//!   The order of the `[[retention]]` entries therefore does not matter.
//! - A repository no policy matches is never touched.
//!
//! # What a run does
//!
//! [`plan`] reads the tag index, manifest push times, referrers and recorded pull times, and
//! lists each tag that goes with the reasons of every policy, and each manifest that loses its
//! last tag. `rdctl registry retention --dry-run` prints that plan. [`apply`] then removes each
//! tag only if it still points at the planned digest (a conditional write of the tag index),
//! and deletes each planned manifest still untagged, not re-pushed since the plan and not a
//! child of an index that keeps a tag. The removed manifests' blobs are then unreferenced and
//! the next garbage collection reclaims them. The server runs retention right before each
//! scheduled collection (`gc.interval`).
//!
//! # Pull times
//!
//! A manifest GET (not a HEAD, which tools use to check a digest) records its digest in memory ([`PullRecorder`]); every
//! `pulls.flush_interval` each replica merges what it saw into one document per repository
//! (the later time wins, in a conditional write), so a pull costs no store write. Pulls a
//! replica saw but has not flushed yet are not visible to a retention run elsewhere: keep
//! `keep_pulled_within` much longer than the flush interval.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::sync::Mutex;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use config_toml::HumanDuration;
use serde::{Deserialize, Serialize};
use validator::{Digest, Name, Tag};

use super::{
    Governance, RuleError, TagPattern, list_globs, matches_any, parse_repositories, parse_tags,
};
use crate::auth::acl::Pattern;
use crate::errors::ApiResult;
use crate::repo::Repos;
use crate::storage::layout;

/// Largest pull-time document read.
const PULLS_LIMIT: u64 = 64 << 20;
/// Largest index manifest read when looking for the children a kept index needs.
const INDEX_READ_LIMIT: u64 = 4 << 20;

/// One `[[retention]]` entry as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileRetention {
    repositories: Vec<String>,
    keep_newest: Option<usize>,
    #[serde(default)]
    keep_tags: Vec<String>,
    older_than: Option<HumanDuration>,
    keep_pulled_within: Option<HumanDuration>,
    keep_referenced: Option<bool>,
}

/// One retention policy (see the module docs for what it keeps).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RetentionRule {
    /// Position in the file (`retention[0]` is the first).
    pub index: usize,
    /// Repository globs.
    pub repositories: Vec<Pattern>,
    /// Keep this many newest tags.
    pub keep_newest: Option<usize>,
    /// Keep tags matching these globs.
    pub keep_tags: Vec<TagPattern>,
    /// Only tags whose manifest was pushed longer ago than this may go.
    pub older_than: Option<Duration>,
    /// Keep tags whose manifest was pulled within this long.
    pub keep_pulled_within: Option<Duration>,
    /// Keep tags of manifests a referrer (signature, SBOM) refers to (default true).
    pub keep_referenced: bool,
}

impl RetentionRule {
    pub(crate) fn from_file(index: usize, f: FileRetention) -> Result<RetentionRule, RuleError> {
        let rule = RetentionRule {
            index,
            repositories: parse_repositories("retention", index, f.repositories)?,
            keep_newest: f.keep_newest,
            keep_tags: parse_tags("retention", index, "keep_tags", f.keep_tags)?,
            older_than: f.older_than.map(Duration::from),
            keep_pulled_within: f.keep_pulled_within.map(Duration::from),
            keep_referenced: f.keep_referenced.unwrap_or(true),
        };
        if rule.keep_newest.is_none()
            && rule.older_than.is_none()
            && rule.keep_pulled_within.is_none()
        {
            return Err(RuleError::new(
                format!("retention[{index}]"),
                "set at least one of keep_newest, older_than, keep_pulled_within (a policy with none would remove every tag not matching keep_tags)",
            ));
        }
        Ok(rule)
    }

    /// Why this policy removes a tag, or `None` when it keeps it.
    fn removes(&self, t: &TagFacts, rank: usize, now: SystemTime) -> Option<String> {
        if self.keep_tags.iter().any(|p| p.matches(&t.tag)) {
            return None;
        }
        if self.keep_newest.is_some_and(|n| rank < n) {
            return None;
        }
        if let (Some(w), Some(p)) = (self.keep_pulled_within, t.pulled)
            && now.duration_since(p).unwrap_or_default() < w
        {
            return None;
        }
        if self.keep_referenced && t.referenced {
            return None;
        }
        let age = now.duration_since(t.pushed).unwrap_or_default();
        if self.older_than.is_some_and(|o| age <= o) {
            return None;
        }
        let mut why = vec![format!("pushed {}s ago", age.as_secs())];
        if let Some(o) = self.older_than {
            why.push(format!("older than {}s", o.as_secs()));
        }
        if let Some(n) = self.keep_newest {
            why.push(format!("not among the newest {n} (rank {})", rank + 1));
        }
        if let Some(w) = self.keep_pulled_within {
            why.push(match t.pulled {
                Some(p) => format!(
                    "last pulled {}s ago, not within {}s",
                    now.duration_since(p).unwrap_or_default().as_secs(),
                    w.as_secs()
                ),
                None => format!("not pulled within {}s", w.as_secs()),
            });
        }
        Some(format!("retention[{}]: {}", self.index, why.join(", ")))
    }
}

impl fmt::Display for RetentionRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "retention[{}] (repositories {})",
            self.index,
            list_globs(self.repositories.iter().map(Pattern::as_str))
        )
    }
}

/// A tag a run removes (or, in a dry run, would).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct TagRemoval {
    /// The repository.
    pub repository: String,
    /// The tag.
    pub tag: String,
    /// The digest it pointed at when planned.
    pub digest: Digest,
    /// Why: the reason of every matching policy.
    pub reason: String,
}

/// A manifest that loses its last tag and is deleted with it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct ManifestRemoval {
    /// The repository.
    pub repository: String,
    /// The manifest.
    pub digest: Digest,
}

/// What a retention run removes (or would).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct RetentionPlan {
    /// True when nothing was removed on purpose.
    pub dry_run: bool,
    /// Repositories a policy matched.
    pub repositories: usize,
    /// Tags looked at in those repositories.
    pub tags_seen: usize,
    /// Tags removed.
    pub tags: Vec<TagRemoval>,
    /// Manifests deleted.
    pub manifests: Vec<ManifestRemoval>,
    /// Planned removals skipped because the repository changed since the plan (a tag moved,
    /// a manifest re-pushed or tagged again).
    pub skipped: usize,
}

/// What retention knows about one tag.
struct TagFacts {
    tag: String,
    digest: Digest,
    pushed: SystemTime,
    pulled: Option<SystemTime>,
    referenced: bool,
}

#[derive(Debug, Default, Serialize, Deserialize)]
struct PullsDoc {
    /// Manifest digest → last pull (Unix seconds).
    pulls: BTreeMap<String, u64>,
}

fn unix(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// Lists what the policies remove, changing nothing.
pub(crate) async fn plan(repos: &Repos, governance: &Governance) -> ApiResult<RetentionPlan> {
    let now = SystemTime::now();
    let mut out = RetentionPlan {
        dry_run: true,
        ..RetentionPlan::default()
    };
    for repo in repos.catalog().await? {
        let rules: Vec<&RetentionRule> = governance
            .retention
            .iter()
            .filter(|r| matches_any(&r.repositories, &repo))
            .collect();
        let Ok(name) = Name::parse(&repo) else {
            continue;
        };
        if rules.is_empty() {
            continue;
        }
        out.repositories += 1;
        plan_repository(repos, governance, &name, &rules, now, &mut out).await?;
    }
    out.tags.sort();
    out.manifests.sort();
    Ok(out)
}

async fn plan_repository(
    repos: &Repos,
    governance: &Governance,
    name: &Name,
    rules: &[&RetentionRule],
    now: SystemTime,
    out: &mut RetentionPlan,
) -> ApiResult<()> {
    let tags = repos.tag_map(name).await?;
    out.tags_seen += tags.len();
    let pulls: PullsDoc = repos
        .read(&layout::repository_pulls(name), PULLS_LIMIT)
        .await?
        .unwrap_or_default();
    let mut pushed: BTreeMap<Digest, SystemTime> = BTreeMap::new();
    let mut referenced: BTreeMap<Digest, bool> = BTreeMap::new();
    for (_, d) in &tags {
        if pushed.contains_key(d) {
            continue;
        }
        // A tag without a link is a leftover; treat it as pushed now (never removed for age).
        let t = repos.manifest_link_written(name, d).await?.unwrap_or(now);
        pushed.insert(d.clone(), t);
        referenced.insert(d.clone(), !repos.referrers(name, d).await?.is_empty());
    }
    let mut facts: Vec<TagFacts> = tags
        .into_iter()
        .map(|(tag, digest)| TagFacts {
            pushed: pushed[&digest],
            referenced: referenced[&digest],
            pulled: pulls
                .pulls
                .get(digest.as_str())
                .map(|s| UNIX_EPOCH + Duration::from_secs(*s)),
            tag,
            digest,
        })
        .collect();
    // Newest first; ties by tag name, so the ranking is the same on every run.
    facts.sort_by(|a, b| b.pushed.cmp(&a.pushed).then_with(|| a.tag.cmp(&b.tag)));
    let mut kept_digests = BTreeSet::new();
    let mut removed = Vec::new();
    for (rank, t) in facts.iter().enumerate() {
        let immutable = governance.immutable_rule(name.as_str(), &t.tag).is_some();
        let reasons: Option<Vec<String>> = if immutable {
            None
        } else {
            rules.iter().map(|r| r.removes(t, rank, now)).collect()
        };
        match reasons {
            Some(reasons) => removed.push((t, reasons.join("; "))),
            None => {
                kept_digests.insert(t.digest.clone());
            }
        }
    }
    let mut losing = BTreeSet::new();
    for (t, reason) in removed {
        out.tags.push(TagRemoval {
            repository: name.to_string(),
            tag: t.tag.clone(),
            digest: t.digest.clone(),
            reason,
        });
        if !kept_digests.contains(&t.digest) {
            losing.insert(t.digest.clone());
        }
    }
    if losing.is_empty() {
        return Ok(());
    }
    let children = children_of(repos, name, &kept_digests).await?;
    for d in losing {
        if !children.contains(&d) {
            out.manifests.push(ManifestRemoval {
                repository: name.to_string(),
                digest: d,
            });
        }
    }
    Ok(())
}

/// The manifests the indexes among `kept` list.
async fn children_of(
    repos: &Repos,
    name: &Name,
    kept: &BTreeSet<Digest>,
) -> ApiResult<BTreeSet<Digest>> {
    let mut out = BTreeSet::new();
    for d in kept {
        let Some(link) = repos.manifest_link(name, d).await? else {
            continue;
        };
        if !link.media_type.contains("index") && !link.media_type.contains("list") {
            continue;
        }
        let bytes = repos
            .manifest_bytes(d, INDEX_READ_LIMIT.max(link.size))
            .await?;
        let v: serde_json::Value = serde_json::from_slice(&bytes).unwrap_or_default();
        for m in v
            .get("manifests")
            .and_then(|m| m.as_array())
            .into_iter()
            .flatten()
        {
            if let Some(c) = m
                .get("digest")
                .and_then(|s| s.as_str())
                .and_then(|s| Digest::parse(s).ok())
            {
                out.insert(c);
            }
        }
    }
    Ok(out)
}

/// Carries out `plan` (see the module docs for the checks that make it safe against pushes
/// that happened since). Returns what was removed, with the same entries as the plan minus
/// those skipped.
pub(crate) async fn apply(repos: &Repos, plan: RetentionPlan) -> ApiResult<RetentionPlan> {
    let planned_at = SystemTime::now();
    let mut out = RetentionPlan {
        dry_run: false,
        repositories: plan.repositories,
        tags_seen: plan.tags_seen,
        ..RetentionPlan::default()
    };
    for r in plan.tags {
        let (Ok(name), Ok(tag)) = (Name::parse(&r.repository), Tag::parse(&r.tag)) else {
            continue;
        };
        if repos.delete_tag_if(&name, &tag, &r.digest).await? {
            tracing::info!(repository = %name, tag = %tag, digest = %r.digest, reason = %r.reason, "retention removed a tag");
            out.tags.push(r);
        } else {
            out.skipped += 1;
        }
    }
    for m in plan.manifests {
        let Ok(name) = Name::parse(&m.repository) else {
            continue;
        };
        let still_tagged = repos
            .tag_map(&name)
            .await?
            .iter()
            .any(|(_, d)| *d == m.digest);
        let repushed = match repos.manifest_link_written(&name, &m.digest).await? {
            Some(written) => written > planned_at,
            None => {
                out.skipped += 1;
                continue;
            }
        };
        if still_tagged || repushed {
            out.skipped += 1;
            continue;
        }
        if repos.delete_manifest(&name, &m.digest).await? {
            tracing::info!(repository = %name, digest = %m.digest, "retention deleted a manifest that lost its last tag");
            out.manifests.push(m);
        } else {
            out.skipped += 1;
        }
    }
    Ok(out)
}

/// Pull times seen by this replica and not yet written to the store.
#[derive(Debug, Default)]
pub struct PullRecorder {
    pending: Mutex<BTreeMap<Name, BTreeMap<String, u64>>>,
}

impl PullRecorder {
    /// Notes a pull of manifest `d` from `name` now (memory only).
    pub(crate) fn record(&self, name: &Name, d: &Digest) {
        let now = unix(SystemTime::now());
        self.pending
            .lock()
            .expect("pull recorder lock")
            .entry(name.clone())
            .or_default()
            .insert(d.to_string(), now);
    }

    /// Merges the pending pull times into each repository's document (one conditional write
    /// per repository); returns how many repositories were written. Times that could not be
    /// written are kept for the next flush.
    pub(crate) async fn flush(&self, repos: &Repos) -> ApiResult<usize> {
        let pending = std::mem::take(&mut *self.pending.lock().expect("pull recorder lock"));
        let mut written = 0;
        let mut failed: Option<crate::errors::ApiError> = None;
        for (name, times) in pending {
            let r = repos
                .update::<PullsDoc, _>(&layout::repository_pulls(&name), |doc| {
                    let mut changed = false;
                    for (d, t) in &times {
                        let e = doc.pulls.entry(d.clone()).or_default();
                        if *e < *t {
                            *e = *t;
                            changed = true;
                        }
                    }
                    changed
                })
                .await;
            match r {
                Ok(_) => written += 1,
                Err(e) => {
                    let mut p = self.pending.lock().expect("pull recorder lock");
                    let slot = p.entry(name).or_default();
                    for (d, t) in times {
                        let e = slot.entry(d).or_default();
                        *e = (*e).max(t);
                    }
                    failed.get_or_insert(e);
                }
            }
        }
        match failed {
            Some(e) => Err(e),
            None => Ok(written),
        }
    }
}

/// Retention totals of this process: runs, tags and manifests removed.
#[derive(Debug, Default)]
pub struct RetentionMetrics(std::sync::Mutex<(u64, u64, u64)>);

impl RetentionMetrics {
    /// Records a finished retention run (`None`: it failed).
    pub fn run(&self, plan: Option<&RetentionPlan>) {
        let mut r = self.0.lock().expect("metrics lock");
        r.0 += 1;
        if let Some(p) = plan.filter(|p| !p.dry_run) {
            r.1 += p.tags.len() as u64;
            r.2 += p.manifests.len() as u64;
        }
    }
}

impl crate::metrics::MetricSource for RetentionMetrics {
    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let r = self.0.lock().expect("metrics lock");
        let _ = writeln!(
            out,
            "# TYPE registry_retention_runs_total counter\nregistry_retention_runs_total {}\n# TYPE registry_retention_removed_total counter\nregistry_retention_removed_total{{kind=\"tag\"}} {}\nregistry_retention_removed_total{{kind=\"manifest\"}} {}",
            r.0, r.1, r.2
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(f: FileRetention) -> RetentionRule {
        RetentionRule::from_file(0, f).unwrap()
    }

    #[test]
    fn one_policy_keeps_by_each_condition() {
        let now = SystemTime::now();
        let day = Duration::from_secs(86400);
        let t = |tag: &str, age_days: u32, pulled_days: Option<u32>, referenced| TagFacts {
            tag: tag.to_owned(),
            digest: Digest::sha256(tag.as_bytes()),
            pushed: now - day * age_days,
            pulled: pulled_days.map(|d| now - day * d),
            referenced,
        };
        let r = rule(FileRetention {
            repositories: vec!["**".into()],
            keep_newest: Some(1),
            keep_tags: vec!["v*".into()],
            older_than: Some(HumanDuration(day * 7)),
            keep_pulled_within: Some(HumanDuration(day * 3)),
            keep_referenced: None,
        });
        assert!(
            r.removes(&t("a", 30, None, false), 0, now).is_none(),
            "newest"
        );
        assert!(
            r.removes(&t("v1", 30, None, false), 5, now).is_none(),
            "keep_tags"
        );
        assert!(
            r.removes(&t("b", 30, Some(1), false), 5, now).is_none(),
            "pulled"
        );
        assert!(
            r.removes(&t("c", 30, None, true), 5, now).is_none(),
            "referenced"
        );
        assert!(
            r.removes(&t("d", 2, None, false), 5, now).is_none(),
            "young"
        );
        let why = r.removes(&t("e", 30, Some(10), false), 5, now).unwrap();
        assert!(why.starts_with("retention[0]: pushed"), "{why}");
        assert!(why.contains("not among the newest 1 (rank 6)"), "{why}");
        assert!(why.contains("last pulled 864000s ago"), "{why}");

        let e = RetentionRule::from_file(
            3,
            FileRetention {
                repositories: vec!["x".into()],
                ..FileRetention::default()
            },
        )
        .unwrap_err();
        assert_eq!(e.key, "retention[3]");
    }
}
