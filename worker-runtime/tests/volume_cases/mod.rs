//! Volume cases run on every layer store (`volumes.rs` on the directory store,
//! `worker_zfs.rs` on zfs-fuse): one expectation, each store, as the worker reaches them
//! through the in-process registry.
//!
//! The image declares `Volumes` `/var/hello`, whose content in the image (owner 1234:5678,
//! mode 0750, a file 0640) seeds the volume on first use. "The zone writes" means writing into
//! the volume's source directory, which is what the zone's lofs mount of it shows.

#![allow(dead_code)]

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use registry::storage::FsStore;
use registry::{AppState, RegistryConfig, router};
use registry_client::{Client, Reference, Retry};
use serde_json::json;
use validator::{Digest, Document, check_config, check_document};
use worker_runtime::volume::AttachedVolume;
use worker_runtime::{
    ContentStore, DirProvisioner, ProvisionError, Provisioner, PulledImage, StepHook,
    UnpackOptions, Worker, WorkerConfig, ZoneDescription, ZoneSpec, build_root, load_zone,
};

use super::image::{self, Image, Layer, Spec};
use super::tarbuild::{H, Tar};

pub const OS_VERSION: &str = "omnios-r151054";
/// The image's volume.
pub const HELLO: &str = "/var/hello";

/// An image whose root has `etc/release` = `tag` and `/var/hello` (1234:5678, 0750) holding
/// `greeting` (0640, "hello from <tag>"), with `Volumes` `/var/hello`.
pub fn volume_image(tag: &str) -> Image {
    let mut dir = H::new(b"var/hello", b'5');
    (dir.mode, dir.uid, dir.gid) = (0o750, 1234, 5678);
    let body = format!("hello from {tag}");
    let mut greeting = H::new(b"var/hello/greeting", b'0');
    (greeting.mode, greeting.uid, greeting.gid) = (0o640, 1234, 5678);
    greeting.size = body.len() as u64;
    let tar = Tar::new()
        .dir("etc")
        .file("etc/release", tag.as_bytes())
        .dir("var")
        .entry(dir, &[])
        .entry(greeting, body.as_bytes())
        .dir("srv")
        .finish();
    let mut img = image::image(
        vec![Layer::new(tar)],
        &Spec {
            os_version: Some(OS_VERSION),
            ..Spec::default()
        },
    );
    let mut config: serde_json::Value = serde_json::from_slice(&img.config).unwrap();
    config["config"]["Volumes"] = json!({ HELLO: {} });
    img.config = serde_json::to_vec(&config).unwrap();
    let mut manifest: serde_json::Value = serde_json::from_slice(&img.manifest).unwrap();
    manifest["config"]["digest"] = json!(Digest::sha256(&img.config).to_string());
    manifest["config"]["size"] = json!(img.config.len());
    img.manifest = serde_json::to_vec(&manifest).unwrap();
    img
}

