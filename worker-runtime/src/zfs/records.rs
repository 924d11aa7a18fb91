//! Layers bound to what was verified, not to their marks.
//!
//! The marks on a layer dataset are ZFS user properties: anyone allowed `zfs set` can copy
//! them onto a dataset made by hand. So with [`ZfsLayerStore::with_records`] (the worker sets
//! `<state_dir>/zfs-layers`) every layer applied and snapshotted gets a record
//! `<alg>-<hex>.json` in the worker's own state: its ChainID, DiffID and the `@layer`
//! snapshot's `guid` and `createtxg`, which ZFS sets and nobody can. A layer is reused only
//! when its snapshot is the recorded one; one that differs is refused
//! ([`ZfsStoreError::Untrusted`]) and left for the operator.
//!
//! **Adoption.** A complete, marked layer without a record was made by a worker from before
//! records were kept, or snapshotted just before a crash. It can be neither thrown away (a
//! zone or the layer above is a clone of it, and destroying it would take them along) nor
//! trusted on its marks. Re-hashing it against its DiffID is not possible: the DiffID is the
//! SHA-256 of the exact tar stream (entry order, headers, padding), which a file tree does
//! not determine. So the store applies the layer's blob again, DiffID checked, into a scratch
//! clone of the (trusted) layer below and compares that tree with a clone of the unrecorded
//! `@layer`: type, mode, owner, size, content, link target, device number of every entry.
//! The same tree: the old snapshot is recorded and reused as it is (its clones stay). Any
//! difference: refused as untrusted, naming the first path that differs. The cost is one
//! unpack and one read of both trees per unrecorded layer, once.

use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use validator::Digest;

use super::command::DatasetName;
use super::error::ZfsStoreError;
use super::store::{Applied, Found, LAYER_SNAPSHOT, PROP_CHAIN_ID, ZfsLayerStore};
use crate::unpack::UnpackOptions;

/// The kind mark of the scratch clones adoption makes and destroys.
const CHECK_KIND: &str = "layer-check";

/// What the store recorded when it verified a layer (`<records>/<alg>-<hex>.json`).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
struct LayerRecord {
    chain_id: String,
    diff_id: String,
    snapshot: String,
    guid: String,
    createtxg: String,
}

impl ZfsLayerStore {
    /// Binds each layer to what was verified (see the module docs): records go into `dir`
    /// (the worker's state, `<state_dir>/zfs-layers`). Without records (a store used as a
    /// library) the marks alone are trusted.
    pub fn with_records(mut self, dir: &Path) -> Result<ZfsLayerStore, ZfsStoreError> {
        std::fs::create_dir_all(dir).map_err(|source| ZfsStoreError::Record {
            path: dir.to_owned(),
            op: "creating the records directory",
            source,
        })?;
        self.records = Some(dir.to_owned());
        Ok(self)
    }

    fn record_path(&self, chain: &Digest) -> Option<PathBuf> {
        self.records
            .as_ref()
            .map(|d| d.join(format!("{}-{}.json", chain.algorithm(), chain.encoded())))
    }

    /// The `guid` and `createtxg` of `snapshot` (`None` when it does not exist).
    pub(super) fn identity(
        &self,
        snapshot: &str,
    ) -> Result<Option<(String, String)>, ZfsStoreError> {
        Ok(self
            .zfs
            .get(snapshot, &["guid", "createtxg"])?
            .map(|p| (p[0].value.clone(), p[1].value.clone())))
    }

    /// Writes the record of a layer just verified and snapshotted.
    pub(super) fn record(
        &self,
        chain: &Digest,
        diff_id: &Digest,
        snapshot: &str,
    ) -> Result<(), ZfsStoreError> {
        let Some(path) = self.record_path(chain) else {
            return Ok(());
        };
        let (guid, createtxg) = self.identity(snapshot)?.unwrap_or_default();
        let record = LayerRecord {
            chain_id: chain.to_string(),
            diff_id: diff_id.to_string(),
            snapshot: snapshot.to_owned(),
            guid,
            createtxg,
        };
        let bytes = serde_json::to_vec_pretty(&record).expect("a record serialises");
        crate::owner::write_atomic(&path, &bytes).map_err(|source| ZfsStoreError::Record {
            path,
            op: "writing",
            source,
        })
    }

