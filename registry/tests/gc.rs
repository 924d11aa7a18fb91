//! Online garbage collection on both stores (a filesystem store in a temp dir, the S3 store on
//! SeaweedFS from `s3-fixtures`), driven through the registry served over TCP in process and
//! pushed to with the registry's own HTTP client:
//!
//! - what is reachable (tags, index children, referrers, layers shared across repositories)
//!   is kept and what is not is removed once older than the grace window; a dry run deletes
//!   nothing; a deleted manifest is `MANIFEST_UNKNOWN` afterwards;
//! - collections running back to back during 50 concurrent pushes lose nothing acknowledged;
//! - a collector that died (its lease and tombstones left as a killed process leaves them,
//!   with a short time to live) blocks nothing once its lease is stale: pushes release its
//!   tombstones, what it deleted is uploaded again, the next run completes; while its lease is
//!   live, pushes touching its tombstones wait, and `break_lease` refuses without `force`;
//! - a digest a request held during the run is kept and counted (`kept_held`);
//! - issue 39: a collector held (through a gate in the store under it, as SIGSTOP would) after
//!   tombstoning or after deciding, while its lease is broken by force and the digests are
//!   pushed again, deletes none of them, and the next run completes; a collector killed while
//!   sweeping holds up no push for long; a waiting request looks at the tombstone with a
//!   backoff, not every 20 ms.

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::StreamExt;
use registry::gc::{self, GcOptions, GcReport, ObjectKind};
use registry::storage::{FsStore, Key, PutMode, S3Config, S3Store, Store, layout};
use registry::{AppState, RegistryConfig, router};
use registry_client::{Client, Reference};
use tokio::io::AsyncReadExt;
use validator::Digest;
use validator::Name;

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";

/// A registry served over TCP on a loopback port, with its store.
struct Served {
    addr: SocketAddr,
    state: AppState,
    store: Arc<dyn Store>,
    client: Client,
    task: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Served {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn fs_store() -> (Arc<dyn Store>, Option<tempfile::TempDir>) {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    (Arc::new(store), Some(dir))
}

async fn s3_store() -> (Arc<dyn Store>, Option<tempfile::TempDir>) {
    let sw = s3_fixtures::SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"));
    let bucket = sw.bucket().unwrap_or_else(|e| panic!("{e}"));
    let store = S3Store::new(S3Config::new(sw.endpoint(), &bucket).prefix("reg"));
    (Arc::new(store), None)
}

async fn serve(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) -> Served {
    let (store, dir) = store;
    let state = AppState::new(store.clone(), RegistryConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(state.clone());
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    let client = Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .unwrap();
    Served {
        addr,
        state,
        store,
        client,
        task,
        _dir: dir,
    }
}

fn desc(media_type: &str, data: &[u8]) -> serde_json::Value {
    serde_json::json!({"mediaType": media_type, "digest": Digest::sha256(data), "size": data.len()})
}

/// An image: config and layers (bytes) and its manifest.
struct Image {
    config: Vec<u8>,
    layers: Vec<Vec<u8>>,
    manifest: Bytes,
}

impl Image {
    fn new(config: Vec<u8>, layers: Vec<Vec<u8>>, subject: Option<&Bytes>) -> Image {
        let mut m = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": desc(CONFIG, &config),
            "layers": layers.iter().map(|l| desc(LAYER, l)).collect::<Vec<_>>(),
        });
        if let Some(s) = subject {
            m["subject"] = desc(MANIFEST, s);
            m["artifactType"] = "application/vnd.example.signature".into();
        }
        let manifest = Bytes::from(serde_json::to_vec(&m).unwrap());
        Image {
            config,
            layers,
            manifest,
        }
    }

    fn digest(&self) -> Digest {
        Digest::sha256(&self.manifest)
    }

    fn blobs(&self) -> impl Iterator<Item = &Vec<u8>> {
        std::iter::once(&self.config).chain(self.layers.iter())
    }
}

impl Served {
    fn registry(&self) -> String {
        self.addr.to_string()
    }

    fn reference(&self, repo: &str, reference: &str) -> Reference {
        let sep = if reference.contains(':') { "@" } else { ":" };
        Reference::parse(&format!("{}/{repo}{sep}{reference}", self.addr)).unwrap()
    }

    async fn push_blob(&self, repo: &str, data: &[u8]) -> Result<Digest, String> {
        let d = Digest::sha256(data);
        let name = Name::parse(repo).unwrap();
        self.client
            .push_blob(&self.registry(), &name, &d, data.len() as u64, data)
            .await
            .map_err(|e| e.to_string())?;
        Ok(d)
    }

    async fn push_image(&self, repo: &str, reference: &str, img: &Image) -> Result<(), String> {
        for b in img.blobs() {
            self.push_blob(repo, b).await?;
        }
        self.push_manifest(repo, reference, MANIFEST, img.manifest.clone())
            .await
    }

    async fn push_manifest(
        &self,
        repo: &str,
        reference: &str,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<(), String> {
        self.client
            .push_manifest(&self.reference(repo, reference), media_type, bytes)
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Status and OCI error code of a plain request.
    async fn status(&self, method: reqwest::Method, path: &str) -> (u16, Option<String>) {
        let resp = reqwest::Client::new()
            .request(method, format!("http://{}{path}", self.addr))
            .header("accept", format!("{MANIFEST}, {INDEX}"))
            .send()
            .await
            .unwrap();
        let status = resp.status().as_u16();
        let body = resp.bytes().await.unwrap();
        let code = serde_json::from_slice::<serde_json::Value>(&body)
            .ok()
            .and_then(|v| v["errors"][0]["code"].as_str().map(str::to_owned));
        (status, code)
    }

    /// Asserts the repository serves `data` under its digest, verified.
    async fn assert_blob(&self, repo: &str, data: &[u8]) {
        let d = Digest::sha256(data);
        let name = Name::parse(repo).unwrap();
        let mut r = self
            .client
            .get_blob(&self.registry(), &name, &d, data.len() as u64)
            .await
            .unwrap_or_else(|e| panic!("{repo}: blob {d}: {e}"));
        let mut got = Vec::new();
        r.read_to_end(&mut got)
            .await
            .unwrap_or_else(|e| panic!("{repo}: blob {d} does not verify: {e}"));
        assert_eq!(got, data);
    }

    async fn assert_blob_gone(&self, repo: &str, data: &[u8]) {
        let d = Digest::sha256(data);
        let (status, code) = self
            .status(reqwest::Method::GET, &format!("/v2/{repo}/blobs/{d}"))
            .await;
        assert_eq!(
            (status, code.as_deref()),
            (404, Some("BLOB_UNKNOWN")),
            "{repo} {d}"
        );
        assert!(
            self.store
                .stat(
                    &Key::new(format!(
                        "blobs/sha256/{}/{}/data",
                        &d.encoded()[..2],
                        d.encoded()
                    ))
                    .unwrap()
                )
                .await
                .is_err_and(|e| e.is_not_found()),
            "the bytes of {d} are still stored"
        );
    }

    /// Asserts `reference` resolves to `img`, and every blob of it is served.
    async fn assert_image(&self, repo: &str, reference: &str, img: &Image) {
        let (desc, bytes) = self
            .client
            .get_manifest(&self.reference(repo, reference))
            .await
            .unwrap_or_else(|e| panic!("{repo}:{reference}: {e}"));
        assert_eq!(desc.digest, img.digest(), "{repo}:{reference}");
        assert_eq!(bytes, img.manifest);
        for b in img.blobs() {
            self.assert_blob(repo, b).await;
        }
    }

    async fn assert_manifest_gone(&self, repo: &str, d: &Digest) {
        let (status, code) = self
            .status(reqwest::Method::GET, &format!("/v2/{repo}/manifests/{d}"))
            .await;
        assert_eq!(
            (status, code.as_deref()),
            (404, Some("MANIFEST_UNKNOWN")),
            "{repo}@{d}"
        );
    }

    async fn keys(&self) -> Vec<Key> {
        let mut all = self.store.list(&Key::new("blobs").unwrap()).await.unwrap();
        all.extend(
            self.store
                .list(&Key::new("repositories").unwrap())
                .await
                .unwrap(),
        );
        all
    }

    async fn gc(&self, grace: Duration, delete_untagged: bool, dry_run: bool) -> GcReport {
        let opts = GcOptions {
            grace,
            delete_untagged,
            dry_run,
            ..GcOptions::default()
        };
        self.state.collect_garbage(&opts).await.unwrap()
    }
}

/// Store modification times may have one-second resolution (S3 `Last-Modified`); waiting this
/// long makes everything written so far older than a zero grace window.
async fn age_past_zero_grace() {
    tokio::time::sleep(Duration::from_millis(2100)).await;
}

fn bytes(tag: &str, n: usize) -> Vec<u8> {
    let mut v = tag.as_bytes().to_vec();
    v.resize(n.max(tag.len()), b'.');
    v
}

fn deleted(report: &GcReport, kind: ObjectKind) -> BTreeSet<(Option<String>, Digest)> {
    report
        .deleted
        .iter()
        .filter(|d| d.kind == kind)
        .map(|d| (d.repository.clone(), d.digest.clone()))
        .collect()
}

async fn keeps_what_is_reachable(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) {
    let s = serve(store).await;
    let shared = bytes("shared layer", 3000);
    // Repository a: an image tagged v1, with a signature referring to it (untagged).
    let img1 = Image::new(
        bytes("config 1", 40),
        vec![shared.clone(), bytes("unique 1", 2000)],
        None,
    );
    s.push_image("gc/a", "v1", &img1).await.unwrap();
    let sig = Image::new(
        bytes("sig config", 10),
        vec![bytes("signature", 500)],
        Some(&img1.manifest),
    );
    s.push_image("gc/a", &sig.digest().to_string(), &sig)
        .await
        .unwrap();
    // Repository b: the shared layer again, and an index whose child is untagged.
    let img2 = Image::new(
        bytes("config 2", 40),
        vec![shared.clone(), bytes("unique 2", 2100)],
        None,
    );
    s.push_image("gc/b", "v1", &img2).await.unwrap();
    let child = Image::new(bytes("config 3", 40), vec![bytes("unique 3", 1500)], None);
    s.push_image("gc/b", &child.digest().to_string(), &child)
        .await
        .unwrap();
    let index = Bytes::from(
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": INDEX,
            "manifests": [desc(MANIFEST, &child.manifest)],
        }))
        .unwrap(),
    );
    s.push_manifest("gc/b", "multi", INDEX, index.clone())
        .await
        .unwrap();

