//! Chapter 12 — the backward pass of each block of the forward (source S0 5.4, 5.6).
//!
//! Each block has a clear reference (`*_reference`: plain loops, the formula on the page)
//! and, where the model's pass needs speed, a fast form pinned equal to it by a unit test:
//! the linear layers' forward goes through the kernels' batched matmul and their two
//! backward products through the kernels' GEMM (in parallel over rayon's threads), attention runs its key/value groups in parallel. Every backward
//! function *adds* into its gradient outputs, so a tied weight or an input read twice
//! collects both contributions.

use crate::kernels::gemm::{Strided, gemm};
use crate::kernels::{Matrix, attention::Mask, dot, silu, softmax_in_place};
use rayon::prelude::*;

// ---------------------------------------------------------------------------- linear

/// `y[t] = W·x[t] (+ b)` for the rows of `x`: `W` is `[rows, cols]` (an nn.Linear's
/// `[out, in]`), `x` is `[n, cols]`, `y` is `[n, rows]` (overwritten).
pub fn linear_forward(w: &[f32], rows: usize, cols: usize, x: &[f32], y: &mut [f32]) {
    if x.is_empty() {
        return;
    }
    // The AVX2 tiles on every x86-64 CPU, AVX-512 or not: training is a long chain in
    // which summation order compounds, so a run must not change with the CPU it runs on.
    Matrix::f32(w, rows, cols).matmul_without_avx512(x, y);
}

// ANCHOR: linear_backward_reference
/// The backward of `y = x·Wᵀ`: `dx += dy·W` (when `dx` is given) and `dW += dyᵀ·x`.
pub fn linear_backward_reference(
    w: &[f32],
    rows: usize,
    cols: usize,
    x: &[f32],
    dy: &[f32],
    dx: Option<&mut [f32]>,
    dw: &mut [f32],
) {
    let n = dy.len() / rows;
    if let Some(dx) = dx {
        for t in 0..n {
            for r in 0..rows {
                let g = dy[t * rows + r];
                for c in 0..cols {
                    dx[t * cols + c] += g * w[r * cols + c];
                }
            }
        }
    }
    for t in 0..n {
        for r in 0..rows {
            let g = dy[t * rows + r];
            for c in 0..cols {
                dw[r * cols + c] += g * x[t * cols + c];
            }
        }
    }
}
// ANCHOR_END: linear_backward_reference

/// Output rows (of `dx` or `dW`) per parallel task of [`linear_backward`].
const ROW_TASK: usize = 64;

/// [`linear_backward_reference`] as two GEMMs ([`gemm`], the kernels' strided f32 GEMM)
/// on the operands as they lie, with no transposed copy: `dx += dy·W` (`A = dy`, `B = W`)
/// and `dW += dyᵀ·x` (`A = dy` read with its strides swapped, `B = x`), each in parallel
/// over blocks of its output rows. Every output is summed over its inputs in order, so
/// the result does not depend on the blocks or the threads.
pub fn linear_backward(
    w: &[f32],
    rows: usize,
    cols: usize,
    x: &[f32],
    dy: &[f32],
    dx: Option<&mut [f32]>,
    dw: &mut [f32],
) {
    let n = dy.len() / rows;
    if n == 0 || cols == 0 {
        return;
    }
    if let Some(dx) = dx {
        dx[..n * cols]
            .par_chunks_mut(ROW_TASK * cols)
            .enumerate()
            .for_each(|(b, dxb)| {
                let t0 = b * ROW_TASK;
                let a = Strided {
                    data: &dy[t0 * rows..],
                    rows: dxb.len() / cols,
                    cols: rows,
                    row_stride: rows,
                    col_stride: 1,
                };
                gemm(&a, w, cols, cols, dxb, cols, true);
            });
    }
    weight_grad(x, dy, rows, cols, dw);
}

/// `dW += dyᵀ · x`, `dW[r, c] += Σ_t dy[t, r] · x[t, c]`: blocks of `dW`'s rows in
/// parallel, each one GEMM with `dyᵀ` read through strides.
pub fn weight_grad(x: &[f32], dy: &[f32], rows: usize, cols: usize, dw: &mut [f32]) {
    let n = dy.len() / rows;
    if n == 0 || cols == 0 {
        return;
    }
    dw[..rows * cols]
        .par_chunks_mut(ROW_TASK * cols)
        .enumerate()
        .for_each(|(b, dwb)| {
            let r0 = b * ROW_TASK;
            let a = Strided {
                data: &dy[r0..],
                rows: dwb.len() / cols,
                cols: n,
                row_stride: 1,
                col_stride: rows,
            };
            gemm(&a, x, cols, cols, dwb, cols, true);
        });
}

