//! The `dir` provisioner's switch between roots: the pure moves of [`super::switch`] carried
//! out on the base directory (on the ZFS layer store each rename moves a clone's mount).
//!
//! ```text
//! <base>/.previous/<zone>/            the previous root, kept for a rollback
//! <base>/.previous/.aside/<zone>/     the current root while the previous one comes back
//! <base>/.previous/.switch/<zone>.json  the open switch: the generation to end at
//! <base>/<zone>/generation            the zonepath's generation (unique, from when it was filled)
//! ```
//!
//! Zone names never start with a dot, so nothing here is taken for a zone. A start settles
//! every open switch ([`DirProvisioner::settle_open_switches`]) before anything else looks at
//! a zone.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::switch::{Move, Slot, Slots, next_move, update_moves};
use super::{DirProvisioner, ProvisionError, Provisioner, ZoneDescription};
use crate::owner::write_atomic;

/// The file naming a zonepath's generation.
pub(super) const GENERATION_FILE: &str = "generation";

/// An open switch: the zone must end at `target` unless confirmed.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Journal {
    /// The generation the zone ends at when the switch is not confirmed.
    target: String,
    /// The staged root of an update (gone once placed).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    staging: Option<PathBuf>,
}

/// A generation no other zonepath has: the time and a counter.
pub(super) fn new_generation() -> String {
    static N: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    format!("{nanos:x}.{}.{n}", std::process::id())
}

fn exists(p: &Path) -> bool {
    std::fs::symlink_metadata(p).is_ok()
}

impl DirProvisioner {
    fn kept_dir(&self) -> PathBuf {
        self.base().join(".previous")
    }

    fn journal_path(&self, zone: &str) -> PathBuf {
        self.kept_dir().join(".switch").join(format!("{zone}.json"))
    }

    fn slot_path(&self, zone: &str, slot: Slot, staging: Option<&Path>) -> Option<PathBuf> {
        Some(match slot {
            Slot::Current => self.base().join(zone),
            Slot::Previous => self.kept_dir().join(zone),
            Slot::Aside => self.kept_dir().join(".aside").join(zone),
            Slot::Staging => staging?.to_owned(),
        })
    }

