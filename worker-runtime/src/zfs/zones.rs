//! Zonepaths as ZFS datasets: what `[layer_store] kind = "zfs"` gives the `dir` and `illumos`
//! provisioners.
//!
//! ```text
//! <parent>/zones           kind = zones,       mountpoint = <base> (the provisioner's base,
//!                                              with its mark, .staging/ and .trash/)
//! <parent>/layers          kind = layers,      mountpoint = <base>/.layers when the parent's
//!                                              is none or legacy (else inherited)
//! <parent>/roots           kind = zone-roots,  mountpoint = none
//! <parent>/roots/<name>    kind = zonepath, chainid = <image ChainID>, zone = <zone> once placed;
//!                          a clone of the image's top @layer, mounted where it stands:
//!                          <base>/.staging/<n>, then <base>/<zone>, then <base>/.trash/<n>
//! ```
//!
//! A staging root is a `zfs clone` of the image's verified top snapshot (made by
//! [`ZfsLayerStore::prepare`], so every layer's digest and DiffID was checked), with the zone's
//! quota, mounted in `.staging`. The provisioner keeps its layout and its steps; a dataset is
//! never renamed (zfs-fuse cannot rename a dataset that was ever mounted), it is *moved* by one
//! change of its `mountpoint` property: placing a zone mounts its clone at `<base>/<zone>`,
//! moving it aside mounts it in `.trash`, removing it is `zfs destroy` after its marks were
//! checked. A dataset is found by where it is mounted, among the store's `roots` only; one that
//! is not the store's (no local marks, or another worker's) is never moved or destroyed, and a
//! path that is a plain directory is the provisioner's business as before.

use std::path::{Path, PathBuf};

use super::command::DatasetName;
use super::error::ZfsStoreError;
use super::store::{Found, PROP_CHAIN_ID, PROP_ZONE, ZfsLayerStore};
use crate::owner::{MARK_FILE, OwnerMark, write_atomic};
use crate::store::ContentStore;
use crate::unpack::UnpackOptions;
use crate::verify::{PulledImage, Remover, VerifiedImage, VerifiedRoot};

/// The image manifest annotation that sets a zone's dataset quota (`10G`, `512m`, or bytes).
pub const QUOTA_ANNOTATION: &str = "org.reddwarf.zone.quota";

/// The `org.reddwarf:kind` of a zonepath dataset (staging, placed or in the trash).
const ZONEPATH: &str = "zonepath";

/// Zonepath datasets under a provisioner's base directory (see the module docs).
#[derive(Debug, Clone)]
pub struct ZoneDatasets {
    store: ZfsLayerStore,
    base: PathBuf,
    roots: DatasetName,
}

static NAMES: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

impl ZoneDatasets {
    /// Mounts the store's `zones` dataset at `base` (which must not exist or be empty), marks
    /// it as worker's zone base, creates `roots`, and mounts any zonepath of the store's that
    /// a crash left unmounted.
    pub fn open(store: ZfsLayerStore, base: &Path) -> Result<ZoneDatasets, ZfsStoreError> {
        let z = ZoneDatasets {
            roots: store.parent().child("roots")?,
            base: base.to_owned(),
            store,
        };
        let zones = z.store.zones.clone();
        let mp = base.to_string_lossy().into_owned();
        match z.store.check(&zones, "zones", &[])? {
            Found::Missing => unreachable!("ZfsLayerStore::open creates it"),
            Found::Ours(_) => z.mount_at(&zones, &mp)?,
        }
        // The base directory is the zones dataset's root; the provisioner's mark goes in.
        let mark = OwnerMark::new(z.store.worker_id(), "zone-base");
        crate::owner::claim(base, &mark).map_err(|e| ZfsStoreError::Io {
            dataset: zones.clone(),
            op: "marking the zones' base directory",
            path: base.to_owned(),
            source: std::io::Error::other(e),
        })?;
        // The layer datasets inherit their mountpoint from `layers`, which inherits the
        // parent's. Under a parent made with `mountpoint=none` (or `legacy`) no layer would be
        // mounted to be applied into, so `layers` then gets a mountpoint of its own: `.layers`
        // in the base, beside `.staging` and `.trash` (the provisioner skips dot names). A
        // mountpoint the parent gives stays as it is: layers already mounted are not moved.
        let layers = z.store.layers.clone();
        let at = z
            .store
            .zfs
            .get(layers.as_str(), &["mountpoint"])?
            .and_then(|p| p.into_iter().next())
            .map(|p| p.value)
            .unwrap_or_default();
        if !at.starts_with('/') {
            z.mount_at(&layers, &base.join(".layers").to_string_lossy())?;
        }
        if let Found::Missing = z.store.check(&z.roots, "zone-roots", &[])? {
            let mut args = vec!["create".to_owned()];
            args.extend(z.store.mark_args("zone-roots", &[]));
            args.extend(["-o".to_owned(), "mountpoint=none".to_owned()]);
            args.push(z.roots.to_string());
            z.store.zfs.run(args)?;
        }
        // Every zone dataset's marks and mount state in one `zfs get`: one of ours that a
        // crash left unmounted is mounted again. A dataset in `roots` that is not ours is left
        // as it is and does not stop the start: the zone whose zonepath it is mounted on (if
        // any) is refused when it is reconciled, naming it, and every other zone runs on.
        for (ds, at, verdict) in z.store.check_children(&z.roots, ZONEPATH)? {
            match verdict {
                Ok(mounted) => {
                    if at.starts_with('/') && !mounted {
                        z.store.zfs.run_while_busy(&["mount", ds.as_str()])?;
                    }
                }
                Err(e) => {
                    tracing::warn!(dataset = %ds, mountpoint = %at, error = %e, "a dataset among the zone datasets is not the store's; left alone")
                }
            }
        }
        Ok(z)
    }

