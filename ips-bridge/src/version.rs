//! pkg(5) package versions: `release[,build]-branch:timestamp`.
//!
//! Identity and ordering follow pkg's `Version`: the build part is parsed and printed but
//! ignored by equality, ordering and hashing; components compare release, then branch, then
//! timestamp, and a missing component sorts before a present one.

use std::cmp::Ordering;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::str::FromStr;

/// Why a version or one of its parts did not parse.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VersionError {
    /// A dot-separated number sequence is empty, not numeric, negative or zero padded.
    #[error("illegal dot sequence {text:?} in version {version:?}")]
    DotSequence {
        /// The offending sequence.
        text: String,
        /// The whole version string.
        version: String,
    },
    /// The version has no release part (it starts with `,`, `-` or `:`).
    #[error("version {0:?} has no release")]
    MissingRelease(String),
    /// The timestamp is not `YYYYMMDDTHHMMSSZ` naming a real UTC time.
    #[error("illegal timestamp {text:?} in version {version:?}")]
    Timestamp {
        /// The offending timestamp.
        text: String,
        /// The whole version string.
        version: String,
    },
}

/// A non-empty sequence of non-negative integers written `1.2.3`.
///
/// Leading zeros are illegal (`01`, `1.01`), as in pkg. Sequences compare element by element,
/// so `1.2 < 1.2.0 < 1.10`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct DotSequence(Vec<u64>);

impl DotSequence {
    /// Parses `text`; `version` is only used to name the input in errors.
    fn parse_in(text: &str, version: &str) -> Result<Self, VersionError> {
        let err = || VersionError::DotSequence {
            text: text.to_owned(),
            version: version.to_owned(),
        };
        let mut out = Vec::new();
        for elem in text.split('.') {
            let ok = !elem.is_empty()
                && elem.bytes().all(|b| b.is_ascii_digit())
                && (elem == "0" || !elem.starts_with('0'));
            if !ok {
                return Err(err());
            }
            out.push(elem.parse::<u64>().map_err(|_| err())?);
        }
        Ok(Self(out))
    }

    /// The numbers in the sequence.
    pub fn components(&self) -> &[u64] {
        &self.0
    }

    /// True when `self` is a prefix of `other` (pkg's `is_subsequence`): `1.4` is a prefix
    /// of `1.4` and `1.4.3`, not of `1.5` or `1`.
    pub fn is_prefix_of(&self, other: &DotSequence) -> bool {
        other.0.starts_with(&self.0)
    }
}

impl FromStr for DotSequence {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_in(s, s)
    }
}

impl fmt::Display for DotSequence {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(".")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

/// A UTC timestamp in pkg's basic ISO 8601 form `YYYYMMDDTHHMMSSZ`.
///
/// Kept as its canonical text; the fixed width makes string order chronological.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Timestamp(String);

impl Timestamp {
    fn parse_in(text: &str, version: &str) -> Result<Self, VersionError> {
        if valid_timestamp(text) {
            Ok(Self(text.to_owned()))
        } else {
            Err(VersionError::Timestamp {
                text: text.to_owned(),
                version: version.to_owned(),
            })
        }
    }

    /// The timestamp text, e.g. `20200421T195136Z`.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl FromStr for Timestamp {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse_in(s, s)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Checks `YYYYMMDDTHHMMSSZ` and that it names a real date and time.
pub(crate) fn valid_timestamp(t: &str) -> bool {
    let b = t.as_bytes();
    // ASCII first: the slices below are byte ranges, which would split a multi-byte character
    // (found by the fmri fuzz target).
    if !t.is_ascii() || b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return false;
    }
    let digits = |r: std::ops::Range<usize>| -> Option<u32> {
        let s = &t[r];
        s.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| s.parse().ok())
            .flatten()
    };
    let (Some(y), Some(mo), Some(d), Some(h), Some(mi), Some(s)) = (
        digits(0..4),
        digits(4..6),
        digits(6..8),
        digits(9..11),
        digits(11..13),
        digits(13..15),
    ) else {
        return false;
    };
    let leap = (y % 4 == 0 && y % 100 != 0) || y % 400 == 0;
    let days = match mo {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        2 if leap => 29,
        2 => 28,
        _ => return false,
    };
    y >= 1 && (1..=days).contains(&d) && h < 24 && mi < 60 && s < 60
}

