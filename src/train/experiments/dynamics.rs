//! Chapter 13.1 — training dynamics measured on runs of the trainer (source S0 5.3.2, 5.4,
//! 5.6; S1 Q4): router collapse, Muon's token efficiency, the max attention logit with and
//! without QK-clip, and the embedding norms of tokens absent from the corpus.

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
