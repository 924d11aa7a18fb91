//! What other registries' clients and builders send, against `rdctl registry serve` (issue 40).
//!
//! - skopeo (containers/image, as podman and buildah) pushes as a user where anonymous callers
//!   may pull: containers/image authenticates only with the challenges of its `GET /v2/`
//!   ping, so that answer must carry one (a 200 with Basic auth, a 401 with tokens); with
//!   `--creds`, after `skopeo login`, with Basic and with the token flow. `rdctl login`
//!   refuses a wrong password there in both modes. Anonymous skopeo pulls still work (it sends `Basic Og==`, an empty
//!   user and password, after a Basic challenge), anonymous and wrong-password pushes are
//!   refused, and crane and oras still push with credentials.
//! - Indexes whose platforms are not GOOS/GOARCH values are stored: the shape
//!   `docker buildx build --push` writes (an in-toto attestation manifest as `unknown/unknown`
//!   beside the image) and an index for `amigaos`; malformed platforms are still refused with
//!   `MANIFEST_INVALID` naming the field; the worker's platform choice skips `unknown/unknown`;
//!   `rdctl validate` warns (`platform-value`) and passes.

use std::path::Path;
use std::process::Command;

use validator::Digest;

use crate::registry_e2e::{header, http};
use crate::util::{Server, ok, s, tail, tempdir, tool, validate_json};

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const OCI_CONFIG: &str = "application/vnd.oci.image.config.v1+json";
const TAR: &str = "application/vnd.oci.image.layer.v1.tar";

/// A registry where anonymous callers may pull everything and `alice` (password `alice-pw`)
/// may do everything; with `tokens`, it also issues bearer tokens at `/token`.
fn anonymous_pull_registry(dir: &Path, tokens: bool) -> Server {
    let users = dir.join("htpasswd");
    std::fs::write(
        &users,
        format!("alice:{}\n", bcrypt::hash("alice-pw", 4).unwrap()),
    )
    .unwrap();
    let mut toml = format!(
        "[auth]\nhtpasswd = {:?}\n\n\
         [[auth.acl]]\nsubjects = [\"anonymous\"]\nrepositories = [\"**\"]\nactions = [\"pull\"]\n\n\
         [[auth.acl]]\nsubjects = [\"alice\"]\nrepositories = [\"**\"]\nactions = [\"*\"]\n",
        s(&users)
    );
    if tokens {
        let data = crate::util::root().join("registry/tests/data/auth");
        toml.push_str(&format!(
            "\n[auth.token]\nservice = \"rdctl-compat-test\"\nsigning_key = {:?}\npublic_key = {:?}\n",
            s(&data.join("token-key.pem")),
            s(&data.join("token-pub.pem"))
        ));
    }
    let config = dir.join("registry.toml");
    std::fs::write(&config, toml).unwrap();
    Server::start(&dir.join("data"), &["--config", s(&config)])
}

/// Writes `bytes` as a blob of the OCI layout at `layout`; returns its descriptor.
fn layout_blob(layout: &Path, media_type: &str, bytes: &[u8]) -> serde_json::Value {
    let d = Digest::sha256(bytes);
    let dir = layout.join("blobs/sha256");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join(d.encoded()), bytes).unwrap();
    serde_json::json!({"mediaType": media_type, "digest": d.to_string(), "size": bytes.len()})
}

/// A one-layer illumos image as an OCI layout tagged `v1` (the layer: a tar of one file).
fn image_layout(layout: &Path, text: &str) {
    std::fs::create_dir_all(layout).unwrap();
    std::fs::write(
        layout.join("oci-layout"),
        r#"{"imageLayoutVersion":"1.0.0"}"#,
    )
    .unwrap();
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_size(text.len() as u64);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    tar.append_data(&mut h, "etc/motd", text.as_bytes())
        .unwrap();
    let layer = tar.into_inner().unwrap();
    let config = serde_json::json!({
        "architecture": "amd64", "os": "illumos",
        "config": {"Cmd": ["/usr/bin/cat", "/etc/motd"]},
        "rootfs": {"type": "layers", "diff_ids": [Digest::sha256(&layer).to_string()]},
    });
    let config = layout_blob(layout, OCI_CONFIG, config.to_string().as_bytes());
    let layer = layout_blob(layout, TAR, &layer);
    let manifest = serde_json::json!({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST, "config": config, "layers": [layer],
    });
    let mut desc = layout_blob(layout, OCI_MANIFEST, manifest.to_string().as_bytes());
    desc["annotations"] = serde_json::json!({"org.opencontainers.image.ref.name": "v1"});
    let index =
        serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [desc]});
    std::fs::write(layout.join("index.json"), index.to_string()).unwrap();
}

