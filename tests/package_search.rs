//! The registry's package index end to end: images built by `rdctl build` from fixture
//! packages (demo/tool 2.1 and 2.2 over system/core 1.0) pushed with `rdctl push`, found by
//! `rdctl search` and `GET /v2/_rd/packages` with name globs and pkg(5) version constraints;
//! the index survives a restart, forgets deleted manifests, is rebuilt by `rdctl registry
//! reindex`, is shared by two S3 replicas on one bucket, and never shows a repository the caller
//! may not pull.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use base64::Engine as _;
use serde_json::Value;

use crate::builder_e2e::{TOOL_BIN, image_file, publish_fixture};
use crate::ips_cli::Depot;
use crate::registry_e2e::http;
use crate::util::{Server, ok, rdctl, s, tail, tempdir};

pub(crate) const TOOL_21: &str = "pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z";
pub(crate) const TOOL_22: &str = "pkg://example.org/demo/tool@2.2,5.11-2024.0:20240301T000000Z";
pub(crate) const CORE: &str = "pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z";

/// The second version of demo/tool, published after the first image was built.
const TOOL_22_P5M: &str = "set name=pkg.fmri value=pkg:/demo/tool@2.2,5.11-2024.0:20240301T000000Z
set name=pkg.summary value=\"A demo tool, again\"
depend type=require fmri=system/core@1.0
dir path=usr mode=0755 owner=root group=sys
dir path=usr/bin mode=0755 owner=root group=bin
file path=usr/bin/tool mode=0555 owner=root group=bin
";

/// Two built images (OCI layouts tagged 1.0) and their manifest digests.
pub(crate) struct Images {
    /// demo/tool 2.1 and system/core 1.0.
    pub old: (PathBuf, String),
    /// demo/tool 2.2 and system/core 1.0.
    pub new: (PathBuf, String),
}

fn build_one(dir: &Path, origin: &str, work: &str) -> (PathBuf, String) {
    let work = dir.join(work);
    fs::create_dir_all(&work).unwrap();
    let image = work.join("image.toml");
    fs::write(&image, image_file(origin)).unwrap();
    ok(rdctl().args(["lock", s(&image)]));
    let out = work.join("out");
    let built = ok(rdctl().args(["build", s(&image), "--output", s(&out), "--json"]));
    let summary: Value = serde_json::from_slice(&built.stdout).unwrap();
    (out, summary["manifest"].as_str().unwrap().to_owned())
}

/// Built once per test binary, in a directory kept until the process exits.
pub(crate) fn images() -> &'static Images {
    static IMAGES: OnceLock<Images> = OnceLock::new();
    IMAGES.get_or_init(|| {
        let dir = tempdir().keep();
        let repo = publish_fixture(&dir, TOOL_BIN);
        let depot = Depot::start(&repo, &dir);
        let old = build_one(&dir, &depot.url, "old");
        let proto = dir.join("proto");
        fs::write(proto.join("tool22.p5m"), TOOL_22_P5M).unwrap();
        ok(rdctl().args([
            "ips",
            "publish",
            "--repo",
            s(&repo),
            "--publisher",
            "example.org",
            "--proto",
            s(&proto),
            s(&proto.join("tool22.p5m")),
        ]));
        let new = build_one(&dir, &depot.url, "new");
        assert_ne!(old.1, new.1);
        Images { old, new }
    })
}

pub(crate) fn push(layout: &Path, target: &str, extra: &[&str]) {
    ok(rdctl()
        .args(["push", &format!("{}:1.0", s(layout)), target])
        .args(extra));
}

/// `rdctl search --json`: (repository, tags, digest, FMRIs) of every image found.
type Hit = (String, Vec<String>, String, Vec<String>);

fn search(host: &str, package: &str, extra: &[&str]) -> BTreeSet<Hit> {
    let out = ok(rdctl()
        .args(["search", "--package", package, host, "--json"])
        .args(extra));
    let doc: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", tail(&out.stdout)));
    hits(&doc["images"])
}

fn hits(images: &Value) -> BTreeSet<Hit> {
    let strs = |v: &Value| -> Vec<String> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_str().unwrap().to_owned())
            .collect()
    };
    images
        .as_array()
        .unwrap_or_else(|| panic!("no image list: {images}"))
        .iter()
        .map(|i| {
            // Sorted: an image's packages come in its SBOM's order.
            let mut fmris: Vec<String> = i["packages"]
                .as_array()
                .unwrap()
                .iter()
                .map(|p| p["fmri"].as_str().unwrap().to_owned())
                .collect();
            fmris.sort();
            (
                i["repository"].as_str().unwrap().to_owned(),
                strs(&i["tags"]),
                i["digest"].as_str().unwrap().to_owned(),
                fmris,
            )
        })
        .collect()
}