/// `Σ_t dy[t]`, added into a bias gradient.
pub fn bias_backward(dy: &[f32], db: &mut [f32]) {
    for row in dy.chunks_exact(db.len()) {
        add_into(db, row);
    }
}

pub fn add_into(acc: &mut [f32], x: &[f32]) {
    for (a, b) in acc.iter_mut().zip(x) {
        *a += b;
    }
}

// --------------------------------------------------------------------------- RMSNorm

/// `1 / sqrt(mean(x²) + eps)`, the factor [`crate::kernels::rmsnorm`] multiplies by
/// (computed the same way), saved for the backward pass.
pub fn rms_inv(x: &[f32], eps: f32) -> f32 {
    1.0 / (dot(x, x) / x.len() as f32 + eps).sqrt()
}

// ANCHOR: rmsnorm_backward_reference
/// The backward of `y = w ⊙ x·r`, `r = (mean(x²) + eps)^(-1/2)`, for one row:
/// `dx += r·(w⊙dy) − (r³/n)·x·Σ(w⊙dy⊙x)` and `dw += dy ⊙ x·r`.
pub fn rmsnorm_backward_reference(
    x: &[f32],
    r: f32,
    w: &[f32],
    dy: &[f32],
    dx: &mut [f32],
    dw: &mut [f32],
) {
    let n = x.len() as f32;
    let s: f32 = (0..x.len()).map(|i| w[i] * dy[i] * x[i]).sum();
    let c = r * r * r / n * s;
    for i in 0..x.len() {
        dx[i] += r * w[i] * dy[i] - c * x[i];
        dw[i] += dy[i] * x[i] * r;
    }
}
// ANCHOR_END: rmsnorm_backward_reference

/// [`rmsnorm_backward_reference`] over the rows of `x` (`[n, len]`), with one `r` per row.
pub fn rmsnorm_backward_rows(
    x: &[f32],
    r: &[f32],
    w: &[f32],
    dy: &[f32],
    dx: &mut [f32],
    dw: &mut [f32],
) {
    let len = w.len();
    for (((x, &r), dy), dx) in x
        .chunks_exact(len)
        .zip(r)
        .zip(dy.chunks_exact(len))
        .zip(dx.chunks_exact_mut(len))
    {
        rmsnorm_backward_reference(x, r, w, dy, dx, dw);
    }
}

// ------------------------------------------------------------------------------ RoPE

// ANCHOR: rope_backward
/// The backward of [`crate::position::rope::apply_rope`], in place: RoPE is a rotation
/// of each plane `(x_i, x_{i+h})` (scaled by the table's attention factor), so the
/// gradient goes back through the transposed rotation — the same rotation with `−sin`.
pub fn rope_backward(dy: &mut [f32], cos: &[f32], sin: &[f32]) {
    let h = cos.len();
    let (first, second) = dy[..2 * h].split_at_mut(h);
    for i in 0..h {
        let (a, b) = (first[i], second[i]);
        first[i] = a * cos[i] + b * sin[i];
        second[i] = b * cos[i] - a * sin[i];
    }
}
// ANCHOR_END: rope_backward

// ---------------------------------------------------------------------------- SwiGLU

