//! The registry on a multi-process SeaweedFS (`s3_fixtures::SeaweedCluster`: one master, three
//! volume servers, two filers, two S3 gateways) with three `rdctl registry serve` replicas spread
//! over both gateways, under node faults while clients push and pull and the replicas collect
//! garbage; and graceful drain of replicas (SIGTERM) with uploads continuing elsewhere.
//!
//! The clients here are deliberately plain: one HTTP/1.1 request per connection, a short
//! timeout, each request to the next replica (a load balancer without health checks), and a
//! retry of what failed. Every failure they see is recorded and must be one a client can retry;
//! every push the registry acknowledged must pull back byte for byte afterwards.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use s3_fixtures::{Node, SeaweedCluster, SeaweedFs};
use validator::Digest;

use crate::util::{Server, tempdir};

/// How long a client waits for one answer before it gives up on the request.
const CLIENT_TIMEOUT: Duration = Duration::from_secs(4);
/// How long one push (all its requests and retries) may take.
const PUSH_DEADLINE: Duration = Duration::from_secs(60);

/// An answer: status, lower-case headers, body.
struct Resp {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Resp {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// One request on a fresh connection with `CLIENT_TIMEOUT` for connecting, sending and each
/// read; `Err` names the transport failure.
fn call(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Resp, String> {
    call_within(CLIENT_TIMEOUT, addr, method, path, headers, body)
}

/// [`call`] with another timeout: the steps a test takes one by one wait longer than a load
/// client, since the first writes into a fresh bucket can be slow on a busy machine.
fn call_within(
    timeout: Duration,
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Result<Resp, String> {
    let t = |e: std::io::Error| format!("{method} {path} at {addr}: {e}");
    let mut c = TcpStream::connect_timeout(&addr, timeout).map_err(t)?;
    c.set_read_timeout(Some(timeout)).map_err(t)?;
    c.set_write_timeout(Some(timeout)).map_err(t)?;
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    c.write_all(req.as_bytes()).map_err(t)?;
    c.write_all(body).map_err(t)?;
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).map_err(t)?;
    let Some(split) = raw.windows(4).position(|w| w == b"\r\n\r\n") else {
        return Err(format!(
            "{method} {path} at {addr}: connection closed after {} bytes, no response head",
            raw.len()
        ));
    };
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status = lines
        .next()
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{method} {path} at {addr}: not an HTTP response: {head:.200}"))?;
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    let mut body = raw[split + 4..].to_vec();
    let resp = Resp {
        status,
        headers,
        body: Vec::new(),
    };
    if resp.header("transfer-encoding") == Some("chunked") {
        body = dechunk(&body)
            .ok_or_else(|| format!("{method} {path} at {addr}: truncated chunked body"))?;
    } else if let Some(n) = resp
        .header("content-length")
        .and_then(|v| v.parse::<usize>().ok())
        && method != "HEAD"
        && body.len() != n
    {
        return Err(format!(
            "{method} {path} at {addr}: body of {} bytes, Content-Length {n}",
            body.len()
        ));
    }
    Ok(Resp { body, ..resp })
}

fn dechunk(mut raw: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    loop {
        let eol = raw.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&raw[..eol]).ok()?.trim(), 16).ok()?;
        raw = &raw[eol + 2..];
        if size == 0 {
            return Some(out);
        }
        out.extend_from_slice(raw.get(..size)?);
        raw = raw.get(size + 2..)?;
    }
}

/// Replica addresses a client goes through, one request to each in turn; a restarted replica
/// gets a new address.
#[derive(Default)]
struct Replicas {
    addrs: Mutex<Vec<SocketAddr>>,
    next: AtomicUsize,
}

impl Replicas {
    fn pick(&self) -> SocketAddr {
        let a = self.addrs.lock().unwrap();
        a[self.next.fetch_add(1, Ordering::Relaxed) % a.len()]
    }

