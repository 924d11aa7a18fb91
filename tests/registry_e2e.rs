//! `rdctl registry serve` end to end: the official OCI conformance suite, real clients (crane,
//! oras), `kill -9` in the middle of a chunked upload, and graceful shutdown on SIGTERM.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use crate::util::{Server, ok, root, s, tail, tempdir, tool};

/// One HTTP/1.1 exchange over a fresh connection (Connection: close).
pub(crate) fn http(
    addr: SocketAddr,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> (u16, Vec<(String, String)>, Vec<u8>) {
    let mut c = TcpStream::connect(addr).expect("connect to the registry");
    c.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut req = format!(
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\nContent-Length: {}\r\n",
        body.len()
    );
    for (k, v) in headers {
        req.push_str(&format!("{k}: {v}\r\n"));
    }
    req.push_str("\r\n");
    c.write_all(req.as_bytes()).unwrap();
    c.write_all(body).unwrap();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head");
    let head = String::from_utf8_lossy(&raw[..split]).into_owned();
    let mut lines = head.lines();
    let status: u16 = lines
        .next()
        .unwrap()
        .split_whitespace()
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.trim().to_ascii_lowercase(), v.trim().to_owned()))
        .collect();
    (status, headers, raw[split + 4..].to_vec())
}

pub(crate) fn header<'a>(h: &'a [(String, String)], name: &str) -> &'a str {
    h.iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
        .unwrap_or_else(|| panic!("no {name} header in {h:?}"))
}

/// Attribute `name="N"` of the first `<testsuite` element of a JUnit report.
fn junit_count(xml: &str, name: &str) -> u64 {
    let suite = &xml[xml.find("<testsuite ").expect("a <testsuite> element")..];
    let suite = &suite[..suite.find('>').unwrap()];
    let key = format!(" {name}=\"");
    suite
        .find(&key)
        .map(|i| {
            let v = &suite[i + key.len()..];
            v[..v.find('"').unwrap()].parse().unwrap()
        })
        .unwrap_or(0)
}

#[test]
fn registry_passes_the_oci_conformance_suite() {
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    conformance(&server.host(), "conformance-results", &|| server.log_tail());
}

/// Runs the official conformance suite (all workflows, OCI 1.1, sha512 too) against the
/// registry at `host` and fails the test unless it reports 0 failures. The report (junit.xml,
/// report.html, results.yaml) is kept for CI as an artifact in `target/<results>`.
pub(crate) fn conformance(host: &str, results: &str, log_tail: &dyn Fn() -> String) {
    conformance_at(&format!("http://{host}"), results, &[], log_tail);
}

/// [`conformance`] against `root_url` (`http://` or `https://`, which the suite verifies),
/// with extra environment for the suite.
pub(crate) fn conformance_at(
    root_url: &str,
    results: &str,
    env: &[(&str, &str)],
    log_tail: &dyn Fn() -> String,
) {
    let mut suite = tool("conformance.test");
    let results = root().join("target").join(results);
    let _ = std::fs::remove_dir_all(&results);
    std::fs::create_dir_all(&results).unwrap();
    let out = suite
        .current_dir(&results)
        .env("OCI_ROOT_URL", root_url)
        .env("OCI_NAMESPACE", "conformance/repo1")
        .env("OCI_CROSSMOUNT_NAMESPACE", "conformance/repo2")
        .env("OCI_TEST_PULL", "1")
        .env("OCI_TEST_PUSH", "1")
        .env("OCI_TEST_CONTENT_DISCOVERY", "1")
        .env("OCI_TEST_CONTENT_MANAGEMENT", "1")
        .env("OCI_VERSION", "1.1")
        .env("OCI_DATA_SHA512", "true")
        // The 1.1+dev APIs the registry implements as well.
        .env("OCI_API_BLOBS_UPLOAD_CANCEL", "true")
        .env("OCI_API_BLOBS_DIGEST_HEADER", "true")
        .env("OCI_API_MANIFESTS_DIGEST_HEADER", "true")
        .env("OCI_API_MANIFESTS_TAG_PARAM", "true")
        .env("OCI_RESULTS_DIR", &results)
        .env("OCI_LOG", "warn")
        .envs(env.iter().copied())
        .output()
        .expect("run conformance.test");
    let junit = std::fs::read_to_string(results.join("junit.xml")).unwrap_or_else(|e| {
        panic!(
            "conformance.test wrote no junit.xml ({e}); stdout:\n{}\nstderr:\n{}",
            tail(&out.stdout),
            tail(&out.stderr)
        )
    });
    let (tests, failures, errors, disabled) = (
        junit_count(&junit, "tests"),
        junit_count(&junit, "failures"),
        junit_count(&junit, "errors"),
        junit_count(&junit, "disabled"),
    );
    eprintln!(
        "OCI conformance: {tests} tests, {failures} failures, {errors} errors, {disabled} disabled; report in {}",
        results.display()
    );
    assert!(
        out.status.success() && failures == 0 && errors == 0 && tests > 500,
        "conformance failed ({tests} tests, {failures} failures, {errors} errors)\nsuite output:\n{}\n{}\nregistry log:\n{}",
        tail(&out.stdout),
        tail(&out.stderr),
        log_tail()
    );
}

