//! `rd-bench`: the load client of `bench/run.sh`. The same client drives our registry and the
//! peers, so the client is never the difference between them. Every subcommand prints one JSON
//! line of results on stdout.
//!
//! - `push`: uploads `--total` bytes in blobs of `--size` with `--conc` clients, monolithic
//!   (POST, then one PUT with the body), chunked (POST, PATCH per chunk with `Content-Range`,
//!   PUT) or streamed as skopeo, podman, crane and docker push (POST, one PATCH with
//!   `Transfer-Encoding: chunked` and no `Content-Length`, sent in 32 KiB chunks as Go's
//!   `io.Copy` does, then a PUT without body), and writes the digests to `--digests` for
//!   `pull`.
//! - `pull`: downloads those blobs with `--conc` clients and checks each length.
//! - `seed-small` and `small`: a manifest with many tags, then HEAD/GET of the manifest or the
//!   tag list from `--conns` connections for `--secs` seconds (requests/s, p50, p99).
//! - `hash`: the streaming digest rate of `validator::Digester`, per CPU second and per
//!   wall-clock second.
//! - `s3proxy`: the s3-fixtures counting proxy in front of an S3 endpoint; stdin commands
//!   `reset` and `counts`.
//! - `grow`: fills a store with many small images through the store API (`grow.rs`).
//! - `catalog`: pages through `/v2/_catalog` with `n`, and lists one repository's tags.
//! - `push-images` and `verify-images`: many small images pushed through the API (seeding a
//!   peer's store, or a push load during a GC), then every acknowledged one pulled and
//!   checked (`pushload.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, ensure};
use bytes::Bytes;
use clap::Parser;
use futures_util::StreamExt as _;
use serde_json::json;
use validator::{Algorithm, Digester};

mod grow;
mod http;
mod pushload;

use http::{check, client, location, with_digest};

#[derive(Debug, Parser)]
#[command(about = "Benchmark load client for bench/run.sh")]
enum Cmd {
    /// Push blobs and print the throughput.
    Push(PushArgs),
    /// Pull the blobs a push wrote and print the throughput.
    Pull(PullArgs),
    /// Push one config, one manifest and `--tags` tags pointing at it.
    SeedSmall(SeedArgs),
    /// Small requests from many connections; prints requests/s, p50 and p99.
    Small(SmallArgs),
    /// Streaming sha256 rate of validator::Digester over an in-memory buffer.
    Hash(HashArgs),
    /// Counting S3 proxy (s3-fixtures) in front of `--upstream`.
    S3proxy(ProxyArgs),
    /// Fill a store with many small images through the store API.
    Grow(grow::GrowArgs),
    /// Page through the catalog and list a repository's tags; prints requests and times.
    Catalog(CatalogArgs),
    /// Push many small images through the API (a seeding run, or a load until a file exists).
    PushImages(pushload::PushImagesArgs),
    /// Pull every image a `push-images --record` run acknowledged and check each blob.
    VerifyImages(pushload::VerifyImagesArgs),
}

#[derive(Debug, clap::Args)]
struct CatalogArgs {
    #[arg(long)]
    url: String,
    /// Page size of the catalog.
    #[arg(long, default_value_t = 100)]
    n: usize,
    /// Repository whose tag list is fetched whole, then paged with `n`.
    #[arg(long)]
    tags_of: String,
}

