//! Safe unpack against the bad-input fixture list of research §3.4, items 1–10: every case is
//! generated here, and each either fails closed or stays inside the root. Every case also
//! checks that nothing outside the root changed: the temporary directory around the root holds
//! sentinel files (`outside/etc/passwd`, `outside/etc/shadow`), and hostile symlinks point at
//! them by relative and by absolute path.

mod tarbuild;

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use tarbuild::{H, Tar};
use validator::{Algorithm, Compression, Digest, LayerLimits, TarLimits};
use worker_runtime::{LayerStats, RootDir, UnpackError, UnpackOptions, apply_layer, apply_stream};

struct Case {
    t: tempfile::TempDir,
    root: PathBuf,
}

/// What the file system outside the root looks like: path → (kind, content or target, mode).
type Snapshot = BTreeMap<PathBuf, (String, Vec<u8>, u32)>;

fn snapshot(dir: &Path, skip: &Path, out: &mut Snapshot) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p == skip {
            continue;
        }
        let m = std::fs::symlink_metadata(&p).unwrap();
        let mode = m.permissions().mode();
        if m.is_dir() {
            out.insert(p.clone(), ("dir".into(), Vec::new(), mode));
            snapshot(&p, skip, out);
        } else if m.file_type().is_symlink() {
            let t = std::fs::read_link(&p).unwrap();
            out.insert(
                p,
                ("link".into(), t.into_os_string().into_encoded_bytes(), mode),
            );
        } else {
            out.insert(p.clone(), ("file".into(), std::fs::read(&p).unwrap(), mode));
        }
    }
}

