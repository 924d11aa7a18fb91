//! Online garbage collection: mark from tags (and, by policy, untagged manifests and referrers),
//! sweep what is unreachable and older than a grace window, while pushes go on.
//!
//! [`collect`] runs one pass over any [`Store`]:
//!
//! 1. **Lease.** It takes `gc/lock` (create-only, renewed every quarter of its time to live
//!    [`GcOptions::lease_ttl`], taken over by another run once stale; the run stops when it
//!    cannot renew), so one collector runs at a time; the lease document's modification time is the run's start `t0` on the store's
//!    own clock, and `cutoff = t0 - grace`.
//! 2. **Mark**, per repository, while listing `repositories/` a page at a time (a repository's
//!    keys come together in the listing): roots are the tagged manifests, plus every manifest
//!    when untagged manifests are kept; from each it follows index children, config and layers,
//!    and (by policy) the referrers recorded for it. What the repository keeps goes into one
//!    sorted set of digests (32 bytes per SHA-256 digest), its links not kept become
//!    candidates, and the rest of its snapshot is dropped. A manifest it cannot read stops the
//!    run before anything is deleted. Anything written after a page was listed is not a
//!    candidate.
//! 3. **Sweep**, per digest, while listing `blobs/` a page at a time (then the candidates of
//!    digests with no object there): repository links not kept in their repository, and bytes
//!    no repository keeps (so every link of theirs is a candidate), are candidates when last
//!    written before `cutoff`. For each digest with candidates the collector asks the store
//!    whether it still holds the lease, writes a tombstone `blobs/…/gc` ([`Tombstone`],
//!    "deciding"), *then* reads the digest's hold record `blobs/…/used`; if a request rewrote
//!    it after `cutoff`, the digest is left alone. Otherwise it commits: a conditional replace
//!    of its own tombstone version with "deleting" (failing when a request released the
//!    tombstone meanwhile: the digest is left alone). Then the candidates go (a manifest link
//!    leaves its subject's referrers too), each only within half the lease's time to live
//!    after the commit, then the tombstone. Bytes listed after the mark are judged the same
//!    way: written after `t0`, they are younger than `cutoff`.
//!
//! Memory grows with the digests kept (32 bytes each), the candidates and the repository
//! names, never with a listing of the store: keys are read [`LIST_PAGE`] at a time.
//!
//! Requests are the other half (`Repos::hold`): before relying on content that already exists
//! (a manifest PUT's blobs, children and own bytes; a mount; an upload whose bytes were already
//! there) a request rewrites the hold record, *then* reads the tombstone, then checks the
//! content. Either the collector's read sees the hold, or the request's read sees the
//! tombstone: a deciding one it releases at once (a conditional replace, so the collector's
//! commit fails and nothing of the digest goes), a deleting one it waits for until it is gone
//! or as old as the lease's time to live, and then it holds again. None of this depends on the
//! lease, so a collector paused across a forced break ([`break_lease`]) deletes nothing a
//! request relies on ([`read_lease`]; `docs/gc.md`). The invariant and the race analysis are
//! written out in `docs/gc.md`, "Why an acknowledged push loses nothing".

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use futures_util::StreamExt;
use serde::Serialize;
use serde_json::Value;
use validator::Digest;

use crate::repo::INDEX_LIMIT;
use crate::repo::{REFERENCE_WINDOW, Repos};
use crate::storage::layout::{self, BlobPart, RepoPart};
use crate::storage::{Etag, Key, PutMode, Store, StoreError};
mod mark;
mod metrics;
mod run_lease;
mod sweep;

use mark::*;
pub use metrics::GcMetrics;
use run_lease::Lease;
pub use run_lease::{LeaseInfo, break_lease, read_lease};
use sweep::*;

use crate::tombstone::{Doomed, Epochs, TOMBSTONE_LIMIT, Tombstone, aged, read_record};
use validator::Name;

/// Default grace window: content written or held within it is never collected.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(3600);
/// Default lease time to live: a lease not renewed for this long belongs to a collector that
/// died, and another collector may take it over. It also bounds how long a request waits for a
/// killed collector: a tombstone committed to deleting expires after it.
pub const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(15);
/// Shortest lease time to live (store timestamps may have whole seconds).
pub use crate::lease::MIN_LEASE_TTL;
/// Largest manifest read while marking.
const MANIFEST_LIMIT: u64 = 16 << 20;

