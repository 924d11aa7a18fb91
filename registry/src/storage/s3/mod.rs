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

/// Connection settings of an [`S3Store`].
#[derive(Debug, Clone)]
pub struct S3Config {
    /// Endpoint URL, e.g. `http://127.0.0.1:8333`.
    pub endpoint: String,
    /// Bucket (must exist).
    pub bucket: String,
    /// Key prefix inside the bucket (`""` for none; a missing trailing `/` is added).
    pub prefix: String,
    /// Region for SigV4 (any string for SeaweedFS).
    pub region: String,
    /// Credentials (see [`super::resolve_s3_credentials`] for where the server takes them
    /// from); `None` signs with a placeholder pair, which a SeaweedFS without identities
    /// accepts and one with identities refuses.
    pub credentials: Option<S3Credentials>,
    /// Multipart part size (raised to [`MIN_PART_SIZE`] if smaller).
    pub part_size: u64,
    /// Attempts per S3 request, the first included (transient errors and 5xx are retried).
    pub max_attempts: u32,
    /// The SDK's first retry waits a random time up to this, doubling with each retry (1 s, the
    /// SDK's default; tests that inject hundreds of faults set a few milliseconds).
    pub initial_backoff: Duration,
    /// Timeout to connect.
    pub connect_timeout: Duration,
    /// Timeout of one attempt (a part upload included).
    pub attempt_timeout: Duration,
    /// Timeout of one operation over all its attempts.
    pub operation_timeout: Duration,
}

impl S3Config {
    /// Settings with the defaults of research §5.4: 5 MiB parts, 4 attempts, 5 s to connect,
    /// 60 s per attempt, 180 s per operation, region `us-east-1`.
    pub fn new(endpoint: impl Into<String>, bucket: impl Into<String>) -> S3Config {
        S3Config {
            endpoint: endpoint.into(),
            bucket: bucket.into(),
            prefix: String::new(),
            region: "us-east-1".to_owned(),
            credentials: None,
            part_size: MIN_PART_SIZE,
            max_attempts: 4,
            initial_backoff: Duration::from_secs(1),
            connect_timeout: Duration::from_secs(5),
            attempt_timeout: Duration::from_secs(60),
            operation_timeout: Duration::from_secs(180),
        }
    }

    /// Sets the key prefix.
    pub fn prefix(mut self, prefix: impl Into<String>) -> S3Config {
        self.prefix = prefix.into();
        self
    }
}

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
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// One uploaded part.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Part {
    n: i32,
    etag: String,
    size: u64,
}

/// One tail segment object (full object name).
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Seg {
    key: String,
    size: u64,
}

/// The content of a staging area at one suspend.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
struct Checkpoint {
    parts: Vec<Part>,
    tail: Vec<Seg>,
    size: u64,
}

impl Checkpoint {
    fn parts_end(&self) -> u64 {
        self.parts.iter().map(|p| p.size).sum()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Mpu {
    key: String,
    upload_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claim {
    id: String,
    instance: String,
    until: u64,
}

/// The state document of a staging area.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct StagingDoc {
    /// Names the data object and the tail segments.
    id: String,
    mpu: Option<Mpu>,
    current: Checkpoint,
    previous: Option<Checkpoint>,
    claim: Option<Claim>,
    next_seg: u64,
    /// The next part number to hand out. Every part number is reserved by a conditional write
    /// of this document before its upload, so two writers never upload the same number, even
    /// when a claim was taken over from a writer that is slow rather than dead. A writer
    /// reserves [`PART_BATCH`] numbers per write.
    next_part: i32,
}

impl StagingDoc {
    fn segs(&self) -> impl Iterator<Item = &Seg> {
        self.current
            .tail
            .iter()
            .chain(self.previous.iter().flat_map(|c| c.tail.iter()))
    }
}

/// What a HEAD or GET learned about an object.
struct Head {
    size: u64,
    modified: SystemTime,
    kind: Option<String>,
    data: Option<String>,
    ref_size: Option<u64>,
}

impl Head {
    fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            size: self.ref_size.unwrap_or(self.size),
            modified: self.modified,
        }
    }
}

fn head_from(
    size: Option<i64>,
    modified: Option<&aws_sdk_s3::primitives::DateTime>,
    meta: Option<&std::collections::HashMap<String, String>>,
) -> Head {
    let get = |k: &str| meta.and_then(|m| m.get(k)).cloned();
    Head {
        size: size.unwrap_or(0).max(0) as u64,
        modified: modified
            .and_then(|d| SystemTime::try_from(*d).ok())
            .unwrap_or(UNIX_EPOCH),
        kind: get(META_KIND),
        data: get(META_DATA),
        ref_size: get(META_SIZE).and_then(|s| s.parse().ok()),
    }
}

/// An S3 failure classified by HTTP status.
enum S3Fail {
    NotFound,
    Precondition,
    Range,
    Other(io::Error),
}

fn classify<E>(e: SdkError<E, HttpResponse>) -> S3Fail
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    let status = match &e {
        SdkError::ServiceError(_) => e.raw_response().map(|r| r.status().as_u16()),
        _ => None,
    };
    let code = e.code().map(str::to_owned);
    match (status, code.as_deref()) {
        // A 404 that says something other than "no such key" (NoSuchBucket from a gateway that
        // lost its filer, say) is no answer about the key: a transient failure, so a request
        // that relied on the key fails with 500 and is retried, never 404 for stored content.
        (Some(404), Some(c)) if !matches!(c, "NoSuchKey" | "NotFound" | "NoSuchUpload") => {
            S3Fail::Other(io::Error::other(DisplayErrorContext(e).to_string()))
        }
        (Some(404), _) | (_, Some("NoSuchKey" | "NotFound" | "NoSuchUpload")) => S3Fail::NotFound,
        (Some(412), _) | (_, Some("PreconditionFailed")) => S3Fail::Precondition,
        (Some(416), _) | (_, Some("InvalidRange")) => S3Fail::Range,
        _ => S3Fail::Other(io::Error::other(DisplayErrorContext(e).to_string())),
    }
}

