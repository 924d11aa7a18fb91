//! The DiffID gate: from verified blobs to a [`VerifiedRoot`].
//!
//! [`build_root`] applies every layer of an image, in order, into a fresh staging directory,
//! hashing each uncompressed stream and comparing it with the config's `diff_ids` entry. Only
//! when every layer matched does it return a [`VerifiedRoot`]; on any failure it removes the
//! staging directory. [`VerifiedRoot`] has no public constructor, and provisioners accept
//! nothing else, so no zone can be made from content that did not verify.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

use validator::{Descriptor, Digest, ImageConfig, Manifest, chain_ids};

use crate::owner::{self, OwnerMark};
use crate::store::ContentStore;
use crate::unpack::{LayerStats, RootDir, UnpackError, UnpackOptions, apply_layer};

/// Building a root failed; the staging directory is gone.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RootError {
    /// A layer's media type names no applicable tar compression.
    #[error("layer {index} ({digest}): media type {media_type} cannot be applied")]
    MediaType {
        /// Position in the manifest.
        index: usize,
        /// The layer.
        digest: Digest,
        /// Its media type.
        media_type: String,
    },
    /// The config's `diff_ids` do not pair with the layers.
    #[error("the config has {diff_ids} diff_ids for {layers} layers")]
    DiffIdCount {
        /// Entries in `rootfs.diff_ids`.
        diff_ids: usize,
        /// Layers in the manifest.
        layers: usize,
    },
    /// The stored blob is missing or has the wrong size.
    #[error("layer {index} ({digest}): stored blob is missing or not {size} bytes")]
    Blob {
        /// Position in the manifest.
        index: usize,
        /// The layer.
        digest: Digest,
        /// Its declared size.
        size: u64,
    },
    /// Applying the layer failed (including a DiffID mismatch).
    #[error("layer {index} ({digest})")]
    Layer {
        /// Position in the manifest.
        index: usize,
        /// The layer.
        digest: Digest,
        /// The cause.
        #[source]
        source: UnpackError,
    },
    /// The staging directory could not be made or marked.
    #[error("staging directory {path}")]
    Staging {
        /// The directory.
        path: PathBuf,
        /// The cause.
        #[source]
        source: owner::OwnershipError,
    },
}

impl RootError {
    /// The blob this error is about, if any.
    pub fn blob(&self) -> Option<&Digest> {
        match self {
            RootError::MediaType { digest, .. }
            | RootError::Blob { digest, .. }
            | RootError::Layer { digest, .. } => Some(digest),
            _ => None,
        }
    }
}

/// An image whose manifest, config and layer blobs are in the content store, verified by
/// digest and size (the pull step makes these).
#[derive(Debug, Clone)]
pub struct PulledImage {
    /// The image manifest's digest.
    pub manifest_digest: Digest,
    /// The checked manifest.
    pub manifest: Manifest,
    /// The config's digest.
    pub config_digest: Digest,
    /// The checked config.
    pub config: ImageConfig,
}

/// What was verified about the image a root was built from.
#[derive(Debug, Clone)]
pub struct VerifiedImage {
    /// The image manifest's digest.
    pub manifest: Digest,
    /// The config's digest.
    pub config_digest: Digest,
    /// The checked config.
    pub config: ImageConfig,
    /// The ChainID of all layers (names "these layers in this order").
    pub chain_id: Option<Digest>,
    /// Per-layer results.
    pub layers: Vec<LayerStats>,
}

/// A directory tree whose every layer digest and DiffID verified. Only [`build_root`] (a
/// directory tree) and the ZFS layer store (a clone of the image's verified top snapshot,
/// `ZoneDatasets::build_root`) make one. Dropping it removes the tree (destroys the clone), so
/// a root that no provisioner took leaves nothing behind.
#[derive(Debug)]
pub struct VerifiedRoot {
    /// The staging directory holding `root/` and the ownership mark.
    staging: PathBuf,
    image: VerifiedImage,
    mark: OwnerMark,
    taken: bool,
    /// How an unused root is removed when it is not a plain directory (a ZFS clone).
    remover: Option<Remover>,
}

/// How an unused root that is not a plain directory is removed; the error is logged.
pub(crate) type RemoveFn = dyn Fn() -> Result<(), String> + Send + Sync;

/// Removes an unused root that is a ZFS dataset (checking its marks).
pub(crate) struct Remover(pub(crate) Box<RemoveFn>);

impl std::fmt::Debug for Remover {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Remover")
    }
}

impl VerifiedRoot {
    /// The staging directory (it holds the mark and `root/`).
    pub fn staging_dir(&self) -> &Path {
        &self.staging
    }

    /// The root file system.
    pub fn root(&self) -> PathBuf {
        self.staging.join("root")
    }

