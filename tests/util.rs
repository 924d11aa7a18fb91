//! Shared helpers for the end-to-end tests: the rdctl binary, pinned tools, commands.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::{Arc, Mutex, mpsc};
use std::time::{Duration, Instant};

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `rdctl` binary built for these tests.
pub fn rdctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rdctl"))
}

/// A pinned outside tool: `.tools/bin/NAME` (built by scripts/install-deps.sh) or the PATH.
/// A missing tool fails the test with the way to install it; tests never skip.
pub fn tool(name: &str) -> Command {
    let local = root().join(".tools/bin").join(name);
    if local.is_file() {
        return Command::new(local);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => Command::new(p),
        None => panic!(
            "{name} is not installed: run scripts/install-deps.sh (README's test command does)"
        ),
    }
}

/// Runs a command, failing the test with its output when it does not exit 0.
pub fn ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        tail(&out.stdout),
        tail(&out.stderr)
    );
    out
}

/// The last 4 KiB of a child's output, for failure messages.
pub fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(4096);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// A temporary directory that survives as long as the value.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// Runs `rdctl validate ARGS --json` and returns exit code and parsed report.
pub fn validate_json(args: &[&str]) -> (i32, serde_json::Value) {
    let out = rdctl()
        .arg("validate")
        .args(args)
        .arg("--json")
        .output()
        .expect("run rdctl");
    let code = out.status.code().expect("rdctl exited by a signal");
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rdctl validate {args:?} printed no JSON ({e}); stderr:\n{}",
            tail(&out.stderr)
        )
    });
    (code, v)
}

