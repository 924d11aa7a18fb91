//! OCI image layouts on disk: `oci-layout`, `index.json`, `blobs/<alg>/<hex>`.
//!
//! This is the only module of the crate that touches the file system. Every write goes to an
//! exclusively created temporary file in the destination directory, is synced, and is renamed
//! into place, so a reader never sees a partial blob or index. A blob is renamed to its digest
//! only after that digest was computed over the bytes written (and, when the writer expected a
//! digest and size, compared with them).

use std::fs::{self, File};
use std::io::{self, Read, Write};
use std::path::{Path, PathBuf};

use crate::digest::{Algorithm, Digest};
use crate::verify::{DigestingWriter, VerifyError, VerifyingReader};

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

    /// The layout's root directory.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Where a blob lives. Safe because a [`Digest`] holds only lowercase hex.
    pub fn blob_path(&self, digest: &Digest) -> PathBuf {
        self.root
            .join("blobs")
            .join(digest.algorithm().as_str())
            .join(digest.encoded())
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

    /// Streams a blob into the layout, hashing as it goes, and publishes it under its digest.
    /// When `expected` is given the content must match it; otherwise the computed digest (with
    /// `algorithm`) names the blob. Returns digest and size.
    pub fn write_blob(
        &self,
        mut content: impl Read,
        algorithm: Algorithm,
        expected: Option<(&Digest, u64)>,
    ) -> Result<(Digest, u64), LayoutError> {
        let alg = expected.map_or(algorithm, |(d, _)| d.algorithm());
        let mut w = self.blob_writer(alg)?;
        io::copy(&mut content, &mut w).map_err(io_err("write blob into", &w.dir))?;
        match expected {
            Some((d, s)) => w.commit_verified(d, s).map(|()| (d.clone(), s)),
            None => w.commit(),
        }
    }

    /// A writer for a blob whose digest is known only at the end (a layer being compressed):
    /// the bytes are hashed as they are written to a temporary file in the layout, and
    /// [`BlobWriter::commit`] renames it to the digest computed in that same pass, so the
    /// content is never read back. Dropped without a commit, it leaves nothing behind.
    pub fn blob_writer(&self, algorithm: Algorithm) -> Result<BlobWriter, LayoutError> {
        let dir = self.root.join("blobs").join(algorithm.as_str());
        fs::create_dir_all(&dir).map_err(io_err("create directory", &dir))?;
        let tmp = temp_file_in(&dir)?;
        Ok(BlobWriter {
            layout: self.clone(),
            dir,
            inner: DigestingWriter::new(tmp, algorithm),
        })
    }

    /// Writes a small document blob and returns its digest.
    pub fn write_document(&self, bytes: &[u8]) -> Result<Digest, LayoutError> {
        let d = Digest::sha256(bytes);
        self.write_blob(bytes, Algorithm::Sha256, Some((&d, bytes.len() as u64)))?;
        Ok(d)
    }

    fn write_file_atomic(&self, name: &str, bytes: &[u8]) -> Result<(), LayoutError> {
        let dest = self.root.join(name);
        fs::create_dir_all(&self.root).map_err(io_err("create directory", &self.root))?;
        let mut tmp = temp_file_in(&self.root)?;
        tmp.write_all(bytes).map_err(io_err("write", tmp.path()))?;
        tmp.as_file()
            .sync_all()
            .map_err(io_err("sync", tmp.path()))?;
        tmp.persist(&dest)
            .map_err(|e| io_err("rename into place", &dest)(e.error))?;
        sync_dir(&self.root);
        Ok(())
    }
}

/// A blob being written into a layout; see [`ImageLayout::blob_writer`].
pub struct BlobWriter {
    layout: ImageLayout,
    dir: PathBuf,
    inner: DigestingWriter<tempfile::NamedTempFile>,
}

