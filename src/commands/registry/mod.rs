//! `rdctl registry ...`: run the OCI registry, collect its garbage, rebuild its package index,
//! scrub its blobs and manifests. One module per subcommand (its arguments, the library call,
//! the output); this one holds the subcommand list and the store flags they share.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;

mod gc;
mod reindex;
mod retention;
mod scrub;
mod serve;
mod sync_runner;
mod sync_status;
mod usage;

use gc::GcArgs;
use reindex::ReindexArgs;
use retention::RetentionArgs;
use scrub::ScrubArgs;
use serve::ServeArgs;
use sync_status::SyncStatusArgs;
use usage::UsageArgs;

/// Registry subcommands.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Serve the OCI Distribution v1.1 API on a filesystem or S3 store until SIGTERM or ctrl-c.
    #[command(after_help = "Examples:
  rdctl registry serve                                    # 127.0.0.1:5000, ./registry-data
  rdctl registry serve --listen 0.0.0.0:5000 --data /var/lib/rdctl/registry
  rdctl registry serve --listen 127.0.0.1:0               # a free port, named in the log
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
  rdctl registry gc --config /etc/rdctl/registry.toml --dry-run   # report, change nothing
  rdctl registry gc --config /etc/rdctl/registry.toml             # collect, grace 1h
  rdctl registry gc --data /var/lib/rdctl/registry --grace 2h --delete-untagged --json
  rdctl registry gc --s3-endpoint http://127.0.0.1:8333 --s3-bucket registry --dry-run
  rdctl registry gc --config /etc/rdctl/registry.toml --break-lease  # after a collector died

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
  rdctl registry retention --config /etc/rdctl/registry.toml --dry-run   # print what would go and why
  rdctl registry retention --config /etc/rdctl/registry.toml             # remove it
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
        Command::Serve(args) => serve::run(args),
        Command::Gc(args) => gc::run(args),
        Command::Reindex(args) => reindex::run(args),
        Command::Retention(args) => retention::run(args),
        Command::Usage(args) => usage::run(args),
        Command::Scrub(args) => scrub::run(args),
        Command::SyncStatus(args) => sync_status::run(args),
    }
}

/// How the messages name the store: its S3 bucket and endpoint, or its data directory.
fn store_name(config: &registry::ServeConfig) -> String {
    match (&config.s3_endpoint, &config.s3_bucket) {
        (Some(e), Some(b)) => format!("s3 bucket {b} at {e}"),
        _ => format!("fs store {}", config.data.display()),
    }
}
