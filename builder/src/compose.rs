//! The image's file tree, composed from the pinned packages' actions as pkg would install them
//! into a fresh image, before any byte is written.
//!
//! Actions are filtered by the image's variants and facets, mediated links reduced to the
//! chosen mediation (path conflicts were refused before, by [`crate::checks`]). `group` and
//! `user` actions are applied to the `etc/passwd`, `etc/shadow`, `etc/group` (and
//! `etc/ftpd/ftpusers`) the packages deliver, and every owner and group name is resolved to a
//! numeric id through that composed database. Files with `preserve=legacy` or
//! `preserve=abandon` are not installed on a fresh install, as in pkg; `driver` actions are
//! no-ops in a zone (pkg runs `add_drv` only in global zones). `legacy` actions write
//! `var/sadm/pkg/<pkg>/pkginfo`, and the `var/pkg` metadata comes from
//! [`ips_bridge::ImageMetadata`]. Parent directories nobody delivers are added as pkg's
//! install makes them ([`parents`]).

mod parents;

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::Path;
use std::time::{Duration, UNIX_EPOCH};

use ips_bridge::{
    Action, ActionKind, Fmri, ImageFilter, ImageMetadata, Manifest, Preserve, TypedAction, UserDb,
    catalog_time, choose_mediations, is_selected, legacy_pkginfo, resolve_hardlink,
};

use crate::BuildError;
use crate::source::Source;
use crate::tarball::Meta;

/// Largest account file (`etc/passwd` and friends) read into memory to merge accounts.
const MAX_ACCOUNT_FILE: u64 = 16 << 20;

/// A package of the build: its pinned FMRI, its manifest and where its payloads come from.
pub(crate) struct Package<'s> {
    pub fmri: Fmri,
    pub manifest_bytes: Vec<u8>,
    pub manifest: Manifest,
    pub source: &'s Source,
}

/// What an entry of the tree holds.
#[derive(Debug, Clone)]
pub(crate) enum Content {
    Dir,
    /// A file whose content is the payload of `action` of package `pkg`.
    Payload {
        pkg: usize,
        action: Action,
    },
    /// A file the build generates (accounts, `var/pkg`, `pkginfo`).
    Bytes(Vec<u8>),
    Symlink(String),
    /// A hard link to another path of the tree (root-relative).
    Hardlink(String),
}

/// One entry of the tree.
#[derive(Debug, Clone)]
pub(crate) struct Node {
    pub content: Content,
    pub meta: Meta,
    /// The package that delivers it; `None` for what the build generates.
    pub owner: Option<usize>,
}

/// The composed tree, keyed by root-relative path; a `BTreeMap` so iteration is in byte
/// order, which puts every directory before its contents.
pub(crate) type Tree = BTreeMap<String, Node>;

/// System accounts every illumos distribution defines with these ids; used only for names
/// the image's own `etc/passwd` / `etc/group` lack (pkg falls back to the host's database
/// there, which would make the image depend on the build machine).
const SYSTEM_USERS: &[(&str, u32)] = &[
    ("root", 0),
    ("daemon", 1),
    ("bin", 2),
    ("sys", 3),
    ("adm", 4),
    ("uucp", 5),
    ("nuucp", 9),
    ("lp", 71),
    ("nobody", 60001),
    ("noaccess", 60002),
];
const SYSTEM_GROUPS: &[(&str, u32)] = &[
    ("root", 0),
    ("other", 1),
    ("bin", 2),
    ("sys", 3),
    ("adm", 4),
    ("uucp", 5),
    ("mail", 6),
    ("tty", 7),
    ("lp", 8),
    ("nuucp", 9),
    ("staff", 10),
    ("daemon", 12),
    ("nobody", 60001),
    ("noaccess", 60002),
];

/// `YYYYMMDDTHHMMSSZ` as seconds since the epoch.
pub(crate) fn parse_timestamp(t: &str) -> Option<u64> {
    let b = t.as_bytes();
    if b.len() != 16 || b[8] != b'T' || b[15] != b'Z' {
        return None;
    }
    let num = |r: std::ops::Range<usize>| t.get(r)?.parse::<i64>().ok();
    let (y, mo, d) = (num(0..4)?, num(4..6)?, num(6..8)?);
    let (h, mi, s) = (num(9..11)?, num(11..13)?, num(13..15)?);
    u64::try_from(validator::unix_from_civil(y, mo, d, h, mi, s)).ok()
}

