//! The toolchain's one Prometheus histogram, for the two servers that expose metrics (the
//! registry and the worker) without depending on each other.
//!
//! A small type rather than the `prometheus-client` crate: both servers hand-render the text
//! exposition format 0.0.4 (`# TYPE`, `_bucket{le=...}`, `_sum`, `_count`), which their tests
//! and docs/operations.md promise; `prometheus-client` writes OpenMetrics text instead
//! (`# EOF`, `_total` suffixes, different number formatting), which would change what
//! operators scrape. It lives in `validator` because that is the lowest crate both servers
//! share; it does no I/O, it only writes into a `String`.

use std::fmt::Write as _;
use std::time::Duration;

/// A duration histogram with fixed bucket bounds, rendered in the Prometheus text format.
#[derive(Debug, Clone)]
pub struct Histogram {
    /// Upper bounds in seconds, ascending.
    bounds: &'static [f64],
    /// Observations at or below each bound (cumulative, as Prometheus wants them).
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    /// An empty histogram over `bounds` (upper bounds in seconds, ascending; `+Inf` is
    /// implied).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            counts: vec![0; bounds.len()],
            sum: 0.0,
            count: 0,
        }
    }

    /// Records one duration.
    pub fn observe(&mut self, d: Duration) {
        let s = d.as_secs_f64();
        for (n, b) in self.counts.iter_mut().zip(self.bounds) {
            if s <= *b {
                *n += 1;
            }
        }
        self.sum += s;
        self.count += 1;
    }

    /// Appends the `# TYPE` line and the samples of metric `name` to `out` (a `# HELP` line,
    /// if wanted, goes before it).
    pub fn render(&self, out: &mut String, name: &str) {
        let _ = writeln!(out, "# TYPE {name} histogram");
        for (b, n) in self.bounds.iter().zip(&self.counts) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{b}\"}} {n}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", self.count);
        let _ = writeln!(out, "{name}_sum {}", self.sum);
        let _ = writeln!(out, "{name}_count {}", self.count);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn renders_cumulative_buckets() {
        let mut h = Histogram::new(&[0.01, 0.5, 60.0]);
        h.observe(Duration::from_millis(500));
        h.observe(Duration::from_millis(250));
        h.observe(Duration::from_secs(90));
        let mut out = String::new();
        h.render(&mut out, "x_seconds");
        assert_eq!(
            out,
            "# TYPE x_seconds histogram\n\
             x_seconds_bucket{le=\"0.01\"} 0\n\
             x_seconds_bucket{le=\"0.5\"} 2\n\
             x_seconds_bucket{le=\"60\"} 2\n\
             x_seconds_bucket{le=\"+Inf\"} 3\n\
             x_seconds_sum 90.75\n\
             x_seconds_count 3\n"
        );
    }
}