/// Rule ids in a JSON report.
pub fn rules(report: &serde_json::Value) -> Vec<String> {
    report["violations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v["rule"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A path as &str for command lines.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}

/// A running `rdctl registry serve`, killed and reaped on drop, with a bounded log tail.
pub struct Server {
    child: Child,
    /// The address it listens on.
    pub addr: SocketAddr,
    log: Arc<Mutex<VecDeque<String>>>,
    /// The thread copying stderr into `log`; it ends at EOF, after the process exited.
    reader: Option<std::thread::JoinHandle<()>>,
}

impl Server {
    /// Starts `rdctl registry serve` on 127.0.0.1 port 0 with extra flags.
    pub fn start(data: &Path, extra: &[&str]) -> Server {
        Self::spawn(data, extra, &[])
    }

    /// Starts it with extra environment variables.
    pub fn start_with_env(data: &Path, env: &[(&str, &str)]) -> Server {
        Self::spawn(data, &[], env)
    }

    /// Starts it with extra flags and an environment whose `AWS_*` variables are exactly `env`'s
    /// (none inherited from the test process).
    pub fn start_with_aws_env(data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Self::spawn_inner(data, extra, env, true)
    }

    fn spawn(data: &Path, extra: &[&str], env: &[(&str, &str)]) -> Server {
        Self::spawn_inner(data, extra, env, false)
    }

    fn spawn_inner(data: &Path, extra: &[&str], env: &[(&str, &str)], clean_aws: bool) -> Server {
        let mut cmd = rdctl();
        if clean_aws {
            for (k, _) in std::env::vars_os().filter_map(|(k, v)| Some((k.into_string().ok()?, v)))
            {
                if k.starts_with("AWS_") {
                    cmd.env_remove(k);
                }
            }
        }
        let mut child = cmd
            .args([
                "registry",
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--data",
                s(data),
            ])
            .args(extra)
            .envs(env.iter().copied())
            .env("RDCTL_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start rdctl registry serve");
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let (tx, rx) = mpsc::channel();
        let stderr = child.stderr.take().expect("piped stderr");
        let l = log.clone();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if let Some(rest) = line.split("registry listening on ").nth(1) {
                    let addr = rest.split_whitespace().next().unwrap_or("").to_owned();
                    let _ = tx.send(addr);
                }
                let mut l = l.lock().unwrap();
                if l.len() == 200 {
                    l.pop_front();
                }
                l.push_back(line);
            }
        });
        let addr = match rx.recv_timeout(Duration::from_secs(30)) {
            Ok(a) => a.parse().expect("listen address"),
            Err(_) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "registry did not start; log:\n{}",
                    log.lock()
                        .unwrap()
                        .iter()
                        .cloned()
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
        };
        Server {
            child,
            addr,
            log,
            reader: Some(reader),
        }
    }

    /// `HOST:PORT`.
    pub fn host(&self) -> String {
        self.addr.to_string()
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        self.log
            .lock()
            .unwrap()
            .iter()
            .cloned()
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// Whether a line holding `needle` reaches the log within 10 s. Its stderr is read on a
    /// thread, so a line the server wrote before it answered a request may arrive here after
    /// the answer did: a check right after a request waits for it rather than racing it.
    pub fn log_shows(&self, needle: &str) -> bool {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if self.log.lock().unwrap().iter().any(|l| l.contains(needle)) {
                return true;
            }
            if Instant::now() > deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Sends a signal (`-TERM`, `-9`) with kill(1).
    pub fn signal(&self, sig: &str) {
        ok(Command::new("kill").args([sig, &self.child.id().to_string()]));
    }

    /// Waits for exit, at most `limit`.
    pub fn wait(&mut self, limit: Duration) -> Option<ExitStatus> {
        let start = Instant::now();
        while start.elapsed() < limit {
            if let Some(st) = self.child.try_wait().expect("wait for rdctl") {
                // The process is gone but its last lines may still be in the pipe: let the
                // reader reach EOF so `log_tail` holds everything it wrote.
                if let Some(r) = self.reader.take() {
                    let until = Instant::now() + Duration::from_secs(5);
                    while !r.is_finished() && Instant::now() < until {
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    if r.is_finished() {
                        let _ = r.join();
                    }
                }
                return Some(st);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
        let _ = self.child.wait();
    }
}

/// `docker-registry serve` (CNCF distribution 2.8, Debian's package) on a free loopback port
/// with the given `storage:` section (YAML indented by two spaces, upload purging is added);
/// killed and reaped when dropped, its log kept for failure messages.
pub struct Distribution {
    child: Child,
    port: u16,
    log: std::path::PathBuf,
}

impl Distribution {
    /// Starts it with its config and log in `dir`, and waits until `/v2/` answers 200.
    pub fn start(dir: &Path, storage: &str) -> Distribution {
        Self::start_program(dir, storage, Command::new("docker-registry"))
    }

    /// Starts CNCF distribution v3 (`.tools/bin/distribution-v3`, no referrers API) the same
    /// way.
    pub fn start_v3(dir: &Path, storage: &str) -> Distribution {
        Self::start_program(dir, storage, tool("distribution-v3"))
    }

    fn start_program(dir: &Path, storage: &str, mut program: Command) -> Distribution {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        let config = dir.join("distribution.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\n\
                 log:\n  level: warn\n  accesslog:\n    disabled: true\n\
                 storage:\n{storage}  \
                 maintenance:\n    uploadpurging:\n      enabled: false\n\
                 http:\n  addr: 127.0.0.1:{port}\n"
            ),
        )
        .unwrap();
        let log = dir.join("distribution.log");
        // distribution 2.8's aws-sdk-go panics at start when AWS_CA_BUNDLE is set (it cannot
        // apply it to its transport); plain HTTP to SeaweedFS needs no CA.
        let child = program
            .args(["serve", s(&config)])
            .env_remove("AWS_CA_BUNDLE")
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap_or_else(|e| {
                panic!("cannot run docker-registry (scripts/install-deps.sh installs it): {e}")
            });
        let mut d = Distribution { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if std::net::TcpStream::connect(d.addr()).is_ok()
                && crate::registry_e2e::http(d.addr(), "GET", "/v2/", &[], b"").0 == 200
            {
                return d;
            }
            if let Ok(Some(status)) = d.child.try_wait() {
                panic!("docker-registry exited with {status}:\n{}", d.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "docker-registry did not answer /v2/ within 30 s:\n{}",
                d.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Its loopback address.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    /// `HOST:PORT`.
    pub fn host(&self) -> String {
        self.addr().to_string()
    }

    /// The last lines of its log.
    pub fn log_tail(&self) -> String {
        tail(&std::fs::read(&self.log).unwrap_or_default())
    }
}

impl Drop for Distribution {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
