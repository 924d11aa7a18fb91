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

    pub(super) async fn sweep(&self, d: Digest, plan: Plan) -> Result<Outcome, GcError> {
        let mut out = Outcome::default();
        // Keep only candidates older than the cutoff; a young link keeps the bytes too.
        let mut blob_links = Vec::new();
        let mut manifest_links = Vec::new();
        let mut data_ok = plan.data;
        for (names, manifest, keep) in [
            (&plan.blob_links, false, &mut blob_links),
            (&plan.manifest_links, true, &mut manifest_links),
        ] {
            for name in names {
                let key = if manifest {
                    layout::manifest_link(name, &d)
                } else {
                    layout::blob_link(name, &d)
                };
                match self.old(&key).await? {
                    Some((true, _)) => keep.push(name.clone()),
                    Some((false, _)) => {
                        out.young += 1;
                        data_ok = false;
                    }
                    None => {}
                }
            }
        }
        let mut data_size = 0;
        if data_ok {
            match self.old(&layout::blob_data(&d)).await? {
                Some((true, size)) => data_size = size,
                Some((false, _)) => {
                    out.young += 1;
                    data_ok = false;
                }
                None => data_ok = false,
            }
        }
        // The hold record goes with the bytes, or when there are no bytes left to protect.
        let used_ok = plan.used && (data_ok || !plan.data) && out.young == 0;
        if blob_links.is_empty() && manifest_links.is_empty() && !data_ok && !used_ok {
            return Ok(out);
        }

        let tombstone = layout::blob_tombstone(&d);
        let mut written = None;
        if let (false, Some(lease)) = (self.dry_run, self.lease) {
            // Asked of the store, not of this process: a run paused across a forced break (or
            // a takeover) learns of it here.
            lease.ensure_held().await?;
            match self.write_tombstone(&tombstone, lease).await? {
                Some(etag) => written = Some(etag),
                // Another run committed to deleting this digest and may still be at it.
                None => return Ok(out),
            }
        }
        // Tombstone first, then the hold record: a request that held the digest after the
        // cutoff is seen here, and one that holds it from now on waits for the tombstone.
        let held = match self.old(&layout::blob_used(&d)).await {
            Ok(Some((old, _))) => !old,
            Ok(None) => false,
            Err(e) => {
                self.remove_tombstone(&tombstone, written.as_ref()).await;
                return Err(e);
            }
        };
        // Deleting needs a live lease: requests release the tombstones of a stale one.
        let lease_ok = self.lease.map_or(Ok(()), Lease::check);
        if held || lease_ok.is_err() {
            self.remove_tombstone(&tombstone, written.as_ref()).await;
            lease_ok?;
            out.held = true;
            return Ok(out);
        }
        // Commit: turn the tombstone into "deleting", conditionally on the version this run
        // wrote. A request that met the tombstone meanwhile released it (a conditional replace
        // too), and then this fails and nothing of the digest goes: the store orders the two,
        // whatever this process's clocks and pauses (a forced break, SIGSTOP). Requests wait
        // for a "deleting" tombstone until it is gone or expired (its time to live), and this
        // run deletes only within half of that after sending the commit.
        let mut deadline = None;
        let mut ours = written.clone();
        if let (Some(etag), Some(lease)) = (written, self.lease) {
            let sent = Instant::now();
            match self
                .store
                .put(&tombstone, lease.commit_body(), PutMode::Replace(etag))
                .await
            {
                Ok(etag) => {
                    deadline = Some((sent, lease.0.ttl() / 2));
                    ours = Some(etag);
                }
                Err(StoreError::PreconditionFailed { .. }) => {
                    // Released by a request that relies on the digest: keep everything, and
                    // remove the request's marker while this run still holds the lease.
                    self.remove_tombstone(&tombstone, None).await;
                    out.held = true;
                    return Ok(out);
                }
                Err(e) if e.is_not_found() => {
                    out.held = true;
                    return Ok(out);
                }
                Err(e) => {
                    self.remove_tombstone(&tombstone, ours.as_ref()).await;
                    return Err(e.into());
                }
            }
        }
        let r = self
            .delete_candidates(
                &d,
                (&blob_links, &manifest_links),
                data_ok.then_some(data_size),
                used_ok,
                deadline,
                &mut out,
            )
            .await;
        self.remove_tombstone(&tombstone, ours.as_ref()).await;
        r.map(|()| out)
    }

    pub(super) async fn delete_candidates(
        &self,
        d: &Digest,
        (blob_links, manifest_links): (&[Name], &[Name]),
        data: Option<u64>,
        used: bool,
        deadline: Option<(Instant, Duration)>,
        out: &mut Outcome,
    ) -> Result<(), GcError> {
        let past_window = || GcError::DeleteWindow {
            digest: d.clone(),
            window_secs: deadline.map_or(0.0, |(_, window)| window.as_secs_f64()),
        };
        let until = deadline.map(|(sent, window)| sent + window);
        let in_window = || match deadline {
            Some((sent, window)) if sent.elapsed() >= window => Err(past_window()),
            _ => Ok(()),
        };
        let deletion = |kind, name: Option<&Name>, bytes| Deletion {
            kind,
            digest: d.clone(),
            repository: name.map(|n| n.to_string()),
            bytes,
        };
        for name in manifest_links {
            if let (false, Some(lease)) = (self.dry_run, self.lease) {
                lease.check()?;
                in_window()?;
            }
            if !self.dry_run {
                // Also drops the manifest from its subject's referrers. No tag can point at it:
                // one set after the mark came from a PUT that held the digest.
                // Each of its writes looks at the window first: a run paused in the middle
                // (SIGSTOP) does not go on with the rest once requests may rely on the digest.
                let done = self
                    .repos
                    .delete_manifest_until(name, d, until)
                    .await
                    .map_err(|e| GcError::Unlink {
                        repository: name.to_string(),
                        digest: d.clone(),
                        reason: e.to_string(),
                    })?;
                if done.is_none() {
                    return Err(past_window());
                }
            }
            out.deleted
                .push(deletion(ObjectKind::ManifestLink, Some(name), 0));
        }
        let mut data = data;
        for name in blob_links {
            let key = layout::blob_link(name, d);
            if !self.dry_run {
                // An upload of fresh bytes links them without holding the digest (fresh bytes
                // are no candidate); if it rewrote a stale link of this digest since the check
                // above, the link and the bytes stay.
                match self.old(&key).await? {
                    Some((true, _)) => {
                        in_window()?;
                        if !self.delete(&key, until).await? {
                            return Err(past_window());
                        }
                    }
                    Some((false, _)) => {
                        out.young += 1;
                        data = None;
                        continue;
                    }
                    None => continue,
                }
            }
            out.deleted
                .push(deletion(ObjectKind::BlobLink, Some(name), 0));
        }
        if let Some(size) = data {
            if !self.dry_run {
                in_window()?;
                if !self.delete(&layout::blob_data(d), until).await? {
                    return Err(past_window());
                }
            }
            out.deleted.push(deletion(ObjectKind::Blob, None, size));
        }
        if used && (data.is_some() || out.young == 0) {
            if !self.dry_run {
                in_window()?;
                if !self.delete(&layout::blob_used(d), until).await? {
                    return Err(past_window());
                }
            }
            out.records += 1;
        }
        Ok(())
    }

    /// Deletes `key` (gone already counts); with `until`, only before it (the store looks
    /// right before the request that removes it): false when it had passed.
    pub(super) async fn delete(&self, key: &Key, until: Option<Instant>) -> Result<bool, GcError> {
        if let Some(lease) = self.lease {
            lease.check()?;
        }
        let r = match until {
            Some(until) => self.store.delete_before(key, until).await,
            None => self.store.delete(key).await.map(|()| true),
        };
        match r {
            Ok(done) => Ok(done),
            Err(e) if e.is_not_found() => Ok(true),
            Err(e) => Err(e.into()),
        }
    }

    /// Writes this run's deciding tombstone at `key` and returns its version, never over a
    /// tombstone another run committed to deleting under (that one stays until it is as old as
    /// its time to live; `None` then): a create-only put, or a conditional replace of what is
    /// there (a released marker, a tombstone still deciding or expired), so no pause of this
    /// process between its checks and its writes can undo another run's commit.
    pub(super) async fn write_tombstone(
        &self,
        key: &Key,
        lease: &Lease,
    ) -> Result<Option<Etag>, GcError> {
        for _ in 0..TOMBSTONE_ATTEMPTS {
            match self
                .store
                .put(key, lease.tombstone_body(), PutMode::Create)
                .await
            {
                Ok(etag) => return Ok(Some(etag)),
                Err(StoreError::AlreadyExists { .. }) => {}
                Err(e) => return Err(e.into()),
            }
            let doc = match self.store.get(key, TOMBSTONE_LIMIT).await {
                Ok(doc) => doc,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            };
            let there = Tombstone::parse(&doc.bytes);
            if let (Some(Phase::Deleting), Some(ttl)) = (there.phase, there.ttl)
                && !aged(self.store, key, ttl).await?
            {
                return Ok(None);
            }
            match self
                .store
                .put(key, lease.tombstone_body(), PutMode::Replace(doc.etag))
                .await
            {
                Ok(etag) => return Ok(Some(etag)),
                Err(StoreError::PreconditionFailed { .. }) => continue,
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            }
        }
        // Rewritten under us every time: leave the digest to the next run.
        Ok(None)
    }

    /// Removes the tombstone at `key` (this run's, last written as version `ours`, or a
    /// request's release marker). Deletes cannot be conditional (SeaweedFS has none), so it
    /// deletes only while the store says this run still holds the lease; a run that lost it
    /// releases its own tombstone with a conditional replace instead (never touching one the
    /// run holding the lease now wrote), and the next run removes the marker.
    pub(super) async fn remove_tombstone(&self, key: &Key, ours: Option<&Etag>) {
        if self.dry_run {
            return;
        }
        if let Some(lease) = self.lease
            && !matches!(lease.0.still_held().await, Ok(true))
        {
            if let Some(etag) = ours
                && let Err(e) = self
                    .store
                    .put(
                        key,
                        Tombstone::released_body(),
                        PutMode::Replace(etag.clone()),
                    )
                    .await
                && !matches!(e, StoreError::PreconditionFailed { .. })
                && !e.is_not_found()
            {
                tracing::warn!(key = %key, error = %e, "garbage collection could not release its tombstone");
            }
            return;
        }
        if let Err(e) = self.store.delete(key).await
            && !e.is_not_found()
        {
            // Requests on this digest wait for it while this run's lease lives, then release it;
            // the next run removes it.
            tracing::warn!(key = %key, error = %e, "garbage collection could not remove a tombstone");
        }
    }
}

