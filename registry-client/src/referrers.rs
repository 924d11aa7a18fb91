//! Referrers (distribution-spec 1.1): what refers to a manifest through its `subject`.
//!
//! [`Client::referrers`] lists them with `GET /v2/<name>/referrers/<digest>` and treats the API
//! as present only on a 200 whose `Content-Type` is exactly the OCI index type (as
//! go-containerregistry does). On 404, 400 or 406, or another content type, it reads the
//! referrers tag schema instead ([`fallback_tag`]): a missing tag, or one that is not an OCI
//! index, means no referrers. [`Client::push_referrer`] pushes a manifest and, when it has a
//! `subject` and the registry's answer has no `OCI-Subject` header, adds it to that tag's index
//! itself. Every answer is read through the manifest size limit, and listings are bounded in
//! pages and entries.
//!
//! The tag index is read, extended and written back without a conditional request (Distribution
//! 2.8 offers none for manifests), so two clients adding referrers to one subject at the same
//! moment can lose one entry; the spec leaves such races to the clients.

use std::collections::BTreeMap;

use bytes::Bytes;
use reqwest::StatusCode;
use reqwest::header::{ACCEPT, CONTENT_TYPE, LINK};
use validator::{Digest, Tag};

use crate::body::{ReadError, read_limited};
use crate::client::{Client, header_str};
use crate::error::{ClientError, ErrorKind};
use crate::manifest::MAX_MANIFEST_BYTES;
use crate::reference::Reference;
use crate::reference::authority;
use crate::session::Scope;

/// The OCI image index media type: referrers lists and tag schema indexes are this type.
pub const OCI_INDEX: &str = "application/vnd.oci.image.index.v1+json";

/// Most referrers one listing returns (a guard against hostile registries).
pub const MAX_REFERRERS: usize = 10_000;

/// Most pages one listing follows.
const MAX_PAGES: usize = 100;

/// One entry of a referrers list: a descriptor of a manifest whose `subject` is the digest.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Referrer {
    /// The referrer's media type.
    pub media_type: String,
    /// Its digest.
    pub digest: Digest,
    /// Its size.
    pub size: u64,
    /// Its `artifactType` (the manifest's, else its config's media type).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub artifact_type: Option<String>,
    /// The manifest's annotations.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub annotations: BTreeMap<String, String>,
}

impl Referrer {
    /// The descriptor the referrers API lists for a manifest or index, from its bytes: `None`
    /// when it is not JSON or has no `subject`. Returns the subject's digest too.
    pub fn describe(media_type: &str, bytes: &[u8]) -> Option<(Referrer, Digest)> {
        let doc: serde_json::Value = serde_json::from_slice(bytes).ok()?;
        let subject = Digest::parse(doc.get("subject")?.get("digest")?.as_str()?).ok()?;
        let artifact_type = doc
            .get("artifactType")
            .or_else(|| doc.get("config").and_then(|c| c.get("mediaType")))
            .and_then(|t| t.as_str())
            .map(str::to_owned);
        let annotations = doc
            .get("annotations")
            .and_then(|a| serde_json::from_value(a.clone()).ok())
            .unwrap_or_default();
        let referrer = Referrer {
            media_type: media_type.to_owned(),
            digest: Digest::sha256(bytes),
            size: bytes.len() as u64,
            artifact_type,
            annotations,
        };
        Some((referrer, subject))
    }
}

/// Where a referrers list came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum ReferrersFrom {
    /// The registry's referrers API.
    Api,
    /// The referrers tag schema (the registry has no API).
    TagSchema,
}

/// A referrers list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Referrers {
    /// Where it came from.
    pub from: ReferrersFrom,
    /// The entries, in the registry's order.
    pub manifests: Vec<Referrer>,
}

/// How a pushed manifest became findable as a referrer.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SubjectIndexed {
    /// It has no `subject`.
    NoSubject,
    /// The registry answered `OCI-Subject`: its referrers API lists it.
    Api,
    /// The registry has no API: the manifest was added to the tag schema index at this tag.
    TagAdded(Tag),
    /// The tag schema index at this tag already listed it.
    TagHad(Tag),
}

