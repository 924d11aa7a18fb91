//! Manifest actions: one `<name> [<payload>] key=value ...` line, parsed and written as pkg
//! does (`actions/_actions.c` for parsing, `Action.__str__` for writing).

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

mod typed;

pub use typed::{DependType, Ownership, Preserve, TypedAction, resolve_hardlink};

/// The action types pkg knows.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ActionKind {
    /// `set`: a package attribute.
    Set,
    /// `depend`: a dependency.
    Depend,
    /// `group`: a UNIX group.
    Group,
    /// `user`: a UNIX user.
    User,
    /// `dir`: a directory.
    Dir,
    /// `file`: a file with a payload.
    File,
    /// `hardlink`: a hard link.
    Hardlink,
    /// `link`: a symbolic link.
    Link,
    /// `driver`: a device driver (a no-op in non-global zones).
    Driver,
    /// `unknown`: pkg's internal placeholder type.
    Unknown,
    /// `license`: a license text with a payload.
    License,
    /// `legacy`: SVR4 package metadata.
    Legacy,
    /// `signature`: a manifest signature.
    Signature,
}

impl ActionKind {
    /// Every kind, in pkg's installation order (the order of this enum).
    pub const ALL: [ActionKind; 13] = [
        Self::Set,
        Self::Depend,
        Self::Group,
        Self::User,
        Self::Dir,
        Self::File,
        Self::Hardlink,
        Self::Link,
        Self::Driver,
        Self::Unknown,
        Self::License,
        Self::Legacy,
        Self::Signature,
    ];

    /// The name as written in manifests.
    pub fn name(self) -> &'static str {
        match self {
            Self::Set => "set",
            Self::Depend => "depend",
            Self::Group => "group",
            Self::User => "user",
            Self::Dir => "dir",
            Self::File => "file",
            Self::Hardlink => "hardlink",
            Self::Link => "link",
            Self::Driver => "driver",
            Self::Unknown => "unknown",
            Self::License => "license",
            Self::Legacy => "legacy",
            Self::Signature => "signature",
        }
    }

    /// Looks a kind up by its manifest name.
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Only `file`, `license` and `signature` carry a payload (positional hash or `hash=`).
    pub fn has_payload(self) -> bool {
        matches!(self, Self::File | Self::License | Self::Signature)
    }

    /// The attribute that identifies an action of this kind within a package.
    pub fn key_attr(self) -> Option<&'static str> {
        Some(match self {
            Self::Set | Self::Driver => "name",
            Self::Depend => "fmri",
            Self::Group => "groupname",
            Self::User => "username",
            Self::Dir | Self::File | Self::Hardlink | Self::Link => "path",
            Self::License => "license",
            Self::Legacy => "pkg",
            Self::Signature => "value",
            Self::Unknown => return None,
        })
    }

    pub(crate) fn is_filesystem(self) -> bool {
        matches!(self, Self::Dir | Self::File | Self::Hardlink | Self::Link)
    }
}

impl fmt::Display for ActionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why an action line did not parse; `column` is 1-based, counted in characters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("column {column}: {message}")]
pub struct ActionError {
    /// 1-based character column in the (logical) action line.
    pub column: usize,
    /// What is wrong, in pkg's words where pkg has them.
    pub message: String,
    /// Which kind of problem it is (for lint rule ids).
    pub kind: ActionErrorKind,
}

/// The kinds of [`ActionError`]: the tokenizer's, then pkg's action constructor checks.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum ActionErrorKind {
    /// The line breaks the action grammar (quotes, keys, values, where a payload may go).
    Syntax,
    /// The action name is not one pkg knows.
    UnknownType,
    /// A required attribute is missing: the key attribute, or `set`'s `name` or `value`.
    Missing(String),
    /// The key attribute is given more than once.
    Repeated(String),
    /// `path` is empty or `/`.
    EmptyPath,
}

/// One action: its kind, optional payload hash and attributes.
///
/// Attributes are kept sorted by key (the order pkg writes them in); repeated keys keep their
/// values in the order given.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    kind: ActionKind,
    hash: Option<String>,
    attrs: BTreeMap<String, Vec<String>>,
}

impl Action {
    /// An action with no attributes; add them with [`Action::push`].
    pub fn new(kind: ActionKind) -> Self {
        Self {
            kind,
            hash: None,
            attrs: BTreeMap::new(),
        }
    }

