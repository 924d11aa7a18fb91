//! The registry over TLS and with a rate limit, end to end with real clients: ALPN offers h2
//! and HTTP/1.1, SIGHUP swaps the certificate for new connections while open ones keep
//! theirs, a bad file on reload keeps the old certificate, startup errors name the file, the
//! official conformance suite and skopeo, oras and crane trust a custom CA, and a client over
//! its rate gets 429 `TOOMANYREQUESTS` with `Retry-After` and gets through after waiting.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, IsCa, KeyPair, KeyUsagePurpose,
};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};

use crate::registry_e2e::{conformance_at, header, http};
use crate::util::{Server, ok, rdctl, s, tail, tempdir, tool};

/// A test CA that issues server certificates for 127.0.0.1 and localhost (also used by
/// `depot_tls`).
pub(crate) struct Pki {
    dir: PathBuf,
    ca: CertifiedIssuer<'static, KeyPair>,
}

impl Pki {
    pub(crate) fn new(dir: &Path) -> Pki {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, "rdctl test CA");
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        Pki {
            dir: dir.to_owned(),
            ca,
        }
    }

    /// The CA certificate file.
    pub(crate) fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }

    /// Writes `server.crt` (leaf then CA: a chain) and `server.key` with this serial, each
    /// through a rename so the server never reads half a file. Returns the leaf's DER.
    pub(crate) fn issue(&self, serial: u64) -> CertificateDer<'static> {
        let key = KeyPair::generate().unwrap();
        let mut params =
            CertificateParams::new(vec!["localhost".to_owned(), "127.0.0.1".to_owned()]).unwrap();
        params.serial_number = Some(serial.into());
        params
            .distinguished_name
            .push(DnType::CommonName, format!("registry {serial}"));
        let cert = params.signed_by(&key, &self.ca).unwrap();
        let chain = format!("{}{}", cert.pem(), self.ca.pem());
        for (name, text) in [("server.crt", chain), ("server.key", key.serialize_pem())] {
            let tmp = self.dir.join(format!("{name}.tmp"));
            std::fs::write(&tmp, text).unwrap();
            std::fs::rename(&tmp, self.dir.join(name)).unwrap();
        }
        cert.der().clone()
    }

    pub(crate) fn cert(&self) -> PathBuf {
        self.dir.join("server.crt")
    }

    pub(crate) fn key(&self) -> PathBuf {
        self.dir.join("server.key")
    }

    /// A registry.toml serving TLS with these files, plus `extra` TOML.
    fn config(&self, extra: &str) -> PathBuf {
        let path = self.dir.join("registry.toml");
        std::fs::write(
            &path,
            format!(
                "{extra}\n[tls]\ncert = {:?}\nkey = {:?}\n",
                s(&self.cert()),
                s(&self.key())
            ),
        )
        .unwrap();
        path
    }
}

/// A TLS client connection trusting only `ca`, offering the ALPN protocols `alpn`.
type Tls = rustls::StreamOwned<rustls::ClientConnection, TcpStream>;

fn connect(addr: SocketAddr, ca: &Path, alpn: &[&[u8]]) -> Tls {
    let mut roots = rustls::RootCertStore::empty();
    for c in CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let mut config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    let conn =
        rustls::ClientConnection::new(Arc::new(config), ServerName::IpAddress(addr.ip().into()))
            .unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    // Finish the handshake now, so the peer certificate and ALPN are known.
    while tls.conn.is_handshaking() {
        tls.conn
            .complete_io(&mut tls.sock)
            .expect("TLS handshake with the registry");
    }
    tls
}

/// The leaf certificate the server presented on this connection.
fn peer_leaf(tls: &Tls) -> CertificateDer<'static> {
    tls.conn.peer_certificates().expect("a server certificate")[0].clone()
}

