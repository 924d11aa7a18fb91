//! The provisioner seam: from a [`VerifiedRoot`] to a zone.
//!
//! [`Provisioner`] takes only a [`VerifiedRoot`], which only the verify module can make, so no
//! zone comes from content that did not verify. Two implementations:
//!
//! - [`DirProvisioner`]: places the zonepath (`<base>/<zone>/root` plus the zone's
//!   description, the zonecfg script, the SMF manifest of the entrypoint service and the
//!   zoneadm invocations an illumos host would run) under a base directory. Linux and tests.
//! - [`IllumosProvisioner`]: the same placement, then runs zonecfg/zoneadm through a
//!   [`CommandRunner`] (the lowest OS seam, as youki's `Syscall`). The command text comes from
//!   the pure functions in [`illumos`], shared with `DirProvisioner` and tested against
//!   expected files.

mod dir;
pub mod failpoint;
pub mod illumos;
mod previous;
pub mod switch;
pub mod zonecfg;

use std::path::PathBuf;

use serde::{Deserialize, Serialize};
use validator::{Digest, check_stop_signal, check_user, check_working_dir};

pub use dir::DirProvisioner;
pub use illumos::ILLUMOS_BRANDS;
pub use illumos::{CommandRunner, IllumosProvisioner, SystemRunner};

use crate::owner::OwnershipError;
use crate::verify::{VerifiedImage, VerifiedRoot};
use crate::zone::{ResourceLimits, ZoneSpec};

/// The stop signal when the image names none (Docker's and SMF's default).
pub const DEFAULT_STOP_SIGNAL: &str = "SIGTERM";

/// The config label `rdctl build` writes the image file's `stop_timeout` into (OCI has no
/// field for it).
pub const STOP_TIMEOUT_LABEL: &str = "org.reddwarf.image.stop-timeout";

/// Seconds between the stop signal and the kill when neither the zone nor the image says.
pub const DEFAULT_STOP_TIMEOUT_SECS: u32 = 10;

/// Everything a zone is made from: written as `zone.json` and used for the command text.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ZoneDescription {
    /// Zone name.
    pub zone: String,
    /// Zone brand.
    pub brand: String,
    /// The image reference from the zone manifest.
    pub image: String,
    /// The image manifest's digest (what the reference resolved to).
    pub manifest_digest: Digest,
    /// The config's digest.
    pub config_digest: Digest,
    /// The ChainID of the layers.
    pub chain_id: Option<Digest>,
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `Env` (`NAME=value`).
    pub env: Vec<String>,
    /// `User`.
    pub user: Option<String>,
    /// `WorkingDir`.
    pub working_dir: Option<String>,
    /// `StopSignal` (default SIGTERM).
    pub stop_signal: String,
    /// Seconds between the stop signal and the kill.
    pub stop_timeout_secs: u32,
    /// The SMF stop method the signal maps to (`:kill -TERM`).
    pub smf_stop_exec: String,
    /// Caps.
    pub limits: ResourceLimits,
    /// The zonecfg resources and properties from the image's `solaris` section under the
    /// manifest's limits (absent in descriptions written before it existed).
    #[serde(default)]
    pub zone_config: zonecfg::ZoneConfig,
    /// Where the zone lives.
    pub zonepath: PathBuf,
    /// Its volumes, mounted with zonecfg `add fs` (lofs) from outside the zonepath (absent
    /// in descriptions written before volumes existed).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub volumes: Vec<crate::volume::AttachedVolume>,
}

