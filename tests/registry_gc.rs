//! `rdctl registry gc` and the `[gc]` schedule of `rdctl registry serve`, end to end on a
//! filesystem store: a dry run reports without touching the store, the grace window keeps
//! young content, a real run deletes exactly the unreachable content, and a serving registry
//! with `gc.interval` collects by itself (seen in its metrics) while tagged images stay; a
//! collector process stopped with SIGSTOP (issue 53) holds up no push past its lease once the
//! lease is broken, and `--break-lease --force` answers whatever state it is in.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use sha2::{Digest as _, Sha256};

use crate::registry_e2e::http;
use crate::util::{Server, ok, rdctl, s, tempdir};

pub(crate) const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

pub(crate) fn digest(data: &[u8]) -> String {
    let hex: String = Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

pub(crate) fn push_blob(server: &Server, repo: &str, data: &[u8]) -> String {
    try_push_blob(server.addr, repo, data).unwrap_or_else(|e| panic!("{e}"))
}

/// Uploads `data` in one request; its digest, or the status and body of a refusal.
fn try_push_blob(addr: SocketAddr, repo: &str, data: &[u8]) -> Result<String, String> {
    let d = digest(data);
    let (status, _, body) = http(
        addr,
        "POST",
        &format!("/v2/{repo}/blobs/uploads/?digest={d}"),
        &[("content-type", "application/octet-stream")],
        data,
    );
    if status != 201 {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok(d)
}

/// Pushes config and layer, then a manifest under `reference`; returns the manifest's digest.
pub(crate) fn push_image(
    server: &Server,
    repo: &str,
    reference: &str,
    config: &[u8],
    layer: &[u8],
) -> String {
    try_push_image(server.addr, repo, reference, config, layer).unwrap_or_else(|e| panic!("{e}"))
}

/// [`push_image`] that reports a refusal instead of failing the test.
fn try_push_image(
    addr: SocketAddr,
    repo: &str,
    reference: &str,
    config: &[u8],
    layer: &[u8],
) -> Result<String, String> {
    let c = try_push_blob(addr, repo, config)?;
    let l = try_push_blob(addr, repo, layer)?;
    let m = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": l, "size": layer.len()}],
    }))
    .unwrap();
    let (status, _, body) = http(
        addr,
        "PUT",
        &format!("/v2/{repo}/manifests/{reference}"),
        &[("content-type", MANIFEST)],
        &m,
    );
    if status != 201 {
        return Err(format!("{status}: {}", String::from_utf8_lossy(&body)));
    }
    Ok(digest(&m))
}

pub(crate) fn get(server: &Server, path: &str) -> u16 {
    http(server.addr, "GET", path, &[("accept", MANIFEST)], b"").0
}

fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_owned()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else if !p.to_string_lossy().contains("/.") {
                out.push(p.strip_prefix(dir).unwrap().to_string_lossy().into_owned());
            }
        }
    }
    out.sort();
    out
}

pub(crate) fn gc_json(data: &Path, args: &[&str]) -> serde_json::Value {
    let out = ok(rdctl()
        .args(["registry", "gc", "--data", s(data), "--json"])
        .args(args));
    serde_json::from_slice(&out.stdout).expect("gc --json prints JSON")
}

