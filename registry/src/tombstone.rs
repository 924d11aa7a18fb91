//! The digest's record `blobs/…/gc`: the storage rule by which a garbage collector and the
//! requests that hold a digest ([`crate::repo::Repos::hold`]) agree on who goes first, and
//! which **epoch** of the digest's keys is current. The core honours it on every hold; the
//! collector (`crate::gc`) writes it. Its document, the phases and what a request does on
//! meeting one live here, so the core never imports the collector. The race analysis is in
//! `docs/gc.md`, "Why an acknowledged push loses nothing".
//!
//! Epochs make a late DELETE harmless. A store without conditional deletes cannot stop a DELETE
//! the collector sent from arriving after a request wrote the same key again (a slow gateway,
//! an SDK retry of a request still in flight). So a collector never deletes a key a request
//! may still write: when it commits to deleting a digest's bytes (or one repository's link to
//! them), the commit moves that part to a fresh epoch, and from then on requests write the
//! bytes at `data-<epoch>` (the link at `<hex>-<epoch>`), keys no DELETE was ever sent for.
//! The record is never deleted once an epoch moved (it is the only place that names the
//! current epoch; it is small).

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::Value;
use validator::{Digest, Name};

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
#[derive(Debug, Default, Clone)]
pub(crate) struct Tombstone {
    run: Option<String>,
    released: bool,
    pub(crate) phase: Option<Phase>,
    pub(crate) ttl: Option<Duration>,
    /// The current epochs of the digest's keys.
    pub(crate) epochs: Epochs,
    /// With [`Phase::Deleting`]: what the run committed to deleting, at the epochs it had
    /// then (no longer current). `None` in a record written before epochs.
    pub(crate) doomed: Option<Doomed>,
    /// Written by a version that knows epochs (an idle record always has the field).
    has_epochs: bool,
}

/// Which epoch of a digest's keys is current: its bytes (and their hold record), and each
/// repository's link to it. `""` is the legacy key (no epoch suffix): a digest no collector
/// ever committed to deleting has only legacy keys, and its record may not exist at all.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Epochs {
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub(crate) data: String,
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) blob_links: BTreeMap<String, String>,
    /// The current epoch of each repository's link to the digest as a manifest.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) manifest_links: BTreeMap<String, String>,
}

impl Epochs {
    /// The current epoch of the bytes.
    pub(crate) fn data(&self) -> &str {
        &self.data
    }

    /// The current epoch of `name`'s link to the blob.
    pub(crate) fn blob_link(&self, name: &Name) -> &str {
        self.blob_links
            .get(name.as_str())
            .map_or("", String::as_str)
    }

    /// The current epoch of `name`'s link to the manifest.
    pub(crate) fn manifest_link(&self, name: &Name) -> &str {
        self.manifest_links
            .get(name.as_str())
            .map_or("", String::as_str)
    }

    /// The key of `name`'s manifest link at the current epoch.
    pub(crate) fn manifest_link_key(&self, name: &Name, d: &Digest) -> Key {
        layout::manifest_link_at(name, d, self.manifest_link(name))
    }

    /// The key of the bytes at the current epoch.
    pub(crate) fn data_key(&self, d: &Digest) -> Key {
        layout::blob_data_at(d, &self.data)
    }

    /// The key of `name`'s blob link at the current epoch.
    pub(crate) fn blob_link_key(&self, name: &Name, d: &Digest) -> Key {
        layout::blob_link_at(name, d, self.blob_link(name))
    }

    /// A new epoch no key was ever written under: 16 random hex digits.
    pub(crate) fn fresh() -> String {
        let mut s = uuid::Uuid::new_v4().simple().to_string();
        s.truncate(16);
        s
    }

    fn is_empty(&self) -> bool {
        self.data.is_empty() && self.blob_links.is_empty() && self.manifest_links.is_empty()
    }

    fn parse(v: Option<&Value>) -> Epochs {
        let Some(v) = v else {
            return Epochs::default();
        };
        // Epochs that are not well formed are ignored (read as the legacy keys), never used to
        // build a key.
        let mut e: Epochs = serde_json::from_value(v.clone()).unwrap_or_default();
        if !layout::epoch_ok(&e.data) {
            e.data.clear();
        }
        e.blob_links
            .retain(|n, ep| layout::epoch_ok(ep) && Name::parse(n).is_ok());
        e.manifest_links
            .retain(|n, ep| layout::epoch_ok(ep) && Name::parse(n).is_ok());
        e
    }
}

