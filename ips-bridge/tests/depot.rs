//! Round trip over HTTP: publish fixture packages into a file repository, serve it with the
//! depot server on a real socket, read it back with the depot client, and check that
//! manifests are identical to the file reader's and that payloads verify. A fault-injecting
//! proxy (real TCP) checks retries, denial, truncation and deflate encoding.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, UNIX_EPOCH};

use ips_bridge::{
    DepotClient, DepotError, DepotServer, FileRepo, Fmri, Manifest, PackageRef, PackageRepository,
    PayloadCache, RetryPolicy,
};

fn data() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/publish")
}

fn fixture_repo(root: &Path) -> FileRepo {
    let repo = FileRepo::create(root, "example.org").unwrap();
    let now = UNIX_EPOCH + Duration::from_secs(1_704_164_645);
    for (name, proto) in [
        ("base.p5m", None),
        ("hello.p5m", Some(data().join("proto"))),
    ] {
        let text = std::fs::read_to_string(data().join(name)).unwrap();
        repo.publish_at(
            "example.org",
            &Manifest::parse(&text).unwrap(),
            proto.as_deref(),
            now,
        )
        .unwrap();
    }
    repo
}

fn fast() -> RetryPolicy {
    RetryPolicy {
        attempts: 3,
        backoff: Duration::from_millis(10),
    }
}

#[test]
fn file_and_http_readers_agree_and_payloads_verify() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let server = DepotServer::start(repo.clone(), "127.0.0.1:0").unwrap();
    let client = DepotClient::connect(&server.url()).unwrap();
    assert!(client.server().starts_with("pkg-server"));
    assert_eq!(client.negotiate("file", &[0, 1]).unwrap(), 1);
    // Both search versions are served, as pkg.depotd serves them.
    assert_eq!(client.negotiate("search", &[0, 1]).unwrap(), 1);
    assert_eq!(client.negotiate("search", &[0]).unwrap(), 0);

    let over_http = client.packages("example.org").unwrap();
    let on_disk = repo.packages("example.org").unwrap();
    assert_eq!(over_http, on_disk);
    let cache = PayloadCache::new(tmp.path().join("cache"));
    for pkg in &over_http {
        assert_eq!(
            client.manifest_bytes(pkg).unwrap(),
            repo.manifest_bytes(pkg).unwrap(),
            "{}",
            pkg.fmri
        );
        let m = client.manifest(pkg).unwrap();
        let paths = client.fetch_all(&cache, &pkg.fmri, &m).unwrap();
        for (a, p) in m
            .actions()
            .iter()
            .filter(|a| a.kind().has_payload())
            .zip(&paths)
        {
            // The cached file is the stored payload, byte for byte.
            let stored = repo.payload_path("example.org", a.hash().unwrap()).unwrap();
            assert_eq!(std::fs::read(p).unwrap(), std::fs::read(stored).unwrap());
        }
    }
    let info = client.publisher_info("example.org").unwrap();
    assert_eq!(info["publishers"][0]["name"], "example.org");

    // Missing things are 404s naming the URL.
    let ghost = PackageRef {
        fmri: Fmri::parse("pkg://example.org/demo/ghost@1.0-1:20240101T000000Z").unwrap(),
        manifest_sha1: None,
    };
    match client.manifest_bytes(&ghost) {
        Err(DepotError::NotFound { url }) => {
            assert!(
                url.ends_with(
                    "/example.org/manifest/0/demo%2Fghost@1.0%2C5.11-1%3A20240101T000000Z"
                ),
                "{url}"
            )
        }
        r => panic!("{r:?}"),
    }
    // A publisher the depot does not serve: the error lists the ones it does.
    match client.catalog("other.org") {
        Err(e @ DepotError::UnknownPublisher { .. }) => assert_eq!(
            e.to_string(),
            format!(
                "{}: the depot does not serve publisher other.org; it serves publisher example.org",
                client.origin()
            )
        ),
        r => panic!("{r:?}"),
    }
    server.shutdown();
}

