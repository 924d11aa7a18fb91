//! Reconcile passes against the real registry (in-process, loopback port 0) and the real
//! client: pull from an index by platform and os.version, verify, unpack, provision with the
//! `dir` provisioner; broken images create nothing and name the blob; tags that move replace
//! zones; foreign directories are never touched; a restarted worker cleans up and goes on;
//! 401 is final and 5xx is retried, over real TCP.

mod image;
mod tarbuild;

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use image::{Image, Layer, Spec, push_index};
use registry::storage::FsStore;
use registry::{AppState, RegistryConfig, router};
use registry_client::{Client, Reference, Retry};
use serde_json::json;
use tarbuild::{H, Tar};
use validator::Digest;
use worker_runtime::{Phase, Worker, WorkerConfig, ZoneDescription, status};

const OS_VERSION: &str = "omnios-r151054";

struct Registry {
    addr: String,
    dir: tempfile::TempDir,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Registry {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(app: axum::Router) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let task = tokio::spawn(async move {
        axum::serve(listener, app).await.unwrap();
    });
    (addr, task)
}

async fn registry() -> Registry {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let (addr, task) = serve(router(AppState::new(
        Arc::new(store),
        RegistryConfig::default(),
    )))
    .await;
    Registry { addr, dir, task }
}

fn client() -> Client {
    Client::builder()
        .retry(Retry {
            attempts: 4,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(40),
        })
        .build()
        .unwrap()
}

struct Node {
    t: tempfile::TempDir,
}

impl Node {
    fn new() -> Node {
        let t = tempfile::tempdir().unwrap();
        std::fs::create_dir(t.path().join("zones")).unwrap();
        std::fs::write(
            t.path().join("worker.toml"),
            format!(
                "zones_dir = \"zones\"\nstate_dir = \"state\"\nworker_id = \"test-node\"\nos_version = \"{OS_VERSION}\"\nbackoff_initial_secs = 30\ngc_grace_secs = 0\n[provisioner]\nkind = \"dir\"\nbase = \"roots\"\n"
            ),
        )
        .unwrap();
        Node { t }
    }

    fn config_path(&self) -> PathBuf {
        self.t.path().join("worker.toml")
    }

    fn zone(&self, name: &str, image: &str, policy: &str) {
        std::fs::write(
            self.t.path().join("zones").join(format!("{name}.toml")),
            format!("name = \"{name}\"\nimage = \"{image}\"\npull_policy = \"{policy}\"\nstop_timeout_secs = 25\n"),
        )
        .unwrap();
    }

    fn worker(&self) -> Arc<Worker> {
        let cfg = WorkerConfig::load(&self.config_path()).unwrap();
        Arc::new(Worker::new(cfg).unwrap().with_client(client()))
    }

    fn roots(&self) -> PathBuf {
        self.t.path().join("roots")
    }

    fn root(&self, zone: &str) -> PathBuf {
        self.roots().join(zone).join("root")
    }

    fn description(&self, zone: &str) -> ZoneDescription {
        serde_json::from_slice(&std::fs::read(self.roots().join(zone).join("zone.json")).unwrap())
            .unwrap()
    }

    fn status(&self, zone: &str) -> worker_runtime::ZoneStatus {
        status(&self.config_path())
            .unwrap()
            .into_iter()
            .find(|r| r.status.zone == zone)
            .unwrap_or_else(|| panic!("no status row for {zone}"))
            .status
    }

