//! Copying images between OCI image layouts and registries: what `rdctl push`, `rdctl pull` and
//! `rdctl copy` run.
//!
//! [`ImageRef`] names either end (`oci:DIR[:TAG]` or `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`)
//! and is parsed once at the edge. [`copy`] walks the whole graph from the source's root: an
//! index and every manifest under it (or, with [`CopyOptions::platform`], only the matching
//! manifest, which then becomes the root), each manifest's config and layers. Referrers are not
//! copied.
//!
//! Guarantees:
//! - Every manifest and index is read verified against its digest and passes
//!   [`validator::check_document`] before anything is written for it.
//! - Blobs stream (memory per blob is bounded by the client's chunk size and a few 64 KiB
//!   buffers) and are verified on the way: a layout destination publishes a blob only after its
//!   size and digest matched; a registry destination verifies on commit.
//! - Blobs the destination already has are skipped.
//! - Manifests are written byte-exact, children before parents, and the tag (a registry tag or
//!   an `org.opencontainers.image.ref.name` entry in the layout's `index.json`) is set last,
//!   so a failed copy tags nothing.

use std::collections::HashSet;
use std::fmt;
use std::io::{self, Read};
use std::path::PathBuf;

use bytes::{Buf, Bytes};
use tokio::io::{AsyncRead, AsyncReadExt};
use validator::{
    Descriptor as DocDescriptor, Digest, Document, ImageLayout, LayoutError, MAX_MANIFEST_SIZE,
    MediaType, Platform, VerifyError, check_document,
};

use crate::{Client, ClientError, ErrorKind as ClientErrorKind, Reference};
use validator::Tag;

/// The annotation that names a tag in a layout's `index.json`.
pub const REF_NAME: &str = "org.opencontainers.image.ref.name";

/// Most manifests and indexes one copy walks (a guard against hostile graphs).
const MAX_DOCUMENTS: usize = 10_000;

/// Buffer size for streaming between blocking file I/O and async HTTP.
const STREAM_BUF: usize = 64 << 10;

/// An OCI image layout directory, maybe with a tag.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LayoutRef {
    /// The layout directory.
    pub dir: PathBuf,
    /// The `org.opencontainers.image.ref.name` to read or write.
    pub tag: Option<Tag>,
}

/// One end of a copy.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageRef {
    /// `oci:DIR[:TAG]`.
    Layout(LayoutRef),
    /// `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`.
    Registry(Reference),
}

impl ImageRef {
    /// Parses `oci:DIR[:TAG]` as a layout and anything else (with or without `docker://`) as
    /// a registry reference.
    pub fn parse(input: &str) -> Result<ImageRef, TransferError> {
        if let Some(rest) = input.strip_prefix("oci:") {
            Self::parse_layout(rest)
        } else {
            Self::parse_registry(input)
        }
    }

    /// Parses `[oci:]DIR[:TAG]`: a `:` after the last `/` starts the tag.
    pub fn parse_layout(input: &str) -> Result<ImageRef, TransferError> {
        let s = input.strip_prefix("oci:").unwrap_or(input);
        let bad = |reason: String| TransferError::BadReference {
            input: input.chars().take(300).collect(),
            reason,
        };
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
        }))
    }

    /// Parses `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`.
    pub fn parse_registry(input: &str) -> Result<ImageRef, TransferError> {
        let s = input.strip_prefix("docker://").unwrap_or(input);
        Reference::parse(s)
            .map(ImageRef::Registry)
            .map_err(|e| TransferError::BadReference {
                input: e.input,
                reason: e.reason,
            })
    }

    fn tag(&self) -> Option<&Tag> {
        match self {
            ImageRef::Layout(l) => l.tag.as_ref(),
            ImageRef::Registry(r) => r.tag(),
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
            | TransferError::TooLarge { .. } => ErrorKind::Invalid,
            _ => ErrorKind::Other,
        }
    }
}

