//! Provisioners: the conformance suite (`conformance/`) for `dir`, for `illumos` over the fake
//! zone tools (`fakezone/`) and, to show that the suite catches them, for broken backends: one
//! that removes zones it does not own, one whose start-up clean-up removes what it did not
//! create from `.staging` and `.trash`, one whose remove reports success when the zone tools
//! failed, and one that removes the old zone before placing the new one; the zonecfg, SMF and command text against expected files in
//! `tests/data/golden/`; the StopSignal → SMF stop method mapping; and the illumos
//! provisioner's command sequence (create; replace = shutdown, halt after the grace period,
//! uninstall, delete, create) at its command-runner seam.
//!
//! Set `UPDATE_GOLDEN=1` to rewrite the expected files after a deliberate change, then review
//! the diff.

mod conformance;
mod fakezone;
mod illumos_kill;
mod image;
mod tarbuild;

use std::path::{Path, PathBuf};
use std::time::Duration;

use conformance::Backend;
use fakezone::{FakeZones, State, StopEvent};
use validator::Digest;
use worker_runtime::provision::illumos::{
    command_plan, remove_commands, smf_manifest, smf_stop_exec, stop_commands, zonecfg_script,
};
use worker_runtime::{
    Capabilities, CommandRunner, ContentStore, DirProvisioner, IllumosProvisioner, ProvisionError,
    Provisioner, ResourceLimits, StepHook, VerifiedRoot, ZoneDescription, ZoneSpec,
};

fn golden(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data/golden")
        .join(name);
    if std::env::var_os("UPDATE_GOLDEN").is_some() {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path)
        .unwrap_or_else(|e| panic!("{}: {e} (run with UPDATE_GOLDEN=1 once)", path.display()));
    assert_eq!(actual, expected, "{name} differs from {}", path.display());
}

fn description() -> ZoneDescription {
    ZoneDescription {
        zone: "web".into(),
        brand: "nlipkg".into(),
        image: "registry.example:5000/apps/web:1.4".into(),
        manifest_digest: Digest::sha256(b"manifest"),
        config_digest: Digest::sha256(b"config"),
        chain_id: Some(Digest::sha256(b"chain")),
        entrypoint: vec!["/usr/bin/app".into(), "--serve".into()],
        cmd: vec!["100%".into(), "it's <ok> & \"fine\"".into()],
        env: vec!["PATH=/usr/bin:/bin".into(), "GREETING=a&b".into()],
        user: Some("app:staff".into()),
        working_dir: Some("/srv/app".into()),
        stop_signal: "SIGRTMIN+3".into(),
        stop_timeout_secs: 25,
        smf_stop_exec: smf_stop_exec("SIGRTMIN+3"),
        limits: ResourceLimits {
            cpus: Some(1.5),
            memory: Some("512m".into()),
            disk: None,
        },
        zone_config: worker_runtime::provision::zonecfg::ZoneConfig::from_image(
            None,
            &ResourceLimits {
                cpus: Some(1.5),
                memory: Some("512m".into()),
                disk: None,
            },
        )
        .unwrap(),
        zonepath: PathBuf::from("/zones/web"),
        volumes: vec![worker_runtime::volume::AttachedVolume {
            id: "web.var-lib-app".into(),
            path: "/var/lib/app".into(),
            source: PathBuf::from("/zones/.volumes/web.var-lib-app/data"),
            size_bytes: Some(1 << 30),
            reclaim: worker_runtime::Reclaim::Retain,
        }],
    }
}

#[test]
fn stop_signal_maps_to_the_smf_kill_method() {
    for (sig, exec) in [
        ("SIGTERM", ":kill -TERM"),
        ("SIGUSR1", ":kill -USR1"),
        ("SIGRTMIN+3", ":kill -RTMIN+3"),
        ("HUP", ":kill -HUP"),
    ] {
        assert_eq!(smf_stop_exec(sig), exec);
    }
}

