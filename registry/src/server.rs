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
    let runner = injected.sync_runner;
    if !config.replicate.is_empty() && injected.replicator.is_none() {
        return Err(ServeError::Sync(
            "replication on push needs a replicator (rdctl registry serve has one)".to_owned(),
        ));
    }
    if !config.sync.is_empty() || !config.replicate.is_empty() {
        if !config.sync.is_empty() && runner.is_none() {
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
    let auth = match &config.auth {
        Some(a) => Some(Arc::new(Auth::load(a).map_err(ServeError::Auth)?)),
        None => None,
    };
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
    #[cfg(feature = "s3")]
    let mut blob_redirect = None;
    let store: Arc<dyn Store> = match config.s3_store()? {
        #[cfg(feature = "s3")]
        Some(s3) => {
            check_bucket(&s3, &config).await?;
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
    let store_name = store.name();
    let mut notifications = config.notifications.clone();
    // Replication on push: an outbox endpoint per entry, delivered in this process.
    notifications
        .endpoints
        .extend(config.replicate.iter().map(|e| e.endpoint()));
    notifications.source_addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let state = AppState::new(
        store,
        RegistryConfig {
            delete_enabled: config.delete_enabled,
            max_manifest_bytes: config.max_manifest_bytes,
            auth: auth.clone(),
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
            blob_redirect,
        },
    );
    let addr = listener.local_addr().map_err(ServeError::Serve)?;
    let reloader = tokio::spawn(reload_on_sighup(tls.clone(), auth));
    tracing::info!(%addr, store = store_name, data = %config.data.display(), bucket = ?config.s3_bucket, tls = tls.is_some(), rate_limit = ?config.rate_limit, s3_redirect = config.s3_redirect, "registry listening on {addr}");

    let expiry = {
        let state = state.clone();
        let max_age = config.upload_max_age;
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
    };

    let pull_flusher = {
        let state = state.clone();
        let every = config.pull_flush_interval;
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(every).await;
                if let Err(e) = state.flush_pulls().await {
                    tracing::warn!(error = %e, "writing pull times failed; kept for the next flush");
                }
            }
        })
    };

    let retention = !config.governance.retention.is_empty();
    let collector = config.gc.interval.map(|every| {
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
    });

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

    // This registry's own endpoint, for the copies of [[sync]] entries.
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
    let mirror = runner.filter(|_| !config.sync.is_empty()).map(|runner| {
        let destination = loopback.clone();
        tokio::spawn(crate::mirror::schedule(
            state.app().repos.store().clone(),
            config.sync.clone(),
            runner,
            destination,
            state.app().metrics.clone(),
        ))
    });

    // Every replica delivers from the shared outbox; claims keep them from sending twice.
    let delivery = (!config.notifications.endpoints.is_empty() || !config.replicate.is_empty())
        .then(|| tokio::spawn(state.events().clone().deliver_forever()));

    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let limits = config.conn_limits;
    let app = router(state.clone());
    let stop = async move {
        let _ = stop_rx.await;
    };
    let mut server = match tls {
        None => tokio::spawn(crate::conn::serve(listener, app, limits, stop)),
        Some(tls) => tokio::spawn(crate::conn::serve(
            TlsListener::new(listener, tls).map_err(ServeError::Serve)?,
            app,
            limits,
            stop,
        )),
    };
    let result = tokio::select! {
        r = &mut server => r,
        () = shutdown => {
            let _ = stop_tx.send(());
            match tokio::time::timeout(config.shutdown_timeout, &mut server).await {
                Ok(r) => r,
                Err(_) => {
                    tracing::warn!(timeout = ?config.shutdown_timeout, "requests still running after the shutdown timeout; closing them");
                    server.abort();
                    Ok(())
                }
            }
        }
    };
    expiry.abort();
    reloader.abort();
    pull_flusher.abort();
    if let Err(e) = state.flush_pulls().await {
        tracing::warn!(error = %e, "writing pull times at shutdown failed");
    }
    if let Some(c) = collector {
        c.abort();
    }
    if let Some(d) = delivery {
        d.abort();
    }
    if let Some(s) = scrubber {
        s.abort();
    }
    if let Some(m) = mirror {
        m.abort();
    }
    tracing::info!("registry stopped");
    match result {
        Ok(()) => Ok(()),
        Err(e) => Err(ServeError::Serve(std::io::Error::other(e))),
    }
}
