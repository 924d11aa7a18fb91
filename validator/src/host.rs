//! Registry hosts in their one canonical spelling, and the canonical repository of an image.
//!
//! Every part of the toolchain that matches or compares registries (admission policy rules,
//! worker mirrors, credential lookup, credential-provider patterns, sync endpoints, the
//! client's choice of plain HTTP for loopback hosts) compares [`RegistryHost`]s, so two
//! spellings of one registry can never select different rules. The rules:
//!
//! - The name is lower case (DNS names are case-insensitive): `LocalHost:5000` is
//!   `localhost:5000`.
//! - One trailing `.` (a fully qualified DNS name) is removed: `reg.example.` is
//!   `reg.example`. An empty label (`a..b`, `.a`) is refused.
//! - The default ports are removed: `:443` (HTTPS, how every registry is reached unless it is
//!   a loopback host or `plain_http` is set) and `:80` (plain HTTP, how loopback hosts and
//!   `plain_http` registries are reached). Both spellings name the same server for the scheme
//!   the client uses, and merging them can never let one spelling dodge a rule written for
//!   the other. The one setup that cannot be named is TLS on port 80 or plain HTTP on
//!   port 443. A single-label host keeps its port (`myhost:443`), because without it
//!   `myhost` would read as a repository path component, not as a host.
//! - Docker Hub's spellings `docker.io`, `index.docker.io` and `registry-1.docker.io` are all
//!   `docker.io` ([`DOCKER_HUB`]); the client connects to `registry-1.docker.io`
//!   ([`RegistryHost::endpoint`]). A one-component repository there gets `library/`
//!   ([`canonical_repository`]): `docker.io/nginx` is `docker.io/library/nginx`.
//! - An IPv6 literal stays in brackets, written as RFC 5952 prints it (lower case, zeros
//!   compressed): `[0:0:0:0:0:0:0:1]:5000` is `[::1]:5000`. Zone ids (`%eth0`) are refused.
//!   An IPv4-mapped address is the IPv4 host it maps to: `[::ffff:127.0.0.1]:5000` and
//!   `[::FFFF:7f00:1]:5000` are `127.0.0.1:5000` (IPv4-compatible `[::127.0.0.1]` and NAT64
//!   `[64:ff9b::…]` addresses are other hosts and stay IPv6).
//! - A host whose last label is numeric must be a dotted-quad IPv4 address (`127.0.0.1`);
//!   the other forms resolvers accept for an address (`127.1`, `0x7f.0.0.1`, `2130706433`)
//!   are refused rather than given a second canonical spelling.
//! - A port is 1 to 65535, written without leading zeros (`:05000` is `:5000`).
//!
//! Repository paths need no such rules: [`crate::Name`] accepts lower case only.

use std::borrow::Cow;
use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

/// Docker Hub's canonical host.
pub const DOCKER_HUB: &str = "docker.io";

/// The spellings of Docker Hub's host that mean [`DOCKER_HUB`].
const DOCKER_HUB_ALIASES: [&str; 3] = ["docker.io", "index.docker.io", "registry-1.docker.io"];

/// Where the client connects for [`DOCKER_HUB`] (its registry API is served there).
const DOCKER_HUB_ENDPOINT: &str = "registry-1.docker.io";

/// Longest host name (RFC 1035).
const MAX_HOST_LEN: usize = 253;

/// A registry host could not be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid registry host {input:?}: {reason}")]
pub struct HostError {
    /// The rejected input (shortened when long).
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// A registry `HOST[:PORT]` in its canonical spelling (see the module docs).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RegistryHost {
    text: String,
    /// Byte length of the host part (`text[..host_len]`); the rest is `:PORT` or empty.
    host_len: usize,
    port: Option<u16>,
}

