//! Seeing inside an image, at a registry or in an OCI layout alike: what `rdctl inspect` and
//! `rdctl sbom` print.
//!
//! [`inspect`] reads the root manifest or index named by an [`ImageRef`], its config (the run
//! settings, the stop timeout label the builder writes), its layers with the package each one
//! came from (the builder's config `history`: `created_by` is `rdctl build: <contents>`, where
//! contents is one FMRI, `shared: FMRI FMRI…`, `generated` or `image`), and its referrers (the
//! referrers API or tag schema at a registry, `index.json` entries with that `subject` in a
//! layout, and cosign's `sha256-<hex>.sig|.att|.sbom` tags). [`sbom`] reads the IPS packages
//! out of the image's SPDX SBOM referrer.
//!
//! The structs here serialize to the `--json` documents; their field names are stable.

use std::collections::BTreeMap;

use serde::Serialize;
use tokio::io::AsyncReadExt;
use validator::{Digest, Document, MAX_CONFIG_SIZE, Tag};

use crate::image::endpoint::{Source, layout_index, layout_subject};
use crate::image::{Content, ImageRef, TransferError, checked, content_of};
use crate::{Client, ErrorKind as ClientErrorKind, ReferrersFrom, fallback_tag};

/// `artifactType` of the SPDX SBOM the builder attaches.
pub const SPDX_ARTIFACT_TYPE: &str = validator::SPDX_ARTIFACT_TYPE;

/// The config label (and manifest annotation) the builder writes the stop timeout under.
pub const STOP_TIMEOUT_LABEL: &str = "org.reddwarf.image.stop-timeout";

/// The manifest annotation listing the image's FMRIs, one a line.
pub const PACKAGES_ANNOTATION: &str = "org.reddwarf.image.packages";

/// Largest SBOM read.
pub const MAX_SBOM_SIZE: u64 = 64 << 20;

/// What `rdctl inspect` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Inspection {
    /// The reference as given (`oci:DIR[:TAG|@DIGEST]` or `docker://HOST/REPO[:TAG|@DIGEST]`).
    pub reference: String,
    /// The root's digest.
    pub digest: Digest,
    /// The root's media type (manifest or index).
    pub media_type: String,
    /// The root document's size.
    pub size: u64,
    /// Manifest, config and layer bytes of every image under the root (shared blobs once).
    pub total_size: u64,
    /// When the image was created, as every surface reports it (docs/api.md, "Image created
    /// time"): the config's `created`; for an index, the newest of its images'.
    pub created: Option<String>,
    /// `os/arch[/variant]` of each image.
    pub platforms: Vec<String>,
    /// The root's annotations.
    pub annotations: BTreeMap<String, String>,
    /// The image, when the root is a manifest.
    pub image: Option<ImageDetails>,
    /// The images of an index, in its order.
    pub manifests: Vec<IndexChild>,
    /// What refers to the root (SBOM, signatures, attestations).
    pub referrers: Vec<ReferrerInfo>,
}

/// One image: config and layers.
#[derive(Debug, Clone, Serialize)]
pub struct ImageDetails {
    /// The config blob's digest.
    pub config_digest: Digest,
    /// The config blob's size.
    pub config_size: u64,
    /// `os/arch[/variant]`.
    pub platform: String,
    /// The config's `created`.
    pub created: Option<String>,
    /// How a zone runs it.
    pub config: RunConfig,
    /// The layers, bottom first.
    pub layers: Vec<LayerInfo>,
}

impl ImageDetails {
    /// The image's size (docs/api.md, "Image size") when its manifest is `manifest_size`
    /// bytes: the manifest, its config and its layers, every distinct digest once.
    pub fn total_size(&self, manifest_size: u64) -> u64 {
        let mut seen = std::collections::HashSet::from([&self.config_digest]);
        let layers: u64 = (self.layers.iter())
            .filter(|l| seen.insert(&l.digest))
            .map(|l| l.size)
            .sum();
        manifest_size + self.config_size + layers
    }
}

