//! Issue 53: online garbage collection that no late DELETE can outrun, checked from outside.
//!
//! A collector decides to delete an image's layer and sends the DELETE; the DELETE reaches the
//! store late (delayed, held, duplicated, or answered 503 and retried), while a client pushes
//! the same image again and the registry acknowledges it. Once the late DELETE has landed,
//! every acknowledged push must still be readable: 0 acknowledged pushes lost.
//!
//! The tests are black-box so that they outlive changes to the protocol and the key layout:
//! they push and pull over HTTP with `registry_client`, run the collector through
//! [`gc::collect`], break its lease with [`gc::break_lease`], and touch the store only through
//! the public [`Store`] trait. The only thing they know of the layout is that the store request
//! deleting something of a digest names the digest's hex, which is how the fault is aimed.
//!
//! - **S3**: the registry serves straight from SeaweedFS; the collector (another replica)
//!   reaches the same bucket through the tap, `s3_fixtures::FaultProxy`, which delays, holds,
//!   duplicates or fails the first S3 DELETE whose path names the layer's hex, and still
//!   delivers it after the collector's client gave up on it.
//! - **Filesystem**: the registry serves the directory through a plain `FsStore`; the collector
//!   runs through [`LateStore`], which does the same to the first `delete` of a key naming the
//!   hex: it tells the collector the DELETE went out and removes the key later, on a task of
//!   its own, as the network would.
//!
//! Each case aims at the layer's DELETE, or ([`Aim::ManifestLink`]) at the DELETE of the
//! untagged manifest's link in its repository (the collector runs with `--delete-untagged`),
//! and the re-push must leave the manifest resolvable by tag and by digest.
//!
//! The API's own DELETEs (of a manifest, of a blob link) are aimed at the same way: sent
//! through a second replica whose store is behind the tap, duplicated, the copy landing after
//! the client pushed the same content again ([`api_delete_case`]).
//!
//! Each case measures how long the re-push took to be acknowledged (it must be within
//! [`LEASE_TTL`]: requests must not wait for a committing collector) and whether the image
//! reads back after the late DELETE landed; every failure of a case is reported together.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use registry::gc::{self, GcOptions, GcReport};
use registry::storage::{
    BoxFuture, BoxReader, ByteStream, Document, Etag, FsStore, Key, ObjectMeta, PutMode, S3Config,
    S3Store, Store, StoreResult, StoreWriter,
};
use registry::{AppState, RegistryConfig, router};
use registry_client::{Client, Reference};
use s3_fixtures::{Fault, FaultProxy, Rule, S3Op, SeaweedFs};
use tokio::io::AsyncReadExt;
use tokio::sync::watch;
use validator::{Digest, Name};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";

/// The collector's lease time to live: short, so that "acknowledged within the lease's time to
/// live" is a tight bound and a late DELETE of 5 s already outlives the collector's window.
const LEASE_TTL: Duration = Duration::from_secs(4);

/// Longest a re-push may keep trying (a push retried after `MANIFEST_BLOB_UNKNOWN` and the
/// like, as a client does) before the case gives up on it.
const PUSH_PATIENCE: Duration = Duration::from_secs(90);

/// How a collector's DELETE of the layer reaches the store.
#[derive(Debug, Clone, Copy)]
enum LateDelete {
    /// Only after this long (the collector's own attempt may time out meanwhile).
    Delay(Duration),
    /// Now, and once more after this long.
    Duplicate(Duration),
    /// Answered 503 after this long while still delivered; the S3 SDK retries it.
    FailAfter(Duration),
    /// Held until the test releases it: a collector paused between its last check and the
    /// DELETE.
    Hold,
}

impl LateDelete {
    fn fault(self) -> Fault {
        match self {
            LateDelete::Delay(d) => Fault::Delay(d),
            LateDelete::Duplicate(d) => Fault::Duplicate(d),
            LateDelete::FailAfter(d) => Fault::FailAfter(503, d),
            LateDelete::Hold => Fault::Hold,
        }
    }
}

/// The filesystem store under a collector, making the first delete of a key that names an
/// aimed hex late the way [`LateDelete`] says; everything else goes straight to `inner`.
#[derive(Debug)]
struct LateStore {
    inner: Arc<dyn Store>,
    state: Arc<LateState>,
}

/// What [`LateStore`] aims at and how far its late delete got, shared with the task that
/// delivers it.
#[derive(Debug)]
struct LateState {
    aim: Mutex<Option<(String, LateDelete)>>,
    /// Late deletes taken on (the DELETE is "in flight").
    taken: watch::Sender<u64>,
    /// Late deletes done on the store.
    delivered: watch::Sender<u64>,
    released: watch::Sender<bool>,
    /// The key part the first held `put` names, if one is aimed at.
    put_aim: Mutex<Option<String>>,
    /// Puts held so far (until `released`).
    put_taken: watch::Sender<u64>,
    /// The key part the first failed `put` names, if one is aimed at.
    put_fail: Mutex<Option<String>>,
}

impl LateStore {
    fn new(inner: Arc<dyn Store>) -> Arc<LateStore> {
        Arc::new(LateStore {
            inner,
            state: Arc::new(LateState {
                aim: Mutex::new(None),
                taken: watch::Sender::new(0),
                delivered: watch::Sender::new(0),
                released: watch::Sender::new(false),
                put_aim: Mutex::new(None),
                put_taken: watch::Sender::new(0),
                put_fail: Mutex::new(None),
            }),
        })
    }

    /// The fault for `key`, if it is the first delete naming the aimed hex.
    fn take(&self, key: &Key) -> Option<LateDelete> {
        let mut aim = self.state.aim.lock().unwrap();
        let late = aim
            .as_ref()
            .filter(|(hex, _)| key.as_str().contains(hex.as_str()))
            .map(|(_, late)| *late)?;
        *aim = None;
        self.state.taken.send_modify(|n| *n += 1);
        Some(late)
    }

