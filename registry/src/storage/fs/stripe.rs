//! The filesystem store's stripe locks, which a stopped holder cannot keep.
//!
//! A conditional write (check, then rename into place) and a delete take one of 256 stripe
//! locks, chosen by a hash of the key, so that they are atomic across the threads and processes
//! sharing the directory. A plain `flock` there is held for as long as its holder lives: a
//! process stopped with SIGSTOP, ctrl-z or a debugger while it holds one (a collector in the
//! middle of its sweep) would hold up every write on that stripe until it is resumed or ended,
//! the breaking of its garbage-collection lease included. The lock cannot simply be taken from
//! it either: when it goes on, it finishes the write it had checked, over whatever the next
//! holder wrote.
//!
//! So a lock is an *instance*: a directory `<root>/.stripes/<stripe>[.<id>]` holding `ops/`, and
//! the `flock` is taken on that directory. A holder changes the store only by renames that go
//! through its own instance's `ops/`: a new version is moved into `ops/` and from there to its
//! key; a deleted object is moved from its key into `ops/`. A waiter that sees the same holder
//! (the `holder` file each holder writes on taking the lock) keep the lock for longer than
//! `revoke_after` — a critical section takes microseconds, so that holder is stopped or stalled
//! — *revokes* the instance: it renames `ops` to `next.<successor>` in one `rename`, which is
//! the only step that decides anything, so exactly one waiter succeeds. From then on every rename
//! the old holder attempts through `ops/` fails with "no such file" instead of changing the
//! store, and the successor instance (made and locked beforehand by the waiter that won) is the
//! stripe's lock. Waiters find the current instance by following `next.*` entries from the
//! stripe's first instance, starting at the hint `<stripe>.current` (a symlink each revocation
//! moves forward; it is only a shortcut, never trusted).
//!
//! One window stays open, and only for a holder that is running: a rename of its that the
//! kernel has already resolved (looked up `ops/`) when the revocation lands still completes.
//! A stopped process has no system call in flight, so revoking a stopped holder is exact.
//! Revoked instances keep their (emptied) directory so that every chain stays walkable.

use std::fs;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rustix::fs::{AtFlags, CWD, FlockOperation, Mode, OFlags};
use rustix::io::Errno;

/// The directory in an instance through which its holder's renames go.
const OPS: &str = "ops";
/// The file in an instance naming its current holder (process id and acquisition).
const HOLDER: &str = "holder";
/// Prefix of a revoked instance's entry that names its successor.
const NEXT: &str = "next.";

/// The stripe locks of one store.
#[derive(Debug)]
pub(super) struct Stripes {
    dir: PathBuf,
    /// How long a waiter lets one holder keep a lock before it revokes it.
    pub(super) revoke_after: Duration,
}

/// A stripe lock held: renames through it take effect only while it has not been revoked.
#[derive(Debug)]
pub(super) struct Held {
    /// The instance directory, `flock`ed; closing it unlocks.
    fd: OwnedFd,
    path: PathBuf,
}

/// A file moved into a held instance's `ops/` (its name there).
#[derive(Debug)]
pub(super) struct Staged(String);

/// An error of a holder whose lock was revoked: its rename did not happen, and the request is
/// to be retried (mapped to `503 UNAVAILABLE` with `Retry-After`).
fn revoked(path: &Path) -> io::Error {
    io::Error::new(
        io::ErrorKind::TimedOut,
        format!(
            "this request held the store lock {} too long (its process was stopped or stalled) \
             and another request took it over; nothing was changed; retry",
            path.display()
        ),
    )
}

/// What identifies one acquisition of a lock by this process.
fn acquisition() -> String {
    static NEXT_ACQUISITION: AtomicU64 = AtomicU64::new(0);
    static PROCESS: OnceLock<String> = OnceLock::new();
    let process = PROCESS.get_or_init(|| uuid::Uuid::new_v4().as_simple().to_string());
    // Fixed width (see `Held::record`): a pid has at most 10 digits, a u64 at most 20.
    format!(
        "{:<10} {process} {:<20}",
        std::process::id(),
        NEXT_ACQUISITION.fetch_add(1, Ordering::Relaxed)
    )
}