/// The smallest grace window that keeps every concurrent push safe: it must exceed the
/// longest time a manifest PUT may take between holding its references and publishing
/// ([`REFERENCE_WINDOW`]) plus the resolution of store timestamps (S3 `Last-Modified` has whole
/// seconds). Smaller values are only safe on a registry nobody writes to meanwhile.
pub const MIN_SAFE_GRACE: Duration = Duration::from_secs(REFERENCE_WINDOW.as_secs() + 2);

/// What a collection run may do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GcOptions {
    /// Content written or held more recently than this is kept (default 1 h).
    pub grace: Duration,
    /// Collect manifests no tag reaches (default false: every manifest is a root).
    pub delete_untagged: bool,
    /// Keep the referrers of every kept manifest (default true).
    pub keep_referrers: bool,
    /// Report what would go, delete nothing, write nothing (default false).
    pub dry_run: bool,
    /// Digests swept at once (default 16).
    pub concurrency: usize,
    /// How long the lease lives without renewal (default 15 s, at least 2 s). The collector
    /// renews it every quarter of this and stops when it could not renew for half of it; it
    /// finishes the deletions of a digest within half of it after committing to them, and
    /// requests wait for such a commitment at most this long, so a collector that dies blocks
    /// nothing for longer than this.
    pub lease_ttl: Duration,
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions {
            grace: DEFAULT_GRACE,
            delete_untagged: false,
            keep_referrers: true,
            dry_run: false,
            concurrency: 16,
            lease_ttl: DEFAULT_LEASE_TTL,
        }
    }
}

/// What kind of object a [`Deletion`] removes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ObjectKind {
    /// Content bytes under `blobs/` (a layer, a config or a manifest's bytes).
    Blob,
    /// A repository's membership link of a blob.
    BlobLink,
    /// A repository's membership link of a manifest (with its referrers entry).
    ManifestLink,
}

/// One object removed (or, in a dry run, that would be).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize)]
pub struct Deletion {
    /// What it is.
    pub kind: ObjectKind,
    /// The digest.
    pub digest: Digest,
    /// The repository, for links.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub repository: Option<String>,
    /// Bytes freed (the content size for blobs, 0 for links).
    pub bytes: u64,
}

/// The outcome of a run.
#[derive(Debug, Clone, Default, Serialize)]
pub struct GcReport {
    /// True when nothing was deleted on purpose.
    pub dry_run: bool,
    /// The grace window, in seconds.
    pub grace_secs: f64,
    /// Repositories looked at.
    pub repositories: usize,
    /// Manifests kept (counted once per repository).
    pub marked_manifests: usize,
    /// Blobs kept (counted once per repository).
    pub marked_blobs: usize,
    /// Content objects (blobs and manifest bytes) deleted.
    pub deleted_blobs: u64,
    /// Bytes of the content deleted.
    pub deleted_bytes: u64,
    /// Blob links deleted.
    pub deleted_blob_links: u64,
    /// Manifest links deleted.
    pub deleted_manifest_links: u64,
    /// Leftovers removed: stale hold records and tombstones of earlier runs.
    pub deleted_records: u64,
    /// Unreachable objects kept because they are younger than the grace window.
    pub kept_young: u64,
    /// Digests kept because a request held them during the run.
    pub kept_held: u64,
    /// Everything deleted (or that would be), sorted.
    pub deleted: Vec<Deletion>,
    /// Wall time of the run, in seconds.
    pub elapsed_secs: f64,
}

