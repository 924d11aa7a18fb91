//! Going back to a zone's previous root on illumos: an update keeps the replaced zone detached
//! (its root whole in the zonepath, which the `dir` switch keeps as the previous root), and
//! undoing it or `rdctl worker rollback` detaches the running zone, swaps the zonepaths, and
//! configures, attaches (`zoneadm attach -F`) and boots the one put back. A start after a
//! kill settles what was cut short ([`IllumosProvisioner::settle_at_start`]).

use super::{CommandRunner, IllumosProvisioner, attach_command, create_commands, stop_commands};
use crate::provision::{ProvisionError, Provisioner, ZoneDescription};
use crate::verify::VerifiedRoot;
use crate::zone::ZoneSpec;

impl<R: CommandRunner> IllumosProvisioner<R> {
    /// Brings the zone whose root is in place at `<base>/<zone>` (put back by a rollback,
    /// detached when it was replaced) up from whatever state zoneadm reports: configured from
    /// the zonepath's own zonecfg text (every root of a zone has the zonepath `<base>/<zone>`,
    /// as zonecfg's must match), attached with `attach -F`, booted. A run cut short is finished
    /// by the next; a zone left ready or half stopped by a killed worker is halted first.
    fn bring_up_attached(&self, zone: &str) -> Result<ZoneDescription, ProvisionError> {
        let Some(d) = self.dir.current(zone)? else {
            return Err(ProvisionError::NoPrevious {
                zone: zone.to_owned(),
            });
        };
        let create = create_commands(zone, &d.zonepath.join("zonecfg.txt"));
        for _ in 0..5 {
            let next = match self.entry(zone)?.map(|e| e.state) {
                None => create[0].clone(),
                Some(s) if s == "configured" => attach_command(zone),
                Some(s) if s == "installed" => create[2].clone(),
                Some(s) if s == "running" => return Ok(d),
                Some(s) if matches!(s.as_str(), "ready" | "shutting_down" | "down") => {
                    stop_commands(zone).1
                }
                Some(state) => {
                    return Err(ProvisionError::State {
                        zone: zone.to_owned(),
                        state,
                    });
                }
            };
            self.run_ok(zone, &next)?;
        }
        Err(ProvisionError::State {
            zone: zone.to_owned(),
            state: "not running after configure, attach and boot".into(),
        })
    }

    /// As `provision`, the replaced zone detached and its root kept with the switch open; a
    /// new zone the tools fail to make is undone at once (the replaced one attached and booted
    /// again), so a bad image does not cost the service until the next pass.
    pub(super) fn replace_unconfirmed(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        let zone = spec.name.as_str();
        crate::provision::describe(spec, root.image(), self.zonepath(zone))?;
        self.detach_if_present(zone)?;
        let d = self.dir.provision_unconfirmed(spec, root)?;
        if let Err(e) = self.create(&d) {
            if !matches!(e, ProvisionError::Interrupted { .. }) {
                match self.undo_switch(zone) {
                    Ok(Some(_)) => {
                        tracing::warn!(zone, error = %e, "the new zone could not be made; the replaced one runs again")
                    }
                    Ok(None) => {}
                    Err(u) => {
                        tracing::warn!(zone, error = %validator::error_chain(&u), "undoing a failed switch failed; the next pass settles it")
                    }
                }
            }
            return Err(e);
        }
        Ok(d)
    }

    /// The new zone is brought down and detached (kept as the previous root), the replaced
    /// root put back, attached and booted. Nothing open: `None`, the zone left as it is.
    pub(super) fn undo_switch(
        &self,
        zone: &str,
    ) -> Result<Option<ZoneDescription>, ProvisionError> {
        if !self.dir.switch_open(zone)? {
            return Ok(None);
        }
        self.detach_if_present(zone)?;
        match self.dir.undo(zone)? {
            Some(_) => self.bring_up_attached(zone).map(Some),
            None => Ok(None),
        }
    }

    /// `rdctl worker rollback` on illumos: refused before anything changes unless a previous
    /// root with its root file system is kept; then the running zone is shut down (halted
    /// after its stop timeout), detached and its configuration deleted, the two zonepaths swap
    /// (the detached one kept as the previous root), and the previous one is configured,
    /// attached (`zoneadm attach -F`) and booted.
    pub(super) fn roll_back(&self, zone: &str) -> Result<ZoneDescription, ProvisionError> {
        if !self.dir.previous_root_kept(zone)? {
            return Err(ProvisionError::NoPrevious {
                zone: zone.to_owned(),
            });
        }
        self.detach_if_present(zone)?;
        self.dir.rollback(zone)?;
        self.bring_up_attached(zone)
    }

    /// At start, after a worker was killed: each open switch is settled with the system zone
    /// brought down and detached first (it may be the new zone, configured or running on the
    /// root about to move), then the zonepath the switch settles on is configured from its
    /// own zonecfg text, attached and booted; and every other placed zone whose root is whole
    /// but which does not run (a rollback cut between its swap and its boot, an update cut
    /// while the old zone came down) is brought up as it is placed. So the node runs the old
    /// root or the new one, and a rollback cut after its swap stays rolled back rather than
    /// being provisioned forward again. What cannot be settled is logged and left for the
    /// zone's next reconcile; the step hook is asked before every command, as in any run.
    pub fn settle_at_start(&self) {
        let open = self.dir.open_switch_zones();
        for zone in &open {
            match self.settle_switch(zone) {
                Ok(()) => tracing::info!(zone, "an interrupted switch was settled"),
                Err(e) => {
                    tracing::warn!(zone, error = %validator::error_chain(&e), "settling an interrupted switch failed")
                }
            }
        }
        let placed = match self.dir.zones() {
            Ok(z) => z,
            Err(e) => {
                tracing::warn!(error = %validator::error_chain(&e), "listing the placed zones at start");
                return;
            }
        };
        for zone in placed.iter().filter(|z| !open.contains(z)) {
            if let Err(e) = self.bring_up_placed(zone) {
                tracing::warn!(zone, error = %validator::error_chain(&e), "bringing up a placed zone at start failed");
            }
        }
    }

    /// One open switch: the system zone down (detached, its root kept), the zonepaths
    /// settled on the switch's target, that zonepath brought up.
    fn settle_switch(&self, zone: &str) -> Result<(), ProvisionError> {
        self.detach_if_present(zone)?;
        self.dir.settle(zone)?;
        self.bring_up_placed(zone)
    }

    /// Brings up the zonepath placed at `<base>/<zone>` when its root is whole and the system
    /// zone is absent, configured, installed or half stopped; a running zone is left, and an
    /// `incomplete` one (its root cannot be trusted) is left to the reconcile, which
    /// provisions it again.
    fn bring_up_placed(&self, zone: &str) -> Result<(), ProvisionError> {
        let state = self.entry(zone)?.map(|e| e.state);
        if matches!(state.as_deref(), Some("running" | "incomplete")) {
            return Ok(());
        }
        match self.dir.current(zone)? {
            Some(d) if d.zonepath.join("root").is_dir() => {}
            _ => return Ok(()),
        }
        let d = self.bring_up_attached(zone)?;
        tracing::info!(zone, zonepath = %d.zonepath.display(), "the placed zone runs again");
        Ok(())
    }
}
