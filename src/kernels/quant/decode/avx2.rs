//! The 256-bit decode rows of every decode type (AVX2, FMA and F16C; with 256-bit
//! `vpdpbusd` and AVX-512 BW's byte masks where AVX-512 VNNI is on).
//!
//! Integer bounds as in `tiles`: `vpmaddubsw` pairs of an unsigned weight value
//! q ≤ 63 by |x̂| ≤ 127 are at most 16002 < 2^15 (Q8_0's sign trick, |w| ≤ 128 by x̂
//! with w's sign, at most 32512); `vpmaddwd` by a scale ≤ 128 stays below 2^23 per lane.
use super::ActRow;
use crate::kernels::x86::{hsum4, hsum8};
use crate::quant::GgmlType;
use std::arch::x86_64::*;

/// AVX2, FMA and F16C, which every kernel here is compiled with.
pub fn available() -> bool {
    crate::kernels::policy::cpu().avx2_fma()
}

/// The kernel for `ty` over each row of `rows` (shapes checked by `dot_rows`); with
/// `vnni`, the K and legacy types sum their products by 256-bit `vpdpbusd` (the same
/// integers).
pub fn dot_rows(
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    x: ActRow,
    out: &mut [f32],
    vnni: bool,
) {
    assert!(available(), "decode kernels: AVX2/FMA/F16C");
    let vnni = vnni && crate::kernels::policy::cpu().vnni();
    // SAFETY: the CPU features were checked just above; each kernel slices its blocks
    // (bounds-checked) before every load (`load32`, `load16`, `loadf8`).
    unsafe {
        match ty {
            GgmlType::Q8_0 if vnni => rows_q8_0_vnni(rows, row_bytes, x, out),
            GgmlType::Q8_0 => rows_q8_0(rows, row_bytes, x, out),
            GgmlType::Q4_K if vnni => rows_q4_k_vnni(rows, row_bytes, x, out),
            GgmlType::Q6_K if vnni => rows_q6_k_vnni(rows, row_bytes, x, out),
            GgmlType::Q4_K => rows_q4_k(rows, row_bytes, x, out),
            GgmlType::Q6_K => rows_q6_k(rows, row_bytes, x, out),
            GgmlType::Q4_0 if vnni => {
                rows_legacy_vnni::<18, 2, false, false>(rows, row_bytes, x, out)
            }
            GgmlType::Q4_1 if vnni => {
                rows_legacy_vnni::<20, 4, false, true>(rows, row_bytes, x, out)
            }
            GgmlType::Q5_0 if vnni => {
                rows_legacy_vnni::<22, 6, true, false>(rows, row_bytes, x, out)
            }
            GgmlType::Q5_1 if vnni => {
                rows_legacy_vnni::<24, 8, true, true>(rows, row_bytes, x, out)
            }
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

/// The rows of Q8_0, products summed by [`quads`] with or without `vpdpbusd`,
/// compiled for the features that form needs.
macro_rules! q8_0_rows {
    ($name:ident, $vnni:literal, $features:literal) => {
        #[target_feature(enable = $features)]
        fn $name(rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
            // SAFETY: this function is compiled with the features `q8_0::<$vnni>`
            // needs, and `dot_rows` calls it only where the CPU has them.
            super::by_streams::<STREAMS>(
                rows,
                row_bytes,
                out,
                |r, v| *v = unsafe { q8_0::<$vnni>(r, x) },
                // The last rows of a task (rows % 4), rare: one row in all four places.
                |r| unsafe { q8_0::<$vnni>([r; STREAMS], x) }[0],
            );
        }
    };
}
q8_0_rows!(rows_q8_0, false, "avx2,fma,f16c");
q8_0_rows!(
    rows_q8_0_vnni,
    true,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"
);

/// Rows of a K type a thread takes in turn, each from its own part of the task.
const K_STREAMS: usize = 2;

/// The rows of a K type (`$kernel`, Q4_K or Q6_K), products summed by [`quads`] with
/// or without `vpdpbusd`, compiled for the features that form needs (so the kernels,
/// which take the caller's, inline into it).
macro_rules! k_rows {
    ($name:ident, $kernel:ident, $vnni:literal, $features:literal) => {
        #[target_feature(enable = $features)]
        fn $name(rows: &[u8], row_bytes: usize, x: ActRow, out: &mut [f32]) {
            // SAFETY: this function is compiled with the features `$kernel::<$vnni>`
            // needs, and `dot_rows` calls it only where the CPU has them.
            let dot = |r: &[u8]| unsafe { $kernel::<$vnni>(r, x) };
            super::by_streams::<K_STREAMS>(rows, row_bytes, out, |r, v| *v = r.map(dot), dot);
        }
    };
}
k_rows!(rows_q4_k, q4_k, false, "avx2,fma,f16c");
k_rows!(rows_q6_k, q6_k, false, "avx2,fma,f16c");
k_rows!(
    rows_q4_k_vnni,
    q4_k,
    true,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"
);
k_rows!(
    rows_q6_k_vnni,
    q6_k,
    true,
    "avx2,fma,f16c,avx512f,avx512vl,avx512vnni"
);

/// Lane `i`: `Σ_{j<4} q[4i + j]·x[4i + j]` (`q` unsigned, `x` signed bytes), by
/// `vpdpbusd` with `VNNI`, else by `vpmaddubsw` then `vpmaddwd` against ones; the same
/// integers while the pairs fit in 16 bits (`vpmaddubsw` saturates), which the callers'
/// bounds give.
///
/// # Safety
/// The CPU has AVX2, and AVX-512 VL and VNNI if `VNNI`.
#[inline(always)]
unsafe fn quads<const VNNI: bool>(q: __m256i, x: __m256i) -> __m256i {
    // SAFETY: the features, by this function's contract.
    unsafe {
        if VNNI {
            _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, x)
        } else {
            _mm256_madd_epi16(_mm256_maddubs_epi16(q, x), _mm256_set1_epi16(1))
        }
    }
}

/// `quads::<VNNI>(a, b) + quads::<VNNI>(c, d)`: with `VNNI` two chained `vpdpbusd`,
/// else the two `vpmaddubsw` added as i16 before one `vpmaddwd` (exact while each
/// i16 sum fits, which the callers' bounds give).
///
/// # Safety
/// As [`quads`].
#[inline(always)]
unsafe fn quads2<const VNNI: bool>(a: __m256i, b: __m256i, c: __m256i, d: __m256i) -> __m256i {
    // SAFETY: the features, by this function's contract.
    unsafe {
        if VNNI {
            _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), a, b), c, d)
        } else {
            let pairs = _mm256_add_epi16(_mm256_maddubs_epi16(a, b), _mm256_maddubs_epi16(c, d));
            _mm256_madd_epi16(pairs, _mm256_set1_epi16(1))
        }
    }
}

