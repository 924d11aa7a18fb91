//! No new module cycle inside any crate (issue 34, "The house in layers").
//!
//! The crate graph cannot cycle (cargo refuses), but modules inside one crate can: a core that
//! imports its features and is imported back. This test reads every crate's `src/` (not its
//! tests), takes each file as a module, and draws an edge for every path to another module of
//! the same crate: `crate::a::b` (the longest prefix that is a module) and `super::x`. A module
//! naming its own ancestor (a child using what its parent declares) is not an edge; a parent
//! naming its child is. Strongly connected components of more than one module are cycles.
//!
//! [`KNOWN_CYCLES`] lists the cycles that exist today, exactly. The test fails when a cycle
//! appears that is not listed, when a listed cycle grows, and when a listed cycle is gone or
//! smaller (then shrink the list: it only ever gets shorter). Each failure prints one path
//! around the cycle with the file and line of every step, so the edge to cut is named.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use crate::util::root;

/// The module cycles of today, crate by crate, each as its sorted modules. Fixing one means
/// removing its line here.
const KNOWN_CYCLES: &[(&str, &[&str])] = &[];

/// Where an edge comes from: the file and 1-based line of the first path that makes it.
type Edges = BTreeMap<String, BTreeMap<String, (PathBuf, usize)>>;

/// The crates of the workspace and their source directories (the binary is `rdctl`).
fn crates() -> Vec<(String, PathBuf)> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|m| m.split(']').next())
        .expect("the workspace lists its members");
    let mut out = Vec::new();
    for m in members.split(',') {
        let m = m.trim().trim_matches('"');
        if m.is_empty() {
            continue;
        }
        let (name, dir) = if m == "." {
            ("rdctl".to_owned(), root().join("src"))
        } else {
            (m.to_owned(), root().join(m).join("src"))
        };
        if dir.is_dir() {
            out.push((name, dir));
        }
    }
    assert!(out.len() >= 8, "found only {out:?}");
    out
}

/// Every `.rs` file under `dir` with its module path (`a::b`; the crate root is "").
fn modules(src: &Path) -> BTreeMap<String, PathBuf> {
    let mut out = BTreeMap::new();
    let mut stack = vec![src.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for e in std::fs::read_dir(&dir).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
                continue;
            }
            if p.extension().is_none_or(|x| x != "rs") {
                continue;
            }
            let rel = p.strip_prefix(src).unwrap().with_extension("");
            let mut parts: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(
                parts.last().map(String::as_str),
                Some("mod" | "lib" | "main")
            ) {
                parts.pop();
            }
            // Test modules (`foo/tests.rs`, `tests/…`) are not part of the crate's graph.
            if parts.iter().any(|p| p == "tests") {
                continue;
            }
            out.insert(parts.join("::"), p);
        }
    }
    out
}

/// The text of a file without its `#[cfg(test)] mod tests { … }` (always last by our style).
fn without_tests(text: &str) -> &str {
    let mut end = text.len();
    for (at, _) in text.match_indices("#[cfg(test)]") {
        if text[at..]
            .trim_start_matches("#[cfg(test)]")
            .trim_start()
            .starts_with("mod ")
        {
            end = at;
            break;
        }
    }
    &text[..end]
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

/// The `::`-separated identifiers after `at` (`a::b::C` → `[a, b, C]`).
fn path_after(text: &str, at: usize) -> Vec<&str> {
    let mut out = Vec::new();
    let mut rest = &text[at..];
    loop {
        let n = rest.find(|c: char| !ident_char(c)).unwrap_or(rest.len());
        if n == 0 {
            break;
        }
        out.push(&rest[..n]);
        rest = &rest[n..];
        match rest.strip_prefix("::") {
            Some(r) if r.starts_with(ident_char) => rest = r,
            _ => break,
        }
    }
    out
}

fn is_ancestor(ancestor: &str, of: &str) -> bool {
    ancestor.is_empty() || of.starts_with(&format!("{ancestor}::"))
}

fn edges(mods: &BTreeMap<String, PathBuf>) -> Edges {
    let mut out: Edges = BTreeMap::new();
    for (m, file) in mods {
        let text = std::fs::read_to_string(file).unwrap();
        let text = without_tests(&text);
        let line_of = |at: usize| text[..at].matches('\n').count() + 1;
        let parent: Vec<&str> = if m.is_empty() {
            Vec::new()
        } else {
            m.split("::").collect::<Vec<_>>()[..m.split("::").count() - 1].to_vec()
        };
        let mut add = |to: String, at: usize| {
            if &to != m && !is_ancestor(&to, m) {
                out.entry(m.clone())
                    .or_default()
                    .entry(to)
                    .or_insert((file.clone(), line_of(at)));
            }
        };
        for (kw, base) in [("crate::", Vec::new()), ("super::", parent.clone())] {
            for (at, _) in text.match_indices(kw) {
                if text[..at].ends_with(ident_char) {
                    continue; // `$crate::`, `foo_crate::`
                }
                // Comments (doc links included) are not dependencies.
                let line_start = text[..at].rfind('\n').map_or(0, |i| i + 1);
                if text[line_start..at].contains("//") {
                    continue;
                }
                let path = path_after(text, at + kw.len());
                // The longest prefix that is a module of this crate.
                let found = (1..=path.len()).rev().find_map(|k| {
                    let mut full = base.iter().map(|s| s.to_string()).collect::<Vec<_>>();
                    full.extend(path[..k].iter().map(|s| s.to_string()));
                    let name = full.join("::");
                    mods.contains_key(&name).then_some(name)
                });
                if let Some(to) = found {
                    add(to, at);
                }
            }
        }
    }
    out
}

/// Strongly connected components with more than one module (Tarjan, iterative enough for our
/// sizes through recursion on a few hundred modules).
fn cycles(mods: &BTreeMap<String, PathBuf>, edges: &Edges) -> Vec<Vec<String>> {
    struct State<'a> {
        edges: &'a Edges,
        index: BTreeMap<&'a str, usize>,
        low: BTreeMap<&'a str, usize>,
        stack: Vec<&'a str>,
        on: BTreeSet<&'a str>,
        next: usize,
        out: Vec<Vec<String>>,
    }
    fn visit<'a>(s: &mut State<'a>, v: &'a str) {
        s.index.insert(v, s.next);
        s.low.insert(v, s.next);
        s.next += 1;
        s.stack.push(v);
        s.on.insert(v);
        if let Some(ws) = s.edges.get(v) {
            for w in ws.keys() {
                let w = w.as_str();
                if !s.index.contains_key(w) {
                    visit(s, w);
                    let l = s.low[v].min(s.low[w]);
                    s.low.insert(v, l);
                } else if s.on.contains(w) {
                    let l = s.low[v].min(s.index[w]);
                    s.low.insert(v, l);
                }
            }
        }
        if s.low[v] == s.index[v] {
            let mut comp = Vec::new();
            while let Some(w) = s.stack.pop() {
                s.on.remove(w);
                comp.push(w.to_owned());
                if w == v {
                    break;
                }
            }
            if comp.len() > 1 {
                comp.sort();
                s.out.push(comp);
            }
        }
    }
    let mut s = State {
        edges,
        index: BTreeMap::new(),
        low: BTreeMap::new(),
        stack: Vec::new(),
        on: BTreeSet::new(),
        next: 0,
        out: Vec::new(),
    };
    for m in mods.keys() {
        if !s.index.contains_key(m.as_str()) {
            visit(&mut s, m);
        }
    }
    s.out.sort();
    s.out
}

