//! `rdctl worker run --once` end to end, with the real binaries only: images built by `rdctl
//! build` and by umoci 0.6 (pushed with skopeo), served by `rdctl registry serve`, pulled
//! into `dir` zones. The zone roots must equal `umoci raw unpack` of the same images (paths,
//! types, modes, link targets, hardlink groups, contents, mtimes; owners against umoci's
//! non-rootless unpack when the test runs as root), and the zone description carries the
//! image's StopSignal and stop timeout.

use std::collections::BTreeMap;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use sha2::{Digest as _, Sha256};

use crate::registry_e2e::http;
use crate::util::{Server, ok, rdctl, s, tail, tempdir, tool};

/// A worker node: worker.toml, a zones directory, state and zone roots under one directory.
pub struct Node {
    dir: PathBuf,
}

impl Node {
    /// A node in `dir` (created), `dir` provisioner, os_version fixed for the images here.
    pub fn new(dir: &Path) -> Node {
        Self::with_config(dir, "")
    }

    /// As [`Node::new`], with `extra` (TOML tables, e.g. `[layer_store]`) ending worker.toml.
    pub fn with_config(dir: &Path, extra: &str) -> Node {
        std::fs::create_dir_all(dir.join("zones")).unwrap();
        std::fs::write(
            dir.join("worker.toml"),
            format!(
                "zones_dir = \"zones\"\nstate_dir = \"state\"\nworker_id = \"e2e\"\n\
                 os_version = \"e2e-build\"\nbackoff_initial_secs = 60\n\
                 [provisioner]\nkind = \"dir\"\nbase = \"roots\"\n{extra}"
            ),
        )
        .unwrap();
        Node {
            dir: dir.to_owned(),
        }
    }

    /// The node's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The worker.toml path.
    pub fn config(&self) -> PathBuf {
        self.dir.join("worker.toml")
    }

    /// Writes a zone manifest (pull policy Always, no stop timeout: the image's applies).
    pub fn zone(&self, name: &str, image: &str) {
        std::fs::write(
            self.dir.join("zones").join(format!("{name}.toml")),
            format!("name = \"{name}\"\nimage = \"{image}\"\npull_policy = \"Always\"\n"),
        )
        .unwrap();
    }

    /// The zone's root directory.
    pub fn root(&self, zone: &str) -> PathBuf {
        self.dir.join("roots").join(zone).join("root")
    }

    /// The zonepath (root, zone.json, zonecfg text).
    pub fn zonepath(&self, zone: &str) -> PathBuf {
        self.dir.join("roots").join(zone)
    }

    /// `rdctl worker run --once` (output returned whatever the exit status).
    pub fn run_once(&self) -> Output {
        rdctl()
            .args(["worker", "run", "--once", "--config", s(&self.config())])
            .env("RDCTL_LOG", "info")
            .env("NO_COLOR", "1")
            .output()
            .expect("run rdctl worker run")
    }

    /// `rdctl worker status --json`, by zone name.
    pub fn status(&self) -> BTreeMap<String, serde_json::Value> {
        let out = ok(rdctl().args(["worker", "status", "--json", "--config", s(&self.config())]));
        let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let rows = doc["zones"].as_array().cloned().unwrap_or_default();
        rows.into_iter()
            .map(|r| (r["zone"].as_str().unwrap().to_owned(), r))
            .collect()
    }

    /// The zone's description (zone.json).
    pub fn description(&self, zone: &str) -> serde_json::Value {
        serde_json::from_slice(&std::fs::read(self.zonepath(zone).join("zone.json")).unwrap())
            .unwrap()
    }
}

/// One file system entry as both unpackers must leave it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Entry {
    kind: &'static str,
    mode: u32,
    owner: (u32, u32),
    target: Option<PathBuf>,
    sha256: Option<String>,
    mtime: i64,
}

