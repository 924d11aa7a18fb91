//! The provisioner conformance suite (`conformance/`) on the ZFS layer store, on real ZFS
//! (zfs-fuse on a file-backed pool, `zfspool/`): the `dir` provisioner and the `illumos` one
//! over the fake zone tools (`fakezone/`), each with zonepaths, staging roots and the trash
//! made of datasets (`ZoneDatasets`), a zone root being a clone of the image's top snapshot.
//!
//! Then six deliberately broken backends on the same store, each right in everything but one
//! thing, which the suite must fail: one that destroys a dataset it did not create, one that
//! reports success when the zone tools failed, one that leaves its staging clone after a
//! failed create, one that deletes a zonepath in place instead of through its trash
//! (caught by a crash injected inside the deletion), and one that destroys the old zonepath
//! before placing the new one (caught by a crash injected between the two), and one whose
//! start destroys datasets it did not create in `.staging` and `.trash`.

mod conformance;
mod fakezone;
mod illumos_kill;
mod image;
mod tarbuild;
mod zfspool;

use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use conformance::Backend;
use fakezone::{FakeZones, State, StopEvent};
use worker_runtime::provision::describe;
use worker_runtime::zfs::Zfs;
use worker_runtime::{
    Capabilities, ContentStore, DirProvisioner, IllumosProvisioner, ProvisionError, Provisioner,
    PulledImage, StepHook, UnpackOptions, VerifiedRoot, ZfsLayerStore, ZoneDatasets,
    ZoneDescription, ZoneSpec,
};

/// One dataset per backend on the shared pool; each worker has its own layer store under it
/// (`<top>/<worker>`) and its zonepaths under `<tmp>/zones-<worker>`.
struct ZfsBackend {
    top: String,
    store: ContentStore,
    t: tempfile::TempDir,
    _pool: Arc<zfspool::Pool>,
}

const WORKERS: [&str; 2] = ["node-a", "node-b"];

impl ZfsBackend {
    fn new() -> Self {
        let pool = zfspool::pool();
        let top = pool.dataset("suite");
        for w in WORKERS {
            zfspool::run("zfs", &["create", &format!("{top}/{w}")]);
        }
        let t = tempfile::tempdir().unwrap();
        let store = ContentStore::open(&t.path().join("content"), "node").unwrap();
        ZfsBackend {
            top,
            store,
            t,
            _pool: pool,
        }
    }

    fn base(&self, worker: &str) -> PathBuf {
        self.t.path().join(format!("zones-{worker}"))
    }

    /// Worker `worker`'s zonepath datasets, opened as a start would.
    fn datasets(&self, worker: &str) -> ZoneDatasets {
        let layers =
            ZfsLayerStore::open(Zfs::default(), &format!("{}/{worker}", self.top), worker).unwrap();
        ZoneDatasets::open(layers, &self.base(worker)).unwrap()
    }

    fn open_dir(&self, worker: &str, hook: Option<StepHook>) -> DirProvisioner {
        let p = DirProvisioner::on_datasets(self.datasets(worker), worker).unwrap();
        match hook {
            Some(h) => p.with_step_hook(h),
            None => p,
        }
    }

    fn clone_root(&self, worker: &str, img: &PulledImage, staging: &Path) -> VerifiedRoot {
        self.datasets(worker)
            .build_root(
                &self.store,
                staging,
                worker,
                img,
                &UnpackOptions::default(),
                None,
            )
            .unwrap()
    }

    /// An unmarked dataset among worker `worker`'s zone datasets, mounted in its base's `sub`
    /// (`.staging` or `.trash`), holding `data`.
    fn plant_leftover_dataset(&self, worker: &str, sub: &str) -> PathBuf {
        drop(self.open_dir(worker, None));
        let at = self.base(worker).join(sub).join("not-rdctls");
        let name = format!("{}/{worker}/roots/not-rdctls{sub}", self.top);
        let mp = format!("mountpoint={}", at.display());
        zfspool::run("zfs", &["create", "-o", &mp, &name]);
        std::fs::write(at.join("data"), conformance::PLANTED).unwrap();
        at
    }

    /// An unmarked dataset where worker `worker`'s zone `zone` goes, holding `data`.
    fn plant_dataset(&self, worker: &str, zone: &str) -> PathBuf {
        drop(self.datasets(worker));
        zfspool::run(
            "zfs",
            &["create", &format!("{}/{worker}/zones/{zone}", self.top)],
        );
        let zp = self.base(worker).join(zone);
        std::fs::write(zp.join("data"), conformance::PLANTED).unwrap();
        zp
    }
}

