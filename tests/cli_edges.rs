//! Small edges of daily use (issue 37): output into a closed pipe is success, `rdctl search`
//! at a registry without the package API says so and names the URL, a search that finds
//! nothing writes nothing to stderr, and pkg(5) FMRI spellings in `--package`.

use std::process::Command;

use serde_json::Value;

use crate::package_search::{TOOL_21, images, push};
use crate::transfer::umoci_image;
use crate::util::{Distribution, Server, ok, rdctl, s, tail, tempdir};

/// Runs `cmd` with stdout a pipe whose reader is already gone; returns (exit code, stderr).
fn into_closed_pipe(cmd: &mut Command) -> (Option<i32>, String) {
    let (reader, writer) = std::io::pipe().unwrap();
    drop(reader);
    let out = cmd
        .stdout(writer)
        .stderr(std::process::Stdio::piped())
        .output()
        .unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_closed_pipe_is_success_for_text_and_json() {
    let tmp = tempdir();
    let dir = tmp.path();
    let img = umoci_image(dir, "hello\n");
    let server = Server::start(&dir.join("data"), &[]);
    let image = format!("{}:v1", s(&img));
    let remote = format!("{}/a/b:v1", server.host());
    ok(rdctl().args(["push", &image, &remote]));
    for args in [
        vec!["validate", "--json", &image],
        vec!["validate", &image],
        vec!["inspect", "--json", &image],
        vec!["inspect", &image],
        vec!["ls", "--json", s(&img)],
        vec!["ls", s(&img)],
        vec!["inspect", "--json", &remote],
        vec!["ls", "--json", &remote],
        vec!["tag", "--json", &remote, "v2"],
        vec!["push", "--json", &image, &remote],
        vec!["search", "--json", "--package", "nothing", &server.host()],
        vec!["completions", "bash"],
    ] {
        let (code, err) = into_closed_pipe(rdctl().args(&args));
        assert_eq!(code, Some(0), "{args:?}: {err}");
        assert!(err.is_empty(), "{args:?} wrote to stderr: {err}");
    }
    drop(server);
}

#[test]
fn search_says_a_registry_has_no_package_api_and_no_match_is_quiet() {
    let tmp = tempdir();
    let dir = tmp.path();
    let storage = format!(
        "  filesystem:\n    rootdirectory: {}\n",
        s(&dir.join("dist"))
    );
    let dist = Distribution::start_v3(dir, &storage);
    let out = rdctl()
        .args(["search", "--package", "openssl", &dist.host()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("has no package search API")
            && err.contains(&format!("http://{}/v2/_rd/packages", dist.host())),
        "{err}"
    );
    assert!(!err.contains("not found ()"), "{err}");
    drop(dist);

    let server = Server::start(&dir.join("data"), &[]);
    for extra in [&[][..], &["--json"][..]] {
        let out = rdctl()
            .args(["search", "--package", "nothing-here", &server.host()])
            .args(extra)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", tail(&out.stderr));
        assert!(
            out.stderr.is_empty(),
            "{extra:?}: stderr: {}",
            tail(&out.stderr)
        );
        let stdout = String::from_utf8_lossy(&out.stdout);
        if extra.is_empty() {
            assert!(stdout.contains("no image at"), "{stdout}");
        } else {
            let doc: Value = serde_json::from_str(&stdout).unwrap();
            assert_eq!(doc["images"], serde_json::json!([]));
        }
    }
    drop(server);
}

#[test]
fn search_takes_pkg_fmri_spellings() {
    let tmp = tempdir();
    let dir = tmp.path();
    let server = Server::start(&dir.join("data"), &[]);
    let host = server.host();
    push(&images().old.0, &format!("{host}/zones/tool:1.0"), &[]);
    let fmris = |package: &str| -> Vec<String> {
        let out = ok(rdctl().args(["search", "--json", "--package", package, &host]));
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        doc["images"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|i| i["packages"].as_array().unwrap().iter())
            .map(|p| p["fmri"].as_str().unwrap().to_owned())
            .collect()
    };
    let plain = fmris("demo/tool");
    assert_eq!(plain, vec![TOOL_21.to_owned()]);
    for spelled in ["pkg:/demo/tool", "pkg:/demo/tool@2.1", "pkg:/tool"] {
        assert_eq!(fmris(spelled), plain, "{spelled}");
    }
    // A publisher the index cannot filter on is refused by name, not matched against nothing.
    let out = rdctl()
        .args(["search", "--package", "pkg://example.org/demo/tool", &host])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("publisher"), "{err}");
    drop(server);
}

/// `rdctl ARGS` in `dir`; (exit code, stderr).
fn run_in(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String) {
    let out = rdctl().current_dir(dir).args(args).output().unwrap();
    (
        out.status.code(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// Issue 51: `rdctl lock` names a missing `--ca-file` (as `ips list` does), hints at
/// `--update=PKG` when the package was given as a separate word, and says of an unknown
/// `--update=PKG` that the package is unknown, not that the lockfile is invalid.
#[test]
fn lock_errors_name_the_input() {
    use crate::builder_e2e::{TOOL_BIN, image_file, publish_fixture};
    let tmp = tempdir();
    let dir = tmp.path();
    let repo = publish_fixture(dir, TOOL_BIN);
    std::fs::write(dir.join("image.toml"), image_file(s(&repo))).unwrap();
    ok(rdctl().current_dir(dir).args(["lock", "image.toml"]));

    let (code, err) = run_in(dir, &["lock", "image.toml", "--ca-file", "ca.pem"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("ca.pem"), "{err}");

    for args in [
        vec!["lock", "image.toml", "--update", "demo/tool"],
        vec!["lock", "--update", "demo/tool", "image.toml"],
    ] {
        let (code, err) = run_in(dir, &args);
        assert_eq!(code, Some(2), "{args:?}: {err}");
        assert!(err.contains("--update=demo/tool"), "{args:?}: {err}");
    }

    let (code, err) = run_in(dir, &["lock", "image.toml", "--update=nosuch"]);
    assert_eq!(code, Some(2), "{err}");
    assert!(!err.contains("invalid lockfile"), "{err}");
    assert!(
        err.contains("--update=nosuch") && err.contains("demo/tool"),
        "{err}"
    );
}

/// Issue 51: `rdctl login` asks on the terminal (/dev/tty), as ssh and gpg do, not on
/// standard input: with stdin redirected it still prompts, and the answers come from the
/// terminal.
#[test]
fn login_prompts_on_the_terminal_not_on_stdin() {
    use std::io::Write as _;
    let tmp = tempdir();
    let dir = tmp.path();
    let server = Server::start(&dir.join("data"), &[]);
    let auth = dir.join("auth.json");
    let cmd = format!(
        "{} login --auth-file {} {} </dev/null",
        env!("CARGO_BIN_EXE_rdctl"),
        s(&auth),
        server.host()
    );
    // script(1) gives the command a terminal; what the test writes is typed on it.
    let mut child = std::process::Command::new("script")
        .args(["-qec", &cmd, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"alice\nsecret\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{text}");
    assert!(
        text.contains("Username:") && text.contains("Password:"),
        "{text}"
    );
    let saved = std::fs::read_to_string(&auth).unwrap();
    assert!(saved.contains(&server.host()), "{saved}");
    drop(server);
}
