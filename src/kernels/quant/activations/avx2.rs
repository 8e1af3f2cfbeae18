//! The activations' quantiser with AVX2 (chapter 10): eight values a step, writing the
//! bits of the clear form in `activations.rs`.

use super::{ActRowMut, quantize_row_with};
use crate::kernels::x86::hsum_i32 as hsum;
use std::arch::x86_64::*;

/// [`super::quantize_row_reference`] with AVX2, eight values a step, the same bits: the
/// maximum ignores NaN as `f32::max` does, the rounding is [`super::round_to_i8`]'s
/// (truncate, add one from a fraction ≥ 0.5, NaN to 0), and the sums are integers.
/// Hands `out` back untouched on a CPU without AVX2.
pub fn quantize_row<'a>(x: &[f32], block: usize, out: ActRowMut<'a>) -> Result<(), ActRowMut<'a>> {
    if !crate::kernels::policy::cpu().avx2 {
        return Err(out);
    }
    // SAFETY: AVX2 was detected above; `quantize_block` reads and writes only through
    // bounds-checked 8- and 16-value chunks of the slices it is given.
    quantize_row_with(x, block, out, |xb, qb, sb| unsafe {
        quantize_block(xb, qb, sb)
    });
    Ok(())
}

/// One block: its step `d` (NaN if a value is not finite) and `Σ q`.
#[target_feature(enable = "avx2")]
fn quantize_block(xb: &[f32], qb: &mut [i8], sb: &mut [i16]) -> (f32, i32) {
    let sign = _mm256_set1_ps(-0.0);
    let (mut amax, mut bad) = (_mm256_setzero_ps(), _mm256_setzero_si256());
    for v in xb.as_chunks::<8>().0 {
        let a = _mm256_andnot_ps(sign, load8(v));
        // `max(a, m)` returns m when a is NaN, as `f32::max` ignores NaN.
        amax = _mm256_max_ps(a, amax);
        let above = _mm256_cmpgt_epi32(_mm256_castps_si256(a), _mm256_set1_epi32(0x7f7f_ffff));
        bad = _mm256_or_si256(bad, above);
    }
    // SAFETY: a __m256 is eight f32 by definition, the same 32 bytes.
    let lanes: [f32; 8] = unsafe { std::mem::transmute::<__m256, [f32; 8]>(amax) };
    let amax = lanes.iter().fold(0.0f32, |m, &v| m.max(v));
    let d = amax / 127.0;
    let inv = _mm256_set1_ps(if d > 0.0 { 1.0 / d } else { 0.0 });
    let finite = _mm256_testz_si256(bad, bad) == 1;
    let mut total = 0i32;
    for ((x16, q16), s) in xb
        .as_chunks::<16>()
        .0
        .iter()
        .zip(qb.as_chunks_mut::<16>().0)
        .zip(sb)
    {
        let lo = round_to_i8x8(_mm256_mul_ps(load8(&x16[..8]), inv));
        let hi = round_to_i8x8(_mm256_mul_ps(load8(&x16[8..]), inv));
        let sum = hsum(_mm256_add_epi32(lo, hi));
        // i32 → i16 → i8 without saturating (|q| ≤ 127); the packs interleave the halves.
        let w = _mm256_permute4x64_epi64::<0b11_01_10_00>(_mm256_packs_epi32(lo, hi));
        let b = _mm_packs_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256::<1>(w));
        // SAFETY: a __m128i is sixteen bytes, any of which is a valid i8.
        *q16 = unsafe { std::mem::transmute::<__m128i, [i8; 16]>(b) };
        *s = sum as i16;
        total += sum;
    }
    (if finite { d } else { f32::NAN }, total)
}