/// A provisioner could not create, replace or remove a zone.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ProvisionError {
    /// The image's runtime config cannot be used for a zone.
    #[error("zone {zone}: image config {field}: {reason}")]
    Config {
        /// The zone.
        zone: String,
        /// The config field.
        field: &'static str,
        /// What is wrong.
        reason: String,
    },
    /// A directory is not ours.
    #[error("zone {zone}")]
    Ownership {
        /// The zone.
        zone: String,
        /// The cause.
        #[source]
        source: OwnershipError,
    },
    /// A file operation failed.
    #[error("zone {zone}: {op} ({path}) failed")]
    Io {
        /// The zone.
        zone: String,
        /// The operation.
        op: &'static str,
        /// The path.
        path: PathBuf,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A zonecfg/zoneadm command failed.
    #[error("zone {zone}: `{command}` failed: {detail}")]
    Command {
        /// The zone.
        zone: String,
        /// The command line.
        command: String,
        /// Exit status and stderr excerpt.
        detail: String,
    },
    /// The configured provisioner cannot run on this system.
    #[error("the {0} provisioner is only available on illumos")]
    Unsupported(&'static str),
    /// The system has a zone of this name that another worker (or an operator) made: its
    /// zonepath is not this worker's.
    #[error(
        "zone {zone}: exists with zonepath {zonepath}, which is not this worker's; refusing to touch it"
    )]
    NotOurs {
        /// The zone.
        zone: String,
        /// The zonepath the system has for it.
        zonepath: String,
    },
    /// The zone is in a state the provisioner cannot move it out of.
    #[error("zone {zone}: unexpected state {state:?}")]
    State {
        /// The zone.
        zone: String,
        /// The state zoneadm reports.
        state: String,
    },
    /// A volume could not be made, seeded or attached.
    #[error("zone {zone}")]
    Volume {
        /// The zone.
        zone: String,
        /// The cause.
        #[source]
        source: Box<crate::volume::VolumeError>,
    },
    /// A rollback was asked for a zone that has no previous root kept.
    #[error("zone {zone}: no previous root is kept to roll back to")]
    NoPrevious {
        /// The zone.
        zone: String,
    },
    /// A [`StepHook`] stopped the provisioner before `step`, as a crash would: nothing after
    /// the step ran and nothing was cleaned up (fault injection for the conformance suite).
    #[error("zone {zone}: interrupted before {step}")]
    Interrupted {
        /// The zone.
        zone: String,
        /// The step that did not run.
        step: String,
    },
}

/// Called with `(zone, step)` before each step of a provisioner that changes the system; `true`
/// stops the provisioner there as if the process had died ([`ProvisionError::Interrupted`]).
/// The conformance suite injects crashes with it; production provisioners have none.
pub type StepHook = std::sync::Arc<dyn Fn(&str, &str) -> bool + Send + Sync>;

/// What a provisioner can do, stated by [`Provisioner::capabilities`]: the scheduler refuses
/// zone manifests that need more.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Capabilities {
    /// Zone brands it can create (empty: any brand, the `dir` provisioner only writes files).
    pub brands: Vec<String>,
    /// Whether `limits.cpus` is enforced (zonecfg `capped-cpu`).
    pub caps_cpu: bool,
    /// Whether `limits.memory` is enforced (zonecfg `capped-memory`).
    pub caps_memory: bool,
    /// Whether zones run processes, so that stopping one delivers the image's `StopSignal`
    /// and honours its stop timeout.
    pub runs_processes: bool,
}

/// Creates, replaces and removes zones.
pub trait Provisioner: Send + Sync {
    /// Where staging roots must be built (the same file system as the zonepaths, so placing
    /// a root is a rename).
    fn staging_dir(&self) -> PathBuf;

