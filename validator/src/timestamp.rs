//! The toolchain's one RFC 3339 formatter and parser: whole seconds since the epoch as UTC,
//! `YYYY-MM-DDTHH:MM:SSZ` (an image config's `created`, token answers' `issued_at`), the
//! reverse for configs written by any tool, the civil-date arithmetic both need (also for
//! pkg(5)'s `YYYYMMDDTHHMMSSZ`), and the "3 days ago" people read in tables and pages.
//!
//! Written here rather than taken from a date crate: it is a dozen lines of arithmetic, its
//! output feeds image digests (a build's `created`), so it must never change with a
//! dependency, and `validator` is the lowest crate every user of it already depends on.

/// RFC 3339 UTC time of `secs` seconds since 1970-01-01T00:00:00Z, to the second
/// (`1970-01-01T00:00:00Z`).
pub fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

/// Seconds since the epoch of a UTC civil time (Howard Hinnant's days-from-civil), the
/// inverse of [`rfc3339`]. No range checks: callers parse the fields.
pub fn unix_from_civil(y: i64, mo: i64, d: i64, h: i64, mi: i64, s: i64) -> i64 {
    let y = if mo <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (mo + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    days * 86_400 + h * 3600 + mi * 60 + s
}

/// Seconds since the epoch of an RFC 3339 time (`2024-01-02T03:04:05Z`; fractions dropped,
/// `+HH:MM`/`-HH:MM` offsets applied), `None` when it is not one.
pub fn parse_rfc3339(t: &str) -> Option<i64> {
    let b = t.as_bytes();
    if b.len() < 20 || b[4] != b'-' || b[7] != b'-' || !matches!(b[10], b'T' | b't' | b' ') {
        return None;
    }
    let n = |r: std::ops::Range<usize>| -> Option<i64> {
        let f = t.get(r)?;
        f.bytes()
            .all(|c| c.is_ascii_digit())
            .then(|| f.parse().ok())?
    };
    let (y, mo, d) = (n(0..4)?, n(5..7)?, n(8..10)?);
    let (h, mi, s) = (n(11..13)?, n(14..16)?, n(17..19)?);
    if !(1..=12).contains(&mo) || !(1..=31).contains(&d) || h > 23 || mi > 59 || s > 60 {
        return None;
    }
    let mut rest = t.get(19..)?;
    if let Some(frac) = rest.strip_prefix('.') {
        rest = frac.trim_start_matches(|c: char| c.is_ascii_digit());
    }
    let offset = match rest {
        "Z" | "z" => 0,
        o if o.len() == 6 && o.as_bytes()[3] == b':' => {
            let sign = match o.as_bytes()[0] {
                b'+' => 1,
                b'-' => -1,
                _ => return None,
            };
            let oh: i64 = o.get(1..3)?.parse().ok()?;
            let om: i64 = o.get(4..6)?.parse().ok()?;
            sign * (oh * 3600 + om * 60)
        }
        _ => return None,
    };
    Some(unix_from_civil(y, mo, d, h, mi, s) - offset)
}

/// How long before `now` the time `then` (both seconds since the epoch) was, as a person
/// reads it: `just now`, `59 seconds ago`, `1 hour ago`, `3 days ago`; a time after `now`
/// (clock skew) is `in the future`.
pub fn age(then: i64, now: i64) -> String {
    let d = now - then;
    let (n, unit) = match d {
        ..0 => return "in the future".to_owned(),
        0 => return "just now".to_owned(),
        1..60 => (d, "second"),
        60..3600 => (d / 60, "minute"),
        3600..86_400 => (d / 3600, "hour"),
        86_400..2_592_000 => (d / 86_400, "day"),
        2_592_000..31_536_000 => (d / 2_592_000, "month"),
        _ => (d / 31_536_000, "year"),
    };
    format!("{n} {unit}{} ago", if n == 1 { "" } else { "s" })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_is_the_inverse_of_format_and_takes_offsets() {
        for secs in [0, 951_782_400, 951_868_799, 1_704_164_645, 4_102_444_800] {
            assert_eq!(parse_rfc3339(&rfc3339(secs)), Some(secs as i64));
        }
        assert_eq!(
            parse_rfc3339("2024-01-02T04:04:05.123+01:00"),
            Some(1_704_164_645)
        );
        assert_eq!(
            parse_rfc3339("2024-01-01T22:04:05-05:00"),
            Some(1_704_164_645)
        );
        for bad in [
            "",
            "2024-01-02",
            "2024-13-02T03:04:05Z",
            "2024-01-02T03:04:05",
            "2024-01-02T03:04:05+0100",
            "x024-01-02T03:04:05Z",
        ] {
            assert_eq!(parse_rfc3339(bad), None, "{bad}");
        }
    }

    #[test]
    fn ages() {
        assert_eq!(age(100, 100), "just now");
        assert_eq!(age(0, 59), "59 seconds ago");
        assert_eq!(age(0, 120), "2 minutes ago");
        assert_eq!(age(0, 3600), "1 hour ago");
        assert_eq!(age(0, 86_400 * 3), "3 days ago");
        assert_eq!(age(200, 100), "in the future");
    }

    #[test]
    fn rfc3339_dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339(1_704_164_645), "2024-01-02T03:04:05Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(rfc3339(951_868_799), "2000-02-29T23:59:59Z");
        assert_eq!(rfc3339(1_767_225_599), "2025-12-31T23:59:59Z");
        assert_eq!(rfc3339(4_107_542_400), "2100-03-01T00:00:00Z");
    }
}
