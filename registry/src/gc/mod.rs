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
//! written out in `docs/architecture.md`, "Garbage collection".

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
mod metrics;
mod run_lease;

pub use metrics::GcMetrics;
use run_lease::Lease;
pub use run_lease::{LeaseInfo, break_lease, read_lease};

use crate::tombstone::{Phase, TOMBSTONE_LIMIT, Tombstone, aged};
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
    /// The deletions of one digest did not finish within half the lease's time to live after
    /// the collector committed to them (requests stop waiting for its tombstone then); the run
    /// stopped.
    #[error(
        "garbage collection: deleting {digest} took longer than {window_secs} s after committing to it; it stopped"
    )]
    DeleteWindow {
        /// The digest.
        digest: Digest,
        /// The window, in seconds.
        window_secs: f64,
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
    blob_links: BTreeSet<Digest>,
    manifest_links: BTreeSet<Digest>,
    referrers: BTreeSet<Digest>,
    has_tags: bool,
}

/// What the snapshot found for one digest under `blobs/`.
#[derive(Debug, Default, Clone, Copy)]
struct BlobSnapshot {
    data: bool,
    used: bool,
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
    blob_links: Vec<Name>,
    manifest_links: Vec<Name>,
    data: bool,
    used: bool,
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
                RepoPart::BlobLink(d) => {
                    r.blob_links.insert(d);
                }
                RepoPart::ManifestLink(d) => {
                    r.manifest_links.insert(d);
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
                BlobPart::Data => b.data = true,
                BlobPart::Used => b.used = true,
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
        // candidate, so they go if the links do.
        if !pass.kept.contains(&d) {
            plan.data = b.data;
            plan.used = b.used;
        }
        if plan.data || plan.used || !plan.blob_links.is_empty() || !plan.manifest_links.is_empty()
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

/// What a pass carries from the mark to the sweep: the digests some repository keeps, and the
/// link candidates (links their repository does not keep) by digest. Nothing else of the
/// store stays in memory: its keys are read a page at a time.
#[derive(Default)]
struct Pass {
    kept: KeptDigests,
    links: BTreeMap<Digest, Plan>,
}

impl Pass {
    /// Marks the repositories of `batch` (at most [`GcOptions::concurrency`] at once) and
    /// folds each result in as it completes: what it keeps into `kept`, the links it does not
    /// into `links`. A repository's snapshot and marks are dropped once folded in.
    async fn mark(
        &mut self,
        store: &dyn Store,
        repos: &Repos,
        opts: &GcOptions,
        lease: Option<&Lease>,
        batch: Vec<(Name, RepoSnapshot)>,
        report: &mut GcReport,
    ) -> Result<(), GcError> {
        // Boxed so the stream's item type names no closure lifetimes (the run is spawned).
        type Marking<'a> =
            crate::storage::BoxFuture<'a, (&'a Name, &'a RepoSnapshot, Result<Marked, GcError>)>;
        let futures: Vec<Marking<'_>> = batch
            .iter()
            .map(|(name, snap)| {
                Box::pin(async move { (name, snap, mark(store, repos, name, snap, opts).await) })
                    as Marking<'_>
            })
            .collect();
        let mut marks =
            futures_util::stream::iter(futures).buffer_unordered(opts.concurrency.max(1));
        while let Some((name, snap, m)) = marks.next().await {
            if let Some(lease) = lease {
                lease.check()?;
            }
            let m = m?;
            report.marked_manifests += m.manifests.len();
            report.marked_blobs += m.blobs.len();
            for d in snap.blob_links.difference(&m.blobs) {
                let plan = self.links.entry(d.clone()).or_default();
                plan.blob_links.push(name.clone());
            }
            for d in snap.manifest_links.difference(&m.manifests) {
                let plan = self.links.entry(d.clone()).or_default();
                plan.manifest_links.push(name.clone());
            }
            for d in m.manifests.iter().chain(m.blobs.iter()) {
                self.kept.insert(d);
            }
        }
        Ok(())
    }
}

/// The set of digests some repository keeps: SHA-256 digests as sorted 32-byte arrays
/// (3.2 MB for 100,000), any other algorithm as parsed digests. Filled during the mark, then
/// sealed (sorted, deduplicated) before the sweep looks anything up.
#[derive(Default)]
struct KeptDigests {
    sha256: Vec<[u8; 32]>,
    other: BTreeSet<Digest>,
}

impl KeptDigests {
    fn insert(&mut self, d: &Digest) {
        match sha256_bytes(d) {
            Some(b) => self.sha256.push(b),
            None => {
                self.other.insert(d.clone());
            }
        }
    }

    fn seal(&mut self) {
        self.sha256.sort_unstable();
        self.sha256.dedup();
        self.sha256.shrink_to_fit();
    }

    fn contains(&self, d: &Digest) -> bool {
        match sha256_bytes(d) {
            Some(b) => self.sha256.binary_search(&b).is_ok(),
            None => self.other.contains(d),
        }
    }
}

/// The 32 bytes of a SHA-256 digest; `None` for other algorithms.
fn sha256_bytes(d: &Digest) -> Option<[u8; 32]> {
    if d.algorithm() != validator::Algorithm::Sha256 {
        return None;
    }
    let hex = d.encoded().as_bytes();
    if hex.len() != 64 {
        return None;
    }
    let nibble = |c: u8| (c as char).to_digit(16).map(|v| v as u8);
    let mut out = [0u8; 32];
    for (o, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        *o = (nibble(pair[0])? << 4) | nibble(pair[1])?;
    }
    Some(out)
}

/// Marks what repository `name` keeps.
async fn mark(
    store: &dyn Store,
    repos: &Repos,
    name: &Name,
    snap: &RepoSnapshot,
    opts: &GcOptions,
) -> Result<Marked, GcError> {
    let fail = |reason: String| GcError::Mark {
        repository: name.to_string(),
        reason,
    };
    let mut queue: VecDeque<Digest> = VecDeque::new();
    if snap.has_tags {
        let tags = repos
            .tag_digests(name)
            .await
            .map_err(|e| fail(format!("cannot read the tag index: {e}")))?;
        queue.extend(tags);
    }
    if !opts.delete_untagged {
        queue.extend(snap.manifest_links.iter().cloned());
    }
    let mut m = Marked::default();
    while let Some(d) = queue.pop_front() {
        if !m.manifests.insert(d.clone()) {
            continue;
        }
        let bytes = match store.get(&layout::blob_data(&d), MANIFEST_LIMIT).await {
            Ok(doc) => doc.bytes,
            Err(e) if e.is_not_found() => {
                return Err(fail(format!("the bytes of kept manifest {d} are missing")));
            }
            Err(e) => return Err(e.into()),
        };
        let v: Value = serde_json::from_slice(&bytes)
            .map_err(|e| fail(format!("kept manifest {d} is not JSON: {e}")))?;
        let digest_of = |desc: &Value, field: &str| -> Result<Digest, GcError> {
            desc.get("digest")
                .and_then(Value::as_str)
                .and_then(|s| Digest::parse(s).ok())
                .ok_or_else(|| fail(format!("manifest {d}: {field} has no valid digest")))
        };
        if let Some(children) = v.get("manifests").and_then(Value::as_array) {
            for (i, c) in children.iter().enumerate() {
                queue.push_back(digest_of(c, &format!("manifests[{i}]"))?);
            }
        }
        if let Some(config) = v.get("config") {
            m.blobs.insert(digest_of(config, "config")?);
        }
        for field in ["layers", "blobs"] {
            if let Some(list) = v.get(field).and_then(Value::as_array) {
                for (i, l) in list.iter().enumerate() {
                    m.blobs.insert(digest_of(l, &format!("{field}[{i}]"))?);
                }
            }
        }
        if opts.keep_referrers && snap.referrers.contains(&d) {
            match store.get(&layout::referrers(name, &d), INDEX_LIMIT).await {
                Ok(doc) => {
                    let v: Value = serde_json::from_slice(&doc.bytes)
                        .map_err(|e| fail(format!("referrers of {d} are not JSON: {e}")))?;
                    for (i, r) in v
                        .get("manifests")
                        .and_then(Value::as_array)
                        .into_iter()
                        .flatten()
                        .enumerate()
                    {
                        queue.push_back(digest_of(r, &format!("referrers[{i}]"))?);
                    }
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
    }
    Ok(m)
}

struct Sweep<'a> {
    store: &'a dyn Store,
    repos: &'a Repos,
    cutoff: SystemTime,
    dry_run: bool,
    lease: Option<&'a Lease>,
}

impl Sweep<'_> {
    /// True when `key` was last written before the cutoff; `None` when it is gone.
    async fn old(&self, key: &Key) -> Result<Option<(bool, u64)>, GcError> {
        match self.store.stat(key).await {
            Ok(m) => Ok(Some((m.modified < self.cutoff, m.size))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    async fn sweep(&self, d: Digest, plan: Plan) -> Result<Outcome, GcError> {
        let mut out = Outcome::default();
        // Keep only candidates older than the cutoff; a young link keeps the bytes too.
        let mut blob_links = Vec::new();
        let mut manifest_links = Vec::new();
        let mut data_ok = plan.data;
        for (names, manifest, keep) in [
            (&plan.blob_links, false, &mut blob_links),
            (&plan.manifest_links, true, &mut manifest_links),
        ] {
            for name in names {
                let key = if manifest {
                    layout::manifest_link(name, &d)
                } else {
                    layout::blob_link(name, &d)
                };
                match self.old(&key).await? {
                    Some((true, _)) => keep.push(name.clone()),
                    Some((false, _)) => {
                        out.young += 1;
                        data_ok = false;
                    }
                    None => {}
                }
            }
        }
        let mut data_size = 0;
        if data_ok {
            match self.old(&layout::blob_data(&d)).await? {
                Some((true, size)) => data_size = size,
                Some((false, _)) => {
                    out.young += 1;
                    data_ok = false;
                }
                None => data_ok = false,
            }
        }
        // The hold record goes with the bytes, or when there are no bytes left to protect.
        let used_ok = plan.used && (data_ok || !plan.data) && out.young == 0;
        if blob_links.is_empty() && manifest_links.is_empty() && !data_ok && !used_ok {
            return Ok(out);
        }

        let tombstone = layout::blob_tombstone(&d);
        let mut written = None;
        if let (false, Some(lease)) = (self.dry_run, self.lease) {
            // Asked of the store, not of this process: a run paused across a forced break (or
            // a takeover) learns of it here.
            lease.ensure_held().await?;
            match self.write_tombstone(&tombstone, lease).await? {
                Some(etag) => written = Some(etag),
                // Another run committed to deleting this digest and may still be at it.
                None => return Ok(out),
            }
        }
        // Tombstone first, then the hold record: a request that held the digest after the
        // cutoff is seen here, and one that holds it from now on waits for the tombstone.
        let held = match self.old(&layout::blob_used(&d)).await {
            Ok(Some((old, _))) => !old,
            Ok(None) => false,
            Err(e) => {
                self.remove_tombstone(&tombstone, written.as_ref()).await;
                return Err(e);
            }
        };
        // Deleting needs a live lease: requests release the tombstones of a stale one.
        let lease_ok = self.lease.map_or(Ok(()), Lease::check);
        if held || lease_ok.is_err() {
            self.remove_tombstone(&tombstone, written.as_ref()).await;
            lease_ok?;
            out.held = true;
            return Ok(out);
        }
        // Commit: turn the tombstone into "deleting", conditionally on the version this run
        // wrote. A request that met the tombstone meanwhile released it (a conditional replace
        // too), and then this fails and nothing of the digest goes: the store orders the two,
        // whatever this process's clocks and pauses (a forced break, SIGSTOP). Requests wait
        // for a "deleting" tombstone until it is gone or expired (its time to live), and this
        // run deletes only within half of that after sending the commit.
        let mut deadline = None;
        let mut ours = written.clone();
        if let (Some(etag), Some(lease)) = (written, self.lease) {
            let sent = Instant::now();
            match self
                .store
                .put(&tombstone, lease.commit_body(), PutMode::Replace(etag))
                .await
            {
                Ok(etag) => {
                    deadline = Some((sent, lease.0.ttl() / 2));
                    ours = Some(etag);
                }
                Err(StoreError::PreconditionFailed { .. }) => {
                    // Released by a request that relies on the digest: keep everything, and
                    // remove the request's marker while this run still holds the lease.
                    self.remove_tombstone(&tombstone, None).await;
                    out.held = true;
                    return Ok(out);
                }
                Err(e) if e.is_not_found() => {
                    out.held = true;
                    return Ok(out);
                }
                Err(e) => {
                    self.remove_tombstone(&tombstone, ours.as_ref()).await;
                    return Err(e.into());
                }
            }
        }
        let r = self
            .delete_candidates(
                &d,
                (&blob_links, &manifest_links),
                data_ok.then_some(data_size),
                used_ok,
                deadline,
                &mut out,
            )
            .await;
        self.remove_tombstone(&tombstone, ours.as_ref()).await;
        r.map(|()| out)
    }

    async fn delete_candidates(
        &self,
        d: &Digest,
        (blob_links, manifest_links): (&[Name], &[Name]),
        data: Option<u64>,
        used: bool,
        deadline: Option<(Instant, Duration)>,
        out: &mut Outcome,
    ) -> Result<(), GcError> {
        let past_window = || GcError::DeleteWindow {
            digest: d.clone(),
            window_secs: deadline.map_or(0.0, |(_, window)| window.as_secs_f64()),
        };
        let until = deadline.map(|(sent, window)| sent + window);
        let in_window = || match deadline {
            Some((sent, window)) if sent.elapsed() >= window => Err(past_window()),
            _ => Ok(()),
        };
        let deletion = |kind, name: Option<&Name>, bytes| Deletion {
            kind,
            digest: d.clone(),
            repository: name.map(|n| n.to_string()),
            bytes,
        };
        for name in manifest_links {
            if let (false, Some(lease)) = (self.dry_run, self.lease) {
                lease.check()?;
                in_window()?;
            }
            if !self.dry_run {
                // Also drops the manifest from its subject's referrers. No tag can point at it:
                // one set after the mark came from a PUT that held the digest.
                // Each of its writes looks at the window first: a run paused in the middle
                // (SIGSTOP) does not go on with the rest once requests may rely on the digest.
                let done = self
                    .repos
                    .delete_manifest_until(name, d, until)
                    .await
                    .map_err(|e| GcError::Unlink {
                        repository: name.to_string(),
                        digest: d.clone(),
                        reason: e.to_string(),
                    })?;
                if done.is_none() {
                    return Err(past_window());
                }
            }
            out.deleted
                .push(deletion(ObjectKind::ManifestLink, Some(name), 0));
        }
        let mut data = data;
        for name in blob_links {
            let key = layout::blob_link(name, d);
            if !self.dry_run {
                // An upload of fresh bytes links them without holding the digest (fresh bytes
                // are no candidate); if it rewrote a stale link of this digest since the check
                // above, the link and the bytes stay.
                match self.old(&key).await? {
                    Some((true, _)) => {
                        in_window()?;
                        if !self.delete(&key, until).await? {
                            return Err(past_window());
                        }
                    }
                    Some((false, _)) => {
                        out.young += 1;
                        data = None;
                        continue;
                    }
                    None => continue,
                }
            }
            out.deleted
                .push(deletion(ObjectKind::BlobLink, Some(name), 0));
        }
        if let Some(size) = data {
            if !self.dry_run {
                in_window()?;
                if !self.delete(&layout::blob_data(d), until).await? {
                    return Err(past_window());
                }
            }
            out.deleted.push(deletion(ObjectKind::Blob, None, size));
        }
        if used && (data.is_some() || out.young == 0) {
            if !self.dry_run {
                in_window()?;
                if !self.delete(&layout::blob_used(d), until).await? {
                    return Err(past_window());
                }
            }
            out.records += 1;
        }
        Ok(())
    }

    /// Deletes `key` (gone already counts); with `until`, only before it (the store looks
    /// right before the request that removes it): false when it had passed.
    async fn delete(&self, key: &Key, until: Option<Instant>) -> Result<bool, GcError> {
        if let Some(lease) = self.lease {
            lease.check()?;
        }
        let r = match until {
            Some(until) => self.store.delete_before(key, until).await,
            None => self.store.delete(key).await.map(|()| true),
        };
        match r {
            Ok(done) => Ok(done),
            Err(e) if e.is_not_found() => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes this run's deciding tombstone at `key` and returns its version, never over a
    /// tombstone another run committed to deleting under (that one stays until it is as old as
    /// its time to live; `None` then): a create-only put, or a conditional replace of what is
    /// there (a released marker, a tombstone still deciding or expired), so no pause of this
    /// process between its checks and its writes can undo another run's commit.
    async fn write_tombstone(&self, key: &Key, lease: &Lease) -> Result<Option<Etag>, GcError> {
        for _ in 0..TOMBSTONE_ATTEMPTS {
            match self
                .store
                .put(key, lease.tombstone_body(), PutMode::Create)
                .await
            {
                Ok(etag) => return Ok(Some(etag)),
                Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            let doc = match self.store.get(key, TOMBSTONE_LIMIT).await {
                Ok(doc) => doc,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            };
            let there = Tombstone::parse(&doc.bytes);
            if let (Some(Phase::Deleting), Some(ttl)) = (there.phase, there.ttl)
                && !aged(self.store, key, ttl).await?
            {
                return Ok(None);
            }
            match self
                .store
                .put(key, lease.tombstone_body(), PutMode::Replace(doc.etag))
                .await
            {
                Ok(etag) => return Ok(Some(etag)),
                Err(StoreError::PreconditionFailed { .. }) => continue,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        // Rewritten under us every time: leave the digest to the next run.
        Ok(None)
    }

    /// Removes the tombstone at `key` (this run's, last written as version `ours`, or a
    /// request's release marker). Deletes cannot be conditional (SeaweedFS has none), so it
    /// deletes only while the store says this run still holds the lease; a run that lost it
    /// releases its own tombstone with a conditional replace instead (never touching one the
    /// run holding the lease now wrote), and the next run removes the marker.
    async fn remove_tombstone(&self, key: &Key, ours: Option<&Etag>) {
        if self.dry_run {
            return;
        }
        if let Some(lease) = self.lease
            && !matches!(lease.0.still_held().await, Ok(true))
        {
            if let Some(etag) = ours
                && let Err(e) = self
                    .store
                    .put(
                        key,
                        Tombstone::released_body(),
                        PutMode::Replace(etag.clone()),
                    )
                    .await
                && !matches!(e, StoreError::PreconditionFailed { .. })
                && !e.is_not_found()
            {
                tracing::warn!(key = %key, error = %e, "garbage collection could not release its tombstone");
            }
            return;
        }
        if let Err(e) = self.store.delete(key).await
            && !e.is_not_found()
        {
            // Requests on this digest wait for it while this run's lease lives, then release it;
            // the next run removes it.
            tracing::warn!(key = %key, error = %e, "garbage collection could not remove a tombstone");
        }
    }
}

/// What became of a tombstone a run found left over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Leftover {
    /// Removed.
    Removed,
    /// Already gone.
    Gone,
    /// A run committed to deleting the digest less than its time to live ago: left in place.
    Deleting,
}

/// Removes a tombstone of another run found under `blobs/`, unless that run committed to
/// deleting and may still be at it (requests rely on it to wait until then).
async fn remove_leftover(store: &dyn Store, d: &Digest) -> Result<Leftover, GcError> {
    let key = layout::blob_tombstone(d);
    let doc = match store.get(&key, TOMBSTONE_LIMIT).await {
        Ok(doc) => doc,
        Err(e) if e.is_not_found() => return Ok(Leftover::Gone),
        Err(e) => return Err(e.into()),
    };
    let t = Tombstone::parse(&doc.bytes);
    if let (Some(Phase::Deleting), Some(ttl)) = (t.phase, t.ttl)
        && !aged(store, &key, ttl).await?
    {
        return Ok(Leftover::Deleting);
    }
    match store.delete(&key).await {
        Ok(()) => Ok(Leftover::Removed),
        Err(e) if e.is_not_found() => Ok(Leftover::Gone),
        Err(e) => Err(e.into()),
    }
}

/// Conditional writes a run tries before it leaves a digest whose tombstone keeps changing.
const TOMBSTONE_ATTEMPTS: usize = 8;
