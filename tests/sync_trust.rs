//! A sync that trusts (issue 35): `only_signed` copies only what an admission policy in the
//! worker's format admits (images signed by cosign v2.6.5, `.sig` tag, and by cosign v3.1.3,
//! sigstore bundle referrer, copied; unsigned and stranger-signed ones refused, naming the
//! rule, the keys tried and why), from `rdctl sync` and from the registry's `[[sync]]`
//! schedule; air-gap bundles signed at export and verified at import (a bundle altered
//! consistently is refused, naming the key and the file; `cosign verify-blob` accepts the
//! signature); and `rdctl copy` / `rdctl sync` telling manifests written from manifests
//! already there.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::registry_e2e::http;
use crate::signing::{PASSWORD, cosign, cosign_sign, key_id, pushed_image, rd};
use crate::sync::head_digest;
use crate::util::{Distribution, Server, ok, s, tail, tempdir, tool};

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

/// `rdctl ARGS --json` in `dir`: exit code, document, stderr.
fn json(dir: &Path, args: &[&str]) -> (i32, Value, String) {
    let out = rd(dir).args(args).arg("--json").output().unwrap();
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rdctl {args:?} printed no JSON ({e}):\n{}\n{}",
            tail(&out.stdout),
            tail(&out.stderr)
        )
    });
    (
        out.status.code().unwrap(),
        v,
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn image<'a>(v: &'a Value, repo: &str) -> &'a Value {
    v["images"]
        .as_array()
        .unwrap()
        .iter()
        .find(|i| i["repository"].as_str().unwrap().ends_with(repo))
        .unwrap_or_else(|| panic!("no {repo} in {v:#}"))
}

/// Four images under `site/` at `host`: `v2` signed by cosign v2 (`.sig` tag), `v3` by
/// cosign v3 (a bundle referrer), `plain` unsigned, `other` signed by a key the policy does
/// not list. Writes `cosign.key`/`.pub` (cosign v2), `stranger.key`/`.pub` and `policy.toml`.
fn seed(d: &Path, host: &str) {
    ok(cosign(d).arg("generate-key-pair"));
    ok(rd(d).args(["key", "generate", "--output-key-prefix", "stranger"]));
    ok(cosign3(d).args(["signing-config", "create", "--out", "sc.json"]));
    for (repo, motd) in [
        ("v2", "signed by cosign v2\n"),
        ("v3", "signed by cosign v3, a bundle\n"),
        ("plain", "not signed\n"),
        ("other", "signed by a stranger's key, not ours\n"),
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
    }
    fs::write(
        d.join("policy.toml"),
        "[[rule]]\nmatch = \"**/site/*\"\naction = \"signed\"\nkeys = [\"cosign.pub\"]\n",
    )
    .unwrap();
}

