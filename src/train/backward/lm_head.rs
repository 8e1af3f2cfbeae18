//! Chapter 12 — the LM head and its cross-entropy, fused and parallel (source S0 5.4).
//!
//! With Qwen's 151 936-entry vocabulary and a hidden size of 32, the head is nearly all of
//! a small model's training step: per predicted token `2·V·H` FLOPs for the logits, twice
//! that backwards, and `V` exponentials. [`lm_head_loss`] never holds a row of logits:
//! the vocabulary is cut into [`BLOCKS`] fixed blocks (rayon's tasks), each swept in tiles
//! of [`VOCAB_TILE`] entries × the token rows, stored vocabulary-major (`Zᵀ`, so a vector
//! holds eight tokens' logits of one entry). Two passes per chunk of [`ROWS`] tokens:
//!
//! 1. `Zᵀ = W·Xᵀ` tile by tile, each token's running maximum and `Σ e^(z − max)` (per
//!    tile in f32, across tiles in f64), combined over the blocks into `logsumexp`;
//! 2. the same tiles again, `dZ = (softmax − onehot)/N` in place, then `dW += dZᵀ·X` (each
//!    block owns its rows of `dW`) and `dXᵀ += Wᵀ·dZᵀ` (one partial per block).
//!
//! Recomputing the logits costs a quarter more FLOPs than storing them and keeps every
//! tile in L2. The blocks are fixed and their partial sums are added in block order, so
//! the result does not depend on how many threads ran them. The clear form — a row of
//! logits, [`super::blocks::cross_entropy_row`], two matmuls — is the test's reference.

use crate::kernels::exp::{col_exp_scale, col_exp_sum, col_max};
use crate::kernels::gemm::{Strided, gemm};
use rayon::prelude::*;

/// Token rows per chunk (bounds the tiles and the partial `dXᵀ` buffers).
pub const ROWS: usize = 256;
/// Vocabulary entries per tile: a tile of logits for [`ROWS`] tokens is 128 KiB.
pub const VOCAB_TILE: usize = 128;
/// The vocabulary's blocks (the parallel tasks): a fixed number, whatever the threads.
pub const BLOCKS: usize = 64;

/// The gradients [`lm_head_loss`] adds into: `dW` `[V, H]` and `dX` `[N, H]`.
pub struct HeadGrads<'a> {
    pub dw: &'a mut [f32],
    pub dx: &'a mut [f32],
}

// ANCHOR: lm_head_loss
/// The mean cross-entropy of the rows `rows` (each `(row of x, target id)`) under the
/// head `w` `[vocab, hidden]` applied to `x` `[N, hidden]`; with `grads`, adds
/// `∂/∂W` and `∂/∂x` of that mean.
pub fn lm_head_loss(
    w: &[f32],
    vocab: usize,
    hidden: usize,
    x: &[f32],
    rows: &[(usize, usize)],
    mut grads: Option<HeadGrads>,
) -> f64 {
    assert!(
        w.len() == vocab * hidden && x.len().is_multiple_of(hidden.max(1)),
        "lm_head_loss: shapes"
    );
    if rows.is_empty() || vocab == 0 || hidden == 0 {
        return 0.0;
    }
    let scale = 1.0 / rows.len() as f32;
    let mut total = 0.0f64;
    for chunk in rows.chunks(ROWS) {
        let c = Chunk::new(w, vocab, hidden, x, chunk);
        let lse = c.logsumexp();
        for (i, &(r, target)) in chunk.iter().enumerate() {
            let z =
                crate::kernels::dot(&w[target * hidden..][..hidden], &x[r * hidden..][..hidden]);
            total += lse[i] - z as f64;
        }
        if let Some(g) = grads.as_mut() {
            c.backward(&lse, scale, g);
        }
    }
    total / rows.len() as f64
}
// ANCHOR_END: lm_head_loss

/// One chunk of token rows, padded to a multiple of 16 columns with zeros.
struct Chunk<'a> {
    w: &'a [f32],
    vocab: usize,
    h: usize,
    rows: &'a [(usize, usize)],
    /// Padded width (token columns).
    width: usize,
    /// `Xᵀ` `[h, width]`.
    xt: Vec<f32>,
    /// `X` `[width, h]`.
    xr: Vec<f32>,
    /// Entries per block (a multiple of [`VOCAB_TILE`]).
    block_len: usize,
}

