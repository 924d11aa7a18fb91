//! Volumes: persistent storage outside a zone's root, kept across image updates, worker
//! restarts and re-creations of the zone.
//!
//! A zone's volumes are its manifest's `[[volumes]]` and the image config's `Volumes` (the
//! manifest's entry wins for a path both name). Each is a directory outside the zonepath,
//! mounted into the zone with zonecfg `add fs` (`type=lofs`), so replacing or removing the
//! zonepath never touches it:
//!
//! ```text
//! <base>/.volumes/                   mark (kind volumes); on ZFS the dataset <parent>/volumes
//! <base>/.volumes/<id>/              one volume, mark (kind volume); on ZFS the dataset
//!                                    <parent>/volumes/<id>, with quota = its size
//! <base>/.volumes/<id>/volume.json   VolumeRecord: the zone holding it, path, size, reclaim,
//!                                    since when it is released
//! <base>/.volumes/<id>/data/         what the zone sees at the path; present once seeded
//! <base>/.volumes/<id>/data.seeding/ a seed cut short (removed and made again)
//! ```
//!
//! A volume's id is its `name`, or `<zone>.<path>` (the path's `/` as `-`, other bytes
//! outside `[A-Za-z0-9_-]` as `_`) for one without: names have no `.`, so the two never meet.
//! On first use `data/` is seeded from the image's content at the path, with its owners and
//! modes (Docker's named-volume copy-up): copied into `data.seeding/` and renamed, so a
//! worker killed while seeding seeds again and never mounts half a seed.
//!
//! A volume no zone holds any more is *released* (`released_unix`); `reclaim = "delete"`
//! removes it `gc_grace` later, `"retain"` keeps it until a zone names it again.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::owner::{self, OwnerMark, OwnershipError, write_atomic};
use crate::unpack::RootDir;
use crate::zfs::{ZfsStoreError, ZoneDatasets};
use crate::zone::{Reclaim, ZoneSpec, size_bytes};

/// The directory of volumes under a provisioner's base.
pub const VOLUMES_DIR: &str = ".volumes";
const RECORD: &str = "volume.json";
const DATA: &str = "data";
const SEEDING: &str = "data.seeding";

/// Refuses a volume path that is not absolute and normalised, or that zonecfg text cannot
/// hold unquoted-safe (quotes, backslashes, control characters).
pub fn check_volume_path(p: &str) -> Result<(), String> {
    if !p.starts_with('/') || p == "/" {
        return Err(format!("{p:?} is not an absolute path below /"));
    }
    if p.ends_with('/')
        || p.split('/')
            .skip(1)
            .any(|c| c.is_empty() || c == "." || c == "..")
    {
        return Err(format!(
            "{p:?} is not normalised (no empty, `.` or `..` components, no trailing /)"
        ));
    }
    if p.chars().any(|c| c == '"' || c == '\\' || c.is_control()) {
        return Err(format!(
            "{p:?} has a quote, backslash or control character, which zonecfg cannot take"
        ));
    }
    Ok(())
}

/// Refuses a volume name: a letter or digit, then letters, digits, `-` and `_` (no `.`: ids
/// of unnamed volumes have one), at most 64.
pub fn check_volume_name(n: &str) -> Result<(), String> {
    let ok = !n.is_empty()
        && n.len() <= 64
        && n.as_bytes()[0].is_ascii_alphanumeric()
        && n.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_'));
    if ok {
        Ok(())
    } else {
        Err(format!(
            "{n:?} is not a volume name (a letter or digit, then letters, digits, - and _; at most 64)"
        ))
    }
}

/// The id of an unnamed volume of `zone` at `path`.
fn anonymous_id(zone: &str, path: &str) -> String {
    let slug: String = path
        .trim_start_matches('/')
        .chars()
        .map(|c| match c {
            '/' => '-',
            c if c.is_ascii_alphanumeric() || c == '-' || c == '_' => c,
            _ => '_',
        })
        .collect();
    format!("{zone}.{slug}")
}

/// A volume as a zone is made with it: written into its description and its zonecfg.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AttachedVolume {
    /// The volume's id (its name, or `<zone>.<path>`).
    pub id: String,
    /// Where the zone sees it.
    pub path: String,
    /// The directory mounted there (`<base>/.volumes/<id>/data`), zonecfg's `special`.
    pub source: PathBuf,
    /// Its size in bytes (the dataset's quota on ZFS).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// What happens to it once no zone holds it.
    pub reclaim: Reclaim,
}