    /// Names in a directory (sorted).
    fn ls(&self, dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }
}

fn base_layer(tag: &str) -> Layer {
    let mut app = H::new(b"usr/bin/app", b'0');
    app.mode = 0o755;
    let body = format!("#!/bin/sh\necho {tag}\n");
    app.size = body.len() as u64;
    Layer::new(
        Tar::new()
            .dir("etc")
            .dir("usr")
            .dir("usr/bin")
            .entry(app, body.as_bytes())
            .symlink("bin", "./usr/bin")
            .file("etc/motd", b"lower motd")
            .finish(),
    )
}

fn top_layer(tag: &str) -> Layer {
    Layer::new(
        Tar::new()
            .whiteout("etc/.wh.motd")
            .file("etc/release", tag.as_bytes())
            .finish(),
    )
}

fn good_image(tag: &str) -> Image {
    image::image(
        vec![base_layer(tag), top_layer(tag)],
        &Spec {
            os_version: Some(OS_VERSION),
            ..Spec::default()
        },
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pulls_from_an_index_verifies_provisions_and_follows_a_moving_tag() {
    let reg = registry().await;
    let c = client();
    let r = Reference::parse(&format!("{}/apps/web:v1", reg.addr)).unwrap();
    let linux = image::image(
        vec![base_layer("linux")],
        &Spec {
            os: "linux",
            ..Spec::default()
        },
    );
    let other_build = image::image(
        vec![base_layer("other")],
        &Spec {
            os_version: Some("omnios-r151046"),
            ..Spec::default()
        },
    );
    let right = good_image("v1");
    let index = push_index(
        &c,
        &r,
        &[
            (&linux, json!({"os": "linux", "architecture": "amd64"})),
            (
                &other_build,
                json!({"os": "illumos", "architecture": "amd64", "os.version": "omnios-r151046"}),
            ),
            (
                &right,
                json!({"os": "illumos", "architecture": "amd64", "os.version": OS_VERSION}),
            ),
        ],
    )
    .await;

    let node = Node::new();
    node.zone("web", &r.to_string(), "Always");
    let w = node.worker();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["web"], "{s:?} {:?}", node.status("web"));

    let root = node.root("web");
    assert_eq!(
        std::fs::read(root.join("usr/bin/app")).unwrap(),
        b"#!/bin/sh\necho v1\n"
    );
    assert_eq!(
        std::fs::read_link(root.join("bin")).unwrap(),
        Path::new("./usr/bin")
    );
    assert!(
        !root.join("etc/motd").exists(),
        "whited out by the top layer"
    );
    assert_eq!(std::fs::read(root.join("etc/release")).unwrap(), b"v1");
    let d = node.description("web");
    assert_eq!(d.manifest_digest, right.manifest_digest());
    assert_eq!(d.stop_signal, "SIGUSR1");
    assert_eq!(d.smf_stop_exec, ":kill -USR1");
    assert_eq!(d.stop_timeout_secs, 25);
    let smf =
        std::fs::read_to_string(root.join("var/svc/manifest/site/rdctl-entrypoint.xml")).unwrap();
    assert!(
        smf.contains("exec=\":kill -USR1\" timeout_seconds=\"25\""),
        "{smf}"
    );
    let st = node.status("web");
    assert_eq!(
        (st.phase, st.current_digest.as_ref()),
        (Phase::Ready, Some(&index))
    );

    // Nothing changes on the next pass.
    let s = w.pass(false).await.unwrap();
    assert_eq!(s.unchanged, ["web"]);

    // The tag moves to a plain manifest: the zone is replaced, nothing is left over.
    let v2 = good_image("v2");
    let d2 = v2.push(&c, &r).await;
    let s = w.pass(false).await.unwrap();
    assert_eq!(s.provisioned, ["web"], "{:?}", node.status("web"));
    assert_eq!(
        std::fs::read(node.root("web").join("etc/release")).unwrap(),
        b"v2"
    );
    assert_eq!(node.status("web").current_digest, Some(d2.clone()));
    assert!(node.ls(&node.roots().join(".trash")).is_empty());
    assert!(node.ls(&node.roots().join(".staging")).is_empty());
    // The replaced root is kept for a rollback.
    assert_eq!(
        node.ls(&node.roots()),
        [
            ".previous",
            ".rdctl-owner",
            ".staging",
            ".trash",
            ".volumes",
            "web"
        ]
    );
    assert_eq!(node.ls(&node.roots().join(".previous")), [".switch", "web"]);
    assert_eq!(node.status("web").previous_digest, Some(index.clone()));
    // Blobs only v1 and the index used are collected (grace 0 here); v2's stay.
    let mut want: Vec<String> = [d2, v2.config_digest()]
        .into_iter()
        .chain(v2.layers.iter().map(Layer::digest))
        .map(|d| d.encoded().to_owned())
        .collect();
    want.sort();
    let blobs = node.t.path().join("state/content/blobs/sha256");
    assert_eq!(node.ls(&blobs), want);
    // The zone's manifest goes: after the grace period (0 here) the zone, its record and its
    // blobs go too.
    std::fs::remove_file(node.t.path().join("zones/web.toml")).unwrap();
    let s = w.pass(false).await.unwrap();
    assert_eq!(s.removed, ["web"]);
    assert_eq!(
        node.ls(&node.roots()),
        [
            ".previous",
            ".rdctl-owner",
            ".staging",
            ".trash",
            ".volumes"
        ]
    );
    assert_eq!(node.ls(&node.roots().join(".previous")), [".switch"]);
    assert!(status(&node.config_path()).unwrap().is_empty());
    assert!(node.ls(&blobs).is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn broken_images_create_nothing_name_the_blob_and_do_not_stop_others() {
    let reg = registry().await;
    let c = client();
    let node = Node::new();
    let push = |name: &'static str, img: Image| {
        let c = c.clone();
        let r = Reference::parse(&format!("{}/apps/{name}:1", reg.addr)).unwrap();
        async move {
            img.push(&c, &r).await;
            r
        }
    };
    // Two good zones.
    for name in ["good1", "good2"] {
        let r = push(name, good_image(name)).await;
        node.zone(name, &r.to_string(), "Always");
    }
    // A layer altered in the registry's storage after the push.
    let altered = good_image("altered");
    let altered_layer = altered.layers[1].digest();
    let r = push("altered", altered).await;
    let hex = altered_layer.encoded();
    let data = reg
        .dir
        .path()
        .join(format!("blobs/sha256/{}/{hex}/data", &hex[..2]));
    let mut bytes = std::fs::read(&data).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&data, bytes).unwrap();
    node.zone("altered", &r.to_string(), "Always");
    // A config whose diff_ids do not match the layers.
    let good = good_image("diffid");
    let wrong = vec![good.layers[0].diff_id(), Digest::sha256(b"not the layer")];
    let diffid = image::image(
        good.layers.clone(),
        &Spec {
            os_version: Some(OS_VERSION),
            diff_ids: Some(wrong),
            ..Spec::default()
        },
    );
    let diffid_layer = diffid.layers[1].digest();
    let r = push("diffid", diffid).await;
    node.zone("diffid", &r.to_string(), "Always");
    // Layer sizes one byte larger than the blobs.
    let size = image::image(
        vec![base_layer("size")],
        &Spec {
            size_delta: 1,
            ..Spec::default()
        },
    );
    let size_layer = size.layers[0].digest();
    let r = push("size", size).await;
    node.zone("size", &r.to_string(), "Always");
    // A layer lost from the registry's storage after the push (the registry refuses manifests
    // whose blobs it lacks, so it has to disappear afterwards).
    let missing = image::image(
        vec![base_layer("missing"), top_layer("missing")],
        &Spec::default(),
    );
    let missing_layer = missing.layers[1].digest();
    let r = push("missing", missing).await;
    let hex = missing_layer.encoded();
    std::fs::remove_file(
        reg.dir
            .path()
            .join(format!("blobs/sha256/{}/{hex}/data", &hex[..2])),
    )
    .unwrap();
    node.zone("missing", &r.to_string(), "Always");

    let w = node.worker();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["good1", "good2"]);
    assert_eq!(s.failed, ["altered", "diffid", "missing", "size"]);
    for (zone, blob, reason) in [
        ("altered", &altered_layer, "digest mismatch"),
        ("diffid", &diffid_layer, "differs from diff_id"),
        ("size", &size_layer, "expected"),
        // Bytes gone under a link are the store's fault: 503 after the registry's re-reads,
        // retried by the worker, then the registry's words in the error.
        (
            "missing",
            &missing_layer,
            "the store did not find its bytes",
        ),
    ] {
        let st = node.status(zone);
        assert_eq!(st.phase, Phase::Failed, "{zone}");
        assert_eq!(st.failed_blob.as_ref(), Some(blob), "{zone}: {st:?}");
        let err = st.last_error.unwrap();
        assert!(err.contains(reason), "{zone}: {err}");
        assert!(
            err.contains(blob.as_str()),
            "{zone}: the error names the blob: {err}"
        );
        assert!(
            !node.roots().join(zone).exists(),
            "{zone}: no zone was created"
        );
        assert!(st.next_attempt_unix.is_some() && st.failures == 1);
    }
    assert!(node.ls(&node.roots().join(".staging")).is_empty());
    assert!(
        node.ls(&node.t.path().join("state/content/ingest"))
            .is_empty()
    );
    // Unverified content never became visible in the store.
    let store_blobs = node.ls(&node.t.path().join("state/content/blobs/sha256"));
    assert!(!store_blobs.contains(&altered_layer.encoded().to_owned()));
    assert!(!store_blobs.contains(&size_layer.encoded().to_owned()));
    // Failed zones back off; good ones are unchanged.
    let s = w.pass(false).await.unwrap();
    assert_eq!(s.backing_off, ["altered", "diffid", "missing", "size"]);
    assert_eq!(s.unchanged, ["good1", "good2"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn foreign_zonepaths_are_refused_and_a_restart_cleans_up() {
    let reg = registry().await;
    let c = client();
    let r = Reference::parse(&format!("{}/apps/web:1", reg.addr)).unwrap();
    good_image("web").push(&c, &r).await;
    let node = Node::new();
    node.zone("web", &r.to_string(), "IfNotPresent");
    node.zone("mine", &r.to_string(), "IfNotPresent");
    let w = node.worker();
    // Someone else's directory where the zone would go.
    let foreign = node.roots().join("web");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("precious"), b"not yours").unwrap();
    let s = w.pass(true).await.unwrap();
    assert_eq!(
        (s.provisioned.as_slice(), s.failed.as_slice()),
        (&["mine".to_owned()][..], &["web".to_owned()][..])
    );
    assert!(
        node.status("web")
            .last_error
            .unwrap()
            .contains("without an rdctl ownership mark")
    );
    assert_eq!(
        std::fs::read(foreign.join("precious")).unwrap(),
        b"not yours"
    );
    assert_eq!(node.ls(&foreign), ["precious"]);

    // A worker whose zones_dir is missing is refused before it creates anything.
    let t = tempfile::tempdir().unwrap();
    std::fs::write(
        t.path().join("worker.toml"),
        "zones_dir = \"no-such-zones\"\nstate_dir = \"state\"\n[provisioner]\nkind = \"dir\"\nbase = \"roots\"\n",
    )
    .unwrap();
    let e = Worker::new(WorkerConfig::load(&t.path().join("worker.toml")).unwrap()).unwrap_err();
    let msg = validator::error_chain(&e);
    assert!(
        msg.starts_with("zones_dir ") && msg.contains("no-such-zones"),
        "{msg}"
    );
    assert_eq!(
        std::fs::read_dir(t.path()).unwrap().count(),
        1,
        "only worker.toml: no state or roots directory was created"
    );

    // A second worker on the same state directory is refused while the first runs.
    let cfg = WorkerConfig::load(&node.config_path()).unwrap();
    let e = Worker::new(cfg).unwrap_err();
    assert!(
        validator::error_chain(&e).contains("another worker is running"),
        "{e:?}"
    );

    // Kill the worker mid-pull: a half-written download and a half-built staging root stay.
    drop(w);
    std::fs::remove_dir_all(&foreign).unwrap();
    let ingest = node.t.path().join("state/content/ingest/deadbeef.partial");
    std::fs::write(&ingest, b"half a blob").unwrap();
    let staging = node.roots().join(".staging/web.1.0");
    std::fs::create_dir_all(staging.join("root/usr")).unwrap();
    std::fs::write(
        staging.join(".rdctl-owner"),
        br#"{"owner":"rdctl-worker","worker_id":"test-node","kind":"staging"}"#,
    )
    .unwrap();
    let w = node.worker();
    assert!(
        !ingest.exists() && !staging.exists(),
        "leftovers removed on start"
    );
    // (`web` failed before, so only a pass that ignores backoff retries it now.)
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["web"]);
    assert_eq!(s.unchanged, ["mine"]);
    assert_eq!(
        node.ls(&node.roots()),
        [
            ".rdctl-owner",
            ".staging",
            ".trash",
            ".volumes",
            "mine",
            "web"
        ]
    );
    assert_eq!(
        std::fs::read(node.root("web").join("etc/release")).unwrap(),
        b"web"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unauthorized_is_final_and_server_errors_are_retried() {
    let hits_401 = Arc::new(AtomicUsize::new(0));
    let hits_500 = Arc::new(AtomicUsize::new(0));
    let answer = |hits: Arc<AtomicUsize>, code: u16| {
        axum::Router::new().fallback(move || {
            let hits = hits.clone();
            async move {
                hits.fetch_add(1, Ordering::SeqCst);
                axum::http::StatusCode::from_u16(code).unwrap()
            }
        })
    };
    let (deny, t1) = serve(answer(hits_401.clone(), 401)).await;
    let (fail, t2) = serve(answer(hits_500.clone(), 500)).await;
    let node = Node::new();
    node.zone("denied", &format!("{deny}/apps/x:1"), "Always");
    node.zone("failing", &format!("{fail}/apps/x:1"), "Always");
    let w = node.worker();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.failed, ["denied", "failing"]);
    assert_eq!(hits_401.load(Ordering::SeqCst), 1, "401 is never retried");
    assert_eq!(
        hits_500.load(Ordering::SeqCst),
        4,
        "500 is retried up to the attempts"
    );
    let denied = node.status("denied").last_error.unwrap();
    // The client names the registry, the status and what to do (log in).
    assert!(
        denied.contains("401 Unauthorized") && denied.contains("log in"),
        "{denied}"
    );
    let failing = node.status("failing").last_error.unwrap();
    assert!(
        failing.contains("still failing after 4 attempts"),
        "{failing}"
    );
    t1.abort();
    t2.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_lists_invalid_manifests_and_pending_zones() {
    let node = Node::new();
    node.zone("later", "127.0.0.1:9/apps/x:1", "Always");
    std::fs::write(
        node.t.path().join("zones/broken.toml"),
        "name = \"x y\"\nimage = \"r/x\"\n",
    )
    .unwrap();
    let rows = status(&node.config_path()).unwrap();
    let phases: Vec<(String, Phase)> = rows
        .iter()
        .map(|r| (r.status.zone.clone(), r.status.phase))
        .collect();
    assert_eq!(
        phases,
        [
            ("broken".to_owned(), Phase::Invalid),
            ("later".to_owned(), Phase::Pending)
        ]
    );
    assert!(
        rows[0]
            .status
            .last_error
            .as_ref()
            .unwrap()
            .contains("not a valid zone name")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zones_asking_for_more_than_is_allocatable_are_unschedulable() {
    let reg = registry().await;
    let c = client();
    let r = Reference::parse(&format!("{}/apps/web:v1", reg.addr)).unwrap();
    good_image("v1").push(&c, &r).await;
    let node = Node::new();
    let cfg = node.config_path();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("{text}[allocatable]\ncpus = 2.0\nmemory = \"1G\"\nzones = 3\n"),
    )
    .unwrap();
    let zone = |name: &str, limits: &str| {
        std::fs::write(
            node.t.path().join("zones").join(format!("{name}.toml")),
            format!("name = \"{name}\"\nimage = \"{r}\"\npull_policy = \"Always\"\n{limits}"),
        )
        .unwrap();
    };
    zone("alpha", "[limits]\ncpus = 1.5\nmemory = \"512m\"\n");
    zone("bravo", "[limits]\ncpus = 1.0\n");
    zone("charlie", "[limits]\ncpus = 4.0\n");
    zone("delta", "[limits]\nmemory = \"2g\"\n");
    zone("echo", "");
    zone("foxtrot", "");
    zone("golf", "");
    let w = node.worker();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["alpha", "echo", "foxtrot"]);
    assert_eq!(s.unschedulable, ["bravo", "charlie", "delta", "golf"]);
    for (z, reason) in [
        (
            "bravo",
            "OutOfcpu: asks for 1 cpus; 1.5 of 2 allocatable are in use",
        ),
        (
            "charlie",
            "OutOfcpu: asks for 4 cpus; the node has 2 allocatable",
        ),
        (
            "delta",
            "OutOfmemory: asks for 2.00 GiB; the node has 1.00 GiB allocatable",
        ),
        ("golf", "OutOfzones: 3 of 3 allocatable zones are in use"),
    ] {
        let st = node.status(z);
        assert_eq!(st.phase, Phase::Unschedulable, "{z}");
        assert_eq!(st.last_error.as_deref(), Some(reason), "{z}");
        // Nothing was made for a zone that was not admitted.
        assert!(!node.roots().join(z).exists(), "{z}");
    }
    let report = worker_runtime::status_report(&cfg).unwrap();
    let n = report.node.expect("the pass wrote the node status");
    assert_eq!(
        n.allocatable,
        worker_runtime::Resources {
            cpus: Some(2.0),
            memory_bytes: Some(1 << 30),
            zones: Some(3),
        }
    );
    assert_eq!(
        n.allocated,
        worker_runtime::Allocated {
            cpus: 1.5,
            memory_bytes: 512 << 20,
            zones: 3,
            volume_bytes: 0,
        }
    );
    assert!(
        n.capacity.cpus.is_some_and(|c| c >= 1.0),
        "{:?}",
        n.capacity
    );
    let json = serde_json::to_value(worker_runtime::status_report(&cfg).unwrap()).unwrap();
    assert_eq!(json["node"]["allocated"]["zones"], 3, "{json}");
    assert_eq!(json["zones"][1]["phase"], "Unschedulable", "{json}");

    // Room is made: the next pass admits what now fits, zones that exist keeping their place.
    std::fs::remove_file(node.t.path().join("zones/alpha.toml")).unwrap();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.removed, ["alpha"]);
    assert_eq!(s.provisioned, ["bravo"]);
    assert_eq!(s.unchanged, ["echo", "foxtrot"]);
    assert_eq!(s.unschedulable, ["charlie", "delta", "golf"]);
    assert_eq!(node.status("bravo").phase, Phase::Ready);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_waiting_out_its_grace_period_holds_its_resources_until_it_is_gone() {
    let reg = registry().await;
    let c = client();
    let r = Reference::parse(&format!("{}/apps/web:v1", reg.addr)).unwrap();
    good_image("v1").push(&c, &r).await;
    let node = Node::new();
    let cfg = node.config_path();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!(
            "{}[allocatable]\ncpus = 2.0\nmemory = \"1G\"\n",
            text.replace("gc_grace_secs = 0", "gc_grace_secs = 3600")
        ),
    )
    .unwrap();
    let zone = |name: &str, limits: &str| {
        std::fs::write(
            node.t.path().join("zones").join(format!("{name}.toml")),
            format!("name = \"{name}\"\nimage = \"{r}\"\npull_policy = \"Always\"\n{limits}"),
        )
        .unwrap();
    };
    let condition = |kind: &str| {
        let json = serde_json::to_value(worker_runtime::status_report(&cfg).unwrap()).unwrap();
        json["node"]["conditions"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["type"] == kind)
            .cloned()
            .unwrap_or_else(|| panic!("no {kind} condition: {json:#}"))
    };
    zone("alpha", "[limits]\ncpus = 1.5\nmemory = \"768m\"\n");
    let w = node.worker();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["alpha"]);
    let ok = condition("ResourcePressure");
    assert_eq!(ok["status"], "False", "{ok:#}");
    // alpha's manifest goes; it waits out gc_grace_secs and still runs meanwhile.
    std::fs::remove_file(node.t.path().join("zones/alpha.toml")).unwrap();
    zone("bravo", "[limits]\ncpus = 1.0\n");
    zone("charlie", "[limits]\nmemory = \"512m\"\n");
    let s = w.pass(true).await.unwrap();
    assert!(s.removed.is_empty());
    assert!(node.root("alpha").is_dir(), "alpha is still there");
    assert_eq!(s.unschedulable, ["bravo", "charlie"]);
    assert_eq!(
        node.status("bravo").last_error.as_deref(),
        Some("OutOfcpu: asks for 1 cpus; 1.5 of 2 allocatable are in use")
    );
    assert_eq!(
        node.status("charlie").last_error.as_deref(),
        Some("OutOfmemory: asks for 0.50 GiB; 0.75 GiB of 1.00 GiB allocatable are in use")
    );
    let report = worker_runtime::status_report(&cfg).unwrap();
    let n = report.node.unwrap();
    assert_eq!(
        n.allocated,
        worker_runtime::Allocated {
            cpus: 1.5,
            memory_bytes: 768 << 20,
            zones: 1,
            volume_bytes: 0,
        }
    );
    let pressure = condition("ResourcePressure");
    assert_eq!(pressure["status"], "True", "{pressure:#}");
    assert_eq!(pressure["reason"], "ZonesNotAdmitted");
    let message = pressure["message"].as_str().unwrap();
    assert!(
        message.contains("bravo: OutOfcpu") && message.contains("charlie: OutOfmemory"),
        "{message}"
    );
    let since = pressure["last_transition_unix"].as_u64().unwrap();
    // Still under pressure on the next pass: the transition time stays.
    w.pass(true).await.unwrap();
    assert_eq!(
        condition("ResourcePressure")["last_transition_unix"].as_u64(),
        Some(since)
    );
    // Once alpha is gone (grace over), what it held is free in the same pass.
    drop(w);
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("gc_grace_secs = 3600", "gc_grace_secs = 0"),
    )
    .unwrap();
    let s = node.worker().pass(true).await.unwrap();
    assert_eq!(s.removed, ["alpha"]);
    assert_eq!(s.provisioned, ["bravo", "charlie"]);
    assert!(s.unschedulable.is_empty());
    assert_eq!(condition("ResourcePressure")["status"], "False");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_policy_never_asks_no_registry_and_uses_only_what_the_node_has() {
    let reg = registry().await;
    let c = client();
    let r = Reference::parse(&format!("{}/apps/web:v1", reg.addr)).unwrap();
    let img = good_image("v1");
    img.push(&c, &r).await;
    let digest = img.manifest_digest();
    let node = Node::new();
    // A tag never resolved here: refused without asking (the registry is unreachable).
    node.zone("fresh", "127.0.0.1:9/apps/web:v1", "Never");
    // The image's blobs come onto the node through another zone.
    node.zone("seed", &r.to_string(), "Always");
    let w = node.worker();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["seed"]);
    assert_eq!(s.failed, ["fresh"]);
    assert_eq!(
        node.status("fresh").last_error.as_deref(),
        Some(
            "pull: ErrImageNeverPull: 127.0.0.1:9/apps/web:v1 names a tag this node never resolved, and pull_policy is Never"
        )
    );
    // The registry goes away: a digest reference whose blobs are in the store is made from
    // them; one whose manifest is not is refused naming it.
    drop(reg);
    let pinned = format!("{}/apps/web@{digest}", r.registry());
    node.zone("pinned", &pinned, "Never");
    let absent = Digest::sha256(b"not on this node");
    node.zone(
        "absent",
        &format!("{}/apps/web@{absent}", r.registry()),
        "Never",
    );
    std::fs::remove_file(node.t.path().join("zones/fresh.toml")).unwrap();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["pinned"]);
    assert_eq!(node.status("pinned").phase, Phase::Ready);
    assert_eq!(
        std::fs::read(node.root("pinned").join("etc/release")).unwrap(),
        b"v1"
    );
    let e = node.status("absent").last_error.unwrap();
    assert_eq!(
        e,
        format!(
            "pull: ErrImageNeverPull: manifest {absent} of {}/apps/web@{absent} is not in the content store and pull_policy is Never",
            r.registry()
        )
    );
    // A zone that exists keeps its image with Never, registry or not.
    node.zone("seed", &r.to_string(), "Never");
    let s = w.pass(true).await.unwrap();
    assert!(s.unchanged.contains(&"seed".to_owned()), "{s:?}");
    assert_eq!(node.status("seed").phase, Phase::Ready);
}

