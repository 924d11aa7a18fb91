//! The node agent's pull controls, kubelet's names where it has one: parallel pulls and
//! downloads, per-registry QPS and burst, the progress deadline, and image GC's thresholds.

use std::time::Duration;

use super::{FileConfig, Invalid, duration_or};

/// The pull controls checked, with kubelet's defaults.
pub(super) struct PullControls {
    pub(super) max_parallel_pulls: Option<usize>,
    pub(super) max_concurrent_downloads: usize,
    pub(super) registry_pull_qps: f64,
    pub(super) registry_burst: u32,
    pub(super) image_pull_progress_deadline: Duration,
    pub(super) image_gc_high_percent: u8,
    pub(super) image_gc_low_percent: u8,
    pub(super) image_minimum_gc_age: Duration,
}

/// Reads the pull-control keys of `f`: counts at least 1, a finite QPS, percentages with low
/// at most high.
pub(super) fn pull_controls(f: &FileConfig) -> Result<PullControls, Invalid> {
    if f.max_parallel_pulls == Some(0) {
        return Err(("max_parallel_pulls", "must be at least 1".into()));
    }
    if f.max_concurrent_downloads == Some(0) {
        return Err(("max_concurrent_downloads", "must be at least 1".into()));
    }
    let qps = f.registry_pull_qps.unwrap_or(0.0);
    if !(qps >= 0.0 && qps.is_finite()) {
        return Err((
            "registry_pull_qps",
            format!("{qps} is not a number of pulls per second"),
        ));
    }
    let deadline = duration_or(f.image_pull_progress_deadline, 60);
    if deadline.is_zero() {
        return Err((
            "image_pull_progress_deadline",
            "\"0\" is too short: it must be more than 0".into(),
        ));
    }
    let (high, low) = (
        f.image_gc_high_percent.unwrap_or(85),
        f.image_gc_low_percent.unwrap_or(80),
    );
    if high > 100 {
        return Err(("image_gc_high_percent", format!("{high} is more than 100")));
    }
    if low > high {
        return Err((
            "image_gc_low_percent",
            format!("{low} is above image_gc_high_percent ({high})"),
        ));
    }
    Ok(PullControls {
        max_parallel_pulls: f.max_parallel_pulls,
        max_concurrent_downloads: f.max_concurrent_downloads.unwrap_or(3),
        registry_pull_qps: qps,
        registry_burst: f.registry_burst.unwrap_or(10).max(1),
        image_pull_progress_deadline: deadline,
        image_gc_high_percent: high,
        image_gc_low_percent: low,
        image_minimum_gc_age: duration_or(f.image_minimum_gc_age, 120),
    })
}