#[test]
fn zonecfg_smf_and_commands_match_the_expected_files() {
    let d = description();
    golden("zonecfg-web.txt", &zonecfg_script(&d));
    golden("entrypoint-web.xml", &smf_manifest(&d).unwrap());
    golden(
        "commands-web.txt",
        &command_plan(&d, &d.zonepath.join("zonecfg.txt")),
    );
    // No limits, no user, no env, no volumes: the optional parts are left out.
    let mut bare = description();
    bare.volumes.clear();
    bare.limits = ResourceLimits::default();
    bare.zone_config = Default::default();
    bare.user = None;
    bare.env.clear();
    bare.working_dir = None;
    bare.zonepath = PathBuf::from("/zones/with space/web");
    bare.smf_stop_exec = smf_stop_exec("SIGTERM");
    golden("zonecfg-bare.txt", &zonecfg_script(&bare));
    golden("entrypoint-bare.xml", &smf_manifest(&bare).unwrap());
    // An image with no command gets no entrypoint service.
    bare.entrypoint.clear();
    bare.cmd.clear();
    assert!(smf_manifest(&bare).is_none());
}

/// The `dir` provisioner, one base directory per worker.
struct DirBackend {
    t: tempfile::TempDir,
    store: ContentStore,
}

fn base(t: &tempfile::TempDir, worker: &str) -> PathBuf {
    t.path().join(format!("zones-{worker}"))
}

fn open_dir(t: &tempfile::TempDir, worker: &str, hook: Option<StepHook>) -> DirProvisioner {
    let p = DirProvisioner::new(&base(t, worker), worker).unwrap();
    match hook {
        Some(h) => p.with_step_hook(h),
        None => p,
    }
}

impl DirBackend {
    fn new() -> Self {
        let t = tempfile::tempdir().unwrap();
        let store = ContentStore::open(&t.path().join("content"), "node").unwrap();
        DirBackend { t, store }
    }
}

impl Backend for DirBackend {
    type P = DirProvisioner;
    fn open(&self, worker: &str, hook: Option<StepHook>) -> DirProvisioner {
        open_dir(&self.t, worker, hook)
    }
    fn store(&self) -> &ContentStore {
        &self.store
    }
    fn running(&self, zone: &str) -> bool {
        ["node-a", "node-b"]
            .iter()
            .any(|w| base(&self.t, w).join(zone).join("root").is_dir())
    }
    fn stops(&self) -> Option<Vec<StopEvent>> {
        None
    }
    fn ignore_stop(&self, _zone: &str) {}
}

/// The `illumos` provisioner over the fake zone tools; both workers share the host's one
/// zone namespace.
struct IllumosBackend {
    dir: DirBackend,
    fake: FakeZones,
}

impl IllumosBackend {
    fn new() -> Self {
        IllumosBackend {
            dir: DirBackend::new(),
            fake: FakeZones::default(),
        }
    }
}

