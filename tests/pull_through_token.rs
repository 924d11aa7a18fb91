//! The pull-through cache (`[[proxy]]`) reaching its upstreams through `registry-client`
//! (issue 35): an upstream that wants bearer tokens and has its own CA (our registry in token
//! mode over TLS), and CNCF distribution v3 with htpasswd (no referrers API: the tag schema);
//! skopeo, crane, oras and the worker pull through the cache, containerd-style `?ns=HOST`
//! requests map to the rule with that upstream, referrers that exist only upstream are listed
//! and then fetched on demand, an upstream whose bytes fail verification is passed over for
//! the next one (nothing of it stored), and an upstream failure with nothing cached is a 503
//! naming the upstream and the cause.

use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use sha2::{Digest as _, Sha256};

use crate::fault_proxy::{Fault, FaultProxy, Rule};
use crate::registry_e2e::http;
use crate::registry_tls::Pki;
use crate::util::{Distribution, Server, ok, rdctl, root, s, tail, tempdir, tool};
use crate::worker_e2e::{Node, RawImage, stored_blob};

const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json";

fn sha256(b: &[u8]) -> String {
    format!(
        "sha256:{}",
        Sha256::digest(b)
            .iter()
            .map(|x| format!("{x:02x}"))
            .collect::<String>()
    )
}

/// A docker `config.json` with `user:password` for `host`.
fn auth_file(path: &Path, host: &str, user: &str, password: &str) -> PathBuf {
    let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
    std::fs::write(
        path,
        serde_json::json!({"auths": {host: {"auth": auth}}}).to_string(),
    )
    .unwrap();
    path.to_owned()
}

/// Our registry with `[[proxy]]` tables (`rules`, TOML), no auth of its own.
fn cache(data: &Path, rules: &str) -> Server {
    std::fs::create_dir_all(data).unwrap();
    let config = data.join("registry.toml");
    std::fs::write(&config, rules).unwrap();
    Server::start(&data.join("store"), &["--config", s(&config)])
}

/// A GET through the cache: status, `Docker-Content-Digest` and body.
fn get(server: &Server, path: &str) -> (u16, String, Vec<u8>) {
    let (st, h, body) = http(
        server.addr,
        "GET",
        path,
        &[("Accept", MANIFEST_ACCEPT)],
        b"",
    );
    let digest = h
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("docker-content-digest"))
        .map(|(_, v)| v.clone())
        .unwrap_or_default();
    (st, digest, body)
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// The first layer's digest of the image a layout tags `tag`.
fn layer_of(layout: &Path, tag: &str) -> String {
    let index: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("index.json")).unwrap()).unwrap();
    let m = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let (a, h) = m.split_once(':').unwrap();
    let manifest: serde_json::Value =
        serde_json::from_slice(&std::fs::read(layout.join("blobs").join(a).join(h)).unwrap())
            .unwrap();
    manifest["layers"][0]["digest"].as_str().unwrap().to_owned()
}

/// An illumos image for the worker at `repo:1` of the registry at `dest` (copied there from a
/// scratch registry with `rdctl copy` and `client_args`).
fn put_raw_image(img: &RawImage, repo: &str, dest: &str, client_args: &[&str]) {
    let d_scratch = tempdir();
    let scratch = Server::start(d_scratch.path(), &[]);
    img.push(scratch.addr, repo, "1");
    ok(rdctl().arg("copy").args(client_args).args([
        &format!("{}/{repo}:1", scratch.host()),
        &format!("{dest}/{repo}:1"),
    ]));
    drop(scratch);
}