/// skopeo with no credentials from the environment: its auth file is `auth` (which may not
/// exist), and neither docker's nor containers' default files are read.
fn skopeo(home: &Path, auth: &Path) -> Command {
    let mut c = tool("skopeo");
    c.env("HOME", home)
        .env("REGISTRY_AUTH_FILE", auth)
        .env("XDG_RUNTIME_DIR", home)
        .env_remove("DOCKER_CONFIG");
    c
}

fn fails(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    assert!(
        !out.status.success(),
        "{cmd:?} succeeded\nstdout:\n{}",
        tail(&out.stdout)
    );
    String::from_utf8_lossy(&out.stderr).into_owned()
}

fn skopeo_pushes_as_a_user_where_anonymous_may_pull(tokens: bool) {
    let dir = tempdir();
    let work = tempdir();
    let server = anonymous_pull_registry(dir.path(), tokens);
    let reg = server.host();
    let home = work.path();
    let auth = home.join("auth.json");
    let layout = home.join("img");
    image_layout(&layout, "pushed by skopeo\n");
    let src = format!("oci:{}:v1", s(&layout));

    // Anonymous and wrong-password pushes are refused.
    let err = fails(
        skopeo(home, &auth)
            .args(["--insecure-policy", "copy", "--dest-tls-verify=false"])
            .args([
                "--dest-no-creds",
                &src,
                &format!("docker://{reg}/team/app:anon"),
            ]),
    );
    assert!(
        err.contains("authentication required") || err.contains("unauthorized"),
        "{err}"
    );
    let err = fails(
        skopeo(home, &auth)
            .args(["--insecure-policy", "copy", "--dest-tls-verify=false"])
            .args(["--dest-creds", "alice:wrong"])
            .args([&src, &format!("docker://{reg}/team/app:wrong")]),
    );
    assert!(
        err.contains("authentication required")
            || err.contains("unauthorized")
            || err.contains("401"),
        "{err}"
    );

    // A push with --dest-creds.
    let remote = format!("docker://{reg}/team/app:v1");
    ok(skopeo(home, &auth)
        .args(["--insecure-policy", "copy", "--dest-tls-verify=false"])
        .args(["--dest-creds", "alice:alice-pw", &src, &remote]));

    // skopeo login, then a push with the saved credential.
    ok(skopeo(home, &auth).args([
        "login",
        "--tls-verify=false",
        "-u",
        "alice",
        "-p",
        "alice-pw",
        &reg,
    ]));
    assert!(std::fs::read_to_string(&auth).unwrap().contains(&reg));
    let remote2 = format!("docker://{reg}/team/app:v2");
    ok(skopeo(home, &auth)
        .args(["--insecure-policy", "copy", "--dest-tls-verify=false"])
        .args([&src, &remote2]));

    // What made that work: the ping of an anonymous caller carries the challenge of the
    // registry; with Basic on a 200 (it is let in), with tokens on a 401 as Docker Hub's
    // (docker needs that; skopeo follows either).
    let (status, headers, _) = http(server.addr, "GET", "/v2/", &[], b"");
    assert_eq!(status, if tokens { 401 } else { 200 });
    let scheme = if tokens {
        "Bearer realm="
    } else {
        "Basic realm="
    };
    assert!(
        header(&headers, "www-authenticate").starts_with(scheme),
        "{headers:?}"
    );

    // Anonymous callers still pull what was pushed, with skopeo and over plain HTTP.
    let nobody = home.join("none.json");
    let raw = ok(skopeo(home, &nobody).args([
        "inspect",
        "--raw",
        "--tls-verify=false",
        "--no-creds",
        &remote2,
    ]))
    .stdout;
    let manifest: serde_json::Value = serde_json::from_slice(&raw).unwrap();
    assert_eq!(manifest["mediaType"], OCI_MANIFEST);
    let back = home.join("back");
    ok(skopeo(home, &nobody)
        .args(["--insecure-policy", "copy", "--src-tls-verify=false"])
        .args(["--src-no-creds", &remote, &format!("oci:{}:v1", s(&back))]));
    let (status, _, _) = http(server.addr, "GET", "/v2/team/app/manifests/v1", &[], b"");
    assert_eq!(status, 200);
}

#[test]
fn skopeo_pushes_with_basic_auth_where_anonymous_may_pull() {
    skopeo_pushes_as_a_user_where_anonymous_may_pull(false);
}