impl Backend for IllumosBackend {
    type P = IllumosProvisioner<FakeZones>;
    fn open(&self, worker: &str, hook: Option<StepHook>) -> Self::P {
        IllumosProvisioner::new(open_dir(&self.dir.t, worker, hook), self.fake.clone())
    }
    fn store(&self) -> &ContentStore {
        &self.dir.store
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
    fn fail_tools(&self, sub: &str) -> bool {
        self.fake.fail_on(sub);
        true
    }
    fn heal_tools(&self) {
        self.fake.heal();
    }
}

conformance_tests!(dir, DirBackend::new());
conformance_tests!(illumos, IllumosBackend::new());

/// A deliberately broken provisioner: `remove` halts, uninstalls and deletes a zone by name
/// without asking whose it is. Everything else is the illumos provisioner.
struct Reckless(IllumosProvisioner<FakeZones>);

impl Provisioner for Reckless {
    fn staging_dir(&self) -> PathBuf {
        self.0.staging_dir()
    }
    fn current(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
        self.0.current(zone)
    }
    fn provision(
        &self,
        spec: &ZoneSpec,
        root: VerifiedRoot,
    ) -> Result<ZoneDescription, ProvisionError> {
        self.0.provision(spec, root)
    }
    fn remove(&self, zone: &str) -> Result<(), ProvisionError> {
        let mut cmds = vec![stop_commands(zone).1];
        cmds.extend(remove_commands(zone));
        for c in cmds {
            let _ = self.0.runner().run(&c, None);
        }
        match self.0.remove(zone) {
            Err(ProvisionError::NotOurs { .. }) => Ok(()),
            r => r,
        }
    }
    fn zones(&self) -> Result<Vec<String>, ProvisionError> {
        self.0.zones()
    }
    fn capabilities(&self) -> Capabilities {
        self.0.capabilities()
    }
}

struct RecklessBackend(IllumosBackend);

impl Backend for RecklessBackend {
    type P = Reckless;
    fn open(&self, worker: &str, hook: Option<StepHook>) -> Reckless {
        Reckless(self.0.open(worker, hook))
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
        self.0.ignore_stop(zone);
    }
}

#[test]
fn the_suite_fails_a_backend_that_removes_zones_it_does_not_own() {
    // It does everything else right...
    conformance::create_describe_list_remove(&RecklessBackend(IllumosBackend::new()));
    // ...and the ownership case catches it.
    // (Its panic message is printed: the panic hook is process-wide and other tests run.)
    let r = std::panic::catch_unwind(|| {
        conformance::workers_never_touch_each_others_zones(&RecklessBackend(IllumosBackend::new()))
    });
    let payload = r.expect_err("the suite passed a provisioner that removes another worker's zone");
    let msg = payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default();
    assert!(msg.contains("another worker's"), "{msg}");
}

/// The panic message of `case`, which must panic.
fn suite_fails(what: &str, case: impl FnOnce()) -> String {
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(case));
    let payload = r.expect_err(&format!("the suite passed a backend that {what}"));
    payload
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| payload.downcast_ref::<&str>().map(|s| (*s).to_owned()))
        .unwrap_or_default()
}

/// Broken: its start empties `.staging` and `.trash`, marks or not. Otherwise the `dir`
/// provisioner.
struct SweeperBackend(DirBackend);

impl Backend for SweeperBackend {
    type P = DirProvisioner;
    fn open(&self, worker: &str, hook: Option<StepHook>) -> DirProvisioner {
        for sub in [".staging", ".trash"] {
            for e in std::fs::read_dir(base(&self.0.t, worker).join(sub))
                .into_iter()
                .flatten()
                .flatten()
            {
                std::fs::remove_dir_all(e.path()).unwrap();
            }
        }
        self.0.open(worker, hook)
    }
    fn store(&self) -> &ContentStore {
        self.0.store()
    }
    fn running(&self, zone: &str) -> bool {
        self.0.running(zone)
    }
    fn stops(&self) -> Option<Vec<StopEvent>> {
        None
    }
    fn ignore_stop(&self, _zone: &str) {}
}

#[test]
fn the_suite_fails_a_backend_whose_start_removes_what_it_did_not_create() {
    conformance::create_describe_list_remove(&SweeperBackend(DirBackend::new()));
    conformance::reruns_are_idempotent(&SweeperBackend(DirBackend::new()));
    let msg = suite_fails("empties .staging and .trash at its start", || {
        conformance::a_start_leaves_what_it_did_not_create_in_staging_and_trash(&SweeperBackend(
            DirBackend::new(),
        ))
    });
    assert!(msg.contains("was not the worker's and a start"), "{msg}");
}

/// Broken: `remove` reports success when the zone tools failed. Otherwise the `illumos`
/// provisioner.
struct QuietRemove(IllumosProvisioner<FakeZones>);

/// Broken: replacing a zone removes the old one (halt, uninstall, delete, its zonepath gone)
/// before the new one is placed. Otherwise the `illumos` provisioner.
struct RemoveFirst(IllumosProvisioner<FakeZones>);

