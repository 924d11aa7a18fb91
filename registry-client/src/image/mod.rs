//! The image vocabulary every operation speaks: [`ImageRef`] (a layout or a registry image),
//! [`Content`] (a digest, size and media type), [`TransferError`] with its [`ErrorKind`], the
//! two ends an operation reads from and writes to ([`endpoint`]), and cosign's tag and
//! `index.json` names ([`cosign`]). It imports only the client base (reference, errors,
//! [`Client`]); the operations (transfer, inspect, manage, signatures, sync, publish) import it
//! and never the other way round. The public paths of these types are `transfer::ImageRef`
//! and so on, where callers have always found them.

pub(crate) mod cosign;
pub(crate) mod endpoint;

use std::fmt;
use std::path::PathBuf;

use validator::{
    Descriptor as DocDescriptor, Digest, Document, LayoutError, MediaType, Tag, check_document,
};

use crate::{ClientError, ErrorKind as ClientErrorKind, Reference};

/// Most levels of referrers of referrers one copy follows (a signature of an SBOM of an image
/// is two).
pub const MAX_REFERRER_DEPTH: usize = 8;

/// Most manifests and indexes one copy walks (a guard against hostile graphs).
pub(crate) const MAX_DOCUMENTS: usize = 10_000;

/// An OCI image layout directory, maybe with a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutRef {
    /// The layout directory.
    pub dir: PathBuf,
    /// The `org.opencontainers.image.ref.name` to read or write.
    pub tag: Option<Tag>,
    /// A manifest or index in the layout named by digest (`oci:DIR@DIGEST`): an `index.json`
    /// entry, tagged or not, or a manifest an index entry lists (one platform of an image).
    pub digest: Option<Digest>,
}

/// One end of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRef {
    /// `oci:DIR[:TAG|@DIGEST]`.
    Layout(LayoutRef),
    /// `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`.
    Registry(Reference),
}

/// Transports of skopeo and podman that name something other than a layout directory or a
/// registry; refused by name instead of being read as a directory or a host.
const UNSUPPORTED_TRANSPORTS: &[&str] = &[
    "oci-archive",
    "docker-archive",
    "docker-daemon",
    "containers-storage",
    "dir",
    "sif",
    "ostree",
];

/// The unsupported transport `input` starts with, if any. `NAME:` followed by a port
/// (`dir:5000/x`) is a registry host, and `NAME:TAG` where `NAME` is a directory here is a
/// layout, not a transport.
fn unsupported_transport(input: &str) -> Option<&'static str> {
    let (name, rest) = input.split_once(':')?;
    let t = UNSUPPORTED_TRANSPORTS.iter().find(|t| **t == name)?;
    let port = rest.split('/').next().unwrap_or("");
    if !port.is_empty() && port.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if Tag::parse(rest).is_ok() && std::path::Path::new(name).is_dir() {
        return None;
    }
    Some(t)
}

/// The directory part of a layout spelling `DIR[:TAG|@DIGEST]` (see [`ImageRef::parse_layout`]).
fn layout_dir(s: &str) -> &str {
    if let Some((dir, d)) = s.rsplit_once('@')
        && !d.contains('/')
        && d.contains(':')
    {
        return dir;
    }
    match s.rsplit_once(':') {
        Some((d, t)) if !t.contains('/') => d,
        _ => s,
    }
}

impl ImageRef {
    /// Parses the one spelling every command takes for an image:
    /// - `oci:DIR[:TAG|@DIGEST]`, an OCI image layout;
    /// - `DIR[:TAG|@DIGEST]` without `oci:` when DIR starts with `/` or `.` (`./image:1.0`,
    ///   `../image`, `/srv/image`) or is a directory here; a directory whose name is also a
    ///   registry reference (`reg.example/app`) is refused as ambiguous, with both spellings;
    /// - `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`, a registry reference.
    ///
    /// skopeo's other transports (`oci-archive:`, `docker-archive:`, `docker-daemon:`,
    /// `containers-storage:`, `dir:`, ...) are refused by name. Nothing here touches the
    /// network: input that is neither spelling fails at once.
    pub fn parse(input: &str) -> Result<ImageRef, TransferError> {
        if Self::names_layout(input)? {
            Self::parse_layout(input)
        } else {
            Self::parse_registry(input)
        }
    }