fn open_dir(path: &Path) -> io::Result<OwnedFd> {
    Ok(rustix::fs::openat(
        CWD,
        path,
        OFlags::RDONLY | OFlags::DIRECTORY | OFlags::CLOEXEC,
        Mode::empty(),
    )?)
}

fn has_ops(fd: &OwnedFd) -> io::Result<bool> {
    match rustix::fs::statat(fd, OPS, AtFlags::SYMLINK_NOFOLLOW) {
        Ok(_) => Ok(true),
        Err(Errno::NOENT) => Ok(false),
        Err(e) => Err(e.into()),
    }
}

/// Who holds a lock, from its `holder` file: that process, whether it still runs (a signal 0
/// to it), and on Linux whether it is stopped (its `/proc/<pid>/stat`; illumos's `/proc`
/// holds binary `psinfo` instead, and says nothing here).
pub(super) fn describe_holder(record: &str) -> String {
    let Some(pid) = record
        .split_whitespace()
        .next()
        .and_then(|p| p.parse::<i32>().ok())
    else {
        return "another process".to_owned();
    };
    let alive = rustix::process::Pid::from_raw(pid).is_some_and(|p| {
        !matches!(
            rustix::process::test_kill_process(p),
            Err(rustix::io::Errno::SRCH)
        )
    });
    let state = fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|st| {
            // pid (comm) STATE ...: comm may hold spaces and parentheses.
            let rest = &st[st.rfind(')')? + 1..];
            rest.split_whitespace().next().map(str::to_owned)
        });
    match (alive, state.as_deref()) {
        (false, _) => format!("process {pid} (no longer running)"),
        (true, Some("T") | Some("t")) => {
            format!("process {pid}, which is stopped (SIGSTOP or a debugger)")
        }
        (true, _) => format!("process {pid}"),
    }
}

impl Stripes {
    pub(super) fn open(dir: PathBuf, revoke_after: Duration) -> io::Result<Stripes> {
        fs::create_dir_all(&dir)?;
        Ok(Stripes { dir, revoke_after })
    }

    /// Takes stripe `stripe`'s lock, revoking it from a holder that keeps it too long.
    pub(super) fn lock(&self, stripe: u32) -> io::Result<Held> {
        let first = format!("{stripe:02x}");
        loop {
            let (fd, name) = self.current(&first)?;
            if let Some(held) = self.wait(&first, fd, &name)? {
                return Ok(held);
            }
        }
    }

    /// The stripe's current instance: the first one not revoked on the chain from the hint
    /// (or from the first instance, made when missing).
    fn current(&self, first: &str) -> io::Result<(OwnedFd, String)> {
        let hint = self.dir.join(format!("{first}.current"));
        let mut name = match rustix::fs::readlinkat(CWD, &hint, Vec::new()) {
            Ok(target) => target.to_string_lossy().into_owned(),
            Err(_) => first.to_owned(),
        };
        loop {
            let fd = match open_dir(&self.dir.join(&name)) {
                Ok(fd) => fd,
                Err(e) if e.kind() == io::ErrorKind::NotFound && name == first => {
                    self.make(first)?;
                    continue;
                }
                // A hint naming an instance that is gone (removed by hand): walk from the start.
                Err(e) if e.kind() == io::ErrorKind::NotFound => {
                    name = first.to_owned();
                    continue;
                }
                Err(e) => return Err(e),
            };
            if has_ops(&fd)? {
                return Ok((fd, name));
            }
            name = self.successor(&name)?;
        }
    }

    /// The successor a revoked instance names.
    fn successor(&self, name: &str) -> io::Result<String> {
        for entry in fs::read_dir(self.dir.join(name))? {
            let entry = entry?;
            if let Some(next) = entry
                .file_name()
                .to_str()
                .and_then(|n| n.strip_prefix(NEXT))
            {
                return Ok(next.to_owned());
            }
        }
        Err(io::Error::other(format!(
            "the store lock {} has neither ops/ nor a successor (made by hand?)",
            self.dir.join(name).display()
        )))
    }