#[test]
fn skopeo_pushes_with_bearer_tokens_where_anonymous_may_pull() {
    skopeo_pushes_as_a_user_where_anonymous_may_pull(true);
}

/// `rdctl login -u alice --password-stdin --auth-file FILE HOST` with `password` on stdin.
fn rdctl_login(home: &Path, file: &Path, host: &str, password: &str) -> std::process::Output {
    use std::io::Write as _;
    use std::process::Stdio;
    let mut child = crate::util::rdctl()
        .env("HOME", home)
        .args(["login", "-u", "alice", "--password-stdin", "--auth-file"])
        .arg(file)
        .arg(host)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(format!("{password}\n").as_bytes())
        .unwrap();
    child.wait_with_output().unwrap()
}

/// `rdctl login` checks the password where anonymous callers may pull: with Basic auth the
/// anonymous `/v2/` answers 200 with the challenge, which the login answers with the
/// credential (a wrong one then answers 401); with tokens it answers 401, and the token
/// endpoint refuses a wrong one. Neither is saved unchecked.
fn rdctl_login_checks_the_password_where_anonymous_may_pull(tokens: bool) {
    let dir = tempdir();
    let work = tempdir();
    let server = anonymous_pull_registry(dir.path(), tokens);
    let reg = server.host();
    let file = work.path().join("auth.json");

    let out = rdctl_login(work.path(), &file, &reg, "WRONG");
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "tokens {tokens}: {err}");
    assert!(err.contains("nothing was saved"), "{err}");
    assert!(err.contains("401"), "{err}");
    let saved = std::fs::read_to_string(&file).unwrap_or_default();
    assert!(!saved.contains(&reg), "{saved}");

    let out = rdctl_login(work.path(), &file, &reg, "alice-pw");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "tokens {tokens}: {err}");
    assert!(!err.contains("without being checked"), "{err}");
    assert!(std::fs::read_to_string(&file).unwrap().contains(&reg));
}

#[test]
fn rdctl_login_checks_the_password_with_basic_auth_where_anonymous_may_pull() {
    rdctl_login_checks_the_password_where_anonymous_may_pull(false);
}

#[test]
fn rdctl_login_checks_the_password_with_bearer_tokens_where_anonymous_may_pull() {
    rdctl_login_checks_the_password_where_anonymous_may_pull(true);
}

#[test]
fn crane_and_oras_push_with_credentials_where_anonymous_may_pull() {
    crane_and_oras_push_and_pull_anonymously(false);
}

/// With tokens the anonymous `GET /v2/` answers 401 (for docker): crane and oras still pull
/// without credentials, with anonymous tokens.
#[test]
fn crane_and_oras_push_with_bearer_tokens_where_anonymous_may_pull() {
    crane_and_oras_push_and_pull_anonymously(true);
}

fn crane_and_oras_push_and_pull_anonymously(tokens: bool) {
    let dir = tempdir();
    let work = tempdir();
    let server = anonymous_pull_registry(dir.path(), tokens);
    let reg = server.host();
    let home = work.path();
    let layout = home.join("img");
    image_layout(&layout, "pushed by crane\n");

    // crane: log in, push the layout's image, read it back anonymously.
    let docker_config = home.join("docker");
    let crane = |args: &[&str]| {
        let mut c = tool("crane");
        c.args(args)
            .args(["--insecure"])
            .env("HOME", home)
            .env("DOCKER_CONFIG", &docker_config);
        c
    };
    ok(&mut crane(&[
        "auth", "login", &reg, "-u", "alice", "-p", "alice-pw",
    ]));
    let target = format!("{reg}/crane/img:v1");
    ok(&mut crane(&["push", s(&layout), &target]));
    let (status, _, _) = http(server.addr, "GET", "/v2/crane/img/manifests/v1", &[], b"");
    assert_eq!(status, 200);
    // Logged out, crane may read but not push.
    ok(&mut crane(&["auth", "logout", &reg]));
    ok(&mut crane(&["digest", &target]));
    let out = crane(&["push", s(&layout), &format!("{reg}/crane/img:v2")])
        .output()
        .unwrap();
    assert!(!out.status.success(), "crane pushed without credentials");

    // oras: push with -u/-p over plain HTTP, pull anonymously.
    std::fs::write(home.join("artifact.txt"), "pushed by oras\n").unwrap();
    let oras_config = home.join("oras.json");
    let oras = |args: &[&str]| {
        let mut c = tool("oras");
        c.current_dir(home)
            .args(args)
            .args(["--plain-http", "--registry-config", s(&oras_config)])
            .env("HOME", home);
        c
    };
    let art = format!("{reg}/oras/art:v1");
    ok(&mut oras(&[
        "push",
        "-u",
        "alice",
        "-p",
        "alice-pw",
        &art,
        "artifact.txt:text/plain",
    ]));
    let out = home.join("out");
    ok(&mut oras(&["pull", &art, "-o", s(&out)]));
    assert_eq!(
        std::fs::read_to_string(out.join("artifact.txt")).unwrap(),
        "pushed by oras\n"
    );
}

