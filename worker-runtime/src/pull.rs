//! Pull: reference → manifest (picked from an index by platform) → config → layer blobs, all
//! into the content store, each verified by digest and size before anything parses it.
//!
//! Every request goes to the reference's [`Mirrors`] first, in order, then to the origin: a
//! source that fails (down, missing, wrong bytes) is logged and the next one tried, and the
//! origin's error is the one returned when every source failed. A mirror that was down or
//! served bytes that did not verify is not asked again during the same pull.

use futures_util::{StreamExt as _, TryStreamExt as _};
use registry_client::{Client, ClientError, Reference};
use validator::{
    Digest, Document, DocumentKind, MAX_CONFIG_SIZE, MediaType, Platform, check_config,
    check_document,
};

use crate::feed::LayerFeed;
use crate::mirrors::Sources;
use crate::store::{ContentStore, StoreError};
use crate::verify::PulledImage;

/// A pull failed; nothing was provisioned.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum PullError {
    /// The registry refused or failed.
    #[error("{reference}")]
    Registry {
        /// The reference or digest asked for.
        reference: String,
        /// The cause.
        #[source]
        source: ClientError,
    },
    /// The registry has no such tag, digest or repository.
    #[error("image {reference} not found: the registry has no such tag or repository")]
    NotFound {
        /// The reference asked for.
        reference: String,
        /// The registry's answer.
        #[source]
        source: ClientError,
    },
    /// A blob could not be stored.
    #[error("content store")]
    Store(#[from] StoreError),
    /// A manifest, index or config broke the OCI rules.
    #[error("{what} {digest} is invalid: {findings}")]
    Document {
        /// manifest, index or config.
        what: &'static str,
        /// Its digest.
        digest: Digest,
        /// The validator's findings.
        findings: String,
    },
    /// No manifest in the index is for this host.
    #[error("index {digest} has no manifest for {wanted}; it offers: {offered}")]
    NoPlatform {
        /// The index.
        digest: Digest,
        /// What the host needs.
        wanted: String,
        /// What the index has.
        offered: String,
    },
    /// The image config's platform is not this host's.
    #[error("config {digest} is for {found}, this host needs {wanted}")]
    ConfigPlatform {
        /// The config.
        digest: Digest,
        /// What the config says.
        found: String,
        /// What the host needs.
        wanted: String,
    },
    /// A descriptor's size disagrees with what the registry served.
    #[error("{what} {digest}: descriptor says {declared} bytes, registry served {served}")]
    Size {
        /// What.
        what: &'static str,
        /// The digest.
        digest: Digest,
        /// The descriptor's size.
        declared: u64,
        /// The served size.
        served: u64,
    },
    /// `pull_policy = "Never"` and the image is not on this node (kubelet's
    /// `ErrImageNeverPull`).
    #[error(
        "ErrImageNeverPull: {what} {digest} of {reference} is not in the content store and pull_policy is Never"
    )]
    NeverPull {
        /// The zone's image reference.
        reference: String,
        /// manifest, config or layer.
        what: &'static str,
        /// The missing digest.
        digest: Digest,
    },
    /// `pull_policy = "Never"` and the tag was never resolved on this node.
    #[error(
        "ErrImageNeverPull: {reference} names a tag this node never resolved, and pull_policy is Never"
    )]
    NeverResolved {
        /// The zone's image reference.
        reference: String,
    },
    /// A layer has a media type that cannot be applied, or a nested index.
    #[error("{digest}: unsupported {what} {media_type}")]
    Unsupported {
        /// layer or manifest.
        what: &'static str,
        /// The digest.
        digest: Digest,
        /// The media type.
        media_type: String,
    },
}

impl PullError {
    /// The blob the error is about, if any.
    pub fn blob(&self) -> Option<&Digest> {
        match self {
            PullError::Store(
                StoreError::Fetch { digest, .. }
                | StoreError::Verify { digest, .. }
                | StoreError::Download { digest, .. }
                | StoreError::TooLarge { digest, .. },
            )
            | PullError::Document { digest, .. }
            | PullError::NoPlatform { digest, .. }
            | PullError::ConfigPlatform { digest, .. }
            | PullError::Size { digest, .. }
            | PullError::NeverPull { digest, .. }
            | PullError::Unsupported { digest, .. } => Some(digest),
            _ => None,
        }
    }
}

