//! File repositories, version 4: reading them and publishing packages into them.
//!
//! Layout (under the repository root):
//! `pkg5.repository`, `publisher/<pub>/catalog/catalog.{attrs,base.C,dependency.C,summary.C}`,
//! `publisher/<pub>/pkg/<q(stem)>/<q(version)>` (manifests) and
//! `publisher/<pub>/file/<h[0:2]>/<h>` (gzip payloads named by the SHA-1 of their content).
//!
//! Publishers of one publisher's catalog are serialised by an advisory lock (threads and
//! processes alike); every file the writer creates appears atomically (temporary file and
//! rename), so readers never see partial files.

use std::fs::{self, File};
use std::io::{self, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use crate::action::{Action, ActionKind};
use crate::catalog::{
    Catalog, CatalogAttrs, CatalogEntry, CatalogError, CatalogPart, PartInfo, UpdateLog, UpdateOp,
    catalog_time, update_log_name,
};
use crate::config::{IniError, IniFile};
use crate::elf::{ElfError, ElfInfo};
use crate::fmri::{Fmri, FmriError, valid_publisher};
use crate::manifest::{Manifest, ManifestError};
use crate::payload::{Check, HashAlg, PayloadError, PayloadHashes, compress, hash_hex};
use crate::version::{Timestamp, Version};

mod publish;
mod write;

pub(crate) use write::{create_dirs, set_file_mode, write_atomic, write_renamed};

/// Largest manifest or catalog file this reader loads into memory.
pub const MAX_METADATA_BYTES: u64 = 256 << 20;

/// "publishers a, b" or "no publishers", for errors naming what a repository serves.
pub(crate) fn served_list(served: &[String]) -> String {
    match served {
        [] => "no publishers".into(),
        [one] => format!("publisher {one}"),
        many => format!("publishers {}", many.join(", ")),
    }
}

/// Errors from reading or writing a repository. Each names the repository path, package or
/// file involved.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum RepoError {
    /// A file or directory could not be read or written.
    #[error("{path}: i/o error")]
    Io {
        /// The path involved.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The directory is not a version 4 repository.
    #[error("{path}: {message}")]
    NotARepository {
        /// The repository root.
        path: PathBuf,
        /// Why not.
        message: String,
    },
    /// `pkg5.repository` is malformed.
    #[error("invalid repository configuration")]
    Config(#[from] IniError),
    /// A catalog file is malformed or its signature does not match.
    #[error("publisher {publisher}: bad catalog")]
    Catalog {
        /// The publisher.
        publisher: String,
        /// The catalog error (names the file).
        #[source]
        source: CatalogError,
    },
    /// `[publisher] prefix` is empty and the repository has several publishers: which one
    /// a pattern without a publisher means cannot be told.
    #[error(
        "{path}: no default publisher ([publisher] prefix is empty) and the repository has {}; \
         name one in the pattern (pkg://PUBLISHER/NAME)",
        served_list(served)
    )]
    NoDefaultPublisher {
        /// The repository root.
        path: PathBuf,
        /// The publishers it has.
        served: Vec<String>,
    },
    /// The publisher is not in the repository.
    #[error(
        "{path}: no publisher {publisher}; the repository has {}",
        served_list(served)
    )]
    UnknownPublisher {
        /// The repository root.
        path: PathBuf,
        /// The publisher.
        publisher: String,
        /// The publishers it does have.
        served: Vec<String>,
    },
    /// The package is not in the catalog or has no manifest.
    #[error("package {fmri} not found")]
    PackageNotFound {
        /// The package.
        fmri: String,
    },
    /// The manifest file's SHA-1 differs from the catalog's `signature-sha-1`.
    #[error("package {fmri}: manifest {path} is corrupt: sha-1 {actual}, catalog says {expected}")]
    ManifestCorrupt {
        /// The package.
        fmri: String,
        /// The manifest file.
        path: PathBuf,
        /// The catalog's value.
        expected: String,
        /// The file's SHA-1.
        actual: String,
    },
    /// The manifest does not parse.
    #[error("package {fmri}: manifest {path} is invalid")]
    ManifestInvalid {
        /// The package.
        fmri: String,
        /// The manifest file.
        path: PathBuf,
        /// The parse error (names line and column).
        #[source]
        source: ManifestError,
    },
    /// A payload is missing or fails verification.
    #[error("package {fmri}: payload for {action} ({path})")]
    Payload {
        /// The package.
        fmri: String,
        /// The action, e.g. `file usr/bin/ls`.
        action: String,
        /// The payload file.
        path: PathBuf,
        /// What is wrong with it.
        #[source]
        source: Box<PayloadError>,
    },
    /// A payload file is missing from the repository.
    #[error("package {fmri}: payload for {action} missing: {path}")]
    PayloadMissing {
        /// The package.
        fmri: String,
        /// The action.
        action: String,
        /// Where it should be.
        path: PathBuf,
    },
    /// The manifest to publish is not publishable.
    #[error("cannot publish {what}: {message}")]
    Publish {
        /// The manifest or package.
        what: String,
        /// Why.
        message: String,
    },
    /// An FMRI is malformed.
    #[error(transparent)]
    Fmri(#[from] FmriError),
}

