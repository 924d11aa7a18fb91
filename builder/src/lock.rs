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
//!
//! Relocking keeps pins: when a lockfile is already there, a package it pins keeps that
//! version as long as the version is still in the catalog and still allowed (by the pattern
//! that wants it and every incorporation in the set), whatever else changed in the image file;
//! only [`Update::All`] or [`Update::Packages`] move pins on purpose. [`relock`] says what
//! changed ([`LockChanges`]).

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
use crate::signatures::{SignatureCheck, SignatureRefused, TrustAnchorsError};
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
    /// A package fails the image file's signature policy.
    #[error(transparent)]
    Signature(Box<SignatureRefused>),
    /// The image file's trust anchors could not be loaded.
    #[error(transparent)]
    TrustAnchors(Box<TrustAnchorsError>),
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
    /// `--update=PKG` names a package neither pinned before nor resolved now.
    #[error(
        "--update={name}: {image} pins no package of that name (it pins {})",
        if pinned.is_empty() { "none".to_owned() } else { pinned.join(", ") }
    )]
    UnknownUpdate {
        /// The image file.
        image: PathBuf,
        /// The name given.
        name: String,
        /// The stems pinned before or resolved now.
        pinned: Vec<String>,
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

impl From<TrustAnchorsError> for LockError {
    fn from(e: TrustAnchorsError) -> Self {
        LockError::TrustAnchors(Box::new(e))
    }
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
    /// Which pins of an existing lockfile may move.
    pub update: Update,
}

/// Which pins of an existing lockfile a relock may move (`rdctl lock --update[=PKG]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum Update {
    /// None: every pin that still satisfies the image file stays (the default).
    #[default]
    Keep,
    /// Every package resolves to the newest allowed version.
    All,
    /// Only these packages move, named by stem (`web/server/nginx`) or by its last component
    /// (`nginx`); the rest keep their pins.
    Packages(Vec<String>),
}

impl Update {
    fn moves(&self, stem: &str) -> bool {
        match self {
            Update::Keep => false,
            Update::All => true,
            Update::Packages(names) => names.iter().any(|n| names_stem(n, stem)),
        }
    }
}

/// Whether a `--update` name (`pkg:/a/b`, `a/b`, `b`) names `stem`.
fn names_stem(name: &str, stem: &str) -> bool {
    let n = name.strip_prefix("pkg:/").unwrap_or(name);
    n == stem || leaf(stem) == n
}

/// One pin that moved.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PinChange {
    /// The FMRI pinned before.
    pub from: String,
    /// The FMRI pinned now.
    pub to: String,
}

/// How a relock changed the lockfile's pins, each list in stem order.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct LockChanges {
    /// Packages pinned now and not before.
    pub added: Vec<String>,
    /// Packages pinned before and not now.
    pub removed: Vec<String>,
    /// Packages whose pin moved.
    pub updated: Vec<PinChange>,
}

impl LockChanges {
    /// Whether nothing changed.
    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.updated.is_empty()
    }

    fn between(before: &[LockedPackage], after: &[LockedPackage]) -> LockChanges {
        let stems = |v: &[LockedPackage]| -> BTreeMap<String, String> {
            v.iter()
                .map(|p| {
                    let stem = Fmri::parse(&p.fmri)
                        .map(|f| f.stem().to_owned())
                        .unwrap_or_else(|_| p.fmri.clone());
                    (stem, p.fmri.clone())
                })
                .collect()
        };
        let (old, new) = (stems(before), stems(after));
        let mut c = LockChanges::default();
        for (stem, fmri) in &new {
            match old.get(stem) {
                None => c.added.push(fmri.clone()),
                Some(was) if was != fmri => c.updated.push(PinChange {
                    from: was.clone(),
                    to: fmri.clone(),
                }),
                Some(_) => {}
            }
        }
        c.removed = old
            .iter()
            .filter(|(stem, _)| !new.contains_key(*stem))
            .map(|(_, f)| f.clone())
            .collect();
        c
    }
}

