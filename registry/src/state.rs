//! Shared state of every request ([`AppState`]): the repositories over the instrumented store,
//! the registry's configuration, its metrics and the rate limiter. Handlers, access control
//! and middleware read it; it knows nothing of routes.

use std::sync::Arc;

use crate::config::RegistryConfig;
use crate::errors::ApiError;
use crate::events::Notifier;
use crate::metrics::Metrics;
use crate::ratelimit::Limiter;
use crate::repo::Repos;
use crate::storage::{Instrumented, Store};

/// Shared state of every request: the store and the configuration. Cheap to clone.
#[derive(Debug, Clone)]
pub struct AppState(Arc<App>);

/// What [`AppState`] holds.
#[derive(Debug)]
pub(crate) struct App {
    pub repos: Repos,
    pub config: RegistryConfig,
    pub metrics: Arc<Metrics>,
    /// The per-client rate limiter, when `[rate_limit]` is set.
    pub limiter: Option<Limiter>,
    /// Pull times not yet written to the store (retention's `keep_pulled_within`).
    pub pulls: crate::governance::retention::PullRecorder,
    /// Event outbox and delivery (`[notifications]`).
    pub events: Arc<Notifier>,
    /// The pull-through cache, when `[[proxy]]` rules are set.
    pub proxy: Option<Arc<crate::proxy::Proxy>>,
    /// The web UI's repository-list rows ([`crate::ui::rows::RowCache`]).
    pub ui_rows: crate::ui::rows::RowCache,
}

impl AppState {
    /// State over `store` (wrapped in [`Instrumented`]) with `config`.
    pub fn new(store: Arc<dyn Store>, config: RegistryConfig) -> AppState {
        let metrics = Arc::new(Metrics::default());
        // The features' metrics, declared from the first scrape on (rendered in this order).
        metrics.source::<crate::gc::GcMetrics>();
        metrics.source::<crate::governance::quota::QuotaMetrics>();
        metrics.source::<crate::governance::retention::RetentionMetrics>();
        metrics.source::<crate::scrub::ScrubMetrics>();
        metrics.source::<crate::mirror::SyncMetrics>();
        let store: Arc<dyn Store> = Arc::new(Instrumented::new(store, metrics.clone()));
        let events = Arc::new(Notifier::new(
            config.notifications.clone(),
            store.clone(),
            metrics.clone(),
            config.notifications.source_addr.clone(),
        ));
        AppState(Arc::new(App {
            repos: crate::features::with_hooks(Repos::new(store)),
            events,
            limiter: config.rate_limit.map(Limiter::new),
            pulls: Default::default(),
            proxy: crate::proxy::Proxy::new(config.proxy.clone()),
            ui_rows: Default::default(),
            config,
            metrics,
        }))
    }

    /// The registry's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
    }

    /// The event notifier (its delivery loop runs in `serve`; tests call
    /// [`Notifier::deliver_once`]).
    pub fn events(&self) -> &Arc<Notifier> {
        &self.0.events
    }

    pub(crate) fn app(&self) -> &App {
        &self.0
    }

    /// Runs one garbage collection over this registry's store and records it in the metrics.
    pub async fn collect_garbage(
        &self,
        opts: &crate::gc::GcOptions,
    ) -> Result<crate::gc::GcReport, crate::gc::GcError> {
        let r = crate::gc::collect(self.0.repos.store().clone(), opts).await;
        self.0
            .metrics
            .source::<crate::gc::GcMetrics>()
            .run(r.as_ref().ok());
        r
    }

    /// Runs one scrub over this registry's store and records it in the metrics.
    pub async fn scrub(
        &self,
        opts: &crate::scrub::ScrubOptions,
    ) -> Result<crate::scrub::ScrubReport, crate::scrub::ScrubError> {
        let r = crate::scrub::scrub(self.0.repos.store().clone(), opts).await;
        self.0
            .metrics
            .source::<crate::scrub::ScrubMetrics>()
            .run(r.as_ref().ok());
        if let Ok(report) = &r {
            self.record_scrub_findings(report).await;
        }
        r
    }

    /// `quarantine` events for what a scrub moved aside: one per repository linking a
    /// quarantined blob, one per withdrawn manifest link. A dry run's findings are not events.
    async fn record_scrub_findings(&self, report: &crate::scrub::ScrubReport) {
        use crate::events::{Action, Target};
        let events = &self.0.events;
        if !events.wants(Action::Quarantine) {
            return;
        }
        let mut findings: Vec<(Target, String)> = Vec::new();
        for b in report.corrupt_blobs.iter().filter(|b| b.quarantined) {
            let reason = format!(
                "blob bytes hash to {} instead of their digest; quarantined",
                b.found
            );
            for repo in &b.repositories {
                let target = Target {
                    media_type: Some("application/octet-stream".to_owned()),
                    digest: Some(b.digest.clone()),
                    size: Some(b.size),
                    length: Some(b.size),
                    repository: repo.clone(),
                    ..Target::default()
                };
                findings.push((target, reason.clone()));
            }
        }
        for m in report.withdrawn_manifests.iter().filter(|m| m.withdrawn) {
            let target = Target {
                digest: Some(m.digest.clone()),
                repository: m.repository.clone(),
                ..Target::default()
            };
            findings.push((target, format!("manifest withdrawn: {}", m.because)));
        }
        for (target, reason) in findings {
            let repository = target.repository.clone();
            if let Err(e) = events
                .record_finding(Action::Quarantine, target, reason)
                .await
            {
                tracing::warn!(repository, error = %e.detail, "cannot record a quarantine event");
            }
        }
    }

    /// Removes uploads untouched for `max_age`; returns how many objects went.
    pub async fn expire_uploads(&self, max_age: std::time::Duration) -> Result<usize, ApiError> {
        self.0.repos.expire_uploads(max_age).await
    }

    /// Writes the pull times this replica recorded to the store (see
    /// `crate::governance::retention`); returns how many repositories were written.
    pub async fn flush_pulls(&self) -> Result<usize, ApiError> {
        self.0.pulls.flush(&self.0.repos).await
    }

    /// Runs the `[[retention]]` policies: plans, and unless `dry_run` carries the plan out.
    /// This replica's recorded pull times are written first, so they count.
    pub async fn apply_retention(
        &self,
        dry_run: bool,
    ) -> Result<crate::governance::RetentionPlan, ApiError> {
        use crate::governance::retention;
        self.flush_pulls().await?;
        let plan = retention::plan(&self.0.repos, &self.0.config.governance).await?;
        let r = if dry_run {
            Ok(plan)
        } else {
            retention::apply(&self.0.repos, plan).await
        };
        self.0
            .metrics
            .source::<retention::RetentionMetrics>()
            .run(r.as_ref().ok());
        r
    }
}