/// Pushes `bytes` as a blob of `repo` with a monolithic POST + PUT.
fn push_blob(server: &Server, repo: &str, bytes: &[u8]) -> serde_json::Value {
    let d = Digest::sha256(bytes);
    let (status, headers, body) = http(
        server.addr,
        "POST",
        &format!("/v2/{repo}/blobs/uploads/?digest={d}"),
        &[("Content-Type", "application/octet-stream")],
        bytes,
    );
    assert_eq!(status, 201, "{}", String::from_utf8_lossy(&body));
    assert_eq!(header(&headers, "docker-content-digest"), d.to_string());
    serde_json::json!({"digest": d.to_string(), "size": bytes.len()})
}

/// PUTs a manifest or index; returns status and body.
fn put_manifest(
    server: &Server,
    repo: &str,
    reference: &str,
    doc: &serde_json::Value,
) -> (u16, String) {
    let media_type = doc["mediaType"].as_str().unwrap();
    let (status, _, body) = http(
        server.addr,
        "PUT",
        &format!("/v2/{repo}/manifests/{reference}"),
        &[("Content-Type", media_type)],
        doc.to_string().as_bytes(),
    );
    (status, String::from_utf8_lossy(&body).into_owned())
}

fn descriptor(media_type: &str, blob: &serde_json::Value) -> serde_json::Value {
    let mut d = blob.clone();
    d["mediaType"] = media_type.into();
    d
}

fn manifest_descriptor(doc: &serde_json::Value, platform: serde_json::Value) -> serde_json::Value {
    let bytes = doc.to_string();
    serde_json::json!({
        "mediaType": doc["mediaType"], "digest": Digest::sha256(bytes.as_bytes()).to_string(),
        "size": bytes.len(), "platform": platform,
    })
}

/// Pushes an illumos/amd64 image manifest (config and one layer) to `repo` by digest; the
/// manifest and its digest.
fn push_image(server: &Server, repo: &str) -> (serde_json::Value, String) {
    let layer = push_blob(
        server,
        repo,
        b"not really a tar, the registry does not look",
    );
    let config = serde_json::json!({
        "architecture": "amd64", "os": "illumos",
        "rootfs": {"type": "layers", "diff_ids": [layer["digest"]]},
    });
    let config = push_blob(server, repo, config.to_string().as_bytes());
    let image = serde_json::json!({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": descriptor(OCI_CONFIG, &config),
        "layers": [descriptor("application/vnd.oci.image.layer.v1.tar+gzip", &layer)],
    });
    let image_digest = Digest::sha256(image.to_string().as_bytes()).to_string();
    let (status, body) = put_manifest(server, repo, &image_digest, &image);
    assert_eq!(status, 201, "{body}");
    (image, image_digest)
}

