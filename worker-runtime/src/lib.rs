//! The worker behind `rdctl worker run` and `rdctl worker status`.
//!
//! On a schedule it resolves each zone's image reference, pulls and verifies every blob
//! digest and every layer DiffID, unpacks safely into a staging root, and only then hands the
//! verified root to a provisioner. Main types, in the order a pass uses them:
//!
//! - [`WorkerConfig`] (`worker.toml`) and [`ZoneSpec`] (one TOML file per zone).
//! - [`Worker`]: level-triggered passes ([`Worker::pass`]); zones run concurrently and fail
//!   independently, with per-zone exponential backoff; [`run`] and [`status`] are the entry
//!   points of the two `rdctl` commands.
//! - [`ContentStore`]: content-addressed blobs shared by all zones; a blob becomes visible
//!   only after its size and digest verified (temporary file, then rename).
//! - [`pull()`]: reference → manifest (from an index by platform and `os.version`) → config →
//!   layers, through `registry_client`; [`Mirrors`] (`[[mirrors]]` in worker.toml) are tried
//!   in order before the origin, every byte verified whichever registry served it.
//! - [`build_root`] and [`VerifiedRoot`]: layers applied with [`apply_layer`] (in-root path
//!   resolution, whiteouts, limits) into staging, every DiffID compared; `VerifiedRoot` has no
//!   public constructor.
//! - [`Provisioner`]: [`DirProvisioner`] and [`IllumosProvisioner`] (zonecfg/zoneadm through
//!   a [`CommandRunner`]); the command and SMF text lives in [`provision::illumos`].
//! - The admission policy ([`check_admission`], `policy` in worker.toml, `trust::Policy`):
//!   checked on the resolved digest before any layer is fetched and again right before the
//!   zone changes; a refusal ([`Denial`], phase `Denied`) leaves a running zone on its
//!   admitted image, and [`Admission`] records what admitted it.
//! - Capacity ([`capacity`]): the node's capacity, `[allocatable]` in worker.toml and what
//!   admitted zones hold; a zone that asks for more is `Unschedulable`.
//! - Pull controls ([`throttle`]): `max_parallel_pulls`, per-registry QPS and burst, the
//!   progress deadline, pull progress, and image GC by disk usage.
//! - The ZFS layer store ([`zfs`]): a dataset per ChainID, a zone root as a clone of the
//!   image's top snapshot ([`ZfsLayerStore`]).
//! - Ownership marks ([`owner`]) on every directory the worker creates, checked before any
//!   change or deletion.
//!
//! **Invariants:** no zone is created unless every digest and DiffID was checked; unpack never
//! writes outside the root; the worker never changes or removes a directory without its mark.
//! It depends on `validator`, `trust` and `registry-client` among workspace crates.
#![deny(missing_docs)]

mod admission;
pub mod capacity;
mod config;
mod feed;
pub mod metrics;
mod mirrors;
pub mod owner;
mod packages;
pub mod provision;
mod pull;
mod pull_log;
mod readahead;
mod schedule;
mod state;
mod store;
pub mod throttle;
mod unpack;
mod verify;
pub mod volume;
pub mod zfs;
mod zone;
mod zone_policy;

pub use admission::{Admission, AdmissionError, Denial, check as check_admission};
pub use capacity::{
    Allocated, ConditionStatus, ConditionType, NodeCondition, NodeStatus, Resources,
};
pub use config::{
    ConfigError, IpRange, LayerStoreConfig, ProbeCheck, ProvisionerConfig, PullPolicy,
    ReadinessProbe, Reclaim, ResourceLimits, Rollout, VolumeSpec, WorkerConfig, ZoneLoadError,
    ZonePolicy, ZoneSpec, load_zone, load_zones, valid_name,
};
pub use mirrors::{
    Mirror, MirrorEndpoint, Mirrors, Source as MirrorSource, Sources as PullSources,
};
pub use packages::{ZonePackages, zone_packages};
pub use provision::{
    Capabilities, CommandRunner, DirProvisioner, IllumosProvisioner, ProvisionError, Provisioner,
    StepHook, SystemRunner, ZoneDescription,
};
pub use pull::{HostPlatform, PullError, pull, resolve};
pub use pull_log::{LOG_INTERVAL, LoggedProgress};
pub use schedule::{
    PassSummary, RollbackError, StatusReport, StatusRow, Worker, WorkerError, ZoneError,
    request_rollback, run, status, status_report,
};
pub use state::{Phase, RolledBack, StateDir, StateError, ZoneStatus};
pub use store::{ContentStore, FetchStats, StoreError};
pub use throttle::{DiskSpace, DiskUsage, PullBytes, Statvfs};
pub use unpack::{
    CopiedTree, LayerStats, RootDir, UnpackError, UnpackOptions, apply_layer, apply_stream,
};
pub use verify::{PulledImage, RootError, VerifiedImage, VerifiedRoot, build_root};
pub use zfs::{PreparedImage, ZfsLayerStore, ZfsStoreError, ZoneDatasets};