    /// Parses one logical action line (continuations already joined, see
    /// [`crate::Manifest`]) following pkg's tokenizer: both quote styles, `\"`/`\'`/`\\`
    /// escapes inside quotes (other backslashes stay), adjacent quoted strings joined,
    /// repeated keys collected, a positional payload hash for `file`, `license` and
    /// `signature`. Then applies pkg's constructor checks: the key attribute is present and
    /// single, `set` has `name` and `value` (or the short `set key=value` form), and paths lose
    /// their leading `/`.
    pub fn parse(line: &str) -> Result<Self, ActionError> {
        let err_kind = |byte: usize, message: &str, kind: ActionErrorKind| ActionError {
            column: line[..byte.min(line.len())].chars().count() + 1,
            message: message.to_owned(),
            kind,
        };
        let err = |byte: usize, message: &str| err_kind(byte, message, ActionErrorKind::Syntax);
        let is_ws = |c: u8| matches!(c, b' ' | b'\t' | b'\n');
        let b = line.as_bytes();
        let Some(name_end) = b.iter().position(|&c| is_ws(c)) else {
            return Err(err(line.len(), "no attributes"));
        };
        let name = &line[..name_end];
        let kind = ActionKind::from_name(name).ok_or_else(|| {
            err_kind(
                0,
                &format!("unknown action type {name:?}"),
                ActionErrorKind::UnknownType,
            )
        })?;
        let mut action = Action::new(kind);
        let mut i = name_end;
        let mut prev_quoted = false;
        let mut seen_any = false;
        let mut positional: Option<String> = None;
        // The last (key, value index) written, for joining adjacent quoted strings.
        let mut last: Option<String> = None;
        while i < b.len() {
            if is_ws(b[i]) {
                i += 1;
                continue;
            }
            if prev_quoted && (b[i] == b'"' || b[i] == b'\'') {
                let (val, next) =
                    quoted(line, i).map_err(|at| err(at, "unfinished quoted value"))?;
                let key = last.clone().expect("a quoted value was read before");
                if key == "hash" {
                    // pkg's tokenizer replaces the hash with the adjacent string instead of
                    // joining them; do the same (and check it against the positional hash).
                    if positional.as_ref().is_some_and(|h| *h != val) {
                        return Err(err(i, "hash attribute not identical to positional hash"));
                    }
                    action.hash = Some(val);
                } else {
                    let vals = action.attrs.get_mut(&key).expect("key was inserted");
                    vals.last_mut().expect("non-empty").push_str(&val);
                }
                i = next;
                continue;
            }
            prev_quoted = false;
            if b[i] == b'=' {
                return Err(err(i, "missing key"));
            }
            let ks = i;
            while i < b.len() && b[i] != b'=' && !is_ws(b[i]) {
                if b[i] == b'"' || b[i] == b'\'' {
                    return Err(err(i, "quote in key"));
                }
                i += 1;
            }
            let key = &line[ks..i];
            if i == b.len() || is_ws(b[i]) {
                // A token without '=': only valid as the first token of a payload action.
                if i == b.len() {
                    return Err(err(i, "missing value"));
                }
                if seen_any || action.hash.is_some() {
                    return Err(err(i, "whitespace in key"));
                }
                if !kind.has_payload() {
                    return Err(err(ks, "action type doesn't allow payload"));
                }
                action.hash = Some(key.to_owned());
                positional = Some(key.to_owned());
                seen_any = true;
                continue;
            }
            // b[i] == '='
            if key == "data" {
                return Err(err(ks, "invalid key: 'data'"));
            }
            if key == "hash" && !kind.has_payload() {
                return Err(err(ks, "action type doesn't allow payload"));
            }
            i += 1;
            if i == b.len() || is_ws(b[i]) {
                return Err(err(i, "missing value"));
            }
            let (val, next, was_quoted) = if b[i] == b'"' || b[i] == b'\'' {
                let (v, n) = quoted(line, i).map_err(|at| err(at, "unfinished quoted value"))?;
                (v, n, true)
            } else {
                let mut j = i;
                while j < b.len() && !is_ws(b[j]) {
                    j += 1;
                }
                (line[i..j].to_owned(), j, false)
            };
            if key == "hash" {
                if positional.as_ref().is_some_and(|h| *h != val) {
                    return Err(err(ks, "hash attribute not identical to positional hash"));
                }
                action.hash = Some(val);
            } else {
                action.attrs.entry(key.to_owned()).or_default().push(val);
            }
            seen_any = true;
            last = Some(key.to_owned());
            prev_quoted = was_quoted;
            i = next;
        }
        action.check().map_err(|(k, m)| err_kind(0, &m, k))?;
        Ok(action)
    }

