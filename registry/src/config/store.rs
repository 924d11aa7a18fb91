//! The store the settings select (filesystem or S3) and the S3 client's limits.

use std::sync::Arc;
use std::time::Duration;

#[cfg(feature = "s3")]
use config_toml::format_duration;

use super::{ConfigError, ServeConfig};
use crate::storage::{FsStore, Store};
#[cfg(feature = "s3")]
use crate::storage::{S3Config, S3Store, resolve_s3_credentials};

/// The S3 client's timeouts and attempts (`s3_connect_timeout`, `s3_attempt_timeout`,
/// `s3_operation_timeout`, `s3_max_attempts`); `None` keeps the store's default (5 s,
/// 60 s, 180 s, 4 attempts). An attempt covers one request, a part upload included; the
/// operation covers all the attempts of one request.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct S3Limits {
    /// Timeout to connect.
    pub connect_timeout: Option<Duration>,
    /// Timeout of one attempt.
    pub attempt_timeout: Option<Duration>,
    /// Timeout of one operation over all its attempts.
    pub operation_timeout: Option<Duration>,
    /// Attempts per request, the first included.
    pub max_attempts: Option<u32>,
}

impl S3Limits {
    /// Sets the limits on `c`, refusing values the S3 client would misuse: a zero timeout,
    /// an attempt longer than its operation, fewer than 1 or more than 10 attempts.
    #[cfg(feature = "s3")]
    pub(super) fn apply(&self, c: &mut S3Config) -> Result<(), String> {
        for (key, v, slot) in [
            (
                "s3_connect_timeout",
                self.connect_timeout,
                &mut c.connect_timeout,
            ),
            (
                "s3_attempt_timeout",
                self.attempt_timeout,
                &mut c.attempt_timeout,
            ),
            (
                "s3_operation_timeout",
                self.operation_timeout,
                &mut c.operation_timeout,
            ),
        ] {
            if let Some(v) = v {
                if v.is_zero() {
                    return Err(format!(
                        "{key} is {:?}; it must be longer than 0",
                        format_duration(v)
                    ));
                }
                *slot = v;
            }
        }
        if c.attempt_timeout > c.operation_timeout {
            return Err(format!(
                "s3_attempt_timeout ({:?}) is longer than s3_operation_timeout ({:?}), \
                 which covers all the attempts of a request",
                format_duration(c.attempt_timeout),
                format_duration(c.operation_timeout)
            ));
        }
        if let Some(n) = self.max_attempts {
            if !(1..=10).contains(&n) {
                return Err(format!(
                    "s3_max_attempts is {n}; it counts the first attempt and may be 1 to 10"
                ));
            }
            c.max_attempts = n;
        }
        Ok(())
    }
}

impl ServeConfig {
    /// The store this configuration selects: S3 when an endpoint and bucket are set, else the
    /// filesystem store in [`ServeConfig::data`].
    pub fn open_store(&self) -> Result<Arc<dyn Store>, ConfigError> {
        match self.s3_store()? {
            #[cfg(feature = "s3")]
            Some(s3) => Ok(Arc::new(s3)),
            #[cfg(not(feature = "s3"))]
            Some(never) => match never {},
            None => self.fs_store(),
        }
    }

    /// What answers blob GETs with a redirect to `store` (`s3_redirect`); `None` when it is
    /// off. Refused when it is on without the S3 store, or with an expiry a presigned URL
    /// cannot have.
    #[cfg(feature = "s3")]
    pub(crate) fn blob_redirect(
        &self,
        store: Option<&S3Store>,
    ) -> Result<Option<crate::storage::BlobRedirect>, ConfigError> {
        if !self.s3_redirect {
            return Ok(None);
        }
        let Some(store) = store else {
            return Err(ConfigError::S3Config {
                reason: "s3_redirect is on but the registry uses the filesystem store; it \
                         redirects blob GETs to S3 objects, so set s3_endpoint and s3_bucket \
                         or turn it off"
                    .to_owned(),
            });
        };
        crate::storage::BlobRedirect::new(store, self.s3_redirect_expiry)
            .map(Some)
            .map_err(|reason| ConfigError::S3Config { reason })
    }

    pub(crate) fn fs_store(&self) -> Result<Arc<dyn Store>, ConfigError> {
        let store = FsStore::open(&self.data).map_err(|source| ConfigError::Data {
            path: self.data.clone(),
            source,
        })?;
        // A TLS stream encrypts from the mapping, so it never sends from the file.
        let l = &self.conn_limits;
        let send_from = (l.sendfile && self.tls.is_none()).then_some(l.sendfile_min_size);
        Ok(Arc::new(store.send_from_file(send_from)))
    }

    /// Without the `s3` cargo feature there is no S3 store: S3 settings are refused, naming
    /// the feature, rather than ignored (which would serve from the data directory instead).
    #[cfg(not(feature = "s3"))]
    pub(crate) fn s3_store(&self) -> Result<Option<std::convert::Infallible>, ConfigError> {
        if self.s3_redirect {
            return Err(ConfigError::S3Config {
                reason: "s3_redirect needs the S3 store, and this rdctl was built without the \
                         `s3` cargo feature"
                    .to_owned(),
            });
        }
        match (&self.s3_endpoint, &self.s3_bucket) {
            (None, None) => Ok(None),
            (endpoint, bucket) => Err(ConfigError::S3Config {
                reason: format!(
                    "this rdctl was built without the `s3` cargo feature, so it cannot use the \
                     S3 store (s3_endpoint {:?}, s3_bucket {:?}); build it with the default \
                     features (`cargo build --bin rdctl`) or remove the S3 settings",
                    endpoint.as_deref().unwrap_or(""),
                    bucket.as_deref().unwrap_or("")
                ),
            }),
        }
    }

    /// The S3 store when an endpoint and a bucket are set; `None` for the filesystem store.
    #[cfg(feature = "s3")]
    pub(crate) fn s3_store(&self) -> Result<Option<S3Store>, ConfigError> {
        match (&self.s3_endpoint, &self.s3_bucket) {
            (Some(endpoint), Some(bucket)) => {
                let mut c = S3Config::new(endpoint, bucket)
                    .prefix(self.s3_prefix.clone().unwrap_or_default());
                if let Some(r) = &self.s3_region {
                    c.region = r.clone();
                }
                self.s3_limits
                    .apply(&mut c)
                    .map_err(|reason| ConfigError::S3Config { reason })?;
                let env = |k: &str| std::env::var(k).ok();
                match resolve_s3_credentials(&self.s3_credentials, &env).map_err(|e| {
                    ConfigError::S3Config {
                        reason: e.to_string(),
                    }
                })? {
                    Some((creds, source)) => {
                        tracing::info!(access_key_id = %creds.access_key_id, %source, "S3 credentials");
                        c.credentials = Some(creds);
                    }
                    None => tracing::info!(
                        "no S3 credentials configured; requests are signed with a placeholder pair"
                    ),
                }
                Ok(Some(S3Store::new(c)))
            }
            (None, None) => Ok(None),
            (Some(_), None) => Err(ConfigError::S3Config {
                reason: "an endpoint needs a bucket (s3_bucket, --s3-bucket)".to_owned(),
            }),
            (None, Some(_)) => Err(ConfigError::S3Config {
                reason: "a bucket needs an endpoint (s3_endpoint, --s3-endpoint)".to_owned(),
            }),
        }
    }
}
