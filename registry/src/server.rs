//! Serving the registry: [`serve`] opens the store the configuration selects, binds (plain
//! HTTP or TLS), runs upload expiry and the garbage collection schedule beside the router,
//! reloads TLS and htpasswd files on SIGHUP, and shuts down gracefully within a bounded time.
//! The configuration itself is [`crate::config`].

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use crate::auth::{Auth, AuthError};
use crate::config::{ConfigError, RegistryConfig, ScrubSchedule, ServeConfig};
use crate::gc::GcError;
use crate::router::router;
use crate::state::AppState;
use crate::storage::Store;
#[cfg(feature = "s3")]
use crate::storage::{BucketProblem, S3Store};
use crate::tls::{TlsConfig, TlsError, TlsListener};

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ServeError {
    /// The configuration, or the store it selects, is unusable (the message names the file,
    /// key or variable).
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// A file the `[auth]` table names (htpasswd, keys) cannot be used.
    #[error("cannot set up access control")]
    Auth(#[source] AuthError),
    /// The listen address could not be bound.
    #[error("cannot listen on {addr}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The cause.
        #[source]
        source: std::io::Error,
    },
    /// A TLS file is missing or unusable (the message names it).
    #[error(transparent)]
    Tls(#[from] TlsError),
    /// Serving failed.
    #[error("the server failed")]
    Serve(#[source] std::io::Error),
    /// `[[sync]]` entries are configured but the process gave no way to copy, or they cannot
    /// work with this configuration.
    #[error("[[sync]] cannot run: {0}")]
    Sync(String),
}

/// Stops the start when the S3 endpoint says the bucket cannot be used; only warns when the
/// endpoint cannot be reached, since storage often starts after its clients.
#[cfg(feature = "s3")]
async fn check_bucket(s3: &S3Store, config: &ServeConfig) -> Result<(), ServeError> {
    let endpoint = config.s3_endpoint.as_deref().unwrap_or_default();
    match s3.check_bucket(Duration::from_secs(10)).await {
        Ok(()) => Ok(()),
        Err(BucketProblem::Refused(why)) => Err(ConfigError::S3Config {
            reason: format!("bucket {:?} at {endpoint}: {why}", s3.bucket()),
        }
        .into()),
        Err(BucketProblem::Unreachable(why)) => {
            tracing::warn!(bucket = s3.bucket(), endpoint, error = %why, "cannot check the S3 bucket; serving anyway");
            Ok(())
        }
    }
}

/// Reloads what can change without a restart each time SIGHUP arrives: the TLS certificate,
/// key and client CA, and the htpasswd users. A bad file is logged and the previous version
/// stays in use. Listening for it also keeps SIGHUP (`svcadm refresh`) from killing the
/// process, which is its default action. The handler is installed when this is called, not
/// when the returned future first runs, so a SIGHUP right after the `listening` log line
/// cannot arrive before it.
fn reload_on_sighup(
    tls: Option<TlsConfig>,
    auth: Option<Arc<Auth>>,
) -> impl Future<Output = ()> + Send + 'static {
    #[cfg(unix)]
    let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
    async move {
        #[cfg(unix)]
        {
            let mut hup = match hup {
                Ok(s) => s,
                Err(e) => {
                    tracing::warn!(error = %e, "cannot listen for SIGHUP; TLS and htpasswd files are not reloaded");
                    return;
                }
            };
            while hup.recv().await.is_some() {
                let users = auth.as_ref().and_then(|a| a.reload_users());
                if tls.is_none() && users.is_none() {
                    tracing::info!(
                        "SIGHUP received; nothing to reload (no [tls], no auth.htpasswd)"
                    );
                    continue;
                }
                if let Some(tls) = &tls {
                    let files = tls.settings();
                    match tls.reload() {
                        Ok(()) => tracing::info!(
                            cert = %files.cert.display(),
                            key = %files.key.display(),
                            "SIGHUP received; TLS certificate reloaded, new connections use it"
                        ),
                        Err(e) => tracing::error!(
                            error = %validator::error_chain(&e),
                            "SIGHUP received; TLS reload failed, still serving the previous certificate"
                        ),
                    }
                }
                match users {
                    Some(Ok((path, n))) => tracing::info!(
                        htpasswd = %path.display(),
                        users = n,
                        "SIGHUP received; htpasswd reloaded, its users apply from now on"
                    ),
                    Some(Err(e)) => tracing::error!(
                        error = %validator::error_chain(&e),
                        "SIGHUP received; htpasswd reload failed, the previous users stay"
                    ),
                    None => {}
                }
            }
        }
        #[cfg(not(unix))]
        let _ = (tls, auth);
    }
}

/// One scheduled scrub, when this replica takes the period's turn: logs the outcome and
/// writes the JSON report when `scrub.report` names a file.
async fn run_scheduled_scrub(state: &AppState, schedule: &ScrubSchedule, every: Duration) {
    match crate::scrub::claim_scheduled_run(state.app().repos.store().as_ref(), every).await {
        Ok(true) => {}
        Ok(false) => {
            tracing::debug!("scrub skipped: another replica scrubbed this period");
            return;
        }
        Err(e) => {
            tracing::warn!(error = %validator::error_chain(&e), "scrub skipped: cannot read its schedule record");
            return;
        }
    }
    match state.scrub(&schedule.options).await {
        Ok(r) => {
            tracing::info!(
                blobs = r.blobs_checked,
                bytes = r.bytes_read,
                corrupt_blobs = r.corrupt_blobs.len(),
                manifests = r.manifests_checked,
                manifest_problems = r.manifest_problems.len(),
                elapsed_secs = r.elapsed_secs,
                "scrub finished"
            );
            if let Some(path) = &schedule.report {
                let json = serde_json::to_vec_pretty(&r).expect("reports serialize");
                if let Err(e) = crate::scrub::write_report(path, &json) {
                    tracing::warn!(report = %path.display(), error = %e, "cannot write the scrub report");
                }
            }
        }
        Err(e) => tracing::warn!(error = %validator::error_chain(&e), "scrub failed"),
    }
}

/// Opens the store, binds, and serves until `shutdown` resolves; then stops accepting, lets
/// in-flight requests finish for at most the configured timeout, and returns. A configuration
/// with `[[sync]]` entries needs [`serve_with`].
pub async fn serve(
    config: ServeConfig,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    serve_with(config, Injected::default(), shutdown).await
}

/// What the process injects into [`serve_with`]: behaviour this crate does not own.
#[derive(Debug, Default, Clone)]
pub struct Injected {
    /// The copy of the `[[sync]]` schedule ([`crate::mirror`]); it pushes into this registry
    /// through its loopback address.
    pub sync_runner: Option<Arc<dyn crate::mirror::SyncRunner>>,
    /// The copy of replication on push (`[[sync]]` with `to`, [`crate::replicate`]); it
    /// reads from this registry through its loopback address.
    pub replicator: Option<Arc<dyn crate::replicate::Replicator>>,
}

/// [`serve`] with what the process injects (the `[[sync]]` copy).
pub async fn serve_with(
    config: ServeConfig,
    injected: Injected,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    check_injected(&config, &injected)?;
    let auth = match &config.auth {
        Some(a) => Some(Arc::new(Auth::load(a).map_err(ServeError::Auth)?)),
        None => None,
    };
    if let Some(hint) = auth.as_ref().and_then(|a| a.start_hint()) {
        tracing::warn!("{hint}");
    }
    // Before binding, so a bad file stops the start with its name and nothing listens.
    let tls = config.tls.clone().map(TlsConfig::load).transpose()?;
    // Bound before the store is opened, so a taken port fails the start without creating
    // anything in the data directory or the bucket.
    let listener = tokio::net::TcpListener::bind(config.listen)
        .await
        .map_err(|source| ServeError::Bind {
            addr: config.listen,
            source,
        })?;
    let opened = open_store(&config).await?;
    let store_name = opened.store.name();
    let state = app_state(&config, opened, auth.clone(), &listener);
    let addr = listener.local_addr().map_err(ServeError::Serve)?;
    let reloader = tokio::spawn(reload_on_sighup(tls.clone(), auth));
    tracing::info!(%addr, store = store_name, data = %config.data.display(), bucket = ?config.s3_bucket, tls = tls.is_some(), rate_limit = ?config.rate_limit, s3_redirect = config.s3_redirect, "registry listening on {addr}");
    let background = Background::start(&config, &state, injected, addr, reloader);

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let limits = config.conn_limits;
    let app = router(state.clone());
    let stop = async move {
        let _ = stop_rx.await;
    };
    let server = match tls {
        None => tokio::spawn(crate::conn::serve(listener, app, limits, stop)),
        Some(tls) => tokio::spawn(crate::conn::serve(
            TlsListener::new(listener, tls).map_err(ServeError::Serve)?,
            app,
            limits,
            stop,
        )),
    };
    let result = run_until_shutdown(server, shutdown, stop_tx, config.shutdown_timeout).await;
    background.stop(&state).await;
    tracing::info!("registry stopped");
    match result {
        Ok(()) => Ok(()),
        Err(e) => Err(ServeError::Serve(std::io::Error::other(e))),
    }
}

/// Refuses a configuration whose `[[sync]]` entries this process cannot run, before anything
/// is loaded or bound: the copies need the injected runner and replicator, and they reach
/// this registry over plain HTTP on its loopback address, which `[tls]` would replace.
fn check_injected(config: &ServeConfig, injected: &Injected) -> Result<(), ServeError> {
    if !config.replicate.is_empty() && injected.replicator.is_none() {
        return Err(ServeError::Sync(
            "replication on push needs a replicator (rdctl registry serve has one)".to_owned(),
        ));
    }
    if !config.sync.is_empty() || !config.replicate.is_empty() {
        if !config.sync.is_empty() && injected.sync_runner.is_none() {
            return Err(ServeError::Sync(
                "this process has no sync runner (rdctl registry serve has one)".to_owned(),
            ));
        }
        if config.tls.is_some() {
            return Err(ServeError::Sync(
                "it pushes through the registry's own loopback endpoint over plain HTTP, \
                 which [tls] replaces; run the mirror without [tls] behind a TLS proxy"
                    .to_owned(),
            ));
        }
    }
    Ok(())
}

/// The store the configuration selects, with the S3 blob redirect that only an S3 store can
/// have.
struct OpenedStore {
    store: Arc<dyn Store>,
    #[cfg(feature = "s3")]
    blob_redirect: Option<crate::storage::BlobRedirect>,
}

/// Opens the S3 bucket (checked first, see [`check_bucket`]) or the filesystem store. The
/// blob redirect settings are checked either way, so `s3_redirect` without S3 is an error.
async fn open_store(config: &ServeConfig) -> Result<OpenedStore, ServeError> {
    #[cfg(feature = "s3")]
    let mut blob_redirect = None;
    let store: Arc<dyn Store> = match config.s3_store()? {
        #[cfg(feature = "s3")]
        Some(s3) => {
            check_bucket(&s3, config).await?;
            blob_redirect = config.blob_redirect(Some(&s3))?;
            Arc::new(s3)
        }
        #[cfg(not(feature = "s3"))]
        Some(never) => match never {},
        None => {
            #[cfg(feature = "s3")]
            config.blob_redirect(None)?;
            config.fs_store()?
        }
    };
    Ok(OpenedStore {
        store,
        #[cfg(feature = "s3")]
        blob_redirect,
    })
}

/// The application state the router serves: the store and the runtime parts of the
/// configuration. Replication on push adds an outbox endpoint per `[[sync]]` entry with `to`,
/// delivered in this process, and events name the bound address as their source.
fn app_state(
    config: &ServeConfig,
    opened: OpenedStore,
    auth: Option<Arc<Auth>>,
    listener: &tokio::net::TcpListener,
) -> AppState {
    let mut notifications = config.notifications.clone();
    notifications
        .endpoints
        .extend(config.replicate.iter().map(|e| e.endpoint()));
    notifications.source_addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    AppState::new(
        opened.store,
        RegistryConfig {
            delete_enabled: config.delete_enabled,
            max_manifest_bytes: config.max_manifest_bytes,
            auth,
            // The default token realm names the scheme clients used.
            https: config.tls.is_some(),
            rate_limit: config.rate_limit,
            ui_enabled: config.ui_enabled,
            ui_trusted_keys: Arc::new(config.ui_trusted_keys.clone()),
            governance: Arc::new(config.governance.clone()),
            notifications,
            proxy: config.proxy.clone(),
            sync: config.sync.clone(),
            #[cfg(feature = "s3")]
            blob_redirect: opened.blob_redirect,
        },
    )
}

/// Serves until the server ends or `shutdown` resolves; then stops accepting and gives
/// in-flight requests `timeout` to finish before closing them.
async fn run_until_shutdown(
    mut server: tokio::task::JoinHandle<()>,
    shutdown: impl Future<Output = ()>,
    stop_tx: tokio::sync::oneshot::Sender<()>,
    timeout: Duration,
) -> Result<(), tokio::task::JoinError> {
    tokio::select! {
        r = &mut server => r,
        () = shutdown => {
            let _ = stop_tx.send(());
            match tokio::time::timeout(timeout, &mut server).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(timeout = ?timeout, "requests still running after the shutdown timeout; closing them");
                    server.abort();
                    Ok(())
                }
            }
        }
    }
}