    /// Removes `key` once `wait` is over, on a task of its own: the collector has moved on.
    fn later(&self, key: &Key, wait: impl Future<Output = ()> + Send + 'static) {
        let (inner, state, key) = (self.inner.clone(), self.state.clone(), key.clone());
        tokio::spawn(async move {
            wait.await;
            let _ = inner.delete(&key).await;
            state.delivered.send_modify(|n| *n += 1);
        });
    }

    async fn late_delete(&self, key: &Key, late: LateDelete) -> StoreResult<()> {
        match late {
            LateDelete::Delay(d) => {
                self.later(key, tokio::time::sleep(d));
                Ok(())
            }
            LateDelete::Duplicate(d) => {
                let r = self.inner.delete(key).await;
                self.later(key, tokio::time::sleep(d));
                r
            }
            LateDelete::FailAfter(d) => {
                // The first attempt lands after `d` although it is reported failed; the client
                // retries then, as the S3 SDK does (a retry finding the key gone is fine).
                self.later(key, tokio::time::sleep(d));
                tokio::time::sleep(d).await;
                match self.inner.delete(key).await {
                    Err(e) if e.is_not_found() => Ok(()),
                    r => r,
                }
            }
            LateDelete::Hold => {
                let _ = self.state.released.subscribe().wait_for(|r| *r).await;
                let r = self.inner.delete(key).await;
                self.state.delivered.send_modify(|n| *n += 1);
                r
            }
        }
    }
}

/// Where a case aims its late DELETE: the S3 tap, or the filesystem wrapper.
enum Tap {
    S3(FaultProxy),
    Fs(Arc<LateStore>),
}

impl Tap {
    /// Makes the first DELETE naming `hex` late.
    fn aim(&self, hex: &str, late: LateDelete) {
        match self {
            Tap::S3(proxy) => proxy.inject(
                Rule::new(late.fault())
                    .on(S3Op::DeleteObject)
                    .path_contains(hex)
                    .times(1),
            ),
            Tap::Fs(store) => *store.state.aim.lock().unwrap() = Some((hex.to_owned(), late)),
        }
    }

    /// Holds the first write of a key naming `part` until [`Tap::release`].
    fn hold_put(&self, part: &str) {
        match self {
            Tap::S3(proxy) => proxy.inject(
                Rule::new(Fault::Hold)
                    .on(S3Op::PutObject)
                    .path_contains(part)
                    .times(1),
            ),
            Tap::Fs(store) => *store.state.put_aim.lock().unwrap() = Some(part.to_owned()),
        }
    }

    /// Fails the first write of a key naming `part` (S3: 403, which the SDK does not retry).
    fn fail_put(&self, part: &str) {
        match self {
            Tap::S3(proxy) => proxy.inject(
                Rule::new(Fault::Status(403))
                    .on(S3Op::PutObject)
                    .path_contains(part)
                    .times(1),
            ),
            Tap::Fs(store) => *store.state.put_fail.lock().unwrap() = Some(part.to_owned()),
        }
    }

    /// Waits until the write [`Tap::hold_put`] aims at is held.
    async fn until_put_held(&self) {
        match self {
            Tap::S3(proxy) => proxy.until_scheduled(1).await,
            Tap::Fs(store) => {
                let _ = store
                    .state
                    .put_taken
                    .subscribe()
                    .wait_for(|n| *n >= 1)
                    .await;
            }
        }
    }

    /// Waits until the aimed DELETE was sent (and is being made late).
    async fn until_taken(&self) {
        match self {
            Tap::S3(proxy) => proxy.until_scheduled(1).await,
            Tap::Fs(store) => {
                let _ = store.state.taken.subscribe().wait_for(|n| *n >= 1).await;
            }
        }
    }

    /// Waits until the late DELETE reached the store.
    async fn until_delivered(&self) {
        match self {
            Tap::S3(proxy) => proxy.until_delivered(1).await,
            Tap::Fs(store) => {
                let _ = store
                    .state
                    .delivered
                    .subscribe()
                    .wait_for(|n| *n >= 1)
                    .await;
            }
        }
    }

    /// Late DELETEs that reached the store so far.
    fn delivered(&self) -> u64 {
        match self {
            Tap::S3(proxy) => proxy.delivered(),
            Tap::Fs(store) => *store.state.delivered.borrow(),
        }
    }

    fn release(&self) {
        match self {
            Tap::S3(proxy) => proxy.release(),
            Tap::Fs(store) => {
                store.state.released.send_replace(true);
            }
        }
    }
}

/// Which store a case runs on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Backend {
    Fs,
    S3,
}

/// A registry served over TCP on a loopback port from the plain store, and the collector's
/// store behind the tap.
struct Case {
    addr: SocketAddr,
    store: Arc<dyn Store>,
    collector: Arc<dyn Store>,
    tap: Tap,
    client: Client,
    task: tokio::task::JoinHandle<()>,
    /// Another replica of the registry, serving the same store behind the tap (a replica
    /// whose store requests cross a slow gateway).
    replica: SocketAddr,
    replica_task: tokio::task::JoinHandle<()>,
    _dir: Option<tempfile::TempDir>,
}

impl Drop for Case {
    fn drop(&mut self) {
        self.task.abort();
        self.replica_task.abort();
    }
}

/// Serves `store` over TCP on a loopback port.
async fn serve(store: Arc<dyn Store>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let state = AppState::new(store, RegistryConfig::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(state);
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, task)
}

