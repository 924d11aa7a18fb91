//! Events: push, mount, delete and (when an endpoint asks) pull notifications as webhooks in
//! CNCF distribution's notification envelope (`{"events":[…]}`, media type
//! [`ENVELOPE_MEDIA_TYPE`]), so receivers written for distribution work unchanged.
//!
//! - [`Notifier::record`] runs inside the request: for every endpoint whose filters
//!   ([`Endpoint::wants`]) pass, it writes one outbox entry
//!   `_rd/events/<endpoint>/<created ms>-<event id>` (create-only) *before* the handler answers.
//!   If the write fails the request fails, so an acknowledged request always has its events
//!   in the store, where every replica can see them.
//! - [`Notifier::deliver_once`] (run every `notifications.poll_interval` on every replica by
//!   [`crate::serve`]) lists each endpoint's outbox, claims an entry with a conditional replace
//!   of its document (the claim names the replica and lasts `notifications.lease`; only one
//!   replica's replace wins), POSTs it (trusting the endpoint's `ca_files`, see
//!   [`Endpoint::http_client`]), deletes it on a 2xx answer, and otherwise records the
//!   attempt and the next try (exponential backoff). An entry older than the endpoint's
//!   `max_age` is given up and counted as dead. A replica that dies holding a claim delays the
//!   entry by at most the lease; another replica then delivers it.
//!
//! The contract is at least once: a replica that dies after the receiver answered but before
//! the delete, or a claim that runs out during a slow POST, sends an event again. Every event
//! carries a unique `id` for receivers to drop repeats.

mod config;
mod outbox;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

pub(crate) use config::FileNotifications;
pub use config::{Action, Endpoint, IpRange, NotificationsConfig};
pub use outbox::{DeliveryReport, IN_PROCESS, InProcess};

use crate::errors::ApiResult;
use crate::metrics::Metrics;
use crate::storage::Store;

/// The `Content-Type` of a POSTed envelope: distribution 3's (its targets are OCI descriptors).
pub const ENVELOPE_MEDIA_TYPE: &str = "application/vnd.docker.distribution.events.v2+json";

/// One event, as distribution writes it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Event {
    /// Unique per event: receivers drop repeats by it.
    pub id: String,
    /// When it happened (RFC 3339, UTC).
    pub timestamp: String,
    /// `push`, `mount`, `delete` or `pull` (distribution's), `refuse` or `quarantine` (ours).
    pub action: String,
    /// What it happened to.
    pub target: Target,
    /// The request that caused it.
    pub request: RequestInfo,
    /// Who made the request.
    pub actor: Actor,
    /// The registry replica that recorded it.
    pub source: Source,
    /// Why, for `refuse` (the refusal's message, naming the rule) and `quarantine` (what the
    /// scrub found). Not in distribution's envelope; absent on its actions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// The subject of an [`Event`]: a manifest or blob descriptor with its repository, or a tag.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Target {
    /// Media type of the manifest (`application/octet-stream` for blobs).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub media_type: Option<String>,
    /// The content's digest (absent for tag deletes).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub digest: Option<String>,
    /// Size in bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    /// The same as `size`, for receivers written for distribution 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub length: Option<u64>,
    /// The repository.
    pub repository: String,
    /// For a cross-repository mount: the repository the blob was mounted from.
    #[serde(
        rename = "fromRepository",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub from_repository: Option<String>,
    /// Where to fetch it (from the request's `Host`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub url: Option<String>,
    /// The tag, when the request named one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tag: Option<String>,
}

/// The request part of an [`Event`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RequestInfo {
    /// A per-request id.
    pub id: String,
    /// The client's address (`ip:port` of the connection, or, when the connection comes from
    /// a configured trusted proxy, the rightmost `X-Forwarded-For` entry that is not one).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub addr: Option<String>,
    /// The `Host` the client used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host: Option<String>,
    /// The HTTP method.
    pub method: String,
    /// The client's `User-Agent`.
    pub useragent: String,
}

/// Who made the request (empty when anonymous).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Actor {
    /// The authenticated user or token subject.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// The replica that recorded an [`Event`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Source {
    /// The address it listens on.
    pub addr: String,
    /// Unique per process.
    #[serde(rename = "instanceID")]
    pub instance_id: String,
}

/// Records events into the outbox and delivers them. One per [`crate::AppState`].
#[derive(Debug)]
pub struct Notifier {
    config: NotificationsConfig,
    store: Arc<dyn Store>,
    metrics: Arc<Metrics>,
    source: Source,
    client: reqwest::Client,
    /// The clients of endpoints with their own CA files or `insecure`, by endpoint name;
    /// an Err (a CA file gone since the configuration was checked) fails each delivery with
    /// its reason.
    own_clients: BTreeMap<String, Result<reqwest::Client, String>>,
    /// Where [`IN_PROCESS`] endpoints' events go (set once by `serve`).
    in_process: std::sync::OnceLock<Arc<dyn InProcess>>,
}

