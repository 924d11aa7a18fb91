//! Pushing a built image through the workspace's registry client: blobs (skipped when the
//! registry has them), the image manifest by digest, then the index (which names the
//! platform) under each tag.

use std::path::PathBuf;

use bytes::Bytes;
use registry::client::{Client, Reference};
use validator::{Digest, ImageLayout, MediaType};

use crate::BuildError;
use crate::build::BuiltLayer;

#[allow(clippy::too_many_arguments)]
pub(crate) fn push(
    layout: &ImageLayout,
    target: &str,
    tags: &[String],
    config: &Digest,
    config_size: u64,
    layers: &[BuiltLayer],
    manifest: (&Digest, &[u8]),
    index: (&Digest, &[u8]),
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
        let client = Client::builder().build().map_err(push_err)?;
        let mut blobs: Vec<(&Digest, u64)> = vec![(config, config_size)];
        blobs.extend(layers.iter().map(|l| (&l.digest, l.size)));
        for (digest, size) in blobs {
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
        let by_digest = reference.with_digest(manifest.0.clone());
        client
            .push_manifest(
                &by_digest,
                MediaType::OciManifest.as_str(),
                Bytes::copy_from_slice(manifest.1),
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
                    Bytes::copy_from_slice(index.1),
                )
                .await
                .map_err(push_err)?;
            debug_assert_eq!(&d, index.0);
            pushed.push(r.to_string());
        }
        Ok(pushed)
    })
}
