//! `worker.toml` and the zone manifests directory.
//!
//! This module holds the loaded configuration ([`WorkerConfig`]), its errors and the top-level
//! keys; each table with a concern of its own is read and checked in a child module:
//! `stores` (`[provisioner]`, `[layer_store]`), `zones` (`[allocatable]`, `[zones]`),
//! `mirrors` (`[[mirrors]]`), `credentials` (`[[credential_providers]]`), `pulls` (the pull
//! controls) and `manifests` (the zone manifests directory).
//!
//! ```toml
//! # worker.toml (relative paths are relative to this file's directory)
//! zones_dir = "zones"                # one <anything>.toml per zone
//! state_dir = "/var/lib/rdctl"       # status, lock, content store, staging
//! worker_id = "node-a"               # written into ownership marks
//! poll_interval = "5m"             # durations: "500ms", "90s", "5m", "1h", "7d"
//! jitter = 0.1                       # each sleep is the interval ±10 %
//! backoff_initial = "10s"           # per-zone retry delay after a failure, doubled each time
//! backoff_max = "10m"
//! os_version = "..."                 # host's illumos build for images that set os.version
//!                                    # (default: uname -v)
//! plain_http = false                 # http:// for every registry
//! auth_file = "/etc/rdctl/auth.json" # credentials read first (docker config.json format);
//!                                    # then $REGISTRY_AUTH_FILE, $DOCKER_CONFIG, ~/.docker
//! ca_file = "/etc/rdctl/ca.pem"      # extra CA certificates trusted for every registry
//! cert_dir = "/etc/rdctl/certs.d"    # certs.d layout (default /etc/containers/certs.d and
//!                                    # /etc/docker/certs.d)
//! insecure = false                   # TLS without verifying certificates (warned at start)
//! gc_grace = "1h"                   # unused blobs older than this are removed after a pass
//! metrics_listen = "127.0.0.1:9101"  # optional: Prometheus text on GET /metrics
//! policy = "policy.toml"             # optional: admission policy (trust's format); without
//!                                    # it every image whose digests verify is accepted
//!
//! [[mirrors]]                        # optional, repeatable: registries tried before an origin
//! registry = "central.example:5000"  # the origin host, as zone manifests write it
//! endpoints = ["site.example:5000/central", "backup.example:5000"]  # HOST[:PORT][/PREFIX], in order
//! resolve_tags = true                # mirrors may resolve tags (default); false: tags at the origin
//! max_parallel_pulls = 2            # kubelet maxParallelImagePulls (default: no cap)
//! max_concurrent_downloads = 3      # layers of one pull downloaded at once (containerd's name; default 3)
//! registry_pull_qps = 5.0            # kubelet registryPullQPS, per registry (0: no limit)
//! registry_burst = 10                # kubelet registryBurst
//! image_pull_progress_deadline = "1m"   # kubelet --image-pull-progress-deadline
//! image_gc_high_percent = 85         # kubelet imageGCHighThresholdPercent
//! image_gc_low_percent = 80          # kubelet imageGCLowThresholdPercent
//! image_minimum_gc_age = "2m"       # kubelet imageMinimumGCAge
//! image_credential_provider_bin_dir = "/usr/lib/rdctl/credential-providers"
//!                                    # kubelet --image-credential-provider-bin-dir
//!
//! [[credential_providers]]           # kubelet CredentialProviderConfig providers[]
//! name = "ecr-credential-provider"   # the executable in image_credential_provider_bin_dir
//! match_images = ["*.dkr.ecr.*.amazonaws.com"]
//! default_cache_duration = "10m"    # defaultCacheDuration
//! api_version = "credentialprovider.kubelet.k8s.io/v1"   # the only one spoken
//! args = []
//! env = { AWS_PROFILE = "zones" }
//!
//! [provisioner]
//! kind = "dir"                       # or "illumos" (only on illumos)
//! base = "/var/lib/rdctl/zones"      # zonepaths go here
//!
//! [layer_store]                      # optional: where zone roots come from
//! kind = "directory"                 # default: each zone root a full copy; or "zfs"
//! dataset = "rpool/rdctl"            # zfs: the store's parent dataset (must exist)
//!
//! [allocatable]                      # optional: what zones may be given (kubelet's
//! cpus = 6.0                         # allocatable); each key unset means no limit
//! memory = "24G"
//! zones = 20                         # kubelet's maxPods
//!
//! [zones]                            # optional: what an image's solaris label may ask for
//! allowed_privileges = ["dtrace_proc"]   # limitpriv beyond illumos's default set (none)
//! allowed_lower_links = ["igb0"]     # anet lowerLink other than auto (none)
//! allowed_address_ranges = ["10.0.0.0/24"]   # every allowedAddress within one (none)
//! allow_mac_address = false          # anet macAddress other than auto
//! ```
//!
//! ```toml
//! # zones/web.toml
//! name = "web"
//! image = "registry.example:5000/apps/web:1.4"   # tag or @digest
//! pull_policy = "Always"                         # or IfNotPresent, Never (kubelet's names)
//! brand = "nlipkg"
//! stop_timeout_secs = 10                       # default: the image's stop-timeout label, else 10
//! [limits]
//! cpus = 1.5                                     # zonecfg capped-cpu ncpus
//! memory = "512m"                                # zonecfg capped-memory physical
//! ```

