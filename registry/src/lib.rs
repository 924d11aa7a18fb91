//! The OCI Distribution v1.1 registry server behind `rdctl registry serve` and
//! `rdctl registry gc`. The client (builder push, worker pull, `rdctl copy`) is the
//! `registry-client` crate; this crate is the server only.
//!
//! Main types, from the bottom up:
//!
//! - [`storage::Store`]: the object-safe storage seam (`Arc<dyn Store>`), with
//!   [`storage::FsStore`] (the embedded default) and [`storage::S3Store`] (SeaweedFS and other
//!   S3 endpoints), both wrapped by [`storage::Instrumented`]; [`storage::layout`] is the only
//!   code that builds keys. Blobs are content-addressed and visible only after their size and
//!   digest were verified; tags, referrers and the catalog are small index documents replaced
//!   with conditional writes.
//! - Upload sessions (`upload`) keep their offset and hash state in the store, so they survive
//!   restarts and can be continued by another replica; `repo` holds the repository
//!   operations handlers call, `manifest_rules` the one manifest check, `tombstone` the
//!   garbage collector's mark that every hold honours.
//! - [`AppState`] (module [`state`]): what every request shares (repositories over the
//!   instrumented store, [`RegistryConfig`], [`metrics::Metrics`], the rate limiter).
//! - [`router()`] (module [`router`](mod@router)) declares every route in one function;
//!   `api` is the `/v2/` path grammar, `middleware` builds the middleware stack in one
//!   function, `handlers` has one module per API area and answers with the OCI error table in
//!   [`errors`]. [`auth`] is access control (its HTTP middleware is a route layer on `/v2/`),
//!   [`ratelimit`] the per-client limit.
//! - [`ServeConfig`] and [`GcSchedule`] (module [`config`]): the configuration (defaults, TOML
//!   file, environment) and the store it selects; [`serve`] (module [`server`]) runs the
//!   router with TLS ([`tls`]), upload expiry, the [`gc`] schedule and graceful, bounded
//!   shutdown, on the caller's runtime.
//! - [`pkgindex`]: the package index (`/v2/_rd/packages`): the packages of each image's SPDX
//!   SBOM referrer, recorded on push in one store document per repository, and
//!   [`pkgindex::reindex`] behind `rdctl registry reindex`.
//! - [`events`]: push, mount, delete and pull webhooks in distribution's envelope, written to
//!   an outbox in the store before the request is answered and delivered by every replica.
//! - [`scrub`]: re-hash every blob (rate-limited), check every manifest, quarantine corrupt
//!   blobs so they are never served (a re-push heals them); `rdctl registry scrub`, `[scrub]`.
//! - [`governance`]: `[[immutable]]` tags, `[[quota]]` limits (usage documents in the store,
//!   [`governance::quota::report`] behind `rdctl registry usage`) and `[[retention]]` policies
//!   ([`AppState::apply_retention`] behind `rdctl registry retention` and the gc schedule).
//! - [`proxy`]: pull-through caching (`[[proxy]]`): repositories under a prefix filled on
//!   demand from upstreams tried in order, every byte verified before it becomes visible, one
//!   upstream fetch per blob however many requests wait for it.
//! - [`mirror`]: scheduled sync (`[[sync]]`): the schedule, the lease `_rd/sync/lock` (one
//!   replica at a time, [`lease`], shared with [`gc`]'s kind of lease), the state in the store
//!   and `GET /v2/_rd/sync`; the copy itself is a [`mirror::SyncRunner`] the process injects
//!   ([`serve_with`]), so this crate needs no client.
//! - [`replicate`]: replication on push (`[[sync]]` with `to` and `on_push`): an outbox
//!   endpoint per entry whose events are delivered in the process
//!   ([`events::InProcess`]) to a [`replicate::Replicator`] the process injects.
//! - `ui`: the web pages at `/ui/` (`[ui] enabled`): repositories, tags, images and the
//!   package search as server-rendered HTML, showing only what the caller may pull.
//!
//! Module dependencies point one way. The core (`repo`, `upload`, [`storage`], [`lease`],
//! `tombstone`, `manifest_rules`, [`metrics`], [`errors`], [`duration`]) imports no feature;
//! features plug in through `repo::hooks` (`RepoHook` on delete, `TagVeto` on a tag move),
//! installed by `features`, and [`metrics::MetricSource`]. `state` knows no routes; `handlers`, `auth` and
//! `middleware` use `state` (and `api` for paths); only `router` uses the handlers and `ui`, and only
//! `server` uses `router`.
//!
//! Invariants: a blob key holds only bytes whose digest equals the key; nothing can be read
//! before commit; all registry state lives in the store (the rate limiter's buckets are a
//! limit, not state; the pull-through's revalidation times and in-flight fetches only decide
//! when to ask an upstream); with `[auth]`, no handler runs before the caller was authorised. It
//! depends only on `validator` among workspace crates.
#![deny(missing_docs)]

mod api;
pub mod auth;
pub mod config;
pub mod conn;
pub mod duration;
pub mod errors;
pub mod events;
mod features;
pub mod gc;
pub mod governance;
mod handlers;
pub mod lease;
mod manifest_rules;
pub mod metrics;
mod middleware;
pub mod mirror;
pub mod pkgindex;
pub mod proxy;
pub mod ratelimit;
pub mod replicate;
mod repo;
pub mod router;
pub mod scrub;
pub mod server;
pub mod state;
pub mod storage;
pub mod tls;
mod tombstone;
mod ui;
mod upload;

pub use config::{ConfigError, GcSchedule, RegistryConfig, ServeConfig};
pub use router::router;
pub use server::{Injected, ServeError, serve, serve_with};
pub use state::AppState;
