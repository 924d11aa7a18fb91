//! What a sync selects: endpoints, rules (from the command line or a sync file) and globs.

use std::fmt;
use std::path::PathBuf;

use validator::{DoubleStar, GlobSyntax, Platform, Tag};

use super::SyncError;
use super::bundle::bundle_layout_dir;
use crate::Reference;
use crate::transfer::{ImageRef, LayoutRef};

/// One side of a sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Endpoint {
    /// A registry, maybe narrowed to the repositories under a prefix: `HOST[:PORT][/PREFIX]`.
    Registry {
        /// `HOST[:PORT]`, canonical ([`validator::RegistryHost`]): two spellings of one
        /// registry are one endpoint, so a rule cannot copy a registry onto itself.
        host: String,
        /// Repository path prefix (no leading or trailing `/`), if any.
        prefix: Option<String>,
    },
    /// An air-gap bundle directory: `bundle:DIR`.
    Bundle(PathBuf),
}

impl Endpoint {
    /// Parses `bundle:DIR` or `[docker://]HOST[:PORT][/PREFIX]`.
    pub fn parse(input: &str) -> Result<Endpoint, SyncError> {
        let bad = |reason: &str| SyncError::BadEndpoint {
            input: input.chars().take(300).collect(),
            reason: reason.to_owned(),
        };
        if let Some(dir) = input.strip_prefix("bundle:") {
            if dir.is_empty() {
                return Err(bad("no bundle directory after bundle:"));
            }
            return Ok(Endpoint::Bundle(PathBuf::from(dir)));
        }
        let s = input.strip_prefix("docker://").unwrap_or(input);
        let s = s.trim_end_matches('/');
        let (host, prefix) = match s.split_once('/') {
            Some((h, p)) => (h, Some(p)),
            None => (s, None),
        };
        if host.starts_with('.') || !crate::looks_like_host(host) {
            return Err(bad(&format!(
                "{host:?} is not a registry host (a host has a '.' or a ':port', or is localhost); a bundle is written bundle:DIR"
            )));
        }
        let host = validator::RegistryHost::parse(host).map_err(|e| bad(&e.to_string()))?;
        if let Some(p) = prefix {
            validator::Name::parse(p).map_err(|e| bad(&format!("prefix {p:?}: {e}")))?;
        }
        Ok(Endpoint::Registry {
            host: host.to_string(),
            prefix: prefix.map(str::to_owned),
        })
    }

    /// The full repository name of `relative` at this endpoint.
    pub(super) fn repository(&self, relative: &str) -> String {
        match self {
            Endpoint::Registry {
                prefix: Some(p), ..
            } => format!("{p}/{relative}"),
            _ => relative.to_owned(),
        }
    }

    /// Where the image `repository:tag` (a full name at this endpoint) is, for the copy path.
    pub(super) fn image(&self, repository: &str, tag: &Tag) -> Result<ImageRef, SyncError> {
        match self {
            Endpoint::Registry { host, .. } => {
                let r = Reference::parse(&format!("{host}/{repository}:{tag}")).map_err(|e| {
                    SyncError::BadEndpoint {
                        input: format!("{host}/{repository}"),
                        reason: e.reason,
                    }
                })?;
                Ok(ImageRef::Registry(r))
            }
            Endpoint::Bundle(dir) => Ok(ImageRef::Layout(LayoutRef {
                dir: bundle_layout_dir(dir, repository),
                tag: Some(tag.clone()),
                digest: None,
            })),
        }
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Endpoint::Registry { host, prefix } => {
                write!(f, "{host}")?;
                if let Some(p) = prefix {
                    write!(f, "/{p}")?;
                }
                Ok(())
            }
            Endpoint::Bundle(d) => write!(f, "bundle:{}", d.display()),
        }
    }
}

/// What to copy from one source to one destination: one `[[sync]]` table of a sync file, or
/// the arguments of `rdctl sync SRC DST`.
#[derive(Debug, Clone)]
pub struct SyncRule {
    /// Where the images are.
    pub from: Endpoint,
    /// Where they go; a repository keeps its name relative to `from`'s prefix, under `to`'s.
    pub to: Endpoint,
    /// Repository globs relative to `from`'s prefix (empty: every repository).
    pub repositories: Vec<String>,
    /// Tag globs (empty: every tag).
    pub tags: Vec<String>,
    /// Copy only this platform's manifest out of an index.
    pub platform: Option<Platform>,
    /// Copy referrers and cosign's tags too.
    pub referrers: bool,
    /// Copy only images this admission policy admits (`only_signed`; a registry source only).
    pub only_signed: Option<super::SignaturePolicy>,
    /// A bundle source: `bundle.json` must carry a signature (`bundle.json.sig`) by one of
    /// these keys (none: not checked).
    pub bundle_keys: Vec<super::BundleKey>,
    /// A bundle destination: sign its `bundle.json` with this key at the end of the run.
    pub sign_bundle: Option<std::sync::Arc<trust::SigningKey>>,
}

/// The sync file: `[[sync]]` tables (see the crate's docs/operations.md for every key).
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncFile {
    /// Images copied at once (default [`DEFAULT_CONCURRENCY`]).
    #[serde(default)]
    pub concurrency: Option<usize>,
    /// The rules.
    #[serde(default)]
    pub sync: Vec<SyncFileRule>,
}