mod credentials;
mod manifests;
mod mirrors;
mod pulls;
mod stores;
mod zones;

use std::path::{Path, PathBuf};
use std::time::Duration;

use config_toml::HumanDuration;
use registry_client::ClientOptions;
use serde::Deserialize;

pub use crate::zone::{
    ProbeCheck, PullPolicy, ReadinessProbe, Reclaim, ResourceLimits, Rollout, VolumeSpec, ZoneSpec,
};
pub use crate::zone_policy::{IpRange, ZonePolicy};
pub use manifests::{ZoneLoadError, load_zone, load_zones};
pub use stores::{LayerStoreConfig, ProvisionerConfig};

/// A key whose value is out of range or malformed, and what is wrong (a child module's check,
/// made into [`ConfigError::Value`] with the file by the loader).
type Invalid = (&'static str, String);

/// A duration key's value, or its default in seconds.
fn duration_or(v: Option<HumanDuration>, default_secs: u64) -> Duration {
    v.map_or(Duration::from_secs(default_secs), Duration::from)
}

/// The worker configuration, with defaults applied and paths made absolute.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkerConfig {
    /// Directory of zone manifests.
    pub zones_dir: PathBuf,
    /// State directory.
    pub state_dir: PathBuf,
    /// Name written into ownership marks.
    pub worker_id: String,
    /// Time between reconcile passes.
    pub poll_interval: Duration,
    /// Fraction of the interval by which each sleep varies (0 to 1).
    pub jitter: f64,
    /// First retry delay of a failing zone.
    pub backoff_initial: Duration,
    /// Longest retry delay.
    pub backoff_max: Duration,
    /// The host's OS version for images that name one; `None` means `uname -v`.
    pub os_version: Option<String>,
    /// How to reach registries: plain HTTP or TLS settings, and the credential file read
    /// first (`plain_http`, `insecure`, `ca_file`, `cert_dir`, `auth_file`).
    pub client: ClientOptions,
    /// Which provisioner and where.
    pub provisioner: ProvisionerConfig,
    /// Blobs no zone uses are removed once they are this old.
    pub gc_grace: Duration,
    /// Where `rdctl worker run` serves `GET /metrics`, if anywhere.
    pub metrics_listen: Option<std::net::SocketAddr>,
    /// Registry mirrors, tried in order before each origin.
    pub mirrors: crate::mirrors::Mirrors,
    /// The admission policy file (`trust::Policy`), if any; loaded by [`crate::Worker::new`]
    /// and again on [`crate::Worker::reload_policy`].
    pub policy: Option<PathBuf>,
    /// What zones may be given (`[allocatable]`); `None` fields are unlimited.
    pub allocatable: crate::capacity::Resources,
    /// What an image's `solaris` label may ask for (`[zones]`); the default allows no
    /// escalation.
    pub zone_policy: ZonePolicy,
    /// Image pulls in flight at most (`None`: no cap).
    pub max_parallel_pulls: Option<usize>,
    /// Layers of one pull downloaded at once (at least 1).
    pub max_concurrent_downloads: usize,
    /// Image pulls per second per registry (0: no limit).
    pub registry_pull_qps: f64,
    /// Pulls a registry may take at once before `registry_pull_qps` applies.
    pub registry_burst: u32,
    /// A download that receives no bytes for this long is cancelled and retried with backoff.
    pub image_pull_progress_deadline: Duration,
    /// Disk usage (percent) of the content store's file system at which image GC runs.
    pub image_gc_high_percent: u8,
    /// Disk usage (percent) image GC frees down to.
    pub image_gc_low_percent: u8,
    /// Unused blobs younger than this are never removed by image GC.
    pub image_minimum_gc_age: Duration,
    /// Where zone roots come from (`[layer_store]`).
    pub layer_store: LayerStoreConfig,
}

