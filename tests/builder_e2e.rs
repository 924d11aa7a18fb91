//! `rdctl lock` and `rdctl build` end to end with real servers and clients: fixture packages
//! published with `rdctl ips publish` and served by `rdctl ips serve`, the image pushed to
//! `rdctl registry serve` (filesystem store), copied back by skopeo, validated by `rdctl
//! validate`, unpacked by umoci, its config read by skopeo; and reproducibility of `rdctl
//! build` run as a subprocess with different directories, umask, TZ and locale.

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Command;

use crate::ips_cli::Depot;
use crate::util::{Server, ok, rdctl, s, tail, tempdir, tool};

const PUBLISHER: &str = "example.org";

const CORE: &str = "set name=pkg.fmri value=pkg:/system/core@1.0,5.11-2024.0:20240101T000000Z
set name=pkg.summary value=\"Core files\"
set name=variant.arch value=i386
dir path=etc mode=0755 owner=root group=sys
dir path=usr mode=0755 owner=root group=sys
dir path=usr/bin mode=0755 owner=root group=bin
file path=etc/passwd mode=0644 owner=root group=sys preserve=true
file path=etc/shadow mode=0400 owner=root group=sys preserve=true
file path=etc/group mode=0644 owner=root group=sys preserve=true
file path=usr/bin/su mode=4555 owner=root group=sys
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
file path=usr/share/doc/demo-tool/a-rather-long-directory-name-for-the-documentation/and-a-long-file-name-that-needs-pax.txt mode=0444 owner=root group=bin
link path=usr/bin/t target=tool
link path=etc/tool.link target=../usr/bin/tool
hardlink path=usr/bin/atool target=tool
license lic/tool.txt license=MIT
";

const LONG_DOC: &str = "usr/share/doc/demo-tool/a-rather-long-directory-name-for-the-documentation/and-a-long-file-name-that-needs-pax.txt";
pub(crate) const TOOL_BIN: &str = "#!/bin/sh\necho tool\n";

/// A proto directory and the two manifests, published with `rdctl ips publish` into
/// `dir/repo`. `tool_bin` is the content of usr/bin/tool.
pub(crate) fn publish_fixture(dir: &Path, tool_bin: &str) -> PathBuf {
    let proto = dir.join("proto");
    let files: &[(&str, &str)] = &[
        (
            "etc/passwd",
            "root:x:0:0:Super-User:/root:/usr/bin/bash\ndaemon:x:1:1::/:\nbin:x:2:2::/:\nsys:x:3:3::/:\n",
        ),
        (
            "etc/shadow",
            "root:$5$abc:19000::::::\ndaemon:NP:6445::::::\nbin:NP:6445::::::\nsys:NP:6445::::::\n",
        ),
        (
            "etc/group",
            "root::0:\nother::1:root\nbin::2:root,daemon\nsys::3:root,bin,adm\n",
        ),
        ("etc/gz-only", "global zone only\n"),
        ("usr/bin/su", "#!/bin/sh\necho su\n"),
        ("usr/bin/tool", tool_bin),
        ("etc/tool.conf", "port=80\n"),
        (LONG_DOC, "documentation\n"),
        ("lic/tool.txt", "MIT License\n"),
        ("core.p5m", CORE),
        ("tool.p5m", TOOL),
    ];
    for (p, text) in files {
        let path = proto.join(p);
        fs::create_dir_all(path.parent().unwrap()).unwrap();
        fs::write(path, text).unwrap();
    }
    let repo = dir.join("repo");
    for m in ["core.p5m", "tool.p5m"] {
        ok(rdctl().args([
            "ips",
            "publish",
            "--repo",
            s(&repo),
            "--publisher",
            PUBLISHER,
            "--proto",
            s(&proto),
            s(&proto.join(m)),
        ]));
    }
    repo
}

pub(crate) fn image_file(origin: &str) -> String {
    format!(
        r#"name = "zones/demo"
tags = ["1.0"]
platform = "illumos/amd64"

[publishers]
"example.org" = "{origin}"

[packages]
include = ["demo/tool"]

[config]
entrypoint = ["/usr/bin/tool"]
cmd = ["--serve"]
env = {{ PATH = "/usr/bin" }}
working_dir = "/var/demo"
user = "demo"
stop_signal = "SIGRTMIN+3"
stop_timeout = 45
"#
    )
}

