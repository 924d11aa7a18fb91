//! `rd-bench push-images` and `rd-bench verify-images`: many small images pushed through the
//! Distribution API, and every acknowledged one checked afterwards.
//!
//! `push-images` pushes images of the shape `rd-bench grow` writes through the store API (a
//! config and `--layers` layers of about 40 bytes each, every `--untagged-every`th manifest of a
//! repository pushed by digest only), so a registry whose store layout is not ours (CNCF
//! distribution) can be seeded with the same shape. With `--stop-file` it is a load instead: it
//! goes on, repository after repository, until that file exists. With `--record`, every image
//! whose manifest PUT was acknowledged is written as one JSON line (`t0`, `t1`: Unix seconds at
//! its first request and at the acknowledgement; `repo`, `tag` or null, `manifest`).
//!
//! `verify-images` reads such a record and pulls every image in it (the manifest by tag, or by
//! digest when untagged, and every blob it names, each checked against its digest), so a GC
//! that deleted something an acknowledged push relies on is counted, image by image.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::Context as _;
use futures_util::StreamExt as _;
use serde_json::json;
use tokio::io::AsyncWriteExt as _;
use validator::Digest;

use crate::http::{check, client, location, with_digest};

const MANIFEST_TYPE: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG_TYPE: &str = "application/vnd.oci.image.config.v1+json";
const LAYER_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";
/// Tries of one blob upload or manifest PUT that a registry answered with 429 or 5xx, or that
/// did not connect (a registry that asks the client to retry, as ours does while a collector
/// deletes a digest the push relies on, is retried as clients do).
const TRIES: u32 = 8;

#[derive(Debug, clap::Args)]
pub struct PushImagesArgs {
    #[arg(long)]
    url: String,
    /// Repositories are `<prefix>/rNNNN`.
    #[arg(long, default_value = "grow")]
    prefix: String,
    /// Repositories to fill, each with `--manifests` images (ignored with `--stop-file`).
    #[arg(long, default_value_t = 100)]
    repos: usize,
    /// Images per repository.
    #[arg(long, default_value_t = 10)]
    manifests: usize,
    /// Layers per image (each image also has its own config blob).
    #[arg(long, default_value_t = 9)]
    layers: usize,
    /// Every Nth image of a repository is pushed by digest, without a tag; 0: all tagged.
    #[arg(long, default_value_t = 10)]
    untagged_every: usize,
    /// Makes the blobs of this run unique (part of every blob's bytes).
    #[arg(long, default_value = "")]
    seed: String,
    /// Images in flight.
    #[arg(long, default_value_t = 8)]
    conc: usize,
    /// Push until this file exists instead of `--repos` repositories.
    #[arg(long)]
    stop_file: Option<PathBuf>,
    /// Where to write one JSON line per acknowledged image.
    #[arg(long)]
    record: Option<PathBuf>,
}

#[derive(Debug, clap::Args)]
pub struct VerifyImagesArgs {
    #[arg(long)]
    url: String,
    /// A `push-images --record` file.
    #[arg(long)]
    record: PathBuf,
    /// Only the tagged images of the record (after a GC that deletes untagged manifests).
    #[arg(long)]
    tagged_only: bool,
    /// Requests in flight.
    #[arg(long, default_value_t = 16)]
    conc: usize,
}

fn unix_now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or(0.0)
}

/// Whether a failed try is worth another: the registry asked for a retry or was briefly away.
fn retryable(e: &anyhow::Error) -> bool {
    e.chain().any(|c| {
        c.downcast_ref::<reqwest::Error>()
            .is_some_and(|r| r.is_connect() || r.is_timeout())
            || c.downcast_ref::<Status>().is_some_and(|s| {
                s.0 == reqwest::StatusCode::TOO_MANY_REQUESTS || s.0.is_server_error()
            })
    })
}

/// The status of a failed response, kept for `retryable`.
#[derive(Debug)]
struct Status(reqwest::StatusCode);
impl std::fmt::Display for Status {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "status {}", self.0)
    }
}
impl std::error::Error for Status {}

async fn checked(resp: reqwest::Response, what: &str) -> anyhow::Result<reqwest::Response> {
    let status = resp.status();
    check(resp, what)
        .await
        .map_err(|e| e.context(Status(status)))
}

/// Runs `op` until it succeeds, fails for good, or `TRIES` retryable failures; counts retries.
async fn with_retries<T, F, Fut>(retries: &AtomicUsize, what: &str, op: F) -> anyhow::Result<T>
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let mut wait = Duration::from_millis(100);
    for n in 1.. {
        match op().await {
            Ok(v) => return Ok(v),
            Err(e) if n < TRIES && retryable(&e) => {
                retries.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Err(e) => return Err(e.context(format!("{what} (try {n})"))),
        }
    }
    unreachable!("the loop returns")
}

