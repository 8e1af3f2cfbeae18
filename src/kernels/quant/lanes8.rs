//! Q4_K, Q6_K and Q8_0 with eight weight rows in the lanes of a 256-bit register (chapter 10), the
//! AVX2 counterpart of the VNNI row lanes. Without `vpdpbusd`, each `vpmaddubsw` leaves pairs
//! of products in i16 lanes, and the dot tiles pay a `vpmaddwd`, a horizontal sum and the
//! f32 scaling for every 32 weights of every row and token. With the rows in the lanes, a
//! block's sums land one to a lane, and its eight `vpmaddubsw` add up in i16 (a nibble
//! times a byte, two to a lane, eight times: at most 8·2·15·127 = 30,480) before one
//! `vpmaddwd`, so the widening and the scaling come once per block for eight rows and a
//! token. Q6_K's 6-bit `q` (0–63) allow two `vpmaddubsw` a sum (2·2·63·127 = 32,004), whose
//! `vpmaddwd` multiplies by the sub-block's scale in integers; its offset
//! `32·Σ_s sc_s·Σx̂_s` is one more `vpmaddwd` of the two scales with the two 16-value sums.
//!
//! Q8_0's signed weights go in as `|w|` against `x̂` with `w`'s sign, and a pair of those
//! reaches 2·128·127 = 32,512, so each of its `vpmaddubsw` needs its own `vpmaddwd`; the
//! lanes still win from eight tokens, because the sums of a 16-value activation half then
//! add up in i32 and the widening and scaling come once per half for eight rows, where
//! the tiles pay them for every row (and, with every group this size on the lanes, Q8_0
//! needs no f32 panels on AVX2).
//!
//! The rows are not stored this way: each call unpacks its eight rows once into a
//! per-thread buffer (register `k` of block `j` holding weights `4k..4k + 4` of every row;
//! Q4_K's steps `d·sc_s` and minima `dmin·m_s` as eight f32, Q6_K's `d` and its scales as
//! i16 pairs), and every token of the group then reads that buffer. The integer sum of
//! each activation block is the reference's exactly; only the f32 scaling and additions
//! come in another order, so tests pin the lanes to [`super::dot_row_reference`] within
//! the bound of the tiles.

use super::{QuantizedRows, activation_block};
use crate::quant::GgmlType;
use std::ops::Range;

/// Weight rows per pass.
pub const ROWS: usize = 8;

// The i16 sums the kernels rely on, from the weights' and activations' largest magnitudes:
// a `vpmaddubsw` lane holds two products, Q4_K sums eight lanes, Q6_K two, Q8_0 (|w| ≤ 128)
// could not sum even two.
const X_MAX: i32 = 127;
const _: () = assert!(8 * 2 * 15 * X_MAX <= i16::MAX as i32);
const _: () = assert!(2 * 2 * 63 * X_MAX <= i16::MAX as i32);
const _: () = assert!(2 * 2 * 128 * X_MAX > i16::MAX as i32);

/// Whether a group of `n` tokens of `ty` takes the lanes on this CPU.
pub fn wins(ty: GgmlType, n: usize) -> bool {
    let k = crate::kernels::dispatch::kernels(ty);
    cfg!(target_arch = "x86_64")
        && crate::kernels::policy::cpu().avx2_fma()
        && k.avx2_lanes
            .is_some_and(|(from, to)| (from..=to).contains(&n))
}

