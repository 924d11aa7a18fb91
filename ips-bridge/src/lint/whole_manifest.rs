//! The checks across a manifest's actions: `pkg.fmri` named once with a version, duplicate
//! deliveries of one path, user, group, driver, legacy package or attribute among actions
//! that can meet in one image, and parents delivered as something other than a directory.

use std::collections::BTreeMap;

use super::{LintRule, place, what};
use crate::action::{Action, ActionKind};
use crate::fmri::Fmri;
use crate::manifest::Manifest;

/// True when the two actions carry one variant with different values, so no image gets
/// both (pkg's duplicate checks only compare actions that can meet in one image).
fn variant_apart(a: &Action, b: &Action) -> bool {
    a.attrs()
        .iter()
        .filter(|(k, _)| k.starts_with("variant."))
        .any(|(k, va)| b.attrs().get(k).is_some_and(|vb| vb != va))
}

/// Attributes that may differ between actions sharing a path (pkglint.dupaction007).
fn compared(a: &Action) -> BTreeMap<&str, Vec<String>> {
    a.attrs()
        .iter()
        .filter(|(k, _)| {
            !(k.starts_with("variant.") || k.starts_with("facet.") || k.starts_with("pkg.linted"))
        })
        .map(|(k, v)| {
            let v = if k == "mode" {
                // 0755 and 755 are one mode.
                v.iter()
                    .map(|m| m.trim_start_matches('0').to_owned())
                    .collect()
            } else {
                v.clone()
            };
            (k.as_str(), v)
        })
        .collect()
}

/// pkg.fmri: exactly one action with one value, an FMRI with a version.
pub(super) fn check_pkg_fmri(
    m: &Manifest,
    add: &mut impl FnMut(Option<usize>, LintRule, Option<&str>, String),
) {
    let acts = m.actions();
    let fmris: Vec<usize> = (0..acts.len())
        .filter(|&i| acts[i].kind() == ActionKind::Set && acts[i].get("name") == Some("pkg.fmri"))
        .collect();
    match fmris.first() {
        None => add(
            None,
            LintRule::PkgFmriMissing,
            Some("pkg.fmri"),
            "no set name=pkg.fmri action: the manifest must name its package and version".into(),
        ),
        Some(&first) => {
            for &i in &fmris[1..] {
                add(
                    m.line(i),
                    LintRule::PkgFmriRepeated,
                    Some("name"),
                    format!(
                        "pkg.fmri is set again (first on {}): a manifest names one package",
                        place(m, first)
                    ),
                );
            }
            let values = acts[first].get_all("value");
            if values.len() > 1 {
                add(
                    m.line(first),
                    LintRule::PkgFmriRepeated,
                    Some("value"),
                    "pkg.fmri has more than one value".into(),
                );
            }
            if let Some(v) = values.first() {
                match Fmri::parse(v) {
                    Err(e) => add(
                        m.line(first),
                        LintRule::PkgFmriInvalid,
                        Some("value"),
                        format!("invalid pkg.fmri {v:?}: {e}"),
                    ),
                    Ok(f) if f.version().is_none() => add(
                        m.line(first),
                        LintRule::PkgFmriInvalid,
                        Some("value"),
                        format!("pkg.fmri {v:?} has no version (such as @1.0-1)"),
                    ),
                    Ok(_) => {}
                }
            }
        }
    }
}

