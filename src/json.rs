//! The one reader of fields in a JSON document — config.json (chapters 6 and 9), a
//! `rope_scaling` / `rope_parameters` object (chapter 3), generation_config.json.
//!
//! [`Fields`] pairs a document with the name errors give it, so every problem comes out as
//! [`Error::Field`]: file, field, what is wrong. A field set to `null` counts as absent, as
//! transformers' config classes treat it. Every number read passes through one of two
//! private conversions, `Fields::int_of` and `to_f64`, so limits on sizes belong there
//! and nowhere else: each integer is checked against its field's limit
//! ([`limits::field_limit`], e.g. `num_hidden_layers` ≤ 16384) and every list against
//! [`limits::LIST_LEN`] before anything is sized by it, and values quoted in messages are
//! cut short ([`excerpt_json`]).

use crate::error::{Error, Result, excerpt_json};
use crate::limits::{self, Limit};
use serde_json::Value;

/// A JSON document (normally an object) and the name errors give it.
///
/// On anything other than an object every field reads as absent, as `Value::get` does.
#[derive(Clone, Copy, Debug)]
pub struct Fields<'a> {
    what: &'a str,
    doc: &'a Value,
}

impl<'a> Fields<'a> {
    /// `what` names the document in errors (a path, or e.g. `"figure"`).
    pub fn new(what: &'a str, doc: &'a Value) -> Self {
        Fields { what, doc }
    }

