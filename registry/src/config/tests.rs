//! The registry configuration's loader, from files and the environment.

use std::path::PathBuf;
use std::time::Duration;

use super::*;
#[cfg(feature = "s3")]
use crate::storage::S3Config;

#[test]
fn s3_limits_from_file_and_environment() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("registry.toml");
    std::fs::write(
        &p,
        "s3_connect_timeout_secs = 2\ns3_attempt_timeout_secs = 20\ns3_max_attempts = 6\n",
    )
    .unwrap();
    let env = |k: &str| (k == "RDCTL_REGISTRY_S3_OPERATION_TIMEOUT_SECS").then(|| "90".into());
    let c = ServeConfig::load_with_env(Some(&p), &env).unwrap();
    assert_eq!(
        c.s3_limits,
        S3Limits {
            connect_timeout: Some(Duration::from_secs(2)),
            attempt_timeout: Some(Duration::from_secs(20)),
            operation_timeout: Some(Duration::from_secs(90)),
            max_attempts: Some(6),
        }
    );
    let bad = |k: &str| (k == "RDCTL_REGISTRY_S3_MAX_ATTEMPTS").then(|| "many".into());
    let e = ServeConfig::load_with_env(None, &bad).unwrap_err();
    assert!(
        e.to_string().contains("RDCTL_REGISTRY_S3_MAX_ATTEMPTS"),
        "{e}"
    );
}

#[cfg(feature = "s3")]
#[test]
fn s3_limits_reach_the_store_settings_or_are_refused() {
    let mut c = S3Config::new("http://127.0.0.1:1", "b");
    let limits = S3Limits {
        connect_timeout: Some(Duration::from_secs(2)),
        attempt_timeout: Some(Duration::from_secs(20)),
        operation_timeout: None,
        max_attempts: Some(1),
    };
    limits.apply(&mut c).unwrap();
    assert_eq!(c.connect_timeout, Duration::from_secs(2));
    assert_eq!(c.attempt_timeout, Duration::from_secs(20));
    assert_eq!(c.operation_timeout, Duration::from_secs(180));
    assert_eq!(c.max_attempts, 1);
    for (limits, key) in [
        (
            S3Limits {
                attempt_timeout: Some(Duration::ZERO),
                ..S3Limits::default()
            },
            "s3_attempt_timeout is \"0\"; it must be longer than 0",
        ),
        (
            S3Limits {
                attempt_timeout: Some(Duration::from_secs(300)),
                ..S3Limits::default()
            },
            "s3_attempt_timeout (\"5m\") is longer than s3_operation_timeout (\"3m\")",
        ),
        (
            S3Limits {
                max_attempts: Some(0),
                ..S3Limits::default()
            },
            "s3_max_attempts is 0",
        ),
    ] {
        let e = limits
            .apply(&mut S3Config::new("http://127.0.0.1:1", "b"))
            .unwrap_err();
        assert!(e.contains(key), "{e}");
    }
    // Through the server's configuration, the refusal names the store.
    let serve = ServeConfig {
        s3_endpoint: Some("http://127.0.0.1:1".into()),
        s3_bucket: Some("b".into()),
        s3_limits: S3Limits {
            max_attempts: Some(11),
            ..S3Limits::default()
        },
        ..ServeConfig::default()
    };
    let e = serve.s3_store().expect_err("refused").to_string();
    assert!(e.starts_with("S3 store: s3_max_attempts is 11"), "{e}");
}

#[cfg(feature = "s3")]
#[test]
fn s3_redirect_keys_from_the_file_and_the_environment() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("registry.toml");
    std::fs::write(
        &p,
        "s3_endpoint = \"http://127.0.0.1:9\"\ns3_bucket = \"b\"\ns3_redirect = true\n",
    )
    .unwrap();
    let c = ServeConfig::load_with_env(Some(&p), &|_| None).unwrap();
    assert!(c.s3_redirect);
    assert_eq!(c.s3_redirect_expiry, DEFAULT_REDIRECT_EXPIRY);
    let s3 = c.s3_store().unwrap();
    let r = c.blob_redirect(s3.as_ref()).unwrap().expect("on");
    assert_eq!(r.expiry(), DEFAULT_REDIRECT_EXPIRY);
    let env = |k: &str| match k {
        "RDCTL_REGISTRY_S3_REDIRECT_EXPIRY_SECS" => Some("900".to_owned()),
        "RDCTL_REGISTRY_S3_REDIRECT" => Some("false".to_owned()),
        _ => None,
    };
    let c = ServeConfig::load_with_env(Some(&p), &env).unwrap();
    assert!(!c.s3_redirect);
    assert_eq!(c.s3_redirect_expiry, Duration::from_secs(900));
    assert!(c.blob_redirect(None).unwrap().is_none());
    // On without the S3 store, or with an expiry no presigned URL can have: refused.
    let fs = ServeConfig {
        s3_redirect: true,
        ..ServeConfig::default()
    };
    let e = fs.blob_redirect(None).unwrap_err().to_string();
    assert!(
        e.contains("s3_redirect is on but the registry uses the filesystem store"),
        "{e}"
    );
    let week = ServeConfig {
        s3_redirect: true,
        s3_redirect_expiry: Duration::from_secs(8 * 24 * 3600),
        ..c
    };
    let e = week.blob_redirect(s3.as_ref()).unwrap_err().to_string();
    assert!(e.contains("s3_redirect_expiry_secs is 691200 s"), "{e}");
}

