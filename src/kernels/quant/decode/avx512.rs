//! The 512-bit decode rows of Q8_0, the type of llama.cpp's q8_0 files: two 34-byte blocks
//! in a register, 64 weights, so a pair of blocks takes one integer dot product, one
//! conversion and one FMA where the AVX2 rows take two of each. Each task walks two of its
//! rows at once, from its two halves, so a thread keeps two memory streams in flight (more
//! streams read slower; chapter 10's Reproducing page has the figures).
//!
//! Q4_K and Q6_K take the 256-bit rows of `decode.rs` on every x86 CPU (with 256-bit
//! `vpdpbusd` where VNNI is on): their 512-bit rows needed four conversions and four FMAs a
//! block where the 256-bit rows gather the block's sums into one register first, and on a
//! CPU whose 512-bit instructions run as two 256-bit halves they read slower.
//!
//! The integers, products and f32 order are those of the 256-bit rows (four products of
//! one 16-value activation block per i32 lane; the 256-bit rows keep even and odd blocks
//! apart, as these keep them in two halves), so the two give the same bits, which a test
//! pins; which of them runs is timed once a process ([`wins`]).

use super::ActRow;
use super::avx2::prefetch;
use crate::kernels::x86::hsum8;
use crate::quant::GgmlType;
use std::arch::x86_64::*;

/// AVX-512 F/BW/VL with VNNI, AVX2, FMA and F16C, which every kernel here is compiled with.
pub fn available() -> bool {
    crate::kernels::policy::cpu().vnni()
}

/// The kernel for `ty` (Q8_0) over each row of `rows` (shapes checked by the
/// caller, `decode::dot_rows`).
pub fn dot_rows(ty: GgmlType, rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
    assert!(available(), "decode kernels: AVX-512 VNNI");
    // SAFETY: the CPU features were checked just above; each kernel slices its blocks
    // (bounds-checked) before every load (`load32`, `load64`, `loadf4`).
    unsafe {
        match ty {
            GgmlType::Q8_0 => rows_q8_0(rows, row_bytes, x, out),
            _ => panic!("decode kernels: no AVX-512 rows for {}", ty.name()),
        }
    }
}

/// Whether the 512-bit rows (Q8_0's, the only type that has them) read faster than the
/// 256-bit ones on this CPU, timed once a process by [`time_the_two_forms`]. The two give
/// the same bits (a test pins them), so which one wins changes the speed alone; where
/// 512-bit instructions run as two 256-bit halves, the 256-bit rows with `vpdpbusd` win.
pub fn wins() -> bool {
    static WINS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WINS.get_or_init(time_the_two_forms)
}

/// Times Q8_0's 512-bit rows against its 256-bit ones (`vpdpbusd` sums) on one thread: a
/// 272 KiB matrix (which stays in L2) against one token, best of several interleaved
/// rounds of passes, about 3 ms in all. True when the 512-bit rows take less time.
pub(super) fn time_the_two_forms() -> bool {
    const ROWS: usize = 256;
    const COLS: usize = 1024;
    let values = |n: usize, salt: usize| -> Vec<f32> {
        (0..n)
            .map(|i| ((i * 7919 + salt) % 2003) as f32 / 1001.0 - 1.0)
            .collect()
    };
    let mut bytes = Vec::new();
    crate::quant::quantize(GgmlType::Q8_0, &values(ROWS * COLS, 1), &mut bytes);
    let mut acts = super::super::QuantizedRows::default();
    let block = super::super::activation_block(GgmlType::Q8_0).expect("Q8_0 has an int8 dot");
    acts.quantize(&values(COLS, 5), COLS, block);
    let (x, row_bytes) = (acts.row(0), bytes.len() / ROWS);
    let mut out = vec![0.0f32; ROWS];
    let mut best = [std::time::Duration::MAX; 2];
    for _round in 0..6 {
        for (wide, best) in best.iter_mut().enumerate() {
            let start = std::time::Instant::now();
            for _pass in 0..16 {
                match wide {
                    1 => dot_rows(GgmlType::Q8_0, &bytes, row_bytes, x, &mut out),
                    _ => {
                        super::avx2::dot_rows(GgmlType::Q8_0, &bytes, row_bytes, x, &mut out, true)
                    }
                }
                std::hint::black_box(&mut out);
            }
            *best = (*best).min(start.elapsed());
        }
    }
    best[1] < best[0]
}

/// Rows walked at once ([`super::by_streams`]).
const STREAMS: usize = 2;

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn rows_q8_0(rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
    super::by_streams::<STREAMS>(
        rows,
        row_bytes,
        out,
        |r, v| *v = q8_0(r, x),
        |r| q8_0([r], x)[0],
    );
}

