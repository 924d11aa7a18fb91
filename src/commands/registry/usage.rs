//! `rdctl registry usage`: each repository's unique bytes and manifests beside its `[[quota]]`
//! limits.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

use super::{StoreArgs, store_name};

/// Arguments of `rdctl registry usage`.
#[derive(Debug, clap::Args)]
pub struct UsageArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Rebuild the usage documents of repositories with a quota from the store first.
    #[arg(long)]
    recount: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn run(args: UsageArgs) -> anyhow::Result<ExitCode> {
    let config = args.store.load()?;
    let store = config.open_store().context("opening the registry store")?;
    let where_ = store_name(&config);
    let governance = config.governance.clone();
    let report = crate::runtime::block_on(async move {
        registry::governance::quota::report(store, &governance, args.recount).await
    })?
    .with_context(|| format!("reading repository usage in the {where_}"))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        // One object, like every other --json document (room for fields beside the list).
        let doc = serde_json::json!({ "repositories": report });
        writeln!(out, "{}", serde_json::to_string_pretty(&doc)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let limit = |v: Option<u64>| v.map(|v| v.to_string()).unwrap_or_else(|| "-".to_owned());
    let rows: Vec<Vec<String>> = report
        .iter()
        .map(|u| {
            vec![
                u.repository.to_string(),
                u.bytes.to_string(),
                limit(u.max_bytes),
                u.manifests.to_string(),
                limit(u.max_manifests),
                u.rule.clone().unwrap_or_else(|| "-".to_owned()),
            ]
        })
        .collect();
    crate::commands::output::table(
        &mut out,
        &[
            "REPOSITORY",
            "BYTES",
            "MAX_BYTES",
            "MANIFESTS",
            "MAX_MANIFESTS",
            "RULE",
        ],
        &rows,
    )?;
    Ok(ExitCode::SUCCESS)
}
