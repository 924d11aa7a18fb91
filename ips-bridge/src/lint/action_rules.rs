//! The checks of one action on its own: pkg's `validate()` for the action's type and
//! pkglint's per-action rules (modes, user names, dependencies, mediators, licenses).

use super::{LintRule, what};
use crate::action::{Action, ActionKind, DependType};
use crate::fmri::Fmri;
use crate::version::{Version, valid_timestamp};

/// Collects findings for one action.
struct Sink<'a> {
    action: &'a Action,
    out: Vec<(LintRule, Option<String>, String)>,
}

impl Sink<'_> {
    /// The rules of a `file` action.
    fn file_rules(&mut self) {
        let a = self.action;
        self.generic(
            &[
                "chash",
                "preserve",
                "overlay",
                "elfarch",
                "elfbits",
                "elfhash",
                "original_name",
                "preserve-version",
            ],
            &["pkg.csize", "pkg.size"],
            &["owner", "group"],
        );
        self.mode();
        if let Some(p) = a.get("preserve")
            && !matches!(
                p,
                "true" | "renameold" | "renamenew" | "legacy" | "abandon" | "install-only"
            )
        {
            self.push(
                LintRule::Preserve,
                "preserve",
                format!("invalid preserve value {p:?}"),
            );
        }
        if let Some(pv) = a.get("preserve-version") {
            if a.get("preserve").is_none() {
                self.push(
                    LintRule::Preserve,
                    "preserve-version",
                    "preserve-version needs preserve".into(),
                );
            }
            if pv.contains([',', '-', ':']) || Version::parse(pv).is_err() {
                self.push(
                    LintRule::Preserve,
                    "preserve-version",
                    format!("preserve-version {pv:?} must be a release only, such as 1.2"),
                );
            }
        }
        if let Some(t) = a.get("timestamp")
            && !valid_timestamp(t)
        {
            self.push(
                LintRule::Timestamp,
                "timestamp",
                format!("invalid timestamp {t:?}: it is YYYYMMDDTHHMMSSZ (UTC)"),
            );
        }
    }

    /// The rules of a `depend` action.
    fn depend_rules(&mut self) {
        let a = self.action;
        let t = a.get("type");
        let mut required = vec!["type", "fmri"];
        if t == Some("conditional") {
            required.push("predicate");
        }
        let mut single = vec!["predicate", "root-image", "ignore-check", "type"];
        if !matches!(t, Some("require-any" | "group-any")) {
            single.push("fmri");
        }
        self.generic(&single, &[], &required);
        if let Some(t) = t
            && DependType::parse(t).is_none()
        {
            self.push(
                LintRule::DependType,
                "type",
                format!(
                    "unknown dependency type {t:?} (require, require-any, optional, incorporate, group, group-any, conditional, exclude, origin, parent)"
                ),
            );
        }
        if a.get("predicate").is_some() && t != Some("conditional") {
            self.push(
                LintRule::DependAttr,
                "predicate",
                "a predicate is only allowed with type=conditional".into(),
            );
        }
        if a.get("root-image").is_some() && t != Some("origin") {
            self.push(
                LintRule::DependAttr,
                "root-image",
                "root-image is only allowed with type=origin".into(),
            );
        }
        for f in a.get_all("fmri") {
            // pkgdepend's placeholder for a dependency it could not resolve.
            if f != "__TBD" {
                self.fmri_value("fmri", f);
            }
        }
        for p in a.get_all("predicate") {
            self.fmri_value("predicate", p);
        }
    }

    /// The rules of a `license` action.
    fn license_rules(&mut self) {
        let a = self.action;
        self.generic(
            &["chash", "must-accept", "must-display"],
            &["pkg.csize", "pkg.size"],
            &[],
        );
        if a.hash().is_none() {
            self.push(
                LintRule::Payload,
                "hash",
                "no payload: give the license text's file (or hash) after 'license'".into(),
            );
        }
        if a.get("path").is_some() {
            self.push(
                LintRule::LicensePath,
                "path",
                "license actions must not have a path attribute".into(),
            );
        }
    }

    fn push(&mut self, rule: LintRule, attr: &str, problem: String) {
        let message = format!("{problem} ({})", what(self.action));
        self.out.push((rule, Some(attr.to_owned()), message));
    }

    /// pkg's generic `_validate`: single-valued, numeric and required attributes.
    fn generic(&mut self, single: &[&str], numeric: &[&str], required: &[&str]) {
        let a = self.action;
        for (k, vals) in a.attrs() {
            let single_valued =
                k.starts_with("facet.") || k == "reboot-needed" || single.contains(&k.as_str());
            if single_valued && vals.len() > 1 {
                self.push(
                    LintRule::SingleAttr,
                    k,
                    format!("{k} may only be specified once"),
                );
            } else if numeric.contains(&k.as_str()) {
                for v in vals {
                    if v.parse::<i64>().is_err() {
                        self.push(
                            LintRule::NumericAttr,
                            k,
                            format!("{k} must be an integer, not {v:?}"),
                        );
                    }
                }
            }
        }
        for k in required {
            let blank = a.get_all(k).iter().all(|v| v.trim().is_empty());
            if blank {
                self.push(LintRule::RequiredAttr, k, format!("{k} is required"));
            }
        }
    }

    /// pkg's `_validate_fsobj_common` and pkglint's `unusual_perms`.
    fn mode(&mut self) {
        const FORM: &str = "mode must be 3 to 5 octal digits, such as 644, 0644 or 04755";
        let a = self.action;
        let raw = match a.get_all("mode") {
            [] => return self.push(LintRule::Mode, "mode", format!("mode is required: {FORM}")),
            [m] => m.as_str(),
            _ => {
                return self.push(
                    LintRule::Mode,
                    "mode",
                    "mode may only be specified once".into(),
                );
            }
        };
        let octal = raw.bytes().all(|c| (b'0'..=b'7').contains(&c));
        let len_ok = (3..=5).contains(&raw.len()) && (raw.len() < 5 || raw.starts_with('0'));
        let bits = if octal && len_ok {
            u32::from_str_radix(raw, 8).ok()
        } else {
            None
        };
        let Some(bits) = bits else {
            return self.push(
                LintRule::Mode,
                "mode",
                format!("invalid mode {raw:?}: {FORM}"),
            );
        };
        if bits & 0o7777 == 0 {
            return self.push(
                LintRule::Mode,
                "mode",
                format!("invalid mode {raw:?}: no permission bits at all"),
            );
        }
        if a.kind() == ActionKind::Dir && bits & 0o111 == 0 {
            self.push(
                LintRule::ModeUnusual,
                "mode",
                format!("mode {raw} has no execute bits on a directory"),
            );
        }
        // pkglint compares the last three digits as characters.
        let d = raw.as_bytes();
        let (user, group, other) = (d[d.len() - 3], d[d.len() - 2], d[d.len() - 1]);
        if other > group || group > user || other > user {
            self.push(
                LintRule::ModeUnusual,
                "mode",
                format!("unusual mode {raw}: others or group have more access than the owner"),
            );
        }
    }

    fn fmri_value(&mut self, attr: &str, v: &str) {
        if let Err(e) = Fmri::parse(v) {
            self.push(LintRule::Fmri, attr, format!("invalid {attr} {v:?}: {e}"));
        }
    }

    fn mediator(&mut self) {
        let a = self.action;
        let mediator = a.get("mediator");
        let version = a.get("mediator-version");
        let implementation = a.get("mediator-implementation");
        let priority = a.get("mediator-priority");
        if mediator.is_none() && version.is_none() && implementation.is_none() && priority.is_none()
        {
            return;
        }
        let name_ok =
            |s: &str| !s.is_empty() && s.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-');
        match mediator {
            None => self.push(
                LintRule::Mediator,
                "mediator",
                "a mediator must be given when mediator-version, mediator-implementation or mediator-priority is".into(),
            ),
            Some(m) if !name_ok(m) => self.push(
                LintRule::Mediator,
                "mediator",
                format!("invalid mediator {m:?}: only letters, digits and '-' are allowed"),
            ),
            Some(_) => {}
        }
        if version.is_none() && implementation.is_none() {
            self.push(
                LintRule::Mediator,
                "mediator",
                "a mediator-version or mediator-implementation must be given".into(),
            );
        }
        if let Some(v) = version
            && let Err(e) = Version::parse(v)
        {
            self.push(
                LintRule::Mediator,
                "mediator-version",
                format!("invalid mediator-version {v:?}: {e}"),
            );
        }
        if let Some(i) = implementation {
            let (name, ver) = match i.rsplit_once('@') {
                Some((n, v)) => (n, Some(v)),
                None => (i, None),
            };
            let ver_ok = ver.is_none_or(|v| Version::parse(v).is_ok());
            if !name_ok(name) || !ver_ok {
                self.push(
                    LintRule::Mediator,
                    "mediator-implementation",
                    format!(
                        "invalid mediator-implementation {i:?}: letters, digits and '-', then optionally '@' and a version"
                    ),
                );
            }
        }
        if let Some(p) = priority
            && !matches!(p, "site" | "vendor")
        {
            self.push(
                LintRule::Mediator,
                "mediator-priority",
                format!("invalid mediator-priority {p:?}: it is site or vendor"),
            );
        }
    }

    fn username(&mut self, name: &str) {
        if name.is_empty() || name.chars().count() > 32 {
            self.push(
                LintRule::UsernameLength,
                "username",
                format!("user name {name:?} must be 1 to 32 characters"),
            );
            return;
        }
        let b = name.as_bytes();
        if !b[0].is_ascii_lowercase()
            || !b
                .iter()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'))
        {
            self.push(
                LintRule::UsernameFormat,
                "username",
                format!(
                    "user name {name:?} should start with a lower-case letter and hold only letters, digits, '.', '_' and '-'"
                ),
            );
        }
    }
}