/// The rows of a legacy type (Q4_0, Q4_1, Q5_0, Q5_1), [`STREAMS`] at a time, their
/// products summed by [`quads2`] with or without `vpdpbusd`, compiled for the
/// features that form needs.
macro_rules! legacy_rows {
    ($name:ident, $vnni:literal, $features:literal) => {
        #[target_feature(enable = $features)]
        fn $name<const BYTES: usize, const QS: usize, const FIVE: bool, const MIN: bool>(
            rows: &[u8],
            row_bytes: usize,
            x: ActRow,
            out: &mut [f32],
        ) {
            // SAFETY: this function is compiled with the features `legacy::<…, $vnni>`
            // needs, and `dot_rows` calls it only where the CPU has them.
            super::by_streams::<STREAMS>(
                rows,
                row_bytes,
                out,
                |r, v| *v = unsafe { legacy::<BYTES, QS, FIVE, MIN, STREAMS, $vnni>(r, x) },
                |r| unsafe { legacy::<BYTES, QS, FIVE, MIN, 2, $vnni>([r, r], x) }[0],
            );
        }
    };
}
legacy_rows!(rows_legacy, false, "avx2,fma,f16c");
legacy_rows!(
    rows_legacy_vnni,
    true,
    "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni"
);

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
fn load16<T>(s: &[T]) -> __m128i {
    assert!(std::mem::size_of_val(s) >= 16, "load16: short slice");
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
    crate::kernels::x86::prefetch_lines(p.wrapping_add(AHEAD), bytes);
}