/// `img` with the runtime spec's `solaris` section in its config's labels.
fn with_solaris(mut img: Image, solaris: &str) -> Image {
    let mut config: serde_json::Value = serde_json::from_slice(&img.config).unwrap();
    config["config"]["Labels"] = json!({ "org.reddwarf.zone.solaris": solaris });
    img.config = serde_json::to_vec(&config).unwrap();
    let mut manifest: serde_json::Value = serde_json::from_slice(&img.manifest).unwrap();
    manifest["config"]["digest"] = json!(Digest::sha256(&img.config).to_string());
    manifest["config"]["size"] = json!(img.config.len());
    img.manifest = serde_json::to_vec(&manifest).unwrap();
    img
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_images_solaris_section_becomes_the_zones_config_or_fails_naming_the_field() {
    let reg = registry().await;
    let c = client();
    let good = Reference::parse(&format!("{}/apps/net:v1", reg.addr)).unwrap();
    with_solaris(
        good_image("net"),
        r#"{"cappedCPU": {"ncpus": "4"}, "anet": [{"linkname": "net0", "lowerLink": "igb0", "allowedAddress": "10.0.0.2/24", "defrouter": "10.0.0.1"}]}"#,
    )
    .push(&c, &good)
    .await;
    let bad = Reference::parse(&format!("{}/apps/badnet:v1", reg.addr)).unwrap();
    with_solaris(
        good_image("bad"),
        r#"{"anet": [{"linkname": "net0"}, {"linkname": "net1", "macAddress": "zz"}]}"#,
    )
    .push(&c, &bad)
    .await;
    let node = Node::new();
    let cfg = node.config_path();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!(
            "{text}[zones]\nallowed_lower_links = [\"igb0\"]\nallowed_address_ranges = [\"10.0.0.0/24\"]\n"
        ),
    )
    .unwrap();
    // The operator allows igb0 and 10.0.0.0/24, no more privileges than the default set.
    let escalating = Reference::parse(&format!("{}/apps/priv:v1", reg.addr)).unwrap();
    with_solaris(good_image("priv"), r#"{"limitpriv": "default,sys_admin"}"#)
        .push(&c, &escalating)
        .await;
    node.zone("priv", &escalating.to_string(), "Always");
    std::fs::write(
        node.t.path().join("zones/net.toml"),
        format!("name = \"net\"\nimage = \"{good}\"\n[limits]\ncpus = 1.5\n"),
    )
    .unwrap();
    node.zone("badnet", &bad.to_string(), "Always");
    let s = node.worker().pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["net"]);
    assert_eq!(s.failed, ["badnet", "priv"]);
    assert_eq!(
        node.status("priv").last_error.as_deref(),
        Some(
            "provision: zone priv: image config Labels: org.reddwarf.zone.solaris: solaris.limitpriv: \"sys_admin\" is not in worker.toml zones.allowed_privileges (a zone gets illumos's default set and may only take from it unless the operator allows more)"
        )
    );
    assert!(!node.roots().join("priv").exists(), "nothing made");
    let zonecfg = std::fs::read_to_string(node.roots().join("net/zonecfg.txt")).unwrap();
    // The manifest's cap wins over the image's; the network comes from the image.
    assert!(
        zonecfg.contains("add capped-cpu\nset ncpus=1.5\nend\n")
            && zonecfg.contains(
                "add net\nset physical=net0\nset global-nic=igb0\nset allowed-address=10.0.0.2/24\nset defrouter=10.0.0.1\nend\n"
            ),
        "{zonecfg}"
    );
    assert_eq!(node.description("net").zone_config.nets.len(), 1);
    assert_eq!(
        node.status("badnet").last_error.as_deref(),
        Some(
            "provision: zone badnet: image config Labels: org.reddwarf.zone.solaris: solaris.anet[1].macAddress: \"zz\" is not a MAC address"
        )
    );
    assert!(!node.roots().join("badnet").exists(), "nothing made");
}

