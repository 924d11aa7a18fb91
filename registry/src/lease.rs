//! Named leases in the store: one holder at a time for work that replicas share (garbage
//! collection holds `gc/lock`, scheduled sync `_rd/sync/lock`).
//!
//! A [`Lease`] is a small JSON document created with a create-only put, renewed in the
//! background every quarter of its time to live with a conditional replace (the etag of the
//! last write), taken over by another holder once it was not renewed for its whole time to live
//! (stale), and deleted on release only while it is still ours. A holder must stop its work when
//! [`Lease::lost`]: the lease was taken over or broken, or it could not renew for half its time
//! to live (others judge it stale only after all of it, so what it does before it notices still
//! happens under a live lease). [`read`] shows who holds a lease, [`break_lease`] removes a dead
//! holder's lease for operators.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::Bytes;
use serde::Serialize;
use serde_json::Value;

use crate::storage::{Etag, Key, PutMode, Store, StoreError};

/// Shortest lease time to live (store timestamps may have whole seconds).
pub const MIN_LEASE_TTL: Duration = Duration::from_secs(2);
/// The time to live of a lease that does not state one (written by a collector from before
/// leases carried `ttl_secs`, which renewed every minute).
const LEGACY_LEASE_TTL: Duration = Duration::from_secs(15 * 60);
/// Largest lease document read.
pub(crate) const LEASE_LIMIT: u64 = 64 << 10;

