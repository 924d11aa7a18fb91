//! Pull-through caching (`[[proxy]]` in registry.toml) with CNCF distribution 2.8 (Debian's
//! `docker-registry`) as the upstream, behind the fault proxy that counts (and corrupts or
//! holds) upstream requests: skopeo, `rdctl pull` and the worker pull through our registry,
//! each blob is fetched from the upstream once, cached content is served after the upstream
//! stopped, wrong bytes from the upstream never enter the cache (the client sees the transfer
//! fail), and 8 concurrent GETs of one uncached blob make one upstream fetch.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::fault_proxy::{Fault, FaultProxy, Rule};
use crate::registry_e2e::http;
use crate::util::{Distribution, Server, ok, rdctl, s, tail, tempdir, tool};
use crate::worker_e2e::{Node, RawImage, stored_blob};

fn distribution(dir: &Path) -> Distribution {
    Distribution::start(
        dir,
        &format!(
            "  filesystem:\n    rootdirectory: {}\n",
            s(&dir.join("data"))
        ),
    )
}

/// Our registry with one `[[proxy]]` rule: `central/NAME` is `NAME` at `upstream`.
fn proxy_registry(data: &Path, upstream: &str, ttl_secs: u64) -> Server {
    let config = data.join("registry.toml");
    std::fs::create_dir_all(data).unwrap();
    std::fs::write(
        &config,
        format!(
            "[[proxy]]\nprefix = \"central\"\nupstreams = [\"http://{upstream}\"]\ntag_ttl_secs = {ttl_secs}\n"
        ),
    )
    .unwrap();
    Server::start(&data.join("store"), &["--config", s(&config)])
}

fn sha256(b: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(b)))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Upstream GETs of a blob seen by the fault proxy.
fn blob_gets(p: &FaultProxy, digest: &str) -> usize {
    p.seen_for(&format!("/blobs/{digest}"))
        .iter()
        .filter(|s| s.method == "GET")
        .count()
}

/// A GET that tolerates a cut connection: (status, Content-Length, body bytes received,
/// whether the connection ended with an error).
fn lenient_get(addr: SocketAddr, path: &str) -> (u16, Option<u64>, Vec<u8>, bool) {
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        c,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n"
    )
    .unwrap();
    let mut raw = Vec::new();
    let mut buf = [0u8; 65536];
    let errored = loop {
        match c.read(&mut buf) {
            Ok(0) => break false,
            Ok(n) => raw.extend_from_slice(&buf[..n]),
            Err(_) => break true,
        }
    };
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head.split_whitespace().nth(1).unwrap().parse().unwrap();
    let len = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length:"))
        .and_then(|v| v.trim().parse().ok());
    (status, len, raw[split + 4..].to_vec(), errored)
}

/// The first layer's digest of the image a layout tags `tag`.
fn layer_of(layout: &Path, tag: &str) -> String {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let m = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let path = |d: &str| {
        let (a, h) = d.split_once(':').unwrap();
        layout.join("blobs").join(a).join(h)
    };
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(path(&m)).unwrap()).unwrap();
    manifest["layers"][0]["digest"].as_str().unwrap().to_owned()
}

#[test]
fn pull_through_serves_skopeo_rdctl_and_the_worker_then_the_cache_when_the_upstream_is_down() {
    let dir = tempdir();
    let (d_up, d_reg) = (tempdir(), tempdir());
    let dist = distribution(d_up.path());
    let counter = FaultProxy::start(dist.addr(), vec![]);
    let reg = proxy_registry(d_reg.path(), &counter.host(), 1);
    let a = crate::referrers::assemble(dir.path());
    ok(rdctl().args([
        "push",
        &format!("{}:v1", s(&a.layout)),
        &format!("{}/apps/web:1", dist.host()),
    ]));
    // An illumos image for the worker, put into distribution by our client.
    let d_scratch = tempdir();
    let scratch = Server::start(d_scratch.path(), &[]);
    RawImage::new("through-the-proxy").push(scratch.addr, "apps/zone", "1");
    ok(rdctl().args([
        "copy",
        &format!("{}/apps/zone:1", scratch.host()),
        &format!("{}/apps/zone:1", dist.host()),
    ]));
    drop(scratch);

    // skopeo through the proxy: the image's digest, every blob fetched once upstream.
    let through = format!("{}/central/apps/web:1", reg.host());
    let out = dir.path().join("skopeo");
    ok(tool("skopeo").args([
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{through}"),
        &format!("oci:{}:1", s(&out)),
    ]));
    let layer = layer_of(&a.layout, "v1");
    assert_eq!(layer_of(&out, "1"), layer);
    assert_eq!(blob_gets(&counter, &layer), 1, "{:#?}", counter.seen());
    // rdctl pull: same digest, nothing fetched upstream again.
    let pulled = dir.path().join("pulled");
    let report = ok(rdctl().args(["pull", "--json", "--no-referrers", &through, s(&pulled)]));
    let report: serde_json::Value = serde_json::from_slice(&report.stdout).unwrap();
    assert_eq!(report["root"]["digest"], a.image.as_str(), "{report:#}");
    assert_eq!(blob_gets(&counter, &layer), 1, "{:#?}", counter.seen());

    // The worker, through the proxy, by tag.
    let node = Node::new(&dir.path().join("node"));
    node.zone("web", &format!("{}/central/apps/zone:1", reg.host()));
    let run = node.run_once();
    assert!(run.status.success(), "{}", tail(&run.stderr));
    assert_eq!(node.status()["web"]["phase"], "Ready");

    // Upstream gone: the tag's revalidation (TTL 1 s) fails and the cache answers, for a new
    // layout (every blob from the cache) and for the worker's next pass.
    drop(dist);
    std::thread::sleep(Duration::from_millis(1100));
    let again = dir.path().join("again");
    ok(rdctl().args(["pull", "--no-referrers", &through, s(&again)]));
    assert_eq!(layer_of(&again, "1"), layer);
    let run = node.run_once();
    assert!(run.status.success(), "{}", tail(&run.stderr));
    assert_eq!(node.status()["web"]["phase"], "Ready");
    assert!(
        reg.log_tail()
            .contains("upstreams unavailable; serving the cache"),
        "{}",
        reg.log_tail()
    );
    drop((reg, counter));
}

