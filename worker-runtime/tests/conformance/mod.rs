//! The provisioner conformance suite: what every [`Provisioner`] must do. A provisioner is
//! whatever passes it (containerd's `ContentSuite`, distribution's driver `testsuites`).
//!
//! One function per case, each taking a [`Backend`]: a factory that opens a worker's
//! provisioner as a fresh start would (optionally with a [`StepHook`] that injects a crash
//! before a chosen step) and observes the system under it. `conformance_tests!` generates one
//! named test per case for a backend. The cases:
//!
//! - create from a verified root, describe, list, remove;
//! - idempotent re-runs (the same image again, removing twice, removing what never existed);
//! - replace on a moved tag with stop semantics: the image's `StopSignal` through the SMF stop
//!   method, the zone's stop timeout as the grace period, then halt when it runs out;
//! - a crash before any step of create, replace and remove converges on the next pass (a
//!   fresh provisioner, as after a restart) without touching another worker's zone; steps
//!   include each entry of a removal, so crashes land inside it too, and right after every
//!   crash the zone is whole (absent, or described with one of the images it had): a
//!   zonepath deleted in place instead of through the trash fails here; a crash inside a
//!   replacement leaves the old root or the new one in the zonepath, never neither (absent
//!   is no answer there): a backend that deletes the old zonepath, or its root, before the
//!   new one is placed fails here;
//! - two workers with different ids never touch each other's zones;
//! - what the worker did not create (a directory or dataset where a zonepath goes, or in
//!   `.staging` or `.trash`) is never claimed, changed or removed, by a start's clean-up
//!   neither;
//! - zone tools that fail fail the create (a backend reporting success fails the suite), and
//!   a failed create leaves nothing half-made: no staging root, no zone described;
//! - zone tools that fail fail the remove: shutdown and halt, uninstall, or zonecfg delete
//!   failing is an error, the zone stays listed, and the next pass removes it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use registry_client::Reference;
use validator::{Document, check_config, check_document};
use worker_runtime::provision::illumos::ENTRYPOINT_MANIFEST_PATH;
use worker_runtime::{
    ContentStore, ProvisionError, Provisioner, PullPolicy, PulledImage, ResourceLimits, StepHook,
    UnpackOptions, VerifiedRoot, ZoneSpec, build_root,
};

use crate::fakezone::StopEvent;
use crate::image;
use crate::tarbuild::Tar;

/// How the suite opens and watches one kind of provisioner.
pub trait Backend {
    /// The provisioner.
    type P: Provisioner;
    /// Worker `worker`'s provisioner, opened as a fresh start would (a restart after a crash
    /// is another `open`); `hook` is called before every step that changes the system.
    fn open(&self, worker: &str, hook: Option<StepHook>) -> Self::P;
    /// The content store images are built from.
    fn store(&self) -> &ContentStore;
    /// Whether the system has the zone up (for backends whose zones run nothing: whether the
    /// zonepath is in place).
    fn running(&self, zone: &str) -> bool;
    /// The stops the system saw, for backends whose zones run processes.
    fn stops(&self) -> Option<Vec<StopEvent>>;
    /// Makes the zone's application ignore its stop signal (backends that run processes).
    fn ignore_stop(&self, zone: &str);
    /// A verified root of `img` at `staging` for worker `worker`'s provisioner `p` (default:
    /// a directory root, [`build_root`]).
    fn root(&self, p: &Self::P, worker: &str, img: &PulledImage, staging: &Path) -> VerifiedRoot {
        let _ = p;
        build_root(
            self.store(),
            staging,
            worker,
            img,
            &UnpackOptions::default(),
        )
        .unwrap()
    }
    /// Puts something worker `worker` did not create where its zone `zone`'s zonepath goes
    /// (default: a directory without a mark, holding `data`) and returns that path.
    fn plant(&self, worker: &str, zone: &str) -> PathBuf {
        let zp = zonepath(&self.open(worker, None), zone);
        std::fs::create_dir_all(&zp).unwrap();
        std::fs::write(zp.join("data"), PLANTED).unwrap();
        zp
    }
    /// Puts something worker `worker` did not create into its base's `sub` (`.staging` or
    /// `.trash`), as an operator or another program might (default: a directory without a
    /// mark, holding [`PLANTED`] in `data`), and returns its path. The base exists: the
    /// worker was opened before.
    fn plant_leftover(&self, worker: &str, sub: &str) -> PathBuf {
        let p = self.open(worker, None);
        let at = p
            .staging_dir()
            .parent()
            .expect("the staging directory is inside the base")
            .join(sub)
            .join("not-rdctls");
        std::fs::create_dir_all(&at).unwrap();
        std::fs::write(at.join("data"), PLANTED).unwrap();
        at
    }
    /// Makes the zone tools fail at `zoneadm <sub>` (`delete`: `zonecfg delete`) until
    /// [`Backend::heal_tools`]; `false` when the backend runs no zone tools.
    fn fail_tools(&self, sub: &str) -> bool {
        let _ = sub;
        false
    }
    /// Ends [`Backend::fail_tools`].
    fn heal_tools(&self) {}
}