impl RegistryHost {
    /// Checks `HOST[:PORT]` and returns its canonical spelling.
    pub fn parse(input: &str) -> Result<RegistryHost, HostError> {
        let err = |reason: String| HostError {
            input: input.chars().take(300).collect(),
            reason,
        };
        if input.is_empty() {
            return Err(err("empty".into()));
        }
        if let Some(rest) = input.strip_prefix('[') {
            let Some((addr, after)) = rest.split_once(']') else {
                return Err(err("an IPv6 address has no closing ']'".into()));
            };
            let ip: Ipv6Addr = addr.parse().map_err(|_| {
                err(format!(
                    "[{addr}] is not an IPv6 address (zone ids such as %eth0 are not accepted)"
                ))
            })?;
            let port = match after {
                "" => None,
                p => Some(
                    parse_port(p.strip_prefix(':').ok_or_else(|| {
                        err(format!(
                            "{after:?} after the IPv6 address: only :PORT may follow"
                        ))
                    })?)
                    .map_err(err)?,
                ),
            };
            // An IPv4-mapped address (`::ffff:a.b.c.d`) reaches the IPv4 host it maps to
            // (a dual-stack socket connects over IPv4), so it is spelled as that host: a
            // rule written for `127.0.0.1:5000` must catch `[::ffff:127.0.0.1]:5000` too.
            if let Some(v4) = ip.to_ipv4_mapped() {
                return Ok(RegistryHost::assemble(v4.to_string(), port, true));
            }
            return Ok(RegistryHost::assemble(format!("[{ip}]"), port, true));
        }
        let (name, port) = match input.rsplit_once(':') {
            Some((n, _)) if n.contains(':') => {
                return Err(err(
                    "an IPv6 address is written in brackets, as in [::1]:5000".into(),
                ));
            }
            Some((n, p)) => (n, Some(parse_port(p).map_err(err)?)),
            None => (input, None),
        };
        let name = name.strip_suffix('.').unwrap_or(name);
        if name.is_empty() {
            return Err(err("no host name before the port".into()));
        }
        if name.len() > MAX_HOST_LEN {
            return Err(err(format!("longer than {MAX_HOST_LEN} characters")));
        }
        let name = name.to_ascii_lowercase();
        let labels: Vec<&str> = name.split('.').collect();
        for label in &labels {
            let ok = !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-');
            if !ok {
                return Err(err(format!(
                    "{label:?} is not a host name label (letters, digits and inner '-', 1 to 63 characters, no empty label)"
                )));
            }
        }
        let last = labels[labels.len() - 1];
        let numeric = last.bytes().all(|b| b.is_ascii_digit())
            || last
                .strip_prefix("0x")
                .is_some_and(|h| h.bytes().all(|b| b.is_ascii_hexdigit()));
        if numeric && name.parse::<Ipv4Addr>().is_err() {
            return Err(err(
                "a numeric host must be a dotted-quad IPv4 address such as 127.0.0.1".into(),
            ));
        }
        let dotted = labels.len() > 1 || name == "localhost";
        if !dotted && port.is_none() {
            return Err(err(format!(
                "{name:?} alone reads as a repository path component: a host has a '.' or a ':port', or is localhost"
            )));
        }
        if DOCKER_HUB_ALIASES.contains(&name.as_str()) && matches!(port, None | Some(443 | 80)) {
            return Ok(RegistryHost::assemble(DOCKER_HUB.to_owned(), None, true));
        }
        Ok(RegistryHost::assemble(name, port, dotted))
    }

    fn assemble(host: String, port: Option<u16>, may_drop_default: bool) -> RegistryHost {
        let port = port.filter(|p| !(may_drop_default && matches!(p, 443 | 80)));
        let host_len = host.len();
        let text = match port {
            Some(p) => format!("{host}:{p}"),
            None => host,
        };
        RegistryHost {
            text,
            host_len,
            port,
        }
    }

    /// `HOST[:PORT]`, canonical.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The host without the port (an IPv6 address keeps its brackets).
    pub fn hostname(&self) -> &str {
        &self.text[..self.host_len]
    }

    /// The port, when it is not a default one.
    pub fn port(&self) -> Option<u16> {
        self.port
    }

    /// True for Docker Hub ([`DOCKER_HUB`]).
    pub fn is_docker_hub(&self) -> bool {
        self.text == DOCKER_HUB
    }

    /// True for `localhost`, 127.0.0.0/8 and `::1` (also as `::ffff:127.x.y.z`): the hosts
    /// the client reaches over plain HTTP unless TLS is configured. Decided on the parsed
    /// address, so `127.example.com` is not loopback.
    pub fn is_loopback(&self) -> bool {
        let h = self.hostname();
        if h == "localhost" {
            return true;
        }
        if let Some(v6) = h.strip_prefix('[').and_then(|s| s.strip_suffix(']')) {
            return v6.parse::<Ipv6Addr>().is_ok_and(|ip| {
                ip.is_loopback() || ip.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
            });
        }
        h.parse::<Ipv4Addr>().is_ok_and(|ip| ip.is_loopback())
    }

