//! `rdctl manifest get`, `rdctl blob get`, `rdctl config`, `rdctl digest`: raw bytes of an
//! image's parts, as `crane manifest|blob|config|digest` print them, from
//! `registry_client::raw`, verified.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::Context as _;
use registry_client::transfer::ImageRef;
use tokio::io::AsyncReadExt as _;
use validator::Platform;

use super::client::ClientArgs;

/// `rdctl manifest`.
#[derive(Debug, clap::Subcommand)]
pub enum ManifestCommand {
    /// Print a manifest or index byte for byte.
    Get(ManifestGetArgs),
}

/// `rdctl blob`.
#[derive(Debug, clap::Subcommand)]
pub enum BlobCommand {
    /// Write a blob, verified while it streams.
    Get(BlobGetArgs),
}

/// Arguments of `rdctl manifest get`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl manifest get 127.0.0.1:5000/zones/base:1.0 | jq .
  rdctl manifest get --platform illumos/amd64 127.0.0.1:5000/zones/base:1.0
  rdctl manifest get oci:./image:1.0 > manifest.json

Prints the manifest or index exactly as stored (its bytes hash to its digest), verified; with
--platform an index is followed down to that platform's manifest. Exit status: 0 printed,
2 failed.")]
pub struct ManifestGetArgs {
    /// The image: `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`, `oci:DIR[:TAG|@DIGEST]` or
    /// `DIR[:TAG|@DIGEST]`.
    pub reference: String,
    /// Follow an index down to this platform's manifest (`os/arch[/variant]`).
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `rdctl blob get`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl blob get 127.0.0.1:5000/zones/base@sha256:<hex> -o layer.tar.gz
  rdctl blob get oci:./image@sha256:<hex> | tar tzf -

Streams the blob, verified against its digest and size as it goes. With -o the bytes go to a
temporary file beside FILE that is renamed to FILE only once they verified; to stdout they are
written as they come, and a mismatch at the end exits 2 with the digests. Exit status: 0
written, 2 failed.")]
pub struct BlobGetArgs {
    /// The blob: `[docker://]HOST[:PORT]/REPO@DIGEST` or `oci:DIR@DIGEST`.
    pub reference: String,
    /// Write to this file instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `rdctl config`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl config 127.0.0.1:5000/zones/base:1.0 | jq .config
  rdctl config --platform illumos/amd64 oci:./image:1.0

Prints the image config blob byte for byte, verified. An index must be narrowed with
--platform unless it lists one manifest. Exit status: 0 printed, 2 failed.")]
pub struct ConfigArgs {
    /// The image: `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`, `oci:DIR[:TAG|@DIGEST]` or
    /// `DIR[:TAG|@DIGEST]`.
    pub reference: String,
    /// The platform's manifest of an index (`os/arch[/variant]`).
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `rdctl digest`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl digest 127.0.0.1:5000/zones/base:1.0
  rdctl pull 127.0.0.1:5000/zones/base@$(rdctl digest 127.0.0.1:5000/zones/base:1.0) ./image

Prints the digest of the manifest or index the reference names (with --platform, of that
platform's manifest), read and verified. Exit status: 0 printed, 2 failed.")]
pub struct DigestArgs {
    /// The image: `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`, `oci:DIR[:TAG|@DIGEST]` or
    /// `DIR[:TAG|@DIGEST]`.
    pub reference: String,
    /// The platform's manifest of an index (`os/arch[/variant]`).
    #[arg(long, value_name = "OS/ARCH")]
    pub platform: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

fn platform(p: &Option<String>) -> anyhow::Result<Option<Platform>> {
    p.as_deref()
        .map(|s| {
            Platform::parse(s)
                .with_context(|| format!("--platform {s:?}: expected os/arch[/variant]"))
        })
        .transpose()
}

/// Runs `rdctl manifest`.
pub fn manifest(cmd: ManifestCommand) -> anyhow::Result<ExitCode> {
    let ManifestCommand::Get(args) = cmd;
    let r = ImageRef::parse(&args.reference)?;
    let platform = platform(&args.platform)?;
    let client = args.client.client()?;
    let (_, bytes) = crate::runtime::block_on(registry_client::raw::manifest(
        &client,
        &r,
        platform.as_ref(),
    ))?
    .with_context(|| format!("cannot read the manifest of {r}"))?;
    write_stdout(&bytes)
}

/// Writes a document to stdout byte for byte (what was verified is what is printed).
pub(crate) fn write_stdout(bytes: &[u8]) -> anyhow::Result<ExitCode> {
    let mut w = std::io::stdout().lock();
    w.write_all(bytes)?;
    w.flush()?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `rdctl config`.
pub fn config(args: ConfigArgs) -> anyhow::Result<ExitCode> {
    let r = ImageRef::parse(&args.reference)?;
    let platform = platform(&args.platform)?;
    let client = args.client.client()?;
    let (_, bytes) =
        crate::runtime::block_on(registry_client::raw::config(&client, &r, platform.as_ref()))?
            .with_context(|| format!("cannot read the config of {r}"))?;
    write_stdout(&bytes)
}

/// Runs `rdctl digest`.
pub fn digest(args: DigestArgs) -> anyhow::Result<ExitCode> {
    let r = ImageRef::parse(&args.reference)?;
    let platform = platform(&args.platform)?;
    let client = args.client.client()?;
    let (c, _) = crate::runtime::block_on(registry_client::raw::manifest(
        &client,
        &r,
        platform.as_ref(),
    ))?
    .with_context(|| format!("cannot resolve {r}"))?;
    let mut w = std::io::stdout().lock();
    writeln!(w, "{}", c.digest)?;
    Ok(ExitCode::SUCCESS)
}

/// Runs `rdctl blob`.
pub fn blob(cmd: BlobCommand) -> anyhow::Result<ExitCode> {
    let BlobCommand::Get(args) = cmd;
    let r = ImageRef::parse(&args.reference)?;
    let client = args.client.client()?;
    crate::runtime::block_on(async {
        let (c, body) = registry_client::raw::open_blob(&client, &r).await?;
        match &args.output {
            Some(path) => write_verified(body, path)
                .await
                .with_context(|| format!("cannot write blob {} to {}", c.digest, path.display())),
            None => {
                let mut out = std::io::stdout().lock();
                stream(body, &mut out)
                    .await
                    .with_context(|| format!("blob {} to stdout", c.digest))?;
                out.flush()?;
                Ok(())
            }
        }
    })?
    .with_context(|| format!("cannot get {r}"))?;
    Ok(ExitCode::SUCCESS)
}

/// Copies `body` to `out`; an error at the end means the bytes did not verify.
async fn stream(
    mut body: registry_client::raw::VerifiedBlob,
    out: &mut impl std::io::Write,
) -> anyhow::Result<()> {
    let mut buf = vec![0u8; 64 << 10];
    loop {
        let n = body.read(&mut buf).await?;
        if n == 0 {
            return Ok(());
        }
        out.write_all(&buf[..n])?;
    }
}

/// Streams `body` into a temporary file beside `path`, renamed to `path` only once every byte
/// verified; removed otherwise.
pub(crate) async fn write_verified(
    body: registry_client::raw::VerifiedBlob,
    path: &Path,
) -> anyhow::Result<()> {
    let dir = match path.parent() {
        Some(d) if !d.as_os_str().is_empty() => d.to_owned(),
        _ => PathBuf::from("."),
    };
    let tmp = tempfile::NamedTempFile::new_in(&dir)
        .with_context(|| format!("cannot create a temporary file in {}", dir.display()))?;
    let mut out = std::io::BufWriter::new(tmp);
    stream(body, &mut out).await?;
    let tmp = out.into_inner().map_err(|e| e.into_error())?;
    tmp.as_file().sync_all()?;
    tmp.persist(path)
        .with_context(|| format!("cannot rename into {}", path.display()))?;
    Ok(())
}
