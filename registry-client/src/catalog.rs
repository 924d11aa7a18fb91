//! Listing and deleting: `GET /v2/_catalog` and `GET /v2/<name>/tags/list` following `Link`
//! pages (same host only, bounded), and `DELETE /v2/<name>/manifests/<tag-or-digest>`.

use crate::body::{ReadError, read_limited};
use crate::client::Client;
use crate::error::ClientError;
use crate::reference::Reference;
use crate::referrers::next_link;
use crate::session::Scope;
use reqwest::StatusCode;

/// Most pages one listing follows.
const MAX_PAGES: usize = 1000;

/// Largest listing page accepted.
const MAX_PAGE_BYTES: u64 = 4 << 20;

/// Page size asked for when the caller has no preference.
pub const DEFAULT_PAGE_SIZE: usize = 100;

/// Why a registry refused a manifest or tag DELETE, for a caller to explain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum DeleteRefusal {
    /// 405 or `UNSUPPORTED`: deletes are disabled on that registry.
    Disabled,
    /// A tag DELETE was refused (400 or `DIGEST_INVALID`/`TAG_INVALID`/`UNSUPPORTED` on a tag):
    /// the registry deletes manifests only by digest (CNCF distribution 2.8).
    TagsNotDeletable,
    /// 409 `MANIFEST_REFERENCED`: an index in the repository still lists the manifest (our
    /// registry and GitLab's; [`Client::delete_manifest`] with `force` deletes it at ours).
    Referenced,
}

impl DeleteRefusal {
    /// Classifies a failed DELETE of `by_tag` (true for a tag) from the registry's answer.
    pub fn of(e: &ClientError, by_tag: bool) -> Option<DeleteRefusal> {
        let ClientError::Registry { status, code, .. } = e else {
            return None;
        };
        if code == "MANIFEST_REFERENCED" {
            return Some(DeleteRefusal::Referenced);
        }
        if by_tag && (*status == 400 || code == "DIGEST_INVALID" || code == "TAG_INVALID") {
            return Some(DeleteRefusal::TagsNotDeletable);
        }
        if *status == 405 || code == "UNSUPPORTED" {
            return Some(DeleteRefusal::Disabled);
        }
        None
    }
}

#[derive(serde::Deserialize)]
struct CatalogPage {
    #[serde(default)]
    repositories: Option<Vec<String>>,
}

#[derive(serde::Deserialize)]
struct TagsPage {
    #[serde(default)]
    tags: Option<Vec<String>>,
}

impl Client {
    /// The repositories of a registry (`GET /v2/_catalog?n=<page>`, following `Link`), at most
    /// `limit` of them when given.
    pub async fn catalog(
        &self,
        registry: &str,
        page_size: usize,
        limit: Option<usize>,
    ) -> Result<Vec<String>, ClientError> {
        // The catalog is filtered by who asks, and anonymous callers may be allowed to read
        // it: offer the stored credential instead of listing what anonymous callers see.
        self.offer_credentials(registry).await?;
        let scope = Scope {
            host: registry,
            repo: None,
            manifest_ref: None,
        };
        let first = format!("/v2/_catalog?n={}", page_size.max(1));
        self.pages(&scope, registry, &first, limit, |body| {
            serde_json::from_slice::<CatalogPage>(body)
                .map(|p| p.repositories.unwrap_or_default())
                .map_err(|e| format!("not a catalog page: {e}"))
        })
        .await
    }

    /// The tags of `repo`'s repository (`GET /v2/<name>/tags/list?n=<page>`, following
    /// `Link`), in the registry's order, at most `limit` when given.
    pub async fn tags(
        &self,
        repo: &Reference,
        page_size: usize,
        limit: Option<usize>,
    ) -> Result<Vec<String>, ClientError> {
        let scope = Scope::pull(repo.registry(), repo.name());
        let first = format!("/v2/{}/tags/list?n={}", repo.name(), page_size.max(1));
        self.pages(&scope, repo.registry(), &first, limit, |body| {
            serde_json::from_slice::<TagsPage>(body)
                .map(|p| p.tags.unwrap_or_default())
                .map_err(|e| format!("not a tag list page: {e}"))
        })
        .await
    }