    /// Whether [`ImageRef::parse`] reads `input` as a layout (see there); an unsupported
    /// transport or an ambiguous spelling is an error.
    pub fn names_layout(input: &str) -> Result<bool, TransferError> {
        let bad = |reason: String| TransferError::BadReference {
            input: input.chars().take(300).collect(),
            reason,
        };
        if let Some(t) = unsupported_transport(input) {
            return Err(bad(format!(
                "transport {t}: is not supported; use oci:DIR or a registry reference"
            )));
        }
        if input.starts_with("oci:") {
            return Ok(true);
        }
        if input.starts_with("docker://") {
            return Ok(false);
        }
        let dir = layout_dir(input);
        if dir.starts_with('/') || dir.starts_with('.') {
            return Ok(true);
        }
        if dir.is_empty() || !std::path::Path::new(dir).is_dir() {
            return Ok(false);
        }
        if Reference::parse(input).is_ok()
            || (!input.contains('/') && crate::reference::looks_like_host(input))
        {
            return Err(bad(format!(
                "{dir} is a directory here and {input} also names a registry: write \
                 oci:{input} or ./{input} for the layout, docker://{input} for the registry"
            )));
        }
        Ok(true)
    }

    /// Parses `[oci:]DIR[:TAG|@DIGEST]`: an `@` after the last `/` followed by a digest
    /// names a manifest by digest, otherwise a `:` after the last `/` starts the tag.
    pub fn parse_layout(input: &str) -> Result<ImageRef, TransferError> {
        let bad = |reason: String| TransferError::BadReference {
            input: input.chars().take(300).collect(),
            reason,
        };
        if let Some(t) = unsupported_transport(input) {
            return Err(bad(format!(
                "transport {t}: is not supported; use oci:DIR or a registry reference"
            )));
        }
        // `docker://` is a registry reference wherever it appears (as in `parse`); read as a
        // path it would make a directory `docker:` or look for a layout that cannot exist.
        if input.starts_with("docker://") {
            return Err(bad(
                "a docker:// reference names a registry image, and this side takes an OCI \
                 image layout: write oci:DIR or ./DIR (rdctl copy copies between any two images)"
                    .to_owned(),
            ));
        }
        let s = input.strip_prefix("oci:").unwrap_or(input);
        if let Some((dir, d)) = s.rsplit_once('@')
            && !d.contains('/')
            && d.contains(':')
        {
            let digest = Digest::parse(d).map_err(|e| bad(e.to_string()))?;
            if dir.is_empty() {
                return Err(bad("no layout directory".to_owned()));
            }
            return Ok(ImageRef::Layout(LayoutRef {
                dir: PathBuf::from(dir),
                tag: None,
                digest: Some(digest),
            }));
        }
        let (dir, tag) = match s.rsplit_once(':') {
            Some((d, t)) if !t.contains('/') => {
                let tag = Tag::parse(t).map_err(|e| bad(e.to_string()))?;
                (d, Some(tag))
            }
            _ => (s, None),
        };
        if dir.is_empty() {
            return Err(bad("no layout directory".to_owned()));
        }
        Ok(ImageRef::Layout(LayoutRef {
            dir: PathBuf::from(dir),
            tag,
            digest: None,
        }))
    }

    /// Parses `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`. When the input is not a registry
    /// reference but names an OCI layout in the current directory, the error says to write
    /// `oci:` in front.
    pub fn parse_registry(input: &str) -> Result<ImageRef, TransferError> {
        if let Some(t) = unsupported_transport(input) {
            return Err(TransferError::BadReference {
                input: input.chars().take(300).collect(),
                reason: format!(
                    "transport {t}: is not supported; use oci:DIR or a registry reference"
                ),
            });
        }
        // `oci:` is a layout wherever it appears (as in `parse`), never a host named `oci`.
        if input.starts_with("oci:") {
            return Err(TransferError::BadReference {
                input: input.chars().take(300).collect(),
                reason: "oci: names an OCI image layout, and this side takes a registry \
                         image: write [docker://]HOST[:PORT]/REPO[:TAG] (rdctl copy copies \
                         between any two images)"
                    .to_owned(),
            });
        }
        let s = input.strip_prefix("docker://").unwrap_or(input);
        Reference::parse(s).map(ImageRef::Registry).map_err(|e| {
            let mut reason = e.reason;
            if !input.starts_with("docker://")
                && let Ok(ImageRef::Layout(l)) = Self::parse_layout(input)
                && l.dir.join("oci-layout").is_file()
            {
                reason = format!(
                    "{} is an OCI image layout: write oci:{input} to use it",
                    l.dir.display()
                );
            } else if !input.starts_with("docker://")
                && !input.starts_with(['.', '/'])
                && !crate::reference::looks_like_host(input.split('/').next().unwrap_or(""))
                && Self::parse_layout(input).is_ok()
            {
                // No host, no layout here: maybe a layout to be written (`copy img:1 newdir:1`).
                reason = format!(
                    "{reason}; for an OCI image layout here, write ./{input} or oci:{input}"
                );
            }
            TransferError::BadReference {
                input: e.input,
                reason,
            }
        })
    }

