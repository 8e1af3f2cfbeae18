//! Chapter 12 — looking inside a trained model (source S0 5.3.1): how much attention every
//! head puts on the first position of a window, from the training forward's attention
//! probabilities (the same ones the backward pass uses).

use super::backward::{LossOptions, forward::forward};
use super::params::Params;
use crate::error::{Error, Result};

/// The mean attention probability on position 0, over query positions 1..T-1 of every
/// window: `[layer][head]`, with what equal attention over the causal prefix would give.
#[derive(Clone, Debug, serde::Serialize)]
pub struct FirstPositionShare {
    pub per_head: Vec<Vec<f64>>,
    pub uniform: f64,
}

impl FirstPositionShare {
    /// Each layer's mean over its heads.
    pub fn per_layer(&self) -> Vec<f64> {
        self.per_head
            .iter()
            .map(|h| h.iter().sum::<f64>() / h.len().max(1) as f64)
            .collect()
    }
}

/// Runs `windows` (all of one length T ≥ 2) through `p` and measures the share of
/// attention each head gives to the window's first token.
pub fn first_position_share(p: &Params, windows: &[Vec<u32>]) -> Result<FirstPositionShare> {
    let t = windows.first().map_or(0, Vec::len);
    if t < 2 || windows.iter().any(|w| w.len() != t) {
        return Err(Error::Invalid(
            "first_position_share: windows must share one length of at least 2".into(),
        ));
    }
    let c = &p.config;
    let f = forward(p, windows, &LossOptions::from_config(c), true)?;
    let heads = c.num_attention_heads;
    let per_head = f
        .layers
        .iter()
        .map(|layer| {
            (0..heads)
                .map(|h| {
                    let mut sum = 0.0f64;
                    for probs in &layer.probs {
                        let head = &probs[h * t * t..(h + 1) * t * t];
                        sum += (1..t).map(|q| head[q * t] as f64).sum::<f64>();
                    }
                    sum / (windows.len() * (t - 1)) as f64
                })
                .collect()
        })
        .collect();
    let uniform = (1..t).map(|q| 1.0 / (q + 1) as f64).sum::<f64>() / (t - 1) as f64;
    Ok(FirstPositionShare { per_head, uniform })
}
