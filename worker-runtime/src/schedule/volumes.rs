//! After a pass: the volumes' records brought in line with what the zones hold (released when
//! no zone holds them, their reclaim following the zone manifest), released `delete` volumes
//! removed after `gc_grace`, and the volumes written into the node status with the bytes
//! their sizes hold.

use std::collections::HashMap;

use validator::error_chain;

use super::{Worker, WorkerError};
use crate::state::now_unix;
use crate::zone::{Reclaim, ZoneSpec};

impl Worker {
    /// `specs`: the zone manifests of the pass by zone; `removed`: zones removed in the pass
    /// with the time their manifest went away (their volumes count as released since then,
    /// so `delete` volumes go with the zone when its grace is over). Failures are logged, not
    /// the pass's failure, except writing the node status.
    pub(super) fn reconcile_volumes(
        &self,
        specs: &HashMap<String, ZoneSpec>,
        removed: &HashMap<String, u64>,
    ) -> Result<(), WorkerError> {
        let held = match self.held_volumes(specs) {
            Ok(h) => h,
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "reading the zones' volumes failed; no volume is released in this pass");
                return Ok(());
            }
        };
        let now = now_unix();
        let since = |zone: &str| removed.get(zone).copied().unwrap_or(now);
        if let Err(e) = self
            .volumes
            .reconcile(&held, &since, self.config.gc_grace, now)
        {
            tracing::warn!(error = %error_chain(&e), "reconciling volumes failed");
        }
        let Some(mut node) = self.state.load_node() else {
            return Ok(());
        };
        match self.volumes.list() {
            Ok(list) => {
                node.allocated.volume_bytes = list.iter().filter_map(|v| v.size_bytes).sum();
                node.volumes = list;
            }
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "listing volumes failed");
            }
        }
        self.state.save_node(&node)?;
        Ok(())
    }

    /// Each volume a zone of ours has now, with that zone and the reclaim its manifest gives
    /// the volume (a zone without a manifest keeps what it was made with).
    fn held_volumes(
        &self,
        specs: &HashMap<String, ZoneSpec>,
    ) -> Result<HashMap<String, (String, Reclaim)>, WorkerError> {
        let mut held = HashMap::new();
        for zone in self.provisioner.zones()? {
            let Some(d) = self.provisioner.current(&zone)? else {
                continue;
            };
            for v in d.volumes {
                let reclaim = match specs.get(&zone) {
                    Some(s) => s
                        .volumes
                        .iter()
                        .find(|w| w.path == v.path)
                        .and_then(|w| w.reclaim)
                        .unwrap_or(s.reclaim),
                    None => v.reclaim,
                };
                held.insert(v.id, (zone.clone(), reclaim));
            }
        }
        Ok(held)
    }
}
