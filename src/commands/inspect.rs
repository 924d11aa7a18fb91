//! `rdctl inspect` and `rdctl sbom`: what is inside an image, at a registry or in an OCI
//! layout, from `registry_client::inspect`.

use std::io::Write;
use std::process::ExitCode;

use anyhow::Context as _;
use registry_client::inspect::{ImageDetails, Inspection, Sbom, Sboms};
use registry_client::transfer::ImageRef;

use super::client::ClientArgs;
use super::output::{human_size, table};

/// Arguments of `rdctl inspect`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl inspect 127.0.0.1:5000/zones/demo:1.0
  rdctl inspect oci:./image:1.0
  rdctl inspect --json 127.0.0.1:5000/zones/demo@sha256:4f1c… | jq -r '.image.layers[].packages[]'

Shows the digest, media type, platform(s) (an index lists its manifests, each with its image's
size), created (an index's: its newest image's), total size,
the run configuration (entrypoint, cmd, env, user, working dir, stop signal, stop timeout,
labels, ports, volumes), each layer with its size, media type and the IPS packages it holds
(from the history rdctl build writes), and the referrers: SBOM, signatures and attestations
found through the referrers API, the referrers tag (sha256-<hex>) or cosign's
sha256-<hex>.sig/.att/.sbom tags. --json fields: reference, digest, media_type, size,
total_size, created, platforms, annotations, image {config_digest, config_size, platform,
created, config {entrypoint, cmd, env, user, working_dir, stop_signal, stop_timeout, labels,
exposed_ports, volumes}, layers [{digest, media_type, size, diff_id, created_by, packages}]},
manifests [{digest, media_type, size, total_size, platform, image}], referrers [{digest, media_type, size,
artifact_type, kind, found_by, tag, created}]. Exit status: 0 shown, 2 failed.")]
pub struct InspectArgs {
    /// The image: `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`, `oci:DIR[:TAG|@DIGEST]` or
    /// `DIR[:TAG|@DIGEST]` (a path starting with `/` or `.`, or a directory here).
    pub reference: String,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print the whole inspection as one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Arguments of `rdctl sbom`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl sbom 127.0.0.1:5000/zones/demo:1.0
  rdctl sbom --json oci:./image:1.0 | jq -r '.packages[].fmri'

Reads the image's SPDX SBOM (the application/spdx+json referrer rdctl build attaches) and lists
its IPS packages: name, publisher, version and FMRI. --json fields: subject, referrer, document,
name, packages [{fmri, name, publisher, version}]; for an index without an SBOM of its own, each
platform manifest's SBOM: {subject, platforms [{platform, subject, referrer, document, name,
packages}], without} (buildx's attestation manifests left out). --document prints the SPDX document itself,
byte for byte and verified (rdctl sbom --document REF | jq .). An image without an SBOM is an
error. Exit status: 0 listed, 2 no SBOM or it could not be read.")]
pub struct SbomArgs {
    /// The image: `[docker://]HOST[:PORT]/REPO[:TAG|@DIGEST]`, `oci:DIR[:TAG|@DIGEST]` or
    /// `DIR[:TAG|@DIGEST]` (a path starting with `/` or `.`, or a directory here).
    pub reference: String,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print the packages as one JSON document.
    #[arg(long, conflicts_with = "document")]
    pub json: bool,
    /// Print the SPDX document itself, byte for byte.
    #[arg(long)]
    pub document: bool,
}

/// Runs `rdctl inspect`.
pub fn inspect(args: InspectArgs) -> anyhow::Result<ExitCode> {
    let r = ImageRef::parse(&args.reference)?;
    let client = args.client.client()?;
    let i = crate::runtime::block_on(registry_client::inspect::inspect(&client, &r))?
        .with_context(|| format!("cannot inspect {r}"))?;
    let mut w = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut w, &i)?;
        writeln!(w)?;
    } else {
        print_inspection(&mut w, &i)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Runs `rdctl sbom`.
pub fn sbom(args: SbomArgs) -> anyhow::Result<ExitCode> {
    let r = ImageRef::parse(&args.reference)?;
    let client = args.client.client()?;
    if args.document {
        let (_, doc) = crate::runtime::block_on(registry_client::raw::sbom_document(&client, &r))?
            .with_context(|| format!("cannot read the SBOM of {r}"))?;
        return super::raw::write_stdout(&doc);
    }
    let s = crate::runtime::block_on(registry_client::inspect::sboms(&client, &r))?
        .with_context(|| format!("cannot read the SBOM of {r}"))?;
    let mut w = std::io::stdout().lock();
    if args.json {
        serde_json::to_writer_pretty(&mut w, &s)?;
        writeln!(w)?;
        return Ok(ExitCode::SUCCESS);
    }
    match &s {
        Sboms::One(s) => print_sbom(&mut w, s)?,
        Sboms::PerPlatform {
            subject,
            platforms,
            without,
        } => {
            writeln!(
                w,
                "index {subject}: {} platform(s) with an SBOM",
                platforms.len()
            )?;
            for p in platforms {
                writeln!(w, "\nplatform {}", p.platform.as_deref().unwrap_or("-"))?;
                print_sbom(&mut w, &p.sbom)?;
            }
            if !without.is_empty() {
                writeln!(w, "\nwithout an SBOM: {}", without.join(", "))?;
            }
        }
    }
    Ok(ExitCode::SUCCESS)
}

fn print_sbom(w: &mut impl Write, s: &Sbom) -> std::io::Result<()> {
    writeln!(
        w,
        "SBOM {} of {} ({} packages)",
        s.referrer,
        s.subject,
        s.packages.len()
    )?;
    let rows: Vec<Vec<String>> = s
        .packages
        .iter()
        .map(|p| {
            vec![
                p.name.clone(),
                p.publisher.clone().unwrap_or_else(|| "-".into()),
                p.version.clone().unwrap_or_else(|| "-".into()),
                p.fmri.clone().unwrap_or_else(|| "-".into()),
            ]
        })
        .collect();
    table(w, &["PACKAGE", "PUBLISHER", "VERSION", "FMRI"], &rows)
}

fn print_inspection(w: &mut impl Write, i: &Inspection) -> std::io::Result<()> {
    let kv = |w: &mut dyn Write, k: &str, v: &str| writeln!(w, "{:<14}{v}", format!("{k}:"));
    kv(w, "Reference", &i.reference)?;
    kv(w, "Digest", i.digest.as_str())?;
    kv(w, "Media type", &i.media_type)?;
    kv(w, "Platform", &i.platforms.join(", "))?;
    kv(w, "Created", i.created.as_deref().unwrap_or("-"))?;
    kv(
        w,
        "Total size",
        &format!("{} ({} bytes)", human_size(i.total_size), i.total_size),
    )?;
    if let Some(image) = &i.image {
        print_image(w, image)?;
    }
    if !i.manifests.is_empty() {
        writeln!(w, "\nManifests:")?;
        let rows: Vec<Vec<String>> = i
            .manifests
            .iter()
            .map(|m| {
                vec![
                    m.platform.clone().unwrap_or_else(|| "-".into()),
                    m.digest.to_string(),
                    human_size(m.total_size),
                    m.image
                        .as_ref()
                        .and_then(|x| x.created.clone())
                        .unwrap_or_else(|| "-".into()),
                ]
            })
            .collect();
        table(w, &["PLATFORM", "DIGEST", "SIZE", "CREATED"], &rows)?;
    }
    writeln!(w, "\nReferrers:")?;
    if i.referrers.is_empty() {
        writeln!(w, "  (none)")?;
    } else {
        let rows: Vec<Vec<String>> = i
            .referrers
            .iter()
            .map(|r| {
                vec![
                    r.kind.clone(),
                    r.digest.to_string(),
                    r.artifact_type
                        .clone()
                        .or_else(|| r.tag.clone())
                        .unwrap_or_else(|| "-".into()),
                    r.found_by.clone(),
                ]
            })
            .collect();
        table(w, &["KIND", "DIGEST", "TYPE/TAG", "FOUND BY"], &rows)?;
    }
    Ok(())
}

fn print_image(w: &mut impl Write, image: &ImageDetails) -> std::io::Result<()> {
    let c = &image.config;
    writeln!(w, "\nConfig ({}):", image.config_digest)?;
    let line = |w: &mut dyn Write, k: &str, v: String| {
        if v.is_empty() {
            Ok(())
        } else {
            writeln!(w, "  {:<14}{v}", format!("{k}:"))
        }
    };
    line(w, "Entrypoint", json_words(&c.entrypoint))?;
    line(w, "Cmd", json_words(&c.cmd))?;
    line(w, "User", c.user.clone().unwrap_or_default())?;
    line(w, "WorkingDir", c.working_dir.clone().unwrap_or_default())?;
    line(w, "StopSignal", c.stop_signal.clone().unwrap_or_default())?;
    line(
        w,
        "StopTimeout",
        c.stop_timeout.map(|t| format!("{t}s")).unwrap_or_default(),
    )?;
    line(w, "Ports", c.exposed_ports.join(" "))?;
    line(w, "Volumes", c.volumes.join(" "))?;
    for e in &c.env {
        line(w, "Env", e.clone())?;
    }
    for (k, v) in &c.labels {
        line(w, "Label", format!("{k}={v}"))?;
    }
    writeln!(w, "\nLayers:")?;
    let rows: Vec<Vec<String>> = image
        .layers
        .iter()
        .enumerate()
        .map(|(n, l)| {
            let from = if l.packages.is_empty() {
                l.created_by.clone().unwrap_or_else(|| "-".into())
            } else {
                l.packages.join(" ")
            };
            vec![
                (n + 1).to_string(),
                l.digest.to_string(),
                human_size(l.size),
                l.media_type.clone(),
                from,
            ]
        })
        .collect();
    table(w, &["#", "DIGEST", "SIZE", "MEDIA TYPE", "CONTENTS"], &rows)
}

fn json_words(v: &[String]) -> String {
    if v.is_empty() {
        String::new()
    } else {
        serde_json::to_string(v).unwrap_or_default()
    }
}