impl<'a> Chunk<'a> {
    fn new(w: &'a [f32], vocab: usize, h: usize, x: &[f32], rows: &'a [(usize, usize)]) -> Self {
        let width = rows.len().next_multiple_of(16);
        let (mut xt, mut xr) = (vec![0.0f32; h * width], vec![0.0f32; width * h]);
        for (i, &(r, _)) in rows.iter().enumerate() {
            let row = &x[r * h..(r + 1) * h];
            xr[i * h..(i + 1) * h].copy_from_slice(row);
            for (c, &v) in row.iter().enumerate() {
                xt[c * width + i] = v;
            }
        }
        let tiles = vocab.div_ceil(VOCAB_TILE);
        let block_len = tiles.div_ceil(BLOCKS) * VOCAB_TILE;
        Chunk {
            w,
            vocab,
            h,
            rows,
            width,
            xt,
            xr,
            block_len,
        }
    }

    fn blocks(&self) -> usize {
        self.vocab.div_ceil(self.block_len)
    }

    /// The vocabulary tiles of block `b`, as `start..end` entries.
    fn tiles(&self, b: usize) -> impl Iterator<Item = (usize, usize)> + use<> {
        let (v0, v1) = (
            b * self.block_len,
            ((b + 1) * self.block_len).min(self.vocab),
        );
        (v0..v1)
            .step_by(VOCAB_TILE)
            .map(move |t0| (t0, (t0 + VOCAB_TILE).min(v1)))
    }

    /// `Zᵀ[v − t0, t] = W[v]·x_t` for the entries `t0..t1` (overwrites `z`).
    fn logits(&self, t0: usize, t1: usize, z: &mut [f32]) {
        let a = Strided {
            data: &self.w[t0 * self.h..t1 * self.h],
            rows: t1 - t0,
            cols: self.h,
            row_stride: self.h,
            col_stride: 1,
        };
        gemm(&a, &self.xt, self.width, self.width, z, self.width, false);
    }

    /// Each token's `logsumexp` over the vocabulary (f64).
    fn logsumexp(&self) -> Vec<f64> {
        let n = self.width;
        let stats: Vec<(Vec<f32>, Vec<f64>)> = (0..self.blocks())
            .into_par_iter()
            .map(|b| {
                let mut z = vec![0.0f32; VOCAB_TILE * n];
                let (mut max, mut sum) = (vec![f32::NEG_INFINITY; n], vec![0.0f64; n]);
                let (mut tile_max, mut tile_sum) = (vec![0.0f32; n], vec![0.0f32; n]);
                for (t0, t1) in self.tiles(b) {
                    let z = &mut z[..(t1 - t0) * n];
                    self.logits(t0, t1, z);
                    tile_max.copy_from_slice(&max);
                    col_max(z, &mut tile_max);
                    for ((s, m), &tm) in sum.iter_mut().zip(&mut max).zip(&tile_max) {
                        if tm > *m && *s != 0.0 {
                            *s *= (*m as f64 - tm as f64).exp();
                        }
                        *m = tm;
                    }
                    tile_sum.fill(0.0);
                    col_exp_sum(z, &max, &mut tile_sum);
                    sum.iter_mut()
                        .zip(&tile_sum)
                        .for_each(|(s, &t)| *s += t as f64);
                }
                (max, sum)
            })
            .collect();
        (0..self.rows.len())
            .map(|t| {
                let m = stats
                    .iter()
                    .map(|(m, _)| m[t])
                    .fold(f32::NEG_INFINITY, f32::max) as f64;
                let s: f64 = stats
                    .iter()
                    .map(|(bm, bs)| bs[t] * (bm[t] as f64 - m).exp())
                    .sum();
                m + s.ln()
            })
            .collect()
    }

