//! The ZFS layer store on real ZFS (zfs-fuse on a file-backed pool, see `zfspool/`): layers
//! shared between images exist once, a zone root is a clone of the image's top snapshot, the
//! DiffID gate still refuses a bad layer and leaves no snapshot, a half-made layer is redone,
//! and datasets without our marks (or with another worker's) are never touched.

mod image;
mod tarbuild;
mod zfspool;

use tarbuild::Tar;
use validator::{Digest, Document, chain_ids, check_config, check_document};
use worker_runtime::zfs::{LayerOutcome, PROP_CHAIN_ID, Zfs, ZfsStoreError};
use worker_runtime::{
    ContentStore, PulledImage, RootError, UnpackError, UnpackOptions, ZfsLayerStore, ZoneDatasets,
};
use zfspool::{get, list, run};

/// An image of `layers` with its blobs in `store`; `diff_ids` replaces the config's.
fn pulled(
    store: &ContentStore,
    layers: Vec<image::Layer>,
    diff_ids: Option<Vec<Digest>>,
) -> PulledImage {
    for l in &layers {
        store.put_bytes(&l.digest(), &l.blob).unwrap();
    }
    let spec = image::Spec {
        diff_ids,
        ..image::Spec::default()
    };
    let img = image::image(layers.clone(), &spec);
    let (r, doc) = check_document(&img.manifest, None, None, "manifest");
    let Some(Document::Manifest(manifest)) = doc else {
        panic!("{r}")
    };
    let (r, config) = check_config(&img.config, Some(layers.len()), "config");
    PulledImage {
        manifest_digest: img.manifest_digest(),
        manifest: *manifest,
        config_digest: img.config_digest(),
        config: config.unwrap_or_else(|| panic!("{r}")),
    }
}

fn base() -> image::Layer {
    image::Layer::new(
        Tar::new()
            .dir("etc")
            .file("etc/release", b"base\n")
            .dir("usr")
            .file("usr/big", &vec![7u8; 256 * 1024])
            .finish(),
    )
}

fn app(name: &str) -> image::Layer {
    image::Layer::new(
        Tar::new()
            .dir("opt")
            .file(&format!("opt/{name}"), name.as_bytes())
            .whiteout("etc/.wh.release")
            .finish(),
    )
}

struct Setup {
    pool: std::sync::Arc<zfspool::Pool>,
    parent: String,
    store: ContentStore,
    _t: tempfile::TempDir,
}

fn setup(label: &str) -> Setup {
    let pool = zfspool::pool();
    let parent = pool.dataset(label);
    let t = tempfile::tempdir().unwrap();
    let store = ContentStore::open(&t.path().join("content"), "node").unwrap();
    Setup {
        pool,
        parent,
        store,
        _t: t,
    }
}

fn open(s: &Setup, worker: &str) -> ZfsLayerStore {
    ZfsLayerStore::open(Zfs::default(), &s.parent, worker).unwrap()
}

fn layer_datasets(s: &Setup) -> Vec<String> {
    list(&format!("{}/layers", s.parent))
        .into_iter()
        .skip(1)
        .collect()
}

