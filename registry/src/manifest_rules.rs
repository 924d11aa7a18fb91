//! The manifest rules of the core: what a pushed (or proxied, or scrubbed) manifest must be
//! for the registry to store it, and what it learns from one (the blobs and manifests it
//! relies on, its subject, artifact type and SPDX layer). The PUT handler, the pull-through
//! cache and the scrubber all check documents here; nothing here knows about HTTP routes or
//! features.

use serde_json::Value;
use validator::{Digest, SPDX_ARTIFACT_TYPE};

use crate::errors::{ApiError, ApiResult, Code};

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";
const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";
const DOCKER_MANIFEST: &str = "application/vnd.docker.distribution.manifest.v2+json";
const DOCKER_LIST: &str = "application/vnd.docker.distribution.manifest.list.v2+json";

/// What a manifest PUT learned from the document.
#[derive(Debug)]
pub(crate) struct CheckedManifest {
    pub media_type: String,
    /// Blobs (config and layers) that must be in the repository.
    pub blobs: Vec<Digest>,
    /// Manifests (of an index) that must be in the repository.
    pub manifests: Vec<Digest>,
    pub subject: Option<Digest>,
    /// The `artifactType` a referrers listing reports.
    pub artifact_type: Option<String>,
    pub annotations: Option<Value>,
    /// The SPDX document of an SBOM referrer (see [`spdx_layer`]).
    pub spdx_layer: Option<Digest>,
}

pub(crate) fn invalid(detail: impl Into<String>) -> ApiError {
    ApiError::new(Code::ManifestInvalid, detail)
}

fn descriptor(v: &Value, field: &str) -> ApiResult<(String, Digest)> {
    let media_type = v
        .get("mediaType")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{field}: descriptor has no mediaType")))?;
    let digest = v
        .get("digest")
        .and_then(Value::as_str)
        .ok_or_else(|| invalid(format!("{field}: descriptor has no digest")))?;
    let digest = Digest::parse(digest).map_err(|e| invalid(format!("{field}: {e}")))?;
    if v.get("size").and_then(Value::as_u64).is_none() {
        return Err(invalid(format!("{field}: descriptor has no valid size")));
    }
    Ok((media_type.to_owned(), digest))
}

fn non_distributable(media_type: &str) -> bool {
    media_type.starts_with("application/vnd.oci.image.layer.nondistributable.")
        || media_type == "application/vnd.docker.image.rootfs.foreign.diff.tar.gzip"
}

/// The single place where a pushed manifest is checked: `validator`'s document rules (strict
/// JSON, media types, descriptors, layer and platform rules), then the fields the registry
/// itself relies on (the blobs and manifests it must hold, the subject, the artifact type).
pub(crate) fn check_document(
    bytes: &[u8],
    content_type: Option<&str>,
) -> ApiResult<CheckedManifest> {
    let declared = match content_type {
        Some(c) => Some(
            validator::MediaType::parse(c).map_err(|e| invalid(format!("Content-Type: {e}")))?,
        ),
        None => None,
    };
    let (report, doc) = validator::check_document(bytes, None, declared.as_ref(), "manifest");
    if let Some(v) = report.errors().next() {
        return Err(invalid(v.to_string()));
    }
    if matches!(doc, Some(validator::Document::Config(_))) {
        return Err(invalid("an image config is not a manifest"));
    }
    let doc: Value =
        serde_json::from_slice(bytes).map_err(|e| invalid(format!("manifest is not JSON: {e}")))?;
    let obj = doc
        .as_object()
        .ok_or_else(|| invalid("manifest is not a JSON object"))?;
    if obj.get("schemaVersion").and_then(Value::as_u64) != Some(2) {
        return Err(invalid("schemaVersion must be 2"));
    }
    let body_type = obj.get("mediaType").and_then(Value::as_str);
    let media_type = match (content_type, body_type) {
        (Some(c), Some(b)) if c != b => {
            return Err(invalid(format!(
                "Content-Type {c:?} differs from the manifest's mediaType {b:?}"
            )));
        }
        (_, Some(b)) => b.to_owned(),
        (Some(c), None) => c.to_owned(),
        (None, None) => return Err(invalid("manifest has no mediaType and no Content-Type")),
    };
    let is_index = match media_type.as_str() {
        OCI_INDEX | DOCKER_LIST => true,
        OCI_MANIFEST | DOCKER_MANIFEST => false,
        _ => obj.contains_key("manifests") && !obj.contains_key("config"),
    };
    let mut out = CheckedManifest {
        media_type: media_type.clone(),
        blobs: Vec::new(),
        manifests: Vec::new(),
        subject: None,
        artifact_type: obj
            .get("artifactType")
            .and_then(Value::as_str)
            .map(str::to_owned),
        annotations: obj.get("annotations").filter(|a| a.is_object()).cloned(),
        spdx_layer: spdx_layer(&doc),
    };
    if is_index {
        let list = obj
            .get("manifests")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid("index has no manifests array"))?;
        for (i, m) in list.iter().enumerate() {
            let (_, d) = descriptor(m, &format!("manifests[{i}]"))?;
            out.manifests.push(d);
        }
    } else {
        let config = obj
            .get("config")
            .ok_or_else(|| invalid("image manifest has no config"))?;
        let (config_type, d) = descriptor(config, "config")?;
        out.blobs.push(d);
        if out.artifact_type.is_none() {
            out.artifact_type = Some(config_type);
        }
        let layers = obj
            .get("layers")
            .and_then(Value::as_array)
            .ok_or_else(|| invalid("image manifest has no layers array"))?;
        for (i, l) in layers.iter().enumerate() {
            let (mt, d) = descriptor(l, &format!("layers[{i}]"))?;
            if !non_distributable(&mt) {
                out.blobs.push(d);
            }
        }
    }
    if let Some(s) = obj.get("subject") {
        let (_, d) = descriptor(s, "subject")?;
        out.subject = Some(d);
    }
    Ok(out)
}

