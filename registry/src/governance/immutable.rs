//! `[[immutable]]` tags: a manifest PUT that would point such a tag at another digest is
//! refused with `DENIED` naming the rule; pushing the digest the tag already has succeeds.
//!
//! The check runs twice: once before anything is written (so a plain overwrite attempt changes
//! nothing), and again inside the conditional write of the tag index
//! ([`crate::repo::Repos::set_tag`]), the one place every replica writes tags through. A racing
//! push from another replica that set the tag first makes this replica's conditional write
//! fail; the retry reads the new index, finds the tag taken by another digest, and refuses. So
//! exactly one digest ever wins an immutable tag, whatever the number of replicas.
//!
//! Deleting an immutable tag (or the manifest it points at) is allowed only to callers with
//! the delete right on the repository (with `[auth]`; without it everyone has every right) and
//! is logged at warning level with the rule, the tag, the digest and the caller. A rule with
//! `protect_delete = true` (Harbor's behaviour) refuses that delete too, whatever the caller's
//! rights: `DENIED` naming the rule, the tag and the digest. Such a tag only goes when the rule
//! is changed.

use std::fmt;

use serde::Deserialize;

use super::{RuleError, TagPattern, list_globs, matches_any, parse_repositories, parse_tags};
use crate::auth::acl::Pattern;
use crate::errors::{ApiError, Code};
use validator::{Digest, Name, Tag};

/// One `[[immutable]]` entry as written in the file.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileImmutable {
    repositories: Vec<String>,
    tags: Vec<String>,
    #[serde(default)]
    protect_delete: bool,
}

/// Tags matching one of `tags` in a repository matching one of `repositories` never move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImmutableRule {
    /// Position in the file (`immutable[0]` is the first).
    pub index: usize,
    /// Repository globs.
    pub repositories: Vec<Pattern>,
    /// Tag globs.
    pub tags: Vec<TagPattern>,
    /// Whether deleting a covered tag, or the manifest one points at, is refused too.
    pub protect_delete: bool,
}

impl ImmutableRule {
    pub(crate) fn from_file(index: usize, f: FileImmutable) -> Result<ImmutableRule, RuleError> {
        let repositories = parse_repositories("immutable", index, f.repositories)?;
        if f.tags.is_empty() {
            return Err(RuleError::new(
                format!("immutable[{index}].tags"),
                "name at least one tag glob (\"*\" for every tag)",
            ));
        }
        let tags = parse_tags("immutable", index, "tags", f.tags)?;
        Ok(ImmutableRule {
            index,
            repositories,
            tags,
            protect_delete: f.protect_delete,
        })
    }

    /// Whether the rule covers `tag` in `repository`.
    pub fn covers(&self, repository: &str, tag: &str) -> bool {
        matches_any(&self.repositories, repository) && self.tags.iter().any(|t| t.matches(tag))
    }
}

impl fmt::Display for ImmutableRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "immutable[{}] (repositories {}, tags {})",
            self.index,
            list_globs(self.repositories.iter().map(Pattern::as_str)),
            list_globs(self.tags.iter().map(TagPattern::as_str)),
        )
    }
}

/// The `DENIED` answer to moving `tag` of `name` from `old` to `new`.
pub(crate) fn refusal(
    rule: &ImmutableRule,
    name: &Name,
    tag: &Tag,
    old: &Digest,
    new: &Digest,
) -> ApiError {
    ApiError::new(
        Code::Denied,
        format!(
            "tag {tag} of {name} is immutable under {rule}: it points at {old} and cannot move to {new}"
        ),
    )
    .with_reason()
}

/// The `DENIED` answer to deleting `tag` of `name` (pointing at `digest`) under a rule with
/// `protect_delete`.
pub(crate) fn delete_refusal(
    rule: &ImmutableRule,
    name: &Name,
    tag: &str,
    digest: &Digest,
) -> ApiError {
    ApiError::new(
        Code::Denied,
        format!(
            "tag {tag} of {name} (at {digest}) is immutable under {rule} with protect_delete: it cannot be deleted, nor the manifest it points at"
        ),
    )
    .with_reason()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_parse_and_name_themselves() {
        let r = ImmutableRule::from_file(
            2,
            FileImmutable {
                repositories: vec!["prod/**".into()],
                tags: vec!["v*".into(), "stable".into()],
                protect_delete: false,
            },
        )
        .unwrap();
        assert!(r.covers("prod/app", "v1") && r.covers("prod/a/b", "stable"));
        assert!(!r.covers("dev/app", "v1") && !r.covers("prod/app", "latest"));
        assert_eq!(
            r.to_string(),
            r#"immutable[2] (repositories ["prod/**"], tags ["v*", "stable"])"#
        );
        let e = ImmutableRule::from_file(
            0,
            FileImmutable {
                repositories: vec!["a".into()],
                tags: vec![],
                protect_delete: false,
            },
        )
        .unwrap_err();
        assert_eq!(e.key, "immutable[0].tags");
        let e = ImmutableRule::from_file(
            1,
            FileImmutable {
                repositories: vec!["A".into()],
                tags: vec!["x".into()],
                protect_delete: false,
            },
        )
        .unwrap_err();
        assert_eq!(e.key, "immutable[1].repositories[0]");
    }
}