/// Why a run stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GcError {
    /// A store operation failed.
    #[error("garbage collection: store operation failed")]
    Store(#[from] StoreError),
    /// Another collector holds the lease.
    #[error(
        "another garbage collection is running ({key} was renewed {age_secs} s ago; it is stale after {stale_secs} s; rdctl registry gc --break-lease)"
    )]
    Locked {
        /// The lease key.
        key: Key,
        /// Seconds since it was renewed.
        age_secs: u64,
        /// When it counts as stale.
        stale_secs: u64,
    },
    /// The mark could not complete; nothing was deleted.
    #[error(
        "garbage collection: cannot mark repository {repository}: {reason}; nothing was deleted"
    )]
    Mark {
        /// The repository.
        repository: String,
        /// What was wrong.
        reason: String,
    },
    /// Removing a manifest link failed.
    #[error("garbage collection: removing manifest {digest} from {repository} failed: {reason}")]
    Unlink {
        /// The repository.
        repository: String,
        /// The manifest.
        digest: Digest,
        /// The cause.
        reason: String,
    },
    /// The lease was taken over, broken or could not be renewed in time (the run may be
    /// presumed dead); the run stopped.
    #[error("garbage collection lost its lease {key}; it stopped")]
    LeaseLost {
        /// The lease key.
        key: Key,
    },
    /// `break_lease` found a live lease and was not forced.
    #[error(
        "the garbage collection lease {key} is live (held by {holder}, renewed {age_secs} s ago, stale after {ttl_secs} s); use --force to break it"
    )]
    LeaseLive {
        /// The lease key.
        key: Key,
        /// Who holds it.
        holder: String,
        /// Seconds since it was renewed.
        age_secs: u64,
        /// Its time to live.
        ttl_secs: u64,
    },
}

/// What the snapshot found in one repository.
#[derive(Debug, Default)]
struct RepoSnapshot {
    /// Each blob link's digest with the epochs its keys have.
    blob_links: BTreeMap<Digest, Vec<String>>,
    /// Each manifest link's digest with the epochs its keys have.
    manifest_links: BTreeMap<Digest, Vec<String>>,
    referrers: BTreeSet<Digest>,
    has_tags: bool,
}

/// What the snapshot found for one digest under `blobs/`: the epochs of its bytes and hold
/// records, and whether it has a record.
#[derive(Debug, Default, Clone)]
struct BlobSnapshot {
    data: Vec<String>,
    used: Vec<String>,
    tombstone: bool,
}

/// What the mark kept in one repository.
#[derive(Debug, Default)]
struct Marked {
    manifests: BTreeSet<Digest>,
    blobs: BTreeSet<Digest>,
}

/// The sweep's plan for one digest.
#[derive(Debug, Default)]
struct Plan {
    /// Links their repository does not keep, with the epoch of each key.
    blob_links: Vec<(Name, String)>,
    manifest_links: Vec<(Name, String)>,
    /// Links their repository keeps that have a key of an epoch: a key of an epoch that is no
    /// longer current goes (a PUT that raced an API DELETE of the link wrote it at the epoch
    /// the DELETE moved away from; `docs/gc.md`, "The API's DELETEs").
    kept_blob_links: Vec<(Name, String)>,
    kept_manifest_links: Vec<(Name, String)>,
    /// The epochs of the bytes and of the hold records listed.
    data: Vec<String>,
    used: Vec<String>,
    /// Some repository keeps the digest: its current bytes and hold record stay (keys of
    /// dead epochs go all the same).
    kept: bool,
}

/// What sweeping one digest did.
#[derive(Debug, Default)]
struct Outcome {
    deleted: Vec<Deletion>,
    records: u64,
    young: u64,
    held: bool,
}

/// Runs one collection over `store`. See the module docs for the algorithm.
pub async fn collect(store: Arc<dyn Store>, opts: &GcOptions) -> Result<GcReport, GcError> {
    let started = Instant::now();
    let lease = if opts.dry_run {
        None
    } else {
        Some(Lease::acquire(store.clone(), opts.lease_ttl).await?)
    };
    let result = run(store.clone(), opts, lease.as_ref()).await;
    if let Some(lease) = lease {
        lease.release().await;
    }
    let mut report = result?;
    report.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(report)
}