/// The run settings of an image config.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RunConfig {
    /// `Entrypoint`.
    pub entrypoint: Vec<String>,
    /// `Cmd`.
    pub cmd: Vec<String>,
    /// `Env`, `KEY=VALUE` each.
    pub env: Vec<String>,
    /// `User`.
    pub user: Option<String>,
    /// `WorkingDir`.
    pub working_dir: Option<String>,
    /// `StopSignal`.
    pub stop_signal: Option<String>,
    /// Seconds, from the `org.reddwarf.image.stop-timeout` label or manifest annotation.
    pub stop_timeout: Option<u64>,
    /// `Labels`.
    pub labels: BTreeMap<String, String>,
    /// `ExposedPorts` (`80/tcp`).
    pub exposed_ports: Vec<String>,
    /// `Volumes`.
    pub volumes: Vec<String>,
}

/// One layer.
#[derive(Debug, Clone, Serialize)]
pub struct LayerInfo {
    /// Its digest.
    pub digest: Digest,
    /// Its media type.
    pub media_type: String,
    /// Its (compressed) size.
    pub size: u64,
    /// The config's DiffID for it.
    pub diff_id: Option<Digest>,
    /// What the history says made it (`rdctl build: …` without the prefix).
    pub created_by: Option<String>,
    /// The packages (FMRIs) whose files it holds, when the builder recorded them.
    pub packages: Vec<String>,
}

/// One entry of an index.
#[derive(Debug, Clone, Serialize)]
pub struct IndexChild {
    /// Its digest.
    pub digest: Digest,
    /// Its media type.
    pub media_type: String,
    /// Its own (the manifest document's) size.
    pub size: u64,
    /// The size of the image under it (docs/api.md, "Image size"): its manifest, config and
    /// layers, every distinct digest once; its own size when it is no image manifest.
    pub total_size: u64,
    /// The index's platform for it.
    pub platform: Option<String>,
    /// The image under it, when it is an image manifest.
    pub image: Option<ImageDetails>,
}

/// A referrer of the root.
#[derive(Debug, Clone, Serialize)]
pub struct ReferrerInfo {
    /// Its digest.
    pub digest: Digest,
    /// Its media type.
    pub media_type: String,
    /// Its size.
    pub size: u64,
    /// Its `artifactType`.
    pub artifact_type: Option<String>,
    /// `sbom`, `signature`, `attestation` or `other`.
    pub kind: String,
    /// How it was found: `referrers-api`, `referrers-tag`, `layout` or `cosign-tag`.
    pub found_by: String,
    /// The cosign tag naming it, when found by tag.
    pub tag: Option<String>,
    /// Its `org.opencontainers.image.created` annotation.
    pub created: Option<String>,
    /// For a sigstore bundle, the predicate type its referrer annotation names
    /// (`https://sigstore.dev/cosign/sign/v1` for a signature).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub predicate_type: Option<String>,
}

/// The kind of a referrer from its artifact type or cosign tag suffix.
pub fn referrer_kind(artifact_type: Option<&str>, tag: Option<&str>) -> &'static str {
    let t = artifact_type.unwrap_or("");
    if let Some(tag) = tag {
        if tag.ends_with(".sig") {
            return "signature";
        }
        if tag.ends_with(".att") {
            return "attestation";
        }
        if tag.ends_with(".sbom") {
            return "sbom";
        }
    }
    if t.contains("spdx") || t.contains("cyclonedx") || t.contains("sbom") {
        "sbom"
    } else if t.contains("signature") || t.contains("cosign") || t.contains("notary") {
        "signature"
    } else if t.contains("in-toto") || t.contains("attestation") || t.contains("dsse") {
        "attestation"
    } else {
        "other"
    }
}

