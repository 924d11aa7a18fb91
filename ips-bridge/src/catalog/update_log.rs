//! Catalog update logs (`update.YYYYMMDDTHHZ.<locale>`): the changes made to a catalog, hour
//! by hour, that let a client refresh its copy incrementally.

use serde_json::{Map, Value};

use super::{CatalogError, parse, signature_of, structure, verify_signature, write_catalog_file};

/// What an update log records a package version for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UpdateOp {
    /// The package was added to the catalog (`op-type` `add`).
    Add,
    /// The package was removed from the catalog (`op-type` `remove`).
    Remove,
}

/// The name of the update log for changes made at `op_time` (a [`catalog_time`](super::catalog_time)) to the
/// parts of `locale`: pkg keeps one log per hour and locale, `update.YYYYMMDDTHHZ.C`.
pub fn update_log_name(op_time: &str, locale: &str) -> String {
    let hour = op_time.get(..11).unwrap_or(op_time);
    format!("update.{hour}Z.{locale}")
}

/// A catalog update log (`update.YYYYMMDDTHHZ.C`): every change made to the catalog in that
/// hour, package by package, so a client that has the catalog of an hour before can bring it
/// up to date without fetching whole parts. Each record is the package's entries in the
/// parts as they were added (or removed), by part name, with `op-time`, `op-type` and
/// `version`; `catalog.attrs` lists the log under `updates` with its signature and the time
/// of its last record. Signed like the parts.
#[derive(Debug, Clone, PartialEq)]
pub struct UpdateLog {
    name: String,
    data: Map<String, Value>,
}

impl UpdateLog {
    /// An empty log named `name` (see [`update_log_name`]).
    pub fn new(name: &str) -> Self {
        Self {
            name: name.to_owned(),
            data: Map::new(),
        }
    }

    /// Parses a log file, verifying its signature if it has one.
    pub fn parse(name: &str, bytes: &[u8]) -> Result<Self, CatalogError> {
        if !name.starts_with("update.") {
            return Err(structure(
                name,
                "update log names must start with \"update.\"",
            ));
        }
        verify_signature(name, bytes)?;
        let mut data = match parse(name, bytes)? {
            Value::Object(m) => m,
            _ => return Err(structure(name, "not a json object")),
        };
        data.remove("_SIGNATURE");
        for (publisher, stems) in &data {
            let ok = publisher.starts_with('_')
                || stems
                    .as_object()
                    .is_some_and(|s| s.values().all(Value::is_array));
            if !ok {
                return Err(structure(
                    name,
                    &format!("publisher {publisher}: not an object of lists"),
                ));
            }
        }
        Ok(Self {
            name: name.to_owned(),
            data,
        })
    }

    /// The log's file name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Records that `op` happened to a package version at `op_time`, with its part entries
    /// (from [`Catalog::entries_of`](super::Catalog::entries_of)).
    pub fn record(
        &mut self,
        publisher: &str,
        stem: &str,
        version: &str,
        op: UpdateOp,
        op_time: &str,
        parts: Map<String, Value>,
    ) {
        let mut entry = parts;
        entry.insert("op-time".into(), op_time.into());
        let op = match op {
            UpdateOp::Add => "add",
            UpdateOp::Remove => "remove",
        };
        entry.insert("op-type".into(), op.into());
        entry.insert("version".into(), version.into());
        let stems = self
            .data
            .entry(publisher.to_owned())
            .or_insert_with(|| Value::Object(Map::new()));
        let list = stems
            .as_object_mut()
            .expect("checked when parsed")
            .entry(stem.to_owned())
            .or_insert_with(|| Value::Array(Vec::new()));
        list.as_array_mut()
            .expect("checked when parsed")
            .push(Value::Object(entry));
    }

    /// Every record, in the order written: (publisher, stem, record).
    pub fn records(&self) -> Vec<(&str, &str, &Map<String, Value>)> {
        let mut out = Vec::new();
        for (publisher, stems) in self.data.iter().filter(|(p, _)| !p.starts_with('_')) {
            for (stem, list) in stems.as_object().into_iter().flatten() {
                for r in list.as_array().into_iter().flatten() {
                    if let Some(r) = r.as_object() {
                        out.push((publisher.as_str(), stem.as_str(), r));
                    }
                }
            }
        }
        out
    }

    /// The signed file text and its signature (for `catalog.attrs`' `updates`).
    pub fn to_file(&self) -> (String, String) {
        let text = write_catalog_file(&Value::Object(self.data.clone()), true);
        let sig = signature_of(&text);
        (text, sig)
    }
}
