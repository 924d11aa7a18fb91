//! The two ends of a copy: a layout or registry source and destination, and index.json entries.

use bytes::Bytes;
use validator::{
    Digest, Document, ImageLayout, IndexEntry, LayoutError, MAX_MANIFEST_SIZE, NewLayout, Replaces,
    Tag, VerifyError, check_document,
};

use super::cosign::{
    KIND_ANNOTATION, KIND_ATTS, KIND_IMAGE, KIND_SIGS, is_cosign_entry, tag_name_kind,
};
use super::{Content, ImageRef, TransferError, content_of};
use crate::{Client, ClientError, ErrorKind as ClientErrorKind, Reference, Referrer};

pub(crate) enum Source<'a> {
    Layout(ImageLayout),
    Registry(&'a Client, Reference),
}

impl<'a> Source<'a> {
    pub(crate) fn open(client: &'a Client, r: &ImageRef) -> Result<Self, TransferError> {
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

    pub(crate) fn layout_err(
        layout: &ImageLayout,
    ) -> impl FnOnce(LayoutError) -> TransferError + '_ {
        move |source| TransferError::Layout {
            dir: layout.root().to_owned(),
            source,
        }
    }

    /// The root descriptor and its verified bytes.
    pub(crate) async fn root(&self, r: &ImageRef) -> Result<(Content, Bytes), TransferError> {
        match self {
            Source::Layout(layout) => {
                let tag = r.tag();
                let index = layout_index(layout)?;
                if let Some(digest) = r.digest() {
                    let c = self.layout_by_digest(layout, &index, digest).await?;
                    let bytes = self.document(&c).await?;
                    return Ok((c, bytes));
                }
                let entry = match tag {
                    Some(t) => index
                        .manifests
                        .iter()
                        .rev()
                        .find(|d| d.ref_name() == Some(t.as_str()))
                        .ok_or_else(|| TransferError::NotFound {
                            what: format!("tag {t} in layout {}", layout.root().display()),
                        })?,
                    // Referrers (the builder's SBOM, what a copy wrote) are not images to
                    // choose between.
                    // Nor are cosign's signature and attestation manifests, and cosign's
                    // untagged entry of the image is the same image.
                    None => match index
                        .manifests
                        .iter()
                        .filter(|d| !is_cosign_entry(d))
                        .filter(|d| layout_subject(layout, &content_of(d)).is_none())
                        .fold(Vec::<&validator::Descriptor>::new(), |mut v, d| {
                            if !v.iter().any(|e| e.digest == d.digest) {
                                v.push(d);
                            }
                            v
                        })
                        .as_slice()
                    {
                        [one] => *one,
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

    /// A manifest or index named by digest in a layout: an `index.json` entry, or a manifest
    /// one of the indexes there lists (a platform's manifest).
    async fn layout_by_digest(
        &self,
        layout: &ImageLayout,
        index: &validator::Index,
        digest: &Digest,
    ) -> Result<Content, TransferError> {
        if let Some(d) = index.manifests.iter().find(|d| &d.digest == digest) {
            return Ok(content_of(d));
        }
        for d in &index.manifests {
            let c = content_of(d);
            let bytes = self.document(&c).await?;
            if let Ok(Document::Index(i)) = super::checked(&c, &bytes)
                && let Some(m) = i.manifests.iter().find(|m| &m.digest == digest)
            {
                return Ok(content_of(m));
            }
        }
        Err(TransferError::NotFound {
            what: format!(
                "manifest {digest} in layout {} (neither an index.json entry nor listed by one)",
                layout.root().display()
            ),
        })
    }

    /// The manifest or index at `tag` (a registry tag, a layout `ref.name`), if there is one.
    pub(crate) async fn tagged(
        &self,
        tag: &str,
    ) -> Result<Option<(Content, Bytes)>, TransferError> {
        let t = Tag::parse(tag).map_err(|e| TransferError::BadReference {
            input: tag.to_owned(),
            reason: e.to_string(),
        })?;
        match self {
            Source::Layout(layout) => {
                let index = layout_index(layout)?;
                let Some(entry) = index
                    .manifests
                    .iter()
                    .rev()
                    .find(|d| d.ref_name() == Some(tag))
                else {
                    return Ok(None);
                };
                let c = content_of(entry);
                let bytes = self.document(&c).await?;
                Ok(Some((c, bytes)))
            }
            Source::Registry(client, reference) => {
                let tagged = reference.with_tag(t);
                match client.get_manifest(&tagged).await {
                    Ok((d, bytes)) => Ok(Some((
                        Content {
                            digest: d.digest,
                            size: d.size,
                            media_type: d.media_type,
                        },
                        bytes,
                    ))),
                    Err(e) if e.kind() == ClientErrorKind::NotFound => Ok(None),
                    Err(source) => Err(TransferError::Registry {
                        reference: tagged.to_string(),
                        source,
                    }),
                }
            }
        }
    }

    /// A manifest or index by descriptor, verified against digest and size.
    pub(crate) async fn document(&self, c: &Content) -> Result<Bytes, TransferError> {
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

/// The `subject` of the manifest or index a layout entry names, if it can be read and has one.
pub(crate) fn layout_subject(layout: &ImageLayout, c: &Content) -> Option<(Referrer, Digest)> {
    let bytes = layout
        .read_document(&c.digest, c.size, MAX_MANIFEST_SIZE as u64)
        .map_err(|e| tracing::debug!(digest = %c.digest, error = %validator::error_chain(&e), "unreadable index.json entry"))
        .ok()?;
    let (mut referrer, subject) = Referrer::describe(&c.media_type, &bytes)?;
    referrer.digest = c.digest.clone();
    Some((referrer, subject))
}

pub(crate) enum Dest {
    Layout(ImageLayout),
    Registry(Reference),
}

impl Dest {
    /// Opens the destination. A layout directory that holds no layout yet is written in a
    /// hidden sibling, returned here to be committed when the copy has succeeded; a failed
    /// copy leaves it for the rerun to resume from, and nothing at the path itself.
    pub(crate) fn open(r: &ImageRef) -> Result<(Self, Option<NewLayout>), TransferError> {
        Ok(match r {
            ImageRef::Layout(l) => {
                let new = ImageLayout::create_staged(&l.dir, true).map_err(|source| {
                    TransferError::Layout {
                        dir: l.dir.clone(),
                        source,
                    }
                })?;
                (Dest::Layout(new.layout().clone()), Some(new))
            }
            ImageRef::Registry(r) => (Dest::Registry(r.clone()), None),
        })
    }

    pub(crate) async fn has_blob(
        &self,
        client: &Client,
        c: &Content,
    ) -> Result<bool, TransferError> {
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

    /// The destination spelled once, as a [`super::flight::BlobKey`] needs it: `HOST/NAME`
    /// for a registry repository, `oci:DIR` for a layout.
    pub(crate) fn identity(&self) -> String {
        match self {
            Dest::Layout(layout) => format!("oci:{}", layout.root().display()),
            Dest::Registry(r) => format!("{}/{}", r.registry(), r.name()),
        }
    }

    /// Whether a registry destination already holds this manifest or index by digest (a
    /// HEAD). A layout answers false: writing into it again is local and idempotent.
    pub(crate) async fn has_manifest(
        &self,
        client: &Client,
        c: &Content,
    ) -> Result<bool, TransferError> {
        let Dest::Registry(r) = self else {
            return Ok(false);
        };
        let target = r.with_digest(c.digest.clone());
        match client.resolve(&target).await {
            Ok(d) => Ok(d.digest == c.digest),
            Err(e) if e.kind() == ClientErrorKind::NotFound => Ok(false),
            Err(source) => Err(TransferError::Registry {
                reference: target.to_string(),
                source,
            }),
        }
    }

    /// Whether a registry destination's `tag` already names `digest` (a HEAD of the tag). A
    /// layout answers false.
    pub(crate) async fn tag_names(
        &self,
        client: &Client,
        tag: &Tag,
        digest: &Digest,
    ) -> Result<bool, TransferError> {
        let Dest::Registry(r) = self else {
            return Ok(false);
        };
        let target = r.with_tag(tag.clone());
        match client.resolve(&target).await {
            Ok(d) => Ok(&d.digest == digest),
            Err(e) if e.kind() == ClientErrorKind::NotFound => Ok(false),
            Err(source) => Err(TransferError::Registry {
                reference: target.to_string(),
                source,
            }),
        }
    }

    /// The digests a registry destination lists as referrers of `subject` (its referrers API
    /// or tag schema index); empty for a layout.
    pub(crate) async fn referrers_listed(
        &self,
        client: &Client,
        subject: &Digest,
    ) -> Result<std::collections::HashSet<Digest>, TransferError> {
        let Dest::Registry(r) = self else {
            return Ok(Default::default());
        };
        match client.referrers(r, subject).await {
            Ok(found) => Ok(found.manifests.into_iter().map(|m| m.digest).collect()),
            Err(e) if e.kind() == ClientErrorKind::NotFound => Ok(Default::default()),
            Err(source) => Err(TransferError::Registry {
                reference: format!("{r} (referrers of {subject})"),
                source,
            }),
        }
    }

    /// Writes a manifest byte-exact: by digest, or under `tag` when given.
    pub(crate) async fn put_manifest(
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
                    update_index(layout, c, Some(t), None)?;
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

    /// Writes one of cosign's manifests byte-exact under its tag (`sha256-<hex>.sig`, `.att`,
    /// `.sbom`): a registry tag, or in a layout a tagged `index.json` entry with cosign's
    /// `kind` annotation (and cosign's untagged entry of `image`), as `cosign save` writes.
    pub(crate) async fn put_cosign_tag(
        &self,
        client: &Client,
        c: &Content,
        bytes: &Bytes,
        tag: &Tag,
        image: &Content,
    ) -> Result<(), TransferError> {
        match self {
            Dest::Layout(layout) => {
                self.put_manifest(client, c, bytes, None).await?;
                let kind = match tag_name_kind(tag.as_str()) {
                    Some("signature") => KIND_SIGS,
                    Some("attestation") => KIND_ATTS,
                    _ => return update_index(layout, c, Some(tag), None),
                };
                write_cosign_entries(layout, tag, kind, c, Some(image))
            }
            Dest::Registry(_) => self.put_manifest(client, c, bytes, Some(tag)).await,
        }
    }

    /// Writes a referrer manifest byte-exact by digest so it can be found again from its
    /// subject: at a registry through [`Client::push_referrer`] (the API, or the tag schema the
    /// client keeps), in a layout as an untagged `index.json` entry with its `artifactType`.
    pub(crate) async fn put_referrer(
        &self,
        client: &Client,
        c: &Content,
        bytes: &Bytes,
        artifact_type: Option<&str>,
    ) -> Result<(), TransferError> {
        match self {
            Dest::Layout(layout) => {
                self.put_manifest(client, c, bytes, None).await?;
                update_index(layout, c, None, artifact_type)
            }
            Dest::Registry(r) => {
                let target = r.with_digest(c.digest.clone());
                let how = client
                    .push_referrer(&target, &c.media_type, bytes.clone())
                    .await
                    .map_err(|source| TransferError::Registry {
                        reference: target.to_string(),
                        source,
                    })?;
                tracing::debug!(reference = %target, ?how, "referrer pushed");
                Ok(())
            }
        }
    }
}

/// A layout's `index.json`, read and checked by the index rules.
pub(crate) fn layout_index(layout: &ImageLayout) -> Result<validator::Index, TransferError> {
    let index_path = layout.root().join("index.json");
    let bytes = layout
        .read_index_bytes()
        .map_err(Source::layout_err(layout))?;
    let (report, doc) = check_document(
        &bytes,
        Some(validator::DocumentKind::Index),
        None,
        &index_path.display().to_string(),
    );
    match doc {
        Some(Document::Index(index)) => Ok(*index),
        _ => {
            let errors: Vec<String> = report.errors().take(5).map(ToString::to_string).collect();
            Err(TransferError::Index {
                path: index_path,
                reason: errors.join("; "),
            })
        }
    }
}

/// Names `c` in the layout's `index.json`: under `tag` (replacing that tag's entry), or as an
/// untagged entry (replacing an untagged one of the same digest), through the layout's one
/// index writer.
pub(crate) fn update_index(
    layout: &ImageLayout,
    c: &Content,
    tag: Option<&Tag>,
    artifact_type: Option<&str>,
) -> Result<(), TransferError> {
    let mut entry = IndexEntry::new(c.media_type.clone(), c.digest.clone(), c.size);
    entry.artifact_type = artifact_type.map(str::to_owned);
    match tag {
        Some(t) => layout.set_tag(t, entry),
        None => layout.add_untagged(entry, Replaces::SameDigest),
    }
    .map_err(Source::layout_err(layout))
}

/// Names a cosign manifest in a layout's `index.json` as `cosign save` does: tagged `tag` with
/// `kind` (`dev.cosignproject.cosign/sigs` or `/atts`), and, when the image is given, an
/// untagged entry of the image with `kind: dev.cosignproject.cosign/image` (what `cosign
/// verify --local-image` takes as the image).
pub(crate) fn write_cosign_entries(
    layout: &ImageLayout,
    tag: &Tag,
    kind: &str,
    manifest: &Content,
    image: Option<&Content>,
) -> Result<(), TransferError> {
    let mut entry = IndexEntry::new(
        manifest.media_type.clone(),
        manifest.digest.clone(),
        manifest.size,
    );
    entry
        .annotations
        .insert(KIND_ANNOTATION.to_owned(), kind.to_owned());
    layout
        .edit_index(|e| {
            e.set_tag(tag, entry);
            if let Some(image) = image {
                let mut img =
                    IndexEntry::new(image.media_type.clone(), image.digest.clone(), image.size);
                img.annotations
                    .insert(KIND_ANNOTATION.to_owned(), KIND_IMAGE.to_owned());
                // One image entry for cosign: the previous one (of any image) goes.
                e.retain(|v| {
                    v.get("annotations")
                        .and_then(|a| a.get(KIND_ANNOTATION))
                        .and_then(serde_json::Value::as_str)
                        != Some(KIND_IMAGE)
                        || v.get("annotations")
                            .and_then(|a| a.get(validator::REF_NAME_ANNOTATION))
                            .is_some()
                });
                e.add_untagged(img, Replaces::SameDigest);
            }
        })
        .map_err(Source::layout_err(layout))
}

#[cfg(test)]
mod tests {
    use super::*;
    use validator::REF_NAME_ANNOTATION;

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
        update_index(&layout, &c(b"a"), Some(&v1), None).unwrap();
        update_index(&layout, &c(b"b"), Some(&Tag::parse("v2").unwrap()), None).unwrap();
        update_index(&layout, &c(b"c"), Some(&v1), None).unwrap();
        update_index(&layout, &c(b"d"), None, None).unwrap();
        update_index(&layout, &c(b"d"), None, None).unwrap();
        let index: serde_json::Value =
            serde_json::from_slice(&layout.read_index_bytes().unwrap()).unwrap();
        let entries: Vec<(String, Option<String>)> = index["manifests"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| {
                (
                    e["digest"].as_str().unwrap().to_owned(),
                    e["annotations"][REF_NAME_ANNOTATION]
                        .as_str()
                        .map(str::to_owned),
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