/// What to copy.
#[derive(Debug, Clone, Default)]
pub struct CopyOptions {
    /// Copy only the manifest for this platform out of an index; it becomes the root.
    pub platform: Option<Platform>,
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
    let source = Source::open(client, src)?;
    let dest = Dest::open(dst)?;
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

    // Copy: blobs of each document, then the document, children before parents.
    let mut report = CopyReport {
        root: root.clone(),
        tag: tag.as_ref().map(|t| t.as_str().to_owned()),
        manifests: Vec::new(),
        blobs_copied: Vec::new(),
        blobs_skipped: Vec::new(),
    };
    let mut done: HashSet<Digest> = HashSet::new();
    for node in &order {
        for blob in &node.blobs {
            if !done.insert(blob.digest.clone()) {
                continue;
            }
            if dest.has_blob(client, blob).await? {
                report.blobs_skipped.push(blob.clone());
            } else {
                copy_blob(client, &source, &dest, blob)
                    .await
                    .map_err(|source| TransferError::Blob {
                        digest: blob.digest.clone(),
                        size: blob.size,
                        source,
                    })?;
                report.blobs_copied.push(blob.clone());
            }
        }
        dest.put_manifest(client, &node.content, &node.bytes, None)
            .await?;
        report.manifests.push(node.content.clone());
    }
    if let Some(t) = &tag {
        dest.put_manifest(client, &root, &order[order.len() - 1].bytes, Some(t))
            .await?;
    } else if let Dest::Layout(layout) = &dest {
        update_index(layout, &root, None)?;
    }
    Ok(report)
}

fn dst_digest(dst: &ImageRef) -> Option<&Digest> {
    match dst {
        ImageRef::Registry(r) => r.digest(),
        ImageRef::Layout(_) => None,
    }
}

fn content_of(d: &DocDescriptor) -> Content {
    Content {
        digest: d.digest.clone(),
        size: d.size,
        media_type: d.media_type.as_str().to_owned(),
    }
}

