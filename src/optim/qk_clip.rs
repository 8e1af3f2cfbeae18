//! QK-clip, the "Clip" of MuonClip (source 5.6.3; Kimi K2 technical report, 2025). After
//! an optimizer step, each attention head h measures its largest pre-softmax logit
//! S_max^h over the batch; if it exceeds the threshold τ, the head's query and key
//! projections are both scaled by √γ_h with γ_h = min(1, τ / S_max^h). A logit is bilinear
//! in W_q and W_k, so every logit of the head shrinks by exactly γ_h and the largest one
//! lands on τ; heads below τ are untouched. It acts on the weights, not on the gradients.
//!
//! Layout: multi-head attention with nn.Linear weights `[n_heads · head_dim, hidden]`, head
//! h owning rows `h·head_dim .. (h+1)·head_dim` of both W_q and W_k.

use crate::error::{Error, Result};
use crate::kernels::dot;
use ndarray::{Array2, s};

/// What one QK-clip pass measured and did.
#[derive(Clone, Debug, PartialEq)]
pub struct QkClipReport {
    /// S_max^h before clipping, per head.
    pub max_logits: Vec<f32>,
    /// γ_h = min(1, τ / S_max^h), per head (1 for heads that were not clipped).
    pub gammas: Vec<f32>,
}

// ANCHOR: max_logits
/// The largest scaled logit `scale · q_i · k_j` of every head over a batch `x` (`[seq,
/// hidden]`), with j ≤ i when `causal` (the logits the model actually computes).
pub fn max_logits_per_head(
    x: &Array2<f32>,
    w_q: &Array2<f32>,
    w_k: &Array2<f32>,
    n_heads: usize,
    scale: f32,
    causal: bool,
) -> Result<Vec<f32>> {
    check_shapes(x, w_q, w_k, n_heads)?;
    let head_dim = w_q.nrows() / n_heads;
    let (q, k) = (x.dot(&w_q.t()), x.dot(&w_k.t())); // [seq, n_heads·head_dim]
    let seq = x.nrows();
    let mut out = vec![f32::NEG_INFINITY; n_heads];
    for (h, best) in out.iter_mut().enumerate() {
        let cols = s![.., h * head_dim..(h + 1) * head_dim];
        let (qh, kh) = (
            q.slice(cols).as_standard_layout().into_owned(),
            k.slice(cols).as_standard_layout().into_owned(),
        );
        for i in 0..seq {
            let qi = qh.row(i);
            let qi = qi.as_slice().expect("standard layout");
            let end = if causal { i + 1 } else { seq };
            for j in 0..end {
                let kj = kh.row(j);
                let logit = scale * dot(qi, kj.as_slice().expect("standard layout"));
                *best = best.max(logit);
            }
        }
    }
    Ok(out)
}
// ANCHOR_END: max_logits

// ANCHOR: qk_clip
/// γ_h = min(1, τ / S_max^h): 1 when the head is below the threshold.
pub fn qk_clip_gammas(max_logits: &[f32], tau: f32) -> Vec<f32> {
    max_logits
        .iter()
        .map(|&m| if m > tau { tau / m } else { 1.0 })
        .collect()
}

/// Scales head h's rows of W_q and of W_k by √γ_h, in place, and reports what it did.
pub fn qk_clip(
    w_q: &mut Array2<f32>,
    w_k: &mut Array2<f32>,
    max_logits: &[f32],
    tau: f32,
) -> Result<QkClipReport> {
    let n_heads = max_logits.len();
    if n_heads == 0 || w_q.nrows() % n_heads != 0 || w_q.dim() != w_k.dim() {
        return Err(Error::Invalid(format!(
            "qk_clip: W_q {:?} and W_k {:?} do not split into {n_heads} heads",
            w_q.dim(),
            w_k.dim()
        )));
    }
    let head_dim = w_q.nrows() / n_heads;
    let gammas = qk_clip_gammas(max_logits, tau);
    for (h, &g) in gammas.iter().enumerate() {
        let root = g.sqrt();
        let rows = s![h * head_dim..(h + 1) * head_dim, ..];
        w_q.slice_mut(rows).mapv_inplace(|v| v * root);
        w_k.slice_mut(rows).mapv_inplace(|v| v * root);
    }
    Ok(QkClipReport {
        max_logits: max_logits.to_vec(),
        gammas,
    })
}
// ANCHOR_END: qk_clip

fn check_shapes(
    x: &Array2<f32>,
    w_q: &Array2<f32>,
    w_k: &Array2<f32>,
    n_heads: usize,
) -> Result<()> {
    if n_heads == 0
        || w_q.nrows() % n_heads != 0
        || w_q.dim() != w_k.dim()
        || w_q.ncols() != x.ncols()
    {
        return Err(Error::Invalid(format!(
            "QK-clip: x {:?}, W_q {:?}, W_k {:?} do not fit {n_heads} heads",
            x.dim(),
            w_q.dim(),
            w_k.dim()
        )));
    }
    Ok(())
}
