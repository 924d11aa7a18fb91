//! worker.toml and zone manifests: defaults, every key's checks and the errors that name them.

use super::*;

#[test]
fn worker_config_defaults_paths_and_errors() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("worker.toml");
    std::fs::write(
        &p,
        "zones_dir = \"zones\"\nstate_dir = \"/var/lib/rdctl\"\n[provisioner]\nkind = \"dir\"\nbase = \"roots\"\n",
    )
    .unwrap();
    let c = WorkerConfig::load(&p).unwrap();
    assert_eq!(c.zones_dir, t.path().join("zones"));
    assert_eq!(c.state_dir, PathBuf::from("/var/lib/rdctl"));
    assert_eq!(
        c.provisioner,
        ProvisionerConfig::Dir {
            base: t.path().join("roots")
        }
    );
    assert_eq!(c.poll_interval, Duration::from_secs(300));
    assert_eq!(c.worker_id, "rdctl-worker");
    assert_eq!(c.client, ClientOptions::default());
    // Backoff doubles from the initial delay up to the cap.
    assert_eq!(c.backoff(1), Duration::from_secs(10));
    assert_eq!(c.backoff(2), Duration::from_secs(20));
    assert_eq!(c.backoff(7), Duration::from_secs(600));
    assert_eq!(c.backoff(1000), Duration::from_secs(600));
    // Jitter stays within ±10 %.
    assert_eq!(c.jittered_interval(0.0), Duration::from_secs(270));
    assert_eq!(c.jittered_interval(0.5), Duration::from_secs(300));
    assert!(c.jittered_interval(0.999) <= Duration::from_secs(330));

    for (text, field) in [
        ("jitter = 2.0\n", "jitter"),
        ("poll_interval_secs = 0\n", "poll_interval"),
        ("poll_interval = \"0s\"\n", "poll_interval"),
        ("worker_id = \"../x\"\n", "worker_id"),
        ("plain_http = true\ninsecure = true\n", "insecure"),
        ("max_parallel_pulls = 0\n", "max_parallel_pulls"),
        ("max_concurrent_downloads = 0\n", "max_concurrent_downloads"),
        ("registry_pull_qps = -1.0\n", "registry_pull_qps"),
        (
            "image_pull_progress_deadline_secs = 0\n",
            "image_pull_progress_deadline",
        ),
        ("image_gc_high_percent = 101\n", "image_gc_high_percent"),
        (
            "image_gc_high_percent = 70\nimage_gc_low_percent = 80\n",
            "image_gc_low_percent",
        ),
        (
            "[[credential_providers]]\nname = \"p\"\nmatch_images = [\"r.example\"]\n",
            "image_credential_provider_bin_dir",
        ),
        (
            "image_credential_provider_bin_dir = \"bin\"\n[[credential_providers]]\nname = \"p\"\nmatch_images = [\"r.example\"]\napi_version = \"credentialprovider.kubelet.k8s.io/v1alpha1\"\n",
            "credential_providers",
        ),
        ("[allocatable]\nmemory = \"lots\"\n", "allocatable.memory"),
        (
            "[zones]\nallowed_privileges = [\"!proc_info\"]\n",
            "zones.allowed_privileges",
        ),
        (
            "[zones]\nallowed_lower_links = [\"igb\"]\n",
            "zones.allowed_lower_links",
        ),
        (
            "[zones]\nallowed_address_ranges = [\"10.0.0.2\"]\n",
            "zones.allowed_address_ranges",
        ),
    ] {
        std::fs::write(
            &p,
            format!("zones_dir = \"z\"\nstate_dir = \"s\"\n{text}[provisioner]\nkind = \"dir\"\nbase = \"b\"\n"),
        )
        .unwrap();
        match WorkerConfig::load(&p) {
            Err(ConfigError::Value { field: f, .. }) => assert_eq!(f, field),
            other => panic!("{text}: {other:?}"),
        }
    }
    std::fs::write(&p, "zones_dir = \"z\"\nstate_dir = \"s\"\nbogus = 1\n").unwrap();
    assert!(matches!(
        WorkerConfig::load(&p),
        Err(ConfigError::Parse { .. })
    ));
    // Wrong types and missing keys name the line, the dotted key and what is expected.
    let base = "zones_dir = \"z\"\nstate_dir = \"s\"\n";
    for (text, want) in [
        (
            format!(
                "{base}poll_interval = \"5 minutes\"\n[provisioner]\nkind = \"dir\"\nbase = \"b\"\n"
            ),
            ":3: poll_interval: \"5 minutes\" has an unknown unit \"minutes\"; use ms, s, m, h or d (like \"90s\", \"15m\")",
        ),
        (
            format!("{base}[provisioner]\nkind = \"dir\"\n"),
            ":3: provisioner.base: missing; this key is required",
        ),
        (
            "state_dir = \"s\"\n[provisioner]\nkind = \"dir\"\nbase = \"b\"\n".to_owned(),
            ":1: zones_dir: missing; this key is required",
        ),
    ] {
        std::fs::write(&p, &text).unwrap();
        let e = WorkerConfig::load(&p).unwrap_err().to_string();
        assert_eq!(e, format!("{}{want}", p.display()), "{text}");
    }
}

