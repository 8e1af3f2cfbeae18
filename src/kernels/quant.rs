//! The block formats' kernels (chapter 11, made fast in chapter 10): integer dot products
//! of a weight row stored in a ggml block format with an activation vector quantised to
//! 8-bit blocks, as llama.cpp computes them. Instead of widening every weight to f32, the
//! matmul quantises its input once (blocks of 32 values with one f32 step and per-16 sums,
//! for every weight type; [`QuantizedRows`] also makes llama.cpp's 256-value Q8_K-style
//! blocks, but measured on the fixtures those lose accuracy for the K types) and each
//! weight block's dot is an exact integer sum, scaled once by the two blocks' steps.
//! Kernels: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K.
//!
//! Each weight type has a clear reference dot here (plain integer loops) and an AVX2 form
//! (`avx2` below, x86-64 only; a stub elsewhere declines). Tests pin each AVX2 kernel bit
//! for bit to its reference (the integer sums are exact and the f32 scaling is done in the
//! same order), each reference to the f32 dot of the dequantised operands, and to the true
//! f32 dot within the activation quantisation's own bound `Σ_b (d_b/2)·Σ_{i∈b} |w_i|`.
//!
//! The switch: on by default (`ANATOMY_QUANT_ACTIVATIONS=0`, read once, turns it off), for
//! groups of up to [`TILED_MAX_TOKENS`] token rows when the weight type has register tiles
//! (`tiles`: Q8_0, Q4_K, Q6_K), else of at most [`MAX_TOKENS`] (decode); with it on, the mean
//! KL from transformers is at most llama.cpp's on every fixture of tests/gguf_models.rs.
//! [`with_quant_activations`] overrides it on the calling thread (tests run both paths).
//! Groups of two tokens or more take the tiles (from a threshold on, Q8_0, Q4_K and Q6_K
//! take [`lanes8`], eight rows in the lanes, at every size, so on AVX2 their groups never
//! leave the int8 path); a
//! single token (a decode step, or an expert that one token chose) takes [`decode`]'s row
//! kernels, which need fewer instructions per weight byte when nothing is shared between
//! tokens. With AVX512_VNNI, [`vnni`]'s kernels
//! (`vpdpbusd`) take the Q8_0, Q4_K and Q6_K groups of two tokens or more instead, of any
//! size: 16 weight rows in the lanes from [`vnni::LANES_MIN_TOKENS`] tokens, tiles below;
//! `ANATOMY_NO_VNNI=1` (or `ANATOMY_NO_AVX512=1`) turns them off (`policy`).

use super::policy::{QuantActs, current, with_switches};
use crate::quant::k_blocks::scale_min_k4;
use crate::quant::{GgmlType, QK_K};

pub use activations::{ActRow, ActRowMut, QuantizedRows};

/// Matmuls with at most this many token rows per group take the int8 path when it is on
/// (the types without register tiles; the others up to [`TILED_MAX_TOKENS`]).
pub use super::dispatch::{
    INT8_MAX_TOKENS as MAX_TOKENS, INT8_TILED_MAX_TOKENS as TILED_MAX_TOKENS,
};

/// Weights per activation block for the legacy types (one Q8_0 block).
pub const QK8_0: usize = 32;

/// Runs `f` with the int8 path forced on (every group, whatever its size) or off for the
/// matmuls this thread calls (the decision is taken on the calling thread, before the row
/// tasks).
pub fn with_quant_activations<R>(on: bool, f: impl FnOnce() -> R) -> R {
    let acts = if on { QuantActs::All } else { QuantActs::Off };
    with_switches(|s| s.quant_activations = acts, f)
}

/// The largest group of a matmul of weight type `ty` that quantises its activations (0:
/// none), as the calling thread's policy says ([`super::dispatch::int8_max_tokens`]).
pub fn int8_max_tokens(ty: GgmlType) -> usize {
    super::dispatch::int8_max_tokens(ty, &current())
}

/// The activation block size the int8 dot of weight type `ty` needs, or `None` when there
/// is no int8 kernel for it (the f32 path runs).
pub fn activation_block(ty: GgmlType) -> Option<usize> {
    super::dispatch::kernels(ty).act_block
}

