//! What a sync writes (issue 35): a converged sync, run by `rdctl sync` or by the registry's
//! `[[sync]]` schedule, writes nothing (no manifest PUT, no push event; counted by a webhook
//! receiver on our registry's events), and images of one repository that share a large layer
//! sync at high concurrency into CNCF distribution 2.8 without `400 DIGEST_INVALID`, the layer
//! uploaded once per destination repository.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;
use validator::{ImageLayout, IndexEntry, Replaces, Tag};

use crate::registry_e2e::http;
use crate::sync::head_digest;
use crate::util::{Distribution, Server, ok, rdctl, s, tail, tempdir};

const MANIFEST_MT: &str = "application/vnd.oci.image.manifest.v1+json";
const SBOM_TYPE: &str = "application/spdx+json";

/// A webhook receiver that keeps every event it gets.
struct Receiver {
    server: Arc<tiny_http::Server>,
    seen: Arc<Mutex<Vec<Value>>>,
    thread: Option<JoinHandle<()>>,
}

impl Receiver {
    fn start() -> Receiver {
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").expect("bind receiver"));
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (srv, s) = (server.clone(), seen.clone());
        let thread = std::thread::spawn(move || {
            for mut req in srv.incoming_requests() {
                let mut body = Vec::new();
                let _ = req.as_reader().read_to_end(&mut body);
                let envelope: Value = serde_json::from_slice(&body).expect("an envelope");
                s.lock()
                    .unwrap()
                    .extend(envelope["events"].as_array().expect("events").clone());
                let _ = req.respond(tiny_http::Response::empty(200));
            }
        });
        Receiver {
            server,
            seen,
            thread: Some(thread),
        }
    }

    fn url(&self) -> String {
        format!("http://{}/hook", self.server.server_addr())
    }

    /// Push events under `prefix/` (distinct ids: delivery is at least once).
    fn pushes(&self, prefix: &str) -> Vec<Value> {
        let mut by_id = BTreeMap::new();
        for e in self.seen.lock().unwrap().iter() {
            if e["action"] == "push"
                && e["target"]["repository"]
                    .as_str()
                    .is_some_and(|r| r.starts_with(&format!("{prefix}/")))
            {
                by_id.insert(e["id"].as_str().unwrap().to_owned(), e.clone());
            }
        }
        by_id.into_values().collect()
    }

