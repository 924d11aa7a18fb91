//! A faithful fake of the illumos zone tools behind the provisioner's command-runner seam: a
//! state machine per zone with zoneadm's state names (configured, incomplete, installed,
//! ready, running, shutting_down, down) and zonecfg/zoneadm's own error messages
//! (illumos-gate `usr/src/cmd/zoneadm/zoneadm.c` `sanity_check`, `usr/src/cmd/zonecfg/zonecfg.c`).
//!
//! It acts on the file system as the brands do: `install` needs `<zonepath>/root`, `uninstall`
//! removes it, `detach` leaves it (and writes `SUNWdetached.xml` beside it), `attach -F` takes
//! it back (and removes that file), and `boot` reads the entrypoint service's SMF manifest from the root (what
//! manifest-import does), so `shutdown` delivers the image's stop signal through the stop
//! method and honours its timeout. A zone's application can be told to ignore its stop
//! signal: shutdown then needs the method's `timeout_seconds` (after which SMF kills the
//! contract), so a caller with a shorter grace sees it time out and must halt. Time is
//! virtual: nothing sleeps. The tools can be made to fail on demand (`fail_on`): any zoneadm
//! subcommand (`install`, `boot`, `shutdown`, `halt`, `detach`, `attach`, `uninstall`) and zonecfg's
//! `delete`.

// Each test binary that includes it uses a different part.
#![allow(dead_code)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use worker_runtime::CommandRunner;
use worker_runtime::provision::illumos::{
    CommandOutcome, ENTRYPOINT_FMRI, ENTRYPOINT_MANIFEST_PATH,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum State {
    Configured,
    Incomplete,
    Installed,
    Ready,
    Running,
    ShuttingDown,
    Down,
}

impl State {
    pub fn name(self) -> &'static str {
        match self {
            State::Configured => "configured",
            State::Incomplete => "incomplete",
            State::Installed => "installed",
            State::Ready => "ready",
            State::Running => "running",
            State::ShuttingDown => "shutting_down",
            State::Down => "down",
        }
    }

    /// In the kernel (zoneadm's `lookup_running_zone` finds it).
    fn active(self) -> bool {
        self >= State::Ready
    }
}

#[derive(Debug, Clone)]
struct Zone {
    state: State,
    zonepath: String,
    brand: String,
    id: Option<u32>,
    /// (stop signal without SIG, the stop method's timeout_seconds) read at boot.
    stop: Option<(String, u32)>,
    /// Whether boot found an entrypoint service manifest (manifest-import enables it).
    entrypoint: bool,
}

/// What happened when a zone was stopped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StopEvent {
    /// `zoneadm shutdown` ran the stop method: the signal sent, the grace the caller gave,
    /// and whether the zone went down within it.
    Shutdown {
        zone: String,
        signal: Option<String>,
        method_timeout: Option<u32>,
        grace: Option<Duration>,
        completed: bool,
    },
    /// `zoneadm halt` on an active zone.
    Halt { zone: String },
}

#[derive(Debug, Default)]
struct Host {
    zones: BTreeMap<String, Zone>,
    next_id: u32,
    ignores_stop: BTreeSet<String>,
    calls: Vec<(String, Option<Duration>)>,
    stops: Vec<StopEvent>,
    /// zoneadm subcommands (`install`, `boot`, ...) and zonecfg `delete` made to fail, as a
    /// broken brand or a busy system would.
    failing: BTreeSet<String>,
    /// Zones whose entrypoint service fails its start method (SMF: `maintenance`).
    broken_services: BTreeSet<String>,
}

/// The fake host; clones share one host (one global zone namespace, as on a real system).
#[derive(Debug, Clone, Default)]
pub struct FakeZones(Arc<Mutex<Host>>);

struct Reply {
    code: Option<i32>,
    timed_out: bool,
    stdout: String,
    stderr: String,
}

fn ok(stdout: String) -> Reply {
    Reply {
        code: Some(0),
        timed_out: false,
        stdout,
        stderr: String::new(),
    }
}

fn fail(stderr: String) -> Reply {
    Reply {
        code: Some(1),
        timed_out: false,
        stdout: String::new(),
        stderr: stderr + "\n",
    }
}

