//! Raw access, as crane and regctl users expect it (`rdctl manifest get`, `blob get`,
//! `config`, `digest`, `artifact put|get`, `sbom --document`), over registries and OCI layouts
//! alike ([`ImageRef`]).
//!
//! Everything read is verified: manifests against their digest (and, when picked out of an
//! index, the index's descriptor), blobs while they stream ([`open_blob`] returns a reader that
//! fails at EOF when the bytes do not match). Artifacts follow the shape oras writes and reads:
//! an image manifest with `artifactType`, the empty config `{}`
//! (`application/vnd.oci.empty.v1+json`), one layer per file named by its
//! `org.opencontainers.image.title` annotation, and an optional `subject`.

use std::path::PathBuf;
use std::pin::Pin;

use bytes::Bytes;
use tokio::io::AsyncRead;
use validator::{Digest, Document, Platform};

use crate::image::endpoint::Source;
use crate::image::{Content, ImageRef, TransferError, checked, content_of};
use crate::inspect::{read_blob, read_doc};
use crate::{Client, Reference};

/// Largest image config [`config`] reads.
pub const MAX_CONFIG_BYTES: u64 = 8 << 20;

/// The media type of the empty config and descriptor (`{}`).
pub const EMPTY_MEDIA_TYPE: &str = "application/vnd.oci.empty.v1+json";

/// The layer media type oras gives a file when none is named.
pub const DEFAULT_FILE_MEDIA_TYPE: &str = "application/vnd.oci.image.layer.v1.tar";

/// The annotation naming a layer's file (oras, the OCI image spec).
pub const TITLE_ANNOTATION: &str = "org.opencontainers.image.title";

const OCI_MANIFEST: &str = "application/vnd.oci.image.manifest.v1+json";

/// The manifest or index `r` names, byte for byte; with `platform`, an index is descended to
/// the manifest for that platform.
pub async fn manifest(
    client: &Client,
    r: &ImageRef,
    platform: Option<&Platform>,
) -> Result<(Content, Bytes), TransferError> {
    let source = Source::open(client, r)?;
    let (mut root, mut bytes) = source.root(r).await?;
    let mut doc = checked(&root, &bytes)?;
    if let Some(want) = platform {
        while let Document::Index(index) = &doc {
            let pick = index
                .pick_platform(|p| want.matches(p))
                .map_err(|offered| TransferError::NoPlatform {
                    digest: root.digest.clone(),
                    platform: want.to_string(),
                    offered,
                })?;
            root = content_of(pick);
            bytes = source.document(&root).await?;
            doc = checked(&root, &bytes)?;
        }
    }
    Ok((root, bytes))
}

/// The image config of the image `r` names: of its manifest, or of the manifest an index
/// lists for `platform` (without `platform`, an index must list exactly one manifest).
pub async fn config(
    client: &Client,
    r: &ImageRef,
    platform: Option<&Platform>,
) -> Result<(Content, Vec<u8>), TransferError> {
    let source = Source::open(client, r)?;
    let (root, bytes) = manifest(client, r, platform).await?;
    let mut c = root.clone();
    let mut doc = checked(&root, &bytes)?;
    loop {
        match doc {
            Document::Manifest(m) => {
                let config = content_of(&m.config);
                let bytes = read_blob(&source, &config, MAX_CONFIG_BYTES).await?;
                return Ok((config, bytes));
            }
            Document::Index(index) => {
                if index.manifests.len() != 1 {
                    let offered: Vec<String> = index
                        .manifests
                        .iter()
                        .map(|d| {
                            d.platform
                                .as_ref()
                                .map_or_else(|| d.digest.to_string(), ToString::to_string)
                        })
                        .collect();
                    return Err(TransferError::PlatformNeeded {
                        index: c.digest.clone(),
                        count: index.manifests.len(),
                        offered: offered.join(", "),
                    });
                }
                c = content_of(&index.manifests[0]);
                doc = read_doc(&source, &c).await?;
            }
            Document::Config(_) => unreachable!("checked returns manifests and indexes only"),
        }
    }
}

