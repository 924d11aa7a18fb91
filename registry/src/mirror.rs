//! Scheduled mirroring (`[[sync]]` in registry.toml): every entry copies what an upstream
//! registry holds (repository and tag globs, a platform) into this registry under a prefix,
//! once per interval, on one replica at a time.
//!
//! This module owns the schedule, not the copy. The copy is a [`SyncRunner`] the process
//! injects (`rdctl registry serve` passes one built on `registry_client::sync`, the one copy
//! path, with referrers, cosign tags and verification): this crate does not depend on the
//! client (crate arrows point down). The runner pushes into this registry through its own
//! loopback HTTP endpoint, so mirrored content takes the one ingest path every push takes
//! (verified commit, `[[immutable]]`, `[[quota]]`, events, access control).
//!
//! - **One replica at a time.** [`schedule`] runs in every replica. Each tick it reads every
//!   entry's state document (`_rd/sync/<name>/state`); when one is due (its last run started an
//!   interval ago or more) it takes the lease `_rd/sync/lock` ([`crate::lease::Lease`], the
//!   one garbage collection uses under another key), reads the state again under the lease (a
//!   replica that ran just before has written it), runs the entries still due and writes their
//!   state; a replica that finds the lease held skips the tick.
//! - **Restarts.** All of it is in the store: a restarted replica goes on from the state
//!   document, and the run history there (the last [`HISTORY`] runs: holder, start, end) shows
//!   which replica ran when.
//! - **Status.** Every replica copies the state documents it reads into its metrics
//!   (`registry_sync_*`), so any replica reports the same; `GET /v2/_rd/sync` ([`status`])
//!   reads them from the store.

use std::collections::VecDeque;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::events::now_ms;
use crate::lease::{Lease, LeaseError};
use crate::proxy::Upstream;
use crate::storage::{Key, PutMode, Store, StoreError, layout};

/// Runs kept in a state document's history.
pub const HISTORY: usize = 20;
/// Time to live of the sync lease: four times the shortest interval, between 2 s
/// ([`crate::lease::MIN_LEASE_TTL`]) and 60 s. It is renewed while a run lasts however long
/// that is; it only bounds how long a replica that died holding it blocks the schedule.
pub fn lease_ttl(entries: &[SyncEntry]) -> Duration {
    entries
        .iter()
        .map(|e| e.interval * 4)
        .min()
        .unwrap_or(Duration::from_secs(60))
        .clamp(crate::lease::MIN_LEASE_TTL, Duration::from_secs(60))
}
/// Largest state document read.
const STATE_LIMIT: u64 = 1 << 20;

/// What to do with a mirrored tag the upstream no longer has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnUpstreamDelete {
    /// Keep it (the default: a mirror keeps serving what it copied).
    #[default]
    Keep,
    /// Delete the tag here too (through the API, so `[[immutable]]` rules still refuse).
    Delete,
}

/// One `[[sync]]` entry, checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncEntry {
    /// Its name: the key of its state document and the `sync` label of its metrics.
    pub name: String,
    /// The upstream registry and the repository prefix there.
    pub upstream: Upstream,
    /// A docker `config.json` or containers `auth.json` with credentials for the upstream
    /// (and for this registry when it has `[auth]`); none: anonymous.
    pub auth_file: Option<PathBuf>,
    /// Repository globs relative to the upstream prefix (empty: every repository).
    pub repositories: Vec<String>,
    /// Tag globs (empty: every tag).
    pub tags: Vec<String>,
    /// Repository prefix here (none: the same names as upstream, under its prefix).
    pub destination: Option<String>,
    /// How often it runs.
    pub interval: Duration,
    /// `os/arch[/variant]`: copy only that platform's manifest out of an index.
    pub platform: Option<String>,
    /// Copy referrers and cosign tags (default true).
    pub referrers: bool,
    /// A tag gone upstream: keep or delete.
    pub on_upstream_delete: OnUpstreamDelete,
    /// An admission policy file in the worker's format: copy only the images it admits
    /// (`only_signed`; none: copy every image selected).
    pub only_signed: Option<PathBuf>,
}

