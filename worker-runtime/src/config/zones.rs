//! What zones may be given and may ask for: `[allocatable]` (the node's resources zones may
//! hold, kubelet's allocatable) and `[zones]` (what an image's `solaris` label may ask for
//! beyond the defaults, [`ZonePolicy`]).

use config_toml::parse_size;
use config_toml::units::SIZE_EXPECTED;
use serde::Deserialize;

use super::Invalid;
use crate::capacity::Resources;
use crate::zone::size_bytes;
use crate::zone_policy::{IpRange, ZonePolicy, privilege_word, valid_link_name};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileAllocatable {
    cpus: Option<f64>,
    memory: Option<SizeValue>,
    zones: Option<u64>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileZonePolicy {
    #[serde(default)]
    allowed_privileges: Vec<String>,
    #[serde(default)]
    allowed_lower_links: Vec<String>,
    #[serde(default)]
    allowed_address_ranges: Vec<String>,
    #[serde(default)]
    allow_mac_address: bool,
}

/// A size key as written: a string (`"24GiB"`, or zonecfg's `"24G"`) or a whole number of
/// bytes.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub(super) enum SizeValue {
    Bytes(u64),
    Text(String),
}

/// `[allocatable]` checked: CPUs a finite number, memory a size.
pub(super) fn allocatable(a: FileAllocatable) -> Result<Resources, Invalid> {
    if let Some(c) = a.cpus
        && !(c >= 0.0 && c.is_finite())
    {
        return Err(("allocatable.cpus", format!("{c} is not a number of CPUs")));
    }
    let memory_bytes = match a.memory {
        None => None,
        Some(SizeValue::Bytes(b)) => Some(b),
        Some(SizeValue::Text(m)) => Some(parse_size(&m).or_else(|_| {
            size_bytes(&m).ok_or_else(|| {
                (
                    "allocatable.memory",
                    format!(
                        "{m:?} is not a size: expected {SIZE_EXPECTED}, or zonecfg's 512m, 24g"
                    ),
                )
            })
        })?),
    };
    Ok(Resources {
        cpus: a.cpus,
        memory_bytes,
        zones: a.zones,
    })
}

/// `[zones]` checked: privilege names (no removals), datalink names, CIDR ranges.
pub(super) fn zone_policy(z: FileZonePolicy) -> Result<ZonePolicy, Invalid> {
    for p in &z.allowed_privileges {
        if p.starts_with('!') || !privilege_word(p) {
            return Err((
                "zones.allowed_privileges",
                format!("{p:?} is not a privilege name such as dtrace_proc (lower case)"),
            ));
        }
    }
    for l in &z.allowed_lower_links {
        if !valid_link_name(l) {
            return Err((
                "zones.allowed_lower_links",
                format!("{l:?} is not a datalink name such as igb0"),
            ));
        }
    }
    let mut ranges = Vec::new();
    for r in &z.allowed_address_ranges {
        match IpRange::parse(r) {
            Some(a) => ranges.push(a),
            None => {
                return Err((
                    "zones.allowed_address_ranges",
                    format!("{r:?} is not a CIDR range such as 10.0.0.0/24"),
                ));
            }
        }
    }
    Ok(ZonePolicy {
        allowed_privileges: z.allowed_privileges,
        allowed_lower_links: z.allowed_lower_links,
        allowed_address_ranges: ranges,
        allow_mac_address: z.allow_mac_address,
    })
}
