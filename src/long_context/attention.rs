//! Attention three ways (source S1 §2 and its interview answer on O(n²)): the naive
//! form that materialises the whole score matrix, a tiled form with an online softmax
//! (FlashAttention's idea: the same result with O(n) extra memory), and sliding-window
//! attention. All three share one mask definition.
//!
//! Claim backed: `ext.flash_equiv`.

use crate::kernels::{dot, softmax_in_place};
use ndarray::{Array2, ArrayView2};

/// Which keys a query at position `i` may see (keys and queries share positions
/// `0..n`; for a cache, queries are the last rows).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Mask {
    /// Every key (bidirectional).
    None,
    /// Keys at positions `≤ i`.
    Causal,
    /// Keys at positions in `(i − window, i]`: causal, at most `window` of them.
    SlidingWindow(usize),
}

impl Mask {
    /// True when the query at `qi` may attend to the key at `kj`.
    pub fn allows(self, qi: usize, kj: usize) -> bool {
        match self {
            Mask::None => true,
            Mask::Causal => kj <= qi,
            Mask::SlidingWindow(w) => kj <= qi && qi - kj < w,
        }
    }
}

// ANCHOR: naive
/// `softmax(q·kᵀ·scale + mask)·v`, materialising the `[n_q, n_k]` score matrix.
/// Query `i` sits at position `n_k − n_q + i`, so a single new query attends to the
/// whole cache.
pub fn naive_attention(
    q: ArrayView2<f32>,
    k: ArrayView2<f32>,
    v: ArrayView2<f32>,
    scale: f32,
    mask: Mask,
) -> Array2<f32> {
    let (n_q, n_k) = (q.nrows(), k.nrows());
    let offset = n_k - n_q;
    let mut scores = Array2::<f32>::zeros((n_q, n_k));
    for i in 0..n_q {
        let qi = q.row(i);
        let qs = qi.as_slice().expect("contiguous q");
        for j in 0..n_k {
            scores[[i, j]] = if mask.allows(offset + i, j) {
                dot(qs, k.row(j).as_slice().expect("contiguous k")) * scale
            } else {
                f32::NEG_INFINITY
            };
        }
        softmax_in_place(scores.row_mut(i).as_slice_mut().expect("contiguous"));
    }
    scores.dot(&v)
}
// ANCHOR_END: naive

/// What the tiled kernel allocated besides its output: it never holds more than one
/// tile of scores per query, however long the sequence.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TiledStats {
    pub tiles: usize,
    /// f32 values of scratch space (one score tile plus the running max and sum).
    pub scratch_floats: usize,
}

// ANCHOR: tiled
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
    (
        out,
        TiledStats {
            tiles,
            scratch_floats: tile + 2,
        },
    )
}
// ANCHOR_END: tiled

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sliding_window_of_full_length_is_causal() {
        for i in 0..6 {
            for j in 0..6 {
                assert_eq!(
                    Mask::SlidingWindow(6).allows(i, j),
                    Mask::Causal.allows(i, j)
                );
            }
        }
        assert!(!Mask::SlidingWindow(2).allows(5, 3));
        assert!(Mask::SlidingWindow(2).allows(5, 4));
    }
}
