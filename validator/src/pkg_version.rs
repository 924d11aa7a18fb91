//! Comparing pkg(5) version strings (`release[,build]-branch:timestamp`) against a constraint
//! such as `<5.2` or `>=2.1,5.11-2024.0`: what the registry's package search filters with.
//!
//! Why here and not `ips_bridge::version`: `ips-bridge` owns pkg(5) formats, but the registry
//! may depend only on `validator` (no workspace crate above it), and the search needs nothing
//! but the ordering. So this is a small comparison of version *strings*, kept to pkg's rules
//! and tested against them: dotted numeric releases compared component by component (`1.2 <
//! 1.2.0 < 1.10`), then the branch the same way, then the timestamp; the build part (after
//! `,`) is ignored, as pkg ignores it in ordering; a missing part sorts before a present one.
//!
//! A constraint compares at the precision it is written with, as pkg's own `name@2.1`
//! matching does: only the parts the constraint gives are compared, and each of its dotted
//! sequences is compared against the version's sequence cut to the same length. So `=2.1`
//! matches `2.1` and `2.1.3`, `<2.1` excludes every `2.1.x`, `<=2.1` includes them, and
//! `>=2.1,5.11-2024.1` also compares the branch.

use std::cmp::Ordering;
use std::fmt;

/// A parsed version: release, branch and timestamp (the build is ignored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PkgVersion {
    release: Vec<u64>,
    branch: Option<Vec<u64>>,
    timestamp: Option<String>,
}

fn dots(s: &str, whole: &str) -> Result<Vec<u64>, String> {
    s.split('.')
        .map(|e| {
            if e.is_empty() || !e.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!(
                    "{whole:?} is not a pkg(5) version: {s:?} is not a dotted number sequence"
                ));
            }
            e.parse::<u64>()
                .map_err(|_| format!("{whole:?} is not a pkg(5) version: {e:?} is too large"))
        })
        .collect()
}

impl PkgVersion {
    /// Parses `release[,build][-branch][:timestamp]`.
    pub fn parse(s: &str) -> Result<PkgVersion, String> {
        let t = s.trim();
        let (rest, timestamp) = match t.split_once(':') {
            Some((r, ts)) => {
                if ts.len() != 16 || !ts.ends_with('Z') || ts.as_bytes()[8] != b'T' {
                    return Err(format!(
                        "{s:?} is not a pkg(5) version: timestamp {ts:?} is not YYYYMMDDTHHMMSSZ"
                    ));
                }
                (r, Some(ts.to_owned()))
            }
            None => (t, None),
        };
        let (rest, branch) = match rest.split_once('-') {
            Some((r, b)) => (r, Some(dots(b, s)?)),
            None => (rest, None),
        };
        let release = rest.split_once(',').map(|(r, _)| r).unwrap_or(rest);
        if release.is_empty() {
            return Err(format!("{s:?} is not a pkg(5) version: it has no release"));
        }
        Ok(PkgVersion {
            release: dots(release, s)?,
            branch,
            timestamp,
        })
    }

    /// pkg(5) ordering of two whole versions: release, then branch, then timestamp.
    pub fn cmp_full(&self, other: &PkgVersion) -> Ordering {
        self.release
            .cmp(&other.release)
            .then_with(|| self.branch.cmp(&other.branch))
            .then_with(|| self.timestamp.cmp(&other.timestamp))
    }

    /// Compares `self` with `bound` at the precision `bound` is written with (see the module
    /// docs).
    pub fn cmp_at_precision_of(&self, bound: &PkgVersion) -> Ordering {
        fn cut(v: &[u64], n: usize) -> &[u64] {
            &v[..v.len().min(n)]
        }
        let r = cut(&self.release, bound.release.len()).cmp(&bound.release);
        if r != Ordering::Equal {
            return r;
        }
        let Some(b) = &bound.branch else {
            return Ordering::Equal;
        };
        let ours = self.branch.as_deref().map(|x| cut(x, b.len()));
        let r = ours.cmp(&Some(b.as_slice()));
        if r != Ordering::Equal {
            return r;
        }
        match &bound.timestamp {
            None => Ordering::Equal,
            Some(t) => self.timestamp.as_ref().cmp(&Some(t)),
        }
    }
}

/// The comparison of a [`Constraint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VersionOp {
    /// `<`
    Lt,
    /// `<=`
    Le,
    /// `=` (also a bare version)
    Eq,
    /// `>=`
    Ge,
    /// `>`
    Gt,
}

impl VersionOp {
    fn as_str(self) -> &'static str {
        match self {
            VersionOp::Lt => "<",
            VersionOp::Le => "<=",
            VersionOp::Eq => "=",
            VersionOp::Ge => ">=",
            VersionOp::Gt => ">",
        }
    }
}

