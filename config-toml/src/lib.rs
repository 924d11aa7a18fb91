//! The toolchain's TOML configuration files (`image.toml`, `worker.toml`, zone manifests, the
//! registry's configuration) read into typed structs, with one error shape for all of them:
//! the line, the dotted key (`config.stop_timeout`, `limits.cpu`) and what was expected in the
//! words a person writing the file uses ("a whole number", "a table"), never serde's type
//! names (`u32`, `struct RawConfig`).
//!
//! - [`from_str`] parses and deserializes; its [`TomlError`] carries [`TomlError::line`],
//!   [`TomlError::key`] and the message. A caller adds the file name.
//! - [`Hints`] lets a caller say what a key means in user words ("seconds, a whole number"),
//!   added to any type error on that key.
//! - [`line_of`] finds the line a key is written on, for the caller's own checks of values
//!   that parsed but are out of range.
//! - [`units`]: the one syntax for durations (`"90s"`, `"15m"`) and sizes (`"512MiB"`,
//!   `"1GiB"`) in every file and flag, with serde helpers that also take the legacy integer.
#![deny(missing_docs)]

use std::fmt;

pub mod units;
pub use units::{
    ByteSize, HumanDuration, UnitError, duration, format_duration, format_size, parse_duration,
    parse_size, size,
};

use serde::de::DeserializeOwned;

/// A key's meaning in user words, added to type errors on it: `("config.stop_timeout",
/// "seconds, a whole number such as 30")`.
pub type Hints<'a> = &'a [(&'a str, &'a str)];

/// A TOML file could not be read into its configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub struct TomlError {
    /// 1-based line of the offending key or value, when known.
    pub line: Option<usize>,
    /// The dotted key, when the error is about one (`None`: the document's syntax).
    pub key: Option<String>,
    /// What is wrong, in user words.
    pub message: String,
}

impl fmt::Display for TomlError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(l) = self.line {
            write!(f, "line {l}: ")?;
        }
        if let Some(k) = &self.key {
            write!(f, "{k}: ")?;
        }
        f.write_str(&self.message)
    }
}

/// Parses `text` as TOML and deserializes it, naming the key and line of the first problem.
pub fn from_str<T: DeserializeOwned>(text: &str, hints: Hints<'_>) -> Result<T, TomlError> {
    let de = toml::Deserializer::parse(text).map_err(|e| TomlError {
        line: e.span().map(|s| line_at(text, s.start)),
        key: None,
        message: e.message().trim_end().to_owned(),
    })?;
    serde_path_to_error::deserialize(de).map_err(|e| {
        let mut path: Vec<String> = e
            .path()
            .iter()
            .filter_map(|seg| match seg {
                serde_path_to_error::Segment::Seq { index } => Some(index.to_string()),
                serde_path_to_error::Segment::Map { key } => Some(key.clone()),
                serde_path_to_error::Segment::Enum { variant } => Some(variant.clone()),
                serde_path_to_error::Segment::Unknown => None,
            })
            .collect();
        let inner = e.inner();
        let raw = inner.message().trim_end();
        let (message, missing) = user_words(raw);
        if let Some(m) = missing {
            path.push(m);
        }
        let key = (!path.is_empty()).then(|| path.join("."));
        let line = inner
            .span()
            .map(|s| line_at(text, s.start))
            .or_else(|| key.as_deref().and_then(|k| line_of(text, k)));
        let hint = key
            .as_deref()
            .and_then(|k| hints.iter().find(|(h, _)| *h == k))
            .map(|(_, h)| *h);
        let message = match hint {
            Some(h) if raw.starts_with("invalid type") || raw.starts_with("invalid value") => {
                format!("{message} ({h})")
            }
            _ => message,
        };
        TomlError { line, key, message }
    })
}