#[test]
fn the_index_buildx_pushes_with_an_attestation_manifest_is_stored() {
    let data = tempdir();
    let work = tempdir();
    let server = Server::start(data.path(), &[]);
    let repo = "buildx/app";
    let (image, image_digest) = push_image(&server, repo);

    // BuildKit's attestation manifest: an image config for unknown/unknown and in-toto
    // statements as layers.
    let statement = serde_json::json!({
        "_type": "https://in-toto.io/Statement/v0.1",
        "predicateType": "https://slsa.dev/provenance/v0.2",
        "subject": [{"name": "pkg:docker/buildx/app", "digest": {"sha256": &image_digest[7..]}}],
        "predicate": {"buildType": "https://mobyproject.org/buildkit@v1"},
    });
    let statement = push_blob(&server, repo, statement.to_string().as_bytes());
    let att_config = serde_json::json!({
        "architecture": "unknown", "os": "unknown", "config": {},
        "rootfs": {"type": "layers", "diff_ids": [statement["digest"]]},
    });
    let att_config = push_blob(&server, repo, att_config.to_string().as_bytes());
    let mut in_toto = descriptor("application/vnd.in-toto+json", &statement);
    in_toto["annotations"] =
        serde_json::json!({"in-toto.io/predicate-type": "https://slsa.dev/provenance/v0.2"});
    let attestation = serde_json::json!({
        "schemaVersion": 2, "mediaType": OCI_MANIFEST,
        "config": descriptor(OCI_CONFIG, &att_config), "layers": [in_toto],
    });
    let att_digest = Digest::sha256(attestation.to_string().as_bytes()).to_string();
    let (status, body) = put_manifest(&server, repo, &att_digest, &attestation);
    assert_eq!(status, 201, "the attestation manifest was refused: {body}");

    // The index as buildx writes it, but with the attestation first: a client that took the
    // first entry would get it.
    let mut att_entry = manifest_descriptor(
        &attestation,
        serde_json::json!({"architecture": "unknown", "os": "unknown"}),
    );
    att_entry["annotations"] = serde_json::json!({
        "vnd.docker.reference.digest": image_digest,
        "vnd.docker.reference.type": "attestation-manifest",
    });
    let index = serde_json::json!({
        "schemaVersion": 2, "mediaType": OCI_INDEX,
        "manifests": [
            att_entry,
            manifest_descriptor(&image, serde_json::json!({"architecture": "amd64", "os": "illumos"})),
        ],
    });
    let (status, body) = put_manifest(&server, repo, "v1", &index);
    assert_eq!(status, 201, "the buildx index was refused: {body}");
    let (status, _, stored) = http(
        server.addr,
        "GET",
        &format!("/v2/{repo}/manifests/v1"),
        &[("Accept", OCI_INDEX)],
        b"",
    );
    assert_eq!(
        (status, stored.as_slice()),
        (200, index.to_string().as_bytes())
    );

    // The worker's choice: the illumos image, never the unknown/unknown entry.
    let (report, doc) = validator::check_document(&stored, None, None, "v1");
    assert!(report.is_ok(), "{report}");
    let Some(validator::Document::Index(parsed)) = doc else {
        panic!("not an index")
    };
    let host = worker_runtime::HostPlatform::new(Some("omnios-r151054".into()));
    let picked = parsed.pick_platform(|p| host.accepts(p)).unwrap();
    assert_eq!(picked.digest.to_string(), image_digest);

    // rdctl validate: a platform-value warning for each unknown value, and a pass.
    let file = work.path().join("index.json");
    std::fs::write(&file, &stored).unwrap();
    let (code, report) = validate_json(&[s(&file)]);
    assert_eq!(code, 0, "{report}");
    let warnings: Vec<_> = report["violations"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|v| v["rule"] == "platform-value")
        .collect();
    assert_eq!(warnings.len(), 2, "{report}");
    assert!(
        warnings.iter().all(|v| v["severity"] == "warning"),
        "{report}"
    );
}

#[test]
fn an_index_for_amigaos_is_stored_and_malformed_platforms_are_refused() {
    let data = tempdir();
    let server = Server::start(data.path(), &[]);
    let repo = "amiga/app";
    let (image, _) = push_image(&server, repo);

    // An index for an OS that is not a GOOS value.
    let amiga = serde_json::json!({
        "schemaVersion": 2, "mediaType": OCI_INDEX,
        "manifests": [manifest_descriptor(&image, serde_json::json!({"architecture": "m68k", "os": "amigaos"}))],
    });
    let (status, body) = put_manifest(&server, repo, "amiga", &amiga);
    assert_eq!(status, 201, "the amigaos index was refused: {body}");

    // Malformed platforms are still refused, naming the field.
    for (platform, says) in [
        (
            serde_json::json!({"architecture": "amd64", "os": ""}),
            "must not be empty",
        ),
        (serde_json::json!({"architecture": "amd64"}), "is required"),
        (
            serde_json::json!({"architecture": "amd64", "os": 7}),
            "must be a string",
        ),
        (
            serde_json::json!({"architecture": "amd64/v3", "os": "illumos"}),
            "'/'",
        ),
    ] {
        let bad = serde_json::json!({
            "schemaVersion": 2, "mediaType": OCI_INDEX,
            "manifests": [manifest_descriptor(&image, platform.clone())],
        });
        let (status, body) = put_manifest(&server, repo, "bad", &bad);
        assert_eq!(status, 400, "{platform}: {body}");
        let err: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(err["errors"][0]["code"], "MANIFEST_INVALID", "{body}");
        let message = err["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned()
            + err["errors"][0]["detail"].to_string().as_str();
        assert!(
            message.contains("platform") && message.contains(says),
            "{platform}: {body}"
        );
    }
    let (status, _, _) = http(
        server.addr,
        "GET",
        &format!("/v2/{repo}/manifests/bad"),
        &[],
        b"",
    );
    assert_eq!(status, 404);
}
