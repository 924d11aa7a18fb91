//! `rdctl inspect`, `ls`, `tag`, `rm` and `sbom` on an image built from the test catalog: in
//! an OCI layout, at our registry (then `rdctl registry gc` frees what `rm` said it would),
//! and at Debian's `docker-registry` (CNCF distribution 2.8: referrers tag schema, no tag
//! deletes).

use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::Value;

use crate::builder_e2e::{TOOL_BIN, image_file, publish_fixture};
use crate::ips_cli::Depot;
use crate::util::{Distribution, Server, ok, rdctl, s, tail, tempdir};

const TOOL_FMRI: &str = "pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z";
const CORE_FMRI: &str = "pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z";

/// Builds the demo image (one layer per package, ports, volumes, labels) into `dir/out` with
/// tag 1.0; returns the layout and the manifest digest.
fn build(dir: &Path) -> (PathBuf, String) {
    let repo = publish_fixture(dir, TOOL_BIN);
    let depot = Depot::start(&repo, dir);
    let work = dir.join("work");
    fs::create_dir_all(&work).unwrap();
    let image = work.join("image.toml");
    let mut text = image_file(&depot.url);
    text.push_str(
        "exposed_ports = [\"8080\"]\nvolumes = [\"/var/demo/data\"]\nlabels = { team = \"zones\" }\n\n[layering]\nstrategy = \"per-package\"\n",
    );
    fs::write(&image, text).unwrap();
    ok(rdctl().args(["lock", s(&image)]));
    let out = work.join("out");
    let built = ok(rdctl().args(["build", s(&image), "--output", s(&out), "--json"]));
    let summary: Value = serde_json::from_slice(&built.stdout).unwrap();
    (out, summary["manifest"].as_str().unwrap().to_owned())
}

fn json(args: &[&str]) -> Value {
    let out = ok(rdctl().args(args).arg("--json"));
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{args:?}: not JSON ({e}): {}", tail(&out.stdout)))
}

fn text(args: &[&str]) -> String {
    String::from_utf8(ok(rdctl().args(args)).stdout).unwrap()
}

fn fails(args: &[&str]) -> Output {
    let out = rdctl().args(args).output().unwrap();
    assert_eq!(
        out.status.code(),
        Some(2),
        "{args:?}: {}",
        tail(&out.stderr)
    );
    out
}

fn blob_json(layout: &Path, digest: &str) -> Value {
    let (alg, hex) = digest.split_once(':').unwrap();
    serde_json::from_slice(&fs::read(layout.join("blobs").join(alg).join(hex)).unwrap()).unwrap()
}