/// [`super::round_to_i8`] on eight lanes, as i32.
#[target_feature(enable = "avx2")]
fn round_to_i8x8(y: __m256) -> __m256i {
    let a = _mm256_andnot_ps(_mm256_set1_ps(-0.0), y);
    // An ordered comparison is false for NaN, which stays NaN as in the scalar form.
    let over = _mm256_cmp_ps::<_CMP_GT_OQ>(a, _mm256_set1_ps(127.0));
    let a = _mm256_blendv_ps(a, _mm256_set1_ps(127.0), over);
    // NaN lanes to 0 (`as i32` gives 0 for NaN, `vcvttps2dq` would not).
    let a = _mm256_and_ps(a, _mm256_cmp_ps::<_CMP_ORD_Q>(a, a));
    let whole = _mm256_round_ps::<{ _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC }>(a);
    let up = _mm256_cmp_ps::<_CMP_GE_OQ>(_mm256_sub_ps(a, whole), _mm256_set1_ps(0.5));
    let r = _mm256_sub_epi32(_mm256_cvttps_epi32(whole), _mm256_castps_si256(up));
    let neg = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_LT_OQ>(y, _mm256_setzero_ps()));
    _mm256_sub_epi32(_mm256_xor_si256(r, neg), neg)
}

/// Eight f32 at `s[..8]`.
#[inline(always)]
fn load8(s: &[f32]) -> __m256 {
    let s = &s[..8];
    // SAFETY: eight floats are there (sliced above); the load is unaligned, and AVX is
    // implied by the callers' target features.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

#[cfg(test)]
mod tests {
    use super::super::QuantizedRows;

    /// The AVX2 quantiser writes the reference's bits: steps, values, sums and `d·Σq`, on
    /// random rows and on blocks made of the edge cases (halves at every magnitude, values
    /// that round past 127, zeros, subnormals whose step's inverse overflows, ±∞, NaN).
    #[test]
    fn avx2_quantisation_equals_the_reference_bit_for_bit() {
        if !crate::kernels::policy::cpu().avx2 {
            eprintln!("skipped: this CPU lacks AVX2");
            return;
        }
        let mut s = 0x9e37_79b9u32;
        let mut rand = move || {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            s as f32 / u32::MAX as f32 - 0.5
        };
        // Halves: with max |x| = 127·2^k the step is 2^k and x / d is exact.
        let halves = |k: i32| -> Vec<f32> {
            let mut b: Vec<f32> = (0..32).map(|i| (i as f32 - 15.5) * 2f32.powi(k)).collect();
            b[0] = 127.0 * 2f32.powi(k);
            b
        };
        // A maximum whose x·(1/d) rounds above 127.
        let over = (0..10_000)
            .map(|i| 1.0 + i as f32 * 1e-4)
            .find(|&a| a * (1.0 / (a / 127.0)) > 127.0)
            .expect("some maximum rounds past 127");
        let mut blocks: Vec<Vec<f32>> = vec![
            halves(0),
            halves(-3),
            halves(5),
            (0..32).map(|i| over * (1.0 - i as f32 / 64.0)).collect(),
            vec![0.0; 32],
            (0..32).map(|i| f32::from_bits(i as u32 + 1)).collect(),
            // Subnormal: 1/d overflows to ∞, so x/d is ±∞ (clamped) or 0·∞ = NaN.
            (0..32).map(|i| (i as f32 - 16.0) * 1e-41).collect(),
            (0..32)
                .map(|i| if i == 5 { -0.0 } else { rand() * 1e-30 })
                .collect(),
        ];
        for bad in [f32::INFINITY, f32::NEG_INFINITY, f32::NAN] {
            let mut b: Vec<f32> = (0..32).map(|_| rand() * 8.0).collect();
            // The maximum in the lane the bad value later takes.
            b[1] = 100.0;
            b[17] = bad;
            blocks.push(b);
        }
        blocks.extend((0..40).map(|k| (0..32).map(|_| rand() * (k as f32 + 0.1)).collect()));
        let row: Vec<f32> = blocks.concat();
        for block in [16, 32, 256] {
            let n = row.len() / block * block;
            let x = &row[..n];
            let run = |avx2: bool| {
                let mut acts = QuantizedRows::default();
                acts.resize(n, n, block);
                if avx2 {
                    assert!(super::quantize_row(x, block, acts.whole_mut()).is_ok());
                } else {
                    super::super::quantize_row_reference(x, block, acts.whole_mut());
                }
                let a = acts.row(0);
                let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
                (bits(a.d), a.qs.to_vec(), a.sums.to_vec(), bits(a.dsums))
            };
            assert_eq!(run(true), run(false), "block {block}");
        }
    }
}
