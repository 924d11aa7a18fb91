//! The package index: which IPS packages (name, publisher, version, FMRI) each image holds, read
//! from the SPDX SBOM referrers pushed for it, so `GET /v2/_rd/packages` can answer "which
//! images have `openssl` older than 3.0" without reading any SBOM.
//!
//! **Where it lives.** In the store, like every other registry state, so every replica answers
//! the same: one document per repository, [`layout::package_index`]
//! (`_rd/pkgindex/<name>/_index.json`), mapping subject digest → SBOM manifest digest → the
//! SBOM's packages. It is replaced with a conditional write (`Repos::update`), so concurrent
//! pushes on any replica never lose an entry. One document per repository (not one object per
//! image) because a query must find every entry without listing the store, which is for
//! garbage collection only; a query reads the catalog and one document per repository the
//! caller may pull.
//!
//! **Writing.** A manifest PUT with a `subject` and a layer of media type
//! `application/spdx+json` (what `rdctl build` pushes) reads that layer (at most
//! [`MAX_SBOM_BYTES`], only the package fields are built) and records its packages against the
//! subject (`index_referrer`). An SBOM that does not parse is logged and left out; the push
//! still succeeds. `rdctl registry reindex` ([`reindex`]) records the SBOMs pushed before the
//! index existed, from the referrers indexes.
//!
//! **Forgetting.** Deleting a manifest (a DELETE or garbage collection, both through
//! `Repos::delete_manifest`) removes it from the index as a subject and as an SBOM
//! (`forget`). Queries also check that the subject and at least one of its SBOMs are still
//! linked in the repository, so an entry left by a crash is never answered; `reindex` prunes
//! such entries. The index holds no digests garbage collection follows: it neither keeps nor
//! frees content.

use std::collections::BTreeMap;

use futures_util::StreamExt;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use validator::{Constraint, Digest, Name, PackageNameGlob, SPDX_ARTIFACT_TYPE, SpdxPackage};

use crate::auth::Access;
use crate::errors::ApiResult;
use crate::manifest_rules::spdx_layer;
use crate::repo::INDEX_LIMIT;
use crate::repo::Repos;
use crate::storage::{StoreError, layout};

/// Largest SBOM document read.
pub const MAX_SBOM_BYTES: u64 = 64 << 20;
/// Largest manifest read while reindexing.
const MANIFEST_LIMIT: u64 = 16 << 20;
/// Images a search answers when the request gives no `n`.
pub const DEFAULT_RESULTS: usize = 100;
/// Most images one search answers (a larger `n` is cut to it); `next` continues.
pub const MAX_RESULTS: usize = 1000;
/// Repositories read at once by a search.
const CONCURRENCY: usize = 16;

/// SBOM manifest digest → its packages.
type Sboms = BTreeMap<Digest, Vec<SpdxPackage>>;

/// The index document of one repository.
#[derive(Debug, Default, Serialize, Deserialize)]
struct IndexDoc {
    /// Subject digest → SBOM manifest digest → its packages.
    images: BTreeMap<Digest, Sboms>,
    /// SBOM manifest digest → the epoch of its manifest link it was recorded with (absent:
    /// the legacy key). Garbage collection forgets an SBOM's entries only with that link
    /// (`docs/gc.md`, "Epochs").
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    epochs: BTreeMap<Digest, String>,
}

/// The package index's part in manifest deletes: it forgets the manifest as a subject and as
/// an SBOM ([`forget`]).
pub(crate) struct PackageIndexHook;

impl crate::repo::hooks::RepoHook for PackageIndexHook {
    fn name(&self) -> &'static str {
        "package index"
    }

    fn on_delete<'a>(
        &'a self,
        repos: &'a Repos,
        name: &'a Name,
        d: &'a Digest,
        leaving: crate::repo::hooks::Leaving<'a>,
    ) -> crate::storage::BoxFuture<'a, ApiResult<()>> {
        use crate::repo::hooks::Leaving;
        let (epoch, as_subject) = match leaving {
            Leaving::Deleted(e) => (e, true),
            Leaving::Collected(e) => (e, false),
        };
        Box::pin(forget(repos, name, d, epoch, as_subject))
    }
}

