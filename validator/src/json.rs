//! Strict JSON: I-JSON as the OCI specs require, with duplicate member names refused.
//!
//! serde_json keeps the last of two equal member names; another parser may keep the first, and
//! that difference is how one document reads as two (a parser differential). So documents are
//! first read into a [`serde_json::Value`] through a visitor that refuses duplicates.

use std::fmt;

use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

/// Why bytes are not strict JSON.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum JsonError {
    /// An object names the same member twice.
    #[error("duplicate member {key:?} at line {line}, column {column}")]
    DuplicateKey {
        /// The repeated member name.
        key: String,
        /// Line of the error (1-based).
        line: usize,
        /// Column of the error (1-based).
        column: usize,
    },
    /// Not JSON.
    #[error("invalid JSON at line {line}, column {column}: {message}")]
    Syntax {
        /// What serde_json said.
        message: String,
        /// Line of the error (1-based).
        line: usize,
        /// Column of the error (1-based).
        column: usize,
    },
}

const DUP_MARK: &str = "\u{0}duplicate member ";

/// Parses `bytes` as one JSON value, refusing duplicate member names at any depth.
pub fn parse_strict(bytes: &[u8]) -> Result<Value, JsonError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = StrictValue.deserialize(&mut de).and_then(|v| {
        de.end()?;
        Ok(v)
    });
    value.map_err(|e| {
        let msg = e.to_string();
        match msg.strip_prefix(DUP_MARK) {
            Some(rest) => {
                // serde_json appends " at line L column C" to custom errors.
                let key = rest.split(" at line ").next().unwrap_or(rest);
                JsonError::DuplicateKey {
                    key: serde_json::from_str::<String>(key).unwrap_or_else(|_| key.to_owned()),
                    line: e.line(),
                    column: e.column(),
                }
            }
            None => JsonError::Syntax {
                message: msg.split(" at line ").next().unwrap_or(&msg).to_owned(),
                line: e.line(),
                column: e.column(),
            },
        }
    })
}

struct StrictValue;

impl<'de> DeserializeSeed<'de> for StrictValue {
    type Value = Value;

    fn deserialize<D: de::Deserializer<'de>>(self, d: D) -> Result<Value, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for StrictValue {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }

    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        serde_json::Number::from_f64(v)
            .map(Value::Number)
            .ok_or_else(|| E::custom("number out of range"))
    }

    fn visit_str<E>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }

    fn visit_unit<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_none<E>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut out = Vec::new();
        while let Some(v) = seq.next_element_seed(StrictValue)? {
            out.push(v);
        }
        Ok(Value::Array(out))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            if out.contains_key(&key) {
                let quoted = serde_json::to_string(&key).unwrap_or_default();
                return Err(de::Error::custom(format!("{DUP_MARK}{quoted}")));
            }
            let v = map.next_value_seed(StrictValue)?;
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_plain_json() {
        let v = parse_strict(br#"{"a":[1,2,{"b":null}],"c":"x","d":1.5,"e":-3}"#).unwrap();
        assert_eq!(v["a"][2]["b"], Value::Null);
        assert_eq!(v["e"], -3);
    }

    #[test]
    fn refuses_duplicates_at_any_depth() {
        let e = parse_strict(br#"{"a":1,"a":2}"#).unwrap_err();
        assert!(
            matches!(&e, JsonError::DuplicateKey { key, line: 1, .. } if key == "a"),
            "{e}"
        );
        let e = parse_strict(b"{\"x\":[{\"k\\\"q\":1,\n\"k\\\"q\":2}]}").unwrap_err();
        assert!(
            matches!(&e, JsonError::DuplicateKey { key, line: 2, .. } if key == "k\"q"),
            "{e}"
        );
    }

    #[test]
    fn refuses_garbage_and_trailing_data() {
        assert!(matches!(parse_strict(b"{"), Err(JsonError::Syntax { .. })));
        assert!(matches!(
            parse_strict(b"{} {}"),
            Err(JsonError::Syntax { .. })
        ));
        assert!(matches!(
            parse_strict(b"\xff"),
            Err(JsonError::Syntax { .. })
        ));
        let deep = "[".repeat(10_000);
        assert!(matches!(
            parse_strict(deep.as_bytes()),
            Err(JsonError::Syntax { .. })
        ));
    }
}
