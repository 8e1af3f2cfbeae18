//! Chapter 11 — the "legacy" block formats: 32 weights per block, one f16 scale `d`
//! (and, for the `_1` types, an f16 offset `m`), 4, 5 or 8 bits per weight.
//!
//! `_0` types are symmetric, `w = d·(q − zero)`, with `d` chosen from the weight of largest
//! magnitude *keeping its sign* (`d = max / −8` for Q4_0), so that weight lands exactly on
//! the grid's end −8 and the other end (+7) goes unused on that side. `_1` types are affine,
//! `w = d·q + m` with `m` the block minimum and `d = (max − min) / (2^bits − 1)`.
//!
//! The 4-bit weights are packed two per byte, weight `j` in the low nibble of byte `j` and
//! weight `j + 16` in its high nibble; Q5's fifth bits sit together in a 32-bit word `qh`
//! (bit `j` for weight `j`). Every quantiser here is byte-identical to llama.cpp's
//! `quantize_row_*_ref` (f32 arithmetic in the same order, the same truncations).

use super::{f16_at, f16_bytes};

/// Weights per legacy block.
pub const QK: usize = 32;

/// Q4_0: 32 weights in 18 bytes (4.5 bits per weight), `w = d · (q − 8)`, q ∈ 0..=15.
/// ```text
///  byte  0      2                         18
///        [ d:f16 ][ qs[16]: lo nibble = q[j], hi nibble = q[j+16] ]
/// ```
pub const Q4_0_BYTES: usize = 2 + QK / 2;

/// Q4_1: 32 weights in 20 bytes (5 bits per weight), `w = d · q + m`, q ∈ 0..=15.
/// ```text
///  byte  0       2       4                      20
///        [ d:f16 ][ m:f16 ][ qs[16]: q[j] | q[j+16] << 4 ]
/// ```
pub const Q4_1_BYTES: usize = 4 + QK / 2;

/// Q5_0: 32 weights in 22 bytes (5.5 bits per weight), `w = d · (q − 16)`, q ∈ 0..=31.
/// ```text
///  byte  0       2              6                       22
///        [ d:f16 ][ qh:u32 (LE) ][ qs[16]: low 4 bits, q[j] | q[j+16] << 4 ]
///  bit j of qh = bit 4 of q[j]
/// ```
pub const Q5_0_BYTES: usize = 2 + 4 + QK / 2;

/// Q5_1: 32 weights in 24 bytes (6 bits per weight), `w = d · q + m`, q ∈ 0..=31.
/// ```text
///  byte  0       2       4              8                       24
///        [ d:f16 ][ m:f16 ][ qh:u32 (LE) ][ qs[16]: low 4 bits of q[j], q[j+16] ]
/// ```
pub const Q5_1_BYTES: usize = 4 + 4 + QK / 2;

/// Q8_0: 32 weights in 34 bytes (8.5 bits per weight), `w = d · q`, q ∈ −127..=127.
/// ```text
///  byte  0       2                        34
///        [ d:f16 ][ qs[32]: q[j] as i8 ]
/// ```
pub const Q8_0_BYTES: usize = 2 + QK;

// ---------------------------------------------------------------- dequantisers

#[inline]
pub fn dequantize_q4_0(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(Q4_0_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(block);
        let (lo, hi) = y.split_at_mut(QK / 2);
        for ((&q, lo), hi) in block[2..].iter().zip(lo).zip(hi) {
            *lo = d * ((q & 0x0f) as i32 - 8) as f32;
            *hi = d * ((q >> 4) as i32 - 8) as f32;
        }
    }
}

#[inline]
pub fn dequantize_q4_1(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(Q4_1_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(block);
        let m = f16_at(&block[2..]);
        let (lo, hi) = y.split_at_mut(QK / 2);
        for ((&q, lo), hi) in block[4..].iter().zip(lo).zip(hi) {
            *lo = d * (q & 0x0f) as f32 + m;
            *hi = d * (q >> 4) as f32 + m;
        }
    }
}

#[inline]
pub fn dequantize_q5_0(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(Q5_0_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(block);
        let q = q5_values(&block[2..]);
        for (y, &q) in y.iter_mut().zip(&q) {
            *y = d * (q as i32 - 16) as f32;
        }
    }
}