macro_rules! illumos_but {
    ($p:ident, |$s:ident, $spec:ident, $root:ident| $provision:expr, |$r:ident, $zone:ident| $remove:expr) => {
        impl Provisioner for $p {
            fn staging_dir(&self) -> PathBuf {
                self.0.staging_dir()
            }
            fn current(&self, zone: &str) -> Result<Option<ZoneDescription>, ProvisionError> {
                self.0.current(zone)
            }
            fn provision(
                &self,
                $spec: &ZoneSpec,
                $root: VerifiedRoot,
            ) -> Result<ZoneDescription, ProvisionError> {
                let $s = self;
                $provision
            }
            fn remove(&self, $zone: &str) -> Result<(), ProvisionError> {
                let $r = self;
                $remove
            }
            fn zones(&self) -> Result<Vec<String>, ProvisionError> {
                self.0.zones()
            }
            fn capabilities(&self) -> Capabilities {
                self.0.capabilities()
            }
        }
        impl Backend for Broken<$p> {
            type P = $p;
            fn open(&self, worker: &str, hook: Option<StepHook>) -> $p {
                $p(self.0.open(worker, hook))
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
                self.0.ignore_stop(zone);
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

/// A broken variant `P` of the illumos backend.
struct Broken<P>(IllumosBackend, std::marker::PhantomData<P>);

fn broken<P>() -> Broken<P> {
    Broken(IllumosBackend::new(), std::marker::PhantomData)
}

illumos_but!(
    QuietRemove,
    |s, spec, root| s.0.provision(spec, root),
    |s, zone| {
        match s.0.remove(zone) {
            Err(ProvisionError::Command { .. }) => Ok(()),
            r => r,
        }
    }
);
illumos_but!(
    RemoveFirst,
    |s, spec, root| {
        s.0.remove(&spec.name)?;
        s.0.provision(spec, root)
    },
    |s, zone| s.0.remove(zone)
);

#[test]
fn the_suite_fails_a_backend_whose_remove_hides_failed_zone_tools() {
    conformance::create_describe_list_remove(&broken::<QuietRemove>());
    conformance::failed_zone_tools_fail_the_create(&broken::<QuietRemove>());
    let msg = suite_fails("reports success when the zone tools failed", || {
        conformance::failed_zone_tools_fail_the_remove(&broken::<QuietRemove>())
    });
    assert!(
        msg.contains("zone tools failed at [\"shutdown\", \"halt\"] and the remove gave Ok"),
        "{msg}"
    );
}

#[test]
fn the_suite_fails_a_backend_that_removes_the_old_zone_before_placing_the_new_one() {
    conformance::create_describe_list_remove(&broken::<RemoveFirst>());
    conformance::replace_stops_with_signal_then_halts(&broken::<RemoveFirst>());
    let msg = suite_fails("removes the old zone before placing the new one", || {
        conformance::crash_during_replace_converges(&broken::<RemoveFirst>())
    });
    assert!(msg.contains("neither image's root"), "{msg}");
}

#[test]
fn illumos_provisioner_runs_create_and_replace_in_order() {
    let b = IllumosBackend::new();
    let p = b.open("node", None);
    let spec = conformance::spec("web");
    b.fake.ignore_stop("web");
    for tag in ["v1", "v2"] {
        let root = conformance::root(&b, &p, "node", tag);
        let d = p.provision(&spec, root).unwrap();
        assert_eq!(d.stop_signal, "SIGUSR1");
        assert_eq!(release(&d.zonepath), tag);
    }
    p.remove("web").unwrap();
    let zp = base(&b.dir.t, "node").join("web");
    assert!(!zp.exists());
    let zonecfg = format!("{}", zp.join("zonecfg.txt").display());
    let grace = Some(Duration::from_secs(u64::from(conformance::STOP_TIMEOUT)));
    let expected: Vec<(String, Option<Duration>)> = vec![
        (format!("zonecfg -z web -f {zonecfg}"), None),
        ("zoneadm -z web install -d -".into(), None),
        ("zoneadm -z web boot".into(), None),
        // Replace: graceful shutdown within the stop timeout, then halt, detach (the old
        // root stays until the new one is placed), delete.
        ("zoneadm -z web shutdown".into(), grace),
        ("zoneadm -z web halt".into(), None),
        ("zoneadm -z web detach".into(), None),
        ("zonecfg -z web delete -F".into(), None),
        (format!("zonecfg -z web -f {zonecfg}"), None),
        ("zoneadm -z web install -d -".into(), None),
        ("zoneadm -z web boot".into(), None),
        // Remove.
        ("zoneadm -z web shutdown".into(), grace),
        ("zoneadm -z web halt".into(), None),
        ("zoneadm -z web uninstall -F".into(), None),
        ("zonecfg -z web delete -F".into(), None),
    ];
    let calls: Vec<_> = b
        .fake
        .calls()
        .into_iter()
        .filter(|(c, _)| c != "zoneadm list -cp")
        .collect();
    assert_eq!(calls, expected);
}

/// Ready on illumos: the zone `running` and its entrypoint service `online` (`svcs -z` from the
/// global zone); a service in `maintenance`, or a zone that is not running, is not ready.
#[test]
fn illumos_readiness_is_the_zone_running_and_its_entrypoint_online() {
    let b = IllumosBackend::new();
    let p = b.open("node", None);
    let spec = conformance::spec("web");
    assert!(!p.ready("web").unwrap(), "no zone yet");
    let root = conformance::root(&b, &p, "node", "v1");
    p.provision(&spec, root).unwrap();
    assert!(p.ready("web").unwrap());
    assert!(
        b.fake
            .calls()
            .iter()
            .any(|(c, _)| c == "svcs -z web -H -o state svc:/site/rdctl/entrypoint:default")
    );
    b.fake.break_service("web");
    assert!(!p.ready("web").unwrap(), "entrypoint in maintenance");
    b.fake.heal();
    assert!(p.ready("web").unwrap());
    b.fake.force_state("web", State::Installed);
    assert!(!p.ready("web").unwrap(), "not running");
}

#[test]
fn illumos_converges_from_every_zoneadm_state() {
    // Whatever state an interrupted zoneadm left the zone in, the next pass replaces it.
    let b = IllumosBackend::new();
    let p = b.open("node", None);
    let spec = conformance::spec("web");
    for (n, state) in [
        State::Configured,
        State::Incomplete,
        State::Installed,
        State::Ready,
        State::Running,
        State::ShuttingDown,
        State::Down,
    ]
    .into_iter()
    .enumerate()
    {
        p.provision(&spec, conformance::root(&b, &p, "node", "old"))
            .unwrap();
        b.fake.force_state("web", state);
        let tag = format!("new-{n}");
        let d = p
            .provision(&spec, conformance::root(&b, &p, "node", &tag))
            .unwrap_or_else(|e| panic!("from {}: {e:?}", state.name()));
        assert_eq!(release(&d.zonepath), tag, "from {}", state.name());
        assert_eq!(b.fake.state("web"), Some(State::Running));
    }
}

fn release(zonepath: &Path) -> String {
    std::fs::read_to_string(zonepath.join("root/etc/release")).unwrap_or_default()
}

#[test]
fn fake_zoneadm_answers_with_the_real_messages() {
    // The fake's refusals are zoneadm's and zonecfg's own words, so the provisioner's error
    // reports read as they will on a host.
    let fake = FakeZones::default();
    let run = |cmd: &str| {
        let argv: Vec<String> = cmd.split(' ').map(str::to_owned).collect();
        fake.run(&argv, None).unwrap()
    };
    assert_eq!(
        run("zoneadm -z web boot").stderr,
        "zoneadm: web: No such zone configured\n"
    );
    let t = tempfile::tempdir().unwrap();
    let cfg = t.path().join("cfg");
    std::fs::write(
        &cfg,
        format!(
            "create -b\nset zonepath={}/web\nset brand=nlipkg\nverify\ncommit\n",
            t.path().display()
        ),
    )
    .unwrap();
    let cfg_cmd = format!("zonecfg -z web -f {}", cfg.display());
    assert_eq!(run(&cfg_cmd).code, Some(0));
    assert_eq!(fake.state("web"), Some(State::Configured));
    assert!(
        run(&cfg_cmd)
            .stderr
            .ends_with("Zone web already exists; create not allowed.\n")
    );
    assert_eq!(
        run("zoneadm -z web boot").stderr,
        "zoneadm: zone 'web': must be installed before boot.\n"
    );
    assert_eq!(
        run("zoneadm -z web uninstall -F").stderr,
        "zoneadm: zone 'web': is already in state 'configured'.\n"
    );
    // No root placed: the install fails and leaves the zone incomplete.
    assert_eq!(run("zoneadm -z web install -d -").code, Some(1));
    assert_eq!(fake.state("web"), Some(State::Incomplete));
    assert_eq!(
        run("zoneadm -z web install -d -").stderr,
        "zoneadm: zone 'web': zone is incomplete; uninstall required.\n"
    );
    assert_eq!(
        run("zonecfg -z web delete -F").stderr,
        "Zone web not in configured state; delete not allowed.\n"
    );
    assert_eq!(run("zoneadm -z web uninstall -F").code, Some(0));
    std::fs::create_dir_all(t.path().join("web/root")).unwrap();
    assert_eq!(run("zoneadm -z web install -d -").code, Some(0));
    assert_eq!(run("zoneadm -z web boot").code, Some(0));
    assert_eq!(
        run("zoneadm -z web uninstall -F").stderr,
        "zoneadm: zone 'web': uninstall operation is invalid for running zones.\n"
    );
    assert!(run("zoneadm list -cp").stdout.contains(":web:running:"));
    assert_eq!(run("zoneadm -z web halt").code, Some(0));
    assert_eq!(
        run("zoneadm -z web shutdown").stderr,
        "zoneadm: zone 'web': not running\n"
    );
}

/// A worker killed while it claimed a staging root (the directory made, its mark not yet
/// renamed into place) leaves a directory holding only the mark's temporary file; the next
/// start removes it. Anything else without our mark stays.
#[test]
fn a_staging_root_cut_short_before_its_mark_is_removed_at_start() {
    let t = tempfile::tempdir().unwrap();
    let p = open_dir(&t, "w1", None);
    let staging = p.staging_dir();
    let cut = staging.join("zone.4242.0");
    std::fs::create_dir(&cut).unwrap();
    std::fs::write(cut.join(".tmp-Ab12Cd"), b"{\"worker_id\": \"w").unwrap();
    let empty = staging.join("zone.4242.1");
    std::fs::create_dir(&empty).unwrap();
    let foreign = staging.join("someone-else");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("data"), b"x").unwrap();
    drop(p);
    let _p = open_dir(&t, "w1", None);
    assert!(!cut.exists(), "the cut-short claim is removed");
    assert!(!empty.exists(), "an empty leftover is removed");
    assert!(foreign.join("data").exists(), "what is not ours stays");
}

/// The commands run since the `skip` first ones, without the `zoneadm list -cp` reads.
fn commands_after(fake: &FakeZones, skip: usize) -> Vec<(String, Option<Duration>)> {
    fake.calls()
        .into_iter()
        .skip(skip)
        .filter(|(c, _)| c != "zoneadm list -cp")
        .collect()
}

/// `rdctl worker rollback` on illumos: the running zone is shut down, detached (its root kept
/// as the previous one, `SUNWdetached.xml` beside it) and its configuration deleted; the
/// previous zonepath goes back to `<base>/<zone>` (the zonepath its zonecfg text names) and is
/// configured, attached with `attach -F` and booted. A second rollback goes forward; a zone
/// with nothing kept is refused before any command runs.
#[test]
fn illumos_rollback_detaches_the_current_zone_and_attaches_the_previous_one() {
    let b = IllumosBackend::new();
    let p = b.open("node", None);
    let spec = conformance::spec("web");
    p.provision(&spec, conformance::root(&b, &p, "node", "v1"))
        .unwrap();
    let before = b.fake.calls().len();
    let e = p.rollback("web").unwrap_err();
    assert!(matches!(e, ProvisionError::NoPrevious { .. }), "{e:?}");
    assert_eq!(
        commands_after(&b.fake, before),
        [],
        "refused before any command"
    );
    p.provision(&spec, conformance::root(&b, &p, "node", "v2"))
        .unwrap();
    let zp = base(&b.dir.t, "node").join("web");
    let kept = base(&b.dir.t, "node").join(".previous/web");
    assert_eq!(release(&kept), "v1");
    assert_eq!(p.previous("web").unwrap().unwrap().zonepath, zp);

    let before = b.fake.calls().len();
    let d = p.rollback("web").unwrap();
    assert_eq!(
        (release(&d.zonepath), release(&kept)),
        ("v1".into(), "v2".into())
    );
    assert_eq!(b.fake.state("web"), Some(State::Running));
    assert!(kept.join("SUNWdetached.xml").is_file(), "v2 was detached");
    assert!(!zp.join("SUNWdetached.xml").exists(), "attach took v1 back");
    let grace = Some(Duration::from_secs(u64::from(conformance::STOP_TIMEOUT)));
    let zonecfg = format!("{}", zp.join("zonecfg.txt").display());
    let expected: Vec<(String, Option<Duration>)> = vec![
        ("zoneadm -z web shutdown".into(), grace),
        ("zoneadm -z web detach".into(), None),
        ("zonecfg -z web delete -F".into(), None),
        (format!("zonecfg -z web -f {zonecfg}"), None),
        ("zoneadm -z web attach -F".into(), None),
        ("zoneadm -z web boot".into(), None),
    ];
    assert_eq!(commands_after(&b.fake, before), expected);
    assert!(p.ready("web").unwrap());
    // Forward again; removing the zone takes the kept root too.
    let d = p.rollback("web").unwrap();
    assert_eq!(
        (release(&d.zonepath), release(&kept)),
        ("v2".into(), "v1".into())
    );
    assert_eq!(b.fake.state("web"), Some(State::Running));
    p.remove("web").unwrap();
    assert!(!zp.exists() && !kept.exists());
    assert_eq!(b.fake.state("web"), None);
}

/// The worker's automatic rollback on illumos: an update whose zone is not ready is undone
/// (the new zone detached and kept as the previous root, the replaced one attached and booted
/// again); a confirmed one stays. An update whose install fails is undone at once; a kept
/// zonepath without its root is never rolled back to.
#[test]
fn illumos_undo_attaches_the_replaced_zone_and_a_failed_install_is_undone_at_once() {
    let b = IllumosBackend::new();
    let p = b.open("node", None);
    let spec = conformance::spec("web");
    let kept = base(&b.dir.t, "node").join(".previous/web");
    p.provision(&spec, conformance::root(&b, &p, "node", "v1"))
        .unwrap();
    assert_eq!(p.undo("web").unwrap(), None, "nothing open");
    b.fake.break_service("web");
    let d = p
        .provision_unconfirmed(&spec, conformance::root(&b, &p, "node", "v2"))
        .unwrap();
    assert_eq!(release(&d.zonepath), "v2");
    assert!(!p.ready("web").unwrap(), "entrypoint in maintenance");
    b.fake.heal();
    let back = p.undo("web").unwrap().unwrap();
    assert_eq!(
        (release(&back.zonepath), release(&kept)),
        ("v1".into(), "v2".into())
    );
    assert_eq!(b.fake.state("web"), Some(State::Running));
    assert!(p.ready("web").unwrap());
    assert_eq!(p.undo("web").unwrap(), None, "closed");

    let d = p
        .provision_unconfirmed(&spec, conformance::root(&b, &p, "node", "v3"))
        .unwrap();
    p.confirm("web").unwrap();
    assert_eq!(p.undo("web").unwrap(), None, "confirmed");
    assert_eq!(
        (release(&d.zonepath), release(&kept)),
        ("v3".into(), "v1".into())
    );

    b.fake.fail_on("install");
    let e = p
        .provision_unconfirmed(&spec, conformance::root(&b, &p, "node", "v4"))
        .unwrap_err();
    assert!(format!("{e}").contains("install"), "{e}");
    b.fake.heal();
    assert_eq!(release(&d.zonepath), "v3", "the replaced zone runs again");
    assert_eq!(b.fake.state("web"), Some(State::Running));
    // The failed zone is kept as the previous root, as on the other stores; had its install
    // left it incomplete, the uninstall would have deleted its root: no rollback to that.
    assert_eq!(release(&kept), "v4");
    std::fs::remove_dir_all(kept.join("root")).unwrap();
    let e = p.rollback("web").unwrap_err();
    assert!(matches!(e, ProvisionError::NoPrevious { .. }), "{e:?}");
    assert_eq!(b.fake.state("web"), Some(State::Running));
}

/// A rollback cut short before any of its steps (a crash: the provisioner stops there) is
/// finished by the next rollback of a fresh start, or, when the swap was already done, by the
/// next bring-up: the zone ends running one of its two roots, the other kept.
#[test]
fn illumos_rollback_cut_at_any_step_ends_with_a_zone_running() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    for at in 1.. {
        let b = IllumosBackend::new();
        let p = b.open("node", None);
        let spec = conformance::spec("web");
        for tag in ["v1", "v2"] {
            p.provision(&spec, conformance::root(&b, &p, "node", tag))
                .unwrap();
        }
        let seen = Arc::new(AtomicUsize::new(0));
        let s = seen.clone();
        let hook: StepHook =
            Arc::new(move |_: &str, _: &str| s.fetch_add(1, Ordering::SeqCst) + 1 == at);
        let cut = b.open("node", Some(hook));
        match cut.rollback("web") {
            Ok(d) => {
                assert_eq!(release(&d.zonepath), "v1");
                assert!(at > 5, "every step was a cut point: {at}");
                break;
            }
            Err(ProvisionError::Interrupted { .. }) => {}
            Err(e) => panic!("cut at {at}: {e:?}"),
        }
        drop(cut);
        // A fresh start settles the file moves; the rollback, asked again, ends on a root.
        let p = b.open("node", None);
        let zp = base(&b.dir.t, "node").join("web");
        assert!(
            zp.join("root").is_dir(),
            "cut at {at}: no zonepath in place"
        );
        let d = p
            .rollback("web")
            .unwrap_or_else(|e| panic!("cut at {at}: {e:?}"));
        assert!(
            ["v1", "v2"].contains(&release(&d.zonepath).as_str()),
            "cut at {at}"
        );
        assert_eq!(b.fake.state("web"), Some(State::Running), "cut at {at}");
        assert!(p.ready("web").unwrap(), "cut at {at}");
        assert!(p.previous("web").unwrap().is_some(), "cut at {at}");
    }
}

impl illumos_kill::Node for IllumosBackend {
    fn fake(&self) -> &FakeZones {
        &self.fake
    }
    fn base(&self) -> PathBuf {
        base(&self.dir.t, "node")
    }
    fn start(&self, hook: Option<StepHook>) -> IllumosProvisioner<FakeZones> {
        let base = base(&self.dir.t, "node");
        let dir = DirProvisioner::for_zone_tools(&base, "node", None).unwrap();
        let volumes = worker_runtime::volume::Volumes::open(&base, "node", None).unwrap();
        illumos_kill::start(dir.with_volumes(volumes), &self.fake, hook)
    }
    fn root(&self, p: &IllumosProvisioner<FakeZones>, tag: &str) -> VerifiedRoot {
        conformance::root(self, p, "node", tag)
    }
}

#[test]
fn illumos_a_worker_killed_at_every_step_of_an_update_or_a_rollback_runs_one_zone() {
    illumos_kill::killed_at_every_step(&IllumosBackend::new);
}

#[test]
fn illumos_an_update_killed_during_install_runs_the_old_zone_again() {
    illumos_kill::killed_during_install(&IllumosBackend::new());
}