/// The kind of a sigstore-bundle referrer (`None` for other artifact types): a signature when
/// its predicate type is cosign's signing predicate, or when the annotation is missing (cosign's
/// tag-schema index drops it) — verification tells for sure —, else an attestation.
pub fn bundle_kind(
    artifact_type: Option<&str>,
    predicate_type: Option<&str>,
) -> Option<&'static str> {
    if !artifact_type.is_some_and(trust::bundle::is_bundle_media_type) {
        return None;
    }
    Some(match predicate_type {
        None | Some(trust::bundle::COSIGN_SIGN_PREDICATE) => "signature",
        Some(_) => "attestation",
    })
}

/// `os/arch[/variant]` of an image config, or `-` when it names none (cosign's signature and
/// attestation configs write empty fields, which are not the platform "/").
fn config_platform(v: &serde_json::Value) -> String {
    let field = |k: &str| v.get(k).and_then(|x| x.as_str()).filter(|x| !x.is_empty());
    match (field("os"), field("architecture")) {
        (None, None) => "-".to_owned(),
        (os, arch) => {
            let mut p = format!("{}/{}", os.unwrap_or("?"), arch.unwrap_or("?"));
            if let Some(variant) = field("variant") {
                p = format!("{p}/{variant}");
            }
            p
        }
    }
}

/// Keeps in `newest` the later of it and `created` (RFC 3339 times, compared as times: an
/// index's created time is its newest image's).
pub(crate) fn keep_newest(newest: &mut Option<String>, created: &Option<String>) {
    let at = |t: &Option<String>| t.as_deref().and_then(validator::parse_rfc3339);
    if at(created).is_some() && at(created) > at(newest) {
        newest.clone_from(created);
    }
}

/// Whether `created` is a time worth showing: cosign writes Go's zero time
/// (`0001-01-01T00:00:00Z`), which would read as "2025 years ago"; times before the Unix epoch
/// and text that is no RFC 3339 time are left out.
fn meaningful_time(created: &str) -> bool {
    validator::parse_rfc3339(created).is_some_and(|t| t >= 0)
}

/// The packages a layer holds, from its history `created_by`.
pub fn layer_packages(created_by: &str) -> Vec<String> {
    let contents = created_by
        .strip_prefix("rdctl build: ")
        .unwrap_or(created_by);
    let list = contents.strip_prefix("shared: ").unwrap_or(contents);
    list.split_whitespace()
        .filter(|w| w.starts_with("pkg:/"))
        .map(str::to_owned)
        .collect()
}

/// Reads a small blob whole (configs, SBOMs), verified, refusing one over `limit`.
pub(crate) async fn read_blob(
    source: &Source<'_>,
    c: &Content,
    limit: u64,
) -> Result<Vec<u8>, TransferError> {
    if c.size > limit {
        return Err(TransferError::Blob {
            digest: c.digest.clone(),
            size: c.size,
            source: format!("larger than the {limit} bytes read for it").into(),
        });
    }
    match source {
        Source::Layout(layout) => layout
            .read_document(&c.digest, c.size, limit)
            .map_err(Source::layout_err(layout)),
        Source::Registry(client, r) => {
            let blob_err = |e: Box<dyn std::error::Error + Send + Sync>| TransferError::Blob {
                digest: c.digest.clone(),
                size: c.size,
                source: e,
            };
            let mut reader = client
                .get_blob(r.registry(), r.name(), &c.digest, c.size)
                .await
                .map_err(|e| blob_err(Box::new(e)))?;
            let mut out = Vec::with_capacity(c.size as usize);
            reader
                .read_to_end(&mut out)
                .await
                .map_err(|e| blob_err(Box::new(e)))?;
            Ok(out)
        }
    }
}

/// A checked manifest or index by descriptor.
pub(crate) async fn read_doc(source: &Source<'_>, c: &Content) -> Result<Document, TransferError> {
    let bytes = source.document(c).await?;
    checked(c, &bytes)
}

