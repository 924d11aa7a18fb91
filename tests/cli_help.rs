//! The command line's own documentation: every subcommand's `--help` shows an example and its
//! exit status, `rdctl man` writes a page for each one, and `rdctl completions` covers them.
//! The subcommands are found by walking the `Commands:` sections of the help output, so a new
//! subcommand is checked without being listed here.

use std::collections::BTreeSet;

use crate::util::{ok, rdctl, s, tempdir};

fn help(path: &[String]) -> String {
    let out = ok(rdctl().args(path).arg("--help"));
    String::from_utf8(out.stdout).unwrap()
}

/// The subcommand names listed under `Commands:` (without `help`).
fn subcommands(help: &str) -> Vec<String> {
    help.lines()
        .skip_while(|l| *l != "Commands:")
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_owned)
        .collect()
}

/// Every subcommand path below `rdctl`, parents before children.
fn all_paths() -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut pending = vec![Vec::new()];
    while let Some(path) = pending.pop() {
        for sub in subcommands(&help(&path)) {
            let mut p = path.clone();
            p.push(sub);
            pending.push(p.clone());
            out.push(p);
        }
    }
    out
}

#[test]
fn every_subcommand_help_has_an_example_and_exit_status() {
    let paths = all_paths();
    // The walk reaches the nested ones (the list is not hard-coded, but it must not be empty).
    for expected in [
        "build",
        "ips publish",
        "registry serve",
        "worker status",
        "completions",
        "man",
    ] {
        assert!(
            paths.iter().any(|p| p.join(" ") == expected),
            "{expected} not found in {paths:?}"
        );
    }
    let mut missing = Vec::new();
    for p in std::iter::once(Vec::new()).chain(paths) {
        let h = help(&p);
        let examples = h
            .split_once("\nExample")
            .map(|(_, rest)| rest)
            .unwrap_or_default();
        // An example is a line that runs rdctl, under an Example(s): heading.
        let has_example = examples
            .lines()
            .any(|l| l.trim_start().starts_with("rdctl ") || l.contains(" rdctl "));
        if !has_example {
            missing.push(format!("rdctl {}: no example", p.join(" ")));
        }
        // Leaf commands say what their exit status means.
        if subcommands(&h).is_empty() && !h.contains("Exit status") {
            missing.push(format!("rdctl {}: no exit status", p.join(" ")));
        }
    }
    assert!(missing.is_empty(), "{missing:#?}");
}

/// Why an example line cannot be pasted into a shell, if it cannot: every line of an
/// `Example(s):` block is a command, a `#` comment, the continuation of a command ending in
/// `\`, or a command followed by `  # ...`; never a command followed by bare prose.
fn example_line_problem(line: &str, continued: bool) -> Option<&'static str> {
    let l = line.trim();
    if l.starts_with('#') || continued {
        return None;
    }
    // A command runs rdctl (after environment assignments, or piped into it).
    let first = l.split_whitespace().next().unwrap_or_default();
    let runs_rdctl = first == "rdctl"
        || l.contains(" rdctl ")
        || l.contains("$(rdctl ")
        || (first.contains('=') && l.ends_with('\\'));
    if !runs_rdctl {
        return Some("neither a command nor a # comment");
    }
    // Prose after a command is separated by a run of spaces; it must be a comment.
    match l.find("  ") {
        Some(at) if !l[at..].trim_start().starts_with('#') => {
            Some("prose after the command is not a # comment")
        }
        _ => None,
    }
}

/// The lines of the `Example:`/`Examples:` block of a help text (up to the first blank line).
fn example_lines(help: &str) -> Vec<&str> {
    help.lines()
        .skip_while(|l| !(l.starts_with("Example:") || l.starts_with("Examples:")))
        .skip(1)
        .take_while(|l| !l.trim().is_empty())
        .collect()
}

