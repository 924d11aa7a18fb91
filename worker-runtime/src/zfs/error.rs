//! Errors of the ZFS layer store ([`super::ZfsLayerStore`]).

use std::path::PathBuf;

use validator::Digest;

use super::command::{DatasetName, DatasetNameError, ZfsError};
use crate::verify::RootError;

/// A ZFS layer store operation failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZfsStoreError {
    /// A `zfs` command failed.
    #[error("zfs layer store")]
    Zfs(#[from] ZfsError),
    /// A dataset name (from the configuration, a zone name or a ChainID) is unusable.
    #[error("zfs layer store")]
    Name(#[from] DatasetNameError),
    /// The dataset exists without our marks.
    #[error(
        "dataset {dataset} exists without rdctl's ownership mark ({property} is not set on it); refusing to touch it"
    )]
    Unmarked {
        /// The dataset.
        dataset: DatasetName,
        /// The mark that is missing.
        property: &'static str,
    },
    /// The dataset's marks name another worker, kind, layer or zone.
    #[error("dataset {dataset}: {property} is {found:?}, not {wanted:?}; refusing to touch it")]
    Foreign {
        /// The dataset.
        dataset: DatasetName,
        /// The mark that differs.
        property: &'static str,
        /// Its value.
        found: String,
        /// What this store expected.
        wanted: String,
    },
    /// The parent dataset has no marks and already holds datasets.
    #[error(
        "dataset {dataset} holds {child}, which rdctl did not create; refusing to claim it (give the store an empty dataset of its own)"
    )]
    ParentInUse {
        /// The configured parent.
        dataset: DatasetName,
        /// A dataset under it.
        child: String,
    },
    /// The configured parent dataset does not exist.
    #[error("dataset {dataset} does not exist (create it with `zfs create {dataset}`)")]
    NoParent {
        /// The configured parent.
        dataset: DatasetName,
    },
    /// A dataset the store needs to write into is not mounted.
    #[error("dataset {dataset} is not mounted (mountpoint {mountpoint:?})")]
    NotMounted {
        /// The dataset.
        dataset: DatasetName,
        /// Its mountpoint property.
        mountpoint: String,
    },
    /// A file operation in a dataset failed.
    #[error("dataset {dataset}: {op} ({path}) failed")]
    Io {
        /// The dataset.
        dataset: DatasetName,
        /// The operation.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A layer could not be applied or did not verify; its dataset is gone.
    #[error("image {manifest}")]
    Layer {
        /// The image manifest.
        manifest: Digest,
        /// The cause (a DiffID mismatch is [`RootError::Layer`] with
        /// `UnpackError::DiffId`).
        #[source]
        source: Box<RootError>,
    },
    /// The image has no layers to clone a root from.
    #[error("image {manifest} has no layers; a zone root needs at least one")]
    NoLayers {
        /// The image manifest.
        manifest: Digest,
    },
    /// The dataset has a snapshot the store did not make (an operator's backup, `zfs snapshot
    /// -r <parent>@backup`): destroying the dataset would destroy it too, so the dataset is
    /// left as it is until the snapshot is gone.
    #[error(
        "dataset {dataset} has snapshot {snapshot}, which rdctl did not make; refusing to destroy the dataset with it (destroy the snapshot to let the worker remove the dataset)"
    )]
    ForeignSnapshot {
        /// The dataset.
        dataset: DatasetName,
        /// The first snapshot not made by the store.
        snapshot: String,
    },
    /// A layer carries the store's marks, but its `@layer` snapshot is not the one this
    /// worker verified and recorded (another `guid` or `createtxg`, recorded for another
    /// DiffID, or, without a record, content that differs from the layer applied again):
    /// marks are user properties anyone with `zfs set` can copy, a snapshot's identity is not.
    /// The dataset is left as it is for the operator to look at.
    #[error(
        "layer dataset {dataset}: {snapshot} is not the snapshot this worker verified ({reason}; record {record}); refusing to use it"
    )]
    Untrusted {
        /// The layer's dataset.
        dataset: DatasetName,
        /// Its `@layer` snapshot.
        snapshot: String,
        /// What differs.
        reason: String,
        /// The record file.
        record: PathBuf,
    },
    /// A layer's verification record could not be written or read.
    #[error("layer record {path}: {op} failed")]
    Record {
        /// The record file.
        path: PathBuf,
        /// The operation.
        op: &'static str,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The zone's dataset already exists (remove the zone first).
    #[error("zone {zone}: dataset {dataset} already exists")]
    ZoneExists {
        /// The zone.
        zone: String,
        /// Its dataset.
        dataset: DatasetName,
    },
}