/// Q4_0, Q4_1, Q5_0, Q5_1: blocks of `BYTES` bytes, `d` first, the 16 bytes of packed
/// nibbles at `QS` (low nibbles the first 16 weights), the 32 fifth bits just before
/// them when `FIVE`, a minimum `m` at byte 2 when `MIN`. Without a minimum the weights
/// are `q − c` (c = 8 or 16), and each block adds `d·dx·Σ (q − c)·x̂`; with one they are
/// `d·q + m` and each block adds `d·dx·Σ q·x̂ + m·(dx·Σ x̂)`, the bracket being the
/// activation block's `dsums`. `R` rows at once (an even number), two to a register:
/// a block's 16 packed bytes fill half a register, so rows `2p` and `2p + 1` share
/// the unpacking, the multiplies and the scaling, each owning four of the eight lanes.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (and AVX-512 VL and VNNI if `VNNI`); the caller is
/// compiled with them, so this inlines into it.
#[inline(always)]
unsafe fn legacy<
    const BYTES: usize,
    const QS: usize,
    const FIVE: bool,
    const MIN: bool,
    const R: usize,
    const VNNI: bool,
>(
    rows: [&[u8]; R],
    x: ActRow,
) -> [f32; R] {
    const { assert!(R.is_multiple_of(2), "legacy decode rows come in pairs") };
    // SAFETY: the features, by this function's contract; every load is bounds-checked.
    unsafe {
        // Lane 0 of a pair's [d₀, m₀, d₁, m₁] for the first row's four lanes, lane 2 for
        // the second's.
        let spread = _mm256_setr_epi32(0, 0, 0, 0, 2, 2, 2, 2);
        let mut acc = [_mm256_setzero_ps(); R];
        let mut acc_min = [_mm_setzero_ps(); R];
        let blocks = rows.map(|r| r.as_chunks::<BYTES>().0);
        let xs = x.qs.as_chunks::<32>().0.iter().zip(x.d.iter().zip(x.dsums));
        for (b, (xq, (&dx, &dsum))) in xs.enumerate() {
            // The first and the last 16 activations, each in both halves.
            let x_lo = _mm256_broadcastsi128_si256(load16(&xq[..16]));
            let x_hi = _mm256_broadcastsi128_si256(load16(&xq[16..]));
            // The weights come unsigned, q ≤ 31; for a type without a minimum each lane
            // starts from −c·Σx̂ over its four activations of each half (c = 8 or 16, the
            // same for every row), so the lanes hold Σ (q − c)·x̂, the signed integers.
            let offset = if MIN {
                _mm256_setzero_si256()
            } else {
                let c = _mm256_set1_epi8(if FIVE { 16 } else { 8 });
                _mm256_sub_epi32(_mm256_setzero_si256(), quads2::<VNNI>(c, x_lo, c, x_hi))
            };
            let dx_dsum = _mm_setr_ps(dx, dsum, dx, dsum);
            for p in 0..R / 2 {
                let (ba, bb) = (&blocks[2 * p][b], &blocks[2 * p + 1][b]);
                if b % 2 == 0 {
                    prefetch(ba.as_ptr(), 2 * BYTES);
                    prefetch(bb.as_ptr(), 2 * BYTES);
                }
                let (lo, hi) = legacy_weights::<BYTES, QS, FIVE, MIN, VNNI>(ba, bb);
                let sums = if VNNI {
                    _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(offset, lo, x_lo), hi, x_hi)
                } else {
                    // q ≤ 31 by |x̂| ≤ 128: each i16 sum at most 2·(2·31·128) = 15872.
                    _mm256_add_epi32(quads2::<false>(lo, x_lo, hi, x_hi), offset)
                };
                let s = _mm256_cvtepi32_ps(sums);
                // Both rows' d (and m) widened together by F16C: [d₀, m₀, d₁, m₁] (without a
                // minimum, lanes 1 and 3 hold packed bytes, never read).
                let word = |blk: &[u8; BYTES]| i32::from_le_bytes([blk[0], blk[1], blk[2], blk[3]]);
                let dm = _mm_cvtph_ps(_mm_setr_epi32(word(ba), word(bb), 0, 0));
                let scaled = _mm_mul_ps(dm, dx_dsum);
                let scale = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(scaled), spread);
                acc[p] = _mm256_fmadd_ps(s, scale, acc[p]);
                if MIN {
                    acc_min[p] = _mm_add_ps(acc_min[p], scaled);
                }
            }
        }
        std::array::from_fn(|k| pair_sum::<MIN>(acc[k / 2], acc_min[k / 2], k % 2))
    }
}

