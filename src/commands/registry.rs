//! `rdctl registry ...`: run the OCI registry, collect its garbage, rebuild its package index,
//! scrub its blobs and manifests.

use std::io::Write as _;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// Registry subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Serve the OCI Distribution v1.1 API on a filesystem or S3 store until SIGTERM or ctrl-c.
    #[command(after_help = "Examples:
  rdctl registry serve                                    127.0.0.1:5000, ./registry-data
  rdctl registry serve --listen 0.0.0.0:5000 --data /var/lib/rdctl/registry
  rdctl registry serve --listen 127.0.0.1:0               a free port, named in the log
  rdctl registry serve --config /etc/rdctl/registry.toml --log-json
  AWS_ACCESS_KEY_ID=... AWS_SECRET_ACCESS_KEY=... \\
    rdctl registry serve --s3-endpoint http://127.0.0.1:8333 --s3-bucket registry

Logs `registry listening on ADDR` once it accepts connections; /healthz, /readyz and /metrics
answer beside the OCI API. docs/operations.md lists every configuration key.
Exit status: 0 stopped by SIGTERM or ctrl-c after draining, 2 it could not start or failed.")]
    Serve(ServeArgs),
    /// Collect garbage: delete blobs, manifests and repository links that no tag (and, by
    /// policy, no untagged manifest or referrer) reaches and that are older than the grace
    /// window. Safe while the registry serves pushes.
    #[command(after_help = "Examples:
  rdctl registry gc --config /etc/rdctl/registry.toml --dry-run   report, change nothing
  rdctl registry gc --config /etc/rdctl/registry.toml             collect, grace 1h
  rdctl registry gc --data /var/lib/rdctl/registry --grace 2h --delete-untagged --json
  rdctl registry gc --s3-endpoint http://127.0.0.1:8333 --s3-bucket registry --dry-run
  rdctl registry gc --config /etc/rdctl/registry.toml --break-lease  after a collector died

One collection runs at a time (lease gc/lock in the store); `[gc]` in the config file sets the
policy and, with gc.interval, a schedule inside rdctl registry serve. A collector renews its
lease every gc.lease_ttl/4 (15 s by default) and the lease turns stale after gc.lease_ttl
without renewal; --break-lease removes a dead collector's lease at once (a live one only with
--force). docs/gc.md.
Exit status: 0 collected (or reported, with --dry-run; or the lease broken or absent), 2 it
failed: another collection holds the lease, the store failed, or a kept manifest could not be
read (then before any deletion).")]
    Gc(GcArgs),
    /// Rebuild the package index (what GET /v2/_rd/packages searches) from the SBOM referrers
    /// already in the store: for content pushed before the index existed, or after restoring a
    /// store without it. Safe while the registry serves.
    #[command(after_help = "Examples:
  rdctl registry reindex --data /var/lib/rdctl/registry
  rdctl registry reindex --config /etc/rdctl/registry.toml --json
  rdctl registry reindex --s3-endpoint http://127.0.0.1:8333 --s3-bucket registry

Every SPDX SBOM referrer (artifactType application/spdx+json) found in the repositories'
referrers indexes is recorded again, and index entries whose image or SBOM is gone are pruned.
docs/api.md, \"Package index\".
Exit status: 0 rebuilt, 2 it failed (the store failed or a repository's index could not be
written).")]
    Reindex(ReindexArgs),
    /// Apply the [[retention]] policies of the configuration: remove the tags no policy keeps
    /// and delete the manifests that lose their last tag; the next garbage collection reclaims
    /// their bytes. Safe while the registry serves.
    #[command(after_help = "Examples:
  rdctl registry retention --config /etc/rdctl/registry.toml --dry-run   print what would go and why
  rdctl registry retention --config /etc/rdctl/registry.toml             remove it
  rdctl registry retention --config /etc/rdctl/registry.toml --json

A tag goes only when every policy matching its repository removes it, and never when an
[[immutable]] rule covers it. The server runs retention before each scheduled collection
(gc.interval). docs/operations.md, \"Retention\".
Exit status: 0 applied (or reported, with --dry-run), 2 it failed (the store failed).")]
    Retention(RetentionArgs),
    /// Print each repository's usage (unique bytes, manifests) and its [[quota]] limits.
    #[command(after_help = "Examples:
  rdctl registry usage --config /etc/rdctl/registry.toml
  rdctl registry usage --config /etc/rdctl/registry.toml --recount --json