#[test]
fn corrupted_repository_content_is_reported_over_http() {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().join("repo");
    let repo = fixture_repo(&root);
    let pkg = repo.resolve(&Fmri::parse("demo/hello").unwrap()).unwrap();
    let m = repo.manifest(&pkg).unwrap();
    let bin = m
        .actions()
        .iter()
        .find(|a| a.key() == Some("usr/bin/hello"))
        .unwrap();
    let stored = repo
        .payload_path("example.org", bin.hash().unwrap())
        .unwrap();
    let mut other = Vec::new();
    ips_bridge::compress(&b"#!/bin/sh\necho evil\n"[..], &mut other).unwrap();
    std::fs::write(&stored, other).unwrap();

    let server = DepotServer::start(repo.clone(), "127.0.0.1:0").unwrap();
    let client = DepotClient::connect_with(&server.url(), fast()).unwrap();
    let cache = PayloadCache::new(tmp.path().join("cache"));
    match client.fetch_payload(&cache, &pkg.fmri, bin) {
        Err(e @ DepotError::Payload { .. }) => {
            let msg = e.to_string();
            assert!(
                msg.contains("demo/hello") && msg.contains("file usr/bin/hello"),
                "{msg}"
            );
        }
        r => panic!("{r:?}"),
    }
    assert!(
        !cache.path(bin.hash().unwrap()).exists(),
        "bad payloads are not cached"
    );

    let mpath = repo.manifest_path(&pkg.fmri).unwrap();
    let text = std::fs::read_to_string(&mpath).unwrap();
    std::fs::write(&mpath, text.replace("Hello, world", "Hello, moon")).unwrap();
    assert!(matches!(
        client.manifest(&pkg),
        Err(DepotError::ManifestCorrupt { .. })
    ));
}

/// What the proxy does to each request.
#[derive(Clone, Copy)]
enum Fault {
    /// Answer 503 to the first `n` requests, then proxy.
    FailFirst(usize),
    /// Cut the body of the first `n` responses short, then proxy.
    TruncateFirst(usize),
    /// Cut every payload (`file/`) response short.
    TruncateFiles,
    /// Always 403.
    Deny,
    /// Re-encode text responses with `Content-Encoding: deflate`.
    Deflate,
    /// Act as an old depot: advertise only `file 0` and `publisher 0`, and answer 404 to
    /// `file/1` and to publisher-prefixed paths.
    OldDepot,
}

/// A small HTTP/1.1 proxy in front of the real depot server that injects one fault.
fn fault_proxy(upstream: String, fault: Fault, hits: Arc<AtomicUsize>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let agent: ureq::Agent = ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into();
        for stream in listener.incoming() {
            let Ok(stream) = stream else { return };
            let n = hits.fetch_add(1, Ordering::SeqCst);
            let _ = serve_one(&agent, &upstream, fault, n, stream);
        }
    });
    format!("http://{addr}/")
}

