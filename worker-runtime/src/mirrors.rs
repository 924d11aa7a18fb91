//! Registry mirrors (`[[mirrors]]` in worker.toml, containerd's `hosts.toml` idea): for an
//! origin registry host, other registries to try first, in order, before the origin.
//!
//! A mirror is `HOST[:PORT][/PREFIX]`: the origin's `NAME` is looked up as `PREFIX/NAME` there
//! (what `rdctl sync central:5000 site:5000/central` or a pull-through prefix produce). Every
//! manifest, config and layer is verified against its digest whichever registry served it, so
//! a mirror can at worst fail (down, missing content, wrong bytes), and the next source is
//! tried. Tags are the exception: a digest cannot check what a tag names, so a mirror resolves
//! tags only with `resolve_tags = true` (the default, as containerd's `resolve` capability);
//! with `false` tags are resolved at the origin and only content comes from mirrors.
//!
//! Hosts are kept and compared in their canonical spelling ([`RegistryHost`]), as references
//! are: a `[[mirrors]]` entry for `Central.Example:443` serves zones that write
//! `central.example`, and the other way round.

use std::sync::atomic::{AtomicBool, Ordering};

use registry_client::Reference;
use validator::RegistryHost;

/// One mirror endpoint: a registry host and an optional repository prefix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MirrorEndpoint {
    /// `HOST[:PORT]`, canonical.
    pub host: RegistryHost,
    /// Repository prefix (no leading or trailing `/`).
    pub prefix: Option<String>,
}

impl MirrorEndpoint {
    /// Parses `HOST[:PORT][/PREFIX]`; the error says what is wrong.
    pub fn parse(s: &str) -> Result<MirrorEndpoint, String> {
        let s = s.trim_end_matches('/');
        let (host, prefix) = match s.split_once('/') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        if host.starts_with('.') || !registry_client::looks_like_host(host) {
            return Err(format!(
                "{host:?} is not a registry host (HOST[:PORT][/PREFIX], a host has a '.' or a ':port', or is localhost)"
            ));
        }
        let host = RegistryHost::parse(host).map_err(|e| e.to_string())?;
        if let Some(p) = prefix {
            validator::Name::parse(p).map_err(|e| format!("prefix {p:?}: {e}"))?;
        }
        Ok(MirrorEndpoint {
            host,
            prefix: prefix.map(str::to_owned),
        })
    }
}

/// The mirrors of one origin registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mirror {
    /// The origin's `HOST[:PORT]`, canonical (zone manifests may spell it any way).
    pub registry: RegistryHost,
    /// Tried in order before the origin.
    pub endpoints: Vec<MirrorEndpoint>,
    /// Whether the mirrors may resolve tags.
    pub resolve_tags: bool,
}

/// Where one reference can be read from: mirrors first, the origin last.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Source {
    /// The reference at this source (same tag and digest, name under the mirror's prefix).
    pub reference: Reference,
    /// True for a mirror, false for the origin.
    pub mirror: bool,
    /// Whether this source may resolve tags.
    pub resolves_tags: bool,
}

/// Every `[[mirrors]]` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Mirrors(pub Vec<Mirror>);

/// The sources of one pull (resolve, then fetch): a mirror that was down or served bytes
/// that did not verify is set aside and not asked again by the same pull.
#[derive(Debug)]
pub struct Sources {
    list: Vec<Source>,
    aside: Vec<AtomicBool>,
    /// `pull_policy = "Never"`: documents and blobs come only from the content store.
    local_only: bool,
}

impl Sources {
    /// The sources still worth asking, in order, with their positions (the origin always is).
    pub fn usable(&self) -> impl Iterator<Item = (usize, &Source)> {
        self.list
            .iter()
            .enumerate()
            .filter(|(i, s)| !s.mirror || !self.aside[*i].load(Ordering::Relaxed))
    }

    /// Sets the mirror at `i` aside for the rest of the pull.
    pub fn set_aside(&self, i: usize) {
        if let Some(a) = self.aside.get(i) {
            a.store(true, Ordering::Relaxed);
        }
    }

    /// The origin (the reference as written).
    pub fn origin(&self) -> &Reference {
        &self.list[self.list.len() - 1].reference
    }

    /// True when nothing may be fetched: the image must already be in the content store
    /// (`pull_policy = "Never"`).
    pub fn local_only(&self) -> bool {
        self.local_only
    }

