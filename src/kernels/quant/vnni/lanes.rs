//! Q8_0, Q4_K, Q6_K and the legacy 4- and 5-bit types with the weight rows in the lanes (chapter 10): sixteen rows at a
//! time, each `vpdpbusd` lane holding four weights of one row against the same four
//! activation bytes, broadcast. A lane's i32 sum then runs over a whole activation block
//! of its row, so the rest — the offset or minimum, the scales, one conversion and one
//! multiply-add — comes once per block, 16 rows and token, where the dot tiles of
//! `x86.rs` pay a horizontal reduction per row. The rows are not stored this way: each
//! 32-byte run of 16 rows is transposed in registers as it is read (8 loads, 24 shuffles),
//! unpacked into weight values, and the registers serve every token of the group. Per-row
//! steps, scales and minima come by gathers, once a block.
//!
//! Signedness: `vpdpbusd` wants the weights unsigned. Q4_K's nibbles and Q6_K's 6-bit
//! `q` (its offset −32 taken back as `32·Σx̂` per 16 values, in integers) are; Q8_0's
//! signed `w` go in as `w + 128` (a bit flip) and `128·Σx̂` comes off each 16-value sum.
//! So every integer sum is the reference's exactly (Q6_K's scales multiply in integers,
//! as there); only the f32 scaling and additions come in another order, bounded as the
//! tiles' (tests in `tests.rs`).
//!
//! Lane order: lanes 0–3 hold rows 0–3, lanes 4–7 rows 8–11, 8–11 rows 4–7, 12–15 rows
//! 12–15 (what the transpose's last 128-bit shuffle leaves; [`LANE_ROW`]).

use super::super::{ActRow, QuantizedRows};
use crate::quant::GgmlType;
use std::arch::x86_64::*;
use std::ops::Range;

/// Rows per pass.
pub const ROWS: usize = 16;
/// Tokens per pass (their f32 sums are kept on the stack; more tokens take more passes).
pub const MAX_TOKENS: usize = 64;
/// The weight row lane `l` holds.
const LANE_ROW: [usize; ROWS] = [0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15];

const Q8_0_BYTES: usize = 34;
const Q4_K_BYTES: usize = 144;
const Q6_K_BYTES: usize = 210;

/// Whether `ty` has a row-lane kernel.
pub fn has_lanes(ty: GgmlType) -> bool {
    crate::kernels::dispatch::kernels(ty)
        .vnni_from_tokens
        .is_some()
}

/// `put(t, i, Σ_c w_i,c · x̂_c)` for the 16 rows `rows` of `ty` (row `i` at
/// `rows[i · row_bytes..][..row_bytes]`, whole blocks) and the token rows
/// `tokens.start + t` of `acts` (at most [`MAX_TOKENS`], in `ty`'s activation blocks, as
/// long as a row).
pub fn rows16(
    ty: GgmlType,
    rows: &[u8],
    row_bytes: usize,
    acts: &QuantizedRows,
    tokens: Range<usize>,
    mut put: impl FnMut(usize, usize, f32),
) {
    assert!(super::cpu_has_vnni(), "lanes: CPU features");
    assert!(tokens.len() <= MAX_TOKENS, "lanes: tokens");
    let (block_bytes, block_cols, act_block) = match ty {
        GgmlType::Q8_0 => (Q8_0_BYTES, 32, 16),
        GgmlType::Q4_K => (Q4_K_BYTES, 256, 32),
        GgmlType::Q6_K => (Q6_K_BYTES, 256, 32),
        GgmlType::Q4_0 => (18, 32, 32),
        GgmlType::Q4_1 => (20, 32, 32),
        GgmlType::Q5_0 => (22, 32, 32),
        GgmlType::Q5_1 => (24, 32, 32),
        _ => panic!("lanes: no kernel for {}", ty.name()),
    };
    assert!(acts.block == act_block, "lanes: activation block");
    assert!(
        row_bytes.is_multiple_of(block_bytes) && rows.len() >= ROWS * row_bytes,
        "lanes: rows"
    );
    // The gathers take i32 byte offsets up to the last row's last block.
    assert!(
        i32::try_from(ROWS * row_bytes).is_ok(),
        "lanes: rows too long for i32 offsets"
    );
    let cols = row_bytes / block_bytes * block_cols;
    for x in tokens.clone().map(|t| acts.row(t)) {
        assert!(
            x.qs.len() == cols
                && x.d.len() * act_block == cols
                && x.sums.len() * 16 == cols
                && x.dsums.len() == x.d.len(),
            "lanes: activation blocks"
        );
    }
    let rows = &rows[..ROWS * row_bytes];
    let mut sums = [[0.0f32; ROWS]; MAX_TOKENS];
    // SAFETY: the CPU features were checked above; the kernels read `rows` and the
    // activations through bounds-checked slices, and their gathers stay inside `rows`
    // (checked in `gather`).
    unsafe {
        match ty {
            GgmlType::Q8_0 => q8_0(rows, row_bytes, acts, tokens.clone(), &mut sums),
            GgmlType::Q4_K => q4_k(rows, row_bytes, acts, tokens.clone(), &mut sums),
            GgmlType::Q6_K => q6_k(rows, row_bytes, acts, tokens.clone(), &mut sums),
            GgmlType::Q4_0 => {
                legacy::<18, 2, false, false>(rows, row_bytes, acts, tokens.clone(), &mut sums)
            }
            GgmlType::Q4_1 => {
                legacy::<20, 4, false, true>(rows, row_bytes, acts, tokens.clone(), &mut sums)
            }
            GgmlType::Q5_0 => {
                legacy::<22, 6, true, false>(rows, row_bytes, acts, tokens.clone(), &mut sums)
            }
            _ => legacy::<24, 8, true, true>(rows, row_bytes, acts, tokens.clone(), &mut sums),
        }
    }
    for (t, s) in sums.iter().enumerate().take(tokens.len()) {
        for (l, &v) in s.iter().enumerate() {
            put(t, LANE_ROW[l], v);
        }
    }
}

