//! The image's SPDX 2.3 JSON SBOM: one package per FMRI (publisher as supplier, license
//! names, manifest SHA-1) and one file per installed payload (its SHA-1 content hash), stored
//! as an OCI referrer artifact whose `subject` is the image manifest.
//!
//! Deterministic like the image: the creation time is the build epoch and the document
//! namespace is derived from the image manifest digest.

use serde_json::{Value, json};
use validator::Digest;

use crate::compose::{Content, Package, Tree};

/// `artifactType` of the SBOM referrer.
pub const SBOM_ARTIFACT_TYPE: &str = "application/spdx+json";

/// The SBOM document.
pub(crate) fn spdx(
    packages: &[Package<'_>],
    tree: &Tree,
    manifest: &Digest,
    created: &str,
    name: &str,
) -> Vec<u8> {
    let mut pkgs = Vec::new();
    let mut files = Vec::new();
    let mut rels = Vec::new();
    for (i, p) in packages.iter().enumerate() {
        let id = format!("SPDXRef-Package-{i}");
        let licenses: Vec<String> = p
            .manifest
            .by_kind(ips_bridge::ActionKind::License)
            .filter_map(|a| a.get("license").or(a.key()).map(str::to_owned))
            .collect();
        let mut pkg = json!({
            "name": p.fmri.stem(),
            "SPDXID": id,
            "versionInfo": p.fmri.version().map(ToString::to_string).unwrap_or_default(),
            "supplier": supplier(p.fmri.publisher()),
            "downloadLocation": "NOASSERTION",
            "filesAnalyzed": false,
            "licenseConcluded": "NOASSERTION",
            "licenseDeclared": "NOASSERTION",
            "copyrightText": "NOASSERTION",
            "checksums": [{
                "algorithm": "SHA1",
                "checksumValue": ips_bridge::hash_hex(ips_bridge::HashAlg::Sha1, &p.manifest_bytes),
            }],
            "comment": "checksum: SHA-1 of the package manifest as published",
            "externalRefs": [{
                "referenceCategory": "OTHER",
                "referenceType": "ips-fmri",
                "referenceLocator": p.fmri.to_string(),
            }],
        });
        if !licenses.is_empty() {
            // IPS license names are free text, not SPDX expressions.
            pkg["licenseComments"] = json!(format!("IPS license actions: {}", licenses.join("; ")));
        }
        pkgs.push(pkg);
        rels.push(json!({
            "spdxElementId": "SPDXRef-DOCUMENT",
            "relationshipType": "DESCRIBES",
            "relatedSpdxElement": id,
        }));
    }
    for (n, (path, node)) in tree.iter().enumerate() {
        let Content::Payload { pkg, action } = &node.content else {
            continue;
        };
        let Some(sha1) = action.hash() else { continue };
        let fid = format!("SPDXRef-File-{n}");
        files.push(json!({
            "fileName": format!("./{path}"),
            "SPDXID": fid,
            "checksums": [{"algorithm": "SHA1", "checksumValue": sha1}],
        }));
        rels.push(json!({
            "spdxElementId": format!("SPDXRef-Package-{pkg}"),
            "relationshipType": "CONTAINS",
            "relatedSpdxElement": fid,
        }));
    }
    // The three long arrays are moved in after the fact: `json!` would serialize them into
    // a copy (one Value per file, thousands of them). The keys are placed first so the
    // document's key order, and so its bytes, stay the same.
    let mut doc: Value = json!({
        "spdxVersion": "SPDX-2.3",
        "dataLicense": "CC0-1.0",
        "SPDXID": "SPDXRef-DOCUMENT",
        "name": name,
        "documentNamespace": format!("https://reddwarf.invalid/spdx/{}", manifest.encoded()),
        "creationInfo": {
            "created": created,
            "creators": [concat!("Tool: rdctl-", env!("CARGO_PKG_VERSION"))],
        },
        "packages": null,
        "files": null,
        "relationships": null,
    });
    doc["packages"] = Value::Array(pkgs);
    doc["files"] = Value::Array(files);
    doc["relationships"] = Value::Array(rels);
    serde_json::to_vec(&doc).expect("json")
}

/// The SPDX `supplier` of a package from `publisher`. An FMRI without a publisher gets
/// SPDX's own `NOASSERTION`, not `Organization: NOASSERTION`, which readers took for an
/// organization named NOASSERTION (and a publisher-scoped `deny_packages` entry then missed
/// the package).
fn supplier(publisher: Option<&str>) -> String {
    match publisher {
        Some(p) => format!("Organization: {p}"),
        None => "NOASSERTION".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unknown_publisher_is_no_assertion_and_reads_as_unknown() {
        assert_eq!(
            supplier(Some("openindiana.org")),
            "Organization: openindiana.org"
        );
        assert_eq!(supplier(None), "NOASSERTION");
        // Read back as the registry and the policy read it: no publisher.
        let doc = json!({"spdxVersion": "SPDX-2.3", "packages": [
            {"name": "a", "supplier": supplier(None)},
            {"name": "b", "supplier": supplier(Some("openindiana.org"))},
        ]});
        let got = validator::parse_spdx(&serde_json::to_vec(&doc).unwrap()).unwrap();
        assert_eq!(got.packages[0].publisher, None);
        assert_eq!(
            got.packages[1].publisher.as_deref(),
            Some("openindiana.org")
        );
    }
}