    /// Waits until no new event has arrived for a second (the outbox is polled every 50 ms);
    /// returns the push events under `prefix/`.
    fn settled(&self, prefix: &str) -> Vec<Value> {
        let mut last = self.seen.lock().unwrap().len();
        let mut quiet_since = Instant::now();
        let deadline = Instant::now() + Duration::from_secs(60);
        while quiet_since.elapsed() < Duration::from_secs(1) {
            assert!(Instant::now() < deadline, "events never settled");
            std::thread::sleep(Duration::from_millis(50));
            let now = self.seen.lock().unwrap().len();
            if now != last {
                last = now;
                quiet_since = Instant::now();
            }
        }
        self.pushes(prefix)
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

/// Manifest pushes among `events` (blob pushes are `application/octet-stream`), as
/// `repository@digest[:tag]`, for failure messages.
fn manifest_pushes(events: &[Value]) -> Vec<String> {
    events
        .iter()
        .filter(|e| e["target"]["mediaType"] != "application/octet-stream")
        .map(|e| {
            let t = &e["target"];
            let mut s = format!(
                "{}@{}",
                t["repository"].as_str().unwrap_or(""),
                t["digest"].as_str().unwrap_or("")
            );
            if let Some(tag) = t["tag"].as_str() {
                s.push(':');
                s.push_str(tag);
            }
            s
        })
        .collect()
}

/// Writes `n` images into one layout, tagged `t0`…: each has the same `shared` layer, a layer
/// of its own and an SBOM referrer (listed untagged in `index.json`). Returns the layout and
/// the digests of the images, their SBOMs and the shared layer.
fn seed(dir: &Path, n: usize, shared: &[u8]) -> (PathBuf, Vec<(String, String)>, String) {
    let root = dir.join("seed");
    let l = ImageLayout::create(&root).unwrap();
    let shared_d = l.write_document(shared).unwrap();
    let mut out = Vec::new();
    for i in 0..n {
        let own = format!("image {i}\n").repeat(100);
        let own_d = l.write_document(own.as_bytes()).unwrap();
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "amd64", "os": "illumos",
            "rootfs": {"type": "layers", "diff_ids": [shared_d.to_string(), own_d.to_string()]},
        }))
        .unwrap();
        let config_d = l.write_document(&config).unwrap();
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": MANIFEST_MT,
            "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config_d.to_string(), "size": config.len()},
            "layers": [
                {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": shared_d.to_string(), "size": shared.len()},
                {"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": own_d.to_string(), "size": own.len()},
            ],
        }))
        .unwrap();
        let image = l.write_document(&manifest).unwrap();
        l.set_tag(
            &Tag::parse(&format!("t{i}")).unwrap(),
            IndexEntry::new(MANIFEST_MT, image.clone(), manifest.len() as u64),
        )
        .unwrap();
        let empty = l.write_document(b"{}").unwrap();
        let payload = format!(r#"{{"spdxVersion":"SPDX-2.3","name":"image {i}"}}"#);
        let blob = l.write_document(payload.as_bytes()).unwrap();
        let sbom = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": MANIFEST_MT, "artifactType": SBOM_TYPE,
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty.to_string(), "size": 2},
            "layers": [{"mediaType": SBOM_TYPE, "digest": blob.to_string(), "size": payload.len()}],
            "subject": {"mediaType": MANIFEST_MT, "digest": image.to_string(), "size": manifest.len()},
        }))
        .unwrap();
        let sbom_d = l.write_document(&sbom).unwrap();
        let mut entry = IndexEntry::new(MANIFEST_MT, sbom_d.clone(), sbom.len() as u64);
        entry.artifact_type = Some(SBOM_TYPE.to_owned());
        l.add_untagged(entry, Replaces::SameDigest).unwrap();
        out.push((image.to_string(), sbom_d.to_string()));
    }
    (root, out, shared_d.to_string())
}

/// Pushes image `i` of the layout to `host/zones/{repo(i)}:1.{i}`.
fn push_seed(layout: &Path, n: usize, host: &str, repo: &dyn Fn(usize) -> String) {
    for i in 0..n {
        ok(rdctl().args([
            "push",
            &format!("{}:t{i}", s(layout)),
            &format!("{host}/zones/{}:1.{i}", repo(i)),
        ]));
    }
}

/// Runs `rdctl sync --json ARGS`; the exit code and the summary.
fn sync(args: &[&str]) -> (i32, Value, String) {
    let out = rdctl()
        .arg("sync")
        .arg("--json")
        .args(args)
        .output()
        .unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rdctl sync printed no JSON ({e}):\n{}\n{}",
            tail(&out.stdout),
            tail(&out.stderr)
        )
    });
    (
        out.status.code().unwrap_or(-1),
        v,
        tail(&out.stderr).to_owned(),
    )
}

/// The `[[sync]]` entry `name` from `GET /v2/_rd/sync`.
fn sync_status(addr: SocketAddr, name: &str) -> Value {
    let (status, _, body) = http(addr, "GET", "/v2/_rd/sync", &[], b"");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    let v: Value = serde_json::from_slice(&body).unwrap();
    v["sync"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == name)
        .unwrap_or_else(|| panic!("no sync entry {name}: {v:#}"))
        .clone()
}

