//! The repository list (`/ui/`): the repositories the caller may pull, filtered, sorted and
//! paged, each row summed up once per change of its tag index.

use std::collections::BTreeSet;
use std::time::UNIX_EPOCH;

use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use futures_util::StreamExt;
use validator::{Digest, Name};

use super::manifest::{Counted, content_of, read_manifest};
use super::signatures::is_cosign_tag;
use super::{
    CONCURRENCY, CatalogSort, PAGE, RepoRow, RowCache, Viewer, answer, failed, html, now, pages,
    param, params,
};
use crate::errors::ApiResult;
use crate::repo::Repos;
use crate::state::AppState;
use crate::storage::layout;

/// The facts of one repository's row, from `cache` while its tag index is unchanged.
pub(super) async fn repo_row(repos: &Repos, cache: &RowCache, name: String) -> ApiResult<RepoRow> {
    let Ok(n) = Name::parse(&name) else {
        return Ok(RepoRow {
            name,
            tags: 0,
            size: 0,
            pushed: None,
        });
    };
    let version = match repos.store().stat(&layout::tags(&n)).await {
        Ok(meta) => Some((meta.modified, meta.size)),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    if let Some(row) = cache.get(&name, version) {
        return Ok(row);
    }
    let tags = repos.tag_map(&n).await?;
    let digests: BTreeSet<&Digest> = tags
        .iter()
        .filter(|(t, _)| !is_cosign_tag(t))
        .map(|(_, d)| d)
        .collect();
    let mut c = Counted::default();
    for d in &digests {
        if let Some(m) = read_manifest(repos, 16 << 20, d).await? {
            content_of(repos, d, &m, &mut c).await?;
        }
    }
    let row = RepoRow {
        tags: tags.iter().filter(|(t, _)| !is_cosign_tag(t)).count(),
        size: c.total(),
        // The last change of an image tag; an index that has not recorded one yet (written
        // before it was kept) answers with its own last write.
        pushed: match repos.last_tag_change(&n).await? {
            Some(t) => Some(t),
            None => {
                version.and_then(|(m, _)| m.duration_since(UNIX_EPOCH).ok().map(|t| t.as_secs()))
            }
        },
        name: name.clone(),
    };
    // Kept under the stat read before the tags: a tag set meanwhile changes the stat, so the
    // next request sums the row up again.
    cache.insert(version, row.clone());
    Ok(row)
}

/// `GET /ui/?q=&sort=&last=|start=`: the repositories the caller may pull, filtered by `q`
/// (a part of the name), with their tag count, size and last push, sorted by `sort` (`name`,
/// `tags`, `size`, `pushed`). By name a page is read after `last`; in the other orders every
/// matching repository is summed up to sort them, and a page starts at `start`.
pub(super) async fn catalog(
    State(state): State<AppState>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> Response {
    let v = match Viewer::of(&state, &headers).await {
        Ok(v) => v,
        Err(r) => return r,
    };
    let p = params(query.as_deref());
    let q = param(&p, "q").unwrap_or("").trim().to_lowercase();
    let sort = CatalogSort::parse(param(&p, "sort"));
    let repos = &state.app().repos;
    let all = match repos.catalog().await {
        Ok(a) => a,
        Err(e) => return failed(&v, e),
    };
    let shown: Vec<String> = all
        .into_iter()
        .filter(|r| v.sees(r) && (q.is_empty() || r.contains(&q)))
        .collect();
    let (names, start) = if sort == CatalogSort::Name {
        let (rows, _) = crate::handlers::page(shown.clone(), Some(PAGE), param(&p, "last"));
        (rows, 0)
    } else {
        let start = param(&p, "start")
            .and_then(|s| s.parse::<usize>().ok())
            .unwrap_or(0);
        (shown.clone(), start)
    };
    let rows: Vec<ApiResult<RepoRow>> = futures_util::stream::iter(names)
        .map(|n| repo_row(repos, &state.app().ui_rows, n))
        .buffered(CONCURRENCY)
        .collect()
        .await;
    let mut rows = match rows.into_iter().collect::<ApiResult<Vec<RepoRow>>>() {
        Ok(r) => r,
        Err(e) => return failed(&v, e),
    };
    let next = match sort {
        CatalogSort::Name => {
            let after = rows.last().map(|r| r.name.clone());
            let more = after.as_deref().is_some_and(|l| {
                let i = shown.partition_point(|x| x.as_str() <= l);
                i < shown.len()
            });
            after
                .filter(|_| more)
                .map(|l| format!("last={}", html::Q(&l)))
        }
        _ => {
            match sort {
                CatalogSort::Tags => rows.sort_by_key(|r| std::cmp::Reverse(r.tags)),
                CatalogSort::Size => rows.sort_by_key(|r| std::cmp::Reverse(r.size)),
                _ => rows.sort_by_key(|r| std::cmp::Reverse(r.pushed)),
            }
            let total = rows.len();
            rows = rows.into_iter().skip(start).take(PAGE).collect();
            (start + PAGE < total).then(|| format!("start={}", start + PAGE))
        }
    };
    answer(
        StatusCode::OK,
        html::page(
            "Repositories",
            v.who(),
            &pages::catalog(&q, sort, &rows, next.as_deref(), now()),
        ),
    )
}