/// Resolves the image file against its publishers and writes the lockfile beside it.
/// Returns the lockfile and where it was written.
pub fn lock(image: &ImageFile) -> Result<(Lockfile, PathBuf), LockError> {
    lock_with(image, &LockOptions::default())
}

/// [`lock()`] with options (TLS settings for depots, which pins may move).
pub fn lock_with(image: &ImageFile, opts: &LockOptions) -> Result<(Lockfile, PathBuf), LockError> {
    relock(image, opts).map(|(l, p, _)| (l, p))
}

/// [`lock_with`], also saying how the pins changed from the lockfile that was there (all
/// added when there was none). Pins of the existing lockfile are kept unless `opts.update`
/// moves them (see the module docs); a `--update` name that is in neither the old nor the new
/// set is an error.
pub fn relock(
    image: &ImageFile,
    opts: &LockOptions,
) -> Result<(Lockfile, PathBuf, LockChanges), LockError> {
    let path = image.lockfile_path();
    // `--update` moves every pin, so an unreadable old lockfile is only rewritten.
    let previous = match (&opts.update, previous_pins(&path)) {
        (_, Ok(p)) => p,
        (Update::All, Err(_)) => Vec::new(),
        (_, Err(e)) => return Err(e),
    };
    let sources = Sources::open(&image.publishers, None, &opts.depot_tls)?;
    let pins: BTreeMap<String, Fmri> = previous
        .iter()
        .filter_map(|p| Fmri::parse(&p.fmri).ok())
        .filter(|f| !opts.update.moves(f.stem()))
        .map(|f| (f.stem().to_owned(), f))
        .collect();
    let lockfile = resolve_pinned(image, &sources, &pins)?;
    if let Update::Packages(names) = &opts.update {
        let known = |n: &String| {
            previous
                .iter()
                .chain(&lockfile.packages)
                .filter_map(|p| Fmri::parse(&p.fmri).ok())
                .any(|f| names_stem(n, f.stem()))
        };
        if let Some(n) = names.iter().find(|n| !known(n)) {
            let mut pinned: Vec<String> = previous
                .iter()
                .chain(&lockfile.packages)
                .filter_map(|p| Fmri::parse(&p.fmri).ok())
                .map(|f| f.stem().to_owned())
                .collect();
            pinned.sort();
            pinned.dedup();
            return Err(LockError::UnknownUpdate {
                image: image.path.clone(),
                name: n.clone(),
                pinned,
            });
        }
    }
    let changes = LockChanges::between(&previous, &lockfile.packages);
    let mut text = serde_json::to_string_pretty(&lockfile).expect("lockfile serialises");
    text.push('\n');
    validator::write_file_atomic(&path, text.as_bytes()).map_err(|source| LockError::Io {
        path: path.clone(),
        source,
    })?;
    Ok((lockfile, path, changes))
}

/// The pins of the lockfile at `path`, whatever image file it was made from; none when there
/// is no lockfile.
fn previous_pins(path: &std::path::Path) -> Result<Vec<LockedPackage>, LockError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(source) => {
            return Err(LockError::Io {
                path: path.to_owned(),
                source,
            });
        }
    };
    let old: Lockfile = serde_json::from_slice(&bytes).map_err(|e| LockError::Invalid {
        lockfile: path.to_owned(),
        message: format!("{e}; `rdctl lock --update` resolves everything afresh and rewrites it"),
    })?;
    Ok(old.packages)
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

/// Resolves the image file's package set (see the module documentation), preferring the
/// version `pins` names for a stem while that version is in the catalog and allowed.
fn resolve_pinned(
    image: &ImageFile,
    sources: &Sources,
    pins: &BTreeMap<String, Fmri>,
) -> Result<Lockfile, LockError> {
    let signatures = SignatureCheck::for_image(image)?;
    let mut r = Resolver::new(image, sources, pins, &signatures)?;
    r.seed_from_manifests()?;
    while let Some(w) = r.queue.pop_front() {
        if r.picked.contains_key(w.pattern.stem()) {
            continue; // the checks tell whether the picked version satisfies this one too
        }
        let best = r.choose(w)?;
        r.pick(best)?;
    }
    let picked = r.picked;

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

/// The state of one resolution: the catalogs, what is still wanted, the incorporations
/// met so far and what has been picked.
struct Resolver<'i> {
    image: &'i ImageFile,
    sources: &'i Sources,
    pins: &'i BTreeMap<String, Fmri>,
    signatures: &'i SignatureCheck,
    catalogs: BTreeMap<String, Vec<PackageRef>>,
    queue: VecDeque<Wanted>,
    /// Incorporations in the set constrain the versions of later picks: stem -> versions.
    incorporations: BTreeMap<String, Vec<Version>>,
    picked: BTreeMap<String, Resolved>,
}

