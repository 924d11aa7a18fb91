//! Blobs of proxied repositories: one fetch per digest however many requests ask, written
//! through the upload path (visible only once size and digest verified), streamed to the
//! request that started it one chunk behind, and continued at the next upstream when an
//! upstream's bytes fail verification.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::http::header;
use axum::response::Response;
use bytes::Bytes;
use futures_util::StreamExt as _;
use validator::{Digest, Name, error_chain};

use super::{Proxy, Routed};
use crate::errors::{ApiError, ApiResult, Code};
use crate::repo::Repos;

/// How a blob fetch ended: `None` while it runs, then `Ok` or why it failed.
pub(super) type FetchEnd = Option<Result<(), String>>;

impl Proxy {
    /// For a proxied repository that lacks blob `d`: fetches it once. The request that starts
    /// the fetch (and asked for the whole blob with GET) gets a streaming response; every
    /// other request waits for the fetch and gets `None`, to be served from the store.
    pub(crate) async fn blob(
        self: &Arc<Self>,
        repos: &Repos,
        name: &Name,
        d: &Digest,
        stream_to_caller: bool,
    ) -> ApiResult<Option<Response>> {
        let Some((routed, remote)) = self.route(name) else {
            return Ok(None);
        };
        if routed.policy.is_some() && !self.is_admitted(name, d) {
            // `only_signed`: only the blobs of manifests admitted (or cached) here.
            let why = format!(
                "[[proxy]] {:?} only_signed: blob {d} is not part of an image admitted in {name} \
                 (request its manifest first; a signed image's blobs are fetched after it)",
                routed.rule.prefix
            );
            tracing::warn!(repository = %name, digest = %d, "only_signed: blob of no admitted image; not fetched");
            return Err(ApiError::new(Code::Denied, why).with_reason());
        }
        let routed = Arc::clone(routed);
        let (rx, leader) = {
            let mut inflight = self.inflight.lock().expect("proxy fetches");
            match inflight.get(d) {
                Some(rx) => (rx.clone(), None),
                None => {
                    let (tx, rx) = tokio::sync::watch::channel(None);
                    inflight.insert(d.clone(), rx.clone());
                    (rx, Some(tx))
                }
            }
        };
        let Some(done) = leader else {
            // Someone else fetches it: wait, then the store answers.
            return fetched(rx, name, d).await;
        };
        // This request fetches: the first upstream that has the blob streams it.
        let mut errors = Vec::new();
        let Some(first) = open_blob(&routed, 0, &remote, d, &mut errors).await else {
            let e = errors.join("; ");
            self.finish(d, &done, Err(e.clone()));
            return Err(unavailable(name, d, &e));
        };
        let size = first.size;
        let (tx, body_rx) = tokio::sync::mpsc::channel::<Result<Bytes, std::io::Error>>(4);
        let client = stream_to_caller.then_some(tx);
        let me = Arc::clone(self);
        let (repos, name2, d2) = (repos.clone(), name.clone(), d.clone());
        tokio::spawn(async move {
            let mut errors = errors;
            let mut next = Some(first);
            let mut client = client;
            let mut result = Err(String::new());
            while let Some(open) = next.take() {
                let index = open.index;
                match me
                    .store_blob(&repos, &name2, &d2, open, client.take())
                    .await
                {
                    Ok(()) => {
                        result = Ok(());
                        break;
                    }
                    Err(e) => {
                        // Bad bytes (or a failed transfer) from this upstream: the next one.
                        errors.push(e);
                        next = open_blob(&routed, index + 1, &remote, &d2, &mut errors).await;
                    }
                }
            }
            if result.is_err() {
                result = Err(errors.join("; "));
            }
            me.finish(&d2, &done, result);
        });
        if !stream_to_caller {
            return fetched(rx, name, d).await;
        }
        let stream = futures_util::stream::unfold(body_rx, |mut rx| async move {
            rx.recv().await.map(|item| (item, rx))
        });
        let r = Response::builder()
            .header(header::CONTENT_TYPE, "application/octet-stream")
            .header("docker-content-digest", d.as_str())
            .header(header::CONTENT_LENGTH, size)
            .body(Body::from_stream(stream))
            .map_err(ApiError::internal)?;
        Ok(Some(r))
    }

    fn finish(
        &self,
        d: &Digest,
        done: &tokio::sync::watch::Sender<FetchEnd>,
        r: Result<(), String>,
    ) {
        self.inflight.lock().expect("proxy fetches").remove(d);
        let _ = done.send(Some(r));
    }