#[test]
fn token_upstream_with_its_own_ca_serves_skopeo_crane_the_worker_and_ns_requests() {
    let (dir, d_pki, d_up, d_cache) = (tempdir(), tempdir(), tempdir(), tempdir());
    let pki = Pki::new(d_pki.path());
    pki.issue(1);
    // The upstream: TLS with the test CA, `alice` only, bearer tokens from its /token.
    let users = d_up.path().join("htpasswd");
    std::fs::write(
        &users,
        format!("alice:{}\n", bcrypt::hash("alice-pw", 4).unwrap()),
    )
    .unwrap();
    let keys = root().join("registry/tests/data/auth");
    let up_config = d_up.path().join("registry.toml");
    std::fs::write(
        &up_config,
        format!(
            "[auth]\nhtpasswd = {:?}\n\n[[auth.acl]]\nsubjects = [\"alice\"]\nrepositories = [\"**\"]\nactions = [\"*\"]\n\n\
             [auth.token]\nservice = \"upstream-test\"\nsigning_key = {:?}\npublic_key = {:?}\n\n\
             [tls]\ncert = {:?}\nkey = {:?}\n",
            s(&users),
            s(&keys.join("token-key.pem")),
            s(&keys.join("token-pub.pem")),
            s(&pki.cert()),
            s(&pki.key()),
        ),
    )
    .unwrap();
    let up = Server::start(&d_up.path().join("store"), &["--config", s(&up_config)]);
    let creds = auth_file(
        &dir.path().join("auth.json"),
        &up.host(),
        "alice",
        "alice-pw",
    );
    let ca = pki.ca_file();
    // The CA for the upstream's host only (the scratch registry stays plain HTTP).
    let certs_d = dir.path().join("certs.d");
    std::fs::create_dir_all(certs_d.join(up.host())).unwrap();
    std::fs::copy(&ca, certs_d.join(up.host()).join("ca.crt")).unwrap();
    let client = ["--auth-file", s(&creds), "--cert-dir", s(&certs_d)];
    let a = crate::referrers::assemble(dir.path());
    for repo in ["apps/web:1", "apps/other:1"] {
        ok(rdctl().arg("push").args(client).args([
            &format!("{}:v1", s(&a.layout)),
            &format!("{}/{repo}", up.host()),
        ]));
    }
    put_raw_image(
        &RawImage::new("token-upstream"),
        "apps/zone",
        &up.host(),
        &client,
    );

    // `central` has the credentials and the CA; `anon` the CA only.
    let c = cache(
        d_cache.path(),
        &format!(
            "[[proxy]]\nprefix = \"central\"\nupstreams = [\"https://{up}\"]\nauth_file = {:?}\nca_files = [{:?}]\n\n\
             [[proxy]]\nprefix = \"anon\"\nupstreams = [\"https://{up}\"]\nca_files = [{:?}]\n",
            s(&creds),
            s(&ca),
            s(&ca),
            up = up.host(),
        ),
    );

    // skopeo: the image, its layer as pushed.
    let through = format!("{}/central/apps/web:1", c.host());
    let out = dir.path().join("skopeo");
    ok(tool("skopeo").args([
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{through}"),
        &format!("oci:{}:1", s(&out)),
    ]));
    assert_eq!(layer_of(&out, "1"), layer_of(&a.layout, "v1"));
    // crane: the same digest, and the whole image.
    let digest = ok(tool("crane").args(["digest", "--insecure", &through]));
    assert_eq!(text(&digest.stdout).trim(), a.image);
    ok(tool("crane").args([
        "pull",
        "--insecure",
        "--format",
        "oci",
        &through,
        s(&dir.path().join("crane")),
    ]));
    // The worker, by tag, through the cache.
    let node = Node::new(&dir.path().join("node"));
    node.zone("web", &format!("{}/central/apps/zone:1", c.host()));
    let run = node.run_once();
    assert!(run.status.success(), "{}", tail(&run.stderr));
    assert_eq!(node.status()["web"]["phase"], "Ready");
    // The referrers API of the upstream, through the cache, before anything of them is cached:
    // the SBOM refers to the image, the signature to the SBOM.
    for (subject, referrer) in [(&a.image, &a.sbom), (&a.sbom, &a.signature)] {
        let (st, _, body) = get(&c, &format!("/v2/central/apps/other/referrers/{subject}"));
        assert_eq!(st, 200, "{}", text(&body));
        assert!(
            text(&body).contains(referrer.as_str()),
            "{referrer} not listed for {subject}: {}",
            text(&body)
        );
    }

    // Without credentials the upstream refuses: a 503 that says so, nothing cached.
    let (st, _, body) = get(&c, "/v2/anon/apps/web/manifests/1");
    assert_eq!(st, 503, "{}", text(&body));
    assert!(
        text(&body).contains(&up.host()) && text(&body).contains("401"),
        "{}",
        text(&body)
    );

    // containerd's mirror request: `apps/other` with ns=<upstream host> is `central/apps/other`,
    // fetched now (nothing of that tag was cached).
    let ns = up.host();
    let (st, d, body) = get(&c, &format!("/v2/apps/other/manifests/1?ns={ns}"));
    assert_eq!(st, 200, "{}", text(&body));
    assert_eq!(d, a.image);
    let (st, d, _) = get(&c, "/v2/central/apps/other/manifests/1");
    assert_eq!((st, d.as_str()), (200, a.image.as_str()));
    let layer = layer_of(&a.layout, "v1");
    let (st, _, body) = get(&c, &format!("/v2/apps/other/blobs/{layer}?ns={ns}"));
    assert_eq!((st, sha256(&body)), (200, layer.clone()));
    // An ns no rule serves: a clear 404 naming it.
    let (st, _, body) = get(&c, "/v2/apps/other/manifests/1?ns=ghcr.io");
    assert_eq!(st, 404, "{}", text(&body));
    assert!(
        text(&body).contains("NAME_UNKNOWN") && text(&body).contains("ghcr.io"),
        "{}",
        text(&body)
    );
    // That answer comes before authentication: it never names the (internal) upstreams.
    assert!(!text(&body).contains(&up.host()), "{}", text(&body));
    drop((c, up));
}

