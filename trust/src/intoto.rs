//! in-toto statements as `cosign attest` writes them: `_type` v0.1, one subject (the
//! repository name and the image manifest's digest), a predicate type URI and the predicate.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;
use validator::Digest;

/// The statement type cosign v2 writes.
pub const STATEMENT_V01: &str = "https://in-toto.io/Statement/v0.1";
/// The current statement type (accepted when reading).
pub const STATEMENT_V1: &str = "https://in-toto.io/Statement/v1";

/// SPDX documents (`--type spdx` and `spdxjson`).
pub const PREDICATE_SPDX: &str = "https://spdx.dev/Document";
/// SLSA provenance v1 (`--type slsaprovenance1`).
pub const PREDICATE_SLSA_V1: &str = "https://slsa.dev/provenance/v1";
/// SLSA provenance v0.2 (`--type slsaprovenance`, `slsaprovenance02`).
pub const PREDICATE_SLSA_V02: &str = "https://slsa.dev/provenance/v0.2";
/// cosign's wrapper for arbitrary text (`--type custom`, the default).
pub const PREDICATE_COSIGN_CUSTOM: &str = "https://cosign.sigstore.dev/attestation/v1";

/// cosign's `--type` short names and the predicate type URIs they stand for.
pub const PREDICATE_SHORT_NAMES: &[(&str, &str)] = &[
    ("custom", PREDICATE_COSIGN_CUSTOM),
    ("slsaprovenance", PREDICATE_SLSA_V02),
    ("slsaprovenance02", PREDICATE_SLSA_V02),
    ("slsaprovenance1", PREDICATE_SLSA_V1),
    ("spdx", PREDICATE_SPDX),
    ("spdxjson", PREDICATE_SPDX),
    ("cyclonedx", "https://cyclonedx.org/bom"),
    ("link", "https://in-toto.io/Link/v1"),
    ("vuln", "https://cosign.sigstore.dev/attestation/vuln/v1"),
    ("openvex", "https://openvex.dev/ns"),
];

/// The predicate type URI for a cosign `--type` value: a short name from
/// [`PREDICATE_SHORT_NAMES`], or a URI (anything with `://`) taken as is.
pub fn predicate_type_uri(type_name: &str) -> Option<&str> {
    PREDICATE_SHORT_NAMES
        .iter()
        .find(|(short, _)| *short == type_name)
        .map(|(_, uri)| *uri)
        .or_else(|| type_name.contains("://").then_some(type_name))
}

/// A statement subject: a name and a digest set (algorithm → lowercase hex).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subject {
    /// The repository name (`registry.example.com/app`).
    #[serde(default)]
    pub name: String,
    /// `{"sha256": "<hex>"}`.
    pub digest: BTreeMap<String, String>,
    /// Annotations on the subject (cosign v3 puts `sign -a KEY=VALUE` here).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, Value>,
}

impl Subject {
    /// A subject for an image manifest.
    pub fn image(name: &str, digest: &Digest) -> Self {
        Subject {
            name: name.to_owned(),
            digest: BTreeMap::from([(digest.algorithm().to_string(), digest.encoded().to_owned())]),
            annotations: BTreeMap::new(),
        }
    }

    /// True when the digest set holds `digest` (same algorithm, same hex).
    pub fn matches(&self, digest: &Digest) -> bool {
        self.digest
            .get(digest.algorithm().as_str())
            .is_some_and(|hex| hex.eq_ignore_ascii_case(digest.encoded()))
    }
}

/// An in-toto statement (field order as cosign writes it).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Statement {
    /// [`STATEMENT_V01`] for statements this crate makes.
    #[serde(rename = "_type")]
    pub statement_type: String,
    /// The predicate's type URI.
    #[serde(rename = "predicateType")]
    pub predicate_type: String,
    /// What the statement is about.
    pub subject: Vec<Subject>,
    /// The predicate (`null` when unset).
    #[serde(default)]
    pub predicate: Value,
}

impl Statement {
    /// A v0.1 statement about one image, as `cosign attest` makes it.
    pub fn for_image(name: &str, digest: &Digest, predicate_type: &str, predicate: Value) -> Self {
        Statement {
            statement_type: STATEMENT_V01.to_owned(),
            predicate_type: predicate_type.to_owned(),
            subject: vec![Subject::image(name, digest)],
            predicate,
        }
    }

    /// The statement's JSON bytes (compact).
    pub fn to_bytes(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("the statement serializes")
    }

    /// The subjects' digests as `alg:hex`, comma-separated (what a mismatch names).
    pub fn subject_digests(&self) -> String {
        self.subject
            .iter()
            .flat_map(|s| s.digest.iter().map(|(a, h)| format!("{a}:{h}")))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// True when some subject names `digest`.
    pub fn is_about(&self, digest: &Digest) -> bool {
        self.subject.iter().any(|s| s.matches(digest))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_names() {
        assert_eq!(predicate_type_uri("spdxjson"), Some(PREDICATE_SPDX));
        assert_eq!(
            predicate_type_uri("slsaprovenance1"),
            Some(PREDICATE_SLSA_V1)
        );
        assert_eq!(
            predicate_type_uri("https://example.com/p/v1"),
            Some("https://example.com/p/v1")
        );
        assert_eq!(predicate_type_uri("nonsense"), None);
    }

    #[test]
    fn layout_and_subject() {
        let d = Digest::sha256(b"m");
        let s = Statement::for_image(
            "r.example/app",
            &d,
            PREDICATE_SPDX,
            serde_json::json!({"x":1}),
        );
        let text = String::from_utf8(s.to_bytes()).unwrap();
        assert_eq!(
            text,
            format!(
                r#"{{"_type":"https://in-toto.io/Statement/v0.1","predicateType":"https://spdx.dev/Document","subject":[{{"name":"r.example/app","digest":{{"sha256":"{}"}}}}],"predicate":{{"x":1}}}}"#,
                d.encoded()
            )
        );
        let back: Statement = serde_json::from_str(&text).unwrap();
        assert!(back.is_about(&d));
        assert!(!back.is_about(&Digest::sha256(b"other")));
    }
}