/// The volumes of a zone made from `spec` with an image whose config lists `image_volumes`,
/// their sources under `base`. The manifest's entries come first, then the image's paths the
/// manifest does not name. Errors name the field (`Volumes` of the image, or the manifest's).
pub fn wanted(
    spec: &ZoneSpec,
    image_volumes: &[String],
    base: &Path,
) -> Result<Vec<AttachedVolume>, (&'static str, String)> {
    let mut out: Vec<AttachedVolume> = Vec::new();
    for v in &spec.volumes {
        let id = match &v.name {
            Some(n) => n.clone(),
            None => anonymous_id(&spec.name, &v.path),
        };
        out.push(AttachedVolume {
            source: volume_dir(base, &id).join(DATA),
            id,
            path: v.path.clone(),
            size_bytes: v.size.as_deref().and_then(size_bytes),
            reclaim: v.reclaim.unwrap_or(spec.reclaim),
        });
    }
    for p in image_volumes {
        // The config's keys are paths; one written with a trailing `/` is the same volume.
        let path = if p.len() > 1 {
            p.trim_end_matches('/')
        } else {
            p
        };
        check_volume_path(path).map_err(|r| ("Volumes", r))?;
        if out.iter().any(|v| v.path == path) {
            continue;
        }
        let id = anonymous_id(&spec.name, path);
        out.push(AttachedVolume {
            source: volume_dir(base, &id).join(DATA),
            id,
            path: path.to_owned(),
            size_bytes: None,
            reclaim: spec.reclaim,
        });
    }
    for (i, v) in out.iter().enumerate() {
        if let Some(o) = out[..i].iter().find(|o| o.id == v.id) {
            return Err((
                "volumes",
                format!(
                    "{:?} and {:?} would be the same volume {:?}; give one a name",
                    o.path, v.path, v.id
                ),
            ));
        }
    }
    Ok(out)
}

/// Where volume `id` lives under the provisioner's base `base`.
pub fn volume_dir(base: &Path, id: &str) -> PathBuf {
    base.join(VOLUMES_DIR).join(id)
}

/// A volume's record (`volume.json`), what `rdctl worker status` lists.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeRecord {
    /// The volume's id.
    pub id: String,
    /// The zone that holds it, or last held it.
    pub zone: String,
    /// Where that zone sees it.
    pub path: String,
    /// Its size in bytes, when sized.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size_bytes: Option<u64>,
    /// What happens to it once released.
    pub reclaim: Reclaim,
    /// Since when no zone holds it (seconds since the epoch); `None` while a zone does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_unix: Option<u64>,
}

/// A volume could not be made, seeded, read or removed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VolumeError {
    /// A file operation failed.
    #[error("volume {volume}: {op} ({path}) failed")]
    Io {
        /// The volume's id.
        volume: String,
        /// The operation.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A directory is not ours.
    #[error("volume {volume}")]
    Ownership {
        /// The volume's id.
        volume: String,
        /// The cause.
        #[source]
        source: OwnershipError,
    },
    /// The volume's dataset on the ZFS layer store.
    #[error("volume {volume}")]
    Zfs {
        /// The volume's id.
        volume: String,
        /// The cause.
        #[source]
        source: ZfsStoreError,
    },
    /// Another zone holds the volume.
    #[error("volume {volume}: held by zone {holder}; a volume is mounted in one zone at a time")]
    InUse {
        /// The volume's id.
        volume: String,
        /// The zone holding it.
        holder: String,
    },
    /// Stopped before `step` as if the process had died (fault injection).
    #[error("volume {volume}: interrupted before {step}")]
    Interrupted {
        /// The volume's id.
        volume: String,
        /// The step that did not run.
        step: String,
    },
    /// A size on the directory store, which cannot limit a directory.
    #[error(
        "volume {volume}: size: the directory layer store cannot limit a volume; set [layer_store] kind = \"zfs\" in worker.toml, or remove the size"
    )]
    Unsized {
        /// The volume's id.
        volume: String,
    },
}

/// The volumes under a provisioner's base, as directories or, on the ZFS layer store, as
/// datasets (see the module docs). Cheap to clone.
#[derive(Debug, Clone)]
pub struct Volumes {
    dir: PathBuf,
    worker_id: String,
    datasets: Option<ZoneDatasets>,
}

