//! What `rdctl worker status` reads: the node as the worker last wrote it and every zone's
//! record beside its manifest. Reads only, so it works while a worker runs.

use std::collections::HashMap;

use validator::error_chain;

use super::WorkerError;
use crate::config::{WorkerConfig, load_zones};
use crate::state::{Phase, StateDir, ZoneStatus};

/// One row of `rdctl worker status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StatusRow {
    /// The recorded status (Pending with no record).
    #[serde(flatten)]
    pub status: ZoneStatus,
    /// False when the zone has a record but no manifest any more.
    pub in_manifests: bool,
}

/// What `rdctl worker status` shows: the node (as the worker last wrote it) and every zone.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StatusReport {
    /// Capacity, allocatable and allocated resources and the provisioner's capabilities;
    /// `None` before the first pass.
    pub node: Option<crate::capacity::NodeStatus>,
    /// One row per zone.
    pub zones: Vec<StatusRow>,
}

/// `rdctl worker status`: the node's resources and every zone's desired and current digest,
/// phase and last error, from the manifests directory and the state records (reads only;
/// works while a worker runs).
pub fn status_report(config_path: &std::path::Path) -> Result<StatusReport, WorkerError> {
    let config = WorkerConfig::load(config_path)?;
    let node = StateDir::read_only(&config.state_dir).load_node();
    Ok(StatusReport {
        node,
        zones: status(config_path)?,
    })
}

/// Every zone's desired and current digest, phase and last error, from the manifests directory
/// and the state records (reads only; works while a worker runs).
pub fn status(config_path: &std::path::Path) -> Result<Vec<StatusRow>, WorkerError> {
    let config = WorkerConfig::load(config_path)?;
    let state = StateDir::read_only(&config.state_dir);
    let (specs, invalid) = load_zones(&config.zones_dir)?;
    let mut records: HashMap<String, ZoneStatus> = state
        .all()
        .into_iter()
        .map(|s| (s.zone.clone(), s))
        .collect();
    let mut rows = Vec::new();
    for spec in &specs {
        let status = records.remove(&spec.name).unwrap_or_else(|| ZoneStatus {
            zone: spec.name.clone(),
            image: spec.image.to_string(),
            ..ZoneStatus::default()
        });
        rows.push(StatusRow {
            status,
            in_manifests: true,
        });
    }
    for bad in invalid {
        let mut status = records.remove(&bad.zone).unwrap_or_default();
        status.zone = bad.zone.clone();
        status.phase = Phase::Invalid;
        status.last_error = Some(error_chain(&bad.error));
        rows.push(StatusRow {
            status,
            in_manifests: true,
        });
    }
    for (_, status) in records {
        rows.push(StatusRow {
            status,
            in_manifests: false,
        });
    }
    rows.sort_by(|a, b| a.status.zone.cmp(&b.status.zone));
    Ok(rows)
}

/// `rdctl worker rollback ZONE`: asks the worker to put the zone's previous root back at its
/// next pass. Refused when the zone has no record or no previous root recorded. Returns the
/// zone's record (its current and previous digests as they are now).
pub fn request_rollback(
    config_path: &std::path::Path,
    zone: &str,
) -> Result<ZoneStatus, RollbackError> {
    let config = WorkerConfig::load(config_path).map_err(|e| RollbackError::Worker(e.into()))?;
    let state = StateDir::read_only(&config.state_dir);
    let Some(st) = state.load(zone).filter(|_| crate::config::valid_name(zone)) else {
        return Err(RollbackError::NoZone {
            zone: zone.to_owned(),
        });
    };
    if st.previous_digest.is_none() {
        return Err(RollbackError::NoPrevious {
            zone: zone.to_owned(),
        });
    }
    state
        .request_rollback(zone)
        .map_err(|e| RollbackError::Worker(e.into()))?;
    Ok(st)
}

/// `rdctl worker rollback` could not ask for the rollback.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RollbackError {
    /// The worker's configuration or state.
    #[error(transparent)]
    Worker(#[from] WorkerError),
    /// The worker has no record of the zone.
    #[error("zone {zone}: the worker has no record of it (see rdctl worker status)")]
    NoZone {
        /// The zone.
        zone: String,
    },
    /// Nothing to go back to.
    #[error(
        "zone {zone}: no previous root is kept (the zone has not been updated since it was made, or was rolled back to and updated since)"
    )]
    NoPrevious {
        /// The zone.
        zone: String,
    },
}