    fn set(&self, i: usize, addr: SocketAddr) {
        self.addrs.lock().unwrap()[i] = addr;
    }
}

/// What clients saw.
#[derive(Default)]
struct Record {
    /// Failures a client retried: transport errors, 5xx, 429, 416.
    retried: Mutex<Vec<String>>,
    /// Anything else: a wrong answer, an error a client cannot act on.
    wrong: Mutex<Vec<String>>,
    /// Pushes the registry acknowledged (manifest PUT 201).
    acked: Mutex<Vec<Image>>,
    /// Pushes that did not finish within `PUSH_DEADLINE`.
    gave_up: AtomicUsize,
    /// Pulls that verified while faults were injected.
    pulls: AtomicUsize,
}

impl Record {
    /// Sorts a failed or unexpected answer: `true` when the client should retry.
    fn failed(&self, what: &str, r: &Result<Resp, String>) -> bool {
        match r {
            Err(e) => {
                self.retried.lock().unwrap().push(format!("{what}: {e}"));
                true
            }
            Ok(resp) if resp.status >= 500 || resp.status == 429 || resp.status == 416 => {
                self.retried.lock().unwrap().push(format!(
                    "{what}: HTTP {} {:.200}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body)
                ));
                true
            }
            Ok(resp) => {
                self.wrong.lock().unwrap().push(format!(
                    "{what}: {} {:.300}",
                    resp.status,
                    String::from_utf8_lossy(&resp.body)
                ));
                false
            }
        }
    }

