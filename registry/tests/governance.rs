//! Governance on both stores (a filesystem store in a temp dir, the S3 store on SeaweedFS from
//! `s3-fixtures`), each with two replicas: two registries served over TCP in process, each with
//! its own store instance on the same directory or bucket, configured from one TOML file.
//!
//! - immutable tags: moving a `[[immutable]]` tag is `DENIED` naming the rule, re-pushing the
//!   same digest succeeds, and of 8 racing pushes to one new immutable tag through both
//!   replicas exactly one wins; with `[auth]`, deleting one needs the delete right;
//! - quotas: 8 concurrent pushes through both replicas never pass `max_manifests`, a byte
//!   limit refuses a push with `DENIED` before it is acknowledged, deletes and garbage
//!   collection give the room back, and a recount equals the document the pushes kept;
//! - retention: two policies (newest N and kept tags; pulled within) combine so that keeping
//!   wins, immutable tags and signed manifests stay, an index keeps its children, the dry run
//!   lists exactly what the real run (on the other replica) removes, and garbage collection
//!   then reclaims the bytes.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use registry::gc::GcOptions;
use registry::governance::quota;
use registry::storage::{FsStore, Key, S3Config, S3Store, Store};
use registry::{AppState, RegistryConfig, ServeConfig, router};
use registry_client::Client;
use validator::{Digest, Name};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const INDEX: &str = "application/vnd.oci.image.index.v1+json";
const CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const LAYER: &str = "application/vnd.oci.image.layer.v1.tar";

/// Opens one more store instance on the same data (a replica's own client of the store).
type StoreFactory = Box<dyn Fn() -> Arc<dyn Store> + Send + Sync>;

fn fs_stores() -> (StoreFactory, Option<tempfile::TempDir>) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_owned();
    (
        Box::new(move || Arc::new(FsStore::open(&path).unwrap()) as Arc<dyn Store>),
        Some(dir),
    )
}

fn s3_stores() -> (StoreFactory, Option<tempfile::TempDir>) {
    let sw = s3_fixtures::SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"));
    let bucket = sw.bucket().unwrap_or_else(|e| panic!("{e}"));
    let endpoint = sw.endpoint();
    (
        Box::new(move || {
            Arc::new(S3Store::new(
                S3Config::new(&endpoint, &bucket).prefix("reg"),
            )) as Arc<dyn Store>
        }),
        None,
    )
}

/// One replica served on a loopback port.
struct Replica {
    addr: SocketAddr,
    state: AppState,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Replica {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Two replicas over one store, and a third store instance for looking behind their backs.
struct Cluster {
    a: Replica,
    b: Replica,
    store: Arc<dyn Store>,
    config: ServeConfig,
    client: Client,
    _dir: Option<tempfile::TempDir>,
}

async fn cluster(stores: (StoreFactory, Option<tempfile::TempDir>), toml: &str) -> Cluster {
    let (open, dir) = stores;
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), toml).unwrap();
    let config = ServeConfig::load_with_env(Some(file.path()), &|_| None).unwrap();
    let replica = |store: Arc<dyn Store>| {
        let config = RegistryConfig {
            governance: Arc::new(config.governance.clone()),
            ..RegistryConfig::default()
        };
        async move {
            let state = AppState::new(store, config);
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let addr = listener.local_addr().unwrap();
            let app = router(state.clone());
            let task = tokio::spawn(async move {
                axum::serve(listener, app).await.unwrap();
            });
            Replica { addr, state, task }
        }
    };
    Cluster {
        a: replica(open()).await,
        b: replica(open()).await,
        store: open(),
        config,
        client: Client::builder()
            .timeout(Duration::from_secs(60))
            .build()
            .unwrap(),
        _dir: dir,
    }
}

fn desc(media_type: &str, data: &[u8]) -> serde_json::Value {
    serde_json::json!({"mediaType": media_type, "digest": Digest::sha256(data), "size": data.len()})
}

fn bytes(tag: &str, n: usize) -> Vec<u8> {
    let mut v = tag.as_bytes().to_vec();
    v.resize(n.max(tag.len()), b'.');
    v
}

