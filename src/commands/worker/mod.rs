//! `rdctl worker ...`: run the node worker, or show what it did (`rdctl worker status`, in
//! [`status`]).

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

mod status;

/// Worker subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Reconcile zones with their images on a schedule until SIGTERM (or once with --once);
    /// SIGHUP reloads the admission policy.
    #[command(after_help = "Examples:
  rdctl worker run                                   # /etc/rdctl/worker.toml, until SIGTERM
  rdctl worker run --once --config ./worker.toml     # one pass over every zone
  rdctl worker run --once --json --config ./worker.toml
  rdctl worker run --once --config ./worker.toml --auth-file ./auth.json --ca-file ./ca.pem

Prints what the pass did (provisioned, unchanged, failed, backing off, removed and, when any,
unschedulable zones).
docs/operations.md lists every key of worker.toml, of the policy file and of the zone manifests.
SIGHUP reloads the policy file (a file that does not load keeps the policy in force; the log
says why) and starts a pass at once.
On a terminal each download gets a progress bar on stderr (none with --json); otherwise the log
says at most every 5 s how far the downloads are. Ctrl-C stops a --once pass and says what the
content store kept (a download stopped midway keeps what arrived); the same command again
resumes it.
Exit status: 0 stopped by SIGTERM, or a --once pass where every zone is ready; 1 a --once pass
where a zone failed or was not admitted; 2 the configuration could not be loaded; 130 a --once
pass interrupted.")]
    Run(RunArgs),
    /// Show every zone's desired and current image digest, phase, what admitted it and the
    /// last error, then the volumes (held by a zone, or released and retained) and the node's
    /// conditions (DiskPressure, ResourcePressure); with --json also the node's capacity,
    /// allocatable and allocated resources.
    #[command(after_help = "Examples:
  rdctl worker status
  rdctl worker status --json --config ./worker.toml | jq '.zones[].phase'

Exit status: 0 shown, 2 the configuration or state could not be read.")]
    Status(StatusArgs),
    /// Put a zone's previous root back (kubectl rollout undo): the running worker does it at
    /// its next pass, and the zone stays there until its image reference resolves to another
    /// digest; the root it leaves is kept as the previous one (a second rollback goes forward).
    #[command(after_help = "Examples:
  rdctl worker rollback web
  rdctl worker rollback web --config ./worker.toml && kill -HUP \"$(pgrep -f 'rdctl worker run')\"

`rdctl worker status` shows each zone's current and previous digest; a zone without a previous
root (never updated) is refused. The worker does the rollback at its next pass: SIGHUP starts
one at once.
Exit status: 0 asked for, 2 refused (no such zone, nothing kept) or the configuration could not
be read.")]
    Rollback(RollbackArgs),
}

/// Arguments of `rdctl worker rollback`.
#[derive(Debug, clap::Args)]
pub struct RollbackArgs {
    /// The zone.
    zone: String,
    /// The worker configuration.
    #[arg(long, value_name = "FILE", default_value = "/etc/rdctl/worker.toml")]
    config: PathBuf,
}

/// Arguments of `rdctl worker run`.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The worker configuration.
    #[arg(long, value_name = "FILE", default_value = "/etc/rdctl/worker.toml")]
    config: PathBuf,
    /// Run one reconcile pass over every zone (ignoring backoff) and exit: 0 when every zone
    /// is ready, 1 when any failed.
    #[arg(long)]
    once: bool,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
    /// Print what the pass (or, without --once, the last pass) did as JSON.
    #[arg(long)]
    pub json: bool,
    /// Registry access; each flag given overrides (--ca-file: adds to) the configuration's
    /// auth_file, ca_file, cert_dir, insecure and plain_http.
    #[command(flatten)]
    client: super::client::ClientArgs,
}

/// Arguments of `rdctl worker status`.
#[derive(Debug, clap::Args)]
pub struct StatusArgs {
    /// The worker configuration.
    #[arg(long, value_name = "FILE", default_value = "/etc/rdctl/worker.toml")]
    config: PathBuf,
    /// Print JSON instead of a table (full digests, error texts, `admission` and `denial`).
    #[arg(long, conflicts_with = "wide")]
    pub json: bool,
    /// Full digests, admission key ids and whole error texts in the table.
    #[arg(long)]
    wide: bool,
    /// List the IPS packages each zone runs (from its image's build history in the
    /// worker's content store; no network) instead of the status table.
    #[arg(long)]
    packages: bool,
}