    // Garbage: an untagged image (tag deleted) with its own signature, a blob never used, and
    // a manifest deleted by digest.
    let old = Image::new(
        bytes("config 0", 40),
        vec![shared.clone(), bytes("unique 0", 1800)],
        None,
    );
    s.push_image("gc/a", "old", &old).await.unwrap();
    let old_sig = Image::new(
        bytes("old sig config", 10),
        vec![bytes("old signature", 400)],
        Some(&old.manifest),
    );
    s.push_image("gc/a", &old_sig.digest().to_string(), &old_sig)
        .await
        .unwrap();
    assert_eq!(
        s.status(reqwest::Method::DELETE, "/v2/gc/a/manifests/old")
            .await
            .0,
        202
    );
    let orphan = bytes("orphan blob", 777);
    s.push_blob("gc/a", &orphan).await.unwrap();
    let dropped = Image::new(bytes("config 4", 40), vec![bytes("unique 4", 900)], None);
    s.push_image("gc/b", "dropped", &dropped).await.unwrap();
    let path = format!("/v2/gc/b/manifests/{}", dropped.digest());
    assert_eq!(s.status(reqwest::Method::DELETE, &path).await.0, 202);
    s.assert_manifest_gone("gc/b", &dropped.digest()).await;

    // Within the grace window nothing goes.
    let r = s.gc(Duration::from_secs(3600), true, false).await;
    assert!(r.deleted.is_empty(), "{:?}", r.deleted);
    assert!(r.kept_young > 0);

    age_past_zero_grace().await;
    // A dry run reports and changes nothing.
    let before = s.keys().await;
    let dry = s.gc(Duration::ZERO, true, true).await;
    assert_eq!(s.keys().await, before, "a dry run changed the store");
    assert!(dry.dry_run);
    let would_blobs = deleted(&dry, ObjectKind::Blob);
    assert!(would_blobs.contains(&(None, Digest::sha256(&orphan))));
    assert!(would_blobs.contains(&(None, dropped.digest())));

    // Untagged manifests kept: the orphan blob and the deleted manifest's content go.
    let r = s.gc(Duration::ZERO, false, false).await;
    let blobs = deleted(&r, ObjectKind::Blob);
    let expect: BTreeSet<_> = [
        Digest::sha256(&orphan),
        dropped.digest(),
        Digest::sha256(&dropped.config),
        Digest::sha256(&dropped.layers[0]),
    ]
    .into_iter()
    .map(|d| (None, d))
    .collect();
    assert_eq!(blobs, expect);
    assert!(
        deleted(&r, ObjectKind::BlobLink).contains(&(Some("gc/a".into()), Digest::sha256(&orphan)))
    );
    assert!(deleted(&r, ObjectKind::ManifestLink).is_empty());
    assert_eq!(
        r.deleted_bytes,
        777 + dropped.manifest.len() as u64 + 40 + 900
    );
    s.assert_blob_gone("gc/a", &orphan).await;
    s.assert_blob_gone("gc/b", &dropped.layers[0]).await;
    s.assert_manifest_gone("gc/b", &dropped.digest()).await;
    // The untagged image is still there by digest.
    s.assert_image("gc/a", &old.digest().to_string(), &old)
        .await;

    // Untagged manifests collected: the old image, its signature and their own blobs go; the
    // shared layer, the signature of the tagged image and the index child stay.
    let r = s.gc(Duration::ZERO, true, false).await;
    let links = deleted(&r, ObjectKind::ManifestLink);
    let a = Some("gc/a".to_owned());
    assert_eq!(
        links,
        BTreeSet::from([(a.clone(), old.digest()), (a.clone(), old_sig.digest())])
    );
    for img in [&old, &old_sig] {
        s.assert_manifest_gone("gc/a", &img.digest()).await;
        for b in img.blobs().filter(|b| **b != shared) {
            s.assert_blob_gone("gc/a", b).await;
        }
    }
    s.assert_image("gc/a", "v1", &img1).await;
    s.assert_image("gc/a", &sig.digest().to_string(), &sig)
        .await;
    s.assert_image("gc/b", "v1", &img2).await;
    s.assert_image("gc/b", &child.digest().to_string(), &child)
        .await;
    let (d, got) = s
        .client
        .get_manifest(&s.reference("gc/b", "multi"))
        .await
        .unwrap();
    assert_eq!((d.digest, got), (Digest::sha256(&index), index));
    let referrers: serde_json::Value = reqwest::get(format!(
        "http://{}/v2/gc/a/referrers/{}",
        s.addr,
        img1.digest()
    ))
    .await
    .unwrap()
    .bytes()
    .await
    .map(|b| serde_json::from_slice(&b).unwrap())
    .unwrap();
    assert_eq!(
        referrers["manifests"][0]["digest"],
        sig.digest().to_string()
    );
    let referrers_of_old: serde_json::Value = reqwest::get(format!(
        "http://{}/v2/gc/a/referrers/{}",
        s.addr,
        old.digest()
    ))
    .await
    .unwrap()
    .bytes()
    .await
    .map(|b| serde_json::from_slice(&b).unwrap())
    .unwrap();
    assert_eq!(referrers_of_old["manifests"], serde_json::json!([]));

