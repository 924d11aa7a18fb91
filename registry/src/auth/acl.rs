//! The access-control list: who (users, groups, anonymous callers, any authenticated user) may
//! do what (pull, push, delete) on which repositories (glob patterns). Parsed once from the
//! `[auth]` table; every bad entry is an error naming its key.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use validator::{DoubleStar, GlobSyntax};

use super::AuthError;

/// One thing a caller can do to a repository.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Action {
    /// Read manifests, blobs, tags and referrers (GET and HEAD).
    Pull,
    /// Upload blobs and put manifests (POST, PATCH, PUT).
    Push,
    /// Delete manifests, tags and blobs (DELETE).
    Delete,
}

impl Action {
    /// The action as written in scopes and in the configuration.
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Pull => "pull",
            Action::Push => "push",
            Action::Delete => "delete",
        }
    }

    /// Parses `pull`, `push` or `delete`.
    pub fn parse(s: &str) -> Option<Action> {
        match s {
            "pull" => Some(Action::Pull),
            "push" => Some(Action::Push),
            "delete" => Some(Action::Delete),
            _ => None,
        }
    }

    const ALL: [Action; 3] = [Action::Pull, Action::Push, Action::Delete];

    fn bit(self) -> u8 {
        match self {
            Action::Pull => 1,
            Action::Push => 2,
            Action::Delete => 4,
        }
    }
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A set of [`Action`]s.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Actions(u8);

impl Actions {
    /// No action.
    pub const NONE: Actions = Actions(0);
    /// Pull, push and delete.
    pub const ALL: Actions = Actions(7);

    /// Whether `a` is in the set.
    pub fn contains(self, a: Action) -> bool {
        self.0 & a.bit() != 0
    }

    /// The set with `a` added.
    pub fn with(self, a: Action) -> Actions {
        Actions(self.0 | a.bit())
    }

    /// Both sets together.
    pub fn union(self, o: Actions) -> Actions {
        Actions(self.0 | o.0)
    }

    /// What both sets hold.
    pub fn intersect(self, o: Actions) -> Actions {
        Actions(self.0 & o.0)
    }

    /// Whether the set is empty.
    pub fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The actions in a fixed order (pull, push, delete).
    pub fn iter(self) -> impl Iterator<Item = Action> {
        Action::ALL.into_iter().filter(move |a| self.contains(*a))
    }
}

impl FromIterator<Action> for Actions {
    fn from_iter<I: IntoIterator<Item = Action>>(iter: I) -> Self {
        iter.into_iter().fold(Actions::NONE, Actions::with)
    }
}

/// Who a request comes from, as far as the ACL is concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Who<'a> {
    /// No credentials.
    Anonymous,
    /// An authenticated user.
    User(&'a str),
}

/// Whom a rule applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// One user (`alice`).
    User(String),
    /// Every member of a group of the `groups` table (`group:dev`).
    Group(String),
    /// Everyone, with or without credentials (`anonymous`): what anonymous callers may do,
    /// authenticated users may do too.
    Anonymous,
    /// Every authenticated user (`*`).
    Authenticated,
}

/// A repository glob: `*` matches within one path component, `**` across components, every
/// other character itself. `team/*` matches `team/app` but not `team/app/cache`; `team/**`
/// matches both; `**` matches every repository.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pattern(String);

impl Pattern {
    /// Checks a pattern: repository-name characters (`a-z 0-9 . _ - /`) and `*`.
    pub fn parse(s: &str) -> Result<Pattern, String> {
        if s.is_empty() {
            return Err("an empty repository pattern matches nothing".to_owned());
        }
        if let Some(c) = s.chars().find(|c| {
            !(c.is_ascii_lowercase()
                || c.is_ascii_digit()
                || matches!(c, '.' | '_' | '-' | '/' | '*'))
        }) {
            return Err(format!(
                "{s:?} has {c:?}; patterns hold repository-name characters (a-z 0-9 . _ - /) and *"
            ));
        }
        if s.contains("***") {
            return Err(format!("{s:?}: use * (one component) or ** (any depth)"));
        }
        Ok(Pattern(s.to_owned()))
    }

    /// Whether `name` matches.
    pub fn matches(&self, name: &str) -> bool {
        glob(&self.0, name)
    }

