//! Why position encoding is needed (source S0 5.1.1, S1 §1): single-head attention
//! without position information is permutation-equivariant — shuffle the tokens and the
//! outputs are shuffled the same way, nothing else changes, so "the dog bites the man"
//! and "the man bites the dog" look alike. Rotating q and k by their positions (RoPE)
//! breaks the symmetry.
//!
//! Claim backed: `rope.permutation_equivariance`.

use super::rope::{RopeTable, apply_rope, inv_freq};
use crate::kernels::attention::{Mask, naive_attention};
use crate::rand::normal_matrix;
use ndarray::{Array2, Axis};
use ndarray_rand::rand::{SeedableRng, rngs::StdRng};

/// A single attention head with random projections.
pub struct Head {
    pub wq: Array2<f32>,
    pub wk: Array2<f32>,
    pub wv: Array2<f32>,
}

impl Head {
    /// Projections `[d_model, d_head]` drawn from N(0, 1/d_model) with a fixed seed.
    pub fn random(d_model: usize, d_head: usize, seed: u64) -> Self {
        let mut rng = StdRng::seed_from_u64(seed);
        let s = 1.0 / (d_model as f32).sqrt();
        let mut draw = || normal_matrix(d_model, d_head, &mut rng) * s;
        Head {
            wq: draw(),
            wk: draw(),
            wv: draw(),
        }
    }

    // ANCHOR: head_forward
    /// Bidirectional attention over the rows of `x`; with `rope`, q and k of row `m`
    /// are rotated by position `m` first.
    pub fn forward(&self, x: &Array2<f32>, rope: bool) -> Array2<f32> {
        let (mut q, mut k, v) = (x.dot(&self.wq), x.dot(&self.wk), x.dot(&self.wv));
        let d_head = q.ncols();
        if rope {
            let table = RopeTable::new(&inv_freq(d_head, 10000.0), x.nrows(), 1.0);
            for m in 0..x.nrows() {
                let (c, s) = table.row(m);
                apply_rope(q.row_mut(m).as_slice_mut().expect("row"), c, s);
                apply_rope(k.row_mut(m).as_slice_mut().expect("row"), c, s);
            }
        }
        let scale = 1.0 / (d_head as f32).sqrt();
        naive_attention(q.view(), k.view(), v.view(), scale, Mask::None)
    }
    // ANCHOR_END: head_forward
}

/// Runs the head on `x` and on `x` with its rows permuted by `perm`, and returns the
/// largest difference between `out[perm]` and `out_of_permuted`: zero (to rounding)
/// when the head is permutation-equivariant.
pub fn equivariance_gap(head: &Head, x: &Array2<f32>, perm: &[usize], rope: bool) -> f32 {
    let out = head.forward(x, rope);
    let out_permuted_input = head.forward(&x.select(Axis(0), perm), rope);
    let permuted_out = out.select(Axis(0), perm);
    (&permuted_out - &out_permuted_input)
        .iter()
        .fold(0.0f32, |m, d| m.max(d.abs()))
}
