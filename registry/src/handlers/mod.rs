//! One module per API area, one function per operation. Handlers only speak HTTP: they parse
//! the request, call [`crate::repo::Repos`], and build the response.

pub(crate) mod base;
pub(crate) mod blobs;
pub(crate) mod catalog;
pub(crate) mod manifests;
pub(crate) mod packages;
pub(crate) mod probes;
pub(crate) mod referrers;
pub(crate) mod sync;
pub(crate) mod tags;
pub(crate) mod uploads;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue};
use validator::Digest;

use crate::errors::{ApiError, ApiResult, Code};
use crate::state::AppState;
use validator::Name;

/// A request after routing: the checked repository name, query pairs, headers and body.
pub(crate) struct Req {
    pub state: AppState,
    pub name: Option<Name>,
    pub query: Vec<(String, String)>,
    pub headers: HeaderMap,
    pub body: Body,
    pub head: bool,
    /// The caller, when access control is on.
    pub access: Option<crate::auth::Access>,
    /// The connection's remote address (None in-process, without the accept loop).
    pub peer: Option<std::net::SocketAddr>,
}

impl Req {
    pub fn name(&self) -> &Name {
        self.name.as_ref().expect("routes with a name carry one")
    }

    /// The first value of a query parameter.
    pub fn param(&self, key: &str) -> Option<&str> {
        self.query
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.as_str())
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    pub fn content_length(&self) -> ApiResult<Option<u64>> {
        match self.header("content-length") {
            None => Ok(None),
            Some(v) => {
                v.trim().parse().map(Some).map_err(|_| {
                    ApiError::new(Code::SizeInvalid, format!("bad Content-Length {v:?}"))
                })
            }
        }
    }

    /// The request part of an event this request causes.
    pub fn event_request(&self, method: &str) -> crate::events::RequestInfo {
        crate::events::RequestInfo {
            id: uuid::Uuid::new_v4().to_string(),
            addr: self.client_addr(),
            host: self.header("host").map(str::to_owned),
            method: method.to_owned(),
            useragent: self.header("user-agent").unwrap_or_default().to_owned(),
        }
    }

    /// The client's address for events: the connection's, or, when the connection comes from
    /// one of `notifications.trusted_proxies`, the address [`forwarded_client`] finds in
    /// `X-Forwarded-For` (read right to left past the trusted proxies).
    pub fn client_addr(&self) -> Option<String> {
        let peer = self.peer?;
        let trusted = &self.state.app().config.notifications.trusted_proxies;
        if trusted.iter().any(|r| r.contains(peer.ip()))
            && let Some(client) = self
                .header("x-forwarded-for")
                .and_then(|v| forwarded_client(v, trusted))
        {
            return Some(client.to_owned());
        }
        Some(peer.to_string())
    }

    /// Records an event of this request in the outbox (a no-op when no endpoint wants it);
    /// awaited before the response is built, so an acknowledged request has its event stored.
    pub fn notify(
        &self,
        action: crate::events::Action,
        method: &str,
        target: crate::events::Target,
    ) -> impl std::future::Future<Output = ApiResult<()>> + Send + 'static {
        self.event(action, method).send(target)
    }

    /// An event of this request, to send once its target is known. It borrows nothing from
    /// the request (whose body is not `Sync`), so it can be held across awaits.
    pub fn event(&self, action: crate::events::Action, method: &str) -> PendingEvent {
        let events = self.state.app().events.clone();
        // Nothing is built when no endpoint takes the action (the common case, on every GET).
        let request = events.wants(action).then(|| {
            let actor = self
                .access
                .as_ref()
                .and_then(|a| a.user())
                .map(str::to_owned);
            (self.event_request(method), actor)
        });
        PendingEvent {
            events,
            action,
            request,
        }
    }

    /// The `url` of an event target: this registry as the client reached it.
    pub fn target_url(&self, path: &str) -> Option<String> {
        let scheme = if self.state.app().config.https {
            "https"
        } else {
            "http"
        };
        self.header("host").map(|h| format!("{scheme}://{h}{path}"))
    }

    pub fn deletes_allowed(&self) -> ApiResult<()> {
        if self.state.app().config.delete_enabled {
            Ok(())
        } else {
            Err(ApiError::new(
                Code::Unsupported,
                "deletes are disabled on this registry",
            ))
        }
    }
}

/// An event a request will record: see [`Req::event`].
pub(crate) struct PendingEvent {
    events: std::sync::Arc<crate::events::Notifier>,
    action: crate::events::Action,
    /// The request and the actor; None when no endpoint takes the action.
    request: Option<(crate::events::RequestInfo, Option<String>)>,
}

impl PendingEvent {
    /// Whether any endpoint takes this action (else [`PendingEvent::send`] does nothing).
    pub fn wanted(&self) -> bool {
        self.request.is_some()
    }

    /// Writes the event into the outbox of every endpoint that wants it.
    pub async fn send(self, target: crate::events::Target) -> ApiResult<()> {
        self.send_with_reason(target, None).await
    }

