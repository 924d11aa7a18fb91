//! Documents: image manifests, image indexes, image configs and the descriptors in them.
//!
//! Rules run over the strictly parsed JSON ([`crate::json`]) so that every finding can name its
//! JSON path and every rule runs even when an earlier one failed. What passes is also returned as
//! typed values ([`Manifest`], [`Index`], [`ImageConfig`]) for the walker and for callers.

use std::collections::BTreeMap;

use base64::Engine as _;
use serde_json::{Map, Value};

use crate::digest::Digest;
use crate::json::{JsonError, parse_strict};
use crate::media_type::MediaType;
use crate::platform::{KNOWN_ARCH, KNOWN_OS, Platform};
use crate::report::{Report, Rule};

/// Largest manifest or index accepted (the limit registries and containerd use).
pub const MAX_MANIFEST_SIZE: usize = 4 * 1024 * 1024;

/// Layer media types of signature and attestation manifests: cosign's (simple-signing payloads
/// and DSSE envelopes) and BuildKit's (in-toto statements, in the attestation manifest
/// `docker buildx build` adds to an index as `unknown/unknown`). Accepted in a manifest with an
/// image config, where any other non-tar layer is an error: they are documents, not layers to
/// apply.
pub const PAYLOAD_LAYER_TYPES: &[&str] = &[
    "application/vnd.dev.cosign.simplesigning.v1+json",
    "application/vnd.dsse.envelope.v1+json",
    "application/vnd.in-toto+json",
];

/// Largest image config accepted.
pub const MAX_CONFIG_SIZE: usize = 8 * 1024 * 1024;

/// Digest of the empty JSON object `{}`, the content of every empty descriptor.
pub const EMPTY_DIGEST: &str =
    "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a";

/// A descriptor that passed its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// The media type of the content.
    pub media_type: MediaType,
    /// The content's digest.
    pub digest: Digest,
    /// The content's size in bytes.
    pub size: u64,
    /// The platform, on index entries.
    pub platform: Option<Platform>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
    /// `artifactType`, when given.
    pub artifact_type: Option<MediaType>,
    /// Embedded content (`data`), already checked against digest and size.
    pub data: Option<Vec<u8>>,
    /// `urls`, recorded and never followed.
    pub urls: Vec<String>,
}

impl Descriptor {
    /// The `org.opencontainers.image.ref.name` annotation.
    pub fn ref_name(&self) -> Option<&str> {
        self.annotations
            .get("org.opencontainers.image.ref.name")
            .map(String::as_str)
    }
}

/// An image manifest that passed its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Manifest {
    /// The media type it has (OCI or Docker schema2).
    pub media_type: MediaType,
    /// `artifactType`, when given.
    pub artifact_type: Option<MediaType>,
    /// The config descriptor.
    pub config: Descriptor,
    /// Layers, base first.
    pub layers: Vec<Descriptor>,
    /// `subject`, when given.
    pub subject: Option<Descriptor>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

/// An image index that passed its rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Index {
    /// The media type it has (OCI index or Docker manifest list).
    pub media_type: MediaType,
    /// `artifactType`, when given.
    pub artifact_type: Option<MediaType>,
    /// The entries.
    pub manifests: Vec<Descriptor>,
    /// `subject`, when given.
    pub subject: Option<Descriptor>,
    /// Annotations.
    pub annotations: BTreeMap<String, String>,
}

impl Index {
    /// The first entry whose platform `accept` takes (first match wins, as the spec says), or,
    /// when none does, the platforms the index offers, for the error message.
    pub fn pick_platform(&self, accept: impl Fn(&Platform) -> bool) -> Result<&Descriptor, String> {
        if let Some(d) = self
            .manifests
            .iter()
            .find(|d| d.platform.as_ref().is_some_and(&accept))
        {
            return Ok(d);
        }
        let offered: Vec<String> = self
            .manifests
            .iter()
            .filter_map(|d| d.platform.as_ref().map(ToString::to_string))
            .collect();
        Err(if offered.is_empty() {
            "no platforms".to_owned()
        } else {
            offered.join(", ")
        })
    }
}