fn hit(repo: &str, tags: &[&str], digest: &str, fmris: &[&str]) -> Hit {
    (
        repo.to_owned(),
        tags.iter().map(|t| t.to_string()).collect(),
        digest.to_owned(),
        fmris.iter().map(|t| t.to_string()).collect(),
    )
}

/// A GET with optional Basic credentials: status and JSON body.
fn get(server: &Server, path: &str, user: Option<(&str, &str)>) -> (u16, Value, String) {
    let auth = user.map(|(u, p)| {
        format!(
            "Basic {}",
            base64::engine::general_purpose::STANDARD.encode(format!("{u}:{p}"))
        )
    });
    let mut headers = vec![];
    if let Some(a) = &auth {
        headers.push(("authorization", a.as_str()));
    }
    let (status, _, body) = http(server.addr, "GET", path, &headers, b"");
    let text = String::from_utf8_lossy(&body).into_owned();
    (
        status,
        serde_json::from_slice(&body).unwrap_or(Value::Null),
        text,
    )
}

#[test]
fn search_by_name_and_version_survives_restart_forgets_deletes_and_reindexes() {
    let imgs = images();
    let (old, new) = (&imgs.old.1, &imgs.new.1);
    let dir = tempdir();
    let data = dir.path().join("data");
    let reg = Server::start(&data, &[]);
    let host = reg.host();
    push(&imgs.old.0, &format!("{host}/zones/app:1.0"), &[]);
    push(&imgs.new.0, &format!("{host}/zones/app:2.0"), &[]);
    push(&imgs.new.0, &format!("{host}/other/app:latest"), &[]);

    let all_tool = BTreeSet::from([
        hit("other/app", &["latest"], new, &[TOOL_22]),
        hit("zones/app", &["1.0"], old, &[TOOL_21]),
        hit("zones/app", &["2.0"], new, &[TOOL_22]),
    ]);
    let check_all = |host: &str| {
        assert_eq!(search(host, "demo/tool", &[]), all_tool);
        // A name without its leading components, and globs.
        assert_eq!(search(host, "tool", &[]), all_tool);
        assert_eq!(search(host, "d?mo/t*", &[]), all_tool);
        assert_eq!(
            search(host, "tool@<2.2", &[]),
            BTreeSet::from([hit("zones/app", &["1.0"], old, &[TOOL_21])])
        );
        assert_eq!(
            search(host, "tool@<=2.1", &[]),
            BTreeSet::from([hit("zones/app", &["1.0"], old, &[TOOL_21])])
        );
        assert_eq!(
            search(host, "tool@=2.1", &[]),
            BTreeSet::from([hit("zones/app", &["1.0"], old, &[TOOL_21])])
        );
        assert_eq!(
            search(host, "tool@>=2.2", &[]),
            BTreeSet::from([
                hit("other/app", &["latest"], new, &[TOOL_22]),
                hit("zones/app", &["2.0"], new, &[TOOL_22]),
            ])
        );
        assert_eq!(search(host, "tool@>=2.1", &[]), all_tool);
        assert_eq!(search(host, "tool@<5.2", &[]), all_tool);
        assert_eq!(search(host, "tool@<2", &[]), BTreeSet::new());
        // The branch is compared when given (after the release).
        assert_eq!(search(host, "tool@=2.1-2024.1", &[]), BTreeSet::new());
        assert_eq!(
            search(host, "tool@>=2.1-2024.1", &[]),
            BTreeSet::from([
                hit("other/app", &["latest"], new, &[TOOL_22]),
                hit("zones/app", &["2.0"], new, &[TOOL_22]),
            ])
        );
        // Both packages of every image match a glob over everything.
        assert_eq!(
            search(host, "*", &[]),
            BTreeSet::from([
                hit("other/app", &["latest"], new, &[TOOL_22, CORE]),
                hit("zones/app", &["1.0"], old, &[TOOL_21, CORE]),
                hit("zones/app", &["2.0"], new, &[TOOL_22, CORE]),
            ])
        );
        assert_eq!(search(host, "openssl", &[]), BTreeSet::new());
        // --limit and the registry's pages (n): one image at a time, in repository@digest order.
        let first = search(host, "tool", &["--limit", "1"]);
        assert_eq!(first.len(), 1);
        assert_eq!(first.iter().next().unwrap().0, "other/app");
    };
    check_all(&host);

    // The text output: repository, tags, digest, FMRI.
    let text =
        String::from_utf8(ok(rdctl().args(["search", "--package", "tool@<2.2", &host])).stdout)
            .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text}");
    assert!(lines[0].starts_with("REPOSITORY"), "{text}");
    let cols: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(cols, ["zones/app", "1.0", old.as_str(), TOOL_21], "{text}");

    // One image's packages, by tag and by digest.
    let (st, doc, body) = get(&reg, "/v2/zones/app/_rd/packages/1.0", None);
    assert_eq!(st, 200, "{body}");
    assert_eq!(doc["digest"], old.as_str());
    assert_eq!(doc["tags"], serde_json::json!(["1.0"]));
    let fmris: BTreeSet<&str> = doc["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["fmri"].as_str().unwrap())
        .collect();
    assert_eq!(fmris, BTreeSet::from([TOOL_21, CORE]));
    let (st, doc2, _) = get(&reg, &format!("/v2/zones/app/_rd/packages/{old}"), None);
    assert_eq!(st, 200);
    assert_eq!(doc2, doc);
    assert_eq!(get(&reg, "/v2/zones/app/_rd/packages/9.9", None).0, 404);
    // A bad query says what is wrong.
    let (st, doc, _) = get(&reg, "/v2/_rd/packages?name=tool&version=~2", None);
    assert_eq!(st, 400);
    assert_eq!(doc["errors"][0]["code"], "QUERY_INVALID");
    assert_eq!(get(&reg, "/v2/_rd/packages", None).0, 400);
    // The registry's own page size: n=1 answers one image and where to go on.
    let (st, page, _) = get(&reg, "/v2/_rd/packages?name=tool&n=1", None);
    assert_eq!(st, 200);
    assert_eq!(page["results"].as_array().unwrap().len(), 1);
    assert_eq!(page["truncated"], true);
    let next = page["next"].as_str().unwrap();
    assert_eq!(next, format!("other/app@{new}"));

    // Persisted: a restarted registry answers the same.
    drop(reg);
    let reg = Server::start(&data, &[]);
    let host = reg.host();
    check_all(&host);

    // A deleted manifest disappears (with its tag).
    ok(rdctl().args(["rm", &format!("{host}/zones/app@{new}")]));
    assert_eq!(
        search(&host, "tool", &[]),
        BTreeSet::from([
            hit("other/app", &["latest"], new, &[TOOL_22]),
            hit("zones/app", &["1.0"], old, &[TOOL_21]),
        ])
    );
    // Deleting a tag keeps the image, untagged.
    ok(rdctl().args(["rm", &format!("{host}/other/app:latest")]));
    assert_eq!(
        search(&host, "tool@>=2.2", &[]),
        BTreeSet::from([hit("other/app", &[], new, &[TOOL_22])])
    );

    // Content pushed before the index existed: remove the index, then reindex.
    fs::remove_dir_all(data.join("_rd")).unwrap();
    assert_eq!(search(&host, "tool", &[]), BTreeSet::new());
    let out = ok(rdctl().args(["registry", "reindex", "--data", s(&data), "--json"]));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sboms"], 2, "{report}");
    assert_eq!(report["packages"], 4, "{report}");
    assert_eq!(report["repositories"], 2, "{report}");
    assert_eq!(
        search(&host, "tool", &[]),
        BTreeSet::from([
            hit("other/app", &[], new, &[TOOL_22]),
            hit("zones/app", &["1.0"], old, &[TOOL_21]),
        ])
    );

    // Garbage collection of untagged manifests takes their index entries with them (not only
    // hidden at query time: gone from the index document).
    ok(rdctl().args([
        "registry",
        "gc",
        "--data",
        s(&data),
        "--grace",
        "0",
        "--delete-untagged",
    ]));
    assert_eq!(
        search(&host, "tool", &[]),
        BTreeSet::from([hit("zones/app", &["1.0"], old, &[TOOL_21])])
    );
    let index = |repo: &str| -> Value {
        let path = data.join(format!("_rd/pkgindex/{repo}/_index.json"));
        serde_json::from_slice(&fs::read(&path).unwrap()).unwrap()
    };
    assert_eq!(index("other/app"), serde_json::json!({"images": {}}));
    let zones = index("zones/app");
    let subjects: Vec<&String> = zones["images"].as_object().unwrap().keys().collect();
    assert_eq!(subjects, [old], "{zones}");
}