    /// Writes an upstream's blob through an upload (verified on commit, then linked into the
    /// repository), passing each chunk on to `client` one chunk behind; the last chunk goes to
    /// the client only after the commit verified the digest, else the client's body fails.
    async fn store_blob(
        &self,
        repos: &Repos,
        name: &Name,
        d: &Digest,
        open: OpenBlob,
        client: Option<tokio::sync::mpsc::Sender<Result<Bytes, std::io::Error>>>,
    ) -> Result<(), String> {
        let held: Arc<Mutex<Option<Bytes>>> = Arc::new(Mutex::new(None));
        let upload = repos
            .start_upload(name, Some(d.algorithm()))
            .await
            .map_err(|e| format!("starting the upload of {d}: {}", e.detail))?;
        let (h, c) = (held.clone(), client.clone());
        let upstream = open.upstream.clone();
        let body = tokio_util::io::ReaderStream::new(open.reader).then(move |item| {
            let (h, c, upstream) = (h.clone(), c.clone(), upstream.clone());
            async move {
                let b = item.map_err(|e| format!("{upstream}: {}", error_chain(&e)))?;
                let prev = h.lock().expect("held chunk").replace(b.clone());
                if let (Some(prev), Some(c)) = (prev, &c) {
                    // A client that went away does not stop the cache fill.
                    let _ = c.send(Ok(prev)).await;
                }
                Ok::<Bytes, String>(b)
            }
        });
        let r = repos
            .finish_upload(name, upload, body, None, None, d)
            .await
            .map(|_| ())
            .map_err(|e| format!("{}: {}", open.upstream, e.detail));
        if let Some(c) = client {
            match &r {
                Ok(()) => {
                    let last = held.lock().expect("held chunk").take();
                    if let Some(last) = last {
                        let _ = c.send(Ok(last)).await;
                    }
                }
                Err(e) => {
                    let _ = c
                        .send(Err(std::io::Error::other(format!(
                            "the upstream's bytes for {d} did not verify: {e}"
                        ))))
                        .await;
                }
            }
        }
        match &r {
            Ok(()) => {
                tracing::info!(repository = %name, digest = %d, upstream = %open.upstream, "blob cached from upstream")
            }
            Err(e) => {
                tracing::warn!(repository = %name, digest = %d, error = %e, "blob from upstream refused; not cached")
            }
        }
        r
    }
}

/// An upstream's blob body, not yet verified (the upload verifies it).
struct OpenBlob {
    /// Which upstream of the rule (its index) and how it prints.
    index: usize,
    upstream: String,
    size: u64,
    reader: std::pin::Pin<Box<dyn tokio::io::AsyncRead + Send>>,
}

/// Opens blob `d` at the first upstream from `from` on that has it (its size from a HEAD, then
/// a GET that resumes a cut body); what each upstream that could not answered goes to
/// `errors` ("not found" included, so the final message names every upstream).
async fn open_blob(
    routed: &Routed,
    from: usize,
    remote: &str,
    d: &Digest,
    errors: &mut Vec<String>,
) -> Option<OpenBlob> {
    for (index, (u, client)) in routed.upstreams().enumerate().skip(from) {
        let client = match client {
            Ok(c) => c,
            Err(e) => {
                errors.push(e.clone());
                continue;
            }
        };
        let repo = match Name::parse(&u.repository(remote)) {
            Ok(n) => n,
            Err(e) => {
                errors.push(format!("{u}: {e}"));
                continue;
            }
        };
        let host = u.host();
        let size = match client.blob_exists(host.as_str(), &repo, d).await {
            Ok(Some(size)) => size,
            Ok(None) => {
                errors.push(format!("{u}: blob not found"));
                continue;
            }
            Err(e) => {
                errors.push(format!("{u}: {}", error_chain(&e)));
                continue;
            }
        };
        match client.get_blob_from(host.as_str(), &repo, d, 0).await {
            Ok((_, reader)) => {
                return Some(OpenBlob {
                    index,
                    upstream: u.to_string(),
                    size,
                    reader,
                });
            }
            Err(e) => errors.push(format!("{u}: {}", error_chain(&e))),
        }
    }
    None
}

fn unavailable(name: &Name, d: &Digest, why: &str) -> ApiError {
    let all_missing = why.split("; ").all(|e| e.ends_with(": blob not found"));
    let code = if all_missing {
        Code::BlobUnknown
    } else {
        Code::Unavailable
    };
    ApiError::new(
        code,
        format!("blob {d} is not in {name} and its upstreams could not supply it: {why}"),
    )
    .with_reason()
}

/// What a blob fetch led by another request (or handed to a task) ended with: `None` once the
/// store has the blob, so the caller answers from it.
async fn fetched(
    mut rx: tokio::sync::watch::Receiver<FetchEnd>,
    name: &Name,
    d: &Digest,
) -> ApiResult<Option<Response>> {
    let result = rx
        .wait_for(Option::is_some)
        .await
        .map_err(ApiError::internal)?
        .clone()
        .expect("waited for Some");
    match result {
        Ok(()) => Ok(None),
        Err(e) => Err(unavailable(name, d, &e)),
    }
}
