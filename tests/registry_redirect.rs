//! `s3_redirect`: blob GETs answered with `307 Temporary Redirect` to a presigned GetObject URL
//! of the object in SeaweedFS (a private instance whose S3 gateway checks signatures, so an
//! expired or altered URL is refused). skopeo, crane, rdctl and the worker pull through the
//! redirect while the registry sends none of the blob bytes (its response byte counter moves by
//! less than a quarter of the layer over all the pulls); an anonymous caller who may not pull
//! gets a 401 and no URL; with the option off, the same bucket is served as before.

use std::net::SocketAddr;
use std::path::Path;
use std::process::Command;

use base64::Engine as _;
use s3_fixtures::SeaweedFs;
use sha2::{Digest as _, Sha256};

use crate::registry_e2e::http;
use crate::util::{Server, ok, rdctl, s, tempdir, tool};

const AK: &str = "AKREDIRECTTEST";
const SK: &str = "redirect-secret-key";
const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
/// The layer's file: larger than every response the registry sends in this test together.
const LAYER_FILE: usize = 6 << 20;

fn digest(data: &[u8]) -> String {
    let hex: String = Sha256::digest(data)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    format!("sha256:{hex}")
}

/// A one-layer illumos image: (config, layer, file) bytes; the layer is a tar of one file,
/// `opt/data.bin`, of [`LAYER_FILE`] bytes that do not repeat.
fn image() -> (Vec<u8>, Vec<u8>, Vec<u8>) {
    let mut data = Vec::with_capacity(LAYER_FILE);
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    while data.len() < LAYER_FILE {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        data.extend_from_slice(&x.to_le_bytes());
    }
    let mut tar = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_ustar();
    h.set_size(data.len() as u64);
    h.set_mode(0o644);
    h.set_entry_type(tar::EntryType::Regular);
    h.set_cksum();
    tar.append_data(&mut h, "opt/data.bin", data.as_slice())
        .unwrap();
    let layer = tar.into_inner().unwrap();
    let config = serde_json::json!({
        "architecture": "amd64", "os": "illumos",
        "config": {"Cmd": ["/usr/bin/true"]},
        "rootfs": {"type": "layers", "diff_ids": [digest(&layer)]},
    });
    (config.to_string().into_bytes(), layer, data)
}

/// Pushes the image as `repo:v1` with `auth`; returns the layer's digest.
fn push(addr: SocketAddr, auth: &str, repo: &str, config: &[u8], layer: &[u8]) -> String {
    let blob = |data: &[u8]| {
        let d = digest(data);
        let (st, _, body) = http(
            addr,
            "POST",
            &format!("/v2/{repo}/blobs/uploads/?digest={d}"),
            &[
                ("content-type", "application/octet-stream"),
                ("authorization", auth),
            ],
            data,
        );
        assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));
        d
    };
    let (c, l) = (blob(config), blob(layer));
    let m = serde_json::json!({
        "schemaVersion": 2, "mediaType": MANIFEST,
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": c, "size": config.len()},
        "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": l, "size": layer.len()}],
    });
    let (st, _, body) = http(
        addr,
        "PUT",
        &format!("/v2/{repo}/manifests/v1"),
        &[("content-type", MANIFEST), ("authorization", auth)],
        m.to_string().as_bytes(),
    );
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));
    l
}

/// `value` of the metric line starting with `name` (labels included), 0 when absent.
fn metric(addr: SocketAddr, name: &str) -> u64 {
    let (st, _, body) = http(addr, "GET", "/metrics", &[], b"");
    assert_eq!(st, 200);
    String::from_utf8(body)
        .unwrap()
        .lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
        .unwrap_or(0)
}

/// The `Location` of a response, split into the address and the path with its query.
fn split_url(url: &str) -> (SocketAddr, String) {
    let rest = url.strip_prefix("http://").expect("an http:// URL");
    let (host, path) = rest.split_at(rest.find('/').expect("a path"));
    (host.parse().expect("an IP:port host"), path.to_owned())
}

fn header<'a>(h: &'a [(String, String)], name: &str) -> Option<&'a str> {
    h.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
}

fn skopeo(home: &Path) -> Command {
    let mut c = tool("skopeo");
    c.env("HOME", home)
        .env("REGISTRY_AUTH_FILE", home.join("auth.json"))
        .env("XDG_RUNTIME_DIR", home)
        .env_remove("DOCKER_CONFIG");
    c
}

