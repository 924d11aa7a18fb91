//! `rdctl rm`: remove a tag or a manifest (with what only it holds), or print the plan with
//! `--dry-run`; a refused DELETE is explained in the user's terms.

use std::io::Write;
use std::process::ExitCode;

use anyhow::{Context as _, bail};
use registry_client::manage::RemovalPlan;
use registry_client::transfer::{ImageRef, TransferError};
use registry_client::{ClientError, DeleteRefusal};

use crate::commands::client::ClientArgs;
use crate::commands::output::{human_size, table};

/// Arguments of `rdctl rm`.
#[derive(Debug, clap::Args)]
#[command(after_help = "Examples:
  rdctl rm 127.0.0.1:5000/zones/demo:old
  rdctl rm --dry-run 127.0.0.1:5000/zones/demo@sha256:4f1c…
  rdctl rm --prune oci:./image:old

REF with a tag deletes the tag; REF@digest deletes the manifest (and every tag naming it);
our registry refuses to delete a manifest an index in the repository still lists
(MANIFEST_REFERENCED, naming the index) unless --force, and --dry-run refuses it the same way
when another tag reaches such an index (--dry-run --force shows the plan). rm
prints what garbage collection can then reclaim: the manifest if no other tag names it, its
referrers, and the blobs nothing else in the repository references (found by reading every
other tag; over 200 tags the answer is an estimate). At our registry, rdctl registry gc
--delete-untagged reclaims it. A registry that deletes only by digest (CNCF distribution 2.8)
refuses a tag: delete REF@digest instead. Deleting REF@digest also deletes the tags that hang
its signatures and referrers on it (sha256-<hex>, and cosign's .sig/.att/.sbom), so a registry
without the referrers API can reclaim them too. In a layout the tag's index.json entry goes (and the
untagged referrer entries of a manifest no tag names any more; by digest also its signature and
referrers tags, as at a registry); --prune deletes the blob files
nothing references. --json: {reference, tag, digest, media_type, still_tagged, tags_removed,
attached_tags, listed_by, referrers,
reclaimable [{digest, size, kind}], reclaimable_bytes, tags_examined, tags_total, estimate,
pruned, dry_run, removed}. Exit status: 0 removed (or planned with --dry-run), 2 failed.")]
pub struct RmArgs {
    /// `[docker://]HOST[:PORT]/REPO:TAG`, `…/REPO@DIGEST`, `[oci:]DIR:TAG` or `[oci:]DIR@DIGEST` (every index.json entry naming it; without `oci:`, DIR starts with `/` or `.` or is a directory here).
    pub reference: String,
    /// Only print what would be removed and reclaimed.
    #[arg(long)]
    pub dry_run: bool,
    /// Layout only: delete the blob files nothing references any more.
    #[arg(long)]
    pub prune: bool,
    /// Delete a manifest (REF@DIGEST) although an index in the repository still lists it
    /// (our registry refuses that with MANIFEST_REFERENCED otherwise; the index then names a
    /// manifest that is gone).
    #[arg(long)]
    pub force: bool,
    #[command(flatten)]
    pub client: ClientArgs,
    /// Print one JSON document.
    #[arg(long)]
    pub json: bool,
}

/// Runs `rdctl rm`.
pub fn rm(args: RmArgs) -> anyhow::Result<ExitCode> {
    let r = ImageRef::parse(&args.reference)?;
    if args.prune && !matches!(r, ImageRef::Layout(_)) {
        bail!(
            "--prune is for layouts (oci:DIR:TAG); a registry's garbage collection reclaims its blobs"
        );
    }
    let client = args.client.client()?;
    let dry_run = args.dry_run;
    let prune = args.prune;
    let force = args.force;
    let mut plan = crate::runtime::block_on(registry_client::manage::plan_removal(&client, &r))?
        .with_context(|| format!("cannot remove {r}"))?;
    // A dry run answers what the run would: our registry refuses to delete a manifest an
    // index still lists, so the plan does not promise that it goes.
    if let ImageRef::Registry(reference) = &r
        && dry_run
        && !force
        && reference.digest().is_some()
        && !plan.listed_by.is_empty()
    {
        return Err(anyhow::anyhow!(referenced(
            reference,
            &plan.listed_by,
            None
        )))
        .with_context(|| format!("cannot remove {r}"));
    }
    if !dry_run {
        crate::runtime::block_on(registry_client::manage::remove(
            &client, &r, &mut plan, prune, force,
        ))?
        .map_err(|e| explain_delete(e, &r, &plan.listed_by))
        .with_context(|| format!("cannot remove {r}"))?;
    }
    let mut w = std::io::stdout().lock();
    if args.json {
        let mut doc = serde_json::to_value(&plan)?;
        doc["dry_run"] = dry_run.into();
        doc["removed"] = (!dry_run).into();
        serde_json::to_writer_pretty(&mut w, &doc)?;
        writeln!(w)?;
    } else {
        print_plan(&mut w, &plan, &r, dry_run)?;
    }
    Ok(ExitCode::SUCCESS)
}

