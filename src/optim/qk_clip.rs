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
use crate::rand::random_tokens;
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
    if n_heads == 0 || !w_q.nrows().is_multiple_of(n_heads) || w_q.dim() != w_k.dim() {
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
        || !w_q.nrows().is_multiple_of(n_heads)
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

/// A toy run where the loss rewards one attention logit (−s for s = scale·q₀·k₁, as when a
/// head learns to attend hard to one token): plain SGD with every gradient clipped to
/// global norm `grad_clip`, and optionally QK-clip at `tau` after each step. Returns the
/// head's max logit before training and after every step.
pub fn logit_growth(steps: usize, lr: f32, grad_clip: f32, tau: Option<f32>) -> Vec<f32> {
    let (seq, hidden, hd) = (8, 16, 8);
    let x = random_tokens(seq, hidden, 31);
    let init = 1.0 / (hidden as f32).sqrt();
    let mut w_q = random_tokens(hd, hidden, 32) * init;
    let mut w_k = random_tokens(hd, hidden, 33) * init;
    let scale = 1.0 / (hd as f32).sqrt();
    let max_logit = |w_q: &Array2<f32>, w_k: &Array2<f32>| {
        max_logits_per_head(&x, w_q, w_k, 1, scale, true).expect("fixed shapes")[0]
    };
    let (x0, x1) = (x.row(1).to_owned(), x.row(0).to_owned()); // query 1 attends to key 0
    let mut out = vec![max_logit(&w_q, &w_k)];
    for _ in 0..steps {
        // ∂s/∂W_q = scale·(W_k x₁) x₀ᵀ and ∂s/∂W_k = scale·(W_q x₀) x₁ᵀ; we descend on −s.
        let (k1, q0) = (w_k.dot(&x1), w_q.dot(&x0));
        let outer = |a: &ndarray::Array1<f32>, b: &ndarray::Array1<f32>| {
            Array2::from_shape_fn((a.len(), b.len()), |(i, j)| -scale * a[i] * b[j])
        };
        let mut grads = vec![outer(&k1, &x0).into_dyn(), outer(&q0, &x1).into_dyn()];
        super::clip::clip_grad_norm(&mut grads, grad_clip, 2.0);
        let g_q = grads[0]
            .view()
            .into_dimensionality::<ndarray::Ix2>()
            .expect("2-D");
        let g_k = grads[1]
            .view()
            .into_dimensionality::<ndarray::Ix2>()
            .expect("2-D");
        w_q.scaled_add(-lr, &g_q);
        w_k.scaled_add(-lr, &g_k);
        if let Some(tau) = tau {
            let m = max_logit(&w_q, &w_k);
            qk_clip(&mut w_q, &mut w_k, &[m], tau).expect("one head");
        }
        out.push(max_logit(&w_q, &w_k));
    }
    out
}