/// `Σ_i w_i · x̂_i` for one weight row `row` of type `ty` (bytes of whole blocks) and the
/// quantised activation row `x` (blocks of [`activation_block`]`(ty)`), with the AVX2
/// kernel when the CPU has it. Panics for a type without an int8 kernel.
pub fn dot_row(ty: GgmlType, row: &[u8], x: ActRow) -> f32 {
    if let Some(v) = avx2::dot_row(ty, row, x) {
        return v;
    }
    dot_row_reference(ty, row, x)
}

/// [`dot_row`], the clear reference form.
pub fn dot_row_reference(ty: GgmlType, row: &[u8], x: ActRow) -> f32 {
    match ty {
        GgmlType::Q8_0 => dot_q8_0(row, x),
        GgmlType::Q4_0 => dot_q4_0(row, x),
        GgmlType::Q4_1 => dot_legacy(row, x, 20, 4, false),
        GgmlType::Q5_0 => dot_legacy(row, x, 22, 6, true),
        GgmlType::Q5_1 => dot_legacy(row, x, 24, 8, true),
        GgmlType::Q4_K => dot_q4_k(row, x),
        GgmlType::Q5_K => dot_q5_k(row, x),
        GgmlType::Q6_K => dot_q6_k(row, x),
        _ => panic!("dot_row: no int8 kernel for {}", ty.name()),
    }
}

/// The little-endian f16 at `b[0..2]`, widened.
#[inline(always)]
fn f16_at(b: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

const Q8_0_BYTES: usize = 2 + QK8_0;
const Q4_0_BYTES: usize = 2 + QK8_0 / 2;
const Q4_K_BYTES: usize = 4 + 12 + QK_K / 2;
const Q6_K_BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;

/// Q8_0: `w = dw · q`; per block `(dw · dx₀) · Σ q·x̂q + (dw · dx₁) · Σ q·x̂q` over its
/// two 16-value activation blocks.
fn dot_q8_0(row: &[u8], x: ActRow) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.chunks_exact(Q8_0_BYTES).enumerate() {
        let xq = &x.qs[b * QK8_0..][..QK8_0];
        let half = |h: usize| -> i32 {
            blk[2 + 16 * h..2 + 16 * h + 16]
                .iter()
                .zip(&xq[16 * h..16 * h + 16])
                .map(|(&w, &v)| w as i8 as i32 * v as i32)
                .sum()
        };
        acc += q8_0_scale(f16_at(blk), x.d[2 * b], x.d[2 * b + 1], half(0), half(1));
    }
    acc
}

/// One Q8_0 block's term from its two half sums (shared by the reference and AVX2).
#[inline(always)]
fn q8_0_scale(dw: f32, dx0: f32, dx1: f32, isum0: i32, isum1: i32) -> f32 {
    (dw * dx0) * isum0 as f32 + (dw * dx1) * isum1 as f32
}

/// Q4_0: `w = dw · (q − 8)`, low nibbles the first 16 weights, high nibbles the last 16.
fn dot_q4_0(row: &[u8], x: ActRow) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.chunks_exact(Q4_0_BYTES).enumerate() {
        let xq = &x.qs[b * QK8_0..][..QK8_0];
        let mut isum = 0i32;
        for (j, &q) in blk[2..].iter().enumerate() {
            isum += ((q & 0x0f) as i32 - 8) * xq[j] as i32;
            isum += ((q >> 4) as i32 - 8) * xq[j + 16] as i32;
        }
        acc += (f16_at(blk) * x.d[b]) * isum as f32;
    }
    acc
}

/// The unsigned values `q` of one Q4_1 / Q5_0 / Q5_1 block (`blk` whole; its packed
/// nibbles start at `qs_at`, after `d`, `m` and for the Q5 types the 32 fifth bits).
fn legacy_values(blk: &[u8], qs_at: usize, five: bool) -> [i32; 32] {
    let qh = if five {
        u32::from_le_bytes(blk[qs_at - 4..qs_at].try_into().expect("4 bytes"))
    } else {
        0
    };
    let mut q = [0i32; 32];
    for j in 0..16 {
        let b = blk[qs_at + j];
        q[j] = (b & 0x0f) as i32 | (((qh >> j) & 1) << 4) as i32;
        q[j + 16] = (b >> 4) as i32 | (((qh >> (j + 16)) & 1) << 4) as i32;
    }
    q
}