/// What [`Backend::plant`] puts in the planted zonepath's `data`.
pub const PLANTED: &[u8] = b"not rdctl's";

/// Where `p` puts zone `zone`'s zonepath: next to its staging directory.
pub fn zonepath<P: Provisioner>(p: &P, zone: &str) -> PathBuf {
    p.staging_dir()
        .parent()
        .expect("the staging directory is inside the base")
        .join(zone)
}

pub const STOP_TIMEOUT: u32 = 7;

pub fn spec(zone: &str) -> ZoneSpec {
    ZoneSpec {
        name: zone.into(),
        image: Reference::parse("127.0.0.1:5000/apps/web:1").unwrap(),
        pull_policy: PullPolicy::Always,
        brand: "nlipkg".into(),
        stop_timeout_secs: Some(STOP_TIMEOUT),
        limits: ResourceLimits::default(),
        volumes: Vec::new(),
        reclaim: worker_runtime::Reclaim::Retain,
        rollout: Default::default(),
        source: PathBuf::from(format!("{zone}.toml")),
    }
}

/// An image whose root holds `etc/release` = `tag`, its blobs in `store`.
pub fn pulled(store: &ContentStore, tag: &str) -> PulledImage {
    let layer = image::Layer::new(
        Tar::new()
            .dir("etc")
            .file("etc/release", tag.as_bytes())
            .finish(),
    );
    store.put_bytes(&layer.digest(), &layer.blob).unwrap();
    let img = image::image(vec![layer], &image::Spec::default());
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

static ROOTS: AtomicUsize = AtomicUsize::new(0);

/// A verified root of the image tagged `tag`, built where `p` wants staging roots.
pub fn root<B: Backend>(b: &B, p: &B::P, worker: &str, tag: &str) -> VerifiedRoot {
    root_of(b, p, worker, &pulled(b.store(), tag))
}

/// A verified root of `img`, built where `p` wants staging roots.
pub fn root_of<B: Backend>(b: &B, p: &B::P, worker: &str, img: &PulledImage) -> VerifiedRoot {
    let staging = p
        .staging_dir()
        .join(format!("suite.{}", ROOTS.fetch_add(1, Ordering::Relaxed)));
    b.root(p, worker, img, &staging)
}

fn release(zonepath: &Path) -> String {
    std::fs::read_to_string(zonepath.join("root/etc/release")).unwrap_or_default()
}

/// Nothing half-made is left where staging roots are built.
fn assert_no_staging_left<P: Provisioner>(p: &P) {
    let left: Vec<_> = std::fs::read_dir(p.staging_dir())
        .map(|d| d.flatten().map(|e| e.file_name()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "staging leftovers: {left:?}");
}

/// The zone runs `tag` and is fully described, listed and up.
fn assert_zone<B: Backend>(b: &B, p: &B::P, zone: &str, tag: &str) {
    let d = p
        .current(zone)
        .unwrap()
        .unwrap_or_else(|| panic!("zone {zone}: no current description"));
    assert_eq!(d.zone, zone);
    assert_eq!(release(&d.zonepath), tag, "zone {zone}: root content");
    assert!(
        p.zones().unwrap().contains(&zone.to_owned()),
        "zone {zone} not listed"
    );
    assert!(b.running(zone), "zone {zone} is not up");
}

pub fn create_describe_list_remove<B: Backend>(b: &B) {
    let p = b.open("node-a", None);
    assert!(p.zones().unwrap().is_empty());
    assert!(p.current("web").unwrap().is_none());
    let img = pulled(b.store(), "v1");
    let d = p
        .provision(&spec("web"), root(b, &p, "node-a", "v1"))
        .unwrap();
    assert_eq!(d.zone, "web");
    assert_eq!(d.brand, "nlipkg");
    assert_eq!(d.manifest_digest, img.manifest_digest);
    assert_eq!(d.config_digest, img.config_digest);
    assert_eq!(d.stop_signal, "SIGUSR1");
    assert_eq!(d.stop_timeout_secs, STOP_TIMEOUT);
    assert_eq!(d.smf_stop_exec, ":kill -USR1");
    assert_eq!(p.current("web").unwrap(), Some(d.clone()));
    assert_eq!(p.zones().unwrap(), ["web"]);
    assert!(b.running("web"));
    assert_eq!(release(&d.zonepath), "v1");
    // The stop semantics travel into the zone as its entrypoint service's stop method.
    let smf =
        std::fs::read_to_string(d.zonepath.join("root").join(ENTRYPOINT_MANIFEST_PATH)).unwrap();
    assert!(
        smf.contains(&format!(
            "name=\"stop\" exec=\":kill -USR1\" timeout_seconds=\"{STOP_TIMEOUT}\""
        )),
        "{smf}"
    );
    p.remove("web").unwrap();
    assert!(p.current("web").unwrap().is_none());
    assert!(p.zones().unwrap().is_empty());
    assert!(!b.running("web"));
    assert!(!d.zonepath.exists(), "{} still there", d.zonepath.display());
    assert_no_staging_left(&p);
}

pub fn reruns_are_idempotent<B: Backend>(b: &B) {
    let p = b.open("node-a", None);
    let first = p
        .provision(&spec("web"), root(b, &p, "node-a", "v1"))
        .unwrap();
    let again = p
        .provision(&spec("web"), root(b, &p, "node-a", "v1"))
        .unwrap();
    assert_eq!(first, again);
    assert_zone(b, &p, "web", "v1");
    assert_eq!(p.zones().unwrap(), ["web"]);
    // A restart changes nothing.
    let p = b.open("node-a", None);
    assert_eq!(p.current("web").unwrap(), Some(first));
    p.remove("web").unwrap();
    p.remove("web").unwrap();
    p.remove("never-was").unwrap();
    assert!(p.zones().unwrap().is_empty());
    assert_no_staging_left(&p);
}

pub fn replace_stops_with_signal_then_halts<B: Backend>(b: &B) {
    let p = b.open("node-a", None);
    p.provision(&spec("web"), root(b, &p, "node-a", "v1"))
        .unwrap();
    // The tag moved: the new root is verified before the old zone stops.
    let d = p
        .provision(&spec("web"), root(b, &p, "node-a", "v2"))
        .unwrap();
    assert_zone(b, &p, "web", "v2");
    assert_eq!(p.current("web").unwrap(), Some(d));
    let grace = Some(Duration::from_secs(u64::from(STOP_TIMEOUT)));
    if let Some(stops) = b.stops() {
        // The application got the image's StopSignal through the stop method, within the
        // zone's stop timeout, and went down: no halt.
        assert_eq!(
            stops,
            [StopEvent::Shutdown {
                zone: "web".into(),
                signal: Some("SIGUSR1".into()),
                method_timeout: Some(STOP_TIMEOUT),
                grace,
                completed: true,
            }]
        );
    }
    // An application that ignores its signal is halted once the stop timeout is over.
    b.ignore_stop("web");
    p.provision(&spec("web"), root(b, &p, "node-a", "v3"))
        .unwrap();
    assert_zone(b, &p, "web", "v3");
    if let Some(stops) = b.stops() {
        assert_eq!(
            stops[1..],
            [
                StopEvent::Shutdown {
                    zone: "web".into(),
                    signal: Some("SIGUSR1".into()),
                    method_timeout: Some(STOP_TIMEOUT),
                    grace,
                    completed: false,
                },
                StopEvent::Halt { zone: "web".into() },
            ]
        );
    }
    p.remove("web").unwrap();
    assert!(!b.running("web"));
    assert_no_staging_left(&p);
}

/// Counts steps; stops the provisioner before step number `at` (0-based). Records whether it
/// did.
struct Crash {
    at: usize,
    seen: AtomicUsize,
    steps: std::sync::Mutex<Vec<String>>,
}

impl Crash {
    fn hook(at: usize) -> (Arc<Crash>, StepHook) {
        let c = Arc::new(Crash {
            at,
            seen: AtomicUsize::new(0),
            steps: std::sync::Mutex::new(Vec::new()),
        });
        let c2 = c.clone();
        let hook: StepHook = Arc::new(move |zone: &str, step: &str| {
            c2.steps.lock().unwrap().push(format!("{zone}: {step}"));
            c2.seen.fetch_add(1, Ordering::SeqCst) == c2.at
        });
        (c, hook)
    }
}

/// Another worker's zone, made first, and what it looked like.
fn foreign_zone<B: Backend>(b: &B) -> (B::P, worker_runtime::ZoneDescription) {
    let other = b.open("node-b", None);
    let d = other
        .provision(&spec("theirs"), root(b, &other, "node-b", "theirs-v1"))
        .unwrap();
    (other, d)
}

fn assert_foreign_intact<B: Backend>(b: &B, other: &B::P, d: &worker_runtime::ZoneDescription) {
    assert_eq!(
        other.current(&d.zone).unwrap().as_ref(),
        Some(d),
        "another worker's zone changed"
    );
    assert_eq!(
        release(&d.zonepath),
        "theirs-v1",
        "another worker's root changed"
    );
    assert!(b.running(&d.zone), "another worker's zone is down");
}

/// `op` run with a crash before step `k`, for every `k` until a run completes; after each
/// crash a fresh provisioner (the next pass) must converge with `finish`.
fn crash_everywhere<B: Backend>(
    b: &B,
    what: &str,
    whole: &[&str],
    remains: bool,
    setup: impl Fn(&B::P),
    op: impl Fn(&B::P) -> Result<(), ProvisionError>,
    check: impl Fn(&B::P),
) {
    let (other, theirs) = foreign_zone(b);
    for k in 0.. {
        let clean = b.open("node-a", None);
        for z in clean.zones().unwrap() {
            clean.remove(&z).unwrap();
        }
        setup(&clean);
        let (crash, hook) = Crash::hook(k);
        let p = b.open("node-a", Some(hook));
        let r = op(&p);
        let crashed = crash.seen.load(Ordering::SeqCst) > k;
        if !crashed {
            r.unwrap_or_else(|e| panic!("{what}: run without crash failed: {e:?}"));
            check(&p);
            assert!(k > 0, "{what}: no step was ever reported to the step hook");
            break;
        }
        let step = crash
            .steps
            .lock()
            .unwrap()
            .last()
            .cloned()
            .unwrap_or_default();
        match r {
            Err(ProvisionError::Interrupted { .. }) => {}
            other => panic!("{what}: crash before {step:?} gave {other:?}"),
        }
        drop(p);
        assert_foreign_intact(b, &other, &theirs);
        // Right after the crash the zone is whole: absent, or one of its images complete.
        match b.open("node-a", None).current("web") {
            Ok(None) => {}
            Ok(Some(d)) => assert!(
                whole.contains(&release(&d.zonepath).as_str()),
                "{what}: after a crash before {step:?} the zone's root is half-made (etc/release {:?})",
                release(&d.zonepath)
            ),
            Err(e) => panic!("{what}: after a crash before {step:?} the zone is half-made: {e:?}"),
        }
        // A zone that had a root keeps one across the crash: the old or the new, placed
        // where the zone stands (the zone may be down: the next pass boots it).
        let on_disk = release(&zonepath(&b.open("node-a", None), "web"));
        assert!(
            !remains || whole.contains(&on_disk.as_str()),
            "{what}: after a crash before {step:?} the zonepath has neither image's root (etc/release {on_disk:?})"
        );
        // The next pass, after a restart.
        let p = b.open("node-a", None);
        op(&p).unwrap_or_else(|e| panic!("{what}: after a crash before {step:?}: {e:?}"));
        check(&p);
        assert_no_staging_left(&p);
        assert_foreign_intact(b, &other, &theirs);
    }
    assert_foreign_intact(b, &other, &theirs);
}

pub fn crash_during_create_converges<B: Backend>(b: &B) {
    crash_everywhere(
        b,
        "create",
        &["v1"],
        false,
        |_| {},
        |p| {
            p.provision(&spec("web"), root(b, p, "node-a", "v1"))
                .map(drop)
        },
        |p| assert_zone(b, p, "web", "v1"),
    );
}

pub fn crash_during_replace_converges<B: Backend>(b: &B) {
    crash_everywhere(
        b,
        "replace",
        &["v1", "v2"],
        true,
        |p| {
            p.provision(&spec("web"), root(b, p, "node-a", "v1"))
                .unwrap();
        },
        |p| {
            p.provision(&spec("web"), root(b, p, "node-a", "v2"))
                .map(drop)
        },
        |p| assert_zone(b, p, "web", "v2"),
    );
}

pub fn crash_during_remove_converges<B: Backend>(b: &B) {
    crash_everywhere(
        b,
        "remove",
        &["v1"],
        false,
        |p| {
            p.provision(&spec("web"), root(b, p, "node-a", "v1"))
                .unwrap();
        },
        |p| p.remove("web"),
        |p| {
            assert!(p.current("web").unwrap().is_none());
            assert!(p.zones().unwrap().is_empty(), "{:?}", p.zones());
            assert!(!b.running("web"));
        },
    );
}

pub fn workers_never_touch_each_others_zones<B: Backend>(b: &B) {
    let (other, theirs) = foreign_zone(b);
    let p = b.open("node-a", None);
    p.provision(&spec("mine"), root(b, &p, "node-a", "v1"))
        .unwrap();
    assert_eq!(
        p.zones().unwrap(),
        ["mine"],
        "a worker lists only its own zones"
    );
    assert_eq!(other.zones().unwrap(), ["theirs"]);
    // Asking about, removing or creating a zone of the other worker's name never changes it
    // (refusing is fine; on a host with one zone namespace it is the only answer).
    let _ = p.current("theirs");
    let _ = p.remove("theirs");
    assert_foreign_intact(b, &other, &theirs);
    let _ = p.provision(&spec("theirs"), root(b, &p, "node-a", "v1"));
    assert_foreign_intact(b, &other, &theirs);
    // Removing everything of ours leaves theirs.
    for z in p.zones().unwrap() {
        p.remove(&z).unwrap();
    }
    assert_foreign_intact(b, &other, &theirs);
    assert!(p.current("mine").unwrap().is_none());
    assert_no_staging_left(&p);
}

pub fn never_touches_what_it_did_not_create<B: Backend>(b: &B) {
    let planted = b.plant("node-a", "web");
    let intact = || {
        assert_eq!(
            std::fs::read(planted.join("data")).ok().as_deref(),
            Some(PLANTED),
            "{} was not the worker's and changed",
            planted.display()
        )
    };
    let p = b.open("node-a", None);
    let r = p.provision(&spec("web"), root(b, &p, "node-a", "v1"));
    assert!(
        r.is_err(),
        "creating a zone over {} (not the worker's) succeeded",
        planted.display()
    );
    intact();
    assert!(
        !matches!(p.current("web"), Ok(Some(_))),
        "{} is described as the worker's zone",
        planted.display()
    );
    assert!(!p.zones().unwrap().contains(&"web".to_owned()));
    let _ = p.remove("web");
    intact();
    // A restart's clean-up leaves it too.
    let p = b.open("node-a", None);
    for z in p.zones().unwrap() {
        p.remove(&z).unwrap();
    }
    intact();
    assert_no_staging_left(&p);
}

pub fn a_start_leaves_what_it_did_not_create_in_staging_and_trash<B: Backend>(b: &B) {
    let planted: Vec<PathBuf> = [".staging", ".trash"]
        .iter()
        .map(|sub| b.plant_leftover("node-a", sub))
        .collect();
    let intact = |when: &str| {
        for at in &planted {
            assert_eq!(
                std::fs::read(at.join("data")).ok().as_deref(),
                Some(PLANTED),
                "{} was not the worker's and {when} removed or changed it",
                at.display()
            );
        }
    };
    // A start, a zone made, replaced and removed, and starts after each.
    let p = b.open("node-a", None);
    intact("a start");
    p.provision(&spec("web"), root(b, &p, "node-a", "v1"))
        .unwrap();
    let p = b.open("node-a", None);
    p.provision(&spec("web"), root(b, &p, "node-a", "v2"))
        .unwrap();
    assert_zone(b, &p, "web", "v2");
    p.remove("web").unwrap();
    intact("a replacement and a removal");
    drop(p);
    let p = b.open("node-a", None);
    intact("a start's clean-up");
    assert!(p.zones().unwrap().is_empty(), "{:?}", p.zones());
}

pub fn failed_zone_tools_fail_the_remove<B: Backend>(b: &B) {
    if !b.fail_tools("uninstall") {
        return; // no zone tools to fail: the file-level cases cover the backend
    }
    b.heal_tools();
    let p = b.open("node-a", None);
    let zp = zonepath(&p, "web");
    for failing in [&["shutdown", "halt"][..], &["uninstall"], &["delete"]] {
        p.provision(&spec("web"), root(b, &p, "node-a", "v1"))
            .unwrap();
        for sub in failing {
            assert!(b.fail_tools(sub));
        }
        let r = p.remove("web");
        b.heal_tools();
        assert!(
            matches!(r, Err(ProvisionError::Command { .. })),
            "zone tools failed at {failing:?} and the remove gave {r:?}"
        );
        assert!(
            p.zones().unwrap().contains(&"web".to_owned()),
            "a zone whose removal failed at {failing:?} is no longer listed: the next pass would not finish it"
        );
        // The next pass finishes it.
        p.remove("web").unwrap();
        assert!(p.zones().unwrap().is_empty(), "{:?}", p.zones());
        assert!(p.current("web").unwrap().is_none());
        assert!(!b.running("web"));
        assert!(!zp.exists(), "{} still there", zp.display());
    }
    // A shutdown that fails alone is not the end: the zone is halted and removed.
    p.provision(&spec("web"), root(b, &p, "node-a", "v1"))
        .unwrap();
    assert!(b.fail_tools("shutdown"));
    let r = p.remove("web");
    b.heal_tools();
    r.unwrap();
    assert!(p.zones().unwrap().is_empty(), "{:?}", p.zones());
    assert_no_staging_left(&p);
}

pub fn failed_zone_tools_fail_the_create<B: Backend>(b: &B) {
    if !b.fail_tools("install") {
        return; // no zone tools to fail: the file-level cases cover the backend
    }
    let p = b.open("node-a", None);
    let r = p.provision(&spec("web"), root(b, &p, "node-a", "v1"));
    b.heal_tools();
    assert!(
        matches!(r, Err(ProvisionError::Command { .. })),
        "zoneadm install failed and the create gave {r:?}"
    );
    assert!(!b.running("web"), "a zone whose install failed is up");
    assert!(p.current("web").unwrap().is_none());
    assert_no_staging_left(&p);
    // The next pass converges.
    p.provision(&spec("web"), root(b, &p, "node-a", "v1"))
        .unwrap();
    assert_zone(b, &p, "web", "v1");
    // A replacement whose boot fails is reported too, and the pass after it converges.
    assert!(b.fail_tools("boot"));
    let r = p.provision(&spec("web"), root(b, &p, "node-a", "v2"));
    b.heal_tools();
    assert!(
        matches!(r, Err(ProvisionError::Command { .. })),
        "zoneadm boot failed and the replace gave {r:?}"
    );
    assert!(!b.running("web"), "a zone whose boot failed is up");
    assert_no_staging_left(&p);
    p.provision(&spec("web"), root(b, &p, "node-a", "v2"))
        .unwrap();
    assert_zone(b, &p, "web", "v2");
    p.remove("web").unwrap();
}

pub fn a_failed_create_leaves_nothing_half_made<B: Backend>(b: &B) {
    let p = b.open("node-a", None);
    // An image whose config the provisioner refuses (a stop signal no system has; the
    // validator refuses it at pull time, so this stands for any refusal at create time).
    let mut bad = pulled(b.store(), "bad");
    bad.config.stop_signal = Some("SIGNOPE".into());
    let r = p.provision(&spec("web"), root_of(b, &p, "node-a", &bad));
    assert!(
        matches!(r, Err(ProvisionError::Config { .. })),
        "a refused config gave {r:?}"
    );
    assert_no_staging_left(&p);
    assert!(p.current("web").unwrap().is_none());
    assert!(p.zones().unwrap().is_empty(), "{:?}", p.zones());
    assert!(!zonepath(&p, "web").exists(), "a zonepath was left");
    assert!(!b.running("web"));
    // The same over a running zone leaves it as it was.
    p.provision(&spec("web"), root(b, &p, "node-a", "v1"))
        .unwrap();
    let r = p.provision(&spec("web"), root_of(b, &p, "node-a", &bad));
    assert!(r.is_err(), "a refused config gave {r:?}");
    assert_no_staging_left(&p);
    assert_zone(b, &p, "web", "v1");
    p.remove("web").unwrap();
    assert_no_staging_left(&p);
}

/// One named test per case for the backend `$make()` builds.
#[macro_export]
macro_rules! conformance_tests {
    ($name:ident, $make:expr) => {
        mod $name {
            use super::*;
            #[test]
            fn create_describe_list_remove() {
                conformance::create_describe_list_remove(&$make);
            }
            #[test]
            fn reruns_are_idempotent() {
                conformance::reruns_are_idempotent(&$make);
            }
            #[test]
            fn replace_stops_with_signal_then_halts() {
                conformance::replace_stops_with_signal_then_halts(&$make);
            }
            #[test]
            fn crash_during_create_converges() {
                conformance::crash_during_create_converges(&$make);
            }
            #[test]
            fn crash_during_replace_converges() {
                conformance::crash_during_replace_converges(&$make);
            }
            #[test]
            fn crash_during_remove_converges() {
                conformance::crash_during_remove_converges(&$make);
            }
            #[test]
            fn workers_never_touch_each_others_zones() {
                conformance::workers_never_touch_each_others_zones(&$make);
            }
            #[test]
            fn never_touches_what_it_did_not_create() {
                conformance::never_touches_what_it_did_not_create(&$make);
            }
            #[test]
            fn failed_zone_tools_fail_the_create() {
                conformance::failed_zone_tools_fail_the_create(&$make);
            }
            #[test]
            fn a_start_leaves_what_it_did_not_create_in_staging_and_trash() {
                conformance::a_start_leaves_what_it_did_not_create_in_staging_and_trash(&$make);
            }
            #[test]
            fn failed_zone_tools_fail_the_remove() {
                conformance::failed_zone_tools_fail_the_remove(&$make);
            }
            #[test]
            fn a_failed_create_leaves_nothing_half_made() {
                conformance::a_failed_create_leaves_nothing_half_made(&$make);
            }
        }
    };
}
