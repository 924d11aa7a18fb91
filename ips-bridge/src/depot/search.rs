//! `search/0` and `search/1` for the depot server, answered as pkg.depotd answers them from
//! its index, but from the manifests themselves: each query reads the publisher's catalog
//! and manifests and makes the tokens pkg's indexer would (fine for the repositories builds
//! publish; slow for a mirror of a whole distribution).
//!
//! Tokens, as pkg's actions generate them (key in parentheses; the value shown for a match
//! is the key unless said otherwise): `file`, `dir`, `link` and `hardlink` by the path's last
//! component (`basename`) and by `/PATH` (`path`), links also by their `mediator*`
//! attributes; `file` and `license` by payload hash (`content`, shown as the hash for files;
//! `hash`) and each `pkg.content-hash`; `license` by its `license` name; `depend` by its
//! FMRIs with and without version (key and value shown: the dependency type); `user` and
//! `group` by name (`name`); `legacy` by `pkg` (`legacy_pkg`, `pkg`); `driver` by `name`
//! (`driver_name`) and `alias`; `signature` by its certificate hash, `algorithm` and value;
//! `set` actions by their name: `pkg.fmri` by the stem (shown for every token), the release,
//! build release, timestamp and each `/`-separated tail of the name; `info.classification`
//! by each category and each word of each level (the category shown); any other by each word
//! of a value with spaces (the value shown) or the value itself.
//!
//! Results come in pkg.depotd's index order (by token, action type, key, value shown; then
//! package and manifest line), except that among packages sharing those pkg.depotd's order
//! depends on the order it indexed them in, which it does not fix; here it is by FMRI.

use super::query::{Node, QueryError, Request, Term, glob};
use crate::action::{Action, ActionKind};
use crate::fmri::{Fmri, quote};
use crate::repo::{FileRepo, RepoError};

/// The first line of every successful `search/1` answer: pkg's client checks it.
const VALIDATION: &str = "Return from search v1\n";