// ANCHOR: swiglu_backward
/// The backward of `a = silu(g) ⊙ u`: `dg += da ⊙ u ⊙ silu'(g)`, `du += da ⊙ silu(g)`,
/// with `silu'(g) = σ(g)·(1 + g·(1 − σ(g)))`.
pub fn swiglu_backward(g: &[f32], u: &[f32], da: &[f32], dg: &mut [f32], du: &mut [f32]) {
    for i in 0..g.len() {
        let s = 1.0 / (1.0 + (-g[i]).exp());
        dg[i] += da[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
        du[i] += da[i] * silu(g[i]);
    }
}
// ANCHOR_END: swiglu_backward

// --------------------------------------------------------------------------- softmax

// ANCHOR: softmax_backward
/// The backward of `p = softmax(z)`: `dz += p ⊙ (dp − Σ p·dp)`.
pub fn softmax_backward(p: &[f32], dp: &[f32], dz: &mut [f32]) {
    let s: f32 = p.iter().zip(dp).map(|(p, d)| p * d).sum();
    for i in 0..p.len() {
        dz[i] += p[i] * (dp[i] - s);
    }
}
// ANCHOR_END: softmax_backward

// ---------------------------------------------------------------------------- router

// ANCHOR: router_backward
/// The backward of the routing weights: `w_j = p[e_j]`, or `p[e_j] / S` with
/// `S = Σ_j p[e_j]` when `norm_topk_prob`, for the chosen experts `e`. Adds `∂L/∂p` into
/// `dp` (non-chosen experts get nothing here; the softmax spreads it over all of them).
pub fn topk_weights_backward(
    probs: &[f32],
    chosen: &[usize],
    weights: &[f32],
    dw: &[f32],
    norm_topk_prob: bool,
    dp: &mut [f32],
) {
    if norm_topk_prob {
        let s: f32 = chosen.iter().map(|&e| probs[e]).sum();
        let mean: f32 = dw.iter().zip(weights).map(|(d, w)| d * w).sum();
        for (&e, &d) in chosen.iter().zip(dw) {
            dp[e] += (d - mean) / s;
        }
    } else {
        for (&e, &d) in chosen.iter().zip(dw) {
            dp[e] += d;
        }
    }
}
// ANCHOR_END: router_backward

// ------------------------------------------------------------------------- attention

/// One sequence's grouped-query attention inputs: `q` `[T, heads·d]`, `k` and `v`
/// `[T, kv_heads·d]`, after RoPE.
#[derive(Clone, Copy, Debug)]
pub struct AttnShape {
    pub heads: usize,
    pub kv_heads: usize,
    pub head_dim: usize,
    pub scale: f32,
    pub mask: Mask,
}

impl AttnShape {
    fn group(&self) -> usize {
        self.heads / self.kv_heads
    }
}

/// `o = softmax(q·kᵀ·scale)·v` under the mask, for `t` positions: writes `o` `[T, heads·d]`
/// and the probabilities `probs` `[heads, T, T]` (zero where masked), and returns each
/// head's largest scaled logit.
pub fn attention_forward(
    s: &AttnShape,
    t: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    o: &mut [f32],
    probs: &mut [f32],
) -> Vec<f32> {
    let d = s.head_dim;
    let (qd, kvd) = (s.heads * d, s.kv_heads * d);
    let mut max_logit = vec![f32::NEG_INFINITY; s.heads];
    for (h, max) in max_logit.iter_mut().enumerate() {
        let g = h / s.group();
        for i in 0..t {
            let span = s.mask.span(i);
            let row = &mut probs[(h * t + i) * t..(h * t + i + 1) * t];
            row.fill(0.0);
            let qi = &q[i * qd + h * d..i * qd + (h + 1) * d];
            for j in span.clone() {
                row[j] = s.scale * dot(qi, &k[j * kvd + g * d..j * kvd + (g + 1) * d]);
                *max = max.max(row[j]);
            }
            softmax_in_place(&mut row[span.clone()]);
            let oi = &mut o[i * qd + h * d..i * qd + (h + 1) * d];
            oi.fill(0.0);
            for j in span {
                let vj = &v[j * kvd + g * d..j * kvd + (g + 1) * d];
                for (a, b) in oi.iter_mut().zip(vj) {
                    *a += row[j] * b;
                }
            }
        }
    }
    max_logit
}

/// The backward of [`attention_forward`]: with `dP_ij = do_i·v_j`,
/// `dv_j += Σ_i P_ij·do_i`, `dS_ij = P_ij·(dP_ij − Σ_j' P_ij'·dP_ij')`,
/// `dq_i += scale·Σ_j dS_ij·k_j`, `dk_j += scale·Σ_i dS_ij·q_i` (query heads of a group
/// add into their shared key/value head).
#[allow(clippy::too_many_arguments)]
// ANCHOR: attention_backward_reference
pub fn attention_backward_reference(
    s: &AttnShape,
    t: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    probs: &[f32],
    d_o: &[f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    let d = s.head_dim;
    let (qd, kvd) = (s.heads * d, s.kv_heads * d);
    let mut dp = vec![0.0f32; t];
    for h in 0..s.heads {
        let g = h / s.group();
        for i in 0..t {
            let span = s.mask.span(i);
            let p = &probs[(h * t + i) * t..(h * t + i + 1) * t];
            let doi = &d_o[i * qd + h * d..i * qd + (h + 1) * d];
            for j in span.clone() {
                dp[j] = dot(doi, &v[j * kvd + g * d..j * kvd + (g + 1) * d]);
                for c in 0..d {
                    dv[j * kvd + g * d + c] += p[j] * doi[c];
                }
            }
            let sum: f32 = span.clone().map(|j| p[j] * dp[j]).sum();
            for j in span {
                let ds = p[j] * (dp[j] - sum) * s.scale;
                for c in 0..d {
                    dq[i * qd + h * d + c] += ds * k[j * kvd + g * d + c];
                    dk[j * kvd + g * d + c] += ds * q[i * qd + h * d + c];
                }
            }
        }
    }
}
// ANCHOR_END: attention_backward_reference

/// [`attention_backward_reference`] with the key/value groups in parallel: group `g` owns
/// its query heads' slice of `dq` and its own slice of `dk` / `dv`, so each thread
/// accumulates into buffers of its own, copied back at the end.
#[allow(clippy::too_many_arguments)]
pub fn attention_backward(
    s: &AttnShape,
    t: usize,
    q: &[f32],
    k: &[f32],
    v: &[f32],
    probs: &[f32],
    d_o: &[f32],
    dq: &mut [f32],
    dk: &mut [f32],
    dv: &mut [f32],
) {
    let d = s.head_dim;
    let (qd, kvd, group) = (s.heads * d, s.kv_heads * d, s.group());
    // Per group: (dq of its heads [T, group·d], dk [T, d], dv [T, d]).
    let parts: Vec<(Vec<f32>, Vec<f32>, Vec<f32>)> = (0..s.kv_heads)
        .into_par_iter()
        .map(|g| {
            let gd = group * d;
            let (mut gq, mut gk, mut gv) = (vec![0.0; t * gd], vec![0.0; t * d], vec![0.0; t * d]);
            let mut dp = vec![0.0f32; t];
            for hh in 0..group {
                let h = g * group + hh;
                for i in 0..t {
                    let span = s.mask.span(i);
                    let p = &probs[(h * t + i) * t..(h * t + i + 1) * t];
                    let doi = &d_o[i * qd + h * d..i * qd + (h + 1) * d];
                    let qi = &q[i * qd + h * d..i * qd + (h + 1) * d];
                    let mut sum = 0.0f32;
                    for j in span.clone() {
                        let vj = &v[j * kvd + g * d..j * kvd + (g + 1) * d];
                        dp[j] = dot(doi, vj);
                        sum += p[j] * dp[j];
                        let gvj = &mut gv[j * d..(j + 1) * d];
                        for (a, b) in gvj.iter_mut().zip(doi) {
                            *a += p[j] * b;
                        }
                    }
                    let gqi = &mut gq[i * gd + hh * d..i * gd + (hh + 1) * d];
                    for j in span {
                        let ds = p[j] * (dp[j] - sum) * s.scale;
                        let kj = &k[j * kvd + g * d..j * kvd + (g + 1) * d];
                        for (a, b) in gqi.iter_mut().zip(kj) {
                            *a += ds * b;
                        }
                        for (a, b) in gk[j * d..(j + 1) * d].iter_mut().zip(qi) {
                            *a += ds * b;
                        }
                    }
                }
            }
            (gq, gk, gv)
        })
        .collect();
    for (g, (gq, gk, gv)) in parts.iter().enumerate() {
        let gd = group * d;
        for i in 0..t {
            add_into(
                &mut dq[i * qd + g * gd..i * qd + (g + 1) * gd],
                &gq[i * gd..(i + 1) * gd],
            );
            add_into(
                &mut dk[i * kvd + g * d..i * kvd + (g + 1) * d],
                &gk[i * d..(i + 1) * d],
            );
            add_into(
                &mut dv[i * kvd + g * d..i * kvd + (g + 1) * d],
                &gv[i * d..(i + 1) * d],
            );
        }
    }
}

// ------------------------------------------------------------------ cross-entropy

// ANCHOR: cross_entropy
/// One row's cross-entropy `logsumexp(z) − z[target]`, and its gradient
/// `(softmax(z) − onehot(target)) · scale` written over `z`. One `exp` per logit (f32,
/// after subtracting the maximum), summed in f64: the LM head's rows are the widest
/// softmax of the model (151 936 entries for Qwen's vocabulary).
pub fn cross_entropy_row(z: &mut [f32], target: usize, scale: f32) -> f64 {
    let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let picked = (z[target] - max) as f64;
    let mut sum = 0.0f64;
    for x in z.iter_mut() {
        *x = (*x - max).exp();
        sum += *x as f64;
    }
    let norm = (scale as f64 / sum) as f32;
    for x in z.iter_mut() {
        *x *= norm;
    }
    z[target] -= scale;
    sum.ln() - picked
}
// ANCHOR_END: cross_entropy

/// `logsumexp(z)` in f64.
pub fn logsumexp(z: &[f32]) -> f64 {
    let max = z.iter().copied().fold(f32::NEG_INFINITY, f32::max) as f64;
    max + z.iter().map(|&x| (x as f64 - max).exp()).sum::<f64>().ln()
}

// ---------------------------------------------------------------- router losses

/// transformers' `load_balancing_loss_func` over every MoE layer's router logits (each
/// `[N, E]`, pooled into `R` rows): `aux = E · Σ_e (count_e / R) · (Σ_r p_re / R)`, with
/// `count_e` the top-k picks of expert e (no gradient). Adds `coef · ∂aux/∂logits` into
/// `dz` (one buffer per layer) and returns `aux`.
pub fn load_balancing_loss(
    layers: &[Vec<f32>],
    num_experts: usize,
    k: usize,
    coef: f32,
    dz: &mut [Vec<f32>],
) -> f32 {
    let e = num_experts;
    let rows = layers.iter().map(|l| l.len() / e).sum::<usize>() as f64;
    let (mut counts, mut prob_sum) = (vec![0.0f64; e], vec![0.0f64; e]);
    let mut probs = Vec::new();
    let mut top = vec![0usize; k];
    for z in layers.iter().flat_map(|l| l.chunks_exact(e)) {
        probs.clear();
        probs.extend_from_slice(z);
        softmax_in_place(&mut probs);
        crate::moe::router::top_k_into(&probs, &mut top);
        top.iter().for_each(|&x| counts[x] += 1.0);
        probs
            .iter()
            .zip(&mut prob_sum)
            .for_each(|(p, s)| *s += *p as f64);
    }
    // ANCHOR: load_balancing
    let r2 = rows * rows;
    let aux = counts
        .iter()
        .zip(&prob_sum)
        .map(|(c, p)| c * p)
        .sum::<f64>()
        * e as f64
        / r2;
    // ∂aux/∂p[r, x] = E·count_x / R², the same for every row; then each row's softmax.
    let dp: Vec<f32> = counts
        .iter()
        .map(|&n| (coef as f64 * e as f64 * n / r2) as f32)
        .collect();
    for (l, d) in layers.iter().zip(dz.iter_mut()) {
        for (z, dzr) in l.chunks_exact(e).zip(d.chunks_exact_mut(e)) {
            probs.clear();
            probs.extend_from_slice(z);
            softmax_in_place(&mut probs);
            softmax_backward(&probs, &dp, dzr);
        }
    }
    aux as f32
}
// ANCHOR_END: load_balancing

/// The ST-MoE router z-loss over every MoE layer's rows pooled:
/// `z = mean_r logsumexp(logits_r)²`; adds `coef · ∂z/∂logits =
/// coef · 2·lse_r·softmax(logits_r) / R` into `dz` and returns `z`.
pub fn router_z_loss(
    layers: &[Vec<f32>],
    num_experts: usize,
    coef: f32,
    dz: &mut [Vec<f32>],
) -> f32 {
    let e = num_experts;
    let rows = layers.iter().map(|l| l.len() / e).sum::<usize>() as f64;
    let mut sum = 0.0f64;
    for (l, d) in layers.iter().zip(dz.iter_mut()) {
        for (z, dzr) in l.chunks_exact(e).zip(d.chunks_exact_mut(e)) {
            let lse = logsumexp(z);
            sum += lse * lse;
            let g = coef as f64 * 2.0 * lse / rows;
            for (dzi, &zi) in dzr.iter_mut().zip(z) {
                *dzi += (g * (zi as f64 - lse).exp()) as f32;
            }
        }
    }
    (sum / rows) as f32
}
