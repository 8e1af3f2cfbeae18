//! The 512-bit decode rows of Q8_0, Q4_K and Q6_K, the types of llama.cpp's q8_0 and q4_k_m
//! files: 64 weights a register instead of 32, so a 256-weight block takes four integer dot
//! products, four conversions and four FMAs where the AVX2 rows take eight of each, and the
//! unpacking shares its shifts between the two halves of a register (a per-half shift
//! count); Q8_0 puts two 34-byte blocks in a register. Each
//! task walks two of its rows at once, from its two halves, so a thread keeps two memory
//! streams in flight (more streams read slower; chapter 10's Reproducing page has the
//! figures).
//!
//! The integers are those of the AVX2 rows (same lanes: four products of one 16- or
//! 32-weight sub-block per i32 lane); only the f32 accumulation order differs, so the tests
//! pin these rows to the reference within the same bound as the AVX2 ones.

use super::ActRow;
use super::avx2::prefetch;
use crate::kernels::x86::hsum8;
use crate::quant::GgmlType;
use std::arch::x86_64::*;

/// AVX-512 F/BW/VL with VNNI, AVX2, FMA and F16C, which every kernel here is compiled with.
pub fn available() -> bool {
    crate::kernels::policy::cpu().vnni()
}

/// The kernel for `ty` (Q8_0, Q4_K or Q6_K) over each row of `rows` (shapes checked by the
/// caller, `decode::dot_rows`).
pub fn dot_rows(ty: GgmlType, rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
    assert!(available(), "decode kernels: AVX-512 VNNI");
    // SAFETY: the CPU features were checked just above; each kernel slices its blocks
    // (bounds-checked) before every load (`load32`, `load64`, `loadf8`).
    unsafe {
        match ty {
            GgmlType::Q8_0 => rows_q8_0(rows, row_bytes, x, out),
            GgmlType::Q4_K => rows_q4_k(rows, row_bytes, x, out),
            GgmlType::Q6_K => rows_q6_k(rows, row_bytes, x, out),
            _ => panic!("decode kernels: no AVX-512 rows for {}", ty.name()),
        }
    }
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

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn rows_q4_k(rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
    super::by_streams::<STREAMS>(
        rows,
        row_bytes,
        out,
        |r, v| *v = q4_k(r, x),
        |r| q4_k([r], x)[0],
    );
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn rows_q6_k(rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
    super::by_streams::<STREAMS>(
        rows,
        row_bytes,
        out,
        |r, v| *v = q6_k(r, x),
        |r| q6_k([r], x)[0],
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

/// Eight f32 at `s[..8]`.
#[inline(always)]
fn loadf8(s: &[f32]) -> __m256 {
    assert!(s.len() >= 8, "loadf8: short slice");
    // SAFETY: eight floats are there (asserted); the load is unaligned.
    unsafe { _mm256_loadu_ps(s.as_ptr()) }
}

/// The little-endian f16 at `b[0..2]` widened, in all sixteen lanes.
#[inline(always)]
fn f16_splat16(b: &[u8]) -> __m512 {
    let bits = u16::from_le_bytes([b[0], b[1]]);
    // SAFETY: F16C and AVX-512F are implied by the callers' target features.
    unsafe { _mm512_cvtph_ps(_mm256_set1_epi16(bits as i16)) }
}

/// Lane `i` of sixteen holds `first + i / 8`: the index that spreads two consecutive
/// values of an 8-value vector over the two halves of a 16-lane one (`vpermps`).
#[target_feature(enable = "avx512f")]
#[inline]
fn halves_index(first: i32) -> __m512i {
    let halves = _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi32(1));
    _mm512_add_epi32(_mm512_set1_epi32(first), halves)
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

/// Q4_K: the 32 packed bytes of sub-blocks `2c` (low nibbles) and `2c + 1` (high nibbles)
/// are broadcast to both halves of a register and shifted by 0 and 4, so one register holds
/// weights `64c .. 64c + 64` in order, against 64 consecutive activation bytes. Per lane,
/// `vpdpbusd` gives the AVX2 rows' integer (four products of one sub-block); it is scaled
/// by `sc_s·dx_s` (one 8-lane product per block, spread over the halves by `vpermps`), the
/// block's sum by `d`; the minima term as in the AVX2 rows, one 8-lane product a block.
/// `R` rows at once, each with its own accumulators.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn q4_k<const R: usize>(rows: [&[u8]; R], x: ActRow) -> [f32; R] {
    let m4 = _mm512_set1_epi8(0x0f);
    let nibble_shift = _mm512_inserti64x4::<1>(_mm512_setzero_si512(), _mm256_set1_epi16(4));
    let spread: [__m512i; 4] = std::array::from_fn(|c| halves_index(2 * c as i32));
    let mut acc = [_mm512_setzero_ps(); R];
    let mut acc_min = [_mm256_setzero_ps(); R];
    let blocks = rows.map(|r| r.as_chunks::<144>().0);
    let xs = x.qs.as_chunks::<256>().0.iter();
    let steps =
        x.d.as_chunks::<8>()
            .0
            .iter()
            .zip(x.dsums.as_chunks::<8>().0);
    for (b, (xq, (dx, dsums))) in xs.zip(steps).enumerate() {
        let (dx, dsums) = (loadf8(dx), loadf8(dsums));
        for k in 0..R {
            let blk = &blocks[k][b];
            prefetch(blk.as_ptr(), 144);
            let (scales, mins) = super::super::unpack_scale_min_k4(&blk[4..16]);
            let sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(scales as i64)));
            let scdx = _mm512_castps256_ps512(_mm256_mul_ps(sc, dx));
            let m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(mins as i64)));
            let dmin = _mm512_castps512_ps256(f16_splat16(&blk[2..4]));
            acc_min[k] = _mm256_fnmadd_ps(_mm256_mul_ps(m, dmin), dsums, acc_min[k]);
            let mut sum = [_mm512_setzero_ps(); 2];
            for c in 0..4 {
                let packed = _mm512_broadcast_i64x4(load32(&blk[16 + 32 * c..]));
                let q = _mm512_and_si512(_mm512_srlv_epi16(packed, nibble_shift), m4);
                let zero = _mm512_setzero_si512();
                let dot = _mm512_dpbusd_epi32(zero, q, load64(&xq[64 * c..]));
                let scale = _mm512_permutexvar_ps(spread[c], scdx);
                sum[c % 2] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(dot), scale, sum[c % 2]);
            }
            acc[k] = _mm512_fmadd_ps(_mm512_add_ps(sum[0], sum[1]), f16_splat16(blk), acc[k]);
        }
    }
    std::array::from_fn(|k| hsum16(acc[k]) + hsum8(acc_min[k]))
}

