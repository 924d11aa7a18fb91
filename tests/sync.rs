//! `rdctl sync`: many images at once between our registry, an air-gap bundle and CNCF
//! distribution 2.8 (Debian's `docker-registry`: no referrers API, so referrers travel through
//! the tag schema), with repository and tag globs, a rerun that copies nothing, a dry run that
//! writes nothing, a sync file, and a tampered bundle that is refused.

use std::fs;
use std::path::Path;
use std::process::Output;

use crate::referrers::{assemble, discover, expected};
use crate::registry_e2e::http;
use crate::util::{Distribution, Server, ok, rdctl, s, tail, tempdir};

fn sync_json(args: &[&str]) -> (i32, serde_json::Value) {
    let out: Output = rdctl()
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
    (out.status.code().unwrap_or(-1), v)
}

/// (repository, tag) of every image in a sync summary, sorted.
fn images(v: &serde_json::Value) -> Vec<(String, String)> {
    let mut out: Vec<(String, String)> = v["images"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| {
            (
                i["repository"].as_str().unwrap().to_owned(),
                i["tag"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    out.sort();
    out
}

/// The digest a registry answers for `repo:reference` (HEAD, `Docker-Content-Digest`).
pub(crate) fn head_digest(
    addr: std::net::SocketAddr,
    repo: &str,
    reference: &str,
) -> Option<String> {
    let accept =
        "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json";
    let (status, headers, _) = http(
        addr,
        "HEAD",
        &format!("/v2/{repo}/manifests/{reference}"),
        &[("Accept", accept)],
        b"",
    );
    (status == 200).then(|| {
        headers
            .into_iter()
            .find(|(k, _)| k.eq_ignore_ascii_case("docker-content-digest"))
            .map(|(_, v)| v)
            .expect("a digest header")
    })
}

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn sync_round_trips_through_a_bundle_into_distribution_keeping_digests_and_referrers() {
    let dir = tempdir();
    let (d1, d2, d3) = (tempdir(), tempdir(), tempdir());
    let central = Server::start(d1.path(), &[]);
    let site = Server::start(d2.path(), &[]);
    let dist = Distribution::start(
        d3.path(),
        &format!(
            "  filesystem:\n    rootdirectory: {}\n",
            s(&d3.path().join("data"))
        ),
    );
    let a = assemble(dir.path());
    let want = expected(&a);
    let layout = format!("{}:v1", s(&a.layout));
    for (repo, tag) in [
        ("zones/base", "1.0"),
        ("zones/base", "1.1"),
        ("zones/base", "2.0"),
        ("zones/tools", "1.0"),
        ("other/x", "1.0"),
    ] {
        ok(rdctl().args(["push", &layout, &format!("{}/{repo}:{tag}", central.host())]));
    }
    let bundle = dir.path().join("usb");
    let bundle_arg = format!("bundle:{}", s(&bundle));

    // A dry run lists, marks nothing up to date, and writes nothing.
    let (code, plan) = sync_json(&[
        "--dry-run",
        "--repo",
        "zones/*",
        "--tag",
        "1.*",
        &central.host(),
        &bundle_arg,
    ]);
    assert_eq!(code, 0, "{plan:#}");
    let selected = pairs(&[
        ("zones/base", "1.0"),
        ("zones/base", "1.1"),
        ("zones/tools", "1.0"),
    ]);
    assert_eq!(images(&plan), selected, "{plan:#}");
    assert!(
        plan["images"]
            .as_array()
            .unwrap()
            .iter()
            .all(|i| i["status"] == "planned" && i["up_to_date"] == false)
    );
    assert!(!bundle.exists(), "a dry run wrote {}", bundle.display());

    // registry → bundle: the globs pick three images; each layout holds the referrers.
    let (code, first) = sync_json(&[
        "--repo",
        "zones/*",
        "--tag",
        "1.*",
        "--concurrency",
        "3",
        &central.host(),
        &bundle_arg,
    ]);
    assert_eq!(code, 0, "{first:#}");
    assert_eq!(images(&first), selected);
    assert!(
        first["totals"]["blobs_copied"].as_u64().unwrap() > 0,
        "{first:#}"
    );
    let manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(bundle.join("bundle.json")).unwrap()).unwrap();
    let listed = manifest["images"].as_array().unwrap();
    assert_eq!(listed.len(), 3, "{manifest:#}");
    let mut want_referrers = vec![a.sbom.clone(), a.signature.clone()];
    want_referrers.sort();
    for entry in listed {
        assert_eq!(entry["digest"], a.image.as_str(), "{entry}");
        let refs: Vec<String> = entry["referrers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r.as_str().unwrap().to_owned())
            .collect();
        assert_eq!(refs, want_referrers, "{entry}");
        let l = bundle.join(entry["layout"].as_str().unwrap());
        assert_eq!(
            discover(&[
                "--oci-layout",
                &format!("{}:{}", s(&l), entry["tag"].as_str().unwrap())
            ]),
            want,
            "{}",
            l.display()
        );
    }

    // A rerun finds everything there: every image up to date, no blob copied.
    let (code, again) = sync_json(&[
        "--repo",
        "zones/*",
        "--tag",
        "1.*",
        &central.host(),
        &bundle_arg,
    ]);
    assert_eq!(code, 0, "{again:#}");
    assert_eq!(again["totals"]["blobs_copied"], 0, "{again:#}");
    assert_eq!(again["totals"]["up_to_date"], 3, "{again:#}");

    // bundle → distribution 2.8 under a prefix: same digests, referrers through the tag schema.
    let mirror = format!("{}/mirror", dist.host());
    let (code, landed) = sync_json(&[&bundle_arg, &mirror]);
    assert_eq!(code, 0, "{landed:#}\n{}", dist.log_tail());
    assert_eq!(
        images(&landed),
        pairs(&[
            ("mirror/zones/base", "1.0"),
            ("mirror/zones/base", "1.1"),
            ("mirror/zones/tools", "1.0"),
        ])
    );
    for (repo, tag) in &selected {
        let at = format!("mirror/{repo}");
        assert_eq!(
            head_digest(dist.addr(), &at, tag).as_deref(),
            Some(a.image.as_str()),
            "{at}:{tag}"
        );
        assert_eq!(
            discover(&[
                "--plain-http",
                "--distribution-spec",
                "v1.1-referrers-tag",
                &format!("{}/{at}:{tag}", dist.host())
            ]),
            want,
            "{at}:{tag}"
        );
    }
    let (code, again) = sync_json(&[&bundle_arg, &mirror]);
    assert_eq!(code, 0, "{again:#}");
    assert_eq!(again["totals"]["blobs_copied"], 0, "{again:#}");
    assert_eq!(again["totals"]["up_to_date"], 3, "{again:#}");

    // distribution → our site registry from a sync file, prefix to prefix, one tag glob.
    let file = dir.path().join("sync.toml");
    fs::write(
        &file,
        format!(
            "concurrency = 2\n\n[[sync]]\nfrom = \"{mirror}\"\nto = \"{}/site\"\nrepositories = [\"zones/**\"]\ntags = [\"1.0\"]\n",
            site.host()
        ),
    )
    .unwrap();
    let (code, site_run) = sync_json(&["--config", s(&file)]);
    assert_eq!(code, 0, "{site_run:#}");
    assert_eq!(
        images(&site_run),
        pairs(&[("site/zones/base", "1.0"), ("site/zones/tools", "1.0")])
    );
    assert_eq!(
        discover(&[
            "--plain-http",
            &format!("{}/site/zones/tools:1.0", site.host())
        ]),
        want
    );
    drop((central, site, dist));
}

/// The digest of the first layer of the image `tag` names in a layout.
fn first_layer(layout: &Path, tag: &str) -> String {
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap();
    let m = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["annotations"]["org.opencontainers.image.ref.name"] == tag)
        .unwrap()["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let blob = |d: &str| {
        let (alg, hex) = d.split_once(':').unwrap();
        layout.join("blobs").join(alg).join(hex)
    };
    let manifest: serde_json::Value = serde_json::from_slice(&fs::read(blob(&m)).unwrap()).unwrap();
    manifest["layers"][0]["digest"].as_str().unwrap().to_owned()
}

#[test]
fn sync_refuses_a_tampered_bundle_image_and_copies_the_rest() {
    let dir = tempdir();
    let (d1, d2) = (tempdir(), tempdir());
    let central = Server::start(d1.path(), &[]);
    let site = Server::start(d2.path(), &[]);
    let a = assemble(dir.path());
    let layout = format!("{}:v1", s(&a.layout));
    for repo in ["good", "bad", "listed"] {
        ok(rdctl().args(["push", &layout, &format!("{}/{repo}:1", central.host())]));
    }
    let bundle = dir.path().join("bundle");
    let bundle_arg = format!("bundle:{}", s(&bundle));
    let (code, v) = sync_json(&[&central.host(), &bundle_arg]);
    assert_eq!(code, 0, "{v:#}");

    // Same size, other bytes: the layer of `bad` no longer matches its digest.
    let bad = bundle.join("repos/bad");
    let layer = first_layer(&bad, "1");
    let (alg, hex) = layer.split_once(':').unwrap();
    let path = bad.join("blobs").join(alg).join(hex);
    let len = fs::metadata(&path).unwrap().len() as usize;
    fs::remove_file(&path).unwrap();
    fs::write(&path, vec![b'x'; len]).unwrap();
    // And bundle.json names another digest for `listed` than its layout.
    let manifest_path = bundle.join("bundle.json");
    let mut manifest: serde_json::Value =
        serde_json::from_slice(&fs::read(&manifest_path).unwrap()).unwrap();
    for entry in manifest["images"].as_array_mut().unwrap() {
        if entry["repository"] == "listed" {
            entry["digest"] = format!("sha256:{}", "0".repeat(64)).into();
        }
    }
    fs::write(&manifest_path, serde_json::to_vec(&manifest).unwrap()).unwrap();

    let (code, v) = sync_json(&[&bundle_arg, &site.host()]);
    assert_eq!(code, 1, "{v:#}");
    let errors = v["errors"].to_string();
    assert!(
        errors.contains("listed:1") && errors.contains("bundle.json says"),
        "{v:#}"
    );
    // The mismatch stops the bundle's plan: nothing was copied from it.
    assert_eq!(v["images"], serde_json::json!([]), "{v:#}");

    // Without the lying entry, `good` lands and `bad` fails verification, tagging nothing.
    let (code, v) = sync_json(&[
        "--concurrency",
        "1",
        "--repo",
        "good",
        "--repo",
        "bad",
        &bundle_arg,
        &site.host(),
    ]);
    assert_eq!(code, 1, "{v:#}");
    let status = |repo: &str| {
        v["images"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["repository"] == repo)
            .unwrap_or_else(|| panic!("{repo} not in {v:#}"))
            .clone()
    };
    assert_eq!(status("good")["status"], "copied", "{v:#}");
    assert_eq!(status("bad")["status"], "failed", "{v:#}");
    assert_eq!(
        head_digest(site.addr, "good", "1").as_deref(),
        Some(a.image.as_str())
    );
    assert_eq!(
        head_digest(site.addr, "bad", "1"),
        None,
        "a tampered image was tagged"
    );
    drop((central, site));
}