/// A version constraint: an operator and a version, written `<5.2`, `>= 2.1`, `=1.0` or `1.0`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Constraint {
    /// The operator.
    pub op: VersionOp,
    /// The version compared with.
    pub version: PkgVersion,
    text: String,
}

impl Constraint {
    /// Parses `[OP]VERSION` with OP one of `<`, `<=`, `=`, `>=`, `>` (none means `=`).
    pub fn parse(s: &str) -> Result<Constraint, String> {
        let t = s.trim();
        let (op, rest) = if let Some(r) = t.strip_prefix("<=") {
            (VersionOp::Le, r)
        } else if let Some(r) = t.strip_prefix(">=") {
            (VersionOp::Ge, r)
        } else if let Some(r) = t.strip_prefix('<') {
            (VersionOp::Lt, r)
        } else if let Some(r) = t.strip_prefix('>') {
            (VersionOp::Gt, r)
        } else if let Some(r) = t.strip_prefix('=') {
            (VersionOp::Eq, r.strip_prefix('=').unwrap_or(r))
        } else {
            (VersionOp::Eq, t)
        };
        let rest = rest.trim();
        let version = PkgVersion::parse(rest).map_err(|e| format!("constraint {s:?}: {e}"))?;
        Ok(Constraint {
            op,
            version,
            text: rest.to_owned(),
        })
    }

    /// Whether the version string `v` satisfies the constraint; a string that is not a pkg(5)
    /// version satisfies none.
    pub fn matches(&self, v: &str) -> bool {
        let Ok(v) = PkgVersion::parse(v) else {
            return false;
        };
        let o = v.cmp_at_precision_of(&self.version);
        match self.op {
            VersionOp::Lt => o == Ordering::Less,
            VersionOp::Le => o != Ordering::Greater,
            VersionOp::Eq => o == Ordering::Equal,
            VersionOp::Ge => o != Ordering::Less,
            VersionOp::Gt => o == Ordering::Greater,
        }
    }
}

impl fmt::Display for Constraint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.op.as_str(), self.text)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> PkgVersion {
        PkgVersion::parse(s).unwrap()
    }

    #[test]
    fn orders_like_pkg() {
        // Numeric, component-wise; a longer sequence after its prefix.
        let ordered = [
            "1.2",
            "1.2.0",
            "1.10",
            "2.1,5.11-2024.0",
            "2.1,5.11-2024.0:20240101T000000Z",
            "2.1,5.11-2024.0:20240102T030405Z",
            "2.1,5.11-2024.1",
            "2.1,5.11-2024.10",
            "10",
        ];
        for w in ordered.windows(2) {
            assert_eq!(v(w[0]).cmp_full(&v(w[1])), Ordering::Less, "{w:?}");
        }
        // The build is ignored.
        assert_eq!(v("1.0,5.11-1").cmp_full(&v("1.0,5.12-1")), Ordering::Equal);
        for bad in [
            "",
            "a",
            "1..2",
            ",5.11",
            "1-x",
            "1:2024",
            "-1",
            "99999999999999999999",
        ] {
            assert!(PkgVersion::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn constraints_compare_at_their_precision() {
        let tool = "2.1,5.11-2024.0:20240102T030405Z";
        let cases: &[(&str, &str, bool)] = &[
            ("<5.2", tool, true),
            ("<2.1", tool, false),
            ("<=2.1", tool, true),
            ("=2.1", tool, true),
            ("2.1", "2.1.3", true),
            ("=2", tool, true),
            ("=2.1.0", tool, false),
            (">=2.1", tool, true),
            (">=2.2", tool, false),
            (">2.1", tool, false),
            (">2.0", tool, true),
            ("<2.10", "2.9", true),
            (">=2.1-2024.1", tool, false),
            (">=2.1-2024.0", tool, true),
            ("<2.1-2024.1", tool, true),
            ("=2.1-2024.0:20240102T030405Z", tool, true),
            ("<2.1-2024.0:20240102T030405Z", tool, false),
            ("=1.0", "not a version", false),
            ("< 5.2", "5.1", true),
        ];
        for (c, ver, want) in cases {
            let k = Constraint::parse(c).unwrap();
            assert_eq!(k.matches(ver), *want, "{c} vs {ver}");
        }
        assert_eq!(Constraint::parse(">= 2.1").unwrap().to_string(), ">=2.1");
        assert_eq!(Constraint::parse("1.0").unwrap().op, VersionOp::Eq);
        for bad in ["", "<", "<=x", "=>1", "~1"] {
            assert!(Constraint::parse(bad).is_err(), "{bad:?}");
        }
    }
}
