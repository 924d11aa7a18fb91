//! The registry's package index extension (`GET /v2/_rd/packages`, see `docs/api.md`): which
//! images hold a package, by name pattern and pkg(5) version constraint. What `rdctl search`
//! runs.

use reqwest::StatusCode;
use serde::{Deserialize, Serialize};
use validator::{Digest, SpdxPackage};

use crate::body::{ReadError, read_limited};
use crate::client::Client;
use crate::error::ClientError;
use crate::session::Scope;

/// Largest search answer accepted.
const MAX_ANSWER_BYTES: u64 = 64 << 20;
/// Most pages one search follows (`next`).
const MAX_PAGES: usize = 1000;

/// One image a search found.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PackageHit {
    /// The repository.
    pub repository: String,
    /// The image manifest (the SBOM's subject).
    pub digest: Digest,
    /// Tags pointing at it.
    #[serde(default)]
    pub tags: Vec<String>,
    /// The SBOM referrers the packages come from.
    #[serde(default)]
    pub sboms: Vec<Digest>,
    /// The matching packages.
    #[serde(default)]
    pub packages: Vec<SpdxPackage>,
}

#[derive(Deserialize)]
struct Page {
    results: Vec<PackageHit>,
    #[serde(default)]
    next: Option<String>,
}

impl Client {
    /// Images at `registry` holding a package whose name matches `name` (a glob: `*`, `?`)
    /// and, when given, whose version satisfies `version` (`<5.2`, `>=2.1`, `=1.0`), following
    /// the registry's pages up to `limit` images. Only repositories the caller may pull appear.
    pub async fn search_packages(
        &self,
        registry: &str,
        name: &str,
        version: Option<&str>,
        limit: Option<usize>,
    ) -> Result<Vec<PackageHit>, ClientError> {
        let scope = Scope {
            host: registry,
            repo: None,
            manifest_ref: None,
        };
        // The answer depends on who asks, and anonymous callers may ask too: no challenge
        // would ever make the client send its credential.
        self.offer_credentials(registry).await?;
        let mut out = Vec::new();
        let mut last: Option<String> = None;
        for _ in 0..MAX_PAGES {
            let mut q = form_urlencoded::Serializer::new(String::new());
            q.append_pair("name", name);
            if let Some(v) = version {
                q.append_pair("version", v);
            }
            if let Some(l) = &last {
                q.append_pair("last", l);
            }
            let url = self.url(registry, &format!("/v2/_rd/packages?{}", q.finish()))?;
            let resp = self
                .send(&scope, &url, &|| self.http_for(&url).get(url.clone()))
                .await?;
            if matches!(
                resp.status(),
                StatusCode::NOT_FOUND | StatusCode::METHOD_NOT_ALLOWED
            ) {
                // Our registry answers every search (an empty one too) with 200: a 404 or 405
                // is a registry without the extension (distribution, zot, Harbor...).
                return Err(ClientError::Protocol {
                    url: url.to_string(),
                    reason: format!(
                        "{registry} has no package search API (GET /v2/_rd/packages answered \
                         {}): rdctl search needs rdctl registry serve, which indexes the SBOM \
                         of every image pushed to it",
                        resp.status().as_u16()
                    ),
                });
            }
            if resp.status() != StatusCode::OK {
                return Err(Self::unexpected(&url, resp).await);
            }
            let body = match read_limited(resp, MAX_ANSWER_BYTES).await {
                Ok(b) => b,
                Err(ReadError::TooLarge) => {
                    return Err(ClientError::Protocol {
                        url: url.to_string(),
                        reason: format!("the answer is larger than {MAX_ANSWER_BYTES} bytes"),
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
            let page: Page = serde_json::from_slice(&body).map_err(|e| ClientError::Protocol {
                url: url.to_string(),
                reason: format!("not a package search answer: {e}"),
            })?;
            let empty = page.results.is_empty();
            out.extend(page.results);
            if let Some(l) = limit
                && out.len() >= l
            {
                out.truncate(l);
                return Ok(out);
            }
            match page.next {
                Some(n) if !empty => last = Some(n),
                _ => return Ok(out),
            }
        }
        Err(ClientError::Protocol {
            url: format!("{registry}/v2/_rd/packages"),
            reason: format!("more than {MAX_PAGES} pages"),
        })
    }
}
