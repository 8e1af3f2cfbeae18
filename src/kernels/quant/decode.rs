//! The decode kernels of the int8 path (chapter 10): one weight row against one quantised
//! token, for the types of llama.cpp's q8_0 and q4_k_m files (Q8_0, Q4_K, Q6_K) and the
//! legacy 4- and 5-bit types of smaller models' files (Q4_0, Q4_1, Q5_0, Q5_1).
//! A decode step is one token, so the register tiles of `tiles` (which share a weight
//! block's unpacking between tokens) have nothing to share; what matters is the number of
//! instructions per weight byte and memory streams the prefetchers follow.
//! - Q8_0 and the legacy types walk four rows at once, each from its own quarter of the
//!   task's rows (`by_streams`): the activation loads serve four rows, and each stream
//!   runs on through consecutive rows. A legacy block packs its 32 weights in 16 bytes,
//!   half a register, so two rows share one register through the unpacking, the
//!   multiplies and the scaling (about 9 vector instructions a block instead of 14).
//!   Q4_0's and Q5_0's weights go in unsigned, to lanes that start at `−8·Σx̂` or
//!   `−16·Σx̂` (no sign trick). Where AVX-512 VNNI is on, the rows sum a block's
//!   products by 256-bit `vpdpbusd` (the same integers as `vpmaddubsw` then
//!   `vpmaddwd`). Q8_0 also has 512-bit rows (`decode/avx512.rs`) that give the same
//!   bits; a short timing when the first session is made picks whichever reads faster
//!   on the CPU at hand.
//! - Q4_K and Q6_K walk each row on its own. Each 256-weight block's eight integer sums
//!   are gathered into the eight lanes of one register (pairwise adds by `vpmaddwd`, with
//!   `vpackssdw` between rounds), so the block pays one conversion and one or two FMAs
//!   instead of eight, and the lanes are added once per row. A thread takes its rows two
//!   at a time, one from each half of the task, one after the other: two streams for the
//!   prefetchers, with one row's vectors in registers at a time (an earlier two-row
//!   version, timed on an AVX2-only CPU, ran 8 % slower). Where AVX-512 VNNI is on, four
//!   products at a time are summed by one 256-bit `vpdpbusd` instead of `vpmaddubsw` and
//!   `vpmaddwd`: the same integers, so the same bits, in fewer instructions (the 512-bit
//!   rows these types once had are gone; see `decode/avx512.rs`).
//!
//! The integer sum of each activation block equals the reference's exactly; only the f32
//! additions come in another order (and Q6_K's block sums, which can pass 2^24, round once
//! on conversion), so tests pin each kernel to [`super::dot_row_reference`] within
//! `4·(blocks)·ε·Σ|terms|`, as the tiles are.

use super::ActRow;
use crate::quant::GgmlType;

/// Whether `ty` has a decode kernel on this CPU.
pub fn has_decode(ty: GgmlType) -> bool {
    crate::kernels::dispatch::kernels(ty).avx2_decode_rows && avx2::available()
}

/// `Σ_c w_c · x̂_c` for one weight row `row` (whole blocks of `ty`) and one quantised token
/// row `x` (blocks of [`super::activation_block`]`(ty)`, as long as the row), or `None`
/// when [`has_decode`] is false.
pub fn dot_row(ty: GgmlType, row: &[u8], x: ActRow) -> Option<f32> {
    let mut out = [0.0f32];
    dot_rows(ty, row, row.len(), x, &mut out, false).then_some(out[0])
}

/// [`dot_row`] for the consecutive rows of `rows` (`out.len()` rows of `row_bytes` bytes,
/// which is what a decode step's row-block task holds), the shapes and the CPU checked
/// once for them all; when `wide`, with the `vpdpbusd` sums where the CPU has AVX-512
/// VNNI, and the 512-bit rows instead where the dispatch table gives `ty` them and they
/// timed faster here (`avx512::wins`; the two give the same bits).
/// Returns false, having done nothing, when [`has_decode`] is false.
pub fn dot_rows(
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    x: ActRow,
    out: &mut [f32],
    wide: bool,
) -> bool {
    if !has_decode(ty) {
        return false;
    }
    let n = x.qs.len();
    let block = super::activation_block(ty).expect("a decode type has a block");
    assert!(
        x.d.len() * block == n && x.sums.len() * 16 == n && x.dsums.len() == x.d.len(),
        "decode dot: activation blocks"
    );
    assert_eq!(
        ty.row_bytes(n as u64),
        Some(row_bytes as u64),
        "decode dot: row length"
    );
    assert_eq!(
        out.len().checked_mul(row_bytes),
        Some(rows.len()),
        "decode dot: rows"
    );
    if wide && crate::kernels::dispatch::wide_decode(ty) && avx512::wins() {
        avx512::dot_rows(ty, rows, row_bytes, x, out);
    } else {
        avx2::dot_rows(ty, rows, row_bytes, x, out, wide);
    }
    true
}

/// `kernel` over the rows of `rows` (`row_bytes` each) into `out`, `S` rows at a time, each
/// from its own `1/S` of the rows, so a thread reads `S` memory streams that each run on
/// through consecutive rows and the activations' loads serve them all; the last
/// `out.len() % S` rows go one at a time through `one`.
#[inline(always)]
fn by_streams<const S: usize>(
    rows: &[u8],
    row_bytes: usize,
    out: &mut [f32],
    mut kernel: impl FnMut([&[u8]; S], &mut [f32; S]),
    mut one: impl FnMut(&[u8]) -> f32,
) {
    let part = out.len() / S;
    for i in 0..part {
        let row = |k: usize| &rows[(k * part + i) * row_bytes..][..row_bytes];
        let mut v = [0.0f32; S];
        kernel(std::array::from_fn(row), &mut v);
        for (k, v) in v.into_iter().enumerate() {
            out[k * part + i] = v;
        }
    }
    for r in S * part..out.len() {
        out[r] = one(&rows[r * row_bytes..][..row_bytes]);
    }
}

#[cfg(target_arch = "x86_64")]
mod avx512;

#[cfg(not(target_arch = "x86_64"))]
mod avx512 {
    use super::ActRow;
    use crate::quant::GgmlType;
    /// No AVX-512 here.
    pub fn available() -> bool {
        false
    }
    pub fn dot_rows(_: GgmlType, _: &[u8], _: usize, _: ActRow, _: &mut [f32]) {
        unreachable!("decode kernels: not on this CPU")
    }
    pub fn wins() -> bool {
        false
    }
}

/// Times, once a process, the decode rows chosen by timing (Q8_0's 512-bit or 256-bit
/// rows, which give the same bits), so that no decode step pays for it or allocates;
/// later calls return at once. A session calls it when it is made.
pub fn pick_rows() {
    if has_wide_decode() {
        avx512::wins();
    }
}

/// Whether the 512-bit decode rows can run on this CPU.
pub fn has_wide_decode() -> bool {
    avx512::available()
}

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(not(target_arch = "x86_64"))]
mod avx2 {
    use super::ActRow;
    use crate::quant::GgmlType;
    /// No AVX2 here: the per-row reference runs.
    pub fn available() -> bool {
        false
    }
    pub fn dot_rows(_: GgmlType, _: &[u8], _: usize, _: ActRow, _: &mut [f32], _: bool) {
        unreachable!("decode kernels: not on this CPU")
    }
}

#[cfg(test)]
mod tests;
