//! The bridge between pkg(5) (IPS) and the image toolchain: pkg's formats, read and written
//! byte-compatibly, and its repositories, read over the file system and HTTP.
//!
//! Main types:
//! - [`Version`] and [`Fmri`]: versions and FMRIs parsed, printed and ordered as pkg does (the
//!   build part is ignored; release, then branch, then timestamp; a missing part sorts
//!   first), with prefix matching for incorporations ([`Version::matches`]) and pkg's
//!   `quote(s, safe="")` escaping ([`quote`], [`Fmri::dir_path`], [`Fmri::url_path`]).
//! - [`LintRule`] and [`LintFinding`]: [`Manifest::lint`] and [`Manifest::check`] apply the
//!   rules `pkgsend publish`, pkg's action validation and pkglint's duplicate-action checks
//!   apply, as findings with stable ids naming line and attribute; publishing refuses errors.
//! - [`Action`] and [`Manifest`]: the manifest grammar (both quote styles, `\"` and `\\`
//!   escapes, joined quoted strings, backslash continuations, `#` lines, repeated keys,
//!   positional hash or `hash=`) with errors naming line and column, pkg's writer, and
//!   [`TypedAction`] views of all action types. [`ImageFilter`] applies pkg's variant and
//!   facet rules, and [`choose_mediations`] pkg's choice among mediated links.
//! - [`PayloadHashes`]: which hashes an action names and streaming verification of stored
//!   payloads (`gzip:`/`chash` on the stored bytes, `file:sha512t_256` → `file:sha256` →
//!   SHA-1 on the content; [`Check`] says whether the stored bytes' hash is checked too);
//!   [`compress`] writes payloads with pkg's fixed gzip header; [`ElfInfo`] the attributes
//!   `pkgsend` adds to ELF payloads (`elfarch`, `elfbits`, `elfhash`, `gelf:` hashes).
//! - [`CatalogAttrs`], [`CatalogPart`] and [`Catalog`]: catalog v1 with pkg's signatures,
//!   serialised byte for byte as pkg does.
//! - [`FileRepo`]: version 4 file repositories: read, verify, publish.
//! - [`DepotClient`] and [`DepotServer`]: the HTTP depot protocol (client with operation
//!   negotiation, retries, a verified [`PayloadCache`] and [`TlsSettings`] for `https://`
//!   origins; read-only server, over HTTPS with a [`ServerTls`]).
//! - [`check_pinned_set`] and [`check_conflicts`]: the dependency and conflicting-action
//!   checks pkg would make on a pinned package set.
//! - [`verify_manifest`] and [`TrustAnchors`]: `signature` actions as `pkgsign` writes them,
//!   the exact text they sign ([`signed_message`]), RSA and certificate-chain checks as pkg
//!   makes them, under pkg's [`SignaturePolicy`] (`ignore`, `verify`, `require-signatures`).
//! - [`PackageRepository`]: what a build needs from either kind of repository (find a
//!   package by partial FMRI, its manifest, its verified payloads).
//! - [`ImageMetadata`]: the `var/pkg` tree of an installed image; [`UserDb`]: the image's
//!   passwd, shadow, group and ftpusers files as `user` and `group` actions change them.
//!
//! Every error names its input: file, line and column, FMRI, action or URL.
//!
//! ```
//! use ips_bridge::{DepotClient, DepotServer, FileRepo, Fmri, Manifest, PackageRepository, Version};
//!
//! // Versions order like pkg's; the build part does not count.
//! let v = |s: &str| s.parse::<Version>().unwrap();
//! assert!(v("1.2") < v("1.10"));
//! assert_eq!(v("1.0,5.11-1"), v("1.0,5.12-1"));
//!
//! // Publish a package into a new repository, serve it, and read it back over HTTP.
//! let dir = tempfile::tempdir()?;
//! let repo = FileRepo::create(dir.path(), "example.org")?;
//! let manifest = Manifest::parse(
//!     "set name=pkg.fmri value=pkg:/demo/empty@1.0-1\n\
//!      set name=pkg.summary value=\"An empty package\"\n",
//! )?;
//! let fmri = repo.publish("example.org", &manifest, None)?;
//! let server = DepotServer::start(repo, "127.0.0.1:0")?;
//! let client = DepotClient::connect(&server.url())?;
//! let found = client.find(&Fmri::parse("demo/empty@1")?)?.expect("published");
//! assert_eq!(found.fmri, fmri);
//! let read = client.manifest(&found)?;
//! assert_eq!(read.attribute("pkg.summary").unwrap(), ["An empty package"]);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! It depends on no other workspace crate.
#![deny(missing_docs)]

mod action;
mod cache;
mod catalog;
mod cfgfiles;
mod config;
mod conflict;
mod depend;
mod depot;
mod elf;
mod fmri;
mod image;
mod lint;
mod manifest;
mod mediator;
mod payload;
mod repo;
mod signature;
mod splice;
mod variant;
mod version;

pub use action::{
    Action, ActionError, ActionErrorKind, ActionKind, DependType, Ownership, Preserve, TypedAction,
    resolve_hardlink,
};
pub use cache::{CacheError, PayloadCache};
pub use catalog::{
    Catalog, CatalogAttrs, CatalogEntry, CatalogError, CatalogPart, PartInfo, UpdateLog, UpdateOp,
    catalog_time, part_for, to_catalog_json, update_log_name, verify_signature, write_catalog_file,
};
pub use cfgfiles::{UserDb, UserDbError};
pub use config::{IniError, IniFile, python_list};
pub use conflict::check_conflicts;
pub use depend::{DependencyProblem, Severity, check_pinned_set};
pub use depot::{
    DepotClient, DepotClientBuilder, DepotError, DepotServer, RetryPolicy, ServerTls, TlsFileError,
    TlsProblem, TlsSettings, VERSIONS,
};
pub use elf::{ElfError, ElfInfo};
pub use fmri::{Fmri, FmriError, quote, unquote, valid_publisher, valid_stem};
pub use image::{
    ImageError, ImageMetadata, ImagePublisher, InstalledPackage, entry_states, legacy_pkginfo,
    state as package_state,
};
pub use lint::{LintFinding, LintRule};
pub use manifest::{Manifest, ManifestError};
pub use mediator::{Mediation, choose_mediations, is_selected};
pub use payload::{
    Check, ExpectedHash, HashAlg, Hasher, PayloadError, PayloadHashes, PayloadInfo,
    VerifyingReader, compress, hash_hex,
};
pub use repo::{FileRepo, MAX_METADATA_BYTES, PackageRef, PackageRepository, RepoError};
pub use signature::{
    CertFetch, SignatureAction, SignatureError, SignaturePolicy, SignatureReport, TrustAnchors,
    signed_message, verify_manifest,
};
pub use splice::GzipSink;
pub use variant::ImageFilter;
pub use version::{DEFAULT_BUILD, DotSequence, Timestamp, Version, VersionError};
