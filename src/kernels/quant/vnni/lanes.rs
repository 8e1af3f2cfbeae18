//! Q4_K with the weight rows in the lanes (chapter 10): sixteen rows at a time, each
//! `vpdpbusd` lane holding four nibbles of one row against the same four activation
//! bytes, broadcast. A lane's i32 sum then runs over a whole 32-weight sub-block of its
//! row, so the f32 work — one conversion, the row's `d·sc` times the token's step, and
//! the minimum's `dmin·m · dx·Σx̂` — comes once per sub-block, 16 rows, and token, where
//! the dot tiles of `x86.rs` pay it per 16 weights of every row. The rows are not stored
//! this way: each 64-column chunk of 16 rows is transposed in registers as it is read
//! (8 loads, 24 shuffles), then unpacked into low and high nibbles, and the 16 registers
//! serve every token of the group. Scales and minima of the 16 rows come by 4 gathers a
//! super-block. The integer sums are the reference's exactly; the f32 terms come in
//! another order (bounded as the tiles', tests in `tests.rs`).
//!
//! Lane order: lanes 0–3 hold rows 0–3, lanes 4–7 rows 8–11, 8–11 rows 4–7, 12–15 rows
//! 12–15 (what the transpose's last 128-bit shuffle leaves; [`LANE_ROW`]).

use super::super::{ActRow, QuantizedRows};
use std::arch::x86_64::*;
use std::ops::Range;

/// Rows per pass.
pub const ROWS: usize = 16;
/// Tokens per pass (their f32 sums are kept on the stack; more tokens take more passes).
pub const MAX_TOKENS: usize = 64;
/// The weight row lane `l` holds.
const LANE_ROW: [usize; ROWS] = [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15];

const Q4_K_BYTES: usize = 144;

/// `put(t, i, Σ_c w_i,c · x̂_c)` for the 16 Q4_K rows `rows` (row `i` at
/// `rows[i · row_bytes..][..row_bytes]`, whole super-blocks) and the token rows
/// `tokens.start + t` of `acts` (at most [`MAX_TOKENS`], 32-value blocks, as long as a row).
pub fn q4_k_rows16(
    rows: &[u8],
    row_bytes: usize,
    acts: &QuantizedRows,
    tokens: Range<usize>,
    mut put: impl FnMut(usize, usize, f32),
) {
    assert!(super::cpu_has_vnni(), "q4_k lanes: CPU features");
    assert!(tokens.len() <= MAX_TOKENS, "q4_k lanes: tokens");
    assert!(acts.block == 32, "q4_k lanes: activation block");
    assert!(
        row_bytes.is_multiple_of(Q4_K_BYTES) && rows.len() >= ROWS * row_bytes,
        "q4_k lanes: rows"
    );
    // The gathers take i32 byte offsets up to the last row's last header.
    assert!(
        i32::try_from(ROWS * row_bytes).is_ok(),
        "q4_k lanes: rows too long for i32 offsets"
    );
    let cols = row_bytes / Q4_K_BYTES * 256;
    for x in tokens.clone().map(|t| acts.row(t)) {
        assert!(
            x.qs.len() == cols && x.d.len() * 32 == cols && x.dsums.len() == x.d.len(),
            "q4_k lanes: activation blocks"
        );
    }
    let mut sums = [[0.0f32; ROWS]; MAX_TOKENS];
    // SAFETY: the CPU features were checked above; the kernel reads `rows` and `xs`
    // through bounds-checked slices, and its gathers stay inside `rows` (checked there).
    unsafe {
        kernel(
            &rows[..ROWS * row_bytes],
            row_bytes,
            acts,
            tokens.clone(),
            &mut sums,
        )
    };
    for (t, s) in sums.iter().enumerate().take(tokens.len()) {
        for (l, &v) in s.iter().enumerate() {
            put(t, LANE_ROW[l], v);
        }
    }
}

/// 32 bytes at `s[..32]`, bounds-checked.
#[inline(always)]
fn load32(s: &[u8]) -> __m256i {
    let s = &s[..32];
    // SAFETY: the slice holds 32 bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(s.as_ptr() as *const __m256i) }
}

