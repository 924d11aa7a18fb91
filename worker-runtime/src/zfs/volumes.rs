//! Volumes as datasets on the ZFS layer store (see `crate::volume`):
//!
//! ```text
//! <parent>/volumes         kind = volumes, mountpoint = <base>/.volumes
//! <parent>/volumes/<id>    kind = volume, quota = its size;
//!                          mounted at <base>/.volumes/<id>
//! ```
//!
//! A volume's dataset is a plain file system, not a clone: destroying or replacing a
//! zonepath (a clone of a layer) never reaches it, and it pins no layer.

use std::path::Path;

use super::error::ZfsStoreError;
use super::store::Found;
use super::zones::ZoneDatasets;

const VOLUMES: &str = "volumes";
const VOLUME: &str = "volume";

impl ZoneDatasets {
    /// Creates the store's `volumes` dataset mounted at `dir` when missing (mounting it
    /// there when it is not), and mounts every volume of the store's a crash left unmounted.
    /// A dataset among the volumes that is not the store's is logged and left alone.
    pub(crate) fn open_volumes(&self, dir: &Path) -> Result<(), ZfsStoreError> {
        let ds = self.layers().parent().child(VOLUMES)?;
        let mp = dir.to_string_lossy().into_owned();
        match self.layers().check(&ds, VOLUMES, &[])? {
            Found::Missing => {
                let mut args = vec!["create".to_owned()];
                args.extend(self.layers().mark_args(VOLUMES, &[]));
                args.extend(["-o".to_owned(), format!("mountpoint={mp}")]);
                args.push(ds.to_string());
                self.layers().zfs.run(args)?;
            }
            Found::Ours(_) => self.mount_at(&ds, &mp)?,
        }
        for (child, at, verdict) in self.layers().check_children(&ds, VOLUME)? {
            match verdict {
                Ok(mounted) => {
                    if at.starts_with('/') && !mounted {
                        self.layers()
                            .zfs
                            .run_while_busy(&["mount", child.as_str()])?;
                    }
                }
                Err(e) => {
                    tracing::warn!(dataset = %child, mountpoint = %at, error = %e, "a dataset among the volumes is not the store's; left alone")
                }
            }
        }
        Ok(())
    }

    /// Makes volume `id`'s dataset mounted at `at` with `quota` bytes (none: no quota), or
    /// sets the quota of the one there; a dataset of that name that is not the store's is
    /// refused.
    pub(crate) fn make_volume(
        &self,
        id: &str,
        at: &Path,
        quota: Option<u64>,
    ) -> Result<(), ZfsStoreError> {
        let ds = self.layers().parent().child(VOLUMES)?.child(id)?;
        let quota = format!(
            "quota={}",
            quota.map_or("none".to_owned(), |q| q.to_string())
        );
        match self.layers().check(&ds, VOLUME, &[])? {
            Found::Missing => {
                let mut args = vec!["create".to_owned()];
                args.extend(self.layers().mark_args(VOLUME, &[]));
                args.extend([
                    "-o".to_owned(),
                    format!("mountpoint={}", at.to_string_lossy()),
                    "-o".to_owned(),
                    quota,
                    ds.to_string(),
                ]);
                self.layers().zfs.run(args)?;
            }
            Found::Ours(_) => {
                self.layers()
                    .zfs
                    .run(["set", quota.as_str(), ds.as_str()])?;
                self.mount_at(&ds, &at.to_string_lossy())?;
            }
        }
        Ok(())
    }

    /// Destroys volume `id`'s dataset (its marks checked; a snapshot the store did not make
    /// refuses it). `false` when there is no such dataset.
    pub(crate) fn destroy_volume(&self, id: &str, at: &Path) -> Result<bool, ZfsStoreError> {
        let ds = self.layers().parent().child(VOLUMES)?.child(id)?;
        match self.layers().check(&ds, VOLUME, &[])? {
            Found::Missing => Ok(false),
            Found::Ours(_) => {
                self.layers().destroy_ours(&ds, &[])?;
                let _ = std::fs::remove_dir(at);
                Ok(true)
            }
        }
    }
}