#[derive(Debug, clap::Args)]
struct PushArgs {
    #[arg(long)]
    url: String,
    #[arg(long)]
    repo: String,
    /// Blob size in bytes.
    #[arg(long)]
    size: u64,
    /// Total bytes to push (rounded down to whole blobs, at least one).
    #[arg(long)]
    total: u64,
    #[arg(long, default_value_t = 1)]
    conc: usize,
    #[arg(long, value_enum, default_value_t = Mode::Mono)]
    mode: Mode,
    /// Chunk size in chunked mode [default: size/4, between 256 KiB and 16 MiB]; in stream
    /// mode, the size of each chunk of the chunked transfer encoding [default: 32 KiB].
    #[arg(long)]
    chunk: Option<u64>,
    /// Makes the blobs of this run unique (different digests on every run).
    #[arg(long)]
    seed: u64,
    /// Where to write the digests (one `digest size` per line) for `pull`.
    #[arg(long)]
    digests: std::path::PathBuf,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Mode {
    Mono,
    Chunked,
    Stream,
}

#[derive(Debug, clap::Args)]
struct PullArgs {
    #[arg(long)]
    url: String,
    #[arg(long)]
    repo: String,
    #[arg(long)]
    digests: std::path::PathBuf,
    #[arg(long, default_value_t = 1)]
    conc: usize,
}

#[derive(Debug, clap::Args)]
struct SeedArgs {
    #[arg(long)]
    url: String,
    #[arg(long)]
    repo: String,
    #[arg(long, default_value_t = 100)]
    tags: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Kind {
    Head,
    Get,
    Tags,
}

#[derive(Debug, clap::Args)]
struct SmallArgs {
    #[arg(long)]
    url: String,
    #[arg(long)]
    repo: String,
    #[arg(long, value_enum)]
    kind: Kind,
    #[arg(long, default_value_t = 64)]
    conns: usize,
    /// Measured seconds.
    #[arg(long, default_value_t = 5.0)]
    secs: f64,
    /// Seconds of warm-up before, not counted.
    #[arg(long, default_value_t = 1.0)]
    warmup: f64,
}

#[derive(Debug, clap::Args)]
struct HashArgs {
    /// MiB hashed per pass.
    #[arg(long, default_value_t = 1024)]
    mib: u64,
    /// Passes; the best is reported.
    #[arg(long, default_value_t = 3)]
    passes: usize,
}

#[derive(Debug, clap::Args)]
struct ProxyArgs {
    /// The S3 endpoint to forward to, `host:port`.
    #[arg(long)]
    upstream: std::net::SocketAddr,
}

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";

fn main() -> anyhow::Result<()> {
    let cmd = Cmd::parse();
    // Two worker threads: the machine has two cores and the servers need them too; the same
    // setting is used against every server.
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let out = rt.block_on(async move {
        match cmd {
            Cmd::Push(a) => push(a).await,
            Cmd::Pull(a) => pull(a).await,
            Cmd::SeedSmall(a) => seed_small(a).await,
            Cmd::Small(a) => small(a).await,
            Cmd::Hash(a) => hash(a),
            Cmd::S3proxy(a) => s3proxy(a).await,
            Cmd::Grow(a) => grow::grow(a).await,
            Cmd::Catalog(a) => catalog(a).await,
            Cmd::PushImages(a) => pushload::push_images(a).await,
            Cmd::VerifyImages(a) => pushload::verify_images(a).await,
        }
    })?;
    println!("{out}");
    Ok(())
}

/// 64 MiB of pseudo-random bytes (splitmix64): blob contents are slices of it, so bodies are
/// zero-copy `Bytes` and incompressible for any store that compresses.
fn random_pool() -> Bytes {
    let mut state = 0x9e37_79b9_7f4a_7c15_u64;
    let mut v = Vec::with_capacity(64 << 20);
    for _ in 0..(64 << 20) / 8 {
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        v.extend_from_slice(&(z ^ (z >> 31)).to_le_bytes());
    }
    Bytes::from(v)
}

/// One blob's content: a unique 32-byte header (seed, index) and then the pool from an offset
/// that depends on the index, wrapping around, cut into pieces of at most 1 MiB.
#[derive(Clone)]
struct BlobSpec {
    pool: Bytes,
    seed: u64,
    index: u64,
    size: u64,
}

impl BlobSpec {
    fn pieces(&self) -> Vec<Bytes> {
        let mut header = [0u8; 32];
        header[..8].copy_from_slice(&self.seed.to_le_bytes());
        header[8..16].copy_from_slice(&self.index.to_le_bytes());
        header[16..].copy_from_slice(b"rd-bench-blob-v1");
        let header = Bytes::copy_from_slice(&header[..self.size.min(32) as usize]);
        let mut out = vec![header];
        let mut left = self.size.saturating_sub(32) as usize;
        let plen = self.pool.len();
        let mut off = (self.index.wrapping_mul(7_919_993) as usize) % plen;
        while left > 0 {
            let n = left.min(1 << 20).min(plen - off);
            out.push(self.pool.slice(off..off + n));
            left -= n;
            off = (off + n) % plen;
        }
        out
    }