/// The ACL of the auth sweep: anyone may pull `public/**`, alice `team-x/**`, admin everything.
fn auth_registry(dir: &Path) -> (Server, PathBuf, PathBuf) {
    let users = dir.join("htpasswd");
    let hash = |p: &str| bcrypt::hash(p, 4).unwrap();
    fs::write(
        &users,
        format!("alice:{}\nadmin:{}\n", hash("alice-pw"), hash("admin-pw")),
    )
    .unwrap();
    let config = dir.join("registry.toml");
    fs::write(
        &config,
        format!(
            "[auth]\nhtpasswd = {:?}\n\n\
             [[auth.acl]]\nsubjects = [\"anonymous\"]\nrepositories = [\"public/**\"]\nactions = [\"pull\"]\n\n\
             [[auth.acl]]\nsubjects = [\"alice\"]\nrepositories = [\"team-x/**\"]\nactions = [\"pull\"]\n\n\
             [[auth.acl]]\nsubjects = [\"admin\"]\nrepositories = [\"**\"]\nactions = [\"*\"]\n",
            s(&users)
        ),
    )
    .unwrap();
    let server = Server::start(&dir.join("data"), &["--config", s(&config)]);
    let auth_file = |user: &str, pw: &str| {
        let path = dir.join(format!("{user}.json"));
        let auth = base64::engine::general_purpose::STANDARD.encode(format!("{user}:{pw}"));
        fs::write(
            &path,
            serde_json::json!({"auths": {server.host(): {"auth": auth}}}).to_string(),
        )
        .unwrap();
        path
    };
    let (admin, alice) = (
        auth_file("admin", "admin-pw"),
        auth_file("alice", "alice-pw"),
    );
    (server, admin, alice)
}

