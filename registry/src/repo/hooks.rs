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

    /// Manifest `d` is leaving repository `name`: its referrer entry is gone, its link goes
    /// right after every hook returned. A hook forgets what it recorded with the link of the
    /// epoch `leaving` names, and nothing a re-push at a newer epoch restamped (`docs/gc.md`,
    /// "Epochs"). An error stops the delete before the link goes (it is retried as a whole).
    fn on_delete<'a>(
        &'a self,
        repos: &'a Repos,
        name: &'a Name,
        d: &'a Digest,
        leaving: Leaving<'a>,
    ) -> BoxFuture<'a, ApiResult<()>>;
}

/// How a manifest leaves a repository, which says what its hooks forget.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Leaving<'a> {
    /// A DELETE through the API, which moved the link away from this epoch first: what was
    /// recorded with that link goes, and what was recorded about the manifest as a subject
    /// (its SBOMs' packages in the package index), as the client asked.
    Deleted(&'a str),
    /// Garbage collection of the link of this epoch: only what was recorded with that link. A
    /// subject's entries go with its SBOMs (queries skip a subject that is not linked), since
    /// a collector can race a re-push of the subject.
    Collected(&'a str),
}

impl<'a> Leaving<'a> {
    /// The epoch of the link that goes.
    pub(crate) fn epoch(self) -> &'a str {
        match self {
            Leaving::Deleted(e) | Leaving::Collected(e) => e,
        }
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::errors::Code;
    use crate::repo::ManifestLink;
    use crate::storage::{FsStore, Store};

    /// Records the deletes it is told about; refuses them when `fail`.
    #[derive(Default)]
    struct Recorder {
        seen: Mutex<Vec<(String, Digest)>>,
        fail: bool,
    }

    impl RepoHook for Recorder {
        fn name(&self) -> &'static str {
            "recorder"
        }

        fn on_delete<'a>(
            &'a self,
            repos: &'a Repos,
            name: &'a Name,
            d: &'a Digest,
            _leaving: Leaving<'a>,
        ) -> BoxFuture<'a, ApiResult<()>> {
            Box::pin(async move {
                // The link is still there while the hooks run.
                assert!(repos.manifest_link(name, d).await?.is_some());
                self.seen
                    .lock()
                    .unwrap()
                    .push((name.to_string(), d.clone()));
                if self.fail {
                    return Err(ApiError::new(Code::Denied, "the recorder refused"));
                }
                Ok(())
            })
        }
    }

    async fn repos_with(hooks: Vec<Arc<dyn RepoHook>>) -> (tempfile::TempDir, Repos, Name, Digest) {
        let dir = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(FsStore::open(dir.path()).unwrap());
        let repos = Repos::new(store).with_hooks(Hooks::new(hooks));
        let (name, d) = (Name::parse("hooked/app").unwrap(), Digest::sha256(b"m"));
        let link = ManifestLink {
            media_type: "application/vnd.oci.image.manifest.v1+json".into(),
            size: 1,
            subject: None,
        };
        repos
            .link_manifest(&name, &d, &crate::repo::Epochs::default(), &link)
            .await
            .unwrap();
        (dir, repos, name, d)
    }

    #[tokio::test]
    async fn every_hook_hears_of_a_delete_before_the_link_goes() {
        let (a, b) = (Arc::new(Recorder::default()), Arc::new(Recorder::default()));
        let (_dir, repos, name, d) = repos_with(vec![a.clone(), b.clone()]).await;
        assert!(repos.delete_manifest(&name, &d).await.unwrap());
        for r in [&a, &b] {
            assert_eq!(*r.seen.lock().unwrap(), vec![(name.to_string(), d.clone())]);
        }
        assert!(repos.manifest_link(&name, &d).await.unwrap().is_none());
        // A manifest the repository does not hold is no delete: no hook hears of it.
        assert!(!repos.delete_manifest(&name, &d).await.unwrap());
        assert_eq!(a.seen.lock().unwrap().len(), 1);
        assert_eq!(format!("{:?}", repos.hooks), "[\"recorder\", \"recorder\"]");
    }

    #[tokio::test]
    async fn a_failing_hook_stops_the_delete_before_the_link_goes() {
        let failing = Arc::new(Recorder {
            fail: true,
            ..Recorder::default()
        });
        let after = Arc::new(Recorder::default());
        let (_dir, repos, name, d) = repos_with(vec![failing.clone(), after.clone()]).await;
        let e = repos.delete_manifest(&name, &d).await.unwrap_err();
        assert_eq!(e.code, Code::Denied);
        assert!(repos.manifest_link(&name, &d).await.unwrap().is_some());
        assert!(after.seen.lock().unwrap().is_empty(), "hooks run in order");
    }
}