Repositories a [[quota]] rule matches are read from their usage document (what pushes are
checked against); --recount rebuilds those documents from the store first. Other repositories
are counted from the store. --json: {repositories [{repository, bytes, max_bytes, manifests,
max_manifests, rule, tracked, ...}]}, one object like every other --json output.
docs/operations.md, \"Quotas\".
Exit status: 0 printed, 2 it failed (the store failed).")]
    Usage(UsageArgs),
    /// Scrub: re-read every blob and recompute its digest, check that every manifest parses
    /// and references content that exists, and quarantine corrupt blobs so they are never
    /// served (a re-push of the same digest heals them). Safe while the registry serves.
    #[command(after_help = "Examples:
  rdctl registry scrub --data /var/lib/rdctl/registry
  rdctl registry scrub --config /etc/rdctl/registry.toml --rate 50000000 --json
  rdctl registry scrub --s3-endpoint http://127.0.0.1:8333 --s3-bucket registry --dry-run
  rdctl registry scrub --config /etc/rdctl/registry.toml --report /var/log/rdctl/scrub.json

A corrupt blob's bytes move to _rd/quarantine/ in the store with a record of what was found;
`[scrub]` in the config file sets the rate and, with scrub.interval, a schedule inside rdctl
registry serve. docs/operations.md, \"Scrub\".
Exit status: 0 nothing found, 1 corruption or manifest problems found (and reported), 2 the
scrub failed (the store failed).")]
    Scrub(ScrubArgs),
    /// Show the state of every [[sync]] entry of the configuration: last success, lag, last
    /// error and what the last run copied, read from the store (any replica's runs).
    #[command(after_help = "Examples:
  rdctl registry sync-status --config /etc/rdctl/registry.toml
  rdctl registry sync-status --config /etc/rdctl/registry.toml --json

The same as GET /v2/_rd/sync on a running replica. docs/operations.md, \"Scheduled sync\".
Exit status: 0 every entry's last run succeeded, 1 an entry failed or never ran, 2 the store
could not be read.")]
    SyncStatus(SyncStatusArgs),
}

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

/// Arguments of `rdctl registry reindex`: the store, as for `rdctl registry gc`.
#[derive(Debug, clap::Args)]
pub struct ReindexArgs {
    #[command(flatten)]
    store: StoreArgs,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

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

/// Where the registry's configuration and store are: the same flags for `serve`, `gc` and
/// `reindex`, overriding the config file and `RDCTL_REGISTRY_*` environment variables.
#[derive(Debug, clap::Args)]
pub struct StoreArgs {
    /// TOML configuration file (the registry's).
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Data directory of the filesystem store [default: ./registry-data].
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// Store everything in this S3 endpoint instead of a directory (needs --s3-bucket).
    #[arg(long, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// S3 bucket (must exist).
    #[arg(long, value_name = "NAME")]
    s3_bucket: Option<String>,
    /// Key prefix inside the S3 bucket.
    #[arg(long, value_name = "P")]
    s3_prefix: Option<String>,
}

impl StoreArgs {
    /// The configuration file (or defaults and environment) with these flags applied.
    fn load(self) -> anyhow::Result<registry::ServeConfig> {
        let mut config = registry::ServeConfig::load(self.config.as_deref())
            .context("loading the registry configuration")?;
        if let Some(data) = self.data {
            config.data = data;
        }
        if self.s3_endpoint.is_some() {
            config.s3_endpoint = self.s3_endpoint;
        }
        if self.s3_bucket.is_some() {
            config.s3_bucket = self.s3_bucket;
        }
        if self.s3_prefix.is_some() {
            config.s3_prefix = self.s3_prefix;
        }
        Ok(config)
    }
}

/// Runs a registry subcommand.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Serve(args) => serve(args),
        Command::Gc(args) => gc(args),
        Command::Reindex(args) => reindex(args),
        Command::Retention(args) => retention(args),
        Command::Usage(args) => usage(args),
        Command::Scrub(args) => scrub(args),
        Command::SyncStatus(args) => sync_status(args),
    }
}

fn store_name(config: &registry::ServeConfig) -> String {
    match (&config.s3_endpoint, &config.s3_bucket) {
        (Some(e), Some(b)) => format!("s3 bucket {b} at {e}"),
        _ => format!("fs store {}", config.data.display()),
    }
}