/// The SPDX layer of a pushed manifest: `Some` when it has a `subject` and a layer of media
/// type `application/spdx+json` (the first such layer).
pub(crate) fn spdx_layer(manifest: &Value) -> Option<Digest> {
    manifest.get("subject")?;
    manifest
        .get("layers")?
        .as_array()?
        .iter()
        .find(|l| l.get("mediaType").and_then(Value::as_str) == Some(SPDX_ARTIFACT_TYPE))
        .and_then(|l| l.get("digest")?.as_str())
        .and_then(|d| Digest::parse(d).ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn desc(mt: &str, content: &[u8]) -> Value {
        serde_json::json!({"mediaType": mt, "digest": Digest::sha256(content).as_str(), "size": content.len()})
    }

    #[test]
    fn checks_image_manifests_and_indexes() {
        let m = serde_json::json!({
            "schemaVersion": 2,
            "mediaType": OCI_MANIFEST,
            "config": desc("application/vnd.oci.image.config.v1+json", b"{}"),
            "layers": [
                desc("application/vnd.oci.image.layer.v1.tar", b"l"),
                desc("application/vnd.oci.image.layer.nondistributable.v1.tar", b"n"),
            ],
            "subject": desc(OCI_MANIFEST, b"s"),
        });
        let c = check_document(&serde_json::to_vec(&m).unwrap(), Some(OCI_MANIFEST)).unwrap();
        assert_eq!(
            c.blobs.len(),
            2,
            "the non-distributable layer is not required"
        );
        assert_eq!(c.subject, Some(Digest::sha256(b"s")));
        assert_eq!(
            c.artifact_type.as_deref(),
            Some("application/vnd.oci.image.config.v1+json")
        );

        let i = serde_json::json!({"schemaVersion": 2, "mediaType": OCI_INDEX, "manifests": [desc(OCI_MANIFEST, b"x")]});
        let c = check_document(&serde_json::to_vec(&i).unwrap(), None).unwrap();
        assert_eq!(c.manifests, vec![Digest::sha256(b"x")]);
        assert!(c.artifact_type.is_none());
    }

    #[test]
    fn rejects_invalid_manifests() {
        let cases: &[(&[u8], Option<&str>)] = &[
            (b"not json", None),
            (b"[]", None),
            (br#"{"schemaVersion":1,"mediaType":"application/vnd.oci.image.manifest.v1+json"}"#, None),
            (br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.manifest.v1+json","layers":[]}"#, None),
            (br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json"}"#, None),
            (br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#, Some(OCI_MANIFEST)),
            (br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[{"mediaType":"x","digest":"sha256:abc","size":1}]}"#, None),
            (br#"{"schemaVersion":2}"#, None),
        ];
        for (body, ct) in cases {
            let err = check_document(body, *ct).unwrap_err();
            assert_eq!(
                err.code,
                Code::ManifestInvalid,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn spdx_layers_of_referrers() {
        let d = Digest::sha256(b"doc");
        let m = serde_json::json!({
            "subject": {"digest": Digest::sha256(b"s").as_str()},
            "layers": [{"mediaType": "application/x", "digest": Digest::sha256(b"x").as_str()},
                       {"mediaType": SPDX_ARTIFACT_TYPE, "digest": d.as_str()}],
        });
        assert_eq!(spdx_layer(&m), Some(d));
        let mut no_subject = m.clone();
        no_subject.as_object_mut().unwrap().remove("subject");
        assert_eq!(spdx_layer(&no_subject), None);
        let mut other = m;
        other["layers"] =
            serde_json::json!([{"mediaType": "application/x", "digest": "sha256:00"}]);
        assert_eq!(spdx_layer(&other), None);
    }
}
