//! Copying images between OCI image layouts and registries: what `rdctl push`, `rdctl pull` and
//! `rdctl copy` run.
//!
//! [`ImageRef`] names either end (`oci:DIR[:TAG|@DIGEST]` or `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`)
//! and is parsed once at the edge. [`copy`] walks the whole graph from the source's root: an
//! index and every manifest under it (or, with [`CopyOptions::platform`], only the matching
//! manifest, which then becomes the root), each manifest's config and layers.
//!
//! Referrers travel too (unless [`CopyOptions::referrers`] is off): for every manifest and index
//! of the graph, the manifests whose `subject` names it at the source (a registry's referrers
//! API or tag schema, see [`Client::referrers`]; in a layout, the `index.json` entries whose
//! document has that `subject`) are copied with their own graphs, and so are their referrers,
//! at most [`MAX_REFERRER_DEPTH`] levels deep. At a registry destination they are pushed by
//! digest with [`Client::push_referrer`], which keeps the tag schema index where the registry
//! has no API; at a layout destination each gets an untagged `index.json` entry with its
//! `artifactType`, as oras writes one. cosign's `sha256-<hex>.sig|.att|.sbom` tags of the
//! image's documents travel the same way, under the same tags (in a layout: tagged entries
//! with cosign's `kind` annotation, which `cosign verify --local-image` reads).
//!
//! Guarantees:
//! - Every manifest and index is read verified against its digest and passes
//!   [`validator::check_document`] before anything is written for it.
//! - Blobs stream (memory per blob is bounded by the client's chunk size and a few 64 KiB
//!   buffers) and are verified on the way: a layout destination publishes a blob only after its
//!   size and digest matched; a registry destination verifies on commit.
//! - Blobs the destination already has are skipped, and a blob goes to one destination
//!   repository once at a time: copies running at once that need the same blob there wait
//!   for the first upload and then find it present (`transfer::flight`).
//! - No manifest the destination registry already has is written again: one it holds by
//!   digest, a referrer its referrers listing (API or tag schema) already shows, a cosign tag
//!   or the image's tag already naming the digest (then the graph under it is there too: the
//!   registry checked it when the tag was written). Blobs are still checked with a HEAD. A
//!   rerun of a converged copy only reads, so it makes no push event
//!   ([`CopyReport::manifests_present`]).
//! - Manifests are written byte-exact, children before parents, and the tag (a registry tag or
//!   an `org.opencontainers.image.ref.name` entry in the layout's `index.json`) is set last,
//!   so a failed copy tags nothing. Referrers are written after their subject and before the
//!   tag.

pub(crate) mod endpoint;
pub(crate) mod flight;
mod referrers;
mod stream;

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;

use bytes::Bytes;
use validator::{
    Descriptor as DocDescriptor, Digest, Document, ImageLayout, LayoutError, MediaType, Platform,
    check_document,
};

use crate::{Client, ClientError, ErrorKind as ClientErrorKind, Reference};
use endpoint::{Dest, Source, update_index};
pub use referrers::MAX_REFERRER_DEPTH;
use stream::copy_blob;
use validator::Tag;

/// Most manifests and indexes one copy walks (a guard against hostile graphs).
const MAX_DOCUMENTS: usize = 10_000;

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

/// What to copy.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Copy only the manifest for this platform out of an index; it becomes the root.
    pub platform: Option<Platform>,
    /// Copy the referrers of every manifest and index of the image too, recursively, and
    /// cosign's `.sig`/`.att`/`.sbom` tags of them (default true).
    pub referrers: bool,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            platform: None,
            referrers: true,
        }
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

/// What a copy did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyReport {
    /// What the destination now names (tagged or by digest).
    pub root: Content,
    /// The tag set at the destination, if any.
    pub tag: Option<String>,
    /// Manifests and indexes written, children first, the root last.
    pub manifests: Vec<Content>,
    /// Blobs transferred.
    pub blobs_copied: Vec<Content>,
    /// Blobs the destination already had.
    pub blobs_skipped: Vec<Content>,
    /// Referrers written (manifests and indexes of every referrer's graph, children first),
    /// after the image's own manifests; their blobs are in `blobs_copied` and `blobs_skipped`.
    pub referrers: Vec<Content>,
    /// Manifests, indexes and referrers of the image that a registry destination already had
    /// (by digest, in its referrers listing, under their tag), so they were not written again;
    /// they are in neither `manifests` nor `referrers`.
    pub manifests_present: Vec<Content>,
    /// Whether the tag was written: false when there is none, or when the destination's tag
    /// already named the root.
    pub tag_written: bool,
}

