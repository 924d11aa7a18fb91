//! The image-name patterns of policy rules.
//!
//! A pattern and a name are split on `/`. A segment `**` matches zero or more whole segments;
//! in any other segment `*` matches any run of characters within that one segment (never a
//! `/`); every other character matches itself. So `registry.example.com/prod/*` matches
//! `registry.example.com/prod/app` but not `registry.example.com/prod/team/app`, which
//! `registry.example.com/prod/**` matches (as it matches `registry.example.com/prod` itself).
//! The matching is [`validator::Glob`]'s, linear in the name.

use validator::{DoubleStar, Glob, GlobSyntax, RegistryHost, canonical_repository};

/// True when `name` matches `pattern`.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let syntax = GlobSyntax {
        separator: Some(b'/'),
        question: false,
        double_star: DoubleStar::WholeSegments,
    };
    Glob::new(pattern, syntax).matches(name)
}

/// `pattern` in the canonical spelling names are matched in ([`validator::canonical_name`]):
/// a literal host as [`RegistryHost`] spells it, a glob host lower-cased, a one-segment path
/// under Docker Hub with `library/` (`docker.io/*` is `docker.io/library/*`, `**` stays).
/// Refuses, saying why, a pattern that could match no canonical name.
pub(crate) fn canonical_pattern(pattern: &str) -> Result<String, String> {
    if pattern.ends_with('/') {
        return Err(format!(
            "{pattern:?} ends with '/' and matches nothing: write HOST/PATH, or HOST/PATH/** for everything under it"
        ));
    }
    let (host, path) = match pattern.split_once('/') {
        Some((h, p)) => (h, Some(p)),
        None => (pattern, None),
    };
    if let Some(p) = path
        && p.bytes().any(|b| b.is_ascii_uppercase())
    {
        return Err(format!(
            "{pattern:?}: repository paths are lower case, so {p:?} matches nothing"
        ));
    }
    if host.contains('*') {
        let host = host.to_ascii_lowercase();
        if host.ends_with(":443") || host.ends_with(":80") {
            return Err(format!(
                "{pattern:?}: a host glob with a default port (:443, :80) matches nothing, as canonical hosts have no default port: leave the port out"
            ));
        }
        return Ok(match path {
            Some(p) => format!("{host}/{p}"),
            None => host,
        });
    }
    let h = RegistryHost::parse(host).map_err(|e| format!("{pattern:?}: {e}"))?;
    let Some(path) = path else {
        return Err(format!(
            "{pattern:?} names a registry host without a repository and matches nothing: write {h}/** for every repository there"
        ));
    };
    let path = if path == "**" {
        path.into()
    } else {
        canonical_repository(&h, path)
    };
    Ok(format!("{h}/{path}"))
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
    fn canonical_patterns() {
        for (pattern, canonical) in [
            ("LOCALHOST:5000/app*", "localhost:5000/app*"),
            ("localhost:5000/app*", "localhost:5000/app*"),
            ("Reg.Example.:443/prod/**", "reg.example/prod/**"),
            ("index.docker.io/nginx", "docker.io/library/nginx"),
            ("docker.io/*", "docker.io/library/*"),
            ("docker.io/**", "docker.io/**"),
            ("docker.io/team/*", "docker.io/team/*"),
            ("*.EXAMPLE.com/**", "*.example.com/**"),
            ("**", "**"),
            ("**/prod/*", "**/prod/*"),
        ] {
            assert_eq!(canonical_pattern(pattern).unwrap(), canonical, "{pattern}");
        }
        for bad in ["reg.example", "x/*", "reg.example/a/", "*:80/a"] {
            assert!(canonical_pattern(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn repository_of_reference() {
        assert_eq!(repository("r.example:5000/a/b:1.0"), "r.example:5000/a/b");
        assert_eq!(repository("r.example:5000/a/b"), "r.example:5000/a/b");
        assert_eq!(repository("r.example/a@sha256:00"), "r.example/a");
        assert_eq!(repository("r.example/a:t@sha256:00"), "r.example/a");
    }
}
