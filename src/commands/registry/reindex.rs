//! `rdctl registry reindex`: rebuild the package index from the SBOM referrers in the store.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

use super::{StoreArgs, store_name};

/// Arguments of `rdctl registry reindex`: the store, as for `rdctl registry gc`.
#[derive(Debug, clap::Args)]
pub struct ReindexArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn run(args: ReindexArgs) -> anyhow::Result<ExitCode> {
    let config = args.store.load()?;
    let store = config.open_store().context("opening the registry store")?;
    let where_ = store_name(&config);
    let report = crate::runtime::block_on(registry::pkgindex::reindex(store))?
        .with_context(|| format!("rebuilding the package index of the {where_}"))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        writeln!(
            out,
            "package index of the {where_}: {} SBOMs ({} packages) recorded in {} repositories; {} SBOMs skipped (missing or not SPDX JSON); {} stale entries pruned",
            report.sboms, report.packages, report.repositories, report.skipped, report.pruned
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
