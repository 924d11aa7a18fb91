//! Dependency checks for a fully pinned package set: the checks pkg would make before
//! installing the same set, without a solver (a pinned set has nothing to choose).
//!
//! Depend actions are first filtered with the image's variants and facets (so
//! `facet.version-lock.*` tags can switch incorporations off). Then, per type:
//! `require` — the target stem is in the set at a version ≥ the dependency's;
//! `require-any` — at least one of its FMRIs is satisfied that way; `optional` — if the
//! stem is in the set, its version is ≥; `incorporate` — if the stem is in the set, its
//! version matches the dependency's by pkg's prefix rule (an upper and a lower bound);
//! `exclude` — the stem is not in the set at a version ≥ the dependency's (at all, when
//! unversioned); `conditional` — when the `predicate` is satisfied, the `fmri` must be;
//! `group` and `group-any` — like `require`, reported as warnings (an image may avoid
//! group dependencies); `origin` and `parent` — not applicable to a freshly built
//! standalone image, skipped. The special stem `feature/package/dependency/self` means the
//! depending package itself. The set must also hold one version per stem, every
//! package must declare the image's variants it lists (`set name=variant.arch ...`), no
//! package may be obsolete (it delivers nothing), and a renamed package is a warning (its
//! successor should be named instead).

use std::collections::BTreeMap;
use std::fmt;

use crate::action::{Action, ActionKind};
use crate::fmri::Fmri;
use crate::manifest::Manifest;
use crate::variant::ImageFilter;

/// How serious a problem is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Severity {
    /// pkg would refuse the set.
    Error,
    /// pkg would accept the set but the image may differ from what the package intends.
    Warning,
}

/// One problem found in a pinned set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DependencyProblem {
    /// Error or warning.
    pub severity: Severity,
    /// The package whose dependency (or declaration) fails.
    pub package: String,
    /// The depend action, or what else was checked.
    pub subject: String,
    /// What is wrong.
    pub message: String,
}

impl fmt::Display for DependencyProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let level = match self.severity {
            Severity::Error => "error",
            Severity::Warning => "warning",
        };
        write!(
            f,
            "{level}: {}: {}: {}",
            self.package, self.subject, self.message
        )
    }
}

const SELF_STEM: &str = "feature/package/dependency/self";

/// Checks a pinned set of packages (FMRI with full version, and manifest) for the image
/// described by `image`. Returns every problem, errors first.
pub fn check_pinned_set(
    packages: &[(Fmri, Manifest)],
    image: &ImageFilter,
) -> Vec<DependencyProblem> {
    let mut problems = Vec::new();
    let mut by_stem: BTreeMap<&str, &Fmri> = BTreeMap::new();
    for (fmri, manifest) in packages {
        if let Some(other) = by_stem.insert(fmri.stem(), fmri)
            && other != fmri
        {
            problems.push(DependencyProblem {
                severity: Severity::Error,
                package: fmri.to_string(),
                subject: "package set".into(),
                message: format!("more than one version of {}: also {other}", fmri.stem()),
            });
        }
        if !image.package_installable(manifest) {
            let declared = manifest
                .attribute("variant.arch")
                .map(|v| v.join(" "))
                .unwrap_or_default();
            problems.push(DependencyProblem {
                severity: Severity::Error,
                package: fmri.to_string(),
                subject: format!("set name=variant.arch value={declared}"),
                message: format!(
                    "the package does not support the image's variants ({})",
                    image
                        .variants()
                        .iter()
                        .map(|(k, v)| format!("{k}={v}"))
                        .collect::<Vec<_>>()
                        .join(" ")
                ),
            });
        }
        if flag(manifest, "pkg.obsolete") {
            problems.push(DependencyProblem {
                severity: Severity::Error,
                package: fmri.to_string(),
                subject: "set name=pkg.obsolete value=true".into(),
                message: "the package is obsolete and delivers nothing; remove it from the set"
                    .into(),
            });
        }
        if flag(manifest, "pkg.renamed") {
            // pkg installs a renamed package only as a stub for its require dependencies
            // (checked below); the set should name the new package instead.
            problems.push(DependencyProblem {
                severity: Severity::Warning,
                package: fmri.to_string(),
                subject: "set name=pkg.renamed value=true".into(),
                message: "the package was renamed; name its successor in the set instead".into(),
            });
        }
    }
    for (fmri, manifest) in packages {
        for dep in manifest
            .by_kind(ActionKind::Depend)
            .filter(|a| image.allows(a))
        {
            if let Some((severity, message)) = check_one(fmri, dep, &by_stem) {
                problems.push(DependencyProblem {
                    severity,
                    package: fmri.to_string(),
                    subject: dep.to_string(),
                    message,
                });
            }
        }
    }
    problems.sort_by_key(|p| p.severity);
    problems
}

