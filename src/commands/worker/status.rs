//! `rdctl worker status`: the zones the worker runs, their images, admissions and errors, the
//! node's conditions, or with `--packages` the packages each zone holds.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

use super::StatusArgs;

pub(super) fn run(args: StatusArgs) -> anyhow::Result<ExitCode> {
    if args.packages {
        return packages(&args);
    }
    let report = worker_runtime::status_report(&args.config)
        .with_context(|| format!("worker status with {}", args.config.display()))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &report)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let rows = report.zones;
    let rows: Vec<[String; 8]> = rows
        .iter()
        .map(|r| {
            let s = &r.status;
            let mut phase = s.phase.to_string();
            if !r.in_manifests {
                phase.push_str(" (no manifest)");
            }
            // A refusal reads rule first, then the reason (the reference and digest are in
            // other columns): the rule is never what the width cuts off.
            let error = match &s.denial {
                Some(d) => {
                    let rule = d.rule.as_deref().unwrap_or("no rule matches");
                    let rule = if args.wide {
                        rule
                    } else {
                        rule.split(" (").next().unwrap_or(rule)
                    };
                    Some(format!("[{rule}] {}", d.message))
                }
                None => s.last_error.clone(),
            };
            [
                s.zone.clone(),
                phase,
                digest_cell(s.desired_digest.as_ref(), args.wide),
                digest_cell(s.current_digest.as_ref(), args.wide),
                digest_cell(s.previous_digest.as_ref(), args.wide),
                admission_cell(s.admission.as_ref(), args.wide),
                s.image.clone(),
                error_cell(error.as_deref(), args.wide),
            ]
        })
        .collect();
    write_table(&mut out, &HEADER, &rows)?;
    if let Some(node) = &report.node {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        for line in volume_lines(&node.volumes, now) {
            writeln!(out, "{line}")?;
        }
    }
    if let Some(line) = report
        .node
        .as_ref()
        .and_then(|n| conditions_line(n, args.wide))
    {
        writeln!(out, "{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// The node's conditions under the table: `conditions: DiskPressure=False
/// ResourcePressure=True (ZonesNotAdmitted: …)`, the reason and message for those that hold.
fn conditions_line(node: &worker_runtime::NodeStatus, wide: bool) -> Option<String> {
    if node.conditions.is_empty() {
        return None;
    }
    let words: Vec<String> = node
        .conditions
        .iter()
        .map(|c| match c.status {
            worker_runtime::ConditionStatus::False => format!("{}=False", c.kind),
            status => format!(
                "{}={status:?} ({}: {})",
                c.kind,
                c.reason,
                error_cell(Some(&c.message), wide)
            ),
        })
        .collect();
    Some(format!("conditions: {}", words.join(" ")))
}

/// One line per volume under the table: held ones with their zone, retained ones (released,
/// waiting for their zone to come back, or for `gc_grace` with `reclaim = "delete"`) with how
/// long ago they were released.
fn volume_lines(volumes: &[worker_runtime::volume::VolumeRecord], now: u64) -> Vec<String> {
    volumes
        .iter()
        .map(|v| {
            let size = v.size_bytes.map_or(String::new(), |b| {
                format!(", {}", crate::commands::output::human_size(b))
            });
            let state = match v.released_unix {
                None => "held".to_owned(),
                Some(t) => format!("released {}s ago", now.saturating_sub(t)),
            };
            let reclaim = match v.reclaim {
                worker_runtime::Reclaim::Retain => "retain",
                worker_runtime::Reclaim::Delete => "delete",
            };
            format!(
                "volume {}: zone {} at {}{size}, {state}, reclaim={reclaim}",
                v.id, v.zone, v.path
            )
        })
        .collect()
}

/// `worker status --packages`: one line per zone and package (zones whose packages cannot be
/// read say why), or the whole list as JSON.
fn packages(args: &StatusArgs) -> anyhow::Result<ExitCode> {
    let zones = worker_runtime::zone_packages(&args.config)
        .with_context(|| format!("worker status --packages with {}", args.config.display()))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &zones)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let mut rows: Vec<[String; 3]> = Vec::new();
    for z in &zones {
        let digest = digest_cell(z.digest.as_ref(), args.wide);
        if z.packages.is_empty() {
            let why = match (&z.digest, &z.error) {
                (None, _) => "- (not running an image yet)".to_owned(),
                (Some(_), Some(e)) => format!("- ({})", error_cell(Some(e), args.wide)),
                (Some(_), None) => "-".to_owned(),
            };
            rows.push([z.zone.clone(), digest.clone(), why]);
        }
        for p in &z.packages {
            rows.push([z.zone.clone(), digest.clone(), p.clone()]);
        }
    }
    write_table(&mut out, &["ZONE", "DIGEST", "PACKAGE"], &rows)?;
    Ok(ExitCode::SUCCESS)
}

/// The status table's columns.
const HEADER: [&str; 8] = [
    "ZONE",
    "PHASE",
    "DESIRED",
    "CURRENT",
    "PREVIOUS",
    "ADMITTED BY",
    "IMAGE",
    "LAST ERROR",
];

/// What admitted the running image: `-` without a policy; `rule N` and how many keys and
/// attestations (with `--wide`: the rule's pattern, the key ids and the predicate types).
fn admission_cell(a: Option<&worker_runtime::Admission>, wide: bool) -> String {
    let Some(a) = a else {
        return "-".to_owned();
    };
    let Some(rule) = &a.rule else {
        return "default".to_owned();
    };
    if wide {
        let mut s = rule.clone();
        if !a.keys.is_empty() {
            s.push_str(&format!(" keys={}", a.keys.join(",")));
        }
        if !a.attestations.is_empty() {
            s.push_str(&format!(" attestations={}", a.attestations.join(",")));
        }
        return s;
    }
    let mut s = rule.split(" (").next().unwrap_or(rule).replace(' ', "-");
    if !a.keys.is_empty() {
        s.push_str(&format!(",{}key", a.keys.len()));
    }
    if !a.attestations.is_empty() {
        s.push_str(&format!(",{}att", a.attestations.len()));
    }
    s
}

/// A digest as docker and crictl show it (`sha256:` and 12 hex digits), or whole with `--wide`.
fn digest_cell(d: Option<&validator::Digest>, wide: bool) -> String {
    match d {
        None => "-".to_owned(),
        Some(d) if wide => d.to_string(),
        Some(d) => {
            let (alg, hex) = d.as_str().split_once(':').unwrap_or(("", d.as_str()));
            format!("{alg}:{}", &hex[..hex.len().min(12)])
        }
    }
}

/// Longest error text in the table without `--wide`.
const ERROR_WIDTH: usize = 72;

/// An error on one line: its first line, cut at [`ERROR_WIDTH`] characters unless `wide`.
fn error_cell(e: Option<&str>, wide: bool) -> String {
    let Some(e) = e else {
        return "-".to_owned();
    };
    let line = e.lines().next().unwrap_or_default();
    if wide || line.chars().count() <= ERROR_WIDTH {
        return line.to_owned();
    }
    let mut cut: String = line.chars().take(ERROR_WIDTH - 1).collect();
    cut.push('…');
    cut
}

/// Columns padded to their widest cell, two spaces apart; the last column is not padded.
fn write_table<const N: usize>(
    out: &mut impl std::io::Write,
    header: &[&str; N],
    rows: &[[String; N]],
) -> std::io::Result<()> {
    let mut widths = header.map(|h| h.chars().count());
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |out: &mut dyn std::io::Write, cells: &[&str]| -> std::io::Result<()> {
        let last = cells.len() - 1;
        let mut text = String::new();
        for (i, c) in cells.iter().enumerate() {
            text.push_str(c);
            if i < last {
                let pad = widths[i] - c.chars().count() + 2;
                text.extend(std::iter::repeat_n(' ', pad));
            }
        }
        writeln!(out, "{}", text.trim_end())
    };
    line(out, header)?;
    for r in rows {
        let cells: Vec<&str> = r.iter().map(String::as_str).collect();
        line(out, &cells)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn volumes_are_listed_held_or_released_with_their_reclaim() {
        let v = |id: &str, size, released, reclaim| worker_runtime::volume::VolumeRecord {
            id: id.into(),
            zone: "web".into(),
            path: "/var/hello".into(),
            size_bytes: size,
            reclaim,
            released_unix: released,
        };
        let lines = volume_lines(
            &[
                v(
                    "web.var-hello",
                    Some(64 << 20),
                    None,
                    worker_runtime::Reclaim::Retain,
                ),
                v("old", None, Some(100), worker_runtime::Reclaim::Delete),
            ],
            160,
        );
        assert_eq!(
            lines,
            [
                "volume web.var-hello: zone web at /var/hello, 64.0 MiB, held, reclaim=retain",
                "volume old: zone web at /var/hello, released 60s ago, reclaim=delete",
            ]
        );
    }

    #[test]
    fn the_table_aligns_columns_and_shortens_digests_and_errors() {
        let d = validator::Digest::sha256(b"x");
        let long = format!("image a/b:1 not found: {}\nsecond line", "x".repeat(100));
        let rows = vec![
            [
                "web".to_owned(),
                "Running".to_owned(),
                digest_cell(Some(&d), false),
                digest_cell(None, false),
                "127.0.0.1:5000/a/b:1".to_owned(),
                error_cell(Some(&long), false),
            ],
            [
                "db-longer".to_owned(),
                "Failed".to_owned(),
                "-".to_owned(),
                "-".to_owned(),
                "x/y".to_owned(),
                error_cell(None, false),
            ],
        ];
        let mut out = Vec::new();
        write_table(
            &mut out,
            &["ZONE", "PHASE", "DESIRED", "CURRENT", "IMAGE", "LAST ERROR"],
            &rows,
        )
        .unwrap();
        let text = String::from_utf8(out).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 3, "{text}");
        // Every column starts at the same offset on every line.
        let at = |l: &str, cell: &str| l.find(cell).unwrap();
        assert_eq!(at(lines[0], "PHASE"), at(lines[1], "Running"));
        assert_eq!(at(lines[0], "PHASE"), at(lines[2], "Failed"));
        assert_eq!(at(lines[0], "IMAGE"), at(lines[2], "x/y"));
        let short = &d.as_str()[..19];
        assert!(lines[1].contains(&format!("{short}  ")), "{text}");
        assert!(
            !text.contains("second line") && lines[1].ends_with('…'),
            "{text}"
        );
        assert_eq!(
            error_cell(Some(&long), true).len(),
            long.find('\n').unwrap()
        );
        assert_eq!(digest_cell(Some(&d), true), d.to_string());
    }
}