#[inline]
pub fn dequantize_q5_1(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(Q5_1_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(block);
        let m = f16_at(&block[2..]);
        let q = q5_values(&block[4..]);
        for (y, &q) in y.iter_mut().zip(&q) {
            *y = d * q as f32 + m;
        }
    }
}

/// The 32 five-bit values of a Q5 block from its `qh` (4 bytes) and `qs` (16 bytes).
#[inline(always)]
fn q5_values(b: &[u8]) -> [u8; QK] {
    let qh = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    let qs: &[u8; QK / 2] = b[4..4 + QK / 2].try_into().expect("16 bytes");
    let mut q = [0u8; QK];
    // Fixed trip counts: the loops unroll and every shift is a constant.
    for j in 0..QK / 2 {
        q[j] = (qs[j] & 0x0f) | ((((qh >> j) & 1) as u8) << 4);
        q[j + 16] = (qs[j] >> 4) | ((((qh >> (j + 16)) & 1) as u8) << 4);
    }
    q
}

#[inline]
// ANCHOR: dequantize_q8_0
pub fn dequantize_q8_0(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes.chunks_exact(Q8_0_BYTES).zip(out.chunks_exact_mut(QK)) {
        let d = f16_at(block);
        for (&q, y) in block[2..].iter().zip(y) {
            *y = q as i8 as f32 * d;
        }
    }
}
// ANCHOR_END: dequantize_q8_0

// ---------------------------------------------------------------- quantisers

/// The weight of largest magnitude, with its sign (the first one on a tie), as the
/// symmetric quantisers choose it.
fn signed_absmax(x: &[f32]) -> f32 {
    let mut amax = 0.0f32;
    let mut max = 0.0f32;
    for &v in x {
        if amax < v.abs() {
            amax = v.abs();
            max = v;
        }
    }
    max
}

/// (min, max) of a block, from ±f32::MAX as llama.cpp starts them.
fn min_max(x: &[f32]) -> (f32, f32) {
    let mut min = f32::MAX;
    let mut max = -f32::MAX;
    for &v in x {
        if v < min {
            min = v;
        }
        if v > max {
            max = v;
        }
    }
    (min, max)
}

/// `1/d`, or 0 for an all-zero block (every q then lands on the zero point).
fn inverse(d: f32) -> f32 {
    if d != 0.0 { 1.0 / d } else { 0.0 }
}

// ANCHOR: quantize_q4_0
pub fn quantize_q4_0(x: &[f32], out: &mut [u8]) {
    for (x, block) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q4_0_BYTES)) {
        // max → −8 exactly: the sign of d follows the largest weight's.
        let d = signed_absmax(x) / -8.0;
        let id = inverse(d);
        block[..2].copy_from_slice(&f16_bytes(d));
        let (lo, hi) = x.split_at(QK / 2);
        for ((q, &x0), &x1) in block[2..].iter_mut().zip(lo).zip(hi) {
            // +8.5 then truncation: round half up onto 0..=16, then clip 16 to 15.
            let q0 = ((x0 * id + 8.5) as i8).min(15) as u8;
            let q1 = ((x1 * id + 8.5) as i8).min(15) as u8;
            *q = q0 | (q1 << 4);
        }
    }
}
// ANCHOR_END: quantize_q4_0

pub fn quantize_q4_1(x: &[f32], out: &mut [u8]) {
    for (x, block) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q4_1_BYTES)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 15.0;
        let id = inverse(d);
        block[..2].copy_from_slice(&f16_bytes(d));
        block[2..4].copy_from_slice(&f16_bytes(min));
        let (lo, hi) = x.split_at(QK / 2);
        for ((q, &x0), &x1) in block[4..].iter_mut().zip(lo).zip(hi) {
            let q0 = (((x0 - min) * id + 0.5) as i8).min(15) as u8;
            let q1 = (((x1 - min) * id + 0.5) as i8).min(15) as u8;
            *q = q0 | (q1 << 4);
        }
    }
}