/// What one run of one entry did (the runner's answer).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunOutcome {
    /// Images the entry selects upstream.
    pub images: u64,
    /// Images whose tag was new or moved here.
    pub images_copied: u64,
    /// Blobs transferred (referrers' included).
    pub blobs_copied: u64,
    /// Bytes of blobs transferred.
    pub bytes_copied: u64,
    /// Tags removed because the upstream no longer has them (`on_upstream_delete = "delete"`).
    pub tags_deleted: u64,
    /// What failed: listing the upstream, an image, a deletion (empty: the run succeeded).
    pub errors: Vec<String>,
    /// Images `only_signed` refused (not copied): `REPOSITORY:TAG (DIGEST): why`, naming the
    /// policy's rule and the keys tried. A refusal does not fail the run.
    #[serde(default)]
    pub refused: Vec<String>,
}

/// Copies one entry from its upstream into the registry at `destination` (`HOST:PORT` of this
/// registry's loopback endpoint). Failures are reported in [`RunOutcome::errors`].
pub trait SyncRunner: Send + Sync + std::fmt::Debug {
    /// One run of `entry`.
    fn run<'a>(&'a self, entry: &'a SyncEntry, destination: &'a str) -> BoxFuture<'a, RunOutcome>;
}

/// One run in a state document's history.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunRecord {
    /// The lease run id it ran under.
    pub lease_run: String,
    /// `pid P on HOST`, listening at the address given.
    pub holder: String,
    /// Start, milliseconds since the Unix epoch.
    pub started_ms: u64,
    /// End, milliseconds since the Unix epoch.
    pub finished_ms: u64,
    /// Whether it succeeded.
    pub ok: bool,
}

/// The state document of one entry, `_rd/sync/<name>/state`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SyncState {
    /// Start of the last run, milliseconds since the Unix epoch.
    pub last_started_ms: Option<u64>,
    /// End of the last successful run.
    pub last_success_ms: Option<u64>,
    /// The last run's first error (none when it succeeded).
    pub last_error: Option<String>,
    /// What the last run did.
    pub last_run: Option<RunOutcome>,
    /// Successful runs so far.
    pub runs_ok: u64,
    /// Failed runs so far.
    pub runs_failed: u64,
    /// The last [`HISTORY`] runs, oldest first.
    pub history: VecDeque<RunRecord>,
}

/// One entry's status as `GET /v2/_rd/sync` and `rdctl registry sync-status` show it.
#[derive(Debug, Clone, Serialize)]
pub struct EntryStatus {
    /// The entry's name.
    pub name: String,
    /// The upstream (`http[s]://HOST[:PORT][/PREFIX]`).
    pub upstream: String,
    /// Its interval in seconds.
    pub interval_secs: f64,
    /// Seconds since the last success (none: never succeeded).
    pub lag_secs: Option<f64>,
    /// The state document.
    #[serde(flatten)]
    pub state: SyncState,
}

/// Reading or writing the sync state failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum SyncStateError {
    /// A store operation failed.
    #[error("sync state {key}")]
    Store {
        /// The document.
        key: Key,
        /// The cause.
        #[source]
        source: StoreError,
    },
}

/// Reads an entry's state (default when none was written; an unreadable document counts as
/// none, so a run rewrites it).
pub async fn read_state(store: &dyn Store, name: &str) -> Result<SyncState, SyncStateError> {
    let key = layout::sync_state(name);
    match store.get(&key, STATE_LIMIT).await {
        Ok(doc) => Ok(serde_json::from_slice(&doc.bytes).unwrap_or_else(|e| {
            tracing::warn!(key = %key, error = %e, "unreadable sync state; starting afresh");
            SyncState::default()
        })),
        Err(e) if e.is_not_found() => Ok(SyncState::default()),
        Err(source) => Err(SyncStateError::Store { key, source }),
    }
}