/// `limits.disk` on the directory layer store: a plain directory cannot hold a quota, so the
/// zone fails naming the key rather than run without the limit it asked for (the ZFS store
/// sets it: worker-runtime/tests/worker_zfs.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_limit_on_the_directory_store_fails_the_zone_naming_the_key() {
    let reg = registry().await;
    let c = client();
    let r = Reference::parse(&format!("{}/apps/disk:v1", reg.addr)).unwrap();
    good_image("disk").push(&c, &r).await;
    let node = Node::new();
    std::fs::write(
        node.t.path().join("zones/disk.toml"),
        format!("name = \"disk\"\nimage = \"{r}\"\n[limits]\ndisk = \"1G\"\n"),
    )
    .unwrap();
    node.zone("plain", &r.to_string(), "Always");
    let s = node.worker().pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["plain"], "{s:?}");
    assert_eq!(s.failed, ["disk"], "{s:?}");
    let e = node.status("disk").last_error.unwrap_or_default();
    assert!(
        e.contains("limits.disk") && e.contains("[layer_store] kind = \"zfs\""),
        "{e}"
    );
    assert!(!node.roots().join("disk").exists(), "nothing made");
}

/// What the registry saw: blob GETs in flight at once (each held 100 ms so overlaps show) and
/// when each manifest was fetched by digest (the first request of a pull).
#[derive(Default)]
struct Watch {
    /// Blob GETs in flight per repository: one repository is one zone's pull, whose layers
    /// may download several at a time (`max_concurrent_downloads`).
    in_flight: std::sync::Mutex<std::collections::HashMap<String, usize>>,
    /// Most repositories with a blob GET in flight at once: pulls that overlapped.
    peak: AtomicUsize,
    manifest_gets: std::sync::Mutex<Vec<std::time::Instant>>,
    /// The path of every blob GET.
    blob_gets: std::sync::Mutex<Vec<String>>,
}

