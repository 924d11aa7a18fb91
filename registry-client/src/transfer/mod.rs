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
//! - Manifests are written byte-exact (unless [`CopyOptions::oci_media_types`] rewrites Docker
//!   ones for a layout, each reported in [`CopyReport::converted`]), children before parents, and the tag (a registry tag or
//!   an `org.opencontainers.image.ref.name` entry in the layout's `index.json`) is set last,
//!   so a failed copy tags nothing. Referrers are written after their subject and before the
//!   tag.

mod convert;
pub(crate) mod flight;
mod referrers;
pub(crate) mod stream;

use std::collections::{BTreeSet, HashSet};

use bytes::Bytes;
use validator::{Digest, Document, ImageLayout, Platform};

use crate::Client;
use crate::image::endpoint::{Dest, Source, update_index};
pub use crate::image::{
    Content, ErrorKind, ImageRef, LayoutRef, MAX_REFERRER_DEPTH, TransferError,
};
use crate::image::{MAX_DOCUMENTS, checked, content_of};
pub use convert::Converted;
use stream::copy_blob;

/// What to copy.
#[derive(Debug, Clone)]
pub struct CopyOptions {
    /// Copy only the manifest for this platform out of an index; it becomes the root.
    pub platform: Option<Platform>,
    /// Copy the referrers of every manifest and index of the image too, recursively, and
    /// cosign's `.sig`/`.att`/`.sbom` tags of them (default true).
    pub referrers: bool,
    /// When set, only the referrers and cosign tag manifests with these digests travel (each
    /// with its graph, which its digest covers); any other the source offers is left behind
    /// and named in [`CopyReport::referrers_unlisted`]. A bundle import passes the digests
    /// its `bundle.json` lists with the image, so content added to a layout after the
    /// bundle was signed does not ride along with the content the signature covers.
    pub listed_referrers: Option<BTreeSet<Digest>>,
    /// At a layout destination, write Docker schema 2 manifests and manifest lists with OCI
    /// media types (new digests, each in [`CopyReport::converted`]), as `skopeo copy` to
    /// `oci:` does, so every OCI tool reads the layout by tag (default false: byte-exact).
    pub oci_media_types: bool,
}

impl Default for CopyOptions {
    fn default() -> Self {
        CopyOptions {
            platform: None,
            referrers: true,
            listed_referrers: None,
            oci_media_types: false,
        }
    }
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
    /// Referrers and cosign tag manifests the source offered that
    /// [`CopyOptions::listed_referrers`] does not list, so they were not copied.
    pub referrers_unlisted: Vec<Digest>,
    /// Documents written with OCI media types in place of the source's Docker ones
    /// ([`CopyOptions::oci_media_types`]), children first: the digests changed, so the
    /// source's referrers and cosign tags of them (which name the old digests) stay behind.
    pub converted: Vec<Converted>,
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
    copy_with_progress(client, src, dst, opts, &crate::progress::NoProgress).await
}

/// [`copy`], reporting every blob's bytes to `progress` as they move (the contract is in
/// [`crate::progress`]).
pub async fn copy_with_progress(
    client: &Client,
    src: &ImageRef,
    dst: &ImageRef,
    opts: &CopyOptions,
    progress: &dyn crate::progress::Progress,
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
    let mut order = walk(&source, root.clone(), root_bytes, root_doc).await?;
    let converted = match dst {
        ImageRef::Layout(_) if opts.oci_media_types => convert::to_oci(&mut order)?,
        _ => Vec::new(),
    };
    let root = order[order.len() - 1].content.clone();
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
        referrers_unlisted: Vec::new(),
        converted,
    };
    // A destination tag that already names the root: the registry holds the whole graph.
    let tag_current = match &tag {
        Some(t) => dest.tag_names(client, t, &root.digest).await?,
        None => false,
    };
    let mut done: HashSet<Digest> = HashSet::new();
    for node in &order {
        // Blobs are checked (HEAD) either way, and one the destination lacks is uploaded.
        copy_blobs(
            client,
            &source,
            &dest,
            node,
            &mut done,
            &mut report,
            progress,
        )
        .await?;
        if tag_current || dest.has_manifest(client, &node.content).await? {
            report.manifests_present.push(node.content.clone());
            continue;
        }
        dest.put_manifest(client, &node.content, &node.bytes, None)
            .await?;
        report.manifests.push(node.content.clone());
    }
    if opts.referrers {
        let listed = opts.listed_referrers.as_ref();
        referrers::copy_referrers(
            client,
            &source,
            &dest,
            &order,
            listed,
            &mut done,
            &mut report,
            progress,
        )
        .await?;
        referrers::copy_cosign_tags(
            client,
            &source,
            &dest,
            &order,
            listed,
            &mut done,
            &mut report,
            progress,
        )
        .await?;
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
    progress: &dyn crate::progress::Progress,
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
            progress.blob_present(blob);
            report.blobs_skipped.push(blob.clone());
        } else {
            copy_blob(client, source, dest, blob, progress)
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
    use validator::Tag;

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
