//! The registry's configuration: [`ServeConfig`] (everything `rdctl registry serve` reads:
//! defaults, then a TOML file, then `RDCTL_REGISTRY_*` environment variables), the `[gc]`
//! schedule ([`GcSchedule`]), the store it selects ([`ServeConfig::open_store`]), and
//! [`RegistryConfig`], the part request handlers consult. Nothing here serves.
//!
//! - `file`: the TOML file's tables and the top-level keys; durations and sizes are written
//!   one way (`"30s"`, `"4MiB"`, config-toml's [`config_toml::units`]), the legacy integer
//!   and the old `_secs`/`_bytes` key names still read.
//! - `schedule`: `[gc]`, `[scrub]`, `[pulls]`; `proxy`: `[[proxy]]`; `env`: the
//!   `RDCTL_REGISTRY_*` variables; `store`: the S3 limits and the store the settings select.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::auth::{Auth, AuthConfig, AuthError};
use crate::events::NotificationsConfig;
use crate::gc::GcOptions;
use crate::governance::{Governance, RuleError};
use crate::ratelimit::RateLimit;
use crate::scrub::ScrubOptions;
use crate::storage::S3CredentialSettings;
use crate::tls::TlsSettings;

mod env;
mod file;
mod proxy;
mod schedule;
mod store;
#[cfg(test)]
mod tests;

pub use store::S3Limits;

/// How long a presigned URL of `s3_redirect` is valid unless `s3_redirect_expiry` says.
pub const DEFAULT_REDIRECT_EXPIRY: Duration = Duration::from_secs(300);

/// Registry behaviour that handlers consult.
#[derive(Debug, Clone)]
pub struct RegistryConfig {
    /// Whether DELETE of manifests, tags and blobs is allowed (405 `UNSUPPORTED` otherwise).
    pub delete_enabled: bool,
    /// Largest manifest accepted on PUT (413 above it).
    pub max_manifest_bytes: u64,
    /// Access control; None: every request is allowed.
    pub auth: Option<Arc<Auth>>,
    /// Whether clients reach the registry over HTTPS (the default token realm uses it).
    pub https: bool,
    /// Per-client rate limit (429 `TOOMANYREQUESTS` above it); none by default.
    pub rate_limit: Option<RateLimit>,
    /// Whether the web pages (`/` and `/ui/`) are served (`[ui] enabled`, default true).
    pub ui_enabled: bool,
    /// The public keys the pages verify signatures with (`[ui] trusted_keys`); none: a
    /// signature is shown as present, not verified.
    pub ui_trusted_keys: Arc<Vec<trust::VerifyingKey>>,
    /// Immutable tags, quotas and retention (`[[immutable]]`, `[[quota]]`, `[[retention]]`);
    /// empty by default.
    pub governance: Arc<Governance>,
    /// Event webhooks (`[notifications]`; default: no endpoints, no events).
    pub notifications: NotificationsConfig,
    /// Pull-through rules (`[[proxy]]`); none by default.
    pub proxy: Vec<crate::proxy::ProxyRule>,
    /// Scheduled sync entries (`[[sync]]`), for the status endpoint; none by default.
    pub sync: Vec<crate::mirror::SyncEntry>,
    /// Answer blob GETs with a 307 to a presigned URL of the object in the S3 store
    /// (`s3_redirect`); none: the registry sends the bytes itself.
    #[cfg(feature = "s3")]
    pub blob_redirect: Option<crate::storage::BlobRedirect>,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        RegistryConfig {
            delete_enabled: true,
            max_manifest_bytes: 4 << 20,
            auth: None,
            https: false,
            rate_limit: None,
            ui_enabled: true,
            ui_trusted_keys: Arc::default(),
            governance: Arc::default(),
            notifications: NotificationsConfig::default(),
            proxy: Vec::new(),
            sync: Vec::new(),
            #[cfg(feature = "s3")]
            blob_redirect: None,
        }
    }
}