/// True when the manifest sets `name` to `true` (`pkg.obsolete`, `pkg.renamed`).
fn flag(manifest: &Manifest, name: &str) -> bool {
    manifest
        .attribute(name)
        .is_some_and(|v| v.iter().any(|s| s == "true"))
}

/// The dependency's FMRI, with the self stem replaced by the depending package.
fn target(fmri: &str, package: &Fmri) -> Option<Fmri> {
    let f = Fmri::parse(fmri).ok()?;
    if f.stem() == SELF_STEM {
        return Some(
            Fmri::new(None, package.stem(), package.version().cloned()).expect("valid stem"),
        );
    }
    Some(f)
}

/// The version in the set for the dependency's stem, if any.
fn present<'a>(dep: &Fmri, set: &BTreeMap<&str, &'a Fmri>) -> Option<&'a Fmri> {
    set.get(dep.stem()).copied()
}

/// Whether `have` satisfies a `require`-style dependency on `want`: pkg accepts any version
/// at or above the dependency's.
fn at_least(have: &Fmri, want: &Fmri) -> bool {
    match (have.version(), want.version()) {
        (_, None) => true,
        (Some(h), Some(w)) => h >= w,
        (None, Some(_)) => false,
    }
}

fn satisfied(dep: &Fmri, set: &BTreeMap<&str, &Fmri>) -> bool {
    present(dep, set).is_some_and(|have| at_least(have, dep))
}

