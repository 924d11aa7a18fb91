//! The worker with `[layer_store] kind = "zfs"` on real ZFS (zfs-fuse, `zfspool/`), against
//! the real registry: a pass pulls, applies each layer once into the layer store and makes
//! each zone's root a clone of the image's top snapshot; a moved tag replaces the zone; with
//! the disk over `image_gc_high_percent`, layers no zone uses are destroyed after the zones
//! that held them are gone. Volumes are datasets of their own (not clones), with their
//! size as `quota`, and keep their data across image updates, restarts and reclaim
//! (`volume_cases/`, the same cases as on the directory store, crash injection included). An
//! image update keeps the replaced clone as the previous root for a rollback, and one that
//! never becomes ready is rolled back (`rollout_cases/`).

mod image;
mod rollout_cases;
mod tarbuild;
mod volume_cases;
mod zfspool;

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use image::{Image, Layer, Spec};
use registry::storage::FsStore;
use registry::{AppState, RegistryConfig, router};
use registry_client::{Client, Reference, Retry};
use tarbuild::Tar;
use worker_runtime::{DiskSpace, DiskUsage, Worker, WorkerConfig};

const OS_VERSION: &str = "omnios-r151054";

fn layers(tag: &str) -> Vec<Layer> {
    vec![
        Layer::new(Tar::new().dir("etc").file("etc/motd", b"base").finish()),
        Layer::new(Tar::new().file("etc/release", tag.as_bytes()).finish()),
    ]
}

fn good_image(tag: &str) -> Image {
    image::image(
        layers(tag),
        &Spec {
            os_version: Some(OS_VERSION),
            ..Spec::default()
        },
    )
}

/// A disk `used` percent full.
struct Disk(u64);