impl Inner {
    fn full(&self, key: &Key) -> String {
        format!("{}{}", self.prefix, key.as_str())
    }

    fn backend(&self, object: &str, source: io::Error) -> StoreError {
        StoreError::Backend {
            store: NAME,
            key: format!("{}/{object}", self.bucket),
            source,
        }
    }

    fn not_found(&self, key: &Key) -> StoreError {
        StoreError::NotFound {
            store: NAME,
            key: key.clone(),
        }
    }

    fn precondition(&self, key: &Key, reason: impl Into<String>) -> StoreError {
        StoreError::PreconditionFailed {
            store: NAME,
            key: key.clone(),
            reason: reason.into(),
        }
    }

    /// Maps a failure on `object` (the store key `key`) to a [`StoreError`].
    fn fail(&self, key: &Key, object: &str, f: S3Fail) -> StoreError {
        match f {
            S3Fail::NotFound => self.not_found(key),
            S3Fail::Precondition => self.precondition(key, "the object changed"),
            S3Fail::Range => self.precondition(key, "range not satisfiable"),
            S3Fail::Other(e) => self.backend(object, e),
        }
    }

    async fn head(&self, key: &Key) -> StoreResult<Head> {
        let object = self.full(key);
        let out = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(&object)
            .send()
            .await
            .map_err(|e| self.fail(key, &object, classify(e)))?;
        Ok(head_from(
            out.content_length(),
            out.last_modified(),
            out.metadata(),
        ))
    }

    /// Reads a whole internal or stored object of at most `limit` bytes. A body cut off in
    /// transit is fetched again (the SDK retries only failures before the body).
    async fn get_bytes(
        &self,
        key: &Key,
        object: &str,
        limit: u64,
    ) -> StoreResult<(Bytes, Head, String)> {
        let r = self.get_bytes_unless(key, object, limit, None).await?;
        self.unconditional(object, r)
    }

    /// The answer to a read sent without a condition: `None` (304 Not Modified) cannot come,
    /// since `get_bytes_once` takes a 304 as "unchanged" only when it asked with an ETag.
    fn unconditional<T>(&self, object: &str, r: Option<T>) -> StoreResult<T> {
        r.ok_or_else(|| {
            self.backend(
                object,
                io::Error::other("304 Not Modified to a GET without a condition"),
            )
        })
    }

    /// GET of a whole object, retried on backend failures; with `unless` (an ETag), `None`
    /// when the object still has it (304 Not Modified).
    async fn get_bytes_unless(
        &self,
        key: &Key,
        object: &str,
        limit: u64,
        unless: Option<&str>,
    ) -> StoreResult<Option<(Bytes, Head, String)>> {
        let mut tries = 0;
        loop {
            match self.get_bytes_once(key, object, limit, unless).await {
                Err(StoreError::Backend { .. }) if tries < 2 => tries += 1,
                r => return r,
            }
        }
    }

