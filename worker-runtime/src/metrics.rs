//! The worker's Prometheus metrics (text exposition format 0.0.4), served on `GET /metrics`
//! when `metrics_listen` is set in worker.toml. Hand-rendered like the registry's: a few
//! counters and [`validator::Histogram`] (the registry's too) do not justify a metrics crate.
//!
//! | Metric | Type | Meaning |
//! |---|---|---|
//! | `rdctl_worker_pulls_total{result}` | counter | image pulls, `ok` or `error` |
//! | `rdctl_worker_pull_bytes_total` | counter | blob bytes received from registries |
//! | `rdctl_worker_resumed_bytes_total` | counter | bytes of partial downloads kept on resume |
//! | `rdctl_worker_verification_failures_total{stage}` | counter | `blob` (size or digest) or `diff_id` |
//! | `rdctl_worker_zone_creations_total` | counter | zones created or replaced |
//! | `rdctl_worker_zone_failures_total` | counter | zone reconcile attempts that failed |
//! | `rdctl_worker_reconcile_duration_seconds` | histogram | one whole pass |
//! | `rdctl_worker_zone_reconcile_duration_seconds` | histogram | one zone's reconcile |
//! | `rdctl_worker_admissions_total` | counter | images the admission policy admitted (each check) |
//! | `rdctl_worker_admission_denials_total{reason}` | counter | refusals by class (`unsigned`, `unknown_key`, `replayed`, `tampered`, `threshold`, `missing_attestation`, `not_pinned`, `rejected_by_rule`, `no_rule_matches`) |
//! | `rdctl_worker_admission_errors_total` | counter | checks that could not read the signatures |
//! | `rdctl_worker_admission_duration_seconds` | histogram | one admission check (signature fetch and evaluation) |
//! | `rdctl_worker_policy_reloads_total{result}` | counter | policy reloads on SIGHUP, `ok` or `error` |
//! | `rdctl_worker_policy_reload_failed` | gauge | 1 while the last reload failed (the previous policy is in force) |
//! | `rdctl_worker_pull_progress_bytes{zone}` | gauge | bytes done of each pull in flight |
//! | `rdctl_worker_pull_size_bytes{zone}` | gauge | bytes in all of each pull in flight |
//! | `rdctl_worker_image_gc_freed_bytes_total` | counter | bytes image GC by disk usage removed |

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use validator::Histogram;

/// Upper bounds (seconds) of the duration histogram buckets: reconciles range from a HEAD
/// request to a multi-GiB pull.
const BUCKETS: &[f64] = &[
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 120.0, 600.0,
];

/// Which check a verification failure came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VerifyStage {
    /// A blob's size or digest.
    Blob,
    /// A layer's uncompressed digest against the config's `diff_ids`.
    DiffId,
}

/// The worker's counters; shared by the passes and the `/metrics` server.
#[derive(Debug)]
pub struct Metrics {
    pulls_ok: AtomicU64,
    pulls_error: AtomicU64,
    pull_bytes: AtomicU64,
    resumed_bytes: AtomicU64,
    verify_blob: AtomicU64,
    verify_diff_id: AtomicU64,
    zone_creations: AtomicU64,
    zone_failures: AtomicU64,
    admits: AtomicU64,
    denials: Mutex<BTreeMap<String, u64>>,
    admission_errors: AtomicU64,
    reloads_ok: AtomicU64,
    reloads_error: AtomicU64,
    reload_failed: AtomicU64,
    pass: Mutex<Histogram>,
    zone: Mutex<Histogram>,
    admission: Mutex<Histogram>,
    pulls_in_flight: Mutex<BTreeMap<String, Arc<crate::throttle::PullProgress>>>,
    image_gc_freed: AtomicU64,
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics {
            pulls_ok: AtomicU64::default(),
            pulls_error: AtomicU64::default(),
            pull_bytes: AtomicU64::default(),
            resumed_bytes: AtomicU64::default(),
            verify_blob: AtomicU64::default(),
            verify_diff_id: AtomicU64::default(),
            zone_creations: AtomicU64::default(),
            zone_failures: AtomicU64::default(),
            admits: AtomicU64::default(),
            denials: Mutex::new(BTreeMap::new()),
            admission_errors: AtomicU64::default(),
            reloads_ok: AtomicU64::default(),
            reloads_error: AtomicU64::default(),
            reload_failed: AtomicU64::default(),
            pass: Mutex::new(Histogram::new(BUCKETS)),
            zone: Mutex::new(Histogram::new(BUCKETS)),
            admission: Mutex::new(Histogram::new(BUCKETS)),
            pulls_in_flight: Mutex::new(BTreeMap::new()),
            image_gc_freed: AtomicU64::default(),
        }
    }
}