/// The platform this worker runs images for: `illumos/amd64`, plus the host's OS version when
/// images name one.
#[derive(Debug, Clone)]
pub struct HostPlatform {
    /// illumos/amd64.
    pub platform: Platform,
    /// The host's build (compared with `os.version` when an image sets it).
    pub os_version: String,
}

impl HostPlatform {
    /// `illumos/amd64` with `os_version`, or `uname -v` when `None`.
    pub fn new(os_version: Option<String>) -> Self {
        let os_version = os_version.unwrap_or_else(|| {
            rustix::system::uname()
                .version()
                .to_string_lossy()
                .into_owned()
        });
        HostPlatform {
            platform: Platform::illumos_amd64(),
            os_version,
        }
    }

    /// True when an image for `p` runs here: same OS family and architecture, and the same
    /// `os.version` when the image names one (the illumos kernel–libc interface is private, so
    /// a userland built for another release may not run).
    pub fn accepts(&self, p: &Platform) -> bool {
        self.platform.matches(p) && p.os_version.as_ref().is_none_or(|v| v == &self.os_version)
    }
}

fn registry_err(reference: String) -> impl FnOnce(ClientError) -> PullError {
    move |source| match source.kind() {
        registry_client::ErrorKind::NotFound => PullError::NotFound { reference, source },
        _ => PullError::Registry { reference, source },
    }
}

fn findings(report: &validator::Report) -> String {
    report
        .errors()
        .map(ToString::to_string)
        .collect::<Vec<_>>()
        .join("; ")
}

/// Resolves a reference to the digest of what it names (an index or a manifest): at the
/// first mirror allowed to resolve tags that answers, else at the origin.
pub async fn resolve(
    client: &Client,
    sources: &Sources,
    reference: &Reference,
) -> Result<Digest, PullError> {
    if let Some(d) = reference.digest() {
        return Ok(d.clone());
    }
    let mut last = None;
    for (i, source) in sources.usable().filter(|(_, s)| s.resolves_tags) {
        match client.resolve(&source.reference).await {
            Ok(desc) => {
                if source.mirror {
                    tracing::debug!(%reference, mirror = %source.reference, digest = %desc.digest, "tag resolved at a mirror");
                }
                return Ok(desc.digest);
            }
            Err(e) => {
                if source.mirror {
                    tracing::warn!(%reference, mirror = %source.reference, error = %validator::error_chain(&e), "mirror could not resolve the tag; trying the next source");
                    if e.kind() == registry_client::ErrorKind::Transient {
                        sources.set_aside(i);
                    }
                }
                last = Some(registry_err(source.reference.to_string())(e));
            }
        }
    }
    Err(last.expect("the origin is always a source"))
}

/// Fetches the document `digest` names from the first source that serves it verified, and
/// checks it; stores it verified.
async fn document(
    client: &Client,
    store: &ContentStore,
    sources: &Sources,
    digest: &Digest,
    kind: Option<DocumentKind>,
    declared_size: Option<u64>,
) -> Result<Document, PullError> {
    if sources.local_only() {
        return local_document(store, sources, digest, kind);
    }
    let mut last = None;
    let mut fetched = None;
    for (i, source) in sources.usable() {
        let r = source.reference.with_digest(digest.clone());
        match client.get_manifest(&r).await {
            Ok(v) => {
                fetched = Some((r, v));
                break;
            }
            Err(e) => {
                if source.mirror {
                    tracing::warn!(manifest = %r, error = %validator::error_chain(&e), "mirror failed; trying the next source");
                    if matches!(
                        e.kind(),
                        registry_client::ErrorKind::Transient | registry_client::ErrorKind::Verify
                    ) {
                        sources.set_aside(i);
                    }
                }
                last = Some(registry_err(r.to_string())(e));
            }
        }
    }
    let Some((r, (desc, bytes))) = fetched else {
        return Err(last.expect("the origin is always a source"));
    };
    if let Some(size) = declared_size
        && size != bytes.len() as u64
    {
        return Err(PullError::Size {
            what: "manifest",
            digest: digest.clone(),
            declared: size,
            served: bytes.len() as u64,
        });
    }
    store.put_bytes(digest, &bytes)?;
    let declared = MediaType::parse(&desc.media_type).ok();
    let (report, doc) = check_document(&bytes, kind, declared.as_ref(), &r.to_string());
    doc.ok_or_else(|| PullError::Document {
        what: "manifest",
        digest: digest.clone(),
        findings: findings(&report),
    })
}