/// serde's message in user words, and the name of a missing or repeated key (to add to the
/// path).
fn user_words(raw: &str) -> (String, Option<String>) {
    if let Some(rest) = raw.strip_prefix("missing field `") {
        let name = rest.trim_end_matches('`').to_owned();
        return ("missing; this key is required".to_owned(), Some(name));
    }
    if let Some(rest) = raw.strip_prefix("duplicate field `") {
        let name = rest.trim_end_matches('`').to_owned();
        return (
            "given twice (a key and its older name are one setting); keep one".to_owned(),
            Some(name),
        );
    }
    if let Some(rest) = raw.strip_prefix("unknown field `") {
        let (name, tail) = rest.split_once('`').unwrap_or((rest, ""));
        let known = tail
            .trim_start_matches(", expected ")
            .trim_start_matches("one of ");
        return (
            if known.is_empty() || known.starts_with("there are no fields") {
                format!("unknown key `{name}`")
            } else {
                format!("unknown key `{name}`; the keys here are {known}")
            },
            None,
        );
    }
    if let Some(rest) = raw.strip_prefix("unknown variant `") {
        let (value, tail) = rest.split_once('`').unwrap_or((rest, ""));
        let known = tail
            .trim_start_matches(", expected ")
            .trim_start_matches("one of ")
            .replace('`', "\"");
        return (format!("unknown value \"{value}\"; expected {known}"), None);
    }
    for prefix in ["invalid type: ", "invalid value: "] {
        if let Some(rest) = raw.strip_prefix(prefix)
            && let Some((found, expected)) = rest.rsplit_once(", expected ")
        {
            return (
                format!(
                    "expected {}, found {}",
                    expected_words(expected),
                    found_words(found)
                ),
                None,
            );
        }
    }
    (raw.to_owned(), None)
}

/// serde's "expected" phrase for a Rust type, as a person writing the file says it.
fn expected_words(e: &str) -> String {
    let e = e.trim();
    match e {
        "u8" | "u16" | "u32" | "u64" | "u128" | "usize" => "a whole number (0 or more)".into(),
        "i8" | "i16" | "i32" | "i64" | "i128" | "isize" => "a whole number".into(),
        "f32" | "f64" => "a number".into(),
        "a boolean" => "true or false".into(),
        "a sequence" => "an array [ … ]".into(),
        "a map" => "a table".into(),
        "a string" | "a character" => "a string in quotes".into(),
        _ if e.starts_with("struct ") => "a table".into(),
        _ if e.starts_with("a sequence") => "an array [ … ]".into(),
        _ => e.to_owned(),
    }
}

/// serde's "found" phrase (`string "25s"`, ``integer `5` ``, `sequence`) as user words.
fn found_words(f: &str) -> String {
    let f = f.trim().replace('`', "");
    if let Some(s) = f.strip_prefix("string ") {
        return format!("the string {s}");
    }
    for (p, w) in [
        ("integer ", "the number "),
        ("floating point ", "the number "),
        ("boolean ", ""),
    ] {
        if let Some(v) = f.strip_prefix(p) {
            return format!("{w}{v}");
        }
    }
    match f.as_str() {
        "sequence" => "an array".into(),
        "map" => "a table".into(),
        _ => f,
    }
}

/// The 1-based line of byte `offset` in `text`.
pub fn line_at(text: &str, offset: usize) -> usize {
    text.as_bytes()[..offset.min(text.len())]
        .iter()
        .filter(|&&b| b == b'\n')
        .count()
        + 1
}

