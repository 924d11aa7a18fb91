//! `rdctl sync`: copy many images between registries and air-gap bundles with
//! `registry_client::sync::run`.
//! The report's output (lines or `--json`) is in [`report`].

use std::io::IsTerminal as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use registry_client::sync::{
    DEFAULT_CONCURRENCY, Endpoint, Event, SyncFile, SyncOptions, SyncRule,
};
use validator::Platform;

use super::client::ClientArgs;

mod report;

/// Arguments of `rdctl sync`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl sync central.example:5000/zones site.example:5000/zones
  rdctl sync --repo 'base' --repo 'tools/*' --tag '1.*' central.example:5000 bundle:/media/usb/zones
  rdctl sync bundle:/media/usb/zones 127.0.0.1:5000/mirror
  rdctl sync --config sync.toml --dry-run --json

SRC and DST are registries, HOST[:PORT][/PREFIX] (repositories under PREFIX, named relative to
it; the destination puts them under its own PREFIX), or air-gap bundles, bundle:DIR (one OCI
layout per repository under DIR/repos, and DIR/bundle.json listing every image with its digest
and referrers). Repository globs: * and ? within one path segment, ** across; without --repo
every repository of the catalog under the prefix. Tag globs: * and ?; without --tag every tag.
Referrer tags (sha256-<hex>, cosign's .sig/.att/.sbom) travel with their image. Every document
and blob is verified; blobs the destination has are skipped, so a rerun copies only what is
missing. Exit status: 0 everything copied, 1 some images or rules failed (listed), 2 could not
run.")]
pub struct SyncArgs {
    /// The source: `HOST[:PORT][/PREFIX]` or `bundle:DIR` (not with --config).
    #[arg(required_unless_present = "config", requires = "destination")]
    pub source: Option<String>,
    /// The destination, in the same forms.
    #[arg(conflicts_with = "config")]
    pub destination: Option<String>,
    /// A TOML file of [[sync]] tables (from, to, repositories, tags, platform, referrers) and
    /// an optional top-level concurrency.
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Repository glob relative to the source prefix (repeatable).
    #[arg(long = "repo", value_name = "GLOB", conflicts_with = "config")]
    pub repos: Vec<String>,
    /// Tag glob (repeatable).
    #[arg(long = "tag", value_name = "GLOB", conflicts_with = "config")]
    pub tags: Vec<String>,
    /// Copy only this platform's manifest out of an index (`os/arch[/variant]`).
    #[arg(long, value_name = "OS/ARCH", conflicts_with = "config")]
    pub platform: Option<String>,
    /// Copy only the images, not their referrers (SBOMs, signatures, attestations).
    #[arg(long, conflicts_with = "config")]
    pub no_referrers: bool,
    /// Copy only the images this admission policy admits (the worker's policy file format:
    /// `signed` rules with keys, threshold, required attestations); refused images are listed
    /// with the rule, the keys tried and why (not with --config: use only_signed there).
    #[arg(long, value_name = "POLICY", conflicts_with = "config")]
    pub only_signed: Option<PathBuf>,
    /// Sign the destination bundle's bundle.json with this private key (cosign's format or
    /// PKCS#8): writes bundle.json.sig at the end of the run.
    #[arg(long, value_name = "KEY")]
    pub sign_key: Option<PathBuf>,
    #[command(flatten)]
    pub password: super::trust::PasswordArgs,
    /// Read a source bundle only when its bundle.json.sig verifies with this public key
    /// (repeatable: any one of them).
    #[arg(long = "bundle-key", value_name = "PUB")]
    pub bundle_keys: Vec<PathBuf>,
    /// Images copied at once (default 4, or the file's concurrency).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<usize>,
    /// List what would be copied (and what is already up to date); write nothing.
    #[arg(long)]
    pub dry_run: bool,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print a JSON summary: every image with its source, destination, digest and what was
    /// copied, and the errors.
    #[arg(long)]
    pub json: bool,
}

/// Runs `rdctl sync`.
pub fn run(args: SyncArgs) -> anyhow::Result<ExitCode> {
    let (mut rules, file_concurrency) = rules(&args)?;
    signing(&args, &mut rules)?;
    let concurrency = args
        .concurrency
        .or(file_concurrency)
        .unwrap_or(DEFAULT_CONCURRENCY);
    anyhow::ensure!(concurrency >= 1, "--concurrency must be at least 1");
    let client = args.client.client()?;
    let terminal = std::io::stderr().is_terminal();
    let bars = super::progress::Bars::new(args.json);
    // What a blob stopped midway leaves depends on where it was going: an upload to a registry
    // is sent again, a download into a bundle's layout keeps what arrived.
    let to_registry = rules
        .iter()
        .filter(|r| matches!(r.to, Endpoint::Registry { .. }))
        .count();
    let bars = if to_registry == rules.len() {
        bars.midway(super::progress::UPLOAD_MIDWAY)
    } else if to_registry > 0 {
        bars.midway(super::progress::MIXED_MIDWAY)
    } else {
        bars
    };
    let progress = |e: Event<'_>| {
        if !terminal {
            return;
        }
        match e {
            Event::Planned { from, images } => {
                bars.println(&format!("{from}: {images} image(s) selected"))
            }
            Event::Finished {
                outcome,
                done,
                total,
            } => {
                let status = match (&outcome.result, &outcome.refused) {
                    (Some(Ok(r)), _) => format!(
                        "{} manifest(s) written, {} already there; {} blob(s) copied ({} bytes), {} skipped",
                        r.manifests.len() + r.referrers.len(),
                        r.manifests_present.len(),
                        r.blobs_copied.len(),
                        r.bytes_copied(),
                        r.blobs_skipped.len()
                    ),
                    (Some(Err(e)), _) => format!("FAILED: {}", validator::error_chain(e)),
                    (None, Some(refusal)) => format!("REFUSED: {refusal}"),
                    (None, None) => String::new(),
                };
                bars.println(&format!(
                    "[{done}/{total}] {} -> {}: {status}",
                    outcome.item.source, outcome.item.destination
                ));
            }
        }
    };
    let opts = SyncOptions {
        concurrency,
        dry_run: args.dry_run,
    };
    let report = crate::runtime::block_on(bars.until_interrupted(
        "the destinations",
        false,
        registry_client::sync::run_with_progress(&client, &rules, &opts, &progress, &bars),
    ))?;
    let Some(report) = report else {
        return Ok(ExitCode::from(super::progress::INTERRUPTED));
    };
    if args.json {
        report::print_json(&report, args.dry_run)?;
    } else {
        report::print(&report, args.dry_run)?;
    }
    Ok(if report.failed() {
        ExitCode::from(1)
    } else {
        ExitCode::SUCCESS
    })
}