/// Packs 32 five-bit values: low nibbles into `qs` (two per byte), fifth bits into `qh`.
fn pack_q5(q: &[u8; QK], qh_out: &mut [u8], qs: &mut [u8]) {
    let mut qh = 0u32;
    for j in 0..QK / 2 {
        qs[j] = (q[j] & 0x0f) | ((q[j + 16] & 0x0f) << 4);
        qh |= ((q[j] as u32 & 0x10) >> 4) << j;
        qh |= ((q[j + 16] as u32 & 0x10) >> 4) << (j + 16);
    }
    qh_out.copy_from_slice(&qh.to_le_bytes());
}

pub fn quantize_q5_0(x: &[f32], out: &mut [u8]) {
    for (x, block) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q5_0_BYTES)) {
        let d = signed_absmax(x) / -16.0;
        let id = inverse(d);
        block[..2].copy_from_slice(&f16_bytes(d));
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            *q = ((v * id + 16.5) as i8).min(31) as u8;
        }
        let (qh, qs) = block[2..].split_at_mut(4);
        pack_q5(&q, qh, qs);
    }
}

pub fn quantize_q5_1(x: &[f32], out: &mut [u8]) {
    for (x, block) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q5_1_BYTES)) {
        let (min, max) = min_max(x);
        let d = (max - min) / 31.0;
        let id = inverse(d);
        block[..2].copy_from_slice(&f16_bytes(d));
        block[2..4].copy_from_slice(&f16_bytes(min));
        let mut q = [0u8; QK];
        for (q, &v) in q.iter_mut().zip(x) {
            // No clip here in llama.cpp: (max − min)·id + 0.5 stays below 32.
            *q = ((v - min) * id + 0.5) as u8;
        }
        let (qh, qs) = block[4..].split_at_mut(4);
        pack_q5(&q, qh, qs);
    }
}

