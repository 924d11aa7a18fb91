//! The typed view of an action: each action type with its attributes parsed into fields
//! (`TypedAction`), the `depend type=` and `preserve=` values, and hard-link target resolution.

use super::{Action, ActionKind};
use crate::fmri::Fmri;

/// `depend type=` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DependType {
    /// `require`
    Require,
    /// `require-any`
    RequireAny,
    /// `optional`
    Optional,
    /// `incorporate`
    Incorporate,
    /// `group`
    Group,
    /// `group-any`
    GroupAny,
    /// `conditional`
    Conditional,
    /// `exclude`
    Exclude,
    /// `origin`
    Origin,
    /// `parent`
    Parent,
}

impl DependType {
    pub(crate) fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "require" => Self::Require,
            "require-any" => Self::RequireAny,
            "optional" => Self::Optional,
            "incorporate" => Self::Incorporate,
            "group" => Self::Group,
            "group-any" => Self::GroupAny,
            "conditional" => Self::Conditional,
            "exclude" => Self::Exclude,
            "origin" => Self::Origin,
            "parent" => Self::Parent,
            _ => return None,
        })
    }
}

/// `file preserve=` values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Preserve {
    /// `true`: keep local changes.
    True,
    /// `renameold`
    RenameOld,
    /// `renamenew`
    RenameNew,
    /// `legacy`
    Legacy,
    /// `abandon`: never touch after install.
    Abandon,
    /// `install-only`
    InstallOnly,
}

/// File system attributes shared by `dir` and `file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ownership<'a> {
    /// Permission bits parsed from the octal `mode`.
    pub mode: Option<u32>,
    /// Owner name.
    pub owner: Option<&'a str>,
    /// Group name.
    pub group: Option<&'a str>,
}

/// A typed view of an [`Action`], borrowing its strings.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum TypedAction<'a> {
    /// `set name=... value=...`
    Set {
        /// Attribute name.
        name: &'a str,
        /// Values (multi-valued attributes have several).
        values: &'a [String],
    },
    /// `depend`
    Depend {
        /// Dependency type.
        kind: DependType,
        /// Target FMRIs (several only for `*-any`).
        fmris: Vec<Fmri>,
        /// `predicate` (conditional dependencies).
        predicate: Option<Fmri>,
    },
    /// `dir`
    Dir {
        /// Path, relative to the image root.
        path: &'a str,
        /// Mode, owner and group.
        own: Ownership<'a>,
    },
    /// `file`
    File {
        /// Path, relative to the image root.
        path: &'a str,
        /// Payload SHA-1 (positional or `hash=`).
        hash: Option<&'a str>,
        /// Mode, owner and group.
        own: Ownership<'a>,
        /// `preserve`.
        preserve: Option<Preserve>,
        /// `timestamp` (sets the mtime).
        timestamp: Option<&'a str>,
    },
    /// `link` (symbolic).
    Link {
        /// Path of the link.
        path: &'a str,
        /// Target, verbatim.
        target: &'a str,
        /// `mediator`, if mediated.
        mediator: Option<&'a str>,
    },
    /// `hardlink`.
    Hardlink {
        /// Path of the link.
        path: &'a str,
        /// Target, relative to the link's directory unless absolute.
        target: &'a str,
    },
    /// `license`.
    License {
        /// License name (the key).
        license: &'a str,
        /// Payload SHA-1.
        hash: Option<&'a str>,
    },
    /// `user`.
    User {
        /// User name.
        username: &'a str,
        /// Primary group name.
        group: Option<&'a str>,
        /// Numeric uid.
        uid: Option<u32>,
    },
    /// `group`.
    Group {
        /// Group name.
        groupname: &'a str,
        /// Numeric gid.
        gid: Option<u32>,
    },
    /// `driver`.
    Driver {
        /// Driver name.
        name: &'a str,
        /// `alias` values.
        aliases: &'a [String],
    },
    /// `legacy`.
    Legacy {
        /// SVR4 package name.
        pkg: &'a str,
    },
    /// `signature`.
    Signature {
        /// Signature value (the key).
        value: &'a str,
        /// Hash of the signing certificate.
        hash: Option<&'a str>,
        /// `algorithm`.
        algorithm: Option<&'a str>,
    },
    /// `unknown`.
    Unknown,
}

