//! The zone's configuration from the image and the zone manifest: the OCI runtime spec's
//! `solaris` section (carried by the image config label [`SOLARIS_LABEL`] as JSON) and the
//! manifest's `[limits]`, checked field by field and written as zonecfg commands.
//!
//! | runtime spec `solaris` | zonecfg (illumos, exclusive-IP) |
//! |---|---|
//! | `cappedCPU.ncpus` | `add capped-cpu` / `set ncpus=` |
//! | `cappedMemory.physical`, `.swap` | `add capped-memory` / `set physical=`, `set swap=` |
//! | `maxShmMemory` | `set max-shm-memory=` |
//! | `limitpriv` | `set limitpriv=` |
//! | `anet[i].linkname` | `add net` / `set physical=` (the VNIC's name) |
//! | `anet[i].lowerLink` | `set global-nic=` (the link the VNIC is made over; `auto` leaves it out) |
//! | `anet[i].allowedAddress` | `set allowed-address=` |
//! | `anet[i].defrouter` | `set defrouter=` (needs `allowedAddress`) |
//! | `anet[i].macAddress` | `set mac-addr=` |
//! | `milestone` | not zonecfg: a dependency of the entrypoint's SMF service |
//!
//! The manifest's `limits.cpus` and `limits.memory` win over the image's `cappedCPU.ncpus` and
//! `cappedMemory.physical` (the node's operator decides, as a pod spec wins over an image).
//! What the node's operator has not allowed (`[zones]` in worker.toml, [`ZonePolicy`]) is refused
//! before the zone is made, naming the field and the rule: privileges beyond illumos's default
//! zone set in `limitpriv`, a `lowerLink`, an `allowedAddress` outside the allowed ranges, a
//! `macAddress` (Kubernetes: PodSecurity's capabilities rule and `allowedCapabilities`; the
//! defaults allow no escalation). What illumos cannot express is refused with the field's path: `configureAllowedAddress:
//! "false"` (illumos configures an allowed address itself), `linkProtection` (a datalink
//! property set with dladm, not zonecfg), unknown keys, and malformed values.

use std::fmt::Write as _;
use std::net::IpAddr;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::zone::ResourceLimits;

/// The image config label whose value is the runtime spec's `solaris` object, as JSON.
pub const SOLARIS_LABEL: &str = "org.reddwarf.zone.solaris";

/// A `solaris` field that cannot become zonecfg: the field's path (`solaris.anet[1].macAddress`)
/// and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {reason}")]
pub struct ZonecfgError {
    /// The field's path, starting at `solaris`.
    pub field: String,
    /// What is wrong.
    pub reason: String,
}

/// A number of CPUs as zonecfg's `ncpus` takes it: a positive decimal such as `1.5`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ncpus(String);

impl Ncpus {
    /// Checks `s`.
    pub fn parse(s: &str) -> Option<Ncpus> {
        let ok = !s.is_empty()
            && s.bytes().all(|b| b.is_ascii_digit() || b == b'.')
            && s.bytes().filter(|b| *b == b'.').count() <= 1
            && !s.starts_with('.')
            && !s.ends_with('.');
        let v: f64 = s.parse().ok()?;
        (ok && v > 0.0 && v <= 1024.0).then(|| Ncpus(s.to_owned()))
    }

    /// The number of CPUs.
    pub fn value(&self) -> f64 {
        // Checked by `parse` or made from an f64.
        self.0.parse().unwrap_or(0.0)
    }

    fn from_f64(v: f64) -> Ncpus {
        Ncpus(v.to_string())
    }
}

/// A size as zonecfg takes it (digits with an optional k/m/g/t suffix).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Size(String);

impl Size {
    /// Checks `s`.
    pub fn parse(s: &str) -> Option<Size> {
        crate::zone::size_bytes(s)
            .filter(|b| *b > 0)
            .map(|_| Size(s.to_owned()))
    }

    /// The size in bytes.
    pub fn bytes(&self) -> u64 {
        crate::zone::size_bytes(&self.0).unwrap_or(0)
    }
}

