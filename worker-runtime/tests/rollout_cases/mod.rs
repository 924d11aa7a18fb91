//! Image update cases run on every layer store (`rollout.rs` on the directory store,
//! `worker_zfs.rs` on zfs-fuse): the previous root kept, a zone that never becomes ready
//! rolled back within `update_timeout`, `rdctl worker rollback`, and a crash at every step of
//! a switch, each time with the data the zone wrote into its volume.
//!
//! Readiness on the `dir` provisioner (whose zones run nothing) is its zonepath placed plus the
//! manifest's probe; here the probe asks a small HTTP server standing for the zone's service,
//! which serves from the zone's root as placed: 503 while `etc/release` says `broken`.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use worker_runtime::{
    ContentStore, DirProvisioner, Phase, ProvisionError, Provisioner, PulledImage, StepHook,
    UnpackOptions, ZoneSpec, ZoneStatus, build_root, load_zone,
};

use super::volume_cases::{self, HELLO, Node, Opener, pass, pulled};

/// The zone's record as `rdctl worker status` reads it.
pub fn status(node: &Node, zone: &str) -> ZoneStatus {
    worker_runtime::status(&node.config())
        .unwrap()
        .into_iter()
        .find(|r| r.status.zone == zone)
        .unwrap()
        .status
}

fn release(root: &Path) -> String {
    std::fs::read_to_string(root.join("root/etc/release")).unwrap()
}

/// Data written into the zone's volume survives three image updates, each keeping the
/// replaced root as the previous one (status: current and previous digests), then `rdctl
/// worker rollback` puts the previous root back and holds it while the tag stays; a new push
/// updates again.
pub async fn updates_keep_the_previous_root_and_roll_back(store: &str) -> Node {
    let node = Node::new(store).await;
    let mut digests = vec![node.push("v1").await];
    node.zone("web", "update_timeout = \"20s\"\n");
    let w = node.worker();
    pass(&w, &["web"]).await;
    let src = node.volume("web", HELLO).source;
    std::fs::write(src.join("state"), b"counter=1").unwrap();
    let (current, previous) = (node.base().join("web"), node.base().join(".previous/web"));
    assert_eq!(status(&node, "web").previous_digest, None);
    for (i, tag) in ["v2", "v3", "v4"].into_iter().enumerate() {
        digests.push(node.push(tag).await);
        pass(&w, &["web"]).await;
        assert_eq!(release(&current), tag);
        assert_eq!(release(&previous), format!("v{}", i + 1), "{tag}");
        let st = status(&node, "web");
        assert_eq!(st.current_digest.as_ref(), Some(&digests[i + 1]), "{tag}");
        assert_eq!(st.previous_digest.as_ref(), Some(&digests[i]), "{tag}");
        assert_eq!(std::fs::read(src.join("state")).unwrap(), b"counter=1");
    }
    // Nothing aside, no switch left open.
    assert_eq!(names(&node.base().join(".previous")), [".switch", "web"]);
    assert!(names(&node.base().join(".previous/.switch")).is_empty());
    assert!(names(&node.base().join(".trash")).is_empty());

    let asked = worker_runtime::request_rollback(&node.config(), "web").unwrap();
    assert_eq!(asked.current_digest.as_ref(), Some(&digests[3]));
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.unchanged, ["web"], "{s:?}");
    assert_eq!(release(&current), "v3");
    assert_eq!(release(&previous), "v4");
    let st = status(&node, "web");
    assert_eq!(
        (
            st.phase,
            st.current_digest.as_ref(),
            st.previous_digest.as_ref()
        ),
        (Phase::Ready, Some(&digests[2]), Some(&digests[3]))
    );
    let rb = st.rolled_back.clone().unwrap();
    assert!(rb.manual && rb.digest == digests[3], "{rb:?}");
    assert_eq!(std::fs::read(src.join("state")).unwrap(), b"counter=1");
    // Held while the tag still points at what was rolled away from.
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.unchanged, ["web"], "{s:?}");
    assert_eq!(release(&current), "v3");
    // A new push goes forward again.
    let d5 = node.push("v5").await;
    pass(&w, &["web"]).await;
    assert_eq!(release(&current), "v5");
    assert_eq!(release(&previous), "v3");
    let st = status(&node, "web");
    assert_eq!(st.current_digest.as_ref(), Some(&d5));
    assert_eq!(st.previous_digest.as_ref(), Some(&digests[2]));
    assert_eq!(st.rolled_back, None);
    assert_eq!(std::fs::read(src.join("state")).unwrap(), b"counter=1");
    // Removing the zone takes its previous root too; the volume is retained.
    node.remove_zone("web");
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.removed, ["web"], "{s:?}");
    assert!(!previous.exists() && !current.exists());
    assert_eq!(std::fs::read(src.join("state")).unwrap(), b"counter=1");
    let e = worker_runtime::request_rollback(&node.config(), "web").unwrap_err();
    assert!(
        e.to_string().contains("zone web: the worker has no record"),
        "{e}"
    );
    node
}

