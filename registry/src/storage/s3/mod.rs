//! The S3 store, written for SeaweedFS's S3 gateway (and any S3 with conditional writes).
//!
//! Object names are `<prefix><key>`. Besides the keys the registry stores, the store keeps
//! internal objects under `<prefix>.data/` and `<prefix>.tail/`; a stored key never starts a
//! segment with `.`, so they cannot collide and are never listed.
//!
//! - **Documents** are plain objects. [`PutMode::Create`] is `If-None-Match: *`,
//!   [`PutMode::Replace`] is `If-Match: <etag>` (both atomic on SeaweedFS 4.17+), so concurrent
//!   writers on different replicas never lose an update.
//! - **A staging area** is a state document at the staging key (metadata `rd-kind: staging`)
//!   naming a multipart upload on `.data/<id>`, the parts uploaded so far (number, ETag, size) and
//!   the *tail*: bytes past the last full part, kept as small segment objects `.tail/<id>-<n>`
//!   rather than in process memory, so any replica can continue. Full parts are
//!   [`S3Config::part_size`] long (at least 5 MiB, which S3 requires of every part but the last).
//!   The document keeps the state at the last two suspends, so a resume can cut back to the
//!   offset the caller recorded even when its own bookkeeping lags one request behind. A writer
//!   claims the area in the document (a conditional write); a claim is live while its writer
//!   exists in this process, or for [`CLAIM_SECS`] when held by another process.
//!   Uploads are never found again through ListMultipartUploads or ListParts: the document is
//!   the only record.
//! - **Commit** never copies on the server. A staging area below one part is written straight to
//!   the destination (`If-None-Match: *`). A larger one completes its multipart upload on
//!   `.data/<id>` and publishes a small reference object at the destination (metadata
//!   `rd-kind: blob-ref`, `rd-data`, `rd-size`), again create-only; reads follow it.
//! - Aborted or expired staging areas are removed with AbortMultipartUpload plus deletes of
//!   their segments and document.

use std::collections::HashSet;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use aws_sdk_s3::Client;
use aws_sdk_s3::config::http::HttpResponse;
use aws_sdk_s3::config::retry::RetryConfig;
use aws_sdk_s3::config::timeout::TimeoutConfig;
use aws_sdk_s3::config::{
    BehaviorVersion, Credentials, Region, RequestChecksumCalculation, ResponseChecksumValidation,
    StalledStreamProtectionConfig,
};
use aws_sdk_s3::error::{DisplayErrorContext, ProvideErrorMetadata, SdkError};
use aws_sdk_s3::primitives::ByteStream as S3Body;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWrite;

use super::S3Credentials;
use super::{
    BoxFuture, BoxReader, ByteStream, Document, Etag, Key, ObjectMeta, PutMode, Store, StoreError,
    StoreResult, StoreWriter, past_end,
};

mod client;
mod objects;
mod redirect;
mod staging;
mod writer;

pub use client::{BucketProblem, S3Config};
use objects::*;
pub use redirect::{BlobRedirect, MAX_REDIRECT_EXPIRY};
use staging::*;
use writer::*;

const NAME: &str = "s3";
/// S3's smallest part (all but the last).
pub const MIN_PART_SIZE: u64 = 5 << 20;
/// How long another process's claim on a staging area holds without being renewed (each part
/// upload renews it). A replica killed mid-request blocks its upload's staging area this long.
pub const CLAIM_SECS: u64 = 30;
/// Part numbers a writer reserves with one write of the staging document. Reserving one number
/// per part doubled the requests of a large push (a document write before every UploadPart).
/// The cost of a batch: a writer whose claim was taken over may upload up to this many parts
/// before its next document write fails; those parts carry numbers nobody else uses and are
/// never completed, so they cost bandwidth, never data.
const PART_BATCH: i32 = 16;
/// A writer rewrites its claim before a part once this much of it has run out, whatever is
/// left of its reserved numbers, so a slow upload keeps its claim as before.
const RENEW_AFTER_SECS: u64 = 10;
/// Largest staging document read.
const STAGING_DOC_LIMIT: u64 = 1 << 20;

