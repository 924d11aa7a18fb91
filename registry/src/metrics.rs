//! Prometheus metrics in the text exposition format, kept without an outside crate: requests by
//! route, method and status; bytes in and out; upload and commit durations; store operations
//! and errors (through [`crate::storage::Instrumented`]). The histograms are
//! [`validator::Histogram`], the one the worker's metrics use too.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use validator::Histogram;

/// Upper bounds (seconds) of the duration histogram buckets.
const BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

/// Operations and failures per (store, operation).
type StoreOps = BTreeMap<(&'static str, &'static str), (u64, u64)>;

/// The registry's metrics. Shared by the middleware, the handlers and the store wrapper.
#[derive(Debug)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, String, u16), u64>>,
    store_ops: Mutex<StoreOps>,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    upload: Mutex<Histogram>,
    commit: Mutex<Histogram>,
    gc: Mutex<GcCounters>,
    /// Quota usage and refusals (`crate::governance::quota`).
    pub(crate) quota: crate::governance::quota::QuotaMetrics,
    retention: Mutex<(u64, u64, u64)>,
    events: Mutex<EventCounters>,
    scrub: Mutex<ScrubCounters>,
    /// Each `[[sync]]` entry's state as last read from the store.
    sync: Mutex<BTreeMap<String, crate::mirror::SyncState>>,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            requests: Mutex::default(),
            store_ops: Mutex::default(),
            bytes_in: AtomicU64::default(),
            bytes_out: AtomicU64::default(),
            upload: Mutex::new(Histogram::new(BUCKETS)),
            commit: Mutex::new(Histogram::new(BUCKETS)),
            gc: Mutex::default(),
            quota: Default::default(),
            retention: Mutex::default(),
            events: Mutex::default(),
            scrub: Mutex::default(),
            sync: Mutex::default(),
        }
    }
}

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

/// Event outbox counters per endpoint: (recorded, delivered, failed attempts, dead) and the
/// pending gauge of the last delivery pass.
#[derive(Debug, Default)]
struct EventCounters {
    totals: BTreeMap<String, [u64; 4]>,
    pending: BTreeMap<String, u64>,
}

/// Scrub totals.
#[derive(Debug, Default)]
struct ScrubCounters {
    runs_ok: u64,
    runs_failed: u64,
    bytes: u64,
    corrupt: u64,
    manifest_problems: u64,
    last_problems: u64,
}

impl Metrics {
    /// Records a `[[sync]]` entry's state as read from (or written to) the store.
    pub fn sync_state(&self, name: &str, state: &crate::mirror::SyncState) {
        self.sync
            .lock()
            .expect("metrics lock")
            .insert(name.to_owned(), state.clone());
    }

    fn render_sync(&self, out: &mut String) {
        // The families are declared without `[[sync]]` entries too (no samples then).
        let sync = self.sync.lock().expect("metrics lock");
        let now = std::time::SystemTime::now()
            .duration_since(std::time::SystemTime::UNIX_EPOCH)
            .map(|d| d.as_secs_f64())
            .unwrap_or(0.0);
        let family =
            |out: &mut String,
             name: &str,
             kind: &str,
             value: &dyn Fn(&crate::mirror::SyncState) -> Option<f64>| {
                let _ = writeln!(out, "# TYPE {name} {kind}");
                for (entry, s) in sync.iter() {
                    if let Some(v) = value(s) {
                        let _ = writeln!(out, "{name}{{sync=\"{entry}\"}} {v}");
                    }
                }
            };
        let last = |f: fn(&crate::mirror::RunOutcome) -> u64| {
            move |s: &crate::mirror::SyncState| s.last_run.as_ref().map(|r| f(r) as f64)
        };
        family(
            out,
            "registry_sync_last_success_timestamp_seconds",
            "gauge",
            &|s| s.last_success_ms.map(|t| t as f64 / 1000.0),
        );
        family(out, "registry_sync_lag_seconds", "gauge", &|s| {
            s.last_success_ms
                .map(|t| (now - t as f64 / 1000.0).max(0.0))
        });
        family(out, "registry_sync_last_run_failed", "gauge", &|s| {
            s.last_run
                .as_ref()
                .map(|r| f64::from(u8::from(!r.errors.is_empty())))
        });
        family(
            out,
            "registry_sync_last_run_images",
            "gauge",
            &last(|r| r.images),
        );
        family(
            out,
            "registry_sync_last_run_images_copied",
            "gauge",
            &last(|r| r.images_copied),
        );
        family(
            out,
            "registry_sync_last_run_blobs_copied",
            "gauge",
            &last(|r| r.blobs_copied),
        );
        family(
            out,
            "registry_sync_last_run_bytes_copied",
            "gauge",
            &last(|r| r.bytes_copied),
        );
        family(
            out,
            "registry_sync_last_run_tags_deleted",
            "gauge",
            &last(|r| r.tags_deleted),
        );
        let _ = writeln!(out, "# TYPE registry_sync_runs_total counter");
        for (entry, s) in sync.iter() {
            let _ = writeln!(
                out,
                "registry_sync_runs_total{{sync=\"{entry}\",result=\"ok\"}} {}\nregistry_sync_runs_total{{sync=\"{entry}\",result=\"failed\"}} {}",
                s.runs_ok, s.runs_failed
            );
        }
    }