    // Nothing is left to collect, and the metrics saw every run.
    let r = s.gc(Duration::ZERO, true, false).await;
    assert!(r.deleted.is_empty(), "{:?}", r.deleted);
    let metrics = s.state.metrics().render();
    assert!(
        metrics.contains("registry_gc_runs_total{result=\"ok\"} 5"),
        "{metrics}"
    );
    assert!(
        metrics.contains("registry_gc_deleted_objects_total{kind=\"blob\"} 10"),
        "{metrics}"
    );
}

/// What a pusher got acknowledged.
struct Acked {
    repo: String,
    tag: String,
    image: Image,
}

/// `clients` pushers push for a while (each round: a kept tag, a moving tag, an abandoned
/// blob) while collections with a small grace window run back to back and delete the garbage
/// that piles up. Afterwards every acknowledged tag resolves and every blob verifies.
async fn loses_nothing_under_concurrent_pushes(
    store: (Arc<dyn Store>, Option<tempfile::TempDir>),
    clients: usize,
) {
    let s = Arc::new(serve(store).await);
    let grace = registry::gc::MIN_SAFE_GRACE;
    let deleted_blobs = Arc::new(AtomicU64::new(0));
    let held = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));

    let collector = {
        let (s, deleted_blobs, stop, held) =
            (s.clone(), deleted_blobs.clone(), stop.clone(), held.clone());
        tokio::spawn(async move {
            let mut runs = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let r = s.gc(grace, true, false).await;
                deleted_blobs.fetch_add(r.deleted_blobs, Ordering::SeqCst);
                held.fetch_add(r.kept_held, Ordering::SeqCst);
                runs += 1;
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            runs
        })
    };

    let started = Instant::now();
    let retries = Arc::new(AtomicU64::new(0));
    let mut pushers = Vec::new();
    for i in 0..clients {
        let (s, deleted_blobs, retries) = (s.clone(), deleted_blobs.clone(), retries.clone());
        pushers.push(tokio::spawn(async move {
            let repo = format!("load/r{}", i % 10);
            let shared = bytes("layer shared by every pusher", 4096);
            let mut acked = Vec::new();
            let mut round = 0;
            // Push until the collector has deleted garbage while pushes ran, at least 2 grace
            // windows (so garbage ages into collection) and at most a minute.
            while (started.elapsed() < grace * 2 || deleted_blobs.load(Ordering::SeqCst) == 0)
                && started.elapsed() < Duration::from_secs(60)
            {
                let unique = bytes(&format!("layer {i}/{round}"), 1000 + 37 * round);
                let img = Image::new(
                    bytes(&format!("config {i}/{round}"), 60),
                    vec![shared.clone(), unique],
                    None,
                );
                let tag = if round % 3 == 0 {
                    format!("p{i}-keep{round}")
                } else {
                    format!("p{i}-latest")
                };
                // A push that lost a race with the collector fails with an error and is
                // retried, like a client would; only acknowledged pushes are recorded.
                let mut tries = 0;
                loop {
                    match s.push_image(&repo, &tag, &img).await {
                        Ok(()) => break,
                        // The two ways a push loses a race: a blob it uploaded more than the
                        // grace window earlier was collected (MANIFEST_BLOB_UNKNOWN), or a
                        // collector held the digest too long (TOOMANYREQUESTS).
                        Err(e)
                            if tries < 20
                                && (e.contains("MANIFEST_BLOB_UNKNOWN")
                                    || e.contains("TOOMANYREQUESTS")) =>
                        {
                            tries += 1;
                            retries.fetch_add(1, Ordering::SeqCst);
                            eprintln!("pusher {i} round {round}: retrying after: {e}");
                        }
                        Err(e) => panic!("pusher {i} round {round}: {e}"),
                    }
                }
                // Garbage: a blob nobody will reference.
                s.push_blob(&repo, &bytes(&format!("abandoned {i}/{round}"), 300))
                    .await
                    .unwrap();
                acked.push(Acked {
                    repo: repo.clone(),
                    tag,
                    image: img,
                });
                round += 1;
            }
            acked
        }));
    }
    let mut acked = Vec::new();
    for p in pushers {
        acked.extend(p.await.unwrap());
    }
    stop.store(true, Ordering::SeqCst);
    let runs = collector.await.unwrap();
    // One more collection after the pushes, then check: the last push to each tag wins.
    s.gc(grace, true, false).await;
    let mut last: BTreeMap<(String, String), Acked> = BTreeMap::new();
    let pushes = acked.len();
    for a in acked {
        last.insert((a.repo.clone(), a.tag.clone()), a);
    }
    for a in last.values() {
        s.assert_image(&a.repo, &a.tag, &a.image).await;
    }
    let deleted = deleted_blobs.load(Ordering::SeqCst);
    eprintln!(
        "{} store: {pushes} acknowledged pushes by {clients} pushers in {:?}, {runs} collections \
         (grace {grace:?}) deleted {deleted} blobs meanwhile and left {} digests a push held, {} push \
         retries; {} tags verified",
        s.store.name(),
        started.elapsed(),
        held.load(Ordering::SeqCst),
        retries.load(Ordering::SeqCst),
        last.len()
    );
    assert!(
        deleted > 0,
        "the collector deleted nothing while pushes ran"
    );
    assert!(runs >= 2);
}

fn blob_key(d: &Digest, part: &str) -> Key {
    Key::new(format!(
        "blobs/sha256/{}/{}/{part}",
        &d.encoded()[..2],
        d.encoded()
    ))
    .unwrap()
}