/// `mac-addr`: a fixed address, or one of zonecfg's choices (`auto`, the default, is written
/// as no `mac-addr` at all).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MacAddress {
    /// A factory address of the lower link.
    Factory,
    /// A random address.
    Random,
    /// This address (unicast: the multicast bit clear).
    Fixed([u8; 6]),
}

impl MacAddress {
    /// Checks `s`: `factory`, `random`, or six `:`-separated hex octets.
    pub fn parse(s: &str) -> Option<MacAddress> {
        match s {
            "factory" => return Some(MacAddress::Factory),
            "random" => return Some(MacAddress::Random),
            _ => {}
        }
        let parts: Vec<&str> = s.split(':').collect();
        if parts.len() != 6 {
            return None;
        }
        let mut out = [0u8; 6];
        for (o, p) in out.iter_mut().zip(&parts) {
            if p.is_empty() || p.len() > 2 || !p.bytes().all(|b| b.is_ascii_hexdigit()) {
                return None;
            }
            *o = u8::from_str_radix(p, 16).ok()?;
        }
        Some(MacAddress::Fixed(out))
    }

    fn zonecfg(&self) -> String {
        match self {
            MacAddress::Factory => "factory".into(),
            MacAddress::Random => "random".into(),
            MacAddress::Fixed(o) => o
                .iter()
                .map(|b| format!("{b:x}"))
                .collect::<Vec<_>>()
                .join(":"),
        }
    }
}

/// An address with an optional prefix length (`10.0.0.2/24`, `fd00::2/64`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddressPrefix {
    /// The address.
    pub addr: IpAddr,
    /// The prefix length.
    pub prefix: Option<u8>,
}

impl AddressPrefix {
    /// Checks `s`.
    pub fn parse(s: &str) -> Option<AddressPrefix> {
        let (a, p) = match s.split_once('/') {
            Some((a, p)) => (a, Some(p)),
            None => (s, None),
        };
        let addr: IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match p {
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => {
                Some(p.parse::<u8>().ok().filter(|n| *n <= max)?)
            }
            Some(_) => return None,
            None => None,
        };
        Some(AddressPrefix { addr, prefix })
    }

    /// As zonecfg takes it (`10.0.0.2/24`).
    pub fn zonecfg(&self) -> String {
        match self.prefix {
            Some(p) => format!("{}/{p}", self.addr),
            None => self.addr.to_string(),
        }
    }
}

pub use crate::zone_policy::ZonePolicy;

/// `limitpriv` sets every zone may name: illumos's default zone set and its subset `basic`
/// (removals, `!name`, are always allowed: they only take privileges away).
const DEFAULT_PRIVILEGE_SETS: [&str; 2] = ["default", "basic"];

impl ZoneConfig {
    /// The CPU and memory caps it sets (what capacity counts for the zone).
    pub fn caps(&self) -> crate::zone::Caps {
        crate::zone::Caps {
            cpus: self.ncpus.as_ref().map(Ncpus::value),
            memory_bytes: self.physical.as_ref().map(Size::bytes),
        }
    }