impl BlobWriter {
    /// Syncs the blob and renames it to the digest of the bytes written. Returns the digest
    /// and size.
    pub fn commit(self) -> Result<(Digest, u64), LayoutError> {
        let done = self.finish();
        let out = (done.digest.clone(), done.size);
        done.publish()?;
        Ok(out)
    }

    /// Ends the writing: the digest and size are known, the blob is not in the layout yet.
    /// [`FinishedBlob::publish`] syncs and renames it, possibly on another thread, so a caller
    /// can prepare what refers to the blob while the sync runs (an image builder writes its
    /// config and manifest meanwhile, and its `index.json` only after the publish).
    pub fn finish(self) -> FinishedBlob {
        let (tmp, digest, size) = self.inner.finish();
        FinishedBlob {
            layout: self.layout,
            dir: self.dir,
            tmp,
            digest,
            size,
        }
    }

    /// Like [`BlobWriter::commit`], but only when the bytes written have this digest and size.
    pub fn commit_verified(self, digest: &Digest, size: u64) -> Result<(), LayoutError> {
        let tmp = self
            .inner
            .verify(digest, size)
            .map_err(|source| LayoutError::Verify {
                root: self.layout.root.clone(),
                source,
            })?;
        Self::publish(&self.layout, &self.dir, tmp, digest)
    }

    fn publish(
        layout: &ImageLayout,
        dir: &Path,
        tmp: tempfile::NamedTempFile,
        digest: &Digest,
    ) -> Result<(), LayoutError> {
        // Renamed over a blob of the same digest that is already there, not skipped: the bytes
        // in hand were just hashed, the file there may be damaged, and a caller that validates
        // with `ValidateOptions::written_blobs` trusts what it wrote, not what it found.
        let dest = layout.blob_path(digest);
        tmp.as_file()
            .sync_all()
            .map_err(io_err("sync", tmp.path()))?;
        tmp.persist(&dest)
            .map_err(|e| io_err("rename into place", &dest)(e.error))?;
        sync_dir(dir);
        Ok(())
    }
}

/// A blob written in full and hashed, not yet in the layout; see [`BlobWriter::finish`].
/// Dropped without [`FinishedBlob::publish`], it leaves nothing behind.
pub struct FinishedBlob {
    layout: ImageLayout,
    dir: PathBuf,
    tmp: tempfile::NamedTempFile,
    digest: Digest,
    size: u64,
}

impl FinishedBlob {
    /// The digest of the bytes written.
    pub fn digest(&self) -> &Digest {
        &self.digest
    }

    /// The number of bytes written.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// Syncs the blob and renames it to its digest.
    pub fn publish(self) -> Result<(), LayoutError> {
        BlobWriter::publish(&self.layout, &self.dir, self.tmp, &self.digest)
    }
}

impl Write for BlobWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.inner.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// A temporary file that becomes a layout file by rename. Created 0644 less the umask, as any
/// other file the user writes: tempfile's default of 0600 would leave a layout that only its
/// builder can read (a registry, a web server or a colleague could not).
fn temp_file_in(dir: &Path) -> Result<tempfile::NamedTempFile, LayoutError> {
    let mut b = tempfile::Builder::new();
    b.prefix(".tmp-");
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        b.permissions(fs::Permissions::from_mode(0o644));
    }
    b.tempfile_in(dir)
        .map_err(io_err("create temporary file in", dir))
}

/// Makes a rename durable. Failure is not reported: the data is already published.
fn sync_dir(dir: &Path) {
    if let Ok(d) = File::open(dir) {
        let _ = d.sync_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let mut w = layout.blob_writer(Algorithm::Sha256).unwrap();
        w.write_all(b"layer").unwrap();
        let (l, _) = w.commit().unwrap();
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
        let mut w = layout.blob_writer(Algorithm::Sha256).unwrap();
        for c in data.chunks(7_777) {
            w.write_all(c).unwrap();
        }
        let (d, size) = w.commit().unwrap();
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
        let mut w = layout.blob_writer(Algorithm::Sha256).unwrap();
        w.write_all(b"abandoned").unwrap();
        drop(w);
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
}
