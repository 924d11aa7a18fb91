//! The API's DELETEs of a repository's link to a digest (`DELETE /v2/<name>/manifests/<digest>`,
//! `DELETE /v2/<name>/blobs/<digest>`), made harmless when they reach the store late.
//!
//! A store DELETE can land long after the request that sent it was answered (a slow gateway,
//! the S3 SDK retrying while its first attempt is still on its way). Had the API deleted the
//! link at the epoch it has, a client that deleted a manifest and then pushed it again would
//! have its re-push written at that same key, and the late DELETE would remove it: an
//! acknowledged push lost. So a DELETE does what a collector's commit does (`docs/gc.md`,
//! "Epochs"): it first moves the repository's link to a fresh epoch in the digest's record, with
//! a conditional write, and only then deletes the keys of the epoch it left. A re-push writes at
//! the new epoch, a key no DELETE was ever sent for.

use bytes::Bytes;
use serde_json::Value;
use validator::{Digest, Name};

use super::barrier::Patience;
use super::{MAX_ATTEMPTS, Repos};
use crate::errors::{ApiError, ApiResult};
use crate::storage::{Key, PutMode, StoreError, layout};
use crate::tombstone::{Epochs, TOMBSTONE_LIMIT, Tombstone, Verdict};

/// Which of a repository's links to a digest.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LinkKind {
    Blob,
    Manifest,
}

impl LinkKind {
    /// The member of the record's `epochs` that names this kind's epoch per repository.
    fn field(self) -> &'static str {
        match self {
            LinkKind::Blob => "blob_links",
            LinkKind::Manifest => "manifest_links",
        }
    }

    /// The current epoch of `name`'s link of this kind in `epochs`.
    fn epoch(self, epochs: &Epochs, name: &Name) -> String {
        match self {
            LinkKind::Blob => epochs.blob_link(name),
            LinkKind::Manifest => epochs.manifest_link(name),
        }
        .to_owned()
    }

    /// `epochs` with `name`'s link of this kind at `epoch`.
    fn moved(self, epochs: &Epochs, name: &Name, epoch: &str) -> Epochs {
        let mut moved = epochs.clone();
        let links = match self {
            LinkKind::Blob => &mut moved.blob_links,
            LinkKind::Manifest => &mut moved.manifest_links,
        };
        links.insert(name.as_str().to_owned(), epoch.to_owned());
        moved
    }

    /// The key of `name`'s link of this kind to `d` at `epoch`.
    fn key(self, name: &Name, d: &Digest, epoch: &str) -> Key {
        match self {
            LinkKind::Blob => layout::blob_link_at(name, d, epoch),
            LinkKind::Manifest => layout::manifest_link_at(name, d, epoch),
        }
    }
}

/// The record `bytes` with `name`'s link of `kind` at `epoch`, every other member as it was
/// (a collector's phase, run, time to live and doomed list stay, so its own later conditional
/// writes fail their condition, as they do after a request's release). A record that is not a
/// JSON object (it never is, unless damaged) becomes one naming just this epoch.
fn record_moved(bytes: &[u8], kind: LinkKind, name: &Name, epoch: &str) -> Bytes {
    let mut v: Value = serde_json::from_slice(bytes).unwrap_or(Value::Null);
    if !v.is_object() {
        v = Value::Object(serde_json::Map::new());
    }
    let member = |v: &mut Value, k: &str| {
        if !v.get(k).is_some_and(Value::is_object) {
            v[k] = Value::Object(serde_json::Map::new());
        }
    };
    member(&mut v, "epochs");
    member(&mut v["epochs"], kind.field());
    v["epochs"][kind.field()][name.as_str()] = Value::String(epoch.to_owned());
    Bytes::from(v.to_string())
}

impl Repos {
    /// The current epoch of `name`'s link of `kind` to `d`, as the digest's record names it
    /// (`""`: the legacy key, also when there is no record).
    pub(super) async fn link_epoch(
        &self,
        name: &Name,
        d: &Digest,
        kind: LinkKind,
    ) -> ApiResult<String> {
        let record = crate::tombstone::read_record(self.store.as_ref(), d).await?;
        Ok(record.map_or_else(String::new, |(r, _)| kind.epoch(&r.epochs, name)))
    }

