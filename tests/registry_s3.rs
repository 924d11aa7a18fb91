//! `rdctl registry serve` on the S3 store (a real SeaweedFS from `s3-fixtures`): the official
//! conformance suite against one replica and through a round-robin balancer over two replicas
//! sharing the bucket, and `kill -9` of a replica in the middle of a chunked upload.

use std::path::Path;

use s3_fixtures::{RoundRobin, SeaweedFs};

use crate::registry_e2e::conformance;
use crate::util::{Server, tempdir};

/// One SeaweedFS per test binary (started on first use), a fresh bucket per test.
pub(crate) fn seaweed() -> &'static SeaweedFs {
    SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"))
}

/// `rdctl registry serve` on `bucket`; `data` must exist but stays unused.
pub(crate) fn s3_server(data: &Path, bucket: &str, extra: &[&str]) -> Server {
    let endpoint = seaweed().endpoint();
    let mut args = vec![
        "--s3-endpoint",
        endpoint.as_str(),
        "--s3-bucket",
        bucket,
        "--s3-prefix",
        "reg",
    ];
    args.extend_from_slice(extra);
    Server::start(data, &args)
}

#[test]
fn s3_store_passes_the_oci_conformance_suite() {
    let bucket = seaweed().bucket().unwrap_or_else(|e| panic!("{e}"));
    let data = tempdir();
    let server = s3_server(data.path(), &bucket, &[]);
    conformance(&server.host(), "conformance-results-s3", &|| {
        format!(
            "{}\n--- SeaweedFS ---\n{}",
            server.log_tail(),
            seaweed().log_tail()
        )
    });
    assert!(
        std::fs::read_dir(data.path()).unwrap().next().is_none(),
        "the S3 registry wrote into its data directory"
    );
}

/// Governance configured on every repository with permissive rules, so the conformance run
/// below goes through each feature's code on every request: an immutable tag pattern the
/// suite never moves, a quota far above what it pushes (every manifest PUT and DELETE updates
/// the usage documents from both replicas), pull times flushed every second, and a retention
/// policy that keeps everything, applied with garbage collection every 5 s during the run.
const PERMISSIVE_GOVERNANCE: &str = r#"
[gc]
interval = "5s"

[pulls]
flush_interval = "1s"

[[immutable]]
repositories = ["**"]
tags = ["immutable-*"]

[[quota]]
repositories = ["**"]
max_bytes = 1000000000000
max_manifests = 1000000

[[retention]]
repositories = ["**"]
keep_newest = 1000000
keep_pulled_within = "1d"
"#;

/// Two replicas on one bucket behind a balancer that sends each request to the other replica
/// than the one before: every upload continues on the other process, every read follows a
/// write made by the other one. Both run with [`PERMISSIVE_GOVERNANCE`].
#[test]
fn two_s3_replicas_behind_a_round_robin_pass_the_conformance_suite() {
    let bucket = seaweed().bucket().unwrap_or_else(|e| panic!("{e}"));
    let (da, db) = (tempdir(), tempdir());
    let config = da.path().join("registry.toml");
    std::fs::write(&config, PERMISSIVE_GOVERNANCE).unwrap();
    let config = config.to_str().unwrap().to_owned();
    let a = s3_server(da.path(), &bucket, &["--config", &config]);
    let b = s3_server(db.path(), &bucket, &["--config", &config]);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let lb = rt
        .block_on(RoundRobin::start(vec![a.addr, b.addr]))
        .unwrap_or_else(|e| panic!("{e}"));
    conformance(
        &lb.addr().to_string(),
        "conformance-results-s3-replicas",
        &|| {
            format!(
                "--- replica A ---\n{}\n--- replica B ---\n{}",
                a.log_tail(),
                b.log_tail()
            )
        },
    );
    let [na, nb] = lb.requests()[..] else {
        unreachable!("two backends")
    };
    eprintln!("round robin: {na} requests to replica A, {nb} to replica B");
    assert!(na > 200 && na.abs_diff(nb) <= 1, "{na} vs {nb}");
    // The governance code ran: pushes counted against the quota, retention ran on the
    // schedule and kept everything.
    let metrics = |s: &Server| {
        let (status, _, body) = crate::registry_e2e::http(s.addr, "GET", "/metrics", &[], b"");
        assert_eq!(status, 200);
        String::from_utf8(body).unwrap()
    };
    let (ma, mb) = (metrics(&a), metrics(&b));
    let value = |text: &str, name: &str| -> u64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in\n{text}"))
    };
    for m in [&ma, &mb] {
        assert!(
            m.contains("registry_quota_usage_manifests{repository=\"conformance/repo1\"}"),
            "{m}"
        );
        assert_eq!(value(m, "registry_quota_denied_total"), 0);
        assert_eq!(
            value(m, "registry_retention_removed_total{kind=\"tag\"}"),
            0
        );
    }
    assert!(
        value(&ma, "registry_retention_runs_total") + value(&mb, "registry_retention_runs_total")
            > 0,
        "retention never ran during the suite"
    );
}