impl FakeZones {
    fn host(&self) -> std::sync::MutexGuard<'_, Host> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The state zoneadm would report, if the zone is configured at all.
    pub fn state(&self, zone: &str) -> Option<State> {
        self.host().zones.get(zone).map(|z| z.state)
    }

    /// The zone's application ignores its stop signal from now on.
    pub fn ignore_stop(&self, zone: &str) {
        self.host().ignores_stop.insert(zone.to_owned());
    }

    /// Puts a zone into `state` as an interrupted zoneadm or zoneadmd would leave it.
    pub fn force_state(&self, zone: &str, state: State) {
        if let Some(z) = self.host().zones.get_mut(zone) {
            z.state = state;
        }
    }

    /// Every command run, with the timeout it was given.
    pub fn calls(&self) -> Vec<(String, Option<Duration>)> {
        self.host().calls.clone()
    }

    /// Makes `zoneadm -z <zone> <sub>` (or, for `delete`, `zonecfg -z <zone> delete`) fail
    /// (exit 1, the zone's state and files unchanged) until [`FakeZones::heal`]: the zone
    /// tools failing on demand.
    pub fn fail_on(&self, sub: &str) {
        self.host().failing.insert(sub.to_owned());
    }

    /// The zone's entrypoint service goes to `maintenance` (its start method fails) until
    /// [`FakeZones::heal`].
    pub fn break_service(&self, zone: &str) {
        self.host().broken_services.insert(zone.to_owned());
    }

    /// Ends every [`FakeZones::fail_on`] and [`FakeZones::break_service`].
    pub fn heal(&self) {
        let mut h = self.host();
        h.failing.clear();
        h.broken_services.clear();
    }

    /// Every stop, in order.
    pub fn stops(&self) -> Vec<StopEvent> {
        self.host().stops.clone()
    }

