//! The checks pkg would make before installing a pinned package set (ips.md §7), run with
//! ips-bridge's [`check_pinned_set`] (dependencies, one version per stem, variants,
//! obsolete and renamed packages) and [`check_conflicts`] (two objects at one path,
//! directories that disagree, unmediated links, paths needed as directories). Errors stop
//! the lock or the build; warnings (a missing `group` dependency, a renamed package) are
//! reported and the build goes on. Every problem names the package(s) and the action.

use ips_bridge::{
    DependencyProblem, Fmri, ImageFilter, Manifest, Severity, check_conflicts, check_pinned_set,
};

/// The pinned set failed one or more checks.
#[derive(Debug, thiserror::Error)]
#[error("the package set fails {} check(s):\n  {}", problems.len(), problems.iter().map(ToString::to_string).collect::<Vec<_>>().join("\n  "))]
pub struct CheckError {
    /// Every error found (warnings are not included).
    pub problems: Vec<DependencyProblem>,
}

/// Runs the dependency and conflicting-action checks on `set`. Returns the warnings when
/// there is no error.
pub(crate) fn check_set(
    set: &[(Fmri, Manifest)],
    filter: &ImageFilter,
) -> Result<Vec<DependencyProblem>, CheckError> {
    let mut all = check_pinned_set(set, filter);
    all.extend(check_conflicts(set, filter));
    let (errors, warnings): (Vec<_>, Vec<_>) =
        all.into_iter().partition(|p| p.severity == Severity::Error);
    if errors.is_empty() {
        Ok(warnings)
    } else {
        Err(CheckError { problems: errors })
    }
}

/// `stem@version` as a dependency writes it (no publisher, no default build part).
pub(crate) fn wanted(f: &Fmri) -> String {
    match f.version() {
        Some(v) => format!("{}@{}", f.stem(), v.short()),
        None => f.stem().to_owned(),
    }
}

/// True when `set name=pkg.obsolete value=true`.
pub(crate) fn is_obsolete(m: &Manifest) -> bool {
    m.attribute("pkg.obsolete")
        .is_some_and(|v| v.iter().any(|s| s == "true"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(pkgs: &[(&str, &str)]) -> Result<Vec<String>, Vec<String>> {
        let set: Vec<(Fmri, Manifest)> = pkgs
            .iter()
            .map(|(f, t)| (Fmri::parse(f).unwrap(), Manifest::parse(t).unwrap()))
            .collect();
        let strings = |v: Vec<DependencyProblem>| v.iter().map(ToString::to_string).collect();
        check_set(&set, &ImageFilter::zone("i386"))
            .map(strings)
            .map_err(|e| strings(e.problems))
    }

    const A: &str = "pkg://t/a@1.0,5.11-1:20240101T000000Z";
    const B: &str = "pkg://t/b@2.0,5.11-1:20240101T000000Z";

    /// The messages the builder shows name the package, the action and the other package.
    #[test]
    fn failures_name_the_packages_and_the_action() {
        assert_eq!(
            run(&[(A, "depend type=require fmri=b@2\n"), (B, "")]),
            Ok(vec![])
        );
        assert_eq!(
            run(&[(A, "depend type=require fmri=b@3\n"), (B, "")]),
            Err(vec![format!(
                "error: {A}: depend fmri=b@3 type=require: {B} is older than pkg:/b@3,5.11"
            )])
        );
        assert_eq!(
            run(&[(A, "depend type=exclude fmri=b@1\n"), (B, "")]),
            Err(vec![format!(
                "error: {A}: depend fmri=b@1 type=exclude: {B} is excluded"
            )])
        );
        // A group dependency is a warning: the build goes on.
        assert_eq!(
            run(&[(A, "depend type=group fmri=c\n")]),
            Ok(vec![format!(
                "warning: {A}: depend fmri=c type=group: c is not in the set"
            )])
        );
        let e = run(&[
            (A, "file 0123 path=etc/x mode=0644 owner=root group=sys\n"),
            (B, "file 0456 path=etc/x mode=0644 owner=root group=sys\n"),
        ])
        .unwrap_err();
        assert_eq!(
            e,
            [format!(
                "error: {A}, {B}: path etc/x: delivered by more than one file action (only an overlay=allow and an overlay=true file may share a path); {A} delivers `file path=etc/x mode=0644 owner=root group=sys`; {B} delivers `file path=etc/x mode=0644 owner=root group=sys`"
            )]
        );
    }
}
