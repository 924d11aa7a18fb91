//! Catalog v1: `catalog.attrs` and the `catalog.<part>.<locale>` files, their signatures and
//! their byte-exact serialisation.
//!
//! pkg writes each file as compact JSON with sorted keys, non-ASCII escaped as upper-case
//! `\uXXXX` (python-rapidjson), plus a newline, and then splices
//! `,"_SIGNATURE":{"sha-1":<SHA-1 of that text>}` in before the final `}`. [`to_catalog_json`]
//! reproduces that text exactly, so the writer here emits signatures (they check out against
//! real pkg catalogs, see the tests). Image catalogs are written unsigned, as pkg does.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::{Map, Value};

use crate::action::{Action, ActionKind};
use crate::fmri::Fmri;
use crate::manifest::Manifest;
use crate::payload::{HashAlg, hash_hex};
use crate::version::Version;

mod update_log;
pub use update_log::{UpdateLog, UpdateOp, update_log_name};

/// Why a catalog file was rejected.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CatalogError {
    /// The file is not JSON.
    #[error("catalog file {file}: invalid json")]
    Json {
        /// The catalog file name.
        file: String,
        /// The parser's error.
        #[source]
        source: serde_json::Error,
    },
    /// The JSON does not have the structure catalog v1 requires.
    #[error("catalog file {file}: {message}")]
    Structure {
        /// The catalog file name.
        file: String,
        /// What is wrong.
        message: String,
    },
    /// A package without publisher or version cannot be catalogued.
    #[error("cannot catalog {fmri}: a publisher and a version are required")]
    Unversioned {
        /// The package.
        fmri: String,
    },
    /// The `_SIGNATURE` does not match the content.
    #[error("catalog file {file}: signature mismatch: expected {expected}, got {actual}")]
    Signature {
        /// The catalog file name.
        file: String,
        /// The recorded SHA-1.
        expected: String,
        /// The computed SHA-1.
        actual: String,
    },
}

/// Serialises JSON the way pkg's catalog writer does: compact, keys sorted by code point,
/// control characters and non-ASCII escaped with upper-case hex, then a newline.
///
/// Written by hand because serde_json's output cannot be configured to sort keys (our
/// workspace enables `preserve_order`) or to escape non-ASCII.
pub fn to_catalog_json(value: &Value) -> String {
    let mut out = String::new();
    write_json(&mut out, value);
    out.push('\n');
    out
}

fn write_json(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => {
            let _ = write!(out, "{n}");
        }
        Value::String(s) => write_str(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, x) in a.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_json(out, x);
            }
            out.push(']');
        }
        Value::Object(m) => {
            out.push('{');
            let mut keys: Vec<&String> = m.keys().collect();
            keys.sort();
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_str(out, k);
                out.push(':');
                write_json(out, &m[k]);
            }
            out.push('}');
        }
    }
}

fn write_str(out: &mut String, s: &str) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 || (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04X}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Writes a catalog file: without `_SIGNATURE` when `sign` is false, else with the signature
/// spliced in as pkg does. `value` must be an object and must not contain `_SIGNATURE`.
pub fn write_catalog_file(value: &Value, sign: bool) -> String {
    let text = to_catalog_json(value);
    if !sign {
        return text;
    }
    let sig = hash_hex(HashAlg::Sha1, text.as_bytes());
    let body = &text[..text.len() - 2]; // drop "}\n"
    let sep = if body == "{" { "" } else { "," };
    format!("{body}{sep}\"_SIGNATURE\":{{\"sha-1\":\"{sig}\"}}}}\n")
}

/// Checks a catalog file's `_SIGNATURE` on its bytes: the text before the last
/// `"_SIGNATURE":` member, closed with `}` and a newline, must hash to the recorded SHA-1.
/// Returns `Ok(false)` when the file has no signature (pkg then skips the check).
pub fn verify_signature(file: &str, bytes: &[u8]) -> Result<bool, CatalogError> {
    let value: Value = parse(file, bytes)?;
    let Some(expected) = value
        .get("_SIGNATURE")
        .and_then(|s| s.get("sha-1"))
        .and_then(Value::as_str)
    else {
        return Ok(false);
    };
    let text = std::str::from_utf8(bytes).map_err(|_| structure(file, "not utf-8"))?;
    let actual = unsigned_sha1(text)
        .ok_or_else(|| structure(file, "_SIGNATURE is not a top-level member written by pkg"))?;
    if actual != expected {
        return Err(CatalogError::Signature {
            file: file.to_owned(),
            expected: expected.to_owned(),
            actual,
        });
    }
    Ok(true)
}

