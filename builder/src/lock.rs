//! `rdctl lock`: resolve an image file against its publishers' catalogs into a lockfile.
//!
//! The lockfile (`<image>.lock.json`, beside the image file) records the full FMRI (publisher,
//! version and timestamp) and the manifest SHA-1 of every package, and a checksum of the image
//! file and of the manifest files it names. A build uses nothing else to pick packages, so the
//! same image file and lockfile give the same image.
//!
//! Resolution: packages named in `packages.include` resolve to the newest catalogued version
//! matching the pattern (pkg's prefix rule); the `depend` actions of `packages.manifests`
//! add their targets (`require`: newest version at or above; `incorporate`: newest version
//! matching). Then, until nothing changes, every `require` and `group` dependency of a
//! package in the set whose stem is not in the set yet adds the newest version at or above
//! the dependency that every `incorporate` dependency in the set allows. The result must pass
//! the checks of [`crate::checks`].

use std::collections::{BTreeMap, VecDeque};
use std::path::PathBuf;

use ips_bridge::{
    Action, ActionKind, DependType, Fmri, HashAlg, Manifest, PackageRef, TypedAction, Version,
    hash_hex,
};
use serde::{Deserialize, Serialize};
use sha2::Digest as _;

use crate::checks::{CheckError, check_set, is_obsolete};
use crate::imagefile::ImageFile;
use crate::source::{SourceError, Sources};

/// The lockfile format version this builder writes and reads.
pub const LOCKFILE_VERSION: u32 = 1;

/// A lockfile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Lockfile {
    /// Format version ([`LOCKFILE_VERSION`]).
    pub lockfile_version: u32,
    /// `sha256:<hex>` over the image file and the manifest files it names.
    pub image_file_checksum: String,
    /// Publishers and their origins (as the image file writes them) when the lock was made.
    pub publishers: BTreeMap<String, String>,
    /// The pinned packages, in stem order.
    pub packages: Vec<LockedPackage>,
}

/// One pinned package.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct LockedPackage {
    /// Full FMRI: `pkg://publisher/stem@release,build-branch:timestamp`.
    pub fmri: String,
    /// SHA-1 of the manifest as published.
    pub manifest_sha1: String,
}

/// A package the image file (or a package in the set) asks for is in no catalog.
#[derive(Debug, thiserror::Error)]
#[error(
    "{image}{line}: no package matches {pattern} (wanted by {wanted_by}) in publisher(s) {publishers}; {hint}",
    line = line.map(|l| format!(":{l}")).unwrap_or_default(),
)]
pub struct PackageNotFound {
    /// The image file.
    pub image: PathBuf,
    /// The image file's line that asked, when the image file asked directly.
    pub line: Option<usize>,
    /// The pattern.
    pub pattern: String,
    /// Who asked: `packages.include.N`, a manifest file, or a package's depend action.
    pub wanted_by: String,
    /// Publishers searched.
    pub publishers: String,
    /// What the catalogs do have: the versions of that name, or the closest names.
    pub hint: String,
}

/// Why locking failed, or why a lockfile cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LockError {
    /// A publisher's repository failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// Nothing in the catalogs matches a package the image file asks for.
    #[error(transparent)]
    NotFound(Box<PackageNotFound>),
    /// A manifest does not parse.
    #[error("package {fmri}: manifest does not parse")]
    Manifest {
        /// The package.
        fmri: String,
        /// The parse error.
        #[source]
        source: ips_bridge::ManifestError,
    },
    /// The resolved set fails pkg's checks.
    #[error("{image}: the resolved set is not installable")]
    Checks {
        /// The image file.
        image: PathBuf,
        /// The problems.
        #[source]
        source: CheckError,
    },
    /// The lockfile could not be written or read.
    #[error("{path}: i/o error")]
    Io {
        /// The lockfile.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// There is no lockfile beside the image file.
    #[error(
        "{image}: no lockfile {lockfile}; run `rdctl lock {image}` to resolve the packages and write it"
    )]
    Missing {
        /// The image file.
        image: PathBuf,
        /// Where the lockfile should be.
        lockfile: PathBuf,
    },
    /// The lockfile was made from another version of the image file.
    #[error(
        "{lockfile} does not match {image} (the image file or a manifest it names changed since it was locked: checksum {actual}, lockfile says {expected}); run `rdctl lock {image}` again"
    )]
    Stale {
        /// The image file.
        image: PathBuf,
        /// The lockfile.
        lockfile: PathBuf,
        /// The lockfile's checksum.
        expected: String,
        /// The image file's checksum now.
        actual: String,
    },
    /// The lockfile is not valid.
    #[error("{lockfile}: invalid lockfile: {message}")]
    Invalid {
        /// The lockfile.
        lockfile: PathBuf,
        /// What is wrong.
        message: String,
    },
}

