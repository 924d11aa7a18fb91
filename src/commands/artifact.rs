//! `rdctl artifact put|get`: oras-style artifacts (files as layers named by their title, the
//! empty config, an `artifactType`, an optional `subject`), from `registry_client::raw`.

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use registry_client::raw::{ArtifactFile, DEFAULT_FILE_MEDIA_TYPE};
use registry_client::transfer::ImageRef;

use super::client::ClientArgs;

/// `rdctl artifact`.
#[derive(Debug, clap::Subcommand)]
pub enum Command {
    /// Push files as an artifact (as `oras push` / `oras attach` do).
    Put(PutArgs),
    /// Write an artifact's files into a directory (as `oras pull` does).
    Get(GetArgs),
}

/// Arguments of `rdctl artifact put`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl artifact put --artifact-type application/vnd.example.notes 127.0.0.1:5000/docs/notes:1 notes.txt
  rdctl artifact put --artifact-type application/spdx+json \\
      --subject 127.0.0.1:5000/zones/base:1.0 127.0.0.1:5000/zones/base sbom.spdx.json:application/spdx+json

Each FILE becomes a layer titled with its file name (org.opencontainers.image.title), of media
type application/vnd.oci.image.layer.v1.tar unless written FILE:MEDIA_TYPE; the config is the
empty {} (application/vnd.oci.empty.v1+json), as oras writes. With --subject the artifact is a
referrer of that image (same repository), found through the referrers API or the referrers tag;
without a tag on REF it is pushed by digest. Prints the manifest's digest. Exit status: 0
pushed, 2 failed.")]
pub struct PutArgs {
    /// Where to push: `[docker://]HOST[:PORT]/REPO[:TAG]`.
    pub reference: String,
    /// The files, `PATH[:MEDIA_TYPE]`.
    #[arg(required = true)]
    pub files: Vec<String>,
    /// The manifest's `artifactType`.
    #[arg(long, value_name = "TYPE")]
    pub artifact_type: String,
    /// The image the artifact refers to: `[docker://]HOST[:PORT]/REPO(:TAG|@DIGEST)`.
    #[arg(long, value_name = "REF")]
    pub subject: Option<String>,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// Arguments of `rdctl artifact get`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl artifact get 127.0.0.1:5000/docs/notes:1 -o ./notes
  rdctl artifact get 127.0.0.1:5000/zones/base@sha256:<hex> -o ./sbom

Writes every layer that has a title (org.opencontainers.image.title) into DIR (created when
missing) under that name, each verified while it streams and renamed into place only once it
matched. A title with directories (sub/inner.txt, as oras push writes it) is restored under
DIR with its directories, as oras pull does; a title that would leave DIR (absolute, or with a
.. component) is refused before anything is written. Layers without a title are listed and
left out, as oras does. Exit status: 0 written, 2 failed.")]
pub struct GetArgs {
    /// The artifact: `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]` or `oci:DIR[:TAG|@DIGEST]`.
    pub reference: String,
    /// The directory to write the files into.
    #[arg(short, long, value_name = "DIR")]
    pub output: PathBuf,
    #[command(flatten)]
    pub client: ClientArgs,
}

/// `PATH[:MEDIA_TYPE]`, where a media type has a `/` and the part before the last `:` names
/// a file.
fn file_arg(arg: &str) -> anyhow::Result<ArtifactFile> {
    let (path, media_type) = match arg.rsplit_once(':') {
        Some((p, mt)) if mt.contains('/') && !p.is_empty() => (p, mt),
        _ => (arg, DEFAULT_FILE_MEDIA_TYPE),
    };
    let path = PathBuf::from(path);
    if !path.is_file() {
        bail!("{arg}: {} is not a file", path.display());
    }
    let title = path
        .file_name()
        .and_then(|n| n.to_str())
        .filter(|t| registry_client::raw::safe_title(t))
        .with_context(|| format!("{arg}: {} has no usable file name", path.display()))?
        .to_owned();
    Ok(ArtifactFile {
        path,
        title,
        media_type: media_type.to_owned(),
    })
}

/// Runs `rdctl artifact`.
pub fn run(cmd: Command) -> anyhow::Result<ExitCode> {
    match cmd {
        Command::Put(args) => put(args),
        Command::Get(args) => get(args),
    }
}

fn put(args: PutArgs) -> anyhow::Result<ExitCode> {
    let ImageRef::Registry(dst) = ImageRef::parse_registry(&args.reference)? else {
        unreachable!("parse_registry returns registry references")
    };
    let subject = match &args.subject {
        Some(s) => match ImageRef::parse_registry(s).with_context(|| format!("--subject {s}"))? {
            ImageRef::Registry(r) => Some(r),
            ImageRef::Layout(_) => unreachable!("parse_registry returns registry references"),
        },
        None => None,
    };
    let files = args
        .files
        .iter()
        .map(|f| file_arg(f))
        .collect::<anyhow::Result<Vec<_>>>()?;
    let mut titles: Vec<&str> = files.iter().map(|f| f.title.as_str()).collect();
    titles.sort_unstable();
    if let Some(w) = titles.windows(2).find(|w| w[0] == w[1]) {
        bail!("two files are named {}: titles must differ", w[0]);
    }
    let client = args.client.client()?;
    let c = crate::runtime::block_on(registry_client::raw::put_artifact(
        &client,
        &dst,
        &args.artifact_type,
        subject.as_ref(),
        &files,
    ))?
    .with_context(|| format!("cannot push the artifact to {dst}"))?;
    writeln!(std::io::stdout().lock(), "{}", c.digest)?;
    Ok(ExitCode::SUCCESS)
}

fn get(args: GetArgs) -> anyhow::Result<ExitCode> {
    let r = ImageRef::parse(&args.reference)?;
    let client = args.client.client()?;
    std::fs::create_dir_all(&args.output)
        .with_context(|| format!("cannot create {}", args.output.display()))?;
    let written = crate::runtime::block_on(async {
        let (root, artifact_type, layers) = registry_client::raw::artifact(&client, &r).await?;
        let mut lines = vec![format!(
            "{} {}",
            root.digest,
            artifact_type.as_deref().unwrap_or("-")
        )];
        // Every title is checked before anything is written, so a refused one leaves nothing
        // half restored.
        let mut targets = Vec::with_capacity(layers.len());
        for l in &layers {
            let Some(title) = &l.title else {
                targets.push(None);
                continue;
            };
            let Some(rel) = registry_client::raw::title_path(title) else {
                bail!(
                    "layer {} is titled {title:?}, which would be written outside {}: refused (a title is a path inside the output directory)",
                    l.content.digest,
                    args.output.display()
                );
            };
            targets.push(Some(rel));
        }
        for (l, rel) in layers.iter().zip(targets) {
            let Some(rel) = rel else {
                lines.push(format!(
                    "skipped {} ({} bytes): no title",
                    l.content.digest, l.content.size
                ));
                continue;
            };
            let path = inside(&args.output, &rel)?;
            let body = registry_client::raw::open_layer(&client, &r, &l.content).await?;
            super::raw::write_verified(body, &path)
                .await
                .with_context(|| format!("cannot write {}", path.display()))?;
            lines.push(format!(
                "wrote {} ({} bytes, {})",
                path.display(),
                l.content.size,
                l.content.digest
            ));
        }
        anyhow::Ok(lines)
    })?
    .with_context(|| format!("cannot get the artifact {r}"))?;
    let mut w = std::io::stdout().lock();
    for line in written {
        writeln!(w, "{line}")?;
    }
    Ok(ExitCode::SUCCESS)
}

/// `out/rel`, with the directories between created; refused when one of them resolves
/// outside `out` (a symbolic link already there), so a title never writes elsewhere.
fn inside(out: &Path, rel: &Path) -> anyhow::Result<PathBuf> {
    let path = out.join(rel);
    let Some(parent) = path.parent() else {
        return Ok(path);
    };
    std::fs::create_dir_all(parent)
        .with_context(|| format!("cannot create {}", parent.display()))?;
    let root = out
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", out.display()))?;
    let real = parent
        .canonicalize()
        .with_context(|| format!("cannot resolve {}", parent.display()))?;
    if !real.starts_with(&root) {
        bail!(
            "{} resolves to {}, outside {}: refused",
            parent.display(),
            real.display(),
            out.display()
        );
    }
    Ok(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_arguments_take_an_optional_media_type() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("notes.txt");
        std::fs::write(&f, "x").unwrap();
        let a = file_arg(&format!("{}:text/plain", f.display())).unwrap();
        assert_eq!(
            (a.title.as_str(), a.media_type.as_str()),
            ("notes.txt", "text/plain")
        );
        let a = file_arg(&f.display().to_string()).unwrap();
        assert_eq!(a.media_type, DEFAULT_FILE_MEDIA_TYPE);
        let e = file_arg(&dir.path().join("missing").display().to_string()).unwrap_err();
        assert!(e.to_string().contains("is not a file"), "{e}");
    }
}
