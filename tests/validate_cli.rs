//! `rdctl validate` as a user runs it: exit codes, reports, and no panic on any input.

use crate::util::{rdctl, rules, s, tempdir, validate_json};

fn corpus(dir: &str) -> std::path::PathBuf {
    crate::util::root().join("validator/tests/data").join(dir)
}

#[test]
fn bad_documents_exit_1_naming_the_rule_and_path() {
    let dir = corpus("bad");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let p = entry.unwrap().path();
        let rule = p
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .split("--")
            .next()
            .unwrap()
            .to_owned();
        let (code, report) = validate_json(&[s(&p)]);
        assert_eq!(code, 1, "{}: {report}", p.display());
        assert_eq!(report["valid"], false);
        assert!(rules(&report).contains(&rule), "{}: {report}", p.display());
    }
}

#[test]
fn good_documents_exit_0() {
    for entry in std::fs::read_dir(corpus("good")).unwrap() {
        let p = entry.unwrap().path();
        let (code, report) = validate_json(&[s(&p)]);
        assert_eq!(code, 0, "{}: {report}", p.display());
    }
}

#[test]
fn human_report_lists_rule_and_json_path() {
    let p = corpus("bad").join("stop-signal--number.json");
    let out = rdctl().arg("validate").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("error[stop-signal]"), "{text}");
    assert!(text.contains("$.config.StopSignal"), "{text}");
    assert!(text.contains("INVALID (1 error(s)"), "{text}");
}

#[test]
fn unreadable_inputs_exit_2_with_a_message_and_garbage_exits_1() {
    let out = rdctl()
        .args(["validate", "/nonexistent/path"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/path"));

    let dir = tempdir();
    // A directory that is not a layout.
    let out = rdctl().arg("validate").arg(dir.path()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("oci-layout"));
    // Binary garbage, empty files, huge numbers: reported, never a panic.
    for (name, bytes) in [
        ("garbage", vec![0xffu8, 0, 1, 2, 0x80]),
        ("empty", Vec::new()),
        ("deep", "[".repeat(100_000).into_bytes()),
        ("number", b"{\"schemaVersion\":1e400}".to_vec()),
        ("string", b"\"just a string\"".to_vec()),
    ] {
        let p = dir.path().join(name);
        std::fs::write(&p, bytes).unwrap();
        let out = rdctl().arg("validate").arg(&p).output().unwrap();
        assert_eq!(
            out.status.code(),
            Some(1),
            "{name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

#[test]
fn platform_flag_is_checked() {
    let p = corpus("good").join("index.json");
    let out = rdctl()
        .args(["validate", "--platform", "illumos"])
        .arg(&p)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}
