//! The AVX2 forms of the int8 dots of `kernels::quant` (chapter 10): `vpmaddubsw`
//! multiplies unsigned by signed bytes and adds pairs to i16, `vpmaddwd` multiplies those
//! by i16 (1, or a sub-block's scale) and adds pairs to i32. Every product and partial sum
//! fits its lane (bounds at each use), so the integer sums equal the reference's exactly,
//! and the f32 scaling is the same.

use super::*;
use crate::kernels::x86::{hsum_i32 as hsum, hsum4_i32 as hsum4};
use std::arch::x86_64::*;

/// The AVX2 dot, or `None` when the CPU lacks AVX2 or the type has no AVX2 kernel.
pub fn dot_row(ty: GgmlType, row: &[u8], x: ActRow) -> Option<f32> {
    if !crate::kernels::policy::cpu().avx2 {
        return None;
    }
    let n = x.qs.len();
    assert_eq!(
        ty.row_bytes(n as u64),
        Some(row.len() as u64),
        "dot_row: row length"
    );
    let block = activation_block(ty)?;
    assert!(
        x.d.len() * block == n && x.sums.len() * 16 == n,
        "dot_row: activation blocks"
    );
    // SAFETY: AVX2 was detected above; the row holds exactly the blocks of `n` weights
    // (asserted) and `x` holds `n` quantised values with their scales and sums (a
    // `QuantizedRows::row` of matching block size: each kernel indexes them by block
    // through bounds-checked slices before loading).
    unsafe {
        match ty {
            GgmlType::Q8_0 => Some(dot_q8_0(row, x)),
            GgmlType::Q4_0 => Some(dot_q4_0(row, x)),
            GgmlType::Q4_1 => Some(dot_legacy(row, x, 20, 4, false)),
            GgmlType::Q5_0 => Some(dot_legacy(row, x, 22, 6, true)),
            GgmlType::Q5_1 => Some(dot_legacy(row, x, 24, 8, true)),
            GgmlType::Q4_K => Some(dot_q4_k(row, x)),
            GgmlType::Q5_K => Some(dot_q5_k(row, x)),
            GgmlType::Q6_K => Some(dot_q6_k(row, x)),
            _ => None,
        }
    }
}

/// Σ a·b over 32 signed bytes, in eight i32 lanes. `vpmaddubsw` wants one unsigned
/// operand, so it multiplies |a| by b with a's sign moved onto b (b ≠ −128: the
/// quantiser clamps to ±127; |a| = 128 reads as unsigned 128, still right). Each i16
/// pair sum is at most 2·128·127 = 32512 < 2^15.
#[target_feature(enable = "avx2")]
fn mul_sum_i8(a: __m256i, b: __m256i) -> __m256i {
    let p = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
    _mm256_madd_epi16(p, _mm256_set1_epi16(1))
}

/// 32 bytes at `s[..32]` (bounds-checked slice, then an unaligned load).
#[target_feature(enable = "avx2")]
fn load32<T>(s: &[T]) -> __m256i {
    assert!(std::mem::size_of_val(s) >= 32, "load32: short slice");
    // SAFETY: the slice holds at least 32 bytes (asserted); the load is unaligned.
    unsafe { _mm256_loadu_si256(s.as_ptr() as *const __m256i) }
}

#[target_feature(enable = "avx2")]
fn dot_q8_0(row: &[u8], x: ActRow) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.chunks_exact(Q8_0_BYTES).enumerate() {
        let v = mul_sum_i8(load32(&blk[2..]), load32(&x.qs[b * QK8_0..]));
        // Lanes 0..4 hold the first 16 values' products, 4..8 the last 16's.
        let (lo, hi) = (_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
        let (s0, s1) = (hsum4(lo), hsum4(hi));
        acc += q8_0_scale(f16_at(blk), x.d[2 * b], x.d[2 * b + 1], s0, s1);
    }
    acc
}

