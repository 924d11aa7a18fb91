//! The bad-document corpus: every file in `data/bad/` is named `<rule-id>--<case>.json` and must
//! fail with that rule; every file in `data/good/` must pass.

use std::path::Path;

use validator::{Rule, Severity, check_document};

fn files(dir: &str) -> Vec<(String, Vec<u8>)> {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(dir);
    let mut out: Vec<_> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    out.sort();
    out
}

fn rule_by_id(id: &str) -> Rule {
    *Rule::ALL
        .iter()
        .find(|r| r.id() == id)
        .unwrap_or_else(|| panic!("no rule with id {id:?}"))
}

#[test]
fn every_bad_document_fails_with_its_rule() {
    let bad = files("bad");
    assert!(bad.len() >= 40, "corpus has only {} documents", bad.len());
    for (name, bytes) in bad {
        let id = name.split("--").next().unwrap();
        let rule = rule_by_id(id);
        let (report, doc) = check_document(&bytes, None, None, &name);
        assert!(!report.is_ok(), "{name} passed:\n{report}");
        assert!(
            doc.is_none(),
            "{name}: a failed document must not be returned"
        );
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.rule == rule && v.severity == Severity::Error),
            "{name}: expected an error of rule {id}, got:\n{report}"
        );
        for v in &report.violations {
            assert!(
                v.location.starts_with(&name),
                "{name}: location {:?}",
                v.location
            );
            assert!(!v.message.is_empty());
        }
    }
}

#[test]
fn every_good_document_passes() {
    for (name, bytes) in files("good") {
        let (report, doc) = check_document(&bytes, None, None, &name);
        assert!(report.is_ok(), "{name} failed:\n{report}");
        assert!(doc.is_some(), "{name}");
    }
}

#[test]
fn oversized_manifest_fails_before_parsing() {
    let mut doc = br#"{"schemaVersion":2,"layers":[],"annotations":{"pad":""#.to_vec();
    doc.resize(doc.len() + validator::MAX_MANIFEST_SIZE, b'x');
    doc.extend_from_slice(br#""}}"#);
    let (report, _) = check_document(&doc, None, None, "big");
    assert!(report.has(Rule::DocumentSize), "{report}");
}

#[test]
fn declared_media_type_must_match() {
    let bytes =
        std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/good/manifest.json"))
            .unwrap();
    let declared = validator::MediaType::DockerManifest;
    let (report, _) = check_document(&bytes, None, Some(&declared), "m");
    assert!(report.has(Rule::MediaType), "{report}");
}

#[test]
fn index_descriptors_keep_platform_and_json_paths_are_exact() {
    let entry = r#"{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":1,
         "digest":"sha256:0000000000000000000000000000000000000000000000000000000000000000",
         "platform":{"os":"illumos","architecture":"amd64","os.version":"r151056"}}"#;
    let bad = r#"{"mediaType":"application/vnd.oci.image.manifest.v1+json","size":1,"digest":"sha256:00"}"#;
    let two = format!(r#"{{"schemaVersion":2,"manifests":[{entry},{bad}]}}"#);
    let (report, _) = check_document(two.as_bytes(), None, None, "idx");
    let v: Vec<_> = report.errors().collect();
    assert_eq!(v.len(), 1, "{report}");
    assert_eq!(v[0].location, "idx $.manifests[1].digest");

    let one = format!(r#"{{"schemaVersion":2,"manifests":[{entry}]}}"#);
    let (report, doc) = check_document(one.as_bytes(), None, None, "idx");
    assert!(report.is_ok(), "{report}");
    let Some(validator::Document::Index(i)) = doc else {
        panic!("an index was expected")
    };
    let p = i.manifests[0].platform.as_ref().unwrap();
    assert_eq!(p.os_version.as_deref(), Some("r151056"));
}