/// Every entry under `root` (relative paths, the root itself as ""), plus the hardlink groups
/// (paths sharing an inode, for files with more than one link).
fn tree(root: &Path) -> (BTreeMap<PathBuf, Entry>, Vec<Vec<PathBuf>>) {
    let mut out = BTreeMap::new();
    let mut inodes: BTreeMap<u64, Vec<PathBuf>> = BTreeMap::new();
    let mut stack = vec![PathBuf::new()];
    while let Some(rel) = stack.pop() {
        let p = root.join(&rel);
        let m = std::fs::symlink_metadata(&p).unwrap();
        let ft = m.file_type();
        let (kind, target, sha256) = if ft.is_dir() {
            for e in std::fs::read_dir(&p).unwrap() {
                stack.push(rel.join(e.unwrap().file_name()));
            }
            ("dir", None, None)
        } else if ft.is_symlink() {
            ("symlink", Some(std::fs::read_link(&p).unwrap()), None)
        } else if ft.is_file() {
            if m.nlink() > 1 {
                inodes.entry(m.ino()).or_default().push(rel.clone());
            }
            let bytes = std::fs::read(&p).unwrap();
            ("file", None, Some(hex(&Sha256::digest(&bytes))))
        } else {
            ("other", None, None)
        };
        out.insert(
            rel,
            Entry {
                kind,
                mode: m.permissions().mode() & 0o7777,
                owner: (m.uid(), m.gid()),
                target,
                sha256,
                mtime: m.mtime(),
            },
        );
    }
    let mut groups: Vec<Vec<PathBuf>> = inodes
        .into_values()
        .map(|mut v| {
            v.sort();
            v
        })
        .collect();
    groups.sort();
    (out, groups)
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Where the provisioner puts the entrypoint's SMF manifest inside the root (the one path
/// a zone root has beyond its image).
const ENTRYPOINT_MANIFEST: &str = "var/svc/manifest/site/rdctl-entrypoint.xml";

/// Compares two trees entry by entry; owners only when `owners`. Symlink modes and mtimes
/// are not compared (Linux has no lchmod, and umoci does not set symlink times). The
/// provisioner's SMF manifest, and the directories made for it, are the only extra paths
/// allowed in ours; the mtime of the image directory they were made in is not compared.
pub(crate) fn assert_same_tree(what: &str, ours: &Path, theirs: &Path, owners: bool) {
    let (mut a, ga) = tree(ours);
    let (mut b, gb) = tree(theirs);
    let smf = Path::new(ENTRYPOINT_MANIFEST);
    assert!(
        a.contains_key(smf),
        "{what}: no {ENTRYPOINT_MANIFEST} in the zone root"
    );
    for p in smf.ancestors().filter(|p| !p.as_os_str().is_empty()) {
        if b.contains_key(p) {
            a.get_mut(p).unwrap().mtime = 0;
            b.get_mut(p).unwrap().mtime = 0;
            break;
        }
        a.remove(p).unwrap();
    }
    // The root's own mtime: rdctl build's layers have no entry for it, and then umoci sets
    // the epoch while the worker leaves the time it made the directory.
    a.get_mut(Path::new("")).unwrap().mtime = 0;
    b.get_mut(Path::new("")).unwrap().mtime = 0;
    let paths_a: Vec<&PathBuf> = a.keys().collect();
    let paths_b: Vec<&PathBuf> = b.keys().collect();
    assert_eq!(paths_a, paths_b, "{what}: the same paths");
    for (p, ea) in &a {
        let eb = &b[p];
        let norm = |e: &Entry| {
            let mut e = e.clone();
            if !owners {
                e.owner = (0, 0);
                if !running_as_root() {
                    // Without root the worker drops setuid/setgid (they would apply to the
                    // wrong owner); umoci --rootless keeps them.
                    e.mode &= !0o6000;
                }
            }
            if e.kind == "symlink" {
                e.mode = 0;
                e.mtime = 0;
            }
            e
        };
        assert_eq!(
            norm(ea),
            norm(eb),
            "{what}: {} (ours vs umoci)",
            p.display()
        );
    }
    assert_eq!(ga, gb, "{what}: hardlink groups");
}

/// An IPS repository published with `rdctl ips publish`, an image file and its lockfile.
pub(crate) fn ips_image(dir: &Path) -> PathBuf {
    let proto = dir.join("proto");
    // A real ELF header (64-bit x86-64 shared object, no sections): `rdctl ips publish`, like
    // pkgsend, refuses a file that starts like ELF and cannot be read as one.
    let mut elf = vec![0x7f, b'E', b'L', b'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0];
    for (v, width) in [(3u64, 2), (0x3e, 2), (1, 4), (0, 8), (0, 8), (0, 8), (0, 4)] {
        elf.extend_from_slice(&v.to_le_bytes()[..width]);
    }
    for v in [64u16, 0, 0, 64, 0, 0] {
        elf.extend_from_slice(&v.to_le_bytes());
    }
    let files: [(&str, &[u8]); 5] = [
        (
            "etc/passwd",
            b"root:x:0:0::/root:/bin/sh\ndemo:x:300:300::/var/demo:/bin/sh\n",
        ),
        ("etc/group", b"root::0:\nsys::3:\nbin::2:\ndemo::300:\n"),
        ("usr/bin/tool", b"#!/bin/sh\necho tool\n"),
        ("usr/lib/libdemo.so.1", &elf),
        ("etc/tool.conf", b"port=80\n"),
    ];
    for (p, b) in files {
        std::fs::create_dir_all(proto.join(p).parent().unwrap()).unwrap();
        std::fs::write(proto.join(p), b).unwrap();
    }
    let core = "set name=pkg.fmri value=pkg:/system/core@1.0,5.11-2024.0:20240101T000000Z
set name=pkg.summary value=\"Core files\"
dir path=etc mode=0755 owner=root group=sys
dir path=usr mode=0755 owner=root group=sys
dir path=usr/bin mode=0755 owner=root group=bin
dir path=usr/lib mode=0755 owner=root group=bin
file path=etc/passwd mode=0644 owner=root group=sys preserve=true
file path=etc/group mode=0644 owner=root group=sys preserve=true
link path=bin target=./usr/bin
";
    let tool_pkg = "set name=pkg.fmri value=pkg:/demo/tool@2.1,5.11-2024.0:20240102T030405Z
set name=pkg.summary value=\"A demo tool\"
depend type=require fmri=system/core@1.0
group groupname=demo gid=300
user username=demo uid=300 group=demo home-dir=/var/demo
dir path=var mode=0755 owner=root group=sys
dir path=var/demo mode=0750 owner=demo group=demo
file path=usr/bin/tool mode=4555 owner=root group=bin
file path=usr/lib/libdemo.so.1 mode=0755 owner=root group=bin
file path=etc/tool.conf mode=0640 owner=demo group=demo preserve=true
link path=usr/bin/t target=tool
link path=usr/lib/libdemo.so target=/usr/lib/libdemo.so.1
hardlink path=usr/bin/atool target=tool
";
    for (name, text) in [("core.p5m", core), ("tool.p5m", tool_pkg)] {
        std::fs::write(dir.join(name), text).unwrap();
        ok(rdctl().args([
            "ips",
            "publish",
            "--repo",
            s(&dir.join("repo")),
            "--publisher",
            "example.org",
            "--proto",
            s(&proto),
            s(&dir.join(name)),
        ]));
    }
    let image = dir.join("image.toml");
    std::fs::write(
        &image,
        "tags = [\"1.0\"]\nplatform = \"illumos/amd64\"\n\
         [publishers]\n\"example.org\" = \"repo\"\n\
         [packages]\ninclude = [\"demo/tool\"]\n\
         [config]\nentrypoint = [\"/usr/bin/tool\"]\nuser = \"demo\"\n\
         stop_signal = \"SIGUSR2\"\nstop_timeout = 45\n",
    )
    .unwrap();
    ok(rdctl().arg("lock").arg(&image));
    image
}

/// A plain tar of `root`'s contents (GNU tar, sorted, numeric owners kept).
fn gnu_tar(root: &Path, out: &Path) {
    ok(Command::new("tar")
        .args([
            "--sort=name",
            "--numeric-owner",
            "--mtime=2024-05-06 07:08:09Z",
            "-cf",
        ])
        .arg(out)
        .arg("-C")
        .arg(root)
        .arg("."));
}

/// An illumos image made with umoci 0.6 from two GNU tar layers: the second replaces a
/// hardlinked file, whites out a file and makes a directory opaque.
pub(crate) fn umoci_image(dir: &Path) -> PathBuf {
    let img = dir.join("umoci-img");
    let umoci = |args: &[&str]| ok(tool("umoci-0.6").args(args));
    umoci(&["init", "--layout", s(&img)]);
    umoci(&["new", "--image", &format!("{}:base", s(&img))]);
    umoci(&[
        "config",
        "--image",
        &format!("{}:base", s(&img)),
        "--tag",
        "cfg",
        "--os",
        "illumos",
        "--config.cmd",
        "/usr/bin/app",
        "--config.stopsignal",
        "SIGPWR",
    ]);
    let l1 = dir.join("l1");
    let w = |root: &Path, p: &str, b: &[u8], mode: u32| {
        let f = root.join(p);
        std::fs::create_dir_all(f.parent().unwrap()).unwrap();
        std::fs::write(&f, b).unwrap();
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(mode)).unwrap();
    };
    w(&l1, "etc/motd", b"lower motd\n", 0o644);
    w(&l1, "etc/old/a", b"a\n", 0o600);
    w(&l1, "etc/old/b", b"b\n", 0o644);
    w(&l1, "usr/bin/app", b"#!/bin/sh\necho v1\n", 0o755);
    std::fs::hard_link(l1.join("usr/bin/app"), l1.join("usr/bin/app2")).unwrap();
    std::os::unix::fs::symlink("usr/bin", l1.join("bin")).unwrap();
    std::os::unix::fs::symlink("/usr/share/zoneinfo/UTC", l1.join("etc/localtime")).unwrap();
    std::fs::create_dir_all(l1.join("var/secret")).unwrap();
    std::fs::set_permissions(
        l1.join("var/secret"),
        std::fs::Permissions::from_mode(0o700),
    )
    .unwrap();
    std::os::unix::fs::chown(l1.join("etc/old/a"), Some(123), Some(45)).unwrap();
    let l2 = dir.join("l2");
    w(&l2, "etc/.wh.motd", b"", 0o644);
    w(&l2, "etc/old/.wh..wh..opq", b"", 0o644);
    w(&l2, "etc/old/c", b"c\n", 0o644);
    w(&l2, "usr/bin/app", b"#!/bin/sh\necho v2\n", 0o755);
    w(&l2, "etc/release", b"umoci\n", 0o444);
    let mut from = "cfg".to_owned();
    for (n, root) in [("l1", &l1), ("l2", &l2)] {
        let t = dir.join(format!("{n}.tar"));
        gnu_tar(root, &t);
        umoci(&[
            "raw",
            "add-layer",
            "--image",
            &format!("{}:{from}", s(&img)),
            "--tag",
            n,
            s(&t),
        ]);
        from = n.to_owned();
    }
    img
}

/// `umoci raw unpack` of `image` (layout:tag) into `dest`, rootless or not.
fn umoci_unpack(image: &str, dest: &Path, rootless: bool) {
    let mut cmd = tool("umoci-0.6");
    cmd.args(["raw", "unpack"]);
    if rootless {
        cmd.arg("--rootless");
    }
    ok(cmd.args(["--image", image, s(dest)]));
}

#[test]
fn worker_roots_equal_umoci_unpack_of_built_and_umoci_images() {
    let t = tempdir();
    let dir = t.path();
    let data = dir.join("registry");
    let server = Server::start(&data, &[]);
    let host = server.host();

    // An image built by rdctl from IPS packages, written as a layout and pushed.
    let image_file = ips_image(dir);
    let layout = dir.join("built");
    let built_ref = format!("{host}/zones/built:1.0");
    ok(rdctl()
        .arg("build")
        .arg(&image_file)
        .args(["--output", s(&layout), "--push", &built_ref])
        .env("SOURCE_DATE_EPOCH", "1700000000"));
    // An image made by umoci, pushed by skopeo.
    let umoci_img = umoci_image(dir);
    let umoci_ref = format!("{host}/zones/umoci:2");
    ok(tool("skopeo").args([
        "--insecure-policy",
        "copy",
        "--dest-tls-verify=false",
        &format!("oci:{}:l2", s(&umoci_img)),
        &format!("docker://{umoci_ref}"),
    ]));

    let node = Node::new(&dir.join("node"));
    node.zone("built", &built_ref);
    node.zone("umoci", &umoci_ref);
    let out = node.run_once();
    assert!(
        out.status.success(),
        "worker run failed: {}\nstdout: {}\nstderr:\n{}\nregistry log:\n{}",
        out.status,
        tail(&out.stdout),
        tail(&out.stderr),
        server.log_tail()
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).lines().next().unwrap(),
        "provisioned: built,umoci; unchanged: ; failed: ; backing off: ; removed: "
    );

    let root_user = running_as_root();
    for (zone, image) in [
        ("built", format!("{}:1.0", s(&layout))),
        ("umoci", format!("{}:l2", s(&umoci_img))),
    ] {
        let theirs = dir.join(format!("umoci-{zone}"));
        umoci_unpack(&image, &theirs, true);
        assert_same_tree(zone, &node.root(zone), &theirs, false);
        if root_user {
            // As root both apply the layers' owners (and keep setuid bits).
            let theirs = dir.join(format!("umoci-{zone}-owned"));
            umoci_unpack(&image, &theirs, false);
            assert_same_tree(zone, &node.root(zone), &theirs, true);
        }
    }
    // What the layers say is really there (not just equal to umoci's view).
    let built = node.root("built");
    assert_eq!(
        std::fs::read_link(built.join("usr/lib/libdemo.so")).unwrap(),
        Path::new("/usr/lib/libdemo.so.1"),
        "an absolute link target is kept as written (it resolves inside the zone)"
    );
    let m = std::fs::metadata(built.join("var/demo")).unwrap();
    assert_eq!(m.permissions().mode() & 0o7777, 0o750);
    if root_user {
        assert_eq!((m.uid(), m.gid()), (300, 300));
        let tool_mode = std::fs::metadata(built.join("usr/bin/tool")).unwrap();
        assert_eq!(tool_mode.permissions().mode() & 0o7777, 0o4555);
    }
    let um = node.root("umoci");
    assert!(!um.join("etc/motd").exists(), "whited out");
    let mut old: Vec<String> = std::fs::read_dir(um.join("etc/old"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    old.sort();
    assert_eq!(old, ["c"], "opaque: only the upper layer's children");
    assert_eq!(
        std::fs::read(um.join("usr/bin/app2")).unwrap(),
        b"#!/bin/sh\necho v1\n",
        "replacing a hardlinked path unlinks it, the other link keeps the old content"
    );

    // `worker status --packages`: what each zone runs, from the node's own store.
    let out = ok(rdctl().args([
        "worker",
        "status",
        "--packages",
        "--json",
        "--config",
        s(&node.config()),
    ]));
    let zones: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let by_zone = |z: &str| {
        zones
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["zone"] == z)
            .cloned()
            .unwrap_or_else(|| panic!("no {z} in {zones:#}"))
    };
    let built_pkgs = by_zone("built");
    let pkgs: Vec<&str> = built_pkgs["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p.as_str().unwrap())
        .collect();
    assert!(
        !pkgs.is_empty() && pkgs.iter().all(|p| p.starts_with("pkg://example.org/")),
        "{built_pkgs:#}"
    );
    assert!(
        pkgs.iter().any(|p| p.contains("/demo/tool@")),
        "{built_pkgs:#}"
    );
    assert_eq!(built_pkgs["error"], serde_json::Value::Null);
    let umoci_pkgs = by_zone("umoci");
    assert_eq!(umoci_pkgs["packages"], serde_json::json!([]));
    assert!(
        umoci_pkgs["error"]
            .as_str()
            .unwrap()
            .contains("no package history"),
        "{umoci_pkgs:#}"
    );
    let table = String::from_utf8(
        ok(rdctl().args([
            "worker",
            "status",
            "--packages",
            "--config",
            s(&node.config()),
        ]))
        .stdout,
    )
    .unwrap();
    let mut lines = table.lines();
    assert_eq!(
        lines.next().unwrap().split_whitespace().collect::<Vec<_>>(),
        ["ZONE", "DIGEST", "PACKAGE"]
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("built ") && l.contains("/demo/tool@")),
        "{table}"
    );
    assert!(
        table
            .lines()
            .any(|l| l.starts_with("umoci ") && l.contains("no package history")),
        "{table}"
    );

    // The zone descriptions carry the images' stop semantics.
    let d = node.description("built");
    assert_eq!(d["stop_signal"], "SIGUSR2");
    assert_eq!(d["smf_stop_exec"], ":kill -USR2");
    assert_eq!(
        d["stop_timeout_secs"], 45,
        "from the image (the zone sets none)"
    );
    assert_eq!(d["user"], "demo");
    assert_eq!(d["entrypoint"], serde_json::json!(["/usr/bin/tool"]));
    let smf = std::fs::read_to_string(node.zonepath("built").join("entrypoint.xml")).unwrap();
    assert!(
        smf.contains("exec=\":kill -USR2\" timeout_seconds=\"45\""),
        "{smf}"
    );
    let d = node.description("umoci");
    assert_eq!(d["stop_signal"], "SIGPWR");
    assert_eq!(d["smf_stop_exec"], ":kill -PWR");
    assert_eq!(d["stop_timeout_secs"], 10, "the default");

    // Status: both ready at the digests the registry serves.
    let st = node.status();
    for zone in ["built", "umoci"] {
        assert_eq!(st[zone]["phase"], "Ready", "{:#}", st[zone]);
        assert_eq!(st[zone]["current_digest"], st[zone]["desired_digest"]);
    }
    // A second pass changes nothing.
    let out = node.run_once();
    assert!(out.status.success());
    assert!(
        String::from_utf8_lossy(&out.stdout).starts_with("provisioned: ; unchanged: built,umoci;"),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}

/// True when the tests run as root (owners and setuid bits are then applied by both sides).
fn running_as_root() -> bool {
    std::fs::metadata("/proc/self")
        .map(|m| m.uid() == 0)
        .unwrap_or(false)
}

/// A hand-made image (for the broken variants real tools refuse to make): gzip layers built
/// with the tar crate, an illumos/amd64 config and a manifest.
pub(crate) struct RawImage {
    /// (gzip blob, DiffID) per layer.
    layers: Vec<(Vec<u8>, String)>,
    /// `rootfs.diff_ids` as written in the config (the real ones unless a test changes them).
    diff_ids: Vec<String>,
    /// Added to every layer descriptor's size.
    size_delta: u64,
}

fn sha256_digest(b: &[u8]) -> String {
    format!("sha256:{}", hex(&Sha256::digest(b)))
}

/// A gzip layer holding `files` (path, content) under directories made as needed.
fn raw_layer(files: &[(&str, &[u8])]) -> (Vec<u8>, String) {
    let mut b = tar::Builder::new(Vec::new());
    for (path, body) in files {
        let mut h = tar::Header::new_ustar();
        h.set_path(path).unwrap();
        h.set_size(body.len() as u64);
        h.set_mode(0o644);
        h.set_mtime(1_700_000_000);
        h.set_entry_type(tar::EntryType::Regular);
        h.set_cksum();
        b.append(&h, *body).unwrap();
    }
    let tar = b.into_inner().unwrap();
    let diff_id = sha256_digest(&tar);
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut gz, &tar).unwrap();
    (gz.finish().unwrap(), diff_id)
}

impl RawImage {
    /// Two layers whose bytes are unique to `name` (so altering one in the registry's storage
    /// touches only this image).
    pub(crate) fn new(name: &str) -> RawImage {
        let layers = vec![
            raw_layer(&[("etc-name", name.as_bytes())]),
            raw_layer(&[("release", format!("{name} release\n").as_bytes())]),
        ];
        let diff_ids = layers.iter().map(|(_, d)| d.clone()).collect();
        RawImage {
            layers,
            diff_ids,
            size_delta: 0,
        }
    }

    pub(crate) fn layer_digest(&self, i: usize) -> String {
        sha256_digest(&self.layers[i].0)
    }

    /// Pushes blobs (monolithic POST) and the manifest under `repo:tag` over plain HTTP.
    pub(crate) fn push(&self, addr: std::net::SocketAddr, repo: &str, tag: &str) {
        let config = serde_json::to_vec(&serde_json::json!({
            "architecture": "amd64",
            "os": "illumos",
            "config": {"Cmd": ["/release"], "StopSignal": "SIGTERM"},
            "rootfs": {"type": "layers", "diff_ids": self.diff_ids},
        }))
        .unwrap();
        let mut blobs: Vec<&[u8]> = self.layers.iter().map(|(b, _)| b.as_slice()).collect();
        blobs.push(&config);
        for blob in blobs {
            let path = format!("/v2/{repo}/blobs/uploads/?digest={}", sha256_digest(blob));
            let (st, _, body) = http(
                addr,
                "POST",
                &path,
                &[("Content-Type", "application/octet-stream")],
                blob,
            );
            assert_eq!(st, 201, "{path}: {}", String::from_utf8_lossy(&body));
        }
        let descriptor = |media: &str, bytes: &[u8], delta: u64| {
            serde_json::json!({
                "mediaType": media,
                "digest": sha256_digest(bytes),
                "size": bytes.len() as u64 + delta,
            })
        };
        let manifest = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2,
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "config": descriptor("application/vnd.oci.image.config.v1+json", &config, 0),
            "layers": self.layers.iter().map(|(b, _)| descriptor(
                "application/vnd.oci.image.layer.v1.tar+gzip", b, self.size_delta)).collect::<Vec<_>>(),
        }))
        .unwrap();
        let (st, _, body) = http(
            addr,
            "PUT",
            &format!("/v2/{repo}/manifests/{tag}"),
            &[("Content-Type", "application/vnd.oci.image.manifest.v1+json")],
            &manifest,
        );
        assert_eq!(st, 201, "{repo}:{tag}: {}", String::from_utf8_lossy(&body));
    }
}

