//! Event webhooks end to end, on a filesystem store and on SeaweedFS, with two `rdctl registry
//! serve` replicas sharing the store and a receiver in the test that counts event ids: an
//! event acknowledged by a replica that is then killed with SIGKILL is delivered by the other
//! one; events from both replicas arrive once each; endpoint filters (actions, media types,
//! repository globs) and headers apply; pull events only reach an endpoint that asks.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::registry_e2e::http;
use crate::registry_gc::push_image;
use crate::registry_s3::{s3_server, seaweed};
use crate::util::{Server, tempdir};

const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// What the receiver keeps of one accepted event: path, event, authorization, content type.
type Seen = (String, Value, String, String);

/// A webhook receiver: answers 503 until told to accept, then records every event it gets.
struct Receiver {
    server: Arc<tiny_http::Server>,
    accept: Arc<AtomicBool>,
    /// (path, event, authorization header, content type) of every accepted event.
    seen: Arc<Mutex<Vec<Seen>>>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    fn start() -> Receiver {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind receiver"));
        let accept = Arc::new(AtomicBool::new(false));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (srv, acc, s) = (server.clone(), accept.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            for mut req in srv.incoming_requests() {
                let header = |name: &'static str| {
                    req.headers()
                        .iter()
                        .find(|h| h.field.equiv(name))
                        .map(|h| h.value.as_str().to_owned())
                        .unwrap_or_default()
                };
                let (auth, ctype) = (header("Authorization"), header("Content-Type"));
                let path = req.url().to_owned();
                let mut body = Vec::new();
                let _ = req.as_reader().read_to_end(&mut body);
                if !acc.load(Ordering::SeqCst) {
                    let _ = req.respond(tiny_http::Response::empty(503));
                    continue;
                }
                let envelope: Value = serde_json::from_slice(&body).expect("an envelope");
                for e in envelope["events"].as_array().expect("events") {
                    s.lock()
                        .unwrap()
                        .push((path.clone(), e.clone(), auth.clone(), ctype.clone()));
                }
                let _ = req.respond(tiny_http::Response::empty(200));
            }
        });
        Receiver {
            server,
            accept,
            seen,
            thread: Some(thread),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.server.server_addr())
    }

    /// Events received on `path`.
    fn events(&self, path: &str) -> Vec<Value> {
        self.seen
            .lock()
            .unwrap()
            .iter()
            .filter(|(p, ..)| p == path)
            .map(|(_, e, ..)| e.clone())
            .collect()
    }

    /// Waits until `path` received `n` events.
    fn wait_for(&self, path: &str, n: usize, servers: &[&Server]) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let got = self.events(path);
            if got.len() >= n {
                return got;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let logs: Vec<String> = servers.iter().map(|s| s.log_tail()).collect();
                panic!(
                    "{path}: {} of {n} events after 20 s: {got:#?}\nlogs:\n{}",
                    got.len(),
                    logs.join("\n---\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until `path` received `n` events whose `action` is `action`, and returns those:
    /// waited for by their own arrival, since a count of all events taken earlier would race
    /// them.
    fn wait_for_action(
        &self,
        path: &str,
        action: &str,
        n: usize,
        servers: &[&Server],
    ) -> Vec<Value> {
        let start = Instant::now();
        loop {
            let got: Vec<Value> = self
                .events(path)
                .into_iter()
                .filter(|e| e["action"] == action)
                .collect();
            if got.len() >= n {
                return got;
            }
            if start.elapsed() > Duration::from_secs(20) {
                let logs: Vec<String> = servers.iter().map(|s| s.log_tail()).collect();
                panic!(
                    "{path}: {} of {n} {action} events after 20 s: {:#?}\nlogs:\n{}",
                    got.len(),
                    self.events(path),
                    logs.join("\n---\n")
                );
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Counts per event id.
fn ids(events: &[Value]) -> BTreeMap<String, usize> {
    let mut m = BTreeMap::new();
    for e in events {
        *m.entry(e["id"].as_str().expect("an id").to_owned())
            .or_default() += 1;
    }
    m
}

fn config(dir: &Path, rx: &Receiver) -> String {
    let path = dir.join("registry.toml");
    std::fs::write(
        &path,
        format!(
            r#"
[notifications]
poll_interval = "50ms"
lease = "2s"

[[notifications.endpoints]]
name = "hook"
url = "{hook}"
timeout = "1s"
backoff = "100ms"
max_backoff = "200ms"
headers = {{ Authorization = ["Bearer s3cret"] }}
actions = ["push", "delete"]
media_types = ["{MANIFEST}"]

[[notifications.endpoints]]
name = "pulls"
url = "{pulls}"
timeout = "1s"
backoff = "100ms"
actions = ["pull"]
repositories = ["team/*"]
"#,
            hook = rx.url("/hook"),
            pulls = rx.url("/pulls"),
        ),
    )
    .unwrap();
    path.to_str().unwrap().to_owned()
}

fn metric(server: &Server, line_start: &str) -> Option<u64> {
    let (_, _, body) = http(server.addr, "GET", "/metrics", &[], b"");
    String::from_utf8_lossy(&body)
        .lines()
        .find(|l| l.starts_with(line_start))
        .and_then(|l| l.rsplit(' ').next()?.parse().ok())
}

/// The scenario on one store; `start` launches a replica with the extra flags.
fn kill9_then_deliver(start: &dyn Fn(&[&str]) -> Server) {
    let rx = Receiver::start();
    let dir = tempdir();
    let cfg = config(dir.path(), &rx);
    let mut a = start(&["--config", &cfg]);
    let b = start(&["--config", &cfg]);

    // The receiver refuses everything, so no replica can deliver before `a` dies.
    let m1 = push_image(&a, "team/app", "v1", b"{\"c\":1}", b"layer one");
    a.signal("-9");
    a.wait(Duration::from_secs(10)).expect("replica a exits");
    rx.accept.store(true, Ordering::SeqCst);

    let got = rx.wait_for("/hook", 1, &[&b]);
    assert_eq!(got.len(), 1, "blob pushes are filtered out by media type");
    let e = &got[0];
    assert_eq!(e["action"], "push");
    assert_eq!(e["target"]["digest"], m1.as_str());
    assert_eq!(e["target"]["tag"], "v1");
    assert_eq!(e["target"]["repository"], "team/app");
    assert_eq!(e["target"]["mediaType"], MANIFEST);
    assert!(e["target"]["size"].as_u64().unwrap() > 0);
    assert_eq!(e["request"]["method"], "PUT");
    assert!(
        e["source"]["instanceID"]
            .as_str()
            .is_some_and(|s| !s.is_empty())
    );
    assert_eq!(
        e["source"]["addr"],
        a.host().as_str(),
        "recorded by the killed replica"
    );
    {
        let seen = rx.seen.lock().unwrap();
        let (_, _, auth, ctype) = &seen[0];
        assert_eq!(auth, "Bearer s3cret");
        assert_eq!(ctype, "application/vnd.docker.distribution.events.v2+json");
    }

    // Two live replicas: pushes and a delete through both arrive once each.
    let a = start(&["--config", &cfg]);
    let mut pushed = vec![m1.clone()];
    for i in 0..6 {
        let via = if i % 2 == 0 { &a } else { &b };
        let layer = format!("layer {i}");
        pushed.push(push_image(
            via,
            "team/app",
            &format!("t{i}"),
            b"{\"c\":2}",
            layer.as_bytes(),
        ));
    }
    let (status, _, _) = http(b.addr, "DELETE", "/v2/team/app/manifests/t0", &[], b"");
    assert_eq!(status, 202);
    let got = rx.wait_for("/hook", 8, &[&a, &b]);
    let counts = ids(&got);
    assert_eq!(counts.len(), 8, "{got:#?}");
    assert!(
        counts.values().all(|&n| n == 1),
        "each event once: {counts:?}"
    );
    let delete = got
        .iter()
        .find(|e| e["action"] == "delete")
        .expect("a delete");
    assert_eq!(delete["target"]["tag"], "t0");
    for d in &pushed {
        assert!(
            got.iter().any(|e| e["target"]["digest"] == d.as_str()),
            "{d}"
        );
    }

    // Pulls: only the endpoint that asks, only for matching repositories, not for HEAD.
    assert!(rx.events("/pulls").is_empty(), "pushes are not pulls");
    let path = format!("/v2/team/app/manifests/{}", pushed[1]);
    let accept = [("accept", MANIFEST)];
    assert_eq!(http(a.addr, "HEAD", &path, &accept, b"").0, 200);
    assert_eq!(http(a.addr, "GET", &path, &accept, b"").0, 200);
    push_image(&a, "team/app/deeper", "x", b"{\"c\":3}", b"other");
    assert_eq!(
        http(
            a.addr,
            "GET",
            "/v2/team/app/deeper/manifests/x",
            &accept,
            b""
        )
        .0,
        200
    );
    let pulls = rx.wait_for("/pulls", 1, &[&a, &b]);
    let hook_total = rx.wait_for("/hook", 9, &[&a, &b]).len();
    std::thread::sleep(Duration::from_millis(300));
    let pulls_after = rx.events("/pulls");
    assert_eq!(pulls_after.len(), 1, "{pulls_after:#?}");
    assert_eq!(pulls[0]["action"], "pull");
    assert_eq!(pulls[0]["target"]["digest"], pushed[1].as_str());
    assert_eq!(
        rx.events("/hook").len(),
        hook_total,
        "no pull reaches /hook"
    );

    // Both outboxes drain, and the metrics say so.
    let start_wait = Instant::now();
    while [&a, &b].iter().any(|s| {
        metric(s, "registry_events_pending{endpoint=\"hook\"}") != Some(0)
            || metric(s, "registry_events_pending{endpoint=\"pulls\"}") != Some(0)
    }) {
        assert!(
            start_wait.elapsed() < Duration::from_secs(10),
            "outbox not drained"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let delivered: u64 = [&a, &b]
        .iter()
        .filter_map(|s| metric(s, "registry_events_delivered_total{endpoint=\"hook\"}"))
        .sum();
    assert!(delivered >= 8, "delivered {delivered}");
}

#[test]
fn events_fs_survive_kill9_and_reach_the_receiver_once() {
    let data = tempdir();
    kill9_then_deliver(&|extra| Server::start(data.path(), extra));
    let outbox = data.path().join("_rd/events/hook");
    let left: Vec<_> = std::fs::read_dir(&outbox)
        .map(|d| d.filter_map(Result::ok).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "outbox entries left: {left:?}");
}

#[test]
fn events_s3_survive_kill9_and_reach_the_receiver_once() {
    let bucket = seaweed().bucket().unwrap_or_else(|e| panic!("{e}"));
    let data = tempdir();
    kill9_then_deliver(&|extra| s3_server(data.path(), &bucket, extra));
}

/// A receiver that never answers 2xx: each poll costs one failed attempt (counted), and after
/// the endpoint's `max_age` the event is given up, counted dead, and leaves the outbox.
#[test]
fn events_undeliverable_are_retried_then_dead_lettered() {
    let rx = Receiver::start(); // refuses everything with 503
    let dir = tempdir();
    let cfg = dir.path().join("registry.toml");
    std::fs::write(
        &cfg,
        format!(
            "[notifications]\npoll_interval = \"50ms\"\n[[notifications.endpoints]]\nname = \"down\"\nurl = \"{}\"\ntimeout = \"1s\"\nbackoff = \"50ms\"\nmax_backoff = \"100ms\"\nmax_age = \"1500ms\"\n",
            rx.url("/down")
        ),
    )
    .unwrap();
    let data = tempdir();
    let server = Server::start(data.path(), &["--config", cfg.to_str().unwrap()]);
    push_image(&server, "team/app", "v1", b"{\"c\":1}", b"layer");
    let start = Instant::now();
    loop {
        let dead = metric(&server, "registry_events_dead_total{endpoint=\"down\"}");
        let pending = metric(&server, "registry_events_pending{endpoint=\"down\"}");
        // Blob pushes count too: two blobs and the manifest.
        if dead == Some(3) && pending == Some(0) {
            break;
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "dead {dead:?}, pending {pending:?}; log:\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let failed = metric(&server, "registry_events_failed_total{endpoint=\"down\"}").unwrap();
    assert!(failed >= 3, "failed attempts {failed}");
    assert_eq!(
        metric(&server, "registry_events_recorded_total{endpoint=\"down\"}"),
        Some(3)
    );
    assert!(rx.events("/down").is_empty());
    assert!(server.log_shows("given up"), "{}", server.log_tail());
    let left = std::fs::read_dir(data.path().join("_rd/events/down"))
        .map(|d| d.count())
        .unwrap_or(0);
    assert_eq!(left, 0, "outbox entries left");
}

/// The OCI conformance suite passes with events (every action, pulls too) and a scrub
/// schedule configured, the receiver gets each event once, and the scheduled scrub finds
/// nothing wrong in what the suite left.
#[test]
fn conformance_passes_with_events_and_scrub_configured() {
    let rx = Receiver::start();
    rx.accept.store(true, Ordering::SeqCst);
    let dir = tempdir();
    let cfg = dir.path().join("registry.toml");
    std::fs::write(
        &cfg,
        format!(
            "[scrub]\ninterval = \"1s\"\n[notifications]\npoll_interval = \"50ms\"\n[[notifications.endpoints]]\nname = \"all\"\nurl = \"{}\"\nactions = [\"push\", \"mount\", \"delete\", \"pull\"]\n",
            rx.url("/all")
        ),
    )
    .unwrap();
    let data = tempdir();
    let server = Server::start(data.path(), &["--config", cfg.to_str().unwrap()]);
    crate::registry_e2e::conformance(&server.host(), "conformance-results-events", &|| {
        server.log_tail()
    });
    let start = Instant::now();
    // Pending is what the last delivery pass saw, which may predate the last recorded events:
    // wait until every recorded event was delivered.
    while metric(&server, "registry_events_pending{endpoint=\"all\"}") != Some(0)
        || metric(&server, "registry_events_delivered_total{endpoint=\"all\"}")
            != metric(&server, "registry_events_recorded_total{endpoint=\"all\"}")
        || metric(&server, "registry_scrub_runs_total{result=\"ok\"}").unwrap_or(0) == 0
    {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "outbox not drained or no scrub; log:\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    let events = rx.events("/all");
    let counts = ids(&events);
    assert!(counts.values().all(|&n| n == 1), "each event once");
    for action in ["push", "mount", "delete", "pull"] {
        assert!(
            events.iter().any(|e| e["action"] == action),
            "no {action} event among {}",
            events.len()
        );
    }
    assert_eq!(
        metric(&server, "registry_events_recorded_total{endpoint=\"all\"}"),
        Some(events.len() as u64)
    );
    assert_eq!(
        metric(&server, "registry_scrub_corrupt_blobs_total"),
        Some(0)
    );
}

/// Pushes `config` and `layer` into `repo` and PUTs the manifest under `reference`; the
/// answer's status and body.
fn try_push(
    server: &Server,
    repo: &str,
    reference: &str,
    config: &[u8],
    layer: &[u8],
) -> (u16, String) {
    let c = crate::registry_gc::push_blob(server, repo, config);
    let l = crate::registry_gc::push_blob(server, repo, layer);
    let m = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": l, "size": layer.len()}],
    }))
    .unwrap();
    let (status, _, body) = http(
        server.addr,
        "PUT",
        &format!("/v2/{repo}/manifests/{reference}"),
        &[("content-type", MANIFEST)],
        &m,
    );
    (status, String::from_utf8_lossy(&body).into_owned())
}

/// What distribution's receivers and our governance expect of the envelope: `request.addr`
/// (the connection's address, or from a trusted proxy the `X-Forwarded-For` entry nearest
/// the right end that is not itself a trusted proxy: a client-written first entry is ignored),
/// `target.fromRepository` on a cross-repository mount, a tag delete as `delete` with
/// `target.tag`, `refuse` events for immutable and quota refusals with the reason, and
/// `quarantine` events for what a scheduled scrub quarantined and withdrew.
#[test]
fn events_carry_addr_mount_source_tag_deletes_refusals_and_scrub_findings() {
    let rx = Receiver::start();
    rx.accept.store(true, Ordering::SeqCst);
    let dir = tempdir();
    let cfg = dir.path().join("registry.toml");
    std::fs::write(
        &cfg,
        format!(
            r#"
[scrub]
interval = "500ms"

[notifications]
poll_interval = "50ms"
trusted_proxies = ["127.0.0.0/8", "10.0.0.0/8"]

[[notifications.endpoints]]
name = "all"
url = "{}"
actions = ["push", "mount", "delete", "refuse", "quarantine"]

[[immutable]]
repositories = ["prod/**"]
tags = ["v*"]

[[quota]]
repositories = ["small/**"]
max_manifests = 1
"#,
            rx.url("/all")
        ),
    )
    .unwrap();
    let data = tempdir();
    let server = Server::start(data.path(), &["--config", cfg.to_str().unwrap()]);
    let first = |events: &[Value], pred: &dyn Fn(&Value) -> bool| -> Value {
        events
            .iter()
            .find(|e| pred(e))
            .cloned()
            .unwrap_or_else(|| panic!("no such event among {events:#?}"))
    };

    // request.addr: the connection's address.
    let m = push_image(&server, "prod/app", "v1", b"{\"e\":1}", b"event layer one");
    let events = rx.wait_for("/all", 3, &[&server]);
    let push = first(&events, &|e| {
        e["action"] == "push" && e["target"]["digest"] == m.as_str()
    });
    let addr = push["request"]["addr"].as_str().expect("request.addr");
    assert!(addr.starts_with("127.0.0.1:"), "{push:#}");

    // A cross-repository mount names its source; through trusted proxies (127.0.0.1, then
    // 10.1.1.1), addr is the address the outer proxy saw, not the first entry the client
    // wrote itself.
    let layer = crate::registry_gc::digest(b"event layer one");
    let (status, _, body) = http(
        server.addr,
        "POST",
        &format!("/v2/team/copy/blobs/uploads/?mount={layer}&from=prod/app"),
        &[("x-forwarded-for", "198.51.100.66, 203.0.113.7, 10.1.1.1")],
        b"",
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    let events = rx.wait_for("/all", 4, &[&server]);
    let mount = first(&events, &|e| e["action"] == "mount");
    assert_eq!(mount["target"]["repository"], "team/copy", "{mount:#}");
    assert_eq!(mount["target"]["fromRepository"], "prod/app", "{mount:#}");
    assert_eq!(mount["request"]["addr"], "203.0.113.7", "{mount:#}");

    // A tag delete is a delete event with the tag.
    push_image(
        &server,
        "team/app",
        "latest",
        b"{\"e\":2}",
        b"event layer two",
    );
    let (status, _, _) = http(
        server.addr,
        "DELETE",
        "/v2/team/app/manifests/latest",
        &[],
        b"",
    );
    assert_eq!(status, 202);
    let events = rx.wait_for_action("/all", "delete", 1, &[&server]);
    let delete = first(&events, &|e| e["action"] == "delete");
    assert_eq!(delete["target"]["tag"], "latest", "{delete:#}");
    assert_eq!(delete["target"]["repository"], "team/app", "{delete:#}");

    // Refusals: moving an immutable tag, going over a quota.
    let (status, body) = try_push(
        &server,
        "prod/app",
        "v1",
        b"{\"e\":3}",
        b"event layer three",
    );
    assert_eq!(status, 403, "{body}");
    push_image(&server, "small/app", "a", b"{\"e\":4}", b"event layer four");
    let (status, body) = try_push(&server, "small/app", "b", b"{\"e\":5}", b"event layer five");
    assert_eq!(status, 403, "{body}");
    let refusals = rx.wait_for_action("/all", "refuse", 2, &[&server]);
    let immutable = first(&refusals, &|e| e["target"]["repository"] == "prod/app");
    assert_eq!(immutable["target"]["tag"], "v1", "{immutable:#}");
    assert!(
        immutable["reason"]
            .as_str()
            .unwrap()
            .contains("immutable[0]"),
        "{immutable:#}"
    );
    let quota = first(&refusals, &|e| e["target"]["repository"] == "small/app");
    assert!(
        quota["reason"].as_str().unwrap().contains("quota exceeded"),
        "{quota:#}"
    );

    // Scrub findings: the flipped layer is quarantined and the manifest naming it withdrawn.
    let hex = layer.strip_prefix("sha256:").unwrap();
    let file = data
        .path()
        .join(format!("blobs/sha256/{}/{hex}/data", &hex[..2]));
    let mut perms = std::fs::metadata(&file).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o644);
    std::fs::set_permissions(&file, perms).unwrap();
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[2] ^= 0x20;
    std::fs::write(&file, bytes).unwrap();
    // The layer in both repositories linking it, and the manifest of prod/app.
    let found = rx.wait_for_action("/all", "quarantine", 3, &[&server]);
    let blob = first(&found, &|e| e["target"]["digest"] == layer.as_str());
    assert!(
        blob["reason"].as_str().unwrap().contains("quarantined"),
        "{blob:#}"
    );
    let withdrawn = first(&found, &|e| e["target"]["digest"] == m.as_str());
    assert_eq!(
        withdrawn["target"]["repository"], "prod/app",
        "{withdrawn:#}"
    );
    assert!(
        withdrawn["reason"].as_str().unwrap().contains(&layer),
        "{withdrawn:#}"
    );
    let mut repos: Vec<&str> = found
        .iter()
        .filter(|e| e["target"]["digest"] == layer.as_str())
        .map(|e| e["target"]["repository"].as_str().unwrap())
        .collect();
    repos.sort();
    repos.dedup();
    assert_eq!(repos, ["prod/app", "team/copy"]);
}
