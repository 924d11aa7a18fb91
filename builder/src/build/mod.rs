//! `rdctl build`: image file + lockfile → layers → OCI image layout, validated, optionally
//! pushed.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::mpsc::Receiver;

use ips_bridge::{HashAlg, ImageFilter, Manifest, PackageRef, hash_hex};
use serde_json::{Value, json};
use validator::{
    Algorithm, Digest, ImageLayout, IndexEntry, LayoutError, MediaType, Replaces, StagedBlob, Tag,
    ValidateOptions, validate_layout,
};

use crate::BuildError;
use crate::checks::check_set;
use crate::compose::{Content, Package, Tree, compose, parse_timestamp};
use crate::imagefile::{CompressionAlg, ImageFile, Layering};
use crate::layercache::{LayerCache, layer_key};
use crate::lock::Lockfile;
use crate::pipeline::{Payloads, Piece, Pool};
use crate::progress::Progress;
use crate::sbom::SBOM_ARTIFACT_TYPE;
use crate::signatures::SignatureCheck;
use crate::source::Sources;
use crate::tarball::{Kind, LayerDigests, LayerStream, TarWriter};

mod grouping;
mod layer;

use grouping::{budget_groups, per_package_groups, tar_bytes, with_ancestors};
use layer::{LayerContext, write_layer};

/// Annotation carrying the stop timeout in seconds (OCI has no config field for it).
pub const STOP_TIMEOUT_ANNOTATION: &str = "org.reddwarf.image.stop-timeout";
/// Annotation on the SBOM's `index.json` entry naming the tags of the image it describes.
pub const SBOM_OF_ANNOTATION: &str = "org.reddwarf.image.sbom-of";
/// Annotation listing the packages' FMRIs, one per line.
pub const PACKAGES_ANNOTATION: &str = "org.reddwarf.image.packages";

/// What to do with the built image.
#[derive(Debug, Clone, Default)]
pub struct BuildOptions {
    /// Write the OCI image layout here (created when missing; entries with the same tags are
    /// replaced). Pushing is a copy from this layout (`registry_client::transfer`), done by
    /// the caller once the build succeeded.
    pub output: PathBuf,
    /// The build time used for mtimes without a `timestamp` attribute and for `created`
    /// (`SOURCE_DATE_EPOCH`); by default the newest package timestamp of the set.
    pub source_date_epoch: Option<u64>,
    /// Threads reading payloads ahead of the layer writer, and compression threads (0: one
    /// per CPU of each). The image does not depend on it.
    pub threads: u32,
    /// A payload cache shared across builds: payloads from depot origins are kept here by
    /// their hash, so a rebuild does not download them again.
    pub payload_cache: Option<PathBuf>,
    /// A layer cache shared across builds: a layer whose inputs (entries, owners, modes,
    /// times, payload actions, compression) are unchanged is copied from here, checked,
    /// instead of being built and compressed again.
    pub layer_cache: Option<PathBuf>,
    /// How `https://` depot origins are trusted (CA files, certs.d, insecure).
    pub depot_tls: ips_bridge::TlsSettings,
    /// Told how the build goes (layers started, bytes, finished).
    pub progress: Option<Arc<dyn Progress>>,
}

/// One layer of the built image.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BuiltLayer {
    /// The compressed blob's digest.
    pub digest: Digest,
    /// The uncompressed tar's digest.
    pub diff_id: Digest,
    /// Compressed size.
    pub size: u64,
    /// What it holds: a package FMRI, or `generated`, or `image`.
    pub contents: String,
    /// Copied from the layer cache rather than built.
    pub cached: bool,
}

