//! Chapter 13.2 — evaluation of the context experiments: held-out cross-entropy by
//! position with a RoPE scaling set in the config (through [`crate::long_context::scaling`],
//! which the training forward honours: it builds its RoPE table from the config's
//! `RopeConfig`), and greedy continuations.

use crate::error::{Error, Result};
use crate::long_context::scaling::{RopeConfig, ntk_base};
use crate::train::backward::LossOptions;
use crate::train::backward::blocks::{linear_forward, logsumexp};
use crate::train::backward::forward::forward;
use crate::train::params::Params;
use serde::{Deserialize, Serialize};
use serde_json::json;

/// The base model's RoPE base: the classic 10,000 rather than the default config's 10⁶,
/// so that at a trained length of 64 several planes turn through less than a full circle
/// and are out of distribution at `8L` (with 10⁶ only two would be).
pub const BASE_THETA: f64 = 10_000.0;

/// A RoPE setting of the config, as the experiments use them (`factor` is the length
/// ratio `s` the setting is made for; `L` is the trained length).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Scaling {
    /// The trained frequencies: direct extrapolation.
    None,
    /// Position interpolation: `rope_type` "linear".
    Pi { factor: f64 },
    /// NTK-aware: the base raised to `base·s^{d/(d−2)}` (chapter 3's formula), "default"
    /// frequencies otherwise.
    Ntk { factor: f64 },
    /// Dynamic NTK: `rope_type` "dynamic" with `max_position_embeddings` = `L`.
    Dynamic { factor: f64 },
    /// YaRN: `rope_type` "yarn" with `original_max_position_embeddings` = `L` and
    /// transformers' defaults (β_fast 32, β_slow 1, attention factor 0.1·ln s + 1).
    Yarn { factor: f64 },
    /// A raised base, given directly.
    Theta { theta: f64 },
}

impl Scaling {
    /// Short name for tables and figures.
    pub fn label(&self) -> String {
        match self {
            Scaling::None => "none".into(),
            Scaling::Pi { factor } => format!("PI s={factor}"),
            Scaling::Ntk { factor } => format!("NTK-aware s={factor}"),
            Scaling::Dynamic { factor } if *factor == 1.0 => "dynamic NTK".into(),
            Scaling::Dynamic { factor } => format!("dynamic NTK factor {factor}"),
            Scaling::Yarn { factor } => format!("YaRN s={factor}"),
            Scaling::Theta { theta } => format!("theta {theta}"),
        }
    }

    // ANCHOR: rope_config
    /// The config's `RopeConfig` for head dimension `head_dim`, base
    /// `BASE_THETA` and trained length `train_len`.
    pub fn rope_config(&self, head_dim: usize, train_len: usize) -> Result<RopeConfig> {
        let base = BASE_THETA;
        let what = "experiment RoPE setting";
        let max = Some(8 * train_len);
        let (theta, params, max_pos) = match self {
            Scaling::None => (base, json!({"rope_type": "default"}), max),
            Scaling::Pi { factor } => (base, json!({"rope_type": "linear", "factor": factor}), max),
            Scaling::Ntk { factor } => (
                ntk_base(base, *factor, head_dim),
                json!({"rope_type": "default"}),
                max,
            ),
            // transformers' dynamic NTK measures the length against max_position_embeddings.
            Scaling::Dynamic { factor } => (
                base,
                json!({"rope_type": "dynamic", "factor": factor}),
                Some(train_len),
            ),
            Scaling::Yarn { factor } => (
                base,
                json!({"rope_type": "yarn", "factor": factor,
                       "original_max_position_embeddings": train_len}),
                max,
            ),
            Scaling::Theta { theta } => (*theta, json!({"rope_type": "default"}), max),
        };
        RopeConfig::new(head_dim, theta, Some(&params), max_pos, what)
    }
    // ANCHOR_END: rope_config

    /// The window lengths a position is scored from: the whole window, except for dynamic
    /// NTK, whose base depends on the length — a position in `[L, 2L)` is scored from a
    /// window of `2L`, in `[2L, 4L)` from `4L`, …: the base transformers computes for a
    /// prompt of that length.
    fn lengths(&self, train_len: usize, max_len: usize) -> Vec<usize> {
        match self {
            Scaling::Dynamic { .. } => {
                let mut v = Vec::new();
                let mut n = train_len;
                while n < max_len {
                    v.push(n);
                    n *= 2;
                }
                v.push(max_len);
                v
            }
            _ => vec![max_len],
        }
    }
}

/// Held-out cross-entropy by position, in bins.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PositionCurve {
    /// Which model (run name) and RoPE setting at inference.
    pub model: String,
    pub scaling: Scaling,
    pub windows: usize,
    pub window_len: usize,
    /// Bin `b` covers query positions `[b·bin_width, (b+1)·bin_width)` (0-based index of
    /// the token that predicts the next one; the model was trained on positions `< L`).
    pub bin_width: usize,
    /// Mean cross-entropy (nats) of each bin's predictions, and how many there were.
    pub ce: Vec<f64>,
    pub counts: Vec<usize>,
}

