//! `rdctl ips`: publish a fixture package set, read it back from the file repository and
//! through `rdctl ips serve` over HTTP, corrupt it, and lint a bad manifest.

use std::fs;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use crate::util::{ok, rdctl, s, tail, tempdir};

/// A package with every kind of action the issue names: a preserved file, a user, a group,
/// a link, a relative hardlink, directories.
const FIXTURE: &str = r#"set name=pkg.fmri value=pkg:/demo/fixture@1.0-1
set name=pkg.summary value="Fixture for the rdctl ips round trip"
set name=pkg.description value="A preserved file, \"quoted\" text, "\
    'and a continuation'
dir path=etc owner=root group=sys mode=0755
dir path=usr/bin owner=root group=bin mode=0755
file path=etc/motd owner=root group=sys mode=0644 preserve=true
file path=usr/bin/hello owner=root group=bin mode=0555
hardlink path=usr/bin/hi target=hello
link path=usr/bin/greet target=./hello
group groupname=demo gid=1234
user username=demo uid=1234 group=demo home-dir=/export/home/demo login-shell=/bin/sh
"#;

/// A second package with a license, whose payload source is named by the positional field.
const BASE: &str = "set name=pkg.fmri value=pkg:/demo/base@2.0-1
set name=pkg.summary value=\"Base package\"
license COPYING license=MIT
dir path=var owner=root group=sys mode=0755
";

const MOTD: &str = "Welcome to the fixture zone.\n";
const HELLO: &str = "#!/bin/sh\necho hello\n";
const COPYING: &str = "Permission is hereby granted, free of charge.\n";

/// `rdctl ips serve` on 127.0.0.1:0; killed and reaped on drop.
pub(crate) struct Depot {
    child: Child,
    /// `http://127.0.0.1:PORT/` (`https://` when serving TLS).
    pub(crate) url: String,
    stderr: PathBuf,
}

impl Depot {
    /// Serves `repo`; the server's stderr goes to a file in `dir`.
    pub(crate) fn start(repo: &Path, dir: &Path) -> Depot {
        let depot = Depot::start_with(repo, dir, &[]);
        assert!(depot.url.starts_with("http://127.0.0.1:"), "{}", depot.url);
        depot
    }

