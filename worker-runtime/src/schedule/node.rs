//! Admission by resources and the node's status: which zones the node can give what they ask
//! for (zones that exist keep their place, then new ones by name; zones waiting out their grace
//! period still hold theirs), the node's capacity, allocatable and allocated resources, and its
//! conditions (`ResourcePressure` from admission, `DiskPressure` after image GC). A zone not
//! made yet is admitted on its manifest's caps; the pass's [`PassLedger`] then checks its
//! image's caps before it is made ([`Claim`]), and the node status is written again at the end
//! of the pass with what the zones made in it hold.

use std::collections::HashSet;
use std::sync::Arc;

use validator::error_chain;

use super::{PassSummary, Worker, WorkerError};
use crate::capacity::{
    ConditionStatus, ConditionType, Ledger, NodeCondition, NodeStatus, Request, effective_request,
    fit, host_capacity,
};
use crate::config::ZoneSpec;
use crate::state::{Phase, ZoneStatus, now_unix};

/// The pass's [`Ledger`], shared by the zones' reconciles, with what the node status of the
/// pass is written from.
///
/// The ledger sits in a `watch` channel: its lock makes each claim one decision over the whole
/// ledger, and its change notification wakes the zones waiting for those admitted before them
/// ([`Ledger::must_wait`]), so claims that grow a limited resource are decided in admission
/// order whatever order the pulls finish in: the first zone wins, every time.
pub(super) struct PassLedger {
    ledger: Arc<tokio::sync::watch::Sender<Ledger>>,
    /// The node's conditions before the pass (transition times are kept against these).
    previous: Vec<NodeCondition>,
    /// `zone: reason` for each zone admission refused for resources.
    refused: Vec<String>,
}

impl PassLedger {
    /// The claim of an admitted zone; dropped without a claim, the zone settles at its
    /// admitted request (a skipped, unchanged, failed or panicked reconcile).
    pub(super) fn claim(&self, zone: &str) -> Claim {
        Claim {
            ledger: Arc::clone(&self.ledger),
            zone: zone.to_owned(),
        }
    }
}

/// One admitted zone's part of the pass's ledger.
pub(super) struct Claim {
    ledger: Arc<tokio::sync::watch::Sender<Ledger>>,
    zone: String,
}

impl Claim {
    /// Takes `wanted` (the zone's request with its image's caps) before the zone is made,
    /// waiting first for the zones admitted before it when it asks for more of a limited
    /// resource than it was admitted with. `exists`: the zone is there already (a refusal
    /// leaves it running). The reason, in kubelet's words, when it does not fit.
    pub(super) async fn reserve(&self, wanted: Request, exists: bool) -> Result<(), String> {
        let mut rx = self.ledger.subscribe();
        // The sender lives in `self`: the channel cannot close while this waits.
        let _ = rx.wait_for(|l| !l.must_wait(&self.zone, wanted)).await;
        drop(rx);
        let mut decided = Ok(());
        self.ledger.send_modify(|l| {
            decided = l.claim(&self.zone, wanted, exists).map(|_| ());
        });
        decided
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        self.ledger.send_if_modified(|l| l.settle(&self.zone));
    }
}

