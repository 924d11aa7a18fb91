//! Directories no `dir` action delivers, made the way pkg makes them while it installs.
//!
//! pkg creates a missing parent only when an action needs it (`makedirs` in its
//! `actions/generic.py`): every missing directory between the deepest directory that exists
//! and the one the action needs copies that ancestor's mode, owner and group; the directory
//! the action needs is that too, except that a `file`, `link` or `hardlink` asks for mode
//! 0755 for its parent (a `dir` action's path is the action's own). pkg installs all `dir`
//! actions first, in path order, then files, hard links and links. The ancestors that exist
//! before any action are the image root and `var/pkg` (made by `pkg image-create`), both
//! root:root 0755.
//!
//! Within files, and within links, pkg's order is the order of its action objects in memory;
//! hard links it takes in path order but puts a link to a link after its target. We take
//! path order in each phase. The results can only differ when one missing directory is the
//! parent of one action and above the parent of another, under an ancestor whose mode is
//! not 0755.

use std::collections::BTreeMap;

use super::{Content, Node, Tree};
use crate::tarball::Meta;

/// The mode pkg asks for when it makes the parent of a file, link or hard link.
const PARENT_MODE: u32 = 0o755;

/// What pkg's `image-create` makes before installing anything: root:root 0755.
pub(super) fn created_by_pkg(epoch: u64) -> Meta {
    Meta {
        mode: 0o755,
        uid: 0,
        gid: 0,
        uname: "root".into(),
        gname: "root".into(),
        mtime: epoch,
    }
}

/// Adds every missing ancestor of the tree's entries: first those the packages' actions make
/// (pkg's rules above), then those of what the build generates, as root:root 0755.
/// `unplaced` are the paths of files the packages deliver but a fresh install leaves out
/// (`preserve=legacy` and `preserve=abandon`): pkg makes their parents before it looks at
/// `preserve`.
pub(crate) fn add_missing_parents(tree: &mut Tree, unplaced: &[&str], epoch: u64) {
    let mut made: BTreeMap<String, Meta> = BTreeMap::new();
    if tree.keys().any(|p| p.starts_with("var/pkg/")) {
        for p in ["var", "var/pkg"] {
            if !tree.contains_key(p) {
                made.insert(p.to_owned(), created_by_pkg(epoch));
            }
        }
    }
    for phase in [Phase::Dir, Phase::File, Phase::Hardlink, Phase::Link] {
        let mut paths: Vec<&str> = tree
            .iter()
            .filter(|(_, n)| n.owner.is_some() && Phase::of(&n.content) == phase)
            .map(|(p, _)| p.as_str())
            .collect();
        if phase == Phase::File {
            paths.extend(unplaced);
            paths.sort_unstable();
        }
        for path in paths {
            make_parents(tree, &mut made, path, phase, epoch);
        }
    }
    // What the build generates (accounts, pkginfo, var/pkg) under directories nothing made.
    let generated: Vec<String> = tree
        .iter()
        .filter(|(_, n)| n.owner.is_none())
        .map(|(p, _)| p.clone())
        .collect();
    for path in generated {
        let mut cur = path.as_str();
        while let Some((parent, _)) = cur.rsplit_once('/') {
            if !tree.contains_key(parent) {
                made.entry(parent.to_owned())
                    .or_insert_with(|| created_by_pkg(epoch));
            }
            cur = parent;
        }
    }
    for (path, meta) in made {
        tree.entry(path).or_insert(Node {
            content: Content::Dir,
            meta,
            owner: None,
        });
    }
}

/// pkg's install phases for actions that put something at a path.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Phase {
    Dir,
    File,
    Hardlink,
    Link,
}

impl Phase {
    fn of(content: &Content) -> Phase {
        match content {
            Content::Dir => Phase::Dir,
            Content::Hardlink(_) => Phase::Hardlink,
            Content::Symlink(_) => Phase::Link,
            Content::Payload { .. } | Content::Bytes(_) => Phase::File,
        }
    }
}