const META_KIND: &str = "rd-kind";
const META_DATA: &str = "rd-data";
const META_SIZE: &str = "rd-size";
/// A fresh id on every conditional write, to tell our own landed write from another's.
const META_WRITE: &str = "rd-write";
const KIND_STAGING: &str = "staging";
const KIND_REF: &str = "blob-ref";

/// A [`Store`] on an S3 bucket. Cheap to clone; any number of processes may share a bucket.
#[derive(Debug, Clone)]
pub struct S3Store {
    inner: Arc<Inner>,
}

#[derive(Debug)]
struct Inner {
    client: Client,
    bucket: String,
    prefix: String,
    part_size: u64,
    /// Tells this process's claims apart from other processes'.
    instance: String,
    /// Claims whose writer is alive in this process.
    live: Mutex<HashSet<String>>,
    /// Permits for a writer to fill a second part while its last one uploads (see
    /// `S3Writer::ahead`): [`AHEAD_PARTS`] across the process, so memory stays bounded however
    /// many uploads run.
    ahead_parts: Arc<tokio::sync::Semaphore>,
}

/// How many uploads at once may fill a part ahead while the previous one uploads: each holds one
/// more part in memory (5 MiB by default), 80 MiB in all at the default part size.
const AHEAD_PARTS: usize = 16;

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