#[test]
fn images_sharing_a_base_layer_share_its_dataset_and_zone_roots_are_clones() {
    let s = setup("share");
    let zs = open(&s, "node");
    let (b, a1, a2) = (base(), app("one"), app("two"));
    let img1 = pulled(&s.store, vec![b.clone(), a1.clone()], None);
    let img2 = pulled(&s.store, vec![b.clone(), a2.clone()], None);
    let opts = UnpackOptions::default();

    let p1 = zs.prepare(&s.store, &img1, &opts).unwrap();
    assert!(
        p1.layers()
            .iter()
            .all(|l| matches!(l, LayerOutcome::Applied { redone: false, .. })),
        "{:?}",
        p1.layers()
    );
    let p2 = zs.prepare(&s.store, &img2, &opts).unwrap();
    assert_eq!(p2.layers()[0], LayerOutcome::Reused);
    assert!(matches!(p2.layers()[1], LayerOutcome::Applied { .. }));

    // The base once, each app layer once: three datasets, each with its @layer snapshot.
    let chains1 = chain_ids(&[b.diff_id(), a1.diff_id()]);
    let chains2 = chain_ids(&[b.diff_id(), a2.diff_id()]);
    let name = |c: &Digest| format!("{}/layers/sha256-{}", s.parent, c.encoded());
    let mut want = Vec::new();
    for c in [&chains1[0], &chains1[1], &chains2[1]] {
        want.push(name(c));
        want.push(format!("{}@layer", name(c)));
    }
    want.sort();
    let mut got = layer_datasets(&s);
    got.sort();
    assert_eq!(got, want);
    assert_eq!(
        get(PROP_CHAIN_ID, &name(&chains1[0])),
        chains1[0].to_string()
    );
    // Layer 2 is a clone of layer 1's snapshot.
    assert_eq!(
        get("origin", &name(&chains1[1])),
        format!("{}@layer", name(&chains1[0]))
    );
    assert_eq!(p1.top_snapshot(), format!("{}@layer", name(&chains1[1])));

    // Preparing again applies nothing.
    let again = zs.prepare(&s.store, &img1, &opts).unwrap();
    assert_eq!(
        again.layers(),
        &[LayerOutcome::Reused, LayerOutcome::Reused]
    );

    // Two zones from image 1 and one from image 2: clones of the top snapshots.
    let z1 = zs.clone_zone("web1", &p1, None).unwrap();
    let z2 = zs.clone_zone("web2", &p1, Some(64 << 20)).unwrap();
    let z3 = zs.clone_zone("api1", &p2, None).unwrap();
    assert_eq!(get("origin", z1.dataset.as_str()), p1.top_snapshot());
    assert_eq!(get("origin", z2.dataset.as_str()), p1.top_snapshot());
    assert_eq!(get("origin", z3.dataset.as_str()), p2.top_snapshot());
    assert_eq!(get("quota", z2.dataset.as_str()), (64u64 << 20).to_string());
    assert_eq!(std::fs::read(z1.root().join("opt/one")).unwrap(), b"one");
    assert!(!z1.root().join("opt/two").exists());
    assert!(
        !z1.root().join("etc/release").exists(),
        "the whiteout applied"
    );
    assert_eq!(
        std::fs::read(z1.root().join("usr/big")).unwrap().len(),
        256 * 1024
    );
    assert_eq!(std::fs::read(z3.root().join("opt/two")).unwrap(), b"two");
    // A zone's writes stay in its clone.
    std::fs::write(z1.root().join("etc/motd"), b"zone 1").unwrap();
    assert!(!z2.root().join("etc/motd").exists());
    // A clone shares its blocks: far below the 256 KiB file it holds.
    let used: u64 = get("used", z2.dataset.as_str()).parse().unwrap();
    assert!(used < 128 * 1024, "a fresh clone uses {used} bytes");

    // The zone dataset exists: cloning again is refused, removing works once.
    assert!(matches!(
        zs.clone_zone("web1", &p1, None),
        Err(ZfsStoreError::ZoneExists { .. })
    ));
    assert!(zs.remove_zone("web1").unwrap());
    assert!(!zs.remove_zone("web1").unwrap());
    assert!(
        !list(&format!("{}/zones", s.parent))
            .iter()
            .any(|d| d.ends_with("/web1"))
    );
    drop(s.pool.clone());
}

