//! A worker killed at every step of an update and of a rollback on the illumos provisioner
//! over the fake zone tools (issue 49), shared by the directory store (`provision.rs`) and
//! the ZFS one (`provision_zfs.rs`).
//!
//! In process, not the real `rdctl worker` as `tests/worker_kill.rs` does for `dir`: the
//! worker builds the illumos provisioner only on illumos, and the fake tools answer through
//! the `CommandRunner` seam, not from `PATH`. The step hook stops the provisioner before its
//! n-th command or file move, as the failpoint `RDCTL_FAILPOINT_PAUSE` does; the provisioner
//! is dropped there and a fresh one started as the worker starts it ([`start`]).

// Each test binary that includes it uses all of it, but not every helper of its siblings.
#![allow(dead_code)]

use std::path::PathBuf;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use crate::conformance;
use crate::fakezone::{FakeZones, State};
use worker_runtime::provision::illumos::{list_command, parse_zone_list};
use worker_runtime::{
    CommandRunner, DirProvisioner, IllumosProvisioner, ProvisionError, Provisioner, StepHook,
    VerifiedRoot,
};

/// A node with the fake zone tools: one worker, `node`'s base.
pub trait Node {
    /// The host's zone tools.
    fn fake(&self) -> &FakeZones;
    /// The worker's base directory.
    fn base(&self) -> PathBuf;
    /// The provisioner as `rdctl worker` opens it on illumos (see [`start`]).
    fn start(&self, hook: Option<StepHook>) -> IllumosProvisioner<FakeZones>;
    /// A verified root of the image tagged `tag` where `p` builds staging roots.
    fn root(&self, p: &IllumosProvisioner<FakeZones>, tag: &str) -> VerifiedRoot;
}

/// The start of `rdctl worker` on illumos: `dir` opened leaving a killed worker's switches
/// open ([`DirProvisioner::for_zone_tools`]), the zone tools settling them, then `hook` (the
/// failpoint) added, so the settling is not counted.
pub fn start(
    dir: DirProvisioner,
    fake: &FakeZones,
    hook: Option<StepHook>,
) -> IllumosProvisioner<FakeZones> {
    let p = IllumosProvisioner::new(dir, fake.clone());
    p.settle_at_start();
    match hook {
        Some(h) => p.with_step_hook(h),
        None => p,
    }
}

fn release(zonepath: &std::path::Path) -> String {
    std::fs::read_to_string(zonepath.join("root/etc/release")).unwrap_or_default()
}

/// The switch cut at every step on illumos.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum IllumosSwitch {
    /// v2 → v3, as the worker runs it: unconfirmed, then confirmed.
    Update,
    /// `rdctl worker rollback`: v2 → v1.
    Rollback,
}

