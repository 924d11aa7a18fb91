//! Reads and conditional writes of plain objects: HEAD, ranged and conditional GETs, documents,
//! `If-None-Match`/`If-Match` puts and deletes, with S3 errors classified into [`StoreError`]s.

use super::*;

/// What a HEAD or GET learned about an object.
pub(super) struct Head {
    pub(super) size: u64,
    pub(super) modified: SystemTime,
    pub(super) kind: Option<String>,
    pub(super) data: Option<String>,
    pub(super) ref_size: Option<u64>,
}

impl Head {
    pub(super) fn meta(&self) -> ObjectMeta {
        ObjectMeta {
            size: self.ref_size.unwrap_or(self.size),
            modified: self.modified,
        }
    }
}

pub(super) fn head_from(
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
pub(super) enum S3Fail {
    NotFound,
    Precondition,
    Range,
    Other(io::Error),
}

pub(super) fn classify<E>(e: SdkError<E, HttpResponse>) -> S3Fail
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
    pub(super) fn full(&self, key: &Key) -> String {
        format!("{}{}", self.prefix, key.as_str())
    }

    pub(super) fn backend(&self, object: &str, source: io::Error) -> StoreError {
        StoreError::Backend {
            store: NAME,
            key: format!("{}/{object}", self.bucket),
            source,
        }
    }

    pub(super) fn not_found(&self, key: &Key) -> StoreError {
        StoreError::NotFound {
            store: NAME,
            key: key.clone(),
        }
    }

    pub(super) fn precondition(&self, key: &Key, reason: impl Into<String>) -> StoreError {
        StoreError::PreconditionFailed {
            store: NAME,
            key: key.clone(),
            reason: reason.into(),
        }
    }

    /// Maps a failure on `object` (the store key `key`) to a [`StoreError`].
    pub(super) fn fail(&self, key: &Key, object: &str, f: S3Fail) -> StoreError {
        match f {
            S3Fail::NotFound => self.not_found(key),
            S3Fail::Precondition => self.precondition(key, "the object changed"),
            S3Fail::Range => self.precondition(key, "range not satisfiable"),
            S3Fail::Other(e) => self.backend(object, e),
        }
    }

    pub(super) async fn head(&self, key: &Key) -> StoreResult<Head> {
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
    pub(super) async fn get_bytes(
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
    pub(super) fn unconditional<T>(&self, object: &str, r: Option<T>) -> StoreResult<T> {
        r.ok_or_else(|| {
            self.backend(
                object,
                io::Error::other("304 Not Modified to a GET without a condition"),
            )
        })
    }

    /// GET of a whole object, retried on backend failures; with `unless` (an ETag), `None`
    /// when the object still has it (304 Not Modified).
    pub(super) async fn get_bytes_unless(
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

    pub(super) async fn get_bytes_once(
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
    pub(super) async fn document(
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
    pub(super) async fn put_object(
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

    pub(super) async fn delete_object(&self, key: &Key, object: &str) -> StoreResult<()> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(object)
            .send()
            .await
            .map_err(|e| self.fail(key, object, classify(e)))?;
        Ok(())
    }

    pub(super) async fn get_range(
        &self,
        key: &Key,
        object: &str,
        from: u64,
        to: u64,
    ) -> StoreResult<Bytes> {
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
    pub(super) async fn open_range(
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
    pub(super) async fn open(&self, key: &Key, offset: u64) -> StoreResult<(ObjectMeta, S3Body)> {
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
