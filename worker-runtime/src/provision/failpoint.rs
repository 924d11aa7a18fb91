//! A fault-injection point for tests (a failpoint), off by default: with
//! `RDCTL_FAILPOINT_PAUSE=<n>` in its environment the worker stops before the n-th step of its
//! provisioner (counted from 1, from when the worker has opened: the settling of switches a
//! killed worker left open is not counted), writes [`PAUSED_FILE`] in its state directory
//! naming the zone and the step, and sleeps until it is killed.
//!
//! A [`super::StepHook`] inside one process can only pretend to crash; this lets a test run the
//! real `rdctl worker` as a child, wait for the file, and SIGKILL it at a known step of a
//! switch (`tests/worker_kill.rs`). The variable is read once, when the worker opens; a value
//! that is not a positive number stops the worker naming it, so a typo never runs a worker
//! without the pause the test relies on.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use super::StepHook;
use crate::owner::write_atomic;

/// The environment variable naming the step to pause at.
pub const FAILPOINT_ENV: &str = "RDCTL_FAILPOINT_PAUSE";

/// The file written in the state directory when the worker pauses: `<n> <zone>: <step>`.
pub const PAUSED_FILE: &str = "failpoint.paused";

/// [`FAILPOINT_ENV`] holds something other than a positive step number.
#[derive(Debug, thiserror::Error)]
#[error("{FAILPOINT_ENV}={value:?}: not a step number (1, 2, ...)")]
pub struct FailpointError {
    /// The value found.
    pub value: String,
}

/// The pause hook [`FAILPOINT_ENV`] asks for, or `None` when it is unset.
pub fn pause_hook_from_env(state_dir: &Path) -> Result<Option<StepHook>, FailpointError> {
    let Some(value) = std::env::var_os(FAILPOINT_ENV) else {
        return Ok(None);
    };
    let value = value.to_string_lossy().into_owned();
    match value.trim().parse::<u64>() {
        Ok(n) if n > 0 => Ok(Some(pause_hook(n, state_dir.join(PAUSED_FILE)))),
        _ => Err(FailpointError { value }),
    }
}

/// A hook passing every step but the n-th, where it writes `marker` and never returns.
fn pause_hook(n: u64, marker: PathBuf) -> StepHook {
    let seen = AtomicU64::new(0);
    Arc::new(move |zone: &str, step: &str| {
        if seen.fetch_add(1, Ordering::SeqCst) + 1 != n {
            return false;
        }
        tracing::warn!(zone, step, n, "{FAILPOINT_ENV}: paused until killed");
        if let Err(e) = write_atomic(&marker, format!("{n} {zone}: {step}\n").as_bytes()) {
            tracing::error!(path = %marker.display(), error = %e, "writing the failpoint marker");
        }
        loop {
            std::thread::sleep(std::time::Duration::from_secs(3600));
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The hook lets the steps before the n-th pass and stops the n-th, marker written.
    #[test]
    fn the_nth_step_pauses_and_names_itself_in_the_marker() {
        let dir = tempfile::tempdir().unwrap();
        let marker = dir.path().join(PAUSED_FILE);
        let hook = pause_hook(3, marker.clone());
        assert!(!hook("z", "one"));
        assert!(!hook("z", "two"));
        assert!(!marker.exists());
        let h = hook.clone();
        // The third call never returns: it runs on a thread left asleep.
        std::thread::spawn(move || h("z", "place the new zonepath"));
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !marker.exists() {
            assert!(std::time::Instant::now() < deadline, "no marker");
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        assert_eq!(
            std::fs::read_to_string(&marker).unwrap(),
            "3 z: place the new zonepath\n"
        );
        // Later steps (other threads) pass.
        assert!(!hook("z", "four"));
    }
}
