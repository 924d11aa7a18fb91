//! A package query in pkg(5) terms, `NAME[@OP VERSION]`: what `rdctl search --package` sends
//! to the registry's package search and what an admission policy's `deny_packages` refuses.
//! One parser and one name matcher, so `openssl@<3.0` means the same package everywhere.
//!
//! - NAME is a glob over package names (`*` any characters, `/` included; `?` one character)
//!   that matches the whole name or a part of it starting after a `/`, as pkg(5) matches
//!   `openssl` against `library/security/openssl`.
//! - NAME may be spelled as an FMRI: `pkg:/openssl` (any publisher) or
//!   `pkg://openindiana.org/openssl` (that publisher only).
//! - `@OP VERSION` is a [`Constraint`]: a pkg(5) version compared at the precision it is
//!   written with (`<3.0` excludes every `3.0.x`).

use std::fmt;

use crate::glob::{Glob, GlobSyntax};
use crate::pkg_version::Constraint;
use crate::spdx::SpdxPackage;

/// A package-name glob matching the whole name or a part after a `/` (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageNameGlob(Glob);

impl PackageNameGlob {
    /// Compiles `pattern` (every pattern compiles).
    pub fn new(pattern: &str) -> PackageNameGlob {
        PackageNameGlob(Glob::new(pattern, GlobSyntax::ANY))
    }

    /// Whether `name` (a package stem such as `library/security/openssl`) matches.
    pub fn matches(&self, name: &str) -> bool {
        self.0.matches(name)
            || name
                .match_indices('/')
                .any(|(i, _)| self.0.matches(&name[i + 1..]))
    }
}

/// A parsed `NAME[@OP VERSION]` query (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageQuery {
    publisher: Option<String>,
    name: String,
    glob: PackageNameGlob,
    constraint: Option<Constraint>,
    text: String,
}

/// How one package compares with a [`PackageQuery`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PackageMatch {
    /// Another package, or a version outside the constraint.
    No,
    /// The name (and publisher) match and the version satisfies the constraint (or there is
    /// none).
    Yes,
    /// The name matches but the version is missing or not a pkg(5) version, so the
    /// constraint cannot be decided.
    VersionUnknown,
}

impl PackageQuery {
    /// Parses `NAME[@OP VERSION]`, NAME optionally `pkg:/NAME` or `pkg://PUBLISHER/NAME`; the
    /// error says what is wrong with `s`.
    pub fn parse(s: &str) -> Result<PackageQuery, String> {
        let t = s.trim();
        let (name_part, constraint) = match t.split_once('@') {
            Some((n, c)) => (n.trim(), Some(c.trim())),
            None => (t, None),
        };
        let (publisher, name) = if let Some(rest) = name_part.strip_prefix("pkg://") {
            match rest.split_once('/') {
                Some((p, n)) if !p.is_empty() => (Some(p.to_owned()), n),
                _ => {
                    return Err(format!(
                        "{s:?}: pkg://PUBLISHER/NAME needs a publisher and a name (like pkg://openindiana.org/openssl)"
                    ));
                }
            }
        } else if let Some(rest) = name_part.strip_prefix("pkg:/") {
            (None, rest)
        } else {
            (None, name_part)
        };
        if name.is_empty() || name.starts_with('/') || name.ends_with('/') {
            return Err(format!(
                "{s:?} has no package name (like openssl, pkg:/library/security/openssl or 'openssl@<3.0')"
            ));
        }
        if let Some(c) = name.chars().find(|c| c.is_whitespace() || c.is_control()) {
            return Err(format!(
                "{s:?}: a package name has no {c:?} (like openssl or library/security/*)"
            ));
        }
        let constraint = match constraint {
            None => None,
            Some("") => {
                return Err(format!(
                    "{s:?} has nothing after '@': give a version constraint (like @<3.0) or leave the '@' out"
                ));
            }
            Some(c) => Some(Constraint::parse(c).map_err(|e| format!("{s:?}: {e}"))?),
        };
        Ok(PackageQuery {
            publisher,
            glob: PackageNameGlob::new(name),
            name: name.to_owned(),
            constraint,
            text: t.to_owned(),
        })
    }

    /// The name pattern, without `pkg:/` or the publisher.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The publisher of a `pkg://PUBLISHER/NAME` query.
    pub fn publisher(&self) -> Option<&str> {
        self.publisher.as_deref()
    }

    /// The version constraint.
    pub fn constraint(&self) -> Option<&Constraint> {
        self.constraint.as_ref()
    }

    /// Whether a package named `name` from `publisher` (when known) at `version` (when
    /// known) matches. A query with a publisher matches a package whose publisher is not
    /// known: the name decides.
    pub fn matches(
        &self,
        name: &str,
        publisher: Option<&str>,
        version: Option<&str>,
    ) -> PackageMatch {
        if !self.glob.matches(name) {
            return PackageMatch::No;
        }
        if let (Some(want), Some(have)) = (&self.publisher, publisher)
            && want != have
        {
            return PackageMatch::No;
        }
        let Some(c) = &self.constraint else {
            return PackageMatch::Yes;
        };
        match version {
            Some(v) if crate::PkgVersion::parse(v).is_ok() => {
                if c.matches(v) {
                    PackageMatch::Yes
                } else {
                    PackageMatch::No
                }
            }
            _ => PackageMatch::VersionUnknown,
        }
    }

