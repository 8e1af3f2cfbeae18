//! AVX512_VNNI forms of the int8 tiles (chapter 10): `vpdpbusd` multiplies 64 unsigned by
//! 64 signed bytes and adds each group of four products into an i32 lane in one
//! instruction (AVX2 needs `vpmaddubsw` then `vpmaddwd`, and an i16 that can saturate).
//! Two kernels for Q8_0, Q4_K and Q6_K: tiles of up to [`MAX_ROWS`] weight rows by
//! [`MAX_TILE_TOKENS`] token rows, a 64-byte register holding two 32-value activation
//! blocks (small groups), and the row lanes of `lanes.rs`, 16 weight rows in the 16 lanes
//! of a register (groups of [`LANES_MIN_TOKENS`] or more).
//!
//! Signedness: `vpdpbusd` wants the weight operand unsigned. Q4_K's nibbles already are;
//! Q6_K's `q − 32` and Q8_0's signed `w` are fed as `q` and `w + 128` (a bit flip) and
//! the offset is taken back in integers before the sum starts: the accumulator is seeded
//! with `−32·Σx̂` (`−128·Σx̂`) per lane, itself one `vpdpbusd` of the token's bytes with a
//! constant, shared by every row of the tile (the lanes take it off per block instead).
//! So each i32 lane is the exact integer sum
//! of four `w·x̂` products, as the reference's; only the f32 scaling and additions come in
//! another order, and tests pin every tile to [`super::dot_row_reference`] within
//! `4·(blocks)·ε·Σ|w·x̂|`, the bound of `tiles`.
//!
//! The switch: on when the CPU has AVX-512F/BW/VL and AVX512_VNNI (with AVX2, FMA, F16C)
//! and neither `ANATOMY_NO_VNNI` nor `ANATOMY_NO_AVX512` is 1 (the kernels' policy);
//! [`with_vnni`] forces it on the calling thread (tests run both paths).

use super::super::dispatch::kernels;
use super::super::policy::with_switches;
use super::{ActRow, QuantizedRows};
use crate::quant::GgmlType;

/// Weight rows per tile.
pub const MAX_ROWS: usize = 4;
/// Token rows per tile (4 rows × 4 tokens: 16 f32 accumulators of 32 registers).
pub const MAX_TILE_TOKENS: usize = 4;

/// Runs `f` with the VNNI tiles forced on (if the CPU has them) or off for the matmuls
/// this thread calls.
pub fn with_vnni<R>(on: bool, f: impl FnOnce() -> R) -> R {
    with_switches(
        |s| {
            s.no_vnni = !on;
            s.no_avx512 &= !on;
        },
        f,
    )
}

/// Whether the CPU has every feature the kernels here are compiled with.
pub fn cpu_has_vnni() -> bool {
    super::super::policy::cpu().vnni()
}

/// Whether the matmuls this thread calls take the VNNI tiles: the calling thread's policy
/// (the CPU has them and neither `ANATOMY_NO_VNNI` nor `ANATOMY_NO_AVX512` is 1, unless a
/// test forced another).
pub fn use_vnni() -> bool {
    super::super::policy::current().vnni()
}

/// Whether `ty` has VNNI kernels on this CPU.
pub fn has_vnni(ty: GgmlType) -> bool {
    kernels(ty).vnni_from_tokens.is_some() && cpu_has_vnni()
}

/// Whether the VNNI kernels beat the AVX2 int8 kernels for a group of `n` tokens of `ty`
/// (as `tests::vnni_timing` measures): the row lanes from [`LANES_MIN_TOKENS`]; at 2–3
/// tokens the VNNI tiles for Q8_0 and Q6_K but not Q4_K, whose f32 scaling per row and
/// token eats the gain; at 1 token the AVX2 decode kernels, whose prefetches stream a
/// matrix from memory faster than the 4-row VNNI tile (`tiles::big_timing`).
pub fn wins(ty: GgmlType, n: usize) -> bool {
    kernels(ty).vnni_from_tokens.is_some_and(|from| n >= from)
}

/// Groups of at least this many tokens take the row-lane kernels (`lanes.rs`) for each
/// 16 rows (the last rows, fewer than 16, take the tiles): below it the transposed chunk
/// is shared by too few tokens to pay for itself.
pub use super::super::dispatch::LANES_MIN_TOKENS;

/// With the VNNI kernels, groups take the int8 path up to this many token rows (AVX2:
/// [`super::TILED_MAX_TOKENS`]).
pub use super::super::dispatch::INT8_LANES_MAX_TOKENS as LANES_MAX_TOKENS;

/// The int8 path's token limit for `ty` when this thread's matmuls take the VNNI kernels
/// (all of Q8_0, Q4_K, Q6_K on a CPU with them), else `None`.
pub fn max_tokens(ty: GgmlType) -> Option<usize> {
    (has_vnni(ty) && use_vnni()).then_some(LANES_MAX_TOKENS)
}

