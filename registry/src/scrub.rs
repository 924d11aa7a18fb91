//! Scrub: re-read every blob, recompute its digest, check every manifest, quarantine what is
//! corrupt. Behind `rdctl registry scrub` and the `[scrub]` schedule of `rdctl registry serve`.
//!
//! [`scrub`] runs one pass over any [`Store`]:
//!
//! 1. **Blobs.** Every `blobs/<alg>/…/data` is streamed through a [`validator::Digester`],
//!    paced to [`ScrubOptions::rate`] bytes per second. A blob whose bytes do not hash to its
//!    key is *quarantined*: its bytes are copied to `_rd/quarantine/<alg>/<hex>/data` with a
//!    record beside them (`…/record`: expected and found digest, size, time), then the blob key
//!    is deleted. From then on a GET answers `BLOB_UNKNOWN` (a manifest GET or
//!    HEAD `MANIFEST_UNKNOWN`), never the wrong bytes, and the next push of the same digest commits
//!    fresh bytes under the key (commits are create-only, so it succeeds): that heals it.
//! 2. **Manifests.** Every manifest link of every repository: its bytes must exist, pass the
//!    registry's push checks (`check_document`), and every blob and child manifest it names must
//!    be in the repository with its bytes present. Problems are reported.
//! 3. **Withdrawal.** A manifest naming a blob that was quarantined (by this pass or an earlier
//!    one, and not pushed again since) is *withdrawn*: its own (intact) bytes are moved to the
//!    quarantine the same way, with a record naming the quarantined blob, and so is every index
//!    listing a withdrawn manifest. A manifest GET or HEAD then answers 404 `MANIFEST_UNKNOWN`
//!    whose detail names the quarantined blob, so crane, skopeo and rdctl push the image again
//!    instead of finding it present, and that push heals it: the missing layer is uploaded and
//!    the manifest's bytes are committed afresh. Tags and links are left as they are.
//!
//! A blob GET does not hash what it serves: the filesystem store hands out mapped file windows
//! so pulls run at `sendfile` speed, and a full hash per GET would halve that. It does compare
//! the stored size with the size recorded at push (free: both are read anyway), and clients
//! verify digests. Scrub is the check for silent corruption.
//!
//! A re-push that lands between the moment a scrub finds a blob corrupt and the moment it
//! deletes it is lost with the corrupt bytes; the client's manifest PUT then answers
//! `MANIFEST_BLOB_UNKNOWN` and the client pushes the blob again.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use validator::{Digest, Name};

use crate::storage::layout::{self, BlobPart, RepoPart};
use crate::storage::{Key, PutMode, Store, StoreError};

/// Bytes read per step of a blob.
const CHUNK: usize = 256 << 10;
/// Largest manifest checked.
const MANIFEST_LIMIT: u64 = 16 << 20;
/// Largest link document read.
const LINK_LIMIT: u64 = 64 << 10;

/// What a scrub may do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ScrubOptions {
    /// Read at most this many blob bytes per second (None: as fast as the store goes).
    pub rate: Option<u64>,
    /// Report only: quarantine nothing.
    pub dry_run: bool,
}

/// A blob whose bytes do not match its digest.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CorruptBlob {
    /// The key's digest.
    pub digest: String,
    /// What the bytes hash to.
    pub found: String,
    /// Their size.
    pub size: u64,
    /// Whether it was quarantined (false in a dry run).
    pub quarantined: bool,
    /// The repositories that link it.
    pub repositories: Vec<String>,
}

/// A manifest withdrawn because content it names was quarantined (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WithdrawnManifest {
    /// The repository whose link was checked.
    pub repository: String,
    /// The manifest.
    pub digest: String,
    /// Why: the quarantined blob, or the withdrawn child manifest of an index.
    pub because: String,
    /// Whether its bytes were moved aside (false in a dry run, or when they were kept).
    pub withdrawn: bool,
    /// Why its (intact) bytes were kept although it was to be withdrawn: copying them aside
    /// failed, or the content it lost came back since the check (a push healed it).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kept: Option<String>,
}