    fn digest(&self) -> String {
        let mut d = Digester::new(Algorithm::Sha256);
        for p in self.pieces() {
            d.update(&p);
        }
        d.finish().to_string()
    }

    /// The bytes `start..end` as pieces.
    fn range(&self, start: u64, end: u64) -> Vec<Bytes> {
        let mut out = Vec::new();
        let mut pos = 0u64;
        for p in self.pieces() {
            let (ps, pe) = (pos, pos + p.len() as u64);
            pos = pe;
            if pe <= start || ps >= end {
                continue;
            }
            let s = start.max(ps) - ps;
            let e = end.min(pe) - ps;
            out.push(p.slice(s as usize..e as usize));
        }
        out
    }
}

fn body(pieces: Vec<Bytes>) -> reqwest::Body {
    reqwest::Body::wrap_stream(futures_util::stream::iter(
        pieces.into_iter().map(Ok::<_, std::io::Error>),
    ))
}

async fn push_one(
    c: &reqwest::Client,
    url: &str,
    repo: &str,
    spec: &BlobSpec,
    digest: &str,
    mode: Mode,
    chunk: u64,
) -> anyhow::Result<()> {
    let resp = c
        .post(format!("{url}/v2/{repo}/blobs/uploads/"))
        .header(reqwest::header::CONTENT_LENGTH, "0")
        .send()
        .await?;
    let resp = check(resp, "POST upload").await?;
    let mut loc = location(url, &resp)?;
    match mode {
        Mode::Mono => {
            let resp = c
                .put(with_digest(&loc, digest))
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .header(reqwest::header::CONTENT_LENGTH, spec.size)
                .body(body(spec.pieces()))
                .send()
                .await?;
            check(resp, "PUT blob").await?;
        }
        Mode::Chunked => {
            let mut start = 0;
            while start < spec.size {
                let end = (start + chunk).min(spec.size);
                let resp = c
                    .patch(&loc)
                    .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                    .header(reqwest::header::CONTENT_LENGTH, end - start)
                    .header(
                        reqwest::header::CONTENT_RANGE,
                        format!("{start}-{}", end - 1),
                    )
                    .body(body(spec.range(start, end)))
                    .send()
                    .await?;
                let resp = check(resp, "PATCH chunk").await?;
                loc = location(url, &resp)?;
                start = end;
            }
            let resp = c
                .put(with_digest(&loc, digest))
                .header(reqwest::header::CONTENT_LENGTH, "0")
                .send()
                .await?;
            check(resp, "PUT close").await?;
        }
        Mode::Stream => {
            // A body stream of unknown length: hyper sends it with `Transfer-Encoding:
            // chunked`, one encoding chunk per item.
            let frames: Vec<Bytes> = spec
                .pieces()
                .into_iter()
                .flat_map(|p| {
                    (0..p.len())
                        .step_by(chunk as usize)
                        .map(move |s| p.slice(s..(s + chunk as usize).min(p.len())))
                })
                .collect();
            let resp = c
                .patch(&loc)
                .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
                .body(body(frames))
                .send()
                .await?;
            let resp = check(resp, "PATCH stream").await?;
            loc = location(url, &resp)?;
            let resp = c
                .put(with_digest(&loc, digest))
                .header(reqwest::header::CONTENT_LENGTH, "0")
                .send()
                .await?;
            check(resp, "PUT close").await?;
        }
    }
    Ok(())
}

async fn push(a: PushArgs) -> anyhow::Result<serde_json::Value> {
    ensure!(a.size > 0 && a.conc > 0, "size and conc must be positive");
    let count = (a.total / a.size).max(1);
    let chunk = a
        .chunk
        .unwrap_or(match a.mode {
            Mode::Stream => 32 << 10,
            _ => (a.size / 4).clamp(256 << 10, 16 << 20),
        })
        .max(1);
    let pool = random_pool();
    let specs: Vec<BlobSpec> = (0..count)
        .map(|index| BlobSpec {
            pool: pool.clone(),
            seed: a.seed,
            index,
            size: a.size,
        })
        .collect();
    // Digests are computed before the clock starts: a client knows them before it pushes.
    let digests: Vec<String> = specs.iter().map(BlobSpec::digest).collect();
    let c = client()?;
    let url = a.url.trim_end_matches('/').to_owned();
    let jobs = Arc::new((specs, digests.clone()));
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let cpu0 = process_cpu_secs();
    let mut tasks = Vec::new();
    for _ in 0..a.conc {
        let (c, url, repo, jobs, next) = (
            c.clone(),
            url.clone(),
            a.repo.clone(),
            jobs.clone(),
            next.clone(),
        );
        tasks.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(spec) = jobs.0.get(i) else {
                    return Ok::<_, anyhow::Error>(());
                };
                push_one(&c, &url, &repo, spec, &jobs.1[i], a.mode, chunk).await?;
            }
        }));
    }
    for t in tasks {
        t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let client_cpu_s = process_cpu_secs() - cpu0;
    let lines: String = digests
        .iter()
        .map(|d| format!("{d} {}\n", a.size))
        .collect();
    std::fs::write(&a.digests, lines)
        .with_context(|| format!("writing {}", a.digests.display()))?;
    let bytes = count * a.size;
    Ok(json!({
        "op": "push", "mode": format!("{:?}", a.mode).to_lowercase(), "size": a.size,
        "conc": a.conc, "blobs": count, "bytes": bytes, "chunk": chunk, "secs": secs,
        "mib_s": bytes as f64 / secs / 1048576.0, "client_cpu_s": client_cpu_s,
    }))
}