    fn zoneadm(&self, h: &mut Host, zone: &str, args: &[&str], timeout: Option<Duration>) -> Reply {
        let Some(sub) = args.first().copied() else {
            return fail("zoneadm: no subcommand".into());
        };
        if h.failing.contains(sub) && h.zones.contains_key(zone) {
            return fail(format!(
                "zoneadm: zone '{zone}': {sub} failed (made to fail by the test)"
            ));
        }
        if sub == "list" {
            return match h.zones.get(zone) {
                Some(z) => ok(list_line(zone, z)),
                None => fail(format!("zoneadm: {zone}: No such zone configured")),
            };
        }
        let Some(z) = h.zones.get_mut(zone) else {
            return fail(format!("zoneadm: {zone}: No such zone configured"));
        };
        let err = |m: String| fail(format!("zoneadm: zone '{zone}': {m}"));
        let invalid = |state: State| {
            err(format!(
                "{sub} operation is invalid for {} zones.",
                state.name()
            ))
        };
        match sub {
            "install" => match z.state {
                State::Installed => err("is already installed.".into()),
                State::Incomplete => err("zone is incomplete; uninstall required.".into()),
                s if s.active() => invalid(s),
                _ => {
                    if !Path::new(&z.zonepath).join("root").is_dir() {
                        z.state = State::Incomplete;
                        return err(format!(
                            "install failed: no root file system at {}/root",
                            z.zonepath
                        ));
                    }
                    z.state = State::Installed;
                    ok(String::new())
                }
            },
            "boot" => match z.state {
                s if s.active() => invalid(s),
                s if s < State::Installed => err("must be installed before boot.".into()),
                _ => {
                    let manifest = Path::new(&z.zonepath)
                        .join("root")
                        .join(ENTRYPOINT_MANIFEST_PATH);
                    let text = std::fs::read_to_string(manifest).ok();
                    z.entrypoint = text.is_some();
                    z.stop = text.and_then(|m| stop_method(&m));
                    h.next_id += 1;
                    z.id = Some(h.next_id);
                    z.state = State::Running;
                    ok(String::new())
                }
            },
            "shutdown" => {
                if z.state != State::Running {
                    return err("not running".into());
                }
                let ignores = h.ignores_stop.contains(zone);
                // An application that honours its signal exits at once; one that ignores it
                // is killed by SMF when the stop method's timeout runs out.
                let needs = if ignores {
                    Duration::from_secs(u64::from(z.stop.as_ref().map_or(0, |s| s.1)) + 1)
                } else {
                    Duration::ZERO
                };
                let completed = timeout.is_none_or(|t| needs <= t);
                h.stops.push(StopEvent::Shutdown {
                    zone: zone.to_owned(),
                    signal: z.stop.as_ref().map(|s| format!("SIG{}", s.0)),
                    method_timeout: z.stop.as_ref().map(|s| s.1),
                    grace: timeout,
                    completed,
                });
                if completed {
                    z.state = State::Installed;
                    z.id = None;
                    ok(String::new())
                } else {
                    z.state = State::ShuttingDown;
                    Reply {
                        code: None,
                        timed_out: true,
                        stdout: String::new(),
                        stderr: String::new(),
                    }
                }
            }
            "halt" => {
                if z.state < State::Installed {
                    return err("must be installed before halt.".into());
                }
                if z.state.active() {
                    h.stops.push(StopEvent::Halt {
                        zone: zone.to_owned(),
                    });
                }
                z.state = State::Installed;
                z.id = None;
                ok(String::new())
            }
            // The zone goes back to configured and its zonepath stays as it is, with the
            // detach manifest beside the root (what `zoneadm attach` would read).
            "detach" => match z.state {
                State::Installed => {
                    let manifest = Path::new(&z.zonepath).join("SUNWdetached.xml");
                    if let Err(e) = std::fs::write(&manifest, b"<zone/>\n") {
                        return err(format!("cannot write {}: {e}", manifest.display()));
                    }
                    z.state = State::Configured;
                    ok(String::new())
                }
                s if s.active() => invalid(s),
                s => err(format!(
                    "{sub} operation is invalid for {} zones.",
                    s.name()
                )),
            },
            // Back to installed from configured (zoneadm's attach needs that state), the
            // zonepath's root as it is; the detach manifest is removed once attached. Only the
            // forced form is modelled: the brand's software check reads a package image.
            "attach" => match (z.state, args.get(1).copied()) {
                (State::Configured, Some("-F")) => {
                    let zp = Path::new(&z.zonepath);
                    if !zp.join("root").is_dir() {
                        return err(format!(
                            "attach failed: no root file system at {}/root",
                            z.zonepath
                        ));
                    }
                    let _ = std::fs::remove_file(zp.join("SUNWdetached.xml"));
                    z.state = State::Installed;
                    ok(String::new())
                }
                (State::Configured, _) => {
                    err("attach without -F: the brand's software check is not modelled".into())
                }
                (s, _) => invalid(s),
            },
            "uninstall" => match z.state {
                State::Configured => err("is already in state 'configured'.".into()),
                s if s.active() => invalid(s),
                _ => {
                    let root = Path::new(&z.zonepath).join("root");
                    if root.exists()
                        && let Err(e) = std::fs::remove_dir_all(&root)
                    {
                        return err(format!("cannot remove {}: {e}", root.display()));
                    }
                    z.state = State::Configured;
                    ok(String::new())
                }
            },
            other => fail(format!("zoneadm: {other}: unknown subcommand")),
        }
    }