/// A manifest that does not hold up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ManifestProblem {
    /// The repository.
    pub repository: String,
    /// The manifest.
    pub digest: String,
    /// What is wrong.
    pub problem: String,
}

/// What a scrub found. Serialised as the JSON report.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ScrubReport {
    /// Blobs re-hashed.
    pub blobs_checked: u64,
    /// Bytes read.
    pub bytes_read: u64,
    /// Blobs whose bytes are wrong.
    pub corrupt_blobs: Vec<CorruptBlob>,
    /// Manifest links checked.
    pub manifests_checked: u64,
    /// Manifests that are unreadable, invalid or reference missing content.
    pub manifest_problems: Vec<ManifestProblem>,
    /// Manifests withdrawn because a blob they name was quarantined (one entry per repository
    /// linking one).
    pub withdrawn_manifests: Vec<WithdrawnManifest>,
    /// Report only, nothing quarantined.
    pub dry_run: bool,
    /// Wall time.
    pub elapsed_secs: f64,
}

impl ScrubReport {
    /// True when nothing was found.
    pub fn clean(&self) -> bool {
        self.corrupt_blobs.is_empty()
            && self.manifest_problems.is_empty()
            && self.withdrawn_manifests.is_empty()
    }
}

/// Why a scrub stopped.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ScrubError {
    /// The store failed on a key.
    #[error("scrub: store operation failed")]
    Store(#[from] StoreError),
}

/// Keeps reads at `rate` bytes per second on average.
struct Pace {
    rate: Option<u64>,
    started: Instant,
    bytes: u64,
}

impl Pace {
    async fn took(&mut self, n: usize) {
        self.bytes += n as u64;
        if let Some(rate) = self.rate.filter(|r| *r > 0) {
            let due = Duration::from_secs_f64(self.bytes as f64 / rate as f64);
            let elapsed = self.started.elapsed();
            if due > elapsed {
                tokio::time::sleep(due - elapsed).await;
            }
        }
    }
}