async fn pull(a: PullArgs) -> anyhow::Result<serde_json::Value> {
    let text = std::fs::read_to_string(&a.digests)
        .with_context(|| format!("reading {}", a.digests.display()))?;
    let mut blobs = Vec::new();
    for line in text.lines() {
        let (d, s) = line.split_once(' ').context("digest line without size")?;
        blobs.push((d.to_owned(), s.parse::<u64>()?));
    }
    let c = client()?;
    let url = a.url.trim_end_matches('/').to_owned();
    let blobs = Arc::new(blobs);
    let next = Arc::new(AtomicUsize::new(0));
    let started = Instant::now();
    let cpu0 = process_cpu_secs();
    let mut tasks = Vec::new();
    for _ in 0..a.conc.max(1) {
        let (c, url, repo, blobs, next) = (
            c.clone(),
            url.clone(),
            a.repo.clone(),
            blobs.clone(),
            next.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut total = 0u64;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some((digest, size)) = blobs.get(i) else {
                    return Ok::<_, anyhow::Error>(total);
                };
                let resp = c
                    .get(format!("{url}/v2/{repo}/blobs/{digest}"))
                    .send()
                    .await?;
                let resp = check(resp, "GET blob").await?;
                let mut stream = resp.bytes_stream();
                let mut n = 0u64;
                while let Some(b) = stream.next().await {
                    n += b?.len() as u64;
                }
                ensure!(n == *size, "{digest}: got {n} bytes, expected {size}");
                total += n;
            }
        }));
    }
    let mut bytes = 0;
    for t in tasks {
        bytes += t.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    let client_cpu_s = process_cpu_secs() - cpu0;
    let size = blobs.first().map(|b| b.1).unwrap_or(0);
    Ok(json!({
        "op": "pull", "size": size, "conc": a.conc, "blobs": blobs.len(), "bytes": bytes,
        "secs": secs, "mib_s": bytes as f64 / secs / 1048576.0, "client_cpu_s": client_cpu_s,
    }))
}

async fn put_blob(
    c: &reqwest::Client,
    url: &str,
    repo: &str,
    data: &[u8],
) -> anyhow::Result<String> {
    let digest = validator::Digest::sha256(data).to_string();
    let resp = c
        .post(format!("{url}/v2/{repo}/blobs/uploads/"))
        .header(reqwest::header::CONTENT_LENGTH, "0")
        .send()
        .await?;
    let resp = check(resp, "POST upload").await?;
    let loc = location(url, &resp)?;
    let resp = c
        .put(with_digest(&loc, &digest))
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .body(data.to_vec())
        .send()
        .await?;
    check(resp, "PUT blob").await?;
    Ok(digest)
}