    /// `HOST[:PORT]` the client connects to: the canonical host, except Docker Hub, whose
    /// registry API is at `registry-1.docker.io`.
    pub fn endpoint(&self) -> &str {
        if self.is_docker_hub() {
            DOCKER_HUB_ENDPOINT
        } else {
            &self.text
        }
    }
}

fn parse_port(p: &str) -> Result<u16, String> {
    if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
        return Err(format!("port {p:?} is not a number from 1 to 65535"));
    }
    // Leading zeros name the same port (`:005000` is `:5000`), however many there are.
    let digits = p.trim_start_matches('0');
    if digits.len() > 5 {
        return Err(format!("port {p:?} is not a number from 1 to 65535"));
    }
    match digits.parse::<u16>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("port {p:?} is not a number from 1 to 65535")),
    }
}

impl fmt::Display for RegistryHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for RegistryHost {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "RegistryHost({})", self.text)
    }
}

/// The canonical repository path of `path` at `host`: Docker Hub's one-component names get
/// `library/` (`nginx` is `library/nginx`); every other path is returned as it is.
pub fn canonical_repository<'a>(host: &RegistryHost, path: &'a str) -> Cow<'a, str> {
    if host.is_docker_hub() && !path.contains('/') {
        Cow::Owned(format!("library/{path}"))
    } else {
        Cow::Borrowed(path)
    }
}

/// The canonical spelling of an image name or reference `HOST[:PORT]/PATH[:TAG][@DIGEST]`
/// for matching: the host as [`RegistryHost`] spells it and the path as
/// [`canonical_repository`] does; the rest is kept. Total, so a matcher always has a name to
/// match: when the host does not parse, the text is returned lower-cased (no canonical name
/// ever equals it unless written the same way). References parsed by the client are already
/// canonical.
pub fn canonical_name(reference: &str) -> Cow<'_, str> {
    let Some((host, rest)) = reference.split_once('/') else {
        return lower(reference);
    };
    let Ok(h) = RegistryHost::parse(host) else {
        return lower(reference);
    };
    let rest = if h.is_docker_hub() {
        // The repository ends at a ':' (tag) or '@' (digest) after its last '/'.
        let repo_end = rest.find(['@', ':']).unwrap_or(rest.len());
        if rest[..repo_end].contains('/') {
            Cow::Borrowed(rest)
        } else {
            Cow::Owned(format!("library/{rest}"))
        }
    } else {
        Cow::Borrowed(rest)
    };
    if h.as_str() == host && matches!(rest, Cow::Borrowed(_)) {
        return Cow::Borrowed(reference);
    }
    Cow::Owned(format!("{h}/{rest}"))
}