/// `rdctl sync --only-signed` copies the images cosign v2 and cosign v3 signed with the
/// policy's key into distribution v3, and refuses the unsigned one and the one signed by
/// another key, naming the rule, the key tried and the reason; the registry's `[[sync]]` with
/// `only_signed` does the same and records the refusals in its status.
#[test]
fn only_signed_copies_what_the_policy_admits() {
    let dir = tempdir();
    let d = dir.path();
    let data = tempdir();
    let src = Server::start(data.path(), &[]);
    seed(d, &src.host());
    let store = tempdir();
    let dist = Distribution::start_v3(
        store.path(),
        &format!(
            "  filesystem:\n    rootdirectory: {}\n",
            s(&store.path().join("data"))
        ),
    );
    let cosign_id = key_id(d, "cosign.pub");
    let short = &cosign_id[..cosign_id.len().min("sha256:".len() + 12)];

    let (code, v, stderr) = json(
        d,
        &[
            "sync",
            "--only-signed",
            "policy.toml",
            &format!("{}/site", src.host()),
            &format!("{}/mirror", dist.host()),
        ],
    );
    assert_eq!(code, 0, "{v:#}\n{stderr}");
    for repo in ["v2", "v3"] {
        assert_eq!(image(&v, repo)["status"], "copied", "{v:#}");
        assert!(
            head_digest(dist.addr(), &format!("mirror/{repo}"), "1.0").is_some(),
            "{repo} not at the destination"
        );
    }
    let plain = &image(&v, "plain")["refused"];
    assert_eq!(plain["reason"], "unsigned", "{v:#}");
    let other = &image(&v, "other")["refused"];
    assert_eq!(other["reason"], "unknown_key", "{v:#}");
    for r in [plain, other] {
        assert_eq!(
            r["rule"].as_str().unwrap(),
            "rule 1 (match = \"**/site/*\")"
        );
        assert_eq!(r["keys"], serde_json::json!([short]), "{v:#}");
        assert!(
            r["policy"].as_str().unwrap().ends_with("policy.toml"),
            "{r}"
        );
    }
    for repo in ["plain", "other"] {
        assert_eq!(image(&v, repo)["status"], "refused", "{v:#}");
        assert!(
            head_digest(dist.addr(), &format!("mirror/{repo}"), "1.0").is_none(),
            "{repo}, refused, is at the destination"
        );
    }
    assert_eq!(v["totals"]["refused"], 2, "{v:#}");
    // The text names the key tried and the reason too.
    let out = rd(d)
        .args([
            "sync",
            "--only-signed",
            "policy.toml",
            "--repo",
            "plain",
            &format!("{}/site", src.host()),
            &format!("{}/mirror", dist.host()),
        ])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("REFUSED") && text.contains(short) && text.contains("unsigned"),
        "{text}"
    );

    // The registry's schedule: the same policy through [[sync]] only_signed.
    let mirror_data = tempdir();
    let cfg = d.join("mirror.toml");
    fs::write(
        &cfg,
        format!(
            "[[sync]]\nname = \"signed\"\nupstream = \"http://{}/site\"\ninterval = \"1s\"\n\
             destination = \"m\"\nonly_signed = \"{}\"\n",
            src.host(),
            s(&d.join("policy.toml"))
        ),
    )
    .unwrap();
    let mirror = Server::start(mirror_data.path(), &["--config", s(&cfg)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let st = loop {
        let (code, _, body) = http(mirror.addr, "GET", "/v2/_rd/sync", &[], b"");
        assert_eq!(code, 200);
        let v: Value = serde_json::from_slice(&body).unwrap();
        let st = v["sync"][0].clone();
        if st["runs_ok"].as_u64().unwrap_or(0) >= 1 {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "no run within 30 s: {st:#}\n{}",
            mirror.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let refused: Vec<&str> = st["last_run"]["refused"]
        .as_array()
        .unwrap_or_else(|| panic!("no refusals recorded: {st:#}"))
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(refused.len(), 2, "{st:#}");
    assert!(
        refused
            .iter()
            .any(|r| r.starts_with("m/plain:1.0") && r.contains(short))
    );
    assert!(refused.iter().any(|r| r.starts_with("m/other:1.0")));
    for repo in ["v2", "v3"] {
        assert!(head_digest(mirror.addr, &format!("m/{repo}"), "1.0").is_some());
    }
    for repo in ["plain", "other"] {
        assert!(head_digest(mirror.addr, &format!("m/{repo}"), "1.0").is_none());
    }
    let log = mirror.log_tail();
    assert!(log.contains("only_signed refused"), "{log}");
    let (_, _, body) = http(mirror.addr, "GET", "/metrics", &[], b"");
    let metrics = String::from_utf8_lossy(&body);
    assert!(
        metrics.contains("registry_sync_last_run_images_refused{sync=\"signed\"} 2"),
        "{metrics}"
    );
}

/// A bundle signed at export: `cosign verify-blob` accepts its signature, an import with the
/// key reads it, an import with another key is refused naming that key and the files, and a
/// bundle altered consistently (a new manifest in the layout, its tag and bundle.json
/// rewritten to match) is refused with the signer's key, while without a key it would import.
#[test]
fn signed_bundles_are_verified_at_import() {
    let dir = tempdir();
    let d = dir.path();
    let data = tempdir();
    let src = Server::start(data.path(), &[]);
    ok(rd(d).args(["key", "generate", "--output-key-prefix", "ours"]));
    ok(rd(d).args(["key", "generate", "--output-key-prefix", "stranger"]));
    pushed_image(
        d,
        "in a signed bundle\n",
        &format!("{}/site/app:1.0", src.host()),
    );
    let bundle = d.join("usb");
    let to = format!("bundle:{}", s(&bundle));
    ok(rd(d).args([
        "sync",
        "--sign-key",
        "ours.key",
        &format!("{}/site", src.host()),
        &to,
    ]));
    assert!(bundle.join("bundle.json.sig").is_file());
    // cosign reads the signature as one of its own blob signatures.
    ok(cosign(d).args([
        "verify-blob",
        "--key",
        "ours.pub",
        "--insecure-ignore-tlog=true",
        "--signature",
        s(&bundle.join("bundle.json.sig")),
        s(&bundle.join("bundle.json")),
    ]));

    let dest = tempdir();
    let dst = Server::start(dest.path(), &[]);
    let import = |key: &str, prefix: &str| {
        let mut c = rd(d);
        c.args(["sync", &to, &format!("{}/{prefix}", dst.host())]);
        if !key.is_empty() {
            c.args(["--bundle-key", key]);
        }
        c.output().unwrap()
    };
    let good = import("ours.pub", "good");
    assert!(good.status.success(), "{}", tail(&good.stderr));
    assert!(head_digest(dst.addr, "good/app", "1.0").is_some());

    let wrong = import("stranger.pub", "wrong");
    assert_eq!(wrong.status.code(), Some(1), "{}", tail(&wrong.stdout));
    let text = String::from_utf8_lossy(&wrong.stdout);
    assert!(
        text.contains("stranger.pub") && text.contains("bundle.json.sig"),
        "{text}"
    );
    assert!(head_digest(dst.addr, "wrong/app", "1.0").is_none());

    // Altered consistently: a changed manifest written as a blob, the layout's tag and
    // bundle.json moved to it with the right digest and size.
    let layout = bundle.join("repos/app");
    let index_path = layout.join("index.json");
    let mut index: Value = serde_json::from_slice(&fs::read(&index_path).unwrap()).unwrap();
    let entry = index["manifests"]
        .as_array_mut()
        .unwrap()
        .iter_mut()
        .find(|m| m["annotations"]["org.opencontainers.image.ref.name"] == "1.0")
        .unwrap();
    let old = entry["digest"].as_str().unwrap().to_owned();
    let blob = |dg: &str| {
        layout
            .join("blobs/sha256")
            .join(dg.trim_start_matches("sha256:"))
    };
    let mut manifest: Value = serde_json::from_slice(&fs::read(blob(&old)).unwrap()).unwrap();
    manifest["annotations"] = serde_json::json!({"altered": "after signing"});
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let new = validator::Digest::sha256(&bytes).to_string();
    fs::write(blob(&new), &bytes).unwrap();
    entry["digest"] = new.clone().into();
    entry["size"] = bytes.len().into();
    fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
    let bj = bundle.join("bundle.json");
    let text = fs::read_to_string(&bj).unwrap();
    let mut b: Value = serde_json::from_str(&text).unwrap();
    b["images"][0]["digest"] = new.clone().into();
    b["images"][0]["size"] = bytes.len().into();
    fs::write(&bj, serde_json::to_vec_pretty(&b).unwrap()).unwrap();

    let altered = import("ours.pub", "altered");
    assert_eq!(altered.status.code(), Some(1), "{}", tail(&altered.stdout));
    let text = String::from_utf8_lossy(&altered.stdout);
    assert!(
        text.contains("ours.pub")
            && text.contains(&key_id(d, "ours.pub")[..19])
            && text.contains("bundle.json.sig")
            && text.contains("does not verify"),
        "{text}"
    );
    assert!(head_digest(dst.addr, "altered/app", "1.0").is_none());
    // Consistent indeed: without a key it imports the altered image.
    let unchecked = import("", "unchecked");
    assert!(unchecked.status.success(), "{}", tail(&unchecked.stdout));
    assert_eq!(
        head_digest(dst.addr, "unchecked/app", "1.0").as_deref(),
        Some(new.as_str())
    );
}

/// `rdctl copy` and `rdctl sync` run again over a destination that has everything say so:
/// the manifests already there are listed as present, nothing as written.
#[test]
fn copy_and_sync_tell_written_from_present() {
    let dir = tempdir();
    let d = dir.path();
    let data = tempdir();
    let src = Server::start(data.path(), &[]);
    pushed_image(
        d,
        "present or written\n",
        &format!("{}/site/app:1.0", src.host()),
    );
    let (from, to) = (
        format!("{}/site/app:1.0", src.host()),
        format!("{}/copy/app:1.0", src.host()),
    );
    let first = ok(rd(d).args(["copy", &from, &to]));
    let first = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(first.contains("wrote   manifest"), "{first}");
    assert!(first.contains("1 manifest(s) written"), "{first}");
    let again = ok(rd(d).args(["copy", &from, &to]));
    let again = String::from_utf8_lossy(&again.stdout).into_owned();
    assert!(!again.contains("wrote"), "{again}");
    assert!(again.contains("present manifest"), "{again}");
    assert!(
        again.contains("0 manifest(s) written, 1 already there"),
        "{again}"
    );
    let (_, v, _) = json(d, &["copy", &from, &to]);
    assert_eq!(v["manifests"], serde_json::json!([]), "{v:#}");
    assert_eq!(v["manifests_present"].as_array().unwrap().len(), 1, "{v:#}");
    assert_eq!(v["tag_written"], false, "{v:#}");

    let (sfrom, sto) = (
        format!("{}/site", src.host()),
        format!("{}/mirror", src.host()),
    );
    let first = ok(rd(d).args(["sync", &sfrom, &sto]));
    let first = String::from_utf8_lossy(&first.stdout).into_owned();
    assert!(first.contains("copied "), "{first}");
    assert!(
        first.contains("1 image(s) synced, 0 already present"),
        "{first}"
    );
    let again = ok(rd(d).args(["sync", &sfrom, &sto]));
    let again = String::from_utf8_lossy(&again.stdout).into_owned();
    assert!(
        again.contains("present ") && again.contains("nothing written"),
        "{again}"
    );
    assert!(
        again.contains("0 image(s) synced, 1 already present"),
        "{again}"
    );
    let (_, v, _) = json(d, &["sync", &sfrom, &sto]);
    assert_eq!(image(&v, "app")["status"], "present", "{v:#}");
    assert_eq!(v["totals"]["present"], 1, "{v:#}");
}

/// An artifact pushed by `rdctl artifact put` to `HOST/NAME:TAG` (one small file): an image to
/// sign and copy that needs no outside tool. Its digest.
fn artifact_image(d: &Path, host: &str, name: &str) -> String {
    let file = d.join(format!("{}.txt", name.replace(['/', ':'], "-")));
    fs::write(&file, format!("the content of {name}\n")).unwrap();
    ok(rd(d).args([
        "artifact",
        "put",
        "--artifact-type",
        "application/vnd.example.app",
        &format!("{host}/{name}"),
        s(&file),
    ]));
    let (repo, tag) = name.rsplit_once(':').unwrap();
    let addr = host.parse().unwrap();
    head_digest(addr, repo, tag).unwrap_or_else(|| panic!("{name} not pushed"))
}

/// Writes `bytes` as a blob of the layout at `layout`; its digest.
fn layout_blob(layout: &Path, bytes: &[u8]) -> String {
    let digest = validator::Digest::sha256(bytes).to_string();
    fs::write(
        layout
            .join("blobs/sha256")
            .join(digest.trim_start_matches("sha256:")),
        bytes,
    )
    .unwrap();
    digest
}

/// Adds an image manifest with one `layer_type` layer holding `payload` (and the empty
/// config) to the layout at `layout`, as an `index.json` entry with `annotations` and
/// `subject` when given: what someone with write access to a bundle could plant. Its digest.
fn plant_manifest(
    layout: &Path,
    artifact_type: &str,
    layer_type: &str,
    payload: &[u8],
    subject: Option<&Value>,
    annotations: Option<Value>,
) -> String {
    let config = layout_blob(layout, b"{}");
    let layer = layout_blob(layout, payload);
    let mut manifest = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": artifact_type,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": config, "size": 2},
        "layers": [{"mediaType": layer_type, "digest": layer, "size": payload.len()}],
    });
    if let Some(s) = subject {
        manifest["subject"] = s.clone();
    }
    let bytes = serde_json::to_vec(&manifest).unwrap();
    let digest = layout_blob(layout, &bytes);
    let index_path = layout.join("index.json");
    let mut index: Value = serde_json::from_slice(&fs::read(&index_path).unwrap()).unwrap();
    let mut entry = serde_json::json!({
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": digest,
        "size": bytes.len(),
        "artifactType": artifact_type,
    });
    if let Some(a) = annotations {
        entry["annotations"] = a;
    }
    index["manifests"].as_array_mut().unwrap().push(entry);
    fs::write(&index_path, serde_json::to_vec(&index).unwrap()).unwrap();
    digest
}