/// Takes the scheduled scrub of this period: true on the one replica whose conditional write
/// of `_rd/scrub/last` (the start time of the last scheduled scrub) succeeded after `every`
/// has passed since that time. The other replicas skip the period.
pub async fn claim_scheduled_run(store: &dyn Store, every: Duration) -> Result<bool, StoreError> {
    let key = layout::scrub_last();
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|t| t.as_millis() as u64)
        .unwrap_or(0);
    let mode = match store.get(&key, LINK_LIMIT).await {
        Ok(doc) => {
            let last = serde_json::from_slice::<serde_json::Value>(&doc.bytes)
                .ok()
                .and_then(|v| v.get("started_ms")?.as_u64())
                .unwrap_or(0);
            // A little slack, so replicas whose timers drift still take turns each period.
            if now.saturating_sub(last) < (every.as_millis() as u64) * 9 / 10 {
                return Ok(false);
            }
            PutMode::Replace(doc.etag)
        }
        Err(e) if e.is_not_found() => PutMode::Create,
        Err(e) => return Err(e),
    };
    let body = Bytes::from(format!("{{\"started_ms\":{now}}}"));
    match store.put(&key, body, mode).await {
        Ok(_) => Ok(true),
        Err(StoreError::PreconditionFailed { .. } | StoreError::AlreadyExists { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Writes a report file atomically (validator's temporary-file-and-rename).
pub fn write_report(path: &std::path::Path, json: &[u8]) -> std::io::Result<()> {
    validator::write_file_atomic(path, json)
}

/// One scrub pass (see the module docs).
pub async fn scrub(store: Arc<dyn Store>, opts: &ScrubOptions) -> Result<ScrubReport, ScrubError> {
    let started = Instant::now();
    let mut report = ScrubReport {
        dry_run: opts.dry_run,
        ..ScrubReport::default()
    };
    let mut pace = Pace {
        rate: opts.rate,
        started,
        bytes: 0,
    };
    let mut present = BTreeSet::new();
    let mut quarantined = BTreeSet::new();
    for key in store.list(&layout::blobs_root()).await? {
        let Some((d, BlobPart::Data(_))) = layout::parse_blob_key(&key) else {
            continue;
        };
        let Some((found, size)) = hash(store.as_ref(), &key, &d, &mut pace).await? else {
            continue; // deleted since the listing
        };
        report.blobs_checked += 1;
        report.bytes_read += size;
        if found == d {
            present.insert(d);
            continue;
        }
        tracing::error!(digest = %d, found = %found, size, key = %key, quarantine = !opts.dry_run, "scrub: blob bytes do not match their digest");
        if !opts.dry_run {
            quarantine(store.as_ref(), &key, &d, &found, size).await?;
            quarantined.insert(d.clone());
        }
        report.corrupt_blobs.push(CorruptBlob {
            digest: d.to_string(),
            found: found.to_string(),
            size,
            quarantined: !opts.dry_run,
            repositories: Vec::new(),
        });
    }
    let content = Content {
        store: store.as_ref(),
        present,
        quarantined,
    };
    check_manifests(&content, opts.dry_run, &mut report).await?;
    report.elapsed_secs = started.elapsed().as_secs_f64();
    Ok(report)
}

/// The digest of the bytes under `key` and their size; None when the key is gone.
async fn hash(
    store: &dyn Store,
    key: &Key,
    d: &Digest,
    pace: &mut Pace,
) -> Result<Option<(Digest, u64)>, StoreError> {
    let mut reader = match store.read(key, 0).await {
        Ok((_, r)) => r,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut digester = d.algorithm().digester();
    let mut buf = vec![0u8; CHUNK];
    let mut size = 0u64;
    loop {
        let n = reader
            .read(&mut buf)
            .await
            .map_err(|source| backend(store, key, source))?;
        if n == 0 {
            break;
        }
        digester.update(&buf[..n]);
        size += n as u64;
        pace.took(n).await;
    }
    Ok(Some((digester.finish(), size)))
}

fn backend(store: &dyn Store, key: &Key, source: std::io::Error) -> StoreError {
    StoreError::Backend {
        store: store.name(),
        key: key.to_string(),
        source,
    }
}

#[derive(Serialize, Deserialize)]
struct QuarantineRecord {
    digest: String,
    found: String,
    size: u64,
    at: String,
    bytes_kept: bool,
    /// Set for a withdrawn manifest: why (its bytes are intact).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    withdrawn: Option<String>,
}

/// Why a manifest whose bytes are gone was withdrawn by a scrub (`at <time>: <why>`), read
/// from its quarantine record; None when it was not withdrawn (missing or corrupt bytes).
pub async fn withdrawal(store: &dyn Store, d: &Digest) -> Option<String> {
    let doc = store
        .get(&layout::quarantine_record(d), LINK_LIMIT)
        .await
        .ok()?;
    let r: QuarantineRecord = serde_json::from_slice(&doc.bytes).ok()?;
    r.withdrawn.map(|why| format!("at {}: {why}", r.at))
}

/// Copies corrupt bytes aside (best effort), writes the record, and removes the blob key.
async fn quarantine(
    store: &dyn Store,
    key: &Key,
    d: &Digest,
    found: &Digest,
    size: u64,
) -> Result<(), StoreError> {
    let kept = match copy_aside(store, key, d).await {
        Ok(()) => true,
        Err(e) => {
            tracing::warn!(digest = %d, error = %validator::error_chain(&e), "scrub: cannot keep a copy of the corrupt bytes; removing them anyway");
            false
        }
    };
    set_aside(store, key, d, found, size, kept, None).await
}

/// Moves a withdrawn manifest's intact bytes aside: unlike corrupt bytes they are only
/// removed once the copy is stored. On any error the bytes are still under their key.
async fn withdraw_bytes(
    store: &dyn Store,
    key: &Key,
    d: &Digest,
    size: u64,
    because: String,
) -> Result<(), StoreError> {
    copy_aside(store, key, d).await?;
    set_aside(store, key, d, d, size, true, Some(because)).await
}

/// Writes the quarantine record and removes the blob key.
async fn set_aside(
    store: &dyn Store,
    key: &Key,
    d: &Digest,
    found: &Digest,
    size: u64,
    kept: bool,
    withdrawn: Option<String>,
) -> Result<(), StoreError> {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|t| t.as_secs())
        .unwrap_or(0);
    let record = QuarantineRecord {
        digest: d.to_string(),
        found: found.to_string(),
        size,
        at: validator::rfc3339(now),
        bytes_kept: kept,
        withdrawn,
    };
    let body = Bytes::from(serde_json::to_vec(&record).expect("records serialize"));
    store
        .put(&layout::quarantine_record(d), body, PutMode::Overwrite)
        .await?;
    match store.delete(key).await {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

async fn copy_aside(store: &dyn Store, key: &Key, d: &Digest) -> Result<(), StoreError> {
    let dest = layout::quarantine_data(d);
    match store.delete(&dest).await {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e),
    }
    let (_, mut reader) = store.read(key, 0).await?;
    let staging = layout::quarantine_staging(d);
    let mut w = store.writer(&staging, None).await?;
    let copied = tokio::io::copy(&mut reader, &mut w).await;
    let flushed = match copied {
        Ok(_) => w.flush().await,
        Err(e) => Err(e),
    };
    if let Err(source) = flushed {
        let _ = w.cancel().await;
        return Err(backend(store, &staging, source));
    }
    w.commit(dest).await?;
    Ok(())
}

/// Which blob bytes exist: verified by this pass, or written since its listing.
struct Content<'a> {
    store: &'a dyn Store,
    present: BTreeSet<Digest>,
    quarantined: BTreeSet<Digest>,
}

impl Content<'_> {
    /// Whether a blob's bytes were quarantined: by this pass, or by an earlier one whose
    /// record stays (call only for a blob whose bytes are missing).
    async fn was_quarantined(&self, d: &Digest) -> Result<bool, StoreError> {
        if self.quarantined.contains(d) {
            return Ok(true);
        }
        match self.store.stat(&layout::quarantine_record(d)).await {
            Ok(_) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e),
        }
    }

    async fn exists(&self, d: &Digest) -> Result<bool, StoreError> {
        if self.quarantined.contains(d) {
            return Ok(false);
        }
        if self.present.contains(d) {
            return Ok(true);
        }
        Ok(crate::tombstone::find_data(self.store, d).await?.is_some())
    }
}

/// Checks every manifest link against the blob bytes and the repository's links, then
/// withdraws the manifests that name quarantined content (unless `dry_run`).
async fn check_manifests(
    content: &Content<'_>,
    dry_run: bool,
    report: &mut ScrubReport,
) -> Result<(), ScrubError> {
    let store = content.store;
    let mut blob_links: BTreeSet<(Name, Digest)> = BTreeSet::new();
    let mut manifest_links: Vec<(Name, Digest)> = Vec::new();
    for key in store.list(&layout::repositories_root()).await? {
        match layout::parse_repo_key(&key) {
            Some((n, RepoPart::BlobLink(d, _))) => {
                blob_links.insert((n, d));
            }
            // A link at two epochs (a collector's DELETE of the old one still to come) is one
            // manifest.
            Some((n, RepoPart::ManifestLink(d, _)))
                if manifest_links.last() != Some(&(n.clone(), d.clone())) =>
            {
                manifest_links.push((n, d));
            }
            _ => {}
        }
    }
    for c in &mut report.corrupt_blobs {
        c.repositories = blob_links
            .iter()
            .filter(|(_, d)| d.as_str() == c.digest)
            .map(|(n, _)| n.to_string())
            .collect();
    }
    let linked: BTreeSet<(Name, Digest)> = manifest_links.iter().cloned().collect();
    // Why each manifest is to be withdrawn, and the children of every index.
    let mut withdraw: Vec<(Name, Digest, Lost)> = Vec::new();
    let mut indexes: Vec<(Name, Digest, Vec<Digest>)> = Vec::new();
    for (name, d) in &manifest_links {
        report.manifests_checked += 1;
        let mut problems = Vec::new();
        if !content.exists(d).await? {
            problems.push("its bytes are missing or were quarantined".to_owned());
        } else {
            let found =
                check_manifest(content, name, d, &blob_links, &linked, &mut problems).await?;
            if let Some(b) = found.quarantined_blob {
                withdraw.push((name.clone(), d.clone(), Lost::Blob(b)));
            } else if !found.children.is_empty() {
                indexes.push((name.clone(), d.clone(), found.children));
            }
        }
        for p in problems {
            tracing::error!(repository = %name, digest = %d, problem = %p, "scrub: manifest problem");
            report.manifest_problems.push(ManifestProblem {
                repository: name.to_string(),
                digest: d.to_string(),
                problem: p,
            });
        }
    }
    // Indexes listing a withdrawn manifest go too, up to any depth.
    let mut gone: BTreeSet<Digest> = withdraw.iter().map(|(_, d, _)| d.clone()).collect();
    loop {
        let before = withdraw.len();
        indexes.retain(
            |(name, d, children)| match children.iter().find(|c| gone.contains(*c)) {
                Some(c) => {
                    withdraw.push((name.clone(), d.clone(), Lost::Manifest(c.clone())));
                    false
                }
                None => true,
            },
        );
        if withdraw.len() == before {
            break;
        }
        gone.extend(withdraw[before..].iter().map(|(_, d, _)| d.clone()));
    }
    // Per digest: None when its bytes were moved aside (or are gone), else why they were kept.
    let mut outcome: std::collections::BTreeMap<Digest, Option<String>> = Default::default();
    for (name, d, lost) in withdraw {
        let because = lost.to_string();
        tracing::error!(repository = %name, digest = %d, because, withdraw = !dry_run, "scrub: manifest withdrawn");
        let kept = if dry_run {
            None
        } else {
            if !outcome.contains_key(&d) {
                let result = withdraw_one(store, &d, &lost, &because, &outcome).await?;
                outcome.insert(d.clone(), result);
            }
            outcome[&d].clone()
        };
        if let Some(why) = &kept {
            tracing::error!(repository = %name, digest = %d, why, "scrub: manifest to withdraw kept");
        }
        report.withdrawn_manifests.push(WithdrawnManifest {
            repository: name.to_string(),
            digest: d.to_string(),
            because,
            withdrawn: !dry_run && kept.is_none(),
            kept,
        });
    }
    Ok(())
}

/// What a withdrawn manifest lost.
enum Lost {
    /// A blob it names was quarantined.
    Blob(Digest),
    /// A manifest it lists (it is an index) was withdrawn.
    Manifest(Digest),
}

impl std::fmt::Display for Lost {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Lost::Blob(b) => write!(f, "its blob {b} was quarantined"),
            Lost::Manifest(m) => write!(f, "its manifest {m} was withdrawn"),
        }
    }
}