/// Inspects the image `r` names.
pub async fn inspect(client: &Client, r: &ImageRef) -> Result<Inspection, TransferError> {
    let source = Source::open(client, r)?;
    let (root, bytes) = source.root(r).await?;
    let doc = checked(&root, &bytes)?;
    let mut out = Inspection {
        reference: r.to_string(),
        digest: root.digest.clone(),
        media_type: root.media_type.clone(),
        size: root.size,
        total_size: root.size,
        created: None,
        platforms: Vec::new(),
        annotations: BTreeMap::new(),
        image: None,
        manifests: Vec::new(),
        referrers: Vec::new(),
    };
    let mut counted = std::collections::HashSet::from([root.digest.clone()]);
    let mut add = |c: &Digest, size: u64, total: &mut u64| {
        if counted.insert(c.clone()) {
            *total += size;
        }
    };
    match doc {
        Document::Manifest(m) => {
            out.annotations = m.annotations.clone();
            let image = image_details(&source, &m).await?;
            add(&image.config_digest, image.config_size, &mut out.total_size);
            for l in &image.layers {
                add(&l.digest, l.size, &mut out.total_size);
            }
            out.created = image.created.clone();
            out.platforms.push(image.platform.clone());
            out.image = Some(image);
        }
        Document::Index(index) => {
            out.annotations = index.annotations.clone();
            for d in &index.manifests {
                let c = content_of(d);
                add(&c.digest, c.size, &mut out.total_size);
                let image = match read_doc(&source, &c).await? {
                    Document::Manifest(m) => Some(image_details(&source, &m).await?),
                    _ => None,
                };
                if let Some(i) = &image {
                    add(&i.config_digest, i.config_size, &mut out.total_size);
                    for l in &i.layers {
                        add(&l.digest, l.size, &mut out.total_size);
                    }
                    keep_newest(&mut out.created, &i.created);
                    out.platforms.push(i.platform.clone());
                }
                let total_size = image.as_ref().map_or(c.size, |i| i.total_size(c.size));
                out.manifests.push(IndexChild {
                    digest: c.digest,
                    media_type: c.media_type,
                    size: c.size,
                    total_size,
                    platform: d.platform.as_ref().map(ToString::to_string),
                    image,
                });
            }
        }
        Document::Config(_) => unreachable!("checked returns manifests and indexes only"),
    }
    out.referrers = referrers_of(&source, &root.digest, true).await?;
    Ok(out)
}

/// Config and layers of one image manifest.
pub(crate) async fn image_details(
    source: &Source<'_>,
    m: &validator::Manifest,
) -> Result<ImageDetails, TransferError> {
    let config = content_of(&m.config);
    let bytes = read_blob(source, &config, MAX_CONFIG_SIZE as u64).await?;
    let v: serde_json::Value =
        serde_json::from_slice(&bytes).map_err(|e| TransferError::InvalidDocument {
            digest: config.digest.clone(),
            media_type: config.media_type.clone(),
            problems: format!("the config is not JSON: {e}"),
        })?;
    let strs = |v: Option<&serde_json::Value>| -> Vec<String> {
        v.and_then(|a| a.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            })
            .unwrap_or_default()
    };
    let keys = |v: Option<&serde_json::Value>| -> Vec<String> {
        v.and_then(|o| o.as_object())
            .map(|o| o.keys().cloned().collect())
            .unwrap_or_default()
    };
    let s = |v: Option<&serde_json::Value>| {
        v.and_then(|s| s.as_str())
            .filter(|s| !s.is_empty())
            .map(str::to_owned)
    };
    let cfg = v.get("config");
    let field = |k: &str| cfg.and_then(|c| c.get(k));
    let labels: BTreeMap<String, String> = field("Labels")
        .and_then(|l| l.as_object())
        .map(|o| {
            o.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_owned())))
                .collect()
        })
        .unwrap_or_default();
    let stop_timeout = labels
        .get(STOP_TIMEOUT_LABEL)
        .or_else(|| m.annotations.get(STOP_TIMEOUT_LABEL))
        .and_then(|t| t.parse().ok());
    let run = RunConfig {
        entrypoint: strs(field("Entrypoint")),
        cmd: strs(field("Cmd")),
        env: strs(field("Env")),
        user: s(field("User")),
        working_dir: s(field("WorkingDir")),
        stop_signal: s(field("StopSignal")),
        stop_timeout,
        labels,
        exposed_ports: keys(field("ExposedPorts")),
        volumes: keys(field("Volumes")),
    };
    let platform = config_platform(&v);
    let diff_ids: Vec<Option<Digest>> = v
        .get("rootfs")
        .and_then(|r| r.get("diff_ids"))
        .and_then(|d| d.as_array())
        .map(|a| {
            a.iter()
                .map(|d| d.as_str().and_then(|d| Digest::parse(d).ok()))
                .collect()
        })
        .unwrap_or_default();
    // History entries that made a layer, in layer order.
    let history: Vec<Option<String>> = v
        .get("history")
        .and_then(|h| h.as_array())
        .map(|a| {
            a.iter()
                .filter(|h| {
                    !h.get("empty_layer")
                        .and_then(|e| e.as_bool())
                        .unwrap_or(false)
                })
                .map(|h| s(h.get("created_by")))
                .collect()
        })
        .unwrap_or_default();
    let layers = m
        .layers
        .iter()
        .enumerate()
        .map(|(i, l)| {
            let created_by = history.get(i).cloned().flatten();
            let packages = created_by
                .as_deref()
                .map(layer_packages)
                .unwrap_or_default();
            LayerInfo {
                digest: l.digest.clone(),
                media_type: l.media_type.as_str().to_owned(),
                size: l.size,
                diff_id: diff_ids.get(i).cloned().flatten(),
                created_by: created_by.map(|c| {
                    c.strip_prefix("rdctl build: ")
                        .map(str::to_owned)
                        .unwrap_or(c)
                }),
                packages,
            }
        })
        .collect();
    Ok(ImageDetails {
        config_digest: config.digest,
        config_size: config.size,
        platform,
        created: s(v.get("created")).filter(|c| meaningful_time(c)),
        config: run,
        layers,
    })
}