async fn watched_registry(w: Arc<Watch>) -> Registry {
    let dir = tempfile::tempdir().unwrap();
    let store = FsStore::open(dir.path()).unwrap();
    let app = router(AppState::new(Arc::new(store), RegistryConfig::default())).layer(
        axum::middleware::from_fn(
            move |req: axum::extract::Request, next: axum::middleware::Next| {
                let w = w.clone();
                async move {
                    let path = req.uri().path().to_owned();
                    let get = req.method() == axum::http::Method::GET;
                    if get && path.contains("/manifests/sha256:") {
                        w.manifest_gets
                            .lock()
                            .unwrap()
                            .push(std::time::Instant::now());
                    }
                    if !(get && path.contains("/blobs/")) {
                        return next.run(req).await;
                    }
                    w.blob_gets.lock().unwrap().push(path.clone());
                    let repo = path
                        .trim_start_matches("/v2/")
                        .split("/blobs/")
                        .next()
                        .unwrap_or_default()
                        .to_owned();
                    {
                        let mut m = w.in_flight.lock().unwrap();
                        *m.entry(repo.clone()).or_default() += 1;
                        w.peak.fetch_max(m.len(), Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    let r = next.run(req).await;
                    {
                        let mut m = w.in_flight.lock().unwrap();
                        let n = m.get_mut(&repo).expect("counted above");
                        *n -= 1;
                        if *n == 0 {
                            m.remove(&repo);
                        }
                    }
                    r
                }
            },
        ),
    );
    let (addr, task) = serve(app).await;
    Registry { addr, dir, task }
}

impl Node {
    /// Adds top-level keys to worker.toml.
    fn configure(&self, keys: &str) {
        let p = self.config_path();
        let text = std::fs::read_to_string(&p).unwrap();
        std::fs::write(
            &p,
            text.replace("[provisioner]", &format!("{keys}[provisioner]")),
        )
        .unwrap();
    }
}

/// Three zones of three images behind a watched registry, one pass with `keys`; what the
/// registry saw.
async fn three_pulls(keys: &str) -> Arc<Watch> {
    let w = Arc::new(Watch::default());
    let reg = watched_registry(w.clone()).await;
    let c = client();
    let node = Node::new();
    node.configure(keys);
    for z in ["a", "b", "c"] {
        let r = Reference::parse(&format!("{}/apps/{z}:v1", reg.addr)).unwrap();
        good_image(z).push(&c, &r).await;
        node.zone(z, &r.to_string(), "Always");
    }
    w.peak.store(0, Ordering::SeqCst);
    w.manifest_gets.lock().unwrap().clear();
    let s = node.worker().pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["a", "b", "c"], "{keys}");
    for z in ["a", "b", "c"] {
        // The pull's bytes are in the zone's status: all of them, and more than nothing.
        let p = node.status(z).pull.expect("pull progress recorded");
        assert!(
            p.total_bytes > 0 && p.done_bytes == p.total_bytes,
            "{z}: {p:?}"
        );
    }
    w
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pull_controls_are_observed_at_the_registry() {
    // Without a cap three pulls overlap at the registry (the measurement can see it)...
    let free = three_pulls("").await;
    assert!(
        free.peak.load(Ordering::SeqCst) >= 2,
        "pulls never overlapped"
    );
    // ...with max_parallel_pulls = 1 they never do.
    let capped = three_pulls("max_parallel_pulls = 1\n").await;
    assert_eq!(capped.peak.load(Ordering::SeqCst), 1);
    // registry_pull_qps = 4 with a burst of 1: pulls start at least 250 ms apart.
    let limited = three_pulls("registry_pull_qps = 4.0\nregistry_burst = 1\n").await;
    let mut t = limited.manifest_gets.lock().unwrap().clone();
    t.sort();
    assert_eq!(t.len(), 3, "{t:?}");
    for pair in t.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= Duration::from_millis(230), "pulls {gap:?} apart");
    }
}