/// What became of a tombstone a run found left over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Leftover {
    /// Removed.
    Removed,
    /// Already gone.
    Gone,
    /// A run committed to deleting the digest less than its time to live ago: left in place.
    Deleting,
}

/// Removes a tombstone of another run found under `blobs/`, unless that run committed to
/// deleting and may still be at it (requests rely on it to wait until then).
pub(super) async fn remove_leftover(store: &dyn Store, d: &Digest) -> Result<Leftover, GcError> {
    let key = layout::blob_tombstone(d);
    let doc = match store.get(&key, TOMBSTONE_LIMIT).await {
        Ok(doc) => doc,
        Err(e) if e.is_not_found() => return Ok(Leftover::Gone),
        Err(e) => return Err(e.into()),
    };
    let t = Tombstone::parse(&doc.bytes);
    if let (Some(Phase::Deleting), Some(ttl)) = (t.phase, t.ttl)
        && !aged(store, &key, ttl).await?
    {
        return Ok(Leftover::Deleting);
    }
    match store.delete(&key).await {
        Ok(()) => Ok(Leftover::Removed),
        Err(e) if e.is_not_found() => Ok(Leftover::Gone),
        Err(e) => Err(e.into()),
    }
}

/// Conditional writes a run tries before it leaves a digest whose tombstone keeps changing.
pub(super) const TOMBSTONE_ATTEMPTS: usize = 8;
