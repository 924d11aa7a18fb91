//! docs/getting-started.md, followed top to bottom as a newcomer would: every `sh` block of the
//! page runs in order in one bash, so a step that uses something a later step makes, a file
//! whose origin the page does not say, or a command that no longer works fails here.
//!
//! The page's source carries two kinds of HTML comments for this runner (a reader never sees
//! them): `<!-- not run: REASON -->` right above a block leaves that block out (the reason is
//! required), and `<!-- run: COMMAND -->` runs a command a person at a terminal does not need,
//! such as waiting for a server started with `&` to answer before the next line uses it. A
//! hidden command never changes what a printed one does (no function, alias or PATH of its
//! own): the page runs as printed.
//!
//! The page's fixed ports (5000, 5001, 5002, 10000) become free ones and its `/tmp` and
//! `/media/usb` paths move into a temporary directory, so the run touches nothing outside it.

use std::fs;
use std::net::TcpListener;
use std::path::Path;
use std::process::Command;

use crate::util::{root, tail, tempdir};

const PAGE: &str = "docs/getting-started.md";

/// The ports the page uses, in the order they are replaced by free ones.
const PAGE_PORTS: [&str; 4] = [
    "127.0.0.1:5000",
    "127.0.0.1:5001",
    "127.0.0.1:5002",
    "127.0.0.1:10000",
];

/// A fenced `sh` block or a hidden `run:` command, with the page line it starts on.
#[derive(Debug, PartialEq)]
enum Step {
    Block { line: usize, text: String },
    Hidden { line: usize, command: String },
}

/// The page's steps in order, or the first line that breaks the runner's rules.
fn steps(page: &str) -> Result<Vec<Step>, String> {
    let lines: Vec<&str> = page.lines().collect();
    let mut out = Vec::new();
    let mut previous = "";
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i];
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("<!-- run:") {
            let command = rest
                .strip_suffix("-->")
                .ok_or_else(|| {
                    format!(
                        "{PAGE}:{}: a run: comment ends on its own line with -->",
                        i + 1
                    )
                })?
                .trim();
            if ["() {", "()", "alias ", "unset ", "PATH="]
                .iter()
                .any(|w| command.contains(w))
            {
                return Err(format!(
                    "{PAGE}:{}: a run: comment may not change what the page's commands do \
                     (a function, alias or PATH): {command:?}; print it in the page",
                    i + 1
                ));
            }
            out.push(Step::Hidden {
                line: i + 1,
                command: command.to_owned(),
            });
        }
        if t.starts_with("<!-- not run:") {
            let reason = t
                .trim_start_matches("<!-- not run:")
                .trim_end_matches("-->")
                .trim();
            if reason.is_empty() {
                return Err(format!("{PAGE}:{}: `not run:` needs a reason", i + 1));
            }
        }
        if t.starts_with("```") {
            let lang = t.trim_start_matches('`').trim();
            let indent = line.len() - line.trim_start().len();
            let start = i + 1;
            let mut body = Vec::new();
            i += 1;
            while i < lines.len() && lines[i].trim() != "```" {
                let l = lines[i];
                body.push(if l.len() >= indent {
                    &l[indent..]
                } else {
                    l.trim_start()
                });
                i += 1;
            }
            if i == lines.len() {
                return Err(format!("{PAGE}:{start}: the block never closes"));
            }
            if lang == "sh" && !previous.starts_with("<!-- not run:") {
                for (n, l) in body.iter().enumerate() {
                    check_runnable(l).map_err(|e| format!("{PAGE}:{}: {e}", start + 1 + n))?;
                }
                out.push(Step::Block {
                    line: start,
                    text: body.join("\n"),
                });
            }
            previous = "```";
            i += 1;
            continue;
        }
        if !t.is_empty() {
            previous = t;
        }
        i += 1;
    }
    Ok(out)
}

