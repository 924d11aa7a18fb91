//! The one way the worker runs `zfs`: [`Zfs`] builds argument vectors (never a shell line),
//! runs the program, and turns a failure into a [`ZfsError`] naming the command and its
//! stderr. Names of datasets are [`DatasetName`]s, checked before they reach an argument.

use std::ffi::OsString;
use std::fmt;
use std::io::Read;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long `zfs destroy` is retried while ZFS answers "dataset is busy" (zfs-fuse holds a
/// freshly mounted or unmounted file system for a moment; illumos can too while a process
/// leaves it).
const BUSY_RETRY: Duration = Duration::from_secs(10);

/// How long one `zfs` command may run before it is killed and reported as hung. The worker's
/// commands (get, snapshot, clone, destroy of one dataset, set) take milliseconds to seconds; a
/// command still running after ten minutes is stuck (a FUSE request zfs-fuse never answers, a
/// pool suspended on I/O errors), and a pass that waits on it forever stops every other zone.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(600);

/// Longest stderr excerpt kept in an error.
const STDERR_EXCERPT: usize = 2000;

/// A `zfs` command failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ZfsError {
    /// The program could not be started.
    #[error("`{command}` could not be started")]
    Spawn {
        /// The command line (for reading; it was never run through a shell).
        command: String,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// The program ran and failed.
    #[error("`{command}` failed ({status}): {stderr}")]
    Failed {
        /// The command line.
        command: String,
        /// Its exit status.
        status: String,
        /// What it printed on stderr (trimmed, at most 2000 bytes).
        stderr: String,
    },
    /// The program ran longer than the runner's timeout and was killed.
    #[error(
        "`{command}` did not finish within {after:?} and was killed (is the pool suspended or the ZFS daemon hung?)"
    )]
    TimedOut {
        /// The command line.
        command: String,
        /// The timeout it ran into.
        after: Duration,
    },
    /// The program's output is not what the command promises.
    #[error("`{command}` printed unexpected output {line:?}")]
    Output {
        /// The command line.
        command: String,
        /// The line that could not be read.
        line: String,
    },
}

impl ZfsError {
    /// True when ZFS said the dataset does not exist.
    pub fn is_missing(&self) -> bool {
        matches!(self, ZfsError::Failed { stderr, .. } if stderr.contains("does not exist"))
    }

    fn is_busy(&self) -> bool {
        matches!(self, ZfsError::Failed { stderr, .. } if stderr.contains("is busy"))
    }
}

/// A dataset or snapshot name is unusable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("dataset name {name:?}: {reason}")]
pub struct DatasetNameError {
    /// The name as given.
    pub name: String,
    /// What is wrong.
    pub reason: &'static str,
}

/// A checked ZFS file-system name (`pool/a/b`): components of `A-Z a-z 0-9 _ - . :`, none
/// empty, `.` or `..`, none starting with `-` (so no name can read as an option), at most 255
/// bytes (ZFS's limit, snapshot suffix included, is 256).
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DatasetName(String);

impl DatasetName {
    /// Checks `name`.
    pub fn parse(name: &str) -> Result<DatasetName, DatasetNameError> {
        let err = |reason| DatasetNameError {
            name: name.to_owned(),
            reason,
        };
        if name.is_empty() {
            return Err(err("empty"));
        }
        if name.len() > 240 {
            return Err(err("longer than 240 bytes"));
        }
        for c in name.split('/') {
            if c.is_empty() || c == "." || c == ".." {
                return Err(err("has an empty, `.` or `..` component"));
            }
            if c.starts_with('-') {
                return Err(err("a component starts with `-`"));
            }
            if !c
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.' | b':'))
            {
                return Err(err("only A-Z a-z 0-9 _ - . : and / are allowed"));
            }
        }
        Ok(DatasetName(name.to_owned()))
    }

    /// `self/component`.
    pub fn child(&self, component: &str) -> Result<DatasetName, DatasetNameError> {
        DatasetName::parse(&format!("{}/{component}", self.0))
    }