    /// Whether `snapshot` (of layer `chain`, complete and marked, with `identity`) is the one
    /// this worker verified for `diff_id`: `true` when the record says so (or the store keeps
    /// no records), `false` when there is no record (adopt it first), an error when another
    /// snapshot stands in its place.
    pub(super) fn trusted(
        &self,
        ds: &DatasetName,
        chain: &Digest,
        diff_id: &Digest,
        snapshot: &str,
        identity: (String, String),
    ) -> Result<bool, ZfsStoreError> {
        let Some(path) = self.record_path(chain) else {
            return Ok(true);
        };
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(false),
            Err(source) => {
                return Err(ZfsStoreError::Record {
                    path,
                    op: "reading",
                    source,
                });
            }
        };
        // A record cut short by a crash (write_atomic makes that unlikely) counts as none:
        // the layer is compared again before it is used.
        let Ok(r) = serde_json::from_slice::<LayerRecord>(&bytes) else {
            return Ok(false);
        };
        let untrusted = |reason: String| ZfsStoreError::Untrusted {
            dataset: ds.clone(),
            snapshot: snapshot.to_owned(),
            reason,
            record: path.clone(),
        };
        if r.chain_id != chain.to_string() || r.diff_id != diff_id.to_string() {
            return Err(untrusted(format!(
                "recorded for ChainID {} DiffID {}, wanted {chain} {diff_id}",
                r.chain_id, r.diff_id
            )));
        }
        let (guid, createtxg) = identity;
        if r.guid != guid || r.createtxg != createtxg {
            return Err(untrusted(format!(
                "guid {guid} createtxg {createtxg}, recorded guid {} createtxg {}",
                r.guid, r.createtxg
            )));
        }
        Ok(true)
    }

    /// Removes the record of a layer just destroyed.
    pub(super) fn forget(&self, chain: &Digest) {
        if let Some(path) = self.record_path(chain)
            && let Err(e) = std::fs::remove_file(&path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(path = %path.display(), error = %e, "removing a destroyed layer's record failed");
        }
    }

    /// Adopts layer `ds` (complete, marked, unrecorded): applies `blob` (the layer's bytes
    /// and their compression) again, DiffID checked, into a scratch clone of `below`'s
    /// snapshot, compares it with a clone of `ds@layer`, and records `ds@layer` when they are
    /// the same tree (see the module docs). The scratch clones are destroyed whatever the
    /// outcome.
    pub(super) fn adopt(
        &self,
        ds: &DatasetName,
        below: Option<&DatasetName>,
        (chain, diff_id): (&Digest, &Digest),
        blob: (impl std::io::BufRead + Send, validator::Compression),
        opts: &UnpackOptions,
    ) -> Result<(), Applied> {
        let snap = ds.snapshot(LAYER_SNAPSHOT);
        let scratch =
            DatasetName::parse(&format!("{ds}-check")).map_err(|e| Applied::Store(e.into()))?;
        let view =
            DatasetName::parse(&format!("{ds}-adopt")).map_err(|e| Applied::Store(e.into()))?;
        let extra = [(PROP_CHAIN_ID, chain.to_string())];
        let clear = |d: &DatasetName| -> Result<(), ZfsStoreError> {
            match self.check(d, CHECK_KIND, &extra)? {
                Found::Ours(_) => self.destroy_ours(d, &[]),
                Found::Missing => Ok(()),
            }
        };
        for d in [&scratch, &view] {
            clear(d).map_err(Applied::Store)?;
        }
        let compared = (|| {
            let mut args = vec![];
            args.extend(self.mark_args(CHECK_KIND, &extra));
            let run = |head: &str, rest: Vec<String>| {
                self.zfs.run(
                    [head.to_owned()]
                        .into_iter()
                        .chain(args.iter().cloned())
                        .chain(rest),
                )
            };
            match below {
                None => run("create", vec![scratch.to_string()]),
                Some(b) => run(
                    "clone",
                    vec![b.snapshot(LAYER_SNAPSHOT), scratch.to_string()],
                ),
            }
            .map_err(|e| Applied::Store(e.into()))?;
            self.apply(&scratch, below.is_none(), blob.0, blob.1, diff_id, opts)?;
            run("clone", vec![snap.clone(), view.to_string()])
                .map_err(|e| Applied::Store(e.into()))?;
            let (a, b) = (
                self.mountpoint(&scratch).map_err(Applied::Store)?,
                self.mountpoint(&view).map_err(Applied::Store)?,
            );
            first_difference(&a.join("root"), &b.join("root"), Path::new("/")).map_err(|source| {
                Applied::Store(ZfsStoreError::Io {
                    dataset: view.clone(),
                    op: "comparing with the layer applied again",
                    path: b.join("root"),
                    source,
                })
            })
        })();
        for d in [&view, &scratch] {
            if let Err(e) = clear(d) {
                tracing::warn!(dataset = %d, error = %e, "destroying an adoption's scratch clone failed; the next adoption does it");
            }
        }
        match compared? {
            None => self.record(chain, diff_id, &snap).map_err(Applied::Store),
            Some(diff) => Err(Applied::Store(ZfsStoreError::Untrusted {
                dataset: ds.clone(),
                snapshot: snap,
                reason: format!(
                    "no record of it, and its content differs from the layer applied again: {diff}"
                ),
                record: self.record_path(chain).unwrap_or_default(),
            })),
        }
    }
}

