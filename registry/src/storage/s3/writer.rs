//! The multipart writer ([`S3Writer`]): full parts uploaded as they fill, the tail staged in
//! segment objects, suspend, commit (small: one create-only put; large: complete the multipart
//! upload and publish a reference object) and cancel.

use super::*;

/// Forgets a live claim when its writer goes, however it goes.
pub(super) struct ClaimGuard {
    pub(super) inner: Arc<Inner>,
    pub(super) id: String,
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
pub(super) struct Core {
    pub(super) inner: Arc<Inner>,
    pub(super) key: Key,
    pub(super) doc: StagingDoc,
    pub(super) etag: String,
    /// Parts of the stream so far (the checkpoint's and this writer's).
    pub(super) parts: Vec<Part>,
    /// Durable tail segments after the last part.
    pub(super) tail: Vec<Seg>,
    pub(super) tail_size: u64,
    /// The next part number this writer uploads; numbers below `doc.next_part` are reserved
    /// for it.
    pub(super) next_part: i32,
    /// Bytes not yet in S3 (fewer than a part together with the tail).
    pub(super) buf: Vec<u8>,
}

impl Core {
    pub(super) fn size(&self) -> u64 {
        self.parts.iter().map(|p| p.size).sum::<u64>() + self.tail_size + self.buf.len() as u64
    }

    pub(super) fn room(&self) -> usize {
        (self.inner.part_size - self.tail_size) as usize - self.buf.len()
    }