/// One HTTP/1.1 GET on a kept-alive connection; returns status and body.
fn get(conn: &mut BufReader<Tls>, path: &str) -> (u16, Vec<u8>) {
    let req = format!("GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n");
    conn.get_mut().write_all(req.as_bytes()).unwrap();
    conn.get_mut().flush().unwrap();
    let mut status_line = String::new();
    conn.read_line(&mut status_line).unwrap();
    let status = status_line
        .split_whitespace()
        .nth(1)
        .unwrap_or_else(|| panic!("no status line: {status_line:?}"))
        .parse()
        .unwrap();
    let mut len = 0usize;
    loop {
        let mut line = String::new();
        conn.read_line(&mut line).unwrap();
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((k, v)) = line.split_once(':')
            && k.eq_ignore_ascii_case("content-length")
        {
            len = v.trim().parse().unwrap();
        }
    }
    let mut body = vec![0; len];
    conn.read_exact(&mut body).unwrap();
    (status, body)
}

/// Waits until the server's log contains `needle` (after `skip` earlier occurrences).
fn wait_for_log(server: &Server, needle: &str, count: usize) {
    let until = Instant::now() + Duration::from_secs(10);
    while server.log_tail().matches(needle).count() < count {
        assert!(
            Instant::now() < until,
            "no {needle:?} in the log:\n{}",
            server.log_tail()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn start_tls(data: &Path, pki: &Pki, extra: &str) -> Server {
    let config = pki.config(extra);
    Server::start(data, &["--config", s(&config)])
}

#[test]
fn tls_offers_h2_and_http1_and_serves_both() {
    let dir = tempdir();
    let data = tempdir();
    let pki = Pki::new(dir.path());
    let leaf = pki.issue(1);
    let server = start_tls(data.path(), &pki, "");

    let h2 = connect(server.addr, &pki.ca_file(), &[b"h2", b"http/1.1"]);
    assert_eq!(h2.conn.alpn_protocol(), Some(&b"h2"[..]));
    assert_eq!(peer_leaf(&h2), leaf);
    // The whole chain from the file, leaf first.
    assert_eq!(h2.conn.peer_certificates().unwrap().len(), 2);

    let mut h1 = BufReader::new(connect(server.addr, &pki.ca_file(), &[b"http/1.1"]));
    assert_eq!(h1.get_ref().conn.alpn_protocol(), Some(&b"http/1.1"[..]));
    let (status, body) = get(&mut h1, "/v2/");
    assert_eq!((status, &body[..]), (200, &b"{}"[..]));

    // curl speaks HTTP/2 when ALPN agrees, and verifies the chain against the CA.
    let out = ok(Command::new("curl").args([
        "-sS",
        "--http2",
        "--cacert",
        s(&pki.ca_file()),
        "-o",
        "/dev/null",
        "-w",
        "%{http_version} %{http_code}",
        &format!("https://{}/v2/", server.host()),
    ]));
    assert_eq!(String::from_utf8_lossy(&out.stdout), "2 200");

    // Plain HTTP on the TLS port gets no HTTP answer.
    let plain = Command::new("curl")
        .args(["-sS", "-m", "5", &format!("http://{}/v2/", server.host())])
        .output()
        .unwrap();
    assert!(
        !plain.status.success(),
        "plain HTTP was answered on the TLS port: {}",
        String::from_utf8_lossy(&plain.stdout)
    );
}

#[test]
fn sighup_swaps_the_certificate_for_new_connections_and_keeps_open_ones() {
    let dir = tempdir();
    let data = tempdir();
    let pki = Pki::new(dir.path());
    let first = pki.issue(1);
    let server = start_tls(data.path(), &pki, "");

    let mut old = BufReader::new(connect(server.addr, &pki.ca_file(), &[b"http/1.1"]));
    assert_eq!(peer_leaf(old.get_ref()), first);
    assert_eq!(get(&mut old, "/v2/").0, 200);

    // New files, then SIGHUP.
    let second = pki.issue(2);
    assert_ne!(first, second);
    server.signal("-HUP");
    wait_for_log(&server, "TLS certificate reloaded", 1);
    // The open connection goes on with its session.
    assert_eq!(get(&mut old, "/v2/").0, 200);
    assert_eq!(peer_leaf(old.get_ref()), first);
    // A new connection gets the new certificate.
    let new = connect(server.addr, &pki.ca_file(), &[b"http/1.1"]);
    assert_eq!(peer_leaf(&new), second);

    // A broken certificate file: the reload fails, is logged naming the file, and the
    // registry keeps serving the second certificate.
    std::fs::write(pki.cert(), "-----BEGIN CERTIFICATE-----\ngarbage\n").unwrap();
    server.signal("-HUP");
    wait_for_log(&server, "TLS reload failed", 1);
    assert!(
        server.log_tail().contains(s(&pki.cert())),
        "the reload error does not name {}:\n{}",
        pki.cert().display(),
        server.log_tail()
    );
    let mut after = BufReader::new(connect(server.addr, &pki.ca_file(), &[b"http/1.1"]));
    assert_eq!(peer_leaf(after.get_ref()), second);
    assert_eq!(get(&mut after, "/v2/").0, 200);
    // A key that does not belong to the certificate is refused the same way.
    pki.issue(3);
    let stray = KeyPair::generate().unwrap();
    std::fs::write(pki.key(), stray.serialize_pem()).unwrap();
    server.signal("-HUP");
    wait_for_log(&server, "TLS reload failed", 2);
    assert!(
        server.log_tail().contains("does not match the certificate"),
        "{}",
        server.log_tail()
    );
    assert_eq!(
        peer_leaf(&connect(server.addr, &pki.ca_file(), &[b"h2"])),
        second
    );
    assert_eq!(get(&mut old, "/v2/").0, 200);
}

#[test]
fn sighup_without_tls_is_harmless() {
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    server.signal("-HUP");
    wait_for_log(&server, "nothing to reload", 1);
    let (status, _, _) = http(server.addr, "GET", "/v2/", &[], b"");
    assert_eq!(status, 200);
}

#[test]
fn sighup_reloads_the_htpasswd_users_and_keeps_them_when_the_file_is_bad() {
    use base64::Engine as _;
    let dir = tempdir();
    let data = tempdir();
    let users = dir.path().join("htpasswd");
    let hash = |p: &str| bcrypt::hash(p, 4).unwrap();
    std::fs::write(&users, format!("alice:{}\n", hash("a-pass"))).unwrap();
    let config = dir.path().join("registry.toml");
    std::fs::write(
        &config,
        format!(
            "[auth]\nhtpasswd = {:?}\n\n[[auth.acl]]\nsubjects = [\"alice\", \"bob\"]\nrepositories = [\"**\"]\nactions = [\"pull\"]\n",
            s(&users)
        ),
    )
    .unwrap();
    let server = Server::start(data.path(), &["--config", s(&config)]);
    let status = |user: &str, password: &str| {
        let basic = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{password}"));
        http(
            server.addr,
            "GET",
            "/v2/",
            &[("Authorization", &format!("Basic {basic}"))],
            b"",
        )
        .0
    };
    // alice's success is now cached; bob is unknown.
    assert_eq!(status("alice", "a-pass"), 200);
    assert_eq!(status("bob", "b-pass"), 401);

    // bob added and alice removed (written beside and renamed over, as the docs say), SIGHUP:
    // bob gets in, and alice is out at once although her success was cached.
    let next = dir.path().join("htpasswd.new");
    std::fs::write(&next, format!("# rotated\nbob:{}\n", hash("b-pass"))).unwrap();
    std::fs::rename(&next, &users).unwrap();
    server.signal("-HUP");
    wait_for_log(&server, "htpasswd reloaded", 1);
    assert_eq!(status("bob", "b-pass"), 200);
    assert_eq!(status("alice", "a-pass"), 401);

    // A file with a hash kind we refuse: logged with the file and line, bob stays.
    std::fs::write(&users, format!("bob:{}\ncarol:$apr1$x$y\n", hash("b-pass"))).unwrap();
    server.signal("-HUP");
    wait_for_log(&server, "htpasswd reload failed", 1);
    assert!(
        server.log_tail().contains(&format!("{}:2", s(&users))),
        "{}",
        server.log_tail()
    );
    assert_eq!(status("bob", "b-pass"), 200);
    assert_eq!(status("carol", "c-pass"), 401);
}

#[test]
fn startup_errors_name_the_bad_file() {
    let dir = tempdir();
    let data = tempdir();
    let pki = Pki::new(dir.path());
    pki.issue(1);
    let serve = |config: &Path| {
        let out = rdctl()
            .args(["registry", "serve", "--listen", "127.0.0.1:0", "--data"])
            .arg(data.path())
            .arg("--config")
            .arg(config)
            .env("NO_COLOR", "1")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "{}", tail(&out.stderr));
        String::from_utf8_lossy(&out.stderr).into_owned()
    };
    let config = dir.path().join("bad.toml");
    let missing = dir.path().join("missing.crt");
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert = {:?}\nkey = {:?}\n",
            s(&missing),
            s(&pki.key())
        ),
    )
    .unwrap();
    let err = serve(&config);
    assert!(
        err.contains(&format!("cannot read TLS certificate file {}", s(&missing))),
        "{err}"
    );

    std::fs::write(
        &config,
        format!(
            "[tls]\ncert = {:?}\nkey = {:?}\n",
            s(&pki.cert()),
            s(&pki.cert())
        ),
    )
    .unwrap();
    let err = serve(&config);
    assert!(
        err.contains(&format!("invalid TLS private key file {}", s(&pki.cert()))),
        "{err}"
    );

    let stray = dir.path().join("stray.key");
    std::fs::write(&stray, KeyPair::generate().unwrap().serialize_pem()).unwrap();
    std::fs::write(
        &config,
        format!(
            "[tls]\ncert = {:?}\nkey = {:?}\n",
            s(&pki.cert()),
            s(&stray)
        ),
    )
    .unwrap();
    let err = serve(&config);
    assert!(
        err.contains(&format!(
            "the TLS private key {} does not match the certificate {}",
            s(&stray),
            s(&pki.cert())
        )),
        "{err}"
    );

    std::fs::write(&config, format!("[tls]\ncert = {:?}\n", s(&pki.cert()))).unwrap();
    let err = serve(&config);
    assert!(err.contains("tls.key") && err.contains(s(&config)), "{err}");
}