#[target_feature(enable = "avx2")]
fn dot_q4_0(row: &[u8], x: ActRow) -> f32 {
    let mut acc = 0.0f32;
    let m4 = _mm_set1_epi8(0x0f);
    for (b, blk) in row.chunks_exact(Q4_0_BYTES).enumerate() {
        let q = &blk[2..];
        assert_eq!(q.len(), 16);
        // SAFETY: `q` is 16 bytes (asserted); the load is unaligned.
        let v = unsafe { _mm_loadu_si128(q.as_ptr() as *const __m128i) };
        let lo = _mm_and_si128(v, m4);
        let hi = _mm_and_si128(_mm_srli_epi16(v, 4), m4);
        let w = _mm256_sub_epi8(_mm256_set_m128i(hi, lo), _mm256_set1_epi8(8));
        let isum = hsum(mul_sum_i8(w, load32(&x.qs[b * QK8_0..])));
        acc += (f16_at(blk) * x.d[b]) * isum as f32;
    }
    acc
}

/// 32 bytes, byte `i` = 0x10 when bit `i` of `qh` is set, else 0.
#[target_feature(enable = "avx2")]
pub(super) fn fifth_bits(qh: u32) -> __m256i {
    let v = _mm256_set1_epi32(qh as i32);
    let which = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3,
        3, 3,
    );
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let set = _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, which), bit), bit);
    _mm256_and_si256(set, _mm256_set1_epi8(0x10))
}

#[target_feature(enable = "avx2")]
fn dot_legacy(row: &[u8], x: ActRow, bytes: usize, qs_at: usize, five: bool) -> f32 {
    let mut acc = 0.0f32;
    let m4 = _mm_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    for (b, blk) in row.chunks_exact(bytes).enumerate() {
        let qs = &blk[qs_at..qs_at + 16];
        // SAFETY: `qs` is 16 bytes (sliced above); the load is unaligned.
        let v = unsafe { _mm_loadu_si128(qs.as_ptr() as *const __m128i) };
        let (lo, hi) = (
            _mm_and_si128(v, m4),
            _mm_and_si128(_mm_srli_epi16(v, 4), m4),
        );
        let mut q = _mm256_set_m128i(hi, lo);
        if five {
            let qh = u32::from_le_bytes(blk[qs_at - 4..qs_at].try_into().expect("4 bytes"));
            q = _mm256_or_si256(q, fifth_bits(qh));
        }
        // q ≤ 31 unsigned: pairs at most 2·31·127 = 7874.
        let p = _mm256_maddubs_epi16(q, load32(&x.qs[32 * b..]));
        let isum = hsum(_mm256_madd_epi16(p, ones));
        let xsum = x.sums[2 * b] as i32 + x.sums[2 * b + 1] as i32;
        acc += legacy_scale(blk, qs_at, isum, xsum, x.d[b]);
    }
    acc
}

#[target_feature(enable = "avx2")]
fn dot_q5_k(row: &[u8], x: ActRow) -> f32 {
    let mut acc = 0.0f32;
    let (m4, one) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(1));
    let ones = _mm256_set1_epi16(1);
    for (b, blk) in row.chunks_exact(176).enumerate() {
        let (d, dmin, scales) = (f16_at(blk), f16_at(&blk[2..]), &blk[4..16]);
        let (qh, qs) = (load32(&blk[16..48]), &blk[48..]);
        for s in 0..8 {
            let j = 8 * b + s;
            let q = load32(&qs[32 * (s / 2)..]);
            let q = _mm256_srl_epi16(q, _mm_cvtsi32_si128(4 * (s % 2) as i32));
            // Bit s of each qh byte to bit 4 (16-bit shifts; the masks keep bytes apart).
            let h = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(s as i32)), one);
            let q = _mm256_or_si256(_mm256_and_si256(q, m4), _mm256_slli_epi16(h, 4));
            // q ≤ 31 unsigned: pairs at most 2·31·127 = 7874.
            let p = _mm256_maddubs_epi16(q, load32(&x.qs[32 * j..]));
            let isum = hsum(_mm256_madd_epi16(p, ones));
            let xsum = x.sums[2 * j] as i32 + x.sums[2 * j + 1] as i32;
            let (sc, m) = scale_min_k4(s, scales);
            acc += x.d[j] * ((d * sc as f32) * isum as f32 - (dmin * m as f32) * xsum as f32);
        }
    }
    acc
}

