//! `rdctl validate`: check an image layout or one JSON document.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context, bail};
use registry_client::transfer::{ImageRef, LayoutRef, TransferError};
use validator::{
    DocumentKind, ImageLayout, LayoutReport, MAX_CONFIG_SIZE, Platform, Report, ValidateOptions,
    check_document, validate_layout, validate_layout_manifest,
};

/// Arguments of `rdctl validate`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl validate ./image                    # every image in an OCI layout
  rdctl validate ./image:1.0                # the entry tagged 1.0 (org.opencontainers.image.ref.name)
  rdctl validate oci:./image@sha256:4f1c…   # one manifest or index by digest (also one platform's)
  rdctl validate --platform illumos/amd64 ./image
  rdctl validate manifest.json              # one manifest, index or config
  rdctl validate --json ./image | jq .violations

Exit status: 0 valid, 1 invalid (every failed rule is listed), 2 the check could not run.")]
pub struct Args {
    /// An OCI image layout, `[oci:]DIR[:TAG|@DIGEST]` (as every command spells it), or a JSON
    /// document file.
    pub path: String,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
    /// Only check that blobs exist with the right size; skip decompressing layers.
    #[arg(long)]
    pub fast: bool,
    /// Require an image for this platform (`os/arch[/variant]`, e.g. `illumos/amd64`).
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Option<String>,
    /// What a single document must be (default: from its mediaType or shape).
    #[arg(long, value_enum)]
    pub kind: Option<Kind>,
}

/// Document kinds on the command line.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum Kind {
    /// An image manifest.
    Manifest,
    /// An image index.
    Index,
    /// An image config.
    Config,
}

enum Target {
    /// A layout with the tag or digest naming one entry, if any.
    Layout(LayoutRef),
    Document(PathBuf),
}

/// The same layout spellings as every other command (`ImageRef::parse`), plus a JSON file.
fn target(arg: &str) -> anyhow::Result<Target> {
    let p = Path::new(arg);
    if !arg.starts_with("oci:") && p.is_file() {
        return Ok(Target::Document(p.to_owned()));
    }
    match ImageRef::parse(arg) {
        Ok(ImageRef::Layout(l)) => Ok(Target::Layout(l)),
        Ok(ImageRef::Registry(r)) => bail!(
            "{arg} is a registry reference: validate checks OCI image layouts and JSON files; pull it first (rdctl pull {r} ./image) or write ./{arg} for a directory here"
        ),
        Err(e @ TransferError::BadReference { .. }) if e.to_string().contains("transport ") => {
            Err(e.into())
        }
        Err(_) => bail!("{arg}: no such file, directory or layout:tag"),
    }
}

/// Runs the command.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    let platform = match &args.platform {
        Some(s) => Some(
            Platform::parse(s)
                .with_context(|| format!("--platform {s:?}: expected os/arch[/variant]"))?,
        ),
        None => None,
    };
    let (subject, out) = match target(&args.path)? {
        Target::Layout(l) => {
            let layout = ImageLayout::open(&l.dir)
                .with_context(|| format!("cannot validate {}", l.dir.display()))?;
            let opts = ValidateOptions {
                deep: !args.fast,
                platform,
                ..ValidateOptions::default()
            };
            let report = match &l.digest {
                Some(d) => validate_layout_manifest(&layout, d, &opts),
                None => validate_layout(&layout, l.tag.as_ref().map(|t| t.as_str()), &opts),
            };
            (args.path.clone(), report)
        }
        Target::Document(file) => {
            let kind = args.kind.map(|k| match k {
                Kind::Manifest => DocumentKind::Manifest,
                Kind::Index => DocumentKind::Index,
                Kind::Config => DocumentKind::Config,
            });
            let mut bytes = Vec::new();
            std::fs::File::open(&file)
                .and_then(|f| f.take(MAX_CONFIG_SIZE as u64 + 1).read_to_end(&mut bytes))
                .with_context(|| format!("cannot read {}", file.display()))?;
            let (report, _) = check_document(&bytes, kind, None, &file.display().to_string());
            (
                args.path.clone(),
                LayoutReport {
                    report,
                    images: Vec::new(),
                },
            )
        }
    };
    print(&subject, &out, args.json)?;
    Ok(if out.report.is_ok() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print(subject: &str, out: &LayoutReport, json: bool) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    let r: &Report = &out.report;
    let errors = r.errors().count();
    let warnings = r.violations.len() - errors;
    if json {
        let doc = serde_json::json!({
            "subject": subject,
            "valid": r.is_ok(),
            "errors": errors,
            "warnings": warnings,
            "violations": r.violations,
            "images": out.images,
        });
        serde_json::to_writer_pretty(&mut w, &doc)?;
        writeln!(w)?;
        return Ok(());
    }
    for v in &r.violations {
        writeln!(w, "{v}")?;
    }
    for img in &out.images {
        let platform = img
            .platform
            .as_ref()
            .map_or_else(|| "-".to_owned(), ToString::to_string);
        writeln!(
            w,
            "image {}{} platform {platform}, {} layer(s), config {}{}",
            img.manifest,
            img.ref_name
                .as_deref()
                .map(|n| format!(" ({n})"))
                .unwrap_or_default(),
            img.layers.len(),
            img.config,
            img.stop_signal
                .as_deref()
                .map(|s| format!(", StopSignal {s}"))
                .unwrap_or_default(),
        )?;
    }
    let verdict = if r.is_ok() { "valid" } else { "INVALID" };
    writeln!(
        w,
        "{subject}: {verdict} ({errors} error(s), {warnings} warning(s))"
    )?;
    Ok(())
}