impl Metrics {
    /// Counts one pull.
    pub fn pull(&self, ok: bool) {
        let c = if ok {
            &self.pulls_ok
        } else {
            &self.pulls_error
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// A zone's pull started: its progress is exported while it runs.
    pub fn pull_started(&self, zone: &str, progress: Arc<crate::throttle::PullProgress>) {
        self.pulls_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(zone.to_owned(), progress);
    }

    /// A zone's pull ended.
    pub fn pull_finished(&self, zone: &str) {
        self.pulls_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(zone);
    }

    /// Counts bytes image GC by disk usage freed.
    pub fn image_gc(&self, freed: u64) {
        self.image_gc_freed.fetch_add(freed, Ordering::Relaxed);
    }

    /// Counts bytes received, and bytes kept from a partial download.
    pub fn bytes(&self, received: u64, resumed: u64) {
        self.pull_bytes.fetch_add(received, Ordering::Relaxed);
        self.resumed_bytes.fetch_add(resumed, Ordering::Relaxed);
    }

    /// Counts a verification failure.
    pub fn verification_failure(&self, stage: VerifyStage) {
        match stage {
            VerifyStage::Blob => &self.verify_blob,
            VerifyStage::DiffId => &self.verify_diff_id,
        }
        .fetch_add(1, Ordering::Relaxed);
    }

    /// Counts one zone outcome and its duration.
    pub fn zone(&self, created: bool, failed: bool, took: Duration) {
        if created {
            self.zone_creations.fetch_add(1, Ordering::Relaxed);
        }
        if failed {
            self.zone_failures.fetch_add(1, Ordering::Relaxed);
        }
        self.zone
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(took);
    }

    /// Counts one admission check: admitted, refused (with its class) or failed.
    pub fn admission(&self, denied: Option<&str>, error: bool, took: Duration) {
        if error {
            self.admission_errors.fetch_add(1, Ordering::Relaxed);
        } else if let Some(reason) = denied {
            *self
                .denials
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .entry(reason.to_owned())
                .or_default() += 1;
        } else {
            self.admits.fetch_add(1, Ordering::Relaxed);
        }
        self.admission
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(took);
    }

    /// Counts a policy reload.
    pub fn policy_reload(&self, ok: bool) {
        if ok {
            self.reloads_ok.fetch_add(1, Ordering::Relaxed);
        } else {
            self.reloads_error.fetch_add(1, Ordering::Relaxed);
        }
        self.reload_failed.store(u64::from(!ok), Ordering::Relaxed);
    }

    /// Records one whole pass.
    pub fn pass(&self, took: Duration) {
        self.pass
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .observe(took);
    }

    /// The text exposition.
    pub fn render(&self) -> String {
        let mut out = String::new();
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        let _ = writeln!(
            out,
            "# HELP rdctl_worker_pulls_total Image pulls by result.\n# TYPE rdctl_worker_pulls_total counter\n\
             rdctl_worker_pulls_total{{result=\"ok\"}} {}\nrdctl_worker_pulls_total{{result=\"error\"}} {}",
            get(&self.pulls_ok),
            get(&self.pulls_error)
        );
        for (name, help, v) in [
            (
                "rdctl_worker_pull_bytes_total",
                "Blob bytes received from registries.",
                get(&self.pull_bytes),
            ),
            (
                "rdctl_worker_resumed_bytes_total",
                "Bytes of partial downloads kept when a download resumed.",
                get(&self.resumed_bytes),
            ),
            (
                "rdctl_worker_zone_creations_total",
                "Zones created or replaced.",
                get(&self.zone_creations),
            ),
            (
                "rdctl_worker_zone_failures_total",
                "Zone reconcile attempts that failed.",
                get(&self.zone_failures),
            ),
            (
                "rdctl_worker_admissions_total",
                "Images the admission policy admitted.",
                get(&self.admits),
            ),
            (
                "rdctl_worker_admission_errors_total",
                "Admission checks that could not read the signatures.",
                get(&self.admission_errors),
            ),
            (
                "rdctl_worker_image_gc_freed_bytes_total",
                "Bytes image garbage collection by disk usage removed.",
                get(&self.image_gc_freed),
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {v}"
            );
        }
        let pulls: Vec<(String, crate::throttle::PullBytes)> = self
            .pulls_in_flight
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .map(|(z, p)| (z.clone(), p.get()))
            .collect();
        let _ = writeln!(
            out,
            "# HELP rdctl_worker_pull_progress_bytes Bytes done of each pull in flight.\n\
             # TYPE rdctl_worker_pull_progress_bytes gauge"
        );
        for (z, p) in &pulls {
            let _ = writeln!(
                out,
                "rdctl_worker_pull_progress_bytes{{zone=\"{z}\"}} {}",
                p.done_bytes
            );
        }
        let _ = writeln!(
            out,
            "# HELP rdctl_worker_pull_size_bytes Bytes in all of each pull in flight.\n\
             # TYPE rdctl_worker_pull_size_bytes gauge"
        );
        for (z, p) in &pulls {
            let _ = writeln!(
                out,
                "rdctl_worker_pull_size_bytes{{zone=\"{z}\"}} {}",
                p.total_bytes
            );
        }
        let _ = writeln!(
            out,
            "# HELP rdctl_worker_verification_failures_total Content that did not verify, by check.\n\
             # TYPE rdctl_worker_verification_failures_total counter\n\
             rdctl_worker_verification_failures_total{{stage=\"blob\"}} {}\n\
             rdctl_worker_verification_failures_total{{stage=\"diff_id\"}} {}",
            get(&self.verify_blob),
            get(&self.verify_diff_id)
        );
        let _ = writeln!(
            out,
            "# HELP rdctl_worker_admission_denials_total Images the admission policy refused, by reason.\n\
             # TYPE rdctl_worker_admission_denials_total counter"
        );
        for (reason, n) in self
            .denials
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
        {
            let _ = writeln!(
                out,
                "rdctl_worker_admission_denials_total{{reason=\"{reason}\"}} {n}"
            );
        }
        let _ = writeln!(
            out,
            "# HELP rdctl_worker_policy_reloads_total Policy reloads (SIGHUP) by result.\n\
             # TYPE rdctl_worker_policy_reloads_total counter\n\
             rdctl_worker_policy_reloads_total{{result=\"ok\"}} {}\n\
             rdctl_worker_policy_reloads_total{{result=\"error\"}} {}\n\
             # HELP rdctl_worker_policy_reload_failed 1 while the last policy reload failed and the previous policy is in force.\n\
             # TYPE rdctl_worker_policy_reload_failed gauge\n\
             rdctl_worker_policy_reload_failed {}",
            get(&self.reloads_ok),
            get(&self.reloads_error),
            get(&self.reload_failed)
        );
        for (h, name, help) in [
            (
                &self.pass,
                "rdctl_worker_reconcile_duration_seconds",
                "Duration of whole reconcile passes.",
            ),
            (
                &self.zone,
                "rdctl_worker_zone_reconcile_duration_seconds",
                "Duration of one zone's reconcile.",
            ),
            (
                &self.admission,
                "rdctl_worker_admission_duration_seconds",
                "Duration of one admission check (signature fetch and policy evaluation).",
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}");
            h.lock()
                .unwrap_or_else(|e| e.into_inner())
                .render(&mut out, name);
        }
        out
    }
}

/// Serves `GET /metrics` on `listener` until the task is dropped.
pub async fn serve(
    listener: tokio::net::TcpListener,
    metrics: Arc<Metrics>,
) -> std::io::Result<()> {
    use axum::http::header::CONTENT_TYPE;
    let app = axum::Router::new().route(
        "/metrics",
        axum::routing::get(move || {
            let m = metrics.clone();
            async move {
                (
                    [(CONTENT_TYPE, "text/plain; version=0.0.4; charset=utf-8")],
                    m.render(),
                )
            }
        }),
    );
    axum::serve(listener, app).await
}

/// Binds the metrics address (so a bad address fails at start, not later).
pub async fn bind(addr: SocketAddr) -> std::io::Result<tokio::net::TcpListener> {
    tokio::net::TcpListener::bind(addr).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_counters_and_histograms() {
        let m = Metrics::default();
        m.pull(true);
        m.pull(false);
        m.bytes(100, 40);
        m.verification_failure(VerifyStage::DiffId);
        m.zone(true, false, Duration::from_millis(30));
        m.pass(Duration::from_secs(3));
        m.admission(None, false, Duration::from_millis(3));
        m.admission(Some("unsigned"), false, Duration::from_millis(3));
        m.admission(Some("unsigned"), false, Duration::from_millis(3));
        m.policy_reload(false);
        let p = Arc::new(crate::throttle::PullProgress::default());
        p.set_total(300);
        p.add(120);
        m.pull_started("web", p);
        m.pull_started("done", Arc::default());
        m.pull_finished("done");
        m.image_gc(4096);
        let t = m.render();
        assert!(
            !t.contains("zone=\"done\""),
            "a finished pull is still exported:\n{t}"
        );
        for line in [
            "rdctl_worker_pulls_total{result=\"ok\"} 1",
            "rdctl_worker_pulls_total{result=\"error\"} 1",
            "rdctl_worker_pull_bytes_total 100",
            "rdctl_worker_resumed_bytes_total 40",
            "rdctl_worker_verification_failures_total{stage=\"blob\"} 0",
            "rdctl_worker_verification_failures_total{stage=\"diff_id\"} 1",
            "rdctl_worker_zone_creations_total 1",
            "rdctl_worker_zone_reconcile_duration_seconds_bucket{le=\"0.01\"} 0",
            "rdctl_worker_zone_reconcile_duration_seconds_bucket{le=\"0.05\"} 1",
            "rdctl_worker_reconcile_duration_seconds_bucket{le=\"2.5\"} 0",
            "rdctl_worker_reconcile_duration_seconds_bucket{le=\"5\"} 1",
            "rdctl_worker_reconcile_duration_seconds_count 1",
            "rdctl_worker_admissions_total 1",
            "rdctl_worker_admission_denials_total{reason=\"unsigned\"} 2",
            "rdctl_worker_admission_duration_seconds_count 3",
            "rdctl_worker_policy_reloads_total{result=\"error\"} 1",
            "rdctl_worker_policy_reload_failed 1",
            "rdctl_worker_pull_progress_bytes{zone=\"web\"} 120",
            "rdctl_worker_pull_size_bytes{zone=\"web\"} 300",
            "rdctl_worker_image_gc_freed_bytes_total 4096",
        ] {
            assert!(t.lines().any(|l| l == line), "{line} missing:\n{t}");
        }
    }
}
