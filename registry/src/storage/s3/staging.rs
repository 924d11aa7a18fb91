//! Staging areas: the state document of a multipart upload (parts, tail segments, checkpoints,
//! the writer's claim), how it is read, written, settled and discarded, and cutting a tail back
//! to a resume offset.

use super::*;

/// One uploaded part.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Part {
    pub(super) n: i32,
    pub(super) etag: String,
    pub(super) size: u64,
}

/// One tail segment object (full object name).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Seg {
    pub(super) key: String,
    pub(super) size: u64,
}

/// The content of a staging area at one suspend.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(super) struct Checkpoint {
    pub(super) parts: Vec<Part>,
    pub(super) tail: Vec<Seg>,
    pub(super) size: u64,
}

impl Checkpoint {
    pub(super) fn parts_end(&self) -> u64 {
        self.parts.iter().map(|p| p.size).sum()
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Mpu {
    pub(super) key: String,
    pub(super) upload_id: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct Claim {
    pub(super) id: String,
    pub(super) instance: String,
    pub(super) until: u64,
}

/// The state document of a staging area.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(super) struct StagingDoc {
    /// Names the data object and the tail segments.
    pub(super) id: String,
    pub(super) mpu: Option<Mpu>,
    pub(super) current: Checkpoint,
    pub(super) previous: Option<Checkpoint>,
    pub(super) claim: Option<Claim>,
    pub(super) next_seg: u64,
    /// The next part number to hand out. Every part number is reserved by a conditional write
    /// of this document before its upload, so two writers never upload the same number, even
    /// when a claim was taken over from a writer that is slow rather than dead. A writer
    /// reserves [`PART_BATCH`] numbers per write.
    pub(super) next_part: i32,
}

impl StagingDoc {
    pub(super) fn segs(&self) -> impl Iterator<Item = &Seg> {
        self.current
            .tail
            .iter()
            .chain(self.previous.iter().flat_map(|c| c.tail.iter()))
    }
}

impl Inner {
    pub(super) async fn read_staging(&self, key: &Key) -> StoreResult<(StagingDoc, String)> {
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
    pub(super) async fn write_staging(
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
    pub(super) async fn put_settled(
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

    pub(super) fn claim_is_live(&self, claim: &Claim) -> bool {
        if claim.instance == self.instance {
            self.live
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .contains(&claim.id)
        } else {
            claim.until > now_secs()
        }
    }

    pub(super) fn new_claim(&self) -> Claim {
        Claim {
            id: uuid::Uuid::new_v4().as_simple().to_string(),
            instance: self.instance.clone(),
            until: now_secs() + CLAIM_SECS,
        }
    }

    /// Removes everything a staging document refers to. Best effort: logs what failed.
    pub(super) async fn discard(&self, key: &Key, doc: &StagingDoc, keep_data: bool) {
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
    pub(super) async fn settle_failed_publish(
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
}

/// Cuts the tail of `cp` back to `at` bytes (where `cp.parts_end() <= at < cp.size`), writing
/// the part of a straddling segment as a new segment.
pub(super) async fn cut_tail(
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

pub(super) fn seg_key(inner: &Inner, doc: &mut StagingDoc) -> String {
    let k = format!("{}.tail/{}-{}", inner.prefix, doc.id, doc.next_seg);
    doc.next_seg += 1;
    k
}
