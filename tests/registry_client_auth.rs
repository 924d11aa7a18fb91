//! The client side of registry access control, against a registry we did not write: Debian's
//! `docker-registry` (CNCF distribution 2.8) over TLS with certificates made here by openssl,
//! once with htpasswd (bcrypt) Basic auth and once with its token auth, whose issuer is a small
//! token endpoint in this file signing real ES256 JWTs with a key and certificate made here.
//!
//! What is shown: `rdctl login` refuses a wrong password and saves nothing, saves a right one
//! mode 0600 (or in the credential helper the file names); push, pull, copy, build --push and
//! the worker find the saved credential and trust the CA given by --ca-file (or worker.toml's
//! `ca_file`); without credentials the error names the 401 and says to log in; `logout`
//! removes the credential; with token auth the client fetches tokens per repository scope.

use std::collections::HashMap;
use std::io::Write as _;
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::{STANDARD as B64, URL_SAFE_NO_PAD as B64URL};

use crate::util::{ok, rdctl, root, s, tail, tempdir};

/// A port free at the time of asking (distribution cannot report the one it got for `:0`).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

fn openssl(dir: &Path, args: &[&str]) {
    ok(Command::new("openssl").current_dir(dir).args(args));
}

/// A test CA and a server certificate for 127.0.0.1 signed by it (EC P-256, one day).
struct Pki {
    ca: PathBuf,
    cert: PathBuf,
    key: PathBuf,
}

fn make_pki(dir: &Path) -> Pki {
    std::fs::create_dir_all(dir).unwrap();
    openssl(
        dir,
        &[
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "ca.key",
            "-out",
            "ca.pem",
            "-days",
            "1",
            "-subj",
            "/CN=rdctl test CA",
            "-addext",
            "basicConstraints=critical,CA:TRUE",
            "-addext",
            "keyUsage=critical,keyCertSign,cRLSign",
        ],
    );
    openssl(
        dir,
        &[
            "req",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
            "-nodes",
            "-keyout",
            "server.key",
            "-out",
            "server.csr",
            "-subj",
            "/CN=127.0.0.1",
        ],
    );
    std::fs::write(
        dir.join("server.ext"),
        "subjectAltName=IP:127.0.0.1\nbasicConstraints=CA:FALSE\n\
         keyUsage=critical,digitalSignature\nextendedKeyUsage=serverAuth\n",
    )
    .unwrap();
    openssl(
        dir,
        &[
            "x509",
            "-req",
            "-in",
            "server.csr",
            "-CA",
            "ca.pem",
            "-CAkey",
            "ca.key",
            "-CAcreateserial",
            "-days",
            "1",
            "-extfile",
            "server.ext",
            "-out",
            "server.pem",
        ],
    );
    Pki {
        ca: dir.join("ca.pem"),
        cert: dir.join("server.pem"),
        key: dir.join("server.key"),
    }
}

/// A running `docker-registry serve`, killed and reaped on drop; its log goes to a file.
struct Distribution {
    child: Child,
    host: String,
    log: PathBuf,
}

impl Distribution {
    /// Starts distribution over TLS with `auth` (the YAML body of its `auth:` section).
    fn start(dir: &Path, pki: &Pki, auth: &str) -> Distribution {
        std::fs::create_dir_all(dir).unwrap();
        let port = free_port();
        let host = format!("127.0.0.1:{port}");
        let config = dir.join("config.yml");
        std::fs::write(
            &config,
            format!(
                "version: 0.1\nlog:\n  level: info\n  accesslog:\n    disabled: true\n\
                 storage:\n  filesystem:\n    rootdirectory: {data}\n  delete:\n    enabled: true\n\
                 http:\n  addr: {host}\n  secret: rdctl-test-secret\n  tls:\n    certificate: {cert}\n    key: {key}\n\
                 auth:\n{auth}",
                data = s(&dir.join("data")),
                cert = s(&pki.cert),
                key = s(&pki.key),
            ),
        )
        .unwrap();
        let log = dir.join("registry.log");
        let out = std::fs::File::create(&log).unwrap();
        // Without AWS_CA_BUNDLE: distribution 2.8 panics at start when it is set (bench/run.sh).
        let mut child = Command::new("docker-registry")
            .args(["serve", s(&config)])
            .env_remove("AWS_CA_BUNDLE")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out)
            .spawn()
            .expect("docker-registry is not installed: run scripts/install-deps.sh");
        let start = Instant::now();
        loop {
            if let Some(st) = child.try_wait().unwrap() {
                panic!(
                    "docker-registry exited with {st}; log:\n{}",
                    tail(&std::fs::read(&log).unwrap_or_default())
                );
            }
            if TcpStream::connect(&host).is_ok() {
                break;
            }
            if start.elapsed() > Duration::from_secs(30) {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "docker-registry did not listen on {host}; log:\n{}",
                    tail(&std::fs::read(&log).unwrap_or_default())
                );
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Distribution { child, host, log }
    }