impl<'a> TypedAction<'a> {
    pub(super) fn from_action(a: &'a Action) -> Result<Self, String> {
        let key = a.key().unwrap_or("");
        let own = || -> Result<Ownership<'a>, String> {
            let mode = match a.get("mode") {
                None => None,
                Some(m) => Some(parse_mode(m).ok_or_else(|| format!("invalid mode {m:?}"))?),
            };
            Ok(Ownership {
                mode,
                owner: a.get("owner"),
                group: a.get("group"),
            })
        };
        let num = |k: &str| -> Result<Option<u32>, String> {
            a.get(k)
                .map(|v| v.parse().map_err(|_| format!("invalid {k} {v:?}")))
                .transpose()
        };
        let fmri = |s: &str| Fmri::parse(s).map_err(|e| format!("{e}"));
        Ok(match a.kind {
            ActionKind::Set => Self::Set {
                name: key,
                values: a.get_all("value"),
            },
            ActionKind::Depend => {
                let t = a.get("type").ok_or("depend action has no type")?;
                let kind =
                    DependType::parse(t).ok_or_else(|| format!("unknown depend type {t:?}"))?;
                let fmris = a
                    .get_all("fmri")
                    .iter()
                    .map(|s| fmri(s))
                    .collect::<Result<Vec<_>, _>>()?;
                let predicate = a.get("predicate").map(fmri).transpose()?;
                if kind == DependType::Conditional && predicate.is_none() {
                    return Err("conditional dependency has no predicate".into());
                }
                Self::Depend {
                    kind,
                    fmris,
                    predicate,
                }
            }
            ActionKind::Dir => Self::Dir {
                path: key,
                own: own()?,
            },
            ActionKind::File => {
                let preserve = match a.get("preserve") {
                    None => None,
                    Some("true") => Some(Preserve::True),
                    Some("renameold") => Some(Preserve::RenameOld),
                    Some("renamenew") => Some(Preserve::RenameNew),
                    Some("legacy") => Some(Preserve::Legacy),
                    Some("abandon") => Some(Preserve::Abandon),
                    Some("install-only") => Some(Preserve::InstallOnly),
                    Some(p) => return Err(format!("invalid preserve value {p:?}")),
                };
                let timestamp = a.get("timestamp");
                if let Some(t) = timestamp
                    && !crate::version::valid_timestamp(t)
                {
                    return Err(format!("invalid timestamp {t:?}"));
                }
                Self::File {
                    path: key,
                    hash: a.hash(),
                    own: own()?,
                    preserve,
                    timestamp,
                }
            }
            ActionKind::Link | ActionKind::Hardlink => {
                let target = a.get("target").ok_or("link has no target")?;
                if a.kind == ActionKind::Hardlink {
                    Self::Hardlink { path: key, target }
                } else {
                    Self::Link {
                        path: key,
                        target,
                        mediator: a.get("mediator"),
                    }
                }
            }
            ActionKind::License => Self::License {
                license: key,
                hash: a.hash(),
            },
            ActionKind::User => Self::User {
                username: key,
                group: a.get("group"),
                uid: num("uid")?,
            },
            ActionKind::Group => Self::Group {
                groupname: key,
                gid: num("gid")?,
            },
            ActionKind::Driver => Self::Driver {
                name: key,
                aliases: a.get_all("alias"),
            },
            ActionKind::Legacy => Self::Legacy { pkg: key },
            ActionKind::Signature => Self::Signature {
                value: key,
                hash: a.hash(),
                algorithm: a.get("algorithm"),
            },
            ActionKind::Unknown => Self::Unknown,
        })
    }
}

/// Parses an octal mode such as `0755` or `04555`.
fn parse_mode(m: &str) -> Option<u32> {
    if m.is_empty() || m.len() > 5 || !m.bytes().all(|c| (b'0'..=b'7').contains(&c)) {
        return None;
    }
    u32::from_str_radix(m, 8).ok().filter(|&v| v <= 0o7777)
}

/// Resolves a `hardlink` target as pkg does: relative targets are taken from the directory
/// of the link's path, absolute ones from the image root. Returns a root-relative path, or
/// `None` when the target climbs above the root.
pub fn resolve_hardlink(path: &str, target: &str) -> Option<String> {
    let mut parts: Vec<&str> = if target.starts_with('/') {
        Vec::new()
    } else {
        let mut p: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
        p.pop();
        p
    };
    for seg in target.split('/') {
        match seg {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            s => parts.push(s),
        }
    }
    Some(parts.join("/"))
}
