//! The ZFS layer store: one dataset per ChainID, a zone root as a clone of the top snapshot.
//!
//! ```text
//! <parent>                               claimed: org.reddwarf:kind = layer-store
//! <parent>/layers                        kind = layers
//! <parent>/layers/<alg>-<hex>            kind = layer, chainid = <alg>:<hex>, state
//! <parent>/layers/<alg>-<hex>@layer      the verified layer; only clones of it are used
//! <parent>/zones/<zone>                  kind = zone, zone = <zone>; a clone of the top @layer
//! ```
//!
//! Every dataset layout (layer or zone) holds the root file system in `root/`, so a zone's
//! clone is a zonepath: `root/` is the zone root and the rest of the dataset is free for the
//! provisioner's files, as in an illumos zonepath dataset.
//!
//! **A layer.** The first layer's dataset is created empty; layer *i* is a `zfs clone` of
//! layer *i−1*'s `@layer` snapshot. The layer is applied into `root/` with the same
//! [`apply_layer`] as the directory store (in-root resolution, whiteouts, limits, DiffID
//! compared), then `state` becomes `complete` and only then is `@layer` taken. So a layer is
//! trusted only when its dataset carries our marks, `state = complete` and `@layer` exists. A
//! worker killed mid-layer leaves a dataset with `state = unpacking` and no snapshot: the
//! next pass destroys it and applies the layer again. A layer whose DiffID does not match is
//! destroyed before the error is returned; it never gets a snapshot.
//!
//! **Marks.** Every dataset the store creates carries `org.reddwarf:owner = rdctl-worker`,
//! `org.reddwarf:worker = <worker_id>` and its `org.reddwarf:kind`, set on the dataset itself
//! (ZFS user properties are inherited down the tree, so only a *local* value counts). A
//! dataset without the marks, or with another worker's or kind, is never changed or destroyed.
//! Marks say whose a dataset claims to be, not what was verified: with
//! [`ZfsLayerStore::with_records`] (the worker's state) a layer is reused only when its
//! `@layer` has the `guid` and `createtxg` recorded when its DiffID was checked, and one
//! without a record is compared with the layer applied again first (`records.rs`).
//!
//! **Collecting.** [`ZfsLayerStore::collect`] destroys the marked layers not kept and not
//! cloned, top layers first; a layer a zone or a kept layer still clones waits for a later call.
//!
//! **Snapshots.** The store makes `@layer` on layers and no snapshot of a zone. Any other
//! snapshot (an operator's `zfs snapshot -r <parent>@backup`) is not the store's: a dataset is
//! destroyed without `-r`, after its own snapshots only, and one with a snapshot of someone
//! else's is refused ([`ZfsStoreError::ForeignSnapshot`]) or, by [`ZfsLayerStore::collect`],
//! left ([`Collected::pinned`]).
//!
//! The store runs `zfs` through [`Zfs`] (argument vectors, no shell) and is synchronous; async
//! callers run it on a blocking thread. Layers shared by images being prepared at the same
//! time are applied once (one lock per ChainID).

use std::collections::HashMap;
use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use validator::{Digest, chain_ids};

use super::command::{DatasetName, Property, Zfs, ZfsError};
use super::error::ZfsStoreError;
use crate::store::ContentStore;
use crate::unpack::{LayerStats, RootDir, UnpackOptions, apply_layer};
use crate::verify::{PulledImage, RootError};

/// The user property naming the owner program (`rdctl-worker`).
pub const PROP_OWNER: &str = "org.reddwarf:owner";
/// The user property naming the worker (`worker_id` in worker.toml).
pub const PROP_WORKER: &str = "org.reddwarf:worker";
/// The user property naming what a dataset is (`layer-store`, `layers`, `layer`, `zones`,
/// `zone`).
pub const PROP_KIND: &str = "org.reddwarf:kind";
/// The user property holding a layer dataset's ChainID, or a zone's image ChainID.
pub const PROP_CHAIN_ID: &str = "org.reddwarf:chainid";
/// The user property holding a layer dataset's state (`unpacking`, `complete`).
pub const PROP_STATE: &str = "org.reddwarf:state";
/// The user property holding a zone dataset's zone name.
pub const PROP_ZONE: &str = "org.reddwarf:zone";
/// The snapshot name of a verified layer.
pub const LAYER_SNAPSHOT: &str = "layer";