/// What a build produced.
#[derive(Debug, Clone, serde::Serialize)]
pub struct BuildSummary {
    /// The image manifest digest: the image's one identity. The layout's `index.json` names
    /// it under each tag (with its platform), and a push tags it as it is, as skopeo, crane
    /// and oras do; a single-platform image gets no image index of its own.
    pub manifest: Digest,
    /// The config digest.
    pub config: Digest,
    /// The SBOM referrer manifest digest (SPDX 2.3 JSON, `subject` = the image manifest).
    pub sbom: Digest,
    /// Layers, base first.
    pub layers: Vec<BuiltLayer>,
    /// Packages (full FMRIs).
    pub packages: Vec<String>,
    /// The tags the layout's `index.json` names the image under.
    pub tags: Vec<String>,
    /// The layout written.
    pub output: PathBuf,
    /// What pkg would accept but warn about (a missing `group` dependency, a renamed
    /// package).
    pub warnings: Vec<String>,
}

/// Builds the image described by `image_file` and its lockfile.
pub fn build(image_file: &Path, opts: &BuildOptions) -> Result<BuildSummary, BuildError> {
    let image = ImageFile::load(image_file)?;
    let lock = Lockfile::load_for(&image)?;
    let sources = Sources::open(
        &image.publishers,
        opts.payload_cache.as_deref(),
        &opts.depot_tls,
    )?;
    let filter = image.filter();
    let signatures = SignatureCheck::for_image(&image).map_err(crate::lock::LockError::from)?;

    let (packages, mut warnings) = load_packages(&image, &lock, &sources, &filter, &signatures)?;

    let epoch = opts
        .source_date_epoch
        .unwrap_or_else(|| newest_package(&packages));

    let out_dir = opts.output.clone();
    // A new output directory is written beside its path and moved there only when the
    // build has passed validation: a failed build leaves nothing that looks like a layout.
    let new_layout = ImageLayout::create_staged(&out_dir, false)?;
    let layout = new_layout.layout().clone();
    let staging = tempfile::Builder::new()
        .prefix(".rdctl-build-")
        .tempdir_in(layout.root())
        .map_err(|source| BuildError::Io {
            path: layout.root().to_owned(),
            source,
        })?;

    let tree = compose(&packages, &filter, epoch, &staging.path().join("root"))?;
    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get() as u32),
        n => n,
    };

    // Layers.
    let groups: Vec<(String, Vec<&str>)> = match image.layering {
        Layering::Single => vec![("image".into(), tree.keys().map(String::as_str).collect())],
        Layering::PerPackage => per_package_groups(&tree, &packages),
        Layering::Budget(n) => budget_groups(&tree, &packages, n as usize),
    };
    let cache = opts.layer_cache.as_deref().map(LayerCache::new);
    let progress = opts.progress.as_deref();
    let cx = LayerContext {
        layout: &layout,
        staging: staging.path(),
        tree: &tree,
        packages: &packages,
        image: &image,
        threads,
        progress,
    };
    // Each layer is synced and renamed into place on another thread as soon as it is written,
    // while the next layer or the documents that refer to it are made (the sync of a 100 MiB
    // layer is tens of milliseconds of waiting); `index.json`, the layout's entry point, is
    // written only once they are all in place.
    let publisher = Publisher::start();
    let layers = write_layers(&cx, &groups, cache.as_ref(), &publisher, &mut warnings)?;

    // Config and manifest, and the SBOM as a referrer of the image manifest.
    let Documents {
        config,
        manifest,
        manifest_len,
        sbom,
        sbom_len,
    } = write_documents(&layout, &image, &packages, &tree, &layers, epoch)?;
    let sbom_of = image.tags.join(",");

    // index.json: our image under each tag, and its SBOM (entries of other images are kept;
    // the SBOM entry of the same tags is replaced).
    let tags = image
        .tags
        .iter()
        .map(|t| {
            Tag::parse(t).map_err(|e| BuildError::LayoutIndex {
                path: out_dir.join("index.json"),
                message: format!("tag {t:?}: {e}"),
            })
        })
        .collect::<Result<Vec<_>, _>>()?;
    let image_entry = IndexEntry {
        platform: Some(image.platform.clone()),
        ..IndexEntry::new(
            MediaType::OciManifest.as_str(),
            manifest.clone(),
            manifest_len,
        )
    };
    let sbom_entry = IndexEntry {
        artifact_type: Some(SBOM_ARTIFACT_TYPE.to_owned()),
        annotations: BTreeMap::from([(SBOM_OF_ANNOTATION.to_owned(), sbom_of)]),
        ..IndexEntry::new(MediaType::OciManifest.as_str(), sbom.clone(), sbom_len)
    };
    publisher.finish()?;
    layout.edit_index(|index| {
        for t in &tags {
            index.set_tag(t, image_entry.clone());
        }
        index.add_untagged(sbom_entry, Replaces::SameAnnotation(SBOM_OF_ANNOTATION));
    })?;
    drop(staging);

    check_output(&layout, &image, &layers, &out_dir)?;
    new_layout.commit()?;

    Ok(BuildSummary {
        manifest,
        config,
        sbom,
        layers,
        packages: packages.iter().map(|p| p.fmri.to_string()).collect(),
        tags: image.tags.clone(),
        output: out_dir,
        warnings,
    })
}

