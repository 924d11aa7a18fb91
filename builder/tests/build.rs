//! End-to-end builder tests on real IPS file repositories published with ips-bridge's
//! publisher: lock, build, inspect the layer, reproducibility, failures, push.

use std::collections::BTreeMap;
use std::fs;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use builder::{BuildError, BuildOptions, ImageFile, LockError, build, lock};
use ips_bridge::{FileRepo, Manifest};
use validator::{Digest, ImageLayout};

const PUBLISHER: &str = "example.org";

const PASSWD: &str =
    "root:x:0:0:Super-User:/root:/usr/bin/bash\ndaemon:x:1:1::/:\nbin:x:2:2::/:\nsys:x:3:3::/:\n";
const SHADOW: &str =
    "root:$5$abc:19000::::::\ndaemon:NP:6445::::::\nbin:NP:6445::::::\nsys:NP:6445::::::\n";
const GROUP: &str = "root::0:\nother::1:root\nbin::2:root,daemon\nsys::3:root,bin,adm\n";

const CORE: &str = "set name=pkg.fmri value=pkg:/system/core@1.0,5.11-2024.0:20240101T000000Z
set name=pkg.summary value=\"Core files\"
set name=variant.arch value=i386
dir path=etc mode=0755 owner=root group=sys
dir path=usr mode=0755 owner=root group=sys
dir path=usr/bin mode=0755 owner=root group=bin
file path=etc/passwd mode=0644 owner=root group=sys preserve=true
file path=etc/shadow mode=0400 owner=root group=sys preserve=true
file path=etc/group mode=0644 owner=root group=sys preserve=true
file path=etc/gz-only mode=0644 owner=root group=sys variant.opensolaris.zone=global
";

const TOOL: &str = "set name=pkg.fmri value=pkg:/demo/tool@2.1,5.11-2024.0:20240102T030405Z
set name=pkg.summary value=\"A demo tool\"
depend type=require fmri=system/core@1.0
group groupname=demo gid=300
user username=demo uid=300 group=demo home-dir=/var/demo gcos-field=\"Demo user\"
dir path=var mode=0755 owner=root group=sys
dir path=var/demo mode=0750 owner=demo group=demo
file path=usr/bin/tool mode=0555 owner=root group=bin
file path=etc/tool.conf mode=0640 owner=demo group=demo preserve=true timestamp=20230304T050607Z
file path=etc/tool.legacy mode=0644 owner=root group=bin preserve=legacy
link path=usr/bin/t target=tool
hardlink path=usr/bin/atool target=tool
license lic/tool.txt license=MIT
legacy pkg=DEMOtool name=\"Demo tool\" desc=\"demo\" category=application vendor=Example version=2.1
";

struct Fixture {
    dir: tempfile::TempDir,
}

impl Fixture {
    fn root(&self) -> &Path {
        self.dir.path()
    }
    fn repo(&self) -> PathBuf {
        self.root().join("repo")
    }
    fn image_file(&self) -> PathBuf {
        self.root().join("image.toml")
    }
}

fn publish(repo: &FileRepo, proto: &Path, text: &str) {
    let m = Manifest::parse(text).unwrap();
    repo.publish_at(
        PUBLISHER,
        &m,
        Some(proto),
        UNIX_EPOCH + Duration::from_secs(1_710_000_000),
    )
    .unwrap();
}

fn write(path: &Path, content: &[u8]) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, content).unwrap();
}

const IMAGE: &str = r#"tags = ["1.0"]
platform = "illumos/amd64"

[publishers]
"example.org" = "repo"

[packages]
include = ["demo/tool"]

[config]
entrypoint = ["/usr/bin/tool"]
cmd = ["--serve"]
env = { PATH = "/usr/bin" }
working_dir = "/var/demo"
user = "demo"
stop_signal = "SIGTERM"
stop_timeout = 45
"#;

/// A repository with a core package (accounts files) and a tool package (user, group,
/// preserved file, link, hardlink, license, legacy), and an image file using it.
fn fixture(extra: &[&str]) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let f = Fixture { dir };
    let proto = f.root().join("proto");
    write(&proto.join("etc/passwd"), PASSWD.as_bytes());
    write(&proto.join("etc/shadow"), SHADOW.as_bytes());
    write(&proto.join("etc/group"), GROUP.as_bytes());
    write(&proto.join("etc/gz-only"), b"global zone only\n");
    write(&proto.join("usr/bin/tool"), b"#!/bin/sh\necho tool\n");
    write(&proto.join("etc/tool.conf"), b"port=80\n");
    write(&proto.join("etc/tool.legacy"), b"old\n");
    write(&proto.join("lic/tool.txt"), b"MIT License\n");
    write(&proto.join("usr/bin/other"), b"other\n");
    let repo = FileRepo::create(f.repo(), PUBLISHER).unwrap();
    publish(&repo, &proto, CORE);
    publish(&repo, &proto, TOOL);
    for e in extra {
        publish(&repo, &proto, e);
    }
    fs::write(f.image_file(), IMAGE).unwrap();
    f
}

fn lock_it(f: &Fixture) {
    let image = ImageFile::load(f.image_file()).unwrap();
    lock(&image).unwrap();
}

fn build_to(f: &Fixture, out: &Path) -> builder::BuildSummary {
    build(
        &f.image_file(),
        &BuildOptions {
            output: out.to_owned(),
            ..BuildOptions::default()
        },
    )
    .unwrap()
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: u8,
    mode: u32,
    uid: u64,
    gid: u64,
    mtime: u64,
    link: Option<String>,
    data: Vec<u8>,
}

fn read_layer(layout: &Path, digest: &Digest) -> BTreeMap<String, Entry> {
    let f = fs::File::open(layout.join("blobs/sha256").join(digest.encoded())).unwrap();
    let mut ar = tar::Archive::new(flate2::read::MultiGzDecoder::new(f));
    let mut out = BTreeMap::new();
    let mut order = Vec::new();
    for e in ar.entries().unwrap() {
        let mut e = e.unwrap();
        let h = e.header().clone();
        let path = e.path().unwrap().display().to_string();
        let link = e.link_name().unwrap().map(|l| l.display().to_string());
        let mut data = Vec::new();
        e.read_to_end(&mut data).unwrap();
        order.push(path.clone());
        out.insert(
            path.trim_end_matches('/').to_owned(),
            Entry {
                kind: h.entry_type().as_byte(),
                mode: h.mode().unwrap(),
                uid: h.uid().unwrap(),
                gid: h.gid().unwrap(),
                mtime: h.mtime().unwrap(),
                link,
                data,
            },
        );
    }
    let mut sorted = order.clone();
    sorted.sort();
    assert_eq!(order, sorted, "entries are sorted");
    out
}

