//! The shape of the code, kept from growing: no source file over [`FILE_LIMIT`] lines of
//! non-test code and no function over [`FN_LIMIT`] lines (issue 34: a file that long mixes
//! concerns, a function that long hides its steps).
//!
//! Files and functions over the limits today are listed, exactly, in [`KNOWN_LONG_FILES`] and
//! [`KNOWN_LONG_FNS`]. The test fails when something not listed goes over a limit, and when a
//! listed one is back under it or gone (then delete its line: the lists only get shorter).
//!
//! Sources are parsed with `syn`, so braces in strings, comments and macros do not confuse the
//! count. Test code does not count: items under `#[cfg(test)]` (the unit tests beside the
//! code) are left out of a file's lines and of the functions.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::util::root;

/// Non-test lines a source file may have.
const FILE_LIMIT: usize = 800;
/// Lines a function may span, from `fn` to its closing brace.
const FN_LIMIT: usize = 150;

/// Files over [`FILE_LIMIT`] today, relative to the repository root.
const KNOWN_LONG_FILES: &[&str] = &[];

/// Functions over [`FN_LIMIT`] today: (file, function name).
const KNOWN_LONG_FNS: &[(&str, &str)] = &[];

/// Every crate's `src/` (the workspace members and the binary), without `target/`, the pinned
/// tools or fuzz targets.
fn source_files() -> Vec<PathBuf> {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        let Ok(entries) = fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                walk(&p, out);
            } else if p.extension().is_some_and(|x| x == "rs") {
                out.push(p);
            }
        }
    }
    let mut out = Vec::new();
    for e in fs::read_dir(root())
        .expect("read the repository root")
        .flatten()
    {
        let src = e.path().join("src");
        let name = e.file_name();
        let name = name.to_string_lossy();
        if name.starts_with('.') || name == "target" || name == "fuzz" {
            continue;
        }
        if e.path().join("Cargo.toml").is_file() && src.is_dir() {
            walk(&src, &mut out);
        }
    }
    walk(&root().join("src"), &mut out);
    out.sort();
    out.dedup();
    out
}

fn is_cfg_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.parse_args::<syn::Meta>()
                .is_ok_and(|m| m.path().is_ident("test"))
    })
}

/// The line range an item spans, attributes and doc comments included (start and end lines
/// need proc-macro2's `span-locations`, which the dev-dependency turns on).
fn lines_of<T: Spanned>(item: &T) -> (usize, usize) {
    let s = item.span();
    (s.start().line, s.end().line)
}

#[derive(Default)]
struct Shape {
    /// Line ranges of test-only items.
    test_ranges: Vec<(usize, usize)>,
    /// (name, lines) of each function outside test code.
    fns: Vec<(String, usize)>,
}

impl Shape {
    fn function(&mut self, name: &syn::Ident, sig: &syn::Signature, body: &syn::Block) {
        let start = sig.fn_token.span.start().line;
        let end = body.brace_token.span.close().end().line;
        self.fns.push((name.to_string(), end + 1 - start));
    }
}

impl<'ast> Visit<'ast> for Shape {
    fn visit_item(&mut self, i: &'ast syn::Item) {
        let attrs = match i {
            syn::Item::Mod(m) => &m.attrs,
            syn::Item::Fn(f) => &f.attrs,
            syn::Item::Impl(x) => &x.attrs,
            syn::Item::Use(u) => &u.attrs,
            syn::Item::Struct(s) => &s.attrs,
            syn::Item::Enum(e) => &e.attrs,
            syn::Item::Const(c) => &c.attrs,
            syn::Item::Static(s) => &s.attrs,
            syn::Item::Trait(t) => &t.attrs,
            syn::Item::Type(t) => &t.attrs,
            syn::Item::Macro(m) => &m.attrs,
            _ => return syn::visit::visit_item(self, i),
        };
        if is_cfg_test(attrs) {
            self.test_ranges.push(lines_of(i));
            return;
        }
        syn::visit::visit_item(self, i);
    }

    fn visit_item_fn(&mut self, f: &'ast syn::ItemFn) {
        self.function(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_item_fn(self, f);
    }

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if is_cfg_test(&f.attrs) {
            self.test_ranges.push(lines_of(f));
            return;
        }
        self.function(&f.sig.ident, &f.sig, &f.block);
        syn::visit::visit_impl_item_fn(self, f);
    }

    fn visit_trait_item_fn(&mut self, f: &'ast syn::TraitItemFn) {
        if let Some(body) = &f.default {
            self.function(&f.sig.ident, &f.sig, body);
        }
        syn::visit::visit_trait_item_fn(self, f);
    }
}