    /// Sets `ds`'s mountpoint to `mp` (unmounting it first, a remount by `zfs set` can find
    /// the old place busy) and mounts it.
    pub(super) fn mount_at(&self, ds: &DatasetName, mp: &str) -> Result<(), ZfsStoreError> {
        let now = self
            .store
            .zfs
            .get(ds.as_str(), &["mountpoint", "mounted"])?
            .unwrap_or_default();
        let (at, mounted) = match now.as_slice() {
            [at, mounted] => (at.value.as_str(), mounted.value == "yes"),
            _ => ("", false),
        };
        if at != mp {
            if mounted {
                self.store.zfs.run_while_busy(&["umount", ds.as_str()])?;
            }
            let set = format!("mountpoint={mp}");
            self.store.zfs.run_while_busy(&["set", &set, ds.as_str()])?;
        }
        if self.store.mountpoint(ds).is_err() {
            self.store.zfs.run_while_busy(&["mount", ds.as_str()])?;
        }
        Ok(())
    }

    /// The provisioner's base directory (the `zones` dataset's mountpoint).
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// The layer store.
    pub fn layers(&self) -> &ZfsLayerStore {
        &self.store
    }

    /// Every dataset in `roots` with its `mountpoint` property.
    fn roots(&self) -> Result<Vec<(DatasetName, String)>, ZfsStoreError> {
        let out = self.store.zfs.run([
            "list",
            "-H",
            "-o",
            "name,mountpoint",
            "-t",
            "filesystem",
            "-r",
            "-d",
            "1",
            self.roots.as_str(),
        ])?;
        let mut v = Vec::new();
        for line in out.lines() {
            if let Some((name, at)) = line.split_once('\t')
                && name != self.roots.as_str()
            {
                v.push((DatasetName::parse(name)?, at.to_owned()));
            }
        }
        Ok(v)
    }

    /// The store's dataset whose mountpoint is `path`, if there is one. A dataset there
    /// without the store's marks (or with another worker's) is an error: it is never moved
    /// or destroyed.
    pub fn dataset_at(&self, path: &Path) -> Result<Option<DatasetName>, ZfsStoreError> {
        let Some(path) = path.to_str() else {
            return Ok(None);
        };
        for (ds, at) in self.roots()? {
            if at == path {
                return match self.store.check(&ds, ZONEPATH, &[])? {
                    Found::Missing => Ok(None),
                    Found::Ours(_) => Ok(Some(ds)),
                };
            }
        }
        Ok(None)
    }

    /// Moves the store's dataset mounted at `from` to `to` (one change of its mountpoint);
    /// `false` (nothing done) when `from` is not a dataset of the store's.
    pub fn rename(&self, from: &Path, to: &Path) -> Result<bool, ZfsStoreError> {
        let Some(ds) = self.dataset_at(from)? else {
            return Ok(false);
        };
        self.mount_at(&ds, &to.to_string_lossy())?;
        // Placed as a zone: name it (informational; ownership is the marks and the place).
        if to.parent() == Some(&self.base)
            && let Some(zone) = to.file_name().and_then(|n| n.to_str())
        {
            let set = format!("{PROP_ZONE}={zone}");
            self.store.zfs.run(["set", &set, ds.as_str()])?;
        }
        // The old mountpoint stays as an empty directory; it is nobody's.
        let _ = std::fs::remove_dir(from);
        Ok(true)
    }