impl Worker {
    /// The zones the node can give what they ask for, in order: zones that exist keep their
    /// place, then new ones by name. The others are recorded `Unschedulable` with the reason;
    /// the node's capacity, allocatable and allocated resources are written for status. The
    /// ledger returned holds each admitted zone's request, for the checks of their images' caps.
    pub(super) fn admit_by_resources(
        &self,
        specs: Vec<ZoneSpec>,
        summary: &mut PassSummary,
    ) -> Result<(Vec<ZoneSpec>, PassLedger), WorkerError> {
        let caps = self.provisioner.capabilities();
        let existing: HashSet<String> = match self.provisioner.zones() {
            Ok(z) => z.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "listing zones for admission failed");
                HashSet::new()
            }
        };
        let mut specs = specs;
        specs.sort_by(|a, b| {
            (!existing.contains(&a.name), &a.name).cmp(&(!existing.contains(&b.name), &b.name))
        });
        let mut ledger = Ledger::new(self.config.allocatable.clone());
        // Zones whose manifest is gone still exist until their grace period is over and they
        // are removed: they hold what they were given (their description's caps) until then.
        let wanted: HashSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        let mut leaving: Vec<&String> = existing
            .iter()
            .filter(|z| !wanted.contains(z.as_str()))
            .collect();
        leaving.sort();
        for zone in leaving {
            let r = match self.provisioner.current(zone) {
                Ok(Some(d)) => effective_request(&d.limits, Some(d.zone_config.caps())),
                Ok(None) => effective_request(&Default::default(), None),
                Err(e) => {
                    tracing::warn!(zone, error = %error_chain(&e), "reading a leaving zone's caps failed; counting its slot only");
                    effective_request(&Default::default(), None)
                }
            };
            ledger.hold_leaving(r);
        }
        let mut admitted = Vec::new();
        let mut refused = Vec::new();
        for spec in specs {
            // A zone that exists was configured with the image's caps too (its description).
            let made = if existing.contains(&spec.name) {
                match self.provisioner.current(&spec.name) {
                    Ok(d) => d.map(|d| d.zone_config.caps()),
                    Err(e) => {
                        tracing::warn!(zone = %spec.name, error = %error_chain(&e), "reading a zone's caps failed; counting its manifest's limits only");
                        None
                    }
                }
            } else {
                None
            };
            match fit(
                &caps,
                &self.config.allocatable,
                &ledger.allocated(),
                &spec,
                made,
            ) {
                Ok(r) => {
                    ledger.admit(&spec.name, r);
                    admitted.push(spec);
                }
                Err(reason) => {
                    if !reason.starts_with("UnsupportedBrand") {
                        refused.push(format!("{}: {reason}", spec.name));
                    }
                    tracing::warn!(zone = %spec.name, %reason, "zone not admitted");
                    let prev = self.state.load(&spec.name).unwrap_or_default();
                    self.state.save(&ZoneStatus {
                        zone: spec.name.clone(),
                        image: spec.image.to_string(),
                        current_digest: prev.current_digest,
                        desired_digest: prev.desired_digest,
                        admission: prev.admission,
                        phase: Phase::Unschedulable,
                        last_error: Some(reason),
                        updated_unix: now_unix(),
                        ..ZoneStatus::default()
                    })?;
                    summary.unschedulable.push(spec.name);
                }
            }
        }
        let previous = self
            .state
            .load_node()
            .map(|n| n.conditions)
            .unwrap_or_default();
        let pass = PassLedger {
            ledger: Arc::new(tokio::sync::watch::Sender::new(ledger)),
            previous,
            refused,
        };
        self.write_node_status(&pass, &[])?;
        Ok((admitted, pass))
    }

    /// Writes the node's status from the pass's ledger: what is allocated now and
    /// `ResourcePressure` from the zones refused at admission and `late` (`zone: reason` for
    /// each refused once its image's caps were known). The disk condition is measured after
    /// the pass's image GC (`record_disk_pressure`); until then the last one stands.
    pub(super) fn write_node_status(
        &self,
        pass: &PassLedger,
        late: &[String],
    ) -> Result<(), WorkerError> {
        let refused: Vec<&str> = pass
            .refused
            .iter()
            .chain(late)
            .map(String::as_str)
            .collect();
        let pressure = if refused.is_empty() {
            NodeCondition::new(
                ConditionType::ResourcePressure,
                ConditionStatus::False,
                "ZonesFit",
                "every zone fits in what is allocatable".into(),
                &pass.previous,
                now_unix(),
            )
        } else {
            NodeCondition::new(
                ConditionType::ResourcePressure,
                ConditionStatus::True,
                "ZonesNotAdmitted",
                refused.join("; "),
                &pass.previous,
                now_unix(),
            )
        };
        let last = self.state.load_node();
        let volumes = last.as_ref().map(|n| n.volumes.clone()).unwrap_or_default();
        let mut allocated = pass.ledger.borrow().allocated();
        allocated.volume_bytes = volumes.iter().filter_map(|v| v.size_bytes).sum();
        let disk = last
            .map(|n| n.conditions)
            .unwrap_or_else(|| pass.previous.clone());
        let mut conditions: Vec<NodeCondition> = disk
            .into_iter()
            .filter(|c| c.kind == ConditionType::DiskPressure)
            .collect();
        conditions.push(pressure);
        self.state.save_node(&NodeStatus {
            capacity: host_capacity(),
            allocatable: self.config.allocatable.clone(),
            allocated,
            capabilities: Some(self.provisioner.capabilities()),
            conditions,
            volumes,
            updated_unix: now_unix(),
        })?;
        Ok(())
    }

    /// Measures the content store's file system against `image_gc_high_percent` (after the
    /// pass's image GC) and records `DiskPressure` in the node status.
    pub(super) fn record_disk_pressure(&self) -> Result<(), WorkerError> {
        let Some(mut node) = self.state.load_node() else {
            return Ok(());
        };
        let high = self.config.image_gc_high_percent;
        let (status, reason, message) = match self.content_disk().space(self.store.dir()) {
            Ok(space) => {
                let used = space.used_percent();
                if used >= f64::from(high) {
                    (
                        ConditionStatus::True,
                        "KubeletHasDiskPressure",
                        format!(
                            "{used:.1} % of {} used after image GC, at or above image_gc_high_percent = {high}",
                            self.store.dir().display()
                        ),
                    )
                } else {
                    (
                        ConditionStatus::False,
                        "KubeletHasNoDiskPressure",
                        format!(
                            "{used:.1} % of {} used, under image_gc_high_percent = {high}",
                            self.store.dir().display()
                        ),
                    )
                }
            }
            Err(e) => (
                ConditionStatus::Unknown,
                "DiskUsageUnknown",
                format!(
                    "reading the disk usage of {} failed: {e}",
                    self.store.dir().display()
                ),
            ),
        };
        let c = NodeCondition::new(
            ConditionType::DiskPressure,
            status,
            reason,
            message,
            &node.conditions,
            now_unix(),
        );
        node.conditions
            .retain(|c| c.kind != ConditionType::DiskPressure);
        node.conditions.insert(0, c);
        self.state.save_node(&node)?;
        Ok(())
    }
}