impl DiskUsage for Disk {
    fn space(&self, _path: &Path) -> std::io::Result<DiskSpace> {
        Ok(DiskSpace {
            total: 100,
            available: 100 - self.0,
        })
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zones_are_clones_of_verified_layers_and_unused_layers_are_collected() {
    let pool = zfspool::pool();
    let parent = pool.dataset("worker");
    let dir = tempfile::tempdir().unwrap();
    let (addr, task) = {
        let store = FsStore::open(dir.path().join("registry")).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let app = router(AppState::new(Arc::new(store), RegistryConfig::default()));
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        (addr, task)
    };
    let c = Client::builder()
        .retry(Retry {
            attempts: 4,
            base_delay: Duration::from_millis(10),
            max_delay: Duration::from_millis(40),
        })
        .build()
        .unwrap();
    let r = Reference::parse(&format!("{addr}/apps/web:v1")).unwrap();
    good_image("v1").push(&c, &r).await;

    let t = dir.path();
    std::fs::create_dir(t.join("zones")).unwrap();
    std::fs::write(
        t.join("worker.toml"),
        format!(
            "zones_dir = \"zones\"\nstate_dir = \"state\"\nworker_id = \"zfs-node\"\nos_version = \"{OS_VERSION}\"\ngc_grace_secs = 0\nplain_http = true\n[provisioner]\nkind = \"dir\"\nbase = \"roots\"\n[layer_store]\nkind = \"zfs\"\ndataset = \"{parent}\"\n"
        ),
    )
    .unwrap();
    let zone = |name: &str, extra: &str| {
        std::fs::write(
            t.join("zones").join(format!("{name}.toml")),
            format!("name = \"{name}\"\nimage = \"{r}\"\npull_policy = \"Always\"\n{extra}"),
        )
        .unwrap();
    };
    // web's manifest limits its disk: its dataset gets that quota; api has none.
    zone("web", "[limits]\ndisk = \"64m\"\n");
    zone("api", "");
    let worker = |used: u64| {
        let cfg = WorkerConfig::load(&t.join("worker.toml")).unwrap();
        Arc::new(
            Worker::new(cfg)
                .unwrap()
                .with_client(c.clone())
                .with_disk_usage(Arc::new(Disk(used))),
        )
    };
    let layer_datasets = || -> Vec<String> {
        zfspool::list(&format!("{parent}/layers"))
            .into_iter()
            .skip(1)
            .filter(|n| !n.contains('@'))
            .collect()
    };
    let dataset_of = |zone: &str| -> String {
        let zp = t.join("roots").join(zone);
        zfspool::list(&format!("{parent}/roots"))
            .into_iter()
            .find(|n| zfspool::get("mountpoint", n) == zp.to_str().unwrap())
            .unwrap_or_else(|| panic!("no dataset is mounted at {}", zp.display()))
    };
    let origin_of = |zone: &str| -> String { zfspool::get("origin", &dataset_of(zone)) };

    let s = worker(10).pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["api", "web"], "{s:?}");
    for z in ["web", "api"] {
        let root = t.join("roots").join(z).join("root");
        assert_eq!(std::fs::read(root.join("etc/release")).unwrap(), b"v1");
        assert_eq!(std::fs::read(root.join("etc/motd")).unwrap(), b"base");
    }
    // Two zones from one image: its two layers were applied once, both roots are clones of
    // the top one.
    assert_eq!(layer_datasets().len(), 2, "{:?}", layer_datasets());
    assert_eq!(origin_of("web"), origin_of("api"));
    assert!(origin_of("web").ends_with("@layer"));
    assert_eq!(
        zfspool::get("quota", &dataset_of("web")),
        (64u64 << 20).to_string()
    );
    assert!(
        ["0", "none", "-"].contains(&zfspool::get("quota", &dataset_of("api")).as_str()),
        "{}",
        zfspool::get("quota", &dataset_of("api"))
    );

    // The tag moves: both zones are replaced; the base layer is shared with the new image.
    good_image("v2")
        .push(
            &c,
            &Reference::parse(&format!("{addr}/apps/web:v1")).unwrap(),
        )
        .await;
    let s = worker(10).pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["api", "web"], "{s:?}");
    let root = t.join("roots").join("web").join("root");
    assert_eq!(std::fs::read(root.join("etc/release")).unwrap(), b"v2");
    assert_eq!(layer_datasets().len(), 3, "{:?}", layer_datasets());
    // Over the high threshold v1's top layer stays while the zones keep their v1 clones as
    // the previous roots (for a rollback).
    let s = worker(90).pass(true).await.unwrap();
    assert!(s.provisioned.is_empty(), "{s:?}");
    let before = layer_datasets();
    assert_eq!(before.len(), 3, "{before:?}");
    assert!(origin_of("web").ends_with("@layer"));
    assert_eq!(std::fs::read(root.join("etc/release")).unwrap(), b"v2");
    // The tag moves again: v2's clones are the previous roots now, so v1's top layer (no
    // zone's any more) goes; the shared base, v2's top and v3's stay.
    good_image("v3")
        .push(
            &c,
            &Reference::parse(&format!("{addr}/apps/web:v1")).unwrap(),
        )
        .await;
    let s = worker(90).pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["api", "web"], "{s:?}");
    let after = layer_datasets();
    assert_eq!(after.len(), 3, "{after:?}");
    let gone: Vec<_> = before.iter().filter(|d| !after.contains(d)).collect();
    assert_eq!(
        gone.len(),
        1,
        "v1's top layer is collected: {before:?} -> {after:?}"
    );
    assert_eq!(std::fs::read(root.join("etc/release")).unwrap(), b"v3");
    task.abort();
}

/// A registry serving `apps/web:v1` and a worker directory on a dataset of `pool` whose
/// worker.toml has `extra` keys at the top level; `zone(name)` writes a zone manifest.
struct Node {
    dir: tempfile::TempDir,
    parent: String,
    reference: Reference,
    client: Client,
    task: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn new(pool: &zfspool::Pool, label: &str, extra: &str) -> Node {
        let parent = pool.dataset(label);
        let dir = tempfile::tempdir().unwrap();
        let store = FsStore::open(dir.path().join("registry")).unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        let app = router(AppState::new(Arc::new(store), RegistryConfig::default()));
        let task = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let client = Client::builder()
            .retry(Retry {
                attempts: 4,
                base_delay: Duration::from_millis(10),
                max_delay: Duration::from_millis(40),
            })
            .build()
            .unwrap();
        let reference = Reference::parse(&format!("{addr}/apps/web:v1")).unwrap();
        good_image("v1").push(&client, &reference).await;
        let t = dir.path();
        std::fs::create_dir(t.join("zones")).unwrap();
        std::fs::write(
            t.join("worker.toml"),
            format!(
                "zones_dir = \"zones\"\nstate_dir = \"state\"\nworker_id = \"zfs-node\"\nos_version = \"{OS_VERSION}\"\ngc_grace_secs = 0\nplain_http = true\n{extra}\n[provisioner]\nkind = \"dir\"\nbase = \"roots\"\n[layer_store]\nkind = \"zfs\"\ndataset = \"{parent}\"\n"
            ),
        )
        .unwrap();
        Node {
            dir,
            parent,
            reference,
            client,
            task,
        }
    }