/// The weights of one block of rows `a` and `b` as bytes, the first 16 of both blocks
/// (block `a`'s in the low half) and their last 16, unsigned `q` (the caller subtracts
/// `c·Σx̂` for a type without a minimum). With `VNNI` (so AVX-512 BW), the fifth bits
/// go in as a 32-bit mask, one masked add a register, where AVX2 expands them to bytes
/// first.
///
/// # Safety
/// As [`legacy`].
#[inline(always)]
unsafe fn legacy_weights<
    const BYTES: usize,
    const QS: usize,
    const FIVE: bool,
    const MIN: bool,
    const VNNI: bool,
>(
    a: &[u8; BYTES],
    b: &[u8; BYTES],
) -> (__m256i, __m256i) {
    // SAFETY: the features, by this function's contract; the loads are bounds-checked.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let packed = _mm256_set_m128i(load16(&b[QS..]), load16(&a[QS..]));
        let lo = _mm256_and_si256(packed, m4);
        let hi = _mm256_and_si256(_mm256_srli_epi16(packed, 4), m4);
        if FIVE {
            let qh = |blk: &[u8; BYTES]| {
                u32::from_le_bytes([blk[QS - 4], blk[QS - 3], blk[QS - 2], blk[QS - 1]])
            };
            let (qa, qb) = (qh(a), qh(b));
            if VNNI {
                // Weight j's fifth bit is bit j: the low nibbles are weights 0..16 of
                // both blocks, the high ones 16..32.
                let set_lo = (qa & 0xffff) | (qb << 16);
                let set_hi = (qa >> 16) | (qb & 0xffff_0000);
                let sixteen = _mm256_set1_epi8(16);
                return (
                    _mm256_mask_add_epi8(lo, set_lo, lo, sixteen),
                    _mm256_mask_add_epi8(hi, set_hi, hi, sixteen),
                );
            }
            let (set_lo, set_hi) = fifth_bits_pair(qa, qb);
            let sixteen = _mm256_set1_epi8(16);
            let (bits_lo, bits_hi) = (
                _mm256_and_si256(set_lo, sixteen),
                _mm256_and_si256(set_hi, sixteen),
            );
            (_mm256_or_si256(lo, bits_lo), _mm256_or_si256(hi, bits_hi))
        } else {
            (lo, hi)
        }
    }
}

/// Row `half` (0 or 1) of a pair's sums: its four lanes of `acc`, plus, with a minimum,
/// its `m·dsum` (lane 1 of `acc_min` for the first row, lane 3 for the second).
#[target_feature(enable = "avx2")]
#[inline]
fn pair_sum<const MIN: bool>(acc: __m256, acc_min: __m128, half: usize) -> f32 {
    let four = if half == 0 {
        _mm256_castps256_ps128(acc)
    } else {
        _mm256_extractf128_ps(acc, 1)
    };
    let min = match (MIN, half) {
        (false, _) => 0.0,
        (true, 0) => _mm_cvtss_f32(_mm_movehdup_ps(acc_min)),
        (true, _) => _mm_cvtss_f32(_mm_shuffle_ps(acc_min, acc_min, 3)),
    };
    hsum4(four) + min
}

/// The fifth bits of two blocks, as byte masks (0xFF where set): the first 16 weights
/// of both blocks (block `a`'s in the low half) and their last 16.
#[target_feature(enable = "avx2")]
#[inline]
fn fifth_bits_pair(a: u32, b: u32) -> (__m256i, __m256i) {
    let v = _mm256_setr_epi32(a as i32, 0, 0, 0, b as i32, 0, 0, 0);
    let which_lo = _mm256_setr_epi8(
        0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1,
        1, 1,
    );
    let which_hi = _mm256_add_epi8(which_lo, _mm256_set1_epi8(2));
    let bit = _mm256_set1_epi64x(0x8040_2010_0804_0201u64 as i64);
    let expand =
        |which| _mm256_cmpeq_epi8(_mm256_and_si256(_mm256_shuffle_epi8(v, which), bit), bit);
    (expand(which_lo), expand(which_hi))
}

