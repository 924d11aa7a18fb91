//! Copying referrers: after an image graph is at the destination, the manifests whose `subject`
//! names one of its documents follow, each with its own graph, then their referrers in turn;
//! and cosign's `sha256-<hex>.sig|.att|.sbom` tags of every document of the image, so
//! signatures made in cosign's default (tag) mode travel with the image.

use std::collections::{BTreeSet, HashMap, HashSet};

use validator::{Digest, Document, Tag};

use super::{
    Content, CopyReport, MAX_DOCUMENTS, MAX_REFERRER_DEPTH, Node, TransferError, checked,
    copy_blobs, walk,
};
use crate::Client;
use crate::image::endpoint::{Dest, Source, layout_index, layout_subject};

/// Where the source's referrers are looked up.
enum Finder<'a> {
    /// A layout: its `index.json` entries with a `subject`, by subject, read once.
    Layout(HashMap<Digest, Vec<Content>>),
    /// A registry: the referrers API or the tag schema, per subject.
    Registry(&'a Client, &'a crate::Reference),
}

impl<'a> Finder<'a> {
    fn open(source: &'a Source<'a>) -> Result<Self, TransferError> {
        match source {
            Source::Registry(client, reference) => Ok(Finder::Registry(client, reference)),
            Source::Layout(layout) => {
                let index = layout_index(layout)?;
                let mut by_subject: HashMap<Digest, Vec<Content>> = HashMap::new();
                let mut listed = HashSet::new();
                for entry in index.manifests.iter().take(MAX_DOCUMENTS) {
                    let c = super::content_of(entry);
                    if !listed.insert(c.digest.clone()) {
                        continue;
                    }
                    if let Some((_, subject)) = layout_subject(layout, &c) {
                        by_subject.entry(subject).or_default().push(c);
                    }
                }
                Ok(Finder::Layout(by_subject))
            }
        }
    }

    /// The referrers of `subject` at the source.
    async fn find(&self, subject: &Digest) -> Result<Vec<Content>, TransferError> {
        match self {
            Finder::Layout(by_subject) => Ok(by_subject.get(subject).cloned().unwrap_or_default()),
            Finder::Registry(client, reference) => {
                let found = client
                    .referrers(reference, subject)
                    .await
                    .map_err(|source| TransferError::Registry {
                        reference: format!("{} (referrers of {subject})", reference),
                        source,
                    })?;
                Ok(found
                    .manifests
                    .into_iter()
                    .map(|r| Content {
                        digest: r.digest,
                        size: r.size,
                        media_type: r.media_type,
                    })
                    .collect())
            }
        }
    }
}

/// The `subject` digest and `artifactType` (the manifest's, else its config's media type; an
/// index's own) of a checked document.
fn subject_of(doc: &Document) -> Option<(&Digest, Option<&str>)> {
    match doc {
        Document::Manifest(m) => m.subject.as_ref().map(|s| {
            let t = m.artifact_type.as_ref().unwrap_or(&m.config.media_type);
            (&s.digest, Some(t.as_str()))
        }),
        Document::Index(i) => i
            .subject
            .as_ref()
            .map(|s| (&s.digest, i.artifact_type.as_ref().map(|t| t.as_str()))),
        _ => None,
    }
}