#[test]
fn rate_limit_answers_429_with_retry_after_then_recovers() {
    let dir = tempdir();
    let data = tempdir();
    let config = dir.path().join("registry.toml");
    std::fs::write(
        &config,
        "[rate_limit]\nrequests_per_second = 1\nburst = 3\n",
    )
    .unwrap();
    let server = Server::start(data.path(), &["--config", s(&config)]);
    for _ in 0..3 {
        assert_eq!(http(server.addr, "GET", "/v2/", &[], b"").0, 200);
    }
    let (status, headers, body) = http(server.addr, "GET", "/v2/", &[], b"");
    assert_eq!(status, 429, "{}", String::from_utf8_lossy(&body));
    let v: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(v["errors"][0]["code"], "TOOMANYREQUESTS");
    let retry: u64 = header(&headers, "retry-after").parse().unwrap();
    assert!((1..=2).contains(&retry), "Retry-After: {retry}");
    // Health probes are not limited.
    assert_eq!(http(server.addr, "GET", "/healthz", &[], b"").0, 200);
    // Waiting as told is enough.
    std::thread::sleep(Duration::from_secs(retry));
    assert_eq!(http(server.addr, "GET", "/v2/", &[], b"").0, 200);
    // 429s are counted like every other answer.
    let (_, _, metrics) = http(server.addr, "GET", "/metrics", &[], b"");
    let metrics = String::from_utf8_lossy(&metrics);
    assert!(
        metrics
            .lines()
            .any(|l| l.contains("status=\"429\"") && !l.starts_with('#')),
        "{metrics}"
    );
}

