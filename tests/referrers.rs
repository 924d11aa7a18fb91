//! Referrers travel with the image: `rdctl push`, `copy` and `pull` carry an SBOM referrer and a
//! signature of that SBOM (a referrer of a referrer) between a layout, our registry and CNCF
//! distribution 2.8 (no referrers API: the tag schema), and `oras discover` finds them at every
//! destination; `--no-referrers` copies none.

use std::fs;
use std::path::{Path, PathBuf};

use validator::{Digest, ImageLayout};

use crate::registry_e2e::http;
use crate::transfer::umoci_image;
use crate::util::{Distribution, ok, rdctl, s, tail, tempdir, tool};

const MANIFEST_MT: &str = "application/vnd.oci.image.manifest.v1+json";
const SBOM_TYPE: &str = "application/spdx+json";
const SIG_TYPE: &str = "application/vnd.example.signature.v1";

/// The digests of an image with an SBOM referrer and a signature of the SBOM.
pub(crate) struct Assembled {
    pub(crate) layout: PathBuf,
    pub(crate) image: String,
    pub(crate) sbom: String,
    pub(crate) signature: String,
}

/// Writes an artifact manifest (empty config, one layer) with `subject` into the layout and
/// lists it untagged in `index.json` with its `artifactType`, as the builder lists its SBOM.
fn add_referrer(
    layout: &Path,
    artifact_type: &str,
    payload: &[u8],
    subject: (&str, usize),
) -> String {
    let l = ImageLayout::open(layout).unwrap();
    let empty = l.write_document(b"{}").unwrap();
    let blob = l.write_document(payload).unwrap();
    let manifest = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": MANIFEST_MT,
        "artifactType": artifact_type,
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty.to_string(), "size": 2},
        "layers": [{"mediaType": artifact_type, "digest": blob.to_string(), "size": payload.len()}],
        "subject": {"mediaType": MANIFEST_MT, "digest": subject.0, "size": subject.1},
        "annotations": {"org.opencontainers.image.created": "2026-01-01T00:00:00Z"},
    }))
    .unwrap();
    let digest = l.write_document(&manifest).unwrap().to_string();
    let mut index: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap();
    index["manifests"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({
            "mediaType": MANIFEST_MT, "digest": digest, "size": manifest.len(),
            "artifactType": artifact_type,
            "annotations": {"org.reddwarf.image.sbom-of": "v1"},
        }));
    fs::write(
        layout.join("index.json"),
        serde_json::to_vec(&index).unwrap(),
    )
    .unwrap();
    digest
}

fn size_of(layout: &Path, digest: &str) -> usize {
    let (alg, hex) = digest.split_once(':').unwrap();
    fs::metadata(layout.join("blobs").join(alg).join(hex))
        .unwrap()
        .len() as usize
}

pub(crate) fn assemble(dir: &Path) -> Assembled {
    let layout = umoci_image(dir, "has an sbom\n");
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap();
    let image = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["annotations"]["org.opencontainers.image.ref.name"] == "v1")
        .expect("umoci tagged v1")["digest"]
        .as_str()
        .unwrap()
        .to_owned();
    let sbom = add_referrer(
        &layout,
        SBOM_TYPE,
        br#"{"spdxVersion":"SPDX-2.3"}"#,
        (&image, size_of(&layout, &image)),
    );
    let signature = add_referrer(
        &layout,
        SIG_TYPE,
        b"signed",
        (&sbom, size_of(&layout, &sbom)),
    );
    ok(rdctl().args(["validate", &format!("{}:v1", s(&layout))]));
    Assembled {
        layout,
        image,
        sbom,
        signature,
    }
}

