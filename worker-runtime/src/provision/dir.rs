//! The `dir` provisioner: zonepaths under a base directory.
//!
//! ```text
//! <base>/.rdctl-owner                 mark (kind zone-base)
//! <base>/.staging/<zone>.<n>/         roots being built (mark kind staging)
//! <base>/.trash/<zone>.<n>/           replaced zonepaths on their way out
//! <base>/.volumes/<id>/               volumes, outside every zonepath (`crate::volume`)
//! <base>/.previous/<zone>/            the zone's previous root, kept for a rollback
//! <base>/<zone>/.rdctl-owner          mark (kind zone)
//! <base>/<zone>/root/                 the verified root file system
//! <base>/<zone>/zone.json             the ZoneDescription
//! <base>/<zone>/zonecfg.txt           zonecfg -f input
//! <base>/<zone>/commands.txt          zonecfg/zoneadm invocations for create, stop, remove
//! <base>/<zone>/entrypoint.xml        SMF manifest of the entrypoint (also in the root)
//! ```
//!
//! A zonepath appears by one rename of a complete staging directory; a replaced one is kept as
//! the previous root in `.previous` (see `previous`, the switch's journal and moves), so after
//! a crash at any step the next start has `<base>/<zone>` be the old or the new zone.
//! What is in `.trash` is removed entry by entry, its mark last (the step hook is asked before
//! each entry, so injected crashes land inside the removal too).
//!
//! With the ZFS layer store ([`DirProvisioner::on_datasets`]) the same layout is made of
//! datasets ([`ZoneDatasets`]): a staging root is a clone of the image's top snapshot, and
//! the renames and removals are `zfs rename` and `zfs destroy` of datasets carrying the
//! store's marks.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use super::illumos::{
    ENTRYPOINT_MANIFEST_PATH, command_plan, safe_base_path, smf_manifest, zonecfg_script,
};
use super::{Capabilities, ProvisionError, Provisioner, StepHook, ZoneDescription, describe};
use crate::owner::{self, MARK_FILE, OwnerMark, write_atomic};
use crate::unpack::RootDir;
use crate::verify::VerifiedRoot;
use crate::volume::Volumes;
use crate::zfs::ZoneDatasets;
use crate::zone::ZoneSpec;

static COUNTER: AtomicU64 = AtomicU64::new(0);

/// Places zone roots and descriptions under a base directory.
#[derive(Clone)]
pub struct DirProvisioner {
    base: PathBuf,
    worker_id: String,
    hook: Option<StepHook>,
    datasets: Option<ZoneDatasets>,
    volumes: Option<Volumes>,
}

impl std::fmt::Debug for DirProvisioner {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DirProvisioner")
            .field("base", &self.base)
            .field("worker_id", &self.worker_id)
            .field("hook", &self.hook.is_some())
            .field("datasets", &self.datasets)
            .field("volumes", &self.volumes)
            .finish()
    }
}

impl DirProvisioner {
    /// Claims `base` (absolute, no quotes or control characters: it appears in zonecfg text)
    /// and removes leftovers of interrupted runs from `.staging` and `.trash`.
    pub fn new(base: &Path, worker_id: &str) -> Result<DirProvisioner, ProvisionError> {
        Self::open(base, worker_id, None, true)
    }

    /// As [`DirProvisioner::new`] (or [`DirProvisioner::on_datasets`] with `datasets`, whose
    /// base is then the base), but a switch a killed worker left open stays open: for the
    /// illumos provisioner, which must bring the system zone down before its zonepath moves
    /// (an `uninstall` of a half-installed zone deletes whatever root is in the zonepath),
    /// then settles it
    /// ([`super::IllumosProvisioner::settle_at_start`]).
    pub fn for_zone_tools(
        base: &Path,
        worker_id: &str,
        datasets: Option<ZoneDatasets>,
    ) -> Result<DirProvisioner, ProvisionError> {
        let base = datasets.as_ref().map_or(base, |d| d.base()).to_owned();
        Self::open(&base, worker_id, datasets, false)
    }

    /// The provisioner on the ZFS layer store: zonepaths, staging roots and the trash are
    /// datasets of `datasets`, under its base directory.
    pub fn on_datasets(
        datasets: ZoneDatasets,
        worker_id: &str,
    ) -> Result<DirProvisioner, ProvisionError> {
        let base = datasets.base().to_owned();
        Self::open(&base, worker_id, Some(datasets), true)
    }

    /// The ZFS zonepath datasets, when the provisioner is on the layer store.
    pub fn datasets(&self) -> Option<&ZoneDatasets> {
        self.datasets.as_ref()
    }