/// Why a configuration could not be loaded, or the store it selects opened.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The configuration file could not be read.
    #[error("cannot read config file {path}")]
    ReadConfig {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The configuration file is not valid TOML for this schema.
    #[error("invalid config file {path}")]
    ParseConfig {
        /// The file.
        path: PathBuf,
        /// The cause (line, key and what is wrong).
        #[source]
        source: config_toml::TomlError,
    },
    /// An environment override has a bad value.
    #[error("environment variable {var} has a bad value {value:?}: {reason}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
        /// What was expected.
        reason: String,
    },
    /// The data directory could not be opened.
    #[error("cannot open the data directory {path}")]
    Data {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A setting in the configuration file has a bad value.
    #[error("invalid {key} in {}{}: {reason}", path.display(), at_line(*line))]
    Setting {
        /// The file.
        path: PathBuf,
        /// The line the key is written on, when it is found in the file.
        line: Option<usize>,
        /// The key (`gc.grace`).
        key: &'static str,
        /// What is wrong, naming the value as written.
        reason: String,
    },
    /// The S3 settings are incomplete.
    #[error("S3 store: {reason}")]
    S3Config {
        /// What is missing.
        reason: String,
    },
    /// An `[[immutable]]`, `[[quota]]` or `[[retention]]` entry is bad.
    #[error("invalid governance rule in {path}")]
    Governance {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key (`quota[1].repositories[0]`).
        #[source]
        source: RuleError,
    },
    /// The `[auth]` table has a bad entry.
    #[error("invalid [auth] settings in {path}")]
    AuthConfig {
        /// The file.
        path: PathBuf,
        /// What is wrong, naming the key.
        #[source]
        source: AuthError,
    },
}

/// ` line N` after the file's name, when the line is known.
fn at_line(line: Option<usize>) -> String {
    line.map(|l| format!(" line {l}")).unwrap_or_default()
}

/// `key` with the index of its array-of-tables entry (`sync.name`, 2 → `sync.2.name`), to
/// find its line.
fn indexed(key: &str, index: usize) -> String {
    match key.split_once('.') {
        Some((table, rest)) => format!("{table}.{index}.{rest}"),
        None => format!("{key}.{index}"),
    }
}

/// The file being read: its path and text, to name the line of a bad setting.
pub(crate) struct Source<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Source<'_> {
    /// A bad value of `key`, on the line where `at` (the dotted key with array indexes,
    /// `proxy.1.prefix`) is written.
    fn bad_at(&self, key: &'static str, at: &str, reason: impl Into<String>) -> ConfigError {
        ConfigError::Setting {
            path: self.path.to_owned(),
            line: config_toml::line_of(self.text, at),
            key,
            reason: reason.into(),
        }
    }

    /// A bad value of `key` (a key outside arrays of tables), on its line.
    fn bad(&self, key: &'static str, reason: impl Into<String>) -> ConfigError {
        self.bad_at(key, key, reason)
    }
}

/// Everything `rdctl registry serve` needs. Build it with [`ServeConfig::load`].
#[derive(Debug, Clone, PartialEq)]
pub struct ServeConfig {
    /// Address to listen on (default `127.0.0.1:5000`).
    pub listen: SocketAddr,
    /// Data directory of the filesystem store (default `./registry-data`).
    pub data: PathBuf,
    /// Whether deletes are allowed (default true).
    pub delete_enabled: bool,
    /// Largest manifest accepted (default 4 MiB).
    pub max_manifest_bytes: u64,
    /// How long in-flight requests may take to finish after a shutdown signal (default 30 s).
    pub shutdown_timeout: Duration,
    /// Uploads untouched for this long are removed (default 24 h).
    pub upload_max_age: Duration,
    /// Per-connection limits: request head, stalled writes, idle request bodies.
    pub conn_limits: crate::conn::ConnLimits,
    /// S3 endpoint URL; with [`ServeConfig::s3_bucket`] it selects the S3 store instead of
    /// the filesystem store.
    pub s3_endpoint: Option<String>,
    /// S3 bucket (must exist).
    pub s3_bucket: Option<String>,
    /// Key prefix inside the bucket (default none).
    pub s3_prefix: Option<String>,
    /// Region for SigV4 (default `us-east-1`; SeaweedFS accepts any).
    pub s3_region: Option<String>,
    /// Where S3 credentials come from (see [`crate::storage::resolve_s3_credentials`]).
    pub s3_credentials: S3CredentialSettings,
    /// How long the S3 client waits and how often it tries (default: the store's own).
    pub s3_limits: S3Limits,
    /// Answer blob GETs with a 307 to a presigned GetObject URL of the S3 object instead of
    /// sending the bytes (`s3_redirect`; default false). Needs the S3 store.
    pub s3_redirect: bool,
    /// How long each presigned URL is valid (`s3_redirect_expiry`; default 300 s).
    pub s3_redirect_expiry: Duration,
    /// Garbage collection: the schedule in the serving process and the policy (`[gc]`).
    pub gc: GcSchedule,
    /// Access control (`[auth]`, docs/auth.md); None: the registry is open.
    pub auth: Option<AuthConfig>,
    /// Serve HTTPS with these files instead of plain HTTP (`[tls]`; default: plain HTTP).
    pub tls: Option<TlsSettings>,
    /// Per-client rate limit (`[rate_limit]`; default: none).
    pub rate_limit: Option<RateLimit>,
    /// Serve the web pages at `/` and `/ui/` (`[ui] enabled`; default true).
    pub ui_enabled: bool,
    /// Keys the pages verify signatures with (`[ui] trusted_keys`, PEM public keys).
    pub ui_trusted_keys: Vec<trust::VerifyingKey>,
    /// `[[immutable]]`, `[[quota]]` and `[[retention]]` rules (default: none).
    pub governance: Governance,
    /// How often a replica writes the pull times it recorded (`pulls.flush_interval`;
    /// default 60 s).
    pub pull_flush_interval: Duration,
    /// Event webhooks (`[notifications]`, `[[notifications.endpoints]]`; default none).
    pub notifications: NotificationsConfig,
    /// Scrub: the schedule in the serving process and its rate (`[scrub]`).
    pub scrub: ScrubSchedule,
    /// Pull-through rules (`[[proxy]]`; default: none).
    pub proxy: Vec<crate::proxy::ProxyRule>,
    /// Scheduled sync from upstream registries (`[[sync]]`; default: none).
    pub sync: Vec<crate::mirror::SyncEntry>,
    /// Replication of pushes to other registries (`[[sync]]` with `to` and `on_push`).
    pub replicate: Vec<crate::replicate::ReplicationEntry>,
}