/// Duplicates among actions that can meet in one image: each reported on the later one.
pub(super) fn check_duplicates(
    m: &Manifest,
    add: &mut impl FnMut(Option<usize>, LintRule, Option<&str>, String),
) {
    let acts = m.actions();
    let mut by_key: BTreeMap<(&str, &str), Vec<usize>> = BTreeMap::new();
    for (i, a) in acts.iter().enumerate() {
        let group = match a.kind() {
            ActionKind::Dir | ActionKind::File | ActionKind::Link | ActionKind::Hardlink => "path",
            ActionKind::Set if a.get("name") == Some("pkg.fmri") => continue,
            k => k.name(),
        };
        if let Some(key) = a.key() {
            by_key.entry((group, key)).or_default().push(i);
        }
        for (kind, attr) in [(ActionKind::User, "uid"), (ActionKind::Group, "gid")] {
            if a.kind() == kind
                && let Some(id) = a.get(attr)
            {
                by_key.entry((attr, id)).or_default().push(i);
            }
        }
    }
    for ((group, key), idx) in &by_key {
        for (n, &j) in idx.iter().enumerate() {
            for &i in &idx[..n] {
                let (a, b) = (&acts[i], &acts[j]);
                if variant_apart(a, b) {
                    continue;
                }
                let first = place(m, i);
                let dup = |rule: LintRule, attr: &str, what: &str| {
                    (
                        rule,
                        attr.to_owned(),
                        format!("{what} {key:?} is already delivered on {first}"),
                    )
                };
                let found = match *group {
                    "path" => path_conflict(a, b, key, &first),
                    "user" => Some(dup(LintRule::DupUser, "username", "user")),
                    "uid" => Some(dup(LintRule::DupUid, "uid", "uid")),
                    "group" => Some(dup(LintRule::DupGroup, "groupname", "group")),
                    "gid" => Some(dup(LintRule::DupGid, "gid", "gid")),
                    "driver" => Some(dup(LintRule::DupDriver, "name", "driver")),
                    "legacy" => Some(dup(LintRule::DupLegacy, "pkg", "legacy package")),
                    "set" => Some(dup(LintRule::DupSet, "name", "attribute")),
                    _ => None,
                };
                if let Some((rule, attr, message)) = found {
                    add(m.line(j), rule, Some(&attr), message);
                    // One report per later action and rule is enough.
                    break;
                }
            }
        }
    }
}

/// A path's parents must be directories wherever the manifest delivers them.
pub(super) fn check_parents(
    m: &Manifest,
    add: &mut impl FnMut(Option<usize>, LintRule, Option<&str>, String),
) {
    let acts = m.actions();
    let mut by_path: BTreeMap<&str, Vec<usize>> = BTreeMap::new();
    for (i, a) in acts.iter().enumerate() {
        if matches!(
            a.kind(),
            ActionKind::Dir | ActionKind::File | ActionKind::Link | ActionKind::Hardlink
        ) && let Some(p) = a.get("path")
        {
            by_path.entry(p).or_default().push(i);
        }
    }
    for (i, a) in acts.iter().enumerate() {
        if !matches!(
            a.kind(),
            ActionKind::Dir | ActionKind::File | ActionKind::Link | ActionKind::Hardlink
        ) {
            continue;
        }
        let Some(path) = a.get("path") else {
            continue;
        };
        let mut parent = path;
        while let Some((up, _)) = parent.rsplit_once('/') {
            parent = up;
            let blocking = by_path.get(up).and_then(|v| {
                v.iter()
                    .copied()
                    .find(|&k| acts[k].kind() != ActionKind::Dir && !variant_apart(a, &acts[k]))
            });
            if let Some(k) = blocking {
                add(
                    m.line(i),
                    LintRule::ParentNotDir,
                    Some("path"),
                    format!(
                        "parent {up} is delivered as a {} on {}, not a directory ({})",
                        acts[k].kind(),
                        place(m, k),
                        what(a)
                    ),
                );
                break;
            }
        }
    }
}

/// The conflict between two actions at one path, if any (pkglint.dupaction001, 007, 008).
fn path_conflict(
    a: &Action,
    b: &Action,
    path: &str,
    first: &str,
) -> Option<(LintRule, String, String)> {
    let link = |x: &Action| matches!(x.kind(), ActionKind::Link | ActionKind::Hardlink);
    let mediated = |x: &Action| link(x) && x.get("mediator").is_some();
    if a.kind() != b.kind() {
        if mediated(a) && mediated(b) {
            return None;
        }
        return Some((
            LintRule::PathTypes,
            "path".into(),
            format!(
                "path {path} is delivered as a {} here and as a {} on {first}",
                b.kind(),
                a.kind()
            ),
        ));
    }
    match b.kind() {
        ActionKind::File => {
            let overlays = [a.get("overlay"), b.get("overlay")];
            let pair = overlays.contains(&Some("allow")) && overlays.contains(&Some("true"));
            (!pair).then(|| {
                (
                    LintRule::DupFile,
                    "path".into(),
                    format!(
                        "file {path} is already delivered on {first} (only an overlay=allow and an overlay=true file may share a path)"
                    ),
                )
            })
        }
        _ if mediated(a) && mediated(b) => None,
        _ => {
            let (ca, cb) = (compared(a), compared(b));
            if ca == cb {
                return None;
            }
            let attr = ca
                .keys()
                .chain(cb.keys())
                .find(|k| ca.get(*k) != cb.get(*k))
                .map_or("path", |k| k);
            Some((
                LintRule::PathAttrs,
                attr.to_owned(),
                format!(
                    "{} {path} is also delivered on {first} with a different {attr}",
                    b.kind()
                ),
            ))
        }
    }
}