/// Q8_0: per block `dw · [dx₀ ×4, dx₁ ×4] · Σ w·x̂` (lanes 0..4 of the [`quads`] hold
/// the first 16 values' products, 4..8 the last 16's), four rows at once. The four
/// rows' `dw` are widened by one F16C conversion and multiplied by both activation
/// steps in one register, `[dw₀..₃·dx₀, dw₀..₃·dx₁]`, from which one permutation a row
/// spreads its own pair (instead of a conversion, a broadcast and a product per row).
/// Even and odd blocks have accumulators of their own, added at the end: the lanes,
/// products and order of the 512-bit rows (`decode/avx512.rs`, which hold an even
/// block in their low half and the next in their high one), so both give the same bits.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (and AVX-512 VL and VNNI if `VNNI`); the caller is
/// compiled with them, so this inlines into it.
#[inline(always)]
unsafe fn q8_0<const VNNI: bool>(rows: [&[u8]; 4], x: ActRow) -> [f32; 4] {
    // SAFETY: the features, by this function's contract; every load is bounds-checked.
    unsafe {
        // acc[0][k] sums row k's even blocks, acc[1][k] its odd ones.
        let mut acc = [[_mm256_setzero_ps(); 4]; 2];
        // Two blocks a chunk, every slice cut to the same length, so the compiler sees
        // each index is in bounds.
        let (xs, x_last) = x.qs.as_chunks::<64>();
        let pairs = xs.len();
        let ds = &x.d.as_chunks::<4>().0[..pairs];
        let blocks = rows.map(|r| &r.as_chunks::<68>().0[..pairs]);
        for p in 0..pairs {
            let [d_even, d_odd] = [0, 2].map(|h| ds[p][h..h + 2].try_into().unwrap());
            let half = |h: usize| {
                std::array::from_fn(|k| blocks[k][p][34 * h..][..34].try_into().unwrap())
            };
            let [x_even, x_odd] = [0, 32].map(|h| xs[p][h..h + 32].try_into().unwrap());
            q8_0_block::<VNNI>(half(0), x_even, d_even, &mut acc[0]);
            q8_0_block::<VNNI>(half(1), x_odd, d_odd, &mut acc[1]);
        }
        if !x_last.is_empty() {
            // An odd count of blocks: the last is an even one.
            let b = 2 * pairs;
            let blk = std::array::from_fn(|k| &rows[k].as_chunks::<34>().0[b]);
            let (xq, d) = (&x.qs.as_chunks::<32>().0[b], &x.d.as_chunks::<2>().0[b]);
            q8_0_block::<VNNI>(blk, xq, d, &mut acc[0]);
        }
        let [even, odd] = acc;
        std::array::from_fn(|k| hsum8(_mm256_add_ps(even[k], odd[k])))
    }
}

/// One block of [`q8_0`]'s four rows against activations `xq` (steps `d`), into `acc`.
///
/// # Safety
/// As [`q8_0`].
#[inline(always)]
unsafe fn q8_0_block<const VNNI: bool>(
    blk: [&[u8; 34]; 4],
    xq: &[i8; 32],
    d: &[f32; 2],
    acc: &mut [__m256; 4],
) {
    // SAFETY: the features, by this function's contract; `d` holds two f32, the 8
    // bytes `_mm_loadl_epi64` reads (unaligned).
    unsafe {
        let xv = load32(xq);
        let pair = _mm_loadl_epi64(d.as_ptr() as *const __m128i);
        // The block's two activation steps, [d₀ ×4, d₁ ×4].
        let halves = _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1);
        let dx = _mm256_permutevar8x32_ps(_mm256_castps128_ps256(_mm_castsi128_ps(pair)), halves);
        let dw = blk.map(|b| u16::from_le_bytes([b[0], b[1]]) as u64);
        let dw = _mm_cvtph_ps(_mm_cvtsi64_si128(
            (dw[0] | dw[1] << 16 | dw[2] << 32 | dw[3] << 48) as i64,
        ));
        let scales = _mm256_mul_ps(_mm256_set_m128(dw, dw), dx);
        for k in 0..4 {
            prefetch(blk[k].as_ptr(), 34);
            let w = load32(&blk[k][2..]);
            // |w| (−128 reads as 128) by x̂ carrying w's sign: pairs ≤ 2·128·127.
            let s = quads::<VNNI>(_mm256_sign_epi8(w, w), _mm256_sign_epi8(xv, w));
            let spread = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
            let spread = _mm256_add_epi32(spread, _mm256_set1_epi32(k as i32));
            let scale = _mm256_permutevar8x32_ps(scales, spread);
            acc[k] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), scale, acc[k]);
        }
    }
}