const OWNER: &str = "rdctl-worker";
const UNPACKING: &str = "unpacking";
const COMPLETE: &str = "complete";

/// What [`ZfsLayerStore::prepare`] did with one layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LayerOutcome {
    /// Its verified snapshot was already there.
    Reused,
    /// Its snapshot was there without a record (an older worker's): its content was
    /// compared with the layer applied again, found the same, and recorded.
    Adopted,
    /// It was applied and verified now (a half-made dataset, if any, was destroyed first).
    Applied {
        /// What applying it did.
        stats: LayerStats,
        /// A half-made dataset of this layer was found and destroyed first.
        redone: bool,
    },
}

/// An image whose every layer is a verified snapshot in the store. Only
/// [`ZfsLayerStore::prepare`] makes one, so a zone root is only ever cloned from layers whose
/// digests and DiffIDs were checked.
#[derive(Debug, Clone)]
pub struct PreparedImage {
    manifest: Digest,
    chain_id: Digest,
    top: DatasetName,
    layers: Vec<LayerOutcome>,
}

impl PreparedImage {
    /// The image manifest's digest.
    pub fn manifest(&self) -> &Digest {
        &self.manifest
    }

    /// The ChainID of all layers.
    pub fn chain_id(&self) -> &Digest {
        &self.chain_id
    }

    /// The top layer's dataset (its `@layer` snapshot is what zones are cloned from).
    pub fn top_dataset(&self) -> &DatasetName {
        &self.top
    }

    /// The top snapshot, `<top>@layer`.
    pub fn top_snapshot(&self) -> String {
        self.top.snapshot(LAYER_SNAPSHOT)
    }

    /// What happened to each layer, in manifest order.
    pub fn layers(&self) -> &[LayerOutcome] {
        &self.layers
    }
}

/// A zone's dataset, cloned from an image's top snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneDataset {
    /// The dataset (`<parent>/zones/<zone>`).
    pub dataset: DatasetName,
    /// Where it is mounted: the zonepath; the zone root is `root/` in it.
    pub zonepath: PathBuf,
}

impl ZoneDataset {
    /// The zone root (`<zonepath>/root`).
    pub fn root(&self) -> PathBuf {
        self.zonepath.join("root")
    }
}

/// The layer store on ZFS (see the module docs).
#[derive(Debug, Clone)]
pub struct ZfsLayerStore {
    pub(super) zfs: Zfs,
    parent: DatasetName,
    pub(super) layers: DatasetName,
    pub(super) zones: DatasetName,
    worker_id: String,
    /// Where each verified layer's record is kept (the worker's state), when set.
    pub(super) records: Option<PathBuf>,
    /// One lock per ChainID being prepared.
    busy: Arc<Mutex<HashMap<Digest, Arc<Mutex<()>>>>>,
}

/// One dataset of [`ZfsLayerStore::check_children`]: its name, its `mountpoint`, and whether
/// it is mounted when it is ours, or why it is not.
pub(super) type ChildVerdict = (DatasetName, String, Result<bool, ZfsStoreError>);

/// How a dataset stands against the marks wanted on it.
pub(super) enum Found {
    Missing,
    Ours(Vec<Property>),
}

impl ZfsLayerStore {
    /// Opens the store under the existing dataset `parent` for `worker_id`: claims `parent`
    /// (an unmarked one only when it holds no datasets) and creates `layers` and `zones` in
    /// it when missing.
    pub fn open(zfs: Zfs, parent: &str, worker_id: &str) -> Result<ZfsLayerStore, ZfsStoreError> {
        let parent = DatasetName::parse(parent)?;
        let store = ZfsLayerStore {
            layers: parent.child("layers")?,
            zones: parent.child("zones")?,
            parent,
            zfs,
            worker_id: worker_id.to_owned(),
            records: None,
            busy: Arc::default(),
        };
        store.claim_parent()?;
        for (ds, kind) in [(&store.layers, "layers"), (&store.zones, "zones")] {
            if let Found::Missing = store.check(ds, kind, &[])? {
                store.zfs.run(
                    ["create".to_owned()]
                        .into_iter()
                        .chain(store.mark_args(kind, &[]))
                        .chain([ds.to_string()]),
                )?;
            }
        }
        Ok(store)
    }