#[test]
fn search_answers_only_repositories_the_caller_may_pull() {
    let imgs = images();
    let dir = tempdir();
    let (reg, admin, alice) = auth_registry(dir.path());
    let host = reg.host();
    for repo in ["team-x/app", "team-y/app", "public/app"] {
        push(
            &imgs.old.0,
            &format!("{host}/{repo}:1.0"),
            &["--auth-file", s(&admin)],
        );
    }
    let repos_in = |doc: &Value| -> BTreeSet<String> {
        doc["results"]
            .as_array()
            .unwrap_or_else(|| panic!("{doc}"))
            .iter()
            .map(|r| r["repository"].as_str().unwrap().to_owned())
            .collect()
    };
    let set = |r: &[&str]| -> BTreeSet<String> { r.iter().map(|x| x.to_string()).collect() };
    // (user and password, or anonymous; the repositories it may pull)
    type Caller<'a> = (Option<(&'a str, &'a str)>, &'a [&'a str]);
    let callers: [Caller; 3] = [
        (None, &["public/app"]),
        (Some(("alice", "alice-pw")), &["public/app", "team-x/app"]),
        (
            Some(("admin", "admin-pw")),
            &["public/app", "team-x/app", "team-y/app"],
        ),
    ];
    for (user, want) in callers {
        for query in [
            "name=*",
            "name=tool",
            "name=core&version=%3C5.2",
            "name=tool&version=%3E%3D2.1&n=1000",
            "name=nothing",
        ] {
            let (st, doc, body) = get(&reg, &format!("/v2/_rd/packages?{query}"), user);
            assert_eq!(st, 200, "{user:?} {query}: {body}");
            let got = repos_in(&doc);
            if query != "name=nothing" {
                assert_eq!(got, set(want), "{user:?} {query}");
            } else {
                assert!(got.is_empty());
            }
            for other in ["team-x", "team-y", "public"] {
                if !want.iter().any(|w| w.starts_with(other)) {
                    assert!(
                        !body.contains(other),
                        "{user:?} {query} mentions {other}: {body}"
                    );
                }
            }
        }
        // One page at a time: the pages never count or name what the caller may not pull.
        let (_, doc, body) = get(&reg, "/v2/_rd/packages?name=tool&n=1", user);
        assert_eq!(doc["truncated"], want.len() > 1, "{user:?}: {body}");
        // One image's packages: only with pull on its repository.
        for repo in ["team-x/app", "team-y/app", "public/app"] {
            let (st, _, body) = get(&reg, &format!("/v2/{repo}/_rd/packages/1.0"), user);
            let expected = if want.contains(&repo) {
                200
            } else if user.is_none() {
                401
            } else {
                403
            };
            assert_eq!(st, expected, "{user:?} {repo}: {body}");
        }
    }
    // rdctl search with alice's credentials.
    let found: BTreeSet<String> = search(&host, "tool", &["--auth-file", s(&alice)])
        .into_iter()
        .map(|h| h.0)
        .collect();
    assert_eq!(found, set(&["public/app", "team-x/app"]));
    // Anonymous rdctl search: public only.
    let found: BTreeSet<String> = search(
        &host,
        "tool",
        &["--auth-file", s(&dir.path().join("none.json"))],
    )
    .into_iter()
    .map(|h| h.0)
    .collect();
    assert_eq!(found, set(&["public/app"]));
}

/// Two replicas on one SeaweedFS bucket: what one indexes the other answers, a delete on one
/// is seen by the other, and `rdctl registry reindex` works on the bucket.
#[test]
fn two_s3_replicas_share_the_package_index() {
    let imgs = images();
    let sw = s3_fixtures::SeaweedFs::shared().unwrap_or_else(|e| panic!("{e}"));
    let bucket = sw.bucket().unwrap_or_else(|e| panic!("{e}"));
    let endpoint = sw.endpoint();
    let s3 = [
        "--s3-endpoint",
        endpoint.as_str(),
        "--s3-bucket",
        bucket.as_str(),
        "--s3-prefix",
        "reg",
    ];
    let (da, db) = (tempdir(), tempdir());
    let a = Server::start(da.path(), &s3);
    let b = Server::start(db.path(), &s3);
    push(&imgs.old.0, &format!("{}/zones/app:1.0", a.host()), &[]);
    push(&imgs.new.0, &format!("{}/zones/app:2.0", a.host()), &[]);
    let (old, new) = (&imgs.old.1, &imgs.new.1);
    let both = BTreeSet::from([
        hit("zones/app", &["1.0"], old, &[TOOL_21]),
        hit("zones/app", &["2.0"], new, &[TOOL_22]),
    ]);
    assert_eq!(search(&b.host(), "tool", &[]), both);
    assert_eq!(
        search(&b.host(), "tool@<2.2", &[]),
        BTreeSet::from([hit("zones/app", &["1.0"], old, &[TOOL_21])])
    );
    // Deleted through B, gone at A.
    ok(rdctl().args(["rm", &format!("{}/zones/app@{new}", b.host())]));
    assert_eq!(
        search(&a.host(), "tool", &[]),
        BTreeSet::from([hit("zones/app", &["1.0"], old, &[TOOL_21])])
    );
    let out = ok(rdctl()
        .args(["registry", "reindex", "--json"])
        .args(s3)
        .arg("--data")
        .arg(da.path()));
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["sboms"], 1, "{report}");
    assert_eq!(report["pruned"], 0, "{report}");
    assert_eq!(
        search(&b.host(), "tool", &[]),
        BTreeSet::from([hit("zones/app", &["1.0"], old, &[TOOL_21])])
    );
}