/// A package version. See the module documentation for identity and ordering.
#[derive(Debug, Clone)]
pub struct Version {
    release: DotSequence,
    build: DotSequence,
    branch: Option<DotSequence>,
    timestamp: Option<Timestamp>,
}

/// The build release pkg assumes when a version string has none.
pub const DEFAULT_BUILD: &str = "5.11";

impl Version {
    /// Parses a version string as pkg's `Version` does: the first `:` starts the timestamp,
    /// the first `-` the branch and the first `,` the build; a missing build becomes `5.11`.
    /// A separator with nothing after it (`1.0-`, `1.0,`, `1.0:`) is an error, as in pkg,
    /// and so is a separator out of order (`1.0:2020-1` leaves an empty branch).
    ///
    /// One deliberate difference: pkg reads each dot-sequence element with Python's `int()`,
    /// which also accepts `00`, `+1`, `1_0`, surrounding blanks and non-ASCII digits (all
    /// printed back canonically). Here an element must be `0` or ASCII digits without a
    /// leading zero, so every accepted version prints back exactly as written (apart from
    /// the default build).
    pub fn parse(s: &str) -> Result<Self, VersionError> {
        let time_idx = s.find(':');
        let timestr = time_idx.map(|i| &s[i + 1..]);
        let (branch_idx, branch) = match s.find('-') {
            Some(i) => (Some(i), Some(slice(s, i + 1, time_idx))),
            None => (time_idx, None),
        };
        let (build_idx, build) = match s.find(',') {
            Some(i) => (Some(i), Some(slice(s, i + 1, branch_idx))),
            None => (branch_idx, None),
        };
        if build_idx == Some(0) || s.is_empty() {
            return Err(VersionError::MissingRelease(s.to_owned()));
        }
        let release = DotSequence::parse_in(slice(s, 0, build_idx), s)?;
        let branch = branch.map(|b| DotSequence::parse_in(b, s)).transpose()?;
        let build = match build {
            Some(b) => DotSequence::parse_in(b, s)?,
            None => DotSequence(vec![5, 11]),
        };
        let timestamp = timestr.map(|t| Timestamp::parse_in(t, s)).transpose()?;
        Ok(Self {
            release,
            build,
            branch,
            timestamp,
        })
    }

    /// The release, e.g. `1.18.0`.
    pub fn release(&self) -> &DotSequence {
        &self.release
    }

    /// The build release (`5.11` unless given). Ignored by equality and ordering.
    pub fn build(&self) -> &DotSequence {
        &self.build
    }

    /// The branch, e.g. `2020.0.1.0`.
    pub fn branch(&self) -> Option<&DotSequence> {
        self.branch.as_ref()
    }

    /// The publication timestamp.
    pub fn timestamp(&self) -> Option<&Timestamp> {
        self.timestamp.as_ref()
    }

    /// `release[-branch]`, pkg's short form.
    pub fn short(&self) -> String {
        match &self.branch {
            Some(b) => format!("{}-{b}", self.release),
            None => self.release.to_string(),
        }
    }

    /// pkg's `is_successor` with `CONSTRAINT_AUTO`: true when `pattern`'s release is a prefix
    /// of this release, its branch (if any) a prefix of this branch, and its timestamp (if
    /// any) equal to this one. This is how `incorporate`, `parent` and `pkg install foo@1.2`
    /// match partial versions.
    pub fn matches(&self, pattern: &Version) -> bool {
        let release = pattern.release.is_prefix_of(&self.release);
        let branch = match (&pattern.branch, &self.branch) {
            (None, _) => true,
            (Some(p), Some(b)) => p.is_prefix_of(b),
            (Some(_), None) => false,
        };
        let time = match (&pattern.timestamp, &self.timestamp) {
            (None, _) => true,
            (Some(p), Some(t)) => p == t,
            (Some(_), None) => false,
        };
        release && branch && time
    }
}

fn slice(s: &str, start: usize, end: Option<usize>) -> &str {
    // pkg slices with Python semantics: an end before the start gives an empty string.
    let end = end.unwrap_or(s.len());
    if end < start { "" } else { &s[start..end] }
}

impl FromStr for Version {
    type Err = VersionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

impl fmt::Display for Version {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{},{}", self.release, self.build)?;
        if let Some(b) = &self.branch {
            write!(f, "-{b}")?;
        }
        if let Some(t) = &self.timestamp {
            write!(f, ":{t}")?;
        }
        Ok(())
    }
}