/// `put(t, v)` with `v[i] = Σ_c w_i,c · x̂_c` for the [`ROWS`] rows of `ty` (Q8_0, Q4_K or
/// Q6_K) at `rows` (row `i` at `rows[i · row_bytes..][..row_bytes]`, whole blocks) and each
/// token row of `tokens` of `acts` (in `ty`'s activation blocks, as long as a row), `t`
/// counted from `tokens.start`.
pub fn rows8(
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    acts: &QuantizedRows,
    tokens: Range<usize>,
    put: impl FnMut(usize, &[f32; ROWS]),
) {
    assert!(
        crate::kernels::policy::cpu().avx2_fma(),
        "lanes8: CPU features"
    );
    let (block_bytes, block_cols) = match ty {
        GgmlType::Q8_0 => (Q8_0_BYTES, 32),
        GgmlType::Q4_K => (Q4_K_BYTES, 256),
        GgmlType::Q6_K => (Q6_K_BYTES, 256),
        _ => panic!("lanes8: no kernel for {}", ty.name()),
    };
    assert!(
        activation_block(ty) == Some(acts.block),
        "lanes8: activation block"
    );
    assert!(
        row_bytes.is_multiple_of(block_bytes) && rows.len() >= ROWS * row_bytes,
        "lanes8: rows"
    );
    // Q6_K's scales come by a gather of i32 byte offsets up to the last row.
    assert!(
        i32::try_from(ROWS * row_bytes).is_ok(),
        "lanes8: rows too long for i32 offsets"
    );
    let cols = row_bytes / block_bytes * block_cols;
    for t in tokens.clone() {
        let x = acts.row(t);
        assert!(
            x.qs.len() == cols && x.d.len() * acts.block == cols && x.dsums.len() == x.d.len(),
            "lanes8: activation blocks"
        );
    }
    #[cfg(target_arch = "x86_64")]
    x86::rows8(ty, &rows[..ROWS * row_bytes], row_bytes, acts, tokens, put);
    #[cfg(not(target_arch = "x86_64"))]
    let _ = (put, tokens);
}

const Q8_0_BYTES: usize = 34;
const Q4_K_BYTES: usize = 144;
const Q6_K_BYTES: usize = 210;

#[cfg(target_arch = "x86_64")]
mod x86 {
    use super::super::ActRow;
    use super::{Q4_K_BYTES, Q6_K_BYTES, Q8_0_BYTES, QuantizedRows, ROWS};
    use crate::quant::GgmlType;
    use std::arch::x86_64::*;
    use std::cell::RefCell;
    use std::ops::Range;

    /// Tokens a register tile keeps.
    const TILE_TOKENS: usize = 4;

    /// Eight rows unpacked, per 32-column block `j`: the weights in `q[8j..8j + 8]`; Q4_K's
    /// steps `d·sc_s` and minima `dmin·m_s` in `step[j]`, `min[j]`; Q6_K's `d` in `step[j]`
    /// and in `scales[3j..3j + 3]` each row's i16 pairs (sc₀, sc₀), (sc₁, sc₁), (sc₀, sc₁)
    /// of the block's two sub-blocks.
    #[derive(Default)]
    struct Unpacked {
        q: Vec<__m256i>,
        step: Vec<[f32; ROWS]>,
        min: Vec<[f32; ROWS]>,
        scales: Vec<__m256i>,
    }

    thread_local! {
        static UNPACKED: RefCell<Unpacked> = RefCell::new(Unpacked::default());
    }

    pub fn rows8(
        ty: GgmlType,
        rows: &[u8],
        row_bytes: usize,
        acts: &QuantizedRows,
        tokens: Range<usize>,
        mut put: impl FnMut(usize, &[f32; ROWS]),
    ) {
        UNPACKED.with_borrow_mut(|u| {
            // SAFETY (both blocks): the caller checked AVX2, FMA and F16C, and that the
            // tokens' rows are as long as the unpacked rows.
            unsafe {
                match ty {
                    GgmlType::Q8_0 => unpack_q8_0(rows, row_bytes, u),
                    GgmlType::Q4_K => unpack_q4_k(rows, row_bytes, u),
                    _ => unpack_q6_k(rows, row_bytes, u),
                }
            };
            let mut t0 = tokens.start;
            while t0 < tokens.end {
                let nt = (tokens.end - t0).min(TILE_TOKENS);
                let mut out = [[0.0f32; ROWS]; TILE_TOKENS];
                unsafe {
                    match (ty, nt) {
                        (GgmlType::Q8_0, 1) => tile_q8_0::<1>(u, acts, t0, &mut out),
                        (GgmlType::Q8_0, 2) => tile_q8_0::<2>(u, acts, t0, &mut out),
                        (GgmlType::Q8_0, 3) => tile_q8_0::<3>(u, acts, t0, &mut out),
                        (GgmlType::Q8_0, _) => tile_q8_0::<4>(u, acts, t0, &mut out),
                        (GgmlType::Q4_K, 1) => tile_q4_k::<1>(u, acts, t0, &mut out),
                        (GgmlType::Q4_K, 2) => tile_q4_k::<2>(u, acts, t0, &mut out),
                        (GgmlType::Q4_K, 3) => tile_q4_k::<3>(u, acts, t0, &mut out),
                        (GgmlType::Q4_K, _) => tile_q4_k::<4>(u, acts, t0, &mut out),
                        (_, 1) => tile_q6_k::<1>(u, acts, t0, &mut out),
                        (_, 2) => tile_q6_k::<2>(u, acts, t0, &mut out),
                        (_, 3) => tile_q6_k::<3>(u, acts, t0, &mut out),
                        (_, _) => tile_q6_k::<4>(u, acts, t0, &mut out),
                    }
                }
                for (t, o) in out.iter().enumerate().take(nt) {
                    put(t0 - tokens.start + t, o);
                }
                t0 += nt;
            }
        });
    }