    /// Serves `repo` with more `rdctl ips serve` arguments (`--tls-cert`, `--tls-key`).
    pub(crate) fn start_with(repo: &Path, dir: &Path, extra: &[&str]) -> Depot {
        let stderr = dir.join("serve.stderr");
        let mut child = rdctl()
            .args(["ips", "serve", "--repo", s(repo), "--listen", "127.0.0.1:0"])
            .args(extra)
            .stdout(Stdio::piped())
            .stderr(fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("start rdctl ips serve");
        let mut line = String::new();
        let read = BufReader::new(child.stdout.take().expect("piped stdout")).read_line(&mut line);
        let url = line.trim().strip_prefix("listening on ").map(str::to_owned);
        let Some(url) = url.filter(|_| read.is_ok()) else {
            let _ = child.kill();
            let status = child.wait();
            panic!(
                "rdctl ips serve printed {line:?} ({status:?}); stderr:\n{}",
                tail(&fs::read(&stderr).unwrap_or_default())
            );
        };
        Depot { child, url, stderr }
    }

    /// The server's stderr tail, for failure messages.
    pub(crate) fn log(&self) -> String {
        tail(&fs::read(&self.stderr).unwrap_or_default())
    }
}

impl Drop for Depot {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Run {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    Run {
        code: out.status.code().expect("exited by a signal"),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: tail(&out.stderr),
    }
}

fn ips(args: &[&str]) -> Run {
    run(rdctl().arg("ips").args(args))
}

/// Runs an `rdctl ips` query against both REPOs and checks the outputs are identical and
/// succeed.
fn same(args: &[&str], file: &str, depot: &Depot) -> String {
    let with = |repo: &str| {
        let mut a = vec![args[0], repo];
        a.extend(&args[1..]);
        let r = ips(&a);
        assert_eq!(
            r.code,
            0,
            "rdctl ips {a:?}: stdout:\n{}\nstderr:\n{}\nserver stderr:\n{}",
            r.stdout,
            r.stderr,
            depot.log()
        );
        r.stdout
    };
    let from_file = with(file);
    let from_http = with(&depot.url);
    assert_eq!(from_file, from_http, "rdctl ips {args:?}: file vs http");
    from_file
}

fn write(path: &Path, text: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, text).unwrap();
}

/// The one manifest file stored for a package stem (`demo/x` → `pkg/demo%2Fx/<version>`).
fn stored_manifest(repo: &Path, quoted_stem: &str) -> PathBuf {
    let dir = repo.join("publisher/example.org/pkg").join(quoted_stem);
    let mut files: Vec<_> = fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    files.pop().unwrap()
}

#[test]
fn publish_serve_read_back_corrupt_and_lint() {
    let tmp = tempdir();
    let dir = tmp.path();
    let proto = dir.join("proto");
    write(&proto.join("etc/motd"), MOTD);
    write(&proto.join("usr/bin/hello"), HELLO);
    write(&proto.join("COPYING"), COPYING);
    write(&dir.join("fixture.p5m"), FIXTURE);
    write(&dir.join("base.p5m"), BASE);
    let repo = dir.join("repo");
    let r = s(&repo);

    // Publish into a repository that does not exist yet, then into the existing one.
    let mut fmris = Vec::new();
    for m in ["fixture.p5m", "base.p5m"] {
        let out = ok(rdctl().args([
            "ips",
            "publish",
            "--repo",
            r,
            "--publisher",
            "example.org",
            "--proto",
            s(&proto),
            s(&dir.join(m)),
        ]));
        fmris.push(String::from_utf8(out.stdout).unwrap().trim().to_owned());
    }
    assert!(repo.join("pkg5.repository").is_file());
    assert!(
        fmris[0].starts_with("pkg://example.org/demo/fixture@1.0,5.11-1:"),
        "{fmris:?}"
    );
    assert!(
        fmris[1].starts_with("pkg://example.org/demo/base@2.0,5.11-1:"),
        "{fmris:?}"
    );

    let depot = Depot::start(&repo, dir);

    // Listing: both packages, sorted, the same from both readers.
    let listed = same(&["list"], r, &depot);
    assert_eq!(listed, format!("{}\n{}\n", fmris[1], fmris[0]));
    assert_eq!(
        same(&["list", "demo/fixture@1"], r, &depot),
        format!("{}\n", fmris[0])
    );
    let none = ips(&["list", r, "demo/nothing"]);
    assert_eq!(none.code, 1, "{}", none.stderr);
    assert!(none.stderr.contains("demo/nothing"), "{}", none.stderr);

    // Manifests: byte-identical over HTTP, from the file reader and on disk.
    let fixture_path = stored_manifest(&repo, "demo%2Ffixture");
    let on_disk = fs::read_to_string(&fixture_path).unwrap();
    let manifests = same(
        &["contents", "--manifest", "demo/fixture", "demo/base"],
        r,
        &depot,
    );
    let base_path = stored_manifest(&repo, "demo%2Fbase");
    assert_eq!(
        manifests,
        on_disk.clone() + &fs::read_to_string(&base_path).unwrap()
    );
    // What was published is what the fixture says, with hashes, sizes and the full FMRI.
    for needle in [
        "preserve=true",
        "path=etc/motd",
        "hardlink path=usr/bin/hi target=hello",
        "link path=usr/bin/greet target=./hello",
        "group gid=1234 groupname=demo",
        "username=demo",
        &format!("pkg.size={}", MOTD.len()),
        &format!("value={}", fmris[0]),
    ] {
        assert!(on_disk.contains(needle), "{needle:?} not in\n{on_disk}");
    }

    // Contents and info verify every payload and agree between the readers.
    let contents = same(&["contents", "demo/fixture", "demo/base"], r, &depot);
    for needle in [
        format!(
            "{}\tfile\tetc/motd\t{} bytes verified\n",
            fmris[0],
            MOTD.len()
        ),
        format!(
            "{}\tfile\tusr/bin/hello\t{} bytes verified\n",
            fmris[0],
            HELLO.len()
        ),
        format!("{}\thardlink\tusr/bin/hi\t-> hello\n", fmris[0]),
        format!("{}\tlink\tusr/bin/greet\t-> ./hello\n", fmris[0]),
        format!("{}\tuser\tdemo\tuid=1234\n", fmris[0]),
        format!("{}\tgroup\tdemo\tgid=1234\n", fmris[0]),
        format!("{}\tdir\tusr/bin\t0755\n", fmris[0]),
        format!(
            "{}\tset\tpkg.description\tA preserved file, \"quoted\" text, and a continuation\n",
            fmris[0]
        ),
        format!(
            "{}\tlicense\tMIT\t{} bytes verified\n",
            fmris[1],
            COPYING.len()
        ),
    ] {
        assert!(contents.contains(&needle), "{needle:?} not in\n{contents}");
    }
    let info = same(&["info", "demo/fixture"], r, &depot);
    for needle in [
        "        Name: demo/fixture\n".to_owned(),
        "     Summary: Fixture for the rdctl ips round trip\n".to_owned(),
        format!("        FMRI: {}\n", fmris[0]),
        format!(
            "    Payloads: 2 verified, {} bytes\n",
            MOTD.len() + HELLO.len()
        ),
    ] {
        assert!(info.contains(&needle), "{needle:?} not in\n{info}");
    }

    // Corrupt the payload of usr/bin/hello: both readers name the package and the file.
    let hello_hash = on_disk
        .lines()
        .find(|l| l.starts_with("file ") && l.contains("path=usr/bin/hello"))
        .and_then(|l| l.split(' ').nth(1))
        .expect("hello's file action has a positional hash")
        .to_owned();
    let payload = repo
        .join("publisher/example.org/file")
        .join(&hello_hash[..2])
        .join(&hello_hash);
    assert!(payload.is_file(), "{}", payload.display());
    let mut stored = fs::read(&payload).unwrap();
    let mid = stored.len() / 2;
    stored[mid] ^= 0xff;
    fs::write(&payload, &stored).unwrap();
    for (repo_arg, names) in [(r, s(&payload)), (depot.url.as_str(), "")] {
        for cmd in ["info", "contents"] {
            let out = ips(&[cmd, repo_arg, "demo/fixture"]);
            assert_eq!(
                out.code, 1,
                "{cmd} {repo_arg} with a corrupt payload: {}\n{}",
                out.stdout, out.stderr
            );
            for needle in [fmris[0].as_str(), "file usr/bin/hello", names] {
                assert!(
                    out.stderr.contains(needle),
                    "{cmd} {repo_arg}: {needle:?} not in\n{}",
                    out.stderr
                );
            }
        }
    }
    let out = ips(&["info", &depot.url, "demo/fixture"]);
    assert!(
        out.stdout.contains("1 verified") && out.stdout.contains("1 FAILED"),
        "the good payload still verifies:\n{}",
        out.stdout
    );

    // Corrupt the manifest of demo/base: reported with the package and the file (or URL).
    let mut text = fs::read_to_string(&base_path).unwrap();
    text.push_str("dir path=opt owner=root group=sys mode=0755\n");
    fs::write(&base_path, text).unwrap();
    for (repo_arg, names) in [(r, s(&base_path)), (depot.url.as_str(), "manifest/0/")] {
        let out = ips(&["contents", "--manifest", repo_arg, "demo/base"]);
        assert_eq!(out.code, 1, "{repo_arg}: {}\n{}", out.stdout, out.stderr);
        assert!(out.stdout.is_empty(), "nothing printed: {}", out.stdout);
        for needle in [fmris[1].as_str(), "corrupt", names] {
            assert!(
                out.stderr.contains(needle),
                "{repo_arg}: {needle:?} not in\n{}",
                out.stderr
            );
        }
    }
    drop(depot);

    // Lint: every error, with file, line and column; exit 1.
    let bad = dir.join("bad.p5m");
    write(
        &bad,
        "set name=pkg.fmri value=pkg:/demo/bad@1.0\n\
         set name=pkg.summary value=\"unterminated\n\
         dir path=usr owner=root group=bin mode=0755\n\
         dir path=opt owner=root group=bin mode=nine\n\
         frobnicate path=x\n",
    );
    let out = ips(&["lint", s(&bad)]);
    assert_eq!(out.code, 1, "{}\n{}", out.stdout, out.stderr);
    let b = s(&bad);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert_eq!(lines.len(), 4, "{}", out.stdout);
    assert!(
        lines[0].starts_with(&format!("{b}:2:41: unfinished quoted value")),
        "{}",
        out.stdout
    );
    assert!(
        lines[1].starts_with(&format!("{b}:4:1: invalid mode \"nine\"")),
        "{}",
        out.stdout
    );
    assert!(
        lines[2].starts_with(&format!("{b}:5:1: unknown action type \"frobnicate\"")),
        "{}",
        out.stdout
    );
    assert_eq!(lines[3], format!("{b}: 3 error(s)"));
    let good = ips(&["lint", s(&dir.join("fixture.p5m"))]);
    assert_eq!(
        (good.code, good.stdout.as_str()),
        (0, ""),
        "{}",
        good.stderr
    );
}

#[test]
fn help_has_an_example_for_every_ips_command() {
    for cmd in ["publish", "serve", "list", "info", "contents", "lint"] {
        let out = ok(rdctl().args(["ips", cmd, "--help"]));
        let help = String::from_utf8(out.stdout).unwrap();
        assert!(
            help.contains(&format!("  rdctl ips {cmd} ")),
            "no example in `rdctl ips {cmd} --help`:\n{help}"
        );
    }
}

/// Every file under `root` with its bytes, sorted: a repository's whole state.
fn snapshot(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in fs::read_dir(&d).unwrap_or_else(|e| panic!("{}: {e}", d.display())) {
            let path = e.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else {
                let bytes = fs::read(&path).unwrap();
                out.push((path, bytes));
            }
        }
    }
    out.sort();
    out
}