/// The line where the dotted key `key` (table keys, array indexes as numbers) is written,
/// from the spans of toml's document parser; `None` when the key is not in the text.
pub fn line_of(text: &str, key: &str) -> Option<usize> {
    use toml::de::{DeTable, DeValue};
    let root = DeTable::parse(text).ok()?;
    let mut table = root.get_ref();
    let mut span = None;
    let mut value: Option<&toml::Spanned<DeValue<'_>>> = None;
    for seg in key.split('.') {
        if let Some(v) = value {
            match v.get_ref() {
                DeValue::Table(t) => table = t,
                DeValue::Array(a) => {
                    let i: usize = seg.parse().ok()?;
                    let item = a.get(i)?;
                    span = Some(item.span().start);
                    value = Some(item);
                    continue;
                }
                _ => return span.map(|s| line_at(text, s)),
            }
        }
        let (k, v) = table.get_key_value(seg)?;
        span = Some(k.span().start);
        value = Some(v);
    }
    span.map(|s| line_at(text, s))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct File {
        name: String,
        config: Option<Config>,
        zones: Option<Vec<Zone>>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Config {
        stop_timeout: Option<u32>,
        debug: Option<bool>,
        mode: Option<Mode>,
    }

    #[derive(Debug, serde::Deserialize)]
    #[allow(dead_code)]
    enum Mode {
        Always,
        Never,
    }

    #[derive(Debug, serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    #[allow(dead_code)]
    struct Zone {
        name: String,
    }

    fn err(text: &str) -> TomlError {
        from_str::<File>(
            text,
            &[("config.stop_timeout", "seconds, a whole number such as 30")],
        )
        .unwrap_err()
    }

    #[test]
    fn a_type_error_names_line_key_and_what_was_expected() {
        let e = err("name = \"a\"\n\n[config]\nstop_timeout = \"25s\"\n");
        assert_eq!(e.line, Some(4));
        assert_eq!(e.key.as_deref(), Some("config.stop_timeout"));
        assert_eq!(
            e.message,
            "expected a whole number (0 or more), found the string \"25s\" (seconds, a whole number such as 30)"
        );
        assert_eq!(
            e.to_string(),
            format!("line 4: config.stop_timeout: {}", e.message)
        );
        let e = err("name = \"a\"\n[config]\ndebug = 1\n");
        assert_eq!(
            (e.line, e.key.as_deref(), e.message.as_str()),
            (
                Some(3),
                Some("config.debug"),
                "expected true or false, found the number 1"
            )
        );
    }

    #[test]
    fn a_missing_key_is_named_with_its_table() {
        let e = err("[config]\n");
        assert_eq!(e.key.as_deref(), Some("name"));
        assert_eq!(e.message, "missing; this key is required");
        let e = err("name = \"a\"\n[[zones]]\nother = 1\n");
        assert_eq!(e.key.as_deref(), Some("zones.0.other"));
        assert!(
            e.message
                .starts_with("unknown key `other`; the keys here are `name`"),
            "{e}"
        );
        let e = err("name = \"a\"\n[[zones]]\n");
        assert_eq!(e.key.as_deref(), Some("zones.0.name"));
    }

    #[test]
    fn unknown_keys_and_values_list_the_known_ones() {
        let e = err("name = \"a\"\nnmae = 1\n");
        assert_eq!(e.line, Some(2));
        assert_eq!(e.key.as_deref(), Some("nmae"));
        assert_eq!(
            e.message,
            "unknown key `nmae`; the keys here are `name`, `config`, `zones`"
        );
        let e = err("name = \"a\"\n[config]\nmode = \"Sometimes\"\n");
        assert_eq!(e.key.as_deref(), Some("config.mode"));
        assert_eq!(
            e.message,
            "unknown value \"Sometimes\"; expected \"Always\" or \"Never\""
        );
    }

    #[test]
    fn syntax_errors_name_the_line() {
        let e = err("name = \"a\"\nconfig = [\n");
        assert_eq!(e.key, None);
        assert!(e.line.is_some_and(|l| l >= 2), "{e:?}");
    }

    #[test]
    fn keys_are_found_in_the_text() {
        let text = "a = 1\n[t]\nb = [\n 1,\n 2]\n";
        assert_eq!(line_of(text, "a"), Some(1));
        assert_eq!(line_of(text, "t.b"), Some(3));
        assert_eq!(line_of(text, "t.b.1"), Some(5));
        assert_eq!(line_of(text, "t.c"), None);
    }
}