/// The inspection of the built image, wherever it is, against what the builder wrote.
fn check_inspection(i: &Value, layout: &Path, manifest: &str, referrer_found_by: &str) {
    let m = blob_json(layout, manifest);
    assert_eq!(i["digest"], manifest, "{i:#}");
    assert_eq!(
        i["media_type"],
        "application/vnd.oci.image.manifest.v1+json"
    );
    assert_eq!(i["platforms"], serde_json::json!(["illumos/amd64"]));
    let config = &i["image"]["config"];
    assert_eq!(config["entrypoint"], serde_json::json!(["/usr/bin/tool"]));
    assert_eq!(config["cmd"], serde_json::json!(["--serve"]));
    assert_eq!(config["env"], serde_json::json!(["PATH=/usr/bin"]));
    assert_eq!(config["user"], "demo");
    assert_eq!(config["working_dir"], "/var/demo");
    assert_eq!(config["stop_signal"], "SIGRTMIN+3");
    assert_eq!(config["stop_timeout"], 45);
    assert_eq!(config["exposed_ports"], serde_json::json!(["8080/tcp"]));
    assert_eq!(config["volumes"], serde_json::json!(["/var/demo/data"]));
    assert_eq!(config["labels"]["team"], "zones");
    assert_eq!(i["image"]["config_digest"], m["config"]["digest"]);
    let layers = i["image"]["layers"].as_array().unwrap();
    let want: Vec<&Value> = m["layers"].as_array().unwrap().iter().collect();
    assert_eq!(layers.len(), want.len());
    let mut total = m["config"]["size"].as_u64().unwrap()
        + fs::metadata(
            layout
                .join("blobs/sha256")
                .join(manifest.split_once(':').unwrap().1),
        )
        .unwrap()
        .len();
    for (l, w) in layers.iter().zip(&want) {
        assert_eq!(l["digest"], w["digest"]);
        assert_eq!(l["size"], w["size"]);
        assert_eq!(l["media_type"], w["mediaType"]);
        total += w["size"].as_u64().unwrap();
    }
    assert_eq!(i["total_size"], total);
    // One layer per package, in lockfile order, then what the build generated.
    let packages: Vec<Vec<String>> = layers
        .iter()
        .map(|l| {
            l["packages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p.as_str().unwrap().to_owned())
                .collect()
        })
        .collect();
    assert!(
        packages.contains(&vec![TOOL_FMRI.to_owned()]),
        "{packages:?}"
    );
    assert!(
        packages.contains(&vec![CORE_FMRI.to_owned()]),
        "{packages:?}"
    );
    let sbom: Vec<&Value> = i["referrers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["kind"] == "sbom")
        .collect();
    assert_eq!(sbom.len(), 1, "{i:#}");
    assert_eq!(sbom[0]["artifact_type"], "application/spdx+json");
    assert_eq!(sbom[0]["found_by"], referrer_found_by);
}

fn check_sbom(args: &[&str], manifest: &str) {
    let doc = json(args);
    assert_eq!(doc["subject"], manifest);
    let fmris: Vec<&str> = doc["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["fmri"].as_str().unwrap())
        .collect();
    assert_eq!(fmris, vec![TOOL_FMRI, CORE_FMRI], "{doc:#}");
    assert_eq!(doc["packages"][0]["publisher"], "example.org");
    assert_eq!(doc["packages"][0]["name"], "demo/tool");
    assert_eq!(
        doc["packages"][0]["version"],
        "2.1,5.11-2024.0:20240102T030405Z"
    );
    let table = text(args);
    assert!(
        table.lines().any(|l| l.starts_with("demo/tool ")
            && l.contains("example.org")
            && l.ends_with(TOOL_FMRI)),
        "{table}"
    );
}

#[test]
fn inspect_ls_tag_rm_sbom_on_a_layout_and_our_registry_then_gc_frees_what_rm_said() {
    let tmp = tempdir();
    let dir = tmp.path();
    let (layout, manifest) = build(dir);
    let oci = format!("oci:{}:1.0", s(&layout));

    // Layout.
    let i = json(&["inspect", &oci]);
    check_inspection(&i, &layout, &manifest, "layout");
    let human = text(&["inspect", &oci]);
    for want in [
        format!("Digest:       {manifest}"),
        "Platform:     illumos/amd64".to_owned(),
        "  StopTimeout:  45s".to_owned(),
        "  StopSignal:   SIGRTMIN+3".to_owned(),
        TOOL_FMRI.to_owned(),
    ] {
        assert!(human.contains(&want), "{want:?} not in\n{human}");
    }
    check_sbom(&["sbom", &oci], &manifest);
    let tagged = json(&["tag", &oci, "stable"]);
    assert_eq!(tagged["digest"], manifest);
    let rows = json(&["ls", &format!("oci:{}", s(&layout))]);
    let tags: Vec<(&str, &str)> = rows["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["tag"].as_str().unwrap(), r["digest"].as_str().unwrap()))
        .collect();
    assert_eq!(
        tags,
        vec![("1.0", manifest.as_str()), ("stable", &manifest)]
    );
    let all = json(&["ls", "--all", &format!("oci:{}", s(&layout))]);
    assert!(
        all["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["tag"].is_null() && r["artifact_type"] == "application/spdx+json"),
        "{all:#}"
    );
    // Removing one of two tags reclaims nothing; removing the last one frees the image, its
    // SBOM, and (with --prune) their files.
    let one = json(&["rm", &format!("oci:{}:stable", s(&layout))]);
    assert_eq!(one["still_tagged"], serde_json::json!(["1.0"]));
    assert_eq!(one["reclaimable"], serde_json::json!([]));
    let copy = dir.join("copy");
    ok(rdctl().args(["copy", &oci, &format!("oci:{}:1.0", s(&copy))]));
    let last = json(&["rm", "--prune", &oci]);
    let reclaimed: Vec<&str> = last["reclaimable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["digest"].as_str().unwrap())
        .collect();
    assert!(reclaimed.contains(&manifest.as_str()), "{last:#}");
    assert_eq!(last["referrers"].as_array().unwrap().len(), 1, "{last:#}");
    assert_eq!(last["pruned"].as_array().unwrap().len(), reclaimed.len());
    let index: Value =
        serde_json::from_slice(&fs::read(layout.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["manifests"], serde_json::json!([]), "{index:#}");
    for d in &reclaimed {
        let (alg, hex) = d.split_once(':').unwrap();
        assert!(
            !layout.join("blobs").join(alg).join(hex).exists(),
            "{d} kept"
        );
    }

    // Our registry: push the copy (the SBOM goes along through the referrers API).
    let data = dir.join("registry-data");
    let reg = Server::start(&data, &[]);
    let host = reg.host();
    let repo = format!("{host}/zones/demo");
    ok(rdctl().args(["push", &format!("{}:1.0", s(&copy)), &format!("{repo}:1.0")]));
    ok(rdctl().args([
        "push",
        &format!("{}:1.0", s(&copy)),
        &format!("{host}/other/app:2"),
    ]));
    let i = json(&["inspect", &format!("{repo}:1.0")]);
    check_inspection(&i, &copy, &manifest, "referrers-api");
    // An index over the image: inspect lists its manifests, in the layout and at the registry.
    let index_bytes = serde_json::to_vec(&serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.index.v1+json",
        "manifests": [{
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": manifest,
            "size": i["size"],
            "platform": {"os": "illumos", "architecture": "amd64"},
        }],
    }))
    .unwrap();
    let index_digest = validator::ImageLayout::open(&copy)
        .unwrap()
        .write_document(&index_bytes)
        .unwrap()
        .to_string();
    validator::ImageLayout::open(&copy)
        .unwrap()
        .set_tag(
            &validator::Tag::parse("multi").unwrap(),
            validator::IndexEntry::new(
                "application/vnd.oci.image.index.v1+json",
                validator::Digest::parse(&index_digest).unwrap(),
                index_bytes.len() as u64,
            ),
        )
        .unwrap();
    ok(rdctl().args([
        "push",
        &format!("{}:multi", s(&copy)),
        &format!("{host}/other/app:multi"),
    ]));
    for target in [
        format!("oci:{}:multi", s(&copy)),
        format!("{host}/other/app:multi"),
    ] {
        let x = json(&["inspect", &target]);
        assert_eq!(x["digest"], index_digest.as_str(), "{x:#}");
        assert_eq!(x["media_type"], "application/vnd.oci.image.index.v1+json");
        assert_eq!(x["platforms"], serde_json::json!(["illumos/amd64"]));
        assert_eq!(x["manifests"][0]["digest"], manifest);
        assert_eq!(x["manifests"][0]["platform"], "illumos/amd64");
        assert_eq!(
            x["manifests"][0]["image"]["config"]["stop_timeout"], 45,
            "{x:#}"
        );
        assert_eq!(
            x["total_size"].as_u64().unwrap(),
            i["total_size"].as_u64().unwrap() + index_bytes.len() as u64
        );
        assert!(text(&["inspect", &target]).contains(&format!("illumos/amd64  {manifest}")));
        // The index has no SBOM of its own: `sbom` reads each platform manifest's.
        let sb = json(&["sbom", &target]);
        assert_eq!(sb["subject"], index_digest.as_str(), "{sb:#}");
        assert_eq!(sb["platforms"][0]["platform"], "illumos/amd64", "{sb:#}");
        assert_eq!(sb["platforms"][0]["subject"], manifest, "{sb:#}");
        assert!(
            sb["platforms"][0]["packages"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["fmri"] == TOOL_FMRI),
            "{sb:#}"
        );
        assert_eq!(sb["without"], serde_json::json!([]), "{sb:#}");
        let human = text(&["sbom", &target]);
        assert!(
            human.contains("platform illumos/amd64") && human.contains(TOOL_FMRI),
            "{human}"
        );
    }
    // By digest in a layout: an index.json entry, or a manifest an index lists; removing the
    // index by digest takes its tag along and leaves the image it lists (still tagged 1.0).
    let by_digest = |d: &str| format!("oci:{}@{d}", s(&copy));
    assert_eq!(
        json(&["inspect", &by_digest(&index_digest)])["digest"],
        index_digest.as_str()
    );
    let x = json(&["inspect", &by_digest(&manifest)]);
    assert_eq!(x["digest"], manifest);
    assert_eq!(x["image"]["config"]["stop_timeout"], 45, "{x:#}");
    let gone = json(&["rm", &by_digest(&index_digest)]);
    assert_eq!(
        gone["tags_removed"],
        serde_json::json!(["multi"]),
        "{gone:#}"
    );
    let reclaimed: Vec<&str> = gone["reclaimable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["digest"].as_str().unwrap())
        .collect();
    assert_eq!(reclaimed, [index_digest.as_str()], "{gone:#}");
    let layout_tags = json(&["ls", &format!("oci:{}", s(&copy))]);
    assert_eq!(
        layout_tags["tags"].as_array().unwrap().len(),
        1,
        "{layout_tags:#}"
    );
    let missing = fails(&["inspect", &by_digest(&format!("sha256:{}", "0".repeat(64)))]);
    assert!(
        tail(&missing.stderr).contains("not found"),
        "{}",
        tail(&missing.stderr)
    );
    let multi = json(&["ls", &format!("{host}/other/app")]);
    assert!(
        multi["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["tag"] == "multi" && r["kind"] == "index"),
        "{multi:#}"
    );
    check_sbom(&["sbom", &format!("{repo}:1.0")], &manifest);
    assert_eq!(
        json(&["ls", &host])["repositories"],
        serde_json::json!(["other/app", "zones/demo"])
    );
    assert_eq!(
        text(&["ls", "--limit", "1", &format!("{host}/")]),
        "other/app\n"
    );
    ok(rdctl().args(["tag", &format!("{repo}:1.0"), "stable"]));
    // Pages of one entry: the client follows every Link.
    let rt = tokio::runtime::Runtime::new().unwrap();
    let client = registry_client::Client::builder().build().unwrap();
    let paged = rt
        .block_on(client.catalog(&host, 1, None))
        .expect("paged catalog");
    assert_eq!(paged, vec!["other/app", "zones/demo"]);
    let reference = registry_client::Reference::parse(&repo).unwrap();
    let tags = rt
        .block_on(client.tags(&reference, 1, None))
        .expect("paged tags");
    assert_eq!(tags, vec!["1.0", "stable"]);
    let ls = json(&["ls", &repo]);
    let rows = ls["tags"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{ls:#}");
    for r in rows {
        assert_eq!(r["digest"], manifest);
        assert_eq!(r["platforms"], serde_json::json!(["illumos/amd64"]));
        assert_eq!(r["size"], i["total_size"]);
    }
    let human = text(&["ls", &repo]);
    let short = &manifest["sha256:".len().."sha256:".len() + 12];
    assert!(
        human
            .lines()
            .any(|l| l.starts_with("stable ") && l.contains(short) && l.contains("illumos/amd64")),
        "{human}"
    );
    // The bad tag is refused before anything is read.
    let bad = fails(&["tag", &format!("{repo}:1.0"), "v1/bad"]);
    assert!(
        String::from_utf8_lossy(&bad.stderr).contains("\"v1/bad\" is not a valid tag"),
        "{}",
        tail(&bad.stderr)
    );

    // rm of a tag another tag shares: nothing to reclaim; then the digest: everything of the
    // image and its SBOM, which gc then deletes.
    let shared = json(&["rm", &format!("{repo}:stable")]);
    assert_eq!(shared["still_tagged"], serde_json::json!(["1.0"]));
    let dry = json(&["rm", "--dry-run", &format!("{repo}@{manifest}")]);
    assert_eq!(dry["dry_run"], true);
    assert_eq!(
        ok(rdctl().args(["inspect", &format!("{repo}:1.0"), "--json"]))
            .status
            .code(),
        Some(0),
        "a dry run removed the image"
    );
    let removed = json(&["rm", &format!("{repo}@{manifest}")]);
    assert_eq!(removed["reclaimable"], dry["reclaimable"]);
    assert_eq!(removed["referrers"].as_array().unwrap().len(), 1);
    assert_eq!(removed["tags_removed"], serde_json::json!(["1.0"]));
    let said: Vec<String> = removed["reclaimable"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["digest"].as_str().unwrap().to_owned())
        .collect();
    // other/app:2 shares every blob, in another repository: the repository's links go.
    assert!(said.contains(&manifest), "{removed:#}");
    let inspect_gone = fails(&["inspect", &format!("{repo}:1.0")]);
    assert!(String::from_utf8_lossy(&inspect_gone.stderr).contains("not found"));
    drop(reg);
    let gc = ok(rdctl().args([
        "registry",
        "gc",
        "--data",
        s(&data),
        "--json",
        "--grace",
        "0",
        "--delete-untagged",
    ]));
    let gc: Value = serde_json::from_slice(&gc.stdout).unwrap();
    let deleted: Vec<(String, String)> = gc["deleted"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            (
                d["digest"].as_str().unwrap().to_owned(),
                d["repository"].as_str().unwrap_or("").to_owned(),
            )
        })
        .collect();
    // The manifest link went with the DELETE itself; everything else is gc's.
    for d in said.iter().filter(|d| **d != manifest) {
        assert!(
            deleted.iter().any(|(x, _)| x == d),
            "rm said {d} would be reclaimed; gc deleted {deleted:?}"
        );
    }
    for (d, repository) in &deleted {
        assert!(
            repository != "zones/demo" || said.contains(d),
            "gc deleted {d} in zones/demo, which rm did not name: {said:?}"
        );
    }

    // A registry with deletes disabled answers 405 UNSUPPORTED: rm says deletes are off there.
    let locked = Server::start_with_env(
        &dir.join("no-deletes"),
        &[("RDCTL_REGISTRY_DELETE_ENABLED", "false")],
    );
    let target = format!("{}/zones/demo:1.0", locked.host());
    ok(rdctl().args(["push", &format!("{}:1.0", s(&copy)), &target]));
    let refused = fails(&["rm", &target]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains(&format!("deletes are disabled on {}", locked.host()))
            && err.contains("405 UNSUPPORTED"),
        "{err}"
    );
    let doc: Value = serde_json::from_slice(&fails(&["rm", "--json", &target]).stdout).unwrap();
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("deletes are disabled"),
        "{doc:#}"
    );
    assert_eq!(json(&["inspect", &target])["digest"], manifest);
}

#[test]
fn inspect_ls_tag_sbom_and_rm_against_distribution() {
    let tmp = tempdir();
    let dir = tmp.path();
    let (layout, manifest) = build(dir);
    let store = dir.join("dist-data");
    fs::create_dir_all(&store).unwrap();
    let dist = Distribution::start(
        dir,
        &format!(
            "  filesystem:\n    rootdirectory: {}\n  delete:\n    enabled: true\n",
            s(&store)
        ),
    );
    let repo = format!("{}/zones/demo", dist.host());
    ok(rdctl().args([
        "push",
        &format!("{}:1.0", s(&layout)),
        &format!("{repo}:1.0"),
    ]));
    let i = json(&["inspect", &format!("{repo}:1.0")]);
    check_inspection(&i, &layout, &manifest, "referrers-tag");
    check_sbom(&["sbom", &format!("{repo}:1.0")], &manifest);
    ok(rdctl().args(["tag", &format!("{repo}:1.0"), "stable"]));
    // A cosign-style signature tag (here: the SBOM manifest under sha256-<hex>.sig) is found
    // by inspect as a signature.
    let sbom_digest = i["referrers"][0]["digest"].as_str().unwrap().to_owned();
    let sig_tag = format!("sha256-{}.sig", &manifest["sha256:".len()..]);
    ok(rdctl().args(["tag", &format!("{repo}@{sbom_digest}"), &sig_tag]));
    let signed = json(&["inspect", &format!("{repo}:1.0")]);
    assert!(
        signed["referrers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["kind"] == "signature"
                && r["found_by"] == "cosign-tag"
                && r["tag"] == sig_tag.as_str()
                && r["digest"] == sbom_digest.as_str()),
        "{signed:#}"
    );
    // The referrers tag (sha256-<hex>) and the signature tag are hidden unless --all.
    let ls = json(&["ls", &repo]);
    let tags: Vec<&str> = ls["tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["tag"].as_str().unwrap())
        .collect();
    assert_eq!(tags, vec!["1.0", "stable"], "{ls:#}");
    assert_eq!(ls["hidden"], 2, "{ls:#}");
    let first = json(&["ls", "--limit", "1", &repo]);
    assert_eq!(first["tags"].as_array().unwrap().len(), 1, "{first:#}");
    assert_eq!(first["tags"][0]["tag"], "1.0");
    let all = json(&["ls", "--all", &repo]);
    let fallback = format!("sha256-{}", &manifest["sha256:".len()..]);
    assert!(
        all["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["tag"] == fallback.as_str() && r["kind"] == "referrers"),
        "{all:#}"
    );
    assert!(
        all["tags"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["tag"] == sig_tag.as_str() && r["kind"] == "signature"),
        "{all:#}"
    );
    assert!(
        text(&["ls", &repo]).contains("2 signature, attestation, SBOM or referrers tag(s) hidden")
    );
    // distribution 2.8 deletes no tags: the error says so, with what it answered.
    let refused = fails(&["rm", &format!("{repo}:stable")]);
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(
        err.contains("does not delete tags, only manifests by digest")
            && err.contains(&format!("rdctl rm {repo}@DIGEST")),
        "{err}"
    );
    let removed = json(&["rm", &format!("{repo}@{manifest}")]);
    assert_eq!(removed["digest"], manifest);
    // Its referrers tag and cosign's signature tag go with it: nothing keeps the SBOM and the
    // signature from distribution's garbage collection.
    let mut attached: Vec<&str> = removed["attached_tags"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap())
        .collect();
    attached.sort();
    assert_eq!(
        attached,
        vec![fallback.as_str(), sig_tag.as_str()],
        "{removed:#}"
    );
    let left = json(&["ls", "--all", &repo]);
    assert!(
        left["tags"]
            .as_array()
            .unwrap()
            .iter()
            .all(|r| { r["tag"] != fallback.as_str() && r["tag"] != sig_tag.as_str() }),
        "{left:#}"
    );
    let gone = fails(&["inspect", &format!("{repo}:1.0")]);
    assert!(
        String::from_utf8_lossy(&gone.stderr).contains("not found"),
        "{}",
        tail(&gone.stderr)
    );
}
