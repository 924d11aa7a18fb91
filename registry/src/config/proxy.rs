//! `[[proxy]]`: pull-through rules, checked at start (prefixes, upstreams, TLS files, policy).

use std::path::PathBuf;
use std::time::Duration;

use config_toml::HumanDuration;
use serde::Deserialize;

use super::{ConfigError, ServeConfig, Source, indexed};

/// How long a cached tag is trusted before the upstreams are asked again, unless `tag_ttl` says.
const DEFAULT_TAG_TTL: Duration = Duration::from_secs(300);

/// A `[[proxy]]` table of the TOML file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct FileProxy {
    prefix: Option<String>,
    upstreams: Option<Vec<String>>,
    #[serde(alias = "tag_ttl_secs")]
    tag_ttl: Option<HumanDuration>,
    auth_file: Option<PathBuf>,
    #[serde(default)]
    ca_files: Vec<PathBuf>,
    #[serde(default)]
    cert_dirs: Vec<PathBuf>,
    insecure: Option<bool>,
    only_signed: Option<PathBuf>,
}

impl ServeConfig {
    pub(super) fn apply_proxy(
        &mut self,
        rules: Vec<FileProxy>,
        src: &Source<'_>,
    ) -> Result<(), ConfigError> {
        for (i, r) in rules.into_iter().enumerate() {
            let bad = |key: &'static str, reason: String| src.bad_at(key, &indexed(key, i), reason);
            let prefix = r
                .prefix
                .ok_or_else(|| bad("proxy.prefix", format!("[[proxy]] {i} needs a prefix")))?;
            let prefix = prefix.trim_matches('/').to_owned();
            validator::Name::parse(&prefix)
                .map_err(|e| bad("proxy.prefix", format!("{prefix:?}: {e}")))?;
            if self.proxy.iter().any(|p| {
                p.prefix == prefix
                    || p.prefix.starts_with(&format!("{prefix}/"))
                    || prefix.starts_with(&format!("{}/", p.prefix))
            }) {
                return Err(bad(
                    "proxy.prefix",
                    format!("{prefix:?} overlaps another [[proxy]] prefix"),
                ));
            }
            let upstreams = r.upstreams.unwrap_or_default();
            if upstreams.is_empty() {
                return Err(bad(
                    "proxy.upstreams",
                    format!("[[proxy]] {prefix:?} needs at least one upstream"),
                ));
            }
            let upstreams = upstreams
                .iter()
                .map(|u| crate::proxy::Upstream::parse(u).map_err(|e| bad("proxy.upstreams", e)))
                .collect::<Result<Vec<_>, _>>()?;
            let rule = crate::proxy::ProxyRule {
                prefix,
                upstreams,
                tag_ttl: r.tag_ttl.map_or(DEFAULT_TAG_TTL, Duration::from),
                auth_file: r.auth_file,
                ca_files: r.ca_files,
                cert_dirs: r.cert_dirs,
                insecure: r.insecure.unwrap_or(false),
                only_signed: r.only_signed,
            };
            // A policy that cannot be loaded fails here, naming the file and why.
            if let Some(p) = &rule.only_signed {
                registry_client::sync::SignaturePolicy::load(p).map_err(|e| {
                    bad(
                        "proxy.only_signed",
                        format!(
                            "[[proxy]] {:?}: {}: {}",
                            rule.prefix,
                            p.display(),
                            validator::error_chain(&e)
                        ),
                    )
                })?;
            }
            // A CA file or certs.d entry that cannot be read fails here, naming it.
            for u in &rule.upstreams {
                rule.client_for(u).map_err(|e| {
                    bad(
                        "proxy.ca_files",
                        format!(
                            "[[proxy]] {:?}: {u}: {}",
                            rule.prefix,
                            validator::error_chain(&e)
                        ),
                    )
                })?;
            }
            self.proxy.push(rule);
        }
        Ok(())
    }
}