/// A line a reader would have to edit before running it: a placeholder (`<digest>`) or an
/// elided value (`…`) outside a comment.
fn check_runnable(line: &str) -> Result<(), String> {
    let code = match line.find(" #") {
        Some(at) => &line[..at],
        None if line.trim_start().starts_with('#') => "",
        None => line,
    };
    if code.contains('…') {
        return Err(format!("`…` in a command to run: {line:?}"));
    }
    let bytes = code.as_bytes();
    for (at, _) in code.match_indices('<') {
        if bytes.get(at + 1) == Some(&b'<') || (at > 0 && bytes[at - 1] == b'<') {
            continue; // a heredoc
        }
        let rest = &code[at + 1..];
        if let Some(end) = rest.find('>') {
            let inner = &rest[..end];
            if !inner.is_empty()
                && inner
                    .chars()
                    .all(|c| c.is_ascii_lowercase() || c == ' ' || c == '-')
            {
                return Err(format!(
                    "placeholder <{inner}> in a command to run: {line:?}"
                ));
            }
        }
    }
    Ok(())
}

/// The whole bash script: the prelude, then each step announcing its page line.
fn script(steps: &[Step], ports: &[u16], work: &Path) -> String {
    let mut s = String::from(
        "set -euo pipefail\n\
         PS4='+ '\n\
         trap 'kill $(jobs -p) 2>/dev/null || true; wait 2>/dev/null || true' EXIT\n\
         trap 'exit 143' TERM\n\
         ready() { for _ in $(seq 300); do curl -sf -o /dev/null \"$1\" && return 0; sleep 0.1; done; \
         echo \"nothing answers at $1\" >&2; return 1; }\n",
    );
    for step in steps {
        match step {
            Step::Hidden { line, command } => {
                s.push_str(&format!(
                    "echo '# {PAGE}:{line} (run: comment)' >&2\n{command}\n"
                ));
            }
            Step::Block { line, text } => {
                s.push_str(&format!(
                    "echo '# {PAGE}:{line}' >&2\nset -x\n{text}\n{{ set +x; }} 2>/dev/null\n"
                ));
            }
        }
    }
    for (from, to) in PAGE_PORTS.iter().zip(ports) {
        s = s.replace(from, &format!("127.0.0.1:{to}"));
    }
    let work = work.display();
    s.replace("/tmp/", &format!("{work}/tmp/"))
        .replace("/media/usb", &format!("{work}/media/usb"))
}

fn free_ports(n: usize) -> Vec<u16> {
    // Held together so the ports differ; released just before the run.
    let held: Vec<TcpListener> = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0").expect("a free loopback port"))
        .collect();
    held.iter()
        .map(|l| l.local_addr().expect("port").port())
        .collect()
}

#[test]
fn the_runner_reads_blocks_comments_and_refuses_placeholders() {
    let page = "text\n<!-- not run: needs root -->\n```sh\nrm -rf /\n```\n\
                <!-- run: ready http://127.0.0.1:5000/v2/ -->\n  ```sh\n  echo one\n  ```\n\
                ```toml\nx = 1\n```\n";
    assert_eq!(
        steps(page).unwrap(),
        vec![
            Step::Hidden {
                line: 6,
                command: "ready http://127.0.0.1:5000/v2/".into()
            },
            Step::Block {
                line: 7,
                text: "echo one".into()
            },
        ]
    );
    let err = steps("<!-- not run: -->\n```sh\ntrue\n```\n").unwrap_err();
    assert!(err.contains(":1: `not run:` needs a reason"), "{err}");
    let err = steps("x\n```sh\ncurl http://h/v2/r/manifests/<image digest>\n```\n").unwrap_err();
    assert!(err.contains(":3: placeholder <image digest>"), "{err}");
    // A hidden command that would swap a printed one (`cosign` for `cosign3`) is refused.
    for hidden in [
        "cosign() { cosign3 \"$@\"; }",
        "alias cosign=cosign3",
        "unset -f cosign",
        "export PATH=/x:$PATH",
    ] {
        let err = steps(&format!(
            "<!-- run: {hidden} -->\n```sh\ncosign version\n```\n"
        ))
        .unwrap_err();
        assert!(err.contains(":1: a run: comment may not change"), "{err}");
    }
    let err = steps("```sh\nCOSIGN_PASSWORD=… cosign sign x\n```\n").unwrap_err();
    assert!(err.contains("`…` in a command"), "{err}");
    // Heredocs, comparisons in quotes after a comment and ellipses in comments are fine.
    steps("```sh\ncat > f <<'EOF'\nEOF\nrdctl search 'a@<2' # <2 … is fine\n```\n").unwrap();
}

