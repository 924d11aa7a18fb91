//! The registry's package search orders pkg(5) versions with `validator::PkgVersion` (the
//! registry may not depend on ips-bridge); rdctl lock and the builder use ips-bridge's
//! `Version`. The two must agree, or a search for `openssl@<3.0` would answer differently
//! from what `rdctl lock` picks. Checked over the versions of the real OpenIndiana catalog in
//! the shared test data and hand-picked edge cases, every pair both ways.

use std::cmp::Ordering;

use ips_bridge::Version;
use validator::PkgVersion;

fn catalog_versions() -> Vec<String> {
    let path = crate::util::root().join("ips-bridge/tests/data/catalog-2016/catalog.base.C");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut out = Vec::new();
    for (publisher, stems) in doc.as_object().unwrap() {
        if publisher.starts_with('_') {
            continue;
        }
        for entries in stems.as_object().unwrap().values() {
            for e in entries.as_array().unwrap() {
                out.push(e["version"].as_str().unwrap().to_owned());
            }
        }
    }
    assert!(!out.is_empty(), "no versions in {}", path.display());
    out
}

#[test]
fn registry_and_builder_order_pkg5_versions_the_same() {
    let mut versions = catalog_versions();
    versions.extend(
        [
            "1.0",
            "1.0.0",
            "1.0.1",
            "1.2",
            "1.10",
            "2",
            "2.0-1",
            "2.0-1.1",
            "2.0-2",
            "2.0,5.11-1",
            "2.0,5.11-2016.1.1.0:20161224T161749Z",
            "2.0,5.11-2016.1.1.0:20170101T000000Z",
            "2.0,5.11-2016.1.2.0:20161224T161749Z",
            "1.16.0,5.11-2016.1.1.0:20161224T160903Z",
            "1.16.0-2016.1.1.0",
            "0.5.11-2024.0.0.22",
            "3.0.15-2024.0.0.1:20240101T000000Z",
        ]
        .map(str::to_owned),
    );
    for a in &versions {
        let (ia, va) = (Version::parse(a).unwrap(), PkgVersion::parse(a).unwrap());
        for b in &versions {
            let (ib, vb) = (Version::parse(b).unwrap(), PkgVersion::parse(b).unwrap());
            let builder = ia.cmp(&ib);
            let registry = va.cmp_full(&vb);
            assert_eq!(
                builder, registry,
                "{a} vs {b}: ips-bridge says {builder:?}, the registry's search says {registry:?}"
            );
        }
    }
    // And the constraint form the search takes agrees at the precision written.
    let c = validator::Constraint::parse("<2.0").unwrap();
    assert!(c.matches("1.16.0,5.11-2016.1.1.0:20161224T160903Z"));
    assert!(!c.matches("2.0,5.11-1"));
    assert_eq!(
        PkgVersion::parse("2.0.3")
            .unwrap()
            .cmp_at_precision_of(&PkgVersion::parse("2.0").unwrap()),
        Ordering::Equal
    );
}
