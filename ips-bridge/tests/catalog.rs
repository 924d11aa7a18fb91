//! Catalog v1 test vectors: a real OpenIndiana catalog from December 2016 (see
//! `tests/data/catalog-2016/README.md`). Signatures verify, and re-serialising the parsed
//! files reproduces them byte for byte.

use std::path::PathBuf;

use ips_bridge::{CatalogAttrs, CatalogError, CatalogPart, verify_signature};

fn read(name: &str) -> Vec<u8> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/catalog-2016");
    std::fs::read(dir.join(name)).unwrap()
}

const PARTS: [(&str, &str); 3] = [
    ("catalog.base.C", "9534c505d72085797cf142d9c69ea0adc5b2449c"),
    (
        "catalog.dependency.C",
        "f98917b705e74ae20e39a06a7c306cae68c7bd72",
    ),
    (
        "catalog.summary.C",
        "3823dece5982820dd3128b5f9eeeb9448ffea1b7",
    ),
];

#[test]
fn signatures_of_the_real_catalog_verify() {
    for (name, _) in PARTS {
        assert!(verify_signature(name, &read(name)).unwrap(), "{name}");
    }
    assert!(verify_signature("catalog.attrs", &read("catalog.attrs")).unwrap());
    let attrs = CatalogAttrs::parse(&read("catalog.attrs")).unwrap();
    for (name, sig) in PARTS {
        assert_eq!(attrs.parts[name].signature_sha1.as_deref(), Some(sig));
    }
    assert_eq!((attrs.package_count, attrs.package_version_count), (2, 2));
    assert_eq!(attrs.created, "20161224T160808.632593Z");
    assert!(attrs.updates.contains_key("update.20161224T16Z.C"));
}

#[test]
fn parts_reserialise_byte_exactly() {
    for (name, _) in PARTS {
        let bytes = read(name);
        let part = CatalogPart::parse(name, &bytes).unwrap();
        assert_eq!(part.to_file(true).as_bytes(), &bytes[..], "{name}");
    }
    let attrs = CatalogAttrs::parse(&read("catalog.attrs")).unwrap();
    let written = ips_bridge::write_catalog_file(&attrs.to_value(), true);
    assert_eq!(written.as_bytes(), &read("catalog.attrs")[..]);
}

#[test]
fn entries_carry_versions_manifest_hashes_and_actions() {
    let base = CatalogPart::parse("catalog.base.C", &read("catalog.base.C")).unwrap();
    let e = &base.entries()[0];
    assert_eq!(e.stem, "library/desktop/mate/libmatemixer");
    assert_eq!(
        e.signature_sha1(),
        Some("0a53b57199ea1fc417cb39d9c28ea16c89f8be2c")
    );
    let f = e.fmri().unwrap();
    assert_eq!(
        f.to_string(),
        "pkg://userland/library/desktop/mate/libmatemixer@1.16.0,5.11-2016.1.1.0:20161224T161749Z"
    );
    let dep = CatalogPart::parse("catalog.dependency.C", &read("catalog.dependency.C")).unwrap();
    let actions = dep.entries()[1].actions();
    assert_eq!(
        actions[0],
        "depend fmri=pkg:/SUNWcs@0.5.11-2016.1.1.16068 type=require"
    );
    for a in dep.entries().iter().flat_map(|e| e.actions()) {
        ips_bridge::Action::parse(a).unwrap();
    }
    let sum = CatalogPart::parse("catalog.summary.C", &read("catalog.summary.C")).unwrap();
    let summary = ips_bridge::Action::parse(sum.entries()[0].actions()[4]).unwrap();
    assert_eq!(summary.get("value"), Some("Mixer library for MATE desktop"));
}

#[test]
fn tampered_files_are_rejected() {
    let bytes = String::from_utf8(read("catalog.base.C")).unwrap();
    let tampered = bytes.replace("0a53b57199", "0a53b57198");
    match CatalogPart::parse("catalog.base.C", tampered.as_bytes()) {
        Err(CatalogError::Signature { file, expected, .. }) => {
            assert_eq!(file, "catalog.base.C");
            assert_eq!(expected, "9534c505d72085797cf142d9c69ea0adc5b2449c");
        }
        r => panic!("{r:?}"),
    }
    let attrs = String::from_utf8(read("catalog.attrs")).unwrap();
    let missing = attrs.replace("\"package-count\":2,", "");
    // Removing a key breaks the signature first; unsigned, the missing key is reported.
    assert!(CatalogAttrs::parse(missing.as_bytes()).is_err());
    let v: serde_json::Value = serde_json::from_str(&missing).unwrap();
    let mut v = v.as_object().unwrap().clone();
    v.remove("_SIGNATURE");
    let unsigned = ips_bridge::write_catalog_file(&serde_json::Value::Object(v), false);
    match CatalogAttrs::parse(unsigned.as_bytes()) {
        Err(e) => assert!(e.to_string().contains("package-count"), "{e}"),
        Ok(_) => panic!("accepted attrs without package-count"),
    }
}

#[test]
fn writer_reproduces_the_real_dependency_and_summary_parts() {
    // Rebuild each package's manifest from the real catalog (set actions first, as real
    // manifests have them), then let the writer split it into parts again.
    let dep = CatalogPart::parse("catalog.dependency.C", &read("catalog.dependency.C")).unwrap();
    let sum = CatalogPart::parse("catalog.summary.C", &read("catalog.summary.C")).unwrap();
    let mut catalog = ips_bridge::Catalog::default();
    for (d, s) in dep.entries().iter().zip(sum.entries()) {
        let fmri = d.fmri().unwrap();
        let mut text = format!("set name=pkg.fmri value={fmri}\n");
        let (sets, depends): (Vec<&str>, Vec<&str>) =
            d.actions().into_iter().partition(|a| a.starts_with("set "));
        for a in s.actions().into_iter().chain(sets).chain(depends) {
            text.push_str(a);
            text.push('\n');
        }
        let m = ips_bridge::Manifest::parse(&text).unwrap();
        catalog.add(&fmri, &m, text.as_bytes()).unwrap();
    }
    assert_eq!(
        catalog.dependency.to_file(true).as_bytes(),
        &read("catalog.dependency.C")[..]
    );
    assert_eq!(
        catalog.summary.to_file(true).as_bytes(),
        &read("catalog.summary.C")[..]
    );
}

#[test]
fn signatures_check_the_bytes_not_our_serialiser() {
    // A part written by a serialiser with lower-case \u escapes (Python's json module): the
    // signature covers those bytes, and checking it must not depend on re-serialising.
    let unsigned = "{\"p\":{\"a\":[{\"actions\":[\"set name=pkg.summary value=caf\\u00e9\"],\"version\":\"1,5.11:20240101T000000Z\"}]}}\n";
    let sig = ips_bridge::hash_hex(ips_bridge::HashAlg::Sha1, unsigned.as_bytes());
    let signed = format!(
        "{},\"_SIGNATURE\":{{\"sha-1\":\"{sig}\"}}}}\n",
        &unsigned[..unsigned.len() - 2]
    );
    let part = CatalogPart::parse("catalog.summary.C", signed.as_bytes()).unwrap();
    assert_eq!(
        part.entries()[0].actions(),
        ["set name=pkg.summary value=café"]
    );
    // Our writer would escape it upper-case, which is a different (also valid) file.
    assert_ne!(part.to_file(false), unsigned);
}
