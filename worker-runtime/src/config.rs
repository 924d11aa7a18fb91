//! `worker.toml` and the zone manifests directory.
//!
//! ```toml
//! # worker.toml (relative paths are relative to this file's directory)
//! zones_dir = "zones"                # one <anything>.toml per zone
//! state_dir = "/var/lib/rdctl"       # status, lock, content store, staging
//! worker_id = "node-a"               # written into ownership marks
//! poll_interval_secs = 300
//! jitter = 0.1                       # each sleep is the interval ±10 %
//! backoff_initial_secs = 10          # per-zone retry delay after a failure, doubled each time
//! backoff_max_secs = 600
//! os_version = "..."                 # host's illumos build for images that set os.version
//!                                    # (default: uname -v)
//! plain_http = false                 # http:// for every registry
//! auth_file = "/etc/rdctl/auth.json" # credentials read first (docker config.json format);
//!                                    # then $REGISTRY_AUTH_FILE, $DOCKER_CONFIG, ~/.docker
//! ca_file = "/etc/rdctl/ca.pem"      # extra CA certificates trusted for every registry
//! cert_dir = "/etc/rdctl/certs.d"    # certs.d layout (default /etc/containers/certs.d and
//!                                    # /etc/docker/certs.d)
//! insecure = false                   # TLS without verifying certificates (warned at start)
//! gc_grace_secs = 3600               # unused blobs older than this are removed after a pass
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
//! image_pull_progress_deadline_secs = 60   # kubelet --image-pull-progress-deadline
//! image_gc_high_percent = 85         # kubelet imageGCHighThresholdPercent
//! image_gc_low_percent = 80          # kubelet imageGCLowThresholdPercent
//! image_minimum_gc_age_secs = 120    # kubelet imageMinimumGCAge
//! image_credential_provider_bin_dir = "/usr/lib/rdctl/credential-providers"
//!                                    # kubelet --image-credential-provider-bin-dir
//!
//! [[credential_providers]]           # kubelet CredentialProviderConfig providers[]
//! name = "ecr-credential-provider"   # the executable in image_credential_provider_bin_dir
//! match_images = ["*.dkr.ecr.*.amazonaws.com"]
//! default_cache_duration_secs = 600  # defaultCacheDuration
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

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use registry_client::{ClientOptions, Reference};
use serde::Deserialize;

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

/// Where zone roots come from (`[layer_store]` in worker.toml).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum LayerStoreConfig {
    /// Each zone root is a full copy of the image, unpacked into a directory (the default).
    #[default]
    Directory,
    /// A dataset per layer ChainID under `dataset`; a zone root is a clone of the image's top
    /// snapshot (`worker_runtime::zfs`).
    Zfs {
        /// The parent dataset (it must exist, and be empty or already the store's).
        dataset: String,
    },
}

/// Which provisioner the worker uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProvisionerConfig {
    /// Zone roots and descriptions under a directory (Linux, tests).
    Dir {
        /// Where zonepaths go.
        base: PathBuf,
    },
    /// zonecfg/zoneadm (illumos only).
    Illumos {
        /// Where zonepaths go.
        base: PathBuf,
    },
}

impl ProvisionerConfig {
    /// Where zonepaths go.
    pub fn base(&self) -> &Path {
        match self {
            ProvisionerConfig::Dir { base } | ProvisionerConfig::Illumos { base } => base,
        }
    }
}

/// When to pull.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
pub enum PullPolicy {
    /// Resolve the reference on every pass; a moved tag replaces the zone.
    Always,
    /// Pull only when the zone has no image yet.
    IfNotPresent,
    /// Never ask a registry for the image (kubelet's `Never`): a zone that exists keeps its
    /// image; one that does not is made only from blobs already in the content store (a
    /// digest reference, or the digest this node last resolved the reference to), else it
    /// fails with `ErrImageNeverPull`.
    Never,
}

/// Resource caps for zonecfg.
#[derive(Debug, Clone, Default, PartialEq, Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceLimits {
    /// `capped-cpu ncpus`.
    pub cpus: Option<f64>,
    /// `capped-memory physical`, with a k/m/g/t suffix.
    pub memory: Option<String>,
    /// The zone's disk: the `quota` of its dataset on the ZFS layer store (k/m/g/t suffix);
    /// wins over the image's `org.reddwarf.zone.quota`. The directory store has no quota and
    /// refuses the key rather than ignore it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk: Option<String>,
}