/// `--sign-key` and `--bundle-key` on every rule (they act on bundle destinations and
/// sources only).
fn signing(args: &SyncArgs, rules: &mut [SyncRule]) -> anyhow::Result<()> {
    if let Some(path) = &args.sign_key {
        anyhow::ensure!(
            rules.iter().any(|r| matches!(r.to, Endpoint::Bundle(_))),
            "--sign-key signs a destination bundle's bundle.json, and no destination is a bundle"
        );
        let key = std::sync::Arc::new(super::trust::load_signing_key(path, &args.password)?);
        for r in rules.iter_mut() {
            r.sign_bundle = Some(key.clone());
        }
    }
    if !args.bundle_keys.is_empty() {
        anyhow::ensure!(
            rules.iter().any(|r| matches!(r.from, Endpoint::Bundle(_))),
            "--bundle-key verifies a source bundle's bundle.json, and no source is a bundle"
        );
        let keys = args
            .bundle_keys
            .iter()
            .map(|p| {
                let bytes = std::fs::read(p)
                    .with_context(|| format!("cannot read the key {}", p.display()))?;
                let name = p.display().to_string();
                Ok(registry_client::sync::BundleKey {
                    key: trust::VerifyingKey::from_pem(&bytes, &name)?,
                    source: name,
                })
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        for r in rules.iter_mut() {
            r.bundle_keys = keys.clone();
        }
    }
    Ok(())
}

fn rules(args: &SyncArgs) -> anyhow::Result<(Vec<SyncRule>, Option<usize>)> {
    if let Some(path) = &args.config {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        let file: SyncFile = config_toml::from_str(
            &text,
            &[
                ("concurrency", "images copied at once, a whole number"),
                (
                    "sync",
                    "[[sync]] tables with from, to, repositories, tags, platform, referrers, only_signed",
                ),
            ],
        )
        .with_context(|| format!("{}", path.display()))?;
        anyhow::ensure!(
            !file.sync.is_empty(),
            "{}: no [[sync]] tables",
            path.display()
        );
        let rules = file
            .sync
            .iter()
            .enumerate()
            .map(|(i, r)| {
                r.rule()
                    .with_context(|| format!("{}: sync.{i}", path.display()))
            })
            .collect::<anyhow::Result<Vec<_>>>()?;
        return Ok((rules, file.concurrency));
    }
    let (Some(src), Some(dst)) = (&args.source, &args.destination) else {
        anyhow::bail!("give SRC and DST, or --config FILE");
    };
    let platform = match &args.platform {
        Some(s) => Some(
            Platform::parse(s)
                .with_context(|| format!("--platform {s:?}: expected os/arch[/variant]"))?,
        ),
        None => None,
    };
    let mut rule = SyncRule::new(
        Endpoint::parse(src)?,
        Endpoint::parse(dst)?,
        args.repos.clone(),
        args.tags.clone(),
        platform,
        !args.no_referrers,
    )
    .context("bad sync arguments")?;
    if let Some(path) = &args.only_signed {
        let policy = registry_client::sync::SignaturePolicy::load(path)
            .with_context(|| format!("--only-signed {}", path.display()))?;
        rule = rule.only_signed(policy).context("--only-signed")?;
    }
    Ok((vec![rule], None))
}