/// The little-endian dword at byte `at` of each of the 16 rows, lane `l` for row
/// `LANE_ROW[l]`.
#[target_feature(enable = "avx512f")]
fn gather(rows: &[u8], row_bytes: usize, at: usize) -> __m512i {
    assert!(
        (ROWS - 1) * row_bytes + at + 4 <= rows.len(),
        "lanes: gather"
    );
    let offs: [i32; ROWS] = std::array::from_fn(|l| (LANE_ROW[l] * row_bytes + at) as i32);
    // SAFETY: `offs` is 64 bytes, loaded unaligned.
    let offs = unsafe { _mm512_loadu_si512(offs.as_ptr() as *const __m512i) };
    // SAFETY: lane `l` reads 4 bytes at `rows + offs[l]`, inside `rows` (asserted above;
    // `rows16` checked that the offsets fit an i32).
    unsafe { _mm512_i32gather_epi32::<1>(offs, rows.as_ptr() as *const i32) }
}

/// The f16 in the low (`HIGH` false) or high half of `v`'s lanes, widened.
#[target_feature(enable = "avx512f")]
fn f16_lanes<const HIGH: bool>(v: __m512i) -> __m512 {
    let v = if HIGH { _mm512_srli_epi32::<16>(v) } else { v };
    _mm512_cvtph_ps(_mm512_cvtepi32_epi16(v))
}

/// 32 bytes at `s[..32]`, bounds-checked.
#[inline(always)]
fn load32(s: &[u8]) -> __m256i {
    let s = &s[..32];
    // SAFETY: the slice holds 32 bytes; the load is unaligned.
    unsafe { _mm256_loadu_si256(s.as_ptr() as *const __m256i) }
}

/// The 32 bytes at `at` of each of the 16 rows, transposed: register `k`, lane `l`, holds
/// bytes `4k..4k + 4` of row `LANE_ROW[l]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2")]
fn transpose16(rows: &[u8], row_bytes: usize, at: usize) -> [__m512i; 8] {
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
    std::array::from_fn(|k| {
        let q = k % 4;
        if k < 4 {
            _mm512_shuffle_i64x2::<0x88>(u[q], u[4 + q])
        } else {
            _mm512_shuffle_i64x2::<0xdd>(u[q], u[4 + q])
        }
    })
}

/// `Σ_k w[k]·x[4k..4k + 4]` over the four dwords `k` of half `h` (16 weights a lane),
/// one `vpdpbusd` each with the activation bytes broadcast.
#[target_feature(enable = "avx512f,avx512vnni")]
#[inline]
fn dot4(w: &[__m512i; 8], h: usize, x: &[i8]) -> __m512i {
    let mut p = _mm512_setzero_si512();
    for k in 4 * h..4 * h + 4 {
        let b = [x[4 * k], x[4 * k + 1], x[4 * k + 2], x[4 * k + 3]];
        let b = _mm512_set1_epi32(i32::from_le_bytes(b.map(|v| v as u8)));
        p = _mm512_dpbusd_epi32(p, w[k], b);
    }
    p
}

