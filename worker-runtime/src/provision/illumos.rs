//! zonecfg/zoneadm command text and the SMF manifest of a zone's entrypoint service (pure
//! functions, shared by both provisioners), the [`CommandRunner`] seam, and
//! [`IllumosProvisioner`], which runs the commands.
//!
//! Stop semantics (research §5.3): the image's `StopSignal` becomes the SMF stop method
//! `:kill -<NAME>` (names, never numbers: illumos numbers differ from Linux) with the zone's
//! stop timeout as `timeout_seconds`; stopping the whole zone is `zoneadm shutdown`, then
//! `zoneadm halt` when the grace period is over.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use super::{
    Capabilities, DEFAULT_STOP_TIMEOUT_SECS, DirProvisioner, ProvisionError, Provisioner,
    ZoneDescription,
};
use crate::verify::VerifiedRoot;
use crate::zone::ZoneSpec;

mod rollback;

/// The brands the illumos provisioner creates zones of: those whose install takes a root
/// placed at `<zonepath>/root` (`create -b` plus the brand, no template).
pub const ILLUMOS_BRANDS: &[&str] = &["nlipkg", "lipkg", "ipkg", "sparse", "pkgsrc"];

/// Where the entrypoint manifest goes inside the zone's root (imported at boot by
/// `svc:/system/manifest-import`).
pub const ENTRYPOINT_MANIFEST_PATH: &str = "var/svc/manifest/site/rdctl-entrypoint.xml";

/// The SMF stop method for a stop signal: `SIGTERM` → `:kill -TERM`, `SIGRTMIN+3` →
/// `:kill -RTMIN+3`. The signal was checked to be an illumos signal name.
pub fn smf_stop_exec(stop_signal: &str) -> String {
    let name = stop_signal.strip_prefix("SIG").unwrap_or(stop_signal);
    format!(":kill -{name}")
}

/// The zonecfg command file for a zone: its zonepath and brand, then the resources and
/// properties of its [`super::zonecfg::ZoneConfig`] (the image's `solaris` section under the
/// manifest's limits).
pub fn zonecfg_script(d: &ZoneDescription) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "create -b");
    let _ = writeln!(
        s,
        "set zonepath={}",
        zonecfg_quote(&d.zonepath.to_string_lossy())
    );
    let _ = writeln!(s, "set brand={}", d.brand);
    let _ = writeln!(s, "set autoboot=false");
    let _ = writeln!(s, "set ip-type=exclusive");
    s.push_str(&d.zone_config.commands());
    // Volumes: a loopback mount of a directory outside the zonepath, made by zoneadm in the
    // global zone at boot (the zone gets no ZFS administration, unlike `add dataset`).
    for v in &d.volumes {
        let _ = writeln!(
            s,
            "add fs\nset dir={}\nset special={}\nset type=lofs\nend",
            zonecfg_quote(&v.path),
            zonecfg_quote(&v.source.to_string_lossy())
        );
    }
    let _ = writeln!(s, "verify\ncommit");
    s
}

/// zonecfg takes double-quoted words; paths with `"`, `\` or control characters are refused
/// where the base directory is configured, so quoting is enough here.
fn zonecfg_quote(s: &str) -> String {
    if s.bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-'))
    {
        s.to_owned()
    } else {
        format!("\"{s}\"")
    }
}

/// True when a base directory can be written into zonecfg text and command lines unchanged.
pub fn safe_base_path(p: &Path) -> bool {
    p.to_str().is_some_and(|s| {
        p.is_absolute() && !s.chars().any(|c| c == '"' || c == '\\' || c.is_control())
    })
}

fn xml_escape(s: &str) -> String {
    let mut o = String::with_capacity(s.len());
    for c in s.chars() {
        match c {
            '&' => o.push_str("&amp;"),
            '<' => o.push_str("&lt;"),
            '>' => o.push_str("&gt;"),
            '"' => o.push_str("&quot;"),
            '\'' => o.push_str("&apos;"),
            c => o.push(c),
        }
    }
    o
}

/// One argument for the shell that runs an SMF method: single-quoted, and `%` doubled because
/// SMF expands `%` tokens before the shell sees the line.
fn method_word(s: &str) -> String {
    let quoted = if !s.is_empty()
        && s.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'/' | b'.' | b'_' | b'-' | b'=' | b':' | b',')
        }) {
        s.to_owned()
    } else {
        format!("'{}'", s.replace('\'', r"'\''"))
    };
    quoted.replace('%', "%%")
}