    /// 16 bytes at `s[..16]`, bounds-checked.
    #[inline(always)]
    fn load16(s: &[u8]) -> __m128i {
        let s = &s[..16];
        // SAFETY: the slice holds 16 bytes; the load is unaligned.
        unsafe { _mm_loadu_si128(s.as_ptr() as *const __m128i) }
    }

    /// The 32 bytes at `at` of each of the eight rows, transposed: register `k`, lane `r`,
    /// holds bytes `4k..4k + 4` of row `r`. Each 128-bit half is a 4 × 4 transpose of
    /// dwords (rows 0–3 low, 4–7 high), so no shuffle crosses the halves.
    #[target_feature(enable = "avx2")]
    fn transpose8(rows: &[u8], row_bytes: usize, at: usize) -> [__m256i; 8] {
        let half = |j: usize, h: usize| {
            let lo = load16(&rows[j * row_bytes + at + 16 * h..]);
            let hi = load16(&rows[(j + 4) * row_bytes + at + 16 * h..]);
            _mm256_inserti128_si256::<1>(_mm256_castsi128_si256(lo), hi)
        };
        let mut out = [_mm256_setzero_si256(); 8];
        for h in 0..2 {
            let a: [__m256i; 4] = [half(0, h), half(1, h), half(2, h), half(3, h)];
            let t0 = _mm256_unpacklo_epi32(a[0], a[1]);
            let t1 = _mm256_unpackhi_epi32(a[0], a[1]);
            let t2 = _mm256_unpacklo_epi32(a[2], a[3]);
            let t3 = _mm256_unpackhi_epi32(a[2], a[3]);
            out[4 * h] = _mm256_unpacklo_epi64(t0, t2);
            out[4 * h + 1] = _mm256_unpackhi_epi64(t0, t2);
            out[4 * h + 2] = _mm256_unpacklo_epi64(t1, t3);
            out[4 * h + 3] = _mm256_unpackhi_epi64(t1, t3);
        }
        out
    }

    /// The little-endian f16 at byte `at` of each of the eight rows, widened by F16C in one
    /// instruction (exact, as every f16 is an f32).
    #[target_feature(enable = "avx2,f16c")]
    fn f16x8(rows: &[u8], row_bytes: usize, at: usize) -> [f32; ROWS] {
        let bits: [u16; ROWS] = std::array::from_fn(|r| {
            let at = r * row_bytes + at;
            u16::from_le_bytes([rows[at], rows[at + 1]])
        });
        let mut out = [0.0f32; ROWS];
        // SAFETY: `bits` holds the eight u16 the load reads and `out` the eight f32 the
        // store writes; F16C is enabled here.
        unsafe {
            let h = _mm_loadu_si128(bits.as_ptr() as *const __m128i);
            _mm256_storeu_ps(out.as_mut_ptr(), _mm256_cvtph_ps(h));
        }
        out
    }

