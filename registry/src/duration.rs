//! Durations in configuration files and flags: `0`, `500ms`, `90s`, `15m`, `1h`, `7d`.

use std::time::Duration;

/// Parses a duration such as `0`, `500ms`, `90s`, `15m`, `1h` or `7d` (one number, one unit;
/// a bare number is seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: u64 = num
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (like 90s, 15m, 1h, 7d)"))?;
    let secs = |k: u64| {
        n.checked_mul(k)
            .map(Duration::from_secs)
            .ok_or_else(|| format!("{s:?} is too long"))
    };
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "" | "s" => secs(1),
        "m" => secs(60),
        "h" => secs(3600),
        "d" => secs(86400),
        _ => Err(format!(
            "{s:?} has an unknown unit {unit:?} (use ms, s, m, h or d)"
        )),
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
        assert_eq!(parse_duration("7d"), Ok(Duration::from_secs(7 * 86400)));
        for bad in [
            "",
            "h",
            "1x",
            "-1s",
            "1.5h",
            "1h30m",
            "99999999999999999999d",
        ] {
            assert!(parse_duration(bad).is_err(), "{bad:?}");
        }
    }
}