/// Moves one manifest's bytes aside, after checking again that what it lost is still lost
/// (`outcome`: the manifests handled so far, children before the indexes listing them).
/// None when the bytes were moved or are gone; else why they were kept.
async fn withdraw_one(
    store: &dyn Store,
    d: &Digest,
    lost: &Lost,
    because: &str,
    outcome: &std::collections::BTreeMap<Digest, Option<String>>,
) -> Result<Option<String>, ScrubError> {
    match lost {
        Lost::Blob(b) => {
            if crate::tombstone::find_data(store, b).await?.is_some() {
                return Ok(Some(format!(
                    "its blob {b} was pushed again since the check"
                )));
            }
        }
        Lost::Manifest(m) => {
            if let Some(Some(_)) = outcome.get(m) {
                return Ok(Some(format!("its manifest {m} was kept")));
            }
        }
    }
    let Some((key, meta)) = crate::tombstone::find_data(store, d).await? else {
        return Ok(None); // gone since the check
    };
    match withdraw_bytes(store, &key, d, meta.size, because.to_owned()).await {
        Ok(()) => Ok(None),
        Err(e) => {
            let e = validator::error_chain(&e);
            Ok(Some(format!("moving its bytes aside failed: {e}")))
        }
    }
}

/// What checking one manifest found besides its problems.
#[derive(Default)]
struct Checked {
    /// A blob it names whose bytes a scrub quarantined and no push brought back.
    quarantined_blob: Option<Digest>,
    /// The manifests an index lists.
    children: Vec<Digest>,
}

