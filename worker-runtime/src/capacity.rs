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
//! (its `org.reddwarf.zone.solaris` label). For a zone that exists they are read from its
//! description. A zone not made yet is admitted on its manifest's caps, and its image's caps
//! are checked once the image is pulled and verified, before the zone is made: the pass's
//! [`Ledger`] counts every zone admitted in the pass and every zone that exists, so a zone whose
//! image asks for more than is left is not made (`Unschedulable`, `OutOfcpu`/`OutOfmemory`
//! naming the image's cap and what is left) and the node is never overcommitted, as kubelet
//! never admits past allocatable. The same check guards a zone re-created with a new image
//! whose caps are larger; refused, it keeps running its current image. A zone without caps
//! requests nothing but one zone slot. A zone whose manifest is gone holds what it was given
//! until it is removed (while it waits out `gc_grace_secs`), as a terminating pod holds its
//! node's resources.
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
    /// Bytes the volumes' sizes hold (every sized volume, held or retained, as a bound or
    /// released PersistentVolume keeps its capacity).
    #[serde(default)]
    pub volume_bytes: u64,
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
    /// The zones' volumes: held ones and retained ones (`released_unix` set), after every
    /// pass.
    #[serde(default)]
    pub volumes: Vec<crate::volume::VolumeRecord>,
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

/// One pass's account of what the node has given: the zones waiting out their grace period,
/// then every admitted zone in admission order with what it holds. Admission counts each zone's
/// request as far as it is known (its manifest's caps, and for a zone that exists the caps it
/// was made with); once a zone's image is in, [`Ledger::claim`] checks its image's caps against
/// what is left before the zone is made, so zones admitted in the same pass cannot together
/// take more than is allocatable.
///
/// A claim is decided as if in admission order: it counts what every zone admitted before it
/// holds now, and every zone admitted after it at its admitted request (never less, so a later
/// zone's failure or refusal cannot change the decision). A zone whose claim grows a limited
/// resource waits ([`Ledger::must_wait`]) until every zone before it has claimed or settled.
#[derive(Debug, Clone)]
pub struct Ledger {
    allocatable: Resources,
    /// Zones whose manifest is gone and that still exist (they hold what they were given).
    leaving: Allocated,
    /// The admitted zones, in admission order.
    zones: Vec<Held>,
}

#[derive(Debug, Clone)]
struct Held {
    zone: String,
    admitted: Request,
    state: Holding,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Holding {
    /// Its reconcile has not claimed yet: it holds its admitted request and may ask for more.
    Pending,
    /// Settled: its image's caps, or its admitted request when its reconcile ended without a
    /// claim (unchanged, failed, backing off).
    Holds(Request),
    /// Refused once its image was known and not made: it holds nothing.
    Released,
}

impl Ledger {
    /// Nothing given yet.
    pub fn new(allocatable: Resources) -> Ledger {
        Ledger {
            allocatable,
            leaving: Allocated::default(),
            zones: Vec::new(),
        }
    }

    /// Counts a zone waiting out its grace period (it takes part in no claim).
    pub fn hold_leaving(&mut self, r: Request) {
        self.leaving.add(r);
    }

    /// Counts an admitted zone's request; zones are admitted in the pass's order.
    pub fn admit(&mut self, zone: &str, r: Request) {
        self.zones.push(Held {
            zone: zone.to_owned(),
            admitted: r,
            state: Holding::Pending,
        });
    }

    /// What is held now: the leaving zones and every admitted zone not released.
    pub fn allocated(&self) -> Allocated {
        let mut a = self.leaving.clone();
        for h in &self.zones {
            match h.state {
                Holding::Pending => a.add(h.admitted),
                Holding::Holds(r) => a.add(r),
                Holding::Released => {}
            }
        }
        a
    }

    /// Settles a zone that ends its reconcile without a claim at its admitted request;
    /// whether anything changed.
    pub fn settle(&mut self, zone: &str) -> bool {
        match self.zones.iter_mut().find(|h| h.zone == zone) {
            Some(h) if h.state == Holding::Pending => {
                h.state = Holding::Holds(h.admitted);
                true
            }
            _ => false,
        }
    }

    /// Whether `zone`'s claim of `wanted` must wait for a zone admitted before it: it asks more
    /// of a limited resource than it was admitted with, and an earlier zone has not settled.
    pub fn must_wait(&self, zone: &str, wanted: Request) -> bool {
        let Some(k) = self.zones.iter().position(|h| h.zone == zone) else {
            return false;
        };
        let grows = self.grows(&self.zones[k].admitted, &wanted);
        grows && self.zones[..k].iter().any(|h| h.state == Holding::Pending)
    }

    fn grows(&self, admitted: &Request, wanted: &Request) -> bool {
        (self.allocatable.cpus.is_some() && wanted.cpus > admitted.cpus)
            || (self.allocatable.memory_bytes.is_some()
                && wanted.memory_bytes > admitted.memory_bytes)
    }