/// The tasks that run beside the router for as long as it serves; [`Background::stop`] ends
/// them at shutdown.
struct Background {
    reloader: tokio::task::JoinHandle<()>,
    expiry: tokio::task::JoinHandle<()>,
    pull_flusher: tokio::task::JoinHandle<()>,
    collector: Option<tokio::task::JoinHandle<()>>,
    scrubber: Option<tokio::task::JoinHandle<()>>,
    mirror: Option<tokio::task::JoinHandle<()>>,
    delivery: Option<tokio::task::JoinHandle<()>>,
}

impl Background {
    /// Starts upload expiry, the pull-time flusher, the retention and garbage collection
    /// schedule, the scrub schedule, the `[[sync]]` copies and event delivery, each only when
    /// configured. `reloader` (the SIGHUP task) was started earlier, before the `listening` log
    /// line, and is stopped with the others.
    fn start(
        config: &ServeConfig,
        state: &AppState,
        injected: Injected,
        addr: SocketAddr,
        reloader: tokio::task::JoinHandle<()>,
    ) -> Background {
        let expiry = spawn_upload_expiry(state.clone(), config.upload_max_age);
        let pull_flusher = spawn_pull_flusher(state.clone(), config.pull_flush_interval);
        let collector = spawn_collector(config, state);
        let scrubber = config.scrub.interval.map(|every| {
            let state = state.clone();
            let schedule = config.scrub.clone();
            tokio::spawn(async move {
                loop {
                    tokio::time::sleep(every).await;
                    run_scheduled_scrub(&state, &schedule, every).await;
                }
            })
        });
        let mirror = start_sync(config, state, injected, addr);
        // Every replica delivers from the shared outbox; claims keep them from sending twice.
        let delivery = (!config.notifications.endpoints.is_empty() || !config.replicate.is_empty())
            .then(|| tokio::spawn(state.events().clone().deliver_forever()));
        Background {
            reloader,
            expiry,
            pull_flusher,
            collector,
            scrubber,
            mirror,
            delivery,
        }
    }