/// Why a query got no answer.
#[derive(Debug, thiserror::Error)]
pub(super) enum SearchError {
    /// The query is not valid (HTTP 400).
    #[error(transparent)]
    Query(#[from] QueryError),
    /// The repository could not be read (HTTP 404, as pkg.depotd answers repository errors).
    #[error(transparent)]
    Repo(#[from] RepoError),
}

/// One catalogued package: its FMRI as pkg's index names it (`demo/hello@1.0,5.11-1:…`,
/// no scheme or publisher) and its manifest's lines.
struct Package {
    fmri: String,
    lines: Vec<String>,
}

/// One index entry: a token an action line generates.
struct Entry {
    token: String,
    hit: Hit,
}

/// One matching action: what pkg calls `(action type, key, fmri, value shown, line)`.
#[derive(Clone)]
struct Hit {
    action: String,
    key: String,
    package: usize,
    shown: String,
    line: usize,
}

/// A publisher's packages and every token of their actions, in pkg.depotd's index order.
struct Index {
    packages: Vec<Package>,
    entries: Vec<Entry>,
}

/// pkg's `quote` of the value shown: `/` stays.
fn quote_shown(s: &str) -> String {
    quote(s).replace("%2F", "/")
}

impl Index {
    fn build(repo: &FileRepo, publisher: &str) -> Result<Self, RepoError> {
        let mut packages = Vec::new();
        let mut entries = Vec::new();
        for package in repo.packages(publisher)? {
            let bytes = repo.manifest_bytes(&package)?;
            let lines: Vec<String> = String::from_utf8_lossy(&bytes)
                .lines()
                .map(|l| l.trim_end().to_owned())
                .collect();
            let index = packages.len();
            for (n, line) in lines.iter().enumerate() {
                let l = line.trim();
                if l.is_empty() || l.starts_with('#') {
                    continue;
                }
                // pkg's indexer logs and skips what it cannot parse.
                let Ok(action) = Action::parse(l) else {
                    continue;
                };
                let mut seen = std::collections::BTreeSet::new();
                for (action, key, token, shown) in tokens(&action) {
                    if seen.insert((token.clone(), key.clone(), shown.clone())) {
                        entries.push(Entry {
                            token,
                            hit: Hit {
                                action,
                                key,
                                package: index,
                                shown,
                                line: n,
                            },
                        });
                    }
                }
            }
            let fmri = package.fmri;
            let version = fmri.version().map(|v| v.to_string()).unwrap_or_default();
            packages.push(Package {
                fmri: format!("{}@{version}", fmri.stem()),
                lines,
            });
        }
        entries.sort_by(|a, b| {
            let key = |e: &Entry| {
                (
                    e.token.clone(),
                    e.hit.action.clone(),
                    e.hit.key.clone(),
                    quote_shown(&e.hit.shown),
                )
            };
            key(a)
                .cmp(&key(b))
                .then_with(|| {
                    packages[a.hit.package]
                        .fmri
                        .cmp(&packages[b.hit.package].fmri)
                })
                .then(a.hit.line.cmp(&b.hit.line))
        });
        Ok(Self { packages, entries })
    }

    /// pkg's term search: the index's matches, or (within `restriction`) the given hits
    /// whose action has a matching token.
    fn term(&self, t: &Term, case_sensitive: bool, restriction: Option<Vec<Hit>>) -> Vec<Hit> {
        let fold = |s: &str| -> Vec<char> {
            if case_sensitive {
                s.chars().collect()
            } else {
                s.to_lowercase().chars().collect()
            }
        };
        let pattern = fold(&t.token);
        let globbing = t.glob || !case_sensitive;
        let matches = |token: &str| {
            if globbing {
                glob(&pattern, &fold(token))
            } else {
                token == t.token
            }
        };
        let package = t
            .package
            .as_deref()
            .map(|p| p.to_lowercase().chars().collect::<Vec<_>>());
        let fields_match = |h: &Hit| {
            package.as_ref().is_none_or(|p| {
                glob(
                    p,
                    &self.packages[h.package]
                        .fmri
                        .to_lowercase()
                        .chars()
                        .collect::<Vec<_>>(),
                )
            }) && t.action.as_ref().is_none_or(|a| *a == h.action)
                && t.key.as_ref().is_none_or(|k| *k == h.key)
        };
        match restriction {
            None => {
                // pkg.depotd answers a term of wildcards only with every token.
                let all = globbing && t.token.chars().all(|c| c == '*' || c == '?');
                self.entries
                    .iter()
                    .filter(|e| fields_match(&e.hit) && (all || matches(&e.token)))
                    .map(|e| e.hit.clone())
                    .collect()
            }
            Some(hits) => hits
                .into_iter()
                .filter(|h| {
                    fields_match(h)
                        && Action::parse(self.packages[h.package].lines[h.line].trim())
                            .is_ok_and(|a| tokens(&a).iter().any(|(_, _, tok, _)| matches(tok)))
                })
                .collect(),
        }
    }

    fn line(&self, h: &Hit) -> &str {
        &self.packages[h.package].lines[h.line]
    }

    fn eval(&self, node: &Node, cs: bool, restriction: Option<Vec<Hit>>) -> Found {
        match node {
            Node::Term(t) => Found::Actions(self.term(t, cs, restriction)),
            Node::Phrase { term, phrase } => {
                let phrase = if cs {
                    phrase.clone()
                } else {
                    phrase.to_lowercase()
                };
                let contains = |s: &str| {
                    if cs {
                        s.contains(&phrase)
                    } else {
                        s.to_lowercase().contains(&phrase)
                    }
                };
                let hits = self.term(term, cs, restriction);
                Found::Actions(
                    hits.into_iter()
                        .filter(|h| contains(self.line(h)))
                        .map(|mut h| {
                            // A `set` shows the phrase unless its value contains it.
                            if h.action == "set" && !contains(&h.shown) {
                                h.shown = phrase.clone();
                            }
                            h
                        })
                        .collect(),
                )
            }
            Node::And(l, r) if node.returns_packages() => {
                let (l, r) = (self.packages_of(l, cs), self.packages_of(r, cs));
                Found::Packages(l.intersection(&r).cloned().collect())
            }
            Node::And(l, r) => {
                let left = self.eval(l, cs, restriction).into_actions();
                self.eval(r, cs, Some(left))
            }
            Node::Or(l, r) if node.returns_packages() => {
                let (l, r) = (self.packages_of(l, cs), self.packages_of(r, cs));
                Found::Packages(l.union(&r).cloned().collect())
            }
            Node::Or(l, r) => Found::Actions(match restriction {
                None => {
                    let mut v = self.eval(l, cs, None).into_actions();
                    v.extend(self.eval(r, cs, None).into_actions());
                    v
                }
                // Each restricting hit is tried on both sides in turn.
                Some(hits) => hits
                    .into_iter()
                    .flat_map(|h| {
                        let mut v = self.eval(l, cs, Some(vec![h.clone()])).into_actions();
                        v.extend(self.eval(r, cs, Some(vec![h])).into_actions());
                        v
                    })
                    .collect(),
            }),
            Node::Packages(inner) => Found::Packages(self.packages_of(inner, cs)),
        }
    }

    /// The FMRIs (index form) of what `node` finds, sorted and unique.
    fn packages_of(&self, node: &Node, cs: bool) -> std::collections::BTreeSet<String> {
        match self.eval(node, cs, None) {
            Found::Packages(p) => p,
            Found::Actions(hits) => hits
                .iter()
                .map(|h| self.packages[h.package].fmri.clone())
                .collect(),
        }
    }
}

enum Found {
    Actions(Vec<Hit>),
    Packages(std::collections::BTreeSet<String>),
}

impl Found {
    fn into_actions(self) -> Vec<Hit> {
        match self {
            Found::Actions(a) => a,
            // Boolean nodes only join children of the same kind (checked when parsed).
            Found::Packages(_) => Vec::new(),
        }
    }
}

/// The (action type, key, token, value shown) tuples pkg's indexer makes for `a`.
fn tokens(a: &Action) -> Vec<(String, String, String, String)> {
    // (key, token, value shown when not the key)
    let mut raw: Vec<(String, String, Option<String>)> = Vec::new();
    let each =
        |raw: &mut Vec<(String, String, Option<String>)>, key: &str, attr: &str, shown: bool| {
            for v in a.get_all(attr) {
                raw.push((key.to_owned(), v.clone(), shown.then(|| v.clone())));
            }
        };
    let hash = a.hash().map(str::to_owned);
    match a.kind() {
        ActionKind::Set => return set_tokens(a),
        ActionKind::Depend => return depend_tokens(a),
        ActionKind::Dir | ActionKind::Link | ActionKind::Hardlink | ActionKind::File => {
            if let (ActionKind::File, Some(h)) = (a.kind(), &hash) {
                raw.push(("content".into(), h.clone(), Some(h.clone())));
                raw.push(("hash".into(), h.clone(), None));
            }
            if let Some(path) = a.get("path") {
                // pkg strips a directory's trailing `/` for its basename only.
                let p = if a.kind() == ActionKind::Dir {
                    path.trim_end_matches('/')
                } else {
                    path
                };
                let base = p.rsplit('/').next().unwrap_or(p);
                raw.push(("basename".into(), base.to_owned(), None));
                raw.push(("path".into(), format!("/{path}"), None));
            }
            if a.kind() == ActionKind::File {
                each(&mut raw, "pkg.content-hash", "pkg.content-hash", false);
            }
            if matches!(a.kind(), ActionKind::Link | ActionKind::Hardlink)
                && a.get("mediator").is_some()
            {
                for k in a.attrs().keys().filter(|k| k.starts_with("mediator")) {
                    each(&mut raw, k, k, false);
                }
            }
        }
        ActionKind::License => {
            // pkg's license indexing needs `pkg.content-hash`; without it the action is
            // skipped whole.
            if a.get("pkg.content-hash").is_none() {
                return Vec::new();
            }
            each(&mut raw, "license", "license", false);
            if let Some(h) = &hash {
                raw.push(("hash".into(), h.clone(), None));
                raw.push(("content".into(), h.clone(), None));
            }
            each(&mut raw, "pkg.content-hash", "pkg.content-hash", false);
        }
        ActionKind::User => each(&mut raw, "name", "username", false),
        ActionKind::Group => each(&mut raw, "name", "groupname", false),
        ActionKind::Legacy => {
            each(&mut raw, "legacy_pkg", "pkg", false);
            each(&mut raw, "pkg", "pkg", false);
        }
        ActionKind::Driver => {
            each(&mut raw, "driver_name", "name", false);
            each(&mut raw, "alias", "alias", false);
        }
        ActionKind::Signature => {
            if let Some(h) = &hash {
                raw.push(("certificate".into(), h.clone(), Some(h.clone())));
            }
            each(&mut raw, "algorithm", "algorithm", true);
            each(&mut raw, "signature", "value", true);
            each(&mut raw, "pkg.content-hash", "pkg.content-hash", false);
        }
        ActionKind::Unknown => {
            if let Some(h) = &hash {
                raw.push(("content".into(), h.clone(), Some(h.clone())));
            }
        }
    }
    let name = a.kind().name();
    raw.into_iter()
        .map(|(key, token, shown)| {
            let shown = shown.unwrap_or_else(|| key.clone());
            (name.to_owned(), key, token, shown)
        })
        .collect()
}

/// A `depend` action's tokens: each FMRI without scheme or publisher, and its stem.
fn depend_tokens(a: &Action) -> Vec<(String, String, String, String)> {
    const KNOWN: [&str; 10] = [
        "conditional",
        "exclude",
        "group",
        "group-any",
        "incorporate",
        "optional",
        "origin",
        "parent",
        "require",
        "require-any",
    ];
    let Some(ty) = a.get("type").filter(|t| KNOWN.contains(t)) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for fmri in a.get_all("fmri") {
        let bare = strip_scheme(fmri);
        let mut push = |t: &str| {
            out.push((
                "depend".to_owned(),
                ty.to_owned(),
                t.to_owned(),
                ty.to_owned(),
            ));
        };
        push(&bare);
        if let Some((stem, _)) = bare.split_once('@') {
            push(stem);
        }
    }
    out
}

/// `pkg:/`, `pkg:///` and `pkg://PUBLISHER/` removed, as pkg removes them.
fn strip_scheme(fmri: &str) -> String {
    if let Some(rest) = fmri.strip_prefix("pkg:///") {
        rest.to_owned()
    } else if let Some(rest) = fmri.strip_prefix("pkg://") {
        rest.split_once('/').map_or(rest, |(_, r)| r).to_owned()
    } else {
        fmri.strip_prefix("pkg:/").unwrap_or(fmri).to_owned()
    }
}

/// A `set` action's tokens (see the module documentation).
fn set_tokens(a: &Action) -> Vec<(String, String, String, String)> {
    let (Some(name), values) = (a.get("name"), a.get_all("value")) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    let mut push = |token: &str, shown: &str| {
        out.push((
            "set".to_owned(),
            name.to_owned(),
            token.to_owned(),
            shown.to_owned(),
        ));
    };
    if name == "info.classification" {
        for v in values {
            let cats = v.split_once(':').map_or(v.as_str(), |(_, c)| c);
            push(cats, cats);
            for word in cats.split('/').flat_map(str::split_whitespace) {
                push(word, cats);
            }
        }
    } else if values.len() > 1 {
        for v in values {
            if v.contains(' ') {
                v.split_whitespace().for_each(|w| push(w, v));
            } else {
                push(v, v);
            }
        }
    } else if let Some(v) = values.first() {
        if name == "pkg.fmri" || name == "fmri" {
            let Ok(f) = Fmri::parse(v) else {
                return out;
            };
            let stem = match f.publisher() {
                Some(p) if !p.starts_with("_PRE") => format!("{p}/{}", f.stem()),
                _ => f.stem().to_owned(),
            };
            let ver = f.version();
            let time = ver
                .and_then(|v| v.timestamp())
                .map_or("None".to_owned(), |t| t.to_string());
            push(&stem, &stem);
            push(
                &ver.map_or("5.11".to_owned(), |v| v.build().to_string()),
                &stem,
            );
            push(
                &ver.map_or("None".to_owned(), |v| v.release().to_string()),
                &stem,
            );
            push(&time, &stem);
            let parts: Vec<&str> = f.stem().split('/').collect();
            for i in (0..parts.len()).rev() {
                push(&parts[i..].join("/"), &stem);
            }
        } else if v.contains(' ') {
            v.split_whitespace().for_each(|w| push(w, v));
        } else {
            push(v, v);
        }
    }
    out
}

/// The results of `request` over `publisher`'s packages, after skipping and limiting.
fn run(repo: &FileRepo, publisher: &str, request: &Request) -> Result<(Index, Found), SearchError> {
    let index = Index::build(repo, publisher)?;
    let found = index.eval(&request.tree, request.case_sensitive, None);
    let keep = |n: usize| {
        request
            .num
            .unwrap_or(usize::MAX)
            .min(n.saturating_sub(request.start))
    };
    let found = match found {
        Found::Actions(v) => {
            let n = keep(v.len());
            Found::Actions(v.into_iter().skip(request.start).take(n).collect())
        }
        Found::Packages(p) => {
            let n = keep(p.len());
            Found::Packages(p.into_iter().skip(request.start).take(n).collect())
        }
    };
    Ok((index, found))
}

/// The answer to `search/1/QUERY` over `publisher`'s packages: the body, or `None` when
/// nothing matches (pkg.depotd then answers 204).
pub(super) fn search_v1(
    repo: &FileRepo,
    publisher: &str,
    query: &str,
) -> Result<Option<String>, SearchError> {
    let request = Request::v1(query)?;
    let (index, found) = run(repo, publisher, &request)?;
    let lines: Vec<String> = match found {
        Found::Actions(hits) => hits
            .iter()
            .map(|h| {
                let fmri = &index.packages[h.package].fmri;
                let line = index.line(h).trim_end();
                format!("0 2 pkg:/{fmri} {} {line}\n", quote_shown(&h.shown))
            })
            .collect(),
        Found::Packages(p) => p.iter().map(|f| format!("0 1 pkg:/{f}\n")).collect(),
    };
    if lines.is_empty() {
        return Ok(None);
    }
    Ok(Some(
        std::iter::once(VALIDATION.to_owned())
            .chain(lines)
            .collect(),
    ))
}

/// The answer to `search/0/TOKEN`: one line per matching action, `KEY FMRI ACTION VALUE`
/// for `set` actions (`NAME FMRI set VALUE-SHOWN`) and `VALUE-SHOWN FMRI ACTION KEY-VALUE`
/// for the others, as pkg.depotd translates its search results for old clients (empty when
/// nothing matches).
pub(super) fn search_v0(
    repo: &FileRepo,
    publisher: &str,
    token: &str,
) -> Result<String, SearchError> {
    let request = Request::v0(token)?;
    let (index, found) = run(repo, publisher, &request)?;
    let mut out = String::new();
    for h in found.into_actions() {
        let fmri = format!("pkg:/{}", index.packages[h.package].fmri);
        let Ok(a) = Action::parse(index.line(&h).trim()) else {
            continue;
        };
        let key_value = python_value(a.kind().key_attr().map_or(&[][..], |k| a.get_all(k)));
        if a.kind() == ActionKind::Set {
            out.push_str(&format!("{key_value} {fmri} set {}\n", h.shown));
        } else {
            out.push_str(&format!(
                "{} {fmri} {} {key_value}\n",
                h.shown,
                a.kind().name()
            ));
        }
    }
    Ok(out)
}

/// How pkg.depotd prints an attribute: `None` when absent, the value, or a Python list.
fn python_value(values: &[String]) -> String {
    match values {
        [] => "None".to_owned(),
        [v] => v.clone(),
        vs => format!(
            "[{}]",
            vs.iter()
                .map(|v| format!("'{v}'"))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(line: &str) -> Vec<(String, String, String, String)> {
        tokens(&Action::parse(line).unwrap())
    }

    fn t(a: &str, k: &str, tok: &str, shown: &str) -> (String, String, String, String) {
        (a.into(), k.into(), tok.into(), shown.into())
    }

    #[test]
    fn actions_make_the_tokens_pkgs_indexer_makes() {
        assert_eq!(
            toks("set name=pkg.fmri value=pkg://ex.org/demo/hello@1.0,5.11-1:20261207T111310Z"),
            [
                t("set", "pkg.fmri", "ex.org/demo/hello", "ex.org/demo/hello"),
                t("set", "pkg.fmri", "5.11", "ex.org/demo/hello"),
                t("set", "pkg.fmri", "1.0", "ex.org/demo/hello"),
                t("set", "pkg.fmri", "20261207T111310Z", "ex.org/demo/hello"),
                t("set", "pkg.fmri", "hello", "ex.org/demo/hello"),
                t("set", "pkg.fmri", "demo/hello", "ex.org/demo/hello"),
            ]
        );
        assert_eq!(
            toks("set name=pkg.summary value=\"Says hello\""),
            [
                t("set", "pkg.summary", "Says", "Says hello"),
                t("set", "pkg.summary", "hello", "Says hello")
            ]
        );
        assert_eq!(
            toks("set name=info.classification value=org.opensolaris.category.2008:System/Core"),
            [
                t("set", "info.classification", "System/Core", "System/Core"),
                t("set", "info.classification", "System", "System/Core"),
                t("set", "info.classification", "Core", "System/Core"),
            ]
        );
        assert_eq!(
            toks("depend fmri=pkg://ex.org/demo/other@1.0 type=require"),
            [
                t("depend", "require", "demo/other@1.0", "require"),
                t("depend", "require", "demo/other", "require")
            ]
        );
        assert_eq!(
            toks("dir path=usr/bin/ owner=root group=bin mode=0755"),
            [
                t("dir", "basename", "bin", "basename"),
                t("dir", "path", "/usr/bin/", "path")
            ]
        );
        assert_eq!(
            toks("file abc path=usr/bin/hi pkg.content-hash=file:x owner=root group=bin mode=0555"),
            [
                t("file", "content", "abc", "abc"),
                t("file", "hash", "abc", "hash"),
                t("file", "basename", "hi", "basename"),
                t("file", "path", "/usr/bin/hi", "path"),
                t("file", "pkg.content-hash", "file:x", "pkg.content-hash"),
            ]
        );
        // Without pkg.content-hash pkg skips a license whole.
        assert!(toks("license abc license=MIT").is_empty());
        assert_eq!(
            toks("user username=demo")[0],
            t("user", "name", "demo", "name")
        );
        assert!(toks("depend fmri=a type=weird").is_empty());
    }

    #[test]
    fn old_clients_see_lists_as_python_prints_them() {
        assert_eq!(python_value(&[]), "None");
        assert_eq!(python_value(&["a".into(), "b".into()]), "['a', 'b']");
    }
}
