//! `rdctl worker status --packages`: the IPS packages each zone runs, for "which zones hold
//! package X" when an advisory lands.
//!
//! Read only, from what the worker already keeps: a zone's state record names the digest it
//! runs, and the content store holds that manifest (and, for an index, the platform manifest
//! that was pulled) and its config. `rdctl build` names every package of the image in the
//! manifest annotation `org.reddwarf.image.packages`, and per layer in the config `history`
//! (`rdctl build: <FMRI>`, `shared: <FMRI>…`), which is read when the annotation is missing.
//! No SBOM fetch and no network: the answer is what is on the node, even with the registry
//! down.

use std::path::{Path, PathBuf};

use serde::Serialize;
use validator::{Digest, Document, DocumentKind, MAX_MANIFEST_SIZE, check_document};

use crate::schedule::{WorkerError, status};

/// One zone's packages.
#[derive(Debug, Clone, Serialize)]
pub struct ZonePackages {
    /// The zone.
    pub zone: String,
    /// The image reference of its manifest.
    pub image: String,
    /// The digest it runs (what the reference resolved to), if it runs anything.
    pub digest: Option<Digest>,
    /// The package FMRIs, sorted, without duplicates.
    pub packages: Vec<String>,
    /// Why the packages could not be read (an image not built by rdctl has no package
    /// history; a store missing the config), when they could not.
    pub error: Option<String>,
}

/// The packages of every zone the worker's configuration names or has a record of.
pub fn zone_packages(config_path: &Path) -> Result<Vec<ZonePackages>, WorkerError> {
    let config = crate::WorkerConfig::load(config_path)?;
    let blobs = config.state_dir.join("content");
    let mut out = Vec::new();
    for row in status(config_path)? {
        let s = row.status;
        let mut zp = ZonePackages {
            zone: s.zone.clone(),
            image: s.image.clone(),
            digest: s.current_digest.clone(),
            packages: Vec::new(),
            error: None,
        };
        if let Some(d) = &s.current_digest {
            match packages_of(&blobs, d) {
                Ok(p) => zp.packages = p,
                Err(e) => zp.error = Some(e),
            }
        }
        out.push(zp);
    }
    Ok(out)
}

fn blob_path(root: &Path, d: &Digest) -> PathBuf {
    root.join("blobs")
        .join(d.algorithm().as_str())
        .join(d.encoded())
}

/// Reads a stored document whole, checking its digest (the store is trusted, but a record
/// pointing at the wrong bytes must not print another image's packages).
fn read(root: &Path, d: &Digest, limit: u64) -> Result<Vec<u8>, String> {
    let path = blob_path(root, d);
    let meta = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if meta.len() > limit {
        return Err(format!(
            "{}: {} bytes, more than {limit}",
            path.display(),
            meta.len()
        ));
    }
    let bytes = std::fs::read(&path).map_err(|e| format!("{}: {e}", path.display()))?;
    if Digest::of(d.algorithm(), &bytes) != *d {
        return Err(format!("{}: content does not match {d}", path.display()));
    }
    Ok(bytes)
}

fn packages_of(root: &Path, digest: &Digest) -> Result<Vec<String>, String> {
    let limit = MAX_MANIFEST_SIZE as u64;
    let bytes = read(root, digest, limit)?;
    let manifest = match check_document(&bytes, None, None, "stored document") {
        (_, Some(Document::Manifest(m))) => m,
        (_, Some(Document::Index(i))) => {
            // The worker pulled one platform's manifest: the child that is in the store.
            let child = i
                .manifests
                .iter()
                .find(|c| blob_path(root, &c.digest).is_file())
                .ok_or_else(|| format!("index {digest}: none of its manifests is in the store"))?;
            let bytes = read(root, &child.digest, limit)?;
            match check_document(
                &bytes,
                Some(DocumentKind::Manifest),
                None,
                "stored manifest",
            ) {
                (_, Some(Document::Manifest(m))) => m,
                _ => return Err(format!("{}: not a valid image manifest", child.digest)),
            }
        }
        _ => return Err(format!("{digest}: not a valid manifest or index")),
    };
    if let Some(listed) = manifest
        .annotations
        .get(registry_client::inspect::PACKAGES_ANNOTATION)
    {
        let mut packages: Vec<String> = listed
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty())
            .map(str::to_owned)
            .collect();
        packages.sort();
        packages.dedup();
        return Ok(packages);
    }
    let config = read(root, &manifest.config.digest, 16 << 20)?;
    let v: serde_json::Value = serde_json::from_slice(&config)
        .map_err(|e| format!("config {}: {e}", manifest.config.digest))?;
    let mut packages: Vec<String> = v["history"]
        .as_array()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .filter_map(|h| h["created_by"].as_str())
        .flat_map(registry_client::inspect::layer_packages)
        .collect();
    if packages.is_empty() {
        return Err(format!(
            "no package history: not built by rdctl build (config {})",
            manifest.config.digest
        ));
    }
    packages.sort();
    packages.dedup();
    Ok(packages)
}