/// Stores the 16-lane f32 sums of the group's tokens.
#[target_feature(enable = "avx512f")]
fn store(acc: &[__m512], sums: &mut [[f32; ROWS]; MAX_TOKENS]) {
    for (s, a) in sums.iter_mut().zip(acc) {
        // SAFETY: `s` holds the 16 floats the store writes.
        unsafe { _mm512_storeu_ps(s.as_mut_ptr(), *a) };
    }
}

/// Q8_0: per 32-weight block, `dw` by gather, the rows' bytes flipped to `w + 128`; per
/// token and 16-value half, `(dw·dx_h) · (Σ (w + 128)·x̂ − 128·Σx̂)`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q8_0(
    rows: &[u8],
    row_bytes: usize,
    acts: &QuantizedRows,
    tokens: Range<usize>,
    sums: &mut [[f32; ROWS]; MAX_TOKENS],
) {
    let mut acc = [_mm512_setzero_ps(); MAX_TOKENS];
    let acc = &mut acc[..tokens.len()];
    let flip = _mm512_set1_epi8(i8::MIN);
    for b in 0..row_bytes / Q8_0_BYTES {
        let at = Q8_0_BYTES * b;
        let dw = f16_lanes::<false>(gather(rows, row_bytes, at));
        let w = transpose16(rows, row_bytes, at + 2).map(|v| _mm512_xor_si512(v, flip));
        for (a, t) in acc.iter_mut().zip(tokens.clone()) {
            let x: ActRow = acts.row(t);
            let xq = &x.qs[32 * b..][..32];
            for h in 0..2 {
                let off = _mm512_set1_epi32(128 * x.sums[2 * b + h] as i32);
                let isum = _mm512_sub_epi32(dot4(&w, h, xq), off);
                let step = _mm512_mul_ps(dw, _mm512_set1_ps(x.d[2 * b + h]));
                *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), step, *a);
            }
        }
    }
    store(acc, sums);
}

/// The scales `d·sc_s` and minima `dmin·m_s` (s < 8) of Q4_K super-block `b` of the 16
/// rows, lane `l` for row `LANE_ROW[l]`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx2,f16c")]
fn q4_k_scales(rows: &[u8], row_bytes: usize, b: usize) -> ([__m512; 8], [__m512; 8]) {
    let base = Q4_K_BYTES * b;
    let word = |w: usize| gather(rows, row_bytes, base + 4 * w);
    let (w0, lo, mid, hi) = (word(0), word(1), word(2), word(3));
    let d = f16_lanes::<false>(w0);
    let dmin = f16_lanes::<true>(w0);
    let six = _mm512_set1_epi32(0x3f3f_3f3f);
    let four = _mm512_set1_epi32(0x0f0f_0f0f);
    let two = _mm512_set1_epi32(0x0303_0303);
    let sc_lo = _mm512_and_si512(lo, six);
    let m_lo = _mm512_and_si512(mid, six);
    let top = |v: __m512i| _mm512_slli_epi32::<4>(_mm512_and_si512(_mm512_srli_epi32::<6>(v), two));
    let sc_hi = _mm512_or_si512(_mm512_and_si512(hi, four), top(lo));
    let m_hi = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi32::<4>(hi), four), top(mid));
    let byte = |v: __m512i, k: usize| {
        let shift = _mm512_set1_epi32(8 * k as i32);
        let b = _mm512_and_si512(_mm512_srlv_epi32(v, shift), _mm512_set1_epi32(0xff));
        _mm512_cvtepi32_ps(b)
    };
    let sc = std::array::from_fn(|s| {
        let v = if s < 4 { sc_lo } else { sc_hi };
        _mm512_mul_ps(byte(v, s % 4), d)
    });
    let m = std::array::from_fn(|s| {
        let v = if s < 4 { m_lo } else { m_hi };
        _mm512_mul_ps(byte(v, s % 4), dmin)
    });
    (sc, m)
}

