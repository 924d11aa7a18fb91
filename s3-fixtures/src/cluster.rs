//! A multi-process SeaweedFS cluster on loopback: one master, three volume servers in three
//! racks with replication `010`, two filers with their own embedded stores whose metadata the
//! filers exchange, and two S3 gateways, each preferring its own filer. Every process can be
//! killed, restarted on the same ports and directory, paused and resumed, so tests can take
//! one node away at a time. `docs/s3.md` describes the production topology this models.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::seaweed::{LogTail, free_port_pair, http, remove_stale_dirs, spawn_weed, weed_binary};
use crate::{FixtureError, io_err};

/// How long the whole cluster may take to become ready (about 5 s on an idle machine).
const READY_TIMEOUT: Duration = Duration::from_secs(90);
/// How long one restarted node may take to answer again.
const RESTART_TIMEOUT: Duration = Duration::from_secs(60);
/// Volume servers; replication `010` keeps two copies in two racks, so with three racks one
/// volume server can be down and new volumes still grow on the other two.
pub const VOLUME_SERVERS: usize = 3;
/// Filers.
pub const FILERS: usize = 2;
/// S3 gateways.
pub const GATEWAYS: usize = 2;
/// The replication every volume gets: one copy in each of two racks of one data centre.
pub const REPLICATION: &str = "010";

/// Where the filers keep their metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum FilerStore {
    /// Each filer its own embedded leveldb2 store; filers apply each other's changes
    /// asynchronously (SeaweedFS's "aggregate from peers").
    PeerSynced,
    /// One SQLite file both filers open (`[sqlite]` in each filer's `filer.toml`): every filer
    /// reads what any filer wrote, with no other service to run.
    SharedSqlite,
}

/// One process of the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Node {
    /// The master (`weed master`).
    Master,
    /// Volume server `i` (`weed volume`, rack `r<i>`).
    Volume(usize),
    /// Filer `i` (`weed filer`, leveldb2 store in its own directory).
    Filer(usize),
    /// S3 gateway `i` (`weed s3`), talking to filer `i` first and the other filer when `i` is
    /// down.
    Gateway(usize),
}

impl std::fmt::Display for Node {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Node::Master => write!(f, "master"),
            Node::Volume(i) => write!(f, "volume{i}"),
            Node::Filer(i) => write!(f, "filer{i}"),
            Node::Gateway(i) => write!(f, "s3-gateway{i}"),
        }
    }
}

/// A process of the cluster: how to start it again, and its state.
struct Proc {
    node: Node,
    /// The HTTP port (the gRPC port is given explicitly among `args`).
    port: u16,
    dir: PathBuf,
    args: Vec<String>,
    child: Mutex<Option<Child>>,
    log: LogTail,
}

impl Proc {
    fn addr(&self) -> SocketAddr {
        SocketAddr::from(([127, 0, 0, 1], self.port))
    }

    fn spawn(&self, weed: &Path) -> Result<(), FixtureError> {
        let mut cmd = Command::new(weed);
        cmd.args(&self.args).current_dir(&self.dir);
        let child = spawn_weed(&mut cmd, &self.log)?;
        *self.child.lock().unwrap_or_else(|e| e.into_inner()) = Some(child);
        Ok(())
    }

    fn pid(&self) -> Option<u32> {
        self.child
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .as_ref()
            .map(Child::id)
    }

    fn exited(&self) -> Option<std::process::ExitStatus> {
        let mut c = self.child.lock().unwrap_or_else(|e| e.into_inner());
        c.as_mut().and_then(|c| c.try_wait().ok().flatten())
    }