/// A SeaweedFS whose S3 gateway knows one identity: unsigned requests and a wrong secret stop
/// the registry at start (its bucket check is refused), and the right key pair works from each source the registry reads: the AWS
/// environment variables, a profile named in the registry config file, `AWS_PROFILE` with
/// `AWS_SHARED_CREDENTIALS_FILE`, the default profile under `$HOME/.aws`, and keys in the
/// registry config file.
#[test]
fn s3_credentials_from_env_profiles_and_the_config_file() {
    use crate::registry_e2e::http;

    const AK: &str = "AKREGISTRYTEST";
    const SK: &str = "registry-secret-key";
    let sw = SeaweedFs::start_with_identity(AK, SK).unwrap_or_else(|e| panic!("{e}"));
    let bucket = sw.bucket().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempdir();
    let home = dir.path().join("home");
    std::fs::create_dir_all(home.join(".aws")).unwrap();
    let home_s = home.to_str().unwrap().to_owned();
    let creds = dir.path().join("credentials");
    std::fs::write(
        &creds,
        format!(
            "[registry]\naws_access_key_id = {AK}\naws_secret_access_key = {SK}\n\n[wrong]\naws_access_key_id = {AK}\naws_secret_access_key = not-the-secret\n"
        ),
    )
    .unwrap();
    let creds_s = creds.to_str().unwrap().to_owned();
    let endpoint = sw.endpoint();

    // A push of a small blob in one POST; true when the registry stored it.
    let push = |server: &Server, n: u32| -> bool {
        let blob = format!("credentials test blob {n}");
        let d = validator::Digest::sha256(blob.as_bytes());
        let (st, _, _) = http(
            server.addr,
            "POST",
            &format!("/v2/creds/repo/blobs/uploads/?digest={d}"),
            &[("Content-Type", "application/octet-stream")],
            blob.as_bytes(),
        );
        if st != 201 {
            return false;
        }
        let (st, _, body) = http(
            server.addr,
            "GET",
            &format!("/v2/creds/repo/blobs/{d}"),
            &[],
            b"",
        );
        assert_eq!((st, body.as_slice()), (200, blob.as_bytes()));
        true
    };
    let serve = |file: &str, env: &[(&str, &str)]| -> Server {
        let data = dir.path().join("unused");
        let config = dir
            .path()
            .join(format!("registry-{}.toml", env.len() + file.len()));
        std::fs::write(
            &config,
            format!("s3_endpoint = \"{endpoint}\"\ns3_bucket = \"{bucket}\"\n{file}"),
        )
        .unwrap();
        let mut env = env.to_vec();
        env.push(("HOME", home_s.as_str()));
        Server::start_with_aws_env(&data, &["--config", config.to_str().unwrap()], &env)
    };

    // Keys SeaweedFS refuses stop the registry at start (its HeadBucket of the bucket is
    // answered 403), naming the bucket, instead of failing every write later.
    let refused = |what: &str, file: &str, env: &[(&str, &str)]| {
        let config = dir.path().join(format!("refused-{}.toml", what.len()));
        std::fs::write(
            &config,
            format!("s3_endpoint = \"{endpoint}\"\ns3_bucket = \"{bucket}\"\n{file}"),
        )
        .unwrap();
        let mut cmd = crate::util::rdctl();
        for (k, _) in std::env::vars() {
            if k.starts_with("AWS_") {
                cmd.env_remove(k);
            }
        }
        let mut child = cmd
            .args(["registry", "serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(dir.path().join("unused"))
            .args(["--config", config.to_str().unwrap()])
            .envs(env.iter().copied())
            .env("HOME", &home_s)
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let status = loop {
            if let Some(st) = child.try_wait().unwrap() {
                break st;
            }
            if std::time::Instant::now() > deadline {
                child.kill().unwrap();
                panic!("{what}: the registry started with credentials SeaweedFS refuses");
            }
            std::thread::sleep(std::time::Duration::from_millis(50));
        };
        let mut err = String::new();
        std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
        assert!(!status.success(), "{what}: {err}");
        assert!(
            err.contains(&format!("bucket {bucket:?}")) && err.contains("access denied"),
            "{what}: {err}"
        );
    };
    refused("unsigned", "", &[]);
    refused(
        "a wrong secret",
        "",
        &[
            ("AWS_ACCESS_KEY_ID", AK),
            ("AWS_SECRET_ACCESS_KEY", "wrong"),
        ],
    );
    refused(
        "the wrong profile",
        &format!("s3_profile = \"wrong\"\ns3_credentials_file = \"{creds_s}\"\n"),
        &[],
    );

    type Case<'a> = (&'a str, String, Vec<(&'a str, &'a str)>);
    let cases: Vec<Case> = vec![
        (
            "environment",
            String::new(),
            vec![("AWS_ACCESS_KEY_ID", AK), ("AWS_SECRET_ACCESS_KEY", SK)],
        ),
        (
            "profile in the config file",
            format!("s3_profile = \"registry\"\ns3_credentials_file = \"{creds_s}\"\n"),
            // The configured profile wins over wrong keys in the environment.
            vec![
                ("AWS_ACCESS_KEY_ID", AK),
                ("AWS_SECRET_ACCESS_KEY", "wrong"),
            ],
        ),
        (
            "AWS_PROFILE",
            String::new(),
            vec![
                ("AWS_PROFILE", "registry"),
                ("AWS_SHARED_CREDENTIALS_FILE", creds_s.as_str()),
            ],
        ),
        (
            "keys in the config file",
            format!("s3_access_key_id = \"{AK}\"\ns3_secret_access_key = \"{SK}\"\n"),
            vec![],
        ),
    ];
    for (i, (what, file, env)) in cases.iter().enumerate() {
        let server = serve(file, env);
        assert!(
            push(&server, 10 + i as u32),
            "{what}: push refused\n{}",
            server.log_tail()
        );
    }
    // The default profile in ~/.aws/credentials.
    std::fs::write(
        home.join(".aws/credentials"),
        format!("[default]\naws_access_key_id = {AK}\naws_secret_access_key = {SK}\n"),
    )
    .unwrap();
    let server = serve("", &[]);
    assert!(
        push(&server, 20),
        "default profile: push refused\n{}",
        server.log_tail()
    );
    // A profile that does not exist stops the server with a message naming it.
    let out = crate::util::rdctl()
        .args(["registry", "serve", "--listen", "127.0.0.1:0"])
        .args(["--s3-endpoint", &endpoint, "--s3-bucket", &bucket])
        .env("AWS_PROFILE", "nonesuch")
        .env("AWS_SHARED_CREDENTIALS_FILE", &creds_s)
        .env_remove("AWS_ACCESS_KEY_ID")
        .env_remove("AWS_SECRET_ACCESS_KEY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("\"nonesuch\""),
        "{}: {err}",
        out.status
    );
}