/// A configuration or zone manifest is unusable.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// Reading failed.
    #[error("{path}: cannot read")]
    Read {
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The TOML does not parse, has unknown keys, lacks a required one or has a value of the
    /// wrong type: the line and the dotted key, in user words.
    #[error("{}{}: {}", path.display(), error.line.map(|l| format!(":{l}")).unwrap_or_default(), match &error.key {
        Some(k) => format!("{k}: {}", error.message),
        None => error.message.clone(),
    })]
    Parse {
        /// The file.
        path: PathBuf,
        /// Where and what.
        error: config_toml::TomlError,
    },
    /// A value is out of range or malformed.
    #[error("{path}: {field}: {reason}")]
    Value {
        /// The file.
        path: PathBuf,
        /// The key.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A value in an array of tables is out of range or malformed (`volumes.1.path`).
    #[error("{path}: {field}: {reason}")]
    Element {
        /// The file.
        path: PathBuf,
        /// The key with the element's index.
        field: String,
        /// What is wrong.
        reason: String,
    },
}

/// worker.toml as written: every key, before defaults and checks.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    zones_dir: PathBuf,
    state_dir: PathBuf,
    worker_id: Option<String>,
    #[serde(alias = "poll_interval_secs")]
    poll_interval: Option<HumanDuration>,
    jitter: Option<f64>,
    #[serde(alias = "backoff_initial_secs")]
    backoff_initial: Option<HumanDuration>,
    #[serde(alias = "backoff_max_secs")]
    backoff_max: Option<HumanDuration>,
    os_version: Option<String>,
    plain_http: Option<bool>,
    auth_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    cert_dir: Option<PathBuf>,
    insecure: Option<bool>,
    #[serde(alias = "gc_grace_secs")]
    gc_grace: Option<HumanDuration>,
    metrics_listen: Option<String>,
    policy: Option<PathBuf>,
    #[serde(default)]
    mirrors: Vec<mirrors::FileMirror>,
    provisioner: stores::FileProvisioner,
    #[serde(default)]
    allocatable: zones::FileAllocatable,
    #[serde(default)]
    zones: zones::FileZonePolicy,
    layer_store: Option<stores::FileLayerStore>,
    max_parallel_pulls: Option<usize>,
    max_concurrent_downloads: Option<usize>,
    registry_pull_qps: Option<f64>,
    registry_burst: Option<u32>,
    #[serde(alias = "image_pull_progress_deadline_secs")]
    image_pull_progress_deadline: Option<HumanDuration>,
    image_gc_high_percent: Option<u8>,
    image_gc_low_percent: Option<u8>,
    #[serde(alias = "image_minimum_gc_age_secs")]
    image_minimum_gc_age: Option<HumanDuration>,
    image_credential_provider_bin_dir: Option<PathBuf>,
    #[serde(default)]
    credential_providers: Vec<credentials::FileProvider>,
}

/// What keys of `worker.toml` and the zone manifests mean, in the words their errors use.
const HINTS: config_toml::Hints<'static> = &[
    ("poll_interval", DURATION),
    ("poll_interval_secs", DURATION),
    ("backoff_initial", DURATION),
    ("backoff_initial_secs", DURATION),
    ("backoff_max", DURATION),
    ("backoff_max_secs", DURATION),
    ("gc_grace", DURATION),
    ("gc_grace_secs", DURATION),
    (
        "jitter",
        "a fraction of the poll interval between 0 and 1, such as 0.1",
    ),
    ("stop_timeout_secs", "seconds, a whole number such as 30"),
    ("limits.cpus", "a number of CPUs such as 1.5"),
    ("limits.memory", "a size in quotes such as \"2G\""),
    ("limits.disk", "a size in quotes such as \"10G\""),
    ("allocatable.cpus", "a number of CPUs such as 6.0"),
    (
        "allocatable.memory",
        "a size in quotes such as \"24GiB\" (or zonecfg's \"24G\"), or a whole number of bytes",
    ),
    ("allocatable.zones", "a whole number of zones such as 20"),
    ("max_parallel_pulls", "a whole number of pulls such as 2"),
    (
        "max_concurrent_downloads",
        "a whole number of downloads such as 3",
    ),
    ("registry_pull_qps", "pulls per second such as 5.0"),
    ("registry_burst", "a whole number of pulls such as 10"),
    ("image_pull_progress_deadline", DURATION),
    ("image_pull_progress_deadline_secs", DURATION),
    ("image_gc_high_percent", "a percentage such as 85"),
    ("image_gc_low_percent", "a percentage such as 80"),
    ("image_minimum_gc_age", DURATION),
    ("image_minimum_gc_age_secs", DURATION),
];

/// What a duration key takes, in the words of its errors.
const DURATION: &str =
    "a duration in quotes such as \"90s\", \"5m\" or \"1h\", or a whole number of seconds";

fn read_toml<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T, ConfigError> {
    let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
        path: path.to_owned(),
        source,
    })?;
    config_toml::from_str(&text, HINTS).map_err(|error| ConfigError::Parse {
        path: path.to_owned(),
        error,
    })
}

