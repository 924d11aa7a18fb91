//! The checks pkg would make before installing a pinned package set (ips.md §7): dependencies,
//! one version per stem, obsolete packages, supported architectures, and path conflicts.
//!
//! A pinned set needs no solver, but pkg would refuse the same set if any of these fail, and
//! `pkg verify` in the zone would complain later. Each problem names the package, the action,
//! and the other package involved.

use std::collections::BTreeMap;
use std::fmt;

use ips_bridge::{Action, ActionKind, DependType, Fmri, ImageFilter, Manifest, TypedAction};

/// The stem pkg uses in a dependency to mean "the depending package itself".
const SELF_STEM: &str = "feature/package/dependency/self";

/// One failed check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    /// The package whose action (or declaration) fails.
    pub package: String,
    /// The action involved, as written in the manifest (shortened).
    pub action: String,
    /// What is wrong, naming the other package when there is one.
    pub message: String,
}

impl fmt::Display for Problem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}: {}", self.package, self.action, self.message)
    }
}

/// The pinned set failed one or more checks.
#[derive(Debug, thiserror::Error)]
#[error("the package set fails {} check(s):\n  {}", problems.len(), problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
pub struct CheckError {
    /// Every problem found.
    pub problems: Vec<Problem>,
}

/// A package of the pinned set, as the checks see it.
pub(crate) struct Pinned<'a> {
    pub fmri: &'a Fmri,
    pub manifest: &'a Manifest,
}

/// `stem@version` as a dependency writes it (no publisher, no default build part).
pub(crate) fn wanted(f: &Fmri) -> String {
    match f.version() {
        Some(v) => format!("{}@{}", f.stem(), v.short()),
        None => f.stem().to_owned(),
    }
}

fn short(a: &Action) -> String {
    let s = a.to_string();
    if s.len() > 200 {
        let mut end = 200;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        format!("{}...", &s[..end])
    } else {
        s
    }
}

/// True when `set name=pkg.obsolete value=true`.
pub(crate) fn is_obsolete(m: &Manifest) -> bool {
    m.attribute("pkg.obsolete")
        .is_some_and(|v| v.iter().any(|s| s == "true"))
}