    /// The document's name.
    pub fn what(&self) -> &'a str {
        self.what
    }

    /// A field-level error naming this document.
    pub fn error(&self, field: &str, problem: impl Into<String>) -> Error {
        Error::field(self.what, field, problem)
    }

    /// The field as written, `null` included (for the few places where an explicit `null`
    /// means something different from an absent key).
    pub fn raw(&self, field: &str) -> Option<&'a Value> {
        self.doc.get(field)
    }

    /// The field, unless absent or `null`.
    pub fn get(&self, field: &str) -> Option<&'a Value> {
        self.raw(field).filter(|v| !v.is_null())
    }

    /// Reads an optional field with `parse`; a value it rejects is reported as
    /// "expected {expected}, got {value}".
    fn opt_with<T>(
        &self,
        field: &str,
        expected: &str,
        parse: impl FnOnce(&'a Value) -> Option<T>,
    ) -> Result<Option<T>> {
        match self.get(field) {
            None => Ok(None),
            Some(v) => parse(v).map(Some).ok_or_else(|| {
                self.error(
                    field,
                    format!("expected {expected}, got {}", excerpt_json(v)),
                )
            }),
        }
    }

    fn required<T>(&self, field: &str, v: Option<T>) -> Result<T> {
        v.ok_or_else(|| self.error(field, "missing"))
    }

    // ---------------------------------------------------------------- integers

    /// An optional JSON integer ≥ 0 (`4.0` is rejected: sizes are written as integers), at
    /// most its field's limit.
    pub fn opt_u64(&self, field: &str) -> Result<Option<u64>> {
        self.get(field).map(|v| self.int_of(field, v)).transpose()
    }

    /// [`Fields::opt_u64`] as a `usize`.
    pub fn opt_usize(&self, field: &str) -> Result<Option<usize>> {
        self.get(field).map(|v| self.int_of(field, v)).transpose()
    }

    /// A required JSON integer ≥ 0.
    pub fn req_u64(&self, field: &str) -> Result<u64> {
        let v = self.opt_u64(field)?;
        self.required(field, v)
    }

    /// A required JSON integer ≥ 1; `zero` is the problem reported for 0 (each chapter
    /// words it its own way, and the CLI's messages are kept).
    pub fn req_u64_nonzero(&self, field: &str, zero: &str) -> Result<u64> {
        match self.req_u64(field)? {
            0 => Err(self.error(field, zero)),
            v => Ok(v),
        }
    }

    /// [`Fields::req_u64_nonzero`] as a `usize`.
    pub fn req_usize_nonzero(&self, field: &str, zero: &str) -> Result<usize> {
        let v = self.opt_usize(field)?;
        match self.required(field, v)? {
            0 => Err(self.error(field, zero)),
            v => Ok(v),
        }
    }

    /// An optional whole number ≥ 1 that may be written as a float (`4096.0`), as RoPE
    /// settings sometimes are; at most its field's limit.
    pub fn opt_whole(&self, field: &str) -> Result<Option<usize>> {
        match self.opt_f64(field)? {
            None => Ok(None),
            Some(x) if x >= 1.0 && x.fract() == 0.0 => {
                let limit = limits::field_limit(field);
                if x > limit.max as f64 {
                    return Err(self.limit_error(field, &x.to_string(), limit));
                }
                self.fit(field, x as u64, limit).map(Some)
            }
            Some(x) => Err(self.error(field, format!("expected a positive integer, got {x}"))),
        }
    }

    // ---------------------------------------------------------------- floats

    /// An optional number (integer or float).
    pub fn opt_f64(&self, field: &str) -> Result<Option<f64>> {
        self.opt_with(field, "a number", to_f64)
    }

    /// An optional number ≥ 0 (an epsilon).
    pub fn opt_nonnegative_f64(&self, field: &str) -> Result<Option<f64>> {
        self.opt_with(field, "a number ≥ 0", |v| to_f64(v).filter(|x| *x >= 0.0))
    }

    /// A required finite number > 0 (a scaling factor).
    pub fn req_positive_f64(&self, field: &str) -> Result<f64> {
        let v = self.opt_f64(field)?;
        let x = self.required(field, v)?;
        if x.is_finite() && x > 0.0 {
            Ok(x)
        } else {
            Err(self.error(field, format!("must be a positive number, got {x}")))
        }
    }

    // ---------------------------------------------------------------- other scalars

    /// An optional `true` / `false`.
    pub fn opt_bool(&self, field: &str) -> Result<Option<bool>> {
        self.opt_with(field, "true or false", Value::as_bool)
    }

    /// An optional string.
    pub fn opt_str(&self, field: &str) -> Result<Option<&'a str>> {
        self.opt_with(field, "a string", Value::as_str)
    }

    // ---------------------------------------------------------------- lists

    /// A list of integers ≥ 0; absent means empty.
    pub fn u64_list(&self, field: &str) -> Result<Vec<u64>> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => self.int_items(field, a, |x| {
                format!("expected integers, got {}", excerpt_json(x))
            }),
            Some(x) => Err(self.error(field, format!("expected a list, got {}", excerpt_json(x)))),
        }
    }

    /// Token or layer indices: a list of integers ≥ 0, or a single one (as `eos_token_id`
    /// may be); absent means empty.
    pub fn index_list(&self, field: &str) -> Result<Vec<usize>> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => {
                self.int_items(field, a, |v| format!("not an index: {}", excerpt_json(v)))
            }
            Some(v @ Value::Number(n)) => match v.as_u64() {
                Some(_) => Ok(vec![self.int_of(field, v)?]),
                None => Err(self.error(field, format!("not an index: {n}"))),
            },
            Some(v) => Err(self.error(
                field,
                format!("expected a list of integers, got {}", excerpt_json(v)),
            )),
        }
    }

    /// A required list of numbers.
    pub fn req_f64_list(&self, field: &str) -> Result<Vec<f64>> {
        let a = self
            .raw(field)
            .and_then(Value::as_array)
            .ok_or_else(|| self.error(field, "missing (a list of numbers is required)"))?;
        self.check_len(field, a)?;
        a.iter()
            .map(|v| {
                to_f64(v)
                    .ok_or_else(|| self.error(field, format!("not a number: {}", excerpt_json(v))))
            })
            .collect()
    }

    /// Integer items of a list: a non-integer is `problem(item)`, an integer past the
    /// field's limit a limit error.
    fn int_items<T: TryFrom<u64>>(
        &self,
        field: &str,
        list: &[Value],
        problem: impl Fn(&Value) -> String,
    ) -> Result<Vec<T>> {
        self.check_len(field, list)?;
        list.iter()
            .map(|v| match v.as_u64() {
                Some(_) => self.int_of(field, v),
                None => Err(self.error(field, problem(v))),
            })
            .collect()
    }

    fn check_len(&self, field: &str, list: &[Value]) -> Result<()> {
        let what = format!("field `{field}` (entries)");
        Ok(limits::check(
            self.what,
            &what,
            list.len() as u128,
            limits::LIST_LEN,
        )?)
    }

    /// The one conversion of a JSON integer ≥ 0 into a size type: at most the field's
    /// limit ([`limits::field_limit`]) and the type's largest value.
    fn int_of<T: TryFrom<u64>>(&self, field: &str, v: &Value) -> Result<T> {
        let x = v.as_u64().ok_or_else(|| {
            self.error(
                field,
                format!("expected a non-negative integer, got {}", excerpt_json(v)),
            )
        })?;
        self.fit(field, x, limits::field_limit(field))
    }

    fn fit<T: TryFrom<u64>>(&self, field: &str, x: u64, limit: Limit) -> Result<T> {
        if x > limit.max {
            return Err(self.limit_error(field, &x.to_string(), limit));
        }
        T::try_from(x).map_err(|_| {
            self.error(
                field,
                format!(
                    "{x} does not fit in this machine's {}-bit sizes",
                    usize::BITS
                ),
            )
        })
    }

    fn limit_error(&self, field: &str, value: &str, limit: Limit) -> Error {
        Error::Limit(limits::Exceeded {
            what: self.what.to_string(),
            field: format!("field `{field}`"),
            value: value.to_string(),
            limit: limit.max.to_string(),
            reason: limit.reason.to_string(),
        })
    }
}