/// Where `rdctl registry serve --data DATA` (fs store) keeps a blob's bytes.
pub(crate) fn stored_blob(data: &Path, digest: &str) -> PathBuf {
    let hex = digest.trim_start_matches("sha256:");
    data.join(format!("blobs/sha256/{}/{hex}/data", &hex[..2]))
}

fn names(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .map(|d| {
            d.map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

#[test]
fn broken_images_create_no_zone_name_the_blob_and_leave_the_others_alone() {
    let t = tempdir();
    let data = t.path().join("registry");
    let server = Server::start(&data, &[]);
    let node = Node::new(&t.path().join("node"));
    let zone = |name: &str| node.zone(name, &format!("{}/broken/{name}:1", server.host()));

    for name in ["good1", "good2"] {
        RawImage::new(name).push(server.addr, &format!("broken/{name}"), "1");
        zone(name);
    }
    // A layer altered in the registry's storage after the push.
    let altered = RawImage::new("altered");
    altered.push(server.addr, "broken/altered", "1");
    let altered_blob = altered.layer_digest(1);
    let p = stored_blob(&data, &altered_blob);
    let mut bytes = std::fs::read(&p).unwrap();
    let n = bytes.len();
    bytes[n - 5] ^= 0x20;
    std::fs::write(&p, bytes).unwrap();
    zone("altered");
    // A config whose second DiffID is not the layer's.
    let mut diffid = RawImage::new("diffid");
    diffid.diff_ids[1] = sha256_digest(b"some other layer");
    diffid.push(server.addr, "broken/diffid", "1");
    let diffid_blob = diffid.layer_digest(1);
    zone("diffid");
    // Layer descriptors one byte larger than the blobs.
    let mut size = RawImage::new("size");
    size.size_delta = 1;
    size.push(server.addr, "broken/size", "1");
    let size_blob = size.layer_digest(0);
    zone("size");
    // A layer gone from the registry's storage after the push.
    let missing = RawImage::new("missing");
    missing.push(server.addr, "broken/missing", "1");
    let missing_blob = missing.layer_digest(1);
    std::fs::remove_file(stored_blob(&data, &missing_blob)).unwrap();
    zone("missing");

    let out = node.run_once();
    assert_eq!(out.status.code(), Some(1), "{}", tail(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "provisioned: good1,good2; unchanged: ; failed: altered,diffid,missing,size; backing off: ; removed:"
    );
    let st = node.status();
    for (zone, blob, reason) in [
        ("altered", &altered_blob, "digest mismatch"),
        ("diffid", &diffid_blob, "differs from diff_id"),
        ("size", &size_blob, "expected"),
        // Bytes gone under a link are the store's fault: 503 after the registry's re-reads,
        // retried by the worker, then the registry's words in the error.
        ("missing", &missing_blob, "the store did not find its bytes"),
    ] {
        let row = &st[zone];
        assert_eq!(row["phase"], "Failed", "{row:#}");
        assert_eq!(row["failed_blob"].as_str(), Some(blob.as_str()), "{row:#}");
        let err = row["last_error"].as_str().unwrap();
        assert!(
            err.contains(reason) && err.contains(blob.as_str()),
            "{zone}: {err}"
        );
        assert!(!node.zonepath(zone).exists(), "{zone}: no zone was created");
    }
    for zone in ["good1", "good2"] {
        assert_eq!(st[zone]["phase"], "Ready");
        assert_eq!(
            std::fs::read(node.root(zone).join("release")).unwrap(),
            format!("{zone} release\n").as_bytes()
        );
    }
    // Nothing half-made is left: no staging roots, no downloads in progress, and the blobs
    // that did not verify are not in the content store.
    assert!(names(&node.zonepath(".staging")).is_empty());
    let blobs = names(&t.path().join("node/state/content/blobs/sha256"));
    for bad in [&altered_blob, &size_blob] {
        assert!(!blobs.contains(&bad.trim_start_matches("sha256:").to_owned()));
    }
    // The table: aligned columns, short digests, a one-line error; `--wide` names the blob.
    let table = ok(rdctl().args(["worker", "status", "--config", s(&node.config())]));
    let table = String::from_utf8_lossy(&table.stdout);
    let header = table.lines().next().unwrap();
    let line = table.lines().find(|l| l.starts_with("altered ")).unwrap();
    assert_eq!(header.find("PHASE"), line.find("Failed"), "{table}");
    assert!(
        !table.contains('\t') && !line.contains(&altered_blob),
        "{table}"
    );
    let wide = ok(rdctl().args(["worker", "status", "--wide", "--config", s(&node.config())]));
    let wide = String::from_utf8_lossy(&wide.stdout);
    let line = wide.lines().find(|l| l.starts_with("altered ")).unwrap();
    assert!(
        line.contains("Failed") && line.contains(&altered_blob),
        "{line}"
    );
}

/// Every entry of two zone roots is the same (kind, mode, owner, link target, content, and
/// mtime for all but directories, whose times are those of the unpack), except the
/// provisioner's SMF manifest, which is not from the image.
pub(crate) fn assert_same_root(what: &str, a: &Path, b: &Path) {
    let strip = |(mut t, g): (BTreeMap<PathBuf, Entry>, Vec<Vec<PathBuf>>)| {
        t.remove(Path::new(ENTRYPOINT_MANIFEST));
        for e in t.values_mut().filter(|e| e.kind == "dir") {
            e.mtime = 0;
        }
        (t, g)
    };
    let (ta, tb) = (strip(tree(a)), strip(tree(b)));
    assert_eq!(ta, tb, "{what}: {} and {} differ", a.display(), b.display());
}

impl RawImage {
    /// `n` layers: each adds its own file and rewrites `order` (so the root shows whether the
    /// layers were applied in manifest order), with contents unique to `name`.
    pub(crate) fn layered(name: &str, n: usize) -> RawImage {
        let layers: Vec<(Vec<u8>, String)> = (0..n)
            .map(|i| {
                let own = format!("{name} layer {i}\n").repeat(1000 + i);
                let order = format!("{name} written by layer {i}\n");
                let file = format!("layer-{i}");
                raw_layer(&[(file.as_str(), own.as_bytes()), ("order", order.as_bytes())])
            })
            .collect();
        let diff_ids = layers.iter().map(|(_, d)| d.clone()).collect();
        RawImage {
            layers,
            diff_ids,
            size_delta: 0,
        }
    }
}

impl RawImage {
    /// One layer holding `size` bytes of incompressible data (a big download).
    pub(crate) fn big(name: &str, size: usize) -> RawImage {
        let mut data = Vec::with_capacity(size + 32);
        let mut h = Sha256::digest(name.as_bytes());
        while data.len() < size {
            h = Sha256::digest(h);
            data.extend_from_slice(&h);
        }
        data.truncate(size);
        let layers = vec![raw_layer(&[("big.bin", &data)])];
        let diff_ids = layers.iter().map(|(_, d)| d.clone()).collect();
        RawImage {
            layers,
            diff_ids,
            size_delta: 0,
        }
    }
}

#[test]
fn transient_faults_are_retried_and_lasting_ones_fail_after_the_attempts() {
    use crate::fault_proxy::{Fault, FaultProxy, Rule};
    let t = tempdir();
    let server = Server::start(&t.path().join("registry"), &[]);
    let flaky = RawImage::new("flaky");
    flaky.push(server.addr, "faults/flaky", "1");
    let cut = RawImage::new("cut");
    cut.push(server.addr, "faults/cut", "1");
    let (l0, l1, cut_layer) = (
        flaky.layer_digest(0),
        flaky.layer_digest(1),
        cut.layer_digest(0),
    );
    let rule = |method, path: &str, times, fault| Rule {
        method,
        path: path.to_owned(),
        times,
        fault,
    };
    let proxy = FaultProxy::start(
        server.addr,
        vec![
            // Recovered within the retries: two 500s on the tag, a reset before the answer,
            // a reset in the middle of a layer and a layer body cut short (both resumed from
            // the byte reached).
            rule("HEAD", "/faults/flaky/manifests/1", 2, Fault::Status(500)),
            rule("GET", "/faults/flaky/blobs/sha256", 1, Fault::Reset(0)),
            rule("GET", &l0, 1, Fault::Reset(40)),
            rule("GET", &l1, 1, Fault::Truncate(30)),
            // Lasting: 503 on every request, resets on every request, a layer whose body is
            // always cut; and a missing tag (404 is an answer, not retried).
            rule("", "/faults/down/", u32::MAX, Fault::Status(503)),
            rule("", "/faults/resets/", u32::MAX, Fault::Reset(0)),
            rule("GET", &cut_layer, u32::MAX, Fault::Truncate(20)),
        ],
    );
    let node = Node::new(&t.path().join("node"));
    for zone in ["flaky", "cut", "down", "resets", "absent"] {
        node.zone(zone, &format!("{}/faults/{zone}:1", proxy.host()));
    }
    let out = node.run_once();
    assert_eq!(out.status.code(), Some(1), "{}", tail(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "provisioned: flaky; unchanged: ; failed: absent,cut,down,resets; backing off: ; removed:",
        "{}",
        tail(&out.stderr)
    );
    assert_eq!(
        std::fs::read(node.root("flaky").join("release")).unwrap(),
        b"flaky release\n"
    );
    // What the client did, request by request.
    let heads = proxy.seen_for("/faults/flaky/manifests/1");
    let statuses: Vec<_> = heads.iter().map(|s| (s.method.as_str(), s.fault)).collect();
    assert_eq!(
        statuses[..3],
        [
            ("HEAD", Some(Fault::Status(500))),
            ("HEAD", Some(Fault::Status(500))),
            ("HEAD", None)
        ]
    );
    for (layer, cut_at) in [(&l0, 40), (&l1, 30)] {
        let gets = proxy.seen_for(layer);
        assert_eq!(gets.len(), 2, "{gets:#?}");
        assert_eq!(
            (gets[0].range.as_deref(), gets[0].body_bytes),
            (None, cut_at)
        );
        let want = format!("bytes={cut_at}-");
        assert_eq!(
            gets[1].range.as_deref(),
            Some(want.as_str()),
            "resumed from the cut"
        );
    }
    // Lasting failures: exactly the 5 attempts of the default policy, then a clear error.
    let st = node.status();
    assert_eq!(proxy.seen_for("/faults/down/").len(), 5);
    let err = st["down"]["last_error"].as_str().unwrap();
    assert!(
        err.contains("still failing after 5 attempts: status 503"),
        "{err}"
    );
    assert_eq!(proxy.seen_for("/faults/resets/").len(), 5);
    let err = st["resets"]["last_error"].as_str().unwrap();
    assert!(err.contains("still failing after 5 attempts"), "{err}");
    // The first GET and 4 resumes, each from the byte reached (20 bytes get through each).
    let ranges: Vec<Option<String>> = proxy
        .seen_for(&cut_layer)
        .into_iter()
        .map(|s| s.range)
        .collect();
    let want: Vec<Option<String>> = [None, Some(20), Some(40), Some(60), Some(80)]
        .into_iter()
        .map(|r| r.map(|r| format!("bytes={r}-")))
        .collect();
    assert_eq!(ranges, want);
    assert_eq!(st["cut"]["failed_blob"].as_str(), Some(cut_layer.as_str()));
    let err = st["cut"]["last_error"].as_str().unwrap();
    assert!(err.contains("body cut at byte 100"), "{err}");
    assert_eq!(
        proxy.seen_for("/faults/absent/").len(),
        1,
        "404 is not retried"
    );
    let err = st["absent"]["last_error"].as_str().unwrap();
    assert!(
        err.contains("not found: the registry has no such tag or repository"),
        "a missing tag reads as one: {err}"
    );
    for zone in ["cut", "down", "resets", "absent"] {
        assert!(!node.zonepath(zone).exists(), "{zone}");
    }
}

#[test]
fn a_worker_killed_mid_download_resumes_from_the_partial_file() {
    use crate::fault_proxy::{Fault, FaultProxy, Rule};
    let t = tempdir();
    let server = Server::start(&t.path().join("registry"), &[]);
    let big = RawImage::big("big", 6 << 20);
    big.push(server.addr, "resume/big", "1");
    let layer = big.layer_digest(0);
    let layer_size = big.layers[0].0.len() as u64;
    const HELD_AT: u64 = 2 << 20;
    let proxy = FaultProxy::start(
        server.addr,
        vec![Rule {
            method: "GET",
            path: layer.clone(),
            times: 1,
            fault: Fault::Hold(HELD_AT),
        }],
    );
    let node = Node::new(&t.path().join("node"));
    node.zone("big", &format!("{}/resume/big:1", proxy.host()));
    let mut worker = rdctl()
        .args(["worker", "run", "--once", "--config", s(&node.config())])
        .env("NO_COLOR", "1")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // The proxy passed HELD_AT bytes and holds the rest; wait until they are on disk, then
    // kill the worker there.
    proxy.wait_for(Duration::from_secs(60), "the held layer GET", |seen| {
        seen.iter().any(|s| s.fault == Some(Fault::Hold(HELD_AT)))
    });
    let partial = t.path().join(format!(
        "node/state/content/ingest/sha256-{}.partial",
        layer.trim_start_matches("sha256:")
    ));
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while std::fs::metadata(&partial).map(|m| m.len()).unwrap_or(0) < HELD_AT {
        assert!(
            std::time::Instant::now() < deadline,
            "the partial download never reached {HELD_AT} bytes"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    ok(Command::new("kill").args(["-9", &worker.id().to_string()]));
    worker.wait().unwrap();
    proxy.release();
    assert_eq!(std::fs::metadata(&partial).unwrap().len(), HELD_AT);
    assert!(
        !node.zonepath("big").exists(),
        "no zone from a partial pull"
    );

    // Restart: the download resumes where the file ends, verifies, and the zone appears once.
    let out = node.run_once();
    assert!(out.status.success(), "{}", tail(&out.stderr));
    let gets = proxy.seen_for(&layer);
    assert_eq!(gets.len(), 2, "{gets:#?}");
    let want = format!("bytes={HELD_AT}-");
    assert_eq!(gets[1].range.as_deref(), Some(want.as_str()));
    assert_eq!(
        gets[1].body_bytes,
        layer_size - HELD_AT,
        "only the rest was sent"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("resuming a partial download"));
    let file = std::fs::read(node.root("big").join("big.bin")).unwrap();
    assert_eq!(file.len(), 6 << 20);
    assert_eq!(
        names(&node.zonepath("").join(".staging")),
        Vec::<String>::new()
    );
    assert_eq!(
        names(&t.path().join("node/roots")),
        [".rdctl-owner", ".staging", ".trash", ".volumes", "big"]
    );
    assert!(names(&t.path().join("node/state/content/ingest")).is_empty());
    let blob = t.path().join(format!(
        "node/state/content/blobs/sha256/{}",
        layer.trim_start_matches("sha256:")
    ));
    assert_eq!(sha256_digest(&std::fs::read(blob).unwrap()), layer);
}

#[test]
fn metrics_count_pulls_bytes_verification_failures_creations_and_durations() {
    use std::io::BufRead;
    let t = tempdir();
    let data = t.path().join("registry");
    let server = Server::start(&data, &[]);
    let node = Node::new(&t.path().join("node"));
    let mut cfg = std::fs::read_to_string(node.config()).unwrap();
    cfg = cfg.replace(
        "[provisioner]",
        "metrics_listen = \"127.0.0.1:0\"\n[provisioner]",
    );
    std::fs::write(node.config(), cfg).unwrap();
    let good = RawImage::new("good");
    good.push(server.addr, "metrics/good", "1");
    let mut diffid = RawImage::new("diffid");
    diffid.diff_ids[0] = sha256_digest(b"another layer");
    diffid.push(server.addr, "metrics/diffid", "1");
    for zone in ["good", "diffid", "absent"] {
        node.zone(zone, &format!("{}/metrics/{zone}:1", server.host()));
    }
    // A long-running worker (not --once): one pass, then it sleeps the poll interval.
    let mut worker = rdctl()
        .args(["worker", "run", "--config", s(&node.config())])
        .env("NO_COLOR", "1")
        .env("RDCTL_LOG", "info")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = worker.stderr.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            if let Some(rest) = line.split("metrics listening on ").nth(1) {
                let _ = tx.send(rest.split_whitespace().next().unwrap_or("").to_owned());
            }
        }
    });
    let addr: std::net::SocketAddr = rx
        .recv_timeout(Duration::from_secs(30))
        .expect("the worker logs its metrics address")
        .parse()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let text = loop {
        let (st, h, body) = http(addr, "GET", "/metrics", &[], b"");
        assert_eq!(st, 200);
        assert!(
            h.iter()
                .any(|(k, v)| k == "content-type" && v.starts_with("text/plain; version=0.0.4"))
        );
        let text = String::from_utf8(body).unwrap();
        if text
            .lines()
            .any(|l| l == "rdctl_worker_reconcile_duration_seconds_count 1")
        {
            break text;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no pass finished:\n{text}"
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    let value = |name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
            .unwrap_or_else(|| panic!("{name} missing:\n{text}"))
    };
    assert_eq!(value("rdctl_worker_pulls_total{result=\"ok\"}"), 2.0);
    assert_eq!(value("rdctl_worker_pulls_total{result=\"error\"}"), 1.0);
    assert_eq!(
        value("rdctl_worker_verification_failures_total{stage=\"diff_id\"}"),
        1.0
    );
    assert_eq!(
        value("rdctl_worker_verification_failures_total{stage=\"blob\"}"),
        0.0
    );
    assert_eq!(value("rdctl_worker_zone_creations_total"), 1.0);
    assert_eq!(value("rdctl_worker_zone_failures_total"), 2.0);
    assert_eq!(
        value("rdctl_worker_zone_reconcile_duration_seconds_count"),
        3.0
    );
    // Every blob of both pulled images crossed the wire once (configs and layers).
    let blob_bytes: usize = [&good, &diffid]
        .iter()
        .flat_map(|i| i.layers.iter().map(|(b, _)| b.len()))
        .sum();
    assert!(value("rdctl_worker_pull_bytes_total") > blob_bytes as f64);
    assert_eq!(value("rdctl_worker_resumed_bytes_total"), 0.0);
    ok(Command::new("kill").args(["-TERM", &worker.id().to_string()]));
    let st = worker.wait().unwrap();
    assert!(st.success(), "SIGTERM ends the worker cleanly: {st}");
}

#[test]
fn a_stalled_download_is_cancelled_at_the_progress_deadline_and_resumed_on_retry() {
    use crate::fault_proxy::{Fault, FaultProxy, Rule};
    let t = tempdir();
    let server = Server::start(&t.path().join("registry"), &[]);
    let big = RawImage::big("big", 2 << 20);
    big.push(server.addr, "stall/big", "1");
    let layer = big.layer_digest(0);
    const HELD_AT: u64 = 512 << 10;
    // The registry sends part of the layer, then nothing.
    let proxy = FaultProxy::start(
        server.addr,
        vec![Rule {
            method: "GET",
            path: layer.clone(),
            times: 1,
            fault: Fault::Hold(HELD_AT),
        }],
    );
    let node = Node::new(&t.path().join("node"));
    let cfg = std::fs::read_to_string(node.config()).unwrap();
    std::fs::write(
        node.config(),
        cfg.replace(
            "backoff_initial_secs = 60",
            "backoff_initial_secs = 60\nimage_pull_progress_deadline_secs = 1",
        ),
    )
    .unwrap();
    node.zone("big", &format!("{}/stall/big:1", proxy.host()));
    let started = std::time::Instant::now();
    let out = node.run_once();
    let took = started.elapsed();
    proxy.release();
    assert_eq!(out.status.code(), Some(1), "{}", tail(&out.stderr));
    // Cancelled at the deadline (plus the pass around it), not left hanging on the registry.
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(20),
        "{took:?}"
    );
    let st = &node.status()["big"];
    let err = st["last_error"].as_str().unwrap_or_default();
    assert!(
        err.contains("no bytes received for 1 s"),
        "{err}\n{}",
        tail(&out.stderr)
    );
    // Retried with backoff: one failure, the next attempt scheduled by backoff_initial_secs.
    assert_eq!(st["failures"], 1, "{st}");
    let next = st["next_attempt_unix"].as_u64().unwrap();
    assert!(next >= st["updated_unix"].as_u64().unwrap() + 59, "{st}");
    // Progress says how far it got.
    let done = st["pull"]["done_bytes"].as_u64().unwrap();
    let total = st["pull"]["total_bytes"].as_u64().unwrap();
    assert!(done >= HELD_AT && done < total, "{st}");
    assert!(
        !node.zonepath("big").exists(),
        "no zone from a stalled pull"
    );

    // The retry resumes from what arrived and finishes.
    let out = node.run_once();
    assert!(out.status.success(), "{}", tail(&out.stderr));
    let gets = proxy.seen_for(&layer);
    assert_eq!(gets.len(), 2, "{gets:#?}");
    let want = format!("bytes={HELD_AT}-");
    assert_eq!(gets[1].range.as_deref(), Some(want.as_str()));
    let st = &node.status()["big"];
    assert_eq!(st["phase"], "Ready");
    assert_eq!(st["pull"]["done_bytes"], st["pull"]["total_bytes"], "{st}");
}

/// `rdctl worker rollback` end to end: after an update, `status` shows the previous digest;
/// the rollback asked for is done by the next `worker run --once`, which puts the previous
/// root back and keeps it while the tag stays; a zone with nothing kept is refused (exit 2).
#[test]
fn rollback_puts_the_previous_root_back_and_status_shows_both_digests() {
    let t = tempdir();
    let server = Server::start(&t.path().join("registry"), &[]);
    let node = Node::new(&t.path().join("node"));
    node.zone("app", &format!("{}/roll/app:1", server.host()));
    let release = || std::fs::read_to_string(node.root("app").join("release")).unwrap();
    let digest = |z: &serde_json::Value, k: &str| z[k].as_str().map(str::to_owned);
    RawImage::new("first").push(server.addr, "roll/app", "1");
    assert!(node.run_once().status.success());
    let st = node.status();
    let first = digest(&st["app"], "current_digest").unwrap();
    assert_eq!(digest(&st["app"], "previous_digest"), None);
    let refused = rdctl()
        .args(["worker", "rollback", "app", "--config", s(&node.config())])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(2), "{}", tail(&refused.stderr));
    assert!(
        String::from_utf8_lossy(&refused.stderr).contains("zone app: no previous root is kept"),
        "{}",
        tail(&refused.stderr)
    );
    RawImage::new("second").push(server.addr, "roll/app", "1");
    assert!(node.run_once().status.success());
    assert_eq!(release(), "second release\n");
    let st = node.status();
    let second = digest(&st["app"], "current_digest").unwrap();
    assert_eq!(
        digest(&st["app"], "previous_digest").as_deref(),
        Some(first.as_str())
    );
    let table = ok(rdctl().args(["worker", "status", "--config", s(&node.config())]));
    let table = String::from_utf8_lossy(&table.stdout).into_owned();
    let header = table.lines().next().unwrap();
    assert!(
        header.contains("CURRENT") && header.contains("PREVIOUS"),
        "{table}"
    );
    assert!(
        table.contains(&first[..19]) && table.contains(&second[..19]),
        "{table}"
    );

    let asked = ok(rdctl().args(["worker", "rollback", "app", "--config", s(&node.config())]));
    let said = String::from_utf8_lossy(&asked.stdout).into_owned();
    assert!(
        said.contains(&format!(
            "zone app: rollback from {second} to {first} asked for"
        )),
        "{said}"
    );
    assert!(node.run_once().status.success());
    assert_eq!(release(), "first release\n");
    let st = node.status();
    assert_eq!(
        digest(&st["app"], "current_digest").as_deref(),
        Some(first.as_str())
    );
    assert_eq!(
        digest(&st["app"], "previous_digest").as_deref(),
        Some(second.as_str())
    );
    assert_eq!(st["app"]["rolled_back"]["manual"], serde_json::json!(true));
    // The tag still points at what was rolled away from: the zone stays.
    assert!(node.run_once().status.success());
    assert_eq!(release(), "first release\n");
    let missing = rdctl()
        .args([
            "worker",
            "rollback",
            "nosuch",
            "--config",
            s(&node.config()),
        ])
        .output()
        .unwrap();
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("zone nosuch: the worker has no record")
    );
}
