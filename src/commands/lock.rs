//! `rdctl lock`: resolve an image file's packages into the lockfile beside it.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `rdctl lock`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl lock image.toml        resolves the packages and writes image.lock.json
  rdctl lock --json image.toml | jq -r '.packages[].fmri'
  rdctl lock image.toml --ca-file ./depot-ca.pem     an https:// depot with a private CA

Prints each pinned FMRI (or, with --json, the lockfile's path and packages).

Exit status: 0 locked, 2 the image file or its publishers could not be resolved.")]
pub struct Args {
    /// The image file (TOML).
    pub image_file: PathBuf,
    /// Print a JSON summary (lockfile path, pinned packages).
    #[arg(long)]
    pub json: bool,
    /// How to trust https:// depots.
    #[command(flatten)]
    pub tls: super::client::TlsArgs,
}

/// Runs `rdctl lock`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let image = builder::ImageFile::load(&args.image_file)?;
    let opts = builder::LockOptions {
        depot_tls: args.tls.depot_tls_warned(),
    };
    let (lockfile, path) = builder::lock_with(&image, &opts)
        .with_context(|| format!("cannot lock {}", args.image_file.display()))?;
    let mut out = std::io::stdout().lock();
    if args.json {
        let packages: Vec<_> = lockfile
            .packages
            .iter()
            .map(|p| serde_json::json!({"fmri": p.fmri, "manifest_sha1": p.manifest_sha1}))
            .collect();
        let doc = serde_json::json!({
            "lockfile": path.display().to_string(),
            "image_file_checksum": lockfile.image_file_checksum,
            "packages": packages,
        });
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        for p in &lockfile.packages {
            writeln!(out, "{}", p.fmri)?;
        }
    }
    eprintln!(
        "wrote {} ({} packages)",
        path.display(),
        lockfile.packages.len()
    );
    Ok(ExitCode::SUCCESS)
}
