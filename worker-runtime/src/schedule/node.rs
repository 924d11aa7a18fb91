//! Admission by resources and the node's status: which zones the node can give what they ask
//! for (zones that exist keep their place, then new ones by name; zones waiting out their grace
//! period still hold theirs), the node's capacity, allocatable and allocated resources, and its
//! conditions (`ResourcePressure` from admission, `DiskPressure` after image GC).

use std::collections::HashSet;

use validator::error_chain;

use super::{PassSummary, Worker, WorkerError};
use crate::capacity::{
    Allocated, ConditionStatus, ConditionType, NodeCondition, NodeStatus, effective_request, fit,
    host_capacity,
};
use crate::config::ZoneSpec;
use crate::state::{Phase, ZoneStatus, now_unix};

impl Worker {
    /// The zones the node can give what they ask for, in order: zones that exist keep their
    /// place, then new ones by name. The others are recorded `Unschedulable` with the reason;
    /// the node's capacity, allocatable and allocated resources are written for status.
    pub(super) fn admit_by_resources(
        &self,
        specs: Vec<ZoneSpec>,
        summary: &mut PassSummary,
    ) -> Result<Vec<ZoneSpec>, WorkerError> {
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
        let mut allocated = Allocated::default();
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
            allocated.add(r);
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
            match fit(&caps, &self.config.allocatable, &allocated, &spec, made) {
                Ok(r) => {
                    allocated.add(r);
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
        let pressure = if refused.is_empty() {
            NodeCondition::new(
                ConditionType::ResourcePressure,
                ConditionStatus::False,
                "ZonesFit",
                "every zone fits in what is allocatable".into(),
                &previous,
                now_unix(),
            )
        } else {
            NodeCondition::new(
                ConditionType::ResourcePressure,
                ConditionStatus::True,
                "ZonesNotAdmitted",
                refused.join("; "),
                &previous,
                now_unix(),
            )
        };
        // The disk condition is measured after the pass's image GC (`record_disk_pressure`);
        // until then the last one stands.
        let mut conditions: Vec<NodeCondition> = previous
            .iter()
            .filter(|c| c.kind == ConditionType::DiskPressure)
            .cloned()
            .collect();
        conditions.push(pressure);
        self.state.save_node(&NodeStatus {
            capacity: host_capacity(),
            allocatable: self.config.allocatable.clone(),
            allocated,
            capabilities: Some(caps),
            conditions,
            updated_unix: now_unix(),
        })?;
        Ok(admitted)
    }

    /// Measures the content store's file system against `image_gc_high_percent` (after the
    /// pass's image GC) and records `DiskPressure` in the node status.
    pub(super) fn record_disk_pressure(&self) -> Result<(), WorkerError> {
        let Some(mut node) = self.state.load_node() else {
            return Ok(());
        };
        let high = self.config.image_gc_high_percent;
        let (status, reason, message) = match self.disk.space(self.store.dir()) {
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
