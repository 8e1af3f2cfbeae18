//! Chapter 13.2 — context length and fine-tuning measured on runs of the trainer (source
//! S0 5.2; S1 troubleshooting table): extrapolation past the trained length with no
//! scaling, PI, NTK-aware, dynamic NTK and YaRN; fine-tuning with the router trainable or
//! frozen; long-text fine-tuning with the original or a raised rope_theta.

use super::ExperimentOptions;
use crate::error::{Error, Result};

/// The experiments of this group (claim ids of `shared/claims.md`).
pub const IDS: &[&str] = &[];

/// Runs experiment `id` of this group.
pub fn run(id: &str, _opts: &ExperimentOptions) -> Result<String> {
    Err(Error::Invalid(format!(
        "experiment {id:?} is not built yet"
    )))
}
