//! Platforms: which operating systems and architectures an image may name.

use std::fmt;

/// `GOOS` values (the OCI spec says platforms SHOULD use them). illumos images use `illumos`;
/// `solaris` is accepted on read.
pub const KNOWN_OS: &[&str] = &[
    "aix",
    "android",
    "darwin",
    "dragonfly",
    "freebsd",
    "hurd",
    "illumos",
    "ios",
    "js",
    "linux",
    "nacl",
    "netbsd",
    "openbsd",
    "plan9",
    "solaris",
    "wasip1",
    "windows",
    "zos",
];

/// `GOARCH` values.
pub const KNOWN_ARCH: &[&str] = &[
    "386",
    "amd64",
    "amd64p32",
    "arm",
    "armbe",
    "arm64",
    "arm64be",
    "loong64",
    "mips",
    "mipsle",
    "mips64",
    "mips64le",
    "mips64p32",
    "mips64p32le",
    "ppc",
    "ppc64",
    "ppc64le",
    "riscv",
    "riscv64",
    "s390",
    "s390x",
    "sparc",
    "sparc64",
    "wasm",
];

/// A platform as named by an index entry or an image config.
#[derive(Debug, Clone, PartialEq, Eq, Default, serde::Serialize)]
pub struct Platform {
    /// Operating system (`illumos`).
    pub os: String,
    /// CPU architecture (`amd64`).
    pub architecture: String,
    /// Architecture variant.
    pub variant: Option<String>,
    /// OS version (for illumos: the distribution release the userland was built for).
    pub os_version: Option<String>,
    /// OS features.
    pub os_features: Vec<String>,
}

impl Platform {
    /// The platform illumos zones use: `illumos/amd64`.
    pub fn illumos_amd64() -> Self {
        Platform {
            os: "illumos".into(),
            architecture: "amd64".into(),
            ..Platform::default()
        }
    }

    /// Parses `os/arch[/variant]`.
    pub fn parse(s: &str) -> Option<Self> {
        let mut parts = s.split('/');
        let os = parts.next().filter(|p| !p.is_empty())?;
        let architecture = parts.next().filter(|p| !p.is_empty())?;
        let variant = parts.next().map(str::to_owned);
        if parts.next().is_some() {
            return None;
        }
        Some(Platform {
            os: os.into(),
            architecture: architecture.into(),
            variant,
            ..Platform::default()
        })
    }

    /// True when `self` (a wanted platform) is satisfied by `other` (what an image offers):
    /// same OS family (`solaris` accepted for `illumos`), same architecture, same variant when
    /// one is wanted, and the same `os.version` when one is wanted.
    pub fn matches(&self, other: &Platform) -> bool {
        let os_ok = self.os == other.os || (self.os == "illumos" && other.os == "solaris");
        os_ok
            && self.architecture == other.architecture
            && (self.variant.is_none() || self.variant == other.variant)
            && (self.os_version.is_none() || self.os_version == other.os_version)
    }
}

impl fmt::Display for Platform {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.os, self.architecture)?;
        if let Some(v) = &self.variant {
            write!(f, "/{v}")?;
        }
        if let Some(v) = &self.os_version {
            write!(f, " (os.version {v})")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_and_match() {
        let want = Platform::parse("illumos/amd64").unwrap();
        assert_eq!(want, Platform::illumos_amd64());
        let mut solaris = Platform::parse("solaris/amd64").unwrap();
        assert!(want.matches(&solaris));
        solaris.architecture = "arm64".into();
        assert!(!want.matches(&solaris));
        assert!(Platform::parse("linux").is_none());
        assert!(Platform::parse("a/b/c/d").is_none());
        assert_eq!(
            Platform::parse("linux/arm/v7").unwrap().to_string(),
            "linux/arm/v7"
        );
    }
}