    /// Ends every task, writing the pull times still in memory once their flusher is gone.
    async fn stop(self, state: &AppState) {
        self.expiry.abort();
        self.reloader.abort();
        self.pull_flusher.abort();
        if let Err(e) = state.flush_pulls().await {
            tracing::warn!(error = %e, "writing pull times at shutdown failed");
        }
        if let Some(c) = self.collector {
            c.abort();
        }
        if let Some(d) = self.delivery {
            d.abort();
        }
        if let Some(s) = self.scrubber {
            s.abort();
        }
        if let Some(m) = self.mirror {
            m.abort();
        }
    }
}

/// Removes uploads older than `max_age`, checking a quarter as often as that age (between a
/// second and an hour), so a stale upload is gone at most a quarter late.
fn spawn_upload_expiry(state: AppState, max_age: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let every = (max_age / 4).clamp(Duration::from_secs(1), Duration::from_secs(3600));
        loop {
            tokio::time::sleep(every).await;
            match state.expire_uploads(max_age).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(removed = n, "expired stale uploads"),
                Err(e) => tracing::warn!(error = %e, "upload expiry failed"),
            }
        }
    })
}

/// Writes the pull times recorded in memory every `every`; a failed write keeps them for the
/// next round.
fn spawn_pull_flusher(state: AppState, every: Duration) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(every).await;
            if let Err(e) = state.flush_pulls().await {
                tracing::warn!(error = %e, "writing pull times failed; kept for the next flush");
            }
        }
    })
}