/// CNCF distribution v3 with htpasswd (`bob`/`bob-pw`) on a free loopback port.
struct V3 {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl V3 {
    fn start(dir: &Path) -> V3 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let users = dir.join("htpasswd");
        std::fs::write(
            &users,
            format!("bob:{}\n", bcrypt::hash("bob-pw", 4).unwrap()),
        )
        .unwrap();
        let config = dir.join("distribution.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: warn\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {}\n  maintenance:\n    uploadpurging:\n      enabled: false\n\
                 auth:\n  htpasswd:\n    realm: rdctl-test\n    path: {}\n\
                 http:\n  addr: 127.0.0.1:{port}\n",
                s(&dir.join("data")),
                s(&users)
            ),
        )
        .unwrap();
        let log = dir.join("distribution.log");
        let child = tool("distribution-v3")
            .args(["serve", s(&config)])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        let mut v3 = V3 { child, port, log };
        let deadline = Instant::now() + Duration::from_secs(30);
        let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
        while !(std::net::TcpStream::connect(addr).is_ok()
            && http(addr, "GET", "/v2/", &[], b"").0 == 401)
        {
            if let Ok(Some(st)) = v3.child.try_wait() {
                panic!("distribution v3 exited with {st}:\n{}", v3.log_tail());
            }
            assert!(
                Instant::now() < deadline,
                "distribution v3 did not answer:\n{}",
                v3.log_tail()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        v3
    }

    fn host(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn log_tail(&self) -> String {
        tail(&std::fs::read(&self.log).unwrap_or_default())
    }
}

impl Drop for V3 {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn distribution_v3_with_htpasswd_and_referrers_through_the_cache() {
    let (dir, d_up, d_cache) = (tempdir(), tempdir(), tempdir());
    let up = V3::start(d_up.path());
    let creds = auth_file(&dir.path().join("auth.json"), &up.host(), "bob", "bob-pw");
    let a = crate::referrers::assemble(dir.path());
    // v3 has no referrers API: rdctl keeps the `sha256-<hex>` tag schema index there.
    ok(rdctl().args([
        "push",
        "--auth-file",
        s(&creds),
        &format!("{}:v1", s(&a.layout)),
        &format!("{}/apps/web:1", up.host()),
    ]));
    let c = cache(
        d_cache.path(),
        &format!(
            "[[proxy]]\nprefix = \"central\"\nupstreams = [\"http://{}\"]\nauth_file = {:?}\n",
            up.host(),
            s(&creds)
        ),
    );
    let through = format!("{}/central/apps/web:1", c.host());
    let out = dir.path().join("skopeo");
    ok(tool("skopeo").args([
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{through}"),
        &format!("oci:{}:1", s(&out)),
    ]));
    assert_eq!(layer_of(&out, "1"), layer_of(&a.layout, "v1"));
    let digest = ok(tool("crane").args(["digest", "--insecure", &through]));
    assert_eq!(text(&digest.stdout).trim(), a.image);

    // oras discover through the cache lists the SBOM and the signature that only the
    // upstream has (its tag schema), though none of them was pulled through the cache.
    let found = ok(tool("oras").args(["discover", "--plain-http", "--format", "json", &through]));
    for d in [&a.sbom, &a.signature] {
        assert!(
            text(&found.stdout).contains(d.as_str()),
            "{d} not discovered: {}\n{}",
            text(&found.stdout),
            c.log_tail()
        );
    }
    // The SBOM is fetched on demand: its manifest, then its layer, verified.
    let (st, d, body) = get(&c, &format!("/v2/central/apps/web/manifests/{}", a.sbom));
    assert_eq!((st, d.as_str()), (200, a.sbom.as_str()), "{}", text(&body));
    let sbom: serde_json::Value = serde_json::from_slice(&body).unwrap();
    let layer = sbom["layers"][0]["digest"].as_str().unwrap();
    let (st, _, body) = get(&c, &format!("/v2/central/apps/web/blobs/{layer}"));
    assert_eq!((st, sha256(&body).as_str()), (200, layer));
    // Now cached, it is listed once, not twice.
    let (st, _, body) = get(&c, &format!("/v2/central/apps/web/referrers/{}", a.image));
    assert_eq!(st, 200);
    assert_eq!(
        text(&body).matches(a.sbom.as_str()).count(),
        1,
        "{}",
        text(&body)
    );
    drop((c, up));
}

#[test]
fn an_upstream_whose_content_fails_verification_is_passed_over() {
    let (d_up, d_cache, dir) = (tempdir(), tempdir(), tempdir());
    let dist = Distribution::start(
        d_up.path(),
        &format!(
            "  filesystem:\n    rootdirectory: {}\n",
            s(&d_up.path().join("data"))
        ),
    );
    let img = RawImage::new("falls-through");
    put_raw_image(&img, "apps/ft", &dist.host(), &[]);
    let layer = img.layer_digest(0);
    // The first upstream lies about every manifest and the first layer; the second is honest.
    let bad = FaultProxy::start(
        dist.addr(),
        vec![
            Rule {
                method: "GET",
                path: "/manifests/".to_owned(),
                times: u32::MAX,
                fault: Fault::Corrupt,
            },
            Rule {
                method: "GET",
                path: format!("/blobs/{layer}"),
                times: u32::MAX,
                fault: Fault::Corrupt,
            },
        ],
    );
    let good = FaultProxy::start(dist.addr(), vec![]);
    let c = cache(
        d_cache.path(),
        &format!(
            "[[proxy]]\nprefix = \"central\"\nupstreams = [\"http://{}\", \"http://{}\"]\n",
            bad.host(),
            good.host()
        ),
    );
    let gets = |p: &FaultProxy, path: &str| {
        p.seen_for(path)
            .iter()
            .filter(|s| s.method == "GET")
            .count()
    };
    // The manifest: the first upstream's fails its digest, the second's is cached.
    let (st, manifest, body) = get(&c, "/v2/central/apps/ft/manifests/1");
    assert_eq!(st, 200, "{}\n{}", text(&body), c.log_tail());
    assert_eq!(manifest, sha256(&body));
    assert!(gets(&bad, "/manifests/1") >= 1, "{:#?}", bad.seen());
    assert_eq!(gets(&good, "/manifests/1"), 1, "{:#?}", good.seen());

    // The layer: the request that starts the fetch streams the first upstream's wrong bytes
    // and fails; the fetch goes on at the second upstream, whose bytes are stored.
    let (st, _, body) = http(
        c.addr,
        "GET",
        &format!("/v2/central/apps/ft/blobs/{layer}"),
        &[],
        b"",
    );
    assert!(
        st != 200 || sha256(&body) != layer,
        "the first GET got verified bytes from a lying upstream?"
    );
    let store = d_cache.path().join("store");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !stored_blob(&store, &layer).exists() {
        assert!(
            Instant::now() < deadline,
            "the second upstream's layer was not cached:\n{}",
            c.log_tail()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(
        sha256(&std::fs::read(stored_blob(&store, &layer)).unwrap()),
        layer
    );
    assert_eq!(
        gets(&bad, &format!("/blobs/{layer}")),
        1,
        "{:#?}",
        bad.seen()
    );
    assert_eq!(
        gets(&good, &format!("/blobs/{layer}")),
        1,
        "{:#?}",
        good.seen()
    );
    // Served from the cache from now on; skopeo pulls the whole image.
    let (st, _, body) = http(
        c.addr,
        "GET",
        &format!("/v2/central/apps/ft/blobs/{layer}"),
        &[],
        b"",
    );
    assert_eq!((st, sha256(&body)), (200, layer.clone()));
    assert_eq!(gets(&good, &format!("/blobs/{layer}")), 1);
    ok(tool("skopeo").args([
        "copy",
        "--src-tls-verify=false",
        &format!("docker://{}/central/apps/ft:1", c.host()),
        &format!("oci:{}:1", s(&dir.path().join("out"))),
    ]));
    drop((c, bad, good, dist));
}

#[test]
fn upstream_down_with_nothing_cached_is_503_naming_the_upstream() {
    let d_cache = tempdir();
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .unwrap();
    let upstream = format!("127.0.0.1:{port}");
    let c = cache(
        d_cache.path(),
        &format!("[[proxy]]\nprefix = \"central\"\nupstreams = [\"http://{upstream}\"]\n"),
    );
    let layer = format!("sha256:{}", "ab".repeat(32));
    for path in [
        "/v2/central/apps/web/manifests/1".to_owned(),
        format!("/v2/central/apps/web/manifests/{layer}"),
        format!("/v2/central/apps/web/blobs/{layer}"),
    ] {
        let (st, _, body) = get(&c, &path);
        let body = text(&body);
        assert_eq!(st, 503, "{path}: {body}");
        assert!(
            body.contains("UNAVAILABLE") && body.contains(&upstream),
            "{path}: {body}"
        );
    }
    let log = c.log_tail();
    assert!(!log.contains("serving the cache"), "{log}");
    assert!(log.contains("nothing cached"), "{log}");
}

/// Distribution with `apps/web:1` and `apps/other:1` (worker images), behind a counting proxy.
fn counted_upstream(d_up: &Path, rules: Vec<Rule>) -> (Distribution, FaultProxy, RawImage) {
    let dist = Distribution::start(
        d_up,
        &format!(
            "  filesystem:\n    rootdirectory: {}\n",
            s(&d_up.join("data"))
        ),
    );
    let img = RawImage::new("counted");
    for repo in ["apps/web", "apps/other"] {
        put_raw_image(&img, repo, &dist.host(), &[]);
    }
    let counting = FaultProxy::start(dist.addr(), rules);
    (dist, counting, img)
}

#[test]
fn upstream_referrers_are_kept_for_the_tag_ttl_and_a_hanging_upstream_does_not_stall_listings() {
    let (d_up, d_cache) = (tempdir(), tempdir());
    let (dist, up, _img) = counted_upstream(d_up.path(), vec![]);
    // An upstream that accepts connections and never answers; it counts them.
    let hung = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let hung_host = hung.local_addr().unwrap().to_string();
    let accepted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    {
        let accepted = accepted.clone();
        std::thread::spawn(move || {
            for conn in hung.incoming().flatten() {
                accepted.lock().unwrap().push(conn);
            }
        });
    }
    let connections = || accepted.lock().unwrap().len();
    let c = cache(
        d_cache.path(),
        &format!(
            "[[proxy]]\nprefix = \"central\"\nupstreams = [\"http://{}\"]\ntag_ttl_secs = 300\n\n\
             [[proxy]]\nprefix = \"hung\"\nupstreams = [\"http://{}\"]\ntag_ttl_secs = 300\n",
            up.host(),
            hung_host
        ),
    );
    let (st, subject, body) = get(&c, "/v2/central/apps/web/manifests/1");
    assert_eq!(st, 200, "{}", text(&body));
    // Two listings within the TTL: the upstream is asked for the first only.
    let listing = format!("/v2/central/apps/web/referrers/{subject}");
    // The counting proxy records a request when it has relayed the whole answer, which can be
    // after the cache answered its client: count only once the record has stopped growing.
    let settled = || {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut n = up.seen().len();
        loop {
            std::thread::sleep(Duration::from_millis(300));
            let now = up.seen().len();
            if now == n || Instant::now() > deadline {
                return now;
            }
            n = now;
        }
    };
    let before = settled();
    let (st, _, body) = get(&c, &listing);
    assert_eq!(st, 200, "{}", text(&body));
    let first = settled() - before;
    assert!(first >= 1, "the first listing did not ask the upstream");
    let (st, _, body) = get(&c, &listing);
    assert_eq!(st, 200, "{}", text(&body));
    assert_eq!(
        settled() - before,
        first,
        "the second listing within tag_ttl_secs asked the upstream again: {:#?}",
        up.seen()
    );

    // The hanging upstream: the listing answers (nothing listed there) after the short
    // referrers timeout, not after the client's 30 s timeout and retries; the next listing
    // does not ask it again.
    let listing = format!("/v2/hung/apps/web/referrers/{subject}");
    let started = Instant::now();
    let (st, _, body) = get(&c, &listing);
    assert_eq!(st, 200, "{}", text(&body));
    assert!(
        started.elapsed() < Duration::from_secs(25),
        "a hanging upstream stalled the listing for {:?}",
        started.elapsed()
    );
    let asked = connections();
    assert!(asked >= 1, "the hanging upstream was not asked");
    let (st, _, body) = get(&c, &listing);
    assert_eq!(st, 200, "{}", text(&body));
    assert_eq!(
        connections(),
        asked,
        "a failed upstream was asked again at once"
    );
    assert!(
        c.log_shows("upstream referrers unavailable"),
        "{}",
        c.log_tail()
    );
    drop((c, up, dist));
}

#[test]
fn ns_requests_are_rewritten_before_access_control() {
    let (d_up, d_cache) = (tempdir(), tempdir());
    let (dist, up, _img) = counted_upstream(d_up.path(), vec![]);
    let users = d_cache.path().join("htpasswd");
    std::fs::create_dir_all(d_cache.path()).unwrap();
    std::fs::write(
        &users,
        format!("alice:{}\n", bcrypt::hash("alice-pw", 4).unwrap()),
    )
    .unwrap();
    // alice may pull `central/apps/web` only.
    let c = cache(
        d_cache.path(),
        &format!(
            "[auth]\nhtpasswd = {:?}\n\n[[auth.acl]]\nsubjects = [\"alice\"]\nrepositories = [\"central/apps/web\"]\nactions = [\"pull\"]\n\n\
             [[proxy]]\nprefix = \"central\"\nupstreams = [\"http://{}\"]\n",
            s(&users),
            up.host()
        ),
    );
    let alice = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("alice:alice-pw")
    );
    let as_alice = |path: &str| {
        let (st, h, body) = http(
            c.addr,
            "GET",
            path,
            &[("Accept", MANIFEST_ACCEPT), ("Authorization", &alice)],
            b"",
        );
        let digest = h
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("docker-content-digest"))
            .map(|(_, v)| v.clone())
            .unwrap_or_default();
        (st, digest, body)
    };
    let ns = up.host();
    // Anonymous: refused, and the upstream is not asked.
    let (st, _, body) = get(&c, &format!("/v2/apps/web/manifests/1?ns={ns}"));
    assert_eq!(st, 401, "{}", text(&body));
    assert!(up.seen().is_empty(), "{:#?}", up.seen());
    // alice, for the repository she may pull: the ACL sees `central/apps/web`.
    let (st, d, body) = as_alice(&format!("/v2/apps/web/manifests/1?ns={ns}"));
    assert_eq!(st, 200, "{}\n{}", text(&body), c.log_tail());
    assert_eq!(d, sha256(&body));
    // alice, for one she may not: refused, no upstream content, the upstream not asked.
    for path in [
        format!("/v2/apps/other/manifests/1?ns={ns}"),
        format!("/v2/apps/other/manifests/{d}?ns={ns}"),
        "/v2/central/apps/other/manifests/1".to_owned(),
    ] {
        let (st, got, body) = as_alice(&path);
        assert!(matches!(st, 401 | 403), "{path}: {st} {}", text(&body));
        assert!(
            got.is_empty() && !text(&body).contains("layers"),
            "{path}: {}",
            text(&body)
        );
    }
    assert!(
        up.seen_for("apps/other").is_empty(),
        "a forbidden repository reached the upstream: {:#?}",
        up.seen()
    );
    drop((c, up, dist));
}