/// The start method's command line: `Entrypoint` followed by `Cmd`, each word quoted.
pub fn start_exec(d: &ZoneDescription) -> Option<String> {
    let words: Vec<String> = d
        .entrypoint
        .iter()
        .chain(&d.cmd)
        .map(|w| method_word(w))
        .collect();
    (!words.is_empty()).then(|| words.join(" "))
}

/// The SMF manifest of the zone's entrypoint service, or `None` when the image names no
/// command (a full OS image that just boots).
pub fn smf_manifest(d: &ZoneDescription) -> Option<String> {
    let exec = start_exec(d)?;
    let mut s = String::new();
    let _ = writeln!(s, "<?xml version=\"1.0\"?>");
    let _ = writeln!(
        s,
        "<!DOCTYPE service_bundle SYSTEM \"/usr/share/lib/xml/dtd/service_bundle.dtd.1\">"
    );
    let _ = writeln!(
        s,
        "<service_bundle type=\"manifest\" name=\"rdctl-entrypoint\">"
    );
    let _ = writeln!(
        s,
        "  <service name=\"site/rdctl/entrypoint\" type=\"service\" version=\"1\">"
    );
    let _ = writeln!(s, "    <create_default_instance enabled=\"true\"/>");
    let _ = writeln!(s, "    <single_instance/>");
    let _ = writeln!(
        s,
        "    <dependency name=\"fs\" grouping=\"require_all\" restart_on=\"none\" type=\"service\">"
    );
    let _ = writeln!(
        s,
        "      <service_fmri value=\"svc:/system/filesystem/local:default\"/>"
    );
    let _ = writeln!(s, "    </dependency>");
    // The runtime spec's `milestone`: online before the entrypoint starts.
    if let Some(m) = &d.zone_config.milestone {
        let _ = writeln!(
            s,
            "    <dependency name=\"milestone\" grouping=\"require_all\" restart_on=\"none\" type=\"service\">"
        );
        let _ = writeln!(s, "      <service_fmri value=\"{}\"/>", xml_escape(m));
        let _ = writeln!(s, "    </dependency>");
    }
    let wd = d.working_dir.as_deref().unwrap_or("/");
    let _ = writeln!(
        s,
        "    <method_context working_directory=\"{}\">",
        xml_escape(wd)
    );
    if let Some(u) = &d.user {
        let (user, group) = match u.split_once(':') {
            Some((u, g)) => (u, Some(g)),
            None => (u.as_str(), None),
        };
        match group {
            Some(g) => {
                let _ = writeln!(
                    s,
                    "      <method_credential user=\"{}\" group=\"{}\"/>",
                    xml_escape(user),
                    xml_escape(g)
                );
            }
            None => {
                let _ = writeln!(
                    s,
                    "      <method_credential user=\"{}\"/>",
                    xml_escape(user)
                );
            }
        }
    }
    if !d.env.is_empty() {
        let _ = writeln!(s, "      <method_environment>");
        for e in &d.env {
            let (n, v) = e.split_once('=').unwrap_or((e.as_str(), ""));
            let _ = writeln!(
                s,
                "        <envvar name=\"{}\" value=\"{}\"/>",
                xml_escape(n),
                xml_escape(v)
            );
        }
        let _ = writeln!(s, "      </method_environment>");
    }
    let _ = writeln!(s, "    </method_context>");
    let _ = writeln!(
        s,
        "    <exec_method type=\"method\" name=\"start\" exec=\"{}\" timeout_seconds=\"60\"/>",
        xml_escape(&exec)
    );
    let _ = writeln!(
        s,
        "    <exec_method type=\"method\" name=\"stop\" exec=\"{}\" timeout_seconds=\"{}\"/>",
        xml_escape(&d.smf_stop_exec),
        d.stop_timeout_secs
    );
    let _ = writeln!(s, "    <property_group name=\"startd\" type=\"framework\">");
    let _ = writeln!(
        s,
        "      <propval name=\"duration\" type=\"astring\" value=\"child\"/>"
    );
    let _ = writeln!(s, "    </property_group>");
    let _ = writeln!(s, "    <stability value=\"Evolving\"/>");
    let _ = writeln!(s, "  </service>");
    let _ = writeln!(s, "</service_bundle>");
    Some(s)
}