    /// Destroys the store's dataset mounted at `path` (its marks checked); `false` when
    /// `path` is not one. A snapshot on it that the store did not make refuses the destroy
    /// ([`ZfsStoreError::ForeignSnapshot`]); the dataset stays where it is.
    pub fn destroy(&self, path: &Path) -> Result<bool, ZfsStoreError> {
        let Some(ds) = self.dataset_at(path)? else {
            return Ok(false);
        };
        self.store.destroy_ours(&ds, &[])?;
        let _ = std::fs::remove_dir(path);
        Ok(true)
    }

    /// Makes every layer of `image` a verified snapshot ([`ZfsLayerStore::prepare`]) and
    /// clones the top one mounted at `staging` (a path in `<base>/.staging`, which must not
    /// exist), with `quota` bytes when given and the ownership mark `worker_id`/`staging` in
    /// it.
    pub fn build_root(
        &self,
        content: &ContentStore,
        staging: &Path,
        worker_id: &str,
        image: &PulledImage,
        opts: &UnpackOptions,
        quota: Option<u64>,
    ) -> Result<VerifiedRoot, ZfsStoreError> {
        let outside = |op| ZfsStoreError::Io {
            dataset: self.roots.clone(),
            op,
            path: staging.to_owned(),
            source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
        };
        if staging.parent() != Some(&self.base.join(".staging")) {
            return Err(outside("cloning a staging root outside <base>/.staging"));
        }
        let leaf = staging
            .file_name()
            .and_then(|n| n.to_str())
            .ok_or_else(|| outside("naming a staging root"))?;
        let prepared = self.store.prepare(content, image, opts)?;
        // Unique across restarts too (a staging name repeats when a pid does).
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos());
        let n = NAMES.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let ds = self.roots.child(&format!("{leaf}.{nanos:x}.{n}"))?;
        // `org.reddwarf:zone` is set when the clone is placed as a zone.
        let extra = [(PROP_CHAIN_ID, prepared.chain_id().to_string())];
        let mut args = vec!["clone".to_owned()];
        args.extend(self.store.mark_args(ZONEPATH, &extra));
        args.extend([
            "-o".to_owned(),
            format!("mountpoint={}", staging.to_string_lossy()),
        ]);
        if let Some(q) = quota {
            args.extend(["-o".to_owned(), format!("quota={q}")]);
        }
        args.extend([prepared.top_snapshot(), ds.to_string()]);
        self.store.zfs.run(args)?;
        let remover = {
            let (store, ds, path) = (self.store.clone(), ds.clone(), staging.to_owned());
            Remover(Box::new(move || {
                store.destroy_ours(&ds, &[]).map_err(|e| e.to_string())?;
                let _ = std::fs::remove_dir(&path);
                Ok(())
            }))
        };
        let mark = OwnerMark::new(worker_id, "staging");
        let image = VerifiedImage {
            manifest: image.manifest_digest.clone(),
            config_digest: image.config_digest.clone(),
            config: image.config.clone(),
            chain_id: Some(prepared.chain_id().clone()),
            layers: prepared
                .layers()
                .iter()
                .map(|l| match l {
                    super::LayerOutcome::Applied { stats, .. } => stats.clone(),
                    super::LayerOutcome::Reused | super::LayerOutcome::Adopted => {
                        Default::default()
                    }
                })
                .collect(),
        };
        // From here on, dropping the root destroys the clone.
        let root = VerifiedRoot::on_dataset(staging.to_owned(), image, mark.clone(), remover);
        let mounted = self.store.mountpoint(&ds)?;
        if mounted != staging {
            return Err(ZfsStoreError::NotMounted {
                dataset: ds,
                mountpoint: mounted.display().to_string(),
            });
        }
        let bytes = serde_json::to_vec_pretty(&mark).expect("a mark serialises");
        let file = staging.join(MARK_FILE);
        write_atomic(&file, &bytes).map_err(|source| ZfsStoreError::Io {
            dataset: ds.clone(),
            op: "writing the ownership mark",
            path: file,
            source,
        })?;
        Ok(root)
    }
}
