//! `GET`/`HEAD`/`PUT`/`DELETE /v2/<name>/manifests/<reference>`.

use std::time::Instant;

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use serde_json::Value;
use validator::{Algorithm, Digest};

use super::{Req, hv};
use crate::errors::{ApiError, ApiResult, Code};
use crate::events::{Action, Target};
use crate::manifest_rules::{CheckedManifest, check_document, invalid};
use crate::repo::{ManifestLink, REFERENCE_WINDOW, Repos, TagTarget};
use validator::{Name, Tag};

/// A manifest reference: a digest or a tag.
enum Reference {
    Digest(Digest),
    Tag(Tag),
}

/// For reads and deletes: a reference that is neither a digest nor a valid tag names nothing
/// that could exist, so it is unknown (404), as the v1.1 conformance suite expects.
fn parse_lookup(s: &str) -> ApiResult<Reference> {
    if !s.contains(':') && Tag::parse(s).is_err() {
        return Err(ApiError::new(
            Code::ManifestUnknown,
            format!("{s:?} is not a valid tag"),
        ));
    }
    parse_reference(s)
}

fn parse_reference(s: &str) -> ApiResult<Reference> {
    if s.contains(':') {
        return Digest::parse(s)
            .map(Reference::Digest)
            .map_err(|e| ApiError::new(Code::DigestInvalid, e.to_string()));
    }
    Tag::parse(s)
        .map(Reference::Tag)
        .map_err(|e| ApiError::new(Code::ManifestInvalid, e.to_string()))
}

/// GET or HEAD a manifest by tag or digest.
pub(crate) async fn get(req: Req, reference: &str) -> ApiResult<Response> {
    let name = req.name().clone();
    let raw = reference;
    let reference = parse_lookup(reference)?;
    let repos = &req.state.app().repos;
    if let Some(proxy) = &req.state.app().proxy {
        let limit = req.state.app().config.max_manifest_bytes;
        proxy.ensure_manifest(repos, &name, raw, limit).await?;
    }
    let unknown = || ApiError::new(Code::ManifestUnknown, format!("manifest unknown in {name}"));
    // Two store reads for a GET either way: the tag index (which carries the media type and
    // size) or the manifest link, then the bytes.
    let target = match &reference {
        Reference::Tag(t) => repos.resolve_tag_target(&name, t).await?,
        Reference::Digest(d) => repos.manifest_link(&name, d).await?.map(|l| TagTarget {
            digest: d.clone(),
            media_type: l.media_type,
            size: l.size,
            epoch: String::new(),
        }),
    };
    let Some(TagTarget {
        digest: d,
        media_type,
        size,
        ..
    }) = target
    else {
        return Err(unknown());
    };
    // A GET is a pull; a HEAD (an existence or digest check) is not.
    if !req.head
        && req
            .state
            .app()
            .config
            .governance
            .records_pulls(name.as_str())
    {
        req.state.app().pulls.record(&name, &d);
    }
    let b = Response::builder()
        .status(StatusCode::OK)
        .header(header::CONTENT_TYPE, hv(&media_type))
        .header("docker-content-digest", hv(d.as_str()))
        .header(header::CONTENT_LENGTH, size);
    // Bytes a scrub quarantined are unknown until a push heals them, never a 500. A HEAD
    // answers as the GET would: one stat of the bytes (distribution stats them too), so a
    // client that checks existence before it pulls is not told 200 and then 404.
    if req.head {
        if repos.blob_stat(&d).await?.is_none() {
            return Err(withdrawn(repos, &name, &d).await.unwrap_or_else(unknown));
        }
        return b.body(Body::empty()).map_err(ApiError::internal);
    }
    let bytes = match repos
        .manifest_bytes(&d, req.state.app().config.max_manifest_bytes.max(size))
        .await
    {
        Err(e) if e.code == Code::Internal && repos.blob_stat(&d).await?.is_none() => {
            return Err(withdrawn(repos, &name, &d).await.unwrap_or_else(unknown));
        }
        r => r?,
    };
    let tag = match &reference {
        Reference::Tag(t) => Some(t.as_str().to_owned()),
        Reference::Digest(_) => None,
    };
    let event = req.event(Action::Pull, "GET");
    if event.wanted() {
        event
            .send(manifest_target(&req, &name, &d, &media_type, size, tag))
            .await?;
    }
    b.body(Body::from(bytes)).map_err(ApiError::internal)
}