    fn zone(&self, name: &str) {
        std::fs::write(
            self.dir.path().join("zones").join(format!("{name}.toml")),
            format!(
                "name = \"{name}\"\nimage = \"{}\"\npull_policy = \"Always\"\n",
                self.reference
            ),
        )
        .unwrap();
    }

    /// A worker reading disk usage as it does in production (no fake).
    fn worker(&self) -> Result<Arc<Worker>, worker_runtime::WorkerError> {
        let cfg = WorkerConfig::load(&self.dir.path().join("worker.toml")).unwrap();
        Ok(Arc::new(Worker::new(cfg)?.with_client(self.client.clone())))
    }

    fn layer_datasets(&self) -> Vec<String> {
        zfspool::list(&format!("{}/layers", self.parent))
            .into_iter()
            .skip(1)
            .filter(|n| !n.contains('@'))
            .collect()
    }
}

/// Layer GC reads the pool's fill as ZFS counts it (`zfs get used,available`), not
/// `statvfs` of the zones' base: there, on ZFS, a pool filled by other datasets shows only
/// the zones dataset's own bytes over the pool's free space and never looks full. The pool
/// is filled to about 30 % by another dataset; with `image_gc_high_percent = 10`, the layer a
/// replaced zone no longer uses is destroyed in the same pass. No fake disk here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layer_gc_weighs_the_pool_as_zfs_counts_it() {
    let pool = zfspool::pool();
    let node = Node::new(
        &pool,
        "gcpool",
        "image_gc_high_percent = 10\nimage_gc_low_percent = 5",
    )
    .await;
    // Another tenant of the pool: 150 MiB of 512 (zfs-fuse does not compress by default).
    let filler = pool.dataset("filler");
    let file = std::path::PathBuf::from(zfspool::get("mountpoint", &filler)).join("fill");
    {
        use std::io::Write;
        let mut f = std::fs::File::create(&file).unwrap();
        let chunk = vec![0x5au8; 1 << 20];
        for _ in 0..150 {
            f.write_all(&chunk).unwrap();
        }
        f.sync_all().unwrap();
    }
    // zfs-fuse accounts written bytes at the next transaction group.
    let started = std::time::Instant::now();
    while zfspool::get("used", &filler).parse::<u64>().unwrap() < 140 << 20 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "the filler's bytes never showed in `used`"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    node.zone("web");
    let s = node.worker().unwrap().pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["web"], "{s:?}");
    assert_eq!(node.layer_datasets().len(), 2);
    good_image("v2").push(&node.client, &node.reference).await;
    let s = node.worker().unwrap().pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["web"], "{s:?}");
    // v1's clone is kept as the previous root: its layers stay. The next update makes v2's
    // the previous root, and v1's top layer (no zone's any more) is collected: the shared
    // base, v2's top and v3's stay.
    assert_eq!(node.layer_datasets().len(), 3);
    good_image("v3").push(&node.client, &node.reference).await;
    let s = node.worker().unwrap().pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["web"], "{s:?}");
    assert_eq!(
        node.layer_datasets().len(),
        3,
        "{:?} (pool used {} available {})",
        node.layer_datasets(),
        zfspool::get("used", &pool.name),
        zfspool::get("available", &pool.name)
    );
    std::fs::remove_file(&file).unwrap();
    node.task.abort();
}