    /// Records this (`refuse`) event for `refusal`, a governance rule's `DENIED`, whose
    /// detail becomes the event's `reason`. A failure to store it is logged, not returned: the
    /// client must still learn why it was refused.
    pub async fn refusal(
        self,
        refusal: &ApiError,
        name: &Name,
        tag: Option<&str>,
        digest: Option<&Digest>,
    ) {
        if !self.wanted() {
            return;
        }
        let target = crate::events::Target {
            repository: name.to_string(),
            tag: tag.map(str::to_owned),
            digest: digest.map(Digest::to_string),
            ..crate::events::Target::default()
        };
        if let Err(e) = self
            .send_with_reason(target, Some(refusal.detail.clone()))
            .await
        {
            tracing::warn!(repository = %name, error = %e.detail, "cannot record a refuse event");
        }
    }

    /// [`PendingEvent::send`] with the event's `reason` (refusals, scrub findings).
    pub async fn send_with_reason(
        self,
        target: crate::events::Target,
        reason: Option<String>,
    ) -> ApiResult<()> {
        let Some((request, actor)) = &self.request else {
            return Ok(());
        };
        self.events
            .record(self.action, target, request, actor.as_deref(), reason)
            .await
    }
}

/// Parses a digest from the request; `DIGEST_INVALID` (400) otherwise.
pub(crate) fn parse_digest(s: &str) -> ApiResult<Digest> {
    Digest::parse(s).map_err(|e| ApiError::new(Code::DigestInvalid, e.to_string()))
}

/// A header value from a string we built (digits, digests, checked names).
pub(crate) fn hv(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).expect("header values are built from checked input")
}

/// Parses `n` and `last` for paginated lists; `n` absent means everything.
pub(crate) fn pagination(req: &Req) -> ApiResult<(Option<usize>, Option<String>)> {
    let n = match req.param("n") {
        None | Some("") => None,
        Some(v) => Some(v.parse::<usize>().map_err(|_| {
            ApiError::new(
                Code::PaginationNumberInvalid,
                format!("bad page size n={v:?}"),
            )
        })?),
    };
    Ok((n, req.param("last").map(str::to_owned)))
}

/// Takes one page after `last` from a sorted list; true when more remain.
pub(crate) fn page(all: Vec<String>, n: Option<usize>, last: Option<&str>) -> (Vec<String>, bool) {
    let start = match last {
        Some(l) => all.partition_point(|x| x.as_str() <= l),
        None => 0,
    };
    crate::repo::take_page(all[start..].iter(), n)
}

/// The client an `X-Forwarded-For` value names, for a request that came from a trusted proxy.
/// Each proxy appends the address it got the request from, so only the right end is
/// trustworthy: read the entries right to left, skip those inside `trusted`, and take the first
/// one that is not (an entry that is not an IP address also stops the walk: nothing to its left
/// can be believed). When every entry is a trusted proxy, the leftmost one. `None` for a header
/// with no entries.
pub fn forwarded_client<'h>(
    header: &'h str,
    trusted: &[crate::events::IpRange],
) -> Option<&'h str> {
    let mut leftmost = None;
    for entry in header.rsplit(',').map(str::trim).filter(|e| !e.is_empty()) {
        match entry.parse::<std::net::IpAddr>() {
            Ok(ip) if trusted.iter().any(|r| r.contains(ip)) => leftmost = Some(entry),
            _ => return Some(entry),
        }
    }
    leftmost
}

#[cfg(test)]
mod tests {
    use super::{forwarded_client, page};
    use crate::events::IpRange;

    #[test]
    fn pages() {
        let all: Vec<String> = ["a", "b", "c", "d"].map(String::from).to_vec();
        assert_eq!(
            page(all.clone(), Some(2), None),
            (vec!["a".into(), "b".into()], true)
        );
        assert_eq!(
            page(all.clone(), Some(2), Some("b")),
            (vec!["c".into(), "d".into()], false)
        );
        assert_eq!(page(all.clone(), Some(0), None), (vec![], true));
        assert_eq!(
            page(all.clone(), None, Some("bb")),
            (vec!["c".into(), "d".into()], false)
        );
        assert_eq!(page(all, Some(9), Some("d")), (vec![], false));
    }

    #[test]
    fn forwarded_client_reads_right_to_left_past_trusted_proxies() {
        let trusted = [
            IpRange::parse("10.0.0.0/8").unwrap(),
            IpRange::parse("fd00::/8").unwrap(),
        ];
        // The client wrote the first entry itself; the trusted proxy appended the real one.
        assert_eq!(
            forwarded_client("198.51.100.66, 203.0.113.7, 10.1.1.1", &trusted),
            Some("203.0.113.7")
        );
        assert_eq!(
            forwarded_client("203.0.113.7,fd00::1 , 10.2.2.2", &trusted),
            Some("203.0.113.7")
        );
        // The nearest untrusted hop wins even when it is the last entry.
        assert_eq!(
            forwarded_client("198.51.100.66, 192.0.2.9", &trusted),
            Some("192.0.2.9")
        );
        // Garbage stops the walk: what is left of it cannot be believed.
        assert_eq!(
            forwarded_client("203.0.113.7, unknown, 10.1.1.1", &trusted),
            Some("unknown")
        );
        // Only proxies: the leftmost one; nothing at all: none.
        assert_eq!(
            forwarded_client("10.9.9.9, 10.1.1.1", &trusted),
            Some("10.9.9.9")
        );
        assert_eq!(forwarded_client(" , ", &trusted), None);
    }
}
