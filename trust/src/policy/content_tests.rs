//! `deny_packages` against packages whose publisher the SBOM does not name (kept apart from
//! `tests.rs`, whose helpers it shares, so neither file mixes too many concerns).

use super::tests::{Keys, deny_reason, signed_with};
use super::*;
use crate::intoto::PREDICATE_SPDX;

/// A package whose publisher is unknown (the builder writes `Organization: NOASSERTION` for
/// an FMRI without one; other SBOMs write `NOASSERTION` or no supplier) fails closed against
/// a publisher-scoped `deny_packages` entry, every spelling the same way, and the refusal
/// says the publisher was unknown. A known other publisher still does not match.
#[test]
fn an_unknown_publisher_fails_closed() {
    let k = Keys::new(&["a.pub"]);
    let p = k
        .load(
            "[[rule]]\nmatch = \"r.example/sbom/*\"\naction = \"signed\"\nkeys = [\"a.pub\"]\n\
             deny_packages = [\"pkg://openindiana.org/library/security/openssl@<3.0\"]\n",
        )
        .unwrap();
    let a = k.id("a.pub");
    let with_supplier = |supplier: Option<&str>, fmri: &str| {
        let mut pkg = serde_json::json!({
            "SPDXID": "SPDXRef-Package-0",
            "name": "library/security/openssl",
            "versionInfo": "1.1.1.20,5.11-2024.0.0.0",
            "externalRefs": [{
                "referenceCategory": "PACKAGE-MANAGER",
                "referenceType": "ips-fmri",
                "referenceLocator": fmri,
            }],
        });
        if let Some(s) = supplier {
            pkg["supplier"] = s.into();
        }
        let doc =
            serde_json::json!({"spdxVersion": "SPDX-2.3", "name": "zones/app", "packages": [pkg]});
        p.evaluate(
            "r.example/sbom/app:1",
            false,
            &signed_with(&a, &[(PREDICATE_SPDX, doc)]),
        )
    };
    let unpublished = "pkg:/library/security/openssl@1.1.1.20,5.11-2024.0.0.0";
    for supplier in [
        Some("Organization: NOASSERTION"),
        Some("NOASSERTION"),
        Some(""),
        None,
    ] {
        let r = deny_reason(with_supplier(supplier, unpublished));
        assert!(
            matches!(r, DenyReason::DeniedPackage { .. }),
            "{supplier:?}: {r:?}"
        );
        let text = r.to_string();
        assert!(
            text.contains(
                "refused by deny_packages \"pkg://openindiana.org/library/security/openssl@<3.0\""
            ) && text.contains("its publisher is unknown"),
            "{supplier:?}: {text}"
        );
    }
    // A known publisher that is not the entry's is another package.
    assert!(
        with_supplier(
            Some("Organization: example.org"),
            "pkg://example.org/library/security/openssl@1.1.1.20,5.11-2024.0.0.0"
        )
        .is_admit()
    );
    // The publisher named by the entry: refused, without the note.
    let r = deny_reason(with_supplier(
        Some("Organization: openindiana.org"),
        "pkg://openindiana.org/library/security/openssl@1.1.1.20,5.11-2024.0.0.0",
    ));
    assert!(
        !r.to_string().contains("unknown") && matches!(r, DenyReason::DeniedPackage { .. }),
        "{r}"
    );
}