/// `put(t, i, Σ_c w_i,c · x̂_c)` for every row `i` of `rows` (consecutive rows of
/// `row_bytes` bytes, whole blocks of `ty`) and every token `tokens.start + t` of `acts`
/// (quantised in blocks of [`super::activation_block`]`(ty)`, as long as a row), in tiles
/// of [`MAX_ROWS`] × [`MAX_TILE_TOKENS`]. Returns false, having done nothing, when
/// [`has_vnni`] is false.
pub fn dot_block(
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    acts: &QuantizedRows,
    tokens: std::ops::Range<usize>,
    mut put: impl FnMut(usize, usize, f32),
) -> bool {
    if !has_vnni(ty) || tokens.is_empty() {
        return has_vnni(ty);
    }
    assert_eq!(
        super::activation_block(ty),
        Some(acts.block),
        "vnni dot: activation block"
    );
    assert_eq!(
        ty.row_bytes(acts.cols as u64),
        Some(row_bytes as u64),
        "vnni dot: row length"
    );
    assert!(
        row_bytes > 0 && rows.len().is_multiple_of(row_bytes),
        "vnni dot: rows"
    );
    assert!(
        tokens.end * acts.cols <= acts.qs.len(),
        "vnni dot: token rows"
    );
    let nrows = rows.len() / row_bytes;
    let mut i0 = 0;
    #[cfg(target_arch = "x86_64")]
    if lanes::has_lanes(ty) && tokens.len() >= LANES_MIN_TOKENS {
        // Sixteen rows at a time in the lanes; the last rows (fewer than 16) take the tiles.
        while nrows - i0 >= lanes::ROWS {
            let block = &rows[i0 * row_bytes..(i0 + lanes::ROWS) * row_bytes];
            let mut t0 = tokens.start;
            while t0 < tokens.end {
                let nt = (tokens.end - t0).min(lanes::MAX_TOKENS);
                lanes::rows16(ty, block, row_bytes, acts, t0..t0 + nt, |t, i, v| {
                    put(t0 - tokens.start + t, i0 + i, v)
                });
                t0 += nt;
            }
            i0 += lanes::ROWS;
        }
    }
    if !kernels(ty).vnni_tiles {
        // The types with lanes only: the rows left over take the per-row int8 dot.
        for i in i0..nrows {
            let row = &rows[i * row_bytes..][..row_bytes];
            for t in tokens.clone() {
                put(t - tokens.start, i, super::dot_row(ty, row, acts.row(t)));
            }
        }
        return true;
    }
    while i0 < nrows {
        let nr = (nrows - i0).min(MAX_ROWS);
        // A short last quad repeats its last row (computed, not written).
        let quad: [&[u8]; MAX_ROWS] = std::array::from_fn(|k| {
            let r = i0 + k.min(nr - 1);
            &rows[r * row_bytes..][..row_bytes]
        });
        let mut t0 = tokens.start;
        while t0 < tokens.end {
            let nt = (tokens.end - t0).min(MAX_TILE_TOKENS);
            let mut v = [[0.0f32; MAX_TILE_TOKENS]; MAX_ROWS];
            match nt {
                1 => tile::<1>(ty, &quad, acts, t0, &mut v),
                2 => tile::<2>(ty, &quad, acts, t0, &mut v),
                3 => tile::<3>(ty, &quad, acts, t0, &mut v),
                _ => tile::<4>(ty, &quad, acts, t0, &mut v),
            }
            for (i, vi) in v.iter().enumerate().take(nr) {
                for (t, &x) in vi.iter().enumerate().take(nt) {
                    put(t0 - tokens.start + t, i0 + i, x);
                }
            }
            t0 += nt;
        }
        i0 += nr;
    }
    true
}

/// One monomorphised tile of `T` tokens from `t0`.
fn tile<const T: usize>(
    ty: GgmlType,
    rows: &[&[u8]; MAX_ROWS],
    acts: &QuantizedRows,
    t0: usize,
    out: &mut [[f32; MAX_TILE_TOKENS]; MAX_ROWS],
) {
    let xs: [ActRow; T] = std::array::from_fn(|t| acts.row(t0 + t));
    let v = x86::tile::<MAX_ROWS, T>(ty, rows, &xs);
    for (o, vi) in out.iter_mut().zip(&v) {
        o[..T].copy_from_slice(vi);
    }
}

#[cfg(target_arch = "x86_64")]
#[path = "vnni/x86.rs"]
mod x86;

#[cfg(target_arch = "x86_64")]
#[path = "vnni/lanes.rs"]
mod lanes;

#[cfg(not(target_arch = "x86_64"))]
mod x86 {
    use super::ActRow;
    use crate::quant::GgmlType;
    pub fn tile<const R: usize, const T: usize>(
        _: GgmlType,
        _: &[&[u8]; R],
        _: &[ActRow; T],
    ) -> [[f32; T]; R] {
        unreachable!("vnni tiles: not on this CPU")
    }
}

#[cfg(test)]
#[path = "vnni/tests.rs"]
mod tests;