/// The `[gc]` schedule, when it has an interval: retention rules first (when there are any),
/// then a collection.
fn spawn_collector(config: &ServeConfig, state: &AppState) -> Option<tokio::task::JoinHandle<()>> {
    let retention = !config.governance.retention.is_empty();
    config.gc.interval.map(|every| {
        let state = state.clone();
        let opts = config.gc.options.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                // Retention first, so the collection right after reclaims what it removed.
                if retention {
                    match state.apply_retention(false).await {
                        Ok(p) => tracing::info!(
                            tags = p.tags.len(),
                            manifests = p.manifests.len(),
                            skipped = p.skipped,
                            "retention finished"
                        ),
                        Err(e) => tracing::warn!(error = %e, "retention failed"),
                    }
                }
                match state.collect_garbage(&opts).await {
                    Ok(r) => tracing::info!(
                        deleted_blobs = r.deleted_blobs,
                        deleted_bytes = r.deleted_bytes,
                        deleted_blob_links = r.deleted_blob_links,
                        deleted_manifest_links = r.deleted_manifest_links,
                        kept_young = r.kept_young,
                        kept_held = r.kept_held,
                        elapsed_secs = r.elapsed_secs,
                        "garbage collection finished"
                    ),
                    // Several replicas share a schedule; one of them collects.
                    Err(e @ GcError::Locked { .. }) => {
                        tracing::info!(reason = %e, "garbage collection skipped")
                    }
                    Err(e) => tracing::warn!(error = %e, "garbage collection failed"),
                }
            }
        })
    })
}

