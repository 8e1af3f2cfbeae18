//! The x86-64 kernels of `vnni`. Bounds of the integer steps: each `vpdpbusd` lane adds
//! four products of an unsigned weight byte (Q4_K q ≤ 15, Q6_K q ≤ 63, Q8_0 w + 128 ≤ 255)
//! by |x̂| ≤ 127 to a seed of at most 4·128·127 in magnitude, so every lane stays below
//! 2^18 (exact in i32, and in f32 after conversion).

use super::ActRow;
use crate::quant::GgmlType;
use std::arch::x86_64::*;

/// The tile for `ty` (one of Q8_0, Q4_K, Q6_K; shapes checked by `dot_block`).
pub fn tile<const R: usize, const T: usize>(
    ty: GgmlType,
    rows: &[&[u8]; R],
    xs: &[ActRow; T],
) -> [[f32; T]; R] {
    assert!(super::cpu_has_vnni(), "vnni tiles: CPU features");
    // SAFETY: the CPU features were checked just above; each kernel reads its rows and
    // activations through bounds-checked slices before every load (`load64`, `load32`,
    // `loadf8`, `load16`).
    unsafe {
        match ty {
            GgmlType::Q8_0 => q8_0(rows, xs),
            GgmlType::Q4_K => q4_k(rows, xs),
            GgmlType::Q6_K => q6_k(rows, xs),
            _ => panic!("vnni tiles: no tile for {}", ty.name()),
        }
    }
}

/// 64 bytes at `s[..64]` (bounds-checked, then an unaligned load).
#[inline(always)]
fn load64<T>(s: &[T]) -> __m512i {
    assert!(std::mem::size_of_val(s) >= 64, "load64: short slice");
    // SAFETY: the slice holds at least 64 bytes (asserted); the load is unaligned, and
    // AVX-512F is implied by the callers' target features.
    unsafe { _mm512_loadu_si512(s.as_ptr() as *const __m512i) }
}

/// 32 bytes at `s[..32]`.
#[inline(always)]
fn load32<T>(s: &[T]) -> __m256i {
    assert!(std::mem::size_of_val(s) >= 32, "load32: short slice");
    // SAFETY: the slice holds at least 32 bytes (asserted); the load is unaligned.
    unsafe { _mm256_loadu_si256(s.as_ptr() as *const __m256i) }
}

/// 16 bytes at `s[..16]`.
#[inline(always)]
fn load16(s: &[u8]) -> __m128i {
    assert!(s.len() >= 16, "load16: short slice");
    // SAFETY: sixteen bytes are there (asserted); the load is unaligned.
    unsafe { _mm_loadu_si128(s.as_ptr() as *const __m128i) }
}

/// Eight f32 at `s[..8]`, in the low half of a zeroed 16-lane register.
#[inline(always)]
fn loadf8(s: &[f32]) -> __m512 {
    assert!(s.len() >= 8, "loadf8: short slice");
    // SAFETY: eight floats are there (asserted); the load is unaligned.
    unsafe { _mm512_zextps256_ps512(_mm256_loadu_ps(s.as_ptr())) }
}

/// The little-endian f16 at `b[0..2]`, widened with F16C.
#[inline(always)]
fn f16_at(b: &[u8]) -> f32 {
    let bits = u16::from_le_bytes([b[0], b[1]]);
    // SAFETY: F16C is implied by the callers' target features.
    unsafe { _mm_cvtss_f32(_mm_cvtph_ps(_mm_cvtsi32_si128(bits as i32))) }
}

