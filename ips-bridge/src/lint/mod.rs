//! Manifest lint: the checks `pkgsend publish`, pkg's action validation (`validate()` of each
//! action type) and pkglint's duplicate-action checks make on one manifest, as data.
//!
//! Each [`LintFinding`] has a stable [`LintRule`] id, is an error or a warning as pkglint
//! classes it, and names the line (when the manifest came from text) and the attribute.
//! Errors are what pkg would refuse to publish or install; `rdctl ips lint` reports them and
//! [`crate::FileRepo::publish`] refuses a manifest with any of them.

use std::fmt;

use crate::action::{Action, ActionErrorKind};
use crate::depend::Severity;
use crate::manifest::{Manifest, ManifestError};

mod action_rules;
mod whole_manifest;

use action_rules::check_action;
use whole_manifest::{check_duplicates, check_parents, check_pkg_fmri};

macro_rules! lint_rules {
    ($($(#[doc = $doc:literal])* $variant:ident => ($id:literal, $sev:ident, $pkg:literal),)*) => {
        /// A lint rule. Each has a stable kebab-case id used in reports and tests.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
        #[non_exhaustive]
        pub enum LintRule {
            $($(#[doc = $doc])* $variant,)*
        }

        impl LintRule {
            /// The stable id.
            pub fn id(self) -> &'static str {
                match self { $(Self::$variant => $id,)* }
            }

            /// Error (pkg refuses the manifest) or warning (pkglint complains, pkg accepts).
            pub fn severity(self) -> Severity {
                match self { $(Self::$variant => Severity::$sev,)* }
            }

            /// The pkg(5) code or pkglint check this rule follows.
            pub fn pkg_check(self) -> &'static str {
                match self { $(Self::$variant => $pkg,)* }
            }

            /// Every rule, in declaration order.
            pub const ALL: &'static [LintRule] = &[$(Self::$variant,)*];
        }
    };
}

lint_rules! {
    /// The line breaks the action grammar, or the file is not UTF-8.
    Parse => ("parse", Error, "the action tokenizer (actions/_actions.c)"),
    /// The action name is not one pkg knows.
    UnknownAction => ("unknown-action", Error, "UnknownActionError; pkglint.action004"),
    /// A required attribute is missing or blank.
    RequiredAttr => ("required-attr", Error, "validate() required attributes; pkglint.action009"),
    /// An attribute that may appear once appears more than once.
    SingleAttr => ("single-attr", Error, "validate() single-valued attributes; pkglint.action009"),
    /// An attribute that must be an integer is not.
    NumericAttr => ("numeric-attr", Error, "validate() numeric attributes; pkglint.action009"),
    /// `path` is empty or `/`.
    EmptyPath => ("empty-path", Error, "the action constructor"),
    /// A `license` action names no payload.
    Payload => ("payload", Error, "pkgsend publish (InvalidPathAttributeError)"),
    /// `mode` missing, repeated, not 3 to 5 octal digits, or zero.
    Mode => ("mode", Error, "_validate_fsobj_common; pkglint.action002.2, .3"),
    /// A directory without execute bits, or other > group, group > user or other > user.
    ModeUnusual => ("mode-unusual", Warning, "pkglint.action002.1, .4"),
    /// `depend type=` is not a dependency type.
    DependType => ("depend-type", Error, "depend validate()"),
    /// `predicate` without `type=conditional`, `root-image` without `type=origin`.
    DependAttr => ("depend-attr", Error, "depend validate()"),
    /// A dependency's `fmri` or `predicate`, or a `pkg.additional-*` value, is not an FMRI.
    Fmri => ("fmri", Error, "depend and set validate(); pkglint.action006"),
    /// `preserve` has an unknown value, or `preserve-version` is misused.
    Preserve => ("preserve", Error, "file validate(); file install"),
    /// `timestamp` is not `YYYYMMDDTHHMMSSZ` naming a real time.
    Timestamp => ("timestamp", Error, "file install (strptime)"),
    /// The `mediator*` attributes of a link are incomplete or malformed.
    Mediator => ("mediator", Error, "link validate() (pkg/mediator.py)"),
    /// A user name is empty or longer than 32 characters.
    UsernameLength => ("username-length", Error, "pkglint.action010.1, .4"),
    /// A user name does not start with a lower-case letter or has other characters than
    /// letters, digits, `.`, `_` and `-`.
    UsernameFormat => ("username-format", Warning, "pkglint.action010.2, .3"),
    /// A `license` action has a `path` attribute.
    LicensePath => ("license-path", Error, "pkglint.action007"),
    /// No `set name=pkg.fmri` action.
    PkgFmriMissing => ("pkg-fmri-missing", Error, "pkgsend publish"),
    /// More than one `set name=pkg.fmri` action, or more than one value.
    PkgFmriRepeated => ("pkg-fmri-repeated", Error, "pkgsend publish; pkglint.manifest006"),
    /// `pkg.fmri` is not an FMRI, or has no version.
    PkgFmriInvalid => ("pkg-fmri-invalid", Error, "pkgsend publish (fmri.py, version.py)"),
    /// One path delivered by actions of different types.
    PathTypes => ("path-types", Error, "pkglint.dupaction008"),
    /// One path delivered by two `file` actions (other than an overlay pair).
    DupFile => ("dup-file", Error, "pkglint.dupaction001"),
    /// One path delivered by `dir`, `link` or `hardlink` actions whose attributes differ.
    PathAttrs => ("path-attrs", Error, "pkglint.dupaction007"),
    /// A path's parent directory is delivered as something other than a directory.
    ParentNotDir => ("parent-not-dir", Error, "pkglint.dupaction011"),
    /// Two `driver` actions with one `name`.
    DupDriver => ("dup-driver", Error, "pkglint.dupaction002"),
    /// Two `user` actions with one `username`.
    DupUser => ("dup-user", Error, "pkglint.dupaction003"),
    /// Two `user` actions with one `uid`.
    DupUid => ("dup-uid", Error, "pkglint.dupaction004"),
    /// Two `group` actions with one `groupname`.
    DupGroup => ("dup-group", Error, "pkglint.dupaction005"),
    /// Two `group` actions with one `gid`.
    DupGid => ("dup-gid", Error, "pkglint.dupaction006"),
    /// Two `legacy` actions with one `pkg`.
    DupLegacy => ("dup-legacy", Error, "pkglint.dupaction015"),
    /// Two `set` actions with one `name`.
    DupSet => ("dup-set", Error, "pkglint.manifest006"),
}

impl fmt::Display for LintRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.id())
    }
}

