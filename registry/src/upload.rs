//! Upload sessions whose whole state lives in the store.
//!
//! A session is a staging area `uploads/<uuid>/data` plus a state document
//! `uploads/<uuid>/state` holding the repository, the durable offset and the saved hash states
//! ([`validator::Digester::save_state`]). Each request resumes the staging area at the recorded
//! offset (cutting off bytes a crashed request left behind), appends, makes the bytes durable,
//! and only then advances the state with a conditional write. So a repeated PATCH gets 416, a
//! status GET reports the true range, and any process or replica can continue an upload, after a
//! restart too. A blob is published only after its size and digest were verified.

use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use bytes::Bytes;
use futures_util::{Stream, StreamExt};
use serde::{Deserialize, Serialize};
use tokio::io::AsyncWriteExt;
use uuid::Uuid;
use validator::{Algorithm, Digest, Digester};

use crate::errors::{ApiError, ApiResult, Code};
use crate::repo::Repos;
use crate::storage::{Etag, PutMode, StoreError, StoreWriter, layout};
use validator::Name;

const STATE_LIMIT: u64 = 64 << 10;

/// The persisted state of one upload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct UploadState {
    /// Repository the upload belongs to.
    pub repository: String,
    /// Durable bytes so far.
    pub offset: u64,
    /// Saved hash states (base64), one per algorithm hashed.
    pub hashes: Vec<String>,
    /// Seconds since the epoch of the last change.
    pub updated: u64,
}

/// A loaded upload: its id, state and version.
#[derive(Debug)]
pub(crate) struct Upload {
    pub id: Uuid,
    pub state: UploadState,
    etag: Etag,
}

/// A byte range in a `Content-Range` request header of a PATCH (`<start>-<end>`, inclusive).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChunkRange {
    pub start: u64,
    pub end: u64,
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

/// The `Range` header value for an upload at `offset` (`0-<last byte>`; `0-0` when empty).
pub(crate) fn range_header(offset: u64) -> String {
    format!("0-{}", offset.saturating_sub(1))
}

fn save(digesters: &[Digester]) -> Vec<String> {
    digesters
        .iter()
        .map(|d| base64::engine::general_purpose::STANDARD.encode(d.save_state()))
        .collect()
}

fn restore(state: &UploadState) -> ApiResult<Vec<Digester>> {
    state
        .hashes
        .iter()
        .map(|h| {
            let raw = base64::engine::general_purpose::STANDARD
                .decode(h)
                .map_err(ApiError::internal)?;
            Digester::restore_state(&raw).map_err(ApiError::internal)
        })
        .collect()
}

/// Most of a refused request body read and dropped. A 416 sent while the client is still
/// sending a multi-MiB chunk would otherwise close the connection on unread bytes, and the
/// client (or a load balancer in between) sees a reset instead of the answer.
const DRAIN_LIMIT: u64 = 64 << 20;

async fn drain<S, E>(mut body: Pin<&mut S>)
where
    S: Stream<Item = Result<Bytes, E>>,
{
    let mut n = 0u64;
    while n < DRAIN_LIMIT {
        match body.next().await {
            Some(Ok(b)) => n += b.len() as u64,
            _ => return,
        }
    }
}

fn range_error(upload: &Upload, detail: String) -> ApiError {
    ApiError::new(Code::RangeInvalid, detail).with_header(
        axum::http::header::RANGE,
        axum::http::HeaderValue::from_str(&range_header(upload.state.offset))
            .expect("digits and a dash"),
    )
}

impl Repos {
    /// Starts an upload. `algorithm` restricts hashing to one algorithm (from
    /// `digest-algorithm`). Without it the final digest's algorithm is unknown until the PUT:
    /// on a store whose staged bytes can be read back, only sha256 (the canonical algorithm)
    /// is hashed as bytes arrive and any other is verified by reading them back at the end;
    /// elsewhere (S3) sha256 and sha512 are both kept. Hashing sha512 alongside took 51% of the
    /// registry's CPU in a filesystem push (perf; docs/benchmarks.md, "History": the full run
    /// of b50d21c).
    pub async fn start_upload(
        &self,
        name: &Name,
        algorithm: Option<Algorithm>,
    ) -> ApiResult<Upload> {
        let id = Uuid::new_v4();
        let digesters: Vec<Digester> = match algorithm {
            Some(a) => vec![a.digester()],
            None if self.store().staging_readable() => vec![Algorithm::Sha256.digester()],
            None => vec![Algorithm::Sha256.digester(), Algorithm::Sha512.digester()],
        };
        let w = self.store().writer(&layout::upload_data(&id), None).await?;
        w.suspend().await?;
        let state = UploadState {
            repository: name.as_str().to_owned(),
            offset: 0,
            hashes: save(&digesters),
            updated: now_secs(),
        };
        let bytes = serde_json::to_vec(&state).map_err(ApiError::internal)?;
        let etag = self
            .store()
            .put(
                &layout::upload_state(&id),
                Bytes::from(bytes),
                PutMode::Create,
            )
            .await?;
        Ok(Upload { id, state, etag })
    }