#[test]
fn proxy_rules_are_checked() {
    let dir = tempfile::tempdir().unwrap();
    let load = |text: &str| {
        let p = dir.path().join("registry.toml");
        std::fs::write(&p, text).unwrap();
        ServeConfig::load_with_env(Some(&p), &|_| None)
    };
    let c = load(
        "[[proxy]]\nprefix = \"central/\"\nupstreams = [\"http://127.0.0.1:5000/zones\", \"https://b.example\"]\n",
    )
    .unwrap();
    assert_eq!(c.proxy.len(), 1);
    assert_eq!(c.proxy[0].prefix, "central");
    assert_eq!(c.proxy[0].upstreams.len(), 2);
    assert_eq!(c.proxy[0].tag_ttl, Duration::from_secs(300));
    for (text, key) in [
        (
            "[[proxy]]\nupstreams = [\"http://a.example\"]\n",
            "proxy.prefix",
        ),
        ("[[proxy]]\nprefix = \"c\"\n", "proxy.upstreams"),
        (
            "[[proxy]]\nprefix = \"c\"\nupstreams = [\"a.example\"]\n",
            "proxy.upstreams",
        ),
        (
            "[[proxy]]\nprefix = \"c\"\nupstreams = [\"http://a.example\"]\n[[proxy]]\nprefix = \"c/d\"\nupstreams = [\"http://b.example\"]\n",
            "proxy.prefix",
        ),
        (
            "[[proxy]]\nprefix = \"c\"\nupstreams = [\"http://a.example\"]\nonly_signed = \"/nonexistent/policy.toml\"\n",
            "proxy.only_signed",
        ),
    ] {
        let e = load(text).unwrap_err();
        assert!(
            matches!(&e, ConfigError::Setting { key: k, .. } if *k == key),
            "{text}: {e:?}"
        );
    }
}