/// Disk usage as a fixed total with `other` bytes used besides the content store's blobs.
struct FakeDisk {
    store: PathBuf,
    total: u64,
    other: u64,
}

impl worker_runtime::DiskUsage for FakeDisk {
    fn space(&self, _path: &Path) -> std::io::Result<worker_runtime::DiskSpace> {
        let mut used = self.other;
        for alg in ["sha256", "sha512"] {
            for e in std::fs::read_dir(self.store.join("blobs").join(alg))? {
                used += e?.metadata()?.len();
            }
        }
        Ok(worker_runtime::DiskSpace {
            total: self.total,
            available: self.total.saturating_sub(used),
        })
    }
}

fn blobs(node: &Node) -> std::collections::BTreeSet<String> {
    let dir = node.t.path().join("state/content/blobs/sha256");
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| format!("sha256:{}", e.unwrap().file_name().to_string_lossy()))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn image_gc_by_disk_usage_keeps_every_blob_in_use() {
    let reg = registry().await;
    let c = client();
    let node = Node::new();
    // gc_grace_secs is long: only the disk thresholds can remove anything.
    let cfg = node.config_path();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        text.replace("gc_grace_secs = 0", "gc_grace_secs = 86400"),
    )
    .unwrap();
    node.configure(
        "image_gc_high_percent = 85\nimage_gc_low_percent = 80\nimage_minimum_gc_age_secs = 0\n",
    );
    let (a, b, c2) = (good_image("a"), good_image("b"), good_image("c"));
    let ra = Reference::parse(&format!("{}/apps/a:v1", reg.addr)).unwrap();
    let rb = Reference::parse(&format!("{}/apps/b:v1", reg.addr)).unwrap();
    let rc = Reference::parse(&format!("{}/apps/c:v1", reg.addr)).unwrap();
    a.push(&c, &ra).await;
    b.push(&c, &rb).await;
    c2.push(&c, &rc).await;
    node.zone("one", &ra.to_string(), "Always");
    node.zone("two", &rb.to_string(), "Always");
    let disk = |other| {
        Arc::new(FakeDisk {
            store: node.t.path().join("state/content"),
            total: 1 << 20,
            other,
        })
    };
    // Below the high threshold nothing goes; `two` then moves to image c, leaving b unused.
    let cfgv = WorkerConfig::load(&cfg).unwrap();
    let w = Arc::new(
        Worker::new(cfgv.clone())
            .unwrap()
            .with_client(client())
            .with_disk_usage(disk(0)),
    );
    w.pass(true).await.unwrap();
    let disk_pressure = || {
        let n = worker_runtime::status_report(&cfg).unwrap().node.unwrap();
        n.conditions
            .into_iter()
            .find(|c| c.kind == worker_runtime::ConditionType::DiskPressure)
            .expect("a DiskPressure condition")
    };
    let c0 = disk_pressure();
    assert_eq!(c0.status, worker_runtime::ConditionStatus::False, "{c0:?}");
    assert_eq!(c0.reason, "KubeletHasNoDiskPressure");
    let with_b = blobs(&node);
    node.zone("two", &rc.to_string(), "Always");
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["two"]);
    assert_eq!(
        blobs(&node).len(),
        with_b.len() + 4,
        "b's blobs kept below the threshold"
    );
    // The replacement's downtime is in the zone's status.
    assert!(node.status("two").replace_downtime_ms.is_some());
    let in_use = |n: &Node| {
        let mut keep = std::collections::BTreeSet::new();
        for z in ["one", "two"] {
            let d = n.description(z);
            keep.insert(d.manifest_digest.to_string());
            keep.insert(d.config_digest.to_string());
        }
        keep
    };
    drop(w);
    // At 95 % used (others fill the disk), every unused blob goes; nothing in use does.
    let w = Arc::new(
        Worker::new(cfgv)
            .unwrap()
            .with_client(client())
            .with_disk_usage(disk(995 << 10)),
    );
    let before = blobs(&node);
    w.pass(true).await.unwrap();
    let after = blobs(&node);
    assert!(after.len() < before.len(), "nothing was collected");
    for d in in_use(&node) {
        assert!(after.contains(&d), "{d} is in use and was removed");
    }
    // Every layer of the images the zones run is still there, and the zones still verify.
    for img in [&a, &c2] {
        for l in &img.layers {
            assert!(
                after.contains(&l.digest().to_string()),
                "a layer in use was removed"
            );
        }
    }
    // What only b used is gone: its manifest, config and layers.
    let b_blobs = [b.manifest_digest(), b.config_digest()]
        .into_iter()
        .chain(b.layers.iter().map(Layer::digest));
    for d in b_blobs {
        assert!(
            !after.contains(&d.to_string()),
            "{d} of the unused image survived"
        );
    }
    assert_eq!(after.len(), before.len() - 4);
    // Still above the high threshold after GC (others fill the disk): DiskPressure.
    let c1 = disk_pressure();
    assert_eq!(c1.status, worker_runtime::ConditionStatus::True, "{c1:?}");
    assert_eq!(c1.reason, "KubeletHasDiskPressure");
    assert!(c1.message.contains("image_gc_high_percent = 85"), "{c1:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_capped_only_by_its_images_label_holds_those_caps() {
    let reg = registry().await;
    let c = client();
    let r = Reference::parse(&format!("{}/apps/capped:v1", reg.addr)).unwrap();
    with_solaris(
        good_image("capped"),
        r#"{"cappedCPU": {"ncpus": "1.5"}, "cappedMemory": {"physical": "768m"}}"#,
    )
    .push(&c, &r)
    .await;
    let node = Node::new();
    let cfg = node.config_path();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(
        &cfg,
        format!("{text}[allocatable]\ncpus = 2.0\nmemory = \"1G\"\n"),
    )
    .unwrap();
    // No [limits]: the image's label alone caps the zone.
    node.zone("alpha", &r.to_string(), "Always");
    let w = node.worker();
    assert_eq!(w.pass(true).await.unwrap().provisioned, ["alpha"]);
    std::fs::write(
        node.t.path().join("zones/bravo.toml"),
        format!("name = \"bravo\"\nimage = \"{r}\"\n[limits]\ncpus = 1.0\n"),
    )
    .unwrap();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.unschedulable, ["bravo"]);
    assert_eq!(
        node.status("bravo").last_error.as_deref(),
        Some("OutOfcpu: asks for 1 cpus; 1.5 of 2 allocatable are in use")
    );
    let n = worker_runtime::status_report(&cfg).unwrap().node.unwrap();
    assert_eq!(
        n.allocated,
        worker_runtime::Allocated {
            cpus: 1.5,
            memory_bytes: 768 << 20,
            zones: 1,
            volume_bytes: 0,
        }
    );
}

