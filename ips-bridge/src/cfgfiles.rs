//! The image's user database (`etc/passwd`, `etc/shadow`, `etc/group`, `etc/ftpd/ftpusers`)
//! and how `user` and `group` actions change it, following pkg's `cfgfiles.py`,
//! `actions/user.py` and `actions/group.py`.
//!
//! A build lays down the files packages deliver (SUNWcs delivers `etc/passwd` and friends
//! with `preserve=true`), then applies the `group` and `user` actions with
//! [`UserDb::apply`], then resolves owner and group names with [`UserDb::uid`] and
//! [`UserDb::gid`].
//!
//! Where pkg is not deterministic this module is: pkg writes a group's member list from a
//! Python set (any order); here existing members keep their order and new ones are appended.
//! pkg stamps new shadow entries with today's day number; here the caller chooses it
//! ([`UserDb::set_lastchg`]).

use std::collections::BTreeMap;

use crate::action::{Action, ActionKind};

/// Why a `user` or `group` action could not be applied.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UserDbError {
    /// The action is not a user or group action, or lacks its key.
    #[error("{action}: not a user or group action")]
    NotAccountAction {
        /// The action.
        action: String,
    },
    /// A user's primary group does not exist.
    #[error("user {user}: {group} is an unknown or invalid group")]
    UnknownGroup {
        /// The user.
        user: String,
        /// The group.
        group: String,
    },
    /// No free system id below 100 is left.
    #[error("no free system {what} ids")]
    NoFreeId {
        /// `uid` or `gid`.
        what: &'static str,
    },
}

/// One colon-separated configuration file: records with fixed columns, other lines kept.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Table {
    sep: char,
    columns: &'static [&'static str],
    comment: &'static [char],
    lines: Vec<Line>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Line {
    Raw(String),
    Record(Vec<String>),
}

impl Table {
    fn parse(
        text: &str,
        sep: char,
        columns: &'static [&'static str],
        comment: &'static [char],
    ) -> Self {
        let mut t = Self {
            sep,
            columns,
            comment,
            lines: Vec::new(),
        };
        for line in text.lines() {
            if line.starts_with(comment) {
                t.lines.push(Line::Raw(line.to_owned()));
                continue;
            }
            let cols: Vec<String> = line.split(sep).map(str::to_owned).collect();
            if cols.len() == columns.len() {
                // A later record with the same key replaces the earlier one, as in pkg.
                if let Some(i) = t.position(&cols[0]) {
                    t.lines.remove(i);
                }
                t.lines.push(Line::Record(cols));
            } else {
                t.lines.push(Line::Raw(line.to_owned()));
            }
        }
        t
    }

    fn position(&self, key: &str) -> Option<usize> {
        self.lines
            .iter()
            .position(|l| matches!(l, Line::Record(c) if c[0] == key))
    }

    fn col(&self, name: &str) -> usize {
        self.columns
            .iter()
            .position(|c| *c == name)
            .expect("known column")
    }

    fn get(&self, key: &str) -> Option<BTreeMap<&'static str, String>> {
        let i = self.position(key)?;
        let Line::Record(c) = &self.lines[i] else {
            unreachable!("position finds records")
        };
        Some(
            self.columns
                .iter()
                .copied()
                .zip(c.iter().cloned())
                .collect(),
        )
    }

    fn records(&self) -> impl Iterator<Item = &Vec<String>> {
        self.lines.iter().filter_map(|l| match l {
            Line::Record(c) => Some(c),
            Line::Raw(_) => None,
        })
    }

    /// Replaces the record with the same key in place, or appends it.
    fn set(&mut self, values: &BTreeMap<&str, String>) {
        let rec: Vec<String> = self
            .columns
            .iter()
            .map(|c| values.get(c).cloned().unwrap_or_default())
            .collect();
        match self.position(&rec[0]) {
            Some(i) => self.lines[i] = Line::Record(rec),
            None => self.lines.push(Line::Record(rec)),
        }
    }

    fn remove(&mut self, key: &str) {
        if let Some(i) = self.position(key) {
            self.lines.remove(i);
        }
    }

    /// The first id below 100 not used in column `col` (pkg's `getnextuid`/`getnextgid`).
    fn next_free(&self, col: &str, what: &'static str) -> Result<String, UserDbError> {
        let i = self.col(col);
        (0..100)
            .map(|n: u32| n.to_string())
            .find(|n| !self.records().any(|r| r[i] == *n))
            .ok_or(UserDbError::NoFreeId { what })
    }

    fn text(&self) -> String {
        let mut out = String::new();
        for l in &self.lines {
            match l {
                Line::Raw(s) => out.push_str(s),
                Line::Record(c) => out.push_str(&c.join(&self.sep.to_string())),
            }
            out.push('\n');
        }
        out
    }
}

