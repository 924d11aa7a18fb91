//! The tombstone `blobs/…/gc`: the storage rule by which a garbage collector and the requests
//! that hold a digest ([`crate::repo::Repos::hold`]) agree on who goes first. The core honours
//! it on every hold; the collector (`crate::gc`) writes it. Its document, the phases and what a
//! request does on meeting one live here, so the core never imports the collector. The race
//! analysis is in `docs/gc.md`, "Why an acknowledged push loses nothing".

use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde_json::Value;

use crate::lease::LeaseError;
use crate::storage::{Key, Store, StoreError, layout};

/// Largest tombstone read.
pub(crate) const TOMBSTONE_LIMIT: u64 = 64 << 10;

/// What a tombstone `blobs/…/gc` says: the run that wrote it and how far it got, or that a
/// request released it.
///
/// A collector writes `{"run", "phase": "deciding", "ttl_secs"}`, reads the digest's hold
/// record, then commits with a conditional replace to `"phase": "deleting"`; only then does it
/// delete, and only within half of `ttl_secs` after sending the commit. A request that meets a
/// deciding tombstone releases it at once (a conditional replace, so at most one of the
/// release and the commit succeeds); a deleting one it waits for until it is gone or `ttl_secs`
/// old. A tombstone without a phase comes from a collector from before commits: requests wait
/// for it while that run holds a live lease.
#[derive(Debug, Default)]
pub(crate) struct Tombstone {
    run: Option<String>,
    released: bool,
    pub(crate) phase: Option<Phase>,
    pub(crate) ttl: Option<Duration>,
}

/// How far the collector that wrote a tombstone got.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// Written, the hold record maybe not read yet: nothing deleted, nothing will be once a
    /// request released it.
    Deciding,
    /// Committed to deleting the digest's candidates.
    Deleting,
}

/// What a request does about a tombstone it met.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Release it (conditionally on the version read) and go on.
    Release,
    /// A collector is deleting (or, for an old collector, deciding); look again later.
    Wait,
}

impl Tombstone {
    pub(crate) fn parse(bytes: &[u8]) -> Tombstone {
        let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        Tombstone {
            run: v.get("run").and_then(Value::as_str).map(str::to_owned),
            released: v.get("released").is_some(),
            phase: match v.get("phase").and_then(Value::as_str) {
                Some("deciding") => Some(Phase::Deciding),
                Some("deleting") => Some(Phase::Deleting),
                _ => None,
            },
            ttl: v
                .get("ttl_secs")
                .and_then(Value::as_f64)
                .filter(|t| t.is_finite() && *t >= 0.0)
                .map(Duration::from_secs_f64),
        }
    }

    /// True when it no longer stops requests (a request released it).
    pub(crate) fn released(&self) -> bool {
        self.released
    }

    /// What a request that met this tombstone at `key` does: release a deciding tombstone at
    /// once, wait for a deleting one until it is as old as its time to live, and for one
    /// without a phase while its run holds a live lease.
    pub(crate) async fn verdict(
        &self,
        store: &dyn Store,
        key: &Key,
    ) -> Result<Verdict, LeaseError> {
        let release = |yes| {
            if yes { Verdict::Release } else { Verdict::Wait }
        };
        Ok(match (self.phase, self.ttl) {
            (Some(Phase::Deciding), _) => Verdict::Release,
            (Some(Phase::Deleting), Some(ttl)) => release(aged(store, key, ttl).await?),
            _ => release(!self.live(store).await?),
        })
    }

    /// True when the collector that wrote it still holds a live lease. False when there is no
    /// lease, it is stale, or it belongs to another run.
    async fn live(&self, store: &dyn Store) -> Result<bool, LeaseError> {
        Ok(match crate::lease::read(store, &layout::gc_lock()).await? {
            None => false,
            Some(l) if l.is_stale() => false,
            // A tombstone of a collector from before tombstones named their run.
            Some(l) => self.run.is_none() || self.run == l.run,
        })
    }

    /// The body of a tombstone the collector holding the lease of run `run` (time to live `ttl`)
    /// writes while deciding, or once committed to deleting.
    pub(crate) fn body(run: &str, phase: Phase, ttl: Duration) -> Bytes {
        let phase = match phase {
            Phase::Deciding => "deciding",
            Phase::Deleting => "deleting",
        };
        Bytes::from(
            serde_json::json!({"run": run, "phase": phase, "ttl_secs": ttl.as_secs_f64()})
                .to_string(),
        )
    }

    /// The body a request replaces a tombstone with (unique, so its version differs from
    /// every other).
    pub(crate) fn released_body() -> Bytes {
        Bytes::from(serde_json::json!({"released": uuid::Uuid::new_v4().to_string()}).to_string())
    }
}

/// True when the object at `key` was last written `ttl` or longer ago (store clock against
/// ours, as lease ages), or is gone.
pub(crate) async fn aged(store: &dyn Store, key: &Key, ttl: Duration) -> Result<bool, StoreError> {
    match store.stat(key).await {
        Ok(m) => Ok(SystemTime::now()
            .duration_since(m.modified)
            .unwrap_or_default()
            >= ttl),
        Err(e) if e.is_not_found() => Ok(true),
        Err(e) => Err(e),
    }
}
