//! The reconcile loop: level-triggered passes over the zone manifests, each zone on its own,
//! failures recorded and backed off per zone, passes spaced by the poll interval with jitter.
//!
//! This module holds the [`Worker`], its errors and the loop that runs passes; the steps of a
//! pass live in child modules by concern: `pass` (one pass over every manifest, orphans,
//! recording each zone's outcome), `node` (admission by resources and the node's conditions),
//! `reconcile` (one zone: resolve, admit, pull under the pull controls, unpack, provision),
//! `gc` (blobs and layers no zone uses) and `status` (what `rdctl worker status` reads).

mod gc;
mod node;
mod pass;
mod reconcile;
mod rollout;
mod status;
mod volumes;

use std::collections::HashMap;
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use registry_client::{Client, ClientError};
use trust::{Policy, PolicyError};
use validator::{Digest, error_chain};

use crate::admission::{Admission, AdmissionError};
use crate::config::{ConfigError, ProvisionerConfig, WorkerConfig, ZoneSpec};
use crate::metrics::{Metrics, VerifyStage};
use crate::provision::{DirProvisioner, ProvisionError, Provisioner};
use crate::pull::{HostPlatform, PullError};
use crate::state::{StateDir, StateError, now_unix};
use crate::store::{ContentStore, StoreError};
use crate::unpack::UnpackOptions;
use crate::verify::RootError;

pub use status::{RollbackError, StatusReport, StatusRow, request_rollback, status, status_report};