/// Runs the document rules; only a document that passes is returned.
fn checked(c: &Content, bytes: &[u8]) -> Result<Document, TransferError> {
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

enum Source<'a> {
    Layout(ImageLayout),
    Registry(&'a Client, Reference),
}

impl<'a> Source<'a> {
    fn open(client: &'a Client, r: &ImageRef) -> Result<Self, TransferError> {
        Ok(match r {
            ImageRef::Layout(l) => Source::Layout(ImageLayout::open(&l.dir).map_err(|source| {
                TransferError::Layout {
                    dir: l.dir.clone(),
                    source,
                }
            })?),
            ImageRef::Registry(r) => Source::Registry(client, r.clone()),
        })
    }

    fn layout_err(layout: &ImageLayout) -> impl FnOnce(LayoutError) -> TransferError + '_ {
        move |source| TransferError::Layout {
            dir: layout.root().to_owned(),
            source,
        }
    }

    /// The root descriptor and its verified bytes.
    async fn root(&self, r: &ImageRef) -> Result<(Content, Bytes), TransferError> {
        match self {
            Source::Layout(layout) => {
                let tag = r.tag();
                let index_bytes = layout
                    .read_index_bytes()
                    .map_err(Self::layout_err(layout))?;
                let index_path = layout.root().join("index.json");
                let (report, doc) = check_document(
                    &index_bytes,
                    Some(validator::DocumentKind::Index),
                    None,
                    &index_path.display().to_string(),
                );
                let Some(Document::Index(index)) = doc else {
                    let errors: Vec<String> =
                        report.errors().take(5).map(ToString::to_string).collect();
                    return Err(TransferError::Index {
                        path: index_path,
                        reason: errors.join("; "),
                    });
                };
                let entry = match tag {
                    Some(t) => index
                        .manifests
                        .iter()
                        .rev()
                        .find(|d| d.ref_name() == Some(t.as_str()))
                        .ok_or_else(|| TransferError::NotFound {
                            what: format!("tag {t} in layout {}", layout.root().display()),
                        })?,
                    None => match index.manifests.as_slice() {
                        [one] => one,
                        [] => {
                            return Err(TransferError::NotFound {
                                what: format!("an image in layout {}", layout.root().display()),
                            });
                        }
                        many => {
                            return Err(TransferError::Ambiguous {
                                dir: layout.root().to_owned(),
                                count: many.len(),
                            });
                        }
                    },
                };
                let c = content_of(entry);
                let bytes = self.document(&c).await?;
                Ok((c, bytes))
            }
            Source::Registry(client, reference) => {
                let (d, bytes) =
                    client
                        .get_manifest(reference)
                        .await
                        .map_err(|source| match source.kind() {
                            ClientErrorKind::NotFound => TransferError::NotFound {
                                what: format!("manifest {reference}"),
                            },
                            _ => TransferError::Registry {
                                reference: reference.to_string(),
                                source,
                            },
                        })?;
                Ok((
                    Content {
                        digest: d.digest,
                        size: d.size,
                        media_type: d.media_type,
                    },
                    bytes,
                ))
            }
        }
    }

    /// A manifest or index by descriptor, verified against digest and size.
    async fn document(&self, c: &Content) -> Result<Bytes, TransferError> {
        match self {
            Source::Layout(layout) => layout
                .read_document(&c.digest, c.size, MAX_MANIFEST_SIZE as u64)
                .map(Bytes::from)
                .map_err(Self::layout_err(layout)),
            Source::Registry(client, reference) => {
                let r = reference.with_digest(c.digest.clone());
                let (d, bytes) =
                    client
                        .get_manifest(&r)
                        .await
                        .map_err(|source| TransferError::Registry {
                            reference: r.to_string(),
                            source,
                        })?;
                if d.size != c.size {
                    return Err(TransferError::Registry {
                        reference: r.to_string(),
                        source: ClientError::Verify {
                            url: r.to_string(),
                            source: VerifyError::TooShort {
                                expected_digest: c.digest.clone(),
                                expected: c.size,
                                found: d.size,
                            },
                        },
                    });
                }
                Ok(bytes)
            }
        }
    }
}

enum Dest {
    Layout(ImageLayout),
    Registry(Reference),
}

impl Dest {
    fn open(r: &ImageRef) -> Result<Self, TransferError> {
        Ok(match r {
            ImageRef::Layout(l) => Dest::Layout(ImageLayout::create(&l.dir).map_err(|source| {
                TransferError::Layout {
                    dir: l.dir.clone(),
                    source,
                }
            })?),
            ImageRef::Registry(r) => Dest::Registry(r.clone()),
        })
    }

    async fn has_blob(&self, client: &Client, c: &Content) -> Result<bool, TransferError> {
        match self {
            Dest::Layout(layout) => Ok(std::fs::metadata(layout.blob_path(&c.digest))
                .is_ok_and(|m| m.is_file() && m.len() == c.size)),
            Dest::Registry(r) => client
                .blob_exists(r.registry(), r.name(), &c.digest)
                .await
                .map(|size| size.is_some())
                .map_err(|source| TransferError::Registry {
                    reference: r.with_digest(c.digest.clone()).to_string(),
                    source,
                }),
        }
    }

    /// Writes a manifest byte-exact: by digest, or under `tag` when given.
    async fn put_manifest(
        &self,
        client: &Client,
        c: &Content,
        bytes: &Bytes,
        tag: Option<&Tag>,
    ) -> Result<(), TransferError> {
        match self {
            Dest::Layout(layout) => {
                layout
                    .write_blob(&bytes[..], c.digest.algorithm(), Some((&c.digest, c.size)))
                    .map_err(Source::layout_err(layout))?;
                if let Some(t) = tag {
                    update_index(layout, c, Some(t))?;
                }
                Ok(())
            }
            Dest::Registry(r) => {
                let target = match tag {
                    Some(t) => r.with_tag(t.clone()),
                    None => r.with_digest(c.digest.clone()),
                };
                client
                    .push_manifest(&target, &c.media_type, bytes.clone())
                    .await
                    .map_err(|source| TransferError::Registry {
                        reference: target.to_string(),
                        source,
                    })?;
                Ok(())
            }
        }
    }
}

