//! The workspace's OCI Distribution client and image transfer: what `rdctl push`, `pull`,
//! `copy` and `login`, the worker's pulls and `rdctl build --push` run.
//!
//! Main types, along the seams distribution's own client draws:
//!
//! - [`Reference`]: `HOST[:PORT]/NAME[:TAG][@DIGEST]`, parsed once at the edge.
//! - [`ClientError`] with [`ErrorKind`] classes: 401/403 are final, only transient errors are
//!   retried.
//! - Transport ([`ClientBuilder`], [`ClientOptions`], [`Retry`]): rustls with the system roots,
//!   plus CA files and docker's `certs.d` layout (`<dir>/<host>/*.crt` CAs, `client.cert` and
//!   `client.key` for mutual TLS). `https` unless plain HTTP is asked for; loopback hosts
//!   default to plain HTTP unless TLS is configured for them.
//! - The auth session (`session`, [`challenge`], [`credentials`]): credentials come from a
//!   [`Keychain`] (docker `config.json`, containers `auth.json`, credential helpers); a 401's
//!   `WWW-Authenticate` challenge is answered once with Basic credentials or a bearer token
//!   from the realm, tokens are cached per scope until they expire, and credentials never
//!   follow a redirect to another host. [`login`] checks and stores a credential.
//! - Manifests and blobs ([`Client::get_manifest`], [`Client::push_manifest`],
//!   [`Client::get_blob`], [`Client::push_blob`]): blobs stream through
//!   [`validator::VerifyingReader`], so reading one to EOF without an error means it verified;
//!   cut bodies resume with `Range`; pushes are monolithic when small and chunked when large,
//!   and memory per request is bounded by the chunk size whatever the blob size.
//! - Referrers ([`Client::referrers`], [`Client::push_referrer`]): the referrers API, with the
//!   referrers tag schema ([`fallback_tag`]) read and maintained for registries without it.
//! - Listing and deleting ([`Client::catalog`], [`Client::tags`], [`Client::delete_manifest`]),
//!   and what `rdctl inspect|ls|tag|rm|sbom` show over registries and layouts alike
//!   ([`inspect`], [`manage`]).
//! - The registry's package index extension ([`Client::search_packages`]): which images hold a
//!   package, for `rdctl search`.
//! - [`signatures`]: cosign signatures and attestations pushed to and read from registries
//!   and layouts, verified with the `trust` crate ([`signatures::fetch_evidence`]).
//! - [`transfer`]: the one copy path between OCI layouts and registries, referrers included;
//!   [`progress`] is how a front end sees its blobs' bytes move.
//! - [`raw`]: manifests, blobs, configs and digests byte for byte, oras-style artifacts, the
//!   SBOM's SPDX document (`rdctl manifest|blob|config|digest|artifact`, `sbom --document`).
//! - [`sync`]: many images at once over that copy path (`rdctl sync`): registry to registry,
//!   to and from air-gap bundles, with repository and tag globs.
//!
//! Invariants: no server code (no axum) and no runtime of its own: every operation is async
//! and runs on the caller's runtime. Among workspace crates it depends only on `validator` and `trust` (pure, no I/O).
#![deny(missing_docs)]

mod auth;
mod blob;
mod body;
mod catalog;
pub mod challenge;
mod client;
pub mod credential_provider;
pub mod credentials;
mod error;
mod image;
pub mod inspect;
mod keychain;
pub mod login;
pub mod manage;
mod manifest;
mod packages;
pub mod progress;
pub mod publish;
pub mod raw;
mod reference;
mod referrers;
mod session;
pub mod signatures;
pub mod sync;
pub mod transfer;
mod transport;

pub use blob::{BlobReader, PushOutcome};
pub use catalog::{DEFAULT_PAGE_SIZE, DeleteRefusal};
pub use client::{Client, Retry};
pub use credentials::{AuthFile, Credential, CredentialError};
pub use error::{ClientError, ErrorKind};
pub use keychain::{Env as AuthEnv, Keychain};
pub use login::{LoginError, LoginOutcome, Stored};
pub use manifest::{Descriptor, MAX_MANIFEST_BYTES};
pub use packages::PackageHit;
pub use reference::{Reference, ReferenceError, looks_like_host};
pub use referrers::{
    MAX_REFERRERS, OCI_INDEX, Referrer, Referrers, ReferrersFrom, SubjectIndexed, fallback_tag,
};
pub use transport::{ClientBuilder, ClientOptions, DEFAULT_CERT_DIRS};
