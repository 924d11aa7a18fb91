//! Manifests: resolve, fetch (bounded, verified) and push.

use bytes::Bytes;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_LENGTH, CONTENT_TYPE};
use validator::{Digest, VerifyError};

use crate::body::{ReadError, read_limited};
use crate::client::{Client, header_str};
use crate::error::ClientError;
use crate::reference::Reference;
use crate::session::Scope;

/// Media types a manifest GET accepts.
pub(crate) const MANIFEST_ACCEPT: &str = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json";

/// Largest manifest accepted from a registry.
pub const MAX_MANIFEST_BYTES: u64 = 4 << 20;

/// What a manifest resolves to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descriptor {
    /// The manifest's media type.
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size in bytes.
    pub size: u64,
}

impl Client {
    /// Resolves a reference to its manifest descriptor (HEAD, falling back to GET when the
    /// registry sends no digest header).
    pub async fn resolve(&self, r: &Reference) -> Result<Descriptor, ClientError> {
        let url = self.url(
            r.registry(),
            &format!("/v2/{}/manifests/{}", r.name(), r.manifest_ref()),
        )?;
        let manifest_ref = r.manifest_ref();
        let scope = Scope::pull(r.registry(), r.name()).for_manifest(&manifest_ref);
        let resp = self
            .send(&scope, &url, &|| {
                self.http_for(&url)
                    .head(url.clone())
                    .header(ACCEPT, MANIFEST_ACCEPT)
            })
            .await?;
        if resp.status() != StatusCode::OK {
            return Err(Self::unexpected(&url, resp).await);
        }
        let h = resp.headers();
        let media_type = header_str(h, CONTENT_TYPE.as_str())
            .map(|s| s.split(';').next().unwrap_or(s).trim().to_owned());
        let digest = header_str(h, "docker-content-digest").and_then(|d| Digest::parse(d).ok());
        let size = header_str(h, CONTENT_LENGTH.as_str()).and_then(|s| s.parse().ok());
        match (media_type, digest, size) {
            (Some(media_type), Some(digest), Some(size)) => {
                if let Some(want) = r.digest()
                    && want != &digest
                {
                    return Err(ClientError::Protocol {
                        url: url.to_string(),
                        reason: format!("asked for {want}, registry answered {digest}"),
                    });
                }
                Ok(Descriptor {
                    media_type,
                    digest,
                    size,
                })
            }
            _ => self.get_manifest(r).await.map(|(d, _)| d),
        }
    }

    /// Fetches a manifest (at most [`MAX_MANIFEST_BYTES`]) and checks its digest: against the
    /// reference's digest, else against the registry's `Docker-Content-Digest`.
    pub async fn get_manifest(&self, r: &Reference) -> Result<(Descriptor, Bytes), ClientError> {
        let url = self.url(
            r.registry(),
            &format!("/v2/{}/manifests/{}", r.name(), r.manifest_ref()),
        )?;
        let manifest_ref = r.manifest_ref();
        let scope = Scope::pull(r.registry(), r.name()).for_manifest(&manifest_ref);
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt - 1)).await;
            }
            let resp = self
                .send(&scope, &url, &|| {
                    self.http_for(&url)
                        .get(url.clone())
                        .header(ACCEPT, MANIFEST_ACCEPT)
                })
                .await?;
            if resp.status() != StatusCode::OK {
                return Err(Self::unexpected(&url, resp).await);
            }
            let media_type = header_str(resp.headers(), CONTENT_TYPE.as_str())
                .map(|s| s.split(';').next().unwrap_or(s).trim().to_owned())
                .unwrap_or_default();
            let header_digest =
                header_str(resp.headers(), "docker-content-digest").map(str::to_owned);
            let body = match read_limited(resp, MAX_MANIFEST_BYTES).await {
                Ok(b) => b,
                Err(ReadError::TooLarge) => {
                    return Err(ClientError::Protocol {
                        url: url.to_string(),
                        reason: format!("manifest is larger than {MAX_MANIFEST_BYTES} bytes"),
                    });
                }
                Err(ReadError::Body(e)) => {
                    last = e;
                    continue;
                }
            };
            let expected = match (r.digest(), header_digest) {
                (Some(d), _) => d.clone(),
                (None, Some(h)) => Digest::parse(&h).map_err(|e| ClientError::Protocol {
                    url: url.to_string(),
                    reason: format!("bad Docker-Content-Digest: {e}"),
                })?,
                (None, None) => Digest::sha256(&body),
            };
            let found = Digest::of(expected.algorithm(), &body);
            if found != expected {
                return Err(ClientError::Verify {
                    url: url.to_string(),
                    source: VerifyError::DigestMismatch { expected, found },
                });
            }
            let desc = Descriptor {
                media_type,
                digest: found,
                size: body.len() as u64,
            };
            return Ok((desc, body));
        }
        Err(ClientError::Transient {
            url: url.to_string(),
            attempts: self.retry.attempts,
            last,
        })
    }

    /// Pushes a manifest under the reference's tag or digest; returns its digest.
    pub async fn push_manifest(
        &self,
        r: &Reference,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<Digest, ClientError> {
        self.put_manifest(r, media_type, bytes).await.map(|p| p.0)
    }

    /// Pushes a manifest; returns its digest and the registry's `OCI-Subject` header, which a
    /// registry with the referrers API sends for a manifest with a `subject`.
    pub(crate) async fn put_manifest(
        &self,
        r: &Reference,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<(Digest, Option<String>), ClientError> {
        let digest = match r.digest() {
            Some(d) => Digest::of(d.algorithm(), &bytes),
            None => Digest::sha256(&bytes),
        };
        let url = self.url(
            r.registry(),
            &format!("/v2/{}/manifests/{}", r.name(), r.manifest_ref()),
        )?;
        let resp = self
            .send(&Scope::push(r.registry(), r.name()), &url, &|| {
                self.http_for(&url)
                    .put(url.clone())
                    .header(CONTENT_TYPE, media_type)
                    .body(bytes.clone())
            })
            .await?;
        if resp.status() != StatusCode::CREATED {
            return Err(Self::unexpected(&url, resp).await);
        }
        if let Some(h) = header_str(resp.headers(), "docker-content-digest")
            && h != digest.as_str()
        {
            return Err(ClientError::Protocol {
                url: url.to_string(),
                reason: format!("registry stored {h}, the manifest is {digest}"),
            });
        }
        let subject = header_str(resp.headers(), "oci-subject").map(str::to_owned);
        Ok((digest, subject))
    }
}
