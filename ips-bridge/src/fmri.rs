//! Package FMRIs (`pkg://publisher/stem@version`) and pkg's URL and path escaping.

use std::fmt;
use std::str::FromStr;

use crate::version::{Version, VersionError};

/// Why an FMRI did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FmriError {
    /// The package name (stem) is missing or has characters pkg does not allow.
    #[error("invalid package name {stem:?} in fmri {fmri:?}")]
    Stem {
        /// The offending stem.
        stem: String,
        /// The whole FMRI.
        fmri: String,
    },
    /// The publisher is empty or not hostname-like.
    #[error("invalid publisher {publisher:?} in fmri {fmri:?}")]
    Publisher {
        /// The offending publisher.
        publisher: String,
        /// The whole FMRI.
        fmri: String,
    },
    /// The part after the last `@` is not a version.
    #[error("invalid version in fmri {fmri:?}")]
    Version {
        /// The whole FMRI.
        fmri: String,
        /// Why the version failed.
        #[source]
        source: VersionError,
    },
}

/// A package FMRI: optional publisher, stem and optional version.
///
/// Equality and ordering compare publisher, stem and version; the version ignores its build
/// part (see [`Version`]).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fmri {
    publisher: Option<String>,
    stem: String,
    version: Option<Version>,
}

impl Fmri {
    /// Builds an FMRI from parts, checking the stem and publisher.
    pub fn new(
        publisher: Option<&str>,
        stem: &str,
        version: Option<Version>,
    ) -> Result<Self, FmriError> {
        let fmri = stem.to_owned();
        if let Some(p) = publisher
            && !valid_publisher(p)
        {
            return Err(FmriError::Publisher {
                publisher: p.to_owned(),
                fmri,
            });
        }
        if !valid_stem(stem) {
            return Err(FmriError::Stem {
                stem: stem.to_owned(),
                fmri,
            });
        }
        Ok(Self {
            publisher: publisher.map(str::to_owned),
            stem: stem.to_owned(),
            version,
        })
    }