/// A document already in the content store (verified when it was stored), checked again.
fn local_document(
    store: &ContentStore,
    sources: &Sources,
    digest: &Digest,
    kind: Option<DocumentKind>,
) -> Result<Document, PullError> {
    let bytes = match store.read_small(digest, validator::MAX_MANIFEST_SIZE as u64) {
        Ok(b) => b,
        Err(StoreError::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound => {
            return Err(PullError::NeverPull {
                reference: sources.origin().to_string(),
                what: "manifest",
                digest: digest.clone(),
            });
        }
        Err(e) => return Err(e.into()),
    };
    let (report, doc) = check_document(&bytes, kind, None, &format!("stored {digest}"));
    doc.ok_or_else(|| PullError::Document {
        what: "manifest",
        digest: digest.clone(),
        findings: findings(&report),
    })
}

/// Fetches a blob into the store from the first source that serves it verified. A download
/// cut short keeps its partial file, which the next source continues; if that continuation
/// then fails verification (the cut source may have sent wrong bytes), the next source is
/// asked once more from the start.
async fn fetch_blob(
    client: &Client,
    store: &ContentStore,
    sources: &Sources,
    digest: &Digest,
    size: u64,
    progress: Option<&crate::throttle::PullProgress>,
    feed: Option<&LayerFeed>,
) -> Result<(), PullError> {
    if sources.local_only() {
        return if store.contains(digest, size) {
            Ok(())
        } else {
            Err(PullError::NeverPull {
                reference: sources.origin().to_string(),
                what: "blob",
                digest: digest.clone(),
            })
        };
    }
    let mut last = None;
    let mut partial_left = false;
    for (i, source) in sources.usable() {
        let (registry, name) = (source.reference.registry(), source.reference.name());
        let mut result = store
            .fetch_fed(client, registry, name, digest, size, progress, feed)
            .await;
        if partial_left && matches!(result, Err(StoreError::Verify { .. })) {
            result = store
                .fetch_fed(client, registry, name, digest, size, progress, feed)
                .await;
        }
        match result {
            Ok(_) => return Ok(()),
            Err(e) => {
                partial_left = matches!(e, StoreError::Download { .. });
                if source.mirror {
                    tracing::warn!(%digest, mirror = %source.reference, error = %validator::error_chain(&e), "mirror failed; trying the next source");
                    let not_found = matches!(&e, StoreError::Fetch { source, .. } if source.kind() == registry_client::ErrorKind::NotFound);
                    if !not_found {
                        sources.set_aside(i);
                    }
                }
                last = Some(e);
            }
        }
    }
    Err(last.expect("the origin is always a source").into())
}

/// Pulls the image `digest` (an index or a manifest) into the store: picks this host's
/// manifest from an index, then fetches and checks the config and fetches the layers,
/// `layer_downloads` at a time (at least one; a layer already in the store is not fetched).
pub async fn pull(
    client: &Client,
    store: &ContentStore,
    sources: &Sources,
    digest: &Digest,
    host: &HostPlatform,
    progress: Option<&crate::throttle::PullProgress>,
    layer_downloads: usize,
) -> Result<PulledImage, PullError> {
    let image = pull_documents(client, store, sources, digest, host, progress).await?;
    fetch_layers(
        client,
        store,
        sources,
        &image,
        progress,
        layer_downloads,
        None,
    )
    .await?;
    Ok(image)
}

/// The first part of [`pull()`]: the manifest (from an index by platform) and the checked
/// config, in the store; the layers are not fetched.
pub(crate) async fn pull_documents(
    client: &Client,
    store: &ContentStore,
    sources: &Sources,
    digest: &Digest,
    host: &HostPlatform,
    progress: Option<&crate::throttle::PullProgress>,
) -> Result<PulledImage, PullError> {
    let (manifest_digest, manifest) =
        match document(client, store, sources, digest, None, None).await? {
            Document::Manifest(m) => (digest.clone(), *m),
            Document::Index(index) => {
                let pick = index
                    .pick_platform(|p| host.accepts(p))
                    .map_err(|offered| PullError::NoPlatform {
                        digest: digest.clone(),
                        wanted: format!("{} (os.version {})", host.platform, host.os_version),
                        offered,
                    })?;
                if !pick.media_type.is_manifest() {
                    return Err(PullError::Unsupported {
                        what: "index entry",
                        digest: pick.digest.clone(),
                        media_type: pick.media_type.to_string(),
                    });
                }
                match document(
                    client,
                    store,
                    sources,
                    &pick.digest,
                    Some(DocumentKind::Manifest),
                    Some(pick.size),
                )
                .await?
                {
                    Document::Manifest(m) => (pick.digest.clone(), *m),
                    _ => unreachable!("checked as a manifest"),
                }
            }
            Document::Config(_) => {
                return Err(PullError::Unsupported {
                    what: "manifest",
                    digest: digest.clone(),
                    media_type: "image config".into(),
                });
            }
        };
    for layer in &manifest.layers {
        if layer.media_type.layer_compression().is_none() {
            return Err(PullError::Unsupported {
                what: "layer",
                digest: layer.digest.clone(),
                media_type: layer.media_type.to_string(),
            });
        }
    }
    let cfg = manifest.config.clone();
    if let Some(p) = progress {
        let total = manifest
            .layers
            .iter()
            .fold(cfg.size, |t, l| t.saturating_add(l.size));
        p.set_total(total);
    }
    fetch_blob(
        client,
        store,
        sources,
        &cfg.digest,
        cfg.size,
        progress,
        None,
    )
    .await?;
    let bytes = store.read_small(&cfg.digest, MAX_CONFIG_SIZE as u64)?;
    let (report, config) = check_config(
        &bytes,
        Some(manifest.layers.len()),
        &format!("config {}", cfg.digest),
    );
    let config = config.ok_or_else(|| PullError::Document {
        what: "config",
        digest: cfg.digest.clone(),
        findings: findings(&report),
    })?;
    if !host.accepts(&config.platform) {
        return Err(PullError::ConfigPlatform {
            digest: cfg.digest.clone(),
            found: config.platform.to_string(),
            wanted: format!("{} (os.version {})", host.platform, host.os_version),
        });
    }
    Ok(PulledImage {
        manifest_digest,
        manifest,
        config_digest: cfg.digest,
        config,
    })
}

/// The second part of [`pull()`]: fetches the image's layers into the store,
/// `layer_downloads` at a time (at least one), started in manifest order; a layer already in
/// the store is not fetched. `feeds` (one per layer) are told where each layer's bytes land,
/// for an unpack that runs meanwhile.
pub(crate) async fn fetch_layers(
    client: &Client,
    store: &ContentStore,
    sources: &Sources,
    image: &PulledImage,
    progress: Option<&crate::throttle::PullProgress>,
    layer_downloads: usize,
    feeds: Option<&[std::sync::Arc<LayerFeed>]>,
) -> Result<(), PullError> {
    // Layers never come from descriptor `urls` (CVE-2020-15157): only from the registry.
    // `layer_downloads` of them at once. Results are taken in manifest order, so a failed
    // pull names the first failing layer whatever finished first; the failure ends the pull
    // (downloads still running are dropped, their partial files kept for a resume).
    let fetches: Vec<_> = image
        .manifest
        .layers
        .iter()
        .enumerate()
        .map(|(i, layer)| {
            let feed = feeds.and_then(|f| f.get(i)).map(|f| &**f);
            fetch_blob(
                client,
                store,
                sources,
                &layer.digest,
                layer.size,
                progress,
                feed,
            )
        })
        .collect();
    futures_util::stream::iter(fetches)
        .buffered(layer_downloads.max(1))
        .try_for_each(|()| std::future::ready(Ok(())))
        .await
}