/// The one conversion of a JSON number into an f64 (always finite: JSON has no NaN or
/// infinity, and serde_json refuses numbers past f64's range).
fn to_f64(v: &Value) -> Option<f64> {
    v.as_f64().filter(|x| x.is_finite())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn errors_name_document_field_and_problem() {
        let doc = json!({"a": -1, "b": null, "c": 4096.0, "d": [1, "x"], "e": 0});
        let f = Fields::new("cfg.json", &doc);
        assert_eq!(
            f.opt_u64("a").unwrap_err().to_string(),
            "cfg.json: field `a`: expected a non-negative integer, got -1"
        );
        assert_eq!(
            f.req_u64("b").unwrap_err().to_string(),
            "cfg.json: field `b`: missing"
        );
        assert_eq!(f.opt_whole("c").unwrap(), Some(4096));
        assert!(f.opt_u64("c").is_err(), "4096.0 is not a JSON integer");
        assert_eq!(
            f.u64_list("d").unwrap_err().to_string(),
            "cfg.json: field `d`: expected integers, got \"x\""
        );
        assert_eq!(
            f.req_u64_nonzero("e", "must be positive")
                .unwrap_err()
                .to_string(),
            "cfg.json: field `e`: must be positive"
        );
        assert_eq!(f.index_list("e").unwrap(), vec![0]);
        assert!(f.raw("b").is_some() && f.get("b").is_none());
    }

    #[test]
    fn sizes_past_their_limits_are_refused_naming_the_limit() {
        let doc = json!({"num_hidden_layers": 1u64 << 40, "eos_token_id": (1u64 << 32) + 576,
                         "head_dim": 128, "mlp_only_layers": [1, 100000],
                         "original_max_position_embeddings": 1e300,
                         "big": vec![0; 70000]});
        let f = Fields::new("cfg.json", &doc);
        let e = f.opt_usize("num_hidden_layers").unwrap_err().to_string();
        assert!(
            e.starts_with(
                "cfg.json: field `num_hidden_layers`: 1099511627776 is above the limit of 16384"
            ),
            "{e}"
        );
        assert!(
            f.index_list("eos_token_id").is_err(),
            "no truncation to 576"
        );
        assert_eq!(f.opt_usize("head_dim").unwrap(), Some(128));
        assert!(f.u64_list("mlp_only_layers").is_err());
        assert!(f.opt_whole("original_max_position_embeddings").is_err());
        let e = f.u64_list("big").unwrap_err().to_string();
        assert!(e.contains("70000") && e.contains("32768"), "{e}");
        let huge = json!({"a": "x".repeat(1_000_000)});
        let e = Fields::new("c", &huge)
            .opt_u64("a")
            .unwrap_err()
            .to_string();
        assert!(e.len() < 200, "{e}");
    }
}