/// Copies the referrers of every document in `graph`, and theirs, level by level: each
/// referrer's graph is checked, its blobs copied, its manifests written children first, the
/// referrer itself last (its subject is already at the destination). With `listed`, a
/// referrer it does not list is left behind (see [`super::CopyOptions::listed_referrers`]).
#[allow(clippy::too_many_arguments)]
pub(super) async fn copy_referrers(
    client: &Client,
    source: &Source<'_>,
    dest: &Dest,
    graph: &[Node],
    listed_only: Option<&BTreeSet<Digest>>,
    done: &mut HashSet<Digest>,
    report: &mut CopyReport,
    progress: &dyn crate::progress::Progress,
) -> Result<(), TransferError> {
    let finder = Finder::open(source)?;
    let mut seen: HashSet<Digest> = graph.iter().map(|n| n.content.digest.clone()).collect();
    let mut level: Vec<Digest> = graph.iter().map(|n| n.content.digest.clone()).collect();
    let mut documents = graph.len();
    for depth in 0usize.. {
        if level.is_empty() {
            break;
        }
        let mut next = Vec::new();
        for subject in &level {
            let found = finder.find(subject).await?;
            // What the destination already lists is not written again (asked only when there
            // is something to copy).
            let listed = if found.is_empty() {
                HashSet::new()
            } else {
                dest.referrers_listed(client, subject).await?
            };
            for referrer in found {
                if !seen.insert(referrer.digest.clone()) {
                    continue;
                }
                if listed_only.is_some_and(|l| !l.contains(&referrer.digest)) {
                    tracing::debug!(referrer = %referrer.digest, %subject, "a referrer the image's listing does not name; not copied");
                    report.referrers_unlisted.push(referrer.digest.clone());
                    continue;
                }
                if depth >= MAX_REFERRER_DEPTH {
                    return Err(TransferError::TooDeep {
                        subject: subject.clone(),
                    });
                }
                let bytes = match source.document(&referrer).await {
                    Ok(b) => b,
                    Err(e) if e.kind() == super::ErrorKind::NotFound => {
                        // Listed (a tag schema index can outlive a deleted manifest) but gone.
                        tracing::warn!(referrer = %referrer.digest, %subject, "listed as a referrer but not found; skipped");
                        continue;
                    }
                    Err(e) => return Err(e),
                };
                let doc = checked(&referrer, &bytes)?;
                let artifact_type = match subject_of(&doc) {
                    Some((s, t)) if s == subject => t.map(str::to_owned),
                    _ => {
                        // A stale tag schema entry or a layout entry listed under the wrong
                        // subject: not a referrer of this document.
                        tracing::warn!(referrer = %referrer.digest, %subject, "listed as a referrer but its subject differs; skipped");
                        continue;
                    }
                };
                let nodes = walk(source, referrer.clone(), bytes, doc).await?;
                documents = documents.saturating_add(nodes.len());
                if documents > MAX_DOCUMENTS {
                    return Err(TransferError::TooLarge {
                        root: referrer.digest.clone(),
                    });
                }
                let present = listed.contains(&referrer.digest);
                for node in &nodes {
                    seen.insert(node.content.digest.clone());
                    next.push(node.content.digest.clone());
                    copy_blobs(client, source, dest, node, done, report, progress).await?;
                    if present {
                        report.manifests_present.push(node.content.clone());
                        continue;
                    }
                    if node.content.digest == referrer.digest {
                        dest.put_referrer(
                            client,
                            &node.content,
                            &node.bytes,
                            artifact_type.as_deref(),
                        )
                        .await?;
                    } else {
                        dest.put_manifest(client, &node.content, &node.bytes, None)
                            .await?;
                    }
                    report.referrers.push(node.content.clone());
                }
            }
        }
        level = next;
    }
    Ok(())
}

/// Copies cosign's tags (`sha256-<hex>.sig`, `.att`, `.sbom`) of every document in `graph`
/// that the source has: each tagged manifest's graph is checked, its blobs copied, and the
/// manifest written under the same tag at the destination (after the image, before its tag),
/// unless the destination's tag already names it. With `listed`, a tagged manifest it does
/// not list is left behind (see [`super::CopyOptions::listed_referrers`]).
#[allow(clippy::too_many_arguments)]
pub(super) async fn copy_cosign_tags(
    client: &Client,
    source: &Source<'_>,
    dest: &Dest,
    graph: &[Node],
    listed_only: Option<&BTreeSet<Digest>>,
    done: &mut HashSet<Digest>,
    report: &mut CopyReport,
    progress: &dyn crate::progress::Progress,
) -> Result<(), TransferError> {
    for node in graph {
        for tag in crate::inspect::cosign_tags(&node.content.digest) {
            let Some((c, bytes)) = source.tagged(&tag).await? else {
                continue;
            };
            if listed_only.is_some_and(|l| !l.contains(&c.digest)) {
                tracing::debug!(%tag, manifest = %c.digest, "a cosign tag the image's listing does not name; not copied");
                if !report.referrers_unlisted.contains(&c.digest) {
                    report.referrers_unlisted.push(c.digest.clone());
                }
                continue;
            }
            let tag = Tag::parse(&tag).expect("a cosign tag is a valid tag");
            let doc = checked(&c, &bytes)?;
            let nodes = walk(source, c.clone(), bytes, doc).await?;
            let present = dest.tag_names(client, &tag, &c.digest).await?;
            for n in &nodes {
                copy_blobs(client, source, dest, n, done, report, progress).await?;
                if present {
                    report.manifests_present.push(n.content.clone());
                    continue;
                }
                if n.content.digest == c.digest {
                    dest.put_cosign_tag(client, &n.content, &n.bytes, &tag, &node.content)
                        .await?;
                } else {
                    dest.put_manifest(client, &n.content, &n.bytes, None)
                        .await?;
                }
                report.referrers.push(n.content.clone());
            }
        }
    }
    Ok(())
}