const PASSWD: &[&str] = &[
    "username",
    "password",
    "uid",
    "gid",
    "gcos-field",
    "home-dir",
    "login-shell",
];
const SHADOW: &[&str] = &[
    "username", "password", "lastchg", "min", "max", "warn", "inactive", "expire", "flag",
];
const GROUP: &[&str] = &["groupname", "password", "gid", "user-list"];
const FTPUSERS: &[&str] = &["username"];

/// Attributes whose value on disk wins over the action's for an existing user.
const USE_EXISTING: &[&str] = &[
    "password", "lastchg", "min", "max", "expire", "flag", "warn", "inactive",
];

/// The user database of an image. See the module documentation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UserDb {
    passwd: Table,
    shadow: Table,
    group: Table,
    ftpusers: Table,
    lastchg: String,
}

impl UserDb {
    /// Reads the four files' contents (pass `""` for a missing file).
    pub fn parse(passwd: &str, shadow: &str, group: &str, ftpusers: &str) -> Self {
        Self {
            passwd: Table::parse(passwd, ':', PASSWD, &['+', '-']),
            shadow: Table::parse(shadow, ':', SHADOW, &['+', '-']),
            group: Table::parse(group, ':', GROUP, &['+', '-']),
            ftpusers: Table::parse(ftpusers, ' ', FTPUSERS, &['#']),
            lastchg: "0".into(),
        }
    }

    /// The `lastchg` (days since 1970-01-01) written for new shadow entries; pkg uses the
    /// current day, reproducible builds a fixed one. Defaults to 0.
    pub fn set_lastchg(&mut self, days: u64) {
        self.lastchg = days.to_string();
    }

    /// The uid of a user.
    pub fn uid(&self, user: &str) -> Option<u32> {
        self.passwd.get(user)?.get("uid")?.parse().ok()
    }

    /// The gid of a group.
    pub fn gid(&self, group: &str) -> Option<u32> {
        self.group.get(group)?.get("gid")?.parse().ok()
    }

    /// The name of the group with `gid`.
    fn group_name(&self, gid: &str) -> Option<String> {
        let i = self.group.col("gid");
        self.group
            .records()
            .find(|r| r[i] == gid)
            .map(|r| r[0].clone())
    }

    /// The groups listing `user` as a member, sorted.
    fn groups_of(&self, user: &str) -> Vec<String> {
        let i = self.group.col("user-list");
        let mut out: Vec<String> = self
            .group
            .records()
            .filter(|r| r[i].split(',').any(|u| u == user))
            .map(|r| r[0].clone())
            .collect();
        out.sort();
        out
    }

