//! Replication on push: a `[[sync]]` entry with `to` and `on_push = true` copies every
//! manifest pushed here (repository and tag globs) to another registry within seconds.
//!
//! The trigger is the event outbox ([`crate::events`]): each entry is an outbox endpoint of
//! its own, named `sync.<name>`, that takes push events of manifests. The event is in the
//! store before the push is answered, so a replica killed right after a push loses nothing:
//! whichever replica looks at the outbox next (the same one restarted, or another) copies it.
//! Delivery is the outbox's: claimed by one replica at a time, retried with backoff (1 s
//! doubling up to 60 s) while the destination fails, in order (a failure ends the pass), given
//! up after a day. An entry is delivered when the copy succeeded, or when the event is not
//! for the entry (another repository or tag).
//!
//! The copy itself is a [`Replicator`] the process injects (`rdctl registry serve` passes one
//! built on `registry_client`, the one copy path, with referrers and `only_signed`); it reads
//! from this registry's loopback endpoint, like the `[[sync]]` schedule ([`crate::mirror`]).

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::BoxFuture;

use crate::events::{Action, Endpoint, Event, IN_PROCESS, InProcess};
use crate::proxy::Upstream;

/// The media types whose push events replicate (manifests and indexes; blobs come with them).
const MANIFEST_TYPES: [&str; 4] = [
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
];

/// One `[[sync]]` entry with `to`: pushes here are copied there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicationEntry {
    /// Its name (its outbox is `sync.<name>`).
    pub name: String,
    /// The registry pushed to, and the repository prefix there.
    pub to: Upstream,
    /// A docker `config.json` or containers `auth.json` with the destination's credentials
    /// (and this registry's, when it has `[auth]`).
    pub auth_file: Option<PathBuf>,
    /// Repository globs (here; empty: every repository).
    pub repositories: Vec<String>,
    /// Tag globs (empty: every tag); pushes by digest and referrer tags always go.
    pub tags: Vec<String>,
    /// Copy referrers too (default true).
    pub referrers: bool,
    /// An admission policy file in the worker's format: copy only the images it admits.
    pub only_signed: Option<PathBuf>,
}

impl ReplicationEntry {
    /// The outbox endpoint of this entry.
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            name: format!("sync.{}", self.name),
            url: format!("{IN_PROCESS}{}", self.name),
            headers: Vec::new(),
            // One copy, however large; the claim (notifications.lease) should outlast it.
            timeout: Duration::from_secs(3600),
            backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            max_age: Duration::from_secs(24 * 3600),
            actions: vec![Action::Push],
            media_types: MANIFEST_TYPES.iter().map(|t| (*t).to_owned()).collect(),
            repositories: Vec::new(),
            ca_files: Vec::new(),
            insecure: false,
        }
    }

    /// Whether a push of `repository` (tagged `tag`, if the push named one) is for this entry.
    pub fn wants(&self, repository: &str, tag: Option<&str>) -> bool {
        let segments = validator::GlobSyntax {
            separator: Some(b'/'),
            question: true,
            double_star: validator::DoubleStar::CrossesOrNothingBeforeSeparator,
        };
        let repo_ok = self.repositories.is_empty()
            || self
                .repositories
                .iter()
                .any(|g| validator::glob_matches(g, repository, segments));
        let tag_ok = match tag {
            None => true,
            // cosign's and the tag schema's referrer tags travel with their image.
            Some(t) if t.starts_with("sha256-") => true,
            Some(t) => {
                self.tags.is_empty()
                    || self
                        .tags
                        .iter()
                        .any(|g| validator::glob_matches(g, t, validator::GlobSyntax::ANY))
            }
        };
        repo_ok && tag_ok
    }
}

/// Copies one pushed manifest from this registry (its loopback `HOST:PORT`, `source`) to the
/// entry's destination: `repository@digest`, tagged `tag` there when the push named one.
/// Returns a summary for the log, or why it failed (retried).
pub trait Replicator: Send + Sync + std::fmt::Debug {
    /// One copy.
    fn copy<'a>(
        &'a self,
        entry: &'a ReplicationEntry,
        source: &'a str,
        repository: &'a str,
        digest: &'a str,
        tag: Option<&'a str>,
    ) -> BoxFuture<'a, Result<String, String>>;
}