impl CopyReport {
    /// Bytes of blobs transferred.
    pub fn bytes_copied(&self) -> u64 {
        self.blobs_copied.iter().map(|c| c.size).sum()
    }

    /// Bytes of blobs skipped.
    pub fn bytes_skipped(&self) -> u64 {
        self.blobs_skipped.iter().map(|c| c.size).sum()
    }
}

/// Copies the image `src` names to `dst` (see the module docs for what is guaranteed).
///
/// The destination tag is `dst`'s tag, else `src`'s tag; with neither, a registry destination
/// gets the root by digest and a layout destination an untagged `index.json` entry.
pub async fn copy(
    client: &Client,
    src: &ImageRef,
    dst: &ImageRef,
    opts: &CopyOptions,
) -> Result<CopyReport, TransferError> {
    if let ImageRef::Layout(l) = dst
        && l.digest.is_some()
    {
        return Err(TransferError::BadReference {
            input: dst.to_string(),
            reason: "a layout destination takes a tag (oci:DIR:TAG) or none, not a digest: \
                     the copy keeps every digest as it is"
                .to_owned(),
        });
    }
    let source = Source::open(client, src)?;
    let tag = dst.tag().or(src.tag()).cloned();

    // Walk the graph: fetch and check every document before writing anything.
    let (mut root, mut root_bytes) = source.root(src).await?;
    let mut root_doc = checked(&root, &root_bytes)?;
    if let Some(want) = &opts.platform {
        while let Document::Index(index) = &root_doc {
            let pick = match index.pick_platform(|p| want.matches(p)) {
                Ok(pick) => pick,
                Err(offered) => {
                    return Err(TransferError::NoPlatform {
                        digest: root.digest.clone(),
                        platform: want.to_string(),
                        offered,
                    });
                }
            };
            root = content_of(pick);
            root_bytes = source.document(&root).await?;
            root_doc = checked(&root, &root_bytes)?;
        }
    }
    if let (ImageRef::Registry(r), Some(wanted)) = (dst, dst_digest(dst))
        && wanted != &root.digest
    {
        return Err(TransferError::DigestMismatch {
            destination: r.to_string(),
            wanted: wanted.clone(),
            found: root.digest.clone(),
        });
    }
    let order = walk(&source, root.clone(), root_bytes, root_doc).await?;
    if let Source::Layout(layout) = &source {
        blobs_present(layout, &order)?;
    }
    // Only now is there something to write: a missing tag or a broken source leaves the
    // destination untouched.
    let (dest, new_layout) = Dest::open(dst)?;

    // Copy: blobs of each document, then the document, children before parents.
    let mut report = CopyReport {
        root: root.clone(),
        tag: tag.as_ref().map(|t| t.as_str().to_owned()),
        manifests: Vec::new(),
        blobs_copied: Vec::new(),
        blobs_skipped: Vec::new(),
        referrers: Vec::new(),
        manifests_present: Vec::new(),
        tag_written: false,
    };
    // A destination tag that already names the root: the registry holds the whole graph.
    let tag_current = match &tag {
        Some(t) => dest.tag_names(client, t, &root.digest).await?,
        None => false,
    };
    let mut done: HashSet<Digest> = HashSet::new();
    for node in &order {
        // Blobs are checked (HEAD) either way, and one the destination lacks is uploaded.
        copy_blobs(client, &source, &dest, node, &mut done, &mut report).await?;
        if tag_current || dest.has_manifest(client, &node.content).await? {
            report.manifests_present.push(node.content.clone());
            continue;
        }
        dest.put_manifest(client, &node.content, &node.bytes, None)
            .await?;
        report.manifests.push(node.content.clone());
    }
    if opts.referrers {
        referrers::copy_referrers(client, &source, &dest, &order, &mut done, &mut report).await?;
        referrers::copy_cosign_tags(client, &source, &dest, &order, &mut done, &mut report).await?;
    }
    if let Some(t) = &tag {
        if !tag_current {
            dest.put_manifest(client, &root, &order[order.len() - 1].bytes, Some(t))
                .await?;
            report.tag_written = true;
        }
    } else if let Dest::Layout(layout) = &dest {
        update_index(layout, &root, None, None)?;
    }
    if let (Some(new), ImageRef::Layout(l)) = (new_layout, dst) {
        new.commit().map_err(|source| TransferError::Layout {
            dir: l.dir.clone(),
            source,
        })?;
    }
    Ok(report)
}

