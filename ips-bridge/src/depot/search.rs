//! `search/1` for the depot server: the queries `pkg search -r` makes most, answered by
//! reading the publisher's manifests (no index is kept, so each query reads every manifest:
//! fine for the repositories builds publish, slow for a mirror of a whole distribution).
//!
//! A query is pkg's `CASE_RETURN_NUM_START_TEXT` (`False_2_None_None_hello`). TEXT is one
//! term, a token or a glob (`*`, `?`), optionally structured as pkg's
//! `PACKAGE:ACTION:KEY:TOKEN` (empty fields match anything). Tokens, as pkg's indexer makes
//! them for these actions: a `file`, `dir`, `link` or `hardlink` by the last component of its
//! path (key `basename`) and by its path with a leading `/` (key `path`); the `pkg.fmri`
//! action by the package's stem, each `/`-separated tail of it and `PUBLISHER/STEM`; other
//! `set` actions by each word of the value; a `depend` action by its FMRI's stem and tails.
//! Boolean queries (several terms, `AND`, `OR`, parentheses) are refused with 400.

use crate::action::{Action, ActionKind};
use crate::fmri::{Fmri, quote};
use crate::repo::{FileRepo, RepoError};

/// The first line of every successful answer: pkg's client checks it.
const VALIDATION: &str = "Return from search v1\n";

/// Why a query got no answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum SearchError {
    /// The query is not one this server answers (HTTP 400).
    #[error("{0}")]
    Query(String),
    /// The repository could not be read (HTTP 404, as pkg.depotd answers repository errors).
    #[error(transparent)]
    Repo(#[from] RepoError),
}

/// A parsed `search/1` query.
struct Query {
    case_sensitive: bool,
    packages: bool,
    num: Option<usize>,
    start: usize,
    package: String,
    action: String,
    key: String,
    token: String,
}

fn parse(text: &str) -> Result<Query, SearchError> {
    let bad = || {
        SearchError::Query(format!(
            "a query has five fields, CASE_RETURN_NUM_START_TEXT; got {text:?}"
        ))
    };
    let mut f = text.splitn(5, '_');
    let (Some(case), Some(ret), Some(num), Some(start), Some(term)) =
        (f.next(), f.next(), f.next(), f.next(), f.next())
    else {
        return Err(bad());
    };
    let opt = |s: &str| -> Result<Option<usize>, SearchError> {
        match s {
            "None" => Ok(None),
            n => n.parse().map(Some).map_err(|_| bad()),
        }
    };
    // `pkg search -p TERM` sends `p<TERM>` (pkg's grammar also takes `pk<`, `pkg<`, `pkgs<`
    // and a bare `<`): packages, not actions, are the answer.
    let term = term.trim();
    let braced = term
        .strip_suffix('>')
        .and_then(|t| t.split_once('<'))
        .filter(|(p, _)| "pkgs".starts_with(&p.to_ascii_lowercase()));
    let (term, in_braces) = match braced {
        Some((_, inner)) => (inner.trim(), true),
        None => (term, false),
    };
    if term.is_empty() || term.split_whitespace().count() > 1 || term.contains(['(', ')']) {
        return Err(SearchError::Query(format!(
            "this depot answers queries of one term (a name, path or basename), not {term:?}"
        )));
    }
    let mut fields: Vec<&str> = term.rsplitn(4, ':').collect();
    fields.reverse();
    while fields.len() < 4 {
        fields.insert(0, "");
    }
    Ok(Query {
        case_sensitive: match case {
            "True" => true,
            "False" => false,
            _ => return Err(bad()),
        },
        packages: match ret {
            "1" => true,
            "2" => in_braces,
            _ => return Err(bad()),
        },
        num: opt(num)?,
        start: opt(start)?.unwrap_or(0),
        package: fields[0].to_owned(),
        action: fields[1].to_owned(),
        key: fields[2].to_owned(),
        token: fields[3].to_owned(),
    })
}

/// Shell-style glob match (`*`, `?`), on chars.
fn glob(pattern: &[char], text: &[char]) -> bool {
    match (pattern.first(), text.first()) {
        (None, None) => true,
        (Some('*'), _) => {
            glob(&pattern[1..], text) || (!text.is_empty() && glob(pattern, &text[1..]))
        }
        (Some('?'), Some(_)) => glob(&pattern[1..], &text[1..]),
        (Some(p), Some(t)) if p == t => glob(&pattern[1..], &text[1..]),
        _ => false,
    }
}

impl Query {
    fn fold(&self, s: &str) -> Vec<char> {
        if self.case_sensitive {
            s.chars().collect()
        } else {
            s.to_lowercase().chars().collect()
        }
    }

    /// Does `field` (empty: anything) match `value`?
    fn field_matches(&self, field: &str, value: &str) -> bool {
        field.is_empty() || glob(&self.fold(field), &self.fold(value))
    }
}