fn argv(words: &[&str]) -> Vec<String> {
    words.iter().map(|w| (*w).to_owned()).collect()
}

/// Configure, install from the already placed `<zonepath>/root`, and boot.
pub fn create_commands(zone: &str, zonecfg_file: &Path) -> Vec<Vec<String>> {
    let f = zonecfg_file.to_string_lossy();
    vec![
        argv(&["zonecfg", "-z", zone, "-f", &f]),
        argv(&["zoneadm", "-z", zone, "install", "-d", "-"]),
        argv(&["zoneadm", "-z", zone, "boot"]),
    ]
}

/// Graceful stop (the brand's shutdown: SMF stops services in order, each with its stop
/// method), then the forced one after the grace period.
pub fn stop_commands(zone: &str) -> (Vec<String>, Vec<String>) {
    (
        argv(&["zoneadm", "-z", zone, "shutdown"]),
        argv(&["zoneadm", "-z", zone, "halt"]),
    )
}

/// Every zone the system knows, machine-readable (`zoneid:zonename:state:zonepath:uuid:brand:ip-type`).
pub fn list_command() -> Vec<String> {
    argv(&["zoneadm", "list", "-cp"])
}

/// The entrypoint service's SMF FMRI (the manifest's `site/rdctl/entrypoint`, its default
/// instance).
pub const ENTRYPOINT_FMRI: &str = "svc:/site/rdctl/entrypoint:default";

/// The entrypoint service's state in the zone, from the global zone (`svcs -z`): `online` once
/// its start method ran and it stays up.
pub fn service_state_command(zone: &str) -> Vec<String> {
    argv(&["svcs", "-z", zone, "-H", "-o", "state", ENTRYPOINT_FMRI])
}

/// Detach a zone being replaced: configured again, its zonepath left as it is.
pub fn detach_command(zone: &str) -> Vec<String> {
    argv(&["zoneadm", "-z", zone, "detach"])
}

/// Attach a detached zonepath again (the previous root, after a rollback put it back in
/// place): `-F`, because the brand's software compatibility check reads a package image and an
/// OCI root is none; the root is one this worker verified, installed and detached itself.
pub fn attach_command(zone: &str) -> Vec<String> {
    argv(&["zoneadm", "-z", zone, "attach", "-F"])
}

/// Uninstall and forget the zone's configuration.
pub fn remove_commands(zone: &str) -> Vec<Vec<String>> {
    vec![
        argv(&["zoneadm", "-z", zone, "uninstall", "-F"]),
        argv(&["zonecfg", "-z", zone, "delete", "-F"]),
    ]
}

/// Every command an illumos host runs for a zone, as text (written by the `dir` provisioner
/// beside the zone so the plan can be read and replayed).
pub fn command_plan(d: &ZoneDescription, zonecfg_file: &Path) -> String {
    let mut s = String::new();
    let line = |s: &mut String, a: &[String]| {
        let _ = writeln!(s, "{}", a.join(" "));
    };
    let _ = writeln!(s, "# create");
    for c in create_commands(&d.zone, zonecfg_file) {
        line(&mut s, &c);
    }
    let (shutdown, halt) = stop_commands(&d.zone);
    let _ = writeln!(
        s,
        "# stop: shutdown, then halt after {} s",
        d.stop_timeout_secs
    );
    line(&mut s, &shutdown);
    line(&mut s, &halt);
    let _ = writeln!(s, "# remove");
    for c in remove_commands(&d.zone) {
        line(&mut s, &c);
    }
    s
}

/// What a command did.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandOutcome {
    /// Exit code; `None` when killed or timed out.
    pub code: Option<i32>,
    /// True when the timeout ended it.
    pub timed_out: bool,
    /// Its standard output (the first 1 MiB).
    pub stdout: String,
    /// The tail of its stderr.
    pub stderr: String,
}

/// Runs an external command: the lowest OS seam of the illumos provisioner.
pub trait CommandRunner: Send + Sync {
    /// Runs `argv`, killing it after `timeout` when one is given.
    fn run(&self, argv: &[String], timeout: Option<Duration>) -> std::io::Result<CommandOutcome>;
}

