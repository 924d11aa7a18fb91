//! Durations and sizes as every configuration file and flag writes them: one syntax for all.
//!
//! - A duration is a whole number and one unit: `0`, `500ms`, `90s`, `15m`, `1h`, `7d`. A bare
//!   number is seconds.
//! - A size is a whole number and one unit: `512` or `512B` (bytes), `64KiB`, `512MiB`, `1GiB`,
//!   `2TiB` (binary, powers of 1024), or `KB`, `MB`, `GB`, `TB` (decimal, powers of 1000, as on
//!   a disk's label). A bare number is bytes. Units are case-sensitive: `1gb`, `1Gb` or `1G`
//!   is refused with the list of units rather than guessed at.
//!
//! In a TOML file a duration or size key also takes a plain integer, its legacy form (seconds,
//! or bytes): `timeout = 30` and `timeout = "30s"` mean the same. [`HumanDuration`] and
//! [`ByteSize`] deserialize either form; the [`duration`] and [`size`] modules do the same for
//! fields typed `std::time::Duration` and `u64` (`#[serde(deserialize_with = …)]`).

use std::fmt;
use std::time::Duration;

use serde::de::{self, Deserializer, Visitor};

/// A duration or size that could not be read: the value as written and what was expected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{value:?} {problem}")]
pub struct UnitError {
    /// The text as written.
    pub value: String,
    /// What is wrong with it and what is expected, in user words.
    pub problem: String,
}

impl UnitError {
    fn new(value: &str, problem: impl Into<String>) -> UnitError {
        UnitError {
            value: value.to_owned(),
            problem: problem.into(),
        }
    }
}

/// What a duration looks like, for error messages.
pub const DURATION_EXPECTED: &str =
    "a duration such as \"500ms\", \"90s\", \"15m\", \"1h\" or \"7d\" (a bare number is seconds)";

/// What a size looks like, for error messages.
pub const SIZE_EXPECTED: &str = "a size such as \"512B\", \"64KiB\", \"512MiB\", \"1GiB\" or \"2TiB\" (a bare number is bytes; KB, MB, GB, TB are powers of 1000)";

/// Splits `t` into its leading digits and the rest (spaces between them allowed).
fn number_and_unit<'a>(
    original: &str,
    t: &'a str,
    expected: &str,
) -> Result<(u64, &'a str), UnitError> {
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    if num.is_empty() {
        return Err(UnitError::new(
            original,
            format!("does not start with a whole number; expected {expected}"),
        ));
    }
    let n: u64 = num
        .parse()
        .map_err(|_| UnitError::new(original, format!("is too large; expected {expected}")))?;
    Ok((n, unit.trim_start()))
}

/// Parses a duration such as `0`, `500ms`, `90s`, `15m`, `1h` or `7d` (one whole number, one
/// unit; a bare number is seconds; spaces around are ignored).
pub fn parse_duration(s: &str) -> Result<Duration, UnitError> {
    let (n, unit) = number_and_unit(s, s.trim(), DURATION_EXPECTED)?;
    let secs = |k: u64| {
        n.checked_mul(k)
            .map(Duration::from_secs)
            .ok_or_else(|| UnitError::new(s, "is too long"))
    };
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86400),
        _ => Err(UnitError::new(
            s,
            format!("has an unknown unit {unit:?}; use ms, s, m, h or d (like \"90s\", \"15m\")"),
        )),
    }
}

/// Writes a duration in the largest unit that holds it exactly (`90s`, `15m`, `1h`, `500ms`,
/// `0`); [`parse_duration`] reads it back to the same value (sub-millisecond parts dropped).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms == 0 {
        return "0".to_owned();
    }
    if !ms.is_multiple_of(1000) {
        return format!("{ms}ms");
    }
    let s = ms / 1000;
    for (k, unit) in [(86400, "d"), (3600, "h"), (60, "m")] {
        if s.is_multiple_of(k) {
            return format!("{}{unit}", s / k);
        }
    }
    format!("{s}s")
}

