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
    let mut req = n
        .client
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
