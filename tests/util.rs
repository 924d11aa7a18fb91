//! Shared helpers for the end-to-end tests: the rdctl binary, pinned tools, commands.

use std::path::Path;
use std::process::{Command, Output};

/// The repository root.
pub fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The `rdctl` binary built for these tests.
pub fn rdctl() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rdctl"))
}

/// A pinned outside tool: `.tools/bin/NAME` (built by scripts/install-deps.sh) or the PATH.
/// A missing tool fails the test with the way to install it; tests never skip.
pub fn tool(name: &str) -> Command {
    let local = root().join(".tools/bin").join(name);
    if local.is_file() {
        return Command::new(local);
    }
    let found = std::env::var_os("PATH").and_then(|paths| {
        std::env::split_paths(&paths)
            .map(|d| d.join(name))
            .find(|p| p.is_file())
    });
    match found {
        Some(p) => Command::new(p),
        None => panic!(
            "{name} is not installed: run scripts/install-deps.sh (README's test command does)"
        ),
    }
}

/// Runs a command, failing the test with its output when it does not exit 0.
pub fn ok(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed with {}\nstdout:\n{}\nstderr:\n{}",
        out.status,
        tail(&out.stdout),
        tail(&out.stderr)
    );
    out
}

/// The last 4 KiB of a child's output, for failure messages.
pub fn tail(bytes: &[u8]) -> String {
    let start = bytes.len().saturating_sub(4096);
    String::from_utf8_lossy(&bytes[start..]).into_owned()
}

/// A temporary directory that survives as long as the value.
pub fn tempdir() -> tempfile::TempDir {
    tempfile::tempdir().expect("temporary directory")
}

/// Runs `rdctl validate ARGS --json` and returns exit code and parsed report.
pub fn validate_json(args: &[&str]) -> (i32, serde_json::Value) {
    let out = rdctl()
        .arg("validate")
        .args(args)
        .arg("--json")
        .output()
        .expect("run rdctl");
    let code = out.status.code().expect("rdctl exited by a signal");
    let v = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "rdctl validate {args:?} printed no JSON ({e}); stderr:\n{}",
            tail(&out.stderr)
        )
    });
    (code, v)
}

/// Rule ids in a JSON report.
pub fn rules(report: &serde_json::Value) -> Vec<String> {
    report["violations"]
        .as_array()
        .map(|a| {
            a.iter()
                .map(|v| v["rule"].as_str().unwrap_or_default().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

/// A path as &str for command lines.
pub fn s(p: &Path) -> &str {
    p.to_str().expect("utf-8 path")
}