/// The worker could not start or run a pass at all (per-zone failures are recorded instead).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum WorkerError {
    /// worker.toml or the zones directory.
    #[error("configuration")]
    Config(#[from] ConfigError),
    /// The state directory.
    #[error("state")]
    State(#[from] StateError),
    /// The content store.
    #[error("content store")]
    Store(#[from] StoreError),
    /// The provisioner could not be set up.
    #[error("provisioner")]
    Provision(#[from] ProvisionError),
    /// The registry client could not be built.
    #[error("registry client")]
    Client(#[from] ClientError),
    /// The zones directory is missing or not a directory (checked before anything is
    /// created, so a wrong path leaves no state behind).
    #[error("zones_dir {}: {reason}", path.display())]
    ZonesDir {
        /// The directory.
        path: std::path::PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The admission policy file named by `policy` could not be loaded.
    #[error("policy")]
    Policy(#[from] PolicyError),
    /// The ZFS layer store (`[layer_store] kind = "zfs"`) could not be opened.
    #[error("layer_store")]
    LayerStore(#[from] crate::zfs::ZfsStoreError),
    /// The volumes' directory (or dataset) could not be opened.
    #[error("volumes")]
    Volume(#[source] Box<crate::volume::VolumeError>),
    /// The failpoint variable (`RDCTL_FAILPOINT_PAUSE`, tests only) holds no step number.
    #[error("failpoint")]
    Failpoint(#[from] crate::provision::failpoint::FailpointError),
    /// The metrics address could not be bound.
    #[error("metrics_listen {addr}: cannot listen")]
    Metrics {
        /// The address.
        addr: std::net::SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
}

/// Why one zone's attempt failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZoneError {
    /// Resolving or pulling.
    #[error("pull")]
    Pull(#[from] PullError),
    /// Unpacking and verifying the root.
    #[error("verify")]
    Root(#[from] RootError),
    /// The admission policy refused the image, or its signatures could not be read.
    #[error(transparent)]
    Admission(#[from] AdmissionError),
    /// Creating the zone.
    #[error("provision")]
    Provision(#[from] ProvisionError),
    /// The ZFS layer store failed around a layer (not the layer itself: that is `Root`).
    #[error("layer store")]
    LayerStore(#[source] crate::zfs::ZfsStoreError),
    /// A blocking task died.
    #[error("internal: {0}")]
    Task(String),
    /// The new zone did not become ready within the manifest's `update_timeout`: the
    /// previous root runs again (`rolled_back`), or, with no previous root kept (a new zone,
    /// a provisioner that keeps none), the zone is left as made.
    #[error(
        "not ready within update_timeout {}s: {reason}; {}",
        timeout.as_secs_f64(),
        if *rolled_back { "rolled back to the previous root" } else { "no previous root is kept to roll back to (a new zone, or the illumos provisioner): the zone is left as made" }
    )]
    NotReady {
        /// The last thing found not ready (the zone's state, or the probe's answer).
        reason: String,
        /// The time it had.
        timeout: std::time::Duration,
        /// Whether the previous root runs again.
        rolled_back: bool,
    },
    /// The image's caps ask for more than the node has left once the zones admitted before it
    /// hold theirs: the zone is not made (phase `Unschedulable`).
    #[error("{reason}")]
    Unschedulable {
        /// Kubelet's reason word (`OutOfcpu`, `OutOfmemory`), the image's cap and what is left.
        reason: String,
    },
}

impl From<crate::volume::VolumeError> for WorkerError {
    fn from(e: crate::volume::VolumeError) -> WorkerError {
        WorkerError::Volume(Box::new(e))
    }
}

impl From<crate::zfs::ZfsStoreError> for ZoneError {
    fn from(e: crate::zfs::ZfsStoreError) -> ZoneError {
        match e {
            // A layer that does not apply or verify fails as it does in a directory root.
            crate::zfs::ZfsStoreError::Layer { source, .. } => ZoneError::Root(*source),
            e => ZoneError::LayerStore(e),
        }
    }
}

impl ZoneError {
    /// The blob the failure is about, if any.
    pub fn blob(&self) -> Option<&Digest> {
        match self {
            ZoneError::Pull(e) => e.blob(),
            ZoneError::Root(e) => e.blob(),
            _ => None,
        }
    }
}

/// The check a failure came from, when it is a verification failure.
fn verify_stage(e: &ZoneError) -> Option<VerifyStage> {
    match e {
        ZoneError::Pull(PullError::Store(StoreError::Verify { .. })) => Some(VerifyStage::Blob),
        ZoneError::Pull(PullError::Registry { source, .. })
        | ZoneError::Pull(PullError::Store(StoreError::Fetch { source, .. }))
            if source.kind() == registry_client::ErrorKind::Verify =>
        {
            Some(VerifyStage::Blob)
        }
        ZoneError::Root(RootError::Layer {
            source: crate::unpack::UnpackError::DiffId { .. },
            ..
        }) => Some(VerifyStage::DiffId),
        _ => None,
    }
}

/// What one pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PassSummary {
    /// Zones created or replaced.
    pub provisioned: Vec<String>,
    /// Zones already at their desired image.
    pub unchanged: Vec<String>,
    /// Zones that failed (or whose manifest is invalid).
    pub failed: Vec<String>,
    /// Zones skipped because their backoff has not expired.
    pub backing_off: Vec<String>,
    /// Zones removed because their manifest is gone (after the grace period).
    pub removed: Vec<String>,
    /// Zones not admitted: the node cannot give what they ask for (phase `Unschedulable`).
    pub unschedulable: Vec<String>,
}

/// A worker ready to run passes. Cheap to share (`Arc`).
pub struct Worker {
    config: WorkerConfig,
    client: Client,
    store: ContentStore,
    state: StateDir,
    provisioner: Box<dyn Provisioner>,
    /// The ZFS zonepath datasets when `[layer_store] kind = "zfs"`.
    layer_store: Option<crate::zfs::ZoneDatasets>,
    /// The zones' volumes (under the provisioner's base).
    volumes: crate::volume::Volumes,
    host: HostPlatform,
    unpack: UnpackOptions,
    metrics: Arc<Metrics>,
    /// The admission policy in force (replaced whole by [`Worker::reload_policy`]).
    policy: std::sync::RwLock<Arc<Policy>>,
    /// Pulls in flight at most (`max_parallel_pulls`).
    pull_slots: Option<Arc<tokio::sync::Semaphore>>,
    /// Pulls per second per registry (`registry_pull_qps`, `registry_burst`).
    limiter: crate::throttle::RegistryLimiter,
    /// Where GC reads disk usage from when a test says (else `statvfs` of the content store
    /// for image GC, and ZFS's own numbers for layer GC).
    disk: Option<Arc<dyn crate::throttle::DiskUsage>>,
    /// What the last attempt of each zone observed, for its status record.
    observed: std::sync::Mutex<HashMap<String, Observed>>,
    _lock: std::fs::File,
}

/// What a zone's attempt measured, recorded in its status.
#[derive(Debug, Default, Clone, Copy)]
struct Observed {
    pull: Option<crate::throttle::PullBytes>,
    replace_downtime_ms: Option<u64>,
}

impl std::fmt::Debug for Worker {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Worker")
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

enum Outcome {
    Provisioned,
    Unchanged,
}

/// What a successful reconcile did: the outcome, the resolved digest and, when the zone was
/// (re)created under a policy, what admitted it.
type Reconciled = (Outcome, Digest, Option<Admission>);

/// A number in [0, 1) from the process's random hasher keys (jitter needs no quality).
fn unit_random() -> f64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_unix());
    (h.finish() >> 11) as f64 / (1u64 << 53) as f64
}

impl Worker {
    /// Opens the state directory (taking its lock), the content store and the provisioner.
    pub fn new(config: WorkerConfig) -> Result<Worker, WorkerError> {
        // Everything that can fail without writing is checked first, so a mistyped path or an
        // unreadable CA file leaves no state, content or base directory behind.
        match std::fs::metadata(&config.zones_dir) {
            Ok(m) if m.is_dir() => {}
            Ok(_) => {
                return Err(WorkerError::ZonesDir {
                    path: config.zones_dir.clone(),
                    reason: "not a directory".into(),
                });
            }
            Err(e) => {
                return Err(WorkerError::ZonesDir {
                    path: config.zones_dir.clone(),
                    reason: format!("{e} (create it and put the zone manifests there)"),
                });
            }
        }
        #[cfg(not(target_os = "illumos"))]
        if let ProvisionerConfig::Illumos { .. } = &config.provisioner {
            return Err(ProvisionError::Unsupported("illumos").into());
        }
        let policy = match &config.policy {
            Some(path) => Policy::load(path)?,
            None => Policy::accept_all(),
        };
        let client = config
            .client
            .builder(&registry_client::AuthEnv::current())
            .build()?;
        let state = StateDir::open(&config.state_dir, &config.worker_id)?;
        let lock = state.lock()?;
        let metrics = Arc::new(Metrics::default());
        let store = ContentStore::open(&config.state_dir.join("content"), &config.worker_id)?
            .with_metrics(metrics.clone())
            .with_progress_deadline(config.image_pull_progress_deadline);
        let layer_store = match &config.layer_store {
            crate::config::LayerStoreConfig::Directory => None,
            crate::config::LayerStoreConfig::Zfs { dataset } => {
                // Each layer's verified DiffID and snapshot identity live in the worker's own
                // state: the marks on a dataset are user properties anyone may copy.
                let layers = crate::zfs::ZfsLayerStore::open(
                    crate::zfs::Zfs::default(),
                    dataset,
                    &config.worker_id,
                )?
                .with_records(&config.state_dir.join("zfs-layers"))?;
                Some(crate::zfs::ZoneDatasets::open(
                    layers,
                    config.provisioner.base(),
                )?)
            }
        };
        // The zone tools settle a killed worker's open switches themselves, the system zone
        // brought down before its zonepath moves.
        let zone_tools = matches!(config.provisioner, ProvisionerConfig::Illumos { .. });
        let dir = match &layer_store {
            _ if zone_tools => DirProvisioner::for_zone_tools(
                config.provisioner.base(),
                &config.worker_id,
                layer_store.clone(),
            )?,
            None => DirProvisioner::new(config.provisioner.base(), &config.worker_id)?,
            Some(d) => DirProvisioner::on_datasets(d.clone(), &config.worker_id)?,
        };
        let volumes =
            crate::volume::Volumes::open(dir.base(), &config.worker_id, layer_store.clone())?;
        let dir = dir.with_volumes(volumes.clone());
        // Off unless the environment asks (kill -9 tests of a switch); after the settling of
        // interrupted switches, so the steps counted are this run's own.
        let hook = crate::provision::failpoint::pause_hook_from_env(&config.state_dir)?;
        let provisioner: Box<dyn Provisioner> = match &config.provisioner {
            ProvisionerConfig::Dir { .. } => Box::new(match hook {
                Some(hook) => dir.with_step_hook(hook),
                None => dir,
            }),
            #[cfg(target_os = "illumos")]
            ProvisionerConfig::Illumos { .. } => {
                let p =
                    crate::provision::IllumosProvisioner::new(dir, crate::provision::SystemRunner);
                p.settle_at_start();
                Box::new(match hook {
                    Some(hook) => p.with_step_hook(hook),
                    None => p,
                })
            }
            #[cfg(not(target_os = "illumos"))]
            ProvisionerConfig::Illumos { .. } => {
                return Err(ProvisionError::Unsupported("illumos").into());
            }
        };
        Ok(Worker {
            host: HostPlatform::new(config.os_version.clone()),
            client,
            store,
            state,
            provisioner,
            layer_store,
            volumes,
            unpack: UnpackOptions::default(),
            metrics,
            policy: std::sync::RwLock::new(Arc::new(policy)),
            pull_slots: config
                .max_parallel_pulls
                .map(|n| Arc::new(tokio::sync::Semaphore::new(n))),
            limiter: crate::throttle::RegistryLimiter::new(
                config.registry_pull_qps,
                config.registry_burst,
            ),
            disk: None,
            observed: std::sync::Mutex::new(HashMap::new()),
            config,
            _lock: lock,
        })
    }

    /// Reads disk usage for image GC and layer GC from `disk` instead of `statvfs` and ZFS
    /// (tests).
    pub fn with_disk_usage(mut self, disk: Arc<dyn crate::throttle::DiskUsage>) -> Self {
        self.disk = Some(disk);
        self
    }

    /// Where the content store's disk usage is read: `statvfs`, unless a test says.
    fn content_disk(&self) -> &dyn crate::throttle::DiskUsage {
        self.disk.as_deref().unwrap_or(&crate::throttle::Statvfs)
    }

    fn observe(&self, zone: &str, f: impl FnOnce(&mut Observed)) {
        let mut m = self.observed.lock().unwrap_or_else(|e| e.into_inner());
        f(m.entry(zone.to_owned()).or_default());
    }

    /// Replaces the registry client (tests use short retry delays).
    pub fn with_client(mut self, client: Client) -> Self {
        self.client = client;
        self
    }

    /// Reports the byte progress of every blob download to `progress` (see
    /// [`ContentStore::with_progress`]).
    pub fn with_progress(mut self, progress: Arc<dyn registry_client::progress::Progress>) -> Self {
        self.store = self.store.with_progress(progress);
        self
    }

    /// The configuration.
    pub fn config(&self) -> &WorkerConfig {
        &self.config
    }

    /// The admission policy in force.
    pub fn policy(&self) -> Arc<Policy> {
        self.policy
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Loads the policy file again (SIGHUP). A file that does not load leaves the policy in
    /// force unchanged and is returned as the error. `Ok(false)`: no policy file configured.
    pub fn reload_policy(&self) -> Result<bool, PolicyError> {
        let Some(path) = &self.config.policy else {
            return Ok(false);
        };
        let loaded = Policy::load(path);
        self.metrics.policy_reload(loaded.is_ok());
        let policy = loaded?;
        *self.policy.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(policy);
        Ok(true)
    }

    /// [`Worker::reload_policy`], logged: what `rdctl worker run` does on SIGHUP.
    fn reload_policy_logged(&self) {
        match self.reload_policy() {
            Ok(true) => tracing::info!(
                policy = %self.config.policy.as_deref().unwrap_or(std::path::Path::new("")).display(),
                "policy reloaded"
            ),
            Ok(false) => tracing::info!("reload asked for, but worker.toml names no policy file"),
            Err(e) => tracing::warn!(
                error = %error_chain(&e),
                "policy reload failed; the previous policy stays in force"
            ),
        }
    }

    /// The admission check on `digest`, timed and counted. `None` without a policy file
    /// (today's behaviour: digests and DiffIDs are the only checks).
    async fn admit(
        &self,
        spec: &ZoneSpec,
        sources: &crate::mirrors::Sources,
        digest: &Digest,
    ) -> Result<Option<Admission>, AdmissionError> {
        if self.config.policy.is_none() {
            return Ok(None);
        }
        let policy = self.policy();
        let t = std::time::Instant::now();
        let r = crate::admission::check(&self.client, &policy, sources, digest).await;
        let (denied, error) = match &r {
            Ok(_) => (None, false),
            Err(AdmissionError::Denied(d)) => (Some(d.reason.as_str()), false),
            Err(_) => (None, true),
        };
        self.metrics.admission(denied, error, t.elapsed());
        let took_ms = t.elapsed().as_secs_f64() * 1e3;
        tracing::info!(zone = %spec.name, %digest, took_ms, admitted = r.is_ok(), "admission check");
        r.map(Some)
    }

    /// The worker's metrics (what `/metrics` serves).
    pub fn metrics(&self) -> &Arc<Metrics> {
        &self.metrics
    }

    /// Runs passes until `shutdown` resolves, sleeping the jittered poll interval between
    /// them. With `once`, runs one pass (ignoring backoff) and returns its summary.
    ///
    /// Each message on `reload` (SIGHUP for `rdctl worker run`) reloads the policy file
    /// ([`Worker::reload_policy`]; a bad file keeps the policy in force) and starts a pass at
    /// once, ignoring backoff, so zones the old policy refused are tried again. A message that
    /// arrives during a pass is handled when the pass ends.
    pub async fn run(
        self: Arc<Self>,
        once: bool,
        shutdown: impl std::future::Future<Output = ()>,
        mut reload: Option<tokio::sync::mpsc::Receiver<()>>,
    ) -> Result<PassSummary, WorkerError> {
        if once {
            return self.pass(true).await;
        }
        tokio::pin!(shutdown);
        let mut last = PassSummary::default();
        let mut ignore_backoff = false;
        loop {
            tokio::select! {
                r = self.pass(std::mem::take(&mut ignore_backoff)) => {
                    last = r?;
                    tracing::info!(?last, "reconcile pass done");
                }
                () = &mut shutdown => return Ok(last),
            }
            let sleep = self.config.jittered_interval(unit_random());
            tokio::select! {
                () = tokio::time::sleep(sleep) => {}
                Some(()) = next_reload(&mut reload) => {
                    self.reload_policy_logged();
                    ignore_backoff = true;
                }
                () = &mut shutdown => return Ok(last),
            }
        }
    }
}

/// The next reload request; never resolves without a channel.
async fn next_reload(reload: &mut Option<tokio::sync::mpsc::Receiver<()>>) -> Option<()> {
    match reload {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Aborts a task when dropped (the metrics server ends with the run).
struct AbortOnDrop(tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `rdctl worker run`: runs passes with a configuration already loaded (and adjusted:
/// `rdctl worker run`'s client flags override the file's) until `shutdown` resolves, or one
/// pass with `once`; reloads the policy on each `reload` message (see [`Worker::run`]);
/// reports each blob download's bytes to `progress`; serves `/metrics` meanwhile when
/// configured. Runs on the caller's
/// runtime; the caller gives blocking unpack tasks of an interrupted pass a bounded time to
/// end when it shuts the runtime down (what they leave in staging is removed on the next
/// start).
pub async fn run(
    config: WorkerConfig,
    once: bool,
    shutdown: impl Future<Output = ()>,
    reload: Option<tokio::sync::mpsc::Receiver<()>>,
    progress: Arc<dyn registry_client::progress::Progress>,
) -> Result<PassSummary, WorkerError> {
    let worker = Arc::new(Worker::new(config)?.with_progress(progress));
    let _metrics = match worker.config.metrics_listen {
        Some(addr) => {
            let listener = crate::metrics::bind(addr)
                .await
                .map_err(|source| WorkerError::Metrics { addr, source })?;
            let local = listener.local_addr().unwrap_or(addr);
            tracing::info!(addr = %local, "metrics listening on {local}");
            let m = worker.metrics.clone();
            Some(AbortOnDrop(tokio::spawn(async move {
                if let Err(e) = crate::metrics::serve(listener, m).await {
                    tracing::warn!(error = %e, "the metrics server stopped");
                }
            })))
        }
        None => None,
    };
    worker.run(once, shutdown, reload).await
}
