//! The fault proxy in front of a real SeaweedFS: every fault kind, and the per-operation counts.

use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::Request;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use s3_fixtures::{Fault, FaultProxy, Rule, S3Op, SeaweedFs};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// One request on a fresh connection (so a dropped connection affects only this request).
async fn send(url: &str, method: &str, body: &'static [u8]) -> Result<(u16, Bytes), BoxError> {
    let client = Client::builder(TokioExecutor::new())
        .pool_max_idle_per_host(0)
        .build_http::<Full<Bytes>>();
    let req = Request::builder()
        .method(method)
        .uri(url)
        .body(Full::new(Bytes::from_static(body)))?;
    let resp = client.request(req).await?;
    let status = resp.status().as_u16();
    let body = resp.into_body().collect().await?.to_bytes();
    Ok((status, body))
}

struct Setup {
    _seaweed: SeaweedFs,
    proxy: FaultProxy,
    object: String,
}

async fn setup() -> Setup {
    let seaweed = SeaweedFs::start().unwrap_or_else(|e| panic!("{e}"));
    let bucket = seaweed.bucket().unwrap_or_else(|e| panic!("{e}"));
    let proxy = FaultProxy::start(seaweed.s3_addr()).await.unwrap();
    let object = format!("{}/{bucket}/some/object", proxy.endpoint());
    Setup {
        _seaweed: seaweed,
        proxy,
        object,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn faults_hit_chosen_requests_and_operations_are_counted() {
    let Setup { proxy, object, .. } = &setup().await;
    const BODY: &[u8] = b"0123456789abcdef0123456789abcdef";

    // A 503 before SeaweedFS sees the request: nothing is stored.
    proxy.inject(Rule::new(Fault::Status(503)).on(S3Op::PutObject).times(1));
    let (code, body) = send(object, "PUT", BODY).await.unwrap();
    assert_eq!(code, 503);
    assert!(String::from_utf8_lossy(&body).contains("SlowDown"));
    assert_eq!(send(object, "GET", b"").await.unwrap().0, 404);
    assert_eq!(send(object, "PUT", BODY).await.unwrap().0, 200);

    // A 500 after SeaweedFS applied the request: the client is told it failed, yet it happened.
    proxy.inject(
        Rule::new(Fault::StatusAfter(500))
            .on(S3Op::DeleteObject)
            .times(1),
    );
    assert_eq!(send(object, "DELETE", b"").await.unwrap().0, 500);
    assert_eq!(send(object, "GET", b"").await.unwrap().0, 404);
    assert_eq!(send(object, "PUT", BODY).await.unwrap().0, 200);

    // A truncated body: the head promises 32 bytes, 16 arrive, then the connection closes.
    proxy.inject(Rule::new(Fault::Truncate).on(S3Op::GetObject).times(1));
    assert!(
        send(object, "GET", b"").await.is_err(),
        "a cut body must fail"
    );
    let (code, body) = send(object, "GET", b"").await.unwrap();
    assert_eq!((code, &body[..]), (200, BODY));

    // A dropped connection: no answer at all.
    proxy.inject(Rule::new(Fault::Drop).on(S3Op::HeadObject).times(1));
    assert!(send(object, "HEAD", b"").await.is_err());
    assert_eq!(send(object, "HEAD", b"").await.unwrap().0, 200);

    // A delay.
    proxy.inject(
        Rule::new(Fault::Delay(Duration::from_millis(400)))
            .on(S3Op::GetObject)
            .times(1),
    );
    let t = Instant::now();
    assert_eq!(send(object, "GET", b"").await.unwrap().0, 200);
    assert!(t.elapsed() >= Duration::from_millis(400));

    let requests = proxy.requests();
    assert_eq!(requests[&S3Op::PutObject], 3);
    assert_eq!(requests[&S3Op::GetObject], 5);
    assert_eq!(requests[&S3Op::DeleteObject], 1);
    assert_eq!(requests[&S3Op::HeadObject], 2);
    let faults = proxy.faults();
    assert_eq!(faults[&S3Op::PutObject], 1);
    assert_eq!(faults[&S3Op::GetObject], 2);
    assert_eq!(proxy.fault_count(), 5);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn skip_and_rate_select_requests() {
    let Setup { proxy, object, .. } = &setup().await;
    assert_eq!(send(object, "PUT", b"x").await.unwrap().0, 200);
    // The first two GETs pass, the next two fail, then the rule is spent.
    proxy.inject(
        Rule::new(Fault::Status(500))
            .on(S3Op::GetObject)
            .skip(2)
            .times(2),
    );
    let codes: Vec<u16> = {
        let mut v = Vec::new();
        for _ in 0..5 {
            v.push(send(object, "GET", b"").await.unwrap().0);
        }
        v
    };
    assert_eq!(codes, [200, 200, 500, 500, 200]);
    proxy.clear_faults();
    proxy.reset_counts();
    // About half of 200 HEADs fail at rate 0.5 (seeded, so the count is stable run to run).
    proxy.inject(Rule::new(Fault::Status(503)).on(S3Op::HeadObject).rate(0.5));
    let mut failed = 0;
    for _ in 0..200 {
        if send(object, "HEAD", b"").await.unwrap().0 == 503 {
            failed += 1;
        }
    }
    assert!((60..=140).contains(&failed), "{failed} of 200 failed");
    assert_eq!(proxy.fault_count(), failed);
    assert_eq!(proxy.requests()[&S3Op::HeadObject], 200);
}