    /// The retried failures grouped by their kind, for the report.
    fn summary(&self) -> String {
        let mut kinds = std::collections::BTreeMap::<String, usize>::new();
        for f in self.retried.lock().unwrap().iter() {
            let kind = if f.contains("Connection refused") {
                "connection refused".to_owned()
            } else if f.contains("timed out") || f.contains("Resource temporarily unavailable") {
                "client timeout".to_owned()
            } else if f.contains("reset") || f.contains("no response head") {
                "connection closed".to_owned()
            } else if let Some((_, status)) = f.split_once(": HTTP ") {
                status.chars().take(3).collect()
            } else {
                format!("other: {f:.160}")
            };
            *kinds.entry(kind).or_default() += 1;
        }
        format!("{kinds:?}")
    }
}

/// A pushed image: its repository and tag, manifest and blobs.
#[derive(Clone)]
struct Image {
    repo: String,
    tag: String,
    manifest: Vec<u8>,
    blobs: Vec<(Digest, Arc<Vec<u8>>)>,
}

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

/// Deterministic pseudo-random bytes.
fn bytes(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

/// The image number `n` of client `client`: a config and one layer; every fourth layer is
/// 7 MiB, pushed in a 5 MiB and a 2 MiB chunk (a multipart part, then a tail).
fn image(client: usize, n: usize) -> Image {
    let repo = format!("load/c{client}");
    let tag = format!("n{n}");
    let seed = (client * 1_000_000 + n) as u64;
    let layer = if n % 4 == 3 {
        bytes(seed, 7 << 20)
    } else {
        bytes(seed, 1024 + (n * 7919) % (256 << 10))
    };
    let config = format!(
        r#"{{"architecture":"amd64","os":"illumos","rootfs":{{"type":"layers","diff_ids":[]}},"n":"{client}-{n}"}}"#
    )
    .into_bytes();
    let (cd, ld) = (Digest::sha256(&config), Digest::sha256(&layer));
    let manifest = format!(
        r#"{{"schemaVersion":2,"mediaType":"{MANIFEST_TYPE}","config":{{"mediaType":"application/vnd.oci.image.config.v1+json","digest":"{cd}","size":{}}},"layers":[{{"mediaType":"application/vnd.oci.image.layer.v1.tar","digest":"{ld}","size":{}}}]}}"#,
        config.len(),
        layer.len()
    )
    .into_bytes();
    Image {
        repo,
        tag,
        manifest,
        blobs: vec![(cd, Arc::new(config)), (ld, Arc::new(layer))],
    }
}

/// Uploads one blob: in one POST when small, else POST, PATCHes of at most 5 MiB, PUT. Any
/// failure restarts the upload, until `deadline`.
fn upload(
    replicas: &Replicas,
    rec: &Record,
    repo: &str,
    digest: &Digest,
    blob: &[u8],
    deadline: Instant,
) -> bool {
    const CHUNK: usize = 5 << 20;
    let octet = [("Content-Type", "application/octet-stream")];
    'attempt: while Instant::now() < deadline {
        if blob.len() < CHUNK {
            let path = format!("/v2/{repo}/blobs/uploads/?digest={digest}");
            let r = call(replicas.pick(), "POST", &path, &octet, blob);
            match &r {
                Ok(resp) if resp.status == 201 => return true,
                _ if rec.failed(&format!("POST {path}"), &r) => continue,
                _ => return false,
            }
        }
        let path = format!("/v2/{repo}/blobs/uploads/");
        let r = call(replicas.pick(), "POST", &path, &[], b"");
        let mut loc = match &r {
            Ok(resp) if resp.status == 202 => match resp.header("location") {
                Some(l) => l.to_owned(),
                None => {
                    rec.wrong
                        .lock()
                        .unwrap()
                        .push(format!("POST {path}: 202 without Location"));
                    return false;
                }
            },
            _ if rec.failed(&format!("POST {path}"), &r) => continue,
            _ => return false,
        };
        for (i, chunk) in blob.chunks(CHUNK).enumerate() {
            let start = i * CHUNK;
            let range = format!("{start}-{}", start + chunk.len() - 1);
            let h = [
                ("Content-Type", "application/octet-stream"),
                ("Content-Range", range.as_str()),
            ];
            let r = call(replicas.pick(), "PATCH", &loc, &h, chunk);
            match &r {
                Ok(resp) if resp.status == 202 => {
                    if let Some(l) = resp.header("location") {
                        loc = l.to_owned();
                    }
                }
                _ if rec.failed(&format!("PATCH {range} of {digest}"), &r) => continue 'attempt,
                _ => return false,
            }
        }
        let sep = if loc.contains('?') { '&' } else { '?' };
        let put = format!("{loc}{sep}digest={digest}");
        let r = call(replicas.pick(), "PUT", &put, &[], b"");
        match &r {
            Ok(resp) if resp.status == 201 => return true,
            _ if rec.failed(&format!("PUT {digest}"), &r) => continue,
            _ => return false,
        }
    }
    false
}

/// Pushes an image (blobs, then the manifest by tag) and records it when acknowledged.
fn push(replicas: &Replicas, rec: &Record, img: Image) {
    let deadline = Instant::now() + PUSH_DEADLINE;
    for (d, b) in &img.blobs {
        if !upload(replicas, rec, &img.repo, d, b, deadline) {
            if Instant::now() >= deadline {
                rec.gave_up.fetch_add(1, Ordering::Relaxed);
            }
            return;
        }
    }
    let path = format!("/v2/{}/manifests/{}", img.repo, img.tag);
    while Instant::now() < deadline {
        let r = call(
            replicas.pick(),
            "PUT",
            &path,
            &[("Content-Type", MANIFEST_TYPE)],
            &img.manifest,
        );
        match &r {
            Ok(resp) if resp.status == 201 => {
                rec.acked.lock().unwrap().push(img);
                return;
            }
            _ if rec.failed(&format!("PUT {path}"), &r) => {}
            _ => return,
        }
    }
    rec.gave_up.fetch_add(1, Ordering::Relaxed);
}

/// Pulls an image through `addr`: `Ok(true)` when it verified, `Ok(false)` when a request
/// failed in a retryable way, `Err` when an answer was wrong.
fn pull(addr: SocketAddr, rec: &Record, img: &Image) -> Result<bool, String> {
    let path = format!("/v2/{}/manifests/{}", img.repo, img.tag);
    let r = call(addr, "GET", &path, &[("Accept", MANIFEST_TYPE)], b"");
    match &r {
        Ok(resp) if resp.status == 200 => {
            if resp.body != img.manifest {
                return Err(format!("GET {path}: another manifest than the one pushed"));
            }
        }
        _ if rec.failed(&format!("GET {path}"), &r) => return Ok(false),
        _ => return Err(format!("GET {path} failed for an acknowledged push")),
    }
    for (d, b) in &img.blobs {
        let path = format!("/v2/{}/blobs/{d}", img.repo);
        let r = call(addr, "GET", &path, &[], b"");
        match &r {
            Ok(resp) if resp.status == 200 => {
                if resp.body.len() != b.len() || Digest::sha256(&resp.body) != *d {
                    return Err(format!(
                        "GET {path}: {} bytes that do not verify",
                        resp.body.len()
                    ));
                }
            }
            _ if rec.failed(&format!("GET {path}"), &r) => return Ok(false),
            _ => return Err(format!("GET {path} failed for an acknowledged push")),
        }
    }
    Ok(true)
}

/// Clients pushing (`pushers` threads) and pulling what was acknowledged (one thread) until
/// stopped.
struct Load {
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl Load {
    fn start(replicas: &Arc<Replicas>, rec: &Arc<Record>, pushers: usize) -> Load {
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        for client in 0..pushers {
            let (replicas, rec, stop) = (replicas.clone(), rec.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                let mut n = 0;
                while !stop.load(Ordering::Relaxed) {
                    push(&replicas, &rec, image(client, n));
                    n += 1;
                }
            }));
        }
        let (replicas, rec, s) = (replicas.clone(), rec.clone(), stop.clone());
        threads.push(std::thread::spawn(move || {
            let mut i = 0;
            while !s.load(Ordering::Relaxed) {
                let img = {
                    let acked = rec.acked.lock().unwrap();
                    (!acked.is_empty()).then(|| acked[i % acked.len()].clone())
                };
                i += 7;
                match img.map(|img| pull(replicas.pick(), &rec, &img)) {
                    Some(Ok(true)) => {
                        rec.pulls.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(Ok(false)) => {}
                    Some(Err(e)) => rec.wrong.lock().unwrap().push(e),
                    None => std::thread::sleep(Duration::from_millis(100)),
                }
            }
        }));
        Load { stop, threads }
    }

    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().expect("a client thread panicked");
        }
    }
}