#[test]
fn gc_cli_and_schedule_collect_only_unreachable_content() {
    let data = tempdir();
    let repo = "gc/app";
    let (kept, old) = {
        let server = Server::start(data.path(), &[]);
        let kept = push_image(&server, repo, "v1", b"{\"c\":1}", b"layer kept");
        let old = push_image(&server, repo, "old", b"{\"c\":0}", b"layer old");
        let (status, _, _) = http(
            server.addr,
            "DELETE",
            &format!("/v2/{repo}/manifests/old"),
            &[],
            b"",
        );
        assert_eq!(status, 202);
        push_blob(&server, repo, b"orphan");
        (kept, old)
    };

    // Dry run: the report names the unreachable content; the store is unchanged.
    let before = files(data.path());
    let dry = gc_json(
        data.path(),
        &["--dry-run", "--grace", "0", "--delete-untagged"],
    );
    assert_eq!(files(data.path()), before, "a dry run changed the store");
    assert_eq!(dry["dry_run"], true);
    assert_eq!(dry["deleted_blobs"], 4, "{dry:#}");
    assert_eq!(dry["deleted_manifest_links"], 1, "{dry:#}");
    let listed: Vec<&str> = dry["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| d["digest"].as_str().unwrap())
        .collect();
    for d in [
        &old,
        &digest(b"orphan"),
        &digest(b"layer old"),
        &digest(b"{\"c\":0}"),
    ] {
        assert!(listed.contains(&d.as_str()), "{d} not in {listed:?}");
    }

    // Inside the grace window nothing goes; the text report says so.
    let out = ok(rdctl().args([
        "registry",
        "gc",
        "--data",
        s(data.path()),
        "--grace",
        "1h",
        "--delete-untagged",
    ]));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("deleted: 0 blobs"), "{text}");
    assert_eq!(files(data.path()), before);

    // Untagged manifests kept by default: only the orphan goes.
    let r = gc_json(data.path(), &["--grace", "0"]);
    assert_eq!(
        (r["deleted_blobs"].as_u64(), r["deleted_bytes"].as_u64()),
        (Some(1), Some(6)),
        "{r:#}"
    );
    let r = gc_json(data.path(), &["--grace", "0", "--delete-untagged"]);
    assert_eq!(r["deleted_blobs"], 3, "{r:#}");
    assert_eq!(
        gc_json(
            data.path(),
            &["--grace", "0", "--delete-untagged", "--dry-run"]
        )["deleted"],
        serde_json::json!([])
    );

    // A serving registry with a schedule collects by itself.
    let config = data.path().join("registry.toml");
    std::fs::write(
        &config,
        "[gc]\ninterval = \"1s\"\ngrace = \"3s\"\ndelete_untagged = true\n",
    )
    .unwrap();
    let server = Server::start(data.path(), &["--config", s(&config)]);
    let orphan = push_blob(&server, repo, b"orphan 2");
    let started = Instant::now();
    loop {
        let (_, _, metrics) = http(server.addr, "GET", "/metrics", &[], b"");
        let metrics = String::from_utf8_lossy(&metrics).into_owned();
        if metrics.contains("registry_gc_deleted_objects_total{kind=\"blob\"} 1\n") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the scheduled collection deleted nothing within a minute:\n{metrics}\nlog:\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(get(&server, &format!("/v2/{repo}/blobs/{orphan}")), 404);
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/{old}")), 404);
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/v1")), 200);
    assert_eq!(get(&server, &format!("/v2/{repo}/manifests/{kept}")), 200);
    for b in [b"layer kept".as_slice(), b"{\"c\":1}"] {
        let (status, _, body) = http(
            server.addr,
            "GET",
            &format!("/v2/{repo}/blobs/{}", digest(b)),
            &[],
            b"",
        );
        assert_eq!((status, body.as_slice()), (200, b));
    }
    assert!(
        server.log_shows("garbage collection finished"),
        "{}",
        server.log_tail()
    );
}

/// Output into a pipe nobody reads (`rdctl registry gc | head -0`) ends the command quietly:
/// exit 0, no panic message.
#[test]
fn gc_into_a_closed_pipe_exits_quietly() {
    let data = tempdir();
    for json in [false, true] {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        let mut cmd = rdctl();
        cmd.args(["registry", "gc", "--data", s(data.path()), "--dry-run"]);
        if json {
            cmd.arg("--json");
        }
        let out = cmd
            .stdout(writer)
            .stderr(std::process::Stdio::piped())
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains("panicked"), "json={json}: {stderr}");
        assert_eq!(out.status.code(), Some(0), "json={json}: {stderr}");
    }
}

/// Writes `gc/lock` as a collector from pid 4242 on host "ghost" leaves it, last renewed `ago`.
fn write_lease(data: &Path, ttl_secs: u64, ago: Duration) {
    let path = data.join("gc/lock");
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    let body = serde_json::json!({
        "run": "dead-run", "renewal": 3, "pid": 4242, "host": "ghost",
        "started": 1_700_000_000u64, "ttl_secs": ttl_secs,
    });
    std::fs::write(&path, body.to_string()).unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(std::time::SystemTime::now() - ago).unwrap();
}

