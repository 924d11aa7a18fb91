//! Registry governance: rules the registry applies to what is pushed and kept, configured per
//! repository glob in `registry.toml`:
//!
//! - [`immutable`]: `[[immutable]]` tags that a push may not move to another digest;
//! - [`quota`]: `[[quota]]` limits on a repository's bytes and manifests, counted in a usage
//!   document per repository that every replica updates with conditional writes;
//! - [`retention`]: `[[retention]]` policies that remove tags (and their manifests) no rule
//!   keeps, ahead of garbage collection.
//!
//! [`Governance`] holds the parsed rules; it is part of [`crate::RegistryConfig`] and is empty
//! (every push allowed, nothing removed) unless the file has these tables. Like every other
//! piece of registry state, counters and pull times live in the store, never in one process.

pub mod immutable;
pub mod quota;
pub mod retention;

use crate::auth::acl::Pattern;

pub use immutable::ImmutableRule;
pub use quota::{QuotaRule, Usage};
pub use retention::{RetentionPlan, RetentionRule};

/// Every governance rule of the configuration. Empty by default.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Governance {
    /// `[[immutable]]` rules, in file order.
    pub immutable: Vec<ImmutableRule>,
    /// `[[quota]]` rules, in file order; the first whose glob matches a repository applies.
    pub quota: Vec<QuotaRule>,
    /// `[[retention]]` policies, in file order (see [`retention`] for how they combine).
    pub retention: Vec<RetentionRule>,
}

/// A bad governance setting: the key (`quota[1].max_bytes`) and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid {key}: {reason}")]
pub struct RuleError {
    /// The key, with the rule's index.
    pub key: String,
    /// What is wrong.
    pub reason: String,
}

impl RuleError {
    pub(crate) fn new(key: String, reason: impl Into<String>) -> RuleError {
        RuleError {
            key,
            reason: reason.into(),
        }
    }
}

/// A tag glob: `*` matches any run of characters, every other character itself (`v*`,
/// `release-*`, `latest`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TagPattern(String);

impl TagPattern {
    /// Checks a pattern: tag characters (`A-Z a-z 0-9 _ . -`) and `*`.
    pub fn parse(s: &str) -> Result<TagPattern, String> {
        if s.is_empty() || s.len() > 128 {
            return Err("a tag pattern has 1 to 128 characters".to_owned());
        }
        if let Some(c) = s
            .chars()
            .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '_' | '.' | '-' | '*')))
        {
            return Err(format!(
                "{s:?} has {c:?}; tag patterns hold tag characters (A-Z a-z 0-9 _ . -) and *"
            ));
        }
        Ok(TagPattern(s.to_owned()))
    }

    /// Whether `tag` matches.
    pub fn matches(&self, tag: &str) -> bool {
        // Tags hold no `/`, so the repository glob's `*` matches any run here.
        crate::auth::acl::glob(&self.0, tag)
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// The `[[immutable]]`, `[[quota]]` and `[[retention]]` arrays of the TOML file.
#[derive(Debug, Default)]
pub(crate) struct FileGovernance {
    pub immutable: Vec<immutable::FileImmutable>,
    pub quota: Vec<quota::FileQuota>,
    pub retention: Vec<retention::FileRetention>,
}

impl Governance {
    /// Checks the file's rules, naming the key of the first bad one.
    pub(crate) fn from_file(f: FileGovernance) -> Result<Governance, RuleError> {
        Ok(Governance {
            immutable: f
                .immutable
                .into_iter()
                .enumerate()
                .map(|(i, r)| ImmutableRule::from_file(i, r))
                .collect::<Result<_, _>>()?,
            quota: f
                .quota
                .into_iter()
                .enumerate()
                .map(|(i, r)| QuotaRule::from_file(i, r))
                .collect::<Result<_, _>>()?,
            retention: f
                .retention
                .into_iter()
                .enumerate()
                .map(|(i, r)| RetentionRule::from_file(i, r))
                .collect::<Result<_, _>>()?,
        })
    }

    /// The first `[[immutable]]` rule covering `tag` in `repository`.
    pub fn immutable_rule(&self, repository: &str, tag: &str) -> Option<&ImmutableRule> {
        self.immutable.iter().find(|r| r.covers(repository, tag))
    }

    /// Whether manifest pulls from `repository` are recorded: a `[[retention]]` policy with
    /// `keep_pulled_within` matches it.
    pub fn records_pulls(&self, repository: &str) -> bool {
        self.retention
            .iter()
            .any(|r| r.keep_pulled_within.is_some() && matches_any(&r.repositories, repository))
    }

    /// The `[[quota]]` rule of `repository`: the first whose glob matches.
    pub fn quota_rule(&self, repository: &str) -> Option<&QuotaRule> {
        self.quota
            .iter()
            .find(|r| matches_any(&r.repositories, repository))
    }
}

/// Parses the `repositories` list of rule `table[index]`: at least one glob.
pub(crate) fn parse_repositories(
    table: &str,
    index: usize,
    list: Vec<String>,
) -> Result<Vec<Pattern>, RuleError> {
    if list.is_empty() {
        return Err(RuleError::new(
            format!("{table}[{index}].repositories"),
            "name at least one repository glob (\"**\" for every repository)",
        ));
    }
    list.iter()
        .enumerate()
        .map(|(j, s)| {
            Pattern::parse(s)
                .map_err(|r| RuleError::new(format!("{table}[{index}].repositories[{j}]"), r))
        })
        .collect()
}

/// Parses a list of tag globs of rule `table[index]`, field `field`.
pub(crate) fn parse_tags(
    table: &str,
    index: usize,
    field: &str,
    list: Vec<String>,
) -> Result<Vec<TagPattern>, RuleError> {
    list.iter()
        .enumerate()
        .map(|(j, s)| {
            TagPattern::parse(s)
                .map_err(|r| RuleError::new(format!("{table}[{index}].{field}[{j}]"), r))
        })
        .collect()
}

pub(crate) fn matches_any(patterns: &[Pattern], repository: &str) -> bool {
    patterns.iter().any(|p| p.matches(repository))
}

pub(crate) fn list_globs<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let v: Vec<String> = items.map(|s| format!("{s:?}")).collect();
    format!("[{}]", v.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tag_patterns() {
        let p = TagPattern::parse("v*").unwrap();
        assert!(p.matches("v1.2.3") && p.matches("v") && !p.matches("latest"));
        let p = TagPattern::parse("release-*-final").unwrap();
        assert!(p.matches("release-2026.1-final") && !p.matches("release-1"));
        assert!(TagPattern::parse("latest").unwrap().matches("latest"));
        assert!(TagPattern::parse("a/b").is_err());
        assert!(TagPattern::parse("").is_err());
    }
}