/// The digests the registry at `addr` lists as referrers of `digest` in `repo`.
fn referrer_digests(addr: std::net::SocketAddr, repo: &str, digest: &str) -> Vec<String> {
    let (code, _, body) = http(
        addr,
        "GET",
        &format!("/v2/{repo}/referrers/{digest}"),
        &[],
        b"",
    );
    assert_eq!(code, 200, "{}", String::from_utf8_lossy(&body));
    let v: Value = serde_json::from_slice(&body).unwrap();
    v["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["digest"].as_str().unwrap().to_owned())
        .collect()
}

/// Content planted in a signed bundle's layout after signing, with `bundle.json` and its
/// signature untouched (an SBOM referrer naming the signed image as its subject, a cosign
/// `sha256-<hex>.sig` tag of it), does not travel: the signature covers what `bundle.json`
/// lists, so only that is imported, and the image with its listed signature still is.
#[test]
fn a_signed_bundle_imports_only_what_bundle_json_lists() {
    let dir = tempdir();
    let d = dir.path();
    let data = tempdir();
    let src = Server::start(data.path(), &[]);
    ok(rd(d).args(["key", "generate", "--output-key-prefix", "ours"]));
    let digest = artifact_image(d, &src.host(), "site/app:1.0");
    // Signed as a referrer (sigstore bundle), so the `.sig` tag is free to be planted.
    ok(rd(d).args([
        "sign",
        "--key",
        "ours.key",
        "--format",
        "bundle",
        &format!("{}/site/app@{digest}", src.host()),
    ]));
    let signature = referrer_digests(src.addr, "site/app", &digest);
    assert_eq!(signature.len(), 1, "{signature:?}");
    let bundle = d.join("usb");
    let to = format!("bundle:{}", s(&bundle));
    ok(rd(d).args([
        "sync",
        "--sign-key",
        "ours.key",
        &format!("{}/site", src.host()),
        &to,
    ]));
    let listed: Value =
        serde_json::from_slice(&fs::read(bundle.join("bundle.json")).unwrap()).unwrap();
    assert_eq!(
        listed["images"][0]["referrers"],
        serde_json::json!(signature)
    );
    let signed_bytes = fs::read(bundle.join("bundle.json")).unwrap();

    let layout = bundle.join("repos/app");
    let index: Value =
        serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap();
    let image_entry = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["digest"] == digest.as_str())
        .unwrap()
        .clone();
    let subject = serde_json::json!({
        "mediaType": image_entry["mediaType"],
        "digest": digest,
        "size": image_entry["size"],
    });
    let sbom = plant_manifest(
        &layout,
        "application/spdx+json",
        "application/spdx+json",
        br#"{"spdxVersion":"SPDX-2.3","name":"planted","packages":[]}"#,
        Some(&subject),
        None,
    );
    let sig_tag = format!("sha256-{}.sig", digest.trim_start_matches("sha256:"));
    let sig = plant_manifest(
        &layout,
        "application/vnd.dev.cosign.artifact.sig.v1+json",
        "application/vnd.dev.cosign.simplesigning.v1+json",
        b"{\"critical\":{\"planted\":true}}",
        None,
        Some(serde_json::json!({"org.opencontainers.image.ref.name": sig_tag})),
    );
    assert_eq!(fs::read(bundle.join("bundle.json")).unwrap(), signed_bytes);

    let dest = tempdir();
    let dst = Server::start(dest.path(), &[]);
    let out = rd(d)
        .args(["sync", "--bundle-key", "ours.pub", &to])
        .arg(format!("{}/imp", dst.host()))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", tail(&out.stderr));
    assert_eq!(
        head_digest(dst.addr, "imp/app", "1.0").as_deref(),
        Some(digest.as_str())
    );
    // The listed signature came along; the planted SBOM and `.sig` tag did not.
    let imported = referrer_digests(dst.addr, "imp/app", &digest);
    assert_eq!(imported, signature, "planted SBOM {sbom} imported");
    assert_eq!(
        head_digest(dst.addr, "imp/app", &sig_tag),
        None,
        "planted {sig_tag} ({sig}) imported"
    );
    assert_eq!(head_digest(dst.addr, "imp/app", &sbom), None);
    // Left behind aloud, naming what bundle.json does not list.
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("left behind")
            && text.contains(&sbom)
            && text.contains(&sig)
            && text.contains("bundle.json does not list"),
        "{text}"
    );
    // --json says the same; a rerun finds the image there and still leaves them behind.
    let (code, v, stderr) = json(
        d,
        &[
            "sync",
            "--bundle-key",
            "ours.pub",
            &to,
            &format!("{}/imp", dst.host()),
        ],
    );
    assert_eq!(code, 0, "{v:#}\n{stderr}");
    let mut unlisted: Vec<&str> = image(&v, "app")["referrers_unlisted"]
        .as_array()
        .unwrap_or_else(|| panic!("no referrers_unlisted: {v:#}"))
        .iter()
        .map(|d| d.as_str().unwrap())
        .collect();
    unlisted.sort();
    let mut want = vec![sbom.as_str(), sig.as_str()];
    want.sort();
    assert_eq!(unlisted, want, "{v:#}");
    assert_eq!(referrer_digests(dst.addr, "imp/app", &digest), signature);
}