fn json(bytes: &[u8]) -> serde_json::Value {
    serde_json::from_slice(bytes)
        .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(bytes)))
}

/// The owner umoci recorded for `path` in a rootless unpack: the `user.rootlesscontainers`
/// xattr (protobuf: field 1 uid, field 2 gid; 2^32-1 or absent-xattr = the file's own
/// owner, which is root here because the unpacking user's ids map to 0).
fn rootless_owner(path: &Path) -> (u32, u32) {
    let mut buf = [0u8; 64];
    let n = match rustix::fs::lgetxattr(path, "user.rootlesscontainers", &mut buf[..]) {
        Ok(n) => n,
        Err(rustix::io::Errno::NODATA) => return (0, 0),
        Err(e) => panic!("{}: getxattr: {e}", path.display()),
    };
    let (mut uid, mut gid) = (0u32, 0u32);
    let mut b = &buf[..n];
    while let Some((&key, rest)) = b.split_first() {
        let mut value: u64 = 0;
        let mut shift = 0;
        let mut used = 0;
        for &byte in rest {
            value |= u64::from(byte & 0x7f) << shift;
            shift += 7;
            used += 1;
            if byte & 0x80 == 0 {
                break;
            }
        }
        assert_eq!(
            key & 7,
            0,
            "{}: unexpected protobuf wire type",
            path.display()
        );
        let v = if value == u64::from(u32::MAX) {
            0
        } else {
            value as u32
        };
        match key >> 3 {
            1 => uid = v,
            2 => gid = v,
            other => panic!("{}: unexpected field {other}", path.display()),
        }
        b = &rest[used..];
    }
    (uid, gid)
}

/// One entry of an unpacked tree: type, permission bits, owner, and link target or content.
#[derive(Debug, PartialEq, Eq)]
struct Found {
    kind: char,
    mode: u32,
    owner: (u32, u32),
    what: String,
}

/// Everything under `root` except `var/pkg` (checked separately), by relative path.
fn walk(root: &Path) -> BTreeMap<String, Found> {
    let mut out = BTreeMap::new();
    let mut stack = vec![root.to_owned()];
    while let Some(dir) = stack.pop() {
        for e in fs::read_dir(&dir).unwrap() {
            let path = e.unwrap().path();
            let rel = path
                .strip_prefix(root)
                .unwrap()
                .to_str()
                .unwrap()
                .to_owned();
            if rel == "var/pkg" {
                continue;
            }
            let md = fs::symlink_metadata(&path).unwrap();
            let (kind, what) = if md.is_dir() {
                stack.push(path.clone());
                ('d', String::new())
            } else if md.file_type().is_symlink() {
                ('l', fs::read_link(&path).unwrap().display().to_string())
            } else {
                ('f', fs::read_to_string(&path).unwrap())
            };
            out.insert(
                rel,
                Found {
                    kind,
                    mode: md.permissions().mode() & 0o7777,
                    owner: if kind == 'l' {
                        (0, 0)
                    } else {
                        rootless_owner(&path)
                    },
                    what,
                },
            );
        }
    }
    out
}

