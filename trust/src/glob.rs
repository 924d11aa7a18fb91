//! The image-name patterns of policy rules.
//!
//! A pattern and a name are split on `/`. A segment `**` matches zero or more whole segments;
//! in any other segment `*` matches any run of characters within that one segment (never a
//! `/`); every other character matches itself. So `registry.example.com/prod/*` matches
//! `registry.example.com/prod/app` but not `registry.example.com/prod/team/app`, which
//! `registry.example.com/prod/**` matches (as it matches `registry.example.com/prod` itself).

/// True when `name` matches `pattern`.
pub(crate) fn matches(pattern: &str, name: &str) -> bool {
    let p: Vec<&str> = pattern.split('/').collect();
    let n: Vec<&str> = name.split('/').collect();
    segments(&p, &n)
}

fn segments(p: &[&str], n: &[&str]) -> bool {
    match p.split_first() {
        None => n.is_empty(),
        Some((&"**", rest)) => (0..=n.len()).any(|skip| segments(rest, &n[skip..])),
        Some((seg, rest)) => match n.split_first() {
            Some((name, nrest)) => {
                segment(seg.as_bytes(), name.as_bytes()) && segments(rest, nrest)
            }
            None => false,
        },
    }
}

/// `*` wildcard match within one segment.
fn segment(p: &[u8], n: &[u8]) -> bool {
    match p.split_first() {
        None => n.is_empty(),
        Some((b'*', rest)) => (0..=n.len()).any(|skip| segment(rest, &n[skip..])),
        Some((c, rest)) => n.first() == Some(c) && segment(rest, &n[1..]),
    }
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