async fn seed_small(a: SeedArgs) -> anyhow::Result<serde_json::Value> {
    let c = client()?;
    let url = a.url.trim_end_matches('/');
    let config = br#"{"architecture":"amd64","os":"illumos","config":{},"rootfs":{"type":"layers","diff_ids":[]}}"#;
    let cdigest = put_blob(&c, url, &a.repo, config).await?;
    let manifest = json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json",
                   "digest": cdigest, "size": config.len()},
        "layers": [],
    })
    .to_string();
    for t in 0..a.tags {
        let resp = c
            .put(format!("{url}/v2/{}/manifests/t{t:04}", a.repo))
            .header(reqwest::header::CONTENT_TYPE, MANIFEST_TYPE)
            .body(manifest.clone())
            .send()
            .await?;
        check(resp, "PUT manifest").await?;
    }
    Ok(json!({"op": "seed-small", "tags": a.tags}))
}

async fn small(a: SmallArgs) -> anyhow::Result<serde_json::Value> {
    let c = client()?;
    let url = a.url.trim_end_matches('/').to_owned();
    let target = match a.kind {
        Kind::Head | Kind::Get => format!("{url}/v2/{}/manifests/t0000", a.repo),
        Kind::Tags => format!("{url}/v2/{}/tags/list", a.repo),
    };
    let warm = Instant::now() + Duration::from_secs_f64(a.warmup);
    let end = warm + Duration::from_secs_f64(a.secs);
    let mut tasks = Vec::new();
    for _ in 0..a.conns {
        let (c, target) = (c.clone(), target.clone());
        tasks.push(tokio::spawn(async move {
            let mut lat = Vec::new();
            loop {
                let t0 = Instant::now();
                if t0 >= end {
                    return Ok::<_, anyhow::Error>(lat);
                }
                let req = match a.kind {
                    Kind::Head => c.head(&target),
                    Kind::Get | Kind::Tags => c.get(&target),
                }
                .header(reqwest::header::ACCEPT, MANIFEST_TYPE);
                let resp = check(req.send().await?, "small request").await?;
                let _ = resp.bytes().await?;
                if t0 >= warm {
                    lat.push(t0.elapsed().as_micros() as u64);
                }
            }
        }));
    }
    let mut lat = Vec::new();
    for t in tasks {
        lat.extend(t.await??);
    }
    ensure!(!lat.is_empty(), "no request finished in {} s", a.secs);
    lat.sort_unstable();
    let pct = |p: f64| lat[((lat.len() as f64 * p) as usize).min(lat.len() - 1)] as f64 / 1000.0;
    Ok(json!({
        "op": "small", "kind": format!("{:?}", a.kind).to_lowercase(), "conns": a.conns,
        "requests": lat.len(), "rps": lat.len() as f64 / a.secs,
        "p50_ms": pct(0.50), "p99_ms": pct(0.99),
    }))
}

fn hash(a: HashArgs) -> anyhow::Result<serde_json::Value> {
    // The registry and the validator hash in buffers of 256 KiB.
    let pool = random_pool();
    let buf = pool.slice(..256 << 10);
    let rounds = (a.mib << 20) / buf.len() as u64;
    let (mut best_cpu, mut best_wall) = (f64::INFINITY, f64::INFINITY);
    for _ in 0..a.passes.max(1) {
        let (cpu0, wall0) = (thread_cpu_secs(), Instant::now());
        let mut d = Digester::new(Algorithm::Sha256);
        for _ in 0..rounds {
            d.update(&buf);
        }
        std::hint::black_box(d.finish());
        best_cpu = best_cpu.min(thread_cpu_secs() - cpu0);
        best_wall = best_wall.min(wall0.elapsed().as_secs_f64());
    }
    let bytes = rounds * buf.len() as u64;
    // `mb_s` divides by the CPU time this thread used, as `openssl speed` does by default (its
    // `-elapsed` switches to wall-clock time): on a shared machine the wall-clock rate mostly
    // measures how much of a core the scheduler gave us. Both are reported.
    Ok(json!({
        "op": "hash", "bytes": bytes, "cpu_secs": best_cpu, "secs": best_wall,
        "mb_s": bytes as f64 / best_cpu / 1e6,
        "mb_s_wall": bytes as f64 / best_wall / 1e6,
    }))
}