/// Runs commands with `std::process`.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemRunner;

/// Reads a child's pipe on its own thread (so neither pipe can fill and stall the child),
/// keeping at most `limit` bytes.
fn drain(
    pipe: Option<impl std::io::Read + Send + 'static>,
    limit: u64,
) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut out = Vec::new();
        if let Some(mut p) = pipe {
            let _ = std::io::Read::read_to_end(&mut std::io::Read::take(&mut p, limit), &mut out);
            // Whatever is left is read and dropped, so the child never blocks on a full pipe.
            let _ = std::io::copy(&mut p, &mut std::io::sink());
        }
        out
    })
}

impl CommandRunner for SystemRunner {
    fn run(&self, argv: &[String], timeout: Option<Duration>) -> std::io::Result<CommandOutcome> {
        let (prog, args) = argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty command"))?;
        let mut child = Command::new(prog)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let out = drain(child.stdout.take(), 1 << 20);
        let err = drain(child.stderr.take(), 1 << 20);
        let start = Instant::now();
        let mut timed_out = false;
        let status = loop {
            if let Some(s) = child.try_wait()? {
                break s;
            }
            if timeout.is_some_and(|t| start.elapsed() >= t) {
                timed_out = true;
                child.kill()?;
                break child.wait()?;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let stdout = String::from_utf8_lossy(&out.join().unwrap_or_default()).into_owned();
        let err = err.join().unwrap_or_default();
        let err = String::from_utf8_lossy(&err);
        let tail: String = err
            .chars()
            .rev()
            .take(2000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        Ok(CommandOutcome {
            code: if timed_out { None } else { status.code() },
            timed_out,
            stdout,
            stderr: tail,
        })
    }
}

/// One line of `zoneadm list -cp`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneEntry {
    /// Zone name.
    pub name: String,
    /// zoneadm's state name: `configured`, `incomplete`, `installed`, `ready`, `running`,
    /// `shutting_down`, `down` (or `mounted`).
    pub state: String,
    /// The zonepath.
    pub zonepath: String,
    /// The brand.
    pub brand: String,
}

/// Parses `zoneadm list -cp` output (`:` inside a zonepath is written `\:`).
pub fn parse_zone_list(text: &str) -> Vec<ZoneEntry> {
    let mut out = Vec::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let mut fields = Vec::new();
        let mut cur = String::new();
        let mut chars = line.chars();
        while let Some(c) = chars.next() {
            match c {
                '\\' => {
                    if let Some(n) = chars.next() {
                        cur.push(n);
                    }
                }
                ':' => fields.push(std::mem::take(&mut cur)),
                c => cur.push(c),
            }
        }
        fields.push(cur);
        if fields.len() >= 6 {
            out.push(ZoneEntry {
                name: fields[1].clone(),
                state: fields[2].clone(),
                zonepath: fields[3].clone(),
                brand: fields[5].clone(),
            });
        }
    }
    out
}

/// Places zone roots like [`DirProvisioner`], then configures, installs and boots zones with
/// zonecfg/zoneadm. A zone is this worker's when the system's zonepath for it is
/// `<base>/<zone>` (the base carries this worker's mark); any other zone of that name is
/// refused. Every change starts from the state zoneadm reports, so a run cut short at any step
/// is finished by the next: a running zone is shut down (halted after its stop timeout),
/// a ready or half-stopped one halted, an installed one detached when it is being replaced
/// (uninstalled when removed), an incomplete one uninstalled, a configured one deleted, then
/// the new zone is placed, configured, installed and booted. Detaching keeps the old root in
/// its zonepath until the new one is placed (`uninstall` deletes it in place), so a crash
/// anywhere in a replacement leaves the old root or the new one, never neither. The replaced
/// root is kept as the previous one, detached; going back to it is in `rollback` (`zoneadm
/// attach -F`).
#[derive(Debug)]
pub struct IllumosProvisioner<R> {
    dir: DirProvisioner,
    runner: R,
}

impl<R: CommandRunner> IllumosProvisioner<R> {
    /// A provisioner placing zonepaths with `dir` and running commands with `runner`.
    pub fn new(dir: DirProvisioner, runner: R) -> Self {
        IllumosProvisioner { dir, runner }
    }

