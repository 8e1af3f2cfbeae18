//! Chapter 12's softmax over the vocabulary (the kernels of chapter 10): an `exp` eight
//! lanes at a time, and the column-wise passes the LM head's loss makes over a tile of
//! logits stored vocabulary-major (`z[v, t]`: one row per vocabulary entry, one column per
//! token, so a vector holds eight tokens' logits for the same entry).
//!
//! [`exp_f32`] is Cephes' `expf`: `x = n·ln 2 + r` with `n = round(x / ln 2)` and
//! `|r| ≤ ln 2 / 2` (ln 2 split in two constants so `n·ln 2` is exact), `e^r` by a
//! degree-6 polynomial, `2^n` built in the exponent bits. The AVX2 form computes the same
//! steps with FMA. Both stay within 2 ulp of the correctly rounded `exp` on
//! `[-87.3, 88.0]` (the test sweeps it against f64's); below `-87.336` (where `e^x` is
//! under f32's smallest normal) they return 0, above `88.029` infinity, and NaN stays NaN.

/// Below this `e^x` is smaller than f32's smallest normal number: the result is 0.
const LO: f32 = -87.336_54;
/// Above this `n = round(x / ln 2)` would pass 127: the result is infinity.
const HI: f32 = 88.029_69;
const LOG2E: f32 = std::f32::consts::LOG2_E;
const ROUNDER: f32 = 12_582_912.0;
/// ln 2 = C1 + C2, C1 with few enough bits that `n·C1` is exact for |n| ≤ 128.
const C1: f32 = 0.693_359_4;
const C2: f32 = -2.121_944_4e-4;
/// e^r ≈ 1 + r + r²·(P0 + P1·r + … + P5·r⁵) (Cephes' coefficients, highest first).
const P: [f32; 6] = [
    1.987_569_1e-4,
    1.398_199_9e-3,
    8.333_452e-3,
    4.166_579_6e-2,
    0.166_666_65,
    0.5,
];

// ANCHOR: exp_f32
/// `e^x` in f32 by the steps of the module doc (the scalar form of the vector kernel).
pub fn exp_f32(x: f32) -> f32 {
    if x.is_nan() {
        return x;
    }
    if x < LO {
        return 0.0;
    }
    if x > HI {
        return f32::INFINITY;
    }
    // Adding and taking away 1.5·2²³ rounds to the nearest integer, ties to even, exactly
    // as `round_ties_even` does for |v| < 2²² (here |v| < 128), without a libm call.
    let n = (x * LOG2E + ROUNDER) - ROUNDER;
    let r = x - n * C1 - n * C2;
    let mut p = P[0];
    for &c in &P[1..] {
        p = p * r + c;
    }
    let y = p * r * r + r + 1.0;
    y * f32::from_bits(((n as i32 + 127) as u32) << 23)
}
// ANCHOR_END: exp_f32

/// `max[t] = max(max[t], z[v, t])` over the rows `v` of `z` (`[rows, max.len()]`).
pub fn col_max(z: &[f32], max: &mut [f32]) {
    let w = max.len();
    assert!(w > 0 && z.len().is_multiple_of(w), "col_max: tile shape");
    for row in z.chunks_exact(w) {
        for (m, &x) in max.iter_mut().zip(row) {
            *m = m.max(x);
        }
    }
}

/// `sum[t] += Σ_v e^(z[v, t] − shift[t])` over the rows of `z` (`[rows, shift.len()]`),
/// each column summed in f32 in row order.
pub fn col_exp_sum(z: &[f32], shift: &[f32], sum: &mut [f32]) {
    let w = shift.len();
    assert!(
        w > 0 && z.len().is_multiple_of(w) && sum.len() == w,
        "col_exp_sum: tile shape"
    );
    #[cfg(target_arch = "x86_64")]
    if super::gemm::avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA; the shapes were checked above.
        unsafe { avx2::col_exp_sum(z, shift, sum) };
        return;
    }
    for row in z.chunks_exact(w) {
        for ((s, &x), &m) in sum.iter_mut().zip(row).zip(shift) {
            *s += exp_f32(x - m);
        }
    }
}