/// A permutation vector: lane `l` takes lane `f(l)`.
#[inline(always)]
fn lanes(f: impl Fn(i32) -> i32) -> __m512i {
    let idx: [i32; 16] = std::array::from_fn(|l| f(l as i32));
    load64(&idx)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn finish<const R: usize, const T: usize>(acc: &[[__m512; T]; R]) -> [[f32; T]; R] {
    let mut out = [[0.0f32; T]; R];
    for (o, a) in out.iter_mut().zip(acc) {
        for (v, x) in o.iter_mut().zip(a) {
            *v = _mm512_reduce_add_ps(*x);
        }
    }
    out
}

/// Q8_0: two 34-byte weight blocks per register (the last alone when their number is odd),
/// fed as `w + 128`; the seed `−128·Σx̂` per lane takes the offset back. Lanes 4k..4k + 4
/// hold 16-value activation block k of the pair, scaled by `dw_{k/2}·dx_k`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q8_0<const R: usize, const T: usize>(rows: &[&[u8]; R], xs: &[ActRow; T]) -> [[f32; T]; R] {
    let flip = _mm512_set1_epi8(-128);
    let (pick_w, pick_x) = (lanes(|l| l / 8), lanes(|l| l / 4));
    let zero = _mm512_setzero_si512();
    let nb = xs[0].d.len() / 2;
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    for p in 0..nb.div_ceil(2) {
        let two = 2 * p + 1 < nb;
        let x: [__m512i; T] = std::array::from_fn(|t| {
            if two {
                load64(&xs[t].qs[64 * p..])
            } else {
                _mm512_zextsi256_si512(load32(&xs[t].qs[64 * p..]))
            }
        });
        let seed: [__m512i; T] =
            std::array::from_fn(|t| _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, flip, x[t])));
        let dx: [__m512; T] = std::array::from_fn(|t| {
            let d = &xs[t].d[4 * p..];
            let d4 = if two {
                _mm_setr_ps(d[0], d[1], d[2], d[3])
            } else {
                _mm_setr_ps(d[0], d[1], 0.0, 0.0)
            };
            _mm512_permutexvar_ps(pick_x, _mm512_castps128_ps512(d4))
        });
        for (a, row) in acc.iter_mut().zip(rows) {
            let b0 = &row[68 * p..];
            let w0 = load32(&b0[2..]);
            let (w, dw1) = if two {
                let w1 = load32(&b0[36..]);
                (
                    _mm512_inserti64x4(_mm512_castsi256_si512(w0), w1, 1),
                    f16_at(&b0[34..]),
                )
            } else {
                (_mm512_zextsi256_si512(w0), 0.0)
            };
            // Unsigned w + 128 (the zero upper half of a lone block meets zero x̂ bytes).
            let w = _mm512_xor_si512(w, flip);
            let dw = _mm512_permutexvar_ps(
                pick_w,
                _mm512_castps128_ps512(_mm_setr_ps(f16_at(b0), dw1, 0.0, 0.0)),
            );
            for t in 0..T {
                let s = _mm512_dpbusd_epi32(seed[t], w, x[t]);
                let v = _mm512_mul_ps(_mm512_cvtepi32_ps(s), dx[t]);
                a[t] = _mm512_fmadd_ps(v, dw, a[t]);
            }
        }
    }
    finish(&acc)
}

/// Q4_K: per 32 bytes of nibbles `c`, one register of sub-blocks `2c` (low nibbles, lanes
/// 0..8) and `2c + 1` (high, lanes 8..16) against the 64 activation bytes of blocks `2c`,
/// `2c + 1`, scaled by `d·sc_s·dx_j`; minus `dmin·Σ_s m_s·dx_j·Σx̂q` per 256 weights, one
/// 8-lane product with the token's `dsums`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q4_k<const R: usize, const T: usize>(rows: &[&[u8]; R], xs: &[ActRow; T]) -> [[f32; T]; R] {
    let m4 = _mm512_set1_epi8(0x0f);
    let pick: [__m512i; 4] = std::array::from_fn(|c| lanes(|l| 2 * c as i32 + l / 8));
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    for b in 0..xs[0].d.len() / 8 {
        let dx: [__m512; T] = std::array::from_fn(|t| loadf8(&xs[t].d[8 * b..]));
        let dsums: [__m512; T] = std::array::from_fn(|t| loadf8(&xs[t].dsums[8 * b..]));
        let mut scl = [_mm512_setzero_ps(); R];
        for i in 0..R {
            let blk = &rows[i][144 * b..144 * b + 144];
            let (scales, mins) = super::super::unpack_scale_min_k4(&blk[4..16]);
            let sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128(scales as i64)));
            scl[i] = _mm512_mul_ps(sc, _mm512_set1_ps(f16_at(blk)));
            let m = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_cvtsi64_si128(mins as i64)));
            let m = _mm512_mul_ps(m, _mm512_set1_ps(f16_at(&blk[2..])));
            for t in 0..T {
                acc[i][t] = _mm512_fnmadd_ps(m, dsums[t], acc[i][t]);
            }
        }
        for (c, pick) in pick.iter().enumerate() {
            let x: [__m512i; T] = std::array::from_fn(|t| load64(&xs[t].qs[256 * b + 64 * c..]));
            let dxc: [__m512; T] = std::array::from_fn(|t| _mm512_permutexvar_ps(*pick, dx[t]));
            for i in 0..R {
                let q = load32(&rows[i][144 * b + 16 + 32 * c..]);
                let q = _mm512_inserti64x4(_mm512_castsi256_si512(q), _mm256_srli_epi16(q, 4), 1);
                let q = _mm512_and_si512(q, m4);
                let s = _mm512_permutexvar_ps(*pick, scl[i]);
                for t in 0..T {
                    let p = _mm512_dpbusd_epi32(zero, q, x[t]);
                    let v = _mm512_mul_ps(_mm512_cvtepi32_ps(p), dxc[t]);
                    acc[i][t] = _mm512_fmadd_ps(v, s, acc[i][t]);
                }
            }
        }
    }
    finish(&acc)
}