/// Runs a worker subcommand.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Run(args) => run_worker(args),
        Command::Status(args) => status::run(args),
        Command::Rollback(args) => rollback(args),
    }
}

fn rollback(args: RollbackArgs) -> anyhow::Result<ExitCode> {
    let st = worker_runtime::request_rollback(&args.config, &args.zone)
        .with_context(|| format!("worker rollback with {}", args.config.display()))?;
    let show = |d: Option<&validator::Digest>| d.map_or("-".to_owned(), |d| d.to_string());
    println!(
        "zone {}: rollback from {} to {} asked for; the worker does it at its next pass (SIGHUP starts one)",
        args.zone,
        show(st.current_digest.as_ref()),
        show(st.previous_digest.as_ref())
    );
    Ok(ExitCode::SUCCESS)
}

fn run_worker(args: RunArgs) -> anyhow::Result<ExitCode> {
    crate::logging::init(args.log_json);
    let mut config = worker_runtime::WorkerConfig::load(&args.config)
        .with_context(|| format!("worker run with {}", args.config.display()))?;
    let flags = args.client.options();
    let c = &mut config.client;
    if flags.auth_file.is_some() {
        c.auth_file = flags.auth_file;
    }
    c.ca_files.extend(flags.ca_files);
    if !flags.cert_dirs.is_empty() {
        c.cert_dirs = flags.cert_dirs;
    }
    c.insecure |= flags.insecure;
    c.plain_http |= flags.plain_http;
    if c.insecure && c.plain_http {
        anyhow::bail!(
            "plain HTTP and insecure TLS both asked for (flags or {})",
            args.config.display()
        );
    }
    super::client::warn_insecure(c.insecure);
    let once = args.once;
    // Byte progress of the downloads: bars on a terminal, else a log line every few seconds.
    let store = config.state_dir.join("content");
    let bars = std::sync::Arc::new(
        super::progress::Bars::new(args.json)
            .midway(format!(
                "the content store keeps what arrived in {}, and the next run continues it",
                store.join("ingest").display()
            ))
            .otherwise(std::sync::Arc::new(
                worker_runtime::LoggedProgress::default(),
            )),
    );
    let progress: std::sync::Arc<dyn registry_client::progress::Progress> = bars.clone();
    let summary = crate::runtime::block_on(async move {
        let reload = if once {
            None
        } else {
            crate::runtime::hangups()
        };
        let run = worker_runtime::run(
            config,
            once,
            crate::runtime::shutdown_signal(),
            reload,
            progress,
        );
        if !once {
            // SIGINT and SIGTERM end the run between passes, or stop the pass (its downloads
            // keep what arrived, as below).
            return Some(run.await);
        }
        // One pass: ctrl-c stops it and says what the content store kept.
        let destination = format!("the content store {}", store.display());
        bars.until_interrupted(&destination, false, run).await
    })?;
    let Some(summary) = summary else {
        return Ok(ExitCode::from(super::progress::INTERRUPTED));
    };
    let summary = summary.with_context(|| format!("worker run with {}", args.config.display()))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::json!({
            "provisioned": summary.provisioned,
            "unchanged": summary.unchanged,
            "failed": summary.failed,
            "backing_off": summary.backing_off,
            "removed": summary.removed,
            "unschedulable": summary.unschedulable,
        });
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        write!(
            out,
            "provisioned: {}; unchanged: {}; failed: {}; backing off: {}; removed: {}",
            summary.provisioned.join(","),
            summary.unchanged.join(","),
            summary.failed.join(","),
            summary.backing_off.join(","),
            summary.removed.join(",")
        )?;
        if !summary.unschedulable.is_empty() {
            write!(out, "; unschedulable: {}", summary.unschedulable.join(","))?;
        }
        writeln!(out)?;
    }
    // Without --once the run ended on SIGTERM/SIGINT: a clean stop, whatever the last pass did.
    Ok(
        if (summary.failed.is_empty() && summary.unschedulable.is_empty()) || !args.once {
            ExitCode::SUCCESS
        } else {
            ExitCode::from(1)
        },
    )
}
