//! Blobs: existence checks, verified downloads that resume cut bodies with `Range`, and
//! uploads (monolithic when small, chunked and resumable when large).

use std::io;
use std::pin::Pin;

use bytes::{Bytes, BytesMut};
use futures_util::{Stream, StreamExt};
use reqwest::header::{CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, RANGE};
use reqwest::{Method, StatusCode, Url};
use tokio::io::{AsyncRead, AsyncReadExt};
use validator::{Digest, Name, VerifyError, VerifyingReader};

use crate::client::{Client, header_str, location};
use crate::error::ClientError;
use crate::session::Scope;
use validator::error_chain;

/// Whether a push uploaded the blob or found it already there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PushOutcome {
    /// The registry already had it.
    Skipped,
    /// It was uploaded.
    Uploaded,
}

/// A verified blob stream: reading it to EOF without an error means size and digest matched.
pub type BlobReader = VerifyingReader<Pin<Box<dyn AsyncRead + Send>>>;

impl Client {
    /// The size of a blob if the repository has it.
    pub async fn blob_exists(
        &self,
        registry: &str,
        name: &Name,
        digest: &Digest,
    ) -> Result<Option<u64>, ClientError> {
        self.blob_exists_in(&Scope::pull(registry, name), digest)
            .await
    }

    pub(crate) async fn blob_exists_in(
        &self,
        scope: &Scope<'_>,
        digest: &Digest,
    ) -> Result<Option<u64>, ClientError> {
        let name = scope.repo.expect("a blob scope names its repository").0;
        let url = self.url(scope.host, &format!("/v2/{name}/blobs/{digest}"))?;
        let resp = self
            .send(scope, &url, &|| self.http_for(&url).head(url.clone()))
            .await?;
        match resp.status() {
            StatusCode::OK => Ok(
                header_str(resp.headers(), CONTENT_LENGTH.as_str()).and_then(|s| s.parse().ok())
            ),
            StatusCode::NOT_FOUND => Ok(None),
            _ => Err(Self::unexpected(&url, resp).await),
        }
    }

    /// Streams a blob, verified against `digest` and `size`. A body cut short is resumed with
    /// a `Range` request from the last byte received (up to the retry budget).
    pub async fn get_blob(
        &self,
        registry: &str,
        name: &Name,
        digest: &Digest,
        size: u64,
    ) -> Result<BlobReader, ClientError> {
        let url = self.url(registry, &format!("/v2/{name}/blobs/{digest}"))?;
        let scope = Scope::pull(registry, name);
        let resp = self
            .send(&scope, &url, &|| self.http_for(&url).get(url.clone()))
            .await?;
        if resp.status() != StatusCode::OK {
            return Err(Self::unexpected(&url, resp).await);
        }
        let stream = ResumingBody {
            client: self.clone(),
            registry: registry.to_owned(),
            name: name.clone(),
            url,
            offset: 0,
            resumes_left: self.retry.attempts.saturating_sub(1),
        }
        .into_stream(resp.bytes_stream().boxed());
        let reader: Pin<Box<dyn AsyncRead + Send>> =
            Box::pin(tokio_util::io::StreamReader::new(stream));
        Ok(VerifyingReader::new(reader, digest.clone(), size))
    }

    /// Streams a blob's bytes from byte `offset` on (a `Range: bytes=<offset>-` request when
    /// `offset > 0`), for callers that resume a partial download they keep on disk. Returns
    /// where the stream really starts: `offset` when the registry answered 206 for that range,
    /// 0 when it ignored the range and sent the whole blob (200). The bytes are NOT verified:
    /// the caller hashes what it already has plus these and checks size and digest. A body
    /// cut short is resumed like [`Client::get_blob`]'s.
    pub async fn get_blob_from(
        &self,
        registry: &str,
        name: &Name,
        digest: &Digest,
        offset: u64,
    ) -> Result<(u64, Pin<Box<dyn AsyncRead + Send>>), ClientError> {
        let url = self.url(registry, &format!("/v2/{name}/blobs/{digest}"))?;
        let range = format!("bytes={offset}-");
        let resp = self
            .send(&Scope::pull(registry, name), &url, &|| {
                let req = self.http_for(&url).get(url.clone());
                if offset > 0 {
                    req.header(RANGE, range.clone())
                } else {
                    req
                }
            })
            .await?;
        let start = match resp.status() {
            StatusCode::OK => 0,
            StatusCode::PARTIAL_CONTENT
                if offset > 0
                    && header_str(resp.headers(), CONTENT_RANGE.as_str())
                        .is_some_and(|v| v.starts_with(&format!("bytes {offset}-"))) =>
            {
                offset
            }
            _ => return Err(Self::unexpected(&url, resp).await),
        };
        let stream = ResumingBody {
            client: self.clone(),
            registry: registry.to_owned(),
            name: name.clone(),
            url,
            offset: start,
            resumes_left: self.retry.attempts.saturating_sub(1),
        }
        .into_stream(resp.bytes_stream().boxed());
        Ok((start, Box::pin(tokio_util::io::StreamReader::new(stream))))
    }

