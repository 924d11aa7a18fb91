//! The two documents that list others: image manifests (config, layers, artifact type) and
//! image indexes (manifests with their platforms).
use serde_json::Value;

use super::*;

impl Ctx<'_> {
    pub(super) fn manifest(
        &self,
        v: &Value,
        declared: Option<&MediaType>,
        r: &mut Report,
    ) -> Option<Manifest> {
        let o = self.object(v, "$", r)?;
        if o.contains_key("manifests") {
            r.error(Rule::AmbiguousDocument, self.at("$.manifests"), "a manifest must not have manifests (it would also read as an index; CVE-2021-41190)");
        }
        self.schema_version(o, r);
        let media_type = self.own_media_type(
            o,
            declared,
            &[MediaType::OciManifest, MediaType::DockerManifest],
            r,
        );
        let artifact_type = self.artifact_type(o, "$", r);
        let config = match o.get("config") {
            Some(c) => self.descriptor(c, "$.config", r),
            None => {
                r.error(Rule::Required, self.at("$.config"), "is required");
                None
            }
        };
        if let Some(c) = &config
            && c.media_type == MediaType::OciEmpty
            && artifact_type.is_none()
        {
            {
                r.error(
                    Rule::ArtifactType,
                    self.at("$.artifactType"),
                    "must be set when config.mediaType is application/vnd.oci.empty.v1+json",
                );
            }
        }
        let is_image = config
            .as_ref()
            .is_some_and(|c| c.media_type.is_image_config());
        let mut layers = Vec::new();
        match o.get("layers") {
            Some(Value::Array(items)) => {
                for (i, it) in items.iter().enumerate() {
                    let p = item("$.layers", i);
                    if let Some(d) = self.descriptor(it, &p, r) {
                        // cosign's signature and attestation manifests (at the
                        // sha256-<hex>.sig/.att tags) and BuildKit's attestation manifests
                        // carry an image config and payload layers: documents, not layers to
                        // apply.
                        if is_image
                            && d.media_type.layer_compression().is_none()
                            && !PAYLOAD_LAYER_TYPES.contains(&d.media_type.as_str())
                        {
                            r.error(Rule::LayerMediaType, self.at(&field(&p, "mediaType")), format!("{} is not a layer type a runtime can apply (tar, tar+gzip, tar+zstd, or their Docker equivalents)", d.media_type));
                        }
                        layers.push(d);
                    }
                }
                if is_image && items.is_empty() {
                    r.warn(
                        Rule::NoLayers,
                        self.at("$.layers"),
                        "an image manifest should have at least one layer",
                    );
                }
            }
            Some(other) => r.error(
                Rule::Required,
                self.at("$.layers"),
                format!("must be an array, found {}", json_type(other)),
            ),
            None => r.error(Rule::Required, self.at("$.layers"), "is required"),
        }
        let subject = self.subject(o, r);
        let annotations = self.annotations(o, "$", r);
        Some(Manifest {
            media_type: media_type?,
            artifact_type,
            config: config?,
            layers,
            subject,
            annotations,
        })
    }

    pub(super) fn index(
        &self,
        v: &Value,
        declared: Option<&MediaType>,
        r: &mut Report,
    ) -> Option<Index> {
        let o = self.object(v, "$", r)?;
        for key in ["config", "layers"] {
            if o.contains_key(key) {
                r.error(Rule::AmbiguousDocument, self.at(&field("$", key)), format!("an index must not have {key} (it would also read as a manifest; CVE-2021-41190)"));
            }
        }
        self.schema_version(o, r);
        let media_type = self.own_media_type(
            o,
            declared,
            &[MediaType::OciIndex, MediaType::DockerManifestList],
            r,
        );
        let artifact_type = self.artifact_type(o, "$", r);
        let mut manifests = Vec::new();
        match o.get("manifests") {
            Some(Value::Array(items)) => {
                for (i, it) in items.iter().enumerate() {
                    if let Some(d) = self.descriptor(it, &item("$.manifests", i), r) {
                        manifests.push(d);
                    }
                }
            }
            Some(other) => r.error(
                Rule::Required,
                self.at("$.manifests"),
                format!("must be an array, found {}", json_type(other)),
            ),
            None => r.error(Rule::Required, self.at("$.manifests"), "is required"),
        }
        let subject = self.subject(o, r);
        let annotations = self.annotations(o, "$", r);
        Some(Index {
            media_type: media_type?,
            artifact_type,
            manifests,
            subject,
            annotations,
        })
    }
}