/// Every manifest of the lockfile, checked against the lockfile's SHA-1 and the signature
/// policy, and the set checks again; the packages with what those checks warn about.
fn load_packages<'s>(
    image: &ImageFile,
    lock: &Lockfile,
    sources: &'s Sources,
    filter: &ImageFilter,
    signatures: &SignatureCheck,
) -> Result<(Vec<Package<'s>>, Vec<String>), BuildError> {
    // Every manifest, checked against the lockfile's SHA-1. The parsed manifests are
    // collected apart from the rest first, so the set checks below can borrow them without
    // a copy; they then move into the packages.
    let mut set: Vec<(ips_bridge::Fmri, Manifest)> = Vec::new();
    let mut loaded = Vec::new();
    for locked in &lock.packages {
        let fmri = ips_bridge::Fmri::parse(&locked.fmri).map_err(|e| BuildError::Lockfile {
            lockfile: image.lockfile_path(),
            message: format!("{}: {e}", locked.fmri),
        })?;
        let source = sources
            .get(fmri.publisher().unwrap_or_default())
            .ok_or_else(|| BuildError::Lockfile {
                lockfile: image.lockfile_path(),
                message: format!("{fmri}: publisher is not in the image file"),
            })?;
        // The lockfile's SHA-1 is the one that counts (a republished package must not slip
        // in); it was checked against the catalog when the lockfile was made. Only when the
        // two disagree is the catalog read, to say whose value is whose.
        let pref = PackageRef {
            fmri: fmri.clone(),
            manifest_sha1: None,
        };
        let bytes = source.manifest_bytes(&pref)?;
        let served = hash_hex(HashAlg::Sha1, &bytes);
        if served != locked.manifest_sha1 {
            let catalog = source
                .packages()
                .ok()
                .and_then(|all| all.into_iter().find(|p| p.fmri == fmri))
                .and_then(|p| p.manifest_sha1);
            return Err(BuildError::ManifestMismatch(Box::new(
                crate::ManifestMismatch {
                    lockfile: image.lockfile_path(),
                    image: image.path.clone(),
                    package: fmri.to_string(),
                    origin: source.origin_string(),
                    locked: locked.manifest_sha1.clone(),
                    served,
                    catalog,
                },
            )));
        }
        let manifest = Manifest::parse_bytes(&bytes).map_err(|e| BuildError::Lockfile {
            lockfile: image.lockfile_path(),
            message: format!("{fmri}: manifest does not parse: {e}"),
        })?;
        // Checked again, not trusted from the lock: the trust anchors may have changed.
        signatures
            .check(source, &fmri, &manifest)
            .map_err(|e| BuildError::Lock(crate::lock::LockError::Signature(e)))?;
        set.push((fmri, manifest));
        loaded.push((bytes, source));
    }
    // The lockfile passed these checks when it was made; they run again because the
    // lockfile is an input like any other (edited by hand, or from another rdctl).
    let warnings: Vec<String> = check_set(&set, filter)?
        .iter()
        .map(ToString::to_string)
        .collect();
    let packages: Vec<Package<'_>> = set
        .into_iter()
        .zip(loaded)
        .map(|((fmri, manifest), (manifest_bytes, source))| Package {
            fmri,
            manifest_bytes,
            manifest,
            source,
        })
        .collect();
    Ok((packages, warnings))
}