    /// Loads an upload of repository `name`; `BLOB_UPLOAD_UNKNOWN` for a bad or unknown id.
    pub async fn load_upload(&self, name: &Name, id: &str) -> ApiResult<Upload> {
        let unknown =
            || ApiError::new(Code::BlobUploadUnknown, format!("upload {id:?} is unknown"));
        let uuid = Uuid::try_parse(id).map_err(|_| unknown())?;
        let doc = match self
            .store()
            .get(&layout::upload_state(&uuid), STATE_LIMIT)
            .await
        {
            Ok(d) => d,
            Err(e) if e.is_not_found() => return Err(unknown()),
            Err(e) => return Err(e.into()),
        };
        // A state that does not parse is one a machine crash tore (the filesystem store does
        // not make session state durable, see `storage::layout::is_upload`): the session is
        // lost, so the client is told to start again rather than shown a server error.
        let state: UploadState = match serde_json::from_slice(&doc.bytes) {
            Ok(state) => state,
            Err(e) => {
                tracing::warn!(upload = %uuid, error = %e, "an upload's state does not parse; the upload is treated as unknown");
                return Err(ApiError::new(
                    Code::BlobUploadUnknown,
                    format!("upload {id:?} is unknown (its state is unreadable: {e})"),
                ));
            }
        };
        if state.repository != name.as_str() {
            return Err(unknown());
        }
        Ok(Upload {
            id: uuid,
            state,
            etag: doc.etag,
        })
    }