#[test]
fn conformance_suite_passes_over_tls_with_a_custom_ca() {
    let dir = tempdir();
    let data = tempdir();
    let pki = Pki::new(dir.path());
    pki.issue(1);
    let server = start_tls(data.path(), &pki, "");
    conformance_at(
        &format!("https://{}", server.host()),
        "conformance-results-tls",
        // Go reads the trusted roots from this file (and only this file).
        &[("SSL_CERT_FILE", s(&pki.ca_file()))],
        &|| server.log_tail(),
    );
}

#[test]
fn skopeo_oras_and_crane_over_tls_with_a_custom_ca() {
    let dir = tempdir();
    let data = tempdir();
    let work = tempdir();
    let pki = Pki::new(dir.path());
    pki.issue(1);
    let server = start_tls(data.path(), &pki, "");
    let reg = server.host();
    let ca = pki.ca_file();
    // skopeo and containers/image read <cert-dir>/*.crt as CAs.
    let certs_d = work.path().join("certs.d");
    std::fs::create_dir(&certs_d).unwrap();
    std::fs::copy(&ca, certs_d.join("ca.crt")).unwrap();

    // skopeo: an OCI layout made by umoci to the registry and back, verifying the server.
    let img = work.path().join("img");
    ok(tool("umoci-0.6").args(["init", "--layout", s(&img)]));
    ok(tool("umoci-0.6").args(["new", "--image", &format!("{}:v1", s(&img))]));
    let remote = format!("docker://{reg}/skopeo/img:v1");
    ok(tool("skopeo")
        .args(["--insecure-policy", "copy", "--dest-cert-dir", s(&certs_d)])
        .arg(format!("oci:{}:v1", s(&img)))
        .arg(&remote));
    let inspect = ok(tool("skopeo").args(["inspect", "--raw", "--cert-dir", s(&certs_d), &remote]));
    let manifest: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(manifest["schemaVersion"], 2);
    // Without the CA, skopeo refuses the server.
    let untrusted = tool("skopeo")
        .args(["inspect", "--raw", &remote])
        .env("SSL_CERT_FILE", "/dev/null")
        .output()
        .unwrap();
    assert!(!untrusted.status.success());
    assert!(
        String::from_utf8_lossy(&untrusted.stderr).contains("certificate"),
        "{}",
        tail(&untrusted.stderr)
    );

    // oras: push and pull an artifact with --ca-file.
    std::fs::write(work.path().join("artifact.txt"), "over TLS\n").unwrap();
    let target = format!("{reg}/oras/art:v1");
    ok(tool("oras").current_dir(work.path()).args([
        "push",
        "--ca-file",
        s(&ca),
        &target,
        "artifact.txt:text/plain",
    ]));
    let out = work.path().join("out");
    ok(tool("oras").args(["pull", "--ca-file", s(&ca), &target, "-o", s(&out)]));
    assert_eq!(
        std::fs::read_to_string(out.join("artifact.txt")).unwrap(),
        "over TLS\n"
    );

    // crane: trusts SSL_CERT_FILE; copy what skopeo pushed and read it back.
    let crane = |args: &[&str]| {
        let mut c = tool("crane");
        c.args(args).env("SSL_CERT_FILE", &ca);
        ok(&mut c)
    };
    crane(&[
        "copy",
        &format!("{reg}/skopeo/img:v1"),
        &format!("{reg}/crane/img:v2"),
    ]);
    let d1 = crane(&["digest", &format!("{reg}/skopeo/img:v1")]).stdout;
    let d2 = crane(&["digest", &format!("{reg}/crane/img:v2")]).stdout;
    assert_eq!(d1, d2);
    let pulled = work.path().join("pulled.tar");
    crane(&["pull", &format!("{reg}/crane/img:v2"), s(&pulled)]);
    assert!(std::fs::metadata(&pulled).unwrap().len() > 0);
}