    /// Fills `u` with eight Q8_0 rows: per block, its eight registers of weights and each
    /// row's step `d`.
    #[target_feature(enable = "avx2,f16c")]
    fn unpack_q8_0(rows: &[u8], row_bytes: usize, u: &mut Unpacked) {
        u.q.clear();
        u.step.clear();
        for b in 0..row_bytes / Q8_0_BYTES {
            let base = Q8_0_BYTES * b;
            u.step.push(f16x8(rows, row_bytes, base));
            u.q.extend(transpose8(rows, row_bytes, base + 2));
        }
    }

    /// Fills `u` with eight Q4_K rows: per super-block, the steps and minima of its eight
    /// sub-blocks, and each 64-column chunk's nibbles (low: sub-block `2c`, high: `2c + 1`).
    #[target_feature(enable = "avx2,f16c")]
    fn unpack_q4_k(rows: &[u8], row_bytes: usize, u: &mut Unpacked) {
        u.q.clear();
        u.step.clear();
        u.min.clear();
        let m4 = _mm256_set1_epi8(0x0f);
        for b in 0..row_bytes / Q4_K_BYTES {
            let base = Q4_K_BYTES * b;
            let (d, dmin) = (
                f16x8(rows, row_bytes, base),
                f16x8(rows, row_bytes, base + 2),
            );
            let mut step = [[0.0f32; ROWS]; 8];
            let mut min = [[0.0f32; ROWS]; 8];
            for r in 0..ROWS {
                let at = r * row_bytes + base + 4;
                // Byte s of each word: sub-block s's 6-bit scale (minimum).
                let (sc, m) = super::super::unpack_scale_min_k4(&rows[at..at + 12]);
                for s in 0..8 {
                    step[s][r] = d[r] * (sc >> (8 * s) & 0xff) as f32;
                    min[s][r] = dmin[r] * (m >> (8 * s) & 0xff) as f32;
                }
            }
            u.step.extend_from_slice(&step);
            u.min.extend_from_slice(&min);
            for c in 0..4 {
                let w = transpose8(rows, row_bytes, base + 16 + 32 * c);
                u.q.extend(w.iter().map(|&v| _mm256_and_si256(v, m4)));
                u.q.extend(
                    w.iter()
                        .map(|&v| _mm256_and_si256(_mm256_srli_epi16::<4>(v), m4)),
                );
            }
        }
    }

    /// Fills `u` with eight Q6_K rows: per 128-column half `n` of a super-block, its four
    /// 32-column groups `g` (one activation block each) from the low or high nibbles of
    /// `ql` and bit pair `g` of `qh` (the reference's layout), with `d` and the scales.
    #[target_feature(enable = "avx2,f16c")]
    fn unpack_q6_k(rows: &[u8], row_bytes: usize, u: &mut Unpacked) {
        u.q.clear();
        u.step.clear();
        u.scales.clear();
        let (m4, m2) = (_mm256_set1_epi8(0x0f), _mm256_set1_epi8(0x30));
        for b in 0..row_bytes / Q6_K_BYTES {
            let base = Q6_K_BYTES * b;
            let d = f16x8(rows, row_bytes, base + 208);
            // Lane r: row r's scales s and s + 1 as the i16 pairs (s, s), (s + 1, s + 1),
            // (s, s + 1), from one gather of the dword at scale s.
            let pairs = |s: usize| {
                assert!(
                    7 * row_bytes + base + 192 + s + 4 <= rows.len(),
                    "lanes8: scales"
                );
                let offs = _mm256_mullo_epi32(
                    _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                    _mm256_set1_epi32(row_bytes as i32),
                );
                // SAFETY: lane r reads the 4 bytes at `rows + r·row_bytes + base + 192 + s`,
                // inside `rows` (asserted above; `rows8` checked that 8 rows' offsets fit
                // an i32).
                let v = unsafe {
                    let at = rows.as_ptr().add(base + 192 + s) as *const i32;
                    _mm256_i32gather_epi32::<1>(at, offs)
                };
                let s0 = _mm256_srai_epi32::<24>(_mm256_slli_epi32::<24>(v));
                let s1 = _mm256_srai_epi32::<24>(_mm256_slli_epi32::<16>(v));
                let pair = |lo: __m256i, hi: __m256i| {
                    let lo = _mm256_and_si256(lo, _mm256_set1_epi32(0xffff));
                    _mm256_or_si256(lo, _mm256_slli_epi32::<16>(hi))
                };
                [pair(s0, s0), pair(s1, s1), pair(s0, s1)]
            };
            for n in 0..2 {
                let ql0 = transpose8(rows, row_bytes, base + 64 * n);
                let ql1 = transpose8(rows, row_bytes, base + 64 * n + 32);
                let qh = transpose8(rows, row_bytes, base + 128 + 32 * n);
                for g in 0..4 {
                    u.q.extend((0..8).map(|k| {
                        let (low, high) = match g {
                            0 => (_mm256_and_si256(ql0[k], m4), _mm256_slli_epi16::<4>(qh[k])),
                            1 => (_mm256_and_si256(ql1[k], m4), _mm256_slli_epi16::<2>(qh[k])),
                            2 => (_mm256_and_si256(_mm256_srli_epi16::<4>(ql0[k]), m4), qh[k]),
                            _ => (
                                _mm256_and_si256(_mm256_srli_epi16::<4>(ql1[k]), m4),
                                _mm256_srli_epi16::<2>(qh[k]),
                            ),
                        };
                        _mm256_or_si256(low, _mm256_and_si256(high, m2))
                    }));
                    u.scales.extend(pairs(8 * n + 2 * g));
                    u.step.push(d);
                }
            }
        }
    }