impl Drop for ZfsBackend {
    fn drop(&mut self) {
        // Unmount before the temporary directory holding the mountpoints goes.
        if let Err(e) = Zfs::default().destroy(&self.top, true) {
            eprintln!("destroying {}: {e}", self.top);
        }
    }
}

impl Backend for ZfsBackend {
    type P = DirProvisioner;
    fn open(&self, worker: &str, hook: Option<StepHook>) -> DirProvisioner {
        self.open_dir(worker, hook)
    }
    fn store(&self) -> &ContentStore {
        &self.store
    }
    fn running(&self, zone: &str) -> bool {
        WORKERS
            .iter()
            .any(|w| self.base(w).join(zone).join("root").is_dir())
    }
    fn stops(&self) -> Option<Vec<StopEvent>> {
        None
    }
    fn ignore_stop(&self, _zone: &str) {}
    fn root(
        &self,
        _p: &DirProvisioner,
        worker: &str,
        img: &PulledImage,
        at: &Path,
    ) -> VerifiedRoot {
        self.clone_root(worker, img, at)
    }
    fn plant(&self, worker: &str, zone: &str) -> PathBuf {
        self.plant_dataset(worker, zone)
    }
    fn plant_leftover(&self, worker: &str, sub: &str) -> PathBuf {
        self.plant_leftover_dataset(worker, sub)
    }
}

/// The `illumos` provisioner over the fake zone tools, its zonepaths on the ZFS store.
struct IllumosZfsBackend {
    zfs: ZfsBackend,
    fake: FakeZones,
}

impl IllumosZfsBackend {
    fn new() -> Self {
        IllumosZfsBackend {
            zfs: ZfsBackend::new(),
            fake: FakeZones::default(),
        }
    }
}

impl Backend for IllumosZfsBackend {
    type P = IllumosProvisioner<FakeZones>;
    fn open(&self, worker: &str, hook: Option<StepHook>) -> Self::P {
        IllumosProvisioner::new(self.zfs.open_dir(worker, hook), self.fake.clone())
    }
    fn store(&self) -> &ContentStore {
        &self.zfs.store
    }
    fn running(&self, zone: &str) -> bool {
        self.fake.state(zone) == Some(State::Running)
    }
    fn stops(&self) -> Option<Vec<StopEvent>> {
        Some(self.fake.stops())
    }
    fn ignore_stop(&self, zone: &str) {
        self.fake.ignore_stop(zone);
    }
    fn root(&self, _p: &Self::P, worker: &str, img: &PulledImage, at: &Path) -> VerifiedRoot {
        self.zfs.clone_root(worker, img, at)
    }
    fn plant(&self, worker: &str, zone: &str) -> PathBuf {
        self.zfs.plant_dataset(worker, zone)
    }
    fn plant_leftover(&self, worker: &str, sub: &str) -> PathBuf {
        self.zfs.plant_leftover_dataset(worker, sub)
    }
    fn fail_tools(&self, sub: &str) -> bool {
        self.fake.fail_on(sub);
        true
    }
    fn heal_tools(&self) {
        self.fake.heal();
    }
}

conformance_tests!(zfs, ZfsBackend::new());
conformance_tests!(zfs_illumos, IllumosZfsBackend::new());

impl illumos_kill::Node for IllumosZfsBackend {
    fn fake(&self) -> &FakeZones {
        &self.fake
    }
    fn base(&self) -> PathBuf {
        self.zfs.base(WORKERS[0])
    }
    fn start(&self, hook: Option<StepHook>) -> IllumosProvisioner<FakeZones> {
        let (w, d) = (WORKERS[0], self.zfs.datasets(WORKERS[0]));
        let dir = DirProvisioner::for_zone_tools(&self.zfs.base(w), w, Some(d.clone())).unwrap();
        let volumes = worker_runtime::volume::Volumes::open(&self.zfs.base(w), w, Some(d)).unwrap();
        illumos_kill::start(dir.with_volumes(volumes), &self.fake, hook)
    }
    fn root(&self, p: &IllumosProvisioner<FakeZones>, tag: &str) -> VerifiedRoot {
        conformance::root(self, p, WORKERS[0], tag)
    }
}