    /// pkg's constructor checks (see [`Action::parse`]); returns the kind and message on
    /// failure.
    fn check(&mut self) -> Result<(), (ActionErrorKind, String)> {
        if self.kind == ActionKind::Set
            && !(self.attrs.contains_key("name") && self.attrs.contains_key("value"))
        {
            if self.attrs.len() == 1 {
                let (k, v) = self.attrs.pop_first().expect("one attribute");
                self.attrs.insert("name".into(), vec![k]);
                self.attrs.insert("value".into(), v);
            } else {
                let absent = if self.attrs.contains_key("name") {
                    "value"
                } else {
                    "name"
                };
                return Err((
                    ActionErrorKind::Missing(absent.into()),
                    "missing \"name\" or \"value\" attribute".into(),
                ));
            }
        }
        if let Some(key) = self.kind.key_attr() {
            if !self.attrs.contains_key(key) {
                return Err((
                    ActionErrorKind::Missing(key.into()),
                    format!("no value specified for key attribute '{key}'"),
                ));
            }
            let multi_ok = self.kind == ActionKind::Depend
                && matches!(
                    self.attrs
                        .get("type")
                        .and_then(|t| t.first())
                        .map(String::as_str),
                    Some("require-any" | "group-any")
                );
            if self.attrs[key].len() > 1 && !multi_ok {
                return Err((
                    ActionErrorKind::Repeated(key.into()),
                    format!("{key} attribute may only be specified once"),
                ));
            }
        }
        if self.kind.is_filesystem() {
            let path = &mut self.attrs.get_mut("path").expect("key attr")[0];
            let trimmed = path.trim_start_matches('/');
            if trimmed.is_empty() {
                return Err((ActionErrorKind::EmptyPath, "empty or '/' path".into()));
            }
            *path = trimmed.to_owned();
        }
        Ok(())
    }

    /// The action kind.
    pub fn kind(&self) -> ActionKind {
        self.kind
    }

    /// The payload hash (positional or `hash=`): the SHA-1 of the uncompressed payload in
    /// published manifests.
    pub fn hash(&self) -> Option<&str> {
        self.hash.as_deref()
    }

    /// Sets or clears the payload hash.
    pub fn set_hash(&mut self, hash: Option<String>) {
        self.hash = hash;
    }

    /// All attributes, sorted by key.
    pub fn attrs(&self) -> &BTreeMap<String, Vec<String>> {
        &self.attrs
    }

    /// The first value of `key`.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.attrs
            .get(key)
            .and_then(|v| v.first())
            .map(String::as_str)
    }

    /// Every value of `key` (empty when absent).
    pub fn get_all(&self, key: &str) -> &[String] {
        self.attrs.get(key).map(Vec::as_slice).unwrap_or(&[])
    }

    /// Adds a value to `key` (repeated keys build a list).
    pub fn push(&mut self, key: &str, value: &str) {
        self.attrs
            .entry(key.to_owned())
            .or_default()
            .push(value.to_owned());
    }

    /// Replaces all values of `key` with one value.
    pub fn set(&mut self, key: &str, value: &str) {
        self.attrs.insert(key.to_owned(), vec![value.to_owned()]);
    }

    /// Removes `key`, returning its values.
    pub fn remove(&mut self, key: &str) -> Option<Vec<String>> {
        self.attrs.remove(key)
    }

    /// The value of the kind's key attribute (e.g. `path` for files).
    pub fn key(&self) -> Option<&str> {
        self.kind.key_attr().and_then(|k| self.get(k))
    }

    /// A typed view of the action, checking the values pkg requires for publication
    /// (modes, dependency types, FMRIs, `preserve` values and so on).
    pub fn typed(&self) -> Result<TypedAction<'_>, String> {
        TypedAction::from_action(self)
    }
}

