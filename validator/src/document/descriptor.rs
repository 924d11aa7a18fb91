//! Descriptors: digest, size, media type, URLs, platform and annotations of each reference,
//! a document's own `mediaType` against what it was served as, and `subject`.
use serde_json::{Map, Value};

use super::*;

impl Ctx<'_> {
    pub(super) fn descriptor(&self, v: &Value, path: &str, r: &mut Report) -> Option<Descriptor> {
        let o = self.object(v, path, r)?;
        let errors_before = r.errors().count();
        let media_type = self.req_str(o, path, "mediaType", r).and_then(|s| {
            self.media_type_value(s, &field(path, "mediaType"), Rule::DescriptorMediaType, r)
        });
        if media_type == Some(MediaType::DockerSchema1) {
            r.error(
                Rule::DescriptorMediaType,
                self.at(&field(path, "mediaType")),
                "Docker schema1 manifests are not supported",
            );
        }
        let digest = self
            .req_str(o, path, "digest", r)
            .and_then(|s| self.digest(s, &field(path, "digest"), r));
        let size = match o.get("size") {
            Some(Value::Number(n)) => match n.as_u64() {
                Some(s) if s <= i64::MAX as u64 => Some(s),
                _ => {
                    r.error(
                        Rule::DescriptorSize,
                        self.at(&field(path, "size")),
                        format!("must be a non-negative integer, found {n}"),
                    );
                    None
                }
            },
            Some(other) => {
                r.error(
                    Rule::DescriptorSize,
                    self.at(&field(path, "size")),
                    format!("must be an integer, found {}", json_type(other)),
                );
                None
            }
            None => {
                r.error(
                    Rule::DescriptorSize,
                    self.at(&field(path, "size")),
                    "is required",
                );
                None
            }
        };
        let urls = self
            .opt_str_array(o, path, "urls", Rule::DescriptorUrls, r)
            .unwrap_or_default();
        if !urls.is_empty() {
            r.warn(Rule::DescriptorUrls, self.at(&field(path, "urls")), format!("{} url(s) present; they are never followed, the blob must come from the registry", urls.len()));
            for (i, u) in urls.iter().enumerate() {
                if !(u.starts_with("http://") || u.starts_with("https://")) {
                    r.error(
                        Rule::DescriptorUrls,
                        self.at(&item(&field(path, "urls"), i)),
                        format!("{u:?} is not an http or https URL"),
                    );
                }
            }
        }
        let annotations = self.annotations(o, path, r);
        let artifact_type = self.artifact_type(o, path, r);
        let platform = match o.get("platform") {
            None | Some(Value::Null) => None,
            Some(p) => {
                let pp = field(path, "platform");
                self.object(p, &pp, r)
                    .and_then(|po| self.platform(po, &pp, r))
            }
        };
        let data = match o.get("data") {
            None | Some(Value::Null) => None,
            Some(Value::String(b64)) => match base64::engine::general_purpose::STANDARD.decode(b64)
            {
                Ok(bytes) => {
                    if let (Some(d), Some(s)) = (&digest, size) {
                        if bytes.len() as u64 != s {
                            r.error(
                                Rule::DescriptorData,
                                self.at(&field(path, "data")),
                                format!("data decodes to {} bytes, size says {s}", bytes.len()),
                            );
                        } else if &Digest::of(d.algorithm(), &bytes) != d {
                            r.error(
                                Rule::DescriptorData,
                                self.at(&field(path, "data")),
                                format!("data does not match digest {d}"),
                            );
                        }
                    }
                    Some(bytes)
                }
                Err(e) => {
                    r.error(
                        Rule::DescriptorData,
                        self.at(&field(path, "data")),
                        format!("data is not base64: {e}"),
                    );
                    None
                }
            },
            Some(other) => {
                r.error(
                    Rule::DescriptorData,
                    self.at(&field(path, "data")),
                    format!("must be a base64 string, found {}", json_type(other)),
                );
                None
            }
        };
        if media_type == Some(MediaType::OciEmpty)
            && let (Some(d), Some(s)) = (&digest, size)
            && (d.as_str() != EMPTY_DIGEST || s != 2)
        {
            r.error(Rule::EmptyDescriptor, self.at(path), format!("an empty descriptor must have size 2 and digest {EMPTY_DIGEST}, found {s} and {d}"));
        }
        if r.errors().count() != errors_before {
            return None;
        }
        Some(Descriptor {
            media_type: media_type?,
            digest: digest?,
            size: size?,
            platform,
            annotations,
            artifact_type,
            data,
            urls,
        })
    }

    /// The document's own `mediaType` against what it must be and what led here.
    pub(super) fn own_media_type(
        &self,
        o: &Map<String, Value>,
        declared: Option<&MediaType>,
        allowed: &[MediaType],
        r: &mut Report,
    ) -> Option<MediaType> {
        let own = self
            .opt_str(o, "$", "mediaType", r)
            .and_then(|s| self.media_type_value(s, "$.mediaType", Rule::MediaType, r));
        if let Some(mt) = &own
            && !allowed.contains(mt)
        {
            r.error(
                Rule::MediaType,
                self.at("$.mediaType"),
                format!(
                    "{mt} is not one of {}",
                    allowed
                        .iter()
                        .map(MediaType::as_str)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
            );
        }
        if let Some(d) = declared {
            match &own {
                Some(mt) if mt != d => r.error(
                    Rule::MediaType,
                    self.at("$.mediaType"),
                    format!("document says {mt} but was referenced as {d}"),
                ),
                None if !allowed.contains(d) => r.error(
                    Rule::MediaType,
                    self.at("$.mediaType"),
                    format!(
                        "referenced as {d}, which is not one of {}",
                        allowed
                            .iter()
                            .map(MediaType::as_str)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                ),
                None if matches!(d, MediaType::DockerManifest | MediaType::DockerManifestList) => r
                    .error(
                        Rule::MediaType,
                        self.at("$.mediaType"),
                        format!("a Docker schema2 document must carry its mediaType {d}"),
                    ),
                _ => {}
            }
        }
        own.or_else(|| declared.cloned())
            .or_else(|| allowed.first().cloned())
    }

    pub(super) fn subject(&self, o: &Map<String, Value>, r: &mut Report) -> Option<Descriptor> {
        let v = o.get("subject").filter(|v| !v.is_null())?;
        let d = self.descriptor(v, "$.subject", r)?;
        if !(d.media_type.is_manifest() || d.media_type.is_index()) {
            r.error(
                Rule::Subject,
                self.at("$.subject.mediaType"),
                format!(
                    "subject must describe a manifest or index, found {}",
                    d.media_type
                ),
            );
        }
        Some(d)
    }
}