/// Reads the SPDX document `layer` of SBOM manifest `sbom` and records its packages against
/// `subject` in `name`, stamped with `epoch`, the epoch of `sbom`'s manifest link. `Ok(None)`
/// when the document is not SPDX JSON (logged, not recorded).
pub(crate) async fn index_referrer(
    repos: &Repos,
    name: &Name,
    (subject, sbom): (&Digest, &Digest),
    layer: &Digest,
    epoch: &str,
) -> ApiResult<Option<usize>> {
    let doc = match crate::tombstone::get_data(repos.store().as_ref(), layer, MAX_SBOM_BYTES).await
    {
        Ok(d) => d,
        Err(StoreError::TooLarge { .. }) => {
            tracing::warn!(repository = %name, %sbom, %layer, limit = MAX_SBOM_BYTES, "SBOM too large to index");
            return Ok(None);
        }
        Err(e) if e.is_not_found() => {
            tracing::warn!(repository = %name, %sbom, %layer, "SBOM document missing: not indexed");
            return Ok(None);
        }
        Err(e) => return Err(e.into()),
    };
    // Parsing a large document is CPU work; keep it off the request threads.
    let parsed = tokio::task::spawn_blocking(move || validator::parse_spdx(&doc.bytes))
        .await
        .map_err(crate::errors::ApiError::internal)?;
    match parsed {
        Ok(p) => {
            let n = p.packages.len();
            record(repos, name, (subject, sbom), epoch, p.packages).await?;
            Ok(Some(n))
        }
        Err(reason) => {
            tracing::warn!(repository = %name, %sbom, %layer, %reason, "SBOM not indexed");
            Ok(None)
        }
    }
}

/// Records the packages of SBOM `sbom` (its manifest link at `epoch`) against `subject` in
/// `name`.
pub(crate) async fn record(
    repos: &Repos,
    name: &Name,
    (subject, sbom): (&Digest, &Digest),
    epoch: &str,
    packages: Vec<SpdxPackage>,
) -> ApiResult<()> {
    repos
        .update::<IndexDoc, _>(&layout::package_index(name), |d| {
            let stamp = d.epochs.get(sbom).map_or("", String::as_str);
            let e = d.images.entry(subject.clone()).or_default();
            if e.get(sbom) == Some(&packages) && stamp == epoch {
                return false;
            }
            e.insert(sbom.clone(), packages.clone());
            if epoch.is_empty() {
                d.epochs.remove(sbom);
            } else {
                d.epochs.insert(sbom.clone(), epoch.to_owned());
            }
            true
        })
        .await?;
    Ok(())
}

/// Removes manifest `d` of `name` from the index: as an SBOM, its entries recorded with the
/// link of `epoch` (a re-push at a newer epoch restamped its own); with `as_subject` (an API
/// DELETE) also the entries under `d` as a subject. Garbage collection leaves those to go with
/// their SBOMs (a subject's SBOMs are collected with it unless tagged, and queries skip a
/// subject that is not linked).
pub(crate) async fn forget(
    repos: &Repos,
    name: &Name,
    d: &Digest,
    epoch: &str,
    as_subject: bool,
) -> ApiResult<()> {
    let key = layout::package_index(name);
    // Most repositories that delete have no index; skip the conditional write then.
    if repos.read::<IndexDoc>(&key, INDEX_LIMIT).await?.is_none() {
        return Ok(());
    }
    repos
        .update::<IndexDoc, _>(&key, |doc| {
            // As a subject: its SBOMs' entries (not stamped with its own link's epoch).
            let mut changed = as_subject && doc.images.remove(d).is_some();
            // As an SBOM: only the entries recorded with the link that goes.
            let stamp = doc.epochs.get(d).map_or("", String::as_str);
            if epoch != stamp {
                return changed;
            }
            changed |= doc.epochs.remove(d).is_some();
            doc.images.retain(|_, sboms| {
                changed |= sboms.remove(d).is_some();
                !sboms.is_empty()
            });
            changed
        })
        .await?;
    Ok(())
}

/// Matches a package name against a search pattern: `*` any run of characters (`/` included),
/// `?` one character, anything else itself. The pattern matches the whole name or a part of it
/// that starts after a `/` (as pkg(5) matches `tool` against `demo/tool`).
pub fn name_matches(pattern: &str, name: &str) -> bool {
    NameGlob::new(pattern).matches(name)
}

/// A search pattern compiled once for all the names a search looks at ([`name_matches`]):
/// validator's [`PackageNameGlob`], the one name matcher `rdctl search` and the admission
/// policy's `deny_packages` share. Its matching takes at most pattern × name steps, whatever
/// the pattern: anyone who can search sends it.
type NameGlob = PackageNameGlob;

/// A package search.
#[derive(Debug, Clone)]
pub(crate) struct Query {
    /// The name pattern ([`name_matches`]).
    pub name: String,
    /// The version constraint, if any.
    pub version: Option<Constraint>,
    /// Most images answered.
    pub n: usize,
    /// Continue after this `repository@digest` (a previous answer's `next`).
    pub last: Option<String>,
}