    /// Refuses what `policy` does not allow, naming the field and the worker.toml rule.
    pub fn check_policy(&self, policy: &ZonePolicy) -> Result<(), ZonecfgError> {
        for w in &self.limitpriv {
            let name = w.to_ascii_lowercase();
            if name.starts_with('!')
                || DEFAULT_PRIVILEGE_SETS.contains(&name.as_str())
                || policy.allowed_privileges.contains(&name)
            {
                continue;
            }
            return Err(err(
                "solaris.limitpriv",
                format!(
                    "{w:?} is not in worker.toml zones.allowed_privileges (a zone gets illumos's default set and may only take from it unless the operator allows more)"
                ),
            ));
        }
        for (i, n) in self.nets.iter().enumerate() {
            if let Some(l) = &n.lower_link
                && !policy.allowed_lower_links.contains(l)
            {
                return Err(err(
                    format!("solaris.anet[{i}].lowerLink"),
                    format!("{l:?} is not in worker.toml zones.allowed_lower_links"),
                ));
            }
            for a in &n.allowed_address {
                if !policy
                    .allowed_address_ranges
                    .iter()
                    .any(|r| r.contains(a.addr, a.prefix))
                {
                    return Err(err(
                        format!("solaris.anet[{i}].allowedAddress"),
                        format!(
                            "{:?} is not within worker.toml zones.allowed_address_ranges",
                            a.zonecfg()
                        ),
                    ));
                }
            }
            if let Some(m) = &n.mac_address
                && !policy.allow_mac_address
            {
                return Err(err(
                    format!("solaris.anet[{i}].macAddress"),
                    format!(
                        "{:?} is refused: worker.toml zones.allow_mac_address is false",
                        m.zonecfg()
                    ),
                ));
            }
        }
        Ok(())
    }
}

pub use crate::zone_policy::valid_link_name;

/// One network interface (`anet[i]`): an exclusive-IP VNIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Net {
    /// The VNIC's name in the zone (`physical`).
    pub linkname: String,
    /// The link the VNIC is made over (`global-nic`); `None` for `auto`.
    pub lower_link: Option<String>,
    /// `allowed-address`.
    pub allowed_address: Vec<AddressPrefix>,
    /// `defrouter`.
    pub defrouter: Vec<IpAddr>,
    /// `mac-addr`.
    pub mac_address: Option<MacAddress>,
}

/// The zone's configuration beyond the zonepath and brand.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ZoneConfig {
    /// `capped-cpu ncpus`.
    pub ncpus: Option<Ncpus>,
    /// `capped-memory physical`.
    pub physical: Option<Size>,
    /// `capped-memory swap`.
    pub swap: Option<Size>,
    /// `max-shm-memory`.
    pub max_shm_memory: Option<Size>,
    /// `limitpriv`: privilege names (with an optional leading `!`) or sets.
    pub limitpriv: Vec<String>,
    /// `net` resources.
    pub nets: Vec<Net>,
    /// The SMF milestone that must be online before the entrypoint starts.
    pub milestone: Option<String>,
}

fn err(field: impl Into<String>, reason: impl Into<String>) -> ZonecfgError {
    ZonecfgError {
        field: field.into(),
        reason: reason.into(),
    }
}

fn object<'a>(
    v: &'a Value,
    field: &str,
    keys: &[&str],
) -> Result<&'a serde_json::Map<String, Value>, ZonecfgError> {
    let o = v
        .as_object()
        .ok_or_else(|| err(field, format!("{v} is not an object")))?;
    if let Some(k) = o.keys().find(|k| !keys.contains(&k.as_str())) {
        return Err(err(
            format!("{field}.{k}"),
            format!("unknown key; expected one of {}", keys.join(", ")),
        ));
    }
    Ok(o)
}

fn string<'a>(
    o: &'a serde_json::Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<Option<&'a str>, ZonecfgError> {
    match o.get(key) {
        None => Ok(None),
        Some(Value::String(s)) => Ok(Some(s)),
        Some(v) => Err(err(
            format!("{field}.{key}"),
            format!("{v} is not a string"),
        )),
    }
}

fn size(
    o: &serde_json::Map<String, Value>,
    field: &str,
    key: &str,
) -> Result<Option<Size>, ZonecfgError> {
    string(o, field, key)?
        .map(|s| {
            Size::parse(s).ok_or_else(|| {
                err(
                    format!("{field}.{key}"),
                    format!("{s:?} is not a size like 512m or 2g"),
                )
            })
        })
        .transpose()
}

use crate::zone_policy::privilege_word;

/// An SMF FMRI of a milestone or service: `svc:/` then path characters.
fn valid_fmri(s: &str) -> bool {
    s.strip_prefix("svc:/").is_some_and(|rest| {
        !rest.is_empty()
            && rest.bytes().all(|b| {
                b.is_ascii_alphanumeric() || matches!(b, b'/' | b'-' | b'_' | b'.' | b',' | b':')
            })
    })
}