    /// Pushes a blob of `size` bytes read from `source`, unless the repository already has it.
    /// Blobs up to the chunk size go in one PUT; larger ones in chunked PATCHes, each retried
    /// from the offset the registry reports.
    pub async fn push_blob<R: AsyncRead + Unpin + Send>(
        &self,
        registry: &str,
        name: &Name,
        digest: &Digest,
        size: u64,
        mut source: R,
    ) -> Result<PushOutcome, ClientError> {
        if self
            .blob_exists_in(&Scope::push(registry, name), digest)
            .await?
            .is_some()
        {
            return Ok(PushOutcome::Skipped);
        }
        let src_err = |source: io::Error| ClientError::Source {
            digest: digest.clone(),
            source,
        };
        let mut digester = digest.algorithm().digester();
        let mut location = self.start_upload(registry, name).await?;
        let mut sent: u64 = 0;
        let mut buf = BytesMut::new();
        loop {
            buf.clear();
            let want = self.chunk_size.min(size - sent);
            buf.reserve(usize::try_from(want).unwrap_or(usize::MAX));
            let mut limited = (&mut source).take(want);
            let mut n: u64 = 0;
            while n < want {
                let r = limited.read_buf(&mut buf).await.map_err(src_err)?;
                if r == 0 {
                    break;
                }
                n += r as u64;
            }
            if n < want {
                return Err(src_err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    format!("the source ended after {} of {size} bytes", sent + n),
                )));
            }
            digester.update(&buf);
            let chunk = buf.split().freeze();
            let last = sent + n == size;
            if last && sent == 0 {
                // Small blob: one PUT carries everything.
                self.finish_upload(registry, name, &location, digest, chunk)
                    .await?;
                break;
            }
            if !chunk.is_empty() {
                location = self
                    .patch_chunk(registry, name, &location, sent, chunk)
                    .await?;
                sent += n;
            }
            if last || n == 0 {
                self.finish_upload(registry, name, &location, digest, Bytes::new())
                    .await?;
                break;
            }
        }
        // The source must end where promised and hash to the digest.
        let mut probe = [0u8; 1];
        if source.read(&mut probe).await.map_err(src_err)? != 0 {
            return Err(src_err(io::Error::other(format!(
                "the source is longer than {size} bytes"
            ))));
        }
        let found = digester.finish();
        if &found != digest {
            return Err(ClientError::Verify {
                url: format!("{}/v2/{name}/blobs/{digest}", self.base(registry)),
                source: VerifyError::DigestMismatch {
                    expected: digest.clone(),
                    found,
                },
            });
        }
        Ok(PushOutcome::Uploaded)
    }

    pub(crate) async fn start_upload(
        &self,
        registry: &str,
        name: &Name,
    ) -> Result<Url, ClientError> {
        let url = self.url(registry, &format!("/v2/{name}/blobs/uploads/"))?;
        let resp = self
            .send(&Scope::push(registry, name), &url, &|| {
                self.http_for(&url)
                    .post(url.clone())
                    .header(CONTENT_LENGTH, 0)
            })
            .await?;
        if resp.status() != StatusCode::ACCEPTED {
            return Err(Self::unexpected(&url, resp).await);
        }
        location(&url, &resp)
    }

    /// PATCHes one chunk at `start`; on a transient failure asks the registry where the upload
    /// stands and resends what it lacks.
    pub(crate) async fn patch_chunk(
        &self,
        registry: &str,
        name: &Name,
        loc: &Url,
        start: u64,
        chunk: Bytes,
    ) -> Result<Url, ClientError> {
        let scope = Scope::push(registry, name);
        let end = start + chunk.len() as u64 - 1;
        let mut last = String::new();
        for attempt in 1..=self.retry.attempts {
            if attempt > 1 {
                tokio::time::sleep(self.retry.delay(attempt - 1)).await;
                // Where does the upload stand?
                let st = self
                    .attempt(&scope, loc, &|| self.http_for(loc).get(loc.clone()))
                    .await?;
                if let Ok(resp) = st
                    && resp.status() == StatusCode::NO_CONTENT
                    && let Some(have) =
                        header_str(resp.headers(), RANGE.as_str()).and_then(range_end)
                    && have > end
                {
                    return location(loc, &resp);
                }
            }
            let req = || {
                self.http_for(loc)
                    .request(Method::PATCH, loc.clone())
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .header(CONTENT_RANGE, format!("{start}-{end}"))
                    .header(CONTENT_LENGTH, chunk.len())
                    .body(chunk.clone())
            };
            match self.attempt(&scope, loc, &req).await? {
                Ok(resp) if resp.status() == StatusCode::ACCEPTED => return location(loc, &resp),
                Ok(resp)
                    if resp.status().is_server_error()
                        || resp.status() == StatusCode::TOO_MANY_REQUESTS =>
                {
                    last = crate::session::transient_answer(resp).await;
                }
                Ok(resp) => return Err(Self::unexpected(loc, resp).await),
                Err(e) => last = error_chain(&e),
            }
        }
        Err(ClientError::Transient {
            url: loc.to_string(),
            attempts: self.retry.attempts,
            last,
        })
    }

    /// Closes an upload with its digest (and maybe the whole body).
    pub(crate) async fn finish_upload(
        &self,
        registry: &str,
        name: &Name,
        loc: &Url,
        digest: &Digest,
        body: Bytes,
    ) -> Result<(), ClientError> {
        let mut url = loc.clone();
        url.query_pairs_mut().append_pair("digest", digest.as_str());
        let scope = Scope::push(registry, name);
        let result = self
            .send(&scope, &url, &|| {
                self.http_for(&url)
                    .put(url.clone())
                    .header(CONTENT_TYPE, "application/octet-stream")
                    .header(CONTENT_LENGTH, body.len())
                    .body(body.clone())
            })
            .await;
        match result {
            Ok(resp) if resp.status() == StatusCode::CREATED => Ok(()),
            // A retried PUT may find its upload already committed by the first attempt.
            Ok(resp) if resp.status() == StatusCode::NOT_FOUND => {
                if self.blob_exists_in(&scope, digest).await?.is_some() {
                    Ok(())
                } else {
                    Err(Self::unexpected(&url, resp).await)
                }
            }
            Ok(resp) => Err(Self::unexpected(&url, resp).await),
            Err(e) => Err(e),
        }
    }
}