/// One way around `cycle`, each step with the file and line that makes it.
fn explain(cycle: &[String], edges: &Edges) -> String {
    let inside: BTreeSet<&str> = cycle.iter().map(String::as_str).collect();
    let start = cycle[0].as_str();
    // Breadth-first from start back to start, inside the component.
    let mut prev: BTreeMap<&str, &str> = BTreeMap::new();
    let mut queue = std::collections::VecDeque::from([start]);
    let mut closing = None;
    while let Some(v) = queue.pop_front() {
        for w in edges.get(v).into_iter().flat_map(|e| e.keys()) {
            let w = w.as_str();
            if !inside.contains(w) {
                continue;
            }
            if w == start {
                closing = Some(v);
                break;
            }
            if !prev.contains_key(w) {
                prev.insert(w, v);
                queue.push_back(w);
            }
        }
        if closing.is_some() {
            break;
        }
    }
    // start -> … -> closing, then closing -> start.
    let mut back =
        vec![closing.expect("a component of two or more modules has a cycle through start")];
    while let Some(&p) = prev.get(back.last().unwrap()) {
        back.push(p);
    }
    if *back.last().unwrap() != start {
        back.push(start);
    }
    back.reverse();
    let mut path = back;
    path.push(start);
    path.windows(2)
        .map(|w| {
            let (file, line) = &edges[w[0]][w[1]];
            let file = file.strip_prefix(root()).unwrap_or(file);
            format!("  {} -> {} ({}:{line})", w[0], w[1], file.display())
        })
        .collect::<Vec<_>>()
        .join("\n")
}

#[test]
fn no_new_module_cycle_in_any_crate() {
    let mut problems = Vec::new();
    let mut seen_known = BTreeSet::new();
    for (name, src) in crates() {
        let mods = modules(&src);
        let edges = edges(&mods);
        for cycle in cycles(&mods, &edges) {
            let known = KNOWN_CYCLES.iter().position(|(c, ms)| {
                *c == name && ms.iter().copied().eq(cycle.iter().map(String::as_str))
            });
            match known {
                Some(i) => {
                    seen_known.insert(i);
                }
                None => problems.push(format!(
                    "{name}: a module cycle that is not in KNOWN_CYCLES (new, or a known one that changed): {}\n{}",
                    cycle.join(", "),
                    explain(&cycle, &edges)
                )),
            }
        }
    }
    for (i, (name, ms)) in KNOWN_CYCLES.iter().enumerate() {
        if !seen_known.contains(&i) {
            problems.push(format!(
                "{name}: the known cycle {} is gone or changed: remove or update its KNOWN_CYCLES entry",
                ms.join(", ")
            ));
        }
    }
    assert!(problems.is_empty(), "{}", problems.join("\n\n"));
}

#[test]
fn the_graph_reader_sees_paths_and_skips_tests() {
    assert_eq!(path_after("crate::a::b::C { x }", 7), vec!["a", "b", "C"]);
    assert_eq!(path_after("super::x;", 7), vec!["x"]);
    let text = "use crate::a;\n#[cfg(test)]\nmod tests {\n use crate::b;\n}\n";
    assert!(!without_tests(text).contains("crate::b"));
    assert!(is_ancestor("", "a::b"));
    assert!(is_ancestor("a", "a::b"));
    assert!(!is_ancestor("a", "ab::c"));
}
