//! `RDCTL_REGISTRY_*` environment variables, applied over the file. A duration or size
//! variable is written as in the file (`30s`, `4MiB`, or a bare number of seconds or bytes);
//! the older `_SECS` and `_BYTES` names are still read when the new one is not set.

use std::time::Duration;

use config_toml::{parse_duration, parse_size};

use super::{ConfigError, ServeConfig};

/// The environment, as a lookup.
type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The first of `vars` that is set, with its name.
fn first(env: Env<'_>, vars: &[&'static str]) -> Option<(&'static str, String)> {
    vars.iter().find_map(|&v| env(v).map(|value| (v, value)))
}

/// A variable parsed with `FromStr`; `expected` says what a good value looks like.
fn parsed<T: std::str::FromStr>(
    env: Env<'_>,
    var: &'static str,
    expected: &str,
) -> Result<Option<T>, ConfigError> {
    match env(var) {
        None => Ok(None),
        Some(value) => match value.parse() {
            Ok(v) => Ok(Some(v)),
            Err(_) => Err(ConfigError::Env {
                var,
                value,
                reason: format!("expected {expected}"),
            }),
        },
    }
}

/// A duration from the first of `vars` that is set.
fn duration(env: Env<'_>, vars: &[&'static str]) -> Result<Option<Duration>, ConfigError> {
    first(env, vars)
        .map(|(var, value)| {
            parse_duration(&value).map_err(|e| ConfigError::Env {
                var,
                reason: e.problem,
                value,
            })
        })
        .transpose()
}

/// A size in bytes from the first of `vars` that is set.
fn size(env: Env<'_>, vars: &[&'static str]) -> Result<Option<u64>, ConfigError> {
    first(env, vars)
        .map(|(var, value)| {
            parse_size(&value).map_err(|e| ConfigError::Env {
                var,
                reason: e.problem,
                value,
            })
        })
        .transpose()
}

impl ServeConfig {
    /// Applies the variables that are set. S3 keys come from the file or from the standard
    /// `AWS_*` variables, not from more variables of our own.
    pub(super) fn apply_env(&mut self, env: Env<'_>) -> Result<(), ConfigError> {
        const BOOL: &str = "true or false";
        if let Some(v) = parsed(
            env,
            "RDCTL_REGISTRY_LISTEN",
            "an address and port (0.0.0.0:5000)",
        )? {
            self.listen = v;
        }
        if let Some(v) = parsed(env, "RDCTL_REGISTRY_DATA", "a directory")? {
            self.data = v;
        }
        if let Some(v) = parsed(env, "RDCTL_REGISTRY_DELETE_ENABLED", BOOL)? {
            self.delete_enabled = v;
        }
        if let Some(v) = parsed(env, "RDCTL_REGISTRY_SENDFILE", BOOL)? {
            self.conn_limits.sendfile = v;
        }
        if let Some(v) = size(env, &["RDCTL_REGISTRY_SENDFILE_MIN_SIZE"])? {
            self.conn_limits.sendfile_min_size = v;
        }
        if let Some(v) = size(
            env,
            &[
                "RDCTL_REGISTRY_MAX_MANIFEST_SIZE",
                "RDCTL_REGISTRY_MAX_MANIFEST_BYTES",
            ],
        )? {
            self.max_manifest_bytes = v;
        }
        if let Some(v) = duration(
            env,
            &[
                "RDCTL_REGISTRY_SHUTDOWN_TIMEOUT",
                "RDCTL_REGISTRY_SHUTDOWN_TIMEOUT_SECS",
            ],
        )? {
            self.shutdown_timeout = v;
        }
        if let Some(v) = duration(
            env,
            &[
                "RDCTL_REGISTRY_UPLOAD_MAX_AGE",
                "RDCTL_REGISTRY_UPLOAD_MAX_AGE_SECS",
            ],
        )? {
            self.upload_max_age = v;
        }
        self.set_conn_limits([
            duration(
                env,
                &[
                    "RDCTL_REGISTRY_HEADER_READ_TIMEOUT",
                    "RDCTL_REGISTRY_HEADER_READ_TIMEOUT_SECS",
                ],
            )?,
            duration(
                env,
                &[
                    "RDCTL_REGISTRY_WRITE_STALL_TIMEOUT",
                    "RDCTL_REGISTRY_WRITE_STALL_TIMEOUT_SECS",
                ],
            )?,
            duration(
                env,
                &[
                    "RDCTL_REGISTRY_BODY_IDLE_TIMEOUT",
                    "RDCTL_REGISTRY_BODY_IDLE_TIMEOUT_SECS",
                ],
            )?,
        ]);
        for (slot, var) in [
            (&mut self.s3_endpoint, "RDCTL_REGISTRY_S3_ENDPOINT"),
            (&mut self.s3_bucket, "RDCTL_REGISTRY_S3_BUCKET"),
            (&mut self.s3_prefix, "RDCTL_REGISTRY_S3_PREFIX"),
            (&mut self.s3_region, "RDCTL_REGISTRY_S3_REGION"),
            (
                &mut self.s3_credentials.profile,
                "RDCTL_REGISTRY_S3_PROFILE",
            ),
        ] {
            if let Some(v) = env(var) {
                *slot = Some(v);
            }
        }
        self.set_s3_timeouts([
            duration(
                env,
                &[
                    "RDCTL_REGISTRY_S3_CONNECT_TIMEOUT",
                    "RDCTL_REGISTRY_S3_CONNECT_TIMEOUT_SECS",
                ],
            )?,
            duration(
                env,
                &[
                    "RDCTL_REGISTRY_S3_ATTEMPT_TIMEOUT",
                    "RDCTL_REGISTRY_S3_ATTEMPT_TIMEOUT_SECS",
                ],
            )?,
            duration(
                env,
                &[
                    "RDCTL_REGISTRY_S3_OPERATION_TIMEOUT",
                    "RDCTL_REGISTRY_S3_OPERATION_TIMEOUT_SECS",
                ],
            )?,
        ]);
        if let Some(v) = parsed(
            env,
            "RDCTL_REGISTRY_S3_MAX_ATTEMPTS",
            "a whole number from 1 to 10",
        )? {
            self.s3_limits.max_attempts = Some(v);
        }
        if let Some(v) = parsed(env, "RDCTL_REGISTRY_S3_REDIRECT", BOOL)? {
            self.s3_redirect = v;
        }
        if let Some(v) = duration(
            env,
            &[
                "RDCTL_REGISTRY_S3_REDIRECT_EXPIRY",
                "RDCTL_REGISTRY_S3_REDIRECT_EXPIRY_SECS",
            ],
        )? {
            self.s3_redirect_expiry = v;
        }
        Ok(())
    }
}
