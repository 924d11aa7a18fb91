//! `rdctl push`, `rdctl pull`, `rdctl copy`: copy images between OCI image layouts and
//! registries with `registry_client::transfer::copy`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context as _;
use registry_client::transfer::{CopyOptions, CopyReport, ImageRef};
use validator::Platform;

use super::client::ClientArgs;

/// Options every transfer command takes.
#[derive(Debug, clap::Args)]
pub struct Common {
    /// Copy only this platform's manifest out of an index (`os/arch[/variant]`); it becomes
    /// the tagged root at the destination.
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Option<String>,
    /// Copy only the image, not its referrers (SBOM, signatures, attestations: the manifests
    /// whose subject is the image or one of its manifests, and theirs).
    #[arg(long)]
    pub no_referrers: bool,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print a JSON summary (root digest, tag, manifests, referrers and blobs copied or
    /// skipped).
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `rdctl push`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl push ./image:1.0 127.0.0.1:5000/zones/base:1.0
  rdctl push --platform illumos/amd64 ./image:1.0 registry.example/zones/base
  rdctl push --json ./image:1.0 127.0.0.1:5000/zones/base:1.0 | jq -r .root.digest
  rdctl push --ca-file ./ca.pem --auth-file ./auth.json ./image:1.0 reg.example:5443/zones/base
  rdctl push --no-referrers ./image:1.0 127.0.0.1:5000/zones/base:1.0

Without a tag on REF the layout's tag is used. The image's referrers (the SBOM rdctl build
attaches, signatures, attestations) are pushed too, found in the layout's index.json by their
subject; a registry without the referrers API gets the referrers tag (sha256-<hex>) instead. Credentials come from `rdctl login` (see
rdctl login --help for the files read); a 401 names the registry and asks to log in. On a
terminal each blob gets a progress bar on stderr (none with --json or when stderr is not a
terminal). Ctrl-C says which blobs are kept; the same command again resumes. Exit status: 0
pushed, 2 failed, 130 interrupted.")]
pub struct PushArgs {
    /// The OCI image layout, `DIR[:TAG]` (the tag is an org.opencontainers.image.ref.name).
    pub layout: String,
    /// The destination, `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`.
    pub reference: String,
    #[command(flatten)]
    pub common: Common,
}

/// Arguments of `rdctl pull`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl pull 127.0.0.1:5000/zones/base:1.0 ./image
  rdctl pull --platform illumos/amd64 registry.example/zones/base:1.0 ./image:base
  rdctl pull --cert-dir ./certs.d reg.example:5443/zones/base:1.0 ./image
  rdctl pull --no-referrers 127.0.0.1:5000/zones/base:1.0 ./image

Without a tag on LAYOUT the reference's tag names the index.json entry. Referrers (SBOM,
signatures) come along as untagged index.json entries with their artifactType. A Docker
schema 2 manifest or manifest list is written with OCI media types, as `skopeo copy` to oci:
does (skopeo, umoci and other OCI tools find a tag in index.json only on an OCI manifest or
index): its config and layers stay byte for byte, its digest changes, each change is printed
(\"converted\"), and its referrers and cosign tags, which name the Docker digest, stay behind;
--keep-media-types writes it byte-exact instead (digests kept; rdctl reads it, skopeo's oci:
transport does not). On a terminal
each blob gets a progress bar on stderr; ctrl-c keeps the complete blobs and the part of a
download that arrived, and the same command again resumes. Exit status: 0 pulled, 2 failed,
130 interrupted.")]
pub struct PullArgs {
    /// The source, `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`.
    pub reference: String,
    /// The OCI image layout to write, `DIR[:TAG]` (created when missing).
    pub layout: String,
    #[command(flatten)]
    pub media_types: MediaTypes,
    #[command(flatten)]
    pub common: Common,
}

/// What a layout destination gets of a Docker schema 2 image.
#[derive(Debug, clap::Args)]
pub struct MediaTypes {
    /// Write Docker schema 2 manifests and manifest lists into a layout byte-exact, digests
    /// kept (by default they get OCI media types and new digests, as skopeo writes oci:)
    #[arg(long)]
    pub keep_media_types: bool,
}

/// Arguments of `rdctl copy`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl copy 127.0.0.1:5000/a:1 127.0.0.1:5001/b:1
  rdctl copy oci:./image:1.0 docker://127.0.0.1:5000/zones/base:1.0
  rdctl copy --platform illumos/amd64 docker://reg.example/base:1 oci:./image:1
  rdctl copy --no-referrers 127.0.0.1:5000/a:1 127.0.0.1:5001/b:1

Referrers are copied too (recursively) unless --no-referrers is given. Into a layout a Docker
schema 2 image gets OCI media types and new digests, as with rdctl pull (--keep-media-types
keeps it byte-exact). On a terminal each blob
gets a progress bar on stderr; after ctrl-c the same command again resumes. Exit status: 0
copied, 2 failed, 130 interrupted.")]
pub struct CopyArgs {
    /// The source: `oci:DIR[:TAG|@DIGEST]` or `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`.
    pub source: String,
    /// The destination, in the same forms.
    pub destination: String,
    #[command(flatten)]
    pub media_types: MediaTypes,
    #[command(flatten)]
    pub common: Common,
}

/// Runs `rdctl push`.
pub fn push(args: PushArgs) -> anyhow::Result<ExitCode> {
    let src = ImageRef::parse_layout(&args.layout)?;
    let dst = ImageRef::parse_registry(&args.reference)?;
    run("push", &src, &dst, &args.common, false)
}

/// Runs `rdctl pull`.
pub fn pull(args: PullArgs) -> anyhow::Result<ExitCode> {
    let src = ImageRef::parse_registry(&args.reference)?;
    let dst = ImageRef::parse_layout(&args.layout)?;
    run(
        "pull",
        &src,
        &dst,
        &args.common,
        !args.media_types.keep_media_types,
    )
}

/// Runs `rdctl copy`.
pub fn copy(args: CopyArgs) -> anyhow::Result<ExitCode> {
    let src = ImageRef::parse(&args.source)?;
    let dst = ImageRef::parse(&args.destination)?;
    run(
        "copy",
        &src,
        &dst,
        &args.common,
        !args.media_types.keep_media_types,
    )
}

/// Copies `src` to `dst`; `oci_media_types`: a layout destination gets Docker documents with
/// OCI media types ([`CopyOptions::oci_media_types`]).
fn run(
    verb: &str,
    src: &ImageRef,
    dst: &ImageRef,
    common: &Common,
    oci_media_types: bool,
) -> anyhow::Result<ExitCode> {
    let platform = match &common.platform {
        Some(s) => Some(
            Platform::parse(s)
                .with_context(|| format!("--platform {s:?}: expected os/arch[/variant]"))?,
        ),
        None => None,
    };
    let client = common.client.client()?;
    let bars = match dst {
        ImageRef::Registry(_) => {
            super::progress::Bars::new(common.json).midway(super::progress::UPLOAD_MIDWAY)
        }
        ImageRef::Layout(_) => super::progress::Bars::new(common.json),
    };
    let opts = CopyOptions {
        platform,
        referrers: !common.no_referrers,
        listed_referrers: None,
        oci_media_types,
    };
    let copied = crate::runtime::block_on(bars.until_interrupted(
        &dst.to_string(),
        true,
        registry_client::transfer::copy_with_progress(&client, src, dst, &opts, &bars),
    ))?;
    let Some(copied) = copied else {
        return Ok(ExitCode::from(super::progress::INTERRUPTED));
    };
    let report = copied.with_context(|| format!("cannot {verb} {src} to {dst}"))?;
    if common.json {
        print_json(src, dst, &report)?;
    } else {
        print(src, dst, &report)?;
    }
    Ok(ExitCode::SUCCESS)
}

fn print_json(src: &ImageRef, dst: &ImageRef, r: &CopyReport) -> anyhow::Result<()> {
    let content = |c: &registry_client::transfer::Content| {
        serde_json::json!({
            "digest": c.digest.to_string(),
            "media_type": c.media_type,
            "size": c.size,
        })
    };
    let all = |v: &[registry_client::transfer::Content]| v.iter().map(content).collect::<Vec<_>>();
    let doc = serde_json::json!({
        "source": src.to_string(),
        "destination": dst.to_string(),
        "root": content(&r.root),
        "tag": r.tag,
        "manifests": all(&r.manifests),
        "referrers": all(&r.referrers),
        "manifests_present": all(&r.manifests_present),
        "tag_written": r.tag_written,
        "blobs_copied": all(&r.blobs_copied),
        "blobs_skipped": all(&r.blobs_skipped),
        "bytes_copied": r.bytes_copied(),
        "bytes_skipped": r.bytes_skipped(),
        "converted": r.converted.iter().map(|c| serde_json::json!({
            "from": content(&c.from),
            "to": content(&c.to),
        })).collect::<Vec<_>>(),
    });
    let mut w = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut w, &doc)?;
    writeln!(w)?;
    Ok(())
}

fn print(src: &ImageRef, dst: &ImageRef, r: &CopyReport) -> anyhow::Result<()> {
    let stdout = std::io::stdout();
    let mut w = stdout.lock();
    for b in &r.blobs_copied {
        writeln!(w, "copied  blob {} ({} bytes)", b.digest, b.size)?;
    }
    for b in &r.blobs_skipped {
        writeln!(
            w,
            "skipped blob {} ({} bytes, already there)",
            b.digest, b.size
        )?;
    }
    for m in &r.manifests {
        writeln!(
            w,
            "wrote   manifest {} ({}, {} bytes)",
            m.digest, m.media_type, m.size
        )?;
    }
    for m in &r.referrers {
        writeln!(
            w,
            "wrote   referrer {} ({}, {} bytes)",
            m.digest, m.media_type, m.size
        )?;
    }
    for c in &r.converted {
        writeln!(
            w,
            "converted {} ({}) to {} ({}): OCI media types, as skopeo writes oci:; the digest changed, so its referrers and signatures stay behind (--keep-media-types keeps it as it is)",
            c.from.digest, c.from.media_type, c.to.digest, c.to.media_type
        )?;
    }
    for m in &r.manifests_present {
        writeln!(
            w,
            "present manifest {} ({}, {} bytes, already there)",
            m.digest, m.media_type, m.size
        )?;
    }
    writeln!(
        w,
        "{src} -> {dst}: {} {}{}; {} manifest(s) written, {} already there, {} referrer(s) written, {} blob(s) copied ({} bytes), {} blob(s) skipped ({} bytes)",
        r.root.media_type,
        r.root.digest,
        r.tag
            .as_deref()
            .map(|t| {
                if r.tag_written {
                    format!(" tagged {t}")
                } else {
                    format!(" tagged {t} (already)")
                }
            })
            .unwrap_or_default(),
        r.manifests.len(),
        r.manifests_present.len(),
        r.referrers.len(),
        r.blobs_copied.len(),
        r.bytes_copied(),
        r.blobs_skipped.len(),
        r.bytes_skipped(),
    )?;
    Ok(())
}