#[test]
fn layer_store_kinds_and_errors_naming_the_field() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("worker.toml");
    let load = |text: &str| {
        std::fs::write(
            &p,
            format!("zones_dir = \"z\"\nstate_dir = \"s\"\n{text}[provisioner]\nkind = \"dir\"\nbase = \"b\"\n"),
        )
        .unwrap();
        WorkerConfig::load(&p)
    };
    assert_eq!(load("").unwrap().layer_store, LayerStoreConfig::Directory);
    assert_eq!(
        load("[layer_store]\nkind = \"directory\"\n")
            .unwrap()
            .layer_store,
        LayerStoreConfig::Directory
    );
    assert_eq!(
        load("[layer_store]\nkind = \"zfs\"\ndataset = \"rpool/rdctl\"\n")
            .unwrap()
            .layer_store,
        LayerStoreConfig::Zfs {
            dataset: "rpool/rdctl".into()
        }
    );
    for (text, field, says) in [
        ("kind = \"zfs\"\n", "layer_store.dataset", "missing"),
        (
            "kind = \"zfs\"\ndataset = \"pool/a b\"\n",
            "layer_store.dataset",
            "only",
        ),
        (
            "kind = \"zfs\"\ndataset = \"-o\"\n",
            "layer_store.dataset",
            "`-`",
        ),
        (
            "kind = \"directory\"\ndataset = \"p/x\"\n",
            "layer_store.dataset",
            "only for",
        ),
        ("kind = \"btrfs\"\n", "layer_store.kind", "\"btrfs\""),
    ] {
        match load(&format!("[layer_store]\n{text}")) {
            Err(e @ ConfigError::Value { field: f, .. }) => {
                assert_eq!(f, field, "{text}");
                assert!(e.to_string().contains(says), "{text}: {e}");
            }
            other => panic!("{text}: {other:?}"),
        }
    }
}

#[test]
fn zone_manifests_good_bad_and_duplicate() {
    let t = tempfile::tempdir().unwrap();
    let w = |n: &str, s: &str| std::fs::write(t.path().join(n), s).unwrap();
    w(
        "a.toml",
        "name = \"web\"\nimage = \"127.0.0.1:5000/app:v1\"\npull_policy = \"Always\"\n[limits]\ncpus = 1.5\nmemory = \"512m\"\n",
    );
    w(
        "b.toml",
        "name = \"db\"\nimage = \"reg.example/db@sha256:0000000000000000000000000000000000000000000000000000000000000000\"\n",
    );
    w(
        "c.toml",
        "name = \"bad zone\"\nimage = \"reg.example/x:1\"\n",
    );
    w("d.toml", "name = \"dup\"\nimage = \"reg.example/x:1\"\n");
    w("e.toml", "name = \"dup\"\nimage = \"reg.example/y:1\"\n");
    w(
        "f.toml",
        "name = \"mem\"\nimage = \"reg.example/x:1\"\n[limits]\nmemory = \"lots\"\n",
    );
    w(
        "h.toml",
        "name = \"disk\"\nimage = \"reg.example/x:1\"\n[limits]\ndisk = \"lots\"\n",
    );
    w("ignored.txt", "not a manifest");
    let (good, bad) = load_zones(t.path()).unwrap();
    let names: Vec<&str> = good.iter().map(|z| z.name.as_str()).collect();
    assert_eq!(names, ["db", "web"]);
    let web = &good[1];
    assert_eq!(web.pull_policy, PullPolicy::Always);
    assert_eq!(web.brand, "nlipkg");
    assert_eq!(web.limits.cpus, Some(1.5));
    assert_eq!(good[0].pull_policy, PullPolicy::IfNotPresent);
    let bad_names: Vec<&str> = bad.iter().map(|b| b.zone.as_str()).collect();
    assert_eq!(bad_names, ["c", "f", "h", "dup"]);
    let disk = bad
        .iter()
        .find(|b| b.zone == "h")
        .unwrap()
        .error
        .to_string();
    assert!(
        disk.contains("limits.disk") && disk.contains("\"lots\" is not a size"),
        "{disk}"
    );
    assert!(bad[3].error.to_string().contains("also defined by"));
    // A reference without a registry host is refused at load, not as a DNS failure later.
    w("g.toml", "name = \"g\"\nimage = \"site/tools:1.0\"\n");
    let e = load_zone(&t.path().join("g.toml")).unwrap_err().to_string();
    assert!(
        e.contains("image: ") && e.contains("\"site\" is not a registry host"),
        "{e}"
    );
}

