//! Listing, tagging and removing images, at a registry or in an OCI layout alike: what
//! `rdctl ls`, `rdctl tag` and `rdctl rm` run.
//!
//! [`list_tags`] summarizes every tag (digest, total size, platforms, config `created`),
//! fetching the details with bounded concurrency and classifying cosign's
//! `sha256-<hex>.sig|.att|.sbom` tags and referrers tag schema tags (`sha256-<hex>`) apart
//! from images. [`tag`] names a manifest by one more tag, byte for byte. [`plan_removal`]
//! works out what deleting a tag or manifest lets garbage collection reclaim (the manifest,
//! when no other tag names it, its referrers, and the blobs only they reference), and
//! [`remove`] deletes.

use std::collections::{BTreeMap, BTreeSet};

use futures_util::{StreamExt, stream};
use serde::Serialize;
use validator::{Digest, Document, IndexEntry, Tag};

pub use crate::image::cosign::tag_name_kind;
use crate::image::endpoint::{Source, layout_index, layout_subject};
use crate::image::{Content, ImageRef, TransferError, content_of};
use crate::inspect::{image_details, read_doc, referrers_of};
use crate::{Client, ClientError, Reference};

/// How many tags' details are fetched at once.
pub const LIST_CONCURRENCY: usize = 8;

/// Most other tags [`plan_removal`] reads before it calls its answer an estimate.
pub const MAX_TAGS_EXAMINED: usize = 200;

/// One row of `rdctl ls HOST/REPO` or `rdctl ls oci:DIR`.
#[derive(Debug, Clone, Serialize)]
pub struct TagRow {
    /// The tag (`None`: an untagged layout entry, a referrer).
    pub tag: Option<String>,
    /// `image`, `index`, `artifact`, or from the tag name `signature`, `attestation`, `sbom`,
    /// `referrers` (see [`tag_name_kind`]).
    pub kind: String,
    /// Whether `rdctl ls` hides it without `--all` (cosign tags, referrers tags, referrers).
    pub hidden: bool,
    /// The manifest or index digest.
    pub digest: Digest,
    /// Its media type.
    pub media_type: String,
    /// The image's size as every surface reports it (docs/api.md, "Image size"): manifest,
    /// config and layers; an index, itself and each platform's manifest, config and layers;
    /// every distinct digest once.
    pub size: u64,
    /// `os/arch[/variant]` of each image.
    pub platforms: Vec<String>,
    /// When the image was created (docs/api.md, "Image created time"): the config's
    /// `created`; for an index, the newest of its images'; for an artifact, its
    /// `org.opencontainers.image.created` annotation.
    pub created: Option<String>,
    /// The manifest's `artifactType`, for an artifact.
    pub artifact_type: Option<String>,
}

/// What [`list_tags`] found.
#[derive(Debug, Clone, Serialize)]
pub struct TagList {
    /// The rows, in the registry's order (a layout's: tagged entries, then untagged ones).
    pub tags: Vec<TagRow>,
    /// Hidden rows left out (without `all`).
    pub hidden: usize,
}

/// The tags of the repository (or layout) `r` names. Without `all`, the rows
/// [`TagRow::hidden`] marks are left out (and counted) before anything is fetched for them;
/// `limit` then keeps the first rows.
pub async fn list_tags(
    client: &Client,
    r: &ImageRef,
    all: bool,
    limit: Option<usize>,
) -> Result<TagList, TransferError> {
    let source = Source::open(client, r)?;
    let mut entries: Vec<(Option<String>, Option<Content>)> = match &source {
        Source::Registry(client, reference) => client
            .tags(reference, crate::catalog::DEFAULT_PAGE_SIZE, None)
            .await
            .map_err(|source| TransferError::Registry {
                reference: reference.to_string(),
                source,
            })?
            .into_iter()
            .map(|t| (Some(t), None))
            .collect(),
        Source::Layout(layout) => {
            let index = layout_index(layout)?;
            let mut tagged: Vec<_> = index
                .manifests
                .iter()
                .filter(|d| d.ref_name().is_some())
                .map(|d| (d.ref_name().map(str::to_owned), Some(content_of(d))))
                .collect();
            tagged.extend(
                index
                    .manifests
                    .iter()
                    .filter(|d| d.ref_name().is_none())
                    .map(|d| (None, Some(content_of(d)))),
            );
            tagged
        }
    };
    let before = entries.len();
    if !all {
        entries.retain(|(t, _)| t.as_deref().is_some_and(|t| tag_name_kind(t).is_none()));
    }
    let hidden = before - entries.len();
    if let Some(l) = limit {
        entries.truncate(l);
    }
    let source = &source;
    let rows: Vec<Result<TagRow, TransferError>> = stream::iter(entries)
        .map(|(tag, content)| async move { summarize(source, tag, content).await })
        .buffered(LIST_CONCURRENCY)
        .collect()
        .await;
    Ok(TagList {
        tags: rows.into_iter().collect::<Result<_, _>>()?,
        hidden,
    })
}

