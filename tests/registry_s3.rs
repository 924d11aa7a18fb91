//! `rdctl registry serve` on the S3 store (a real SeaweedFS from `s3-fixtures`): the official
//! conformance suite against one replica and through a round-robin balancer over two replicas
//! sharing the bucket, and `kill -9` of a replica in the middle of a chunked upload.

use std::path::Path;

use s3_fixtures::{RoundRobin, SeaweedFs};

use crate::registry_e2e::conformance;
use crate::util::{Server, tempdir};

/// One SeaweedFS per test binary (started on first use), a fresh bucket per test.
fn seaweed() -> &'static SeaweedFs {
    SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"))
}

/// `rdctl registry serve` on `bucket`; `data` must exist but stays unused.
fn s3_server(data: &Path, bucket: &str, extra: &[&str]) -> Server {
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

/// Two replicas on one bucket behind a balancer that sends each request to the other replica
/// than the one before: every upload continues on the other process, every read follows a
/// write made by the other one.
#[test]
fn two_s3_replicas_behind_a_round_robin_pass_the_conformance_suite() {
    let bucket = seaweed().bucket().unwrap_or_else(|e| panic!("{e}"));
    let (da, db) = (tempdir(), tempdir());
    let a = s3_server(da.path(), &bucket, &[]);
    let b = s3_server(db.path(), &bucket, &[]);
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
}