#[test]
fn lock_writes_full_fmris_and_manifest_hashes() {
    let f = fixture(&[]);
    let image = ImageFile::load(f.image_file()).unwrap();
    let (lockfile, path) = lock(&image).unwrap();
    assert_eq!(path, f.root().join("image.lock.json"));
    let fmris: Vec<&str> = lockfile.packages.iter().map(|p| p.fmri.as_str()).collect();
    assert_eq!(
        fmris,
        [
            "pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z",
            "pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z"
        ]
    );
    // The manifest SHA-1 is the one the repository's catalog records.
    let repo = FileRepo::open(f.repo()).unwrap();
    for p in &lockfile.packages {
        let r = repo
            .resolve(&ips_bridge::Fmri::parse(&p.fmri).unwrap())
            .unwrap();
        assert_eq!(r.manifest_sha1.as_deref(), Some(p.manifest_sha1.as_str()));
    }
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.contains("\"imageFileChecksum\": \"sha256:"), "{text}");
    assert!(text.contains("\"example.org\": \"repo\""), "{text}");
    // Readable like any file the user writes (tempfile's own default is 0600).
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let plain = f.root().join("plain");
        fs::write(&plain, b"").unwrap();
        let umasked = fs::metadata(&plain).unwrap().permissions().mode() & 0o777;
        let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o644 & umasked);
    }
}

#[test]
fn build_refuses_missing_and_stale_lockfiles() {
    let f = fixture(&[]);
    let out = f.root().join("out");
    let opts = BuildOptions {
        output: out.clone(),
        ..BuildOptions::default()
    };
    let e = build(&f.image_file(), &opts).unwrap_err();
    assert!(
        matches!(e, BuildError::Lock(LockError::Missing { .. })),
        "{e:?}"
    );
    let msg = e.to_string();
    assert!(
        msg.contains("no lockfile") && msg.contains("run `rdctl lock"),
        "{msg}"
    );
    lock_it(&f);
    fs::write(f.image_file(), IMAGE.replace("SIGTERM", "SIGINT")).unwrap();
    let e = build(&f.image_file(), &opts).unwrap_err();
    let msg = e.to_string();
    assert!(
        matches!(e, BuildError::Lock(LockError::Stale { .. })),
        "{e:?}"
    );
    assert!(
        msg.contains("does not match") && msg.contains("run `rdctl lock") && msg.contains("again"),
        "{msg}"
    );
}

#[test]
fn build_writes_the_expected_tree_and_config() {
    let f = fixture(&[]);
    lock_it(&f);
    let out = f.root().join("out");
    let s = build_to(&f, &out);
    assert_eq!(s.layers.len(), 1);
    let tree = read_layer(&out, &s.layers[0].digest);

    // Owners are numeric ids from the image's own passwd/group, including the new account.
    let conf = &tree["etc/tool.conf"];
    assert_eq!((conf.uid, conf.gid, conf.mode), (300, 300, 0o640));
    assert_eq!(
        conf.mtime, 1_677_906_367,
        "mtime from the action's timestamp"
    );
    assert_eq!(conf.data, b"port=80\n");
    let demo = &tree["var/demo"];
    assert_eq!(
        (demo.kind, demo.uid, demo.gid, demo.mode),
        (b'5', 300, 300, 0o750)
    );
    let tool = &tree["usr/bin/atool"];
    // The hardlink group's first path in sort order carries the content.
    assert_eq!(
        (tool.kind, tool.mode, tool.uid, tool.gid),
        (b'0', 0o555, 0, 2)
    );
    assert_eq!(tool.data, b"#!/bin/sh\necho tool\n");
    assert_eq!(tree["usr/bin/tool"].kind, b'1');
    assert_eq!(tree["usr/bin/tool"].link.as_deref(), Some("usr/bin/atool"));
    assert_eq!(tree["usr/bin/t"].kind, b'2');
    assert_eq!(tree["usr/bin/t"].link.as_deref(), Some("tool"));
    // Everything without a timestamp gets the newest package timestamp.
    assert_eq!(tree["usr/bin"].mtime, 1_704_164_645);
    // Variant-filtered and preserve=legacy files are not installed.
    assert!(!tree.contains_key("etc/gz-only"));
    assert!(!tree.contains_key("etc/tool.legacy"));

    // Accounts merged as pkg would: the delivered files plus the new user and group.
    let passwd = String::from_utf8(tree["etc/passwd"].data.clone()).unwrap();
    assert!(passwd.starts_with(PASSWD), "{passwd}");
    assert!(
        passwd.contains("demo:x:300:300:Demo user:/var/demo:"),
        "{passwd}"
    );
    let group = String::from_utf8(tree["etc/group"].data.clone()).unwrap();
    assert!(group.contains("demo::300:"), "{group}");
    let shadow = &tree["etc/shadow"];
    assert_eq!(shadow.mode, 0o400);
    assert!(String::from_utf8_lossy(&shadow.data).contains("demo:*LK*:19724"));

    // IPS metadata.
    let pkg5 = String::from_utf8(tree["var/pkg/pkg5.image"].data.clone()).unwrap();
    assert!(
        pkg5.contains("variant.opensolaris.zone = nonglobal"),
        "{pkg5}"
    );
    assert!(pkg5.contains("[authority_example.org]"), "{pkg5}");
    assert!(tree.contains_key("var/pkg/state/installed/catalog.attrs"));
    let lic = &tree["var/pkg/license/demo%2Ftool/license.MIT"];
    assert_eq!(
        (lic.mode, lic.data.as_slice()),
        (0o444, b"MIT License\n".as_slice())
    );
    let installed_manifest = tree
        .keys()
        .find(|k| k.starts_with("var/pkg/publisher/example.org/pkg/demo%2Ftool/"))
        .expect("manifest installed");
    assert!(String::from_utf8_lossy(&tree[installed_manifest].data).contains("username=demo"));
    let pkginfo = String::from_utf8(tree["var/sadm/pkg/DEMOtool/pkginfo"].data.clone()).unwrap();
    assert!(pkginfo.contains("PKG=DEMOtool"), "{pkginfo}");

    // Config: StopSignal, the stop timeout, the platform; the index names the platform.
    let layout = ImageLayout::open(&out).unwrap();
    let cfg: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.blob_path(&s.config)).unwrap()).unwrap();
    assert_eq!(cfg["os"], "illumos");
    assert_eq!(cfg["architecture"], "amd64");
    assert_eq!(cfg["config"]["StopSignal"], "SIGTERM");
    assert_eq!(cfg["config"]["User"], "demo");
    assert_eq!(
        cfg["config"]["Labels"][builder::STOP_TIMEOUT_ANNOTATION],
        "45"
    );
    assert_eq!(
        cfg["rootfs"]["diff_ids"][0],
        s.layers[0].diff_id.to_string()
    );
    assert_eq!(cfg["created"], "2024-01-02T03:04:05Z");
    let man: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.blob_path(&s.manifest)).unwrap()).unwrap();
    assert_eq!(man["annotations"][builder::STOP_TIMEOUT_ANNOTATION], "45");
    assert!(
        man["annotations"][builder::PACKAGES_ANNOTATION]
            .as_str()
            .unwrap()
            .contains("pkg://example.org/demo/tool@2.1")
    );
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(out.join("index.json")).unwrap()).unwrap();
    assert_eq!(index["manifests"][0]["platform"]["os"], "illumos");
    assert_eq!(
        index["manifests"][0]["annotations"]["org.opencontainers.image.ref.name"],
        "1.0"
    );
    assert_eq!(index["manifests"][0]["digest"], s.manifest.to_string());

    // The SBOM: a referrer of the image manifest holding an SPDX 2.3 document.
    assert_eq!(index["manifests"][1]["digest"], s.sbom.to_string());
    assert_eq!(
        index["manifests"][1]["artifactType"],
        builder::SBOM_ARTIFACT_TYPE
    );
    let referrer: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.blob_path(&s.sbom)).unwrap()).unwrap();
    assert_eq!(referrer["subject"]["digest"], s.manifest.to_string());
    let spdx_digest = Digest::parse(referrer["layers"][0]["digest"].as_str().unwrap()).unwrap();
    let spdx: serde_json::Value =
        serde_json::from_slice(&fs::read(layout.blob_path(&spdx_digest)).unwrap()).unwrap();
    assert_eq!(spdx["spdxVersion"], "SPDX-2.3");
    let names: Vec<&str> = spdx["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["demo/tool", "system/core"]);
    assert_eq!(spdx["packages"][0]["supplier"], "Organization: example.org");
    assert!(
        spdx["packages"][0]["licenseComments"]
            .as_str()
            .unwrap()
            .contains("MIT")
    );
    let tool_sha1 = ips_bridge::hash_hex(ips_bridge::HashAlg::Sha1, b"#!/bin/sh\necho tool\n");
    assert!(
        spdx["files"]
            .as_array()
            .unwrap()
            .iter()
            .any(|f| f["checksums"][0]["checksumValue"] == tool_sha1.as_str()),
        "{spdx}"
    );
}