fn serve_one(
    agent: &ureq::Agent,
    upstream: &str,
    fault: Fault,
    n: usize,
    mut stream: TcpStream,
) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line)?;
    loop {
        let mut line = String::new();
        reader.read_line(&mut line)?;
        if line == "\r\n" || line.is_empty() {
            break;
        }
    }
    let path = request_line.split_whitespace().nth(1).unwrap_or("/");
    if let Fault::OldDepot = fault {
        if path == "/versions/0/" {
            let doc = b"pkg-server old\nversions 0\ncatalog 1\nmanifest 0\nfile 0\npublisher 0\n";
            write!(
                stream,
                "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                doc.len()
            )?;
            return stream.write_all(doc);
        }
        if path.contains("/file/1/") || path.starts_with("/example.org/") {
            write!(
                stream,
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
            )?;
            return Ok(());
        }
    }
    let respond = |stream: &mut TcpStream, status: &str, headers: &str, body: &[u8], len: usize| {
        write!(
            stream,
            "HTTP/1.1 {status}\r\nContent-Length: {len}\r\nConnection: close\r\n{headers}\r\n"
        )?;
        stream.write_all(body)
    };
    match fault {
        Fault::Deny => return respond(&mut stream, "403 Forbidden", "", b"no\n", 3),
        Fault::FailFirst(k) if n < k => {
            return respond(&mut stream, "503 Service Unavailable", "", b"busy\n", 5);
        }
        _ => {}
    }
    let url = format!("{}{}", upstream.trim_end_matches('/'), path);
    let mut resp = agent
        .get(&url)
        .header("Accept-Encoding", "identity")
        .call()
        .map_err(std::io::Error::other)?;
    let status = resp.status();
    let status = format!(
        "{} {}",
        status.as_u16(),
        status.canonical_reason().unwrap_or("")
    );
    let mut body = Vec::new();
    resp.body_mut().as_reader().read_to_end(&mut body)?;
    match fault {
        Fault::TruncateFirst(k) if n < k => {
            let cut = body.len() / 2;
            respond(&mut stream, &status, "", &body[..cut], body.len())
        }
        Fault::TruncateFiles if path.contains("/file/") => {
            let cut = body.len() / 2;
            respond(&mut stream, &status, "", &body[..cut], body.len())
        }
        Fault::Deflate if !path.contains("/file/") => {
            let mut enc =
                flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
            enc.write_all(&body)?;
            let enc = enc.finish()?;
            respond(
                &mut stream,
                &status,
                "Content-Encoding: deflate\r\n",
                &enc,
                enc.len(),
            )
        }
        _ => respond(&mut stream, &status, "", &body, body.len()),
    }
}

#[test]
fn retries_transient_failures_and_truncated_bodies() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let server = DepotServer::start(repo.clone(), "127.0.0.1:0").unwrap();

    let hits = Arc::new(AtomicUsize::new(0));
    let proxy = fault_proxy(server.url(), Fault::FailFirst(2), hits.clone());
    let client = DepotClient::connect_with(&proxy, fast()).unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 3, "two 503s, then success");
    assert_eq!(client.packages("example.org").unwrap().len(), 2);

    // More failures than attempts: the last status is reported.
    let hits = Arc::new(AtomicUsize::new(0));
    let proxy = fault_proxy(server.url(), Fault::FailFirst(10), hits.clone());
    match DepotClient::connect_with(&proxy, fast()) {
        Err(DepotError::Status { status: 503, .. }) => {}
        r => panic!("{:?}", r.err()),
    }
    assert_eq!(hits.load(Ordering::SeqCst), 3);

    // A truncated body is retried.
    let hits = Arc::new(AtomicUsize::new(0));
    let proxy = fault_proxy(server.url(), Fault::TruncateFirst(1), hits.clone());
    let client = DepotClient::connect_with(&proxy, fast()).unwrap();
    assert_eq!(hits.load(Ordering::SeqCst), 2);
    let pkg = repo.resolve(&Fmri::parse("demo/hello").unwrap()).unwrap();
    let m = client.manifest(&pkg).unwrap();

    // Payloads that always arrive truncated fail after the retries and are never cached.
    let hits = Arc::new(AtomicUsize::new(0));
    let proxy = fault_proxy(server.url(), Fault::TruncateFiles, hits.clone());
    let client = DepotClient::connect_with(&proxy, fast()).unwrap();
    let cache = PayloadCache::new(tmp.path().join("cache"));
    let bin = m
        .actions()
        .iter()
        .find(|a| a.key() == Some("usr/bin/hello"))
        .unwrap();
    let before = hits.load(Ordering::SeqCst);
    match client.fetch_payload(&cache, &pkg.fmri, bin) {
        Err(DepotError::Body { url, .. }) => assert!(url.contains("/file/1/"), "{url}"),
        r => panic!("{r:?}"),
    }
    assert_eq!(hits.load(Ordering::SeqCst) - before, 3);
    assert!(!cache.path(bin.hash().unwrap()).exists());
    // Through a healthy path the same payload is fetched and cached.
    let client = DepotClient::connect_with(&server.url(), fast()).unwrap();
    client.fetch_payload(&cache, &pkg.fmri, bin).unwrap();
    assert!(cache.path(bin.hash().unwrap()).is_file());
}