/// A worker killed at every step of an update and of a rollback, each on a fresh node from
/// `new_node`. After the next start exactly one zone is configured and running, on the zonepath
/// `<base>/web` holding the old root or the new one, its volume's data intact; a rollback
/// cut once its switch was opened ends rolled back (never forward to the image it left); and
/// every command and move of the switch was a cut point.
pub fn killed_at_every_step<N: Node>(new_node: &dyn Fn() -> N) {
    for switch in [IllumosSwitch::Update, IllumosSwitch::Rollback] {
        let (old, new) = match switch {
            IllumosSwitch::Update => ("v2", "v3"),
            IllumosSwitch::Rollback => ("v2", "v1"),
        };
        let mut cut_at: Vec<String> = Vec::new();
        for at in 1.. {
            assert!(at < 80, "{switch:?} never ran to its end");
            let b = new_node();
            let mut spec = conformance::spec("web");
            spec.volumes = vec![worker_runtime::VolumeSpec {
                path: "/var/data".into(),
                size: None,
                name: None,
                reclaim: None,
            }];
            let p = b.start(None);
            let d = p.provision(&spec, b.root(&p, "v1")).unwrap();
            let source = d.volumes[0].source.clone();
            let data = format!("written before cut {at}\n");
            std::fs::write(source.join("kept"), &data).unwrap();
            p.provision(&spec, b.root(&p, "v2")).unwrap();
            drop(p);

            let seen = Arc::new(AtomicUsize::new(0));
            let steps = Arc::new(Mutex::new(Vec::<String>::new()));
            let (s, st) = (seen.clone(), steps.clone());
            let hook: StepHook = Arc::new(move |_: &str, step: &str| {
                st.lock().unwrap().push(step.to_owned());
                s.fetch_add(1, Ordering::SeqCst) + 1 == at
            });
            let cut = b.start(Some(hook));
            let result = match switch {
                IllumosSwitch::Update => {
                    let root = b.root(&cut, "v3");
                    cut.provision_unconfirmed(&spec, root)
                        .and_then(|_| cut.confirm("web"))
                }
                IllumosSwitch::Rollback => cut.rollback("web").map(drop),
            };
            let steps = steps.lock().unwrap().clone();
            let zp = b.base().join("web");
            match result {
                Ok(()) => {
                    assert_eq!(release(&zp), new);
                    assert_eq!(b.fake().state("web"), Some(State::Running));
                    break;
                }
                Err(ProvisionError::Interrupted { .. }) => {}
                Err(e) => panic!("{switch:?} cut at {at}: {e:?}"),
            }
            let at_step = steps.last().unwrap().clone();
            drop(cut);

            // A fresh start, nothing asked of it yet.
            let p = b.start(None);
            let list = b.fake().run(&list_command(), None);
            let zones: Vec<_> = parse_zone_list(&list.unwrap().stdout)
                .into_iter()
                .filter(|e| e.name != "global")
                .map(|e| (e.name, e.state, e.zonepath))
                .collect();
            assert_eq!(
                zones,
                [("web".into(), "running".into(), zp.display().to_string())],
                "{switch:?} cut at {at_step:?}: exactly one zone configured and running"
            );
            let r = release(&zp);
            assert!(
                r == old || r == new,
                "{switch:?} cut at {at_step:?}: the zone runs {r:?}"
            );
            if switch == IllumosSwitch::Rollback
                && steps.iter().any(|s| s == "open the switch")
                && at_step != "open the switch"
            {
                assert_eq!(r, new, "cut at {at_step:?}: the rollback is undone");
            }
            assert!(p.ready("web").unwrap(), "{switch:?} cut at {at_step:?}");
            assert!(
                !b.base().join(".previous/.switch/web.json").exists(),
                "{switch:?} cut at {at_step:?}: the switch is still open"
            );
            let d = p.current("web").unwrap().unwrap();
            assert_eq!(d.volumes[0].source, source, "{switch:?} cut at {at_step:?}");
            assert_eq!(
                std::fs::read_to_string(source.join("kept")).unwrap(),
                data,
                "{switch:?} cut at {at_step:?}: the volume's data"
            );
            // The next pass of an update ends it once; a rollback stays where it settled.
            if switch == IllumosSwitch::Update {
                p.provision_unconfirmed(&spec, b.root(&p, "v3")).unwrap();
                p.confirm("web").unwrap();
                assert_eq!(release(&zp), "v3", "cut at {at_step:?}");
                assert!(p.ready("web").unwrap(), "cut at {at_step:?}");
            }
            cut_at.push(at_step);
        }
        let wanted: &[&str] = match switch {
            IllumosSwitch::Update => &[
                "zoneadm -z web shutdown",
                "zoneadm -z web detach",
                "zonecfg -z web delete -F",
                "open the switch",
                "discard the previous zonepath",
                "move the old zonepath aside",
                "place the new zonepath",
                "zonecfg -z web -f",
                "zoneadm -z web install -d -",
                "zoneadm -z web boot",
                "confirm the switch",
            ],
            IllumosSwitch::Rollback => &[
                "zoneadm -z web shutdown",
                "zoneadm -z web detach",
                "zonecfg -z web delete -F",
                "open the switch",
                "set the current zonepath aside",
                "put the previous zonepath back",
                "keep the zonepath set aside as previous",
                "close the switch",
                "zonecfg -z web -f",
                "zoneadm -z web attach -F",
                "zoneadm -z web boot",
            ],
        };
        eprintln!("{switch:?} cut at {} steps: {cut_at:#?}", cut_at.len());
        for w in wanted {
            assert!(
                cut_at.iter().any(|c| c.starts_with(w)),
                "{switch:?}: never cut at {w:?}: {cut_at:#?}"
            );
        }
    }
}

/// An update killed while `zoneadm install` of the new zone ran (the hook stops before the
/// command; the zone is then forced `incomplete`, as an install cut in its middle leaves it):
/// the start brings that zone down while its zonepath is still the new one, so the uninstall
/// deletes the new root, not the old one the switch puts back; the old zone runs again.
pub fn killed_during_install<N: Node>(b: &N) {
    let spec = conformance::spec("web");
    let p = b.start(None);
    p.provision(&spec, b.root(&p, "v1")).unwrap();
    drop(p);
    let hook: StepHook = Arc::new(|_: &str, step: &str| step.ends_with(" install -d -"));
    let cut = b.start(Some(hook));
    let root = b.root(&cut, "v2");
    let e = cut.provision_unconfirmed(&spec, root).unwrap_err();
    assert!(matches!(e, ProvisionError::Interrupted { .. }), "{e:?}");
    drop(cut);
    b.fake().force_state("web", State::Incomplete);
    let p = b.start(None);
    let zp = b.base().join("web");
    assert_eq!(release(&zp), "v1", "the old root survives the uninstall");
    assert_eq!(b.fake().state("web"), Some(State::Running));
    assert!(p.ready("web").unwrap());
}
