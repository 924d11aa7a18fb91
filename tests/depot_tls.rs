//! Depots over TLS, end to end: `rdctl ips serve --tls-cert/--tls-key` with a certificate
//! from a private CA made at test time, read by `rdctl ips list`, `rdctl lock` and `rdctl
//! build`, which refuse it with a certificate error naming the URL until told to trust the CA
//! (`--ca-file`, a `--cert-dir` in certs.d layout) or not to verify (`--insecure`); and an
//! `https://` URL at a plain HTTP depot fails after one connect timeout, naming the URL.

use std::fs;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::builder_e2e::{TOOL_BIN, image_file, publish_fixture};
use crate::ips_cli::Depot;
use crate::registry_tls::Pki;
use crate::util::{rdctl, s, tail, tempdir};

struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

fn run(cmd: &mut Command) -> Run {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    Run {
        code: out.status.code(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: tail(&out.stderr),
    }
}

fn succeeds(what: &str, r: &Run, depot: &Depot) {
    assert_eq!(
        r.code,
        Some(0),
        "{what}: stdout:\n{}\nstderr:\n{}\ndepot:\n{}",
        r.stdout,
        r.stderr,
        depot.log()
    );
}

/// Exit status 2 and a TLS certificate error naming the depot.
fn refused(what: &str, r: &Run, url: &str) {
    assert_eq!(r.code, Some(2), "{what}: {}", r.stderr);
    assert!(
        r.stderr.contains(url)
            && r.stderr.contains("tls failure")
            && r.stderr.contains("certificate is not trusted"),
        "{what}: {}",
        r.stderr
    );
}

#[test]
fn https_depot_with_a_private_ca_needs_the_ca_file_a_cert_dir_or_insecure() {
    let tmp = tempdir();
    let dir = tmp.path();
    let repo = publish_fixture(dir, TOOL_BIN);
    let pki_dir = dir.join("pki");
    fs::create_dir_all(&pki_dir).unwrap();
    let pki = Pki::new(&pki_dir);
    pki.issue(1);
    let depot = Depot::start_with(
        &repo,
        dir,
        &["--tls-cert", s(&pki.cert()), "--tls-key", s(&pki.key())],
    );
    let url = depot.url.clone();
    assert!(url.starts_with("https://127.0.0.1:"), "{url}");
    let ca = pki.ca_file();
    // certs.d layout: DIR/HOST:PORT/*.crt.
    let certs_d = dir.join("certs.d");
    let host = url
        .trim_start_matches("https://")
        .trim_end_matches('/')
        .to_owned();
    fs::create_dir_all(certs_d.join(&host)).unwrap();
    fs::copy(&ca, certs_d.join(&host).join("ca.crt")).unwrap();

    // rdctl ips list.
    let list = |extra: &[&str]| run(rdctl().args(["ips", "list", &url]).args(extra));
    refused("ips list", &list(&[]), &url);
    let expected = "pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z\n\
                    pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z\n";
    for flags in [
        &["--ca-file", s(&ca)][..],
        &["--cert-dir", s(&certs_d)],
        &["--insecure"],
    ] {
        let r = list(flags);
        succeeds(&format!("ips list {flags:?}"), &r, &depot);
        assert_eq!(r.stdout, expected, "{flags:?}");
        if flags == ["--insecure"] {
            assert!(r.stderr.contains("warning: --insecure"), "{}", r.stderr);
        }
    }

    // rdctl lock, then rdctl build (payloads over TLS too).
    let work = dir.join("work");
    fs::create_dir_all(&work).unwrap();
    let image = work.join("image.toml");
    fs::write(&image, image_file(&url)).unwrap();
    refused("lock", &run(rdctl().args(["lock", s(&image)])), &url);
    assert!(!work.join("image.lock.json").exists());
    let locked = run(rdctl().args(["lock", s(&image), "--ca-file", s(&ca)]));
    succeeds("lock --ca-file", &locked, &depot);
    assert_eq!(locked.stdout, expected);
    let out = work.join("out");
    let build = |extra: &[&str]| {
        run(rdctl()
            .args(["build", s(&image), "--output", s(&out), "--quiet"])
            .args(extra))
    };
    refused("build", &build(&[]), &url);
    let built = build(&["--cert-dir", s(&certs_d), "--json"]);
    succeeds("build --cert-dir", &built, &depot);
    let summary: serde_json::Value = serde_json::from_str(&built.stdout).unwrap();
    assert!(
        summary["manifest"]
            .as_str()
            .is_some_and(|d| d.starts_with("sha256:")),
        "{summary}"
    );
    assert!(out.join("index.json").is_file());
}

#[test]
fn https_at_a_plain_http_depot_fails_in_seconds_naming_the_url() {
    let tmp = tempdir();
    let dir = tmp.path();
    let repo = dir.join("repo");
    write_minimal_repo(&repo, dir);
    let depot = Depot::start(&repo, dir);
    let url = depot.url.replacen("http://", "https://", 1);
    let started = Instant::now();
    let r = run(rdctl().args(["ips", "list", &url]));
    let elapsed = started.elapsed();
    assert_eq!(r.code, Some(2), "{}", r.stderr);
    // One connect timeout (10 s), not retried.
    assert!(elapsed < Duration::from_secs(20), "{elapsed:?}");
    assert!(
        r.stderr.contains(&url)
            && r.stderr.contains("tls failure")
            && r.stderr.contains(&depot.url),
        "{}",
        r.stderr
    );
}

/// A repository with one package, published with `rdctl ips publish`.
fn write_minimal_repo(repo: &Path, dir: &Path) {
    let manifest = dir.join("one.p5m");
    fs::write(
        &manifest,
        "set name=pkg.fmri value=pkg:/demo/one@1.0-1\ndir path=etc owner=root group=sys mode=0755\n",
    )
    .unwrap();
    let r = run(rdctl().args([
        "ips",
        "publish",
        "--repo",
        s(repo),
        "--publisher",
        "example.org",
        s(&manifest),
    ]));
    assert_eq!(r.code, Some(0), "{}", r.stderr);
}