fn lower(s: &str) -> Cow<'_, str> {
    if s.bytes().any(|b| b.is_ascii_uppercase()) {
        Cow::Owned(s.to_ascii_lowercase())
    } else {
        Cow::Borrowed(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn canon(s: &str) -> String {
        RegistryHost::parse(s)
            .unwrap_or_else(|e| panic!("{s}: {e}"))
            .to_string()
    }

    #[test]
    fn every_spelling_of_one_host_is_one_canonical_host() {
        for (variants, canonical) in [
            (
                &[
                    "localhost:5000",
                    "LOCALHOST:5000",
                    "LocalHost:5000",
                    "localhost.:5000",
                    "localhost:05000",
                ][..],
                "localhost:5000",
            ),
            (
                &[
                    "reg.example",
                    "REG.Example",
                    "reg.example:443",
                    "reg.example.:443",
                    "reg.example:80",
                    "Reg.Example.",
                ][..],
                "reg.example",
            ),
            (
                &[
                    "docker.io",
                    "index.docker.io",
                    "registry-1.docker.io",
                    "Docker.IO",
                    "index.docker.io:443",
                    "docker.io.",
                ][..],
                "docker.io",
            ),
            (
                &["[::1]:5000", "[0:0:0:0:0:0:0:1]:5000", "[0::1]:5000"][..],
                "[::1]:5000",
            ),
            (&["[FE80::A]", "[fe80::a]:443"][..], "[fe80::a]"),
            (
                &[
                    "127.0.0.1:5000",
                    "[::ffff:127.0.0.1]:5000",
                    "[::FFFF:7f00:1]:5000",
                    "[0:0:0:0:0:ffff:7f00:0001]:05000",
                ][..],
                "127.0.0.1:5000",
            ),
            (&["10.1.2.3", "[::ffff:10.1.2.3]:443"][..], "10.1.2.3"),
            (&["myhost:443", "MYHOST:443"][..], "myhost:443"),
            (&["localhost:443", "localhost"][..], "localhost"),
        ] {
            for v in variants {
                assert_eq!(canon(v), canonical, "{v}");
            }
            // The canonical spelling is its own canonical spelling.
            assert_eq!(canon(canonical), canonical);
        }
        // Other ports and other hosts stay apart.
        assert_eq!(canon("reg.example:8443"), "reg.example:8443");
        assert_eq!(canon("docker.io:5000"), "docker.io:5000");
        assert_ne!(canon("reg.example"), canon("reg.example.com"));
    }

    #[test]
    fn bad_hosts_are_refused_with_the_reason() {
        for (bad, says) in [
            ("", "empty"),
            ("::1", "IPv6 address is written in brackets"),
            ("[::1", "no closing ']'"),
            ("[::1%eth0]", "zone ids"),
            ("[::1]x", "only :PORT may follow"),
            ("[nothex]", "is not an IPv6 address"),
            ("reg.example:0", "1 to 65535"),
            ("reg.example:65536", "1 to 65535"),
            ("reg.example:", "1 to 65535"),
            ("reg.example:http", "1 to 65535"),
            ("a..b", "no empty label"),
            (".a.b", "no empty label"),
            ("a.b..", "no empty label"),
            ("-a.b", "inner '-'"),
            ("a_b.example", "is not a host name label"),
            (":5000", "no host name"),
            ("127.1:5000", "dotted-quad"),
            ("0x7f.0.0.1", "dotted-quad"),
            ("127.0.0.01", "dotted-quad"),
            ("2130706433:5000", "dotted-quad"),
            ("1.2.3.4.5", "dotted-quad"),
            ("reg", "a host has a '.' or a ':port'"),
            ("reg.", "a host has a '.' or a ':port'"),
        ] {
            let e = RegistryHost::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
        assert!(RegistryHost::parse(&format!("{}.example", "a".repeat(64))).is_err());
    }

    #[test]
    fn loopback_is_decided_on_the_address() {
        for h in [
            "localhost",
            "LOCALHOST:5000",
            "localhost.:5000",
            "127.0.0.1:5000",
            "127.9.8.7",
            "[::1]:5000",
            "[0:0:0:0:0:0:0:1]",
            "[::ffff:127.0.0.1]:5000",
        ] {
            assert!(RegistryHost::parse(h).unwrap().is_loopback(), "{h}");
        }
        for h in [
            "127.example.com:5000",
            "localhost.example",
            "reg.example:443",
            "[::2]",
            "10.0.0.1:5000",
        ] {
            assert!(!RegistryHost::parse(h).unwrap().is_loopback(), "{h}");
        }
    }

    #[test]
    fn parts_and_endpoint() {
        let h = RegistryHost::parse("[::1]:5000").unwrap();
        assert_eq!((h.hostname(), h.port()), ("[::1]", Some(5000)));
        let d = RegistryHost::parse("index.docker.io").unwrap();
        assert!(d.is_docker_hub());
        assert_eq!(d.endpoint(), "registry-1.docker.io");
        assert_eq!(canonical_repository(&d, "nginx"), "library/nginx");
        assert_eq!(canonical_repository(&d, "team/app"), "team/app");
        let r = RegistryHost::parse("reg.example").unwrap();
        assert_eq!(r.endpoint(), "reg.example");
        assert_eq!(canonical_repository(&r, "nginx"), "nginx");
    }

    #[test]
    fn names_for_matching() {
        for (input, canonical) in [
            ("LOCALHOST:5000/app:1", "localhost:5000/app:1"),
            ("localhost:5000/app:1", "localhost:5000/app:1"),
            ("reg.example:443/a/b@sha256:00", "reg.example/a/b@sha256:00"),
            ("docker.io/nginx", "docker.io/library/nginx"),
            ("index.docker.io/nginx:1.25", "docker.io/library/nginx:1.25"),
            (
                "registry-1.docker.io/nginx@sha256:00",
                "docker.io/library/nginx@sha256:00",
            ),
            ("docker.io/library/nginx", "docker.io/library/nginx"),
            ("Docker.io/team/app:v1", "docker.io/team/app:v1"),
            ("[0::1]:5000/app", "[::1]:5000/app"),
            // Not a host: lower-cased, matched as written.
            ("NoHost/App", "nohost/app"),
            ("plain", "plain"),
        ] {
            assert_eq!(canonical_name(input), canonical, "{input}");
        }
    }
}
