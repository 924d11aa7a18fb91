//! Validation results: every failed rule with where it failed.

use std::fmt;

/// How bad a finding is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// Worth knowing; the content is still usable.
    Warning,
    /// The content must not be used.
    Error,
}

macro_rules! rules {
    ($($(#[doc = $doc:literal])* $variant:ident => $id:literal,)*) => {
        /// A validation rule. Each has a stable kebab-case id used in reports and tests.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum Rule {
            $($(#[doc = $doc])* $variant,)*
        }

        impl Rule {
            /// The stable id.
            pub fn id(self) -> &'static str {
                match self { $(Rule::$variant => $id,)* }
            }

            /// Every rule, in declaration order.
            pub const ALL: &'static [Rule] = &[$(Rule::$variant,)*];
        }
    };
}

rules! {
    /// The bytes are not JSON (or not UTF-8), or JSON nested too deep.
    JsonSyntax => "json-syntax",
    /// An object repeats a member name (parser differentials).
    JsonDuplicateKey => "json-duplicate-key",
    /// A document is larger than the limit (4 MiB for manifests and indexes).
    DocumentSize => "document-size",
    /// A member is missing or has the wrong JSON type.
    Required => "required-field",
    /// `schemaVersion` must be 2.
    SchemaVersion => "schema-version",
    /// A document's `mediaType` disagrees with what it is or with what led to it.
    MediaType => "media-type",
    /// A document holds members of both a manifest and an index (CVE-2021-41190).
    AmbiguousDocument => "ambiguous-document",
    /// A descriptor's `mediaType` breaks the grammar.
    DescriptorMediaType => "descriptor-media-type",
    /// A descriptor's `size` is not a non-negative integer.
    DescriptorSize => "descriptor-size",
    /// A digest is malformed or of an algorithm that cannot be verified.
    Digest => "digest",
    /// A descriptor's embedded `data` is not base64 of content matching its digest and size.
    DescriptorData => "descriptor-data",
    /// A descriptor carries `urls`; they are never followed.
    DescriptorUrls => "descriptor-urls",
    /// Annotations must map strings to strings.
    Annotations => "annotations",
    /// A layer media type a runtime cannot apply, in an image manifest.
    LayerMediaType => "layer-media-type",
    /// An image manifest has no layers.
    NoLayers => "no-layers",
    /// `artifactType` missing where required, or not a media type.
    ArtifactType => "artifact-type",
    /// An empty descriptor (`application/vnd.oci.empty.v1+json`) that does not describe `{}`.
    EmptyDescriptor => "empty-descriptor",
    /// `subject` must describe a manifest.
    Subject => "subject",
    /// Platform `os`/`architecture` missing, not a string, empty, or holding `/`, whitespace
    /// or control characters.
    Platform => "platform",
    /// Platform `os`/`architecture` not a GOOS/GOARCH value (a warning: the spec says SHOULD,
    /// and buildx writes `unknown/unknown` for its attestation manifests).
    PlatformValue => "platform-value",
    /// An index entry's platform disagrees with the config it leads to.
    PlatformMismatch => "platform-mismatch",
    /// No manifest for the wanted platform.
    PlatformMissing => "platform-missing",
    /// Indexes nested deeper than the limit.
    IndexDepth => "index-depth",
    /// An index refers back to itself.
    IndexCycle => "index-cycle",
    /// `rootfs.type` must be `layers`.
    RootfsType => "rootfs-type",
    /// `rootfs.diff_ids` must have one entry per layer.
    DiffIdsCount => "diff-ids-count",
    /// `history` entries that are not `empty_layer` should match the layers.
    History => "history",
    /// `created` must be an RFC 3339 date-time.
    Created => "created",
    /// `StopSignal` must be a signal name (illumos numbers differ from Linux).
    StopSignal => "stop-signal",
    /// `WorkingDir` must be absolute, without `..`, outside `/proc`.
    WorkingDir => "working-dir",
    /// `User` ids must be below 2^31.
    User => "user",
    /// `Env` entries must be `NAME=value` without NUL.
    Env => "env",
    /// Neither `Entrypoint` nor `Cmd`: nothing to run.
    NothingToRun => "nothing-to-run",
    /// A referenced blob is missing.
    BlobMissing => "blob-missing",
    /// A blob's size differs from its descriptor.
    BlobSize => "blob-size",
    /// A blob's digest differs from its descriptor.
    BlobDigest => "blob-digest",
    /// A layer's bytes are not what its media type says (magic sniffed).
    LayerCompression => "layer-compression",
    /// A layer does not decompress.
    LayerDecompress => "layer-decompress",
    /// A layer's uncompressed digest differs from `diff_ids[i]`.
    DiffId => "diff-id",
    /// A tar header is malformed (checksum, numbers, PAX records).
    TarHeader => "tar-header",
    /// A tar entry type that layers must not use (sparse, volume header, unknown).
    TarEntryType => "tar-entry-type",
    /// A tar stream ends early or without its end blocks.
    TarTruncated => "tar-truncated",
    /// PAX `size` disagrees with the ustar size (parser differential).
    TarPaxSize => "tar-pax-size",
    /// A PAX header repeats a key, or GNU long names and PAX paths are both used.
    TarAmbiguousHeader => "tar-ambiguous-header",
    /// An entry name is absolute, empty, holds `..` or NUL, or replaces the root.
    TarUnsafePath => "tar-unsafe-path",
    /// The same path appears twice in one layer.
    TarDuplicatePath => "tar-duplicate-path",
    /// A malformed whiteout (`.wh.` alone, `.wh..`, `.wh...`).
    TarWhiteout => "tar-whiteout",
    /// A hardlink target that is absolute or leaves the root.
    TarHardlink => "tar-hardlink",
    /// A name, record, entry count or size over the limits.
    TarLimits => "tar-limits",
    /// Bytes after the tar end blocks.
    TarTrailingData => "tar-trailing-data",
    /// An image layout's `oci-layout` file is missing or not version 1.x.
    LayoutVersion => "layout-version",
    /// No manifest in the layout has the requested reference name.
    RefNotFound => "ref-not-found",
    /// A descriptor's media type disagrees with the document it leads to.
    DescriptorMismatch => "descriptor-mismatch",
    /// The layout's `index.json` names no image at all (a warning: nothing was checked).
    LayoutEmpty => "layout-empty",
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

impl serde::Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.id())
    }
}