#[test]
fn wrong_bytes_from_the_upstream_never_enter_the_cache() {
    let (d_up, d_reg) = (tempdir(), tempdir());
    let dist = distribution(d_up.path());
    let img = RawImage::new("lied-about");
    let d_scratch = tempdir();
    let scratch = Server::start(d_scratch.path(), &[]);
    img.push(scratch.addr, "apps/lie", "1");
    ok(rdctl().args([
        "copy",
        &format!("{}/apps/lie:1", scratch.host()),
        &format!("{}/apps/lie:1", dist.host()),
    ]));
    drop(scratch);
    let layer = img.layer_digest(0);
    let counter = FaultProxy::start(
        dist.addr(),
        vec![Rule {
            method: "GET",
            path: format!("/blobs/{layer}"),
            times: 1,
            fault: Fault::Corrupt,
        }],
    );
    let reg = proxy_registry(d_reg.path(), &counter.host(), 300);
    let path = format!("/v2/central/apps/lie/blobs/{layer}");

    // The first GET gets the upstream's wrong bytes refused: the transfer fails short.
    let (status, len, body, errored) = lenient_get(reg.addr, &path);
    assert_eq!(status, 200);
    let len = len.expect("a Content-Length");
    assert!(
        errored || (body.len() as u64) < len,
        "a failed transfer, got {} of {len} bytes",
        body.len()
    );
    assert_ne!(sha256(&body), layer);
    let store = d_reg.path().join("store");
    assert!(
        !stored_blob(&store, &layer).exists(),
        "wrong bytes were published"
    );
    // The next GET fetches again (the fault was once) and gets the verified bytes.
    let (status, _, body) = http(reg.addr, "GET", &path, &[], b"");
    assert_eq!(status, 200);
    assert_eq!(sha256(&body), layer);
    assert_eq!(blob_gets(&counter, &layer), 2, "{:#?}", counter.seen());
    assert!(stored_blob(&store, &layer).exists());
    drop((reg, counter, dist));
}

/// Pushes `blob` to distribution: POST an upload, PUT it whole with the digest.
fn push_blob(addr: SocketAddr, repo: &str, blob: &[u8]) -> String {
    let digest = sha256(blob);
    let (st, h, _) = http(
        addr,
        "POST",
        &format!("/v2/{repo}/blobs/uploads/"),
        &[],
        b"",
    );
    assert_eq!(st, 202);
    let loc = crate::registry_e2e::header(&h, "location").to_owned();
    let path = match loc.find("/v2/") {
        Some(i) => loc[i..].to_owned(),
        None => loc,
    };
    let sep = if path.contains('?') { '&' } else { '?' };
    let (st, _, body) = http(
        addr,
        "PUT",
        &format!("{path}{sep}digest={digest}"),
        &[("Content-Type", "application/octet-stream")],
        blob,
    );
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));
    digest
}

#[test]
fn eight_concurrent_gets_of_an_uncached_blob_make_one_upstream_fetch() {
    // 16 MiB rather than the 256 MiB keeps the test to seconds; the count is the point.
    // RD_PULL_THROUGH_MIB=256 runs it at the size (about 10 s on 2 cores).
    let size: usize = std::env::var("RD_PULL_THROUGH_MIB")
        .ok()
        .map(|v| {
            v.parse::<usize>()
                .expect("RD_PULL_THROUGH_MIB: a number of MiB")
        })
        .unwrap_or(16)
        << 20;
    let (d_up, d_reg) = (tempdir(), tempdir());
    let dist = distribution(d_up.path());
    let mut blob = vec![0u8; size];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for b in blob.iter_mut() {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        *b = x as u8;
    }
    let digest = push_blob(dist.addr(), "big/blob", &blob);
    // The upstream's answer stops after 1 MiB until released, so all 8 requests arrive while
    // the one fetch is under way.
    let counter = FaultProxy::start(
        dist.addr(),
        vec![Rule {
            method: "GET",
            path: format!("/blobs/{digest}"),
            times: 1,
            fault: Fault::Hold(1 << 20),
        }],
    );
    let reg = proxy_registry(d_reg.path(), &counter.host(), 300);
    let path = format!("/v2/central/big/blob/blobs/{digest}");
    let addr = reg.addr;
    let clients: Vec<_> = (0..8)
        .map(|_| {
            let path = path.clone();
            std::thread::spawn(move || http(addr, "GET", &path, &[], b""))
        })
        .collect();
    counter.wait_for(Duration::from_secs(20), "the held upstream GET", |seen| {
        seen.iter().any(|s| s.fault == Some(Fault::Hold(1 << 20)))
    });
    // Let the other seven reach the registry and wait on the fetch.
    std::thread::sleep(Duration::from_millis(500));
    counter.release();
    for c in clients {
        let (status, _, body) = c.join().unwrap();
        assert_eq!(status, 200);
        assert_eq!(body.len(), size);
        assert_eq!(sha256(&body), digest);
    }
    assert_eq!(blob_gets(&counter, &digest), 1, "{:#?}", counter.seen());
    drop((reg, counter, dist));
}