    async fn get_bytes_once(
        &self,
        key: &Key,
        object: &str,
        limit: u64,
        unless: Option<&str>,
    ) -> StoreResult<Option<(Bytes, Head, String)>> {
        let out = match self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(object)
            .set_if_none_match(unless.map(str::to_owned))
            .send()
            .await
        {
            Ok(out) => out,
            Err(SdkError::ServiceError(e))
                if unless.is_some() && e.raw().status().as_u16() == 304 =>
            {
                return Ok(None);
            }
            Err(e) => return Err(self.fail(key, object, classify(e))),
        };
        let head = head_from(out.content_length(), out.last_modified(), out.metadata());
        let etag = out.e_tag().unwrap_or_default().to_owned();
        if head.size > limit {
            return Err(StoreError::TooLarge {
                store: NAME,
                key: key.clone(),
                limit,
            });
        }
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| self.backend(object, io::Error::other(e)))?
            .into_bytes();
        if bytes.len() as u64 != head.size {
            return Err(self.backend(
                object,
                io::Error::other(format!(
                    "body has {} bytes, Content-Length said {}",
                    bytes.len(),
                    head.size
                )),
            ));
        }
        Ok(Some((bytes, head, etag)))
    }

    /// A whole document (following a blob reference to its data); `None` when `unless` is
    /// still its version.
    async fn document(
        &self,
        key: &Key,
        limit: u64,
        unless: Option<&str>,
    ) -> StoreResult<Option<Document>> {
        let object = self.full(key);
        let Some((bytes, head, etag)) = self.get_bytes_unless(key, &object, limit, unless).await?
        else {
            return Ok(None);
        };
        let bytes = match (head.kind.as_deref(), head.data) {
            (Some(KIND_REF), Some(data)) => {
                let size = head.ref_size.unwrap_or(u64::MAX);
                if size > limit {
                    return Err(StoreError::TooLarge {
                        store: NAME,
                        key: key.clone(),
                        limit,
                    });
                }
                self.get_bytes(key, &data, limit).await?.0
            }
            (Some(KIND_STAGING), _) => return Err(self.not_found(key)),
            _ => bytes,
        };
        Ok(Some(Document {
            bytes,
            etag: Etag(etag),
        }))
    }

    /// Writes an object; `cond` is `Some("*")` for create-only or `Some(etag)` for replace.
    async fn put_object(
        &self,
        key: &Key,
        object: &str,
        bytes: Bytes,
        if_none_match: bool,
        if_match: Option<&str>,
        meta: &[(&str, String)],
    ) -> StoreResult<String> {
        let mut req = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(object)
            .content_length(bytes.len() as i64)
            .body(S3Body::from(bytes));
        if if_none_match {
            req = req.if_none_match("*");
        }
        if let Some(e) = if_match {
            req = req.if_match(e);
        }
        for (k, v) in meta {
            req = req.metadata(*k, v);
        }
        let out = req.send().await.map_err(|e| match classify(e) {
            S3Fail::Precondition if if_none_match => StoreError::AlreadyExists {
                store: NAME,
                key: key.clone(),
            },
            S3Fail::Precondition | S3Fail::NotFound if if_match.is_some() => {
                self.precondition(key, "the document changed or is gone")
            }
            f => self.fail(key, object, f),
        })?;
        Ok(out.e_tag().unwrap_or_default().to_owned())
    }

    async fn delete_object(&self, key: &Key, object: &str) -> StoreResult<()> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(object)
            .send()
            .await
            .map_err(|e| self.fail(key, object, classify(e)))?;
        Ok(())
    }

    async fn read_staging(&self, key: &Key) -> StoreResult<(StagingDoc, String)> {
        let object = self.full(key);
        let (bytes, head, etag) = self.get_bytes(key, &object, STAGING_DOC_LIMIT).await?;
        if head.kind.as_deref() != Some(KIND_STAGING) {
            return Err(self.precondition(key, "the key holds an object, not a staging area"));
        }
        let doc = serde_json::from_slice(&bytes)
            .map_err(|e| self.backend(&object, io::Error::other(e)))?;
        Ok((doc, etag))
    }

    /// Writes a staging document, create-only (`etag: None`) or replacing `etag`. A lost race
    /// is a busy staging area.
    async fn write_staging(
        &self,
        key: &Key,
        doc: &StagingDoc,
        etag: Option<&str>,
    ) -> StoreResult<String> {
        let object = self.full(key);
        let bytes =
            serde_json::to_vec(doc).map_err(|e| self.backend(&object, io::Error::other(e)))?;
        let meta = [
            (META_KIND, KIND_STAGING.to_owned()),
            (META_SIZE, doc.current.size.to_string()),
        ];
        match self
            .put_settled(key, &object, Bytes::from(bytes), etag, &meta)
            .await
        {
            Err(StoreError::AlreadyExists { .. } | StoreError::PreconditionFailed { .. }) => {
                Err(self.precondition(key, "another writer has the staging area"))
            }
            r => r,
        }
    }

    /// A conditional write (create-only when `etag` is `None`, else replacing `etag`) whose
    /// refusal is settled by asking whose write the object now holds. The SDK retries a write
    /// whose answer was lost (a 5xx after it landed, a dropped connection); the retry then fails
    /// its own condition, 412, although the write took effect (or its last attempt fails too,
    /// after an earlier one landed). Every conditional write carries a fresh id in its metadata
    /// (`rd-write`), so after a refusal or a failure one HEAD tells: our id there means the
    /// write landed and counts, with the object's etag; anything else (another writer's id: a
    /// lost race, or our write replaced since; or no answer to the HEAD) keeps the original
    /// error. Comparing bytes would not do: two writers of a read-modify-write can compute the
    /// same bytes, and the loser would then drop its update.
    async fn put_settled(
        &self,
        key: &Key,
        object: &str,
        bytes: Bytes,
        etag: Option<&str>,
        meta: &[(&str, String)],
    ) -> StoreResult<String> {
        let id = uuid::Uuid::new_v4().as_simple().to_string();
        let mut with_id = meta.to_vec();
        with_id.push((META_WRITE, id.clone()));
        match self
            .put_object(key, object, bytes, etag.is_none(), etag, &with_id)
            .await
        {
            // A refusal, or no answer at all after the SDK's last attempt (a timeout, a 5xx):
            // either way an earlier attempt may have landed.
            Err(
                e @ (StoreError::AlreadyExists { .. }
                | StoreError::PreconditionFailed { .. }
                | StoreError::Backend { .. }),
            ) => {
                let now = self
                    .client
                    .head_object()
                    .bucket(&self.bucket)
                    .key(object)
                    .send()
                    .await;
                match now {
                    Ok(h) if h.metadata().and_then(|m| m.get(META_WRITE)) == Some(&id) => {
                        tracing::debug!(key = %key, "a refused conditional write had landed (its answer was lost)");
                        Ok(h.e_tag().unwrap_or_default().to_owned())
                    }
                    _ => Err(e),
                }
            }
            r => r,
        }
    }

    fn claim_is_live(&self, claim: &Claim) -> bool {
        if claim.instance == self.instance {
            self.live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&claim.id)
        } else {
            claim.until > now_secs()
        }
    }

    fn new_claim(&self) -> Claim {
        Claim {
            id: uuid::Uuid::new_v4().as_simple().to_string(),
            instance: self.instance.clone(),
            until: now_secs() + CLAIM_SECS,
        }
    }

    /// Removes everything a staging document refers to. Best effort: logs what failed.
    async fn discard(&self, key: &Key, doc: &StagingDoc, keep_data: bool) {
        if let Some(m) = &doc.mpu
            && !keep_data
        {
            let r = self
                .client
                .abort_multipart_upload()
                .bucket(&self.bucket)
                .key(&m.key)
                .upload_id(&m.upload_id)
                .send()
                .await;
            if let Err(e) = r
                && !matches!(classify(e), S3Fail::NotFound)
            {
                tracing::warn!(key = %key, bucket = %self.bucket, object = %m.key, "could not abort a multipart upload");
            }
        }
        let mut seen = HashSet::new();
        for seg in doc.segs() {
            if seen.insert(seg.key.clone())
                && let Err(e) = self.delete_object(key, &seg.key).await
            {
                tracing::warn!(key = %key, error = %e, "could not delete a tail segment");
            }
        }
    }

    /// Decides what a failed create of the reference at `dest` (pointing at `data`) means. The
    /// write may have landed with its answer lost, and the SDK's retry then saw 412: the
    /// reference there is ours, the blob is published, and deleting `data` would leave an
    /// acknowledged blob pointing at nothing. Only a reference known to be someone else's, or
    /// no reference after a definite refusal, lets the data go; when the outcome cannot be
    /// told the data stays (an orphan object costs space; a dangling reference loses a blob).
    async fn settle_failed_publish(
        &self,
        dest: &Key,
        data: &str,
        err: StoreError,
    ) -> StoreResult<String> {
        let definite = matches!(err, StoreError::AlreadyExists { .. });
        let forget_data = match self.head(dest).await {
            Ok(h) if h.kind.as_deref() == Some(KIND_REF) && h.data.as_deref() == Some(data) => {
                tracing::info!(key = %dest, error = %err, "the blob reference was written; its answer was lost");
                return Ok(String::new());
            }
            // Another writer published the same content first.
            Ok(_) => true,
            Err(StoreError::NotFound { .. }) => definite,
            Err(e) => {
                tracing::warn!(key = %dest, error = %e, "could not tell whether a blob was published");
                false
            }
        };
        if forget_data {
            if let Err(e) = self.delete_object(dest, data).await {
                tracing::warn!(key = %dest, error = %e, "could not delete unpublished blob data");
            }
        } else {
            tracing::warn!(key = %dest, object = %data, error = %err, "kept the data of a blob whose publish failed with no clear outcome");
        }
        Err(err)
    }

    async fn get_range(&self, key: &Key, object: &str, from: u64, to: u64) -> StoreResult<Bytes> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(object)
            .range(format!("bytes={from}-{}", to - 1))
            .send()
            .await
            .map_err(|e| self.fail(key, object, classify(e)))?;
        let bytes = out
            .body
            .collect()
            .await
            .map_err(|e| self.backend(object, io::Error::other(e)))?
            .into_bytes();
        if bytes.len() as u64 != to - from {
            return Err(self.backend(
                object,
                io::Error::other(format!(
                    "range read gave {} of {} bytes",
                    bytes.len(),
                    to - from
                )),
            ));
        }
        Ok(bytes)
    }

    /// Opens the body of `object` from `offset`; `size` is the object's full size.
    async fn open_range(
        &self,
        key: &Key,
        object: &str,
        offset: u64,
        size: u64,
    ) -> StoreResult<S3Body> {
        if offset == size {
            return Ok(S3Body::from(Bytes::new()));
        }
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(object)
            .range(format!("bytes={offset}-"))
            .send()
            .await
            .map_err(|e| self.fail(key, object, classify(e)))?;
        Ok(out.body)
    }

    /// The meta data and body of the object at `key` from `offset`, following a reference.
    async fn open(&self, key: &Key, offset: u64) -> StoreResult<(ObjectMeta, S3Body)> {
        let object = self.full(key);
        // One request for the common case (a plain object from the start); a reference or
        // an offset costs one more.
        let head = if offset == 0 {
            let out = self
                .client
                .get_object()
                .bucket(&self.bucket)
                .key(&object)
                .send()
                .await
                .map_err(|e| self.fail(key, &object, classify(e)))?;
            let head = head_from(out.content_length(), out.last_modified(), out.metadata());
            if head.kind.is_none() {
                return Ok((head.meta(), out.body));
            }
            head
        } else {
            self.head(key).await?
        };
        let meta = head.meta();
        if head.kind.as_deref() == Some(KIND_STAGING) {
            return Err(self.not_found(key));
        }
        if offset > meta.size {
            return Err(self.precondition(
                key,
                format!("offset {offset} is past the end ({} bytes)", meta.size),
            ));
        }
        let data = match (head.kind.as_deref(), head.data) {
            (Some(KIND_REF), Some(d)) => d,
            _ => object,
        };
        let body = self.open_range(key, &data, offset, meta.size).await?;
        Ok((meta, body))
    }
}

