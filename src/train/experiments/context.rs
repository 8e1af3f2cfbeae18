//! Chapter 13.2 — context length and fine-tuning measured on runs of the trainer (source
//! S0 5.2; S1 troubleshooting table): extrapolation past the trained length with no
//! scaling, PI, NTK-aware, dynamic NTK and YaRN; fine-tuning with the router trainable or
//! frozen; long-text fine-tuning with the original or a raised rope_theta.
//!
//! Every run is the trainer's own loop ([`super::super::trainer::train`]) on the project's
//! corpus with fixed seeds. One base model, trained on the English half at length
//! [`Sizes::train_len`] `L`, serves every experiment; the four fine-tunes at `4L` (original
//! theta, raised theta, PI, YaRN) serve three of them. Both are deterministic functions of
//! their options and the corpus, so they are cached under the system's temp directory
//! (keyed by a hash of both) and trained once for the whole group; each `results.json` says
//! whether its shared runs came from the cache and how long they took to train.
//!
//! The status rules of the claims ([`verdict`]) were written before the recorded runs.

mod eval;
mod extrapolation;
mod router;
mod shared;
mod theta;
pub mod verdict;

pub use eval::{PositionCurve, Scaling};
pub use extrapolation::{ExtrapolationResults, ShortEval};
pub use router::{RouterResults, RouterRun};
pub use shared::{Machine, RunRecord, Sizes};
pub use theta::{Sample, ThetaResults};

use super::ExperimentOptions;
use crate::error::{Error, Result};
use std::path::Path;

/// The experiments of this group (claim ids of `shared/claims.md`).
pub const IDS: &[&str] = &[
    "train.direct_extrapolation",
    "train.pi_short",
    "train.ntk_yarn",
    "train.finetune_router",
    "train.rope_theta_finetune",
];

/// Runs experiment `id` of this group.
pub fn run(id: &str, opts: &ExperimentOptions) -> Result<String> {
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| Error::Invalid(format!("experiments: thread pool: {e}")))?;
    pool.install(|| match id {
        "train.direct_extrapolation" => extrapolation::run_direct(opts),
        "train.pi_short" => extrapolation::run_pi_short(opts),
        "train.ntk_yarn" => extrapolation::run_ntk_yarn(opts),
        "train.finetune_router" => router::run(opts),
        "train.rope_theta_finetune" => theta::run(opts),
        other => Err(Error::Invalid(format!(
            "experiment {other:?} is not in the context group"
        ))),
    })
}

/// Reads a `results.json` of this group.
pub fn read_results<T: serde::de::DeserializeOwned>(dir: &Path) -> Result<T> {
    let path = dir.join("results.json");
    let bytes = crate::error::read_bounded(&path, RESULTS_BYTES, "experiment results")?;
    serde_json::from_slice(&bytes).map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
}

/// A results file is small (the per-run logs are kept every few steps).
const RESULTS_BYTES: u64 = 4 << 20;