fn sha256(data: &[u8]) -> String {
    validator::Digest::sha256(data).to_string()
}

/// Uploads `data` into `repo` in one POST; its digest.
pub(crate) fn put_blob(server: &Server, repo: &str, data: &[u8]) -> String {
    let d = sha256(data);
    let (st, _, body) = http(
        server.addr,
        "POST",
        &format!("/v2/{repo}/blobs/uploads/?digest={d}"),
        &[("content-type", "application/octet-stream")],
        data,
    );
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));
    d
}

/// PUTs a manifest; its digest.
pub(crate) fn put_manifest(server: &Server, repo: &str, reference: &str, m: &Value) -> String {
    let bytes = serde_json::to_vec(m).unwrap();
    let (st, _, body) = http(
        server.addr,
        "PUT",
        &format!("/v2/{repo}/manifests/{reference}"),
        &[("content-type", "application/vnd.oci.image.manifest.v1+json")],
        &bytes,
    );
    assert_eq!(st, 201, "{}", String::from_utf8_lossy(&body));
    sha256(&bytes)
}

/// An SBOM referrer of `subject` carrying `doc` as its SPDX layer; its digest.
fn put_sbom(server: &Server, repo: &str, subject: &str, subject_size: usize, doc: &[u8]) -> String {
    let empty = put_blob(server, repo, b"{}");
    let layer = put_blob(server, repo, doc);
    let m = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "artifactType": "application/spdx+json",
        "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty, "size": 2},
        "layers": [{"mediaType": "application/spdx+json", "digest": layer, "size": doc.len()}],
        "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
                    "digest": subject, "size": subject_size},
    });
    let d = put_manifest(server, repo, &sha256(&serde_json::to_vec(&m).unwrap()), &m);
    assert_eq!(d, sha256(&serde_json::to_vec(&m).unwrap()));
    d
}