    /// The tag it names, if any.
    pub fn tag(&self) -> Option<&Tag> {
        match self {
            ImageRef::Layout(l) => l.tag.as_ref(),
            ImageRef::Registry(r) => r.tag(),
        }
    }

    /// The digest it names, if any.
    pub fn digest(&self) -> Option<&Digest> {
        match self {
            ImageRef::Layout(l) => l.digest.as_ref(),
            ImageRef::Registry(r) => r.digest(),
        }
    }
}

impl fmt::Display for ImageRef {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ImageRef::Layout(l) => {
                write!(f, "oci:{}", l.dir.display())?;
                if let Some(t) = &l.tag {
                    write!(f, ":{t}")?;
                }
                if let Some(d) = &l.digest {
                    write!(f, "@{d}")?;
                }
                Ok(())
            }
            ImageRef::Registry(r) => write!(f, "docker://{r}"),
        }
    }
}

/// Classes of [`TransferError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The image, tag, manifest or blob does not exist.
    NotFound,
    /// The registry refused the credentials.
    Unauthorized,
    /// Network or server trouble that outlasted the retries.
    Transient,
    /// Content did not match its digest or size, or a document broke the rules.
    Invalid,
    /// Bad input or a local I/O failure.
    Other,
}

/// A copy failed. Every variant names the reference, layout, digest or file involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TransferError {
    /// A reference could not be parsed.
    #[error("invalid image reference {input:?}: {reason}")]
    BadReference {
        /// The input.
        input: String,
        /// What is wrong.
        reason: String,
    },
    /// The source has no such image.
    #[error("{what} not found")]
    NotFound {
        /// What was looked for.
        what: String,
    },
    /// A layout source without a tag has several entries.
    #[error("{dir}: index.json has {count} entries; name one as DIR:TAG")]
    Ambiguous {
        /// The layout.
        dir: PathBuf,
        /// Its entries.
        count: usize,
    },
    /// A layout operation failed.
    #[error("layout {dir}")]
    Layout {
        /// The layout.
        dir: PathBuf,
        /// The cause.
        #[source]
        source: LayoutError,
    },
    /// A registry request failed.
    #[error("{reference}")]
    Registry {
        /// The reference involved.
        reference: String,
        /// The cause.
        #[source]
        source: ClientError,
    },
    /// A manifest or index broke the rules; nothing was written for it.
    #[error("{digest} ({media_type}) is not a valid manifest or index: {problems}")]
    InvalidDocument {
        /// Its digest.
        digest: Digest,
        /// Its declared media type.
        media_type: String,
        /// The failed rules.
        problems: String,
    },
    /// Copying one blob failed.
    #[error("copying blob {digest} ({size} bytes) failed")]
    Blob {
        /// The blob.
        digest: Digest,
        /// Its size.
        size: u64,
        /// The cause.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// No index entry matches the requested platform.
    #[error("{digest}: no manifest for platform {platform} (the index offers {offered})")]
    NoPlatform {
        /// The index.
        digest: Digest,
        /// The wanted platform.
        platform: String,
        /// What the index has.
        offered: String,
    },
    /// An index lists several manifests and no platform chose one (the reference is fine).
    #[error("{index} is an index of {count} manifests ({offered}): name one with --platform")]
    PlatformNeeded {
        /// The index.
        index: Digest,
        /// How many manifests it lists.
        count: usize,
        /// Their platforms (or digests, for entries without one).
        offered: String,
    },
    /// The destination names a digest the copied image does not have.
    #[error("{destination} names {wanted}, but the copied image is {found}")]
    DigestMismatch {
        /// The destination.
        destination: String,
        /// Its digest.
        wanted: Digest,
        /// The root's digest.
        found: Digest,
    },
    /// The graph is larger than [`MAX_DOCUMENTS`] manifests.
    #[error("{root}: more than {MAX_DOCUMENTS} manifests under one image")]
    TooLarge {
        /// The root.
        root: Digest,
    },
    /// Referrers of referrers go deeper than [`MAX_REFERRER_DEPTH`] levels.
    #[error("{subject}: referrers nest more than {MAX_REFERRER_DEPTH} levels deep")]
    TooDeep {
        /// A referrer at the limit.
        subject: Digest,
    },
    /// A layout source lacks content its documents name; nothing was uploaded.
    #[error("the source is incomplete: {what}; nothing was copied")]
    BrokenSource {
        /// What is missing or wrong.
        what: String,
    },
    /// A signature or attestation document could not be built or read.
    #[error("{what}")]
    Trust {
        /// What was being read or built.
        what: String,
        /// The cause.
        #[source]
        source: trust::SignatureError,
    },
    /// The layout's index.json could not be updated.
    #[error("{path}: cannot update the index")]
    Index {
        /// The file.
        path: PathBuf,
        /// What went wrong.
        reason: String,
    },
}