/// Two replicas on one bucket; replica A is killed with SIGKILL while a chunk is half sent to
/// it. The client continues the same upload on replica B: B reports the durable range (the
/// half-sent chunk does not count), refuses the upload with 416 while A's claim on the staging
/// area can still be live (`CLAIM_SECS`, 30 s: B cannot tell a dead replica from a slow one),
/// then takes it, and the blob B publishes verifies.
#[test]
fn kill_9_of_a_replica_mid_upload_continues_on_the_other() {
    use std::io::Write;
    use std::net::TcpStream;
    use std::time::{Duration, Instant};

    use crate::registry_e2e::{header, http};

    let bucket = seaweed().bucket().unwrap_or_else(|e| panic!("{e}"));
    let (da, db) = (tempdir(), tempdir());
    let mut a = s3_server(da.path(), &bucket, &[]);
    let b = s3_server(db.path(), &bucket, &[]);
    let mib = 1usize << 20;
    let blob: Vec<u8> = (0..(13 * mib) as u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let digest = validator::Digest::sha256(&blob);
    let cut = 6 * mib;

    let (st, h, _) = http(a.addr, "POST", "/v2/kill/repo/blobs/uploads/", &[], b"");
    assert_eq!(st, 202);
    let loc = header(&h, "location").to_owned();
    let range = format!("0-{}", cut - 1);
    let (st, h, body) = http(
        a.addr,
        "PATCH",
        &loc,
        &[
            ("Content-Range", &range),
            ("Content-Type", "application/octet-stream"),
        ],
        &blob[..cut],
    );
    assert_eq!(st, 202, "{}", String::from_utf8_lossy(&body));
    assert_eq!(header(&h, "range"), range);

    // The next chunk is half sent when replica A dies.
    let mut c = TcpStream::connect(a.addr).unwrap();
    let head = format!(
        "PATCH {loc} HTTP/1.1\r\nHost: x\r\nContent-Range: {cut}-{}\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
        2 * cut - 1,
        cut
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(&blob[cut..cut + cut / 2]).unwrap();
    c.flush().unwrap();
    std::thread::sleep(Duration::from_millis(500));
    a.signal("-KILL");
    assert!(
        a.wait(Duration::from_secs(10)).is_some(),
        "kill -9 did not stop replica A"
    );
    drop(c);

    let (st, h, _) = http(b.addr, "GET", &loc, &[], b"");
    assert_eq!(st, 204, "replica B does not know the upload");
    assert_eq!(
        header(&h, "range"),
        range,
        "the half-sent chunk must not count"
    );

    // A client's retry loop: PATCH the rest on B until the dead replica's claim runs out.
    let started = Instant::now();
    let rest = format!("{cut}-{}", blob.len() - 1);
    let mut refused = 0;
    loop {
        let (st, h, body) = http(
            b.addr,
            "PATCH",
            &loc,
            &[
                ("Content-Range", &rest),
                ("Content-Type", "application/octet-stream"),
            ],
            &blob[cut..],
        );
        if st == 202 {
            assert_eq!(header(&h, "range"), format!("0-{}", blob.len() - 1));
            break;
        }
        assert_eq!(st, 416, "{}", String::from_utf8_lossy(&body));
        assert_eq!(
            header(&h, "range"),
            range,
            "a refused PATCH moved the upload"
        );
        refused += 1;
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "replica B still refuses the upload after {:?}: {}\n{}",
            started.elapsed(),
            String::from_utf8_lossy(&body),
            b.log_tail()
        );
        std::thread::sleep(Duration::from_secs(1));
    }
    eprintln!(
        "kill -9: replica B took the upload over after {:?} ({refused} refusals while A's claim held)",
        started.elapsed()
    );
    let (st, h, body) = http(b.addr, "PUT", &format!("{loc}?digest={digest}"), &[], b"");
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));
    assert_eq!(header(&h, "docker-content-digest"), digest.as_str());
    let (st, _, body) = http(
        b.addr,
        "GET",
        &format!("/v2/kill/repo/blobs/{digest}"),
        &[],
        b"",
    );
    assert_eq!(st, 200);
    assert_eq!(body.len(), blob.len());
    assert_eq!(
        validator::Digest::sha256(&body),
        digest,
        "the blob finished on replica B does not verify"
    );
}