/// (non-test lines, functions with their lengths) of one source file.
fn measure(path: &Path) -> (usize, Vec<(String, usize)>) {
    let text = fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    let file = syn::parse_file(&text).unwrap_or_else(|e| {
        panic!(
            "{}:{}: does not parse: {e}",
            path.display(),
            e.span().start().line
        )
    });
    let mut shape = Shape::default();
    shape.visit_file(&file);
    let total = text.lines().count();
    let mut test_lines = BTreeSet::new();
    for (a, b) in &shape.test_ranges {
        test_lines.extend(*a..=*b);
    }
    (total - test_lines.len(), shape.fns)
}

#[test]
fn no_file_or_function_grows_past_the_limits() {
    let mut long_files = BTreeSet::new();
    let mut long_fns = BTreeSet::new();
    let mut report_files = Vec::new();
    let mut report_fns = Vec::new();
    for path in source_files() {
        let rel = path
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .into_owned();
        let (lines, fns) = measure(&path);
        if lines > FILE_LIMIT {
            report_files.push(format!("{rel}: {lines} non-test lines"));
            long_files.insert(rel.clone());
        }
        for (name, n) in fns {
            if n > FN_LIMIT {
                report_fns.push(format!("{rel}: fn {name}: {n} lines"));
                long_fns.insert((rel.clone(), name));
            }
        }
    }
    let known_files: BTreeSet<String> = KNOWN_LONG_FILES.iter().map(|s| s.to_string()).collect();
    let known_fns: BTreeSet<(String, String)> = KNOWN_LONG_FNS
        .iter()
        .map(|(f, n)| (f.to_string(), n.to_string()))
        .collect();
    let mut problems = Vec::new();
    for f in long_files.difference(&known_files) {
        problems.push(format!(
            "{f} has more than {FILE_LIMIT} lines of non-test code: split it by concern"
        ));
    }
    for f in known_files.difference(&long_files) {
        problems.push(format!(
            "{f} is no longer over {FILE_LIMIT} lines (or is gone): remove it from KNOWN_LONG_FILES"
        ));
    }
    for (f, n) in long_fns.difference(&known_fns) {
        problems.push(format!(
            "{f}: fn {n} is longer than {FN_LIMIT} lines: name its steps as functions"
        ));
    }
    for (f, n) in known_fns.difference(&long_fns) {
        problems.push(format!(
            "{f}: fn {n} is no longer over {FN_LIMIT} lines (or is gone): remove it from KNOWN_LONG_FNS"
        ));
    }
    assert!(
        problems.is_empty(),
        "{}\n\ntoday's long files:\n  {}\ntoday's long functions:\n  {}",
        problems.join("\n"),
        report_files.join("\n  "),
        report_fns.join("\n  ")
    );
}

/// Non-test lines a command file of `rdctl` (`src/commands/`) may have: a command file turns
/// arguments into a library call and prints the result; more than this and it holds logic
/// that belongs in a library, or several subcommands that belong in a directory of their own
/// (issue 34, "the command files become thin"). No file is over it today, so there is no list
/// of known ones.
const COMMAND_FILE_LIMIT: usize = 300;

#[test]
fn command_files_stay_thin() {
    let commands = root().join("src").join("commands");
    let mut over = Vec::new();
    let mut seen = 0;
    for path in source_files()
        .into_iter()
        .filter(|p| p.starts_with(&commands))
    {
        seen += 1;
        let (lines, _) = measure(&path);
        if lines > COMMAND_FILE_LIMIT {
            let rel = path.strip_prefix(root()).unwrap().display().to_string();
            over.push(format!("{rel}: {lines} non-test lines"));
        }
    }
    assert!(
        seen > 10,
        "found only {seen} command files under {}",
        commands.display()
    );
    assert!(
        over.is_empty(),
        "command files over {COMMAND_FILE_LIMIT} lines of non-test code: move the logic into a \
         library (registry-client, registry, worker-runtime, builder) or split the file by \
         subcommand\n  {}",
        over.join("\n  ")
    );
}

#[test]
fn the_measure_leaves_out_test_code_and_reads_spans() {
    let dir = crate::util::tempdir();
    let p = dir.path().join("x.rs");
    let long_body = "    let _ = 1;\n".repeat(10);
    let text = format!(
        "fn a() {{\n{long_body}}}\n\nstruct S;\nimpl S {{\n    fn b(&self) {{ let _ = \"}}\"; }}\n}}\n\n\
         #[cfg(test)]\nmod tests {{\n    fn c() {{\n{long_body}    }}\n}}\n"
    );
    fs::write(&p, &text).unwrap();
    let (lines, fns) = measure(&p);
    // 12 lines of a, a blank, struct, 3 lines of impl, a blank: 18; the test module is out.
    assert_eq!(lines, 18, "{text}");
    assert_eq!(fns, vec![("a".to_string(), 12), ("b".to_string(), 1)]);
}