/// The 404 of a manifest a scrub withdrew because content it names was quarantined (see
/// [`crate::scrub`]): `MANIFEST_UNKNOWN`, so clients push the image again, with the reason.
async fn withdrawn(repos: &Repos, name: &Name, d: &Digest) -> Option<ApiError> {
    let why = crate::scrub::withdrawal(repos.store().as_ref(), d).await?;
    let msg = format!(
        "manifest {d} in {name} was withdrawn by a scrub {why}; push the image again to heal it"
    );
    Some(ApiError::new(Code::ManifestUnknown, msg).with_reason())
}

/// PUT a manifest by tag or digest; a refusal by governance (`DENIED`) is also sent as a
/// refuse event.
pub(crate) async fn put(req: Req, reference: &str) -> ApiResult<Response> {
    let refuse = req.event(Action::Refuse, "PUT");
    let name = req.name().clone();
    let answer = put_checked(req, reference).await;
    // In a manifest PUT, DENIED comes only from governance: an immutable tag, a quota, an
    // index document's size limit.
    if let Err(e) = &answer
        && e.code == Code::Denied
    {
        let (tag, digest) = match parse_reference(reference) {
            Ok(Reference::Tag(t)) => (Some(t.as_str().to_owned()), None),
            Ok(Reference::Digest(d)) => (None, Some(d)),
            Err(_) => (None, None),
        };
        refuse
            .refusal(e, &name, tag.as_deref(), digest.as_ref())
            .await;
    }
    answer
}

/// The checks and writes of a manifest PUT, as named steps in the order clients can observe:
/// size and body, digest, `?tag=` parameters, the document rules, immutable tags, then the
/// store writes, the events and the answer.
async fn put_checked(mut req: Req, reference: &str) -> ApiResult<Response> {
    let name = req.name().clone();
    let reference = parse_reference(reference)?;
    let body = read_manifest_body(&mut req, &name).await?;
    let digest = body_digest(&reference, &body.bytes)?;
    let extra_tags = tag_parameters(&body.query, &reference)?;
    let checked = check_document(&body.bytes, body.content_type.as_deref())?;
    // Every tag the request sets: the reference's own first, then the `?tag=` parameters.
    let mut tags: Vec<Tag> = extra_tags.clone();
    if let Reference::Tag(t) = &reference {
        tags.insert(0, t.clone());
    }
    let put = ManifestPut {
        repos: req.state.app().repos.clone(),
        governance: req.state.app().config.governance.clone(),
        metrics: req.state.app().metrics.clone(),
        size: body.bytes.len() as u64,
        bytes: body.bytes,
        name,
        digest,
        checked,
        tags,
    };
    put.refuse_immutable_moves().await?;
    put.publish().await?;
    for event in put.push_events(&req) {
        event.await?;
    }
    put.created(&extra_tags)
}

/// What a manifest PUT reads from its request before any check of the document.
struct ManifestBody {
    bytes: Bytes,
    /// The media type without parameters, when the request gave one.
    content_type: Option<String>,
    /// The query, taken out of the request together with its body.
    query: Vec<(String, String)>,
}