#[test]
fn denial_is_final_and_deflate_is_decoded() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let server = DepotServer::start(repo.clone(), "127.0.0.1:0").unwrap();

    let hits = Arc::new(AtomicUsize::new(0));
    let proxy = fault_proxy(server.url(), Fault::Deny, hits.clone());
    match DepotClient::connect_with(&proxy, fast()) {
        Err(DepotError::Denied { status: 403, .. }) => {}
        r => panic!("{:?}", r.err()),
    }
    assert_eq!(hits.load(Ordering::SeqCst), 1, "403 is not retried");

    let hits = Arc::new(AtomicUsize::new(0));
    let proxy = fault_proxy(server.url(), Fault::Deflate, hits);
    let client = DepotClient::connect_with(&proxy, fast()).unwrap();
    let pkgs = client.packages("example.org").unwrap();
    for pkg in &pkgs {
        assert_eq!(
            client.manifest_bytes(pkg).unwrap(),
            repo.manifest_bytes(pkg).unwrap()
        );
    }
}

#[test]
fn old_depots_get_file_0_and_unprefixed_paths() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let server = DepotServer::start(repo.clone(), "127.0.0.1:0").unwrap();
    let proxy = fault_proxy(server.url(), Fault::OldDepot, Arc::new(AtomicUsize::new(0)));
    let client = DepotClient::connect_with(&proxy, fast()).unwrap();
    assert_eq!(client.negotiate("file", &[0, 1]).unwrap(), 0);
    let cache = PayloadCache::new(tmp.path().join("cache"));
    for pkg in client.packages("example.org").unwrap() {
        let m = client.manifest(&pkg).unwrap();
        client.fetch_all(&cache, &pkg.fmri, &m).unwrap();
    }
}

/// Resolves a partial FMRI and collects every payload's content through the trait.
fn contents_of<R: PackageRepository>(repo: &R, pattern: &str) -> Vec<(String, Vec<u8>)> {
    let pkg = repo
        .find(&Fmri::parse(pattern).unwrap())
        .unwrap()
        .expect("package found");
    let m = repo.manifest(&pkg).unwrap();
    m.actions()
        .iter()
        .filter(|a| a.kind().has_payload())
        .map(|a| {
            let mut out = Vec::new();
            repo.payload(&pkg.fmri, a, &mut out).unwrap();
            (a.key().unwrap().to_owned(), out)
        })
        .collect()
}

#[test]
fn file_and_depot_repositories_are_interchangeable() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let server = DepotServer::start(repo.clone(), "127.0.0.1:0").unwrap();
    let plain = DepotClient::connect(&server.url()).unwrap();
    assert_eq!(
        PackageRepository::default_publisher(&plain)
            .unwrap()
            .as_deref(),
        Some("example.org")
    );
    let cached = DepotClient::connect(&server.url())
        .unwrap()
        .with_cache(PayloadCache::new(tmp.path().join("cache")));
    let from_disk = contents_of(&repo, "demo/hello@1.0");
    assert_eq!(from_disk.len(), 4);
    assert_eq!(contents_of(&plain, "demo/hello@1.0"), from_disk);
    assert_eq!(contents_of(&cached, "demo/hello@1.0"), from_disk);
    assert!(
        repo.find(&Fmri::parse("demo/hello@2").unwrap())
            .unwrap()
            .is_none()
    );
    assert!(
        plain
            .find(&Fmri::parse("demo/nothing").unwrap())
            .unwrap()
            .is_none()
    );
}