async fn upload(c: &reqwest::Client, url: &str, repo: &str, data: &[u8]) -> anyhow::Result<()> {
    let digest = Digest::sha256(data).to_string();
    let resp = c
        .post(format!("{url}/v2/{repo}/blobs/uploads/"))
        .header(reqwest::header::CONTENT_LENGTH, "0")
        .send()
        .await?;
    let resp = checked(resp, "POST upload").await?;
    let loc = location(url, &resp)?;
    let resp = c
        .put(with_digest(&loc, &digest))
        .header(reqwest::header::CONTENT_TYPE, "application/octet-stream")
        .body(data.to_vec())
        .send()
        .await?;
    checked(resp, "PUT blob").await?;
    Ok(())
}

/// One image `i`: its repository, its tag (None: pushed by digest) and its blobs.
struct Image {
    repo: String,
    tag: Option<String>,
    config: Vec<u8>,
    layers: Vec<Vec<u8>>,
}

fn image(a: &PushImagesArgs, i: usize) -> Image {
    let (r, m) = (i / a.manifests, i % a.manifests);
    let blob = |l: usize| format!("{} r{r} manifest {m} blob {l} {}\n", a.prefix, a.seed);
    let untagged = a.untagged_every > 0 && m % a.untagged_every == a.untagged_every - 1;
    Image {
        repo: format!("{}/r{r:04}", a.prefix),
        tag: (!untagged).then(|| format!("m{m}")),
        config: blob(0).into_bytes(),
        layers: (1..=a.layers).map(|l| blob(l).into_bytes()).collect(),
    }
}

fn descriptor(mt: &str, data: &[u8]) -> serde_json::Value {
    json!({"mediaType": mt, "digest": Digest::sha256(data).to_string(), "size": data.len()})
}

/// Pushes one image; returns its record line.
async fn push_image(
    c: &reqwest::Client,
    url: &str,
    img: &Image,
    retries: &AtomicUsize,
) -> anyhow::Result<serde_json::Value> {
    let t0 = unix_now();
    for data in std::iter::once(&img.config).chain(&img.layers) {
        with_retries(
            retries,
            &format!("uploading a blob to {}", img.repo),
            || upload(c, url, &img.repo, data),
        )
        .await?;
    }
    let manifest = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_TYPE,
        "config": descriptor(CONFIG_TYPE, &img.config),
        "layers": img.layers.iter().map(|l| descriptor(LAYER_TYPE, l)).collect::<Vec<_>>(),
    }))?;
    let digest = Digest::sha256(&manifest).to_string();
    let reference = img.tag.clone().unwrap_or_else(|| digest.clone());
    with_retries(
        retries,
        &format!("putting {}:{reference}", img.repo),
        || async {
            let resp = c
                .put(format!("{url}/v2/{}/manifests/{reference}", img.repo))
                .header(reqwest::header::CONTENT_TYPE, MANIFEST_TYPE)
                .body(manifest.clone())
                .send()
                .await?;
            checked(resp, "PUT manifest").await.map(drop)
        },
    )
    .await?;
    Ok(json!({"t0": t0, "t1": unix_now(), "repo": img.repo, "tag": img.tag, "manifest": digest}))
}

