//! The process's async runtime and its signals. `rdctl` owns both: every library it calls is
//! async (or blocking without a runtime of its own), and each command that needs the runtime
//! starts it here, once.

use std::future::Future;
use std::time::Duration;

use anyhow::Context as _;

/// How long blocking tasks (unpacking, store I/O) of an interrupted command get to end after
/// the command's future returned; what they leave half-done is cleaned up on the next start.
const BLOCKING_GRACE: Duration = Duration::from_secs(10);

/// Runs `f` to completion on a multi-threaded runtime, then shuts the runtime down, giving
/// blocking tasks at most [`BLOCKING_GRACE`].
pub fn block_on<F: Future>(f: F) -> anyhow::Result<F::Output> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    let out = rt.block_on(f);
    rt.shutdown_timeout(BLOCKING_GRACE);
    Ok(out)
}

/// A channel that receives one message per SIGHUP (what `rdctl worker run` reloads its
/// policy on); `None`, with a warning, when the signal cannot be listened for. Call it on the
/// runtime.
pub fn hangups() -> Option<tokio::sync::mpsc::Receiver<()>> {
    let mut hup = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup()) {
        Ok(s) => s,
        Err(e) => {
            tracing::warn!(error = %e, "cannot listen for SIGHUP: no policy reloads");
            return None;
        }
    };
    let (tx, rx) = tokio::sync::mpsc::channel(1);
    tokio::spawn(async move {
        while hup.recv().await.is_some() {
            tracing::info!("SIGHUP received, reloading the policy");
            // One pending reload is enough: more SIGHUPs before it is handled coalesce.
            if let Err(tokio::sync::mpsc::error::TrySendError::Closed(())) = tx.try_send(()) {
                return;
            }
        }
    });
    Some(rx)
}

/// Resolves on SIGTERM or SIGINT (ctrl-c): what the daemons (`registry serve`, `worker run`)
/// stop on.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if let Err(e) = tokio::signal::ctrl_c().await {
            tracing::warn!(error = %e, "cannot listen for ctrl-c");
            std::future::pending::<()>().await;
        }
    };
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(e) => {
                tracing::warn!(error = %e, "cannot listen for SIGTERM");
                std::future::pending::<()>().await;
            }
        }
    };
    tokio::select! {
        () = ctrl_c => tracing::info!("SIGINT received, shutting down"),
        () = term => tracing::info!("SIGTERM received, shutting down"),
    }
}