/// An image config that passed its rules.
#[derive(Debug, Clone, PartialEq)]
pub struct ImageConfig {
    /// The platform it was built for.
    pub platform: Platform,
    /// `rootfs.diff_ids`, base first.
    pub diff_ids: Vec<Digest>,
    /// `config.StopSignal`, a signal name.
    pub stop_signal: Option<String>,
    /// The whole config as oci-spec types.
    pub oci: oci_spec::image::ImageConfiguration,
}

/// What kind of document to check.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DocumentKind {
    /// An image manifest.
    Manifest,
    /// An image index.
    Index,
    /// An image config.
    Config,
}

/// A checked document of any kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Document {
    /// An image manifest.
    Manifest(Box<Manifest>),
    /// An image index.
    Index(Box<Index>),
    /// An image config.
    Config(Box<ImageConfig>),
}

/// Guesses the kind of a JSON document from its `mediaType` or, failing that, its shape.
pub fn sniff_kind(value: &Value) -> Option<DocumentKind> {
    if let Some(mt) = value
        .get("mediaType")
        .and_then(Value::as_str)
        .and_then(|s| MediaType::parse(s).ok())
    {
        if mt.is_manifest() {
            return Some(DocumentKind::Manifest);
        }
        if mt.is_index() {
            return Some(DocumentKind::Index);
        }
    }
    let obj = value.as_object()?;
    if obj.contains_key("manifests") {
        Some(DocumentKind::Index)
    } else if obj.contains_key("layers")
        || obj.contains_key("config") && obj.contains_key("schemaVersion")
    {
        Some(DocumentKind::Manifest)
    } else if obj.contains_key("rootfs") || obj.contains_key("architecture") {
        Some(DocumentKind::Config)
    } else {
        None
    }
}

/// Checks one document's bytes.
///
/// `kind` says what the document must be (`None`: decide from `mediaType` or shape);
/// `declared` is the media type that led here (a descriptor or a `Content-Type`), which the
/// document's own `mediaType` must agree with. `location` names the document in findings.
pub fn check_document(
    bytes: &[u8],
    kind: Option<DocumentKind>,
    declared: Option<&MediaType>,
    location: &str,
) -> (Report, Option<Document>) {
    let mut r = Report::new();
    let limit = match kind {
        Some(DocumentKind::Config) => MAX_CONFIG_SIZE,
        _ => MAX_MANIFEST_SIZE,
    };
    let Some(value) = parse_limited(bytes, limit, location, &mut r) else {
        return (r, None);
    };
    let kind = kind
        .or_else(|| declared.and_then(kind_of_media_type))
        .or_else(|| sniff_kind(&value));
    let Some(kind) = kind else {
        r.error(
            Rule::MediaType,
            location,
            "cannot tell the document kind: no known mediaType and neither manifest, index nor config members",
        );
        return (r, None);
    };
    let ctx = Ctx { loc: location };
    let doc = match kind {
        DocumentKind::Manifest => ctx
            .manifest(&value, declared, &mut r)
            .map(|m| Document::Manifest(Box::new(m))),
        DocumentKind::Index => ctx
            .index(&value, declared, &mut r)
            .map(|i| Document::Index(Box::new(i))),
        DocumentKind::Config => ctx
            .config(&value, None, &mut r)
            .map(|c| Document::Config(Box::new(c))),
    };
    let doc = if r.is_ok() { doc } else { None };
    (r, doc)
}

fn kind_of_media_type(mt: &MediaType) -> Option<DocumentKind> {
    if mt.is_manifest() {
        Some(DocumentKind::Manifest)
    } else if mt.is_index() {
        Some(DocumentKind::Index)
    } else if mt.is_image_config() {
        Some(DocumentKind::Config)
    } else {
        None
    }
}

/// Checks an image config against the layer count of the manifest that names it.
pub fn check_config(
    bytes: &[u8],
    layer_count: Option<usize>,
    location: &str,
) -> (Report, Option<ImageConfig>) {
    let mut r = Report::new();
    let Some(value) = parse_limited(bytes, MAX_CONFIG_SIZE, location, &mut r) else {
        return (r, None);
    };
    let cfg = Ctx { loc: location }.config(&value, layer_count, &mut r);
    let cfg = if r.is_ok() { cfg } else { None };
    (r, cfg)
}