/// Adds (or replaces) the `index.json` entry for `tag` (or the untagged entry for the digest).
fn update_index(layout: &ImageLayout, c: &Content, tag: Option<&Tag>) -> Result<(), TransferError> {
    let path = layout.root().join("index.json");
    let bad = |reason: String| TransferError::Index {
        path: path.clone(),
        reason,
    };
    let bytes = layout
        .read_index_bytes()
        .map_err(Source::layout_err(layout))?;
    let mut index: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
    let manifests = index
        .as_object_mut()
        .ok_or_else(|| bad("not a JSON object".to_owned()))?
        .entry("manifests")
        .or_insert_with(|| serde_json::Value::Array(Vec::new()))
        .as_array_mut()
        .ok_or_else(|| bad("manifests is not an array".to_owned()))?;
    let name_of = |e: &serde_json::Value| {
        e.get("annotations")
            .and_then(|a| a.get(REF_NAME))
            .and_then(|n| n.as_str())
            .map(str::to_owned)
    };
    manifests.retain(|e| match tag {
        Some(t) => name_of(e).as_deref() != Some(t.as_str()),
        None => {
            name_of(e).is_some()
                || e.get("digest").and_then(|d| d.as_str()) != Some(c.digest.as_str())
        }
    });
    let mut entry = serde_json::json!({
        "mediaType": c.media_type,
        "digest": c.digest.as_str(),
        "size": c.size,
    });
    if let Some(t) = tag {
        entry["annotations"] = serde_json::json!({ REF_NAME: t.as_str() });
    }
    manifests.push(entry);
    let out = serde_json::to_vec(&index).map_err(|e| bad(e.to_string()))?;
    layout
        .write_index_bytes(&out)
        .map_err(Source::layout_err(layout))
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Streams one blob from source to destination, verified on the way.
async fn copy_blob(
    client: &Client,
    source: &Source<'_>,
    dest: &Dest,
    c: &Content,
) -> Result<(), BoxError> {
    let (digest, size) = (c.digest.clone(), c.size);
    match (source, dest) {
        (Source::Layout(src), Dest::Layout(dst)) => {
            let (src, dst) = (src.clone(), dst.clone());
            tokio::task::spawn_blocking(move || -> Result<(), BoxError> {
                let r = src.open_blob(&digest, size)?;
                dst.write_blob(r, digest.algorithm(), Some((&digest, size)))?;
                Ok(())
            })
            .await??;
        }
        (Source::Layout(src), Dest::Registry(r)) => {
            let file = src.open_blob(&digest, size)?;
            let reader = blocking_reader(file);
            client
                .push_blob(r.registry(), r.name(), &digest, size, reader)
                .await?;
        }
        (Source::Registry(_, from), Dest::Layout(dst)) => {
            let body = client
                .get_blob(from.registry(), from.name(), &digest, size)
                .await?;
            write_stream(dst, body, &digest, size).await?;
        }
        (Source::Registry(_, from), Dest::Registry(to)) => {
            let body = client
                .get_blob(from.registry(), from.name(), &digest, size)
                .await?;
            client
                .push_blob(to.registry(), to.name(), &digest, size, body)
                .await?;
        }
    }
    Ok(())
}

/// Turns a blocking reader into an async one: a blocking thread reads 64 KiB at a time into a
/// small bounded channel.
fn blocking_reader<R: Read + Send + 'static>(mut r: R) -> impl AsyncRead + Unpin + Send {
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(4);
    tokio::task::spawn_blocking(move || {
        loop {
            let mut buf = vec![0u8; STREAM_BUF];
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(n) => {
                    buf.truncate(n);
                    if tx.blocking_send(Ok(Bytes::from(buf))).is_err() {
                        break;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    let _ = tx.blocking_send(Err(e));
                    break;
                }
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    });
    tokio_util::io::StreamReader::new(Box::pin(stream))
}

/// A blocking reader fed by an async task through a bounded channel.
struct ChannelReader {
    rx: tokio::sync::mpsc::Receiver<io::Result<Bytes>>,
    cur: Bytes,
}

impl Read for ChannelReader {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(e),
                None => return Ok(0),
            }
        }
        let n = buf.len().min(self.cur.len());
        buf[..n].copy_from_slice(&self.cur[..n]);
        self.cur.advance(n);
        Ok(n)
    }
}