#[test]
fn two_builds_in_different_directories_give_the_same_digest() {
    let a = fixture(&[]);
    let b = fixture(&[]);
    lock_it(&a);
    lock_it(&b);
    assert_eq!(
        fs::read(a.root().join("image.lock.json")).unwrap(),
        fs::read(b.root().join("image.lock.json")).unwrap(),
        "lockfiles do not depend on the directory"
    );
    let sa = build_to(&a, &a.root().join("out"));
    let sb = build_to(&b, &b.root().join("elsewhere/out"));
    assert_eq!(sa.manifest, sb.manifest);
    assert_eq!(sa.layers[0].digest, sb.layers[0].digest);
    eprintln!("reproducible manifest digest: {}", sa.manifest);

    // A changed payload gives a different image.
    let c = fixture(&[]);
    let proto = c.root().join("proto2");
    write(&proto.join("usr/bin/tool"), b"#!/bin/sh\necho tool v2\n");
    for p in [
        "etc/passwd",
        "etc/shadow",
        "etc/group",
        "etc/tool.conf",
        "etc/tool.legacy",
        "lic/tool.txt",
    ] {
        write(
            &proto.join(p),
            &fs::read(c.root().join("proto").join(p)).unwrap(),
        );
    }
    let repo = FileRepo::open(c.repo()).unwrap();
    publish(
        &repo,
        &proto,
        &TOOL.replace("20240102T030405Z", "20240102T030406Z"),
    );
    lock_it(&c);
    let sc = build_to(&c, &c.root().join("out"));
    assert_ne!(sa.manifest, sc.manifest);
}

