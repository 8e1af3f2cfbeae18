//! Helpers the suite's modules share (transformers, lost-in-middle, params, grad, gguf):
//! running the CLI, id lists, the logit distance they compare, and scratch directories.
#![allow(dead_code)] // each test binary uses its own subset

use serde_json::Value;
use std::ffi::OsStr;
use std::path::Path;
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

/// A directory `anatomy-<tag>-XXXXXX` under the system's temporary directory, removed with
/// everything in it when the value is dropped: at the end of the test, passed or failed.
/// It derefs to its [`Path`], so `dir.join(..)` and `&dir` read as they would on a path.
pub struct Scratch(tempfile::TempDir);

/// A fresh, empty [`Scratch`] directory; the random suffix keeps parallel tests apart.
pub fn scratch(tag: &str) -> Scratch {
    let dir = tempfile::Builder::new()
        .prefix(&format!("anatomy-{tag}-"))
        .tempdir()
        .expect("create a scratch directory");
    Scratch(dir)
}

impl std::ops::Deref for Scratch {
    type Target = Path;
    fn deref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<Path> for Scratch {
    fn as_ref(&self) -> &Path {
        self.0.path()
    }
}

impl AsRef<OsStr> for Scratch {
    fn as_ref(&self) -> &OsStr {
        self.0.path().as_os_str()
    }
}