/// Writes an async stream into a layout blob on a blocking thread; the layout publishes it only
/// once size and digest matched.
async fn write_stream(
    layout: &ImageLayout,
    mut body: impl AsyncRead + Unpin,
    digest: &Digest,
    size: u64,
) -> Result<(), BoxError> {
    let (tx, rx) = tokio::sync::mpsc::channel::<io::Result<Bytes>>(4);
    let layout = layout.clone();
    let (d, s) = (digest.clone(), size);
    let writer = tokio::task::spawn_blocking(move || {
        let reader = ChannelReader {
            rx,
            cur: Bytes::new(),
        };
        layout.write_blob(reader, d.algorithm(), Some((&d, s)))
    });
    let mut buf = vec![0u8; STREAM_BUF];
    loop {
        match body.read(&mut buf).await {
            Ok(0) => break,
            Ok(n) => {
                if tx
                    .send(Ok(Bytes::copy_from_slice(&buf[..n])))
                    .await
                    .is_err()
                {
                    break; // the writer stopped; its error says why
                }
            }
            Err(e) => {
                let _ = tx.send(Err(e)).await;
                break;
            }
        }
    }
    drop(tx);
    writer.await??;
    Ok(())
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
                tag: Some(Tag::parse("v1").unwrap())
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
        for bad in ["oci:", "oci:img:-bad", "noslash", "docker://reg/UPPER"] {
            let e = ImageRef::parse(bad).unwrap_err();
            assert!(
                matches!(e, TransferError::BadReference { .. }),
                "{bad}: {e:?}"
            );
        }
    }

    #[test]
    fn index_entries_are_replaced_by_tag() {
        let dir = tempfile::tempdir().unwrap();
        let layout = ImageLayout::create(dir.path().join("l")).unwrap();
        let c = |b: &[u8]| Content {
            digest: Digest::sha256(b),
            size: b.len() as u64,
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
        };
        let v1 = Tag::parse("v1").unwrap();
        update_index(&layout, &c(b"a"), Some(&v1)).unwrap();
        update_index(&layout, &c(b"b"), Some(&Tag::parse("v2").unwrap())).unwrap();
        update_index(&layout, &c(b"c"), Some(&v1)).unwrap();
        update_index(&layout, &c(b"d"), None).unwrap();
        update_index(&layout, &c(b"d"), None).unwrap();
        let index: serde_json::Value =
            serde_json::from_slice(&layout.read_index_bytes().unwrap()).unwrap();
        let entries: Vec<(String, Option<String>)> = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["digest"].as_str().unwrap().to_owned(),
                    e["annotations"][REF_NAME].as_str().map(str::to_owned),
                )
            })
            .collect();
        assert_eq!(
            entries,
            vec![
                (Digest::sha256(b"b").to_string(), Some("v2".into())),
                (Digest::sha256(b"c").to_string(), Some("v1".into())),
                (Digest::sha256(b"d").to_string(), None),
            ]
        );
    }
}