    /// Moves `name`'s link of `kind` to `d` to a fresh epoch in the digest's record and
    /// returns the epoch it had: a create-only put when there is no record, a conditional
    /// replace of the version read otherwise, read again and retried when another write came
    /// first. A collector is met as a request meets it ([`Repos::hold`]): a tombstone still
    /// deciding is released (the marker names the moved epoch), so that collector deletes
    /// nothing of `d`; a deleting one of an older version is waited for; one that committed
    /// under epochs deletes only keys of epochs it left, so the record is edited under it.
    pub(super) async fn retire_link_epoch(
        &self,
        name: &Name,
        d: &Digest,
        kind: LinkKind,
    ) -> ApiResult<String> {
        let key = layout::blob_tombstone(d);
        let fresh = Epochs::fresh();
        let mut patience = Patience::new();
        for _ in 0..MAX_ATTEMPTS {
            let (written, old) = match self.store.get(&key, TOMBSTONE_LIMIT).await {
                Err(e) if e.is_not_found() => {
                    let epochs = kind.moved(&Epochs::default(), name, &fresh);
                    let body = Tombstone::idle_body(&epochs);
                    (
                        self.store.put(&key, body, PutMode::Create).await,
                        String::new(),
                    )
                }
                Err(e) => return Err(e.into()),
                Ok(doc) => {
                    let record = Tombstone::parse(&doc.bytes);
                    let verdict = record
                        .verdict(self.store.as_ref(), &key)
                        .await
                        .map_err(|e| {
                            ApiError::internal(format!(
                                "judging the collector's tombstone {key}: {e}"
                            ))
                        })?;
                    let body = match verdict {
                        Verdict::Proceed => record_moved(&doc.bytes, kind, name, &fresh),
                        Verdict::Release => {
                            Tombstone::released_body(&kind.moved(&record.epochs, name, &fresh))
                        }
                        Verdict::Wait => {
                            patience.wait(d, &key).await?;
                            continue;
                        }
                    };
                    let put = self.store.put(&key, body, PutMode::Replace(doc.etag)).await;
                    if put.is_ok() && verdict == Verdict::Release {
                        tracing::info!(key = %key, "released a garbage collection's tombstone");
                    }
                    (put, kind.epoch(&record.epochs, name))
                }
            };
            match written {
                Ok(_) => return Ok(old),
                // Written (or, by an older version, removed) since it was read: read again.
                Err(StoreError::PreconditionFailed { .. } | StoreError::AlreadyExists { .. }) => {
                    tokio::task::yield_now().await;
                }
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Err(ApiError::internal(format!(
            "gave up moving {name}'s link to {d} to a new epoch in {key} after {MAX_ATTEMPTS} \
             conflicting writes"
        )))
    }

    /// Deletes `name`'s link of `kind` to `d` at the keys a DELETE that moved it away from
    /// epoch `old` ([`Repos::retire_link_epoch`]) left: that epoch's, the legacy key, and
    /// `found` (where the DELETE's read found it; an even older epoch if a collector committed
    /// in between). None of them is written again, so a copy of these store DELETEs that lands
    /// late removes nothing written since.
    pub(super) async fn delete_retired(
        &self,
        kind: LinkKind,
        name: &Name,
        d: &Digest,
        old: &str,
        found: Key,
    ) -> ApiResult<()> {
        let mut keys = vec![found, kind.key(name, d, old), kind.key(name, d, "")];
        keys.sort_by(|a, b| a.as_str().cmp(b.as_str()));
        keys.dedup();
        for key in keys {
            match self.store.delete(&key).await {
                Ok(()) => {}
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Moving one repository's epoch keeps every other member of the record as it was: the
    /// collector's phase, run, time to live and doomed list, and other repositories' epochs.
    #[test]
    fn a_moved_record_keeps_the_collectors_members() {
        let name = Name::parse("team/app").unwrap();
        let record = serde_json::json!({
            "run": "r1", "phase": "deleting", "ttl_secs": 15.0,
            "epochs": {"data": "00000000000000aa", "manifest_links": {"other/repo": "00000000000000bb"}},
            "doomed": {"manifest_link_epochs": {"team/app": ""}},
        });
        let bytes = serde_json::to_vec(&record).unwrap();
        let moved = record_moved(&bytes, LinkKind::Manifest, &name, "00000000000000cc");
        let v: Value = serde_json::from_slice(&moved).unwrap();
        let mut want = record.clone();
        want["epochs"]["manifest_links"]["team/app"] = "00000000000000cc".into();
        assert_eq!(v, want);
        let t = Tombstone::parse(&moved);
        assert_eq!(t.epochs.manifest_link(&name), "00000000000000cc");
        assert_eq!(t.epochs.data(), "00000000000000aa");
        assert!(t.waits_for_collector() == Tombstone::parse(&bytes).waits_for_collector());

        // A blob link, in a record without epochs yet, and a damaged record.
        let moved = record_moved(
            br#"{"released":"x"}"#,
            LinkKind::Blob,
            &name,
            "00000000000000dd",
        );
        let t = Tombstone::parse(&moved);
        assert!(t.released());
        assert_eq!(t.epochs.blob_link(&name), "00000000000000dd");
        let moved = record_moved(b"[1]", LinkKind::Blob, &name, "00000000000000ee");
        let t = Tombstone::parse(&moved);
        assert!(t.idle());
        assert_eq!(t.epochs.blob_link(&name), "00000000000000ee");
    }
}