impl Case {
    async fn start(backend: Backend) -> Case {
        let (store, collector, tap, dir): (Arc<dyn Store>, Arc<dyn Store>, Tap, _) = match backend {
            Backend::Fs => {
                let dir = tempfile::tempdir().unwrap();
                let late = LateStore::new(Arc::new(FsStore::open(dir.path()).unwrap()));
                (
                    Arc::new(FsStore::open(dir.path()).unwrap()),
                    late.clone(),
                    Tap::Fs(late),
                    Some(dir),
                )
            }
            Backend::S3 => {
                let sw = SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"));
                let bucket = sw.bucket().unwrap_or_else(|e| panic!("{e}"));
                let proxy = FaultProxy::start(sw.s3_addr()).await.unwrap();
                let mut via_tap = S3Config::new(proxy.endpoint(), &bucket).prefix("reg");
                // Shorter than the longest delay, so that one case sees the SDK time out and
                // retry while the first attempt is still on its way.
                via_tap.attempt_timeout = Duration::from_secs(30);
                let direct = S3Config::new(sw.endpoint(), &bucket).prefix("reg");
                (
                    Arc::new(S3Store::new(direct)),
                    Arc::new(S3Store::new(via_tap)),
                    Tap::S3(proxy),
                    None,
                )
            }
        };
        let (addr, task) = serve(store.clone()).await;
        let (replica, replica_task) = serve(collector.clone()).await;
        let client = Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap();
        Case {
            addr,
            store,
            collector,
            tap,
            client,
            task,
            replica,
            replica_task,
            _dir: dir,
        }
    }

    fn reference(&self, repo: &str, reference: &str) -> Reference {
        reference_at(self.addr, repo, reference)
    }

    async fn push(&self, repo: &str, tag: &str, img: &Image) -> Result<(), String> {
        self.push_to(self.addr, repo, tag, img).await
    }

    /// [`Case::push`] through the registry at `addr`.
    async fn push_to(
        &self,
        addr: SocketAddr,
        repo: &str,
        tag: &str,
        img: &Image,
    ) -> Result<(), String> {
        let name = Name::parse(repo).unwrap();
        let reference = reference_at(addr, repo, tag);
        for b in img.blobs() {
            self.client
                .push_blob(
                    &addr.to_string(),
                    &name,
                    &Digest::sha256(b),
                    b.len() as u64,
                    &b[..],
                )
                .await
                .map_err(|e| e.to_string())?;
        }
        self.client
            .push_manifest(&reference, MANIFEST, img.manifest.clone())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }

    /// Pushes until acknowledged, starting over after an error as a client does (a collector
    /// may remove a blob between the client's HEAD and its manifest PUT); the time it took.
    async fn push_until_acknowledged(
        &self,
        repo: &str,
        tag: &str,
        img: &Image,
    ) -> Result<Duration, String> {
        let started = Instant::now();
        let mut errors = Vec::new();
        while started.elapsed() < PUSH_PATIENCE {
            match self.push(repo, tag, img).await {
                Ok(()) => return Ok(started.elapsed()),
                Err(e) => errors.push(format!("{:.1?}: {e}", started.elapsed())),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        Err(format!("never acknowledged: {errors:?}"))
    }

    /// Untags `tag`, so the image's manifest and blobs are garbage to a run that collects
    /// untagged manifests.
    async fn untag(&self, repo: &str, tag: &str) {
        let resp = reqwest::Client::new()
            .delete(format!("http://{}/v2/{repo}/manifests/{tag}", self.addr))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), 202, "untagging {repo}:{tag}");
    }

    /// What of `img` under `repo:tag` does not read back (empty: all of it does).
    async fn unreadable(&self, repo: &str, tag: &str, img: &Image) -> Vec<String> {
        let mut lost = Vec::new();
        match self.client.get_manifest(&self.reference(repo, tag)).await {
            Ok((_, bytes)) if bytes == img.manifest => {}
            Ok((desc, _)) => lost.push(format!("{repo}:{tag} is now {}", desc.digest)),
            Err(e) => lost.push(format!("manifest {repo}:{tag}: {e}")),
        }
        let name = Name::parse(repo).unwrap();
        for (what, b) in img.named_blobs() {
            let d = Digest::sha256(b);
            let got = match self
                .client
                .get_blob(&self.addr.to_string(), &name, &d, b.len() as u64)
                .await
            {
                Ok(mut r) => {
                    let mut got = Vec::new();
                    r.read_to_end(&mut got).await.map(|_| got)
                }
                Err(e) => {
                    lost.push(format!("{what} {d}: {e}"));
                    continue;
                }
            };
            match got {
                Ok(got) if got == *b => {}
                Ok(_) => lost.push(format!("{what} {d}: other bytes")),
                Err(e) => lost.push(format!("{what} {d}: {e}")),
            }
        }
        lost
    }

    /// The digests the referrers API lists for `subject` in `repo`.
    async fn referrers(&self, repo: &str, subject: &Digest) -> Vec<String> {
        let url = format!("http://{}/v2/{repo}/referrers/{subject}", self.addr);
        let body = reqwest::get(url).await.unwrap().bytes().await.unwrap();
        let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
        (v["manifests"].as_array().into_iter().flatten())
            .filter_map(|m| m["digest"].as_str().map(str::to_owned))
            .collect()
    }

    /// Starts a collection of everything untagged, with no grace window, through the tap.
    fn collect(&self) -> tokio::task::JoinHandle<Result<GcReport, gc::GcError>> {
        let store = self.collector.clone();
        tokio::spawn(async move {
            let opts = GcOptions {
                grace: Duration::ZERO,
                delete_untagged: true,
                lease_ttl: LEASE_TTL,
                ..GcOptions::default()
            };
            gc::collect(store, &opts).await
        })
    }
}

/// `repo:reference` (or `repo@digest`) on the registry at `addr`.
fn reference_at(addr: SocketAddr, repo: &str, reference: &str) -> Reference {
    let sep = if reference.contains(':') { "@" } else { ":" };
    Reference::parse(&format!("{addr}/{repo}{sep}{reference}")).unwrap()
}

/// An image of a config and one layer, unique to `seed`.
struct Image {
    config: Vec<u8>,
    layer: Vec<u8>,
    manifest: Bytes,
}