/// Waits (at most 60 s) until entry `name` has run successfully `runs` times.
fn wait_runs(server: &Server, name: &str, runs: u64) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let st = sync_status(server.addr, name);
        if st["runs_ok"].as_u64().unwrap_or(0) >= runs {
            return st;
        }
        assert!(
            Instant::now() < deadline,
            "sync {name}: {runs} successful runs within 60 s:\n{st:#}\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn a_converged_sync_makes_no_manifest_put_and_no_event() {
    let dir = tempdir();
    let d = dir.path();
    let upstream = Server::start(&d.join("up"), &[]);
    let (layout, images, _) = seed(d, 6, b"shared layer\n");
    let repo = |i: usize| format!("app{}", i % 2);
    push_seed(&layout, images.len(), &upstream.host(), &repo);
    // A cosign signature tag (`sha256-<hex>.sig`) of image 0: it travels by its tag. Its blobs
    // are the SBOM's, already in the repository.
    let (sbom_bytes, sig_tag) = {
        let (_, _, body) = http(
            upstream.addr,
            "GET",
            &format!("/v2/zones/app0/manifests/{}", images[0].1),
            &[("Accept", MANIFEST_MT)],
            b"",
        );
        let mut m: Value = serde_json::from_slice(&body).unwrap();
        m.as_object_mut().unwrap().remove("subject");
        let tag = format!("{}.sig", images[0].0.replace(':', "-"));
        (serde_json::to_vec(&m).unwrap(), tag)
    };
    let (st, _, body) = http(
        upstream.addr,
        "PUT",
        &format!("/v2/zones/app0/manifests/{sig_tag}"),
        &[("Content-Type", MANIFEST_MT)],
        &sbom_bytes,
    );
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));

    let rx = Receiver::start();
    let config = d.join("registry.toml");
    std::fs::write(
        &config,
        format!(
            "[notifications]\npoll_interval = \"50ms\"\n\n\
             [[notifications.endpoints]]\nname = \"hook\"\nurl = \"{hook}\"\ntimeout = \"1s\"\nbackoff = \"100ms\"\nactions = [\"push\"]\n\n\
             [[sync]]\nname = \"central\"\nupstream = \"http://{up}/zones\"\ndestination = \"mirror\"\ninterval = \"1s\"\n",
            hook = rx.url(),
            up = upstream.host(),
        ),
    )
    .unwrap();
    let dest = Server::start(&d.join("data"), &["--config", s(&config)]);

    // rdctl sync, twice: the first run writes every manifest, the second nothing.
    let (from, to) = (
        format!("{}/zones", upstream.host()),
        format!("{}/cli", dest.host()),
    );
    let (code, v, err) = sync(&[&from, &to]);
    assert_eq!(code, 0, "{v:#}\n{err}");
    let first = rx.settled("cli");
    let first_manifests = manifest_pushes(&first);
    // Each image, its tag and its SBOM, and the signature tag.
    assert!(
        first_manifests.len() > images.len() * 3,
        "{first_manifests:#?}"
    );
    for (i, (image, _)) in images.iter().enumerate() {
        assert_eq!(
            head_digest(dest.addr, &format!("cli/{}", repo(i)), &format!("1.{i}")).as_deref(),
            Some(image.as_str())
        );
    }
    assert!(head_digest(dest.addr, "cli/app0", &sig_tag).is_some());
    let (code, v, err) = sync(&[&from, &to]);
    assert_eq!(code, 0, "{v:#}\n{err}");
    let summary = v["images"].as_array().unwrap();
    assert_eq!(summary.len(), images.len(), "{v:#}");
    for image in summary {
        // Nothing written: no manifest, no referrer, no blob.
        assert_eq!(image["up_to_date"], true, "{image:#}");
        assert_eq!(image["manifests"], serde_json::json!([]), "{image:#}");
        assert_eq!(image["referrers"], serde_json::json!([]), "{image:#}");
        assert_eq!(image["blobs_copied"], 0, "{image:#}");
    }
    let second = rx.settled("cli");
    assert_eq!(
        second.len(),
        first.len(),
        "the converged rdctl sync pushed again; manifest pushes of both runs: {:#?}",
        manifest_pushes(&second)
    );

    // The registry's [[sync]]: after it converged, further runs push nothing.
    let st = wait_runs(&dest, "central", 2);
    assert_eq!(st["last_run"]["images"], images.len(), "{st:#}");
    let converged = rx.settled("mirror");
    let runs = sync_status(dest.addr, "central")["runs_ok"]
        .as_u64()
        .unwrap();
    let st = wait_runs(&dest, "central", runs + 2);
    assert!(st["last_error"].is_null(), "{st:#}");
    let later = rx.settled("mirror");
    assert_eq!(
        manifest_pushes(&later).len(),
        manifest_pushes(&converged).len(),
        "the converged [[sync]] re-pushed manifests: {:#?}",
        manifest_pushes(&later)
    );
    assert_eq!(later.len(), converged.len(), "no blob pushes either");
    for (i, (image, sbom)) in images.iter().enumerate() {
        let r = format!("mirror/{}", repo(i));
        assert_eq!(
            head_digest(dest.addr, &r, &format!("1.{i}")).as_deref(),
            Some(image.as_str())
        );
        let (_, _, body) = http(
            dest.addr,
            "GET",
            &format!("/v2/{r}/referrers/{image}"),
            &[],
            b"",
        );
        let referrers: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            referrers["manifests"][0]["digest"].as_str(),
            Some(sbom.as_str()),
            "{referrers:#}"
        );
    }
    assert!(head_digest(dest.addr, "mirror/app0", &sig_tag).is_some());
}