#[test]
fn zstd_and_per_package_layers() {
    let f = fixture(&[]);
    let text = format!(
        "{IMAGE}\n[layering]\nstrategy = \"per-package\"\n[compression]\nalgorithm = \"zstd\"\nlevel = 3\n"
    );
    fs::write(f.image_file(), text).unwrap();
    lock_it(&f);
    let s = build_to(&f, &f.root().join("out"));
    let labels: Vec<&str> = s.layers.iter().map(|l| l.contents.as_str()).collect();
    assert_eq!(
        labels,
        [
            "pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z",
            "pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z",
            "generated"
        ]
    );
    let man: serde_json::Value = serde_json::from_slice(
        &fs::read(
            ImageLayout::open(f.root().join("out"))
                .unwrap()
                .blob_path(&s.manifest),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        man["layers"][0]["mediaType"],
        "application/vnd.oci.image.layer.v1.tar+zstd"
    );
}

#[test]
fn a_layer_budget_gives_the_largest_packages_their_own_layers_stably() {
    let a = "set name=pkg.fmri value=pkg:/demo/a@1.0:20240101T000000Z\nfile usr/bin/other path=opt/a/other mode=0555 owner=root group=bin\n";
    let b = "set name=pkg.fmri value=pkg:/demo/b@1.0:20240101T000000Z\nfile etc/gz-only path=opt/b/gz mode=0444 owner=root group=bin\n";
    let c = "set name=pkg.fmri value=pkg:/demo/c@1.0:20240101T000000Z\nfile usr/bin/other path=opt/c/other mode=0555 owner=root group=bin\n";
    let f = fixture(&[a, b, c]);
    let image = |budget: u32, extra: &str| {
        format!(
            "{}\n[layering]\nstrategy = \"budget\"\nbudget = {budget}\n",
            IMAGE.replace(
                "\"demo/tool\"",
                &format!("\"demo/tool\", \"demo/a\", \"demo/b\"{extra}")
            )
        )
    };
    let labels = |s: &builder::BuildSummary| -> Vec<String> {
        s.layers.iter().map(|l| l.contents.clone()).collect()
    };
    let run = |text: String, out: &str| {
        fs::write(f.image_file(), text).unwrap();
        lock_it(&f);
        build_to(&f, &f.root().join(out))
    };
    const TOOL: &str = "pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z";
    const CORE: &str = "pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z";
    const A: &str = "pkg://example.org/demo/a@1.0,5.11:20240101T000000Z";
    const B: &str = "pkg://example.org/demo/b@1.0,5.11:20240101T000000Z";
    const C: &str = "pkg://example.org/demo/c@1.0,5.11:20240101T000000Z";
    // tool (28 bytes) is the largest package, then b (17), a (6), core (its account files
    // are regenerated, so nothing of its own).
    let three = run(image(3, ""), "out3");
    assert_eq!(
        labels(&three),
        [
            TOOL.to_owned(),
            format!("shared: {A} {B} {CORE}"),
            "generated".into()
        ]
    );
    let four = run(image(4, ""), "out4");
    assert_eq!(
        labels(&four),
        [
            B.to_owned(),
            TOOL.into(),
            format!("shared: {A} {CORE}"),
            "generated".into()
        ]
    );
    // Room for every package: one layer each, as per-package layering.
    let many = run(image(9, ""), "out9");
    assert_eq!(many.layers.len(), 5);
    assert_eq!(many.layers[3].contents, CORE);
    // Two layers: all packages share one.
    assert_eq!(run(image(2, ""), "out2").layers.len(), 2);
    // Another small package joins the shared layer; the tool's own layer is unchanged.
    let more = run(image(3, ", \"demo/c\""), "out3c");
    assert_eq!(
        labels(&more),
        [
            TOOL.to_owned(),
            format!("shared: {A} {B} {C} {CORE}"),
            "generated".into()
        ]
    );
    assert_eq!(more.layers[0].digest, three.layers[0].digest);
    assert_ne!(more.layers[1].digest, three.layers[1].digest);
    // A rebuild gives the same layers.
    assert_eq!(run(image(3, ""), "again").manifest, three.manifest);

    for (text, message) in [
        (
            "[layering]\nstrategy = \"budget\"\n",
            "layering.budget: strategy \"budget\" needs budget = N (the number of layers)",
        ),
        (
            "[layering]\nstrategy = \"budget\"\nbudget = 1\n",
            "layering.budget: 1: expected a number of layers from 2 to 127",
        ),
        (
            "[layering]\nbudget = 4\n",
            "layering.budget: only used with strategy = \"budget\"",
        ),
    ] {
        fs::write(f.image_file(), format!("{IMAGE}\n{text}")).unwrap();
        let e = ImageFile::load(f.image_file()).unwrap_err().to_string();
        assert!(e.ends_with(message), "{e}");
    }
}

#[test]
fn a_corrupt_payload_stops_the_build_naming_package_and_path() {
    let f = fixture(&[]);
    lock_it(&f);
    // Replace the stored payload of usr/bin/tool with other (valid gzip) content.
    let repo = FileRepo::open(f.repo()).unwrap();
    let fmri = ips_bridge::Fmri::parse("pkg://example.org/demo/tool").unwrap();
    let m = repo.manifest(&repo.resolve(&fmri).unwrap()).unwrap();
    let action = m
        .actions()
        .iter()
        .find(|a| a.get("path") == Some("usr/bin/tool"))
        .unwrap();
    let (_, path, _) = repo
        .open_payload(&repo.resolve(&fmri).unwrap().fmri, action)
        .unwrap();
    let mut gz = Vec::new();
    ips_bridge::compress(&b"#!/bin/sh\necho evil\n"[..], &mut gz).unwrap();
    fs::write(&path, gz).unwrap();
    let e = build(
        &f.image_file(),
        &BuildOptions {
            output: f.root().join("out"),
            ..BuildOptions::default()
        },
    )
    .unwrap_err();
    let msg = e.to_string();
    assert_eq!(
        msg,
        "package pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z: payload of usr/bin/tool"
    );
    assert!(matches!(e, BuildError::Payload { .. }));
    // The whole chain names the stored file and which hash failed.
    let c = validator::error_chain(&e);
    assert!(
        c.contains(&format!(
            "payload for file usr/bin/tool ({})",
            path.display()
        )) && c.contains("file:sha512t_256 hash mismatch: expected"),
        "{c}"
    );
    // A failed build into a new directory leaves nothing behind: no layout, no staging.
    let leftovers: Vec<_> = fs::read_dir(f.root())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains("out"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn lock_and_build_errors_say_which_input_is_wrong_and_what_there_is() {
    // An unknown package: the image file's line, and the closest names the catalog has.
    let f = fixture(&[]);
    fs::write(
        f.image_file(),
        IMAGE.replace(
            "include = [\"demo/tool\"]",
            "include = [\n  \"system/core\",\n  \"demo/tol\",\n]",
        ),
    )
    .unwrap();
    let e = lock(&ImageFile::load(f.image_file()).unwrap()).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}:10: no package matches demo/tol (wanted by packages.include.1) in publisher(s) example.org; closest names: demo/tool",
            f.image_file().display()
        )
    );
    // A version the catalog does not have: the versions it does have.
    fs::write(
        f.image_file(),
        IMAGE.replace("\"demo/tool\"", "\"demo/tool@3\""),
    )
    .unwrap();
    let e = lock(&ImageFile::load(f.image_file()).unwrap()).unwrap_err();
    assert!(
        e.to_string().ends_with(
            "no package matches demo/tool@3 (wanted by packages.include.0) in publisher(s) example.org; the catalog has demo/tool at 2.1,5.11-2024.0:20240102T030405Z"
        ) && e.to_string().contains("image.toml:8: "),
        "{e}"
    );
    // Nothing close: say where to look.
    fs::write(
        f.image_file(),
        IMAGE.replace("\"demo/tool\"", "\"web/nginx\""),
    )
    .unwrap();
    let e = lock(&ImageFile::load(f.image_file()).unwrap()).unwrap_err();
    assert!(
        e.to_string().ends_with(
            "no similar names in the catalog (`rdctl ips list ORIGIN` shows what it has)"
        ),
        "{e}"
    );

    // A lockfile whose manifestSha1 was edited: the lockfile and the repository disagree,
    // each value named with its owner, and the fix.
    let f = fixture(&[]);
    lock_it(&f);
    let lockfile = f.root().join("image.lock.json");
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&lockfile).unwrap()).unwrap();
    let real = v["packages"][0]["manifestSha1"]
        .as_str()
        .unwrap()
        .to_owned();
    let fmri = v["packages"][0]["fmri"].as_str().unwrap().to_owned();
    let edited = "0123456789abcdef0123456789abcdef01234567";
    v["packages"][0]["manifestSha1"] = edited.into();
    fs::write(&lockfile, serde_json::to_vec(&v).unwrap()).unwrap();
    let e = build(
        &f.image_file(),
        &BuildOptions {
            output: f.root().join("out"),
            ..BuildOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "{}: package {fmri}: the lockfile says manifest sha-1 {edited}, the repository ({}) serves {real} as its catalog lists; the package was republished or the lockfile was edited: run `rdctl lock {}` to lock what the repository has now",
            lockfile.display(),
            f.repo().display(),
            f.image_file().display(),
        )
    );
    assert!(!f.root().join("out").exists());

    // A publisher the repository does not have: which ones it has, from a directory and
    // from a depot.
    let f = fixture(&[]);
    let other = IMAGE
        .replace("\"example.org\" = \"repo\"", "\"example.com\" = \"repo\"")
        .replace("\"demo/tool\"", "\"pkg://example.com/demo/tool\"");
    fs::write(f.image_file(), &other).unwrap();
    let e = lock(&ImageFile::load(f.image_file()).unwrap()).unwrap_err();
    assert!(
        validator::error_chain(&e).ends_with(&format!(
            "{}: no publisher example.com; the repository has publisher example.org",
            f.repo().display()
        )),
        "{}",
        validator::error_chain(&e)
    );
    let server =
        ips_bridge::DepotServer::start(FileRepo::open(f.repo()).unwrap(), "127.0.0.1:0").unwrap();
    fs::write(
        f.image_file(),
        other.replace(
            "\"example.com\" = \"repo\"",
            &format!("\"example.com\" = \"{}\"", server.url()),
        ),
    )
    .unwrap();
    let e = lock(&ImageFile::load(f.image_file()).unwrap()).unwrap_err();
    assert!(
        validator::error_chain(&e).ends_with(
            "the depot does not serve publisher example.com; it serves publisher example.org"
        ),
        "{}",
        validator::error_chain(&e)
    );
}