/// One problem found in a manifest.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LintFinding {
    /// The rule that failed.
    pub rule: LintRule,
    /// 1-based physical line where the action starts (or where a parse error is); `None`
    /// for problems of the whole manifest, and for manifests not read from text.
    pub line: Option<usize>,
    /// 1-based character column (1 unless the tokenizer stopped inside the line).
    pub column: usize,
    /// The attribute concerned, when there is one.
    pub attr: Option<String>,
    /// What is wrong, naming the attribute and the action.
    pub message: String,
}

impl LintFinding {
    /// Error or warning, from the rule.
    pub fn severity(&self) -> Severity {
        self.rule.severity()
    }

    /// True for errors: pkg would refuse the manifest.
    pub fn is_error(&self) -> bool {
        self.severity() == Severity::Error
    }

    pub(crate) fn from_parse(e: ManifestError) -> Self {
        let (rule, attr) = match e.kind {
            ActionErrorKind::UnknownType => (LintRule::UnknownAction, None),
            ActionErrorKind::Missing(a) => (LintRule::RequiredAttr, Some(a)),
            ActionErrorKind::Repeated(a) => (LintRule::SingleAttr, Some(a)),
            ActionErrorKind::EmptyPath => (LintRule::EmptyPath, Some("path".to_owned())),
            _ => (LintRule::Parse, None),
        };
        Self {
            rule,
            line: Some(e.line),
            column: e.column,
            attr,
            message: e.message,
        }
    }
}

impl fmt::Display for LintFinding {
    /// `line L, column C: [warning: ]MESSAGE [ID]`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(line) = self.line {
            write!(f, "line {line}, column {}: ", self.column)?;
        }
        if !self.is_error() {
            f.write_str("warning: ")?;
        }
        write!(f, "{} [{}]", self.message, self.rule)
    }
}

/// Where an action is, for messages about another action: "line 3" or "action 3".
fn place(m: &Manifest, i: usize) -> String {
    match m.line(i) {
        Some(l) => format!("line {l}"),
        None => format!("action {}", i + 1),
    }
}