/// The SHA-1 of a signed catalog file's text as it was before pkg spliced in its
/// `_SIGNATURE` member (the text before the last `"_SIGNATURE":`, without the comma, closed
/// with `}` and a newline). `None` when the text has no such member.
pub(crate) fn unsigned_sha1(text: &str) -> Option<String> {
    let at = text.rfind("\"_SIGNATURE\":")?;
    let head = text[..at].trim_end_matches(',');
    Some(hash_hex(HashAlg::Sha1, format!("{head}}}\n").as_bytes()))
}

fn parse(file: &str, bytes: &[u8]) -> Result<Value, CatalogError> {
    serde_json::from_slice(bytes).map_err(|source| CatalogError::Json {
        file: file.to_owned(),
        source,
    })
}

fn structure(file: &str, message: &str) -> CatalogError {
    CatalogError::Structure {
        file: file.to_owned(),
        message: message.to_owned(),
    }
}

/// The last-modified time and signature of one part or update log, from `catalog.attrs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartInfo {
    /// `last-modified`.
    pub last_modified: String,
    /// `signature-sha-1`, if signed.
    pub signature_sha1: Option<String>,
}

/// `catalog.attrs`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CatalogAttrs {
    /// `created`.
    pub created: String,
    /// `last-modified`.
    pub last_modified: String,
    /// `package-count`: distinct stems.
    pub package_count: u64,
    /// `package-version-count`: distinct FMRIs.
    pub package_version_count: u64,
    /// `parts`, by file name.
    pub parts: BTreeMap<String, PartInfo>,
    /// `updates`, by file name.
    pub updates: BTreeMap<String, PartInfo>,
    /// `version` (1).
    pub version: u64,
}

impl CatalogAttrs {
    /// Parses and, if signed, verifies `catalog.attrs`. All seven keys are required.
    pub fn parse(bytes: &[u8]) -> Result<Self, CatalogError> {
        const FILE: &str = "catalog.attrs";
        verify_signature(FILE, bytes)?;
        let v = parse(FILE, bytes)?;
        let s = |k: &str| -> Result<String, CatalogError> {
            v.get(k)
                .and_then(Value::as_str)
                .map(str::to_owned)
                .ok_or_else(|| structure(FILE, &format!("missing or invalid {k:?}")))
        };
        let n = |k: &str| -> Result<u64, CatalogError> {
            v.get(k)
                .and_then(Value::as_u64)
                .ok_or_else(|| structure(FILE, &format!("missing or invalid {k:?}")))
        };
        let infos = |k: &str| -> Result<BTreeMap<String, PartInfo>, CatalogError> {
            let m = v
                .get(k)
                .and_then(Value::as_object)
                .ok_or_else(|| structure(FILE, &format!("missing or invalid {k:?}")))?;
            m.iter()
                .map(|(name, info)| {
                    let lm = info
                        .get("last-modified")
                        .and_then(Value::as_str)
                        .ok_or_else(|| structure(FILE, &format!("{k} {name}: no last-modified")))?;
                    Ok((
                        name.clone(),
                        PartInfo {
                            last_modified: lm.to_owned(),
                            signature_sha1: info
                                .get("signature-sha-1")
                                .and_then(Value::as_str)
                                .map(str::to_owned),
                        },
                    ))
                })
                .collect()
        };
        let attrs = Self {
            created: s("created")?,
            last_modified: s("last-modified")?,
            package_count: n("package-count")?,
            package_version_count: n("package-version-count")?,
            parts: infos("parts")?,
            updates: infos("updates")?,
            version: n("version")?,
        };
        if attrs.version != 1 {
            return Err(structure(
                FILE,
                &format!("unsupported version {}", attrs.version),
            ));
        }
        Ok(attrs)
    }

