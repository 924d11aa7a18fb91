//! Pull controls with kubelet's names: a cap on pulls in flight (`max_parallel_pulls`,
//! kubelet's `maxParallelImagePulls`), a per-registry token bucket for pulls
//! (`registry_pull_qps` / `registry_burst`, kubelet's `registryPullQPS` / `registryBurst`),
//! per-zone pull progress, and the disk usage image garbage collection is driven by
//! (`image_gc_high_percent` / `image_gc_low_percent`, kubelet's `imageGCHighThresholdPercent`
//! / `imageGCLowThresholdPercent`). The progress deadline (`image_pull_progress_deadline_secs`)
//! is applied by the content store to each read of a download.

use std::collections::HashMap;
use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

/// A token bucket per registry host: each image pull takes one token; tokens come back at
/// `qps` per second up to `burst`. `qps` of 0 means no limit.
#[derive(Debug)]
pub struct RegistryLimiter {
    qps: f64,
    burst: f64,
    buckets: Mutex<HashMap<String, (f64, Instant)>>,
}

impl RegistryLimiter {
    /// A limiter of `qps` pulls per second per registry with bursts of `burst` (at least 1).
    pub fn new(qps: f64, burst: u32) -> Self {
        RegistryLimiter {
            qps,
            burst: f64::from(burst.max(1)),
            buckets: Mutex::new(HashMap::new()),
        }
    }

    /// Waits for a token of `registry`.
    pub async fn acquire(&self, registry: &str) {
        if self.qps <= 0.0 {
            return;
        }
        loop {
            let wait = {
                let mut b = self.buckets.lock().unwrap_or_else(|e| e.into_inner());
                let now = Instant::now();
                let (tokens, last) = b.entry(registry.to_owned()).or_insert((self.burst, now));
                *tokens =
                    (*tokens + now.duration_since(*last).as_secs_f64() * self.qps).min(self.burst);
                *last = now;
                if *tokens >= 1.0 {
                    *tokens -= 1.0;
                    None
                } else {
                    Some(Duration::from_secs_f64((1.0 - *tokens) / self.qps))
                }
            };
            match wait {
                None => return,
                Some(d) => tokio::time::sleep(d).await,
            }
        }
    }
}

/// Bytes of one zone's pull: done (fetched, resumed or already present) of total (config and
/// layers, known once the manifest is read).
#[derive(Debug, Default)]
pub struct PullProgress {
    done: AtomicU64,
    total: AtomicU64,
}

impl PullProgress {
    /// Adds bytes done.
    pub fn add(&self, n: u64) {
        self.done.fetch_add(n, Ordering::Relaxed);
    }

    /// Sets the total.
    pub fn set_total(&self, n: u64) {
        self.total.store(n, Ordering::Relaxed);
    }

    /// (done, total).
    pub fn get(&self) -> PullBytes {
        PullBytes {
            done_bytes: self.done.load(Ordering::Relaxed),
            total_bytes: self.total.load(Ordering::Relaxed),
        }
    }
}

/// A snapshot of [`PullProgress`], as recorded in a zone's status.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PullBytes {
    /// Bytes done.
    pub done_bytes: u64,
    /// Bytes in all (0 until the manifest is read).
    pub total_bytes: u64,
}

/// Size and free space of a file system.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DiskSpace {
    /// Bytes in all.
    pub total: u64,
    /// Bytes available to the worker.
    pub available: u64,
}

impl DiskSpace {
    /// Percent in use, as kubelet reckons it: (total - available) / total.
    pub fn used_percent(&self) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        self.total.saturating_sub(self.available) as f64 * 100.0 / self.total as f64
    }
}

/// Where image GC reads disk usage from: `statvfs` on the content store's file system in
/// production ([`Statvfs`]); tests give their own.
pub trait DiskUsage: Send + Sync {
    /// The space of the file system holding `path`.
    fn space(&self, path: &Path) -> std::io::Result<DiskSpace>;
}

/// `statvfs(2)`.
#[derive(Debug, Default, Clone, Copy)]
pub struct Statvfs;

impl DiskUsage for Statvfs {
    fn space(&self, path: &Path) -> std::io::Result<DiskSpace> {
        let s = rustix::fs::statvfs(path)?;
        let frag = s.f_frsize.max(1);
        Ok(DiskSpace {
            total: s.f_blocks.saturating_mul(frag),
            available: s.f_bavail.saturating_mul(frag),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_bucket_allows_a_burst_then_qps() {
        let l = RegistryLimiter::new(20.0, 3);
        let t = Instant::now();
        for _ in 0..3 {
            l.acquire("r.example").await;
        }
        assert!(t.elapsed() < Duration::from_millis(40), "{:?}", t.elapsed());
        // Another registry has its own bucket.
        l.acquire("other.example").await;
        assert!(t.elapsed() < Duration::from_millis(40), "{:?}", t.elapsed());
        l.acquire("r.example").await;
        l.acquire("r.example").await;
        // Two more tokens at 20 per second: about 100 ms.
        let e = t.elapsed();
        assert!(e >= Duration::from_millis(90), "{e:?}");
    }

    #[test]
    fn statvfs_reads_a_real_file_system() {
        let s = Statvfs.space(Path::new("/")).unwrap();
        assert!(s.total > 0 && s.available <= s.total, "{s:?}");
        assert!((0.0..=100.0).contains(&s.used_percent()));
    }
}