/// The problems of one manifest whose bytes exist.
async fn check_manifest(
    content: &Content<'_>,
    name: &Name,
    d: &Digest,
    blob_links: &BTreeSet<(Name, Digest)>,
    linked: &BTreeSet<(Name, Digest)>,
    problems: &mut Vec<String>,
) -> Result<Checked, ScrubError> {
    let store = content.store;
    let mut found = Checked::default();
    let mut problem = |p: String| problems.push(p);
    let media_type = match crate::tombstone::find_manifest_link(store, name, d, LINK_LIMIT).await? {
        Some((_, doc)) => serde_json::from_slice::<serde_json::Value>(&doc.bytes)
            .ok()
            .and_then(|v| v.get("mediaType")?.as_str().map(str::to_owned)),
        None => return Ok(found), // deleted since the listing
    };
    let bytes = match crate::tombstone::get_data(store, d, MANIFEST_LIMIT).await {
        Ok(doc) => doc.bytes,
        Err(e) if e.is_not_found() => {
            problem("its bytes are missing".to_owned());
            return Ok(found);
        }
        Err(StoreError::TooLarge { limit, .. }) => {
            problem(format!("larger than {limit} bytes"));
            return Ok(found);
        }
        Err(e) => return Err(e.into()),
    };
    let checked = match crate::manifest_rules::check_document(&bytes, media_type.as_deref()) {
        Ok(c) => c,
        Err(e) => {
            problem(format!("does not parse: {}", e.detail));
            return Ok(found);
        }
    };
    for b in &checked.blobs {
        if !blob_links.contains(&(name.clone(), b.clone())) {
            problem(format!("blob {b} is not linked in the repository"));
        } else if !content.exists(b).await? {
            problem(format!("blob {b} is missing or was quarantined"));
            if found.quarantined_blob.is_none() && content.was_quarantined(b).await? {
                found.quarantined_blob = Some(b.clone());
            }
        }
    }
    found.children = checked.manifests.clone();
    for m in &checked.manifests {
        if !linked.contains(&(name.clone(), m.clone())) {
            problem(format!("child manifest {m} is not in the repository"));
        }
    }
    Ok(found)
}