async fn summarize(
    source: &Source<'_>,
    tag: Option<String>,
    content: Option<Content>,
) -> Result<TagRow, TransferError> {
    let c = match (content, source) {
        (Some(c), _) => c,
        (None, Source::Registry(client, reference)) => {
            let t = tag.as_deref().unwrap_or("latest");
            let tagged =
                reference.with_tag(Tag::parse(t).map_err(|e| TransferError::BadReference {
                    input: t.to_owned(),
                    reason: e.to_string(),
                })?);
            let d = client
                .resolve(&tagged)
                .await
                .map_err(|source| TransferError::Registry {
                    reference: tagged.to_string(),
                    source,
                })?;
            Content {
                digest: d.digest,
                size: d.size,
                media_type: d.media_type,
            }
        }
        (None, Source::Layout(_)) => unreachable!("layout rows come with their descriptor"),
    };
    let by_name = tag.as_deref().and_then(tag_name_kind);
    let mut row = TagRow {
        hidden: by_name.is_some() || tag.is_none(),
        tag,
        kind: by_name.unwrap_or("image").to_owned(),
        digest: c.digest.clone(),
        media_type: c.media_type.clone(),
        size: c.size,
        platforms: Vec::new(),
        created: None,
        artifact_type: None,
    };
    // The one definition of an image's size: every distinct digest once.
    let mut counted = BTreeSet::from([c.digest.clone()]);
    let mut add = |d: &Digest, size: u64, total: &mut u64| {
        if counted.insert(d.clone()) {
            *total += size;
        }
    };
    match read_doc(source, &c).await? {
        Document::Manifest(m) => {
            let is_image = m.artifact_type.is_none() && m.config.media_type.is_image_config();
            if is_image {
                let i = image_details(source, &m).await?;
                add(&i.config_digest, i.config_size, &mut row.size);
                for l in &i.layers {
                    add(&l.digest, l.size, &mut row.size);
                }
                row.platforms.push(i.platform);
                row.created = i.created;
            } else {
                row.artifact_type = Some(
                    m.artifact_type
                        .as_ref()
                        .unwrap_or(&m.config.media_type)
                        .as_str()
                        .to_owned(),
                );
                add(&m.config.digest, m.config.size, &mut row.size);
                for l in &m.layers {
                    add(&l.digest, l.size, &mut row.size);
                }
                if by_name.is_none() {
                    row.kind = "artifact".to_owned();
                }
                row.created = m
                    .annotations
                    .get("org.opencontainers.image.created")
                    .cloned();
            }
        }
        Document::Index(i) => {
            if by_name.is_none() {
                row.kind = "index".to_owned();
            }
            for d in &i.manifests {
                let child = content_of(d);
                add(&child.digest, child.size, &mut row.size);
                if let Document::Manifest(m) = read_doc(source, &child).await?
                    && m.artifact_type.is_none()
                    && m.config.media_type.is_image_config()
                {
                    let img = image_details(source, &m).await?;
                    add(&img.config_digest, img.config_size, &mut row.size);
                    for l in &img.layers {
                        add(&l.digest, l.size, &mut row.size);
                    }
                    crate::inspect::keep_newest(&mut row.created, &img.created);
                }
            }
            row.platforms = i
                .manifests
                .iter()
                .filter_map(|d| d.platform.as_ref().map(ToString::to_string))
                .collect();
        }
        Document::Config(_) => {}
    }
    Ok(row)
}

