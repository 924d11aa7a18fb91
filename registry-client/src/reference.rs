//! Image references: `HOST[:PORT]/NAME[:TAG][@DIGEST]`, parsed once at the edge.
//!
//! The host and the name are kept in their canonical spelling ([`RegistryHost`]: lower case,
//! no trailing dot, no `:443`/`:80`, Docker Hub as `docker.io` with `library/` before a
//! one-component name), so every comparison downstream (policy rules, mirrors, credentials,
//! tokens, `certs.d`, plain HTTP for loopback hosts) sees one spelling per registry, and
//! messages print that spelling.

use std::fmt;

use reqwest::Url;
use validator::{Digest, Name, RegistryHost, Tag, canonical_repository};

/// Why a reference string was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid image reference {input:?}: {reason}")]
pub struct ReferenceError {
    /// The input (shortened).
    pub input: String,
    /// What is wrong with it.
    pub reason: String,
}

/// `registry[:port]/name[:tag][@digest]`, parsed and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reference {
    registry: RegistryHost,
    name: Name,
    tag: Option<Tag>,
    digest: Option<Digest>,
}

impl Reference {
    /// Parses a reference. The registry host is required (no implicit Docker Hub).
    pub fn parse(input: &str) -> Result<Reference, ReferenceError> {
        let err = |reason: &str| ReferenceError {
            input: input.chars().take(300).collect(),
            reason: reason.to_owned(),
        };
        let (rest, digest) = match input.split_once('@') {
            Some((r, d)) => (r, Some(Digest::parse(d).map_err(|e| err(&e.to_string()))?)),
            None => (input, None),
        };
        let Some((registry, path)) = rest.split_once('/') else {
            return Err(err(&if looks_like_host(rest) {
                format!(
                    "{rest} is a registry host without a repository: add /NAME[:TAG], as in {rest}/site/tools:1.0"
                )
            } else {
                format!(
                    "no registry host: write HOST[:PORT]/{rest}, as in localhost:5000/{rest} (there is no default registry)"
                )
            }));
        };
        if !looks_like_host(registry) {
            return Err(err(&format!(
                "{registry:?} is not a registry host (a host has a '.' or a ':port', or is localhost): write HOST[:PORT]/{rest}, as in localhost:5000/{rest} (there is no default registry)"
            )));
        }
        let registry = RegistryHost::parse(registry).map_err(|e| err(&e.to_string()))?;
        // A ':' after the last '/' separates the tag.
        let (name, tag) = match path.rsplit_once(':') {
            Some((n, t)) if !t.contains('/') => {
                (n, Some(Tag::parse(t).map_err(|e| err(&e.to_string()))?))
            }
            _ => (path, None),
        };
        let name =
            Name::parse(&canonical_repository(&registry, name)).map_err(|e| err(&e.to_string()))?;
        Ok(Reference {
            registry,
            name,
            tag,
            digest,
        })
    }

    /// A reference to `name` by digest in the same registry.
    pub fn with_digest(&self, digest: Digest) -> Reference {
        Reference {
            registry: self.registry.clone(),
            name: self.name.clone(),
            tag: None,
            digest: Some(digest),
        }
    }

    /// The same repository with `tag` and no digest.
    pub fn with_tag(&self, tag: Tag) -> Reference {
        Reference {
            registry: self.registry.clone(),
            name: self.name.clone(),
            tag: Some(tag),
            digest: None,
        }
    }

    /// The registry host (and port), canonical.
    pub fn registry(&self) -> &str {
        self.registry.as_str()
    }

    /// The registry host as its type.
    pub fn host(&self) -> &RegistryHost {
        &self.registry
    }

    /// The repository name.
    pub fn name(&self) -> &Name {
        &self.name
    }

    /// The tag, if any.
    pub fn tag(&self) -> Option<&Tag> {
        self.tag.as_ref()
    }

    /// The digest, if any.
    pub fn digest(&self) -> Option<&Digest> {
        self.digest.as_ref()
    }

    /// What goes after `/manifests/`: the digest, else the tag, else `latest`.
    pub(crate) fn manifest_ref(&self) -> String {
        match (&self.digest, &self.tag) {
            (Some(d), _) => d.to_string(),
            (None, Some(t)) => t.to_string(),
            (None, None) => "latest".to_owned(),
        }
    }
}