/// An image: config and layers, and its manifest (optionally a referrer of `subject`).
struct Image {
    blobs: Vec<Vec<u8>>,
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
        let mut blobs = vec![config];
        blobs.extend(layers);
        Image {
            blobs,
            manifest: Bytes::from(serde_json::to_vec(&m).unwrap()),
        }
    }

    /// A small image whose content is unique to `seed`.
    fn unique(seed: &str) -> Image {
        Image::new(
            bytes(&format!("config {seed}"), 50),
            vec![bytes(&format!("layer {seed}"), 500)],
            None,
        )
    }

    fn digest(&self) -> Digest {
        Digest::sha256(&self.manifest)
    }
}

/// Status, OCI error code and detail of an answer.
#[derive(Debug)]
struct Answer {
    status: u16,
    code: Option<String>,
    /// `errors[0].message`: what skopeo, podman and docker print.
    message: String,
    detail: String,
}

impl Cluster {
    fn replica(&self, i: usize) -> &Replica {
        if i.is_multiple_of(2) {
            &self.a
        } else {
            &self.b
        }
    }

    async fn push_blobs(&self, r: &Replica, repo: &str, img: &Image) {
        let name = Name::parse(repo).unwrap();
        for b in &img.blobs {
            let d = Digest::sha256(b);
            self.client
                .push_blob(&r.addr.to_string(), &name, &d, b.len() as u64, b.as_slice())
                .await
                .unwrap_or_else(|e| panic!("{repo}: blob {d}: {e}"));
        }
    }