/// The first path (under `rel`) where the trees at `a` and `b` differ in type, mode, owner,
/// size, content, link target or device, or `None` when they are the same. Times are not
/// compared (a directory's change as entries were added differs between two unpacks).
fn first_difference(a: &Path, b: &Path, rel: &Path) -> std::io::Result<Option<String>> {
    let (ma, mb) = (std::fs::symlink_metadata(a)?, std::fs::symlink_metadata(b)?);
    let at = rel.display();
    if (ma.mode(), ma.uid(), ma.gid()) != (mb.mode(), mb.uid(), mb.gid()) {
        return Ok(Some(format!(
            "{at}: mode {:o} owner {}:{}, applied again {:o} {}:{}",
            mb.mode(),
            mb.uid(),
            mb.gid(),
            ma.mode(),
            ma.uid(),
            ma.gid()
        )));
    }
    let ft = ma.file_type();
    if ft.is_symlink() {
        if std::fs::read_link(a)? != std::fs::read_link(b)? {
            return Ok(Some(format!("{at}: another link target")));
        }
    } else if ft.is_file() {
        if ma.len() != mb.len() || !same_content(a, b)? {
            return Ok(Some(format!("{at}: other content")));
        }
    } else if ft.is_dir() {
        let names = |p: &Path| -> std::io::Result<Vec<std::ffi::OsString>> {
            let mut v = std::fs::read_dir(p)?
                .map(|e| e.map(|e| e.file_name()))
                .collect::<Result<Vec<_>, _>>()?;
            v.sort();
            Ok(v)
        };
        let (na, nb) = (names(a)?, names(b)?);
        if na != nb {
            let extra = nb.iter().find(|n| !na.contains(n));
            let missing = na.iter().find(|n| !nb.contains(n));
            return Ok(Some(match (extra, missing) {
                (Some(n), _) => format!("{}: not in the layer", rel.join(n).display()),
                (None, Some(n)) => format!("{}: missing", rel.join(n).display()),
                (None, None) => format!("{at}: other entries"),
            }));
        }
        for n in na {
            if let Some(d) = first_difference(&a.join(&n), &b.join(&n), &rel.join(&n))? {
                return Ok(Some(d));
            }
        }
    } else if ma.rdev() != mb.rdev() {
        return Ok(Some(format!("{at}: another device")));
    }
    Ok(None)
}

/// Whether two files of the same length hold the same bytes (read in blocks, never whole).
fn same_content(a: &Path, b: &Path) -> std::io::Result<bool> {
    let (mut fa, mut fb) = (std::fs::File::open(a)?, std::fs::File::open(b)?);
    let (mut ba, mut bb) = (vec![0u8; 64 * 1024], vec![0u8; 64 * 1024]);
    loop {
        let n = fa.read(&mut ba)?;
        if n == 0 {
            return Ok(fb.read(&mut bb[..1])? == 0);
        }
        fb.read_exact(&mut bb[..n])?;
        if ba[..n] != bb[..n] {
            return Ok(false);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trees_that_differ_are_named_by_their_first_difference() {
        let t = tempfile::tempdir().unwrap();
        let (a, b) = (t.path().join("a"), t.path().join("b"));
        for r in [&a, &b] {
            std::fs::create_dir_all(r.join("etc")).unwrap();
            std::fs::write(r.join("etc/release"), b"base\n").unwrap();
            std::os::unix::fs::symlink("release", r.join("etc/link")).unwrap();
        }
        let diff = |a: &Path, b: &Path| first_difference(a, b, Path::new("/")).unwrap();
        assert_eq!(diff(&a, &b), None);
        std::fs::write(b.join("etc/release"), b"evil\n").unwrap();
        assert_eq!(diff(&a, &b).as_deref(), Some("/etc/release: other content"));
        std::fs::write(b.join("etc/release"), b"base\n").unwrap();
        std::fs::write(b.join("etc/extra"), b"").unwrap();
        assert_eq!(
            diff(&a, &b).as_deref(),
            Some("/etc/extra: not in the layer")
        );
        std::fs::remove_file(b.join("etc/extra")).unwrap();
        std::fs::remove_file(b.join("etc/link")).unwrap();
        std::os::unix::fs::symlink("/etc/shadow", b.join("etc/link")).unwrap();
        assert_eq!(
            diff(&a, &b).as_deref(),
            Some("/etc/link: another link target")
        );
        std::fs::remove_file(b.join("etc/link")).unwrap();
        std::os::unix::fs::symlink("release", b.join("etc/link")).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(
            b.join("etc/release"),
            std::fs::Permissions::from_mode(0o4755),
        )
        .unwrap();
        let d = diff(&a, &b).unwrap();
        assert!(d.starts_with("/etc/release: mode 104755"), "{d}");
    }
}
