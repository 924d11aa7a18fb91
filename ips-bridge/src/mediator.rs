//! Mediated links: when several packages deliver `link`/`hardlink` actions for one
//! `mediator`, pkg picks one mediation and installs only the links that match it.
//!
//! pkg's order (`mediator.cmp_mediations`): `mediator-priority` `site` before `vendor` before
//! none; then the greatest `mediator-version` (versions compare like package versions, an
//! absent version last); then the implementation name in ascending order (none first); then
//! the greatest implementation version. The first mediation in that order wins. An
//! unversioned implementation (`impl`) matches every version of it (`impl@1.2`).

use std::cmp::Ordering;
use std::collections::BTreeMap;

use crate::action::{Action, ActionKind};
use crate::version::Version;

/// One mediation: what a mediated link action offers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mediation {
    /// `mediator-priority` (`site` or `vendor`), if any.
    pub priority: Option<String>,
    /// `mediator-version`, if any.
    pub version: Option<Version>,
    /// `mediator-implementation` name, if any.
    pub implementation: Option<String>,
    /// The implementation's version (`name@version`), if any.
    pub implementation_version: Option<Version>,
}

impl Mediation {
    /// The mediator name and mediation of a `link` or `hardlink` action; `None` when the
    /// action is not mediated or its mediation values do not parse.
    pub fn of(action: &Action) -> Option<(String, Mediation)> {
        if !matches!(action.kind(), ActionKind::Link | ActionKind::Hardlink) {
            return None;
        }
        let mediator = action.get("mediator")?.to_owned();
        let version = match action.get("mediator-version") {
            Some(v) => Some(Version::parse(v).ok()?),
            None => None,
        };
        let (implementation, implementation_version) = match action.get("mediator-implementation") {
            Some(i) => match i.rsplit_once('@') {
                Some((name, v)) if !v.is_empty() => {
                    (Some(name.to_owned()), Some(Version::parse(v).ok()?))
                }
                Some((name, _)) => (Some(name.to_owned()), None),
                None => (Some(i.to_owned()), None),
            },
            None => (None, None),
        };
        Some((
            mediator,
            Mediation {
                priority: action.get("mediator-priority").map(str::to_owned),
                version,
                implementation,
                implementation_version,
            },
        ))
    }

    fn rank(&self) -> u8 {
        match self.priority.as_deref() {
            Some("site") => 1,
            Some("vendor") => 2,
            _ => 3,
        }
    }

    /// pkg's preference order: `Less` means `self` is preferred.
    pub fn preference(&self, other: &Mediation) -> Ordering {
        self.rank()
            .cmp(&other.rank())
            .then_with(|| other.version.cmp(&self.version))
            .then_with(|| self.implementation.cmp(&other.implementation))
            .then_with(|| {
                other
                    .implementation_version
                    .cmp(&self.implementation_version)
            })
    }

    /// True when a link offering `offered` is installed under this chosen mediation: same
    /// version, and implementations that match (an unversioned one matches any version).
    pub fn admits(&self, offered: &Mediation) -> bool {
        if self.version != offered.version || self.implementation != offered.implementation {
            return false;
        }
        self.implementation_version.is_none()
            || offered.implementation_version.is_none()
            || self.implementation_version == offered.implementation_version
    }
}

/// Chooses one mediation per mediator among the mediated links of `actions` (for example,
/// the filtered actions of every package in an image).
pub fn choose_mediations<'a>(
    actions: impl IntoIterator<Item = &'a Action>,
) -> BTreeMap<String, Mediation> {
    let mut chosen: BTreeMap<String, Mediation> = BTreeMap::new();
    for a in actions {
        let Some((name, m)) = Mediation::of(a) else {
            continue;
        };
        match chosen.get(&name) {
            Some(best) if best.preference(&m) != Ordering::Greater => {}
            _ => {
                chosen.insert(name, m);
            }
        }
    }
    chosen
}

/// True when `action` should be installed given the chosen mediations: unmediated actions
/// always are; mediated links only when their mediation is admitted.
pub fn is_selected(action: &Action, chosen: &BTreeMap<String, Mediation>) -> bool {
    match Mediation::of(action) {
        None => true,
        Some((name, m)) => chosen.get(&name).is_some_and(|c| c.admits(&m)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn links(lines: &[&str]) -> Vec<Action> {
        lines.iter().map(|l| Action::parse(l).unwrap()).collect()
    }

    fn winner(lines: &[&str]) -> Vec<String> {
        let acts = links(lines);
        let chosen = choose_mediations(&acts);
        acts.iter()
            .filter(|a| is_selected(a, &chosen))
            .map(|a| a.get("target").unwrap().to_owned())
            .collect()
    }

    #[test]
    fn priority_then_version_then_implementation() {
        // site beats vendor beats none, whatever the versions.
        assert_eq!(
            winner(&[
                "link path=usr/bin/vi target=a mediator=vi mediator-version=9",
                "link path=usr/bin/vi target=b mediator=vi mediator-version=1 mediator-priority=vendor",
                "link path=usr/bin/vi target=c mediator=vi mediator-version=2 mediator-priority=site",
            ]),
            ["c"]
        );
        // Greatest version first (1.10 > 1.9), an absent version last.
        assert_eq!(
            winner(&[
                "link path=p target=a mediator=m",
                "link path=p target=b mediator=m mediator-version=1.9",
                "link path=p target=c mediator=m mediator-version=1.10",
            ]),
            ["c"]
        );
        // Implementation names ascending (none first), then greatest implementation version.
        assert_eq!(
            winner(&[
                "link path=p target=a mediator=m mediator-implementation=vim",
                "link path=p target=b mediator=m mediator-implementation=nvi",
            ]),
            ["b"]
        );
        assert_eq!(
            winner(&[
                "link path=p target=a mediator=m mediator-implementation=vim",
                "link path=p target=b mediator=m",
            ]),
            ["b"]
        );
        assert_eq!(
            winner(&[
                "link path=p target=a mediator=m mediator-implementation=vim@7.4",
                "link path=p target=b mediator=m mediator-implementation=vim@8.2",
            ]),
            ["b"]
        );
    }

    #[test]
    fn all_links_of_the_chosen_mediation_are_kept() {
        let got = winner(&[
            "link path=usr/bin/python target=python3.9 mediator=python mediator-version=3.9",
            "link path=usr/bin/pydoc target=pydoc3.9 mediator=python mediator-version=3.9",
            "link path=usr/bin/python target=python3.11 mediator=python mediator-version=3.11",
            "link path=usr/bin/pydoc target=pydoc3.11 mediator=python mediator-version=3.11",
            "link path=usr/bin/other target=x",
            "hardlink path=usr/bin/h target=y mediator=h",
        ]);
        assert_eq!(got, ["python3.11", "pydoc3.11", "x", "y"]);
        // An unversioned implementation matches a versioned one.
        let chosen = Mediation::of(
            &Action::parse("link path=p target=a mediator=m mediator-implementation=vim").unwrap(),
        )
        .unwrap()
        .1;
        let offered = Mediation::of(
            &Action::parse("link path=p target=b mediator=m mediator-implementation=vim@8")
                .unwrap(),
        )
        .unwrap()
        .1;
        assert!(chosen.admits(&offered));
    }
}