    fn open(
        base: &Path,
        worker_id: &str,
        datasets: Option<ZoneDatasets>,
        settle: bool,
    ) -> Result<DirProvisioner, ProvisionError> {
        let err_zone = String::new();
        if !safe_base_path(base) {
            return Err(ProvisionError::Io {
                zone: err_zone,
                op: "using the zone base directory (it must be an absolute path without quotes, backslashes or control characters)",
                path: base.to_owned(),
                source: std::io::Error::from(std::io::ErrorKind::InvalidInput),
            });
        }
        owner::claim(base, &OwnerMark::new(worker_id, "zone-base")).map_err(|source| {
            ProvisionError::Ownership {
                zone: String::new(),
                source,
            }
        })?;
        let p = DirProvisioner {
            base: base.to_owned(),
            worker_id: worker_id.to_owned(),
            hook: None,
            datasets,
            volumes: None,
        };
        // A staging root is marked `staging` while it is built and `zone` once filled; an
        // interrupted run can leave either kind there, and replaced zones in `.trash`.
        for (sub, kinds) in [
            (".staging", &["staging", "zone"][..]),
            (".trash", &["zone"]),
        ] {
            let dir = base.join(sub);
            std::fs::create_dir_all(&dir).map_err(p.io("", "creating", &dir))?;
            let entries = std::fs::read_dir(&dir).map_err(p.io("", "listing", &dir))?;
            for e in entries.flatten() {
                let path = e.path();
                // A dataset of the store's goes whatever its files say (its ZFS marks are the
                // store's; a clone cut short may not have its file mark yet).
                match p.datasets.as_ref().map(|d| d.destroy(&path)) {
                    Some(Ok(true)) => continue,
                    Some(Err(err)) => {
                        tracing::warn!(path = %path.display(), error = %err, "leaving a leftover dataset that is not ours");
                        continue;
                    }
                    Some(Ok(false)) | None => {}
                }
                let kind = match owner::read_mark(&path) {
                    Ok(Some(m)) if kinds.contains(&m.kind.as_str()) => m.kind,
                    // A worker killed while it claimed a staging root leaves it without a
                    // mark and with nothing in it: that goes too.
                    Ok(None) if matches!(owner::remove_interrupted_claim(&path), Ok(true)) => {
                        continue;
                    }
                    _ => kinds[0].to_owned(),
                };
                // Only what carries our mark goes; anything else is left and logged.
                if let Err(err) = owner::remove_owned(&path, &OwnerMark::new(worker_id, &kind)) {
                    tracing::warn!(path = %path.display(), error = %err, "leaving a leftover that is not ours");
                }
            }
        }
        // A worker killed in the middle of switching a zone's root: the switch is finished
        // or undone before any zone is looked at.
        if settle {
            p.settle_open_switches();
        }
        Ok(p)
    }

    /// Calls `hook` before each step that changes the file system (fault injection: see
    /// [`StepHook`]).
    pub fn with_step_hook(mut self, hook: StepHook) -> Self {
        self.hook = Some(hook);
        self
    }

    /// Attaches each zone's volumes from `volumes` (made and seeded on first use) before its
    /// zonepath is placed; without it a zone with volumes is refused.
    pub fn with_volumes(mut self, volumes: Volumes) -> Self {
        self.volumes = Some(volumes);
        self
    }

    /// The volumes, when attached with [`DirProvisioner::with_volumes`].
    pub fn volumes(&self) -> Option<&Volumes> {
        self.volumes.as_ref()
    }

    /// The base directory.
    pub fn base(&self) -> &Path {
        &self.base
    }

    /// Asks the step hook whether to stop before `step`.
    pub(crate) fn step(&self, zone: &str, step: &str) -> Result<(), ProvisionError> {
        match &self.hook {
            Some(h) if h(zone, step) => Err(ProvisionError::Interrupted {
                zone: zone.to_owned(),
                step: step.to_owned(),
            }),
            _ => Ok(()),
        }
    }

    pub(super) fn io(
        &self,
        zone: &str,
        op: &'static str,
        path: &Path,
    ) -> impl FnOnce(std::io::Error) -> ProvisionError + use<> {
        let (zone, path) = (zone.to_owned(), path.to_owned());
        move |source| ProvisionError::Io {
            zone,
            op,
            path,
            source,
        }
    }

    fn zone_mark(&self) -> OwnerMark {
        OwnerMark::new(&self.worker_id, "zone")
    }

    /// A fresh staging path for `zone` (not yet created).
    pub fn new_staging_path(&self, zone: &str) -> PathBuf {
        let n = COUNTER.fetch_add(1, Ordering::Relaxed);
        self.staging_dir()
            .join(format!("{zone}.{}.{n}", std::process::id()))
    }

