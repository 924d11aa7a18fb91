//! Byte progress of the worker's downloads as log lines: what `rdctl worker run` reports
//! through [`crate::ContentStore::with_progress`] when stderr is not a terminal (a daemon under
//! SMF or systemd, or output piped to a file), where a progress bar would be noise.
//!
//! While downloads run, at most one `info` line per interval (5 s by default), the first an
//! interval after they started: bytes done of the bytes of the downloads started, how many
//! run, and the rate since the previous line. Downloads that end within the interval log
//! nothing, and neither does a blob already in the content store.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use registry_client::progress::{BlobOutcome, BlobProgress, Progress};
use registry_client::transfer::Content;

/// The interval [`LoggedProgress::default`] logs at most once per.
pub const LOG_INTERVAL: Duration = Duration::from_secs(5);

/// Logs download progress at `info` at most once per interval (see the module docs).
#[derive(Debug, Clone)]
pub struct LoggedProgress {
    every: Duration,
    state: Arc<State>,
}

#[derive(Debug, Default)]
struct State {
    /// Bytes at the destination of the downloads running (a resumed file's counted).
    done: AtomicU64,
    /// Sizes of the downloads running.
    total: AtomicU64,
    /// Downloads started and not finished.
    running: AtomicUsize,
    /// When the last line was logged (or the downloads started), and `done` then.
    last: Mutex<Option<(Instant, u64)>>,
}

impl Default for LoggedProgress {
    fn default() -> Self {
        LoggedProgress::every(LOG_INTERVAL)
    }
}

impl LoggedProgress {
    /// Logs at most once per `every`.
    pub fn every(every: Duration) -> LoggedProgress {
        LoggedProgress {
            every,
            state: Arc::default(),
        }
    }

    /// A download of `blob` starts at `now` with `resumed` bytes already there; the first of
    /// a pull starts the clock.
    fn start(&self, blob: &Content, resumed: u64, now: Instant) {
        let s = &self.state;
        s.total.fetch_add(blob.size, Ordering::Relaxed);
        let done = s.done.fetch_add(resumed, Ordering::Relaxed) + resumed;
        if s.running.fetch_add(1, Ordering::Relaxed) == 0 {
            *s.last.lock().unwrap_or_else(|e| e.into_inner()) = Some((now, done));
        }
    }

    /// The line to log at `now`, if one is due: none within `every` of the start or of the
    /// last line.
    fn due(&self, now: Instant) -> Option<String> {
        let mut last = self.state.last.lock().unwrap_or_else(|e| e.into_inner());
        let (at, before) = (*last)?;
        let waited = now.checked_duration_since(at)?;
        if waited < self.every {
            return None;
        }
        let done = self.state.done.load(Ordering::Relaxed);
        *last = Some((now, done));
        let rate = done.saturating_sub(before) as f64 / waited.as_secs_f64().max(0.001);
        let total = self.state.total.load(Ordering::Relaxed);
        let running = self.state.running.load(Ordering::Relaxed);
        Some(format!(
            "pulling: {} of {} in {running} download(s), {}/s",
            mib(done),
            mib(total),
            mib(rate as u64)
        ))
    }

    fn log_if_due(&self) {
        if let Some(line) = self.due(Instant::now()) {
            tracing::info!(
                done_bytes = self.state.done.load(Ordering::Relaxed),
                total_bytes = self.state.total.load(Ordering::Relaxed),
                "{line}"
            );
        }
    }
}

/// `12.3 MiB`.
fn mib(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

impl Progress for LoggedProgress {
    fn blob_started(&self, blob: &Content, resumed: u64) -> Box<dyn BlobProgress> {
        self.start(blob, resumed, Instant::now());
        Box::new(self.clone())
    }
}

impl BlobProgress for LoggedProgress {
    fn advance(&self, bytes: u64) {
        self.state.done.fetch_add(bytes, Ordering::Relaxed);
        self.log_if_due();
    }

    fn finish(&self, outcome: BlobOutcome) {
        let _ = outcome;
        let s = &self.state;
        // The last download of a pull ends: the next pull counts from zero.
        if s.running.fetch_sub(1, Ordering::Relaxed) == 1 {
            s.done.store(0, Ordering::Relaxed);
            s.total.store(0, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn blob(size: u64) -> Content {
        Content {
            digest: validator::Digest::parse(&format!("sha256:{}", "a".repeat(64))).unwrap(),
            size,
            media_type: "application/octet-stream".to_owned(),
        }
    }

    #[test]
    fn a_line_an_interval_after_the_start_then_at_most_one_per_interval() {
        let p = LoggedProgress::every(Duration::from_secs(5));
        let t0 = Instant::now();
        p.start(&blob(4 << 20), 1 << 20, t0);
        let h: Box<dyn BlobProgress> = Box::new(p.clone());
        h.advance(1 << 20);
        assert_eq!(p.due(t0), None);
        assert_eq!(p.due(t0 + Duration::from_millis(4999)), None);
        assert_eq!(
            p.due(t0 + Duration::from_secs(5)).as_deref(),
            Some("pulling: 2.0 MiB of 4.0 MiB in 1 download(s), 0.2 MiB/s")
        );
        h.advance(2 << 20);
        assert_eq!(p.due(t0 + Duration::from_secs(6)), None);
        assert_eq!(
            p.due(t0 + Duration::from_secs(10)).as_deref(),
            Some("pulling: 4.0 MiB of 4.0 MiB in 1 download(s), 0.4 MiB/s")
        );
    }

    #[test]
    fn counts_start_over_when_the_last_download_ends() {
        let p = LoggedProgress::every(Duration::from_secs(3600));
        let a = p.blob_started(&blob(100), 0);
        let b = p.blob_started(&blob(50), 10);
        a.advance(100);
        a.finish(BlobOutcome::Copied);
        assert_eq!(p.state.running.load(Ordering::Relaxed), 1);
        assert_eq!(p.state.done.load(Ordering::Relaxed), 110);
        assert_eq!(p.state.total.load(Ordering::Relaxed), 150);
        b.finish(BlobOutcome::Failed);
        assert_eq!(p.state.running.load(Ordering::Relaxed), 0);
        assert_eq!(p.state.done.load(Ordering::Relaxed), 0);
        assert_eq!(p.state.total.load(Ordering::Relaxed), 0);
        // A present blob moves nothing.
        p.blob_present(&blob(7));
        assert_eq!(p.state.total.load(Ordering::Relaxed), 0);
    }
}