/// A stand-in for the zone's service: answers `GET /healthz` with 200, or 503 while the
/// zone's root (as placed at `zonepath`) says `broken` in `etc/release`. Returns the port.
pub async fn service(zonepath: PathBuf) -> u16 {
    let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = l.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((mut s, _)) = l.accept().await else {
                return;
            };
            let zp = zonepath.clone();
            tokio::spawn(async move {
                let mut buf = [0u8; 1024];
                let _ = s.read(&mut buf).await;
                let rel = std::fs::read_to_string(zp.join("root/etc/release")).unwrap_or_default();
                let status = if rel == "broken" {
                    "503 Service Unavailable"
                } else {
                    "200 OK"
                };
                let _ = s
                    .write_all(format!("HTTP/1.1 {status}\r\nContent-Length: 0\r\n\r\n").as_bytes())
                    .await;
            });
        }
    });
    port
}

/// An update whose zone never becomes ready (its probe answers 503) is rolled back within
/// `update_timeout`: the previous root runs again with the volume's data, the zone is
/// `Failed` with the probe's answer, the failed root is kept as the previous one, and the
/// digest is not tried again before the back-off; a good image afterwards goes in.
pub async fn a_never_ready_update_rolls_back_within_update_timeout(store: &str) -> Node {
    let node = Node::new(store).await;
    let port = service(node.base().join("web")).await;
    let d1 = node.push("v1").await;
    node.zone(
        "web",
        &format!(
            "update_timeout = \"2s\"\n[readiness]\nport = {port}\npath = \"/healthz\"\nperiod = \"100ms\"\n"
        ),
    );
    let w = node.worker();
    pass(&w, &["web"]).await;
    let src = node.volume("web", HELLO).source;
    std::fs::write(src.join("state"), b"counter=7").unwrap();
    let bad = node.push("broken").await;
    let t = Instant::now();
    let s = w.pass(true).await.unwrap();
    let took = t.elapsed();
    assert_eq!(s.failed, ["web"], "{s:?}");
    // The pass is the pull and unpack (a moment here), the 2 s of probes, and the rollback.
    assert!(took >= Duration::from_secs(2), "{took:?}");
    assert!(took < Duration::from_secs(2 + 8), "{took:?}");
    let current = node.base().join("web");
    assert_eq!(release(&current), "v1");
    assert_eq!(release(&node.base().join(".previous/web")), "broken");
    let st = status(&node, "web");
    assert_eq!(st.phase, Phase::Failed);
    assert_eq!(st.current_digest.as_ref(), Some(&d1));
    assert_eq!(st.desired_digest.as_ref(), Some(&bad));
    assert_eq!(st.previous_digest.as_ref(), Some(&bad));
    let err = st.last_error.clone().unwrap();
    assert!(
        err.contains("not ready within update_timeout 2s: readiness probe http GET 127.0.0.1:")
            && err.contains("/healthz: status 503; rolled back to the previous root"),
        "{err}"
    );
    let rb = st.rolled_back.clone().unwrap();
    assert!(!rb.manual && rb.digest == bad, "{rb:?}");
    assert!(st.next_attempt_unix.is_some(), "{st:?}");
    assert_eq!(std::fs::read(src.join("state")).unwrap(), b"counter=7");
    // No flapping: the next pass respects the back-off.
    let s = w.pass(false).await.unwrap();
    assert_eq!(s.backing_off, ["web"], "{s:?}");
    assert_eq!(release(&current), "v1");
    // A fixed image goes in.
    let d2 = node.push("v2").await;
    pass(&w, &["web"]).await;
    assert_eq!(release(&current), "v2");
    let st = status(&node, "web");
    assert_eq!(
        (
            st.phase,
            st.current_digest.as_ref(),
            st.previous_digest.as_ref()
        ),
        (Phase::Ready, Some(&d2), Some(&d1))
    );
    assert_eq!(std::fs::read(src.join("state")).unwrap(), b"counter=7");
    node
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|r| {
            r.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

/// What a switch ends in before the worker is killed.
#[derive(Debug, Clone, Copy)]
enum Then {
    /// The new zone was ready: the switch is confirmed.
    Confirm,
    /// It was not: the switch is undone.
    Undo,
    /// Confirmed, then `rdctl worker rollback`.
    Rollback,
}

/// A worker killed before any step of a switch (opening it, discarding the older previous
/// root, moving the running root aside, placing the new one, confirming, undoing, and each
/// step of a rollback and of the removals inside them) and started again has the zone run
/// the old root or the new one, never neither, with what the zone wrote into its volume: an
/// open switch is undone at start (the old root, since the new one was never found ready), a
/// rollback cut short is finished. Uncut, each path ends where it should.
pub fn a_crash_at_any_step_of_a_switch_keeps_a_zone_with_its_data(fresh: &dyn Fn(&str) -> Opener) {
    let t = tempfile::tempdir().unwrap();
    let store = ContentStore::open(&t.path().join("content"), "node-a").unwrap();
    std::fs::write(
        t.path().join("web.toml"),
        "name = \"web\"\nimage = \"r.example/apps/vol:1\"\n",
    )
    .unwrap();
    let spec: ZoneSpec = load_zone(&t.path().join("web.toml")).unwrap();
    let imgs: Vec<PulledImage> = ["v1", "v2", "v3"]
        .iter()
        .map(|t| pulled(&store, t))
        .collect();
    let root = |p: &DirProvisioner, img: &PulledImage| {
        let staging = p.staging_dir().join(format!("r{}", next()));
        let opts = UnpackOptions::default();
        // On the ZFS layer store a root is a clone of the image's top layer, as the worker
        // makes it.
        match p.datasets() {
            Some(zd) => zd
                .build_root(&store, &staging, "node-a", img, &opts, None)
                .unwrap(),
            None => build_root(&store, &staging, "node-a", img, &opts).unwrap(),
        }
    };
    let mut steps_seen = Vec::new();
    for then in [Then::Confirm, Then::Undo, Then::Rollback] {
        for k in 0.. {
            let open = fresh(&format!("{then:?}-{k}"));
            // v1, then v2 (confirmed): the zone runs v2 with v1 kept.
            let p = open(None);
            p.provision(&spec, root(&p, &imgs[0])).unwrap();
            p.provision(&spec, root(&p, &imgs[1])).unwrap();
            let src = p.current("web").unwrap().unwrap().volumes[0].source.clone();
            std::fs::write(src.join("state"), b"written by the zone").unwrap();
            let seen = Arc::new(AtomicUsize::new(0));
            let log = Arc::new(std::sync::Mutex::new(Vec::new()));
            let (s2, l2) = (seen.clone(), log.clone());
            let hook: StepHook = Arc::new(move |_: &str, step: &str| {
                l2.lock().unwrap().push(step.to_owned());
                s2.fetch_add(1, Ordering::SeqCst) == k
            });
            let p = open(Some(hook));
            let r = match then {
                Then::Confirm => p
                    .provision_unconfirmed(&spec, root(&p, &imgs[2]))
                    .and_then(|_| p.confirm("web")),
                Then::Undo => p
                    .provision_unconfirmed(&spec, root(&p, &imgs[2]))
                    .and_then(|_| p.undo("web").map(|d| assert!(d.is_some()))),
                Then::Rollback => p.rollback("web").map(|_| ()),
            };
            let crashed = seen.load(Ordering::SeqCst) > k;
            drop(p);
            let p = open(None);
            let d = p.current("web").unwrap().unwrap_or_else(|| {
                panic!("{then:?}, crash before step {k}: no zone runs after the restart")
            });
            let rel = release(&d.zonepath);
            // A description names the zonepath it runs at; the kept root is in `.previous`.
            let kept = d.zonepath.parent().unwrap().join(".previous/web");
            let prev = p.previous("web").unwrap().map(|_| release(&kept));
            let opened = !(crashed && log.lock().unwrap()[k] == "open the switch");
            let want = match (then, crashed) {
                // Cut short: an update is undone, a rollback finished once it was opened.
                (Then::Confirm | Then::Undo, true) => ("v2", None),
                (Then::Rollback, true) if !opened => ("v2", Some("v1")),
                (Then::Rollback, _) => ("v1", Some("v2")),
                (Then::Confirm, false) => ("v3", Some("v2")),
                (Then::Undo, false) => ("v2", Some("v3")),
            };
            assert_eq!(rel, want.0, "{then:?}, crash before step {k}");
            if let Some(w) = want.1 {
                assert_eq!(prev.as_deref(), Some(w), "{then:?}, crash before step {k}");
            }
            assert_eq!(
                std::fs::read(src.join("state")).unwrap(),
                b"written by the zone",
                "{then:?}, crash before step {k}"
            );
            let base = d.zonepath.parent().unwrap();
            assert!(
                names(&base.join(".previous/.aside")).is_empty(),
                "{then:?} {k}"
            );
            assert!(
                names(&base.join(".previous/.switch")).is_empty(),
                "{then:?} {k}"
            );
            if crashed {
                assert!(
                    matches!(r, Err(ProvisionError::Interrupted { .. })),
                    "{r:?}"
                );
            } else {
                r.unwrap();
                steps_seen.push((then, log.lock().unwrap().clone()));
                break;
            }
        }
    }
    let steps = |t: usize| steps_seen[t].1.clone();
    assert!(
        steps(0).contains(&"open the switch".to_owned()),
        "{:?}",
        steps(0)
    );
    for s in [
        "discard the previous zonepath",
        "move the old zonepath aside",
        "place the new zonepath",
        "confirm the switch",
    ] {
        assert!(steps(0).contains(&s.to_owned()), "{s}: {:?}", steps(0));
    }
    for s in [
        "set the current zonepath aside",
        "put the previous zonepath back",
        "keep the zonepath set aside as previous",
        "close the switch",
    ] {
        assert!(steps(1).contains(&s.to_owned()), "{s}: {:?}", steps(1));
        assert!(steps(2).contains(&s.to_owned()), "{s}: {:?}", steps(2));
    }
    // `_` keeps the helper's import used on every store.
    let _ = volume_cases::HELLO;
}

fn next() -> usize {
    static N: AtomicUsize = AtomicUsize::new(0);
    N.fetch_add(1, Ordering::Relaxed)
}
