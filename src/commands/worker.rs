//! `rdctl worker ...`: run the node worker, or show what it did.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

/// Worker subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Reconcile zones with their images on a schedule until SIGTERM (or once with --once).
    #[command(after_help = "Examples:
  rdctl worker run                                   /etc/rdctl/worker.toml, until SIGTERM
  rdctl worker run --once --config ./worker.toml     one pass over every zone
  rdctl worker run --once --json --config ./worker.toml
  rdctl worker run --once --config ./worker.toml --auth-file ./auth.json --ca-file ./ca.pem

Prints what the pass did (provisioned, unchanged, failed, backing off, removed zones).
docs/operations.md lists every key of worker.toml and of the zone manifests.
Exit status: 0 stopped by SIGTERM, or a --once pass where every zone is ready; 1 a --once pass
where a zone failed; 2 the configuration could not be loaded.")]
    Run(RunArgs),
    /// Show every zone's desired and current image digest, phase and last error.
    #[command(after_help = "Examples:
  rdctl worker status
  rdctl worker status --json --config ./worker.toml | jq '.[].phase'

Exit status: 0 shown, 2 the configuration or state could not be read.")]
    Status(StatusArgs),
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
    json: bool,
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
    /// Print JSON instead of a table.
    #[arg(long)]
    json: bool,
}

/// Runs a worker subcommand.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Run(args) => run_worker(args),
        Command::Status(args) => status(args),
    }
}

fn run_worker(args: RunArgs) -> anyhow::Result<ExitCode> {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RDCTL_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    if args.log_json {
        builder.json().init();
    } else {
        builder.init();
    }
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
    let summary = crate::runtime::block_on(worker_runtime::run(
        config,
        args.once,
        crate::runtime::shutdown_signal(),
    ))?
    .with_context(|| format!("worker run with {}", args.config.display()))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::json!({
            "provisioned": summary.provisioned,
            "unchanged": summary.unchanged,
            "failed": summary.failed,
            "backing_off": summary.backing_off,
            "removed": summary.removed,
        });
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(
            out,
            "provisioned: {}; unchanged: {}; failed: {}; backing off: {}; removed: {}",
            summary.provisioned.join(","),
            summary.unchanged.join(","),
            summary.failed.join(","),
            summary.backing_off.join(","),
            summary.removed.join(",")
        )?;
    }
    // Without --once the run ended on SIGTERM/SIGINT: a clean stop, whatever the last pass did.
    Ok(if summary.failed.is_empty() || !args.once {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn status(args: StatusArgs) -> anyhow::Result<ExitCode> {
    let rows = worker_runtime::status(&args.config)
        .with_context(|| format!("worker status with {}", args.config.display()))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &rows)?;
        writeln!(out)?;
        return Ok(ExitCode::SUCCESS);
    }
    let show =
        |d: &Option<validator::Digest>| d.as_ref().map_or("-".to_owned(), ToString::to_string);
    writeln!(out, "ZONE\tPHASE\tDESIRED\tCURRENT\tIMAGE\tLAST ERROR")?;
    for r in rows {
        let s = &r.status;
        let mut phase = s.phase.to_string();
        if !r.in_manifests {
            phase.push_str(" (no manifest)");
        }
        writeln!(
            out,
            "{}\t{}\t{}\t{}\t{}\t{}",
            s.zone,
            phase,
            show(&s.desired_digest),
            show(&s.current_digest),
            s.image,
            s.last_error.as_deref().unwrap_or("-")
        )?;
    }
    Ok(ExitCode::SUCCESS)
}