    /// The JSON value (without `_SIGNATURE`).
    pub fn to_value(&self) -> Value {
        let infos = |m: &BTreeMap<String, PartInfo>| {
            Value::Object(
                m.iter()
                    .map(|(k, i)| {
                        let mut o = Map::new();
                        o.insert("last-modified".into(), i.last_modified.clone().into());
                        if let Some(s) = &i.signature_sha1 {
                            o.insert("signature-sha-1".into(), s.clone().into());
                        }
                        (k.clone(), Value::Object(o))
                    })
                    .collect(),
            )
        };
        let mut o = Map::new();
        o.insert("created".into(), self.created.clone().into());
        o.insert("last-modified".into(), self.last_modified.clone().into());
        o.insert("package-count".into(), self.package_count.into());
        o.insert(
            "package-version-count".into(),
            self.package_version_count.into(),
        );
        o.insert("parts".into(), infos(&self.parts));
        o.insert("updates".into(), infos(&self.updates));
        o.insert("version".into(), self.version.into());
        Value::Object(o)
    }
}

/// One package version in a catalog part.
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogEntry {
    /// Publisher.
    pub publisher: String,
    /// Stem.
    pub stem: String,
    /// The full version string as stored (e.g. `1.16.0,5.11-2016.1.1.0:20161224T161749Z`).
    pub version: String,
    /// The entry's other members (`signature-sha-1`, `actions`, `metadata`, ...).
    pub fields: Map<String, Value>,
}

impl CatalogEntry {
    /// The FMRI of this entry.
    pub fn fmri(&self) -> Result<Fmri, crate::fmri::FmriError> {
        Fmri::parse(&format!(
            "pkg://{}/{}@{}",
            self.publisher, self.stem, self.version
        ))
    }

    /// `signature-sha-1`: in the base part, the SHA-1 of the manifest file.
    pub fn signature_sha1(&self) -> Option<&str> {
        self.fields.get("signature-sha-1").and_then(Value::as_str)
    }

    /// `actions` (dependency and summary parts), as action strings.
    pub fn actions(&self) -> Vec<&str> {
        self.fields
            .get("actions")
            .and_then(Value::as_array)
            .map(|a| a.iter().filter_map(Value::as_str).collect())
            .unwrap_or_default()
    }
}

/// A catalog part file (`catalog.base.C` and friends).
#[derive(Debug, Clone, PartialEq)]
pub struct CatalogPart {
    name: String,
    entries: Vec<CatalogEntry>,
}