/// Names the manifest `src` names by `new` too, in the same repository or layout: at a
/// registry its exact bytes are PUT under the tag with the same media type (so the digest
/// stays); in a layout `index.json` gets an entry (its platform and annotations kept) through
/// the layout's one index writer. Returns what was tagged.
pub async fn tag(client: &Client, src: &ImageRef, new: &Tag) -> Result<Content, TransferError> {
    let source = Source::open(client, src)?;
    let (root, bytes) = source.root(src).await?;
    match &source {
        Source::Registry(client, r) => {
            let target = r.with_tag(new.clone());
            let pushed = client
                .push_manifest(&target, &root.media_type, bytes)
                .await
                .map_err(|source| TransferError::Registry {
                    reference: target.to_string(),
                    source,
                })?;
            if pushed != root.digest {
                return Err(TransferError::DigestMismatch {
                    destination: target.to_string(),
                    wanted: root.digest,
                    found: pushed,
                });
            }
        }
        Source::Layout(layout) => {
            let index = layout_index(layout)?;
            let wanted = src.tag().map(Tag::as_str);
            let found = index
                .manifests
                .iter()
                .filter(|d| d.digest == root.digest)
                .find(|d| wanted.is_none() || d.ref_name() == wanted);
            let mut entry =
                IndexEntry::new(root.media_type.clone(), root.digest.clone(), root.size);
            if let Some(d) = found {
                entry.platform = d.platform.clone();
                entry.artifact_type = d.artifact_type.as_ref().map(|t| t.as_str().to_owned());
                entry.annotations = d.annotations.clone();
            }
            layout
                .set_tag(new, entry)
                .map_err(Source::layout_err(layout))?;
        }
    }
    Ok(root)
}

/// One piece of content a removal lets go.
#[derive(Debug, Clone, Serialize)]
pub struct Reclaimable {
    /// Its digest.
    pub digest: Digest,
    /// Its size.
    pub size: u64,
    /// `manifest`, `index` or `blob`.
    pub kind: String,
}

/// What `rdctl rm` does and what it lets go.
#[derive(Debug, Clone, Serialize)]
pub struct RemovalPlan {
    /// The reference removed.
    pub reference: String,
    /// The tag removed, or `None` for a removal by digest.
    pub tag: Option<String>,
    /// The manifest or index it named.
    pub digest: Digest,
    /// Its media type.
    pub media_type: String,
    /// Other tags that still name the digest after the removal (then nothing is reclaimed).
    pub still_tagged: Vec<String>,
    /// Tags that go with a manifest deleted by digest.
    pub tags_removed: Vec<String>,
    /// At a registry, with a manifest deleted by digest: the tags that hang its signatures and
    /// referrers on it, the referrers tag schema's `sha256-<hex>` and cosign's
    /// `sha256-<hex>.sig|.att|.sbom`. They go with it (each deleted by its own digest, the only
    /// delete distribution knows), so what they held can be reclaimed.
    pub attached_tags: Vec<String>,
    /// Indexes that stay (reached from another tag) and list the manifest removed by digest:
    /// our registry refuses that DELETE with `MANIFEST_REFERENCED` unless forced, so a dry run
    /// can say so before anything is sent.
    pub listed_by: Vec<Digest>,
    /// Referrers of the removed manifest that go with it.
    pub referrers: Vec<Digest>,
    /// What garbage collection can then reclaim: manifests and blobs that no remaining tag
    /// reaches (at a registry: by `rdctl registry gc --delete-untagged` or its equivalent).
    pub reclaimable: Vec<Reclaimable>,
    /// Their total size.
    pub reclaimable_bytes: u64,
    /// Other tags read to find what stays referenced.
    pub tags_examined: usize,
    /// Tags in the repository or layout.
    pub tags_total: usize,
    /// True when not every tag was read (more than [`MAX_TAGS_EXAMINED`]).
    pub estimate: bool,
    /// Layout: blob files deleted by `--prune`.
    pub pruned: Vec<Digest>,
}

