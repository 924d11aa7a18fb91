//! Conflicting actions in a package set: what pkg refuses when several packages deliver
//! the same path (after variant and facet filtering, and after choosing mediated links).
//!
//! `dir`, `file`, `link` and `hardlink` share one path namespace. At one path: all actions
//! must be of one type; directories must agree on `mode`, `owner` and `group`; two or more
//! files are allowed only as one `overlay=allow` file plus one `overlay=true` file; links
//! (symbolic or hard) must all be mediated, and after mediation at most one may remain.
//! A path used as a directory (explicitly, or as the parent of another action's path) must
//! not be delivered as anything else.

use std::collections::BTreeMap;

use crate::action::{Action, ActionKind};
use crate::depend::{DependencyProblem, Severity};
use crate::fmri::Fmri;
use crate::manifest::Manifest;
use crate::mediator::{choose_mediations, is_selected};
use crate::variant::ImageFilter;

/// Finds conflicting actions among `packages` for the image described by `image`.
pub fn check_conflicts(
    packages: &[(Fmri, Manifest)],
    image: &ImageFilter,
) -> Vec<DependencyProblem> {
    let kept: Vec<(&Fmri, &Action)> = packages
        .iter()
        .flat_map(|(f, m)| m.actions().iter().map(move |a| (f, a)))
        .filter(|(_, a)| image.allows(a))
        .filter(|(_, a)| {
            matches!(
                a.kind(),
                ActionKind::Dir | ActionKind::File | ActionKind::Link | ActionKind::Hardlink
            )
        })
        .collect();
    let chosen = choose_mediations(kept.iter().map(|(_, a)| *a));
    let mut by_path: BTreeMap<&str, Vec<(&Fmri, &Action)>> = BTreeMap::new();
    for (f, a) in &kept {
        if let Some(p) = a.get("path") {
            by_path.entry(p).or_default().push((f, a));
        }
    }
    let mut problems = Vec::new();
    // Each problem names every package involved and the action each delivers.
    let mut report = |path: &str, who: &[(&Fmri, &Action)], message: String| {
        let mut names: Vec<String> = who.iter().map(|(f, _)| f.to_string()).collect();
        names.dedup();
        let actions: Vec<String> = who
            .iter()
            .map(|(f, a)| format!("{f} delivers `{}`", short(a)))
            .collect();
        problems.push(DependencyProblem {
            severity: Severity::Error,
            package: names.join(", "),
            subject: format!("path {path}"),
            message: format!("{message}; {}", actions.join("; ")),
        });
    };
    for (path, actions) in &by_path {
        let kind = actions[0].1.kind();
        if actions.iter().any(|(_, a)| a.kind() != kind) {
            let kinds: Vec<&str> = actions.iter().map(|(_, a)| a.kind().name()).collect();
            report(
                path,
                actions,
                format!("delivered as different types: {}", kinds.join(", ")),
            );
            continue;
        }
        if actions.len() < 2 {
            continue;
        }
        match kind {
            ActionKind::Dir => {
                // Modes compare as numbers: `0755` and `755` are the same mode.
                let value = |a: &Action, attr: &str| {
                    a.get(attr).map(|v| {
                        if attr == "mode" {
                            v.trim_start_matches('0').to_owned()
                        } else {
                            v.to_owned()
                        }
                    })
                };
                for attr in ["mode", "owner", "group"] {
                    let first = value(actions[0].1, attr);
                    if actions.iter().any(|(_, a)| value(a, attr) != first) {
                        report(path, actions, format!("directories disagree on {attr}"));
                    }
                }
            }
            ActionKind::File => {
                let overlay = |v: &str| {
                    actions
                        .iter()
                        .filter(|(_, a)| a.get("overlay") == Some(v))
                        .count()
                };
                if !(actions.len() == 2 && overlay("allow") == 1 && overlay("true") == 1) {
                    report(
                        path,
                        actions,
                        "delivered by more than one file action (only an overlay=allow and an overlay=true file may share a path)".into(),
                    );
                }
            }
            _ => {
                if actions.iter().any(|(_, a)| a.get("mediator").is_none()) {
                    report(
                        path,
                        actions,
                        "links delivered more than once must be mediated".into(),
                    );
                } else if actions
                    .iter()
                    .filter(|(_, a)| is_selected(a, &chosen))
                    .count()
                    > 1
                {
                    report(
                        path,
                        actions,
                        "more than one link remains after mediation".into(),
                    );
                }
            }
        }
    }
    // Paths used as directories must be directories.
    let mut implicit: BTreeMap<&str, &Fmri> = BTreeMap::new();
    for (f, a) in &kept {
        if let Some(p) = a.get("path") {
            let mut at = p;
            while let Some((parent, _)) = at.rsplit_once('/') {
                implicit.entry(parent).or_insert(f);
                at = parent;
            }
        }
    }
    for (dir, user) in implicit {
        if let Some(actions) = by_path.get(dir)
            && let Some((f, a)) = actions.iter().find(|(_, a)| a.kind() != ActionKind::Dir)
        {
            problems.push(DependencyProblem {
                severity: Severity::Error,
                package: f.to_string(),
                subject: format!("path {dir}"),
                message: format!(
                    "delivered as a {} (`{}`) but {user} needs it to be a directory",
                    a.kind(),
                    short(a)
                ),
            });
        }
    }
    problems
}