    /// The pattern as written.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// Repository and tag globs of `registry.toml`: `*` within one path component, `**` across
/// components, every other character itself.
pub(crate) const REPOSITORY_GLOB: GlobSyntax = GlobSyntax {
    separator: Some(b'/'),
    question: false,
    double_star: DoubleStar::Crosses,
};

pub(crate) fn glob(pattern: &str, name: &str) -> bool {
    validator::glob_matches(pattern, name, REPOSITORY_GLOB)
}

/// One ACL entry: these subjects may do these actions on repositories matching these patterns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rule {
    /// Whom it applies to.
    pub subjects: Vec<Subject>,
    /// Which repositories.
    pub repositories: Vec<Pattern>,
    /// What they may do.
    pub actions: Actions,
}

/// Groups and rules. Rights only add up: there is no deny rule, so the order of rules does not
/// matter.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Acl {
    groups: BTreeMap<String, BTreeSet<String>>,
    rules: Vec<Rule>,
}

/// An `[[auth.acl]]` entry as written in the file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct FileRule {
    subjects: Vec<String>,
    repositories: Vec<String>,
    actions: Vec<String>,
}

impl Acl {
    /// Builds the ACL from the `groups` table and the `acl` entries, naming the key of the
    /// first bad entry (`auth.acl[2].subjects[0]`).
    pub(crate) fn from_file(
        groups: BTreeMap<String, Vec<String>>,
        rules: Vec<FileRule>,
    ) -> Result<Acl, AuthError> {
        let bad = |key: String, reason: String| AuthError::Setting { key, reason };
        let mut g = BTreeMap::new();
        for (name, members) in groups {
            if name.is_empty() || name.contains(':') {
                return Err(bad(
                    format!("auth.groups.{name}"),
                    "a group name is not empty and has no ':'".to_owned(),
                ));
            }
            g.insert(name, members.into_iter().collect());
        }
        let mut out = Vec::new();
        for (i, r) in rules.into_iter().enumerate() {
            let key = |field: &str, j: usize| format!("auth.acl[{i}].{field}[{j}]");
            if r.subjects.is_empty() || r.repositories.is_empty() || r.actions.is_empty() {
                return Err(bad(
                    format!("auth.acl[{i}]"),
                    "subjects, repositories and actions must each name at least one entry"
                        .to_owned(),
                ));
            }
            let mut subjects = Vec::new();
            for (j, s) in r.subjects.iter().enumerate() {
                let subject = match s.as_str() {
                    "anonymous" => Subject::Anonymous,
                    "*" => Subject::Authenticated,
                    s => match s.strip_prefix("group:") {
                        Some(group) if g.contains_key(group) => Subject::Group(group.to_owned()),
                        Some(group) => {
                            return Err(bad(
                                key("subjects", j),
                                format!("group {group:?} is not in the auth.groups table"),
                            ));
                        }
                        None if s.is_empty() || s.contains(':') => {
                            return Err(bad(
                                key("subjects", j),
                                format!(
                                    "{s:?} is no user name, \"group:NAME\", \"anonymous\" or \"*\""
                                ),
                            ));
                        }
                        None => Subject::User(s.to_owned()),
                    },
                };
                subjects.push(subject);
            }
            let mut repositories = Vec::new();
            for (j, p) in r.repositories.iter().enumerate() {
                repositories.push(Pattern::parse(p).map_err(|e| bad(key("repositories", j), e))?);
            }
            let mut actions = Actions::NONE;
            for (j, a) in r.actions.iter().enumerate() {
                actions = match (a.as_str(), Action::parse(a)) {
                    ("*", _) => Actions::ALL,
                    (_, Some(a)) => actions.with(a),
                    (a, None) => {
                        return Err(bad(
                            key("actions", j),
                            format!("{a:?} is not one of pull, push, delete, *"),
                        ));
                    }
                };
            }
            out.push(Rule {
                subjects,
                repositories,
                actions,
            });
        }
        Ok(Acl {
            groups: g,
            rules: out,
        })
    }