impl Store for S3Store {
    fn name(&self) -> &'static str {
        NAME
    }

    fn min_chunk_length(&self) -> Option<u64> {
        Some(self.inner.part_size)
    }

    fn get<'a>(&'a self, key: &'a Key, limit: u64) -> BoxFuture<'a, StoreResult<Document>> {
        Box::pin(async move {
            let doc = self.inner.document(key, limit, None).await?;
            self.inner.unconditional(&self.inner.full(key), doc)
        })
    }

    fn get_if_changed<'a>(
        &'a self,
        key: &'a Key,
        limit: u64,
        known: &'a Etag,
    ) -> BoxFuture<'a, StoreResult<Option<Document>>> {
        Box::pin(async move {
            let doc = self.inner.document(key, limit, Some(&known.0)).await?;
            // A gateway that ignores If-None-Match answers 200 with the same version.
            Ok(doc.filter(|d| d.etag != *known))
        })
    }

    fn put<'a>(
        &'a self,
        key: &'a Key,
        bytes: Bytes,
        mode: PutMode,
    ) -> BoxFuture<'a, StoreResult<Etag>> {
        Box::pin(async move {
            let object = self.inner.full(key);
            let etag = match &mode {
                PutMode::Create => {
                    self.inner
                        .put_settled(key, &object, bytes, None, &[])
                        .await?
                }
                PutMode::Replace(e) => {
                    self.inner
                        .put_settled(key, &object, bytes, Some(e.0.as_str()), &[])
                        .await?
                }
                PutMode::Overwrite | PutMode::Stamp => {
                    self.inner
                        .put_object(key, &object, bytes, false, None, &[])
                        .await?
                }
            };
            Ok(Etag(etag))
        })
    }

    fn read<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
    ) -> BoxFuture<'a, StoreResult<(ObjectMeta, BoxReader)>> {
        Box::pin(async move {
            let (meta, body) = self.inner.open(key, offset).await?;
            Ok((meta, Box::pin(body.into_async_read()) as BoxReader))
        })
    }

    /// The GetObject body's chunks as the S3 client receives them: no copy into a reader's
    /// buffer on the way to the response (the trait's default copies every byte once more).
    fn read_chunks<'a>(
        &'a self,
        key: &'a Key,
        offset: u64,
        len: u64,
    ) -> BoxFuture<'a, StoreResult<(ObjectMeta, ByteStream)>> {
        Box::pin(async move {
            let (meta, body) = self.inner.open(key, offset).await?;
            if offset.saturating_add(len) > meta.size {
                return Err(past_end(NAME, key, offset, len, meta.size));
            }
            let chunks = futures_util::stream::unfold((body, len), |(mut body, left)| async move {
                if left == 0 {
                    return None;
                }
                match body.next().await {
                    // Shorter than its length: an error, not a body that looks complete.
                    None => Some((
                        Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            format!("the object ended {left} bytes early"),
                        )),
                        (body, 0),
                    )),
                    Some(Ok(mut b)) => {
                        b.truncate(usize::try_from(left).unwrap_or(usize::MAX));
                        let left = left - b.len() as u64;
                        Some((Ok(b), (body, left)))
                    }
                    Some(Err(e)) => Some((Err(io::Error::other(e)), (body, 0))),
                }
            });
            Ok((meta, Box::pin(chunks) as ByteStream))
        })
    }

    fn writer<'a>(
        &'a self,
        staging: &'a Key,
        resume_at: Option<u64>,
    ) -> BoxFuture<'a, StoreResult<Box<dyn StoreWriter>>> {
        Box::pin(async move {
            let inner = &self.inner;
            let existing = match inner.read_staging(staging).await {
                Ok(d) => Some(d),
                Err(e) if e.is_not_found() => None,
                Err(e) => return Err(e),
            };
            let claim = inner.new_claim();
            let (doc, etag) = match (existing, resume_at) {
                (None, Some(_)) => return Err(inner.not_found(staging)),
                (Some((doc, _)), _)
                    if doc.claim.as_ref().is_some_and(|c| inner.claim_is_live(c)) =>
                {
                    return Err(
                        inner.precondition(staging, "another writer has the staging area open")
                    );
                }
                (existing, None) => {
                    // A fresh area; anything left there is dropped after the new claim holds.
                    let doc = StagingDoc {
                        id: uuid::Uuid::new_v4().as_simple().to_string(),
                        mpu: None,
                        current: Checkpoint::default(),
                        previous: None,
                        claim: Some(claim.clone()),
                        next_seg: 0,
                        next_part: 1,
                    };
                    let old_etag = existing.as_ref().map(|(_, e)| e.as_str());
                    let etag = inner.write_staging(staging, &doc, old_etag).await?;
                    if let Some((old, _)) = &existing {
                        inner.discard(staging, old, false).await;
                    }
                    (doc, etag)
                }
                (Some((mut doc, old_etag)), Some(at)) => {
                    let pick = [Some(&doc.current), doc.previous.as_ref()]
                        .into_iter()
                        .flatten()
                        .find(|c| c.parts_end() <= at && at <= c.size)
                        .cloned();
                    let Some(mut cp) = pick else {
                        let reason = if at > doc.current.size {
                            format!(
                                "staging area holds {} bytes, resume needs {at}",
                                doc.current.size
                            )
                        } else {
                            format!("cannot cut back to {at}: those bytes are in uploaded parts")
                        };
                        return Err(inner.precondition(staging, reason));
                    };
                    if cp.size != at {
                        cut_tail(inner, staging, &mut doc, &mut cp, at).await?;
                    }
                    if cp.size != doc.current.size || cp.parts.len() != doc.current.parts.len() {
                        doc.previous = Some(std::mem::replace(&mut doc.current, cp));
                    }
                    doc.claim = Some(claim.clone());
                    let etag = inner.write_staging(staging, &doc, Some(&old_etag)).await?;
                    (doc, etag)
                }
            };
            inner
                .live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .insert(claim.id.clone());
            let core = Core {
                inner: inner.clone(),
                key: staging.clone(),
                parts: doc.current.parts.clone(),
                tail: doc.current.tail.clone(),
                tail_size: doc.current.size - doc.current.parts_end(),
                // Numbers reserved by an earlier writer stay unused: it may still be uploading.
                next_part: doc.next_part,
                doc,
                etag,
                buf: Vec::new(),
            };
            let w: Box<dyn StoreWriter> = Box::new(S3Writer {
                written: core.size(),
                core: Some(core),
                pending: None,
                ahead: Vec::new(),
                ahead_permit: None,
                claim: ClaimGuard {
                    inner: inner.clone(),
                    id: claim.id,
                },
            });
            Ok(w)
        })
    }

    fn stat<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, StoreResult<ObjectMeta>> {
        Box::pin(async move { Ok(self.inner.head(key).await?.meta()) })
    }

    fn list<'a>(&'a self, prefix: &'a Key) -> BoxFuture<'a, StoreResult<Vec<Key>>> {
        Box::pin(async move {
            let inner = &self.inner;
            let full = inner.full(prefix);
            let mut out = Vec::new();
            let mut token: Option<String> = None;
            loop {
                let page = inner
                    .client
                    .list_objects_v2()
                    .bucket(&inner.bucket)
                    .prefix(&full)
                    .set_continuation_token(token.take())
                    .send()
                    .await
                    .map_err(|e| inner.fail(prefix, &full, classify(e)))?;
                for o in page.contents() {
                    let Some(k) = o.key() else { continue };
                    let Some(rel) = k.strip_prefix(&inner.prefix) else {
                        continue;
                    };
                    // `list/a` lists `list/a` and `list/a/...`, never `list/ab`.
                    let under = rel == prefix.as_str()
                        || rel
                            .strip_prefix(prefix.as_str())
                            .is_some_and(|r| r.starts_with('/'));
                    if under && let Ok(k) = Key::new(rel) {
                        out.push(k);
                    }
                }
                match page.next_continuation_token() {
                    Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                    _ => break,
                }
            }
            out.sort();
            Ok(out)
        })
    }

    fn list_page<'a>(
        &'a self,
        prefix: &'a Key,
        start_after: Option<&'a Key>,
        limit: usize,
    ) -> BoxFuture<'a, StoreResult<Vec<Key>>> {
        Box::pin(async move {
            let inner = &self.inner;
            let full = format!("{}/", inner.full(prefix));
            let mut out = Vec::new();
            let mut token: Option<String> = None;
            // A listing page may hold objects that are no key (skipped), so a short page is
            // continued until `limit` keys or the end.
            while out.len() < limit {
                let want = i32::try_from(limit - out.len())
                    .unwrap_or(i32::MAX)
                    .min(1000);
                let mut req = inner
                    .client
                    .list_objects_v2()
                    .bucket(&inner.bucket)
                    .prefix(&full)
                    .max_keys(want)
                    .set_continuation_token(token.take());
                if let Some(a) = start_after {
                    req = req.start_after(inner.full(a));
                }
                let page = req
                    .send()
                    .await
                    .map_err(|e| inner.fail(prefix, &full, classify(e)))?;
                // In the bucket's order, not re-sorted: S3 lists in byte order, SeaweedFS
                // directory by directory (`a/…` before `a-x`), and `StartAfter` follows the
                // same order, so pages join up either way.
                for o in page.contents() {
                    if let Some(rel) = o.key().and_then(|k| k.strip_prefix(&inner.prefix))
                        && let Ok(k) = Key::new(rel)
                    {
                        out.push(k);
                    }
                }
                match page.next_continuation_token() {
                    Some(t) if page.is_truncated() == Some(true) => token = Some(t.to_owned()),
                    _ => break,
                }
            }
            out.truncate(limit);
            Ok(out)
        })
    }

    fn delete<'a>(&'a self, key: &'a Key) -> BoxFuture<'a, StoreResult<()>> {
        Box::pin(self.delete_key(key))
    }
}

impl S3Store {
    /// [`Store::delete`]: a HEAD says what the key is, then its objects go (the data object
    /// behind a blob reference is the upload's own, so removing it late harms no later upload
    /// of the same bytes).
    async fn delete_key(&self, key: &Key) -> StoreResult<()> {
        let inner = &self.inner;
        let object = inner.full(key);
        let head = inner.head(key).await?;
        match head.kind.as_deref() {
            Some(KIND_STAGING) => {
                let (doc, _) = inner.read_staging(key).await?;
                inner.delete_object(key, &object).await?;
                inner.discard(key, &doc, false).await;
            }
            Some(KIND_REF) => {
                // The reference goes first, so no reader follows it into a deleted object.
                inner.delete_object(key, &object).await?;
                if let Some(data) = head.data
                    && let Err(e) = inner.delete_object(key, &data).await
                {
                    tracing::warn!(key = %key, error = %e, "could not delete blob data");
                }
            }
            _ => inner.delete_object(key, &object).await?,
        }
        Ok(())
    }
}