/// Reads the manifest into memory, refusing it with `MANIFEST_TOO_LARGE` as soon as the
/// declared length or the bytes read pass `max_manifest_bytes`, so a client cannot make the
/// registry buffer more than the limit.
async fn read_manifest_body(req: &mut Req, name: &Name) -> ApiResult<ManifestBody> {
    let limit = req.state.app().config.max_manifest_bytes;
    let too_large = || {
        ApiError::new(
            Code::ManifestTooLarge,
            format!("manifest for {name} is larger than {limit} bytes"),
        )
    };
    if req.content_length()?.is_some_and(|l| l > limit) {
        return Err(too_large());
    }
    let content_type = req
        .header("content-type")
        .map(|c| c.split(';').next().unwrap_or(c).trim().to_owned())
        .filter(|c| !c.is_empty());
    let query = std::mem::take(&mut req.query);
    let mut stream = std::mem::take(&mut req.body).into_data_stream();
    let mut buf = BytesMut::new();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|e| {
            ApiError::new(
                Code::ManifestInvalid,
                format!("reading the manifest failed: {e}"),
            )
        })?;
        if buf.len() as u64 + chunk.len() as u64 > limit {
            return Err(too_large());
        }
        buf.extend_from_slice(&chunk);
    }
    Ok(ManifestBody {
        bytes: buf.freeze(),
        content_type,
        query,
    })
}

/// The digest the manifest is stored under: a PUT by digest must send exactly those bytes
/// (`DIGEST_INVALID` otherwise); a PUT by tag is addressed by its sha256.
fn body_digest(reference: &Reference, bytes: &Bytes) -> ApiResult<Digest> {
    match reference {
        Reference::Digest(want) => {
            let got = Digest::of(want.algorithm(), bytes);
            if &got != want {
                return Err(ApiError::new(
                    Code::DigestInvalid,
                    format!("manifest body has digest {got}, not {want}"),
                ));
            }
            Ok(got)
        }
        Reference::Tag(_) => Ok(Digest::of(Algorithm::Sha256, bytes)),
    }
}

/// The distinct `?tag=` parameters of a PUT by digest (distribution-spec main: tag it in the
/// same request), in the order given; refused on a PUT by tag and past [`MAX_TAGS_PER_PUT`].
fn tag_parameters(query: &[(String, String)], reference: &Reference) -> ApiResult<Vec<Tag>> {
    let mut extra_tags = Vec::new();
    for (k, v) in query {
        if k == "tag" {
            if matches!(reference, Reference::Tag(_)) {
                return Err(invalid(
                    "tag parameters are only allowed on a PUT by digest",
                ));
            }
            let t = Tag::parse(v).map_err(|e| invalid(e.to_string()))?;
            if !extra_tags.contains(&t) {
                extra_tags.push(t);
            }
            // Each tag is one conditional rewrite of the repository's tag index: a request
            // must not be able to ask for thousands of them.
            if extra_tags.len() > MAX_TAGS_PER_PUT {
                return Err(invalid(format!(
                    "more than {MAX_TAGS_PER_PUT} tag parameters in one PUT; push the others \
                     in further requests"
                )));
            }
        }
    }
    Ok(extra_tags)
}

/// A manifest PUT whose body passed every request-level check: what the store writes, the
/// events and the answer need.
struct ManifestPut {
    repos: Repos,
    governance: std::sync::Arc<crate::governance::Governance>,
    /// Where the quota's gauges are, looked up only when a quota rule applies.
    metrics: std::sync::Arc<crate::metrics::Metrics>,
    name: Name,
    digest: Digest,
    bytes: Bytes,
    size: u64,
    checked: CheckedManifest,
    /// Every tag the request sets, the reference's own first.
    tags: Vec<Tag>,
}

impl ManifestPut {
    /// Immutable tags: refuses before writing anything when a tag would move to another
    /// digest, so a refused PUT leaves no trace; `set_tag` checks again atomically.
    async fn refuse_immutable_moves(&self) -> ApiResult<()> {
        let (name, digest) = (&self.name, &self.digest);
        for t in &self.tags {
            let Some(rule) = self.governance.immutable_rule(name.as_str(), t.as_str()) else {
                continue;
            };
            if let Some(old) = self.repos.resolve_tag_target(name, t).await?
                && old.digest != *digest
            {
                return Err(crate::governance::immutable::refusal(
                    rule,
                    name,
                    t,
                    &old.digest,
                    digest,
                ));
            }
        }
        Ok(())
    }