/// One failed rule.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Violation {
    /// The rule.
    pub rule: Rule,
    /// Error or warning.
    pub severity: Severity,
    /// Where: the object checked (a file, a blob digest) and a JSON path or tar entry in it.
    pub location: String,
    /// What is wrong, naming the value.
    pub message: String,
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let sev = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{sev}[{}] {}: {}",
            self.rule.id(),
            self.location,
            self.message
        )
    }
}

/// All findings of one validation.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct Report {
    /// Findings in the order they were made.
    pub violations: Vec<Violation>,
}

impl Report {
    /// An empty report.
    pub fn new() -> Self {
        Self::default()
    }

    /// Records an error.
    pub fn error(&mut self, rule: Rule, location: impl Into<String>, message: impl Into<String>) {
        self.push(rule, Severity::Error, location.into(), message.into());
    }

    /// Records a warning.
    pub fn warn(&mut self, rule: Rule, location: impl Into<String>, message: impl Into<String>) {
        self.push(rule, Severity::Warning, location.into(), message.into());
    }

    fn push(&mut self, rule: Rule, severity: Severity, location: String, message: String) {
        self.violations.push(Violation {
            rule,
            severity,
            location,
            message,
        });
    }

    /// Appends another report's findings.
    pub fn extend(&mut self, other: Report) {
        self.violations.extend(other.violations);
    }

    /// True when no error was found (warnings allowed).
    pub fn is_ok(&self) -> bool {
        !self
            .violations
            .iter()
            .any(|v| v.severity == Severity::Error)
    }

    /// The errors.
    pub fn errors(&self) -> impl Iterator<Item = &Violation> {
        self.violations
            .iter()
            .filter(|v| v.severity == Severity::Error)
    }

    /// True when some finding (error or warning) is of `rule`.
    pub fn has(&self, rule: Rule) -> bool {
        self.violations.iter().any(|v| v.rule == rule)
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for v in &self.violations {
            writeln!(f, "{v}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule_ids_are_unique_and_kebab_case() {
        let mut seen = std::collections::HashSet::new();
        for r in Rule::ALL {
            assert!(seen.insert(r.id()), "duplicate id {}", r.id());
            assert!(
                r.id()
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
            );
        }
    }

    #[test]
    fn warnings_do_not_fail() {
        let mut r = Report::new();
        r.warn(Rule::DescriptorUrls, "$.layers[0].urls", "never followed");
        assert!(r.is_ok());
        r.error(Rule::SchemaVersion, "$.schemaVersion", "must be 2");
        assert!(!r.is_ok());
        assert_eq!(r.errors().count(), 1);
        assert!(
            r.to_string()
                .contains("error[schema-version] $.schemaVersion")
        );
    }
}