/// The referrers tag schema tag for a digest: `<alg>-<encoded>`, the algorithm cut to 32
/// characters and the encoded part to 64, every character a tag does not allow replaced by `-`.
pub fn fallback_tag(digest: &Digest) -> Tag {
    let name = fallback_tag_name(digest.algorithm().as_str(), digest.encoded());
    // The algorithm is sha256 or sha512 and the encoded part hex: always a valid tag.
    Tag::parse(&name).expect("a digest's fallback tag is a valid tag")
}

/// [`fallback_tag`] over the two parts of any digest string.
fn fallback_tag_name(algorithm: &str, encoded: &str) -> String {
    let alg: String = algorithm.chars().take(32).collect();
    let enc: String = encoded.chars().take(64).collect();
    format!("{alg}-{enc}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// An index page as the API sends it (fields beyond `manifests` ignored).
#[derive(serde::Deserialize)]
#[serde(rename_all = "camelCase")]
struct Page {
    #[serde(default)]
    media_type: Option<String>,
    #[serde(default)]
    manifests: Vec<Referrer>,
}

impl Client {
    /// Lists the referrers of `subject` in `repo`'s repository (see the module docs).
    pub async fn referrers(
        &self,
        repo: &Reference,
        subject: &Digest,
    ) -> Result<Referrers, ClientError> {
        let mut url = self.url(
            repo.registry(),
            &format!("/v2/{}/referrers/{subject}", repo.name()),
        )?;
        let scope = Scope::pull(repo.registry(), repo.name());
        let mut manifests = Vec::new();
        for page in 0..MAX_PAGES {
            let resp = self
                .send(&scope, &url, &|| {
                    self.http_for(&url)
                        .get(url.clone())
                        .header(ACCEPT, OCI_INDEX)
                })
                .await?;
            let status = resp.status();
            let is_index = header_str(resp.headers(), CONTENT_TYPE.as_str()) == Some(OCI_INDEX);
            if page == 0
                && (matches!(
                    status,
                    StatusCode::NOT_FOUND | StatusCode::BAD_REQUEST | StatusCode::NOT_ACCEPTABLE
                ) || (status == StatusCode::OK && !is_index))
            {
                return self.referrers_from_tag(repo, subject).await;
            }
            if status != StatusCode::OK || !is_index {
                return Err(match status {
                    StatusCode::OK => ClientError::Protocol {
                        url: url.to_string(),
                        reason: "a referrers page that is not an OCI index".to_owned(),
                    },
                    _ => Self::unexpected(&url, resp).await,
                });
            }
            let next = next_link(&url, resp.headers())?;
            let body = read_page(&url, resp).await?;
            let page: Page = serde_json::from_slice(&body).map_err(|e| ClientError::Protocol {
                url: url.to_string(),
                reason: format!("the referrers list is not an OCI index: {e}"),
            })?;
            manifests.extend(page.manifests);
            if manifests.len() > MAX_REFERRERS {
                return Err(ClientError::Protocol {
                    url: url.to_string(),
                    reason: format!("more than {MAX_REFERRERS} referrers"),
                });
            }
            match next {
                Some(n) => url = n,
                None => {
                    return Ok(Referrers {
                        from: ReferrersFrom::Api,
                        manifests,
                    });
                }
            }
        }
        Err(ClientError::Protocol {
            url: url.to_string(),
            reason: format!("more than {MAX_PAGES} pages of referrers"),
        })
    }

    /// The tag schema index for `subject`: a missing tag or one that is not an OCI index means
    /// no referrers.
    async fn referrers_from_tag(
        &self,
        repo: &Reference,
        subject: &Digest,
    ) -> Result<Referrers, ClientError> {
        let none = Referrers {
            from: ReferrersFrom::TagSchema,
            manifests: Vec::new(),
        };
        let r = repo.with_tag(fallback_tag(subject));
        let bytes = match self.get_manifest(&r).await {
            Ok((_, bytes)) => bytes,
            Err(e) if e.kind() == ErrorKind::NotFound => return Ok(none),
            Err(e) => return Err(e),
        };
        match serde_json::from_slice::<Page>(&bytes) {
            Ok(page) if page.media_type.as_deref() == Some(OCI_INDEX) => {
                let mut manifests = page.manifests;
                manifests.truncate(MAX_REFERRERS);
                Ok(Referrers {
                    from: ReferrersFrom::TagSchema,
                    manifests,
                })
            }
            _ => {
                tracing::warn!(reference = %r, "the referrers tag is not an OCI index; no referrers");
                Ok(none)
            }
        }
    }

    /// Pushes a manifest by digest or tag, as [`Client::push_manifest`] does. When it has a
    /// `subject` and the registry does not answer `OCI-Subject`, adds it to the referrers tag
    /// schema index of the subject: GET the tag (missing: an empty index), skip if the digest
    /// is listed, else append its descriptor (with `artifactType` and annotations) and PUT it
    /// back. A tag that holds something other than an OCI index is an error.
    pub async fn push_referrer(
        &self,
        r: &Reference,
        media_type: &str,
        bytes: Bytes,
    ) -> Result<SubjectIndexed, ClientError> {
        let described = Referrer::describe(media_type, &bytes);
        let (digest, oci_subject) = self.put_manifest(r, media_type, bytes).await?;
        let Some((mut entry, subject)) = described else {
            return Ok(SubjectIndexed::NoSubject);
        };
        if oci_subject.is_some() {
            return Ok(SubjectIndexed::Api);
        }
        entry.digest = digest;
        let tag = fallback_tag(&subject);
        let tagged = r.with_tag(tag.clone());
        let mut index = match self.get_manifest(&tagged).await {
            Ok((_, existing)) => {
                let bad = |reason: String| ClientError::Protocol {
                    url: tagged.to_string(),
                    reason,
                };
                let v: serde_json::Value = serde_json::from_slice(&existing)
                    .map_err(|e| bad(format!("the referrers tag is not JSON: {e}")))?;
                if v.get("mediaType").and_then(|m| m.as_str()) != Some(OCI_INDEX)
                    || !v.get("manifests").is_some_and(|m| m.is_array())
                {
                    return Err(bad(
                        "the referrers tag holds something other than an OCI index".to_owned(),
                    ));
                }
                v
            }
            Err(e) if e.kind() == ErrorKind::NotFound => serde_json::json!({
                "schemaVersion": 2,
                "mediaType": OCI_INDEX,
                "manifests": [],
            }),
            Err(e) => return Err(e),
        };
        let Some(list) = index.get_mut("manifests").and_then(|m| m.as_array_mut()) else {
            return Err(ClientError::Protocol {
                url: tagged.to_string(),
                reason: "the referrers tag index has no manifests list".to_owned(),
            });
        };
        let listed = list
            .iter()
            .any(|d| d.get("digest").and_then(|d| d.as_str()) == Some(entry.digest.as_str()));
        if listed {
            return Ok(SubjectIndexed::TagHad(tag));
        }
        if list.len() >= MAX_REFERRERS {
            return Err(ClientError::Protocol {
                url: tagged.to_string(),
                reason: format!("the referrers tag index already lists {MAX_REFERRERS} entries"),
            });
        }
        list.push(
            serde_json::to_value(&entry).map_err(|e| ClientError::Protocol {
                url: tagged.to_string(),
                reason: format!("cannot encode the descriptor: {e}"),
            })?,
        );
        let out = serde_json::to_vec(&index).map_err(|e| ClientError::Protocol {
            url: tagged.to_string(),
            reason: format!("cannot encode the index: {e}"),
        })?;
        self.push_manifest(&tagged, OCI_INDEX, Bytes::from(out))
            .await?;
        Ok(SubjectIndexed::TagAdded(tag))
    }
}

async fn read_page(url: &reqwest::Url, resp: reqwest::Response) -> Result<Bytes, ClientError> {
    match read_limited(resp, MAX_MANIFEST_BYTES).await {
        Ok(b) => Ok(b),
        Err(ReadError::TooLarge) => Err(ClientError::Protocol {
            url: url.to_string(),
            reason: format!("a referrers page is larger than {MAX_MANIFEST_BYTES} bytes"),
        }),
        Err(ReadError::Body(last)) => Err(ClientError::Transient {
            url: url.to_string(),
            attempts: 1,
            last,
        }),
    }
}

/// The `Link: <…>; rel="next"` target, resolved against the page's URL; only on the same host.
pub(crate) fn next_link(
    url: &reqwest::Url,
    headers: &reqwest::header::HeaderMap,
) -> Result<Option<reqwest::Url>, ClientError> {
    for value in headers.get_all(LINK) {
        let Ok(value) = value.to_str() else { continue };
        for link in value.split(',') {
            let mut parts = link.split(';');
            let target = parts.next().unwrap_or("").trim();
            let is_next = parts.any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            });
            let Some(target) = target.strip_prefix('<').and_then(|t| t.strip_suffix('>')) else {
                continue;
            };
            if !is_next {
                continue;
            }
            let next = url.join(target).map_err(|e| ClientError::Protocol {
                url: url.to_string(),
                reason: format!("bad Link {target:?}: {e}"),
            })?;
            if authority(&next) != authority(url) || next.scheme() != url.scheme() {
                return Err(ClientError::Protocol {
                    url: url.to_string(),
                    reason: format!("the next page {next} is on another host"),
                });
            }
            return Ok(Some(next));
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fallback_tag_is_alg_dash_hex() {
        let d = Digest::sha256(b"x");
        let t = fallback_tag(&d);
        assert_eq!(t.as_str(), format!("sha256-{}", d.encoded()));
        let d = Digest::of(validator::Algorithm::Sha512, b"x");
        let t = fallback_tag(&d);
        assert_eq!(
            t.as_str().len(),
            "sha512-".len() + 64,
            "the hex is cut to 64"
        );
        assert_eq!(t.as_str(), format!("sha512-{}", &d.encoded()[..64]));
    }

    #[test]
    fn fallback_tag_truncates_and_replaces() {
        let long_alg = "a".repeat(40);
        let long_enc = "b".repeat(100);
        let name = fallback_tag_name(&long_alg, &long_enc);
        assert_eq!(name, format!("{}-{}", "a".repeat(32), "b".repeat(64)));
        assert_eq!(
            fallback_tag_name("sha256+b64u", "ab=c/d:e"),
            "sha256-b64u-ab-c-d-e"
        );
        assert!(Tag::parse(&fallback_tag_name("multi+alg", &"=".repeat(80))).is_ok());
    }

    #[test]
    fn describe_takes_artifact_type_then_config_type() {
        let subject = Digest::sha256(b"img");
        let with = serde_json::json!({
            "schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
            "artifactType": "application/spdx+json",
            "config": {"mediaType": "application/vnd.oci.empty.v1+json", "digest": Digest::sha256(b"{}"), "size": 2},
            "layers": [], "subject": {"mediaType": "application/vnd.oci.image.manifest.v1+json",
            "digest": subject, "size": 3}, "annotations": {"a": "b"}
        });
        let bytes = serde_json::to_vec(&with).unwrap();
        let (r, s) = Referrer::describe("application/vnd.oci.image.manifest.v1+json", &bytes)
            .expect("a referrer");
        assert_eq!(s, subject);
        assert_eq!(r.artifact_type.as_deref(), Some("application/spdx+json"));
        assert_eq!(r.annotations.get("a").map(String::as_str), Some("b"));
        assert_eq!(r.digest, Digest::sha256(&bytes));
        let mut without = with.clone();
        without.as_object_mut().unwrap().remove("artifactType");
        let bytes = serde_json::to_vec(&without).unwrap();
        let (r, _) = Referrer::describe("m", &bytes).unwrap();
        assert_eq!(
            r.artifact_type.as_deref(),
            Some("application/vnd.oci.empty.v1+json")
        );
        let mut plain = with;
        plain.as_object_mut().unwrap().remove("subject");
        assert!(Referrer::describe("m", &serde_json::to_vec(&plain).unwrap()).is_none());
    }

    #[test]
    fn next_link_resolves_relative_and_refuses_other_hosts() {
        let url = reqwest::Url::parse("http://127.0.0.1:5000/v2/a/referrers/sha256:x").unwrap();
        let mut h = reqwest::header::HeaderMap::new();
        h.insert(
            LINK,
            "</v2/a/referrers/sha256:x?n=1&last=y>; rel=\"next\""
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_link(&url, &h).unwrap().unwrap().as_str(),
            "http://127.0.0.1:5000/v2/a/referrers/sha256:x?n=1&last=y"
        );
        h.insert(
            LINK,
            "<http://evil.example/v2/a>; rel=\"next\"".parse().unwrap(),
        );
        assert!(next_link(&url, &h).is_err());
        h.insert(LINK, "</v2/a?x>; rel=\"prev\"".parse().unwrap());
        assert_eq!(next_link(&url, &h).unwrap(), None);
    }
}
