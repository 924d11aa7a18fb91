//! The outbox in the store: one document per (event, endpoint) under
//! `_rd/events/<endpoint>/`, claimed with a conditional replace, deleted once delivered.
//!
//! An endpoint is a webhook (its events are POSTed) or, when its URL starts with
//! [`IN_PROCESS`], a sink in this process ([`InProcess`]: replication on push,
//! [`crate::replicate`]) that gets the event with the same claim, retry and order.

use bytes::Bytes;
use serde::{Deserialize, Serialize};

use super::{ENVELOPE_MEDIA_TYPE, Endpoint, Event, Notifier, now_ms};
use crate::errors::ApiResult;
use crate::storage::{Etag, Key, PutMode, Store, StoreError, layout};

/// The URL scheme of an endpoint delivered in this process: `in-process:TARGET` hands its
/// events to the notifier's [`InProcess`] sink with `TARGET`.
pub const IN_PROCESS: &str = "in-process:";

/// Where the events of [`IN_PROCESS`] endpoints go: `Ok` settles the entry (deleted), `Err`
/// is a failed delivery (retried with the endpoint's backoff, the pass ends).
pub trait InProcess: Send + Sync + std::fmt::Debug {
    /// Handles one event for `target` (the endpoint URL after [`IN_PROCESS`]).
    fn deliver<'a>(
        &'a self,
        target: &'a str,
        event: &'a Event,
    ) -> futures_util::future::BoxFuture<'a, Result<(), String>>;
}

/// Largest outbox document read.
const ENTRY_LIMIT: u64 = 1 << 20;

/// An outbox document: the event and where its delivery stands.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct Entry {
    /// When the event was recorded (ms since the epoch).
    created_ms: u64,
    /// Failed deliveries so far.
    attempts: u32,
    /// No delivery before this time (ms).
    next_ms: u64,
    /// The replica delivering it now, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    claim: Option<Claim>,
    /// What went wrong last time.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    last_error: Option<String>,
    event: Event,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Claim {
    owner: String,
    until_ms: u64,
}

/// What one delivery pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct DeliveryReport {
    /// Entries in the outboxes when the pass began.
    pub pending: u64,
    /// Delivered and removed.
    pub delivered: u64,
    /// Delivery attempts that failed (retried later).
    pub failed: u64,
    /// Given up after the endpoint's `max_age`.
    pub dead: u64,
    /// Skipped: claimed by another replica, or waiting for a retry.
    pub skipped: u64,
}

impl DeliveryReport {
    pub(super) fn add(&mut self, o: &DeliveryReport) {
        self.pending += o.pending;
        self.delivered += o.delivered;
        self.failed += o.failed;
        self.dead += o.dead;
        self.skipped += o.skipped;
    }
}

fn encode(e: &Entry) -> Bytes {
    Bytes::from(serde_json::to_vec(e).expect("outbox entries serialize"))
}

/// Records `event` for `endpoint` (create-only; the id is fresh, so it never collides).
pub(super) async fn write(
    store: &dyn Store,
    endpoint: &str,
    created_ms: u64,
    event: &Event,
) -> ApiResult<()> {
    let entry = Entry {
        created_ms,
        attempts: 0,
        next_ms: 0,
        claim: None,
        last_error: None,
        event: event.clone(),
    };
    let key = layout::event_entry(endpoint, &format!("{created_ms:016}-{}", event.id));
    store.put(&key, encode(&entry), PutMode::Create).await?;
    Ok(())
}

