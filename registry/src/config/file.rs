//! The TOML file: its tables as written, and how each lands in [`ServeConfig`].
//!
//! Durations and sizes are read by config-toml's [`HumanDuration`] and [`ByteSize`]: the
//! string form (`"30s"`, `"4MiB"`) or the legacy integer (seconds, bytes). Keys that used to
//! carry their unit in the name (`shutdown_timeout_secs`, `max_manifest_bytes`) are read under
//! the new name and, as deprecated aliases, the old one; a file giving both is refused.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use config_toml::{ByteSize, HumanDuration};
use serde::Deserialize;

use super::proxy::FileProxy;
use super::schedule::{FileGc, FilePulls, FileScrub};
use super::{ConfigError, ServeConfig, Source, indexed};
use crate::auth::{AuthConfig, FileAuth};
use crate::events::FileNotifications;
use crate::governance::{FileGovernance, Governance};
use crate::ratelimit::RateLimit;
use crate::tls::TlsSettings;

/// The TOML file: every key optional.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileConfig {
    listen: Option<SocketAddr>,
    data: Option<PathBuf>,
    delete_enabled: Option<bool>,
    sendfile: Option<bool>,
    sendfile_min_size: Option<ByteSize>,
    #[serde(alias = "max_manifest_bytes")]
    max_manifest_size: Option<ByteSize>,
    #[serde(alias = "shutdown_timeout_secs")]
    shutdown_timeout: Option<HumanDuration>,
    #[serde(alias = "upload_max_age_secs")]
    upload_max_age: Option<HumanDuration>,
    #[serde(alias = "header_read_timeout_secs")]
    header_read_timeout: Option<HumanDuration>,
    #[serde(alias = "write_stall_timeout_secs")]
    write_stall_timeout: Option<HumanDuration>,
    #[serde(alias = "body_idle_timeout_secs")]
    body_idle_timeout: Option<HumanDuration>,
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
    #[serde(alias = "s3_connect_timeout_secs")]
    s3_connect_timeout: Option<HumanDuration>,
    #[serde(alias = "s3_attempt_timeout_secs")]
    s3_attempt_timeout: Option<HumanDuration>,
    #[serde(alias = "s3_operation_timeout_secs")]
    s3_operation_timeout: Option<HumanDuration>,
    s3_max_attempts: Option<u32>,
    s3_redirect: Option<bool>,
    #[serde(alias = "s3_redirect_expiry_secs")]
    s3_redirect_expiry: Option<HumanDuration>,
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

impl ServeConfig {
    /// Reads the file's text over the defaults.
    pub(super) fn apply_file(&mut self, src: &Source<'_>) -> Result<(), ConfigError> {
        let mut f: FileConfig =
            config_toml::from_str(src.text, &[]).map_err(|source| ConfigError::ParseConfig {
                path: src.path.to_owned(),
                source,
            })?;
        if let Some(g) = f.gc.take() {
            self.apply_gc(g, src)?;
        }
        if let Some(a) = f.auth.take() {
            self.auth =
                Some(
                    AuthConfig::from_file(a).map_err(|source| ConfigError::AuthConfig {
                        path: src.path.to_owned(),
                        source,
                    })?,
                );
        }
        if let Some(t) = f.tls.take() {
            self.apply_tls(t, src)?;
        }
        if let Some(r) = f.rate_limit.take() {
            self.apply_rate_limit(r, src)?;
        }
        if let Some(sc) = f.scrub.take() {
            self.apply_scrub(sc, src)?;
        }
        if let Some(n) = f.notifications.take() {
            self.notifications = n.check().map_err(|(key, reason)| src.bad(key, reason))?;
        }
        if let Some(p) = f.proxy.take() {
            self.apply_proxy(p, src)?;
        }
        self.apply_sync(f.sync.take().unwrap_or_default(), src)?;
        if let Some(ui) = f.ui.take() {
            self.apply_ui(ui, src)?;
        }
        self.governance = Governance::from_file(FileGovernance {
            immutable: std::mem::take(&mut f.immutable),
            quota: std::mem::take(&mut f.quota),
            retention: std::mem::take(&mut f.retention),
        })
        .map_err(|source| ConfigError::Governance {
            path: src.path.to_owned(),
            source,
        })?;
        if let Some(p) = f.pulls.take() {
            self.apply_pulls(p, src)?;
        }
        self.apply_keys(f);
        Ok(())
    }

