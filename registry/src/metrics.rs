//! Prometheus metrics in the text exposition format, kept without an outside crate: requests by
//! route, method and status; bytes in and out; upload and commit durations; store operations
//! and errors (through [`crate::storage::Instrumented`]). The histograms are
//! [`validator::Histogram`], the one the worker's metrics use too.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
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
    events: Mutex<EventCounters>,
    /// The features' metrics ([`Metrics::source`]), rendered in the order they were added.
    sources: Mutex<Vec<Arc<dyn MetricSource>>>,
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
            events: Mutex::default(),
            sources: Mutex::default(),
        }
    }
}

/// Event outbox counters per endpoint: (recorded, delivered, failed attempts, dead) and the
/// pending gauge of the last delivery pass.
#[derive(Debug, Default)]
struct EventCounters {
    totals: BTreeMap<String, [u64; 4]>,
    pending: BTreeMap<String, u64>,
}

/// A feature's metrics (garbage collection, quota, retention, scrub, sync): it keeps its own
/// counters and appends its own families to the exposition text. The core knows only this
/// trait; a feature reaches its source through [`Metrics::source`].
pub trait MetricSource: Any + Send + Sync + std::fmt::Debug {
    /// Appends this source's families, each with its `# TYPE` line (also without samples).
    fn render(&self, out: &mut String);
}

impl Metrics {
    /// The source of type `T`, added (empty) on first use. Adding every feature's source where
    /// the registry is assembled declares their families from the first scrape on.
    pub fn source<T: MetricSource + Default>(&self) -> Arc<T> {
        let mut sources = self.sources.lock().expect("metrics lock");
        for s in sources.iter() {
            let any: Arc<dyn Any + Send + Sync> = s.clone();
            if let Ok(t) = any.downcast::<T>() {
                return t;
            }
        }
        let t = Arc::new(T::default());
        sources.push(t.clone());
        t
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
        let _ = writeln!(
            out,
            "# TYPE registry_blob_bytes_sent_from_file_total counter\nregistry_blob_bytes_sent_from_file_total {}",
            crate::storage::file_region::sent_total()
        );
        self.upload
            .lock()
            .expect("metrics lock")
            .render(&mut out, "registry_upload_duration_seconds");
        self.commit
            .lock()
            .expect("metrics lock")
            .render(&mut out, "registry_commit_duration_seconds");
        let sources = self.sources.lock().expect("metrics lock").clone();
        for source in sources {
            source.render(&mut out);
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
    }
}
