//! The client side of `registry serve`'s `[[sync]]` and `[[replicate]]` entries: the registry
//! crate defines the hooks (`mirror::SyncRunner`, `replicate::Replicator`) and this binary
//! fills them with `registry_client`, which the server crate does not depend on.

use anyhow::Context as _;

/// The `[[sync]]` copy for `registry serve`: one `registry_client::sync` run of the entry
/// (the one copy path) from its upstream into this registry's loopback endpoint, then, with
/// `on_upstream_delete = "delete"`, `registry_client::sync::prune`.
#[derive(Debug)]
pub(super) struct ClientSyncRunner;

impl registry::mirror::SyncRunner for ClientSyncRunner {
    fn run<'a>(
        &'a self,
        entry: &'a registry::mirror::SyncEntry,
        destination: &'a str,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = registry::mirror::RunOutcome> + Send + 'a>,
    > {
        Box::pin(async move {
            let mut out = registry::mirror::RunOutcome::default();
            if let Err(e) = sync_entry(entry, destination, &mut out).await {
                out.errors.push(format!("{e:#}"));
            }
            out
        })
    }
}

impl registry::replicate::Replicator for ClientSyncRunner {
    fn copy<'a>(
        &'a self,
        entry: &'a registry::replicate::ReplicationEntry,
        source: &'a str,
        repository: &'a str,
        digest: &'a str,
        tag: Option<&'a str>,
    ) -> std::pin::Pin<Box<dyn std::future::Future<Output = Result<String, String>> + Send + 'a>>
    {
        Box::pin(async move {
            replicate(entry, source, repository, digest, tag)
                .await
                .map_err(|e| format!("{e:#}"))
        })
    }
}

/// Replication on push: one pushed manifest, by digest, from this registry (`source`, its
/// loopback `HOST:PORT`) to the entry's destination, tagged as pushed, with its referrers
/// (the one copy path). With `only_signed`, an image the policy refuses is not copied and the
/// event is settled (a refusal is not retried).
async fn replicate(
    entry: &registry::replicate::ReplicationEntry,
    source: &str,
    repository: &str,
    digest: &str,
    tag: Option<&str>,
) -> anyhow::Result<String> {
    use registry_client::transfer::{CopyOptions, ImageRef};
    let keychain =
        registry_client::Keychain::from_env(entry.auth_file.as_deref(), &Default::default());
    let client = registry_client::Client::builder()
        .keychain(keychain)
        .plain_http(entry.to.base.starts_with("http://"))
        .build()
        .context("building the replication client")?;
    let digest = validator::Digest::parse(digest).context("the pushed digest")?;
    let from = registry_client::Reference::parse(&format!("{source}/{repository}@{digest}"))
        .context("the pushed image")?;
    let host = entry.to.base.split_once("://").map_or("", |(_, h)| h);
    let name = match &entry.to.prefix {
        Some(p) => format!("{host}/{p}/{repository}"),
        None => format!("{host}/{repository}"),
    };
    let to = registry_client::Reference::parse(&match tag {
        Some(t) => format!("{name}:{t}"),
        None => format!("{name}@{digest}"),
    })
    .with_context(|| format!("the destination {name}"))?;
    if let Some(path) = &entry.only_signed {
        let policy = registry_client::sync::SignaturePolicy::load(path)
            .with_context(|| format!("only_signed {}", path.display()))?;
        match registry_client::sync::check_signed(&client, &policy, &from, &digest).await {
            Ok(_) => {}
            Err(registry_client::sync::SignedCheckError::Refused(r)) => {
                tracing::warn!(sync = %entry.name, image = %from, error = %r, "sync: only_signed refused an image; not replicated");
                return Ok(format!("refused by only_signed: {r}"));
            }
            Err(e) => return Err(e.into()),
        }
    }
    let report = registry_client::transfer::copy(
        &client,
        &ImageRef::Registry(from),
        &ImageRef::Registry(to.clone()),
        &CopyOptions {
            platform: None,
            referrers: entry.referrers,
            listed_referrers: None,
            oci_media_types: false,
        },
    )
    .await
    .with_context(|| format!("copying to {to}"))?;
    Ok(format!(
        "{to}: {} manifest(s) written, {} already there, {} blob(s) copied ({} bytes)",
        report.manifests.len() + report.referrers.len(),
        report.manifests_present.len(),
        report.blobs_copied.len(),
        report.bytes_copied()
    ))
}

async fn sync_entry(
    entry: &registry::mirror::SyncEntry,
    destination: &str,
    out: &mut registry::mirror::RunOutcome,
) -> anyhow::Result<()> {
    use registry_client::sync::{self, Endpoint, SyncOptions, SyncRule};
    let keychain =
        registry_client::Keychain::from_env(entry.auth_file.as_deref(), &Default::default());
    let client = registry_client::Client::builder()
        .keychain(keychain)
        .plain_http(entry.upstream.base.starts_with("http://"))
        .build()
        .context("building the sync client")?;
    let host = entry.upstream.base.split_once("://").map_or("", |(_, h)| h);
    let platform = match &entry.platform {
        Some(p) => Some(validator::Platform::parse(p).context("platform")?),
        None => None,
    };
    let mut rule = SyncRule::new(
        Endpoint::Registry {
            host: host.to_owned(),
            prefix: entry.upstream.prefix.clone(),
        },
        Endpoint::Registry {
            host: destination.to_owned(),
            prefix: entry.destination.clone(),
        },
        entry.repositories.clone(),
        entry.tags.clone(),
        platform,
        entry.referrers,
    )?;
    if let Some(path) = &entry.only_signed {
        // Read at every run, as auth_file is: a changed policy or key applies to the next run.
        let policy = sync::SignaturePolicy::load(path)
            .with_context(|| format!("only_signed {}", path.display()))?;
        rule = rule.only_signed(policy)?;
    }
    let report = sync::run(
        &client,
        std::slice::from_ref(&rule),
        &SyncOptions::default(),
        &|_| {},
    )
    .await;
    for (from, e) in &report.rule_errors {
        out.errors
            .push(format!("{from}: {}", validator::error_chain(e)));
    }
    for o in &report.images {
        out.images += 1;
        match &o.result {
            Some(Ok(r)) => {
                out.images_copied += u64::from(!o.item.up_to_date);
                out.blobs_copied += r.blobs_copied.len() as u64;
                out.bytes_copied += r.bytes_copied();
            }
            Some(Err(e)) => out.errors.push(format!(
                "{}:{}: {}",
                o.item.destination_repository,
                o.item.tag,
                validator::error_chain(e)
            )),
            None => {
                if let Some(refusal) = &o.refused {
                    out.refused.push(format!(
                        "{}:{} ({}): {}",
                        o.item.destination_repository, o.item.tag, o.item.digest, refusal
                    ));
                }
            }
        }
    }
    if entry.on_upstream_delete == registry::mirror::OnUpstreamDelete::Delete
        && report.rule_errors.is_empty()
    {
        let pruned = sync::prune(&client, &rule, &report).await?;
        out.tags_deleted = pruned.deleted.len() as u64;
        for (tag, e) in &pruned.failed {
            out.errors
                .push(format!("deleting {tag}: {}", validator::error_chain(e)));
        }
    }
    Ok(())
}
