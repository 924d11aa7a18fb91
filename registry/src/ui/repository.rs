//! A repository's page (`/ui/r/<name>`): its tags, a page at a time, each with its image's
//! summary, signature state and referrers, and the commands that pull it.

use std::collections::{BTreeMap, BTreeSet};

use axum::http::{HeaderMap, header};
use futures_util::StreamExt;
use validator::{Digest, Name};

use super::image::referrers_of;
use super::manifest::{read_manifest, summary};
use super::signatures::{is_cosign_tag, signatures_of, signed};
use super::{CONCURRENCY, PAGE, PullHost, Signed, Summary, TagRow, now, pages};
use crate::errors::ApiResult;
use crate::repo::Repos;

/// The registry as a client names it in a pull: the `Host` the browser used (behind a
/// proxy that keeps the client's `Host`, the name people reach), and whether it is reached
/// over plain HTTP: this registry serves no TLS and no proxy in front says (in
/// `X-Forwarded-Proto`) that it terminated TLS.
pub(super) fn pull_host(headers: &HeaderMap, serves_tls: bool) -> PullHost {
    let host = headers
        .get(header::HOST)
        .and_then(|h| h.to_str().ok())
        .filter(|h| !h.is_empty())
        .unwrap_or("HOST")
        .to_owned();
    let forwarded_https = headers
        .get("x-forwarded-proto")
        .and_then(|h| h.to_str().ok())
        .is_some_and(|p| p.eq_ignore_ascii_case("https"));
    PullHost {
        host,
        plain_http: !serves_tls && !forwarded_https,
    }
}

/// A repository's tags, one page after `last`; None when the repository does not exist.
pub(super) async fn repository(
    repos: &Repos,
    keys: &[trust::VerifyingKey],
    name: &Name,
    host: &PullHost,
    last: Option<&str>,
) -> ApiResult<Option<(String, String)>> {
    if !repos.exists(name).await? {
        return Ok(None);
    }
    let everything = repos.tag_map(name).await?;
    // cosign's signature, attestation and SBOM tags are listed with their image (on its page,
    // as referrers), not as tags of their own.
    let (cosign, all): (Vec<_>, Vec<_>) = everything.iter().partition(|(t, _)| is_cosign_tag(t));
    let start = last.map_or(0, |l| all.partition_point(|(t, _)| t.as_str() <= l));
    let rows = &all[start..];
    let more = rows.len() > PAGE;
    let rows = &rows[..rows.len().min(PAGE)];
    // Each distinct manifest of the page is read once, however many tags point at it.
    let digests: BTreeSet<Digest> = rows.iter().map(|(_, d)| (*d).clone()).collect();
    let everything = &everything;
    type Facts = (Option<Summary>, Signed, Vec<&'static str>);
    let facts: Vec<ApiResult<(Digest, Facts)>> = futures_util::stream::iter(digests)
        .map(|d| async move {
            let s = match read_manifest(repos, 16 << 20, &d).await? {
                Some(m) => Some(summary(repos, &d, &m).await?),
                None => None,
            };
            let sigs = signatures_of(repos, name, &d, everything).await?;
            let signed = signed(repos, name, keys, &d, &sigs).await?;
            let kinds = referrers_of(repos, name, &d, everything).await?;
            let kinds = kinds.iter().map(|r| r.kind).collect();
            Ok((d, (s, signed, kinds)))
        })
        .buffer_unordered(CONCURRENCY)
        .collect()
        .await;
    let mut by_digest = BTreeMap::new();
    for f in facts {
        let (d, facts) = f?;
        by_digest.insert(d, facts);
    }
    let rows: Vec<TagRow> = rows
        .iter()
        .map(|(t, d)| {
            let (s, signed, referrers) =
                (by_digest.get(d).cloned()).unwrap_or((None, Signed::No, Vec::new()));
            TagRow {
                tag: t.clone(),
                digest: d.clone(),
                summary: s,
                signed,
                referrers,
            }
        })
        .collect();
    Ok(Some((
        name.to_string(),
        pages::repository(name, host, all.len(), cosign.len(), &rows, more, now()),
    )))
}