    /// The worker whose marks the store sets and checks.
    pub fn worker_id(&self) -> &str {
        &self.worker_id
    }

    /// The configured parent dataset.
    pub fn parent(&self) -> &DatasetName {
        &self.parent
    }

    fn claim_parent(&self) -> Result<(), ZfsStoreError> {
        let kind = "layer-store";
        let props = self
            .zfs
            .get(self.parent.as_str(), &[PROP_OWNER])?
            .ok_or_else(|| ZfsStoreError::NoParent {
                dataset: self.parent.clone(),
            })?;
        if props[0].is_local() {
            self.check(&self.parent, kind, &[])?;
            return Ok(());
        }
        let children = self.zfs.run([
            "list",
            "-H",
            "-o",
            "name",
            "-t",
            "filesystem,volume",
            "-r",
            "-d",
            "1",
            self.parent.as_str(),
        ])?;
        if let Some(child) = children
            .lines()
            .find(|l| !l.is_empty() && *l != self.parent.as_str())
        {
            return Err(ZfsStoreError::ParentInUse {
                dataset: self.parent.clone(),
                child: child.to_owned(),
            });
        }
        let mut args = vec!["set".to_owned()];
        // `zfs set` takes one property per call in older releases (zfs-fuse 0.7).
        for (p, v) in self.marks(kind, &[]) {
            args.truncate(1);
            args.push(format!("{p}={v}"));
            args.push(self.parent.to_string());
            self.zfs.run(&args)?;
        }
        Ok(())
    }

