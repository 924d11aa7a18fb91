//! The reconcile loop: level-triggered passes over the zone manifests, each zone on its own,
//! failures recorded and backed off per zone, passes spaced by the poll interval with jitter.

use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasher, Hasher};
use std::sync::Arc;

use registry_client::{Client, ClientError};
use tokio::task::JoinSet;
use trust::{Policy, PolicyError};
use validator::{Digest, error_chain};

use crate::admission::{Admission, AdmissionError};

use crate::config::{
    ConfigError, ProvisionerConfig, PullPolicy, WorkerConfig, ZoneSpec, load_zones,
};
use crate::feed::{FeedReader, LayerFeed};
use crate::metrics::{Metrics, VerifyStage};
use crate::provision::{DirProvisioner, ProvisionError, Provisioner, check_zone_policy};
use crate::pull::{HostPlatform, PullError, fetch_layers, pull_documents, resolve};
use crate::state::{Phase, StateDir, StateError, ZoneStatus, now_unix};
use crate::store::{ContentStore, StoreError};
use crate::unpack::UnpackOptions;
use crate::verify::{RootError, build_root, build_root_from};

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

/// The dataset quota of a zone on the ZFS layer store: the zone manifest's `limits.disk`
/// (checked when the manifest was read), else the image manifest's
/// [`crate::zfs::QUOTA_ANNOTATION`] (`10G`, `512m`); an unreadable annotation refuses the zone.
fn zone_quota(
    zone: &str,
    disk: Option<&str>,
    image: &crate::verify::PulledImage,
) -> Result<Option<u64>, ZoneError> {
    if let Some(b) = disk.and_then(crate::capacity::size_bytes) {
        return Ok(Some(b));
    }
    let Some(v) = image.manifest.annotations.get(crate::zfs::QUOTA_ANNOTATION) else {
        return Ok(None);
    };
    match crate::capacity::size_bytes(v) {
        Some(b) if b > 0 => Ok(Some(b)),
        _ => Err(ProvisionError::Config {
            zone: zone.to_owned(),
            field: "manifest annotations",
            reason: format!(
                "{}={v:?} is not a size like 512m or 10G",
                crate::zfs::QUOTA_ANNOTATION
            ),
        }
        .into()),
    }
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
    host: HostPlatform,
    unpack: UnpackOptions,
    metrics: Arc<Metrics>,
    /// The admission policy in force (replaced whole by [`Worker::reload_policy`]).
    policy: std::sync::RwLock<Arc<Policy>>,
    /// Pulls in flight at most (`max_parallel_pulls`).
    pull_slots: Option<Arc<tokio::sync::Semaphore>>,
    /// Pulls per second per registry (`registry_pull_qps`, `registry_burst`).
    limiter: crate::throttle::RegistryLimiter,
    /// Where image GC reads disk usage from.
    disk: Arc<dyn crate::throttle::DiskUsage>,
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

static STAGING_COUNTER: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

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
                let layers = crate::zfs::ZfsLayerStore::open(
                    crate::zfs::Zfs::default(),
                    dataset,
                    &config.worker_id,
                )?;
                Some(crate::zfs::ZoneDatasets::open(
                    layers,
                    config.provisioner.base(),
                )?)
            }
        };
        let zone_base = |base: &std::path::Path| match &layer_store {
            None => DirProvisioner::new(base, &config.worker_id),
            Some(d) => DirProvisioner::on_datasets(d.clone(), &config.worker_id),
        };
        let provisioner: Box<dyn Provisioner> = match &config.provisioner {
            ProvisionerConfig::Dir { base } => Box::new(zone_base(base)?),
            #[cfg(target_os = "illumos")]
            ProvisionerConfig::Illumos { base } => {
                Box::new(crate::provision::IllumosProvisioner::new(
                    zone_base(base)?,
                    crate::provision::SystemRunner,
                ))
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
            disk: Arc::new(crate::throttle::Statvfs),
            observed: std::sync::Mutex::new(HashMap::new()),
            config,
            _lock: lock,
        })
    }

    /// Reads disk usage for image GC from `disk` instead of `statvfs` (tests).
    pub fn with_disk_usage(mut self, disk: Arc<dyn crate::throttle::DiskUsage>) -> Self {
        self.disk = disk;
        self
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

    /// One reconcile pass over every zone manifest. Zones run concurrently and independently;
    /// with `ignore_backoff` (`--once`) every zone is attempted.
    pub async fn pass(self: &Arc<Self>, ignore_backoff: bool) -> Result<PassSummary, WorkerError> {
        let started = std::time::Instant::now();
        let (specs, invalid) = load_zones(&self.config.zones_dir)?;
        let mut summary = PassSummary::default();
        for bad in invalid {
            let mut st = self.state.load(&bad.zone).unwrap_or_default();
            st.zone = bad.zone.clone();
            st.phase = Phase::Invalid;
            st.last_error = Some(error_chain(&bad.error));
            st.updated_unix = now_unix();
            self.state.save(&st)?;
            summary.failed.push(bad.zone);
        }
        let mut tasks = JoinSet::new();
        let mut names = HashMap::new();
        let wanted: HashSet<String> = specs.iter().map(|s| s.name.clone()).collect();
        // Zones past their grace period go first, so what they held is free for this pass;
        // the others still hold theirs (`admit_by_resources`).
        self.remove_orphans(&wanted, &mut summary)?;
        let specs = self.admit_by_resources(specs, &mut summary)?;
        for spec in specs {
            let prev = self.state.load(&spec.name).unwrap_or_default();
            if !ignore_backoff
                && matches!(prev.phase, Phase::Failed | Phase::Denied)
                && prev.next_attempt_unix.is_some_and(|t| t > now_unix())
            {
                summary.backing_off.push(spec.name.clone());
                continue;
            }
            let me = Arc::clone(self);
            let name = spec.name.clone();
            let id = tasks
                .spawn(async move {
                    let t = std::time::Instant::now();
                    let result = me.reconcile(&spec, &prev).await;
                    me.metrics.zone(
                        matches!(result, Ok((Outcome::Provisioned, _, _))),
                        result.is_err(),
                        t.elapsed(),
                    );
                    if let Err((e, _)) = &result
                        && let Some(stage) = verify_stage(e)
                    {
                        me.metrics.verification_failure(stage);
                    }
                    (spec, prev, result)
                })
                .id();
            names.insert(id, name);
        }
        let mut results = HashMap::new();
        while let Some(joined) = tasks.join_next_with_id().await {
            let (spec, prev, result) = match joined {
                Ok((_, r)) => r,
                Err(e) => {
                    // A panic in one zone's task is that zone's failure only.
                    let zone = names.get(&e.id()).cloned().unwrap_or_default();
                    let mut st = self.state.load(&zone).unwrap_or_default();
                    st.zone = zone.clone();
                    st.phase = Phase::Failed;
                    st.last_error = Some(format!("internal: the zone's task failed: {e}"));
                    st.updated_unix = now_unix();
                    summary.failed.push(zone.clone());
                    results.insert(zone, st);
                    continue;
                }
            };
            let mut st = ZoneStatus {
                zone: spec.name.clone(),
                image: spec.image.to_string(),
                current_digest: prev.current_digest.clone(),
                desired_digest: prev.desired_digest.clone(),
                admission: prev.admission.clone(),
                updated_unix: now_unix(),
                pull: prev.pull,
                replace_downtime_ms: prev.replace_downtime_ms,
                ..ZoneStatus::default()
            };
            let seen = self
                .observed
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&spec.name)
                .unwrap_or_default();
            if seen.pull.is_some() {
                st.pull = seen.pull;
            }
            if seen.replace_downtime_ms.is_some() {
                st.replace_downtime_ms = seen.replace_downtime_ms;
            }
            match result {
                Ok((outcome, desired, admission)) => {
                    st.phase = Phase::Ready;
                    st.desired_digest = Some(desired.clone());
                    st.current_digest = Some(desired);
                    if matches!(outcome, Outcome::Provisioned) {
                        st.admission = admission;
                    }
                    match outcome {
                        Outcome::Provisioned => summary.provisioned.push(spec.name.clone()),
                        Outcome::Unchanged => summary.unchanged.push(spec.name.clone()),
                    }
                }
                Err((e, desired)) => {
                    tracing::warn!(zone = %spec.name, error = %error_chain(&e), "zone reconcile failed");
                    st.phase = Phase::Failed;
                    if let ZoneError::Admission(AdmissionError::Denied(d)) = &e {
                        st.phase = Phase::Denied;
                        let mut d = (**d).clone();
                        // A moved tag that is refused replaces nothing: say so, or the
                        // operator reads "denied" as "the zone is down".
                        if let Some(current) = &st.current_digest
                            && current != &d.digest
                        {
                            d.message.push_str(&format!(
                                "; the zone keeps running its current image {current}"
                            ));
                        }
                        st.denial = Some(d);
                    }
                    if desired.is_some() {
                        st.desired_digest = desired;
                    }
                    st.failed_blob = e.blob().cloned();
                    st.last_error = Some(error_chain(&e));
                    st.failures = prev.failures.saturating_add(1);
                    st.next_attempt_unix =
                        Some(now_unix() + self.config.backoff(st.failures).as_secs());
                    summary.failed.push(spec.name.clone());
                }
            }
            results.insert(spec.name.clone(), st);
        }
        for st in results.values() {
            self.state.save(st)?;
        }
        // Between passes nothing is downloading: blobs no zone uses go after the grace period.
        match self.referenced_blobs(&results) {
            Ok(keep) => {
                match self.store.retain(&keep, self.config.gc_grace) {
                    Ok(0) => {}
                    Ok(n) => tracing::info!(removed = n, "removed unused blobs"),
                    Err(e) => {
                        tracing::warn!(error = %error_chain(&e), "blob garbage collection failed")
                    }
                }
                if let Err(e) = self.gc_by_disk_usage(&keep) {
                    tracing::warn!(error = %error_chain(&e), "image garbage collection by disk usage failed");
                }
                if let Err(e) = self.gc_layers() {
                    tracing::warn!(error = %error_chain(&e), "layer garbage collection on the ZFS layer store failed");
                }
            }
            Err(e) => tracing::warn!(error = %error_chain(&e), "blob garbage collection skipped"),
        }
        self.record_disk_pressure()?;
        self.metrics.pass(started.elapsed());
        summary.provisioned.sort();
        summary.unchanged.sort();
        summary.failed.sort();
        summary.backing_off.sort();
        summary.removed.sort();
        summary.unschedulable.sort();
        Ok(summary)
    }

    /// The zones the node can give what they ask for, in order: zones that exist keep their
    /// place, then new ones by name. The others are recorded `Unschedulable` with the reason;
    /// the node's capacity, allocatable and allocated resources are written for status.
    fn admit_by_resources(
        &self,
        specs: Vec<ZoneSpec>,
        summary: &mut PassSummary,
    ) -> Result<Vec<ZoneSpec>, WorkerError> {
        let caps = self.provisioner.capabilities();
        let existing: HashSet<String> = match self.provisioner.zones() {
            Ok(z) => z.into_iter().collect(),
            Err(e) => {
                tracing::warn!(error = %error_chain(&e), "listing zones for admission failed");
                HashSet::new()
            }
        };
        let mut specs = specs;
        specs.sort_by(|a, b| {
            (!existing.contains(&a.name), &a.name).cmp(&(!existing.contains(&b.name), &b.name))
        });
        let mut allocated = crate::capacity::Allocated::default();
        // Zones whose manifest is gone still exist until their grace period is over and they
        // are removed: they hold what they were given (their description's caps) until then.
        let wanted: HashSet<&str> = specs.iter().map(|s| s.name.as_str()).collect();
        let mut leaving: Vec<&String> = existing
            .iter()
            .filter(|z| !wanted.contains(z.as_str()))
            .collect();
        leaving.sort();
        for zone in leaving {
            let r = match self.provisioner.current(zone) {
                Ok(Some(d)) => {
                    crate::capacity::effective_request(&d.limits, Some(d.zone_config.caps()))
                }
                Ok(None) => crate::capacity::effective_request(&Default::default(), None),
                Err(e) => {
                    tracing::warn!(zone, error = %error_chain(&e), "reading a leaving zone's caps failed; counting its slot only");
                    crate::capacity::effective_request(&Default::default(), None)
                }
            };
            allocated.add(r);
        }
        let mut admitted = Vec::new();
        let mut refused = Vec::new();
        for spec in specs {
            // A zone that exists was configured with the image's caps too (its description).
            let made = if existing.contains(&spec.name) {
                match self.provisioner.current(&spec.name) {
                    Ok(d) => d.map(|d| d.zone_config.caps()),
                    Err(e) => {
                        tracing::warn!(zone = %spec.name, error = %error_chain(&e), "reading a zone's caps failed; counting its manifest's limits only");
                        None
                    }
                }
            } else {
                None
            };
            match crate::capacity::fit(&caps, &self.config.allocatable, &allocated, &spec, made) {
                Ok(r) => {
                    allocated.add(r);
                    admitted.push(spec);
                }
                Err(reason) => {
                    if !reason.starts_with("UnsupportedBrand") {
                        refused.push(format!("{}: {reason}", spec.name));
                    }
                    tracing::warn!(zone = %spec.name, %reason, "zone not admitted");
                    let prev = self.state.load(&spec.name).unwrap_or_default();
                    self.state.save(&ZoneStatus {
                        zone: spec.name.clone(),
                        image: spec.image.to_string(),
                        current_digest: prev.current_digest,
                        desired_digest: prev.desired_digest,
                        admission: prev.admission,
                        phase: Phase::Unschedulable,
                        last_error: Some(reason),
                        updated_unix: now_unix(),
                        ..ZoneStatus::default()
                    })?;
                    summary.unschedulable.push(spec.name);
                }
            }
        }
        use crate::capacity::{ConditionStatus, ConditionType, NodeCondition};
        let previous = self
            .state
            .load_node()
            .map(|n| n.conditions)
            .unwrap_or_default();
        let pressure = if refused.is_empty() {
            NodeCondition::new(
                ConditionType::ResourcePressure,
                ConditionStatus::False,
                "ZonesFit",
                "every zone fits in what is allocatable".into(),
                &previous,
                now_unix(),
            )
        } else {
            NodeCondition::new(
                ConditionType::ResourcePressure,
                ConditionStatus::True,
                "ZonesNotAdmitted",
                refused.join("; "),
                &previous,
                now_unix(),
            )
        };
        // The disk condition is measured after the pass's image GC (`record_disk_pressure`);
        // until then the last one stands.
        let mut conditions: Vec<NodeCondition> = previous
            .iter()
            .filter(|c| c.kind == ConditionType::DiskPressure)
            .cloned()
            .collect();
        conditions.push(pressure);
        self.state.save_node(&crate::capacity::NodeStatus {
            capacity: crate::capacity::host_capacity(),
            allocatable: self.config.allocatable.clone(),
            allocated,
            capabilities: Some(caps),
            conditions,
            updated_unix: now_unix(),
        })?;
        Ok(admitted)
    }

    /// Measures the content store's file system against `image_gc_high_percent` (after the
    /// pass's image GC) and records `DiskPressure` in the node status.
    fn record_disk_pressure(&self) -> Result<(), WorkerError> {
        use crate::capacity::{ConditionStatus, ConditionType, NodeCondition};
        let Some(mut node) = self.state.load_node() else {
            return Ok(());
        };
        let high = self.config.image_gc_high_percent;
        let (status, reason, message) = match self.disk.space(self.store.dir()) {
            Ok(space) => {
                let used = space.used_percent();
                if used >= f64::from(high) {
                    (
                        ConditionStatus::True,
                        "KubeletHasDiskPressure",
                        format!(
                            "{used:.1} % of {} used after image GC, at or above image_gc_high_percent = {high}",
                            self.store.dir().display()
                        ),
                    )
                } else {
                    (
                        ConditionStatus::False,
                        "KubeletHasNoDiskPressure",
                        format!(
                            "{used:.1} % of {} used, under image_gc_high_percent = {high}",
                            self.store.dir().display()
                        ),
                    )
                }
            }
            Err(e) => (
                ConditionStatus::Unknown,
                "DiskUsageUnknown",
                format!(
                    "reading the disk usage of {} failed: {e}",
                    self.store.dir().display()
                ),
            ),
        };
        let c = NodeCondition::new(
            ConditionType::DiskPressure,
            status,
            reason,
            message,
            &node.conditions,
            now_unix(),
        );
        node.conditions
            .retain(|c| c.kind != ConditionType::DiskPressure);
        node.conditions.insert(0, c);
        self.state.save_node(&node)?;
        Ok(())
    }

    /// Zones of ours whose manifest is gone are removed once they have been orphaned for the
    /// grace period (a manifest briefly missing during an edit does not destroy a zone).
    fn remove_orphans(
        &self,
        wanted: &HashSet<String>,
        summary: &mut PassSummary,
    ) -> Result<(), WorkerError> {
        for zone in self.provisioner.zones()? {
            if wanted.contains(&zone) {
                continue;
            }
            let mut st = self.state.load(&zone).unwrap_or_default();
            st.zone = zone.clone();
            let since = *st.orphaned_since_unix.get_or_insert_with(now_unix);
            if now_unix().saturating_sub(since) >= self.config.gc_grace.as_secs() {
                match self.provisioner.remove(&zone) {
                    Ok(()) => {
                        self.state.remove(&zone)?;
                        summary.removed.push(zone);
                        continue;
                    }
                    Err(e) => st.last_error = Some(error_chain(&e)),
                }
            }
            st.updated_unix = now_unix();
            self.state.save(&st)?;
        }
        Ok(())
    }

    /// Every blob a provisioned zone was made from: the resolved digest (index or manifest),
    /// the platform manifest, its config and layers.
    fn referenced_blobs(
        &self,
        results: &HashMap<String, ZoneStatus>,
    ) -> Result<HashSet<Digest>, WorkerError> {
        let mut keep = HashSet::new();
        for zone in self.provisioner.zones()? {
            let Some(d) = self.provisioner.current(&zone)? else {
                continue;
            };
            let resolved = results
                .get(&zone)
                .cloned()
                .or_else(|| self.state.load(&zone))
                .and_then(|s| s.current_digest);
            keep.extend(resolved);
            keep.insert(d.config_digest.clone());
            let bytes = self
                .store
                .read_small(&d.manifest_digest, validator::MAX_MANIFEST_SIZE as u64)?;
            if let (_, Some(validator::Document::Manifest(m))) = validator::check_document(
                &bytes,
                Some(validator::DocumentKind::Manifest),
                None,
                "stored manifest",
            ) {
                keep.extend(m.layers.iter().map(|l| l.digest.clone()));
            } else {
                // Keep everything rather than guess.
                return Err(WorkerError::Store(StoreError::Io {
                    path: self.store.blob_path(&d.manifest_digest),
                    op: "re-reading a zone's manifest",
                    source: std::io::Error::from(std::io::ErrorKind::InvalidData),
                }));
            }
            keep.insert(d.manifest_digest);
        }
        Ok(keep)
    }

    /// One zone: resolve, pull, verify, provision. Returns the resolved digest.
    async fn reconcile(
        self: &Arc<Self>,
        spec: &ZoneSpec,
        prev: &ZoneStatus,
    ) -> Result<Reconciled, (ZoneError, Option<Digest>)> {
        let current = self
            .provisioner
            .current(&spec.name)
            .map_err(|e| (e.into(), None))?;
        if matches!(
            spec.pull_policy,
            PullPolicy::IfNotPresent | PullPolicy::Never
        ) && current.is_some()
            && let Some(d) = &prev.current_digest
        {
            return Ok((Outcome::Unchanged, d.clone(), None));
        }
        let sources = self.config.mirrors.for_pull(&spec.image);
        let desired = if spec.pull_policy == PullPolicy::Never {
            // Never: no registry is asked for the image. A digest reference, or the digest
            // this node last resolved the same reference to, must be in the content store.
            let known = spec.image.digest().cloned().or_else(|| {
                (prev.image == spec.image.to_string())
                    .then(|| prev.desired_digest.clone().or(prev.current_digest.clone()))
                    .flatten()
            });
            known.ok_or_else(|| {
                (
                    PullError::NeverResolved {
                        reference: spec.image.to_string(),
                    }
                    .into(),
                    None,
                )
            })?
        } else {
            // A reference that does not resolve is a failed pull too.
            resolve(&self.client, &sources, &spec.image)
                .await
                .map_err(|e| {
                    self.metrics.pull(false);
                    (e.into(), None)
                })?
        };
        let sources = if spec.pull_policy == PullPolicy::Never {
            sources.into_local_only()
        } else {
            sources
        };
        if current.is_some() && prev.current_digest.as_ref() == Some(&desired) {
            return Ok((Outcome::Unchanged, desired, None));
        }
        let fail = |e: ZoneError| (e, Some(desired.clone()));
        // The policy decides on the resolved digest before any layer is fetched.
        self.admit(spec, &sources, &desired)
            .await
            .map_err(|e| fail(e.into()))?;
        let root = self
            .pull_controlled(spec, &sources, &desired)
            .await
            .map_err(fail)?;
        // Checked again right before the zone changes: a signature removed (or a policy
        // reloaded) while the layers were fetched refuses the image.
        let admission = match self.admit(spec, &sources, &desired).await {
            Ok(a) => a,
            Err(e) => {
                // Dropping the unused root removes its staging tree: off the async threads.
                let _ = tokio::task::spawn_blocking(move || drop(root)).await;
                return Err(fail(e.into()));
            }
        };
        let me = Arc::clone(self);
        let spec2 = spec.clone();
        // The new root is verified and placed in staging: a replacement's downtime is the
        // provisioner's stop of the old zone through the boot of the new one.
        let replacing = current.is_some();
        let t = std::time::Instant::now();
        tokio::task::spawn_blocking(move || {
            // The operator's `[zones]` rules on what the image's label asks for; a refused
            // root is dropped (its staging removed) here, off the async threads.
            check_zone_policy(&spec2, root.image(), &me.config.zone_policy)?;
            me.provisioner.provision(&spec2, root)
        })
        .await
        .map_err(|e| fail(ZoneError::Task(e.to_string())))?
        .map_err(|e| fail(e.into()))?;
        if replacing {
            let ms = u64::try_from(t.elapsed().as_millis()).unwrap_or(u64::MAX);
            tracing::info!(zone = %spec.name, downtime_ms = ms, "zone replaced");
            self.observe(&spec.name, |o| o.replace_downtime_ms = Some(ms));
        }
        Ok((Outcome::Provisioned, desired, admission))
    }

    /// The pull under the pull controls, with the unpack overlapped: a slot of
    /// `max_parallel_pulls`, a token of the registry's bucket, progress recorded in the zone's
    /// status (every second while it runs) and in the metrics. Once the manifest and config
    /// are in, the layers download `max_concurrent_downloads` at a time while a blocking task
    /// applies them in manifest order into a staging root, each one as its bytes arrive (see
    /// the `feed` module). The slot is held until the downloads end, not for the unpack's tail.
    ///
    /// The root is returned only when every download published its blob (size and digest
    /// verified) and every DiffID matched. A download failure is the pull's error, whatever the
    /// unpack saw meanwhile. Any other failure of the overlapped unpack is checked once more
    /// by an unpack from the verified blobs, whose result stands: a layer that really breaks
    /// the image fails as it always did, and a read that raced a download that started over
    /// costs one more unpack, never a wrong root.
    async fn pull_controlled(
        self: &Arc<Self>,
        spec: &ZoneSpec,
        sources: &crate::mirrors::Sources,
        desired: &Digest,
    ) -> Result<crate::verify::VerifiedRoot, ZoneError> {
        if sources.local_only() {
            // pull_policy = "Never": every blob must be in the store already; nothing is
            // downloaded, so no slot, token or feed.
            let image = pull_documents(
                &self.client,
                &self.store,
                sources,
                desired,
                &self.host,
                None,
            )
            .await?;
            fetch_layers(&self.client, &self.store, sources, &image, None, 1, None).await?;
            let root = self
                .spawn_unpack(spec, &image, None)
                .await
                .map_err(|e| ZoneError::Task(e.to_string()))??;
            return Ok(root);
        }
        let slot = match &self.pull_slots {
            Some(s) => Some(
                s.clone()
                    .acquire_owned()
                    .await
                    .expect("the pull semaphore is never closed"),
            ),
            None => None,
        };
        self.limiter.acquire(spec.image.registry()).await;
        let progress = Arc::new(crate::throttle::PullProgress::default());
        self.metrics.pull_started(&spec.name, progress.clone());
        let me = Arc::clone(self);
        let (zone, p) = (spec.name.clone(), progress.clone());
        let ticker = AbortOnDrop(tokio::spawn(async move {
            loop {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
                let mut st = me.state.load(&zone).unwrap_or_default();
                st.zone = zone.clone();
                st.pull = Some(p.get());
                st.updated_unix = now_unix();
                if let Err(e) = me.state.save(&st) {
                    tracing::warn!(zone, error = %error_chain(&e), "recording pull progress failed");
                }
            }
        }));
        let t = std::time::Instant::now();
        let mut unpack = None;
        let pulled = async {
            let image = pull_documents(
                &self.client,
                &self.store,
                sources,
                desired,
                &self.host,
                Some(&progress),
            )
            .await?;
            let feeds = StopFeeds(
                (0..image.manifest.layers.len())
                    .map(|_| Arc::new(LayerFeed::default()))
                    .collect(),
            );
            // The ZFS layer store applies layers from the verified blobs once all are in
            // (a layer dataset is shared by every image above it: it is never fed a
            // download that could start over).
            let overlapped = self.layer_store.is_none();
            if overlapped {
                unpack = Some(self.spawn_unpack(spec, &image, Some(&feeds.0)));
            }
            fetch_layers(
                &self.client,
                &self.store,
                sources,
                &image,
                Some(&progress),
                self.config.max_concurrent_downloads,
                overlapped.then_some(&feeds.0[..]),
            )
            .await?;
            Ok::<_, PullError>(image)
        }
        .await;
        drop((ticker, slot));
        self.metrics.pull_finished(&spec.name);
        self.observe(&spec.name, |o| o.pull = Some(progress.get()));
        self.metrics.pull(pulled.is_ok());
        let took_ms = t.elapsed().as_secs_f64() * 1e3;
        tracing::info!(zone = %spec.name, %desired, took_ms, ok = pulled.is_ok(), "pull done");
        let task_err = |e: tokio::task::JoinError| ZoneError::Task(e.to_string());
        let image = match pulled {
            Ok(image) => image,
            Err(e) => {
                // The feeds are stopped: the unpack ends, removing its staging root.
                if let Some(u) = unpack {
                    let _ = u.await;
                }
                return Err(e.into());
            }
        };
        let unpack = match unpack {
            Some(u) => u,
            None => self.spawn_unpack(spec, &image, None),
        };
        match unpack.await.map_err(task_err)? {
            Ok(root) => Ok(root),
            Err(e) => {
                tracing::info!(zone = %spec.name, %desired, error = %error_chain(&e), "the unpack during the download failed; unpacking again from the verified blobs");
                Ok(self
                    .spawn_unpack(spec, &image, None)
                    .await
                    .map_err(task_err)??)
            }
        }
    }

    /// Builds a staging root for `zone` from `image` on a blocking thread: from the verified
    /// blobs in the content store, or, with `feeds`, from each layer's download as it arrives.
    fn spawn_unpack(
        self: &Arc<Self>,
        spec: &ZoneSpec,
        image: &crate::verify::PulledImage,
        feeds: Option<&[Arc<LayerFeed>]>,
    ) -> tokio::task::JoinHandle<Result<crate::verify::VerifiedRoot, ZoneError>> {
        let me = Arc::clone(self);
        let zone = spec.name.clone();
        let disk = spec.limits.disk.clone();
        let staging = self.provisioner.staging_dir().join(format!(
            "{}.{}.{}",
            zone,
            std::process::id(),
            STAGING_COUNTER.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ));
        let image = image.clone();
        let feeds = feeds.map(<[_]>::to_vec);
        tokio::task::spawn_blocking(move || {
            let (store, id, opts) = (&me.store, &me.config.worker_id, &me.unpack);
            if let Some(zd) = &me.layer_store {
                let quota = zone_quota(&zone, disk.as_deref(), &image)?;
                return Ok(zd.build_root(store, &staging, id, &image, opts, quota)?);
            }
            if disk.is_some() {
                // A plain directory cannot hold a quota; running without the one asked for
                // would hide that the zone is not limited.
                return Err(ProvisionError::Config {
                    zone: zone.clone(),
                    field: "limits.disk",
                    reason: "the directory layer store cannot limit a zone's disk; set [layer_store] kind = \"zfs\" in worker.toml, or remove limits.disk".to_owned(),
                }
                .into());
            }
            Ok(match feeds {
                None => build_root(store, &staging, id, &image, opts),
                Some(feeds) => build_root_from(&staging, id, &image, opts, |i, layer| {
                    let reader = FeedReader::new(
                        feeds[i].clone(),
                        store.blob_path(&layer.digest),
                        layer.size,
                    );
                    Ok(std::io::BufReader::with_capacity(256 * 1024, reader))
                }),
            }?)
        })
    }

    /// Image GC by disk usage (kubelet's): when the content store's file system is at least
    /// `image_gc_high_percent` full, blobs no zone uses that are older than
    /// `image_minimum_gc_age` are removed, oldest first, until usage is down to
    /// `image_gc_low_percent`. Blobs in `keep` are never removed.
    fn gc_by_disk_usage(&self, keep: &HashSet<Digest>) -> Result<(), WorkerError> {
        let space = self
            .disk
            .space(self.store.dir())
            .map_err(|source| StoreError::Io {
                path: self.store.dir().to_owned(),
                op: "reading disk usage",
                source,
            })?;
        let used = space.used_percent();
        if used < f64::from(self.config.image_gc_high_percent) {
            return Ok(());
        }
        let target_used =
            (space.total as f64 * f64::from(self.config.image_gc_low_percent) / 100.0) as u64;
        let to_free = space
            .total
            .saturating_sub(space.available)
            .saturating_sub(target_used);
        let (n, freed) =
            self.store
                .remove_oldest_unused(keep, self.config.image_minimum_gc_age, to_free)?;
        self.metrics.image_gc(freed);
        tracing::info!(
            used_percent = used,
            high = self.config.image_gc_high_percent,
            low = self.config.image_gc_low_percent,
            wanted = to_free,
            removed = n,
            freed,
            "image garbage collection by disk usage"
        );
        Ok(())
    }

    /// Layer GC on the ZFS layer store, under image GC's thresholds: when the file system of
    /// the zones (the pool) is at least `image_gc_high_percent` full, every layer chain that
    /// no zone's image uses and no clone holds is destroyed ([`crate::zfs::ZfsLayerStore::collect`],
    /// top layers first). A layer a zone's clone still depends on stays until that zone is
    /// gone (ZFS's deferred destroy, without leaving marked snapshots behind).
    fn gc_layers(&self) -> Result<(), WorkerError> {
        let Some(zd) = &self.layer_store else {
            return Ok(());
        };
        let space = self
            .disk
            .space(zd.base())
            .map_err(|source| StoreError::Io {
                path: zd.base().to_owned(),
                op: "reading disk usage",
                source,
            })?;
        let used = space.used_percent();
        if used < f64::from(self.config.image_gc_high_percent) {
            return Ok(());
        }
        let mut keep = HashSet::new();
        for zone in self.provisioner.zones()? {
            if let Some(d) = self.provisioner.current(&zone)?
                && let Some(chain) = d.chain_id
            {
                keep.insert(chain);
            }
        }
        let c = zd.layers().collect(&keep)?;
        tracing::info!(
            used_percent = used,
            high = self.config.image_gc_high_percent,
            destroyed = c.destroyed.len(),
            held = c.held.len(),
            foreign = c.foreign.len(),
            "layer garbage collection on the ZFS layer store"
        );
        for ds in &c.foreign {
            tracing::warn!(dataset = %ds, "a dataset under the layer store is not the store's; left alone");
        }
        Ok(())
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

/// Stops the layer feeds when the downloads are over (or dropped): an unpack waiting for bytes
/// that will not come ends instead of waiting forever. A published feed stays published.
struct StopFeeds(Vec<Arc<LayerFeed>>);

impl Drop for StopFeeds {
    fn drop(&mut self) {
        for f in &self.0 {
            f.stop();
        }
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

/// One row of `rdctl worker status`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct StatusRow {
    /// The recorded status (Pending with no record).
    #[serde(flatten)]
    pub status: ZoneStatus,
    /// False when the zone has a record but no manifest any more.
    pub in_manifests: bool,
}

/// What `rdctl worker status` shows: the node (as the worker last wrote it) and every zone.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StatusReport {
    /// Capacity, allocatable and allocated resources and the provisioner's capabilities;
    /// `None` before the first pass.
    pub node: Option<crate::capacity::NodeStatus>,
    /// One row per zone.
    pub zones: Vec<StatusRow>,
}

/// `rdctl worker status`: the node's resources and every zone's desired and current digest,
/// phase and last error, from the manifests directory and the state records (reads only;
/// works while a worker runs).
pub fn status_report(config_path: &std::path::Path) -> Result<StatusReport, WorkerError> {
    let config = WorkerConfig::load(config_path)?;
    let node = StateDir::read_only(&config.state_dir).load_node();
    Ok(StatusReport {
        node,
        zones: status(config_path)?,
    })
}

/// Every zone's desired and current digest, phase and last error, from the manifests directory
/// and the state records (reads only; works while a worker runs).
pub fn status(config_path: &std::path::Path) -> Result<Vec<StatusRow>, WorkerError> {
    let config = WorkerConfig::load(config_path)?;
    let state = StateDir::read_only(&config.state_dir);
    let (specs, invalid) = load_zones(&config.zones_dir)?;
    let mut records: HashMap<String, ZoneStatus> = state
        .all()
        .into_iter()
        .map(|s| (s.zone.clone(), s))
        .collect();
    let mut rows = Vec::new();
    for spec in &specs {
        let status = records.remove(&spec.name).unwrap_or_else(|| ZoneStatus {
            zone: spec.name.clone(),
            image: spec.image.to_string(),
            ..ZoneStatus::default()
        });
        rows.push(StatusRow {
            status,
            in_manifests: true,
        });
    }
    for bad in invalid {
        let mut status = records.remove(&bad.zone).unwrap_or_default();
        status.zone = bad.zone.clone();
        status.phase = Phase::Invalid;
        status.last_error = Some(error_chain(&bad.error));
        rows.push(StatusRow {
            status,
            in_manifests: true,
        });
    }
    for (_, status) in records {
        rows.push(StatusRow {
            status,
            in_manifests: false,
        });
    }
    rows.sort_by(|a, b| a.status.zone.cmp(&b.status.zone));
    Ok(rows)
}