/// Q4_1 (`w = d·q + m`), Q5_0 (`w = d·(q − 16)`), Q5_1 (`w = d·q + m`): per block
/// `dx · (d · Σ q·x̂q + m · Σ x̂q)`, with `m = −16·d` for Q5_0 (blocks of `bytes` bytes,
/// nibbles at `qs_at`). Q5_0's offset is folded in as an integer: `d · Σ (q − 16)·x̂q`.
fn dot_legacy(row: &[u8], x: ActRow, bytes: usize, qs_at: usize, five: bool) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.chunks_exact(bytes).enumerate() {
        let q = legacy_values(blk, qs_at, five);
        let xq = &x.qs[32 * b..][..32];
        let isum: i32 = q.iter().zip(xq).map(|(&q, &v)| q * v as i32).sum();
        let xsum = x.sums[2 * b] as i32 + x.sums[2 * b + 1] as i32;
        acc += legacy_scale(blk, qs_at, isum, xsum, x.d[b]);
    }
    acc
}

/// One legacy block's term from its integer sums (shared by the reference and AVX2).
#[inline(always)]
fn legacy_scale(blk: &[u8], qs_at: usize, isum: i32, xsum: i32, dx: f32) -> f32 {
    let d = f16_at(blk);
    if qs_at == 6 {
        (d * dx) * (isum - 16 * xsum) as f32 // Q5_0
    } else {
        dx * (d * isum as f32 + f16_at(&blk[2..]) * xsum as f32)
    }
}

/// Q5_K: Q4_K with a fifth bit per weight (bit `s` of `qh[l]` for sub-block `s`).
fn dot_q5_k(row: &[u8], x: ActRow) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.chunks_exact(176).enumerate() {
        let (d, dmin, scales) = (f16_at(blk), f16_at(&blk[2..]), &blk[4..16]);
        let (qh, qs) = (&blk[16..48], &blk[48..]);
        for s in 0..8 {
            let j = 8 * b + s;
            let q = &qs[32 * (s / 2)..][..32];
            let xq = &x.qs[32 * j..][..32];
            let shift = 4 * (s % 2);
            let isum: i32 = (0..32)
                .map(|l| {
                    let v = ((q[l] >> shift) & 0x0f) | (((qh[l] >> s) & 1) << 4);
                    v as i32 * xq[l] as i32
                })
                .sum();
            let xsum = x.sums[2 * j] as i32 + x.sums[2 * j + 1] as i32;
            let (sc, m) = scale_min_k4(s, scales);
            acc += x.d[j] * ((d * sc as f32) * isum as f32 - (dmin * m as f32) * xsum as f32);
        }
    }
    acc
}

/// Q4_K: `w = d·sc_s·q − dmin·m_s` per 32-weight sub-block `s`, which is one activation
/// block `j`, so its dot is `dx_j · (d·sc_s · Σ q·x̂q − dmin·m_s · Σ x̂q)`, the second sum
/// from the per-16 sums.
fn dot_q4_k(row: &[u8], x: ActRow) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.chunks_exact(Q4_K_BYTES).enumerate() {
        let (d, dmin, scales, qs) = (f16_at(blk), f16_at(&blk[2..]), &blk[4..16], &blk[16..]);
        for s in 0..8 {
            let j = 8 * b + s;
            let q = &qs[32 * (s / 2)..][..32];
            let xq = &x.qs[32 * j..][..32];
            let shift = 4 * (s % 2); // even sub-blocks in the low nibbles
            let isum: i32 = (0..32)
                .map(|l| ((q[l] >> shift) & 0x0f) as i32 * xq[l] as i32)
                .sum();
            let xsum = x.sums[2 * j] as i32 + x.sums[2 * j + 1] as i32;
            let (sc, m) = scale_min_k4(s, scales);
            acc += x.d[j] * ((d * sc as f32) * isum as f32 - (dmin * m as f32) * xsum as f32);
        }
    }
    acc
}