/// `file usr/bin/x`: the action's type and key, for messages.
fn what(a: &Action) -> String {
    match a.key() {
        Some(k) => format!("{} {k}", a.kind()),
        None => a.kind().to_string(),
    }
}

/// Linting is a view of a manifest: the manifest module knows nothing of it.
impl Manifest {
    /// Lints manifest text as `rdctl ips lint` reports it: every parse error and every
    /// finding of [`Manifest::check`], sorted by line. Empty when the manifest is clean.
    pub fn lint(text: &str) -> Vec<LintFinding> {
        let (m, errors) = Self::parse_all(text);
        let mut out: Vec<LintFinding> = errors.into_iter().map(LintFinding::from_parse).collect();
        out.extend(m.check());
        out.sort_by_key(|f| (f.line, f.column));
        out
    }

    /// [`Manifest::lint`] on bytes: text that is not UTF-8 is one `parse` finding at the
    /// first invalid byte.
    pub fn lint_bytes(bytes: &[u8]) -> Vec<LintFinding> {
        match std::str::from_utf8(bytes) {
            Ok(text) => Self::lint(text),
            Err(_) => match Self::parse_bytes(bytes) {
                Err(e) => vec![LintFinding::from_parse(e)],
                Ok(m) => m.check(),
            },
        }
    }

    /// Every rule `pkgsend publish`, pkg's action validation and pkglint's duplicate checks
    /// apply to these actions (see [`crate::LintRule`]); findings name the line each action
    /// started on when the manifest was parsed from text.
    pub fn check(&self) -> Vec<LintFinding> {
        check_manifest(self)
    }
}