pub async fn push_images(a: PushImagesArgs) -> anyhow::Result<serde_json::Value> {
    anyhow::ensure!(a.manifests > 0, "--manifests must be at least 1");
    let c = client()?;
    let url = a.url.trim_end_matches('/').to_owned();
    let a = Arc::new(a);
    let mut record = match &a.record {
        Some(p) => Some(tokio::io::BufWriter::new(
            tokio::fs::File::create(p)
                .await
                .with_context(|| format!("creating {}", p.display()))?,
        )),
        None => None,
    };
    let retries = Arc::new(AtomicUsize::new(0));
    let failed = Arc::new(AtomicUsize::new(0));
    let limit = if a.stop_file.is_some() {
        usize::MAX
    } else {
        a.repos * a.manifests
    };
    let started = Instant::now();
    let (tx, mut rx) = tokio::sync::mpsc::channel::<serde_json::Value>(1024);
    let next = Arc::new(AtomicUsize::new(0));
    let mut workers = Vec::new();
    for _ in 0..a.conc.max(1) {
        let (a, c, url, tx) = (a.clone(), c.clone(), url.clone(), tx.clone());
        let (next, retries, failed) = (next.clone(), retries.clone(), failed.clone());
        workers.push(tokio::spawn(async move {
            loop {
                if let Some(stop) = &a.stop_file
                    && stop.exists()
                {
                    return Ok(());
                }
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= limit {
                    return Ok(());
                }
                match push_image(&c, &url, &image(&a, i), &retries).await {
                    Ok(line) => {
                        if tx.send(line).await.is_err() {
                            return Ok(());
                        }
                    }
                    // Under load a failed push is a measurement (counted and reported); a
                    // seeding run needs every image.
                    Err(e) if a.stop_file.is_some() => {
                        failed.fetch_add(1, Ordering::Relaxed);
                        eprintln!("rd-bench push-images: image {i}: {e:#}");
                    }
                    Err(e) => return Err(e.context(format!("image {i}"))),
                }
            }
        }));
    }
    drop(tx);
    let mut images = 0usize;
    let mut tagged = 0usize;
    while let Some(line) = rx.recv().await {
        images += 1;
        tagged += usize::from(!line["tag"].is_null());
        if let Some(w) = record.as_mut() {
            w.write_all(format!("{line}\n").as_bytes()).await?;
        }
    }
    if let Some(mut w) = record {
        w.flush().await?;
    }
    for w in workers {
        w.await??;
    }
    let secs = started.elapsed().as_secs_f64();
    Ok(json!({
        "op": "push-images",
        "images": images,
        "tagged": tagged,
        // A config, the layers and the manifest: the blobs each image adds to the store.
        "blobs": images * (a.layers + 2),
        "secs": secs,
        "images_per_sec": images as f64 / secs,
        "blobs_per_sec": (images * (a.layers + 2)) as f64 / secs,
        "retries": retries.load(Ordering::Relaxed),
        "failed": failed.load(Ordering::Relaxed),
    }))
}

/// Pulls one recorded image; `Err` names what is missing or wrong.
async fn verify_image(
    c: &reqwest::Client,
    url: &str,
    line: &serde_json::Value,
) -> anyhow::Result<usize> {
    let repo = line["repo"].as_str().context("record line without repo")?;
    let want = line["manifest"]
        .as_str()
        .context("record line without manifest")?;
    let reference = line["tag"].as_str().unwrap_or(want);
    let resp = c
        .get(format!("{url}/v2/{repo}/manifests/{reference}"))
        .header(reqwest::header::ACCEPT, MANIFEST_TYPE)
        .send()
        .await?;
    let body = check(resp, &format!("GET manifest {repo}:{reference}"))
        .await?
        .bytes()
        .await?;
    let got = Digest::sha256(&body).to_string();
    anyhow::ensure!(
        got == want,
        "{repo}:{reference} is {got}, the push acknowledged {want}"
    );
    let m: serde_json::Value = serde_json::from_slice(&body)
        .with_context(|| format!("manifest {repo}@{want} is not JSON"))?;
    let descs = std::iter::once(&m["config"]).chain(m["layers"].as_array().into_iter().flatten());
    let mut blobs = 0;
    for d in descs {
        let digest = d["digest"]
            .as_str()
            .with_context(|| format!("manifest {repo}@{want}: a descriptor without digest"))?;
        let resp = c
            .get(format!("{url}/v2/{repo}/blobs/{digest}"))
            .send()
            .await?;
        let bytes = check(resp, &format!("GET blob {repo}@{digest}"))
            .await?
            .bytes()
            .await?;
        let got = Digest::sha256(&bytes).to_string();
        anyhow::ensure!(got == digest, "blob {repo}@{digest} has bytes of {got}");
        blobs += 1;
    }
    Ok(blobs)
}

pub async fn verify_images(a: VerifyImagesArgs) -> anyhow::Result<serde_json::Value> {
    let c = client()?;
    let url = a.url.trim_end_matches('/');
    let text = std::fs::read_to_string(&a.record)
        .with_context(|| format!("reading {}", a.record.display()))?;
    let mut lines = Vec::new();
    for (n, l) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(l)
            .with_context(|| format!("{} line {}: not JSON", a.record.display(), n + 1))?;
        if !a.tagged_only || !v["tag"].is_null() {
            lines.push(v);
        }
    }
    let started = Instant::now();
    let results: Vec<anyhow::Result<usize>> = futures_util::stream::iter(&lines)
        .map(|l| verify_image(&c, url, l))
        .buffer_unordered(a.conc.max(1))
        .collect()
        .await;
    let mut blobs = 0;
    let mut broken = Vec::new();
    for r in results {
        match r {
            Ok(n) => blobs += n,
            Err(e) => broken.push(format!("{e:#}")),
        }
    }
    Ok(json!({
        "op": "verify-images",
        "images": lines.len(),
        "blobs_pulled": blobs,
        "broken_images": broken.len(),
        "first_broken": broken.iter().take(10).collect::<Vec<_>>(),
        "secs": started.elapsed().as_secs_f64(),
    }))
}
