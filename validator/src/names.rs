//! Repository names and tags, checked once at the edge (distribution-spec §"Pulling manifests").

use std::fmt;

/// Longest repository name accepted. Clients cap `host[:port]/name` at 255 characters.
pub const MAX_NAME_LEN: usize = 255;

/// Longest tag (128 characters).
pub const MAX_TAG_LEN: usize = 128;

/// A repository name could not be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid repository name {name:?}")]
pub struct NameError {
    /// The rejected name (shortened when long).
    pub name: String,
}

/// A tag could not be accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid tag {tag:?}")]
pub struct TagError {
    /// The rejected tag (shortened when long).
    pub tag: String,
}

fn shorten(s: &str) -> String {
    s.chars().take(300).collect()
}

/// A repository name matching
/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*(\/[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*)*`.
///
/// Every component starts and ends with `[a-z0-9]`, so a name is a safe relative path.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Name(String);

impl Name {
    /// Checks a repository name.
    pub fn parse(name: &str) -> Result<Name, NameError> {
        if name.is_empty() || name.len() > MAX_NAME_LEN || !name.split('/').all(component_ok) {
            return Err(NameError {
                name: shorten(name),
            });
        }
        Ok(Name(name.to_owned()))
    }

    /// The name.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// `[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*`
fn component_ok(c: &str) -> bool {
    let b = c.as_bytes();
    let alnum = |x: u8| x.is_ascii_lowercase() || x.is_ascii_digit();
    if b.is_empty() || !alnum(b[0]) || !alnum(b[b.len() - 1]) {
        return false;
    }
    let mut i = 0;
    while i < b.len() {
        if alnum(b[i]) {
            i += 1;
            continue;
        }
        // A separator run: ".", "_", "__" or "-+".
        let start = i;
        while i < b.len() && !alnum(b[i]) {
            i += 1;
        }
        let sep = &c[start..i];
        let ok = sep == "." || sep == "_" || sep == "__" || sep.bytes().all(|x| x == b'-');
        if !ok {
            return false;
        }
    }
    true
}

impl fmt::Display for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Name {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Name({})", self.0)
    }
}

/// A tag matching `[a-zA-Z0-9_][a-zA-Z0-9._-]{0,127}`.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Tag(String);

impl Tag {
    /// Checks a tag.
    pub fn parse(tag: &str) -> Result<Tag, TagError> {
        let b = tag.as_bytes();
        let ok = !b.is_empty()
            && b.len() <= MAX_TAG_LEN
            && (b[0].is_ascii_alphanumeric() || b[0] == b'_')
            && b[1..]
                .iter()
                .all(|&x| x.is_ascii_alphanumeric() || matches!(x, b'.' | b'_' | b'-'));
        if !ok {
            return Err(TagError { tag: shorten(tag) });
        }
        Ok(Tag(tag.to_owned()))
    }

    /// The tag.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Tag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Tag({})", self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        for good in [
            "a",
            "library/ubuntu",
            "a.b_c__d---e/f0/g",
            "conformance/repo1",
            "x9",
        ] {
            assert_eq!(Name::parse(good).unwrap().as_str(), good);
        }
        for bad in [
            "", "A", "a/", "/a", "a//b", "a..b", "a___b", "-a", "a-", "a_.b", "a/.b", "a/../b",
            "a b", "_a",
        ] {
            assert!(Name::parse(bad).is_err(), "{bad:?}");
        }
        assert!(Name::parse(&"a".repeat(MAX_NAME_LEN + 1)).is_err());
    }

    #[test]
    fn tags() {
        for good in ["latest", "v1.0.0", "_x", "A-b_c.d", &"t".repeat(128)] {
            assert!(Tag::parse(good).is_ok(), "{good:?}");
        }
        for bad in ["", ".x", "-x", "a:b", "a/b", &"t".repeat(129), "sha256:abc"] {
            assert!(Tag::parse(bad).is_err(), "{bad:?}");
        }
    }
}
