//! docs/architecture.md against the tree (issue 34: "the architecture document matches the
//! code"), and the one-owner rules it states that no other test keeps.
//!
//! The document is read, not trusted: every span in backquotes that names a file or directory of
//! the repository must exist, every test written `file.rs::test_name` must be a test function in
//! that file, every Rust path that starts with a workspace crate (`registry::gc::collect`) must
//! resolve to a module and a name defined or re-exported there, and every `Type::name` and type
//! name must still occur in the sources. The crate graph block and the outside-crate table must
//! equal what the `Cargo.toml` files say. The document stays under [`BUDGET`] characters, the
//! size of a map read in twenty minutes.
//!
//! The code rules (`each_concern_has_one_place`, `registry_core_imports_no_feature`,
//! `registry_client_layers_point_down`) read the crates' non-test sources as text: lines that
//! start with `//` and everything from a trailing `#[cfg(test)] mod` on are left out.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::{Path, PathBuf};

use crate::util::root;

/// Where the document is.
const DOC: &str = "docs/architecture.md";
/// The most characters the document may have.
const BUDGET: usize = 30_000;
/// Top-level directories of the repository that are not workspace members.
const OTHER_ROOTS: &[&str] = &[".ci", "docs", "examples", "scripts", "smf", "src", "tests"];
/// Endings that make a span with a `/` a file path whatever its first directory.
const FILE_ENDINGS: &[&str] = &[".rs", ".md", ".sh", ".py", ".toml", ".json"];

fn doc() -> String {
    fs::read_to_string(root().join(DOC)).expect("read docs/architecture.md")
}

/// The workspace members: (directory, the name the document uses: the directory, `rdctl` for
/// the root package).
fn members() -> Vec<(PathBuf, String)> {
    let manifest = fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let list = manifest
        .split("members = [")
        .nth(1)
        .and_then(|m| m.split(']').next())
        .expect("the workspace lists its members");
    let mut out = Vec::new();
    for m in list.split(',') {
        let m = m.trim().trim_matches('"');
        if m.is_empty() {
            continue;
        }
        if m == "." {
            out.push((root().to_path_buf(), "rdctl".to_owned()));
        } else {
            out.push((root().join(m), m.to_owned()));
        }
    }
    assert!(out.len() >= 10, "found only {out:?}");
    out
}

/// The text of the document outside fenced code blocks, and the blocks themselves.
fn prose_and_blocks(doc: &str) -> (String, Vec<String>) {
    let mut prose = String::new();
    let mut blocks = Vec::new();
    let mut block: Option<String> = None;
    for line in doc.lines() {
        if line.trim_start().starts_with("```") {
            match block.take() {
                Some(b) => blocks.push(b),
                None => block = Some(String::new()),
            }
            // Keep line numbers: an empty line stands for the fence.
            prose.push('\n');
            continue;
        }
        match &mut block {
            Some(b) => {
                b.push_str(line);
                b.push('\n');
                prose.push('\n');
            }
            None => {
                prose.push_str(line);
                prose.push('\n');
            }
        }
    }
    (prose, blocks)
}

/// Every span in single backquotes outside code blocks, with the line it starts on (a span
/// may wrap; its line break reads as a space).
fn spans(doc: &str) -> Vec<(usize, String)> {
    let (prose, _) = prose_and_blocks(doc);
    let mut out = Vec::new();
    let mut rest = prose.as_str();
    let mut line = 1;
    while let Some(open) = rest.find('`') {
        line += rest[..open].matches('\n').count();
        let after = &rest[open + 1..];
        let Some(close) = after.find('`') else {
            break;
        };
        let span = after[..close].replace('\n', " ");
        out.push((line, span.trim().to_owned()));
        line += after[..close].matches('\n').count();
        rest = &after[close + 1..];
    }
    out
}

fn ident_char(c: char) -> bool {
    c.is_ascii_alphanumeric() || c == '_'
}

fn is_ident(s: &str) -> bool {
    s.chars()
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && s.chars().all(ident_char)
}

/// `file.rs::test_name`: the file and the test.
fn test_ref(span: &str) -> Option<(&str, &str)> {
    let (file, test) = span.rsplit_once("::")?;
    (file.ends_with(".rs") && file.contains('/') && is_ident(test)).then_some((file, test))
}