/// A verified blob stream: reading it to EOF without an error means size and digest matched.
pub type VerifiedBlob = Pin<Box<dyn AsyncRead + Send>>;

/// Opens the blob `r` names by digest (`HOST/REPO@DIGEST` or `oci:DIR@DIGEST`) for reading,
/// verified while it streams. The size comes from the registry's HEAD answer or the layout's
/// file; the digest check at EOF covers it.
pub async fn open_blob(
    client: &Client,
    r: &ImageRef,
) -> Result<(Content, VerifiedBlob), TransferError> {
    let Some(digest) = r.digest().cloned() else {
        return Err(TransferError::BadReference {
            input: r.to_string(),
            reason: "a blob is named by digest: REPO@sha256:<hex> or oci:DIR@sha256:<hex>"
                .to_owned(),
        });
    };
    match r {
        ImageRef::Registry(reference) => {
            let err = |source| TransferError::Registry {
                reference: reference.to_string(),
                source,
            };
            let size = client
                .blob_exists(reference.registry(), reference.name(), &digest)
                .await
                .map_err(err)?
                .ok_or_else(|| TransferError::NotFound {
                    what: format!(
                        "blob {digest} in {}/{}",
                        reference.registry(),
                        reference.name()
                    ),
                })?;
            let body = client
                .get_blob(reference.registry(), reference.name(), &digest, size)
                .await
                .map_err(err)?;
            Ok((blob_content(digest, size), Box::pin(body)))
        }
        ImageRef::Layout(l) => {
            let layout =
                validator::ImageLayout::open(&l.dir).map_err(|source| TransferError::Layout {
                    dir: l.dir.clone(),
                    source,
                })?;
            let path = layout.blob_path(&digest);
            let size = std::fs::metadata(&path)
                .map_err(|_| TransferError::NotFound {
                    what: format!("blob {digest} in layout {}", l.dir.display()),
                })?
                .len();
            let file = layout
                .open_blob(&digest, size)
                .map_err(Source::layout_err(&layout))?;
            Ok((
                blob_content(digest, size),
                Box::pin(crate::transfer::stream::blocking_reader(file)),
            ))
        }
    }
}

fn blob_content(digest: Digest, size: u64) -> Content {
    Content {
        digest,
        size,
        media_type: "application/octet-stream".to_owned(),
    }
}

/// The SPDX document of the image's SBOM referrer, byte for byte (what `rdctl sbom --document`
/// prints), with what [`crate::inspect::sbom`] found.
pub async fn sbom_document(
    client: &Client,
    r: &ImageRef,
) -> Result<(crate::inspect::Sbom, Vec<u8>), TransferError> {
    crate::inspect::sbom_with_document(client, r).await
}

/// One file of an artifact.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactFile {
    /// Where to read it.
    pub path: PathBuf,
    /// Its name in the artifact (`org.opencontainers.image.title`): the file name, no path.
    pub title: String,
    /// Its layer media type.
    pub media_type: String,
}