    /// Applies `group` actions (in gid order, unspecified last) and then `user` actions (in
    /// uid order, unspecified last), as pkg orders them on install; other actions are
    /// ignored.
    pub fn apply<'a>(
        &mut self,
        actions: impl IntoIterator<Item = &'a Action>,
    ) -> Result<(), UserDbError> {
        let actions: Vec<&Action> = actions.into_iter().collect();
        let order = |a: &&Action, key: &str| -> u64 {
            a.get(key).and_then(|v| v.parse().ok()).unwrap_or(1024)
        };
        let mut groups: Vec<&Action> = actions
            .iter()
            .copied()
            .filter(|a| a.kind() == ActionKind::Group)
            .collect();
        groups.sort_by_key(|a| order(a, "gid"));
        let mut users: Vec<&Action> = actions
            .iter()
            .copied()
            .filter(|a| a.kind() == ActionKind::User)
            .collect();
        users.sort_by_key(|a| order(a, "uid"));
        for g in groups {
            self.add_group(g)?;
        }
        for u in users {
            self.add_user(u)?;
        }
        Ok(())
    }

    /// Installs one `group` action.
    pub fn add_group(&mut self, action: &Action) -> Result<(), UserDbError> {
        let Some(name) = action
            .get("groupname")
            .filter(|_| action.kind() == ActionKind::Group)
        else {
            return Err(UserDbError::NotAccountAction {
                action: action.to_string(),
            });
        };
        let mut template: BTreeMap<&str, String> = BTreeMap::new();
        template.insert("groupname", name.to_owned());
        if let Some(gid) = action.get("gid") {
            template.insert("gid", gid.to_owned());
        }
        if let Some(cur) = self.group.get(name) {
            if let Some(gid) = action.get("gid")
                && cur["gid"] != gid
            {
                // Rewrite the row with the new gid, and move users whose primary group it is.
                let old = cur["gid"].clone();
                template = cur.clone();
                template.insert("gid", gid.to_owned());
                let gi = self.passwd.col("gid");
                let users: Vec<String> = self
                    .passwd
                    .records()
                    .filter(|r| r[gi] == old)
                    .map(|r| r[0].clone())
                    .collect();
                for u in users {
                    let mut entry = self.passwd.get(&u).expect("listed above");
                    entry.insert("gid", gid.to_owned());
                    let entry: BTreeMap<&str, String> = entry.into_iter().collect();
                    self.passwd.set(&entry);
                }
            }
            if !cur["user-list"].is_empty() {
                template.insert("user-list", cur["user-list"].clone());
            }
        }
        // Missing columns take pkg's defaults: empty password, the next free gid (pkg does
        // this even for an existing group whose action names no gid), no members.
        if !template.contains_key("gid") {
            template.insert("gid", self.group.next_free("gid", "group")?);
        }
        self.group.set(&template);
        Ok(())
    }

    /// Installs one `user` action, merging with an existing entry as pkg does (the on-disk
    /// password, unless the action says `NP` or `*LK*`, and the on-disk aging fields win;
    /// supplementary groups are the union).
    pub fn add_user(&mut self, action: &Action) -> Result<(), UserDbError> {
        let Some(name) = action
            .get("username")
            .filter(|_| action.kind() == ActionKind::User)
        else {
            return Err(UserDbError::NotAccountAction {
                action: action.to_string(),
            });
        };
        let group = action.get("group").unwrap_or_default();
        let gid = self
            .group
            .get(group)
            .map(|g| g["gid"].clone())
            .ok_or_else(|| UserDbError::UnknownGroup {
                user: name.to_owned(),
                group: group.to_owned(),
            })?;

        // What is on disk now.
        let mut on_disk: BTreeMap<String, String> = BTreeMap::new();
        if let Some(p) = self.passwd.get(name) {
            on_disk.extend(p.into_iter().map(|(k, v)| (k.to_owned(), v)));
        }
        if let Some(s) = self.shadow.get(name) {
            on_disk.extend(s.into_iter().map(|(k, v)| (k.to_owned(), v)));
        }
        if let Some(g) = on_disk.get("gid").cloned() {
            match self.group_name(&g) {
                Some(n) => {
                    on_disk.insert("group".into(), n);
                }
                None => {
                    return Err(UserDbError::UnknownGroup {
                        user: name.to_owned(),
                        group: g,
                    });
                }
            }
        }
        let disk_groups = self.groups_of(name);

        // The action's values plus pkg's string defaults.
        let mut out: BTreeMap<String, String> = action
            .attrs()
            .iter()
            .filter(|(k, _)| k.as_str() != "group-list")
            .filter_map(|(k, v)| Some((k.clone(), v.first()?.clone())))
            .collect();
        out.insert("gid".into(), gid);
        for (k, v) in [
            ("password", "*LK*"),
            ("gcos-field", "& User"),
            ("home-dir", "/"),
            ("login-shell", ""),
            ("min", ""),
            ("max", ""),
            ("warn", ""),
            ("inactive", ""),
            ("expire", ""),
            ("flag", ""),
        ] {
            out.entry(k.into()).or_insert_with(|| v.into());
        }
        let mut group_list: Vec<String> = action.get_all("group-list").to_vec();
        for (k, v) in on_disk {
            if out.contains_key(&k) && !USE_EXISTING.contains(&k.as_str()) {
                continue;
            }
            if k == "password" && matches!(out[&k].as_str(), "NP" | "*LK*") {
                continue;
            }
            out.insert(k, v);
        }
        for g in disk_groups.iter() {
            if !group_list.contains(g) {
                group_list.push(g.clone());
            }
        }

        // passwd and shadow rows.
        if !out.contains_key("uid") {
            out.insert("uid".into(), self.passwd.next_free("uid", "user")?);
        }
        if !out.contains_key("lastchg") {
            out.insert("lastchg".into(), self.lastchg.clone());
        }
        let mut pw: BTreeMap<&str, String> = PASSWD
            .iter()
            .map(|c| (*c, out.get(*c).cloned().unwrap_or_default()))
            .collect();
        pw.insert("password", "x".into());
        self.passwd.set(&pw);
        let sh: BTreeMap<&str, String> = SHADOW
            .iter()
            .map(|c| (*c, out.get(*c).cloned().unwrap_or_default()))
            .collect();
        self.shadow.set(&sh);

        // Supplementary groups: remove from groups no longer listed, add to new ones.
        for g in &disk_groups {
            if !group_list.contains(g) {
                self.set_member(g, name, false);
            }
        }
        for g in &group_list {
            if !disk_groups.contains(g) {
                self.set_member(g, name, true);
            }
        }

        // ftpusers lists the users who may NOT use ftp.
        let allowed = out.get("ftpuser").is_none_or(|v| v == "true");
        let listed = self.ftpusers.get(name).is_some();
        if !allowed && !listed {
            let mut rec = BTreeMap::new();
            rec.insert("username", name.to_owned());
            self.ftpusers.set(&rec);
        } else if allowed && listed {
            self.ftpusers.remove(name);
        }
        Ok(())
    }

    fn set_member(&mut self, group: &str, user: &str, member: bool) {
        let mut rec = self.group.get(group).unwrap_or_else(|| {
            // pkg adds the user to a group it does not know, with an empty gid.
            GROUP.iter().map(|c| (*c, String::new())).collect()
        });
        rec.insert("groupname", group.to_owned());
        let mut users: Vec<String> = rec["user-list"]
            .replace(',', " ")
            .split_whitespace()
            .map(str::to_owned)
            .collect();
        users.retain(|u| u != user);
        if member {
            users.push(user.to_owned());
        }
        rec.insert("user-list", users.join(","));
        self.group.set(&rec);
    }

    /// `etc/passwd` text.
    pub fn passwd(&self) -> String {
        self.passwd.text()
    }

    /// `etc/shadow` text.
    pub fn shadow(&self) -> String {
        self.shadow.text()
    }

    /// `etc/group` text.
    pub fn group(&self) -> String {
        self.group.text()
    }

    /// `etc/ftpd/ftpusers` text.
    pub fn ftpusers(&self) -> String {
        self.ftpusers.text()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PASSWD_TXT: &str =
        "root:x:0:0:Super-User:/root:/usr/bin/bash\ndaemon:x:1:1::/:\nbin:x:2:2::/usr/bin:\n+\n";
    const SHADOW_TXT: &str = "root:$5$hash:6445::::::\ndaemon:NP:6445::::::\nbin:NP:6445::::::\n";
    const GROUP_TXT: &str = "root::0:\nother::1:root\nbin::2:root,daemon\nsys::3:root,bin\n";
    const FTP_TXT: &str = "# ftpusers\nroot\ndaemon\n";

    fn db() -> UserDb {
        let mut db = UserDb::parse(PASSWD_TXT, SHADOW_TXT, GROUP_TXT, FTP_TXT);
        db.set_lastchg(19000);
        db
    }

    fn acts(lines: &[&str]) -> Vec<Action> {
        lines.iter().map(|l| Action::parse(l).unwrap()).collect()
    }

    #[test]
    fn unchanged_files_round_trip() {
        let d = db();
        assert_eq!(d.passwd(), PASSWD_TXT);
        assert_eq!(d.shadow(), SHADOW_TXT);
        assert_eq!(d.group(), GROUP_TXT);
        assert_eq!(d.ftpusers(), FTP_TXT);
        assert_eq!((d.uid("bin"), d.gid("sys")), (Some(2), Some(3)));
    }

    #[test]
    fn new_group_and_user_with_pkg_defaults() {
        let mut d = db();
        d.apply(&acts(&[
            "user username=mongodb group=mongodb password=NP ftpuser=false gcos-field=\"MongoDB Reserved UID\" home-dir=/var/mongodb group-list=sys",
            "group groupname=mongodb gid=60",
            "group groupname=staff",
        ]))
        .unwrap();
        // Groups first (gid order, unspecified last): staff gets the first free gid, 4.
        assert_eq!(d.gid("mongodb"), Some(60));
        assert_eq!(d.gid("staff"), Some(4));
        // The user gets the first free uid below 100 (3) and the default shell.
        assert_eq!(d.uid("mongodb"), Some(3));
        assert!(
            d.passwd()
                .ends_with("+\nmongodb:x:3:60:MongoDB Reserved UID:/var/mongodb:\n")
        );
        assert!(d.shadow().ends_with("mongodb:NP:19000::::::\n"));
        assert!(d.group().contains("sys::3:root,bin,mongodb\n"));
        assert!(d.ftpusers().ends_with("daemon\nmongodb\n"));
    }

    #[test]
    fn existing_users_keep_on_disk_secrets_and_groups() {
        let mut d = db();
        d.apply(&acts(&[
            "user username=root group=root uid=0 password=secret gcos-field=Super-User home-dir=/root login-shell=/usr/bin/zsh ftpuser=true",
        ]))
        .unwrap();
        // The on-disk password and aging win; the shell follows the action; the user keeps
        // its supplementary groups; ftpuser=true removes it from ftpusers.
        assert!(
            d.passwd()
                .starts_with("root:x:0:0:Super-User:/root:/usr/bin/zsh\n")
        );
        assert!(d.shadow().starts_with("root:$5$hash:6445::::::\n"));
        assert!(d.group().contains("bin::2:root,daemon\n"));
        assert_eq!(d.ftpusers(), "# ftpusers\ndaemon\n");
        // NP or *LK* in the action replace the on-disk password.
        d.add_user(&acts(&["user username=daemon group=other uid=1 password=*LK*"])[0])
            .unwrap();
        assert!(d.shadow().contains("daemon:*LK*:6445::::::\n"));
        assert!(d.passwd().contains("daemon:x:1:1:& User:/:\n"));
    }

    #[test]
    fn changing_a_gid_moves_primary_members() {
        let mut d = db();
        d.add_group(&acts(&["group groupname=other gid=11"])[0])
            .unwrap();
        assert_eq!(d.gid("other"), Some(11));
        assert!(d.group().contains("other::11:root\n"));
        assert!(d.passwd().contains("daemon:x:1:11::/:\n"));
        // pkg quirk, kept: an existing group whose action names no gid gets the next free
        // one (and keeps its members).
        d.add_group(&acts(&["group groupname=sys"])[0]).unwrap();
        // (gid 1 is free again after the change above.)
        assert!(d.group().contains("sys::1:root,bin\n"));
    }

    #[test]
    fn errors_name_the_user_and_group() {
        let mut d = db();
        let e = d
            .add_user(&acts(&["user username=x group=nogroup"])[0])
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "user x: nogroup is an unknown or invalid group"
        );
        assert!(d.add_user(&acts(&["dir path=x"])[0]).is_err());
    }
}