    async fn pages(
        &self,
        scope: &Scope<'_>,
        registry: &str,
        first: &str,
        limit: Option<usize>,
        parse: impl Fn(&[u8]) -> Result<Vec<String>, String>,
    ) -> Result<Vec<String>, ClientError> {
        let mut url = self.url(registry, first)?;
        let mut out = Vec::new();
        for _ in 0..MAX_PAGES {
            let resp = self
                .send(scope, &url, &|| self.http_for(&url).get(url.clone()))
                .await?;
            if resp.status() != StatusCode::OK {
                return Err(Self::unexpected(&url, resp).await);
            }
            let next = next_link(&url, resp.headers())?;
            let body = match read_limited(resp, MAX_PAGE_BYTES).await {
                Ok(b) => b,
                Err(ReadError::TooLarge) => {
                    return Err(ClientError::Protocol {
                        url: url.to_string(),
                        reason: format!("a page is larger than {MAX_PAGE_BYTES} bytes"),
                    });
                }
                Err(ReadError::Body(last)) => {
                    return Err(ClientError::Transient {
                        url: url.to_string(),
                        attempts: 1,
                        last,
                    });
                }
            };
            let items = parse(&body).map_err(|reason| ClientError::Protocol {
                url: url.to_string(),
                reason,
            })?;
            let empty = items.is_empty();
            out.extend(items);
            if let Some(l) = limit
                && out.len() >= l
            {
                out.truncate(l);
                return Ok(out);
            }
            match next {
                Some(n) if !empty => url = n,
                _ => return Ok(out),
            }
        }
        Err(ClientError::Protocol {
            url: url.to_string(),
            reason: format!("more than {MAX_PAGES} pages"),
        })
    }

    /// Deletes a tag (the reference has a tag and no digest) or a manifest by digest:
    /// `DELETE /v2/<name>/manifests/<tag-or-digest>`, 202 (or 200/204) expected. A refusal
    /// comes back as the registry's error; [`DeleteRefusal::of`] classifies it. With `force`
    /// the request says `?force=true`: our registry then deletes a manifest an index still
    /// lists (it refuses that with [`DeleteRefusal::Referenced`] otherwise); other registries
    /// ignore the parameter.
    pub async fn delete_manifest(&self, r: &Reference, force: bool) -> Result<(), ClientError> {
        let url = self.url(
            r.registry(),
            &format!(
                "/v2/{}/manifests/{}{}",
                r.name(),
                r.manifest_ref(),
                if force { "?force=true" } else { "" }
            ),
        )?;
        let scope = Scope::delete(r.registry(), r.name());
        let resp = self
            .send(&scope, &url, &|| self.http_for(&url).delete(url.clone()))
            .await?;
        match resp.status() {
            StatusCode::ACCEPTED | StatusCode::OK | StatusCode::NO_CONTENT => Ok(()),
            _ => Err(Self::unexpected(&url, resp).await),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn registry_error(status: u16, code: &str) -> ClientError {
        ClientError::Registry {
            url: "http://r/v2/a/manifests/x".into(),
            status,
            code: code.into(),
            message: String::new(),
        }
    }

    #[test]
    fn delete_refusals_are_classified() {
        assert_eq!(
            DeleteRefusal::of(&registry_error(409, "MANIFEST_REFERENCED"), false),
            Some(DeleteRefusal::Referenced)
        );
        assert_eq!(
            DeleteRefusal::of(&registry_error(405, "UNSUPPORTED"), false),
            Some(DeleteRefusal::Disabled)
        );
        assert_eq!(
            DeleteRefusal::of(&registry_error(405, "UNSUPPORTED"), true),
            Some(DeleteRefusal::Disabled)
        );
        assert_eq!(
            DeleteRefusal::of(&registry_error(400, "DIGEST_INVALID"), true),
            Some(DeleteRefusal::TagsNotDeletable)
        );
        assert_eq!(
            DeleteRefusal::of(&registry_error(400, "DIGEST_INVALID"), false),
            None
        );
        assert_eq!(
            DeleteRefusal::of(
                &ClientError::NotFound {
                    url: "u".into(),
                    code: String::new()
                },
                true
            ),
            None
        );
    }
}