    /// `zone` asks for `wanted` (its request with its image's caps) before it is made. What it
    /// was admitted with always fits; more is taken when what is left allows, else the reason,
    /// starting with kubelet's reason word. A refused zone that does not exist (`exists` false)
    /// holds nothing from then on; one that exists keeps what it holds.
    pub fn claim(&mut self, zone: &str, wanted: Request, exists: bool) -> Result<Request, String> {
        let Some(k) = self.zones.iter().position(|h| h.zone == zone) else {
            // Not admitted in this pass (never the case for a reconciled zone): nothing to check.
            return Ok(wanted);
        };
        let mut others = self.leaving.clone();
        for (i, h) in self.zones.iter().enumerate() {
            match (i.cmp(&k), h.state) {
                (std::cmp::Ordering::Equal, _) => {}
                // A later zone counts at its admitted request whatever it has done since.
                (std::cmp::Ordering::Greater, _) | (_, Holding::Pending) => others.add(h.admitted),
                (_, Holding::Holds(r)) => others.add(r),
                (_, Holding::Released) => {}
            }
        }
        let admitted = self.zones[k].admitted;
        let refusal = self.refusal(&others, &admitted, &wanted);
        let held = &mut self.zones[k];
        match refusal {
            None => {
                held.state = Holding::Holds(wanted);
                Ok(wanted)
            }
            Some(reason) => {
                held.state = if exists {
                    Holding::Holds(admitted)
                } else {
                    Holding::Released
                };
                Err(reason)
            }
        }
    }

    fn refusal(&self, others: &Allocated, admitted: &Request, wanted: &Request) -> Option<String> {
        if let Some(max) = self.allocatable.cpus
            && wanted.cpus > admitted.cpus
            && others.cpus + wanted.cpus > max + 1e-9
        {
            return Some(format!(
                "OutOfcpu: the image caps the zone at {} cpus; {} of {max} allocatable are left",
                wanted.cpus,
                (max - others.cpus).max(0.0)
            ));
        }
        if let Some(max) = self.allocatable.memory_bytes
            && wanted.memory_bytes > admitted.memory_bytes
            && others.memory_bytes.saturating_add(wanted.memory_bytes) > max
        {
            return Some(format!(
                "OutOfmemory: the image caps the zone at {}; {} of {} allocatable are left",
                gib(wanted.memory_bytes),
                gib(max.saturating_sub(others.memory_bytes)),
                gib(max)
            ));
        }
        None
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

    fn cpus(n: f64) -> Request {
        Request {
            cpus: n,
            memory_bytes: 0,
        }
    }

    fn six_cpus() -> Ledger {
        Ledger::new(Resources {
            cpus: Some(6.0),
            ..Resources::default()
        })
    }

    #[test]
    fn the_first_zone_by_admission_order_takes_what_its_image_caps() {
        let mut l = six_cpus();
        l.admit("alpha", cpus(0.0));
        l.admit("bravo", cpus(0.0));
        // bravo's image is in first, but alpha was admitted before it and has not claimed.
        assert!(l.must_wait("bravo", cpus(4.0)));
        assert!(!l.must_wait("alpha", cpus(4.0)));
        assert_eq!(l.claim("alpha", cpus(4.0), false), Ok(cpus(4.0)));
        assert!(!l.must_wait("bravo", cpus(4.0)));
        assert_eq!(
            l.claim("bravo", cpus(4.0), false),
            Err("OutOfcpu: the image caps the zone at 4 cpus; 2 of 6 allocatable are left".into())
        );
        // bravo is not made: it holds nothing, not even its slot.
        assert_eq!(
            l.allocated(),
            Allocated {
                cpus: 4.0,
                memory_bytes: 0,
                zones: 1,
                volume_bytes: 0,
            }
        );
    }

    #[test]
    fn a_later_zones_failure_does_not_change_an_earlier_claim() {
        let mut l = six_cpus();
        l.admit("alpha", cpus(0.0));
        l.admit("bravo", cpus(3.0));
        // bravo fails (settles at its admitted request) before alpha's image is in; alpha is
        // decided against bravo's admitted request all the same.
        assert!(l.settle("bravo"));
        assert!(!l.settle("bravo"), "settled once");
        assert!(
            l.claim("alpha", cpus(4.0), false)
                .unwrap_err()
                .starts_with("OutOfcpu: the image caps the zone at 4 cpus; 3 of 6")
        );
    }

    #[test]
    fn no_growth_never_waits_or_is_refused_and_unlimited_resources_are_not_checked() {
        let mut l = six_cpus();
        l.admit("alpha", cpus(0.0));
        l.admit("bravo", cpus(5.0));
        assert!(!l.must_wait("bravo", cpus(5.0)));
        assert_eq!(l.claim("bravo", cpus(5.0), false), Ok(cpus(5.0)));
        // Memory is not limited on this node: an image asking for it waits for nobody.
        let memory = Request {
            cpus: 0.0,
            memory_bytes: 8 << 30,
        };
        assert!(!l.must_wait("alpha", memory));
        assert_eq!(l.claim("alpha", memory, false), Ok(memory));
    }

    #[test]
    fn a_zone_that_exists_keeps_what_it_holds_when_a_new_image_asks_too_much() {
        let mut l = Ledger::new(Resources {
            memory_bytes: Some(1 << 30),
            ..Resources::default()
        });
        l.hold_leaving(Request {
            cpus: 0.0,
            memory_bytes: 256 << 20,
        });
        let old = Request {
            cpus: 0.0,
            memory_bytes: 512 << 20,
        };
        l.admit("alpha", old);
        assert_eq!(
            l.claim(
                "alpha",
                Request {
                    cpus: 0.0,
                    memory_bytes: 1 << 30,
                },
                true
            ),
            Err(
                "OutOfmemory: the image caps the zone at 1.00 GiB; 0.75 GiB of 1.00 GiB allocatable are left"
                    .into()
            )
        );
        assert_eq!(
            l.allocated(),
            Allocated {
                cpus: 0.0,
                memory_bytes: 768 << 20,
                zones: 2,
                volume_bytes: 0,
            }
        );
    }
}