/// Wires the injected copies to this registry's own endpoint (the loopback address of
/// `addr`): replication on push as the events' in-process delivery, and the `[[sync]]`
/// schedule as a task, which it returns.
fn start_sync(
    config: &ServeConfig,
    state: &AppState,
    injected: Injected,
    addr: SocketAddr,
) -> Option<tokio::task::JoinHandle<()>> {
    let loopback = {
        let ip = match addr.ip() {
            ip if ip.is_unspecified() && ip.is_ipv6() => std::net::Ipv6Addr::LOCALHOST.into(),
            ip if ip.is_unspecified() => std::net::Ipv4Addr::LOCALHOST.into(),
            ip => ip,
        };
        std::net::SocketAddr::new(ip, addr.port()).to_string()
    };
    if let Some(replicator) = injected.replicator.filter(|_| !config.replicate.is_empty()) {
        state
            .events()
            .set_in_process(Arc::new(crate::replicate::Delivery {
                entries: config.replicate.clone(),
                replicator,
                source: loopback.clone(),
            }));
    }
    // Every replica runs the schedule; the sync lease lets one of them copy at a time.
    injected
        .sync_runner
        .filter(|_| !config.sync.is_empty())
        .map(|runner| {
            tokio::spawn(crate::mirror::schedule(
                state.app().repos.store().clone(),
                config.sync.clone(),
                runner,
                loopback,
                state.app().metrics.clone(),
            ))
        })
}