fn io_err(path: &Path) -> impl FnOnce(io::Error) -> RepoError + '_ {
    move |source| RepoError::Io {
        path: path.to_owned(),
        source,
    }
}

fn read_limited(path: &Path) -> Result<Vec<u8>, RepoError> {
    let f = File::open(path).map_err(io_err(path))?;
    let mut buf = Vec::new();
    f.take(MAX_METADATA_BYTES + 1)
        .read_to_end(&mut buf)
        .map_err(io_err(path))?;
    if buf.len() as u64 > MAX_METADATA_BYTES {
        return Err(RepoError::Io {
            path: path.to_owned(),
            source: io::Error::new(io::ErrorKind::InvalidData, "file too large"),
        });
    }
    Ok(buf)
}

/// A version 4 file repository.
#[derive(Debug, Clone)]
pub struct FileRepo {
    root: PathBuf,
    config: IniFile,
}

/// A package in a catalog: its FMRI and the manifest SHA-1 the catalog records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PackageRef {
    /// The FMRI, with publisher and full version.
    pub fmri: Fmri,
    /// `signature-sha-1` from the base part, if present.
    pub manifest_sha1: Option<String>,
}

impl FileRepo {
    /// Opens an existing repository, checking it is version 4 (`[repository] version = 4`,
    /// or no version but a `publisher/` directory, as pkg decides).
    pub fn open(root: impl AsRef<Path>) -> Result<Self, RepoError> {
        let root = root.as_ref().to_owned();
        let cfg_path = root.join("pkg5.repository");
        let text = match fs::read_to_string(&cfg_path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Err(RepoError::NotARepository {
                    path: root,
                    message: "no pkg5.repository".into(),
                });
            }
            Err(e) => return Err(io_err(&cfg_path)(e)),
        };
        let config = IniFile::parse(&cfg_path.display().to_string(), &text)?;
        let version = match config.get("repository", "version") {
            Some(v) => v.to_owned(),
            None if root.join("publisher").is_dir() => "4".to_owned(),
            None => "3".to_owned(),
        };
        if version != "4" {
            return Err(RepoError::NotARepository {
                path: root,
                message: format!("repository version {version} is not supported (only 4)"),
            });
        }
        Ok(Self { root, config })
    }

    /// Creates a new, empty version 4 repository with `publisher` as its default
    /// publisher, or opens the existing one at `root`.
    pub fn create(root: impl AsRef<Path>, publisher: &str) -> Result<Self, RepoError> {
        let root = root.as_ref();
        if root.join("pkg5.repository").exists() {
            return Self::open(root);
        }
        if !valid_publisher(publisher) {
            return Err(RepoError::Publish {
                what: root.display().to_string(),
                message: format!("invalid publisher name {publisher:?}"),
            });
        }
        let mut ini = IniFile::new();
        ini.set("publisher", "prefix", publisher);
        ini.set("repository", "version", "4");
        // What `pkgrepo create` writes: pkg's default trust-anchor directory.
        ini.set("repository", "trust-anchor-directory", "/etc/ssl/pkg/");
        ini.set("repository", "signature-required-names", "[]");
        ini.set("repository", "check-certificate-revocation", "False");
        ini.set("CONFIGURATION", "version", "4");
        create_dirs(&root.join("publisher").join(publisher))?;
        write_atomic(&root.join("pkg5.repository"), ini.to_string().as_bytes())?;
        Self::open(root)
    }

    /// The repository root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `[publisher] prefix`: the default publisher.
    pub fn default_publisher(&self) -> Option<&str> {
        self.config
            .get("publisher", "prefix")
            .filter(|p| !p.is_empty())
    }

    /// The publisher for packages and requests that name none: `[publisher] prefix`, else
    /// the repository's only publisher (`pkgrepo create` leaves the prefix empty and
    /// `pkgsend publish` keeps it so); `None` when it has no publisher at all. Several
    /// publishers and no prefix is [`RepoError::NoDefaultPublisher`]: an empty answer would
    /// read as an empty repository.
    pub fn resolved_default_publisher(&self) -> Result<Option<String>, RepoError> {
        if let Some(p) = self.default_publisher() {
            return Ok(Some(p.to_owned()));
        }
        let mut served = self.publishers()?;
        match served.len() {
            0 | 1 => Ok(served.pop()),
            _ => Err(RepoError::NoDefaultPublisher {
                path: self.root.clone(),
                served,
            }),
        }
    }

    /// Publishers present under `publisher/`, sorted.
    pub fn publishers(&self) -> Result<Vec<String>, RepoError> {
        let dir = self.root.join("publisher");
        let mut out = Vec::new();
        let rd = match fs::read_dir(&dir) {
            Ok(rd) => rd,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
            Err(e) => return Err(io_err(&dir)(e)),
        };
        for e in rd {
            let e = e.map_err(io_err(&dir))?;
            if e.path().is_dir()
                && let Some(name) = e.file_name().to_str()
                && valid_publisher(name)
            {
                out.push(name.to_owned());
            }
        }
        out.sort();
        Ok(out)
    }

    fn pub_dir(&self, publisher: &str) -> Result<PathBuf, RepoError> {
        let dir = self.root.join("publisher").join(publisher);
        if !valid_publisher(publisher) || !dir.is_dir() {
            return Err(RepoError::UnknownPublisher {
                path: self.root.clone(),
                publisher: publisher.to_owned(),
                served: self.publishers().unwrap_or_default(),
            });
        }
        Ok(dir)
    }

    /// The path of a catalog file of `publisher`.
    pub fn catalog_path(&self, publisher: &str, name: &str) -> Result<PathBuf, RepoError> {
        Ok(self.pub_dir(publisher)?.join("catalog").join(name))
    }

    /// `catalog.attrs` of `publisher` (signature checked), or `None` when the publisher has
    /// no catalog yet.
    pub fn catalog_attrs(&self, publisher: &str) -> Result<Option<CatalogAttrs>, RepoError> {
        let path = self
            .pub_dir(publisher)?
            .join("catalog")
            .join("catalog.attrs");
        if !path.exists() {
            return Ok(None);
        }
        CatalogAttrs::parse(&read_limited(&path)?)
            .map(Some)
            .map_err(|source| RepoError::Catalog {
                publisher: publisher.to_owned(),
                source,
            })
    }

    /// Reads the catalog of `publisher`: `catalog.attrs` and every part it lists, verifying
    /// signatures where present. A publisher without a catalog has an empty one.
    pub fn catalog(&self, publisher: &str) -> Result<Catalog, RepoError> {
        let dir = self.pub_dir(publisher)?.join("catalog");
        let cat_err = |source| RepoError::Catalog {
            publisher: publisher.to_owned(),
            source,
        };
        let attrs_path = dir.join("catalog.attrs");
        if !attrs_path.exists() {
            return Ok(Catalog::default());
        }
        let attrs = CatalogAttrs::parse(&read_limited(&attrs_path)?).map_err(cat_err)?;
        let mut catalog = Catalog {
            created: Some(attrs.created.clone()),
            ..Catalog::default()
        };
        for (name, info) in &attrs.parts {
            let bytes = read_limited(&dir.join(name))?;
            if let Some(sig) = &info.signature_sha1 {
                // attrs records each part's signature: check the part's unsigned text.
                let text = String::from_utf8_lossy(&bytes);
                let actual = crate::catalog::unsigned_sha1(&text)
                    .unwrap_or_else(|| hash_hex(HashAlg::Sha1, text.as_bytes()));
                if &actual != sig {
                    return Err(cat_err(CatalogError::Signature {
                        file: name.clone(),
                        expected: sig.clone(),
                        actual,
                    }));
                }
            }
            let part = CatalogPart::parse(name, &bytes).map_err(cat_err)?;
            match name.as_str() {
                "catalog.base.C" => catalog.base = part,
                "catalog.dependency.C" => catalog.dependency = part,
                "catalog.summary.C" => catalog.summary = part,
                _ => {} // other locales are not needed here
            }
        }
        Ok(catalog)
    }

    /// Every package version in `publisher`'s catalog, in catalog order.
    pub fn packages(&self, publisher: &str) -> Result<Vec<PackageRef>, RepoError> {
        let catalog = self.catalog(publisher)?;
        catalog
            .base
            .entries()
            .iter()
            .map(|e: &CatalogEntry| {
                Ok(PackageRef {
                    fmri: e.fmri()?,
                    manifest_sha1: e.signature_sha1().map(str::to_owned),
                })
            })
            .collect()
    }

    /// Finds the catalogued package matching `pattern` (stem and possibly partial version):
    /// the newest matching version, in the pattern's publisher or the default publisher.
    pub fn resolve(&self, pattern: &Fmri) -> Result<PackageRef, RepoError> {
        PackageRepository::find(self, pattern)?.ok_or_else(|| RepoError::PackageNotFound {
            fmri: pattern.to_string(),
        })
    }

    /// Where the manifest of a fully versioned FMRI lives.
    pub fn manifest_path(&self, fmri: &Fmri) -> Result<PathBuf, RepoError> {
        let publisher = fmri
            .publisher()
            .or(self.default_publisher())
            .ok_or_else(|| RepoError::PackageNotFound {
                fmri: fmri.to_string(),
            })?;
        let rel = fmri.dir_path().ok_or_else(|| RepoError::PackageNotFound {
            fmri: fmri.to_string(),
        })?;
        Ok(self.pub_dir(publisher)?.join("pkg").join(rel))
    }

    /// The manifest bytes of a catalogued package, checked against the catalog's SHA-1.
    pub fn manifest_bytes(&self, package: &PackageRef) -> Result<Vec<u8>, RepoError> {
        let path = self.manifest_path(&package.fmri)?;
        let bytes = match read_limited(&path) {
            Err(RepoError::Io { source, .. }) if source.kind() == io::ErrorKind::NotFound => {
                return Err(RepoError::PackageNotFound {
                    fmri: package.fmri.to_string(),
                });
            }
            r => r?,
        };
        if let Some(expected) = &package.manifest_sha1 {
            let actual = hash_hex(HashAlg::Sha1, &bytes);
            if &actual != expected {
                return Err(RepoError::ManifestCorrupt {
                    fmri: package.fmri.to_string(),
                    path,
                    expected: expected.clone(),
                    actual,
                });
            }
        }
        Ok(bytes)
    }

    /// The parsed manifest of a catalogued package (checked as [`FileRepo::manifest_bytes`]).
    pub fn manifest(&self, package: &PackageRef) -> Result<Manifest, RepoError> {
        let bytes = self.manifest_bytes(package)?;
        let path = self.manifest_path(&package.fmri)?;
        Manifest::parse_bytes(&bytes).map_err(|source| RepoError::ManifestInvalid {
            fmri: package.fmri.to_string(),
            path,
            source,
        })
    }

    /// Where a payload named `hash` of `publisher` is stored: the publisher's `file/` store,
    /// else the shared top-level `file/` store when the file is there.
    pub fn payload_path(&self, publisher: &str, hash: &str) -> Result<PathBuf, RepoError> {
        // Payload names are hex digests; anything else could name a path outside the store.
        if hash.len() < 2 || !hash.bytes().all(|c| c.is_ascii_hexdigit()) {
            return Err(RepoError::Io {
                path: self.root.join("publisher").join(publisher).join("file"),
                source: io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!("invalid payload name {hash:?}"),
                ),
            });
        }
        let rel = Path::new(&hash[..2]).join(hash);
        let own = self.pub_dir(publisher)?.join("file").join(&rel);
        let shared = self.root.join("file").join(&rel);
        Ok(if !own.exists() && shared.exists() {
            shared
        } else {
            own
        })
    }

    /// Opens the stored (gzip) payload of a `file`, `license` or `signature` action.
    pub fn open_payload(
        &self,
        package: &Fmri,
        action: &Action,
    ) -> Result<(PayloadHashes, PathBuf, File), RepoError> {
        let publisher = package
            .publisher()
            .or(self.default_publisher())
            .unwrap_or("");
        let what = action_name(action);
        let hashes = PayloadHashes::from_action(action).map_err(|source| RepoError::Payload {
            fmri: package.to_string(),
            action: what.clone(),
            path: PathBuf::new(),
            source: Box::new(source),
        })?;
        let path = self.payload_path(publisher, &hashes.name)?;
        match File::open(&path) {
            Ok(f) => Ok((hashes, path, f)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Err(RepoError::PayloadMissing {
                fmri: package.to_string(),
                action: what,
                path,
            }),
            Err(e) => Err(io_err(&path)(e)),
        }
    }

    /// Streams the verified, decompressed content of an action's payload into `out`. On
    /// error, whatever was written to `out` must be discarded. The content is checked
    /// against its best hash ([`Check::Content`]): the stored gzip file is local and only
    /// its content is used, so its compressed hash is checked by [`FileRepo::verify`], not
    /// on every read.
    pub fn fetch_payload<W: Write>(
        &self,
        package: &Fmri,
        action: &Action,
        out: W,
    ) -> Result<u64, RepoError> {
        self.read_payload(package, action, Check::Content, out)
    }

    /// [`FileRepo::fetch_payload`] member by member: the stored gzip members' raw deflate data
    /// and the verified content go to `sink` (see [`PayloadHashes::splice_checked`]). On
    /// error, whatever `sink` received must be discarded.
    pub fn splice_payload(
        &self,
        package: &Fmri,
        action: &Action,
        sink: &mut dyn crate::GzipSink,
    ) -> Result<u64, RepoError> {
        let (hashes, path, file) = self.open_payload(package, action)?;
        hashes
            .splice_checked(Check::Content, BufReader::new(file), sink)
            .map_err(|source| RepoError::Payload {
                fmri: package.to_string(),
                action: action_name(action),
                path,
                source: Box::new(source),
            })
    }

    fn read_payload<W: Write>(
        &self,
        package: &Fmri,
        action: &Action,
        check: Check,
        out: W,
    ) -> Result<u64, RepoError> {
        let (hashes, path, file) = self.open_payload(package, action)?;
        hashes
            .verify_checked(check, BufReader::new(file), out)
            .map_err(|source| RepoError::Payload {
                fmri: package.to_string(),
                action: action_name(action),
                path,
                source: Box::new(source),
            })
    }

    /// Checks every catalogued package of `publisher` like `pkgrepo verify`: the manifest
    /// exists, matches the catalog's SHA-1 and parses, and every payload exists and verifies.
    /// Returns every problem found (empty when the repository is sound).
    pub fn verify(&self, publisher: &str) -> Result<Vec<RepoError>, RepoError> {
        let mut problems = Vec::new();
        for package in self.packages(publisher)? {
            let manifest = match self.manifest(&package) {
                Ok(m) => m,
                Err(e) => {
                    problems.push(e);
                    continue;
                }
            };
            for a in manifest.actions().iter().filter(|a| a.kind().has_payload()) {
                if a.kind() == ActionKind::Signature {
                    continue; // certificates are not content payloads
                }
                // The stored file is what is checked here: every hash, the compressed too.
                if let Err(e) = self.read_payload(&package.fmri, a, Check::Stored, io::sink()) {
                    problems.push(e);
                }
            }
        }
        Ok(problems)
    }
}