#[test]
fn config_layers_file_then_env() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.toml");
    std::fs::write(
        &file,
        "listen = \"127.0.0.1:6000\"\ndata = \"/srv/r\"\ndelete_enabled = false\n",
    )
    .unwrap();
    let none = |_: &str| None;
    let c = ServeConfig::load_with_env(Some(&file), &none).unwrap();
    assert_eq!(c.listen.port(), 6000);
    assert_eq!(c.data, PathBuf::from("/srv/r"));
    assert!(!c.delete_enabled);
    let env = |k: &str| (k == "RDCTL_REGISTRY_LISTEN").then(|| "0.0.0.0:7000".to_owned());
    let c = ServeConfig::load_with_env(Some(&file), &env).unwrap();
    assert_eq!(c.listen.port(), 7000);
    assert_eq!(
        ServeConfig::load_with_env(None, &none).unwrap(),
        ServeConfig::default()
    );

    std::fs::write(
        &file,
        "[gc]\ninterval = \"6h\"\ngrace = \"2h\"\ndelete_untagged = true\n",
    )
    .unwrap();
    let c = ServeConfig::load_with_env(Some(&file), &none).unwrap();
    assert_eq!(c.gc.interval, Some(Duration::from_secs(6 * 3600)));
    assert_eq!(c.gc.options.grace, Duration::from_secs(2 * 3600));
    assert!(c.gc.options.delete_untagged && c.gc.options.keep_referrers);
    for bad in [
        "[gc]\ngrace = \"1s\"\n",
        "[gc]\ninterval = \"0\"\n",
        "[gc]\nlease_ttl = \"1s\"\n",
    ] {
        std::fs::write(&file, bad).unwrap();
        let e = ServeConfig::load_with_env(Some(&file), &none).unwrap_err();
        assert!(
            matches!(e, ConfigError::Setting { line: Some(2), .. }),
            "{bad}: {e}"
        );
    }
    // A value that is not a duration at all is refused while the file is read, naming the
    // line, the key and the value.
    std::fs::write(&file, "[gc]\ninterval = \"soon\"\n").unwrap();
    match ServeConfig::load_with_env(Some(&file), &none).unwrap_err() {
        ConfigError::ParseConfig { source, .. } => {
            assert_eq!(
                (source.line, source.key.as_deref()),
                (Some(2), Some("gc.interval"))
            );
            assert!(
                source
                    .message
                    .starts_with("\"soon\" does not start with a whole number")
            );
        }
        e => panic!("{e:?}"),
    }

    std::fs::write(
        &file,
        "[tls]\ncert = \"/etc/r/c.pem\"\nkey = \"/etc/r/k.pem\"\n[rate_limit]\nrequests_per_second = 20\n",
    )
    .unwrap();
    let c = ServeConfig::load_with_env(Some(&file), &none).unwrap();
    let tls = c.tls.expect("[tls]");
    assert_eq!(
        (tls.cert, tls.key, tls.client_ca),
        ("/etc/r/c.pem".into(), "/etc/r/k.pem".into(), None)
    );
    let limit = c.rate_limit.expect("[rate_limit]");
    assert_eq!(
        (limit.requests_per_second.get(), limit.burst.get()),
        (20, 20)
    );
    for (bad, key) in [
        ("[tls]\ncert = \"c.pem\"\n", "tls.key"),
        ("[tls]\nkey = \"k.pem\"\n", "tls.cert"),
        (
            "[rate_limit]\nburst = 5\n",
            "rate_limit.requests_per_second",
        ),
        (
            "[rate_limit]\nrequests_per_second = 0\n",
            "rate_limit.requests_per_second",
        ),
        (
            "[rate_limit]\nrequests_per_second = 1\nburst = 0\n",
            "rate_limit.burst",
        ),
    ] {
        std::fs::write(&file, bad).unwrap();
        let e = ServeConfig::load_with_env(Some(&file), &none).unwrap_err();
        assert!(
            matches!(e, ConfigError::Setting { key: k, .. } if k == key),
            "{bad}: {e}"
        );
    }

    std::fs::write(&file, "bogus = 1\n").unwrap();
    assert!(matches!(
        ServeConfig::load_with_env(Some(&file), &none),
        Err(ConfigError::ParseConfig { .. })
    ));
    let bad = |k: &str| (k == "RDCTL_REGISTRY_DELETE_ENABLED").then(|| "maybe".to_owned());
    assert!(matches!(
        ServeConfig::load_with_env(None, &bad),
        Err(ConfigError::Env { .. })
    ));
}

