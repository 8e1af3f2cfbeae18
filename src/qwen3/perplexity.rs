//! Per-token loss of a model on a long text, and the inference-time RoPE scalings that
//! stretch a trained context (chapter 3 on a real model).
//!
//! The loss at position `p` is `−log p(ids[p] | ids[..p])`. The text runs through the
//! engine in chunks that share one session's KV cache, so only a chunk's logits
//! (`[chunk, vocab]`) exist at a time, never the whole `[n, vocab]`; attention scores are
//! one query's row at a time (see [`Model::forward`]).

use crate::error::{Error, Result};
use crate::long_context::scaling::{RopeScaling, Yarn, ntk_base};
use crate::qwen3::{Logits, Model, Qwen3Config};

/// Positions per forward call: 256 rows of a 49k vocabulary are 50 MB of logits.
pub const CHUNK: usize = 256;

/// An inference-time RoPE scaling, applied to a model's own config (no fine-tune).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    /// Positions past the trained length as they come (direct extrapolation).
    Direct,
    /// Position interpolation (transformers' "linear").
    Linear,
    /// Static NTK-aware: the base raised to `base·s^{d/(d−2)}`.
    Ntk,
    /// Dynamic NTK: the base from the sequence length (transformers' "dynamic").
    Dynamic,
    /// YaRN with transformers' defaults (β_fast 32, β_slow 1).
    Yarn,
}

impl Method {
    /// The CLI's name of the method.
    pub fn name(self) -> &'static str {
        match self {
            Method::Direct => "none",
            Method::Linear => "linear",
            Method::Ntk => "ntk",
            Method::Dynamic => "dynamic",
            Method::Yarn => "yarn",
        }
    }

    /// The method a CLI name stands for.
    pub fn parse(name: &str) -> Result<Method> {
        [
            Method::Direct,
            Method::Linear,
            Method::Ntk,
            Method::Dynamic,
            Method::Yarn,
        ]
        .into_iter()
        .find(|m| m.name() == name)
        .ok_or_else(|| {
            Error::Invalid(format!(
                "--rope-scaling {name:?}: expected none, linear, ntk, dynamic or yarn"
            ))
        })
    }
}

/// `config` with `method` at `factor` applied to its RoPE, and room for `positions`
/// positions. The trained length stays the reference length of dynamic NTK and YaRN.
pub fn scaled_config(
    mut config: Qwen3Config,
    method: Method,
    factor: f64,
    positions: usize,
) -> Result<Qwen3Config> {
    if !(factor.is_finite() && factor >= 1.0) {
        return Err(Error::Invalid(format!(
            "--factor {factor}: must be a finite number ≥ 1"
        )));
    }
    if !matches!(config.rope.scaling, RopeScaling::Default) {
        return Err(Error::Invalid(format!(
            "the model already uses {} RoPE scaling; scalings are applied to plain RoPE only",
            config.rope.scaling.name()
        )));
    }
    let trained = config.max_position_embeddings;
    let rope = &mut config.rope;
    rope.max_position_embeddings = Some(trained);
    match method {
        Method::Direct => {}
        Method::Linear => rope.scaling = RopeScaling::Linear { factor },
        Method::Dynamic => rope.scaling = RopeScaling::Dynamic { factor },
        Method::Ntk => rope.theta = ntk_base(rope.theta, factor, rope.rotary_dim()),
        Method::Yarn => {
            rope.scaling = RopeScaling::Yarn(Yarn {
                factor,
                original_max_position_embeddings: trained,
                beta_fast: 32.0,
                beta_slow: 1.0,
                mscale: None,
                mscale_all_dim: None,
                attention_factor: None,
                truncate: true,
            })
        }
    }
    rope.init(Some(positions))?;
    config.max_position_embeddings = trained.max(positions);
    Ok(config)
}

// ANCHOR: token_losses
/// The loss at every position `1..ids.len()` (position 0 has no prediction), computed in
/// chunks of [`CHUNK`] positions; `progress` gets `(positions done, positions)`.
pub fn token_losses(
    model: &Model,
    ids: &[u32],
    mut progress: impl FnMut(usize, usize),
) -> Result<Vec<f64>> {
    if ids.len() < 2 {
        return Err(Error::Invalid(format!(
            "{} tokens: a loss needs at least 2",
            ids.len()
        )));
    }
    let vocab = model.config.vocab_size;
    let mut session = model.session(ids.len())?;
    let mut losses = Vec::with_capacity(ids.len() - 1);
    for (c, chunk) in ids.chunks(CHUNK).enumerate() {
        let start = c * CHUNK;
        let logits = model.forward(&mut session, chunk, Logits::All, None)?;
        for (r, row) in logits.chunks_exact(vocab).enumerate() {
            if let Some(&next) = ids.get(start + r + 1) {
                losses.push(target_loss(row, next as usize));
            }
        }
        progress(start + chunk.len(), ids.len());
    }
    Ok(losses)
}
// ANCHOR_END: token_losses

/// `−log softmax(row)[target]`, in f64 around the row's maximum.
pub fn target_loss(row: &[f32], target: usize) -> f64 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f64 = row.iter().map(|&l| f64::from(l - max).exp()).sum();
    sum.ln() - f64::from(row[target] - max)
}

/// Mean loss, its standard error and the count over the positions `range` (positions
/// counted as in the text; the loss of position `p` is `losses[p - 1]`).
#[derive(Clone, Debug, PartialEq)]
pub struct Bucket {
    pub start: usize,
    pub end: usize,
    pub mean: f64,
    pub stderr: f64,
    pub count: usize,
}

/// The losses in buckets `[0, L)`, `[L, 2L)`, `[2L, 4L)`, … up to the text's length.
pub fn buckets(losses: &[f64], trained: usize) -> Vec<Bucket> {
    let n = losses.len() + 1;
    let mut edges = vec![0, trained.max(1)];
    while *edges.last().unwrap_or(&n) < n {
        let last = edges[edges.len() - 1];
        edges.push(last * 2);
    }
    edges
        .windows(2)
        .filter(|w| w[0] < n)
        .map(|w| {
            let (start, end) = (w[0], w[1].min(n));
            let xs = &losses[start.max(1) - 1..end - 1];
            let count = xs.len();
            let mean = xs.iter().sum::<f64>() / count.max(1) as f64;
            let var = xs.iter().map(|x| (x - mean).powi(2)).sum::<f64>()
                / (count.saturating_sub(1)).max(1) as f64;
            Bucket {
                start,
                end,
                mean,
                stderr: (var / count.max(1) as f64).sqrt(),
                count,
            }
        })
        .collect()
}