    /// SIGKILL and reap; a paused process dies too.
    fn kill(&self) {
        let mut c = self.child.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(mut child) = c.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// One readiness probe: `Ok(())` when the node answers as a ready node of its kind.
    fn probe(&self) -> Result<(), String> {
        let (path, want): (&str, &str) = match self.node {
            Node::Master => ("/cluster/status", "\"IsLeader\":true"),
            Node::Volume(_) => ("/status", "Version"),
            Node::Filer(_) => ("/healthz", ""),
            Node::Gateway(_) => ("/healthz", ""),
        };
        match http(self.addr(), "GET", path) {
            Ok((200, body)) if body.contains(want) => Ok(()),
            Ok((code, body)) => Err(format!("{path} answered {code}: {body:.200}")),
            Err(e) => Err(format!("{path}: {e}")),
        }
    }
}

/// A running SeaweedFS cluster of separate processes on loopback (see the module docs).
/// Dropping it kills and reaps every process and removes its directory; when the current
/// thread is panicking, every node's log tail is printed.
///
/// Nodes die with the thread that spawned them (parent-death signal): start, restart and drop
/// the cluster from one thread that lives as long as it, usually the test's.
pub struct SeaweedCluster {
    weed: PathBuf,
    dir: PathBuf,
    procs: Vec<Proc>,
}

impl std::fmt::Debug for SeaweedCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SeaweedCluster")
            .field("dir", &self.dir)
            .field("gateways", &self.gateways())
            .finish()
    }
}

impl SeaweedCluster {
    /// Starts the cluster and waits until every node is ready, the master sees all volume
    /// servers, and each gateway can create a bucket and write and read an object.
    /// A node that exits during start (a port found free was taken before it bound) is
    /// retried with fresh ports, at most three times.
    pub fn start() -> Result<SeaweedCluster, FixtureError> {
        Self::start_with(FilerStore::SharedSqlite)
    }

    /// [`SeaweedCluster::start`] with the filers' metadata kept as `store` says.
    pub fn start_with(store: FilerStore) -> Result<SeaweedCluster, FixtureError> {
        let mut last = None;
        for _ in 0..3 {
            match Self::try_start(store) {
                Ok(c) => return Ok(c),
                Err(e @ FixtureError::NotReady { .. }) => {
                    eprintln!("SeaweedFS cluster start failed, retrying with fresh ports: {e}");
                    last = Some(e);
                }
                Err(e) => return Err(e),
            }
        }
        Err(last.expect("at least one attempt"))
    }