impl PositionCurve {
    /// The mean cross-entropy over query positions `[from, to)` (bin-aligned).
    pub fn mean(&self, from: usize, to: usize) -> Option<f64> {
        let (mut sum, mut n) = (0.0, 0usize);
        for (b, (&ce, &c)) in self.ce.iter().zip(&self.counts).enumerate() {
            let start = b * self.bin_width;
            if start >= from && start < to {
                sum += ce * c as f64;
                n += c;
            }
        }
        (n > 0).then(|| sum / n as f64)
    }
}

/// `n` windows of `len` tokens at evenly spaced starts over `tokens`.
pub fn windows(tokens: &[u32], n: usize, len: usize) -> Result<Vec<Vec<u32>>> {
    if tokens.len() < len || n == 0 {
        return Err(Error::Invalid(format!(
            "experiments: the held-out stream has {} tokens, fewer than one window of {len}",
            tokens.len()
        )));
    }
    let span = tokens.len() - len;
    Ok((0..n)
        .map(|k| {
            let start = if n == 1 { 0 } else { k * span / (n - 1) };
            tokens[start..start + len].to_vec()
        })
        .collect())
}

/// `params` with `scaling` set in its config (the weights shared by clone).
pub fn with_scaling(params: &Params, scaling: &Scaling, train_len: usize) -> Result<Params> {
    let mut p = params.clone();
    p.config.rope = scaling.rope_config(p.config.head_dim, train_len)?;
    p.config.max_position_embeddings = p.config.max_position_embeddings.max(8 * train_len);
    Ok(p)
}

/// Per query position (0-based), the cross-entropy of predicting the next token of one
/// sequence.
fn sequence_ce(p: &Params, ids: &[u32]) -> Result<Vec<f64>> {
    let f = forward(p, &[ids.to_vec()], &LossOptions::default(), false)?;
    let (h, v) = (p.config.hidden_size, p.config.vocab_size);
    let w = f.views.lm_head.data(p);
    let rows = ids.len() - 1;
    let mut out = Vec::with_capacity(rows);
    let mut z = vec![0.0f32; CHUNK * v];
    for start in (0..rows).step_by(CHUNK) {
        let n = CHUNK.min(rows - start);
        let z = &mut z[..n * v];
        linear_forward(w, v, h, &f.xn_final[start * h..(start + n) * h], z);
        for (i, zr) in z.chunks_exact(v).enumerate() {
            let target = ids[start + i + 1] as usize;
            out.push(logsumexp(zr) - f64::from(zr[target]));
        }
    }
    Ok(out)
}

/// Rows of logits formed at once.
const CHUNK: usize = 64;

/// The by-position curve of `params` with `scaling` over `windows` (all of one length).
pub fn position_curve(
    model: &str,
    params: &Params,
    scaling: &Scaling,
    windows: &[Vec<u32>],
    train_len: usize,
) -> Result<PositionCurve> {
    let window_len = windows.first().map_or(0, Vec::len);
    if window_len < 2 {
        return Err(Error::Invalid("experiments: windows of < 2 tokens".into()));
    }
    let p = with_scaling(params, scaling, train_len)?;
    let rows = window_len - 1;
    let mut sum = vec![0.0f64; rows];
    let lengths = scaling.lengths(train_len, window_len);
    for w in windows {
        let mut from = 0;
        for &len in &lengths {
            let ce = sequence_ce(&p, &w[..len])?;
            let to = (len - 1).min(rows);
            for (s, c) in sum[from..to].iter_mut().zip(&ce[from..to]) {
                *s += c;
            }
            from = to;
        }
    }
    let bin_width = (train_len / 4).max(1);
    let bins = rows.div_ceil(bin_width);
    let mut ce = vec![0.0; bins];
    let mut counts = vec![0usize; bins];
    for (i, s) in sum.iter().enumerate() {
        ce[i / bin_width] += s;
        counts[i / bin_width] += windows.len();
    }
    for (c, &n) in ce.iter_mut().zip(&counts) {
        *c /= n as f64;
    }
    if let Some(bad) = ce.iter().find(|c| !c.is_finite()) {
        return Err(Error::NonFinite {
            what: format!("experiments: the cross-entropy of {model} with {scaling:?}"),
            detail: bad.to_string(),
        });
    }
    Ok(PositionCurve {
        model: model.into(),
        scaling: scaling.clone(),
        windows: windows.len(),
        window_len,
        bin_width,
        ce,
        counts,
    })
}

/// The greedy continuation of `prompt` by `params` (with its config's RoPE), `n` tokens.
pub fn greedy(params: &Params, prompt: &[u32], n: usize) -> Result<Vec<u32>> {
    let (h, v) = (params.config.hidden_size, params.config.vocab_size);
    let mut ids = prompt.to_vec();
    let mut z = vec![0.0f32; v];
    for _ in 0..n {
        let f = forward(params, &[ids.clone()], &LossOptions::default(), false)?;
        let last = &f.xn_final[(ids.len() - 1) * h..ids.len() * h];
        linear_forward(f.views.lm_head.data(params), v, h, last, &mut z);
        let next = z
            .iter()
            .enumerate()
            .fold((0, f32::NEG_INFINITY), |best, (i, &x)| {
                if x > best.1 { (i, x) } else { best }
            })
            .0;
        ids.push(next as u32);
    }
    Ok(ids[prompt.len()..].to_vec())
}
