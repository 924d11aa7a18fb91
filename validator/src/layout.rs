//! OCI image layouts on disk: `oci-layout`, `index.json`, `blobs/<alg>/<hex>`.
//!
//! With `ingest`, the only module of the crate that touches the file system. Blobs enter
//! `blobs/<alg>/<hex>` only through the ingest ([`ImageLayout::blobs`]: staged in
//! `<root>/ingest/`, hashed while written, size and digest checked, published without
//! clobbering). `index.json` and `oci-layout` are written through an exclusive temporary file,
//! synced and renamed, so a reader never sees a partial file; `index.json` entries are set
//! only through [`ImageLayout::edit_index`] ([`IndexEdit::set_tag`],
//! [`IndexEdit::add_untagged`]).

use std::collections::BTreeMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde_json::Value;

use crate::digest::{Algorithm, Digest};
use crate::ingest::{BlobDir, Existing, Ingest, IngestError, write_file_atomic};
use crate::names::Tag;
use crate::platform::Platform;
use crate::verify::{VerifyError, VerifyingReader};

/// The content of `oci-layout` this crate writes.
pub const LAYOUT_FILE_CONTENT: &str = r#"{"imageLayoutVersion":"1.0.0"}"#;

/// Errors of layout reads and writes.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LayoutError {
    /// A file of the layout could not be read or written.
    #[error("{path}: {op}")]
    Io {
        /// What was being done.
        op: &'static str,
        /// The file.
        path: PathBuf,
        /// The cause.
        #[source]
        source: io::Error,
    },
    /// `oci-layout` is missing, unreadable or names an unsupported version.
    #[error("{path}: not an OCI image layout ({reason})")]
    NotALayout {
        /// The `oci-layout` file.
        path: PathBuf,
        /// Why.
        reason: String,
    },
    /// A blob is not in the layout.
    #[error("blob {digest} is not in the layout at {root}")]
    BlobMissing {
        /// The layout root.
        root: PathBuf,
        /// The blob.
        digest: Digest,
    },
    /// Written content did not match what was expected.
    #[error("blob written to {root} did not verify")]
    Verify {
        /// The layout root.
        root: PathBuf,
        /// The mismatch.
        #[source]
        source: VerifyError,
    },
    /// A blob could not be staged or published.
    #[error(transparent)]
    Ingest(#[from] IngestError),
    /// `index.json` is not an image index this crate can edit.
    #[error("{path}: {reason}")]
    Index {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// A document is larger than the caller allows.
    #[error("blob {digest} is {size} bytes, more than the {limit} bytes allowed for a document")]
    TooLarge {
        /// The blob.
        digest: Digest,
        /// Its size.
        size: u64,
        /// The limit.
        limit: u64,
    },
}

fn io_err<'a>(op: &'static str, path: &'a Path) -> impl FnOnce(io::Error) -> LayoutError + 'a {
    move |source| LayoutError::Io {
        op,
        path: path.to_owned(),
        source,
    }
}

/// A layout being written by [`ImageLayout::create_staged`]: it appears at its path only on
/// [`NewLayout::commit`].
#[derive(Debug)]
pub struct NewLayout {
    layout: ImageLayout,
    /// Where it goes on commit; `None` when it was opened in place.
    target: Option<PathBuf>,
    keep_partial: bool,
}

impl NewLayout {
    /// The layout to write into (the staging sibling until committed).
    pub fn layout(&self) -> &ImageLayout {
        &self.layout
    }

    /// Where the layout will be once committed.
    pub fn target(&self) -> &Path {
        self.target.as_deref().unwrap_or(self.layout.root())
    }

    /// Moves the finished layout to its path and returns it there.
    pub fn commit(mut self) -> Result<ImageLayout, LayoutError> {
        let Some(target) = self.target.take() else {
            return Ok(self.layout.clone());
        };
        let staged = self.layout.root().to_owned();
        if let Some(parent) = target.parent() {
            sync_dir(parent);
        }
        fs::rename(&staged, &target)
            .map_err(io_err("move the finished layout into place", &target))?;
        if let Some(parent) = target.parent() {
            sync_dir(parent);
        }
        Ok(ImageLayout { root: target })
    }
}

impl Drop for NewLayout {
    fn drop(&mut self) {
        if self.target.is_some() && !self.keep_partial {
            let _ = fs::remove_dir_all(self.layout.root());
        }
    }
}

/// Best effort: a rename is durable once its directory is synced.
fn sync_dir(dir: &Path) {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if let Ok(f) = File::open(dir) {
        let _ = f.sync_all();
    }
}

/// An OCI image layout directory.
#[derive(Debug, Clone)]
pub struct ImageLayout {
    root: PathBuf,
}

impl ImageLayout {
    /// Opens an existing layout, checking `oci-layout`.
    pub fn open(root: impl Into<PathBuf>) -> Result<Self, LayoutError> {
        let root = root.into();
        let marker = root.join("oci-layout");
        let bytes = fs::read(&marker).map_err(|e| LayoutError::NotALayout {
            path: marker.clone(),
            reason: e.to_string(),
        })?;
        let v: serde_json::Value =
            crate::json::parse_strict(&bytes).map_err(|e| LayoutError::NotALayout {
                path: marker.clone(),
                reason: e.to_string(),
            })?;
        match v.get("imageLayoutVersion").and_then(|v| v.as_str()) {
            Some(ver) if ver == "1.0.0" || ver.starts_with("1.") => Ok(ImageLayout { root }),
            Some(ver) => Err(LayoutError::NotALayout {
                path: marker,
                reason: format!("imageLayoutVersion {ver:?} is not 1.x"),
            }),
            None => Err(LayoutError::NotALayout {
                path: marker,
                reason: "no imageLayoutVersion".into(),
            }),
        }
    }

    /// Creates a new layout (or opens an existing one) with an empty index.
    pub fn create(root: impl Into<PathBuf>) -> Result<Self, LayoutError> {
        let root = root.into();
        if root.join("oci-layout").exists() {
            return Self::open(root);
        }
        for alg in [Algorithm::Sha256, Algorithm::Sha512] {
            let dir = root.join("blobs").join(alg.as_str());
            fs::create_dir_all(&dir).map_err(io_err("create directory", &dir))?;
        }
        let layout = ImageLayout { root };
        layout.write_file_atomic(
            "index.json",
            br#"{"schemaVersion":2,"mediaType":"application/vnd.oci.image.index.v1+json","manifests":[]}"#,
        )?;
        layout.write_file_atomic("oci-layout", LAYOUT_FILE_CONTENT.as_bytes())?;
        Ok(layout)
    }

    /// Starts writing a layout at `root` so that a failure leaves nothing there that looks
    /// like a layout: when `root` is missing (or an empty directory), the layout is built in
    /// the hidden sibling `.<name>.partial` and [`NewLayout::commit`] renames it into place.
    /// An existing layout at `root` is opened and written in place (its blobs are
    /// content-addressed and its `index.json` changes only through the one writer, so a
    /// failure there adds unreferenced blobs at most).
    ///
    /// `keep_partial`: a failed copy keeps the sibling so a rerun resumes from the blobs it
    /// holds (`rdctl pull`); a failed build removes it (it has nothing worth resuming).
    pub fn create_staged(
        root: impl Into<PathBuf>,
        keep_partial: bool,
    ) -> Result<NewLayout, LayoutError> {
        let root = root.into();
        let empty_dir = fs::read_dir(&root).is_ok_and(|mut d| d.next().is_none());
        if root.join("oci-layout").exists() || (root.exists() && !empty_dir) {
            return Ok(NewLayout {
                layout: Self::create(&root)?,
                target: None,
                keep_partial,
            });
        }
        let name = root.file_name().ok_or_else(|| LayoutError::Io {
            op: "name a layout directory",
            path: root.clone(),
            source: io::Error::new(
                io::ErrorKind::InvalidInput,
                "the path has no final component",
            ),
        })?;
        let mut staged_name = std::ffi::OsString::from(".");
        staged_name.push(name);
        staged_name.push(".partial");
        let staged = root.with_file_name(staged_name);
        Ok(NewLayout {
            layout: Self::create(&staged)?,
            target: Some(root),
            keep_partial,
        })
    }

    /// The layout's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a blob lives. Safe because a [`Digest`] holds only lowercase hex.
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        crate::ingest::blob_path(&self.root, digest)
    }

    /// True when the blob file exists (not verified).
    pub fn has_blob(&self, digest: &Digest) -> bool {
        self.blob_path(digest).is_file()
    }

    /// Opens a blob for reading through a verifier: reading it to the end without an error
    /// proves size and digest.
    pub fn open_blob(
        &self,
        digest: &Digest,
        size: u64,
    ) -> Result<VerifyingReader<File>, LayoutError> {
        let path = self.blob_path(digest);
        match File::open(&path) {
            Ok(f) => Ok(VerifyingReader::new(f, digest.clone(), size)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(LayoutError::BlobMissing {
                root: self.root.clone(),
                digest: digest.clone(),
            }),
            Err(e) => Err(io_err("open blob", &path)(e)),
        }
    }

    /// Reads a small blob (a document) whole, verified, refusing one larger than `limit`.
    pub fn read_document(
        &self,
        digest: &Digest,
        size: u64,
        limit: u64,
    ) -> Result<Vec<u8>, LayoutError> {
        if size > limit {
            return Err(LayoutError::TooLarge {
                digest: digest.clone(),
                size,
                limit,
            });
        }
        let mut r = self.open_blob(digest, size)?;
        let mut out = Vec::with_capacity(size as usize);
        r.read_to_end(&mut out)
            .map_err(|e| match VerifyError::from_io(&e) {
                Some(v) => LayoutError::Verify {
                    root: self.root.clone(),
                    source: v.clone(),
                },
                None => io_err("read blob", &self.blob_path(digest))(e),
            })?;
        Ok(out)
    }

    /// Reads `index.json` raw.
    pub fn read_index_bytes(&self) -> Result<Vec<u8>, LayoutError> {
        let p = self.root.join("index.json");
        fs::read(&p).map_err(io_err("read", &p))
    }

    /// Writes `index.json` atomically.
    pub fn write_index_bytes(&self, bytes: &[u8]) -> Result<(), LayoutError> {
        self.write_file_atomic("index.json", bytes)
    }

    /// The layout's blobs, staged in `<root>/ingest/`: every blob enters the layout through
    /// [`BlobDir::ingest`] or [`BlobDir::ingest_unnamed`] (see the `ingest` module docs). A
    /// blob already there is checked, and replaced when damaged, so what was just hashed is
    /// what the layout holds.
    pub fn blobs(&self) -> BlobDir {
        BlobDir::new(&self.root, self.root.join("ingest")).on_existing(Existing::Check)
    }

    /// Opens the ingest of a blob whose digest and size are known (resumable; see
    /// [`Ingest::offset`]).
    pub fn ingest(&self, digest: &Digest, size: u64) -> Result<Ingest, LayoutError> {
        Ok(self.blobs().ingest(digest, size)?)
    }

    /// Streams a whole blob into the layout, hashing as it goes, and publishes it under its
    /// digest. When `expected` is given the content must match it (an earlier partial ingest
    /// of it is started over, since `content` starts at byte 0); otherwise the computed digest
    /// (with `algorithm`) names the blob. Returns digest and size.
    pub fn write_blob(
        &self,
        mut content: impl Read,
        algorithm: Algorithm,
        expected: Option<(&Digest, u64)>,
    ) -> Result<(Digest, u64), LayoutError> {
        let blobs = self.blobs();
        let mut w = match expected {
            Some((d, s)) => {
                let mut w = blobs.ingest(d, s)?;
                if w.offset() > 0 {
                    w.truncate()?;
                }
                w
            }
            None => blobs.ingest_unnamed(algorithm)?,
        };
        if let Err(e) = io::copy(&mut content, &mut w) {
            if let Some(v) = VerifyError::from_io(&e) {
                let source = v.clone();
                w.discard();
                return Err(LayoutError::Verify {
                    root: self.root.clone(),
                    source,
                });
            }
            return Err(io_err("write blob into", w.path())(e));
        }
        let staged = w.finish()?;
        let (digest, size) = (staged.digest().clone(), staged.size());
        match expected {
            Some((d, s)) => staged.commit(s, d),
            None => staged.publish(),
        }
        .map_err(|e| self.ingest_err(e))?;
        Ok((digest, size))
    }

    /// Writes a small document blob and returns its digest.
    pub fn write_document(&self, bytes: &[u8]) -> Result<Digest, LayoutError> {
        let d = Digest::sha256(bytes);
        self.write_blob(bytes, Algorithm::Sha256, Some((&d, bytes.len() as u64)))?;
        Ok(d)
    }

    /// A size or digest mismatch as [`LayoutError::Verify`], anything else as
    /// [`LayoutError::Ingest`].
    fn ingest_err(&self, e: IngestError) -> LayoutError {
        match e.verify_error() {
            Some(source) => LayoutError::Verify {
                root: self.root.clone(),
                source,
            },
            None => LayoutError::Ingest(e),
        }
    }

    fn write_file_atomic(&self, name: &str, bytes: &[u8]) -> Result<(), LayoutError> {
        let dest = self.root.join(name);
        fs::create_dir_all(&self.root).map_err(io_err("create directory", &self.root))?;
        write_file_atomic(&dest, bytes).map_err(io_err("write", &dest))
    }

    /// Reads `index.json`, lets `edit` change it through [`IndexEdit`] (entries it does not
    /// touch, and the index's other fields, are kept as they are), and writes it back
    /// atomically (temporary file, sync, rename). The one way `index.json` entries are set.
    pub fn edit_index(&self, edit: impl FnOnce(&mut IndexEdit)) -> Result<(), LayoutError> {
        let path = self.root.join("index.json");
        let bad = |reason: String| LayoutError::Index {
            path: path.clone(),
            reason,
        };
        let bytes = self.read_index_bytes()?;
        let mut index: Value = serde_json::from_slice(&bytes).map_err(|e| bad(e.to_string()))?;
        let obj = index
            .as_object_mut()
            .ok_or_else(|| bad("not a JSON object".to_owned()))?;
        let manifests = match obj.remove("manifests") {
            None | Some(Value::Null) => Vec::new(),
            Some(Value::Array(m)) => m,
            Some(_) => return Err(bad("manifests is not an array".to_owned())),
        };
        let mut e = IndexEdit { manifests };
        edit(&mut e);
        obj.insert("manifests".to_owned(), Value::Array(e.manifests));
        let out = serde_json::to_vec(&index).map_err(|e| bad(e.to_string()))?;
        self.write_index_bytes(&out)
    }

    /// Names `entry` by `tag` in `index.json` (see [`IndexEdit::set_tag`]).
    pub fn set_tag(&self, tag: &Tag, entry: IndexEntry) -> Result<(), LayoutError> {
        self.edit_index(|e| e.set_tag(tag, entry))
    }

    /// Adds `entry` to `index.json` without a tag (see [`IndexEdit::add_untagged`]).
    pub fn add_untagged(
        &self,
        entry: IndexEntry,
        replaces: Replaces<'_>,
    ) -> Result<(), LayoutError> {
        self.edit_index(|e| e.add_untagged(entry, replaces))
    }
}

/// The annotation that names an `index.json` entry (a tag).
pub const REF_NAME_ANNOTATION: &str = "org.opencontainers.image.ref.name";

/// An entry to put into `index.json`: a descriptor with its platform and annotations.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IndexEntry {
    /// The media type of what it names (`application/vnd.oci.image.manifest.v1+json`, ...).
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size.
    pub size: u64,
    /// The platform of the image it names, when it names one.
    pub platform: Option<Platform>,
    /// `artifactType`, for an artifact (an SBOM).
    pub artifact_type: Option<String>,
    /// Annotations (a tag's `org.opencontainers.image.ref.name` is added by
    /// [`IndexEdit::set_tag`]).
    pub annotations: BTreeMap<String, String>,
}