/// The referrers of `subject` at the source, with cosign's tags
/// (cosign's tags only when `cosign`).
pub(crate) async fn referrers_of(
    source: &Source<'_>,
    subject: &Digest,
    cosign: bool,
) -> Result<Vec<ReferrerInfo>, TransferError> {
    let mut out: Vec<ReferrerInfo> = Vec::new();
    let cosign = if cosign {
        cosign_tags(subject)
    } else {
        Vec::new()
    };
    match source {
        Source::Layout(layout) => {
            let index = layout_index(layout)?;
            for entry in &index.manifests {
                let c = content_of(entry);
                let tag = entry.ref_name().map(str::to_owned);
                let by_tag = tag.as_ref().is_some_and(|t| cosign.contains(t));
                let described = layout_subject(layout, &c);
                let by_subject = described.as_ref().is_some_and(|(_, s)| s == subject);
                if !(by_tag || by_subject) || out.iter().any(|r| r.digest == c.digest) {
                    continue;
                }
                let artifact_type = described
                    .as_ref()
                    .and_then(|(r, _)| r.artifact_type.clone())
                    .or_else(|| entry.artifact_type.as_ref().map(|t| t.as_str().to_owned()));
                let created = described.as_ref().and_then(|(r, _)| {
                    r.annotations
                        .get("org.opencontainers.image.created")
                        .cloned()
                });
                let predicate_type = described.as_ref().and_then(|(r, _)| {
                    r.annotations
                        .get(trust::bundle::PREDICATE_ANNOTATION)
                        .cloned()
                });
                out.push(ReferrerInfo {
                    kind: bundle_kind(artifact_type.as_deref(), predicate_type.as_deref())
                        .unwrap_or_else(|| referrer_kind(artifact_type.as_deref(), tag.as_deref()))
                        .to_owned(),
                    predicate_type,
                    found_by: if by_subject { "layout" } else { "cosign-tag" }.to_owned(),
                    tag: if by_tag { tag } else { None },
                    digest: c.digest,
                    media_type: c.media_type,
                    size: c.size,
                    artifact_type,
                    created,
                });
            }
        }
        Source::Registry(client, r) => {
            let found =
                client
                    .referrers(r, subject)
                    .await
                    .map_err(|source| TransferError::Registry {
                        reference: format!("{r} (referrers of {subject})"),
                        source,
                    })?;
            let found_by = match found.from {
                ReferrersFrom::Api => "referrers-api",
                _ => "referrers-tag",
            };
            for m in found.manifests {
                let predicate_type = m
                    .annotations
                    .get(trust::bundle::PREDICATE_ANNOTATION)
                    .cloned();
                out.push(ReferrerInfo {
                    kind: bundle_kind(m.artifact_type.as_deref(), predicate_type.as_deref())
                        .unwrap_or_else(|| referrer_kind(m.artifact_type.as_deref(), None))
                        .to_owned(),
                    predicate_type,
                    found_by: found_by.to_owned(),
                    tag: None,
                    created: m
                        .annotations
                        .get("org.opencontainers.image.created")
                        .cloned(),
                    digest: m.digest,
                    media_type: m.media_type,
                    size: m.size,
                    artifact_type: m.artifact_type,
                });
            }
            for t in &cosign {
                let Ok(tag) = Tag::parse(t) else { continue };
                let tagged = r.with_tag(tag);
                match client.resolve(&tagged).await {
                    Ok(d) => out.push(ReferrerInfo {
                        kind: referrer_kind(None, Some(t)).to_owned(),
                        found_by: "cosign-tag".to_owned(),
                        tag: Some(t.clone()),
                        digest: d.digest,
                        media_type: d.media_type,
                        size: d.size,
                        artifact_type: None,
                        created: None,
                        predicate_type: None,
                    }),
                    Err(e) if e.kind() == ClientErrorKind::NotFound => {}
                    Err(source) => {
                        return Err(TransferError::Registry {
                            reference: tagged.to_string(),
                            source,
                        });
                    }
                }
            }
        }
    }
    Ok(out)
}