    /// The snapshot `self@snap`.
    pub fn snapshot(&self, snap: &str) -> String {
        format!("{}@{snap}", self.0)
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for DatasetName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One property as `zfs get -H -p -o value,source` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Property {
    /// The value (`-` when unset).
    pub value: String,
    /// `local`, `default`, `-`, or `inherited from …`.
    pub source: String,
}

impl Property {
    /// Set on the dataset itself (not inherited, not a default).
    pub fn is_local(&self) -> bool {
        self.source == "local"
    }
}

/// Runs the `zfs` program (`zfs` on `PATH`, or the given path), each command killed after a
/// timeout ([`DEFAULT_TIMEOUT`] unless [`Zfs::with_timeout`] says otherwise).
#[derive(Debug, Clone)]
pub struct Zfs {
    program: PathBuf,
    timeout: Duration,
}

impl Default for Zfs {
    fn default() -> Self {
        Zfs::with_program("zfs")
    }
}

impl Zfs {
    /// Runs `program` instead of `zfs` from `PATH`.
    pub fn with_program(program: impl Into<PathBuf>) -> Zfs {
        Zfs {
            program: program.into(),
            timeout: DEFAULT_TIMEOUT,
        }
    }

    /// Kills a command still running after `timeout` and reports [`ZfsError::TimedOut`].
    pub fn with_timeout(mut self, timeout: Duration) -> Zfs {
        self.timeout = timeout;
        self
    }

    fn line(&self, args: &[OsString]) -> String {
        let mut s = self.program.display().to_string();
        for a in args {
            s.push(' ');
            s.push_str(&a.to_string_lossy());
        }
        s
    }

    /// Runs `zfs ARGS…` and returns its stdout.
    pub fn run<I, A>(&self, args: I) -> Result<String, ZfsError>
    where
        I: IntoIterator<Item = A>,
        A: Into<OsString>,
    {
        let args: Vec<OsString> = args.into_iter().map(Into::into).collect();
        let command = self.line(&args);
        let mut child = Command::new(&self.program)
            .args(&args)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|source| ZfsError::Spawn {
                command: command.clone(),
                source,
            })?;
        // Both pipes are drained while the command runs (a full pipe would stall it), on
        // threads so the wait below can give up on a hung command without blocking on them.
        let stdout = drain(child.stdout.take());
        let stderr = drain(child.stderr.take());
        let status = match wait_until(&mut child, self.timeout) {
            Ok(Some(status)) => status,
            Ok(None) => {
                // A command stuck in the kernel (uninterruptible FUSE wait) dies only when it
                // leaves it; the error is reported now and the readers are left to finish.
                let _ = child.kill();
                let _ = child.try_wait();
                return Err(ZfsError::TimedOut {
                    command,
                    after: self.timeout,
                });
            }
            Err(source) => {
                return Err(ZfsError::Spawn { command, source });
            }
        };
        let stdout = stdout.join().unwrap_or_default();
        let stderr = stderr.join().unwrap_or_default();
        if !status.success() {
            let mut stderr = String::from_utf8_lossy(&stderr).trim().to_owned();
            if stderr.len() > STDERR_EXCERPT {
                let mut cut = STDERR_EXCERPT;
                while !stderr.is_char_boundary(cut) {
                    cut -= 1;
                }
                stderr.truncate(cut);
            }
            return Err(ZfsError::Failed {
                command,
                status: status.to_string(),
                stderr,
            });
        }
        Ok(String::from_utf8_lossy(&stdout).into_owned())
    }

    /// `zfs get` of `props` on `target` (a dataset or `dataset@snap`): `None` when it does not
    /// exist, else one [`Property`] per name, in order.
    pub fn get(&self, target: &str, props: &[&str]) -> Result<Option<Vec<Property>>, ZfsError> {
        let args = [
            "get",
            "-H",
            "-p",
            "-o",
            "property,value,source",
            &props.join(","),
            target,
        ];
        let out = match self.run(args) {
            Ok(o) => o,
            Err(e) if e.is_missing() => return Ok(None),
            Err(e) => return Err(e),
        };
        let mut found = Vec::with_capacity(props.len());
        for want in props {
            let line = out
                .lines()
                .find(|l| l.split('\t').next() == Some(want))
                .ok_or_else(|| ZfsError::Output {
                    command: self.line(&args.map(OsString::from)),
                    line: format!("(no line for {want})"),
                })?;
            let mut f = line.split('\t');
            let (_, Some(value), Some(source)) = (f.next(), f.next(), f.next()) else {
                return Err(ZfsError::Output {
                    command: self.line(&args.map(OsString::from)),
                    line: line.to_owned(),
                });
            };
            found.push(Property {
                value: value.to_owned(),
                source: source.to_owned(),
            });
        }
        Ok(Some(found))
    }

    /// `zfs get -r -d 1` of `props` on the file systems directly under `parent` (not `parent`
    /// itself, not snapshots): one command for all of them, each child's name with one
    /// [`Property`] per name, in order.
    pub fn get_children(
        &self,
        parent: &str,
        props: &[&str],
    ) -> Result<Vec<(String, Vec<Property>)>, ZfsError> {
        // zfs-fuse 0.7's `zfs get` has no `-t`: snapshots (of `parent`, at depth 1) are
        // dropped by name below.
        let joined = props.join(",");
        let args = [
            "get",
            "-H",
            "-p",
            "-r",
            "-d",
            "1",
            "-o",
            "name,property,value,source",
            &joined,
            parent,
        ];
        let out = self.run(args)?;
        let bad = |line: &str| ZfsError::Output {
            command: self.line(&args.map(OsString::from)),
            line: line.to_owned(),
        };
        let mut children: Vec<(String, Vec<Option<Property>>)> = Vec::new();
        for line in out.lines().filter(|l| !l.is_empty()) {
            let mut f = line.split('\t');
            let (Some(name), Some(prop), Some(value), Some(source)) =
                (f.next(), f.next(), f.next(), f.next())
            else {
                return Err(bad(line));
            };
            if name == parent || name.contains('@') {
                continue;
            }
            let Some(k) = props.iter().position(|p| *p == prop) else {
                return Err(bad(line));
            };
            if children.last().is_none_or(|(n, _)| n != name) {
                children.push((name.to_owned(), vec![None; props.len()]));
            }
            let slot = &mut children.last_mut().expect("pushed above").1[k];
            *slot = Some(Property {
                value: value.to_owned(),
                source: source.to_owned(),
            });
        }
        children
            .into_iter()
            .map(|(name, found)| {
                let found: Option<Vec<Property>> = found.into_iter().collect();
                found
                    .map(|f| (name.clone(), f))
                    .ok_or_else(|| bad(&format!("(a property of {name} missing)")))
            })
            .collect()
    }

    /// Whether `target` (dataset or snapshot) exists.
    pub fn exists(&self, target: &str) -> Result<bool, ZfsError> {
        Ok(self.get(target, &["type"])?.is_some())
    }

    /// `zfs destroy [-r] target`, retried while ZFS says the dataset is busy.
    pub fn destroy(&self, target: &str, recursive: bool) -> Result<(), ZfsError> {
        let mut args = vec!["destroy"];
        if recursive {
            args.push("-r");
        }
        args.push(target);
        self.run_while_busy(&args).map(drop)
    }

    /// [`Zfs::run`], retried for up to 10 s while ZFS says a dataset or mountpoint is busy
    /// (zfs-fuse does for a moment after a mount or unmount).
    pub fn run_while_busy<A: Clone + Into<OsString>>(
        &self,
        args: &[A],
    ) -> Result<String, ZfsError> {
        let started = std::time::Instant::now();
        let mut pause = Duration::from_millis(50);
        loop {
            match self.run(args.iter().cloned()) {
                Ok(out) => return Ok(out),
                Err(e) if e.is_busy() && started.elapsed() < BUSY_RETRY => {
                    std::thread::sleep(pause);
                    pause = (pause * 2).min(Duration::from_millis(500));
                }
                Err(e) => return Err(e),
            }
        }
    }
}

/// Reads a child's pipe to its end on a thread of its own.
fn drain<R: Read + Send + 'static>(pipe: Option<R>) -> std::thread::JoinHandle<Vec<u8>> {
    std::thread::spawn(move || {
        let mut buf = Vec::new();
        if let Some(mut p) = pipe {
            let _ = p.read_to_end(&mut buf);
        }
        buf
    })
}

