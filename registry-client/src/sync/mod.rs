//! Copying many images at once: what `rdctl sync` runs, in the spirit of `skopeo sync`.
//!
//! A [`SyncRule`] names a source and a destination [`Endpoint`] (a registry, with an optional
//! repository prefix, or an air-gap [`bundle`](Endpoint::Bundle) directory), repository globs,
//! tag globs, an optional platform and whether referrers travel. [`plan`] lists what the
//! source holds that the rule selects ([`SyncItem`]s, each pinned to the digest the source
//! named when it was listed); [`run`] copies the items with bounded concurrency, each through
//! the one copy path, [`crate::transfer::copy`], so every document and blob is verified, blobs
//! the destination already has are skipped (a rerun copies only what is missing), a registry
//! destination gets no manifest it already has (a converged rerun only reads, so it causes no
//! push event), copies running at once upload a shared blob once per destination repository,
//! and referrers and cosign's `.sig`/`.att`/`.sbom` tags come along. One failed image is recorded
//! in the [`SyncReport`] and the others go on.
//!
//! A bundle is a directory of OCI image layouts, one per repository, under
//! `repos/<repository with '/' written as '+'>`, with tags as `org.opencontainers.image.ref.name`
//! entries, and a manifest of what it holds, `bundle.json` ([`BundleManifest`]): for every
//! image its repository, tag, digest, media type, size and the digests of its referrers. The
//! manifest is rewritten (atomically) after every image copied into the bundle, so a bundle
//! cut short still describes what it holds. Reading a bundle, the images come from
//! `bundle.json`, and an image whose layout tag names another digest than the manifest is
//! refused before anything is copied; only the referrers and cosign tag manifests the
//! manifest lists with an image travel with it ([`SyncItem::listed_referrers`]).
//!
//! A rule may copy only signed images: with `only_signed` ([`SyncRule::only_signed`]) an
//! admission policy in the worker's format decides on the digest listed before anything is
//! copied ([`check_signed`], the check a pull-through cache can call too); a refused image is
//! not copied and its [`ItemOutcome::refused`] names the rule, the keys tried and why. A
//! bundle's `bundle.json` may be signed at export ([`SyncRule::sign_bundle`], written as
//! `bundle.json.sig` once the run is over) and verified at import ([`SyncRule::bundle_keys`]):
//! see [`BundleManifest::read_verified`].
//!
//! Globs: in repository patterns `*` and `?` stay within one path segment and `**` crosses
//! segments; in tag patterns `*` is any run of characters and `?` one. Referrer tags (the
//! tag schema's `sha256-<hex>` and cosign's `sha256-<hex>.sig|.att|.sbom`) are never images of
//! their own: they travel with the image they belong to.

use std::collections::{BTreeMap, BTreeSet};

use std::path::{Path, PathBuf};
use std::sync::Mutex;

use futures_util::StreamExt as _;

mod bundle;
mod rule;
mod signed;

use bundle::record_in_bundle;
pub use bundle::{
    BUNDLE_MANIFEST, BUNDLE_SIGNATURE, BundleImage, BundleKey, BundleManifest, bundle_layout_dir,
    sign_bundle,
};
pub use rule::{Endpoint, SyncFile, SyncFileRule, SyncRule, glob_match};
pub use signed::{
    Admitted, Refusal, SignaturePolicy, SignedCheckError, check_signed, policy_reason,
};
use validator::{Digest, Tag};

use crate::transfer::{self, CopyOptions, CopyReport, ImageRef, TransferError};
use crate::{Client, ClientError, Reference};

/// Page size for catalog and tag listings.
const PAGE: usize = 1000;

/// Most images one rule selects (a guard against a runaway catalog).
pub const MAX_ITEMS: usize = 100_000;

/// Images copied at once unless told otherwise.
pub const DEFAULT_CONCURRENCY: usize = 4;

/// How to run.
#[derive(Debug, Clone)]
pub struct SyncOptions {
    /// Images copied at once (at least 1). Images bound for one bundle layout go one at a
    /// time (they share its `index.json`).
    pub concurrency: usize,
    /// Only plan: list what would be copied, write nothing.
    pub dry_run: bool,
}

impl Default for SyncOptions {
    fn default() -> Self {
        SyncOptions {
            concurrency: DEFAULT_CONCURRENCY,
            dry_run: false,
        }
    }
}

