//! kill -9 of the real `rdctl worker` at every step of a zone's switch (issue 49): an update to
//! a new image and an `rdctl worker rollback`, on the directory store and on ZFS (zfs-fuse).
//! The volume's data survives, the node has the old zone or the new one after recovery (never
//! neither, never both), and the next pass ends the switch once: the new image placed, or the
//! rollback done (not done a second time).
//!
//! The worker is paused at its n-th provisioner step by the failpoint `RDCTL_FAILPOINT_PAUSE`
//! (`worker_runtime::provision::failpoint`), which writes `state/failpoint.paused`; the test
//! SIGKILLs it there, for n = 1, 2, ... until an update runs to its end without reaching n.
//! Recovery is looked at by a fresh worker paused at its own first step: by then it has opened,
//! settled the switch the killed one left open, and changed nothing else.
//!
//! The illumos provisioner is built only on illumos, so its kill at every step runs in process
//! over the fake zone tools (`worker-runtime/tests/illumos_kill/`).
//!
//! The ZFS case starts zfs-fuse, which must not mount beside another test binary's pool (see
//! scripts/test.sh), so it is `#[ignore]`d in the root binary's parallel run and run alone with
//! the zfs-fuse group: `flock /tmp/zfs-fuse.lock cargo test --test tests worker_kill::zfs --
//! --ignored --test-threads=1`.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::util::{Server, ok, rdctl, s, tail, tempdir};
use crate::worker_e2e::{Node, RawImage};

#[path = "../worker-runtime/tests/zfspool/mod.rs"]
mod zfspool;

const ZONE: &str = "app";

/// The steps of an update that must each have been a kill point.
const UPDATE_STEPS: &[&str] = &[
    "fill the staging zonepath",
    "open the switch",
    "discard the previous zonepath",
    "move the old zonepath aside",
    "place the new zonepath",
    "confirm the switch",
];

/// The steps of a rollback that must each have been a kill point.
const ROLLBACK_STEPS: &[&str] = &[
    "open the switch",
    "set the current zonepath aside",
    "put the previous zonepath back",
    "keep the zonepath set aside as previous",
    "close the switch",
];

/// What a paused-or-finished worker did.
enum Outcome {
    /// Paused at this step (`<n> <zone>: <step>`), then killed with SIGKILL.
    Killed(String),
    /// Ran to its end (the output's stderr tail).
    Finished(std::process::ExitStatus, String),
}

fn paused_file(node: &Node) -> PathBuf {
    node.dir().join("state").join("failpoint.paused")
}

/// `rdctl worker run --once` paused at its `n`-th provisioner step and killed there, or run
/// to its end when it has fewer steps.
fn run_killed_at(node: &Node, n: usize, log: &str) -> Outcome {
    let marker = paused_file(node);
    let _ = std::fs::remove_file(&marker);
    let log = node.dir().join(log);
    let mut child: Child = rdctl()
        .args(["worker", "run", "--once", "--config", s(&node.config())])
        .env("RDCTL_FAILPOINT_PAUSE", n.to_string())
        .env("RDCTL_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .expect("start rdctl worker run");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Ok(step) = std::fs::read_to_string(&marker) {
            ok(Command::new("kill").args(["-9", &child.id().to_string()]));
            child.wait().unwrap();
            return Outcome::Killed(step.trim().to_owned());
        }
        if let Some(status) = child.try_wait().unwrap() {
            return Outcome::Finished(status, tail(&std::fs::read(&log).unwrap()));
        }
        assert!(
            Instant::now() < deadline,
            "the worker neither paused at step {n} nor ended: {}",
            tail(&std::fs::read(&log).unwrap())
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The zone manifest: `image`, one volume at /var/data.
fn zone(node: &Node, image: &str) {
    std::fs::write(
        node.dir().join("zones").join(format!("{ZONE}.toml")),
        format!(
            "name = \"{ZONE}\"\nimage = \"{image}\"\npull_policy = \"Always\"\n\
             [[volumes]]\npath = \"/var/data\"\n"
        ),
    )
    .unwrap();
}

fn release(node: &Node) -> String {
    std::fs::read_to_string(node.root(ZONE).join("release")).unwrap()
}

/// The volume's directory as the zone description names it.
fn volume_source(node: &Node) -> PathBuf {
    let d = node.description(ZONE);
    let v = d["volumes"].as_array().expect("the zone has volumes");
    assert_eq!(v.len(), 1, "{d}");
    PathBuf::from(v[0]["source"].as_str().unwrap())
}

/// The zones on the node (entries of the base not starting with a dot).
fn zones(node: &Node) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(node.zonepath(""))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| !n.starts_with('.'))
        .collect();
    v.sort();
    v
}