async fn write_state(
    store: &dyn Store,
    name: &str,
    state: &SyncState,
) -> Result<(), SyncStateError> {
    let key = layout::sync_state(name);
    let body = Bytes::from(serde_json::to_vec(state).expect("sync state serializes"));
    store
        .put(&key, body, PutMode::Overwrite)
        .await
        .map(|_| ())
        .map_err(|source| SyncStateError::Store { key, source })
}

/// The status of every entry, read from the store.
pub async fn status(
    store: &dyn Store,
    entries: &[SyncEntry],
) -> Result<Vec<EntryStatus>, SyncStateError> {
    let now = now_ms();
    let mut out = Vec::with_capacity(entries.len());
    for e in entries {
        let state = read_state(store, &e.name).await?;
        out.push(EntryStatus {
            name: e.name.clone(),
            upstream: e.upstream.to_string(),
            interval_secs: e.interval.as_secs_f64(),
            lag_secs: state
                .last_success_ms
                .map(|s| now.saturating_sub(s) as f64 / 1000.0),
            state,
        });
    }
    Ok(out)
}

fn due(e: &SyncEntry, s: &SyncState, now: u64) -> bool {
    s.last_started_ms
        .is_none_or(|t| now.saturating_sub(t) >= e.interval.as_millis() as u64)
}

/// How often a replica looks at the schedule: half the shortest interval, between 200 ms and
/// 30 s.
pub fn tick(entries: &[SyncEntry]) -> Duration {
    entries
        .iter()
        .map(|e| e.interval / 2)
        .min()
        .unwrap_or(Duration::from_secs(30))
        .clamp(Duration::from_millis(200), Duration::from_secs(30))
}

/// One look at the schedule (see the module docs); returns the names of the entries this
/// replica ran. `destination` is this registry's loopback `HOST:PORT`.
pub async fn run_due(
    store: Arc<dyn Store>,
    entries: &[SyncEntry],
    runner: &dyn SyncRunner,
    destination: &str,
    metrics: &crate::metrics::Metrics,
) -> Result<Vec<String>, SyncStateError> {
    let now = now_ms();
    let mut any_due = false;
    for e in entries {
        let s = read_state(store.as_ref(), &e.name).await?;
        any_due |= due(e, &s, now);
        metrics.source::<SyncMetrics>().record(&e.name, &s);
    }
    if !any_due {
        return Ok(Vec::new());
    }
    let lease = match Lease::acquire(store.clone(), layout::sync_lock(), lease_ttl(entries)).await {
        Ok(l) => l,
        Err(LeaseError::Locked { .. }) => {
            tracing::debug!("sync skipped: another replica holds the sync lease");
            return Ok(Vec::new());
        }
        Err(LeaseError::Store(source)) => {
            return Err(SyncStateError::Store {
                key: layout::sync_lock(),
                source,
            });
        }
        Err(e) => {
            tracing::warn!(error = %e, "sync skipped");
            return Ok(Vec::new());
        }
    };
    let holder = format!(
        "pid {} on {} at {destination}",
        std::process::id(),
        crate::lease::host_name().unwrap_or_else(|| "an unknown host".to_owned())
    );
    let mut ran = Vec::new();
    let result = async {
        for e in entries {
            if lease.lost() {
                tracing::warn!("sync lost its lease; the remaining entries wait for the next tick");
                break;
            }
            // Again under the lease: a replica that ran just before has written it.
            let mut s = read_state(store.as_ref(), &e.name).await?;
            let started = now_ms();
            if !due(e, &s, started) {
                continue;
            }
            s.last_started_ms = Some(started);
            write_state(store.as_ref(), &e.name, &s).await?;
            tracing::info!(sync = %e.name, upstream = %e.upstream, "sync started");
            let outcome = runner.run(e, destination).await;
            let finished = now_ms();
            let ok = outcome.errors.is_empty();
            for r in &outcome.refused {
                tracing::warn!(sync = %e.name, refused = %r, "sync: only_signed refused an image");
            }
            if ok {
                s.last_success_ms = Some(finished);
                s.last_error = None;
                s.runs_ok += 1;
                tracing::info!(sync = %e.name, images = outcome.images, refused = outcome.refused.len(), images_copied = outcome.images_copied, blobs_copied = outcome.blobs_copied, bytes_copied = outcome.bytes_copied, tags_deleted = outcome.tags_deleted, "sync finished");
            } else {
                s.last_error = outcome.errors.first().cloned();
                s.runs_failed += 1;
                tracing::warn!(sync = %e.name, errors = outcome.errors.len(), first = %outcome.errors[0], "sync failed");
            }
            s.last_run = Some(outcome);
            s.history.push_back(RunRecord {
                lease_run: lease.run().to_owned(),
                holder: holder.clone(),
                started_ms: started,
                finished_ms: finished,
                ok,
            });
            while s.history.len() > HISTORY {
                s.history.pop_front();
            }
            write_state(store.as_ref(), &e.name, &s).await?;
            metrics.source::<SyncMetrics>().record(&e.name, &s);
            ran.push(e.name.clone());
        }
        Ok(())
    }
    .await;
    lease.release().await;
    result.map(|()| ran)
}