    /// The same sources, reading only the content store (`pull_policy = "Never"`); the
    /// sources stay known for reading signatures.
    pub fn into_local_only(mut self) -> Sources {
        self.local_only = true;
        self
    }
}

impl Mirrors {
    /// The sources of `r` for one pull: its registry's mirrors in order, then the origin.
    pub fn for_pull(&self, r: &Reference) -> Sources {
        let list = self.sources(r);
        let aside = list.iter().map(|_| AtomicBool::new(false)).collect();
        Sources {
            list,
            aside,
            local_only: false,
        }
    }

    /// The sources of `r`: its registry's mirrors in order, then the origin.
    pub fn sources(&self, r: &Reference) -> Vec<Source> {
        let mut out = Vec::new();
        for m in self.0.iter().filter(|m| &m.registry == r.host()) {
            for e in &m.endpoints {
                let name = match &e.prefix {
                    Some(p) => format!("{p}/{}", r.name()),
                    None => r.name().to_string(),
                };
                let mut text = format!("{}/{name}", e.host);
                if let Some(t) = r.tag() {
                    text.push(':');
                    text.push_str(t.as_str());
                }
                if let Some(d) = r.digest() {
                    text.push('@');
                    text.push_str(d.as_str());
                }
                match Reference::parse(&text) {
                    Ok(reference) => out.push(Source {
                        reference,
                        mirror: true,
                        resolves_tags: m.resolve_tags,
                    }),
                    // A prefix that makes the name too long for this one reference.
                    Err(e) => {
                        tracing::warn!(mirror = %e.input, error = %e.reason, "mirror skipped")
                    }
                }
            }
        }
        out.push(Source {
            reference: r.clone(),
            mirror: false,
            resolves_tags: true,
        });
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mirrors_come_first_with_the_prefix_then_the_origin() {
        let mirrors = Mirrors(vec![
            Mirror {
                registry: RegistryHost::parse("Central.Example.:5000").unwrap(),
                endpoints: vec![
                    MirrorEndpoint::parse("SITE.example:5000/central").unwrap(),
                    MirrorEndpoint::parse("127.0.0.1:5001").unwrap(),
                ],
                resolve_tags: false,
            },
            Mirror {
                registry: RegistryHost::parse("other.example:443").unwrap(),
                endpoints: vec![MirrorEndpoint::parse("x.example").unwrap()],
                resolve_tags: true,
            },
        ]);
        let r = Reference::parse("central.example:5000/zones/base:1.0").unwrap();
        let s: Vec<(String, bool, bool)> = mirrors
            .sources(&r)
            .into_iter()
            .map(|s| (s.reference.to_string(), s.mirror, s.resolves_tags))
            .collect();
        assert_eq!(
            s,
            vec![
                (
                    "site.example:5000/central/zones/base:1.0".to_owned(),
                    true,
                    false
                ),
                ("127.0.0.1:5001/zones/base:1.0".to_owned(), true, false),
                (
                    "central.example:5000/zones/base:1.0".to_owned(),
                    false,
                    true
                ),
            ]
        );
        let pull = mirrors.for_pull(&r);
        pull.set_aside(0);
        let left: Vec<usize> = pull.usable().map(|(i, _)| i).collect();
        assert_eq!(left, vec![1, 2]);
        assert_eq!(pull.origin(), &r);
        let elsewhere = Reference::parse("third.example/zones/base:1.0").unwrap();
        assert_eq!(mirrors.sources(&elsewhere).len(), 1);
        // Every spelling of the origin finds its mirrors; other ports do not.
        for (origin, mirrored) in [
            ("central.example:5000/zones/base:1.0", true),
            ("CENTRAL.example:5000/zones/base:1.0", true),
            ("central.example.:05000/zones/base:1.0", true),
            ("Other.Example/zones/base:1.0", true),
            ("other.example:443/zones/base:1.0", true),
            ("other.example.:80/zones/base:1.0", true),
            ("central.example:5001/zones/base:1.0", false),
            ("other.example:8443/zones/base:1.0", false),
        ] {
            let r = Reference::parse(origin).unwrap();
            assert_eq!(mirrors.sources(&r).len() > 1, mirrored, "{origin}");
        }
        for bad in [
            "./x",
            "noport",
            "h.example/UPPER",
            "h..example",
            "127.1:5000",
        ] {
            assert!(MirrorEndpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