/// Checks dependencies, versions per stem, obsolete packages and architectures.
pub(crate) fn check_dependencies(set: &[Pinned<'_>], filter: &ImageFilter) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut by_stem: BTreeMap<&str, &Pinned<'_>> = BTreeMap::new();
    for p in set {
        if let Some(prev) = by_stem.insert(p.fmri.stem(), p) {
            problems.push(Problem {
                package: p.fmri.to_string(),
                action: "set name=pkg.fmri".into(),
                message: format!("{} is also in the set: one version per package", prev.fmri),
            });
        }
    }
    for p in set {
        let pkg = p.fmri.to_string();
        if is_obsolete(p.manifest) {
            problems.push(Problem {
                package: pkg.clone(),
                action: "set name=pkg.obsolete value=true".into(),
                message: "the package is obsolete and delivers nothing; remove it from the set"
                    .into(),
            });
        }
        if !filter.package_installable(p.manifest) {
            let declared = p
                .manifest
                .attribute("variant.arch")
                .map(|v| v.join(" "))
                .unwrap_or_default();
            problems.push(Problem {
                package: pkg.clone(),
                action: format!("set name=variant.arch value={declared}"),
                message: format!(
                    "the package does not support the image's variants ({})",
                    filter
                        .variants()
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            });
        }
        for a in p.manifest.by_kind(ActionKind::Depend) {
            if !filter.allows(a) {
                continue;
            }
            let fail = |message: String| Problem {
                package: pkg.clone(),
                action: short(a),
                message,
            };
            let (kind, fmris, predicate) = match a.typed() {
                Ok(TypedAction::Depend {
                    kind,
                    fmris,
                    predicate,
                }) => (kind, fmris, predicate),
                Ok(_) => continue,
                Err(e) => {
                    problems.push(fail(format!("invalid depend action: {e}")));
                    continue;
                }
            };
            // The package in the set with a dependency's stem.
            let target = |f: &Fmri| -> Option<&Fmri> {
                if f.stem() == SELF_STEM {
                    Some(p.fmri)
                } else {
                    by_stem.get(f.stem()).map(|t| t.fmri)
                }
            };
            let at_least = |f: &Fmri, t: &Fmri| match (f.version(), t.version()) {
                (Some(want), Some(have)) => have >= want,
                (Some(_), None) => false,
                (None, _) => true,
            };
            let satisfied = |f: &Fmri| target(f).is_some_and(|t| at_least(f, t));
            let describe = |f: &Fmri| match target(f) {
                Some(t) => format!("{t} in the set is older than {}", wanted(f)),
                None => format!("{} is not in the set", f.stem()),
            };
            match kind {
                DependType::Require | DependType::Group => {
                    for f in &fmris {
                        if !satisfied(f) {
                            problems.push(fail(describe(f)));
                        }
                    }
                }
                DependType::RequireAny | DependType::GroupAny => {
                    if !fmris.iter().any(satisfied) {
                        problems.push(fail(format!(
                            "none of {} is in the set at the required version",
                            fmris.iter().map(wanted).collect::<Vec<_>>().join(", ")
                        )));
                    }
                }
                DependType::Optional => {
                    for f in &fmris {
                        if let Some(t) = target(f)
                            && !at_least(f, t)
                        {
                            problems
                                .push(fail(format!("{t} in the set is older than {}", wanted(f))));
                        }
                    }
                }
                DependType::Incorporate => {
                    for f in &fmris {
                        if let (Some(t), Some(want)) = (target(f), f.version())
                            && !t.version().is_some_and(|have| have.matches(want))
                        {
                            problems.push(fail(format!(
                                "{t} in the set does not match the incorporated version {}",
                                want.short()
                            )));
                        }
                    }
                }
                DependType::Exclude => {
                    for f in &fmris {
                        if let Some(t) = target(f)
                            && at_least(f, t)
                        {
                            problems.push(fail(format!("{t} in the set is excluded")));
                        }
                    }
                }
                DependType::Conditional => {
                    if let Some(pred) = &predicate
                        && satisfied(pred)
                    {
                        for f in &fmris {
                            if !satisfied(f) {
                                problems.push(fail(format!(
                                    "{} is in the set, so {}",
                                    target(pred).map(ToString::to_string).unwrap_or_default(),
                                    describe(f)
                                )));
                            }
                        }
                    }
                }
                // origin: checked against an already installed image, which a fresh build
                // has not; parent: only for linked child images, which a standalone zone
                // image is not.
                DependType::Origin | DependType::Parent => {}
            }
        }
    }
    problems
}

/// One action of one package, after variant filtering and mediator selection.
pub(crate) struct Delivered<'a> {
    pub package: &'a Fmri,
    pub action: &'a Action,
}

/// Checks that the actions delivering each path agree as pkg requires: one file per path
/// unless an `overlay=allow` / `overlay=true` pair; directories with the same mode, owner
/// and group; one link per path unless mediated (the unchosen mediations are gone already);
/// never two kinds of object at one path.
pub(crate) fn check_paths(by_path: &BTreeMap<String, Vec<Delivered<'_>>>) -> Vec<Problem> {
    let mut problems = Vec::new();
    for (path, list) in by_path {
        if list.len() < 2 {
            continue;
        }
        let first = &list[0];
        let conflict = |other: &Delivered<'_>, message: String| Problem {
            package: other.package.to_string(),
            action: short(other.action),
            message: format!(
                "{path}: {message} (also delivered by {}: {})",
                first.package,
                short(first.action)
            ),
        };
        if let Some(other) = list.iter().find(|d| d.action.kind() != first.action.kind()) {
            problems.push(conflict(
                other,
                format!(
                    "{} and {} at one path",
                    other.action.kind(),
                    first.action.kind()
                ),
            ));
            continue;
        }
        match first.action.kind() {
            ActionKind::Dir => {
                for other in &list[1..] {
                    for attr in ["mode", "owner", "group"] {
                        let (a, b) = (first.action.get(attr), other.action.get(attr));
                        let a = a.map(|s| s.trim_start_matches('0'));
                        let b = b.map(|s| s.trim_start_matches('0'));
                        if a != b {
                            problems
                                .push(conflict(other, format!("directories disagree on {attr}")));
                        }
                    }
                }
            }
            ActionKind::File => {
                fn overlay<'a>(d: &Delivered<'a>) -> Option<&'a str> {
                    d.action.get("overlay")
                }
                let allow = list.iter().filter(|d| overlay(d) == Some("allow")).count();
                let over = list.iter().filter(|d| overlay(d) == Some("true")).count();
                if !(list.len() == 2 && allow == 1 && over == 1) {
                    problems.push(conflict(
                        &list[1],
                        "two files at one path (only an overlay=allow and overlay=true pair may share a path)"
                            .into(),
                    ));
                }
            }
            ActionKind::Link => {
                problems.push(conflict(
                    &list[1],
                    if list.iter().all(|d| d.action.get("mediator").is_some()) {
                        "two links of the chosen mediation at one path".into()
                    } else {
                        "two links at one path (links sharing a path must be mediated)".into()
                    },
                ));
            }
            _ => {
                problems.push(conflict(&list[1], "two actions at one path".into()));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(text: &str) -> Manifest {
        Manifest::parse(text).unwrap()
    }

    fn run(pkgs: &[(&str, &str)]) -> Vec<String> {
        let parsed: Vec<(Fmri, Manifest)> = pkgs
            .iter()
            .map(|(f, t)| (Fmri::parse(f).unwrap(), m(t)))
            .collect();
        let set: Vec<Pinned<'_>> = parsed
            .iter()
            .map(|(fmri, manifest)| Pinned { fmri, manifest })
            .collect();
        check_dependencies(&set, &ImageFilter::zone("i386"))
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    const A: &str = "pkg://t/a@1.0,5.11-1:20240101T000000Z";
    const B: &str = "pkg://t/b@2.0,5.11-1:20240101T000000Z";

    #[test]
    fn dependency_failures_name_both_packages_and_the_action() {
        assert!(run(&[(A, "depend type=require fmri=b@2\n"), (B, "")]).is_empty());
        assert_eq!(
            run(&[(A, "depend type=require fmri=b@3\n"), (B, "")]),
            [format!(
                "{A}: depend fmri=b@3 type=require: {B} in the set is older than b@3"
            )]
        );
        assert_eq!(
            run(&[(A, "depend type=require fmri=c\n")]),
            [format!(
                "{A}: depend fmri=c type=require: c is not in the set"
            )]
        );
        assert_eq!(
            run(&[(A, "depend type=require-any fmri=c fmri=d@1\n")]),
            [format!(
                "{A}: depend fmri=c fmri=d@1 type=require-any: none of c, d@1 is in the set at the required version"
            )]
        );
        assert!(run(&[(A, "depend type=optional fmri=c@1\n")]).is_empty());
        assert_eq!(
            run(&[(A, "depend type=optional fmri=b@2.1\n"), (B, "")]),
            [format!(
                "{A}: depend fmri=b@2.1 type=optional: {B} in the set is older than b@2.1"
            )]
        );
        assert!(run(&[(A, "depend type=incorporate fmri=b@2\n"), (B, "")]).is_empty());
        assert_eq!(
            run(&[(A, "depend type=incorporate fmri=b@1.5\n"), (B, "")]),
            [format!(
                "{A}: depend fmri=b@1.5 type=incorporate: {B} in the set does not match the incorporated version 1.5"
            )]
        );
        assert_eq!(
            run(&[(A, "depend type=exclude fmri=b@1\n"), (B, "")]),
            [format!(
                "{A}: depend fmri=b@1 type=exclude: {B} in the set is excluded"
            )]
        );
        assert!(run(&[(A, "depend type=exclude fmri=b@3\n"), (B, "")]).is_empty());
        assert_eq!(
            run(&[
                (A, "depend type=conditional fmri=c predicate=b@2\n"),
                (B, "")
            ]),
            [format!(
                "{A}: depend fmri=c predicate=b@2 type=conditional: {B} is in the set, so c is not in the set"
            )]
        );
        assert!(
            run(&[
                (A, "depend type=conditional fmri=c predicate=b@3\n"),
                (B, "")
            ])
            .is_empty()
        );
        // A dependency tagged for the global zone does not apply in a zone image.
        assert!(
            run(&[(
                A,
                "depend type=require fmri=c variant.opensolaris.zone=global\n"
            )])
            .is_empty()
        );
        // Origin and parent dependencies do not apply to a fresh standalone image.
        assert!(run(&[(A, "depend type=origin fmri=c\ndepend type=parent fmri=feature/package/dependency/self\n")]).is_empty());
    }

    #[test]
    fn set_level_checks() {
        assert_eq!(
            run(&[(A, "set name=pkg.obsolete value=true\n")]),
            [format!(
                "{A}: set name=pkg.obsolete value=true: the package is obsolete and delivers nothing; remove it from the set"
            )]
        );
        assert_eq!(
            run(&[(A, "set name=variant.arch value=sparc\n")]),
            [format!(
                "{A}: set name=variant.arch value=sparc: the package does not support the image's variants (variant.arch=i386 variant.opensolaris.zone=nonglobal)"
            )]
        );
        let a2 = "pkg://t/a@2.0,5.11-1:20240101T000000Z";
        assert_eq!(
            run(&[(A, ""), (a2, "")]),
            [format!(
                "{a2}: set name=pkg.fmri: {A} is also in the set: one version per package"
            )]
        );
    }

    fn paths(pkgs: &[(&str, &str)]) -> Vec<String> {
        let parsed: Vec<(Fmri, Manifest)> = pkgs
            .iter()
            .map(|(f, t)| (Fmri::parse(f).unwrap(), m(t)))
            .collect();
        let mut by_path: BTreeMap<String, Vec<Delivered<'_>>> = BTreeMap::new();
        for (fmri, manifest) in &parsed {
            for a in manifest.actions() {
                by_path
                    .entry(a.key().unwrap().to_owned())
                    .or_default()
                    .push(Delivered {
                        package: fmri,
                        action: a,
                    });
            }
        }
        check_paths(&by_path)
            .iter()
            .map(ToString::to_string)
            .collect()
    }

    #[test]
    fn path_conflicts_name_both_packages() {
        assert!(
            paths(&[
                (A, "dir path=usr mode=0755 owner=root group=sys\n"),
                (B, "dir path=usr mode=755 owner=root group=sys\n")
            ])
            .is_empty()
        );
        assert_eq!(
            paths(&[
                (A, "dir path=usr mode=0755 owner=root group=sys\n"),
                (B, "dir path=usr mode=0755 owner=root group=bin\n")
            ]),
            [format!(
                "{B}: dir group=bin mode=0755 owner=root path=usr: usr: directories disagree on group (also delivered by {A}: dir group=sys mode=0755 owner=root path=usr)"
            )]
        );
        assert_eq!(
            paths(&[
                (A, "file 0123 path=etc/x mode=0644 owner=root group=sys\n"),
                (B, "file 0456 path=etc/x mode=0644 owner=root group=sys\n")
            ])
            .len(),
            1
        );
        assert!(
            paths(&[
                (A, "file 0123 path=etc/x overlay=allow\n"),
                (B, "file 0456 path=etc/x overlay=true\n")
            ])
            .is_empty()
        );
        let e = paths(&[
            (A, "link path=bin/x target=y\n"),
            (B, "link path=bin/x target=z\n"),
        ]);
        assert!(
            e[0].contains("links sharing a path must be mediated"),
            "{e:?}"
        );
        let e = paths(&[
            (A, "link path=bin/x target=y\n"),
            (B, "dir path=bin/x mode=0755 owner=root group=bin\n"),
        ]);
        assert!(
            e[0].starts_with(&format!("{B}: dir")) && e[0].contains("dir and link at one path"),
            "{e:?}"
        );
    }
}
