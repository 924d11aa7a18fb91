//! Package manifests: the text file of actions, with pkg's line rules.

use std::fmt;

use crate::action::{Action, ActionErrorKind, ActionKind};
use crate::fmri::Fmri;

/// A manifest error, naming the physical line and column (both 1-based).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}, column {column}: {message}")]
pub struct ManifestError {
    /// 1-based physical line.
    pub line: usize,
    /// 1-based character column in that line.
    pub column: usize,
    /// What is wrong.
    pub message: String,
    /// Which kind of problem it is ([`ActionErrorKind::Syntax`] for invalid UTF-8).
    pub kind: ActionErrorKind,
}

/// A parsed manifest: its actions in file order, and for manifests read from text the line
/// each action starts on (for lint findings). Equality compares the actions only.
#[derive(Debug, Clone, Default)]
pub struct Manifest {
    actions: Vec<Action>,
    lines: Vec<usize>,
}

impl PartialEq for Manifest {
    fn eq(&self, other: &Self) -> bool {
        self.actions == other.actions
    }
}

impl Eq for Manifest {}

/// One logical line and where its pieces came from, to map columns back.
struct Logical<'a> {
    text: String,
    /// (start in `text`, physical line index, byte offset of the piece in that line)
    pieces: Vec<(usize, usize, usize)>,
    lines: &'a [&'a str],
}

impl Logical<'_> {
    /// Maps a 1-based character column of the logical line to (line, column), 1-based.
    fn locate(&self, column: usize) -> (usize, usize) {
        let byte = self
            .text
            .char_indices()
            .nth(column.saturating_sub(1))
            .map(|(b, _)| b)
            .unwrap_or(self.text.len());
        let &(start, line, off) = self
            .pieces
            .iter()
            .rev()
            .find(|(s, _, _)| *s <= byte)
            .unwrap_or(&self.pieces[0]);
        let phys = self.lines[line];
        let at = (off + byte - start).min(phys.len());
        let col = phys.get(..at).map(|p| p.chars().count()).unwrap_or(at);
        (line + 1, col + 1)
    }
}

/// Python's `str.splitlines()`, which pkg uses on manifest text: lines end at `\n`, `\r`,
/// `\r\n`, `\v`, `\f`, `\x1c`-`\x1e`, U+0085, U+2028 and U+2029; no empty last line.
fn py_splitlines(text: &str) -> Vec<&str> {
    let mut out = Vec::new();
    let mut start = 0;
    let mut chars = text.char_indices().peekable();
    while let Some((i, c)) = chars.next() {
        if matches!(
            c,
            '\n' | '\r'
                | '\x0b'
                | '\x0c'
                | '\x1c'
                | '\x1d'
                | '\x1e'
                | '\u{85}'
                | '\u{2028}'
                | '\u{2029}'
        ) {
            out.push(&text[start..i]);
            start = i + c.len_utf8();
            if c == '\r' && chars.peek().is_some_and(|&(_, n)| n == '\n') {
                chars.next();
                start += 1;
            }
        }
    }
    if start < text.len() {
        out.push(&text[start..]);
    }
    out
}

/// Python's `str.lstrip()`: Unicode white space plus `\x1c`-`\x1f`.
fn py_lstrip(s: &str) -> &str {
    s.trim_start_matches(|c: char| c.is_whitespace() || ('\x1c'..='\x1f').contains(&c))
}