/// 32 bytes at `s[..32]`.
#[inline(always)]
fn load32<T>(s: &[T]) -> __m256i {
    assert!(std::mem::size_of_val(s) >= 32, "load32: short slice");
    // SAFETY: the slice holds at least 32 bytes (asserted); the load is unaligned, and AVX
    // is implied by the callers' target features.
    unsafe { _mm256_loadu_si256(s.as_ptr() as *const __m256i) }
}

/// 64 bytes at `s[..64]`.
#[inline(always)]
fn load64<T>(s: &[T]) -> __m512i {
    assert!(std::mem::size_of_val(s) >= 64, "load64: short slice");
    // SAFETY: the slice holds at least 64 bytes (asserted); the load is unaligned, and
    // AVX-512F is implied by the callers' target features.
    unsafe { _mm512_loadu_si512(s.as_ptr() as *const __m512i) }
}

/// Four f32 at `s[..4]`, in the low quarter of a register.
#[inline(always)]
fn loadf4(s: &[f32]) -> __m512 {
    assert!(s.len() >= 4, "loadf4: short slice");
    // SAFETY: four floats are there (asserted); the load is unaligned, and AVX-512F is
    // implied by the callers' target features.
    unsafe { _mm512_castps128_ps512(_mm_loadu_ps(s.as_ptr())) }
}

/// The sixteen lanes summed.
#[target_feature(enable = "avx512f,avx2")]
fn hsum16(v: __m512) -> f32 {
    let high = _mm256_castpd_ps(_mm512_extractf64x4_pd::<1>(_mm512_castps_pd(v)));
    let s = _mm256_add_ps(_mm512_castps512_ps256(v), high);
    hsum8(s)
}

/// Q8_0: two 34-byte blocks a register, block `2p` in the low half and `2p + 1` in the
/// high one, against 64 consecutive activation bytes. `vpdpbusd` multiplies unsigned by
/// signed bytes, so it takes the weights' magnitudes (−128 reads as 128) against the
/// activations negated where the weight is negative (|x̂| ≤ 127: exact); each i32 lane is
/// the AVX2 rows' integer, four products. Lane quarter `j` takes activation step
/// `dx_{4p+j}`, each half its block's `d`. An odd last block goes alone, upper half zero.
/// `R` rows at once.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn q8_0<const R: usize>(rows: [&[u8]; R], x: ActRow) -> [f32; R] {
    let quarters = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    let zero = _mm512_setzero_si512();
    // Σ over the 64 bytes of `w · x̂`, scaled lane by lane by `dw · dx`, into `acc`.
    let step = |w: __m512i, xv: __m512i, dx: __m512, d: [&[u8]; 2], acc: __m512| {
        let bits = d.map(|b| u16::from_le_bytes([b[0], b[1]]) as i16);
        let dw = _mm512_cvtph_ps(_mm256_inserti128_si256::<1>(
            _mm256_castsi128_si256(_mm_set1_epi16(bits[0])),
            _mm_set1_epi16(bits[1]),
        ));
        let signed_x = _mm512_mask_sub_epi8(xv, _mm512_movepi8_mask(w), zero, xv);
        let dot = _mm512_dpbusd_epi32(zero, _mm512_abs_epi8(w), signed_x);
        _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), _mm512_mul_ps(dw, dx), acc)
    };
    let mut acc = [_mm512_setzero_ps(); R];
    let blocks = rows.map(|r| r.as_chunks::<68>().0);
    let xs = x.qs.as_chunks::<64>().0.iter().zip(x.d.as_chunks::<4>().0);
    for (p, (xq, dx4)) in xs.enumerate() {
        let (xv, dx) = (load64(xq), _mm512_permutexvar_ps(quarters, loadf4(dx4)));
        for k in 0..R {
            let pair = &blocks[k][p];
            prefetch(pair.as_ptr(), 68);
            let w = _mm512_inserti64x4::<1>(
                _mm512_castsi256_si512(load32(&pair[2..])),
                load32(&pair[36..]),
            );
            acc[k] = step(w, xv, dx, [pair, &pair[34..]], acc[k]);
        }
    }
    let nb = x.qs.len() / 32;
    if nb % 2 == 1 {
        let xv = _mm512_zextsi256_si512(load32(&x.qs[32 * (nb - 1)..]));
        let dx2 = &x.d[2 * (nb - 1)..];
        let low = _mm512_castps128_ps512(_mm_setr_ps(dx2[0], dx2[1], 0.0, 0.0));
        let dx = _mm512_permutexvar_ps(quarters, low);
        for k in 0..R {
            let last = &rows[k][34 * (nb - 1)..][..34];
            let w = _mm512_zextsi256_si512(load32(&last[2..]));
            acc[k] = step(w, xv, dx, [last, &[0, 0]], acc[k]);
        }
    }
    std::array::from_fn(|k| hsum16(acc[k]))
}