/// A dataset among the store's zone datasets that is not the store's (here mounted on the
/// zonepath of a zone `db` the node is asked to run) does not stop the worker: its start goes
/// through, `web` keeps running, and only `db` fails, its status naming the dataset, which is
/// left as it was.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmarked_zone_dataset_refuses_its_zone_only() {
    let pool = zfspool::pool();
    let node = Node::new(&pool, "unmarked", "").await;
    node.zone("web");
    let s = node.worker().unwrap().pass(true).await.unwrap();
    assert_eq!(s.provisioned, ["web"], "{s:?}");

    let base = node.dir.path().join("roots");
    let theirs = format!("{}/roots/theirs", node.parent);
    let at = format!("mountpoint={}", base.join("db").display());
    zfspool::run("zfs", &["create", "-o", &at, &theirs]);
    std::fs::write(base.join("db").join("data"), b"theirs").unwrap();
    node.zone("db");
    let worker = node
        .worker()
        .unwrap_or_else(|e| panic!("the start was refused: {e:?}"));
    let s = worker.pass(true).await.unwrap();
    assert_eq!(s.unchanged, ["web"], "{s:?}");
    assert_eq!(s.failed, ["db"], "{s:?}");
    let rows = worker_runtime::status(&node.dir.path().join("worker.toml")).unwrap();
    let db = rows.iter().find(|r| r.status.zone == "db").unwrap();
    let err = db.status.last_error.clone().unwrap_or_default();
    assert!(
        err.contains(&base.join("db").display().to_string())
            && err.contains("without an rdctl ownership mark"),
        "{err}"
    );
    assert_eq!(
        std::fs::read(base.join("web/root/etc/release")).unwrap(),
        b"v1"
    );
    assert_eq!(std::fs::read(base.join("db/data")).unwrap(), b"theirs");
    // No mark was set on it (the value it shows is inherited from the store's parent).
    let source = zfspool::run(
        "zfs",
        &["get", "-H", "-o", "source", "org.reddwarf:owner", &theirs],
    );
    assert!(source.starts_with("inherited"), "{source}");
    node.task.abort();
}

/// `[layer_store]` on a fresh dataset of `pool`.
fn zfs_store(pool: &zfspool::Pool, label: &str) -> (String, String) {
    let parent = pool.dataset(label);
    let store = format!("[layer_store]\nkind = \"zfs\"\ndataset = \"{parent}\"\n");
    (parent, store)
}

/// On ZFS each volume is a dataset of its own under `<parent>/volumes`, not a clone of a
/// layer (so destroying a replaced zonepath never reaches it), mounted where its description
/// says, with its size as `quota`; its data survives three image updates and a restart.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volumes_are_datasets_that_keep_their_data_across_updates_and_a_restart() {
    let pool = zfspool::pool();
    let (parent, store) = zfs_store(&pool, "volumes");
    let node = volume_cases::data_survives_updates_and_restart(&store, Some("64m")).await;
    for (id, quota) in [("web.var-hello", "0"), ("webdata", "67108864")] {
        let ds = format!("{parent}/volumes/{id}");
        assert_eq!(zfspool::get("origin", &ds), "-", "{ds} is no clone");
        assert_eq!(zfspool::get("quota", &ds), quota, "{ds}");
        assert_eq!(zfspool::get("org.reddwarf:kind", &ds), "volume", "{ds}");
        let path = if id == "webdata" {
            "/srv/data"
        } else {
            volume_cases::HELLO
        };
        let source = node.volume("web", path).source;
        assert_eq!(
            Path::new(&zfspool::get("mountpoint", &ds)).join("data"),
            source,
            "{ds}"
        );
    }
    let listed = node.status_volumes();
    assert_eq!(listed[1].size_bytes, Some(64 << 20), "{listed:?}");
    let node_status = worker_runtime::status_report(&node.config())
        .unwrap()
        .node
        .unwrap();
    assert_eq!(node_status.allocated.volume_bytes, 64 << 20);
}

/// Reclaim on ZFS: the retained volume's dataset stays with its data, the deleted one's
/// dataset is destroyed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_retains_or_destroys_the_volume_dataset() {
    let pool = zfspool::pool();
    let (parent, store) = zfs_store(&pool, "reclaim");
    volume_cases::reclaim_both_ways(&store).await;
    let volumes: Vec<String> = zfspool::list(&format!("{parent}/volumes"))
        .into_iter()
        .skip(1)
        .collect();
    assert_eq!(volumes, [format!("{parent}/volumes/keep.var-hello")]);
}

