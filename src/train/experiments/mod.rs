//! Chapter 13 — experiments on a model trained here (source S0 5.2, 5.3.2, 5.4, 5.6; S1
//! troubleshooting table): every training claim of the source measured with runs of
//! [`super::trainer`] on the real corpus, with fixed seeds.
//!
//! Two groups: [`dynamics`] (router collapse, Muon's token efficiency, max attention
//! logits and QK-clip, glitch-token embedding decay) and [`context`] (extrapolation past
//! the trained length, PI / NTK / YaRN, fine-tuning the router, raising rope_theta).
//! `anatomy experiments ID… --out DIR` runs them; the recorded results live in
//! `data/train/experiments/<id>/`, where the claims registry reads them.

pub mod context;
pub mod dynamics;

use crate::error::{Error, Result};
use std::path::{Path, PathBuf};

/// How an experiment is run.
#[derive(Clone, Debug)]
pub struct ExperimentOptions {
    /// Where the runs and `results.json` are written.
    pub out: PathBuf,
    /// The corpus (a directory of UTF-8 .txt documents) and the tokenizer.
    pub data: PathBuf,
    pub vocab: PathBuf,
    /// A few steps of each run instead of the recorded length: exercises the code path
    /// (the tests and CI use it); its numbers are not the recorded ones.
    pub short: bool,
    /// Worker threads (0 = all cores).
    pub threads: usize,
}

/// Every experiment id, in the catalogue's order.
pub fn all_ids() -> Vec<&'static str> {
    let mut ids = dynamics::IDS.to_vec();
    ids.extend_from_slice(context::IDS);
    ids
}

/// Runs one experiment by id; returns its text summary.
pub fn run(id: &str, opts: &ExperimentOptions) -> Result<String> {
    if dynamics::IDS.contains(&id) {
        dynamics::run(id, opts)
    } else if context::IDS.contains(&id) {
        context::run(id, opts)
    } else {
        Err(Error::Invalid(format!(
            "unknown experiment {id:?}; known: {}",
            all_ids().join(", ")
        )))
    }
}

/// Where the recorded results of experiment `id` live, relative to the crate root.
pub fn recorded_dir(id: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/train/experiments")
        .join(id)
}

/// The CPU's model name and flags from /proc/cpuinfo (none where it is not readable).
pub fn cpu() -> (Option<String>, Vec<String>) {
    let Ok(bytes) = crate::error::read_bounded(
        Path::new("/proc/cpuinfo"),
        crate::limits::TEXT_FILE_BYTES,
        "cpuinfo",
    ) else {
        return (None, Vec::new());
    };
    let text = String::from_utf8_lossy(&bytes);
    let field = |name: &str| {
        text.lines()
            .find(|l| l.split(':').next().is_some_and(|k| k.trim() == name))
            .and_then(|l| l.split_once(':'))
            .map(|(_, v)| v.trim().to_string())
    };
    let flags = field("flags")
        .map(|f| f.split_whitespace().map(str::to_string).collect())
        .unwrap_or_default();
    (field("model name"), flags)
}

/// The crate's git commit, when it is a git checkout and git is installed.
pub fn git_commit() -> Option<String> {
    let out = std::process::Command::new("git")
        .args(["rev-parse", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()?;
    let commit = String::from_utf8(out.stdout).ok()?.trim().to_string();
    (out.status.success() && commit.len() == 40).then_some(commit)
}
