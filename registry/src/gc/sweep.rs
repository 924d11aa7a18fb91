//! The sweep: per digest, the candidates older than the grace window, the tombstone written
//! and committed under the lease, the deletes within the window, and leftover tombstones of
//! other runs removed.

use super::*;

pub(super) struct Sweep<'a> {
    pub(super) store: &'a dyn Store,
    pub(super) repos: &'a Repos,
    pub(super) cutoff: SystemTime,
    pub(super) dry_run: bool,
    pub(super) lease: Option<&'a Lease>,
}

impl Sweep<'_> {
    /// True when `key` was last written before the cutoff; `None` when it is gone.
    pub(super) async fn old(&self, key: &Key) -> Result<Option<(bool, u64)>, GcError> {
        match self.store.stat(key).await {
            Ok(m) => Ok(Some((m.modified < self.cutoff, m.size))),
            Err(e) if e.is_not_found() => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// Which of `plan`'s keys of `d` are candidates at the current epochs `epochs0` (old
    /// enough, and not kept), and which are at dead epochs. Keys of a dead epoch are removed
    /// without a decision: a collector's commit moved the digest past them, and requests never
    /// write them again.
    async fn candidates(
        &self,
        d: &Digest,
        plan: &Plan,
        epochs0: &Epochs,
        out: &mut Outcome,
    ) -> Result<Candidates, GcError> {
        let mut c = Candidates {
            current: epochs0.data().to_owned(),
            ..Candidates::default()
        };
        let mut data_ok = !plan.kept;
        for (name, epoch) in &plan.blob_links {
            let key = layout::blob_link_at(name, d, epoch);
            if epoch != epochs0.blob_link(name) {
                c.dead.push(key);
                continue;
            }
            match self.old(&key).await? {
                Some((true, _)) => c.blob_links.push((name.clone(), epoch.clone())),
                Some((false, _)) => {
                    out.young += 1;
                    data_ok = false;
                }
                None => {}
            }
        }
        for (name, epoch) in &plan.manifest_links {
            let key = layout::manifest_link_at(name, d, epoch);
            if epoch != epochs0.manifest_link(name) {
                c.dead_manifest_links.push((name.clone(), epoch.clone()));
                continue;
            }
            match self.old(&key).await? {
                Some((true, _)) => c.manifest_links.push((name.clone(), epoch.clone())),
                Some((false, _)) => {
                    out.young += 1;
                    data_ok = false;
                }
                None => {}
            }
        }
        // Kept links: only what is at a dead epoch goes.
        for (name, epoch) in &plan.kept_blob_links {
            if epoch != epochs0.blob_link(name) {
                c.dead.push(layout::blob_link_at(name, d, epoch));
            }
        }
        for (name, epoch) in &plan.kept_manifest_links {
            if epoch != epochs0.manifest_link(name) {
                c.dead_manifest_links.push((name.clone(), epoch.clone()));
            }
        }
        let current = c.current.clone();
        let dead_data = plan.data.iter().filter(|e| **e != current);
        c.dead.extend(dead_data.map(|e| layout::blob_data_at(d, e)));
        let dead_used = plan.used.iter().filter(|e| **e != current);
        c.dead.extend(dead_used.map(|e| layout::blob_used_at(d, e)));
        if data_ok && plan.data.contains(&current) {
            match self.old(&layout::blob_data_at(d, &current)).await? {
                Some((true, size)) => c.data_size = Some(size),
                Some((false, _)) => out.young += 1,
                None => {}
            }
        }
        // The hold record goes with the bytes, or when there are no bytes left to protect.
        c.used = !plan.kept
            && plan.used.contains(&current)
            && (c.data_size.is_some() || !plan.data.contains(&current))
            && out.young == 0;
        Ok(c)
    }

    pub(super) async fn sweep(&self, d: Digest, plan: Plan) -> Result<Outcome, GcError> {
        let mut out = Outcome::default();
        let epochs0 = match read_record(self.store, &d).await? {
            Some((r, _)) => r.epochs,
            None => Epochs::default(),
        };
        let Candidates {
            dead,
            dead_manifest_links,
            blob_links,
            manifest_links,
            current,
            data_size,
            used: used_ok,
        } = self.candidates(&d, &plan, &epochs0, &mut out).await?;
        let dead = (dead.as_slice(), dead_manifest_links.as_slice());
        if blob_links.is_empty() && manifest_links.is_empty() && data_size.is_none() && !used_ok {
            self.delete_dead(&d, dead, &mut out).await?;
            return Ok(out);
        }

        let tombstone = layout::blob_tombstone(&d);
        let mut written = None;
        if let (false, Some(lease)) = (self.dry_run, self.lease) {
            // Asked of the store, not of this process: a run paused across a forced break (or
            // a takeover) learns of it here.
            lease.ensure_held().await?;
            match self.write_tombstone(&tombstone, lease).await? {
                // Written over the epochs this run classified the keys by.
                Some((etag, epochs)) if epochs == epochs0 => written = Some(etag),
                // A commit moved them since: the next run decides.
                Some((etag, epochs)) => {
                    self.restore_record(&tombstone, &etag, &epochs).await;
                    return Ok(out);
                }
                // A collector from before manifest links had epochs committed to deleting
                // some of this digest's and may still be at it.
                None => return Ok(out),
            }
        }
        // Tombstone first, then the hold record: a request that held the digest after the
        // cutoff is seen here, and one that holds it from now on meets the tombstone.
        let held = match self.old(&layout::blob_used_at(&d, &current)).await {
            Ok(Some((old, _))) => !old,
            Ok(None) => false,
            Err(e) => {
                if let Some(etag) = &written {
                    self.restore_record(&tombstone, etag, &epochs0).await;
                }
                return Err(e);
            }
        };
        // Deleting needs a live lease: requests release the tombstones of a stale one.
        let lease_ok = self.lease.map_or(Ok(()), Lease::check);
        if held || lease_ok.is_err() {
            if let Some(etag) = &written {
                self.restore_record(&tombstone, etag, &epochs0).await;
            }
            lease_ok?;
            out.held = true;
            return Ok(out);
        }
        // Commit: turn the tombstone into "deleting", conditionally on the version this run
        // wrote, and in the same write move everything it will delete to fresh epochs. A
        // request that met the tombstone meanwhile released it (a conditional replace too),
        // and then this fails and nothing of the digest goes: the store orders the two,
        // whatever this process's clocks and pauses. Once it succeeds, requests write the
        // bytes and links at the new epochs (and stamp what they record about a manifest with
        // its new link's epoch), so no write this run sends (however late it arrives, however
        // often it is repeated) can remove anything a request wrote after the commit.
        let (epochs, doomed) = next_epochs(
            &epochs0,
            (data_size.is_some() || used_ok).then_some(current.as_str()),
            &blob_links,
            &manifest_links,
        );
        let mut ours = written.clone();
        if let (Some(etag), Some(lease)) = (written, self.lease) {
            let sent = Instant::now();
            match self
                .store
                .put(
                    &tombstone,
                    lease.commit_body(&epochs, &doomed),
                    PutMode::Replace(etag.clone()),
                )
                .await
            {
                Ok(etag) => {
                    // Nothing this run deletes from now on needs a time limit; the log says
                    // how long the commit took.
                    tracing::debug!(digest = %d, secs = sent.elapsed().as_secs_f64(), "garbage collection committed");
                    ours = Some(etag);
                }
                Err(StoreError::PreconditionFailed { .. }) => {
                    // Released by a request that relies on the digest: keep everything, and
                    // make the request's marker an idle record while this run holds the lease.
                    self.settle_released(&tombstone).await;
                    out.held = true;
                    return Ok(out);
                }
                Err(e) if e.is_not_found() => {
                    out.held = true;
                    return Ok(out);
                }
                Err(e) => {
                    // Not known whether the commit took: leave the record as it is (requests
                    // release a deciding one, and a deleting one names only dead keys).
                    return Err(e.into());
                }
            }
        }
        let r = self
            .delete_candidates(
                &d,
                (&blob_links, &manifest_links),
                (&current, data_size, used_ok),
                &mut out,
            )
            .await;
        let r = match r {
            Ok(()) => self.delete_dead(&d, dead, &mut out).await,
            Err(e) => Err(e),
        };
        // Done (or stopped): the record goes idle at the new epochs. A run that stopped
        // half-way leaves it idle too: what it had not deleted yet is at dead epochs now, and
        // the next run removes it without a decision.
        if let Some(etag) = &ours {
            self.restore_record(&tombstone, etag, &epochs).await;
        }
        r.map(|()| out)
    }

    /// Deletes keys of dead epochs (see [`Sweep::sweep`]): no request writes them any more, so
    /// no decision is needed. A manifest link of a dead epoch takes what was recorded with it
    /// (a run that stopped after its commit left it).
    async fn delete_dead(
        &self,
        d: &Digest,
        (dead, manifest_links): (&[Key], &[(Name, String)]),
        out: &mut Outcome,
    ) -> Result<(), GcError> {
        if self.dry_run {
            return Ok(());
        }
        for (name, epoch) in manifest_links {
            self.collect_manifest_link(name, d, epoch).await?;
            out.records += 1;
        }
        for key in dead {
            self.delete(key).await?;
            out.records += 1;
        }
        Ok(())
    }

    /// Removes `name`'s link to manifest `d` at `epoch`, with what was recorded with it
    /// ([`Repos::collect_manifest_link`]).
    async fn collect_manifest_link(
        &self,
        name: &Name,
        d: &Digest,
        epoch: &str,
    ) -> Result<bool, GcError> {
        if let Some(lease) = self.lease {
            lease.check()?;
        }
        self.repos
            .collect_manifest_link(name, d, epoch)
            .await
            .map_err(|e| GcError::Unlink {
                repository: name.to_string(),
                digest: d.clone(),
                reason: e.to_string(),
            })
    }

    pub(super) async fn delete_candidates(
        &self,
        d: &Digest,
        (blob_links, manifest_links): (&[LinkAt], &[LinkAt]),
        (data_epoch, data, used): (&str, Option<u64>, bool),
        out: &mut Outcome,
    ) -> Result<(), GcError> {
        let deletion = |kind, name: Option<&Name>, bytes| Deletion {
            kind,
            digest: d.clone(),
            repository: name.map(|n| n.to_string()),
            bytes,
        };
        // Manifest links first, with what was recorded with them (referrer entries, the package
        // index, quota usage), each only at the epoch the commit left behind: a re-push after
        // the commit wrote and stamped everything at the new one.
        for (name, epoch) in manifest_links {
            if !self.dry_run {
                self.collect_manifest_link(name, d, epoch).await?;
            }
            out.deleted
                .push(deletion(ObjectKind::ManifestLink, Some(name), 0));
        }
        // Blob links, bytes and the hold record are at epochs the commit left behind too.
        for (name, epoch) in blob_links {
            if !self.dry_run {
                self.delete(&layout::blob_link_at(name, d, epoch)).await?;
            }
            out.deleted
                .push(deletion(ObjectKind::BlobLink, Some(name), 0));
        }
        if let Some(size) = data {
            if !self.dry_run {
                self.delete(&layout::blob_data_at(d, data_epoch)).await?;
            }
            out.deleted.push(deletion(ObjectKind::Blob, None, size));
        }
        if used {
            if !self.dry_run {
                self.delete(&layout::blob_used_at(d, data_epoch)).await?;
            }
            out.records += 1;
        }
        Ok(())
    }

    /// Deletes `key` (gone already counts).
    pub(super) async fn delete(&self, key: &Key) -> Result<(), GcError> {
        if let Some(lease) = self.lease {
            lease.check()?;
        }
        match self.store.delete(key).await {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes this run's deciding tombstone at `key` over the digest's record, keeping its
    /// epochs, and returns its version with those epochs; never over a tombstone another run
    /// committed to deleting manifest links under (that one stays until it is as old as its
    /// time to live; `None` then): a create-only put, or a conditional replace of what is
    /// there, so no pause of this process between its checks and its writes can undo another
    /// run's commit.
    pub(super) async fn write_tombstone(
        &self,
        key: &Key,
        lease: &Lease,
    ) -> Result<Option<(Etag, Epochs)>, GcError> {
        for _ in 0..TOMBSTONE_ATTEMPTS {
            let none = Epochs::default();
            match self
                .store
                .put(key, lease.tombstone_body(&none), PutMode::Create)
                .await
            {
                Ok(etag) => return Ok(Some((etag, none))),
                Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            let doc = match self.store.get(key, TOMBSTONE_LIMIT).await {
                Ok(doc) => doc,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            };
            let there = Tombstone::parse(&doc.bytes);
            if there.waits_for_collector() {
                let Some(ttl) = there.ttl else {
                    return Ok(None);
                };
                if !aged(self.store, key, ttl).await? {
                    return Ok(None);
                }
            }
            match self
                .store
                .put(
                    key,
                    lease.tombstone_body(&there.epochs),
                    PutMode::Replace(doc.etag),
                )
                .await
            {
                Ok(etag) => return Ok(Some((etag, there.epochs))),
                Err(StoreError::PreconditionFailed { .. }) => continue,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        // Rewritten under us every time: leave the digest to the next run.
        Ok(None)
    }

    /// Turns this run's tombstone at `key` (last written as version `ours`) back into an idle
    /// record of `epochs`, with a conditional replace: a record a request released, or
    /// another run wrote since, is left alone. Never a delete: the record names the current
    /// epochs, and a delete that arrived late could remove a newer record.
    pub(super) async fn restore_record(&self, key: &Key, ours: &Etag, epochs: &Epochs) {
        if self.dry_run {
            return;
        }
        if let Err(e) = self
            .store
            .put(
                key,
                Tombstone::idle_body(epochs),
                PutMode::Replace(ours.clone()),
            )
            .await
            && !matches!(e, StoreError::PreconditionFailed { .. })
            && !e.is_not_found()
        {
            // Requests release a deciding tombstone at once; the next run settles it.
            tracing::warn!(key = %key, error = %e, "garbage collection could not settle its tombstone");
        }
    }

    /// A request released this run's tombstone at `key`: make its marker an idle record (the
    /// next run would otherwise do it).
    pub(super) async fn settle_released(&self, key: &Key) {
        if self.dry_run {
            return;
        }
        if let Ok(doc) = self.store.get(key, TOMBSTONE_LIMIT).await {
            let t = Tombstone::parse(&doc.bytes);
            if t.released() {
                self.restore_record(key, &doc.etag, &t.epochs).await;
            }
        }
    }
}

/// A repository's link and its epoch.
type LinkAt = (Name, String);

/// What [`Sweep::candidates`] found of one digest.
#[derive(Default)]
pub(super) struct Candidates {
    /// Keys at dead epochs.
    dead: Vec<Key>,
    /// Manifest links at dead epochs.
    dead_manifest_links: Vec<(Name, String)>,
    /// Blob links to decide about, with their (current) epochs.
    blob_links: Vec<(Name, String)>,
    /// Manifest links to decide about, with their (current) epochs.
    manifest_links: Vec<(Name, String)>,
    /// The bytes' current epoch.
    current: String,
    /// The bytes are a candidate, of this size.
    data_size: Option<u64>,
    /// The hold record is a candidate.
    used: bool,
}

/// The epochs a commit moves to and what it dooms: the bytes (and their hold record) at
/// `data` when they go, and each link that goes, each moved to a fresh epoch.
fn next_epochs(
    epochs0: &Epochs,
    data: Option<&str>,
    blob_links: &[(Name, String)],
    manifest_links: &[(Name, String)],
) -> (Epochs, Doomed) {
    let mut epochs = epochs0.clone();
    let mut doomed = Doomed::default();
    if let Some(current) = data {
        doomed.data = Some(current.to_owned());
        epochs.data = Epochs::fresh();
    }
    for (name, epoch) in blob_links {
        doomed.blob_links.insert(name.to_string(), epoch.clone());
        epochs.blob_links.insert(name.to_string(), Epochs::fresh());
    }
    for (name, epoch) in manifest_links {
        doomed
            .manifest_link_epochs
            .insert(name.to_string(), epoch.clone());
        epochs
            .manifest_links
            .insert(name.to_string(), Epochs::fresh());
    }
    (epochs, doomed)
}

/// What became of a tombstone a run found left over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leftover {
    /// Settled into an idle record.
    Removed,
    /// Already idle, or gone.
    Gone,
    /// A run committed to deleting manifest links of the digest less than its time to live
    /// ago: left in place.
    Deleting,
}

/// Settles a tombstone of another run (or a request's release marker) found under `blobs/`
/// into an idle record of the same epochs, unless that run committed to deleting manifest
/// links and may still be at it (requests rely on it to wait until then). A run that
/// committed under epochs needs no waiting for: what it was deleting is at dead epochs.
pub(super) async fn remove_leftover(store: &dyn Store, d: &Digest) -> Result<Leftover, GcError> {
    let key = layout::blob_tombstone(d);
    let doc = match store.get(&key, TOMBSTONE_LIMIT).await {
        Ok(doc) => doc,
        Err(e) if e.is_not_found() => return Ok(Leftover::Gone),
        Err(e) => return Err(e.into()),
    };
    let t = Tombstone::parse(&doc.bytes);
    if t.idle() && !t.released() {
        return Ok(Leftover::Gone);
    }
    if t.waits_for_collector()
        && let Some(ttl) = t.ttl
        && !aged(store, &key, ttl).await?
    {
        return Ok(Leftover::Deleting);
    }
    match store
        .put(
            &key,
            Tombstone::idle_body(&t.epochs),
            PutMode::Replace(doc.etag),
        )
        .await
    {
        Ok(_) => Ok(Leftover::Removed),
        Err(StoreError::PreconditionFailed { .. }) => Ok(Leftover::Gone),
        Err(e) if e.is_not_found() => Ok(Leftover::Gone),
        Err(e) => Err(e.into()),
    }
}

/// Conditional writes a run tries before it leaves a digest whose tombstone keeps changing.
pub(super) const TOMBSTONE_ATTEMPTS: usize = 8;