/// On ZFS too, a worker killed before any step of making a zone with a volume (before `zfs
/// create` of the volume's dataset, before seeding it, …) or of replacing the zone, and
/// started again, converges with the whole seed and what the zone wrote.
#[test]
fn a_crash_at_any_step_of_attaching_a_volume_dataset_converges_with_the_data() {
    let pool = zfspool::pool();
    let t = tempfile::tempdir().unwrap();
    volume_cases::crash_at_any_step_converges(&|label| {
        let parent = pool.dataset(&format!("crash-{label}"));
        let base = t.path().join(format!("zones-{label}"));
        Box::new(move |hook| {
            let layers = worker_runtime::ZfsLayerStore::open(
                worker_runtime::zfs::Zfs::default(),
                &parent,
                "node-a",
            )
            .unwrap();
            let zd = worker_runtime::ZoneDatasets::open(layers, &base).unwrap();
            let v =
                worker_runtime::volume::Volumes::open(&base, "node-a", Some(zd.clone())).unwrap();
            let p = worker_runtime::DirProvisioner::on_datasets(zd, "node-a")
                .unwrap()
                .with_volumes(v);
            match hook {
                Some(h) => p.with_step_hook(h),
                None => p,
            }
        })
    });
}

/// The opener of a fresh ZFS-backed provisioner with volumes for each crash run.
fn zfs_opener<'a>(
    pool: &'a zfspool::Pool,
    t: &'a tempfile::TempDir,
    prefix: &'a str,
) -> impl Fn(&str) -> volume_cases::Opener + 'a {
    move |label| {
        let parent = pool.dataset(&format!("{prefix}-{label}"));
        let base = t.path().join(format!("zones-{label}"));
        Box::new(move |hook| {
            let layers = worker_runtime::ZfsLayerStore::open(
                worker_runtime::zfs::Zfs::default(),
                &parent,
                "node-a",
            )
            .unwrap();
            let zd = worker_runtime::ZoneDatasets::open(layers, &base).unwrap();
            let v =
                worker_runtime::volume::Volumes::open(&base, "node-a", Some(zd.clone())).unwrap();
            let p = worker_runtime::DirProvisioner::on_datasets(zd, "node-a")
                .unwrap()
                .with_volumes(v);
            match hook {
                Some(h) => p.with_step_hook(h),
                None => p,
            }
        })
    }
}

/// On ZFS the previous root is the replaced zone's clone, kept (mounted in `.previous`) while
/// its volume keeps the data through three updates and a rollback; removing the zone destroys
/// both clones and keeps the volume's dataset.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn updates_keep_the_previous_clone_and_roll_back_with_the_volume_data() {
    let pool = zfspool::pool();
    let (parent, store) = zfs_store(&pool, "rollout");
    let node = rollout_cases::updates_keep_the_previous_root_and_roll_back(&store).await;
    let roots: Vec<String> = zfspool::list(&format!("{parent}/roots"))
        .into_iter()
        .skip(1)
        .collect();
    assert!(
        roots.is_empty(),
        "the zone and its previous clone are gone: {roots:?}"
    );
    assert!(!node.base().join(".previous/web").exists());
    let volumes: Vec<String> = zfspool::list(&format!("{parent}/volumes"))
        .into_iter()
        .skip(1)
        .collect();
    assert_eq!(volumes, [format!("{parent}/volumes/web.var-hello")]);
}

/// On ZFS a zone that never becomes ready is rolled back within `update_timeout`; the failed
/// image's clone is the one kept as the previous root.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_never_ready_update_is_rolled_back_to_the_previous_clone() {
    let pool = zfspool::pool();
    let (parent, store) = zfs_store(&pool, "never-ready");
    let node = rollout_cases::a_never_ready_update_rolls_back_within_update_timeout(&store).await;
    let kept = node.base().join(".previous/web");
    let ds = zfspool::list(&format!("{parent}/roots"))
        .into_iter()
        .skip(1)
        .find(|n| zfspool::get("mountpoint", n) == kept.to_str().unwrap())
        .expect("the previous root is a dataset mounted in .previous");
    assert!(zfspool::get("origin", &ds).contains("@"), "{ds} is a clone");
}

/// On ZFS too, a worker killed before any step of a switch (each step a change of a clone's
/// mountpoint or a destroy) and started again runs the old or the new root with the data.
#[test]
fn a_crash_at_any_step_of_a_switch_on_zfs_keeps_a_zone_with_its_data() {
    let pool = zfspool::pool();
    let t = tempfile::tempdir().unwrap();
    rollout_cases::a_crash_at_any_step_of_a_switch_keeps_a_zone_with_its_data(&zfs_opener(
        &pool, &t, "switch",
    ));
}