impl TransferError {
    /// The error's class.
    pub fn kind(&self) -> ErrorKind {
        match self {
            TransferError::NotFound { .. } | TransferError::NoPlatform { .. } => {
                ErrorKind::NotFound
            }
            TransferError::Registry { source, .. } => match source.kind() {
                ClientErrorKind::NotFound => ErrorKind::NotFound,
                ClientErrorKind::Unauthorized => ErrorKind::Unauthorized,
                ClientErrorKind::Transient => ErrorKind::Transient,
                _ => ErrorKind::Invalid,
            },
            TransferError::Layout {
                source: LayoutError::BlobMissing { .. },
                ..
            } => ErrorKind::NotFound,
            TransferError::Layout {
                source: LayoutError::Verify { .. },
                ..
            }
            | TransferError::InvalidDocument { .. }
            | TransferError::DigestMismatch { .. }
            | TransferError::TooLarge { .. }
            | TransferError::TooDeep { .. }
            | TransferError::BrokenSource { .. }
            | TransferError::Trust { .. } => ErrorKind::Invalid,
            TransferError::Layout {
                source: LayoutError::Ingest(e),
                ..
            } if e.verify_error().is_some() => ErrorKind::Invalid,
            TransferError::Blob { source, .. } => blob_error_kind(source.as_ref()),
            _ => ErrorKind::Other,
        }
    }
}

/// The class of a failed blob copy, from what failed underneath: the registry client, or the
/// layout's ingest refusing bytes that do not verify.
fn blob_error_kind(e: &(dyn std::error::Error + 'static)) -> ErrorKind {
    if let Some(c) = e.downcast_ref::<ClientError>() {
        return match c.kind() {
            ClientErrorKind::NotFound => ErrorKind::NotFound,
            ClientErrorKind::Unauthorized => ErrorKind::Unauthorized,
            ClientErrorKind::Transient => ErrorKind::Transient,
            _ => ErrorKind::Invalid,
        };
    }
    match e.downcast_ref::<LayoutError>() {
        Some(LayoutError::Verify { .. }) => ErrorKind::Invalid,
        Some(LayoutError::Ingest(i)) if i.verify_error().is_some() => ErrorKind::Invalid,
        Some(LayoutError::BlobMissing { .. }) => ErrorKind::NotFound,
        _ => match e.downcast_ref::<validator::IngestError>() {
            Some(i) if i.verify_error().is_some() => ErrorKind::Invalid,
            // Bytes read through a verifying reader that did not match the descriptor.
            _ if e.downcast_ref::<validator::VerifyError>().is_some()
                || e.downcast_ref::<std::io::Error>()
                    .and_then(validator::VerifyError::from_io)
                    .is_some() =>
            {
                ErrorKind::Invalid
            }
            _ => ErrorKind::Other,
        },
    }
}

/// One piece of content.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Content {
    /// Its digest.
    pub digest: Digest,
    /// Its size.
    pub size: u64,
    /// Its media type.
    pub media_type: String,
}

pub(crate) fn content_of(d: &DocDescriptor) -> Content {
    Content {
        digest: d.digest.clone(),
        size: d.size,
        media_type: d.media_type.as_str().to_owned(),
    }
}

/// Runs the document rules; only a document that passes is returned.
pub(crate) fn checked(c: &Content, bytes: &[u8]) -> Result<Document, TransferError> {
    let declared = MediaType::parse(&c.media_type).ok();
    let (report, doc) = check_document(bytes, None, declared.as_ref(), c.digest.as_str());
    let invalid = |problems: String| TransferError::InvalidDocument {
        digest: c.digest.clone(),
        media_type: c.media_type.clone(),
        problems,
    };
    match doc {
        Some(d @ (Document::Manifest(_) | Document::Index(_))) if report.is_ok() => Ok(d),
        Some(Document::Config(_)) => Err(invalid("it is an image config".to_owned())),
        _ => {
            let errors: Vec<String> = report.errors().take(5).map(ToString::to_string).collect();
            Err(invalid(errors.join("; ")))
        }
    }
}