impl S3Store {
    /// Builds a client for `config`. Does no I/O; the first operation reaches the endpoint.
    pub fn new(config: S3Config) -> S3Store {
        use aws_smithy_http_client::tls;
        let http = aws_smithy_http_client::Builder::new()
            .tls_provider(tls::Provider::Rustls(
                tls::rustls_provider::CryptoMode::Ring,
            ))
            .build_https();
        let creds = match &config.credentials {
            Some(c) => Credentials::new(
                &c.access_key_id,
                &c.secret_access_key,
                c.session_token.clone(),
                None,
                "rdctl",
            ),
            None => Credentials::new("rdctl", "rdctl-no-credentials", None, None, "none"),
        };
        let conf = aws_sdk_s3::Config::builder()
            .behavior_version(BehaviorVersion::latest())
            .endpoint_url(&config.endpoint)
            .region(Region::new(config.region.clone()))
            .credentials_provider(creds)
            // SeaweedFS has no virtual-host addressing without a domain name set up.
            .force_path_style(true)
            // Checksums only where S3 requires them: trailing checksums and aws-chunked bodies
            // have broken third-party servers repeatedly (research §5.2, §5.4).
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            // Bodies are whole `Bytes`, so every retry can replay them.
            .retry_config(
                RetryConfig::standard()
                    .with_max_attempts(config.max_attempts.max(1))
                    .with_initial_backoff(config.initial_backoff),
            )
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(config.connect_timeout)
                    .operation_attempt_timeout(config.attempt_timeout)
                    .operation_timeout(config.operation_timeout)
                    .build(),
            )
            // Uploads of whole parts can pause while SeaweedFS writes; timeouts above bound them.
            .stalled_stream_protection(StalledStreamProtectionConfig::disabled())
            .http_client(http)
            .build();
        let mut prefix = config.prefix.trim_matches('/').to_owned();
        if !prefix.is_empty() {
            prefix.push('/');
        }
        S3Store {
            inner: Arc::new(Inner {
                client: Client::from_conf(conf),
                bucket: config.bucket,
                prefix,
                part_size: config.part_size.max(MIN_PART_SIZE),
                instance: uuid::Uuid::new_v4().as_simple().to_string(),
                live: Mutex::new(HashSet::new()),
            }),
        }
    }

    /// The bucket.
    pub fn bucket(&self) -> &str {
        &self.inner.bucket
    }

    /// Asks the endpoint about the bucket (HeadBucket, at most `within`), so that a missing
    /// bucket, a bad name or refused credentials stop a registry at start rather than turning
    /// every later write into a 500. An endpoint that cannot be asked (down, slow, answering
    /// 5xx) is [`BucketProblem::Unreachable`]: the caller may start anyway, since storage often
    /// comes up after its clients.
    pub async fn check_bucket(&self, within: Duration) -> Result<(), BucketProblem> {
        let inner = &self.inner;
        let head = inner.client.head_bucket().bucket(&inner.bucket).send();
        let e = match tokio::time::timeout(within, head).await {
            Ok(Ok(_)) => return Ok(()),
            Ok(Err(e)) => e,
            Err(_) => {
                return Err(BucketProblem::Unreachable(format!(
                    "no answer to HeadBucket within {within:?}"
                )));
            }
        };
        let status = match &e {
            SdkError::ServiceError(_) => e.raw_response().map(|r| r.status().as_u16()),
            _ => None,
        };
        let detail = DisplayErrorContext(&e).to_string();
        Err(match status {
            Some(404) => BucketProblem::Refused("the bucket does not exist".to_owned()),
            Some(401 | 403) => BucketProblem::Refused(
                "access denied (check the S3 credentials and their rights on the bucket)"
                    .to_owned(),
            ),
            Some(s @ 400..=499) if s != 408 && s != 429 => {
                BucketProblem::Refused(format!("HTTP {s} (is the bucket name valid?): {detail}"))
            }
            _ => BucketProblem::Unreachable(detail),
        })
    }
}