struct Accounts {
    db: UserDb,
}

impl Accounts {
    fn uid(&self, name: &str) -> Option<u32> {
        self.db.uid(name).or_else(|| {
            SYSTEM_USERS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, id)| *id)
        })
    }
    fn gid(&self, name: &str) -> Option<u32> {
        self.db.gid(name).or_else(|| {
            SYSTEM_GROUPS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|(_, id)| *id)
        })
    }
}

fn fetch_small(pkg: &Package<'_>, action: &Action) -> Result<Vec<u8>, BuildError> {
    let mut buf = Vec::new();
    let mut limited = LimitWriter {
        inner: &mut buf,
        left: MAX_ACCOUNT_FILE,
    };
    pkg.source
        .payload(&pkg.fmri, action, &mut limited)
        .map_err(|source| BuildError::Payload {
            package: pkg.fmri.to_string(),
            path: action.key().unwrap_or_default().to_owned(),
            source,
        })?;
    Ok(buf)
}

/// A writer that fails once more than `left` bytes were written.
pub(crate) struct LimitWriter<W> {
    pub inner: W,
    pub left: u64,
}

impl<W: std::io::Write> std::io::Write for LimitWriter<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if buf.len() as u64 > self.left {
            return Err(std::io::Error::other("more content than its size says"));
        }
        let n = self.inner.write(buf)?;
        self.left -= n as u64;
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

const ACCOUNT_FILES: [(&str, u32); 4] = [
    ("etc/passwd", 0o644),
    ("etc/shadow", 0o400),
    ("etc/group", 0o644),
    ("etc/ftpd/ftpusers", 0o644),
];