/// Caps zonecfg would reject (illumos-gate `usr/src/cmd/zonecfg/zonecfg.c`: `ncpus` below
/// 0.01, `physical` below 1M) are refused when the manifest is read, naming the file, the
/// field and the limit, not written into zonecfg's command file to fail there. The limits
/// themselves pass.
#[test]
fn zone_caps_below_zonecfgs_minimums_are_refused_at_load() {
    let t = tempfile::tempdir().unwrap();
    let load = |limits: &str| {
        let p = t.path().join("z.toml");
        std::fs::write(
            &p,
            format!("name = \"z\"\nimage = \"reg.example/x:1\"\n[limits]\n{limits}\n"),
        )
        .unwrap();
        load_zone(&p).map_err(|e| (p.clone(), e.to_string()))
    };
    for (limits, field, limit) in [
        ("cpus = 0.005", "limits.cpus", "0.01"),
        ("cpus = 0.0099", "limits.cpus", "0.01"),
        ("memory = \"512k\"", "limits.memory", "1M"),
        ("memory = \"1048575\"", "limits.memory", "1M"),
    ] {
        let (p, e) = load(limits).unwrap_err();
        assert!(
            e.starts_with(&format!("{}: {field}: ", p.display()))
                && e.contains(&format!("below {limit}"))
                && e.contains("zonecfg"),
            "{limits}: {e}"
        );
    }
    for ok in ["cpus = 0.01", "memory = \"1m\"", "memory = \"1048576\""] {
        assert!(load(ok).is_ok(), "{ok}: {:?}", load(ok));
    }
}

#[test]
fn node_agent_keys_parse_with_kubelet_defaults() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("worker.toml");
    let base = "zones_dir = \"z\"\nstate_dir = \"s\"\n";
    let tail = "[provisioner]\nkind = \"dir\"\nbase = \"b\"\n";
    std::fs::write(&p, format!("{base}{tail}")).unwrap();
    let c = WorkerConfig::load(&p).unwrap();
    assert_eq!(c.max_parallel_pulls, None);
    assert_eq!(c.max_concurrent_downloads, 3);
    assert_eq!(c.registry_pull_qps, 0.0);
    assert_eq!(c.registry_burst, 10);
    assert_eq!(c.image_pull_progress_deadline, Duration::from_secs(60));
    assert_eq!((c.image_gc_high_percent, c.image_gc_low_percent), (85, 80));
    assert_eq!(c.image_minimum_gc_age, Duration::from_secs(120));
    assert_eq!(c.allocatable, crate::capacity::Resources::default());
    assert_eq!(
        c.zone_policy,
        ZonePolicy::default(),
        "no escalation by default"
    );
    assert!(c.client.credential_providers.is_empty());
    std::fs::write(
        &p,
        format!(
            "{base}max_parallel_pulls = 2\nmax_concurrent_downloads = 1\n\
             registry_pull_qps = 5.0\nregistry_burst = 3\n\
             image_credential_provider_bin_dir = \"plugins\"\n{tail}\
             [allocatable]\ncpus = 6.0\nmemory = \"24G\"\nzones = 20\n\
             [[credential_providers]]\nname = \"ecr\"\nmatch_images = [\"*.example\"]\n\
             default_cache_duration_secs = 600\nargs = [\"-v\"]\nenv = {{ A = \"1\" }}\n"
        ),
    )
    .unwrap();
    let c = WorkerConfig::load(&p).unwrap();
    assert_eq!(c.max_parallel_pulls, Some(2));
    assert_eq!(c.max_concurrent_downloads, 1);
    assert_eq!((c.registry_pull_qps, c.registry_burst), (5.0, 3));
    assert_eq!(c.allocatable.memory_bytes, Some(24 << 30));
    assert_eq!(c.allocatable.zones, Some(20));
    let pr = &c.client.credential_providers[0];
    assert_eq!(pr.command, t.path().join("plugins/ecr"));
    assert_eq!(pr.default_cache_duration, Duration::from_secs(600));
    assert_eq!(pr.env, [("A".to_owned(), "1".to_owned())]);
    assert_eq!(pr.args, ["-v"]);
}