    pub(super) fn own(&self, zone: &str, path: &Path) -> Result<(), ProvisionError> {
        owner::check(path, &self.zone_mark()).map_err(|source| ProvisionError::Ownership {
            zone: zone.to_owned(),
            source,
        })
    }

    /// Writes the zone's files into the staging directory and re-marks it as a zone.
    fn fill(&self, d: &ZoneDescription, staging: &Path) -> Result<(), ProvisionError> {
        let z = d.zone.as_str();
        let zonecfg = zonecfg_script(d);
        let plan = command_plan(d, &d.zonepath.join("zonecfg.txt"));
        let json = serde_json::to_vec_pretty(d).expect("a description serialises");
        let files: [(&str, Option<Vec<u8>>); 4] = [
            ("zone.json", Some(json)),
            ("zonecfg.txt", Some(zonecfg.into_bytes())),
            ("commands.txt", Some(plan.into_bytes())),
            ("entrypoint.xml", smf_manifest(d).map(String::into_bytes)),
        ];
        for (name, bytes) in files {
            if let Some(b) = bytes {
                let p = staging.join(name);
                write_atomic(&p, &b).map_err(self.io(z, "writing", &p))?;
            }
        }
        let p = staging.join(super::previous::GENERATION_FILE);
        let generation = super::previous::new_generation();
        write_atomic(&p, generation.as_bytes()).map_err(self.io(z, "writing", &p))?;
        let mark = serde_json::to_vec_pretty(&self.zone_mark()).expect("a mark serialises");
        let p = staging.join(MARK_FILE);
        write_atomic(&p, &mark).map_err(self.io(z, "marking", &p))
    }

    /// Makes and seeds (from the verified root, before the entrypoint manifest is written
    /// into it) the zone's volumes that need it, and records the zone as their holder.
    fn attach_volumes(&self, d: &ZoneDescription, root: &RootDir) -> Result<(), ProvisionError> {
        if d.volumes.is_empty() {
            return Ok(());
        }
        let Some(volumes) = &self.volumes else {
            return Err(ProvisionError::Config {
                zone: d.zone.clone(),
                field: "volumes",
                reason: "this provisioner has no volume store".to_owned(),
            });
        };
        let chown = rustix::process::geteuid().is_root();
        for v in &d.volumes {
            let stop = |step: &str| self.step(&d.zone, step).is_err();
            volumes
                .attach(&d.zone, v, root, chown, &stop)
                .map_err(|e| match e {
                    crate::volume::VolumeError::Interrupted { step, .. } => {
                        ProvisionError::Interrupted {
                            zone: d.zone.clone(),
                            step,
                        }
                    }
                    e => ProvisionError::Volume {
                        zone: d.zone.clone(),
                        source: Box::new(e),
                    },
                })?;
        }
        Ok(())
    }

    pub(super) fn trash_path(&self, zone: &str) -> PathBuf {
        self.base.join(".trash").join(format!(
            "{zone}.{}.{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed)
        ))
    }

    /// A rename within the base: `zfs rename` when `from` is a dataset of the store's.
    pub(super) fn rename(&self, from: &Path, to: &Path) -> std::io::Result<()> {
        if let Some(d) = &self.datasets
            && d.rename(from, to).map_err(std::io::Error::other)?
        {
            return Ok(());
        }
        std::fs::rename(from, to)
    }

    /// Removes `path`, a zonepath of ours moved into `.trash`: a dataset of the store's by
    /// `zfs destroy` (its marks checked), a directory entry by entry after its mark was
    /// checked, asking the step hook before each entry, and its mark last, so a removal cut
    /// short leaves a directory in `.trash` that is still ours and goes at the next start.
    pub(super) fn remove_tree(&self, zone: &str, path: &Path) -> Result<(), ProvisionError> {
        if let Some(d) = &self.datasets
            && d.destroy(path)
                .map_err(|e| self.io(zone, "destroying", path)(std::io::Error::other(e)))?
        {
            return Ok(());
        }
        let owned = |source| ProvisionError::Ownership {
            zone: zone.to_owned(),
            source,
        };
        owner::check(path, &self.zone_mark()).map_err(owned)?;
        let entries = std::fs::read_dir(path).map_err(self.io(zone, "listing", path))?;
        let mut names: Vec<_> = entries
            .flatten()
            .map(|e| e.file_name())
            .filter(|n| n != MARK_FILE)
            .collect();
        names.sort();
        for name in names {
            self.step(zone, &format!("remove {}", name.to_string_lossy()))?;
            let p = path.join(&name);
            let is_dir = std::fs::symlink_metadata(&p).is_ok_and(|m| m.is_dir());
            let removed = if is_dir {
                std::fs::remove_dir_all(&p)
            } else {
                std::fs::remove_file(&p)
            };
            removed.map_err(self.io(zone, "removing", &p))?;
        }
        owner::remove_owned(path, &self.zone_mark()).map_err(owned)
    }
}