#[test]
fn crane_and_oras_push_pull_and_discover() {
    let data = tempdir();
    let work = tempdir();
    let server = Server::start(data.path(), &[]);
    let reg = server.host();

    // crane: push an image built from a layer tarball, then ls, digest, pull, copy, delete.
    let layer = work.path().join("layer.tar");
    {
        let mut b = tar::Builder::new(std::fs::File::create(&layer).unwrap());
        let content = b"hello from crane\n";
        let mut h = tar::Header::new_gnu();
        h.set_size(content.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(0);
        h.set_cksum();
        b.append_data(&mut h, "etc/motd", &content[..]).unwrap();
        b.finish().unwrap();
    }
    let img = format!("{reg}/crane/img:v1");
    ok(tool("crane").args(["append", "--insecure", "-f", s(&layer), "-t", &img]));
    let ls = ok(tool("crane").args(["ls", "--insecure", &format!("{reg}/crane/img")]));
    assert_eq!(String::from_utf8_lossy(&ls.stdout).trim(), "v1");
    let digest = ok(tool("crane").args(["digest", "--insecure", &img]));
    let digest = String::from_utf8(digest.stdout).unwrap().trim().to_owned();
    assert!(digest.starts_with("sha256:"), "{digest}");
    let pulled = work.path().join("pulled.tar");
    ok(tool("crane").args(["pull", "--insecure", "--format", "oci", &img, s(&pulled)]));
    ok(tool("crane").args(["copy", "--insecure", &img, &format!("{reg}/crane/copy:v2")]));
    let copy_digest =
        ok(tool("crane").args(["digest", "--insecure", &format!("{reg}/crane/copy:v2")]));
    assert_eq!(String::from_utf8_lossy(&copy_digest.stdout).trim(), digest);
    let exported = ok(tool("crane").args(["export", "--insecure", &img, "-"]));
    let mut ar = tar::Archive::new(&exported.stdout[..]);
    let mut found = false;
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        if e.path().unwrap().to_str() == Some("etc/motd") {
            let mut text = String::new();
            e.read_to_string(&mut text).unwrap();
            assert_eq!(text, "hello from crane\n");
            found = true;
        }
    }
    assert!(found, "the pulled image lacks the pushed file");
    ok(tool("crane").args(["delete", "--insecure", &format!("{reg}/crane/img@{digest}")]));
    let gone = tool("crane")
        .args(["digest", "--insecure", &img])
        .output()
        .unwrap();
    assert!(
        !gone.status.success(),
        "the tag survived deleting its manifest"
    );

    // oras: push an artifact, attach a signature with a subject, discover it, pull both.
    let art = work.path().join("artifact.txt");
    std::fs::write(&art, "artifact body\n").unwrap();
    let sig = work.path().join("sig.txt");
    std::fs::write(&sig, "signature\n").unwrap();
    let target = format!("{reg}/oras/art:v1");
    ok(tool("oras").current_dir(work.path()).args([
        "push",
        "--plain-http",
        &target,
        "artifact.txt:text/plain",
    ]));
    ok(tool("oras").current_dir(work.path()).args([
        "attach",
        "--plain-http",
        "--artifact-type",
        "application/vnd.example.sig",
        &target,
        "sig.txt:text/plain",
    ]));
    let disc = ok(tool("oras").args(["discover", "--plain-http", "--format", "json", &target]));
    let text = String::from_utf8_lossy(&disc.stdout);
    assert!(
        text.contains("application/vnd.example.sig"),
        "oras discover found no referrer:\n{text}"
    );
    let out = work.path().join("out");
    ok(tool("oras").args(["pull", "--plain-http", &target, "-o", s(&out)]));
    assert_eq!(
        std::fs::read_to_string(out.join("artifact.txt")).unwrap(),
        "artifact body\n"
    );
    drop(server);
}