    fn log_tail(&self) -> String {
        tail(&std::fs::read(&self.log).unwrap_or_default())
    }
}

impl Drop for Distribution {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// rdctl with a home of its own: no credential file of the machine is read or written.
fn rd(home: &Path) -> Command {
    let mut c = rdctl();
    for k in [
        "DOCKER_CONFIG",
        "REGISTRY_AUTH_FILE",
        "XDG_RUNTIME_DIR",
        "XDG_CONFIG_HOME",
    ] {
        c.env_remove(k);
    }
    c.env("HOME", home).env("RDCTL_LOG", "warn");
    c
}

/// Runs `cmd` with `stdin` as its standard input.
fn run_with_stdin(cmd: &mut Command, stdin: &str) -> Output {
    let mut child = cmd
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    child
        .stdin
        .take()
        .unwrap()
        .write_all(stdin.as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// Asserts exit 0, with rdctl's and the registry's output on failure.
fn succeeded(what: &str, out: &Output, reg: &Distribution) {
    assert!(
        out.status.success(),
        "{what}: {}\nstdout:\n{}\nstderr:\n{}\nregistry log:\n{}",
        out.status,
        tail(&out.stdout),
        tail(&out.stderr),
        reg.log_tail()
    );
}

/// Asserts exit 2 and returns stderr.
fn failed(what: &str, out: &Output) -> String {
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{what} should exit 2; stdout:\n{}\nstderr:\n{err}",
        tail(&out.stdout)
    );
    err
}

/// `rdctl login -u USER --password-stdin ARGS... HOST` with `password` on stdin.
fn login(home: &Path, user: &str, password: &str, args: &[&str], host: &str) -> Output {
    run_with_stdin(
        rd(home)
            .args(["login", "-u", user, "--password-stdin"])
            .args(args)
            .arg(host),
        &format!("{password}\n"),
    )
}

/// The example image's packages published into `dir/repo` and its lockfile made; returns the
/// image file.
fn hello_image(dir: &Path) -> PathBuf {
    let example = root().join("examples/hello");
    for m in ["system-base.p5m", "hello.p5m"] {
        ok(rdctl()
            .args(["ips", "publish", "--repo"])
            .arg(dir.join("repo"))
            .args(["--publisher", "example.org", "--proto"])
            .arg(example.join("proto"))
            .arg(example.join("manifests").join(m)));
    }
    std::fs::copy(example.join("image.toml"), dir.join("image.toml")).unwrap();
    let image = dir.join("image.toml");
    ok(rdctl().arg("lock").arg(&image));
    image
}

fn json(out: &Output) -> serde_json::Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "stdout is not JSON ({e}):\n{}",
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

fn mode(p: &Path) -> u32 {
    use std::os::unix::fs::PermissionsExt as _;
    std::fs::metadata(p).unwrap().permissions().mode() & 0o777
}

/// The auths entry for `host` in a docker config file, decoded to `user:password`.
fn saved(file: &Path, host: &str) -> Option<String> {
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(file).ok()?).unwrap();
    let auth = v["auths"][host]["auth"].as_str()?;
    Some(String::from_utf8(B64.decode(auth).unwrap()).unwrap())
}

fn htpasswd_auth(dir: &Path, users: &[(&str, &str)]) -> String {
    std::fs::create_dir_all(dir).unwrap();
    let path = dir.join("htpasswd");
    let lines: String = users
        .iter()
        // The lowest cost bcrypt allows: the test measures nothing about hashing.
        .map(|(u, p)| format!("{u}:{}\n", bcrypt::hash(p, 4).unwrap()))
        .collect();
    std::fs::write(&path, lines).unwrap();
    format!(
        "  htpasswd:\n    realm: rdctl-test\n    path: {}\n",
        s(&path)
    )
}

#[test]
fn htpasswd_over_tls_login_push_pull_copy_build_worker_logout() {
    let tmp = tempdir();
    let d = tmp.path();
    let home = d.join("home");
    let pki = make_pki(&d.join("pki"));
    let auth = htpasswd_auth(&d.join("reg"), &[("alice", "wonder land")]);
    let reg = Distribution::start(&d.join("reg"), &pki, &auth);
    let host = reg.host.clone();
    let ca = s(&pki.ca).to_owned();
    let config = home.join(".docker/config.json");

    let image = hello_image(d);
    let layout = d.join("image");
    ok(rd(&home)
        .args(["build", "--output", s(&layout)])
        .arg(&image));
    let tagged = format!("{}:1.0", s(&layout));

    // Without credentials: the 401 is named, with the way out.
    let out = rd(&home)
        .args([
            "push",
            "--ca-file",
            &ca,
            &tagged,
            &format!("{host}/zones/hello:1.0"),
        ])
        .output()
        .unwrap();
    let err = failed("push before login", &out);
    assert!(
        err.contains("401") && err.contains("log in") && err.contains(&host),
        "{err}"
    );

    // Without TLS settings a loopback registry is spoken to in plain HTTP, which this one
    // refuses; nothing is saved.
    let out = login(&home, "alice", "wonder land", &[], &host);
    let err = failed("login without --ca-file", &out);
    assert!(err.to_lowercase().contains("https"), "{err}");
    assert!(
        !config.exists(),
        "a failed login wrote {}",
        config.display()
    );
    // A certs.d entry for the host says it uses TLS, but a CA that did not sign its
    // certificate is not trusted.
    let other = make_pki(&d.join("other-pki"));
    let wrong_certs = d.join("wrong-certs.d");
    std::fs::create_dir_all(wrong_certs.join(&host)).unwrap();
    std::fs::copy(&other.ca, wrong_certs.join(&host).join("ca.crt")).unwrap();
    let out = login(
        &home,
        "alice",
        "wonder land",
        &["--cert-dir", s(&wrong_certs)],
        &host,
    );
    let err = failed("login with an untrusted certificate", &out);
    assert!(
        err.contains("certificate") || err.contains("UnknownIssuer"),
        "{err}"
    );
    assert!(
        !config.exists(),
        "a failed login wrote {}",
        config.display()
    );
    // --insecure skips verification, and says so.
    let insecure_file = d.join("insecure.json");
    let out = login(
        &home,
        "alice",
        "wonder land",
        &["--insecure", "--auth-file", s(&insecure_file)],
        &host,
    );
    succeeded("login --insecure", &out, &reg);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not verified"));
    assert_eq!(
        saved(&insecure_file, &host).as_deref(),
        Some("alice:wonder land")
    );

    // A wrong password is refused by the registry and nothing is saved.
    let out = login(&home, "alice", "wrong", &["--ca-file", &ca], &host);
    let err = failed("login with a wrong password", &out);
    assert!(
        err.contains("401") && err.contains("nothing was saved") && err.contains("alice"),
        "{err}"
    );
    assert!(
        !config.exists(),
        "a refused login wrote {}",
        config.display()
    );
    assert!(!err.contains("wrong"), "the password was printed: {err}");

    // No terminal and no --password-stdin: a clear refusal, not a hang. login asks on
    // /dev/tty, so it runs in a session of its own (setsid), which has no terminal even when
    // the tests run from one.
    let with_env = rd(&home);
    let mut no_tty = Command::new("setsid");
    no_tty.arg("-w").arg(with_env.get_program()).args([
        "login",
        "-u",
        "alice",
        "--ca-file",
        &ca,
        &host,
    ]);
    for (k, v) in with_env.get_envs() {
        match v {
            Some(v) => no_tty.env(k, v),
            None => no_tty.env_remove(k),
        };
    }
    let out = no_tty.stdin(Stdio::null()).output().unwrap();
    assert!(failed("login without a terminal", &out).contains("--password-stdin"));

    // The right password is checked and saved in ~/.docker/config.json, mode 0600.
    let out = login(&home, "alice", "wonder land", &["--ca-file", &ca], &host);
    succeeded("login", &out, &reg);
    assert!(String::from_utf8_lossy(&out.stdout).contains("Login Succeeded"));
    assert_eq!(saved(&config, &host).as_deref(), Some("alice:wonder land"));
    assert_eq!(mode(&config), 0o600);

    // build --push, push, pull and copy all find it.
    let out = rd(&home)
        .args(["build", "--json", "--ca-file", &ca, "--push"])
        .arg(format!("{host}/zones/built"))
        .arg(&image)
        .output()
        .unwrap();
    succeeded("build --push", &out, &reg);
    let manifest = json(&out)["manifest"].as_str().unwrap().to_owned();
    let reference = format!("{host}/zones/hello:1.0");
    let out = rd(&home)
        .args(["push", "--json", "--ca-file", &ca, &tagged, &reference])
        .output()
        .unwrap();
    succeeded("push", &out, &reg);
    let root_digest = json(&out)["root"]["digest"].as_str().unwrap().to_owned();
    // The CA as docker's certs.d layout keeps it, instead of --ca-file.
    let certs = d.join("certs.d");
    std::fs::create_dir_all(certs.join(&host)).unwrap();
    std::fs::copy(&pki.ca, certs.join(&host).join("ca.crt")).unwrap();
    let pulled = d.join("pulled");
    let out = rd(&home)
        .args(["pull", "--json", "--cert-dir", s(&certs), &reference])
        .arg(format!("{}:1.0", s(&pulled)))
        .output()
        .unwrap();
    succeeded("pull", &out, &reg);
    assert_eq!(json(&out)["root"]["digest"], root_digest.as_str());
    let out = rd(&home)
        .args(["copy", "--json", "--ca-file", &ca, &reference])
        .arg(format!("{host}/mirror/hello:1.0"))
        .output()
        .unwrap();
    succeeded("copy", &out, &reg);
    assert_eq!(json(&out)["root"]["digest"], root_digest.as_str());

    // The worker pulls with worker.toml's auth_file and ca_file (a fresh home: nothing else
    // to find the credential in).
    let wdir = d.join("worker");
    std::fs::create_dir_all(wdir.join("zones")).unwrap();
    std::fs::copy(&config, wdir.join("auth.json")).unwrap();
    std::fs::copy(&pki.ca, wdir.join("ca.pem")).unwrap();
    let worker_toml = wdir.join("worker.toml");
    let write_worker = |extra: &str| {
        std::fs::write(
            &worker_toml,
            format!(
                "zones_dir = \"zones\"\nstate_dir = \"state\"\n{extra}\
                 [provisioner]\nkind = \"dir\"\nbase = \"roots\"\n"
            ),
        )
        .unwrap()
    };
    std::fs::write(
        wdir.join("zones/hello.toml"),
        format!("name = \"hello\"\nimage = \"{host}/mirror/hello:1.0\"\n"),
    )
    .unwrap();
    let worker_home = d.join("worker-home");
    // Without auth_file the pass fails on the 401 (exit 1) and says so in the status.
    write_worker("ca_file = \"ca.pem\"\n");
    let out = rd(&worker_home)
        .args([
            "worker",
            "run",
            "--once",
            "--json",
            "--config",
            s(&worker_toml),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1), "{}", tail(&out.stderr));
    assert_eq!(json(&out)["failed"], serde_json::json!(["hello"]));
    let status = rd(&worker_home)
        .args(["worker", "status", "--json", "--config", s(&worker_toml)])
        .output()
        .unwrap();
    let last_error = json(&status)["zones"][0]["last_error"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(last_error.contains("401"), "{last_error}");
    write_worker("auth_file = \"auth.json\"\nca_file = \"ca.pem\"\n");
    let out = rd(&worker_home)
        .args([
            "worker",
            "run",
            "--once",
            "--json",
            "--config",
            s(&worker_toml),
        ])
        .output()
        .unwrap();
    succeeded("worker run with auth_file", &out, &reg);
    assert_eq!(json(&out)["provisioned"], serde_json::json!(["hello"]));
    let status = rd(&worker_home)
        .args(["worker", "status", "--json", "--config", s(&worker_toml)])
        .output()
        .unwrap();
    assert_eq!(
        json(&status)["zones"][0]["current_digest"],
        root_digest.as_str()
    );
    assert_ne!(manifest, "", "build printed its manifest digest");

    // A kubelet credential provider plugin instead of auth_file: a script that counts its
    // runs, keeps the request it got and answers alice's credential for this host.
    let plugins = wdir.join("plugins");
    std::fs::create_dir_all(&plugins).unwrap();
    let script = plugins.join("count-creds");
    std::fs::write(
        &script,
        "#!/bin/sh
{ cat; echo; } >> \"$OUT/requests.jsonl\"
echo run >> \"$OUT/runs\"
\
         printf '{\"apiVersion\":\"credentialprovider.kubelet.k8s.io/v1\",\"kind\":\"CredentialProviderResponse\",\
         \"cacheKeyType\":\"Registry\",\"cacheDuration\":\"%s\",\
         \"auth\":{\"%s\":{\"username\":\"alice\",\"password\":\"wonder land\"}}}' \"$TTL\" \"$HOST\"\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    std::fs::write(
        wdir.join("zones/plugin.toml"),
        format!(
            "name = \"plugin\"\nimage = \"{host}/mirror/hello:1.0\"\npull_policy = \"Always\"\n"
        ),
    )
    .unwrap();
    let runs = |ttl: &str| {
        let out_dir = d.join(format!("plugin-{ttl}"));
        std::fs::create_dir_all(&out_dir).unwrap();
        // A full pull each time: no zone and no blobs from the run before.
        for gone in [wdir.join("roots/plugin"), wdir.join("state/content")] {
            if gone.exists() {
                std::fs::remove_dir_all(&gone).unwrap();
            }
        }
        write_worker(&format!(
            "ca_file = \"ca.pem\"\nimage_credential_provider_bin_dir = \"plugins\"\n\
             [[credential_providers]]\nname = \"count-creds\"\nmatch_images = [\"{host}\"]\n\
             default_cache_duration_secs = 600\n\
             env = {{ OUT = \"{}\", TTL = \"{ttl}\", HOST = \"{host}\" }}\n",
            s(&out_dir)
        ));
        let out = rd(&worker_home)
            .args([
                "worker",
                "run",
                "--once",
                "--json",
                "--config",
                s(&worker_toml),
            ])
            .output()
            .unwrap();
        succeeded(
            &format!("worker run with a credential provider (cacheDuration {ttl})"),
            &out,
            &reg,
        );
        let requests = std::fs::read_to_string(out_dir.join("requests.jsonl")).unwrap();
        let request: serde_json::Value =
            serde_json::from_str(requests.lines().next().unwrap()).unwrap();
        assert_eq!(
            request["apiVersion"],
            "credentialprovider.kubelet.k8s.io/v1"
        );
        assert_eq!(request["kind"], "CredentialProviderRequest");
        // The image the pull is for, not only its registry: the full reference, tag
        // included, as kubelet sends it (the first request is the tag's manifest).
        assert_eq!(request["image"], format!("{host}/mirror/hello:1.0"));
        std::fs::read_to_string(out_dir.join("runs"))
            .unwrap()
            .lines()
            .count()
    };
    // Cached for an hour: one run serves every request of the pass.
    assert_eq!(runs("1h"), 1);
    // Not cached ("0s"): the plugin is asked again for each authenticated request.
    let uncached = runs("0s");
    assert!(uncached > 1, "the plugin ran {uncached} times");
    std::fs::remove_file(wdir.join("zones/plugin.toml")).unwrap();

    // logout removes the entry; then the 401 comes back.
    let out = rd(&home).args(["logout", &host]).output().unwrap();
    succeeded("logout", &out, &reg);
    assert_eq!(saved(&config, &host), None);
    let out = rd(&home)
        .args(["pull", "--ca-file", &ca, &reference])
        .arg(s(&d.join("pulled-again")))
        .output()
        .unwrap();
    assert!(failed("pull after logout", &out).contains("401"));
    let out = rd(&home).args(["logout", &host]).output().unwrap();
    succeeded("second logout", &out, &reg);
    assert!(String::from_utf8_lossy(&out.stderr).contains("not logged in"));
}

/// What the token endpoint was asked.
#[derive(Debug, Clone)]
struct TokenRequest {
    user: Option<String>,
    scopes: Vec<String>,
    granted: Vec<String>,
}

/// A Docker token endpoint: checks Basic credentials, grants `users`' rights per repository
/// scope, and signs an ES256 JWT with a certificate chain (`x5c`) distribution verifies
/// against its `rootcertbundle`.
struct Issuer {
    realm: String,
    cert_pem: PathBuf,
    seen: Arc<Mutex<Vec<TokenRequest>>>,
    server: Arc<tiny_http::Server>,
    thread: Option<std::thread::JoinHandle<()>>,
}

const SERVICE: &str = "rdctl-test-registry";
const ISSUER: &str = "rdctl-test-issuer";

impl Issuer {
    /// `users`: name -> (password, actions granted on every repository).
    fn start(dir: &Path, users: HashMap<String, (String, Vec<String>)>) -> Issuer {
        use ring::signature::{ECDSA_P256_SHA256_FIXED_SIGNING, EcdsaKeyPair};
        std::fs::create_dir_all(dir).unwrap();
        let rng = ring::rand::SystemRandom::new();
        let pkcs8 = EcdsaKeyPair::generate_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, &rng).unwrap();
        let pem: String = B64
            .encode(pkcs8.as_ref())
            .as_bytes()
            .chunks(64)
            .map(|c| format!("{}\n", std::str::from_utf8(c).unwrap()))
            .collect();
        std::fs::write(
            dir.join("token.key"),
            format!("-----BEGIN PRIVATE KEY-----\n{pem}-----END PRIVATE KEY-----\n"),
        )
        .unwrap();
        openssl(
            dir,
            &[
                "req",
                "-x509",
                "-new",
                "-key",
                "token.key",
                "-subj",
                "/CN=rdctl test issuer",
                "-days",
                "1",
                "-out",
                "token.pem",
            ],
        );
        openssl(
            dir,
            &[
                "x509",
                "-in",
                "token.pem",
                "-outform",
                "DER",
                "-out",
                "token.der",
            ],
        );
        let cert_der = std::fs::read(dir.join("token.der")).unwrap();
        let key = EcdsaKeyPair::from_pkcs8(&ECDSA_P256_SHA256_FIXED_SIGNING, pkcs8.as_ref(), &rng)
            .unwrap();
        let server = Arc::new(tiny_http::Server::http("127.0.0.1:0").unwrap());
        let realm = format!("http://{}/token", server.server_addr().to_ip().unwrap());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let (srv, log) = (server.clone(), seen.clone());
        let header = B64URL.encode(
            serde_json::json!({"typ": "JWT", "alg": "ES256", "x5c": [B64.encode(&cert_der)]})
                .to_string(),
        );
        let thread = std::thread::spawn(move || {
            for req in srv.incoming_requests() {
                let url = reqwest::Url::parse(&format!("http://x{}", req.url())).unwrap();
                let q: Vec<(String, String)> = url.query_pairs().into_owned().collect();
                let scopes: Vec<String> = q
                    .iter()
                    .filter(|(k, _)| k == "scope")
                    .flat_map(|(_, v)| v.split(' ').map(str::to_owned).collect::<Vec<_>>())
                    .collect();
                let basic = req
                    .headers()
                    .iter()
                    .find(|h| h.field.equiv("Authorization"))
                    .and_then(|h| h.value.as_str().strip_prefix("Basic ").map(str::to_owned))
                    .and_then(|b| B64.decode(b).ok())
                    .and_then(|b| String::from_utf8(b).ok())
                    .and_then(|s| s.split_once(':').map(|(u, p)| (u.to_owned(), p.to_owned())));
                let user = basic
                    .as_ref()
                    .filter(|(u, p)| users.get(u).is_some_and(|(pw, _)| pw == p))
                    .map(|(u, _)| u.clone());
                let service_ok = q.iter().any(|(k, v)| k == "service" && v == SERVICE);
                let Some(name) = user.clone().filter(|_| service_ok) else {
                    log.lock().unwrap().push(TokenRequest {
                        user: None,
                        scopes,
                        granted: Vec::new(),
                    });
                    let _ = req.respond(
                        tiny_http::Response::from_string(
                            r#"{"details":"invalid credentials or service"}"#,
                        )
                        .with_status_code(401),
                    );
                    continue;
                };
                let rights = &users[&name].1;
                let mut access = Vec::new();
                let mut granted = Vec::new();
                for sc in &scopes {
                    let mut parts = sc.splitn(3, ':');
                    let (Some("repository"), Some(repo), Some(actions)) =
                        (parts.next(), parts.next(), parts.next())
                    else {
                        continue;
                    };
                    let acts: Vec<&str> = actions
                        .split(',')
                        .filter(|a| rights.iter().any(|r| r == a))
                        .collect();
                    granted.push(format!("repository:{repo}:{}", acts.join(",")));
                    access.push(serde_json::json!({
                        "type": "repository", "name": repo, "actions": acts
                    }));
                }
                let now = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .unwrap()
                    .as_secs();
                let claims = B64URL.encode(
                    serde_json::json!({
                        "iss": ISSUER, "sub": name, "aud": SERVICE,
                        "exp": now + 300, "nbf": now - 10, "iat": now,
                        "jti": format!("{now}-{}", log.lock().unwrap().len()),
                        "access": access,
                    })
                    .to_string(),
                );
                let signing_input = format!("{header}.{claims}");
                let sig = key
                    .sign(&ring::rand::SystemRandom::new(), signing_input.as_bytes())
                    .unwrap();
                let token = format!("{signing_input}.{}", B64URL.encode(sig.as_ref()));
                log.lock().unwrap().push(TokenRequest {
                    user: Some(name),
                    scopes,
                    granted,
                });
                let body = serde_json::json!({"token": token, "expires_in": 300}).to_string();
                let _ = req.respond(
                    tiny_http::Response::from_string(body).with_header(
                        "Content-Type: application/json"
                            .parse::<tiny_http::Header>()
                            .unwrap(),
                    ),
                );
            }
        });
        Issuer {
            realm,
            cert_pem: dir.join("token.pem"),
            seen,
            server,
            thread: Some(thread),
        }
    }

    fn requests(&self) -> Vec<TokenRequest> {
        self.seen.lock().unwrap().clone()
    }
}

impl Drop for Issuer {
    fn drop(&mut self) {
        self.server.unblock();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// A docker credential helper (the docker-credential-helpers protocol) keeping secrets as
/// files in `vault`; returns the directory to put on PATH.
fn credential_helper(dir: &Path, name: &str) -> PathBuf {
    use std::os::unix::fs::PermissionsExt as _;
    let bin = dir.join("bin");
    let vault = dir.join("vault");
    std::fs::create_dir_all(&bin).unwrap();
    std::fs::create_dir_all(&vault).unwrap();
    let script = bin.join(format!("docker-credential-{name}"));
    std::fs::write(
        &script,
        format!(
            r#"#!/bin/sh
# store: JSON {{ServerURL, Username, Secret}} on stdin; get/erase: the server URL on stdin.
set -e
V='{vault}'
case "$1" in
store) cat > "$V/in"; h=$(sed 's/.*"ServerURL":"\([^"]*\)".*/\1/' "$V/in"); mv "$V/in" "$V/$h" ;;
get) h=$(cat); [ -f "$V/$h" ] || {{ echo "credentials not found in native keychain"; exit 1; }}; cat "$V/$h" ;;
erase) h=$(cat); [ -f "$V/$h" ] || {{ echo "credentials not found in native keychain"; exit 1; }}; rm "$V/$h" ;;
*) echo "unknown action $1" >&2; exit 1 ;;
esac
"#,
            vault = vault.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    bin
}

#[test]
fn token_auth_login_bearer_flow_scopes_helper_and_refusals() {
    let tmp = tempdir();
    let d = tmp.path();
    let home = d.join("home");
    let pki = make_pki(&d.join("pki"));
    let users = HashMap::from([
        (
            "alice".to_owned(),
            (
                "s3cret".to_owned(),
                vec!["pull".to_owned(), "push".to_owned()],
            ),
        ),
        (
            "bob".to_owned(),
            ("bobpw".to_owned(), vec!["pull".to_owned()]),
        ),
    ]);
    let issuer = Issuer::start(&d.join("issuer"), users);
    let auth = format!(
        "  token:\n    realm: {}\n    service: {SERVICE}\n    issuer: {ISSUER}\n    rootcertbundle: {}\n",
        issuer.realm,
        s(&issuer.cert_pem)
    );
    let reg = Distribution::start(&d.join("reg"), &pki, &auth);
    let host = reg.host.clone();
    let ca = s(&pki.ca).to_owned();
    let config = home.join(".docker/config.json");

    // A layout to push (no build needed here: copy one the first push can read).
    let image = hello_image(d);
    let layout = d.join("image");
    ok(rd(&home)
        .args(["build", "--output", s(&layout)])
        .arg(&image));
    let tagged = format!("{}:1.0", s(&layout));
    let reference = format!("{host}/team/app:1.0");

    // Wrong password: the token endpoint refuses, login fails naming it, nothing is saved.
    let out = login(&home, "alice", "nope", &["--ca-file", &ca], &host);
    let err = failed("token login with a wrong password", &out);
    assert!(
        err.contains("401") && err.contains("token endpoint") && err.contains("nothing was saved"),
        "{err}"
    );
    assert!(!config.exists());

    // Right password: a token for /v2/ (no scope) proves it; then saved.
    let before = issuer.requests().len();
    let out = login(&home, "alice", "s3cret", &["--ca-file", &ca], &host);
    succeeded("token login", &out, &reg);
    assert_eq!(saved(&config, &host).as_deref(), Some("alice:s3cret"));
    let asked = &issuer.requests()[before..];
    assert!(
        asked.iter().any(|r| r.user.as_deref() == Some("alice")),
        "{asked:?}"
    );

    // Push and pull run the bearer flow with repository scopes.
    let before = issuer.requests().len();
    let out = rd(&home)
        .args(["push", "--json", "--ca-file", &ca, &tagged, &reference])
        .output()
        .unwrap();
    succeeded("push with a token", &out, &reg);
    let root_digest = json(&out)["root"]["digest"].as_str().unwrap().to_owned();
    let out = rd(&home)
        .args(["pull", "--json", "--ca-file", &ca, &reference])
        .arg(format!("{}:1.0", s(&d.join("pulled"))))
        .output()
        .unwrap();
    succeeded("pull with a token", &out, &reg);
    assert_eq!(json(&out)["root"]["digest"], root_digest.as_str());
    let asked = &issuer.requests()[before..];
    assert!(
        asked.iter().any(|r| r.user.as_deref() == Some("alice")
            && r.granted
                .iter()
                .any(|g| g == "repository:team/app:pull,push")),
        "push asked no pull,push token for team/app: {asked:?}"
    );
    assert!(
        asked.iter().all(|r| r
            .scopes
            .iter()
            .all(|s| s.starts_with("repository:team/app:"))),
        "a token was asked for another repository: {asked:?}"
    );

    // bob may log in (no scope needed) and pull, but a push is refused with a clear error.
    let bob_file = d.join("bob.json");
    let out = login(
        &home,
        "bob",
        "bobpw",
        &["--ca-file", &ca, "--auth-file", s(&bob_file)],
        &host,
    );
    succeeded("bob's login", &out, &reg);
    assert_eq!(mode(&bob_file), 0o600);
    let out = rd(&home)
        .args([
            "push",
            "--ca-file",
            &ca,
            "--auth-file",
            s(&bob_file),
            &tagged,
        ])
        .arg(format!("{host}/team/bobs:1.0"))
        .output()
        .unwrap();
    let err = failed("bob's push", &out);
    assert!(err.contains("bob") && err.contains("401"), "{err}");
    let out = rd(&home)
        .args([
            "pull",
            "--ca-file",
            &ca,
            "--auth-file",
            s(&bob_file),
            &reference,
        ])
        .arg(s(&d.join("bob-pulled")))
        .output()
        .unwrap();
    succeeded("bob's pull", &out, &reg);

    // A credential helper named by credsStore gets the credential; the file gets no secret,
    // and later commands read it back through the helper.
    let bin = credential_helper(&d.join("helper"), "rdtest");
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let helper_file = d.join("helper.json");
    std::fs::write(&helper_file, r#"{"credsStore": "rdtest"}"#).unwrap();
    let out = login(
        &home,
        "alice",
        "s3cret",
        &["--ca-file", &ca, "--auth-file", s(&helper_file)],
        &host,
    );
    // (login ran with the test's PATH: the helper is not there yet, so it must fail clearly.)
    let err = failed("login with a helper missing from PATH", &out);
    assert!(err.contains("docker-credential-rdtest"), "{err}");
    let out = run_with_stdin(
        rd(&home)
            .env("PATH", &path)
            .args(["login", "-u", "alice", "--password-stdin", "--ca-file", &ca])
            .args(["--auth-file", s(&helper_file), &host]),
        "s3cret\n",
    );
    succeeded("login into a credential helper", &out, &reg);
    let text = std::fs::read_to_string(&helper_file).unwrap();
    assert!(
        !text.contains("auths"),
        "the secret went into the file: {text}"
    );
    assert!(
        d.join("helper/vault").join(&host).exists(),
        "the helper holds nothing"
    );
    let out = rd(&home)
        .env("PATH", &path)
        .args([
            "pull",
            "--ca-file",
            &ca,
            "--auth-file",
            s(&helper_file),
            &reference,
        ])
        .arg(s(&d.join("helper-pulled")))
        .output()
        .unwrap();
    succeeded("pull with the helper's credential", &out, &reg);
    let out = rd(&home)
        .env("PATH", &path)
        .args(["logout", "--auth-file", s(&helper_file), &host])
        .output()
        .unwrap();
    succeeded("logout from the helper", &out, &reg);
    assert!(!d.join("helper/vault").join(&host).exists());

    // After logout of the default file, the 401 names the registry and asks to log in.
    ok(rd(&home).args(["logout", &host]));
    let out = rd(&home)
        .args(["pull", "--ca-file", &ca, &reference])
        .arg(s(&d.join("anonymous")))
        .output()
        .unwrap();
    let err = failed("anonymous pull", &out);
    assert!(err.contains("401") && err.contains(&host), "{err}");
}