async fn run(
    store: Arc<dyn Store>,
    opts: &GcOptions,
    lease: Option<&Lease>,
) -> Result<GcReport, GcError> {
    let t0 = lease.map(Lease::started).unwrap_or_else(SystemTime::now);
    let cutoff = t0.checked_sub(opts.grace).unwrap_or(SystemTime::UNIX_EPOCH);
    let repos = crate::features::with_hooks(Repos::new(store.clone()));
    let mut report = GcReport {
        dry_run: opts.dry_run,
        grace_secs: opts.grace.as_secs_f64(),
        ..GcReport::default()
    };

    let mut pass = Pass::default();
    report.repositories =
        mark_all(store.as_ref(), &repos, opts, lease, &mut pass, &mut report).await?;
    pass.kept.seal();
    let ctx = Sweep {
        store: store.as_ref(),
        repos: &repos,
        cutoff,
        dry_run: opts.dry_run,
        lease,
    };
    sweep_all(&ctx, opts, &mut pass, &mut report).await?;
    report.deleted.sort();
    Ok(report)
}

/// Marks, one repository at a time as the listing of `repositories/` reaches it; returns how
/// many repositories it saw.
async fn mark_all(
    store: &dyn Store,
    repos: &Repos,
    opts: &GcOptions,
    lease: Option<&Lease>,
    pass: &mut Pass,
    report: &mut GcReport,
) -> Result<usize, GcError> {
    let mut seen: BTreeSet<Name> = BTreeSet::new();
    let mut current: Option<(Name, RepoSnapshot)> = None;
    let mut after: Option<Key> = None;
    loop {
        let page = store
            .list_page(&layout::repositories_root(), after.as_ref(), LIST_PAGE)
            .await?;
        let end = page.len() < LIST_PAGE;
        after = page.last().cloned().or(after);
        let mut ready = Vec::new();
        for k in &page {
            let Some((name, part)) = layout::parse_repo_key(k) else {
                continue;
            };
            if current.as_ref().is_none_or(|(n, _)| *n != name) {
                ready.extend(current.take());
                // A repository's keys are contiguous in key order (name segments never start
                // with `_`, every key below the name does); marking half of one could collect
                // what the other half keeps.
                if !seen.insert(name.clone()) {
                    return Err(GcError::Mark {
                        repository: name.to_string(),
                        reason: "the store listed its keys in two runs".to_owned(),
                    });
                }
                current = Some((name, RepoSnapshot::default()));
            }
            let Some((_, r)) = current.as_mut() else {
                continue;
            };
            match part {
                RepoPart::Marker => {}
                RepoPart::Tags => r.has_tags = true,
                RepoPart::BlobLink(d, epoch) => {
                    r.blob_links.entry(d).or_default().push(epoch);
                }
                RepoPart::ManifestLink(d, epoch) => {
                    r.manifest_links.entry(d).or_default().push(epoch);
                }
                RepoPart::Referrers(d) => {
                    r.referrers.insert(d);
                }
            }
        }
        if end {
            ready.extend(current.take());
        }
        pass.mark(store, repos, opts, lease, ready, report).await?;
        if end {
            break;
        }
    }
    Ok(seen.len())
}

/// Sweeps digest by digest as the listing of `blobs/` reaches them, then the link candidates
/// of digests without any object under `blobs/`.
async fn sweep_all(
    ctx: &Sweep<'_>,
    opts: &GcOptions,
    pass: &mut Pass,
    report: &mut GcReport,
) -> Result<(), GcError> {
    let mut current: Option<(Digest, BlobSnapshot)> = None;
    let mut after: Option<Key> = None;
    loop {
        let page = ctx
            .store
            .list_page(&layout::blobs_root(), after.as_ref(), LIST_PAGE)
            .await?;
        let end = page.len() < LIST_PAGE;
        after = page.last().cloned().or(after);
        let mut found = Vec::new();
        for k in &page {
            let Some((d, part)) = layout::parse_blob_key(k) else {
                continue;
            };
            if current.as_ref().is_none_or(|(c, _)| *c != d) {
                found.extend(current.take());
                current = Some((d, BlobSnapshot::default()));
            }
            let Some((_, b)) = current.as_mut() else {
                continue;
            };
            match part {
                BlobPart::Data(e) => b.data.push(e),
                BlobPart::Used(e) => b.used.push(e),
                BlobPart::Tombstone => b.tombstone = true,
            }
        }
        if end {
            found.extend(current.take());
        }
        let mut batch = plan_batch(ctx, opts, pass, found, report).await?;
        if end {
            batch.extend(std::mem::take(&mut pass.links));
        }
        sweep_batch(ctx, opts, batch, report).await?;
        if end {
            break;
        }
    }
    Ok(())
}