/// `file usr/bin/x`, for errors about one action.
fn action_name(a: &Action) -> String {
    format!("{} {}", a.kind(), a.key().unwrap_or("?"))
}

/// What a build needs from a package repository, whether a [`FileRepo`] or a depot reached
/// with [`crate::DepotClient`].
pub trait PackageRepository {
    /// The repository's error type.
    type Error: std::error::Error + Send + Sync + 'static;

    /// The publisher used for FMRIs that name none (`None`: the repository has none). An
    /// error reading it is an error, never "no publisher": that would read as an empty
    /// repository.
    fn default_publisher(&self) -> Result<Option<String>, Self::Error>;

    /// Every package version in `publisher`'s catalog.
    fn packages(&self, publisher: &str) -> Result<Vec<PackageRef>, Self::Error>;

    /// The raw manifest of a package, checked against the catalog's SHA-1.
    fn manifest_bytes(&self, package: &PackageRef) -> Result<Vec<u8>, Self::Error>;

    /// The parsed manifest of a package.
    fn manifest(&self, package: &PackageRef) -> Result<Manifest, Self::Error>;

    /// Writes the verified, decompressed payload of a `file` or `license` action of
    /// `package` to `out`. On error, whatever was written must be discarded.
    fn payload(
        &self,
        package: &Fmri,
        action: &Action,
        out: &mut dyn Write,
    ) -> Result<u64, Self::Error>;