#[test]
fn images_prepared_at_the_same_time_apply_their_shared_base_once() {
    let s = setup("concurrent");
    let zs = open(&s, "node");
    let b = base();
    let imgs: Vec<PulledImage> = ["one", "two", "three"]
        .iter()
        .map(|n| pulled(&s.store, vec![b.clone(), app(n)], None))
        .collect();
    let opts = UnpackOptions::default();
    let prepared: Vec<_> = std::thread::scope(|t| {
        let hs: Vec<_> = imgs
            .iter()
            .map(|img| t.spawn(|| zs.prepare(&s.store, img, &opts).unwrap()))
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let applied_base = prepared
        .iter()
        .filter(|p| matches!(p.layers()[0], LayerOutcome::Applied { .. }))
        .count();
    assert_eq!(applied_base, 1, "{prepared:?}");
    // One base and three app layers, each with its snapshot.
    assert_eq!(layer_datasets(&s).len(), 8, "{:?}", layer_datasets(&s));
}

#[test]
fn collect_destroys_unused_layers_once_no_clone_holds_them() {
    use std::collections::HashSet;
    let s = setup("gc");
    let zs = open(&s, "node");
    let (b, a1, a2) = (base(), app("one"), app("two"));
    let img1 = pulled(&s.store, vec![b.clone(), a1.clone()], None);
    let img2 = pulled(&s.store, vec![b.clone(), a2.clone()], None);
    let opts = UnpackOptions::default();
    let p1 = zs.prepare(&s.store, &img1, &opts).unwrap();
    let p2 = zs.prepare(&s.store, &img2, &opts).unwrap();
    zs.clone_zone("z1", &p1, None).unwrap();
    zs.clone_zone("z2", &p2, None).unwrap();
    // Datasets that are not the store's, where it lists layers.
    let stranger = format!(
        "{}/layers/sha256-{}",
        s.parent,
        Digest::sha256(b"x").encoded()
    );
    let junk = format!("{}/layers/junk", s.parent);
    run("zfs", &["create", &stranger]);
    run("zfs", &["create", &junk]);

    // Nothing kept, but every layer is held: the zones hold the tops, the tops the base.
    let c = zs.collect(&HashSet::new()).unwrap();
    assert!(c.destroyed.is_empty(), "{c:?}");
    assert_eq!(c.held.len(), 3, "{c:?}");
    let mut foreign = c.foreign.iter().map(|d| d.to_string()).collect::<Vec<_>>();
    foreign.sort();
    let mut want = vec![stranger.clone(), junk.clone()];
    want.sort();
    assert_eq!(foreign, want);

    // Zone 2 gone and image 1 kept: image 2's own layer goes, the shared base stays.
    zs.remove_zone("z2").unwrap();
    let keep: HashSet<Digest> = chain_ids(&[b.diff_id(), a1.diff_id()])
        .into_iter()
        .collect();
    let c = zs.collect(&keep).unwrap();
    assert_eq!(c.destroyed, vec![p2.chain_id().clone()]);
    assert!(c.held.is_empty(), "{c:?}");
    assert!(!list(&format!("{}/layers", s.parent)).contains(&p2.top_dataset().to_string()));

    // Zone 1 gone, nothing kept: image 1's layer, then the base.
    zs.remove_zone("z1").unwrap();
    let c = zs.collect(&HashSet::new()).unwrap();
    let chains1 = chain_ids(&[b.diff_id(), a1.diff_id()]);
    assert_eq!(
        c.destroyed,
        vec![chains1[1].clone(), chains1[0].clone()],
        "{c:?}"
    );
    let mut left = layer_datasets(&s);
    left.sort();
    assert_eq!(left, want, "only the strangers are left");
}

#[test]
fn a_layer_whose_diff_id_does_not_match_leaves_no_dataset_and_no_snapshot() {
    let s = setup("diffid");
    let zs = open(&s, "node");
    let (b, a) = (base(), app("one"));
    // The second layer's DiffID is wrong; the first one is right.
    let wrong = Digest::sha256(b"not the layer");
    let img = pulled(
        &s.store,
        vec![b.clone(), a.clone()],
        Some(vec![b.diff_id(), wrong.clone()]),
    );
    let e = zs
        .prepare(&s.store, &img, &UnpackOptions::default())
        .unwrap_err();
    match &e {
        ZfsStoreError::Layer { source, .. } => match source.as_ref() {
            RootError::Layer {
                index: 1,
                source: UnpackError::DiffId { expected, .. },
                ..
            } => assert_eq!(expected, &wrong),
            other => panic!("{other:?}"),
        },
        other => panic!("{other:?}"),
    }
    let chains = chain_ids(&[b.diff_id(), wrong]);
    let bad = format!("{}/layers/sha256-{}", s.parent, chains[1].encoded());
    let good = format!("{}/layers/sha256-{}", s.parent, chains[0].encoded());
    let left = layer_datasets(&s);
    assert!(!left.iter().any(|d| d.starts_with(&bad)), "{left:?}");
    // The verified base stays for the next image.
    assert!(left.contains(&format!("{good}@layer")), "{left:?}");

    // A bad bottom layer: nothing at all is left of it.
    let img = pulled(
        &s.store,
        vec![app("two")],
        Some(vec![Digest::sha256(b"wrong")]),
    );
    let e = zs
        .prepare(&s.store, &img, &UnpackOptions::default())
        .unwrap_err();
    assert!(e.to_string().starts_with("image sha256:"), "{e}");
    assert_eq!(layer_datasets(&s), left);
}

#[test]
fn a_half_made_layer_is_destroyed_and_redone() {
    let s = setup("halfmade");
    let zs = open(&s, "node");
    let b = base();
    let img = pulled(&s.store, vec![b.clone()], None);
    let chain = b.diff_id();
    let ds = format!("{}/layers/sha256-{}", s.parent, chain.encoded());
    // What a worker killed mid-unpack leaves: the dataset with our marks, state unpacking,
    // some of the files, no snapshot.
    let marks = [
        "org.reddwarf:owner=rdctl-worker".to_owned(),
        "org.reddwarf:worker=node".to_owned(),
        "org.reddwarf:kind=layer".to_owned(),
        format!("org.reddwarf:chainid={chain}"),
    ];
    let mut args: Vec<String> = vec!["create".into()];
    for m in &marks {
        args.extend(["-o".into(), m.clone()]);
    }
    args.extend([
        "-o".into(),
        "org.reddwarf:state=unpacking".into(),
        ds.clone(),
    ]);
    run("zfs", &args.iter().map(String::as_str).collect::<Vec<_>>());
    let mnt = std::path::PathBuf::from(get("mountpoint", &ds));
    std::fs::create_dir_all(mnt.join("root/etc")).unwrap();
    std::fs::write(mnt.join("root/etc/half"), b"torn").unwrap();

    let p = zs
        .prepare(&s.store, &img, &UnpackOptions::default())
        .unwrap();
    assert!(
        matches!(p.layers()[0], LayerOutcome::Applied { redone: true, .. }),
        "{:?}",
        p.layers()
    );
    let z = zs.clone_zone("z", &p, None).unwrap();
    assert!(
        !z.root().join("etc/half").exists(),
        "the torn file went with the dataset"
    );
    assert_eq!(
        std::fs::read(z.root().join("etc/release")).unwrap(),
        b"base\n"
    );
    assert_eq!(get("org.reddwarf:state", &ds), "complete");
    zs.remove_zone("z").unwrap();

    // Killed after `state = complete` but before the snapshot: still not trusted.
    // (zfs-fuse says "busy" for a moment after the zone's clone went; `Zfs::destroy` waits.)
    Zfs::default().destroy(&ds, true).unwrap();
    let mut args: Vec<String> = vec!["create".into()];
    for m in &marks {
        args.extend(["-o".into(), m.clone()]);
    }
    args.extend([
        "-o".into(),
        "org.reddwarf:state=complete".into(),
        ds.clone(),
    ]);
    run("zfs", &args.iter().map(String::as_str).collect::<Vec<_>>());
    let p = zs
        .prepare(&s.store, &img, &UnpackOptions::default())
        .unwrap();
    assert!(matches!(
        p.layers()[0],
        LayerOutcome::Applied { redone: true, .. }
    ));
    let z = zs.clone_zone("z", &p, None).unwrap();
    assert_eq!(
        std::fs::read(z.root().join("etc/release")).unwrap(),
        b"base\n"
    );
}

#[test]
fn datasets_without_our_mark_are_never_touched() {
    let s = setup("unmarked");
    let zs = open(&s, "node");
    let b = base();
    let img = pulled(&s.store, vec![b.clone()], None);
    let ds = format!("{}/layers/sha256-{}", s.parent, b.diff_id().encoded());
    // Somebody else's dataset where the layer would go (it inherits the parent's marks, but
    // only marks set on the dataset itself count).
    run("zfs", &["create", &ds]);
    let mnt = std::path::PathBuf::from(get("mountpoint", &ds));
    std::fs::write(mnt.join("theirs"), b"keep").unwrap();
    let e = zs
        .prepare(&s.store, &img, &UnpackOptions::default())
        .unwrap_err();
    assert_unmarked(&e);
    assert!(e.to_string().contains("refusing to touch it"), "{e}");
    assert_eq!(std::fs::read(mnt.join("theirs")).unwrap(), b"keep");
    assert_eq!(list(&ds), vec![ds.clone()], "no snapshot was taken of it");

    // Another worker's layer: refused, kept.
    run("zfs", &["set", "org.reddwarf:owner=rdctl-worker", &ds]);
    run("zfs", &["set", "org.reddwarf:worker=other", &ds]);
    let e = zs
        .prepare(&s.store, &img, &UnpackOptions::default())
        .unwrap_err();
    assert!(
        matches!(&e, ZfsStoreError::Foreign { property: "org.reddwarf:worker", found, .. } if found == "other"),
        "{e:?}"
    );
    assert_eq!(std::fs::read(mnt.join("theirs")).unwrap(), b"keep");

    // A zone dataset nobody marked: neither cloned over nor removed.
    let zone = format!("{}/zones/web", s.parent);
    run("zfs", &["create", &zone]);
    assert!(matches!(
        zs.remove_zone("web"),
        Err(ZfsStoreError::Unmarked { .. })
    ));
    assert_eq!(list(&zone), vec![zone.clone()]);

    // Another worker's store cannot open ours, and a parent holding foreign datasets is not
    // claimed.
    let e = ZfsLayerStore::open(Zfs::default(), &s.parent, "other").unwrap_err();
    assert!(
        matches!(
            e,
            ZfsStoreError::Foreign {
                property: "org.reddwarf:worker",
                ..
            }
        ),
        "{e:?}"
    );
    let busy = s.pool.dataset("busy");
    run("zfs", &["create", &format!("{busy}/data")]);
    let e = ZfsLayerStore::open(Zfs::default(), &busy, "node").unwrap_err();
    assert!(matches!(e, ZfsStoreError::ParentInUse { .. }), "{e:?}");
    assert_eq!(get("org.reddwarf:owner", &busy), "-");
    let e =
        ZfsLayerStore::open(Zfs::default(), &format!("{}/nope", s.pool.name), "node").unwrap_err();
    assert!(e.to_string().contains("does not exist"), "{e}");
}

/// A worker's start reads every zone dataset's marks and mount state (one `zfs get` for all
/// of them): a zone dataset a crash left unmounted is mounted again with its files, and a
/// dataset among them without the store's marks is left untouched without stopping the start
/// (only a zone whose zonepath it is can be refused, see `worker_zfs`).
#[test]
fn a_start_remounts_its_zone_datasets_and_leaves_an_unmarked_one() {
    let s = setup("start");
    let zones = s._t.path().join("zones");
    let img = pulled(&s.store, vec![base()], None);
    let zd = ZoneDatasets::open(open(&s, "node"), &zones).unwrap();
    let mut roots = Vec::new();
    for zone in ["a", "b"] {
        let root = zd
            .build_root(
                &s.store,
                &zones.join(".staging").join(zone),
                "node",
                &img,
                &UnpackOptions::default(),
                None,
            )
            .unwrap();
        let (staging, _) = root.into_staging();
        assert!(zd.rename(&staging, &zones.join(zone)).unwrap());
        roots.push(zones.join(zone));
    }
    let names = list(&format!("{}/roots", s.parent));
    let b_ds = names
        .iter()
        .find(|n| get("mountpoint", n) == roots[1].to_string_lossy())
        .expect("zone b's dataset")
        .clone();
    run("zfs", &["umount", &b_ds]);
    assert!(!roots[1].join("root/etc/release").exists(), "unmounted");
    drop(zd);
    let zd = ZoneDatasets::open(open(&s, "node"), &zones).unwrap();
    assert_eq!(get("mounted", &b_ds), "yes");
    assert!(roots[1].join("root/etc/release").exists(), "mounted again");
    assert!(roots[0].join("root/etc/release").exists());
    drop(zd);

    // Somebody's dataset among the zone datasets: the start goes through and leaves it; a
    // zone dataset unmounted at the same time is still mounted again.
    let theirs = format!("{}/roots/theirs", s.parent);
    run("zfs", &["create", "-o", "mountpoint=none", &theirs]);
    run("zfs", &["umount", &b_ds]);
    let zd = ZoneDatasets::open(open(&s, "node"), &zones).unwrap();
    assert_eq!(get("mounted", &b_ds), "yes");
    assert_eq!(list(&theirs), vec![theirs.clone()], "left as it was");
    assert_eq!(get("mountpoint", &theirs), "none");
    // Where it is mounted, it is refused by name, never moved or destroyed.
    let at = zones.join("c");
    run(
        "zfs",
        &["set", &format!("mountpoint={}", at.display()), &theirs],
    );
    let e = zd.destroy(&at).unwrap_err();
    assert_unmarked(&e);
    assert!(e.to_string().contains(&theirs), "{e}");
    assert_eq!(list(&theirs), vec![theirs.clone()]);
}

/// The documented recipe for the parent (`zfs create -o mountpoint=none <pool>/rdctl`) makes
/// zones: the layer datasets would inherit `mountpoint=none` and could not be applied into, so
/// the store gives `layers` a mountpoint of its own in the base (`.layers`).
#[test]
fn a_parent_made_with_mountpoint_none_makes_zones() {
    let s = setup("recipe");
    let parent = format!("{}/recipe", s.pool.name);
    run("zfs", &["create", "-o", "mountpoint=none", &parent]);
    let zones = s._t.path().join("zones");
    let img = pulled(&s.store, vec![base(), app("one")], None);
    let open_store = || {
        let store = ZfsLayerStore::open(Zfs::default(), &parent, "node").unwrap();
        ZoneDatasets::open(store, &zones).unwrap()
    };
    let zd = open_store();
    let root = zd
        .build_root(
            &s.store,
            &zones.join(".staging").join("web"),
            "node",
            &img,
            &UnpackOptions::default(),
            None,
        )
        .unwrap();
    let (staging, _) = root.into_staging();
    assert!(zd.rename(&staging, &zones.join("web")).unwrap());
    let root = zones.join("web/root");
    assert_eq!(std::fs::read(root.join("opt/one")).unwrap(), b"one");
    assert!(!root.join("etc/release").exists(), "the whiteout applied");
    let layers = format!("{parent}/layers");
    assert_eq!(
        get("mountpoint", &layers),
        zones.join(".layers").to_string_lossy()
    );
    assert_eq!(
        get("mountpoint", &parent),
        "none",
        "the parent is left as made"
    );
    // A second start finds it so and changes nothing.
    drop(zd);
    let zd = open_store();
    assert!(zd.dataset_at(&zones.join("web")).unwrap().is_some());
    assert_eq!(std::fs::read(root.join("opt/one")).unwrap(), b"one");
}

/// An operator's routine backup (`zfs snapshot -r <parent>@backup`) carries no mark of ours:
/// removing a zone, destroying a zonepath or collecting a layer that has such a snapshot is
/// refused (the zone) or skipped (the layer) naming the snapshot, and the dataset stays with
/// it. Once the operator destroys the snapshot, the same calls go through.
#[test]
fn an_operators_snapshots_are_never_destroyed() {
    let s = setup("backup");
    let zs = open(&s, "node");
    let img = pulled(&s.store, vec![base(), app("one")], None);
    let chains = chain_ids(&[base().diff_id(), app("one").diff_id()]);
    let p = zs
        .prepare(&s.store, &img, &UnpackOptions::default())
        .unwrap();
    zs.clone_zone("web", &p, None).unwrap();
    let backup = format!("{}@backup", s.parent);
    run("zfs", &["snapshot", "-r", &backup]);

    let web = format!("{}/zones/web", s.parent);
    let e = zs.remove_zone("web").unwrap_err();
    assert!(
        matches!(&e, ZfsStoreError::ForeignSnapshot { snapshot, .. } if *snapshot == format!("{web}@backup")),
        "{e:?}"
    );
    assert!(e.to_string().contains(&format!("{web}@backup")), "{e}");
    assert_eq!(list(&web), vec![web.clone(), format!("{web}@backup")]);
    // The zone holds the top layer; the base is held by the top. With the zone gone...
    run("zfs", &["destroy", &format!("{web}@backup")]);
    assert!(zs.remove_zone("web").unwrap());
    // ...nothing holds them, but both layers have the operator's snapshot: both stay.
    let before = layer_datasets(&s);
    let c = zs.collect(&Default::default()).unwrap();
    assert!(c.destroyed.is_empty(), "{c:?}");
    let top = format!("{}/layers/sha256-{}@backup", s.parent, chains[1].encoded());
    assert!(
        c.pinned.contains(&(chains[1].clone(), top.clone())),
        "{c:?}"
    );
    assert_eq!(layer_datasets(&s), before);
    // The operator is done with the backup: the layers go as usual.
    run("zfs", &["destroy", "-r", &backup]);
    let c = zs.collect(&Default::default()).unwrap();
    assert_eq!(
        c.destroyed,
        vec![chains[1].clone(), chains[0].clone()],
        "{c:?}"
    );
    assert!(layer_datasets(&s).is_empty(), "{:?}", layer_datasets(&s));

    // A zonepath of the provisioner's datasets, the same way.
    let s = setup("backup-zd");
    let img = pulled(&s.store, vec![base(), app("one")], None);
    let zones = s._t.path().join("zones");
    let zd = ZoneDatasets::open(open(&s, "node"), &zones).unwrap();
    let root = zd
        .build_root(
            &s.store,
            &zones.join(".staging").join("api"),
            "node",
            &img,
            &UnpackOptions::default(),
            None,
        )
        .unwrap();
    let (staging, _) = root.into_staging();
    assert!(zd.rename(&staging, &zones.join("api")).unwrap());
    let api = zd.dataset_at(&zones.join("api")).unwrap().unwrap();
    let backup = format!("{}@backup", s.parent);
    run("zfs", &["snapshot", "-r", &backup]);
    let e = zd.destroy(&zones.join("api")).unwrap_err();
    assert!(e.to_string().contains(&format!("{api}@backup")), "{e}");
    assert!(zones.join("api/root/opt/one").exists(), "still there");
    run("zfs", &["destroy", "-r", &backup]);
    assert!(zd.destroy(&zones.join("api")).unwrap());
    assert!(!list(&format!("{}/roots", s.parent)).contains(&api.to_string()));
}

/// Puts a hand-made dataset in `top`'s place: a clone of `below` with the store's marks
/// copied onto it, its own `@layer`, and what the layer has but `opt/one` = `forged`.
fn forge(top: &str, chain: &Digest, below: &str) {
    Zfs::default().destroy(top, true).unwrap();
    let chain = format!("{PROP_CHAIN_ID}={chain}");
    let mut args = vec!["clone"];
    for m in [
        "org.reddwarf:owner=rdctl-worker",
        "org.reddwarf:worker=node",
        "org.reddwarf:kind=layer",
        &chain,
        "org.reddwarf:state=complete",
    ] {
        args.extend(["-o", m]);
    }
    args.extend([below, top]);
    run("zfs", &args);
    let root = std::path::PathBuf::from(get("mountpoint", top)).join("root");
    std::fs::remove_file(root.join("etc/release")).unwrap();
    std::fs::create_dir_all(root.join("opt")).unwrap();
    std::fs::write(root.join("opt/one"), b"forged").unwrap();
    run("zfs", &["snapshot", &format!("{top}@layer")]);
}

/// No scratch clone of an adoption is left under `layers`.
fn assert_no_scratch(s: &Setup) {
    let left: Vec<String> = layer_datasets(s)
        .into_iter()
        .filter(|d| d.ends_with("-check") || d.ends_with("-adopt"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The marks are user properties anyone who may `zfs set` can copy. With records (what the
/// worker keeps in its state), a layer is reused only when its `@layer` is the snapshot this
/// worker verified (its `guid` and `createtxg` in the record): a hand-made dataset with copied
/// marks in its place is refused naming its snapshot, and left as it is; with its record gone
/// too (as if an older worker had made it) its content is compared with the layer applied
/// again, differs, and it is refused all the same.
#[test]
fn a_hand_made_layer_with_copied_marks_is_refused() {
    let s = setup("forged");
    let records = s._t.path().join("records");
    let zs = open(&s, "node").with_records(&records).unwrap();
    let img = pulled(&s.store, vec![base(), app("one")], None);
    let opts = UnpackOptions::default();
    let chains = chain_ids(&[base().diff_id(), app("one").diff_id()]);
    let p = zs.prepare(&s.store, &img, &opts).unwrap();
    let top = p.top_dataset().to_string();
    let record = records.join(format!("sha256-{}.json", chains[1].encoded()));
    let text = std::fs::read_to_string(&record).unwrap();
    assert!(
        text.contains(&get("guid", &format!("{top}@layer")))
            && text.contains(&get("createtxg", &format!("{top}@layer")))
            && text.contains(&app("one").diff_id().to_string()),
        "{text}"
    );
    let again = zs.prepare(&s.store, &img, &opts).unwrap();
    assert_eq!(
        again.layers(),
        &[LayerOutcome::Reused, LayerOutcome::Reused]
    );

    let base_snap = format!("{}/layers/sha256-{}@layer", s.parent, chains[0].encoded());
    forge(&top, &chains[1], &base_snap);
    // The marks alone (a store without records, as before records were kept) take it.
    let marks_only = open(&s, "node").prepare(&s.store, &img, &opts).unwrap();
    assert_eq!(marks_only.layers()[1], LayerOutcome::Reused);
    let e = zs.prepare(&s.store, &img, &opts).unwrap_err();
    assert!(matches!(e, ZfsStoreError::Untrusted { .. }), "{e:?}");
    assert!(e.to_string().contains(&format!("{top}@layer")), "{e}");
    assert!(e.to_string().contains("recorded guid"), "{e}");
    assert_eq!(list(&top), vec![top.clone(), format!("{top}@layer")]);

    // Its record gone as well: compared with the layer applied again, and refused.
    std::fs::remove_file(&record).unwrap();
    let e = zs.prepare(&s.store, &img, &opts).unwrap_err();
    assert!(matches!(e, ZfsStoreError::Untrusted { .. }), "{e:?}");
    let m = e.to_string();
    assert!(
        m.contains("differs from the layer applied again: /opt"),
        "{m}"
    );
    assert_eq!(list(&top), vec![top.clone(), format!("{top}@layer")]);
    assert!(!record.exists(), "a refused layer got a record");
    assert_no_scratch(&s);

    // With the forgery gone, the layer is applied again and a zone has the verified content.
    Zfs::default().destroy(&top, true).unwrap();
    let p = zs.prepare(&s.store, &img, &opts).unwrap();
    assert_eq!(p.layers()[0], LayerOutcome::Reused);
    assert!(matches!(p.layers()[1], LayerOutcome::Applied { .. }));
    let z = zs.clone_zone("api", &p, None).unwrap();
    assert_eq!(std::fs::read(z.root().join("opt/one")).unwrap(), b"one");
}

/// A layer's `@layer` destroyed and taken again under the same name (same content, but a
/// new `guid` and `createtxg`) is not the snapshot that was verified: refused.
#[test]
fn a_layer_snapshot_made_again_under_its_name_is_refused() {
    let s = setup("resnap");
    let records = s._t.path().join("records");
    let zs = open(&s, "node").with_records(&records).unwrap();
    let img = pulled(&s.store, vec![base(), app("one")], None);
    let opts = UnpackOptions::default();
    let p = zs.prepare(&s.store, &img, &opts).unwrap();
    let snap = p.top_snapshot();
    let guid = get("guid", &snap);
    Zfs::default().destroy(&snap, false).unwrap();
    run("zfs", &["snapshot", &snap]);
    assert_ne!(get("guid", &snap), guid);
    let e = zs.prepare(&s.store, &img, &opts).unwrap_err();
    assert!(
        matches!(&e, ZfsStoreError::Untrusted { snapshot, .. } if *snapshot == snap),
        "{e:?}"
    );
    assert!(
        e.to_string().contains(&format!("recorded guid {guid}")),
        "{e}"
    );
    let top = p.top_dataset().to_string();
    assert_eq!(list(&top), vec![top.clone(), snap], "left for the operator");
}

/// Layers made by an older worker (marked, no record) are not destroyed (a zone and the layer
/// above are clones of them) nor trusted on their marks: each is compared with the layer
/// applied again, recorded and reused as it is; the zone keeps its root.
#[test]
fn an_older_workers_layers_are_compared_recorded_and_reused() {
    let s = setup("adopt");
    let img = pulled(&s.store, vec![base(), app("one")], None);
    let opts = UnpackOptions::default();
    let chains = chain_ids(&[base().diff_id(), app("one").diff_id()]);
    // The older worker: marks only.
    let old = open(&s, "node");
    let p = old.prepare(&s.store, &img, &opts).unwrap();
    let web = old.clone_zone("web", &p, None).unwrap();
    let snaps: Vec<String> = chains
        .iter()
        .map(|c| format!("{}/layers/sha256-{}@layer", s.parent, c.encoded()))
        .collect();
    let guids: Vec<String> = snaps.iter().map(|s| get("guid", s)).collect();
    drop(old);

    // The upgraded worker keeps records.
    let records = s._t.path().join("records");
    let zs = open(&s, "node").with_records(&records).unwrap();
    let p = zs.prepare(&s.store, &img, &opts).unwrap();
    assert_eq!(p.layers(), &[LayerOutcome::Adopted, LayerOutcome::Adopted]);
    for (c, (snap, guid)) in chains.iter().zip(snaps.iter().zip(&guids)) {
        assert_eq!(&get("guid", snap), guid, "{snap} was made again");
        let r =
            std::fs::read_to_string(records.join(format!("sha256-{}.json", c.encoded()))).unwrap();
        assert!(r.contains(guid.as_str()), "{r}");
    }
    assert_eq!(get("origin", web.dataset.as_str()), snaps[1]);
    assert_eq!(std::fs::read(web.root().join("opt/one")).unwrap(), b"one");
    assert_no_scratch(&s);
    let again = zs.prepare(&s.store, &img, &opts).unwrap();
    assert_eq!(
        again.layers(),
        &[LayerOutcome::Reused, LayerOutcome::Reused]
    );
}

/// `e` refuses a dataset for want of the store's owner mark.
fn assert_unmarked(e: &ZfsStoreError) {
    assert!(
        matches!(
            e,
            ZfsStoreError::Unmarked {
                property: "org.reddwarf:owner",
                ..
            }
        ),
        "{e:?}"
    );
}

/// Allocated bytes of every file and directory under `p` (what `du -s --block-size=1` says).
fn allocated(p: &std::path::Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::symlink_metadata(p).unwrap();
    let mut n = m.blocks() * 512;
    if m.is_dir() {
        for e in std::fs::read_dir(p).unwrap() {
            n += allocated(&e.unwrap().path());
        }
    }
    n
}

/// The figures in docs/benchmarks.md ("Zones on ZFS"): the Nth zone from one image, time and
/// bytes, ZFS store against the directory store. Measures and prints; asserts no times.
/// `cargo test -p worker-runtime --test zfs_store -- --ignored --nocapture nth_zone`
#[test]
#[ignore = "a measurement, run by hand (docs/benchmarks.md)"]
fn nth_zone_figures() {
    use std::time::Instant;
    let s = setup("bench");
    let zs = open(&s, "node");
    // One 24 MiB layer: 384 files of 64 KiB that do not compress.
    let mut tar = Tar::new().dir("usr");
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for i in 0..384 {
        let data: Vec<u8> = (0..64 * 1024)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        tar = tar.file(&format!("usr/f{i}"), &data);
    }
    let img = pulled(&s.store, vec![image::Layer::new(tar.finish())], None);
    let opts = UnpackOptions::default();
    let zfs_used = |ds: &str| -> u64 { get("used", ds).parse().unwrap() };
    let settle = || std::thread::sleep(std::time::Duration::from_secs(6));

    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("load average at the start: {}", load.trim());
    let t = Instant::now();
    let p = zs.prepare(&s.store, &img, &opts).unwrap();
    let prepare = t.elapsed();
    let mut zfs_times = Vec::new();
    for n in 1..=50 {
        let t = Instant::now();
        zs.clone_zone(&format!("z{n}"), &p, None).unwrap();
        zfs_times.push(t.elapsed());
        if n == 1 || n == 10 || n == 50 {
            let total: std::time::Duration = zfs_times.iter().sum();
            settle();
            let layers_used = zfs_used(&format!("{}/layers", s.parent));
            let zones_used = zfs_used(&format!("{}/zones", s.parent));
            eprintln!(
                "zfs N={n}: zone {n} took {:?} (clone); all {n} zones {:?} plus the layer once \
                 {prepare:?}; layers use {layers_used} B, the {n} zone clones {zones_used} B",
                zfs_times[n - 1],
                total
            );
        }
    }

    let t2 = tempfile::tempdir().unwrap();
    let mut dir_times = Vec::new();
    for n in 1..=50 {
        let t = Instant::now();
        let root = worker_runtime::build_root(
            &s.store,
            &t2.path().join(format!("z{n}")),
            "node",
            &img,
            &opts,
        )
        .unwrap();
        dir_times.push(t.elapsed());
        let (_staging, _) = root.into_staging();
        if n == 1 || n == 10 || n == 50 {
            let total: std::time::Duration = dir_times.iter().sum();
            eprintln!(
                "dir N={n}: zone {n} took {:?}; all {n} zones {total:?}; they use {} B",
                dir_times[n - 1],
                allocated(t2.path())
            );
        }
    }
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    eprintln!("load average at the end: {}", load.trim());
}
