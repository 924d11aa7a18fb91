//! Capacity and admission by resources: what the node has (kubelet's node `capacity`), what it
//! may hand out to zones (`allocatable`, from `[allocatable]` in worker.toml) and what admitted
//! zones hold (`allocated`). A zone manifest that asks for more than the node may give, or more
//! than is left, or a brand the provisioner cannot make, is not admitted: its phase is
//! `Unschedulable` with the reason, and it is tried again on every pass (kubelet's admit
//! handlers: `OutOfcpu`, `OutOfmemory`, `OutOfpods`).
//!
//! A zone's request is its caps: as in Kubernetes when only limits are given, the request
//! equals the limit. The caps are the effective ones: the manifest's `limits.cpus` and
//! `limits.memory` where set, else the image's `cappedCPU.ncpus` and `cappedMemory.physical`
//! (its `org.reddwarf.zone.solaris` label) as the zone was made with them. The image's caps
//! are known once the zone exists (its description); a zone not made yet is admitted on its
//! manifest's caps. A zone without caps requests nothing but one zone slot. A zone whose manifest is gone holds what it was given until it is removed
//! (while it waits out `gc_grace_secs`), as a terminating pod holds its node's resources.
//!
//! The node's conditions ([`NodeCondition`], kubelet's `DiskPressure` and, for zones the node
//! could not admit, `ResourcePressure`) are written with the rest after every pass.

use serde::{Deserialize, Serialize};

use crate::provision::Capabilities;
pub use crate::zone::{Caps, size_bytes};
use crate::zone::{ResourceLimits, ZoneSpec};

/// Amounts of each resource; `None` is unknown (capacity) or unlimited (allocatable).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Resources {
    /// CPUs.
    pub cpus: Option<f64>,
    /// Memory in bytes.
    pub memory_bytes: Option<u64>,
    /// Zones.
    pub zones: Option<u64>,
}

/// What admitted zones hold.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Allocated {
    /// CPUs (sum of `limits.cpus`).
    pub cpus: f64,
    /// Memory in bytes (sum of `limits.memory`).
    pub memory_bytes: u64,
    /// Zones admitted.
    pub zones: u64,
}

/// The node's side of `rdctl worker status --json`, written by the worker after every pass.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// What the host has (CPUs online; physical memory where the platform reports it).
    pub capacity: Resources,
    /// What zones may be given (`[allocatable]` in worker.toml; unset means no limit).
    pub allocatable: Resources,
    /// What admitted zones hold.
    pub allocated: Allocated,
    /// What the provisioner supports.
    pub capabilities: Option<Capabilities>,
    /// The node's conditions (kubelet's `node.status.conditions`); empty before the first
    /// pass that wrote them.
    #[serde(default)]
    pub conditions: Vec<NodeCondition>,
    /// When the worker wrote this (seconds since the epoch).
    pub updated_unix: u64,
}

/// Which condition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConditionType {
    /// The content store's file system is at or above `image_gc_high_percent` after image GC
    /// (kubelet's `DiskPressure`).
    DiskPressure,
    /// A zone was not admitted for want of CPUs, memory or zone slots (kubelet reports this
    /// per pod as `OutOfcpu`/`OutOfmemory`; here it is also a node condition).
    ResourcePressure,
}

impl std::fmt::Display for ConditionType {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ConditionType::DiskPressure => "DiskPressure",
            ConditionType::ResourcePressure => "ResourcePressure",
        })
    }
}

/// Whether a condition holds (Kubernetes writes `"True"`, `"False"`, `"Unknown"`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum ConditionStatus {
    /// It holds.
    True,
    /// It does not.
    False,
    /// It could not be measured (the disk usage could not be read).
    Unknown,
}

/// One node condition, as kubelet writes it into `node.status.conditions`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeCondition {
    /// Which.
    #[serde(rename = "type")]
    pub kind: ConditionType,
    /// Whether it holds.
    pub status: ConditionStatus,
    /// One CamelCase word (kubelet's: `KubeletHasDiskPressure`, `KubeletHasNoDiskPressure`).
    pub reason: String,
    /// What was measured.
    pub message: String,
    /// When the status last changed (seconds since the epoch).
    pub last_transition_unix: u64,
}

impl NodeCondition {
    /// A condition now, keeping `previous`'s transition time when the status did not change.
    pub fn new(
        kind: ConditionType,
        status: ConditionStatus,
        reason: &str,
        message: String,
        previous: &[NodeCondition],
        now_unix: u64,
    ) -> NodeCondition {
        let last_transition_unix = previous
            .iter()
            .find(|c| c.kind == kind && c.status == status)
            .map_or(now_unix, |c| c.last_transition_unix);
        NodeCondition {
            kind,
            status,
            reason: reason.to_owned(),
            message,
            last_transition_unix,
        }
    }
}