    /// Records a finished scrub (`None`: it failed).
    pub fn scrub_run(&self, report: Option<&crate::scrub::ScrubReport>) {
        let mut s = self.scrub.lock().expect("metrics lock");
        let Some(r) = report else {
            s.runs_failed += 1;
            return;
        };
        s.runs_ok += 1;
        s.bytes += r.bytes_read;
        s.corrupt += r.corrupt_blobs.len() as u64;
        s.manifest_problems += r.manifest_problems.len() as u64;
        s.last_problems = (r.corrupt_blobs.len() + r.manifest_problems.len()) as u64;
    }

    fn event_count(&self, endpoint: &str, i: usize) {
        let mut e = self.events.lock().expect("metrics lock");
        e.totals.entry(endpoint.to_owned()).or_default()[i] += 1;
    }

    /// Counts an event written to `endpoint`'s outbox.
    pub fn event_recorded(&self, endpoint: &str) {
        self.event_count(endpoint, 0);
    }

    /// Counts an event delivered to `endpoint`.
    pub fn event_delivered(&self, endpoint: &str) {
        self.event_count(endpoint, 1);
    }

    /// Counts a failed delivery attempt to `endpoint`.
    pub fn event_failed(&self, endpoint: &str) {
        self.event_count(endpoint, 2);
    }

    /// Counts an event given up after `endpoint`'s `max_age`.
    pub fn event_dead(&self, endpoint: &str) {
        self.event_count(endpoint, 3);
    }

    /// Sets how many events wait in `endpoint`'s outbox (seen by the last delivery pass).
    pub fn events_pending(&self, endpoint: &str, n: u64) {
        let mut e = self.events.lock().expect("metrics lock");
        e.pending.insert(endpoint.to_owned(), n);
    }

    /// Counts one answered request.
    pub fn request(
        &self,
        route: &'static str,
        method: &str,
        status: u16,
        bytes_in: u64,
        bytes_out: u64,
    ) {
        *self
            .requests
            .lock()
            .expect("metrics lock")
            .entry((route, method.to_owned(), status))
            .or_default() += 1;
        self.bytes_in.fetch_add(bytes_in, Ordering::Relaxed);
        self.bytes_out.fetch_add(bytes_out, Ordering::Relaxed);
    }

    /// Records how long an upload request (POST body, PATCH) took.
    pub fn upload_duration(&self, d: Duration) {
        self.upload.lock().expect("metrics lock").observe(d);
    }

    /// Records how long closing an upload (verify, publish, link) took.
    pub fn commit_duration(&self, d: Duration) {
        self.commit.lock().expect("metrics lock").observe(d);
    }

