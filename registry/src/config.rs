//! The registry's configuration: [`ServeConfig`] (everything `rdctl registry serve` reads:
//! defaults, then a TOML file, then `RDCTL_REGISTRY_*` environment variables), the `[gc]`
//! schedule ([`GcSchedule`]), the store it selects ([`ServeConfig::open_store`]), and
//! [`RegistryConfig`], the part request handlers consult. Nothing here serves.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::auth::{Auth, AuthConfig, AuthError, FileAuth};
use crate::duration::parse_duration;
use crate::events::{FileNotifications, NotificationsConfig};
use crate::gc::{self, GcOptions};
use crate::governance::{FileGovernance, Governance, RuleError};
use crate::ratelimit::RateLimit;
use crate::scrub::ScrubOptions;
use crate::storage::{FsStore, S3CredentialSettings, Store};
#[cfg(feature = "s3")]
use crate::storage::{S3Config, S3Store, resolve_s3_credentials};
use crate::tls::TlsSettings;

/// How long a presigned URL of `s3_redirect` is valid unless `s3_redirect_expiry_secs` says.
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
    #[error("environment variable {var} has a bad value {value:?}")]
    Env {
        /// The variable.
        var: &'static str,
        /// Its value.
        value: String,
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
    #[error("invalid {key} in {path}: {reason}")]
    Setting {
        /// The file.
        path: PathBuf,
        /// The key (`gc.grace`).
        key: &'static str,
        /// What is wrong.
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
    /// How long each presigned URL is valid (`s3_redirect_expiry_secs`; default 300 s).
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

/// The `[scrub]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileScrub {
    interval: Option<String>,
    rate: Option<u64>,
    report: Option<PathBuf>,
}

/// The S3 client's timeouts and attempts (`s3_connect_timeout_secs`, `s3_attempt_timeout_secs`,
/// `s3_operation_timeout_secs`, `s3_max_attempts`); `None` keeps the store's default (5 s,
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
    fn apply(&self, c: &mut S3Config) -> Result<(), String> {
        for (key, v, slot) in [
            (
                "s3_connect_timeout_secs",
                self.connect_timeout,
                &mut c.connect_timeout,
            ),
            (
                "s3_attempt_timeout_secs",
                self.attempt_timeout,
                &mut c.attempt_timeout,
            ),
            (
                "s3_operation_timeout_secs",
                self.operation_timeout,
                &mut c.operation_timeout,
            ),
        ] {
            if let Some(v) = v {
                if v.is_zero() {
                    return Err(format!("{key} must be at least 1 second"));
                }
                *slot = v;
            }
        }
        if c.attempt_timeout > c.operation_timeout {
            return Err(format!(
                "s3_attempt_timeout_secs ({} s) is longer than s3_operation_timeout_secs ({} s), \
                 which covers all the attempts of a request",
                c.attempt_timeout.as_secs(),
                c.operation_timeout.as_secs()
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

/// The TOML file: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    listen: Option<SocketAddr>,
    data: Option<PathBuf>,
    delete_enabled: Option<bool>,
    max_manifest_bytes: Option<u64>,
    shutdown_timeout_secs: Option<u64>,
    upload_max_age_secs: Option<u64>,
    header_read_timeout_secs: Option<u64>,
    write_stall_timeout_secs: Option<u64>,
    body_idle_timeout_secs: Option<u64>,
    s3_endpoint: Option<String>,
    s3_bucket: Option<String>,
    s3_prefix: Option<String>,
    s3_region: Option<String>,
    s3_access_key_id: Option<String>,
    s3_secret_access_key: Option<String>,
    s3_session_token: Option<String>,
    s3_profile: Option<String>,
    s3_config_file: Option<PathBuf>,
    s3_credentials_file: Option<PathBuf>,
    s3_connect_timeout_secs: Option<u64>,
    s3_attempt_timeout_secs: Option<u64>,
    s3_operation_timeout_secs: Option<u64>,
    s3_max_attempts: Option<u32>,
    s3_redirect: Option<bool>,
    s3_redirect_expiry_secs: Option<u64>,
    gc: Option<FileGc>,
    auth: Option<FileAuth>,
    tls: Option<FileTls>,
    rate_limit: Option<FileRateLimit>,
    ui: Option<FileUi>,
    notifications: Option<FileNotifications>,
    scrub: Option<FileScrub>,
    #[serde(default)]
    immutable: Vec<crate::governance::immutable::FileImmutable>,
    #[serde(default)]
    quota: Vec<crate::governance::quota::FileQuota>,
    #[serde(default)]
    retention: Vec<crate::governance::retention::FileRetention>,
    pulls: Option<FilePulls>,
    proxy: Option<Vec<FileProxy>>,
    sync: Option<Vec<crate::mirror::FileSync>>,
}

/// The `[pulls]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FilePulls {
    flush_interval: Option<String>,
}

/// A `[[proxy]]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProxy {
    prefix: Option<String>,
    upstreams: Option<Vec<String>>,
    tag_ttl_secs: Option<u64>,
    auth_file: Option<PathBuf>,
    #[serde(default)]
    ca_files: Vec<PathBuf>,
    #[serde(default)]
    cert_dirs: Vec<PathBuf>,
    insecure: Option<bool>,
    only_signed: Option<PathBuf>,
}

/// The `[ui]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileUi {
    enabled: Option<bool>,
    #[serde(default)]
    trusted_keys: Vec<PathBuf>,
}

/// The `[tls]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileTls {
    cert: Option<PathBuf>,
    key: Option<PathBuf>,
    client_ca: Option<PathBuf>,
}