impl Case {
    fn new() -> Case {
        let t = tempfile::tempdir().unwrap();
        let root = t.path().join("root");
        std::fs::create_dir(&root).unwrap();
        let etc = t.path().join("outside/etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::write(etc.join("passwd"), b"host passwd").unwrap();
        std::fs::write(etc.join("shadow"), b"host shadow").unwrap();
        std::fs::set_permissions(&etc, std::fs::Permissions::from_mode(0o755)).unwrap();
        Case { t, root }
    }

    /// The sentinel directory, absolute (an "absolute symlink target" that would hit real
    /// files if it were not re-rooted, without touching the host's /etc if a bug let it).
    fn outside_abs(&self) -> String {
        self.t
            .path()
            .join("outside/etc")
            .to_string_lossy()
            .into_owned()
    }

    fn outside(&self) -> Snapshot {
        let mut s = Snapshot::new();
        snapshot(self.t.path(), &self.root, &mut s);
        s
    }

    fn opts(&self) -> UnpackOptions {
        UnpackOptions::default()
    }

    /// Applies plain-tar layers in order, stopping at the first error; checks that nothing
    /// outside the root changed either way.
    fn apply_with(
        &self,
        layers: &[Vec<u8>],
        opts: &UnpackOptions,
    ) -> Result<Vec<LayerStats>, UnpackError> {
        let before = self.outside();
        let root = RootDir::open(&self.root).unwrap();
        let mut out = Vec::new();
        let mut result = Ok(());
        for l in layers {
            match apply_stream(&root, &l[..], Compression::None, Algorithm::Sha256, opts) {
                Ok(s) => out.push(s),
                Err(e) => {
                    result = Err(e);
                    break;
                }
            }
        }
        assert_eq!(before, self.outside(), "something outside the root changed");
        result.map(|()| out)
    }

    fn apply(&self, layers: &[Vec<u8>]) -> Result<Vec<LayerStats>, UnpackError> {
        self.apply_with(layers, &self.opts())
    }

    fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    fn read(&self, rel: &str) -> Vec<u8> {
        std::fs::read(self.p(rel)).unwrap()
    }

    fn exists(&self, rel: &str) -> bool {
        std::fs::symlink_metadata(self.p(rel)).is_ok()
    }
}

/// Expects a refusal whose message contains `why`.
fn refused(r: Result<Vec<LayerStats>, UnpackError>, why: &str) {
    match r {
        Err(e) => {
            let msg = validator::error_chain(&e);
            assert!(msg.contains(why), "expected {why:?} in {msg:?}");
        }
        Ok(_) => panic!("expected a refusal containing {why:?}"),
    }
}

fn one(t: Tar) -> Vec<Vec<u8>> {
    vec![t.finish()]
}

// ---------------------------------------------------------------------------------------------
// Item 1: names.

#[test]
fn item01_unsafe_names_are_refused() {
    for (name, why) in [
        (&b"../x"[..], "'..' in name"),
        (b"a/../../x", "'..' in name"),
        (b"/etc/x", "absolute name"),
        (b"//etc/x", "absolute name"),
        (b"./../x", "'..' in name"),
        (b"", "empty name"),
    ] {
        let c = Case::new();
        refused(c.apply(&one(Tar::new().file_b(name, b"evil"))), why);
        assert_eq!(std::fs::read_dir(&c.root).unwrap().count(), 0, "{name:?}");
    }
}

#[test]
fn item01_dot_and_slash_as_file_symlink_dir() {
    let c = Case::new();
    let mode = std::fs::metadata(&c.root).unwrap().permissions().mode();
    // `.` as a directory: the root's attributes stay ours, nothing happens.
    c.apply(&one(Tar::new().dir_mode(".", 0o700))).unwrap();
    c.apply(&one(Tar::new().dir_mode("./", 0o777))).unwrap();
    assert_eq!(
        std::fs::metadata(&c.root).unwrap().permissions().mode(),
        mode
    );
    for t in [
        Tar::new().file(".", b"x"),
        Tar::new().symlink(".", "/"),
        Tar::new().symlink("./", "/tmp"),
    ] {
        refused(c.apply(&one(t)), "other than a directory for the root");
    }
    for t in [
        Tar::new().dir("/"),
        Tar::new().file("/", b"x"),
        Tar::new().symlink("/", "x"),
    ] {
        refused(c.apply(&one(t)), "absolute name");
    }
    assert!(std::fs::metadata(&c.root).unwrap().is_dir());
}

#[test]
fn item01_nul_non_utf8_and_length_limits() {
    let c = Case::new();
    refused(
        c.apply(&one(Tar::new().file_long(b"a\0b", b"x"))),
        "NUL byte in name",
    );
    // Non-UTF-8 names are bytes on illumos and Linux: kept, inside the root.
    c.apply(&one(Tar::new().file_b(b"caf\xe9", b"latin-1")))
        .unwrap();
    let name: &std::ffi::OsStr = std::os::unix::ffi::OsStrExt::from_bytes(b"caf\xe9");
    assert_eq!(std::fs::read(c.root.join(name)).unwrap(), b"latin-1");
    let long_comp = vec![b'a'; 256];
    refused(
        c.apply(&one(Tar::new().file_long(&long_comp, b"x"))),
        "path component is 256 bytes",
    );
    let mut long_path = Vec::new();
    while long_path.len() < 1100 {
        long_path.extend_from_slice(b"dir/");
    }
    long_path.extend_from_slice(b"f");
    refused(
        c.apply(&one(Tar::new().file_long(&long_path, b"x"))),
        "path is 1101 bytes, limit 1023",
    );
}

// ---------------------------------------------------------------------------------------------
// Item 2: symlink escapes.

#[test]
fn item02_symlink_parent_to_outside_is_rerooted() {
    let c = Case::new();
    let abs = c.outside_abs();
    // d -> /<tmp>/outside/etc, then d/passwd: lands at root/<tmp>/outside/etc/passwd.
    c.apply(&[
        Tar::new().symlink("d", &abs).finish(),
        Tar::new().file("d/passwd", b"image passwd").finish(),
    ])
    .unwrap();
    let inside = c.root.join(abs.trim_start_matches('/')).join("passwd");
    assert_eq!(std::fs::read(inside).unwrap(), b"image passwd");
    // Even within one layer.
    let c = Case::new();
    c.apply(&one(Tar::new()
        .symlink("d", "../../../outside/etc")
        .file("d/shadow", b"image shadow")))
        .unwrap();
    assert_eq!(c.read("outside/etc/shadow"), b"image shadow");
}

#[test]
fn item02_dotdot_targets_chains_and_loops() {
    let c = Case::new();
    c.apply(&one(Tar::new()
        .symlink("up", "../../..")
        .file("up/x", b"x")
        .symlink("a", "b")
        .symlink("b", "../../outside")
        .file("a/y", b"y")))
        .unwrap();
    assert_eq!(c.read("x"), b"x");
    assert_eq!(c.read("outside/y"), b"y");
    let c = Case::new();
    refused(
        c.apply(&one(Tar::new()
            .symlink("a", "b")
            .symlink("b", "a")
            .file("a/x", b"x"))),
        "more than 40 symlinks",
    );
}

#[test]
fn item02_absolute_target_rerooted_across_layers() {
    let c = Case::new();
    c.apply(&[
        Tar::new().dir("etc").symlink("etc2", "/etc").finish(),
        Tar::new().file("etc2/hosts", b"127.0.0.1 zone").finish(),
    ])
    .unwrap();
    assert_eq!(c.read("etc/hosts"), b"127.0.0.1 zone");
    // The link itself is kept as written: inside the zone /etc is the zone's own.
    assert_eq!(std::fs::read_link(c.p("etc2")).unwrap(), Path::new("/etc"));
}

#[test]
fn item02_symlink_then_dir_or_file_of_the_same_name() {
    let c = Case::new();
    let abs = c.outside_abs();
    // Across layers: the directory replaces the link, no chmod through it.
    c.apply(&[
        Tar::new()
            .symlink("d", &abs)
            .symlink("f", &format!("{abs}/passwd"))
            .finish(),
        Tar::new()
            .dir_mode("d", 0o700)
            .file("f", b"image file")
            .finish(),
    ])
    .unwrap();
    let m = std::fs::symlink_metadata(c.p("d")).unwrap();
    assert!(m.is_dir());
    assert_eq!(m.permissions().mode() & 0o777, 0o700);
    assert!(std::fs::symlink_metadata(c.p("f")).unwrap().is_file());
    assert_eq!(c.read("f"), b"image file");
    // Within one layer it is a duplicate path.
    let c = Case::new();
    refused(
        c.apply(&one(Tar::new().symlink("d", &abs).dir_mode("d", 0o777))),
        "same path appears twice",
    );
}

// ---------------------------------------------------------------------------------------------
// Item 3: hard links.

#[test]
fn item03_hardlinks_outside_missing_dirs_symlinks() {
    let c = Case::new();
    let abs = c.outside_abs();
    for (t, why) in [
        (
            Tar::new().hardlink("h", "../../etc/shadow"),
            "'..' in name".to_owned(),
        ),
        (
            Tar::new().hardlink("h", &format!("{abs}/shadow")),
            "absolute name".to_owned(),
        ),
        (
            Tar::new()
                .symlink("s", &format!("{abs}/shadow"))
                .hardlink("h", "s"),
            "hard link to a symlink".to_owned(),
        ),
        (
            Tar::new().hardlink("h", "missing"),
            "does not exist".to_owned(),
        ),
        (
            Tar::new().dir("d").hardlink("h", "d"),
            "hard link to a directory".to_owned(),
        ),
        (
            Tar::new().hardlink("h", "h"),
            "hard link to itself".to_owned(),
        ),
    ] {
        refused(c.apply(&one(t)), &why);
    }
    // A path whited out in the same layer is gone before the link.
    let c = Case::new();
    refused(
        c.apply(&[
            Tar::new().file("a", b"a").finish(),
            Tar::new().whiteout(".wh.a").hardlink("h", "a").finish(),
        ]),
        "does not exist",
    );
}

#[test]
fn item03_links_inside_and_overwrite_unlinks() {
    let c = Case::new();
    c.apply(&[
        Tar::new().file("a", b"orig").hardlink("b", "a").finish(),
        Tar::new().file("b", b"new").finish(),
    ])
    .unwrap();
    // The later file replaced the link instead of writing through the shared inode.
    assert_eq!(c.read("a"), b"orig");
    assert_eq!(c.read("b"), b"new");
    let c = Case::new();
    c.apply(&one(Tar::new()
        .dir("d")
        .file("d/a", b"same")
        .hardlink("e", "d/a")))
        .unwrap();
    let (a, e) = (
        std::fs::metadata(c.p("d/a")).unwrap(),
        std::fs::metadata(c.p("e")).unwrap(),
    );
    assert_eq!(a.ino(), e.ino());
    assert_eq!(a.nlink(), 2);
}

// ---------------------------------------------------------------------------------------------
// Item 4: whiteouts.

#[test]
fn item04_bad_whiteout_names() {
    let c = Case::new();
    for (name, why) in [
        (".wh.", "must name an entry"),
        (".wh..", "must name an entry"),
        (".wh...", "must name an entry"),
        ("d/.wh..wh.other", "only .wh..wh..opq"),
        ("/.wh.etc", "absolute name"),
    ] {
        refused(c.apply(&one(Tar::new().whiteout(name))), why);
    }
}

#[test]
fn item04_whiteouts_through_symlinks_stay_inside() {
    let c = Case::new();
    let abs = c.outside_abs();
    c.apply(&[
        Tar::new()
            .symlink("p", &abs)
            .symlink("q", "../../outside/etc")
            .finish(),
        Tar::new()
            .whiteout("p/.wh.passwd")
            .whiteout("q/.wh.shadow")
            .finish(),
        Tar::new().whiteout("p/.wh..wh..opq").finish(),
        // A whiteout for a path that never existed is a no-op.
        Tar::new()
            .whiteout("nowhere/.wh.nothing")
            .whiteout(".wh.ghost")
            .finish(),
    ])
    .unwrap();
    // `Case::apply` already checked that the sentinels outside are untouched.
    assert!(
        std::fs::symlink_metadata(c.p("p"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
}

#[test]
fn item04_whiteout_and_opaque_semantics() {
    let c = Case::new();
    let stats = c
        .apply(&[
            Tar::new()
                .file("gone", b"1")
                .dir("tree")
                .file("tree/leaf", b"2")
                .dir("d")
                .file("d/old", b"lower")
                .dir("d/sub")
                .file("d/sub/old", b"lower")
                .file("keep", b"3")
                .finish(),
            Tar::new()
                .whiteout(".wh.gone")
                .whiteout(".wh.tree")
                .file("d/new", b"upper")
                .file("d/sub/new", b"upper")
                // After same-layer children: they survive, lower ones go.
                .whiteout("d/.wh..wh..opq")
                .finish(),
        ])
        .unwrap();
    assert_eq!(stats[1].whiteouts, 3);
    assert!(!c.exists("gone") && !c.exists("tree"));
    assert!(!c.exists("d/old") && !c.exists("d/sub/old"));
    assert_eq!(c.read("d/new"), b"upper");
    assert_eq!(c.read("d/sub/new"), b"upper");
    assert_eq!(c.read("keep"), b"3");
    assert!(!c.exists("d/.wh..wh..opq") && !c.exists(".wh.gone"));
    // A whiteout of a path this layer created is ambiguous.
    refused(
        c.apply(&one(Tar::new().file("x", b"x").whiteout(".wh.x"))),
        "this layer created",
    );
}

// ---------------------------------------------------------------------------------------------
// Item 5: type flips.

#[test]
fn item05_type_flips() {
    let c = Case::new();
    let abs = c.outside_abs();
    c.apply(&[
        Tar::new()
            .file("f2d", b"file")
            .dir("d2f")
            .file("d2f/sub/deep", b"x")
            .dir("d2l")
            .file("d2l/x", b"x")
            .finish(),
        Tar::new()
            .dir("f2d")
            .file("f2d/child", b"c")
            .file("d2f", b"now a file")
            .symlink("d2l", &abs)
            .finish(),
    ])
    .unwrap();
    assert!(std::fs::symlink_metadata(c.p("f2d")).unwrap().is_dir());
    assert_eq!(c.read("f2d/child"), b"c");
    assert_eq!(c.read("d2f"), b"now a file");
    assert!(
        std::fs::symlink_metadata(c.p("d2l"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // The root itself can only be a directory.
    refused(
        c.apply(&one(Tar::new().file("./", b"x"))),
        "other than a directory for the root",
    );
    assert!(std::fs::symlink_metadata(&c.root).unwrap().is_dir());
}

// ---------------------------------------------------------------------------------------------
// Item 6: duplicates.

#[test]
fn item06_duplicate_paths_in_one_layer() {
    let c = Case::new();
    refused(
        c.apply(&one(Tar::new().file("a", b"1").file("a", b"2"))),
        "same path appears twice",
    );
    let c = Case::new();
    refused(
        c.apply(&one(Tar::new().file("a", b"1").file("./a", b"2"))),
        "same path appears twice",
    );
    // Across layers the same path is a normal replacement.
    let c = Case::new();
    c.apply(&[
        Tar::new().file("a", b"1").finish(),
        Tar::new().file("a", b"2").finish(),
    ])
    .unwrap();
    assert_eq!(c.read("a"), b"2");
}

// ---------------------------------------------------------------------------------------------
// Item 7: special entries.

#[test]
fn item07_devices_dropped_fifo_kept() {
    let c = Case::new();
    let mut chr = H::new(b"dev/null", b'3');
    chr.dev_major = 1;
    chr.dev_minor = 3;
    let mut blk = H::new(b"dev/sda", b'4');
    blk.dev_major = 1 << 40;
    blk.dev_minor = 1 << 40;
    let stats = c
        .apply(&one(Tar::new()
            .dir("dev")
            .entry(chr, &[])
            .entry(blk, &[])
            .entry(H::new(b"fifo", b'6'), &[])))
        .unwrap();
    assert_eq!(stats[0].devices_dropped, 2);
    assert!(!c.exists("dev/null") && !c.exists("dev/sda"));
    assert!(
        std::fs::symlink_metadata(c.p("fifo"))
            .unwrap()
            .file_type()
            .is_fifo()
    );
}

#[test]
fn item07_sparse_unknown_volume_refused_contiguous_and_global_ok() {
    for (flag, why) in [
        (b'S', "GNU sparse"),
        (b'Z', "unknown typeflag"),
        (b'V', "volume or multi-volume"),
        (b'M', "volume or multi-volume"),
    ] {
        let c = Case::new();
        refused(
            c.apply(&one(Tar::new().entry(H::new(b"x", flag), &[]))),
            why,
        );
    }
    let c = Case::new();
    let mut contiguous = H::new(b"c", b'7');
    contiguous.size = 3;
    c.apply(&one(Tar::new()
        .pax(b'g', &[("path", b"global-ignored"), ("comment", b"x")])
        .entry(contiguous, b"abc")))
        .unwrap();
    assert_eq!(c.read("c"), b"abc");
    assert!(!c.exists("global-ignored"));
}

// ---------------------------------------------------------------------------------------------
// Item 8: metadata.

#[test]
fn item08_special_bits_follow_the_owner_policy() {
    let c = Case::new();
    let mut suid = H::new(b"suid", b'0');
    suid.mode = 0o4755;
    let mut sticky = H::new(b"tmp", b'5');
    sticky.mode = 0o1777;
    let layer = one(Tar::new()
        .entry(suid.clone(), &[])
        .entry(sticky.clone(), &[]));
    // Without ownership applied, setuid would belong to the wrong owner: dropped.
    let no_chown = UnpackOptions {
        chown: false,
        ..UnpackOptions::default()
    };
    c.apply_with(&layer, &no_chown).unwrap();
    assert_eq!(
        std::fs::metadata(c.p("suid")).unwrap().mode() & 0o7777,
        0o755
    );
    assert_eq!(
        std::fs::metadata(c.p("tmp")).unwrap().mode() & 0o7777,
        0o1777
    );
    if UnpackOptions::default().chown {
        // Running as root: owner and setuid are applied as the image says.
        let c = Case::new();
        let mut owned = suid;
        owned.uid = 1234;
        owned.gid = 5678;
        c.apply(&one(Tar::new().entry(owned, &[]))).unwrap();
        let m = std::fs::metadata(c.p("suid")).unwrap();
        assert_eq!((m.uid(), m.gid(), m.mode() & 0o7777), (1234, 5678, 0o4755));
    }
}

#[test]
fn item08_ids_numbers_times_xattrs() {
    let c = Case::new();
    for (uid, gid) in [(1u64 << 31, 0u64), (0, 1 << 32)] {
        let mut h = H::new(b"big-id", b'0');
        h.uid = uid;
        h.gid = gid;
        refused(c.apply(&one(Tar::new().entry(h, &[]))), "not below 2^31");
    }
    // A negative base-256 number is refused by the parser.
    let mut neg = Tar::new().file("n", b"").unfinished();
    neg[108] = 0xff;
    let sum: u64 = {
        let mut b = neg[..512].to_vec();
        b[148..156].fill(b' ');
        b.iter().map(|&x| u64::from(x)).sum()
    };
    neg[148..156].copy_from_slice(format!("{sum:06o}\0 ").as_bytes());
    neg.extend_from_slice(&[0u8; 1024]);
    refused(c.apply(&[neg]), "negative base-256");
    // Far-future and negative times are clamped; a base-256 uid below 2^31 is fine; Linux
    // xattr namespaces (trusted.*, security.*) are not applied in a zone root.
    let c = Case::new();
    let mut future = H::new(b"future", b'0');
    future.mtime = 1 << 40;
    let mut b256 = H::new(b"b256", b'0');
    b256.uid = 3_000_000; // over 7 octal digits: written base-256
    let stats = c
        .apply(&one(Tar::new()
            .entry(future, &[])
            .pax(b'x', &[("mtime", b"-5")])
            .entry(H::new(b"past", b'0'), &[])
            .entry(b256, &[])
            .pax(
                b'x',
                &[
                    ("SCHILY.xattr.trusted.overlay.opaque", b"y"),
                    ("SCHILY.xattr.security.capability", b"\x01\x02"),
                ],
            )
            .file("xattrs", b"x")))
        .unwrap();
    assert_eq!(std::fs::metadata(c.p("past")).unwrap().mtime(), 0);
    let m = std::fs::metadata(c.p("future")).unwrap();
    // Clamped to 9999-12-31 at most; the file system may clamp further (ext4 stops in 2446).
    assert!(
        m.mtime() > 1 << 33 && m.mtime() <= 253_402_300_799,
        "{}",
        m.mtime()
    );
    assert_eq!(stats[0].xattrs_dropped, 2);
    // A huge xattr value is over the record limit before it is read.
    let c = Case::new();
    let big = vec![b'v'; (1 << 20) + 1];
    refused(
        c.apply(&one(Tar::new()
            .pax(b'x', &[("SCHILY.xattr.user.big", &big)])
            .file("x", b""))),
        "over the 1048576 byte limit",
    );
}

// ---------------------------------------------------------------------------------------------
// Item 9: resources.

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

#[test]
fn item09_gzip_bomb_and_zstd_window() {
    let c = Case::new();
    let root = RootDir::open(&c.root).unwrap();
    let zeros = vec![0u8; 64 << 20];
    let bomb = gzip(&Tar::new().file("big", &zeros).finish());
    assert!(bomb.len() < 1 << 20, "a bomb: {} bytes", bomb.len());
    let opts = UnpackOptions {
        limits: LayerLimits {
            max_uncompressed: 1 << 20,
            ..LayerLimits::default()
        },
        ..UnpackOptions::default()
    };
    let e = apply_stream(
        &root,
        &bomb[..],
        Compression::Gzip,
        Algorithm::Sha256,
        &opts,
    )
    .unwrap_err();
    assert!(
        validator::error_chain(&e).contains("larger than the limit of 1048576"),
        "{e:?}"
    );
    // A zstd frame asking for a 256 MiB window is refused at the default cap (2^27).
    let mut enc = zstd::stream::write::Encoder::new(Vec::new(), 1).unwrap();
    enc.set_parameter(zstd::zstd_safe::CParameter::WindowLog(28))
        .unwrap();
    enc.write_all(&Tar::new().file("z", b"z").finish()).unwrap();
    let z = enc.finish().unwrap();
    let e = apply_stream(
        &root,
        &z[..],
        Compression::Zstd,
        Algorithm::Sha256,
        &UnpackOptions::default(),
    )
    .unwrap_err();
    let msg = validator::error_chain(&e);
    assert!(
        msg.to_lowercase().contains("memory") || msg.contains("window"),
        "{msg}"
    );
}

#[test]
fn item09_sizes_records_counts_depth() {
    let c = Case::new();
    // Entry claiming 1 TB with a short body.
    let mut h = H::new(b"huge", b'0');
    h.size = 10;
    h.size_field = Some(1 << 40);
    refused(c.apply(&one(Tar::new().entry(h, b"0123456789"))), "missing");
    // A multi-GB PAX record or GNU long name is refused from its header.
    let mut pax = H::new(b"PaxHeader", b'x');
    pax.size_field = Some(5 << 30);
    refused(
        c.apply(&[Tar::new().entry(pax, &[]).unfinished()]),
        "over the 1048576 byte limit",
    );
    let mut gnu = H::new(b"././@LongLink", b'L');
    gnu.size_field = Some(5 << 30);
    refused(
        c.apply(&[Tar::new().entry(gnu, &[]).unfinished()]),
        "over the 1048576 byte limit",
    );
    // Entry count (10^6 in production; a small limit shows the mechanism).
    let few = UnpackOptions {
        limits: LayerLimits {
            tar: TarLimits {
                max_entries: 100,
                ..TarLimits::default()
            },
            ..LayerLimits::default()
        },
        ..UnpackOptions::default()
    };
    let mut t = Tar::new();
    for i in 0..101 {
        t = t.file(&format!("f{i}"), b"");
    }
    let c = Case::new();
    let e = c.apply_with(&one(t), &few).unwrap_err();
    assert!(validator::error_chain(&e).contains("more than 100 entries"));
    // Deep nesting: 300 levels is fine, beyond the path limit is refused.
    let c = Case::new();
    let deep: Vec<u8> = "d/".repeat(300).into_bytes();
    let mut name = deep.clone();
    name.extend_from_slice(b"leaf");
    c.apply(&one(Tar::new().file_long(&name, b"deep"))).unwrap();
    assert_eq!(c.read(&String::from_utf8(name).unwrap()), b"deep");
    let mut deeper: Vec<u8> = "d/".repeat(600).into_bytes();
    deeper.extend_from_slice(b"leaf");
    refused(
        c.apply(&one(Tar::new().file_long(&deeper, b"x"))),
        "limit 1023",
    );
}

#[test]
fn item09_stream_ends_members_garbage_checksums() {
    let c = Case::new();
    let root = RootDir::open(&c.root).unwrap();
    let opts = UnpackOptions::default();
    // Concatenated gzip members form one stream.
    let a = Tar::new().file("one", b"1").unfinished();
    let b = Tar::new().file("two", b"2").finish();
    let mut whole = a.clone();
    whole.extend_from_slice(&b);
    let mut two_members = gzip(&a);
    two_members.extend_from_slice(&gzip(&b));
    let s = apply_layer(
        &root,
        &two_members[..],
        Compression::Gzip,
        &Digest::sha256(&whole),
        &opts,
    )
    .unwrap();
    assert_eq!(s.entries, 2);
    assert_eq!(c.read("two"), b"2");
    // Trailing bytes after the end blocks count in the DiffID.
    let mut trailing = Tar::new().file("t", b"t").finish();
    let clean = Digest::sha256(&trailing);
    trailing.extend_from_slice(b"trailing junk");
    let c2 = Case::new();
    let root2 = RootDir::open(&c2.root).unwrap();
    let e = apply_layer(&root2, &trailing[..], Compression::None, &clean, &opts).unwrap_err();
    assert!(matches!(e, UnpackError::DiffId { .. }), "{e:?}");
    apply_layer(
        &root2,
        &trailing[..],
        Compression::None,
        &Digest::sha256(&trailing),
        &opts,
    )
    .unwrap();
    // Missing end blocks and bad checksums.
    refused(
        c.apply(&[Tar::new().file("m", b"m").unfinished()]),
        "without the end-of-archive",
    );
    let mut bad = H::new(b"bad", b'0');
    bad.bad_checksum = true;
    refused(c.apply(&one(Tar::new().entry(bad, &[]))), "checksum");
}

// ---------------------------------------------------------------------------------------------
// Item 10: parser differentials.

#[test]
fn item10_pax_and_gnu_ambiguities() {
    // PAX size vs ustar size, both directions.
    for (pax_size, ustar_size) in [(b"5".as_slice(), 3u64), (b"3", 5)] {
        let c = Case::new();
        let mut h = H::new(b"x", b'0');
        h.size = ustar_size;
        let t = Tar::new()
            .pax(b'x', &[("size", pax_size)])
            .entry(h, b"abcde");
        refused(c.apply(&one(t)), "disagrees with the ustar size");
    }
    // PAX path wins over the ustar name, and stays inside the root.
    let c = Case::new();
    c.apply(&one(Tar::new()
        .pax(b'x', &[("path", b"from-pax")])
        .file("from-ustar", b"p")))
        .unwrap();
    assert_eq!(c.read("from-pax"), b"p");
    assert!(!c.exists("from-ustar"));
    let c = Case::new();
    refused(
        c.apply(&one(Tar::new()
            .pax(b'x', &[("path", b"../escape")])
            .file("harmless", b"p"))),
        "'..' in name",
    );
    // Duplicate PAX keys, and a GNU long name with a PAX path.
    let c = Case::new();
    refused(
        c.apply(&one(Tar::new()
            .pax(b'x', &[("path", b"a"), ("path", b"b")])
            .file("x", b""))),
        "given twice",
    );
    refused(
        c.apply(&one(Tar::new()
            .gnu_long_name(b"gnu-name")
            .pax(b'x', &[("path", b"pax-name")])
            .file("x", b""))),
        "GNU long name and a PAX path",
    );
}

// ---------------------------------------------------------------------------------------------
// The DiffID gate itself.

#[test]
fn diff_id_mismatch_and_mislabelled_compression_fail() {
    let c = Case::new();
    let root = RootDir::open(&c.root).unwrap();
    let tar = Tar::new().file("a", b"a").finish();
    let opts = UnpackOptions::default();
    let e = apply_layer(
        &root,
        &tar[..],
        Compression::None,
        &Digest::sha256(b"other"),
        &opts,
    )
    .unwrap_err();
    assert!(validator::error_chain(&e).contains("differs from diff_id"));
    let gz = gzip(&tar);
    let e = apply_layer(
        &root,
        &gz[..],
        Compression::Zstd,
        &Digest::sha256(&tar),
        &opts,
    )
    .unwrap_err();
    assert!(
        validator::error_chain(&e).contains("the bytes are gzip"),
        "{e:?}"
    );
    let e = apply_layer(
        &root,
        &tar[..],
        Compression::Gzip,
        &Digest::sha256(&tar),
        &opts,
    )
    .unwrap_err();
    assert!(matches!(e, UnpackError::Open(_)));
    let s = apply_layer(
        &root,
        &gz[..],
        Compression::Gzip,
        &Digest::sha256(&tar),
        &opts,
    )
    .unwrap();
    assert_eq!(s.diff_id, Some(Digest::sha256(&tar)));
    assert_eq!(s.uncompressed_size, tar.len() as u64);
}