impl Volumes {
    /// Claims `<base>/.volumes` (the `volumes` dataset mounted there with `datasets`) and
    /// removes seeds a crash cut short.
    pub fn open(
        base: &Path,
        worker_id: &str,
        datasets: Option<ZoneDatasets>,
    ) -> Result<Volumes, VolumeError> {
        let dir = base.join(VOLUMES_DIR);
        if let Some(d) = &datasets {
            d.open_volumes(&dir).map_err(|source| VolumeError::Zfs {
                volume: String::new(),
                source,
            })?;
        }
        owner::claim(&dir, &OwnerMark::new(worker_id, "volumes")).map_err(|source| {
            VolumeError::Ownership {
                volume: String::new(),
                source,
            }
        })?;
        let v = Volumes {
            dir,
            worker_id: worker_id.to_owned(),
            datasets,
        };
        for r in v.list()? {
            let seeding = v.dir.join(&r.id).join(SEEDING);
            if seeding.exists() {
                std::fs::remove_dir_all(&seeding).map_err(v.io(&r.id, "removing", &seeding))?;
            }
        }
        Ok(v)
    }

    fn io(
        &self,
        id: &str,
        op: &'static str,
        path: &Path,
    ) -> impl FnOnce(std::io::Error) -> VolumeError + use<> {
        let (volume, path) = (id.to_owned(), path.to_owned());
        move |source| VolumeError::Io {
            volume,
            op,
            path,
            source,
        }
    }

    fn mark(&self) -> OwnerMark {
        OwnerMark::new(&self.worker_id, "volume")
    }

    fn read(&self, id: &str) -> Result<Option<VolumeRecord>, VolumeError> {
        let p = self.dir.join(id).join(RECORD);
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| self.io(id, "parsing", &p)(std::io::Error::other(e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(id, "reading", &p)(e)),
        }
    }

    fn write(&self, r: &VolumeRecord) -> Result<(), VolumeError> {
        let p = self.dir.join(&r.id).join(RECORD);
        let bytes = serde_json::to_vec_pretty(r).expect("a record serialises");
        write_atomic(&p, &bytes).map_err(self.io(&r.id, "writing", &p))
    }

    /// Makes volume `v` for `zone` when it does not exist (a dataset with its quota on ZFS),
    /// seeds it from `root` at its path when it was never seeded, and records `zone` as its
    /// holder. A volume another zone holds is refused. `stop_before` is asked before each
    /// change; `true` stops there as a crash would ([`VolumeError::Interrupted`], the
    /// provisioner's crash injection).
    pub fn attach(
        &self,
        zone: &str,
        v: &AttachedVolume,
        root: &RootDir,
        chown: bool,
        stop_before: &dyn Fn(&str) -> bool,
    ) -> Result<(), VolumeError> {
        let id = v.id.as_str();
        let step = |name: String| {
            if stop_before(&name) {
                Err(VolumeError::Interrupted {
                    volume: id.to_owned(),
                    step: name,
                })
            } else {
                Ok(())
            }
        };
        let at = self.dir.join(id);
        if let Some(r) = self.read(id)?
            && r.zone != zone
            && r.released_unix.is_none()
        {
            return Err(VolumeError::InUse {
                volume: id.to_owned(),
                holder: r.zone,
            });
        }
        step(format!("create volume {id}"))?;
        match &self.datasets {
            Some(d) => d
                .make_volume(id, &at, v.size_bytes)
                .map_err(|source| VolumeError::Zfs {
                    volume: id.to_owned(),
                    source,
                })?,
            None if v.size_bytes.is_some() => {
                return Err(VolumeError::Unsized {
                    volume: id.to_owned(),
                });
            }
            None => {}
        }
        owner::claim(&at, &self.mark()).map_err(|source| VolumeError::Ownership {
            volume: id.to_owned(),
            source,
        })?;
        let data = at.join(DATA);
        if !data.exists() {
            step(format!("seed volume {id}"))?;
            let seeding = at.join(SEEDING);
            if seeding.exists() {
                std::fs::remove_dir_all(&seeding).map_err(self.io(id, "removing", &seeding))?;
            }
            root.copy_out(&v.path, &seeding, chown).map_err(self.io(
                id,
                "seeding from the image into",
                &seeding,
            ))?;
            step(format!("publish the seed of volume {id}"))?;
            std::fs::rename(&seeding, &data).map_err(self.io(
                id,
                "publishing the seed as",
                &data,
            ))?;
        }
        step(format!("record volume {id}"))?;
        self.write(&VolumeRecord {
            id: id.to_owned(),
            zone: zone.to_owned(),
            path: v.path.clone(),
            size_bytes: v.size_bytes,
            reclaim: v.reclaim,
            released_unix: None,
        })
    }