/// Makes the missing ancestors of `path` as pkg does when it installs the action there.
fn make_parents(
    tree: &Tree,
    made: &mut BTreeMap<String, Meta>,
    path: &str,
    phase: Phase,
    epoch: u64,
) {
    // The missing ancestors, deepest first, and the deepest one that exists.
    let mut missing: Vec<&str> = Vec::new();
    let mut cur = path;
    let existing = loop {
        let Some((parent, _)) = cur.rsplit_once('/') else {
            break created_by_pkg(epoch);
        };
        if let Some(node) = tree.get(parent) {
            break node.meta.clone();
        }
        if let Some(meta) = made.get(parent) {
            break meta.clone();
        }
        missing.push(parent);
        cur = parent;
    };
    let copy = Meta {
        mtime: epoch,
        ..existing
    };
    for (i, dir) in missing.iter().enumerate() {
        let mut meta = copy.clone();
        if i == 0 && phase != Phase::Dir {
            meta.mode = PARENT_MODE;
        }
        made.insert((*dir).to_owned(), meta);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta(mode: u32, uid: u32, name: &str) -> Meta {
        Meta {
            mode,
            uid,
            gid: uid,
            uname: name.into(),
            gname: name.into(),
            mtime: 7,
        }
    }

    fn node(content: Content, meta: Meta) -> Node {
        Node {
            content,
            meta,
            owner: Some(0),
        }
    }

    fn modes(tree: &Tree) -> Vec<(&str, u32, u32)> {
        tree.iter()
            .filter(|(_, n)| n.owner.is_none())
            .map(|(p, n)| (p.as_str(), n.meta.mode, n.meta.uid))
            .collect()
    }

    #[test]
    fn dirs_go_first_so_a_directory_above_a_dir_is_a_copy_even_if_a_file_needs_it() {
        // `a/b` is the parent of `a/b/f` and above the delivered dir `a/b/c/d`: pkg makes
        // it for the dir (a copy of `a`, mode 0700) before any file is installed.
        let mut tree = Tree::new();
        tree.insert("a".into(), node(Content::Dir, meta(0o1700, 5, "u")));
        tree.insert("a/b/c/d".into(), node(Content::Dir, meta(0o755, 0, "root")));
        tree.insert(
            "a/b/f".into(),
            node(Content::Bytes(vec![]), meta(0o644, 0, "r")),
        );
        tree.insert(
            "a/x/y".into(),
            node(Content::Symlink("t".into()), meta(0o777, 0, "r")),
        );
        add_missing_parents(&mut tree, &["a/k/l/legacy"], 9);
        assert_eq!(
            modes(&tree),
            [
                ("a/b", 0o1700, 5),
                ("a/b/c", 0o1700, 5),
                ("a/k", 0o1700, 5),
                ("a/k/l", 0o755, 5),
                ("a/x", 0o755, 5)
            ]
        );
        assert_eq!(tree["a/b"].meta.uname, "u");
        assert_eq!(tree["a/b"].meta.mtime, 9);
    }

    #[test]
    fn generated_files_get_root_directories_and_var_pkg_exists_before_any_package() {
        let mut tree = Tree::new();
        tree.insert(
            "var/pkg/pkg5.image".into(),
            Node {
                content: Content::Bytes(vec![]),
                meta: meta(0o644, 0, "root"),
                owner: None,
            },
        );
        // A package file under var: var exists (pkg image-create made it) as root:root.
        tree.insert(
            "var/svc/x".into(),
            node(Content::Bytes(vec![]), meta(0o644, 9, "d")),
        );
        add_missing_parents(&mut tree, &[], 1);
        let dirs: Vec<_> = modes(&tree)
            .into_iter()
            .filter(|(p, ..)| !p.contains('.'))
            .collect();
        assert_eq!(
            dirs,
            [
                ("var", 0o755, 0),
                ("var/pkg", 0o755, 0),
                ("var/svc", 0o755, 0)
            ]
        );
    }
}