    /// The store writes, in the order that keeps every state a reader can see consistent: the
    /// bytes, holds on what they reference, the quota, the link, the referrer, the tags.
    async fn publish(&self) -> ApiResult<()> {
        let (repos, name, digest) = (&self.repos, &self.name, &self.digest);
        let started = Instant::now();
        let link = ManifestLink {
            media_type: self.checked.media_type.clone(),
            size: self.size,
            subject: self.checked.subject.clone(),
        };
        let attempt = || self.link_at_held(&link);
        repos
            .link_manifest_current(name, digest, &self.tags, attempt)
            .await?;
        // Hold everything the manifest relies on again when publishing took longer than the
        // collector's grace window is sure to cover.
        if started.elapsed() > REFERENCE_WINDOW {
            hold_references(repos, name, &self.checked, digest, &self.bytes, None).await?;
        }
        Ok(())
    }

    /// One attempt of [`Repos::link_manifest_current`]: the bytes, the holds of what the
    /// manifest references, its quota, its link, its referrer entry and its tags, all at the
    /// epochs one hold gives; the epoch of the link written.
    async fn link_at_held(&self, link: &ManifestLink) -> ApiResult<String> {
        let (repos, name, digest, checked) = (&self.repos, &self.name, &self.digest, &self.checked);
        // The bytes first, at the epoch a hold gives (a collector may be deleting an older
        // copy: this one is out of its reach).
        let own = repos.hold(digest).await?;
        if !own.data {
            repos
                .put_manifest_bytes(digest, &own.epochs, self.bytes.clone())
                .await?;
        }
        // Hold everything the manifest relies on before publishing it.
        hold_references(repos, name, checked, digest, &self.bytes, Some(&own)).await?;
        let epoch = own.epochs.manifest_link(name);
        // Quota: reserved before the link, so a refused PUT is never acknowledged.
        if let Some(rule) = self.governance.quota_rule(name.as_str()) {
            crate::governance::quota::reserve(
                repos,
                &self
                    .metrics
                    .source::<crate::governance::quota::QuotaMetrics>(),
                name,
                rule,
                digest,
                (self.size, epoch),
                &checked.blobs,
            )
            .await?;
        }
        repos.link_manifest(name, digest, &own.epochs, link).await?;
        self.add_referrer(epoch).await?;
        for t in &self.tags {
            let rule = self.governance.immutable_rule(name.as_str(), t.as_str());
            let veto = rule.map(|r| r as &dyn crate::repo::hooks::TagVeto);
            repos.set_tag(name, t, digest, (link, epoch), veto).await?;
        }
        Ok(epoch.to_owned())
    }

    /// A manifest with a `subject` is listed among its subject's referrers (with the
    /// descriptor fields the referrers API answers), and an SPDX one is indexed for package
    /// search; both entries are stamped with `epoch`, the epoch of the link just written.
    async fn add_referrer(&self, epoch: &str) -> ApiResult<()> {
        let (repos, name, digest, checked) = (&self.repos, &self.name, &self.digest, &self.checked);
        let Some(subject) = &checked.subject else {
            return Ok(());
        };
        let mut desc = serde_json::json!({
            "mediaType": checked.media_type,
            "digest": digest.as_str(),
            "size": self.size,
        });
        if let Some(t) = &checked.artifact_type {
            desc["artifactType"] = Value::String(t.clone());
        }
        if let Some(a) = &checked.annotations {
            desc["annotations"] = a.clone();
        }
        repos
            .add_referrer(name, subject, digest, desc, epoch)
            .await?;
        if let Some(layer) = &checked.spdx_layer {
            crate::pkgindex::index_referrer(repos, name, (subject, digest), layer, epoch).await?;
        }
        Ok(())
    }