fn retention(args: RetentionArgs) -> anyhow::Result<ExitCode> {
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

fn sync_status(args: SyncStatusArgs) -> anyhow::Result<ExitCode> {
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
        super::inspect::table(
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

fn usage(args: UsageArgs) -> anyhow::Result<ExitCode> {
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
    super::inspect::table(
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

fn scrub(args: ScrubArgs) -> anyhow::Result<ExitCode> {
    let config = args.store.load()?;
    let mut opts = config.scrub.options.clone();
    if args.rate.is_some() {
        opts.rate = args.rate.filter(|r| *r > 0);
    }
    opts.dry_run = args.dry_run;
    let store = config.open_store().context("opening the registry store")?;
    let where_ = match (&config.s3_endpoint, &config.s3_bucket) {
        (Some(e), Some(b)) => format!("s3 bucket {b} at {e}"),
        _ => format!("fs store {}", config.data.display()),
    };
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

fn reindex(args: ReindexArgs) -> anyhow::Result<ExitCode> {
    let config = args.store.load()?;
    let store = config.open_store().context("opening the registry store")?;
    let where_ = match (&config.s3_endpoint, &config.s3_bucket) {
        (Some(e), Some(b)) => format!("s3 bucket {b} at {e}"),
        _ => format!("fs store {}", config.data.display()),
    };
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

fn gc(args: GcArgs) -> anyhow::Result<ExitCode> {
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
    let where_ = match (&config.s3_endpoint, &config.s3_bucket) {
        (Some(e), Some(b)) => format!("s3 bucket {b} at {e}"),
        _ => format!("fs store {}", config.data.display()),
    };
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
    let where_ = match (&config.s3_endpoint, &config.s3_bucket) {
        (Some(e), Some(b)) => format!("s3 bucket {b} at {e}"),
        _ => format!("fs store {}", config.data.display()),
    };
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

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
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

/// The `[[sync]]` copy for `registry serve`: one `registry_client::sync` run of the entry
/// (the one copy path) from its upstream into this registry's loopback endpoint, then, with
/// `on_upstream_delete = "delete"`, `registry_client::sync::prune`.
#[derive(Debug)]
struct ClientSyncRunner;

impl registry::mirror::SyncRunner for ClientSyncRunner {
    fn run<'a>(
        &'a self,
        entry: &'a registry::mirror::SyncEntry,
        destination: &'a str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = registry::mirror::RunOutcome> + Send + 'a>,
    > {
        Box::pin(async move {
            let mut out = registry::mirror::RunOutcome::default();
            if let Err(e) = sync_entry(entry, destination, &mut out).await {
                out.errors.push(format!("{e:#}"));
            }
            out
        })
    }
}

impl registry::replicate::Replicator for ClientSyncRunner {
    fn copy<'a>(
        &'a self,
        entry: &'a registry::replicate::ReplicationEntry,
        source: &'a str,
        repository: &'a str,
        digest: &'a str,
        tag: Option<&'a str>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + 'a>>
    {
        Box::pin(async move {
            replicate(entry, source, repository, digest, tag)
                .await
                .map_err(|e| format!("{e:#}"))
        })
    }
}

/// Replication on push: one pushed manifest, by digest, from this registry (`source`, its
/// loopback `HOST:PORT`) to the entry's destination, tagged as pushed, with its referrers
/// (the one copy path). With `only_signed`, an image the policy refuses is not copied and the
/// event is settled (a refusal is not retried).
async fn replicate(
    entry: &registry::replicate::ReplicationEntry,
    source: &str,
    repository: &str,
    digest: &str,
    tag: Option<&str>,
) -> anyhow::Result<String> {
    use registry_client::transfer::{CopyOptions, ImageRef};
    let keychain =
        registry_client::Keychain::from_env(entry.auth_file.as_deref(), &Default::default());
    let client = registry_client::Client::builder()
        .keychain(keychain)
        .plain_http(entry.to.base.starts_with("http://"))
        .build()
        .context("building the replication client")?;
    let digest = validator::Digest::parse(digest).context("the pushed digest")?;
    let from = registry_client::Reference::parse(&format!("{source}/{repository}@{digest}"))
        .context("the pushed image")?;
    let host = entry.to.base.split_once("://").map_or("", |(_, h)| h);
    let name = match &entry.to.prefix {
        Some(p) => format!("{host}/{p}/{repository}"),
        None => format!("{host}/{repository}"),
    };
    let to = registry_client::Reference::parse(&match tag {
        Some(t) => format!("{name}:{t}"),
        None => format!("{name}@{digest}"),
    })
    .with_context(|| format!("the destination {name}"))?;
    if let Some(path) = &entry.only_signed {
        let policy = registry_client::sync::SignaturePolicy::load(path)
            .with_context(|| format!("only_signed {}", path.display()))?;
        match registry_client::sync::check_signed(&client, &policy, &from, &digest).await {
            Ok(_) => {}
            Err(registry_client::sync::SignedCheckError::Refused(r)) => {
                tracing::warn!(sync = %entry.name, image = %from, error = %r, "sync: only_signed refused an image; not replicated");
                return Ok(format!("refused by only_signed: {r}"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let report = registry_client::transfer::copy(
        &client,
        &ImageRef::Registry(from),
        &ImageRef::Registry(to.clone()),
        &CopyOptions {
            platform: None,
            referrers: entry.referrers,
        },
    )
    .await
    .with_context(|| format!("copying to {to}"))?;
    Ok(format!(
        "{to}: {} manifest(s) written, {} already there, {} blob(s) copied ({} bytes)",
        report.manifests.len() + report.referrers.len(),
        report.manifests_present.len(),
        report.blobs_copied.len(),
        report.bytes_copied()
    ))
}

async fn sync_entry(
    entry: &registry::mirror::SyncEntry,
    destination: &str,
    out: &mut registry::mirror::RunOutcome,
) -> anyhow::Result<()> {
    use registry_client::sync::{self, Endpoint, SyncOptions, SyncRule};
    let keychain =
        registry_client::Keychain::from_env(entry.auth_file.as_deref(), &Default::default());
    let client = registry_client::Client::builder()
        .keychain(keychain)
        .plain_http(entry.upstream.base.starts_with("http://"))
        .build()
        .context("building the sync client")?;
    let host = entry.upstream.base.split_once("://").map_or("", |(_, h)| h);
    let platform = match &entry.platform {
        Some(p) => Some(validator::Platform::parse(p).context("platform")?),
        None => None,
    };
    let mut rule = SyncRule::new(
        Endpoint::Registry {
            host: host.to_owned(),
            prefix: entry.upstream.prefix.clone(),
        },
        Endpoint::Registry {
            host: destination.to_owned(),
            prefix: entry.destination.clone(),
        },
        entry.repositories.clone(),
        entry.tags.clone(),
        platform,
        entry.referrers,
    )?;
    if let Some(path) = &entry.only_signed {
        // Read at every run, as auth_file is: a changed policy or key applies to the next run.
        let policy = sync::SignaturePolicy::load(path)
            .with_context(|| format!("only_signed {}", path.display()))?;
        rule = rule.only_signed(policy)?;
    }
    let report = sync::run(
        &client,
        std::slice::from_ref(&rule),
        &SyncOptions::default(),
        &|_| {},
    )
    .await;
    for (from, e) in &report.rule_errors {
        out.errors
            .push(format!("{from}: {}", validator::error_chain(e)));
    }
    for o in &report.images {
        out.images += 1;
        match &o.result {
            Some(Ok(r)) => {
                out.images_copied += u64::from(!o.item.up_to_date);
                out.blobs_copied += r.blobs_copied.len() as u64;
                out.bytes_copied += r.bytes_copied();
            }
            Some(Err(e)) => out.errors.push(format!(
                "{}:{}: {}",
                o.item.destination_repository,
                o.item.tag,
                validator::error_chain(e)
            )),
            None => {
                if let Some(refusal) = &o.refused {
                    out.refused.push(format!(
                        "{}:{} ({}): {}",
                        o.item.destination_repository, o.item.tag, o.item.digest, refusal
                    ));
                }
            }
        }
    }
    if entry.on_upstream_delete == registry::mirror::OnUpstreamDelete::Delete
        && report.rule_errors.is_empty()
    {
        let pruned = sync::prune(&client, &rule, &report).await?;
        out.tags_deleted = pruned.deleted.len() as u64;
        for (tag, e) in &pruned.failed {
            out.errors
                .push(format!("deleting {tag}: {}", validator::error_chain(e)));
        }
    }
    Ok(())
}