/// Waits for `child` to exit, at most `timeout`: `None` when it is still running then.
/// Polling `try_wait` (1 ms, doubling to 50 ms) rather than a SIGCHLD-based crate keeps the
/// process's signal handling to the async runtime, which owns SIGCHLD for its own children.
fn wait_until(child: &mut Child, timeout: Duration) -> std::io::Result<Option<ExitStatus>> {
    let deadline = Instant::now() + timeout;
    let mut pause = Duration::from_millis(1);
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status));
        }
        let now = Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 2).min(Duration::from_millis(50));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dataset_names() {
        for good in ["pool", "pool/rdctl", "p/a_b-c.d:e", "tank/layers/sha256-0a"] {
            assert_eq!(DatasetName::parse(good).unwrap().as_str(), good);
        }
        for (bad, why) in [
            ("", "empty"),
            ("pool/", "empty"),
            ("/pool", "empty"),
            ("pool//x", "empty"),
            ("pool/..", "`..`"),
            ("-o", "starts with `-`"),
            ("pool/-r", "starts with `-`"),
            ("pool@snap", "only"),
            ("pool/a b", "only"),
            ("pool/a;rm", "only"),
        ] {
            let e = DatasetName::parse(bad).unwrap_err();
            assert!(e.to_string().contains(why), "{bad:?}: {e}");
        }
        assert!(DatasetName::parse(&"a".repeat(241)).is_err());
    }

    #[test]
    fn a_missing_program_names_the_command() {
        let e = Zfs::with_program("/nonexistent/zfs")
            .run(["list", "-H", "pool"])
            .unwrap_err();
        assert!(matches!(e, ZfsError::Spawn { .. }));
        assert_eq!(
            e.to_string(),
            "`/nonexistent/zfs list -H pool` could not be started"
        );
    }

    #[test]
    fn a_failure_carries_status_and_stderr() {
        // `sh -c` stands in for a zfs that fails: only the runner is under test here.
        let e = Zfs::with_program("sh")
            .run([
                "-c",
                "echo \"cannot open 'p/x': dataset does not exist\" >&2; exit 1",
            ])
            .unwrap_err();
        assert!(e.is_missing(), "{e}");
        assert!(e.to_string().contains("exit status: 1"), "{e}");
    }

    #[test]
    fn children_are_read_from_one_get_without_the_parent_or_snapshots() {
        // What `zfs get -r -d 1 -o name,property,value,source` prints (zfs-fuse 0.7 lists
        // the parent and its snapshots too, and a child's properties in any order).
        let out = "p/r\tmounted\tyes\t-\np/r\tmountpoint\t/z\tdefault\n\
                   p/r@s\tmounted\t-\t-\np/r@s\tmountpoint\t-\t-\n\
                   p/r/a\tmounted\tno\t-\np/r/a\tmountpoint\t/z/a\tlocal\n\
                   p/r/b\tmountpoint\tnone\tlocal\np/r/b\tmounted\tyes\t-\n";
        let (_dir, fake) = fake_get(out);
        let got = Zfs::with_program(fake)
            .get_children("p/r", &["mountpoint", "mounted"])
            .unwrap();
        let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names, ["p/r/a", "p/r/b"]);
        assert_eq!(got[0].1[0].value, "/z/a");
        assert_eq!(got[0].1[1].value, "no");
        assert_eq!(got[1].1[0].value, "none");
        assert!(got[1].1[0].is_local());
        assert_eq!(got[1].1[1].value, "yes");
        // A child with a property missing is an error naming it, not a guess.
        let (_dir, fake) = fake_get("p/r/a\tmounted\tno\t-\n");
        let e = Zfs::with_program(fake)
            .get_children("p/r", &["mountpoint", "mounted"])
            .unwrap_err();
        assert!(e.to_string().contains("a property of p/r/a missing"), "{e}");
    }

    /// A script standing in for `zfs` that prints `out` whatever it is asked (in a folder
    /// that goes with the returned guard).
    fn fake_get(out: &str) -> (tempfile::TempDir, std::path::PathBuf) {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let printed = dir.path().join("out");
        std::fs::write(&printed, out).unwrap();
        let script = dir.path().join("zfs");
        std::fs::write(&script, format!("#!/bin/sh\ncat '{}'\n", printed.display())).unwrap();
        std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
        (dir, script)
    }

    #[test]
    fn a_hung_command_is_killed_at_the_timeout() {
        let started = Instant::now();
        let e = Zfs::with_program("sh")
            .with_timeout(Duration::from_millis(300))
            .run(["-c", "sleep 30"])
            .unwrap_err();
        assert!(matches!(e, ZfsError::TimedOut { .. }), "{e}");
        assert!(
            e.to_string()
                .starts_with("`sh -c sleep 30` did not finish within 300ms and was killed"),
            "{e}"
        );
        // Killed, not waited out (30 s).
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{:?}",
            started.elapsed()
        );
    }

    #[test]
    fn large_output_on_both_pipes_does_not_stall_the_command() {
        // 1 MiB on each pipe: more than a pipe's buffer, so both must be read while it runs.
        let out = Zfs::with_program("sh")
            .with_timeout(Duration::from_secs(60))
            .run([
                "-c",
                "head -c 1048576 /dev/zero | tr '\\0' a; head -c 1048576 /dev/zero >&2",
            ])
            .unwrap();
        assert_eq!(out.len(), 1 << 20);
        assert!(out.bytes().all(|b| b == b'a'));
    }
}