#[test]
fn build_push_validate_unpack_and_inspect() {
    let tmp = tempdir();
    let dir = tmp.path();
    let repo = publish_fixture(dir, TOOL_BIN);
    let depot = Depot::start(&repo, dir);
    let registry = Server::start(&dir.join("registry-data"), &[]);

    let work = dir.join("work");
    fs::create_dir_all(&work).unwrap();
    let image = work.join("image.toml");
    fs::write(&image, image_file(&depot.url)).unwrap();
    let locked = ok(rdctl().args(["lock", s(&image)]));
    assert_eq!(
        String::from_utf8_lossy(&locked.stdout),
        "pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z\n\
         pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z\n"
    );
    let lockfile = json(&fs::read(work.join("image.lock.json")).unwrap());

    let target = format!("{}/zones/demo", registry.host());
    let out = work.join("out");
    let built = rdctl()
        .args([
            "build",
            s(&image),
            "--output",
            s(&out),
            "--push",
            &target,
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        built.status.success(),
        "rdctl build failed:\n{}\ndepot:\n{}\nregistry:\n{}",
        tail(&built.stderr),
        depot.log(),
        registry.log_tail()
    );
    // Not a terminal: progress is a plain line per layer and one for the push, on stderr.
    let progress = String::from_utf8_lossy(&built.stderr);
    assert!(
        progress
            .lines()
            .any(|l| l.starts_with("layer 1/") && l.contains(" bytes")),
        "{progress}"
    );
    assert!(
        progress.contains(&format!("pushing to {target}")),
        "{progress}"
    );
    let summary = json(&built.stdout);
    let manifest = summary["manifest"].as_str().unwrap().to_owned();
    assert_eq!(
        summary["pushed"],
        serde_json::json!([format!("{target}:1.0")])
    );
    // The tag names the image manifest itself, as skopeo, crane and oras push it: no
    // `--override-os` is needed to read it on a Linux machine.
    let (status, headers, _) = crate::registry_e2e::http(
        registry.addr,
        "HEAD",
        "/v2/zones/demo/manifests/1.0",
        &[("accept", "application/vnd.oci.image.manifest.v1+json")],
        b"",
    );
    assert_eq!(status, 200);
    assert_eq!(
        crate::registry_e2e::header(&headers, "docker-content-digest"),
        manifest,
        "the registry's tag names the built manifest"
    );
    assert_eq!(
        crate::registry_e2e::header(&headers, "content-type"),
        "application/vnd.oci.image.manifest.v1+json"
    );
    // The SBOM travelled with the push: the registry's referrers API lists it.
    let (status, _, body) = crate::registry_e2e::http(
        registry.addr,
        "GET",
        &format!("/v2/zones/demo/referrers/{manifest}"),
        &[],
        b"",
    );
    assert_eq!(status, 200);
    let referrers = json(&body);
    assert_eq!(
        referrers["manifests"][0]["digest"], summary["sbom"],
        "{referrers:#}"
    );

    // skopeo (a real client) copies the pushed image back; our validator checks it deeply.
    let pulled = dir.join("pulled");
    ok(tool("skopeo").args([
        "copy",
        "--quiet",
        "--src-tls-verify=false",
        &format!("docker://{target}:1.0"),
        &format!("oci:{}:1.0", s(&pulled)),
    ]));
    for layout in [&out, &pulled] {
        let v = rdctl()
            .args(["validate", &format!("{}:1.0", s(layout)), "--json"])
            .output()
            .unwrap();
        let report = json(&v.stdout);
        assert_eq!(v.status.code(), Some(0), "{}: {report:#}", layout.display());
        assert!(
            report["violations"].as_array().is_none_or(Vec::is_empty),
            "{report:#}"
        );
    }
    let pulled_index = json(&fs::read(pulled.join("index.json")).unwrap());
    assert_eq!(
        pulled_index["manifests"][0]["digest"], manifest,
        "skopeo got the manifest we pushed, byte for byte"
    );

    // skopeo reads the config from the registry (no --override-os: the tag is the manifest):
    // StopSignal and the stop timeout survive.
    let cfg = ok(tool("skopeo").args([
        "inspect",
        "--config",
        "--tls-verify=false",
        &format!("docker://{target}:1.0"),
    ]));
    let cfg = json(&cfg.stdout);
    assert_eq!(cfg["os"], "illumos");
    assert_eq!(cfg["architecture"], "amd64");
    assert_eq!(cfg["config"]["StopSignal"], "SIGRTMIN+3");
    assert_eq!(
        cfg["config"]["Labels"]["org.reddwarf.image.stop-timeout"],
        "45"
    );
    assert_eq!(cfg["config"]["User"], "demo");
    assert_eq!(
        cfg["config"]["Entrypoint"],
        serde_json::json!(["/usr/bin/tool"])
    );
    assert_eq!(cfg["config"]["WorkingDir"], "/var/demo");
    assert_eq!(cfg["created"], "2024-01-02T03:04:05Z");

    // umoci unpacks the root file system (plain `umoci unpack` refuses os=illumos).
    let root = dir.join("root");
    ok(tool("umoci-0.6").args([
        "raw",
        "unpack",
        "--rootless",
        "--image",
        &format!("{}:1.0", s(&pulled)),
        s(&root),
    ]));
    let tree = walk(&root);
    let passwd = "root:x:0:0:Super-User:/root:/usr/bin/bash\ndaemon:x:1:1::/:\nbin:x:2:2::/:\nsys:x:3:3::/:\ndemo:x:300:300:Demo user:/var/demo:\n";
    let group = "root::0:\nother::1:root\nbin::2:root,daemon\nsys::3:root,bin,adm\ndemo::300:\n";
    let f = |kind, mode, owner, what: &str| Found {
        kind,
        mode,
        owner,
        what: what.to_owned(),
    };
    let mut expected: BTreeMap<String, Found> = BTreeMap::new();
    for (path, found) in [
        ("etc", f('d', 0o755, (0, 3), "")),
        ("etc/passwd", f('f', 0o644, (0, 3), passwd)),
        ("etc/group", f('f', 0o644, (0, 3), group)),
        ("etc/tool.conf", f('f', 0o640, (300, 300), "port=80\n")),
        ("etc/tool.link", f('l', 0o777, (0, 0), "../usr/bin/tool")),
        ("usr", f('d', 0o755, (0, 3), "")),
        ("usr/bin", f('d', 0o755, (0, 2), "")),
        ("usr/bin/su", f('f', 0o4555, (0, 3), "#!/bin/sh\necho su\n")),
        ("usr/bin/tool", f('f', 0o555, (0, 2), TOOL_BIN)),
        ("usr/bin/atool", f('f', 0o555, (0, 2), TOOL_BIN)),
        ("usr/bin/t", f('l', 0o777, (0, 0), "tool")),
        ("usr/share", f('d', 0o755, (0, 3), "")),
        ("usr/share/doc", f('d', 0o755, (0, 3), "")),
        ("usr/share/doc/demo-tool", f('d', 0o755, (0, 3), "")),
        (
            "usr/share/doc/demo-tool/a-rather-long-directory-name-for-the-documentation",
            f('d', 0o755, (0, 3), ""),
        ),
        (LONG_DOC, f('f', 0o444, (0, 2), "documentation\n")),
        ("var", f('d', 0o755, (0, 3), "")),
        ("var/demo", f('d', 0o750, (300, 300), "")),
    ] {
        expected.insert(path.to_owned(), found);
    }
    // etc/shadow: root-only, the demo user appended with the build's day number.
    let shadow = &tree["etc/shadow"];
    assert_eq!(
        (shadow.kind, shadow.mode, shadow.owner),
        ('f', 0o400, (0, 3))
    );
    assert!(
        shadow.what.starts_with("root:$5$abc:19000::::::\n") && shadow.what.contains("\ndemo:"),
        "{}",
        shadow.what
    );
    let mut rest: BTreeMap<String, Found> = tree;
    rest.remove("etc/shadow");
    // The global-zone-only file is not installed in a zone image.
    assert_eq!(rest, expected);
    // The hardlink is one inode with its target.
    let (a, b) = (
        fs::metadata(root.join("usr/bin/tool")).unwrap(),
        fs::metadata(root.join("usr/bin/atool")).unwrap(),
    );
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));

    // var/pkg: the installed catalog lists the locked packages with their manifest SHA-1s,
    // the manifests are the published bytes, the license is installed, and the depot origin
    // is the publisher's.
    let pkg = root.join("var/pkg");
    let installed = json(&fs::read(pkg.join("state/installed/catalog.base.C")).unwrap());
    let mut from_catalog = Vec::new();
    for (stem, versions) in installed[PUBLISHER].as_object().unwrap() {
        for v in versions.as_array().unwrap() {
            from_catalog.push(serde_json::json!({
                "fmri": format!("pkg://{PUBLISHER}/{stem}@{}", v["version"].as_str().unwrap()),
                "manifestSha1": v["signature-sha-1"],
            }));
        }
    }
    assert_eq!(serde_json::Value::Array(from_catalog), lockfile["packages"]);
    for (stem, version) in [
        ("demo%2Ftool", "2.1%2C5.11-2024.0%3A20240102T030405Z"),
        ("system%2Fcore", "1.0%2C5.11-2024.0%3A20240101T000000Z"),
    ] {
        let published = repo
            .join("publisher")
            .join(PUBLISHER)
            .join("pkg")
            .join(stem)
            .join(version);
        let installed = pkg
            .join("publisher")
            .join(PUBLISHER)
            .join("pkg")
            .join(stem)
            .join(version);
        assert_eq!(
            fs::read(&installed).unwrap(),
            fs::read(&published).unwrap(),
            "{}",
            installed.display()
        );
    }
    assert_eq!(
        fs::read_to_string(pkg.join("license/demo%2Ftool/license.MIT")).unwrap(),
        "MIT License\n"
    );
    let pkg5 = fs::read_to_string(pkg.join("pkg5.image")).unwrap();
    for needle in [
        "variant.opensolaris.zone = nonglobal".to_owned(),
        format!("origins = ['{}']", depot.url),
    ] {
        assert!(pkg5.contains(&needle), "{needle:?} not in\n{pkg5}");
    }
}