    fn marks<'a>(
        &'a self,
        kind: &'a str,
        extra: &'a [(&'static str, String)],
    ) -> Vec<(&'static str, String)> {
        let mut m = vec![
            (PROP_OWNER, OWNER.to_owned()),
            (PROP_WORKER, self.worker_id.clone()),
            (PROP_KIND, kind.to_owned()),
        ];
        m.extend(extra.iter().cloned());
        m
    }

    /// `-o prop=value` for each mark.
    pub(super) fn mark_args(&self, kind: &str, extra: &[(&'static str, String)]) -> Vec<String> {
        self.marks(kind, extra)
            .into_iter()
            .flat_map(|(p, v)| ["-o".to_owned(), format!("{p}={v}")])
            .collect()
    }

    /// Reads `ds`'s marks and `PROP_STATE`: `Missing`, `Ours` (with the properties read, in
    /// the order owner, worker, kind, extras…, state), or an error when it is not ours.
    pub(super) fn check(
        &self,
        ds: &DatasetName,
        kind: &str,
        extra: &[(&'static str, String)],
    ) -> Result<Found, ZfsStoreError> {
        let wanted = self.marks(kind, extra);
        let mut names: Vec<&str> = wanted.iter().map(|(p, _)| *p).collect();
        names.push(PROP_STATE);
        let Some(props) = self.zfs.get(ds.as_str(), &names)? else {
            return Ok(Found::Missing);
        };
        Self::judge(ds, &wanted, props)
    }

    /// [`ZfsLayerStore::check`] of every file system directly under `parent` with one `zfs
    /// get` (a worker's start reads a hundred zones' datasets in one command, not two commands
    /// each): each with its `mountpoint`, and whether it is mounted when it is ours, or why it
    /// is not ours. One dataset that is not ours is that dataset's verdict, not the whole
    /// listing's: the caller leaves it alone and goes on with the others.
    pub(super) fn check_children(
        &self,
        parent: &DatasetName,
        kind: &str,
    ) -> Result<Vec<ChildVerdict>, ZfsStoreError> {
        let wanted = self.marks(kind, &[]);
        let mut names: Vec<&str> = wanted.iter().map(|(p, _)| *p).collect();
        names.extend([PROP_STATE, "mountpoint", "mounted"]);
        let mut out = Vec::new();
        for (name, mut props) in self.zfs.get_children(parent.as_str(), &names)? {
            let ds = DatasetName::parse(&name)?;
            let mounted = props.pop().is_some_and(|p| p.value == "yes");
            let mountpoint = props.pop().map(|p| p.value).unwrap_or_default();
            let verdict = Self::judge(&ds, &wanted, props).map(|_| mounted);
            out.push((ds, mountpoint, verdict));
        }
        Ok(out)
    }

    /// `Ours` when every mark in `wanted` is set on `ds` itself to its value; the error names
    /// the first that is not.
    fn judge(
        ds: &DatasetName,
        wanted: &[(&'static str, String)],
        props: Vec<Property>,
    ) -> Result<Found, ZfsStoreError> {
        for ((property, want), got) in wanted.iter().zip(&props) {
            if !got.is_local() {
                return Err(ZfsStoreError::Unmarked {
                    dataset: ds.clone(),
                    property,
                });
            }
            if &got.value != want {
                return Err(ZfsStoreError::Foreign {
                    dataset: ds.clone(),
                    property,
                    found: got.value.clone(),
                    wanted: want.clone(),
                });
            }
        }
        Ok(Found::Ours(props))
    }

    /// The dataset of the layer whose ChainID is `chain`.
    pub fn layer_dataset(&self, chain: &Digest) -> Result<DatasetName, ZfsStoreError> {
        Ok(self
            .layers
            .child(&format!("{}-{}", chain.algorithm(), chain.encoded()))?)
    }

    /// The dataset of zone `zone`.
    pub fn zone_dataset(&self, zone: &str) -> Result<DatasetName, ZfsStoreError> {
        Ok(self.zones.child(zone)?)
    }

    fn chain_lock(&self, chain: &Digest) -> Arc<Mutex<()>> {
        let mut map = self.busy.lock().unwrap_or_else(|e| e.into_inner());
        map.retain(|_, l| Arc::strong_count(l) > 1);
        map.entry(chain.clone()).or_default().clone()
    }

    /// The mounted directory of `ds`.
    pub(super) fn mountpoint(&self, ds: &DatasetName) -> Result<PathBuf, ZfsStoreError> {
        let props = self
            .zfs
            .get(ds.as_str(), &["mountpoint", "mounted"])?
            .unwrap_or_default();
        match props.as_slice() {
            [mp, mounted] if mounted.value == "yes" && mp.value.starts_with('/') => {
                Ok(PathBuf::from(&mp.value))
            }
            _ => Err(ZfsStoreError::NotMounted {
                dataset: ds.clone(),
                mountpoint: props.first().map(|p| p.value.clone()).unwrap_or_default(),
            }),
        }
    }

    /// Destroys `ds` with its snapshots named in `ours`, and nothing else. A snapshot of `ds`
    /// the store did not make (an operator's `zfs snapshot -r <parent>@backup`) carries no
    /// mark of ours: `zfs destroy -r` would take it along, so the dataset is refused whole
    /// ([`ZfsStoreError::ForeignSnapshot`]) and stays until the snapshot is gone. The
    /// destroys are not recursive: a snapshot or child made after the listing makes the
    /// last one fail rather than go with the dataset.
    pub(super) fn destroy_ours(
        &self,
        ds: &DatasetName,
        ours: &[&str],
    ) -> Result<(), ZfsStoreError> {
        let listing = self.zfs.run([
            "list",
            "-H",
            "-o",
            "name",
            "-t",
            "snapshot",
            "-r",
            "-d",
            "1",
            ds.as_str(),
        ]);
        let listing = match listing {
            Ok(l) => l,
            Err(e) if e.is_missing() => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let mut found = Vec::new();
        for snap in listing.lines().filter(|l| !l.is_empty()) {
            let Some((of, name)) = snap.split_once('@') else {
                continue;
            };
            if of != ds.as_str() {
                continue;
            }
            if !ours.contains(&name) {
                return Err(ZfsStoreError::ForeignSnapshot {
                    dataset: ds.clone(),
                    snapshot: snap.to_owned(),
                });
            }
            found.push(snap.to_owned());
        }
        for snap in &found {
            self.zfs.destroy(snap, false)?;
        }
        self.zfs.destroy(ds.as_str(), false)?;
        Ok(())
    }

    /// The space that layer GC weighs: the fuller of the pool (its root dataset's `used` and
    /// `available`) and the store's parent (a `quota` on it bounds its `available`), as ZFS
    /// counts them. `statvfs` of a dataset's mountpoint reports that dataset's own bytes plus
    /// the pool's free space, so a pool filled by other datasets looked nearly empty there.
    pub fn space(&self) -> Result<crate::throttle::DiskSpace, ZfsStoreError> {
        let pool = self
            .parent
            .as_str()
            .split('/')
            .next()
            .unwrap_or(self.parent.as_str());
        let mut fullest: Option<crate::throttle::DiskSpace> = None;
        for ds in [pool, self.parent.as_str()] {
            let props = self.zfs.get(ds, &["used", "available"])?.ok_or_else(|| {
                ZfsStoreError::NoParent {
                    dataset: self.parent.clone(),
                }
            })?;
            let bytes = |p: &Property| {
                p.value.parse::<u64>().map_err(|_| ZfsError::Output {
                    command: format!("zfs get -H -p used,available {ds}"),
                    line: p.value.clone(),
                })
            };
            let (used, available) = (bytes(&props[0])?, bytes(&props[1])?);
            let space = crate::throttle::DiskSpace {
                total: used.saturating_add(available),
                available,
            };
            if fullest.is_none_or(|f| space.used_percent() > f.used_percent()) {
                fullest = Some(space);
            }
        }
        Ok(fullest.expect("two datasets were read"))
    }

    /// Makes every layer of `image` (blobs verified in `store`) a verified snapshot: reuses
    /// the trusted ones, destroys half-made ones and applies the missing ones, each checked
    /// against its DiffID. On an error the layer being applied is destroyed; the layers
    /// below it stay for the next attempt.
    pub fn prepare(
        &self,
        store: &ContentStore,
        image: &PulledImage,
        opts: &UnpackOptions,
    ) -> Result<PreparedImage, ZfsStoreError> {
        let manifest = &image.manifest;
        let diff_ids = &image.config.diff_ids;
        let root_err = |source| ZfsStoreError::Layer {
            manifest: image.manifest_digest.clone(),
            source: Box::new(source),
        };
        if diff_ids.len() != manifest.layers.len() {
            return Err(root_err(RootError::DiffIdCount {
                diff_ids: diff_ids.len(),
                layers: manifest.layers.len(),
            }));
        }
        let chains = chain_ids(diff_ids);
        let mut outcomes = Vec::with_capacity(chains.len());
        let mut below: Option<DatasetName> = None;
        for (index, ((layer, diff_id), chain)) in manifest
            .layers
            .iter()
            .zip(diff_ids)
            .zip(&chains)
            .enumerate()
        {
            let Some(compression) = layer.media_type.layer_compression() else {
                return Err(root_err(RootError::MediaType {
                    index,
                    digest: layer.digest.clone(),
                    media_type: layer.media_type.to_string(),
                }));
            };
            let ds = self.layer_dataset(chain)?;
            let lock = self.chain_lock(chain);
            let _one = lock.lock().unwrap_or_else(|e| e.into_inner());
            let extra = [(PROP_CHAIN_ID, chain.to_string())];
            let mut redone = false;
            let blob = || {
                let blob_err = || {
                    root_err(RootError::Blob {
                        index,
                        digest: layer.digest.clone(),
                        size: layer.size,
                    })
                };
                if !store.contains(&layer.digest, layer.size) {
                    return Err(blob_err());
                }
                std::fs::File::open(store.blob_path(&layer.digest))
                    .map(|f| BufReader::with_capacity(256 * 1024, f))
                    .map_err(|_| blob_err())
            };
            let applied_err = |e| match e {
                Applied::Unpack(source) => root_err(RootError::Layer {
                    index,
                    digest: layer.digest.clone(),
                    source,
                }),
                Applied::Store(e) => e,
            };
            if let Found::Ours(props) = self.check(&ds, "layer", &extra)? {
                let state = props.last().map(|p| p.value.as_str());
                let snap = ds.snapshot(LAYER_SNAPSHOT);
                if state == Some(COMPLETE)
                    && let Some(identity) = self.identity(&snap)?
                {
                    let outcome = if self.trusted(&ds, chain, diff_id, &snap, identity)? {
                        LayerOutcome::Reused
                    } else {
                        tracing::info!(dataset = %ds, "a layer without a record of its verification is compared with the layer applied again");
                        let blob = (blob()?, compression);
                        self.adopt(&ds, below.as_ref(), (chain, diff_id), blob, opts)
                            .map_err(applied_err)?;
                        LayerOutcome::Adopted
                    };
                    outcomes.push(outcome);
                    below = Some(ds);
                    continue;
                }
                tracing::info!(dataset = %ds, ?state, "destroying a half-made layer");
                self.destroy_ours(&ds, &[LAYER_SNAPSHOT])?;
                redone = true;
            }
            let blob = blob()?;
            let mut args = self.mark_args("layer", &extra);
            args.extend(["-o".to_owned(), format!("{PROP_STATE}={UNPACKING}")]);
            match &below {
                None => self.zfs.run(
                    ["create".to_owned()]
                        .into_iter()
                        .chain(args)
                        .chain([ds.to_string()]),
                )?,
                Some(b) => self.zfs.run(
                    ["clone".to_owned()]
                        .into_iter()
                        .chain(args)
                        .chain([b.snapshot(LAYER_SNAPSHOT), ds.to_string()]),
                )?,
            };
            let applied = self.apply(&ds, below.is_none(), blob, compression, diff_id, opts);
            let stats = match applied {
                Ok(s) => s,
                Err(e) => {
                    if let Err(d) = self.destroy_ours(&ds, &[LAYER_SNAPSHOT]) {
                        tracing::warn!(dataset = %ds, error = %d, "destroying a failed layer failed; the next pass redoes it");
                    }
                    return Err(applied_err(e));
                }
            };
            self.zfs.run([
                "set".to_owned(),
                format!("{PROP_STATE}={COMPLETE}"),
                ds.to_string(),
            ])?;
            self.zfs.run(["snapshot", &ds.snapshot(LAYER_SNAPSHOT)])?;
            self.record(chain, diff_id, &ds.snapshot(LAYER_SNAPSHOT))?;
            outcomes.push(LayerOutcome::Applied { stats, redone });
            below = Some(ds);
        }
        match (below, chains.last()) {
            (Some(top), Some(chain)) => Ok(PreparedImage {
                manifest: image.manifest_digest.clone(),
                chain_id: chain.clone(),
                top,
                layers: outcomes,
            }),
            _ => Err(ZfsStoreError::NoLayers {
                manifest: image.manifest_digest.clone(),
            }),
        }
    }

    /// Applies one layer into `<ds mountpoint>/root` (made first for the bottom layer).
    pub(super) fn apply(
        &self,
        ds: &DatasetName,
        bottom: bool,
        blob: impl std::io::BufRead + Send,
        compression: validator::Compression,
        diff_id: &Digest,
        opts: &UnpackOptions,
    ) -> Result<LayerStats, Applied> {
        let mnt = self.mountpoint(ds).map_err(Applied::Store)?;
        let root = mnt.join("root");
        let io = |op: &'static str, path: &Path| {
            let (dataset, path) = (ds.clone(), path.to_owned());
            move |source| {
                Applied::Store(ZfsStoreError::Io {
                    dataset,
                    op,
                    path,
                    source,
                })
            }
        };
        if bottom {
            std::fs::create_dir(&root).map_err(io("creating the root", &root))?;
        }
        let dir = RootDir::open(&root).map_err(io("opening the root", &root))?;
        apply_layer(&dir, blob, compression, diff_id, opts).map_err(Applied::Unpack)
    }

    /// Clones zone `zone`'s dataset from `image`'s top snapshot, with a `quota` in bytes when
    /// given, and returns where it is mounted. An existing dataset of the zone is an error
    /// (remove the zone first); one without our marks is never touched.
    pub fn clone_zone(
        &self,
        zone: &str,
        image: &PreparedImage,
        quota: Option<u64>,
    ) -> Result<ZoneDataset, ZfsStoreError> {
        let ds = self.zone_dataset(zone)?;
        let extra = [(PROP_ZONE, zone.to_owned())];
        if let Found::Ours(_) = self.check(&ds, "zone", &extra)? {
            return Err(ZfsStoreError::ZoneExists {
                zone: zone.to_owned(),
                dataset: ds,
            });
        }
        let mut args = vec!["clone".to_owned()];
        args.extend(self.mark_args("zone", &extra));
        args.extend([
            "-o".to_owned(),
            format!("{PROP_CHAIN_ID}={}", image.chain_id),
        ]);
        if let Some(q) = quota {
            args.extend(["-o".to_owned(), format!("quota={q}")]);
        }
        args.extend([image.top_snapshot(), ds.to_string()]);
        self.zfs.run(args)?;
        let zonepath = self.mountpoint(&ds)?;
        Ok(ZoneDataset {
            dataset: ds,
            zonepath,
        })
    }

    /// Destroys zone `zone`'s dataset after checking its marks; returns whether there was
    /// one. The store makes no snapshot of a zone: one there is not ours and refuses the
    /// removal ([`ZfsStoreError::ForeignSnapshot`]).
    pub fn remove_zone(&self, zone: &str) -> Result<bool, ZfsStoreError> {
        let ds = self.zone_dataset(zone)?;
        let extra = [(PROP_ZONE, zone.to_owned())];
        match self.check(&ds, "zone", &extra)? {
            Found::Missing => Ok(false),
            Found::Ours(_) => {
                self.destroy_ours(&ds, &[])?;
                Ok(true)
            }
        }
    }
}

/// What [`ZfsLayerStore::collect`] did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Collected {
    /// Layers destroyed (their ChainIDs), top layers first.
    pub destroyed: Vec<Digest>,
    /// Layers not kept but still held by a clone (a zone, or a kept layer above them); a
    /// later pass destroys them once their clones are gone.
    pub held: Vec<Digest>,
    /// Datasets under `layers` that are not the store's (no or another's marks); untouched.
    pub foreign: Vec<DatasetName>,
    /// Layers not kept that have a snapshot the store did not make (an operator's backup);
    /// left whole, with that snapshot, until it is gone.
    pub pinned: Vec<(Digest, String)>,
}

impl ZfsLayerStore {
    /// Destroys the layer datasets whose ChainID is not in `keep` and that no clone depends
    /// on, top layers first, repeating while that frees more (a destroyed top layer releases
    /// the layer below). A layer still cloned (by a zone or a kept layer) stays until a later
    /// call; a dataset without the store's marks is never touched, nor one with a snapshot the
    /// store did not make ([`Collected::pinned`]).
    pub fn collect(
        &self,
        keep: &std::collections::HashSet<Digest>,
    ) -> Result<Collected, ZfsStoreError> {
        let mut out = Collected::default();
        let listing = self.zfs.run([
            "list",
            "-H",
            "-o",
            "name",
            "-t",
            "filesystem",
            "-r",
            "-d",
            "1",
            self.layers.as_str(),
        ])?;
        let mut candidates = Vec::new();
        for name in listing
            .lines()
            .filter(|l| !l.is_empty() && *l != self.layers.as_str())
        {
            let ds = DatasetName::parse(name)?;
            let chain = name
                .rsplit('/')
                .next()
                .and_then(|leaf| leaf.split_once('-'))
                .and_then(|(alg, hex)| Digest::parse(&format!("{alg}:{hex}")).ok());
            let Some(chain) = chain else {
                out.foreign.push(ds);
                continue;
            };
            if keep.contains(&chain) {
                continue;
            }
            match self.check(&ds, "layer", &[(PROP_CHAIN_ID, chain.to_string())]) {
                Ok(Found::Ours(_)) => candidates.push((chain, ds)),
                Ok(Found::Missing) => {}
                Err(ZfsStoreError::Unmarked { .. } | ZfsStoreError::Foreign { .. }) => {
                    out.foreign.push(ds)
                }
                Err(e) => return Err(e),
            }
        }
        loop {
            let before = candidates.len();
            let mut still = Vec::new();
            for (chain, ds) in candidates {
                let lock = self.chain_lock(&chain);
                let _one = lock.lock().unwrap_or_else(|e| e.into_inner());
                match self.destroy_ours(&ds, &[LAYER_SNAPSHOT]) {
                    Ok(()) => {
                        self.forget(&chain);
                        out.destroyed.push(chain)
                    }
                    Err(ZfsStoreError::Zfs(ZfsError::Failed { stderr, .. }))
                        if stderr.contains("dependent clones") =>
                    {
                        still.push((chain, ds))
                    }
                    Err(ZfsStoreError::ForeignSnapshot { snapshot, .. }) => {
                        out.pinned.push((chain, snapshot))
                    }
                    Err(e) => return Err(e),
                }
            }
            candidates = still;
            if candidates.len() == before || candidates.is_empty() {
                break;
            }
        }
        out.held = candidates.into_iter().map(|(c, _)| c).collect();
        Ok(out)
    }
}

/// Why applying a layer failed: in the unpacker (the layer is bad) or around it.
pub(super) enum Applied {
    Unpack(crate::unpack::UnpackError),
    Store(ZfsStoreError),
}