/// Issue 37: every duration and size key takes the string form under its new name; the old
/// `_secs`/`_bytes` names and the bare integers of seconds or bytes still read, to the same
/// configuration.
#[test]
fn durations_and_sizes_are_written_one_way_and_old_files_still_load() {
    let dir = tempfile::tempdir().unwrap();
    let load = |text: &str| {
        let p = dir.path().join("registry.toml");
        std::fs::write(&p, text).unwrap();
        ServeConfig::load_with_env(Some(&p), &|_| None)
    };
    let new = load(
        r#"
max_manifest_size = "8MiB"
shutdown_timeout = "1m"
upload_max_age = "12h"
header_read_timeout = "10s"
write_stall_timeout = "2m"
body_idle_timeout = "45s"
s3_connect_timeout = "2s"
s3_attempt_timeout = "20s"
s3_operation_timeout = "90s"
s3_redirect_expiry = "10m"
[scrub]
interval = "1d"
rate = "50MiB"
[pulls]
flush_interval = "30s"
[gc]
interval = "6h"
grace = "2h"
lease_ttl = "30s"
[[proxy]]
prefix = "central"
upstreams = ["http://127.0.0.1:9/zones"]
tag_ttl = "10m"
[[quota]]
repositories = ["team/**"]
max_size = "10GiB"
[[retention]]
repositories = ["team/**"]
older_than = "30d"
[auth]
cache = "2m"
"#,
    )
    .unwrap();
    let old = load(
        r#"
max_manifest_bytes = 8388608
shutdown_timeout_secs = 60
upload_max_age_secs = 43200
header_read_timeout_secs = 10
write_stall_timeout_secs = 120
body_idle_timeout_secs = 45
s3_connect_timeout_secs = 2
s3_attempt_timeout_secs = 20
s3_operation_timeout_secs = 90
s3_redirect_expiry_secs = 600
[scrub]
interval = 86400
rate = 52428800
[pulls]
flush_interval = 30
[gc]
interval = 21600
grace = 7200
lease_ttl = 30
[[proxy]]
prefix = "central"
upstreams = ["http://127.0.0.1:9/zones"]
tag_ttl_secs = 600
[[quota]]
repositories = ["team/**"]
max_bytes = 10737418240
[[retention]]
repositories = ["team/**"]
older_than = 2592000
[auth]
cache_secs = 120
"#,
    )
    .unwrap();
    assert_eq!(new, old);
    assert_eq!(new.max_manifest_bytes, 8 << 20);
    assert_eq!(new.shutdown_timeout, Duration::from_secs(60));
    assert_eq!(new.conn_limits.write_stall, Duration::from_secs(120));
    assert_eq!(
        new.s3_limits.operation_timeout,
        Some(Duration::from_secs(90))
    );
    assert_eq!(new.s3_redirect_expiry, Duration::from_secs(600));
    assert_eq!(new.scrub.options.rate, Some(50 << 20));
    assert_eq!(new.scrub.interval, Some(Duration::from_secs(86400)));
    assert_eq!(new.gc.options.grace, Duration::from_secs(7200));
    assert_eq!(new.proxy[0].tag_ttl, Duration::from_secs(600));
    assert_eq!(new.governance.quota[0].max_bytes, Some(10 << 30));
    assert_eq!(
        new.governance.retention[0].older_than,
        Some(Duration::from_secs(30 * 86400))
    );
    // The new name and the old one together: refused, naming the key and line.
    let e = load("shutdown_timeout = \"1m\"\nshutdown_timeout_secs = 60\n").unwrap_err();
    let ConfigError::ParseConfig { source, .. } = &e else {
        panic!("{e:?}")
    };
    assert_eq!(source.key.as_deref(), Some("shutdown_timeout"), "{source}");
    assert!(source.message.starts_with("given twice"), "{source}");
}

/// Issue 37: a bad duration or size names the file, the line, the key and the value.
#[test]
fn a_bad_duration_or_size_names_the_file_line_key_and_value() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("registry.toml");
    let load = |text: &str| {
        std::fs::write(&p, text).unwrap();
        validator::error_chain(&ServeConfig::load_with_env(Some(&p), &|_| None).unwrap_err())
    };
    let path = p.display().to_string();
    assert_eq!(
        load("listen = \"127.0.0.1:5000\"\nshutdown_timeout = \"30 sec\"\n"),
        format!(
            "invalid config file {path}: line 2: shutdown_timeout: \"30 sec\" has an unknown unit \"sec\"; use ms, s, m, h or d (like \"90s\", \"15m\")"
        )
    );
    assert_eq!(
        load("max_manifest_size = \"4mb\"\n"),
        format!(
            "invalid config file {path}: line 1: max_manifest_size: \"4mb\" has an unknown unit \"mb\"; use B, KiB, MiB, GiB, TiB (powers of 1024) or KB, MB, GB, TB (powers of 1000)"
        )
    );
    assert_eq!(
        load("[scrub]\nreport = \"r.json\"\nrate = 0\n"),
        format!(
            "invalid scrub.rate in {path} line 3: \"0\" is too slow: at least 1 byte per second (leave it out for no limit)"
        )
    );
    assert_eq!(
        load("\n[gc]\ngrace = \"1s\"\n"),
        format!(
            "invalid gc.grace in {path} line 3: \"1s\" is shorter than {}, the least that keeps concurrent pushes safe",
            config_toml::format_duration(crate::gc::MIN_SAFE_GRACE)
        )
    );
    assert_eq!(
        load(
            "[[sync]]\nname = \"a\"\nfrom = \"a.example\"\ninterval = \"1s\"\n[[sync]]\nname = \"b\"\nfrom = \"b.example\"\ninterval = \"500ms\"\n"
        ),
        format!(
            "invalid sync.interval in {path} line 8: [[sync]] \"b\": \"500ms\" is shorter than 1s"
        )
    );
}