type Graph = BTreeMap<Digest, (u64, &'static str)>;

/// Adds everything `root` reaches (index children, configs, layers, and when `referrers`, the
/// referrers of each manifest and index, recursively) to `out`.
async fn closure(
    source: &Source<'_>,
    root: Content,
    referrers: bool,
    out: &mut Graph,
) -> Result<(), TransferError> {
    let mut stack = vec![root];
    while let Some(c) = stack.pop() {
        if out.contains_key(&c.digest) {
            continue;
        }
        let doc = read_doc(source, &c).await?;
        match &doc {
            Document::Manifest(m) => {
                out.insert(c.digest.clone(), (c.size, "manifest"));
                for b in std::iter::once(&m.config).chain(&m.layers) {
                    out.entry(b.digest.clone()).or_insert((b.size, "blob"));
                }
            }
            Document::Index(i) => {
                out.insert(c.digest.clone(), (c.size, "index"));
                stack.extend(i.manifests.iter().map(content_of));
            }
            Document::Config(_) => {}
        }
        if referrers {
            for r in referrers_of(source, &c.digest, false).await? {
                stack.push(Content {
                    digest: r.digest,
                    size: r.size,
                    media_type: r.media_type,
                });
            }
        }
        if out.len() > 100_000 {
            return Err(TransferError::TooLarge { root: c.digest });
        }
    }
    Ok(())
}

/// Works out what removing `r` (a tag, or a manifest by `@digest`) does, without changing
/// anything.
pub async fn plan_removal(client: &Client, r: &ImageRef) -> Result<RemovalPlan, TransferError> {
    let source = Source::open(client, r)?;
    let tag = r.tag().map(|t| t.as_str().to_owned());
    if let (ImageRef::Layout(l), None, None) = (r, &tag, r.digest()) {
        return Err(TransferError::BadReference {
            input: r.to_string(),
            reason: format!(
                "name the tag or manifest to remove: oci:{}:TAG or oci:{}@DIGEST (rdctl ls oci:{} lists them)",
                l.dir.display(),
                l.dir.display(),
                l.dir.display()
            ),
        });
    }
    let (root, _) = source.root(r).await?;
    let mut plan = RemovalPlan {
        reference: r.to_string(),
        tag: tag.clone(),
        digest: root.digest.clone(),
        media_type: root.media_type.clone(),
        still_tagged: Vec::new(),
        tags_removed: Vec::new(),
        attached_tags: Vec::new(),
        listed_by: Vec::new(),
        referrers: Vec::new(),
        reclaimable: Vec::new(),
        reclaimable_bytes: 0,
        tags_examined: 0,
        tags_total: 0,
        estimate: false,
        pruned: Vec::new(),
    };
    let mut kept = Graph::new();
    // Roots that stay: the other tags (a layout: the other entries that are not referrers of
    // what goes).
    let mut stay: Vec<(Option<String>, Content)> = Vec::new();
    match &source {
        Source::Registry(client, reference) => {
            let tags = client
                .tags(reference, crate::catalog::DEFAULT_PAGE_SIZE, None)
                .await
                .map_err(|source| TransferError::Registry {
                    reference: reference.to_string(),
                    source,
                })?;
            plan.tags_total = tags.len();
            let others: Vec<String> = tags
                .into_iter()
                .filter(|t| Some(t) != tag.as_ref())
                .collect();
            plan.estimate = others.len() > MAX_TAGS_EXAMINED;
            let resolved: Vec<Result<(String, Option<Content>), TransferError>> =
                stream::iter(others.into_iter().take(MAX_TAGS_EXAMINED))
                    .map(|t| async move {
                        let c = resolve_tag(client, reference, &t).await?;
                        Ok((t, c))
                    })
                    .buffered(LIST_CONCURRENCY)
                    .collect()
                    .await;
            // A manifest deleted by digest takes every tag naming it along, and the tags that
            // hang its signatures and referrers on it.
            let by_digest = reference.digest().is_some();
            let attached = attached_tag_names(&root.digest);
            for x in resolved {
                if let (t, Some(c)) = x? {
                    if by_digest && c.digest == root.digest {
                        plan.tags_removed.push(t);
                    } else if by_digest && attached.contains(&t) {
                        plan.attached_tags.push(t);
                    } else {
                        stay.push((Some(t), c));
                    }
                }
            }
        }
        Source::Layout(layout) => {
            let by_digest = r.digest().is_some();
            stay = layout_stay(layout, by_digest, &root.digest, tag.as_deref(), &mut plan)?;
        }
    }
    plan.tags_examined = stay.iter().filter(|(t, _)| t.is_some()).count();
    if r.digest().is_some() {
        let roots: Vec<Content> = stay.iter().map(|(_, c)| c.clone()).collect();
        plan.listed_by = indexes_listing(&source, roots, &root.digest).await?;
    }
    for (t, c) in &stay {
        if c.digest == root.digest
            && let Some(t) = t
        {
            plan.still_tagged.push(t.clone());
        }
    }
    if !plan.still_tagged.is_empty() {
        return Ok(plan);
    }
    for (_, c) in stay {
        closure(&source, c, true, &mut kept).await?;
    }
    // In a layout, referrer entries are roots too when their subject stays.
    if let Source::Layout(layout) = &source {
        let index = layout_index(layout)?;
        for d in index.manifests.iter().filter(|d| d.ref_name().is_none()) {
            let c = content_of(d);
            if let Some((_, subject)) = layout_subject(layout, &c)
                && kept.contains_key(&subject)
            {
                closure(&source, c, true, &mut kept).await?;
            }
        }
    }
    let mut gone = Graph::new();
    closure(&source, root.clone(), true, &mut gone).await?;
    for r in referrers_of(&source, &root.digest, false).await? {
        if !kept.contains_key(&r.digest) {
            plan.referrers.push(r.digest);
        }
    }
    for (digest, (size, kind)) in gone {
        if !kept.contains_key(&digest) {
            plan.reclaimable_bytes += size;
            plan.reclaimable.push(Reclaimable {
                digest,
                size,
                kind: kind.to_owned(),
            });
        }
    }
    Ok(plan)
}

/// The entries of a layout that stay when `root` goes (by `tag`, or by digest), recording in
/// `plan` the tags that go along.
fn layout_stay(
    layout: &validator::ImageLayout,
    by_digest: bool,
    root: &Digest,
    tag: Option<&str>,
    plan: &mut RemovalPlan,
) -> Result<Vec<(Option<String>, Content)>, TransferError> {
    let index = layout_index(layout)?;
    plan.tags_total = index
        .manifests
        .iter()
        .filter(|d| d.ref_name().is_some())
        .count();
    // A manifest removed by digest takes every entry naming it along, tags included, and the
    // entries tagged with its signature and referrers tags, as at a registry.
    let attached = attached_tag_names(root);
    let mut stay = Vec::new();
    for d in &index.manifests {
        let c = content_of(d);
        if by_digest && &c.digest == root {
            if let Some(t) = d.ref_name() {
                plan.tags_removed.push(t.to_owned());
            }
            continue;
        }
        match d.ref_name() {
            Some(t) if Some(t) == tag => {}
            Some(t) if by_digest && attached.iter().any(|a| a == t) => {
                plan.attached_tags.push(t.to_owned());
            }
            Some(t) => stay.push((Some(t.to_owned()), c)),
            // Untagged: referrers stay only with a subject that stays (checked by the caller).
            None => {
                if layout_subject(layout, &c).is_none() {
                    stay.push((None, c));
                }
            }
        }
    }
    Ok(stay)
}

/// The indexes reachable from `roots` (through nested indexes) that list `target`.
async fn indexes_listing(
    source: &Source<'_>,
    roots: Vec<Content>,
    target: &Digest,
) -> Result<Vec<Digest>, TransferError> {
    fn is_index(c: &Content) -> bool {
        validator::MediaType::parse(&c.media_type).is_ok_and(|m| m.is_index())
    }
    let mut stack: Vec<Content> = roots.into_iter().filter(is_index).collect();
    let mut seen = BTreeSet::new();
    let mut listing = Vec::new();
    while let Some(c) = stack.pop() {
        if !seen.insert(c.digest.clone()) {
            continue;
        }
        if seen.len() > crate::image::MAX_DOCUMENTS {
            return Err(TransferError::TooLarge { root: c.digest });
        }
        if let Document::Index(i) = read_doc(source, &c).await? {
            if i.manifests.iter().any(|m| &m.digest == target) && !listing.contains(&c.digest) {
                listing.push(c.digest.clone());
            }
            stack.extend(i.manifests.iter().map(content_of).filter(is_index));
        }
    }
    Ok(listing)
}

/// The tags that hang signatures and referrers on `digest`: the referrers tag schema's
/// `<alg>-<hex>` and cosign's `.sig`, `.att` and `.sbom` beside it.
fn attached_tag_names(digest: &Digest) -> [String; 4] {
    let base = crate::referrers::fallback_tag(digest).as_str().to_owned();
    [
        format!("{base}.sig"),
        format!("{base}.att"),
        format!("{base}.sbom"),
        base,
    ]
}

async fn resolve_tag(
    client: &Client,
    reference: &Reference,
    t: &str,
) -> Result<Option<Content>, TransferError> {
    let Ok(tag) = Tag::parse(t) else {
        return Ok(None);
    };
    let tagged = reference.with_tag(tag);
    match client.resolve(&tagged).await {
        Ok(d) => Ok(Some(Content {
            digest: d.digest,
            size: d.size,
            media_type: d.media_type,
        })),
        // Deleted since the listing.
        Err(e) if e.kind() == crate::ErrorKind::NotFound => Ok(None),
        Err(source) => Err(TransferError::Registry {
            reference: tagged.to_string(),
            source,
        }),
    }
}

/// Carries out a removal [`plan_removal`] worked out. At a registry: `DELETE` of the tag, or
/// of the manifest by digest (the registry's error comes back as it is; see
/// [`crate::DeleteRefusal`]). In a layout: the tag's `index.json` entry goes, and with it,
/// when no other entry names the manifest, the untagged entries of its referrers; with
/// `prune` the reclaimable blob files are deleted. `force` deletes at our registry a manifest
/// an index still lists (see [`Client::delete_manifest`]).
pub async fn remove(
    client: &Client,
    r: &ImageRef,
    plan: &mut RemovalPlan,
    prune: bool,
    force: bool,
) -> Result<(), TransferError> {
    match r {
        ImageRef::Registry(reference) => {
            client
                .delete_manifest(reference, force)
                .await
                .map_err(|source: ClientError| TransferError::Registry {
                    reference: reference.to_string(),
                    source,
                })?;
            // The manifest is gone: its signature and referrers tags go too, each by the
            // digest it names (a tag read again now, in case it moved since the plan).
            for t in &plan.attached_tags {
                let Some(c) = resolve_tag(client, reference, t).await? else {
                    continue;
                };
                let target = reference.with_digest(c.digest);
                client
                    .delete_manifest(&target, false)
                    .await
                    .map_err(|source| TransferError::Registry {
                        reference: format!("{} (tag {t})", target),
                        source,
                    })?;
            }
            Ok(())
        }
        ImageRef::Layout(l) => {
            let layout =
                validator::ImageLayout::open(&l.dir).map_err(|source| TransferError::Layout {
                    dir: l.dir.clone(),
                    source,
                })?;
            let tag = plan.tag.clone().unwrap_or_default();
            // By digest: every entry naming the manifest goes, and its signature and
            // referrers tags.
            let by_digest = l.digest.as_ref().map(|_| plan.digest.to_string());
            let attached = &plan.attached_tags;
            let referrers: BTreeSet<String> = if plan.still_tagged.is_empty() {
                plan.referrers.iter().map(|d| d.to_string()).collect()
            } else {
                BTreeSet::new()
            };
            layout
                .edit_index(|e| {
                    e.retain(|v| {
                        let name = v
                            .get("annotations")
                            .and_then(|a| a.get(validator::REF_NAME_ANNOTATION))
                            .and_then(|n| n.as_str());
                        let digest = v.get("digest").and_then(|d| d.as_str()).unwrap_or("");
                        name != Some(tag.as_str())
                            && by_digest.as_deref() != Some(digest)
                            && !name.is_some_and(|n| attached.iter().any(|a| a == n))
                            && !(name.is_none() && referrers.contains(digest))
                    });
                })
                .map_err(Source::layout_err(&layout))?;
            if prune {
                for c in &plan.reclaimable {
                    let path = layout.blob_path(&c.digest);
                    match std::fs::remove_file(&path) {
                        Ok(()) => plan.pruned.push(c.digest.clone()),
                        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                        Err(e) => {
                            return Err(TransferError::Layout {
                                dir: l.dir.clone(),
                                source: validator::LayoutError::Io {
                                    op: "delete blob",
                                    path,
                                    source: e,
                                },
                            });
                        }
                    }
                }
            }
            Ok(())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use validator::ImageLayout;

    const MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

    fn run<F: std::future::Future>(f: F) -> F::Output {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(f)
    }

    fn blob(layout: &ImageLayout, bytes: &[u8]) -> serde_json::Value {
        let d = layout.write_document(bytes).unwrap();
        serde_json::json!({"digest": d.to_string(), "size": bytes.len()})
    }

    /// An image of `layers` (each its own blob) with config `created`; returns its content.
    fn image(layout: &ImageLayout, created: &str, layers: &[&[u8]]) -> Content {
        let config = serde_json::json!({
            "created": created, "os": "illumos", "architecture": "amd64",
            "config": {"Labels": {STOP: "30"}},
            "rootfs": {"type": "layers", "diff_ids": layers.iter().map(|l| Digest::sha256(l).to_string()).collect::<Vec<_>>()},
            "history": layers.iter().enumerate().map(|(i, _)| serde_json::json!({"created_by": format!("rdctl build: pkg://p/pkg{i}@1.0")})).collect::<Vec<_>>(),
        });
        let mut c = blob(layout, &serde_json::to_vec(&config).unwrap());
        c["mediaType"] = "application/vnd.oci.image.config.v1+json".into();
        let layers: Vec<serde_json::Value> = layers
            .iter()
            .map(|l| {
                let mut d = blob(layout, l);
                d["mediaType"] = "application/vnd.oci.image.layer.v1.tar".into();
                d
            })
            .collect();
        let m = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": MANIFEST, "config": c, "layers": layers,
        }))
        .unwrap();
        let digest = layout.write_document(&m).unwrap();
        Content {
            digest,
            size: m.len() as u64,
            media_type: MANIFEST.into(),
        }
    }

    const STOP: &str = crate::inspect::STOP_TIMEOUT_LABEL;

    fn entry(c: &Content) -> IndexEntry {
        IndexEntry::new(c.media_type.clone(), c.digest.clone(), c.size)
    }

    fn tags_of(layout: &ImageLayout) -> Vec<Option<String>> {
        let index: serde_json::Value =
            serde_json::from_slice(&layout.read_index_bytes().unwrap()).unwrap();
        index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                e["annotations"][validator::REF_NAME_ANNOTATION]
                    .as_str()
                    .map(str::to_owned)
            })
            .collect()
    }

    #[test]
    fn layout_list_tag_inspect_and_remove_with_prune() {
        let dir = tempfile::tempdir().unwrap();
        let layout = ImageLayout::create(dir.path().join("l")).unwrap();
        let a = image(&layout, "2024-01-01T00:00:00Z", &[b"shared", b"only a"]);
        let b = image(&layout, "2024-02-01T00:00:00Z", &[b"shared", b"only b"]);
        // A referrer of a: an SBOM-like artifact with one blob.
        let sbom = blob(&layout, b"{\"spdxVersion\":\"SPDX-2.3\",\"packages\":[]}");
        let empty = blob(&layout, b"{}");
        let referrer = serde_json::to_vec(&serde_json::json!({
            "schemaVersion": 2, "mediaType": MANIFEST,
            "artifactType": "application/spdx+json",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": empty["digest"], "size": 2},
            "layers": [{"mediaType": "application/spdx+json", "digest": sbom["digest"], "size": sbom["size"]}],
            "subject": {"mediaType": MANIFEST, "digest": a.digest.to_string(), "size": a.size},
        }))
        .unwrap();
        let r_digest = layout.write_document(&referrer).unwrap();
        let r = Content {
            digest: r_digest.clone(),
            size: referrer.len() as u64,
            media_type: MANIFEST.into(),
        };
        layout
            .set_tag(&Tag::parse("a").unwrap(), entry(&a))
            .unwrap();
        layout
            .set_tag(&Tag::parse("b").unwrap(), entry(&b))
            .unwrap();
        layout
            .add_untagged(entry(&r), validator::Replaces::SameDigest)
            .unwrap();
        let client = Client::builder().build().unwrap();
        let at = |tag: &str| {
            ImageRef::parse(&format!("oci:{}:{tag}", dir.path().join("l").display())).unwrap()
        };
        let whole = ImageRef::parse(&format!("oci:{}", dir.path().join("l").display())).unwrap();

        // ls: the two tags, the referrer hidden and counted; with all, shown as an artifact.
        let list = run(list_tags(&client, &whole, false, None)).unwrap();
        assert_eq!(list.hidden, 1);
        let rows: Vec<(&str, &Digest)> = list
            .tags
            .iter()
            .map(|t| (t.tag.as_deref().unwrap(), &t.digest))
            .collect();
        assert_eq!(rows, vec![("a", &a.digest), ("b", &b.digest)]);
        assert_eq!(
            list.tags[1].created.as_deref(),
            Some("2024-02-01T00:00:00Z")
        );
        assert_eq!(list.tags[1].platforms, vec!["illumos/amd64"]);
        let all = run(list_tags(&client, &whole, true, None)).unwrap();
        assert_eq!(all.tags[2].kind, "artifact");
        assert_eq!(
            all.tags[2].artifact_type.as_deref(),
            Some("application/spdx+json")
        );

        // inspect: packages per layer from the history, the stop timeout label, the referrer.
        let i = run(crate::inspect::inspect(&client, &at("a"))).unwrap();
        let image = i.image.as_ref().unwrap();
        assert_eq!(image.config.stop_timeout, Some(30));
        assert_eq!(image.layers[1].packages, vec!["pkg://p/pkg1@1.0"]);
        assert_eq!(i.referrers.len(), 1);
        assert_eq!(i.referrers[0].digest, r_digest);
        assert_eq!(i.referrers[0].kind, "sbom");

        // tag: a second name for b, platform and all.
        let tagged = run(tag(&client, &at("b"), &Tag::parse("c").unwrap())).unwrap();
        assert_eq!(tagged.digest, b.digest);
        let plan = run(plan_removal(&client, &at("c"))).unwrap();
        assert_eq!(plan.still_tagged, vec!["b"]);
        assert!(plan.reclaimable.is_empty());

        // rm a --prune: a, its config and own layer, the referrer and its blobs go; the
        // shared layer stays.
        let mut plan = run(plan_removal(&client, &at("a"))).unwrap();
        let gone: BTreeSet<String> = plan
            .reclaimable
            .iter()
            .map(|c| c.digest.to_string())
            .collect();
        let expected: BTreeSet<String> = [
            a.digest.to_string(),
            Digest::sha256(b"only a").to_string(),
            r_digest.to_string(),
            sbom["digest"].as_str().unwrap().to_owned(),
            empty["digest"].as_str().unwrap().to_owned(),
        ]
        .into_iter()
        .collect();
        // a's config is the one other blob.
        assert_eq!(gone.len(), expected.len() + 1, "{gone:?}");
        assert!(gone.is_superset(&expected), "{gone:?}");
        assert!(!gone.contains(&Digest::sha256(b"shared").to_string()));
        assert_eq!(plan.referrers, vec![r_digest.clone()]);
        run(remove(&client, &at("a"), &mut plan, true, false)).unwrap();
        assert_eq!(plan.pruned.len(), gone.len());
        assert_eq!(
            tags_of(&layout),
            vec![Some("b".to_owned()), Some("c".to_owned())]
        );
        assert!(!layout.has_blob(&a.digest));
        assert!(layout.has_blob(&Digest::sha256(b"shared")));
        assert!(layout.has_blob(&b.digest));
        // A layout removal names a tag.
        assert!(run(plan_removal(&client, &whole)).is_err());
    }

    #[test]
    fn tag_names_that_are_not_images() {
        let hex = "a".repeat(64);
        assert_eq!(tag_name_kind(&format!("sha256-{hex}")), Some("referrers"));
        assert_eq!(
            tag_name_kind(&format!("sha256-{hex}.sig")),
            Some("signature")
        );
        assert_eq!(
            tag_name_kind(&format!("sha256-{hex}.att")),
            Some("attestation")
        );
        assert_eq!(tag_name_kind(&format!("sha256-{hex}.sbom")), Some("sbom"));
        assert_eq!(tag_name_kind(&format!("sha256-{hex}.txt")), None);
        assert_eq!(tag_name_kind("sha256-abc"), None);
        assert_eq!(tag_name_kind("1.0"), None);
        assert_eq!(tag_name_kind("v1.2.sig"), None);
    }
}
