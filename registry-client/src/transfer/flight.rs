//! One upload of a blob per destination at a time.
//!
//! Copies that run at once (`rdctl sync` with `--concurrency`, the registry's `[[sync]]`) can
//! reach the same blob in the same destination repository: images of one repository often
//! share a base layer. Both would see it missing and both would upload it, and CNCF
//! distribution 2.8 answers one of two such uploads committed at once with `400
//! DIGEST_INVALID`. A [`SingleFlight`] keyed by destination and digest lets the first copier
//! upload while the others wait; each waiter then checks the destination again and finds the
//! blob there.
//!
//! Only copiers of the same key wait for each other: each key has its own lock, so unrelated
//! blobs go on in parallel. The table holds an entry only while someone holds or waits for its
//! key (the last one out removes it, also when its future is dropped while waiting), so its
//! size is bounded by the copies in flight.

use std::collections::HashMap;
use std::fmt;
use std::hash::Hash;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::OwnedMutexGuard;
use validator::Digest;

/// A blob at one destination: `registry/repository` (or a layout directory) and its digest.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(crate) struct BlobKey {
    /// Where it goes, spelled once per destination (`HOST/NAME`, `oci:DIR`).
    pub(crate) destination: String,
    /// The blob.
    pub(crate) digest: Digest,
}

/// Per-key mutual exclusion with a table that only holds the keys in use.
pub(crate) struct SingleFlight<K> {
    slots: Mutex<HashMap<K, Slot>>,
}

struct Slot {
    lock: Arc<tokio::sync::Mutex<()>>,
    /// Holders and waiters.
    users: usize,
}

impl<K> fmt::Debug for SingleFlight<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SingleFlight")
            .field("in_flight", &self.table().len())
            .finish()
    }
}

impl<K> Default for SingleFlight<K> {
    fn default() -> Self {
        SingleFlight {
            slots: Mutex::new(HashMap::new()),
        }
    }
}

impl<K> SingleFlight<K> {
    /// The table; a panic elsewhere while it was held leaves it consistent (every change is
    /// one insert, decrement or remove), so a poisoned lock is taken as it is.
    fn table(&self) -> MutexGuard<'_, HashMap<K, Slot>> {
        self.slots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl<K: Eq + Hash + Clone> SingleFlight<K> {
    /// Waits until no one else holds `key`, then holds it until the returned [`Flight`] is
    /// dropped.
    pub(crate) async fn enter(&self, key: K) -> Flight<'_, K> {
        let lock = {
            let mut slots = self.table();
            let slot = slots.entry(key.clone()).or_insert_with(|| Slot {
                lock: Arc::default(),
                users: 0,
            });
            slot.users += 1;
            slot.lock.clone()
        };
        // Counted from here: dropping this future while it waits still gives the slot back.
        let ticket = Ticket { flights: self, key };
        let guard = lock.lock_owned().await;
        Flight {
            _guard: guard,
            _ticket: ticket,
        }
    }

    /// Keys held or waited for now.
    #[cfg(test)]
    pub(crate) fn in_flight(&self) -> usize {
        self.table().len()
    }
}

/// One holder's or waiter's share of a slot.
struct Ticket<'a, K: Eq + Hash> {
    flights: &'a SingleFlight<K>,
    key: K,
}

impl<K: Eq + Hash> Drop for Ticket<'_, K> {
    fn drop(&mut self) {
        let mut slots = self.flights.table();
        if let Some(slot) = slots.get_mut(&self.key) {
            slot.users -= 1;
            if slot.users == 0 {
                slots.remove(&self.key);
            }
        }
    }
}

/// A held key. Fields drop in order: the lock is released before the slot is given back.
pub(crate) struct Flight<'a, K: Eq + Hash> {
    _guard: OwnedMutexGuard<()>,
    _ticket: Ticket<'a, K>,
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use super::*;

    /// A destination that, like a registry, has or lacks a blob, and counts uploads.
    #[derive(Default)]
    struct Destination {
        has: Mutex<HashSet<Digest>>,
        uploads: AtomicUsize,
    }

    impl Destination {
        /// What the copy path does per blob: check, upload if missing (taking a while, as a
        /// large layer does), under the flight when one is given.
        async fn push(&self, flights: Option<&SingleFlight<BlobKey>>, digest: &Digest) {
            let _flight = match flights {
                Some(f) => Some(
                    f.enter(BlobKey {
                        destination: "reg.example/app".to_owned(),
                        digest: digest.clone(),
                    })
                    .await,
                ),
                None => None,
            };
            if self.has.lock().unwrap().contains(digest) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
            self.uploads.fetch_add(1, Ordering::SeqCst);
            self.has.lock().unwrap().insert(digest.clone());
        }
    }

    #[tokio::test]
    async fn two_pushes_of_one_digest_upload_once() {
        let d = Digest::sha256(b"layer");
        let flights = SingleFlight::default();
        let dest = Destination::default();
        tokio::join!(
            dest.push(Some(&flights), &d),
            dest.push(Some(&flights), &d),
            dest.push(Some(&flights), &d)
        );
        assert_eq!(dest.uploads.load(Ordering::SeqCst), 1);
        assert_eq!(flights.in_flight(), 0, "the table empties");

        // The same race without the flight uploads the blob once per copier.
        let dest = Destination::default();
        tokio::join!(dest.push(None, &d), dest.push(None, &d));
        assert_eq!(dest.uploads.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn other_keys_do_not_wait() {
        let flights = SingleFlight::default();
        let key = |s: &[u8]| BlobKey {
            destination: "reg.example/app".to_owned(),
            digest: Digest::sha256(s),
        };
        let held = flights.enter(key(b"a")).await;
        // Another digest, and the same digest at another destination, go straight in.
        let other = tokio::time::timeout(Duration::from_secs(5), flights.enter(key(b"b")))
            .await
            .expect("another digest does not wait");
        let elsewhere = BlobKey {
            destination: "reg.example/other".to_owned(),
            ..key(b"a")
        };
        let elsewhere = tokio::time::timeout(Duration::from_secs(5), flights.enter(elsewhere))
            .await
            .expect("another repository does not wait");
        assert_eq!(flights.in_flight(), 3);
        // The same key waits while it is held.
        assert!(
            tokio::time::timeout(Duration::from_millis(50), flights.enter(key(b"a")))
                .await
                .is_err()
        );
        // That waiter was dropped: it gave its share back, and the key goes when released.
        assert_eq!(flights.in_flight(), 3);
        drop((held, other, elsewhere));
        assert_eq!(flights.in_flight(), 0);
    }
}