/// Every blob the documents of a layout source name is there with its size, checked before
/// the first upload so a broken layout fails without leaving a half-pushed repository (the
/// content is verified against its digest again as it streams).
fn blobs_present(layout: &ImageLayout, order: &[Node]) -> Result<(), TransferError> {
    for node in order {
        for blob in &node.blobs {
            let path = layout.blob_path(&blob.digest);
            match std::fs::metadata(&path) {
                Ok(m) if m.is_file() && m.len() == blob.size => {}
                Ok(m) => {
                    return Err(TransferError::BrokenSource {
                        what: format!(
                            "blob {} named by {} is {} bytes in {}, the descriptor says {}",
                            blob.digest,
                            node.content.digest,
                            m.len(),
                            layout.root().display(),
                            blob.size
                        ),
                    });
                }
                Err(_) => {
                    return Err(TransferError::BrokenSource {
                        what: format!(
                            "blob {} named by {} is missing from {}",
                            blob.digest,
                            node.content.digest,
                            layout.root().display()
                        ),
                    });
                }
            }
        }
    }
    Ok(())
}

/// Copies the blobs a document names that this copy has not handled yet, each under its
/// destination's flight so concurrent copies upload it once.
async fn copy_blobs(
    client: &Client,
    source: &Source<'_>,
    dest: &Dest,
    node: &Node,
    done: &mut HashSet<Digest>,
    report: &mut CopyReport,
) -> Result<(), TransferError> {
    for blob in &node.blobs {
        if !done.insert(blob.digest.clone()) {
            continue;
        }
        let _flight = client
            .blob_flights
            .enter(flight::BlobKey {
                destination: dest.identity(),
                digest: blob.digest.clone(),
            })
            .await;
        if dest.has_blob(client, blob).await? {
            report.blobs_skipped.push(blob.clone());
        } else {
            copy_blob(client, source, dest, blob)
                .await
                .map_err(|source| TransferError::Blob {
                    digest: blob.digest.clone(),
                    size: blob.size,
                    source,
                })?;
            report.blobs_copied.push(blob.clone());
        }
    }
    Ok(())
}