/// Taking, reading or breaking a lease failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeaseError {
    /// A store operation failed.
    #[error("lease: store operation failed")]
    Store(#[from] StoreError),
    /// Another holder has the lease.
    #[error("the lease {key} is held (renewed {age_secs} s ago; it is stale after {stale_secs} s)")]
    Locked {
        /// The lease key.
        key: Key,
        /// Seconds since it was renewed.
        age_secs: u64,
        /// When it counts as stale.
        stale_secs: u64,
    },
    /// `break_lease` found a live lease and was not forced.
    #[error(
        "the lease {key} is live (held by {holder}, renewed {age_secs} s ago, stale after {ttl_secs} s); use --force to break it"
    )]
    Live {
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

/// A lease document as read from the store: who holds it, since when, and whether it is still
/// live.
#[derive(Debug, Clone, Serialize)]
pub struct LeaseInfo {
    /// The holder's run id (each acquisition has its own).
    pub run: Option<String>,
    /// The holder's host name, when it recorded one.
    pub host: Option<String>,
    /// The holder's process id.
    pub pid: Option<u64>,
    /// When the holder took it, in seconds since the Unix epoch (holder's clock).
    pub started_unix: Option<u64>,
    /// Renewals so far.
    pub renewal: Option<u64>,
    /// Seconds since the last renewal (store clock against ours).
    pub age_secs: u64,
    /// The time to live, in seconds.
    pub ttl_secs: u64,
    /// Time since the last renewal, unrounded (`age_secs` is it in whole seconds).
    #[serde(skip)]
    pub(crate) age: Duration,
    #[serde(skip)]
    pub(crate) etag: Etag,
}

impl LeaseInfo {
    /// True when the holder did not renew within the time to live: it is presumed dead. A
    /// lease exactly as old as its time to live is stale (its holder stopped deleting after
    /// half of it).
    pub fn is_stale(&self) -> bool {
        self.age >= Duration::from_secs(self.ttl_secs)
    }

    /// `pid P on HOST (run R)`, as far as the lease tells.
    pub fn holder(&self) -> String {
        format!(
            "pid {} on {} (run {})",
            self.pid.map_or_else(|| "?".to_owned(), |p| p.to_string()),
            self.host.as_deref().unwrap_or("an unknown host"),
            self.run.as_deref().unwrap_or("?")
        )
    }
}

/// Reads the lease at `key`; `None` when nobody holds it.
pub async fn read(store: &dyn Store, key: &Key) -> Result<Option<LeaseInfo>, StoreError> {
    let doc = match store.get(key, LEASE_LIMIT).await {
        Ok(doc) => doc,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let meta = match store.stat(key).await {
        Ok(m) => m,
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e),
    };
    let v: Value = serde_json::from_slice(&doc.bytes).unwrap_or(Value::Null);
    let age = SystemTime::now()
        .duration_since(meta.modified)
        .unwrap_or_default();
    Ok(Some(LeaseInfo {
        run: v.get("run").and_then(Value::as_str).map(str::to_owned),
        host: v.get("host").and_then(Value::as_str).map(str::to_owned),
        pid: v.get("pid").and_then(Value::as_u64),
        started_unix: v.get("started").and_then(Value::as_u64),
        renewal: v.get("renewal").and_then(Value::as_u64),
        age_secs: age.as_secs(),
        age,
        ttl_secs: v
            .get("ttl_secs")
            .and_then(Value::as_u64)
            .unwrap_or(LEGACY_LEASE_TTL.as_secs()),
        etag: doc.etag,
    }))
}

/// Removes the lease at `key` of a holder that died, so the next one need not wait for it to
/// turn stale. A live lease is refused ([`LeaseError::Live`]) unless `force`; a forced break
/// makes the running holder stop at its next renewal. Returns the lease removed (`None`: there
/// was none).
pub async fn break_lease(
    store: &dyn Store,
    key: &Key,
    force: bool,
) -> Result<Option<LeaseInfo>, LeaseError> {
    let Some(info) = read(store, key).await? else {
        return Ok(None);
    };
    if !info.is_stale() && !force {
        return Err(LeaseError::Live {
            key: key.clone(),
            holder: info.holder(),
            age_secs: info.age_secs,
            ttl_secs: info.ttl_secs,
        });
    }
    // Replace it with an expired lease of no run first (conditional: a lease renewed or taken
    // over meanwhile is not ours to break), then delete that.
    let broken = Bytes::from(
        serde_json::json!({"run": null, "broken": uuid::Uuid::new_v4().to_string(), "ttl_secs": 0})
            .to_string(),
    );
    match store
        .put(key, broken, PutMode::Replace(info.etag.clone()))
        .await
    {
        Ok(_) => {}
        Err(StoreError::PreconditionFailed { .. }) => {
            return Err(LeaseError::Locked {
                key: key.clone(),
                age_secs: 0,
                stale_secs: info.ttl_secs,
            });
        }
        Err(e) if e.is_not_found() => return Ok(None),
        Err(e) => return Err(e.into()),
    }
    match store.delete(key).await {
        Ok(()) => {}
        Err(e) if e.is_not_found() => {}
        Err(e) => return Err(e.into()),
    }
    tracing::warn!(key = %key, holder = %info.holder(), age_secs = info.age_secs, "lease broken");
    Ok(Some(info))
}

/// A held lease, renewed in the background until [`Lease::release`] or drop.
#[derive(Debug)]
pub struct Lease {
    store: Arc<dyn Store>,
    key: Key,
    run: String,
    started: SystemTime,
    ttl: Duration,
    etag: Arc<std::sync::Mutex<Etag>>,
    /// When the last renewal (or the acquisition) was sent and succeeded.
    renewed: Arc<std::sync::Mutex<Instant>>,
    lost: Arc<AtomicBool>,
    renewer: tokio::task::JoinHandle<()>,
}

pub(crate) fn host_name() -> Option<String> {
    std::env::var("HOSTNAME")
        .ok()
        .or_else(|| std::fs::read_to_string("/etc/hostname").ok())
        .map(|h| h.trim().to_owned())
        .filter(|h| !h.is_empty())
}

fn lease_body(run: &str, n: u64, started: u64, ttl: Duration) -> Bytes {
    Bytes::from(
        serde_json::json!({
            "run": run,
            "renewal": n,
            "pid": std::process::id(),
            "host": host_name(),
            "started": started,
            "ttl_secs": ttl.as_secs(),
        })
        .to_string(),
    )
}

impl Lease {
    /// Takes the lease at `key` (or takes over a stale one); [`LeaseError::Locked`] when
    /// another holder has a live one. `ttl` is raised to [`MIN_LEASE_TTL`].
    pub async fn acquire(
        store: Arc<dyn Store>,
        key: Key,
        ttl: Duration,
    ) -> Result<Lease, LeaseError> {
        let ttl = ttl.max(MIN_LEASE_TTL);
        let run = uuid::Uuid::new_v4().to_string();
        let started_unix = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let body = || lease_body(&run, 0, started_unix, ttl);
        let sent = Instant::now();
        let locked = |age_secs, stale_secs| LeaseError::Locked {
            key: key.clone(),
            age_secs,
            stale_secs,
        };
        let etag = match store.put(&key, body(), PutMode::Create).await {
            Ok(etag) => etag,
            Err(StoreError::AlreadyExists { .. }) => {
                let Some(held) = read(store.as_ref(), &key).await? else {
                    return Err(locked(0, ttl.as_secs()));
                };
                if !held.is_stale() {
                    return Err(locked(held.age_secs, held.ttl_secs));
                }
                tracing::warn!(key = %key, holder = %held.holder(), age_secs = held.age_secs, "taking over a stale lease");
                match store
                    .put(&key, body(), PutMode::Replace(held.etag.clone()))
                    .await
                {
                    Ok(etag) => etag,
                    Err(StoreError::PreconditionFailed { .. }) => {
                        return Err(locked(0, held.ttl_secs));
                    }
                    Err(e) => return Err(e.into()),
                }
            }
            Err(e) => return Err(e.into()),
        };
        // The lease's own time is the holder's start on the store's clock.
        let started = store.stat(&key).await?.modified;
        let etag = Arc::new(std::sync::Mutex::new(etag));
        let renewed = Arc::new(std::sync::Mutex::new(sent));
        let lost = Arc::new(AtomicBool::new(false));
        let renewer = {
            let (store, etag, renewed, lost, run, key) = (
                store.clone(),
                etag.clone(),
                renewed.clone(),
                lost.clone(),
                run.clone(),
                key.clone(),
            );
            tokio::spawn(async move {
                for n in 1.. {
                    tokio::time::sleep(ttl / 4).await;
                    let current = etag.lock().unwrap_or_else(|e| e.into_inner()).clone();
                    let sent = Instant::now();
                    match store
                        .put(
                            &key,
                            lease_body(&run, n, started_unix, ttl),
                            PutMode::Replace(current),
                        )
                        .await
                    {
                        Ok(new) => {
                            *etag.lock().unwrap_or_else(|e| e.into_inner()) = new;
                            *renewed.lock().unwrap_or_else(|e| e.into_inner()) = sent;
                        }
                        Err(StoreError::PreconditionFailed { .. }) => {
                            tracing::warn!(key = %key, "lease was taken over or broken");
                            lost.store(true, Ordering::SeqCst);
                            return;
                        }
                        Err(e) => {
                            tracing::warn!(key = %key, error = %e, "cannot renew the lease")
                        }
                    }
                }
            })
        };
        Ok(Lease {
            store,
            key,
            run,
            started,
            ttl,
            etag,
            renewed,
            lost,
            renewer,
        })
    }

    /// The key it is held at.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// This acquisition's run id.
    pub fn run(&self) -> &str {
        &self.run
    }

    /// When it was taken, on the store's clock.
    pub fn started(&self) -> SystemTime {
        self.started
    }

    /// Its time to live.
    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Asks the store whether this run still holds the lease: false when it was lost (as
    /// [`Lease::lost`]) or the document at its key no longer names this run (broken, or taken
    /// over). A read, not a process-local flag, so a holder that was paused (SIGSTOP) across a
    /// forced break learns of it before its next step, not at its next renewal.
    pub async fn still_held(&self) -> Result<bool, StoreError> {
        if self.lost() {
            return Ok(false);
        }
        let doc = match self.store.get(&self.key, LEASE_LIMIT).await {
            Ok(doc) => doc,
            Err(e) if e.is_not_found() => return Ok(false),
            Err(e) => return Err(e),
        };
        let v: Value = serde_json::from_slice(&doc.bytes).unwrap_or(Value::Null);
        Ok(v.get("run").and_then(Value::as_str) == Some(self.run.as_str()) && !self.lost())
    }

    /// True when the holder must stop: the lease was taken over or broken, or it was not
    /// renewed for half its time to live.
    pub fn lost(&self) -> bool {
        self.lost.load(Ordering::SeqCst)
            || self
                .renewed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .elapsed()
                > self.ttl / 2
    }

    /// Stops renewing and deletes the lease if it is still ours: also after it was lost by
    /// failing to renew (a stall, a store outage) while nobody took it over, so a run that
    /// stopped itself does not leave the next one refused until the lease turns stale.
    pub async fn release(mut self) {
        self.renewer.abort();
        // Wait out a renewal in flight, so it cannot land after the lease is gone.
        let _ = (&mut self.renewer).await;
        let ours = self.etag.lock().unwrap_or_else(|e| e.into_inner()).clone();
        // Delete only our own lease (a taken-over one belongs to another holder).
        match self.store.get(&self.key, LEASE_LIMIT).await {
            Ok(doc) if doc.etag == ours => {
                if let Err(e) = self.store.delete(&self.key).await {
                    tracing::warn!(key = %self.key, error = %e, "cannot release the lease");
                }
            }
            _ => {}
        }
    }
}

impl Drop for Lease {
    /// A holder dropped before it finished (its task cancelled) stops renewing, so its lease
    /// turns stale like a dead process's.
    fn drop(&mut self) {
        self.renewer.abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::layout;

    /// A lease exactly as old as its time to live is stale (taken over, released by requests);
    /// a moment younger it is live.
    #[test]
    fn stale_at_exactly_the_ttl() {
        let info = |age| LeaseInfo {
            run: Some("r".to_owned()),
            host: None,
            pid: None,
            started_unix: None,
            renewal: None,
            age_secs: Duration::as_secs(&age),
            age,
            ttl_secs: 60,
            etag: Etag(String::new()),
        };
        assert!(info(Duration::from_secs(60)).is_stale());
        assert!(info(Duration::from_secs(61)).is_stale());
        assert!(!info(Duration::from_millis(59_999)).is_stale());
        assert!(!info(Duration::ZERO).is_stale());
    }

    /// Leases under different keys are independent (GC's and sync's), one key has one holder,
    /// and a released lease can be taken again at once.
    #[tokio::test]
    async fn named_leases_are_independent() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(crate::storage::FsStore::open(dir.path()).unwrap());
        let ttl = Duration::from_secs(5);
        let gc = Lease::acquire(store.clone(), layout::gc_lock(), ttl)
            .await
            .unwrap();
        let sync = Lease::acquire(store.clone(), layout::sync_lock(), ttl)
            .await
            .unwrap();
        assert!(matches!(
            Lease::acquire(store.clone(), layout::sync_lock(), ttl).await,
            Err(LeaseError::Locked { .. })
        ));
        let held = read(store.as_ref(), &layout::sync_lock())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(held.run.as_deref(), Some(sync.run()));
        assert_eq!(held.ttl_secs, 5);
        sync.release().await;
        assert!(
            read(store.as_ref(), &layout::sync_lock())
                .await
                .unwrap()
                .is_none()
        );
        let again = Lease::acquire(store.clone(), layout::sync_lock(), ttl)
            .await
            .unwrap();
        assert!(!gc.lost() && !again.lost());
        assert_eq!(
            read(store.as_ref(), &layout::gc_lock())
                .await
                .unwrap()
                .unwrap()
                .run
                .as_deref(),
            Some(gc.run())
        );
        again.release().await;
        gc.release().await;
    }
}