/// Every referrer digest `oras discover` reports at all depths (JSON format).
pub(crate) fn discover(target: &[&str]) -> Vec<(String, String)> {
    let out = ok(tool("oras")
        .args(["discover", "--format", "json"])
        .args(target));
    let v: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("oras discover printed no JSON ({e}): {}", tail(&out.stdout)));
    let mut found = Vec::new();
    let mut stack = vec![v];
    while let Some(node) = stack.pop() {
        if let Some(list) = node["referrers"].as_array() {
            for r in list {
                found.push((
                    r["digest"].as_str().unwrap_or_default().to_owned(),
                    r["artifactType"].as_str().unwrap_or_default().to_owned(),
                ));
                stack.push(r.clone());
            }
        }
    }
    found.sort();
    found
}

pub(crate) fn expected(a: &Assembled) -> Vec<(String, String)> {
    let mut v = vec![
        (a.sbom.clone(), SBOM_TYPE.to_owned()),
        (a.signature.clone(), SIG_TYPE.to_owned()),
    ];
    v.sort();
    v
}

fn json_out(args: &[&str]) -> serde_json::Value {
    let out = ok(rdctl().args(args).arg("--json"));
    serde_json::from_slice(&out.stdout).expect("rdctl --json printed JSON")
}

fn referrer_digests(report: &serde_json::Value) -> Vec<String> {
    let mut v: Vec<String> = report["referrers"]
        .as_array()
        .unwrap_or_else(|| panic!("no referrers list: {report}"))
        .iter()
        .map(|c| c["digest"].as_str().unwrap().to_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn referrers_travel_through_push_copy_and_pull_with_and_without_the_api() {
    let dir = tempdir();
    let (d1, d2, d3) = (tempdir(), tempdir(), tempdir());
    let one = crate::util::Server::start(d1.path(), &[]);
    let two = crate::util::Server::start(d2.path(), &[]);
    let dist = Distribution::start(
        d3.path(),
        &format!(
            "  filesystem:\n    rootdirectory: {}\n",
            s(&d3.path().join("data"))
        ),
    );
    let a = assemble(dir.path());
    let want = expected(&a);
    let mut want_digests: Vec<String> = want.iter().map(|(d, _)| d.clone()).collect();
    want_digests.sort();

    // layout → our registry.
    let at_one = format!("{}/ref/img:v1", one.host());
    let pushed = json_out(&["push", &format!("{}:v1", s(&a.layout)), &at_one]);
    assert_eq!(pushed["root"]["digest"], a.image.as_str());
    assert_eq!(referrer_digests(&pushed), want_digests, "{pushed:#}");
    assert_eq!(discover(&["--plain-http", &at_one]), want, "at {at_one}");
    // Our registry lists the SBOM through its API with the artifactType.
    let (status, _, body) = http(
        one.addr,
        "GET",
        &format!("/v2/ref/img/referrers/{}", a.image),
        &[],
        b"",
    );
    assert_eq!(status, 200);
    let listed: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        listed["manifests"][0]["digest"],
        a.sbom.as_str(),
        "{listed}"
    );
    assert_eq!(listed["manifests"][0]["artifactType"], SBOM_TYPE);

    // ours → ours.
    let at_two = format!("{}/copied/img:v1", two.host());
    let copied = ok(rdctl().args(["copy", &at_one, &at_two]));
    let text = String::from_utf8_lossy(&copied.stdout);
    assert!(
        text.contains("2 referrer(s)") && text.contains(&format!("wrote   referrer {}", a.sbom)),
        "copy:\n{text}"
    );
    assert_eq!(discover(&["--plain-http", &at_two]), want, "at {at_two}");

    // ours → distribution 2.8: no referrers API, so the tag schema carries them.
    let at_dist = format!("{}/dist/img:v1", dist.host());
    let copied = json_out(&["copy", &at_one, &at_dist]);
    assert_eq!(referrer_digests(&copied), want_digests, "{copied:#}");
    assert_eq!(
        discover(&[
            "--plain-http",
            "--distribution-spec",
            "v1.1-referrers-tag",
            &at_dist
        ]),
        want,
        "at {at_dist}"
    );
    let tag = registry_client::fallback_tag(&Digest::parse(&a.image).unwrap());
    let (status, _, body) = http(
        dist.addr(),
        "GET",
        &format!("/v2/dist/img/manifests/{tag}"),
        &[("Accept", registry_client::OCI_INDEX)],
        b"",
    );
    assert_eq!(status, 200, "no tag {tag}: {}", dist.log_tail());
    let index: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(index["manifests"][0]["digest"], a.sbom.as_str(), "{index}");
    assert_eq!(index["manifests"][0]["artifactType"], SBOM_TYPE, "{index}");
    // A second copy finds the entries there and adds none.
    ok(rdctl().args(["copy", &at_one, &at_dist]));
    let (_, _, body) = http(
        dist.addr(),
        "GET",
        &format!("/v2/dist/img/manifests/{tag}"),
        &[("Accept", registry_client::OCI_INDEX)],
        b"",
    );
    let again: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        again["manifests"].as_array().map(Vec::len),
        Some(1),
        "{again}"
    );

    // distribution → ours: read back through the tag schema.
    let back_at_two = format!("{}/from-dist/img:v1", two.host());
    let copied = json_out(&["copy", &at_dist, &back_at_two]);
    assert_eq!(referrer_digests(&copied), want_digests, "{copied:#}");
    assert_eq!(discover(&["--plain-http", &back_at_two]), want);

    // registry → layout: untagged index.json entries with their artifactType, which oras
    // finds, and the layout pushes again with them (no tag needed: referrers are no choice).
    let pulled = dir.path().join("pulled");
    let report = json_out(&["pull", &back_at_two, s(&pulled)]);
    assert_eq!(referrer_digests(&report), want_digests, "{report:#}");
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(pulled.join("index.json")).unwrap()).unwrap();
    let entries = index["manifests"].as_array().unwrap();
    for (digest, artifact_type) in &want {
        let e = entries
            .iter()
            .find(|e| e["digest"] == digest.as_str())
            .unwrap_or_else(|| panic!("{digest} is not in the pulled index.json: {index:#}"));
        assert_eq!(e["artifactType"], artifact_type.as_str(), "{e}");
        assert!(
            e["annotations"]
                .get("org.opencontainers.image.ref.name")
                .is_none()
        );
    }
    assert_eq!(
        discover(&["--oci-layout", &format!("{}:v1", s(&pulled))]),
        want
    );
    let at_one_again = format!("{}/from-layout/img:v1", one.host());
    let pushed = json_out(&["push", s(&pulled), &at_one_again]);
    assert_eq!(pushed["root"]["digest"], a.image.as_str());
    assert_eq!(referrer_digests(&pushed), want_digests);
    drop((one, two, dist));
}

#[test]
fn no_referrers_copies_the_image_alone() {
    let dir = tempdir();
    let data = tempdir();
    let server = crate::util::Server::start(data.path(), &[]);
    let a = assemble(dir.path());
    let remote = format!("{}/bare/img:v1", server.host());
    let pushed = json_out(&[
        "push",
        "--no-referrers",
        &format!("{}:v1", s(&a.layout)),
        &remote,
    ]);
    assert_eq!(pushed["root"]["digest"], a.image.as_str());
    assert_eq!(pushed["referrers"], serde_json::json!([]), "{pushed:#}");
    assert_eq!(
        pushed["blobs_copied"].as_array().map(Vec::len),
        Some(2),
        "only the config and the layer: {pushed:#}"
    );
    assert_eq!(discover(&["--plain-http", &remote]), Vec::new());
    let pulled = dir.path().join("pulled");
    ok(rdctl().args(["pull", "--no-referrers", &remote, s(&pulled)]));
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(pulled.join("index.json")).unwrap()).unwrap();
    assert_eq!(
        index["manifests"].as_array().map(Vec::len),
        Some(1),
        "{index:#}"
    );
    drop(server);
}