/// An action as a message shows it: its type and the attributes that decide a conflict
/// (payload hashes and package metadata left out, so the message stays readable).
fn short(a: &Action) -> String {
    const SHOWN: [&str; 9] = [
        "path",
        "target",
        "mode",
        "owner",
        "group",
        "overlay",
        "mediator",
        "mediator-version",
        "mediator-implementation",
    ];
    let mut s = a.kind().name().to_owned();
    for key in SHOWN {
        if let Some(v) = a.get(key) {
            s.push_str(&format!(" {key}={v}"));
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(name: &str, body: &str) -> (Fmri, Manifest) {
        let f = Fmri::parse(&format!("pkg://p/{name}@1-1:20240101T000000Z")).unwrap();
        (f, Manifest::parse(body).unwrap())
    }

    fn count(set: &[(Fmri, Manifest)]) -> usize {
        check_conflicts(set, &ImageFilter::zone("i386")).len()
    }

    #[test]
    fn directories_must_agree() {
        let a = pkg("a", "dir path=usr mode=0755 owner=root group=sys\n");
        let b = pkg("b", "dir path=usr mode=0755 owner=root group=sys\n");
        let c = pkg("c", "dir path=usr mode=0755 owner=root group=bin\n");
        assert_eq!(count(&[a.clone(), b]), 0);
        let octal = pkg("o", "dir path=usr mode=755 owner=root group=sys\n");
        assert_eq!(count(&[a.clone(), octal]), 0, "0755 and 755 are one mode");
        let got = check_conflicts(&[a, c], &ImageFilter::zone("i386"));
        assert_eq!(got.len(), 1);
        assert_eq!(
            got[0].to_string(),
            "error: pkg://p/a@1,5.11-1:20240101T000000Z, pkg://p/c@1,5.11-1:20240101T000000Z: path usr: directories disagree on group; pkg://p/a@1,5.11-1:20240101T000000Z delivers `dir path=usr mode=0755 owner=root group=sys`; pkg://p/c@1,5.11-1:20240101T000000Z delivers `dir path=usr mode=0755 owner=root group=bin`"
        );
        assert!(
            got[0]
                .to_string()
                .contains("path usr: directories disagree on group"),
            "{}",
            got[0]
        );
    }

    #[test]
    fn files_need_an_overlay_pair() {
        let base = pkg("a", "file h path=etc/x overlay=allow\n");
        let over = pkg("b", "file h path=etc/x overlay=true\n");
        let plain = pkg("c", "file h path=etc/x\n");
        assert_eq!(count(&[base.clone(), over.clone()]), 0);
        assert_eq!(count(&[base, plain.clone()]), 1);
        assert_eq!(count(&[over, plain]), 1);
        // Variant filtering happens first.
        let g = pkg("g", "file h path=etc/y variant.opensolaris.zone=global\n");
        let ng = pkg(
            "n",
            "file h path=etc/y variant.opensolaris.zone=nonglobal\n",
        );
        assert_eq!(count(&[g, ng]), 0);
    }

    #[test]
    fn links_must_be_mediated_and_types_must_match() {
        let a = pkg(
            "a",
            "link path=usr/bin/vi target=nvi mediator=vi mediator-implementation=nvi\n",
        );
        let b = pkg(
            "b",
            "link path=usr/bin/vi target=vim mediator=vi mediator-implementation=vim\n",
        );
        let c = pkg("c", "link path=usr/bin/vi target=elvis\n");
        assert_eq!(count(&[a.clone(), b]), 0);
        assert_eq!(count(&[a.clone(), c]), 1);
        let f = pkg("f", "file h path=usr/bin/vi\n");
        let got = check_conflicts(&[a, f], &ImageFilter::zone("i386"));
        assert!(
            got[0].message.contains("different types: link, file"),
            "{:?}",
            got
        );
    }

    #[test]
    fn paths_used_as_directories() {
        let link = pkg("a", "link path=bin target=./usr/bin\n");
        let file = pkg("b", "file h path=bin/ls\n");
        let got = check_conflicts(&[link, file], &ImageFilter::zone("i386"));
        assert_eq!(got.len(), 1);
        assert!(got[0].message.contains("needs it to be a directory"));
        let ok = pkg(
            "c",
            "dir path=usr mode=0755 owner=root group=sys\nfile h path=usr/ls\n",
        );
        assert_eq!(count(&[ok]), 0);
    }
}