/// A stem and each `/`-separated tail of it (`a/b/c`, `b/c`, `c`).
fn tails(stem: &str) -> Vec<String> {
    let mut out = vec![stem.to_owned()];
    let mut rest = stem;
    while let Some((_, tail)) = rest.split_once('/') {
        out.push(tail.to_owned());
        rest = tail;
    }
    out
}

/// The (key, token, value shown) triples pkg's indexer would make for `a`.
fn tokens(a: &Action, publisher: &str) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    match a.kind() {
        ActionKind::File | ActionKind::Dir | ActionKind::Link | ActionKind::Hardlink => {
            if let Some(path) = a.get("path") {
                let path = path.trim_start_matches('/');
                let base = path.rsplit('/').next().unwrap_or(path);
                out.push(("basename".into(), base.to_owned(), "basename".into()));
                out.push(("path".into(), format!("/{path}"), "path".into()));
            }
        }
        ActionKind::Set => {
            let (Some(name), Some(value)) = (a.get("name"), a.get("value")) else {
                return out;
            };
            if name == "pkg.fmri" {
                if let Ok(f) = Fmri::parse(value) {
                    let shown = format!("{publisher}/{}", f.stem());
                    for t in tails(f.stem()).into_iter().chain([shown.clone()]) {
                        out.push((name.to_owned(), t, shown.clone()));
                    }
                }
            } else {
                for word in value.split_whitespace() {
                    out.push((name.to_owned(), word.to_owned(), value.to_owned()));
                }
            }
        }
        ActionKind::Depend => {
            let ty = a.get("type").unwrap_or("require");
            for fmri in a.get_all("fmri") {
                if let Ok(f) = Fmri::parse(fmri) {
                    for t in tails(f.stem()) {
                        out.push(("fmri".into(), t, ty.to_owned()));
                    }
                }
            }
        }
        _ => {}
    }
    out
}

/// The answer to `search/1/QUERY` over `publisher`'s packages: the body, or `None` when
/// nothing matches (pkg.depotd then answers 204).
pub(super) fn search(
    repo: &FileRepo,
    publisher: &str,
    query: &str,
) -> Result<Option<String>, SearchError> {
    let q = parse(query)?;
    let mut lines = Vec::new();
    for package in repo.packages(publisher)? {
        let stem = package.fmri.stem();
        if !q.field_matches(&q.package, stem)
            && !tails(stem).iter().any(|t| q.field_matches(&q.package, t))
        {
            continue;
        }
        let version = package
            .fmri
            .version()
            .map(|v| v.to_string())
            .unwrap_or_default();
        let shown_fmri = format!("pkg:/{stem}@{version}");
        let manifest = repo.manifest(&package)?;
        let mut found = false;
        for a in manifest.actions() {
            if !q.field_matches(&q.action, &a.kind().to_string()) {
                continue;
            }
            let hit = tokens(a, publisher).into_iter().find(|(key, token, _)| {
                q.field_matches(&q.key, key) && q.field_matches(&q.token, token)
            });
            if let Some((_, _, shown)) = hit {
                found = true;
                if !q.packages {
                    // pkg quotes the value shown, keeping `/`.
                    let shown = quote(&shown).replace("%2F", "/");
                    lines.push(format!("0 2 {shown_fmri} {shown} {a}\n"));
                }
            }
        }
        if found && q.packages {
            lines.push(format!("0 1 {shown_fmri}\n"));
        }
    }
    let lines: Vec<String> = lines
        .into_iter()
        .skip(q.start)
        .take(q.num.unwrap_or(usize::MAX))
        .collect();
    if lines.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        std::iter::once(VALIDATION.to_owned())
            .chain(lines)
            .collect(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_pkg_queries_and_refuses_boolean_ones() {
        let q = parse("False_2_None_None_file:basename:hel*").unwrap();
        assert!(!q.case_sensitive && !q.packages && q.num.is_none());
        assert_eq!(
            (
                q.package.as_str(),
                q.action.as_str(),
                q.key.as_str(),
                q.token.as_str()
            ),
            ("", "file", "basename", "hel*")
        );
        let q = parse("True_1_10_2_/usr/bin/ls").unwrap();
        assert!(q.case_sensitive && q.packages);
        assert_eq!(
            (q.num, q.start, q.token.as_str()),
            (Some(10), 2, "/usr/bin/ls")
        );
        // What `pkg search -r -p 'hel*'` sends.
        let q = parse("False_1_None_None_p<:::hel*>").unwrap();
        assert!(q.packages);
        assert_eq!(
            (q.action.as_str(), q.key.as_str(), q.token.as_str()),
            ("", "", "hel*")
        );
        assert!(parse("False_2_None_None_pkgs<hello>").unwrap().packages);
        assert!(matches!(
            parse("False_2_None_None_a b"),
            Err(SearchError::Query(_))
        ));
        assert!(matches!(
            parse("False_2_None_x"),
            Err(SearchError::Query(_))
        ));
        assert!(glob(&['h', '*', 'o'], &['h', 'e', 'l', 'l', 'o']));
        assert!(!glob(&['h', '?'], &['h']));
    }
}
