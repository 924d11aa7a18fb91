//! Volumes on the directory store (the `dir` provisioner, each volume a directory under
//! `<base>/.volumes`): the cases of `volume_cases/`, which `worker_zfs.rs` runs on zfs-fuse,
//! and what only the directory store refuses.

mod image;
mod tarbuild;
mod volume_cases;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use validator::{Document, check_config, check_document};
use volume_cases::{HELLO, Node};
use worker_runtime::volume::Volumes;
use worker_runtime::{
    ContentStore, DirProvisioner, Phase, ProvisionError, Provisioner, PulledImage, StepHook,
    UnpackOptions, ZoneSpec, build_root, load_zone,
};

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

/// `volume_image(tag)` with its blobs in `store`, as the worker holds a pulled image.
fn pulled(store: &ContentStore, tag: &str) -> PulledImage {
    let img = volume_cases::volume_image(tag);
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

/// A worker killed before any step of making a zone with a volume (creating, seeding,
/// publishing the seed, recording it, placing the zonepath) and started again makes the
/// zone with the whole seed, never half of one; and once the zone wrote into its volume, a
/// kill before any step of replacing the zone with a new image loses nothing of it.
#[test]
fn a_crash_at_any_step_of_attaching_a_volume_converges_with_the_data() {
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
            let base = t.path().join(format!("zones-{replace}-{k}"));
            let open = |hook: Option<StepHook>| {
                let p = DirProvisioner::new(&base, "node-a").unwrap();
                let v = Volumes::open(&base, "node-a", None).unwrap();
                let p = p.with_volumes(v);
                match hook {
                    Some(h) => p.with_step_hook(h),
                    None => p,
                }
            };
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