    /// Every volume of ours with its record (one cut short before its record was written
    /// has none and is left out).
    pub fn list(&self) -> Result<Vec<VolumeRecord>, VolumeError> {
        let entries = std::fs::read_dir(&self.dir).map_err(self.io("", "listing", &self.dir))?;
        let mut out = Vec::new();
        for e in entries.flatten() {
            let id = e.file_name().to_string_lossy().into_owned();
            if id.starts_with('.') || owner::check(&e.path(), &self.mark()).is_err() {
                continue;
            }
            if let Some(r) = self.read(&id)? {
                out.push(r);
            }
        }
        out.sort_by(|a, b| a.id.cmp(&b.id));
        Ok(out)
    }

    /// Brings the records in line with what the zones hold: `held` maps each volume a zone
    /// has now to that zone's reclaim for it; any other volume not yet released is released
    /// at `since(zone)`. Then every released `delete` volume released at least `grace` ago is
    /// removed (one that cannot be is logged and left for the next call). Returns the ids
    /// removed.
    pub fn reconcile(
        &self,
        held: &std::collections::HashMap<String, (String, Reclaim)>,
        since: &dyn Fn(&str) -> u64,
        grace: std::time::Duration,
        now: u64,
    ) -> Result<Vec<String>, VolumeError> {
        let mut removed = Vec::new();
        for mut r in self.list()? {
            match held.get(&r.id) {
                Some((zone, reclaim)) => {
                    if (&r.zone, r.reclaim, r.released_unix) != (zone, *reclaim, None) {
                        r.zone.clone_from(zone);
                        r.reclaim = *reclaim;
                        r.released_unix = None;
                        self.write(&r)?;
                    }
                    continue;
                }
                None if r.released_unix.is_none() => {
                    r.released_unix = Some(since(&r.zone));
                    tracing::info!(volume = %r.id, zone = %r.zone, reclaim = ?r.reclaim, "volume released");
                    self.write(&r)?;
                }
                None => {}
            }
            if r.reclaim == Reclaim::Delete
                && r.released_unix
                    .is_some_and(|t| now.saturating_sub(t) >= grace.as_secs())
            {
                // One that cannot go (an operator's snapshot on its dataset) is that volume's
                // problem: logged, tried again next pass; the others go on.
                match self.remove(&r.id) {
                    Ok(()) => {
                        tracing::info!(volume = %r.id, zone = %r.zone, "released volume removed (reclaim = \"delete\")");
                        removed.push(r.id);
                    }
                    Err(e) => {
                        tracing::warn!(volume = %r.id, error = %validator::error_chain(&e), "removing a released volume failed; it stays until the next pass");
                    }
                }
            }
        }
        Ok(removed)
    }

    /// Releases every volume `zone` holds, as of `since` (the zone was removed): another
    /// zone may take a named one in the same pass.
    pub fn release(&self, zone: &str, since: u64) -> Result<(), VolumeError> {
        for mut r in self.list()? {
            if r.zone == zone && r.released_unix.is_none() {
                r.released_unix = Some(since);
                tracing::info!(volume = %r.id, zone, reclaim = ?r.reclaim, "volume released");
                self.write(&r)?;
            }
        }
        Ok(())
    }

    /// Removes volume `id`: its dataset (marks checked, an operator's snapshot refuses it)
    /// or its directory (mark checked, the mark last).
    fn remove(&self, id: &str) -> Result<(), VolumeError> {
        let at = self.dir.join(id);
        let ownership = |source| VolumeError::Ownership {
            volume: id.to_owned(),
            source,
        };
        owner::check(&at, &self.mark()).map_err(ownership)?;
        if let Some(d) = &self.datasets
            && d.destroy_volume(id, &at)
                .map_err(|source| VolumeError::Zfs {
                    volume: id.to_owned(),
                    source,
                })?
        {
            return Ok(());
        }
        owner::remove_owned(&at, &self.mark()).map_err(ownership)
    }
}