/// Q4_K: lane `s` of the row's accumulator collects sub-block `s` of every 256-weight
/// block: `(d·sc_s·dx_s)·Σ q·x̂` minus `(dmin·m_s)·(dx_s·Σx̂)`, the second factor being
/// the token's `dsums`. Each sub-block's integer sum reaches its lane through three
/// rounds of pairwise adds (see [`sub_block_sums`]), so a block costs one conversion
/// and two FMAs however many sub-blocks it has, and the lanes are added once per row.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (and AVX-512 VL and VNNI if `VNNI`); the caller is
/// compiled with them, so this inlines into it.
#[inline(always)]
unsafe fn q4_k<const VNNI: bool>(row: &[u8], x: ActRow) -> f32 {
    // SAFETY: the features, by this function's contract; every load is bounds-checked.
    unsafe {
        let m4 = _mm256_set1_epi8(0x0f);
        let (mut acc, mut acc_min) = (_mm256_setzero_ps(), _mm256_setzero_ps());
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
            let m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_cvtsi64_si128(mins as i64)));
            let mut e = [_mm256_setzero_si256(); 8];
            for c in 0..4 {
                let q = load32(&blk[16 + 32 * c..]);
                let lo = _mm256_and_si256(q, m4);
                let hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
                // Pairs of q·x (what `vpmaddubsw` holds): at most 2·15·127 = 3810.
                e[2 * c] = quads::<VNNI>(lo, load32(&xq[64 * c..]));
                e[2 * c + 1] = quads::<VNNI>(hi, load32(&xq[64 * c + 32..]));
            }
            let step = _mm256_mul_ps(_mm256_mul_ps(sc, loadf8(dx)), f16_splat(blk));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sub_block_sums(e)), step, acc);
            let min = _mm256_mul_ps(m, f16_splat(&blk[2..]));
            acc_min = _mm256_fmadd_ps(min, loadf8(dsums), acc_min);
        }
        hsum8(_mm256_sub_ps(acc, acc_min))
    }
}

/// Lane `s` of the result: the sum of the eight i32 of `e[s]` (sub-block `s`'s
/// [`quads`]): twice, two registers are packed back to i16 (`vpackssdw`, exact while
/// every value fits) and `vpmaddwd` against ones adds neighbours. That leaves, per
/// 128-bit half, one sum per `s` of that half's values, and the halves are added.
/// Horizontal adds (`vphaddw`) would do the same in three µops each on one pipe; these
/// spread over the multiply and shuffle pipes. A value packed is at most eight
/// products of a 4-bit weight by an int8, 8·15·127 < 2^15, as `BOUND_Q4` checks.
///
/// # Safety
/// The CPU has AVX2; the caller is compiled with it, so this inlines into it.
#[inline(always)]
unsafe fn sub_block_sums(e: [__m256i; 8]) -> __m256i {
    // SAFETY: AVX2, by this function's contract.
    unsafe {
        const BOUND_Q4: i32 = 8 * 15 * 127;
        const _: () = assert!(BOUND_Q4 <= i16::MAX as i32);
        let ones = _mm256_set1_epi16(1);
        let pairs = |a, b| _mm256_madd_epi16(_mm256_packs_epi32(a, b), ones);
        let f = [
            pairs(e[0], e[1]),
            pairs(e[2], e[3]),
            pairs(e[4], e[5]),
            pairs(e[6], e[7]),
        ];
        // [s0..s3 of the low 128-bit halves | s0..s3 of the high halves], and s4..s7.
        let (g0, g1) = (pairs(f[0], f[1]), pairs(f[2], f[3]));
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(g0, g1),
            _mm256_permute2x128_si256::<0x31>(g0, g1),
        )
    }
}