    /// Makes instance `name` whole (its `ops/` and `holder` made under a temporary name, then
    /// renamed into place, so no one sees it half made). Another process making the same
    /// first instance at the same time is fine: one rename wins, the other's copy is removed.
    fn make(&self, name: &str) -> io::Result<()> {
        let tmp = self
            .dir
            .join(format!(".new.{}", uuid::Uuid::new_v4().as_simple()));
        fs::create_dir(&tmp)?;
        let made = fs::create_dir(tmp.join(OPS))
            .and_then(|()| fs::write(tmp.join(HOLDER), b""))
            .and_then(|()| fs::rename(&tmp, self.dir.join(name)));
        match made {
            Ok(()) => Ok(()),
            Err(e) => {
                let _ = fs::remove_dir_all(&tmp);
                if self.dir.join(name).exists() {
                    Ok(())
                } else {
                    Err(e)
                }
            }
        }
    }

    fn holder(&self, name: &str) -> String {
        fs::read_to_string(self.dir.join(name).join(HOLDER)).unwrap_or_default()
    }

    /// Waits for instance `name`'s lock: `None` once it was revoked (by this waiter too late,
    /// or another), for the caller to find the current one.
    fn wait(&self, first: &str, fd: OwnedFd, name: &str) -> io::Result<Option<Held>> {
        let mut seen = (self.holder(name), Instant::now());
        let mut pause = Duration::from_micros(200);
        loop {
            match rustix::fs::flock(&fd, FlockOperation::NonBlockingLockExclusive) {
                Ok(()) => {
                    if !has_ops(&fd)? {
                        return Ok(None);
                    }
                    let held = Held {
                        fd,
                        path: self.dir.join(name),
                    };
                    held.record();
                    return Ok(Some(held));
                }
                Err(Errno::WOULDBLOCK) => {}
                Err(e) => return Err(e.into()),
            }
            if !has_ops(&fd)? {
                return Ok(None);
            }
            let holder = self.holder(name);
            if holder != seen.0 {
                seen = (holder, Instant::now());
            } else if seen.1.elapsed() >= self.revoke_after {
                return self.revoke(first, &fd, name, &holder);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(20));
        }
    }

    /// Revokes instance `name` (whose fd is `fd`) from `holder`: makes and locks a successor,
    /// then renames `ops` to name it. `None` when another waiter revoked it first.
    fn revoke(
        &self,
        first: &str,
        fd: &OwnedFd,
        name: &str,
        holder: &str,
    ) -> io::Result<Option<Held>> {
        let next = format!("{first}.{}", uuid::Uuid::new_v4().as_simple());
        self.make(&next)?;
        let path = self.dir.join(&next);
        let held = Held {
            fd: open_dir(&path)?,
            path: path.clone(),
        };
        rustix::fs::flock(&held.fd, FlockOperation::NonBlockingLockExclusive)?;
        if let Err(e) = rustix::fs::renameat(fd, OPS, fd, format!("{NEXT}{next}")) {
            // The successor was never named: nobody else can reach it.
            drop(held);
            let _ = fs::remove_dir_all(&path);
            // No `ops` any more: another waiter revoked it first.
            return if e == Errno::NOENT {
                Ok(None)
            } else {
                Err(e.into())
            };
        }
        held.record();
        tracing::warn!(
            lock = %self.dir.join(name).display(),
            holder = %describe_holder(holder),
            held_for = ?self.revoke_after,
            "took over a store lock its holder kept too long; the holder's pending change will not happen"
        );
        // Moving the hint forward is only a shortcut for the next waiter.
        let hint_tmp = self
            .dir
            .join(format!(".hint.{}", uuid::Uuid::new_v4().as_simple()));
        if std::os::unix::fs::symlink(&next, &hint_tmp).is_ok()
            && fs::rename(&hint_tmp, self.dir.join(format!("{first}.current"))).is_err()
        {
            let _ = fs::remove_file(&hint_tmp);
        }
        // What the old holder had moved into its `ops/` can never be published now.
        let revoked_ops = self.dir.join(name).join(format!("{NEXT}{next}"));
        if let Ok(entries) = fs::read_dir(&revoked_ops) {
            for e in entries.flatten() {
                let _ = fs::remove_file(e.path());
            }
        }
        Ok(Some(held))
    }
}