#[test]
fn blob_gets_redirect_to_presigned_urls_and_clients_follow_them() {
    let sw = SeaweedFs::start_with_identity(AK, SK).unwrap_or_else(|e| panic!("{e}"));
    let bucket = sw.bucket().unwrap_or_else(|e| panic!("{e}"));
    let dir = tempdir();
    let d = dir.path();
    let users = d.join("htpasswd");
    std::fs::write(
        &users,
        format!("alice:{}\n", bcrypt::hash("alice-pw", 4).unwrap()),
    )
    .unwrap();
    let base = format!(
        "s3_endpoint = {:?}\ns3_bucket = {bucket:?}\ns3_prefix = \"reg\"\n\
         s3_access_key_id = {AK:?}\ns3_secret_access_key = {SK:?}\n",
        sw.endpoint()
    );
    let auth = format!(
        "[auth]\nhtpasswd = {:?}\n\n\
         [[auth.acl]]\nsubjects = [\"anonymous\"]\nrepositories = [\"open/**\"]\nactions = [\"pull\"]\n\n\
         [[auth.acl]]\nsubjects = [\"alice\"]\nrepositories = [\"**\"]\nactions = [\"*\"]\n",
        s(&users)
    );
    let on = d.join("on.toml");
    std::fs::write(
        &on,
        format!("{base}s3_redirect = true\ns3_redirect_expiry_secs = 3\n\n{auth}"),
    )
    .unwrap();
    let server = Server::start_with_aws_env(&d.join("unused"), &["--config", s(&on)], &[]);
    let host = server.host();
    let alice = format!(
        "Basic {}",
        base64::engine::general_purpose::STANDARD.encode("alice:alice-pw")
    );
    let (config, layer, file) = image();
    let l = push(server.addr, &alice, "open/img", &config, &layer);
    push(server.addr, &alice, "closed/img", &config, &layer);

    // The 307: a Location presigned for 3 s on the configured endpoint, nothing in the body.
    let (st, h, body) = http(
        server.addr,
        "GET",
        &format!("/v2/open/img/blobs/{l}"),
        &[],
        b"",
    );
    assert_eq!(
        st,
        307,
        "a GET answered {st} with {} body bytes",
        body.len()
    );
    assert!(body.is_empty());
    assert_eq!(header(&h, "docker-content-digest"), Some(l.as_str()));
    let location = header(&h, "location").expect("a Location").to_owned();
    assert!(
        location.starts_with(&format!("{}/{bucket}/reg/", sw.endpoint())),
        "{location}"
    );
    for part in ["X-Amz-Expires=3&", "X-Amz-Signature=", "X-Amz-Credential="] {
        assert!(location.contains(part), "{part} not in {location}");
    }
    let (s3, path) = split_url(&location);
    let (st, _, got) = http(s3, "GET", &path, &[], b"");
    assert_eq!(st, 200);
    assert!(got == layer, "the URL serves other bytes than the layer");
    // A client's Range goes to the URL, and the store answers it.
    let (st, h, got) = http(s3, "GET", &path, &[("range", "bytes=1000-1099")], b"");
    assert_eq!(st, 206);
    assert_eq!(got, layer[1000..1100]);
    assert_eq!(
        header(&h, "content-range"),
        Some(format!("bytes 1000-1099/{}", layer.len()).as_str())
    );
    // Signed: a longer expiry written into the URL is refused.
    let forged = path.replace("X-Amz-Expires=3&", "X-Amz-Expires=3600&");
    assert_eq!(http(s3, "GET", &forged, &[], b"").0, 403);
    // Short-lived: refused once its 3 s have passed.
    std::thread::sleep(std::time::Duration::from_secs(5));
    assert_eq!(http(s3, "GET", &path, &[], b"").0, 403, "{location}");

    // HEAD stays with the registry.
    let (st, h, _) = http(
        server.addr,
        "HEAD",
        &format!("/v2/open/img/blobs/{l}"),
        &[],
        b"",
    );
    assert_eq!(st, 200);
    assert_eq!(header(&h, "location"), None);
    assert_eq!(
        header(&h, "content-length"),
        Some(layer.len().to_string().as_str())
    );

    // A caller who may not pull gets a 401 and no URL, and a blob not in the repository a 404.
    let (st, h, _) = http(
        server.addr,
        "GET",
        &format!("/v2/closed/img/blobs/{l}"),
        &[],
        b"",
    );
    assert_eq!((st, header(&h, "location")), (401, None));
    let missing = digest(b"not pushed");
    let (st, h, _) = http(
        server.addr,
        "GET",
        &format!("/v2/open/img/blobs/{missing}"),
        &[],
        b"",
    );
    assert_eq!((st, header(&h, "location")), (404, None));

    // skopeo, crane and rdctl pull through the redirect; rdctl with alice's credentials from
    // the closed repository too (that they stay with the registry is
    // client_auth_layers::credentials_never_follow_a_redirect_to_another_host: SeaweedFS
    // ignores an Authorization header beside a presigned query).
    let sent_before = metric(server.addr, "registry_http_response_bytes_total");
    let home = d.join("home");
    std::fs::create_dir_all(&home).unwrap();
    ok(skopeo(&home).args([
        "copy",
        "--src-tls-verify=false",
        "--preserve-digests",
        &format!("docker://{host}/open/img:v1"),
        &format!("oci:{}:v1", s(&d.join("skopeo"))),
    ]));
    ok(tool("crane").args([
        "pull",
        "--format=oci",
        &format!("{host}/open/img:v1"),
        s(&d.join("crane")),
    ]));
    ok(rdctl().args(["pull", &format!("{host}/open/img:v1"), s(&d.join("rdctl"))]));
    let auth_file = d.join("auth.json");
    std::fs::write(
        &auth_file,
        serde_json::json!({"auths": {host.clone(): {"auth": base64::engine::general_purpose::STANDARD.encode("alice:alice-pw")}}})
            .to_string(),
    )
    .unwrap();
    ok(rdctl().args([
        "pull",
        "--auth-file",
        s(&auth_file),
        &format!("{host}/closed/img:v1"),
        s(&d.join("rdctl-closed")),
    ]));
    let layer_file = |layout: &Path| {
        layout
            .join("blobs/sha256")
            .join(l.strip_prefix("sha256:").unwrap())
    };
    for out in ["skopeo", "crane", "rdctl", "rdctl-closed"] {
        let got = std::fs::read(layer_file(&d.join(out))).unwrap_or_else(|e| {
            let blobs = std::fs::read_dir(d.join(out).join("blobs/sha256"))
                .map(|r| r.map(|e| e.unwrap().file_name()).collect::<Vec<_>>());
            panic!("{out} did not write the layer: {e}; blobs: {blobs:?}")
        });
        assert!(got == layer, "{out} wrote other bytes than the layer");
    }
    // The worker pulls with the same client into a zone root.
    let node = crate::worker_e2e::Node::new(&d.join("node"));
    node.zone("web", &format!("{host}/open/img:v1"));
    let out = node.run_once();
    assert!(
        out.status.success(),
        "worker failed:\n{}",
        crate::util::tail(&out.stderr)
    );
    assert_eq!(node.status()["web"]["phase"], "Ready");
    let got = std::fs::read(node.root("web").join("opt/data.bin")).unwrap();
    assert!(got == file, "the zone root has other bytes than the image");
    let sent = metric(server.addr, "registry_http_response_bytes_total") - sent_before;
    assert!(
        sent < layer.len() as u64 / 4,
        "the registry sent {sent} bytes for five pulls of a {} byte layer",
        layer.len()
    );
    let redirected = metric(
        server.addr,
        "registry_http_requests_total{route=\"blob\",method=\"GET\",status=\"307\"}",
    );
    assert!(redirected >= 6, "{redirected} blob GETs redirected");
    assert_eq!(
        metric(
            server.addr,
            "registry_http_requests_total{route=\"blob\",method=\"GET\",status=\"200\"}",
        ),
        0,
        "the registry answered a blob GET itself"
    );
    drop(server);

    // Off (the default): the same bucket, the bytes come from the registry.
    let off = d.join("off.toml");
    std::fs::write(&off, format!("{base}\n{auth}")).unwrap();
    let server = Server::start_with_aws_env(&d.join("unused"), &["--config", s(&off)], &[]);
    let (st, h, got) = http(
        server.addr,
        "GET",
        &format!("/v2/open/img/blobs/{l}"),
        &[],
        b"",
    );
    assert_eq!((st, header(&h, "location")), (200, None));
    assert!(got == layer);
    ok(tool("crane").args([
        "pull",
        "--format=oci",
        &format!("{}/open/img:v1", server.host()),
        s(&d.join("crane-off")),
    ]));
    assert!(metric(server.addr, "registry_http_response_bytes_total") >= 2 * layer.len() as u64);
}