/// Runs the schedule until the task is dropped (every replica runs it; see the module docs).
pub async fn schedule(
    store: Arc<dyn Store>,
    entries: Vec<SyncEntry>,
    runner: Arc<dyn SyncRunner>,
    destination: String,
    metrics: Arc<crate::metrics::Metrics>,
) {
    let every = tick(&entries);
    loop {
        if let Err(e) = run_due(
            store.clone(),
            &entries,
            runner.as_ref(),
            &destination,
            &metrics,
        )
        .await
        {
            tracing::warn!(error = %validator::error_chain(&e), "sync schedule: cannot read or write its state");
        }
        tokio::time::sleep(every).await;
    }
}

/// A `[[sync]]` table of the TOML file. The keys it shares with a sync file
/// (`rdctl sync --config`: `name`, `from`, `repositories`, `tags`, `platform`, `referrers`,
/// `only_signed`) are spelled and read the same way there; `upstream` is the older spelling of
/// `from`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileSync {
    name: Option<String>,
    #[serde(alias = "upstream")]
    from: Option<String>,
    auth_file: Option<PathBuf>,
    #[serde(default)]
    repositories: Vec<String>,
    #[serde(default)]
    tags: Vec<String>,
    destination: Option<String>,
    interval: Option<config_toml::HumanDuration>,
    platform: Option<String>,
    referrers: Option<bool>,
    on_upstream_delete: Option<OnUpstreamDelete>,
    only_signed: Option<PathBuf>,
    to: Option<String>,
    on_push: Option<bool>,
}

/// The upstream of `from`: `http[s]://HOST[:PORT][/PREFIX]`, or as a sync file writes it,
/// `[docker://]HOST[:PORT][/PREFIX]`, which is HTTPS, or plain HTTP for a loopback host (as
/// `rdctl sync` reaches it).
fn parse_from(from: &str) -> Result<Upstream, String> {
    if from.contains("://") && !from.starts_with("docker://") {
        return Upstream::parse(from);
    }
    let rest = from.strip_prefix("docker://").unwrap_or(from);
    let host = rest.split('/').next().unwrap_or_default();
    let loopback = validator::RegistryHost::parse(host).is_ok_and(|h| h.is_loopback());
    let scheme = if loopback { "http" } else { "https" };
    Upstream::parse(&format!("{scheme}://{rest}")).map_err(|e| {
        format!("{from:?}: {e} (write HOST[:PORT][/PREFIX] or http[s]://HOST[:PORT][/PREFIX])")
    })
}

