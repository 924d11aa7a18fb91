//! Provisioners: the zonecfg, SMF and command text against expected files in
//! `tests/data/golden/`, the StopSignal → SMF stop method mapping, and the illumos provisioner's
//! command sequence (create; replace = shutdown, halt after the grace period, uninstall, delete,
//! create) recorded at its command-runner seam over a real `dir` placement.
//!
//! Set `UPDATE_GOLDEN=1` to rewrite the expected files after a deliberate change, then review
//! the diff.

mod image;
mod tarbuild;

use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::Duration;

use registry_client::Reference;
use tarbuild::Tar;
use validator::{Digest, Document, check_config, check_document};
use worker_runtime::provision::illumos::{
    CommandOutcome, command_plan, smf_manifest, smf_stop_exec, zonecfg_script,
};
use worker_runtime::{
    CommandRunner, ContentStore, DirProvisioner, IllumosProvisioner, Provisioner, PullPolicy,
    PulledImage, ResourceLimits, UnpackOptions, ZoneDescription, ZoneSpec, build_root,
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
        },
        zonepath: PathBuf::from("/zones/web"),
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
    golden(
        "zonecfg-web.txt",
        &zonecfg_script(&d.zone, &d.zonepath, &d.brand, &d.limits),
    );
    golden("entrypoint-web.xml", &smf_manifest(&d).unwrap());
    golden(
        "commands-web.txt",
        &command_plan(&d, &d.zonepath.join("zonecfg.txt")),
    );
    // No limits, no user, no env: the optional parts are left out.
    let mut bare = description();
    bare.limits = ResourceLimits::default();
    bare.user = None;
    bare.env.clear();
    bare.working_dir = None;
    bare.zonepath = PathBuf::from("/zones/with space/web");
    bare.smf_stop_exec = smf_stop_exec("SIGTERM");
    golden(
        "zonecfg-bare.txt",
        &zonecfg_script(&bare.zone, &bare.zonepath, &bare.brand, &bare.limits),
    );
    golden("entrypoint-bare.xml", &smf_manifest(&bare).unwrap());
    // An image with no command gets no entrypoint service.
    bare.entrypoint.clear();
    bare.cmd.clear();
    assert!(smf_manifest(&bare).is_none());
}

/// Records every command; `shutdown` "times out" so the halt path runs.
#[derive(Default)]
struct Recorder {
    calls: Mutex<Vec<(String, Option<Duration>)>>,
}

impl CommandRunner for Recorder {
    fn run(&self, argv: &[String], timeout: Option<Duration>) -> std::io::Result<CommandOutcome> {
        self.calls.lock().unwrap().push((argv.join(" "), timeout));
        let shutdown = argv.get(3).is_some_and(|a| a == "shutdown");
        Ok(CommandOutcome {
            code: if shutdown { None } else { Some(0) },
            timed_out: shutdown,
            stderr: String::new(),
        })
    }
}

fn pulled(store: &ContentStore, tag: &str) -> PulledImage {
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

#[test]
fn illumos_provisioner_runs_create_and_replace_in_order() {
    let t = tempfile::tempdir().unwrap();
    let store = ContentStore::open(&t.path().join("content"), "node").unwrap();
    let base = t.path().join("zones");
    let rec = Recorder::default();
    let p = IllumosProvisioner::new(DirProvisioner::new(&base, "node").unwrap(), rec);
    let spec = ZoneSpec {
        name: "web".into(),
        image: Reference::parse("127.0.0.1:5000/apps/web:1").unwrap(),
        pull_policy: PullPolicy::Always,
        brand: "nlipkg".into(),
        stop_timeout_secs: Some(7),
        limits: ResourceLimits::default(),
        source: PathBuf::from("web.toml"),
    };
    for (n, tag) in ["v1", "v2"].iter().enumerate() {
        let img = pulled(&store, tag);
        let staging = p.staging_dir().join(format!("web.{n}"));
        let root = build_root(&store, &staging, "node", &img, &UnpackOptions::default()).unwrap();
        let d = p.provision(&spec, root).unwrap();
        assert_eq!(d.stop_signal, "SIGUSR1");
        assert_eq!(
            std::fs::read(base.join("web/root/etc/release")).unwrap(),
            tag.as_bytes()
        );
    }
    p.remove("web").unwrap();
    assert!(!base.join("web").exists());
    let zonecfg = format!("{}", base.join("web/zonecfg.txt").display());
    let grace = Some(Duration::from_secs(7));
    let expected: Vec<(String, Option<Duration>)> = vec![
        (format!("zonecfg -z web -f {zonecfg}"), None),
        ("zoneadm -z web install -d -".into(), None),
        ("zoneadm -z web boot".into(), None),
        // Replace: graceful shutdown within the stop timeout, then halt, uninstall, delete.
        ("zoneadm -z web shutdown".into(), grace),
        ("zoneadm -z web halt".into(), None),
        ("zoneadm -z web uninstall -F".into(), None),
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
    let calls = p.into_runner().calls.into_inner().unwrap();
    assert_eq!(calls, expected);
}