    /// One push event per tag the request set (one without a tag for a bare digest push), as
    /// distribution sends them; each is stored when awaited. They borrow nothing from `req`
    /// (whose body is not `Sync`), so the caller can await them one after the other.
    fn push_events(
        &self,
        req: &Req,
    ) -> Vec<impl std::future::Future<Output = ApiResult<()>> + Send + 'static> {
        let mut event_tags: Vec<Option<String>> = self
            .tags
            .iter()
            .map(|t| Some(t.as_str().to_owned()))
            .collect();
        if event_tags.is_empty() {
            event_tags.push(None);
        }
        let (name, digest) = (&self.name, &self.digest);
        event_tags
            .into_iter()
            .map(|tag| {
                let target =
                    manifest_target(req, name, digest, &self.checked.media_type, self.size, tag);
                req.notify(Action::Push, "PUT", target)
            })
            .collect()
    }

    /// The 201 answer: where the manifest is, its digest, its subject (so clients know
    /// referrers are supported) and the `?tag=` parameters it set.
    fn created(&self, extra_tags: &[Tag]) -> ApiResult<Response> {
        let (name, digest) = (&self.name, &self.digest);
        let mut b = Response::builder()
            .status(StatusCode::CREATED)
            .header(header::LOCATION, format!("/v2/{name}/manifests/{digest}"))
            .header("docker-content-digest", hv(digest.as_str()))
            .header(header::CONTENT_LENGTH, 0);
        if let Some(s) = &self.checked.subject {
            b = b.header("oci-subject", hv(s.as_str()));
        }
        for t in extra_tags {
            b = b.header("oci-tag", hv(t.as_str()));
        }
        b.body(Body::empty()).map_err(ApiError::internal)
    }
}

/// The event target of a manifest.
fn manifest_target(
    req: &Req,
    name: &Name,
    d: &Digest,
    media_type: &str,
    size: u64,
    tag: Option<String>,
) -> Target {
    Target {
        media_type: Some(media_type.to_owned()),
        digest: Some(d.to_string()),
        size: Some(size),
        length: Some(size),
        repository: name.to_string(),
        url: req.target_url(&format!("/v2/{name}/manifests/{d}")),
        tag,
        ..Target::default()
    }
}

/// Most distinct `?tag=` parameters of one manifest PUT.
const MAX_TAGS_PER_PUT: usize = 64;

/// References of one manifest checked at once.
const HOLD_CONCURRENCY: usize = 16;

/// Holds (see [`Repos::hold`]) every blob and child manifest `checked` refers to and the
/// manifest's own bytes `d`, then checks that the repository still has each reference:
/// `MANIFEST_BLOB_UNKNOWN` when a collector removed one first. Own bytes a collector removed are
/// written again; `own` is a hold of `d` the caller made just before (not made again).
async fn hold_references(
    repos: &Repos,
    name: &Name,
    checked: &CheckedManifest,
    d: &Digest,
    bytes: &Bytes,
    own: Option<&crate::repo::Held>,
) -> ApiResult<()> {
    use futures_util::{StreamExt as _, TryStreamExt as _};
    // Each distinct reference once, a bounded number at a time: a manifest may name one blob
    // thousands of times, and every reference costs a hold write and a link read (S3 requests
    // on S3), which must not all be in flight at once.
    let blobs: std::collections::BTreeSet<&Digest> = checked.blobs.iter().collect();
    let children: std::collections::BTreeSet<&Digest> = checked.manifests.iter().collect();
    let references = blobs
        .into_iter()
        .map(|r| (r, false))
        .chain(children.into_iter().map(|r| (r, true)));
    futures_util::stream::iter(references)
        .map(Ok)
        .try_for_each_concurrent(HOLD_CONCURRENCY, |(r, manifest)| async move {
            // The link the repository has at the epoch the hold gave: an older one may be the
            // target of a collector's DELETE still on its way.
            let held = repos.hold(r).await?;
            let linked = (held.data || repos.revive(r, &held.epochs).await?)
                && if manifest {
                    repos.relink_manifest(name, r, &held.epochs).await?
                } else {
                    // Deleted while it was linked again: the manifest's reference is unknown.
                    match repos.relink_blob(name, r, &held.epochs).await {
                        Err(e) if e.code == Code::BlobUnknown => false,
                        r => r?,
                    }
                };
            if linked {
                return Ok(());
            }
            let what = if manifest { "manifest" } else { "blob" };
            Err(ApiError::new(
                Code::ManifestBlobUnknown,
                format!("{what} {r} is not in {name}"),
            ))
        })
        .await?;
    if own.is_none() {
        let own = repos.hold(d).await?;
        if !own.data {
            repos
                .put_manifest_bytes(d, &own.epochs, bytes.clone())
                .await?;
        }
    }
    Ok(())
}