/// `rdctl build IMAGE --output OUT --json` run through `sh` with the given umask and
/// environment; returns the manifest digest.
fn build_in(image: &Path, out: &Path, umask: &str, env: &[(&str, &str)]) -> String {
    let mut cmd = Command::new("sh");
    cmd.args([
        "-c",
        &format!("umask {umask} && exec \"$@\""),
        "sh",
        env!("CARGO_BIN_EXE_rdctl"),
        "build",
        s(image),
        "--output",
        s(out),
        "--json",
    ])
    .env_remove("SOURCE_DATE_EPOCH")
    .envs(env.iter().copied());
    let out = ok(&mut cmd);
    json(&out.stdout)["manifest"].as_str().unwrap().to_owned()
}

#[test]
fn builds_anywhere_give_the_same_digest_and_a_changed_payload_another() {
    let tmp = tempdir();
    let dir = tmp.path();
    let src = dir.join("src");
    publish_fixture(&src, TOOL_BIN);
    let changed = dir.join("changed");
    publish_fixture(&changed, "#!/bin/sh\necho tool, changed\n");

    // One image file and lockfile, copied with the repository into two directories at
    // different depths; the image file names the repository relative to itself.
    fs::write(src.join("image.toml"), image_file("repo")).unwrap();
    ok(rdctl().args(["lock", s(&src.join("image.toml"))]));
    let a = dir.join("a");
    let b = dir.join("b/deeper/still");
    for d in [&a, &b] {
        fs::create_dir_all(d.parent().unwrap()).unwrap();
        ok(Command::new("cp").args(["-a", s(&src), s(d)]));
    }
    let da = build_in(
        &a.join("image.toml"),
        &a.join("out"),
        "022",
        &[("TZ", "UTC"), ("LC_ALL", "C"), ("LANG", "C")],
    );
    let db = build_in(
        &b.join("image.toml"),
        &dir.join("elsewhere/out"),
        "077",
        &[
            ("TZ", "Pacific/Chatham"),
            ("LC_ALL", "tr_TR.UTF-8"),
            ("LANG", "de_DE.UTF-8"),
        ],
    );
    assert_eq!(da, db, "same image file and lockfile, same manifest digest");
    let layout_a = fs::read(a.join("out/index.json")).unwrap();
    let layout_b = fs::read(dir.join("elsewhere/out/index.json")).unwrap();
    assert_eq!(layout_a, layout_b, "index.json is the same too");

    // The same image file over a repository where one payload differs: another digest.
    fs::write(changed.join("image.toml"), image_file("repo")).unwrap();
    ok(rdctl().args(["lock", s(&changed.join("image.toml"))]));
    let dc = build_in(
        &changed.join("image.toml"),
        &changed.join("out"),
        "022",
        &[("TZ", "UTC"), ("LC_ALL", "C")],
    );
    assert_ne!(da, dc, "a changed payload changes the manifest digest");
}