/// Q6_K: per half `h` of a 256-weight block, two registers `z = 2h, 2h + 1` of 64 weights
/// (16-weight sub-blocks `4z .. 4z + 4`, four lanes each) against activation blocks `2z`,
/// `2z + 1`; the seed `−32·Σx̂` per lane makes each lane `Σ (q − 32)·x̂`, scaled by
/// `d·sc_s·dx_j`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q6_k<const R: usize, const T: usize>(rows: &[&[u8]; R], xs: &[ActRow; T]) -> [[f32; T]; R] {
    let (m4, m2) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x30));
    let c32 = _mm512_set1_epi8(32);
    let pick_sc: [__m512i; 4] = std::array::from_fn(|z| lanes(|l| 4 * z as i32 + l / 4));
    let pick_dx: [__m512i; 4] = std::array::from_fn(|z| lanes(|l| 2 * z as i32 + l / 8));
    let zero = _mm512_setzero_si512();
    let mut acc = [[_mm512_setzero_ps(); T]; R];
    for b in 0..xs[0].d.len() / 8 {
        let dx: [__m512; T] = std::array::from_fn(|t| loadf8(&xs[t].d[8 * b..]));
        let scl: [__m512; R] = std::array::from_fn(|i| {
            let blk = &rows[i][210 * b..210 * b + 210];
            let sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(load16(&blk[192..208])));
            _mm512_mul_ps(sc, _mm512_set1_ps(f16_at(&blk[208..])))
        });
        for z in 0..4 {
            let h = z / 2;
            let x: [__m512i; T] = std::array::from_fn(|t| load64(&xs[t].qs[256 * b + 64 * z..]));
            let seed: [__m512i; T] = std::array::from_fn(|t| {
                _mm512_sub_epi32(zero, _mm512_dpbusd_epi32(zero, c32, x[t]))
            });
            let dxz: [__m512; T] =
                std::array::from_fn(|t| _mm512_permutexvar_ps(pick_dx[z], dx[t]));
            for i in 0..R {
                let blk = &rows[i][210 * b..210 * b + 210];
                let l = load64(&blk[64 * h..]);
                let hb = load32(&blk[128 + 32 * h..]);
                // Runs 0, 1 of the half: low nibbles of ql and qh bits 0-1, 2-3; runs 2, 3:
                // high nibbles and bits 4-5, 6-7 (each moved to bits 4-5 of the byte).
                let (lo, hi) = if z % 2 == 0 {
                    let hi = _mm512_inserti64x4(
                        _mm512_castsi256_si512(_mm256_slli_epi16(hb, 4)),
                        _mm256_slli_epi16(hb, 2),
                        1,
                    );
                    (l, hi)
                } else {
                    let hi =
                        _mm512_inserti64x4(_mm512_castsi256_si512(hb), _mm256_srli_epi16(hb, 2), 1);
                    (_mm512_srli_epi16(l, 4), hi)
                };
                let q = _mm512_or_si512(_mm512_and_si512(lo, m4), _mm512_and_si512(hi, m2));
                let s = _mm512_permutexvar_ps(pick_sc[z], scl[i]);
                for t in 0..T {
                    let p = _mm512_dpbusd_epi32(seed[t], q, x[t]);
                    let v = _mm512_mul_ps(_mm512_cvtepi32_ps(p), dxz[t]);
                    acc[i][t] = _mm512_fmadd_ps(v, s, acc[i][t]);
                }
            }
        }
    }
    finish(&acc)
}