/// SBOMs from other tools: one that is not SPDX is left out and its push succeeds; a package
/// without an FMRI or with a version pkg(5) cannot read is found by name, never by a version
/// constraint; a second SBOM of the same image adds its packages to the image's entry.
#[test]
fn foreign_and_broken_sboms() {
    let dir = tempdir();
    let reg = Server::start(&dir.path().join("data"), &[]);
    let repo = "misc/app";
    let config_bytes: &[u8] =
        br#"{"architecture":"amd64","os":"illumos","rootfs":{"type":"layers","diff_ids":[]}}"#;
    let config = put_blob(&reg, repo, config_bytes);
    let image = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config,
                   "size": config_bytes.len()},
        "layers": [],
    });
    let image_bytes = serde_json::to_vec(&image).unwrap();
    let subject = put_manifest(&reg, repo, "1.0", &image);
    let broken = put_sbom(&reg, repo, &subject, image_bytes.len(), b"this is not JSON");
    let (st, doc, body) = get(&reg, &format!("/v2/{repo}/_rd/packages/1.0"), None);
    assert_eq!(st, 200, "{body}");
    assert_eq!(doc["packages"], serde_json::json!([]), "{body}");
    assert!(!body.contains(&broken), "{body}");

    let spdx = serde_json::json!({
        "spdxVersion": "SPDX-2.3", "name": "other tool",
        "packages": [
            {"name": "web/nginx", "versionInfo": "1.25.3", "supplier": "Organization: acme"},
            {"name": "web/odd", "versionInfo": "v1-beta"},
        ],
    });
    let sbom = put_sbom(
        &reg,
        repo,
        &subject,
        image_bytes.len(),
        &serde_json::to_vec(&spdx).unwrap(),
    );
    let query = |q: &str| -> Value {
        let (st, doc, body) = get(&reg, &format!("/v2/_rd/packages?{q}"), None);
        assert_eq!(st, 200, "{q}: {body}");
        doc
    };
    let doc = query("name=nginx");
    assert_eq!(
        doc["results"],
        serde_json::json!([{
            "repository": repo, "digest": subject, "tags": ["1.0"], "sboms": [sbom],
            "packages": [{"fmri": null, "name": "web/nginx", "publisher": "acme",
                          "version": "1.25.3"}],
        }]),
        "{doc}"
    );
    assert_eq!(doc["truncated"], false);
    assert_eq!(
        query("name=nginx&version=%3E%3D1.25")["results"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        query("name=nginx&version=%3C1.25")["results"],
        serde_json::json!([])
    );
    assert_eq!(query("name=odd")["results"].as_array().unwrap().len(), 1);
    assert_eq!(
        query("name=odd&version=%3E%3D0")["results"],
        serde_json::json!([])
    );

    // A second SBOM of the image: both documents' packages, each once.
    let more = serde_json::json!({"spdxVersion": "SPDX-2.3",
        "packages": [{"name": "web/nginx", "versionInfo": "1.25.3", "supplier": "Organization: acme"},
                     {"name": "lib/zlib", "versionInfo": "1.3"}]});
    let sbom2 = put_sbom(
        &reg,
        repo,
        &subject,
        image_bytes.len(),
        &serde_json::to_vec(&more).unwrap(),
    );
    let (_, doc, _) = get(&reg, &format!("/v2/{repo}/_rd/packages/{subject}"), None);
    let names: Vec<&str> = doc["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    let mut sboms = vec![sbom.clone(), sbom2.clone()];
    sboms.sort();
    assert_eq!(doc["sboms"], serde_json::json!(sboms), "{doc}");
    let mut names_sorted = names.clone();
    names_sorted.sort();
    assert_eq!(names_sorted, ["lib/zlib", "web/nginx", "web/odd"], "{doc}");
    // Deleting one SBOM keeps the other's packages.
    let (st, _, _) = http(
        reg.addr,
        "DELETE",
        &format!("/v2/{repo}/manifests/{sbom}"),
        &[],
        b"",
    );
    assert_eq!(st, 202);
    let (_, doc, _) = get(&reg, &format!("/v2/{repo}/_rd/packages/1.0"), None);
    assert_eq!(doc["sboms"], serde_json::json!([sbom2]), "{doc}");
    assert_eq!(query("name=odd")["results"], serde_json::json!([]));
    assert_eq!(query("name=zlib")["results"].as_array().unwrap().len(), 1);
}

/// Copies a directory tree (the example's image file, manifests and payloads).
fn copy_tree(from: &Path, to: &Path) {
    fs::create_dir_all(to).unwrap();
    for entry in fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let dest = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &dest);
        } else {
            fs::copy(entry.path(), &dest).unwrap();
        }
    }
}

/// `rdctl lock` and `rdctl build` of an image file: the layout and its manifest digest.
fn lock_and_build(image: &Path) -> (PathBuf, String) {
    ok(rdctl().args(["lock", s(image)]));
    let out = image.parent().unwrap().join("out");
    let built = ok(rdctl().args(["build", s(image), "--output", s(&out), "--json"]));
    let summary: Value = serde_json::from_slice(&built.stdout).unwrap();
    (out, summary["manifest"].as_str().unwrap().to_owned())
}

