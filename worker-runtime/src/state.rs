//! The state directory: per-zone status records and the worker lock.
//!
//! ```text
//! <state>/.rdctl-owner        mark (kind state)
//! <state>/lock                flock'd by the running worker: one worker per state directory
//! <state>/zones/<zone>.json   ZoneStatus, replaced atomically after every attempt
//! <state>/rollback/<zone>    a rollback asked for by `rdctl worker rollback`, until the next pass
//! <state>/node.json           NodeStatus (capacity, allocatable, allocated), after every pass
//! <state>/content/            the content store
//! ```

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use validator::Digest;

use crate::admission::{Admission, Denial};
use crate::owner::{self, OwnerMark, OwnershipError, write_atomic};

/// Where a zone stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum Phase {
    /// Not attempted yet.
    #[default]
    Pending,
    /// The zone runs the desired image.
    Ready,
    /// The last attempt failed; the zone (if any) still runs its previous image.
    Failed,
    /// The zone manifest is unusable.
    Invalid,
    /// The admission policy refused the desired image; the zone (if any) still runs its
    /// previous, admitted image. `denial` says which rule and why.
    Denied,
    /// The node cannot give what the manifest asks for (a brand the provisioner does not
    /// make, or more CPU, memory or zones than are allocatable or left): not attempted,
    /// checked again every pass. `last_error` says why.
    Unschedulable,
}

impl std::fmt::Display for Phase {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Phase::Pending => "Pending",
            Phase::Ready => "Ready",
            Phase::Failed => "Failed",
            Phase::Invalid => "Invalid",
            Phase::Denied => "Denied",
            Phase::Unschedulable => "Unschedulable",
        })
    }
}

/// One zone's recorded status.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct ZoneStatus {
    /// Zone name.
    pub zone: String,
    /// The image reference from the zone manifest.
    pub image: String,
    /// What the reference resolved to on the last attempt.
    pub desired_digest: Option<Digest>,
    /// What the running zone was made from (the resolved digest).
    pub current_digest: Option<Digest>,
    /// Phase.
    pub phase: Phase,
    /// The last error, with its causes.
    pub last_error: Option<String>,
    /// The blob the last error is about.
    pub failed_blob: Option<Digest>,
    /// Failures in a row.
    pub failures: u32,
    /// No retry before this time (seconds since the epoch).
    pub next_attempt_unix: Option<u64>,
    /// When this record was written.
    pub updated_unix: u64,
    /// Since when the zone exists without a manifest.
    #[serde(default)]
    pub orphaned_since_unix: Option<u64>,
    /// What admitted the image the zone runs (rule, signing keys, attestations).
    #[serde(default)]
    pub admission: Option<Admission>,
    /// Why the policy refused the desired image on the last attempt.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub denial: Option<Denial>,
    /// Bytes of the last (or running) pull: done of total; updated while it runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pull: Option<crate::throttle::PullBytes>,
    /// How long the last replacement kept the zone down: from stopping the old zone to the
    /// new one booted (milliseconds).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub replace_downtime_ms: Option<u64>,
    /// What the previous root kept for a rollback was made from (the resolved digest).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub previous_digest: Option<Digest>,
    /// The last rollback: the digest rolled away from, why, and whether an operator asked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rolled_back: Option<RolledBack>,
}

/// A rollback from an image to the previous root.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RolledBack {
    /// The digest rolled away from.
    pub digest: Digest,
    /// Why: the readiness failure, or `rdctl worker rollback`.
    pub reason: String,
    /// True for `rdctl worker rollback`: the zone stays on the previous root until the
    /// reference resolves to another digest. False for an update that did not become ready:
    /// that digest is tried again after the back-off.
    pub manual: bool,
    /// When (seconds since the epoch).
    pub at_unix: u64,
}