#[test]
fn dependency_and_conflict_failures() {
    // A require on a package no publisher has: lock names both sides.
    let f = fixture(&[
        "set name=pkg.fmri value=pkg:/demo/broken@1.0:20240101T000000Z\ndepend type=require fmri=demo/missing@1\n",
    ]);
    fs::write(
        f.image_file(),
        IMAGE.replace("\"demo/tool\"", "\"demo/tool\", \"demo/broken\""),
    )
    .unwrap();
    let image = ImageFile::load(f.image_file()).unwrap();
    let e = lock(&image).unwrap_err().to_string();
    assert!(
        e.contains("no package matches demo/missing@1 (wanted by pkg://example.org/demo/broken@1.0,5.11:20240101T000000Z)"),
        "{e}"
    );

    // An incorporation the set violates.
    let f = fixture(&[
        "set name=pkg.fmri value=pkg:/demo/incorp@1.0:20240101T000000Z\ndepend type=incorporate fmri=system/core@2\n",
    ]);
    fs::write(
        f.image_file(),
        IMAGE.replace("\"demo/tool\"", "\"demo/incorp\", \"demo/tool\""),
    )
    .unwrap();
    let image = ImageFile::load(f.image_file()).unwrap();
    let e = lock(&image).unwrap_err();
    // The incorporation constrains the pick for tool's require, so nothing matches.
    assert_eq!(
        validator::error_chain(&e),
        format!(
            "{}: no package matches system/core@1.0 (wanted by pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z) in publisher(s) example.org; the catalog has system/core at 1.0,5.11-2024.0:20240101T000000Z, but incorporations in the set allow only 2,5.11",
            f.image_file().display()
        )
    );

    // The checks on the resolved set: each failure names the package(s) and the action.
    let cases: &[(&str, &str)] = &[
        (
            "depend type=exclude fmri=system/core@1\n",
            "error: pkg://example.org/demo/x@1.0,5.11:20240101T000000Z: depend fmri=system/core@1 type=exclude: pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z is excluded",
        ),
        (
            "set name=pkg.obsolete value=true\n",
            "error: pkg://example.org/demo/x@1.0,5.11:20240101T000000Z: set name=pkg.obsolete value=true: the package is obsolete and delivers nothing; remove it from the set",
        ),
        (
            "set name=variant.arch value=sparc\n",
            "error: pkg://example.org/demo/x@1.0,5.11:20240101T000000Z: set name=variant.arch value=sparc: the package does not support the image's variants (variant.arch=i386 variant.opensolaris.zone=nonglobal)",
        ),
        (
            "depend type=conditional fmri=demo/absent predicate=demo/tool\n",
            "error: pkg://example.org/demo/x@1.0,5.11:20240101T000000Z: depend fmri=demo/absent predicate=demo/tool type=conditional: demo/tool is in the set, so demo/absent is not in the set",
        ),
        (
            "file usr/bin/other path=usr/bin/tool mode=0555 owner=root group=bin\n",
            "error: pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z, pkg://example.org/demo/x@1.0,5.11:20240101T000000Z: path usr/bin/tool: delivered by more than one file action (only an overlay=allow and an overlay=true file may share a path); pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z delivers `file path=usr/bin/tool mode=0555 owner=root group=bin`; pkg://example.org/demo/x@1.0,5.11:20240101T000000Z delivers `file path=usr/bin/tool mode=0555 owner=root group=bin`",
        ),
        (
            "dir path=usr mode=0755 owner=root group=bin\n",
            "error: pkg://example.org/demo/x@1.0,5.11:20240101T000000Z, pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z: path usr: directories disagree on group; pkg://example.org/demo/x@1.0,5.11:20240101T000000Z delivers `dir path=usr mode=0755 owner=root group=bin`; pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z delivers `dir path=usr mode=0755 owner=root group=sys`",
        ),
        (
            "link path=usr/bin/t target=other\n",
            "error: pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z, pkg://example.org/demo/x@1.0,5.11:20240101T000000Z: path usr/bin/t: links delivered more than once must be mediated; pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z delivers `link path=usr/bin/t target=tool`; pkg://example.org/demo/x@1.0,5.11:20240101T000000Z delivers `link path=usr/bin/t target=other`",
        ),
        (
            "file usr/bin/other path=usr/bin/tool/sub mode=0555 owner=root group=bin\n",
            "error: pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z: path usr/bin/tool: delivered as a file (`file path=usr/bin/tool mode=0555 owner=root group=bin`) but pkg://example.org/demo/x@1.0,5.11:20240101T000000Z needs it to be a directory",
        ),
    ];
    for (body, expected) in cases {
        let f = fixture(&[&format!(
            "set name=pkg.fmri value=pkg:/demo/x@1.0:20240101T000000Z\n{body}"
        )]);
        fs::write(
            f.image_file(),
            IMAGE.replace("\"demo/tool\"", "\"demo/tool\", \"demo/x\""),
        )
        .unwrap();
        let image = ImageFile::load(f.image_file()).unwrap();
        let e = lock(&image).unwrap_err();
        assert_eq!(
            validator::error_chain(&e),
            format!(
                "{}: the resolved set is not installable: the package set fails 1 check(s):\n  {expected}",
                f.image_file().display()
            ),
            "{body}"
        );
    }

    // The build checks the set again: a lockfile edited by hand to add a clashing package
    // is refused with the same message.
    let f = fixture(&[
        "set name=pkg.fmri value=pkg:/demo/x@1.0:20240101T000000Z\nfile usr/bin/other path=usr/bin/tool mode=0555 owner=root group=bin\n",
    ]);
    lock_it(&f);
    let repo = FileRepo::open(f.repo()).unwrap();
    let x = repo
        .resolve(&ips_bridge::Fmri::parse("demo/x").unwrap())
        .unwrap();
    let sha1 = ips_bridge::hash_hex(ips_bridge::HashAlg::Sha1, &repo.manifest_bytes(&x).unwrap());
    let lockfile = f.root().join("image.lock.json");
    let mut v: serde_json::Value = serde_json::from_slice(&fs::read(&lockfile).unwrap()).unwrap();
    v["packages"]
        .as_array_mut()
        .unwrap()
        .push(serde_json::json!({ "fmri": x.fmri.to_string(), "manifestSha1": sha1 }));
    fs::write(&lockfile, serde_json::to_vec(&v).unwrap()).unwrap();
    let e = build(
        &f.image_file(),
        &BuildOptions {
            output: f.root().join("out"),
            ..BuildOptions::default()
        },
    )
    .unwrap_err();
    assert_eq!(
        validator::error_chain(&e),
        format!("the package set fails 1 check(s):\n  {}", cases[4].1)
    );
    assert!(
        !f.root().join("out/index.json").exists(),
        "nothing was written"
    );
}

#[test]
fn lock_and_build_from_a_depot_server() {
    let f = fixture(&[]);
    let server =
        ips_bridge::DepotServer::start(FileRepo::open(f.repo()).unwrap(), "127.0.0.1:0").unwrap();
    let url = server.url();
    fs::write(
        f.image_file(),
        IMAGE.replace(
            "\"example.org\" = \"repo\"",
            &format!("\"example.org\" = \"{url}\""),
        ),
    )
    .unwrap();
    lock_it(&f);
    let out = f.root().join("out");
    let s = build_to(&f, &out);
    let tree = read_layer(&out, &s.layers[0].digest);
    assert_eq!(tree["usr/bin/atool"].data, b"#!/bin/sh\necho tool\n");
    assert_eq!(tree["etc/tool.conf"].uid, 300);
    // A depot origin is kept in the image's publisher configuration.
    let pkg5 = String::from_utf8(tree["var/pkg/pkg5.image"].data.clone()).unwrap();
    assert!(
        pkg5.contains(&url.trim_end_matches('/').to_string()),
        "{pkg5}"
    );
}