/// Reads a quoted string starting at `start` (the quote). Returns the unescaped value and the
/// index after the closing quote, or the index where input ran out.
fn quoted(line: &str, start: usize) -> Result<(String, usize), usize> {
    let b = line.as_bytes();
    let q = b[start];
    let mut out = Vec::new();
    let mut i = start + 1;
    while i < b.len() {
        let c = b[i];
        if c == b'\\' {
            if i + 1 == b.len() {
                return Err(i);
            }
            let n = b[i + 1];
            if n == b'\\' || n == q {
                out.push(n);
            } else {
                out.push(c);
                out.push(n);
            }
            i += 2;
        } else if c == q {
            // Only ASCII bytes were examined, so slicing stays on char boundaries.
            return Ok((String::from_utf8(out).expect("utf-8 in, utf-8 out"), i + 1));
        } else {
            out.push(c);
            i += 1;
        }
    }
    Err(b.len())
}

impl FromStr for Action {
    type Err = ActionError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::parse(s)
    }
}

/// Writes a value as pkg's `Action.__str__` does: quoted with `"` when it contains a space or
/// a quote or is empty, with `'` when it contains `"` but not `'`, and with `"` and `\"` when it
/// contains both. Unlike pkg, values with tabs, newlines or backslashes that need quoting are
/// also written so that they read back unchanged (pkg's output does not round-trip there).
fn write_value(f: &mut fmt::Formatter<'_>, v: &str) -> fmt::Result {
    let needs =
        v.is_empty() || v.contains([' ', '\'', '"', '\t', '\n']) || v.starts_with(['"', '\'']);
    if !needs {
        return f.write_str(v);
    }
    let has_bs = v.contains('\\');
    if !v.contains('"') && !has_bs {
        write!(f, "\"{v}\"")
    } else if !v.contains('\'') && !has_bs {
        write!(f, "'{v}'")
    } else {
        f.write_str("\"")?;
        for c in v.chars() {
            match c {
                '"' => f.write_str("\\\"")?,
                '\\' => f.write_str("\\\\")?,
                c => write!(f, "{c}")?,
            }
        }
        f.write_str("\"")
    }
}