/// After the faults: every acknowledged push pulls back and verifies (retrying transient
/// failures for a bounded time), and the clients saw no failure they could not retry.
fn verify_all(replicas: &Replicas, rec: &Record, logs: &dyn Fn() -> String) {
    let acked = rec.acked.lock().unwrap().clone();
    for img in &acked {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match pull(replicas.pick(), rec, img) {
                Ok(true) => break,
                Ok(false) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(200))
                }
                Ok(false) => panic!(
                    "{}:{} does not pull back after the faults: {:?}\n{}",
                    img.repo,
                    img.tag,
                    rec.retried.lock().unwrap().last(),
                    logs()
                ),
                Err(e) => panic!("{e}\n{}", logs()),
            }
        }
    }
    let wrong = rec.wrong.lock().unwrap();
    assert!(
        wrong.is_empty(),
        "clients saw {} answers they cannot retry, first ones: {:#?}\n{}",
        wrong.len(),
        &wrong[..wrong.len().min(10)],
        logs()
    );
}

/// A registry config file on `endpoint`/`bucket`: short S3 timeouts are not configurable, so
/// this sets the collector's schedule and the drain bound only.
fn config(dir: &Path, name: &str, endpoint: &str, bucket: &str, extra: &str) -> String {
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(
        &path,
        format!(
            "s3_endpoint = \"{endpoint}\"\ns3_bucket = \"{bucket}\"\ns3_prefix = \"reg\"\n{extra}"
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

/// Waits up to `limit` for a drained replica to exit and returns its status.
fn exit_status(server: &mut Server, limit: Duration) -> std::process::ExitStatus {
    server.wait(limit).unwrap_or_else(|| {
        panic!(
            "the replica did not exit within {limit:?}\n{}",
            server.log_tail()
        )
    })
}

/// Pushes and pulls through three replicas (two on gateway 0, one on gateway 1, each also
/// collecting garbage every 2 s) while the cluster loses, one at a time, a volume server, a
/// filer, an S3 gateway and a registry replica to `kill -9` (each restarted), and while an S3
/// gateway is paused (SIGSTOP) past the clients' timeout. Afterwards every acknowledged push
/// verifies, every failure a client saw was retryable, and a garbage collection completes.
// A stale 404 for an acknowledged blob was seen twice (the lead's CIs on 8533074 and 0a95077)
// and is mitigated, not explained (docs/s3.md, "A seventh run failed"): a linked blob whose
// bytes read as missing is read again for about 2.5 s and then answered 503, which clients
// retry; a 404 for an acknowledged push still fails this test.
#[test]
fn pushes_pulls_and_gc_survive_node_faults_in_a_seaweedfs_cluster() {
    let started = Instant::now();
    let cluster = SeaweedCluster::start().unwrap_or_else(|e| panic!("{e}"));
    let cluster_ready = started.elapsed();
    let bucket = cluster.bucket().unwrap_or_else(|e| panic!("{e}"));
    let endpoints = cluster.endpoints();
    let dir = tempdir();
    let gc = "[gc]\ninterval = \"2s\"\nlease_ttl = \"4s\"\n";
    let gateway_of = [0, 1, 0];
    let configs: Vec<String> = gateway_of
        .iter()
        .enumerate()
        .map(|(i, &g)| config(dir.path(), &format!("r{i}"), &endpoints[g], &bucket, gc))
        .collect();
    let serve = |i: usize| Server::start(dir.path(), &["--config", &configs[i]]);
    let mut servers: Vec<Server> = (0..3).map(serve).collect();
    let replicas = Arc::new(Replicas::default());
    *replicas.addrs.lock().unwrap() = servers.iter().map(|s| s.addr).collect();
    let rec = Arc::new(Record::default());
    let logs = |servers: &[Server]| {
        let mut s = String::new();
        for (i, r) in servers.iter().enumerate() {
            s.push_str(&format!("--- replica {i} ---\n{}\n", r.log_tail()));
        }
        s.push_str(&cluster.log_tails());
        s
    };

    let load = Load::start(&replicas, &rec, 3);
    let settle = Duration::from_secs(3);
    let mut timeline = Vec::new();
    let mut mark = |what: &str, rec: &Record| {
        timeline.push(format!(
            "{:>5.1}s {what}: {} acked, {} retried",
            started.elapsed().as_secs_f64(),
            rec.acked.lock().unwrap().len(),
            rec.retried.lock().unwrap().len()
        ));
    };
    std::thread::sleep(settle);
    mark("load running", &rec);
    for node in [Node::Volume(1), Node::Filer(0), Node::Gateway(1)] {
        cluster.kill(node);
        mark(&format!("killed {node}"), &rec);
        std::thread::sleep(settle);
        cluster
            .restart(node)
            .unwrap_or_else(|e| panic!("restarting {node}: {e}"));
        mark(&format!("restarted {node}"), &rec);
        std::thread::sleep(Duration::from_secs(1));
    }
    // A replica: kill -9, then a new process (on a new port) in its place.
    servers[1].signal("-KILL");
    exit_status(&mut servers[1], Duration::from_secs(10));
    mark("killed replica 1", &rec);
    std::thread::sleep(settle);
    servers[1] = serve(1);
    replicas.set(1, servers[1].addr);
    mark("restarted replica 1", &rec);
    // Gateway 0, behind two of the three replicas, stops answering past the clients' timeout.
    cluster
        .pause(Node::Gateway(0))
        .unwrap_or_else(|e| panic!("{e}"));
    mark("paused s3-gateway0", &rec);
    std::thread::sleep(CLIENT_TIMEOUT + Duration::from_secs(2));
    cluster
        .resume(Node::Gateway(0))
        .unwrap_or_else(|e| panic!("{e}"));
    mark("resumed s3-gateway0", &rec);
    std::thread::sleep(settle);
    // A loaded machine may not have acknowledged the floor's pushes yet: the load goes on
    // (on the recovered cluster) until it has, within a bound.
    let floor_deadline = Instant::now() + Duration::from_secs(45);
    while rec.acked.lock().unwrap().len() < PUSH_FLOOR && Instant::now() < floor_deadline {
        std::thread::sleep(Duration::from_millis(200));
    }
    load.finish();
    mark("load stopped", &rec);

    verify_all(&replicas, &rec, &|| logs(&servers));
    mark("every acknowledged push verified", &rec);
    // A collection runs to the end on the cluster after the faults. The replicas' own
    // schedule may hold the lease at that moment; the refusal says so, and the next try wins.
    let gc_deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let out = crate::util::rdctl()
            .args(["registry", "gc", "--config", &configs[0]])
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        if out.status.success() {
            break;
        }
        assert!(
            err.contains("another garbage collection is running") && Instant::now() < gc_deadline,
            "rdctl registry gc after the faults: {err}\n{}",
            logs(&servers)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    mark("gc completed", &rec);
    let acked = rec.acked.lock().unwrap().len();
    eprintln!(
        "cluster ready in {cluster_ready:?}; {acked} pushes acknowledged and verified, {} gave up, \
         {} pulls verified under faults; retried failures by kind: {}\n{}",
        rec.gave_up.load(Ordering::Relaxed),
        rec.pulls.load(Ordering::Relaxed),
        rec.summary(),
        timeline.join("\n")
    );
    assert!(
        acked >= PUSH_FLOOR,
        "only {acked} pushes acknowledged, 45 s after the faults ended:\n{}",
        timeline.join("\n")
    );
}

/// Acknowledged pushes the fault test needs before its verdict means something.
const PUSH_FLOOR: usize = 20;

/// Graceful drain on SIGTERM, on the single-process SeaweedFS (the shared fixture; the
/// multi-node cluster adds nothing to what a drain does and costs a start): a replica with a
/// chunked upload in flight stops accepting connections at once, finishes the request within
/// `shutdown_timeout_secs`, exits 0, and the upload continues and completes on another
/// replica. Then every replica is restarted in turn (SIGTERM, wait for exit 0, start a new one)
/// while clients push and pull: nothing acknowledged is lost, and the only failures clients
/// see are transport failures (refused connections, in practice), never an error answer.
#[test]
fn replicas_drain_on_sigterm_and_a_rolling_restart_loses_nothing() {
    let seaweed = SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"));
    let bucket = seaweed.bucket().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempdir();
    let conf = config(
        dir.path(),
        "drain",
        &seaweed.endpoint(),
        &bucket,
        "shutdown_timeout_secs = 5\n",
    );
    let serve = || Server::start(dir.path(), &["--config", &conf]);
    let step = |addr, method, path: &str, headers: &[(&str, &str)], body: &[u8]| {
        call_within(Duration::from_secs(30), addr, method, path, headers, body)
    };
    let mut a = serve();
    let b = serve();

    // An upload whose second chunk is still being sent when A gets SIGTERM.
    let blob = bytes(7, 9 << 20);
    let digest = Digest::sha256(&blob);
    let cut = 5 << 20;
    let r = step(a.addr, "POST", "/v2/drain/repo/blobs/uploads/", &[], b"").unwrap();
    assert_eq!(r.status, 202);
    let loc = r.header("location").unwrap().to_owned();
    let mut c = TcpStream::connect(a.addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let head = format!(
        "PATCH {loc} HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Range: 0-{}\r\n\
         Content-Length: {cut}\r\nContent-Type: application/octet-stream\r\n\r\n",
        cut - 1
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(&blob[..cut / 2]).unwrap();
    c.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let term = Instant::now();
    a.signal("-TERM");
    // It stops accepting: a new connection is refused soon after the signal.
    let refused = loop {
        match TcpStream::connect_timeout(&a.addr, Duration::from_millis(500)) {
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => break term.elapsed(),
            _ if term.elapsed() > Duration::from_secs(3) => {
                panic!(
                    "replica A still accepts connections 3 s after SIGTERM\n{}",
                    a.log_tail()
                )
            }
            _ => std::thread::sleep(Duration::from_millis(20)),
        }
    };
    // The request in flight is finished, not cut off.
    c.write_all(&blob[cut / 2..cut]).unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    let answer = String::from_utf8_lossy(&raw);
    assert!(
        answer.starts_with("HTTP/1.1 202"),
        "the PATCH in flight during the drain: {answer:.500}\n{}",
        a.log_tail()
    );
    let st = exit_status(&mut a, Duration::from_secs(10));
    let drained = term.elapsed();
    assert!(
        st.success(),
        "a drained replica exits 0, not {st}\n{}",
        a.log_tail()
    );
    assert!(
        drained < Duration::from_secs(5 + 2),
        "drain took {drained:?}"
    );
    // The upload continues on B where A left it.
    let r = step(b.addr, "GET", &loc, &[], b"").unwrap();
    assert_eq!(r.status, 204);
    assert_eq!(r.header("range"), Some(format!("0-{}", cut - 1).as_str()));
    let rest = format!("{cut}-{}", blob.len() - 1);
    let r = step(
        b.addr,
        "PATCH",
        &loc,
        &[
            ("Content-Range", &rest),
            ("Content-Type", "application/octet-stream"),
        ],
        &blob[cut..],
    )
    .unwrap();
    assert_eq!(
        r.status,
        202,
        "B refused the drained upload: {}\n{}",
        String::from_utf8_lossy(&r.body),
        b.log_tail()
    );
    let r = step(b.addr, "PUT", &format!("{loc}?digest={digest}"), &[], b"").unwrap();
    assert_eq!(r.status, 201, "{}", String::from_utf8_lossy(&r.body));
    let r = step(
        b.addr,
        "GET",
        &format!("/v2/drain/repo/blobs/{digest}"),
        &[],
        b"",
    )
    .unwrap();
    assert_eq!(r.status, 200);
    assert_eq!(Digest::sha256(&r.body), digest);
    eprintln!(
        "drain: refused new connections {refused:?} after SIGTERM, finished the PATCH in \
         flight and exited 0 after {drained:?}; the upload completed on replica B"
    );

    // Rolling restart of three replicas under load.
    let mut servers = [b, serve(), serve()];
    let replicas = Arc::new(Replicas::default());
    *replicas.addrs.lock().unwrap() = servers.iter().map(|s| s.addr).collect();
    let rec = Arc::new(Record::default());
    let load = Load::start(&replicas, &rec, 2);
    let rolling = Instant::now();
    std::thread::sleep(Duration::from_secs(2));
    for (i, server) in servers.iter_mut().enumerate() {
        server.signal("-TERM");
        let st = exit_status(server, Duration::from_secs(10));
        assert!(
            st.success(),
            "replica {i} exited {st}\n{}",
            server.log_tail()
        );
        *server = serve();
        replicas.set(i, server.addr);
        std::thread::sleep(Duration::from_secs(1));
    }
    std::thread::sleep(Duration::from_secs(1));
    load.finish();
    let logs = || {
        servers
            .iter()
            .map(|s| s.log_tail())
            .collect::<Vec<_>>()
            .join("\n---\n")
    };
    verify_all(&replicas, &rec, &logs);
    let acked = rec.acked.lock().unwrap().len();
    let retried = rec.retried.lock().unwrap().clone();
    eprintln!(
        "rolling restart of 3 replicas in {:?}: {acked} pushes acknowledged and verified, {} \
         pulls verified meanwhile; retried failures by kind: {}",
        rolling.elapsed(),
        rec.pulls.load(Ordering::Relaxed),
        rec.summary()
    );
    assert!(acked >= 5, "only {acked} pushes acknowledged");
    let answers: Vec<&String> = retried.iter().filter(|f| f.contains(": HTTP ")).collect();
    assert!(
        answers.is_empty(),
        "a drain answered requests with errors: {answers:#?}\n{}",
        logs()
    );
}