#[target_feature(enable = "avx2")]
fn dot_q4_k(row: &[u8], x: ActRow) -> f32 {
    let mut acc = 0.0f32;
    let m4 = _mm256_set1_epi8(0x0f);
    let ones = _mm256_set1_epi16(1);
    for (b, blk) in row.chunks_exact(Q4_K_BYTES).enumerate() {
        let (d, dmin, scales, qs) = (f16_at(blk), f16_at(&blk[2..]), &blk[4..16], &blk[16..]);
        for c in 0..4 {
            let q = load32(&qs[32 * c..]);
            let nibbles = [
                _mm256_and_si256(q, m4),
                _mm256_and_si256(_mm256_srli_epi16(q, 4), m4),
            ];
            for (half, &qn) in nibbles.iter().enumerate() {
                let s = 2 * c + half;
                let j = 8 * b + s;
                // Pairs of q·x: at most 2·15·127 = 3810, well inside i16.
                let p = _mm256_maddubs_epi16(qn, load32(&x.qs[32 * j..]));
                let isum = hsum(_mm256_madd_epi16(p, ones));
                let xsum = x.sums[2 * j] as i32 + x.sums[2 * j + 1] as i32;
                let (sc, m) = scale_min_k4(s, scales);
                acc += x.d[j] * ((d * sc as f32) * isum as f32 - (dmin * m as f32) * xsum as f32);
            }
        }
    }
    acc
}

/// The four 32-weight runs of one 128-weight half of a Q6_K block as unsigned 6-bit
/// values, from its 64 low-nibble bytes (`l0`, `l1`) and 32 high-bit bytes (`hb`): run 0
/// is `l0`'s low nibbles with bits 0–1 of `hb`, run 1 `l1`'s low nibbles with bits 2–3,
/// run 2 `l0`'s high nibbles with bits 4–5, run 3 `l1`'s high nibbles with bits 6–7. Every
/// Q6_K kernel (row dots, tiles, decode rows) unpacks its weights here.
///
/// # Safety
/// The CPU has AVX2; the caller is compiled with it, so this inlines into it.
#[inline(always)]
pub(super) unsafe fn q6_k_runs(l0: __m256i, l1: __m256i, hb: __m256i) -> [__m256i; 4] {
    // SAFETY: AVX2, by this function's contract.
    unsafe {
        let (m4, m2) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
        let low = |v| _mm256_and_si256(v, m4);
        let high = |v| _mm256_and_si256(v, m2);
        [
            _mm256_or_si256(low(l0), high(_mm256_slli_epi16(hb, 4))),
            _mm256_or_si256(low(l1), high(_mm256_slli_epi16(hb, 2))),
            _mm256_or_si256(low(_mm256_srli_epi16(l0, 4)), high(hb)),
            _mm256_or_si256(
                low(_mm256_srli_epi16(l1, 4)),
                high(_mm256_srli_epi16(hb, 2)),
            ),
        ]
    }
}

#[target_feature(enable = "avx2")]
fn dot_q6_k(row: &[u8], x: ActRow) -> f32 {
    let mut acc = 0.0f32;
    for (b, blk) in row.chunks_exact(Q6_K_BYTES).enumerate() {
        let (ql, rest) = blk.split_at(QK_K / 2);
        let (qh, rest) = rest.split_at(QK_K / 4);
        let (scales, d) = rest.split_at(QK_K / 16);
        let d = f16_at(d);
        for h in 0..2 {
            let l0 = load32(&ql[64 * h..]);
            let l1 = load32(&ql[64 * h + 32..]);
            let hb = load32(&qh[32 * h..]);
            // The four 32-weight runs k of this half: low nibble and two high bits.
            // SAFETY: AVX2, which this function is compiled with (or inlined into).
            let q = unsafe { q6_k_runs(l0, l1, hb) };
            for (k, &qk) in q.iter().enumerate() {
                let j8 = 4 * h + k; // activation block; sub-blocks 2·j8 (lanes 0..16), +1
                let j = 8 * b + j8;
                let (c0, c1) = (scales[2 * j8] as i8, scales[2 * j8 + 1] as i8);
                let sc = _mm256_set_m128i(_mm_set1_epi16(c1 as i16), _mm_set1_epi16(c0 as i16));
                // Pairs of q·x: at most 2·63·127 = 16002; times an i8 scale, 2·16002·128.
                let p = _mm256_maddubs_epi16(qk, load32(&x.qs[32 * j..]));
                let sums = c0 as i32 * x.sums[2 * j] as i32 + c1 as i32 * x.sums[2 * j + 1] as i32;
                let isum = hsum(_mm256_madd_epi16(p, sc)) - 32 * sums;
                acc += (d * x.d[j]) * isum as f32;
            }
        }
    }
    acc
}