/// `sha256:<hex>` over the image file's bytes and, for each manifest file it names, its name
/// and bytes (so editing a group manifest also makes the lockfile stale).
pub fn image_checksum(image: &ImageFile) -> String {
    let mut h = sha2::Sha256::new();
    h.update(b"image-file\0");
    h.update((image.bytes.len() as u64).to_be_bytes());
    h.update(&image.bytes);
    for (path, bytes) in &image.manifests {
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        h.update(b"manifest\0");
        h.update(name.as_bytes());
        h.update(b"\0");
        h.update((bytes.len() as u64).to_be_bytes());
        h.update(bytes);
    }
    format!("sha256:{}", hex_lower(&h.finalize()))
}

/// What to tell a user whose package is not in the catalogs: the versions there are of
/// that name (the version asked for is the problem), or else the closest names (a typo, a
/// renamed package), nearest first.
fn not_found_hint<'a>(stem: &str, catalog: impl Iterator<Item = &'a PackageRef>) -> String {
    let mut versions: Vec<&Version> = Vec::new();
    let mut names: BTreeMap<&str, f64> = BTreeMap::new();
    for r in catalog {
        if r.fmri.stem() == stem {
            versions.extend(r.fmri.version());
        } else {
            names.entry(r.fmri.stem()).or_insert_with(|| {
                // The last path component weighs most: "bash" for "shell/bash".
                strsim::jaro_winkler(stem, r.fmri.stem())
                    .max(strsim::jaro_winkler(leaf(stem), leaf(r.fmri.stem())) - 0.02)
            });
        }
    }
    if !versions.is_empty() {
        versions.sort();
        versions.dedup();
        let shown: Vec<String> = versions
            .iter()
            .rev()
            .take(5)
            .map(|v| v.to_string())
            .collect();
        let more = versions.len().saturating_sub(shown.len());
        return format!(
            "the catalog has {stem} at {}{}",
            shown.join(", "),
            if more > 0 {
                format!(" (and {more} older)")
            } else {
                String::new()
            }
        );
    }
    let mut close: Vec<(&str, f64)> = names.into_iter().filter(|(_, s)| *s >= 0.8).collect();
    close.sort_by(|a, b| b.1.total_cmp(&a.1).then(a.0.cmp(b.0)));
    if close.is_empty() {
        "no similar names in the catalog (`rdctl ips list ORIGIN` shows what it has)".into()
    } else {
        let shown: Vec<&str> = close.iter().take(3).map(|(n, _)| *n).collect();
        format!("closest names: {}", shown.join(", "))
    }
}

/// The last path component of a package name: `bash` of `shell/bash`.
fn leaf(stem: &str) -> &str {
    stem.rsplit('/').next().unwrap_or(stem)
}