#[test]
fn lint_and_publish_refuse_what_pkg_would_refuse() {
    let tmp = tempdir();
    let dir = tmp.path();
    let proto = dir.join("proto");
    write(&proto.join("usr/bin/tool"), HELLO);
    write(&proto.join("x"), HELLO);
    // A repository holding one good package, to show a refusal leaves it unchanged.
    let repo = dir.join("repo");
    write(&dir.join("base.p5m"), BASE);
    write(&proto.join("COPYING"), COPYING);
    let publish = |manifest: &Path| {
        ips(&[
            "publish",
            "--repo",
            s(&repo),
            "--publisher",
            "example.org",
            "--proto",
            s(&proto),
            s(manifest),
        ])
    };
    let base = publish(&dir.join("base.p5m"));
    assert_eq!(base.code, 0, "{}", base.stderr);
    let before = snapshot(&repo);

    // (file name, manifest, the line lint prints after "FILE")
    let cases = [
        (
            "no-owner.p5m",
            "set name=pkg.fmri value=pkg:/demo/tool@1.0-1\n\
             dir path=usr/bin owner=root group=bin mode=0755\n\
             file path=usr/bin/tool group=bin mode=0555\n",
            ":3:1: owner is required (file usr/bin/tool) [required-attr]",
        ),
        (
            "no-fmri.p5m",
            "set name=pkg.summary value=\"no name\"\n\
             file path=x owner=root group=bin mode=0644\n",
            ": no set name=pkg.fmri action: the manifest must name its package and version \
             [pkg-fmri-missing]",
        ),
        (
            "dir-and-file.p5m",
            "set name=pkg.fmri value=pkg:/demo/clash@1.0-1\n\
             dir path=x owner=root group=bin mode=0755\n\
             file path=x owner=root group=bin mode=0644\n",
            ":3:1: path x is delivered as a file here and as a dir on line 2 [path-types]",
        ),
    ];
    for (name, text, want) in cases {
        let file = dir.join(name);
        write(&file, text);
        let f = s(&file);
        let lint = ips(&["lint", f]);
        assert_eq!(
            lint.code, 1,
            "lint {name}:\n{}\n{}",
            lint.stdout, lint.stderr
        );
        let lines: Vec<&str> = lint.stdout.lines().collect();
        assert_eq!(
            lines,
            [format!("{f}{want}"), format!("{f}: 1 error(s)")],
            "lint {name}"
        );

        let refused = publish(&file);
        assert_eq!(refused.code, 2, "publish {name}:\n{}", refused.stderr);
        assert_eq!(refused.stdout, "", "publish {name} printed an FMRI");
        // The same messages as lint, then why nothing was published.
        assert!(
            refused.stderr.contains(&format!("{f}{want}\n")),
            "publish {name}:\n{}",
            refused.stderr
        );
        assert!(
            refused
                .stderr
                .contains("refused: 1 error(s); nothing was published"),
            "publish {name}:\n{}",
            refused.stderr
        );
        assert!(
            snapshot(&repo) == before,
            "publish {name} changed the repository"
        );
    }
}