    /// The description of the zone as provisioned, when it exists and is ours.
    fn current(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError>;

    /// Creates the zone from a verified root. An existing zone of ours is stopped with its
    /// stop semantics and replaced; a zonepath that is not ours is refused.
    fn provision(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError>;

    /// Stops and removes a zone of ours (and the previous root kept for it).
    fn remove(&self, zone: &str) -> Result<(), ProvisionError>;

    /// As [`Provisioner::provision`], but a replaced zone's root is kept and the switch stays
    /// open until [`Provisioner::confirm`] (the new zone is ready) or [`Provisioner::undo`]
    /// (it is not): a restart before either puts the replaced root back. Default: `provision`
    /// (a provisioner that keeps no previous root has nothing to undo).
    fn provision_unconfirmed(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        self.provision(spec, root)
    }

    /// Whether the zone is up as this provisioner sees it (before any readiness probe): for
    /// zones that run nothing, its zonepath placed and described. Default: described.
    fn ready(&self, zone: &str) -> Result<bool, ProvisionError> {
        Ok(self.current(zone)?.is_some())
    }

    /// Ends an open switch: the new zone stays, the replaced root is kept as the previous
    /// one. Nothing open: nothing to do.
    fn confirm(&self, zone: &str) -> Result<(), ProvisionError> {
        let _ = zone;
        Ok(())
    }

    /// Undoes an open switch: the replaced root runs again and the new one is kept as the
    /// previous root. `None` when no switch is open (a new zone has nothing to go back to).
    fn undo(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        let _ = zone;
        Ok(None)
    }

    /// The previous root kept for the zone, described.
    fn previous(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        let _ = zone;
        Ok(None)
    }

    /// `rdctl worker rollback`: the previous root runs and the current one becomes the
    /// previous root (a second rollback goes forward again).
    fn rollback(&self, zone: &str) -> Result<ZoneDescription, ProvisionError> {
        Err(ProvisionError::NoPrevious {
            zone: zone.to_owned(),
        })
    }

    /// The zones of ours that exist.
    fn zones(&self) -> Result<Vec<String>, ProvisionError>;

    /// What this provisioner supports.
    fn capabilities(&self) -> Capabilities;
}

/// Refuses an image whose `solaris` label asks for what the operator's `[zones]` rules
/// ([`zonecfg::ZonePolicy`]) do not allow: privileges beyond illumos's default zone set, a
/// lower link, addresses outside the allowed ranges, a MAC address. Checked by the worker
/// before it hands a root to the provisioner. Returns the CPU and memory caps the zone will be
/// made with (the manifest's `limits` over the image's), which the worker counts against what
/// the node has left.
pub fn check_zone_policy(
    spec: &ZoneSpec,
    config: &validator::ImageConfig,
    policy: &zonecfg::ZonePolicy,
) -> Result<crate::zone::Caps, ProvisionError> {
    let c = config.oci.config().clone().unwrap_or_default();
    let solaris = c
        .labels()
        .as_ref()
        .and_then(|l| l.get(zonecfg::SOLARIS_LABEL));
    zonecfg::ZoneConfig::from_image(solaris.map(String::as_str), &spec.limits)
        .and_then(|z| z.check_policy(policy).map(|()| z.caps()))
        .map_err(|e| ProvisionError::Config {
            zone: spec.name.clone(),
            field: "Labels",
            reason: format!("{}: {e}", zonecfg::SOLARIS_LABEL),
        })
}

/// Builds the zone description from the zone manifest and the verified image, checking the
/// runtime fields an attacker controls (research §3.4 item 13).
pub fn describe(
    spec: &ZoneSpec,
    image: &VerifiedImage,
    zonepath: PathBuf,
) -> Result<ZoneDescription, ProvisionError> {
    let bad = |field, reason: String| ProvisionError::Config {
        zone: spec.name.clone(),
        field,
        reason,
    };
    let c = image.config.oci.config().clone().unwrap_or_default();
    let entrypoint = c.entrypoint().clone().unwrap_or_default();
    let cmd = c.cmd().clone().unwrap_or_default();
    let env = c.env().clone().unwrap_or_default();
    for (field, list) in [("Entrypoint", &entrypoint), ("Cmd", &cmd), ("Env", &env)] {
        if list.iter().any(|s| s.contains('\0')) {
            return Err(bad(field, "contains a NUL byte".into()));
        }
    }
    for e in &env {
        let name = e.split_once('=').map_or(e.as_str(), |(n, _)| n);
        if name.is_empty() || !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
            return Err(bad("Env", format!("{e:?} is not NAME=value")));
        }
    }
    let user = c.user().clone().filter(|u| !u.is_empty());
    if let Some(u) = &user {
        check_user(u).map_err(|m| bad("User", m))?;
    }
    let working_dir = c.working_dir().clone().filter(|w| !w.is_empty());
    if let Some(w) = &working_dir {
        check_working_dir(w).map_err(|m| bad("WorkingDir", m))?;
    }
    let stop_signal = image
        .config
        .stop_signal
        .clone()
        .unwrap_or_else(|| DEFAULT_STOP_SIGNAL.to_owned());
    check_stop_signal(&stop_signal).map_err(|m| bad("StopSignal", m))?;
    let stop_timeout_secs = match spec.stop_timeout_secs {
        Some(t) => t,
        None => match c.labels().as_ref().and_then(|l| l.get(STOP_TIMEOUT_LABEL)) {
            Some(v) => v.parse::<u32>().map_err(|_| {
                bad(
                    "Labels",
                    format!("{STOP_TIMEOUT_LABEL}={v:?} is not a number of seconds"),
                )
            })?,
            None => DEFAULT_STOP_TIMEOUT_SECS,
        },
    };
    let solaris = c
        .labels()
        .as_ref()
        .and_then(|l| l.get(zonecfg::SOLARIS_LABEL));
    let zone_config = zonecfg::ZoneConfig::from_image(solaris.map(String::as_str), &spec.limits)
        .map_err(|e| bad("Labels", format!("{}: {e}", zonecfg::SOLARIS_LABEL)))?;
    let image_volumes = c.volumes().clone().unwrap_or_default();
    let base = zonepath.parent().unwrap_or(&zonepath);
    let volumes = crate::volume::wanted(spec, &image_volumes, base)
        .map_err(|(field, reason)| bad(field, reason))?;
    Ok(ZoneDescription {
        zone: spec.name.clone(),
        brand: spec.brand.clone(),
        image: spec.image.to_string(),
        manifest_digest: image.manifest.clone(),
        config_digest: image.config_digest.clone(),
        chain_id: image.chain_id.clone(),
        smf_stop_exec: illumos::smf_stop_exec(&stop_signal),
        entrypoint,
        cmd,
        env,
        user,
        working_dir,
        stop_signal,
        stop_timeout_secs,
        limits: spec.limits.clone(),
        zone_config,
        zonepath,
        volumes,
    })
}