/// The outbox's in-process sink for replication entries.
#[derive(Debug)]
pub(crate) struct Delivery {
    pub(crate) entries: Vec<ReplicationEntry>,
    pub(crate) replicator: Arc<dyn Replicator>,
    /// This registry's loopback `HOST:PORT`.
    pub(crate) source: String,
}

impl InProcess for Delivery {
    fn deliver<'a>(
        &'a self,
        target: &'a str,
        event: &'a Event,
    ) -> BoxFuture<'a, Result<(), String>> {
        Box::pin(async move {
            let Some(entry) = self.entries.iter().find(|e| e.name == target) else {
                return Err(format!(
                    "no [[sync]] entry named {target:?} replicates on push"
                ));
            };
            let t = &event.target;
            let Some(digest) = t.digest.as_deref() else {
                return Ok(());
            };
            if !entry.wants(&t.repository, t.tag.as_deref()) {
                return Ok(());
            }
            let done = self
                .replicator
                .copy(entry, &self.source, &t.repository, digest, t.tag.as_deref())
                .await?;
            tracing::info!(sync = %entry.name, to = %entry.to, repository = %t.repository, tag = t.tag.as_deref().unwrap_or(""), digest, event = %event.id, "replicated on push: {done}");
            Ok(())
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn globs_select_what_replicates() {
        let e = ReplicationEntry {
            name: "dr".into(),
            to: Upstream::parse("http://127.0.0.1:5000/dr").unwrap(),
            auth_file: None,
            repositories: vec!["zones/**".into()],
            tags: vec!["1.*".into()],
            referrers: true,
            only_signed: None,
        };
        assert!(e.wants("zones/base", Some("1.0")));
        assert!(e.wants("zones/a/b", None));
        assert!(!e.wants("zones/base", Some("2.0")));
        assert!(e.wants(
            "zones/base",
            Some(&format!("sha256-{}.sig", "a".repeat(64)))
        ));
        assert!(!e.wants("other/base", Some("1.0")));
        let ep = e.endpoint();
        assert_eq!(ep.name, "sync.dr");
        assert!(ep.wants(Action::Push, "any", Some(MANIFEST_TYPES[0])));
        assert!(!ep.wants(Action::Push, "any", Some("application/octet-stream")));
        assert!(!ep.wants(Action::Delete, "any", Some(MANIFEST_TYPES[0])));
    }

    #[test]
    fn replication_entries_are_checked() {
        let parse = |t: &str| config_toml::from_str::<crate::mirror::FileSync>(t, &[]).unwrap();
        let e = parse("name = \"dr\"\nto = \"https://dr.example/zones\"\non_push = true\n")
            .check_replication()
            .unwrap();
        assert_eq!(e.to.prefix.as_deref(), Some("zones"));
        assert!(e.referrers);
        for (doc, key) in [
            (
                "name = \"dr\"\nto = \"https://dr.example\"\n",
                "sync.on_push",
            ),
            ("name = \"dr\"\non_push = true\n", "sync.to"),
            (
                "name = \"dr\"\nto = \"dr.example\"\non_push = true\n",
                "sync.to",
            ),
            (
                "name = \"dr\"\nto = \"https://dr.example\"\non_push = true\ninterval = \"1s\"\n",
                "sync.interval",
            ),
            (
                "name = \"dr\"\nto = \"https://dr.example\"\non_push = true\nupstream = \"http://a.example\"\n",
                "sync.from",
            ),
        ] {
            let f = parse(doc);
            assert!(f.replicates(), "{doc}");
            assert_eq!(f.check_replication().unwrap_err().0, key, "{doc}");
        }
        // An upstream entry never takes on_push.
        let f = parse("name = \"a\"\nupstream = \"http://a.example\"\ninterval = \"1s\"\n");
        assert!(!f.replicates());
    }
}