#[test]
fn a_failed_first_publish_leaves_no_repository_and_says_to_pass_proto() {
    let tmp = tempdir();
    let dir = tmp.path();
    let repo = dir.join("repo");
    write(&dir.join("base.p5m"), BASE);
    let r = ips(&[
        "publish",
        "--repo",
        s(&repo),
        "--publisher",
        "example.org",
        s(&dir.join("base.p5m")),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr
            .contains("no proto directory was given to read COPYING from (pass the directory that holds the package's files, `--proto DIR`)"),
        "{}",
        r.stderr
    );
    assert!(
        !repo.exists(),
        "the repository this publish created is gone"
    );

    // With a proto directory that lacks the file: the message names the directory. A
    // directory that was there stays, as it was.
    let proto = dir.join("proto");
    write(&proto.join("other"), HELLO);
    write(&repo.join("README"), "mine\n");
    let r = ips(&[
        "publish",
        "--repo",
        s(&repo),
        "--publisher",
        "example.org",
        "--proto",
        s(&proto),
        s(&dir.join("base.p5m")),
    ]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    assert!(
        r.stderr.contains(&format!(
            "no payload: COPYING is not in the proto directory {}",
            proto.display()
        )),
        "{}",
        r.stderr
    );
    let left: Vec<_> = fs::read_dir(&repo)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(left, ["README"], "only what was there before stays");
}

#[test]
fn ips_serve_listens_on_loopback_port_10000_by_default() {
    let r = ips(&["serve", "--help"]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    assert!(
        r.stdout.contains("[default: 127.0.0.1:10000]"),
        "{}",
        r.stdout
    );
}

#[test]
fn shipped_example_lints_clean() {
    let manifests = crate::util::root().join("examples/hello/manifests");
    for m in ["hello.p5m", "system-base.p5m"] {
        let out = ips(&["lint", s(&manifests.join(m))]);
        assert_eq!(
            (out.code, out.stdout.as_str()),
            (0, ""),
            "{m}: {}",
            out.stderr
        );
    }
}