/// Whether the first component of a reference names a registry host, by the rule docker and
/// containerd apply: it has a `.` or a `:port`, is `localhost`, or is a bracketed IPv6
/// address. Anything else would be a repository path component, and there is no default
/// registry to put in front of it.
/// True when `s` can only be a registry host: `localhost`, a name with a `.`, `HOST:PORT`,
/// or a bracketed IPv6 address (the test the Docker reference grammar applies).
pub fn looks_like_host(s: &str) -> bool {
    if s.starts_with('[') {
        return true;
    }
    match s.rsplit_once(':') {
        Some((host, port)) => {
            !host.is_empty() && !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit())
        }
        None => s.contains('.') || s == "localhost",
    }
}

impl fmt::Display for Reference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.registry, self.name)?;
        if let Some(t) = &self.tag {
            write!(f, ":{t}")?;
        }
        if let Some(d) = &self.digest {
            write!(f, "@{d}")?;
        }
        Ok(())
    }
}

/// The canonical `HOST[:PORT]` ([`RegistryHost`]) of `host`, or `host` itself when it does not
/// parse (then nothing canonical equals it).
pub(crate) fn canonical_host(host: &str) -> String {
    RegistryHost::parse(host).map_or_else(|_| host.to_owned(), |h| h.to_string())
}

/// The registry a URL belongs to, in the canonical spelling references use: so a request to
/// `https://registry-1.docker.io/...` belongs to `docker.io`, and `http://LocalHost:5000/`
/// to `localhost:5000`.
pub(crate) fn authority(url: &Url) -> String {
    let host = url.host_str().unwrap_or("");
    canonical_host(&match url.port() {
        Some(p) => format!("{host}:{p}"),
        None => host.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references() {
        let r = Reference::parse("127.0.0.1:5000/a/b:v1").unwrap();
        assert_eq!(r.registry(), "127.0.0.1:5000");
        assert_eq!(r.name().as_str(), "a/b");
        assert_eq!(r.tag().unwrap().as_str(), "v1");
        assert_eq!(r.to_string(), "127.0.0.1:5000/a/b:v1");
        let d = Digest::sha256(b"");
        let r = Reference::parse(&format!("reg.example/x@{d}")).unwrap();
        assert_eq!(r.digest(), Some(&d));
        assert_eq!(r.manifest_ref(), d.to_string());
        assert_eq!(
            Reference::parse("reg.example/x").unwrap().manifest_ref(),
            "latest"
        );
        for (bad, says) in [
            ("site/tools:1.0", "\"site\" is not a registry host"),
            ("tools:1.0", "no registry host: write HOST[:PORT]/tools:1.0"),
            (
                "127.0.0.1:5000",
                "127.0.0.1:5000 is a registry host without a repository",
            ),
        ] {
            let e = Reference::parse(bad).unwrap_err().to_string();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!(
            Reference::parse("localhost/a").unwrap().registry(),
            "localhost"
        );
        // One spelling per registry: the canonical one is kept and printed.
        for (input, canonical) in [
            ("LOCALHOST:5000/a/b:v1", "localhost:5000/a/b:v1"),
            ("LocalHost.:05000/a/b", "localhost:5000/a/b"),
            (
                "Reg.Example:443/a@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
                "reg.example/a@sha256:e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
            ),
            ("index.docker.io/nginx:1.25", "docker.io/library/nginx:1.25"),
            ("registry-1.docker.io/team/app", "docker.io/team/app"),
            ("docker.io/library/nginx", "docker.io/library/nginx"),
            ("[0:0:0:0:0:0:0:1]:5000/a", "[::1]:5000/a"),
        ] {
            let r = Reference::parse(input).unwrap();
            assert_eq!(r.to_string(), canonical, "{input}");
            assert_eq!(Reference::parse(canonical).unwrap(), r, "{input}");
        }
        let e = Reference::parse("127.1:5000/a").unwrap_err().to_string();
        assert!(e.contains("dotted-quad IPv4"), "{e}");
        let e = Reference::parse("reg..example/a").unwrap_err().to_string();
        assert!(e.contains("no empty label"), "{e}");
        for bad in [
            "noslash",
            "/x",
            "reg/UPPER",
            "reg/x:-bad",
            "reg/x@sha256:abc",
            "re g/x",
        ] {
            assert!(Reference::parse(bad).is_err(), "{bad}");
        }
    }
}
