//! What the node's operator lets an image's `solaris` label ask for (`[zones]` in worker.toml):
//! [`ZonePolicy`], its address ranges ([`IpRange`]) and the name rules of datalinks and
//! privileges. The loader (`config`) checks the keys with these rules and the zonecfg mapping
//! (`provision::zonecfg`) enforces the policy; it imports nothing else of the crate.

/// What an image's `solaris` section may ask for beyond the defaults (`[zones]` in
/// worker.toml). The default allows no escalation: `limitpriv` may name `default` (illumos's
/// default zone privilege set) or its subset `basic` and take privileges away (`!name`), but
/// names no other privilege or set; no `lowerLink` but `auto`; no `allowedAddress`; no
/// `macAddress` but `auto`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZonePolicy {
    /// Privileges and sets (such as `dtrace_proc`, `all`) `limitpriv` may add, lower case.
    pub allowed_privileges: Vec<String>,
    /// Datalinks an `anet` may be made over (`lowerLink`).
    pub allowed_lower_links: Vec<String>,
    /// Ranges (`10.0.0.0/24`) every `allowedAddress` must lie within.
    pub allowed_address_ranges: Vec<IpRange>,
    /// Whether an `anet` may set its `macAddress` (`factory`, `random` or a fixed address).
    pub allow_mac_address: bool,
}

/// An address range (`10.0.0.0/24`, `fd00::/48`) of `zones.allowed_address_ranges`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    /// The range's address.
    pub addr: std::net::IpAddr,
    /// Its prefix length.
    pub prefix: u8,
}

impl IpRange {
    /// Checks `s`: an address, `/` and a prefix length.
    pub fn parse(s: &str) -> Option<IpRange> {
        let (a, p) = s.split_once('/')?;
        let addr: std::net::IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let prefix = p.parse::<u8>().ok().filter(|n| *n <= max)?;
        Some(IpRange { addr, prefix })
    }

    /// Whether `addr` with `prefix` (none: the address alone) lies within the range: the same
    /// family, a prefix no wider than the range's, and the range's leading bits.
    pub fn contains(&self, addr: std::net::IpAddr, prefix: Option<u8>) -> bool {
        use std::net::IpAddr;
        let bits = |a: &IpAddr| -> (u128, u8) {
            match a {
                IpAddr::V4(v) => (u128::from(u32::from(*v)), 32),
                IpAddr::V6(v) => (u128::from(*v), 128),
            }
        };
        let ((a, max), (r, rmax)) = (bits(&addr), bits(&self.addr));
        if max != rmax || prefix.unwrap_or(max) < self.prefix {
            return false;
        }
        let shift = u32::from(max - self.prefix);
        let high = |x: u128| if shift >= 128 { 0 } else { x >> shift };
        high(a) == high(r)
    }
}

/// A datalink name: letters, digits and `_`, starting with a letter and ending with a digit,
/// at most 31 bytes (illumos `MAXLINKNAMELEN` less the NUL).
pub fn valid_link_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 31
        && b[0].is_ascii_alphabetic()
        && b[b.len() - 1].is_ascii_digit()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// A privilege word of `limitpriv`: a name of letters, digits and `_`, optionally negated.
pub(crate) fn privilege_word(w: &str) -> bool {
    let n = w.strip_prefix('!').unwrap_or(w);
    !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}
