//! Air-gap bundles: one OCI layout per repository and `bundle.json`, the manifest of what the
//! bundle holds.
//!
//! A bundle may be signed: `bundle.json.sig` holds the base64 ECDSA-P256-SHA256 signature
//! (DER) over the exact bytes of `bundle.json`, the form `cosign sign-blob --key` writes, so
//! `cosign verify-blob --key K --signature bundle.json.sig bundle.json` checks it too. Since
//! `bundle.json` names the digest of every image and referrer, and every blob is verified
//! against the digests its manifest names as it is read, and an import copies only the
//! referrers and cosign tag manifests `bundle.json` lists ([`super::SyncItem::listed_referrers`]),
//! a verified `bundle.json` covers everything imported: a bundle changed consistently (new
//! blobs, new manifests, `bundle.json` rewritten to match) no longer verifies, and content
//! planted in a layout beside an untouched `bundle.json` is left behind.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::{SyncError, SyncItem};
use crate::transfer::CopyReport;

/// The name of a bundle's manifest.
pub const BUNDLE_MANIFEST: &str = "bundle.json";

/// The name of the signature of a bundle's manifest.
pub const BUNDLE_SIGNATURE: &str = "bundle.json.sig";

/// A public key that may sign bundles, with the file it came from (named in refusals).
#[derive(Debug, Clone)]
pub struct BundleKey {
    /// The key file, as given.
    pub source: String,
    /// The key.
    pub key: trust::VerifyingKey,
}

impl BundleKey {
    fn describe(&self) -> String {
        format!("{} ({})", self.source, self.key.key_id().short())
    }
}

/// Signs `DIR/bundle.json` as it is now: writes `DIR/bundle.json.sig` atomically.
pub fn sign_bundle(dir: &Path, key: &trust::SigningKey) -> Result<(), SyncError> {
    use base64::Engine as _;
    let path = dir.join(BUNDLE_MANIFEST);
    let bytes = read_limited(&path)?.ok_or_else(|| SyncError::Bundle {
        path: path.clone(),
        source: std::io::Error::new(std::io::ErrorKind::NotFound, "nothing to sign"),
    })?;
    let sig = base64::engine::general_purpose::STANDARD.encode(key.sign_der(&bytes));
    let sig_path = dir.join(BUNDLE_SIGNATURE);
    validator::write_file_atomic(&sig_path, sig.as_bytes()).map_err(|source| SyncError::Bundle {
        path: sig_path,
        source,
    })
}

/// `DIR/bundle.json` if it exists, read through the size limit.
fn read_limited(path: &Path) -> Result<Option<Vec<u8>>, SyncError> {
    use std::io::Read as _;
    let err = |source| SyncError::Bundle {
        path: path.to_owned(),
        source,
    };
    match std::fs::File::open(path) {
        Ok(f) => {
            let mut buf = Vec::new();
            f.take(MAX_BUNDLE_MANIFEST)
                .read_to_end(&mut buf)
                .map_err(err)?;
            Ok(Some(buf))
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(e)),
    }
}

/// The directory of a bundle that holds one layout per repository.
const BUNDLE_REPOS: &str = "repos";

/// The layout directory of `repository` in the bundle at `dir`.
pub fn bundle_layout_dir(dir: &Path, repository: &str) -> PathBuf {
    dir.join(BUNDLE_REPOS).join(repository.replace('/', "+"))
}

/// A bundle's manifest, `bundle.json`: what the bundle holds.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleManifest {
    /// Always 1.
    pub schema_version: u32,
    /// The images, sorted by repository and tag.
    pub images: Vec<BundleImage>,
}

/// One image of a bundle.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BundleImage {
    /// Its repository.
    pub repository: String,
    /// Its tag.
    pub tag: String,
    /// Its layout, relative to the bundle.
    pub layout: String,
    /// The tagged manifest or index.
    pub digest: String,
    /// Its media type.
    pub media_type: String,
    /// Its size.
    pub size: u64,
    /// The referrers and cosign tag manifests that came with it.
    #[serde(default)]
    pub referrers: Vec<String>,
}

/// Most bytes of a `bundle.json` read.
const MAX_BUNDLE_MANIFEST: u64 = 64 << 20;

impl BundleManifest {
    /// Reads `DIR/bundle.json` (an empty manifest when there is none yet).
    pub fn read(dir: &Path) -> Result<BundleManifest, SyncError> {
        let path = dir.join(BUNDLE_MANIFEST);
        match read_limited(&path)? {
            Some(text) => Self::parse(&path, &text),
            None => Ok(BundleManifest {
                schema_version: 1,
                images: Vec::new(),
            }),
        }
    }