/// Why [`S3Store::check_bucket`] failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BucketProblem {
    /// The endpoint answered: this bucket cannot be used as configured.
    Refused(String),
    /// The endpoint could not be asked.
    Unreachable(String),
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
                PutMode::Overwrite => {
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
        Box::pin(async move { self.delete_until(key, None).await.map(|_| ()) })
    }

    fn delete_before<'a>(
        &'a self,
        key: &'a Key,
        until: std::time::Instant,
    ) -> BoxFuture<'a, StoreResult<bool>> {
        Box::pin(self.delete_until(key, Some(until)))
    }
}

impl S3Store {
    /// [`Store::delete`], and [`Store::delete_before`] with `until`: looked at after the HEAD,
    /// right before the DELETE that removes the key (the data object behind a blob reference
    /// is the upload's own, so removing it late harms no later upload of the same bytes).
    async fn delete_until(
        &self,
        key: &Key,
        until: Option<std::time::Instant>,
    ) -> StoreResult<bool> {
        let inner = &self.inner;
        let object = inner.full(key);
        let head = inner.head(key).await?;
        if until.is_some_and(|u| std::time::Instant::now() >= u) {
            return Ok(false);
        }
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
        Ok(true)
    }
}

/// Cuts the tail of `cp` back to `at` bytes (where `cp.parts_end() <= at < cp.size`), writing
/// the part of a straddling segment as a new segment.
async fn cut_tail(
    inner: &Inner,
    staging: &Key,
    doc: &mut StagingDoc,
    cp: &mut Checkpoint,
    at: u64,
) -> StoreResult<()> {
    let mut pos = cp.parts_end();
    let mut kept = Vec::new();
    for seg in &cp.tail {
        if pos >= at {
            break;
        }
        if pos + seg.size <= at {
            kept.push(seg.clone());
            pos += seg.size;
            continue;
        }
        let want = at - pos;
        let bytes = inner.get_range(staging, &seg.key, 0, want).await?;
        let key = seg_key(inner, doc);
        inner
            .put_object(staging, &key, bytes, false, None, &[])
            .await?;
        kept.push(Seg { key, size: want });
        pos = at;
    }
    cp.tail = kept;
    cp.size = at;
    Ok(())
}

fn seg_key(inner: &Inner, doc: &mut StagingDoc) -> String {
    let k = format!("{}.tail/{}-{}", inner.prefix, doc.id, doc.next_seg);
    doc.next_seg += 1;
    k
}

/// Forgets a live claim when its writer goes, however it goes.
struct ClaimGuard {
    inner: Arc<Inner>,
    id: String,
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        self.inner
            .live
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&self.id);
    }
}

