//! `rdctl registry gc`: collect garbage, or break the lease a dead collector left behind.

use std::io::Write as _;
use std::process::ExitCode;

use anyhow::Context as _;

use super::{StoreArgs, store_name};

/// Arguments of `rdctl registry gc`. The store comes from the same config file, environment
/// and flags as `rdctl registry serve`; the policy defaults come from the file's `[gc]` table.
#[derive(Debug, clap::Args)]
pub struct GcArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Report what would be deleted; delete and write nothing.
    #[arg(long)]
    dry_run: bool,
    /// Keep anything written or used more recently than this (like 90s, 15m, 1h, 7d)
    /// [default: gc.grace of the config file, else 1h].
    #[arg(long, value_name = "DUR", value_parser = registry::duration::parse_duration)]
    grace: Option<std::time::Duration>,
    /// Also delete manifests no tag reaches (with their referrers and their own blobs).
    #[arg(long)]
    delete_untagged: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Collect nothing: remove the lease (gc/lock) a collector that died left behind, so the
    /// next run need not wait for it to turn stale. Prints who held it and since when.
    #[arg(long)]
    break_lease: bool,
    /// With --break-lease: break the lease even though its holder renewed it within its time
    /// to live (the holder stops at its next renewal).
    #[arg(long, requires = "break_lease")]
    force: bool,
}

pub(super) fn run(args: GcArgs) -> anyhow::Result<ExitCode> {
    let config = args.store.load()?;
    if args.break_lease {
        return break_lease(&config, args.force, args.json);
    }
    let mut opts = config.gc.options.clone();
    if let Some(g) = args.grace {
        opts.grace = g;
    }
    opts.delete_untagged |= args.delete_untagged;
    opts.dry_run = args.dry_run;
    if !opts.dry_run && opts.grace < registry::gc::MIN_SAFE_GRACE {
        eprintln!(
            "rdctl: warning: a grace window under {:?} is only safe while nobody pushes to this registry",
            registry::gc::MIN_SAFE_GRACE
        );
    }
    let store = config.open_store().context("opening the registry store")?;
    let where_ = store_name(&config);
    let report = crate::runtime::block_on(registry::gc::collect(store, &opts))?
        .with_context(|| format!("collecting garbage in the {where_}"))?;
    // writeln, not println: a closed pipe (`| head`) ends the command quietly, not in a panic.
    let mut out = std::io::stdout().lock();
    if args.json {
        writeln!(out, "{}", serde_json::to_string_pretty(&report)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    let verb = if report.dry_run {
        "would delete"
    } else {
        "deleted"
    };
    writeln!(
        out,
        "garbage collection of the {where_}{}, grace {:?}{}",
        if report.dry_run {
            " (dry run: nothing deleted)"
        } else {
            ""
        },
        opts.grace,
        if opts.delete_untagged {
            ", untagged manifests collected"
        } else {
            ""
        },
    )?;
    writeln!(
        out,
        "kept: {} manifests and {} blobs in {} repositories; {} unreachable objects younger than the grace window; {} digests held by pushes",
        report.marked_manifests,
        report.marked_blobs,
        report.repositories,
        report.kept_young,
        report.kept_held
    )?;
    writeln!(
        out,
        "{verb}: {} blobs ({} bytes), {} blob links, {} manifest links, {} records",
        report.deleted_blobs,
        report.deleted_bytes,
        report.deleted_blob_links,
        report.deleted_manifest_links,
        report.deleted_records
    )?;
    for d in &report.deleted {
        let kind = match d.kind {
            registry::gc::ObjectKind::Blob => "blob",
            registry::gc::ObjectKind::BlobLink => "blob-link",
            registry::gc::ObjectKind::ManifestLink => "manifest-link",
        };
        match &d.repository {
            Some(r) => writeln!(out, "  {kind} {r} {}", d.digest)?,
            None => writeln!(out, "  {kind} {} ({} bytes)", d.digest, d.bytes)?,
        }
    }
    writeln!(out, "took {:.2} s", report.elapsed_secs)?;
    Ok(ExitCode::SUCCESS)
}

fn break_lease(
    config: &registry::ServeConfig,
    force: bool,
    json: bool,
) -> anyhow::Result<ExitCode> {
    let store = config.open_store().context("opening the registry store")?;
    let where_ = store_name(config);
    let broken =
        crate::runtime::block_on(async move { registry::gc::break_lease(&*store, force).await })?
            .with_context(|| format!("breaking the garbage collection lease of the {where_}"))?;
    let mut out = std::io::stdout().lock();
    if json {
        writeln!(out, "{}", serde_json::to_string_pretty(&broken)?)?;
        return Ok(ExitCode::SUCCESS);
    }
    match broken {
        None => writeln!(out, "no garbage collection lease in the {where_}")?,
        Some(l) => {
            let started = l
                .started_unix
                .map(validator::rfc3339)
                .unwrap_or_else(|| "an unknown time".to_owned());
            writeln!(
                out,
                "broke the garbage collection lease of the {where_}: held by {} since {started}, last renewed {} s ago ({}; time to live {} s)",
                l.holder(),
                l.age_secs,
                if l.is_stale() {
                    "stale"
                } else {
                    "live, forced"
                },
                l.ttl_secs
            )?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
