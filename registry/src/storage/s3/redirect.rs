//! Presigned GetObject URLs for `s3_redirect` blob GETs.

use super::*;

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