impl IndexEntry {
    /// An entry with no platform, artifact type or annotations.
    pub fn new(media_type: impl Into<String>, digest: Digest, size: u64) -> IndexEntry {
        IndexEntry {
            media_type: media_type.into(),
            digest,
            size,
            platform: None,
            artifact_type: None,
            annotations: BTreeMap::new(),
        }
    }

    fn to_json(&self) -> Value {
        let mut m = serde_json::Map::new();
        m.insert("mediaType".into(), Value::from(self.media_type.as_str()));
        m.insert("digest".into(), Value::from(self.digest.as_str()));
        m.insert("size".into(), Value::from(self.size));
        if let Some(p) = &self.platform {
            let mut pm = serde_json::Map::new();
            pm.insert("architecture".into(), Value::from(p.architecture.as_str()));
            pm.insert("os".into(), Value::from(p.os.as_str()));
            if let Some(v) = &p.os_version {
                pm.insert("os.version".into(), Value::from(v.as_str()));
            }
            if !p.os_features.is_empty() {
                pm.insert("os.features".into(), Value::from(p.os_features.clone()));
            }
            if let Some(v) = &p.variant {
                pm.insert("variant".into(), Value::from(v.as_str()));
            }
            m.insert("platform".into(), Value::Object(pm));
        }
        if let Some(t) = &self.artifact_type {
            m.insert("artifactType".into(), Value::from(t.as_str()));
        }
        if !self.annotations.is_empty() {
            let a = self
                .annotations
                .iter()
                .map(|(k, v)| (k.clone(), Value::from(v.as_str())))
                .collect();
            m.insert("annotations".into(), Value::Object(a));
        }
        Value::Object(m)
    }
}