/// `[auth]` for the TLS tests: `alice` (password `alice-pw`) may do everything everywhere;
/// with `tokens`, the registry also issues bearer tokens at `/token` (keys of the auth tests).
fn auth_toml(dir: &Path, tokens: bool) -> String {
    let users = dir.join("htpasswd");
    std::fs::write(
        &users,
        format!("alice:{}\n", bcrypt::hash("alice-pw", 4).unwrap()),
    )
    .unwrap();
    let mut toml = format!(
        "[auth]\nhtpasswd = {:?}\n\n[[auth.acl]]\nsubjects = [\"alice\"]\nrepositories = [\"**\"]\nactions = [\"*\"]\n",
        s(&users)
    );
    if tokens {
        let data = crate::util::root().join("registry/tests/data/auth");
        toml.push_str(&format!(
            "\n[auth.token]\nservice = \"rdctl-tls-test\"\nsigning_key = {:?}\npublic_key = {:?}\n",
            s(&data.join("token-key.pem")),
            s(&data.join("token-pub.pem"))
        ));
    }
    toml
}

/// The conformance suite over TLS with credentials: `tokens` false answers Basic challenges,
/// true the Docker token flow, whose realm must name https.
fn conformance_with_credentials_over_tls(tokens: bool) {
    let dir = tempdir();
    let data = tempdir();
    let pki = Pki::new(dir.path());
    pki.issue(1);
    let server = start_tls(data.path(), &pki, &auth_toml(dir.path(), tokens));
    // Without credentials: 401 and a challenge of the configured kind, over TLS.
    let out = ok(Command::new("curl").args([
        "-sS",
        "--cacert",
        s(&pki.ca_file()),
        "-D",
        "-",
        "-o",
        "/dev/null",
        &format!("https://{}/v2/", server.host()),
    ]));
    let head = String::from_utf8_lossy(&out.stdout).to_ascii_lowercase();
    assert!(head.starts_with("http/2 401"), "{head}");
    let challenge = if tokens {
        format!(
            "www-authenticate: bearer realm=\"https://{}/token\"",
            server.host()
        )
    } else {
        "www-authenticate: basic".to_owned()
    };
    assert!(head.contains(&challenge), "no {challenge:?} in\n{head}");
    conformance_at(
        &format!("https://{}", server.host()),
        if tokens {
            "conformance-results-tls-token"
        } else {
            "conformance-results-tls-basic"
        },
        &[
            ("SSL_CERT_FILE", s(&pki.ca_file())),
            ("OCI_USERNAME", "alice"),
            ("OCI_PASSWORD", "alice-pw"),
        ],
        &|| server.log_tail(),
    );
}