impl fmt::Display for Action {
    /// pkg's manifest form: name, positional hash (as `hash=` if it contains `=`, a space or
    /// `"`), then attributes sorted by key, repeated keys in their order.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind.name())?;
        let mut hash_attr = None;
        if let Some(h) = &self.hash {
            if h.contains(['=', ' ', '"', '\'', '\t', '\n']) || h.is_empty() {
                hash_attr = Some(h.as_str());
            } else {
                write!(f, " {h}")?;
            }
        }
        let mut hash_written = hash_attr.is_none();
        for (k, vals) in &self.attrs {
            if !hash_written && k.as_str() > "hash" {
                f.write_str(" hash=")?;
                write_value(f, hash_attr.expect("pending"))?;
                hash_written = true;
            }
            for v in vals {
                write!(f, " {k}=")?;
                write_value(f, v)?;
            }
        }
        if !hash_written {
            f.write_str(" hash=")?;
            write_value(f, hash_attr.expect("pending"))?;
        }
        if self.attrs.is_empty() && self.hash.is_none() {
            // pkg writes a bare name here, which it cannot read back ("no attributes"); a
            // trailing space keeps the line readable.
            f.write_str(" ")?;
        }
        Ok(())
    }
}
#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> Action {
        Action::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"))
    }

    fn perr(s: &str) -> ActionError {
        Action::parse(s).expect_err(s)
    }

    #[test]
    fn quoted_values_both_styles_and_escapes() {
        let a = p(r#"set name=pkg.summary value="it's \"x\" \\ \n""#);
        assert_eq!(a.get("value"), Some(r#"it's "x" \ \n"#));
        let a = p(r#"set name=a value='say "hi" \'there\''"#);
        assert_eq!(a.get("value"), Some(r#"say "hi" 'there'"#));
        // Only the matching quote and backslash are escapes.
        let a = p(r#"set name=a value="a\'b""#);
        assert_eq!(a.get("value"), Some(r"a\'b"));
        let a = p(r#"set name=a value="""#);
        assert_eq!(a.get("value"), Some(""));
    }

    #[test]
    fn unquoted_values_keep_equals_and_inner_quotes() {
        let a = p(r#"set name=a value=x=y"z'w"#);
        assert_eq!(a.get("value"), Some(r#"x=y"z'w"#));
        let a = p("set name=a\tvalue=b\n");
        assert_eq!(a.get("value"), Some("b"));
        // '#' inside a line is data.
        assert_eq!(p("set name=a value=#b").get("value"), Some("#b"));
    }

    #[test]
    fn adjacent_quoted_strings_are_joined() {
        assert_eq!(
            p(r#"set name=a value="foo " "bar""#).get("value"),
            Some("foo bar")
        );
        assert_eq!(p("set name=a value='a ''b'").get("value"), Some("a b"));
        assert_eq!(
            p(r#"set name=a value="a"   'b' "c" name2=x"#).get("value"),
            Some("abc")
        );
        // Joined onto the last value of a repeated key.
        let a = p(r#"set name=a value=x value="y" "z""#);
        assert_eq!(a.get_all("value"), ["x", "yz"]);
        // Not after an unquoted value: a quote there starts a key, which is an error.
        assert_eq!(perr(r#"set name=a value=x "y""#).message, "quote in key");
        // A key may follow a quoted value without whitespace.
        assert_eq!(p(r#"set name="a"value=b"#).get("value"), Some("b"));
    }

    #[test]
    fn repeated_keys_build_lists() {
        let a = p("set name=variant.arch value=i386 value=sparc");
        assert_eq!(a.get_all("value"), ["i386", "sparc"]);
        let a =
            p("driver name=e1000g alias=pci8086,1000 alias=pci8086,1001 perms=\"* 0666 root sys\"");
        assert_eq!(a.get_all("alias").len(), 2);
    }

    #[test]
    fn positional_hash_and_hash_attribute() {
        let a = p("file abc123 path=/usr/bin/x mode=0555 owner=root group=bin");
        assert_eq!(a.hash(), Some("abc123"));
        assert_eq!(a.get("path"), Some("usr/bin/x"));
        let a = p("file hash=a=b path=x");
        assert_eq!(a.hash(), Some("a=b"));
        assert_eq!(a.attrs().get("hash"), None);
        p("file abc hash=abc path=x");
        let e = perr("file abc hash=abd path=x");
        assert_eq!(e.message, "hash attribute not identical to positional hash");
        assert_eq!(e.column, 10);
        let e = perr("dir abc path=x");
        assert_eq!(e.message, "action type doesn't allow payload");
        assert_eq!(
            perr("dir hash=x path=x").message,
            "action type doesn't allow payload"
        );
        let e = perr("file abc def path=x");
        assert_eq!((e.message.as_str(), e.column), ("whitespace in key", 13));
        p("license 9f2c license=\"MIT License\" must-display=false");
        p("signature 0a1b algorithm=rsa-sha256 value=abcd version=0");
        p("file NOHASH path=a");
        // An adjacent quoted string after hash= replaces the hash, as in pkg.
        assert_eq!(p(r#"file hash="a" "b" path=x"#).hash(), Some("b"));
        assert!(Action::parse(r#"file a hash="a" "b" path=x"#).is_err());
    }

    #[test]
    fn errors_name_the_column() {
        let cases: &[(&str, &str, usize)] = &[
            ("set", "no attributes", 4),
            ("frob name=a", "unknown action type \"frob\"", 1),
            ("set name=a value=", "missing value", 18),
            ("set name=a value= x", "missing value", 18),
            ("set name=a =x", "missing key", 12),
            ("set name=a va\"l=x", "quote in key", 14),
            ("set name=a value=\"abc", "unfinished quoted value", 22),
            ("set name=a value=\"abc\\", "unfinished quoted value", 22),
            ("set name=a data=x", "invalid key: 'data'", 12),
            ("set name=é value=\"x", "unfinished quoted value", 20),
            ("file abc", "missing value", 9),
            (
                "dir mode=0755",
                "no value specified for key attribute 'path'",
                1,
            ),
            ("dir path=/", "empty or '/' path", 1),
            (
                "dir path=a path=b",
                "path attribute may only be specified once",
                1,
            ),
            (
                "set name=a b=c",
                "missing \"name\" or \"value\" attribute",
                1,
            ),
        ];
        for (line, msg, col) in cases {
            let e = perr(line);
            assert_eq!((e.message.as_str(), e.column), (*msg, *col), "{line}");
        }
    }

    #[test]
    fn short_set_form_and_any_dependencies() {
        let a = p("set pkg.summary=hello");
        assert_eq!(
            (a.get("name"), a.get("value")),
            (Some("pkg.summary"), Some("hello"))
        );
        let a = p("depend type=require-any fmri=a@1 fmri=b@2");
        assert_eq!(a.get_all("fmri").len(), 2);
        assert!(Action::parse("depend type=require fmri=a@1 fmri=b@2").is_err());
    }

    #[test]
    fn writes_like_pkg() {
        let cases = [
            (
                "file  abc  path=/x owner=root  mode=0644",
                "file abc mode=0644 owner=root path=x",
            ),
            ("set value=\"a b\" name=x", "set name=x value=\"a b\""),
            (
                "set name=x value='say \"hi\"'",
                "set name=x value='say \"hi\"'",
            ),
            (
                r#"set name=x value="it's \"x\"""#,
                r#"set name=x value="it's \"x\"""#,
            ),
            ("set name=x value=\"\"", "set name=x value=\"\""),
            ("file hash=a=b path=x", "file hash=a=b path=x"),
            ("file hash='a b' path=x", "file hash=\"a b\" path=x"),
            (
                "file hash='a b' group=g path=p",
                "file group=g hash=\"a b\" path=p",
            ),
            ("set name=v value=b value=a", "set name=v value=b value=a"),
        ];
        for (input, want) in cases {
            let a = p(input);
            assert_eq!(a.to_string(), want);
            assert_eq!(p(&a.to_string()), a, "round trip of {input}");
        }
        // Values pkg itself would not round-trip.
        for v in ["a\\\"b c'", "tab\there", "x\\\\ y", "'lead"] {
            let mut a = Action::new(ActionKind::Set);
            a.set("name", "n");
            a.set("value", v);
            assert_eq!(p(&a.to_string()).get("value"), Some(v), "{}", a);
        }
    }

    #[test]
    fn typed_views() {
        let a = p(
            "file abc path=etc/passwd mode=0644 owner=root group=sys preserve=true timestamp=19700101T000000Z",
        );
        match a.typed().unwrap() {
            TypedAction::File {
                path,
                own,
                preserve,
                timestamp,
                hash,
            } => {
                assert_eq!((path, hash), ("etc/passwd", Some("abc")));
                assert_eq!(own.mode, Some(0o644));
                assert_eq!(preserve, Some(Preserve::True));
                assert_eq!(timestamp, Some("19700101T000000Z"));
            }
            t => panic!("{t:?}"),
        }
        assert!(p("dir path=a mode=0759").typed().is_err());
        assert!(p("file a path=a preserve=maybe").typed().is_err());
        assert!(p("depend fmri=a type=sometimes").typed().is_err());
        assert!(p("depend fmri=a type=conditional").typed().is_err());
        match p("depend fmri=pkg:/a@1.0 type=conditional predicate=b")
            .typed()
            .unwrap()
        {
            TypedAction::Depend {
                kind,
                fmris,
                predicate,
            } => {
                assert_eq!(kind, DependType::Conditional);
                assert_eq!(fmris[0].stem(), "a");
                assert_eq!(predicate.unwrap().stem(), "b");
            }
            t => panic!("{t:?}"),
        }
        assert!(matches!(
            p("user username=mongodb group=mongodb uid=x").typed(),
            Err(m) if m.contains("uid")
        ));
    }

    #[test]
    fn kinds_sort_in_pkg_install_order() {
        let mut kinds: Vec<ActionKind> = [
            "signature",
            "file",
            "set",
            "license",
            "dir",
            "user",
            "link",
            "group",
            "depend",
            "driver",
            "hardlink",
            "legacy",
            "unknown",
        ]
        .iter()
        .map(|n| ActionKind::from_name(n).unwrap())
        .collect();
        kinds.sort();
        let names: Vec<_> = kinds.iter().map(|k| k.name()).collect();
        assert_eq!(
            names,
            [
                "set",
                "depend",
                "group",
                "user",
                "dir",
                "file",
                "hardlink",
                "link",
                "driver",
                "unknown",
                "license",
                "legacy",
                "signature"
            ]
        );
    }

    #[test]
    fn hardlink_targets_are_relative_to_the_link_directory() {
        assert_eq!(resolve_hardlink("a/b/c", "../x").as_deref(), Some("a/x"));
        assert_eq!(
            resolve_hardlink("usr/lib/demo/alias", "../../bin/tool").as_deref(),
            Some("usr/bin/tool")
        );
        assert_eq!(resolve_hardlink("a/b", "c").as_deref(), Some("a/c"));
        assert_eq!(
            resolve_hardlink("a/b", "/usr/bin/x").as_deref(),
            Some("usr/bin/x")
        );
        assert_eq!(resolve_hardlink("a", "../../x"), None);
    }
}