/// The last byte of a `Range: 0-<last>` upload header.
pub(crate) fn range_end(v: &str) -> Option<u64> {
    let (_, end) = v.split_once('-')?;
    end.trim().parse().ok()
}

/// A blob body that resumes with `Range` after a transport error.
pub(crate) struct ResumingBody {
    client: Client,
    registry: String,
    name: Name,
    url: Url,
    offset: u64,
    resumes_left: u32,
}

pub(crate) type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<Bytes>> + Send>>;

impl ResumingBody {
    pub(crate) fn into_stream(
        self,
        first: ByteStream,
    ) -> impl Stream<Item = io::Result<Bytes>> + Send {
        futures_util::stream::unfold(
            (self, Some(first), false),
            |(mut st, mut body, done)| async move {
                if done {
                    return None;
                }
                loop {
                    if let Some(b) = body.as_mut() {
                        match b.next().await {
                            Some(Ok(bytes)) => {
                                st.offset += bytes.len() as u64;
                                return Some((Ok(bytes), (st, body, false)));
                            }
                            None => return None,
                            Some(Err(e)) => {
                                if st.resumes_left == 0 {
                                    let err = io::Error::other(format!(
                                        "{}: body cut at byte {}: {}",
                                        st.url,
                                        st.offset,
                                        error_chain(&e)
                                    ));
                                    return Some((Err(err), (st, None, true)));
                                }
                                tracing::debug!(url = %st.url, offset = st.offset, "blob body cut, resuming");
                                st.resumes_left -= 1;
                            }
                        }
                    }
                    let attempt = st.client.retry.attempts - st.resumes_left;
                    tokio::time::sleep(st.client.retry.delay(attempt)).await;
                    let range = format!("bytes={}-", st.offset);
                    let url = st.url.clone();
                    let http = st.client.http_for(&url).clone();
                    let scope = Scope::pull(&st.registry, &st.name);
                    let resp = st
                        .client
                        .send(&scope, &url, &|| {
                            http.get(url.clone()).header(RANGE, range.clone())
                        })
                        .await;
                    match resp {
                        Ok(r)
                            if r.status() == StatusCode::PARTIAL_CONTENT
                                && header_str(r.headers(), CONTENT_RANGE.as_str()).is_some_and(
                                    |v| v.starts_with(&format!("bytes {}-", st.offset)),
                                ) =>
                        {
                            body = Some(r.bytes_stream().boxed());
                        }
                        Ok(r) => {
                            let err = io::Error::other(format!(
                                "{}: resuming at byte {} got status {} without the range",
                                st.url,
                                st.offset,
                                r.status()
                            ));
                            return Some((Err(err), (st, None, true)));
                        }
                        Err(e) => {
                            let err = io::Error::other(e.to_string());
                            return Some((Err(err), (st, None, true)));
                        }
                    }
                }
            },
        )
    }
}