const SIZE_UNITS: [(&str, u64); 9] = [
    ("B", 1),
    ("KiB", 1 << 10),
    ("MiB", 1 << 20),
    ("GiB", 1 << 30),
    ("TiB", 1 << 40),
    ("KB", 1_000),
    ("MB", 1_000_000),
    ("GB", 1_000_000_000),
    ("TB", 1_000_000_000_000),
];

/// Parses a size such as `512`, `512B`, `64KiB`, `512MiB`, `1GiB`, `2TiB` (binary units) or
/// `500MB`, `2GB` (decimal units); a bare number is bytes.
pub fn parse_size(s: &str) -> Result<u64, UnitError> {
    let (n, unit) = number_and_unit(s, s.trim(), SIZE_EXPECTED)?;
    if unit.is_empty() {
        return Ok(n);
    }
    let Some((_, k)) = SIZE_UNITS.iter().find(|(u, _)| *u == unit) else {
        return Err(UnitError::new(
            s,
            format!(
                "has an unknown unit {unit:?}; use B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000)"
            ),
        ));
    };
    n.checked_mul(*k)
        .ok_or_else(|| UnitError::new(s, "is too large (more than 16 EiB)"))
}

/// Writes a size in the largest binary unit that holds it exactly (`512B`, `64KiB`, `1GiB`);
/// [`parse_size`] reads it back to the same value.
pub fn format_size(bytes: u64) -> String {
    for (unit, k) in SIZE_UNITS[1..5].iter().rev() {
        if bytes != 0 && bytes.is_multiple_of(*k) {
            return format!("{}{unit}", bytes / k);
        }
    }
    format!("{bytes}B")
}

/// A duration from a configuration file: a string such as `"90s"` or a whole number of
/// seconds (the legacy form).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct HumanDuration(pub Duration);

impl From<HumanDuration> for Duration {
    fn from(d: HumanDuration) -> Duration {
        d.0
    }
}

impl fmt::Display for HumanDuration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_duration(self.0))
    }
}

impl serde::Serialize for HumanDuration {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(self.0))
    }
}

impl<'de> serde::Deserialize<'de> for HumanDuration {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<HumanDuration, D::Error> {
        d.deserialize_any(DurationVisitor).map(HumanDuration)
    }
}

/// A size from a configuration file: a string such as `"1GiB"` or a whole number of bytes
/// (the legacy form).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct ByteSize(pub u64);

impl From<ByteSize> for u64 {
    fn from(b: ByteSize) -> u64 {
        b.0
    }
}

impl fmt::Display for ByteSize {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&format_size(self.0))
    }
}

impl serde::Serialize for ByteSize {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_size(self.0))
    }
}

impl<'de> serde::Deserialize<'de> for ByteSize {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<ByteSize, D::Error> {
        d.deserialize_any(SizeVisitor).map(ByteSize)
    }
}

struct DurationVisitor;

impl Visitor<'_> for DurationVisitor {
    type Value = Duration;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(DURATION_EXPECTED)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Duration, E> {
        Ok(Duration::from_secs(v))
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Duration, E> {
        u64::try_from(v)
            .map(Duration::from_secs)
            .map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<Duration, E> {
        parse_duration(v).map_err(E::custom)
    }
}

struct SizeVisitor;

impl Visitor<'_> for SizeVisitor {
    type Value = u64;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(SIZE_EXPECTED)
    }

    fn visit_u64<E: de::Error>(self, v: u64) -> Result<u64, E> {
        Ok(v)
    }

    fn visit_i64<E: de::Error>(self, v: i64) -> Result<u64, E> {
        u64::try_from(v).map_err(|_| E::invalid_value(de::Unexpected::Signed(v), &self))
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<u64, E> {
        parse_size(v).map_err(E::custom)
    }
}

/// `#[serde(deserialize_with = "config_toml::duration::deserialize")]` for a `Duration` field
/// that takes `"90s"` or a whole number of seconds; `deserialize_option` for
/// `Option<Duration>` (add `#[serde(default)]`), and `serialize` writes the string form.
pub mod duration {
    use super::*;