/// Q4_K: per 64-column chunk `c` of a super-block, the low nibbles are sub-block `2c`,
/// the high ones `2c + 1`; per token and sub-block `s` (one activation block `j`),
/// `d·sc_s·dx_j · Σ q·x̂ − dmin·m_s · dx_j·Σx̂`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q4_k(
    rows: &[u8],
    row_bytes: usize,
    acts: &QuantizedRows,
    tokens: Range<usize>,
    sums: &mut [[f32; ROWS]; MAX_TOKENS],
) {
    let mut acc = [_mm512_setzero_ps(); MAX_TOKENS];
    let acc = &mut acc[..tokens.len()];
    let m4 = _mm512_set1_epi8(0x0f);
    for b in 0..row_bytes / Q4_K_BYTES {
        let (sc, mn) = q4_k_scales(rows, row_bytes, b);
        for c in 0..4 {
            let w = transpose16(rows, row_bytes, Q4_K_BYTES * b + 16 + 32 * c);
            let nib = [
                w.map(|v| _mm512_and_si512(v, m4)),
                w.map(|v| _mm512_and_si512(_mm512_srli_epi16::<4>(v), m4)),
            ];
            for (a, t) in acc.iter_mut().zip(tokens.clone()) {
                let x: ActRow = acts.row(t);
                for (e, q) in nib.iter().enumerate() {
                    let (s, j) = (2 * c + e, 8 * b + 2 * c + e);
                    let xq = &x.qs[32 * j..][..32];
                    let isum = _mm512_add_epi32(dot4(q, 0, xq), dot4(q, 1, xq));
                    let step = _mm512_mul_ps(sc[s], _mm512_set1_ps(x.d[j]));
                    let v = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), step, *a);
                    *a = _mm512_fnmadd_ps(mn[s], _mm512_set1_ps(x.dsums[j]), v);
                }
            }
        }
    }
    store(acc, sums);
}

/// Q4_0, Q4_1, Q5_0, Q5_1 (blocks of `BYTES` bytes: `d`, a minimum `m` when `MIN`, the 32
/// fifth bits when `FIVE`, then 16 bytes of nibbles at `QS`, low nibbles the first 16
/// weights): the unsigned `q` in the lanes, four bytes of each row by gather; per token
/// and block `d·dx · (Σ q·x̂ − off·Σx̂)` with `off` 8 (Q4_0) or 16 (Q5_0), or for the
/// types with a minimum `d·dx · Σ q·x̂ + m · (dx·Σx̂)`, the bracket being `dsums`.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn legacy<const BYTES: usize, const QS: usize, const FIVE: bool, const MIN: bool>(
    rows: &[u8],
    row_bytes: usize,
    acts: &QuantizedRows,
    tokens: Range<usize>,
    sums: &mut [[f32; ROWS]; MAX_TOKENS],
) {
    let mut acc = [_mm512_setzero_ps(); MAX_TOKENS];
    let acc = &mut acc[..tokens.len()];
    let m4 = _mm512_set1_epi8(0x0f);
    let off = match (MIN, FIVE) {
        (true, _) => 0,
        (false, true) => 16,
        (false, false) => 8,
    };
    for b in 0..row_bytes / BYTES {
        let at = BYTES * b;
        let dm = gather(rows, row_bytes, at);
        let (d, m) = (f16_lanes::<false>(dm), f16_lanes::<true>(dm));
        let packed: [__m512i; 4] =
            std::array::from_fn(|k| gather(rows, row_bytes, at + QS + 4 * k));
        // Register k holds weights 4k..4k + 4 of each row: low nibbles, then high ones.
        let mut q: [__m512i; 8] = std::array::from_fn(|k| {
            if k < 4 {
                _mm512_and_si512(packed[k], m4)
            } else {
                _mm512_and_si512(_mm512_srli_epi16::<4>(packed[k - 4]), m4)
            }
        });
        if FIVE {
            let qh = gather(rows, row_bytes, at + QS - 4);
            for (k, qk) in q.iter_mut().enumerate() {
                // Bits 4k..4k + 4 of qh, one to each byte (the multiply places bit i at
                // bit 8i; nothing overlaps), then to bit 4: the fifth bit of q.
                let four = _mm512_and_si512(
                    _mm512_srlv_epi32(qh, _mm512_set1_epi32(4 * k as i32)),
                    _mm512_set1_epi32(0xf),
                );
                let spread = _mm512_and_si512(
                    _mm512_mullo_epi32(four, _mm512_set1_epi32(0x0020_4081)),
                    _mm512_set1_epi32(0x0101_0101),
                );
                *qk = _mm512_or_si512(*qk, _mm512_slli_epi32::<4>(spread));
            }
        }
        for (a, t) in acc.iter_mut().zip(tokens.clone()) {
            let x: ActRow = acts.row(t);
            let xq = &x.qs[32 * b..][..32];
            let mut isum = _mm512_add_epi32(dot4(&q, 0, xq), dot4(&q, 1, xq));
            if off != 0 {
                let xsum = x.sums[2 * b] as i32 + x.sums[2 * b + 1] as i32;
                isum = _mm512_sub_epi32(isum, _mm512_set1_epi32(off * xsum));
            }
            let step = _mm512_mul_ps(d, _mm512_set1_ps(x.d[b]));
            *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), step, *a);
            if MIN {
                *a = _mm512_fmadd_ps(m, _mm512_set1_ps(x.dsums[b]), *a);
            }
        }
    }
    store(acc, sums);
}