/// What a collector committed to deleting, at the epochs that were current before its commit.
#[derive(Debug, Default, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Doomed {
    /// The bytes and their hold record, at this epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) data: Option<String>,
    /// Blob links, by repository, at these epochs.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) blob_links: BTreeMap<String, String>,
    /// Manifest links without epochs (legacy keys, by repository), written by a collector of
    /// the version before manifest links had epochs: requests relying on such a digest wait
    /// for that collector (`docs/gc.md`). This version writes [`Doomed::manifest_link_epochs`].
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub(crate) manifest_links: Vec<String>,
    /// Manifest links, by repository, at these epochs; with them the entries the repository's
    /// documents (referrers, package index, quota usage) recorded at that epoch.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub(crate) manifest_link_epochs: BTreeMap<String, String>,
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
    /// A collector committed to deleting, and moved what it deletes to new epochs: go on with
    /// the record's epochs, no key of which it deletes.
    Proceed,
}

impl Tombstone {
    pub(crate) fn parse(bytes: &[u8]) -> Tombstone {
        let v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
        Tombstone {
            epochs: Epochs::parse(v.get("epochs")),
            has_epochs: v.get("epochs").is_some(),
            doomed: v
                .get("doomed")
                .and_then(|d| serde_json::from_value(d.clone()).ok()),
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

    /// True when no collector is at work on it: an epoch record, or one a request released.
    pub(crate) fn idle(&self) -> bool {
        self.released || (self.phase.is_none() && self.has_epochs)
    }

    /// True when a collector committed to deleting keys requests write (manifest links, or
    /// anything in a record from before epochs) and requests wait for it.
    pub(crate) fn waits_for_collector(&self) -> bool {
        self.phase == Some(Phase::Deleting)
            && self
                .doomed
                .as_ref()
                .is_none_or(|doomed| !doomed.manifest_links.is_empty())
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
        if self.idle() {
            return Ok(Verdict::Proceed);
        }
        // Committed under epochs, with nothing deleted at a key a request writes: go on.
        if let (Some(Phase::Deleting), Some(doomed)) = (self.phase, &self.doomed)
            && doomed.manifest_links.is_empty()
        {
            return Ok(Verdict::Proceed);
        }
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
    /// writes while deciding (`doomed` `None`), or once committed to deleting `doomed`, with the
    /// digest's `epochs` (after the commit: the new ones).
    pub(crate) fn body(
        run: &str,
        phase: Phase,
        ttl: Duration,
        epochs: &Epochs,
        doomed: Option<&Doomed>,
    ) -> Bytes {
        let phase = match phase {
            Phase::Deciding => "deciding",
            Phase::Deleting => "deleting",
        };
        let mut v = serde_json::json!({"run": run, "phase": phase, "ttl_secs": ttl.as_secs_f64()});
        if !epochs.is_empty() {
            v["epochs"] = serde_json::to_value(epochs).unwrap_or(Value::Null);
        }
        if let Some(doomed) = doomed {
            v["doomed"] = serde_json::to_value(doomed).unwrap_or(Value::Null);
        }
        Bytes::from(v.to_string())
    }

    /// The body a request replaces a tombstone with (unique, so its version differs from
    /// every other), keeping the digest's epochs.
    pub(crate) fn released_body(epochs: &Epochs) -> Bytes {
        let mut v = serde_json::json!({"released": uuid::Uuid::new_v4().to_string()});
        if !epochs.is_empty() {
            v["epochs"] = serde_json::to_value(epochs).unwrap_or(Value::Null);
        }
        Bytes::from(v.to_string())
    }

    /// The body of an idle record: the digest's epochs, no collector at work.
    pub(crate) fn idle_body(epochs: &Epochs) -> Bytes {
        Bytes::from(serde_json::json!({"epochs": epochs}).to_string())
    }
}

/// The record of `d` and its version, `None` when there is none (every key at its legacy
/// epoch).
pub(crate) async fn read_record(
    store: &dyn Store,
    d: &Digest,
) -> Result<Option<(Tombstone, crate::storage::Etag)>, StoreError> {
    match store.get(&layout::blob_tombstone(d), TOMBSTONE_LIMIT).await {
        Ok(doc) => Ok(Some((Tombstone::parse(&doc.bytes), doc.etag))),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Where the bytes of `d` can be read: the legacy key, or else the one of the epoch its
/// record names. Bytes are content-addressed, so for a read any copy is the right one, even
/// one a collector is deleting; a request that writes or acknowledges uses the epochs of its
/// hold instead ([`crate::repo::Repos::hold_epochs`]). `None` when there are none.
pub(crate) async fn find_data(
    store: &dyn Store,
    d: &Digest,
) -> Result<Option<(Key, crate::storage::ObjectMeta)>, StoreError> {
    find_per_epoch(
        store,
        d,
        layout::blob_data(d),
        |e| (!e.data.is_empty()).then(|| e.data_key(d)),
        |k| async move { absent_as_none(store.stat(&k).await) },
    )
    .await
}

/// Where `name`'s link to manifest `d` can be read: the legacy key, or else the one of the
/// epoch the digest's record names (as [`find_data`] for the bytes). `None` when neither
/// exists.
pub(crate) async fn find_manifest_link(
    store: &dyn Store,
    name: &Name,
    d: &Digest,
    limit: u64,
) -> Result<Option<(Key, crate::storage::Document)>, StoreError> {
    find_per_epoch(
        store,
        d,
        layout::manifest_link(name, d),
        |e| (!e.manifest_link(name).is_empty()).then(|| e.manifest_link_key(name, d)),
        |k| async move { absent_as_none(store.get(&k, limit).await) },
    )
    .await
}

/// Finds something of `d` that is stored per epoch (its bytes, a repository's link to it):
/// at `legacy`, or else at the key `at` gives for the epochs the digest's record names
/// (`None` when they name none for it). `probe` looks at one key, `Ok(None)` when it is
/// absent. The legacy key goes first: a digest no collector ever committed on has no record,
/// and then this costs one request.
/// (`probe` takes the key by value: a future borrowing its argument is not `Send` for every
/// lifetime, which the router's handlers need.)
pub(crate) async fn find_per_epoch<T, E, F, Fut>(
    store: &dyn Store,
    d: &Digest,
    legacy: Key,
    at: impl FnOnce(&Epochs) -> Option<Key>,
    probe: F,
) -> Result<Option<(Key, T)>, E>
where
    E: From<StoreError>,
    F: Fn(Key) -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>, E>>,
{
    if let Some(found) = probe(legacy.clone()).await? {
        return Ok(Some((legacy, found)));
    }
    let Some((record, _)) = read_record(store, d).await? else {
        return Ok(None);
    };
    let Some(key) = at(&record.epochs) else {
        return Ok(None);
    };
    Ok(probe(key.clone()).await?.map(|found| (key, found)))
}

/// `r`, with a `NotFound` error as `None`.
fn absent_as_none<T>(r: Result<T, StoreError>) -> Result<Option<T>, StoreError> {
    match r {
        Ok(found) => Ok(Some(found)),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// The bytes of `d` read whole (at most `limit`), from wherever [`find_data`] finds them; a
/// `NotFound` error naming the legacy key when there are none.
pub(crate) async fn get_data(
    store: &dyn Store,
    d: &Digest,
    limit: u64,
) -> Result<crate::storage::Document, StoreError> {
    let legacy = layout::blob_data(d);
    match store.get(&legacy, limit).await {
        Err(e) if e.is_not_found() => get_epoch_data(store, d, limit, &legacy).await,
        r => r,
    }
}

/// The bytes of `d` at the record's epoch, for a caller that just found the legacy key
/// `legacy` missing (no second look at it, no stat before the read); a `NotFound` error naming
/// `legacy` when there are none.
pub(crate) async fn get_epoch_data(
    store: &dyn Store,
    d: &Digest,
    limit: u64,
    legacy: &Key,
) -> Result<crate::storage::Document, StoreError> {
    let missing = || StoreError::NotFound {
        store: store.name(),
        key: legacy.clone(),
    };
    match read_record(store, d).await? {
        Some((record, _)) if !record.epochs.data.is_empty() => {
            match store.get(&record.epochs.data_key(d), limit).await {
                Err(e) if e.is_not_found() => Err(missing()),
                r => r,
            }
        }
        _ => Err(missing()),
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