impl Image {
    fn new(seed: &str) -> Image {
        let config = format!("{{\"seed\":\"{seed}\"}}").into_bytes();
        let mut layer = format!("layer of {seed}").into_bytes();
        layer.resize(4096, b'.');
        let desc = |media_type: &str, data: &[u8]| serde_json::json!({"mediaType": media_type, "digest": Digest::sha256(data), "size": data.len()});
        let manifest = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": desc(CONFIG, &config),
            "layers": [desc(LAYER, &layer)],
        });
        Image {
            manifest: Bytes::from(serde_json::to_vec(&manifest).unwrap()),
            config,
            layer,
        }
    }

    /// A signature of `subject` (a manifest with a subject: one of its referrers), with a
    /// config and a layer of its own.
    fn signature(seed: &str, subject: &Image) -> Image {
        let mut sig = Image::new(&format!("signature of {seed}"));
        let mut m: serde_json::Value = serde_json::from_slice(&sig.manifest).unwrap();
        m["subject"] = serde_json::json!({
            "mediaType": MANIFEST,
            "digest": subject.manifest_digest(),
            "size": subject.manifest.len(),
        });
        m["artifactType"] = "application/vnd.example.signature".into();
        sig.manifest = Bytes::from(serde_json::to_vec(&m).unwrap());
        sig
    }

    fn blobs(&self) -> [&Vec<u8>; 2] {
        [&self.config, &self.layer]
    }

    fn named_blobs(&self) -> [(&'static str, &Vec<u8>); 2] {
        [("config", &self.config), ("layer", &self.layer)]
    }

    fn layer_hex(&self) -> String {
        Digest::sha256(&self.layer).encoded().to_owned()
    }

    fn manifest_digest(&self) -> Digest {
        Digest::sha256(&self.manifest)
    }

    fn manifest_hex(&self) -> String {
        self.manifest_digest().encoded().to_owned()
    }
}

/// Store modification times may have one-second resolution (S3 `Last-Modified`); waiting this
/// long makes everything written so far older than a zero grace window.
async fn age_past_zero_grace() {
    tokio::time::sleep(Duration::from_millis(2100)).await;
}

/// Which of the collector's DELETEs a case makes late.
#[derive(Debug, Clone, Copy)]
enum Aim {
    /// The first naming the layer's digest (its link or its bytes).
    Layer,
    /// The first naming the manifest's digest: its link in the repository, which the
    /// collector deletes before the manifest's bytes.
    ManifestLink,
}

/// One case: an image made garbage, a collection whose DELETE of the layer is late in the way
/// `late` says, the same image pushed again meanwhile, and the late DELETE landed. With
/// `break_lease`, the collector's lease is broken by force before the re-push (a collector
/// paused at its DELETE, `LateDelete::Hold`, is presumed dead by an operator). Returns what
/// went wrong, each with how; empty when nothing was lost.
async fn late_delete_case(
    backend: Backend,
    (late, break_lease, aim): (LateDelete, bool, Aim),
) -> Vec<String> {
    let case = Case::start(backend).await;
    let name = format!("{backend:?} {late:?} {aim:?}");
    let repo = "faults/late";
    let img = Image::new(&name);
    case.push(repo, "v1", &img).await.unwrap();
    case.untag(repo, "v1").await;
    age_past_zero_grace().await;

    let hex = match aim {
        Aim::Layer => img.layer_hex(),
        Aim::ManifestLink => img.manifest_hex(),
    };
    case.tap.aim(&hex, late);
    let mut run = case.collect();
    let mut failures = Vec::new();
    if tokio::time::timeout(Duration::from_secs(60), case.tap.until_taken())
        .await
        .is_err()
    {
        return vec![format!(
            "{name}: the collector never sent the DELETE aimed at; its run: {:?}",
            run.await
        )];
    }
    let mut outcome = None;
    if matches!(late, LateDelete::Duplicate(_)) {
        // The first copy went through: let the run finish, so the re-push starts from a
        // collected image and only the duplicate is still on its way.
        outcome = Some(run_outcome(&mut run).await);
    } else if break_lease {
        match gc::break_lease(case.store.as_ref(), true).await {
            Ok(Some(_)) => {}
            other => failures.push(format!("{name}: breaking the lease: {other:?}")),
        }
    }

    match case.push_until_acknowledged(repo, "v2", &img).await {
        Ok(took) if took > LEASE_TTL => failures.push(format!(
            "{name}: the re-push was acknowledged after {took:.1?}, more than the lease's time \
             to live {LEASE_TTL:?}"
        )),
        Ok(_) => {}
        Err(e) => failures.push(format!("{name}: the re-push: {e}")),
    }

    case.tap.release();
    if tokio::time::timeout(Duration::from_secs(120), case.tap.until_delivered())
        .await
        .is_err()
    {
        failures.push(format!("{name}: the late DELETE never reached the store"));
    }
    let outcome = match outcome {
        Some(o) => o,
        None => run_outcome(&mut run).await,
    };
    let mut lost = case.unreadable(repo, "v2", &img).await;
    let by_digest = img.manifest_digest().to_string();
    lost.extend(case.unreadable(repo, &by_digest, &img).await);
    if !lost.is_empty() {
        failures.push(format!(
            "{name}: an acknowledged push lost content after the late DELETE landed: \
             {lost:?} (collector: {outcome})"
        ));
    }
    failures
}

/// How the collector's run ended, for messages.
async fn run_outcome(run: &mut tokio::task::JoinHandle<Result<GcReport, gc::GcError>>) -> String {
    match tokio::time::timeout(Duration::from_secs(120), run).await {
        Ok(Ok(Ok(r))) => format!("finished, {} objects deleted", r.deleted.len()),
        Ok(Ok(Err(e))) => format!("stopped: {e}"),
        Ok(Err(e)) => format!("panicked: {e}"),
        Err(_) => "still running after 120 s".to_owned(),
    }
}