fn dst_digest(dst: &ImageRef) -> Option<&Digest> {
    match dst {
        ImageRef::Registry(r) => r.digest(),
        ImageRef::Layout(_) => None,
    }
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

/// A checked document with its exact bytes and the blobs it names.
struct Node {
    content: Content,
    bytes: Bytes,
    blobs: Vec<Content>,
}

/// Fetches every document under the root, depth first; returns them children first.
async fn walk(
    source: &Source<'_>,
    root: Content,
    root_bytes: Bytes,
    root_doc: Document,
) -> Result<Vec<Node>, TransferError> {
    let root_digest = root.digest.clone();
    let mut order = Vec::new();
    let mut seen = HashSet::new();
    // (content, bytes and document once fetched, children already pushed)
    type Frame = (Content, Option<(Bytes, Document)>, bool);
    let mut stack: Vec<Frame> = vec![(root, Some((root_bytes, root_doc)), false)];
    while let Some((content, fetched, expanded)) = stack.pop() {
        let (bytes, doc) = match fetched {
            Some(f) => f,
            None => {
                if seen.contains(&content.digest) {
                    continue;
                }
                let bytes = source.document(&content).await?;
                let doc = checked(&content, &bytes)?;
                (bytes, doc)
            }
        };
        if expanded {
            let blobs = match &doc {
                Document::Manifest(m) => std::iter::once(&m.config)
                    .chain(&m.layers)
                    .map(content_of)
                    .collect(),
                _ => Vec::new(),
            };
            order.push(Node {
                content,
                bytes,
                blobs,
            });
            continue;
        }
        if !seen.insert(content.digest.clone()) {
            continue;
        }
        if seen.len() > MAX_DOCUMENTS {
            return Err(TransferError::TooLarge { root: root_digest });
        }
        let children: Vec<Content> = match &doc {
            Document::Index(i) => i.manifests.iter().map(content_of).collect(),
            _ => Vec::new(),
        };
        stack.push((content, Some((bytes, doc)), true));
        for c in children.into_iter().rev() {
            stack.push((c, None, false));
        }
    }
    Ok(order)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    #[test]
    fn parses_both_kinds_once() {
        let r = ImageRef::parse("oci:/tmp/img:v1").unwrap();
        assert_eq!(
            r,
            ImageRef::Layout(LayoutRef {
                dir: "/tmp/img".into(),
                tag: Some(Tag::parse("v1").unwrap()),
                digest: None,
            })
        );
        assert_eq!(r.to_string(), "oci:/tmp/img:v1");
        let r = ImageRef::parse("oci:./a/b").unwrap();
        assert!(
            matches!(&r, ImageRef::Layout(l) if l.tag.is_none() && l.dir == Path::new("./a/b"))
        );
        let r = ImageRef::parse("docker://127.0.0.1:5000/x/y:v2").unwrap();
        let ImageRef::Registry(reg) = &r else {
            panic!("not a registry: {r:?}")
        };
        assert_eq!(reg.registry(), "127.0.0.1:5000");
        assert_eq!(reg.tag().map(Tag::as_str), Some("v2"));
        assert_eq!(
            ImageRef::parse("127.0.0.1:5000/x/y:v2").unwrap(),
            r,
            "docker:// is optional"
        );
        assert_eq!(
            ImageRef::parse_layout("img:v1").unwrap(),
            ImageRef::parse("oci:img:v1").unwrap()
        );
        let d = format!("sha256:{}", "ab".repeat(32));
        let r = ImageRef::parse(&format!("oci:/tmp/img@{d}")).unwrap();
        assert!(
            matches!(&r, ImageRef::Layout(l) if l.tag.is_none() && l.dir == Path::new("/tmp/img")
                && l.digest.as_ref().map(|d| d.to_string()) == Some(d.clone()))
        );
        assert_eq!(r.to_string(), format!("oci:/tmp/img@{d}"));
        assert_eq!(r.digest().map(|d| d.to_string()), Some(d.clone()));
        // An @ in a directory name is not a digest.
        let r = ImageRef::parse("oci:/tmp/a@b/img:v1").unwrap();
        assert!(matches!(&r, ImageRef::Layout(l) if l.dir == Path::new("/tmp/a@b/img")));
        // Without oci: a path starting with / or . is a layout, wherever it is.
        for (input, dir, tag) in [
            ("./img:v1", "./img", Some("v1")),
            ("../img", "../img", None),
            ("/srv/img:v1", "/srv/img", Some("v1")),
            (".:v1", ".", Some("v1")),
        ] {
            let r = ImageRef::parse(input).unwrap();
            assert!(
                matches!(&r, ImageRef::Layout(l) if l.dir == Path::new(dir)
                    && l.tag.as_ref().map(Tag::as_str) == tag),
                "{input}: {r:?}"
            );
        }
        let r = ImageRef::parse(&format!("./img@{d}")).unwrap();
        assert_eq!(r.digest().map(|d| d.to_string()), Some(d.clone()));
        // skopeo's other transports are named.
        for (input, t) in [
            ("oci-archive:img.tar", "oci-archive"),
            ("docker-archive:/tmp/x.tar:a:1", "docker-archive"),
            ("docker-daemon:busybox:latest", "docker-daemon"),
            ("containers-storage:reg.example/a:1", "containers-storage"),
            ("dir:/tmp/x", "dir"),
        ] {
            for e in [
                ImageRef::parse(input).unwrap_err(),
                ImageRef::parse_layout(input).unwrap_err(),
                ImageRef::parse_registry(input).unwrap_err(),
            ] {
                assert!(
                    e.to_string()
                        .contains(&format!("transport {t}: is not supported; use oci:DIR")),
                    "{input}: {e}"
                );
            }
        }
        // A host with a port is not a transport.
        assert!(ImageRef::parse("dir:5000/x:1").is_ok());
        for bad in [
            "oci:",
            "oci:img:-bad",
            "noslash",
            "docker://reg/UPPER",
            "oci:img@sha256:short",
            "oci:@sha256:0000000000000000000000000000000000000000000000000000000000000000",
        ] {
            let e = ImageRef::parse(bad).unwrap_err();
            assert!(
                matches!(e, TransferError::BadReference { .. }),
                "{bad}: {e:?}"
            );
        }
    }
}