/// The `[scrub]` table: when the serving process scrubs and how fast. Its rate is also the
/// default of `rdctl registry scrub` with the same configuration file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ScrubSchedule {
    /// Scrub every this long (`scrub.interval`; default: never, run `rdctl registry scrub`).
    /// With several replicas one of them scrubs per interval.
    pub interval: Option<Duration>,
    /// Blob bytes read per second (`scrub.rate`; default: unlimited).
    pub options: ScrubOptions,
    /// Write each scheduled run's JSON report to this file (`scrub.report`; default none).
    pub report: Option<PathBuf>,
}

/// The `[gc]` table: when the serving process collects garbage and how. Its policy is also the
/// default of `rdctl registry gc` with the same configuration file.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct GcSchedule {
    /// Collect every this long (`gc.interval`; default: never, run `rdctl registry gc`).
    pub interval: Option<Duration>,
    /// Grace window and policy (`gc.grace`, default 1h; `gc.delete_untagged`, default false;
    /// `gc.keep_referrers`, default true).
    pub options: GcOptions,
}

impl Default for ServeConfig {
    fn default() -> Self {
        ServeConfig {
            listen: SocketAddr::from(([127, 0, 0, 1], 5000)),
            data: PathBuf::from("registry-data"),
            delete_enabled: true,
            max_manifest_bytes: 4 << 20,
            shutdown_timeout: Duration::from_secs(30),
            upload_max_age: Duration::from_secs(24 * 3600),
            conn_limits: crate::conn::ConnLimits::default(),
            s3_endpoint: None,
            s3_bucket: None,
            s3_prefix: None,
            gc: GcSchedule::default(),
            s3_region: None,
            s3_credentials: S3CredentialSettings::default(),
            s3_limits: S3Limits::default(),
            s3_redirect: false,
            s3_redirect_expiry: DEFAULT_REDIRECT_EXPIRY,
            auth: None,
            tls: None,
            rate_limit: None,
            ui_enabled: true,
            ui_trusted_keys: Vec::new(),
            governance: Governance::default(),
            pull_flush_interval: Duration::from_secs(60),
            notifications: NotificationsConfig::default(),
            scrub: ScrubSchedule::default(),
            proxy: Vec::new(),
            sync: Vec::new(),
            replicate: Vec::new(),
        }
    }
}

impl ServeConfig {
    /// Defaults, then the TOML file (if any), then `RDCTL_REGISTRY_*` environment variables
    /// (`LISTEN`, `DATA`, `DELETE_ENABLED`, `MAX_MANIFEST_SIZE`, `SHUTDOWN_TIMEOUT`,
    /// `UPLOAD_MAX_AGE`, ...; docs/operations.md lists them). Command-line flags are applied by
    /// the caller afterwards.
    pub fn load(file: Option<&Path>) -> Result<ServeConfig, ConfigError> {
        Self::load_with_env(file, &|k| std::env::var(k).ok())
    }

    /// [`ServeConfig::load`] with an explicit environment (for tests).
    pub fn load_with_env(
        file: Option<&Path>,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<ServeConfig, ConfigError> {
        let mut c = ServeConfig::default();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::ReadConfig {
                path: path.to_owned(),
                source,
            })?;
            c.apply_file(&Source { path, text: &text })?;
        }
        c.apply_env(env)?;
        Ok(c)
    }
}