fn net(v: &Value, field: &str) -> Result<Net, ZonecfgError> {
    let o = object(
        v,
        field,
        &[
            "linkname",
            "lowerLink",
            "allowedAddress",
            "configureAllowedAddress",
            "defrouter",
            "linkProtection",
            "macAddress",
        ],
    )?;
    let linkname = string(o, field, "linkname")?
        .ok_or_else(|| err(format!("{field}.linkname"), "missing; zonecfg needs a name"))?;
    if !valid_link_name(linkname) {
        return Err(err(
            format!("{field}.linkname"),
            format!(
                "{linkname:?} is not a datalink name (a letter, then letters, digits or _, ending in a digit; at most 31)"
            ),
        ));
    }
    let lower_link = match string(o, field, "lowerLink")? {
        None | Some("auto") => None,
        Some(l) if valid_link_name(l) => Some(l.to_owned()),
        Some(l) => {
            return Err(err(
                format!("{field}.lowerLink"),
                format!("{l:?} is not a datalink name or \"auto\""),
            ));
        }
    };
    let list = |key: &str| -> Result<Vec<&str>, ZonecfgError> {
        Ok(string(o, field, key)?
            .map(|s| s.split(',').collect())
            .unwrap_or_default())
    };
    let mut allowed_address = Vec::new();
    for a in list("allowedAddress")? {
        allowed_address.push(AddressPrefix::parse(a).ok_or_else(|| {
            err(
                format!("{field}.allowedAddress"),
                format!("{a:?} is not an IP address with an optional /prefix"),
            )
        })?);
    }
    let mut defrouter = Vec::new();
    for a in list("defrouter")? {
        defrouter.push(a.parse::<IpAddr>().map_err(|_| {
            err(
                format!("{field}.defrouter"),
                format!("{a:?} is not an IP address"),
            )
        })?);
    }
    if !defrouter.is_empty() && allowed_address.is_empty() {
        return Err(err(
            format!("{field}.defrouter"),
            "zonecfg takes a default router only with allowedAddress",
        ));
    }
    match string(o, field, "configureAllowedAddress")? {
        None | Some("true") => {}
        Some("false") => {
            return Err(err(
                format!("{field}.configureAllowedAddress"),
                "\"false\" cannot be mapped: illumos configures an allowed address in the zone itself",
            ));
        }
        Some(other) => {
            return Err(err(
                format!("{field}.configureAllowedAddress"),
                format!("{other:?} is not \"true\" or \"false\""),
            ));
        }
    }
    if let Some(p) = string(o, field, "linkProtection")? {
        return Err(err(
            format!("{field}.linkProtection"),
            format!(
                "{p:?} cannot be mapped: link protection is a datalink property (dladm set-linkprop -p protection), not zonecfg; allowedAddress already limits the zone to its addresses"
            ),
        ));
    }
    let mac_address = string(o, field, "macAddress")?
        .filter(|m| *m != "auto")
        .map(|m| {
            let parsed = MacAddress::parse(m).ok_or_else(|| {
                err(
                    format!("{field}.macAddress"),
                    format!("{m:?} is not a MAC address"),
                )
            })?;
            if let MacAddress::Fixed(o) = &parsed
                && o[0] & 1 == 1
            {
                return Err(err(
                    format!("{field}.macAddress"),
                    format!("{m:?} is a multicast address"),
                ));
            }
            Ok(parsed)
        })
        .transpose()?;
    Ok(Net {
        linkname: linkname.to_owned(),
        lower_link,
        allowed_address,
        defrouter,
        mac_address,
    })
}

/// Several values as one zonecfg word: `,` is a token of zonecfg's grammar, so a list is
/// quoted.
fn list_word(values: &[String]) -> String {
    match values {
        [one] => one.clone(),
        many => format!("\"{}\"", many.join(",")),
    }
}