/// Scrub totals.
#[derive(Debug, Default)]
struct ScrubCounters {
    runs_ok: u64,
    runs_failed: u64,
    bytes: u64,
    corrupt: u64,
    manifest_problems: u64,
    last_problems: u64,
}

/// Scrub totals of this process, rendered with the registry's metrics.
#[derive(Debug, Default)]
pub struct ScrubMetrics(std::sync::Mutex<ScrubCounters>);

impl ScrubMetrics {
    /// Records a finished scrub (`None`: it failed).
    pub fn run(&self, report: Option<&ScrubReport>) {
        let mut s = self.0.lock().expect("metrics lock");
        let Some(r) = report else {
            s.runs_failed += 1;
            return;
        };
        s.runs_ok += 1;
        s.bytes += r.bytes_read;
        s.corrupt += r.corrupt_blobs.len() as u64;
        s.manifest_problems += r.manifest_problems.len() as u64;
        s.last_problems = (r.corrupt_blobs.len() + r.manifest_problems.len()) as u64;
    }
}

impl crate::metrics::MetricSource for ScrubMetrics {
    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        let s = self.0.lock().expect("metrics lock");
        let _ = writeln!(
            out,
            "# TYPE registry_scrub_runs_total counter\nregistry_scrub_runs_total{{result=\"ok\"}} {}\nregistry_scrub_runs_total{{result=\"failed\"}} {}",
            s.runs_ok, s.runs_failed
        );
        for (name, kind, v) in [
            ("registry_scrub_bytes_total", "counter", s.bytes),
            ("registry_scrub_corrupt_blobs_total", "counter", s.corrupt),
            (
                "registry_scrub_manifest_problems_total",
                "counter",
                s.manifest_problems,
            ),
            ("registry_scrub_last_problems", "gauge", s.last_problems),
        ] {
            let _ = writeln!(out, "# TYPE {name} {kind}\n{name} {v}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::FsStore;

    async fn store_with(blobs: &[&[u8]]) -> (tempfile::TempDir, Arc<dyn Store>) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path()).unwrap());
        for b in blobs {
            let key = layout::blob_data(&Digest::sha256(b));
            store
                .put(&key, Bytes::copy_from_slice(b), PutMode::Create)
                .await
                .unwrap();
        }
        (dir, store)
    }

    #[tokio::test]
    async fn the_rate_bounds_the_read_speed() {
        let blob = vec![7u8; 96 << 10];
        let (_dir, store) = store_with(&[&blob]).await;
        let opts = ScrubOptions {
            rate: Some(256 << 10),
            dry_run: false,
        };
        let started = Instant::now();
        let r = scrub(store, &opts).await.unwrap();
        assert!(r.clean(), "{r:?}");
        assert_eq!((r.blobs_checked, r.bytes_read), (1, 96 << 10));
        // 96 KiB at 256 KiB/s: at least 375 ms.
        assert!(
            started.elapsed() >= Duration::from_millis(370),
            "{:?}",
            started.elapsed()
        );
    }

    #[tokio::test]
    async fn a_dry_run_reports_and_keeps_the_corrupt_blob() {
        let (dir, store) = store_with(&[b"good"]).await;
        // Bytes under another digest's key: what a flipped byte looks like.
        let claimed = Digest::sha256(b"what was pushed");
        store
            .put(
                &layout::blob_data(&claimed),
                Bytes::from_static(b"what is stored"),
                PutMode::Create,
            )
            .await
            .unwrap();
        let dry = ScrubOptions {
            rate: None,
            dry_run: true,
        };
        let r = scrub(store.clone(), &dry).await.unwrap();
        assert_eq!(r.corrupt_blobs.len(), 1);
        assert_eq!(r.corrupt_blobs[0].digest, claimed.to_string());
        assert_eq!(
            r.corrupt_blobs[0].found,
            Digest::sha256(b"what is stored").to_string()
        );
        assert!(!r.corrupt_blobs[0].quarantined);
        assert!(store.stat(&layout::blob_data(&claimed)).await.is_ok());

        let r = scrub(store.clone(), &ScrubOptions::default())
            .await
            .unwrap();
        assert!(r.corrupt_blobs[0].quarantined);
        assert!(store.stat(&layout::blob_data(&claimed)).await.is_err());
        let kept =
            std::fs::read(dir.path().join(layout::quarantine_data(&claimed).as_str())).unwrap();
        assert_eq!(kept, b"what is stored");
        let record = store
            .get(&layout::quarantine_record(&claimed), 1 << 10)
            .await
            .unwrap();
        let record: serde_json::Value = serde_json::from_slice(&record.bytes).unwrap();
        assert_eq!(record["bytes_kept"], true);
        // Quarantined again after a later corruption: the old copy is replaced.
        store
            .put(
                &layout::blob_data(&claimed),
                Bytes::from_static(b"rotted again"),
                PutMode::Create,
            )
            .await
            .unwrap();
        let r = scrub(store.clone(), &ScrubOptions::default())
            .await
            .unwrap();
        assert_eq!((r.blobs_checked, r.corrupt_blobs.len()), (2, 1));
        let kept =
            std::fs::read(dir.path().join(layout::quarantine_data(&claimed).as_str())).unwrap();
        assert_eq!(kept, b"rotted again");
        assert!(
            scrub(store, &ScrubOptions::default())
                .await
                .unwrap()
                .clean()
        );
    }

    /// A repository whose manifest names a layer whose bytes rotted: the scrub quarantines
    /// the layer and withdraws the manifest.
    async fn image_with_rotten_layer(store: &dyn Store) -> (Digest, Digest) {
        let name = Name::parse("team/app").unwrap();
        let config = b"{}".as_slice();
        let layer = Digest::sha256(b"layer as pushed");
        let (cd, ld) = (Digest::sha256(config), layer.clone());
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd.to_string(), "size": config.len()},
            "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": ld.to_string(), "size": 15}],
        });
        let manifest = Bytes::from(serde_json::to_vec(&manifest).unwrap());
        let md = Digest::sha256(&manifest);
        let link =
            Bytes::from_static(b"{\"mediaType\":\"application/vnd.oci.image.manifest.v1+json\"}");
        for (key, body) in [
            (layout::blob_data(&cd), Bytes::copy_from_slice(config)),
            (
                layout::blob_data(&ld),
                Bytes::from_static(b"layer as stored"),
            ),
            (layout::blob_data(&md), manifest),
            (layout::blob_link(&name, &cd), Bytes::new()),
            (layout::blob_link(&name, &ld), Bytes::new()),
            (layout::manifest_link(&name, &md), link),
        ] {
            store.put(&key, body, PutMode::Create).await.unwrap();
        }
        (md, layer)
    }

    #[tokio::test]
    async fn a_withdrawn_manifest_keeps_its_bytes_when_they_cannot_be_copied_aside() {
        let (dir, store) = store_with(&[]).await;
        let (m, layer) = image_with_rotten_layer(store.as_ref()).await;
        // A directory where the copy goes: storing the copy fails.
        let blocked = dir.path().join(layout::quarantine_data(&m).as_str());
        std::fs::create_dir_all(blocked.join("in-the-way")).unwrap();
        let r = scrub(store.clone(), &ScrubOptions::default())
            .await
            .unwrap();
        assert_eq!(r.corrupt_blobs.len(), 1, "{r:?}");
        assert_eq!(r.corrupt_blobs[0].digest, layer.to_string());
        assert_eq!(r.withdrawn_manifests.len(), 1, "{r:?}");
        let w = &r.withdrawn_manifests[0];
        assert_eq!(w.digest, m.to_string());
        assert!(!w.withdrawn, "{w:?}");
        let kept = w.kept.as_deref().expect("why the bytes were kept");
        assert!(kept.contains("moving its bytes aside failed"), "{kept}");
        // The intact manifest bytes are still there, and no record says it was withdrawn.
        assert!(store.stat(&layout::blob_data(&m)).await.is_ok());
        assert_eq!(withdrawal(store.as_ref(), &m).await, None);

        // Once the copy can be stored, the next scrub withdraws it.
        std::fs::remove_dir_all(&blocked).unwrap();
        let r = scrub(store.clone(), &ScrubOptions::default())
            .await
            .unwrap();
        assert!(r.withdrawn_manifests[0].withdrawn, "{r:?}");
        assert!(store.stat(&layout::blob_data(&m)).await.is_err());
        assert!(withdrawal(store.as_ref(), &m).await.is_some());
    }

    #[tokio::test]
    async fn a_manifest_whose_blob_came_back_is_not_withdrawn() {
        let (_dir, store) = store_with(&[]).await;
        let (m, layer) = image_with_rotten_layer(store.as_ref()).await;
        let content = Content {
            store: store.as_ref(),
            present: BTreeSet::new(),
            quarantined: BTreeSet::new(),
        };
        // The layer's bytes are there (a push healed it after the check that found it lost).
        let kept = withdraw_one(
            store.as_ref(),
            &m,
            &Lost::Blob(layer.clone()),
            "test",
            &Default::default(),
        )
        .await
        .unwrap();
        assert!(kept.unwrap().contains("pushed again"));
        assert!(content.exists(&m).await.unwrap());
    }
}
