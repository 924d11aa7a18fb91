//! Image updates on the directory store (the `dir` provisioner): the replaced root kept in
//! `<base>/.previous` for `rdctl worker rollback`, a zone that never becomes ready rolled back
//! within `update_timeout`, and a crash at every step of a switch (`rollout_cases/`, which
//! `worker_zfs.rs` runs on zfs-fuse).

mod image;
mod rollout_cases;
mod tarbuild;
mod volume_cases;

use worker_runtime::DirProvisioner;
use worker_runtime::volume::Volumes;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn volume_data_survives_three_updates_and_a_rollback_with_the_previous_root_kept() {
    let node = rollout_cases::updates_keep_the_previous_root_and_roll_back("").await;
    // The directory store keeps the previous root as a directory beside the zones.
    assert!(node.base().join(".previous").is_dir());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_zone_that_never_becomes_ready_is_rolled_back_within_update_timeout() {
    rollout_cases::a_never_ready_update_rolls_back_within_update_timeout("").await;
}

#[test]
fn a_crash_at_any_step_of_a_switch_leaves_the_old_or_the_new_zone_with_its_data() {
    let t = tempfile::tempdir().unwrap();
    rollout_cases::a_crash_at_any_step_of_a_switch_keeps_a_zone_with_its_data(&|label| {
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

/// `update_timeout` and `[readiness]` are checked when the manifest is read, naming the key.
#[test]
fn bad_rollout_keys_are_refused_naming_the_key() {
    let t = tempfile::tempdir().unwrap();
    for (body, want) in [
        (
            "update_timeout = \"0s\"",
            "update_timeout: must be more than 0s",
        ),
        (
            "[readiness]\nport = 0",
            "readiness.port: must be from 1 to 65535",
        ),
        (
            "[readiness]\nport = 80\npath = \"healthz\"",
            "readiness.path: \"healthz\" is not an absolute request path",
        ),
        (
            "[readiness]\nport = 80\nhost = \"web.local\"",
            "readiness.host: \"web.local\" is not an IP address",
        ),
        (
            "[readiness]\nport = 80\nperiod = \"0s\"",
            "readiness.period: must be more than 0s",
        ),
        (
            "[readiness]\nport = 80\nexec = \"true\"",
            "readiness.exec: unknown key `exec`",
        ),
    ] {
        let p = t.path().join("web.toml");
        std::fs::write(
            &p,
            format!("name = \"web\"\nimage = \"r.example/a:1\"\n{body}\n"),
        )
        .unwrap();
        let msg = validator::error_chain(&worker_runtime::load_zone(&p).unwrap_err());
        assert!(msg.contains(want), "{body}: {msg}");
        assert!(msg.contains("web.toml"), "{body}: {msg}");
    }
    let p = t.path().join("web.toml");
    std::fs::write(
        &p,
        "name = \"web\"\nimage = \"r.example/a:1\"\nupdate_timeout = \"45s\"\n[readiness]\nport = 8080\npath = \"/healthz\"\nperiod = \"2s\"\n",
    )
    .unwrap();
    let spec = worker_runtime::load_zone(&p).unwrap();
    assert_eq!(
        spec.rollout.update_timeout,
        std::time::Duration::from_secs(45)
    );
    let r = spec.rollout.readiness.unwrap();
    assert_eq!(
        (r.host.as_str(), r.port, r.period),
        ("127.0.0.1", 8080, std::time::Duration::from_secs(2))
    );
    assert_eq!(
        r.check,
        worker_runtime::ProbeCheck::Http {
            path: "/healthz".into()
        }
    );
    std::fs::write(&p, "name = \"web\"\nimage = \"r.example/a:1\"\n").unwrap();
    let spec = worker_runtime::load_zone(&p).unwrap();
    assert_eq!(spec.rollout, worker_runtime::Rollout::default());
    assert_eq!(
        spec.rollout.update_timeout,
        std::time::Duration::from_secs(120)
    );
}