/// Q6_K: per half `h`, the 64 low-nibble bytes at `64h` and the 32 high-bit bytes at
/// `128 + 32h` (broadcast to both register halves, shifted per half) give two registers of
/// 64 weights in order, `128h .. 128h + 64` and `128h + 64 .. 128h + 128`. Per register,
/// `vpmaddubsw` then `vpmaddwd` by the scales of its four 16-weight sub-blocks (`vpermw`)
/// give the AVX2 rows' i32 lanes, scaled by `dx` of their activation block; the `−32`
/// offset is the AVX2 rows' 8-lane product per block. `R` rows at once.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
#[inline]
fn q6_k<const R: usize>(rows: [&[u8]; R], x: ActRow) -> [f32; R] {
    let (m4, m2) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x30));
    let per_half = |lo: i16, hi: i16| {
        _mm512_inserti64x4::<1>(
            _mm512_castsi256_si512(_mm256_set1_epi16(lo)),
            _mm256_set1_epi16(hi),
        )
    };
    // High bits of runs 0 and 1 (left by 4 and 2), of runs 2 and 3 (right by 0 and 2).
    let (high_a, high_b) = (per_half(4, 2), per_half(0, 2));
    // Word w of register r's scale index: sub-block 4r + w / 8.
    let word_sub = _mm512_srli_epi16::<3>(_mm512_set_epi64(
        0x001f_001e_001d_001c,
        0x001b_001a_0019_0018,
        0x0017_0016_0015_0014,
        0x0013_0012_0011_0010,
        0x000f_000e_000d_000c,
        0x000b_000a_0009_0008,
        0x0007_0006_0005_0004,
        0x0003_0002_0001_0000,
    ));
    let pick: [__m512i; 4] =
        std::array::from_fn(|r| _mm512_add_epi16(word_sub, _mm512_set1_epi16(4 * r as i16)));
    let spread: [__m512i; 4] = std::array::from_fn(|r| halves_index(2 * r as i32));
    let mut acc = [_mm512_setzero_ps(); R];
    let mut acc_off = [_mm256_setzero_ps(); R];
    let blocks = rows.map(|r| r.as_chunks::<210>().0);
    let xs = x.qs.as_chunks::<256>().0.iter();
    let steps =
        x.d.as_chunks::<8>()
            .0
            .iter()
            .zip(x.sums.as_chunks::<16>().0);
    for (b, (xq, (dx, sums))) in xs.zip(steps).enumerate() {
        let (dx8, sums) = (loadf8(dx), load32(sums));
        let dxr: [__m512; 4] =
            std::array::from_fn(|r| _mm512_permutexvar_ps(spread[r], _mm512_castps256_ps512(dx8)));
        for k in 0..R {
            let blk = &blocks[k][b];
            prefetch(blk.as_ptr(), 210);
            // SAFETY: `blk[192..208]` is sixteen bytes (a fixed-size chunk of 210).
            let raw = unsafe { _mm_loadu_si128(blk[192..208].as_ptr() as *const __m128i) };
            let sc16 = _mm256_cvtepi8_epi16(raw);
            let d = f16_splat16(&blk[208..]);
            // Lane j: sc_2j·Σx̂q(2j) + sc_2j+1·Σx̂q(2j+1), at most 2·128·2032.
            let off = _mm256_cvtepi32_ps(_mm256_madd_epi16(sc16, sums));
            let d32 = _mm256_mul_ps(_mm512_castps512_ps256(d), _mm256_set1_ps(-32.0));
            acc_off[k] = _mm256_fmadd_ps(_mm256_mul_ps(off, dx8), d32, acc_off[k]);
            let sc16 = _mm512_castsi256_si512(sc16);
            let mut sum = [_mm512_setzero_ps(); 2];
            for h in 0..2 {
                let low = load64(&blk[64 * h..]);
                let hb = _mm512_broadcast_i64x4(load32(&blk[128 + 32 * h..]));
                let q = [
                    _mm512_or_si512(
                        _mm512_and_si512(low, m4),
                        _mm512_and_si512(_mm512_sllv_epi16(hb, high_a), m2),
                    ),
                    _mm512_or_si512(
                        _mm512_and_si512(_mm512_srli_epi16::<4>(low), m4),
                        _mm512_and_si512(_mm512_srlv_epi16(hb, high_b), m2),
                    ),
                ];
                for (j, &qj) in q.iter().enumerate() {
                    let r = 2 * h + j;
                    // Pairs of q·x̂ at most 2·63·127 = 16002; by a scale ≤ 128, below 2^23.
                    let p = _mm512_maddubs_epi16(qj, load64(&xq[64 * r..]));
                    let v = _mm512_madd_epi16(p, _mm512_permutexvar_epi16(pick[r], sc16));
                    sum[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(v), dxr[r], sum[j]);
                }
            }
            acc[k] = _mm512_fmadd_ps(_mm512_add_ps(sum[0], sum[1]), d, acc[k]);
        }
    }
    std::array::from_fn(|k| hsum16(acc[k]) + hsum8(acc_off[k]))
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