impl CatalogPart {
    /// An empty part named `name` (which must start with `catalog.`).
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            entries: Vec::new(),
        }
    }

    /// Parses a part file, verifying its signature if it has one.
    pub fn parse(name: &str, bytes: &[u8]) -> Result<Self, CatalogError> {
        if !name.starts_with("catalog.") {
            return Err(structure(name, "part names must start with \"catalog.\""));
        }
        verify_signature(name, bytes)?;
        let v = parse(name, bytes)?;
        let top = v
            .as_object()
            .ok_or_else(|| structure(name, "not a json object"))?;
        let mut entries = Vec::new();
        for (publisher, stems) in top {
            if publisher.starts_with('_') {
                continue;
            }
            let stems = stems
                .as_object()
                .ok_or_else(|| structure(name, &format!("publisher {publisher}: not an object")))?;
            for (stem, versions) in stems {
                let versions = versions.as_array().ok_or_else(|| {
                    structure(name, &format!("{publisher}/{stem}: not a list of versions"))
                })?;
                for e in versions {
                    let mut fields = e.as_object().cloned().ok_or_else(|| {
                        structure(name, &format!("{publisher}/{stem}: entry is not an object"))
                    })?;
                    let version = match fields.remove("version") {
                        Some(Value::String(v)) => v,
                        _ => {
                            return Err(structure(
                                name,
                                &format!("{publisher}/{stem}: entry without version"),
                            ));
                        }
                    };
                    entries.push(CatalogEntry {
                        publisher: publisher.clone(),
                        stem: stem.clone(),
                        version,
                        fields,
                    });
                }
            }
        }
        Ok(Self {
            name: name.to_owned(),
            entries,
        })
    }

    /// The part's file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// All entries, publisher by publisher and stem by stem.
    pub fn entries(&self) -> &[CatalogEntry] {
        &self.entries
    }

    /// Adds an entry (kept in ascending version order within its stem when written).
    pub fn push(&mut self, entry: CatalogEntry) {
        self.entries.push(entry);
    }

    /// Removes every entry for `fmri`'s publisher, stem and version.
    pub fn remove(&mut self, publisher: &str, stem: &str, version: &Version) {
        self.entries.retain(|e| {
            !(e.publisher == publisher
                && e.stem == stem
                && Version::parse(&e.version).is_ok_and(|v| v == *version))
        });
    }

    /// The JSON value (without `_SIGNATURE`): versions of a stem ascend by pkg's ordering.
    pub fn to_value(&self) -> Value {
        let mut top: BTreeMap<&str, BTreeMap<&str, Vec<&CatalogEntry>>> = BTreeMap::new();
        for e in &self.entries {
            top.entry(&e.publisher)
                .or_default()
                .entry(&e.stem)
                .or_default()
                .push(e);
        }
        let mut out = Map::new();
        for (publisher, stems) in top {
            let mut pm = Map::new();
            for (stem, mut list) in stems {
                list.sort_by(|a, b| {
                    match (Version::parse(&a.version), Version::parse(&b.version)) {
                        (Ok(x), Ok(y)) => x.cmp(&y),
                        _ => a.version.cmp(&b.version),
                    }
                });
                let arr = list
                    .into_iter()
                    .map(|e| {
                        let mut o = e.fields.clone();
                        o.insert("version".into(), e.version.clone().into());
                        Value::Object(o)
                    })
                    .collect();
                pm.insert(stem.to_owned(), Value::Array(arr));
            }
            out.insert(publisher.to_owned(), Value::Object(pm));
        }
        Value::Object(out)
    }

    /// The file text, signed or not.
    pub fn to_file(&self, sign: bool) -> String {
        write_catalog_file(&self.to_value(), sign)
    }

    /// Distinct stems and distinct versions, for `package-count` and
    /// `package-version-count`.
    pub fn counts(&self) -> (u64, u64) {
        let stems: std::collections::BTreeSet<(&str, &str)> = self
            .entries
            .iter()
            .map(|e| (e.publisher.as_str(), e.stem.as_str()))
            .collect();
        (stems.len() as u64, self.entries.len() as u64)
    }
}

/// Which part a `set` or `depend` action of a manifest goes to, as pkg (OpenIndiana's
/// `catalog.py`) splits them: all `depend` actions and the `set` actions whose name starts
/// with `variant`, `facet` or `pkg.depend.`, or is `pkg.obsolete` or `pkg.renamed`, go to the
/// dependency part; the other `set` actions go to the summary part, except `fmri`,
/// `pkg.fmri` and locale-specific ones (`name:locale`, which belong to that locale's part).
/// (Oracle's newer pkg also routes `pkg.legacy` to the dependency part.)
pub fn part_for(action: &Action) -> Option<&'static str> {
    match action.kind() {
        ActionKind::Depend => Some("catalog.dependency.C"),
        ActionKind::Set => {
            let name = action.get("name")?;
            if name.starts_with("variant")
                || name.starts_with("facet")
                || name.starts_with("pkg.depend.")
                || matches!(name, "pkg.obsolete" | "pkg.renamed")
            {
                Some("catalog.dependency.C")
            } else if matches!(name, "fmri" | "pkg.fmri") || name.contains(':') {
                None
            } else {
                Some("catalog.summary.C")
            }
        }
        _ => None,
    }
}

/// A whole catalog: attrs plus the base, dependency and summary parts.
#[derive(Debug, Clone, PartialEq)]
pub struct Catalog {
    /// `catalog.base.C`.
    pub base: CatalogPart,
    /// `catalog.dependency.C`.
    pub dependency: CatalogPart,
    /// `catalog.summary.C`.
    pub summary: CatalogPart,
    /// `created` of the catalog (kept when updating).
    pub created: Option<String>,
}

