//! The repository list's rows and their cache (apart from the pages so that the app state
//! can hold the cache without depending on the page handlers).

use std::collections::BTreeMap;
use std::time::SystemTime;

/// One row of the repository list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RepoRow {
    pub name: String,
    /// Tags, cosign's signature, attestation and SBOM tags not counted.
    pub tags: usize,
    /// The distinct content of its tagged images, each counted as [`super::manifest::image_size`] does.
    pub size: u64,
    /// When an image tag of it was last set, moved or removed, in seconds since 1970;
    /// cosign's signature, attestation and SBOM tags are no push of it.
    pub pushed: Option<u64>,
}

/// The repository list's rows, each kept with the stat of the tag index it was computed
/// from: a row is summed up again only once a tag of its repository was set or removed, so
/// sorting by size, tags or last push reads the manifests of the repositories that changed,
/// not of every repository on every request. Manifests are immutable by digest; what a tag
/// change does not show (a scrub withdrawing a manifest, a GC) is picked up at the next tag
/// change of the repository or a restart.
#[derive(Debug, Default)]
pub(crate) struct RowCache(std::sync::Mutex<BTreeMap<String, (TagsVersion, RepoRow)>>);

/// A tag index's last write and size; None when the repository has no tag index.
pub(crate) type TagsVersion = Option<(SystemTime, u64)>;

impl RowCache {
    /// The row of `name` when it was summed up from the tag index at `version`.
    pub(crate) fn get(&self, name: &str, version: TagsVersion) -> Option<RepoRow> {
        let rows = self.0.lock().expect("row cache lock");
        rows.get(name)
            .filter(|(v, _)| *v == version)
            .map(|(_, row)| row.clone())
    }

    /// Keeps `row`, summed up from the tag index at `version`.
    pub(crate) fn insert(&self, version: TagsVersion, row: RepoRow) {
        let mut rows = self.0.lock().expect("row cache lock");
        rows.insert(row.name.clone(), (version, row));
    }
}
