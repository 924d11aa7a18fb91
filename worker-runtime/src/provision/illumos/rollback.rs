//! Going back to a zone's previous root on illumos: an update keeps the replaced zone detached
//! (its root whole in the zonepath, which the `dir` switch keeps as the previous root), and
//! undoing it or `rdctl worker rollback` detaches the running zone, swaps the zonepaths, and
//! configures, attaches (`zoneadm attach -F`) and boots the one put back.

use super::{CommandRunner, IllumosProvisioner, attach_command, create_commands};
use crate::provision::{ProvisionError, Provisioner, ZoneDescription};
use crate::verify::VerifiedRoot;
use crate::zone::ZoneSpec;

impl<R: CommandRunner> IllumosProvisioner<R> {
    /// Brings the zone whose root is in place at `<base>/<zone>` (put back by a rollback,
    /// detached when it was replaced) up from whatever state zoneadm reports: configured from
    /// the zonepath's own zonecfg text (every root of a zone has the zonepath `<base>/<zone>`,
    /// as zonecfg's must match), attached with `attach -F`, booted. A run cut short is finished
    /// by the next.
    fn bring_up_attached(&self, zone: &str) -> Result<ZoneDescription, ProvisionError> {
        let Some(d) = self.dir.current(zone)? else {
            return Err(ProvisionError::NoPrevious {
                zone: zone.to_owned(),
            });
        };
        let create = create_commands(zone, &d.zonepath.join("zonecfg.txt"));
        for _ in 0..4 {
            let next = match self.entry(zone)?.map(|e| e.state) {
                None => create[0].clone(),
                Some(s) if s == "configured" => attach_command(zone),
                Some(s) if s == "installed" => create[2].clone(),
                Some(s) if s == "running" => return Ok(d),
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
        if self.entry(zone)?.is_some() {
            self.bring_down(zone, self.grace(zone), true)?;
        }
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
        if self.entry(zone)?.is_some() {
            self.bring_down(zone, self.grace(zone), true)?;
        }
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
        if self.entry(zone)?.is_some() {
            self.bring_down(zone, self.grace(zone), true)?;
        }
        self.dir.rollback(zone)?;
        self.bring_up_attached(zone)
    }
}