/// Pushes an oras-style artifact to the registry reference `dst` (tag or none: then by digest):
/// each file as a blob, the empty config, and the manifest with `artifact_type` and, when
/// given, `subject` (which must be in the same repository). Returns the manifest.
pub async fn put_artifact(
    client: &Client,
    dst: &Reference,
    artifact_type: &str,
    subject: Option<&Reference>,
    files: &[ArtifactFile],
) -> Result<Content, TransferError> {
    let bad = |reason: String| TransferError::BadReference {
        input: dst.to_string(),
        reason,
    };
    if artifact_type.is_empty() {
        return Err(bad("--artifact-type is empty".to_owned()));
    }
    let reg_err = |r: &Reference| {
        let reference = r.to_string();
        move |source| TransferError::Registry { reference, source }
    };
    let subject_desc = match subject {
        Some(s) => {
            if s.registry() != dst.registry() || s.name() != dst.name() {
                return Err(bad(format!(
                    "the subject {s} is not in {}/{}: a referrer lives in its subject's repository",
                    dst.registry(),
                    dst.name()
                )));
            }
            let d = client.resolve(s).await.map_err(reg_err(s))?;
            Some(serde_json::json!({
                "mediaType": d.media_type,
                "digest": d.digest.to_string(),
                "size": d.size,
            }))
        }
        None => None,
    };
    let mut layers = Vec::new();
    for f in files {
        let (digest, size) = digest_file(&f.path).await?;
        let file = tokio::fs::File::open(&f.path)
            .await
            .map_err(|e| file_err(&f.path, e))?;
        client
            .push_blob(dst.registry(), dst.name(), &digest, size, file)
            .await
            .map_err(|source| TransferError::Blob {
                digest: digest.clone(),
                size,
                source: Box::new(source),
            })?;
        layers.push(serde_json::json!({
            "mediaType": f.media_type,
            "digest": digest.to_string(),
            "size": size,
            "annotations": { TITLE_ANNOTATION: f.title },
        }));
    }
    let empty = Digest::sha256(b"{}");
    client
        .push_blob(dst.registry(), dst.name(), &empty, 2, &b"{}"[..])
        .await
        .map_err(reg_err(dst))?;
    let mut doc = serde_json::json!({
        "schemaVersion": 2,
        "mediaType": OCI_MANIFEST,
        "artifactType": artifact_type,
        "config": { "mediaType": EMPTY_MEDIA_TYPE, "digest": empty.to_string(), "size": 2 },
        "layers": layers,
    });
    if let Some(s) = subject_desc {
        doc["subject"] = s;
    }
    let bytes = Bytes::from(serde_json::to_vec(&doc).expect("JSON values serialize"));
    let content = Content {
        digest: Digest::sha256(&bytes),
        size: bytes.len() as u64,
        media_type: OCI_MANIFEST.to_owned(),
    };
    checked(&content, &bytes)?;
    let target = if dst.tag().is_some() || dst.digest().is_some() {
        dst.clone()
    } else {
        dst.with_digest(content.digest.clone())
    };
    if subject.is_some() {
        client
            .push_referrer(&target, OCI_MANIFEST, bytes)
            .await
            .map_err(reg_err(&target))?;
    } else {
        client
            .push_manifest(&target, OCI_MANIFEST, bytes)
            .await
            .map_err(reg_err(&target))?;
    }
    Ok(content)
}

fn file_err(path: &std::path::Path, e: std::io::Error) -> TransferError {
    TransferError::BrokenSource {
        what: format!("cannot read {}: {e}", path.display()),
    }
}

async fn digest_file(path: &std::path::Path) -> Result<(Digest, u64), TransferError> {
    let p = path.to_owned();
    tokio::task::spawn_blocking(move || -> std::io::Result<(Digest, u64)> {
        use std::io::Read as _;
        let mut f = std::fs::File::open(&p)?;
        let mut d = validator::Digester::new(validator::Algorithm::Sha256);
        let mut buf = vec![0u8; 64 << 10];
        let mut n = 0u64;
        loop {
            let k = f.read(&mut buf)?;
            if k == 0 {
                break;
            }
            d.update(&buf[..k]);
            n += k as u64;
        }
        Ok((d.finish(), n))
    })
    .await
    .map_err(|e| file_err(path, std::io::Error::other(e)))?
    .map_err(|e| file_err(path, e))
}

/// A file of an artifact as its manifest lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArtifactLayer {
    /// The layer.
    pub content: Content,
    /// Its `org.opencontainers.image.title`, if any, as the manifest says it (a file name, or
    /// a relative path such as `sub/inner.txt`, which `oras push` writes; see [`title_path`]).
    pub title: Option<String>,
}