/// Milliseconds since the epoch.
pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(0)
}

impl Notifier {
    /// A notifier over `store` (the instrumented one), identified as `source_addr`.
    pub(crate) fn new(
        config: NotificationsConfig,
        store: Arc<dyn Store>,
        metrics: Arc<Metrics>,
        source_addr: String,
    ) -> Notifier {
        let own_clients = config
            .endpoints
            .iter()
            .filter(|e| e.own_tls())
            .map(|e| {
                let client = e.http_client().map_err(|err| validator::error_chain(&err));
                (e.name.clone(), client)
            })
            .collect();
        Notifier {
            own_clients,
            config,
            store,
            metrics,
            source: Source {
                addr: source_addr,
                instance_id: uuid::Uuid::new_v4().to_string(),
            },
            // The workspace's one HTTP setup (rustls, connect and read timeouts); each
            // delivery also has its endpoint's own timeout. Without CA files this fails only
            // where reqwest::Client::new() would panic too.
            client: registry_client::ClientBuilder::default()
                .http_client()
                .expect("an HTTP client without CA files builds"),
            in_process: std::sync::OnceLock::new(),
        }
    }

    /// The HTTP client that reaches `endpoint`: its own when it has CA files or `insecure`,
    /// else the shared one.
    pub(crate) fn client_for(&self, endpoint: &Endpoint) -> Result<&reqwest::Client, &str> {
        match self.own_clients.get(&endpoint.name) {
            None => Ok(&self.client),
            Some(own) => own.as_ref().map_err(String::as_str),
        }
    }

    /// Sets where [`IN_PROCESS`] endpoints' events go; only the first call counts.
    pub fn set_in_process(&self, sink: Arc<dyn InProcess>) {
        let _ = self.in_process.set(sink);
    }

    pub(crate) fn in_process(&self) -> Option<&Arc<dyn InProcess>> {
        self.in_process.get()
    }

    /// The configuration.
    pub fn config(&self) -> &NotificationsConfig {
        &self.config
    }

    /// Whether any endpoint takes `action` at all (a cheap test before building an event).
    pub fn wants(&self, action: Action) -> bool {
        self.config
            .endpoints
            .iter()
            .any(|e| e.actions.contains(&action))
    }

    /// Writes `target`'s event into the outbox of every endpoint that wants it; returns when
    /// all are in the store. Nothing happens when no endpoint wants it.
    pub(crate) async fn record(
        &self,
        action: Action,
        target: Target,
        request: &RequestInfo,
        actor: Option<&str>,
        reason: Option<String>,
    ) -> ApiResult<()> {
        let endpoints: Vec<&Endpoint> = self
            .config
            .endpoints
            .iter()
            .filter(|e| e.wants(action, &target.repository, target.media_type.as_deref()))
            .collect();
        if endpoints.is_empty() {
            return Ok(());
        }
        let created = now_ms();
        let event = Event {
            id: uuid::Uuid::new_v4().to_string(),
            timestamp: validator::rfc3339(created / 1000),
            action: action.as_str().to_owned(),
            target,
            request: request.clone(),
            actor: Actor {
                name: actor.map(str::to_owned),
            },
            source: self.source.clone(),
            reason,
        };
        let writes = endpoints
            .iter()
            .map(|e| outbox::write(self.store.as_ref(), &e.name, created, &event));
        futures_util::future::try_join_all(writes).await?;
        for e in endpoints {
            self.metrics.event_recorded(&e.name);
        }
        Ok(())
    }

    /// Records an event no request caused (a scrub's findings): its `request` carries only
    /// an id, it has no actor, and `reason` says what was found.
    pub(crate) async fn record_finding(
        &self,
        action: Action,
        target: Target,
        reason: String,
    ) -> ApiResult<()> {
        let request = RequestInfo {
            id: uuid::Uuid::new_v4().to_string(),
            ..RequestInfo::default()
        };
        self.record(action, target, &request, None, Some(reason))
            .await
    }

    /// One delivery pass over every endpoint's outbox (endpoints in parallel).
    pub async fn deliver_once(&self) -> DeliveryReport {
        let passes = self.config.endpoints.iter().map(|e| outbox::pass(self, e));
        let mut total = DeliveryReport::default();
        for r in futures_util::future::join_all(passes).await {
            total.add(&r);
        }
        total
    }

    /// Delivers forever, one pass every `poll_interval`.
    pub async fn deliver_forever(self: Arc<Self>) {
        loop {
            self.deliver_once().await;
            tokio::time::sleep(self.config.poll_interval).await;
        }
    }
}
