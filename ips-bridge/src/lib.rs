//! The bridge between pkg(5) (IPS) and the image toolchain.
//!
//! Main types:
//! - [`Version`] and [`Fmri`]: package versions and FMRIs, parsed, printed and ordered as pkg
//!   does (the build part is ignored; release, then branch, then timestamp; missing parts sort
//!   first), with prefix matching for incorporations and pkg's URL/path escaping ([`quote`]).
//!
//! It depends on no other workspace crate.
#![deny(missing_docs)]

mod action;
mod cache;
mod catalog;
mod config;
mod depot;
mod fmri;
mod image;
mod manifest;
mod payload;
mod repo;
mod variant;
mod version;

pub use action::{
    Action, ActionError, ActionKind, DependType, Ownership, Preserve, TypedAction, resolve_hardlink,
};
pub use cache::{CacheError, PayloadCache};
pub use catalog::{
    Catalog, CatalogAttrs, CatalogEntry, CatalogError, CatalogPart, PartInfo, catalog_time,
    part_for, to_catalog_json, verify_signature, write_catalog_file,
};
pub use config::{IniError, IniFile, python_list};
pub use depot::{DepotClient, DepotError, DepotServer, RetryPolicy, VERSIONS};
pub use fmri::{Fmri, FmriError, quote, unquote, valid_publisher, valid_stem};
pub use image::{
    ImageError, ImageMetadata, ImagePublisher, InstalledPackage, entry_states,
    state as package_state,
};
pub use manifest::{Manifest, ManifestError};
pub use payload::{
    ExpectedHash, HashAlg, Hasher, PayloadError, PayloadHashes, PayloadInfo, VerifyingReader,
    compress, hash_hex,
};
pub use repo::{FileRepo, MAX_METADATA_BYTES, PackageRef, RepoError};
pub use variant::ImageFilter;
pub use version::{DEFAULT_BUILD, DotSequence, Timestamp, Version, VersionError};