impl PartialEq for Version {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == Ordering::Equal
    }
}

impl Eq for Version {}

impl Hash for Version {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.release.hash(state);
        self.branch.hash(state);
        self.timestamp.hash(state);
    }
}

impl PartialOrd for Version {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Version {
    fn cmp(&self, other: &Self) -> Ordering {
        // Option's order puts None first, which is pkg's "missing sorts first".
        self.release
            .cmp(&other.release)
            .then_with(|| self.branch.cmp(&other.branch))
            .then_with(|| self.timestamp.cmp(&other.timestamp))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(s: &str) -> Version {
        Version::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    #[test]
    fn non_ascii_timestamps_are_refused_not_panicked_on() {
        // From the fmri fuzz target: 16 bytes, 'T' at byte 8 and 'Z' last, but a two-byte
        // character across a field boundary.
        let t = "20200\u{e9}1T195136Z";
        assert_eq!(t.len(), 16);
        assert!(!valid_timestamp(t));
        assert!(format!("pkg:/a@1.0:{t}").parse::<crate::Fmri>().is_err());
        assert!(valid_timestamp("20200421T195136Z"));
    }

    #[test]
    fn parses_all_parts_and_prints_build() {
        let x = v("1.18.0,5.11-2020.0.1.0:20200421T195136Z");
        assert_eq!(x.release().components(), &[1, 18, 0]);
        assert_eq!(x.build().to_string(), "5.11");
        assert_eq!(x.branch().unwrap().to_string(), "2020.0.1.0");
        assert_eq!(x.timestamp().unwrap().as_str(), "20200421T195136Z");
        assert_eq!(x.to_string(), "1.18.0,5.11-2020.0.1.0:20200421T195136Z");
        assert_eq!(v("1.0").to_string(), "1.0,5.11");
        assert_eq!(v("5.6,1").to_string(), "5.6,1");
        assert_eq!(
            v("0.1,5.11:20071014T234545Z").to_string(),
            "0.1,5.11:20071014T234545Z"
        );
        assert_eq!(x.short(), "1.18.0-2020.0.1.0");
    }

    #[test]
    fn rejects_bad_sequences_and_timestamps() {
        for bad in [
            "",
            ",5.11",
            "-1",
            ":20200101T000000Z",
            "01",
            "1.01",
            "1..2",
            "a",
            "1.-1",
            "1,01",
            "1-01",
            "1.0 ",
            "+1",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad:?} should fail");
        }
        for bad in [
            "1:2020",
            "1:20200230T000000Z",
            "1:20200101T240000Z",
            "1:20200101X000000Z",
            "1:20200101T000000",
            "1:2020010AT000000Z",
            "1:20210229T000000Z",
        ] {
            assert!(
                matches!(Version::parse(bad), Err(VersionError::Timestamp { .. })),
                "{bad:?}"
            );
        }
        assert!(Version::parse("1:20200229T235959Z").is_ok());
        assert!(v("0").release().components() == [0]);
        assert_eq!(v("1.10").release().components(), &[1, 10]);
    }

    #[test]
    fn empty_parts_after_separators_are_refused_like_pkg() {
        // pkg's Version passes the (empty) text after a separator to DotSequence, whose
        // int("") fails, and an empty timestamp fails the 16-character check.
        for bad in [
            "1.0-",
            "1.0,",
            "1.0:",
            "1.0,-1",
            "1.0-:20200101T000000Z",
            "1.0,:x",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad:?} should fail");
        }
        assert!(matches!(
            Version::parse("1.0-"),
            Err(VersionError::DotSequence { .. })
        ));
        assert!(matches!(
            Version::parse("1.0:"),
            Err(VersionError::Timestamp { .. })
        ));
        // A ',' after the '-' leaves pkg an empty build (the text between ',' and the
        // earlier '-'), and a '-' after the ':' an empty branch.
        assert!(Version::parse("1.0-1,2").is_err());
        assert!(Version::parse("1.0:20200101T000000Z-1").is_err());
    }

    #[test]
    fn release_is_the_only_required_component() {
        let x = v("7");
        assert_eq!(
            (x.branch(), x.timestamp(), x.build().to_string().as_str()),
            (None, None, "5.11")
        );
        assert_eq!(v("1.0:20200101T000000Z").branch(), None);
        assert_eq!(v("1.0-3").timestamp(), None);
    }

