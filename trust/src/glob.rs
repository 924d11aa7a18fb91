//! The image-name patterns of policy rules.
//!
//! A pattern and a name are split on `/`. A segment `**` matches zero or more whole segments;
//! in any other segment `*` matches any run of characters within that one segment (never a
//! `/`); every other character matches itself. So `registry.example.com/prod/*` matches
//! `registry.example.com/prod/app` but not `registry.example.com/prod/team/app`, which
//! `registry.example.com/prod/**` matches (as it matches `registry.example.com/prod` itself).
//! The matching is [`validator::Glob`]'s, linear in the name.

use validator::{DoubleStar, Glob, GlobSyntax};

/// True when `name` matches `pattern`.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let syntax = GlobSyntax {
        separator: Some(b'/'),
        question: false,
        double_star: DoubleStar::WholeSegments,
    };
    Glob::new(pattern, syntax).matches(name)
}

/// The repository part of an image reference: the tag (`:tag` after the last `/`) and the
/// digest (`@alg:hex`) removed.
pub(crate) fn repository(reference: &str) -> &str {
    let no_digest = reference.split_once('@').map_or(reference, |(r, _)| r);
    let last_slash = no_digest.rfind('/').map_or(0, |i| i + 1);
    match no_digest[last_slash..].find(':') {
        Some(i) => &no_digest[..last_slash + i],
        None => no_digest,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn star_stays_in_its_segment() {
        assert!(matches("r.example/prod/*", "r.example/prod/app"));
        assert!(!matches("r.example/prod/*", "r.example/prod/team/app"));
        assert!(!matches("r.example/prod/*", "r.example/prod"));
        assert!(matches("r.example/prod/app-*", "r.example/prod/app-web"));
        assert!(!matches("r.example/prod/app-*", "r.example/prod/db"));
        assert!(matches("*/prod/app", "localhost:5000/prod/app"));
    }

    #[test]
    fn double_star_crosses_segments() {
        assert!(matches("r.example/prod/**", "r.example/prod/team/app"));
        assert!(matches("r.example/prod/**", "r.example/prod"));
        assert!(matches("**", "anything/at/all"));
        assert!(matches("**/app", "r.example/a/b/app"));
        assert!(!matches("r.example/prod/**", "r.example/dev/app"));
    }

    #[test]
    fn literal() {
        assert!(matches("r.example/app", "r.example/app"));
        assert!(!matches("r.example/app", "r.example/apps"));
    }

    #[test]
    fn repository_of_reference() {
        assert_eq!(repository("r.example:5000/a/b:1.0"), "r.example:5000/a/b");
        assert_eq!(repository("r.example:5000/a/b"), "r.example:5000/a/b");
        assert_eq!(repository("r.example/a@sha256:00"), "r.example/a");
        assert_eq!(repository("r.example/a:t@sha256:00"), "r.example/a");
    }
}