/// The four activation bytes at `s[k..]` as one i32, broadcast to every lane.
#[target_feature(enable = "avx512f")]
#[inline]
fn bcast4(s: &[i8; 64], k: usize) -> __m512i {
    let b = [s[k], s[k + 1], s[k + 2], s[k + 3]];
    _mm512_set1_epi32(i32::from_le_bytes(b.map(|v| v as u8)))
}

/// The scales `d·sc_s` and minima `dmin·m_s` (s < 8) of super-block `b` of the 16 rows,
/// lane `l` for row `LANE_ROW[l]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn scales(rows: &[u8], row_bytes: usize, b: usize) -> ([__m512; 8], [__m512; 8]) {
    let base = Q4_K_BYTES * b;
    // Offsets of the rows' headers in lane order; the largest read is 16 bytes at
    // 15·row_bytes + base, inside `rows`.
    assert!(
        (ROWS - 1) * row_bytes + base + 16 <= rows.len(),
        "q4_k lanes: header"
    );
    let offs: [i32; ROWS] = std::array::from_fn(|l| (LANE_ROW[l] * row_bytes + base) as i32);
    // SAFETY: `offs` is 64 bytes, loaded unaligned.
    let offs = unsafe { _mm512_loadu_si512(offs.as_ptr() as *const __m512i) };
    // SAFETY: every lane reads 4 bytes at `rows + offs[l] + 4w` (w < 4), inside `rows`
    // (asserted above).
    let word = |w: usize| unsafe {
        _mm512_i32gather_epi32::<1>(offs, rows.as_ptr().add(4 * w) as *const i32)
    };
    let (w0, lo, mid, hi) = (word(0), word(1), word(2), word(3));
    let d = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(w0));
    let dmin = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32::<16>(w0)));
    let six = _mm512_set1_epi32(0x3f3f_3f3f);
    let four = _mm512_set1_epi32(0x0f0f_0f0f);
    let two = _mm512_set1_epi32(0x0303_0303);
    let sc_lo = _mm512_and_si512(lo, six);
    let m_lo = _mm512_and_si512(mid, six);
    let top = |v: __m512i| _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<6>(v), two));
    let sc_hi = _mm512_or_si512(_mm512_and_si512(hi, four), top(lo));
    let m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32::<4>(hi), four), top(mid));
    let byte = |v: __m512i, k: u32| {
        let b = _mm512_and_si512(
            _mm512_srlv_epi32(v, _mm512_set1_epi32(8 * k as i32)),
            _mm512_set1_epi32(0xff),
        );
        _mm512_cvtepi32_ps(b)
    };
    let sc: [__m512; 8] = std::array::from_fn(|s| {
        let v = if s < 4 { sc_lo } else { sc_hi };
        _mm512_mul_ps(byte(v, s as u32 % 4), d)
    });
    let m: [__m512; 8] = std::array::from_fn(|s| {
        let v = if s < 4 { m_lo } else { m_hi };
        _mm512_mul_ps(byte(v, s as u32 % 4), dmin)
    });
    (sc, m)
}