/// An illumos update killed during install with every zonepath a dataset: the start's
/// uninstall of the half-installed zone deletes the new root, not the old one the switch's
/// mountpoint changes put back. (The kill at every step is `provision.rs`'s: the zone tools'
/// steps do not depend on the store, and `tests/worker_kill.rs` kills the real worker at
/// every move on ZFS; on zfs-fuse the whole sweep would add minutes to this binary.)
#[test]
fn zfs_illumos_an_update_killed_during_install_runs_the_old_zone_again() {
    illumos_kill::killed_during_install(&IllumosZfsBackend::new());
}

#[test]
fn a_zone_root_is_a_clone_of_the_top_snapshot_and_goes_with_the_zone() {
    let b = ZfsBackend::new();
    let p = b.open("node-a", None);
    let d = p
        .provision(
            &conformance::spec("web"),
            conformance::root(&b, &p, "node-a", "v1"),
        )
        .unwrap();
    // The zonepath is a dataset of the store's `roots`, mounted where the zone stands.
    let roots = format!("{}/node-a/roots", b.top);
    let ds = zfspool::list(&roots)
        .into_iter()
        .find(|n| zfspool::get("mountpoint", n) == d.zonepath.to_str().unwrap())
        .unwrap_or_else(|| panic!("no dataset of {roots} is mounted at the zonepath"));
    let origin = zfspool::get("origin", &ds);
    assert!(
        origin.starts_with(&format!("{}/node-a/layers/sha256-", b.top))
            && origin.ends_with("@layer"),
        "{origin}"
    );
    assert_eq!(zfspool::get("org.reddwarf:kind", &ds), "zonepath");
    assert_eq!(zfspool::get("org.reddwarf:zone", &ds), "web");
    p.remove("web").unwrap();
    let left: Vec<String> = zfspool::list(&format!("{}/node-a", b.top))
        .into_iter()
        .filter(|n| n.contains("/roots/") || n.contains("/zones/"))
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

/// The panic message of `case`, which must panic.
fn suite_fails(what: &str, case: impl FnOnce()) -> String {
    let r = std::panic::catch_unwind(AssertUnwindSafe(case));
    let payload = r.expect_err(&format!("the suite passed a backend that {what}"));
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// A provisioner that is the one under `P` except for the methods a broken backend replaces.
macro_rules! delegate {
    ($inner:tt) => {
        fn staging_dir(&self) -> PathBuf {
            self.$inner.staging_dir()
        }
        fn current(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
            self.$inner.current(zone)
        }
        fn zones(&self) -> Result<Vec<String>, ProvisionError> {
            self.$inner.zones()
        }
        fn capabilities(&self) -> Capabilities {
            self.$inner.capabilities()
        }
    };
}

/// Broken (a): destroys whatever dataset is where a zone goes, marks or not.
struct Grabby {
    p: DirProvisioner,
    top: String,
}

impl Grabby {
    fn grab(&self, zone: &str) {
        let ds = format!("{}/zones/{zone}", self.top);
        if Zfs::default().exists(&ds).unwrap() {
            Zfs::default().destroy(&ds, true).unwrap();
        }
    }
}

impl Provisioner for Grabby {
    delegate!(p);
    fn provision(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        if self.p.current(&spec.name).is_err() {
            self.grab(&spec.name);
        }
        self.p.provision(spec, root)
    }
    fn remove(&self, zone: &str) -> Result<(), ProvisionError> {
        self.grab(zone);
        self.p.remove(zone)
    }
}

struct GrabbyBackend(ZfsBackend);

/// Broken (b): reports success when the zone tools failed.
struct Liar(IllumosProvisioner<FakeZones>);

impl Provisioner for Liar {
    delegate!(0);
    fn provision(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        let zonepath = conformance::zonepath(&self.0, &spec.name);
        let d = describe(spec, root.image(), zonepath)?;
        match self.0.provision(spec, root) {
            Err(ProvisionError::Command { .. }) => Ok(d),
            r => r,
        }
    }
    fn remove(&self, zone: &str) -> Result<(), ProvisionError> {
        self.0.remove(zone)
    }
}

struct LiarBackend(IllumosZfsBackend);

/// Broken (c): returns early on a refused config without destroying its staging clone.
struct Leaky(DirProvisioner);

impl Provisioner for Leaky {
    delegate!(0);
    fn provision(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        let zonepath = conformance::zonepath(&self.0, &spec.name);
        if let Err(e) = describe(spec, root.image(), zonepath) {
            std::mem::forget(root);
            return Err(e);
        }
        self.0.provision(spec, root)
    }
    fn remove(&self, zone: &str) -> Result<(), ProvisionError> {
        self.0.remove(zone)
    }
}

struct LeakyBackend(ZfsBackend);

/// Broken (d): removes a zone by deleting its zonepath's entries where it stands (asking
/// the step hook before each, as the real one does in its trash), then the dataset.
struct InPlace {
    p: DirProvisioner,
    hook: Option<StepHook>,
}

impl Provisioner for InPlace {
    delegate!(p);
    fn provision(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        self.p.provision(spec, root)
    }
    fn remove(&self, zone: &str) -> Result<(), ProvisionError> {
        if self.p.current(zone)?.is_none() {
            return Ok(());
        }
        let zp = conformance::zonepath(&self.p, zone);
        let mut names: Vec<_> = std::fs::read_dir(&zp)
            .unwrap()
            .flatten()
            .map(|e| e.file_name())
            .collect();
        names.sort();
        for name in names {
            let step = format!("remove {}", name.to_string_lossy());
            if self.hook.as_ref().is_some_and(|h| h(zone, &step)) {
                return Err(ProvisionError::Interrupted {
                    zone: zone.to_owned(),
                    step,
                });
            }
            let p = zp.join(&name);
            if p.is_dir() {
                std::fs::remove_dir_all(&p).unwrap();
            } else {
                std::fs::remove_file(&p).unwrap();
            }
        }
        self.p.datasets().unwrap().destroy(&zp).unwrap();
        Ok(())
    }
}

struct InPlaceBackend(ZfsBackend);

/// Broken (e): replacing a zone destroys the old zonepath's dataset where it stands (asking
/// the step hook first) before the new one is placed.
struct DestroyFirst {
    p: DirProvisioner,
    hook: Option<StepHook>,
}

impl Provisioner for DestroyFirst {
    delegate!(p);
    fn provision(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        let zone = spec.name.as_str();
        if self.p.current(zone)?.is_some() {
            let step = "destroy the old zonepath".to_owned();
            if self.hook.as_ref().is_some_and(|h| h(zone, &step)) {
                return Err(ProvisionError::Interrupted {
                    zone: zone.to_owned(),
                    step,
                });
            }
            let zp = conformance::zonepath(&self.p, zone);
            assert!(self.p.datasets().unwrap().destroy(&zp).unwrap());
        }
        self.p.provision(spec, root)
    }
    fn remove(&self, zone: &str) -> Result<(), ProvisionError> {
        self.p.remove(zone)
    }
}

struct DestroyFirstBackend(ZfsBackend);

/// Broken (f): its start destroys every dataset mounted in `.staging` or `.trash`, marks or
/// not. Otherwise the `dir` provisioner on the ZFS store.
struct SweeperBackend(ZfsBackend);

impl SweeperBackend {
    fn sweep(&self, worker: &str) {
        let roots = format!("{}/{worker}/roots", self.0.top);
        let base = self.0.base(worker);
        let zfs = Zfs::default();
        if !zfs.exists(&roots).unwrap() {
            return;
        }
        for ds in zfspool::list(&roots).into_iter().skip(1) {
            let at = zfspool::get("mountpoint", &ds);
            if [".staging", ".trash"]
                .iter()
                .any(|sub| Path::new(&at).parent() == Some(&base.join(sub)))
            {
                zfs.destroy(&ds, true).unwrap();
            }
        }
    }
}

/// The backend parts the broken ones share with [`ZfsBackend`].
macro_rules! zfs_backend {
    ($b:ident, $p:ty, |$s:ident, $w:ident, $h:ident| $open:expr) => {
        impl Backend for $b {
            type P = $p;
            fn open(&self, $w: &str, $h: Option<StepHook>) -> $p {
                let $s = self;
                $open
            }
            fn store(&self) -> &ContentStore {
                self.0.store()
            }
            fn running(&self, zone: &str) -> bool {
                self.0.running(zone)
            }
            fn stops(&self) -> Option<Vec<StopEvent>> {
                self.0.stops()
            }
            fn ignore_stop(&self, zone: &str) {
                self.0.ignore_stop(zone)
            }
            fn root(&self, _p: &$p, worker: &str, img: &PulledImage, at: &Path) -> VerifiedRoot {
                zfs_of(&self.0).clone_root(worker, img, at)
            }
            fn plant(&self, worker: &str, zone: &str) -> PathBuf {
                self.0.plant(worker, zone)
            }
            fn plant_leftover(&self, worker: &str, sub: &str) -> PathBuf {
                self.0.plant_leftover(worker, sub)
            }
            fn fail_tools(&self, sub: &str) -> bool {
                self.0.fail_tools(sub)
            }
            fn heal_tools(&self) {
                self.0.heal_tools()
            }
        }
    };
}

trait HasZfs {
    fn zfs(&self) -> &ZfsBackend;
}
impl HasZfs for ZfsBackend {
    fn zfs(&self) -> &ZfsBackend {
        self
    }
}
impl HasZfs for IllumosZfsBackend {
    fn zfs(&self) -> &ZfsBackend {
        &self.zfs
    }
}
fn zfs_of(b: &impl HasZfs) -> &ZfsBackend {
    b.zfs()
}

zfs_backend!(GrabbyBackend, Grabby, |s, w, h| Grabby {
    p: s.0.open_dir(w, h),
    top: format!("{}/{w}", s.0.top),
});
zfs_backend!(LiarBackend, Liar, |s, w, h| Liar(s.0.open(w, h)));
zfs_backend!(LeakyBackend, Leaky, |s, w, h| Leaky(s.0.open_dir(w, h)));
zfs_backend!(InPlaceBackend, InPlace, |s, w, h| InPlace {
    p: s.0.open_dir(w, h.clone()),
    hook: h,
});
zfs_backend!(DestroyFirstBackend, DestroyFirst, |s, w, h| DestroyFirst {
    p: s.0.open_dir(w, h.clone()),
    hook: h,
});

zfs_backend!(SweeperBackend, DirProvisioner, |s, w, h| {
    s.sweep(w);
    s.0.open_dir(w, h)
});

#[test]
fn the_suite_fails_a_backend_whose_start_destroys_datasets_it_did_not_create() {
    conformance::create_describe_list_remove(&SweeperBackend(ZfsBackend::new()));
    let msg = suite_fails("destroys unmarked datasets in .staging and .trash", || {
        conformance::a_start_leaves_what_it_did_not_create_in_staging_and_trash(&SweeperBackend(
            ZfsBackend::new(),
        ))
    });
    assert!(msg.contains("was not the worker's and a start"), "{msg}");
}

#[test]
fn the_suite_fails_a_backend_that_destroys_the_old_zonepath_before_placing_the_new_one() {
    conformance::create_describe_list_remove(&DestroyFirstBackend(ZfsBackend::new()));
    let msg = suite_fails(
        "destroys the old zonepath before placing the new one",
        || conformance::crash_during_replace_converges(&DestroyFirstBackend(ZfsBackend::new())),
    );
    assert!(msg.contains("neither image's root"), "{msg}");
}

#[test]
fn the_suite_fails_a_backend_that_destroys_datasets_it_did_not_create() {
    // Right otherwise...
    conformance::create_describe_list_remove(&GrabbyBackend(ZfsBackend::new()));
    // ...and the case for what the worker did not create catches it.
    let msg = suite_fails("destroys a dataset it did not create", || {
        conformance::never_touches_what_it_did_not_create(&GrabbyBackend(ZfsBackend::new()))
    });
    assert!(msg.contains("not the worker's"), "{msg}");
}

#[test]
fn the_suite_fails_a_backend_that_reports_success_when_the_zone_tools_failed() {
    conformance::create_describe_list_remove(&LiarBackend(IllumosZfsBackend::new()));
    let msg = suite_fails("reports success when zoneadm failed", || {
        conformance::failed_zone_tools_fail_the_create(&LiarBackend(IllumosZfsBackend::new()))
    });
    assert!(
        msg.contains("zoneadm install failed and the create gave Ok"),
        "{msg}"
    );
}

#[test]
fn the_suite_fails_a_backend_that_leaves_a_half_made_root_after_a_failed_create() {
    conformance::create_describe_list_remove(&LeakyBackend(ZfsBackend::new()));
    let msg = suite_fails("leaves its staging clone after a failed create", || {
        conformance::a_failed_create_leaves_nothing_half_made(&LeakyBackend(ZfsBackend::new()))
    });
    assert!(msg.contains("staging leftovers"), "{msg}");
}

#[test]
fn the_suite_fails_a_backend_that_deletes_in_place_instead_of_through_its_trash() {
    conformance::create_describe_list_remove(&InPlaceBackend(ZfsBackend::new()));
    let msg = suite_fails("deletes a zonepath in place", || {
        conformance::crash_during_remove_converges(&InPlaceBackend(ZfsBackend::new()))
    });
    assert!(msg.contains("half-made"), "{msg}");
}