/// Issue 36: two new zones without `[limits]` whose images each cap 4 CPUs, on a node that may
/// give 6. Both are admitted on their manifests (no caps, so no CPUs); once the images are in,
/// the first by admission order takes 4 and the other would overcommit the node: it is not
/// made, and is `Unschedulable` naming its image's cap and what is left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn images_caps_count_against_what_zones_admitted_in_the_same_pass_left() {
    let reg = registry().await;
    let c = client();
    let r = Reference::parse(&format!("{}/apps/four:v1", reg.addr)).unwrap();
    with_solaris(good_image("four"), r#"{"cappedCPU": {"ncpus": "4"}}"#)
        .push(&c, &r)
        .await;
    let node = Node::new();
    let cfg = node.config_path();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{text}[allocatable]\ncpus = 6.0\n")).unwrap();
    node.zone("alpha", &r.to_string(), "Always");
    node.zone("bravo", &r.to_string(), "Always");
    let w = node.worker();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["alpha"], "{s:?}");
    assert_eq!(s.unschedulable, ["bravo"], "{s:?}");
    assert!(s.failed.is_empty(), "{s:?}");
    assert!(node.root("alpha").is_dir());
    assert!(
        !node.roots().join("bravo").exists(),
        "nothing is made for bravo"
    );
    let st = node.status("bravo");
    assert_eq!(st.phase, Phase::Unschedulable);
    assert_eq!(
        st.last_error.as_deref(),
        Some("OutOfcpu: the image caps the zone at 4 cpus; 2 of 6 allocatable are left")
    );
    let n = worker_runtime::status_report(&cfg).unwrap().node.unwrap();
    assert_eq!(
        n.allocated,
        worker_runtime::Allocated {
            cpus: 4.0,
            memory_bytes: 0,
            zones: 1,
            volume_bytes: 0,
        }
    );
    let pressure = n
        .conditions
        .iter()
        .find(|c| c.kind == worker_runtime::ConditionType::ResourcePressure)
        .expect("a ResourcePressure condition");
    assert_eq!(pressure.status, worker_runtime::ConditionStatus::True);
    assert!(
        pressure.message.contains("bravo: OutOfcpu"),
        "{}",
        pressure.message
    );
    // The next pass: alpha exists and holds its image's caps; bravo is admitted on its
    // manifest again and refused again once its image is in.
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.unchanged, ["alpha"], "{s:?}");
    assert_eq!(s.unschedulable, ["bravo"], "{s:?}");
}