/// `z[v, t] = e^(z[v, t] − shift[t]) · scale` in place (`z` is `[rows, shift.len()]`).
pub fn col_exp_scale(z: &mut [f32], shift: &[f32], scale: f32) {
    let w = shift.len();
    assert!(
        w > 0 && z.len().is_multiple_of(w),
        "col_exp_scale: tile shape"
    );
    #[cfg(target_arch = "x86_64")]
    if super::gemm::avx2_fma() {
        // SAFETY: the CPU has AVX2 and FMA; the shapes were checked above.
        unsafe { avx2::col_exp_scale(z, shift, scale) };
        return;
    }
    for row in z.chunks_exact_mut(w) {
        for (x, &m) in row.iter_mut().zip(shift) {
            *x = exp_f32(*x - m) * scale;
        }
    }
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{C1, C2, HI, LO, LOG2E, P, exp_f32};
    use std::arch::x86_64::*;

    // ANCHOR: exp8
    /// [`exp_f32`] on eight lanes, with FMA.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn exp8(x: __m256) -> __m256 {
        let xc = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(LO)), _mm256_set1_ps(HI));
        let n = _mm256_round_ps::<{ _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC }>(
            _mm256_mul_ps(xc, _mm256_set1_ps(LOG2E)),
        );
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(C1), xc);
        let r = _mm256_fnmadd_ps(n, _mm256_set1_ps(C2), r);
        let mut p = _mm256_set1_ps(P[0]);
        for &c in &P[1..] {
            p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(c));
        }
        let y = _mm256_fmadd_ps(
            _mm256_mul_ps(p, r),
            r,
            _mm256_add_ps(r, _mm256_set1_ps(1.0)),
        );
        let pow2 = _mm256_castsi256_ps(_mm256_slli_epi32::<23>(_mm256_add_epi32(
            _mm256_cvtps_epi32(n),
            _mm256_set1_epi32(127),
        )));
        let e = _mm256_mul_ps(y, pow2);
        // x < LO → 0, x > HI → ∞, NaN → NaN (the clamp above would have hidden them).
        let e = _mm256_andnot_ps(_mm256_cmp_ps::<_CMP_LT_OQ>(x, _mm256_set1_ps(LO)), e);
        let e = _mm256_blendv_ps(
            e,
            _mm256_set1_ps(f32::INFINITY),
            _mm256_cmp_ps::<_CMP_GT_OQ>(x, _mm256_set1_ps(HI)),
        );
        _mm256_blendv_ps(e, x, _mm256_cmp_ps::<_CMP_UNORD_Q>(x, x))
    }
    // ANCHOR_END: exp8

    /// [`super::col_exp_sum`]: row by row (the tile is read in memory order), eight
    /// columns at a time, each column summed in row order.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA; `z.len()` is a multiple of `shift.len()`, and `sum`
    /// has `shift.len()` entries.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn col_exp_sum(z: &[f32], shift: &[f32], sum: &mut [f32]) {
        let w = shift.len();
        let main = w / 8 * 8;
        for row in z.chunks_exact(w) {
            for j in (0..main).step_by(8) {
                // SAFETY: j + 8 ≤ w, the length of `row`, `shift` and `sum`; the CPU
                // features are this function's.
                unsafe {
                    let x = _mm256_loadu_ps(row.as_ptr().add(j));
                    let m = _mm256_loadu_ps(shift.as_ptr().add(j));
                    let e = exp8(_mm256_sub_ps(x, m));
                    let s = _mm256_loadu_ps(sum.as_ptr().add(j));
                    _mm256_storeu_ps(sum.as_mut_ptr().add(j), _mm256_add_ps(s, e));
                }
            }
            for j in main..w {
                sum[j] += exp_f32(row[j] - shift[j]);
            }
        }
    }

    /// [`super::col_exp_scale`], row by row, eight columns at a time.
    ///
    /// # Safety
    /// The CPU supports AVX2 and FMA, and `z.len()` is a multiple of `shift.len()`.
    #[target_feature(enable = "avx2,fma")]
    pub(super) unsafe fn col_exp_scale(z: &mut [f32], shift: &[f32], scale: f32) {
        let w = shift.len();
        let main = w / 8 * 8;
        let sc = _mm256_set1_ps(scale);
        for row in z.chunks_exact_mut(w) {
            for j in (0..main).step_by(8) {
                // SAFETY: j + 8 ≤ w, the length of `row` and `shift`; the CPU features
                // are this function's.
                unsafe {
                    let x = _mm256_loadu_ps(row.as_ptr().add(j));
                    let m = _mm256_loadu_ps(shift.as_ptr().add(j));
                    let e = exp8(_mm256_sub_ps(x, m));
                    _mm256_storeu_ps(row.as_mut_ptr().add(j), _mm256_mul_ps(e, sc));
                }
            }
            for j in main..w {
                row[j] = exp_f32(row[j] - shift[j]) * scale;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Distance from `got` to the exact `e^x`, in units of the f32 spacing at the result.
    fn ulps(got: f32, x: f32) -> f64 {
        let exact = (x as f64).exp();
        let r = exact as f32;
        let ulp = (f32::from_bits(r.to_bits() + 1) - r) as f64;
        (got as f64 - exact).abs() / ulp
    }

    fn sweep() -> impl Iterator<Item = f32> {
        (0..=400_000).map(|i| -87.3 + (88.0 + 87.3) * i as f32 / 400_000.0)
    }

    #[test]
    fn exp_f32_within_2_ulp() {
        let worst = sweep().map(|x| ulps(exp_f32(x), x)).fold(0.0, f64::max);
        assert!(worst <= 2.0, "exp_f32: {worst} ulp");
    }

    /// The vector form (through `col_exp_scale`, width 8 so no scalar tail) is as close.
    #[test]
    fn exp_vector_within_2_ulp() {
        let xs: Vec<f32> = sweep().take(400_000).collect();
        let mut z = xs.clone();
        col_exp_scale(&mut z, &[0.0; 8], 1.0);
        let worst = z
            .iter()
            .zip(&xs)
            .map(|(&g, &x)| ulps(g, x))
            .fold(0.0, f64::max);
        assert!(worst <= 2.0, "exp8: {worst} ulp");
    }

    /// The rounding trick is `round_ties_even` on every f32 `x·log2 e` can be (ties and
    /// their neighbours included).
    #[test]
    fn rounder_rounds_ties_to_even() {
        let mut v = -130.0f32;
        while v <= 130.0 {
            for w in [v, v.next_up(), v.next_down()] {
                assert_eq!((w + ROUNDER) - ROUNDER, w.round_ties_even(), "{w}");
            }
            v += 0.125;
        }
        for x in sweep().step_by(97) {
            let w = x * LOG2E;
            assert_eq!((w + ROUNDER) - ROUNDER, w.round_ties_even(), "{w}");
        }
    }

    #[test]
    fn exp_edges() {
        let xs = [
            -1e30,
            -88.0,
            0.0,
            89.0,
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::NAN,
            1.0,
            -1.0,
        ];
        let mut z = vec![0.0f32; 0];
        for _ in 0..8 {
            z.extend_from_slice(&xs);
        }
        // 9 columns: eight through the vector lanes, the ninth through the scalar tail.
        let mut v = z.clone();
        col_exp_scale(&mut v, &[0.0; 9], 1.0);
        for (i, (&got, &x)) in v.iter().zip(&z).enumerate() {
            let want = exp_f32(x);
            let same =
                (got.is_nan() && want.is_nan()) || got == want || (got - want).abs() <= 3e-7 * want;
            assert!(same, "{i}: e^{x} = {got}, scalar {want}");
        }
        assert_eq!(exp_f32(0.0), 1.0);
        assert_eq!(exp_f32(-88.0), 0.0);
        assert_eq!(exp_f32(89.0), f32::INFINITY);
        assert!(exp_f32(f32::NAN).is_nan());
    }

    #[test]
    fn column_passes() {
        let (rows, w) = (5, 11);
        let z: Vec<f32> = (0..rows * w)
            .map(|i| ((i * 37 % 17) as f32 - 8.0) / 3.0)
            .collect();
        let mut max = vec![f32::NEG_INFINITY; w];
        col_max(&z, &mut max);
        let mut sum = vec![0.0f32; w];
        col_exp_sum(&z, &max, &mut sum);
        let mut p = z.clone();
        col_exp_scale(&mut p, &max, 0.5);
        for j in 0..w {
            let col: Vec<f64> = (0..rows).map(|v| z[v * w + j] as f64).collect();
            let m = col.iter().copied().fold(f64::NEG_INFINITY, f64::max);
            assert_eq!(max[j] as f64, m);
            let s: f64 = col.iter().map(|x| (x - m).exp()).sum();
            assert!((sum[j] as f64 - s).abs() <= 1e-6 * s, "column {j}");
            for v in 0..rows {
                let want = 0.5 * (col[v] - m).exp();
                // 2 ulp of the exponential, and the rounding of z − max amplified by it.
                assert!((p[v * w + j] as f64 - want).abs() <= 1e-6 * want.max(1e-30));
            }
        }
    }
}