/// cosign's tags for a subject: `sha256-<hex>.sig`, `.att`, `.sbom`.
pub fn cosign_tags(subject: &Digest) -> Vec<String> {
    let base = fallback_tag(subject);
    ["sig", "att", "sbom"]
        .iter()
        .map(|s| format!("{base}.{s}"))
        .collect()
}

/// One IPS package listed by an image's SBOM (`fmri`, `name`, `publisher`, `version`).
pub use validator::SpdxPackage as SbomPackage;

/// What `rdctl sbom` shows.
#[derive(Debug, Clone, Serialize)]
pub struct Sbom {
    /// The image the SBOM describes (the root).
    pub subject: Digest,
    /// The SBOM referrer manifest.
    pub referrer: Digest,
    /// The SPDX document blob.
    pub document: Digest,
    /// The SPDX document's `name`.
    pub name: Option<String>,
    /// The packages, in the document's order.
    pub packages: Vec<SbomPackage>,
}

/// The packages of the SPDX JSON SBOM referrer of the image `r` names.
pub async fn sbom(client: &Client, r: &ImageRef) -> Result<Sbom, TransferError> {
    sbom_with_document(client, r).await.map(|(s, _)| s)
}

/// One platform's SBOM of a multi-platform image.
#[derive(Debug, Clone, Serialize)]
pub struct PlatformSbom {
    /// The index's platform for the manifest (`os/arch[/variant]`).
    pub platform: Option<String>,
    /// The manifest's SBOM.
    #[serde(flatten)]
    pub sbom: Sbom,
}

/// The SBOMs of an image or of each platform of an index.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum Sboms {
    /// The image (or index) has an SBOM referrer of its own.
    One(Sbom),
    /// An index without one: each platform manifest's SBOM.
    PerPlatform {
        /// The index.
        subject: Digest,
        /// The platforms with an SBOM, in the index's order.
        platforms: Vec<PlatformSbom>,
        /// Platforms without one (`os/arch`, or the digest when the index names no platform),
        /// attestation manifests left out.
        without: Vec<String>,
    },
}