/// Whether a span names a path in the repository (from its root), as opposed to a store key, a
/// path on a host or a pattern.
fn is_path_claim(span: &str, roots: &BTreeSet<String>) -> bool {
    if span.is_empty()
        || span.contains(|c: char| c.is_whitespace() || "<>*…{}|$:".contains(c))
        || span.starts_with('/')
        || span.starts_with("http")
    {
        return false;
    }
    if !span.contains('/') {
        return span.ends_with(".md");
    }
    let first = span.split('/').next().unwrap_or_default();
    roots.contains(first)
        || FILE_ENDINGS.iter().any(|e| span.ends_with(e))
        || span.contains("/src/")
        || span.contains("/tests/")
}

/// Whether `file` has a test function `name`: `fn name(` with a test attribute in the few
/// lines above it.
fn has_test(file: &Path, name: &str) -> Result<(), String> {
    let text = fs::read_to_string(file).map_err(|e| format!("cannot read it: {e}"))?;
    let lines: Vec<&str> = text.lines().collect();
    let needle = format!("fn {name}(");
    let at = lines
        .iter()
        .position(|l| l.contains(&needle))
        .ok_or_else(|| format!("it has no `fn {name}`"))?;
    let attrs = &lines[at.saturating_sub(4)..at];
    if attrs
        .iter()
        .any(|l| l.trim_start().starts_with("#[") && l.contains("test"))
    {
        Ok(())
    } else {
        Err(format!(
            "`fn {name}` is not a test (no test attribute above it)"
        ))
    }
}

/// The words (identifiers) of every Rust source of the workspace, tests included.
fn source_words() -> BTreeSet<String> {
    let mut words = BTreeSet::new();
    for f in rust_files(root(), true) {
        let text = fs::read_to_string(&f).unwrap_or_default();
        words.extend(
            text.split(|c: char| !ident_char(c))
                .filter(|w| !w.is_empty())
                .map(str::to_owned),
        );
    }
    words
}

