//! ZFS for the worker: the `zfs` command runner ([`Zfs`]) and the layer store on datasets and
//! snapshots ([`ZfsLayerStore`]), containerd's zfs snapshotter model for illumos zones, and
//! zonepaths as clones of an image's top snapshot under a provisioner's base
//! ([`ZoneDatasets`], what `[layer_store] kind = "zfs"` wires into the worker).

mod command;
mod error;
mod records;
mod store;
mod volumes;
mod zones;

pub use command::{DatasetName, DatasetNameError, Property, Zfs, ZfsError};
pub use error::ZfsStoreError;
pub use store::{
    Collected, LAYER_SNAPSHOT, LayerOutcome, PROP_CHAIN_ID, PROP_KIND, PROP_OWNER, PROP_STATE,
    PROP_WORKER, PROP_ZONE, PreparedImage, ZfsLayerStore, ZoneDataset,
};
pub use zones::{QUOTA_ANNOTATION, ZoneDatasets};
