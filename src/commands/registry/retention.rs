//! `rdctl registry retention`: apply the `[[retention]]` policies and print what went and why.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

use super::{StoreArgs, store_name};

/// Arguments of `rdctl registry retention`.
#[derive(Debug, clap::Args)]
pub struct RetentionArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print what would be removed and why; remove nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

pub(super) fn run(args: RetentionArgs) -> anyhow::Result<ExitCode> {
    let config = args.store.load()?;
    let store = config.open_store().context("opening the registry store")?;
    let where_ = store_name(&config);
    if config.governance.retention.is_empty() {
        anyhow::bail!("the configuration has no [[retention]] policy; nothing to apply");
    }
    let state = registry::AppState::new(
        store,
        registry::RegistryConfig {
            governance: std::sync::Arc::new(config.governance.clone()),
            ..registry::RegistryConfig::default()
        },
    );
    let plan = crate::runtime::block_on(async move { state.apply_retention(args.dry_run).await })?
        .with_context(|| format!("applying retention to the {where_}"))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&plan)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if plan.dry_run {
        "would remove"
    } else {
        "removed"
    };
    writeln!(
        out,
        "retention of the {where_}{}: {} tags in {} repositories looked at; {verb} {} tags and {} manifests{}",
        if plan.dry_run {
            " (dry run: nothing removed)"
        } else {
            ""
        },
        plan.tags_seen,
        plan.repositories,
        plan.tags.len(),
        plan.manifests.len(),
        if plan.skipped > 0 {
            format!("; {} skipped (changed since planned)", plan.skipped)
        } else {
            String::new()
        },
    )?;
    for t in &plan.tags {
        writeln!(
            out,
            "  tag {}:{} {} ({})",
            t.repository, t.tag, t.digest, t.reason
        )?;
    }
    for m in &plan.manifests {
        writeln!(
            out,
            "  manifest {}@{} (lost its last tag)",
            m.repository, m.digest
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