    /// [`PackageQuery::matches`] for a package an SBOM lists: its name, publisher and
    /// version, or the parts of its FMRI where those are missing.
    pub fn matches_package(&self, p: &SpdxPackage) -> PackageMatch {
        let fmri = p.fmri.as_deref().map(split_fmri);
        let name = if p.name.is_empty() {
            fmri.map_or("", |f| f.1)
        } else {
            p.name.as_str()
        };
        let publisher = package_publisher(p);
        let version = p.version.as_deref().or(fmri.and_then(|f| f.2));
        self.matches(name, publisher, version)
    }
}

/// The publisher of a package an SBOM lists: its supplier organization, else its FMRI's;
/// `None` when neither names one (then a publisher-scoped query matches it by name).
pub fn package_publisher(p: &SpdxPackage) -> Option<&str> {
    p.publisher
        .as_deref()
        .or_else(|| p.fmri.as_deref().and_then(|f| split_fmri(f).0))
}

/// `pkg://pub/name@version` (or `pkg:/name@version`) as (publisher, name, version).
fn split_fmri(fmri: &str) -> (Option<&str>, &str, Option<&str>) {
    let (rest, version) = match fmri.split_once('@') {
        Some((r, v)) => (r, Some(v).filter(|v| !v.is_empty())),
        None => (fmri, None),
    };
    if let Some(r) = rest.strip_prefix("pkg://") {
        match r.split_once('/') {
            Some((p, n)) => (Some(p).filter(|p| !p.is_empty()), n, version),
            None => (None, r, version),
        }
    } else {
        (None, rest.strip_prefix("pkg:/").unwrap_or(rest), version)
    }
}

impl fmt::Display for PackageQuery {
    /// The query as written (trimmed).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(s: &str) -> PackageQuery {
        PackageQuery::parse(s).unwrap()
    }

    #[test]
    fn parses_names_fmris_and_constraints() {
        let a = q("openssl@<3.0");
        assert_eq!(a.name(), "openssl");
        assert_eq!(a.publisher(), None);
        assert_eq!(a.constraint().unwrap().to_string(), "<3.0");
        assert_eq!(a.to_string(), "openssl@<3.0");
        let b = q("pkg:/library/security/openssl@ >= 1.2");
        assert_eq!(b.name(), "library/security/openssl");
        assert_eq!(b.constraint().unwrap().to_string(), ">=1.2");
        let c = q("pkg://openindiana.org/openssl");
        assert_eq!(c.publisher(), Some("openindiana.org"));
        assert_eq!(c.name(), "openssl");
        assert!(c.constraint().is_none());
        for (bad, says) in [
            ("", "no package name"),
            ("@<3.0", "no package name"),
            ("pkg:/", "no package name"),
            ("pkg:///openssl", "needs a publisher"),
            ("pkg://openindiana.org", "needs a publisher"),
            ("library/", "no package name"),
            ("open ssl", "no ' '"),
            ("openssl@", "nothing after '@'"),
            ("openssl@<3.x", "not a pkg(5) version"),
            ("openssl@~3", "not a pkg(5) version"),
        ] {
            let e = PackageQuery::parse(bad).unwrap_err();
            assert!(e.contains(says), "{bad:?}: {e}");
        }
    }

    #[test]
    fn matches_like_pkg() {
        use PackageMatch::*;
        let old = q("openssl@<3.0");
        assert_eq!(
            old.matches(
                "library/security/openssl",
                None,
                Some("1.1.1.20,5.11-2024.0.0.0")
            ),
            Yes
        );
        assert_eq!(
            old.matches("library/security/openssl", None, Some("3.0.13")),
            No
        );
        assert_eq!(
            old.matches("library/security/openssl", None, Some("3.1")),
            No
        );
        assert_eq!(old.matches("openssl", None, Some("2.9.9")), Yes);
        // Part of a segment is not a name.
        assert_eq!(old.matches("library/libopenssl", None, Some("1.0")), No);
        assert_eq!(old.matches("openssl", None, None), VersionUnknown);
        assert_eq!(
            old.matches("openssl", None, Some("1.1.1w-0+deb11u1")),
            VersionUnknown
        );
        let any = q("library/security/*");
        assert_eq!(any.matches("library/security/openssl", None, None), Yes);
        assert_eq!(any.matches("library/zlib", None, None), No);
        let by = q("pkg://openindiana.org/openssl@<3");
        assert_eq!(
            by.matches("openssl", Some("openindiana.org"), Some("1.0")),
            Yes
        );
        assert_eq!(by.matches("openssl", Some("other.org"), Some("1.0")), No);
        assert_eq!(by.matches("openssl", None, Some("1.0")), Yes);

        let from_fmri = SpdxPackage {
            fmri: Some("pkg://omnios/library/security/openssl@1.1.1.20,5.11-151046.0".into()),
            name: String::new(),
            publisher: None,
            version: None,
        };
        assert_eq!(by.matches_package(&from_fmri), No);
        assert_eq!(old.matches_package(&from_fmri), Yes);
    }

    #[test]
    fn name_glob() {
        for (p, n, want) in [
            ("openssl", "library/security/openssl", true),
            ("security/openssl", "library/security/openssl", true),
            ("*ssl*", "library/security/openssl", true),
            ("ssl", "library/security/openssl", false),
            ("library/*", "library/security/openssl", true),
        ] {
            assert_eq!(PackageNameGlob::new(p).matches(n), want, "{p} vs {n}");
        }
    }
}
