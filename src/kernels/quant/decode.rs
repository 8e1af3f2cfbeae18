//! The decode kernels of the int8 path (chapter 10): one weight row against one quantised
//! token, for the types of llama.cpp's q8_0 and q4_k_m files (Q8_0, Q4_K, Q6_K) and the
//! legacy 4- and 5-bit types of smaller models' files (Q4_0, Q4_1, Q5_0, Q5_1).
//! A decode step is one token, so the register tiles of `tiles` (which share a weight
//! block's unpacking between tokens) have nothing to share; what matters is the number of
//! instructions per weight byte and memory streams the prefetchers follow.
//! - Q8_0 and the legacy types walk four rows at once, each from its own quarter of the
//!   task's rows (`by_streams`): the activation loads serve four rows, and each stream
//!   runs on through consecutive rows.
//! - Q4_K and Q6_K walk one row at a time, keeping every vector in a register, and split
//!   each 256-weight block's float sum over two accumulators so the FMA latency does not
//!   serialise it. Their two- and four-row versions ran 8 % and 18 % slower
//!   (`examples/matvec_rates.rs`).
//!
//! The integer sum of each activation block equals the reference's exactly; only the f32
//! additions come in another order, so tests pin each kernel to
//! [`super::dot_row_reference`] within `4·(blocks)·ε·Σ|terms|`, as the tiles are.

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
/// once for them all; with the 512-bit rows when `wide` and the dispatch table gives `ty`
/// them on this CPU. Returns false, having done nothing, when [`has_decode`] is false.
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
    if wide && crate::kernels::dispatch::wide_decode(ty) {
        avx512::dot_rows(ty, rows, row_bytes, x, out);
    } else {
        avx2::dot_rows(ty, rows, row_bytes, x, out);
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
}

/// Whether the 512-bit decode rows can run on this CPU.
pub fn has_wide_decode() -> bool {
    avx512::available()
}

#[cfg(target_arch = "x86_64")]
mod avx2 {
    //! Integer bounds as in `tiles`: `vpmaddubsw` pairs of an unsigned weight value
    //! q ≤ 63 by |x̂| ≤ 127 are at most 16002 < 2^15 (Q8_0's sign trick, |w| ≤ 128 by x̂
    //! with w's sign, at most 32512); `vpmaddwd` by a scale ≤ 128 stays below 2^23 per lane,
    //! so every i32 converts to f32 exactly.
    use super::ActRow;
    use crate::quant::GgmlType;
    use std::arch::x86_64::*;

    /// AVX2, FMA and F16C, which every kernel here is compiled with.
    pub fn available() -> bool {
        crate::kernels::policy::cpu().avx2_fma()
    }

    /// The kernel for `ty` over each row of `rows` (shapes checked by `dot_rows`).
    pub fn dot_rows(ty: GgmlType, rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
        assert!(available(), "decode kernels: AVX2/FMA/F16C");
        // SAFETY: the CPU features were checked just above; each kernel slices its blocks
        // (bounds-checked) before every load (`load32`, `load16`, `loadf8`).
        unsafe {
            match ty {
                GgmlType::Q8_0 => rows_q8_0(rows, row_bytes, x, out),
                GgmlType::Q4_K => rows_q4_k(rows, row_bytes, x, out),
                GgmlType::Q6_K => rows_q6_k(rows, row_bytes, x, out),
                GgmlType::Q4_0 => rows_legacy::<18, 2, false, false>(rows, row_bytes, x, out),
                GgmlType::Q4_1 => rows_legacy::<20, 4, false, true>(rows, row_bytes, x, out),
                GgmlType::Q5_0 => rows_legacy::<22, 6, true, false>(rows, row_bytes, x, out),
                GgmlType::Q5_1 => rows_legacy::<24, 8, true, true>(rows, row_bytes, x, out),
                _ => panic!("decode kernels: none for {}", ty.name()),
            }
        }
    }

    /// Rows a thread walks at once ([`super::by_streams`]).
    const STREAMS: usize = 4;

