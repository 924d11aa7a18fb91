//! A pull-through cache that trusts (issue 35): a `[[proxy]]` rule with `only_signed` caches
//! and serves only the images its admission policy (the worker's format) admits. Upstream:
//! our registry, with images signed by cosign v2.6.5 (`.sig` tag), by cosign v3.1.3 (a
//! sigstore bundle referrer), a multi-platform index signed by its own digest, one unsigned
//! and one signed by a key the policy does not list. crane and skopeo pull the signed ones
//! through the cache (and cosign verifies them there: the signatures come through too); the
//! others are `403 DENIED` naming the rule, the image digest, the key tried and why, and
//! nothing of them is stored (not in the data directory, and not there once the upstream is
//! gone); a blob of a refused image asked for by digest alone is refused as well.

use std::fs;
use std::path::Path;
use std::process::Command;

use serde_json::Value;

use crate::registry_e2e::http;
use crate::signing::{PASSWORD, cosign, cosign_sign, key_id, pushed_image, rd};
use crate::util::{Server, ok, s, tail, tempdir, tool};

const ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json";

/// cosign v3 in `dir` (as tests/signing_bundles.rs runs it).
fn cosign3(dir: &Path) -> Command {
    let mut c = tool("cosign3");
    c.current_dir(dir)
        .env("COSIGN_PASSWORD", PASSWORD)
        .env("HOME", dir)
        .env("TUF_ROOT", dir.join("tuf"))
        .env_remove("COSIGN_EXPERIMENTAL")
        .env_remove("COSIGN_REPOSITORY");
    c
}

/// GET `path` at `addr`: status and body.
fn get(addr: std::net::SocketAddr, path: &str) -> (u16, Vec<u8>) {
    let (st, _, body) = http(addr, "GET", path, &[("Accept", ACCEPT)], b"");
    (st, body)
}

/// The `errors[0]` of an OCI error body: code and message.
fn oci_error(body: &[u8]) -> (String, String) {
    let v: Value = serde_json::from_slice(body)
        .unwrap_or_else(|e| panic!("not an error document ({e}): {}", tail(body)));
    (
        v["errors"][0]["code"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        v["errors"][0]["message"]
            .as_str()
            .unwrap_or_default()
            .to_owned(),
    )
}

/// Every file path under `dir`, as text.
fn files(dir: &Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_owned()];
    while let Some(d) = todo.pop() {
        for e in fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else {
                out.push(p.to_string_lossy().into_owned());
            }
        }
    }
    out
}

/// Whether any file under `dir` has `digest`'s hex in its path or its content.
fn stored(dir: &Path, digest: &str) -> bool {
    let hex = digest.trim_start_matches("sha256:");
    files(dir).iter().any(|f| {
        f.contains(hex)
            || fs::read(f).is_ok_and(|b| b.windows(hex.len()).any(|w| w == hex.as_bytes()))
    })
}