/// One zone manifest.
#[derive(Debug, Clone, PartialEq)]
pub struct ZoneSpec {
    /// Zone name.
    pub name: String,
    /// Image reference.
    pub image: Reference,
    /// Pull policy.
    pub pull_policy: PullPolicy,
    /// Zone brand.
    pub brand: String,
    /// Seconds between the stop signal and the kill; `None` takes the image's
    /// `org.reddwarf.image.stop-timeout` label (what `rdctl build` writes), else 10.
    pub stop_timeout_secs: Option<u32>,
    /// Caps.
    pub limits: ResourceLimits,
    /// The manifest file.
    pub source: PathBuf,
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
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    zones_dir: PathBuf,
    state_dir: PathBuf,
    worker_id: Option<String>,
    poll_interval_secs: Option<u64>,
    jitter: Option<f64>,
    backoff_initial_secs: Option<u64>,
    backoff_max_secs: Option<u64>,
    os_version: Option<String>,
    plain_http: Option<bool>,
    auth_file: Option<PathBuf>,
    ca_file: Option<PathBuf>,
    cert_dir: Option<PathBuf>,
    insecure: Option<bool>,
    gc_grace_secs: Option<u64>,
    metrics_listen: Option<String>,
    policy: Option<PathBuf>,
    #[serde(default)]
    mirrors: Vec<FileMirror>,
    provisioner: FileProvisioner,
    #[serde(default)]
    allocatable: FileAllocatable,
    #[serde(default)]
    zones: FileZonePolicy,
    layer_store: Option<FileLayerStore>,
    max_parallel_pulls: Option<usize>,
    max_concurrent_downloads: Option<usize>,
    registry_pull_qps: Option<f64>,
    registry_burst: Option<u32>,
    image_pull_progress_deadline_secs: Option<u64>,
    image_gc_high_percent: Option<u8>,
    image_gc_low_percent: Option<u8>,
    image_minimum_gc_age_secs: Option<u64>,
    image_credential_provider_bin_dir: Option<PathBuf>,
    #[serde(default)]
    credential_providers: Vec<FileProvider>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileZonePolicy {
    #[serde(default)]
    allowed_privileges: Vec<String>,
    #[serde(default)]
    allowed_lower_links: Vec<String>,
    #[serde(default)]
    allowed_address_ranges: Vec<String>,
    #[serde(default)]
    allow_mac_address: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProvider {
    name: String,
    match_images: Vec<String>,
    default_cache_duration_secs: Option<u64>,
    api_version: Option<String>,
    #[serde(default)]
    args: Vec<String>,
    #[serde(default)]
    env: BTreeMap<String, String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileAllocatable {
    cpus: Option<f64>,
    memory: Option<String>,
    zones: Option<u64>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileMirror {
    registry: String,
    endpoints: Vec<String>,
    resolve_tags: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileLayerStore {
    kind: String,
    dataset: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProvisioner {
    kind: String,
    base: PathBuf,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct FileZone {
    name: String,
    image: String,
    pull_policy: Option<PullPolicy>,
    brand: Option<String>,
    stop_timeout_secs: Option<u32>,
    #[serde(default)]
    limits: ResourceLimits,
}

/// What an image's `solaris` section may ask for beyond the defaults (`[zones]` in
/// worker.toml). The default allows no escalation: `limitpriv` may name `default` (illumos's
/// default zone privilege set) or its subset `basic` and take privileges away (`!name`), but
/// names no other privilege or set; no `lowerLink` but `auto`; no `allowedAddress`; no
/// `macAddress` but `auto`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ZonePolicy {
    /// Privileges and sets (such as `dtrace_proc`, `all`) `limitpriv` may add, lower case.
    pub allowed_privileges: Vec<String>,
    /// Datalinks an `anet` may be made over (`lowerLink`).
    pub allowed_lower_links: Vec<String>,
    /// Ranges (`10.0.0.0/24`) every `allowedAddress` must lie within.
    pub allowed_address_ranges: Vec<IpRange>,
    /// Whether an `anet` may set its `macAddress` (`factory`, `random` or a fixed address).
    pub allow_mac_address: bool,
}

/// An address range (`10.0.0.0/24`, `fd00::/48`) of `zones.allowed_address_ranges`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IpRange {
    /// The range's address.
    pub addr: std::net::IpAddr,
    /// Its prefix length.
    pub prefix: u8,
}

impl IpRange {
    /// Checks `s`: an address, `/` and a prefix length.
    pub fn parse(s: &str) -> Option<IpRange> {
        let (a, p) = s.split_once('/')?;
        let addr: std::net::IpAddr = a.parse().ok()?;
        let max = if addr.is_ipv4() { 32 } else { 128 };
        if p.is_empty() || !p.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        let prefix = p.parse::<u8>().ok().filter(|n| *n <= max)?;
        Some(IpRange { addr, prefix })
    }

    /// Whether `addr` with `prefix` (none: the address alone) lies within the range: the same
    /// family, a prefix no wider than the range's, and the range's leading bits.
    pub fn contains(&self, addr: std::net::IpAddr, prefix: Option<u8>) -> bool {
        use std::net::IpAddr;
        let bits = |a: &IpAddr| -> (u128, u8) {
            match a {
                IpAddr::V4(v) => (u128::from(u32::from(*v)), 32),
                IpAddr::V6(v) => (u128::from(*v), 128),
            }
        };
        let ((a, max), (r, rmax)) = (bits(&addr), bits(&self.addr));
        if max != rmax || prefix.unwrap_or(max) < self.prefix {
            return false;
        }
        let shift = u32::from(max - self.prefix);
        let high = |x: u128| if shift >= 128 { 0 } else { x >> shift };
        high(a) == high(r)
    }
}

/// A datalink name: letters, digits and `_`, starting with a letter and ending with a digit,
/// at most 31 bytes (illumos `MAXLINKNAMELEN` less the NUL).
pub fn valid_link_name(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 31
        && b[0].is_ascii_alphabetic()
        && b[b.len() - 1].is_ascii_digit()
        && b.iter().all(|c| c.is_ascii_alphanumeric() || *c == b'_')
}

/// A privilege word of `limitpriv`: a name of letters, digits and `_`, optionally negated.
pub(crate) fn privilege_word(w: &str) -> bool {
    let n = w.strip_prefix('!').unwrap_or(w);
    !n.is_empty()
        && n.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
}

/// `[zones]` checked: privilege names (no removals), datalink names, CIDR ranges.
fn zone_policy(z: FileZonePolicy) -> Result<ZonePolicy, (&'static str, String)> {
    for p in &z.allowed_privileges {
        if p.starts_with('!') || !privilege_word(p) {
            return Err((
                "zones.allowed_privileges",
                format!("{p:?} is not a privilege name such as dtrace_proc (lower case)"),
            ));
        }
    }
    for l in &z.allowed_lower_links {
        if !valid_link_name(l) {
            return Err((
                "zones.allowed_lower_links",
                format!("{l:?} is not a datalink name such as igb0"),
            ));
        }
    }
    let mut ranges = Vec::new();
    for r in &z.allowed_address_ranges {
        match IpRange::parse(r) {
            Some(a) => ranges.push(a),
            None => {
                return Err((
                    "zones.allowed_address_ranges",
                    format!("{r:?} is not a CIDR range such as 10.0.0.0/24"),
                ));
            }
        }
    }
    Ok(ZonePolicy {
        allowed_privileges: z.allowed_privileges,
        allowed_lower_links: z.allowed_lower_links,
        allowed_address_ranges: ranges,
        allow_mac_address: z.allow_mac_address,
    })
}

/// What keys of `worker.toml` and the zone manifests mean, in the words their errors use.
const HINTS: config_toml::Hints<'static> = &[
    ("poll_interval_secs", "seconds, a whole number such as 30"),
    ("backoff_initial_secs", "seconds, a whole number such as 10"),
    ("backoff_max_secs", "seconds, a whole number such as 600"),
    ("gc_grace_secs", "seconds, a whole number such as 3600"),
    (
        "jitter",
        "a fraction of the poll interval between 0 and 1, such as 0.1",
    ),
    ("stop_timeout_secs", "seconds, a whole number such as 30"),
    ("limits.cpus", "a number of CPUs such as 1.5"),
    ("limits.memory", "a size in quotes such as \"2G\""),
    ("limits.disk", "a size in quotes such as \"10G\""),
    ("allocatable.cpus", "a number of CPUs such as 6.0"),
    ("allocatable.memory", "a size in quotes such as \"24G\""),
    ("allocatable.zones", "a whole number of zones such as 20"),
    ("max_parallel_pulls", "a whole number of pulls such as 2"),
    (
        "max_concurrent_downloads",
        "a whole number of downloads such as 3",
    ),
    ("registry_pull_qps", "pulls per second such as 5.0"),
    ("registry_burst", "a whole number of pulls such as 10"),
    (
        "image_pull_progress_deadline_secs",
        "seconds, a whole number such as 60",
    ),
    ("image_gc_high_percent", "a percentage such as 85"),
    ("image_gc_low_percent", "a percentage such as 80"),
    (
        "image_minimum_gc_age_secs",
        "seconds, a whole number such as 120",
    ),
];

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
        // Relative paths in the file are relative to the file, made absolute here because the
        // zone base appears in zonecfg text (`--config worker.toml` has an empty parent).
        let file = std::path::absolute(path).unwrap_or_else(|_| path.to_owned());
        let base = file.parent().unwrap_or(Path::new("/"));
        let abs = |p: PathBuf| if p.is_absolute() { p } else { base.join(p) };
        let value = |field, reason: String| ConfigError::Value {
            path: path.to_owned(),
            field,
            reason,
        };
        let worker_id = f.worker_id.unwrap_or_else(|| "rdctl-worker".into());
        if !valid_name(&worker_id) {
            return Err(value(
                "worker_id",
                format!("{worker_id:?} is not a valid name"),
            ));
        }
        let jitter = f.jitter.unwrap_or(0.1);
        if !(0.0..=1.0).contains(&jitter) {
            return Err(value("jitter", format!("{jitter} is not between 0 and 1")));
        }
        let poll = f.poll_interval_secs.unwrap_or(300);
        if poll == 0 {
            return Err(value("poll_interval_secs", "must be at least 1".into()));
        }
        let backoff_initial = f.backoff_initial_secs.unwrap_or(10).max(1);
        let backoff_max = f.backoff_max_secs.unwrap_or(600).max(backoff_initial);
        let pbase = abs(f.provisioner.base);
        let provisioner = match f.provisioner.kind.as_str() {
            "dir" => ProvisionerConfig::Dir { base: pbase },
            "illumos" => ProvisionerConfig::Illumos { base: pbase },
            other => {
                return Err(value(
                    "provisioner.kind",
                    format!("{other:?} is neither \"dir\" nor \"illumos\""),
                ));
            }
        };
        let layer_store = match f.layer_store {
            None => LayerStoreConfig::Directory,
            Some(ls) => match (ls.kind.as_str(), ls.dataset) {
                ("directory", None) => LayerStoreConfig::Directory,
                ("directory", Some(_)) => {
                    return Err(value(
                        "layer_store.dataset",
                        "is only for kind = \"zfs\"".into(),
                    ));
                }
                ("zfs", Some(dataset)) => {
                    crate::zfs::DatasetName::parse(&dataset)
                        .map_err(|e| value("layer_store.dataset", e.to_string()))?;
                    LayerStoreConfig::Zfs { dataset }
                }
                ("zfs", None) => {
                    return Err(value(
                        "layer_store.dataset",
                        "missing; kind = \"zfs\" needs the parent dataset (e.g. \"rpool/rdctl\")"
                            .into(),
                    ));
                }
                (other, _) => {
                    return Err(value(
                        "layer_store.kind",
                        format!("{other:?} is neither \"directory\" nor \"zfs\""),
                    ));
                }
            },
        };
        let (plain_http, insecure) = (f.plain_http.unwrap_or(false), f.insecure.unwrap_or(false));
        if plain_http && insecure {
            return Err(value(
                "insecure",
                "plain_http and insecure both set: insecure is for TLS without verification".into(),
            ));
        }
        let metrics_listen = match &f.metrics_listen {
            None => None,
            Some(a) => Some(a.parse().map_err(|_| {
                value(
                    "metrics_listen",
                    format!("{a:?} is not an address like 127.0.0.1:9101"),
                )
            })?),
        };
        let mut mirrors = Vec::new();
        for (i, m) in f.mirrors.into_iter().enumerate() {
            if m.registry.starts_with('.') || !registry_client::looks_like_host(&m.registry) {
                return Err(value(
                    "mirrors.registry",
                    format!(
                        "mirrors[{i}]: {:?} is not a registry host (HOST[:PORT])",
                        m.registry
                    ),
                ));
            }
            let registry = validator::RegistryHost::parse(&m.registry)
                .map_err(|e| value("mirrors.registry", format!("mirrors[{i}]: {e}")))?;
            if m.endpoints.is_empty() {
                return Err(value(
                    "mirrors.endpoints",
                    format!("mirrors[{i}] ({}): no endpoints", m.registry),
                ));
            }
            let endpoints = m
                .endpoints
                .iter()
                .map(|e| {
                    crate::mirrors::MirrorEndpoint::parse(e).map_err(|reason| {
                        value(
                            "mirrors.endpoints",
                            format!("mirrors[{i}] ({}): {reason}", m.registry),
                        )
                    })
                })
                .collect::<Result<Vec<_>, _>>()?;
            mirrors.push(crate::mirrors::Mirror {
                registry,
                endpoints,
                resolve_tags: m.resolve_tags.unwrap_or(true),
            });
        }
        if let Some(c) = f.allocatable.cpus
            && !(c >= 0.0 && c.is_finite())
        {
            return Err(value(
                "allocatable.cpus",
                format!("{c} is not a number of CPUs"),
            ));
        }
        let allocatable_memory = match &f.allocatable.memory {
            None => None,
            Some(m) => Some(crate::capacity::size_bytes(m).ok_or_else(|| {
                value(
                    "allocatable.memory",
                    format!("{m:?} is not a size like 512m or 24G"),
                )
            })?),
        };
        let zone_policy = zone_policy(f.zones).map_err(|(field, reason)| value(field, reason))?;
        if f.max_parallel_pulls == Some(0) {
            return Err(value("max_parallel_pulls", "must be at least 1".into()));
        }
        if f.max_concurrent_downloads == Some(0) {
            return Err(value(
                "max_concurrent_downloads",
                "must be at least 1".into(),
            ));
        }
        let qps = f.registry_pull_qps.unwrap_or(0.0);
        if !(qps >= 0.0 && qps.is_finite()) {
            return Err(value(
                "registry_pull_qps",
                format!("{qps} is not a number of pulls per second"),
            ));
        }
        let deadline = f.image_pull_progress_deadline_secs.unwrap_or(60);
        if deadline == 0 {
            return Err(value(
                "image_pull_progress_deadline_secs",
                "must be at least 1".into(),
            ));
        }
        let (high, low) = (
            f.image_gc_high_percent.unwrap_or(85),
            f.image_gc_low_percent.unwrap_or(80),
        );
        if high > 100 {
            return Err(value(
                "image_gc_high_percent",
                format!("{high} is more than 100"),
            ));
        }
        if low > high {
            return Err(value(
                "image_gc_low_percent",
                format!("{low} is above image_gc_high_percent ({high})"),
            ));
        }
        let mut credential_providers = Vec::new();
        if !f.credential_providers.is_empty() && f.image_credential_provider_bin_dir.is_none() {
            return Err(value(
                "image_credential_provider_bin_dir",
                "credential_providers are configured but no directory to find them in".into(),
            ));
        }
        let bin_dir = f.image_credential_provider_bin_dir.map(abs);
        for p in f.credential_providers {
            let field = "credential_providers";
            if !valid_name(&p.name) {
                return Err(value(
                    field,
                    format!("name {:?} is not a plain file name", p.name),
                ));
            }
            if let Some(v) = &p.api_version
                && v != registry_client::credential_provider::API_VERSION
            {
                return Err(value(
                    field,
                    format!(
                        "{}: api_version {v:?} is not {}",
                        p.name,
                        registry_client::credential_provider::API_VERSION
                    ),
                ));
            }
            if p.match_images.is_empty() {
                return Err(value(field, format!("{}: match_images is empty", p.name)));
            }
            credential_providers.push(registry_client::credential_provider::CredentialProvider {
                command: bin_dir.clone().unwrap_or_default().join(&p.name),
                name: p.name,
                args: p.args,
                env: p.env.into_iter().collect(),
                match_images: p.match_images,
                default_cache_duration: Duration::from_secs(
                    p.default_cache_duration_secs.unwrap_or(0),
                ),
            });
        }
        Ok(WorkerConfig {
            max_parallel_pulls: f.max_parallel_pulls,
            max_concurrent_downloads: f.max_concurrent_downloads.unwrap_or(3),
            registry_pull_qps: qps,
            registry_burst: f.registry_burst.unwrap_or(10).max(1),
            image_pull_progress_deadline: Duration::from_secs(deadline),
            image_gc_high_percent: high,
            image_gc_low_percent: low,
            image_minimum_gc_age: Duration::from_secs(f.image_minimum_gc_age_secs.unwrap_or(120)),
            zone_policy,
            allocatable: crate::capacity::Resources {
                cpus: f.allocatable.cpus,
                memory_bytes: allocatable_memory,
                zones: f.allocatable.zones,
            },
            mirrors: crate::mirrors::Mirrors(mirrors),
            metrics_listen,
            policy: f.policy.map(abs),
            zones_dir: abs(f.zones_dir),
            state_dir: abs(f.state_dir),
            worker_id,
            poll_interval: Duration::from_secs(poll),
            jitter,
            backoff_initial: Duration::from_secs(backoff_initial),
            backoff_max: Duration::from_secs(backoff_max),
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
            gc_grace: Duration::from_secs(f.gc_grace_secs.unwrap_or(3600)),
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

/// A zone manifest that could not be used; the other zones go on.
#[derive(Debug)]
pub struct ZoneLoadError {
    /// The zone name when it could be read, else the file stem.
    pub zone: String,
    /// Why.
    pub error: ConfigError,
}

/// Reads every `*.toml` in `dir`, sorted by file name. Broken manifests, and zones named by
/// more than one file, come back as errors beside the good ones.
pub fn load_zones(dir: &Path) -> Result<(Vec<ZoneSpec>, Vec<ZoneLoadError>), ConfigError> {
    let read_err = |source| ConfigError::Read {
        path: dir.to_owned(),
        source,
    };
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(read_err)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "toml") && p.is_file())
        .collect();
    files.sort();
    let mut good: BTreeMap<String, ZoneSpec> = BTreeMap::new();
    let mut bad = Vec::new();
    let mut dup = Vec::new();
    for path in files {
        let stem = path
            .file_stem()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        match load_zone(&path) {
            Ok(z) => {
                if let Some(first) = good.get(&z.name) {
                    dup.push(ZoneLoadError {
                        zone: z.name.clone(),
                        error: ConfigError::Value {
                            path: path.clone(),
                            field: "name",
                            reason: format!(
                                "zone {:?} is also defined by {}",
                                z.name,
                                first.source.display()
                            ),
                        },
                    });
                } else {
                    good.insert(z.name.clone(), z);
                }
            }
            Err(error) => bad.push(ZoneLoadError { zone: stem, error }),
        }
    }
    // A zone defined twice is ambiguous: neither definition is used.
    for d in &dup {
        good.remove(&d.zone);
    }
    bad.extend(dup);
    Ok((good.into_values().collect(), bad))
}

/// Reads one zone manifest.
pub fn load_zone(path: &Path) -> Result<ZoneSpec, ConfigError> {
    let f: FileZone = read_toml(path)?;
    let value = |field, reason: String| ConfigError::Value {
        path: path.to_owned(),
        field,
        reason,
    };
    if !valid_name(&f.name) || f.name == "global" {
        return Err(value(
            "name",
            format!("{:?} is not a valid zone name", f.name),
        ));
    }
    let image = Reference::parse(&f.image).map_err(|e| value("image", e.to_string()))?;
    let brand = f.brand.unwrap_or_else(|| "nlipkg".into());
    if !valid_name(&brand) {
        return Err(value(
            "brand",
            format!("{brand:?} is not a valid brand name"),
        ));
    }
    if let Some(c) = f.limits.cpus
        && !(c > 0.0 && c <= 1024.0)
    {
        return Err(value("limits.cpus", format!("{c} is not in (0, 1024]")));
    }
    if let Some(m) = &f.limits.memory
        && crate::capacity::size_bytes(m).is_none()
    {
        return Err(value(
            "limits.memory",
            format!("{m:?} is not a size like 512m or 2g"),
        ));
    }
    if let Some(d) = &f.limits.disk
        && crate::capacity::size_bytes(d).is_none_or(|b| b == 0)
    {
        return Err(value(
            "limits.disk",
            format!("{d:?} is not a size like 512m or 10G"),
        ));
    }
    Ok(ZoneSpec {
        name: f.name,
        image,
        pull_policy: f.pull_policy.unwrap_or(PullPolicy::IfNotPresent),
        brand,
        stop_timeout_secs: f.stop_timeout_secs,
        limits: f.limits,
        source: path.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_config_defaults_paths_and_errors() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("worker.toml");
        std::fs::write(
            &p,
            "zones_dir = \"zones\"\nstate_dir = \"/var/lib/rdctl\"\n[provisioner]\nkind = \"dir\"\nbase = \"roots\"\n",
        )
        .unwrap();
        let c = WorkerConfig::load(&p).unwrap();
        assert_eq!(c.zones_dir, t.path().join("zones"));
        assert_eq!(c.state_dir, PathBuf::from("/var/lib/rdctl"));
        assert_eq!(
            c.provisioner,
            ProvisionerConfig::Dir {
                base: t.path().join("roots")
            }
        );
        assert_eq!(c.poll_interval, Duration::from_secs(300));
        assert_eq!(c.worker_id, "rdctl-worker");
        assert_eq!(c.client, ClientOptions::default());
        // Backoff doubles from the initial delay up to the cap.
        assert_eq!(c.backoff(1), Duration::from_secs(10));
        assert_eq!(c.backoff(2), Duration::from_secs(20));
        assert_eq!(c.backoff(7), Duration::from_secs(600));
        assert_eq!(c.backoff(1000), Duration::from_secs(600));
        // Jitter stays within ±10 %.
        assert_eq!(c.jittered_interval(0.0), Duration::from_secs(270));
        assert_eq!(c.jittered_interval(0.5), Duration::from_secs(300));
        assert!(c.jittered_interval(0.999) <= Duration::from_secs(330));

        for (text, field) in [
            ("jitter = 2.0\n", "jitter"),
            ("poll_interval_secs = 0\n", "poll_interval_secs"),
            ("worker_id = \"../x\"\n", "worker_id"),
            ("plain_http = true\ninsecure = true\n", "insecure"),
            ("max_parallel_pulls = 0\n", "max_parallel_pulls"),
            ("max_concurrent_downloads = 0\n", "max_concurrent_downloads"),
            ("registry_pull_qps = -1.0\n", "registry_pull_qps"),
            (
                "image_pull_progress_deadline_secs = 0\n",
                "image_pull_progress_deadline_secs",
            ),
            ("image_gc_high_percent = 101\n", "image_gc_high_percent"),
            (
                "image_gc_high_percent = 70\nimage_gc_low_percent = 80\n",
                "image_gc_low_percent",
            ),
            (
                "[[credential_providers]]\nname = \"p\"\nmatch_images = [\"r.example\"]\n",
                "image_credential_provider_bin_dir",
            ),
            (
                "image_credential_provider_bin_dir = \"bin\"\n[[credential_providers]]\nname = \"p\"\nmatch_images = [\"r.example\"]\napi_version = \"credentialprovider.kubelet.k8s.io/v1alpha1\"\n",
                "credential_providers",
            ),
            ("[allocatable]\nmemory = \"lots\"\n", "allocatable.memory"),
            (
                "[zones]\nallowed_privileges = [\"!proc_info\"]\n",
                "zones.allowed_privileges",
            ),
            (
                "[zones]\nallowed_lower_links = [\"igb\"]\n",
                "zones.allowed_lower_links",
            ),
            (
                "[zones]\nallowed_address_ranges = [\"10.0.0.2\"]\n",
                "zones.allowed_address_ranges",
            ),
        ] {
            std::fs::write(
                &p,
                format!("zones_dir = \"z\"\nstate_dir = \"s\"\n{text}[provisioner]\nkind = \"dir\"\nbase = \"b\"\n"),
            )
            .unwrap();
            match WorkerConfig::load(&p) {
                Err(ConfigError::Value { field: f, .. }) => assert_eq!(f, field),
                other => panic!("{text}: {other:?}"),
            }
        }
        std::fs::write(&p, "zones_dir = \"z\"\nstate_dir = \"s\"\nbogus = 1\n").unwrap();
        assert!(matches!(
            WorkerConfig::load(&p),
            Err(ConfigError::Parse { .. })
        ));
        // Wrong types and missing keys name the line, the dotted key and what is expected.
        let base = "zones_dir = \"z\"\nstate_dir = \"s\"\n";
        for (text, want) in [
            (
                format!(
                    "{base}poll_interval_secs = \"5m\"\n[provisioner]\nkind = \"dir\"\nbase = \"b\"\n"
                ),
                ":3: poll_interval_secs: expected a whole number (0 or more), found the string \"5m\" (seconds, a whole number such as 30)",
            ),
            (
                format!("{base}[provisioner]\nkind = \"dir\"\n"),
                ":3: provisioner.base: missing; this key is required",
            ),
            (
                "state_dir = \"s\"\n[provisioner]\nkind = \"dir\"\nbase = \"b\"\n".to_owned(),
                ":1: zones_dir: missing; this key is required",
            ),
        ] {
            std::fs::write(&p, &text).unwrap();
            let e = WorkerConfig::load(&p).unwrap_err().to_string();
            assert_eq!(e, format!("{}{want}", p.display()), "{text}");
        }
    }

    #[test]
    fn layer_store_kinds_and_errors_naming_the_field() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("worker.toml");
        let load = |text: &str| {
            std::fs::write(
                &p,
                format!("zones_dir = \"z\"\nstate_dir = \"s\"\n{text}[provisioner]\nkind = \"dir\"\nbase = \"b\"\n"),
            )
            .unwrap();
            WorkerConfig::load(&p)
        };
        assert_eq!(load("").unwrap().layer_store, LayerStoreConfig::Directory);
        assert_eq!(
            load("[layer_store]\nkind = \"directory\"\n")
                .unwrap()
                .layer_store,
            LayerStoreConfig::Directory
        );
        assert_eq!(
            load("[layer_store]\nkind = \"zfs\"\ndataset = \"rpool/rdctl\"\n")
                .unwrap()
                .layer_store,
            LayerStoreConfig::Zfs {
                dataset: "rpool/rdctl".into()
            }
        );
        for (text, field, says) in [
            ("kind = \"zfs\"\n", "layer_store.dataset", "missing"),
            (
                "kind = \"zfs\"\ndataset = \"pool/a b\"\n",
                "layer_store.dataset",
                "only",
            ),
            (
                "kind = \"zfs\"\ndataset = \"-o\"\n",
                "layer_store.dataset",
                "`-`",
            ),
            (
                "kind = \"directory\"\ndataset = \"p/x\"\n",
                "layer_store.dataset",
                "only for",
            ),
            ("kind = \"btrfs\"\n", "layer_store.kind", "\"btrfs\""),
        ] {
            match load(&format!("[layer_store]\n{text}")) {
                Err(e @ ConfigError::Value { field: f, .. }) => {
                    assert_eq!(f, field, "{text}");
                    assert!(e.to_string().contains(says), "{text}: {e}");
                }
                other => panic!("{text}: {other:?}"),
            }
        }
    }

    #[test]
    fn zone_manifests_good_bad_and_duplicate() {
        let t = tempfile::tempdir().unwrap();
        let w = |n: &str, s: &str| std::fs::write(t.path().join(n), s).unwrap();
        w(
            "a.toml",
            "name = \"web\"\nimage = \"127.0.0.1:5000/app:v1\"\npull_policy = \"Always\"\n[limits]\ncpus = 1.5\nmemory = \"512m\"\n",
        );
        w(
            "b.toml",
            "name = \"db\"\nimage = \"reg.example/db@sha256:0000000000000000000000000000000000000000000000000000000000000000\"\n",
        );
        w(
            "c.toml",
            "name = \"bad zone\"\nimage = \"reg.example/x:1\"\n",
        );
        w("d.toml", "name = \"dup\"\nimage = \"reg.example/x:1\"\n");
        w("e.toml", "name = \"dup\"\nimage = \"reg.example/y:1\"\n");
        w(
            "f.toml",
            "name = \"mem\"\nimage = \"reg.example/x:1\"\n[limits]\nmemory = \"lots\"\n",
        );
        w(
            "h.toml",
            "name = \"disk\"\nimage = \"reg.example/x:1\"\n[limits]\ndisk = \"lots\"\n",
        );
        w("ignored.txt", "not a manifest");
        let (good, bad) = load_zones(t.path()).unwrap();
        let names: Vec<&str> = good.iter().map(|z| z.name.as_str()).collect();
        assert_eq!(names, ["db", "web"]);
        let web = &good[1];
        assert_eq!(web.pull_policy, PullPolicy::Always);
        assert_eq!(web.brand, "nlipkg");
        assert_eq!(web.limits.cpus, Some(1.5));
        assert_eq!(good[0].pull_policy, PullPolicy::IfNotPresent);
        let bad_names: Vec<&str> = bad.iter().map(|b| b.zone.as_str()).collect();
        assert_eq!(bad_names, ["c", "f", "h", "dup"]);
        let disk = bad
            .iter()
            .find(|b| b.zone == "h")
            .unwrap()
            .error
            .to_string();
        assert!(
            disk.contains("limits.disk") && disk.contains("\"lots\" is not a size"),
            "{disk}"
        );
        assert!(bad[3].error.to_string().contains("also defined by"));
        // A reference without a registry host is refused at load, not as a DNS failure later.
        w("g.toml", "name = \"g\"\nimage = \"site/tools:1.0\"\n");
        let e = load_zone(&t.path().join("g.toml")).unwrap_err().to_string();
        assert!(
            e.contains("image: ") && e.contains("\"site\" is not a registry host"),
            "{e}"
        );
    }

    #[test]
    fn node_agent_keys_parse_with_kubelet_defaults() {
        let t = tempfile::tempdir().unwrap();
        let p = t.path().join("worker.toml");
        let base = "zones_dir = \"z\"\nstate_dir = \"s\"\n";
        let tail = "[provisioner]\nkind = \"dir\"\nbase = \"b\"\n";
        std::fs::write(&p, format!("{base}{tail}")).unwrap();
        let c = WorkerConfig::load(&p).unwrap();
        assert_eq!(c.max_parallel_pulls, None);
        assert_eq!(c.max_concurrent_downloads, 3);
        assert_eq!(c.registry_pull_qps, 0.0);
        assert_eq!(c.registry_burst, 10);
        assert_eq!(c.image_pull_progress_deadline, Duration::from_secs(60));
        assert_eq!((c.image_gc_high_percent, c.image_gc_low_percent), (85, 80));
        assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
        assert_eq!(c.allocatable, crate::capacity::Resources::default());
        assert_eq!(
            c.zone_policy,
            ZonePolicy::default(),
            "no escalation by default"
        );
        assert!(c.client.credential_providers.is_empty());
        std::fs::write(
            &p,
            format!(
                "{base}max_parallel_pulls = 2\nmax_concurrent_downloads = 1\n\
                 registry_pull_qps = 5.0\nregistry_burst = 3\n\
                 image_credential_provider_bin_dir = \"plugins\"\n{tail}\
                 [allocatable]\ncpus = 6.0\nmemory = \"24G\"\nzones = 20\n\
                 [[credential_providers]]\nname = \"ecr\"\nmatch_images = [\"*.example\"]\n\
                 default_cache_duration_secs = 600\nargs = [\"-v\"]\nenv = {{ A = \"1\" }}\n"
            ),
        )
        .unwrap();
        let c = WorkerConfig::load(&p).unwrap();
        assert_eq!(c.max_parallel_pulls, Some(2));
        assert_eq!(c.max_concurrent_downloads, 1);
        assert_eq!((c.registry_pull_qps, c.registry_burst), (5.0, 3));
        assert_eq!(c.allocatable.memory_bytes, Some(24 << 30));
        assert_eq!(c.allocatable.zones, Some(20));
        let pr = &c.client.credential_providers[0];
        assert_eq!(pr.command, t.path().join("plugins/ecr"));
        assert_eq!(pr.default_cache_duration, Duration::from_secs(600));
        assert_eq!(pr.env, [("A".to_owned(), "1".to_owned())]);
        assert_eq!(pr.args, ["-v"]);
    }
}