impl Default for Catalog {
    fn default() -> Self {
        Self {
            base: CatalogPart::new("catalog.base.C"),
            dependency: CatalogPart::new("catalog.dependency.C"),
            summary: CatalogPart::new("catalog.summary.C"),
            created: None,
        }
    }
}

impl Catalog {
    /// Adds (or replaces) a package: its FMRI (with publisher and full version), the
    /// manifest, and the manifest file's bytes (their SHA-1 becomes `signature-sha-1`).
    pub fn add(
        &mut self,
        fmri: &Fmri,
        manifest: &Manifest,
        manifest_bytes: &[u8],
    ) -> Result<(), CatalogError> {
        let (Some(publisher), Some(version)) = (fmri.publisher(), fmri.version()) else {
            return Err(CatalogError::Unversioned {
                fmri: fmri.to_string(),
            });
        };
        let publisher = publisher.to_owned();
        let stem = fmri.stem().to_owned();
        for part in [&mut self.base, &mut self.dependency, &mut self.summary] {
            part.remove(&publisher, &stem, version);
        }
        let entry = |fields: Map<String, Value>| CatalogEntry {
            publisher: publisher.clone(),
            stem: stem.clone(),
            version: version.to_string(),
            fields,
        };
        let mut base = Map::new();
        base.insert(
            "signature-sha-1".into(),
            hash_hex(HashAlg::Sha1, manifest_bytes).into(),
        );
        self.base.push(entry(base));
        let mut dep = Vec::new();
        let mut sum = Vec::new();
        // pkg lists all depend actions before the set actions, each in manifest order.
        let ordered = manifest
            .by_kind(ActionKind::Depend)
            .chain(manifest.by_kind(ActionKind::Set));
        for a in ordered {
            match part_for(a) {
                Some("catalog.dependency.C") => dep.push(Value::String(a.to_string())),
                Some(_) => sum.push(Value::String(a.to_string())),
                None => {}
            }
        }
        for (part, actions) in [(&mut self.dependency, dep), (&mut self.summary, sum)] {
            if !actions.is_empty() {
                let mut m = Map::new();
                m.insert("actions".into(), Value::Array(actions));
                part.push(entry(m));
            }
        }
        Ok(())
    }

    /// The four files (`catalog.attrs` first) with their contents. Parts are signed when
    /// `sign` is true; `now` is the catalog time (see [`catalog_time`]). Every part is marked
    /// modified at `now` and no update log is listed: a new catalog, as `pkgrepo rebuild`
    /// writes one.
    pub fn files(&self, now: &str, sign: bool) -> Vec<(String, String)> {
        self.write_files(now, sign, None, BTreeMap::new())
    }

    /// The files (`catalog.attrs` first) after a change made at `now` to the catalog
    /// `previous` describes (`None`: there was none), as pkg's server writes them: the base
    /// part and the parts that have entries or existed before; the parts in `changed` are
    /// marked modified at `now`, the others keep their last-modified from `previous`,
    /// `created` stays, and `updates` (the update logs, the one written at `now` included,
    /// see [`UpdateLog`]) are listed. Signed.
    pub fn files_after_change(
        &self,
        now: &str,
        previous: Option<&CatalogAttrs>,
        changed: &[&str],
        updates: BTreeMap<String, PartInfo>,
    ) -> Vec<(String, String)> {
        self.write_files(now, true, previous.map(|p| (p, changed)), updates)
    }