/// CPU time (user and system) the calling thread has used, in seconds.
fn thread_cpu_secs() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

/// CPU time (user and system) this process has used, all threads, in seconds: the load
/// client's own cost in a push or pull cell, beside the server's (`bench/run.sh` reads that
/// one from `/proc`), so a cell shows how the machine's cores were shared.
fn process_cpu_secs() -> f64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    t.tv_sec as f64 + t.tv_nsec as f64 / 1e9
}

async fn s3proxy(a: ProxyArgs) -> anyhow::Result<serde_json::Value> {
    let proxy = s3_fixtures::FaultProxy::start(a.upstream).await?;
    println!("{}", proxy.endpoint());
    let proxy = Arc::new(proxy);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(4);
    std::thread::spawn(move || {
        for line in std::io::stdin().lines() {
            let Ok(line) = line else { break };
            if tx.blocking_send(line).is_err() {
                break;
            }
        }
    });
    while let Some(line) = rx.recv().await {
        match line.trim() {
            "reset" => {
                proxy.reset_counts();
                println!("ok");
            }
            "counts" => {
                let m: serde_json::Map<String, serde_json::Value> = proxy
                    .requests()
                    .into_iter()
                    .map(|(op, n)| (op.to_string(), n.into()))
                    .collect();
                println!("{}", serde_json::Value::Object(m));
            }
            other => println!("{{\"error\":\"unknown command {other:?}\"}}"),
        }
    }
    Ok(json!({"op": "s3proxy", "done": true}))
}

/// Follows `Link: <...>; rel="next"` from `first` to the end; returns (pages, items, seconds,
/// slowest page in seconds).
async fn paged(
    client: &reqwest::Client,
    base: &str,
    first: String,
    field: &str,
) -> anyhow::Result<(usize, usize, f64, f64)> {
    let started = Instant::now();
    let (mut pages, mut items, mut slowest) = (0, 0, 0f64);
    let mut next = Some(first);
    while let Some(path) = next.take() {
        let t = Instant::now();
        let resp = client.get(format!("{base}{path}")).send().await?;
        ensure!(resp.status() == 200, "GET {path}: {}", resp.status());
        next = resp
            .headers()
            .get("link")
            .and_then(|l| l.to_str().ok())
            .and_then(|l| l.split_once('<'))
            .and_then(|(_, rest)| rest.split_once('>'))
            .map(|(p, _)| p.to_owned());
        let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await?)?;
        slowest = slowest.max(t.elapsed().as_secs_f64());
        pages += 1;
        items += body[field].as_array().map_or(0, Vec::len);
    }
    Ok((pages, items, started.elapsed().as_secs_f64(), slowest))
}

async fn catalog(a: CatalogArgs) -> anyhow::Result<serde_json::Value> {
    let client = reqwest::Client::new();
    let base = a.url.trim_end_matches('/');
    let (pages, repos, secs, slowest) = paged(
        &client,
        base,
        format!("/v2/_catalog?n={}", a.n),
        "repositories",
    )
    .await?;
    let t = Instant::now();
    let resp = client
        .get(format!("{base}/v2/{}/tags/list", a.tags_of))
        .send()
        .await?;
    ensure!(
        resp.status() == 200,
        "tag list of {}: {}",
        a.tags_of,
        resp.status()
    );
    let body: serde_json::Value = serde_json::from_slice(&resp.bytes().await?)?;
    let tags = body["tags"].as_array().map_or(0, Vec::len);
    let tags_secs = t.elapsed().as_secs_f64();
    let (tag_pages, paged_tags, tag_pages_secs, tag_slowest) = paged(
        &client,
        base,
        format!("/v2/{}/tags/list?n={}", a.tags_of, a.n),
        "tags",
    )
    .await?;
    ensure!(
        paged_tags == tags,
        "paging the tags found {paged_tags} of {tags}"
    );
    Ok(json!({
        "op": "catalog",
        "catalog_pages": pages,
        "repositories": repos,
        "catalog_secs": secs,
        "catalog_slowest_page_secs": slowest,
        "tags": tags,
        "tag_list_secs": tags_secs,
        "tag_pages": tag_pages,
        "tag_pages_secs": tag_pages_secs,
        "tag_slowest_page_secs": tag_slowest,
    }))
}
