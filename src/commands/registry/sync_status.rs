//! `rdctl registry sync-status`: the state of every `[[sync]]` entry, read from the store.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

use super::{StoreArgs, store_name};

/// Arguments of `rdctl registry sync-status`: the store and the `[[sync]]` entries of the
/// configuration, as for `rdctl registry serve`.
#[derive(Debug, clap::Args)]
pub struct SyncStatusArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print the status as JSON (`{"sync": [...]}`, as GET /v2/_rd/sync answers).
    #[arg(long)]
    pub json: bool,
}

pub(super) fn run(args: SyncStatusArgs) -> anyhow::Result<ExitCode> {
    let config = args.store.load()?;
    let store = config.open_store().context("opening the registry store")?;
    let where_ = store_name(&config);
    let entries = config.sync.clone();
    let status = crate::runtime::block_on(async move {
        registry::mirror::status(store.as_ref(), &entries).await
    })?
    .with_context(|| format!("reading the sync state in the {where_}"))?;
    let healthy = status
        .iter()
        .all(|e| e.state.last_run.is_some() && e.state.last_error.is_none());
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(
            out,
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({ "sync": status }))?
        )?;
    } else {
        let rows: Vec<Vec<String>> = status
            .iter()
            .map(|e| {
                let last = e.state.last_run.as_ref();
                vec![
                    e.name.clone(),
                    e.upstream.to_string(),
                    e.state
                        .last_success_ms
                        .map_or_else(|| "never".to_owned(), |t| validator::rfc3339(t / 1000)),
                    e.lag_secs
                        .map_or_else(|| "-".to_owned(), |l| format!("{l:.0}")),
                    last.map_or_else(|| "-".to_owned(), |r| r.images.to_string()),
                    last.map_or_else(|| "-".to_owned(), |r| r.blobs_copied.to_string()),
                    e.state.runs_ok.to_string(),
                    e.state.runs_failed.to_string(),
                    e.state.last_error.clone().unwrap_or_else(|| "-".to_owned()),
                ]
            })
            .collect();
        crate::commands::output::table(
            &mut out,
            &[
                "NAME",
                "UPSTREAM",
                "LAST_SUCCESS",
                "LAG_S",
                "IMAGES",
                "BLOBS_COPIED",
                "RUNS_OK",
                "RUNS_FAILED",
                "LAST_ERROR",
            ],
            &rows,
        )?;
    }
    Ok(if healthy {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