/// Splits manifest text into logical action lines as pkg's `Manifest.set_content` does:
/// every line is left-stripped, a trailing `\` joins the next line with no space inserted,
/// blank lines and lines starting with `#` are skipped (there are no trailing comments).
fn logical_lines<'a>(lines: &'a [&'a str]) -> Vec<Logical<'a>> {
    let mut out = Vec::new();
    let mut acc: Option<Logical<'a>> = None;
    for (n, raw) in lines.iter().enumerate() {
        let stripped = py_lstrip(raw);
        let off = raw.len() - stripped.len();
        let cur = acc.get_or_insert_with(|| Logical {
            text: String::new(),
            pieces: Vec::new(),
            lines,
        });
        cur.pieces.push((cur.text.len(), n, off));
        if let Some(body) = stripped.strip_suffix('\\') {
            cur.text.push_str(body);
            continue;
        }
        cur.text.push_str(stripped);
        let done = acc.take().expect("set above");
        if !done.text.is_empty() && !done.text.starts_with('#') {
            out.push(done);
        }
    }
    // A continuation on the last line: pkg parses what was accumulated.
    if let Some(done) = acc
        && !done.text.is_empty()
        && !done.text.starts_with('#')
    {
        out.push(done);
    }
    out
}

impl Manifest {
    /// An empty manifest.
    pub fn new() -> Self {
        Self::default()
    }

    /// Parses manifest text, stopping at the first error.
    pub fn parse(text: &str) -> Result<Self, ManifestError> {
        let (m, mut errors) = Self::parse_all(text);
        if errors.is_empty() {
            Ok(m)
        } else {
            Err(errors.swap_remove(0))
        }
    }

    /// Parses manifest bytes, which must be UTF-8 (an error names the line and column of the
    /// first invalid byte).
    pub fn parse_bytes(bytes: &[u8]) -> Result<Self, ManifestError> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::parse(text),
            Err(e) => {
                let good = &bytes[..e.valid_up_to()];
                let line = good.iter().filter(|&&b| b == b'\n').count() + 1;
                let start = good.iter().rposition(|&b| b == b'\n').map_or(0, |i| i + 1);
                let column =
                    std::str::from_utf8(&good[start..]).map_or(1, |s| s.chars().count() + 1);
                Err(ManifestError {
                    line,
                    column,
                    message: "invalid utf-8".into(),
                    kind: ActionErrorKind::Syntax,
                })
            }
        }
    }

    /// Parses manifest text, collecting every error (for linting) and every good action.
    pub fn parse_all(text: &str) -> (Self, Vec<ManifestError>) {
        let lines = py_splitlines(text);
        let mut actions = Vec::new();
        let mut starts = Vec::new();
        let mut errors = Vec::new();
        for logical in logical_lines(&lines) {
            match Action::parse(&logical.text) {
                Ok(a) => {
                    actions.push(a);
                    starts.push(logical.locate(1).0);
                }
                Err(e) => {
                    let (line, column) = logical.locate(e.column);
                    errors.push(ManifestError {
                        line,
                        column,
                        message: e.message,
                        kind: e.kind,
                    });
                }
            }
        }
        (
            Self {
                actions,
                lines: starts,
            },
            errors,
        )
    }

    /// The 1-based line the action at `index` started on, when the manifest was parsed from
    /// text and its actions not added or removed since.
    pub fn line(&self, index: usize) -> Option<usize> {
        if self.lines.len() == self.actions.len() {
            self.lines.get(index).copied()
        } else {
            None
        }
    }

    /// The actions in file order.
    pub fn actions(&self) -> &[Action] {
        &self.actions
    }

    /// Mutable access to the actions.
    pub fn actions_mut(&mut self) -> &mut Vec<Action> {
        &mut self.actions
    }

    /// Actions of one kind.
    pub fn by_kind(&self, kind: ActionKind) -> impl Iterator<Item = &Action> {
        self.actions.iter().filter(move |a| a.kind() == kind)
    }

    /// The values of `set name=<name>`, if present.
    pub fn attribute(&self, name: &str) -> Option<&[String]> {
        self.by_kind(ActionKind::Set)
            .find(|a| a.get("name") == Some(name))
            .map(|a| a.get_all("value"))
    }

    /// The package FMRI from `set name=pkg.fmri`.
    pub fn fmri(&self) -> Option<Result<Fmri, crate::fmri::FmriError>> {
        self.attribute("pkg.fmri")
            .and_then(|v| v.first())
            .map(|s| Fmri::parse(s))
    }
}

impl fmt::Display for Manifest {
    /// One action per line, each in pkg's form, each ending in a newline.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for a in &self.actions {
            writeln!(f, "{a}")?;
        }
        Ok(())
    }
}