    #[target_feature(enable = "avx2,fma,f16c")]
    fn rows_q8_0(rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
        super::by_streams::<STREAMS>(
            rows,
            row_bytes,
            out,
            |r, v| *v = q8_0(r, x),
            |r| q8_0([r], x)[0],
        );
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn rows_q4_k(rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
        for (o, row) in out.iter_mut().zip(rows.chunks_exact(row_bytes)) {
            *o = q4_k(row, x);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn rows_q6_k(rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
        for (o, row) in out.iter_mut().zip(rows.chunks_exact(row_bytes)) {
            *o = q6_k(row, x);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn rows_legacy<const BYTES: usize, const QS: usize, const FIVE: bool, const MIN: bool>(
        rows: &[u8],
        row_bytes: usize,
        x: ActRow,
        out: &mut [f32],
    ) {
        super::by_streams::<STREAMS>(
            rows,
            row_bytes,
            out,
            |r, v| *v = legacy::<BYTES, QS, FIVE, MIN, STREAMS>(r, x),
            |r| legacy::<BYTES, QS, FIVE, MIN, 1>([r], x)[0],
        );
    }

    /// 32 bytes at `s[..32]` (bounds-checked, then an unaligned load).
    #[inline(always)]
    fn load32<T>(s: &[T]) -> __m256i {
        assert!(std::mem::size_of_val(s) >= 32, "load32: short slice");
        // SAFETY: the slice holds at least 32 bytes (asserted); the load is unaligned,
        // and AVX is implied by the callers' target features.
        unsafe { _mm256_loadu_si256(s.as_ptr() as *const __m256i) }
    }

    /// 16 bytes at `s[..16]`.
    #[inline(always)]
    fn load16(s: &[u8]) -> __m128i {
        assert!(s.len() >= 16, "load16: short slice");
        // SAFETY: sixteen bytes are there (asserted); the load is unaligned.
        unsafe { _mm_loadu_si128(s.as_ptr() as *const __m128i) }
    }

    /// Eight f32 at `s[..8]`.
    #[inline(always)]
    fn loadf8(s: &[f32]) -> __m256 {
        assert!(s.len() >= 8, "loadf8: short slice");
        // SAFETY: eight floats are there (asserted); the load is unaligned.
        unsafe { _mm256_loadu_ps(s.as_ptr()) }
    }

    /// The little-endian f16 at `b[0..2]` widened with F16C, in all eight lanes.
    #[inline(always)]
    fn f16_splat(b: &[u8]) -> __m256 {
        let bits = u16::from_le_bytes([b[0], b[1]]);
        // SAFETY: F16C and AVX are implied by the callers' target features.
        unsafe { _mm256_cvtph_ps(_mm_set1_epi16(bits as i16)) }
    }

    /// How far ahead of the block being read the kernels ask for weights: one row walk is
    /// a single sequential stream, which the hardware prefetchers alone do not keep at
    /// full rate; of 0.5–4 KiB, 2 KiB ahead read an LM-head-sized matrix fastest
    /// (`big_timing`).
    pub(super) const AHEAD: usize = 2048;

    /// Asks for the cache lines of `bytes` bytes at [`AHEAD`] bytes past `p` (a hint: the
    /// address may lie past the matrix, which a prefetch never faults on).
    #[inline(always)]
    pub(super) fn prefetch(p: *const u8, bytes: usize) {
        let ahead = AHEAD;
        let mut k = 0;
        while k < bytes {
            // SAFETY: a prefetch is a hint that never faults, whatever the address;
            // `wrapping_add` computes it without asserting it is in bounds.
            unsafe { _mm_prefetch::<_MM_HINT_T0>(p.wrapping_add(ahead + k) as *const i8) };
            k += 64;
        }
    }

    /// The eight lanes summed (pairwise).
    #[target_feature(enable = "avx2,fma,f16c")]
    fn hsum(v: __m256) -> f32 {
        let s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
        let s = _mm_add_ps(s, _mm_movehl_ps(s, s));
        let s = _mm_add_ss(s, _mm_movehdup_ps(s));
        _mm_cvtss_f32(s)
    }

    /// Q4_0, Q4_1, Q5_0, Q5_1: blocks of `BYTES` bytes, `d` first, the 16 bytes of packed
    /// nibbles at `QS` (low nibbles the first 16 weights), the 32 fifth bits just before
    /// them when `FIVE`, a minimum `m` at byte 2 when `MIN`. Without a minimum the weights
    /// are signed, `q − 8` or `q − 16`, and each block adds `d·dx·Σ w·x̂`; with one they are
    /// `d·q + m` and each block adds `d·dx·Σ q·x̂ + m·(dx·Σ x̂)`, the bracket being the
    /// activation block's `dsums`. `R` rows at once.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn legacy<
        const BYTES: usize,
        const QS: usize,
        const FIVE: bool,
        const MIN: bool,
        const R: usize,
    >(
        rows: [&[u8]; R],
        x: ActRow,
    ) -> [f32; R] {
        let ones = _mm256_set1_epi16(1);
        let m4 = _mm_set1_epi8(0x0f);
        let offset = _mm256_set1_epi8(if FIVE { 16 } else { 8 });
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc_min = [0.0f32; R];
        let blocks = rows.map(|r| r.as_chunks::<BYTES>().0);
        let xs = x.qs.as_chunks::<32>().0.iter().zip(x.d.iter().zip(x.dsums));
        for (b, (xq, (&dx, &dsum))) in xs.enumerate() {
            let xv = load32(xq);
            for k in 0..R {
                let blk = &blocks[k][b];
                if b % 2 == 0 {
                    prefetch(blk.as_ptr(), 2 * BYTES);
                }
                let packed = load16(&blk[QS..]);
                let lo = _mm_and_si128(packed, m4);
                let hi = _mm_and_si128(_mm_srli_epi16(packed, 4), m4);
                let mut q = _mm256_set_m128i(hi, lo);
                if FIVE {
                    let qh =
                        u32::from_le_bytes([blk[QS - 4], blk[QS - 3], blk[QS - 2], blk[QS - 1]]);
                    q = _mm256_or_si256(q, super::super::avx2::fifth_bits(qh));
                }
                let pairs = if MIN {
                    // q ≤ 31 unsigned: pairs at most 2·31·127 = 7874.
                    _mm256_maddubs_epi16(q, xv)
                } else {
                    // |w| ≤ 16, moved onto x̂'s sign: pairs at most 2·16·127 = 4064.
                    let w = _mm256_sub_epi8(q, offset);
                    _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w))
                };
                let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                // d (and m) widened together by F16C: [d, m, 0, 0].
                let dm = _mm_cvtph_ps(_mm_cvtsi32_si128(i32::from_le_bytes([
                    blk[0], blk[1], blk[2], blk[3],
                ])));
                let scale = _mm256_set1_ps(_mm_cvtss_f32(dm) * dx);
                acc[k] = _mm256_fmadd_ps(s, scale, acc[k]);
                if MIN {
                    acc_min[k] += _mm_cvtss_f32(_mm_movehdup_ps(dm)) * dsum;
                }
            }
        }
        std::array::from_fn(|k| hsum(acc[k]) + acc_min[k])
    }

    /// Q8_0: per block `dw · [dx₀ ×4, dx₁ ×4] · Σ w·x̂` (lanes 0..4 of `vpmaddwd` hold
    /// the first 16 values' products, 4..8 the last 16's). `R` rows at once.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn q8_0<const R: usize>(rows: [&[u8]; R], x: ActRow) -> [f32; R] {
        let ones = _mm256_set1_epi16(1);
        let halves = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
        let mut acc = [_mm256_setzero_ps(); R];
        // Fixed-size chunks, so the compiler sees every slice's length.
        let blocks = rows.map(|r| r.as_chunks::<34>().0);
        let xs = x.qs.as_chunks::<32>().0.iter().zip(x.d.as_chunks::<2>().0);
        for (b, (xq, d)) in xs.enumerate() {
            let xv = load32(xq);
            // SAFETY: `d` holds two f32, the 8 bytes `_mm_loadl_epi64` reads (unaligned).
            let pair = unsafe { _mm_loadl_epi64(d.as_ptr() as *const __m128i) };
            // The block's two activation steps, [d₀ ×4, d₁ ×4].
            let dx =
                _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_castsi128_ps(pair)), halves);
            for k in 0..R {
                let blk = &blocks[k][b];
                if b % 2 == 0 {
                    prefetch(blk.as_ptr(), 68);
                }
                let w = load32(&blk[2..]);
                let p = _mm256_maddubs_epi16(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
                let s = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                acc[k] = _mm256_fmadd_ps(s, _mm256_mul_ps(f16_splat(blk), dx), acc[k]);
            }
        }
        std::array::from_fn(|k| hsum(acc[k]))
    }

    /// Q4_K: per 32-weight sub-block `s` (activation block `j`), `(sc_s·dx_j)·Σ q·x̂q`
    /// summed over the 256-weight block, times `d`; minus `dmin·Σ_s m_s·dx_j·Σx̂q`, one
    /// 8-lane product with the token's `dsums`. The eight `sc_s·dx_j` are one 8-lane
    /// product per block, read back one by one as broadcasts (loads, not shuffles).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn q4_k(row: &[u8], x: ActRow) -> f32 {
        let m4 = _mm256_set1_epi8(0x0f);
        let ones = _mm256_set1_epi16(1);
        let mut acc = _mm256_setzero_ps();
        let mut scdx = [0.0f32; 8];
        let blocks = row.as_chunks::<144>().0.iter();
        let xs = x.qs.as_chunks::<256>().0.iter();
        let steps =
            x.d.as_chunks::<8>()
                .0
                .iter()
                .zip(x.dsums.as_chunks::<8>().0);
        for ((blk, xq), (dx, dsums)) in blocks.zip(xs).zip(steps) {
            prefetch(blk.as_ptr(), 144);
            let (scales, mins) = super::super::unpack_scale_min_k4(&blk[4..16]);
            let sc = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(scales as i64)));
            let dx = loadf8(dx);
            // SAFETY: `scdx` is eight f32 (the unaligned store writes exactly those).
            unsafe { _mm256_storeu_ps(scdx.as_mut_ptr(), _mm256_mul_ps(sc, dx)) };
            let m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(mins as i64)));
            let mins = _mm256_mul_ps(m, f16_splat(&blk[2..]));
            acc = _mm256_fnmadd_ps(mins, loadf8(dsums), acc);
            let (mut even, mut odd) = (_mm256_setzero_ps(), _mm256_setzero_ps());
            for c in 0..4 {
                let q = load32(&blk[16 + 32 * c..]);
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                let s = 2 * c;
                // Pairs of q·x: at most 2·15·127 = 3810, well inside i16.
                let p = _mm256_maddubs_epi16(lo, load32(&xq[32 * s..]));
                let v = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                even = _mm256_fmadd_ps(v, _mm256_set1_ps(scdx[s]), even);
                let p = _mm256_maddubs_epi16(hi, load32(&xq[32 * s + 32..]));
                let v = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, ones));
                odd = _mm256_fmadd_ps(v, _mm256_set1_ps(scdx[s + 1]), odd);
            }
            acc = _mm256_fmadd_ps(_mm256_add_ps(even, odd), f16_splat(blk), acc);
        }
        hsum(acc)
    }

    /// Q6_K (as the tiles): per activation block `j` (16-weight sub-blocks `2j`, `2j + 1`),
    /// `d·dx_j·(Σ_s sc_s·Σ q·x̂q − 32·Σ_s sc_s·Σx̂q)`; the second sum for the 8 blocks of
    /// 256 weights at once, `vpmaddwd` of the 16 scales by the 16 per-16 sums.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn q6_k(row: &[u8], x: ActRow) -> f32 {
        let (m4, m2) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
        let pair = _mm_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
        let mut acc = _mm256_setzero_ps();
        let blocks = row.as_chunks::<210>().0.iter();
        let xs = x.qs.as_chunks::<256>().0.iter();
        let steps =
            x.d.as_chunks::<8>()
                .0
                .iter()
                .zip(x.sums.as_chunks::<16>().0);
        for ((blk, xq), (dx, sums)) in blocks.zip(xs).zip(steps) {
            prefetch(blk.as_ptr(), 210);
            let raw = load16(&blk[192..208]);
            // Lane j: sc_2j·Σx̂q(2j) + sc_2j+1·Σx̂q(2j+1), at most 2·128·2032.
            let sums = load32(sums);
            let off = _mm256_cvtepi32_ps(_mm256_madd_epi16(_mm256_cvtepi8_epi16(raw), sums));
            let mut even = _mm256_mul_ps(_mm256_mul_ps(off, loadf8(dx)), _mm256_set1_ps(-32.0));
            let mut odd = _mm256_setzero_ps();
            for h in 0..2 {
                let l0 = load32(&blk[64 * h..]);
                let l1 = load32(&blk[64 * h + 32..]);
                let hb = load32(&blk[128 + 32 * h..]);
                // The four 32-weight runs k of this half: low nibble and two high bits.
                let q = [
                    _mm256_or_si256(
                        _mm256_and_si256(l0, m4),
                        _mm256_and_si256(_mm256_slli_epi16(hb, 4), m2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(l1, m4),
                        _mm256_and_si256(_mm256_slli_epi16(hb, 2), m2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(l0, 4), m4),
                        _mm256_and_si256(hb, m2),
                    ),
                    _mm256_or_si256(
                        _mm256_and_si256(_mm256_srli_epi16(l1, 4), m4),
                        _mm256_and_si256(_mm256_srli_epi16(hb, 2), m2),
                    ),
                ];
                for (k, &qk) in q.iter().enumerate() {
                    let j8 = 4 * h + k;
                    // [sc_2j8 ×8, sc_2j8+1 ×8] as i16: one byte shuffle, then widened.
                    let pick = _mm_add_epi8(pair, _mm_set1_epi8(2 * j8 as i8));
                    let sc = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(raw, pick));
                    let p = _mm256_maddubs_epi16(qk, load32(&xq[32 * j8..]));
                    let v = _mm256_cvtepi32_ps(_mm256_madd_epi16(p, sc));
                    let dxj = _mm256_set1_ps(dx[j8]);
                    if k % 2 == 0 {
                        even = _mm256_fmadd_ps(v, dxj, even);
                    } else {
                        odd = _mm256_fmadd_ps(v, dxj, odd);
                    }
                }
            }
            acc = _mm256_fmadd_ps(_mm256_add_ps(even, odd), f16_splat(&blk[208..]), acc);
        }
        hsum(acc)
    }
}