/// Writes the lease a collector of run `run` leaves when killed: renewed just now, with a time
/// to live of `ttl_secs`.
async fn dead_lease(store: &dyn Store, run: &str, ttl_secs: u64) {
    let body = serde_json::json!({
        "run": run, "renewal": 7, "pid": 4242, "host": "ghost", "started": 1_700_000_000u64,
        "ttl_secs": ttl_secs,
    });
    store
        .put(
            &layout::gc_lock(),
            Bytes::from(body.to_string()),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
}

/// Until the lease written now is stale: its age in whole seconds must exceed `ttl_secs`.
async fn until_stale(ttl_secs: u64) {
    tokio::time::sleep(Duration::from_millis((ttl_secs + 1) * 1000 + 200)).await;
}

/// A collector killed after taking its lease (or while marking) leaves only the lease: pushes
/// go on, the next run is refused while the lease is live and completes once it is stale.
async fn dead_collector_before_sweep(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) {
    let s = serve(store).await;
    let img = Image::new(bytes("dead config 0", 30), vec![bytes("dead 0", 900)], None);
    // A 4 s lease: the push below must finish while it is live, also on a loaded CI machine
    // (with 1 s, a slow S3 push let it go stale and the refused run went ahead).
    dead_lease(s.store.as_ref(), "killed-while-marking", 4).await;
    let started = Instant::now();
    s.push_image("gc/dead0", "v1", &img).await.unwrap();
    let gc = |s: &Served| {
        let opts = GcOptions {
            grace: Duration::ZERO,
            ..GcOptions::default()
        };
        let state = s.state.clone();
        async move { state.collect_garbage(&opts).await }
    };
    let refused = gc(&s).await.unwrap_err().to_string();
    assert!(
        refused.contains("another garbage collection is running"),
        "{refused}"
    );
    let held = gc::read_lease(s.store.as_ref()).await.unwrap().unwrap();
    assert_eq!(held.run.as_deref(), Some("killed-while-marking"));
    assert!(!held.is_stale());
    assert!(
        gc::break_lease(s.store.as_ref(), false)
            .await
            .unwrap_err()
            .to_string()
            .contains("is live")
    );
    until_stale(4).await;
    let report = gc(&s).await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(report.deleted_blobs, 0);
    assert!(gc::read_lease(s.store.as_ref()).await.unwrap().is_none());
    s.assert_image("gc/dead0", "v1", &img).await;
}

/// A collector killed mid-sweep leaves its lease and tombstones on three unreferenced blobs, one
/// of which it had already deleted. While its lease is live a manifest PUT using them waits;
/// once it is stale the PUT goes on: the deleted blob is unknown, uploaded again, and the
/// image is whole. The next run completes and removes the released tombstones.
async fn dead_collector_mid_sweep(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) {
    let s = serve(store).await;
    let img = Image::new(
        bytes("dead config 1", 30),
        vec![bytes("dead kept", 1000), bytes("dead gone", 1100)],
        None,
    );
    let name = Name::parse("gc/dead1").unwrap();
    for b in img.blobs() {
        s.push_blob("gc/dead1", b).await.unwrap();
    }
    let gone = Digest::sha256(&img.layers[1]);
    // The dead run: lease, tombstones, then the deletions it got through.
    // 4 s: long enough that the live-lease check below (after the tombstone writes and a 1 s
    // wait) still sees it live on a loaded CI machine.
    dead_lease(s.store.as_ref(), "killed-while-sweeping", 4).await;
    let tombstone = Bytes::from_static(br#"{"run":"killed-while-sweeping"}"#);
    for b in img.blobs() {
        s.store
            .put(
                &layout::blob_tombstone(&Digest::sha256(b)),
                tombstone.clone(),
                PutMode::Overwrite,
            )
            .await
            .unwrap();
    }
    s.store
        .delete(&layout::blob_link(&name, &gone))
        .await
        .unwrap();
    s.store.delete(&layout::blob_data(&gone)).await.unwrap();

    // Live lease: the PUT waits (it neither fails nor succeeds).
    let started = Instant::now();
    let put = tokio::spawn({
        let (client, reference, bytes) = (
            s.client.clone(),
            s.reference("gc/dead1", "v1"),
            img.manifest.clone(),
        );
        async move {
            client
                .push_manifest(&reference, MANIFEST, bytes)
                .await
                .map(|_| ())
                .map_err(|e| e.to_string())
        }
    });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        !put.is_finished(),
        "a PUT went past a live lease's tombstones"
    );
    // Stale lease: the PUT goes on within the time to live, and finds the deleted blob missing.
    let err = tokio::time::timeout(Duration::from_secs(10), put)
        .await
        .expect("the PUT still waits after the lease turned stale")
        .unwrap()
        .unwrap_err();
    assert!(err.contains("MANIFEST_BLOB_UNKNOWN"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(10));
    for b in img.blobs() {
        let t = s
            .store
            .get(&layout::blob_tombstone(&Digest::sha256(b)), 1 << 10)
            .await;
        // Released (or never reached: the PUT stops at the first missing blob).
        if let Ok(t) = t {
            let v: serde_json::Value = serde_json::from_slice(&t.bytes).unwrap();
            assert!(
                v.get("released").is_some() || v["run"] == "killed-while-sweeping",
                "{v}"
            );
        }
    }
    // The client uploads what is missing and pushes again.
    s.push_image("gc/dead1", "v1", &img).await.unwrap();
    s.assert_image("gc/dead1", "v1", &img).await;
    assert!(started.elapsed() < Duration::from_secs(15));

    // The next run takes over the stale lease and removes every tombstone left.
    let opts = GcOptions {
        grace: Duration::ZERO,
        ..GcOptions::default()
    };
    let report = s.state.collect_garbage(&opts).await.unwrap();
    assert_eq!(report.deleted_blobs, 0);
    for b in img.blobs() {
        assert_no_tombstone(s.store.as_ref(), &Digest::sha256(b)).await;
    }
    assert!(gc::read_lease(s.store.as_ref()).await.unwrap().is_none());
    s.assert_image("gc/dead1", "v1", &img).await;
}

/// A live lease holds pushes on its tombstones until an operator breaks it (forced); a
/// tombstone with no lease at all is released at once.
async fn broken_and_missing_leases(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) {
    let s = serve(store).await;
    let img = Image::new(bytes("dead config 2", 30), vec![bytes("dead 2", 800)], None);
    for b in img.blobs() {
        s.push_blob("gc/dead2", b).await.unwrap();
    }
    let layer = Digest::sha256(&img.layers[0]);
    let config = Digest::sha256(&img.config);
    // No lease at all: released at once.
    s.store
        .put(
            &layout::blob_tombstone(&config),
            Bytes::from_static(br#"{"run":"long-gone"}"#),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    // A live lease of an hour, with its tombstone on the layer.
    dead_lease(s.store.as_ref(), "alive", 3600).await;
    s.store
        .put(
            &layout::blob_tombstone(&layer),
            Bytes::from_static(br#"{"run":"alive"}"#),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let started = Instant::now();
    let put = tokio::spawn({
        let (client, reference, bytes) = (
            s.client.clone(),
            s.reference("gc/dead2", "v1"),
            img.manifest.clone(),
        );
        async move { client.push_manifest(&reference, MANIFEST, bytes).await }
    });
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert!(
        !put.is_finished(),
        "a PUT went past a live lease's tombstone"
    );
    assert!(
        gc::break_lease(s.store.as_ref(), false)
            .await
            .unwrap_err()
            .to_string()
            .contains("is live")
    );
    let broken = gc::break_lease(s.store.as_ref(), true)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(broken.run.as_deref(), Some("alive"));
    assert_eq!(broken.host.as_deref(), Some("ghost"));
    assert_eq!(broken.pid, Some(4242));
    tokio::time::timeout(Duration::from_secs(5), put)
        .await
        .expect("the PUT still waits after the lease was broken")
        .unwrap()
        .unwrap();
    assert!(started.elapsed() < Duration::from_secs(10));
    s.assert_image("gc/dead2", "v1", &img).await;
    assert!(
        gc::break_lease(s.store.as_ref(), false)
            .await
            .unwrap()
            .is_none()
    );
}

/// A digest a request held after the cutoff is kept, its tombstone removed, and the run
/// reports it under `kept_held`.
async fn held_digest_is_kept(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) {
    let s = serve(store).await;
    let blob = bytes("held blob", 700);
    let d = s.push_blob("gc/held", &blob).await.unwrap();
    tokio::time::sleep(Duration::from_millis(3100)).await;
    // What `Repos::hold` writes.
    s.store
        .put(
            &layout::blob_used(&d),
            Bytes::from_static(br#"{"at":1}"#),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let opts = GcOptions {
        grace: Duration::from_secs(1),
        ..GcOptions::default()
    };
    let report = s.state.collect_garbage(&opts).await.unwrap();
    assert_eq!(report.kept_held, 1, "{report:?}");
    assert_eq!(report.deleted_blobs, 0, "{report:?}");
    s.assert_blob("gc/held", &blob).await;
    assert_no_tombstone(s.store.as_ref(), &d).await;
}

/// The digest's record (`blobs/…/gc`) is gone, or an idle record: no collector's tombstone
/// and no request's release marker (a record naming the current epochs stays for good).
async fn assert_no_tombstone(store: &dyn Store, d: &Digest) {
    match store.get(&blob_key(d, "gc"), 1 << 16).await {
        Err(e) if e.is_not_found() => {}
        Err(e) => panic!("reading the record of {d}: {e}"),
        Ok(doc) => {
            let v: serde_json::Value = serde_json::from_slice(&doc.bytes).unwrap();
            assert!(
                v.get("phase").is_none() && v.get("released").is_none() && v.get("run").is_none(),
                "record of {d} is still a tombstone: {v}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_held_digest_is_kept() {
    held_digest_is_kept(fs_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_held_digest_is_kept() {
    held_digest_is_kept(s3_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_dead_collector_before_sweep() {
    dead_collector_before_sweep(fs_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_dead_collector_mid_sweep() {
    dead_collector_mid_sweep(fs_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_broken_and_missing_leases() {
    broken_and_missing_leases(fs_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_dead_collector_before_sweep() {
    dead_collector_before_sweep(s3_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_dead_collector_mid_sweep() {
    dead_collector_mid_sweep(s3_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_broken_and_missing_leases() {
    broken_and_missing_leases(s3_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_keeps_what_is_reachable() {
    keeps_what_is_reachable(fs_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_loses_nothing_under_concurrent_pushes() {
    loses_nothing_under_concurrent_pushes(fs_store().await, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_keeps_what_is_reachable() {
    keeps_what_is_reachable(s3_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_loses_nothing_under_concurrent_pushes() {
    // Fewer pushers than on fs: a pass over SeaweedFS grows with what 50 pushers write during
    // it (about 17 s each), and the test waits for two passes; 16 still race every phase.
    loses_nothing_under_concurrent_pushes(s3_store().await, 16).await;
}

/// A pass over more keys than one listing page (1,000): three repositories whose keys sort
/// differently in byte and directory order (`gc/p-q`, `gc/p`, `gc/p/r`), each with 350 linked
/// blobs of which a tagged manifest references 300, so `repositories/` and `blobs/` span more
/// than a page and repositories straddle page boundaries. Exactly the 50 unreferenced blobs
/// of each repository go (links and bytes); every referenced one stays and pulls back.
async fn collects_across_listing_pages(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) {
    let s = serve(store).await;
    let repos = ["gc/p", "gc/p-q", "gc/p/r"];
    let mut kept = Vec::new();
    let mut garbage = BTreeSet::new();
    for repo in repos {
        let name = Name::parse(repo).unwrap();
        let config = bytes(&format!("config {repo}"), 30);
        s.push_blob(repo, &config).await.unwrap();
        let blobs: Vec<Vec<u8>> = (0..350)
            .map(|i| bytes(&format!("{repo} blob {i}"), 40))
            .collect();
        // Written through the store (as the growth bench does): bytes, then the link.
        let writes = blobs.iter().map(|b| {
            let (store, name) = (&s.store, &name);
            async move {
                let d = Digest::sha256(b);
                store
                    .put(
                        &layout::blob_data(&d),
                        Bytes::from(b.clone()),
                        PutMode::Create,
                    )
                    .await
                    .unwrap();
                let link = serde_json::json!({ "size": b.len() }).to_string();
                store
                    .put(
                        &layout::blob_link(name, &d),
                        Bytes::from(link),
                        PutMode::Overwrite,
                    )
                    .await
                    .unwrap();
            }
        });
        futures_util::stream::iter(writes)
            .buffer_unordered(32)
            .collect::<Vec<()>>()
            .await;
        let img = Image::new(config, blobs[..300].to_vec(), None);
        s.push_manifest(repo, "v1", MANIFEST, img.manifest.clone())
            .await
            .unwrap();
        for b in &blobs[300..] {
            garbage.insert((Some(repo.to_owned()), Digest::sha256(b)));
        }
        kept.push((repo, img));
    }
    for prefix in ["repositories", "blobs"] {
        let n = s
            .store
            .list(&Key::new(prefix).unwrap())
            .await
            .unwrap()
            .len();
        assert!(n > 1000, "{prefix}/ has {n} keys, less than a listing page");
    }
    age_past_zero_grace().await;
    let report = s.gc(Duration::ZERO, false, false).await;
    assert_eq!(report.repositories, 3);
    assert_eq!(deleted(&report, ObjectKind::BlobLink), garbage);
    let bytes_gone: BTreeSet<Digest> = garbage.iter().map(|(_, d)| d.clone()).collect();
    assert_eq!(
        deleted(&report, ObjectKind::Blob)
            .into_iter()
            .map(|(_, d)| d)
            .collect::<BTreeSet<_>>(),
        bytes_gone
    );
    assert_eq!(report.deleted_manifest_links, 0);
    for (repo, img) in &kept {
        s.assert_image(repo, "v1", img).await;
    }
    // A second pass finds nothing more.
    let again = s.gc(Duration::ZERO, false, false).await;
    assert!(again.deleted.is_empty(), "{:?}", again.deleted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_collects_across_listing_pages() {
    collects_across_listing_pages(fs_store().await).await;
}

/// Where [`Gated`] holds a collector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Gate {
    /// Right after it wrote a tombstone.
    Tombstoned,
    /// Right after it read a digest's hold record: it has decided, and deletes next.
    Decided,
    /// Right after it committed to deleting a digest (its tombstone says "deleting").
    Committed,
    /// Inside the removal of a manifest link, after it read the link and before it edits the
    /// repository's tags (a pause between the store requests of one deletion).
    Unlinking,
    /// Never.
    Open,
}

/// The real store under a collector (or a registry), with a gate that holds the collector at
/// one point of its sweep ([`Gate`]) until the test opens it, as a SIGSTOP there would. It also
/// counts reads of tombstones, to see how often a waiting request looks.
#[derive(Debug)]
struct Gated {
    inner: Arc<dyn Store>,
    at: Gate,
    held: AtomicU64,
    tombstone_reads: AtomicU64,
    committed: std::sync::atomic::AtomicBool,
    open: tokio::sync::watch::Sender<bool>,
    /// Deletes answered at once but applied to the store only this much later, twice (as a
    /// slow gateway and an SDK retry of a request still on its way would).
    late: Option<Duration>,
    in_flight: Arc<AtomicU64>,
}

impl Gated {
    fn new(inner: Arc<dyn Store>, at: Gate) -> Arc<Gated> {
        Arc::new(Gated {
            inner,
            at,
            held: AtomicU64::new(0),
            tombstone_reads: AtomicU64::new(0),
            committed: std::sync::atomic::AtomicBool::new(false),
            open: tokio::sync::watch::Sender::new(at == Gate::Open),
            late: None,
            in_flight: Arc::new(AtomicU64::new(0)),
        })
    }

    /// A store whose deletes reach `inner` only `delay` after the collector was told they were
    /// done, and once more a second after that.
    fn late(inner: Arc<dyn Store>, delay: Duration) -> Arc<Gated> {
        let mut g = Arc::try_unwrap(Gated::new(inner, Gate::Open)).unwrap();
        g.late = Some(delay);
        Arc::new(g)
    }

    /// Waits until every late delete reached the store.
    async fn until_delivered(&self) {
        let started = Instant::now();
        while self.in_flight.load(Ordering::SeqCst) > 0 {
            assert!(started.elapsed() < Duration::from_secs(120));
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Holds the caller until the gate opens.
    async fn pass(&self) {
        self.held.fetch_add(1, Ordering::SeqCst);
        let mut open = self.open.subscribe();
        let _ = open.wait_for(|o| *o).await;
    }

    fn open(&self) {
        self.open.send_replace(true);
    }

    /// Waits until the collector is held at the gate (and lets the digests swept beside the
    /// first one reach it too).
    async fn until_held(&self) {
        let started = Instant::now();
        while self.held.load(Ordering::SeqCst) == 0 {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the collector never reached the gate"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

fn is_tombstone(key: &Key) -> bool {
    key.as_str().starts_with("blobs/") && key.as_str().ends_with("/gc")
}

impl Store for Gated {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn min_chunk_length(&self) -> Option<u64> {
        self.inner.min_chunk_length()
    }
    fn staging_readable(&self) -> bool {
        self.inner.staging_readable()
    }
    fn get<'a>(
        &'a self,
        key: &'a Key,
        limit: u64,
    ) -> registry::storage::BoxFuture<'a, registry::storage::StoreResult<registry::storage::Document>>
    {
        if is_tombstone(key) {
            self.tombstone_reads.fetch_add(1, Ordering::SeqCst);
        }
        Box::pin(async move {
            let r = self.inner.get(key, limit).await;
            if self.at == Gate::Unlinking
                && self.committed.load(Ordering::SeqCst)
                && key.as_str().contains("/_manifests/")
            {
                self.pass().await;
            }
            r
        })
    }
    fn get_if_changed<'a>(
        &'a self,
        key: &'a Key,
        limit: u64,
        known: &'a registry::storage::Etag,
    ) -> registry::storage::BoxFuture<
        'a,
        registry::storage::StoreResult<Option<registry::storage::Document>>,
    > {
        self.inner.get_if_changed(key, limit, known)
    }
    fn put<'a>(
        &'a self,
        key: &'a Key,
        bytes: Bytes,
        mode: PutMode,
    ) -> registry::storage::BoxFuture<'a, registry::storage::StoreResult<registry::storage::Etag>>
    {
        Box::pin(async move {
            // The collector's first tombstone write (not a release, not a commit).
            let collector = self.at == Gate::Tombstoned
                && is_tombstone(key)
                && !matches!(mode, PutMode::Replace(_))
                && !bytes.windows(8).any(|w| w == b"released");
            let commit = is_tombstone(key) && bytes.windows(8).any(|w| w == b"deleting");
            let r = self.inner.put(key, bytes, mode).await;
            if commit && r.is_ok() {
                self.committed.store(true, Ordering::SeqCst);
            }
            let commit = commit && self.at == Gate::Committed;
            if (collector || commit) && r.is_ok() {
                self.pass().await;
            }
            r
        })
    }
    fn read<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
    ) -> registry::storage::BoxFuture<
        'a,
        registry::storage::StoreResult<(
            registry::storage::ObjectMeta,
            registry::storage::BoxReader,
        )>,
    > {
        self.inner.read(key, offset)
    }
    fn read_chunks<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
        len: u64,
    ) -> registry::storage::BoxFuture<
        'a,
        registry::storage::StoreResult<(
            registry::storage::ObjectMeta,
            registry::storage::ByteStream,
        )>,
    > {
        self.inner.read_chunks(key, offset, len)
    }
    fn writer<'a>(
        &'a self,
        staging: &'a Key,
        resume_at: Option<u64>,
    ) -> registry::storage::BoxFuture<
        'a,
        registry::storage::StoreResult<Box<dyn registry::storage::StoreWriter>>,
    > {
        self.inner.writer(staging, resume_at)
    }
    fn stat<'a>(
        &'a self,
        key: &'a Key,
    ) -> registry::storage::BoxFuture<
        'a,
        registry::storage::StoreResult<registry::storage::ObjectMeta>,
    > {
        Box::pin(async move {
            let r = self.inner.stat(key).await;
            if self.at == Gate::Decided && key.as_str().ends_with("/used") {
                self.pass().await;
            }
            r
        })
    }
    fn list<'a>(
        &'a self,
        prefix: &'a Key,
    ) -> registry::storage::BoxFuture<'a, registry::storage::StoreResult<Vec<Key>>> {
        self.inner.list(prefix)
    }
    fn list_page<'a>(
        &'a self,
        prefix: &'a Key,
        start_after: Option<&'a Key>,
        limit: usize,
    ) -> registry::storage::BoxFuture<'a, registry::storage::StoreResult<Vec<Key>>> {
        self.inner.list_page(prefix, start_after, limit)
    }
    fn delete<'a>(
        &'a self,
        key: &'a Key,
    ) -> registry::storage::BoxFuture<'a, registry::storage::StoreResult<()>> {
        if let Some(delay) = self.late {
            let (inner, key, in_flight) = (self.inner.clone(), key.clone(), self.in_flight.clone());
            in_flight.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                for wait in [delay, Duration::from_secs(1)] {
                    tokio::time::sleep(wait).await;
                    let _ = inner.delete(&key).await;
                }
                in_flight.fetch_sub(1, Ordering::SeqCst);
            });
            return Box::pin(async { Ok(()) });
        }
        self.inner.delete(key)
    }
}

/// Issue 53: every DELETE of a collector reaches the store 3 s after the collector was told it
/// was done, and again a second later. Meanwhile the client pushes an image using those blobs:
/// its HEADs still find them (the DELETEs have not arrived), so it uploads nothing, and the
/// manifest PUT is acknowledged. Once every DELETE has arrived the image is still whole: the
/// collector's commit had moved the digests to new epochs, the PUT wrote its links and a copy
/// of the bytes there, and the late DELETEs only removed the old keys. Before epochs the
/// blobs answered 404 once the DELETEs arrived.
async fn late_deletes_lose_nothing(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) {
    let s = serve(store).await;
    let img = Image::new(
        bytes("late config", 30),
        vec![bytes("late layer a", 900), bytes("late layer b", 1000)],
        None,
    );
    for b in img.blobs() {
        s.push_blob("gc/late", b).await.unwrap();
    }
    age_past_zero_grace().await;
    let late = Gated::late(s.store.clone(), Duration::from_secs(3));
    let opts = GcOptions {
        grace: Duration::ZERO,
        lease_ttl: Duration::from_secs(3),
        ..GcOptions::default()
    };
    let report = gc::collect(late.clone(), &opts).await.unwrap();
    assert_eq!(report.deleted_blobs, 3, "{report:?}");
    s.push_image("gc/late", "v1", &img).await.unwrap();
    late.until_delivered().await;
    s.assert_image("gc/late", "v1", &img).await;
    // The next run keeps the image and removes the old keys the late DELETEs did not.
    let next = s.gc(Duration::ZERO, false, false).await;
    assert_eq!(next.deleted_blobs, 0, "{next:?}");
    s.assert_image("gc/late", "v1", &img).await;
    // Pushed once more after a second collection (the epochs move again): still whole.
    s.push_image("gc/late", "v2", &img).await.unwrap();
    s.assert_image("gc/late", "v2", &img).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_late_deletes_lose_nothing() {
    late_deletes_lose_nothing(fs_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_late_deletes_lose_nothing() {
    late_deletes_lose_nothing(s3_store().await).await;
}

/// An untagged image whose every digest is garbage to a run with `--delete-untagged` and a zero
/// grace window.
/// A collection with zero grace and `--delete-untagged` through `gated`, on a task of its own;
/// `lease_ttl` `None`: the default.
fn spawn_untagged_gc(
    gated: &Arc<Gated>,
    lease_ttl: Option<Duration>,
) -> tokio::task::JoinHandle<Result<GcReport, gc::GcError>> {
    let store: Arc<dyn Store> = gated.clone();
    tokio::spawn(async move {
        let mut opts = GcOptions {
            grace: Duration::ZERO,
            delete_untagged: true,
            ..GcOptions::default()
        };
        if let Some(ttl) = lease_ttl {
            opts.lease_ttl = ttl;
        }
        gc::collect(store, &opts).await
    })
}

async fn untagged_garbage(s: &Served, repo: &str, tag: &str) -> Image {
    let img = Image::new(
        bytes(&format!("{tag} config"), 30),
        vec![
            bytes(&format!("{tag} layer a"), 900),
            bytes(&format!("{tag} layer b"), 1000),
        ],
        None,
    );
    s.push_image(repo, &img.digest().to_string(), &img)
        .await
        .unwrap();
    age_past_zero_grace().await;
    img
}

/// Issue 39: a collector held between tombstoning and deleting (as by SIGSTOP) while an
/// operator breaks its lease (forced) and the tombstoned digests are pushed again under a new
/// tag. When it goes on it must delete none of them: every re-pushed manifest and layer stays
/// readable, and the next run completes.
async fn forced_break_mid_sweep(store: (Arc<dyn Store>, Option<tempfile::TempDir>), at: Gate) {
    let s = serve(store).await;
    let img = untagged_garbage(&s, "gc/broken", "broken").await;
    let gated = Gated::new(s.store.clone(), at);
    // Not renewed (so not noticed) before the collector goes on.
    let run = spawn_untagged_gc(&gated, Some(Duration::from_secs(40)));
    gated.until_held().await;
    gc::break_lease(s.store.as_ref(), true)
        .await
        .unwrap()
        .expect("no lease to break");
    s.push_image("gc/broken", "v2", &img).await.unwrap();
    gated.open();
    // It may stop (its lease is gone) or finish; either way it deleted nothing pushed again.
    let outcome = run.await.unwrap();
    if let Ok(report) = &outcome {
        assert!(report.deleted.is_empty(), "{:?}", report.deleted);
    }
    s.assert_image("gc/broken", "v2", &img).await;
    let next = s.gc(Duration::ZERO, true, false).await;
    assert!(next.deleted.is_empty(), "{:?}", next.deleted);
    s.assert_image("gc/broken", "v2", &img).await;
}

/// A collector held right after committing to delete, or inside the removal of a manifest link
/// (as by SIGSTOP), while its lease is broken by force: a push of its digests waits for the committed tombstones until they are as old as
/// the lease's time to live, then goes on (201); the collector, going on later, deletes nothing
/// more (its window after the commit has passed, and its lease is gone), and every re-pushed
/// manifest and layer stays readable.
async fn forced_break_after_commit(store: (Arc<dyn Store>, Option<tempfile::TempDir>), at: Gate) {
    let s = serve(store).await;
    let img = untagged_garbage(&s, "gc/committed", "committed").await;
    let gated = Gated::new(s.store.clone(), at);
    let run = spawn_untagged_gc(&gated, Some(Duration::from_secs(3)));
    gated.until_held().await;
    gc::break_lease(s.store.as_ref(), true)
        .await
        .unwrap()
        .expect("no lease to break");
    tokio::time::timeout(
        Duration::from_secs(20),
        s.push_image("gc/committed", "v2", &img),
    )
    .await
    .expect("a push still waits for expired committed tombstones")
    .unwrap();
    gated.open();
    // It may stop (its lease is gone) or finish deleting: what it committed to is at epochs
    // the re-push no longer uses, so neither costs the re-pushed image anything.
    if let Err(e) = run.await.unwrap() {
        let stopped = e.to_string();
        assert!(
            stopped.contains("lost its lease") || stopped.contains("after committing"),
            "{stopped}"
        );
    }
    s.assert_image("gc/committed", "v2", &img).await;
    let next = s.gc(Duration::ZERO, true, false).await;
    assert!(next.deleted.is_empty(), "{:?}", next.deleted);
    s.assert_image("gc/committed", "v2", &img).await;
}

/// Issue 39: a collector killed between tombstoning and deleting (its task dropped: the lease
/// stays, unrenewed, with its default time to live, and so do its tombstones) does not hold up
/// a push of the tombstoned digests for anything like a minute.
async fn killed_collector_blocks_no_push(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) {
    let s = serve(store).await;
    let img = untagged_garbage(&s, "gc/killed", "killed").await;
    let gated = Gated::new(s.store.clone(), Gate::Tombstoned);
    let run = spawn_untagged_gc(&gated, None);
    gated.until_held().await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    let held = gc::read_lease(s.store.as_ref()).await.unwrap().unwrap();
    assert!(!held.is_stale(), "{held:?}");
    tokio::time::timeout(
        Duration::from_secs(20),
        s.push_image("gc/killed", "v2", &img),
    )
    .await
    .expect("a push still waits for a killed collector after 20 s")
    .unwrap();
    s.assert_image("gc/killed", "v2", &img).await;
}

/// A request that meets a tombstone of a live collector waits for it, looking again with a
/// backoff rather than every few milliseconds, and goes on once the collector is done.
async fn waiting_request_backs_off(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) {
    let (inner, dir) = store;
    let gated = Gated::new(inner, Gate::Open);
    let s = serve((gated.clone(), dir)).await;
    let img = Image::new(
        bytes("wait config", 30),
        vec![bytes("wait layer", 800)],
        None,
    );
    for b in img.blobs() {
        s.push_blob("gc/wait", b).await.unwrap();
    }
    let layer = Digest::sha256(&img.layers[0]);
    dead_lease(s.store.as_ref(), "alive", 3600).await;
    s.store
        .put(
            &layout::blob_tombstone(&layer),
            Bytes::from_static(br#"{"run":"alive"}"#),
            PutMode::Overwrite,
        )
        .await
        .unwrap();
    let before = gated.tombstone_reads.load(Ordering::SeqCst);
    let put = tokio::spawn({
        let (client, reference, bytes) = (
            s.client.clone(),
            s.reference("gc/wait", "v1"),
            img.manifest.clone(),
        );
        async move { client.push_manifest(&reference, MANIFEST, bytes).await }
    });
    tokio::time::sleep(Duration::from_secs(3)).await;
    assert!(!put.is_finished(), "a PUT went past a live tombstone");
    let reads = gated.tombstone_reads.load(Ordering::SeqCst) - before;
    // The config's tombstone once, then the layer's: 20 ms polling read it about 150 times.
    assert!(reads <= 20, "{reads} tombstone reads in 3 s of waiting");
    // The collector finishes with the digest.
    s.store
        .delete(&layout::blob_tombstone(&layer))
        .await
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), put)
        .await
        .expect("the PUT still waits after the tombstone went")
        .unwrap()
        .unwrap();
    s.assert_image("gc/wait", "v1", &img).await;
    s.store.delete(&layout::gc_lock()).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_forced_break_after_deciding() {
    forced_break_mid_sweep(fs_store().await, Gate::Decided).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_forced_break_after_tombstoning() {
    forced_break_mid_sweep(fs_store().await, Gate::Tombstoned).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_forced_break_after_deciding() {
    forced_break_mid_sweep(s3_store().await, Gate::Decided).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_forced_break_after_commit() {
    forced_break_after_commit(fs_store().await, Gate::Committed).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_forced_break_while_unlinking() {
    forced_break_after_commit(fs_store().await, Gate::Unlinking).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_killed_collector_blocks_no_push() {
    killed_collector_blocks_no_push(fs_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_killed_collector_blocks_no_push() {
    killed_collector_blocks_no_push(s3_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_waiting_request_backs_off() {
    waiting_request_backs_off(fs_store().await).await;
}

/// The digests the referrers API lists for `subject` in `repo`.
async fn referrer_digests(s: &Served, repo: &str, subject: &Digest) -> Vec<String> {
    let v: serde_json::Value =
        reqwest::get(format!("http://{}/v2/{repo}/referrers/{subject}", s.addr))
            .await
            .unwrap()
            .bytes()
            .await
            .map(|b| serde_json::from_slice(&b).unwrap())
            .unwrap();
    v["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["digest"].as_str().unwrap().to_owned())
        .collect()
}

/// An untagged image and an untagged signature of it (a referrer), both old enough to collect.
async fn untagged_signed(s: &Served, repo: &str) -> (Image, Image) {
    let img = Image::new(
        bytes(&format!("{repo} signed config"), 30),
        vec![bytes(&format!("{repo} signed layer"), 900)],
        None,
    );
    let sig = Image::new(
        bytes(&format!("{repo} sig config"), 20),
        vec![bytes(&format!("{repo} sig layer"), 40)],
        Some(&img.manifest),
    );
    for i in [&img, &sig] {
        s.push_image(repo, &i.digest().to_string(), i)
            .await
            .unwrap();
    }
    assert_eq!(
        referrer_digests(s, repo, &img.digest()).await,
        [sig.digest().to_string()]
    );
    age_past_zero_grace().await;
    (img, sig)
}

/// Pushes `img` again under the tag `v1` and its signature `sig` by digest.
async fn push_signed(s: &Served, repo: &str, img: &Image, sig: &Image) {
    s.push_image(repo, "v1", img).await.unwrap();
    s.push_image(repo, &sig.digest().to_string(), sig)
        .await
        .unwrap();
}

/// `repo:v1` is `img`, `sig` is served by digest, and it is the one referrer of `img`.
async fn assert_signed(s: &Served, repo: &str, img: &Image, sig: &Image) {
    s.assert_image(repo, "v1", img).await;
    s.assert_image(repo, &sig.digest().to_string(), sig).await;
    assert_eq!(
        referrer_digests(s, repo, &img.digest()).await,
        [sig.digest().to_string()]
    );
}

/// Issue 53, manifest links: with `--delete-untagged` every DELETE of the collector (manifest
/// links included) reaches the store 3 s late, twice. Meanwhile the image is pushed again under
/// a tag and its signature by digest. Once every DELETE arrived, both are still served and the
/// signature is still listed among the image's referrers: the commit had moved the manifest
/// links to new epochs too, and the re-push wrote and stamped everything there. Before manifest
/// links had epochs, the late DELETE removed the re-pushed link (404).
async fn late_manifest_deletes_lose_nothing(store: (Arc<dyn Store>, Option<tempfile::TempDir>)) {
    let s = serve(store).await;
    let (img, sig) = untagged_signed(&s, "gc/late-m").await;
    let late = Gated::late(s.store.clone(), Duration::from_secs(3));
    let opts = GcOptions {
        grace: Duration::ZERO,
        delete_untagged: true,
        lease_ttl: Duration::from_secs(3),
        ..GcOptions::default()
    };
    let report = gc::collect(late.clone(), &opts).await.unwrap();
    assert_eq!(report.deleted_manifest_links, 2, "{report:?}");
    push_signed(&s, "gc/late-m", &img, &sig).await;
    late.until_delivered().await;
    assert_signed(&s, "gc/late-m", &img, &sig).await;
    // The next run keeps both (the image is tagged, the signature refers to it) and removes
    // only what the late DELETEs left at the old epochs.
    let next = s.gc(Duration::ZERO, true, false).await;
    assert!(next.deleted.is_empty(), "{:?}", next.deleted);
    s.assert_image("gc/late-m", "v1", &img).await;
    assert_eq!(
        referrer_digests(&s, "gc/late-m", &img.digest()).await,
        [sig.digest().to_string()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_late_manifest_deletes_lose_nothing() {
    late_manifest_deletes_lose_nothing(fs_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_late_manifest_deletes_lose_nothing() {
    late_manifest_deletes_lose_nothing(s3_store().await).await;
}

/// A collector held right after committing to delete an untagged image's manifest link and its
/// signature's (as by SIGSTOP, its lease still live): the image pushed again under a tag and the
/// signature again by digest are answered at once (no wait for the collector), and when the
/// collector goes on and finishes, what it forgets (the signature's referrer entry) and deletes
/// (the links) is only what was recorded at the epochs it committed to: both stay served, the
/// signature stays listed.
async fn collector_after_commit_forgets_only_its_epoch(
    store: (Arc<dyn Store>, Option<tempfile::TempDir>),
) {
    let s = serve(store).await;
    let (img, sig) = untagged_signed(&s, "gc/stamped").await;
    let gated = Gated::new(s.store.clone(), Gate::Committed);
    let run = spawn_untagged_gc(&gated, Some(Duration::from_secs(40)));
    gated.until_held().await;
    tokio::time::timeout(Duration::from_secs(5), async {
        push_signed(&s, "gc/stamped", &img, &sig).await;
    })
    .await
    .expect("a push waited for a collector that committed under epochs");
    gated.open();
    let report = run.await.unwrap().unwrap();
    assert!(report.deleted_manifest_links >= 1, "{report:?}");
    assert_signed(&s, "gc/stamped", &img, &sig).await;
    let next = s.gc(Duration::ZERO, true, false).await;
    assert!(next.deleted.is_empty(), "{:?}", next.deleted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_collector_after_commit_forgets_only_its_epoch() {
    collector_after_commit_forgets_only_its_epoch(fs_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_collector_after_commit_forgets_only_its_epoch() {
    collector_after_commit_forgets_only_its_epoch(s3_store().await).await;
}

/// The epoch the digest's record names for `repo`'s link to manifest `d` (`""`: none).
async fn manifest_link_epoch(store: &dyn Store, repo: &str, d: &Digest) -> String {
    let doc = store
        .get(&layout::blob_tombstone(d), 1 << 16)
        .await
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&doc.bytes).unwrap();
    v["epochs"]["manifest_links"][repo]
        .as_str()
        .unwrap_or_default()
        .to_owned()
}

/// A manifest PUT concurrent with an API DELETE of the same manifest: the PUT held the digest
/// (at epoch E1) before the DELETE moved the repository's link to E2, and its link and referrer
/// entry land after the DELETE deleted E1's key and forgot E1's entry. That pair may end
/// either way; what it leaves is a link at a dead epoch (no read finds it) and a referrer entry
/// stamped with it. The state is made here the way that race leaves it (the PUT's two writes
/// put back after the DELETE), on a signature kept through its subject: the next collection
/// (without `--delete-untagged`, so the digest is kept) removes the dead link with its entry,
/// and keeps the image.
async fn orphan_of_a_put_racing_a_delete_is_collected(
    store: (Arc<dyn Store>, Option<tempfile::TempDir>),
) {
    let s = serve(store).await;
    let repo = "gc/api-delete-race";
    let name = Name::parse(repo).unwrap();
    let img = Image::new(
        bytes("race config", 30),
        vec![bytes("race layer", 90)],
        None,
    );
    let sig = Image::new(
        bytes("race sig config", 20),
        vec![bytes("race sig layer", 40)],
        Some(&img.manifest),
    );
    let by_digest = sig.digest().to_string();
    s.push_image(repo, "v1", &img).await.unwrap();
    s.push_image(repo, &by_digest, &sig).await.unwrap();
    let delete = format!("/v2/{repo}/manifests/{by_digest}");
    // A DELETE, and a push again: the link is at the epoch the DELETE moved it to (E1).
    assert_eq!(s.status(reqwest::Method::DELETE, &delete).await.0, 202);
    s.push_image(repo, &by_digest, &sig).await.unwrap();
    let e1 = manifest_link_epoch(s.store.as_ref(), repo, &sig.digest()).await;
    assert!(!e1.is_empty());
    let link_key = layout::manifest_link_at(&name, &sig.digest(), &e1);
    let referrers_key = layout::referrers(&name, &img.digest());
    let link = s.store.get(&link_key, 1 << 16).await.unwrap().bytes;
    let referrers = s.store.get(&referrers_key, 1 << 20).await.unwrap().bytes;
    // The racing pair: the DELETE moves the link to E2 and finishes, then the PUT that held at
    // E1 writes its link and its referrer entry.
    assert_eq!(s.status(reqwest::Method::DELETE, &delete).await.0, 202);
    assert_ne!(
        manifest_link_epoch(s.store.as_ref(), repo, &sig.digest()).await,
        e1
    );
    s.store
        .put(&link_key, link, PutMode::Overwrite)
        .await
        .unwrap();
    s.store
        .put(&referrers_key, referrers, PutMode::Overwrite)
        .await
        .unwrap();
    s.assert_manifest_gone(repo, &sig.digest()).await;
    assert_eq!(referrer_digests(&s, repo, &img.digest()).await, [by_digest]);

    let report = s.gc(Duration::from_secs(3600), false, false).await;
    assert!(report.deleted.is_empty(), "{:?}", report.deleted);
    assert!(
        s.store
            .stat(&link_key)
            .await
            .is_err_and(|e| e.is_not_found()),
        "the link at the dead epoch {e1} is still there"
    );
    assert!(referrer_digests(&s, repo, &img.digest()).await.is_empty());
    s.assert_image(repo, "v1", &img).await;
    s.assert_manifest_gone(repo, &sig.digest()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_orphan_of_a_put_racing_a_delete_is_collected() {
    orphan_of_a_put_racing_a_delete_is_collected(fs_store().await).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_orphan_of_a_put_racing_a_delete_is_collected() {
    orphan_of_a_put_racing_a_delete_is_collected(s3_store().await).await;
}
