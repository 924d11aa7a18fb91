//! The simple-signing payload: the JSON blob a cosign image signature signs, binding a
//! repository name to a manifest digest.

use std::collections::BTreeMap;

use serde::Serialize;
use serde_json::Value;
use validator::Digest;

use super::SignatureError;

/// `critical.type` of every cosign image signature payload.
pub const SIMPLE_SIGNING_TYPE: &str = "cosign container image signature";

/// A parsed simple-signing payload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SimpleSigning {
    /// `critical.identity.docker-reference`: the repository (registry and path, no tag).
    pub docker_reference: String,
    /// `critical.image.docker-manifest-digest`: the signed manifest.
    pub manifest_digest: Digest,
    /// `optional`: the `-a key=value` annotations (`None` when the field is `null`).
    pub optional: Option<BTreeMap<String, Value>>,
}

#[derive(Serialize)]
struct Wire<'a> {
    critical: Critical<'a>,
    optional: Option<&'a BTreeMap<String, Value>>,
}

#[derive(Serialize)]
struct Critical<'a> {
    identity: Identity<'a>,
    image: Image<'a>,
    #[serde(rename = "type")]
    kind: &'a str,
}

#[derive(Serialize)]
struct Identity<'a> {
    #[serde(rename = "docker-reference")]
    docker_reference: &'a str,
}

#[derive(Serialize)]
struct Image<'a> {
    #[serde(rename = "docker-manifest-digest")]
    digest: &'a str,
}

impl SimpleSigning {
    /// A payload for `docker_reference` (repository name) and `manifest_digest`, with
    /// optional string annotations.
    pub fn new(
        docker_reference: &str,
        manifest_digest: &Digest,
        annotations: Option<&BTreeMap<String, String>>,
    ) -> Self {
        SimpleSigning {
            docker_reference: docker_reference.to_owned(),
            manifest_digest: manifest_digest.clone(),
            optional: annotations.map(|a| {
                a.iter()
                    .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                    .collect()
            }),
        }
    }

    /// The payload bytes, laid out as cosign writes them: compact JSON, `critical` with
    /// `identity`, `image`, `type` in that order, then `optional` (`null` when absent).
    pub fn to_bytes(&self) -> Vec<u8> {
        let wire = Wire {
            critical: Critical {
                identity: Identity {
                    docker_reference: &self.docker_reference,
                },
                image: Image {
                    digest: self.manifest_digest.as_str(),
                },
                kind: SIMPLE_SIGNING_TYPE,
            },
            optional: self.optional.as_ref(),
        };
        serde_json::to_vec(&wire).expect("the payload serializes")
    }

    /// Parses a payload; every `critical` field must be present (the error names the
    /// missing one) and `critical.type` must be the cosign constant. Key names are matched
    /// case-insensitively, as cosign's decoder does.
    pub fn parse(bytes: &[u8]) -> Result<Self, SignatureError> {
        let bad = |detail: String| SignatureError::Malformed {
            what: "simple-signing payload".to_owned(),
            detail,
        };
        let doc: Value =
            serde_json::from_slice(bytes).map_err(|e| bad(format!("not JSON: {e}")))?;
        let critical = field(&doc, "critical").ok_or_else(|| bad("critical is missing".into()))?;
        let reference = field(critical, "identity")
            .and_then(|i| field(i, "docker-reference"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                bad("critical.identity.docker-reference is missing or not a string".into())
            })?;
        let digest = field(critical, "image")
            .and_then(|i| field(i, "docker-manifest-digest"))
            .and_then(Value::as_str)
            .ok_or_else(|| {
                bad("critical.image.docker-manifest-digest is missing or not a string".into())
            })?;
        let manifest_digest = Digest::parse(digest).map_err(|e| {
            bad(format!(
                "critical.image.docker-manifest-digest \"{digest}\": {e}"
            ))
        })?;
        let kind = field(critical, "type")
            .and_then(Value::as_str)
            .ok_or_else(|| bad("critical.type is missing or not a string".into()))?;
        if kind != SIMPLE_SIGNING_TYPE {
            return Err(bad(format!(
                "critical.type is \"{kind}\", expected \"{SIMPLE_SIGNING_TYPE}\""
            )));
        }
        let optional = match field(&doc, "optional") {
            None | Some(Value::Null) => None,
            Some(Value::Object(m)) => Some(m.iter().map(|(k, v)| (k.clone(), v.clone())).collect()),
            Some(_) => return Err(bad("optional is neither an object nor null".into())),
        };
        Ok(SimpleSigning {
            docker_reference: reference.to_owned(),
            manifest_digest,
            optional,
        })
    }
}

/// An object member by exact name, else by case-insensitive name.
fn field<'a>(v: &'a Value, name: &str) -> Option<&'a Value> {
    let obj = v.as_object()?;
    obj.get(name).or_else(|| {
        obj.iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn digest() -> Digest {
        Digest::sha256(b"manifest")
    }

    #[test]
    fn layout_matches_cosign() {
        let p = SimpleSigning::new("registry.example.com/app", &digest(), None);
        let expected = format!(
            "{{\"critical\":{{\"identity\":{{\"docker-reference\":\"registry.example.com/app\"}},\"image\":{{\"docker-manifest-digest\":\"{}\"}},\"type\":\"cosign container image signature\"}},\"optional\":null}}",
            digest()
        );
        assert_eq!(String::from_utf8(p.to_bytes()).unwrap(), expected);
    }

    #[test]
    fn round_trip_with_annotations() {
        let mut a = BTreeMap::new();
        a.insert("b".to_owned(), "2".to_owned());
        a.insert("a".to_owned(), "1".to_owned());
        let p = SimpleSigning::new("r.example/app", &digest(), Some(&a));
        let bytes = p.to_bytes();
        assert!(String::from_utf8_lossy(&bytes).ends_with(r#""optional":{"a":"1","b":"2"}}"#));
        assert_eq!(SimpleSigning::parse(&bytes).unwrap(), p);
    }

    #[test]
    fn missing_field_is_named() {
        let text = br#"{"critical":{"identity":{"docker-reference":"x"},"type":"cosign container image signature"},"optional":null}"#;
        let e = SimpleSigning::parse(text).unwrap_err().to_string();
        assert!(e.contains("critical.image.docker-manifest-digest"), "{e}");
        let text = format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"x"}},"image":{{"docker-manifest-digest":"{}"}},"type":"other"}}}}"#,
            digest()
        );
        let e = SimpleSigning::parse(text.as_bytes())
            .unwrap_err()
            .to_string();
        assert!(e.contains("critical.type"), "{e}");
    }

    #[test]
    fn capitalised_key_is_read() {
        let text = format!(
            r#"{{"critical":{{"identity":{{"docker-reference":"x"}},"image":{{"Docker-manifest-digest":"{}"}},"type":"cosign container image signature"}},"optional":null}}"#,
            digest()
        );
        assert_eq!(
            SimpleSigning::parse(text.as_bytes())
                .unwrap()
                .manifest_digest,
            digest()
        );
    }
}