    fn write_files(
        &self,
        now: &str,
        sign: bool,
        previous: Option<(&CatalogAttrs, &[&str])>,
        updates: BTreeMap<String, PartInfo>,
    ) -> Vec<(String, String)> {
        let parts = [&self.base, &self.dependency, &self.summary];
        let mut out = Vec::new();
        let mut infos = BTreeMap::new();
        // After a change, as pkg's server: a part exists once it had an entry (the base part
        // always). A client holding the catalog cannot refresh incrementally when a part
        // appears, so an empty one is not written early.
        let parts = parts.into_iter().filter(|p| {
            previous.is_none_or(|(attrs, _)| {
                p.name() == "catalog.base.C"
                    || !p.entries().is_empty()
                    || attrs.parts.contains_key(p.name())
            })
        });
        for p in parts {
            let text = p.to_file(sign);
            let sig = sign.then(|| signature_of(&text));
            // A part this change left alone keeps the time it last changed: a client's
            // incremental refresh reads it to pick the update logs it needs.
            let last_modified = previous
                .filter(|(_, changed)| !changed.contains(&p.name()))
                .and_then(|(attrs, _)| attrs.parts.get(p.name()))
                .map_or_else(|| now.to_owned(), |i| i.last_modified.clone());
            infos.insert(
                p.name().to_owned(),
                PartInfo {
                    last_modified,
                    signature_sha1: sig,
                },
            );
            out.push((p.name().to_owned(), text));
        }
        let (stems, versions) = self.base.counts();
        let created = previous
            .map(|(attrs, _)| attrs.created.clone())
            .or_else(|| self.created.clone())
            .unwrap_or_else(|| now.to_owned());
        let attrs = CatalogAttrs {
            created,
            last_modified: now.to_owned(),
            package_count: stems,
            package_version_count: versions,
            parts: infos,
            updates,
            version: 1,
        };
        out.insert(
            0,
            (
                "catalog.attrs".to_owned(),
                write_catalog_file(&attrs.to_value(), sign),
            ),
        );
        out
    }

    /// What each part holds for one package version, by part name: the entry with its
    /// `version`, as an update log records it. Parts without an entry are left out.
    pub fn entries_of(&self, publisher: &str, stem: &str, version: &Version) -> Map<String, Value> {
        let mut out = Map::new();
        for part in [&self.base, &self.dependency, &self.summary] {
            let found = part.entries().iter().find(|e| {
                e.publisher == publisher
                    && e.stem == stem
                    && Version::parse(&e.version).is_ok_and(|v| v == *version)
            });
            if let Some(e) = found {
                let mut o = e.fields.clone();
                o.insert("version".into(), e.version.clone().into());
                out.insert(part.name().to_owned(), Value::Object(o));
            }
        }
        out
    }
}

/// The `_SIGNATURE` SHA-1 of a file [`write_catalog_file`] signed.
fn signature_of(text: &str) -> String {
    let v: Value = serde_json::from_str(text).expect("we wrote valid json");
    v["_SIGNATURE"]["sha-1"]
        .as_str()
        .expect("signed")
        .to_owned()
}

/// Formats a time as a catalog timestamp, `YYYYMMDDTHHMMSS.ffffffZ` (UTC).
pub fn catalog_time(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    let secs = d.as_secs();
    let (days, rem) = (secs / 86_400, secs % 86_400);
    let (y, m, day) = civil_from_days(days as i64);
    format!(
        "{y:04}{m:02}{day:02}T{:02}{:02}{:02}.{:06}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60,
        d.subsec_micros()
    )
}

