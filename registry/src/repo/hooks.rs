//! How features plug into the core's repository operations without the core importing them.
//!
//! [`RepoHook`]s are installed once where the registry is assembled (see `crate::features`,
//! used by [`crate::state::AppState::new`] and the garbage collector); [`super::Repos`] calls
//! them when a manifest leaves a repository. A [`TagVeto`] is a rule that may refuse moving a
//! tag; the caller passes the one that applies to [`super::Repos::set_tag`], which consults it
//! inside the conditional write of the tag index, so a racing writer cannot slip in between.

use std::fmt;
use std::sync::Arc;

use validator::{Digest, Name, Tag};

use super::Repos;
use crate::errors::{ApiError, ApiResult};
use crate::storage::BoxFuture;

/// A feature's part in repository changes.
pub(crate) trait RepoHook: Send + Sync {
    /// Short name for logs and [`Hooks`]'s debug output.
    fn name(&self) -> &'static str;

    /// Manifest `d` is leaving repository `name`: its tags and its referrer entry are gone, its
    /// link goes right after every hook returned. A hook forgets what it recorded about the
    /// manifest; an error stops the delete before the link goes (it is retried as a whole).
    fn on_delete<'a>(
        &'a self,
        repos: &'a Repos,
        name: &'a Name,
        d: &'a Digest,
    ) -> BoxFuture<'a, ApiResult<()>>;
}

/// A rule under which a tag that points at one manifest may not move to another.
pub(crate) trait TagVeto: fmt::Display + Send + Sync {
    /// The answer to moving `tag` of `name` from `old` to `new`.
    fn refusal(&self, name: &Name, tag: &Tag, old: &Digest, new: &Digest) -> ApiError;
}

/// The hooks installed in a [`Repos`], called in order.
#[derive(Clone, Default)]
pub(crate) struct Hooks(Arc<[Arc<dyn RepoHook>]>);

impl Hooks {
    pub(crate) fn new(hooks: Vec<Arc<dyn RepoHook>>) -> Hooks {
        Hooks(hooks.into())
    }

    pub(crate) fn iter(&self) -> impl Iterator<Item = &Arc<dyn RepoHook>> {
        self.0.iter()
    }
}

impl fmt::Debug for Hooks {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.0.iter().map(|h| h.name()))
            .finish()
    }
}