impl ZoneConfig {
    /// Reads the runtime spec's `solaris` object.
    pub fn from_solaris(v: &Value) -> Result<ZoneConfig, ZonecfgError> {
        let f = "solaris";
        let o = object(
            v,
            f,
            &[
                "milestone",
                "limitpriv",
                "maxShmMemory",
                "anet",
                "cappedCPU",
                "cappedMemory",
            ],
        )?;
        let mut c = ZoneConfig::default();
        if let Some(cpu) = o.get("cappedCPU") {
            let field = "solaris.cappedCPU";
            let co = object(cpu, field, &["ncpus"])?;
            if let Some(n) = string(co, field, "ncpus")? {
                let ncpus = Ncpus::parse(n).ok_or_else(|| {
                    err(
                        "solaris.cappedCPU.ncpus",
                        format!("{n:?} is not a number of CPUs in (0, 1024] such as \"1.5\""),
                    )
                })?;
                if ncpus.value() < crate::zone::MIN_NCPUS {
                    return Err(err(
                        "solaris.cappedCPU.ncpus",
                        format!(
                            "{n:?} is below {}, the least capped-cpu ncpus zonecfg takes",
                            crate::zone::MIN_NCPUS
                        ),
                    ));
                }
                c.ncpus = Some(ncpus);
            }
        }
        if let Some(mem) = o.get("cappedMemory") {
            let field = "solaris.cappedMemory";
            let mo = object(mem, field, &["physical", "swap"])?;
            // zonecfg's own minimums (illumos-gate usr/src/cmd/zonecfg/zonecfg.c), refused
            // before the zone is made rather than by zonecfg.
            let at_least = |key: &str, got: Option<Size>, min: u64, shown: &str| match got {
                Some(s) if s.bytes() < min => Err(err(
                    format!("{field}.{key}"),
                    format!(
                        "{:?} is below {shown}, the least capped-memory {key} zonecfg takes",
                        s.0
                    ),
                )),
                other => Ok(other),
            };
            c.physical = at_least(
                "physical",
                size(mo, field, "physical")?,
                crate::zone::MIN_PHYSICAL,
                "1M",
            )?;
            c.swap = at_least(
                "swap",
                size(mo, field, "swap")?,
                crate::zone::MIN_SWAP,
                "50M",
            )?;
        }
        c.max_shm_memory = size(o, f, "maxShmMemory")?;
        if let Some(lp) = string(o, f, "limitpriv")? {
            for w in lp.split(',') {
                if !privilege_word(w) {
                    return Err(err(
                        "solaris.limitpriv",
                        format!(
                            "{w:?} is not a privilege name (such as default, dtrace_proc or !proc_fork)"
                        ),
                    ));
                }
                c.limitpriv.push(w.to_owned());
            }
        }
        if let Some(m) = string(o, f, "milestone")? {
            if !valid_fmri(m) {
                return Err(err(
                    "solaris.milestone",
                    format!("{m:?} is not an SMF FMRI such as svc:/milestone/multi-user"),
                ));
            }
            c.milestone = Some(m.to_owned());
        }
        if let Some(a) = o.get("anet") {
            let list = a
                .as_array()
                .ok_or_else(|| err("solaris.anet", format!("{a} is not a list")))?;
            for (i, n) in list.iter().enumerate() {
                let net = net(n, &format!("solaris.anet[{i}]"))?;
                if let Some(j) = c.nets.iter().position(|m| m.linkname == net.linkname) {
                    return Err(err(
                        format!("solaris.anet[{i}].linkname"),
                        format!("{:?} is also anet[{j}]'s name", net.linkname),
                    ));
                }
                c.nets.push(net);
            }
        }
        Ok(c)
    }

