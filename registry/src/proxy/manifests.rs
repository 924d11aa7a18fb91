//! Manifests of proxied repositories: fetched from the first upstream whose answer verifies
//! (digest, size limit, the push rules), stored and linked; tags revalidated after their TTL,
//! the cached tag served when every upstream fails.

use std::time::Instant;

use bytes::Bytes;
use registry_client::ErrorKind;
use validator::{Digest, Name, Tag, error_chain};

use super::{Proxy, Routed};
use crate::errors::{ApiError, ApiResult, Code};
use crate::repo::{ManifestLink, Repos};

/// What the upstreams answered for a manifest.
enum Fetched {
    /// Verified bytes from `upstream` (the rule's upstream number `index`).
    Found {
        index: usize,
        upstream: String,
        digest: Digest,
        bytes: Bytes,
        checked: Box<crate::manifest_rules::CheckedManifest>,
    },
    /// Every upstream answered "not found".
    Missing,
    /// Some upstream failed (down, refused, bad content): each one's error.
    Failed(Vec<String>),
}

impl Proxy {
    /// GET a manifest at the upstreams in order; the first whose answer verifies wins.
    async fn fetch_manifest(
        &self,
        routed: &Routed,
        remote: &str,
        reference: &str,
        limit: u64,
    ) -> Fetched {
        let mut errors = Vec::new();
        for (index, (u, client)) in routed.upstreams().enumerate() {
            let client = match client {
                Ok(c) => c,
                Err(e) => {
                    errors.push(e.clone());
                    continue;
                }
            };
            let r = match u.reference(remote, reference) {
                Ok(r) => r,
                Err(e) => {
                    errors.push(e);
                    continue;
                }
            };
            let (desc, bytes) = match client.get_manifest(&r).await {
                Ok(found) => found,
                Err(e) if e.kind() == ErrorKind::NotFound => continue,
                Err(e) => {
                    if e.kind() == ErrorKind::Verify {
                        tracing::warn!(upstream = %u, reference = %r, error = %error_chain(&e), "upstream sent a manifest that does not match its digest; not cached, trying the next upstream");
                    }
                    errors.push(format!("{u}: {}", error_chain(&e)));
                    continue;
                }
            };
            if bytes.len() as u64 > limit {
                errors.push(format!(
                    "{u}: manifest {} is {} bytes, more than this registry accepts ({limit})",
                    desc.digest,
                    bytes.len()
                ));
                continue;
            }
            let media_type = (!desc.media_type.is_empty()).then_some(desc.media_type.as_str());
            match crate::manifest_rules::check_document(&bytes, media_type) {
                Ok(checked) => {
                    return Fetched::Found {
                        index,
                        upstream: u.to_string(),
                        digest: desc.digest,
                        bytes,
                        checked: Box::new(checked),
                    };
                }
                Err(e) => {
                    tracing::warn!(upstream = %u, reference = %r, error = %e.detail, "upstream sent a manifest this registry refuses; not cached, trying the next upstream");
                    errors.push(format!(
                        "{u}: {} is not a valid manifest: {}",
                        desc.digest, e.detail
                    ));
                }
            }
        }
        if errors.is_empty() {
            Fetched::Missing
        } else {
            Fetched::Failed(errors)
        }
    }