/// The candidates of the digests one listing page `found`: their link candidates from the mark,
/// and their bytes and hold record when nobody marked them. Leftover tombstones of other runs
/// are removed on the way.
async fn plan_batch(
    ctx: &Sweep<'_>,
    opts: &GcOptions,
    pass: &mut Pass,
    found: Vec<(Digest, BlobSnapshot)>,
    report: &mut GcReport,
) -> Result<Vec<(Digest, Plan)>, GcError> {
    let mut batch = Vec::new();
    for (d, b) in found {
        let mut plan = pass.links.remove(&d).unwrap_or_default();
        // A tombstone found now was left by a run that died or lost its lease (this run's
        // own tombstones are gone before the listing passes on); requests waiting on it may
        // go on. One whose run committed to deleting and may still be at it stays until it
        // expires, and its digest waits for the next run.
        if b.tombstone && !opts.dry_run {
            if let Some(lease) = ctx.lease {
                lease.check()?;
            }
            match remove_leftover(ctx.store, &d).await? {
                Leftover::Removed => report.deleted_records += 1,
                Leftover::Gone => {}
                Leftover::Deleting => continue,
            }
        }
        // Bytes nobody marked have no marked link either: every link of theirs is a
        // candidate, so they go if the links do. Bytes and hold records of dead epochs go
        // whether or not the digest is kept.
        plan.kept = pass.kept.contains(&d);
        // Only legacy keys, one of each: nothing at a dead epoch (a record can name a newer
        // data epoch only after a commit, which needs an unkept digest).
        let dead_epochs = b.data.len() > 1
            || b.used.len() > 1
            || b.data.iter().chain(&b.used).any(|e| !e.is_empty());
        plan.data = b.data;
        plan.used = b.used;
        let some_data = !plan.kept && (!plan.data.is_empty() || !plan.used.is_empty());
        if some_data
            || (plan.kept && dead_epochs)
            || !plan.blob_links.is_empty()
            || !plan.manifest_links.is_empty()
            || !plan.kept_blob_links.is_empty()
            || !plan.kept_manifest_links.is_empty()
        {
            batch.push((d, plan));
        }
    }
    Ok(batch)
}

/// Sweeps `batch` with `opts.concurrency` digests at a time; the first failure is returned
/// once the others finished.
async fn sweep_batch(
    ctx: &Sweep<'_>,
    opts: &GcOptions,
    batch: Vec<(Digest, Plan)>,
    report: &mut GcReport,
) -> Result<(), GcError> {
    let mut first_error = None;
    let mut outcomes = futures_util::stream::iter(batch)
        .map(|(d, plan)| ctx.sweep(d, plan))
        .buffer_unordered(opts.concurrency.max(1));
    while let Some(r) = outcomes.next().await {
        match r {
            Ok(o) => tally(report, o),
            Err(e) => {
                tracing::warn!(error = %e, "garbage collection: sweeping a digest failed");
                first_error.get_or_insert(e);
            }
        }
    }
    drop(outcomes);
    match first_error {
        Some(e) => Err(e),
        None => Ok(()),
    }
}

/// Adds what sweeping one digest did to the report.
fn tally(report: &mut GcReport, o: Outcome) {
    for del in &o.deleted {
        match del.kind {
            ObjectKind::Blob => {
                report.deleted_blobs += 1;
                report.deleted_bytes += del.bytes;
            }
            ObjectKind::BlobLink => report.deleted_blob_links += 1,
            ObjectKind::ManifestLink => report.deleted_manifest_links += 1,
        }
    }
    report.deleted.extend(o.deleted);
    report.deleted_records += o.records;
    report.kept_young += o.young;
    report.kept_held += u64::from(o.held);
}

/// Keys read per listing page while walking `repositories/` and `blobs/`.
const LIST_PAGE: usize = 1000;