/// Every `.rs` file under `dir` (without `target/`, hidden directories and, unless `all`, the
/// crates' `tests/` and `fuzz/` directories).
fn rust_files(dir: &Path, all: bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() {
                if name == "target" || name.starts_with('.') {
                    continue;
                }
                if !all && (name == "tests" || name == "fuzz") {
                    continue;
                }
                stack.push(p);
            } else if name.ends_with(".rs") {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// A Rust path that starts with a workspace library (`registry_client::transfer::copy`):
/// the modules must exist, the next name must occur in the last module's file (defined or
/// re-exported there), and any names after it in some source (`all_words`).
fn resolve(
    span: &str,
    crates: &BTreeMap<String, PathBuf>,
    all_words: &BTreeSet<String>,
) -> Option<Result<(), String>> {
    let segs: Vec<&str> = span.trim_end_matches("()").split("::").collect();
    let src = crates.get(segs[0])?.join("src");
    let mut dir = src.clone();
    let mut file = src.join("lib.rs");
    let mut rest = &segs[1..];
    while let Some(seg) = rest.first() {
        let as_file = dir.join(format!("{seg}.rs"));
        let as_dir = dir.join(seg).join("mod.rs");
        if as_file.is_file() {
            file = as_file;
        } else if as_dir.is_file() {
            file = as_dir;
        } else {
            break;
        }
        dir = dir.join(seg);
        rest = &rest[1..];
    }
    let Some((item, more)) = rest.split_first() else {
        return Some(Ok(()));
    };
    let words = |f: &Path| -> BTreeSet<String> {
        fs::read_to_string(f)
            .unwrap_or_default()
            .split(|c: char| !ident_char(c))
            .map(str::to_owned)
            .collect()
    };
    if !words(&file).contains(*item) {
        return Some(Err(format!(
            "`{item}` is neither a module nor a name in {}",
            file.strip_prefix(root()).unwrap_or(&file).display()
        )));
    }
    for m in more {
        if !all_words.contains(*m) {
            return Some(Err(format!("`{m}` occurs in no source")));
        }
    }
    Some(Ok(()))
}

#[test]
fn every_path_test_and_name_in_the_document_exists() {
    let doc = doc();
    let members = members();
    let mut roots: BTreeSet<String> = OTHER_ROOTS.iter().map(|s| (*s).to_owned()).collect();
    let mut crates = BTreeMap::new();
    for (dir, name) in &members {
        if name != "rdctl" {
            roots.insert(name.clone());
            crates.insert(name.replace('-', "_"), dir.clone());
        }
    }
    let words = source_words();
    let mut wrong = Vec::new();
    let (mut paths, mut tests, mut rust) = (0, 0, 0);
    for (line, span) in spans(&doc) {
        if let Some((file, test)) = test_ref(&span) {
            tests += 1;
            if let Err(e) = has_test(&root().join(file), test) {
                wrong.push(format!("line {line}: `{span}`: {e}"));
            }
        } else if is_path_claim(&span, &roots) {
            paths += 1;
            let p = root().join(span.trim_end_matches('/'));
            let ok = if span.ends_with('/') {
                p.is_dir()
            } else {
                p.exists()
            };
            if !ok {
                wrong.push(format!("line {line}: `{span}` does not exist"));
            }
        } else if span.contains("::") && span.trim_end_matches("()").split("::").all(is_ident) {
            rust += 1;
            match resolve(&span, &crates, &words) {
                Some(Err(e)) => wrong.push(format!("line {line}: `{span}`: {e}")),
                Some(Ok(())) => {}
                // `Type::name`: each name must still occur in the sources.
                None => {
                    for seg in span.trim_end_matches("()").split("::") {
                        if !words.contains(seg) {
                            wrong.push(format!(
                                "line {line}: `{span}`: `{seg}` occurs in no source"
                            ));
                        }
                    }
                }
            }
        } else if is_ident(&span)
            && span.chars().next().is_some_and(|c| c.is_ascii_uppercase())
            && span.chars().any(|c| c.is_ascii_lowercase() || c == '_')
            && !words.contains(&span)
        {
            // A type or constant name (`VerifiedRoot`, `KNOWN_CYCLES`).
            wrong.push(format!("line {line}: `{span}` occurs in no source"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{DOC} names what the tree does not have (fix the document, or the path that moved):\n{}",
        wrong.join("\n")
    );
    // The document is a map: it names paths, tests and code, and this test read them.
    assert!(
        paths >= 40 && tests >= 40 && rust >= 40,
        "read only {paths} paths, {tests} tests and {rust} Rust paths in {DOC}"
    );
}

#[test]
fn the_document_stays_under_its_budget() {
    let n = doc().chars().count();
    assert!(
        n <= BUDGET,
        "{DOC} has {n} characters, over its budget of {BUDGET}: it is a map read in twenty \
         minutes; move detail to the crate docs or the operator docs"
    );
}

#[test]
fn every_workspace_member_has_a_code_map_entry() {
    let doc = doc();
    let headings: Vec<&str> = doc.lines().filter(|l| l.starts_with("### ")).collect();
    let missing: Vec<String> = members()
        .into_iter()
        .map(|(_, name)| name)
        .filter(|name| !headings.iter().any(|h| h.contains(&format!("`{name}`"))))
        .collect();
    assert!(
        missing.is_empty(),
        "{DOC} has no `### ` entry for {missing:?}"
    );
}

/// The names in the `[dependencies]` sections (normal and per-target) of a `Cargo.toml`.
fn dependencies(manifest: &Path) -> BTreeSet<String> {
    let text = fs::read_to_string(manifest).unwrap();
    let mut out = BTreeSet::new();
    let mut on = false;
    for line in text.lines() {
        let t = line.trim();
        if t.starts_with('[') {
            on = t == "[dependencies]"
                || (t.starts_with("[target.") && t.ends_with(".dependencies]"));
            continue;
        }
        if !on || t.is_empty() || t.starts_with('#') {
            continue;
        }
        let name = t.split(['=', '.']).next().unwrap_or_default().trim();
        if !name.is_empty() {
            out.insert(name.to_owned());
        }
    }
    out
}

#[test]
fn the_crate_graph_is_the_one_in_cargo_toml() {
    let doc = doc();
    let members = members();
    let names: BTreeSet<String> = members.iter().map(|(_, n)| n.clone()).collect();
    let deps: BTreeMap<String, BTreeSet<String>> = members
        .iter()
        .map(|(dir, n)| (n.clone(), dependencies(&dir.join("Cargo.toml"))))
        .collect();

    // The crate graph: the first code block after its heading.
    let after = doc
        .split("## Crate graph")
        .nth(1)
        .expect("a \"## Crate graph\" section");
    let (_, blocks) = prose_and_blocks(after);
    let block = blocks.first().expect("a code block in \"## Crate graph\"");
    let mut graph = BTreeMap::new();
    for line in block.lines().filter(|l| !l.trim().is_empty()) {
        let (from, to) = line
            .split_once('─')
            .unwrap_or_else(|| panic!("a graph line is `crate ─► deps`: {line:?}"));
        let to = to.trim_start_matches(['─', '►']);
        let to: BTreeSet<String> = to
            .split_whitespace()
            .filter(|t| *t != "(none)")
            .map(str::to_owned)
            .collect();
        graph.insert(from.trim().to_owned(), to);
    }
    let mut wrong = Vec::new();
    for name in &names {
        let actual: BTreeSet<String> = deps[name].intersection(&names).cloned().collect();
        match graph.get(name) {
            None => wrong.push(format!("{name} is missing from the graph")),
            Some(said) if *said != actual => wrong.push(format!(
                "{name}: the document says {said:?}, its Cargo.toml has {actual:?}"
            )),
            Some(_) => {}
        }
    }
    for name in graph.keys().filter(|n| !names.contains(*n)) {
        wrong.push(format!("{name} is in the graph but not a workspace member"));
    }

    // The outside crates with one owner: the table after the graph.
    let table = after
        .lines()
        .skip_while(|l| !l.starts_with("| Outside crate"))
        .skip(2)
        .take_while(|l| l.starts_with('|'));
    let mut rows = 0;
    for row in table {
        rows += 1;
        let cells: Vec<&str> = row.trim_matches('|').split('|').map(str::trim).collect();
        let owners: BTreeSet<String> = cells[1].split(',').map(|s| s.trim().to_owned()).collect();
        for outside in cells[0].split(',').map(|s| s.trim().trim_matches('`')) {
            let users: BTreeSet<String> = deps
                .iter()
                .filter(|(_, d)| d.contains(outside))
                .map(|(n, _)| n.clone())
                .collect();
            if users != owners {
                wrong.push(format!(
                    "`{outside}`: the document says only {owners:?}, the [dependencies] of {users:?} have it"
                ));
            }
        }
    }
    assert!(rows >= 5, "found {rows} rows of the outside-crate table");
    assert!(
        wrong.is_empty(),
        "{DOC}'s crate graph:\n{}",
        wrong.join("\n")
    );
}

/// A crate's non-test source files (relative to the repository root) and their non-test,
/// non-comment text.
fn code_of(crate_dir: &str) -> Vec<(String, String)> {
    let src = root().join(crate_dir).join("src");
    let mut out = Vec::new();
    for f in rust_files(&src, false) {
        let rel = f
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        if rel.ends_with("/tests.rs") {
            continue;
        }
        let text = fs::read_to_string(&f).unwrap();
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
        let code: String = text[..end]
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        out.push((rel, code));
    }
    out
}

/// The product crates' directories (not the benchmarks or the test fixtures).
fn product_crates() -> Vec<String> {
    members()
        .into_iter()
        .filter(|(_, n)| n != "bench" && n != "s3-fixtures")
        .map(|(dir, n)| {
            if n == "rdctl" {
                ".".to_owned()
            } else {
                dir.file_name().unwrap().to_string_lossy().into_owned()
            }
        })
        .collect()
}

/// A rule that a text occurs in non-test code only in some places.
struct OnePlace {
    /// What the rule keeps.
    what: &'static str,
    /// The crate directories it reads (empty: every product crate).
    scope: &'static [&'static str],
    /// The texts.
    needles: &'static [&'static str],
    /// Path prefixes (from the repository root) where they may occur; without `.rs`, so a module
    /// split into a directory still matches.
    allowed: &'static [&'static str],
}

#[test]
fn each_concern_has_one_place() {
    let rules: &[OnePlace] = &[
        OnePlace {
            what: "only rdctl starts a tokio runtime",
            scope: &[],
            needles: &["runtime::Builder", "Runtime::new", "tokio::main"],
            allowed: &["src/runtime"],
        },
        OnePlace {
            what: "a reqwest client is built only by registry-client's transport",
            scope: &[],
            needles: &[
                "reqwest::Client::builder",
                "reqwest::Client::new",
                "reqwest::ClientBuilder",
            ],
            allowed: &["registry-client/src/transport"],
        },
        OnePlace {
            what: "the files of a certs.d directory are read only by tls-files",
            scope: &[],
            needles: &["\"crt\""],
            allowed: &["tls-files/src/"],
        },
        OnePlace {
            what: "manifests and blobs are pushed only by the copy path, its endpoints, signatures, \
             raw artifacts and the request modules",
            scope: &[],
            needles: &[".put_manifest(", ".push_blob("],
            allowed: &[
                "registry-client/src/transfer/",
                "registry-client/src/image/endpoint",
                "registry-client/src/signatures",
                "registry-client/src/raw",
                "registry-client/src/manifest",
                "registry-client/src/referrers",
                "registry-client/src/blob",
            ],
        },
        OnePlace {
            what: "a repository's tag index key is used only by registry::repo (and the web pages, \
             which stat it to see a change)",
            scope: &["registry"],
            needles: &["layout::tags("],
            allowed: &["registry/src/repo/", "registry/src/ui/"],
        },
        OnePlace {
            what: "a layout's index.json is written only through ImageLayout::edit_index",
            scope: &[],
            needles: &["write_index_bytes("],
            allowed: &["validator/src/layout"],
        },
        OnePlace {
            what: "validator touches the file system only in its layout, ingest and layout walk",
            scope: &["validator"],
            needles: &["std::fs", "fs::", "File::", "OpenOptions"],
            allowed: &[
                "validator/src/layout",
                "validator/src/ingest",
                "validator/src/image",
            ],
        },
        OnePlace {
            what: "trust touches the file system only to load a policy and its keys",
            scope: &["trust"],
            needles: &["std::fs", "fs::", "File::", "OpenOptions"],
            allowed: &["trust/src/policy"],
        },
        OnePlace {
            what: "the worker runs programs only through the zfs command and the illumos command runner",
            scope: &["worker-runtime"],
            needles: &["Command::new"],
            allowed: &[
                "worker-runtime/src/zfs/command",
                "worker-runtime/src/provision/illumos",
            ],
        },
    ];
    let product = product_crates();
    let mut wrong = Vec::new();
    for OnePlace {
        what,
        scope,
        needles,
        allowed,
    } in rules
    {
        let dirs: Vec<String> = if scope.is_empty() {
            product.clone()
        } else {
            scope.iter().map(|s| (*s).to_owned()).collect()
        };
        let mut seen_allowed = false;
        for dir in &dirs {
            for (file, code) in code_of(dir) {
                let file = file.trim_start_matches("./").to_owned();
                if !needles.iter().any(|n| code.contains(n)) {
                    continue;
                }
                if allowed.iter().any(|a| file.starts_with(a)) {
                    seen_allowed = true;
                } else {
                    wrong.push(format!("{what}: {file} has one of {needles:?}"));
                }
            }
        }
        // A rule whose one place no longer has the text checks nothing: say so.
        if !seen_allowed {
            wrong.push(format!(
                "{what}: none of {allowed:?} has one of {needles:?} any more"
            ));
        }
    }
    assert!(
        wrong.is_empty(),
        "one place per concern:\n{}",
        wrong.join("\n")
    );
}

/// For each non-test file of a crate, its first-level module and the first-level modules its
/// `crate::` paths name (root re-exports mapped to the module they come from).
fn crate_imports(crate_dir: &str) -> Vec<(String, String, BTreeSet<String>)> {
    let lib = fs::read_to_string(root().join(crate_dir).join("src/lib.rs")).unwrap();
    // `pub use module::{A, B as C};` → A, C ↦ module.
    let mut reexports = BTreeMap::new();
    for stmt in lib.split("pub use ").skip(1) {
        let stmt = stmt.split(';').next().unwrap_or_default();
        let Some((module, items)) = stmt.split_once("::") else {
            continue;
        };
        for item in items.split([',', '{', '}']) {
            let item = item.trim();
            let name = item.rsplit(" as ").next().unwrap_or(item);
            let name = name.rsplit("::").next().unwrap_or(name).trim();
            if is_ident(name) {
                reexports.insert(name.to_owned(), module.trim().to_owned());
            }
        }
    }
    let mut out = Vec::new();
    for (file, code) in code_of(crate_dir) {
        let rel = file
            .strip_prefix(&format!("{crate_dir}/src/"))
            .unwrap_or(&file)
            .to_owned();
        if rel == "lib.rs" {
            continue;
        }
        let module = rel
            .split('/')
            .next()
            .unwrap()
            .trim_end_matches(".rs")
            .to_owned();
        let mut names = BTreeSet::new();
        for (at, _) in code.match_indices("crate::") {
            let rest = &code[at + "crate::".len()..];
            let firsts: Vec<String> = if let Some(group) = rest.strip_prefix('{') {
                // `crate::{a::b, C}`: the first segment of each item (one level of braces).
                let mut depth = 0;
                let end = group
                    .find(|c| {
                        match c {
                            '{' => depth += 1,
                            '}' if depth == 0 => return true,
                            '}' => depth -= 1,
                            _ => {}
                        }
                        false
                    })
                    .unwrap_or(group.len());
                let mut items = Vec::new();
                let mut depth = 0;
                let mut cur = String::new();
                for c in group[..end].chars() {
                    match c {
                        '{' => depth += 1,
                        '}' => depth -= 1,
                        ',' if depth == 0 => items.push(std::mem::take(&mut cur)),
                        _ => cur.push(c),
                    }
                }
                items.push(cur);
                items
                    .iter()
                    .map(|i| {
                        i.trim()
                            .split("::")
                            .next()
                            .unwrap_or_default()
                            .trim()
                            .to_owned()
                    })
                    .collect()
            } else {
                vec![
                    rest.split(|c: char| !ident_char(c))
                        .next()
                        .unwrap_or_default()
                        .to_owned(),
                ]
            };
            for first in firsts.into_iter().filter(|f| is_ident(f) && f != "self") {
                let m = reexports.get(&first).cloned().unwrap_or(first);
                if m != module {
                    names.insert(m);
                }
            }
        }
        out.push((file, module, names));
    }
    out
}

#[test]
fn registry_core_imports_no_feature() {
    // The core as docs/architecture.md lists it; `registry::features` wires the features in.
    const CORE: &[&str] = &[
        "duration",
        "errors",
        "lease",
        "manifest_rules",
        "metrics",
        "repo",
        "storage",
        "tombstone",
        "upload",
    ];
    let mut wrong = Vec::new();
    let mut core_files = 0;
    for (file, module, imports) in crate_imports("registry") {
        if !CORE.contains(&module.as_str()) {
            continue;
        }
        core_files += 1;
        for m in imports.iter().filter(|m| !CORE.contains(&m.as_str())) {
            wrong.push(format!(
                "{file} (core `{module}`) imports the feature `{m}`"
            ));
        }
    }
    assert!(core_files >= 15, "found only {core_files} core files");
    assert!(
        wrong.is_empty(),
        "the registry's core imports no feature (features plug in through registry::features):\n{}",
        wrong.join("\n")
    );
}

#[test]
fn registry_client_layers_point_down() {
    const BASE: &[&str] = &[
        "auth",
        "blob",
        "body",
        "catalog",
        "challenge",
        "client",
        "credential_provider",
        "credentials",
        "error",
        "keychain",
        "login",
        "manifest",
        "packages",
        "reference",
        "referrers",
        "session",
        "transport",
    ];
    const VOCABULARY: &[&str] = &["image"];
    const OPERATIONS: &[&str] = &[
        "inspect",
        "manage",
        "progress",
        "publish",
        "raw",
        "signatures",
        "sync",
        "transfer",
    ];
    // The one import that runs up today: `Client` holds transfer's blob single-flight table.
    const KNOWN_UPWARD: &[(&str, &str)] = &[("client", "transfer")];
    let layer = |m: &str| {
        if BASE.contains(&m) {
            Some(0)
        } else if VOCABULARY.contains(&m) {
            Some(1)
        } else if OPERATIONS.contains(&m) {
            Some(2)
        } else {
            None
        }
    };
    let mut wrong = Vec::new();
    let mut upward = BTreeSet::new();
    for (file, module, imports) in crate_imports("registry-client") {
        let Some(own) = layer(&module) else {
            wrong.push(format!(
                "{file}: module `{module}` is in no layer: add it to base, vocabulary or \
                 operations here and in docs/architecture.md"
            ));
            continue;
        };
        for m in &imports {
            match layer(m) {
                Some(l) if l > own => {
                    upward.insert((module.clone(), m.clone()));
                }
                Some(_) => {}
                None => wrong.push(format!("{file}: imports `{m}`, which is in no layer")),
            }
        }
    }
    let known: BTreeSet<(String, String)> = KNOWN_UPWARD
        .iter()
        .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
        .collect();
    for (from, to) in upward.difference(&known) {
        wrong.push(format!("`{from}` imports `{to}`, a layer above it"));
    }
    for (from, to) in known.difference(&upward) {
        wrong.push(format!(
            "`{from}` no longer imports `{to}`: remove it from KNOWN_UPWARD and from \
             docs/architecture.md"
        ));
    }
    assert!(
        wrong.is_empty(),
        "registry-client's layers (base, vocabulary, operations) import only downwards:\n{}",
        wrong.join("\n")
    );
}

#[test]
fn the_readers_see_what_the_document_and_code_hold() {
    // Spans: wrapped spans, code blocks skipped, line numbers.
    let text = "a `x/y.rs`\n```\n`not/this.rs`\n```\nand `wrapped\nspan` `t.rs::f` end";
    let s = spans(text);
    assert_eq!(
        s,
        vec![
            (1, "x/y.rs".to_owned()),
            (5, "wrapped span".to_owned()),
            (6, "t.rs::f".to_owned())
        ]
    );
    let roots: BTreeSet<String> = ["registry", "tests"]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
    assert!(is_path_claim("registry/src/gc/", &roots));
    assert!(is_path_claim("renamed/src/x.rs", &roots));
    assert!(!is_path_claim("gc/lock", &roots), "a store key is no path");
    assert!(!is_path_claim("<alg>-<hex>.partial", &roots));
    assert_eq!(test_ref("tests/a.rs::b_c"), Some(("tests/a.rs", "b_c")));
    assert_eq!(test_ref("registry::gc::collect"), None);
    // A renamed path and a missing test are caught.
    assert!(!root().join("registry/src/no_such_module.rs").exists());
    assert!(
        has_test(
            &root().join("tests/architecture_doc.rs"),
            "the_document_stays_under_its_budget"
        )
        .is_ok()
    );
    assert!(has_test(&root().join("tests/architecture_doc.rs"), "doc").is_err());
    // Rust paths resolve through files and modules.
    let words: BTreeSet<String> = ["Repos".to_owned()].into_iter().collect();
    let crates: BTreeMap<String, PathBuf> = [("registry".to_owned(), root().join("registry"))]
        .into_iter()
        .collect();
    assert_eq!(
        resolve("registry::gc::collect", &crates, &words),
        Some(Ok(()))
    );
    assert!(matches!(
        resolve("registry::gc::no_such_fn", &crates, &words),
        Some(Err(_))
    ));
    assert_eq!(resolve("other::x", &crates, &words), None);
    assert_eq!(
        resolve("registry::repo::Repos", &crates, &words),
        Some(Ok(()))
    );
    assert!(matches!(
        resolve("registry::repo::Repos::no_such_method", &crates, &words),
        Some(Err(_))
    ));
    // Dependencies: normal ones only.
    let deps = dependencies(&root().join("trust/Cargo.toml"));
    assert!(
        deps.contains("validator") && !deps.contains("tempfile"),
        "{deps:?}"
    );
}
