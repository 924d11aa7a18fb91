//! The collector's lease on `gc/lock` ([`crate::lease::Lease`]) with the run's own checks,
//! reading and breaking it (`rdctl registry gc --status`, `--break-lease`), and how lease
//! errors become [`GcError`]s.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::GcError;
pub use crate::lease::LeaseInfo;
use crate::storage::{Store, layout};
use crate::tombstone::{Doomed, Epochs, Phase, Tombstone};

/// Reads the garbage collection lease; `None` when no collector holds one.
pub async fn read_lease(store: &dyn Store) -> Result<Option<LeaseInfo>, GcError> {
    Ok(crate::lease::read(store, &layout::gc_lock()).await?)
}

/// Removes the lease of a collector that died, so the next run need not wait for it to turn
/// stale. A live lease is refused ([`GcError::LeaseLive`]) unless `force`; a forced break makes
/// the running holder stop at its next renewal. Returns the lease removed (`None`: there was
/// none). Tombstones the holder left are released by the requests that meet them and removed
/// by the next run.
pub async fn break_lease(store: &dyn Store, force: bool) -> Result<Option<LeaseInfo>, GcError> {
    Ok(crate::lease::break_lease(store, &layout::gc_lock(), force).await?)
}

impl From<crate::lease::LeaseError> for GcError {
    fn from(e: crate::lease::LeaseError) -> GcError {
        use crate::lease::LeaseError as L;
        match e {
            L::Store(e) => GcError::Store(e),
            L::Locked {
                key,
                age_secs,
                stale_secs,
            } => GcError::Locked {
                key,
                age_secs,
                stale_secs,
            },
            L::Live {
                key,
                holder,
                age_secs,
                ttl_secs,
            } => GcError::LeaseLive {
                key,
                holder,
                age_secs,
                ttl_secs,
            },
        }
    }
}

/// The collector's lease on `gc/lock` ([`crate::lease::Lease`]), with the run's own checks.
pub(super) struct Lease(pub(super) crate::lease::Lease);

impl Lease {
    pub(super) async fn acquire(store: Arc<dyn Store>, ttl: Duration) -> Result<Lease, GcError> {
        Ok(Lease(
            crate::lease::Lease::acquire(store, layout::gc_lock(), ttl).await?,
        ))
    }

    /// The run's start `t0` on the store's clock.
    pub(super) fn started(&self) -> SystemTime {
        self.0.started()
    }

    /// `Err(LeaseLost)` unless the store says this run still holds the lease
    /// ([`crate::lease::Lease::still_held`]).
    pub(super) async fn ensure_held(&self) -> Result<(), GcError> {
        if self.0.still_held().await? {
            return Ok(());
        }
        Err(GcError::LeaseLost {
            key: layout::gc_lock(),
        })
    }

    /// `Err(LeaseLost)` when the lease was lost (see [`crate::lease::Lease::lost`]).
    pub(super) fn check(&self) -> Result<(), GcError> {
        if self.0.lost() {
            return Err(GcError::LeaseLost {
                key: layout::gc_lock(),
            });
        }
        Ok(())
    }

    /// The body of this run's tombstones while it decides, keeping the digest's `epochs`.
    pub(super) fn tombstone_body(&self, epochs: &Epochs) -> Bytes {
        Tombstone::body(self.0.run(), Phase::Deciding, self.0.ttl(), epochs, None)
    }

    /// The body of a tombstone once this run committed to deleting `doomed`, with the epochs
    /// the commit moved to.
    pub(super) fn commit_body(&self, epochs: &Epochs, doomed: &Doomed) -> Bytes {
        Tombstone::body(
            self.0.run(),
            Phase::Deleting,
            self.0.ttl(),
            epochs,
            Some(doomed),
        )
    }

    pub(super) async fn release(self) {
        self.0.release().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A live holder renews its lease past its time to live; one that is gone (its run
    /// dropped) lets it turn stale; a broken lease makes the holder stop at its next renewal.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn lease_renews_and_expires() {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(crate::storage::FsStore::open(dir.path()).unwrap());
        let ttl = Duration::from_secs(2);
        let lease = Lease::acquire(store.clone(), ttl).await.unwrap();
        assert!(matches!(
            Lease::acquire(store.clone(), ttl).await,
            Err(GcError::Locked { .. })
        ));
        tokio::time::sleep(Duration::from_millis(3300)).await;
        let info = read_lease(store.as_ref()).await.unwrap().unwrap();
        assert!(!info.is_stale(), "{info:?}");
        assert!(info.renewal.unwrap() >= 4, "{info:?}");
        assert_eq!(info.run.as_deref(), Some(lease.0.run()));
        assert!(!lease.0.lost());
        // The holder dies.
        drop(lease);
        tokio::time::sleep(Duration::from_millis(3300)).await;
        assert!(
            read_lease(store.as_ref())
                .await
                .unwrap()
                .unwrap()
                .is_stale()
        );
        // Taken over; then broken under the new holder, which notices.
        let lease = Lease::acquire(store.clone(), ttl).await.unwrap();
        assert!(break_lease(store.as_ref(), false).await.is_err());
        assert!(break_lease(store.as_ref(), true).await.unwrap().is_some());
        tokio::time::sleep(Duration::from_millis(800)).await;
        assert!(lease.0.lost());
        assert!(matches!(lease.check(), Err(GcError::LeaseLost { .. })));
        lease.release().await;
        assert!(read_lease(store.as_ref()).await.unwrap().is_none());
    }
}
