//! Garbage no zone uses, after a pass: blobs past the grace period, image GC by disk usage
//! (kubelet's thresholds) and, on the ZFS layer store, layer chains no zone's image uses.

use std::collections::{HashMap, HashSet};

use validator::{Digest, error_chain};

use super::{Worker, WorkerError};
use crate::state::ZoneStatus;
use crate::store::StoreError;

impl Worker {
    /// Removes what no zone uses: unused blobs after `gc_grace`, then image GC by disk usage
    /// and layer GC; failures are logged, never the pass's failure.
    pub(super) fn collect_garbage(&self, results: &HashMap<String, ZoneStatus>) {
        match self.referenced_blobs(results) {
            Ok(keep) => {
                match self.store.retain(&keep, self.config.gc_grace) {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(removed = n, "removed unused blobs"),
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "blob garbage collection failed")
                    }
                }
                if let Err(e) = self.gc_by_disk_usage(&keep) {
                    tracing::warn!(error = %error_chain(&e), "image garbage collection by disk usage failed");
                }
                if let Err(e) = self.gc_layers() {
                    tracing::warn!(error = %error_chain(&e), "layer garbage collection on the ZFS layer store failed");
                }
            }
            Err(e) => tracing::warn!(error = %error_chain(&e), "blob garbage collection skipped"),
        }
    }

    /// Every blob a provisioned zone was made from: the resolved digest (index or manifest),
    /// the platform manifest, its config and layers.
    fn referenced_blobs(
        &self,
        results: &HashMap<String, ZoneStatus>,
    ) -> Result<HashSet<Digest>, WorkerError> {
        let mut keep = HashSet::new();
        for zone in self.provisioner.zones()? {
            let Some(d) = self.provisioner.current(&zone)? else {
                continue;
            };
            let resolved = results
                .get(&zone)
                .cloned()
                .or_else(|| self.state.load(&zone))
                .and_then(|s| s.current_digest);
            keep.extend(resolved);
            keep.insert(d.config_digest.clone());
            let bytes = self
                .store
                .read_small(&d.manifest_digest, validator::MAX_MANIFEST_SIZE as u64)?;
            if let (_, Some(validator::Document::Manifest(m))) = validator::check_document(
                &bytes,
                Some(validator::DocumentKind::Manifest),
                None,
                "stored manifest",
            ) {
                keep.extend(m.layers.iter().map(|l| l.digest.clone()));
            } else {
                // Keep everything rather than guess.
                return Err(WorkerError::Store(StoreError::Io {
                    path: self.store.blob_path(&d.manifest_digest),
                    op: "re-reading a zone's manifest",
                    source: std::io::Error::from(std::io::ErrorKind::InvalidData),
                }));
            }
            keep.insert(d.manifest_digest);
        }
        Ok(keep)
    }

    /// Image GC by disk usage (kubelet's): when the content store's file system is at least
    /// `image_gc_high_percent` full, blobs no zone uses that are older than
    /// `image_minimum_gc_age` are removed, oldest first, until usage is down to
    /// `image_gc_low_percent`. Blobs in `keep` are never removed.
    fn gc_by_disk_usage(&self, keep: &HashSet<Digest>) -> Result<(), WorkerError> {
        let space = self
            .content_disk()
            .space(self.store.dir())
            .map_err(|source| StoreError::Io {
                path: self.store.dir().to_owned(),
                op: "reading disk usage",
                source,
            })?;
        let used = space.used_percent();
        if used < f64::from(self.config.image_gc_high_percent) {
            return Ok(());
        }
        let target_used =
            (space.total as f64 * f64::from(self.config.image_gc_low_percent) / 100.0) as u64;
        let to_free = space
            .total
            .saturating_sub(space.available)
            .saturating_sub(target_used);
        let (n, freed) =
            self.store
                .remove_oldest_unused(keep, self.config.image_minimum_gc_age, to_free)?;
        self.metrics.image_gc(freed);
        tracing::info!(
            used_percent = used,
            high = self.config.image_gc_high_percent,
            low = self.config.image_gc_low_percent,
            wanted = to_free,
            removed = n,
            freed,
            "image garbage collection by disk usage"
        );
        Ok(())
    }

    /// Layer GC on the ZFS layer store, under image GC's thresholds: when the pool (or the
    /// store's parent under a quota) is at least `image_gc_high_percent` full as ZFS counts it
    /// ([`crate::zfs::ZfsLayerStore::space`]), every layer chain that
    /// no zone's image uses and no clone holds is destroyed ([`crate::zfs::ZfsLayerStore::collect`],
    /// top layers first). A layer a zone's clone still depends on stays until that zone is
    /// gone (ZFS's deferred destroy, without leaving marked snapshots behind).
    fn gc_layers(&self) -> Result<(), WorkerError> {
        let Some(zd) = &self.layer_store else {
            return Ok(());
        };
        // Not `statvfs` of the base: on ZFS it counts the zones dataset's own bytes plus the
        // pool's free space, so a pool filled by anything else never looked full.
        let space = match &self.disk {
            Some(d) => d.space(zd.base()).map_err(|source| StoreError::Io {
                path: zd.base().to_owned(),
                op: "reading disk usage",
                source,
            })?,
            None => zd.layers().space()?,
        };
        let used = space.used_percent();
        if used < f64::from(self.config.image_gc_high_percent) {
            return Ok(());
        }
        let mut keep = HashSet::new();
        for zone in self.provisioner.zones()? {
            if let Some(d) = self.provisioner.current(&zone)?
                && let Some(chain) = d.chain_id
            {
                keep.insert(chain);
            }
            // The previous root kept for a rollback is a clone of its image's layers too.
            if let Ok(Some(d)) = self.provisioner.previous(&zone)
                && let Some(chain) = d.chain_id
            {
                keep.insert(chain);
            }
        }
        let c = zd.layers().collect(&keep)?;
        tracing::info!(
            used_percent = used,
            high = self.config.image_gc_high_percent,
            destroyed = c.destroyed.len(),
            held = c.held.len(),
            foreign = c.foreign.len(),
            pinned = c.pinned.len(),
            "layer garbage collection on the ZFS layer store"
        );
        for ds in &c.foreign {
            tracing::warn!(dataset = %ds, "a dataset under the layer store is not the store's; left alone");
        }
        for (chain, snapshot) in &c.pinned {
            tracing::warn!(%chain, %snapshot, "an unused layer has a snapshot rdctl did not make; left with it until the snapshot is destroyed");
        }
        Ok(())
    }
}