/// One pass over `endpoint`'s outbox, oldest first. The first failed delivery ends the pass,
/// so a receiver that is down costs one timeout per poll, not one per waiting event.
pub(super) async fn pass(n: &Notifier, endpoint: &Endpoint) -> DeliveryReport {
    let mut report = DeliveryReport::default();
    let keys = match n.store.list(&layout::event_outbox(&endpoint.name)).await {
        Ok(k) => k,
        Err(e) if e.is_not_found() => Vec::new(),
        Err(e) => {
            tracing::warn!(endpoint = %endpoint.name, error = %validator::error_chain(&e), "cannot list the event outbox");
            return report;
        }
    };
    report.pending = keys.len() as u64;
    n.metrics.events_pending(&endpoint.name, report.pending);
    for key in keys {
        match deliver(n, endpoint, &key).await {
            Ok(Outcome::Delivered) => {
                report.delivered += 1;
                n.metrics.event_delivered(&endpoint.name);
            }
            Ok(Outcome::Skipped) => report.skipped += 1,
            Ok(Outcome::Dead) => {
                report.dead += 1;
                n.metrics.event_dead(&endpoint.name);
            }
            Ok(Outcome::Failed) => {
                report.failed += 1;
                n.metrics.event_failed(&endpoint.name);
                break;
            }
            Err(e) => {
                tracing::warn!(endpoint = %endpoint.name, key = %key, error = %e, "event outbox entry not handled");
                break;
            }
        }
    }
    n.metrics.events_pending(
        &endpoint.name,
        report.pending - report.delivered - report.dead,
    );
    report
}

enum Outcome {
    Delivered,
    Failed,
    Dead,
    Skipped,
}

/// Claims, sends and settles one entry.
async fn deliver(n: &Notifier, endpoint: &Endpoint, key: &Key) -> Result<Outcome, StoreError> {
    let doc = match n.store.get(key, ENTRY_LIMIT).await {
        Ok(d) => d,
        // Delivered by another replica since the listing.
        Err(e) if e.is_not_found() => return Ok(Outcome::Skipped),
        Err(e) => return Err(e),
    };
    let Ok(mut entry) = serde_json::from_slice::<Entry>(&doc.bytes) else {
        tracing::error!(endpoint = %endpoint.name, key = %key, "event outbox entry is not valid JSON; removed and counted as dead");
        delete(n.store.as_ref(), key).await?;
        return Ok(Outcome::Dead);
    };
    let now = now_ms();
    if entry.next_ms > now
        || entry
            .claim
            .as_ref()
            .is_some_and(|c| c.until_ms > now && c.owner != n.source.instance_id)
    {
        return Ok(Outcome::Skipped);
    }
    if now.saturating_sub(entry.created_ms) > endpoint.max_age.as_millis() as u64 {
        tracing::error!(
            endpoint = %endpoint.name,
            event = %entry.event.id,
            action = %entry.event.action,
            repository = %entry.event.target.repository,
            attempts = entry.attempts,
            last_error = entry.last_error.as_deref().unwrap_or(""),
            "event not delivered within the endpoint's max_age; given up"
        );
        delete(n.store.as_ref(), key).await?;
        return Ok(Outcome::Dead);
    }
    // The claim: only one replica's conditional replace of this version wins.
    entry.claim = Some(Claim {
        owner: n.source.instance_id.clone(),
        until_ms: now + n.config.lease.as_millis() as u64,
    });
    let etag = match claim(n.store.as_ref(), key, &entry, doc.etag).await? {
        Some(etag) => etag,
        None => return Ok(Outcome::Skipped),
    };
    match send(n, endpoint, &entry.event).await {
        Ok(()) => {
            delete(n.store.as_ref(), key).await?;
            tracing::debug!(endpoint = %endpoint.name, event = %entry.event.id, "event delivered");
            Ok(Outcome::Delivered)
        }
        Err(why) => {
            entry.attempts += 1;
            let wait = endpoint.retry_after(entry.attempts);
            tracing::warn!(
                endpoint = %endpoint.name,
                event = %entry.event.id,
                attempts = entry.attempts,
                retry_in = ?wait,
                error = %why,
                "event delivery failed"
            );
            entry.next_ms = now_ms() + wait.as_millis() as u64;
            entry.claim = None;
            entry.last_error = Some(why);
            match n
                .store
                .put(key, encode(&entry), PutMode::Replace(etag))
                .await
            {
                // Taken over meanwhile (the claim ran out): the new holder settles it.
                Ok(_) | Err(StoreError::PreconditionFailed { .. }) => Ok(Outcome::Failed),
                Err(e) if e.is_not_found() => Ok(Outcome::Failed),
                Err(e) => Err(e),
            }
        }
    }
}