impl FileSync {
    /// Whether the entry replicates pushes here to another registry (`to`, `on_push`)
    /// rather than mirroring an upstream.
    pub(crate) fn replicates(&self) -> bool {
        self.to.is_some() || self.on_push.is_some()
    }

    /// The checked replication entry ([`crate::replicate`]), or the key that is wrong.
    pub(crate) fn check_replication(
        self,
    ) -> Result<crate::replicate::ReplicationEntry, (&'static str, String)> {
        let name = self
            .name
            .ok_or(("sync.name", "every [[sync]] entry needs a name".to_owned()))?;
        check_name(&name)?;
        let to = self.to.ok_or((
            "sync.to",
            format!("[[sync]] {name:?}: on_push replicates pushes here to the registry named by to (http[s]://HOST[:PORT][/PREFIX])"),
        ))?;
        let to = Upstream::parse(&to).map_err(|e| ("sync.to", e))?;
        if self.on_push != Some(true) {
            return Err((
                "sync.on_push",
                format!(
                    "[[sync]] {name:?}: an entry with to replicates on push; set on_push = true"
                ),
            ));
        }
        for (key, given) in [
            ("sync.from", self.from.is_some()),
            ("sync.interval", self.interval.is_some()),
            ("sync.destination", self.destination.is_some()),
            ("sync.platform", self.platform.is_some()),
            ("sync.on_upstream_delete", self.on_upstream_delete.is_some()),
        ] {
            if given {
                return Err((
                    key,
                    format!(
                        "[[sync]] {name:?}: not with to (it replicates every push here as it comes)"
                    ),
                ));
            }
        }
        check_globs(&self.repositories, &self.tags)?;
        Ok(crate::replicate::ReplicationEntry {
            name,
            to,
            auth_file: self.auth_file,
            repositories: self.repositories,
            tags: self.tags,
            referrers: self.referrers.unwrap_or(true),
            only_signed: self.only_signed,
        })
    }

    /// The checked entry, or the key that is wrong and why.
    pub(crate) fn check(self) -> Result<SyncEntry, (&'static str, String)> {
        let name = self
            .name
            .ok_or(("sync.name", "every [[sync]] entry needs a name".to_owned()))?;
        check_name(&name)?;
        if self.on_push.is_some() || self.to.is_some() {
            return Err((
                "sync.on_push",
                format!(
                    "[[sync]] {name:?}: on_push and to replicate pushes here, not with from (upstream)"
                ),
            ));
        }
        let from = self.from.ok_or((
            "sync.from",
            format!("[[sync]] {name:?} needs from, the upstream (HOST[:PORT][/PREFIX] or http[s]://HOST[:PORT][/PREFIX])"),
        ))?;
        let upstream = parse_from(&from).map_err(|e| ("sync.from", e))?;
        let interval = self
            .interval
            .ok_or((
                "sync.interval",
                format!("[[sync]] {name:?} needs an interval (like \"90s\", \"15m\", \"1h\")"),
            ))?
            .0;
        if interval < Duration::from_secs(1) {
            return Err((
                "sync.interval",
                format!(
                    "[[sync]] {name:?}: {:?} is shorter than 1s",
                    config_toml::format_duration(interval)
                ),
            ));
        }
        let destination = match self.destination {
            Some(d) => {
                let d = d.trim_matches('/').to_owned();
                validator::Name::parse(&d)
                    .map_err(|e| ("sync.destination", format!("{d:?}: {e}")))?;
                Some(d)
            }
            None => None,
        };
        check_globs(&self.repositories, &self.tags)?;
        if let Some(p) = &self.platform
            && validator::Platform::parse(p).is_none()
        {
            return Err(("sync.platform", format!("{p:?} is not os/arch[/variant]")));
        }
        Ok(SyncEntry {
            name,
            upstream,
            auth_file: self.auth_file,
            repositories: self.repositories,
            tags: self.tags,
            destination,
            interval,
            platform: self.platform,
            referrers: self.referrers.unwrap_or(true),
            on_upstream_delete: self.on_upstream_delete.unwrap_or_default(),
            only_signed: self.only_signed,
        })
    }
}