#[test]
fn server_answers_status_publisher_and_rejects_writes() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    // A second publisher in the same repository.
    let text = "set name=pkg.fmri value=pkg:/other/tool@1-1:20240101T000000Z\n";
    repo.publish("other.org", &Manifest::parse(text).unwrap(), None)
        .unwrap();
    let server = DepotServer::start(repo.clone(), "127.0.0.1:0").unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let get = |path: &str| -> (u16, String) {
        let mut r = agent.get(format!("{}{path}", server.url())).call().unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    };
    let (code, body) = get("status/0");
    assert_eq!(code, 200);
    let status: serde_json::Value = serde_json::from_str(&body).unwrap();
    let pubs = &status["repository"]["publishers"];
    assert_eq!(pubs["example.org"]["package-version-count"], 2);
    assert_eq!(pubs["other.org"]["package-count"], 1);
    assert!(pubs["example.org"]["last-catalog-update"].is_string());
    let (_, body) = get("publisher/1");
    let all: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(all["publishers"].as_array().unwrap().len(), 2);
    let (_, body) = get("other.org/publisher/0");
    let one: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(one["publishers"][0]["name"], "other.org");
    // The second publisher's packages are reachable with the publisher prefix.
    let client = DepotClient::connect(&server.url()).unwrap();
    assert_eq!(client.packages("other.org").unwrap().len(), 1);
    // Unknown operations, versions and traversal attempts are 404s; writes are refused.
    for path in [
        "search/2/x",
        "catalog/0/catalog.attrs",
        "catalog/1/..%2Fpkg5.repository",
        "file/1/..",
        "manifest/0/..%2F..%2Fpkg5.repository",
    ] {
        assert_eq!(get(path).0, 404, "{path}");
    }
    let r = agent
        .post(format!("{}example.org/open/0/x", server.url()))
        .send("")
        .unwrap();
    assert_eq!(r.status().as_u16(), 405);
}

#[test]
fn matching_lists_every_matching_version_from_either_reader() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let text = "set name=pkg.fmri value=pkg:/demo/hello@1.1-1:20240201T000000Z\n";
    repo.publish("example.org", &Manifest::parse(text).unwrap(), None)
        .unwrap();
    let server = DepotServer::start(repo.clone(), "127.0.0.1:0").unwrap();
    let client = DepotClient::connect(&server.url()).unwrap();
    let names = |refs: Vec<PackageRef>| -> Vec<String> {
        refs.iter().map(|p| p.fmri.to_string()).collect()
    };
    let pats = |s: &[&str]| -> Vec<Fmri> { s.iter().map(|p| Fmri::parse(p).unwrap()).collect() };

    let all = names(repo.matching(&[]).unwrap());
    assert_eq!(all.len(), 3, "{all:?}");
    assert!(all[0].contains("/demo/base@"), "{all:?}");
    assert!(all[1].contains("/demo/hello@1.0,"), "{all:?}");
    assert!(all[2].contains("/demo/hello@1.1,"), "{all:?}");
    assert_eq!(names(client.matching(&[]).unwrap()), all);

    let hello = pats(&["demo/hello", "demo/hello@1.1"]);
    let found = names(repo.matching(&hello).unwrap());
    assert_eq!(found, all[1..].to_vec(), "duplicates removed");
    assert_eq!(names(client.matching(&hello).unwrap()), found);
    assert!(repo.matching(&pats(&["demo/nothing"])).unwrap().is_empty());
    let base = pats(&["pkg://example.org/demo/base"]);
    assert_eq!(names(repo.matching(&base).unwrap()), all[..1].to_vec());
}

/// A CA and a server certificate for 127.0.0.1 signed by it, written as `ca.pem`,
/// `server.crt` (leaf then CA) and `server.key` in `dir`.
fn pki(dir: &Path) -> (PathBuf, ips_bridge::ServerTls) {
    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};
    let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
    let key = KeyPair::generate().unwrap();
    let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca)
        .unwrap();
    std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
    std::fs::write(
        dir.join("server.crt"),
        format!("{}{}", leaf.pem(), ca.pem()),
    )
    .unwrap();
    std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    let tls =
        ips_bridge::ServerTls::from_pem_files(&dir.join("server.crt"), &dir.join("server.key"))
            .unwrap();
    (dir.join("ca.pem"), tls)
}