    /// The image's `solaris` section (the [`SOLARIS_LABEL`] label, JSON) under the zone
    /// manifest's limits; an image without the label gets the limits alone.
    pub fn from_image(label: Option<&str>, limits: &ResourceLimits) -> Result<Self, ZonecfgError> {
        let mut c = match label {
            None => ZoneConfig::default(),
            Some(text) => {
                let v: Value = serde_json::from_str(text).map_err(|e| {
                    err(
                        "solaris",
                        format!("the {SOLARIS_LABEL} label is not JSON: {e}"),
                    )
                })?;
                ZoneConfig::from_solaris(&v)?
            }
        };
        c.apply_limits(limits);
        Ok(c)
    }

    /// The zone manifest's caps replace the image's.
    pub fn apply_limits(&mut self, limits: &ResourceLimits) {
        if let Some(n) = limits.cpus {
            self.ncpus = Some(Ncpus::from_f64(n));
        }
        if let Some(m) = &limits.memory {
            // Checked when the manifest was loaded.
            self.physical = Some(Size(m.clone()));
        }
    }

    /// The zonecfg commands after the zone's global properties (`create`, zonepath, brand,
    /// ip-type) and before `verify` and `commit`.
    pub fn commands(&self) -> String {
        let mut s = String::new();
        if !self.limitpriv.is_empty() {
            let _ = writeln!(s, "set limitpriv=\"{}\"", self.limitpriv.join(","));
        }
        if let Some(m) = &self.max_shm_memory {
            let _ = writeln!(s, "set max-shm-memory={}", m.0);
        }
        if let Some(c) = &self.ncpus {
            let _ = writeln!(s, "add capped-cpu\nset ncpus={}\nend", c.0);
        }
        if self.physical.is_some() || self.swap.is_some() {
            let _ = writeln!(s, "add capped-memory");
            if let Some(p) = &self.physical {
                let _ = writeln!(s, "set physical={}", p.0);
            }
            if let Some(w) = &self.swap {
                let _ = writeln!(s, "set swap={}", w.0);
            }
            let _ = writeln!(s, "end");
        }
        for n in &self.nets {
            let _ = writeln!(s, "add net");
            let _ = writeln!(s, "set physical={}", n.linkname);
            if let Some(l) = &n.lower_link {
                let _ = writeln!(s, "set global-nic={l}");
            }
            if !n.allowed_address.is_empty() {
                let a: Vec<String> = n.allowed_address.iter().map(|a| a.zonecfg()).collect();
                let _ = writeln!(s, "set allowed-address={}", list_word(&a));
            }
            if !n.defrouter.is_empty() {
                let a: Vec<String> = n.defrouter.iter().map(|a| a.to_string()).collect();
                let _ = writeln!(s, "set defrouter={}", list_word(&a));
            }
            if let Some(m) = &n.mac_address {
                let _ = writeln!(s, "set mac-addr={}", m.zonecfg());
            }
            let _ = writeln!(s, "end");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_are_checked() {
        assert!(Ncpus::parse("1.5").is_some());
        for bad in ["", "0", "-1", "1.", ".5", "1e3", "2000", "x"] {
            assert!(Ncpus::parse(bad).is_none(), "{bad}");
        }
        assert_eq!(
            MacAddress::parse("2:8:20:a:b:c"),
            Some(MacAddress::Fixed([2, 8, 0x20, 0xa, 0xb, 0xc]))
        );
        for bad in [
            "zz",
            "2:8:20:a:b",
            "2:8:20:a:b:c:d",
            "002:8:20:a:b:c",
            "auto",
        ] {
            assert!(MacAddress::parse(bad).is_none(), "{bad}");
        }
        assert!(AddressPrefix::parse("10.0.0.2/24").is_some());
        assert!(AddressPrefix::parse("fd00::2/64").is_some());
        for bad in ["10.0.0.2/33", "10.0.0.2/", "host", "10.0.0/24"] {
            assert!(AddressPrefix::parse(bad).is_none(), "{bad}");
        }
        assert!(valid_link_name("net0") && valid_link_name("web_vnic1"));
        for bad in ["net", "0net", "net-0", ""] {
            assert!(!valid_link_name(bad), "{bad}");
        }
    }
}