    fn try_start(store: FilerStore) -> Result<SeaweedCluster, FixtureError> {
        let weed = weed_binary()?;
        let base = std::env::temp_dir().join("s3-fixtures");
        std::fs::create_dir_all(&base).map_err(io_err(format!("creating {}", base.display())))?;
        remove_stale_dirs(&base);
        let dir = base.join(format!(
            "{}-cluster-{}",
            std::process::id(),
            uuid::Uuid::new_v4().as_simple()
        ));
        let mut taken = Vec::new();
        let mut port = || -> Result<u16, FixtureError> {
            let p = free_port_pair(&taken)?;
            taken.extend([p, p + 10_000]);
            Ok(p)
        };
        let master = port()?;
        let volumes: Vec<u16> = (0..VOLUME_SERVERS)
            .map(|_| port())
            .collect::<Result<_, _>>()?;
        let filers: Vec<u16> = (0..FILERS).map(|_| port()).collect::<Result<_, _>>()?;
        let gateways: Vec<u16> = (0..GATEWAYS).map(|_| port()).collect::<Result<_, _>>()?;
        let master_addr = format!("127.0.0.1:{master}");
        let common = |p: u16| {
            vec![
                "-ip.bind=127.0.0.1".to_owned(),
                format!("-port={p}"),
                format!("-port.grpc={}", p + 10_000),
            ]
        };
        let mut procs = Vec::new();
        let mut add = |node: Node, port: u16, args: Vec<String>| -> Result<(), FixtureError> {
            let d = dir.join(node.to_string());
            std::fs::create_dir_all(&d).map_err(io_err(format!("creating {}", d.display())))?;
            procs.push(Proc {
                node,
                port,
                dir: d,
                args,
                child: Mutex::new(None),
                log: LogTail::default(),
            });
            Ok(())
        };
        let mut args = vec!["master".to_owned(), "-ip=127.0.0.1".to_owned()];
        args.extend(common(master));
        args.extend([
            "-mdir=.".to_owned(),
            format!("-defaultReplication={REPLICATION}"),
            // Small volumes for a test disk; see `SeaweedFs` for why.
            "-volumeSizeLimitMB=64".to_owned(),
            "-telemetry=false".to_owned(),
        ]);
        add(Node::Master, master, args)?;
        for (i, &p) in volumes.iter().enumerate() {
            let mut args = vec!["volume".to_owned(), "-ip=127.0.0.1".to_owned()];
            args.extend(common(p));
            args.extend([
                "-dir=.".to_owned(),
                format!("-master={master_addr}"),
                format!("-rack=r{i}"),
                "-max=300".to_owned(),
                "-minFreeSpace=256MiB".to_owned(),
                "-preStopSeconds=0".to_owned(),
            ]);
            add(Node::Volume(i), p, args)?;
        }
        for (i, &p) in filers.iter().enumerate() {
            let mut args = vec!["filer".to_owned(), "-ip=127.0.0.1".to_owned()];
            args.extend(common(p));
            args.extend([
                format!("-master={master_addr}"),
                "-defaultStoreDir=.".to_owned(),
                format!(
                    "-localSocket={}/filer.sock",
                    dir.join(format!("filer{i}")).display()
                ),
            ]);
            add(Node::Filer(i), p, args)?;
        }
        for (i, &p) in gateways.iter().enumerate() {
            // Its own filer first, the other one when that is down.
            let own = filers[i % FILERS];
            let others = filers.iter().filter(|&&f| f != own);
            let list = std::iter::once(&own)
                .chain(others)
                .map(|f| format!("127.0.0.1:{f}"))
                .collect::<Vec<_>>()
                .join(",");
            let mut args = vec!["s3".to_owned()];
            args.extend(common(p));
            args.extend([
                format!("-filer={list}"),
                "-port.iceberg=0".to_owned(),
                "-port.lance=0".to_owned(),
                format!(
                    "-localSocket={}/s3.sock",
                    dir.join(format!("s3-gateway{i}")).display()
                ),
            ]);
            add(Node::Gateway(i), p, args)?;
        }
        if store == FilerStore::SharedSqlite {
            let db = dir.join("filer-meta.sqlite");
            for i in 0..FILERS {
                let toml = dir.join(format!("filer{i}/filer.toml"));
                std::fs::write(
                    &toml,
                    format!(
                        "[sqlite]\nenabled = true\ndbFile = {:?}\n",
                        db.display().to_string()
                    ),
                )
                .map_err(io_err(format!("writing {}", toml.display())))?;
            }
        }
        // Volume growth as in `SeaweedFs`: two volumes per collection and copy count.
        std::fs::write(
            dir.join("master/master.toml"),
            "[master.volume_growth]\ncopy_1 = 2\ncopy_2 = 2\ncopy_3 = 1\ncopy_other = 1\n",
        )
        .map_err(io_err(format!(
            "writing {}/master/master.toml",
            dir.display()
        )))?;
        let cluster = SeaweedCluster { weed, dir, procs };
        for p in &cluster.procs {
            p.spawn(&cluster.weed)?;
        }
        cluster.wait_ready(READY_TIMEOUT)?;
        Ok(cluster)
    }

    fn proc(&self, node: Node) -> &Proc {
        self.procs
            .iter()
            .find(|p| p.node == node)
            .unwrap_or_else(|| panic!("the cluster has no {node}"))
    }

