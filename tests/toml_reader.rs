//! One TOML reader (issue 34): only `config-toml` depends on the `toml` crate or names it in
//! code, so every configuration file is read with its line-numbered, user-worded errors and
//! its one syntax for durations and sizes.
//!
//! Two checks: no `Cargo.toml` in the workspace but config-toml's lists `toml` among any of its
//! dependencies (normal, dev, build, per target, or renamed with `package = "toml"`), and no
//! Rust file outside config-toml has a path starting with `toml::` or a `use toml…` (read with
//! syn, so strings and comments do not count).

use std::path::{Path, PathBuf};

use syn::spanned::Spanned;
use syn::visit::Visit;

use crate::util::root;

/// The one crate that may use `toml`.
const READER: &str = "config-toml";

/// Every package directory of the workspace (`.` is the root package), from its member list.
fn packages() -> Vec<PathBuf> {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let members = manifest
        .split("members = [")
        .nth(1)
        .and_then(|m| m.split(']').next())
        .expect("the workspace lists its members");
    let out: Vec<PathBuf> = members
        .split(',')
        .map(|m| m.trim().trim_matches('"'))
        .filter(|m| !m.is_empty())
        .map(|m| root().join(m))
        .collect();
    assert!(out.len() >= 8, "found only {out:?}");
    out
}

/// The lines of a manifest that make `toml` a dependency: `toml = …` or `toml.workspace = …`
/// in a dependencies table, a `[…dependencies.toml]` table, or `package = "toml"`.
fn toml_dependencies(manifest: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    let mut in_deps = false;
    for (i, line) in manifest.lines().enumerate() {
        let l = line.trim();
        if l.starts_with('#') {
            continue;
        }
        if l.starts_with('[') {
            let header = l.trim_matches(|c| c == '[' || c == ']').trim();
            in_deps = header.ends_with("dependencies");
            if header.ends_with("dependencies.toml") {
                out.push((i + 1, line.to_owned()));
            }
            continue;
        }
        let key = l
            .split(['=', '.'])
            .next()
            .unwrap_or_default()
            .trim()
            .trim_matches('"');
        let renamed = l.replace(' ', "").contains("package=\"toml\"");
        if in_deps && (key == "toml" || renamed) {
            out.push((i + 1, line.to_owned()));
        }
    }
    out
}

#[test]
fn only_config_toml_depends_on_toml() {
    let mut found = Vec::new();
    for dir in packages() {
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        if name == READER {
            continue;
        }
        let path = dir.join("Cargo.toml");
        let text = std::fs::read_to_string(&path).unwrap();
        // The root manifest is also the workspace's: its `[workspace.dependencies]` pins the
        // version config-toml inherits, which is not a dependency of any package.
        let text = text
            .split("\n[")
            .filter(|section| !section.starts_with("workspace.dependencies]"))
            .collect::<Vec<_>>()
            .join("\n[");
        for (line, l) in toml_dependencies(&text) {
            found.push(format!("{}:{line}: {l}", path.display()));
        }
    }
    assert!(
        found.is_empty(),
        "only {READER} may depend on the toml crate; read TOML with config_toml::from_str \
         (line-numbered errors, one duration and size syntax):\n{}",
        found.join("\n")
    );
}

/// Paths that start with the `toml` crate (`toml::from_str`, `use toml::Value`).
#[derive(Default)]
struct TomlPaths {
    found: Vec<usize>,
}

impl<'ast> Visit<'ast> for TomlPaths {
    fn visit_path(&mut self, p: &'ast syn::Path) {
        if p.segments.len() > 1 && p.segments[0].ident == "toml" {
            self.found.push(p.span().start().line);
        }
        syn::visit::visit_path(self, p);
    }

    fn visit_item_use(&mut self, u: &'ast syn::ItemUse) {
        let first = match &u.tree {
            syn::UseTree::Path(p) => Some(&p.ident),
            syn::UseTree::Name(n) => Some(&n.ident),
            syn::UseTree::Rename(r) => Some(&r.ident),
            _ => None,
        };
        if first.is_some_and(|i| i == "toml") {
            self.found.push(u.span().start().line);
        }
        syn::visit::visit_item_use(self, u);
    }

    fn visit_item_extern_crate(&mut self, c: &'ast syn::ItemExternCrate) {
        if c.ident == "toml" {
            self.found.push(c.span().start().line);
        }
    }
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for e in entries.flatten() {
        let p = e.path();
        let name = e.file_name();
        if p.is_dir() {
            if name != "target" && name != ".tools" && !name.to_string_lossy().starts_with('.') {
                rust_files(&p, out);
            }
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

#[test]
fn only_config_toml_names_the_toml_crate_in_code() {
    let mut files = Vec::new();
    for dir in packages() {
        if dir.file_name().is_some_and(|n| n == READER) {
            continue;
        }
        for sub in ["src", "tests", "benches", "examples"] {
            // The root package's own members are separate directories, walked on their own.
            rust_files(&dir.join(sub), &mut files);
        }
    }
    assert!(files.len() > 50, "found only {} Rust files", files.len());
    let mut found = Vec::new();
    for f in files {
        let text = std::fs::read_to_string(&f).unwrap();
        let Ok(ast) = syn::parse_file(&text) else {
            // A file mid-edit elsewhere fails its own crate's build, not this check.
            continue;
        };
        let mut v = TomlPaths::default();
        v.visit_file(&ast);
        for line in v.found {
            found.push(format!("{}:{line}", f.display()));
        }
    }
    assert!(
        found.is_empty(),
        "only {READER} may use the toml crate; read TOML with config_toml::from_str:\n{}",
        found.join("\n")
    );
}

#[test]
fn the_manifest_check_sees_every_way_to_name_toml() {
    for (manifest, lines) in [
        ("[dependencies]\ntoml = \"0.9\"\n", vec![2]),
        ("[dependencies]\ntoml.workspace = true\n", vec![2]),
        (
            "[dev-dependencies]\nserde = \"1\"\ntoml = { version = \"0.9\" }\n",
            vec![3],
        ),
        (
            "[target.'cfg(unix)'.build-dependencies]\ntoml = \"0.9\"\n",
            vec![2],
        ),
        ("[dependencies.toml]\nversion = \"0.9\"\n", vec![1]),
        (
            "[dependencies]\ncfg = { package = \"toml\", version = \"0.9\" }\n",
            vec![2],
        ),
        (
            "[dependencies]\nconfig-toml.workspace = true\ntoml_edit = \"0.22\"\n# toml = \"0.9\"\n",
            vec![],
        ),
        ("[package]\ntoml = 1\n", vec![]),
    ] {
        let got: Vec<usize> = toml_dependencies(manifest)
            .into_iter()
            .map(|(l, _)| l)
            .collect();
        assert_eq!(got, lines, "{manifest}");
    }
    let code = "use toml::Value;\nfn f() { let _ = toml::from_str::<u8>(\"toml::x\"); config_toml::from_str::<u8>(\"\", &[]); }\n";
    let mut v = TomlPaths::default();
    v.visit_file(&syn::parse_file(code).unwrap());
    assert_eq!(v.found, [1, 2]);
}
