//! A real ZFS pool for tests: zfs-fuse (userspace ZFS, the same `zpool`/`zfs` commands as
//! illumos) on a 512 MiB file-backed pool.
//!
//! [`pool`] hands out one pool per test binary, shared by the tests that run at the same time
//! (each works in a dataset of its own, [`Pool::dataset`]). The first user starts
//! `zfs-fuse --no-daemon` unless a zfs-fuse already answers (then it is used and left
//! running), and creates the pool with a unique name in a temporary directory; when the last
//! user drops it, the pool is destroyed and the daemon this fixture started is stopped by its
//! PID. zfs-fuse listens on one socket per machine (`/var/run/zfs/zfs_socket`), so starting
//! is serialised across processes with a lock file.
//!
//! Missing `/dev/fuse` or zfs-fuse commands fail the test with what to install; nothing is
//! skipped (`scripts/install-deps.sh` installs Debian's `zfs-fuse`).

#![allow(dead_code)]

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

const POOL_BYTES: u64 = 512 << 20;
const START_TIMEOUT: Duration = Duration::from_secs(30);

static SHARED: Mutex<Weak<Pool>> = Mutex::new(Weak::new());
static POOLS: AtomicUsize = AtomicUsize::new(0);
static DATASETS: AtomicUsize = AtomicUsize::new(0);

/// A file-backed pool (and the daemon, when this fixture started it).
pub struct Pool {
    pub name: String,
    pub mountpoint: PathBuf,
    dir: tempfile::TempDir,
    daemon: Option<Child>,
}

/// Runs a command and returns stdout, or panics naming it with its stderr.
pub fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|e| panic!("{program} {args:?} could not start: {e}"));
    assert!(
        out.status.success(),
        "{program} {args:?} failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn answers() -> bool {
    Command::new("zpool")
        .args(["list", "-H"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(program).is_file()))
        || Path::new("/usr/sbin").join(program).is_file()
}

fn require() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "/dev/fuse is missing: the ZFS layer store tests need FUSE (zfs-fuse) on this machine"
    );
    for p in ["zfs-fuse", "zpool", "zfs"] {
        assert!(
            on_path(p),
            "{p} is not installed: the ZFS layer store tests run on real zfs-fuse \
             (apt-get install zfs-fuse, or scripts/install-deps.sh)"
        );
    }
    // Debian puts the commands in /usr/sbin, which a non-login PATH may lack.
    if let Some(path) = std::env::var_os("PATH")
        && !std::env::split_paths(&path).any(|d| d == Path::new("/usr/sbin"))
    {
        let mut dirs: Vec<PathBuf> = std::env::split_paths(&path).collect();
        dirs.push("/usr/sbin".into());
        // SAFETY: set once, under the SHARED lock, before any zfs command runs.
        unsafe { std::env::set_var("PATH", std::env::join_paths(dirs).unwrap()) };
    }
}

/// Starts zfs-fuse unless one answers; returns the child when this call started it.
fn start_daemon(log: &Path) -> Option<Child> {
    let lock = File::create(std::env::temp_dir().join("rdctl-zfs-fuse.lock")).unwrap();
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive).unwrap();
    if answers() {
        return None;
    }
    let out = File::create(log).unwrap();
    let mut child = Command::new("zfs-fuse")
        .args(["--no-daemon", "--no-kstat-mount"])
        .stdin(Stdio::null())
        .stdout(out.try_clone().unwrap())
        .stderr(out)
        .spawn()
        .unwrap_or_else(|e| panic!("zfs-fuse could not start: {e}"));
    let started = Instant::now();
    while !answers() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!(
                "zfs-fuse exited ({status}) before answering: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        if started.elapsed() > START_TIMEOUT {
            stop(&mut child);
            panic!(
                "zfs-fuse did not answer `zpool list` within {START_TIMEOUT:?}: {}",
                std::fs::read_to_string(log).unwrap_or_default()
            );
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Some(child)
}

fn stop(child: &mut Child) {
    let pid = rustix::process::Pid::from_child(child);
    let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(15) {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

/// The shared pool (created when no test holds it).
pub fn pool() -> Arc<Pool> {
    let mut shared = SHARED.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(p) = shared.upgrade() {
        return p;
    }
    require();
    let dir = tempfile::tempdir().unwrap();
    let daemon = start_daemon(&dir.path().join("zfs-fuse.log"));
    let name = format!(
        "rdtest{}n{}",
        std::process::id(),
        POOLS.fetch_add(1, Ordering::Relaxed)
    );
    let file = dir.path().join("pool.img");
    File::create(&file).unwrap().set_len(POOL_BYTES).unwrap();
    let mountpoint = dir.path().join("mnt");
    run(
        "zpool",
        &[
            "create",
            "-f",
            "-m",
            mountpoint.to_str().unwrap(),
            &name,
            file.to_str().unwrap(),
        ],
    );
    let p = Arc::new(Pool {
        name,
        mountpoint,
        dir,
        daemon,
    });
    *shared = Arc::downgrade(&p);
    p
}

impl Pool {
    /// A new, empty dataset for one test (`<pool>/<label>-<n>`).
    pub fn dataset(&self, label: &str) -> String {
        let ds = format!(
            "{}/{label}-{}",
            self.name,
            DATASETS.fetch_add(1, Ordering::Relaxed)
        );
        run("zfs", &["create", &ds]);
        ds
    }
}

/// One property's value (`zfs get -H -p -o value`).
pub fn get(prop: &str, target: &str) -> String {
    run("zfs", &["get", "-H", "-p", "-o", "value", prop, target])
        .trim()
        .to_owned()
}

/// Every dataset and snapshot under `ds` (itself included).
pub fn list(ds: &str) -> Vec<String> {
    run("zfs", &["list", "-H", "-o", "name", "-t", "all", "-r", ds])
        .lines()
        .map(str::to_owned)
        .collect()
}

impl Drop for Pool {
    fn drop(&mut self) {
        let started = Instant::now();
        loop {
            let out = Command::new("zpool")
                .args(["destroy", "-f", &self.name])
                .output();
            match out {
                Ok(o) if o.status.success() => break,
                Ok(o) if started.elapsed() < Duration::from_secs(15) => {
                    let _ = o;
                    std::thread::sleep(Duration::from_millis(200));
                }
                Ok(o) => {
                    eprintln!(
                        "zpool destroy {} failed: {}",
                        self.name,
                        String::from_utf8_lossy(&o.stderr)
                    );
                    break;
                }
                Err(e) => {
                    eprintln!("zpool destroy {} could not start: {e}", self.name);
                    break;
                }
            }
        }
        if let Some(child) = &mut self.daemon {
            stop(child);
        }
        let _ = &self.dir;
    }
}