/// `only_signed` speaks one vocabulary on every surface: an image signed by a key outside the
/// rule is `unknown_key` and one carrying another image's signature is `replayed`, in
/// `rdctl sync --json` (reason and message) and in the registry's `[[sync]]` status, whose
/// line carries the same reason and message; the signature checker's own classes
/// (`bad_signature`, `digest_mismatch`) appear on neither. Only rdctl signs here.
#[test]
fn only_signed_refusals_read_the_same_in_json_and_in_the_sync_status() {
    let dir = tempdir();
    let d = dir.path();
    let data = tempdir();
    let src = Server::start(data.path(), &[]);
    let host = src.host();
    ok(rd(d).args(["key", "generate", "--output-key-prefix", "ours"]));
    ok(rd(d).args(["key", "generate", "--output-key-prefix", "stranger"]));
    let signed = artifact_image(d, &host, "site/signed:1.0");
    let other = artifact_image(d, &host, "site/other:1.0");
    let replayed = artifact_image(d, &host, "site/replayed:1.0");
    ok(rd(d).args([
        "sign",
        "--key",
        "ours.key",
        &format!("{host}/site/signed@{signed}"),
    ]));
    ok(rd(d).args([
        "sign",
        "--key",
        "stranger.key",
        &format!("{host}/site/other@{other}"),
    ]));
    // `signed`'s signature, copied under `replayed`'s cosign tag: valid, about another digest.
    let sig_tag = |dg: &str| format!("sha256-{}.sig", dg.trim_start_matches("sha256:"));
    ok(rd(d).args([
        "copy",
        &format!("{host}/site/signed:{}", sig_tag(&signed)),
        &format!("{host}/site/replayed:{}", sig_tag(&replayed)),
    ]));
    fs::write(
        d.join("policy.toml"),
        "[[rule]]\nmatch = \"**/site/*\"\naction = \"signed\"\nkeys = [\"ours.pub\"]\n",
    )
    .unwrap();

    let dest = tempdir();
    let dst = Server::start(dest.path(), &[]);
    let (code, v, stderr) = json(
        d,
        &[
            "sync",
            "--only-signed",
            "policy.toml",
            &format!("{host}/site"),
            &format!("{}/mirror", dst.host()),
        ],
    );
    assert_eq!(code, 0, "{v:#}\n{stderr}");
    assert_eq!(image(&v, "signed")["status"], "copied", "{v:#}");
    let mut from_json = Vec::new();
    for (repo, reason) in [("other", "unknown_key"), ("replayed", "replayed")] {
        let r = &image(&v, repo)["refused"];
        assert_eq!(r["reason"], reason, "{repo}: {v:#}");
        let message = r["message"].as_str().unwrap().to_owned();
        for old in ["bad_signature", "digest_mismatch"] {
            assert!(!message.contains(old), "{repo}: {old} in {message}");
        }
        assert!(
            message.contains(&format!("({reason})")),
            "{repo}: {message}"
        );
        from_json.push((repo, reason, message));
    }

    let mirror_data = tempdir();
    let cfg = d.join("mirror.toml");
    fs::write(
        &cfg,
        format!(
            "[[sync]]\nname = \"signed\"\nupstream = \"http://{host}/site\"\ninterval = \"1s\"\n\
             destination = \"m\"\nonly_signed = \"{}\"\n",
            s(&d.join("policy.toml"))
        ),
    )
    .unwrap();
    let mirror = Server::start(mirror_data.path(), &["--config", s(&cfg)]);
    let deadline = Instant::now() + Duration::from_secs(30);
    let st = loop {
        let (code, _, body) = http(mirror.addr, "GET", "/v2/_rd/sync", &[], b"");
        assert_eq!(code, 200);
        let v: Value = serde_json::from_slice(&body).unwrap();
        let st = v["sync"][0].clone();
        if st["runs_ok"].as_u64().unwrap_or(0) >= 1 {
            break st;
        }
        assert!(
            Instant::now() < deadline,
            "no run within 30 s: {st:#}\n{}",
            mirror.log_tail()
        );
        std::thread::sleep(Duration::from_millis(200));
    };
    let refused: Vec<&str> = st["last_run"]["refused"]
        .as_array()
        .unwrap_or_else(|| panic!("no refusals recorded: {st:#}"))
        .iter()
        .map(|r| r.as_str().unwrap())
        .collect();
    assert_eq!(refused.len(), 2, "{st:#}");
    for (repo, reason, message) in &from_json {
        let line = refused
            .iter()
            .find(|r| r.starts_with(&format!("m/{repo}:1.0")))
            .unwrap_or_else(|| panic!("no status line for {repo}: {st:#}"));
        assert!(
            line.contains(&format!(": {reason}: ")) && line.contains(message.as_str()),
            "{repo}: the status says {line:?}, --json says {reason}: {message:?}"
        );
        for old in ["bad_signature", "digest_mismatch"] {
            assert!(!line.contains(old), "{repo}: {old} in {line}");
        }
    }
}