    /// Makes sure `name` has the manifest `reference` names when the repository is proxied:
    /// fetches a digest it lacks, revalidates a tag whose check is older than the TTL (a
    /// failed revalidation keeps the cached tag; with nothing cached it is a 503 naming the
    /// upstreams). Does nothing for other repositories.
    pub(crate) async fn ensure_manifest(
        &self,
        repos: &Repos,
        name: &Name,
        reference: &str,
        limit: u64,
    ) -> ApiResult<()> {
        let Some((routed, remote)) = self.route(name) else {
            return Ok(());
        };
        let tag = if reference.contains(':') {
            let Ok(d) = Digest::parse(reference) else {
                return Ok(()); // the handler refuses it
            };
            if repos.manifest_link(name, &d).await?.is_some() {
                self.note_cached(routed, repos, name, &d, limit).await;
                return Ok(());
            }
            None
        } else {
            let Ok(t) = Tag::parse(reference) else {
                return Ok(());
            };
            let key = (name.as_str().to_owned(), t.as_str().to_owned());
            let fresh = self
                .checked
                .lock()
                .expect("proxy tag checks")
                .get(&key)
                .is_some_and(|at| at.elapsed() < routed.rule.tag_ttl);
            if fresh && let Some(target) = repos.resolve_tag_target(name, &t).await? {
                self.note_cached(routed, repos, name, &target.digest, limit)
                    .await;
                return Ok(());
            }
            Some(t)
        };
        let (index, upstream, digest, bytes, checked) = match self
            .fetch_manifest(routed, &remote, reference, limit)
            .await
        {
            Fetched::Found {
                index,
                upstream,
                digest,
                bytes,
                checked,
            } => (index, upstream, digest, bytes, checked),
            Fetched::Missing => {
                tracing::debug!(repository = %name, reference, "not at any upstream");
                return Ok(());
            }
            Fetched::Failed(errors) => {
                let errors = errors.join("; ");
                let cached = match &tag {
                    Some(t) => repos.resolve_tag_target(name, t).await?.is_some(),
                    None => false,
                };
                if cached {
                    tracing::warn!(repository = %name, reference, error = %errors, "upstreams unavailable; serving the cache");
                    return Ok(());
                }
                tracing::warn!(repository = %name, reference, error = %errors, "upstreams unavailable and nothing cached");
                return Err(ApiError::new(
                        Code::Unavailable,
                        format!(
                            "{name}:{reference} is not cached and its upstreams could not supply it: {errors}"
                        ),
                    )
                    .with_reason());
            }
        };
        if routed.policy.is_some() {
            // `only_signed`: decided before anything of it is stored.
            self.admit(
                routed,
                repos,
                name,
                &remote,
                index,
                tag.as_ref(),
                &digest,
                &checked,
            )
            .await?;
        }
        let link = ManifestLink {
            media_type: checked.media_type.clone(),
            size: bytes.len() as u64,
            subject: checked.subject.clone(),
        };
        // Linked, listed and tagged at the epochs a hold gave, again when a DELETE moved the
        // link meanwhile (as a manifest PUT does).
        let (link, bytes, checked, tag) = (&link, &bytes, &checked, &tag);
        let digest = &digest;
        let attempt = move || async move {
            let own = repos.hold(digest).await?;
            if !own.data {
                repos
                    .put_manifest_bytes(digest, &own.epochs, bytes.clone())
                    .await?;
            }
            let epoch = own.epochs.manifest_link(name);
            repos.link_manifest(name, digest, &own.epochs, link).await?;
            if let Some(subject) = &checked.subject {
                // Listed under its subject as a pushed referrer is.
                let desc = descriptor(checked, digest, bytes.len());
                repos
                    .add_referrer(name, subject, digest, desc, epoch)
                    .await?;
            }
            if let Some(t) = tag {
                // The cache follows its upstream: `[[immutable]]` rules govern pushes, not this.
                repos.set_tag(name, t, digest, (link, epoch), None).await?;
            }
            Ok(epoch.to_owned())
        };
        repos
            .link_manifest_current(name, digest, tag.as_slice(), attempt)
            .await?;
        if let Some(t) = &tag {
            self.checked.lock().expect("proxy tag checks").insert(
                (name.as_str().to_owned(), t.as_str().to_owned()),
                Instant::now(),
            );
        }
        tracing::info!(repository = %name, reference, %digest, %upstream, "manifest cached from upstream");
        Ok(())
    }
}

/// The descriptor a referrers listing shows for a cached manifest with a subject.
fn descriptor(
    checked: &crate::manifest_rules::CheckedManifest,
    digest: &Digest,
    size: usize,
) -> serde_json::Value {
    let mut desc = serde_json::json!({
        "mediaType": checked.media_type,
        "digest": digest.as_str(),
        "size": size,
    });
    if let Some(t) = &checked.artifact_type {
        desc["artifactType"] = serde_json::Value::String(t.clone());
    }
    if let Some(a) = &checked.annotations {
        desc["annotations"] = a.clone();
    }
    desc
}