/// Q6_K: lane `j` of the row's accumulator collects activation block `j` (sub-blocks
/// `2j`, `2j + 1`) of every 256-weight block: `d·dx_j·(Σ_s sc_s·Σ q·x̂ − 32·Σ_s sc_s·Σx̂)`.
/// The sixteen sub-block sums come from [`quads`], a round of packs and `vpmaddwd` and
/// one of `vphaddd` ([`sub_block_sums_q6`]), are multiplied by their scales in integers
/// and paired into the block's lanes, so the block costs one conversion and one FMA.
///
/// # Safety
/// The CPU has AVX2, FMA and F16C (and AVX-512 VL and VNNI if `VNNI`); the caller is
/// compiled with them, so this inlines into it.
#[inline(always)]
unsafe fn q6_k<const VNNI: bool>(row: &[u8], x: ActRow) -> f32 {
    // SAFETY: the features, by this function's contract; every load is bounds-checked.
    unsafe {
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
            let mut e = [_mm256_setzero_si256(); 8];
            for h in 0..2 {
                let l0 = load32(&blk[64 * h..]);
                let l1 = load32(&blk[64 * h + 32..]);
                let hb = load32(&blk[128 + 32 * h..]);
                // The four 32-weight runs k of this half: low nibble and two high bits.
                let q = super::super::avx2::q6_k_runs(l0, l1, hb);
                for (k, &qk) in q.iter().enumerate() {
                    let j = 4 * h + k;
                    // Pairs of q·x (what `vpmaddubsw` holds): at most 2·63·127 = 16002.
                    e[j] = quads::<VNNI>(qk, load32(&xq[32 * j..]));
                }
            }
            let scaled = sub_block_sums_q6(e, raw);
            // Lane j: sc_2j·Σx̂(2j) + sc_2j+1·Σx̂(2j+1), at most 2·128·2032.
            let off = _mm256_madd_epi16(_mm256_cvtepi8_epi16(raw), load32(sums));
            let v = _mm256_sub_epi32(scaled, _mm256_slli_epi32::<5>(off));
            let step = _mm256_mul_ps(loadf8(dx), f16_splat(&blk[208..]));
            acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), step, acc);
        }
        hsum8(acc)
    }
}

/// Lane `j`: `sc_2j·Σ e[j][..4] + sc_2j+1·Σ e[j][4..]`, the scaled sums of the two
/// 16-weight sub-blocks whose [`quads`] `e[j]` holds, with the sixteen i8 scales `raw`.
/// A quad is at most four products, 4·63·127 < 2^15, so two registers pack back to i16
/// exactly and `vpmaddwd` by ones adds them pairwise (as in [`sub_block_sums`]); one
/// round of `vphaddd` then leaves in `lo` the even sub-blocks of `j < 4` in its low half
/// and their odd ones in its high half (`hi` the same for `j ≥ 4`), so the scales are
/// shuffled into that order.
///
/// # Safety
/// The CPU has AVX2; the caller is compiled with it, so this inlines into it.
#[inline(always)]
unsafe fn sub_block_sums_q6(e: [__m256i; 8], raw: __m128i) -> __m256i {
    // SAFETY: AVX2, by this function's contract.
    unsafe {
        const BOUND_Q6: i32 = 4 * 63 * 127;
        const _: () = assert!(BOUND_Q6 <= i16::MAX as i32);
        let ones = _mm256_set1_epi16(1);
        let pairs = |a, b| _mm256_madd_epi16(_mm256_packs_epi32(a, b), ones);
        let lo = _mm256_hadd_epi32(pairs(e[0], e[1]), pairs(e[2], e[3]));
        let hi = _mm256_hadd_epi32(pairs(e[4], e[5]), pairs(e[6], e[7]));
        let order = _mm_setr_epi8(0, 2, 4, 6, 1, 3, 5, 7, 8, 10, 12, 14, 9, 11, 13, 15);
        let sc = _mm_shuffle_epi8(raw, order);
        // A sub-block's sum is at most 16·63·127 = 128016; times |sc| ≤ 128, below 2^24.
        let lo = _mm256_mullo_epi32(lo, _mm256_cvtepi8_epi32(sc));
        let hi = _mm256_mullo_epi32(hi, _mm256_cvtepi8_epi32(_mm_srli_si128::<8>(sc)));
        _mm256_add_epi32(
            _mm256_permute2x128_si256::<0x20>(lo, hi),
            _mm256_permute2x128_si256::<0x31>(lo, hi),
        )
    }
}