/// A registry, a worker directory whose worker.toml ends with `store` (the `[layer_store]`
/// table, or nothing for the directory store) and the tag `apps/vol:latest`.
pub struct Node {
    pub dir: tempfile::TempDir,
    pub reference: Reference,
    pub client: Client,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Node {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Node {
    pub async fn new(store: &str) -> Node {
        let dir = tempfile::tempdir().unwrap();
        let fs = FsStore::open(dir.path().join("registry")).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let app = router(AppState::new(Arc::new(fs), RegistryConfig::default()));
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = Client::builder()
            .retry(Retry {
                attempts: 4,
                base_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(40),
            })
            .build()
            .unwrap();
        let t = dir.path();
        std::fs::create_dir(t.join("zones")).unwrap();
        std::fs::write(
            t.join("worker.toml"),
            format!(
                "zones_dir = \"zones\"\nstate_dir = \"state\"\nworker_id = \"vol-node\"\nos_version = \"{OS_VERSION}\"\ngc_grace = \"0s\"\nplain_http = true\n[provisioner]\nkind = \"dir\"\nbase = \"roots\"\n{store}"
            ),
        )
        .unwrap();
        Node {
            reference: Reference::parse(&format!("{addr}/apps/vol:latest")).unwrap(),
            dir,
            client,
            task,
        }
    }

    /// Pushes `volume_image(tag)` under the tag.
    pub async fn push(&self, tag: &str) -> Digest {
        volume_image(tag).push(&self.client, &self.reference).await
    }

    /// Writes zone `name`'s manifest: the tag, `pull_policy = "Always"`, then `extra`.
    pub fn zone(&self, name: &str, extra: &str) {
        std::fs::write(
            self.dir.path().join("zones").join(format!("{name}.toml")),
            format!(
                "name = \"{name}\"\nimage = \"{}\"\npull_policy = \"Always\"\n{extra}",
                self.reference
            ),
        )
        .unwrap();
    }

    pub fn remove_zone(&self, name: &str) {
        std::fs::remove_file(self.dir.path().join("zones").join(format!("{name}.toml"))).unwrap();
    }

    pub fn worker(&self) -> Arc<Worker> {
        let cfg = WorkerConfig::load(&self.config()).unwrap();
        Arc::new(Worker::new(cfg).unwrap().with_client(self.client.clone()))
    }

    pub fn config(&self) -> PathBuf {
        self.dir.path().join("worker.toml")
    }

    pub fn base(&self) -> PathBuf {
        self.dir.path().join("roots")
    }

    pub fn description(&self, zone: &str) -> ZoneDescription {
        let p = self.base().join(zone).join("zone.json");
        serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
    }

    /// The zone's volume at `path`, from its description.
    pub fn volume(&self, zone: &str, path: &str) -> AttachedVolume {
        let d = self.description(zone);
        d.volumes
            .iter()
            .find(|v| v.path == path)
            .unwrap_or_else(|| panic!("zone {zone} has no volume at {path}: {:?}", d.volumes))
            .clone()
    }

    /// The volumes `rdctl worker status` shows.
    pub fn status_volumes(&self) -> Vec<worker_runtime::volume::VolumeRecord> {
        worker_runtime::status_report(&self.config())
            .unwrap()
            .node
            .expect("a node status after a pass")
            .volumes
    }
}

/// Runs one pass and checks that exactly `provisioned` were made, naming the errors.
pub async fn pass(w: &Arc<Worker>, provisioned: &[&str]) -> worker_runtime::PassSummary {
    let s = w.pass(true).await.unwrap();
    let want: Vec<String> = provisioned.iter().map(|z| (*z).to_owned()).collect();
    let errors: Vec<Option<String>> = s
        .failed
        .iter()
        .map(|z| {
            let dir = &w.config().state_dir;
            let p = dir.join("zones").join(format!("{z}.json"));
            let st: worker_runtime::ZoneStatus =
                serde_json::from_slice(&std::fs::read(p).unwrap()).unwrap();
            st.last_error
        })
        .collect();
    assert_eq!(s.provisioned, want, "{s:?}: {errors:?}");
    assert!(s.failed.is_empty(), "{s:?}");
    s
}

fn mode_owner(p: &Path) -> (u32, u32, u32) {
    let m = std::fs::symlink_metadata(p).unwrap();
    (m.mode() & 0o7777, m.uid(), m.gid())
}

/// The image's volume is seeded from the image (content, owner, mode), mounted with `add fs`
/// lofs, and what the zone writes there survives three image updates (each replacing the
/// zone's root: the old zonepath is destroyed) and a worker restart; the seed is never
/// applied again. Also a manifest volume `webdata` (of `size` when given) at a path the image
/// has nothing at (empty, 0755). Returns the node for store-specific checks.
pub async fn data_survives_updates_and_restart(store: &str, size: Option<&str>) -> Node {
    let node = Node::new(store).await;
    node.push("v1").await;
    let size = size.map_or(String::new(), |s| format!("size = \"{s}\"\n"));
    node.zone(
        "web",
        &format!("[[volumes]]\npath = \"/srv/data\"\nname = \"webdata\"\n{size}"),
    );
    let w = node.worker();
    pass(&w, &["web"]).await;
    let hello = node.volume("web", HELLO);
    assert_eq!(hello.id, "web.var-hello");
    let src = &hello.source;
    assert!(
        !src.starts_with(node.base().join("web")),
        "the volume lives outside the zonepath: {}",
        src.display()
    );
    assert_eq!(
        std::fs::read_to_string(src.join("greeting")).unwrap(),
        "hello from v1"
    );
    if rustix::process::geteuid().is_root() {
        assert_eq!(mode_owner(src), (0o750, 1234, 5678));
        assert_eq!(mode_owner(&src.join("greeting")), (0o640, 1234, 5678));
    } else {
        assert_eq!(mode_owner(src).0, 0o750);
        assert_eq!(mode_owner(&src.join("greeting")).0, 0o640);
    }
    let data = node.volume("web", "/srv/data");
    assert_eq!(data.id, "webdata");
    assert_eq!(mode_owner(&data.source).0, 0o755);
    assert_eq!(std::fs::read_dir(&data.source).unwrap().count(), 0);
    let zonecfg = std::fs::read_to_string(node.base().join("web/zonecfg.txt")).unwrap();
    assert!(
        zonecfg.contains(&format!(
            "add fs\nset dir=/var/hello\nset special={}\nset type=lofs\nend\n",
            src.display()
        )),
        "{zonecfg}"
    );
    // The zone writes its state.
    std::fs::write(src.join("state"), b"counter=1").unwrap();
    std::fs::write(src.join("greeting"), b"changed by the zone").unwrap();
    std::fs::write(data.source.join("db"), b"rows").unwrap();
    for tag in ["v2", "v3", "v4"] {
        node.push(tag).await;
        pass(&w, &["web"]).await;
        let root = node.base().join("web/root");
        assert_eq!(
            std::fs::read(root.join("etc/release")).unwrap(),
            tag.as_bytes()
        );
        assert_eq!(node.volume("web", HELLO), hello, "{tag}");
        assert_eq!(
            std::fs::read(src.join("state")).unwrap(),
            b"counter=1",
            "{tag}"
        );
        assert_eq!(
            std::fs::read(src.join("greeting")).unwrap(),
            b"changed by the zone",
            "{tag}: the seed is not applied again"
        );
        assert_eq!(
            std::fs::read(data.source.join("db")).unwrap(),
            b"rows",
            "{tag}"
        );
    }
    drop(w);
    let w = node.worker();
    let s = pass(&w, &[]).await;
    assert_eq!(s.unchanged, vec!["web".to_owned()], "{s:?}");
    assert_eq!(std::fs::read(src.join("state")).unwrap(), b"counter=1");
    assert_eq!(std::fs::read(data.source.join("db")).unwrap(), b"rows");
    let listed = node.status_volumes();
    let ids: Vec<(&str, &str, Option<u64>)> = listed
        .iter()
        .map(|v| (v.id.as_str(), v.zone.as_str(), v.released_unix))
        .collect();
    assert_eq!(
        ids,
        vec![("web.var-hello", "web", None), ("webdata", "web", None)]
    );
    node
}

/// Reclaim both ways: the manifest of `keep` (default `retain`) and of `drop` (`reclaim =
/// "delete"`) are removed; after `gc_grace` (0 here) both zones are gone, `keep`'s volume
/// stays with its data and is listed as released, `drop`'s is removed. `keep` coming back gets
/// its volume again, data and all, not seeded again.
pub async fn reclaim_both_ways(store: &str) -> Node {
    let node = Node::new(store).await;
    node.push("v1").await;
    node.zone("keep", "");
    node.zone("drop", "reclaim = \"delete\"\n");
    let w = node.worker();
    pass(&w, &["drop", "keep"]).await;
    let kept = node.volume("keep", HELLO);
    let dropped = node.volume("drop", HELLO);
    std::fs::write(kept.source.join("state"), b"keep me").unwrap();
    std::fs::write(dropped.source.join("state"), b"drop me").unwrap();
    node.remove_zone("keep");
    node.remove_zone("drop");
    let s = w.pass(true).await.unwrap();
    assert_eq!(
        s.removed,
        vec!["drop".to_owned(), "keep".to_owned()],
        "{s:?}"
    );
    assert!(!node.base().join("keep").exists());
    assert_eq!(
        std::fs::read(kept.source.join("state")).unwrap(),
        b"keep me"
    );
    assert!(
        !dropped.source.exists() && !dropped.source.parent().unwrap().exists(),
        "{} is removed",
        dropped.source.display()
    );
    let listed = node.status_volumes();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].id, "keep.var-hello");
    assert!(listed[0].released_unix.is_some(), "{listed:?}");
    // It comes back: the retained volume is attached again as it was.
    node.zone("keep", "");
    pass(&w, &["keep"]).await;
    assert_eq!(node.volume("keep", HELLO), kept);
    assert_eq!(
        std::fs::read(kept.source.join("state")).unwrap(),
        b"keep me"
    );
    assert_eq!(
        std::fs::read(kept.source.join("greeting")).unwrap(),
        b"hello from v1"
    );
    let listed = node.status_volumes();
    assert_eq!(listed.len(), 1, "{listed:?}");
    assert_eq!(listed[0].released_unix, None, "{listed:?}");
    node
}

