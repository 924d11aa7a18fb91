//! Prometheus metrics in the text exposition format, kept without an outside crate: requests by
//! route, method and status; bytes in and out; upload and commit durations; store operations
//! and errors (through [`crate::storage::Instrumented`]).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds (seconds) of the duration histogram buckets.
const BUCKETS: [f64; 12] = [
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0, 60.0,
];

#[derive(Debug, Default)]
struct Histogram {
    counts: [u64; BUCKETS.len()],
    sum: f64,
    count: u64,
}

impl Histogram {
    fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        for (i, b) in BUCKETS.iter().enumerate() {
            if s <= *b {
                self.counts[i] += 1;
            }
        }
        self.sum += s;
        self.count += 1;
    }

    fn render(&self, out: &mut String, name: &str) {
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (i, b) in BUCKETS.iter().enumerate() {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {}", self.counts[i]);
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

/// Operations and failures per (store, operation).
type StoreOps = BTreeMap<(&'static str, &'static str), (u64, u64)>;

/// The registry's metrics. Shared by the middleware, the handlers and the store wrapper.
#[derive(Debug, Default)]
pub struct Metrics {
    requests: Mutex<BTreeMap<(&'static str, String, u16), u64>>,
    store_ops: Mutex<StoreOps>,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    upload: Mutex<Histogram>,
    commit: Mutex<Histogram>,
}

impl Metrics {
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
        self.upload
            .lock()
            .expect("metrics lock")
            .render(&mut out, "registry_upload_duration_seconds");
        self.commit
            .lock()
            .expect("metrics lock")
            .render(&mut out, "registry_commit_duration_seconds");
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