    /// The tail segments followed by the buffer, read into one part body (at most a part).
    /// Without tail segments the buffer itself becomes the body, moved out without a copy.
    pub(super) async fn gather(&mut self) -> StoreResult<Bytes> {
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
    pub(super) async fn ensure_mpu(&mut self) -> StoreResult<Mpu> {
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
    pub(super) async fn renew(&mut self) -> StoreResult<()> {
        if let Some(c) = &mut self.doc.claim {
            c.until = now_secs() + CLAIM_SECS;
        }
        self.etag = self
            .inner
            .write_staging(&self.key, &self.doc, Some(&self.etag))
            .await?;
        Ok(())
    }

    pub(super) async fn upload_part(&mut self, body: Bytes) -> StoreResult<Part> {
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
    /// is the part body (see `gather`): the part being sent is the only copy, and an upload
    /// holds one part in memory, or two while it fills one ahead (see [`S3Writer`]).
    /// The same allocation is filled again for the next part: a fresh one per part left the
    /// allocator holding freed parts, about 50% more memory at 64 concurrent uploads.
    pub(super) async fn flush_part(&mut self) -> StoreResult<()> {
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
    pub(super) async fn flush_tail(&mut self) -> StoreResult<()> {
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

    pub(super) async fn suspend(mut self) -> StoreResult<u64> {
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

    pub(super) async fn commit(mut self, dest: Key) -> StoreResult<ObjectMeta> {
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

    pub(super) async fn cancel(self) -> StoreResult<()> {
        let staging = self.inner.full(&self.key);
        self.inner.delete_object(&self.key, &staging).await?;
        let mut doc = self.doc.clone();
        doc.current.tail.extend(self.tail.iter().cloned());
        self.inner.discard(&self.key, &doc, false).await;
        Ok(())
    }
}

pub(super) type PartFuture = BoxFuture<'static, (Core, StoreResult<()>)>;

/// A writer on a staging area: bytes collect in memory up to one part, then go to S3.
///
/// While a part uploads, the writer may fill the next one (`ahead`) if it holds one of the
/// process's [`AHEAD_PARTS`] permits, so a single upload keeps SeaweedFS (or S3) busy while its
/// client sends; without a permit, writes wait for the part as they always did. The permit and
/// the second buffer stay with the writer until it goes (one request).
pub(super) struct S3Writer {
    pub(super) core: Option<Core>,
    /// Bytes in the stream so far, including those in a running part upload and in `ahead`.
    pub(super) written: u64,
    pub(super) pending: Option<PartFuture>,
    /// Bytes after the uploading part (at most a part), moved into the core's buffer when the
    /// upload is done.
    pub(super) ahead: Vec<u8>,
    pub(super) ahead_permit: Option<tokio::sync::OwnedSemaphorePermit>,
    pub(super) claim: ClaimGuard,
}

impl S3Writer {
    /// Drives a running part upload to its end; the bytes gathered ahead then become the
    /// core's buffer.
    pub(super) fn poll_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if let Some(f) = &mut self.pending {
            let (mut core, r) = std::task::ready!(f.as_mut().poll(cx));
            self.pending = None;
            if r.is_ok() {
                take_ahead(&mut core, &mut self.ahead);
            } else {
                // The failed part's bytes are back in the core's buffer; the ones after it are
                // dropped (the caller sees the error and records no offset past the failure).
                self.written -= self.ahead.len() as u64;
                self.ahead.clear();
            }
            self.core = Some(core);
            r.map_err(io::Error::other)?;
        }
        Poll::Ready(Ok(()))
    }

    pub(super) fn take_core(&mut self) -> Core {
        self.core.take().expect("no part upload is running")
    }

    /// Starts uploading the core's full buffer as a part; its result is picked up by the next
    /// call of [`S3Writer::poll_pending`] (an error already here is returned).
    fn start_part(&mut self, cx: &mut Context<'_>) -> io::Result<()> {
        let mut core = self.take_core();
        self.pending = Some(Box::pin(async move {
            let r = core.flush_part().await;
            (core, r)
        }));
        match self.poll_pending(cx) {
            Poll::Ready(Err(e)) => Err(e),
            _ => Ok(()),
        }
    }

    /// While a part uploads: takes what fits of `data` into the part ahead, if this writer has
    /// (or now gets) a permit; `Pending` when it has none or the part ahead is full.
    fn write_ahead(&mut self, data: &[u8]) -> Poll<io::Result<usize>> {
        let part = self.claim.inner.part_size as usize;
        if self.ahead_permit.is_none() {
            self.ahead_permit = self
                .claim
                .inner
                .ahead_parts
                .clone()
                .try_acquire_owned()
                .ok();
        }
        if self.ahead_permit.is_none() || self.ahead.len() >= part {
            return Poll::Pending;
        }
        if self.ahead.capacity() == 0 {
            self.ahead.reserve_exact(part);
        }
        let n = (part - self.ahead.len()).min(data.len());
        self.ahead.extend_from_slice(&data[..n]);
        self.written += n as u64;
        Poll::Ready(Ok(n))
    }
}

/// Moves the bytes gathered ahead into the core's buffer, which a finished part upload left
/// empty (the swap keeps both allocations for the next parts).
fn take_ahead(core: &mut Core, ahead: &mut Vec<u8>) {
    if ahead.is_empty() {
        return;
    }
    if core.buf.is_empty() {
        std::mem::swap(&mut core.buf, ahead);
    } else {
        core.buf.extend_from_slice(ahead);
        ahead.clear();
    }
}

impl AsyncWrite for S3Writer {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        loop {
            match this.poll_pending(cx) {
                Poll::Ready(r) => r?,
                // The waker is registered with the upload: a `Pending` here ends when it does.
                Poll::Pending => return this.write_ahead(data),
            }
            if this.core.as_ref().expect("core is back").room() == 0 {
                // The part gathered ahead is full: upload it before taking more.
                this.start_part(cx)?;
                continue;
            }
            break;
        }
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
            // Start the upload now; its result is picked up by the next call.
            this.start_part(cx)?;
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
    /// Waits for the running part upload and returns the core with every accepted byte in
    /// it: uploaded, or in its buffer (the part gathered ahead included).
    pub(super) async fn settle(mut self: Box<Self>) -> StoreResult<(Core, ClaimGuard)> {
        if let Some(f) = self.pending.take() {
            let (core, r) = f.await;
            self.core = Some(core);
            r?;
        }
        let S3Writer {
            core,
            mut ahead,
            claim,
            ..
        } = *self;
        let mut core = core.expect("core is back");
        take_ahead(&mut core, &mut ahead);
        Ok((core, claim))
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
