//! `rdctl lock`: resolve an image file's packages into the lockfile beside it.

use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;

/// Arguments of `rdctl lock`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl lock image.toml        # resolves the packages and writes image.lock.json
  rdctl lock --json image.toml | jq -r '.packages[].fmri'
  rdctl lock image.toml --ca-file ./depot-ca.pem     # an https:// depot with a private CA
  rdctl lock image.toml --update                     # every package to its newest allowed version
  rdctl lock image.toml --update=nginx --update=web/php-82   # only these packages

An existing lockfile's pins are kept, whatever changed in the image file, as long as the
pinned version is still in the catalog and still allowed; --update moves every pin,
--update=PKG (a stem or its last component, repeatable) only that package's. Prints each
pinned FMRI on stdout (or, with --json, the lockfile's path, packages and changes) and on
stderr what changed: added, removed and updated pins.

Exit status: 0 locked, 2 the image file or its publishers could not be resolved.")]
pub struct Args {
    /// The image file (TOML).
    pub image_file: PathBuf,
    /// Print a JSON summary (lockfile path, pinned packages, changes {added, removed,
    /// updated [{from, to}]}).
    #[arg(long)]
    pub json: bool,
    /// Move pins: every one (`--update`), or only PKG's (`--update=PKG`, repeatable).
    #[arg(long, value_name = "PKG", num_args = 0..=1, require_equals = true, action = clap::ArgAction::Append, default_missing_value = "")]
    pub update: Option<Vec<String>>,
    /// How to trust https:// depots.
    #[command(flatten)]
    pub tls: super::client::TlsArgs,
    /// Words after the image file: only ever a mistake (`--update PKG` for `--update=PKG`),
    /// taken here so the error can say what to write instead of clap's "unexpected argument".
    #[arg(hide = true)]
    pub stray: Vec<String>,
}

/// The error for words beyond the one image file. `--update demo/hello` parses as a bare
/// `--update` (every pin) and a second word, since `--update` takes its value only after
/// `=`; the words that are not files are then the packages meant.
fn stray_words(args: &Args) -> anyhow::Error {
    let words: Vec<String> = std::iter::once(args.image_file.display().to_string())
        .chain(args.stray.iter().cloned())
        .collect();
    let bare_update = args
        .update
        .as_ref()
        .is_some_and(|u| u.iter().any(String::is_empty));
    let packages: Vec<&String> = words
        .iter()
        .filter(|w| !std::path::Path::new(w).is_file())
        .collect();
    if bare_update && !packages.is_empty() && packages.len() < words.len() {
        let fixed: Vec<String> = packages.iter().map(|p| format!("--update={p}")).collect();
        return anyhow::anyhow!(
            "--update takes a package only after '=': write {} (a bare --update moves every pin)",
            fixed.join(" ")
        );
    }
    anyhow::anyhow!("lock takes one image file, got {}", words.join(" "))
}

/// Runs `rdctl lock`.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if !args.stray.is_empty() {
        return Err(stray_words(&args));
    }
    let image = builder::ImageFile::load(&args.image_file)?;
    let update = match &args.update {
        None => builder::Update::Keep,
        Some(names) if names.iter().any(String::is_empty) => builder::Update::All,
        Some(names) => builder::Update::Packages(names.clone()),
    };
    let opts = builder::LockOptions {
        depot_tls: args.tls.depot_tls_warned()?,
        update,
    };
    let (lockfile, path, changes) = builder::relock(&image, &opts)
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
            "changes": changes,
        });
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        for p in &lockfile.packages {
            writeln!(out, "{}", p.fmri)?;
        }
    }
    if !args.json {
        for f in &changes.added {
            eprintln!("added   {f}");
        }
        for c in &changes.updated {
            eprintln!("updated {} -> {}", c.from, c.to);
        }
        for f in &changes.removed {
            eprintln!("removed {f}");
        }
    }
    eprintln!(
        "wrote {} ({} packages; {} added, {} updated, {} removed)",
        path.display(),
        lockfile.packages.len(),
        changes.added.len(),
        changes.updated.len(),
        changes.removed.len()
    );
    Ok(ExitCode::SUCCESS)
}