/// One image a rule selects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncItem {
    /// The repository relative to the rule's source prefix (and destination prefix).
    pub relative: String,
    /// The tag.
    pub tag: Tag,
    /// Where it is.
    pub source: ImageRef,
    /// Where it goes.
    pub destination: ImageRef,
    /// Its full repository name at the destination.
    pub destination_repository: String,
    /// The digest the source named when it was listed (a bundle: its manifest's digest).
    pub digest: Digest,
    /// Whether the destination's tag already names that digest (copying then only fills in
    /// what is missing, such as new referrers).
    pub up_to_date: bool,
    /// A bundle source: the referrers and cosign tag manifests `bundle.json` lists with the
    /// image, the only ones copied ([`CopyOptions::listed_referrers`]); `None` for a registry.
    pub listed_referrers: Option<BTreeSet<Digest>>,
}

/// What happened to one image.
#[derive(Debug)]
pub struct ItemOutcome {
    /// The image.
    pub item: SyncItem,
    /// The copy's report, or why it failed (`None` in a dry run, or when refused).
    pub result: Option<Result<CopyReport, TransferError>>,
    /// Why the rule's `only_signed` policy refused the image (then nothing was copied).
    pub refused: Option<Refusal>,
}

/// What a sync did.
#[derive(Debug, Default)]
pub struct SyncReport {
    /// Every image, in plan order.
    pub images: Vec<ItemOutcome>,
    /// Rules whose listing failed: the rule's source and why.
    pub rule_errors: Vec<(String, SyncError)>,
}

impl SyncReport {
    /// Whether any rule or image failed.
    pub fn failed(&self) -> bool {
        !self.rule_errors.is_empty() || self.images.iter().any(|o| matches!(o.result, Some(Err(_))))
    }
}

/// Progress, as it happens.
#[derive(Debug)]
pub enum Event<'a> {
    /// A rule's images were listed.
    Planned {
        /// The rule's source.
        from: &'a Endpoint,
        /// How many images it selects.
        images: usize,
    },
    /// One image finished (`done` of `total`).
    Finished {
        /// The outcome.
        outcome: &'a ItemOutcome,
        /// How many have finished.
        done: usize,
        /// How many there are.
        total: usize,
    },
}

