//! The OCI model every other part of the toolchain stands on.
//!
//! - [`Digest`] and [`Algorithm`]: the only digests accepted (sha256, sha512), parsed once.
//! - [`VerifyingReader`], [`DigestingReader`], [`DigestingWriter`]: one-pass hashing and
//!   verification of streams (sync `std::io`, and tokio traits behind the `tokio` feature).
//! - [`MediaType`]: OCI and Docker schema2 media types.
//! - [`Name`] and [`Tag`]: repository names and tags as distribution-spec defines them;
//!   [`RegistryHost`]: a registry host in its one canonical spelling (lower case, no default
//!   port, Docker Hub as `docker.io`), which every matcher of hosts and references compares
//!   ([`canonical_name`], [`canonical_repository`]).
//! - [`check_document`] and [`check_config`]: the rules for manifests, indexes, configs and
//!   descriptors, returning a [`Report`] of [`Violation`]s (each with a [`Rule`] id and a JSON
//!   path) and the typed [`Document`] when it passed.
//! - [`check_layer`]: one streaming pass over a layer blob (digest, size, compression sniffing,
//!   DiffID, every tar header) with bounded memory; [`TarReader`] is the strict tar parser
//!   beneath it.
//! - [`ImageLayout`]: OCI image layouts on disk; `index.json` edited through [`IndexEdit`]
//!   ([`ImageLayout::set_tag`], [`ImageLayout::add_untagged`]); [`validate_layout`] walks one
//!   end to end.
//! - [`BlobDir`] and [`Ingest`]: the one way a blob is published into `blobs/<alg>/<hex>` (a
//!   layout, the worker's content store, the layer cache): staged, resumable, hashed while
//!   written, committed against the expected size and digest, published without clobbering.
//! - Helpers the other crates share, kept here as the lowest crate they all use:
//!   [`error_chain`] (an error and its causes on one line), [`rfc3339`] (the one timestamp
//!   formatter), [`Glob`] (the one glob matcher, linear in its input) and [`Histogram`] (the one Prometheus histogram of the registry's and the
//!   worker's metrics).
//! - What the registry and the client both read out of an image's SBOM: [`parse_spdx`] (the
//!   packages of an SPDX JSON document) and [`Constraint`] over [`PkgVersion`] (pkg(5) version
//!   ordering of version strings, for package searches; `ips-bridge` owns the full model).
//!
//! This crate does no network I/O and starts no async runtime; it touches the file system only
//! in its image-layout and ingest modules. It re-exports [`oci_spec`] because those types are
//! part of its API.
#![deny(missing_docs)]

mod chain;
mod digest;
mod document;
mod glob;
mod histogram;
mod host;
mod image;
mod ingest;
mod json;
mod layer;
mod layout;
mod media_type;
mod names;
mod pkg_query;
mod pkg_version;
mod platform;
mod report;
mod spdx;
mod tarstream;
mod timestamp;
mod verify;

pub use chain::error_chain;
pub use digest::{Algorithm, Digest, DigestError, Digester, DigesterStateError};
pub use document::{
    Descriptor, Document, DocumentKind, EMPTY_DIGEST, ImageConfig, Index, MAX_CONFIG_SIZE,
    MAX_MANIFEST_SIZE, Manifest, check_config, check_document, check_stop_signal, check_user,
    check_working_dir, sniff_kind,
};
pub use glob::{DoubleStar, Glob, GlobSyntax, glob_matches};
pub use histogram::Histogram;
pub use host::{DOCKER_HUB, HostError, RegistryHost, canonical_name, canonical_repository};
pub use image::{
    ImageInfo, LayerInfo, LayoutReport, ValidateOptions, chain_ids, validate_layout,
    validate_layout_manifest,
};
pub use ingest::{
    BlobDir, Existing, Ingest, IngestError, Published, StagedBlob, WRITE_PIECE, write_file_atomic,
};
pub use json::{JsonError, parse_strict};
pub use layer::{
    LayerLimits, LayerSummary, check_layer, decompress_layer, normalize_entry_path,
    sniff_compression,
};
pub use layout::{
    ImageLayout, IndexEdit, IndexEntry, LAYOUT_FILE_CONTENT, LayoutError, NewLayout,
    REF_NAME_ANNOTATION, Replaces,
};
pub use media_type::{Compression, MediaType, MediaTypeError};
pub use names::{MAX_NAME_LEN, MAX_TAG_LEN, Name, NameError, Tag, TagError};
pub use oci_spec;
pub use pkg_query::{PackageMatch, PackageNameGlob, PackageQuery, package_publisher};
pub use pkg_version::{Constraint, PkgVersion, VersionOp};
pub use platform::{KNOWN_ARCH, KNOWN_OS, Platform};
pub use report::{Report, Rule, Severity, Violation};
pub use spdx::{SPDX_ARTIFACT_TYPE, SpdxPackage, SpdxPackages, parse_spdx};
pub use tarstream::{EntryKind, TarEntry, TarError, TarErrorKind, TarLimits, TarReader};
pub use timestamp::{age, parse_rfc3339, rfc3339, unix_from_civil};
pub use verify::{DigestingReader, DigestingWriter, VerifyError, VerifyingReader};
