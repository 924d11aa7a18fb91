//! The publishers of an image file, opened: a file repository or a depot per publisher.

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use ips_bridge::{
    Action, DepotClient, FileRepo, Fmri, GzipSink, PackageRef, PackageRepository, PayloadCache,
    TlsSettings,
};

use crate::imagefile::Origin;

/// A publisher's repository could not be opened or read.
#[derive(Debug, thiserror::Error)]
#[error("publisher {publisher} ({origin})")]
pub struct SourceError {
    /// The publisher.
    pub publisher: String,
    /// Its origin.
    pub origin: String,
    /// What failed (names the package, action or file).
    #[source]
    pub source: Box<dyn std::error::Error + Send + Sync>,
}

enum Repo {
    File(FileRepo),
    Depot(Box<DepotClient>),
}

/// One publisher's repository.
pub(crate) struct Source {
    name: String,
    origin: Origin,
    repo: Repo,
}

impl Source {
    fn err(&self, e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> SourceError {
        SourceError {
            publisher: self.name.clone(),
            origin: self.origin.as_string(),
            source: e.into(),
        }
    }

    /// The origin, as the image file names it.
    pub(crate) fn origin_string(&self) -> String {
        self.origin.as_string()
    }

    /// Every package version in the publisher's catalog.
    pub(crate) fn packages(&self) -> Result<Vec<PackageRef>, SourceError> {
        match &self.repo {
            Repo::File(r) => r.packages(&self.name).map_err(|e| self.err(e)),
            Repo::Depot(d) => {
                PackageRepository::packages(d.as_ref(), &self.name).map_err(|e| self.err(e))
            }
        }
    }

    /// The raw manifest of a package, checked by the repository against `package`'s SHA-1.
    pub(crate) fn manifest_bytes(&self, package: &PackageRef) -> Result<Vec<u8>, SourceError> {
        match &self.repo {
            Repo::File(r) => r.manifest_bytes(package).map_err(|e| self.err(e)),
            Repo::Depot(d) => d.manifest_bytes(package).map_err(|e| self.err(e)),
        }
    }

    /// Streams the verified, decompressed payload of `action` into `out`.
    pub(crate) fn payload(
        &self,
        package: &Fmri,
        action: &Action,
        out: &mut dyn Write,
    ) -> Result<u64, SourceError> {
        match &self.repo {
            Repo::File(r) => r.payload(package, action, out).map_err(|e| self.err(e)),
            Repo::Depot(d) => d.payload(package, action, out).map_err(|e| self.err(e)),
        }
    }

    /// Streams the payload of `action` member by member into `sink`: raw deflate data and
    /// verified content (see [`ips_bridge::GzipSink`]).
    pub(crate) fn splice_payload(
        &self,
        package: &Fmri,
        action: &Action,
        sink: &mut dyn GzipSink,
    ) -> Result<u64, SourceError> {
        match &self.repo {
            Repo::File(r) => r
                .splice_payload(package, action, sink)
                .map_err(|e| self.err(e)),
            Repo::Depot(d) => d
                .splice_payload(package, action, sink)
                .map_err(|e| self.err(e)),
        }
    }
}

/// The image file's publishers, each with its repository.
pub(crate) struct Sources {
    by_name: BTreeMap<String, Source>,
}

impl Sources {
    /// Opens every publisher's origin, depots over `https://` with `tls`. Payloads from
    /// depots go through `cache` when given (verified on entry, verified again on every
    /// read); file repositories are local already and are read directly.
    pub(crate) fn open(
        publishers: &BTreeMap<String, Origin>,
        cache: Option<&Path>,
        tls: &TlsSettings,
    ) -> Result<Self, SourceError> {
        let mut by_name = BTreeMap::new();
        for (name, origin) in publishers {
            let err = |e: Box<dyn std::error::Error + Send + Sync>| SourceError {
                publisher: name.clone(),
                origin: origin.as_string(),
                source: e,
            };
            let repo = match origin {
                Origin::Path(p) => Repo::File(FileRepo::open(p).map_err(|e| err(Box::new(e)))?),
                Origin::Url(u) => {
                    let mut client = DepotClient::builder(u)
                        .tls(tls.clone())
                        .connect()
                        .map_err(|e| err(Box::new(e)))?;
                    if let Some(dir) = cache {
                        client = client.with_cache(PayloadCache::new(dir));
                    }
                    Repo::Depot(Box::new(client))
                }
            };
            by_name.insert(
                name.clone(),
                Source {
                    name: name.clone(),
                    origin: origin.clone(),
                    repo,
                },
            );
        }
        Ok(Sources { by_name })
    }

    /// The source of a publisher.
    pub(crate) fn get(&self, publisher: &str) -> Option<&Source> {
        self.by_name.get(publisher)
    }

    /// Publisher names, in name order.
    pub(crate) fn names(&self) -> impl Iterator<Item = &str> {
        self.by_name.keys().map(String::as_str)
    }
}
