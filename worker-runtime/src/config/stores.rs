//! Where zones go: `[provisioner]` (which provisioner makes them, and the base directory of
//! their zonepaths) and `[layer_store]` (whether a zone root is a full copy in a directory or a
//! clone on the ZFS layer store). Both decide how a zone exists on disk, so they are checked
//! together here.

use std::path::{Path, PathBuf};

use serde::Deserialize;

use super::Invalid;

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

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileLayerStore {
    kind: String,
    dataset: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileProvisioner {
    kind: String,
    base: PathBuf,
}

/// `[provisioner]` checked; `abs` makes its base absolute (relative to worker.toml).
pub(super) fn provisioner(
    f: FileProvisioner,
    abs: impl Fn(PathBuf) -> PathBuf,
) -> Result<ProvisionerConfig, Invalid> {
    let base = abs(f.base);
    match f.kind.as_str() {
        "dir" => Ok(ProvisionerConfig::Dir { base }),
        "illumos" => Ok(ProvisionerConfig::Illumos { base }),
        other => Err((
            "provisioner.kind",
            format!("{other:?} is neither \"dir\" nor \"illumos\""),
        )),
    }
}

/// `[layer_store]` checked: the kind, and a dataset name for (only) the zfs store.
pub(super) fn layer_store(f: Option<FileLayerStore>) -> Result<LayerStoreConfig, Invalid> {
    let Some(ls) = f else {
        return Ok(LayerStoreConfig::Directory);
    };
    match (ls.kind.as_str(), ls.dataset) {
        ("directory", None) => Ok(LayerStoreConfig::Directory),
        ("directory", Some(_)) => Err(("layer_store.dataset", "is only for kind = \"zfs\"".into())),
        ("zfs", Some(dataset)) => {
            crate::zfs::DatasetName::parse(&dataset)
                .map_err(|e| ("layer_store.dataset", e.to_string()))?;
            Ok(LayerStoreConfig::Zfs { dataset })
        }
        ("zfs", None) => Err((
            "layer_store.dataset",
            "missing; kind = \"zfs\" needs the parent dataset (e.g. \"rpool/rdctl\")".into(),
        )),
        (other, _) => Err((
            "layer_store.kind",
            format!("{other:?} is neither \"directory\" nor \"zfs\""),
        )),
    }
}
