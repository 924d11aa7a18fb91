//! What a zone is and what it asks for: one zone manifest as the worker holds it
//! ([`ZoneSpec`], [`PullPolicy`]), the caps it sets ([`ResourceLimits`], written in zonecfg's
//! size syntax, [`size_bytes`]) and the caps a zone was made with ([`Caps`]).
//!
//! This is the vocabulary the manifest loader (`config`), admission by resources (`capacity`)
//! and the provisioners (`provision`) share. It imports nothing else of the crate, so the three
//! stand on it without importing each other in a circle.

use std::path::PathBuf;
use std::time::Duration;

use registry_client::Reference;
use serde::{Deserialize, Serialize};

/// When to pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
pub enum PullPolicy {
    /// Resolve the reference on every pass; a moved tag replaces the zone.
    Always,
    /// Pull only when the zone has no image yet.
    IfNotPresent,
    /// Never ask a registry for the image (kubelet's `Never`): a zone that exists keeps its
    /// image; one that does not is made only from blobs already in the content store (a
    /// digest reference, or the digest this node last resolved the reference to), else it
    /// fails with `ErrImageNeverPull`.
    Never,
}

/// Resource caps for zonecfg.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimits {
    /// `capped-cpu ncpus`.
    pub cpus: Option<f64>,
    /// `capped-memory physical`, with a k/m/g/t suffix.
    pub memory: Option<String>,
    /// The zone's disk: the `quota` of its dataset on the ZFS layer store (k/m/g/t suffix);
    /// wins over the image's `org.reddwarf.zone.quota`. The directory store has no quota and
    /// refuses the key rather than ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
}

/// What happens to a zone's volume once no zone holds it (a PersistentVolume's
/// `persistentVolumeReclaimPolicy`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Reclaim {
    /// Kept, with its data, until a zone names it again (or an operator removes it).
    #[default]
    Retain,
    /// Removed `gc_grace` after it was released.
    Delete,
}

/// One `[[volumes]]` entry of a zone manifest: persistent storage outside the zone's root,
/// mounted at `path` in the zone.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct VolumeSpec {
    /// Where the zone sees it (absolute, normalised).
    pub path: String,
    /// Its size: the `quota` of its dataset on the ZFS layer store (k/m/g/t suffix).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// A name that keeps the volume across re-creations of the zone under any zone name;
    /// without one the volume is the zone's own (`<zone>.<path>`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Overrides the zone's `reclaim` for this volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reclaim: Option<Reclaim>,
}

/// The time an updated zone has to become ready when the manifest does not say (kubelet's
/// Deployment `progressDeadlineSeconds` is 600 s; a zone boots in seconds).
pub const DEFAULT_UPDATE_TIMEOUT: Duration = Duration::from_secs(120);

/// What a readiness probe checks (kubelet's `readinessProbe` `tcpSocket` and `httpGet`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ProbeCheck {
    /// A TCP connection to the port is accepted.
    Tcp,
    /// `GET path` answers with a status from 200 to 399 (kubelet's success range).
    Http {
        /// The request path (absolute).
        path: String,
    },
}

/// The manifest's `[readiness]`: a probe of the zone's service, tried every `period` until it
/// succeeds or the update's time is up.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReadinessProbe {
    /// The address probed (default `127.0.0.1`; an exclusive-IP zone's own address).
    pub host: String,
    /// The port.
    pub port: u16,
    /// TCP or HTTP.
    pub check: ProbeCheck,
    /// Between tries (kubelet's `periodSeconds`; default 1 s).
    pub period: Duration,
}

/// How an image update is switched: the new zone must be ready within `update_timeout` (the
/// provisioner's notion of running, then the probe when there is one), else the previous root
/// is put back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rollout {
    /// The time the new zone has to become ready.
    pub update_timeout: Duration,
    /// The probe, when the manifest has `[readiness]`.
    pub readiness: Option<ReadinessProbe>,
}

impl Default for Rollout {
    fn default() -> Rollout {
        Rollout {
            update_timeout: DEFAULT_UPDATE_TIMEOUT,
            readiness: None,
        }
    }
}

/// One zone manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneSpec {
    /// Zone name.
    pub name: String,
    /// Image reference.
    pub image: Reference,
    /// Pull policy.
    pub pull_policy: PullPolicy,
    /// Zone brand.
    pub brand: String,
    /// Seconds between the stop signal and the kill; `None` takes the image's
    /// `org.reddwarf.image.stop-timeout` label (what `rdctl build` writes), else 10.
    pub stop_timeout_secs: Option<u32>,
    /// Caps.
    pub limits: ResourceLimits,
    /// `[[volumes]]`, besides the image config's `Volumes`.
    pub volumes: Vec<VolumeSpec>,
    /// What happens to the zone's volumes once the zone is gone (default `Retain`).
    pub reclaim: Reclaim,
    /// How an image update is confirmed or rolled back (`update_timeout`, `[readiness]`).
    pub rollout: Rollout,
    /// The manifest file.
    pub source: PathBuf,
}

/// The caps a zone was configured with (its description's zone config, which holds the
/// image's `cappedCPU.ncpus` and `cappedMemory.physical`); `None` is uncapped.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Caps {
    /// CPUs.
    pub cpus: Option<f64>,
    /// Memory in bytes.
    pub memory_bytes: Option<u64>,
}

/// The least `capped-cpu ncpus` zonecfg takes (illumos-gate `usr/src/cmd/zonecfg/zonecfg.c`
/// refuses a cap below one hundredth of a CPU).
pub const MIN_NCPUS: f64 = 0.01;
/// The least `capped-memory physical` zonecfg takes, in bytes (1M, zonecfg.c).
pub const MIN_PHYSICAL: u64 = 1 << 20;
/// The least `capped-memory swap` zonecfg takes, in bytes (50M, zonecfg.c).
pub const MIN_SWAP: u64 = 50 << 20;

/// Bytes of a size with an optional k/m/g/t suffix (powers of 1024, as zonecfg reads them).
pub fn size_bytes(s: &str) -> Option<u64> {
    let (digits, shift) = match s.chars().last()? {
        'k' | 'K' => (&s[..s.len() - 1], 10),
        'm' | 'M' => (&s[..s.len() - 1], 20),
        'g' | 'G' => (&s[..s.len() - 1], 30),
        't' | 'T' => (&s[..s.len() - 1], 40),
        _ => (s, 0),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse::<u64>().ok()?.checked_mul(1u64 << shift)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_are_powers_of_1024() {
        assert_eq!(size_bytes("512m"), Some(512 << 20));
        assert_eq!(size_bytes("2G"), Some(2 << 30));
        assert_eq!(size_bytes("4096"), Some(4096));
        for bad in ["", "m", "1.5g", "lots", "-1k"] {
            assert_eq!(size_bytes(bad), None, "{bad}");
        }
    }
}