pub fn quantize_q8_0(x: &[f32], out: &mut [u8]) {
    for (x, block) in x.chunks_exact(QK).zip(out.chunks_exact_mut(Q8_0_BYTES)) {
        let amax = x
            .iter()
            .fold(0.0f32, |a, v| if a > v.abs() { a } else { v.abs() });
        let d = amax / 127.0;
        let id = inverse(d);
        block[..2].copy_from_slice(&f16_bytes(d));
        for (q, &v) in block[2..].iter_mut().zip(x) {
            // Round half away from zero (C's roundf), then to i8.
            *q = (v * id).round() as i8 as u8;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: [u8; 2] = [0x00, 0x3c]; // f16 1.0
    const HALF: [u8; 2] = [0x00, 0x38]; // f16 0.5
    const MINUS_TWO: [u8; 2] = [0x00, 0xc0]; // f16 −2.0

    #[test]
    fn q4_0_layout_by_hand() {
        // d = 0.5; byte j = q[j] | q[j+16] << 4 with q[j] = j, q[j+16] = 15 − j.
        let mut block = HALF.to_vec();
        block.extend((0..16u8).map(|j| j | ((15 - j) << 4)));
        let mut y = [0.0; 32];
        dequantize_q4_0(&block, &mut y);
        assert_eq!(y[0], -4.0); // 0.5·(0 − 8)
        assert_eq!(y[8], 0.0); // 0.5·(8 − 8)
        assert_eq!(y[15], 3.5); // 0.5·(15 − 8)
        assert_eq!(y[16], 3.5); // high nibble of byte 0: 15
        assert_eq!(y[31], -4.0); // high nibble of byte 15: 0
    }

    #[test]
    fn q4_0_quantizer_by_hand() {
        // Largest magnitude −4 (negative): d = −4/−8 = 0.5, and −4 → q = 0 exactly.
        let mut x = [0.0f32; 32];
        x[0] = -4.0;
        x[1] = 1.0; // 1/0.5 + 8.5 = 10.5 → 10
        x[2] = 3.6; // 7.2 + 8.5 = 15.7 → 15
        x[16] = -1.25; // −2.5 + 8.5 = 6
        let mut b = [0u8; Q4_0_BYTES];
        quantize_q4_0(&x, &mut b);
        assert_eq!(&b[..2], &HALF);
        assert_eq!(b[2], 6 << 4); // q[0] = 0, q[16] = 6
        assert_eq!(b[3], 8 << 4 | 10); // q[1] = 10, q[17] = 8 (a zero)
        assert_eq!(b[4] & 0x0f, 15);
        // A positive largest weight gives a negative d: 4 → q = 0 again.
        x[0] = 4.0;
        quantize_q4_0(&x, &mut b);
        assert_eq!(&b[..2], &[0x00, 0xb8]); // f16 −0.5
        assert_eq!(b[2] & 0x0f, 0);
    }

    #[test]
    fn q4_1_layout_by_hand() {
        // d = 0.5, m = −2: w = 0.5·q − 2.
        let mut block = HALF.to_vec();
        block.extend_from_slice(&MINUS_TWO);
        block.extend((0..16u8).map(|j| j | (3 << 4)));
        let mut y = [0.0; 32];
        dequantize_q4_1(&block, &mut y);
        assert_eq!(y[0], -2.0);
        assert_eq!(y[4], 0.0);
        assert_eq!(y[15], 5.5);
        assert_eq!(y[16], -0.5);
    }

    #[test]
    fn q5_0_layout_by_hand() {
        // d = 1; all low nibbles 0; fifth bit set for weights 1 and 17 only → q = 16 there.
        let mut block = ONE.to_vec();
        block.extend_from_slice(&((1u32 << 1) | (1 << 17)).to_le_bytes());
        block.extend([0u8; 16]);
        block[6 + 2] = 0xf5; // weight 2: low nibble 5, weight 18: high nibble 15
        let mut y = [0.0; 32];
        dequantize_q5_0(&block, &mut y);
        assert_eq!(y[0], -16.0);
        assert_eq!(y[1], 0.0);
        assert_eq!(y[17], 0.0);
        assert_eq!(y[2], 5.0 - 16.0);
        assert_eq!(y[18], 15.0 - 16.0);
    }

    #[test]
    fn q5_1_layout_by_hand() {
        // d = 0.5, m = 1, every q = 31 (low nibble 15, fifth bit 1): w = 16.5.
        let mut block = HALF.to_vec();
        block.extend_from_slice(&ONE);
        block.extend_from_slice(&u32::MAX.to_le_bytes());
        block.extend([0xffu8; 16]);
        let mut y = [0.0; 32];
        dequantize_q5_1(&block, &mut y);
        assert!(y.iter().all(|&w| w == 16.5));
    }

    #[test]
    fn q8_0_by_hand() {
        // amax 127 → d = 1; 2.5 rounds away from zero to 3, −2.5 to −3.
        let mut x = [0.0f32; 32];
        x[0] = 127.0;
        x[1] = 2.5;
        x[2] = -2.5;
        x[3] = -0.4;
        let mut b = [0u8; Q8_0_BYTES];
        quantize_q8_0(&x, &mut b);
        assert_eq!(&b[..2], &ONE);
        assert_eq!(&b[2..6], &[127, 3, (-3i8) as u8, 0]);
        let mut y = [0.0; 32];
        dequantize_q8_0(&b, &mut y);
        assert_eq!(&y[..4], &[127.0, 3.0, -3.0, 0.0]);
    }

    #[test]
    fn all_zero_blocks_stay_zero() {
        let x = [0.0f32; 32];
        for (quantize, dequantize, n) in [
            (
                quantize_q4_0 as fn(&[f32], &mut [u8]),
                dequantize_q4_0 as fn(&[u8], &mut [f32]),
                Q4_0_BYTES,
            ),
            (quantize_q4_1, dequantize_q4_1, Q4_1_BYTES),
            (quantize_q5_0, dequantize_q5_0, Q5_0_BYTES),
            (quantize_q5_1, dequantize_q5_1, Q5_1_BYTES),
            (quantize_q8_0, dequantize_q8_0, Q8_0_BYTES),
        ] {
            let mut b = vec![0xaau8; n];
            quantize(&x, &mut b);
            let mut y = [1.0f32; 32];
            dequantize(&b, &mut y);
            assert!(y.iter().all(|&w| w == 0.0), "{n}-byte block");
        }
    }
}
