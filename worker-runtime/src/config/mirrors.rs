//! `[[mirrors]]`: registries tried, in order, before an origin. Each table names the origin
//! host as zone manifests write it and the endpoints (`HOST[:PORT][/PREFIX]`) that stand in
//! for it; a bad one is named by its index and origin.

use serde::Deserialize;

use super::Invalid;
use crate::mirrors::{Mirror, MirrorEndpoint, Mirrors};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileMirror {
    registry: String,
    endpoints: Vec<String>,
    resolve_tags: Option<bool>,
}

/// The `[[mirrors]]` tables checked, in file order.
pub(super) fn mirrors(tables: Vec<FileMirror>) -> Result<Mirrors, Invalid> {
    let mut mirrors = Vec::new();
    for (i, m) in tables.into_iter().enumerate() {
        if m.registry.starts_with('.') || !registry_client::looks_like_host(&m.registry) {
            return Err((
                "mirrors.registry",
                format!(
                    "mirrors[{i}]: {:?} is not a registry host (HOST[:PORT])",
                    m.registry
                ),
            ));
        }
        let registry = validator::RegistryHost::parse(&m.registry)
            .map_err(|e| ("mirrors.registry", format!("mirrors[{i}]: {e}")))?;
        if m.endpoints.is_empty() {
            return Err((
                "mirrors.endpoints",
                format!("mirrors[{i}] ({}): no endpoints", m.registry),
            ));
        }
        let endpoints = m
            .endpoints
            .iter()
            .map(|e| {
                MirrorEndpoint::parse(e).map_err(|reason| {
                    (
                        "mirrors.endpoints",
                        format!("mirrors[{i}] ({}): {reason}", m.registry),
                    )
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        mirrors.push(Mirror {
            registry,
            endpoints,
            resolve_tags: m.resolve_tags.unwrap_or(true),
        });
    }
    Ok(Mirrors(mirrors))
}
