//! `rdctl lock`: resolve an image file's packages into the lockfile beside it.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `rdctl lock`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl lock image.toml        resolves the packages and writes image.lock.json

Exit status: 0 locked, 2 the image file or its publishers could not be resolved.")]
pub struct Args {
    /// The image file (TOML).
    pub image_file: PathBuf,
}

/// Runs `rdctl lock`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let image = builder::ImageFile::load(&args.image_file)?;
    let (lockfile, path) = builder::lock(&image)
        .with_context(|| format!("cannot lock {}", args.image_file.display()))?;
    for p in &lockfile.packages {
        println!("{}", p.fmri);
    }
    eprintln!(
        "wrote {} ({} packages)",
        path.display(),
        lockfile.packages.len()
    );
    Ok(ExitCode::SUCCESS)
}
