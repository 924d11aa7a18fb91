//! Manifests in a repository: their bytes, links and referrer entries, and how a manifest
//! leaves a repository (a DELETE, or garbage collection of one link epoch).
//!
//! A repository's link to a manifest has an epoch like a blob link (`docs/gc.md`, "Epochs"):
//! the legacy key `_manifests/<alg>/<hex>` or `<hex>-<epoch>`, the digest's record naming the
//! current one. What a manifest PUT records about the manifest in the repository's documents
//! (its referrer entry, its quota usage, its package index entries) is stamped with the epoch
//! of the link it wrote, so a collector that committed to deleting the link of one epoch
//! forgets exactly what was recorded with it, however late its writes land: a re-push after
//! the commit writes at the new epoch and restamps the entries.

use bytes::Bytes;
use validator::{Digest, Name, Tag};

use super::hooks::Leaving;
use super::unlink::LinkKind;
use super::{LINK_ATTEMPTS, LINK_LIMIT, ManifestLink, ReferrersDoc, Repos, TagsDoc};
use crate::errors::{ApiError, ApiResult};
use crate::storage::{Key, PutMode, StoreError, layout};
use crate::tombstone::Epochs;

impl Repos {
    /// Stores verified manifest bytes under their digest (create-only: existing bytes are the
    /// same bytes), at the epoch a hold of `d` gave.
    pub async fn put_manifest_bytes(
        &self,
        d: &Digest,
        epochs: &Epochs,
        bytes: Bytes,
    ) -> ApiResult<()> {
        match self
            .store
            .put(&epochs.data_key(d), bytes, PutMode::Create)
            .await
        {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Links stored manifest bytes into the repository, at the epoch a hold of `d` gave.
    pub async fn link_manifest(
        &self,
        name: &Name,
        d: &Digest,
        epochs: &Epochs,
        link: &ManifestLink,
    ) -> ApiResult<()> {
        self.ensure(name).await?;
        let bytes = serde_json::to_vec(link).map_err(ApiError::internal)?;
        self.store
            .put(
                &epochs.manifest_link_key(name, d),
                Bytes::from(bytes),
                PutMode::Overwrite,
            )
            .await?;
        Ok(())
    }

    /// The repository's link to manifest `d`, for a read: the legacy key, or else the one of
    /// the current epoch.
    pub async fn manifest_link(&self, name: &Name, d: &Digest) -> ApiResult<Option<ManifestLink>> {
        Ok(self.manifest_link_find(name, d).await?.map(|(_, l)| l))
    }

    /// The key and document of the link [`Repos::manifest_link`] finds.
    async fn manifest_link_find(
        &self,
        name: &Name,
        d: &Digest,
    ) -> ApiResult<Option<(Key, ManifestLink)>> {
        let found =
            crate::tombstone::find_manifest_link(self.store.as_ref(), name, d, LINK_LIMIT).await?;
        let Some((key, doc)) = found else {
            return Ok(None);
        };
        let link = serde_json::from_slice(&doc.bytes).map_err(|e| super::corrupt(&key, e))?;
        Ok(Some((key, link)))
    }

    /// The current epoch of `name`'s link to manifest `d` (what a document that records
    /// something about the manifest stamps its entry with when no hold gave it).
    pub(crate) async fn manifest_link_epoch(&self, name: &Name, d: &Digest) -> ApiResult<String> {
        self.link_epoch(name, d, LinkKind::Manifest).await
    }

    /// When `name`'s link to manifest `d` was last written (the newer of the legacy key and
    /// the current epoch's, so a push again after a collection counts); `None` without one.
    pub(crate) async fn manifest_link_written(
        &self,
        name: &Name,
        d: &Digest,
    ) -> ApiResult<Option<std::time::SystemTime>> {
        let mut keys = vec![layout::manifest_link(name, d)];
        let epoch = self.manifest_link_epoch(name, d).await?;
        if !epoch.is_empty() {
            keys.push(layout::manifest_link_at(name, d, &epoch));
        }
        let mut newest = None;
        for key in keys {
            match self.store.stat(&key).await {
                Ok(m) => newest = newest.max(Some(m.modified)),
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(newest)
    }

    /// True when the repository links manifest `d` at the epoch a hold gave. A link of an
    /// earlier epoch (a collector committed to deleting it, and its DELETE may still be on the
    /// way) is written again at the current epoch first, with its referrer entry: the client
    /// relies on it (an index names it as a child), and the repository did have it.
    pub(crate) async fn relink_manifest(
        &self,
        name: &Name,
        d: &Digest,
        epochs: &Epochs,
    ) -> ApiResult<bool> {
        let key = epochs.manifest_link_key(name, d);
        if self.read::<ManifestLink>(&key, LINK_LIMIT).await?.is_some() {
            return Ok(true);
        }
        let Some((_, link)) = self.manifest_link_find(name, d).await? else {
            return Ok(false);
        };
        self.link_manifest(name, d, epochs, &link).await?;
        if let Some(subject) = &link.subject {
            let desc = serde_json::json!({
                "mediaType": link.media_type,
                "digest": d.as_str(),
                "size": link.size,
            });
            self.add_referrer(name, subject, d, desc, epochs.manifest_link(name))
                .await?;
        }
        Ok(true)
    }

    /// Removes a manifest from the repository, with every tag pointing at it and its entry in
    /// its subject's referrers. False when the repository did not hold it. The link moves to
    /// a fresh epoch first (`unlink`), then the tags set with an earlier link go
    /// ([`Repos::remove_stale_tags`]) and what the repository's documents recorded with the
    /// link of the epoch it left is forgotten (a re-push meanwhile wrote at the new epoch and
    /// stamped its tags and entries with it: they stay), then that epoch's key and the legacy
    /// key go. With no link to find, tags of an earlier link still go (a DELETE that failed
    /// after its move, or a PUT that failed after a move, left them): true when any did.
    pub async fn delete_manifest(&self, name: &Name, d: &Digest) -> ApiResult<bool> {
        let Some((found, link)) = self.manifest_link_find(name, d).await? else {
            return Ok(self.remove_stale_tags(name, d).await? > 0);
        };
        let old = self.retire_link_epoch(name, d, LinkKind::Manifest).await?;
        self.remove_stale_tags(name, d).await?;
        self.forget_manifest(name, d, &link, Leaving::Deleted(&old))
            .await?;
        // A legacy link beside an epoch's (a collector's DELETE of it still to come, or an
        // older replica's write): its entries are stamped with the legacy epoch, which nothing
        // of this version writes once the record names another.
        if !old.is_empty() && found == layout::manifest_link(name, d) {
            self.forget_manifest(name, d, &link, Leaving::Deleted(""))
                .await?;
        }
        self.delete_retired(LinkKind::Manifest, name, d, &old, found)
            .await?;
        Ok(true)
    }

    /// Removes the tags of `name` pointing at manifest `d` that were set with a link of an
    /// epoch other than the one the digest's record names now, and returns how many. The tag
    /// index is read before the record, so a tag at the epoch read was set by a push after
    /// every move so far and stays (a later move's own DELETE decides about it); a tag at
    /// another epoch was set by a push the move came after, or one that will set it again at
    /// the new epoch when it reads the epoch after its tags (the conditional write then fails
    /// and this reads again).
    pub(crate) async fn remove_stale_tags(&self, name: &Name, d: &Digest) -> ApiResult<usize> {
        let mut removed = 0;
        self.update_reading::<TagsDoc, _, _, _, _>(
            &layout::tags(name),
            super::INDEX_LIMIT,
            || self.link_epoch(name, d, LinkKind::Manifest),
            |t, current| {
                let gone: Vec<String> = (t.tags.iter())
                    .filter(|(_, v)| v.digest() == d && v.epoch() != current)
                    .map(|(k, _)| k.clone())
                    .collect();
                for tag in &gone {
                    t.tags.remove(tag);
                    t.changed(tag);
                }
                removed = gone.len();
                removed > 0
            },
        )
        .await?;
        Ok(removed)
    }

    /// Publishes manifest `d` in `name` with `attempt`, which writes its link, its referrer
    /// entry and its tags `tags` (and whatever else the caller records) at the epochs one hold
    /// gives and returns the link's epoch; then checks that the digest's record still names
    /// that epoch. A DELETE of the manifest that moved the link to a fresh epoch after the hold
    /// (`unlink`) deletes the keys of the epoch it left and the tags set with it, so what was
    /// just written there is dead: no read finds the link (or, the legacy key, reads find it
    /// but a collector removes it without a grace window), its entries and tags are forgotten
    /// or will be. The writer then comes after the DELETE and makes another attempt, at the
    /// new epoch (up to [`LINK_ATTEMPTS`]). A move after the check is a DELETE after the
    /// write, which removes the tags set here. A writer that fails after a move (its next
    /// attempt found a blob deleted, a quota refusal, a store error) first undoes what it wrote
    /// at the dead epoch: its tags, which would name a manifest no link holds, and the link
    /// with its entries, as a collection of a dead-epoch link does.
    pub(crate) async fn link_manifest_current<F, Fut>(
        &self,
        name: &Name,
        d: &Digest,
        tags: &[Tag],
        mut attempt: F,
    ) -> ApiResult<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = ApiResult<String>>,
    {
        // The epoch of the last attempt a move made dead.
        let mut dead: Option<String> = None;
        for _ in 0..LINK_ATTEMPTS {
            let checked = async {
                let epoch = attempt().await?;
                Ok::<_, ApiError>((self.manifest_link_epoch(name, d).await?, epoch))
            };
            match checked.await {
                Ok((now, epoch)) if now == epoch => return Ok(()),
                Ok((now, epoch)) => {
                    tracing::info!(
                        repository = %name, digest = %d, written = epoch, current = %now,
                        "a DELETE moved the manifest's link while it was being written: linking it again"
                    );
                    dead = Some(epoch);
                }
                Err(e) => return Err(self.undo_dead(name, d, tags, dead, e).await),
            }
        }
        let e = ApiError::internal(format!(
            "gave up linking {d} into {name}: its link moved to another epoch during each of \
             {LINK_ATTEMPTS} attempts"
        ));
        Err(self.undo_dead(name, d, tags, dead, e).await)
    }

    /// What [`Repos::link_manifest_current`] does when it fails after a move: undoes the tags
    /// and the link its attempt wrote at the `dead` epoch. Returns `e`, the failure to answer.
    async fn undo_dead(
        &self,
        name: &Name,
        d: &Digest,
        tags: &[Tag],
        dead: Option<String>,
        e: ApiError,
    ) -> ApiError {
        let Some(epoch) = dead else {
            return e;
        };
        let undone = async {
            self.unset_tags(name, tags, d, &epoch).await?;
            self.collect_manifest_link(name, d, &epoch).await
        };
        if let Err(undo) = undone.await {
            tracing::warn!(repository = %name, digest = %d, epoch, error = %undo, "a failed manifest write could not undo its writes at the epoch a DELETE left: a DELETE by digest removes its tags");
        }
        e
    }

    /// Removes the tags among `tags` that still point at manifest `d` as set with a link of
    /// `epoch`: a writer's own tags, set at an epoch a DELETE then moved the link from, when it
    /// fails before setting them again at the new one.
    async fn unset_tags(
        &self,
        name: &Name,
        tags: &[Tag],
        d: &Digest,
        epoch: &str,
    ) -> ApiResult<()> {
        self.update::<TagsDoc, _>(&layout::tags(name), |t| {
            let mut changed = false;
            for tag in tags {
                if (t.tags.get(tag.as_str())).is_some_and(|v| v.digest() == d && v.epoch() == epoch)
                {
                    t.tags.remove(tag.as_str());
                    t.changed(tag.as_str());
                    changed = true;
                }
            }
            changed
        })
        .await?;
        Ok(())
    }

    /// Garbage collection of `name`'s link to manifest `d` at `epoch`, which a collector
    /// committed to deleting (or which a commit left at a dead epoch): the referrer entry, the
    /// package index entries and the quota usage recorded with that link are forgotten, then
    /// the link goes. Tags are left alone: a tag pointing at `d` now was set by a request that
    /// held `d` after the mark, at the new epochs. False when the link was gone already.
    pub(crate) async fn collect_manifest_link(
        &self,
        name: &Name,
        d: &Digest,
        epoch: &str,
    ) -> ApiResult<bool> {
        let key = layout::manifest_link_at(name, d, epoch);
        let Some(link) = self.read::<ManifestLink>(&key, LINK_LIMIT).await? else {
            return Ok(false);
        };
        // Each record forgets before the unlink: a crash in between leaves the link, and the
        // next run forgets again.
        self.forget_manifest(name, d, &link, Leaving::Collected(epoch))
            .await?;
        match self.store.delete(&key).await {
            Ok(()) => Ok(true),
            Err(e) if e.is_not_found() => Ok(false),
            Err(e) => Err(e.into()),
        }
    }

    /// Drops what the repository's documents recorded about manifest `d` (its referrer entry,
    /// then the features' records through the hooks); with `epoch`, only what was recorded
    /// with the link of that epoch.
    async fn forget_manifest(
        &self,
        name: &Name,
        d: &Digest,
        link: &ManifestLink,
        leaving: Leaving<'_>,
    ) -> ApiResult<()> {
        if let Some(subject) = &link.subject {
            self.remove_referrer(name, subject, d, Some(leaving.epoch()))
                .await?;
        }
        for hook in self.hooks.iter() {
            hook.on_delete(self, name, d, leaving).await?;
        }
        Ok(())
    }

    // ---- referrers ----

    /// Records `descriptor` (of manifest `d`, linked at `epoch`) as a referrer of `subject`.
    /// An entry already there keeps its descriptor and takes the new epoch.
    pub async fn add_referrer(
        &self,
        name: &Name,
        subject: &Digest,
        d: &Digest,
        descriptor: serde_json::Value,
        epoch: &str,
    ) -> ApiResult<()> {
        let ds = d.as_str();
        self.update::<ReferrersDoc, _>(&layout::referrers(name, subject), |r| {
            let listed =
                (r.manifests.iter()).any(|m| m.get("digest").and_then(|v| v.as_str()) == Some(ds));
            let stamp = r.epochs.get(ds).map_or("", String::as_str);
            if listed && stamp == epoch {
                return false;
            }
            if !listed {
                r.manifests.push(descriptor.clone());
            }
            if epoch.is_empty() {
                r.epochs.remove(ds);
            } else {
                r.epochs.insert(ds.to_owned(), epoch.to_owned());
            }
            true
        })
        .await?;
        Ok(())
    }

    /// Drops manifest `d` from the referrers of `subject`; with `epoch`, only when its entry
    /// was recorded at that epoch.
    async fn remove_referrer(
        &self,
        name: &Name,
        subject: &Digest,
        d: &Digest,
        epoch: Option<&str>,
    ) -> ApiResult<()> {
        let ds = d.as_str();
        self.update::<ReferrersDoc, _>(&layout::referrers(name, subject), |r| {
            let stamp = r.epochs.get(ds).map_or("", String::as_str);
            if epoch.is_some_and(|e| e != stamp) {
                return false;
            }
            let before = r.manifests.len();
            r.manifests
                .retain(|m| m.get("digest").and_then(|v| v.as_str()) != Some(ds));
            let stamped = r.epochs.remove(ds).is_some();
            r.manifests.len() != before || stamped
        })
        .await?;
        Ok(())
    }

    pub async fn referrers(
        &self,
        name: &Name,
        subject: &Digest,
    ) -> ApiResult<Vec<serde_json::Value>> {
        let doc: Option<ReferrersDoc> = self
            .read(&layout::referrers(name, subject), super::INDEX_LIMIT)
            .await?;
        Ok(doc.map(|d| d.manifests).unwrap_or_default())
    }
}
