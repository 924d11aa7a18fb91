//! What `rdctl sync` prints about its run: a line per image and totals, or one JSON document.

use std::io::Write as _;

use registry_client::sync::SyncReport;

pub(super) fn print_json(report: &SyncReport, dry_run: bool) -> anyhow::Result<()> {
    let content = |c: &registry_client::transfer::Content| c.digest.to_string();
    let images: Vec<serde_json::Value> = report
        .images
        .iter()
        .map(|o| {
            let mut v = serde_json::json!({
                "source": o.item.source.to_string(),
                "destination": o.item.destination.to_string(),
                "repository": o.item.destination_repository,
                "tag": o.item.tag.as_str(),
                "digest": o.item.digest.to_string(),
                "up_to_date": o.item.up_to_date,
            });
            match &o.result {
                Some(Ok(r)) => {
                    v["status"] = if written(r) { "copied" } else { "present" }.into();
                    v["root"] = r.root.digest.to_string().into();
                    v["manifests"] = r.manifests.iter().map(content).collect();
                    v["manifests_present"] = r.manifests_present.iter().map(content).collect();
                    v["tag_written"] = r.tag_written.into();
                    v["referrers"] = r.referrers.iter().map(content).collect();
                    v["referrers_unlisted"] =
                        r.referrers_unlisted.iter().map(|d| d.to_string()).collect();
                    v["blobs_copied"] = r.blobs_copied.len().into();
                    v["bytes_copied"] = r.bytes_copied().into();
                    v["blobs_skipped"] = r.blobs_skipped.len().into();
                    v["bytes_skipped"] = r.bytes_skipped().into();
                }
                Some(Err(e)) => {
                    v["status"] = "failed".into();
                    v["error"] = validator::error_chain(e).into();
                }
                None => match &o.refused {
                    Some(refusal) => {
                        v["status"] = "refused".into();
                        v["refused"] = serde_json::json!({
                            "policy": refusal.policy.display().to_string(),
                            "rule": refusal.rule,
                            "keys": refusal.keys,
                            "reason": refusal.reason,
                            "message": refusal.message,
                        });
                    }
                    None => v["status"] = "planned".into(),
                },
            }
            v
        })
        .collect();
    let ok = |o: &&registry_client::sync::ItemOutcome| matches!(o.result, Some(Ok(_)));
    let copied = report.images.iter().filter(ok);
    let doc = serde_json::json!({
        "dry_run": dry_run,
        "images": images,
        "errors": report.rule_errors.iter().map(|(from, e)| serde_json::json!({
            "from": from, "error": validator::error_chain(e),
        })).collect::<Vec<_>>(),
        "totals": {
            "images": report.images.len(),
            "copied": report.images.iter().filter(ok).count(),
            "failed": report.images.iter().filter(|o| matches!(o.result, Some(Err(_)))).count(),
            "refused": report.images.iter().filter(|o| o.refused.is_some()).count(),
            "present": report.images.iter().filter(|o| matches!(&o.result, Some(Ok(r)) if !written(r))).count(),
            "up_to_date": report.images.iter().filter(|o| o.item.up_to_date).count(),
            "blobs_copied": copied.clone().map(|o| match &o.result { Some(Ok(r)) => r.blobs_copied.len(), _ => 0 }).sum::<usize>(),
            "bytes_copied": copied.clone().map(|o| match &o.result { Some(Ok(r)) => r.bytes_copied(), _ => 0 }).sum::<u64>(),
            "blobs_skipped": copied.map(|o| match &o.result { Some(Ok(r)) => r.blobs_skipped.len(), _ => 0 }).sum::<usize>(),
        },
    });
    let mut w = std::io::stdout().lock();
    serde_json::to_writer_pretty(&mut w, &doc)?;
    writeln!(w)?;
    Ok(())
}

/// Whether a copy wrote anything at the destination (a manifest, a referrer, the tag, a blob).
fn written(r: &registry_client::transfer::CopyReport) -> bool {
    !r.manifests.is_empty()
        || !r.referrers.is_empty()
        || r.tag_written
        || !r.blobs_copied.is_empty()
}

pub(super) fn print(report: &SyncReport, dry_run: bool) -> anyhow::Result<()> {
    let mut w = std::io::stdout().lock();
    let (mut copied, mut present, mut failed, mut refused, mut blobs, mut bytes) =
        (0, 0, 0, 0, 0, 0u64);
    for o in &report.images {
        let (src, dst) = (&o.item.source, &o.item.destination);
        match &o.result {
            None if o.refused.is_some() => {
                refused += 1;
                let r = o.refused.as_ref().expect("refused");
                writeln!(w, "REFUSED {src} -> {dst}: {r}")?;
            }
            None => writeln!(
                w,
                "{} {src} -> {dst} ({})",
                if o.item.up_to_date {
                    "up to date"
                } else {
                    "would copy"
                },
                o.item.digest
            )?,
            Some(Ok(r)) if !written(r) => {
                present += 1;
                writeln!(
                    w,
                    "present {src} -> {dst} ({}): nothing written, {} manifest(s) already there",
                    r.root.digest,
                    r.manifests_present.len()
                )?;
            }
            Some(Ok(r)) => {
                copied += 1;
                blobs += r.blobs_copied.len();
                bytes += r.bytes_copied();
                writeln!(
                    w,
                    "copied {src} -> {dst} ({}): {} manifest(s) written ({} referrer(s)), {} already there{}; {} blob(s) copied ({} bytes), {} skipped",
                    r.root.digest,
                    r.manifests.len() + r.referrers.len(),
                    r.referrers.len(),
                    r.manifests_present.len(),
                    if r.tag_written { ", tag written" } else { "" },
                    r.blobs_copied.len(),
                    r.bytes_copied(),
                    r.blobs_skipped.len(),
                )?;
            }
            Some(Err(e)) => {
                failed += 1;
                writeln!(w, "FAILED {src} -> {dst}: {}", validator::error_chain(e))?;
            }
        }
        if let Some(Ok(r)) = &o.result
            && !r.referrers_unlisted.is_empty()
        {
            let unlisted: Vec<String> =
                r.referrers_unlisted.iter().map(|d| d.to_string()).collect();
            writeln!(
                w,
                "  left behind: {} (referrers or cosign tags in the bundle's layout that bundle.json does not list)",
                unlisted.join(", ")
            )?;
        }
    }
    for (from, e) in &report.rule_errors {
        writeln!(w, "FAILED {from}: {}", validator::error_chain(e))?;
    }
    if dry_run {
        writeln!(w, "dry run: {} image(s) selected", report.images.len())?;
    } else {
        writeln!(
            w,
            "{copied} image(s) synced, {present} already present, {refused} refused, {failed} failed; {blobs} blob(s) copied ({bytes} bytes)"
        )?;
    }
    Ok(())
}
