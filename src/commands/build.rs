//! `rdctl build`: build an OCI image from an image file and its lockfile.

use std::io::{IsTerminal as _, Write as _};
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use anyhow::{Context, bail};
use registry_client::publish;
use registry_client::transfer::ImageRef;
use validator::Tag;

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
the payload names the --push repository, else the layout directory), and --attest also attaches
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
    // Parsed before the build, so a bad reference fails in a moment, not after it.
    let push = match &args.push {
        Some(r) => Some(push_target(r, &args.image_file)?),
        None => None,
    };
    let source_date_epoch = match std::env::var("SOURCE_DATE_EPOCH") {
        Ok(s) => Some(
            s.trim()
                .parse::<u64>()
                .with_context(|| format!("SOURCE_DATE_EPOCH={s:?} is not a number of seconds"))?,
        ),
        Err(_) => None,
    };
    // The key is read (and its password asked for) before the build, not after it.
    let sign_key = match &args.sign_key {
        Some(k) => Some(super::trust::load_signing_key(k, &args.password)?),
        None => None,
    };
    let tmp_out;
    let output = match &args.output {
        Some(d) => d.clone(),
        None => {
            tmp_out = tempfile::Builder::new()
                .prefix("rdctl-build-")
                .tempdir()
                .context("cannot create a temporary directory for the layout to push")?;
            tmp_out.path().to_owned()
        }
    };
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
        payload_cache: args.payload_cache,
        layer_cache: args.layer_cache,
        depot_tls: args.client.tls.depot_tls_warned(),
        progress,
    };
    let summary = builder::build(&args.image_file, &opts)
        .with_context(|| format!("cannot build {}", args.image_file.display()))?;
    for w in &summary.warnings {
        eprintln!("{w}");
    }
    let tags: Vec<Tag> = match &push {
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
    let docker_reference = match &push {
        Some(ImageRef::Registry(r)) => format!("{}/{}", r.registry(), r.name()),
        _ => summary.output.display().to_string(),
    };
    let statements = match (&sign_key, args.attest) {
        (Some(_), true) => {
            let p = super::provenance::Provenance {
                image_file: &args.image_file,
                source_date_epoch,
            };
            super::provenance::statements(&p, &docker_reference, &summary).with_context(|| {
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
    let client = match &push {
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
        let signed = match &sign_key {
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
        let pushed = match &push {
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
    let pushed: Vec<String> = pushed.iter().map(ToString::to_string).collect();
    // writeln, not println: a closed pipe (`| head`) is an error main() ends quietly on, not
    // a panic.
    let mut out = std::io::stdout().lock();
    if args.json {
        let mut doc = serde_json::to_value(&summary)?;
        if args.output.is_none() {
            doc["output"] = serde_json::Value::Null;
        }
        doc["pushed"] = serde_json::json!(pushed);
        doc["signed"] = serde_json::to_value(&signed)?;
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
        for p in &signed {
            writeln!(out, "signed   {} ({} layer(s))", p.tag, p.layers)?;
        }
        for r in &pushed {
            writeln!(out, "pushed   {r}")?;
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn layer_line(index: usize, total: usize, l: &builder::BuiltLayer) -> String {
    format!(
        "layer {}/{total} {} {} ({} bytes{})",
        index + 1,
        l.digest,
        l.contents,
        l.size,
        if l.cached {
            ", from the layer cache"
        } else {
            ""
        }
    )
}

/// Progress as plain lines on stderr (not a terminal: logs, CI).
#[derive(Debug)]
struct Lines;

impl builder::Progress for Lines {
    fn layer_finished(&self, index: usize, total: usize, layer: &builder::BuiltLayer) {
        eprintln!("{}", layer_line(index, total, layer));
    }
}

/// Progress as a bar per layer on a terminal (stderr), each replaced by its summary line.
#[derive(Debug, Default)]
struct Bars {
    bar: std::sync::Mutex<Option<indicatif::ProgressBar>>,
}

impl builder::Progress for Bars {
    fn layer_started(&self, index: usize, total: usize, contents: &str, bytes: u64) {
        let bar = indicatif::ProgressBar::with_draw_target(
            Some(bytes),
            indicatif::ProgressDrawTarget::stderr(),
        );
        bar.set_style(
            indicatif::ProgressStyle::with_template(
                "{prefix} {wide_msg} [{bar:30}] {bytes}/{total_bytes} {binary_bytes_per_sec}",
            )
            .expect("a valid template")
            .progress_chars("=> "),
        );
        bar.set_prefix(format!("layer {}/{total}", index + 1));
        bar.set_message(contents.to_owned());
        *self.bar.lock().unwrap_or_else(|e| e.into_inner()) = Some(bar);
    }
    fn layer_bytes(&self, n: u64) {
        if let Some(b) = &*self.bar.lock().unwrap_or_else(|e| e.into_inner()) {
            b.inc(n);
            // The total is an estimate (PAX records): never show more done than the total.
            if b.length().is_some_and(|len| b.position() > len) {
                b.set_length(b.position());
            }
        }
    }
    fn layer_finished(&self, index: usize, total: usize, layer: &builder::BuiltLayer) {
        let line = layer_line(index, total, layer);
        match self.bar.lock().unwrap_or_else(|e| e.into_inner()).take() {
            Some(b) => {
                b.finish_and_clear();
                eprintln!("{line}");
            }
            None => eprintln!("{line}"),
        }
    }
}

/// The `--push` destination: a reference, or a registry host alone, whose repository is then
/// the image file's `name` (as docs/image-file.md says).
fn push_target(arg: &str, image_file: &std::path::Path) -> anyhow::Result<ImageRef> {
    let host = arg.strip_prefix("docker://").unwrap_or(arg);
    if !host.contains('/') && registry_client::looks_like_host(host) {
        let image = builder::ImageFile::load(image_file)
            .with_context(|| format!("cannot read {}", image_file.display()))?;
        let Some(name) = image.name else {
            bail!(
                "--push {arg}: {host} is a registry host without a repository: give one (--push {host}/site/web) or set `name` in {}",
                image_file.display()
            );
        };
        let full = format!("{host}/{name}");
        return ImageRef::parse_registry(&full).with_context(|| {
            format!(
                "--push {arg} with `name = {name:?}` from {}",
                image_file.display()
            )
        });
    }
    ImageRef::parse_registry(arg).with_context(|| format!("--push {arg}"))
}
