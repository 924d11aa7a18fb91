//! `rdctl registry scrub`: re-hash every blob, check every manifest, quarantine what is corrupt.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

use super::{StoreArgs, store_name};

/// Arguments of `rdctl registry scrub`: the store as for `rdctl registry gc`; the rate
/// defaults to `scrub.rate` of the config file.
#[derive(Debug, clap::Args)]
pub struct ScrubArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Read at most this many blob bytes per second [default: scrub.rate, else unlimited].
    #[arg(long, value_name = "BYTES")]
    rate: Option<u64>,
    /// Report only: quarantine nothing.
    #[arg(long)]
    dry_run: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Also write the JSON report to this file.
    #[arg(long, value_name = "FILE")]
    report: Option<PathBuf>,
}

pub(super) fn run(args: ScrubArgs) -> anyhow::Result<ExitCode> {
    let config = args.store.load()?;
    let mut opts = config.scrub.options.clone();
    if args.rate.is_some() {
        opts.rate = args.rate.filter(|r| *r > 0);
    }
    opts.dry_run = args.dry_run;
    let store = config.open_store().context("opening the registry store")?;
    let where_ = store_name(&config);
    let report = crate::runtime::block_on(registry::scrub::scrub(store, &opts))?
        .with_context(|| format!("scrubbing the {where_}"))?;
    let json = serde_json::to_string_pretty(&report)?;
    if let Some(path) = &args.report {
        registry::scrub::write_report(path, json.as_bytes())
            .with_context(|| format!("writing the scrub report {}", path.display()))?;
    }
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{json}")?;
    } else {
        writeln!(
            out,
            "scrub of the {where_}{}: {} blobs ({} bytes) re-hashed, {} manifests checked in {:.1}s",
            if report.dry_run { " (dry run)" } else { "" },
            report.blobs_checked,
            report.bytes_read,
            report.manifests_checked,
            report.elapsed_secs
        )?;
        for b in &report.corrupt_blobs {
            writeln!(
                out,
                "corrupt blob {}: {} bytes hash to {}{}",
                b.digest,
                b.size,
                b.found,
                if b.quarantined { "; quarantined" } else { "" }
            )?;
        }
        for m in &report.manifest_problems {
            writeln!(out, "manifest {}@{}: {}", m.repository, m.digest, m.problem)?;
        }
        if report.clean() {
            writeln!(out, "nothing found")?;
        }
    }
    Ok(if report.clean() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}
