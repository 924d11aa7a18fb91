//! One pass over every zone manifest: invalid manifests recorded, orphaned zones removed after
//! their grace period, the zones the node admits reconciled concurrently (each on its own, a
//! panic in one is that zone's failure only), each outcome recorded with its backoff (a zone
//! whose image's caps do not fit in what is left is `Unschedulable`, without backoff), the node
//! status written again with what the zones made in the pass hold, then the garbage no zone
//! uses collected.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use tokio::task::JoinSet;
use validator::{Digest, error_chain};

use super::node::PassLedger;
use super::{Outcome, PassSummary, Reconciled, Worker, WorkerError, ZoneError, verify_stage};
use crate::admission::AdmissionError;
use crate::config::{ZoneLoadError, ZoneSpec, load_zones};
use crate::state::{Phase, ZoneStatus, now_unix};

/// A zone's reconcile as its task returns it: the manifest, the status before, the result.
type Attempt = (
    ZoneSpec,
    ZoneStatus,
    Result<Reconciled, (ZoneError, Option<Digest>)>,
);

impl PassSummary {
    /// Every list sorted by zone name.
    fn sort(&mut self) {
        self.provisioned.sort();
        self.unchanged.sort();
        self.failed.sort();
        self.backing_off.sort();
        self.removed.sort();
        self.unschedulable.sort();
    }
}

impl Worker {
    /// One reconcile pass over every zone manifest. Zones run concurrently and independently;
    /// with `ignore_backoff` (`--once`) every zone is attempted.
    pub async fn pass(self: &Arc<Self>, ignore_backoff: bool) -> Result<PassSummary, WorkerError> {
        let started = std::time::Instant::now();
        let (specs, invalid) = load_zones(&self.config.zones_dir)?;
        let mut summary = PassSummary::default();
        self.record_invalid(invalid, &mut summary)?;
        let wanted: HashSet<String> = specs.iter().map(|s| s.name.clone()).collect();
        let by_name: HashMap<String, ZoneSpec> =
            specs.iter().map(|s| (s.name.clone(), s.clone())).collect();
        // Zones past their grace period go first, so what they held is free for this pass;
        // the others still hold theirs (`admit_by_resources`).
        let removed = self.remove_orphans(&wanted, &mut summary)?;
        // `rdctl worker rollback` requests, before the zones are looked at.
        self.rollbacks().await?;
        let (specs, ledger) = self.admit_by_resources(specs, &mut summary)?;
        let (mut tasks, names) =
            self.spawn_reconciles(specs, &ledger, ignore_backoff, &mut summary);
        let mut results = HashMap::new();
        // `zone: reason` for the zones refused once their images' caps were known.
        let mut late_refusals = Vec::new();
        while let Some(joined) = tasks.join_next_with_id().await {
            match joined {
                Ok((_, attempt)) => {
                    let st = self.attempt_status(attempt, &mut summary);
                    if st.phase == Phase::Unschedulable {
                        late_refusals.push(format!(
                            "{}: {}",
                            st.zone,
                            st.last_error.as_deref().unwrap_or_default()
                        ));
                    }
                    results.insert(st.zone.clone(), st);
                }
                Err(e) => {
                    // A panic in one zone's task is that zone's failure only.
                    let zone = names.get(&e.id()).cloned().unwrap_or_default();
                    let mut st = self.state.load(&zone).unwrap_or_default();
                    st.zone = zone.clone();
                    st.phase = Phase::Failed;
                    st.last_error = Some(format!("internal: the zone's task failed: {e}"));
                    st.updated_unix = now_unix();
                    summary.failed.push(zone.clone());
                    results.insert(zone, st);
                }
            }
        }
        for st in results.values() {
            self.state.save(st)?;
        }
        // Every claim is settled now: what the zones made in this pass hold is final.
        late_refusals.sort();
        self.write_node_status(&ledger, &late_refusals)?;
        self.reconcile_volumes(&by_name, &removed)?;
        // Between passes nothing is downloading: blobs no zone uses go after the grace period.
        self.collect_garbage(&results);
        self.record_disk_pressure()?;
        self.metrics.pass(started.elapsed());
        summary.sort();
        Ok(summary)
    }