/// Byte `k` of each lane of `v`, sign-extended.
#[target_feature(enable = "avx512f")]
fn signed_byte(v: __m512i, k: usize) -> __m512i {
    let up = _mm512_sllv_epi32(v, _mm512_set1_epi32(24 - 8 * k as i32));
    _mm512_srai_epi32::<24>(up)
}

/// Q6_K: per 128-column half `n` of a super-block, the values of its four 32-column
/// groups `g` from the low/high nibbles of `ql` and bit pairs of `qh` (the reference's
/// layout); per token and group (one activation block `j`, sub-blocks `s`, `s + 1`),
/// `d·dx_j · Σ_s sc_s·(Σ q·x̂ − 32·Σx̂)` with the scales multiplied in integers.
#[target_feature(enable = "avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")]
fn q6_k(
    rows: &[u8],
    row_bytes: usize,
    acts: &QuantizedRows,
    tokens: Range<usize>,
    sums: &mut [[f32; ROWS]; MAX_TOKENS],
) {
    let mut acc = [_mm512_setzero_ps(); MAX_TOKENS];
    let acc = &mut acc[..tokens.len()];
    let (m4, m2) = (_mm512_set1_epi8(0x0f), _mm512_set1_epi8(0x30));
    for b in 0..row_bytes / Q6_K_BYTES {
        let base = Q6_K_BYTES * b;
        // `d` is the block's last two bytes: the high half of the dword at 206.
        let d = f16_lanes::<true>(gather(rows, row_bytes, base + 206));
        let scw: [__m512i; 4] =
            std::array::from_fn(|w| gather(rows, row_bytes, base + 192 + 4 * w));
        for n in 0..2 {
            let ql0 = transpose16(rows, row_bytes, base + 64 * n);
            let ql1 = transpose16(rows, row_bytes, base + 64 * n + 32);
            let qh = transpose16(rows, row_bytes, base + 128 + 32 * n);
            for g in 0..4 {
                // Group g: low nibbles of ql0, ql1, then high ones; qh's bit pair g
                // moved to bits 4–5 of each byte.
                let q: [__m512i; 8] = std::array::from_fn(|k| {
                    let (low, high) = match g {
                        0 => (_mm512_and_si512(ql0[k], m4), _mm512_slli_epi16::<4>(qh[k])),
                        1 => (_mm512_and_si512(ql1[k], m4), _mm512_slli_epi16::<2>(qh[k])),
                        2 => (_mm512_and_si512(_mm512_srli_epi16::<4>(ql0[k]), m4), qh[k]),
                        _ => (
                            _mm512_and_si512(_mm512_srli_epi16::<4>(ql1[k]), m4),
                            _mm512_srli_epi16::<2>(qh[k]),
                        ),
                    };
                    _mm512_or_si512(low, _mm512_and_si512(high, m2))
                });
                let s = 8 * n + 2 * g;
                let c0 = signed_byte(scw[s / 4], s % 4);
                let c1 = signed_byte(scw[(s + 1) / 4], (s + 1) % 4);
                let j = 8 * b + 4 * n + g;
                for (a, t) in acc.iter_mut().zip(tokens.clone()) {
                    let x: ActRow = acts.row(t);
                    let xq = &x.qs[32 * j..][..32];
                    let off = |h: usize| _mm512_set1_epi32(32 * x.sums[2 * j + h] as i32);
                    let a0 = _mm512_sub_epi32(dot4(&q, 0, xq), off(0));
                    let a1 = _mm512_sub_epi32(dot4(&q, 1, xq), off(1));
                    let isum =
                        _mm512_add_epi32(_mm512_mullo_epi32(a0, c0), _mm512_mullo_epi32(a1, c1));
                    let step = _mm512_mul_ps(d, _mm512_set1_ps(x.d[j]));
                    *a = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), step, *a);
                }
            }
        }
    }
    store(acc, sums);
}
