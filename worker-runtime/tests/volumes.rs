//! Volumes on the directory store (the `dir` provisioner, each volume a directory under
//! `<base>/.volumes`): the cases of `volume_cases/`, which `worker_zfs.rs` runs on zfs-fuse,
//! and what only the directory store refuses.

mod image;
mod tarbuild;
mod volume_cases;

use volume_cases::{HELLO, Node};
use worker_runtime::volume::Volumes;
use worker_runtime::{DirProvisioner, Phase};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_in_a_volume_survives_three_image_updates_and_a_restart() {
    let node = volume_cases::data_survives_updates_and_restart("", None).await;
    // A directory outside every zonepath: `<base>/.volumes/<id>/data`.
    let v = node.volume("web", HELLO);
    assert_eq!(v.source, node.base().join(".volumes/web.var-hello/data"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reclaim_retain_keeps_a_volume_and_delete_removes_it() {
    volume_cases::reclaim_both_ways("").await;
}

/// The directory store cannot limit a directory: a sized volume fails the zone naming the
/// volume and the key, and nothing is made for it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sized_volume_on_the_directory_store_fails_the_zone_naming_the_key() {
    let node = Node::new("").await;
    node.push("v1").await;
    node.zone("web", "[[volumes]]\npath = \"/srv/data\"\nsize = \"64m\"\n");
    let w = node.worker();
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.failed, vec!["web".to_owned()], "{s:?}");
    let st = worker_runtime::status(&node.config())
        .unwrap()
        .into_iter()
        .find(|r| r.status.zone == "web")
        .unwrap()
        .status;
    assert_eq!(st.phase, Phase::Failed);
    let err = st.last_error.unwrap();
    assert!(
        err.contains("volume web.srv-data: size: the directory layer store cannot limit a volume"),
        "{err}"
    );
    assert!(!node.base().join("web").exists());
    assert!(!node.base().join(".volumes/web.srv-data").exists());
}

/// A manifest's volumes are checked when it is read, naming the file and the element.
#[test]
fn bad_volume_entries_are_refused_naming_the_element() {
    let t = tempfile::tempdir().unwrap();
    for (body, want) in [
        (
            "path = \"var/x\"",
            "volumes.0.path: \"var/x\" is not an absolute path below /",
        ),
        (
            "path = \"/var/../etc\"",
            "volumes.0.path: \"/var/../etc\" is not normalised",
        ),
        (
            "path = \"/x\"\nsize = \"lots\"",
            "volumes.0.size: \"lots\" is not a size",
        ),
        (
            "path = \"/x\"\nname = \"a.b\"",
            "volumes.0.name: \"a.b\" is not a volume name",
        ),
        (
            "path = \"/x\"\nreclaim = \"recycle\"",
            "volumes.0.reclaim: unknown value \"recycle\"; expected \"retain\" or \"delete\"",
        ),
    ] {
        let p = t.path().join("web.toml");
        std::fs::write(
            &p,
            format!("name = \"web\"\nimage = \"r.example/a:1\"\n[[volumes]]\n{body}\n"),
        )
        .unwrap();
        let e = worker_runtime::load_zone(&p).unwrap_err();
        let msg = validator::error_chain(&e);
        assert!(msg.contains(want), "{body}: {msg}");
        assert!(msg.contains("web.toml"), "{body}: {msg}");
    }
    let p = t.path().join("two.toml");
    std::fs::write(
        &p,
        "name = \"two\"\nimage = \"r.example/a:1\"\n[[volumes]]\npath = \"/x\"\n[[volumes]]\npath = \"/x\"\n",
    )
    .unwrap();
    let msg = validator::error_chain(&worker_runtime::load_zone(&p).unwrap_err());
    assert!(
        msg.contains("volumes.1.path: \"/x\" is also volumes.0.path"),
        "{msg}"
    );
}

/// A worker killed before any step of making a zone with a volume, or of replacing it, and
/// started again converges with the data (`volume_cases::crash_at_any_step_converges`).
#[test]
fn a_crash_at_any_step_of_attaching_a_volume_converges_with_the_data() {
    let t = tempfile::tempdir().unwrap();
    volume_cases::crash_at_any_step_converges(&|label| {
        let base = t.path().join(format!("zones-{label}"));
        Box::new(move |hook| {
            let p = DirProvisioner::new(&base, "node-a").unwrap();
            let p = p.with_volumes(Volumes::open(&base, "node-a", None).unwrap());
            match hook {
                Some(h) => p.with_step_hook(h),
                None => p,
            }
        })
    });
}

/// A named volume is one zone's at a time: a second zone naming it fails, naming the volume
/// and the zone holding it, and the first zone keeps it; once the first zone is gone (its
/// manifest removed, the volume retained) the second gets it, data and all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_named_volume_is_held_by_one_zone_and_follows_it_to_the_next() {
    let node = Node::new("").await;
    node.push("v1").await;
    let shared = "[[volumes]]\npath = \"/srv/data\"\nname = \"shared\"\n";
    node.zone("alpha", shared);
    let w = node.worker();
    volume_cases::pass(&w, &["alpha"]).await;
    let v = node.volume("alpha", "/srv/data");
    std::fs::write(v.source.join("db"), b"alpha's rows").unwrap();
    node.zone("beta", shared);
    let s = w.pass(true).await.unwrap();
    assert_eq!(s.failed, vec!["beta".to_owned()], "{s:?}");
    let err = worker_runtime::status(&node.config())
        .unwrap()
        .into_iter()
        .find(|r| r.status.zone == "beta")
        .unwrap()
        .status
        .last_error
        .unwrap();
    assert!(
        err.contains("zone beta: volume shared: held by zone alpha"),
        "{err}"
    );
    assert!(!node.base().join("beta").exists());
    node.remove_zone("alpha");
    // alpha goes first in the pass, releasing the volume, and beta is made with it.
    let s = volume_cases::pass(&w, &["beta"]).await;
    assert_eq!(s.removed, vec!["alpha".to_owned()], "{s:?}");
    let b = node.volume("beta", "/srv/data");
    assert_eq!(b.source, v.source);
    assert_eq!(std::fs::read(b.source.join("db")).unwrap(), b"alpha's rows");
    let listed = node.status_volumes();
    assert_eq!(
        listed
            .iter()
            .map(|r| (r.id.as_str(), r.zone.as_str(), r.released_unix))
            .collect::<Vec<_>>(),
        [
            ("alpha.var-hello", "alpha", listed[0].released_unix),
            ("beta.var-hello", "beta", None),
            ("shared", "beta", None)
        ]
    );
    assert!(listed[0].released_unix.is_some(), "{listed:?}");
}