/// The writer's state, moved into a part upload while one runs.
struct Core {
    inner: Arc<Inner>,
    key: Key,
    doc: StagingDoc,
    etag: String,
    /// Parts of the stream so far (the checkpoint's and this writer's).
    parts: Vec<Part>,
    /// Durable tail segments after the last part.
    tail: Vec<Seg>,
    tail_size: u64,
    /// The next part number this writer uploads; numbers below `doc.next_part` are reserved
    /// for it.
    next_part: i32,
    /// Bytes not yet in S3 (fewer than a part together with the tail).
    buf: Vec<u8>,
}

impl Core {
    fn size(&self) -> u64 {
        self.parts.iter().map(|p| p.size).sum::<u64>() + self.tail_size + self.buf.len() as u64
    }

    fn room(&self) -> usize {
        (self.inner.part_size - self.tail_size) as usize - self.buf.len()
    }

    /// The tail segments followed by the buffer, read into one part body (at most a part).
    /// Without tail segments the buffer itself becomes the body, moved out without a copy.
    async fn gather(&mut self) -> StoreResult<Bytes> {
        if self.tail.is_empty() {
            return Ok(Bytes::from(std::mem::take(&mut self.buf)));
        }
        let mut body = Vec::with_capacity((self.tail_size as usize) + self.buf.len());
        for seg in &self.tail {
            let b = self
                .inner
                .get_range(&self.key, &seg.key, 0, seg.size)
                .await?;
            body.extend_from_slice(&b);
        }
        body.extend_from_slice(&self.buf);
        Ok(Bytes::from(body))
    }

    /// Starts the multipart upload if there is none yet (it is recorded with the next part
    /// reservation, before any part is uploaded, so an abort can always find it).
    async fn ensure_mpu(&mut self) -> StoreResult<Mpu> {
        if let Some(m) = &self.doc.mpu {
            return Ok(m.clone());
        }
        let inner = &self.inner;
        let key = format!("{}.data/{}", inner.prefix, self.doc.id);
        let out = inner
            .client
            .create_multipart_upload()
            .bucket(&inner.bucket)
            .key(&key)
            .send()
            .await
            .map_err(|e| inner.fail(&self.key, &key, classify(e)))?;
        let upload_id = out
            .upload_id()
            .ok_or_else(|| inner.backend(&key, io::Error::other("no upload id in the answer")))?
            .to_owned();
        let m = Mpu { key, upload_id };
        self.doc.mpu = Some(m.clone());
        Ok(m)
    }

    /// Rewrites the staging document with a renewed claim (also proves the claim still holds).
    async fn renew(&mut self) -> StoreResult<()> {
        if let Some(c) = &mut self.doc.claim {
            c.until = now_secs() + CLAIM_SECS;
        }
        self.etag = self
            .inner
            .write_staging(&self.key, &self.doc, Some(&self.etag))
            .await?;
        Ok(())
    }

    async fn upload_part(&mut self, body: Bytes) -> StoreResult<Part> {
        let m = self.ensure_mpu().await?;
        // Reserve numbers (and renew the claim) before uploading; a lost claim stops here. The
        // first part always writes the document, which also records a new multipart upload.
        let stale = self
            .doc
            .claim
            .as_ref()
            .is_some_and(|c| c.until < now_secs() + CLAIM_SECS - RENEW_AFTER_SECS);
        if self.next_part >= self.doc.next_part || stale {
            self.doc.next_part = self.next_part + PART_BATCH;
            self.renew().await?;
        }
        let n = self.next_part;
        self.next_part += 1;
        let size = body.len() as u64;
        let inner = &self.inner;
        let out = inner
            .client
            .upload_part()
            .bucket(&inner.bucket)
            .key(&m.key)
            .upload_id(&m.upload_id)
            .part_number(n)
            .content_length(size as i64)
            .body(S3Body::from(body))
            .send()
            .await
            .map_err(|e| inner.fail(&self.key, &m.key, classify(e)))?;
        let etag = out
            .e_tag()
            .ok_or_else(|| inner.backend(&m.key, io::Error::other("no ETag for a part")))?
            .to_owned();
        Ok(Part { n, etag, size })
    }

    /// Uploads the tail and buffer as one full part. Without tail segments the buffer itself
    /// is the part body (see `gather`), so an upload holds at most one part in memory: the
    /// buffer being filled or the part being sent, never both (writes wait for the part).
    /// The same allocation is filled again for the next part: a fresh one per part left the
    /// allocator holding freed parts, about 50% more memory at 64 concurrent uploads.
    async fn flush_part(&mut self) -> StoreResult<()> {
        let own = self.tail.is_empty();
        let body = self.gather().await?;
        // A clone shares the bytes. On failure they go back into the buffer, as they were; on
        // success its allocation comes back (without a copy: nobody else holds it any more).
        let result = self.upload_part(body.clone()).await;
        if own && (result.is_err() || body.is_unique()) {
            self.buf = Vec::from(body);
        }
        let part = result?;
        self.parts.push(part);
        self.tail.clear();
        self.tail_size = 0;
        self.buf.clear();
        Ok(())
    }