#[test]
fn a_payload_cache_serves_rebuilds_without_the_depot_payloads() {
    let f = fixture(&[]);
    let server =
        ips_bridge::DepotServer::start(FileRepo::open(f.repo()).unwrap(), "127.0.0.1:0").unwrap();
    fs::write(
        f.image_file(),
        IMAGE.replace(
            "\"example.org\" = \"repo\"",
            &format!("\"example.org\" = \"{}\"", server.url()),
        ),
    )
    .unwrap();
    lock_it(&f);
    let cache = f.root().join("cache");
    let opts = |out: &str| BuildOptions {
        output: f.root().join(out),
        payload_cache: Some(cache.clone()),
        ..BuildOptions::default()
    };
    let first = build(&f.image_file(), &opts("out1")).unwrap();
    // Every payload the image needs is in the cache, named by its hash.
    let cached = |name: &str| cache.join(&name[..2]).join(name);
    let m = fs::read_to_string(
        FileRepo::open(f.repo())
            .unwrap()
            .manifest_path(&ips_bridge::Fmri::parse(&first.packages[0]).unwrap())
            .unwrap(),
    )
    .unwrap();
    let names: Vec<&str> = m
        .lines()
        .filter(|l| l.starts_with("file ") && !l.contains("preserve=legacy"))
        .map(|l| l.split(' ').nth(1).unwrap())
        .collect();
    assert!(!names.is_empty());
    for n in &names {
        assert!(cached(n).is_file(), "{n} is not cached");
    }
    // The depot loses its payloads: the rebuild takes them from the cache, same image.
    fs::remove_dir_all(f.repo().join("publisher/example.org/file")).unwrap();
    let second = build(&f.image_file(), &opts("out2")).unwrap();
    assert_eq!(first.manifest, second.manifest);
    // Without the cache the same build fails: the payloads really came from it.
    let e = build(
        &f.image_file(),
        &BuildOptions {
            output: f.root().join("out3"),
            ..BuildOptions::default()
        },
    )
    .unwrap_err();
    assert!(matches!(e, BuildError::Payload { .. }), "{e}");
    // A cached payload that was tampered with is refused, naming the package and path.
    for n in &names {
        fs::write(cached(n), b"not gzip").unwrap();
    }
    let e = build(&f.image_file(), &opts("out4")).unwrap_err();
    assert!(matches!(e, BuildError::Payload { .. }), "{e}");
    drop(server);
}

/// Per-package layers through a layer cache: a rebuild copies every layer from the cache
/// (the repository's payloads are gone and not needed), gives the same image, and a change to
/// one package's inputs rebuilds only its layer; a damaged cache entry is refused and rebuilt.
#[test]
fn a_layer_cache_rebuilds_only_changed_layers_and_refuses_damaged_entries() {
    let f = fixture(&[]);
    fs::write(
        f.image_file(),
        format!("{IMAGE}\n[layering]\nstrategy = \"per-package\"\n"),
    )
    .unwrap();
    lock_it(&f);
    let cache = f.root().join("layer-cache");
    let opts = |out: &str, epoch: Option<u64>| BuildOptions {
        output: f.root().join(out),
        layer_cache: Some(cache.clone()),
        source_date_epoch: epoch,
        ..BuildOptions::default()
    };
    let cached =
        |s: &builder::BuildSummary| -> Vec<bool> { s.layers.iter().map(|l| l.cached).collect() };
    let first = build(&f.image_file(), &opts("out1", None)).unwrap();
    assert_eq!(cached(&first), [false, false, false]);
    assert!(first.warnings.is_empty(), "{:?}", first.warnings);

    // The tool package's file payloads go: a rebuild of its layer would fail. (The core
    // package's account files stay: composing the image reads them to merge users.)
    let tool = FileRepo::open(f.repo()).unwrap();
    let m = fs::read_to_string(
        tool.manifest_path(&ips_bridge::Fmri::parse(&first.packages[0]).unwrap())
            .unwrap(),
    )
    .unwrap();
    assert!(m.contains("demo/tool"), "{m}");
    let mut removed = 0;
    for hash in m
        .lines()
        .filter(|l| l.starts_with("file "))
        .map(|l| l.split(' ').nth(1).unwrap())
    {
        let p = f
            .repo()
            .join("publisher/example.org/file")
            .join(&hash[..2])
            .join(hash);
        if p.is_file() {
            fs::remove_file(p).unwrap();
            removed += 1;
        }
    }
    assert!(removed > 0);
    let second = build(&f.image_file(), &opts("out2", None)).unwrap();
    assert_eq!(cached(&second), [true, true, true]);
    assert_eq!(first.manifest, second.manifest);
    for l in &second.layers {
        let blob = ImageLayout::open(f.root().join("out2"))
            .unwrap()
            .blob_path(&l.digest);
        assert_eq!(Digest::sha256(&fs::read(blob).unwrap()), l.digest);
    }

    // Another build time changes every entry's mtime: nothing may come from the cache (and
    // without payloads the build fails, proving it tried to build).
    let e = build(&f.image_file(), &opts("out3", Some(1_000_000_000))).unwrap_err();
    assert!(matches!(e, BuildError::Payload { .. }), "{e}");

    // A damaged blob in the cache is refused (named in a warning) and the layer rebuilt,
    // which needs the payloads again.
    let f2 = fixture(&[]);
    fs::write(
        f2.image_file(),
        format!("{IMAGE}\n[layering]\nstrategy = \"per-package\"\n"),
    )
    .unwrap();
    lock_it(&f2);
    let tool_layer = &first.layers[0].digest;
    let blob = cache.join("blobs/sha256").join(tool_layer.encoded());
    let mut bytes = fs::read(&blob).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    fs::write(&blob, &bytes).unwrap();
    let opts2 = BuildOptions {
        output: f2.root().join("out"),
        layer_cache: Some(cache.clone()),
        ..BuildOptions::default()
    };
    let third = build(&f2.image_file(), &opts2).unwrap();
    assert_eq!(third.manifest, first.manifest, "same inputs, same image");
    assert_eq!(cached(&third), [false, true, true]);
    assert!(
        third
            .warnings
            .iter()
            .any(|w| w.contains("layer cache entry") && w.contains("not used")),
        "{:?}",
        third.warnings
    );
    // The entry was rewritten: the next build takes all three from the cache again.
    let fourth = build(
        &f2.image_file(),
        &BuildOptions {
            output: f2.root().join("out-again"),
            ..opts2.clone()
        },
    )
    .unwrap();
    assert_eq!(cached(&fourth), [true, true, true]);
    assert_eq!(fourth.manifest, first.manifest);
}