    /// Records each manifest that could not be read as `Invalid`.
    fn record_invalid(
        &self,
        invalid: Vec<ZoneLoadError>,
        summary: &mut PassSummary,
    ) -> Result<(), WorkerError> {
        for bad in invalid {
            let mut st = self.state.load(&bad.zone).unwrap_or_default();
            st.zone = bad.zone.clone();
            st.phase = Phase::Invalid;
            st.last_error = Some(error_chain(&bad.error));
            st.updated_unix = now_unix();
            self.state.save(&st)?;
            summary.failed.push(bad.zone);
        }
        Ok(())
    }

    /// Starts a reconcile task for every admitted zone not backing off (all with
    /// `ignore_backoff`), each with its claim on the pass's ledger (a zone backing off settles
    /// at once at what it was admitted with); returns the tasks and the zone of each task id.
    fn spawn_reconciles(
        self: &Arc<Self>,
        specs: Vec<ZoneSpec>,
        ledger: &PassLedger,
        ignore_backoff: bool,
        summary: &mut PassSummary,
    ) -> (JoinSet<Attempt>, HashMap<tokio::task::Id, String>) {
        let mut tasks = JoinSet::new();
        let mut names = HashMap::new();
        for spec in specs {
            let claim = ledger.claim(&spec.name);
            let prev = self.state.load(&spec.name).unwrap_or_default();
            if !ignore_backoff
                && matches!(prev.phase, Phase::Failed | Phase::Denied)
                && prev.next_attempt_unix.is_some_and(|t| t > now_unix())
            {
                summary.backing_off.push(spec.name.clone());
                continue;
            }
            let me = Arc::clone(self);
            let name = spec.name.clone();
            let id = tasks
                .spawn(async move {
                    let t = std::time::Instant::now();
                    let result = me.reconcile(&spec, &prev, &claim).await;
                    drop(claim);
                    // Not made for want of room is not a failed attempt (no backoff either).
                    let failed = match &result {
                        Err((ZoneError::Unschedulable { .. }, _)) | Ok(_) => false,
                        Err(_) => true,
                    };
                    me.metrics.zone(
                        matches!(result, Ok((Outcome::Provisioned, _, _))),
                        failed,
                        t.elapsed(),
                    );
                    if let Err((e, _)) = &result
                        && let Some(stage) = verify_stage(e)
                    {
                        me.metrics.verification_failure(stage);
                    }
                    (spec, prev, result)
                })
                .id();
            names.insert(id, name);
        }
        (tasks, names)
    }