/// The SBOM of the image `r` names, or, for an index without an SBOM of its own, the SBOM of
/// each platform manifest it lists (as buildx and `rdctl build` of several platforms attach
/// them). An index where no platform has one is an error.
pub async fn sboms(client: &Client, r: &ImageRef) -> Result<Sboms, TransferError> {
    let source = Source::open(client, r)?;
    let (root, _) = source.root(r).await?;
    let own = sbom_of(&source, r, &root).await;
    let not_found = match own {
        Ok((s, _)) => return Ok(Sboms::One(s)),
        Err(e @ TransferError::NotFound { .. }) => e,
        Err(e) => return Err(e),
    };
    let Document::Index(index) = read_doc(&source, &root).await? else {
        return Err(not_found);
    };
    let mut platforms = Vec::new();
    let mut without = Vec::new();
    for d in &index.manifests {
        let platform = d.platform.as_ref().map(ToString::to_string);
        // buildx's attestation manifests (unknown/unknown) describe, they have no SBOM.
        if platform.as_deref() == Some("unknown/unknown") {
            continue;
        }
        match sbom_of(&source, r, &content_of(d)).await {
            Ok((sbom, _)) => platforms.push(PlatformSbom { platform, sbom }),
            Err(TransferError::NotFound { .. }) => {
                without.push(platform.unwrap_or_else(|| d.digest.to_string()))
            }
            Err(e) => return Err(e),
        }
    }
    if platforms.is_empty() {
        return Err(TransferError::NotFound {
            what: format!(
                "an SBOM for {r} ({}): neither the index nor any of its {} platform manifest(s) has a referrer of artifactType {SPDX_ARTIFACT_TYPE}",
                root.digest,
                index.manifests.len()
            ),
        });
    }
    Ok(Sboms::PerPlatform {
        subject: root.digest,
        platforms,
        without,
    })
}

/// [`sbom`], with the SPDX document's bytes as read (verified).
pub(crate) async fn sbom_with_document(
    client: &Client,
    r: &ImageRef,
) -> Result<(Sbom, Vec<u8>), TransferError> {
    let source = Source::open(client, r)?;
    let (root, _) = source.root(r).await?;
    sbom_of(&source, r, &root).await
}

/// The SBOM referrer of `root` (a manifest or index read through `source`; `r` names it in
/// errors) and its SPDX document's bytes.
async fn sbom_of(
    source: &Source<'_>,
    r: &ImageRef,
    root: &Content,
) -> Result<(Sbom, Vec<u8>), TransferError> {
    let referrers = referrers_of(source, &root.digest, true).await?;
    let Some(found) = referrers
        .iter()
        .find(|x| x.artifact_type.as_deref() == Some(SPDX_ARTIFACT_TYPE))
    else {
        return Err(TransferError::NotFound {
            what: format!(
                "an SBOM for {r} ({}): it has no referrer of artifactType {SPDX_ARTIFACT_TYPE} ({} other referrer(s)); rdctl build attaches one, a copy with --no-referrers leaves it behind",
                root.digest,
                referrers.len()
            ),
        });
    };
    let c = Content {
        digest: found.digest.clone(),
        size: found.size,
        media_type: found.media_type.clone(),
    };
    let Document::Manifest(m) = read_doc(source, &c).await? else {
        return Err(TransferError::InvalidDocument {
            digest: c.digest,
            media_type: c.media_type,
            problems: "the SBOM referrer is not an image manifest".to_owned(),
        });
    };
    let layer = m
        .layers
        .iter()
        .find(|l| l.media_type.as_str() == SPDX_ARTIFACT_TYPE)
        .ok_or_else(|| TransferError::InvalidDocument {
            digest: c.digest.clone(),
            media_type: c.media_type.clone(),
            problems: format!("the SBOM referrer has no {SPDX_ARTIFACT_TYPE} layer"),
        })?;
    let doc = content_of(layer);
    let bytes = read_blob(source, &doc, MAX_SBOM_SIZE).await?;
    let (name, packages) =
        parse_spdx(&bytes).map_err(|problems| TransferError::InvalidDocument {
            digest: doc.digest.clone(),
            media_type: doc.media_type.clone(),
            problems,
        })?;
    Ok((
        Sbom {
            subject: root.digest.clone(),
            referrer: c.digest,
            document: doc.digest,
            name,
            packages,
        },
        bytes,
    ))
}