/// One image identity (issue #15): the same build reaches the registry as one digest whoever
/// pushes it (`rdctl build --push`, `rdctl push`, skopeo from the layout, crane and oras), the
/// tag names the image manifest, and a zone with `pull_policy = "Always"` stays unchanged
/// after each re-push of the same content.
#[test]
fn one_identity_whoever_pushes_the_layout() {
    let tmp = tempdir();
    let dir = tmp.path();
    let repo = publish_fixture(dir, TOOL_BIN);
    let depot = Depot::start(&repo, dir);
    let registry = Server::start(&dir.join("registry-data"), &[]);
    let host = registry.host();
    let work = dir.join("work");
    fs::create_dir_all(&work).unwrap();
    let image = work.join("image.toml");
    fs::write(&image, image_file(&depot.url)).unwrap();
    ok(rdctl().args(["lock", s(&image)]));

    let layout = work.join("out");
    let built = ok(rdctl().args([
        "build",
        s(&image),
        "--output",
        s(&layout),
        "--push",
        &format!("{host}/id/build"),
        "--quiet",
        "--json",
    ]));
    let manifest = json(&built.stdout)["manifest"].as_str().unwrap().to_owned();
    let tagged = |repo: &str| {
        let (status, headers, _) = crate::registry_e2e::http(
            registry.addr,
            "HEAD",
            &format!("/v2/{repo}/manifests/1.0"),
            &[(
                "accept",
                "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json",
            )],
            b"",
        );
        assert_eq!(status, 200, "{repo}:1.0");
        (
            crate::registry_e2e::header(&headers, "docker-content-digest").to_owned(),
            crate::registry_e2e::header(&headers, "content-type").to_owned(),
        )
    };
    let manifest_type = "application/vnd.oci.image.manifest.v1+json".to_owned();
    assert_eq!(
        tagged("id/build"),
        (manifest.clone(), manifest_type.clone())
    );

    // `--push HOST` alone: the repository is the image file's `name`, with the same identity.
    let by_name = ok(rdctl().args(["build", s(&image), "--push", &host, "--quiet", "--json"]));
    assert_eq!(
        json(&by_name.stdout)["pushed"],
        serde_json::json!([format!("{host}/zones/demo:1.0")])
    );
    assert_eq!(
        tagged("zones/demo"),
        (manifest.clone(), manifest_type.clone())
    );
    // Without a `name`, the error says what to give.
    let nameless = work.join("nameless.toml");
    fs::write(
        &nameless,
        image_file(&depot.url).replace("name = \"zones/demo\"\n", ""),
    )
    .unwrap();
    let out = rdctl()
        .args(["build", s(&nameless), "--push", &host])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "{host} is a registry host without a repository: give one (--push {host}/site/web) or set `name` in"
        )),
        "{err}"
    );

    let src = format!("{}:1.0", s(&layout));
    ok(rdctl().args(["push", &src, &format!("{host}/id/push:1.0")]));
    ok(tool("skopeo").args([
        "copy",
        "--quiet",
        "--dest-tls-verify=false",
        &format!("oci:{src}"),
        &format!("docker://{host}/id/skopeo:1.0"),
    ]));
    ok(tool("oras").args([
        "cp",
        "--to-plain-http",
        "--from-oci-layout",
        &src,
        &format!("{host}/id/oras:1.0"),
    ]));
    ok(tool("crane").args([
        "copy",
        "--insecure",
        &format!("{host}/id/push:1.0"),
        &format!("{host}/id/crane:1.0"),
    ]));
    for repo in ["id/push", "id/skopeo", "id/oras", "id/crane"] {
        assert_eq!(
            tagged(repo),
            (manifest.clone(), manifest_type.clone()),
            "{repo}: a second identity for the same layout"
        );
    }

    // A zone with `Always` is provisioned once, then unchanged after each re-push of the
    // same content, whichever tool pushed it.
    let node = crate::worker_e2e::Node::new(&dir.join("node"));
    node.zone("web", &format!("{host}/id/push:1.0"));
    let pass = |what: &str| {
        let out = node.run_once();
        assert!(
            out.status.success(),
            "{what}: worker run failed:\n{}",
            tail(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    assert!(pass("first pass").contains("provisioned: web;"));
    ok(rdctl().args([
        "build",
        s(&image),
        "--push",
        &format!("{host}/id/push"),
        "--quiet",
    ]));
    assert!(
        pass("after build --push").contains("unchanged: web;"),
        "a re-push by rdctl build --push re-provisioned the zone"
    );
    ok(tool("skopeo").args([
        "copy",
        "--quiet",
        "--dest-tls-verify=false",
        &format!("oci:{src}"),
        &format!("docker://{host}/id/push:1.0"),
    ]));
    assert!(
        pass("after skopeo copy").contains("unchanged: web;"),
        "a re-push by skopeo re-provisioned the zone"
    );
}