    /// Moves the buffer into a new tail segment.
    async fn flush_tail(&mut self) -> StoreResult<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        let key = seg_key(&self.inner, &mut self.doc);
        let bytes = Bytes::from(std::mem::take(&mut self.buf));
        let size = bytes.len() as u64;
        self.inner
            .put_object(&self.key, &key, bytes, false, None, &[])
            .await?;
        self.tail.push(Seg { key, size });
        self.tail_size += size;
        Ok(())
    }

    async fn suspend(mut self) -> StoreResult<u64> {
        self.flush_tail().await?;
        // Hand back the unused reserved numbers (the write below still proves the claim, so
        // nobody else took any): a chunked push suspends after every request, and a batch lost
        // each time would run out of S3's 10,000 part numbers long before the size limit.
        self.doc.next_part = self.next_part;
        let size = self.size();
        let cp = Checkpoint {
            parts: self.parts.clone(),
            tail: self.tail.clone(),
            size,
        };
        let dropped = self
            .doc
            .previous
            .replace(std::mem::replace(&mut self.doc.current, cp));
        self.doc.claim = None;
        self.etag = self
            .inner
            .write_staging(&self.key, &self.doc, Some(&self.etag))
            .await?;
        // Segments no checkpoint refers to any more.
        if let Some(old) = dropped {
            let live: HashSet<&str> = self.doc.segs().map(|s| s.key.as_str()).collect();
            for seg in old.tail.iter().filter(|s| !live.contains(s.key.as_str())) {
                if let Err(e) = self.inner.delete_object(&self.key, &seg.key).await {
                    tracing::warn!(key = %self.key, error = %e, "could not delete a tail segment");
                }
            }
        }
        Ok(size)
    }

    async fn commit(mut self, dest: Key) -> StoreResult<ObjectMeta> {
        let inner = self.inner.clone();
        let size = self.size();
        let dest_object = inner.full(&dest);
        let published = if self.parts.is_empty() {
            // Below one part: the bytes go straight to the destination.
            let body = self.gather().await?;
            inner
                .put_object(&dest, &dest_object, body, true, None, &[])
                .await
        } else {
            if self.tail_size + self.buf.len() as u64 > 0 {
                let body = self.gather().await?;
                let last = self.upload_part(body).await?;
                self.parts.push(last);
            }
            let m = self
                .doc
                .mpu
                .clone()
                .expect("parts imply a multipart upload");
            let parts: Vec<CompletedPart> = self
                .parts
                .iter()
                .map(|p| {
                    CompletedPart::builder()
                        .part_number(p.n)
                        .e_tag(&p.etag)
                        .build()
                })
                .collect();
            inner
                .client
                .complete_multipart_upload()
                .bucket(&inner.bucket)
                .key(&m.key)
                .upload_id(&m.upload_id)
                .multipart_upload(
                    CompletedMultipartUpload::builder()
                        .set_parts(Some(parts))
                        .build(),
                )
                .send()
                .await
                .map_err(|e| inner.fail(&self.key, &m.key, classify(e)))?;
            let meta = [
                (META_KIND, KIND_REF.to_owned()),
                (META_DATA, m.key.clone()),
                (META_SIZE, size.to_string()),
            ];
            match inner
                .put_object(&dest, &dest_object, Bytes::new(), true, None, &meta)
                .await
            {
                Ok(etag) => Ok(etag),
                Err(e) => inner.settle_failed_publish(&dest, &m.key, e).await,
            }
        };
        match &published {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {
                // The staging area goes either way; failures from here on are only logged.
                let staging = inner.full(&self.key);
                if let Err(e) = inner.delete_object(&self.key, &staging).await {
                    tracing::warn!(key = %self.key, error = %e, "could not delete a staging document");
                }
                let mut doc = self.doc.clone();
                doc.current.tail.extend(self.tail.iter().cloned());
                // The multipart upload was completed (or, below one part, never used).
                let keep_data = !self.parts.is_empty();
                inner.discard(&self.key, &doc, keep_data).await;
            }
            Err(_) => {}
        }
        published?;
        Ok(ObjectMeta {
            size,
            modified: SystemTime::now(),
        })
    }

    async fn cancel(self) -> StoreResult<()> {
        let staging = self.inner.full(&self.key);
        self.inner.delete_object(&self.key, &staging).await?;
        let mut doc = self.doc.clone();
        doc.current.tail.extend(self.tail.iter().cloned());
        self.inner.discard(&self.key, &doc, false).await;
        Ok(())
    }
}

type PartFuture = BoxFuture<'static, (Core, StoreResult<()>)>;

/// A writer on a staging area: bytes collect in memory up to one part, then go to S3.
struct S3Writer {
    core: Option<Core>,
    /// Bytes in the stream so far, including those in a running part upload.
    written: u64,
    pending: Option<PartFuture>,
    claim: ClaimGuard,
}

impl S3Writer {
    /// Drives a running part upload to its end.
    fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(f) = &mut self.pending {
            let (core, r) = std::task::ready!(f.as_mut().poll(cx));
            self.pending = None;
            self.core = Some(core);
            r.map_err(io::Error::other)?;
        }
        Poll::Ready(Ok(()))
    }

    fn take_core(&mut self) -> Core {
        self.core.take().expect("no part upload is running")
    }
}

impl AsyncWrite for S3Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        std::task::ready!(this.poll_pending(cx))?;
        let core = this.core.as_mut().expect("core is back");
        let n = core.room().min(data.len());
        if core.buf.capacity() == 0 {
            // One allocation of the part's exact remainder, not a doubling series that ends
            // above the part size.
            core.buf.reserve_exact(core.room());
        }
        core.buf.extend_from_slice(&data[..n]);
        this.written += n as u64;
        if core.room() == 0 {
            let mut core = this.take_core();
            this.pending = Some(Box::pin(async move {
                let r = core.flush_part().await;
                (core, r)
            }));
            // Start the upload now; its result is picked up by the next call.
            if let Poll::Ready(Err(e)) = this.poll_pending(cx) {
                return Poll::Ready(Err(e));
            }
        }
        Poll::Ready(Ok(n))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Durability comes from suspend or commit; flush only finishes a running part upload.
        self.get_mut().poll_pending(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.get_mut().poll_pending(cx)
    }
}