/// Each `[[sync]]` entry's state as last read from the store, rendered with the registry's
/// metrics.
#[derive(Debug, Default)]
pub struct SyncMetrics(std::sync::Mutex<std::collections::BTreeMap<String, SyncState>>);

impl SyncMetrics {
    /// Records a `[[sync]]` entry's state as read from (or written to) the store.
    pub fn record(&self, name: &str, state: &SyncState) {
        self.0
            .lock()
            .expect("metrics lock")
            .insert(name.to_owned(), state.clone());
    }
}

impl crate::metrics::MetricSource for SyncMetrics {
    fn render(&self, out: &mut String) {
        use std::fmt::Write as _;
        // The families are declared without `[[sync]]` entries too (no samples then).
        let sync = self.0.lock().expect("metrics lock");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let family = |out: &mut String,
                      name: &str,
                      kind: &str,
                      value: &dyn Fn(&SyncState) -> Option<f64>| {
            let _ = writeln!(out, "# TYPE {name} {kind}");
            for (entry, s) in sync.iter() {
                if let Some(v) = value(s) {
                    let _ = writeln!(out, "{name}{{sync=\"{entry}\"}} {v}");
                }
            }
        };
        let last = |f: fn(&RunOutcome) -> u64| {
            move |s: &SyncState| s.last_run.as_ref().map(|r| f(r) as f64)
        };
        family(
            out,
            "registry_sync_last_success_timestamp_seconds",
            "gauge",
            &|s| s.last_success_ms.map(|t| t as f64 / 1000.0),
        );
        family(out, "registry_sync_lag_seconds", "gauge", &|s| {
            s.last_success_ms
                .map(|t| (now - t as f64 / 1000.0).max(0.0))
        });
        family(out, "registry_sync_last_run_failed", "gauge", &|s| {
            s.last_run
                .as_ref()
                .map(|r| f64::from(u8::from(!r.errors.is_empty())))
        });
        family(
            out,
            "registry_sync_last_run_images",
            "gauge",
            &last(|r| r.images),
        );
        family(
            out,
            "registry_sync_last_run_images_copied",
            "gauge",
            &last(|r| r.images_copied),
        );
        family(
            out,
            "registry_sync_last_run_images_refused",
            "gauge",
            &last(|r| r.refused.len() as u64),
        );
        family(
            out,
            "registry_sync_last_run_blobs_copied",
            "gauge",
            &last(|r| r.blobs_copied),
        );
        family(
            out,
            "registry_sync_last_run_bytes_copied",
            "gauge",
            &last(|r| r.bytes_copied),
        );
        family(
            out,
            "registry_sync_last_run_tags_deleted",
            "gauge",
            &last(|r| r.tags_deleted),
        );
        let _ = writeln!(out, "# TYPE registry_sync_runs_total counter");
        for (entry, s) in sync.iter() {
            let _ = writeln!(
                out,
                "registry_sync_runs_total{{sync=\"{entry}\",result=\"ok\"}} {}\nregistry_sync_runs_total{{sync=\"{entry}\",result=\"failed\"}} {}",
                s.runs_ok, s.runs_failed
            );
        }
    }
}

fn check_name(name: &str) -> Result<(), (&'static str, String)> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || matches!(b, b'-' | b'_'))
    {
        return Err((
            "sync.name",
            format!("{name:?}: use 1 to 64 of a-z, 0-9, '-' and '_'"),
        ));
    }
    Ok(())
}