    /// The newest catalogued package matching `pattern` (stem, and version by pkg's prefix
    /// rule), in the pattern's publisher or the default one; `None` when nothing matches.
    fn find(&self, pattern: &Fmri) -> Result<Option<PackageRef>, Self::Error> {
        let publisher = match pattern.publisher() {
            Some(p) => Some(p.to_owned()),
            None => self.default_publisher()?,
        };
        let Some(publisher) = publisher else {
            return Ok(None);
        };
        let Ok(pattern) = pattern.clone().with_publisher(Some(&publisher)) else {
            return Ok(None);
        };
        Ok(self
            .packages(&publisher)?
            .into_iter()
            .filter(|p| p.fmri.matches(&pattern))
            .max_by(|a, b| a.fmri.version().cmp(&b.fmri.version())))
    }

    /// Every catalogued version matching any of `patterns` (as in [`PackageRepository::find`]),
    /// or every package of the default publisher when `patterns` is empty; sorted by
    /// publisher, stem and version, without duplicates.
    fn matching(&self, patterns: &[Fmri]) -> Result<Vec<PackageRef>, Self::Error> {
        // Asked only when some pattern (or the lack of any) needs it.
        let default = if patterns.iter().all(|p| p.publisher().is_some()) && !patterns.is_empty() {
            None
        } else {
            self.default_publisher()?
        };
        let mut wanted: Vec<(String, Option<Fmri>)> = Vec::new();
        if patterns.is_empty() {
            wanted.extend(default.clone().map(|p| (p, None)));
        }
        for pattern in patterns {
            let Some(publisher) = pattern.publisher().map(str::to_owned).or(default.clone()) else {
                continue;
            };
            if let Ok(p) = pattern.clone().with_publisher(Some(&publisher)) {
                wanted.push((publisher, Some(p)));
            }
        }
        let mut catalogs: std::collections::BTreeMap<String, Vec<PackageRef>> =
            std::collections::BTreeMap::new();
        let mut out = Vec::new();
        for (publisher, pattern) in wanted {
            if !catalogs.contains_key(&publisher) {
                let packages = self.packages(&publisher)?;
                catalogs.insert(publisher.clone(), packages);
            }
            out.extend(
                catalogs[&publisher]
                    .iter()
                    .filter(|p| pattern.as_ref().is_none_or(|pat| p.fmri.matches(pat)))
                    .cloned(),
            );
        }
        out.sort_by(|a, b| {
            (a.fmri.publisher(), a.fmri.stem(), a.fmri.version()).cmp(&(
                b.fmri.publisher(),
                b.fmri.stem(),
                b.fmri.version(),
            ))
        });
        out.dedup_by(|a, b| a.fmri.to_string() == b.fmri.to_string());
        Ok(out)
    }
}

impl PackageRepository for FileRepo {
    type Error = RepoError;

    fn default_publisher(&self) -> Result<Option<String>, RepoError> {
        self.resolved_default_publisher()
    }

    fn packages(&self, publisher: &str) -> Result<Vec<PackageRef>, RepoError> {
        FileRepo::packages(self, publisher)
    }

    fn manifest_bytes(&self, package: &PackageRef) -> Result<Vec<u8>, RepoError> {
        FileRepo::manifest_bytes(self, package)
    }

    fn manifest(&self, package: &PackageRef) -> Result<Manifest, RepoError> {
        FileRepo::manifest(self, package)
    }

    fn payload(
        &self,
        package: &Fmri,
        action: &Action,
        out: &mut dyn Write,
    ) -> Result<u64, RepoError> {
        self.fetch_payload(package, action, out)
    }
}