/// Q6_K: `w = d·sc_s·(q − 32)` per 16-weight sub-block `s`; activation block `j` covers
/// sub-blocks `2j, 2j + 1`, so its dot is `d · dx_j · Σ_s sc_s (Σ q·x̂q − 32 Σ x̂q)`.
fn dot_q6_k(row: &[u8], x: ActRow) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.chunks_exact(Q6_K_BYTES).enumerate() {
        let (ql, rest) = blk.split_at(QK_K / 2);
        let (qh, rest) = rest.split_at(QK_K / 4);
        let (scales, d) = rest.split_at(QK_K / 16);
        let xq = &x.qs[b * QK_K..][..QK_K];
        let mut sub = [0i32; 16]; // Σ q·x̂q per sub-block
        for h in 0..2 {
            let (ql, qh) = (&ql[64 * h..][..64], &qh[32 * h..][..32]);
            for l in 0..32 {
                let q = [
                    (ql[l] & 0x0f) | ((qh[l] & 3) << 4),
                    (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4),
                    (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                    (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
                ];
                for (k, &q) in q.iter().enumerate() {
                    let i = 128 * h + 32 * k + l;
                    sub[i / 16] += q as i32 * xq[i] as i32;
                }
            }
        }
        for j8 in 0..8 {
            let j = 8 * b + j8;
            let (s0, s1) = (2 * j8, 2 * j8 + 1);
            let (c0, c1) = (scales[s0] as i8 as i32, scales[s1] as i8 as i32);
            let sums = c0 * x.sums[2 * j] as i32 + c1 * x.sums[2 * j + 1] as i32;
            let isum = c0 * sub[s0] + c1 * sub[s1] - 32 * sums;
            acc += (f16_at(d) * x.d[j]) * isum as f32;
        }
    }
    acc
}

/// Q4_K's 12 bytes of 6-bit scales and minima unpacked, four at a time in u32 words:
/// the 8 scales and the 8 minima, one per byte (what `scale_min_k4` gives one by one;
/// a test checks they agree).
#[inline(always)]
pub(crate) fn unpack_scale_min_k4(b: &[u8]) -> (u64, u64) {
    let word = |k: usize| u32::from_le_bytes([b[k], b[k + 1], b[k + 2], b[k + 3]]);
    let (lo, mid, hi) = (word(0), word(4), word(8));
    let sc_lo = lo & 0x3f3f_3f3f;
    let m_lo = mid & 0x3f3f_3f3f;
    let sc_hi = (hi & 0x0f0f_0f0f) | (((lo >> 6) & 0x0303_0303) << 4);
    let m_hi = ((hi >> 4) & 0x0f0f_0f0f) | (((mid >> 6) & 0x0303_0303) << 4);
    (
        sc_lo as u64 | (sc_hi as u64) << 32,
        m_lo as u64 | (m_hi as u64) << 32,
    )
}

mod activations;
pub mod decode;
pub mod lanes8;
pub mod tiles;
pub mod vnni;

#[cfg(target_arch = "x86_64")]
mod avx2;

#[cfg(not(target_arch = "x86_64"))]
mod avx2 {
    use super::{ActRow, GgmlType};
    /// No AVX2 here: the reference runs.
    pub fn dot_row(_: GgmlType, _: &[u8], _: ActRow) -> Option<f32> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::quant::{dequantize, quantize};

    const TYPES: [GgmlType; 4] = [
        GgmlType::Q8_0,
        GgmlType::Q4_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
    ];

    /// Deterministic pseudo-random values in about ±scale, with a few outliers.
    fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(12345);
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let u = s as f32 / u32::MAX as f32 - 0.5;
                if i % 97 == 13 {
                    8.0 * u * scale
                } else {
                    u * scale
                }
            })
            .collect()
    }

    fn setup(ty: GgmlType, cols: usize, seed: u32) -> (Vec<f32>, Vec<u8>, Vec<f32>, QuantizedRows) {
        let w = values(cols, seed, 0.2);
        let mut bytes = Vec::new();
        quantize(ty, &w, &mut bytes);
        let x = values(cols, seed + 7, 3.0);
        let mut acts = QuantizedRows::default();
        acts.quantize(&x, cols, activation_block(ty).unwrap());
        (w, bytes, x, acts)
    }

    #[test]
    fn avx2_kernels_equal_their_references_bit_for_bit() {
        for ty in TYPES {
            for seed in 0..20 {
                let (_, bytes, _, acts) = setup(ty, 1024, seed);
                let r = dot_row_reference(ty, &bytes, acts.row(0));
                let f = dot_row(ty, &bytes, acts.row(0));
                assert_eq!(r.to_bits(), f.to_bits(), "{}: {r} vs {f}", ty.name());
            }
        }
    }

    #[test]
    fn references_equal_the_f32_dot_of_the_dequantised_operands() {
        for ty in TYPES {
            for seed in 0..10 {
                let cols = 768;
                let (_, bytes, _, acts) = setup(ty, cols, seed);
                let mut wd = vec![0.0f32; cols];
                dequantize(ty, &bytes, &mut wd);
                let xd = acts.dequantize_row(0);
                let exact: f64 = wd.iter().zip(&xd).map(|(a, b)| *a as f64 * *b as f64).sum();
                let mag: f64 = wd
                    .iter()
                    .zip(&xd)
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
                let got = dot_row_reference(ty, &bytes, acts.row(0)) as f64;
                // f32 rounding of the scales and of the per-block accumulation.
                assert!(
                    (got - exact).abs() <= 1e-5 * mag + 1e-6,
                    "{}: {got} vs {exact} (Σ|w·x| {mag})",
                    ty.name()
                );
            }
        }
    }

    #[test]
    fn references_are_within_the_activation_quantisation_bound_of_the_true_dot() {
        for ty in TYPES {
            for seed in 0..10 {
                let cols = 512;
                let (_, bytes, x, acts) = setup(ty, cols, seed);
                let mut wd = vec![0.0f32; cols];
                dequantize(ty, &bytes, &mut wd);
                // |Σ w (x − x̂)| ≤ Σ_b (d_b / 2) Σ_{i∈b} |w_i|: each x̂ is within half a step.
                let bound: f64 = wd
                    .iter()
                    .enumerate()
                    .map(|(i, w)| w.abs() as f64 * acts.d[i / acts.block] as f64 / 2.0)
                    .sum();
                let truth: f64 = wd.iter().zip(&x).map(|(a, b)| *a as f64 * *b as f64).sum();
                let mag: f64 = wd
                    .iter()
                    .zip(&x)
                    .map(|(a, b)| (*a as f64 * *b as f64).abs())
                    .sum();
                let got = dot_row_reference(ty, &bytes, acts.row(0)) as f64;
                assert!(
                    (got - truth).abs() <= bound + 1e-5 * mag,
                    "{}: {got} vs {truth}, bound {bound}",
                    ty.name()
                );
            }
        }
    }

    #[test]
    fn the_int8_matmul_is_the_row_dots_and_off_is_the_f32_path() {
        use crate::kernels::{Group, Matrix, matmul_grouped};
        for ty in TYPES {
            let (rows, cols, n) = (70, 512, 3);
            let w = values(rows * cols, 3, 0.2);
            let mut bytes = Vec::new();
            quantize(ty, &w, &mut bytes);
            let m = Matrix::quant(ty, &bytes, rows, cols);
            let xs = values(n * cols, 5, 1.0);
            let mut acts = QuantizedRows::default();
            acts.quantize(&xs, cols, activation_block(ty).unwrap());
            let rb = bytes.len() / rows;
            let mut out = vec![0.0f32; n * rows];
            // The AVX2 tiles, bit for bit (vnni::tests pins the VNNI ones within a bound).
            let avx2 =
                |f: &mut dyn FnMut()| vnni::with_vnni(false, || with_quant_activations(true, f));
            avx2(&mut || m.matmul(&xs, &mut out));
            // Each (row, token) as the matmul pairs the tokens (tiles of two, the odd last
            // one alone: the decode kernel), or, `alone`, every token by itself.
            let want = |r: usize, t: usize, alone: bool| -> f32 {
                let row = &bytes[r * rb..][..rb];
                // Whole eights of rows in a task take the AVX2 lanes where the type has
                // them (the tasks' row blocks are whole eights).
                const { assert!(crate::kernels::ROW_BLOCK.is_multiple_of(lanes8::ROWS)) };
                if !alone && lanes8::wins(ty, n) && r < rows / lanes8::ROWS * lanes8::ROWS {
                    let r0 = r - r % lanes8::ROWS;
                    let mut v = f32::NAN;
                    lanes8::rows8(ty, &bytes[r0 * rb..], rb, &acts, 0..n, |tk, x| {
                        if tk == t {
                            v = x[r - r0]
                        }
                    });
                    return v;
                }
                let first = if alone || t == n - 1 && n % 2 == 1 {
                    t
                } else {
                    t - t % 2
                };
                let nt = if first == t && (alone || t == n - 1) {
                    1
                } else {
                    2
                };
                let ts: Vec<ActRow> = (first..first + nt).map(|k| acts.row(k)).collect();
                let mut v = [0.0f32; 2];
                if tiles::dot_tile(ty, &[row], &ts, &mut v[..nt]) {
                    v[t - first]
                } else if alone {
                    // A group of one token: the decode rows where the type has them.
                    decode::dot_row(ty, row, acts.row(t)).unwrap_or(dot_row(ty, row, acts.row(t)))
                } else {
                    dot_row(ty, row, acts.row(t))
                }
            };
            for t in 0..n {
                for r in 0..rows {
                    assert_eq!(out[t * rows + r].to_bits(), want(r, t, false).to_bits());
                }
            }
            // Grouped, one token per group (the MoE decode shape).
            let groups: Vec<Group> = (0..n)
                .map(|t| Group {
                    matrix: 0,
                    first_in: t,
                    n: 1,
                    first_out: t,
                })
                .collect();
            let mut grouped = vec![0.0f32; n * rows];
            avx2(&mut || matmul_grouped(|_| m, &groups, &xs, &mut grouped));
            for t in 0..n {
                for r in 0..rows {
                    assert_eq!(grouped[t * rows + r].to_bits(), want(r, t, true).to_bits());
                }
            }
            // Off: the f32 path, which differs (by the activations' rounding).
            let mut f32_out = vec![0.0f32; n * rows];
            with_quant_activations(false, || m.matmul(&xs, &mut f32_out));
            assert_ne!(f32_out, out);
        }
    }

    /// The default policy, per group of one call: a tiled type's groups of at most
    /// `int8_max_tokens` rows take int8, bigger ones the f32 path (with the VNNI kernels
    /// on and off: Q4_K's row lanes take every group).
    #[test]
    fn small_groups_take_int8_and_big_ones_f32() {
        use crate::kernels::{Group, Matrix, matmul_grouped};
        if crate::kernels::policy::from_env().quant_activations() == QuantActs::Off {
            return;
        }
        let (rows, cols, big) = (40, 256, TILED_MAX_TOKENS + 4);
        let w = values(rows * cols, 9, 0.2);
        let mut bytes = Vec::new();
        quantize(GgmlType::Q4_K, &w, &mut bytes);
        let m = Matrix::quant(GgmlType::Q4_K, &bytes, rows, cols);
        let n = 3 + big;
        let xs = values(n * cols, 4, 1.0);
        let groups = [
            Group {
                matrix: 0,
                first_in: 0,
                n: 3,
                first_out: 0,
            },
            Group {
                matrix: 0,
                first_in: 3,
                n: big,
                first_out: 3,
            },
        ];
        for on in [false, true] {
            vnni::with_vnni(on, || {
                let mut out = vec![0.0f32; n * rows];
                matmul_grouped(|_| m, &groups, &xs, &mut out);
                let big_int8 = big <= int8_max_tokens(GgmlType::Q4_K);
                let mut apart = vec![0.0f32; n * rows];
                // Each group apart, as `matmul_grouped` tiles it.
                let (small, rest) = xs.split_at(3 * cols);
                with_quant_activations(true, || m.matmul(small, &mut apart[..3 * rows]));
                with_quant_activations(big_int8, || m.matmul(rest, &mut apart[3 * rows..]));
                assert_eq!(out, apart, "vnni {on}, big group int8 {big_int8}");
            });
        }
    }

    #[test]
    fn parallel_quantisation_equals_the_serial_rows_bit_for_bit() {
        // Above the parallel threshold, with row counts and widths that split unevenly.
        for (cols, block) in [(352, QK8_0), (768, 256)] {
            let rows = (activations::PARALLEL_MIN_VALUES / cols) + 5;
            let x = values(rows * cols, 7, 3.0);
            let mut acts = QuantizedRows::default();
            acts.quantize(&x, cols, block);
            let mut one = QuantizedRows::default();
            for t in 0..rows {
                one.resize(cols, cols, block);
                activations::quantize_row(&x[t * cols..(t + 1) * cols], block, one.whole_mut());
                let (a, b) = (acts.row(t), one.row(0));
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                assert_eq!(bits(a.d), bits(b.d), "row {t}: steps");
                assert_eq!(a.qs, b.qs, "row {t}: values");
                assert_eq!(a.sums, b.sums, "row {t}: sums");
                assert_eq!(bits(a.dsums), bits(b.dsums), "row {t}: dsums");
            }
        }
    }

    #[test]
    fn a_non_finite_activation_gives_nan() {
        let (_, bytes, mut x, _) = setup(GgmlType::Q4_K, 256, 1);
        x[3] = f32::INFINITY;
        let mut acts = QuantizedRows::default();
        acts.quantize(&x, 256, QK8_0);
        assert!(dot_row(GgmlType::Q4_K, &bytes, acts.row(0)).is_nan());
    }
}