/// The FMRIs a lockfile pinned, as the SBOM and the search name them.
fn locked_fmris(image: &Path) -> Vec<String> {
    let lock: Value =
        serde_json::from_slice(&fs::read(image.with_file_name("image.lock.json")).unwrap())
            .unwrap();
    let mut out: Vec<String> = lock["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["fmri"].as_str().unwrap().to_owned())
        .collect();
    out.sort();
    out
}

fn strs(v: &[String]) -> Vec<&str> {
    v.iter().map(String::as_str).collect()
}

/// The shipped example (examples/hello, built as its README says) and images of the real
/// OpenIndiana packages in the shared 2016 catalog (`userland` publisher, their catalogued
/// versions, plus an older libmatemixer published beside them) are found by name, glob and
/// pkg(5) version constraint; a restarted registry and a second replica on the same
/// filesystem store answer the same.
#[test]
fn search_finds_the_example_and_the_2016_catalog_packages() {
    let dir = tempdir();

    // The example, exactly as examples/hello/README.md builds it.
    let hello = dir.path().join("hello");
    copy_tree(&crate::util::root().join("examples/hello"), &hello);
    for m in ["system-base.p5m", "hello.p5m"] {
        ok(rdctl().current_dir(&hello).args([
            "ips",
            "publish",
            "--repo",
            "repo",
            "--publisher",
            "example.org",
            "--proto",
            "proto",
            &format!("manifests/{m}"),
        ]));
    }
    let hello_image = hello.join("image.toml");
    let (hello_out, hello_digest) = lock_and_build(&hello_image);
    let hello_fmris = locked_fmris(&hello_image);
    assert_eq!(hello_fmris.len(), 2, "{hello_fmris:?}");

    // The catalog's packages at their catalogued versions.
    let catalog = crate::util::root().join("ips-bridge/tests/data/catalog-2016/catalog.base.C");
    let doc: Value = serde_json::from_slice(&fs::read(&catalog).unwrap()).unwrap();
    let mut catalogued: Vec<(String, String)> = doc["userland"]
        .as_object()
        .unwrap()
        .iter()
        .map(|(stem, entries)| (stem.clone(), entries[0]["version"].as_str().unwrap().into()))
        .collect();
    catalogued.sort();
    let older = (
        "library/desktop/mate/libmatemixer".to_owned(),
        "1.14.1,5.11-2016.0.1.0:20160601T120000Z".to_owned(),
    );
    let mate = dir.path().join("mate");
    let proto = mate.join("proto");
    fs::create_dir_all(&proto).unwrap();
    for (i, (stem, version)) in catalogued.iter().chain([&older]).enumerate() {
        let p5m = proto.join(format!("{i}.p5m"));
        fs::write(
            &p5m,
            format!(
                "set name=pkg.fmri value=pkg:/{stem}@{version}\n\
                 set name=pkg.summary value=\"{stem} from the 2016 catalog\"\n\
                 dir path=usr mode=0755 owner=root group=sys\n\
                 dir path=usr/share mode=0755 owner=root group=sys\n"
            ),
        )
        .unwrap();
        ok(rdctl().args([
            "ips",
            "publish",
            "--repo",
            s(&mate.join("repo")),
            "--publisher",
            "userland",
            "--proto",
            s(&proto),
            s(&p5m),
        ]));
    }
    let mate_image = |name: &str, includes: &[&str]| -> (PathBuf, String, Vec<String>) {
        let work = mate.join(name);
        fs::create_dir_all(&work).unwrap();
        let image = work.join("image.toml");
        let includes: Vec<String> = includes.iter().map(|i| format!("{i:?}")).collect();
        fs::write(
            &image,
            format!(
                "name = \"mate/desktop\"\ntags = [\"1.0\"]\nplatform = \"illumos/amd64\"\n\n\
                 [publishers]\n\"userland\" = {:?}\n\n[packages]\ninclude = [{}]\n",
                s(&mate.join("repo")),
                includes.join(", ")
            ),
        )
        .unwrap();
        let (out, digest) = lock_and_build(&image);
        (out, digest, locked_fmris(&image))
    };
    let new = mate_image(
        "new",
        &[
            "library/desktop/mate/libmatemixer",
            "library/desktop/mate/mate-common",
        ],
    );
    let old = mate_image(
        "old",
        &[
            "library/desktop/mate/libmatemixer@1.14",
            "library/desktop/mate/mate-common",
        ],
    );
    // The newest catalogued version was picked, the older one where pinned.
    let fmri = |stem: &str, version: &str| format!("pkg://userland/{stem}@{version}");
    let expect_new: Vec<String> = catalogued.iter().map(|(s, v)| fmri(s, v)).collect();
    assert_eq!(new.2, expect_new);
    let mut expect_old = vec![fmri(&older.0, &older.1), expect_new[1].clone()];
    expect_old.sort();
    assert_eq!(old.2, expect_old);

    let data = dir.path().join("data");
    let reg = Server::start(&data, &[]);
    push(&hello_out, &format!("{}/demo/hello:1.0", reg.host()), &[]);
    push(&new.0, &format!("{}/mate/desktop:2016.1", reg.host()), &[]);
    push(&old.0, &format!("{}/mate/desktop:2016.0", reg.host()), &[]);

    let h_hello = |fmris: &[&str]| hit("demo/hello", &["1.0"], &hello_digest, fmris);
    let h_new = |fmris: &[&str]| hit("mate/desktop", &["2016.1"], &new.1, fmris);
    let h_old = |fmris: &[&str]| hit("mate/desktop", &["2016.0"], &old.1, fmris);
    let (mixer_new, common) = (expect_new[0].as_str(), expect_new[1].as_str());
    let mixer_old = fmri(&older.0, &older.1);
    let check = |host: &str| {
        // Everything, by a glob over every name.
        assert_eq!(
            search(host, "*", &[]),
            BTreeSet::from([
                h_hello(&strs(&hello_fmris)),
                h_new(&strs(&new.2)),
                h_old(&strs(&old.2)),
            ])
        );
        // The example's packages by their names.
        assert_eq!(
            search(host, "hello", &[]),
            BTreeSet::from([h_hello(&[&hello_fmris[0]])])
        );
        assert_eq!(
            search(host, "system/base@=1.0", &[]),
            BTreeSet::from([h_hello(&[&hello_fmris[1]])])
        );
        assert_eq!(search(host, "system/base@<1.0", &[]), BTreeSet::new());
        // The catalog's, by glob and version.
        assert_eq!(
            search(host, "library/desktop/mate/*", &[]),
            BTreeSet::from([h_new(&strs(&new.2)), h_old(&strs(&old.2))])
        );
        assert_eq!(
            search(host, "mate-common@=1.16.0", &[]),
            BTreeSet::from([h_new(&[common]), h_old(&[common])])
        );
        assert_eq!(
            search(host, "libmatemixer@<1.16", &[]),
            BTreeSet::from([h_old(&[&mixer_old])])
        );
        assert_eq!(
            search(host, "libmatemixer@>=1.16.0", &[]),
            BTreeSet::from([h_new(&[mixer_new])])
        );
        assert_eq!(
            search(host, "libmatemixer@<=1.16.0-2016.1.1.0", &[]),
            BTreeSet::from([h_new(&[mixer_new]), h_old(&[&mixer_old])])
        );
        assert_eq!(
            search(host, "libmatemixer@>=1.16.0-2016.1.2", &[]),
            BTreeSet::new()
        );
        assert_eq!(search(host, "mate/*@>=1.17", &[]), BTreeSet::new());
    };
    check(&reg.host());

    // A second replica on the same store answers the same while the first runs, and the
    // first answers the same after a restart.
    let second = Server::start(&data, &[]);
    check(&second.host());
    drop(reg);
    let reg = Server::start(&data, &[]);
    check(&reg.host());
}

/// With bearer tokens (`[auth.token]`): `rdctl search` gets a token like any client and sees
/// only what its user may pull; `rdctl rm` needs the delete right.
#[test]
fn search_and_rm_with_token_auth() {
    let imgs = images();
    let dir = tempdir();
    let config = crate::web_ui::auth_config(dir.path(), true);
    let mut toml = fs::read_to_string(&config).unwrap();
    toml.push_str(
        "\n[[auth.acl]]\nsubjects = [\"anonymous\"]\nrepositories = [\"public/**\"]\nactions = [\"pull\"]\n",
    );
    fs::write(&config, toml).unwrap();
    let reg = Server::start(&dir.path().join("data"), &["--config", s(&config)]);
    let host = reg.host();
    let admin = crate::web_ui::admin_auth_file(dir.path(), &host);
    for repo in ["team-x/app", "team-y/app", "public/app"] {
        push(
            &imgs.old.0,
            &format!("{host}/{repo}:1.0"),
            &["--auth-file", s(&admin)],
        );
    }
    let alice = dir.path().join("alice.json");
    let auth = base64::engine::general_purpose::STANDARD.encode("alice:alice-pw");
    fs::write(
        &alice,
        serde_json::json!({"auths": {&host: {"auth": auth}}}).to_string(),
    )
    .unwrap();
    let repos = |auth: &Path| -> BTreeSet<String> {
        search(&host, "tool", &["--auth-file", s(auth)])
            .into_iter()
            .map(|h| h.0)
            .collect()
    };
    let set = |r: &[&str]| -> BTreeSet<String> { r.iter().map(|x| x.to_string()).collect() };
    assert_eq!(
        repos(&admin),
        set(&["public/app", "team-x/app", "team-y/app"])
    );
    assert_eq!(repos(&alice), set(&["public/app", "team-x/app"]));
    // Without credentials: an anonymous token, and what anonymous may pull.
    assert_eq!(repos(&dir.path().join("none.json")), set(&["public/app"]));

    // alice may pull team-x but not delete there; admin may.
    let denied = rdctl()
        .args([
            "rm",
            &format!("{host}/team-x/app:1.0"),
            "--auth-file",
            s(&alice),
        ])
        .output()
        .unwrap();
    assert!(!denied.status.success());
    let err = tail(&denied.stderr);
    assert!(err.contains("DENIED") || err.contains("denied"), "{err}");
    ok(rdctl().args([
        "rm",
        &format!("{host}/team-x/app:1.0"),
        "--auth-file",
        s(&admin),
    ]));
    assert_eq!(
        repos(&admin),
        set(&["public/app", "team-x/app", "team-y/app"])
    );
    let (_, tags, _) = get(
        &reg,
        "/v2/team-x/app/tags/list",
        Some(("admin", "admin-pw")),
    );
    assert!(
        tags["tags"].as_array().is_none_or(|t| t.is_empty()),
        "{tags}"
    );
}