    /// The tokens `t0..t0 + T` of `acts`, without `array::from_fn` (whose closure would not
    /// inline into the kernels).
    #[inline(always)]
    fn token_rows<const T: usize>(acts: &QuantizedRows, t0: usize) -> [ActRow<'_>; T] {
        let mut xs = [acts.row(t0); T];
        for (t, x) in xs.iter_mut().enumerate().skip(1) {
            *x = acts.row(t0 + t);
        }
        xs
    }

    /// Each token's 32 quantised values of activation block `j` (a plain loop, for the
    /// reason `token_rows` gives).
    #[inline(always)]
    fn block_slices<'a, const T: usize>(xs: &[ActRow<'a>; T], j: usize) -> [&'a [i8]; T] {
        let mut xq: [&[i8]; T] = [&[]; T];
        for t in 0..T {
            xq[t] = &xs[t].qs[32 * j..][..32];
        }
        xq
    }

    /// The four activation bytes `x[4k..4k + 4]`, in every dword.
    #[inline(always)]
    fn broadcast4(x: &[i8], k: usize) -> __m256i {
        let b = &x[4 * k..4 * k + 4];
        // SAFETY: AVX is enabled in every caller (a `set1` of a scalar).
        unsafe {
            _mm256_set1_epi32(i32::from_le_bytes([
                b[0] as u8, b[1] as u8, b[2] as u8, b[3] as u8,
            ]))
        }
    }

    /// The eight f32 of `v`.
    #[inline(always)]
    fn load8(v: &[f32; ROWS]) -> __m256 {
        // SAFETY: `v` holds the eight f32 the load reads.
        unsafe { _mm256_loadu_ps(v.as_ptr()) }
    }

    /// Stores the tokens' eight-row sums.
    #[inline(always)]
    fn store<const T: usize>(acc: &[__m256; T], out: &mut [[f32; ROWS]; TILE_TOKENS]) {
        for (o, a) in out.iter_mut().zip(acc) {
            // SAFETY: `o` holds the eight floats the store writes.
            unsafe { _mm256_storeu_ps(o.as_mut_ptr(), *a) };
        }
    }

    /// Eight Q8_0 rows' dots with tokens `t0..t0 + T` into `out[t]`: per block and its
    /// two 16-value activation halves `h`, `d·dx_h · Σ w·x̂` with the sum in i32 over the
    /// half's four registers (each `vpmaddubsw` of `|w|` and `x̂` carrying `w`'s sign, its
    /// pairs at most 2·128·127 = 32,512, widened at once by `vpmaddwd`).
    #[target_feature(enable = "avx2,fma")]
    fn tile_q8_0<const T: usize>(
        u: &Unpacked,
        acts: &QuantizedRows,
        t0: usize,
        out: &mut [[f32; ROWS]; TILE_TOKENS],
    ) {
        let xs: [ActRow; T] = token_rows(acts, t0);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); T];
        for (j, w) in u.q.chunks_exact(8).enumerate() {
            let xq = block_slices(&xs, j);
            let d = load8(&u.step[j]);
            for (h, w) in w.chunks_exact(4).enumerate() {
                let mut isum = [_mm256_setzero_si256(); T];
                for (k, &wk) in w.iter().enumerate() {
                    let aw = _mm256_sign_epi8(wk, wk);
                    for t in 0..T {
                        let x = _mm256_sign_epi8(broadcast4(xq[t], 4 * h + k), wk);
                        let p = _mm256_madd_epi16(_mm256_maddubs_epi16(aw, x), ones);
                        isum[t] = _mm256_add_epi32(isum[t], p);
                    }
                }
                for t in 0..T {
                    let step = _mm256_mul_ps(d, _mm256_set1_ps(xs[t].d[2 * j + h]));
                    acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[t]), step, acc[t]);
                }
            }
        }
        store(&acc, out);
    }

    /// Eight Q4_K rows' dots with tokens `t0..t0 + T` into `out[t]`: per block `j` and
    /// token, `step_j·dx_j · Σ q·x̂ − min_j · dx_j·Σx̂`.
    #[target_feature(enable = "avx2,fma")]
    fn tile_q4_k<const T: usize>(
        u: &Unpacked,
        acts: &QuantizedRows,
        t0: usize,
        out: &mut [[f32; ROWS]; TILE_TOKENS],
    ) {
        let xs: [ActRow; T] = token_rows(acts, t0);
        let ones = _mm256_set1_epi16(1);
        let mut acc = [_mm256_setzero_ps(); T];
        for (j, w) in u.q.chunks_exact(8).enumerate() {
            let xq = block_slices(&xs, j);
            let mut s16 = [_mm256_setzero_si256(); T];
            for (k, &wk) in w.iter().enumerate() {
                for t in 0..T {
                    let p = _mm256_maddubs_epi16(wk, broadcast4(xq[t], k));
                    s16[t] = _mm256_add_epi16(s16[t], p);
                }
            }
            let (step, min) = (load8(&u.step[j]), load8(&u.min[j]));
            for t in 0..T {
                let isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(s16[t], ones));
                let scale = _mm256_mul_ps(step, _mm256_set1_ps(xs[t].d[j]));
                let v = _mm256_fmadd_ps(isum, scale, acc[t]);
                acc[t] = _mm256_fnmadd_ps(min, _mm256_set1_ps(xs[t].dsums[j]), v);
            }
        }
        store(&acc, out);
    }

    /// Eight Q6_K rows' dots with tokens `t0..t0 + T` into `out[t]`: per block `j` and
    /// token, `d·dx_j · Σ_s sc_s·(Σ q·x̂ − 32·Σx̂)` over its two sub-blocks, in integers up
    /// to the last product, as the reference.
    #[target_feature(enable = "avx2,fma")]
    fn tile_q6_k<const T: usize>(
        u: &Unpacked,
        acts: &QuantizedRows,
        t0: usize,
        out: &mut [[f32; ROWS]; TILE_TOKENS],
    ) {
        let xs: [ActRow; T] = token_rows(acts, t0);
        let mut acc = [_mm256_setzero_ps(); T];
        for (j, w) in u.q.chunks_exact(8).enumerate() {
            let xq = block_slices(&xs, j);
            let sc = &u.scales[3 * j..][..3];
            let mut isum = [_mm256_setzero_si256(); T];
            for k in (0..8).step_by(2) {
                let (w0, w1) = (w[k], w[k + 1]);
                for t in 0..T {
                    let p0 = _mm256_maddubs_epi16(w0, broadcast4(xq[t], k));
                    let p1 = _mm256_maddubs_epi16(w1, broadcast4(xq[t], k + 1));
                    let p = _mm256_madd_epi16(_mm256_add_epi16(p0, p1), sc[k / 4]);
                    isum[t] = _mm256_add_epi32(isum[t], p);
                }
            }
            let d = load8(&u.step[j]);
            for t in 0..T {
                let (s0, s1) = (xs[t].sums[2 * j], xs[t].sums[2 * j + 1]);
                let pair = (s0 as u16 as i32) | ((s1 as i32) << 16);
                let off = _mm256_madd_epi16(sc[2], _mm256_set1_epi32(pair));
                let v = _mm256_sub_epi32(isum[t], _mm256_slli_epi32::<5>(off));
                let step = _mm256_mul_ps(d, _mm256_set1_ps(xs[t].d[j]));
                acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(v), step, acc[t]);
            }
        }
        store(&acc, out);
    }
}

