//! `rdctl build`: build an OCI image from an image file and its lockfile.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};

/// Arguments of `rdctl build`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl lock image.toml && rdctl build image.toml --output ./image
  rdctl build image.toml --push localhost:5000/zones/web
  rdctl build image.toml --output ./image --push localhost:5000/zones/web:1.0 --json

The lockfile (image.lock.json beside the image file) must exist and match the image file.
SOURCE_DATE_EPOCH, when set, is the mtime of files without a timestamp and the image's
creation time; otherwise the newest package timestamp is.

Exit status: 0 built, 2 the build failed.")]
pub struct Args {
    /// The image file (TOML).
    pub image_file: PathBuf,
    /// Write an OCI image layout to this directory.
    #[arg(long, value_name = "DIR")]
    pub output: Option<PathBuf>,
    /// Push to this reference (registry/name[:tag]; without a tag, the image file's tags).
    #[arg(long, value_name = "REF")]
    pub push: Option<String>,
    /// Print a JSON summary (digests, layers, packages).
    #[arg(long)]
    pub json: bool,
    /// Keep payloads downloaded from depots in DIR (by hash, verified) and reuse them in
    /// later builds instead of downloading them again.
    #[arg(long, value_name = "DIR")]
    pub payload_cache: Option<PathBuf>,
    /// Keep built layers in DIR (by a key of everything that decides their bytes) and copy
    /// unchanged ones from there, checked, instead of building and compressing them again.
    #[arg(long, value_name = "DIR")]
    pub layer_cache: Option<PathBuf>,
    /// Compression threads (default: one per CPU; the image is the same for any number).
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: u32,
}

/// Runs `rdctl build`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.output.is_none() && args.push.is_none() {
        bail!("give --output DIR, --push REF, or both");
    }
    let source_date_epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => Some(
            s.trim()
                .parse::<u64>()
                .with_context(|| format!("SOURCE_DATE_EPOCH={s:?} is not a number of seconds"))?,
        ),
        Err(_) => None,
    };
    let opts = builder::BuildOptions {
        output: args.output,
        push: args.push,
        source_date_epoch,
        threads: args.threads,
        payload_cache: args.payload_cache,
        layer_cache: args.layer_cache,
    };
    let summary = builder::build(&args.image_file, &opts)
        .with_context(|| format!("cannot build {}", args.image_file.display()))?;
    for w in &summary.warnings {
        eprintln!("{w}");
    }
    // writeln, not println: a closed pipe (`| head`) is an error main() ends quietly on, not
    // a panic.
    let mut out = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut out, &summary)?;
        writeln!(out)?;
    } else {
        writeln!(out, "manifest {}", summary.manifest)?;
        writeln!(out, "index    {}", summary.index)?;
        for l in &summary.layers {
            writeln!(
                out,
                "layer    {} ({} bytes) {}",
                l.digest, l.size, l.contents
            )?;
        }
        for r in &summary.pushed {
            writeln!(out, "pushed   {r}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}