    /// Calls `hook` before each command and each file-system step (see [`super::StepHook`]).
    pub fn with_step_hook(mut self, hook: super::StepHook) -> Self {
        self.dir = self.dir.with_step_hook(hook);
        self
    }

    /// The runner, giving up the provisioner.
    pub fn into_runner(self) -> R {
        self.runner
    }

    /// The runner.
    pub fn runner(&self) -> &R {
        &self.runner
    }

    fn run(
        &self,
        zone: &str,
        argv: &[String],
        timeout: Option<Duration>,
    ) -> Result<CommandOutcome, ProvisionError> {
        self.dir.step(zone, &argv.join(" "))?;
        self.runner
            .run(argv, timeout)
            .map_err(|e| ProvisionError::Command {
                zone: zone.to_owned(),
                command: argv.join(" "),
                detail: e.to_string(),
            })
    }

    fn run_ok(&self, zone: &str, argv: &[String]) -> Result<CommandOutcome, ProvisionError> {
        let out = self.run(zone, argv, None)?;
        if out.code == Some(0) {
            Ok(out)
        } else {
            Err(ProvisionError::Command {
                zone: zone.to_owned(),
                command: argv.join(" "),
                detail: format!("exit {:?}: {}", out.code, out.stderr.trim()),
            })
        }
    }

    /// Every zone the system has (reads only: no step hook).
    fn system_zones(&self) -> Result<Vec<ZoneEntry>, ProvisionError> {
        let argv = list_command();
        let out = self
            .runner
            .run(&argv, None)
            .map_err(|e| ProvisionError::Command {
                zone: String::new(),
                command: argv.join(" "),
                detail: e.to_string(),
            })?;
        if out.code != Some(0) {
            return Err(ProvisionError::Command {
                zone: String::new(),
                command: argv.join(" "),
                detail: format!("exit {:?}: {}", out.code, out.stderr.trim()),
            });
        }
        Ok(parse_zone_list(&out.stdout))
    }

    fn zonepath(&self, zone: &str) -> PathBuf {
        self.dir.base().join(zone)
    }

    /// The system's entry for `zone`, checked to be ours; `None` when the system has none.
    fn entry(&self, zone: &str) -> Result<Option<ZoneEntry>, ProvisionError> {
        let Some(e) = self.system_zones()?.into_iter().find(|e| e.name == zone) else {
            return Ok(None);
        };
        if Path::new(&e.zonepath) != self.zonepath(zone) {
            return Err(ProvisionError::NotOurs {
                zone: zone.to_owned(),
                zonepath: e.zonepath,
            });
        }
        Ok(Some(e))
    }

    /// Brings the system's zone `zone`, if it has one, down and detached with its root kept in
    /// the zonepath: what every switch does before the zonepath moves.
    fn detach_if_present(&self, zone: &str) -> Result<(), ProvisionError> {
        if self.entry(zone)?.is_some() {
            self.bring_down(zone, self.grace(zone), true)?;
        }
        Ok(())
    }

    /// Takes a zone of ours from whatever state it is in to gone, one zoneadm/zonecfg step at a
    /// time, reading the state again after each. With `keep_root` (a replacement) an installed
    /// zone is detached, not uninstalled: its root stays in the zonepath for the provisioner
    /// to move aside only once the new one is in place.
    fn bring_down(
        &self,
        zone: &str,
        grace: Duration,
        keep_root: bool,
    ) -> Result<(), ProvisionError> {
        let (shutdown, halt) = stop_commands(zone);
        let mut shut_down = false;
        // Each state leads to a lower one; the bound only guards against a system that
        // reports the same state forever.
        for _ in 0..8 {
            let Some(e) = self.entry(zone)? else {
                return Ok(());
            };
            match e.state.as_str() {
                "running" if !shut_down => {
                    shut_down = true;
                    let out = self.run(zone, &shutdown, Some(grace))?;
                    if out.code != Some(0) {
                        tracing::info!(
                            zone,
                            timed_out = out.timed_out,
                            stderr = out.stderr.trim(),
                            "shutdown did not finish within the stop timeout; halting"
                        );
                    }
                }
                "running" | "ready" | "shutting_down" | "down" => {
                    self.run_ok(zone, &halt)?;
                }
                "installed" if keep_root => {
                    self.run_ok(zone, &detach_command(zone))?;
                }
                "installed" | "incomplete" => {
                    self.run_ok(zone, &remove_commands(zone)[0])?;
                }
                "configured" => {
                    self.run_ok(zone, &remove_commands(zone)[1])?;
                }
                other => {
                    return Err(ProvisionError::State {
                        zone: zone.to_owned(),
                        state: other.to_owned(),
                    });
                }
            }
        }
        Err(ProvisionError::State {
            zone: zone.to_owned(),
            state: "unchanged after repeated commands".into(),
        })
    }

