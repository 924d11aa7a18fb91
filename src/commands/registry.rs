//! `rdctl registry ...`: run the OCI registry.

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
}

/// Arguments of `rdctl registry serve`. Flags override the config file and
/// `RDCTL_REGISTRY_*` environment variables.
#[derive(Debug, clap::Args)]
pub struct ServeArgs {
    /// Address to listen on [default: 127.0.0.1:5000].
    #[arg(long, value_name = "ADDR:PORT")]
    listen: Option<SocketAddr>,
    /// Data directory of the filesystem store [default: ./registry-data].
    #[arg(long, value_name = "DIR")]
    data: Option<PathBuf>,
    /// TOML configuration file.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// Store everything in this S3 endpoint instead of a directory (needs --s3-bucket).
    #[arg(long, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// S3 bucket (must exist).
    #[arg(long, value_name = "NAME")]
    s3_bucket: Option<String>,
    /// Key prefix inside the S3 bucket.
    #[arg(long, value_name = "P")]
    s3_prefix: Option<String>,
    /// Refuse DELETE of manifests, tags and blobs (405 UNSUPPORTED).
    #[arg(long)]
    disable_delete: bool,
    /// Log as JSON lines instead of text.
    #[arg(long)]
    log_json: bool,
}

/// Runs a registry subcommand.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Serve(args) => serve(args),
    }
}

fn serve(args: ServeArgs) -> anyhow::Result<ExitCode> {
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
    let mut config = registry::ServeConfig::load(args.config.as_deref())
        .context("loading the registry configuration")?;
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(data) = args.data {
        config.data = data;
    }
    if args.s3_endpoint.is_some() {
        config.s3_endpoint = args.s3_endpoint;
    }
    if args.s3_bucket.is_some() {
        config.s3_bucket = args.s3_bucket;
    }
    if args.s3_prefix.is_some() {
        config.s3_prefix = args.s3_prefix;
    }
    if args.disable_delete {
        config.delete_enabled = false;
    }
    registry::serve_blocking(config).context("registry serve")?;
    Ok(ExitCode::SUCCESS)
}
