//! `pkg search -r` (the real pkg(5) client) against `rdctl ips serve` and against the real
//! `pkg.depotd` serving the same pkgsend repository: the same queries must print the same
//! results. Like the other pkg5 tests, these say so loudly and check nothing where this
//! checkout has no `../shared/pkg5` to build the tools from.

use std::path::Path;
use std::time::{Duration, Instant};

use crate::pkg5_interop::{RealDepot, http_get, pkg, pkg5_bin, run, tool, write};
use crate::util::{ok, s, tempdir};

/// Two packages covering the action types and index keys pkg's search knows: a file, a link,
/// directories, a dependency, a summary and a classification in `demo/hello`; a license, a
/// user and a group in `demo/other`. Published with `pkgrepo create` and `pkgsend publish`.
fn pkgsend_repository(bin: &Path, dir: &Path) -> std::path::PathBuf {
    let proto = dir.join("proto");
    write(&proto.join("usr/bin/hello"), "#!/bin/sh\necho hello\n");
    write(&proto.join("COPYING"), "Permission is granted.\n");
    write(
        &dir.join("hello.p5m"),
        "set name=pkg.fmri value=pkg:/demo/hello@1.0-1\n\
         set name=pkg.summary value=\"Says hello\"\n\
         set name=info.classification value=\"org.opensolaris.category.2008:System/Core Tools\"\n\
         depend fmri=pkg:/demo/other@1.0 type=require\n\
         dir path=usr owner=root group=sys mode=0755\n\
         dir path=usr/bin owner=root group=bin mode=0755\n\
         file path=usr/bin/hello owner=root group=bin mode=0555\n\
         link path=usr/bin/hi target=hello\n",
    );
    write(
        &dir.join("other.p5m"),
        "set name=pkg.fmri value=pkg:/demo/other@1.0-1\n\
         set name=pkg.summary value=\"The other one\"\n\
         license COPYING license=MIT\n\
         dir path=var owner=root group=sys mode=0755\n\
         user username=demo uid=1234 group=other\n\
         group groupname=other gid=77\n",
    );
    let repo = dir.join("repo");
    ok(tool(bin, "pkgrepo").args(["create", s(&repo)]));
    ok(tool(bin, "pkgrepo").args(["add-publisher", "-s", s(&repo), "example.org"]));
    for m in ["hello.p5m", "other.p5m"] {
        ok(tool(bin, "pkgsend").args([
            "publish",
            "-s",
            s(&repo),
            "-d",
            s(&proto),
            s(&dir.join(m)),
        ]));
    }
    repo
}

/// The port of `http://127.0.0.1:PORT[/]`.
fn port(url: &str) -> u16 {
    url.trim_end_matches('/')
        .rsplit(':')
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// pkg.depotd indexes the repository when it starts and answers 503 until it is done.
fn wait_for_index(real: &RealDepot) {
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        match http_get(port(&real.url), "/search/1/False_2_None_None_hello") {
            Some((200, _)) => return,
            other if Instant::now() > deadline => panic!(
                "pkg.depotd's search never came up: {:?}\n{}",
                other.map(|(c, b)| (c, String::from_utf8_lossy(&b).into_owned())),
                real.log()
            ),
            _ => std::thread::sleep(Duration::from_millis(300)),
        }
    }
}

/// A user image whose only origin is `url`.
fn image(bin: &Path, root: &Path, url: &str) {
    ok(tool(bin, "pkg").args(["image-create", "--user", s(root)]));
    ok(pkg(bin, root).args([
        "set-publisher",
        "-O",
        url.trim_end_matches('/'),
        "example.org",
    ]));
}

/// Lines sorted: among packages sharing a token, pkg.depotd's order is the order it happened
/// to index them in (a set's), so only the lines themselves can be compared.
fn sorted(text: &str) -> Vec<String> {
    let mut v: Vec<String> = text.lines().map(str::to_owned).collect();
    v.sort();
    v
}