/// The `[rate_limit]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileRateLimit {
    requests_per_second: Option<u32>,
    burst: Option<u32>,
}

/// The `[gc]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileGc {
    interval: Option<String>,
    grace: Option<String>,
    delete_untagged: Option<bool>,
    keep_referrers: Option<bool>,
    lease_ttl: Option<String>,
}

fn env_parse<T: std::str::FromStr>(
    env: &dyn Fn(&str) -> Option<String>,
    var: &'static str,
) -> Result<Option<T>, ConfigError> {
    match env(var) {
        None => Ok(None),
        Some(v) => v
            .parse()
            .map(Some)
            .map_err(|_| ConfigError::Env { var, value: v }),
    }
}

impl ServeConfig {
    /// Defaults, then the TOML file (if any), then `RDCTL_REGISTRY_*` environment variables
    /// (`LISTEN`, `DATA`, `DELETE_ENABLED`, `MAX_MANIFEST_BYTES`, `SHUTDOWN_TIMEOUT_SECS`,
    /// `UPLOAD_MAX_AGE_SECS`). Command-line flags are applied by the caller afterwards.
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
            let mut f: FileConfig =
                config_toml::from_str(&text, &[]).map_err(|source| ConfigError::ParseConfig {
                    path: path.to_owned(),
                    source,
                })?;
            if let Some(g) = f.gc.take() {
                c.apply_gc(g, path)?;
            }
            if let Some(a) = f.auth.take() {
                c.auth =
                    Some(
                        AuthConfig::from_file(a).map_err(|source| ConfigError::AuthConfig {
                            path: path.to_owned(),
                            source,
                        })?,
                    );
            }
            if let Some(t) = f.tls.take() {
                c.apply_tls(t, path)?;
            }
            if let Some(r) = f.rate_limit.take() {
                c.apply_rate_limit(r, path)?;
            }
            if let Some(sc) = f.scrub.take() {
                if let Some(v) = sc.interval {
                    let d = parse_duration(&v).map_err(|e| ConfigError::Setting {
                        path: path.to_owned(),
                        key: "scrub.interval",
                        reason: e.to_string(),
                    })?;
                    if d.is_zero() {
                        return Err(ConfigError::Setting {
                            path: path.to_owned(),
                            key: "scrub.interval",
                            reason: "must be longer than 0".to_owned(),
                        });
                    }
                    c.scrub.interval = Some(d);
                }
                if sc.rate == Some(0) {
                    return Err(ConfigError::Setting {
                        path: path.to_owned(),
                        key: "scrub.rate",
                        reason: "must be at least 1 byte per second (leave it out for no limit)"
                            .to_owned(),
                    });
                }
                c.scrub.options.rate = sc.rate;
                c.scrub.report = sc.report;
            }
            if let Some(n) = f.notifications.take() {
                c.notifications = n.check().map_err(|(key, reason)| ConfigError::Setting {
                    path: path.to_owned(),
                    key,
                    reason,
                })?;
            }
            if let Some(p) = f.proxy.take() {
                c.apply_proxy(p, path)?;
            }
            for s in f.sync.take().unwrap_or_default() {
                let setting = |(key, reason)| ConfigError::Setting {
                    path: path.to_owned(),
                    key,
                    reason,
                };
                if s.replicates() {
                    let entry = s.check_replication().map_err(setting)?;
                    if c.sync.iter().any(|e| e.name == entry.name)
                        || c.replicate.iter().any(|e| e.name == entry.name)
                    {
                        return Err(ConfigError::Setting {
                            path: path.to_owned(),
                            key: "sync.name",
                            reason: format!("two [[sync]] entries are named {:?}", entry.name),
                        });
                    }
                    c.replicate.push(entry);
                    continue;
                }
                let entry = s.check().map_err(setting)?;
                if c.sync.iter().any(|e| e.name == entry.name)
                    || c.replicate.iter().any(|e| e.name == entry.name)
                {
                    return Err(ConfigError::Setting {
                        path: path.to_owned(),
                        key: "sync.name",
                        reason: format!("two [[sync]] entries are named {:?}", entry.name),
                    });
                }
                c.sync.push(entry);
            }
            if let Some(ui) = f.ui.take() {
                if let Some(enabled) = ui.enabled {
                    c.ui_enabled = enabled;
                }
                for k in &ui.trusted_keys {
                    let bytes = std::fs::read(k).map_err(|e| ConfigError::Setting {
                        path: path.to_owned(),
                        key: "ui.trusted_keys",
                        reason: format!("cannot read {}: {e}", k.display()),
                    })?;
                    let key = trust::VerifyingKey::from_pem(&bytes, &k.display().to_string())
                        .map_err(|e| ConfigError::Setting {
                            path: path.to_owned(),
                            key: "ui.trusted_keys",
                            reason: e.to_string(),
                        })?;
                    c.ui_trusted_keys.push(key);
                }
            }
            c.governance = Governance::from_file(FileGovernance {
                immutable: std::mem::take(&mut f.immutable),
                quota: std::mem::take(&mut f.quota),
                retention: std::mem::take(&mut f.retention),
            })
            .map_err(|source| ConfigError::Governance {
                path: path.to_owned(),
                source,
            })?;
            if let Some(v) = f.pulls.take().and_then(|p| p.flush_interval) {
                let d = parse_duration(&v).map_err(|e| ConfigError::Setting {
                    path: path.to_owned(),
                    key: "pulls.flush_interval",
                    reason: e.to_string(),
                })?;
                if d.is_zero() {
                    return Err(ConfigError::Setting {
                        path: path.to_owned(),
                        key: "pulls.flush_interval",
                        reason: "must be longer than 0".to_owned(),
                    });
                }
                c.pull_flush_interval = d;
            }
            c.apply(f);
        }
        let f = FileConfig {
            listen: env_parse(env, "RDCTL_REGISTRY_LISTEN")?,
            data: env_parse(env, "RDCTL_REGISTRY_DATA")?,
            delete_enabled: env_parse(env, "RDCTL_REGISTRY_DELETE_ENABLED")?,
            max_manifest_bytes: env_parse(env, "RDCTL_REGISTRY_MAX_MANIFEST_BYTES")?,
            shutdown_timeout_secs: env_parse(env, "RDCTL_REGISTRY_SHUTDOWN_TIMEOUT_SECS")?,
            upload_max_age_secs: env_parse(env, "RDCTL_REGISTRY_UPLOAD_MAX_AGE_SECS")?,
            header_read_timeout_secs: env_parse(env, "RDCTL_REGISTRY_HEADER_READ_TIMEOUT_SECS")?,
            write_stall_timeout_secs: env_parse(env, "RDCTL_REGISTRY_WRITE_STALL_TIMEOUT_SECS")?,
            body_idle_timeout_secs: env_parse(env, "RDCTL_REGISTRY_BODY_IDLE_TIMEOUT_SECS")?,
            s3_endpoint: env_parse(env, "RDCTL_REGISTRY_S3_ENDPOINT")?,
            s3_bucket: env_parse(env, "RDCTL_REGISTRY_S3_BUCKET")?,
            s3_prefix: env_parse(env, "RDCTL_REGISTRY_S3_PREFIX")?,
            gc: None,
            auth: None,
            s3_region: env_parse(env, "RDCTL_REGISTRY_S3_REGION")?,
            s3_profile: env_parse(env, "RDCTL_REGISTRY_S3_PROFILE")?,
            s3_connect_timeout_secs: env_parse(env, "RDCTL_REGISTRY_S3_CONNECT_TIMEOUT_SECS")?,
            s3_attempt_timeout_secs: env_parse(env, "RDCTL_REGISTRY_S3_ATTEMPT_TIMEOUT_SECS")?,
            s3_operation_timeout_secs: env_parse(env, "RDCTL_REGISTRY_S3_OPERATION_TIMEOUT_SECS")?,
            s3_max_attempts: env_parse(env, "RDCTL_REGISTRY_S3_MAX_ATTEMPTS")?,
            s3_redirect: env_parse(env, "RDCTL_REGISTRY_S3_REDIRECT")?,
            s3_redirect_expiry_secs: env_parse(env, "RDCTL_REGISTRY_S3_REDIRECT_EXPIRY_SECS")?,
            // Keys come from the file or from the standard AWS_* variables, not from more
            // variables of our own.
            ..FileConfig::default()
        };
        c.apply(f);
        Ok(c)
    }

    fn apply_gc(&mut self, g: FileGc, path: &Path) -> Result<(), ConfigError> {
        let bad = |key, reason: String| ConfigError::Setting {
            path: path.to_owned(),
            key,
            reason,
        };
        if let Some(v) = g.interval {
            let d = parse_duration(&v).map_err(|r| bad("gc.interval", r.to_string()))?;
            if d.is_zero() {
                return Err(bad("gc.interval", "must be longer than 0".to_owned()));
            }
            self.gc.interval = Some(d);
        }
        if let Some(v) = g.grace {
            let d = parse_duration(&v).map_err(|r| bad("gc.grace", r.to_string()))?;
            // The server collects while it takes pushes; a shorter window is unsafe then.
            if d < gc::MIN_SAFE_GRACE {
                return Err(bad(
                    "gc.grace",
                    format!(
                        "{v:?} is shorter than {:?}, the least that keeps concurrent pushes safe",
                        gc::MIN_SAFE_GRACE
                    ),
                ));
            }
            self.gc.options.grace = d;
        }
        if let Some(v) = g.delete_untagged {
            self.gc.options.delete_untagged = v;
        }
        if let Some(v) = g.keep_referrers {
            self.gc.options.keep_referrers = v;
        }
        if let Some(v) = g.lease_ttl {
            let d = parse_duration(&v).map_err(|r| bad("gc.lease_ttl", r.to_string()))?;
            if d < gc::MIN_LEASE_TTL {
                return Err(bad(
                    "gc.lease_ttl",
                    format!("{v:?} is shorter than {:?}", gc::MIN_LEASE_TTL),
                ));
            }
            self.gc.options.lease_ttl = d;
        }
        Ok(())
    }

    fn apply_tls(&mut self, t: FileTls, path: &Path) -> Result<(), ConfigError> {
        let missing = |key| ConfigError::Setting {
            path: path.to_owned(),
            key,
            reason: "[tls] needs both cert and key".to_owned(),
        };
        self.tls = Some(TlsSettings {
            cert: t.cert.ok_or_else(|| missing("tls.cert"))?,
            key: t.key.ok_or_else(|| missing("tls.key"))?,
            client_ca: t.client_ca,
        });
        Ok(())
    }

    fn apply_proxy(&mut self, rules: Vec<FileProxy>, path: &Path) -> Result<(), ConfigError> {
        let bad = |key, reason: String| ConfigError::Setting {
            path: path.to_owned(),
            key,
            reason,
        };
        for (i, r) in rules.into_iter().enumerate() {
            let prefix = r
                .prefix
                .ok_or_else(|| bad("proxy.prefix", format!("[[proxy]] {i} needs a prefix")))?;
            let prefix = prefix.trim_matches('/').to_owned();
            validator::Name::parse(&prefix)
                .map_err(|e| bad("proxy.prefix", format!("{prefix:?}: {e}")))?;
            if self.proxy.iter().any(|p| {
                p.prefix == prefix
                    || p.prefix.starts_with(&format!("{prefix}/"))
                    || prefix.starts_with(&format!("{}/", p.prefix))
            }) {
                return Err(bad(
                    "proxy.prefix",
                    format!("{prefix:?} overlaps another [[proxy]] prefix"),
                ));
            }
            let upstreams = r.upstreams.unwrap_or_default();
            if upstreams.is_empty() {
                return Err(bad(
                    "proxy.upstreams",
                    format!("[[proxy]] {prefix:?} needs at least one upstream"),
                ));
            }
            let upstreams = upstreams
                .iter()
                .map(|u| crate::proxy::Upstream::parse(u).map_err(|e| bad("proxy.upstreams", e)))
                .collect::<Result<Vec<_>, _>>()?;
            let rule = crate::proxy::ProxyRule {
                prefix,
                upstreams,
                tag_ttl: Duration::from_secs(r.tag_ttl_secs.unwrap_or(300)),
                auth_file: r.auth_file,
                ca_files: r.ca_files,
                cert_dirs: r.cert_dirs,
                insecure: r.insecure.unwrap_or(false),
                only_signed: r.only_signed,
            };
            // A policy that cannot be loaded fails here, naming the file and why.
            if let Some(p) = &rule.only_signed {
                registry_client::sync::SignaturePolicy::load(p).map_err(|e| {
                    bad(
                        "proxy.only_signed",
                        format!(
                            "[[proxy]] {:?}: {}: {}",
                            rule.prefix,
                            p.display(),
                            validator::error_chain(&e)
                        ),
                    )
                })?;
            }
            // A CA file or certs.d entry that cannot be read fails here, naming it.
            for u in &rule.upstreams {
                rule.client_for(u).map_err(|e| {
                    bad(
                        "proxy.ca_files",
                        format!(
                            "[[proxy]] {:?}: {u}: {}",
                            rule.prefix,
                            validator::error_chain(&e)
                        ),
                    )
                })?;
            }
            self.proxy.push(rule);
        }
        Ok(())
    }

    fn apply_rate_limit(&mut self, r: FileRateLimit, path: &Path) -> Result<(), ConfigError> {
        let bad = |key, reason: &str| ConfigError::Setting {
            path: path.to_owned(),
            key,
            reason: reason.to_owned(),
        };
        let rps = r.requests_per_second.ok_or_else(|| {
            bad(
                "rate_limit.requests_per_second",
                "[rate_limit] needs requests_per_second",
            )
        })?;
        let rps = std::num::NonZeroU32::new(rps).ok_or_else(|| {
            bad(
                "rate_limit.requests_per_second",
                "must be at least 1 (leave out [rate_limit] for no limit)",
            )
        })?;
        let burst = match r.burst {
            None => rps,
            Some(b) => std::num::NonZeroU32::new(b)
                .ok_or_else(|| bad("rate_limit.burst", "must be at least 1"))?,
        };
        self.rate_limit = Some(RateLimit {
            requests_per_second: rps,
            burst,
        });
        Ok(())
    }

    fn apply(&mut self, f: FileConfig) {
        if let Some(v) = f.listen {
            self.listen = v;
        }
        if let Some(v) = f.data {
            self.data = v;
        }
        if let Some(v) = f.delete_enabled {
            self.delete_enabled = v;
        }
        if let Some(v) = f.max_manifest_bytes {
            self.max_manifest_bytes = v;
        }
        if let Some(v) = f.shutdown_timeout_secs {
            self.shutdown_timeout = Duration::from_secs(v);
        }
        if let Some(v) = f.upload_max_age_secs {
            self.upload_max_age = Duration::from_secs(v);
        }
        // Zero would close every connection at once; it is read as one second.
        let l = &mut self.conn_limits;
        for (slot, v) in [
            (&mut l.header_read, f.header_read_timeout_secs),
            (&mut l.write_stall, f.write_stall_timeout_secs),
            (&mut l.body_idle, f.body_idle_timeout_secs),
        ] {
            if let Some(v) = v {
                *slot = Duration::from_secs(v.max(1));
            }
        }
        if f.s3_endpoint.is_some() {
            self.s3_endpoint = f.s3_endpoint;
        }
        if f.s3_bucket.is_some() {
            self.s3_bucket = f.s3_bucket;
        }
        if f.s3_prefix.is_some() {
            self.s3_prefix = f.s3_prefix;
        }
        if f.s3_region.is_some() {
            self.s3_region = f.s3_region;
        }
        if let Some(v) = f.s3_redirect {
            self.s3_redirect = v;
        }
        if let Some(v) = f.s3_redirect_expiry_secs {
            self.s3_redirect_expiry = Duration::from_secs(v);
        }
        let l = &mut self.s3_limits;
        for (slot, v) in [
            (&mut l.connect_timeout, f.s3_connect_timeout_secs),
            (&mut l.attempt_timeout, f.s3_attempt_timeout_secs),
            (&mut l.operation_timeout, f.s3_operation_timeout_secs),
        ] {
            if let Some(v) = v {
                *slot = Some(Duration::from_secs(v));
            }
        }
        if f.s3_max_attempts.is_some() {
            l.max_attempts = f.s3_max_attempts;
        }
        let c = &mut self.s3_credentials;
        for (slot, v) in [
            (&mut c.access_key_id, f.s3_access_key_id),
            (&mut c.secret_access_key, f.s3_secret_access_key),
            (&mut c.session_token, f.s3_session_token),
            (&mut c.profile, f.s3_profile),
        ] {
            if v.is_some() {
                *slot = v;
            }
        }
        if f.s3_config_file.is_some() {
            c.config_file = f.s3_config_file;
        }
        if f.s3_credentials_file.is_some() {
            c.credentials_file = f.s3_credentials_file;
        }
    }

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
        Ok(Arc::new(store))
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn s3_limits_from_file_and_environment() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("registry.toml");
        std::fs::write(
            &p,
            "s3_connect_timeout_secs = 2\ns3_attempt_timeout_secs = 20\ns3_max_attempts = 6\n",
        )
        .unwrap();
        let env = |k: &str| (k == "RDCTL_REGISTRY_S3_OPERATION_TIMEOUT_SECS").then(|| "90".into());
        let c = ServeConfig::load_with_env(Some(&p), &env).unwrap();
        assert_eq!(
            c.s3_limits,
            S3Limits {
                connect_timeout: Some(Duration::from_secs(2)),
                attempt_timeout: Some(Duration::from_secs(20)),
                operation_timeout: Some(Duration::from_secs(90)),
                max_attempts: Some(6),
            }
        );
        let bad = |k: &str| (k == "RDCTL_REGISTRY_S3_MAX_ATTEMPTS").then(|| "many".into());
        let e = ServeConfig::load_with_env(None, &bad).unwrap_err();
        assert!(
            e.to_string().contains("RDCTL_REGISTRY_S3_MAX_ATTEMPTS"),
            "{e}"
        );
    }

    #[cfg(feature = "s3")]
    #[test]
    fn s3_limits_reach_the_store_settings_or_are_refused() {
        let mut c = S3Config::new("http://127.0.0.1:1", "b");
        let limits = S3Limits {
            connect_timeout: Some(Duration::from_secs(2)),
            attempt_timeout: Some(Duration::from_secs(20)),
            operation_timeout: None,
            max_attempts: Some(1),
        };
        limits.apply(&mut c).unwrap();
        assert_eq!(c.connect_timeout, Duration::from_secs(2));
        assert_eq!(c.attempt_timeout, Duration::from_secs(20));
        assert_eq!(c.operation_timeout, Duration::from_secs(180));
        assert_eq!(c.max_attempts, 1);
        for (limits, key) in [
            (
                S3Limits {
                    attempt_timeout: Some(Duration::ZERO),
                    ..S3Limits::default()
                },
                "s3_attempt_timeout_secs must be at least 1 second",
            ),
            (
                S3Limits {
                    attempt_timeout: Some(Duration::from_secs(300)),
                    ..S3Limits::default()
                },
                "s3_attempt_timeout_secs (300 s) is longer than s3_operation_timeout_secs (180 s)",
            ),
            (
                S3Limits {
                    max_attempts: Some(0),
                    ..S3Limits::default()
                },
                "s3_max_attempts is 0",
            ),
        ] {
            let e = limits
                .apply(&mut S3Config::new("http://127.0.0.1:1", "b"))
                .unwrap_err();
            assert!(e.contains(key), "{e}");
        }
        // Through the server's configuration, the refusal names the store.
        let serve = ServeConfig {
            s3_endpoint: Some("http://127.0.0.1:1".into()),
            s3_bucket: Some("b".into()),
            s3_limits: S3Limits {
                max_attempts: Some(11),
                ..S3Limits::default()
            },
            ..ServeConfig::default()
        };
        let e = serve.s3_store().expect_err("refused").to_string();
        assert!(e.starts_with("S3 store: s3_max_attempts is 11"), "{e}");
    }

    #[cfg(feature = "s3")]
    #[test]
    fn s3_redirect_keys_from_the_file_and_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("registry.toml");
        std::fs::write(
            &p,
            "s3_endpoint = \"http://127.0.0.1:9\"\ns3_bucket = \"b\"\ns3_redirect = true\n",
        )
        .unwrap();
        let c = ServeConfig::load_with_env(Some(&p), &|_| None).unwrap();
        assert!(c.s3_redirect);
        assert_eq!(c.s3_redirect_expiry, DEFAULT_REDIRECT_EXPIRY);
        let s3 = c.s3_store().unwrap();
        let r = c.blob_redirect(s3.as_ref()).unwrap().expect("on");
        assert_eq!(r.expiry(), DEFAULT_REDIRECT_EXPIRY);
        let env = |k: &str| match k {
            "RDCTL_REGISTRY_S3_REDIRECT_EXPIRY_SECS" => Some("900".to_owned()),
            "RDCTL_REGISTRY_S3_REDIRECT" => Some("false".to_owned()),
            _ => None,
        };
        let c = ServeConfig::load_with_env(Some(&p), &env).unwrap();
        assert!(!c.s3_redirect);
        assert_eq!(c.s3_redirect_expiry, Duration::from_secs(900));
        assert!(c.blob_redirect(None).unwrap().is_none());
        // On without the S3 store, or with an expiry no presigned URL can have: refused.
        let fs = ServeConfig {
            s3_redirect: true,
            ..ServeConfig::default()
        };
        let e = fs.blob_redirect(None).unwrap_err().to_string();
        assert!(
            e.contains("s3_redirect is on but the registry uses the filesystem store"),
            "{e}"
        );
        let week = ServeConfig {
            s3_redirect: true,
            s3_redirect_expiry: Duration::from_secs(8 * 24 * 3600),
            ..c
        };
        let e = week.blob_redirect(s3.as_ref()).unwrap_err().to_string();
        assert!(e.contains("s3_redirect_expiry_secs is 691200 s"), "{e}");
    }

    #[test]
    fn proxy_rules_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let load = |text: &str| {
            let p = dir.path().join("registry.toml");
            std::fs::write(&p, text).unwrap();
            ServeConfig::load_with_env(Some(&p), &|_| None)
        };
        let c = load(
            "[[proxy]]\nprefix = \"central/\"\nupstreams = [\"http://127.0.0.1:5000/zones\", \"https://b.example\"]\n",
        )
        .unwrap();
        assert_eq!(c.proxy.len(), 1);
        assert_eq!(c.proxy[0].prefix, "central");
        assert_eq!(c.proxy[0].upstreams.len(), 2);
        assert_eq!(c.proxy[0].tag_ttl, Duration::from_secs(300));
        for (text, key) in [
            (
                "[[proxy]]\nupstreams = [\"http://a.example\"]\n",
                "proxy.prefix",
            ),
            ("[[proxy]]\nprefix = \"c\"\n", "proxy.upstreams"),
            (
                "[[proxy]]\nprefix = \"c\"\nupstreams = [\"a.example\"]\n",
                "proxy.upstreams",
            ),
            (
                "[[proxy]]\nprefix = \"c\"\nupstreams = [\"http://a.example\"]\n[[proxy]]\nprefix = \"c/d\"\nupstreams = [\"http://b.example\"]\n",
                "proxy.prefix",
            ),
            (
                "[[proxy]]\nprefix = \"c\"\nupstreams = [\"http://a.example\"]\nonly_signed = \"/nonexistent/policy.toml\"\n",
                "proxy.only_signed",
            ),
        ] {
            let e = load(text).unwrap_err();
            assert!(
                matches!(&e, ConfigError::Setting { key: k, .. } if *k == key),
                "{text}: {e:?}"
            );
        }
    }

    #[test]
    fn config_layers_file_then_env() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("r.toml");
        std::fs::write(
            &file,
            "listen = \"127.0.0.1:6000\"\ndata = \"/srv/r\"\ndelete_enabled = false\n",
        )
        .unwrap();
        let none = |_: &str| None;
        let c = ServeConfig::load_with_env(Some(&file), &none).unwrap();
        assert_eq!(c.listen.port(), 6000);
        assert_eq!(c.data, PathBuf::from("/srv/r"));
        assert!(!c.delete_enabled);
        let env = |k: &str| (k == "RDCTL_REGISTRY_LISTEN").then(|| "0.0.0.0:7000".to_owned());
        let c = ServeConfig::load_with_env(Some(&file), &env).unwrap();
        assert_eq!(c.listen.port(), 7000);
        assert_eq!(
            ServeConfig::load_with_env(None, &none).unwrap(),
            ServeConfig::default()
        );

        std::fs::write(
            &file,
            "[gc]\ninterval = \"6h\"\ngrace = \"2h\"\ndelete_untagged = true\n",
        )
        .unwrap();
        let c = ServeConfig::load_with_env(Some(&file), &none).unwrap();
        assert_eq!(c.gc.interval, Some(Duration::from_secs(6 * 3600)));
        assert_eq!(c.gc.options.grace, Duration::from_secs(2 * 3600));
        assert!(c.gc.options.delete_untagged && c.gc.options.keep_referrers);
        for bad in [
            "[gc]\ngrace = \"1s\"\n",
            "[gc]\ninterval = \"0\"\n",
            "[gc]\nlease_ttl = \"1s\"\n",
            "[gc]\ninterval = \"soon\"\n",
        ] {
            std::fs::write(&file, bad).unwrap();
            let e = ServeConfig::load_with_env(Some(&file), &none).unwrap_err();
            assert!(matches!(e, ConfigError::Setting { .. }), "{bad}: {e}");
        }

        std::fs::write(
            &file,
            "[tls]\ncert = \"/etc/r/c.pem\"\nkey = \"/etc/r/k.pem\"\n[rate_limit]\nrequests_per_second = 20\n",
        )
        .unwrap();
        let c = ServeConfig::load_with_env(Some(&file), &none).unwrap();
        let tls = c.tls.expect("[tls]");
        assert_eq!(
            (tls.cert, tls.key, tls.client_ca),
            ("/etc/r/c.pem".into(), "/etc/r/k.pem".into(), None)
        );
        let limit = c.rate_limit.expect("[rate_limit]");
        assert_eq!(
            (limit.requests_per_second.get(), limit.burst.get()),
            (20, 20)
        );
        for (bad, key) in [
            ("[tls]\ncert = \"c.pem\"\n", "tls.key"),
            ("[tls]\nkey = \"k.pem\"\n", "tls.cert"),
            (
                "[rate_limit]\nburst = 5\n",
                "rate_limit.requests_per_second",
            ),
            (
                "[rate_limit]\nrequests_per_second = 0\n",
                "rate_limit.requests_per_second",
            ),
            (
                "[rate_limit]\nrequests_per_second = 1\nburst = 0\n",
                "rate_limit.burst",
            ),
        ] {
            std::fs::write(&file, bad).unwrap();
            let e = ServeConfig::load_with_env(Some(&file), &none).unwrap_err();
            assert!(
                matches!(e, ConfigError::Setting { key: k, .. } if k == key),
                "{bad}: {e}"
            );
        }

        std::fs::write(&file, "bogus = 1\n").unwrap();
        assert!(matches!(
            ServeConfig::load_with_env(Some(&file), &none),
            Err(ConfigError::ParseConfig { .. })
        ));
        let bad = |k: &str| (k == "RDCTL_REGISTRY_DELETE_ENABLED").then(|| "maybe".to_owned());
        assert!(matches!(
            ServeConfig::load_with_env(None, &bad),
            Err(ConfigError::Env { .. })
        ));
    }
}