fn hex_lower(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// A package picked for the set, with its manifest.
pub(crate) struct Resolved {
    pub fmri: Fmri,
    pub manifest_bytes: Vec<u8>,
    pub manifest: Manifest,
}

struct Wanted {
    pattern: Fmri,
    /// Prefix match (`include`, `incorporate`) or at-or-above (`require`).
    prefix: bool,
    wanted_by: String,
}

/// How `rdctl lock` reaches the publishers.
#[derive(Debug, Clone, Default)]
pub struct LockOptions {
    /// How `https://` depot origins are trusted (CA files, certs.d, insecure).
    pub depot_tls: ips_bridge::TlsSettings,
}

/// Resolves the image file against its publishers and writes the lockfile beside it.
/// Returns the lockfile and where it was written.
pub fn lock(image: &ImageFile) -> Result<(Lockfile, PathBuf), LockError> {
    lock_with(image, &LockOptions::default())
}

/// [`lock()`] with options (TLS settings for depots).
pub fn lock_with(image: &ImageFile, opts: &LockOptions) -> Result<(Lockfile, PathBuf), LockError> {
    let sources = Sources::open(&image.publishers, None, &opts.depot_tls)?;
    let lockfile = resolve(image, &sources)?;
    let path = image.lockfile_path();
    let mut text = serde_json::to_string_pretty(&lockfile).expect("lockfile serialises");
    text.push('\n');
    validator::write_file_atomic(&path, text.as_bytes()).map_err(|source| LockError::Io {
        path: path.clone(),
        source,
    })?;
    Ok((lockfile, path))
}

fn depends(manifest: &Manifest, image: &ImageFile) -> Vec<(DependType, Vec<Fmri>, Action)> {
    let filter = image.filter();
    manifest
        .by_kind(ActionKind::Depend)
        .filter(|a| filter.allows(a))
        .filter_map(|a| match a.typed() {
            Ok(TypedAction::Depend { kind, fmris, .. }) => Some((kind, fmris, a.clone())),
            _ => None,
        })
        .collect()
}

/// Resolves the image file's package set (see the module documentation).
pub(crate) fn resolve(image: &ImageFile, sources: &Sources) -> Result<Lockfile, LockError> {
    let mut catalogs: BTreeMap<String, Vec<PackageRef>> = BTreeMap::new();
    for name in sources.names() {
        let src = sources.get(name).expect("listed");
        catalogs.insert(name.to_owned(), src.packages()?);
    }
    let mut queue: VecDeque<Wanted> = VecDeque::new();
    for (i, f) in image.include.iter().enumerate() {
        queue.push_back(Wanted {
            pattern: f.clone(),
            prefix: true,
            wanted_by: format!("packages.include.{i}"),
        });
    }
    // Incorporations in the set constrain the versions of later picks: stem -> versions.
    let mut incorporations: BTreeMap<String, Vec<Version>> = BTreeMap::new();
    for (path, bytes) in &image.manifests {
        let m = Manifest::parse_bytes(bytes).map_err(|source| LockError::Manifest {
            fmri: path.display().to_string(),
            source,
        })?;
        for (kind, fmris, _) in depends(&m, image) {
            for f in fmris {
                match kind {
                    DependType::Require | DependType::Group => queue.push_back(Wanted {
                        pattern: f,
                        prefix: false,
                        wanted_by: path.display().to_string(),
                    }),
                    DependType::Incorporate => {
                        if let Some(v) = f.version() {
                            incorporations
                                .entry(f.stem().to_owned())
                                .or_default()
                                .push(v.clone());
                        }
                        queue.push_back(Wanted {
                            pattern: f,
                            prefix: true,
                            wanted_by: path.display().to_string(),
                        });
                    }
                    _ => {}
                }
            }
        }
    }

    let mut picked: BTreeMap<String, Resolved> = BTreeMap::new();
    while let Some(w) = queue.pop_front() {
        if picked.contains_key(w.pattern.stem()) {
            continue; // the checks tell whether the picked version satisfies this one too
        }
        let publishers: Vec<&str> = match w.pattern.publisher() {
            Some(p) => vec![p],
            None => catalogs.keys().map(String::as_str).collect(),
        };
        let allowed = |f: &Fmri| -> bool {
            let Some(v) = f.version() else { return false };
            let ok = match w.pattern.version() {
                None => true,
                Some(want) if w.prefix => v.matches(want),
                Some(want) => v >= want,
            };
            ok && incorporations
                .get(f.stem())
                .is_none_or(|vs| vs.iter().all(|inc| v.matches(inc)))
        };
        let mut best: Option<&PackageRef> = None;
        for p in &publishers {
            for r in catalogs.get(*p).map(Vec::as_slice).unwrap_or_default() {
                if r.fmri.stem() == w.pattern.stem()
                    && allowed(&r.fmri)
                    && best.is_none_or(|b| r.fmri.version() > b.fmri.version())
                {
                    best = Some(r);
                }
            }
        }
        let Some(best) = best else {
            let line = w
                .wanted_by
                .starts_with("packages.include.")
                .then(|| {
                    let text = String::from_utf8_lossy(&image.bytes);
                    config_toml::line_of(&text, &w.wanted_by)
                })
                .flatten();
            let candidates = publishers
                .iter()
                .flat_map(|p| catalogs.get(*p).map(Vec::as_slice).unwrap_or_default());
            return Err(LockError::NotFound(Box::new(PackageNotFound {
                image: image.path.clone(),
                line,
                pattern: crate::checks::wanted(&w.pattern),
                wanted_by: w.wanted_by,
                publishers: publishers.join(", "),
                hint: match incorporations.get(w.pattern.stem()) {
                    Some(vs) => format!(
                        "{}, but incorporations in the set allow only {}",
                        not_found_hint(w.pattern.stem(), candidates),
                        vs.iter()
                            .map(ToString::to_string)
                            .collect::<Vec<_>>()
                            .join(", ")
                    ),
                    None => not_found_hint(w.pattern.stem(), candidates),
                },
            })));
        };
        let publisher = best.fmri.publisher().unwrap_or_default();
        let src = sources
            .get(publisher)
            .expect("catalog came from this source");
        let manifest_bytes = src.manifest_bytes(best)?;
        let manifest =
            Manifest::parse_bytes(&manifest_bytes).map_err(|source| LockError::Manifest {
                fmri: best.fmri.to_string(),
                source,
            })?;
        let by = best.fmri.to_string();
        // Obsolete packages deliver nothing and satisfy nothing; the checks report them.
        if !is_obsolete(&manifest) {
            for (kind, fmris, _) in depends(&manifest, image) {
                for f in fmris {
                    match kind {
                        DependType::Require | DependType::Group
                            if f.stem() != "feature/package/dependency/self" =>
                        {
                            queue.push_back(Wanted {
                                pattern: f,
                                prefix: false,
                                wanted_by: by.clone(),
                            });
                        }
                        DependType::Incorporate => {
                            if let Some(v) = f.version() {
                                incorporations
                                    .entry(f.stem().to_owned())
                                    .or_default()
                                    .push(v.clone());
                            }
                        }
                        _ => {}
                    }
                }
            }
        }
        picked.insert(
            best.fmri.stem().to_owned(),
            Resolved {
                fmri: best.fmri.clone(),
                manifest_bytes,
                manifest,
            },
        );
    }

    let set: Vec<(Fmri, Manifest)> = picked
        .values()
        .map(|r| (r.fmri.clone(), r.manifest.clone()))
        .collect();
    check_set(&set, &image.filter()).map_err(|source: CheckError| LockError::Checks {
        image: image.path.clone(),
        source,
    })?;

    Ok(Lockfile {
        lockfile_version: LOCKFILE_VERSION,
        image_file_checksum: image_checksum(image),
        publishers: image.origins_written.clone(),
        packages: picked
            .values()
            .map(|r| LockedPackage {
                fmri: r.fmri.to_string(),
                manifest_sha1: hash_hex(HashAlg::Sha1, &r.manifest_bytes),
            })
            .collect(),
    })
}

impl Lockfile {
    /// Reads the lockfile of `image` and checks that it was made from this image file.
    pub fn load_for(image: &ImageFile) -> Result<Lockfile, LockError> {
        let path = image.lockfile_path();
        let bytes = match std::fs::read(&path) {
            Ok(b) => b,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(LockError::Missing {
                    image: image.path.clone(),
                    lockfile: path,
                });
            }
            Err(source) => return Err(LockError::Io { path, source }),
        };
        let invalid = |message: String| LockError::Invalid {
            lockfile: path.clone(),
            message,
        };
        let lock: Lockfile = serde_json::from_slice(&bytes).map_err(|e| invalid(e.to_string()))?;
        if lock.lockfile_version != LOCKFILE_VERSION {
            return Err(invalid(format!(
                "lockfileVersion {} (this rdctl reads {LOCKFILE_VERSION})",
                lock.lockfile_version
            )));
        }
        let actual = image_checksum(image);
        if lock.image_file_checksum != actual {
            return Err(LockError::Stale {
                image: image.path.clone(),
                lockfile: path,
                expected: lock.image_file_checksum,
                actual,
            });
        }
        for p in &lock.packages {
            let f = Fmri::parse(&p.fmri).map_err(|e| invalid(format!("{}: {e}", p.fmri)))?;
            let full =
                f.publisher().is_some() && f.version().is_some_and(|v| v.timestamp().is_some());
            if !full {
                return Err(invalid(format!(
                    "{} is not a full FMRI (publisher, version and timestamp)",
                    p.fmri
                )));
            }
            if !f
                .publisher()
                .is_some_and(|p| image.publishers.contains_key(p))
            {
                return Err(invalid(format!(
                    "{}: publisher is not in the image file",
                    p.fmri
                )));
            }
            if p.manifest_sha1.len() != 40
                || !p.manifest_sha1.bytes().all(|c| c.is_ascii_hexdigit())
            {
                return Err(invalid(format!("{}: manifestSha1 is not a SHA-1", p.fmri)));
            }
        }
        Ok(lock)
    }
}