fn check_one(
    package: &Fmri,
    dep: &Action,
    set: &BTreeMap<&str, &Fmri>,
) -> Option<(Severity, String)> {
    let kind = dep.get("type").unwrap_or_default();
    let fmris: Vec<Option<Fmri>> = dep
        .get_all("fmri")
        .iter()
        .map(|f| target(f, package))
        .collect();
    if fmris.iter().any(Option::is_none) {
        return Some((Severity::Error, "invalid fmri".into()));
    }
    let fmris: Vec<Fmri> = fmris.into_iter().flatten().collect();
    let first = fmris.first()?;
    let missing = |f: &Fmri| match present(f, set) {
        None => format!("{} is not in the set", f.stem()),
        Some(have) => format!("{have} is older than {f}"),
    };
    match kind {
        "require" => (!satisfied(first, set)).then(|| (Severity::Error, missing(first))),
        "group" => (!satisfied(first, set)).then(|| (Severity::Warning, missing(first))),
        "require-any" | "group-any" => {
            let severity = if kind == "require-any" {
                Severity::Error
            } else {
                Severity::Warning
            };
            (!fmris.iter().any(|f| satisfied(f, set))).then(|| {
                let names: Vec<String> = fmris.iter().map(|f| f.to_string()).collect();
                (
                    severity,
                    format!("none of {} is in the set", names.join(", ")),
                )
            })
        }
        "optional" => present(first, set)
            .filter(|have| !at_least(have, first))
            .map(|have| (Severity::Error, format!("{have} is older than {first}"))),
        "incorporate" => {
            let have = present(first, set)?;
            let ok = match (have.version(), first.version()) {
                (_, None) => true,
                (Some(h), Some(w)) => h.matches(w),
                (None, Some(_)) => false,
            };
            (!ok).then(|| {
                (
                    Severity::Error,
                    format!("{have} does not match the incorporated version {first}"),
                )
            })
        }
        "exclude" => {
            let have = present(first, set)?;
            at_least(have, first).then(|| (Severity::Error, format!("{have} is excluded")))
        }
        "conditional" => {
            let predicate = dep.get("predicate").and_then(|p| target(p, package))?;
            (satisfied(&predicate, set) && !satisfied(first, set)).then(|| {
                (
                    Severity::Error,
                    format!("{} is in the set, so {}", predicate.stem(), missing(first)),
                )
            })
        }
        "origin" | "parent" => None,
        other => Some((
            Severity::Error,
            format!("unknown dependency type {other:?}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pkg(fmri: &str, body: &str) -> (Fmri, Manifest) {
        let f = Fmri::parse(fmri).unwrap();
        let m = Manifest::parse(&format!("set name=pkg.fmri value={f}\n{body}")).unwrap();
        (f, m)
    }

    fn problems(set: &[(Fmri, Manifest)]) -> Vec<String> {
        check_pinned_set(set, &ImageFilter::zone("i386"))
            .iter()
            .map(|p| p.to_string())
            .collect()
    }

    #[test]
    fn require_needs_the_stem_at_or_above_the_version() {
        let base = pkg("pkg://p/lib/z@1.2.11-1:20240101T000000Z", "");
        let app = pkg(
            "pkg://p/app@1-1:20240101T000000Z",
            "depend fmri=pkg:/lib/z@1.2 type=require\n",
        );
        assert!(problems(&[base.clone(), app.clone()]).is_empty());
        let newer = pkg(
            "pkg://p/app@1-1:20240101T000000Z",
            "depend fmri=pkg:/lib/z@1.3 type=require\n",
        );
        assert_eq!(
            problems(&[base, newer.clone()]),
            [
                "error: pkg://p/app@1,5.11-1:20240101T000000Z: depend fmri=pkg:/lib/z@1.3 type=require: pkg://p/lib/z@1.2.11,5.11-1:20240101T000000Z is older than pkg:/lib/z@1.3,5.11"
            ]
        );
        assert_eq!(problems(&[newer]).len(), 1);
    }

    #[test]
    fn incorporate_is_an_upper_and_lower_bound_and_facets_can_unlock_it() {
        let z = pkg("pkg://p/lib/z@1.3.1-1:20240101T000000Z", "");
        let inc = pkg(
            "pkg://p/entire@1-1:20240101T000000Z",
            "depend fmri=lib/z@1.2 type=incorporate facet.version-lock.lib/z=true\n",
        );
        assert_eq!(problems(&[z.clone(), inc.clone()]).len(), 1);
        let unlocked = check_pinned_set(
            &[z.clone(), inc],
            &ImageFilter::zone("i386").facet("version-lock.lib/z", false),
        );
        assert!(unlocked.is_empty());
        let ok = pkg(
            "pkg://p/entire@1-1:20240101T000000Z",
            "depend fmri=lib/z@1.3 type=incorporate\n",
        );
        assert!(problems(&[z, ok]).is_empty());
        // Absent stems are fine for incorporations.
        let alone = pkg(
            "pkg://p/entire@1-1:20240101T000000Z",
            "depend fmri=lib/q@1 type=incorporate\n",
        );
        assert!(problems(&[alone]).is_empty());
    }

    #[test]
    fn other_dependency_types() {
        let a = pkg("pkg://p/a@2-1:20240101T000000Z", "");
        let dep = |body: &str| pkg("pkg://p/x@1-1:20240101T000000Z", body);
        let cases: &[(&str, usize)] = &[
            ("depend type=optional fmri=a@3\n", 1),
            ("depend type=optional fmri=b@3\n", 0),
            ("depend type=exclude fmri=a@1\n", 1),
            ("depend type=exclude fmri=a@3\n", 0),
            ("depend type=exclude fmri=a\n", 1),
            ("depend type=require-any fmri=b fmri=a@2\n", 0),
            ("depend type=require-any fmri=b fmri=c\n", 1),
            ("depend type=conditional fmri=b predicate=a\n", 1),
            ("depend type=conditional fmri=b predicate=c\n", 0),
            ("depend type=group fmri=b\n", 1),
            ("depend type=origin fmri=b@9\n", 0),
            (
                "depend type=parent fmri=feature/package/dependency/self\n",
                0,
            ),
            (
                "depend type=require fmri=feature/package/dependency/self\n",
                0,
            ),
            (
                "depend type=require fmri=b variant.opensolaris.zone=global\n",
                0,
            ),
        ];
        for (body, n) in cases {
            let got = check_pinned_set(&[a.clone(), dep(body)], &ImageFilter::zone("i386"));
            assert_eq!(got.len(), *n, "{body}: {got:?}");
        }
        let warn = check_pinned_set(
            &[dep("depend type=group fmri=b\n")],
            &ImageFilter::zone("i386"),
        );
        assert_eq!(warn[0].severity, Severity::Warning);
    }

    #[test]
    fn set_level_checks() {
        let a1 = pkg("pkg://p/a@1-1:20240101T000000Z", "");
        let a2 = pkg("pkg://p/a@2-1:20240101T000000Z", "");
        let sparc = pkg(
            "pkg://p/s@1-1:20240101T000000Z",
            "set name=variant.arch value=sparc\n",
        );
        let obsolete = pkg(
            "pkg://p/old@1-1:20240101T000000Z",
            "set name=pkg.obsolete value=true\n",
        );
        let renamed = pkg(
            "pkg://p/was@1-1:20240101T000000Z",
            "set name=pkg.renamed value=true\ndepend type=require fmri=a@1\n",
        );
        assert_eq!(
            problems(&[obsolete, renamed]),
            [
                "error: pkg://p/old@1,5.11-1:20240101T000000Z: set name=pkg.obsolete value=true: the package is obsolete and delivers nothing; remove it from the set",
                "error: pkg://p/was@1,5.11-1:20240101T000000Z: depend fmri=a@1 type=require: a is not in the set",
                "warning: pkg://p/was@1,5.11-1:20240101T000000Z: set name=pkg.renamed value=true: the package was renamed; name its successor in the set instead",
            ]
            .map(String::from)
        );
        let got = problems(&[a1, a2, sparc]);
        assert_eq!(got.len(), 2, "{got:?}");
        assert!(got[0].contains("more than one version of a"));
        assert!(got[1].contains("variants"));
    }
}
