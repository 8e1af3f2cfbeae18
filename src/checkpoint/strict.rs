//! JSON as the safetensors format reads it: a key given twice in one object is invalid.
//!
//! `serde_json::Value` keeps the last of two equal keys without a word, so a header naming
//! one tensor twice would silently describe the second one. [`Strict`] parses the same
//! grammar (serde_json's, with its nesting limit of 128) but refuses a repeated key in any
//! nested object, and [`Entries`] keeps the top-level entries of a header or index in file
//! order, repeats included, so the caller can name the tensor that repeats.

use serde::de::{self, Deserialize, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};
use std::collections::HashSet;
use std::fmt;

/// A JSON value in which no object repeats a key.
pub struct Strict(pub Value);

/// A top-level JSON object's entries in file order (values [`Strict`]), repeated keys kept
/// so the caller can report them; `None` when the document is valid JSON but not an object.
pub struct Entries(pub Option<Vec<(String, Value)>>);

struct StrictVisitor;

impl<'de> Visitor<'de> for StrictVisitor {
    type Value = Value;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("any JSON value")
    }
    fn visit_unit<E: de::Error>(self) -> Result<Value, E> {
        Ok(Value::Null)
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Value, E> {
        Ok(Value::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Value, E> {
        Ok(Value::from(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Value, E> {
        Ok(Value::String(v.to_owned()))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Value, E> {
        Ok(Value::String(v))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Value, A::Error> {
        let mut items = Vec::new();
        while let Some(Strict(v)) = seq.next_element()? {
            items.push(v);
        }
        Ok(Value::Array(items))
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Value, A::Error> {
        let mut out = Map::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(v) = map.next_value()?;
            if out.contains_key(&key) {
                return Err(de::Error::custom(format!(
                    "key {} appears twice in one object",
                    crate::error::excerpt(&key)
                )));
            }
            out.insert(key, v);
        }
        Ok(Value::Object(out))
    }
}

impl<'de> Deserialize<'de> for Strict {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(StrictVisitor).map(Strict)
    }
}

struct EntriesVisitor;

impl<'de> Visitor<'de> for EntriesVisitor {
    type Value = Entries;

    fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
        f.write_str("a JSON object")
    }
    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Entries, A::Error> {
        let mut out = Vec::new();
        while let Some(key) = map.next_key::<String>()? {
            let Strict(v) = map.next_value()?;
            out.push((key, v));
        }
        Ok(Entries(Some(out)))
    }
    // Valid JSON that is not an object: the caller says so.
    fn visit_unit<E: de::Error>(self) -> Result<Entries, E> {
        Ok(Entries(None))
    }
    fn visit_bool<E: de::Error>(self, _: bool) -> Result<Entries, E> {
        Ok(Entries(None))
    }
    fn visit_i64<E: de::Error>(self, _: i64) -> Result<Entries, E> {
        Ok(Entries(None))
    }
    fn visit_u64<E: de::Error>(self, _: u64) -> Result<Entries, E> {
        Ok(Entries(None))
    }
    fn visit_f64<E: de::Error>(self, _: f64) -> Result<Entries, E> {
        Ok(Entries(None))
    }
    fn visit_str<E: de::Error>(self, _: &str) -> Result<Entries, E> {
        Ok(Entries(None))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Entries, A::Error> {
        while seq.next_element::<de::IgnoredAny>()?.is_some() {}
        Ok(Entries(None))
    }
}

impl<'de> Deserialize<'de> for Entries {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(EntriesVisitor)
    }
}

/// The first key of `entries` that appears a second time, if any.
pub fn first_repeat(entries: &[(String, Value)]) -> Option<&str> {
    let mut seen = HashSet::with_capacity(entries.len());
    entries
        .iter()
        .map(|(k, _)| k.as_str())
        .find(|k| !seen.insert(*k))
}