#[cfg(test)]
mod tests {
    use super::super::{QuantizedRows, dot_row_reference};
    use super::*;
    use crate::quant::{dequantize, quantize};

    fn values(n: usize, seed: u64, scale: f32) -> Vec<f32> {
        let m = crate::rand::random_tokens(1, n, seed);
        m.iter().map(|v| scale * v).collect()
    }

    /// Eight Q8_0, Q4_K or Q6_K rows against 1..=9 tokens (every tile width, and one of each
    /// after two full tiles) equal the reference row dots within the tiles' re-association
    /// bound `4·(cols/32)·ε·Σ|w·x̂|`, at one, three and eight super-blocks a row.
    #[test]
    fn lanes_equal_the_reference_dots() {
        if !crate::kernels::policy::cpu().avx2_fma() {
            eprintln!("skipped: this CPU lacks AVX2/FMA/F16C");
            return;
        }
        let cases = [
            (GgmlType::Q8_0, 32usize),
            (GgmlType::Q8_0, 768),
            (GgmlType::Q8_0, 2048),
            (GgmlType::Q4_K, 256),
            (GgmlType::Q4_K, 768),
            (GgmlType::Q4_K, 2048),
            (GgmlType::Q6_K, 256),
            (GgmlType::Q6_K, 768),
            (GgmlType::Q6_K, 2048),
        ];
        for (k, (ty, cols)) in cases.into_iter().enumerate() {
            let n = 9;
            let w = values(ROWS * cols, 7 + k as u64, 0.3);
            let mut bytes = Vec::new();
            quantize(ty, &w, &mut bytes);
            let mut wd = vec![0.0f32; w.len()];
            dequantize(ty, &bytes, &mut wd);
            let mut acts = QuantizedRows::default();
            let block = activation_block(ty).unwrap();
            acts.quantize(&values(n * cols, 50 + k as u64, 4.0), cols, block);
            let rb = bytes.len() / ROWS;
            for t0 in 0..n {
                let mut got = vec![f32::NAN; ROWS * (n - t0)];
                rows8(ty, &bytes, rb, &acts, t0..n, |t, v| {
                    got[t * ROWS..][..ROWS].copy_from_slice(v)
                });
                for (t, got) in got.chunks_exact(ROWS).enumerate() {
                    let xd = acts.dequantize_row(t0 + t);
                    for (i, &v) in got.iter().enumerate() {
                        let row = &bytes[i * rb..][..rb];
                        let want = dot_row_reference(ty, row, acts.row(t0 + t));
                        let wi = &wd[i * cols..][..cols];
                        let mag: f32 = wi.iter().zip(&xd).map(|(a, b)| (a * b).abs()).sum();
                        let tol = 4.0 * (cols / 32) as f32 * f32::EPSILON * mag;
                        assert!(
                            (v - want).abs() <= tol,
                            "{} cols {cols} row {i} token {}: {v} vs {want} (tol {tol})",
                            ty.name(),
                            t0 + t
                        );
                    }
                }
            }
        }
    }
}