/// Issue 37: the environment takes the same forms; the `_SECS` and `_BYTES` names still read.
#[test]
fn environment_durations_and_sizes_take_the_same_forms() {
    let env = |k: &str| match k {
        "RDCTL_REGISTRY_SHUTDOWN_TIMEOUT" => Some("2m".to_owned()),
        "RDCTL_REGISTRY_SHUTDOWN_TIMEOUT_SECS" => Some("5".to_owned()),
        "RDCTL_REGISTRY_UPLOAD_MAX_AGE_SECS" => Some("600".to_owned()),
        "RDCTL_REGISTRY_MAX_MANIFEST_SIZE" => Some("1MiB".to_owned()),
        "RDCTL_REGISTRY_BODY_IDLE_TIMEOUT" => Some("0".to_owned()),
        "RDCTL_REGISTRY_S3_ATTEMPT_TIMEOUT" => Some("15s".to_owned()),
        _ => None,
    };
    let c = ServeConfig::load_with_env(None, &env).unwrap();
    assert_eq!(
        c.shutdown_timeout,
        Duration::from_secs(120),
        "the new name wins"
    );
    assert_eq!(c.upload_max_age, Duration::from_secs(600));
    assert_eq!(c.max_manifest_bytes, 1 << 20);
    assert_eq!(c.conn_limits.body_idle, Duration::from_secs(1));
    assert_eq!(c.s3_limits.attempt_timeout, Some(Duration::from_secs(15)));
    let old = |k: &str| (k == "RDCTL_REGISTRY_MAX_MANIFEST_BYTES").then(|| "2048".to_owned());
    assert_eq!(
        ServeConfig::load_with_env(None, &old)
            .unwrap()
            .max_manifest_bytes,
        2048
    );
    let bad = |k: &str| (k == "RDCTL_REGISTRY_UPLOAD_MAX_AGE").then(|| "1 week".to_owned());
    assert_eq!(
        ServeConfig::load_with_env(None, &bad)
            .unwrap_err()
            .to_string(),
        "environment variable RDCTL_REGISTRY_UPLOAD_MAX_AGE has a bad value \"1 week\": has an unknown unit \"week\"; use ms, s, m, h or d (like \"90s\", \"15m\")"
    );
}

/// `sendfile` is on by default, off from the file, and the environment wins over the file.
#[test]
fn sendfile_is_on_by_default_and_can_be_turned_off() {
    let none = |_: &str| None;
    assert!(
        ServeConfig::load_with_env(None, &none)
            .unwrap()
            .conn_limits
            .sendfile
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.toml");
    std::fs::write(&file, "sendfile = false\n").unwrap();
    let c = ServeConfig::load_with_env(Some(&file), &none).unwrap();
    assert!(!c.conn_limits.sendfile);
    let env = |k: &str| (k == "RDCTL_REGISTRY_SENDFILE").then(|| "true".to_owned());
    assert!(
        ServeConfig::load_with_env(Some(&file), &env)
            .unwrap()
            .conn_limits
            .sendfile
    );
    let bad = |k: &str| (k == "RDCTL_REGISTRY_SENDFILE").then(|| "maybe".to_owned());
    let err = ServeConfig::load_with_env(None, &bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("RDCTL_REGISTRY_SENDFILE"), "{err}");
}

/// `sendfile_min_size` has its default, is read from the file as a size, and the environment
/// wins over the file.
#[test]
fn sendfile_min_size_is_a_size_from_the_file_or_the_environment() {
    let none = |_: &str| None;
    let min = |c: ServeConfig| c.conn_limits.sendfile_min_size;
    assert_eq!(
        min(ServeConfig::load_with_env(None, &none).unwrap()),
        crate::conn::DEFAULT_SENDFILE_MIN_SIZE
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("r.toml");
    std::fs::write(&file, "sendfile_min_size = \"256KiB\"\n").unwrap();
    assert_eq!(
        min(ServeConfig::load_with_env(Some(&file), &none).unwrap()),
        256 << 10
    );
    let env = |k: &str| (k == "RDCTL_REGISTRY_SENDFILE_MIN_SIZE").then(|| "0".to_owned());
    assert_eq!(
        min(ServeConfig::load_with_env(Some(&file), &env).unwrap()),
        0
    );
    let bad = |k: &str| (k == "RDCTL_REGISTRY_SENDFILE_MIN_SIZE").then(|| "big".to_owned());
    let err = ServeConfig::load_with_env(None, &bad)
        .unwrap_err()
        .to_string();
    assert!(err.contains("RDCTL_REGISTRY_SENDFILE_MIN_SIZE"), "{err}");
}