    /// Reads `DIR/bundle.json` and checks `DIR/bundle.json.sig` over those same bytes with
    /// `keys` (one verifying is enough); refused when the signature is missing, unreadable or
    /// made by none of them, naming the keys and the files.
    pub fn read_verified(dir: &Path, keys: &[BundleKey]) -> Result<BundleManifest, SyncError> {
        use base64::Engine as _;
        let path = dir.join(BUNDLE_MANIFEST);
        let sig_path = dir.join(BUNDLE_SIGNATURE);
        let refuse = |reason: String| SyncError::BundleSignature {
            manifest: path.clone(),
            signature: sig_path.clone(),
            keys: keys.iter().map(BundleKey::describe).collect(),
            reason,
        };
        let text = read_limited(&path)?
            .ok_or_else(|| refuse("there is no bundle.json to verify".to_owned()))?;
        let sig = match read_limited(&sig_path)? {
            Some(s) => s,
            None => {
                return Err(refuse(
                    "the bundle is not signed (no bundle.json.sig)".to_owned(),
                ));
            }
        };
        let der = base64::engine::general_purpose::STANDARD
            .decode(String::from_utf8_lossy(&sig).trim())
            .map_err(|e| refuse(format!("bundle.json.sig is not base64: {e}")))?;
        if !keys.iter().any(|k| k.key.verify_der(&text, &der)) {
            return Err(refuse(
                "the signature does not verify with any of the keys: bundle.json was changed after signing, or another key signed it".to_owned(),
            ));
        }
        Self::parse(&path, &text)
    }

    fn parse(path: &Path, text: &[u8]) -> Result<BundleManifest, SyncError> {
        let err = |source| SyncError::Bundle {
            path: path.to_owned(),
            source,
        };
        let m: BundleManifest = serde_json::from_slice(text)
            .map_err(|e| err(std::io::Error::new(std::io::ErrorKind::InvalidData, e)))?;
        if m.schema_version != 1 {
            return Err(err(std::io::Error::new(
                std::io::ErrorKind::InvalidData,
                format!("schemaVersion {} (this rdctl reads 1)", m.schema_version),
            )));
        }
        Ok(m)
    }

    /// Writes `DIR/bundle.json` atomically (a temporary file renamed over it).
    pub fn write(&self, dir: &Path) -> Result<(), SyncError> {
        let path = dir.join(BUNDLE_MANIFEST);
        let err = |source| SyncError::Bundle {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(err)?;
        let mut bytes =
            serde_json::to_vec_pretty(self).map_err(|e| err(std::io::Error::other(e)))?;
        bytes.push(b'\n');
        validator::write_file_atomic(&path, &bytes).map_err(err)
    }

    /// Adds or replaces the entry of `image.repository:image.tag`, keeping the order sorted.
    pub fn record(&mut self, image: BundleImage) {
        self.images
            .retain(|i| !(i.repository == image.repository && i.tag == image.tag));
        self.images.push(image);
        self.images
            .sort_by(|a, b| (&a.repository, &a.tag).cmp(&(&b.repository, &b.tag)));
    }
}

/// Adds a copied image to its bundle's manifest and writes the manifest.
pub(super) fn record_in_bundle(
    bundles: &Mutex<BTreeMap<PathBuf, BundleManifest>>,
    dir: &Path,
    item: &SyncItem,
    r: &CopyReport,
) -> Result<(), SyncError> {
    let mut bundles = bundles.lock().expect("bundle manifests");
    let manifest = match bundles.get_mut(dir) {
        Some(m) => m,
        None => {
            let m = BundleManifest::read(dir)?;
            bundles.entry(dir.to_owned()).or_insert(m)
        }
    };
    let layout = Path::new(BUNDLE_REPOS)
        .join(item.destination_repository.replace('/', "+"))
        .display()
        .to_string();
    let mut referrers: Vec<String> = r.referrers.iter().map(|c| c.digest.to_string()).collect();
    referrers.sort();
    referrers.dedup();
    manifest.record(BundleImage {
        repository: item.destination_repository.clone(),
        tag: item.tag.as_str().to_owned(),
        layout,
        digest: r.root.digest.to_string(),
        media_type: r.root.media_type.clone(),
        size: r.root.size,
        referrers,
    });
    manifest.write(dir)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bundle_manifest_round_trips_and_replaces_entries() {
        let dir = tempfile::tempdir().unwrap();
        let mut m = BundleManifest::read(dir.path()).unwrap();
        assert!(m.images.is_empty());
        let img = |repo: &str, tag: &str, d: &str| BundleImage {
            repository: repo.into(),
            tag: tag.into(),
            layout: format!("repos/{repo}"),
            digest: d.into(),
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            size: 1,
            referrers: vec![],
        };
        m.record(img("b", "1", "sha256:1"));
        m.record(img("a", "1", "sha256:2"));
        m.record(img("b", "1", "sha256:3"));
        m.write(dir.path()).unwrap();
        let back = BundleManifest::read(dir.path()).unwrap();
        assert_eq!(back, m);
        assert_eq!(
            back.images
                .iter()
                .map(|i| (i.repository.as_str(), i.digest.as_str()))
                .collect::<Vec<_>>(),
            vec![("a", "sha256:2"), ("b", "sha256:3")]
        );
        std::fs::write(
            dir.path().join(BUNDLE_MANIFEST),
            b"{\"schemaVersion\":2,\"images\":[]}",
        )
        .unwrap();
        let e = BundleManifest::read(dir.path()).unwrap_err();
        assert!(e.to_string().contains("bundle.json"), "{e}");
    }
}
