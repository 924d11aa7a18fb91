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

use super::{DirProvisioner, ProvisionError, Provisioner, ZoneDescription};
use crate::config::{ResourceLimits, ZoneSpec};
use crate::verify::VerifiedRoot;

/// Where the entrypoint manifest goes inside the zone's root (imported at boot by
/// `svc:/system/manifest-import`).
pub const ENTRYPOINT_MANIFEST_PATH: &str = "var/svc/manifest/site/rdctl-entrypoint.xml";

/// The SMF stop method for a stop signal: `SIGTERM` → `:kill -TERM`, `SIGRTMIN+3` →
/// `:kill -RTMIN+3`. The signal was checked to be an illumos signal name.
pub fn smf_stop_exec(stop_signal: &str) -> String {
    let name = stop_signal.strip_prefix("SIG").unwrap_or(stop_signal);
    format!(":kill -{name}")
}

/// The zonecfg command file for a zone.
pub fn zonecfg_script(zone: &str, zonepath: &Path, brand: &str, limits: &ResourceLimits) -> String {
    let mut s = String::new();
    let _ = writeln!(s, "create -b");
    let _ = writeln!(
        s,
        "set zonepath={}",
        zonecfg_quote(&zonepath.to_string_lossy())
    );
    let _ = writeln!(s, "set brand={brand}");
    let _ = writeln!(s, "set autoboot=false");
    let _ = writeln!(s, "set ip-type=exclusive");
    if let Some(c) = limits.cpus {
        let _ = writeln!(s, "add capped-cpu\nset ncpus={c}\nend");
    }
    if let Some(m) = &limits.memory {
        let _ = writeln!(s, "add capped-memory\nset physical={m}\nend");
    }
    let _ = writeln!(s, "verify\ncommit");
    let _ = zone;
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandOutcome {
    /// Exit code; `None` when killed or timed out.
    pub code: Option<i32>,
    /// True when the timeout ended it.
    pub timed_out: bool,
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

impl CommandRunner for SystemRunner {
    fn run(&self, argv: &[String], timeout: Option<Duration>) -> std::io::Result<CommandOutcome> {
        let (prog, args) = argv
            .split_first()
            .ok_or_else(|| std::io::Error::other("empty command"))?;
        let mut child = Command::new(prog)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()?;
        let start = Instant::now();
        let mut timed_out = false;
        loop {
            if child.try_wait()?.is_some() {
                break;
            }
            if timeout.is_some_and(|t| start.elapsed() >= t) {
                timed_out = true;
                child.kill()?;
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let out = child.wait_with_output()?;
        let err = String::from_utf8_lossy(&out.stderr);
        let tail: String = err
            .chars()
            .rev()
            .take(2000)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        Ok(CommandOutcome {
            code: out.status.code(),
            timed_out,
            stderr: tail,
        })
    }
}

/// Places zone roots like [`DirProvisioner`], then configures, installs and boots zones with
/// zonecfg/zoneadm; a replaced zone is shut down (halted after its grace period), uninstalled
/// and deleted first.
#[derive(Debug)]
pub struct IllumosProvisioner<R> {
    dir: DirProvisioner,
    runner: R,
}

impl<R: CommandRunner> IllumosProvisioner<R> {
    /// A provisioner placing zonepaths under `base` and running commands with `runner`.
    pub fn new(dir: DirProvisioner, runner: R) -> Self {
        IllumosProvisioner { dir, runner }
    }

    /// The runner, giving up the provisioner.
    pub fn into_runner(self) -> R {
        self.runner
    }

    fn run(
        &self,
        zone: &str,
        argv: &[String],
        timeout: Option<Duration>,
    ) -> Result<CommandOutcome, ProvisionError> {
        let out = self
            .runner
            .run(argv, timeout)
            .map_err(|e| ProvisionError::Command {
                zone: zone.to_owned(),
                command: argv.join(" "),
                detail: e.to_string(),
            })?;
        Ok(out)
    }

    fn run_ok(&self, zone: &str, argv: &[String]) -> Result<(), ProvisionError> {
        let out = self.run(zone, argv, None)?;
        if out.code == Some(0) {
            Ok(())
        } else {
            Err(ProvisionError::Command {
                zone: zone.to_owned(),
                command: argv.join(" "),
                detail: format!("exit {:?}: {}", out.code, out.stderr.trim()),
            })
        }
    }

    /// Shutdown with the grace period, halt if it did not finish, then uninstall and delete.
    fn stop_and_remove(&self, zone: &str, grace: Duration) -> Result<(), ProvisionError> {
        let (shutdown, halt) = stop_commands(zone);
        let out = self.run(zone, &shutdown, Some(grace))?;
        if out.code != Some(0) {
            tracing::info!(
                zone,
                timed_out = out.timed_out,
                "shutdown did not finish; halting"
            );
            self.run_ok(zone, &halt)?;
        }
        for c in remove_commands(zone) {
            self.run_ok(zone, &c)?;
        }
        Ok(())
    }
}

impl<R: CommandRunner> Provisioner for IllumosProvisioner<R> {
    fn staging_dir(&self) -> PathBuf {
        self.dir.staging_dir()
    }

    fn current(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        self.dir.current(zone)
    }

    fn provision(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        if let Some(old) = self.dir.current(&spec.name)? {
            self.stop_and_remove(
                &spec.name,
                Duration::from_secs(u64::from(old.stop_timeout_secs)),
            )?;
        }
        let d = self.dir.provision(spec, root)?;
        for c in create_commands(&d.zone, &d.zonepath.join("zonecfg.txt")) {
            self.run_ok(&d.zone, &c)?;
        }
        Ok(d)
    }

    fn remove(&self, zone: &str) -> Result<(), ProvisionError> {
        if let Some(old) = self.dir.current(zone)? {
            self.stop_and_remove(zone, Duration::from_secs(u64::from(old.stop_timeout_secs)))?;
        }
        self.dir.remove(zone)
    }

    fn zones(&self) -> Result<Vec<String>, ProvisionError> {
        self.dir.zones()
    }
}