    /// Reads `"90s"` or a whole number of seconds.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        d.deserialize_any(DurationVisitor)
    }

    /// Reads an optional `"90s"` or whole number of seconds.
    pub fn deserialize_option<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Duration>, D::Error> {
        <Option<HumanDuration> as serde::Deserialize>::deserialize(d).map(|o| o.map(|h| h.0))
    }

    /// Writes the string form (`"90s"`).
    pub fn serialize<S: serde::Serializer>(v: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_duration(*v))
    }
}

/// `#[serde(deserialize_with = "config_toml::size::deserialize")]` for a `u64` byte count that
/// takes `"1GiB"` or a whole number of bytes; `deserialize_option` for `Option<u64>` (add
/// `#[serde(default)]`), and `serialize` writes the string form.
pub mod size {
    use super::*;

    /// Reads `"1GiB"` or a whole number of bytes.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
        d.deserialize_any(SizeVisitor)
    }

    /// Reads an optional `"1GiB"` or whole number of bytes.
    pub fn deserialize_option<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
        <Option<ByteSize> as serde::Deserialize>::deserialize(d).map(|o| o.map(|b| b.0))
    }

    /// Writes the string form (`"1GiB"`).
    pub fn serialize<S: serde::Serializer>(v: &u64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&format_size(*v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration(" 1h "), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("30 s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86400)));
        for bad in [
            "",
            "h",
            "1x",
            "-1s",
            "1.5h",
            "1h30m",
            "99999999999999999999d",
            "999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bad_duration_names_the_value_and_what_is_expected() {
        let e = parse_duration("1x").unwrap_err();
        assert_eq!(e.value, "1x");
        assert_eq!(
            e.to_string(),
            "\"1x\" has an unknown unit \"x\"; use ms, s, m, h or d (like \"90s\", \"15m\")"
        );
        let e = parse_duration("soon").unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("\"soon\" does not start with a whole number; expected {DURATION_EXPECTED}")
        );
        assert_eq!(
            parse_duration("999999999999999999d")
                .unwrap_err()
                .to_string(),
            "\"999999999999999999d\" is too long"
        );
    }

    #[test]
    fn durations_format_in_the_largest_exact_unit_and_read_back() {
        for (d, s) in [
            (Duration::ZERO, "0"),
            (Duration::from_millis(500), "500ms"),
            (Duration::from_millis(1500), "1500ms"),
            (Duration::from_secs(90), "90s"),
            (Duration::from_secs(900), "15m"),
            (Duration::from_secs(3600), "1h"),
            (Duration::from_secs(7 * 86400), "7d"),
        ] {
            assert_eq!(format_duration(d), s);
            assert_eq!(parse_duration(s), Ok(d));
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("0"), Ok(0));
        assert_eq!(parse_size("512"), Ok(512));
        assert_eq!(parse_size("512B"), Ok(512));
        assert_eq!(parse_size("64KiB"), Ok(64 * 1024));
        assert_eq!(parse_size("512MiB"), Ok(512 << 20));
        assert_eq!(parse_size(" 1 GiB "), Ok(1 << 30));
        assert_eq!(parse_size("2TiB"), Ok(2 << 40));
        assert_eq!(parse_size("500MB"), Ok(500_000_000));
        assert_eq!(parse_size("2GB"), Ok(2_000_000_000));
        assert_eq!(parse_size("1KB"), Ok(1000));
        assert_eq!(parse_size("3TB"), Ok(3_000_000_000_000));
        for bad in [
            "",
            "GiB",
            "1gb",
            "1Gb",
            "1gib",
            "1K",
            "1G",
            "-1B",
            "1.5GiB",
            "1GiB512MiB",
            "16777216TiB",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_bad_size_names_the_value_and_the_units() {
        let e = parse_size("1gb").unwrap_err();
        assert_eq!(e.value, "1gb");
        assert_eq!(
            e.to_string(),
            "\"1gb\" has an unknown unit \"gb\"; use B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000)"
        );
        assert_eq!(
            parse_size("big").unwrap_err().to_string(),
            format!("\"big\" does not start with a whole number; expected {SIZE_EXPECTED}")
        );
        assert_eq!(
            parse_size("16777216TiB").unwrap_err().to_string(),
            "\"16777216TiB\" is too large (more than 16 EiB)"
        );
    }

    #[test]
    fn sizes_format_in_the_largest_exact_binary_unit_and_read_back() {
        for (n, s) in [
            (0, "0B"),
            (512, "512B"),
            (1536, "1536B"),
            (64 << 10, "64KiB"),
            (512 << 20, "512MiB"),
            (1 << 30, "1GiB"),
            (2 << 40, "2TiB"),
            (1000, "1000B"),
        ] {
            assert_eq!(format_size(n), s);
            assert_eq!(parse_size(s), Ok(n));
        }
    }

    #[derive(Debug, serde::Deserialize, PartialEq)]
    #[serde(deny_unknown_fields)]
    struct Limits {
        #[serde(default, deserialize_with = "duration::deserialize_option")]
        timeout: Option<Duration>,
        #[serde(default, deserialize_with = "size::deserialize_option")]
        max: Option<u64>,
        #[serde(default)]
        grace: Option<HumanDuration>,
        #[serde(default)]
        quota: Option<ByteSize>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    struct Plain {
        #[serde(deserialize_with = "duration::deserialize")]
        timeout: Duration,
        #[serde(deserialize_with = "size::deserialize")]
        max: u64,
    }

    #[test]
    fn toml_keys_take_the_string_or_the_legacy_integer() {
        let strings: Limits = crate::from_str(
            "timeout = \"30s\"\nmax = \"1GiB\"\ngrace = \"1h\"\nquota = \"2TiB\"\n",
            &[],
        )
        .unwrap();
        let integers: Limits = crate::from_str(
            "timeout = 30\nmax = 1073741824\ngrace = 3600\nquota = 2199023255552\n",
            &[],
        )
        .unwrap();
        assert_eq!(strings, integers);
        assert_eq!(
            strings,
            Limits {
                timeout: Some(Duration::from_secs(30)),
                max: Some(1 << 30),
                grace: Some(HumanDuration(Duration::from_secs(3600))),
                quota: Some(ByteSize(2 << 40)),
            }
        );
        let empty: Limits = crate::from_str("", &[]).unwrap();
        assert_eq!(empty.timeout, None);
        assert_eq!(empty.quota, None);
        let plain: Plain = crate::from_str("timeout = \"500ms\"\nmax = \"64KiB\"\n", &[]).unwrap();
        assert_eq!(
            (plain.timeout, plain.max),
            (Duration::from_millis(500), 65536)
        );
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Renamed {
        #[serde(alias = "timeout_secs")]
        timeout: Option<HumanDuration>,
    }

    #[test]
    fn a_key_and_its_older_name_together_are_refused() {
        let e =
            crate::from_str::<Renamed>("timeout = \"1m\"\ntimeout_secs = 60\n", &[]).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("timeout"));
        assert_eq!(
            e.message,
            "given twice (a key and its older name are one setting); keep one"
        );
        let old: Renamed = crate::from_str("timeout_secs = 60\n", &[]).unwrap();
        assert_eq!(old.timeout, Some(HumanDuration(Duration::from_secs(60))));
    }

    #[test]
    fn a_bad_toml_value_names_the_line_key_and_value() {
        let e = crate::from_str::<Limits>("\n[x]\n", &[]).unwrap_err();
        assert_eq!(e.key.as_deref(), Some("x"), "{e}");
        let e = crate::from_str::<Limits>("timeout = \"30s\"\nmax = \"1gb\"\n", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "line 2: max: \"1gb\" has an unknown unit \"gb\"; use B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000)"
        );
        let e = crate::from_str::<Limits>("\ngrace = \"soon\"\n", &[]).unwrap_err();
        assert_eq!((e.line, e.key.as_deref()), (Some(2), Some("grace")));
        assert!(e.message.starts_with("\"soon\" does not start"), "{e}");
        let e = crate::from_str::<Limits>("timeout = -5\n", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("line 1: timeout: expected {DURATION_EXPECTED}, found the number -5")
        );
        let e = crate::from_str::<Limits>("quota = 1.5\n", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("line 1: quota: expected {SIZE_EXPECTED}, found the number 1.5")
        );
        let e = crate::from_str::<Plain>("timeout = true\nmax = 1\n", &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("line 1: timeout: expected {DURATION_EXPECTED}, found true")
        );
    }
}