/// Records what a build reports.
#[derive(Debug, Default)]
struct Recorder(std::sync::Mutex<Vec<String>>);

impl builder::Progress for Recorder {
    fn layer_started(&self, index: usize, total: usize, contents: &str, bytes: u64) {
        let mut v = self.0.lock().unwrap();
        v.push(format!("start {index}/{total} {contents} {bytes}"));
    }
    fn layer_bytes(&self, n: u64) {
        let mut v = self.0.lock().unwrap();
        match v.last_mut() {
            Some(last) if last.starts_with("bytes ") => {
                let so_far: u64 = last[6..].parse().unwrap();
                *last = format!("bytes {}", so_far + n);
            }
            _ => v.push(format!("bytes {n}")),
        }
    }
    fn layer_finished(&self, index: usize, total: usize, layer: &builder::BuiltLayer) {
        let mut v = self.0.lock().unwrap();
        v.push(format!(
            "done {index}/{total} {} {}",
            layer.contents, layer.cached
        ));
    }
}

#[test]
fn progress_follows_every_layer_and_counts_its_bytes() {
    let f = fixture(&[]);
    fs::write(
        f.image_file(),
        format!("{IMAGE}\n[layering]\nstrategy = \"per-package\"\n"),
    )
    .unwrap();
    lock_it(&f);
    let rec = std::sync::Arc::new(Recorder::default());
    let opts = |out: &str| BuildOptions {
        output: f.root().join(out),
        layer_cache: Some(f.root().join("cache")),
        progress: Some(rec.clone()),
        ..BuildOptions::default()
    };
    let s = build(&f.image_file(), &opts("out1")).unwrap();
    let events = std::mem::take(&mut *rec.0.lock().unwrap());
    let tool = &s.layers[0].contents;
    assert!(
        !events[0].ends_with(" 0"),
        "the tool layer announces its payload bytes: {}",
        events[0]
    );
    let core = &s.layers[1].contents;
    assert_eq!(events.len(), 9, "{events:#?}");
    assert!(events[0].starts_with(&format!("start 0/3 {tool} ")));
    assert_eq!(events[2], format!("done 0/3 {tool} false"));
    assert!(events[3].starts_with(&format!("start 1/3 {core} ")));
    assert_eq!(events[5], format!("done 1/3 {core} false"));
    assert_eq!(events[8], "done 2/3 generated false");
    // The bytes reported are the layer's whole tar stream: headers, contents, padding.
    for (i, layer) in s.layers.iter().enumerate() {
        let n: u64 = events[3 * i + 1][6..].parse().unwrap();
        let tar_len = {
            let blob = ImageLayout::open(f.root().join("out1"))
                .unwrap()
                .blob_path(&layer.digest);
            let mut raw = Vec::new();
            flate2::read::MultiGzDecoder::new(fs::File::open(blob).unwrap())
                .read_to_end(&mut raw)
                .unwrap();
            raw.len() as u64
        };
        assert_eq!(n, tar_len, "layer {i}");
        // The announced size is the tar stream's too (headers, padding, the end blocks), so
        // a progress bar ends at its total.
        let announced: u64 = events[3 * i].rsplit(' ').next().unwrap().parse().unwrap();
        assert_eq!(announced, n, "layer {i}: announced {announced}, wrote {n}");
    }
    // From the layer cache: started and finished, no bytes built.
    build(&f.image_file(), &opts("out2")).unwrap();
    let events = std::mem::take(&mut *rec.0.lock().unwrap());
    assert_eq!(events.len(), 6, "{events:#?}");
    assert!(
        events.iter().all(|e| !e.starts_with("bytes")),
        "{events:#?}"
    );
    assert_eq!(events[5], "done 2/3 generated true");
}

#[test]
fn source_date_epoch_and_rebuilding_into_the_same_layout() {
    let f = fixture(&[]);
    lock_it(&f);
    let out = f.root().join("out");
    let first = build_to(&f, &out);
    let s = build(
        &f.image_file(),
        &BuildOptions {
            output: out.clone(),
            source_date_epoch: Some(1_000_000_000),
            ..BuildOptions::default()
        },
    )
    .unwrap();
    assert_ne!(s.manifest, first.manifest);
    let tree = read_layer(&out, &s.layers[0].digest);
    assert_eq!(tree["usr/bin"].mtime, 1_000_000_000);
    // A timestamp attribute still wins.
    assert_eq!(tree["etc/tool.conf"].mtime, 1_677_906_367);
    let cfg: serde_json::Value = serde_json::from_slice(
        &fs::read(ImageLayout::open(&out).unwrap().blob_path(&s.config)).unwrap(),
    )
    .unwrap();
    assert_eq!(cfg["created"], "2001-09-09T01:46:40Z");
    // The second build replaced the first one's tag and SBOM entries.
    let index: serde_json::Value =
        serde_json::from_slice(&fs::read(out.join("index.json")).unwrap()).unwrap();
    let digests: Vec<&str> = index["manifests"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["digest"].as_str().unwrap())
        .collect();
    assert_eq!(digests, [s.manifest.to_string(), s.sbom.to_string()]);
}

#[test]
fn mediated_links_keep_the_chosen_mediation_only() {
    let f = fixture(&[
        "set name=pkg.fmri value=pkg:/demo/py27@2.7:20240101T000000Z\nlink path=usr/bin/python target=python2.7 mediator=python mediator-version=2.7\n",
        "set name=pkg.fmri value=pkg:/demo/py39@3.9:20240101T000000Z\nlink path=usr/bin/python target=python3.9 mediator=python mediator-version=3.9\n",
    ]);
    fs::write(
        f.image_file(),
        IMAGE.replace(
            "\"demo/tool\"",
            "\"demo/tool\", \"demo/py27\", \"demo/py39\"",
        ),
    )
    .unwrap();
    lock_it(&f);
    let out = f.root().join("out");
    let s = build_to(&f, &out);
    let tree = read_layer(&out, &s.layers[0].digest);
    // pkg's choice: the highest mediator-version.
    assert_eq!(tree["usr/bin/python"].link.as_deref(), Some("python3.9"));
}

/// `demo/many`: 40 files from none to 1.5 MiB (larger than a payload reader's queue),
/// text and incompressible, published into the fixture's repository.
fn publish_many(f: &Fixture) -> Vec<String> {
    let proto = f.root().join("proto-many");
    let mut manifest = String::from(
        "set name=pkg.fmri value=pkg:/demo/many@1.0,5.11-2024.0:20240105T000000Z
set name=pkg.summary value=\"Many payloads\"
depend type=require fmri=system/core@1.0
dir path=usr/share mode=0755 owner=root group=sys
dir path=usr/share/many mode=0755 owner=root group=bin
",
    );
    let mut paths = Vec::new();
    let mut x = 0x2545_f491_4f6c_dd1du64;
    for i in 0..40u64 {
        let size = match i % 8 {
            0 => 3 << 19,
            1 => 0,
            2 => 300_000,
            _ => (i * 7919) % 40_000,
        } as usize;
        let content: Vec<u8> = if i % 5 == 4 {
            (0..size)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                })
                .collect()
        } else {
            format!("file {i} line ")
                .bytes()
                .chain((0..).flat_map(|n: u64| format!("{} ", n % 997).into_bytes()))
                .take(size)
                .collect()
        };
        let path = format!("usr/share/many/f{i:02}");
        write(&proto.join(&path), &content);
        manifest.push_str(&format!(
            "file path={path} mode=0444 owner=root group=bin\n"
        ));
        paths.push(path);
    }
    let repo = FileRepo::open(f.repo()).unwrap();
    publish(&repo, &proto, &manifest);
    paths
}