/// Worker ids and zone names: a letter or digit, then letters, digits, `-`, `_`, `.`; at most
/// 64 bytes (illumos `ZONENAME_MAX`), so they are safe as file names and zonecfg words.
pub fn valid_name(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 64
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

impl WorkerConfig {
    /// Loads `worker.toml`.
    pub fn load(path: &Path) -> Result<WorkerConfig, ConfigError> {
        let f: FileConfig = read_toml(path)?;
        // Checked now, while `f` is whole; reported in the order of the checks below.
        let pulls = pulls::pull_controls(&f);
        // Relative paths in the file are relative to the file, made absolute here because the
        // zone base appears in zonecfg text (`--config worker.toml` has an empty parent).
        let file = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let base = file.parent().unwrap_or(Path::new("/")).to_owned();
        let abs = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let value = |(field, reason): Invalid| ConfigError::Value {
            path: path.to_owned(),
            field,
            reason,
        };
        let worker_id = f.worker_id.unwrap_or_else(|| "rdctl-worker".into());
        if !valid_name(&worker_id) {
            return Err(value((
                "worker_id",
                format!("{worker_id:?} is not a valid name"),
            )));
        }
        let jitter = f.jitter.unwrap_or(0.1);
        if !(0.0..=1.0).contains(&jitter) {
            return Err(value((
                "jitter",
                format!("{jitter} is not between 0 and 1"),
            )));
        }
        let poll = duration_or(f.poll_interval, 300);
        if poll.is_zero() {
            return Err(value((
                "poll_interval",
                "\"0\" is too short: it must be more than 0".into(),
            )));
        }
        let backoff_initial = duration_or(f.backoff_initial, 10).max(Duration::from_secs(1));
        let backoff_max = duration_or(f.backoff_max, 600).max(backoff_initial);
        let provisioner = stores::provisioner(f.provisioner, abs).map_err(value)?;
        let layer_store = stores::layer_store(f.layer_store).map_err(value)?;
        let (plain_http, insecure) = (f.plain_http.unwrap_or(false), f.insecure.unwrap_or(false));
        if plain_http && insecure {
            return Err(value((
                "insecure",
                "plain_http and insecure both set: insecure is for TLS without verification".into(),
            )));
        }
        let metrics_listen = match &f.metrics_listen {
            None => None,
            Some(a) => Some(a.parse().map_err(|_| {
                value((
                    "metrics_listen",
                    format!("{a:?} is not an address like 127.0.0.1:9101"),
                ))
            })?),
        };
        let mirrors = mirrors::mirrors(f.mirrors).map_err(value)?;
        let allocatable = zones::allocatable(f.allocatable).map_err(value)?;
        let zone_policy = zones::zone_policy(f.zones).map_err(value)?;
        let pulls = pulls.map_err(value)?;
        let credential_providers = credentials::providers(
            f.image_credential_provider_bin_dir.map(abs),
            f.credential_providers,
        )
        .map_err(value)?;
        Ok(WorkerConfig {
            max_parallel_pulls: pulls.max_parallel_pulls,
            max_concurrent_downloads: pulls.max_concurrent_downloads,
            registry_pull_qps: pulls.registry_pull_qps,
            registry_burst: pulls.registry_burst,
            image_pull_progress_deadline: pulls.image_pull_progress_deadline,
            image_gc_high_percent: pulls.image_gc_high_percent,
            image_gc_low_percent: pulls.image_gc_low_percent,
            image_minimum_gc_age: pulls.image_minimum_gc_age,
            zone_policy,
            allocatable,
            mirrors,
            metrics_listen,
            policy: f.policy.map(abs),
            zones_dir: abs(f.zones_dir),
            state_dir: abs(f.state_dir),
            worker_id,
            poll_interval: poll,
            jitter,
            backoff_initial,
            backoff_max,
            os_version: f.os_version,
            client: ClientOptions {
                auth_file: f.auth_file.map(abs),
                ca_files: f.ca_file.map(abs).into_iter().collect(),
                cert_dirs: f.cert_dir.map(abs).into_iter().collect(),
                insecure,
                plain_http,
                credential_providers,
            },
            provisioner,
            layer_store,
            gc_grace: duration_or(f.gc_grace, 3600),
        })
    }

    /// The delay before retrying a zone that failed `failures` times in a row: the initial
    /// backoff doubled per failure, capped.
    pub fn backoff(&self, failures: u32) -> Duration {
        let factor = 1u32 << failures.saturating_sub(1).min(20);
        self.backoff_initial
            .saturating_mul(factor)
            .min(self.backoff_max)
    }

    /// The poll interval varied by the jitter fraction; `unit` is a number in [0, 1).
    pub fn jittered_interval(&self, unit: f64) -> Duration {
        let spread = (unit.clamp(0.0, 1.0) * 2.0 - 1.0) * self.jitter;
        self.poll_interval.mul_f64((1.0 + spread).max(0.0))
    }
}

#[cfg(test)]
mod tests;
