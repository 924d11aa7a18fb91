//! `only_signed` admission: which manifests and blobs of a proxied repository may be fetched
//! and cached, decided by the rule's signature policy at the upstream that served the image.

use registry_client::sync::{SignedCheckError, check_signed};
use validator::{Digest, Name, Tag, error_chain};

use super::{Proxy, Routed};
use crate::errors::{ApiError, ApiResult, Code};
use crate::repo::Repos;

impl Proxy {
    /// Whether `(name, d)` was admitted in this process (an admitted manifest, or a blob or
    /// platform manifest one names).
    pub(super) fn is_admitted(&self, name: &Name, d: &Digest) -> bool {
        self.admitted
            .lock()
            .expect("proxy admissions")
            .contains(&(name.as_str().to_owned(), d.clone()))
    }

    /// Records manifest `d` of `name` as admitted, with the blobs and platform manifests it
    /// names.
    pub(super) fn record(
        &self,
        name: &Name,
        d: &Digest,
        checked: &crate::manifest_rules::CheckedManifest,
    ) {
        let mut admitted = self.admitted.lock().expect("proxy admissions");
        for x in std::iter::once(d)
            .chain(&checked.blobs)
            .chain(&checked.manifests)
        {
            admitted.insert((name.as_str().to_owned(), x.clone()));
        }
    }

    /// For an `only_signed` rule: a manifest the cache holds (stored before, so admitted then,
    /// or before the rule had `only_signed`) is served as it is, and what it names may be
    /// fetched. Best effort: a manifest that cannot be read records nothing.
    pub(super) async fn note_cached(
        &self,
        routed: &Routed,
        repos: &Repos,
        name: &Name,
        d: &Digest,
        limit: u64,
    ) {
        if routed.policy.is_none() || self.is_admitted(name, d) {
            return;
        }
        let Ok(Some(link)) = repos.manifest_link(name, d).await else {
            return;
        };
        let Ok(bytes) = repos.manifest_bytes(d, limit.max(link.size)).await else {
            return;
        };
        if let Ok(checked) =
            crate::manifest_rules::check_document(&bytes, Some(link.media_type.as_str()))
        {
            self.record(name, d, &checked);
        }
    }

    /// `only_signed`: admits manifest `digest` of `name` (fetched from upstream `index`) or
    /// answers `403 DENIED` naming the rule, the image, the keys tried and why:
    /// - cosign's `.sig`/`.att`/`.sbom` tags and the tag schema's `sha256-<hex>` tags, and any
    ///   manifest with a `subject` (cosign v3 bundles, SBOMs), are admitted when the image
    ///   they belong to is: without them no client could verify anything;
    /// - a manifest an admitted index lists (a platform's) is admitted with it;
    /// - any other manifest must verify under the rule's policy ([`check_signed`] at the
    ///   upstream that served it; an index by its own digest, as cosign signs it).
    #[allow(clippy::too_many_arguments)]
    pub(super) async fn admit(
        &self,
        routed: &Routed,
        repos: &Repos,
        name: &Name,
        remote: &str,
        index: usize,
        tag: Option<&Tag>,
        digest: &Digest,
        checked: &crate::manifest_rules::CheckedManifest,
    ) -> ApiResult<()> {
        let belongs_to = match (tag, &checked.subject) {
            (_, Some(subject)) => Some(subject.clone()),
            (Some(t), None) if registry_client::manage::tag_name_kind(t.as_str()).is_some() => {
                let base = t.as_str().split('.').next().unwrap_or_default();
                base.split_once('-')
                    .and_then(|(alg, hex)| Digest::parse(&format!("{alg}:{hex}")).ok())
            }
            _ => None,
        };
        let image = belongs_to.as_ref().unwrap_or(digest);
        let admitted = self.is_admitted(name, image)
            || repos.manifest_link(name, image).await?.is_some()
            || (belongs_to.is_none() && !repos.indexes_listing(name, image, 1).await?.is_empty());
        if !admitted {
            self.check(routed, name, remote, index, image).await?;
        }
        self.admitted
            .lock()
            .expect("proxy admissions")
            .insert((name.as_str().to_owned(), image.clone()));
        self.record(name, digest, checked);
        Ok(())
    }

    /// [`check_signed`] of `digest` at upstream `index` of the rule; a refusal is `403
    /// DENIED`, a policy that could not be loaded too, signatures that could not be read
    /// `503 UNAVAILABLE`.
    async fn check(
        &self,
        routed: &Routed,
        name: &Name,
        remote: &str,
        index: usize,
        digest: &Digest,
    ) -> ApiResult<()> {
        let prefix = &routed.rule.prefix;
        let denied = |why: String| {
            tracing::warn!(repository = %name, %digest, rule = %prefix, reason = %why, "only_signed: refused; nothing cached");
            ApiError::new(
                Code::Denied,
                format!("[[proxy]] {prefix:?} only_signed refused {name}@{digest}: {why}"),
            )
            .with_reason()
        };
        let policy = match &routed.policy {
            Some(Ok(p)) => p,
            Some(Err(e)) => return Err(denied(e.clone())),
            None => return Ok(()),
        };
        let (u, client) = routed
            .upstreams()
            .nth(index)
            .expect("the upstream that served the manifest");
        let client = client.as_ref().map_err(|e| denied(e.clone()))?;
        let r = u
            .reference(remote, digest.as_str())
            .map_err(|e| denied(e.clone()))?;
        match check_signed(client, policy, &r, digest).await {
            Ok(a) => {
                tracing::info!(repository = %name, %digest, rule = ?a.rule, keys = ?a.keys, "only_signed: admitted");
                Ok(())
            }
            Err(SignedCheckError::Refused(refusal)) => {
                // The refusal's text carries its reason class.
                Err(denied(refusal.to_string()))
            }
            Err(e) => {
                let why = error_chain(&e);
                tracing::warn!(repository = %name, %digest, error = %why, "only_signed: signatures unreadable; nothing cached");
                Err(ApiError::new(
                    Code::Unavailable,
                    format!(
                        "[[proxy]] {prefix:?} only_signed could not check {name}@{digest}: {why}"
                    ),
                )
                .with_reason())
            }
        }
    }
}