/// Days since 1970-01-01 to (year, month, day), proleptic Gregorian (H. Hinnant's method).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_like_rapidjson() {
        let v: Value = serde_json::json!({"b": "é\u{1F600}\"\\/\n\u{1}", "a": [1, true, null]});
        assert_eq!(
            to_catalog_json(&v),
            "{\"a\":[1,true,null],\"b\":\"\\u00E9\\uD83D\\uDE00\\\"\\\\/\\n\\u0001\"}\n"
        );
    }

    #[test]
    fn signs_and_verifies_empty_and_full_objects() {
        let empty = write_catalog_file(&serde_json::json!({}), true);
        assert_eq!(
            empty,
            format!(
                "{{\"_SIGNATURE\":{{\"sha-1\":\"{}\"}}}}\n",
                hash_hex(HashAlg::Sha1, b"{}\n")
            )
        );
        assert!(verify_signature("catalog.base.C", empty.as_bytes()).unwrap());
        let full = write_catalog_file(&serde_json::json!({"p": {"s": []}}), true);
        assert!(verify_signature("catalog.base.C", full.as_bytes()).unwrap());
        let tampered = full.replace("\"s\"", "\"t\"");
        assert!(matches!(
            verify_signature("catalog.base.C", tampered.as_bytes()),
            Err(CatalogError::Signature { .. })
        ));
        assert!(!verify_signature("x", b"{\"a\":1}\n").unwrap());
    }

    #[test]
    fn times() {
        assert_eq!(catalog_time(UNIX_EPOCH), "19700101T000000.000000Z");
        let t = UNIX_EPOCH + std::time::Duration::from_micros(1_482_595_688_632_593);
        assert_eq!(catalog_time(t), "20161224T160808.632593Z");
        let t = UNIX_EPOCH + std::time::Duration::from_secs(951_782_400); // 2000-02-29
        assert_eq!(catalog_time(t), "20000229T000000.000000Z");
    }

    #[test]
    fn splits_actions_into_parts() {
        let m = Manifest::parse(
            "set name=pkg.fmri value=pkg://p/a@1.0-1:20240101T000000Z\nset name=pkg.summary value=x\nset name=variant.arch value=i386\nset name=pkg.obsolete value=true\nset name=pkg.depend.runpath value=x\ndepend fmri=b type=require\ndir path=x mode=0755 owner=root group=bin\nset name=pkg.summary:de value=y\n",
        )
        .unwrap();
        let parts: Vec<_> = m.actions().iter().map(part_for).collect();
        assert_eq!(
            parts,
            [
                None,
                Some("catalog.summary.C"),
                Some("catalog.dependency.C"),
                Some("catalog.dependency.C"),
                Some("catalog.dependency.C"),
                Some("catalog.dependency.C"),
                None,
                None
            ]
        );
        // Depend actions come first in the dependency part, as in real catalogs.
        let f = Fmri::parse("pkg://p/a@1.0-1:20240101T000000Z").unwrap();
        let mut c = Catalog::default();
        c.add(&f, &m, b"").unwrap();
        let actions = c.dependency.entries()[0].actions();
        assert_eq!(actions[0], "depend fmri=b type=require");
        assert_eq!(actions[1], "set name=variant.arch value=i386");
        assert_eq!(
            c.summary.entries()[0].actions(),
            ["set name=pkg.summary value=x"]
        );
    }

    #[test]
    fn catalog_orders_versions_and_counts() {
        let mut c = Catalog::default();
        for v in [
            "1.10-1:20240101T000000Z",
            "1.2-1:20240101T000000Z",
            "1.2-1:20230101T000000Z",
        ] {
            let f = Fmri::parse(&format!("pkg://p/a@{v}")).unwrap();
            let m = Manifest::parse(&format!("set name=pkg.fmri value={f}\n")).unwrap();
            c.add(&f, &m, m.to_string().as_bytes()).unwrap();
        }
        let f = Fmri::parse("pkg://p/b@1-1:20240101T000000Z").unwrap();
        c.add(&f, &Manifest::new(), b"").unwrap();
        // Re-adding replaces; unpublished FMRIs are refused.
        assert!(
            c.add(&Fmri::parse("a@1").unwrap(), &Manifest::new(), b"")
                .is_err()
        );
        c.add(&f, &Manifest::new(), b"").unwrap();
        let files = c.files("20240101T000000.000000Z", true);
        let base = CatalogPart::parse("catalog.base.C", files[1].1.as_bytes()).unwrap();
        let versions: Vec<_> = base.entries().iter().map(|e| e.version.as_str()).collect();
        assert_eq!(
            versions,
            [
                "1.2,5.11-1:20230101T000000Z",
                "1.2,5.11-1:20240101T000000Z",
                "1.10,5.11-1:20240101T000000Z",
                "1,5.11-1:20240101T000000Z"
            ]
        );
        let attrs = CatalogAttrs::parse(files[0].1.as_bytes()).unwrap();
        assert_eq!((attrs.package_count, attrs.package_version_count), (2, 4));
        assert_eq!(
            attrs.parts["catalog.base.C"].signature_sha1.as_deref(),
            Some(hash_hex(HashAlg::Sha1, base.to_file(false).as_bytes()).as_str())
        );
        // Summary and dependency parts have no entries for packages without such actions.
        assert!(files[2].1.starts_with("{\"_SIGNATURE\""));
    }
}
