//! Garbage collection's metrics: runs, what they deleted and kept, the last run's duration.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;

use super::GcReport;
use crate::metrics::MetricSource;

/// Garbage collection totals.
#[derive(Debug, Default)]
struct GcCounters {
    runs_ok: u64,
    runs_failed: u64,
    deleted: BTreeMap<&'static str, u64>,
    deleted_bytes: u64,
    kept_held: u64,
    last_duration: f64,
}

/// Garbage collection totals of this process, rendered with the registry's metrics.
#[derive(Debug, Default)]
pub struct GcMetrics(Mutex<GcCounters>);

impl GcMetrics {
    /// Records a finished garbage collection run (`None`: it failed).
    pub fn run(&self, report: Option<&GcReport>) {
        let mut g = self.0.lock().expect("metrics lock");
        let Some(r) = report else {
            g.runs_failed += 1;
            return;
        };
        g.runs_ok += 1;
        if r.dry_run {
            return;
        }
        for (kind, n) in [
            ("blob", r.deleted_blobs),
            ("blob_link", r.deleted_blob_links),
            ("manifest_link", r.deleted_manifest_links),
            ("record", r.deleted_records),
        ] {
            *g.deleted.entry(kind).or_default() += n;
        }
        g.deleted_bytes += r.deleted_bytes;
        g.kept_held += r.kept_held;
        g.last_duration = r.elapsed_secs;
    }
}

impl MetricSource for GcMetrics {
    fn render(&self, out: &mut String) {
        let g = self.0.lock().expect("metrics lock");
        let _ = writeln!(
            out,
            "# TYPE registry_gc_runs_total counter\nregistry_gc_runs_total{{result=\"ok\"}} {}\nregistry_gc_runs_total{{result=\"failed\"}} {}",
            g.runs_ok, g.runs_failed
        );
        out.push_str("# TYPE registry_gc_deleted_objects_total counter\n");
        for kind in ["blob", "blob_link", "manifest_link", "record"] {
            let _ = writeln!(
                out,
                "registry_gc_deleted_objects_total{{kind=\"{kind}\"}} {}",
                g.deleted.get(kind).copied().unwrap_or(0)
            );
        }
        let _ = writeln!(
            out,
            "# TYPE registry_gc_deleted_bytes_total counter\nregistry_gc_deleted_bytes_total {}",
            g.deleted_bytes
        );
        let _ = writeln!(
            out,
            "# TYPE registry_gc_kept_held_total counter\nregistry_gc_kept_held_total {}",
            g.kept_held
        );
        let _ = writeln!(
            out,
            "# TYPE registry_gc_last_duration_seconds gauge\nregistry_gc_last_duration_seconds {}",
            g.last_duration
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_runs_and_deletions() {
        let m = GcMetrics::default();
        let report = crate::gc::GcReport {
            deleted_blobs: 2,
            deleted_bytes: 300,
            deleted_blob_links: 3,
            ..Default::default()
        };
        m.run(Some(&report));
        m.run(None);
        let mut text = String::new();
        m.render(&mut text);
        assert!(text.contains("registry_gc_runs_total{result=\"ok\"} 1"));
        assert!(text.contains("registry_gc_runs_total{result=\"failed\"} 1"));
        assert!(text.contains("registry_gc_deleted_objects_total{kind=\"blob\"} 2"));
        assert!(text.contains("registry_gc_deleted_objects_total{kind=\"blob_link\"} 3"));
        assert!(text.contains("registry_gc_deleted_bytes_total 300"));
    }
}