/// Which entries an untagged entry replaces ([`IndexEdit::add_untagged`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Replaces<'a> {
    /// Untagged entries with the same digest (the same content is listed once).
    SameDigest,
    /// Those, and every entry whose annotation of this key has the new entry's value of it
    /// (the SBOM of an image's tags replaces the previous build's).
    SameAnnotation(&'a str),
}

/// The `manifests` of an `index.json` being edited; see [`ImageLayout::edit_index`].
#[derive(Debug)]
pub struct IndexEdit {
    manifests: Vec<Value>,
}

impl IndexEdit {
    /// Names `entry` by `tag`: an entry already named `tag` is removed, entries of other tags
    /// and untagged ones are kept, and `entry` (its platform and annotations, plus
    /// `org.opencontainers.image.ref.name` = `tag`) is appended.
    pub fn set_tag(&mut self, tag: &Tag, mut entry: IndexEntry) {
        self.manifests.retain(|e| ref_name(e) != Some(tag.as_str()));
        entry
            .annotations
            .insert(REF_NAME_ANNOTATION.to_owned(), tag.as_str().to_owned());
        self.manifests.push(entry.to_json());
    }

    /// Appends `entry` without a tag, after removing what it `replaces`; tagged entries are
    /// kept (unless [`Replaces::SameAnnotation`] matches them).
    pub fn add_untagged(&mut self, mut entry: IndexEntry, replaces: Replaces<'_>) {
        entry.annotations.remove(REF_NAME_ANNOTATION);
        let digest = entry.digest.as_str().to_owned();
        self.manifests.retain(|e| {
            let same_digest =
                ref_name(e).is_none() && e.get("digest").and_then(Value::as_str) == Some(&digest);
            let same_annotation = match replaces {
                Replaces::SameDigest => false,
                Replaces::SameAnnotation(key) => entry
                    .annotations
                    .get(key)
                    .is_some_and(|v| annotation(e, key) == Some(v.as_str())),
            };
            !same_digest && !same_annotation
        });
        self.manifests.push(entry.to_json());
    }