impl Held {
    /// Writes this acquisition into the instance's `holder` file, for waiters to tell one
    /// holder from the next and to name it.
    fn record(&self) {
        // No fsync: only read by waiters while this lock is held. Written over the previous
        // record in place, not truncated: every record has the same width, so the file keeps
        // its block instead of freeing and allocating one per acquisition (a few per cent of a
        // small push's server CPU). A waiter reading mid-write sees a mix, which differs from
        // the record it saw before, so it only waits longer before a revocation.
        let _ = fs::OpenOptions::new()
            .write(true)
            .open(self.path.join(HOLDER))
            .and_then(|f| {
                use std::os::unix::fs::FileExt;
                f.write_all_at(acquisition().as_bytes(), 0)
            });
    }

    fn staged_name() -> String {
        format!("{OPS}/{}", uuid::Uuid::new_v4().as_simple())
    }

    /// An error of a rename through `ops/`: the revocation error when the lock was revoked.
    fn failed(&self, e: Errno) -> io::Error {
        if e == Errno::NOENT && !has_ops(&self.fd).unwrap_or(true) {
            revoked(&self.path)
        } else {
            e.into()
        }
    }

    /// Moves `from` into this instance's `ops/`, from where [`Held::publish`] moves it on:
    /// both renames happen only while the lock holds.
    pub(super) fn stage(&self, from: &Path) -> io::Result<Staged> {
        let staged = Staged(Self::staged_name());
        rustix::fs::renameat(CWD, from, &self.fd, &staged.0).map_err(|e| self.failed(e))?;
        Ok(staged)
    }

    /// Renames a staged file to `to`: "not found" means `to`'s parent is missing (a revoked
    /// lock fails with its own error).
    pub(super) fn publish(&self, staged: &Staged, to: &Path) -> io::Result<()> {
        rustix::fs::renameat(&self.fd, &staged.0, CWD, to).map_err(|e| self.failed(e))
    }

    /// Moves a staged file that was not published back to `to` (for the caller to remove);
    /// once the lock was revoked it is already gone.
    pub(super) fn unstage(&self, staged: &Staged, to: &Path) {
        let _ = rustix::fs::renameat(&self.fd, &staged.0, CWD, to);
    }

    /// Removes the object at `path`, only while the lock holds: it is moved into `ops/` and
    /// removed from there.
    pub(super) fn remove(&self, path: &Path) -> io::Result<()> {
        let staged = Self::staged_name();
        rustix::fs::renameat(CWD, path, &self.fd, &staged).map_err(|e| self.failed(e))?;
        // Removed now (the object left its key with the rename above): a revocation after the
        // rename leaves it for the revoker's clean-up.
        let _ = rustix::fs::unlinkat(&self.fd, &staged, AtFlags::empty());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::describe_holder;

    /// The holder named by its `holder` record: running, stopped, gone, or not a pid at all.
    #[test]
    fn a_holder_is_described_by_its_process_state() {
        let me = std::process::id();
        assert_eq!(
            describe_holder(&format!("{me} 0123")),
            format!("process {me}")
        );
        let mut child = std::process::Command::new("sleep")
            .arg("30")
            .spawn()
            .unwrap();
        let pid = child.id();
        let stop = std::process::Command::new("kill")
            .args(["-STOP", &pid.to_string()])
            .status()
            .unwrap();
        assert!(stop.success());
        // The stop is asynchronous: wait until /proc says so.
        let mut said = String::new();
        for _ in 0..100 {
            said = describe_holder(&pid.to_string());
            if said.contains("stopped") {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        assert_eq!(
            said,
            format!("process {pid}, which is stopped (SIGSTOP or a debugger)")
        );
        child.kill().unwrap();
        child.wait().unwrap();
        assert_eq!(
            describe_holder(&pid.to_string()),
            format!("process {pid} (no longer running)")
        );
        assert_eq!(describe_holder("garbage"), "another process");
    }
}
