//! `rdctl ls`, `rdctl tag`, `rdctl rm`: list, tag and remove images at a registry or in an
//! OCI layout, with `registry_client::manage`.
//! `rdctl rm` and how its refusals are explained are in [`rm`].

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context as _;
use registry_client::manage::TagRow;
use registry_client::transfer::ImageRef;
use validator::Tag;

use super::client::ClientArgs;
use super::output::{age, human_size, table};

mod rm;

pub use rm::{RmArgs, rm};

/// Arguments of `rdctl ls`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl ls 127.0.0.1:5000
  rdctl ls 127.0.0.1:5000/zones/demo
  rdctl ls --wide --all ./image
  rdctl ls --json 127.0.0.1:5000/zones/demo | jq -r '.tags[].tag'

With only a host: the repositories of its catalog (every Link page; --limit caps them). With a
repository or a layout: each tag (at most --limit) with its digest (short; --wide for full), total size,
platform and age (from the config's created). cosign's sha256-<hex>.sig/.att/.sbom tags, the
referrers tag schema's sha256-<hex> tags and a layout's untagged referrers are hidden unless
--all, which shows them with their kind. --json: {\"registry\", \"repositories\": [...]} or
{\"reference\", \"tags\": [{tag, kind, hidden, digest, media_type, size, platforms, created,
artifact_type}], \"hidden\": N}. Exit status: 0 listed, 2 failed.")]
pub struct LsArgs {
    /// `HOST[:PORT]`, `[docker://]HOST[:PORT]/REPO`, `oci:DIR` or `DIR` (a path starting with
    /// `/` or `.`, or a directory here).
    pub target: String,
    /// Show hidden tags too (signatures, attestations, SBOM tags, referrers).
    #[arg(long)]
    pub all: bool,
    /// Full digests.
    #[arg(long)]
    pub wide: bool,
    /// At most this many repositories (with only a host) or tags.
    #[arg(long, value_name = "N")]
    pub limit: Option<usize>,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `rdctl tag`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl tag 127.0.0.1:5000/zones/demo:1.0 stable
  rdctl tag 127.0.0.1:5000/zones/demo@sha256:4f1c… 1.0.1
  rdctl tag oci:./image:1.0 latest

At a registry the manifest's exact bytes are put under the new tag with the same media type, so
the digest stays; in a layout index.json gets an entry under the new tag. --json: {source,
tag, digest, media_type, size}. Exit status: 0 tagged, 2 failed (a DST that is not a tag,
[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}, is refused before anything is read).")]
pub struct TagArgs {
    /// The image: `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`, `oci:DIR[:TAG|@DIGEST]` or
    /// `DIR[:TAG|@DIGEST]` (a path starting with `/` or `.`, or a directory here).
    pub source: String,
    /// The new tag, in the same repository or layout.
    pub tag: String,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Runs `rdctl ls`.
pub fn ls(args: LsArgs) -> anyhow::Result<ExitCode> {
    let client = args.client.client()?;
    let bare = args
        .target
        .strip_prefix("docker://")
        .unwrap_or(&args.target)
        .trim_end_matches('/');
    let mut w = std::io::stdout().lock();
    let layout = ImageRef::names_layout(&args.target)?;
    if !layout && !bare.contains('/') {
        let host = bare;
        let repos = crate::runtime::block_on(client.catalog(
            host,
            registry_client::DEFAULT_PAGE_SIZE,
            args.limit,
        ))?
        .with_context(|| format!("cannot list the repositories of {host}"))?;
        if args.json {
            let doc = serde_json::json!({"registry": host, "repositories": repos});
            serde_json::to_writer_pretty(&mut w, &doc)?;
            writeln!(w)?;
        } else {
            for r in repos {
                writeln!(w, "{r}")?;
            }
        }
        return Ok(ExitCode::SUCCESS);
    }
    let r = if layout {
        ImageRef::parse_layout(&args.target)?
    } else {
        ImageRef::parse_registry(bare)?
    };
    let rows = crate::runtime::block_on(registry_client::manage::list_tags(
        &client, &r, args.all, args.limit,
    ))?
    .with_context(|| format!("cannot list {r}"))?;
    let hidden = rows.hidden;
    let shown: Vec<&TagRow> = rows.tags.iter().collect();
    if args.json {
        let doc = serde_json::json!({"reference": r.to_string(), "tags": shown, "hidden": hidden});
        serde_json::to_writer_pretty(&mut w, &doc)?;
        writeln!(w)?;
        return Ok(ExitCode::SUCCESS);
    }
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64);
    let table_rows: Vec<Vec<String>> = shown
        .iter()
        .map(|x| {
            let digest = if args.wide {
                x.digest.to_string()
            } else {
                x.digest.encoded().chars().take(12).collect()
            };
            let mut row = vec![
                x.tag.clone().unwrap_or_else(|| "<none>".into()),
                digest,
                human_size(x.size),
                if x.platforms.is_empty() {
                    "-".into()
                } else {
                    x.platforms.join(",")
                },
                x.created.as_deref().map_or("-".into(), |c| age(c, now)),
            ];
            if args.all {
                row.push(x.kind.clone());
            }
            row
        })
        .collect();
    let mut headers = vec!["TAG", "DIGEST", "SIZE", "PLATFORM", "CREATED"];
    if args.all {
        headers.push("KIND");
    }
    table(&mut w, &headers, &table_rows)?;
    if hidden > 0 {
        writeln!(
            w,
            "({hidden} signature, attestation, SBOM or referrers tag(s) hidden; --all shows them)"
        )?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `rdctl tag`.
pub fn tag(args: TagArgs) -> anyhow::Result<ExitCode> {
    let new = Tag::parse(&args.tag).map_err(|e| {
        anyhow::anyhow!(
            "{:?} is not a valid tag ({e}): a tag is 1 to 128 of A-Z a-z 0-9 _ . - and does not start with . or -; give only the tag, the repository is SRC's",
            args.tag
        )
    })?;
    let src = ImageRef::parse(&args.source)?;
    let client = args.client.client()?;
    let c = crate::runtime::block_on(registry_client::manage::tag(&client, &src, &new))?
        .with_context(|| format!("cannot tag {src} as {new}"))?;
    let mut w = std::io::stdout().lock();
    if args.json {
        let doc = serde_json::json!({
            "source": src.to_string(),
            "tag": new.as_str(),
            "digest": c.digest.to_string(),
            "media_type": c.media_type,
            "size": c.size,
        });
        serde_json::to_writer_pretty(&mut w, &doc)?;
        writeln!(w)?;
    } else {
        writeln!(w, "tagged {} ({}) as {new}", c.digest, c.media_type)?;
    }
    Ok(ExitCode::SUCCESS)
}