    /// What was verified.
    pub fn image(&self) -> &VerifiedImage {
        &self.image
    }

    /// A root whose staging directory is a dataset clone made by the ZFS layer store from
    /// verified layers; `remover` destroys it when no provisioner takes it.
    pub(crate) fn on_dataset(
        staging: PathBuf,
        image: VerifiedImage,
        mark: OwnerMark,
        remover: Remover,
    ) -> VerifiedRoot {
        VerifiedRoot {
            staging,
            image,
            mark,
            taken: false,
            remover: Some(remover),
        }
    }

    /// Hands the staging directory to a provisioner, which now owns it (it must move or remove
    /// it).
    pub fn into_staging(mut self) -> (PathBuf, VerifiedImage) {
        self.taken = true;
        (std::mem::take(&mut self.staging), self.image.clone())
    }
}

impl Drop for VerifiedRoot {
    fn drop(&mut self) {
        if self.taken {
            return;
        }
        let removed = match &self.remover {
            Some(r) => (r.0)(),
            None => owner::remove_owned(&self.staging, &self.mark).map_err(|e| e.to_string()),
        };
        if let Err(e) = removed {
            tracing::warn!(dir = %self.staging.display(), error = %e, "removing an unused verified root failed");
        }
    }
}

/// Applies the image's layers from `store` into `staging` (which must not exist), checking
/// every DiffID, and returns the verified root. On failure `staging` is removed.
pub fn build_root(
    store: &ContentStore,
    staging: &Path,
    worker_id: &str,
    image: &PulledImage,
    opts: &UnpackOptions,
) -> Result<VerifiedRoot, RootError> {
    build_root_from(staging, worker_id, image, opts, |index, layer| {
        let blob_err = || RootError::Blob {
            index,
            digest: layer.digest.clone(),
            size: layer.size,
        };
        if !store.contains(&layer.digest, layer.size) {
            return Err(blob_err());
        }
        let file = std::fs::File::open(store.blob_path(&layer.digest)).map_err(|_| blob_err())?;
        Ok(BufReader::with_capacity(256 * 1024, file))
    })
}

/// [`build_root`] with the layer blobs read from what `open` gives for each (layer index,
/// descriptor), in manifest order. The caller vouches that those bytes are the verified
/// blobs (the overlapped pull accepts the root only once every layer's download published
/// the blob).
pub(crate) fn build_root_from<B: BufRead + Send>(
    staging: &Path,
    worker_id: &str,
    image: &PulledImage,
    opts: &UnpackOptions,
    mut open: impl FnMut(usize, &Descriptor) -> Result<B, RootError>,
) -> Result<VerifiedRoot, RootError> {
    let PulledImage {
        manifest_digest,
        manifest,
        config_digest,
        config,
    } = image;
    if config.diff_ids.len() != manifest.layers.len() {
        return Err(RootError::DiffIdCount {
            diff_ids: config.diff_ids.len(),
            layers: manifest.layers.len(),
        });
    }
    let mark = OwnerMark::new(worker_id, "staging");
    let staging_err = |source| RootError::Staging {
        path: staging.to_owned(),
        source,
    };
    owner::claim(staging, &mark).map_err(staging_err)?;
    let root_path = staging.join("root");
    let mut root = VerifiedRoot {
        staging: staging.to_owned(),
        image: VerifiedImage {
            manifest: manifest_digest.clone(),
            config_digest: config_digest.clone(),
            config: config.clone(),
            chain_id: chain_ids(&config.diff_ids).pop(),
            layers: Vec::new(),
        },
        mark,
        taken: false,
        remover: None,
    };
    // From here on, dropping `root` on an error removes the staging directory.
    std::fs::create_dir(&root_path).map_err(|e| {
        staging_err(owner::OwnershipError::Io {
            path: root_path.clone(),
            op: "creating the root",
            source: e,
        })
    })?;
    let dir = RootDir::open(&root_path).map_err(|e| {
        staging_err(owner::OwnershipError::Io {
            path: root_path.clone(),
            op: "opening the root",
            source: e,
        })
    })?;
    for (index, (layer, diff_id)) in manifest.layers.iter().zip(&config.diff_ids).enumerate() {
        let Some(compression) = layer.media_type.layer_compression() else {
            return Err(RootError::MediaType {
                index,
                digest: layer.digest.clone(),
                media_type: layer.media_type.to_string(),
            });
        };
        let blob = open(index, layer)?;
        let stats = apply_layer(&dir, blob, compression, diff_id, opts).map_err(|source| {
            RootError::Layer {
                index,
                digest: layer.digest.clone(),
                source,
            }
        })?;
        root.image.layers.push(stats);
    }
    Ok(root)
}