    /// Records a finished garbage collection run (`None`: it failed).
    pub fn gc_run(&self, report: Option<&crate::gc::GcReport>) {
        let mut g = self.gc.lock().expect("metrics lock");
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

    /// Records a finished retention run (`None`: it failed): runs, tags and manifests removed.
    pub fn retention_run(&self, plan: Option<&crate::governance::RetentionPlan>) {
        let mut r = self.retention.lock().expect("metrics lock");
        r.0 += 1;
        if let Some(p) = plan.filter(|p| !p.dry_run) {
            r.1 += p.tags.len() as u64;
            r.2 += p.manifests.len() as u64;
        }
    }

    /// Counts one store operation on `store`, and whether it failed (not-found answers count
    /// as successes).
    pub fn store_op(&self, store: &'static str, op: &'static str, failed: bool) {
        let mut m = self.store_ops.lock().expect("metrics lock");
        let e = m.entry((store, op)).or_default();
        e.0 += 1;
        if failed {
            e.1 += 1;
        }
    }

    /// The exposition text.
    pub fn render(&self) -> String {
        let mut out = String::new();
        out.push_str("# TYPE registry_http_requests_total counter\n");
        for ((route, method, status), n) in self.requests.lock().expect("metrics lock").iter() {
            let _ = writeln!(
                out,
                "registry_http_requests_total{{route=\"{route}\",method=\"{method}\",status=\"{status}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# TYPE registry_http_request_bytes_total counter\nregistry_http_request_bytes_total {}",
            self.bytes_in.load(Ordering::Relaxed)
        );
        let _ = writeln!(
            out,
            "# TYPE registry_http_response_bytes_total counter\nregistry_http_response_bytes_total {}",
            self.bytes_out.load(Ordering::Relaxed)
        );
        self.upload
            .lock()
            .expect("metrics lock")
            .render(&mut out, "registry_upload_duration_seconds");
        self.commit
            .lock()
            .expect("metrics lock")
            .render(&mut out, "registry_commit_duration_seconds");
        {
            let g = self.gc.lock().expect("metrics lock");
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
        self.quota.render(&mut out);
        {
            let r = self.retention.lock().expect("metrics lock");
            let _ = writeln!(
                out,
                "# TYPE registry_retention_runs_total counter\nregistry_retention_runs_total {}\n# TYPE registry_retention_removed_total counter\nregistry_retention_removed_total{{kind=\"tag\"}} {}\nregistry_retention_removed_total{{kind=\"manifest\"}} {}",
                r.0, r.1, r.2
            );
        }
        {
            let s = self.scrub.lock().expect("metrics lock");
            let _ = writeln!(
                out,
                "# TYPE registry_scrub_runs_total counter\nregistry_scrub_runs_total{{result=\"ok\"}} {}\nregistry_scrub_runs_total{{result=\"failed\"}} {}",
                s.runs_ok, s.runs_failed
            );
            for (name, kind, v) in [
                ("registry_scrub_bytes_total", "counter", s.bytes),
                ("registry_scrub_corrupt_blobs_total", "counter", s.corrupt),
                (
                    "registry_scrub_manifest_problems_total",
                    "counter",
                    s.manifest_problems,
                ),
                ("registry_scrub_last_problems", "gauge", s.last_problems),
            ] {
                let _ = writeln!(out, "# TYPE {name} {kind}\n{name} {v}");
            }
        }
        {
            let e = self.events.lock().expect("metrics lock");
            out.push_str("# TYPE registry_events_pending gauge\n");
            for (ep, n) in &e.pending {
                let _ = writeln!(out, "registry_events_pending{{endpoint=\"{ep}\"}} {n}");
            }
            for (i, name) in [
                "registry_events_recorded_total",
                "registry_events_delivered_total",
                "registry_events_failed_total",
                "registry_events_dead_total",
            ]
            .iter()
            .enumerate()
            {
                let _ = writeln!(out, "# TYPE {name} counter");
                for (ep, t) in &e.totals {
                    let _ = writeln!(out, "{name}{{endpoint=\"{ep}\"}} {}", t[i]);
                }
            }
        }
        self.render_sync(&mut out);
        out.push_str("# TYPE registry_store_operations_total counter\n");
        let ops = self.store_ops.lock().expect("metrics lock");
        for ((store, op), (n, _)) in ops.iter() {
            let _ = writeln!(
                out,
                "registry_store_operations_total{{store=\"{store}\",op=\"{op}\"}} {n}"
            );
        }
        out.push_str("# TYPE registry_store_errors_total counter\n");
        for ((store, op), (_, e)) in ops.iter() {
            let _ = writeln!(
                out,
                "registry_store_errors_total{{store=\"{store}\",op=\"{op}\"}} {e}"
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = Metrics::default();
        m.request("blob", "GET", 200, 0, 10);
        m.request("blob", "GET", 200, 0, 5);
        m.upload_duration(Duration::from_millis(30));
        m.store_op("fs", "get", true);
        let text = m.render();
        assert!(text.contains(
            "registry_http_requests_total{route=\"blob\",method=\"GET\",status=\"200\"} 2"
        ));
        assert!(text.contains("registry_http_response_bytes_total 15"));
        assert!(text.contains("registry_upload_duration_seconds_bucket{le=\"0.05\"} 1"));
        assert!(text.contains("registry_upload_duration_seconds_bucket{le=\"0.025\"} 0"));
        assert!(text.contains("registry_upload_duration_seconds_count 1"));
        assert!(text.contains("registry_store_errors_total{store=\"fs\",op=\"get\"} 1"));
        let report = crate::gc::GcReport {
            deleted_blobs: 2,
            deleted_bytes: 300,
            deleted_blob_links: 3,
            ..Default::default()
        };
        m.gc_run(Some(&report));
        m.gc_run(None);
        let text = m.render();
        assert!(text.contains("registry_gc_runs_total{result=\"ok\"} 1"));
        assert!(text.contains("registry_gc_runs_total{result=\"failed\"} 1"));
        assert!(text.contains("registry_gc_deleted_objects_total{kind=\"blob\"} 2"));
        assert!(text.contains("registry_gc_deleted_objects_total{kind=\"blob_link\"} 3"));
        assert!(text.contains("registry_gc_deleted_bytes_total 300"));
    }
}