#[test]
fn durations_and_sizes_in_one_syntax_and_the_old_keys_still_read() {
    let t = tempfile::tempdir().unwrap();
    let p = t.path().join("worker.toml");
    let load = |text: &str| {
        std::fs::write(
            &p,
            format!("zones_dir = \"z\"\nstate_dir = \"s\"\n{text}[provisioner]\nkind = \"dir\"\nbase = \"b\"\n"),
        )
        .unwrap();
        WorkerConfig::load(&p)
    };
    let providers = "image_credential_provider_bin_dir = \"bin\"\n";
    let provider = "[[credential_providers]]\nname = \"p\"\nmatch_images = [\"r.example\"]\n";
    let new = load(&format!(
        "poll_interval = \"5m\"\nbackoff_initial = \"30s\"\nbackoff_max = \"1h\"\n\
         gc_grace = \"2h\"\nimage_pull_progress_deadline = \"90s\"\n\
         image_minimum_gc_age = \"10m\"\n{providers}\
         [allocatable]\nmemory = \"24GiB\"\n{provider}default_cache_duration = \"10m\"\n"
    ))
    .unwrap();
    let min = |m: u64| Duration::from_secs(60 * m);
    assert_eq!(new.poll_interval, min(5));
    assert_eq!(
        (new.backoff_initial, new.backoff_max),
        (Duration::from_secs(30), min(60))
    );
    assert_eq!(new.gc_grace, min(120));
    assert_eq!(new.image_pull_progress_deadline, Duration::from_secs(90));
    assert_eq!(new.image_minimum_gc_age, min(10));
    assert_eq!(new.allocatable.memory_bytes, Some(24 << 30));
    assert_eq!(
        new.client.credential_providers[0].default_cache_duration,
        min(10)
    );
    // A config that worked before still loads to the same values: the old keys are aliases,
    // integers are seconds, and allocatable.memory keeps zonecfg's suffixes.
    let old = load(&format!(
        "poll_interval_secs = 300\nbackoff_initial_secs = 30\nbackoff_max_secs = 3600\n\
         gc_grace_secs = 7200\nimage_pull_progress_deadline_secs = 90\n\
         image_minimum_gc_age_secs = 600\n{providers}\
         [allocatable]\nmemory = \"24G\"\n{provider}default_cache_duration_secs = 600\n"
    ))
    .unwrap();
    assert_eq!(old, new);
    // Both forms under either name; a size as a whole number of bytes or in decimal units.
    assert_eq!(
        load("poll_interval_secs = \"5m\"\n").unwrap().poll_interval,
        min(5)
    );
    assert_eq!(load("poll_interval = 300\n").unwrap().poll_interval, min(5));
    assert_eq!(
        load("[allocatable]\nmemory = 1073741824\n")
            .unwrap()
            .allocatable
            .memory_bytes,
        Some(1 << 30)
    );
    assert_eq!(
        load("[allocatable]\nmemory = \"2GB\"\n")
            .unwrap()
            .allocatable
            .memory_bytes,
        Some(2_000_000_000)
    );
    // Sub-second durations are kept, not rounded to whole seconds.
    assert_eq!(
        load("poll_interval = \"1500ms\"\n").unwrap().poll_interval,
        Duration::from_millis(1500)
    );
    // Errors name the key (as written) and the value.
    for (text, says) in [
        (
            "gc_grace = \"1 hour\"\n",
            ":3: gc_grace: \"1 hour\" has an unknown unit \"hour\"",
        ),
        (
            "image_minimum_gc_age_secs = \"2 min\"\n",
            ":3: image_minimum_gc_age_secs: \"2 min\" has an unknown unit \"min\"",
        ),
        (
            "backoff_max = \"soon\"\n",
            ":3: backoff_max: \"soon\" does not start with a whole number",
        ),
        (
            "[allocatable]\nmemory = \"24 gigs\"\n",
            "allocatable.memory: \"24 gigs\" is not a size",
        ),
        (
            "poll_interval = \"0s\"\n",
            "poll_interval: \"0\" is too short",
        ),
    ] {
        let e = load(text).unwrap_err().to_string();
        assert!(e.contains(says), "{text}: {e}");
    }
    // One setting written under both names is refused rather than one silently winning.
    let e = load("poll_interval = \"5m\"\npoll_interval_secs = 60\n")
        .unwrap_err()
        .to_string();
    assert!(e.contains("poll_interval"), "{e}");
}