/// `rdctl registry gc --break-lease`: nothing to break; a live lease refused (naming its holder)
/// unless forced; a stale one broken, printing who held it and since when; then a run completes.
#[test]
fn gc_break_lease() {
    let data = tempdir();
    let break_lease = |extra: &[&str]| {
        rdctl()
            .args(["registry", "gc", "--data", s(data.path()), "--break-lease"])
            .args(extra)
            .output()
            .unwrap()
    };
    let out = break_lease(&[]);
    assert!(out.status.success(), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stdout).contains("no garbage collection lease"));

    // Live: the run and a plain break are refused.
    write_lease(data.path(), 3600, Duration::ZERO);
    let run = rdctl()
        .args(["registry", "gc", "--data", s(data.path())])
        .output()
        .unwrap();
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("--break-lease"));
    let out = break_lease(&[]);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("is live")
            && stderr.contains("pid 4242 on ghost")
            && stderr.contains("--force"),
        "{stderr}"
    );
    assert!(data.path().join("gc/lock").exists());
    let out = ok(rdctl().args([
        "registry",
        "gc",
        "--data",
        s(data.path()),
        "--break-lease",
        "--force",
    ]));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("held by pid 4242 on ghost (run dead-run) since 2023-11-14T22:13:20Z")
            && stdout.contains("live, forced"),
        "{stdout}"
    );
    assert!(!data.path().join("gc/lock").exists());

    // Stale: broken without --force, as JSON.
    write_lease(data.path(), 60, Duration::from_secs(600));
    let out = ok(rdctl().args([
        "registry",
        "gc",
        "--data",
        s(data.path()),
        "--break-lease",
        "--json",
    ]));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["host"], "ghost", "{v}");
    assert!(v["age_secs"].as_u64().unwrap() >= 600, "{v}");
    assert!(!data.path().join("gc/lock").exists());
    gc_json(data.path(), &["--grace", "0s"]);

    // --force alone is a usage error.
    let out = rdctl()
        .args(["registry", "gc", "--data", s(data.path()), "--force"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

/// A child process killed (SIGKILL, which also ends a stopped one) and reaped on drop.
struct Reaped(Child);

impl Drop for Reaped {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn signal(child: &Child, sig: rustix::process::Signal) {
    let pid = rustix::process::Pid::from_raw(child.id() as i32).expect("a child's pid");
    rustix::process::kill_process(pid, sig).expect("signalling the collector");
}

/// Whether `pid` holds a `flock` (a held one, not one it waits for), per `/proc/locks`; with
/// `inode`, one on that file.
fn holds_flock(pid: u32, inode: Option<u64>) -> bool {
    let locks = std::fs::read_to_string("/proc/locks").unwrap_or_default();
    let pid = pid.to_string();
    locks.lines().any(|l| {
        let f: Vec<&str> = l.split_whitespace().collect();
        // `1: FLOCK ADVISORY WRITE <pid> <major>:<minor>:<inode> 0 EOF`
        f.get(1) == Some(&"FLOCK")
            && f.get(4) == Some(&pid.as_str())
            && inode.is_none_or(|want| {
                f.get(5)
                    .and_then(|dev| dev.rsplit(':').next())
                    .and_then(|i| i.parse::<u64>().ok())
                    == Some(want)
            })
    })
}

/// The file the filesystem store locks for the collector's lease, if it locks through files
/// at all: after one collection of an empty store, which writes and removes nothing but its
/// lease, it is the only file in the store's hidden directories that a `flock` could be on.
fn lease_lock_inode(data: &Path) -> Option<u64> {
    use std::os::unix::fs::MetadataExt as _;
    let mut files = Vec::new();
    for dir in std::fs::read_dir(data).ok()?.flatten() {
        if dir.file_name().to_string_lossy().starts_with('.') && dir.path().is_dir() {
            files.extend(std::fs::read_dir(dir.path()).ok()?.flatten());
        }
    }
    match files.as_slice() {
        [one] => one.metadata().ok().map(|m| m.ino()),
        _ => None,
    }
}

/// Whether the process is stopped (state `T` in `/proc/PID/stat`).
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| {
            s.rsplit_once(')')
                .map(|(_, rest)| rest.trim_start().starts_with('T'))
        })
        .unwrap_or(false)
}

/// Stops the collector with SIGSTOP at the worst moment: while it holds the file lock of its
/// lease (`lease_lock`, renewed every quarter of its time to live), or any file lock when that
/// is unknown. Once the lease exists (`lease`: not while the collector creates it, when a break
/// has nothing to break yet), it watches `/proc/locks` and stops the collector as soon as it
/// takes the lock, again after SIGCONT if it let go meanwhile. Says what the stopped collector holds; one never
/// caught (a store that no longer locks) is stopped wherever it is. Panics when the collector
/// finished first.
fn stop_collector(collector: &mut Child, lease: &Path, lease_lock: Option<u64>) -> &'static str {
    let pid = collector.id();
    let stop = |c: &Child| {
        signal(c, rustix::process::Signal::STOP);
        let t = Instant::now();
        while !stopped(pid) && t.elapsed() < Duration::from_secs(1) {
            std::thread::yield_now();
        }
    };
    let watching = Instant::now();
    while watching.elapsed() < Duration::from_secs(30) {
        if let Ok(Some(status)) = collector.try_wait() {
            panic!("the collector finished ({status}) before it could be stopped; raise GARBAGE");
        }
        if !lease.exists() || !holds_flock(pid, lease_lock) {
            std::thread::yield_now();
            continue;
        }
        stop(collector);
        if holds_flock(pid, lease_lock) {
            return match lease_lock {
                Some(_) => "holding its lease's file lock",
                None => "holding a file lock",
            };
        }
        signal(collector, rustix::process::Signal::CONT);
    }
    stop(collector);
    if holds_flock(pid, None) {
        "holding a file lock"
    } else {
        "holding no file lock"
    }
}

