//! Pushing a built image through the workspace's registry client: blobs (skipped when the
//! registry has them), the image manifest by digest, then the index (which names the
//! platform) under each tag.

use std::path::PathBuf;

use bytes::Bytes;
use registry::client::{ClientBuilder, Reference};
use validator::{Digest, ImageLayout, MediaType};

use crate::BuildError;

/// What to push: every blob, then the image manifest and its SBOM referrer by digest, then
/// the index under each tag.
pub(crate) struct Pushed<'a> {
    pub blobs: Vec<(Digest, u64)>,
    pub manifest: (&'a Digest, &'a [u8]),
    pub referrer: (&'a Digest, &'a [u8]),
    pub index: (&'a Digest, &'a [u8]),
}

pub(crate) fn push(
    client: ClientBuilder,
    layout: &ImageLayout,
    target: &str,
    tags: &[String],
    what: &Pushed<'_>,
) -> Result<Vec<String>, BuildError> {
    let reference = Reference::parse(target).map_err(|e| BuildError::Push {
        target: target.to_owned(),
        source: Box::new(e),
    })?;
    let push_err = |e: registry::client::ClientError| BuildError::Push {
        target: target.to_owned(),
        source: Box::new(e),
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|source| BuildError::Io {
            path: PathBuf::from("tokio runtime"),
            source,
        })?;
    rt.block_on(async {
        let client = client.build().map_err(push_err)?;
        for (digest, size) in &what.blobs {
            let (digest, size) = (digest, *size);
            let path = layout.blob_path(digest);
            let file = tokio::fs::File::open(&path)
                .await
                .map_err(|source| BuildError::Io { path, source })?;
            client
                .push_blob(
                    reference.registry(),
                    reference.name(),
                    digest,
                    size,
                    tokio::io::BufReader::with_capacity(1 << 20, file),
                )
                .await
                .map_err(push_err)?;
        }
        let by_digest = reference.with_digest(what.manifest.0.clone());
        client
            .push_manifest(
                &by_digest,
                MediaType::OciManifest.as_str(),
                Bytes::copy_from_slice(what.manifest.1),
            )
            .await
            .map_err(push_err)?;
        // The SBOM after its subject, so registries can index the referrer.
        client
            .push_manifest(
                &reference.with_digest(what.referrer.0.clone()),
                MediaType::OciManifest.as_str(),
                Bytes::copy_from_slice(what.referrer.1),
            )
            .await
            .map_err(push_err)?;
        let tags: Vec<String> = match reference.tag() {
            Some(t) => vec![t.to_string()],
            None => tags.to_vec(),
        };
        let mut pushed = vec![by_digest.to_string()];
        for t in tags {
            let r = Reference::parse(&format!(
                "{}/{}:{t}",
                reference.registry(),
                reference.name()
            ))
            .map_err(|e| BuildError::Push {
                target: target.to_owned(),
                source: Box::new(e),
            })?;
            let d = client
                .push_manifest(
                    &r,
                    MediaType::OciIndex.as_str(),
                    Bytes::copy_from_slice(what.index.1),
                )
                .await
                .map_err(push_err)?;
            debug_assert_eq!(&d, what.index.0);
            pushed.push(r.to_string());
        }
        Ok(pushed)
    })
}