#[test]
fn example_lines_can_be_pasted_into_a_shell() {
    let mut bad = Vec::new();
    for p in std::iter::once(Vec::new()).chain(all_paths()) {
        let h = help(&p);
        let mut continued = false;
        for line in example_lines(&h) {
            if let Some(why) = example_line_problem(line, continued) {
                bad.push(format!("rdctl {} --help: {why}: {line:?}", p.join(" ")));
            }
            continued = line.trim_end().ends_with('\\');
        }
    }
    assert!(bad.is_empty(), "{bad:#?}");
    // The check itself tells the kinds apart.
    for (line, ok) in [
        ("  rdctl ls HOST", true),
        ("  rdctl ls HOST   # list repositories", true),
        ("  # a comment", true),
        ("  COSIGN_PASSWORD=x rdctl key generate", true),
        ("  printf x | rdctl login --password-stdin HOST", true),
        ("  rdctl ls HOST   list repositories", false),
        ("  (flags apply to both)", false),
    ] {
        assert_eq!(example_line_problem(line, false).is_none(), ok, "{line}");
    }
}

#[test]
fn man_pages_build_for_every_subcommand() {
    let dir = tempdir();
    let out = ok(rdctl().arg("man").arg(dir.path()));
    let listed: BTreeSet<String> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let mut expected = vec![vec!["rdctl".to_owned()]];
    expected.extend(all_paths().into_iter().map(|p| {
        let mut v = vec!["rdctl".to_owned()];
        v.extend(p);
        v
    }));
    for words in expected {
        let name = words.join("-");
        let page = dir.path().join(format!("{name}.1"));
        assert!(
            listed.contains(&page.display().to_string()),
            "{} not listed in {listed:?}",
            page.display()
        );
        let text =
            std::fs::read_to_string(&page).unwrap_or_else(|e| panic!("{}: {e}", page.display()));
        // roff: a title line naming the page, then the usual sections.
        assert!(text.contains(&format!(".TH {name} 1")), "{name}: no .TH");
        for section in [".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION"] {
            assert!(text.contains(section), "{name}: no {section}");
        }
        // The version is on every page, in the title and a VERSION section.
        let version = env!("CARGO_PKG_VERSION");
        assert!(
            text.lines()
                .find(|l| l.starts_with(".TH "))
                .is_some_and(|l| l.contains(&format!("rdctl {version}"))),
            "{name}: no version in the title"
        );
        assert!(
            text.contains(&format!(".SH VERSION\nrdctl {version}")),
            "{name}"
        );
        // Examples are in no-fill mode, one line each, hyphens escaped so they paste.
        if let Some((_, examples)) = text.split_once(".SH EXAMPLES\n") {
            let (block, _) = examples
                .strip_prefix(".nf\n")
                .and_then(|b| b.split_once(".fi\n"))
                .unwrap_or_else(|| panic!("{name}: examples not in a .nf/.fi block"));
            assert!(
                block.lines().any(|l| l.trim_start().starts_with("rdctl ")),
                "{name}: {block}"
            );
            assert!(!block.contains(" --"), "{name}: unescaped hyphens: {block}");
        }
        // The synopsis names the whole command path.
        assert!(
            // roff escapes the hyphens of a name such as `sync-status`.
            text.contains(&format!("\\fB{}\\fR", words.join(" ").replace('-', "\\-"))),
            "{name}: the synopsis does not name `{}`",
            words.join(" ")
        );
    }
}

#[test]
fn completions_cover_every_subcommand() {
    let paths = all_paths();
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = ok(rdctl().args(["completions", shell]));
        let script = String::from_utf8(out.stdout).unwrap();
        for p in &paths {
            let last = p.last().unwrap();
            assert!(
                script.contains(last.as_str()),
                "{shell} completions lack {}",
                p.join(" ")
            );
        }
    }
    let bad = rdctl().args(["completions", "tcsh"]).output().unwrap();
    assert_eq!(
        bad.status.code(),
        Some(2),
        "an unknown shell is a usage error"
    );
}

/// Runs rdctl with `args` and parses its whole stdout as one JSON document.
fn json(args: &[&str]) -> serde_json::Value {
    let out = ok(rdctl().args(args));
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rdctl {}: stdout is not one JSON document ({e}):\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout)
        )
    })
}