/// Replaces the entry with its claimed version if it is still `etag`; None when another
/// replica changed or removed it first.
async fn claim(
    store: &dyn Store,
    key: &Key,
    entry: &Entry,
    etag: Etag,
) -> Result<Option<Etag>, StoreError> {
    match store.put(key, encode(entry), PutMode::Replace(etag)).await {
        Ok(etag) => Ok(Some(etag)),
        Err(StoreError::PreconditionFailed { .. }) => Ok(None),
        Err(e) if e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

async fn delete(store: &dyn Store, key: &Key) -> Result<(), StoreError> {
    match store.delete(key).await {
        Ok(()) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e),
    }
}

/// Delivers one event: to the in-process sink for an [`IN_PROCESS`] endpoint (within the
/// endpoint's timeout), else by [`post`].
async fn send(n: &Notifier, endpoint: &Endpoint, event: &Event) -> Result<(), String> {
    let Some(target) = endpoint.url.strip_prefix(IN_PROCESS) else {
        return post(n, endpoint, event).await;
    };
    let Some(sink) = n.in_process() else {
        return Err(format!(
            "{}: nothing in this process takes its events",
            endpoint.name
        ));
    };
    match tokio::time::timeout(endpoint.timeout, sink.deliver(target, event)).await {
        Ok(r) => r,
        Err(_) => Err(format!(
            "{}: not done within {:?}",
            endpoint.name, endpoint.timeout
        )),
    }
}

/// POSTs one event in an envelope; Err names what went wrong (status or transport error).
async fn post(n: &Notifier, endpoint: &Endpoint, event: &Event) -> Result<(), String> {
    let body = serde_json::to_vec_pretty(&serde_json::json!({ "events": [event] }))
        .map_err(|e| e.to_string())?;
    let client = n
        .client_for(endpoint)
        .map_err(|why| format!("POST {}: {why}", endpoint.url))?;
    let mut req = client
        .post(&endpoint.url)
        .timeout(endpoint.timeout)
        .header(reqwest::header::CONTENT_TYPE, ENVELOPE_MEDIA_TYPE)
        .body(body);
    for (k, v) in &endpoint.headers {
        req = req.header(k.as_str(), v.as_str());
    }
    match req.send().await {
        Ok(r) if r.status().is_success() => Ok(()),
        Ok(r) => Err(format!("{} answered {}", endpoint.url, r.status())),
        Err(e) => Err(format!(
            "POST {}: {}",
            endpoint.url,
            validator::error_chain(&e)
        )),
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::time::Duration;

    use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, IsCa, KeyPair};

    use super::super::{Action, Endpoint, NotificationsConfig, Notifier, RequestInfo, Target};
    use super::*;
    use crate::tls::{TlsConfig, TlsListener, TlsSettings};

    /// Writes `ca.pem` (a fresh CA) and `server.crt`/`server.key` (a certificate it issued
    /// for 127.0.0.1) into `dir`.
    fn private_ca(dir: &Path) {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca = CertifiedIssuer::self_signed(params, KeyPair::generate().unwrap()).unwrap();
        let key = KeyPair::generate().unwrap();
        let leaf = CertificateParams::new(vec!["127.0.0.1".to_owned()])
            .unwrap()
            .signed_by(&key, &ca)
            .unwrap();
        std::fs::write(dir.join("ca.pem"), ca.pem()).unwrap();
        std::fs::write(dir.join("server.crt"), leaf.pem()).unwrap();
        std::fs::write(dir.join("server.key"), key.serialize_pem()).unwrap();
    }

    /// An HTTPS webhook receiver with the certificate in `dir`, on the registry's own TLS
    /// listener; counts the events POSTed to it.
    async fn https_receiver(dir: &Path) -> (String, Arc<AtomicUsize>) {
        let tls = TlsConfig::load(TlsSettings {
            cert: dir.join("server.crt"),
            key: dir.join("server.key"),
            client_ca: None,
        })
        .unwrap();
        let tcp = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("https://{}/events", tcp.local_addr().unwrap());
        let received = Arc::new(AtomicUsize::new(0));
        let count = received.clone();
        let app = axum::Router::new().route(
            "/events",
            axum::routing::post(move |body: axum::body::Bytes| async move {
                let envelope: serde_json::Value = serde_json::from_slice(&body).unwrap();
                let events = envelope["events"].as_array().unwrap().len();
                count.fetch_add(events, Ordering::SeqCst);
            }),
        );
        let listener = TlsListener::new(tcp, tls).unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await });
        (url, received)
    }

    fn endpoint(name: &str, url: &str, ca_files: Vec<std::path::PathBuf>) -> Endpoint {
        Endpoint {
            name: name.to_owned(),
            url: url.to_owned(),
            headers: Vec::new(),
            timeout: Duration::from_secs(5),
            backoff: Duration::from_secs(60),
            max_backoff: Duration::from_secs(60),
            max_age: Duration::from_secs(3600),
            actions: vec![Action::Push],
            media_types: Vec::new(),
            repositories: Vec::new(),
            ca_files,
            insecure: false,
        }
    }

    /// The `last_error` of `endpoint`'s one outbox entry.
    async fn last_error(store: &dyn Store, endpoint: &str) -> String {
        let keys = store.list(&layout::event_outbox(endpoint)).await.unwrap();
        assert_eq!(keys.len(), 1, "{endpoint}: {keys:?}");
        let doc = store.get(&keys[0], ENTRY_LIMIT).await.unwrap();
        let entry: Entry = serde_json::from_slice(&doc.bytes).unwrap();
        entry.last_error.unwrap_or_default()
    }

    #[tokio::test]
    async fn an_https_endpoint_with_a_private_ca_needs_its_ca_file() {
        let dir = tempfile::tempdir().unwrap();
        private_ca(dir.path());
        let (url, received) = https_receiver(dir.path()).await;
        let mut insecure = endpoint("insecure", &url, Vec::new());
        insecure.insecure = true;
        let config = NotificationsConfig {
            endpoints: vec![
                endpoint("trusting", &url, vec![dir.path().join("ca.pem")]),
                endpoint("default", &url, Vec::new()),
                insecure,
            ],
            ..NotificationsConfig::default()
        };
        let data = tempfile::tempdir().unwrap();
        let store: Arc<dyn Store> = Arc::new(crate::storage::FsStore::open(data.path()).unwrap());
        let n = Notifier::new(config, store.clone(), Arc::default(), "test".to_owned());
        let target = Target {
            repository: "team/app".to_owned(),
            ..Target::default()
        };
        n.record(Action::Push, target, &RequestInfo::default(), None, None)
            .await
            .unwrap();

        let report = n.deliver_once().await;
        assert_eq!((report.delivered, report.failed), (2, 1), "{report:?}");
        assert_eq!(received.load(Ordering::SeqCst), 2);
        // The endpoint without the CA file keeps its event, failed on the certificate.
        let why = last_error(store.as_ref(), "default").await;
        assert!(why.contains(&url) && why.contains("certificate"), "{why}");
        for delivered in ["trusting", "insecure"] {
            let left = store.list(&layout::event_outbox(delivered)).await;
            assert!(left.is_err() || left.unwrap().is_empty(), "{delivered}");
        }
    }
}