    /// Runs the create commands for a zonepath just placed.
    fn create(&self, d: &ZoneDescription) -> Result<(), ProvisionError> {
        for c in create_commands(&d.zone, &d.zonepath.join("zonecfg.txt")) {
            self.run_ok(&d.zone, &c)?;
        }
        Ok(())
    }

    /// The grace period of the zone as provisioned (its description), else the default.
    fn grace(&self, zone: &str) -> Duration {
        let secs = match self.dir.current(zone) {
            Ok(Some(d)) => d.stop_timeout_secs,
            _ => DEFAULT_STOP_TIMEOUT_SECS,
        };
        Duration::from_secs(u64::from(secs))
    }
}

impl<R: CommandRunner> Provisioner for IllumosProvisioner<R> {
    fn staging_dir(&self) -> PathBuf {
        self.dir.staging_dir()
    }

    /// The description, when the zone is ours and running.
    fn current(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        match self.entry(zone)? {
            Some(e) if e.state == "running" => self.dir.current(zone),
            _ => Ok(None),
        }
    }

    fn provision(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        let zone = spec.name.as_str();
        // An image config the zone cannot be made from is refused before a running zone of
        // this name is brought down (the conformance suite's failed-create case).
        super::describe(spec, root.image(), self.zonepath(zone))?;
        // Refused before anything changes when the name belongs to someone else.
        self.detach_if_present(zone)?;
        let d = self.dir.provision(spec, root)?;
        self.create(&d)?;
        Ok(d)
    }

    fn provision_unconfirmed(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        self.replace_unconfirmed(spec, root)
    }

    fn confirm(&self, zone: &str) -> Result<(), ProvisionError> {
        self.dir.confirm(zone)
    }

    fn undo(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        self.undo_switch(zone)
    }

    fn previous(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        self.dir.previous(zone)
    }

    fn rollback(&self, zone: &str) -> Result<ZoneDescription, ProvisionError> {
        self.roll_back(zone)
    }

    fn remove(&self, zone: &str) -> Result<(), ProvisionError> {
        if self.entry(zone)?.is_some() {
            self.bring_down(zone, self.grace(zone), false)?;
        }
        self.dir.remove(zone)
    }

    /// Up: the zone `running` and, when the image names a command, its entrypoint service
    /// `online` (reads only: no step hook).
    fn ready(&self, zone: &str) -> Result<bool, ProvisionError> {
        if !matches!(self.entry(zone)?, Some(e) if e.state == "running") {
            return Ok(false);
        }
        let Some(d) = self.dir.current(zone)? else {
            return Ok(false);
        };
        if smf_manifest(&d).is_none() {
            return Ok(true);
        }
        let argv = service_state_command(zone);
        let out = self
            .runner
            .run(&argv, Some(Duration::from_secs(10)))
            .map_err(|e| ProvisionError::Command {
                zone: zone.to_owned(),
                command: argv.join(" "),
                detail: e.to_string(),
            })?;
        Ok(out.code == Some(0) && out.stdout.trim() == "online")
    }

    fn zones(&self) -> Result<Vec<String>, ProvisionError> {
        let mut out = self.dir.zones()?;
        for e in self.system_zones()? {
            if Path::new(&e.zonepath) == self.zonepath(&e.name) && !out.contains(&e.name) {
                out.push(e.name);
            }
        }
        out.sort();
        Ok(out)
    }

    fn capabilities(&self) -> Capabilities {
        Capabilities {
            brands: ILLUMOS_BRANDS.iter().map(|b| (*b).to_owned()).collect(),
            caps_cpu: true,
            caps_memory: true,
            runs_processes: true,
        }
    }
}