/// Most indexes a `MANIFEST_REFERENCED` refusal names.
const REFERENCING_NAMED: usize = 5;

/// DELETE a tag, or a manifest by digest (with every tag pointing at it). A manifest an index
/// of the repository still lists is refused with `MANIFEST_REFERENCED` (409) naming the
/// indexes, unless the request says `?force=true`.
pub(crate) async fn delete(req: Req, reference: &str) -> ApiResult<Response> {
    req.deletes_allowed()?;
    let name = req.name().clone();
    let reference = parse_lookup(reference)?;
    let force = match req.param("force") {
        None | Some("false") => false,
        Some("true") => true,
        Some(v) => {
            return Err(ApiError::new(
                Code::QueryInvalid,
                format!("force={v:?}: expected true or false"),
            ));
        }
    };
    let repos = &req.state.app().repos;
    if let Reference::Digest(d) = &reference
        && !force
        && repos.manifest_link(&name, d).await?.is_some()
    {
        let indexes = repos.indexes_listing(&name, d, REFERENCING_NAMED).await?;
        if !indexes.is_empty() {
            let listed: Vec<String> = indexes.iter().map(ToString::to_string).collect();
            return Err(ApiError::new(
                Code::ManifestReferenced,
                format!(
                    "manifest {d} is listed by {} {} in {name}: delete {} first, or send \
                     DELETE with ?force=true to delete it anyway (the index then names a \
                     manifest that is gone)",
                    if indexes.len() == 1 {
                        "index"
                    } else {
                        "indexes"
                    },
                    listed.join(", "),
                    if indexes.len() == 1 { "it" } else { "them" },
                ),
            ));
        }
    }
    let governance = &req.state.app().config.governance;
    if !governance.immutable.is_empty() {
        let caller = req
            .access
            .as_ref()
            .and_then(|a| a.user())
            .unwrap_or("anonymous");
        let tags: Vec<(String, Digest)> = match &reference {
            Reference::Tag(t) => repos
                .resolve_tag_target(&name, t)
                .await?
                .map(|target| (t.as_str().to_owned(), target.digest))
                .into_iter()
                .collect(),
            Reference::Digest(d) => repos
                .tag_map(&name)
                .await?
                .into_iter()
                .filter(|(_, td)| td == d)
                .collect(),
        };
        for (tag, d) in tags {
            if let Some(rule) = governance.immutable_rule(name.as_str(), &tag) {
                if rule.protect_delete {
                    tracing::warn!(repository = %name, tag, digest = %d, caller, rule = %rule, "refused deleting a delete-protected immutable tag");
                    let refusal =
                        crate::governance::immutable::delete_refusal(rule, &name, &tag, &d);
                    req.event(Action::Refuse, "DELETE")
                        .refusal(&refusal, &name, Some(&tag), Some(&d))
                        .await;
                    return Err(refusal);
                }
                tracing::warn!(repository = %name, tag, digest = %d, caller, rule = %rule, "deleting an immutable tag");
            }
        }
    }
    let found = match &reference {
        Reference::Tag(t) => repos.delete_tag(&name, t).await?,
        Reference::Digest(d) => repos.delete_manifest(&name, d).await?,
    };
    if !found {
        return Err(ApiError::new(
            Code::ManifestUnknown,
            format!("manifest unknown in {name}"),
        ));
    }
    // Distribution's delete events: the digest for a manifest, the tag for a tag.
    let target = match &reference {
        Reference::Tag(t) => Target {
            repository: name.to_string(),
            tag: Some(t.as_str().to_owned()),
            ..Target::default()
        },
        Reference::Digest(d) => Target {
            repository: name.to_string(),
            digest: Some(d.to_string()),
            ..Target::default()
        },
    };
    req.notify(Action::Delete, "DELETE", target).await?;
    Response::builder()
        .status(StatusCode::ACCEPTED)
        .header(header::CONTENT_LENGTH, 0)
        .body(Body::empty())
        .map_err(ApiError::internal)
}
