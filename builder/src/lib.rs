//! The image builder behind `rdctl build` and `rdctl lock`: reproducible OCI images for
//! illumos zones from pinned IPS packages.
//!
//! The pipeline:
//! 1. [`ImageFile`]: the TOML image file (publishers, packages, variants and facets, image
//!    config, layering, compression), checked with errors naming file, line and field.
//! 2. [`lock()`] resolves it against the publishers' catalogs into a [`Lockfile`] (full FMRIs,
//!    manifest SHA-1s, a checksum of the image file) written beside it; [`lock_with`] and
//!    [`BuildOptions`] carry the TLS settings for `https://` depots.
//! 3. [`build()`] refuses a missing or stale lockfile, fetches every manifest and checks it
//!    against the lockfile's SHA-1, runs pkg's dependency and path-conflict checks, composes
//!    the file tree as pkg would install it (accounts merged into the image's own
//!    `etc/passwd`/`etc/group`, owners resolved to numeric ids through them, `var/pkg`
//!    metadata), and writes deterministic layers: sorted entries, fixed mtimes, hand-built
//!    ustar/PAX headers, payloads streamed gunzip → verify → tar → compress, fixed gzip
//!    header. The result is an OCI image layout that must pass
//!    [`validator::validate_layout`] before the build succeeds; it can then be pushed
//!    through `registry_client`.
//!
//! Design decision: a build depends only on the image file, the lockfile and the packages'
//! bytes (and `SOURCE_DATE_EPOCH` when given), never on the build machine's clock, umask,
//! locale or user database, so two builds anywhere give the same manifest digest.
#![deny(missing_docs)]

mod build;
mod checks;
mod compose;
mod imagefile;
mod layercache;
mod lock;
mod pargz;
mod pipeline;
mod progress;
mod sbom;
mod signatures;
mod source;
mod tarball;

use std::path::PathBuf;

pub use build::{
    BuildOptions, BuildSummary, BuiltLayer, PACKAGES_ANNOTATION, SBOM_OF_ANNOTATION,
    STOP_TIMEOUT_ANNOTATION, build,
};
pub use checks::CheckError;
pub use imagefile::{
    Compression, CompressionAlg, ImageFile, ImageFileError, Layering, Origin, RuntimeConfig,
    Signatures, lockfile_path,
};
pub use lock::{
    LOCKFILE_VERSION, LockChanges, LockError, LockOptions, LockedPackage, Lockfile,
    PackageNotFound, PinChange, Update, image_checksum, lock, lock_with, relock,
};
pub use progress::Progress;
pub use sbom::SBOM_ARTIFACT_TYPE;
pub use signatures::{SignatureRefused, TrustAnchorsError};
pub use source::SourceError;

/// Why a build failed. Every variant names the input: file, package, path or reference.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// The image file is invalid.
    #[error(transparent)]
    ImageFile(#[from] ImageFileError),
    /// The lockfile is missing, stale or invalid.
    #[error(transparent)]
    Lock(#[from] LockError),
    /// The lockfile names something the build cannot use.
    #[error("{lockfile}: {message}")]
    Lockfile {
        /// The lockfile.
        lockfile: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// A publisher's repository failed.
    #[error(transparent)]
    Source(#[from] SourceError),
    /// A manifest differs from the one locked: the lockfile and the repository disagree.
    #[error(transparent)]
    ManifestMismatch(Box<ManifestMismatch>),
    /// The package set fails pkg's checks.
    #[error(transparent)]
    Checks(#[from] CheckError),
    /// A payload is missing or does not match its hashes.
    #[error("package {package}: payload of {path}")]
    Payload {
        /// The package.
        package: String,
        /// The path the payload is installed at.
        path: String,
        /// What failed.
        #[source]
        source: SourceError,
    },
    /// A payload's length differs from its `pkg.size`.
    #[error("package {package}: payload of {path} is {actual} bytes, pkg.size says {expected}")]
    PayloadSize {
        /// The package.
        package: String,
        /// The path.
        path: String,
        /// `pkg.size`.
        expected: u64,
        /// Bytes received.
        actual: u64,
    },
    /// A `user` or `group` action could not be applied, or an account file is unusable.
    #[error("accounts: {message}")]
    Accounts {
        /// What failed.
        message: String,
    },
    /// An action cannot be installed as written (unknown owner, bad hardlink, ...).
    #[error("package {package}: {action}: {message}")]
    Owner {
        /// The package.
        package: String,
        /// The action.
        action: String,
        /// What is wrong.
        message: String,
    },
    /// Writing the `var/pkg` metadata failed.
    #[error("writing var/pkg")]
    Metadata {
        /// The error.
        #[source]
        source: ips_bridge::ImageError,
    },
    /// A file of the build could not be written or read.
    #[error("{path}: i/o error")]
    Io {
        /// The path.
        path: PathBuf,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The OCI layout could not be written.
    #[error(transparent)]
    Layout(#[from] validator::LayoutError),
    /// The layout's `index.json` is not usable.
    #[error("{path}: {message}")]
    LayoutIndex {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        message: String,
    },
    /// The built image fails validation (a builder bug: nothing is pushed).
    #[error("{path}: the built image fails validation:\n  {violations}")]
    Invalid {
        /// The layout.
        path: PathBuf,
        /// The violations.
        violations: String,
    },
}

/// The lockfile and the repository disagree about a package's manifest.
#[derive(Debug, thiserror::Error)]
#[error(
    "{lockfile}: package {package}: the lockfile says manifest sha-1 {locked}, the repository ({origin}) serves {served}{catalog}; the package was republished or the lockfile was edited: run `rdctl lock {image}` to lock what the repository has now"
, catalog = match catalog {
    Some(c) if c == served => " as its catalog lists".to_owned(),
    Some(c) => format!(" and its catalog lists {c}"),
    None => String::new(),
})]
pub struct ManifestMismatch {
    /// The lockfile.
    pub lockfile: PathBuf,
    /// The image file.
    pub image: PathBuf,
    /// The package.
    pub package: String,
    /// The publisher's origin.
    pub origin: String,
    /// The lockfile's SHA-1.
    pub locked: String,
    /// The SHA-1 of the manifest the repository served.
    pub served: String,
    /// The SHA-1 the repository's catalog lists, when it lists one.
    pub catalog: Option<String>,
}