/// A sync could not plan or run.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncError {
    /// An endpoint could not be parsed.
    #[error("invalid sync endpoint {input:?}: {reason}")]
    BadEndpoint {
        /// The input.
        input: String,
        /// What is wrong.
        reason: String,
    },
    /// A rule's field is wrong.
    #[error("{field}: {reason}")]
    BadRule {
        /// The field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// Listing a registry failed.
    #[error("cannot list {what}")]
    List {
        /// The catalog or repository.
        what: String,
        /// The cause.
        #[source]
        source: ClientError,
    },
    /// A bundle's manifest could not be read or written.
    #[error("bundle manifest {path}")]
    Bundle {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A bundle's layout disagrees with its manifest.
    #[error("bundle {dir}: {repository}:{tag} is {found} in its layout, bundle.json says {listed}")]
    BundleMismatch {
        /// The bundle.
        dir: PathBuf,
        /// The repository.
        repository: String,
        /// The tag.
        tag: String,
        /// The manifest's digest.
        listed: Digest,
        /// The layout's.
        found: String,
    },
    /// A bundle's signed `bundle.json` did not verify with the keys given.
    #[error("bundle {} refused: {reason} (signature {}; keys: {})", manifest.display(), signature.display(), keys.join(", "))]
    BundleSignature {
        /// The bundle's `bundle.json`.
        manifest: PathBuf,
        /// Its signature file.
        signature: PathBuf,
        /// The keys tried: file and short key id.
        keys: Vec<String>,
        /// What is wrong.
        reason: String,
    },
    /// More than [`MAX_ITEMS`] images.
    #[error("{from}: more than {MAX_ITEMS} images selected")]
    TooMany {
        /// The source.
        from: String,
    },
}

/// Lists the images `rule` selects at its source, each pinned to the digest found, and
/// whether the destination already has it under the tag.
pub async fn plan(client: &Client, rule: &SyncRule) -> Result<Vec<SyncItem>, SyncError> {
    // (relative repository, tag, digest, a bundle's listed referrers)
    let mut found: Vec<(String, Tag, Digest, Option<BTreeSet<Digest>>)> = Vec::new();
    match &rule.from {
        Endpoint::Registry { host, prefix } => {
            for relative in registry_repositories(client, rule, host, prefix.as_deref()).await? {
                let full = rule.from.repository(&relative);
                let repo = Reference::parse(&format!("{host}/{full}")).map_err(|e| {
                    SyncError::BadEndpoint {
                        input: format!("{host}/{full}"),
                        reason: e.reason,
                    }
                })?;
                let tags = match client.tags(&repo, PAGE, Some(MAX_ITEMS)).await {
                    Ok(t) => t,
                    Err(e) if e.kind() == crate::ErrorKind::NotFound => Vec::new(),
                    Err(source) => {
                        return Err(SyncError::List {
                            what: format!("the tags of {repo}"),
                            source,
                        });
                    }
                };
                for t in tags.iter().filter(|t| rule.wants_tag(t)) {
                    let Ok(tag) = Tag::parse(t) else { continue };
                    let tagged = repo.with_tag(tag.clone());
                    match client.resolve(&tagged).await {
                        Ok(d) => found.push((relative.clone(), tag, d.digest, None)),
                        // Deleted between the listing and now.
                        Err(e) if e.kind() == crate::ErrorKind::NotFound => continue,
                        Err(source) => {
                            return Err(SyncError::List {
                                what: tagged.to_string(),
                                source,
                            });
                        }
                    }
                    if found.len() > MAX_ITEMS {
                        return Err(SyncError::TooMany {
                            from: rule.from.to_string(),
                        });
                    }
                }
            }
        }
        Endpoint::Bundle(dir) => {
            let manifest = if rule.bundle_keys.is_empty() {
                BundleManifest::read(dir)?
            } else {
                BundleManifest::read_verified(dir, &rule.bundle_keys)?
            };
            if !dir.join(BUNDLE_MANIFEST).is_file() {
                return Err(SyncError::Bundle {
                    path: dir.join(BUNDLE_MANIFEST),
                    source: std::io::Error::new(
                        std::io::ErrorKind::NotFound,
                        "not a bundle (no bundle.json)",
                    ),
                });
            }
            for image in &manifest.images {
                if !rule.wants_repository(&image.repository) || !rule.wants_tag(&image.tag) {
                    continue;
                }
                let bad = |reason: String| SyncError::BadEndpoint {
                    input: format!("{}:{}", image.repository, image.tag),
                    reason,
                };
                let tag = Tag::parse(&image.tag).map_err(|e| bad(e.to_string()))?;
                let digest = Digest::parse(&image.digest).map_err(|e| bad(e.to_string()))?;
                validator::Name::parse(&image.repository).map_err(|e| bad(e.to_string()))?;
                let layout = bundle_layout_dir(dir, &image.repository);
                let at = layout_tag_digest(&layout, &tag);
                if at.as_deref() != Some(digest.as_str()) {
                    return Err(SyncError::BundleMismatch {
                        dir: dir.clone(),
                        repository: image.repository.clone(),
                        tag: image.tag.clone(),
                        listed: digest,
                        found: at.unwrap_or_else(|| "missing".to_owned()),
                    });
                }
                // Only what bundle.json lists travels with the image: its signature covers
                // those digests, not whatever else the layout holds now.
                let listed = image
                    .referrers
                    .iter()
                    .map(|r| {
                        Digest::parse(r)
                            .map_err(|e| bad(format!("referrer {r:?} in bundle.json: {e}")))
                    })
                    .collect::<Result<BTreeSet<Digest>, _>>()?;
                found.push((image.repository.clone(), tag, digest, Some(listed)));
            }
        }
    }
    let mut items = Vec::with_capacity(found.len());
    for (relative, tag, digest, listed_referrers) in found {
        let source = rule.from.image(&rule.from.repository(&relative), &tag)?;
        let destination_repository = rule.to.repository(&relative);
        let destination = rule.to.image(&destination_repository, &tag)?;
        let up_to_date = match &destination {
            ImageRef::Registry(r) => client.resolve(r).await.is_ok_and(|d| d.digest == digest),
            ImageRef::Layout(l) => {
                layout_tag_digest(&l.dir, &tag).as_deref() == Some(digest.as_str())
            }
        };
        items.push(SyncItem {
            relative,
            tag,
            source,
            destination,
            destination_repository,
            digest,
            up_to_date,
            listed_referrers,
        });
    }
    Ok(items)
}

/// The repositories (relative to the prefix) a registry source offers that the rule wants:
/// literal patterns are taken as they are (no catalog needed), globs filter the catalog.
async fn registry_repositories(
    client: &Client,
    rule: &SyncRule,
    host: &str,
    prefix: Option<&str>,
) -> Result<Vec<String>, SyncError> {
    let literal = |g: &String| !g.contains(['*', '?']);
    if !rule.repositories.is_empty() && rule.repositories.iter().all(literal) {
        let mut v = rule.repositories.clone();
        v.sort();
        v.dedup();
        return Ok(v);
    }
    let all = client
        .catalog(host, PAGE, Some(MAX_ITEMS))
        .await
        .map_err(|source| SyncError::List {
            what: format!("the catalog of {host}"),
            source,
        })?;
    let mut v: Vec<String> = all
        .into_iter()
        .filter_map(|r| match prefix {
            Some(p) => r.strip_prefix(p)?.strip_prefix('/').map(str::to_owned),
            None => Some(r),
        })
        .filter(|r| rule.wants_repository(r))
        .collect();
    v.sort();
    v.dedup();
    Ok(v)
}

/// The digest a layout's `index.json` tags `tag` with, if the layout and the tag exist.
fn layout_tag_digest(layout: &Path, tag: &Tag) -> Option<String> {
    let l = validator::ImageLayout::open(layout).ok()?;
    let index = crate::image::endpoint::layout_index(&l).ok()?;
    index
        .manifests
        .iter()
        .rev()
        .find(|d| d.ref_name() == Some(tag.as_str()))
        .map(|d| d.digest.to_string())
}

/// Plans every rule and copies what they select (see the module docs). A rule whose listing
/// fails is recorded in [`SyncReport::rule_errors`]; the other rules still run.
pub async fn run(
    client: &Client,
    rules: &[SyncRule],
    opts: &SyncOptions,
    progress: &(dyn Fn(Event<'_>) + Sync),
) -> SyncReport {
    run_with_progress(client, rules, opts, progress, &crate::progress::NoProgress).await
}

/// [`run`], reporting the bytes of every blob any of its copies moves to `blobs` (copies run
/// at once, so their blobs interleave; see [`crate::progress`]).
pub async fn run_with_progress(
    client: &Client,
    rules: &[SyncRule],
    opts: &SyncOptions,
    progress: &(dyn Fn(Event<'_>) + Sync),
    blobs: &dyn crate::progress::Progress,
) -> SyncReport {
    let mut report = SyncReport::default();
    // (rule index, item)
    let mut work: Vec<(usize, SyncItem)> = Vec::new();
    for (i, rule) in rules.iter().enumerate() {
        match plan(client, rule).await {
            Ok(items) => {
                progress(Event::Planned {
                    from: &rule.from,
                    images: items.len(),
                });
                work.extend(items.into_iter().map(|it| (i, it)));
            }
            Err(e) => report.rule_errors.push((rule.from.to_string(), e)),
        }
    }
    let total = work.len();
    if opts.dry_run {
        report.images = work
            .into_iter()
            .map(|(_, item)| ItemOutcome {
                item,
                result: None,
                refused: None,
            })
            .collect();
        return report;
    }
    // Images bound for one bundle layout share its index.json: they form one group that runs
    // in order. Tags of one image in one registry repository do too: they push the same
    // manifests and update the same referrers index (the tag schema's `sha256-…` tag is read,
    // changed and written back, so two copies at once can lose a referrer), and CNCF
    // distribution answered DIGEST_INVALID to one of two identical manifest PUTs racing there.
    // Every other image is a group of its own.
    let mut groups: BTreeMap<String, Vec<(usize, usize, SyncItem)>> = BTreeMap::new();
    for (n, (rule, item)) in work.into_iter().enumerate() {
        let key = match &item.destination {
            ImageRef::Layout(l) => format!("layout:{}", l.dir.display()),
            ImageRef::Registry(r) => format!(
                "image:{}/{}@{}",
                r.registry(),
                item.destination_repository,
                item.digest
            ),
        };
        groups.entry(key).or_default().push((n, rule, item));
    }
    let bundles: Mutex<BTreeMap<PathBuf, BundleManifest>> = Mutex::new(BTreeMap::new());
    let done = std::sync::atomic::AtomicUsize::new(0);
    let outcomes: Mutex<Vec<(usize, ItemOutcome)>> = Mutex::new(Vec::with_capacity(total));
    let bundle_errors: Mutex<Vec<(String, SyncError)>> = Mutex::new(Vec::new());
    futures_util::stream::iter(groups.into_values())
        .for_each_concurrent(opts.concurrency.max(1), |group| {
            let (bundles, done, outcomes, bundle_errors) =
                (&bundles, &done, &outcomes, &bundle_errors);
            async move {
                for (n, rule, item) in group {
                    let rule = &rules[rule];
                    let (result, refused) = copy_item(client, rule, &item, blobs).await;
                    if let (Some(Ok(r)), Endpoint::Bundle(dir)) = (&result, &rule.to)
                        && let Err(e) = record_in_bundle(bundles, dir, &item, r)
                    {
                        bundle_errors
                            .lock()
                            .expect("bundle error list")
                            .push((rule.to.to_string(), e));
                    }
                    let outcome = ItemOutcome {
                        item,
                        result,
                        refused,
                    };
                    let finished = done.fetch_add(1, std::sync::atomic::Ordering::Relaxed) + 1;
                    progress(Event::Finished {
                        outcome: &outcome,
                        done: finished,
                        total,
                    });
                    outcomes.lock().expect("outcomes").push((n, outcome));
                }
            }
        })
        .await;
    // Signed last, over what the bundle finally lists.
    let mut signed: Vec<&Path> = Vec::new();
    for rule in rules {
        if let (Some(key), Endpoint::Bundle(dir)) = (&rule.sign_bundle, &rule.to)
            && !signed.contains(&dir.as_path())
        {
            signed.push(dir);
            if let Err(e) = sign_bundle(dir, key) {
                report.rule_errors.push((rule.to.to_string(), e));
            }
        }
    }
    let mut outcomes = outcomes.into_inner().expect("outcomes");
    outcomes.sort_by_key(|(n, _)| *n);
    report.images = outcomes.into_iter().map(|(_, o)| o).collect();
    report
        .rule_errors
        .extend(bundle_errors.into_inner().expect("bundle error list"));
    report
}

/// Copies one image: with `only_signed`, only once the policy admits the digest listed, and
/// then from that digest (a tag moved since cannot bring unchecked content).
async fn copy_item(
    client: &Client,
    rule: &SyncRule,
    item: &SyncItem,
    blobs: &dyn crate::progress::Progress,
) -> (Option<Result<CopyReport, TransferError>>, Option<Refusal>) {
    let copy_opts = CopyOptions {
        platform: rule.platform.clone(),
        referrers: rule.referrers,
        listed_referrers: item.listed_referrers.clone(),
        oci_media_types: false,
    };
    let mut source = item.source.clone();
    if let (Some(policy), ImageRef::Registry(r)) = (&rule.only_signed, &item.source) {
        match check_signed(client, policy, r, &item.digest).await {
            Ok(admitted) => {
                tracing::debug!(image = %r, digest = %item.digest, rule = ?admitted.rule, keys = ?admitted.keys, "only_signed: admitted");
                source = ImageRef::Registry(r.with_digest(item.digest.clone()));
            }
            Err(SignedCheckError::Refused(refusal)) => {
                tracing::warn!(image = %r, digest = %item.digest, reason = refusal.reason, error = %refusal, "only_signed: not copied");
                return (None, Some(*refusal));
            }
            Err(SignedCheckError::Evidence { source, .. }) => return (Some(Err(*source)), None),
        }
    }
    let result =
        transfer::copy_with_progress(client, &source, &item.destination, &copy_opts, blobs).await;
    if let (Ok(r), Endpoint::Bundle(dir)) = (&result, &rule.from)
        && !r.referrers_unlisted.is_empty()
    {
        let unlisted: Vec<String> = r.referrers_unlisted.iter().map(|d| d.to_string()).collect();
        tracing::warn!(
            bundle = %dir.display(),
            image = %format!("{}:{}", item.relative, item.tag),
            not_listed = %unlisted.join(", "),
            "the bundle's layout holds referrers or cosign tags of this image that bundle.json does not list (added after it was written or signed); not imported"
        );
    }
    (Some(result), None)
}

/// What [`prune`] did.
#[derive(Debug, Default)]
pub struct PruneReport {
    /// Tags deleted at the destination, as `REPOSITORY:TAG` (full destination names).
    pub deleted: Vec<String>,
    /// Tags whose deletion failed (an `[[immutable]]` rule, a registry with deletes off).
    pub failed: Vec<(String, ClientError)>,
}

/// Deletes the tags the rule selects at its registry destination that the source no longer
/// has, given the `report` of a [`run`] of this rule alone: every destination repository the
/// rule's globs select (under its prefix) is listed, and a selected tag that was not among
/// the source's images is deleted (`DELETE /v2/<name>/manifests/<tag>`, so the destination's
/// own rules still apply). Refused when the source listing failed (a source that could not be
/// read says nothing about what it deleted), and for a bundle destination.
pub async fn prune(
    client: &Client,
    rule: &SyncRule,
    report: &SyncReport,
) -> Result<PruneReport, SyncError> {
    if let Some((from, _)) = report.rule_errors.first() {
        return Err(SyncError::BadRule {
            field: "on_upstream_delete",
            reason: format!("listing {from} failed, so nothing is deleted"),
        });
    }
    let Endpoint::Registry { host, prefix } = &rule.to else {
        return Err(SyncError::BadRule {
            field: "to",
            reason: format!(
                "{} is not a registry; only registry tags are pruned",
                rule.to
            ),
        });
    };
    let upstream: std::collections::HashSet<(&str, &str)> = report
        .images
        .iter()
        .map(|o| (o.item.relative.as_str(), o.item.tag.as_str()))
        .collect();
    let mut out = PruneReport::default();
    for relative in registry_repositories(client, rule, host, prefix.as_deref()).await? {
        let full = rule.to.repository(&relative);
        let repo =
            Reference::parse(&format!("{host}/{full}")).map_err(|e| SyncError::BadEndpoint {
                input: format!("{host}/{full}"),
                reason: e.reason,
            })?;
        let tags = match client.tags(&repo, PAGE, Some(MAX_ITEMS)).await {
            Ok(t) => t,
            Err(e) if e.kind() == crate::ErrorKind::NotFound => continue,
            Err(source) => {
                return Err(SyncError::List {
                    what: format!("the tags of {repo}"),
                    source,
                });
            }
        };
        for t in tags.iter().filter(|t| rule.wants_tag(t)) {
            if upstream.contains(&(relative.as_str(), t.as_str())) {
                continue;
            }
            let Ok(tag) = Tag::parse(t) else { continue };
            let name = format!("{full}:{t}");
            match client.delete_manifest(&repo.with_tag(tag), false).await {
                Ok(()) => out.deleted.push(name),
                Err(e) if e.kind() == crate::ErrorKind::NotFound => {}
                Err(e) => out.failed.push((name, e)),
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_keep_to_segments_unless_doubled() {
        let repo = |p: &str, t: &str| glob_match(p, t, true);
        assert!(repo("zones/*", "zones/base"));
        assert!(!repo("zones/*", "zones/base/x"));
        assert!(repo("zones/**", "zones/base/x"));
        assert!(repo("**/base", "base"), "**/ also matches nothing");
        assert!(repo("**/base", "a/b/base"));
        assert!(!repo("z?nes/*", "z/nes/a"));
        assert!(repo("base", "base"));
        assert!(!repo("base", "based"));
        let tag = |p: &str, t: &str| glob_match(p, t, false);
        assert!(tag("1.*", "1.0.2"));
        assert!(!tag("1.*", "11.0"));
        assert!(tag("v?", "v1"));
        assert!(!tag("v?", "v10"));
        assert!(tag("*", ""));
    }

    #[test]
    fn referrer_tags_are_not_images() {
        let rule = SyncRule::new(
            Endpoint::parse("a.example/src").unwrap(),
            Endpoint::parse("bundle:/tmp/b").unwrap(),
            vec![],
            vec![],
            None,
            true,
        )
        .unwrap();
        let hex = "a".repeat(64);
        assert!(rule.wants_tag("1.0"));
        for t in [
            format!("sha256-{hex}"),
            format!("sha256-{hex}.sig"),
            format!("sha256-{hex}.att"),
            format!("sha256-{hex}.sbom"),
        ] {
            assert!(!rule.wants_tag(&t), "{t}");
        }
    }

    #[test]
    fn endpoints_parse_once() {
        assert_eq!(
            Endpoint::parse("docker://127.0.0.1:5000/site/zones/").unwrap(),
            Endpoint::Registry {
                host: "127.0.0.1:5000".into(),
                prefix: Some("site/zones".into())
            }
        );
        assert_eq!(
            Endpoint::parse("reg.example").unwrap(),
            Endpoint::Registry {
                host: "reg.example".into(),
                prefix: None
            }
        );
        assert_eq!(
            Endpoint::parse("bundle:./usb").unwrap(),
            Endpoint::Bundle("./usb".into())
        );
        for bad in ["bundle:", "noslash", "reg.example/UPPER", "./dir"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
        let e = Endpoint::parse("reg.example/site").unwrap();
        assert_eq!(e.repository("base"), "site/base");
        assert_eq!(
            bundle_layout_dir(Path::new("/b"), "site/base"),
            Path::new("/b/repos/site+base")
        );
    }
}