impl<'i> Resolver<'i> {
    /// Reads every source's catalog and queues the image file's `packages.include`.
    fn new(
        image: &'i ImageFile,
        sources: &'i Sources,
        pins: &'i BTreeMap<String, Fmri>,
        signatures: &'i SignatureCheck,
    ) -> Result<Self, LockError> {
        let mut catalogs: BTreeMap<String, Vec<PackageRef>> = BTreeMap::new();
        for name in sources.names() {
            let src = sources.get(name).expect("listed");
            catalogs.insert(name.to_owned(), src.packages()?);
        }
        let queue = image
            .include
            .iter()
            .enumerate()
            .map(|(i, f)| Wanted {
                pattern: f.clone(),
                prefix: true,
                wanted_by: format!("packages.include.{i}"),
            })
            .collect();
        Ok(Resolver {
            image,
            sources,
            pins,
            signatures,
            catalogs,
            queue,
            incorporations: BTreeMap::new(),
            picked: BTreeMap::new(),
        })
    }

    /// Queues what the image file's own manifest files depend on, and records their
    /// incorporations.
    fn seed_from_manifests(&mut self) -> Result<(), LockError> {
        for (path, bytes) in &self.image.manifests {
            let m = Manifest::parse_bytes(bytes).map_err(|source| LockError::Manifest {
                fmri: path.display().to_string(),
                source,
            })?;
            for (kind, fmris, _) in depends(&m, self.image) {
                for f in fmris {
                    match kind {
                        DependType::Require | DependType::Group => self.queue.push_back(Wanted {
                            pattern: f,
                            prefix: false,
                            wanted_by: path.display().to_string(),
                        }),
                        DependType::Incorporate => {
                            if let Some(v) = f.version() {
                                self.incorporations
                                    .entry(f.stem().to_owned())
                                    .or_default()
                                    .push(v.clone());
                            }
                            self.queue.push_back(Wanted {
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
        Ok(())
    }

    /// The version to pick for `w`: its pin while that is in the catalog and allowed, else
    /// the newest allowed; an error naming what wanted it when there is none.
    fn choose(&self, w: Wanted) -> Result<PackageRef, LockError> {
        let publishers: Vec<&str> = match w.pattern.publisher() {
            Some(p) => vec![p],
            None => self.catalogs.keys().map(String::as_str).collect(),
        };
        let allowed = |f: &Fmri| -> bool {
            let Some(v) = f.version() else { return false };
            let ok = match w.pattern.version() {
                None => true,
                Some(want) if w.prefix => v.matches(want),
                Some(want) => v >= want,
            };
            ok && self
                .incorporations
                .get(f.stem())
                .is_none_or(|vs| vs.iter().all(|inc| v.matches(inc)))
        };
        let candidates = || {
            publishers
                .iter()
                .flat_map(|p| self.catalogs.get(*p).map(Vec::as_slice).unwrap_or_default())
        };
        let mut best: Option<&PackageRef> = None;
        for r in candidates() {
            if r.fmri.stem() == w.pattern.stem()
                && allowed(&r.fmri)
                && best.is_none_or(|b| r.fmri.version() > b.fmri.version())
            {
                best = Some(r);
            }
        }
        // A pin still in the catalog and still allowed wins over anything newer.
        if let Some(pin) = self.pins.get(w.pattern.stem())
            && let Some(kept) = candidates().find(|r| {
                r.fmri.stem() == pin.stem()
                    && r.fmri.version() == pin.version()
                    && pin
                        .publisher()
                        .is_none_or(|p| r.fmri.publisher() == Some(p))
                    && allowed(&r.fmri)
            })
        {
            best = Some(kept);
        }
        if let Some(best) = best {
            return Ok(best.clone());
        }
        let line = w
            .wanted_by
            .starts_with("packages.include.")
            .then(|| {
                let text = String::from_utf8_lossy(&self.image.bytes);
                config_toml::line_of(&text, &w.wanted_by)
            })
            .flatten();
        Err(LockError::NotFound(Box::new(PackageNotFound {
            image: self.image.path.clone(),
            line,
            pattern: crate::checks::wanted(&w.pattern),
            wanted_by: w.wanted_by,
            publishers: publishers.join(", "),
            hint: match self.incorporations.get(w.pattern.stem()) {
                Some(vs) => format!(
                    "{}, but incorporations in the set allow only {}",
                    not_found_hint(w.pattern.stem(), candidates()),
                    vs.iter()
                        .map(ToString::to_string)
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                None => not_found_hint(w.pattern.stem(), candidates()),
            },
        })))
    }

    /// Picks `best`: reads its manifest, queues what it requires and records what it
    /// incorporates.
    fn pick(&mut self, best: PackageRef) -> Result<(), LockError> {
        let publisher = best.fmri.publisher().unwrap_or_default();
        let src = self
            .sources
            .get(publisher)
            .expect("catalog came from this source");
        let manifest_bytes = src.manifest_bytes(&best)?;
        let manifest =
            Manifest::parse_bytes(&manifest_bytes).map_err(|source| LockError::Manifest {
                fmri: best.fmri.to_string(),
                source,
            })?;
        self.signatures
            .check(src, &best.fmri, &manifest)
            .map_err(LockError::Signature)?;
        let by = best.fmri.to_string();
        // Obsolete packages deliver nothing and satisfy nothing; the checks report them.
        if !is_obsolete(&manifest) {
            for (kind, fmris, _) in depends(&manifest, self.image) {
                for f in fmris {
                    match kind {
                        DependType::Require | DependType::Group
                            if f.stem() != "feature/package/dependency/self" =>
                        {
                            self.queue.push_back(Wanted {
                                pattern: f,
                                prefix: false,
                                wanted_by: by.clone(),
                            });
                        }
                        DependType::Incorporate => {
                            if let Some(v) = f.version() {
                                self.incorporations
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
        self.picked.insert(
            best.fmri.stem().to_owned(),
            Resolved {
                fmri: best.fmri,
                manifest_bytes,
                manifest,
            },
        );
        Ok(())
    }
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

#[cfg(test)]
mod pin_tests {
    use std::path::Path;
    use std::time::{Duration, UNIX_EPOCH};

    use ips_bridge::FileRepo;

    use super::*;

    fn publish(repo: &FileRepo, stem: &str, version: &str, stamp: &str, depends: &str) {
        let text = format!(
            "set name=pkg.fmri value=pkg:/{stem}@{version},5.11-2024.0:{stamp}\nset name=pkg.summary value=\"{stem}\"\n{depends}"
        );
        let m = Manifest::parse(&text).unwrap();
        repo.publish_at(
            "example.org",
            &m,
            None,
            UNIX_EPOCH + Duration::from_secs(1_710_000_000),
        )
        .unwrap();
    }

    fn image(dir: &Path, includes: &[&str]) -> ImageFile {
        let list: Vec<String> = includes.iter().map(|i| format!("{i:?}")).collect();
        let text = format!(
            "platform = \"illumos/amd64\"\n[publishers]\n\"example.org\" = \"repo\"\n[packages]\ninclude = [{}]\n",
            list.join(", ")
        );
        let path = dir.join("image.toml");
        std::fs::write(&path, text).unwrap();
        ImageFile::load(&path).unwrap()
    }

    fn relock_with(image: &ImageFile, update: Update) -> (Vec<String>, LockChanges) {
        let opts = LockOptions {
            update,
            ..LockOptions::default()
        };
        let (lockfile, _, changes) = relock(image, &opts).unwrap();
        (
            lockfile.packages.iter().map(|p| p.fmri.clone()).collect(),
            changes,
        )
    }

    const TOOL_21: &str = "pkg://example.org/demo/tool@2.1,5.11-2024.0:20240102T000000Z";
    const TOOL_22: &str = "pkg://example.org/demo/tool@2.2,5.11-2024.0:20240202T000000Z";
    const CORE_10: &str = "pkg://example.org/system/core@1.0,5.11-2024.0:20240101T000000Z";
    const CORE_11: &str = "pkg://example.org/system/core@1.1,5.11-2024.0:20240201T000000Z";
    const EXTRA: &str = "pkg://example.org/demo/extra@1.0,5.11-2024.0:20240101T000000Z";

    #[test]
    fn relocking_keeps_pins_unless_asked_and_says_what_changed() {
        let dir = tempfile::tempdir().unwrap();
        let repo = FileRepo::create(dir.path().join("repo"), "example.org").unwrap();
        let require_core = "depend type=require fmri=system/core@1.0\n";
        publish(&repo, "system/core", "1.0", "20240101T000000Z", "");
        publish(&repo, "demo/tool", "2.1", "20240102T000000Z", require_core);
        publish(&repo, "demo/extra", "1.0", "20240101T000000Z", "");
        let first = image(dir.path(), &["demo/tool"]);
        let (pins, changes) = relock_with(&first, Update::Keep);
        assert_eq!(pins, [TOOL_21, CORE_10]);
        assert_eq!(changes.added, [TOOL_21, CORE_10]);

        // Newer versions appear and the image file is edited: the pins stay, the new
        // package is added at its newest version.
        publish(&repo, "system/core", "1.1", "20240201T000000Z", "");
        publish(&repo, "demo/tool", "2.2", "20240202T000000Z", require_core);
        let edited = image(dir.path(), &["demo/tool", "demo/extra"]);
        let (pins, changes) = relock_with(&edited, Update::Keep);
        assert_eq!(pins, [EXTRA, TOOL_21, CORE_10]);
        assert_eq!(
            changes,
            LockChanges {
                added: vec![EXTRA.to_owned()],
                ..LockChanges::default()
            }
        );

        // --update=tool moves the tool only.
        let (pins, changes) = relock_with(&edited, Update::Packages(vec!["tool".into()]));
        assert_eq!(pins, [EXTRA, TOOL_22, CORE_10]);
        assert_eq!(
            changes.updated,
            [PinChange {
                from: TOOL_21.into(),
                to: TOOL_22.into()
            }]
        );
        assert!(changes.added.is_empty() && changes.removed.is_empty());

        // --update moves everything; dropping an include removes its pin.
        let (pins, changes) = relock_with(&edited, Update::All);
        assert_eq!(pins, [EXTRA, TOOL_22, CORE_11]);
        assert_eq!(changes.updated.len(), 1, "{changes:?}");
        let (pins, changes) = relock_with(&first, Update::Keep);
        assert_eq!(pins, [TOOL_22, CORE_11]);
        assert_eq!(changes.removed, [EXTRA]);

        // A pin the image file no longer allows moves, and says so.
        let (_, _, _) = relock(&first, &LockOptions::default()).unwrap();
        let older = image(dir.path(), &["demo/tool@2.1", "system/core@1.0"]);
        let (pins, changes) = relock_with(&older, Update::Keep);
        assert_eq!(pins, [TOOL_21, CORE_10]);
        assert_eq!(changes.updated.len(), 2, "{changes:?}");

        // A name that is nowhere is refused.
        let e = relock(
            &older,
            &LockOptions {
                update: Update::Packages(vec!["nothing/here".into()]),
                ..LockOptions::default()
            },
        )
        .unwrap_err();
        assert!(e.to_string().contains("--update=nothing/here"), "{e}");
        assert!(!e.to_string().contains("invalid lockfile"), "{e}");
    }
}