#[test]
fn kill_9_during_a_chunked_upload_then_resume_and_sigterm() {
    let data = tempdir();
    let blob: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let digest = validator::Digest::sha256(&blob);
    let mut first = Server::start(data.path(), &[]);
    let (st, h, _) = http(
        first.addr,
        "POST",
        "/v2/crash/test/blobs/uploads/",
        &[],
        b"",
    );
    assert_eq!(st, 202);
    let loc = header(&h, "location").to_owned();
    let (st, h, _) = http(
        first.addr,
        "PATCH",
        &loc,
        &[
            ("Content-Range", "0-999999"),
            ("Content-Type", "application/octet-stream"),
        ],
        &blob[..1_000_000],
    );
    assert_eq!(st, 202);
    assert_eq!(header(&h, "range"), "0-999999");
    // A second chunk is half sent when the server dies.
    let mut c = TcpStream::connect(first.addr).unwrap();
    let head = format!(
        "PATCH {loc} HTTP/1.1\r\nHost: x\r\nContent-Range: 1000000-1999999\r\nContent-Length: 1000000\r\nContent-Type: application/octet-stream\r\n\r\n"
    );
    c.write_all(head.as_bytes()).unwrap();
    c.write_all(&blob[1_000_000..1_500_000]).unwrap();
    c.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    first.signal("-KILL");
    assert!(
        first.wait(Duration::from_secs(10)).is_some(),
        "kill -9 did not stop the registry"
    );
    drop(c);

    let mut second = Server::start(data.path(), &[]);
    let (st, h, _) = http(second.addr, "GET", &loc, &[], b"");
    assert_eq!(st, 204, "the upload did not survive the restart");
    assert_eq!(
        header(&h, "range"),
        "0-999999",
        "the half-sent chunk must not count"
    );
    let (st, h, _) = http(
        second.addr,
        "PATCH",
        &loc,
        &[("Content-Range", "1000000-2499999")],
        &blob[1_000_000..2_500_000],
    );
    assert_eq!(st, 202, "{}", second.log_tail());
    assert_eq!(header(&h, "range"), "0-2499999");
    let (st, h, _) = http(
        second.addr,
        "PUT",
        &format!("{loc}?digest={digest}"),
        &[("Content-Range", "2500000-2999999")],
        &blob[2_500_000..],
    );
    assert_eq!(st, 201, "{}", second.log_tail());
    assert_eq!(header(&h, "docker-content-digest"), digest.as_str());
    let (st, h, body) = http(
        second.addr,
        "GET",
        &format!("/v2/crash/test/blobs/{digest}"),
        &[],
        b"",
    );
    assert_eq!(st, 200);
    assert_eq!(header(&h, "content-length"), "3000000");
    assert_eq!(
        validator::Digest::sha256(&body),
        digest,
        "the resumed blob does not verify"
    );

    second.signal("-TERM");
    let st = second
        .wait(Duration::from_secs(15))
        .expect("SIGTERM did not stop the registry");
    assert!(
        st.success(),
        "registry exited with {st} after SIGTERM; log:\n{}",
        second.log_tail()
    );
    assert!(second.log_tail().contains("registry stopped"));
}

