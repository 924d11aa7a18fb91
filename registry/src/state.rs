//! Shared state of every request ([`AppState`]): the repositories over the instrumented store,
//! the registry's configuration, its metrics and the rate limiter. Handlers, access control
//! and middleware read it; it knows nothing of routes.

use std::sync::Arc;

use crate::config::RegistryConfig;
use crate::errors::ApiError;
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
    /// The pull-through cache, when `[[proxy]]` rules are set.
    pub proxy: Option<Arc<crate::proxy::Proxy>>,
}

impl AppState {
    /// State over `store` (wrapped in [`Instrumented`]) with `config`.
    pub fn new(store: Arc<dyn Store>, config: RegistryConfig) -> AppState {
        let metrics = Arc::new(Metrics::default());
        let store: Arc<dyn Store> = Arc::new(Instrumented::new(store, metrics.clone()));
        AppState(Arc::new(App {
            repos: Repos::new(store),
            limiter: config.rate_limit.map(Limiter::new),
            proxy: crate::proxy::Proxy::new(config.proxy.clone()),
            config,
            metrics,
        }))
    }

    /// The registry's metrics.
    pub fn metrics(&self) -> &Metrics {
        &self.0.metrics
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
        self.0.metrics.gc_run(r.as_ref().ok());
        r
    }

    /// Removes uploads untouched for `max_age`; returns how many objects went.
    pub async fn expire_uploads(&self, max_age: std::time::Duration) -> Result<usize, ApiError> {
        self.0.repos.expire_uploads(max_age).await
    }
}
