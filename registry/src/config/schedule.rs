//! The schedules the serving process keeps: `[gc]`, `[scrub]` and `[pulls]`.

use std::path::PathBuf;
use std::time::Duration;

use config_toml::{ByteSize, HumanDuration, format_duration};
use serde::Deserialize;

use super::{ConfigError, ServeConfig, Source};
use crate::gc;

/// The `[gc]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileGc {
    interval: Option<HumanDuration>,
    grace: Option<HumanDuration>,
    delete_untagged: Option<bool>,
    keep_referrers: Option<bool>,
    lease_ttl: Option<HumanDuration>,
}

/// The `[scrub]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileScrub {
    interval: Option<HumanDuration>,
    /// Bytes per second: `"50MiB"` or a whole number.
    rate: Option<ByteSize>,
    report: Option<PathBuf>,
}

/// The `[pulls]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FilePulls {
    flush_interval: Option<HumanDuration>,
}

/// `v` when it is longer than zero, else the error for `key`.
fn positive(
    src: &Source<'_>,
    key: &'static str,
    v: HumanDuration,
) -> Result<Duration, ConfigError> {
    if v.0.is_zero() {
        return Err(src.bad(key, "\"0\" must be longer than 0"));
    }
    Ok(v.0)
}

impl ServeConfig {
    pub(super) fn apply_gc(&mut self, g: FileGc, src: &Source<'_>) -> Result<(), ConfigError> {
        if let Some(v) = g.interval {
            self.gc.interval = Some(positive(src, "gc.interval", v)?);
        }
        if let Some(v) = g.grace {
            // The server collects while it takes pushes; a shorter window is unsafe then.
            if v.0 < gc::MIN_SAFE_GRACE {
                return Err(src.bad(
                    "gc.grace",
                    format!(
                        "\"{v}\" is shorter than {}, the least that keeps concurrent pushes safe",
                        format_duration(gc::MIN_SAFE_GRACE)
                    ),
                ));
            }
            self.gc.options.grace = v.0;
        }
        if let Some(v) = g.delete_untagged {
            self.gc.options.delete_untagged = v;
        }
        if let Some(v) = g.keep_referrers {
            self.gc.options.keep_referrers = v;
        }
        if let Some(v) = g.lease_ttl {
            if v.0 < gc::MIN_LEASE_TTL {
                return Err(src.bad(
                    "gc.lease_ttl",
                    format!(
                        "\"{v}\" is shorter than {}",
                        format_duration(gc::MIN_LEASE_TTL)
                    ),
                ));
            }
            self.gc.options.lease_ttl = v.0;
        }
        Ok(())
    }

    pub(super) fn apply_scrub(
        &mut self,
        sc: FileScrub,
        src: &Source<'_>,
    ) -> Result<(), ConfigError> {
        if let Some(v) = sc.interval {
            self.scrub.interval = Some(positive(src, "scrub.interval", v)?);
        }
        if sc.rate == Some(ByteSize(0)) {
            return Err(src.bad(
                "scrub.rate",
                "\"0\" is too slow: at least 1 byte per second (leave it out for no limit)",
            ));
        }
        self.scrub.options.rate = sc.rate.map(u64::from);
        self.scrub.report = sc.report;
        Ok(())
    }

    pub(super) fn apply_pulls(
        &mut self,
        p: FilePulls,
        src: &Source<'_>,
    ) -> Result<(), ConfigError> {
        if let Some(v) = p.flush_interval {
            self.pull_flush_interval = positive(src, "pulls.flush_interval", v)?;
        }
        Ok(())
    }
}