    /// Parses the forms pkg accepts: `pkg://pub/stem@ver`, `pkg:/stem@ver`, `//pub/stem`,
    /// `/stem` and bare `stem`. The version starts after the last `@`; trailing white space
    /// is dropped first, as pkg's `PkgFmri` does.
    ///
    /// One deliberate difference: pkg's `PkgFmri` takes any text up to the `/` as the
    /// publisher, while here it must be a valid publisher name ([`valid_publisher`]), the
    /// rule pkg applies when a publisher is configured.
    pub fn parse(s: &str) -> Result<Self, FmriError> {
        let s = s.trim_end_matches(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c));
        let (body, version) = match s.rfind('@') {
            Some(i) => {
                let v = Version::parse(&s[i + 1..]).map_err(|source| FmriError::Version {
                    fmri: s.to_owned(),
                    source,
                })?;
                (&s[..i], Some(v))
            }
            None => (s, None),
        };
        let with_pub = body
            .strip_prefix("pkg://")
            .or_else(|| body.strip_prefix("//"));
        let (publisher, stem) = if let Some(rest) = with_pub {
            match rest.split_once('/') {
                Some((p, stem)) => (Some(p), stem),
                None => (Some(rest), ""),
            }
        } else {
            let stem = body
                .strip_prefix("pkg:/")
                .or_else(|| body.strip_prefix('/'))
                .unwrap_or(body);
            (None, stem)
        };
        // pkg treats an empty publisher (`pkg:///stem`) as no publisher.
        let publisher = publisher.filter(|p| !p.is_empty());
        if let Some(p) = publisher
            && !valid_publisher(p)
        {
            return Err(FmriError::Publisher {
                publisher: p.to_owned(),
                fmri: s.to_owned(),
            });
        }
        if !valid_stem(stem) {
            return Err(FmriError::Stem {
                stem: stem.to_owned(),
                fmri: s.to_owned(),
            });
        }
        Ok(Self {
            publisher: publisher.map(str::to_owned),
            stem: stem.to_owned(),
            version,
        })
    }

    /// The publisher, if any.
    pub fn publisher(&self) -> Option<&str> {
        self.publisher.as_deref()
    }

    /// The package name, e.g. `web/server/nginx`.
    pub fn stem(&self) -> &str {
        &self.stem
    }

    /// The version, if any.
    pub fn version(&self) -> Option<&Version> {
        self.version.as_ref()
    }

    /// The same FMRI with another publisher.
    pub fn with_publisher(mut self, publisher: Option<&str>) -> Result<Self, FmriError> {
        if let Some(p) = publisher
            && !valid_publisher(p)
        {
            return Err(FmriError::Publisher {
                publisher: p.to_owned(),
                fmri: self.to_string(),
            });
        }
        self.publisher = publisher.map(str::to_owned);
        Ok(self)
    }

    /// True when this FMRI has the same stem as `pattern` and its version matches the
    /// pattern's (possibly partial) version by pkg's prefix rule ([`Version::matches`]).
    /// A pattern without version matches every version; a pattern with a publisher only
    /// matches that publisher.
    pub fn matches(&self, pattern: &Fmri) -> bool {
        if self.stem != pattern.stem {
            return false;
        }
        if pattern.publisher.is_some() && pattern.publisher != self.publisher {
            return false;
        }
        match (&pattern.version, &self.version) {
            (None, _) => true,
            (Some(p), Some(v)) => v.matches(p),
            (Some(_), None) => false,
        }
    }

    /// `q(stem)/q(version)`: where the manifest lives under `publisher/<pub>/pkg/` in a
    /// repository and in an image. `None` when there is no version.
    pub fn dir_path(&self) -> Option<String> {
        let v = self.version.as_ref()?;
        Some(format!("{}/{}", quote(&self.stem), quote(&v.to_string())))
    }

    /// `q(stem)@q(version)`: the argument of the depot `manifest/0` operation. The `@` stays
    /// literal: Apache-served depots split on it in the raw request line.
    pub fn url_path(&self) -> Option<String> {
        let v = self.version.as_ref()?;
        Some(format!("{}@{}", quote(&self.stem), quote(&v.to_string())))
    }
}

impl FromStr for Fmri {
    type Err = FmriError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Fmri {
    /// `pkg://pub/stem@version` with a publisher, `pkg:/stem@version` without.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.publisher {
            Some(p) => write!(f, "pkg://{p}/{}", self.stem)?,
            None => write!(f, "pkg:/{}", self.stem)?,
        }
        if let Some(v) = &self.version {
            write!(f, "@{v}")?;
        }
        Ok(())
    }
}

/// pkg's stem rule: `/`-separated segments, each starting with a letter or digit and then
/// letters, digits, `_`, `-`, `.` or `+`.
pub fn valid_stem(stem: &str) -> bool {
    !stem.is_empty()
        && stem.split('/').all(|seg| {
            let mut b = seg.bytes();
            b.next().is_some_and(|c| c.is_ascii_alphanumeric())
                && b.all(|c| c.is_ascii_alphanumeric() || matches!(c, b'_' | b'-' | b'.' | b'+'))
        })
}

/// pkg's `valid_pub_prefix` (Oracle head): only letters, digits, `-`, `.`, `:`, `[`, `]`;
/// then a hostname (`[A-Za-z0-9-]+[A-Za-z0-9.-]*`), a dotted IPv4-like address, or a
/// bracketed IPv6 address.
pub fn valid_publisher(p: &str) -> bool {
    if p.is_empty()
        || !p
            .bytes()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.' | b':' | b'[' | b']'))
    {
        return false;
    }
    let b = p.as_bytes();
    let hostname = (b[0].is_ascii_alphanumeric() || b[0] == b'-')
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'.'));
    let ipv6 = p.len() > 2
        && b[0] == b'['
        && b[b.len() - 1] == b']'
        && p[1..p.len() - 1]
            .bytes()
            .all(|c| c.is_ascii_hexdigit() || matches!(c, b'.' | b':'))
        && p[1..p.len() - 1].matches(':').count() <= 7
        && p.contains(':');
    hostname || ipv6
}