/// The low and high nibbles of chunk `c` (32 bytes a row, columns 64c..64c + 64) of
/// super-block `b` of the 16 rows: `lo[k]` lane `l` holds row `LANE_ROW[l]`'s columns
/// 64c + 4k .. + 4 (sub-block 2c), `hi[k]` its columns 64c + 32 + 4k .. + 4 (2c + 1).
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn nibbles(rows: &[u8], row_bytes: usize, b: usize, c: usize) -> ([__m512i; 8], [__m512i; 8]) {
    let at = Q4_K_BYTES * b + 16 + 32 * c;
    // Row j in the low half, row j + 8 in the high half.
    let a: [__m512i; 8] = std::array::from_fn(|j| {
        let r0 = load32(&rows[j * row_bytes + at..]);
        let r1 = load32(&rows[(j + 8) * row_bytes + at..]);
        _mm512_inserti64x4::<1>(_mm512_castsi256_si512(r0), r1)
    });
    // An 8×8 transpose of dwords within each 256-bit half.
    let t: [__m512i; 8] = std::array::from_fn(|i| {
        let (x, y) = (a[2 * (i / 2)], a[2 * (i / 2) + 1]);
        if i % 2 == 0 {
            _mm512_unpacklo_epi32(x, y)
        } else {
            _mm512_unpackhi_epi32(x, y)
        }
    });
    // u[4h + q]: rows 4h..4h + 4 (and 8 + 4h..), dwords q and q + 4.
    let u: [__m512i; 8] = std::array::from_fn(|i| {
        let (h, q) = (i / 4, i % 4);
        let (x, y) = (t[4 * h + q / 2], t[4 * h + 2 + q / 2]);
        if q % 2 == 0 {
            _mm512_unpacklo_epi64(x, y)
        } else {
            _mm512_unpackhi_epi64(x, y)
        }
    });
    let m4 = _mm512_set1_epi8(0x0f);
    let mut lo = [_mm512_setzero_si512(); 8];
    let mut hi = [_mm512_setzero_si512(); 8];
    for q in 0..4 {
        let words = [
            _mm512_shuffle_i64x2::<0x88>(u[q], u[4 + q]),
            _mm512_shuffle_i64x2::<0xdd>(u[q], u[4 + q]),
        ];
        for (h, w) in words.into_iter().enumerate() {
            let k = q + 4 * h;
            lo[k] = _mm512_and_si512(w, m4);
            hi[k] = _mm512_and_si512(_mm512_srli_epi16::<4>(w), m4);
        }
    }
    (lo, hi)
}

#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn kernel(
    rows: &[u8],
    row_bytes: usize,
    acts: &QuantizedRows,
    tokens: Range<usize>,
    sums: &mut [[f32; ROWS]; MAX_TOKENS],
) {
    let mut acc = [_mm512_setzero_ps(); MAX_TOKENS];
    let acc = &mut acc[..tokens.len()];
    let zero = _mm512_setzero_si512();
    for b in 0..row_bytes / Q4_K_BYTES {
        let (sc, mn) = scales(rows, row_bytes, b);
        for c in 0..4 {
            let (lo, hi) = nibbles(rows, row_bytes, b, c);
            let (s0, s1) = (2 * c, 2 * c + 1);
            let (j0, j1) = (8 * b + s0, 8 * b + s1);
            for (a, t) in acc.iter_mut().zip(tokens.clone()) {
                let x: ActRow = acts.row(t);
                let xq: &[i8; 64] = x.qs[256 * b + 64 * c..][..64].try_into().expect("64 bytes");
                // Two chains a sub-block (even and odd k) keep the adds' latency hidden.
                let mut p = [zero; 4];
                for k in 0..8 {
                    let e = k % 2;
                    p[e] = _mm512_dpbusd_epi32(p[e], lo[k], bcast4(xq, 4 * k));
                    p[2 + e] = _mm512_dpbusd_epi32(p[2 + e], hi[k], bcast4(xq, 32 + 4 * k));
                }
                let i0 = _mm512_cvtepi32_ps(_mm512_add_epi32(p[0], p[1]));
                let i1 = _mm512_cvtepi32_ps(_mm512_add_epi32(p[2], p[3]));
                let mut v = *a;
                v = _mm512_fmadd_ps(i0, _mm512_mul_ps(sc[s0], _mm512_set1_ps(x.d[j0])), v);
                v = _mm512_fnmadd_ps(mn[s0], _mm512_set1_ps(x.dsums[j0]), v);
                v = _mm512_fmadd_ps(i1, _mm512_mul_ps(sc[s1], _mm512_set1_ps(x.d[j1])), v);
                v = _mm512_fnmadd_ps(mn[s1], _mm512_set1_ps(x.dsums[j1]), v);
                *a = v;
            }
        }
    }
    for (s, a) in sums.iter_mut().zip(acc.iter()) {
        // SAFETY: `s` holds the 16 floats the store writes.
        unsafe { _mm512_storeu_ps(s.as_mut_ptr(), *a) };
    }
}