/// The size limit, then strict JSON; a failure is recorded in `r` and gives `None`.
fn parse_limited(bytes: &[u8], limit: usize, location: &str, r: &mut Report) -> Option<Value> {
    if bytes.len() > limit {
        r.error(
            Rule::DocumentSize,
            location,
            format!("document is {} bytes, limit {limit}", bytes.len()),
        );
        return None;
    }
    match parse_strict(bytes) {
        Ok(v) => Some(v),
        Err(e @ JsonError::DuplicateKey { .. }) => {
            r.error(Rule::JsonDuplicateKey, location, e.to_string());
            None
        }
        Err(e) => {
            r.error(Rule::JsonSyntax, location, e.to_string());
            None
        }
    }
}

struct Ctx<'a> {
    loc: &'a str,
}

fn field(path: &str, key: &str) -> String {
    format!("{path}.{key}")
}

fn item(path: &str, i: usize) -> String {
    format!("{path}[{i}]")
}

fn json_type(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

impl Ctx<'_> {
    fn at(&self, path: &str) -> String {
        format!("{} {path}", self.loc)
    }

    fn object<'v>(
        &self,
        v: &'v Value,
        path: &str,
        r: &mut Report,
    ) -> Option<&'v Map<String, Value>> {
        match v.as_object() {
            Some(o) => Some(o),
            None => {
                r.error(
                    Rule::Required,
                    self.at(path),
                    format!("must be an object, found {}", json_type(v)),
                );
                None
            }
        }
    }

    /// A required string member.
    fn req_str<'v>(
        &self,
        o: &'v Map<String, Value>,
        path: &str,
        key: &str,
        r: &mut Report,
    ) -> Option<&'v str> {
        match o.get(key) {
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                r.error(
                    Rule::Required,
                    self.at(&field(path, key)),
                    format!("must be a string, found {}", json_type(other)),
                );
                None
            }
            None => {
                r.error(Rule::Required, self.at(&field(path, key)), "is required");
                None
            }
        }
    }

    /// An optional string member (`null` counts as absent).
    fn opt_str<'v>(
        &self,
        o: &'v Map<String, Value>,
        path: &str,
        key: &str,
        r: &mut Report,
    ) -> Option<&'v str> {
        match o.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::String(s)) => Some(s),
            Some(other) => {
                r.error(
                    Rule::Required,
                    self.at(&field(path, key)),
                    format!("must be a string, found {}", json_type(other)),
                );
                None
            }
        }
    }

    /// An optional array of strings (`null` counts as absent).
    fn opt_str_array(
        &self,
        o: &Map<String, Value>,
        path: &str,
        key: &str,
        rule: Rule,
        r: &mut Report,
    ) -> Option<Vec<String>> {
        let p = field(path, key);
        match o.get(key) {
            None | Some(Value::Null) => None,
            Some(Value::Array(items)) => {
                let mut out = Vec::with_capacity(items.len());
                for (i, it) in items.iter().enumerate() {
                    match it {
                        Value::String(s) => out.push(s.clone()),
                        other => r.error(
                            rule,
                            self.at(&item(&p, i)),
                            format!("must be a string, found {}", json_type(other)),
                        ),
                    }
                }
                Some(out)
            }
            Some(other) => {
                r.error(
                    rule,
                    self.at(&p),
                    format!("must be an array of strings, found {}", json_type(other)),
                );
                None
            }
        }
    }

    fn schema_version(&self, o: &Map<String, Value>, r: &mut Report) {
        match o.get("schemaVersion") {
            Some(v) if v.as_u64() == Some(2) => {}
            Some(v) => r.error(
                Rule::SchemaVersion,
                self.at("$.schemaVersion"),
                format!("must be 2, found {v}"),
            ),
            None => r.error(
                Rule::SchemaVersion,
                self.at("$.schemaVersion"),
                "is required and must be 2",
            ),
        }
    }

    fn annotations(
        &self,
        o: &Map<String, Value>,
        path: &str,
        r: &mut Report,
    ) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let p = field(path, "annotations");
        match o.get("annotations") {
            None | Some(Value::Null) => {}
            Some(Value::Object(m)) => {
                for (k, v) in m {
                    match v {
                        Value::String(s) => {
                            out.insert(k.clone(), s.clone());
                        }
                        other => r.error(
                            Rule::Annotations,
                            self.at(&field(&p, k)),
                            format!(
                                "annotation values must be strings, found {}",
                                json_type(other)
                            ),
                        ),
                    }
                }
            }
            Some(other) => r.error(
                Rule::Annotations,
                self.at(&p),
                format!("must be an object of strings, found {}", json_type(other)),
            ),
        }
        out
    }

    fn media_type_value(
        &self,
        s: &str,
        path: &str,
        rule: Rule,
        r: &mut Report,
    ) -> Option<MediaType> {
        match MediaType::parse(s) {
            Ok(mt) => Some(mt),
            Err(e) => {
                r.error(rule, self.at(path), e.to_string());
                None
            }
        }
    }

    fn artifact_type(
        &self,
        o: &Map<String, Value>,
        path: &str,
        r: &mut Report,
    ) -> Option<MediaType> {
        let s = self.opt_str(o, path, "artifactType", r)?;
        self.media_type_value(s, &field(path, "artifactType"), Rule::ArtifactType, r)
    }

    fn digest(&self, s: &str, path: &str, r: &mut Report) -> Option<Digest> {
        match Digest::parse(s) {
            Ok(d) => Some(d),
            Err(e) => {
                r.error(Rule::Digest, self.at(path), e.to_string());
                None
            }
        }
    }

    /// The platform object of an index entry or the platform members of a config.
    ///
    /// `os` and `architecture` must be non-empty strings without `/`, whitespace or control
    /// characters (errors: the value could not be named as `os/arch`). The spec only says they
    /// SHOULD be GOOS and GOARCH values, and real indexes carry others (`unknown/unknown` for
    /// buildx attestation manifests), so a value outside [`KNOWN_OS`] or [`KNOWN_ARCH`] is a
    /// `platform-value` warning.
    fn platform(&self, o: &Map<String, Value>, path: &str, r: &mut Report) -> Option<Platform> {
        let mut value = |key: &str, known: &[&str], expected: &str| {
            let p = field(path, key);
            if matches!(o.get(key), None | Some(Value::Null)) {
                r.error(Rule::Platform, self.at(&p), "is required");
                return None;
            }
            let v = self.opt_str(o, path, key, r)?;
            if v.is_empty() {
                r.error(Rule::Platform, self.at(&p), "must not be empty");
                return None;
            }
            if let Some(c) = v
                .chars()
                .find(|c| *c == '/' || c.is_whitespace() || c.is_control())
            {
                r.error(
                    Rule::Platform,
                    self.at(&p),
                    format!("{v:?} holds {c:?}; a platform value is one word without '/'"),
                );
                return None;
            }
            if !known.contains(&v) {
                r.warn(
                    Rule::PlatformValue,
                    self.at(&p),
                    format!("{key} {v:?} is not a {expected}"),
                );
            }
            Some(v)
        };
        let os = value("os", KNOWN_OS, "GOOS value such as illumos");
        let arch = value("architecture", KNOWN_ARCH, "GOARCH value such as amd64");
        let variant = self.opt_str(o, path, "variant", r).map(str::to_owned);
        let os_version = self.opt_str(o, path, "os.version", r).map(str::to_owned);
        let os_features = self
            .opt_str_array(o, path, "os.features", Rule::Platform, r)
            .unwrap_or_default();
        Some(Platform {
            os: os?.to_owned(),
            architecture: arch?.to_owned(),
            variant,
            os_version,
            os_features,
        })
    }

    fn descriptor(&self, v: &Value, path: &str, r: &mut Report) -> Option<Descriptor> {
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
    fn own_media_type(
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

    fn subject(&self, o: &Map<String, Value>, r: &mut Report) -> Option<Descriptor> {
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

    fn manifest(
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

    fn index(&self, v: &Value, declared: Option<&MediaType>, r: &mut Report) -> Option<Index> {
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

    fn config(&self, v: &Value, layer_count: Option<usize>, r: &mut Report) -> Option<ImageConfig> {
        let o = self.object(v, "$", r)?;
        let platform = self.platform(o, "$", r);
        if let Some(c) = self.opt_str(o, "$", "created", r)
            && !is_rfc3339(c)
        {
            r.error(
                Rule::Created,
                self.at("$.created"),
                format!("{c:?} is not an RFC 3339 date-time"),
            );
        }
        let mut diff_ids = Vec::new();
        match o.get("rootfs") {
            Some(Value::Object(rootfs)) => {
                match rootfs.get("type") {
                    Some(Value::String(t)) if t == "layers" => {}
                    Some(t) => r.error(
                        Rule::RootfsType,
                        self.at("$.rootfs.type"),
                        format!("must be \"layers\", found {t}"),
                    ),
                    None => r.error(
                        Rule::RootfsType,
                        self.at("$.rootfs.type"),
                        "is required and must be \"layers\"",
                    ),
                }
                match rootfs.get("diff_ids") {
                    Some(Value::Array(ids)) => {
                        for (i, id) in ids.iter().enumerate() {
                            let p = item("$.rootfs.diff_ids", i);
                            match id {
                                Value::String(s) => {
                                    if let Some(d) = self.digest(s, &p, r) {
                                        diff_ids.push(d);
                                    }
                                }
                                other => r.error(
                                    Rule::Digest,
                                    self.at(&p),
                                    format!("must be a digest string, found {}", json_type(other)),
                                ),
                            }
                        }
                        if let Some(n) = layer_count
                            && n != ids.len()
                        {
                            r.error(
                                Rule::DiffIdsCount,
                                self.at("$.rootfs.diff_ids"),
                                format!("{} diff_ids for {n} layers", ids.len()),
                            );
                        }
                    }
                    Some(other) => r.error(
                        Rule::Required,
                        self.at("$.rootfs.diff_ids"),
                        format!("must be an array, found {}", json_type(other)),
                    ),
                    None => r.error(Rule::Required, self.at("$.rootfs.diff_ids"), "is required"),
                }
            }
            Some(other) => r.error(
                Rule::Required,
                self.at("$.rootfs"),
                format!("must be an object, found {}", json_type(other)),
            ),
            None => r.error(Rule::Required, self.at("$.rootfs"), "is required"),
        }
        if let Some(Value::Array(history)) = o.get("history")
            && let Some(n) = layer_count
        {
            let non_empty = history
                .iter()
                .filter(|h| h.get("empty_layer").and_then(Value::as_bool) != Some(true))
                .count();
            if !history.is_empty() && non_empty != n {
                r.warn(
                    Rule::History,
                    self.at("$.history"),
                    format!("{non_empty} history entries with layers for {n} layers"),
                );
            }
        }
        let stop_signal = match o.get("config") {
            None | Some(Value::Null) => None,
            Some(c) => self
                .object(c, "$.config", r)
                .and_then(|c| self.runtime_config(c, r)),
        };
        if !r.is_ok() {
            return None;
        }
        let oci = match serde_json::from_value::<oci_spec::image::ImageConfiguration>(v.clone()) {
            Ok(c) => c,
            Err(e) => {
                r.error(
                    Rule::Required,
                    self.at("$"),
                    format!("config does not read as an OCI image config: {e}"),
                );
                return None;
            }
        };
        Some(ImageConfig {
            platform: platform?,
            diff_ids,
            stop_signal,
            oci,
        })
    }

    /// The `config` member of an image config: what a runtime acts on. Returns `StopSignal`.
    fn runtime_config(&self, c: &Map<String, Value>, r: &mut Report) -> Option<String> {
        let p = "$.config";
        if let Some(user) = self.opt_str(c, p, "User", r) {
            check_user(user).unwrap_or_else(|m| r.error(Rule::User, self.at("$.config.User"), m));
        }
        if let Some(env) = self.opt_str_array(c, p, "Env", Rule::Env, r) {
            for (i, e) in env.iter().enumerate() {
                if e.contains('\0') {
                    r.error(
                        Rule::Env,
                        self.at(&item("$.config.Env", i)),
                        "contains a NUL byte",
                    );
                } else if e.split_once('=').is_none_or(|(k, _)| k.is_empty()) {
                    r.error(
                        Rule::Env,
                        self.at(&item("$.config.Env", i)),
                        format!("{e:?} is not NAME=value"),
                    );
                }
            }
        }
        let entrypoint = self.opt_str_array(c, p, "Entrypoint", Rule::Required, r);
        let cmd = self.opt_str_array(c, p, "Cmd", Rule::Required, r);
        if entrypoint.as_ref().is_none_or(Vec::is_empty) && cmd.as_ref().is_none_or(Vec::is_empty) {
            r.warn(
                Rule::NothingToRun,
                self.at(p),
                "neither Entrypoint nor Cmd is set: a zone from this image has nothing to start",
            );
        }
        if let Some(wd) = self.opt_str(c, p, "WorkingDir", r) {
            check_working_dir(wd)
                .unwrap_or_else(|m| r.error(Rule::WorkingDir, self.at("$.config.WorkingDir"), m));
        }
        for key in ["Labels"] {
            if let Some(v) = c.get(key).filter(|v| !v.is_null()) {
                match v.as_object() {
                    Some(m) => {
                        for (k, lv) in m {
                            if !lv.is_string() {
                                r.error(
                                    Rule::Required,
                                    self.at(&format!("$.config.{key}.{k}")),
                                    "label values must be strings",
                                );
                            }
                        }
                    }
                    None => r.error(
                        Rule::Required,
                        self.at(&format!("$.config.{key}")),
                        "must be an object",
                    ),
                }
            }
        }
        for key in ["ExposedPorts", "Volumes"] {
            if let Some(v) = c.get(key).filter(|v| !v.is_null())
                && !v.is_object()
            {
                r.error(
                    Rule::Required,
                    self.at(&format!("$.config.{key}")),
                    format!("must be an object, found {}", json_type(v)),
                );
            }
        }
        let sig = self.opt_str(c, p, "StopSignal", r)?;
        match check_stop_signal(sig) {
            Ok(()) => Some(sig.to_owned()),
            Err(m) => {
                r.error(Rule::StopSignal, self.at("$.config.StopSignal"), m);
                None
            }
        }
    }
}

/// Signal names illumos knows (`signal.h`), without the `SIG` prefix.
const ILLUMOS_SIGNALS: &[&str] = &[
    "HUP", "INT", "QUIT", "ILL", "TRAP", "ABRT", "IOT", "EMT", "FPE", "KILL", "BUS", "SEGV", "SYS",
    "PIPE", "ALRM", "TERM", "USR1", "USR2", "CLD", "CHLD", "PWR", "WINCH", "URG", "POLL", "IO",
    "STOP", "TSTP", "CONT", "TTIN", "TTOU", "VTALRM", "PROF", "XCPU", "XFSZ", "WAITING", "LWP",
    "FREEZE", "THAW", "CANCEL", "LOST", "XRES", "JVM1", "JVM2", "INFO", "RTMIN", "RTMAX",
];

/// `StopSignal` must be a name: signal numbers differ between illumos and Linux (SIGUSR1 is 16
/// on illumos, 10 on Linux), so a number written on one means another signal on the other.
pub fn check_stop_signal(sig: &str) -> Result<(), String> {
    if sig.bytes().all(|b| b.is_ascii_digit()) && !sig.is_empty() {
        return Err(format!(
            "{sig:?} is a signal number; use a name such as SIGTERM (numbers differ between illumos and Linux)"
        ));
    }
    let name = sig.strip_prefix("SIG").unwrap_or(sig);
    let base = name.split_once(['+', '-']).map_or(name, |(b, off)| {
        if off.bytes().all(|c| c.is_ascii_digit()) && !off.is_empty() {
            b
        } else {
            ""
        }
    });
    let realtime_offset_ok = base == name || base == "RTMIN" || base == "RTMAX";
    if ILLUMOS_SIGNALS.contains(&base) && realtime_offset_ok {
        Ok(())
    } else {
        Err(format!("{sig:?} is not an illumos signal name"))
    }
}

/// `WorkingDir` must be absolute and must not climb or point into `/proc` (CVE-2024-21626
/// used `/proc/self/fd/N`).
pub fn check_working_dir(wd: &str) -> Result<(), String> {
    if wd.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    if !wd.starts_with('/') {
        return Err(format!("{wd:?} is not absolute"));
    }
    if wd.split('/').any(|c| c == "..") {
        return Err(format!("{wd:?} contains '..'"));
    }
    let clean: Vec<&str> = wd
        .split('/')
        .filter(|c| !c.is_empty() && *c != ".")
        .collect();
    if clean.first() == Some(&"proc") {
        return Err(format!("{wd:?} is inside /proc"));
    }
    Ok(())
}

/// `User` is `user[:group]`, each a name or a numeric id below 2^31 (CVE-2024-40635: larger ids
/// wrapped to 0 and ran as root).
pub fn check_user(user: &str) -> Result<(), String> {
    if user.contains('\0') {
        return Err("contains a NUL byte".into());
    }
    let mut parts = user.splitn(3, ':');
    let (u, g) = (parts.next().unwrap_or(""), parts.next());
    if parts.next().is_some() {
        return Err(format!("{user:?} has more than one ':'"));
    }
    for (what, part) in [("user", Some(u)), ("group", g)] {
        let Some(part) = part else { continue };
        if part.is_empty() {
            return Err(format!("{user:?} has an empty {what}"));
        }
        if part.bytes().all(|b| b.is_ascii_digit()) {
            match part.parse::<u64>() {
                Ok(id) if id < (1 << 31) => {}
                _ => return Err(format!("{what} id {part} is not below 2^31")),
            }
        } else if part.starts_with('-') {
            return Err(format!("{what} id {part} is negative"));
        }
    }
    Ok(())
}

/// RFC 3339 `date-time`: `YYYY-MM-DDTHH:MM:SS[.frac](Z|±HH:MM)`.
fn is_rfc3339(s: &str) -> bool {
    let b = s.as_bytes();
    let digits = |r: std::ops::Range<usize>| {
        b.get(r.clone())
            .is_some_and(|x| x.iter().all(u8::is_ascii_digit))
    };
    let num = |r: std::ops::Range<usize>| s[r].parse::<u32>().unwrap_or(99);
    if b.len() < 20
        || !(digits(0..4) && b[4] == b'-' && digits(5..7) && b[7] == b'-' && digits(8..10))
    {
        return false;
    }
    let time_ok = matches!(b[10], b'T' | b't' | b' ')
        && digits(11..13)
        && b[13] == b':'
        && digits(14..16)
        && b[16] == b':'
        && digits(17..19);
    if !time_ok {
        return false;
    }
    let (month, day, hour, min, sec) =
        (num(5..7), num(8..10), num(11..13), num(14..16), num(17..19));
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) || hour > 23 || min > 59 || sec > 60 {
        return false;
    }
    let mut i = 19;
    if b.get(i) == Some(&b'.') {
        i += 1;
        let start = i;
        while b.get(i).is_some_and(u8::is_ascii_digit) {
            i += 1;
        }
        if i == start {
            return false;
        }
    }
    match &b[i..] {
        [b'Z' | b'z'] => true,
        [b'+' | b'-', h1, h2, b':', m1, m2] => [h1, h2, m1, m2].iter().all(|c| c.is_ascii_digit()),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_signal_names() {
        for ok in [
            "SIGTERM",
            "TERM",
            "SIGUSR1",
            "SIGPWR",
            "SIGRTMIN+3",
            "SIGRTMAX-1",
            "SIGINFO",
        ] {
            assert!(check_stop_signal(ok).is_ok(), "{ok}");
        }
        for bad in [
            "15",
            "9",
            "",
            "SIGFOO",
            "sigterm",
            "SIGTERM+1",
            "SIGRTMIN+",
            "SIGSTKFLT",
        ] {
            assert!(check_stop_signal(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn payload_layers_pass_other_documents_do_not() {
        let manifest = |layer_type: &str| {
            serde_json::json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "size": 2,
                           "digest": EMPTY_DIGEST},
                "layers": [{"mediaType": layer_type, "size": 2, "digest": EMPTY_DIGEST,
                            "annotations": {"dev.cosignproject.cosign/signature": "MEUC"}}],
            })
            .to_string()
        };
        for ok in PAYLOAD_LAYER_TYPES {
            let (report, _) = check_document(manifest(ok).as_bytes(), None, None, "sig");
            assert!(
                report.is_ok(),
                "{ok}: {:?}",
                report.errors().collect::<Vec<_>>()
            );
        }
        let (report, _) =
            check_document(manifest("application/json").as_bytes(), None, None, "other");
        assert!(
            report
                .errors()
                .any(|e| e.to_string().contains("layer-media-type")),
            "{:?}",
            report.errors().collect::<Vec<_>>()
        );
    }

    #[test]
    fn platform_values_outside_goos_goarch_warn_malformed_ones_fail() {
        let index = |platform: serde_json::Value| {
            serde_json::json!({
                "schemaVersion": 2,
                "mediaType": "application/vnd.oci.image.index.v1+json",
                "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
                               "size": 2, "digest": EMPTY_DIGEST, "platform": platform}],
            })
            .to_string()
        };
        let check = |p: serde_json::Value| check_document(index(p).as_bytes(), None, None, "i");
        // Known values: nothing to say.
        let (report, _) = check(serde_json::json!({"os": "illumos", "architecture": "amd64"}));
        assert!(report.violations.is_empty(), "{report}");
        // Any other word: a platform-value warning naming it, and the platform is kept.
        for (os, arch, named) in [
            ("amigaos", "amd64", "os \"amigaos\""),
            ("unknown", "unknown", "os \"unknown\""),
            ("illumos", "x86_64", "architecture \"x86_64\""),
        ] {
            let (report, doc) = check(serde_json::json!({"os": os, "architecture": arch}));
            assert!(report.is_ok(), "{os}/{arch}: {report}");
            let w = &report.violations;
            assert!(
                w.iter().all(|v| v.rule == Rule::PlatformValue
                    && v.severity == crate::report::Severity::Warning),
                "{report}"
            );
            assert!(w.iter().any(|v| v.message.contains(named)), "{report}");
            let Some(Document::Index(ix)) = doc else {
                panic!("{os}/{arch}: no index")
            };
            let p = ix.manifests[0].platform.as_ref().unwrap();
            assert_eq!((p.os.as_str(), p.architecture.as_str()), (os, arch));
        }
        // Malformed: errors of rule platform (or required-field for a non-string).
        for (p, rule, says) in [
            (
                serde_json::json!({"architecture": "amd64"}),
                Rule::Platform,
                "is required",
            ),
            (
                serde_json::json!({"os": null, "architecture": "amd64"}),
                Rule::Platform,
                "is required",
            ),
            (
                serde_json::json!({"os": "", "architecture": "amd64"}),
                Rule::Platform,
                "must not be empty",
            ),
            (
                serde_json::json!({"os": "illumos", "architecture": "amd64/v3"}),
                Rule::Platform,
                "'/'",
            ),
            (
                serde_json::json!({"os": "illu mos", "architecture": "amd64"}),
                Rule::Platform,
                "' '",
            ),
            (
                serde_json::json!({"os": 7, "architecture": "amd64"}),
                Rule::Required,
                "must be a string",
            ),
        ] {
            let (report, doc) = check(p.clone());
            assert!(doc.is_none(), "{p}");
            assert!(
                report
                    .errors()
                    .any(|v| v.rule == rule && v.message.contains(says)),
                "{p}: {report}"
            );
        }
    }

    #[test]
    fn working_dirs() {
        assert!(check_working_dir("/srv/app").is_ok());
        assert!(check_working_dir("/").is_ok());
        for bad in [
            "srv",
            "/srv/../etc",
            "/proc/self/fd/7",
            "//proc/1/cwd",
            "/./proc",
            "/a\0",
        ] {
            assert!(check_working_dir(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn users() {
        for ok in ["root", "0", "1000:1000", "daemon:other", "2147483647"] {
            assert!(check_user(ok).is_ok(), "{ok}");
        }
        for bad in [
            "2147483648",
            "0:4294967296",
            "a:b:c",
            ":",
            "x:",
            "-1",
            "99999999999999999999999",
        ] {
            assert!(check_user(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rfc3339() {
        for ok in [
            "2026-11-29T16:32:58Z",
            "1970-01-01T00:00:00.123456789+01:00",
            "2026-01-01t00:00:00z",
        ] {
            assert!(is_rfc3339(ok), "{ok}");
        }
        for bad in [
            "2026-11-29",
            "2026-13-01T00:00:00Z",
            "2026-11-29T16:32:58",
            "yesterday",
            "2026-11-29T16:32:58.Z",
        ] {
            assert!(!is_rfc3339(bad), "{bad}");
        }
    }
}