/// Runs `cmd` for at most `limit`: its exit status and how long it took, or `None` (then it
/// was killed) when it did not answer in time.
fn run_within(cmd: &mut std::process::Command, limit: Duration) -> Option<(i32, Duration)> {
    let started = Instant::now();
    let mut child = Reaped(
        cmd.stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    while started.elapsed() < limit {
        if let Some(status) = child.0.try_wait().unwrap() {
            return Some((status.code().unwrap_or(-1), started.elapsed()));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    None
}

/// Issue 53 on the filesystem store: a collector process stopped with SIGSTOP (caught holding
/// the file lock of its lease, while renewing it, when the store takes such locks) must not
/// hold up pushes for longer than its lease's time to live once that lease is broken, and
/// `rdctl registry gc --break-lease --force` must answer within a few seconds whatever the
/// stopped holder was doing. Today a stopped collector's `flock` on `.locks/<stripe>` blocks
/// every write hashed to that stripe with no time limit, the break's own included.
#[test]
fn a_stopped_collector_process_holds_up_no_push_once_its_lease_is_broken() {
    stopped_collector_process(true);
}

/// The same without an operator: once the stopped collector's lease is stale (its time to live
/// after it was stopped), pushes go on.
#[test]
fn a_stopped_collector_process_holds_up_no_push_once_its_lease_is_stale() {
    stopped_collector_process(false);
}

fn stopped_collector_process(break_lease: bool) {
    /// The collector's lease time to live (`gc.lease_ttl`, the shortest allowed: renewals,
    /// where it holds its lease's file lock, every 0.5 s).
    const LEASE_TTL: Duration = Duration::from_secs(2);
    /// Slack on top of it for 64 concurrent pushes to a debug build on a loaded machine; a push
    /// blocked behind a stopped collector waits without limit, far past this.
    const SLACK: Duration = Duration::from_secs(10);
    /// Unreferenced blobs: enough store writes that the collector is still sweeping when it is
    /// stopped, after at least one renewal (400 once let a collector finish inside its first
    /// half second on a CI run).
    const GARBAGE: usize = 1000;
    /// New images pushed after the stop (and the break), each to its own repository, so that their writes
    /// spread over the store's lock stripes (about 10 locked writes each, 256 stripes).
    const PUSHES: usize = 64;

    let data = tempdir();
    let config = data.path().join("registry.toml");
    std::fs::write(&config, "[gc]\nlease_ttl = \"2s\"\n").unwrap();
    let gc = |extra: &[&str]| {
        let mut cmd = rdctl();
        cmd.args([
            "registry",
            "gc",
            "--config",
            s(&config),
            "--data",
            s(data.path()),
        ])
        .args(extra);
        cmd
    };
    ok(&mut gc(&["--grace", "0"]));
    let lease_lock = lease_lock_inode(data.path());
    let server = Server::start(data.path(), &["--config", s(&config)]);
    for i in 0..GARBAGE {
        push_blob(&server, "gc/stopped", format!("garbage {i}").as_bytes());
    }
    // Older than a zero grace window (store times may have whole seconds).
    std::thread::sleep(Duration::from_millis(2100));
    let mut collector = Reaped(
        gc(&["--grace", "0"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap(),
    );
    let holding = stop_collector(&mut collector.0, &data.path().join("gc/lock"), lease_lock);
    // Otherwise this would test nothing the store's locks do.
    assert_ne!(
        holding, "holding no file lock",
        "the collector was never caught holding a lock"
    );
    eprintln!("the collector was stopped {holding}");

    let mut failures = Vec::new();
    // Pushes are timed from here: from the break, or from the stop (the lease turns stale a
    // time to live later).
    let started = Instant::now();
    if break_lease {
        match run_within(
            &mut gc(&["--break-lease", "--force"]),
            Duration::from_secs(5),
        ) {
            Some((0, _)) => {}
            Some((code, took)) => failures.push(format!(
                "rdctl registry gc --break-lease --force exited {code} after {took:.1?}"
            )),
            None => failures.push(format!(
                "rdctl registry gc --break-lease --force did not answer within 5 s (the \
                 collector was stopped {holding})"
            )),
        }
    }
    let (tx, rx) = std::sync::mpsc::channel();
    let addr = server.addr;
    let pushers: Vec<_> = (0..PUSHES)
        .map(|i| {
            let tx = tx.clone();
            std::thread::spawn(move || {
                let config = format!("{{\"after\":{i}}}");
                let layer = format!("pushed after the break {i}");
                let r = try_push_image(
                    addr,
                    &format!("gc/after-{i}"),
                    "v1",
                    config.as_bytes(),
                    layer.as_bytes(),
                );
                let _ = tx.send((i, r, started.elapsed()));
            })
        })
        .collect();
    drop(tx);
    let deadline = started + LEASE_TTL + SLACK;
    let (mut acknowledged, mut answered) = (Vec::new(), 0);
    while answered < PUSHES {
        let left = deadline.saturating_duration_since(Instant::now());
        let Ok((i, r, took)) = rx.recv_timeout(left) else {
            break;
        };
        answered += 1;
        match r {
            Ok(_) => acknowledged.push(i),
            Err(e) => failures.push(format!("push {i} refused after {took:.1?}: {e}")),
        }
    }
    if answered < PUSHES {
        failures.push(format!(
            "{} of {PUSHES} pushes were still waiting {:?} after the lease was {} \
             (the collector was stopped {})",
            PUSHES - answered,
            LEASE_TTL + SLACK,
            if break_lease {
                "broken"
            } else {
                "left to turn stale"
            },
            holding
        ));
    }
    // The stopped collector goes on (the issue-39 procedure: SIGCONT after the pushes) and
    // finishes its sweep or notices its lease is gone; either way it removes nothing an
    // acknowledged push needs.
    signal(&collector.0, rustix::process::Signal::CONT);
    let resumed = Instant::now();
    while collector.0.try_wait().unwrap().is_none() && resumed.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(50));
    }
    drop(collector);
    for p in pushers {
        let _ = p.join();
    }
    for i in &acknowledged {
        let layer = digest(format!("pushed after the break {i}").as_bytes());
        let config = digest(format!("{{\"after\":{i}}}").as_bytes());
        for path in [
            format!("/v2/gc/after-{i}/manifests/v1"),
            format!("/v2/gc/after-{i}/blobs/{layer}"),
            format!("/v2/gc/after-{i}/blobs/{config}"),
        ] {
            assert_eq!(
                get(&server, &path),
                200,
                "acknowledged push {i} lost: {path}"
            );
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}