    /// Opens the upload's staging area at its durable offset.
    async fn resume(&self, upload: &Upload) -> ApiResult<Box<dyn StoreWriter>> {
        match self
            .store()
            .writer(&layout::upload_data(&upload.id), Some(upload.state.offset))
            .await
        {
            Ok(w) => Ok(w),
            Err(StoreError::PreconditionFailed { reason, .. }) => Err(range_error(
                upload,
                format!("upload {} is busy or inconsistent: {reason}", upload.id),
            )),
            Err(e) if e.is_not_found() => Err(ApiError::new(
                Code::BlobUploadUnknown,
                format!("upload {} has no data", upload.id),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// Streams `body` into the staging area, hashing as it goes. On error the writer is
    /// suspended without advancing the state, so the bytes are cut off on the next resume.
    async fn append<S, E>(
        &self,
        upload: &Upload,
        w: &mut Box<dyn StoreWriter>,
        digesters: &mut [Digester],
        body: S,
        expect_len: Option<u64>,
    ) -> ApiResult<u64>
    where
        S: Stream<Item = Result<Bytes, E>>,
        E: std::fmt::Display,
    {
        let mut body = std::pin::pin!(body);
        let mut n: u64 = 0;
        while let Some(chunk) = body.next().await {
            let chunk = chunk.map_err(|e| {
                ApiError::new(
                    Code::BlobUploadInvalid,
                    format!("reading the body of upload {} failed: {e}", upload.id),
                )
            })?;
            n = n
                .checked_add(chunk.len() as u64)
                .ok_or_else(|| ApiError::new(Code::SizeInvalid, "upload too large"))?;
            if let Some(len) = expect_len
                && n > len
            {
                return Err(ApiError::new(
                    Code::SizeInvalid,
                    format!(
                        "upload {}: body is longer than the declared {len} bytes",
                        upload.id
                    ),
                ));
            }
            for d in digesters.iter_mut() {
                d.update(&chunk);
            }
            // Frames go to the writer as they come: each store gathers them into its own
            // write unit (fs: a batch per `pwrite`, S3: a part), so a chunked body of small
            // frames costs one user-space copy, not a coalescing copy here and another there.
            w.write_all(&chunk).await.map_err(|e| {
                ApiError::internal(format!("writing upload {} failed: {e}", upload.id))
            })?;
        }
        if let Some(len) = expect_len
            && n != len
        {
            return Err(ApiError::new(
                Code::SizeInvalid,
                format!("upload {}: body has {n} bytes, declared {len}", upload.id),
            ));
        }
        Ok(n)
    }

    /// PATCH: appends a chunk. `range` is the request's `Content-Range`, if any.
    pub async fn patch_upload<S, E>(
        &self,
        upload: Upload,
        body: S,
        range: Option<ChunkRange>,
        content_length: Option<u64>,
    ) -> ApiResult<Upload>
    where
        S: Stream<Item = Result<Bytes, E>>,
        E: std::fmt::Display,
    {
        let mut body = std::pin::pin!(body);
        let mut started = false;
        let r = self
            .patch_upload_inner(upload, body.as_mut(), range, content_length, &mut started)
            .await;
        if r.is_err() && !started {
            drain(body).await;
        }
        r
    }

    async fn patch_upload_inner<S, E>(
        &self,
        mut upload: Upload,
        body: Pin<&mut S>,
        range: Option<ChunkRange>,
        content_length: Option<u64>,
        started: &mut bool,
    ) -> ApiResult<Upload>
    where
        S: Stream<Item = Result<Bytes, E>>,
        E: std::fmt::Display,
    {
        let mut expect = content_length;
        if let Some(r) = range {
            if r.start != upload.state.offset || r.end < r.start {
                return Err(range_error(
                    &upload,
                    format!(
                        "chunk {}-{} does not continue upload {} at offset {}",
                        r.start, r.end, upload.id, upload.state.offset
                    ),
                ));
            }
            let len = r.end - r.start + 1;
            if let Some(cl) = content_length
                && cl != len
            {
                return Err(range_error(
                    &upload,
                    format!(
                        "Content-Range {}-{} does not match Content-Length {cl}",
                        r.start, r.end
                    ),
                ));
            }
            expect = Some(len);
        }
        let mut digesters = restore(&upload.state)?;
        let mut w = self.resume(&upload).await?;
        *started = true;
        let res = self
            .append(&upload, &mut w, &mut digesters, body, expect)
            .await;
        let n = match res {
            Ok(n) => n,
            Err(e) => {
                let _ = w.suspend().await;
                return Err(e);
            }
        };
        let offset = w.suspend().await?;
        debug_assert_eq!(offset, upload.state.offset + n);
        upload.state.offset = offset;
        upload.state.hashes = save(&digesters);
        upload.state.updated = now_secs();
        self.save_state(&mut upload).await?;
        Ok(upload)
    }

    async fn save_state(&self, upload: &mut Upload) -> ApiResult<()> {
        let bytes = serde_json::to_vec(&upload.state).map_err(ApiError::internal)?;
        match self
            .store()
            .put(
                &layout::upload_state(&upload.id),
                Bytes::from(bytes),
                PutMode::Replace(upload.etag.clone()),
            )
            .await
        {
            Ok(etag) => {
                upload.etag = etag;
                Ok(())
            }
            Err(StoreError::PreconditionFailed { .. }) => Err(range_error(
                upload,
                format!("upload {} was changed by a concurrent request", upload.id),
            )),
            Err(e) => Err(e.into()),
        }
    }

    /// PUT: appends the final bytes (if any), verifies the digest and size, publishes the blob
    /// and links it into the repository. Returns the blob's size.
    pub async fn finish_upload<S, E>(
        &self,
        name: &Name,
        upload: Upload,
        body: S,
        range: Option<ChunkRange>,
        content_length: Option<u64>,
        expected: &Digest,
    ) -> ApiResult<u64>
    where
        S: Stream<Item = Result<Bytes, E>>,
        E: std::fmt::Display,
    {
        let mut body = std::pin::pin!(body);
        let mut started = false;
        let r = self
            .finish_upload_inner(
                name,
                upload,
                body.as_mut(),
                range,
                content_length,
                expected,
                &mut started,
            )
            .await;
        if r.is_err() && !started {
            drain(body).await;
        }
        r
    }

    #[allow(clippy::too_many_arguments)]
    async fn finish_upload_inner<S, E>(
        &self,
        name: &Name,
        upload: Upload,
        body: Pin<&mut S>,
        range: Option<ChunkRange>,
        content_length: Option<u64>,
        expected: &Digest,
        started: &mut bool,
    ) -> ApiResult<u64>
    where
        S: Stream<Item = Result<Bytes, E>>,
        E: std::fmt::Display,
    {
        let mut expect = content_length;
        if let Some(r) = range {
            if r.start != upload.state.offset || r.end < r.start {
                return Err(range_error(
                    &upload,
                    format!(
                        "final chunk {}-{} does not continue upload {} at offset {}",
                        r.start, r.end, upload.id, upload.state.offset
                    ),
                ));
            }
            expect = Some(r.end - r.start + 1);
        }
        let mut digesters = restore(&upload.state)?;
        let mut w = self.resume(&upload).await?;
        *started = true;
        if let Err(e) = self
            .append(&upload, &mut w, &mut digesters, body, expect)
            .await
        {
            let _ = w.suspend().await;
            return Err(e);
        }
        let size = w.size();
        let found = match digesters
            .into_iter()
            .find(|d| d.algorithm() == expected.algorithm())
        {
            Some(digester) => digester.finish(),
            None if self.store().staging_readable() => {
                match self
                    .hash_staged(&upload, &mut w, expected.algorithm())
                    .await
                {
                    Ok(d) => d,
                    Err(e) => {
                        let _ = w.suspend().await;
                        return Err(e);
                    }
                }
            }
            None => {
                let _ = w.suspend().await;
                return Err(ApiError::new(
                    Code::DigestInvalid,
                    format!(
                        "upload {} was not hashed with {} (digest-algorithm was set)",
                        upload.id,
                        expected.algorithm()
                    ),
                ));
            }
        };
        if &found != expected {
            // A failed verification ends the session: nothing of it is ever published.
            let _ = w.cancel().await;
            self.drop_state(&upload.id).await;
            return Err(ApiError::new(
                Code::DigestInvalid,
                format!("upload {} has digest {found}, not {expected}", upload.id),
            ));
        }
        // Held before the bytes are published: a collector that committed to deleting an
        // older copy of them (or this repository's older link) moved the digest to a new
        // epoch, and these bytes and this link go there, out of reach of its DELETEs however
        // late they arrive. Bytes already there at the current epoch are held by this too.
        let epochs = self.hold_epochs(expected).await?;
        match w.commit(epochs.data_key(expected)).await {
            Ok(_) | Err(StoreError::AlreadyExists { .. }) => {}
            Err(e) => return Err(e.into()),
        }
        self.link_blob(name, expected, &epochs, size).await?;
        self.drop_state(&upload.id).await;
        Ok(size)
    }

    /// Hashes an upload's staged bytes with `algorithm` by reading them back (stores with
    /// [`Store::staging_readable`](crate::storage::Store::staging_readable)), for a final digest
    /// whose algorithm was not hashed while the bytes arrived. Exactly the writer's `size`
    /// bytes are hashed; fewer is an error.
    async fn hash_staged(
        &self,
        upload: &Upload,
        w: &mut Box<dyn StoreWriter>,
        algorithm: Algorithm,
    ) -> ApiResult<Digest> {
        use tokio::io::AsyncReadExt;
        let size = w.size();
        w.flush().await.map_err(|e| {
            ApiError::internal(format!("flushing upload {} failed: {e}", upload.id))
        })?;
        let (_, reader) = self
            .store()
            .read(&layout::upload_data(&upload.id), 0)
            .await?;
        let mut reader = reader.take(size);
        let mut digester = algorithm.digester();
        let mut buf = vec![0u8; 256 << 10];
        let mut n: u64 = 0;
        loop {
            let got = reader.read(&mut buf).await.map_err(|e| {
                ApiError::internal(format!("reading back upload {} failed: {e}", upload.id))
            })?;
            if got == 0 {
                break;
            }
            digester.update(&buf[..got]);
            n += got as u64;
        }
        if n != size {
            return Err(ApiError::internal(format!(
                "upload {}: read back {n} of its {size} staged bytes",
                upload.id
            )));
        }
        Ok(digester.finish())
    }

    async fn drop_state(&self, id: &Uuid) {
        if let Err(e) = self.store().delete(&layout::upload_state(id)).await
            && !e.is_not_found()
        {
            tracing::warn!(upload = %id, error = %e, "could not remove upload state");
        }
    }

    /// DELETE on an upload: drops its staging area and state.
    pub async fn cancel_upload(&self, upload: Upload) -> ApiResult<()> {
        match self.store().delete(&layout::upload_data(&upload.id)).await {
            Ok(()) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e.into()),
        }
        self.drop_state(&upload.id).await;
        Ok(())
    }

    /// Removes uploads not touched for `max_age`. Returns how many went.
    pub async fn expire_uploads(&self, max_age: Duration) -> ApiResult<usize> {
        let keys = self.store().list(&layout::uploads_root()).await?;
        let cutoff = now_secs().saturating_sub(max_age.as_secs());
        let mut removed = 0;
        for key in keys {
            let parts: Vec<&str> = key.as_str().split('/').collect();
            let [_, id, _] = parts.as_slice() else {
                continue;
            };
            let Ok(uuid) = Uuid::try_parse(id) else {
                continue;
            };
            let stale = match self
                .store()
                .get(&layout::upload_state(&uuid), STATE_LIMIT)
                .await
            {
                Ok(doc) => serde_json::from_slice::<UploadState>(&doc.bytes)
                    .map(|s| s.updated < cutoff)
                    .unwrap_or(true),
                // Data without state: stale once its file is old.
                Err(e) if e.is_not_found() => match self.store().stat(&key).await {
                    Ok(m) => m
                        .modified
                        .duration_since(UNIX_EPOCH)
                        .map(|d| d.as_secs() < cutoff)
                        .unwrap_or(true),
                    Err(_) => false,
                },
                Err(_) => false,
            };
            if stale {
                match self.store().delete(&key).await {
                    Ok(()) => removed += 1,
                    Err(e) if e.is_not_found() => {}
                    Err(e) => tracing::warn!(key = %key, error = %e, "could not expire upload"),
                }
            }
        }
        Ok(removed)
    }
}
