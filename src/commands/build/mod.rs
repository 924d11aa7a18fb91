//! `rdctl build`: build an OCI image from an image file and its lockfile, then sign, attest
//! and push it with `registry_client::publish`. The progress shown while layers are built is in
//! [`progress`].

mod inputs;
mod progress;

use std::io::{IsTerminal as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use registry_client::publish;
use registry_client::signatures::Pushed;
use registry_client::transfer::ImageRef;
use validator::Tag;

use inputs::Inputs;
use progress::{Bars, Lines};

/// Arguments of `rdctl build`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl lock image.toml && rdctl build image.toml --output ./image
  rdctl build image.toml --push localhost:5000/zones/web
  rdctl build image.toml --output ./image --push localhost:5000/zones/web:1.0 --json
  rdctl build image.toml --push reg.example:5443/zones/web --ca-file ./ca.pem
  rdctl build image.toml --push localhost:5000/zones/web --no-referrers
  rdctl build image.toml --output ./image --push localhost:5000/zones/web --sign-key cosign.key --attest
  # --ca-file, --cert-dir and --insecure apply to https:// depots and the registry alike

The lockfile (image.lock.json beside the image file) must exist and match the image file.
SOURCE_DATE_EPOCH, when set, is the mtime of files without a timestamp and the image's
creation time; otherwise the newest package timestamp is. --push also pushes the SBOM (a
referrer of the image manifest) unless --no-referrers is given.

--sign-key signs the image in the layout right after the build (cosign's sha256-<hex>.sig tag;
the payload names the --push repository, else no repository: a directory is not an image
name), and --attest also attaches
the SPDX SBOM (spdxjson) and an SLSA v1 provenance (slsaprovenance1: image file and lockfile
digests, publishers, packages, rdctl's version, SOURCE_DATE_EPOCH) as signed attestations;
--push carries them along (skipped with --no-referrers). The key's password comes from
--password-file, RDCTL_PASSWORD, COSIGN_PASSWORD or the terminal.

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
    /// No progress on stderr (bars on a terminal, a line per layer otherwise).
    #[arg(long, short)]
    pub quiet: bool,
    /// Threads that read, inflate and check payloads and compress layers (default: one per
    /// CPU; the image is the same for any number).
    #[arg(long, value_name = "N", default_value_t = 0, hide_default_value = true)]
    pub threads: u32,
    /// With --push, push only the image, not its SBOM referrer.
    #[arg(long)]
    pub no_referrers: bool,
    /// Sign the built image with this private key (cosign's format or PKCS#8 PEM).
    #[arg(long, value_name = "FILE")]
    pub sign_key: Option<PathBuf>,
    /// With --sign-key, also attach the SBOM and an SLSA v1 provenance as signed
    /// attestations.
    #[arg(long, requires = "sign_key")]
    pub attest: bool,
    #[command(flatten)]
    pub password: super::trust::PasswordArgs,
    /// How to reach the registry for --push; the TLS flags also apply to https:// depots.
    #[command(flatten)]
    pub client: super::client::ClientArgs,
}

/// Runs `rdctl build`: the builder writes the layout (`--output`, or a temporary one), then
/// `--push` copies it to the registry with the same copy `rdctl push` runs, referrers (the
/// SBOM) included, so the image has one digest however it reaches the registry.
pub fn run(args: Args) -> anyhow::Result<ExitCode> {
    if args.output.is_none() && args.push.is_none() {
        bail!("give --output DIR, --push REF, or both");
    }
    let inputs = Inputs::read(&args)?;
    // A temporary layout lives until the push below is done.
    let (output, _tmp_out) = layout_dir(args.output.as_deref())?;
    let summary = build_layout(&args, output, inputs.source_date_epoch)?;
    let (signed, pushed) = publish(&args, &inputs, &summary)?;
    print(&args, &summary, &signed, &pushed)?;
    Ok(ExitCode::SUCCESS)
}

/// The layout directory: `--output`, or a temporary directory (returned too, so it lives as
/// long as the caller needs it).
fn layout_dir(output: Option<&Path>) -> anyhow::Result<(PathBuf, Option<tempfile::TempDir>)> {
    match output {
        Some(d) => Ok((d.to_owned(), None)),
        None => {
            let tmp = tempfile::Builder::new()
                .prefix("rdctl-build-")
                .tempdir()
                .context("cannot create a temporary directory for the layout to push")?;
            Ok((tmp.path().to_owned(), Some(tmp)))
        }
    }
}

/// Builds the image into `output`, with progress on stderr unless `--quiet`; prints the
/// builder's warnings.
fn build_layout(
    args: &Args,
    output: PathBuf,
    source_date_epoch: Option<u64>,
) -> anyhow::Result<builder::BuildSummary> {
    let progress: Option<Arc<dyn builder::Progress>> = (!args.quiet).then(|| {
        let p: Arc<dyn builder::Progress> = if std::io::stderr().is_terminal() {
            Arc::new(Bars::default())
        } else {
            Arc::new(Lines)
        };
        p
    });
    let opts = builder::BuildOptions {
        output,
        source_date_epoch,
        threads: args.threads,
        payload_cache: args.payload_cache.clone(),
        layer_cache: args.layer_cache.clone(),
        depot_tls: args.client.tls.depot_tls_warned()?,
        progress,
    };
    let summary = builder::build(&args.image_file, &opts)
        .with_context(|| format!("cannot build {}", args.image_file.display()))?;
    for w in &summary.warnings {
        eprintln!("{w}");
    }
    Ok(summary)
}

/// Signs (and attests) the built layout with `--sign-key` and pushes it to `--push`: the
/// signatures written and the references pushed.
fn publish(
    args: &Args,
    inputs: &Inputs,
    summary: &builder::BuildSummary,
) -> anyhow::Result<(Vec<Pushed>, Vec<String>)> {
    let push = &inputs.push;
    let tags: Vec<Tag> = match push {
        Some(ImageRef::Registry(target)) => match target.tag() {
            Some(t) => vec![t.clone()],
            None => summary
                .tags
                .iter()
                .map(|t| Tag::parse(t))
                .collect::<Result<_, _>>()
                .context("the image file's tags")?,
        },
        _ => Vec::new(),
    };
    let built = publish::Built {
        layout: summary.output.clone(),
        tag: Some(Tag::parse(&summary.tags[0]).context("the image file's first tag")?),
        manifest: summary.manifest.clone(),
    };
    // The repository the image is pushed to; without --push it has no registry name yet, and
    // the output directory is none (verify and cosign would show "for ./image"), so the
    // payload names nothing, as for a key that signs a bare digest.
    let docker_reference = match push {
        Some(ImageRef::Registry(r)) => format!("{}/{}", r.registry(), r.name()),
        _ => String::new(),
    };
    let statements = match (&inputs.sign_key, args.attest) {
        (Some(_), true) => {
            let p = super::provenance::Provenance {
                image_file: &args.image_file,
                source_date_epoch: inputs.source_date_epoch,
            };
            super::provenance::statements(&p, &docker_reference, summary).with_context(|| {
                format!(
                    "cannot attest the image built from {}",
                    args.image_file.display()
                )
            })?
        }
        _ => Vec::new(),
    };
    // Not `args.client.builder()`: the --insecure warning was given before the build. Signing
    // writes into the layout only, with a client that needs no settings.
    let client = match push {
        Some(_) => args
            .client
            .options()
            .builder(&registry_client::AuthEnv::current())
            .build(),
        None => registry_client::Client::builder().build(),
    }
    .context("cannot build the registry client")?;
    let quiet = args.quiet;
    let (signed, pushed) = crate::runtime::block_on(async {
        let signed = match &inputs.sign_key {
            Some(key) => publish::sign_built(&client, &built, &docker_reference, key, &statements)
                .await
                .with_context(|| {
                    format!(
                        "cannot sign the image built from {}",
                        args.image_file.display()
                    )
                })?,
            None => Vec::new(),
        };
        let pushed = match push {
            Some(ImageRef::Registry(target)) => {
                let before = |r: &registry_client::Reference| {
                    if !quiet {
                        eprintln!("pushing to {r}");
                    }
                };
                publish::push_built(&client, &built, target, &tags, !args.no_referrers, &before)
                    .await
                    .with_context(|| format!("cannot push {}", args.image_file.display()))?
            }
            _ => Vec::new(),
        };
        anyhow::Ok((signed, pushed))
    })??;
    Ok((signed, pushed.iter().map(ToString::to_string).collect()))
}

/// Prints what was built, signed and pushed: a JSON document with `--json`, else lines.
fn print(
    args: &Args,
    summary: &builder::BuildSummary,
    signed: &[Pushed],
    pushed: &[String],
) -> anyhow::Result<()> {
    // writeln, not println: a closed pipe (`| head`) is an error main() ends quietly on, not
    // a panic.
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut doc = serde_json::to_value(summary)?;
        if args.output.is_none() {
            doc["output"] = serde_json::Value::Null;
        }
        doc["pushed"] = serde_json::json!(pushed);
        doc["signed"] = serde_json::to_value(signed)?;
        serde_json::to_writer_pretty(&mut out, &doc)?;
        writeln!(out)?;
    } else {
        writeln!(out, "image    {}", summary.manifest)?;
        writeln!(out, "sbom     {}", summary.sbom)?;
        for l in &summary.layers {
            writeln!(
                out,
                "layer    {} ({} bytes) {}",
                l.digest, l.size, l.contents
            )?;
        }
        for p in signed {
            writeln!(out, "signed   {} ({} layer(s))", p.tag, p.layers)?;
        }
        for r in pushed {
            writeln!(out, "pushed   {r}")?;
        }
    }
    Ok(())
}