    fn applies(&self, s: &Subject, who: Who<'_>) -> bool {
        match (s, who) {
            (Subject::Anonymous, _) => true,
            (Subject::Authenticated, Who::User(_)) => true,
            (Subject::User(u), Who::User(w)) => u == w,
            (Subject::Group(g), Who::User(w)) => self.groups.get(g).is_some_and(|m| m.contains(w)),
            (_, Who::Anonymous) => false,
        }
    }

    /// What `who` may do on repository `repo`.
    pub fn granted(&self, who: Who<'_>, repo: &str) -> Actions {
        self.rules
            .iter()
            .filter(|r| r.subjects.iter().any(|s| self.applies(s, who)))
            .filter(|r| r.repositories.iter().any(|p| p.matches(repo)))
            .fold(Actions::NONE, |acc, r| acc.union(r.actions))
    }

    /// Whether any rule names `anonymous`: then callers without credentials may use `/v2/`
    /// and list the catalog (filtered to what they may pull).
    pub fn anonymous_allowed(&self) -> bool {
        self.rules
            .iter()
            .any(|r| r.subjects.contains(&Subject::Anonymous))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(subjects: &[&str], repositories: &[&str], actions: &[&str]) -> FileRule {
        let v = |x: &[&str]| x.iter().map(|s| s.to_string()).collect();
        FileRule {
            subjects: v(subjects),
            repositories: v(repositories),
            actions: v(actions),
        }
    }

    #[test]
    fn globs() {
        let cases = [
            ("team/*", "team/app", true),
            ("team/*", "team/app/cache", false),
            ("team/**", "team/app/cache", true),
            ("team/**", "team", false),
            ("**", "a/b/c", true),
            ("*", "a", true),
            ("*", "a/b", false),
            ("base-*/img", "base-x/img", true),
            ("base-*/img", "base-x/y/img", false),
            ("lib", "lib", true),
            ("lib", "library", false),
            ("**/cache", "a/b/cache", true),
        ];
        for (p, name, want) in cases {
            assert_eq!(Pattern::parse(p).unwrap().matches(name), want, "{p} {name}");
        }
        for bad in ["", "Team/*", "a b", "a/***", "a:b"] {
            assert!(Pattern::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn rights_add_up_and_anonymous_extends_to_users() {
        let groups = BTreeMap::from([("dev".to_owned(), vec!["bob".to_owned()])]);
        let acl = Acl::from_file(
            groups,
            vec![
                rule(&["anonymous"], &["public/**"], &["pull"]),
                rule(&["*"], &["shared"], &["pull"]),
                rule(&["alice"], &["**"], &["*"]),
                rule(&["group:dev"], &["team/*"], &["pull", "push"]),
            ],
        )
        .unwrap();
        let pull = Actions::NONE.with(Action::Pull);
        assert_eq!(acl.granted(Who::Anonymous, "public/x/y"), pull);
        assert_eq!(acl.granted(Who::Anonymous, "shared"), Actions::NONE);
        assert_eq!(acl.granted(Who::User("carol"), "public/x"), pull);
        assert_eq!(acl.granted(Who::User("carol"), "shared"), pull);
        assert_eq!(acl.granted(Who::User("carol"), "team/a"), Actions::NONE);
        assert_eq!(
            acl.granted(Who::User("bob"), "team/a"),
            pull.with(Action::Push)
        );
        assert_eq!(acl.granted(Who::User("alice"), "team/a"), Actions::ALL);
        assert!(acl.anonymous_allowed());
    }

    #[test]
    fn bad_entries_name_their_key() {
        let none = BTreeMap::new;
        let cases = [
            (
                rule(&["group:ops"], &["a"], &["pull"]),
                "auth.acl[0].subjects[0]",
            ),
            (rule(&["a:b"], &["a"], &["pull"]), "auth.acl[0].subjects[0]"),
            (
                rule(&["x"], &["a", "B"], &["pull"]),
                "auth.acl[0].repositories[1]",
            ),
            (
                rule(&["x"], &["a"], &["pull", "write"]),
                "auth.acl[0].actions[1]",
            ),
            (rule(&["x"], &[], &["pull"]), "auth.acl[0]"),
        ];
        for (r, key) in cases {
            match Acl::from_file(none(), vec![r]) {
                Err(AuthError::Setting { key: k, .. }) => assert_eq!(k, key),
                other => panic!("{key}: {other:?}"),
            }
        }
    }
}