/// The images under `site/` at `host` (see the module docs); returns the digests of `plain`
/// and `other` with their first layers, and the multi-platform index's digest.
struct Seeded {
    refused: Vec<(&'static str, String, String)>,
    index: String,
}

fn seed(d: &Path, host: &str) -> Seeded {
    ok(cosign(d).arg("generate-key-pair"));
    ok(rd(d).args(["key", "generate", "--output-key-prefix", "stranger"]));
    ok(cosign3(d).args(["signing-config", "create", "--out", "sc.json"]));
    let mut refused = Vec::new();
    for (repo, motd) in [
        ("v2", "signed by cosign v2\n"),
        ("v3", "signed by cosign v3, a sigstore bundle\n"),
        ("plain", "not signed at all\n"),
        ("other", "signed by a stranger's key, never by ours\n"),
    ] {
        let digest = pushed_image(d, motd, &format!("{host}/site/{repo}:1.0"));
        let by_digest = format!("{host}/site/{repo}@{digest}");
        match repo {
            "v2" => cosign_sign(d, "cosign.key", &by_digest),
            "v3" => {
                ok(cosign3(d).args([
                    "sign",
                    "--yes",
                    "--key",
                    "cosign.key",
                    "--signing-config",
                    "sc.json",
                    "--allow-http-registry",
                    &by_digest,
                ]));
            }
            "other" => {
                ok(rd(d).args(["sign", "--key", "stranger.key", &by_digest]));
            }
            _ => {}
        }
        if matches!(repo, "plain" | "other") {
            let addr = host.parse().unwrap();
            let (st, body) = get(addr, &format!("/v2/site/{repo}/manifests/{digest}"));
            assert_eq!(st, 200);
            let m: Value = serde_json::from_slice(&body).unwrap();
            let layer = m["layers"][0]["digest"].as_str().unwrap().to_owned();
            refused.push((repo, digest, layer));
        }
    }
    // A multi-platform index of two images, signed by the index's own digest.
    for (tag, motd) in [
        ("a", "platform a of an index\n"),
        ("b", "platform bb of an index\n"),
    ] {
        pushed_image(d, motd, &format!("{host}/site/multi:{tag}"));
    }
    ok(tool("crane").args([
        "index",
        "append",
        "--insecure",
        "-m",
        &format!("{host}/site/multi:a"),
        "-m",
        &format!("{host}/site/multi:b"),
        "-t",
        &format!("{host}/site/multi:1.0"),
    ]));
    let index = String::from_utf8(
        ok(tool("crane").args(["digest", "--insecure", &format!("{host}/site/multi:1.0")])).stdout,
    )
    .unwrap()
    .trim()
    .to_owned();
    cosign_sign(d, "cosign.key", &format!("{host}/site/multi@{index}"));
    fs::write(
        d.join("policy.toml"),
        "[[rule]]\nmatch = \"**/site/*\"\naction = \"signed\"\nkeys = [\"cosign.pub\"]\n",
    )
    .unwrap();
    Seeded { refused, index }
}

#[test]
fn only_signed_caches_and_serves_only_what_the_policy_admits() {
    let dir = tempdir();
    let d = dir.path();
    let up_data = tempdir();
    let mut up = Server::start(up_data.path(), &[]);
    let seeded = seed(d, &up.host());
    let cosign_id = key_id(d, "cosign.pub");
    let short = cosign_id[..cosign_id.len().min("sha256:".len() + 12)].to_owned();

    let cache_data = tempdir();
    let store = cache_data.path().join("store");
    let cfg = d.join("cache.toml");
    fs::write(
        &cfg,
        format!(
            "[[proxy]]\nprefix = \"hub\"\nupstreams = [\"http://{}/site\"]\nonly_signed = \"{}\"\n",
            up.host(),
            s(&d.join("policy.toml"))
        ),
    )
    .unwrap();
    let cache = Server::start(&store, &["--config", s(&cfg)]);
    let through = |repo: &str| format!("{}/hub/{repo}:1.0", cache.host());

    // Signed by cosign v2 and v3: skopeo and crane pull them through the cache.
    for repo in ["v2", "v3"] {
        let out = d.join(format!("skopeo-{repo}"));
        ok(tool("skopeo").args([
            "copy",
            "--src-tls-verify=false",
            &format!("docker://{}", through(repo)),
            &format!("oci:{}:x", s(&out)),
        ]));
        ok(tool("crane").args([
            "pull",
            "--insecure",
            "--format",
            "oci",
            &through(repo),
            s(&d.join(format!("crane-{repo}"))),
        ]));
    }
    // The signatures come through the cache too: cosign verifies there.
    ok(cosign(d).args([
        "verify",
        "--key",
        "cosign.pub",
        "--insecure-ignore-tlog=true",
        "--allow-http-registry",
        &through("v2"),
    ]));
    ok(cosign3(d).args([
        "verify",
        "--key",
        "cosign.pub",
        "--insecure-ignore-tlog=true",
        "--allow-http-registry",
        &through("v3"),
    ]));

    // The index signed by its digest: every platform comes through with it.
    ok(tool("skopeo").args([
        "copy",
        "--all",
        "--src-tls-verify=false",
        &format!("docker://{}", through("multi")),
        &format!("oci:{}:x", s(&d.join("skopeo-multi"))),
    ]));
    let digest = String::from_utf8(
        ok(tool("crane").args(["digest", "--insecure", &through("multi")])).stdout,
    )
    .unwrap();
    assert_eq!(digest.trim(), seeded.index);

    // Unsigned, and signed by another key: refused naming the rule, the digest, the key
    // tried and why; crane and skopeo fail with it.
    for (repo, digest, layer) in &seeded.refused {
        let (st, body) = get(cache.addr, &format!("/v2/hub/{repo}/manifests/1.0"));
        let (code, message) = oci_error(&body);
        assert_eq!((st, code.as_str()), (403, "DENIED"), "{message}");
        let why = if *repo == "plain" {
            "unsigned"
        } else {
            "unknown_key"
        };
        for part in [
            "[[proxy]] \"hub\" only_signed",
            digest.as_str(),
            &short,
            why,
            "policy.toml",
        ] {
            assert!(message.contains(part), "{repo}: {part:?} not in {message}");
        }
        // By digest too.
        let (st, _) = get(cache.addr, &format!("/v2/hub/{repo}/manifests/{digest}"));
        assert_eq!(st, 403, "{repo} by digest");
        let out = tool("crane")
            .args([
                "pull",
                "--insecure",
                &through(repo),
                s(&d.join("refused.tar")),
            ])
            .output()
            .unwrap();
        assert!(!out.status.success());
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("DENIED") && err.contains(why), "{err}");
        let out = tool("skopeo")
            .args([
                "copy",
                "--src-tls-verify=false",
                &format!("docker://{}", through(repo)),
                &format!("oci:{}:x", s(&d.join(format!("skopeo-refused-{repo}")))),
            ])
            .output()
            .unwrap();
        assert!(!out.status.success());
        assert!(
            String::from_utf8_lossy(&out.stderr).contains(why),
            "{}",
            tail(&out.stderr)
        );
        // A blob of the refused image by its digest alone does not pull through.
        let (st, body) = get(cache.addr, &format!("/v2/hub/{repo}/blobs/{layer}"));
        let (code, message) = oci_error(&body);
        assert_eq!((st, code.as_str()), (403, "DENIED"), "{message}");
        assert!(
            message.contains(layer.as_str()) && message.contains("only_signed"),
            "{message}"
        );
        // Its signatures do not come through either (the image they belong to is refused).
        let sig_tag = format!("{}.sig", digest.replace(':', "-"));
        let (up_st, _) = get(up.addr, &format!("/v2/site/{repo}/manifests/{sig_tag}"));
        let (st, body) = get(cache.addr, &format!("/v2/hub/{repo}/manifests/{sig_tag}"));
        if up_st == 200 {
            assert_eq!(st, 403, "{repo}'s {sig_tag}: {}", tail(&body));
        } else {
            assert_eq!(st, 404, "{repo}'s {sig_tag}: {}", tail(&body));
        }
        // Nothing of it is stored.
        assert!(
            !stored(&store, digest),
            "{repo}'s manifest {digest} is in the cache"
        );
        assert!(
            !stored(&store, layer),
            "{repo}'s layer {layer} is in the cache"
        );
    }
    assert!(
        stored(&store, &seeded.index),
        "the admitted index is not cached"
    );

    // The upstream gone: the admitted images are served from the cache, the refused ones
    // were never stored (503: not cached, the upstream unavailable).
    up.signal("-9");
    up.wait(std::time::Duration::from_secs(10));
    for repo in ["v2", "v3", "multi"] {
        ok(tool("crane").args(["digest", "--insecure", &through(repo)]));
    }
    for (repo, digest, _) in &seeded.refused {
        let (st, body) = get(cache.addr, &format!("/v2/hub/{repo}/manifests/{digest}"));
        assert_eq!(st, 503, "{repo}: {}", tail(&body));
    }
    let log = cache.log_tail();
    assert!(log.contains("only_signed: refused"), "{log}");
}