/// The document name and packages of an SPDX 2.x JSON document ([`validator::parse_spdx`]).
pub fn parse_spdx(bytes: &[u8]) -> Result<(Option<String>, Vec<SbomPackage>), String> {
    validator::parse_spdx(bytes).map(|d| (d.name, d.packages))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cosign_empty_fields_are_no_platform_and_no_time() {
        let cosign =
            serde_json::json!({"architecture": "", "os": "", "created": "0001-01-01T00:00:00Z"});
        assert_eq!(config_platform(&cosign), "-");
        assert!(!meaningful_time("0001-01-01T00:00:00Z"));
        assert!(meaningful_time("2024-01-02T03:04:05Z"));
        let arm = serde_json::json!({"architecture": "arm64", "os": "linux", "variant": "v8"});
        assert_eq!(config_platform(&arm), "linux/arm64/v8");
        assert_eq!(
            config_platform(&serde_json::json!({"os": "illumos", "architecture": "amd64"})),
            "illumos/amd64"
        );
    }

    #[test]
    fn layer_packages_from_history() {
        assert_eq!(
            layer_packages("rdctl build: pkg://example.org/demo/tool@2.1"),
            vec!["pkg://example.org/demo/tool@2.1"]
        );
        assert_eq!(
            layer_packages("rdctl build: shared: pkg://a/x@1 pkg://a/y@2"),
            vec!["pkg://a/x@1", "pkg://a/y@2"]
        );
        assert!(layer_packages("rdctl build: generated").is_empty());
        assert!(layer_packages("/bin/sh -c apt-get install").is_empty());
    }

    #[test]
    fn referrer_kinds() {
        assert_eq!(referrer_kind(Some("application/spdx+json"), None), "sbom");
        assert_eq!(
            referrer_kind(
                Some("application/vnd.dev.cosign.simplesigning.v1+json"),
                None
            ),
            "signature"
        );
        assert_eq!(
            referrer_kind(Some("application/vnd.in-toto+json"), None),
            "attestation"
        );
        assert_eq!(referrer_kind(None, Some("sha256-ab.att")), "attestation");
        assert_eq!(referrer_kind(None, Some("sha256-ab.sig")), "signature");
        assert_eq!(referrer_kind(Some("application/x"), None), "other");
    }

    #[test]
    fn cosign_tags_follow_the_digest() {
        let d = Digest::sha256(b"x");
        assert_eq!(
            cosign_tags(&d),
            vec![
                format!("sha256-{}.sig", d.encoded()),
                format!("sha256-{}.att", d.encoded()),
                format!("sha256-{}.sbom", d.encoded()),
            ]
        );
    }

    #[test]
    fn spdx_packages() {
        let doc = serde_json::json!({
            "spdxVersion": "SPDX-2.3", "name": "zones/demo",
            "packages": [{
                "name": "demo/tool", "versionInfo": "2.1,5.11-2024.0:20240102T030405Z",
                "supplier": "Organization: example.org",
                "externalRefs": [{"referenceCategory": "OTHER", "referenceType": "ips-fmri",
                    "referenceLocator": "pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z"}]
            }, {"name": "other", "supplier": "NOASSERTION"}]
        });
        let (name, p) = parse_spdx(&serde_json::to_vec(&doc).unwrap()).unwrap();
        assert_eq!(name.as_deref(), Some("zones/demo"));
        assert_eq!(p.len(), 2);
        assert_eq!(p[0].publisher.as_deref(), Some("example.org"));
        assert_eq!(
            p[0].fmri.as_deref(),
            Some("pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T030405Z")
        );
        assert_eq!(p[1].publisher, None);
        assert_eq!(p[1].version, None);
        assert!(parse_spdx(b"{}").unwrap_err().contains("spdxVersion"));
    }
}