/// Builds with `threads` payload readers (and compression workers) into `out`.
fn build_threads(
    f: &Fixture,
    out: &str,
    threads: u32,
) -> Result<builder::BuildSummary, BuildError> {
    let (tx, rx) = std::sync::mpsc::channel();
    let (image, output) = (f.image_file(), f.root().join(out));
    std::thread::spawn(move || {
        let r = build(
            &image,
            &BuildOptions {
                output,
                threads,
                ..BuildOptions::default()
            },
        );
        let _ = tx.send(r);
    });
    // A build that waits forever on a payload reader fails here instead of hanging.
    rx.recv_timeout(Duration::from_secs(120))
        .expect("the build finished within two minutes")
}

#[test]
fn payload_readers_leave_the_layers_byte_identical_and_stop_on_a_bad_payload() {
    let f = fixture(&[]);
    let paths = publish_many(&f);
    for (compression, layering) in [
        ("gzip", "single"),
        ("zstd", "single"),
        ("gzip", "per-package"),
    ] {
        let text = IMAGE.replace(
            "include = [\"demo/tool\"]",
            "include = [\"demo/tool\", \"demo/many\"]",
        ) + &format!(
            "[layering]\nstrategy = \"{layering}\"\n[compression]\nalgorithm = \"{compression}\"\nlevel = 3\n"
        );
        fs::write(f.image_file(), text).unwrap();
        lock_it(&f);
        let one = build_threads(&f, &format!("{compression}-{layering}-1"), 1).unwrap();
        {
            let threads = 4;
            let n =
                build_threads(&f, &format!("{compression}-{layering}-{threads}"), threads).unwrap();
            let digests = |s: &builder::BuildSummary| {
                s.layers
                    .iter()
                    .map(|l| (l.digest.clone(), l.diff_id.clone()))
                    .collect::<Vec<_>>()
            };
            assert_eq!(
                digests(&n),
                digests(&one),
                "{compression} {layering} {threads}"
            );
            assert_eq!(n.manifest, one.manifest);
        }
        // The content is the published files'.
        if layering == "single" && compression == "gzip" {
            let layer = read_layer(&f.root().join("gzip-single-1"), &one.layers[0].digest);
            for p in &paths {
                let want = fs::read(f.root().join("proto-many").join(p)).unwrap();
                assert!(layer[p.as_str()].data == want, "{p}");
            }
        }
    }

    // A payload in the middle of the layer whose stored file holds other content, then one
    // whose stored file is gone: the build stops, naming the package and the path, with
    // any number of readers, and leaves no layout behind.
    let repo = FileRepo::open(f.repo()).unwrap();
    let fmri = ips_bridge::Fmri::parse("pkg://example.org/demo/many").unwrap();
    let resolved = repo.resolve(&fmri).unwrap();
    let m = repo.manifest(&resolved).unwrap();
    let stored = |path: &str| {
        let action = m
            .actions()
            .iter()
            .find(|a| a.get("path") == Some(path))
            .unwrap();
        repo.open_payload(&resolved.fmri, action).unwrap().1
    };
    let fmri_text = "pkg://example.org/demo/many@1.0,5.11-2024.0:20240105T000000Z";
    let bad = stored("usr/share/many/f18");
    let mut gz = Vec::new();
    ips_bridge::compress(&b"other content\n"[..], &mut gz).unwrap();
    fs::write(&bad, gz).unwrap();
    for threads in [1, 4] {
        let e = build_threads(&f, &format!("bad-{threads}"), threads).unwrap_err();
        assert_eq!(
            e.to_string(),
            format!("package {fmri_text}: payload of usr/share/many/f18")
        );
        let c = validator::error_chain(&e);
        assert!(c.contains("hash mismatch"), "{c}");
        assert!(!f.root().join(format!("bad-{threads}")).exists());
    }
    let gone = stored("usr/share/many/f08");
    fs::remove_file(&gone).unwrap();
    let e = build_threads(&f, "gone", 4).unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("package {fmri_text}: payload of usr/share/many/f08")
    );
    assert!(matches!(e, BuildError::Payload { .. }));
}

#[test]
fn directories_no_dir_action_delivers_are_made_as_pkg_makes_them() {
    // pkg's makedirs: a missing directory above the one an action needs copies the mode,
    // owner and group of the deepest directory that exists; the action's own parent gets
    // the owner and group too, with mode 0755. Dirs are installed before files and links.
    let f = fixture(
        &["set name=pkg.fmri value=pkg:/demo/deep@1.0:20240101T000000Z
dir path=var/demo/a/b mode=0700 owner=root group=bin
file usr/bin/other path=var/demo/data/cache/x mode=0644 owner=root group=bin
link path=usr/bin/more/l target=../tool
file usr/bin/other path=opt/vendor/bin/run mode=0555 owner=root group=bin
file usr/bin/other path=etc/old.d/x.conf mode=0644 owner=root group=bin preserve=legacy
"],
    );
    fs::write(
        f.image_file(),
        IMAGE.replace("\"demo/tool\"", "\"demo/tool\", \"demo/deep\""),
    )
    .unwrap();
    lock_it(&f);
    let out = f.root().join("out");
    let s = build_to(&f, &out);
    let tree = read_layer(&out, &s.layers[0].digest);
    let dir = |p: &str| {
        let e = &tree[p];
        assert_eq!(e.kind, b'5', "{p}");
        (e.mode, e.uid, e.gid)
    };
    // var/demo is 0750 demo:demo (300). var/demo/a is above a delivered dir: a copy.
    assert_eq!(dir("var/demo/a"), (0o750, 300, 300));
    assert_eq!(dir("var/demo/a/b"), (0o700, 0, 2));
    // var/demo/data is above the file's parent: a copy; the parent is 0755 demo:demo.
    assert_eq!(dir("var/demo/data"), (0o750, 300, 300));
    assert_eq!(dir("var/demo/data/cache"), (0o755, 300, 300));
    // usr/bin is root:bin (2): the link's parent takes its owner and group.
    assert_eq!(dir("usr/bin/more"), (0o755, 0, 2));
    // Under the image root (root:root 0755).
    assert_eq!(dir("opt"), (0o755, 0, 0));
    assert_eq!(dir("opt/vendor/bin"), (0o755, 0, 0));
    // A preserve=legacy file is not installed, but pkg makes its parent first (etc is
    // root:sys).
    assert!(!tree.contains_key("etc/old.d/x.conf"));
    assert_eq!(dir("etc/old.d"), (0o755, 0, 3));
}