#[test]
fn https_depot_is_trusted_through_a_ca_file_a_certs_d_entry_or_insecure() {
    use ips_bridge::{TlsProblem, TlsSettings};
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let (ca, tls) = pki(tmp.path());
    let server = DepotServer::start_tls(repo.clone(), "127.0.0.1:0", &tls).unwrap();
    let url = server.url();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");

    // The system's roots do not know the test CA: a certificate error naming the URL.
    let started = std::time::Instant::now();
    match DepotClient::connect(&url) {
        Err(e @ DepotError::Tls { .. }) => {
            let DepotError::Tls { problem, .. } = &e else {
                unreachable!()
            };
            assert_eq!(*problem, TlsProblem::Certificate);
            let text = e.to_string();
            assert!(
                text.starts_with(&url) && text.contains("tls failure"),
                "{text}"
            );
        }
        other => panic!("expected a TLS error, got {:?}", other.err()),
    }
    assert!(started.elapsed() < Duration::from_secs(5), "not retried");

    let with = |settings: TlsSettings| {
        let client = DepotClient::builder(&url).tls(settings).connect().unwrap();
        // Catalog, manifest and a payload, all over TLS through the relay.
        let pkg = client
            .find(&Fmri::parse("demo/hello").unwrap())
            .unwrap()
            .expect("demo/hello is published");
        let manifest = client.manifest(&pkg).unwrap();
        let file = manifest
            .actions()
            .iter()
            .find(|a| a.kind() == ips_bridge::ActionKind::File)
            .expect("hello has a file");
        let mut out = Vec::new();
        client.payload(&pkg.fmri, file, &mut out).unwrap();
        assert!(!out.is_empty());
    };
    with(TlsSettings {
        ca_files: vec![ca.clone()],
        ..TlsSettings::default()
    });
    let certs_d = tmp.path().join("certs.d");
    let host = certs_d.join(server.local_addr().to_string());
    std::fs::create_dir_all(&host).unwrap();
    std::fs::copy(&ca, host.join("ca.crt")).unwrap();
    with(TlsSettings {
        cert_dirs: vec![tmp.path().join("absent"), certs_d],
        ..TlsSettings::default()
    });
    with(TlsSettings {
        insecure: true,
        ..TlsSettings::default()
    });
}

#[test]
fn https_to_a_plain_http_depot_fails_after_one_connect_timeout_suggesting_http() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let server = DepotServer::start(repo, "127.0.0.1:0").unwrap();
    let url = server.url().replacen("http://", "https://", 1);
    // tiny_http waits for the end of a request line that the ClientHello never sends, so
    // the handshake ends with the connect timeout (shortened here; 10 s by default), once:
    // it is not retried.
    let started = std::time::Instant::now();
    let e = DepotClient::builder(&url)
        .connect_timeout(Duration::from_secs(1))
        .connect()
        .err()
        .expect("not TLS");
    assert!(started.elapsed() < Duration::from_secs(3), "{e}");
    let text = e.to_string();
    assert!(
        text.starts_with(&url) && text.contains("tls failure") && text.contains(&server.url()),
        "{text}"
    );
}

#[test]
fn a_server_that_never_answers_the_handshake_fails_after_the_connect_timeout() {
    // Accepts connections and reads nothing: the client's handshake gets no answer.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let held = std::thread::spawn(move || listener.accept().map(|(s, _)| s));
    let url = format!("https://{addr}/");
    let started = std::time::Instant::now();
    let e = DepotClient::builder(&url)
        .connect_timeout(Duration::from_millis(500))
        .connect()
        .err()
        .expect("no answer");
    let elapsed = started.elapsed();
    assert!(elapsed < Duration::from_secs(3), "{elapsed:?}: {e}");
    assert!(
        matches!(
            e,
            DepotError::Tls {
                problem: ips_bridge::TlsProblem::Timeout,
                ..
            }
        ),
        "{e:?}"
    );
    assert!(e.to_string().starts_with(&url), "{e}");
    drop(held.join());
}

#[test]
fn a_bad_ca_file_fails_when_the_client_is_built_naming_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let bad = tmp.path().join("ca.pem");
    std::fs::write(&bad, "-----BEGIN CERTIFICATE-----\nnot base64!\n").unwrap();
    let e = DepotClient::builder("https://depot.invalid/")
        .tls(ips_bridge::TlsSettings {
            ca_files: vec![bad.clone()],
            ..Default::default()
        })
        .connect()
        .err()
        .expect("a bad CA file");
    assert!(matches!(e, DepotError::TlsFile { .. }), "{e:?}");
    let chain = format!("{e}: {}", std::error::Error::source(&e).unwrap());
    assert!(chain.contains(&bad.display().to_string()), "{chain}");
}