/// `volume_image(tag)` with its blobs in `store`, as the worker holds a pulled image.
pub fn pulled(store: &ContentStore, tag: &str) -> PulledImage {
    let img = volume_image(tag);
    for l in &img.layers {
        store.put_bytes(&l.digest(), &l.blob).unwrap();
    }
    let (r, doc) = check_document(&img.manifest, None, None, "manifest");
    let Some(Document::Manifest(manifest)) = doc else {
        panic!("{r}")
    };
    let (r, config) = check_config(&img.config, Some(1), "config");
    PulledImage {
        manifest_digest: img.manifest_digest(),
        manifest: *manifest,
        config_digest: img.config_digest(),
        config: config.unwrap_or_else(|| panic!("{r}")),
    }
}

/// Opens a provisioner with volumes, as a start would, with an optional step hook.
pub type Opener = Box<dyn Fn(Option<StepHook>) -> DirProvisioner>;

/// A worker killed before any step of making a zone with a volume (creating, seeding,
/// publishing the seed, recording it, placing the zonepath) and started again makes the
/// zone with the whole seed, never half of one; and once the zone wrote into its volume, a
/// kill before any step of replacing the zone with a new image loses nothing of it.
/// `fresh(label)` gives the opener of a new, empty base for each run.
pub fn crash_at_any_step_converges(fresh: &dyn Fn(&str) -> Opener) {
    let t = tempfile::tempdir().unwrap();
    let store = ContentStore::open(&t.path().join("content"), "node-a").unwrap();
    std::fs::write(
        t.path().join("web.toml"),
        "name = \"web\"\nimage = \"r.example/apps/vol:1\"\n",
    )
    .unwrap();
    let spec: ZoneSpec = load_zone(&t.path().join("web.toml")).unwrap();
    let (v1, v2) = (pulled(&store, "v1"), pulled(&store, "v2"));
    let seen_steps = std::sync::Mutex::new(Vec::new());
    for replace in [false, true] {
        for k in 0.. {
            let open = fresh(&format!("{replace}-{k}"));
            let root = |p: &DirProvisioner, img: &PulledImage| {
                let staging = p.staging_dir().join(format!("r{k}.{}", rand_n()));
                build_root(&store, &staging, "node-a", img, &UnpackOptions::default()).unwrap()
            };
            if replace {
                let p = open(None);
                let d = p.provision(&spec, root(&p, &v1)).unwrap();
                std::fs::write(d.volumes[0].source.join("state"), b"written by the zone").unwrap();
            }
            let seen = Arc::new(AtomicUsize::new(0));
            let names = Arc::new(std::sync::Mutex::new(Vec::new()));
            let (s2, n2) = (seen.clone(), names.clone());
            let hook: StepHook = Arc::new(move |_: &str, step: &str| {
                n2.lock().unwrap().push(step.to_owned());
                s2.fetch_add(1, Ordering::SeqCst) == k
            });
            let p = open(Some(hook.clone()));
            let img = if replace { &v2 } else { &v1 };
            let r = p.provision(&spec, root(&p, img));
            let crashed = seen.load(Ordering::SeqCst) > k;
            if crashed {
                assert!(
                    matches!(r, Err(ProvisionError::Interrupted { .. })),
                    "{r:?}"
                );
                drop(p);
                // The next start and pass.
                let p = open(None);
                p.provision(&spec, root(&p, img)).unwrap();
            } else {
                r.unwrap();
            }
            let p = open(None);
            let d = p.current("web").unwrap().unwrap();
            let src = &d.volumes[0].source;
            assert_eq!(
                std::fs::read_to_string(src.join("greeting")).unwrap(),
                "hello from v1",
                "replace {replace}, crash at step {k}: the seed is whole and from the first image"
            );
            let state = std::fs::read(src.join("state")).ok();
            assert_eq!(
                state.as_deref(),
                replace.then_some(&b"written by the zone"[..]),
                "replace {replace}, crash at step {k}"
            );
            let left: Vec<_> = std::fs::read_dir(src.parent().unwrap())
                .unwrap()
                .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect();
            assert!(!left.contains(&"data.seeding".to_owned()), "{left:?}");
            if !crashed {
                seen_steps
                    .lock()
                    .unwrap()
                    .push(names.lock().unwrap().clone());
                break;
            }
        }
    }
    // Making the zone seeds the volume before placing the zonepath; replacing it seeds
    // nothing (the volume keeps what the zone wrote).
    let steps = seen_steps.into_inner().unwrap();
    let seed = [
        "create volume web.var-hello",
        "seed volume web.var-hello",
        "publish the seed of volume web.var-hello",
        "record volume web.var-hello",
        "fill the staging zonepath",
        "place the zonepath",
    ];
    assert_eq!(steps[0], seed);
    assert!(
        !steps[1].iter().any(|s| s.starts_with("seed")),
        "{:?}",
        steps[1]
    );
    assert!(steps[1].contains(&"move the old zonepath aside".to_owned()));
}

fn rand_n() -> usize {
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