/// One `[[sync]]` table as written.
#[derive(Debug, Clone, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SyncFileRule {
    /// The source endpoint (`HOST[:PORT][/PREFIX]` or `bundle:DIR`).
    pub from: String,
    /// The destination endpoint.
    pub to: String,
    /// Repository globs.
    #[serde(default)]
    pub repositories: Vec<String>,
    /// Tag globs.
    #[serde(default)]
    pub tags: Vec<String>,
    /// `os/arch[/variant]`.
    #[serde(default)]
    pub platform: Option<String>,
    /// Copy referrers (default true).
    #[serde(default = "yes")]
    pub referrers: bool,
    /// An admission policy file in the worker's format: copy only the images it admits.
    #[serde(default)]
    pub only_signed: Option<PathBuf>,
}

fn yes() -> bool {
    true
}

impl SyncFileRule {
    /// The checked rule; errors name the `[[sync]]` entry's field.
    pub fn rule(&self) -> Result<SyncRule, SyncError> {
        let platform = match &self.platform {
            Some(p) => Some(Platform::parse(p).ok_or_else(|| SyncError::BadRule {
                field: "platform",
                reason: format!("{p:?} is not os/arch[/variant]"),
            })?),
            None => None,
        };
        let mut rule = SyncRule::new(
            Endpoint::parse(&self.from)?,
            Endpoint::parse(&self.to)?,
            self.repositories.clone(),
            self.tags.clone(),
            platform,
            self.referrers,
        )?;
        if let Some(path) = &self.only_signed {
            let policy = super::SignaturePolicy::load(path).map_err(|e| SyncError::BadRule {
                field: "only_signed",
                reason: validator::error_chain(&e),
            })?;
            rule = rule.only_signed(policy)?;
        }
        Ok(rule)
    }
}

impl SyncRule {
    /// Checks a rule: the globs parse, a bundle is not copied to itself.
    pub fn new(
        from: Endpoint,
        to: Endpoint,
        repositories: Vec<String>,
        tags: Vec<String>,
        platform: Option<Platform>,
        referrers: bool,
    ) -> Result<SyncRule, SyncError> {
        for r in &repositories {
            check_glob(r, "repositories")?;
        }
        for t in &tags {
            check_glob(t, "tags")?;
        }
        if from == to {
            return Err(SyncError::BadRule {
                field: "to",
                reason: format!("{to} is also the source"),
            });
        }
        Ok(SyncRule {
            from,
            to,
            repositories,
            tags,
            platform,
            referrers,
            only_signed: None,
            bundle_keys: Vec::new(),
            sign_bundle: None,
        })
    }

    /// Copies only the images `policy` admits; refused for a bundle source (a bundle's
    /// `bundle.json` is signed as a whole, see [`SyncRule::bundle_keys`]).
    pub fn only_signed(mut self, policy: super::SignaturePolicy) -> Result<SyncRule, SyncError> {
        if let Endpoint::Bundle(dir) = &self.from {
            return Err(SyncError::BadRule {
                field: "only_signed",
                reason: format!(
                    "the source bundle:{} is not a registry; verify a bundle's signed bundle.json with its key instead",
                    dir.display()
                ),
            });
        }
        self.only_signed = Some(policy);
        Ok(self)
    }

    pub(super) fn wants_repository(&self, relative: &str) -> bool {
        self.repositories.is_empty()
            || self
                .repositories
                .iter()
                .any(|g| glob_match(g, relative, true))
    }

    pub(super) fn wants_tag(&self, tag: &str) -> bool {
        crate::manage::tag_name_kind(tag).is_none()
            && (self.tags.is_empty() || self.tags.iter().any(|g| glob_match(g, tag, false)))
    }
}

fn check_glob(g: &str, field: &'static str) -> Result<(), SyncError> {
    if g.is_empty() || g.starts_with('/') || g.ends_with('/') || g.contains(char::is_whitespace) {
        return Err(SyncError::BadRule {
            field,
            reason: format!("{g:?} is not a glob (no spaces, no leading or trailing '/')"),
        });
    }
    Ok(())
}

/// Matches a glob: `?` one byte, `*` any run; with `segments`, `*` and `?` never match `/`
/// and `**` matches any run including `/` (and `**/` also matches nothing).
pub fn glob_match(pattern: &str, text: &str, segments: bool) -> bool {
    let syntax = if segments {
        GlobSyntax {
            separator: Some(b'/'),
            question: true,
            double_star: DoubleStar::CrossesOrNothingBeforeSeparator,
        }
    } else {
        GlobSyntax::ANY
    };
    validator::glob_matches(pattern, text, syntax)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every spelling of a registry is one endpoint: the same rule cannot copy it onto itself
    /// by spelling the destination differently.
    #[test]
    fn spellings_of_one_registry_are_one_endpoint() {
        for (a, b) in [
            ("localhost:5000/site", "LOCALHOST:5000/site"),
            ("localhost:5000/site", "docker://LocalHost.:05000/site/"),
            ("reg.example/site", "Reg.Example:443/site"),
            ("reg.example/site", "reg.example.:80/site"),
            ("docker.io/site", "index.docker.io/site"),
            ("[::1]:5000/site", "[0:0::1]:5000/site"),
        ] {
            let (from, to) = (Endpoint::parse(a).unwrap(), Endpoint::parse(b).unwrap());
            assert_eq!(from, to, "{a} vs {b}");
            let e = SyncRule::new(from, to, vec![], vec![], None, true)
                .unwrap_err()
                .to_string();
            assert!(e.contains("is also the source"), "{a} vs {b}: {e}");
        }
        assert_ne!(
            Endpoint::parse("localhost:5000/site").unwrap(),
            Endpoint::parse("localhost:5001/site").unwrap()
        );
        for bad in ["reg..example/site", "127.1:5000/site"] {
            assert!(Endpoint::parse(bad).is_err(), "{bad}");
        }
    }
}