    /// Waits until every node answers its probe, the master lists all volume servers, and
    /// a write and read through every gateway succeed.
    fn wait_ready(&self, limit: Duration) -> Result<(), FixtureError> {
        let started = Instant::now();
        let mut last;
        loop {
            last = self.check();
            match &last {
                Ok(()) => return Ok(()),
                Err((node, reason)) => {
                    let p = self.proc(*node);
                    if let Some(status) = p.exited() {
                        return Err(self.not_ready(*node, format!("it exited with {status}")));
                    }
                    if started.elapsed() > limit {
                        return Err(
                            self.not_ready(*node, format!("not ready after {limit:?} ({reason})"))
                        );
                    }
                }
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// One round of readiness checks; the first node that is not ready, and why.
    fn check(&self) -> Result<(), (Node, String)> {
        // Killed nodes stay down until restarted; the rest must work without them.
        let running = || self.procs.iter().filter(|p| p.pid().is_some());
        for p in running() {
            p.probe().map_err(|e| (p.node, e))?;
        }
        let m = self.proc(Node::Master).addr();
        let (_, topo) = http(m, "GET", "/dir/status").map_err(|e| (Node::Master, e.to_string()))?;
        for p in running() {
            let Node::Volume(i) = p.node else { continue };
            let v = p.addr();
            if !topo.contains(&format!("\"Url\":\"{v}\"")) {
                return Err((Node::Volume(i), "not yet registered with the master".into()));
            }
        }
        // Filers registered with the master and each other: each gateway can write a bucket
        // and an object that the other gateway reads.
        let bucket = "readiness";
        if let Some(p) = running().find(|p| matches!(p.node, Node::Gateway(_))) {
            match http(p.addr(), "PUT", &format!("/{bucket}")) {
                Ok((200, _)) => {}
                // Made by an earlier round (a restart checks again).
                Ok((409, _)) => {}
                Ok((c, b)) => return Err((p.node, format!("PUT bucket: {c} {b:.200}"))),
                Err(e) => return Err((p.node, format!("PUT bucket: {e}"))),
            }
        }
        let gateways: Vec<usize> = running()
            .filter_map(|p| match p.node {
                Node::Gateway(i) => Some(i),
                _ => None,
            })
            .collect();
        for &i in &gateways {
            let g = self.proc(Node::Gateway(i)).addr();
            let key = format!("/{bucket}/probe-{i}");
            match http(g, "PUT", &key) {
                Ok((200, _)) => {}
                Ok((c, b)) => return Err((Node::Gateway(i), format!("PUT {key}: {c} {b:.200}"))),
                Err(e) => return Err((Node::Gateway(i), format!("PUT {key}: {e}"))),
            }
            for &j in &gateways {
                let r = self.proc(Node::Gateway(j)).addr();
                match http(r, "GET", &key) {
                    Ok((200, _)) => {}
                    Ok((c, b)) => {
                        return Err((Node::Gateway(j), format!("GET {key}: {c} {b:.200}")));
                    }
                    Err(e) => return Err((Node::Gateway(j), format!("GET {key}: {e}"))),
                }
            }
        }
        Ok(())
    }

    fn not_ready(&self, node: Node, reason: String) -> FixtureError {
        let p = self.proc(node);
        FixtureError::NotReady {
            pid: p.pid().unwrap_or(0),
            reason: format!("{node}: {reason}"),
            log: format!(
                "{}\n--- other nodes, last lines ---\n{}",
                p.log.text(),
                self.log_tails_last(15)
            ),
        }
    }

    /// The S3 endpoints of the gateways, `http://127.0.0.1:<port>`, gateway 0 first.
    pub fn endpoints(&self) -> Vec<String> {
        self.gateways()
            .iter()
            .map(|a| format!("http://{a}"))
            .collect()
    }

    /// The gateways' addresses, gateway 0 first.
    pub fn gateways(&self) -> Vec<SocketAddr> {
        (0..GATEWAYS)
            .map(|i| self.proc(Node::Gateway(i)).addr())
            .collect()
    }

    /// A node's HTTP address.
    pub fn addr(&self, node: Node) -> SocketAddr {
        self.proc(node).addr()
    }

    /// A node's process id, `None` while it is killed.
    pub fn pid(&self, node: Node) -> Option<u32> {
        self.proc(node).pid()
    }

    /// Creates a bucket with a fresh unique name through gateway 0 and returns the name.
    pub fn bucket(&self) -> Result<String, FixtureError> {
        let bucket = format!("t-{}", uuid::Uuid::new_v4().as_simple());
        match http(
            self.proc(Node::Gateway(0)).addr(),
            "PUT",
            &format!("/{bucket}"),
        ) {
            Ok((200, _)) => Ok(bucket),
            Ok((code, body)) => Err(FixtureError::Bucket {
                bucket,
                reason: format!("answered {code}: {body:.300}"),
            }),
            Err(e) => Err(FixtureError::Bucket {
                bucket,
                reason: e.to_string(),
            }),
        }
    }

    /// Kills a node with SIGKILL and reaps it (SeaweedFS ignores SIGTERM). Idempotent.
    pub fn kill(&self, node: Node) {
        self.proc(node).kill();
    }

    /// Starts a killed node again on its ports and directory (a volume server keeps its
    /// volumes, a filer its store) and waits until the whole cluster is ready again.
    pub fn restart(&self, node: Node) -> Result<(), FixtureError> {
        let p = self.proc(node);
        p.kill();
        p.spawn(&self.weed)?;
        self.wait_ready(RESTART_TIMEOUT)
    }

    /// Stops a node with SIGSTOP: its sockets stay open and nothing answers.
    pub fn pause(&self, node: Node) -> Result<(), FixtureError> {
        self.signal(node, rustix::process::Signal::STOP)
    }

    /// Continues a paused node with SIGCONT.
    pub fn resume(&self, node: Node) -> Result<(), FixtureError> {
        self.signal(node, rustix::process::Signal::CONT)
    }

    fn signal(&self, node: Node, sig: rustix::process::Signal) -> Result<(), FixtureError> {
        let pid = self.proc(node).pid().ok_or_else(|| FixtureError::Io {
            what: format!("signalling {node}"),
            source: std::io::Error::other("it is not running"),
        })?;
        let pid = rustix::process::Pid::from_raw(pid as i32).expect("a child's pid is positive");
        rustix::process::kill_process(pid, sig)
            .map_err(|e| io_err(format!("sending {sig:?} to {node}"))(e.into()))
    }

    /// The last lines of every node's log, each under its name.
    pub fn log_tails(&self) -> String {
        self.log_tails_last(usize::MAX)
    }

    fn log_tails_last(&self, lines: usize) -> String {
        self.procs
            .iter()
            .map(|p| {
                let text = p.log.text();
                let all: Vec<&str> = text.lines().collect();
                let tail = all[all.len().saturating_sub(lines)..].join("\n");
                format!("--- {} ---\n{tail}", p.node)
            })
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The cluster's directory (each node has a subdirectory named after it).
    pub fn dir(&self) -> &Path {
        &self.dir
    }
}

impl Drop for SeaweedCluster {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- SeaweedFS cluster log tails ---\n{}", self.log_tails());
        }
        // Gateways first, so no request reaches a half-stopped cluster.
        for p in self.procs.iter().rev() {
            // A paused process dies on SIGKILL as well.
            p.kill();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Starts, writes through one gateway and reads through the other, survives the loss of a
    /// volume server and a filer, and leaves no process or directory behind.
    #[test]
    fn starts_survives_node_loss_and_stops() {
        let started = Instant::now();
        let c = SeaweedCluster::start().unwrap();
        eprintln!("cluster ready in {:?}", started.elapsed());
        let db = c.dir().join("filer-meta.sqlite");
        assert!(
            std::fs::metadata(&db).is_ok_and(|m| m.len() > 0),
            "the filers do not share {}",
            db.display()
        );
        let [g0, g1] = c.gateways()[..] else {
            unreachable!("two gateways")
        };
        let b = c.bucket().unwrap();
        let (code, body) = http(g0, "PUT", &format!("/{b}/k")).unwrap();
        assert_eq!(code, 200, "{body}");
        let (code, body) = http(g1, "GET", &format!("/{b}/k")).unwrap();
        assert_eq!(code, 200, "{body}");

        c.kill(Node::Volume(1));
        c.kill(Node::Filer(0));
        // Gateway 0 falls back to filer 1; two racks remain for new volumes.
        let lost = Instant::now();
        let deadline = lost + Duration::from_secs(30);
        let mut last = String::new();
        let mut wrote = false;
        while Instant::now() < deadline {
            match http(g0, "PUT", &format!("/{b}/after")) {
                Ok((200, _)) => {
                    wrote = true;
                    break;
                }
                Ok((code, body)) => last = format!("{code} {body:.200}"),
                Err(e) => last = e.to_string(),
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        assert!(
            wrote,
            "no write after losing a volume server and a filer: {last}"
        );
        eprintln!(
            "written without volume1 and filer0 after {:?}",
            lost.elapsed()
        );
        let restarted = Instant::now();
        c.restart(Node::Filer(0)).unwrap();
        c.restart(Node::Volume(1)).unwrap();
        eprintln!("two nodes restarted in {:?}", restarted.elapsed());
        let (code, body) = http(g1, "GET", &format!("/{b}/after")).unwrap();
        assert_eq!(code, 200, "{body}");

        c.pause(Node::Gateway(1)).unwrap();
        c.resume(Node::Gateway(1)).unwrap();
        let pids: Vec<u32> = c.procs.iter().filter_map(Proc::pid).collect();
        assert_eq!(
            pids.len(),
            8,
            "one master, three volumes, two filers, two gateways"
        );
        let dir = c.dir().to_owned();
        drop(c);
        for pid in pids {
            assert!(
                !Path::new("/proc").join(pid.to_string()).exists(),
                "weed {pid} still exists (not killed or not reaped)"
            );
        }
        assert!(!dir.exists(), "{} left behind", dir.display());
    }
}