/// Runs cases concurrently (each with its own store, registry and collector, so the long
/// delays overlap) and fails with every case's failures.
async fn run_cases(backend: Backend, cases: &[(LateDelete, bool, Aim)]) {
    let tasks: Vec<_> = cases
        .iter()
        .map(|&case| tokio::spawn(late_delete_case(backend, case)))
        .collect();
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// The delays of issue 53's report: 1 s and 5 s are shorter or about as long as the
/// collector's window after committing; 20 s and 60 s are not (60 s also outlives the S3
/// client's attempt, so the SDK retries while the first DELETE is still on its way).
const DELAYS: [u64; 4] = [1, 5, 20, 60];

/// One case aimed at the layer and at the manifest link.
fn both_aims(late: LateDelete, break_lease: bool) -> [(LateDelete, bool, Aim); 2] {
    [
        (late, break_lease, Aim::Layer),
        (late, break_lease, Aim::ManifestLink),
    ]
}

/// Every delay, aimed at the layer and at the manifest link.
fn delays() -> Vec<(LateDelete, bool, Aim)> {
    DELAYS
        .iter()
        .flat_map(|&s| both_aims(LateDelete::Delay(Duration::from_secs(s)), false))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_delayed_delete_loses_no_acknowledged_push() {
    run_cases(Backend::Fs, &delays()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_delayed_delete_loses_no_acknowledged_push() {
    run_cases(Backend::S3, &delays()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_duplicated_delete_loses_no_acknowledged_push() {
    run_cases(
        Backend::Fs,
        &both_aims(LateDelete::Duplicate(Duration::from_secs(20)), false),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_duplicated_delete_loses_no_acknowledged_push() {
    run_cases(
        Backend::S3,
        &both_aims(LateDelete::Duplicate(Duration::from_secs(20)), false),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_failed_and_retried_delete_loses_no_acknowledged_push() {
    run_cases(
        Backend::Fs,
        &both_aims(LateDelete::FailAfter(Duration::from_secs(20)), false),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_failed_and_retried_delete_loses_no_acknowledged_push() {
    run_cases(
        Backend::S3,
        &both_aims(LateDelete::FailAfter(Duration::from_secs(20)), false),
    )
    .await;
}

/// A collector paused between its last check and the DELETE while an operator breaks its
/// lease by force and the image is pushed again; it goes on afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_collector_paused_at_its_delete_across_a_forced_break() {
    run_cases(Backend::Fs, &both_aims(LateDelete::Hold, true)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_collector_paused_at_its_delete_across_a_forced_break() {
    run_cases(Backend::S3, &both_aims(LateDelete::Hold, true)).await;
}

/// What an API DELETE case deletes.
#[derive(Debug, Clone, Copy)]
enum Deleted {
    /// The signature's manifest (`DELETE /v2/<name>/manifests/<digest>`).
    Manifest,
    /// The repository's link to the signature's layer (`DELETE /v2/<name>/blobs/<digest>`).
    BlobLink,
}

/// How late the duplicate of an API DELETE's store DELETE lands: long after the client pushed
/// again (a push here takes well under a second).
const API_DELETE_LATE: Duration = Duration::from_secs(6);

/// An API DELETE whose store DELETE is duplicated, the copy landing late (a gateway's or the
/// S3 SDK's retry while the first attempt is on its way, in either order): a signed image is
/// pushed, the signature (or the repository's link to its layer) is deleted through the
/// replica behind the tap (202), the signature is pushed again through the other replica
/// (201), then the late copy lands. The re-pushed signature must still read back whole, by
/// digest, and be listed among the image's referrers. Before the API's DELETEs moved the link
/// to a new epoch, the re-push wrote the very key the late copy deleted. Returns what went
/// wrong (empty: nothing).
async fn api_delete_case(backend: Backend, what: Deleted) -> Vec<String> {
    let case = Case::start(backend).await;
    let name = format!("{backend:?} API DELETE of a {what:?}");
    let repo = "faults/api-delete";
    let img = Image::new(&name);
    let sig = Image::signature(&name, &img);
    let by_digest = sig.manifest_digest().to_string();
    case.push(repo, "v1", &img).await.unwrap();
    case.push(repo, &by_digest, &sig).await.unwrap();
    let (path, hex) = match what {
        Deleted::Manifest => (format!("manifests/{by_digest}"), sig.manifest_hex()),
        Deleted::BlobLink => (
            format!("blobs/{}", Digest::sha256(&sig.layer)),
            sig.layer_hex(),
        ),
    };
    case.tap.aim(&hex, LateDelete::Duplicate(API_DELETE_LATE));
    let resp = reqwest::Client::new()
        .delete(format!("http://{}/v2/{repo}/{path}", case.replica))
        .send()
        .await
        .unwrap();
    let mut failures = Vec::new();
    if resp.status().as_u16() != 202 {
        return vec![format!("{name}: the DELETE answered {}", resp.status())];
    }
    if tokio::time::timeout(Duration::from_secs(30), case.tap.until_taken())
        .await
        .is_err()
    {
        return vec![format!("{name}: the DELETE aimed at never reached the tap")];
    }
    if let Err(e) = case.push(repo, &by_digest, &sig).await {
        failures.push(format!("{name}: the re-push: {e}"));
    }
    if case.tap.delivered() > 0 {
        failures.push(format!(
            "{name}: the late copy landed before the re-push was acknowledged: the case \
             tested nothing"
        ));
    }
    if tokio::time::timeout(Duration::from_secs(60), case.tap.until_delivered())
        .await
        .is_err()
    {
        failures.push(format!("{name}: the late copy never reached the store"));
    }
    let lost = case.unreadable(repo, &by_digest, &sig).await;
    if !lost.is_empty() {
        failures.push(format!(
            "{name}: the re-push lost content after the late copy landed: {lost:?}"
        ));
    }
    let referrers = case.referrers(repo, &img.manifest_digest()).await;
    if referrers != [by_digest.clone()] {
        failures.push(format!(
            "{name}: the image's referrers are {referrers:?}, not the re-pushed signature"
        ));
    }
    failures
}

/// Runs both API DELETE cases on `backend` concurrently and fails with their failures.
async fn run_api_delete_cases(backend: Backend) {
    let tasks = [Deleted::Manifest, Deleted::BlobLink]
        .map(|what| tokio::spawn(api_delete_case(backend, what)));
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_late_api_delete_loses_no_re_push() {
    run_api_delete_cases(Backend::Fs).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_late_api_delete_loses_no_re_push() {
    run_api_delete_cases(Backend::S3).await;
}

/// A write and a DELETE of the same link racing: the manifest PUT (or the blob upload)
/// through the replica behind the tap holds the digest, its link write is held at the tap, the
/// DELETE (through the other replica) runs whole and answers 202, then the link write goes on
/// and the PUT answers 201. The PUT came last, so the content must read back; and since it was
/// pushed a moment ago, a collection of untagged manifests with a grace window of an hour must
/// leave it. Before the writer checked its link's epoch after writing it, the link landed at
/// the epoch the DELETE had left: a dead key, which that collection removed at once. Returns
/// what went wrong.
async fn delete_during_push_case(backend: Backend, what: Deleted) -> Vec<String> {
    let case = Case::start(backend).await;
    let name = format!("{backend:?} DELETE of a {what:?} during its push");
    let repo = "faults/delete-during-push";
    let img = Image::new(&name);
    let by_digest = img.manifest_digest().to_string();
    let layer = Digest::sha256(&img.layer);
    case.push(repo, &by_digest, &img).await.unwrap();
    let http = reqwest::Client::new();
    // The tap holds the link write before the push starts.
    let (held, path) = match what {
        Deleted::Manifest => (img.manifest_hex(), format!("manifests/{by_digest}")),
        Deleted::BlobLink => (img.layer_hex(), format!("blobs/{layer}")),
    };
    let kind = path.split('/').next().unwrap_or_default();
    case.tap.hold_put(&format!("_{kind}/sha256/{held}"));
    let push = match what {
        Deleted::Manifest => {
            let (client, manifest) = (case.client.clone(), img.manifest.clone());
            let reference = reference_at(case.replica, repo, &by_digest);
            tokio::spawn(async move {
                (client.push_manifest(&reference, MANIFEST, manifest).await)
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            })
        }
        Deleted::BlobLink => {
            // A monolithic upload: a client's HEAD would find the blob and skip it.
            let post = http
                .post(format!(
                    "http://{}/v2/{repo}/blobs/uploads/?digest={layer}",
                    case.replica
                ))
                .body(img.layer.clone());
            tokio::spawn(async move {
                match post.send().await {
                    Ok(r) if r.status().as_u16() == 201 => Ok(()),
                    Ok(r) => Err(format!("the upload answered {}", r.status())),
                    Err(e) => Err(e.to_string()),
                }
            })
        }
    };
    if tokio::time::timeout(Duration::from_secs(30), case.tap.until_put_held())
        .await
        .is_err()
    {
        return vec![format!("{name}: the link write never reached the tap")];
    }
    let resp = http
        .delete(format!("http://{}/v2/{repo}/{path}", case.addr))
        .send()
        .await
        .unwrap();
    if resp.status().as_u16() != 202 {
        return vec![format!("{name}: the DELETE answered {}", resp.status())];
    }
    case.tap.release();
    if let Err(e) = push.await.unwrap() {
        return vec![format!("{name}: the push: {e}")];
    }
    let mut failures = Vec::new();
    let lost = case.unreadable(repo, &by_digest, &img).await;
    if !lost.is_empty() {
        failures.push(format!("{name}: after the push's 201: {lost:?}"));
    }
    let opts = GcOptions {
        grace: Duration::from_secs(3600),
        delete_untagged: true,
        lease_ttl: LEASE_TTL,
        ..GcOptions::default()
    };
    if let Err(e) = gc::collect(case.store.clone(), &opts).await {
        failures.push(format!("{name}: the collection: {e}"));
    }
    let lost = case.unreadable(repo, &by_digest, &img).await;
    if !lost.is_empty() {
        failures.push(format!(
            "{name}: a collection with an hour's grace removed what was pushed a moment ago: \
             {lost:?}"
        ));
    }
    failures
}

/// Whether `repo:tag` and `repo@digest` of `img` read back: (by tag, by digest).
async fn tag_and_digest(case: &Case, repo: &str, tag: &str, img: &Image) -> (bool, bool) {
    let by_digest = img.manifest_digest().to_string();
    let mut out = [false; 2];
    for (i, r) in [tag, by_digest.as_str()].into_iter().enumerate() {
        out[i] = matches!(
            case.client.get_manifest(&case.reference(repo, r)).await,
            Ok((_, b)) if b == img.manifest
        );
    }
    (out[0], out[1])
}

/// A manifest PUT with a tag racing a DELETE of the manifest, one of them held at its write of
/// the tag index while the other runs whole: with `delete_held`, the DELETE (through the
/// replica behind the tap) after it moved the link; otherwise the PUT, after it linked. Either
/// may come last, but the result must be one of them whole: the tag and the manifest both
/// there, or both gone; never a tag without its manifest or a manifest that lost the tag the
/// PUT acknowledged. A collection with an hour's grace changes nothing of that. Before tags
/// carried the epoch of the link they were set with and the PUT checked the epoch after
/// setting them, a PUT held at its tag write left a tag whose manifest the DELETE had removed.
async fn tag_race_case(backend: Backend, delete_held: bool) -> Vec<String> {
    let case = Case::start(backend).await;
    let name = format!(
        "{backend:?} tag race, the {} held",
        if delete_held { "DELETE" } else { "PUT" }
    );
    let repo = "faults/tag-race";
    let img = Image::new(&name);
    let by_digest = img.manifest_digest().to_string();
    // Tagged, so that the DELETE writes the tag index (removing `old`).
    case.push(repo, "old", &img).await.unwrap();
    case.tap.hold_put(&format!("{repo}/_tags"));
    let (put_at, delete_at) = if delete_held {
        (case.addr, case.replica)
    } else {
        (case.replica, case.addr)
    };
    let delete = reqwest::Client::new()
        .delete(format!(
            "http://{delete_at}/v2/{repo}/manifests/{by_digest}"
        ))
        .send();
    let put_ref = reference_at(put_at, repo, "v1");
    let held = case.tap.until_put_held();
    let outcome = if delete_held {
        let delete = tokio::spawn(delete);
        if tokio::time::timeout(Duration::from_secs(30), held)
            .await
            .is_err()
        {
            return vec![format!("{name}: the DELETE never wrote the tag index")];
        }
        let put = (case.client)
            .push_manifest(&put_ref, MANIFEST, img.manifest.clone())
            .await
            .map(|_| ())
            .map_err(|e| e.to_string());
        case.tap.release();
        (put, delete.await.unwrap().map(|r| r.status().as_u16()))
    } else {
        let (client, manifest) = (case.client.clone(), img.manifest.clone());
        let put = tokio::spawn(async move {
            (client.push_manifest(&put_ref, MANIFEST, manifest).await)
                .map(|_| ())
                .map_err(|e| e.to_string())
        });
        if tokio::time::timeout(Duration::from_secs(30), held)
            .await
            .is_err()
        {
            return vec![format!("{name}: the PUT never wrote the tag index")];
        }
        let status = delete.await.map(|r| r.status().as_u16());
        case.tap.release();
        (put.await.unwrap(), status)
    };
    match outcome {
        (Ok(()), Ok(202)) => {}
        other => return vec![format!("{name}: the PUT and the DELETE answered {other:?}")],
    }
    let mut failures = Vec::new();
    if tag_and_digest(&case, repo, "old", &img).await.0 {
        failures.push(format!("{name}: the tag the DELETE removed is back"));
    }
    let state = tag_and_digest(&case, repo, "v1", &img).await;
    if state.0 != state.1 {
        failures.push(format!(
            "{name}: by tag {}, by digest {}: one of the two requests applied in part",
            state.0, state.1
        ));
    }
    let opts = GcOptions {
        grace: Duration::from_secs(3600),
        delete_untagged: true,
        lease_ttl: LEASE_TTL,
        ..GcOptions::default()
    };
    if let Err(e) = gc::collect(case.store.clone(), &opts).await {
        failures.push(format!("{name}: the collection: {e}"));
    }
    let after = tag_and_digest(&case, repo, "v1", &img).await;
    if after != state {
        failures.push(format!(
            "{name}: (by tag, by digest) {state:?} before a collection with an hour's grace, \
             {after:?} after"
        ));
    }
    failures
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tagged_push_racing_a_delete_ends_as_one_of_them() {
    let cases = [Backend::Fs, Backend::S3]
        .into_iter()
        .flat_map(|b| [(b, false), (b, true)]);
    let tasks: Vec<_> = cases
        .map(|(b, held)| tokio::spawn(tag_race_case(b, held)))
        .collect();
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

/// `DELETE /v2/<repo>/<what>/<reference>` through the registry at `addr`: its status.
async fn http_delete(addr: SocketAddr, repo: &str, what: &str, reference: &str) -> u16 {
    let url = format!("http://{addr}/v2/{repo}/{what}/{reference}");
    let resp = reqwest::Client::new().delete(url).send().await.unwrap();
    resp.status().as_u16()
}

/// A case of [`failing_tag_cases`]: a registry pair on `backend`, an image unique to `what`
/// pushed to `repo` with tag `old`, and the tap holding the next write of `repo`'s tag index.
async fn tagged_case(backend: Backend, repo: &str, what: &str) -> (Case, Image, String) {
    let case = Case::start(backend).await;
    let img = Image::new(&format!("{backend:?} {what}"));
    let by_digest = img.manifest_digest().to_string();
    case.push(repo, "old", &img).await.unwrap();
    case.tap.hold_put(&format!("{repo}/_tags"));
    (case, img, by_digest)
}

/// Waits until the tap holds the tag index write; an error naming `name` if it never comes.
async fn until_tags_held(case: &Case, name: &str) -> Result<(), String> {
    tokio::time::timeout(Duration::from_secs(30), case.tap.until_put_held())
        .await
        .map_err(|_| format!("{name}: the tag index write never reached the tap"))
}

/// A failure unless the tag and the manifest are both there or both gone.
fn whole(name: &str, (by_tag, by_digest): (bool, bool)) -> Result<(), String> {
    if by_tag == by_digest {
        return Ok(());
    }
    Err(format!(
        "{name}: by tag {by_tag}, by digest {by_digest}: applied in part"
    ))
}

/// A DELETE (through the replica behind the tap) held at its tag write after moving the link;
/// meanwhile its retry runs whole and the manifest is pushed again with a tag. The first
/// DELETE's tag pass must leave the later push's tag (it removed every tag not at its own new
/// epoch).
async fn late_delete_tag_case(backend: Backend) -> Result<(), String> {
    let name = format!("{backend:?} late DELETE");
    let repo = "faults/late-delete";
    let (case, img, by_digest) = tagged_case(backend, repo, "late").await;
    let (replica, d) = (case.replica, by_digest.clone());
    let first = tokio::spawn(async move { http_delete(replica, repo, "manifests", &d).await });
    until_tags_held(&case, &name).await?;
    let retry = http_delete(case.addr, repo, "manifests", &by_digest).await;
    let push = case.push(repo, "v1", &img).await;
    case.tap.release();
    let first = first.await.unwrap();
    if (retry, first, push.is_ok()) != (202, 202, true) {
        return Err(format!(
            "{name}: retry {retry}, push {push:?}, first {first}"
        ));
    }
    whole(&name, tag_and_digest(&case, repo, "v1", &img).await)
}

/// A tagged PUT held at its tag write while the manifest and its layer's link are deleted: its
/// next attempt fails (the layer is gone), and it must not leave its tag behind.
async fn failed_put_tag_case(backend: Backend) -> Result<(), String> {
    let name = format!("{backend:?} failed PUT");
    let repo = "faults/failed-put";
    let (case, img, by_digest) = tagged_case(backend, repo, "failed").await;
    let (client, manifest) = (case.client.clone(), img.manifest.clone());
    let reference = reference_at(case.replica, repo, "v1");
    let put =
        tokio::spawn(async move { client.push_manifest(&reference, MANIFEST, manifest).await });
    until_tags_held(&case, &name).await?;
    let layer = Digest::sha256(&img.layer).to_string();
    let deletes = (
        http_delete(case.addr, repo, "manifests", &by_digest).await,
        http_delete(case.addr, repo, "blobs", &layer).await,
    );
    case.tap.release();
    let put = put.await.unwrap().map(|_| ());
    if deletes != (202, 202) || put.is_ok() {
        return Err(format!(
            "{name}: DELETEs {deletes:?}, the PUT {put:?} (it should fail: its layer is gone)"
        ));
    }
    whole(&name, tag_and_digest(&case, repo, "v1", &img).await)
}

/// A DELETE whose tag write fails after it moved the link (500): a retry finds no link, and
/// must still remove the tags (it answered 404 and left them).
async fn failed_delete_tag_case(backend: Backend) -> Result<(), String> {
    let name = format!("{backend:?} failed DELETE");
    let repo = "faults/failed-delete";
    let case = Case::start(backend).await;
    let img = Image::new(&name);
    let by_digest = img.manifest_digest().to_string();
    case.push(repo, "v1", &img).await.unwrap();
    // Pushed again after a DELETE: the link is at an epoch, not the legacy key.
    let deleted = http_delete(case.addr, repo, "manifests", &by_digest).await;
    assert_eq!(deleted, 202);
    case.push(repo, "v1", &img).await.unwrap();
    case.tap.fail_put(&format!("{repo}/_tags"));
    let first = http_delete(case.replica, repo, "manifests", &by_digest).await;
    let retry = http_delete(case.addr, repo, "manifests", &by_digest).await;
    if (first, retry) != (500, 202) {
        return Err(format!(
            "{name}: answered {first}, its retry {retry} (500 and 202 expected)"
        ));
    }
    match tag_and_digest(&case, repo, "v1", &img).await {
        (false, false) => Ok(()),
        state => Err(format!(
            "{name}: (by tag, by digest) {state:?} after the retry's 202"
        )),
    }
}

/// Tags and DELETEs that fail or land late, each ending with the tag and the manifest both
/// there or both gone (holes a review found): the three cases above on `backend`.
async fn failing_tag_cases(backend: Backend) -> Vec<String> {
    let results = [
        late_delete_tag_case(backend).await,
        failed_put_tag_case(backend).await,
        failed_delete_tag_case(backend).await,
    ];
    results.into_iter().filter_map(Result::err).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn failing_and_late_tag_writes_leave_no_tag_without_its_manifest() {
    let tasks = [Backend::Fs, Backend::S3].map(|b| tokio::spawn(failing_tag_cases(b)));
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_push_racing_a_delete_of_its_link_links_at_the_current_epoch() {
    let cases = [Backend::Fs, Backend::S3]
        .into_iter()
        .flat_map(|b| [(b, Deleted::Manifest), (b, Deleted::BlobLink)]);
    let tasks: Vec<_> = cases
        .map(|(b, what)| tokio::spawn(delete_during_push_case(b, what)))
        .collect();
    let mut failures = Vec::new();
    for t in tasks {
        failures.extend(t.await.unwrap());
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

impl Store for LateStore {
    fn name(&self) -> &'static str {
        self.inner.name()
    }
    fn min_chunk_length(&self) -> Option<u64> {
        self.inner.min_chunk_length()
    }
    fn staging_readable(&self) -> bool {
        self.inner.staging_readable()
    }
    fn get<'a>(&'a self, key: &'a Key, limit: u64) -> BoxFuture<'a, StoreResult<Document>> {
        self.inner.get(key, limit)
    }
    fn get_if_changed<'a>(
        &'a self,
        key: &'a Key,
        limit: u64,
        known: &'a Etag,
    ) -> BoxFuture<'a, StoreResult<Option<Document>>> {
        self.inner.get_if_changed(key, limit, known)
    }
    fn put<'a>(
        &'a self,
        key: &'a Key,
        bytes: Bytes,
        mode: PutMode,
    ) -> BoxFuture<'a, StoreResult<Etag>> {
        Box::pin(async move {
            let aimed = {
                let mut aim = self.state.put_aim.lock().unwrap();
                let hit = aim
                    .as_ref()
                    .is_some_and(|p| key.as_str().contains(p.as_str()));
                if hit {
                    *aim = None;
                }
                hit
            };
            if aimed {
                self.state.put_taken.send_modify(|n| *n += 1);
                let _ = self.state.released.subscribe().wait_for(|r| *r).await;
            }
            let fail = {
                let mut aim = self.state.put_fail.lock().unwrap();
                let hit = aim
                    .as_ref()
                    .is_some_and(|p| key.as_str().contains(p.as_str()));
                if hit {
                    *aim = None;
                }
                hit
            };
            if fail {
                return Err(registry::storage::StoreError::Backend {
                    store: "late",
                    key: key.as_str().to_owned(),
                    source: std::io::Error::other("the test failed this write"),
                });
            }
            self.inner.put(key, bytes, mode).await
        })
    }
    fn read<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
    ) -> BoxFuture<'a, StoreResult<(ObjectMeta, BoxReader)>> {
        self.inner.read(key, offset)
    }
    fn read_chunks<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'a, StoreResult<(ObjectMeta, ByteStream)>> {
        self.inner.read_chunks(key, offset, len)
    }
    fn writer<'a>(
        &'a self,
        staging: &'a Key,
        resume_at: Option<u64>,
    ) -> BoxFuture<'a, StoreResult<Box<dyn StoreWriter>>> {
        self.inner.writer(staging, resume_at)
    }
    fn stat<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, StoreResult<ObjectMeta>> {
        self.inner.stat(key)
    }
    fn list<'a>(&'a self, prefix: &'a Key) -> BoxFuture<'a, StoreResult<Vec<Key>>> {
        self.inner.list(prefix)
    }
    fn list_page<'a>(
        &'a self,
        prefix: &'a Key,
        start_after: Option<&'a Key>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Key>>> {
        self.inner.list_page(prefix, start_after, limit)
    }
    fn delete<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(async move {
            match self.take(key) {
                Some(late) => self.late_delete(key, late).await,
                None => self.inner.delete(key).await,
            }
        })
    }
}
