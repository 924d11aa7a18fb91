//! The packages of an SPDX 2.x JSON document, as the builder writes its SBOM: one SPDX package
//! per IPS package, the FMRI in an `ips-fmri` external reference, the publisher as the
//! supplier organization. Shared by the registry (its package index) and the client
//! (`rdctl sbom`), so both read an SBOM the same way.
//!
//! Only the document's `spdxVersion`, `name` and each package's `name`, `versionInfo`,
//! `supplier` and `externalRefs` are deserialized; the (long) `files` and `relationships`
//! arrays are skipped without being built.

use serde::{Deserialize, Serialize};

/// The `artifactType` (and layer media type) of an SPDX JSON SBOM referrer.
pub const SPDX_ARTIFACT_TYPE: &str = "application/spdx+json";

/// One package listed by an SPDX SBOM.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SpdxPackage {
    /// The full FMRI (`pkg://publisher/name@version`), from the `ips-fmri` external reference.
    #[serde(default)]
    pub fmri: Option<String>,
    /// The package name (stem).
    pub name: String,
    /// The publisher (the SPDX supplier organization).
    #[serde(default)]
    pub publisher: Option<String>,
    /// The version (`1.0,5.11-2024.0:20240101T000000Z`).
    #[serde(default)]
    pub version: Option<String>,
}

/// What [`parse_spdx`] reads from a document.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpdxPackages {
    /// The document's `name`.
    pub name: Option<String>,
    /// The packages, in the document's order.
    pub packages: Vec<SpdxPackage>,
}

#[derive(Deserialize)]
struct RawDoc {
    #[serde(rename = "spdxVersion")]
    spdx_version: Option<String>,
    name: Option<serde_json::Value>,
    #[serde(default)]
    packages: Option<Vec<RawPackage>>,
}

#[derive(Deserialize)]
struct RawPackage {
    name: Option<serde_json::Value>,
    #[serde(rename = "versionInfo")]
    version_info: Option<serde_json::Value>,
    supplier: Option<serde_json::Value>,
    #[serde(rename = "externalRefs", default)]
    external_refs: Option<Vec<RawRef>>,
}

#[derive(Deserialize)]
struct RawRef {
    #[serde(rename = "referenceType")]
    reference_type: Option<serde_json::Value>,
    #[serde(rename = "referenceLocator")]
    reference_locator: Option<serde_json::Value>,
}

/// A non-empty string that is not `NOASSERTION`.
fn text(v: Option<&serde_json::Value>) -> Option<String> {
    v.and_then(|s| s.as_str())
        .filter(|s| !s.is_empty() && *s != "NOASSERTION")
        .map(str::to_owned)
}

/// The document name and packages of an SPDX 2.x JSON document; the error says why the bytes
/// are not one.
pub fn parse_spdx(bytes: &[u8]) -> Result<SpdxPackages, String> {
    let doc: RawDoc =
        serde_json::from_slice(bytes).map_err(|e| format!("the SBOM is not JSON: {e}"))?;
    if !doc
        .spdx_version
        .as_deref()
        .is_some_and(|s| s.starts_with("SPDX-"))
    {
        return Err("the SBOM has no spdxVersion: not an SPDX JSON document".to_owned());
    }
    let packages = doc
        .packages
        .unwrap_or_default()
        .into_iter()
        .map(|p| {
            let fmri = p
                .external_refs
                .unwrap_or_default()
                .into_iter()
                .find(|r| r.reference_type.as_ref().and_then(|t| t.as_str()) == Some("ips-fmri"))
                .and_then(|r| text(r.reference_locator.as_ref()));
            // `Organization: NOASSERTION` (what the builder wrote for an FMRI without a
            // publisher) says the publisher is unknown, as `NOASSERTION` alone does: it is
            // no publisher's name, and reading it as one would let a package dodge a
            // publisher-scoped deny_packages entry.
            let publisher = text(p.supplier.as_ref()).and_then(|s| {
                let name = s.strip_prefix("Organization: ").unwrap_or(&s).trim();
                (!name.is_empty() && name != "NOASSERTION").then(|| name.to_owned())
            });
            SpdxPackage {
                fmri,
                name: text(p.name.as_ref()).unwrap_or_default(),
                publisher,
                version: text(p.version_info.as_ref()),
            }
        })
        .collect();
    Ok(SpdxPackages {
        name: text(doc.name.as_ref()),
        packages,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spdx_packages() {
        let doc = serde_json::json!({
            "spdxVersion": "SPDX-2.3", "name": "zones/demo",
            "packages": [{
                "name": "demo/tool", "versionInfo": "2.1,5.11-2024.0:20240102T030405Z",
                "supplier": "Organization: example.org",
                "externalRefs": [{"referenceCategory": "OTHER", "referenceType": "ips-fmri",
                    "referenceLocator": "pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z"}]
            }, {"name": "other", "supplier": "NOASSERTION"},
               {"name": "third", "supplier": "Organization: NOASSERTION"}],
            "files": [{"fileName": "./x", "SPDXID": "SPDXRef-File-0"}],
            "relationships": [],
        });
        let got = parse_spdx(&serde_json::to_vec(&doc).unwrap()).unwrap();
        assert_eq!(got.name.as_deref(), Some("zones/demo"));
        let p = got.packages;
        assert_eq!(p.len(), 3);
        assert_eq!(p[0].name, "demo/tool");
        assert_eq!(p[0].publisher.as_deref(), Some("example.org"));
        assert_eq!(
            p[0].version.as_deref(),
            Some("2.1,5.11-2024.0:20240102T030405Z")
        );
        assert_eq!(
            p[0].fmri.as_deref(),
            Some("pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z")
        );
        assert_eq!(p[1].publisher, None);
        assert_eq!(p[1].version, None);
        assert_eq!(
            p[2].publisher, None,
            "Organization: NOASSERTION names no publisher"
        );
        assert!(parse_spdx(b"{}").unwrap_err().contains("spdxVersion"));
        assert!(parse_spdx(b"[").unwrap_err().contains("not JSON"));
        let none = parse_spdx(br#"{"spdxVersion":"SPDX-2.2"}"#).unwrap();
        assert!(none.packages.is_empty() && none.name.is_none());
    }
}