/// Issue 36: a zone re-created with an image whose caps are larger takes the difference only
/// when it is left; refused, it keeps running its current image and what it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_image_asking_for_more_than_is_left_leaves_the_zone_on_its_image() {
    let reg = registry().await;
    let c = client();
    let r = Reference::parse(&format!("{}/apps/grow:v1", reg.addr)).unwrap();
    let two = with_solaris(good_image("two"), r#"{"cappedCPU": {"ncpus": "2"}}"#);
    two.push(&c, &r).await;
    let node = Node::new();
    let cfg = node.config_path();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{text}[allocatable]\ncpus = 6.0\n")).unwrap();
    node.zone("alpha", &r.to_string(), "Always");
    std::fs::write(
        node.t.path().join("zones/bravo.toml"),
        format!("name = \"bravo\"\nimage = \"{r}\"\n[limits]\ncpus = 3.0\n"),
    )
    .unwrap();
    let w = node.worker();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["alpha", "bravo"], "{s:?}");
    // The tag moves to an image capped at 4 CPUs: alpha would need 4 beside bravo's 3.
    with_solaris(good_image("four"), r#"{"cappedCPU": {"ncpus": "4"}}"#)
        .push(&c, &r)
        .await;
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.unschedulable, ["alpha"], "{s:?}");
    let st = node.status("alpha");
    assert_eq!(st.phase, Phase::Unschedulable);
    assert_eq!(
        st.last_error.as_deref(),
        Some("OutOfcpu: the image caps the zone at 4 cpus; 3 of 6 allocatable are left")
    );
    assert_eq!(st.current_digest, Some(two.manifest_digest()));
    assert_eq!(
        node.description("alpha").manifest_digest,
        two.manifest_digest()
    );
    assert_eq!(
        std::fs::read(node.root("alpha").join("etc/release")).unwrap(),
        b"two"
    );
    let n = worker_runtime::status_report(&cfg).unwrap().node.unwrap();
    assert_eq!(
        n.allocated,
        worker_runtime::Allocated {
            cpus: 5.0,
            memory_bytes: 0,
            zones: 2,
            volume_bytes: 0,
        }
    );
}

/// Issue 36: a zone its image's caps kept out is decided again, on the next pass, from its
/// image's manifest and config before any layer is fetched: with the layers gone from the
/// content store (the node's `gc_grace_secs = 0`), the refused zone's next pass fetches none of them. Once
/// there is room, the same check lets it through and it is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_refused_for_its_images_caps_is_not_pulled_again_while_it_does_not_fit() {
    let w = Arc::new(Watch::default());
    let reg = watched_registry(w.clone()).await;
    let c = client();
    let node = Node::new();
    let cfg = node.config_path();
    let text = std::fs::read_to_string(&cfg).unwrap();
    std::fs::write(&cfg, format!("{text}[allocatable]\ncpus = 6.0\n")).unwrap();
    let mut layers = Vec::new();
    for z in ["alpha", "bravo"] {
        let r = Reference::parse(&format!("{}/apps/{z}:v1", reg.addr)).unwrap();
        let img = with_solaris(good_image(z), r#"{"cappedCPU": {"ncpus": "4"}}"#);
        img.push(&c, &r).await;
        if z == "bravo" {
            layers = img.layers.iter().map(|l| l.digest().to_string()).collect();
        }
        node.zone(z, &r.to_string(), "Always");
    }
    let worker = node.worker();
    let s = worker.pass(false).await.unwrap();
    assert_eq!(s.provisioned, ["alpha"], "{s:?}");
    assert_eq!(s.unschedulable, ["bravo"], "{s:?}");
    let refused = node.status("bravo");
    let bravo_layer_gets = |w: &Watch| -> Vec<String> {
        w.blob_gets
            .lock()
            .unwrap()
            .iter()
            .filter(|p| layers.iter().any(|d| p.ends_with(d.as_str())))
            .cloned()
            .collect()
    };
    assert_eq!(
        bravo_layer_gets(&w).len(),
        2,
        "the first pass pulls bravo's image"
    );
    w.blob_gets.lock().unwrap().clear();
    for _ in 0..2 {
        let s = worker.pass(false).await.unwrap();
        assert_eq!(s.unschedulable, ["bravo"], "{s:?}");
        let st = node.status("bravo");
        assert_eq!(st.phase, Phase::Unschedulable);
        assert_eq!(st.last_error, refused.last_error);
        assert_eq!(st.desired_digest, refused.desired_digest);
    }
    assert_eq!(
        bravo_layer_gets(&w),
        Vec::<String>::new(),
        "no layer of the refused image is fetched again"
    );
    assert!(
        !node.roots().join("bravo").exists(),
        "nothing is made for bravo"
    );
    // alpha goes (its grace period is 0 s): bravo fits, is pulled and made.
    std::fs::remove_file(node.t.path().join("zones/alpha.toml")).unwrap();
    let s = worker.pass(false).await.unwrap();
    assert_eq!(s.removed, ["alpha"], "{s:?}");
    assert_eq!(s.provisioned, ["bravo"], "{s:?}");
    assert_eq!(
        bravo_layer_gets(&w).len(),
        2,
        "{:?}",
        w.blob_gets.lock().unwrap()
    );
    assert_eq!(
        std::fs::read(node.root("bravo").join("etc/release")).unwrap(),
        b"bravo"
    );
}