/// After a kill and a recovery: one zone, running the old image (`second`) or the new one
/// (`third`), nothing aside or open, the volume attached with its data.
fn assert_recovered(node: &Node, at: &str, source: &Path, data: &str) {
    assert_eq!(zones(node), [ZONE], "killed at {at}: one zone, never none");
    let r = release(node);
    assert!(
        r == "second release\n" || r == "third release\n",
        "killed at {at}: the zone runs {r:?}"
    );
    let kept = node.zonepath("").join(".previous");
    assert!(
        !kept.join(".aside").join(ZONE).exists(),
        "killed at {at}: a zonepath left aside"
    );
    assert!(
        !kept.join(".switch").join(format!("{ZONE}.json")).exists(),
        "killed at {at}: the switch is still open"
    );
    assert_eq!(volume_source(node), source, "killed at {at}");
    assert_eq!(
        std::fs::read_to_string(source.join("kept")).unwrap(),
        data,
        "killed at {at}: the volume's data"
    );
}

/// The switch killed at each of its steps.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Switch {
    /// The update second → third.
    Update,
    /// `rdctl worker rollback` third → second.
    Rollback,
}

impl Switch {
    /// The steps that must each have been a kill point (the switch's own; the failpoint also
    /// stops at the others: filling the root, removing the discarded one's entries).
    fn steps(self) -> &'static [&'static str] {
        match self {
            Switch::Update => UPDATE_STEPS,
            Switch::Rollback => ROLLBACK_STEPS,
        }
    }

    /// What the zone runs once the switch is done.
    fn end(self) -> &'static str {
        match self {
            Switch::Update => "third release\n",
            Switch::Rollback => "second release\n",
        }
    }
}

/// A node running `third` with `second` kept, data written into its volume after `first`;
/// for an update, still running `second` with `third` named by the manifest; for a rollback,
/// the rollback asked for. Returns the volume's directory and the data.
fn prepare(
    node: &Node,
    image: &dyn Fn(&str) -> String,
    switch: Switch,
    n: usize,
) -> (PathBuf, String) {
    zone(node, &image("1"));
    let out = node.run_once();
    assert!(out.status.success(), "{}", tail(&out.stderr));
    let source = volume_source(node);
    let data = format!("written before kill point {n}\n");
    std::fs::write(source.join("kept"), &data).unwrap();
    // second, so the update has a previous root to discard.
    zone(node, &image("2"));
    let out = node.run_once();
    assert!(out.status.success(), "{}", tail(&out.stderr));
    assert_eq!(release(node), "second release\n");
    zone(node, &image("3"));
    if switch == Switch::Rollback {
        let out = node.run_once();
        assert!(out.status.success(), "{}", tail(&out.stderr));
        assert_eq!(release(node), "third release\n");
        ok(rdctl().args(["worker", "rollback", ZONE, "--config", s(&node.config())]));
    }
    (source, data)
}