/// The artifact `r` names: its manifest (with `artifactType`, or the config's media type as
/// the OCI image spec says for older artifacts) and its layers.
pub async fn artifact(
    client: &Client,
    r: &ImageRef,
) -> Result<(Content, Option<String>, Vec<ArtifactLayer>), TransferError> {
    let (root, bytes) = manifest(client, r, None).await?;
    let Document::Manifest(m) = checked(&root, &bytes)? else {
        return Err(TransferError::InvalidDocument {
            digest: root.digest.clone(),
            media_type: root.media_type.clone(),
            problems: "an artifact is an image manifest, this is an index".to_owned(),
        });
    };
    let artifact_type = m
        .artifact_type
        .as_ref()
        .map(|t| t.as_str().to_owned())
        .or_else(|| Some(m.config.media_type.as_str().to_owned()));
    let layers = m
        .layers
        .iter()
        .map(|l| ArtifactLayer {
            content: content_of(l),
            title: l.annotations.get(TITLE_ANNOTATION).cloned(),
        })
        .collect();
    Ok((root, artifact_type, layers))
}

/// A title that names a file in the output directory and nothing else.
pub fn safe_title(t: &str) -> bool {
    !t.is_empty() && t != "." && t != ".." && !t.contains('/') && !t.contains('\0')
}

/// Where a layer titled `title` goes, relative to the output directory, as `oras pull`
/// restores it: the title's path (`sub/inner.txt`). `None` for a title that would leave the
/// output directory or name no file (absolute, a `..` component, empty, a trailing `/`, NUL):
/// a registry's annotation is not trusted to choose where files land.
pub fn title_path(title: &str) -> Option<std::path::PathBuf> {
    use std::path::Component;
    if title.is_empty() || title.contains('\0') || title.ends_with('/') {
        return None;
    }
    let path = std::path::Path::new(title);
    let mut out = std::path::PathBuf::new();
    for c in path.components() {
        match c {
            Component::Normal(n) => out.push(n),
            // `./x` and `a/./b` stay inside, as they would for oras.
            Component::CurDir => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

/// Opens one layer of an artifact (see [`artifact`]), verified while it streams.
pub async fn open_layer(
    client: &Client,
    r: &ImageRef,
    layer: &Content,
) -> Result<VerifiedBlob, TransferError> {
    let by_digest = match r {
        ImageRef::Registry(reference) => {
            ImageRef::Registry(reference.with_digest(layer.digest.clone()))
        }
        ImageRef::Layout(l) => ImageRef::Layout(crate::transfer::LayoutRef {
            dir: l.dir.clone(),
            tag: None,
            digest: Some(layer.digest.clone()),
        }),
    };
    let (found, body) = open_blob(client, &by_digest).await?;
    if found.size != layer.size {
        return Err(TransferError::BrokenSource {
            what: format!(
                "blob {} is {} bytes, the manifest says {}",
                layer.digest, found.size, layer.size
            ),
        });
    }
    Ok(body)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn titles_name_one_file() {
        for ok in ["a.txt", "sbom.spdx.json", ".hidden"] {
            assert!(safe_title(ok), "{ok}");
        }
        for bad in ["", ".", "..", "a/b", "/etc/passwd", "../x", "a\0b"] {
            assert!(!safe_title(bad), "{bad:?}");
        }
        for (title, path) in [
            ("a.txt", "a.txt"),
            ("sub/inner.txt", "sub/inner.txt"),
            ("./a/./b", "a/b"),
        ] {
            assert_eq!(
                title_path(title),
                Some(std::path::PathBuf::from(path)),
                "{title}"
            );
        }
        for bad in [
            "",
            "..",
            "../x",
            "/etc/passwd",
            "sub/../../x",
            ".",
            "a\0b",
            "dir/",
        ] {
            assert_eq!(title_path(bad), None, "{bad:?}");
        }
        assert_eq!(
            Digest::sha256(b"{}").to_string(),
            "sha256:44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a"
        );
    }
}