    /// A zone's new status from its attempt: `Ready` at the reconciled digest, or `Failed`
    /// (`Denied` for a policy refusal) with the error and the next attempt's time.
    fn attempt_status(&self, attempt: Attempt, summary: &mut PassSummary) -> ZoneStatus {
        let (spec, prev, result) = attempt;
        let mut st = ZoneStatus {
            zone: spec.name.clone(),
            image: spec.image.to_string(),
            current_digest: prev.current_digest.clone(),
            desired_digest: prev.desired_digest.clone(),
            admission: prev.admission.clone(),
            updated_unix: now_unix(),
            pull: prev.pull,
            replace_downtime_ms: prev.replace_downtime_ms,
            previous_digest: prev.previous_digest.clone(),
            rolled_back: prev.rolled_back.clone(),
            ..ZoneStatus::default()
        };
        // A previous root the provisioner no longer keeps is not shown.
        let kept = matches!(self.provisioner.previous(&spec.name), Ok(Some(_)));
        let seen = self
            .observed
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&spec.name)
            .unwrap_or_default();
        if seen.pull.is_some() {
            st.pull = seen.pull;
        }
        if seen.replace_downtime_ms.is_some() {
            st.replace_downtime_ms = seen.replace_downtime_ms;
        }
        match result {
            Ok((outcome, desired, admission)) => {
                st.phase = Phase::Ready;
                st.desired_digest = Some(desired.clone());
                st.current_digest = Some(desired.clone());
                if matches!(outcome, Outcome::Provisioned) {
                    st.admission = admission;
                    if prev.current_digest.as_ref() != Some(&desired) {
                        st.previous_digest = prev.current_digest.clone();
                    }
                    st.rolled_back = None;
                }
                match outcome {
                    Outcome::Provisioned => summary.provisioned.push(spec.name.clone()),
                    Outcome::Unchanged => summary.unchanged.push(spec.name.clone()),
                }
            }
            Err((ZoneError::Unschedulable { reason }, desired)) => {
                // As a refusal at admission: tried again every pass, without backoff.
                tracing::warn!(zone = %spec.name, %reason, "zone not made: its image's caps do not fit");
                st.phase = Phase::Unschedulable;
                if desired.is_some() {
                    st.desired_digest = desired;
                }
                st.last_error = Some(reason);
                summary.unschedulable.push(spec.name.clone());
            }
            Err((e, desired)) => {
                tracing::warn!(zone = %spec.name, error = %error_chain(&e), "zone reconcile failed");
                st.phase = Phase::Failed;
                if let ZoneError::Admission(AdmissionError::Denied(d)) = &e {
                    st.phase = Phase::Denied;
                    let mut d = (**d).clone();
                    // A moved tag that is refused replaces nothing: say so, or the
                    // operator reads "denied" as "the zone is down".
                    if let Some(current) = &st.current_digest
                        && current != &d.digest
                    {
                        d.message.push_str(&format!(
                            "; the zone keeps running its current image {current}"
                        ));
                    }
                    st.denial = Some(d);
                }
                if desired.is_some() {
                    st.desired_digest = desired;
                }
                if let ZoneError::NotReady {
                    reason,
                    rolled_back,
                    ..
                } = &e
                    && let Some(d) = &st.desired_digest
                {
                    if *rolled_back {
                        // The failed root is kept as the previous one.
                        st.previous_digest = Some(d.clone());
                        st.rolled_back = Some(crate::state::RolledBack {
                            digest: d.clone(),
                            reason: reason.clone(),
                            manual: false,
                            at_unix: now_unix(),
                        });
                    } else {
                        st.current_digest = Some(d.clone());
                    }
                }
                st.failed_blob = e.blob().cloned();
                st.last_error = Some(error_chain(&e));
                st.failures = prev.failures.saturating_add(1);
                st.next_attempt_unix =
                    Some(now_unix() + self.config.backoff(st.failures).as_secs());
                summary.failed.push(spec.name.clone());
            }
        }
        if !kept {
            st.previous_digest = None;
        }
        st
    }

    /// Zones of ours whose manifest is gone are removed once they have been orphaned for the
    /// grace period (a manifest briefly missing during an edit does not destroy a zone).
    /// Returns each zone removed with the time its manifest was found gone.
    fn remove_orphans(
        &self,
        wanted: &HashSet<String>,
        summary: &mut PassSummary,
    ) -> Result<HashMap<String, u64>, WorkerError> {
        let mut removed = HashMap::new();
        for zone in self.provisioner.zones()? {
            if wanted.contains(&zone) {
                continue;
            }
            let mut st = self.state.load(&zone).unwrap_or_default();
            st.zone = zone.clone();
            let since = *st.orphaned_since_unix.get_or_insert_with(now_unix);
            if now_unix().saturating_sub(since) >= self.config.gc_grace.as_secs() {
                match self.provisioner.remove(&zone) {
                    Ok(()) => {
                        self.state.remove(&zone)?;
                        // Its volumes are free for the zones reconciled in this pass; the
                        // pass's end removes the `delete` ones (`reconcile_volumes`).
                        if let Err(e) = self.volumes.release(&zone, since) {
                            tracing::warn!(zone, error = %error_chain(&e), "releasing the volumes of a removed zone failed; the pass's end tries again");
                        }
                        removed.insert(zone.clone(), since);
                        summary.removed.push(zone);
                        continue;
                    }
                    Err(e) => st.last_error = Some(error_chain(&e)),
                }
            }
            st.updated_unix = now_unix();
            self.state.save(&st)?;
        }
        Ok(removed)
    }
}