/// Composes the tree. `epoch` is the mtime of everything without a `timestamp`.
pub(crate) fn compose(
    packages: &[Package<'_>],
    filter: &ImageFilter,
    epoch: u64,
    staging: &Path,
) -> Result<Tree, BuildError> {
    // Every action that applies to this image, with its package.
    let applicable: Vec<(usize, &Action)> = packages
        .iter()
        .enumerate()
        .flat_map(|(i, p)| p.manifest.actions().iter().map(move |a| (i, a)))
        .filter(|(_, a)| filter.allows(a))
        .collect();
    let winners = winners_by_path(&applicable);
    let account_actions: Vec<&Action> = applicable
        .iter()
        .map(|(_, a)| *a)
        .filter(|a| matches!(a.kind(), ActionKind::User | ActionKind::Group))
        .collect();
    let accounts = load_accounts(packages, &winners, &account_actions, epoch)?;

    let nodes = NodeMaker {
        packages,
        accounts: &accounts,
        epoch,
    };
    let mut tree: Tree = BTreeMap::new();
    // Files installed as nothing (preserve=legacy|abandon): pkg still makes their parents.
    let mut unplaced: Vec<&str> = Vec::new();
    for (path, &(i, a)) in &winners {
        match nodes.node(path, i, a)? {
            Some(node) => {
                tree.insert(path.clone(), node);
            }
            None => unplaced.push(path),
        }
    }
    // Account files now hold the merged database; they belong to the generated layer.
    if !account_actions.is_empty() {
        add_account_files(&mut tree, &accounts, epoch);
    }
    add_legacy_pkginfo(&mut tree, &applicable, packages, filter, epoch);
    add_var_pkg(&mut tree, packages, filter, epoch, staging)?;
    parents::add_missing_parents(&mut tree, &unplaced, epoch);
    canonicalize_hardlinks(&mut tree, packages)?;
    Ok(tree)
}

/// The action delivered at each path (dir, file, link, hardlink) among the chosen
/// mediations: the first, except that an overlaying file (overlay=true) replaces the file it
/// overlays.
fn winners_by_path<'a>(
    applicable: &[(usize, &'a Action)],
) -> BTreeMap<String, (usize, &'a Action)> {
    let chosen = choose_mediations(applicable.iter().map(|(_, a)| *a));
    let mut winners: BTreeMap<String, (usize, &Action)> = BTreeMap::new();
    for &(i, a) in applicable {
        let k = a.kind();
        if !matches!(
            k,
            ActionKind::Dir | ActionKind::File | ActionKind::Link | ActionKind::Hardlink
        ) || !is_selected(a, &chosen)
        {
            continue;
        }
        let Some(path) = a.key() else { continue };
        let path = path.trim_matches('/').to_owned();
        match winners.get(&path) {
            Some(_) if a.get("overlay") != Some("true") => {}
            _ => {
                winners.insert(path, (i, a));
            }
        }
    }
    winners
}

/// Accounts: the delivered account files, then the group and user actions applied to them.
fn load_accounts(
    packages: &[Package<'_>],
    winners: &BTreeMap<String, (usize, &Action)>,
    account_actions: &[&Action],
    epoch: u64,
) -> Result<Accounts, BuildError> {
    let mut texts: Vec<String> = Vec::new();
    for (path, _) in ACCOUNT_FILES {
        let text = match winners.get(path) {
            Some(&(i, a)) if a.kind() == ActionKind::File => {
                let bytes = fetch_small(&packages[i], a)?;
                String::from_utf8(bytes).map_err(|_| BuildError::Accounts {
                    message: format!("{path} delivered by {} is not UTF-8", packages[i].fmri),
                })?
            }
            _ => String::new(),
        };
        texts.push(text);
    }
    let mut db = UserDb::parse(&texts[0], &texts[1], &texts[2], &texts[3]);
    db.set_lastchg(epoch / 86_400);
    db.apply(account_actions.iter().copied())
        .map_err(|e| BuildError::Accounts {
            message: e.to_string(),
        })?;
    Ok(Accounts { db })
}

/// Owned by root:root, dated `epoch`.
fn root_meta(mode: u32, epoch: u64) -> Meta {
    Meta {
        mode,
        uid: 0,
        gid: 0,
        uname: "root".into(),
        gname: "root".into(),
        mtime: epoch,
    }
}

/// Turns the winning actions into tree nodes, with owners resolved in the image's accounts.
struct NodeMaker<'p, 'a> {
    packages: &'p [Package<'a>],
    accounts: &'p Accounts,
    epoch: u64,
}

impl NodeMaker<'_, '_> {
    /// The metadata of an entry owned by `owner:group`, both resolved in the image's
    /// accounts.
    fn ids(&self, pkg: usize, a: &Action, owner: &str, group: &str) -> Result<Meta, BuildError> {
        let unresolved = |what: &str, name: &str| BuildError::Owner {
            package: self.packages[pkg].fmri.to_string(),
            action: a.to_string(),
            message: format!(
                "{what} {name:?} is not in the image's etc/{what_file}",
                what_file = if what == "owner" { "passwd" } else { "group" }
            ),
        };
        Ok(Meta {
            mode: 0,
            uid: self
                .accounts
                .uid(owner)
                .ok_or_else(|| unresolved("owner", owner))?,
            gid: self
                .accounts
                .gid(group)
                .ok_or_else(|| unresolved("group", group))?,
            uname: owner.to_owned(),
            gname: group.to_owned(),
            mtime: self.epoch,
        })
    }

    /// The node of the action delivered at `path`, or None when it puts nothing there
    /// (`preserve=legacy|abandon` files).
    fn node(&self, path: &str, i: usize, a: &Action) -> Result<Option<Node>, BuildError> {
        let typed = a.typed().map_err(|message| BuildError::Owner {
            package: self.packages[i].fmri.to_string(),
            action: a.to_string(),
            message,
        })?;
        let node = match typed {
            TypedAction::Dir { own, .. } => {
                let mut meta = self.ids(
                    i,
                    a,
                    own.owner.unwrap_or("root"),
                    own.group.unwrap_or("root"),
                )?;
                meta.mode = own.mode.unwrap_or(0o755);
                Node {
                    content: Content::Dir,
                    meta,
                    owner: Some(i),
                }
            }
            TypedAction::File {
                own,
                preserve,
                timestamp,
                ..
            } => {
                if matches!(preserve, Some(Preserve::Legacy | Preserve::Abandon)) {
                    return Ok(None);
                }
                let mut meta = self.ids(
                    i,
                    a,
                    own.owner.unwrap_or("root"),
                    own.group.unwrap_or("root"),
                )?;
                meta.mode = own.mode.unwrap_or(0o644);
                if let Some(t) = timestamp.and_then(parse_timestamp) {
                    meta.mtime = t;
                }
                Node {
                    content: Content::Payload {
                        pkg: i,
                        action: a.clone(),
                    },
                    meta,
                    owner: Some(i),
                }
            }
            TypedAction::Link { target, .. } => Node {
                content: Content::Symlink(target.to_owned()),
                meta: root_meta(0o777, self.epoch),
                owner: Some(i),
            },
            TypedAction::Hardlink { target, .. } => {
                let resolved = resolve_hardlink(path, target).ok_or_else(|| BuildError::Owner {
                    package: self.packages[i].fmri.to_string(),
                    action: a.to_string(),
                    message: "hardlink target climbs above the image root".into(),
                })?;
                Node {
                    content: Content::Hardlink(resolved),
                    meta: root_meta(0, self.epoch),
                    owner: Some(i),
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(node))
    }
}

/// The merged account database written over the delivered account files (keeping their
/// metadata), or as new files owned by root:sys.
fn add_account_files(tree: &mut Tree, accounts: &Accounts, epoch: u64) {
    let new = [
        accounts.db.passwd(),
        accounts.db.shadow(),
        accounts.db.group(),
        accounts.db.ftpusers(),
    ];
    for ((path, mode), text) in ACCOUNT_FILES.iter().zip(new) {
        let meta = match tree.get(*path) {
            Some(n) => n.meta.clone(),
            None if *path == "etc/ftpd/ftpusers" && text.is_empty() => continue,
            None => Meta {
                mode: *mode,
                uid: accounts.uid("root").unwrap_or(0),
                gid: accounts.gid("sys").unwrap_or(3),
                uname: "root".into(),
                gname: "sys".into(),
                mtime: epoch,
            },
        };
        tree.insert(
            (*path).to_owned(),
            Node {
                content: Content::Bytes(text.into_bytes()),
                meta,
                owner: None,
            },
        );
    }
}

/// `legacy` actions: SVR4 `var/sadm/pkg/NAME/pkginfo` files.
fn add_legacy_pkginfo(
    tree: &mut Tree,
    applicable: &[(usize, &Action)],
    packages: &[Package<'_>],
    filter: &ImageFilter,
    epoch: u64,
) {
    let arch = filter
        .variants()
        .get("variant.arch")
        .cloned()
        .unwrap_or_default();
    let when = UNIX_EPOCH + Duration::from_secs(epoch);
    for &(i, a) in applicable {
        if a.kind() != ActionKind::Legacy {
            continue;
        }
        let p = &packages[i];
        let summary = p
            .manifest
            .attribute("pkg.summary")
            .and_then(|v| v.first().cloned())
            .unwrap_or_default();
        if let (Some(text), Some(name)) =
            (legacy_pkginfo(a, &p.fmri, &summary, &arch, when), a.key())
        {
            tree.insert(
                format!("var/sadm/pkg/{name}/pkginfo"),
                Node {
                    content: Content::Bytes(text.into_bytes()),
                    meta: root_meta(0o644, epoch),
                    owner: None,
                },
            );
        }
    }
}

/// Writes `var/pkg` with [`ImageMetadata`] into `staging`, then adds its files to the tree
/// with fixed ownership and modes (the staging copy's modes depend on the umask).
fn add_var_pkg(
    tree: &mut Tree,
    packages: &[Package<'_>],
    filter: &ImageFilter,
    epoch: u64,
    staging: &Path,
) -> Result<(), BuildError> {
    let install_time = catalog_time(UNIX_EPOCH + Duration::from_secs(epoch));
    let mut meta = ImageMetadata::new(filter.clone(), &install_time);
    let mut pubs: BTreeSet<&str> = BTreeSet::new();
    for p in packages {
        if let Some(name) = p.fmri.publisher() {
            pubs.insert(name);
        }
    }
    for name in pubs {
        // Depot URLs are kept so `pkg` in the zone can reach the publisher; a file
        // repository's path is a path on the build machine, meaningless in the zone, and
        // recording it would make the image depend on where it was built.
        let origin = packages
            .iter()
            .find(|p| p.fmri.publisher() == Some(name))
            .map(|p| p.source.origin_string())
            .filter(|o| o.starts_with("http://") || o.starts_with("https://"));
        let origins: Vec<&str> = origin.as_deref().into_iter().collect();
        meta = meta.publisher(name, &origins);
    }
    for p in packages {
        meta = meta.package(p.fmri.clone(), p.manifest_bytes.clone());
    }
    let parsed: Vec<&ips_bridge::Manifest> = packages.iter().map(|p| &p.manifest).collect();
    meta.write_parsed(staging, &parsed, |fmri, action, out| {
        let p = packages
            .iter()
            .find(|p| &p.fmri == fmri)
            .expect("metadata only names our packages");
        p.source.payload(fmri, action, out).map(|_| ())
    })
    .map_err(|source| BuildError::Metadata { source })?;

    let root = staging.join("var/pkg");
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        let rd = std::fs::read_dir(&dir).map_err(|source| BuildError::Io {
            path: dir.clone(),
            source,
        })?;
        for e in rd {
            let e = e.map_err(|source| BuildError::Io {
                path: dir.clone(),
                source,
            })?;
            let path = e.path();
            let rel = path
                .strip_prefix(staging)
                .expect("under staging")
                .to_string_lossy()
                .into_owned();
            let ft = e.file_type().map_err(|source| BuildError::Io {
                path: path.clone(),
                source,
            })?;
            let base = parents::created_by_pkg(epoch);
            if ft.is_dir() {
                stack.push(path);
                tree.entry(rel).or_insert(Node {
                    content: Content::Dir,
                    meta: base,
                    owner: None,
                });
            } else {
                let mut bytes = Vec::new();
                std::fs::File::open(&path)
                    .and_then(|f| {
                        f.take(crate::compose::MAX_ACCOUNT_FILE * 16)
                            .read_to_end(&mut bytes)
                    })
                    .map_err(|source| BuildError::Io {
                        path: path.clone(),
                        source,
                    })?;
                // pkg installs license texts read-only.
                let mode = if rel.starts_with("var/pkg/license/") {
                    0o444
                } else {
                    0o644
                };
                tree.insert(
                    rel,
                    Node {
                        content: Content::Bytes(bytes),
                        meta: Meta { mode, ..base },
                        owner: None,
                    },
                );
            }
        }
    }
    Ok(())
}

/// Hard links in tar must point at an earlier entry. Every group of paths sharing one file
/// (the target and its links) is rewritten so the first path in sort order holds the content
/// and the others link to it; they are the same inode either way.
fn canonicalize_hardlinks(tree: &mut Tree, packages: &[Package<'_>]) -> Result<(), BuildError> {
    let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for (path, node) in tree.iter() {
        if let Content::Hardlink(target) = &node.content {
            // Follow chains of hardlinks to the file.
            let mut t = target.clone();
            let mut hops = 0;
            while let Some(Node {
                content: Content::Hardlink(next),
                ..
            }) = tree.get(&t)
            {
                t = next.clone();
                hops += 1;
                if hops > 64 {
                    break;
                }
            }
            match tree.get(&t) {
                Some(Node {
                    content: Content::Payload { .. } | Content::Bytes(_),
                    ..
                }) => groups.entry(t).or_default().push(path.clone()),
                _ => {
                    let pkg = node
                        .owner
                        .map(|i| packages[i].fmri.to_string())
                        .unwrap_or_default();
                    return Err(BuildError::Owner {
                        package: pkg,
                        action: format!("hardlink path={path} target={target}"),
                        message: format!("the target {t} is not a file in the image"),
                    });
                }
            }
        }
    }
    for (target, mut links) in groups {
        links.push(target.clone());
        links.sort();
        let first = links[0].clone();
        if first != target {
            let file = tree.get(&target).expect("grouped above").clone();
            let link_owner = tree.get(&first).and_then(|n| n.owner);
            tree.insert(
                first.clone(),
                Node {
                    owner: link_owner.or(file.owner),
                    ..file
                },
            );
        }
        for l in &links[1..] {
            let owner = tree.get(l).and_then(|n| n.owner);
            let meta = tree.get(&first).expect("inserted").meta.clone();
            tree.insert(
                l.clone(),
                Node {
                    content: Content::Hardlink(first.clone()),
                    meta,
                    owner,
                },
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timestamps() {
        assert_eq!(parse_timestamp("19700101T000000Z"), Some(0));
        assert_eq!(parse_timestamp("20240102T030405Z"), Some(1_704_164_645));
        assert_eq!(parse_timestamp("20000229T235959Z"), Some(951_868_799));
        assert_eq!(parse_timestamp("2024-01-02"), None);
    }
}