    #[test]
    fn elements_are_canonical_ascii_decimals() {
        // Zero alone is fine anywhere, and large numbers are too.
        assert_eq!(v("0.0.0").release().components(), &[0, 0, 0]);
        assert_eq!(
            v("2024.1,5.11-0.151022").branch().unwrap().components(),
            &[0, 151022]
        );
        // Leading zeros on a non-zero value are refused by pkg too ("Zero padded number"),
        // and so are negative numbers ("Negative number").
        for bad in ["01", "1.007", "1-01", "1,05", "-1", "1.-0"] {
            assert!(Version::parse(bad).is_err(), "{bad:?}");
        }
        // pkg's int() would take these; we refuse them (see Version::parse).
        for stricter in ["00", "1.00", "+1", "1_0", " 1", "1.\u{0663}"] {
            assert!(Version::parse(stricter).is_err(), "{stricter:?}");
        }
        // Only digits and the three separators: letters, '*' and '/' are not versions.
        for bad in ["1.a", "1.*", "1/2", "1.0-1a", "1e3"] {
            assert!(Version::parse(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn timestamps_must_be_sixteen_characters_of_a_real_utc_time() {
        assert!(Version::parse("1:20200101T000000Z").is_ok());
        for bad in [
            "1:20200101T000000z",
            "1:20200101t000000Z",
            "1:2020-01-01T00:00:00Z",
            "1:00000101T000000Z",
            "1:20201301T000000Z",
            "1:20200100T000000Z",
            "1:20200101T006000Z",
            "1:20200101T000060Z",
            "1:20200101T000000ZZ",
        ] {
            assert!(Version::parse(bad).is_err(), "{bad:?}");
        }
        // Leap years follow the Gregorian calendar (2000 yes, 1900 no), as datetime does.
        assert!(Version::parse("1:20000229T000000Z").is_ok());
        assert!(Version::parse("1:19000229T000000Z").is_err());
    }

    #[test]
    fn build_is_ignored_by_equality_order_and_hash() {
        use std::collections::HashSet;
        let a = v("1.0,5.11-1:20200101T000000Z");
        let b = v("1.0,5.12-1:20200101T000000Z");
        assert_eq!(a, b);
        assert_eq!(a.cmp(&b), Ordering::Equal);
        let set: HashSet<_> = [a, b].into_iter().collect();
        assert_eq!(set.len(), 1);
    }

    #[test]
    fn orders_release_then_branch_then_timestamp_missing_first() {
        let ordered = [
            "1.0",
            "1.0-0.1",
            "1.0-0.1:20200101T000000Z",
            "1.0-0.1:20200102T000000Z",
            "1.0-0.2",
            "1.0-0.10",
            "1.0.0",
            "1.2",
            "1.2.0",
            "1.10",
            "2:19990101T000000Z",
        ];
        for w in ordered.windows(2) {
            assert!(v(w[0]) < v(w[1]), "{} < {}", w[0], w[1]);
            assert!(v(w[1]) > v(w[0]));
        }
        // Release dominates branch and timestamp.
        assert!(v("1.1-9:20990101T000000Z") < v("1.2-0:19700101T000000Z"));
        // Branch dominates timestamp.
        assert!(v("1.1-1:20990101T000000Z") < v("1.1-2:19700101T000000Z"));
        // Time only, no branch: missing branch sorts first.
        assert!(v("1.1:20990101T000000Z") < v("1.1-0"));
    }

    #[test]
    fn prefix_matching_for_incorporations() {
        let pat = v("1.4");
        assert!(v("1.4").matches(&pat));
        assert!(v("1.4.3").matches(&pat));
        assert!(v("1.4.3.7-2:20200101T000000Z").matches(&pat));
        assert!(!v("1.5").matches(&pat));
        assert!(!v("1").matches(&pat));
        assert!(!v("1.40").matches(&pat));
        let pat = v("1.4-2016.1");
        assert!(v("1.4.3-2016.1.5").matches(&pat));
        assert!(!v("1.4.3-2016.2").matches(&pat));
        assert!(!v("1.4.3").matches(&pat));
        let pat = v("1.4-1:20200101T000000Z");
        assert!(v("1.4-1:20200101T000000Z").matches(&pat));
        assert!(!v("1.4-1:20200101T000001Z").matches(&pat));
        // The build never matters.
        assert!(v("1.4,5.12").matches(&v("1.4,5.11")));
    }
}
