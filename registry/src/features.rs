//! Where the registry's features plug into its core: the [`RepoHook`]s every [`Repos`] that
//! deletes manifests carries (the package index and quota usage forget a deleted manifest),
//! and immutable-tag rules as the core's [`TagVeto`]. The core (`repo`, `storage`, `upload`,
//! `lease`, `tombstone`, `manifest_rules`, `metrics`) imports none of this; module cycles are
//! kept out by `tests/module_graph.rs`.

use std::sync::Arc;

use validator::{Digest, Name, Tag};

use crate::errors::ApiError;
use crate::governance::ImmutableRule;
use crate::repo::Repos;
use crate::repo::hooks::{Hooks, RepoHook, TagVeto};

/// The hooks of the features that record something per manifest, in the order they run on a
/// delete: the package index, then quota usage (right before the link goes, so a crash in
/// between over-counts rather than under-counts).
pub(crate) fn repo_hooks() -> Hooks {
    Hooks::new(vec![
        Arc::new(crate::pkgindex::PackageIndexHook) as Arc<dyn RepoHook>,
        Arc::new(crate::governance::quota::QuotaHook),
    ])
}

/// `repos` with the features' hooks installed.
pub(crate) fn with_hooks(repos: Repos) -> Repos {
    repos.with_hooks(repo_hooks())
}

impl TagVeto for ImmutableRule {
    fn refusal(&self, name: &Name, tag: &Tag, old: &Digest, new: &Digest) -> ApiError {
        crate::governance::immutable::refusal(self, name, tag, old, new)
    }
}
