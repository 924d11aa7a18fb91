//! Terminal output the commands share: tables with padded columns, sizes in binary units and
//! ages ("3 days ago").

use std::io::Write;

/// Prints rows under headers, columns padded to their widest cell (the last one unpadded).
pub(crate) fn table(
    w: &mut impl Write,
    headers: &[&str],
    rows: &[Vec<String>],
) -> std::io::Result<()> {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (i, cell) in r.iter().enumerate() {
            widths[i] = widths[i].max(cell.chars().count());
        }
    }
    let mut line = |cells: Vec<&str>| -> std::io::Result<()> {
        let last = cells.len() - 1;
        let mut s = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == last {
                s.push_str(c);
            } else {
                s.push_str(&format!("{c:<w$}  ", w = widths[i]));
            }
        }
        writeln!(w, "{}", s.trim_end())
    };
    line(headers.to_vec())?;
    for r in rows {
        line(r.iter().map(String::as_str).collect())?;
    }
    Ok(())
}

/// `1.5 MiB`.
pub(crate) fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut u = 0;
    while v >= 1024.0 && u < UNITS.len() - 1 {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// `3 days ago`, from an RFC 3339 time and the current time (`-` when it is not one).
/// A time before the Unix epoch (cosign's Go zero time `0001-01-01T00:00:00Z`) is `-`
/// too, not "2025 years ago".
pub(crate) fn age(created: &str, now: i64) -> String {
    match validator::parse_rfc3339(created) {
        Some(t) if t >= 0 => validator::age(t, now),
        _ => "-".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rfc3339_and_age() {
        assert_eq!(age("yesterday", 0), "-");
        assert_eq!(age("0001-01-01T00:00:00Z", 1_800_000_000), "-");
        assert_eq!(age("1970-01-01T00:00:00Z", 3 * 86_400), "3 days ago");
        assert_eq!(age("1970-01-01T00:00:00Z", 59), "59 seconds ago");
        assert_eq!(age("1970-01-01T00:00:00Z", 3600), "1 hour ago");
        assert_eq!(human_size(512), "512 B");
        assert_eq!(human_size(1536), "1.5 KiB");
    }
}