    async fn request(
        &self,
        r: &Replica,
        method: reqwest::Method,
        path: &str,
        body: Option<(&str, Bytes)>,
    ) -> Answer {
        let mut req = reqwest::Client::new()
            .request(method, format!("http://{}{path}", r.addr))
            .header("accept", format!("{MANIFEST}, {INDEX}"));
        if let Some((ct, b)) = body {
            req = req.header("content-type", ct).body(b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let body = resp.bytes().await.unwrap();
        let v = serde_json::from_slice::<serde_json::Value>(&body).ok();
        Answer {
            status,
            code: v
                .as_ref()
                .and_then(|v| v["errors"][0]["code"].as_str().map(str::to_owned)),
            message: v
                .as_ref()
                .and_then(|v| v["errors"][0]["message"].as_str().map(str::to_owned))
                .unwrap_or_default(),
            detail: v
                .as_ref()
                .and_then(|v| v["errors"][0]["detail"].as_str().map(str::to_owned))
                .unwrap_or_default(),
        }
    }

    async fn put_manifest(
        &self,
        r: &Replica,
        repo: &str,
        reference: &str,
        mt: &str,
        m: &Bytes,
    ) -> Answer {
        self.request(
            r,
            reqwest::Method::PUT,
            &format!("/v2/{repo}/manifests/{reference}"),
            Some((mt, m.clone())),
        )
        .await
    }

    /// Pushes an image's blobs and manifest through replica `r`.
    async fn push(&self, r: &Replica, repo: &str, reference: &str, img: &Image) -> Answer {
        self.push_blobs(r, repo, img).await;
        self.put_manifest(r, repo, reference, MANIFEST, &img.manifest)
            .await
    }

    async fn get(&self, r: &Replica, repo: &str, reference: &str) -> Answer {
        self.request(
            r,
            reqwest::Method::GET,
            &format!("/v2/{repo}/manifests/{reference}"),
            None,
        )
        .await
    }

    /// The digest `reference` resolves to through replica `r`, or the error code.
    async fn resolve(&self, r: &Replica, repo: &str, reference: &str) -> Result<Digest, String> {
        let resp = reqwest::Client::new()
            .head(format!("http://{}/v2/{repo}/manifests/{reference}", r.addr))
            .header("accept", format!("{MANIFEST}, {INDEX}"))
            .send()
            .await
            .unwrap();
        match resp.status().as_u16() {
            200 => Ok(
                Digest::parse(resp.headers()["docker-content-digest"].to_str().unwrap()).unwrap(),
            ),
            s => Err(s.to_string()),
        }
    }

    async fn usage(&self, repo: &str, recount: bool) -> quota::Usage {
        quota::report(self.store.clone(), &self.config.governance, recount)
            .await
            .unwrap()
            .into_iter()
            .find(|u| u.repository == repo)
            .unwrap_or_else(|| panic!("{repo} has no usage"))
    }

    async fn blob_stored(&self, data: &[u8]) -> bool {
        let d = Digest::sha256(data);
        let key = Key::new(format!(
            "blobs/sha256/{}/{}/data",
            &d.encoded()[..2],
            d.encoded()
        ))
        .unwrap();
        match self.store.stat(&key).await {
            Ok(_) => true,
            Err(e) if e.is_not_found() => false,
            Err(e) => panic!("{e}"),
        }
    }
}

// ---- immutable tags ----

async fn immutable_tags(stores: (StoreFactory, Option<tempfile::TempDir>)) {
    let c = cluster(
        stores,
        "[[immutable]]\nrepositories = [\"prod/**\"]\ntags = [\"v*\"]\n",
    )
    .await;
    let (one, two) = (Image::unique("one"), Image::unique("two"));
    let r = c.push(&c.a, "prod/app", "v1", &one).await;
    assert_eq!(r.status, 201, "{r:?}");
    // Moving it through the other replica is refused, naming the rule; nothing moved.
    let r = c.push(&c.b, "prod/app", "v1", &two).await;
    assert_eq!(
        (r.status, r.code.as_deref()),
        (403, Some("DENIED")),
        "{r:?}"
    );
    assert!(
        r.detail
            .contains(r#"immutable[0] (repositories ["prod/**"], tags ["v*"])"#),
        "{}",
        r.detail
    );
    // The reason is also the message, the field containers/image and docker print.
    assert!(
        r.message.contains("is immutable under immutable[0]"),
        "{}",
        r.message
    );
    assert_eq!(c.resolve(&c.a, "prod/app", "v1").await, Ok(one.digest()));
    // The same digest again succeeds; so does a tag no rule covers, and a repository no
    // rule covers.
    assert_eq!(c.push(&c.b, "prod/app", "v1", &one).await.status, 201);
    assert_eq!(c.push(&c.a, "prod/app", "latest", &one).await.status, 201);
    assert_eq!(c.push(&c.b, "prod/app", "latest", &two).await.status, 201);
    assert_eq!(c.push(&c.a, "dev/app", "v1", &one).await.status, 201);
    assert_eq!(c.push(&c.a, "dev/app", "v1", &two).await.status, 201);
    // `?tag=` on a PUT by digest is checked too.
    let r = c
        .put_manifest(
            &c.a,
            "prod/app",
            &format!("{}?tag=v1", two.digest()),
            MANIFEST,
            &two.manifest,
        )
        .await;
    assert_eq!(
        (r.status, r.code.as_deref()),
        (403, Some("DENIED")),
        "{r:?}"
    );

    // 8 racing pushes of different images to one new immutable tag, through both replicas:
    // exactly one wins and both replicas agree on it.
    let images: Vec<Image> = (0..8)
        .map(|i| Image::unique(&format!("race {i}")))
        .collect();
    for (i, img) in images.iter().enumerate() {
        c.push_blobs(c.replica(i), "prod/app", img).await;
    }
    let answers =
        futures_util::future::join_all(images.iter().enumerate().map(|(i, img)| {
            c.put_manifest(c.replica(i), "prod/app", "v2", MANIFEST, &img.manifest)
        }))
        .await;
    let winners: Vec<usize> = (0..8).filter(|i| answers[*i].status == 201).collect();
    assert_eq!(winners.len(), 1, "{answers:?}");
    for (i, a) in answers.iter().enumerate() {
        if i != winners[0] {
            assert_eq!(
                (a.status, a.code.as_deref()),
                (403, Some("DENIED")),
                "{a:?}"
            );
        }
    }
    let winner = images[winners[0]].digest();
    assert_eq!(c.resolve(&c.a, "prod/app", "v2").await, Ok(winner.clone()));
    assert_eq!(c.resolve(&c.b, "prod/app", "v2").await, Ok(winner));

    // Deleting needs the delete right (no [auth] here: everyone has it) and is allowed.
    let r = c
        .request(
            &c.b,
            reqwest::Method::DELETE,
            "/v2/prod/app/manifests/v1",
            None,
        )
        .await;
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(c.resolve(&c.a, "prod/app", "v1").await, Err("404".into()));
    // Once deleted, the tag may be set again, to anything.
    assert_eq!(c.push(&c.a, "prod/app", "v1", &two).await.status, 201);
}

/// `protect_delete = true` (Harbor's behaviour): a covered tag cannot be deleted, nor the
/// manifest it points at, even by a caller with the delete right; `DENIED` names the rule in
/// `message`. A rule without it, and tags no protecting rule covers, delete as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn protect_delete_refuses_deleting_an_immutable_tag_and_its_manifest() {
    let c = cluster(
        fs_stores(),
        "[[immutable]]\nrepositories = [\"prod/**\"]\ntags = [\"v*\"]\nprotect_delete = true\n\
         [[immutable]]\nrepositories = [\"dev/**\"]\ntags = [\"v*\"]\n",
    )
    .await;
    let img = Image::unique("protected");
    assert_eq!(c.push(&c.a, "prod/app", "v1", &img).await.status, 201);
    assert_eq!(c.push(&c.a, "prod/app", "latest", &img).await.status, 201);
    let c = &c;
    let delete =
        |path: String| async move { c.request(&c.b, reqwest::Method::DELETE, &path, None).await };
    for reference in ["v1".to_owned(), img.digest().to_string()] {
        let r = delete(format!("/v2/prod/app/manifests/{reference}")).await;
        assert_eq!(
            (r.status, r.code.as_deref()),
            (403, Some("DENIED")),
            "{reference}: {r:?}"
        );
        assert!(
            r.message.contains("tag v1 of prod/app")
                && r.message.contains("immutable[0]")
                && r.message.contains("protect_delete"),
            "{}",
            r.message
        );
        assert_eq!(c.resolve(&c.a, "prod/app", "v1").await, Ok(img.digest()));
        assert_eq!(
            c.resolve(&c.a, "prod/app", img.digest().as_str()).await,
            Ok(img.digest())
        );
    }
    // A tag no rule covers still goes; the protected one stays.
    assert_eq!(
        delete("/v2/prod/app/manifests/latest".to_owned())
            .await
            .status,
        202
    );
    assert_eq!(c.resolve(&c.a, "prod/app", "v1").await, Ok(img.digest()));
    // Without protect_delete the default is unchanged: the delete right suffices.
    assert_eq!(c.push(&c.a, "dev/app", "v1", &img).await.status, 201);
    assert_eq!(
        delete("/v2/dev/app/manifests/v1".to_owned()).await.status,
        202
    );
    assert_eq!(c.resolve(&c.a, "dev/app", "v1").await, Err("404".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_immutable_tags() {
    immutable_tags(fs_stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_immutable_tags() {
    immutable_tags(s3_stores()).await;
}

// ---- quotas ----

async fn quotas(stores: (StoreFactory, Option<tempfile::TempDir>)) {
    let c = cluster(
        stores,
        "[[quota]]\nrepositories = [\"team/*\"]\nmax_manifests = 5\n\
         [[quota]]\nrepositories = [\"small/**\"]\nmax_bytes = 2000\n",
    )
    .await;
    // 8 images sharing one layer, pushed concurrently through both replicas.
    let shared = bytes("shared layer", 700);
    let images: Vec<Image> = (0..8)
        .map(|i| {
            Image::new(
                bytes(&format!("config {i}"), 60),
                vec![shared.clone(), bytes(&format!("own {i}"), 100)],
                None,
            )
        })
        .collect();
    for (i, img) in images.iter().enumerate() {
        c.push_blobs(c.replica(i), "team/app", img).await;
    }
    let answers = futures_util::future::join_all(images.iter().enumerate().map(|(i, img)| {
        let (c, tag) = (&c, format!("t{i}"));
        async move {
            c.put_manifest(c.replica(i), "team/app", &tag, MANIFEST, &img.manifest)
                .await
        }
    }))
    .await;
    let ok: Vec<usize> = (0..8).filter(|i| answers[*i].status == 201).collect();
    assert_eq!(ok.len(), 5, "{answers:?}");
    for (i, a) in answers.iter().enumerate() {
        if !ok.contains(&i) {
            assert_eq!(
                (a.status, a.code.as_deref()),
                (403, Some("DENIED")),
                "{a:?}"
            );
            assert!(
                a.message.contains("quota[0]") && a.message.contains("limit of 5"),
                "{a:?}"
            );
            assert!(
                a.detail.contains("quota[0]") && a.detail.contains("limit of 5"),
                "{}",
                a.detail
            );
            // Refused before acknowledging: the tag does not exist.
            assert_eq!(
                c.resolve(&c.a, "team/app", &format!("t{i}")).await,
                Err("404".into())
            );
        }
    }
    // Unique content: the shared layer once.
    let expected_bytes: u64 = ok
        .iter()
        .map(|i| {
            let img = &images[*i];
            (img.manifest.len() + img.blobs[0].len() + img.blobs[2].len()) as u64
        })
        .sum::<u64>()
        + shared.len() as u64;
    let u = c.usage("team/app", false).await;
    assert_eq!(
        (u.manifests, u.bytes, u.max_manifests),
        (5, expected_bytes, Some(5))
    );
    assert!(u.tracked);
    assert_eq!(
        c.usage("team/app", true).await,
        u,
        "a recount equals the kept document"
    );
    let metrics = format!(
        "{}{}",
        c.a.state.metrics().render(),
        c.b.state.metrics().render()
    );
    let denied: u64 = metrics
        .lines()
        .filter_map(|l| l.strip_prefix("registry_quota_denied_total "))
        .map(|n| n.parse::<u64>().unwrap())
        .sum();
    assert_eq!(denied, 3, "{metrics}");
    assert!(metrics.contains("registry_quota_usage_manifests{repository=\"team/app\"}"));

    // At the limit, re-pushing a counted manifest (a new tag) still works; a new one does not.
    let first = &images[ok[0]];
    assert_eq!(
        c.put_manifest(&c.b, "team/app", "again", MANIFEST, &first.manifest)
            .await
            .status,
        201
    );
    let refused = &images[(0..8).find(|i| !ok.contains(i)).unwrap()];
    assert_eq!(
        c.put_manifest(&c.a, "team/app", "late", MANIFEST, &refused.manifest)
            .await
            .status,
        403
    );
    // A delete gives the room back.
    let r = c
        .request(
            &c.a,
            reqwest::Method::DELETE,
            &format!("/v2/team/app/manifests/{}", first.digest()),
            None,
        )
        .await;
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(c.usage("team/app", false).await.manifests, 4);
    assert_eq!(
        c.put_manifest(&c.b, "team/app", "late", MANIFEST, &refused.manifest)
            .await
            .status,
        201
    );
    assert_eq!(c.usage("team/app", false).await.manifests, 5);

    // So does garbage collection of an untagged manifest.
    let late = refused.digest();
    let r = c
        .request(
            &c.a,
            reqwest::Method::DELETE,
            "/v2/team/app/manifests/late",
            None,
        )
        .await;
    assert_eq!(r.status, 202, "{r:?}");
    assert_eq!(
        c.usage("team/app", false).await.manifests,
        5,
        "an untagged manifest counts"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let report =
        c.a.state
            .collect_garbage(&GcOptions {
                grace: Duration::ZERO,
                delete_untagged: true,
                ..GcOptions::default()
            })
            .await
            .unwrap();
    assert!(
        report
            .deleted
            .iter()
            .any(|d| d.digest == late && d.repository.as_deref() == Some("team/app")),
        "{report:?}"
    );
    let after = c.usage("team/app", false).await;
    assert_eq!(after.manifests, 4);
    assert_eq!(
        c.usage("team/app", true).await,
        after,
        "a recount agrees after GC"
    );

    // A byte limit: the first image fits, the second would pass 2000 bytes and is refused.
    let fits = Image::new(
        bytes("small config", 100),
        vec![bytes("small layer", 1200)],
        None,
    );
    let big = Image::new(
        bytes("big config", 100),
        vec![bytes("big layer", 900)],
        None,
    );
    assert_eq!(c.push(&c.a, "small/x", "a", &fits).await.status, 201);
    let r = c.push(&c.b, "small/x", "b", &big).await;
    assert_eq!(
        (r.status, r.code.as_deref()),
        (403, Some("DENIED")),
        "{r:?}"
    );
    assert!(
        r.detail
            .contains("bytes, over the limit of 2000 set by quota[1]"),
        "{}",
        r.detail
    );
    assert_eq!(c.resolve(&c.a, "small/x", "b").await, Err("404".into()));
}

/// A manifest PUT that failed after reserving its quota (a store error writing its link, a
/// replica stopped) leaves an entry without a link in the usage document. A push refused for
/// the limit drops such entries that are older than `quota::PENDING_GRACE` (one listing of the
/// repository's links) and tries again, so failed pushes cannot keep a repository at its limit
/// until someone runs `rdctl registry usage --recount`; a younger one (a PUT still running)
/// stays counted.
async fn failed_reservations(stores: (StoreFactory, Option<tempfile::TempDir>)) {
    let c = cluster(
        stores,
        "[[quota]]\nrepositories = [\"team/*\"]\nmax_manifests = 3\n",
    )
    .await;
    let img = |i: usize| {
        Image::new(
            bytes(&format!("config {i}"), 60),
            vec![bytes(&format!("layer {i}"), 100)],
            None,
        )
    };
    assert_eq!(c.push(&c.a, "team/app", "one", &img(1)).await.status, 201);
    // The state two failed PUTs leave: one 11 minutes ago, one just now.
    let key = registry::storage::layout::repository_usage(&Name::parse("team/app").unwrap());
    let mut doc: serde_json::Value =
        serde_json::from_slice(&c.store.get(&key, 1 << 20).await.unwrap().bytes).unwrap();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let (failed, running) = (
        Digest::sha256(b"failed long ago"),
        Digest::sha256(b"running"),
    );
    let since = now - quota::PENDING_GRACE.as_secs() - 60;
    doc["entries"][failed.as_str()] = serde_json::json!({"size": 500, "blobs": {}, "at": since});
    doc["entries"][running.as_str()] = serde_json::json!({"size": 500, "blobs": {}, "at": now});
    doc["manifests"] = 3.into();
    doc["bytes"] = (doc["bytes"].as_u64().unwrap() + 1000).into();
    let put = c
        .store
        .put(
            &key,
            Bytes::from(serde_json::to_vec(&doc).unwrap()),
            registry::storage::PutMode::Overwrite,
        )
        .await;
    put.unwrap();
    assert_eq!(c.usage("team/app", false).await.manifests, 3);
    let r = c.push(&c.b, "team/app", "two", &img(2)).await;
    assert_eq!(
        r.status, 201,
        "the failed PUT's reservation held the quota: {r:?}"
    );
    let after = c.usage("team/app", false).await;
    assert_eq!(after.manifests, 3, "one, two and the PUT still running");
    let r = c.push(&c.a, "team/app", "three", &img(3)).await;
    assert_eq!(
        (r.status, r.code.as_deref()),
        (403, Some("DENIED")),
        "{r:?}"
    );
    assert_eq!(c.usage("team/app", false).await, after);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_failed_reservations() {
    failed_reservations(fs_stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_failed_reservations() {
    failed_reservations(s3_stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_quotas() {
    quotas(fs_stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_quotas() {
    quotas(s3_stores()).await;
}

// ---- retention ----

async fn retention(stores: (StoreFactory, Option<tempfile::TempDir>)) {
    let c = cluster(
        stores,
        "[[immutable]]\nrepositories = [\"builds/**\"]\ntags = [\"frozen\"]\n\
         [[retention]]\nrepositories = [\"builds/**\"]\nkeep_newest = 2\nkeep_tags = [\"v*\"]\n\
         [[retention]]\nrepositories = [\"builds/**\"]\nkeep_pulled_within = \"1h\"\n",
    )
    .await;
    let repo = "builds/app";
    let img = |s: &str| Image::unique(s);
    let (signed, pulled, gone, release, frozen, child, n1) = (
        img("signed"),
        img("pulled"),
        img("gone"),
        img("release"),
        img("frozen"),
        img("child"),
        img("n1"),
    );
    // Older pushes.
    for (tag, i) in [
        ("t-signed", &signed),
        ("t-pulled", &pulled),
        ("t-gone", &gone),
        ("v1", &release),
        ("old-release", &release),
        ("frozen", &frozen),
        ("c", &child),
    ] {
        assert_eq!(
            c.push(c.replica(tag.len()), repo, tag, i).await.status,
            201,
            "{tag}"
        );
    }
    let sig = Image::new(
        bytes("sig config", 30),
        vec![bytes("sig", 40)],
        Some(&signed.manifest),
    );
    assert_eq!(
        c.push(&c.a, repo, &sig.digest().to_string(), &sig)
            .await
            .status,
        201
    );
    // Pulled through replica b, recorded in memory there and flushed in one write.
    assert_eq!(c.get(&c.b, repo, "t-pulled").await.status, 200);
    assert_eq!(c.b.state.flush_pulls().await.unwrap(), 1);
    // Store times may have one-second resolution: the newer pushes come strictly later.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(c.push(&c.b, repo, "n1", &n1).await.status, 201);
    let index = Bytes::from(
        serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": INDEX,
            "manifests": [desc(MANIFEST, &child.manifest)],
        }))
        .unwrap(),
    );
    assert_eq!(
        c.put_manifest(&c.a, repo, "idx", INDEX, &index)
            .await
            .status,
        201
    );
    // A repository no policy matches is never touched.
    assert_eq!(c.push(&c.a, "other/app", "t-gone", &gone).await.status, 201);

    let dry = c.a.state.apply_retention(true).await.unwrap();
    assert!(dry.dry_run);
    let tags: Vec<(&str, &str, Digest)> = dry
        .tags
        .iter()
        .map(|t| (t.repository.as_str(), t.tag.as_str(), t.digest.clone()))
        .collect();
    assert_eq!(
        tags,
        vec![
            (repo, "c", child.digest()),
            (repo, "old-release", release.digest()),
            (repo, "t-gone", gone.digest()),
        ],
        "{dry:#?}"
    );
    for t in &dry.tags {
        assert!(
            t.reason.contains("retention[0]: ") && t.reason.contains("; retention[1]: "),
            "both policies give their reason: {}",
            t.reason
        );
    }
    // Only the manifest whose last tag goes: not the release (v1 keeps it), not the child
    // (the index keeps it).
    let manifests: Vec<Digest> = dry.manifests.iter().map(|m| m.digest.clone()).collect();
    assert_eq!(manifests, vec![gone.digest()]);
    // The dry run changed nothing.
    assert_eq!(c.resolve(&c.b, repo, "t-gone").await, Ok(gone.digest()));

    // The real run, on the other replica, removes exactly what the dry run listed.
    let real = c.b.state.apply_retention(false).await.unwrap();
    assert!(!real.dry_run);
    assert_eq!(real.skipped, 0);
    let real_tags: Vec<(&str, &str, Digest)> = real
        .tags
        .iter()
        .map(|t| (t.repository.as_str(), t.tag.as_str(), t.digest.clone()))
        .collect();
    assert_eq!(real_tags, tags);
    assert_eq!(real.manifests, dry.manifests);

    for tag in ["c", "old-release", "t-gone"] {
        assert_eq!(c.resolve(&c.a, repo, tag).await, Err("404".into()), "{tag}");
    }
    for (tag, i) in [
        ("t-signed", &signed),
        ("t-pulled", &pulled),
        ("v1", &release),
        ("frozen", &frozen),
        ("n1", &n1),
    ] {
        assert_eq!(c.resolve(&c.a, repo, tag).await, Ok(i.digest()), "{tag}");
    }
    assert_eq!(
        c.resolve(&c.a, repo, &child.digest().to_string()).await,
        Ok(child.digest())
    );
    assert_eq!(
        c.resolve(&c.a, repo, &gone.digest().to_string()).await,
        Err("404".into())
    );
    assert_eq!(
        c.resolve(&c.a, "other/app", "t-gone").await,
        Ok(gone.digest())
    );
    // A second run finds nothing more.
    let again = c.a.state.apply_retention(true).await.unwrap();
    assert!(
        again.tags.is_empty() && again.manifests.is_empty(),
        "{again:#?}"
    );

    // Garbage collection then reclaims the removed image's bytes (only in builds/app: the
    // same bytes in other/app stay), once they are older than its grace window.
    c.request(
        &c.a,
        reqwest::Method::DELETE,
        "/v2/other/app/manifests/t-gone",
        None,
    )
    .await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let report =
        c.a.state
            .collect_garbage(&GcOptions {
                grace: Duration::ZERO,
                delete_untagged: true,
                ..GcOptions::default()
            })
            .await
            .unwrap();
    assert!(report.deleted_bytes > 0, "{report:?}");
    for b in &gone.blobs {
        assert!(
            !c.blob_stored(b).await,
            "a blob of the removed image is still stored"
        );
    }
    for b in &release.blobs {
        assert!(c.blob_stored(b).await, "a kept image's blob was collected");
    }
    let metrics = c.b.state.metrics().render();
    assert!(
        metrics.contains("registry_retention_removed_total{kind=\"tag\"} 3"),
        "{metrics}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_retention() {
    retention(fs_stores()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_retention() {
    retention(s3_stores()).await;
}

/// With `[auth]`, deleting an immutable tag needs the delete right: a caller with push only is
/// refused and the tag stays; one with delete removes it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_an_immutable_tag_needs_the_delete_right() {
    let dir = tempfile::tempdir().unwrap();
    let users = dir.path().join("htpasswd");
    let mut htpasswd = String::new();
    for u in ["pusher", "admin"] {
        htpasswd.push_str(&format!(
            "{u}:{}\n",
            bcrypt::hash(format!("{u}-pw"), 4).unwrap()
        ));
    }
    std::fs::write(&users, htpasswd).unwrap();
    let file = dir.path().join("registry.toml");
    std::fs::write(
        &file,
        format!(
            "[auth]\nrealm = \"test\"\nhtpasswd = \"{}\"\n\n\
             [[auth.acl]]\nsubjects = [\"pusher\"]\nrepositories = [\"prod/*\"]\nactions = [\"pull\", \"push\"]\n\n\
             [[auth.acl]]\nsubjects = [\"admin\"]\nrepositories = [\"prod/*\"]\nactions = [\"*\"]\n\n\
             [[immutable]]\nrepositories = [\"prod/*\"]\ntags = [\"v*\"]\n",
            users.display()
        ),
    )
    .unwrap();
    let config = ServeConfig::load_with_env(Some(&file), &|_| None).unwrap();
    let auth = registry::auth::Auth::load(config.auth.as_ref().unwrap()).unwrap();
    let data = dir.path().join("data");
    let state = AppState::new(
        Arc::new(FsStore::open(&data).unwrap()),
        RegistryConfig {
            auth: Some(Arc::new(auth)),
            governance: Arc::new(config.governance.clone()),
            ..RegistryConfig::default()
        },
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = router(state);
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    let http = reqwest::Client::new();
    let call =
        |method: reqwest::Method, who: &str, path: String, ct: Option<&str>, body: Vec<u8>| {
            let mut req = http
                .request(method, format!("http://{addr}{path}"))
                .basic_auth(who, Some(format!("{who}-pw")))
                .body(body);
            if let Some(ct) = ct {
                req = req.header("content-type", ct);
            }
            async move { req.send().await.unwrap().status().as_u16() }
        };
    let img = Image::unique("guarded");
    for b in &img.blobs {
        let d = Digest::sha256(b);
        let st = call(
            reqwest::Method::POST,
            "pusher",
            format!("/v2/prod/app/blobs/uploads/?digest={d}"),
            Some("application/octet-stream"),
            b.clone(),
        )
        .await;
        assert_eq!(st, 201);
    }
    let put = |who| {
        call(
            reqwest::Method::PUT,
            who,
            "/v2/prod/app/manifests/v1".to_owned(),
            Some(MANIFEST),
            img.manifest.to_vec(),
        )
    };
    assert_eq!(put("pusher").await, 201);
    let get = |who| {
        call(
            reqwest::Method::GET,
            who,
            "/v2/prod/app/manifests/v1".to_owned(),
            None,
            vec![],
        )
    };
    let delete = |who| {
        call(
            reqwest::Method::DELETE,
            who,
            "/v2/prod/app/manifests/v1".to_owned(),
            None,
            vec![],
        )
    };
    let refused = delete("pusher").await;
    assert!(refused == 401 || refused == 403, "{refused}");
    assert_eq!(
        get("pusher").await,
        200,
        "the tag survived a delete without the right"
    );
    assert_eq!(delete("admin").await, 202);
    assert_eq!(get("pusher").await, 404);
    task.abort();
}

#[test]
fn bad_rules_name_their_key() {
    for (toml, key) in [
        (
            "[[immutable]]\nrepositories = [\"a\"]\ntags = []\n",
            "immutable[0].tags",
        ),
        (
            "[[immutable]]\nrepositories = []\ntags = [\"v*\"]\n",
            "immutable[0].repositories",
        ),
        (
            "[[quota]]\nrepositories = [\"Bad\"]\n",
            "quota[0].repositories[0]",
        ),
        ("[[retention]]\nrepositories = [\"a\"]\n", "retention[0]"),
        // A value the TOML reader refuses is named as config-toml names it: file, line, key
        // path (array entries by index) and the value.
        (
            "[[retention]]\nrepositories = [\"a\"]\nolder_than = \"soon\"\n",
            "line 3: retention.0.older_than: \"soon\"",
        ),
        (
            "[[retention]]\nrepositories = [\"a\"]\nkeep_newest = 1\nkeep_tags = [\"a/b\"]\n",
            "retention[0].keep_tags[0]",
        ),
    ] {
        let file = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(file.path(), toml).unwrap();
        let e = ServeConfig::load_with_env(Some(file.path()), &|_| None).unwrap_err();
        let chain = validator::error_chain(&e);
        let want = if key.starts_with("line ") {
            key.to_owned()
        } else {
            format!("invalid {key}:")
        };
        assert!(chain.contains(&want), "{toml}: {chain}");
    }
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), "[pulls]\nflush_interval = \"5s\"\n").unwrap();
    let c = ServeConfig::load_with_env(Some(file.path()), &|_| None).unwrap();
    assert_eq!(c.pull_flush_interval, Duration::from_secs(5));
}