    /// Pass 2: adds `∂/∂W` and `∂/∂x` of `scale · Σ cross-entropy` into `g`.
    fn backward(&self, lse: &[f64], scale: f32, g: &mut HeadGrads) {
        let (n, h) = (self.width, self.h);
        // Padding columns get +∞, so their "probabilities" are e^(−∞) = 0.
        let mut shift = vec![f32::INFINITY; n];
        shift.iter_mut().zip(lse).for_each(|(s, &l)| *s = l as f32);
        let partials: Vec<Vec<f32>> =
            g.dw.par_chunks_mut(self.block_len * h)
                .enumerate()
                .map(|(b, dw)| {
                    let mut z = vec![0.0f32; VOCAB_TILE * n];
                    let mut dxt = vec![0.0f32; h * n];
                    let v0 = b * self.block_len;
                    for (t0, t1) in self.tiles(b) {
                        let z = &mut z[..(t1 - t0) * n];
                        self.logits(t0, t1, z);
                        col_exp_scale(z, &shift, scale);
                        for (i, &(_, target)) in self.rows.iter().enumerate() {
                            if (t0..t1).contains(&target) {
                                z[(target - t0) * n + i] -= scale;
                            }
                        }
                        // dW[t0..t1] += dZᵀ · X.
                        let dz = Strided {
                            data: z,
                            rows: t1 - t0,
                            cols: n,
                            row_stride: n,
                            col_stride: 1,
                        };
                        let dw_tile = &mut dw[(t0 - v0) * h..(t1 - v0) * h];
                        gemm(&dz, &self.xr, h, h, dw_tile, h, true);
                        // dXᵀ += Wᵀ · dZᵀ: W's tile read with its strides swapped.
                        let wt = Strided {
                            data: &self.w[t0 * h..t1 * h],
                            rows: h,
                            cols: t1 - t0,
                            row_stride: 1,
                            col_stride: h,
                        };
                        gemm(&wt, z, n, n, &mut dxt, n, true);
                    }
                    dxt
                })
                .collect();
        for dxt in &partials {
            for (i, &(r, _)) in self.rows.iter().enumerate() {
                for c in 0..h {
                    g.dx[r * h + c] += dxt[c * n + i];
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::blocks::{cross_entropy_row, linear_backward_reference, linear_forward};
    use super::*;

    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let m = crate::rand::random_tokens(1, n, seed);
        m.iter().map(|v| v * scale).collect()
    }

    /// The fused head against the clear form, on a vocabulary that is not a whole number
    /// of tiles, more rows than a chunk, and a repeated target.
    #[test]
    fn lm_head_matches_reference() {
        let (vocab, h, n) = (1000, 20, 300);
        let w = values(vocab * h, 1, 0.5);
        let x = values(n * h, 2, 1.0);
        let rows: Vec<(usize, usize)> = (0..n - 3).map(|i| (i + 3, (i * 7919) % vocab)).collect();
        let scale = 1.0 / rows.len() as f32;
        // Reference: full rows of logits.
        let (mut ce, mut dw_ref, mut dx_ref) =
            (0.0f64, vec![0.0f32; vocab * h], vec![0.0f32; n * h]);
        for &(r, target) in &rows {
            let xr = &x[r * h..(r + 1) * h];
            let mut z = vec![0.0f32; vocab];
            linear_forward(&w, vocab, h, xr, &mut z);
            ce += cross_entropy_row(&mut z, target, scale);
            let mut dxr = vec![0.0f32; h];
            linear_backward_reference(&w, vocab, h, xr, &z, Some(&mut dxr), &mut dw_ref);
            dx_ref[r * h..(r + 1) * h]
                .iter_mut()
                .zip(&dxr)
                .for_each(|(a, b)| *a += b);
        }
        ce /= rows.len() as f64;
        let (mut dw, mut dx) = (vec![0.0f32; vocab * h], vec![0.0f32; n * h]);
        let loss = lm_head_loss(
            &w,
            vocab,
            h,
            &x,
            &rows,
            Some(HeadGrads {
                dw: &mut dw,
                dx: &mut dx,
            }),
        );
        assert!((loss - ce).abs() < 1e-5 * ce, "loss {loss} vs {ce}");
        for (name, got, want) in [("dW", &dw, &dw_ref), ("dx", &dx, &dx_ref)] {
            let top = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
            for (i, (g, r)) in got.iter().zip(want.iter()).enumerate() {
                assert!(
                    (g - r).abs() <= 1e-4 * top,
                    "{name}[{i}]: {g} vs {r} (max {top})"
                );
            }
        }
        assert_eq!(lm_head_loss(&w, vocab, h, &x, &rows, None), loss);
    }

    /// The same bits on 1 thread and on 3: the blocks and the order their partial sums
    /// are added in do not depend on the threads.
    #[test]
    fn lm_head_bits_do_not_depend_on_threads() {
        let (vocab, h, n) = (3000, 16, 40);
        let w = values(vocab * h, 3, 0.5);
        let x = values(n * h, 4, 1.0);
        let rows: Vec<(usize, usize)> = (0..n).map(|i| (i, (i * 131) % vocab)).collect();
        let run = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .expect("a thread pool");
            pool.install(|| {
                let (mut dw, mut dx) = (vec![0.0f32; vocab * h], vec![0.0f32; n * h]);
                let grads = HeadGrads {
                    dw: &mut dw,
                    dx: &mut dx,
                };
                let loss = lm_head_loss(&w, vocab, h, &x, &rows, Some(grads));
                (loss.to_bits(), dw, dx)
            })
        };
        let (one, three) = (run(1), run(3));
        assert_eq!(one.0, three.0, "loss");
        assert!(
            one.1
                .iter()
                .zip(&three.1)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "dW"
        );
        assert!(
            one.2
                .iter()
                .zip(&three.2)
                .all(|(a, b)| a.to_bits() == b.to_bits()),
            "dx"
        );
    }
}