    /// The generation of the zonepath at `path`; one made before generations were recorded is
    /// given one now (it never moved while it had none).
    fn generation_of(&self, zone: &str, path: &Path) -> Result<Option<String>, ProvisionError> {
        if !exists(path) {
            return Ok(None);
        }
        let file = path.join(GENERATION_FILE);
        match std::fs::read_to_string(&file) {
            Ok(g) => Ok(Some(g.trim().to_owned())),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let g = new_generation();
                write_atomic(&file, g.as_bytes()).map_err(self.io(
                    zone,
                    "recording the generation",
                    &file,
                ))?;
                Ok(Some(g))
            }
            Err(e) => Err(self.io(zone, "reading the generation", &file)(e)),
        }
    }

    fn observe(&self, zone: &str, staging: Option<&Path>) -> Result<Slots, ProvisionError> {
        let at = |slot| match self.slot_path(zone, slot, staging) {
            Some(p) => self.generation_of(zone, &p),
            None => Ok(None),
        };
        Ok(Slots {
            current: at(Slot::Current)?,
            previous: at(Slot::Previous)?,
            aside: at(Slot::Aside)?,
            staging: at(Slot::Staging)?,
        })
    }

    fn read_journal(&self, zone: &str) -> Result<Option<Journal>, ProvisionError> {
        let p = self.journal_path(zone);
        match std::fs::read(&p) {
            Ok(b) => serde_json::from_slice(&b)
                .map(Some)
                .map_err(|e| self.io(zone, "parsing", &p)(std::io::Error::other(e))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(self.io(zone, "reading", &p)(e)),
        }
    }

    fn write_journal(&self, zone: &str, j: &Journal) -> Result<(), ProvisionError> {
        let p = self.journal_path(zone);
        self.step(zone, "open the switch")?;
        let dir = p.parent().expect("the journal is in a directory");
        std::fs::create_dir_all(dir).map_err(self.io(zone, "creating", dir))?;
        let bytes = serde_json::to_vec_pretty(j).expect("a journal serialises");
        write_atomic(&p, &bytes).map_err(self.io(zone, "writing", &p))
    }

    fn close_journal(&self, zone: &str, step: &str) -> Result<(), ProvisionError> {
        let p = self.journal_path(zone);
        if !exists(&p) {
            return Ok(());
        }
        self.step(zone, step)?;
        std::fs::remove_file(&p).map_err(self.io(zone, "removing", &p))
    }

    fn move_name(m: Move) -> &'static str {
        match m {
            Move::Discard(Slot::Previous) => "discard the previous zonepath",
            Move::Discard(Slot::Aside) => "discard the zonepath set aside",
            Move::Discard(Slot::Staging) => "discard the staged zonepath",
            Move::Discard(Slot::Current) => "discard the current zonepath",
            Move::Rename(Slot::Current, Slot::Previous) => "move the old zonepath aside",
            Move::Rename(Slot::Staging, Slot::Current) => "place the new zonepath",
            Move::Rename(Slot::Current, Slot::Aside) => "set the current zonepath aside",
            Move::Rename(Slot::Previous, Slot::Current) => "put the previous zonepath back",
            Move::Rename(Slot::Aside, Slot::Previous) => "keep the zonepath set aside as previous",
            Move::Rename(_, _) => "move a zonepath",
        }
    }

    /// One move on the file system (or the datasets), asking the step hook first.
    fn carry_out(&self, zone: &str, m: Move, staging: Option<&Path>) -> Result<(), ProvisionError> {
        let path = |s| {
            self.slot_path(zone, s, staging)
                .expect("a move names a slot that has a path")
        };
        self.step(zone, Self::move_name(m))?;
        match m {
            Move::Rename(from, to) => {
                let (from, to) = (path(from), path(to));
                if let Some(dir) = to.parent() {
                    std::fs::create_dir_all(dir).map_err(self.io(zone, "creating", dir))?;
                }
                self.rename(&from, &to)
                    .map_err(self.io(zone, "moving a zonepath", &from))
            }
            Move::Discard(s) => {
                let from = path(s);
                let trash = self.trash_path(zone);
                self.rename(&from, &trash).map_err(self.io(
                    zone,
                    "moving a zonepath into the trash",
                    &from,
                ))?;
                match self.remove_tree(zone, &trash) {
                    Err(e @ ProvisionError::Interrupted { .. }) => Err(e),
                    Err(e) => {
                        tracing::warn!(zone, error = %e, "removing a discarded zonepath failed; it stays in .trash");
                        Ok(())
                    }
                    Ok(()) => Ok(()),
                }
            }
        }
    }

    /// Places the filled `staging` root as `zone`: in one rename when the zone is new; else
    /// with a journal naming the running generation, the previous root discarded and the
    /// running one kept as the previous root. The switch stays open until confirmed.
    pub(super) fn switch_in(&self, zone: &str, staging: &Path) -> Result<(), ProvisionError> {
        let zonepath = self.base().join(zone);
        if !exists(&zonepath) {
            self.step(zone, "place the zonepath")?;
            return self.rename(staging, &zonepath).map_err(self.io(
                zone,
                "placing the zone",
                &zonepath,
            ));
        }
        self.own(zone, &zonepath)?;
        // A switch left open (not confirmed) is settled before another begins.
        self.settle(zone)?;
        let target = self
            .generation_of(zone, &zonepath)?
            .expect("the zonepath exists");
        let journal = Journal {
            target,
            staging: Some(staging.to_owned()),
        };
        self.write_journal(zone, &journal)?;
        let slots = self.observe(zone, Some(staging))?;
        for m in update_moves(&slots) {
            if let Err(e) = self.carry_out(zone, m, Some(staging)) {
                // A crash leaves it to the next start; a move that failed is undone now,
                // so the old zone runs again.
                if !matches!(e, ProvisionError::Interrupted { .. })
                    && let Err(u) = self.settle(zone)
                {
                    tracing::warn!(zone, error = %validator::error_chain(&u), "undoing a failed switch failed; the next start settles it");
                }
                return Err(e);
            }
        }
        Ok(())
    }

    /// Brings the zone to its open switch's target, one observed move at a time, and closes
    /// the switch; `None` when none is open.
    pub(super) fn settle(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        let Some(j) = self.read_journal(zone)? else {
            return Ok(None);
        };
        let staging = j.staging.as_deref();
        // Each move empties a slot or fills `Current`: a handful at most.
        for _ in 0..8 {
            let slots = self.observe(zone, staging)?;
            match next_move(&j.target, &slots) {
                Some(m) => self.carry_out(zone, m, staging)?,
                None => break,
            }
        }
        self.close_journal(zone, "close the switch")?;
        Provisioner::current(self, zone)
    }

    /// Ends an open switch where it stands (the new zone was found ready).
    pub(super) fn confirm_switch(&self, zone: &str) -> Result<(), ProvisionError> {
        self.close_journal(zone, "confirm the switch")
    }

    /// The previous root to the front, the current one kept as previous.
    pub(super) fn roll_back(&self, zone: &str) -> Result<ZoneDescription, ProvisionError> {
        self.settle(zone)?;
        let prev = self.kept_dir().join(zone);
        if !exists(&prev) {
            return Err(ProvisionError::NoPrevious {
                zone: zone.to_owned(),
            });
        }
        self.own(zone, &prev)?;
        let target = self.generation_of(zone, &prev)?.expect("it exists");
        // The running one gets its generation before it moves.
        self.generation_of(zone, &self.base().join(zone))?;
        self.write_journal(
            zone,
            &Journal {
                target,
                staging: None,
            },
        )?;
        self.settle(zone)?
            .ok_or_else(|| ProvisionError::NoPrevious {
                zone: zone.to_owned(),
            })
    }

    /// Whether a switch of the zone is open (not yet confirmed or undone).
    pub(super) fn switch_open(&self, zone: &str) -> Result<bool, ProvisionError> {
        Ok(self.read_journal(zone)?.is_some())
    }

    /// Whether a previous root of ours is kept with its root file system (an illumos zone
    /// whose install failed was uninstalled, which deletes the root, before it was kept).
    pub(super) fn previous_root_kept(&self, zone: &str) -> Result<bool, ProvisionError> {
        let p = self.kept_dir().join(zone);
        if !exists(&p) {
            return Ok(false);
        }
        self.own(zone, &p)?;
        Ok(p.join("root").is_dir())
    }

    /// The previous root's description, when one is kept and ours.
    pub(super) fn previous_description(
        &self,
        zone: &str,
    ) -> Result<Option<ZoneDescription>, ProvisionError> {
        let p = self.kept_dir().join(zone);
        if !exists(&p) {
            return Ok(None);
        }
        self.own(zone, &p)?;
        let file = p.join("zone.json");
        let bytes = std::fs::read(&file).map_err(self.io(zone, "reading", &file))?;
        serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| self.io(zone, "parsing", &file)(std::io::Error::other(e)))
    }

    /// Removes what is kept for a removed zone: an open switch is settled first (so the
    /// current zonepath is the one removed), then the previous root goes.
    pub(super) fn discard_kept(&self, zone: &str) -> Result<(), ProvisionError> {
        self.settle(zone)?;
        for slot in [Slot::Aside, Slot::Previous] {
            let p = self.slot_path(zone, slot, None).expect("a kept slot");
            if exists(&p) {
                self.own(zone, &p)?;
                self.carry_out(zone, Move::Discard(slot), None)?;
            }
        }
        Ok(())
    }

    /// The zones with a switch open (journal written, not yet confirmed or settled).
    pub(super) fn open_switch_zones(&self) -> Vec<String> {
        let dir = self.kept_dir().join(".switch");
        let Ok(entries) = std::fs::read_dir(&dir) else {
            return Vec::new();
        };
        let mut zones: Vec<String> = entries
            .flatten()
            .filter_map(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.strip_suffix(".json").map(str::to_owned)
            })
            .collect();
        zones.sort();
        zones
    }

    /// At start: every open switch (a worker killed in the middle of one) is settled on its
    /// target. One that cannot be is logged and left for the zone's next reconcile.
    pub(super) fn settle_open_switches(&self) {
        for zone in self.open_switch_zones() {
            match self.settle(&zone) {
                Ok(_) => tracing::info!(zone, "an interrupted switch was settled"),
                Err(err) => {
                    tracing::warn!(zone, error = %validator::error_chain(&err), "settling an interrupted switch failed")
                }
            }
        }
    }
}