    /// `[[sync]]` entries: scheduled mirrors from an upstream, or replication on push.
    fn apply_sync(
        &mut self,
        entries: Vec<crate::mirror::FileSync>,
        src: &Source<'_>,
    ) -> Result<(), ConfigError> {
        for (i, s) in entries.into_iter().enumerate() {
            let setting =
                |(key, reason): (&'static str, String)| src.bad_at(key, &indexed(key, i), reason);
            let name = if s.replicates() {
                let entry = s.check_replication().map_err(setting)?;
                let name = entry.name.clone();
                self.replicate.push(entry);
                name
            } else {
                let entry = s.check().map_err(setting)?;
                let name = entry.name.clone();
                self.sync.push(entry);
                name
            };
            let named = self.sync.iter().filter(|e| e.name == name).count()
                + self.replicate.iter().filter(|e| e.name == name).count();
            if named > 1 {
                return Err(setting((
                    "sync.name",
                    format!("two [[sync]] entries are named {name:?}"),
                )));
            }
        }
        Ok(())
    }

    fn apply_ui(&mut self, ui: FileUi, src: &Source<'_>) -> Result<(), ConfigError> {
        if let Some(enabled) = ui.enabled {
            self.ui_enabled = enabled;
        }
        for k in &ui.trusted_keys {
            let bytes = std::fs::read(k).map_err(|e| {
                src.bad(
                    "ui.trusted_keys",
                    format!("cannot read {}: {e}", k.display()),
                )
            })?;
            let key = trust::VerifyingKey::from_pem(&bytes, &k.display().to_string())
                .map_err(|e| src.bad("ui.trusted_keys", e.to_string()))?;
            self.ui_trusted_keys.push(key);
        }
        Ok(())
    }

    fn apply_tls(&mut self, t: FileTls, src: &Source<'_>) -> Result<(), ConfigError> {
        let missing = |key| src.bad(key, "[tls] needs both cert and key");
        self.tls = Some(TlsSettings {
            cert: t.cert.ok_or_else(|| missing("tls.cert"))?,
            key: t.key.ok_or_else(|| missing("tls.key"))?,
            client_ca: t.client_ca,
        });
        Ok(())
    }

    fn apply_rate_limit(&mut self, r: FileRateLimit, src: &Source<'_>) -> Result<(), ConfigError> {
        let rps = r.requests_per_second.ok_or_else(|| {
            src.bad(
                "rate_limit.requests_per_second",
                "[rate_limit] needs requests_per_second",
            )
        })?;
        let rps = std::num::NonZeroU32::new(rps).ok_or_else(|| {
            src.bad(
                "rate_limit.requests_per_second",
                "must be at least 1 (leave out [rate_limit] for no limit)",
            )
        })?;
        let burst = match r.burst {
            None => rps,
            Some(b) => std::num::NonZeroU32::new(b)
                .ok_or_else(|| src.bad("rate_limit.burst", "must be at least 1"))?,
        };
        self.rate_limit = Some(RateLimit {
            requests_per_second: rps,
            burst,
        });
        Ok(())
    }

    /// The top-level keys (the environment sets the same fields afterwards, in `env`).
    fn apply_keys(&mut self, f: FileConfig) {
        if let Some(v) = f.listen {
            self.listen = v;
        }
        if let Some(v) = f.data {
            self.data = v;
        }
        if let Some(v) = f.delete_enabled {
            self.delete_enabled = v;
        }
        if let Some(v) = f.sendfile {
            self.conn_limits.sendfile = v;
        }
        if let Some(v) = f.sendfile_min_size {
            self.conn_limits.sendfile_min_size = v.0;
        }
        if let Some(v) = f.max_manifest_size {
            self.max_manifest_bytes = v.0;
        }
        if let Some(v) = f.shutdown_timeout {
            self.shutdown_timeout = v.0;
        }
        if let Some(v) = f.upload_max_age {
            self.upload_max_age = v.0;
        }
        self.set_conn_limits([
            f.header_read_timeout.map(Duration::from),
            f.write_stall_timeout.map(Duration::from),
            f.body_idle_timeout.map(Duration::from),
        ]);
        for (slot, v) in [
            (&mut self.s3_endpoint, f.s3_endpoint),
            (&mut self.s3_bucket, f.s3_bucket),
            (&mut self.s3_prefix, f.s3_prefix),
            (&mut self.s3_region, f.s3_region),
        ] {
            if v.is_some() {
                *slot = v;
            }
        }
        if let Some(v) = f.s3_redirect {
            self.s3_redirect = v;
        }
        if let Some(v) = f.s3_redirect_expiry {
            self.s3_redirect_expiry = v.0;
        }
        self.set_s3_timeouts([
            f.s3_connect_timeout.map(Duration::from),
            f.s3_attempt_timeout.map(Duration::from),
            f.s3_operation_timeout.map(Duration::from),
        ]);
        if f.s3_max_attempts.is_some() {
            self.s3_limits.max_attempts = f.s3_max_attempts;
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

    /// Sets the connection limits given (header read, write stall, body idle). Zero would
    /// close every connection at once; it is read as one second.
    pub(super) fn set_conn_limits(&mut self, values: [Option<Duration>; 3]) {
        let l = &mut self.conn_limits;
        for (slot, v) in [&mut l.header_read, &mut l.write_stall, &mut l.body_idle]
            .into_iter()
            .zip(values)
        {
            if let Some(v) = v {
                *slot = v.max(Duration::from_secs(1));
            }
        }
    }

    /// Sets the S3 timeouts given (connect, attempt, operation); checked when the store opens.
    pub(super) fn set_s3_timeouts(&mut self, values: [Option<Duration>; 3]) {
        let l = &mut self.s3_limits;
        for (slot, v) in [
            &mut l.connect_timeout,
            &mut l.attempt_timeout,
            &mut l.operation_timeout,
        ]
        .into_iter()
        .zip(values)
        {
            if v.is_some() {
                *slot = v;
            }
        }
    }
}