impl Provisioner for DirProvisioner {
    fn staging_dir(&self) -> PathBuf {
        self.base.join(".staging")
    }

    fn current(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        let zonepath = self.base.join(zone);
        if std::fs::symlink_metadata(&zonepath).is_err() {
            return Ok(None);
        }
        self.own(zone, &zonepath)?;
        let p = zonepath.join("zone.json");
        let bytes = std::fs::read(&p).map_err(self.io(zone, "reading", &p))?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| self.io(zone, "parsing", &p)(std::io::Error::other(e)))
    }

    fn provision(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        let d = self.provision_unconfirmed(spec, root)?;
        self.confirm_switch(&spec.name)?;
        Ok(d)
    }

    fn provision_unconfirmed(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        let zone = spec.name.as_str();
        let zonepath = self.base.join(zone);
        if std::fs::symlink_metadata(&zonepath).is_ok() {
            // Refuse before any work when the zonepath is not ours.
            self.own(zone, &zonepath)?;
        }
        let d = describe(spec, root.image(), zonepath.clone())?;
        {
            // Closed before the root is placed: an open descriptor in a staging dataset would
            // keep ZFS from moving its mount.
            let rd = RootDir::open(&root.root()).map_err(self.io(zone, "opening", &zonepath))?;
            self.attach_volumes(&d, &rd)?;
            if let Some(xml) = smf_manifest(&d) {
                rd.write_file(ENTRYPOINT_MANIFEST_PATH, xml.as_bytes(), 0o444)
                    .map_err(self.io(zone, "writing the entrypoint manifest into", &zonepath))?;
            }
        }
        let (staging, _) = root.into_staging();
        let result = self
            .step(zone, "fill the staging zonepath")
            .and_then(|()| self.fill(&d, &staging))
            .and_then(|()| self.switch_in(zone, &staging));
        // An interruption stands for a crash: nothing is cleaned up (the next start does it).
        if result
            .as_ref()
            .is_err_and(|e| !matches!(e, ProvisionError::Interrupted { .. }))
            && staging.exists()
        {
            // Ours either way (marked staging or zone): nothing half-made stays.
            let removed = match self.datasets.as_ref().map(|d| d.destroy(&staging)) {
                Some(Ok(true)) => Ok(()),
                Some(Err(e)) => Err(std::io::Error::other(e)),
                Some(Ok(false)) | None => std::fs::remove_dir_all(&staging),
            };
            if let Err(e) = removed {
                tracing::warn!(path = %staging.display(), error = %e, "removing a failed staging root");
            }
        }
        result.map(|()| d)
    }

    fn remove(&self, zone: &str) -> Result<(), ProvisionError> {
        self.discard_kept(zone)?;
        let zonepath = self.base.join(zone);
        if std::fs::symlink_metadata(&zonepath).is_err() {
            return Ok(());
        }
        self.own(zone, &zonepath)?;
        // Out of the way in one rename, then deleted: a crash leaves it in `.trash`, which the
        // next start empties, never a half-deleted zonepath.
        let trash = self.trash_path(zone);
        self.step(zone, "move the zonepath aside")?;
        self.rename(&zonepath, &trash).map_err(self.io(
            zone,
            "moving the zone aside",
            &zonepath,
        ))?;
        self.step(zone, "remove the zonepath")?;
        self.remove_tree(zone, &trash)
    }

    fn zones(&self) -> Result<Vec<String>, ProvisionError> {
        let mut out = Vec::new();
        let entries = std::fs::read_dir(&self.base).map_err(self.io("", "listing", &self.base))?;
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            if owner::check(&e.path(), &self.zone_mark()).is_ok() {
                out.push(name);
            }
        }
        out.sort();
        Ok(out)
    }

    fn confirm(&self, zone: &str) -> Result<(), ProvisionError> {
        self.confirm_switch(zone)
    }

    fn undo(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        self.settle(zone)
    }

    fn previous(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        self.previous_description(zone)
    }

    fn rollback(&self, zone: &str) -> Result<ZoneDescription, ProvisionError> {
        self.roll_back(zone)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            brands: Vec::new(),
            caps_cpu: false,
            caps_memory: false,
            runs_processes: false,
        }
    }
}