/// `SOURCE_DATE_EPOCH` when none is given: the newest package's timestamp (0 without one).
fn newest_package(packages: &[Package<'_>]) -> u64 {
    packages
        .iter()
        .filter_map(|p| p.fmri.version()?.timestamp())
        .filter_map(|t| parse_timestamp(t.as_str()))
        .max()
        .unwrap_or(0)
}

/// Writes (or restores from the layer cache) one layer per group, in order. Each layer is
/// synced and renamed into place on `publisher`'s thread as soon as it is written, while the
/// next layer or the documents that refer to it are made (the sync of a 100 MiB layer is tens
/// of milliseconds of waiting).
fn write_layers(
    cx: &LayerContext<'_>,
    groups: &[(String, Vec<&str>)],
    cache: Option<&LayerCache>,
    publisher: &Publisher,
    warnings: &mut Vec<String>,
) -> Result<Vec<BuiltLayer>, BuildError> {
    let mut layers = Vec::new();
    for (index, (label, paths)) in groups.iter().enumerate() {
        let in_layer = with_ancestors(paths);
        if let Some(p) = cx.progress {
            p.layer_started(index, groups.len(), label, tar_bytes(cx.tree, &in_layer));
        }
        let key = cache.map(|_| layer_key(cx.tree, &in_layer, cx.packages, cx.image.compression));
        let restored = match (cache, &key) {
            (Some(c), Some(k)) => c
                .restore(k, cx.layout, cx.image.compression)
                .unwrap_or_else(|reason| {
                    warnings.push(reason);
                    None
                }),
            _ => None,
        };
        let cached = restored.is_some();
        let d = match restored {
            Some(d) => d,
            None => {
                let (d, blob) = write_layer(cx, &in_layer)?;
                match (cache, &key) {
                    // The cache copies the published file.
                    (Some(c), Some(k)) => {
                        blob.publish().map_err(LayoutError::from)?;
                        if let Err(e) = c.store(k, &cx.layout.blob_path(&d.digest), &d) {
                            warnings.push(e);
                        }
                    }
                    _ => publisher.send(blob),
                }
                d
            }
        };
        let layer = BuiltLayer {
            digest: d.digest,
            diff_id: d.diff_id,
            size: d.size,
            contents: label.clone(),
            cached,
        };
        if let Some(p) = cx.progress {
            p.layer_finished(index, groups.len(), &layer);
        }
        layers.push(layer);
    }
    Ok(layers)
}

/// What [`write_documents`] wrote.
struct Documents {
    config: Digest,
    manifest: Digest,
    manifest_len: u64,
    /// The SBOM referrer manifest.
    sbom: Digest,
    sbom_len: u64,
}

/// The image config, the image manifest, and the SPDX SBOM as a referrer of the manifest.
fn write_documents(
    layout: &ImageLayout,
    image: &ImageFile,
    packages: &[Package<'_>],
    tree: &Tree,
    layers: &[BuiltLayer],
    epoch: u64,
) -> Result<Documents, BuildError> {
    // Config and manifest.
    let created = validator::rfc3339(epoch);
    let config_bytes = config_json(image, layers, &created);
    let config = layout.write_document(&config_bytes)?;
    let layer_media = match image.compression.algorithm {
        CompressionAlg::Gzip => MediaType::OciLayerGzip,
        CompressionAlg::Zstd => MediaType::OciLayerZstd,
    };
    let fmris: Vec<String> = packages.iter().map(|p| p.fmri.to_string()).collect();
    let mut annotations: BTreeMap<String, String> = image.annotations.clone();
    annotations
        .entry("org.opencontainers.image.created".into())
        .or_insert_with(|| created.clone());
    annotations.insert(PACKAGES_ANNOTATION.into(), fmris.join("\n"));
    if let Some(t) = image.config.stop_timeout {
        annotations.insert(STOP_TIMEOUT_ANNOTATION.into(), t.to_string());
    }
    let manifest_json = json!({
        "schemaVersion": 2,
        "mediaType": MediaType::OciManifest.as_str(),
        "config": {
            "mediaType": MediaType::OciConfig.as_str(),
            "digest": config.to_string(),
            "size": config_bytes.len(),
        },
        "layers": layers.iter().map(|l| json!({
            "mediaType": layer_media.as_str(),
            "digest": l.digest.to_string(),
            "size": l.size,
        })).collect::<Vec<_>>(),
        "annotations": annotations,
    });
    let manifest_bytes = serde_json::to_vec(&manifest_json).expect("json");
    let manifest = layout.write_document(&manifest_bytes)?;
    // The SBOM, as a referrer of the image manifest.
    let sbom_bytes = crate::sbom::spdx(
        packages,
        tree,
        &manifest,
        &created,
        image.name.as_deref().unwrap_or("image"),
    );
    let sbom_blob = layout.write_document(&sbom_bytes)?;
    let empty = layout.write_document(b"{}")?;
    let referrer_bytes = serde_json::to_vec(&json!({
        "schemaVersion": 2,
        "mediaType": MediaType::OciManifest.as_str(),
        "artifactType": SBOM_ARTIFACT_TYPE,
        "config": {
            "mediaType": MediaType::OciEmpty.as_str(),
            "digest": empty.to_string(),
            "size": 2,
        },
        "layers": [{
            "mediaType": SBOM_ARTIFACT_TYPE,
            "digest": sbom_blob.to_string(),
            "size": sbom_bytes.len(),
        }],
        "subject": {
            "mediaType": MediaType::OciManifest.as_str(),
            "digest": manifest.to_string(),
            "size": manifest_bytes.len(),
        },
        "annotations": { "org.opencontainers.image.created": created },
    }))
    .expect("json");
    let sbom = layout.write_document(&referrer_bytes)?;
    Ok(Documents {
        config,
        manifest,
        manifest_len: manifest_bytes.len() as u64,
        sbom,
        sbom_len: referrer_bytes.len() as u64,
    })
}

/// The builder's own output must pass the validator before it counts.
fn check_output(
    layout: &ImageLayout,
    image: &ImageFile,
    layers: &[BuiltLayer],
    out_dir: &Path,
) -> Result<(), BuildError> {
    // The builder's own output must pass the validator before it counts: every document is
    // read back against its digest, and the whole image is checked (media types, platform,
    // config, layer order, DiffIDs). The layers were hashed here as they were written (or,
    // for cached layers, read and checked on restore), compressed and uncompressed, so the
    // validator takes those digests and checks the layer files' presence and size instead
    // of reading every layer back and decompressing it a second time (`rdctl validate`
    // still does both).
    let report = validate_layout(
        layout,
        Some(&image.tags[0]),
        &ValidateOptions {
            deep: true,
            platform: Some(image.platform.clone()),
            known_diff_ids: layers
                .iter()
                .map(|l| (l.digest.clone(), l.diff_id.clone()))
                .collect(),
            written_blobs: layers.iter().map(|l| l.digest.clone()).collect(),
            ..ValidateOptions::default()
        },
    );
    if !report.report.is_ok() {
        return Err(BuildError::Invalid {
            path: out_dir.to_owned(),
            violations: report
                .report
                .errors()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n  "),
        });
    }
    Ok(())
}

/// Publishes finished layer blobs (sync, rename) on a thread of its own, in the order sent.
/// Dropped without [`Publisher::finish`] (a build that failed half way), it still waits for
/// the thread, so nothing is renamed into the layout after `build` returned.
struct Publisher {
    blobs: Option<std::sync::mpsc::Sender<StagedBlob>>,
    thread: Option<std::thread::JoinHandle<Result<(), LayoutError>>>,
}

impl Publisher {
    fn start() -> Publisher {
        let (tx, rx) = std::sync::mpsc::channel::<StagedBlob>();
        let thread = std::thread::spawn(move || {
            let mut result = Ok(());
            for blob in rx {
                // After a failure the rest are dropped unpublished (their temporary files go).
                if result.is_ok() {
                    result = blob.publish().map(drop).map_err(LayoutError::from);
                }
            }
            result
        });
        Publisher {
            blobs: Some(tx),
            thread: Some(thread),
        }
    }

    fn send(&self, blob: StagedBlob) {
        if let Some(tx) = &self.blobs {
            // The thread only ends once the sender is gone, so this cannot fail.
            let _ = tx.send(blob);
        }
    }

    /// Waits until every blob sent is in place; the first failure, if any.
    fn finish(mut self) -> Result<(), LayoutError> {
        self.blobs.take();
        match self.thread.take().map(std::thread::JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(panic)) => std::panic::resume_unwind(panic),
            None => Ok(()),
        }
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        self.blobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn config_json(image: &ImageFile, layers: &[BuiltLayer], created: &str) -> Vec<u8> {
    let c = &image.config;
    let mut cfg = serde_json::Map::new();
    if let Some(u) = &c.user {
        cfg.insert("User".into(), json!(u));
    }
    if !c.exposed_ports.is_empty() {
        let ports: serde_json::Map<String, Value> = c
            .exposed_ports
            .iter()
            .map(|p| {
                let p = if p.contains('/') {
                    p.clone()
                } else {
                    format!("{p}/tcp")
                };
                (p, json!({}))
            })
            .collect();
        cfg.insert("ExposedPorts".into(), Value::Object(ports));
    }
    if !c.env.is_empty() {
        cfg.insert(
            "Env".into(),
            json!(
                c.env
                    .iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
            ),
        );
    }
    if !c.entrypoint.is_empty() {
        cfg.insert("Entrypoint".into(), json!(c.entrypoint));
    }
    if !c.cmd.is_empty() {
        cfg.insert("Cmd".into(), json!(c.cmd));
    }
    if !c.volumes.is_empty() {
        let v: serde_json::Map<String, Value> =
            c.volumes.iter().map(|p| (p.clone(), json!({}))).collect();
        cfg.insert("Volumes".into(), Value::Object(v));
    }
    if let Some(w) = &c.working_dir {
        cfg.insert("WorkingDir".into(), json!(w));
    }
    let mut labels = c.labels.clone();
    if let Some(t) = c.stop_timeout {
        labels.insert(STOP_TIMEOUT_ANNOTATION.into(), t.to_string());
    }
    if !labels.is_empty() {
        cfg.insert("Labels".into(), json!(labels));
    }
    if let Some(s) = &c.stop_signal {
        cfg.insert("StopSignal".into(), json!(s));
    }
    let mut doc = json!({
        "created": created,
        "architecture": image.platform.architecture,
        "os": image.platform.os,
    });
    if let Some(v) = &image.platform.os_version {
        doc["os.version"] = json!(v);
    }
    if let Some(v) = &image.platform.variant {
        doc["variant"] = json!(v);
    }
    doc["config"] = Value::Object(cfg);
    doc["rootfs"] = json!({
        "type": "layers",
        "diff_ids": layers.iter().map(|l| l.diff_id.to_string()).collect::<Vec<_>>(),
    });
    doc["history"] = json!(
        layers
            .iter()
            .map(|l| json!({
                "created": created,
                "created_by": format!("rdctl build: {}", l.contents),
            }))
            .collect::<Vec<_>>()
    );
    serde_json::to_vec(&doc).expect("json")
}