impl Query {
    /// A query from request parameters (`name`, `version`, `n`, `last`), as the API and the
    /// web page's search form send them; a bad one is `QUERY_INVALID` or
    /// `PAGINATION_NUMBER_INVALID` (400) naming what is wrong.
    pub(crate) fn from_params(
        name: Option<&str>,
        version: Option<&str>,
        n: Option<&str>,
        last: Option<&str>,
    ) -> ApiResult<Query> {
        use crate::errors::{ApiError, Code};
        let invalid = |detail: String| ApiError::new(Code::QueryInvalid, detail);
        let name = name
            .map(str::trim)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| {
                invalid("name=PATTERN is required (like name=openssl or name=*ssl*)".into())
            })?
            .to_owned();
        let version = match version.map(str::trim) {
            None | Some("") => None,
            Some(v) => Some(Constraint::parse(v).map_err(invalid)?),
        };
        let n = match n {
            None | Some("") => DEFAULT_RESULTS,
            Some(v) => v
                .parse::<usize>()
                .map_err(|_| {
                    ApiError::new(
                        Code::PaginationNumberInvalid,
                        format!("bad result count n={v:?}"),
                    )
                })?
                .min(MAX_RESULTS),
        };
        Ok(Query {
            name,
            version,
            n,
            last: last.filter(|l| !l.is_empty()).map(str::to_owned),
        })
    }
}

/// One image a search found, or the packages of one image.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct ImagePackages {
    pub repository: String,
    pub digest: Digest,
    /// Tags pointing at it, in tag order.
    pub tags: Vec<String>,
    /// The SBOM manifests the packages come from.
    pub sboms: Vec<Digest>,
    /// The matching packages (a search) or every package (an image), deduplicated.
    pub packages: Vec<SpdxPackage>,
}

/// What a search answers.
#[derive(Debug, Clone, Serialize)]
pub(crate) struct SearchResult {
    pub results: Vec<ImagePackages>,
    /// True when more images matched than `n`; `next` continues.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next: Option<String>,
}

fn position(repository: &str, d: &Digest) -> String {
    format!("{repository}@{d}")
}

async fn linked(repos: &Repos, name: &Name, d: &Digest) -> ApiResult<bool> {
    Ok(repos.manifest_link(name, d).await?.is_some())
}

/// Keeps the SBOMs of `sboms` still linked in `name`, and only when `subject` is too.
async fn live_sboms<'a>(
    repos: &Repos,
    name: &Name,
    subject: &Digest,
    sboms: &'a Sboms,
) -> ApiResult<Vec<(&'a Digest, &'a Vec<SpdxPackage>)>> {
    if !linked(repos, name, subject).await? {
        return Ok(Vec::new());
    }
    let mut out = Vec::new();
    for (d, p) in sboms {
        if linked(repos, name, d).await? {
            out.push((d, p));
        }
    }
    Ok(out)
}

async fn read_index(repos: &Repos, name: &Name) -> ApiResult<IndexDoc> {
    Ok(repos
        .read::<IndexDoc>(&layout::package_index(name), INDEX_LIMIT)
        .await?
        .unwrap_or_default())
}

fn tags_of(tags: &[(String, Digest)], d: &Digest) -> Vec<String> {
    tags.iter()
        .filter(|(_, t)| t == d)
        .map(|(t, _)| t.clone())
        .collect()
}