    fn zonecfg(&self, h: &mut Host, zone: &str, args: &[&str]) -> Reply {
        match args {
            ["-f", file] => {
                let text = match std::fs::read_to_string(file) {
                    Ok(t) => t,
                    Err(e) => return fail(format!("zonecfg: could not open file {file}: {e}")),
                };
                let mut new: Option<Zone> = None;
                for (n, line) in text.lines().enumerate() {
                    let at = |m: String| fail(format!("On line {} of {file}:\n{m}", n + 1));
                    let line = line.trim();
                    if line == "create -b" || line == "create" {
                        if let Some(z) = h.zones.get(zone) {
                            return if z.state >= State::Installed {
                                at(format!(
                                    "Zone {zone} already installed; create not allowed."
                                ))
                            } else {
                                at(format!("Zone {zone} already exists; create not allowed."))
                            };
                        }
                        new = Some(Zone {
                            state: State::Configured,
                            zonepath: String::new(),
                            brand: "ipkg".into(),
                            id: None,
                            stop: None,
                            entrypoint: false,
                        });
                    } else if let Some(v) = line.strip_prefix("set zonepath=") {
                        let Some(z) = new.as_mut() else {
                            return at(format!("{zone}: No such zone configured"));
                        };
                        z.zonepath = v.trim_matches('"').to_owned();
                    } else if let Some(v) = line.strip_prefix("set brand=") {
                        if let Some(z) = new.as_mut() {
                            z.brand = v.to_owned();
                        }
                    } else if line == "verify" {
                        if new.as_ref().is_some_and(|z| z.zonepath.is_empty()) {
                            return at("zonepath cannot be empty.".into());
                        }
                    } else if line == "commit"
                        && let Some(z) = new.take()
                    {
                        h.zones.insert(zone.to_owned(), z);
                    }
                }
                ok(String::new())
            }
            ["delete", "-F"] => match h.zones.get(zone).map(|z| z.state) {
                None => fail(format!("{zone}: No such zone configured")),
                Some(_) if h.failing.contains("delete") => fail(format!(
                    "Could not delete zone {zone}: made to fail by the test"
                )),
                Some(s) if s >= State::Incomplete => fail(format!(
                    "Zone {zone} not in configured state; delete not allowed."
                )),
                Some(_) => {
                    h.zones.remove(zone);
                    ok(String::new())
                }
            },
            _ => fail(format!("zonecfg: unsupported arguments {args:?}")),
        }
    }
}

fn list_line(name: &str, z: &Zone) -> String {
    let id = z.id.map_or("-".into(), |i| i.to_string());
    let path = z.zonepath.replace(':', "\\:");
    format!(
        "{id}:{name}:{}:{path}:00000000-0000-0000-0000-{:012}:{}:excl\n",
        z.state.name(),
        z.id.unwrap_or(0),
        z.brand
    )
}

/// The stop method of the entrypoint manifest: `:kill -NAME` and its timeout.
fn stop_method(manifest: &str) -> Option<(String, u32)> {
    let line = manifest.lines().find(|l| l.contains("name=\"stop\""))?;
    let exec = line.split("exec=\"").nth(1)?.split('"').next()?;
    let signal = exec.strip_prefix(":kill -")?.to_owned();
    let timeout = line
        .split("timeout_seconds=\"")
        .nth(1)?
        .split('"')
        .next()?
        .parse()
        .ok()?;
    Some((signal, timeout))
}

impl CommandRunner for FakeZones {
    fn run(&self, argv: &[String], timeout: Option<Duration>) -> std::io::Result<CommandOutcome> {
        let mut h = self.host();
        h.calls.push((argv.join(" "), timeout));
        let words: Vec<&str> = argv.iter().map(String::as_str).collect();
        let r = match words.as_slice() {
            ["zoneadm", "list", "-cp"] => {
                let mut out = String::from("0:global:running:/::ipkg:shared\n");
                for (name, z) in &h.zones {
                    out.push_str(&list_line(name, z));
                }
                ok(out)
            }
            ["zoneadm", "-z", zone, rest @ ..] => {
                let zone = zone.to_string();
                self.zoneadm(&mut h, &zone, rest, timeout)
            }
            ["svcs", "-z", zone, "-H", "-o", "state", fmri] => {
                // svcs(1) from the global zone: the service's state in a running zone.
                match h.zones.get(*zone) {
                    Some(z) if z.state == State::Running => {
                        if !z.entrypoint || *fmri != ENTRYPOINT_FMRI {
                            fail(format!(
                                "svcs: Pattern '{fmri}' doesn't match any instances"
                            ))
                        } else if h.broken_services.contains(*zone) {
                            ok("maintenance\n".into())
                        } else {
                            ok("online\n".into())
                        }
                    }
                    _ => fail(format!("svcs: zone '{zone}' is not running")),
                }
            }
            ["zonecfg", "-z", zone, rest @ ..] => {
                let zone = zone.to_string();
                self.zonecfg(&mut h, &zone, rest)
            }
            _ => {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    format!("{}: not found", words.first().unwrap_or(&"")),
                ));
            }
        };
        Ok(CommandOutcome {
            code: r.code,
            timed_out: r.timed_out,
            stdout: r.stdout,
            stderr: r.stderr,
        })
    }
}