fn check_globs(repositories: &[String], tags: &[String]) -> Result<(), (&'static str, String)> {
    for (key, globs) in [("sync.repositories", repositories), ("sync.tags", tags)] {
        if let Some(g) = globs
            .iter()
            .find(|g| g.is_empty() || g.contains(char::is_whitespace))
        {
            return Err((key, format!("{g:?} is not a glob")));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_are_checked_and_due_after_their_interval() {
        let parse = |t: &str| config_toml::from_str::<FileSync>(t, &[]).unwrap().check();
        let e = parse(
            "name = \"central\"\nupstream = \"http://127.0.0.1:5000/zones\"\ninterval = \"2s\"\non_upstream_delete = \"delete\"\n",
        )
        .unwrap();
        assert_eq!(e.upstream.prefix.as_deref(), Some("zones"));
        assert_eq!(e.on_upstream_delete, OnUpstreamDelete::Delete);
        assert!(e.referrers);
        for (doc, key) in [
            (
                "upstream = \"http://a.example\"\ninterval = \"1s\"\n",
                "sync.name",
            ),
            (
                "name = \"A\"\nupstream = \"http://a.example\"\ninterval = \"1s\"\n",
                "sync.name",
            ),
            (
                "name = \"a\"\nupstream = \"ftp://a.example\"\ninterval = \"1s\"\n",
                "sync.from",
            ),
            (
                "name = \"a\"\nfrom = \"a..example/zones\"\ninterval = \"1s\"\n",
                "sync.from",
            ),
            (
                "name = \"a\"\nupstream = \"http://a.example\"\n",
                "sync.interval",
            ),
            (
                "name = \"a\"\nupstream = \"http://a.example\"\ninterval = \"10ms\"\n",
                "sync.interval",
            ),
            (
                "name = \"a\"\nupstream = \"http://a.example\"\ninterval = \"1s\"\nplatform = \"x\"\n",
                "sync.platform",
            ),
            (
                "name = \"a\"\nupstream = \"http://a.example\"\ninterval = \"1s\"\ntags = [\"a b\"]\n",
                "sync.tags",
            ),
        ] {
            assert_eq!(parse(doc).unwrap_err().0, key, "{doc}");
        }
        // `from` as a sync file writes it: HTTPS, plain HTTP for a loopback host; `upstream`
        // is its older spelling; the interval also as a whole number of seconds.
        for (doc, base) in [
            (
                "name = \"a\"\nfrom = \"central.example:5000/zones\"\ninterval = 2\n",
                "https://central.example:5000",
            ),
            (
                "name = \"a\"\nfrom = \"docker://localhost:5000/zones\"\ninterval = \"2s\"\n",
                "http://localhost:5000",
            ),
            (
                "name = \"a\"\nupstream = \"127.0.0.1:5000/zones\"\ninterval = \"2s\"\n",
                "http://127.0.0.1:5000",
            ),
        ] {
            let x = parse(doc).unwrap();
            assert_eq!(
                (x.upstream.base.as_str(), x.upstream.prefix.as_deref()),
                (base, Some("zones")),
                "{doc}"
            );
            assert_eq!(x.interval, Duration::from_secs(2));
        }
        let both =
            "name = \"a\"\nfrom = \"a.example\"\nupstream = \"b.example\"\ninterval = \"1s\"\n";
        let e2 = config_toml::from_str::<FileSync>(both, &[]).unwrap_err();
        assert!(e2.message.starts_with("given twice"), "{e2}");
        let mut s = SyncState::default();
        assert!(due(&e, &s, 10_000));
        s.last_started_ms = Some(9_000);
        assert!(!due(&e, &s, 10_000));
        assert!(due(&e, &s, 11_000));
        assert_eq!(tick(std::slice::from_ref(&e)), Duration::from_secs(1));
        assert_eq!(lease_ttl(&[e]), Duration::from_secs(8));
    }
}