/// Searches every repository the caller may pull (`access`; `None`: no access control) for
/// images holding a package matching `q`, in `repository@digest` order.
pub(crate) async fn search(
    repos: &Repos,
    access: Option<&Access>,
    q: &Query,
) -> ApiResult<SearchResult> {
    let mut names: Vec<Name> = repos
        .catalog()
        .await?
        .into_iter()
        .filter(|r| access.is_none_or(|a| a.lists(r)))
        .filter_map(|r| Name::parse(&r).ok())
        .collect();
    names.sort();
    let docs: Vec<ApiResult<(Name, IndexDoc)>> = futures_util::stream::iter(names)
        .map(|n| async move { read_index(repos, &n).await.map(|d| (n, d)) })
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let glob = NameGlob::new(&q.name);
    // Candidates: (position, repository, subject, SBOM digests with a match).
    let mut candidates: Vec<(String, Name, Digest, Sboms)> = Vec::new();
    for r in docs {
        let (name, doc) = r?;
        for (subject, sboms) in doc.images {
            let matching: Sboms = sboms
                .into_iter()
                .map(|(d, pkgs)| {
                    let m: Vec<SpdxPackage> = pkgs
                        .into_iter()
                        .filter(|p| {
                            glob.matches(&p.name)
                                && q.version.as_ref().is_none_or(|c| {
                                    p.version.as_deref().is_some_and(|v| c.matches(v))
                                })
                        })
                        .collect();
                    (d, m)
                })
                .filter(|(_, m)| !m.is_empty())
                .collect();
            if !matching.is_empty() {
                let pos = position(name.as_str(), &subject);
                if q.last.as_ref().is_none_or(|l| pos.as_str() > l.as_str()) {
                    candidates.push((pos, name.clone(), subject, matching));
                }
            }
        }
    }
    candidates.sort_by(|a, b| a.0.cmp(&b.0));
    let mut results = Vec::new();
    let mut truncated = false;
    let mut tag_cache: BTreeMap<Name, Vec<(String, Digest)>> = BTreeMap::new();
    for (_, name, subject, matching) in &candidates {
        let live = live_sboms(repos, name, subject, matching).await?;
        if live.is_empty() {
            continue;
        }
        if results.len() == q.n {
            truncated = true;
            break;
        }
        if !tag_cache.contains_key(name) {
            tag_cache.insert(name.clone(), repos.tag_map(name).await?);
        }
        results.push(image(name, subject, &live, &tag_cache[name]));
    }
    let next = truncated
        .then(|| results.last().map(|r| position(&r.repository, &r.digest)))
        .flatten();
    Ok(SearchResult {
        results,
        truncated,
        next,
    })
}

fn image(
    name: &Name,
    subject: &Digest,
    live: &[(&Digest, &Vec<SpdxPackage>)],
    tags: &[(String, Digest)],
) -> ImagePackages {
    // First-seen order, duplicates dropped through a set: an SBOM is the pusher's, and a
    // linear `contains` per package made 100,000 packages cost 14 s of an async thread.
    let mut seen: std::collections::BTreeSet<&SpdxPackage> = std::collections::BTreeSet::new();
    let mut packages: Vec<SpdxPackage> = Vec::new();
    for (_, pkgs) in live {
        for p in pkgs.iter() {
            if seen.insert(p) {
                packages.push(p.clone());
            }
        }
    }
    ImagePackages {
        repository: name.to_string(),
        digest: subject.clone(),
        tags: tags_of(tags, subject),
        sboms: live.iter().map(|(d, _)| (*d).clone()).collect(),
        packages,
    }
}

/// The indexed packages of image `subject` in `name` (no SBOM indexed: none). The caller has
/// checked that the manifest is in the repository.
pub(crate) async fn packages_of(
    repos: &Repos,
    name: &Name,
    subject: &Digest,
) -> ApiResult<ImagePackages> {
    let doc = read_index(repos, name).await?;
    let empty = BTreeMap::new();
    let sboms = doc.images.get(subject).unwrap_or(&empty);
    let live = live_sboms(repos, name, subject, sboms).await?;
    let tags = repos.tag_map(name).await?;
    Ok(image(name, subject, &live, &tags))
}

/// What [`reindex`] did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReindexReport {
    /// Repositories looked at.
    pub repositories: usize,
    /// SBOM referrers recorded.
    pub sboms: usize,
    /// Packages recorded (summed over SBOMs).
    pub packages: usize,
    /// SBOM referrers skipped: their document is missing, too large or not SPDX JSON.
    pub skipped: usize,
    /// Index entries removed because their subject or SBOM is no longer in the repository.
    pub pruned: usize,
}

/// Why a reindex stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReindexError {
    /// A store operation failed.
    #[error("reindex: store operation failed")]
    Store(#[from] StoreError),
    /// Reading or writing a repository's index failed.
    #[error("reindex of repository {repository} failed: {reason}")]
    Repository {
        /// The repository.
        repository: String,
        /// The cause.
        reason: String,
    },
}