impl S3Writer {
    async fn settle(mut self: Box<Self>) -> StoreResult<(Core, ClaimGuard)> {
        if let Some(f) = self.pending.take() {
            let (core, r) = f.await;
            self.core = Some(core);
            r?;
        }
        let S3Writer { core, claim, .. } = *self;
        Ok((core.expect("core is back"), claim))
    }
}

impl StoreWriter for S3Writer {
    fn size(&self) -> u64 {
        self.written
    }

    fn suspend(self: Box<Self>) -> BoxFuture<'static, StoreResult<u64>> {
        Box::pin(async move {
            let (core, _claim) = self.settle().await?;
            core.suspend().await
        })
    }

    fn commit(self: Box<Self>, dest: Key) -> BoxFuture<'static, StoreResult<ObjectMeta>> {
        Box::pin(async move {
            let (core, _claim) = self.settle().await?;
            core.commit(dest).await
        })
    }

    fn cancel(self: Box<Self>) -> BoxFuture<'static, StoreResult<()>> {
        Box::pin(async move {
            let (core, _claim) = match self.settle().await {
                Ok(c) => c,
                Err(e) => return Err(e),
            };
            core.cancel().await
        })
    }
}

/// The longest a presigned URL may live (SigV4's limit: seven days).
pub const MAX_REDIRECT_EXPIRY: Duration = Duration::from_secs(7 * 24 * 3600);

/// Presigned GetObject URLs of an [`S3Store`]'s objects, for answering blob GETs with a
/// redirect to the store (`s3_redirect`): the client fetches the bytes from the S3 endpoint
/// itself, with its `Range` if it sent one. The URL names the endpoint the store was
/// configured with, so that endpoint must be reachable by the registry's clients.
#[derive(Debug, Clone)]
pub struct BlobRedirect {
    store: S3Store,
    expiry: Duration,
}

impl BlobRedirect {
    /// URLs of `store`'s objects valid for `expiry` (1 s to [`MAX_REDIRECT_EXPIRY`]).
    pub fn new(store: &S3Store, expiry: Duration) -> Result<BlobRedirect, String> {
        if expiry.is_zero() || expiry > MAX_REDIRECT_EXPIRY {
            return Err(format!(
                "s3_redirect_expiry_secs is {} s; a presigned URL may live 1 s to {} s (7 days)",
                expiry.as_secs(),
                MAX_REDIRECT_EXPIRY.as_secs()
            ));
        }
        Ok(BlobRedirect {
            store: store.clone(),
            expiry,
        })
    }

    /// How long each URL is valid.
    pub fn expiry(&self) -> Duration {
        self.expiry
    }

    /// A presigned URL of the bytes of `key` (following a blob reference to its data object)
    /// and their metadata; one HEAD, no bytes read. [`StoreError::NotFound`] when absent or
    /// still an upload.
    pub async fn location(&self, key: &Key) -> StoreResult<(ObjectMeta, String)> {
        let inner = &self.store.inner;
        let head = inner.head(key).await?;
        let meta = head.meta();
        let object = match (head.kind.as_deref(), head.data) {
            (Some(KIND_STAGING), _) => return Err(inner.not_found(key)),
            (Some(KIND_REF), Some(data)) => data,
            _ => inner.full(key),
        };
        Ok((meta, self.presign(&object).await?))
    }

    /// A GetObject URL of the full object name `object`, signed for [`BlobRedirect::expiry`].
    async fn presign(&self, object: &str) -> StoreResult<String> {
        let inner = &self.store.inner;
        let config = aws_sdk_s3::presigning::PresigningConfig::expires_in(self.expiry)
            .map_err(|e| inner.backend(object, io::Error::other(e)))?;
        let req = inner
            .client
            .get_object()
            .bucket(&inner.bucket)
            .key(object)
            .presigned(config)
            .await
            .map_err(|e| {
                inner.backend(object, io::Error::other(DisplayErrorContext(e).to_string()))
            })?;
        Ok(req.uri().to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn presigned_urls_name_the_endpoint_the_object_and_the_expiry() {
        let store = S3Store::new(S3Config::new("http://127.0.0.1:9", "blobs").prefix("reg"));
        let r = BlobRedirect::new(&store, Duration::from_secs(90)).unwrap();
        let key = Key::new("blobs/sha256/ab/abcd/data").unwrap();
        let url = r.presign(&store.inner.full(&key)).await.unwrap();
        assert!(
            url.starts_with("http://127.0.0.1:9/blobs/reg/blobs/sha256/ab/abcd/data?"),
            "{url}"
        );
        for part in ["X-Amz-Expires=90", "X-Amz-Signature=", "X-Amz-Credential="] {
            assert!(url.contains(part), "{part} not in {url}");
        }
    }

    #[test]
    fn expiry_is_bounded() {
        let store = S3Store::new(S3Config::new("http://127.0.0.1:9", "blobs"));
        for bad in [Duration::ZERO, MAX_REDIRECT_EXPIRY + Duration::from_secs(1)] {
            let e = BlobRedirect::new(&store, bad).unwrap_err();
            assert!(e.contains("s3_redirect_expiry_secs"), "{e}");
        }
        assert!(BlobRedirect::new(&store, MAX_REDIRECT_EXPIRY).is_ok());
    }
}