/// Kills the worker at each step of `switch` on nodes made by `new_node` (one per kill point),
/// checking recovery and convergence after each; returns the steps killed at.
fn kill_at_every_step(new_node: &dyn Fn(usize) -> Node, switch: Switch) -> Vec<String> {
    let t = tempdir();
    let server = Server::start(&t.path().join("registry"), &[]);
    for (tag, name) in [("1", "first"), ("2", "second"), ("3", "third")] {
        RawImage::new(name).push(server.addr, "kill/app", tag);
    }
    let image = |tag: &str| format!("{}/kill/app:{tag}", server.host());
    let mut killed = Vec::new();
    for n in 1.. {
        assert!(n < 60, "the {switch:?} never ran to its end: {killed:?}");
        let node = new_node(n);
        let (source, data) = prepare(&node, &image, switch, n);
        let at = match run_killed_at(&node, n, "switch.log") {
            Outcome::Killed(at) => at,
            Outcome::Finished(status, log) => {
                assert!(status.success(), "{log}");
                assert_eq!(release(&node), switch.end());
                assert_recovered(&node, "no step", &source, &data);
                break;
            }
        };
        // A fresh worker settles what the killed one left; paused at its first step, it has
        // not touched the zone since.
        match run_killed_at(&node, 1, "recovery.log") {
            Outcome::Killed(_) => assert_recovered(&node, &at, &source, &data),
            Outcome::Finished(status, log) => {
                assert!(status.success(), "killed at {at}: {log}");
                assert_recovered(&node, &at, &source, &data);
            }
        }
        // The next pass ends the switch once: the update placed, the rollback done (and held
        // while the tag stays), whichever way the recovery went.
        let out = node.run_once();
        assert!(
            out.status.success(),
            "killed at {at}: {}",
            tail(&out.stderr)
        );
        assert_eq!(release(&node), switch.end(), "killed at {at}");
        assert_recovered(&node, &at, &source, &data);
        let st = node.status();
        assert_eq!(
            st[ZONE]["current_digest"],
            node.description(ZONE)["manifest_digest"],
            "killed at {at}: {}",
            st[ZONE]
        );
        if switch == Switch::Rollback {
            assert_eq!(
                st[ZONE]["rolled_back"]["manual"],
                serde_json::json!(true),
                "killed at {at}"
            );
        }
        killed.push(at);
    }
    eprintln!("{switch:?} killed at {} steps: {killed:#?}", killed.len());
    for step in switch.steps() {
        assert!(
            killed
                .iter()
                .any(|k| k.ends_with(&format!("{ZONE}: {step}"))),
            "never killed at {step:?}: {killed:#?}"
        );
    }
    killed
}

#[test]
fn a_worker_killed_at_every_step_of_an_update_keeps_a_zone_and_its_volume() {
    let t = tempdir();
    let killed = kill_at_every_step(
        &|n| Node::new(&t.path().join(format!("node{n}"))),
        Switch::Update,
    );
    // Each of the discarded root's entries was a kill point too.
    assert!(
        killed.iter().any(|k| k.ends_with(": remove root")),
        "{killed:#?}"
    );
}

#[test]
#[ignore = "zfs-fuse: scripts/test.sh runs it alone with the zfs-fuse group (--ignored)"]
fn zfs_a_worker_killed_at_every_step_of_an_update_or_a_rollback_keeps_a_zone_and_its_volume() {
    let pool = zfspool::pool();
    let t = tempdir();
    for switch in [Switch::Update, Switch::Rollback] {
        let node = |n: usize| {
            let parent = pool.dataset(&format!("kill{n}"));
            Node::with_config(
                &t.path().join(format!("{switch:?}-node{n}")),
                &format!("[layer_store]\nkind = \"zfs\"\ndataset = \"{parent}\"\n"),
            )
        };
        kill_at_every_step(&node, switch);
    }
}

/// `rdctl worker rollback` killed at each of its steps: done exactly once (a recovery that
/// finished it is not followed by a second rollback going forward again).
#[test]
fn a_worker_killed_at_every_step_of_a_rollback_keeps_a_zone_and_rolls_back_once() {
    let t = tempdir();
    kill_at_every_step(
        &|n| Node::new(&t.path().join(format!("node{n}"))),
        Switch::Rollback,
    );
}