#[test]
fn pkg_search_r_prints_the_same_from_rdctl_ips_serve_as_from_pkg_depotd() {
    let Some(bin) = pkg5_bin() else { return };
    let tmp = tempdir();
    let dir = tmp.path();
    let repo = pkgsend_repository(&bin, dir);
    let real = RealDepot::start(&bin, &repo, dir);
    wait_for_index(&real);
    let ours = crate::ips_cli::Depot::start(&repo, dir);
    let (real_image, our_image) = (dir.join("real-image"), dir.join("our-image"));
    image(&bin, &real_image, &real.url);
    image(&bin, &our_image, &ours.url);

    let queries: &[&[&str]] = &[
        // A single term; two terms (AND: actions having both tokens); case.
        &["hello"],
        &["says", "hello"],
        &["-I", "Says"],
        &["-I", "says"],
        // Structured queries: key and token, package and action type, key alone.
        &["file:basename:hel*"],
        &["demo/hello:set:pkg.summary:"],
        &["basename:", "hi"],
        // Wildcards, a term only a file path has, the FMRI a depend action names.
        &["hel*"],
        &["/usr/bin/hello"],
        &["pkg:/demo/other@1.0"],
        &["demo/other"],
        // Set values: a classification's level, a user, a license name, a phrase.
        &["core"],
        &["demo"],
        &["mit"],
        &["'says hello'"],
        // OR, packages (-p, pkgs<>), output columns (-o) and headers off (-H).
        &["hello", "OR", "mit"],
        &["-p", "demo/other"],
        &["-p", "hello", "says"],
        &["pkgs<hello>"],
        &[
            "-o",
            "pkg.name,action.name,action.key,search.match_type",
            "hello",
        ],
        &["-H", "-o", "search.match,pkg.shortfmri", "*other*"],
        // Nothing found: exit 1 from both.
        &["nothing-at-all"],
        &["hello", "nothing-at-all"],
    ];
    for q in queries {
        let search = |image: &Path| run(pkg(&bin, image).args(["search", "-r"]).args(*q));
        let (real_code, real_out, real_err) = search(&real_image);
        let (our_code, our_out, our_err) = search(&our_image);
        let ctx = format!(
            "pkg search -r {q:?}\npkg.depotd ({real_code}):\n{real_out}{real_err}\n\
             rdctl ips serve ({our_code}):\n{our_out}{our_err}\nour log:\n{}",
            ours.log()
        );
        // Only these find nothing; everything else must find something, so that the
        // comparison is never of two empty answers.
        let none = [
            &["-I", "says"][..],
            &["nothing-at-all"],
            &["hello", "nothing-at-all"],
        ];
        let want = if none.contains(q) { 1 } else { 0 };
        assert_eq!(real_code, want, "{ctx}");
        assert_eq!(real_out.trim().is_empty(), want == 1, "{ctx}");
        assert_eq!(real_code, our_code, "{ctx}");
        assert_eq!(sorted(&real_out), sorted(&our_out), "{ctx}");
    }
}

#[test]
fn search_0_and_bad_queries_are_answered_as_pkg_depotd_answers_them() {
    let Some(bin) = pkg5_bin() else { return };
    let tmp = tempdir();
    let dir = tmp.path();
    let repo = pkgsend_repository(&bin, dir);
    let real = RealDepot::start(&bin, &repo, dir);
    wait_for_index(&real);
    let ours = crate::ips_cli::Depot::start(&repo, dir);
    let (real_port, our_port) = (port(&real.url), port(&ours.url));

    // versions/0 advertises both search versions, as pkg.depotd's does.
    let (_, versions) = http_get(our_port, "/versions/0/").unwrap();
    let versions = String::from_utf8(versions).unwrap();
    assert!(versions.lines().any(|l| l == "search 0 1"), "{versions}");
    let (_, real_versions) = http_get(real_port, "/versions/0/").unwrap();
    assert!(
        String::from_utf8_lossy(&real_versions)
            .lines()
            .any(|l| l == "search 0 1"),
        "pkg.depotd no longer says search 0 1"
    );

    // search/0: the older clients' format, every match, 200 even when nothing matches.
    for token in ["hello", "other", "demo", "MIT", "says%20hello", "nothing"] {
        let path = format!("/search/0/{token}");
        let (real_code, real_body) = http_get(real_port, &path).unwrap();
        let (our_code, our_body) = http_get(our_port, &path).unwrap();
        let (real_body, our_body) = (
            String::from_utf8(real_body).unwrap(),
            String::from_utf8(our_body).unwrap(),
        );
        assert_eq!(
            (real_code, sorted(&real_body)),
            (our_code, sorted(&our_body)),
            "{path}"
        );
    }

    // search/1: parse errors and mixed result types are 400 from both, with the reason.
    for (query, reason) in [
        ("False_2_None_None_(hello", "parse"),
        ("False_2_None_None_%3A%3A%3Ahello)", "parse"),
        (
            "False_2_None_None_p%3Chello%3E%20says",
            "same type of results",
        ),
        ("False_2_None_None_", "parse"),
    ] {
        let path = format!("/search/1/{query}");
        let (real_code, real_body) = http_get(real_port, &path).unwrap();
        let (our_code, our_body) = http_get(our_port, &path).unwrap();
        let our_body = String::from_utf8_lossy(&our_body).to_lowercase();
        assert_eq!((real_code, our_code), (400, 400), "{path}: {our_body}");
        assert!(
            String::from_utf8_lossy(&real_body)
                .to_lowercase()
                .contains(reason)
                && our_body.contains(reason),
            "{path}: {our_body}"
        );
    }
    // Paging: the start and count fields cut the same result (one package: the order is
    // fixed), and the raw answers are byte for byte pkg.depotd's.
    for query in [
        "False_2_1_1_%3A%3A%3Ahello",
        "True_2_None_None_%3A%3A%3Ahello",
        "False_1_None_None_p%3C%3A%3A%3Ahel*%3E",
    ] {
        let path = format!("/search/1/{query}");
        let real = http_get(real_port, &path).unwrap();
        let ours = http_get(our_port, &path).unwrap();
        assert_eq!(
            (real.0, String::from_utf8(real.1).unwrap()),
            (ours.0, String::from_utf8(ours.1).unwrap()),
            "{path}"
        );
    }
}