#[test]
fn conformance_suite_passes_over_tls_with_basic_auth() {
    conformance_with_credentials_over_tls(false);
}

#[test]
fn conformance_suite_passes_over_tls_with_bearer_tokens() {
    conformance_with_credentials_over_tls(true);
}

#[test]
fn skopeo_oras_and_crane_log_in_over_tls() {
    let dir = tempdir();
    let data = tempdir();
    let work = tempdir();
    let pki = Pki::new(dir.path());
    pki.issue(1);
    // Basic challenges: oras 1.3 refuses a bearer realm on a loopback address ("blocked
    // prefix 127.0.0.0/8"), and this test runs on loopback. The token flow over TLS is covered
    // by the conformance run above.
    let server = start_tls(data.path(), &pki, &auth_toml(dir.path(), false));
    let reg = server.host();
    let ca = pki.ca_file();
    let certs_d = work.path().join("certs.d");
    std::fs::create_dir(&certs_d).unwrap();
    std::fs::copy(&ca, certs_d.join("ca.crt")).unwrap();

    // skopeo --creds: push a layout, read it back; without credentials it is refused.
    let img = work.path().join("img");
    ok(tool("umoci-0.6").args(["init", "--layout", s(&img)]));
    ok(tool("umoci-0.6").args(["new", "--image", &format!("{}:v1", s(&img))]));
    let remote = format!("docker://{reg}/skopeo/img:v1");
    ok(tool("skopeo")
        .args(["--insecure-policy", "copy", "--dest-cert-dir", s(&certs_d)])
        .args(["--dest-creds", "alice:alice-pw"])
        .arg(format!("oci:{}:v1", s(&img)))
        .arg(&remote));
    ok(tool("skopeo").args([
        "inspect",
        "--raw",
        "--cert-dir",
        s(&certs_d),
        "--creds",
        "alice:alice-pw",
        &remote,
    ]));
    let anonymous = tool("skopeo")
        .args([
            "inspect",
            "--raw",
            "--no-creds",
            "--cert-dir",
            s(&certs_d),
            &remote,
        ])
        .env("REGISTRY_AUTH_FILE", work.path().join("none.json"))
        .output()
        .unwrap();
    assert!(!anonymous.status.success());
    let wrong = tool("skopeo")
        .args(["inspect", "--raw", "--cert-dir", s(&certs_d)])
        .args(["--creds", "alice:wrong", &remote])
        .output()
        .unwrap();
    assert!(!wrong.status.success());
    assert!(
        String::from_utf8_lossy(&wrong.stderr).contains("authentication required")
            || String::from_utf8_lossy(&wrong.stderr).contains("unauthorized"),
        "{}",
        tail(&wrong.stderr)
    );

    // oras login (its own registry config file), then push and pull with it.
    let oras_config = work.path().join("oras.json");
    let oras = |args: &[&str]| {
        let mut c = tool("oras");
        c.current_dir(work.path()).args(args).args([
            "--registry-config",
            s(&oras_config),
            "--ca-file",
            s(&ca),
        ]);
        c
    };
    ok(&mut oras(&["login", "-u", "alice", "-p", "alice-pw", &reg]));
    std::fs::write(work.path().join("artifact.txt"), "logged in\n").unwrap();
    let target = format!("{reg}/oras/art:v1");
    ok(&mut oras(&["push", &target, "artifact.txt:text/plain"]));
    let out = work.path().join("out");
    ok(&mut oras(&["pull", &target, "-o", s(&out)]));
    assert_eq!(
        std::fs::read_to_string(out.join("artifact.txt")).unwrap(),
        "logged in\n"
    );

    // crane auth login writes $DOCKER_CONFIG/config.json; copy and pull with it.
    let docker_config = work.path().join("docker");
    let crane = |args: &[&str]| {
        let mut c = tool("crane");
        c.args(args)
            .env("SSL_CERT_FILE", &ca)
            .env("DOCKER_CONFIG", &docker_config);
        c
    };
    ok(&mut crane(&[
        "auth", "login", &reg, "-u", "alice", "-p", "alice-pw",
    ]));
    let saved = std::fs::read_to_string(docker_config.join("config.json")).unwrap();
    assert!(saved.contains(&reg), "{saved}");
    ok(&mut crane(&[
        "copy",
        &format!("{reg}/skopeo/img:v1"),
        &format!("{reg}/crane/img:v2"),
    ]));
    let pulled = work.path().join("pulled.tar");
    ok(&mut crane(&[
        "pull",
        &format!("{reg}/crane/img:v2"),
        s(&pulled),
    ]));
    assert!(std::fs::metadata(&pulled).unwrap().len() > 0);
    // After logout, crane is refused.
    ok(&mut crane(&["auth", "logout", &reg]));
    let refused = crane(&["digest", &format!("{reg}/crane/img:v2")])
        .output()
        .unwrap();
    assert!(!refused.status.success(), "crane read without credentials");
}
