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

mod config;
mod descriptor;
mod kinds;

pub use config::{check_stop_signal, check_user, check_working_dir};

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
}

#[cfg(test)]
mod tests {
    use super::config::is_rfc3339;
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