#[test]
fn skopeo_copies_layout_to_registry_and_back_then_umoci_unpacks() {
    let dir = tempdir();
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let reg = server.host();
    // A layout with one real layer, made by umoci 0.6.
    let img = dir.path().join("img");
    let umoci = "umoci-0.6";
    ok(tool(umoci).args(["init", "--layout", s(&img)]));
    ok(tool(umoci).args(["new", "--image", &format!("{}:base", s(&img))]));
    let src = dir.path().join("motd");
    std::fs::write(&src, "hello through the registry\n").unwrap();
    ok(tool(umoci).args([
        "insert",
        "--rootless",
        "--image",
        &format!("{}:base", s(&img)),
        "--tag",
        "v1",
        s(&src),
        "/etc/motd",
    ]));
    // layout → registry
    let remote = format!("docker://{reg}/skopeo/img:v1");
    ok(tool("skopeo")
        .args(["--insecure-policy", "copy", "--dest-tls-verify=false"])
        .arg(format!("oci:{}:v1", s(&img)))
        .arg(&remote));
    let inspect = ok(tool("skopeo").args(["inspect", "--tls-verify=false", "--raw", &remote]));
    let manifest: serde_json::Value =
        serde_json::from_slice(&inspect.stdout).expect("a JSON manifest");
    assert_eq!(manifest["layers"].as_array().map(Vec::len), Some(1));
    let digest = validator::Digest::sha256(&inspect.stdout);
    // registry → layout
    let back = dir.path().join("back");
    ok(tool("skopeo")
        .args(["--insecure-policy", "copy", "--src-tls-verify=false"])
        .arg(&remote)
        .arg(format!("oci:{}:v1", s(&back))));
    // umoci unpacks what came back, and the file is there.
    let root = dir.path().join("root");
    ok(tool(umoci).args([
        "raw",
        "unpack",
        "--rootless",
        "--image",
        &format!("{}:v1", s(&back)),
        s(&root),
    ]));
    assert_eq!(
        std::fs::read_to_string(root.join("etc/motd")).unwrap(),
        "hello through the registry\n"
    );
    // delete by digest: the tag goes with it.
    ok(tool("skopeo").args([
        "delete",
        "--tls-verify=false",
        &format!("docker://{reg}/skopeo/img@{digest}"),
    ]));
    let gone = tool("skopeo")
        .args(["inspect", "--tls-verify=false", "--raw", &remote])
        .output()
        .unwrap();
    assert!(
        !gone.status.success(),
        "the manifest is still there after skopeo delete"
    );
    drop(server);
}

#[test]
fn sigterm_drains_in_flight_requests_within_the_bound() {
    let data = tempdir();
    let mut server = Server::start_with_env(
        data.path(),
        &[("RDCTL_REGISTRY_SHUTDOWN_TIMEOUT_SECS", "2")],
    );
    let (st, h, _) = http(server.addr, "POST", "/v2/drain/blobs/uploads/", &[], b"");
    assert_eq!(st, 202);
    let loc = header(&h, "location").to_owned();
    // A PATCH that never finishes sending its body: it is in flight when SIGTERM arrives.
    let mut stuck = TcpStream::connect(server.addr).unwrap();
    let head = format!("PATCH {loc} HTTP/1.1\r\nHost: x\r\nContent-Length: 1000000\r\n\r\n");
    stuck.write_all(head.as_bytes()).unwrap();
    stuck.write_all(&[1u8; 1000]).unwrap();
    stuck.flush().unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let t = Instant::now();
    server.signal("-TERM");
    let st = server
        .wait(Duration::from_secs(10))
        .expect("the registry did not stop after SIGTERM");
    let took = t.elapsed();
    assert!(st.success(), "exit {st}; log:\n{}", server.log_tail());
    assert!(
        took >= Duration::from_millis(1500) && took < Duration::from_secs(6),
        "drain took {took:?}, the bound is 2 s; log:\n{}",
        server.log_tail()
    );
    assert!(
        server.log_tail().contains("shutdown timeout"),
        "{}",
        server.log_tail()
    );
    // New connections are refused once it stopped.
    assert!(TcpStream::connect(server.addr).is_err());
    drop(stuck);
}

/// `registry serve` on a port that is taken fails naming the address, and creates nothing in
/// its data directory.
#[test]
fn serve_on_a_taken_port_fails_and_creates_nothing() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempdir();
    let data = dir.path().join("data");
    let out = crate::util::rdctl()
        .args(["registry", "serve", "--listen", &addr, "--data", s(&data)])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "{}", tail(&out.stderr));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains(&addr), "{err}");
    assert!(!data.exists(), "the data directory was created");
}