#[test]
fn getting_started_runs_top_to_bottom_in_one_shell() {
    let page = fs::read_to_string(root().join(PAGE)).expect("read the page");
    let steps = steps(&page).unwrap_or_else(|e| panic!("{e}"));
    assert!(
        steps.len() > 20,
        "only {} steps found in {PAGE}",
        steps.len()
    );
    let dir = tempdir();
    let work = dir.path();
    for d in ["tmp", "media/usb", "home", "tuf"] {
        fs::create_dir_all(work.join(d)).unwrap();
    }
    // The page starts in a clone of the repository: it needs examples/ (and writes into it).
    let status = Command::new("cp")
        .args(["-r", "--"])
        .arg(root().join("examples"))
        .arg(work)
        .status()
        .expect("cp");
    assert!(status.success(), "copying examples/ failed");
    let ports = free_ports(PAGE_PORTS.len());
    let text = script(&steps, &ports, work);
    fs::write(work.join("getting-started.sh"), &text).unwrap();

    let rdctl_dir = Path::new(env!("CARGO_BIN_EXE_rdctl")).parent().unwrap();
    let path = std::env::join_paths(
        [rdctl_dir.to_path_buf(), root().join(".tools/bin")]
            .into_iter()
            .chain(std::env::split_paths(
                &std::env::var_os("PATH").unwrap_or_default(),
            )),
    )
    .unwrap();
    let log = fs::File::create(work.join("out.log")).unwrap();
    let out = Command::new("timeout")
        .args(["300", "bash", "getting-started.sh"])
        .current_dir(work)
        .env("PATH", path)
        .env("HOME", work.join("home"))
        .env("TUF_ROOT", work.join("tuf"))
        // The page's key generation and cosign ask for the key's password on a terminal; the
        // variables they read instead.
        .env("RDCTL_PASSWORD", "getting-started")
        .env("COSIGN_PASSWORD", "getting-started")
        .env_remove("DOCKER_CONFIG")
        .env_remove("REGISTRY_AUTH_FILE")
        .env_remove("RDCTL_PLAIN_HTTP")
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .status()
        .expect("run bash");
    let log = fs::read(work.join("out.log")).unwrap();
    let text = String::from_utf8_lossy(&log);
    let last = text
        .lines()
        .rev()
        .find(|l| l.starts_with(&format!("# {PAGE}:")))
        .unwrap_or("(before the first step)");
    assert!(
        out.success(),
        "{PAGE} stopped with {out} at the step starting {}\n\n{}",
        last.trim_start_matches("# "),
        tail(&log)
    );
    // What the page promises along the way, beyond exit statuses.
    for (promise, needle) in [
        (
            "the worker unpacks the image into the zone root",
            "hello-server -> hello",
        ),
        (
            "the policy admits the signed zone by rule 1",
            "rule 1 (match = \"127.0.0.1:",
        ),
        ("a rerun of sync is up to date", "up to date docker://"),
        (
            "search finds the package",
            "pkg://example.org/demo/hello@1.0",
        ),
    ] {
        assert!(
            text.contains(needle),
            "{PAGE}: {promise}: {needle:?} not in the output\n{}",
            tail(&log)
        );
    }
}