/// Why a manifest an index lists is not deleted, naming the indexes `listed_by` (found by the
/// plan) or else, when the plan found none (an untagged index), what the registry `said`. The
/// registry's own text is not repeated beside it: one sentence, each digest once.
fn referenced(
    reference: &registry_client::Reference,
    listed_by: &[validator::Digest],
    said: Option<&str>,
) -> String {
    let which = if listed_by.is_empty() {
        said.map(|s| format!(" (the registry says: {s})"))
            .unwrap_or_default()
    } else {
        let names: Vec<String> = listed_by.iter().map(ToString::to_string).collect();
        format!(
            " ({} {})",
            if names.len() == 1 { "index" } else { "indexes" },
            names.join(", ")
        )
    };
    format!(
        "an index in {}/{} still lists this manifest{which}, so deleting it would break that index (409 MANIFEST_REFERENCED): delete the index first, or rdctl rm --force to delete it anyway",
        reference.registry(),
        reference.name()
    )
}

/// A refused DELETE, said in the user's terms with what the registry answered.
fn explain_delete(
    e: TransferError,
    r: &ImageRef,
    listed_by: &[validator::Digest],
) -> anyhow::Error {
    let ImageRef::Registry(reference) = r else {
        return e.into();
    };
    let by_tag = reference.digest().is_none();
    let client_error = match &e {
        TransferError::Registry { source, .. } => Some(source),
        _ => None,
    };
    let refusal = client_error.and_then(|c| DeleteRefusal::of(c, by_tag));
    let said = match client_error {
        Some(ClientError::Registry {
            status,
            code,
            message,
            ..
        }) => format!("{status} {code} {message}").trim().to_owned(),
        _ => String::new(),
    };
    let hint = match refusal {
        Some(DeleteRefusal::Disabled) => format!(
            "deletes are disabled on {} (it answered {said})",
            reference.registry()
        ),
        Some(DeleteRefusal::TagsNotDeletable) => format!(
            "{} does not delete tags, only manifests by digest (it answered {said}): rdctl rm {}/{}@DIGEST deletes the manifest and every tag naming it (rdctl ls shows the digest)",
            reference.registry(),
            reference.registry(),
            reference.name()
        ),
        Some(DeleteRefusal::Referenced) => {
            // Said whole here: the registry's error below would repeat its message and the
            // digests in the URL.
            let message = match client_error {
                Some(ClientError::Registry { message, .. }) => Some(message.as_str()),
                _ => None,
            };
            return anyhow::anyhow!(referenced(reference, listed_by, message));
        }
        _ => return e.into(),
    };
    anyhow::Error::new(e).context(hint)
}

fn print_plan(
    w: &mut impl Write,
    p: &RemovalPlan,
    r: &ImageRef,
    dry_run: bool,
) -> std::io::Result<()> {
    let verb = if dry_run { "would remove" } else { "removed" };
    match &p.tag {
        Some(t) => writeln!(w, "{verb} tag {t} ({} {})", p.media_type, p.digest)?,
        None => writeln!(w, "{verb} manifest {} ({})", p.digest, p.media_type)?,
    }
    if !p.tags_removed.is_empty() {
        writeln!(
            w,
            "with the tag(s) naming it: {}",
            p.tags_removed.join(", ")
        )?;
    }
    if !p.attached_tags.is_empty() {
        writeln!(
            w,
            "with its signature and referrers tag(s): {}",
            p.attached_tags.join(", ")
        )?;
    }
    if !p.still_tagged.is_empty() {
        writeln!(
            w,
            "{} stays: still tagged {}; nothing to reclaim",
            p.digest,
            p.still_tagged.join(", ")
        )?;
        return Ok(());
    }
    let how = match r {
        ImageRef::Layout(_) if !p.pruned.is_empty() => "deleted (--prune)",
        ImageRef::Layout(_) => "now unreferenced in the layout (--prune deletes them)",
        _ => "reclaimable by garbage collection (rdctl registry gc --delete-untagged)",
    };
    writeln!(
        w,
        "{} item(s), {} ({} bytes) {how}{}:",
        p.reclaimable.len(),
        human_size(p.reclaimable_bytes),
        p.reclaimable_bytes,
        if p.estimate {
            format!(
                " (an estimate: {} of {} tags read)",
                p.tags_examined, p.tags_total
            )
        } else {
            String::new()
        }
    )?;
    let rows: Vec<Vec<String>> = p
        .reclaimable
        .iter()
        .map(|c| vec![c.kind.clone(), c.digest.to_string(), human_size(c.size)])
        .collect();
    table(w, &["KIND", "DIGEST", "SIZE"], &rows)?;
    if !p.referrers.is_empty() {
        writeln!(
            w,
            "referrers going with it: {}",
            p.referrers
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join(", ")
        )?;
    }
    Ok(())
}