impl FromIterator<Action> for Manifest {
    fn from_iter<T: IntoIterator<Item = Action>>(iter: T) -> Self {
        Self {
            actions: iter.into_iter().collect(),
            lines: Vec::new(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn continuation_joins_without_space_and_strips_leading_blanks() {
        let text = "set name=pkg.description value=\"Two-line \" \\\n    \"description\"\nset name=a \\\n   value=b\\\nc\n";
        let m = Manifest::parse(text).unwrap();
        assert_eq!(m.actions()[0].get("value"), Some("Two-line description"));
        // No space inserted: "value=b" + "c".
        assert_eq!(m.actions()[1].get("value"), Some("bc"));
    }

    #[test]
    fn lines_split_like_python_splitlines() {
        assert_eq!(
            py_splitlines("a\r\nb\rc\nd\x0ce\u{2028}f\n"),
            ["a", "b", "c", "d", "e", "f"]
        );
        assert_eq!(py_splitlines("a\n\nb"), ["a", "", "b"]);
        assert!(py_splitlines("").is_empty());
        let m = Manifest::parse("set name=a value=b\r\nset name=c \\\r\n\x1f value=d\r\n").unwrap();
        assert_eq!(m.actions()[0].get("value"), Some("b"));
        assert_eq!(m.actions()[1].get("value"), Some("d"));
        let e = Manifest::parse("set name=a value=b\r\nset =x\r\n").unwrap_err();
        assert_eq!((e.line, e.column), (2, 5));
    }

    #[test]
    fn comments_and_blank_lines_are_skipped_but_hash_inside_is_data() {
        let text = "# comment\n\n   # indented comment\n\t\nset name=a value=b # not a comment\n";
        let (m, errs) = Manifest::parse_all(text);
        assert_eq!(errs.len(), 1, "the '#' token is a key without value");
        assert_eq!(errs[0].line, 5);
        assert!(m.actions().is_empty());
        let m = Manifest::parse("set name=a value=#b\n").unwrap();
        assert_eq!(m.actions()[0].get("value"), Some("#b"));
    }

    #[test]
    fn errors_name_physical_line_and_column() {
        let text = "set name=a value=b\n\n  dir path=x \\\n     mode==0755 owner=\"root\n";
        let e = Manifest::parse(text).unwrap_err();
        // The logical line starts on line 3; the quote runs to the end of line 4.
        assert_eq!((e.line, e.column), (4, 28));
        assert_eq!(e.to_string(), "line 4, column 28: unfinished quoted value");
        let text = "set name=a value=b\nset name=c =d\n";
        let e = Manifest::parse(text).unwrap_err();
        assert_eq!((e.line, e.column), (2, 12));
        let text = "set name=a \\\n  value=b \\\n    =bad\n";
        let e = Manifest::parse(text).unwrap_err();
        assert_eq!(
            (e.line, e.column, e.message.as_str()),
            (3, 5, "missing key")
        );
    }

    #[test]
    fn parse_all_reports_every_error() {
        let text = "bogus x=y\nset name=a value=b\nfile abc def path=x\ndir path=/\n";
        let (m, errs) = Manifest::parse_all(text);
        assert_eq!(m.actions().len(), 1);
        let lines: Vec<_> = errs.iter().map(|e| e.line).collect();
        assert_eq!(lines, [1, 3, 4]);
    }

    #[test]
    fn lint_reports_parse_and_value_errors_with_lines() {
        let text = "set name=pkg.fmri value=pkg:/a@1\n\ndir path=x mode=0758 owner=root group=bin\nfile abc path=y preserve=maybe owner=root group=bin mode=0644\nfrob x=y\ndepend fmri=a type=require\n";
        let errs = Manifest::lint(text);
        let got: Vec<_> = errs
            .iter()
            .map(|e| (e.line, e.rule.id(), e.message.as_str()))
            .collect();
        assert_eq!(
            got,
            [
                (
                    Some(3),
                    "mode",
                    "invalid mode \"0758\": mode must be 3 to 5 octal digits, such as 644, 0644 or 04755 (dir x)"
                ),
                (
                    Some(4),
                    "preserve",
                    "invalid preserve value \"maybe\" (file y)"
                ),
                (Some(5), "unknown-action", "unknown action type \"frob\"")
            ]
        );
        assert!(Manifest::lint("set name=pkg.fmri value=pkg:/a@1\n").is_empty());
    }

    #[test]
    fn lines_are_kept_for_parsed_manifests_only() {
        let m = Manifest::parse(
            "set name=a value=b\n\n# c\nset name=c \\\n value=d\nset name=e value=f\n",
        )
        .unwrap();
        assert_eq!(
            (m.line(0), m.line(1), m.line(2)),
            (Some(1), Some(4), Some(6))
        );
        let built: Manifest = m.actions().iter().cloned().collect();
        assert_eq!(built, m, "equality ignores lines");
        assert_eq!(built.line(0), None);
        let not_utf8 = Manifest::lint_bytes(b"set name=a value=b\nset name=\xe9 value=c\n");
        assert_eq!(
            not_utf8
                .iter()
                .map(|f| (f.rule.id(), f.line, f.column))
                .collect::<Vec<_>>(),
            [("parse", Some(2), 10)]
        );
    }

    #[test]
    fn manifests_must_be_utf8() {
        let e = Manifest::parse_bytes(b"set name=a value=b\nset name=\xe9 value=c\n").unwrap_err();
        assert_eq!(e.to_string(), "line 2, column 10: invalid utf-8");
        assert!(Manifest::parse_bytes("set name=é value=c\n".as_bytes()).is_ok());
    }

    #[test]
    fn fmri_and_attributes() {
        let m = Manifest::parse(
            "set name=pkg.fmri value=pkg://example.org/demo/tool@2.1,5.11-2024.0.0.3:20240102T030405Z\nset name=variant.arch value=i386 value=sparc\n",
        )
        .unwrap();
        assert_eq!(m.fmri().unwrap().unwrap().stem(), "demo/tool");
        assert_eq!(m.attribute("variant.arch").unwrap(), ["i386", "sparc"]);
        assert_eq!(
            m.to_string(),
            "set name=pkg.fmri value=pkg://example.org/demo/tool@2.1,5.11-2024.0.0.3:20240102T030405Z\nset name=variant.arch value=i386 value=sparc\n"
        );
    }
}