#[test]
fn server_answers_search_by_basename_path_package_name_and_pkgs_query_language() {
    let tmp = tempfile::tempdir().unwrap();
    let repo = fixture_repo(&tmp.path().join("repo"));
    let server = DepotServer::start(repo, "127.0.0.1:0").unwrap();
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let get = |query: &str| -> (u16, String) {
        let url = format!("{}search/1/{}", server.url(), ips_bridge::quote(query));
        let mut r = agent.get(url).call().unwrap();
        (r.status().as_u16(), r.body_mut().read_to_string().unwrap())
    };
    let hello = "pkg:/demo/hello@1.0,5.11-2024.0.1:20240102T030405Z";
    // Actions: pkg's first line, then query number, return type, package, value, action.
    let (code, body) = get("False_2_None_None_HELLO");
    assert_eq!(code, 200, "{body}");
    let lines: Vec<&str> = body.lines().collect();
    assert_eq!(lines[0], "Return from search v1");
    let file = lines
        .iter()
        .find(|l| l.starts_with(&format!("0 2 {hello} basename file ")))
        .unwrap_or_else(|| panic!("no file action in\n{body}"));
    assert!(file.contains(" path=usr/bin/hello "), "{body}");
    // The package name matches too (its last component), as pkg's index has it.
    assert!(
        body.contains(&format!(
            "0 2 {hello} example.org/demo/hello set name=pkg.fmri "
        )),
        "{body}"
    );
    let (code, body) = get("False_2_None_None_/usr/bin/hello");
    assert_eq!(code, 200, "{body}");
    assert!(body.contains(&format!("0 2 {hello} path file ")), "{body}");
    // Packages, as `pkg search -p` asks; structured terms and globs.
    let (_, body) = get("False_1_None_None_p<:::hel*>");
    assert_eq!(body, format!("Return from search v1\n0 1 {hello}\n"));
    let (_, body) = get("False_2_None_None_set:pkg.fmri:demo/base");
    assert!(
        body.contains("0 2 pkg:/demo/base@1.0,5.11-2024.0.1:20240102T030405Z example.org/demo/base set name=pkg.fmri"),
        "{body}"
    );
    let (_, body) = get("False_2_None_None_dir:basename:hello");
    assert_eq!(body, "", "no dir is called hello");
    // Nothing found is 204; a case-sensitive query is case-sensitive.
    assert_eq!(get("False_2_None_None_nothing").0, 204);
    assert_eq!(get("True_2_None_None_HELLO").0, 204);
    // AND: the second term is searched within the actions the first found (no action of
    // hello has both tokens, one action has `hello` and `/usr/bin/hello`).
    assert_eq!(get("False_2_None_None_hello AND bin").0, 204);
    let (code, body) = get("False_2_None_None_(:::hello AND :::/usr/bin/hello)");
    assert_eq!((code, body.lines().count()), (200, 2), "{body}");
    assert!(
        body.contains(&format!("0 2 {hello} basename file ")),
        "{body}"
    );
    // Packages having both; either.
    let (_, body) = get("False_1_None_None_hello base");
    assert_eq!(body, "", "no package has both");
    let (_, body) = get("False_1_None_None_hello OR base");
    assert_eq!(body.lines().count(), 3, "{body}");
    // Bad queries are 400 with pkg's reason; search/0 answers old clients' format.
    for bad in [
        "False_2_None_None_(hello",
        "False_2_None_None_p<a> b",
        "False_9_None_None_a",
    ] {
        let (code, body) = get(bad);
        assert_eq!(code, 400, "{bad}: {body}");
        assert!(
            body.contains("query") || body.contains("results"),
            "{bad}: {body}"
        );
    }
    let url = format!("{}search/0/hello", server.url());
    let body = agent
        .get(url)
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .unwrap();
    assert!(
        body.lines()
            .any(|l| l == format!("basename {hello} file usr/bin/hello")),
        "{body}"
    );
}