    /// Keeps only the entries `keep` accepts (raw JSON); returns how many were removed.
    pub fn retain(&mut self, mut keep: impl FnMut(&Value) -> bool) -> usize {
        let before = self.manifests.len();
        self.manifests.retain(|e| keep(e));
        before - self.manifests.len()
    }

    /// The entries as they stand (raw JSON, in order).
    pub fn entries(&self) -> &[Value] {
        &self.manifests
    }
}

fn annotation<'v>(entry: &'v Value, key: &str) -> Option<&'v str> {
    entry.get("annotations")?.get(key)?.as_str()
}

fn ref_name(entry: &Value) -> Option<&str> {
    annotation(entry, REF_NAME_ANNOTATION)
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn staged_layout_appears_only_on_commit() {
        let dir = tempfile::tempdir().unwrap();
        let target = dir.path().join("img");
        // A failure (drop without commit) leaves nothing, not even the sibling.
        {
            let new = ImageLayout::create_staged(&target, false).unwrap();
            assert!(new.layout().root().ends_with(".img.partial"));
            new.layout()
                .write_blob(&b"x"[..], Algorithm::Sha256, None)
                .unwrap();
        }
        assert!(!target.exists());
        assert!(!dir.path().join(".img.partial").exists());
        // Kept for a rerun, which resumes from its blobs.
        {
            let new = ImageLayout::create_staged(&target, true).unwrap();
            new.layout()
                .write_blob(&b"x"[..], Algorithm::Sha256, None)
                .unwrap();
        }
        assert!(!target.exists());
        let new = ImageLayout::create_staged(&target, true).unwrap();
        assert!(new.layout().has_blob(&Digest::sha256(b"x")));
        assert_eq!(new.target(), target);
        let layout = new.commit().unwrap();
        assert_eq!(layout.root(), target);
        assert!(layout.has_blob(&Digest::sha256(b"x")));
        assert!(!dir.path().join(".img.partial").exists());
        // An existing layout is written in place, and a failure leaves it there.
        {
            let again = ImageLayout::create_staged(&target, false).unwrap();
            assert_eq!(again.layout().root(), target);
        }
        assert!(target.join("oci-layout").is_file());
        // An empty directory is replaced on commit.
        let empty = dir.path().join("empty");
        fs::create_dir(&empty).unwrap();
        let new = ImageLayout::create_staged(&empty, false).unwrap();
        assert_ne!(new.layout().root(), empty);
        new.commit().unwrap();
        assert!(empty.join("oci-layout").is_file());
    }
    use crate::ingest::Published;

    #[test]
    fn create_write_read_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let layout = ImageLayout::create(dir.path().join("img")).unwrap();
        let d = layout.write_document(b"{}").unwrap();
        assert_eq!(d.as_str(), crate::document::EMPTY_DIGEST);
        assert_eq!(layout.read_document(&d, 2, 10).unwrap(), b"{}");
        assert!(matches!(
            layout.read_document(&d, 2, 1),
            Err(LayoutError::TooLarge { .. })
        ));
        let again = ImageLayout::open(layout.root()).unwrap();
        assert!(again.has_blob(&d));
        let no_tmp = fs::read_dir(layout.root().join("blobs/sha256"))
            .unwrap()
            .all(|e| !e.unwrap().file_name().to_string_lossy().starts_with(".tmp"));
        assert!(no_tmp, "temporary files left behind");
    }

    #[cfg(unix)]
    #[test]
    fn layout_files_are_readable_like_any_file_the_user_writes() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        // What the umask leaves of 0666, seen on a file made the ordinary way.
        let plain = dir.path().join("plain");
        fs::write(&plain, b"").unwrap();
        let plain = fs::metadata(&plain).unwrap().permissions().mode() & 0o777;
        let layout = ImageLayout::create(dir.path().join("img")).unwrap();
        let d = layout.write_document(b"{}").unwrap();
        let mut w = layout.blobs().ingest_unnamed(Algorithm::Sha256).unwrap();
        w.write_all(b"layer").unwrap();
        let staged = w.finish().unwrap();
        let l = staged.digest().clone();
        assert_eq!(staged.publish().unwrap(), Published::New);
        for p in [
            layout.blob_path(&d),
            layout.blob_path(&l),
            layout.root().join("index.json"),
            layout.root().join("oci-layout"),
        ] {
            let mode = fs::metadata(&p).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644 & plain, "{}", p.display());
        }
    }

    #[test]
    fn write_blob_refuses_mismatch_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let layout = ImageLayout::create(dir.path()).unwrap();
        let want = Digest::sha256(b"hello");
        let err = layout
            .write_blob(&b"hellO"[..], Algorithm::Sha256, Some((&want, 5)))
            .unwrap_err();
        assert!(matches!(err, LayoutError::Verify { .. }), "{err}");
        assert!(!layout.has_blob(&want));
        assert_eq!(
            fs::read_dir(dir.path().join("blobs/sha256"))
                .unwrap()
                .count(),
            0
        );
    }

    #[test]
    fn tampered_blob_fails_on_read() {
        let dir = tempfile::tempdir().unwrap();
        let layout = ImageLayout::create(dir.path()).unwrap();
        let d = layout.write_document(b"{\"a\":1}").unwrap();
        fs::write(layout.blob_path(&d), b"{\"a\":2}").unwrap();
        assert!(matches!(
            layout.read_document(&d, 7, 100),
            Err(LayoutError::Verify { .. })
        ));
    }

    #[test]
    fn blob_writer_names_the_blob_by_what_was_written() {
        let dir = tempfile::tempdir().unwrap();
        let layout = ImageLayout::create(dir.path().join("img")).unwrap();
        let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
        let mut w = layout.blobs().ingest_unnamed(Algorithm::Sha256).unwrap();
        for c in data.chunks(7_777) {
            w.write_all(c).unwrap();
        }
        let staged = w.finish().unwrap();
        let (d, size) = (staged.digest().clone(), staged.size());
        assert_eq!(staged.publish().unwrap(), Published::New);
        assert_eq!(d, Digest::sha256(&data));
        assert_eq!(size, data.len() as u64);
        let mut back = Vec::new();
        layout
            .open_blob(&d, size)
            .unwrap()
            .read_to_end(&mut back)
            .unwrap();
        assert!(back == data);
        // Dropped without a commit: nothing is published, no temporary file stays.
        let mut w = layout.blobs().ingest_unnamed(Algorithm::Sha256).unwrap();
        w.write_all(b"abandoned").unwrap();
        drop(w);
        assert_eq!(
            fs::read_dir(layout.root().join("ingest")).unwrap().count(),
            0
        );
        assert!(!layout.has_blob(&Digest::sha256(b"abandoned")));
        let names: Vec<String> = fs::read_dir(layout.root().join("blobs/sha256"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert_eq!(names, vec![d.encoded().to_owned()]);
    }

    #[test]
    fn open_refuses_non_layouts() {
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            ImageLayout::open(dir.path()),
            Err(LayoutError::NotALayout { .. })
        ));
        fs::write(
            dir.path().join("oci-layout"),
            r#"{"imageLayoutVersion":"2.0.0"}"#,
        )
        .unwrap();
        assert!(matches!(
            ImageLayout::open(dir.path()),
            Err(LayoutError::NotALayout { .. })
        ));
    }

    fn entry(digest: &Digest) -> IndexEntry {
        IndexEntry::new(crate::MediaType::OciManifest.as_str(), digest.clone(), 10)
    }

    fn manifests(layout: &ImageLayout) -> Vec<Value> {
        let v: Value = serde_json::from_slice(&layout.read_index_bytes().unwrap()).unwrap();
        v["manifests"].as_array().unwrap().clone()
    }

    #[test]
    fn set_tag_replaces_that_tag_and_keeps_every_other_entry() {
        let dir = tempfile::tempdir().unwrap();
        let layout = ImageLayout::create(dir.path()).unwrap();
        // An index with fields and entries this crate does not know: all are kept.
        let other = serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": Digest::sha256(b"other").as_str(),
            "size": 3,
            "platform": {"architecture": "arm64", "os": "linux"},
            "annotations": {"org.opencontainers.image.ref.name": "other", "x": "y"},
            "urls": ["https://example.org/other"],
        });
        let untagged = serde_json::json!({
            "mediaType": "application/vnd.oci.image.index.v1+json",
            "digest": Digest::sha256(b"untagged").as_str(),
            "size": 4,
        });
        let old = serde_json::json!({
            "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": Digest::sha256(b"old").as_str(),
            "size": 5,
            "annotations": {"org.opencontainers.image.ref.name": "1.0"},
        });
        layout
            .write_index_bytes(
                &serde_json::to_vec(&serde_json::json!({
                    "schemaVersion": 2,
                    "mediaType": "application/vnd.oci.image.index.v1+json",
                    "manifests": [other, old, untagged],
                    "annotations": {"top": "kept"},
                }))
                .unwrap(),
            )
            .unwrap();
        let new = Digest::sha256(b"new");
        let mut e = entry(&new);
        e.platform = Some(Platform {
            variant: Some("v1".into()),
            os_version: Some("5.11".into()),
            ..Platform::illumos_amd64()
        });
        e.annotations.insert("org.example.note".into(), "n".into());
        layout.set_tag(&Tag::parse("1.0").unwrap(), e).unwrap();
        let m = manifests(&layout);
        assert_eq!(m, [other.clone(), untagged.clone(), m[2].clone()]);
        assert_eq!(
            m[2],
            serde_json::json!({
                "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "digest": new.as_str(),
                "size": 10,
                "platform": {"architecture": "amd64", "os": "illumos", "os.version": "5.11", "variant": "v1"},
                "annotations": {"org.example.note": "n", "org.opencontainers.image.ref.name": "1.0"},
            })
        );
        let top: Value = serde_json::from_slice(&layout.read_index_bytes().unwrap()).unwrap();
        assert_eq!(top["annotations"]["top"], "kept");
        assert_eq!(top["schemaVersion"], 2);
        // A second tag on the same manifest is another entry; the first stays.
        layout
            .set_tag(&Tag::parse("latest").unwrap(), entry(&new))
            .unwrap();
        let m = manifests(&layout);
        let names: Vec<Option<&str>> = m.iter().map(ref_name).collect();
        assert_eq!(names, [Some("other"), None, Some("1.0"), Some("latest")]);
    }

    #[test]
    fn add_untagged_replaces_what_it_says_and_keeps_tags() {
        let dir = tempfile::tempdir().unwrap();
        let layout = ImageLayout::create(dir.path()).unwrap();
        let a = Digest::sha256(b"a");
        layout
            .set_tag(&Tag::parse("v1").unwrap(), entry(&a))
            .unwrap();
        layout
            .add_untagged(entry(&a), Replaces::SameDigest)
            .unwrap();
        layout
            .add_untagged(entry(&a), Replaces::SameDigest)
            .unwrap();
        let m = manifests(&layout);
        assert_eq!(m.len(), 2, "the tagged entry and one untagged: {m:?}");
        assert_eq!(ref_name(&m[0]), Some("v1"));
        assert_eq!(ref_name(&m[1]), None);
        // An SBOM of the tags "v1": the next build's replaces it, another image's is kept.
        let sbom = |d: &Digest, of: &str| IndexEntry {
            artifact_type: Some("application/spdx+json".into()),
            annotations: BTreeMap::from([("sbom-of".to_owned(), of.to_owned())]),
            ..entry(d)
        };
        let (s1, s2, s3) = (
            Digest::sha256(b"s1"),
            Digest::sha256(b"s2"),
            Digest::sha256(b"s3"),
        );
        for (d, of) in [(&s1, "v1"), (&s3, "v2"), (&s2, "v1")] {
            layout
                .add_untagged(sbom(d, of), Replaces::SameAnnotation("sbom-of"))
                .unwrap();
        }
        let m = manifests(&layout);
        let digests: Vec<&str> = m.iter().map(|e| e["digest"].as_str().unwrap()).collect();
        assert_eq!(digests, [a.as_str(), a.as_str(), s3.as_str(), s2.as_str()]);
        assert_eq!(m[3]["artifactType"], "application/spdx+json");
        assert_eq!(m[3]["annotations"]["sbom-of"], "v1");
    }

    #[test]
    fn an_index_that_is_not_an_index_is_refused_and_kept() {
        let dir = tempfile::tempdir().unwrap();
        let layout = ImageLayout::create(dir.path()).unwrap();
        for bad in [&b"[]"[..], br#"{"manifests": 3}"#, b"{"] {
            layout.write_index_bytes(bad).unwrap();
            let err = layout
                .set_tag(&Tag::parse("x").unwrap(), entry(&Digest::sha256(b"x")))
                .unwrap_err();
            assert!(
                matches!(&err, LayoutError::Index { path, .. } if path.ends_with("index.json")),
                "{err}"
            );
            assert_eq!(layout.read_index_bytes().unwrap(), bad);
        }
    }

    #[test]
    fn a_blob_is_staged_outside_blobs_and_a_damaged_one_is_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let layout = ImageLayout::create(dir.path()).unwrap();
        let d = Digest::sha256(b"{\"a\":1}");
        let mut w = layout.ingest(&d, 7).unwrap();
        assert!(w.path().starts_with(dir.path().join("ingest")));
        w.write_all(b"{\"a\"").unwrap();
        drop(w);
        assert!(
            !layout.has_blob(&d),
            "nothing under the digest before the commit"
        );
        // write_blob starts a whole stream over, whatever partial file there was.
        layout
            .write_blob(&b"{\"a\":1}"[..], Algorithm::Sha256, Some((&d, 7)))
            .unwrap();
        // A file damaged in place is replaced by the next write of those bytes.
        fs::write(layout.blob_path(&d), b"{\"a\":2}").unwrap();
        assert_eq!(layout.write_document(b"{\"a\":1}").unwrap(), d);
        assert_eq!(layout.read_document(&d, 7, 100).unwrap(), b"{\"a\":1}");
        assert_eq!(fs::read_dir(dir.path().join("ingest")).unwrap().count(), 0);
    }
}