/// Every check of one parsed manifest: each action's, then pkg.fmri, then duplicates.
pub(crate) fn check_manifest(m: &Manifest) -> Vec<LintFinding> {
    let acts = m.actions();
    let mut out = Vec::new();
    let mut add = |line: Option<usize>, rule: LintRule, attr: Option<&str>, message: String| {
        out.push(LintFinding {
            rule,
            line,
            column: 1,
            attr: attr.map(str::to_owned),
            message,
        });
    };
    for (i, a) in acts.iter().enumerate() {
        for (rule, attr, message) in check_action(a) {
            add(m.line(i), rule, attr.as_deref(), message);
        }
    }

    check_pkg_fmri(m, &mut add);
    check_duplicates(m, &mut add);
    check_parents(m, &mut add);
    out.sort_by_key(|f| (f.line, f.column));
    out
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::action::ActionKind;

    const FMRI: &str = "set name=pkg.fmri value=pkg:/demo/x@1.0-1\n";

    /// Lints `body` after a pkg.fmri line, returning (rule id, line, attr) per finding.
    fn lint(body: &str) -> Vec<(&'static str, Option<usize>, Option<String>)> {
        Manifest::lint(&format!("{FMRI}{body}"))
            .into_iter()
            .map(|f| (f.rule.id(), f.line, f.attr))
            .collect()
    }

    /// Asserts exactly one finding, of `id` on `line` about `attr`.
    fn one(body: &str, id: &str, line: usize, attr: &str) {
        let got = lint(body);
        assert_eq!(
            got,
            [(
                LintRule::ALL
                    .iter()
                    .find(|r| r.id() == id)
                    .expect("known id")
                    .id(),
                Some(line),
                Some(attr.to_owned())
            )],
            "{body}"
        );
    }

    #[test]
    fn rule_ids_are_unique_and_kebab_case() {
        let mut ids: Vec<&str> = LintRule::ALL.iter().map(|r| r.id()).collect();
        assert!(
            ids.iter()
                .all(|i| i.bytes().all(|c| c.is_ascii_lowercase() || c == b'-'))
        );
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), LintRule::ALL.len());
    }

    #[test]
    fn clean_manifest_has_no_findings() {
        let body = "set name=pkg.summary value=x\n\
            dir path=usr mode=0755 owner=root group=sys\n\
            file path=usr/x mode=0555 owner=root group=bin\n\
            link path=usr/y target=x\n\
            hardlink path=usr/z target=x\n\
            user username=svc group=svc uid=700\n\
            group groupname=svc gid=700\n\
            depend type=require fmri=pkg:/a@1.0\n\
            license COPYING license=MIT\n\
            legacy pkg=SUNWx name=x\n\
            driver name=e1000g alias=pci8086,1000\n\
            signature 0a1b algorithm=sha256 value=abc\n";
        assert_eq!(lint(body), []);
    }

    #[test]
    fn unknown_action() {
        assert_eq!(lint("frob x=y\n"), [("unknown-action", Some(2), None)]);
    }

    #[test]
    fn parse_errors_without_attr() {
        assert_eq!(lint("set name=a value=\"x\n"), [("parse", Some(2), None)]);
    }

    #[test]
    fn required_attributes_per_action_type() {
        one(
            "file path=x mode=0644 group=bin\n",
            "required-attr",
            2,
            "owner",
        );
        one(
            "file path=x mode=0644 owner=root\n",
            "required-attr",
            2,
            "group",
        );
        one(
            "file path=x mode=0644 owner=\" \" group=bin\n",
            "required-attr",
            2,
            "owner",
        );
        one(
            "dir path=x mode=0755 group=bin\n",
            "required-attr",
            2,
            "owner",
        );
        one("link path=x\n", "required-attr", 2, "target");
        one("hardlink path=x\n", "required-attr", 2, "target");
        one("user username=u\n", "required-attr", 2, "group");
        one("depend fmri=a\n", "required-attr", 2, "type");
        one("depend type=require\n", "required-attr", 2, "fmri");
        one(
            "depend type=conditional fmri=a\n",
            "required-attr",
            2,
            "predicate",
        );
        // Key attributes are checked by the action constructor.
        one("user uid=5 group=g\n", "required-attr", 2, "username");
        one("group gid=5\n", "required-attr", 2, "groupname");
        one(
            "license X must-display=true\n",
            "required-attr",
            2,
            "license",
        );
        one("driver alias=x\n", "required-attr", 2, "name");
        one("legacy name=x\n", "required-attr", 2, "pkg");
        one(
            "signature 0a algorithm=sha256\n",
            "required-attr",
            2,
            "value",
        );
        one("set name=a b=c\n", "required-attr", 2, "value");
    }

    #[test]
    fn single_valued_attributes() {
        one(
            "file path=x mode=0644 owner=root group=bin preserve=true preserve=true\n",
            "single-attr",
            2,
            "preserve",
        );
        one("dir path=a path=b\n", "single-attr", 2, "path");
        one("group groupname=g gid=1 gid=2\n", "single-attr", 2, "gid");
        one(
            "set name=pkg.summary value=a value=b\n",
            "single-attr",
            2,
            "value",
        );
        one(
            "link path=a target=b target=c\n",
            "single-attr",
            2,
            "target",
        );
        one(
            "depend type=require fmri=a fmri=b\n",
            "single-attr",
            2,
            "fmri",
        );
        one(
            "driver name=d facet.a=true facet.a=all\n",
            "single-attr",
            2,
            "facet.a",
        );
        assert_eq!(lint("depend type=require-any fmri=a fmri=b\n"), []);
    }

    #[test]
    fn numeric_attributes() {
        one("group groupname=g gid=x\n", "numeric-attr", 2, "gid");
        one(
            "user username=u group=g uid=1.5\n",
            "numeric-attr",
            2,
            "uid",
        );
        one(
            "license L license=MIT pkg.size=big\n",
            "numeric-attr",
            2,
            "pkg.size",
        );
    }

    #[test]
    fn empty_path() {
        one(
            "dir path=/ mode=0755 owner=root group=bin\n",
            "empty-path",
            2,
            "path",
        );
    }

    #[test]
    fn license_needs_a_payload_and_no_path() {
        one("license license=MIT\n", "payload", 2, "hash");
        one("license L license=MIT path=x\n", "license-path", 2, "path");
    }

    #[test]
    fn modes_follow_pkg_and_pkglint() {
        for bad in [
            "nine", "16444", "12345", "75", "0o755", "0758", "000", "1777777",
        ] {
            one(
                &format!("file path=x owner=root group=bin mode={bad}\n"),
                "mode",
                2,
                "mode",
            );
        }
        one("file path=x owner=root group=bin\n", "mode", 2, "mode");
        for good in ["644", "0644", "04755", "1777"] {
            assert_eq!(
                lint(&format!("file path=x owner=root group=bin mode={good}\n")),
                [],
                "{good}"
            );
        }
        one(
            "dir path=x owner=root group=bin mode=0644\n",
            "mode-unusual",
            2,
            "mode",
        );
        one(
            "file path=x owner=root group=bin mode=0466\n",
            "mode-unusual",
            2,
            "mode",
        );
        let f = Manifest::lint(&format!(
            "{FMRI}file path=x owner=root group=bin mode=0446\n"
        ));
        assert_eq!(f[0].severity(), Severity::Warning);
        assert!(f[0].to_string().contains("warning: "), "{}", f[0]);
    }

    #[test]
    fn dependency_types_attributes_and_fmris() {
        one("depend type=sometimes fmri=a\n", "depend-type", 2, "type");
        one(
            "depend type=require fmri=a predicate=b\n",
            "depend-attr",
            2,
            "predicate",
        );
        one(
            "depend type=require fmri=a root-image=true\n",
            "depend-attr",
            2,
            "root-image",
        );
        one("depend type=require fmri=a@1.0-\n", "fmri", 2, "fmri");
        one("depend type=require fmri=-bad\n", "fmri", 2, "fmri");
        one(
            "depend type=conditional fmri=a predicate=b@01\n",
            "fmri",
            2,
            "predicate",
        );
        assert_eq!(lint("depend type=require fmri=__TBD\n"), []);
        one(
            "set name=pkg.additional-update-on-uninstall value=x@y\n",
            "fmri",
            2,
            "value",
        );
    }

    #[test]
    fn file_preserve_and_timestamp() {
        let f = "file path=x owner=root group=bin mode=0644";
        one(&format!("{f} preserve=maybe\n"), "preserve", 2, "preserve");
        one(
            &format!("{f} preserve-version=1.0\n"),
            "preserve",
            2,
            "preserve-version",
        );
        one(
            &format!("{f} preserve=true preserve-version=1.0-1\n"),
            "preserve",
            2,
            "preserve-version",
        );
        one(
            &format!("{f} timestamp=20200230T000000Z\n"),
            "timestamp",
            2,
            "timestamp",
        );
    }

    #[test]
    fn mediated_links() {
        one(
            "link path=a target=b mediator-version=1\n",
            "mediator",
            2,
            "mediator",
        );
        one(
            "link path=a target=b mediator=python\n",
            "mediator",
            2,
            "mediator",
        );
        one(
            "link path=a target=b mediator=py_thon mediator-version=1\n",
            "mediator",
            2,
            "mediator",
        );
        one(
            "link path=a target=b mediator=python mediator-version=1.x\n",
            "mediator",
            2,
            "mediator-version",
        );
        one(
            "link path=a target=b mediator=python mediator-implementation=c@x\n",
            "mediator",
            2,
            "mediator-implementation",
        );
        one(
            "link path=a target=b mediator=python mediator-version=3 mediator-priority=high\n",
            "mediator",
            2,
            "mediator-priority",
        );
        assert_eq!(
            lint(
                "link path=a target=b mediator=python mediator-implementation=cpython@3.9 mediator-priority=site\n"
            ),
            []
        );
    }

    #[test]
    fn usernames() {
        one(
            &format!("user group=g username={}\n", "a".repeat(33)),
            "username-length",
            2,
            "username",
        );
        one(
            "user group=g username=Admin\n",
            "username-format",
            2,
            "username",
        );
        one(
            "user group=g username=a+b\n",
            "username-format",
            2,
            "username",
        );
    }

    #[test]
    fn pkg_fmri_exactly_once_with_a_version() {
        let f = Manifest::lint("dir path=x mode=0755 owner=root group=bin\n");
        assert_eq!(
            f.iter().map(|f| (f.rule, f.line)).collect::<Vec<_>>(),
            [(LintRule::PkgFmriMissing, None)]
        );
        one(
            "set name=pkg.fmri value=pkg:/demo/y@1.0\n",
            "pkg-fmri-repeated",
            2,
            "name",
        );
        let ids = |text: &str| -> Vec<_> {
            Manifest::lint(text)
                .into_iter()
                .map(|f| (f.rule.id(), f.line, f.attr))
                .collect()
        };
        let v = Some("value".to_owned());
        assert_eq!(
            ids("set name=pkg.fmri value=pkg:/a@1.0 value=pkg:/b@1.0\n"),
            [("pkg-fmri-repeated", Some(1), v.clone())]
        );
        assert_eq!(
            ids("set name=pkg.fmri value=pkg:/demo/x\n"),
            [("pkg-fmri-invalid", Some(1), v.clone())]
        );
        assert_eq!(
            ids("set name=pkg.fmri value=pkg:/demo/x@1.01\n"),
            [("pkg-fmri-invalid", Some(1), v)]
        );
    }

    #[test]
    fn one_path_with_two_action_types() {
        one(
            "dir path=x mode=0755 owner=root group=bin\nfile path=x mode=0644 owner=root group=bin\n",
            "path-types",
            3,
            "path",
        );
        // Mediated links of both kinds may share a path.
        assert_eq!(
            lint(
                "link path=x target=a mediator=m mediator-version=1\nhardlink path=x target=b mediator=m mediator-version=2\n"
            ),
            []
        );
    }

    #[test]
    fn duplicate_files_unless_overlay_pair_or_variants_apart() {
        let f = "file path=x mode=0644 owner=root group=bin";
        one(&format!("{f}\n{f}\n"), "dup-file", 3, "path");
        assert_eq!(lint(&format!("{f} overlay=allow\n{f} overlay=true\n")), []);
        assert_eq!(
            lint(&format!("{f} variant.arch=i386\n{f} variant.arch=sparc\n")),
            []
        );
        // Tagged for one variant only: both can meet in an i386 image.
        one(
            &format!("{f} variant.arch=i386\n{f}\n"),
            "dup-file",
            3,
            "path",
        );
    }

    #[test]
    fn refcounted_paths_must_agree() {
        let d = "dir path=x owner=root group=bin";
        assert_eq!(lint(&format!("{d} mode=0755\n{d} mode=755\n")), []);
        one(
            &format!("{d} mode=0755\n{d} mode=0700\n"),
            "path-attrs",
            3,
            "mode",
        );
        one(
            "link path=l target=a\nlink path=l target=b\n",
            "path-attrs",
            3,
            "target",
        );
        assert_eq!(lint("link path=l target=a\nlink path=l target=a\n"), []);
    }

    #[test]
    fn parents_must_be_directories() {
        one(
            "file path=x mode=0644 owner=root group=bin\nfile path=x/y mode=0644 owner=root group=bin\n",
            "parent-not-dir",
            3,
            "path",
        );
    }

    #[test]
    fn duplicate_users_groups_drivers_legacy_and_sets() {
        one(
            "user username=u group=g uid=1\nuser username=u group=g uid=2\n",
            "dup-user",
            3,
            "username",
        );
        one(
            "user username=u group=g uid=1\nuser username=v group=g uid=1\n",
            "dup-uid",
            3,
            "uid",
        );
        one(
            "group groupname=g gid=1\ngroup groupname=g gid=2\n",
            "dup-group",
            3,
            "groupname",
        );
        one(
            "group groupname=g gid=1\ngroup groupname=h gid=1\n",
            "dup-gid",
            3,
            "gid",
        );
        one("driver name=d\ndriver name=d\n", "dup-driver", 3, "name");
        one("legacy pkg=P\nlegacy pkg=P\n", "dup-legacy", 3, "pkg");
        one(
            "set name=pkg.summary value=a\nset name=pkg.summary value=b\n",
            "dup-set",
            3,
            "name",
        );
        assert_eq!(
            lint(
                "set name=pkg.summary value=a variant.arch=i386\nset name=pkg.summary value=b variant.arch=sparc\n"
            ),
            []
        );
    }

    #[test]
    fn findings_without_text_have_no_line_but_name_the_action() {
        let mut a = Action::new(ActionKind::File);
        a.set("path", "usr/bin/x");
        a.set("mode", "0555");
        a.set("group", "bin");
        let m: Manifest = [a].into_iter().collect();
        let f = m.check();
        let owner = f
            .iter()
            .find(|f| f.rule == LintRule::RequiredAttr)
            .expect("owner finding");
        assert_eq!(owner.line, None);
        assert_eq!(
            owner.to_string(),
            "owner is required (file usr/bin/x) [required-attr]"
        );
    }
}