/// A state-directory operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StateError {
    /// The directory is not ours.
    #[error("state directory")]
    Ownership(#[from] OwnershipError),
    /// Another worker holds the lock.
    #[error("{path}: another worker is running on this state directory")]
    Locked {
        /// The lock file.
        path: PathBuf,
    },
    /// A file operation failed.
    #[error("{path}: {op} failed")]
    Io {
        /// The path.
        path: PathBuf,
        /// The operation.
        op: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Seconds since the epoch.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The state directory.
#[derive(Debug, Clone)]
pub struct StateDir {
    dir: PathBuf,
}

impl StateDir {
    /// Opens (claiming when new) the state directory.
    pub fn open(dir: &Path, worker_id: &str) -> Result<StateDir, StateError> {
        owner::claim(dir, &OwnerMark::new(worker_id, "state"))?;
        let zones = dir.join("zones");
        std::fs::create_dir_all(&zones).map_err(|source| StateError::Io {
            path: zones,
            op: "creating",
            source,
        })?;
        Ok(StateDir {
            dir: dir.to_owned(),
        })
    }

    /// Opens an existing state directory for reading (status), without claiming it.
    pub fn read_only(dir: &Path) -> StateDir {
        StateDir {
            dir: dir.to_owned(),
        }
    }

    /// The directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Takes the worker lock; held until the file is dropped.
    pub fn lock(&self) -> Result<File, StateError> {
        let path = self.dir.join("lock");
        let f = File::options()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|source| StateError::Io {
                path: path.clone(),
                op: "opening the lock",
                source,
            })?;
        match rustix::fs::flock(&f, rustix::fs::FlockOperation::NonBlockingLockExclusive) {
            Ok(()) => Ok(f),
            Err(rustix::io::Errno::WOULDBLOCK) => Err(StateError::Locked { path }),
            Err(e) => Err(StateError::Io {
                path,
                op: "locking",
                source: e.into(),
            }),
        }
    }

    /// The node's status as the worker last wrote it.
    pub fn load_node(&self) -> Option<crate::capacity::NodeStatus> {
        let bytes = std::fs::read(self.dir.join("node.json")).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Replaces the node's status atomically.
    pub fn save_node(&self, node: &crate::capacity::NodeStatus) -> Result<(), StateError> {
        let path = self.dir.join("node.json");
        let bytes = serde_json::to_vec_pretty(node).expect("a node status serialises");
        write_atomic(&path, &bytes).map_err(|source| StateError::Io {
            path,
            op: "writing the node status",
            source,
        })
    }

    fn zone_file(&self, zone: &str) -> PathBuf {
        self.dir.join("zones").join(format!("{zone}.json"))
    }

    /// A zone's record, if any (an unreadable record counts as none: it is rewritten).
    pub fn load(&self, zone: &str) -> Option<ZoneStatus> {
        let bytes = std::fs::read(self.zone_file(zone)).ok()?;
        serde_json::from_slice(&bytes).ok()
    }

    /// Replaces a zone's record atomically.
    pub fn save(&self, status: &ZoneStatus) -> Result<(), StateError> {
        let path = self.zone_file(&status.zone);
        let bytes = serde_json::to_vec_pretty(status).expect("a status serialises");
        write_atomic(&path, &bytes).map_err(|source| StateError::Io {
            path,
            op: "writing the zone status",
            source,
        })
    }

    /// Forgets a zone's record.
    pub fn remove(&self, zone: &str) -> Result<(), StateError> {
        let path = self.zone_file(zone);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StateError::Io {
                path,
                op: "removing the zone status",
                source,
            }),
        }
    }

    fn requests_dir(&self) -> PathBuf {
        self.dir.join("rollback")
    }

    /// Asks the worker to roll `zone` back at its next pass (`rdctl worker rollback`).
    pub fn request_rollback(&self, zone: &str) -> Result<(), StateError> {
        let dir = self.requests_dir();
        let io = |op, path: &Path| {
            let path = path.to_owned();
            move |source| StateError::Io { path, op, source }
        };
        std::fs::create_dir_all(&dir).map_err(io("creating", &dir))?;
        let p = dir.join(zone);
        write_atomic(&p, zone.as_bytes()).map_err(io("writing the rollback request", &p))
    }

    /// The zones whose rollback was asked for, sorted.
    pub fn rollback_requests(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.requests_dir())
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| !n.starts_with('.'))
            .collect();
        v.sort();
        v
    }

    /// Forgets a rollback request (done, or refused with the reason in the zone's record).
    pub fn clear_rollback_request(&self, zone: &str) -> Result<(), StateError> {
        let path = self.requests_dir().join(zone);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(source) => Err(StateError::Io {
                path,
                op: "removing the rollback request",
                source,
            }),
        }
    }

    /// Every record, sorted by zone.
    pub fn all(&self) -> Vec<ZoneStatus> {
        let mut out: Vec<ZoneStatus> = std::fs::read_dir(self.dir.join("zones"))
            .into_iter()
            .flatten()
            .flatten()
            .filter(|e| e.path().extension().is_some_and(|x| x == "json"))
            .filter_map(|e| serde_json::from_slice(&std::fs::read(e.path()).ok()?).ok())
            .collect();
        out.sort_by(|a: &ZoneStatus, b| a.zone.cmp(&b.zone));
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_the_lock_is_exclusive() {
        let t = tempfile::tempdir().unwrap();
        let s = StateDir::open(&t.path().join("state"), "w").unwrap();
        let lock = s.lock().unwrap();
        assert!(matches!(s.lock(), Err(StateError::Locked { .. })));
        drop(lock);
        let again = s.lock().unwrap();
        let st = ZoneStatus {
            zone: "web".into(),
            image: "reg/x:1".into(),
            phase: Phase::Failed,
            last_error: Some("boom".into()),
            failures: 2,
            ..ZoneStatus::default()
        };
        s.save(&st).unwrap();
        assert_eq!(s.load("web"), Some(st.clone()));
        assert_eq!(s.all(), vec![st]);
        assert_eq!(s.load("other"), None);
        drop(again);
    }
}