#[test]
fn images_sharing_a_layer_sync_into_distribution_at_high_concurrency() {
    let dir = tempdir();
    let d = dir.path();
    let upstream = Server::start(&d.join("up"), &[]);
    // 12 MiB of incompressible bytes: over the client's 8 MiB chunk, so each upload of it is
    // several requests and stays open long enough for concurrent copies to meet.
    let mut shared = vec![0u8; 12 << 20];
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for chunk in shared.chunks_mut(8) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    const N: usize = 8;
    let (layout, images, shared_d) = seed(d, N, &shared);
    push_seed(&layout, N, &upstream.host(), &|_| "app".to_owned());
    let from = format!("{}/zones", upstream.host());

    // Into distribution 2.8, 8 images at once, ten times over, a fresh registry each time
    // (before the fix, 3 rounds in 30 failed: 400 DIGEST_INVALID on a manifest PUT).
    for round in 0..10 {
        let rd = d.join(format!("dist{round}"));
        std::fs::create_dir_all(&rd).unwrap();
        let dist = Distribution::start(
            &rd,
            &format!(
                "  filesystem:\n    rootdirectory: {}\n",
                s(&rd.join("data"))
            ),
        );
        let (code, v, err) = sync(&[
            "--concurrency",
            "8",
            &from,
            &format!("{}/site", dist.host()),
        ]);
        assert_eq!(
            code,
            0,
            "round {round}: {v:#}\n{err}\ndistribution:\n{}",
            dist.log_tail()
        );
        for (i, (image, _)) in images.iter().enumerate() {
            assert_eq!(
                head_digest(dist.addr(), "site/app", &format!("1.{i}")).as_deref(),
                Some(image.as_str()),
                "round {round}"
            );
        }
    }

    // Into our registry, counting uploads by their push events: the shared layer once.
    let rx = Receiver::start();
    let config = d.join("registry.toml");
    std::fs::write(
        &config,
        format!(
            "[notifications]\npoll_interval = \"50ms\"\n\n\
             [[notifications.endpoints]]\nname = \"hook\"\nurl = \"{}\"\ntimeout = \"1s\"\nbackoff = \"100ms\"\nactions = [\"push\"]\n",
            rx.url()
        ),
    )
    .unwrap();
    let dest = Server::start(&d.join("data"), &["--config", s(&config)]);
    let (code, v, err) = sync(&[
        "--concurrency",
        "8",
        &from,
        &format!("{}/site", dest.host()),
    ]);
    assert_eq!(code, 0, "{v:#}\n{err}");
    let uploads = rx
        .settled("site")
        .into_iter()
        .filter(|e| e["target"]["digest"] == shared_d.as_str())
        .count();
    assert_eq!(uploads, 1, "the shared layer was uploaded {uploads} times");
}