/// Python's `urllib.parse.quote(s, safe="")`: every byte of the UTF-8 text except
/// `A-Z a-z 0-9 _ . - ~` becomes `%XX` with upper-case hex; space is `%20`, never `+`.
///
/// Written here rather than taken from a crate because the exact safe set and case are part
/// of pkg's on-disk and URL formats, and the common crates default to other sets.
pub fn quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for &b in s.as_bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The inverse of [`quote`] (Python's `unquote`): `%XX` sequences are decoded, malformed ones
/// are kept literally, and the result must be UTF-8.
pub fn unquote(s: &str) -> Option<String> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%'
            && i + 2 < b.len()
            && let (Some(h), Some(l)) = (hexval(b[i + 1]), hexval(b[i + 2]))
        {
            out.push(h * 16 + l);
            i += 3;
            continue;
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8(out).ok()
}

fn hexval(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_every_accepted_form() {
        let full = "pkg://openindiana.org/web/server/nginx@1.18.0,5.11-2020.0.1.0:20200421T195136Z";
        let f = Fmri::parse(full).unwrap();
        assert_eq!(f.publisher(), Some("openindiana.org"));
        assert_eq!(f.stem(), "web/server/nginx");
        assert_eq!(f.to_string(), full);
        for (s, p, stem) in [
            ("pkg:/SUNWcs@0.5.11", None, "SUNWcs"),
            ("//omnios/system/library", Some("omnios"), "system/library"),
            ("/library/zlib", None, "library/zlib"),
            ("library/c++/foo@1", None, "library/c++/foo"),
            ("pkg:///x", None, "x"),
        ] {
            let f = Fmri::parse(s).unwrap();
            assert_eq!((f.publisher(), f.stem()), (p, stem), "{s}");
        }
        assert_eq!(
            Fmri::parse("foo@1.0").unwrap().to_string(),
            "pkg:/foo@1.0,5.11"
        );
    }

    #[test]
    fn trailing_blanks_are_dropped_like_pkg_but_leading_ones_are_not() {
        let f = Fmri::parse("pkg:/demo/x@1.0-1 \t\n").unwrap();
        assert_eq!(f.to_string(), "pkg:/demo/x@1.0,5.11-1");
        assert!(Fmri::parse(" pkg:/demo/x@1.0").is_err());
        assert!(Fmri::parse("pkg:/demo/x @1.0").is_err());
    }

    #[test]
    fn publisher_forms_need_the_slash_before_the_stem() {
        // pkg: "Missing '/' after publisher name".
        for bad in [
            "pkg://example.org",
            "//example.org",
            "pkg://example.org@1.0",
        ] {
            assert!(Fmri::parse(bad).is_err(), "{bad:?}");
        }
        // The '/' must come before the version: "pkg://p@1/x" has no stem before the '@'.
        assert!(Fmri::parse("pkg://p@1.0/x").is_err());
        let f = Fmri::parse("//example.org/demo/x@2").unwrap();
        assert_eq!((f.publisher(), f.stem()), (Some("example.org"), "demo/x"));
    }

    #[test]
    fn stem_characters_follow_pkgs_regex() {
        for good in ["a", "A9", "a_b-c.d+e", "x/y/z", "9lives", "a+", "a."] {
            assert!(valid_stem(good), "{good:?}");
        }
        // Each '/' segment starts with a letter or digit; nothing outside the class.
        for bad in [
            "a/_b", "a/-b", "a/+b", "a/.b", "a@b", "a,b", "a:b", "a b", "a*", "é",
        ] {
            assert!(!valid_stem(bad), "{bad:?}");
        }
    }

    #[test]
    fn version_starts_after_last_at() {
        // The stem cannot contain '@', so everything before the last '@' must be a stem.
        assert!(matches!(
            Fmri::parse("a@b@1.0"),
            Err(FmriError::Stem { .. })
        ));
        assert!(matches!(Fmri::parse("a@"), Err(FmriError::Version { .. })));
    }

    #[test]
    fn rejects_bad_stems_and_publishers() {
        for bad in [
            "", "pkg:/", "-foo", "foo/", "foo//bar", "foo bar", "foo,1", "foo:1", "_x", "a/.b",
        ] {
            assert!(
                matches!(Fmri::parse(bad), Err(FmriError::Stem { .. })),
                "{bad:?}"
            );
        }
        for bad in [
            "pkg://exa mple/foo",
            "pkg://a_b/foo",
            "pkg://.org/foo",
            "pkg://[zz]/x",
        ] {
            assert!(
                matches!(Fmri::parse(bad), Err(FmriError::Publisher { .. })),
                "{bad:?}"
            );
        }
        for good in [
            "openindiana.org",
            "omnios",
            "solaris",
            "on-nightly",
            "[::1]",
            "10.0.0.1",
        ] {
            assert!(valid_publisher(good), "{good}");
        }
    }

    #[test]
    fn equality_ignores_build_and_orders_by_version() {
        let a = Fmri::parse("pkg://p/x@1.0,5.11-1").unwrap();
        let b = Fmri::parse("pkg://p/x@1.0,5.12-1").unwrap();
        assert_eq!(a, b);
        assert!(Fmri::parse("pkg://p/x@1.2").unwrap() < Fmri::parse("pkg://p/x@1.10").unwrap());
    }

    #[test]
    fn pattern_matching_uses_prefixes() {
        let pat = Fmri::parse("pkg:/library/zlib@1.2").unwrap();
        assert!(
            Fmri::parse("pkg://oi/library/zlib@1.2.11-2020.0.1.0")
                .unwrap()
                .matches(&pat)
        );
        assert!(
            !Fmri::parse("pkg://oi/library/zlib@1.3")
                .unwrap()
                .matches(&pat)
        );
        assert!(
            !Fmri::parse("pkg://oi/library/zlib2@1.2")
                .unwrap()
                .matches(&pat)
        );
        let pat = Fmri::parse("pkg://other/library/zlib").unwrap();
        assert!(
            !Fmri::parse("pkg://oi/library/zlib@1.2")
                .unwrap()
                .matches(&pat)
        );
    }

    #[test]
    fn escaping_matches_python_quote_with_empty_safe_set() {
        let f = Fmri::parse("web/server/nginx@1.18.0,5.11-2020.0.1.0:20200421T195136Z").unwrap();
        assert_eq!(
            f.dir_path().unwrap(),
            "web%2Fserver%2Fnginx/1.18.0%2C5.11-2020.0.1.0%3A20200421T195136Z"
        );
        assert_eq!(
            f.url_path().unwrap(),
            "web%2Fserver%2Fnginx@1.18.0%2C5.11-2020.0.1.0%3A20200421T195136Z"
        );
        assert_eq!(
            quote("GNU General Public License v2.0 (GPL)"),
            "GNU%20General%20Public%20License%20v2.0%20%28GPL%29"
        );
        assert_eq!(quote("library/c++/foo"), "library%2Fc%2B%2B%2Ffoo");
        assert_eq!(quote("a~b_c.d-e"), "a~b_c.d-e");
        assert_eq!(quote("é@"), "%C3%A9%40");
        assert_eq!(unquote("%C3%A9%40%2f").unwrap(), "é@/");
        assert_eq!(unquote("100%").unwrap(), "100%");
        assert_eq!(unquote("%zz").unwrap(), "%zz");
    }
}