/// The host's capacity: online CPUs, and physical memory on Linux (`sysinfo`); zones have no
/// fixed limit.
pub fn host_capacity() -> Resources {
    let cpus = std::thread::available_parallelism()
        .ok()
        .map(|n| n.get() as f64);
    #[cfg(any(target_os = "linux", target_os = "android"))]
    // `totalram` is a C `unsigned long`: u64 here, u32 on 32-bit targets.
    #[allow(clippy::useless_conversion)]
    let memory_bytes = {
        let s = rustix::system::sysinfo();
        Some(u64::from(s.totalram).saturating_mul(u64::from(s.mem_unit.max(1))))
    };
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let memory_bytes = None;
    Resources {
        cpus,
        memory_bytes,
        zones: None,
    }
}

/// What a zone asks for.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Request {
    /// CPUs.
    pub cpus: f64,
    /// Memory in bytes.
    pub memory_bytes: u64,
}

/// The zone's request: its caps.
pub fn request(spec: &ZoneSpec) -> Request {
    limits_request(&spec.limits)
}

/// The effective caps of a zone: the manifest's `limits` win field by field, else the caps
/// the zone was configured with (`made`), else nothing.
pub fn effective_request(limits: &ResourceLimits, made: Option<Caps>) -> Request {
    let from_limits = limits_request(limits);
    Request {
        cpus: match limits.cpus {
            Some(_) => from_limits.cpus,
            None => made.and_then(|c| c.cpus).unwrap_or(0.0),
        },
        memory_bytes: match &limits.memory {
            Some(_) => from_limits.memory_bytes,
            None => made.and_then(|c| c.memory_bytes).unwrap_or(0),
        },
    }
}

/// What caps amount to.
pub fn limits_request(limits: &ResourceLimits) -> Request {
    Request {
        cpus: limits.cpus.unwrap_or(0.0),
        memory_bytes: limits.memory.as_deref().and_then(size_bytes).unwrap_or(0),
    }
}

fn gib(b: u64) -> String {
    format!("{:.2} GiB", b as f64 / f64::from(1u32 << 30))
}

/// Whether the zone fits beside what is already allocated; the reason when it does not,
/// starting with kubelet's reason word.
pub fn fit(
    caps: &Capabilities,
    allocatable: &Resources,
    allocated: &Allocated,
    spec: &ZoneSpec,
    made: Option<Caps>,
) -> Result<Request, String> {
    if !caps.brands.is_empty() && !caps.brands.contains(&spec.brand) {
        return Err(format!(
            "UnsupportedBrand: the provisioner makes zones of brand {} only, not {:?}",
            caps.brands.join(", "),
            spec.brand
        ));
    }
    let r = effective_request(&spec.limits, made);
    if let Some(max) = allocatable.zones
        && allocated.zones + 1 > max
    {
        return Err(format!(
            "OutOfzones: {} of {max} allocatable zones are in use",
            allocated.zones
        ));
    }
    if let Some(max) = allocatable.cpus {
        if r.cpus > max {
            return Err(format!(
                "OutOfcpu: asks for {} cpus; the node has {max} allocatable",
                r.cpus
            ));
        }
        if allocated.cpus + r.cpus > max + 1e-9 {
            return Err(format!(
                "OutOfcpu: asks for {} cpus; {} of {max} allocatable are in use",
                r.cpus, allocated.cpus
            ));
        }
    }
    if let Some(max) = allocatable.memory_bytes {
        if r.memory_bytes > max {
            return Err(format!(
                "OutOfmemory: asks for {}; the node has {} allocatable",
                gib(r.memory_bytes),
                gib(max)
            ));
        }
        if allocated.memory_bytes.saturating_add(r.memory_bytes) > max {
            return Err(format!(
                "OutOfmemory: asks for {}; {} of {} allocatable are in use",
                gib(r.memory_bytes),
                gib(allocated.memory_bytes),
                gib(max)
            ));
        }
    }
    Ok(r)
}

impl Allocated {
    /// Adds an admitted zone's request.
    pub fn add(&mut self, r: Request) {
        self.cpus += r.cpus;
        self.memory_bytes = self.memory_bytes.saturating_add(r.memory_bytes);
        self.zones += 1;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_images_caps_count_where_the_manifest_sets_none() {
        let made = Caps {
            cpus: Some(1.5),
            memory_bytes: Some(768 << 20),
        };
        let none = ResourceLimits::default();
        assert_eq!(
            effective_request(&none, Some(made)),
            Request {
                cpus: 1.5,
                memory_bytes: 768 << 20
            }
        );
        let cpus_only = ResourceLimits {
            cpus: Some(0.5),
            ..ResourceLimits::default()
        };
        assert_eq!(
            effective_request(&cpus_only, Some(made)),
            Request {
                cpus: 0.5,
                memory_bytes: 768 << 20
            }
        );
        assert_eq!(
            effective_request(&none, None),
            Request {
                cpus: 0.0,
                memory_bytes: 0
            }
        );
    }
}