/// The publication checks of one action (pkg's `validate()` for its type, plus pkglint's
/// per-action checks): (rule, attribute, message).
pub(super) fn check_action(a: &Action) -> Vec<(LintRule, Option<String>, String)> {
    let mut s = Sink {
        action: a,
        out: Vec::new(),
    };
    match a.kind() {
        ActionKind::File => s.file_rules(),
        ActionKind::Dir => {
            s.generic(&[], &[], &["owner", "group"]);
            s.mode();
        }
        ActionKind::Link | ActionKind::Hardlink => {
            s.generic(
                &[
                    "target",
                    "mediator",
                    "mediator-version",
                    "mediator-implementation",
                    "mediator-priority",
                ],
                &[],
                &["target"],
            );
            s.mediator();
        }
        ActionKind::User => {
            let numeric = [
                "uid", "lastchg", "min", "max", "warn", "inactive", "expire", "flag",
            ];
            let mut single = vec![
                "password",
                "group",
                "gcos-field",
                "home-dir",
                "login-shell",
                "ftpuser",
            ];
            single.extend(numeric);
            s.generic(&single, &numeric, &["group"]);
            s.username(a.key().unwrap_or(""));
        }
        ActionKind::Group => s.generic(&["gid"], &["gid"], &[]),
        ActionKind::Depend => s.depend_rules(),
        ActionKind::License => s.license_rules(),
        ActionKind::Legacy => s.generic(
            &["category", "desc", "hotline", "name", "vendor", "version"],
            &[],
            &[],
        ),
        ActionKind::Signature => s.generic(
            &["algorithm", "chash", "value"],
            &["pkg.csize", "pkg.size"],
            &["value"],
        ),
        ActionKind::Set => {
            let name = a.get("name").unwrap_or("");
            let single_value = [
                "pkg.summary",
                "pkg.obsolete",
                "pkg.renamed",
                "pkg.description",
                "pkg.depend.explicit-install",
            ];
            if single_value.contains(&name) {
                s.generic(&["value"], &[], &[]);
            } else {
                s.generic(&[], &[], &[]);
            }
            if name.starts_with("pkg.additional-") {
                for v in a.get_all("value") {
                    s.fmri_value("value", v);
                }
            }
        }
        ActionKind::Driver | ActionKind::Unknown => s.generic(&[], &[], &[]),
    }
    s.out
}
