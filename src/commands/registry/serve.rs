//! `rdctl registry serve`: check the files the configuration names, inject the client-side
//! sync and replication, and serve until SIGTERM or ctrl-c.

use std::net::SocketAddr;
use std::process::ExitCode;

use anyhow::Context as _;

use super::{StoreArgs, sync_runner::ClientSyncRunner};

/// Arguments of `rdctl registry serve`. Flags override the config file and
/// `RDCTL_REGISTRY_*` environment variables.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:5000].
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    #[command(flatten)]
    store: StoreArgs,
    /// Refuse DELETE of manifests, tags and blobs (405 UNSUPPORTED).
    #[arg(long)]
    disable_delete: bool,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

pub(super) fn run(args: ServeArgs) -> anyhow::Result<ExitCode> {
    crate::logging::init(args.log_json);
    let mut config = args.store.load()?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if args.disable_delete {
        config.delete_enabled = false;
    }
    for e in &config.sync {
        if let Some(f) = &e.auth_file {
            registry_client::AuthFile::load(f)
                .with_context(|| format!("[[sync]] {:?}: auth_file", e.name))?;
        }
        if let Some(p) = &e.only_signed {
            registry_client::sync::SignaturePolicy::load(p)
                .with_context(|| format!("[[sync]] {:?}: only_signed", e.name))?;
        }
    }
    for e in &config.replicate {
        if let Some(f) = &e.auth_file {
            registry_client::AuthFile::load(f)
                .with_context(|| format!("[[sync]] {:?}: auth_file", e.name))?;
        }
        if let Some(p) = &e.only_signed {
            registry_client::sync::SignaturePolicy::load(p)
                .with_context(|| format!("[[sync]] {:?}: only_signed", e.name))?;
        }
    }
    for p in &config.proxy {
        if let Some(f) = &p.auth_file {
            registry_client::AuthFile::load(f)
                .with_context(|| format!("[[proxy]] {:?}: auth_file", p.prefix))?;
        }
    }
    let injected = registry::Injected {
        sync_runner: (!config.sync.is_empty()).then(|| std::sync::Arc::new(ClientSyncRunner) as _),
        replicator: (!config.replicate.is_empty())
            .then(|| std::sync::Arc::new(ClientSyncRunner) as _),
    };
    crate::runtime::block_on(registry::serve_with(
        config,
        injected,
        crate::runtime::shutdown_signal(),
    ))?
    .context("registry serve")?;
    Ok(ExitCode::SUCCESS)
}
