//! Helpers the suite's modules share (transformers, lost-in-middle, params, grad, gguf):
//! running the CLI, id lists, and the logit distance they compare.
#![allow(dead_code)] // each test binary uses its own subset

use serde_json::Value;
use std::process::{Command, Output};

/// Runs the `anatomy` binary this test build made.
pub fn anatomy(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(args)
        .output()
        .expect("run anatomy")
}

/// Ids as the CLI takes them: `1,2,3`.
pub fn join(ids: &[u32]) -> String {
    ids.iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

/// A JSON array of token ids.
pub fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

/// The largest |a − b| over two equal-length slices.
pub fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .fold(0.0f32, |m, (x, y)| m.max((x - y).abs()))
}