/// Rebuilds the package index from the referrers indexes of every repository in `store`: every
/// SBOM referrer is recorded (again), and entries whose subject or SBOM is gone are pruned. Safe
/// while the registry serves (every write is a conditional merge); it lists the store, so it
/// is a maintenance command (`rdctl registry reindex`), never a request.
pub async fn reindex(
    store: std::sync::Arc<dyn crate::storage::Store>,
) -> Result<ReindexReport, ReindexError> {
    use crate::storage::layout::RepoPart;
    let repos = Repos::new(store.clone());
    let mut subjects: BTreeMap<Name, Vec<Digest>> = BTreeMap::new();
    for k in store.list(&layout::repositories_root()).await? {
        match layout::parse_repo_key(&k) {
            Some((name, RepoPart::Referrers(d))) => subjects.entry(name).or_default().push(d),
            Some((name, RepoPart::Marker)) => {
                subjects.entry(name).or_default();
            }
            _ => {}
        }
    }
    let mut report = ReindexReport {
        repositories: subjects.len(),
        ..ReindexReport::default()
    };
    for (name, subjects) in &subjects {
        let fail = |e: crate::errors::ApiError| ReindexError::Repository {
            repository: name.to_string(),
            reason: e.to_string(),
        };
        for subject in subjects {
            // A deleted image keeps its referrers index; nothing of it is recorded again.
            if !linked(&repos, name, subject).await.map_err(fail)? {
                continue;
            }
            for r in repos.referrers(name, subject).await.map_err(fail)? {
                if r.get("artifactType").and_then(Value::as_str) != Some(SPDX_ARTIFACT_TYPE) {
                    continue;
                }
                let Some(sbom) = r
                    .get("digest")
                    .and_then(Value::as_str)
                    .and_then(|d| Digest::parse(d).ok())
                else {
                    continue;
                };
                if !linked(&repos, name, &sbom).await.map_err(fail)? {
                    continue;
                }
                let layer =
                    match crate::tombstone::get_data(store.as_ref(), &sbom, MANIFEST_LIMIT).await {
                        Ok(b) => serde_json::from_slice::<Value>(&b.bytes)
                            .ok()
                            .as_ref()
                            .and_then(spdx_layer),
                        Err(e) if e.is_not_found() => None,
                        Err(e) => return Err(e.into()),
                    };
                let indexed = match layer {
                    Some(layer) => {
                        let epoch = repos.manifest_link_epoch(name, &sbom).await.map_err(fail)?;
                        index_referrer(&repos, name, (subject, &sbom), &layer, &epoch)
                            .await
                            .map_err(fail)?
                    }
                    None => None,
                };
                match indexed {
                    Some(n) => {
                        report.sboms += 1;
                        report.packages += n;
                    }
                    None => report.skipped += 1,
                }
            }
        }
        // Prune what is no longer linked.
        let doc = read_index(&repos, name).await.map_err(fail)?;
        for (subject, sboms) in &doc.images {
            let subject_live = linked(&repos, name, subject).await.map_err(fail)?;
            for sbom in sboms.keys() {
                if !subject_live || !linked(&repos, name, sbom).await.map_err(fail)? {
                    let (s, b) = (subject.clone(), sbom.clone());
                    repos
                        .update::<IndexDoc, _>(&layout::package_index(name), |d| {
                            let Some(e) = d.images.get_mut(&s) else {
                                return false;
                            };
                            let removed = e.remove(&b).is_some();
                            if e.is_empty() {
                                d.images.remove(&s);
                            }
                            removed
                        })
                        .await
                        .map_err(fail)?;
                    report.pruned += 1;
                }
            }
        }
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn name_patterns() {
        for (p, n, want) in [
            ("demo/tool", "demo/tool", true),
            ("tool", "demo/tool", true),
            ("too", "demo/tool", false),
            ("t*", "demo/tool", true),
            ("*tool", "demo/tool", true),
            ("demo/*", "demo/tool", true),
            ("*", "system/core", true),
            ("sys*/c?re", "system/core", true),
            ("o/tool", "demo/tool", false),
            ("mo/tool", "demo/tool", false),
            ("library/*ssl", "library/security/openssl", true),
            ("*ssl", "library/security/openssl", true),
            ("openssl", "library/security/openssl-11", false),
            ("security/openssl", "library/security/openssl", true),
        ] {
            assert_eq!(name_matches(p, n), want, "{p} vs {n}");
        }
        // A pattern of many stars is answered at once (the recursive matcher took 53 s for
        // ten stars against a 40-character name, per name searched).
        let name = format!("library/{}", "a".repeat(200));
        assert!(!name_matches(&format!("{}b", "*a".repeat(40)), &name));
        assert!(name_matches(&format!("{}a", "*a".repeat(40)), &name));
    }

    #[test]
    fn index_documents_round_trip() {
        let (s, b) = (Digest::sha256(b"s"), Digest::sha256(b"b"));
        let p = SpdxPackage {
            fmri: Some("pkg://o/x@1.0".into()),
            name: "x".into(),
            publisher: Some("o".into()),
            version: Some("1.0".into()),
        };
        let mut doc = IndexDoc::default();
        doc.images
            .entry(s.clone())
            .or_default()
            .insert(b.clone(), vec![p.clone()]);
        let json = serde_json::to_string(&doc).unwrap();
        assert!(json.contains(&format!("\"{s}\"")), "{json}");
        let back: IndexDoc = serde_json::from_str(&json).unwrap();
        assert_eq!(back.images[&s][&b], vec![p]);
    }
}
