//! Attention three ways (source S1 §2 and its interview answer on O(n²)): the naive
//! form that materialises the whole score matrix ([`naive_attention`](crate::kernels::attention::naive_attention), kept with the
//! [`Mask`] in [`crate::kernels::attention`]), a tiled form with an online softmax
//! (FlashAttention's idea: the same result with O(n) extra memory), and sliding-window
//! attention. All three share that one mask definition.
//!
//! Claim backed: `ext.flash_equiv`.

use crate::kernels::attention::Mask;
use crate::kernels::dot;
use ndarray::{Array2, ArrayView2};

/// What the tiled kernel allocated besides its output: it never holds more than one
/// tile of scores per query, however long the sequence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TiledStats {
    pub tiles: usize,
    /// f32 values of scratch space (one score tile plus the running max and sum).
    pub scratch_floats: usize,
}

/// The same attention computed one key tile at a time with an online softmax: for
/// each query keep the running maximum `m`, the running denominator `l` and the
/// unnormalised output `acc`; a new tile with maximum `m'` rescales the old state by
/// `exp(m − m')`. No `[n_q, n_k]` matrix is ever formed.
pub fn tiled_attention(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    scale: f32,
    mask: Mask,
    tile: usize,
) -> (Array2<f32>, TiledStats) {
    let (n_q, n_k, dv) = (q.nrows(), k.nrows(), v.ncols());
    let offset = n_k - n_q;
    let tile = tile.max(1);
    // ANCHOR: tiled
    let mut out = Array2::<f32>::zeros((n_q, dv));
    let mut scores = vec![0.0f32; tile];
    let mut tiles = 0;
    for i in 0..n_q {
        let qs = q.row(i).to_vec();
        let (mut m, mut l) = (f32::NEG_INFINITY, 0.0f32);
        let mut acc = out.row_mut(i);
        for start in (0..n_k).step_by(tile) {
            tiles += 1;
            let end = (start + tile).min(n_k);
            let mut tile_max = f32::NEG_INFINITY;
            for j in start..end {
                let s = if mask.allows(offset + i, j) {
                    dot(&qs, k.row(j).as_slice().expect("contiguous k")) * scale
                } else {
                    f32::NEG_INFINITY
                };
                scores[j - start] = s;
                tile_max = tile_max.max(s);
            }
            if tile_max == f32::NEG_INFINITY {
                continue; // the whole tile is masked
            }
            let new_m = m.max(tile_max);
            let correction = (m - new_m).exp(); // 0 on the first visible tile
            l *= correction;
            acc.mapv_inplace(|a| a * correction);
            for j in start..end {
                let p = (scores[j - start] - new_m).exp();
                l += p;
                acc.scaled_add(p, &v.row(j));
            }
            m = new_m;
        }
        acc.mapv_inplace(|a| a / l);
    }
    // ANCHOR_END: tiled
    (
        out,
        TiledStats {
            tiles,
            scratch_floats: tile + 2,
        },
    )
}