#[test]
fn json_output_is_one_document_on_stdout() {
    use crate::util::{Server, root, s};
    let dir = tempdir();
    let d = dir.path();
    let example = root().join("examples/hello");
    for m in ["system-base.p5m", "hello.p5m"] {
        ok(rdctl()
            .args(["ips", "publish", "--repo"])
            .arg(d.join("repo"))
            .args([
                "--publisher",
                "example.org",
                "--proto",
                s(&example.join("proto")),
                s(&example.join("manifests").join(m)),
            ]));
    }
    std::fs::copy(example.join("image.toml"), d.join("image.toml")).unwrap();
    let image = d.join("image.toml");
    let layout = d.join("image");

    let lock = json(&["lock", "--json", s(&image)]);
    assert_eq!(lock["packages"].as_array().unwrap().len(), 2, "{lock}");
    let build = json(&["build", "--json", s(&image), "--output", s(&layout)]);
    let manifest = build["manifest"].as_str().unwrap().to_owned();
    let tagged = format!("{}:1.0", s(&layout));
    assert_eq!(json(&["validate", "--json", &tagged])["valid"], true);

    let server = Server::start(&d.join("registry-data"), &[]);
    let reference = format!("{}/demo/hello:1.0", server.host());
    let push = json(&["push", "--json", &tagged, &reference]);
    assert_eq!(push["root"]["digest"], manifest.as_str(), "{push}");
    let pulled = format!("{}:1.0", s(&d.join("pulled")));
    let pull = json(&["pull", "--json", &reference, &pulled]);
    assert_eq!(pull["root"]["digest"], manifest.as_str(), "{pull}");
    // Config and three layers, then the SBOM referrer's empty config and SPDX document.
    assert_eq!(pull["blobs_copied"].as_array().unwrap().len(), 6, "{pull}");
    assert_eq!(pull["referrers"].as_array().unwrap().len(), 1, "{pull}");
    assert_eq!(pull["referrers"][0]["digest"], build["sbom"], "{pull}");
    let copied = format!("oci:{}:1.0", s(&d.join("copied")));
    let copy = json(&["copy", "--json", &format!("oci:{pulled}"), &copied]);
    assert_eq!(copy["root"]["digest"], manifest.as_str(), "{copy}");

    std::fs::create_dir_all(d.join("worker/zones")).unwrap();
    std::fs::write(
        d.join("worker/worker.toml"),
        "zones_dir = \"zones\"\nstate_dir = \"state\"\n[provisioner]\nkind = \"dir\"\nbase = \"roots\"\n",
    )
    .unwrap();
    std::fs::write(
        d.join("worker/zones/hello.toml"),
        format!("name = \"hello\"\nimage = \"{reference}\"\n"),
    )
    .unwrap();
    let config = d.join("worker/worker.toml");
    let run = json(&["worker", "run", "--once", "--json", "--config", s(&config)]);
    assert_eq!(run["provisioned"], serde_json::json!(["hello"]), "{run}");
    let status = json(&["worker", "status", "--json", "--config", s(&config)]);
    assert_eq!(
        status["zones"][0]["current_digest"],
        manifest.as_str(),
        "{status}"
    );
    let gc = json(&[
        "registry",
        "gc",
        "--json",
        "--dry-run",
        "--data",
        s(&d.join("registry-data")),
    ]);
    assert_eq!(gc["dry_run"], true, "{gc}");
    drop(server);
}

/// With `--json`, a failure is one JSON error document on stdout (class, message, exit
/// status) as well as the `rdctl: …` line on stderr.
#[test]
fn json_failures_are_one_error_document_on_stdout() {
    let dir = tempdir();
    let registry = crate::util::Server::start(&dir.path().join("data"), &[]);
    let out = rdctl()
        .args([
            "pull",
            "--json",
            &format!("{}/no/such:1.0", registry.host()),
            s(&dir.path().join("pulled")),
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("rdctl: "), "{stderr}");
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stdout)));
    assert_eq!(doc["error"]["kind"], "not_found", "{doc}");
    assert_eq!(doc["error"]["exit_status"], 2, "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("no/such")),
        "{doc}"
    );
    // Without --json stdout stays empty.
    let out = rdctl()
        .args(["validate", s(&dir.path().join("missing"))])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(out.stdout.is_empty());
    let out = rdctl()
        .args(["validate", "--json", s(&dir.path().join("missing"))])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["exit_status"], 2, "{doc}");
}