#[cfg(not(target_arch = "x86_64"))]
mod avx2 {
    use super::ActRow;
    use crate::quant::GgmlType;
    /// No AVX2 here: the per-row reference runs.
    pub fn available() -> bool {
        false
    }
    pub fn dot_rows(_: GgmlType, _: &[u8], _: usize, _: ActRow, _: &mut [f32]) {
        unreachable!("decode kernels: not on this CPU")
    }
}

#[cfg(test)]
mod tests {
    use super::super::{QuantizedRows, activation_block, dot_row_reference};
    use super::*;
    use crate::quant::{dequantize, quantize};

    const DECODE_TYPES: [GgmlType; 7] = [
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
    ];

    /// Every type the table gives decode rows is in the tests' list.
    #[test]
    fn every_decode_type_is_tested() {
        for ty in crate::quant::ALL_TYPES {
            if crate::kernels::dispatch::kernels(ty).avx2_decode_rows {
                assert!(DECODE_TYPES.contains(&ty), "{}", ty.name());
            }
        }
    }

    /// The kernel widths `ty` has here: the AVX2 rows, and the 512-bit ones if the table
    /// gives them to `ty` and the CPU has them.
    fn widths(ty: GgmlType) -> Vec<bool> {
        let wide = crate::kernels::dispatch::wide_decode(ty) && has_wide_decode();
        if wide { vec![false, true] } else { vec![false] }
    }

    fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
        let mut s = seed.wrapping_mul(2654435761).wrapping_add(77);
        (0..n)
            .map(|i| {
                s ^= s << 13;
                s ^= s >> 17;
                s ^= s << 5;
                let u = s as f32 / u32::MAX as f32 - 0.5;
                if i % 83 == 5 {
                    9.0 * u * scale
                } else {
                    u * scale
                }
            })
            .collect()
    }

    /// Each decode kernel equals the reference row dot within the f32 re-association
    /// bound (the integer block sums are the same), over several rows and lengths (nine
    /// rows: the 512-bit rows' interleaved runs and their remainder; for the 32-weight
    /// types also an odd number of blocks).
    #[test]
    fn decode_kernels_equal_the_reference_dots() {
        const ROWS: usize = 9;
        for ty in DECODE_TYPES {
            if !has_decode(ty) {
                continue;
            }
            // 800 columns: an odd count of 32-weight blocks (Q8_0's 512-bit rows pair them).
            let odd = (ty.block_size() == 32).then_some((5u32, 800usize));
            for (seed, cols) in [(1u32, 256usize), (2, 768), (3, 2048), (4, 4096)]
                .into_iter()
                .chain(odd)
            {
                let w = values(ROWS * cols, seed, 0.3);
                let mut bytes = Vec::new();
                quantize(ty, &w, &mut bytes);
                let rb = bytes.len() / ROWS;
                let xs = values(cols, seed + 40, 2.0);
                let mut acts = QuantizedRows::default();
                acts.quantize(&xs, cols, activation_block(ty).unwrap());
                let mut wd = vec![0.0f32; w.len()];
                dequantize(ty, &bytes, &mut wd);
                let xd = acts.dequantize_row(0);
                for wide in widths(ty) {
                    let mut got = [0.0f32; ROWS];
                    assert!(dot_rows(ty, &bytes, rb, acts.row(0), &mut got, wide));
                    for (i, got) in got.into_iter().enumerate() {
                        let row = &bytes[i * rb..][..rb];
                        let want = dot_row_reference(ty, row, acts.row(0));
                        let mag: f32 = wd[i * cols..(i + 1) * cols]
                            .iter()
                            .zip(&xd)
                            .map(|(a, b)| (a * b).abs())
                            .sum();
                        let tol = 4.0 * (cols / 32) as f32 * f32::EPSILON * mag;
                        assert!(
                            (got - want).abs() <= tol,
                            "{} wide {wide} cols {cols} row {i}: {got} vs {want} (tol {tol})",
                            ty.name()
                        );
                    }
                }
            }
        }
    }

    #[test]
    fn a_non_finite_activation_gives_nan() {
        for ty in DECODE_TYPES {
            if !has_decode(ty) {
                continue;
            }
            let w = values(512, 1, 0.3);
            let mut bytes = Vec::new();
            quantize(ty, &w, &mut bytes);
            let mut x = values(512, 2, 1.0);
            x[300] = f32::INFINITY;
            let mut acts = QuantizedRows::default();
            acts.quantize(&x, 512, activation_block(ty).unwrap());
            for wide in widths(ty) {
                let mut got = [0.0f32];
                assert!(dot_rows(
                    ty,
                    &bytes,
                    bytes.len(),
                    acts.row(0),
                    &mut got,
                    wide
                ));
                assert!(got[0].is_nan(), "{} wide {wide}", ty.name());
            }
        }
    }
}
