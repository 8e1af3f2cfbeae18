//! Chapter 11 — the K formats' layouts and dequantisers: 256-weight super-blocks with
//! two levels of scale.
//!
//! A super-block has one f16 scale `d` (and for Q4_K / Q5_K an f16 `dmin`); each sub-block
//! (8 × 32 weights for Q4_K / Q5_K, 16 × 16 for Q6_K) stores a small integer scale relative
//! to it, so a sub-block's step is `d · sc` in 6 or 8 bits instead of a whole f16. The
//! quantisers are in [`super::k_quantize`].
//!
//! Q4_K and Q5_K pack eight 6-bit scales `sc` and eight 6-bit mins `m` into 12 bytes:
//! ```text
//!  byte   7 6 | 5 4 3 2 1 0
//!   0-3   sc[4..8] bits 4-5 | sc[0..4]        (byte j: sc[j] low 6, top 2 bits of sc[j+4])
//!   4-7   m[4..8]  bits 4-5 | m[0..4]         (byte j+4: m[j], top 2 bits of m[j+4])
//!   8-11  m[j+4] bits 0-3 (high nibble) | sc[j+4] bits 0-3 (low nibble)
//! ```

use super::{QK_K, f16_at};

/// The 6-bit scale and min of sub-block `j` (0..8) of a Q4_K / Q5_K super-block, from its
/// 12 packed bytes (the diagram above).
#[inline(always)]
pub fn scale_min_k4(j: usize, scales: &[u8]) -> (u8, u8) {
    if j < 4 {
        (scales[j] & 63, scales[j + 4] & 63)
    } else {
        let sc = (scales[j + 4] & 0x0f) | ((scales[j - 4] >> 6) << 4);
        let m = (scales[j + 4] >> 4) | ((scales[j] >> 6) << 4);
        (sc, m)
    }
}

/// Packs eight 6-bit scales and mins (each ≤ 63) into the 12 bytes [`scale_min_k4`] reads.
pub fn pack_scale_min_k4(sc: &[u8; 8], m: &[u8; 8], out: &mut [u8]) {
    for j in 0..4 {
        out[j] = sc[j] | ((sc[j + 4] >> 4) << 6);
        out[j + 4] = m[j] | ((m[j + 4] >> 4) << 6);
        out[j + 8] = (sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4);
    }
}

/// Q4_K: 256 weights in 144 bytes (4.5 bits per weight). Sub-block `s` (32 weights):
/// `w = (d·sc[s])·q − (dmin·m[s])`, q ∈ 0..=15.
/// ```text
///  byte 0      2         4            16                         144
///       [ d:f16 ][ dmin:f16 ][ scales[12] ][ qs[128]                  ]
///  qs: four 32-byte chunks c = 0..4; byte l of chunk c holds
///      weight 64c + l      (sub-block 2c)   in its low nibble,
///      weight 64c + 32 + l (sub-block 2c+1) in its high nibble.
/// ```
pub const Q4_K_BYTES: usize = 2 + 2 + 12 + QK_K / 2;

/// Q5_K: 256 weights in 176 bytes (5.5 bits per weight): Q4_K plus a fifth bit per weight.
/// `w = (d·sc[s])·q − (dmin·m[s])`, q ∈ 0..=31.
/// ```text
///  byte 0      2         4            16          48                 176
///       [ d:f16 ][ dmin:f16 ][ scales[12] ][ qh[32] ][ qs[128]           ]
///  qs as Q4_K (low 4 bits); bit g of qh[l] is the fifth bit of weight 32g + l.
/// ```
pub const Q5_K_BYTES: usize = 2 + 2 + 12 + QK_K / 8 + QK_K / 2;

/// Q6_K: 256 weights in 210 bytes (6.5625 bits per weight). Sub-block `s` (16 weights):
/// `w = (d·scales[s])·(q − 32)`, q ∈ 0..=63, `scales[s]` an i8. No minimum.
/// ```text
///  byte 0                 128         192              208      210
///       [ ql[128]           ][ qh[64]    ][ scales[16]:i8 ][ d:f16 ]
///  two halves h = 0..2 of 128 weights, each with ql[64h..64h+64], qh[32h..32h+32];
///  for l in 0..32, the weights 128h + l + 32k (k = 0..4) take
///      low 4 bits:  k=0 ql[l] lo, k=1 ql[l+32] lo, k=2 ql[l] hi, k=3 ql[l+32] hi
///      high 2 bits: bits 2k..2k+2 of qh[l]
/// ```
pub const Q6_K_BYTES: usize = QK_K / 2 + QK_K / 4 + QK_K / 16 + 2;

#[inline]
// ANCHOR: dequantize_q4_k
pub fn dequantize_q4_k(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes
        .chunks_exact(Q4_K_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let d = f16_at(block);
        let dmin = f16_at(&block[2..]);
        let scales = &block[4..16];
        let qs = &block[16..];
        for (c, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
            let (sc_lo, m_lo) = scale_min_k4(2 * c, scales);
            let (sc_hi, m_hi) = scale_min_k4(2 * c + 1, scales);
            let (d_lo, min_lo) = (d * sc_lo as f32, dmin * m_lo as f32);
            let (d_hi, min_hi) = (d * sc_hi as f32, dmin * m_hi as f32);
            let (y_lo, y_hi) = y.split_at_mut(32);
            for ((&q, lo), hi) in q.iter().zip(y_lo).zip(y_hi) {
                *lo = d_lo * (q & 0x0f) as f32 - min_lo;
                *hi = d_hi * (q >> 4) as f32 - min_hi;
            }
        }
    }
}
// ANCHOR_END: dequantize_q4_k

#[inline]
pub fn dequantize_q5_k(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes
        .chunks_exact(Q5_K_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let d = f16_at(block);
        let dmin = f16_at(&block[2..]);
        let scales = &block[4..16];
        let qh = &block[16..48];
        let qs = &block[48..];
        for (c, (q, y)) in qs.chunks_exact(32).zip(y.chunks_exact_mut(64)).enumerate() {
            let (sc_lo, m_lo) = scale_min_k4(2 * c, scales);
            let (sc_hi, m_hi) = scale_min_k4(2 * c + 1, scales);
            let (d_lo, min_lo) = (d * sc_lo as f32, dmin * m_lo as f32);
            let (d_hi, min_hi) = (d * sc_hi as f32, dmin * m_hi as f32);
            let (y_lo, y_hi) = y.split_at_mut(32);
            let (bit_lo, bit_hi) = (1u8 << (2 * c), 1u8 << (2 * c + 1));
            for (((&q, &h), lo), hi) in q.iter().zip(qh).zip(y_lo).zip(y_hi) {
                let q_lo = (q & 0x0f) + if h & bit_lo != 0 { 16 } else { 0 };
                let q_hi = (q >> 4) + if h & bit_hi != 0 { 16 } else { 0 };
                *lo = d_lo * q_lo as f32 - min_lo;
                *hi = d_hi * q_hi as f32 - min_hi;
            }
        }
    }
}

#[inline]
pub fn dequantize_q6_k(bytes: &[u8], out: &mut [f32]) {
    for (block, y) in bytes
        .chunks_exact(Q6_K_BYTES)
        .zip(out.chunks_exact_mut(QK_K))
    {
        let (ql, rest) = block.split_at(QK_K / 2);
        let (qh, rest) = rest.split_at(QK_K / 4);
        let (scales, d) = rest.split_at(QK_K / 16);
        let d = f16_at(d);
        // One step per 16-weight sub-block: d · scale.
        let mut step = [0.0f32; QK_K / 16];
        for (s, &sc) in step.iter_mut().zip(scales) {
            *s = d * sc as i8 as f32;
        }
        for (h, y) in y.chunks_exact_mut(128).enumerate() {
            let ql = &ql[64 * h..64 * h + 64];
            let qh = &qh[32 * h..32 * h + 32];
            let step = &step[8 * h..8 * h + 8];
            for l in 0..32 {
                let q = [
                    (ql[l] & 0x0f) | ((qh[l] & 3) << 4),
                    (ql[l + 32] & 0x0f) | (((qh[l] >> 2) & 3) << 4),
                    (ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4),
                    (ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4),
                ];
                for (k, &q) in q.iter().enumerate() {
                    // weight 32k + l of this half is in sub-block 2k + l/16.
                    y[32 * k + l] = step[2 * k + l / 16] * (q as i32 - 32) as f32;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: [u8; 2] = [0x00, 0x3c]; // f16 1.0
    const HALF: [u8; 2] = [0x00, 0x38]; // f16 0.5

    #[test]
    fn scale_min_packing_round_trips() {
        // Values using all 6 bits, so the top-2-bit fields are exercised.
        let sc = [1, 63, 17, 32, 48, 5, 62, 33];
        let m = [0, 40, 63, 2, 31, 60, 16, 47];
        let mut packed = [0u8; 12];
        pack_scale_min_k4(&sc, &m, &mut packed);
        for j in 0..8 {
            assert_eq!(scale_min_k4(j, &packed), (sc[j], m[j]), "sub-block {j}");
        }
        // By hand: byte 0 = sc[0] | top two bits of sc[4] (48 = 0b11_0000 → 0b11) << 6.
        assert_eq!(packed[0], 1 | (3 << 6));
        // byte 8 = low nibble of sc[4] (0) | low nibble of m[4] (31 & 15 = 15) << 4.
        assert_eq!(packed[8], 15 << 4);
    }

    fn q4_k_block(sc: [u8; 8], m: [u8; 8], qs: impl Fn(usize) -> u8) -> Vec<u8> {
        let mut b = ONE.to_vec(); // d = 1
        b.extend_from_slice(&HALF); // dmin = 0.5
        let mut packed = [0u8; 12];
        pack_scale_min_k4(&sc, &m, &mut packed);
        b.extend_from_slice(&packed);
        b.extend((0..128).map(qs));
        b
    }

    #[test]
    fn q4_k_layout_by_hand() {
        // Sub-block s has scale s+1 and min 2s; every byte's low nibble 3, high nibble 7.
        let sc = [1, 2, 3, 4, 5, 6, 7, 8];
        let m = [0, 2, 4, 6, 8, 10, 12, 14];
        let b = q4_k_block(sc, m, |_| 3 | (7 << 4));
        let mut y = [0.0; QK_K];
        dequantize_q4_k(&b, &mut y);
        // weight 0: sub-block 0, low nibble: 1·1·3 − 0.5·0 = 3.
        assert_eq!(y[0], 3.0);
        // weight 32: sub-block 1, high nibble of byte 0: 2·7 − 0.5·2 = 13.
        assert_eq!(y[32], 13.0);
        // weight 64: chunk 1, sub-block 2, low nibble: 3·3 − 0.5·4 = 7.
        assert_eq!(y[64], 7.0);
        // weight 255: sub-block 7, high nibble: 8·7 − 0.5·14 = 49.
        assert_eq!(y[255], 49.0);
    }

    #[test]
    fn q5_k_layout_by_hand() {
        // Scales 1, mins 0; low nibbles all 0; qh[l] = 0b0000_0100: weights 64 + l get 16.
        let mut b = ONE.to_vec();
        b.extend_from_slice(&HALF);
        let mut packed = [0u8; 12];
        pack_scale_min_k4(&[1; 8], &[0; 8], &mut packed);
        b.extend_from_slice(&packed);
        b.extend([0b100u8; 32]);
        b.extend([0u8; 128]);
        b[48 + 32 + 5] = 0x90; // chunk 1, byte 5: weight 69 low nibble 0, weight 101 high 9
        let mut y = [0.0; QK_K];
        dequantize_q5_k(&b, &mut y);
        assert_eq!(y[0], 0.0);
        assert_eq!(y[64], 16.0);
        assert_eq!(y[69], 16.0);
        assert_eq!(y[95], 16.0);
        assert_eq!(y[96], 0.0);
        assert_eq!(y[101], 9.0);
    }

    #[test]
    fn q6_k_layout_by_hand() {
        // d = 0.5, scales[s] = s − 8 (negative ones too), q = 32 + 1 everywhere except a few.
        let mut b = vec![0u8; Q6_K_BYTES];
        // q = 33 = 0b10_0001: low nibble 1, high bits 0b10 in every 2-bit field.
        b[..128].fill(0x11);
        b[128..192].fill(0b1010_1010);
        for s in 0..16 {
            b[192 + s] = (s as i8 - 8) as u8;
        }
        b[208..].copy_from_slice(&HALF);
        // Weight 128 + 64 + 3 (half 1, k = 2, l = 3): high nibble of ql[64 + 3] → 15,
        // so q = 15 | 0b10 << 4 = 47 → 47 − 32 = 15, in sub-block 8 + 4 + 0 = 12 (scale 4).
        b[64 + 3] = 0xf1;
        let mut y = [0.0; QK_K];
        dequantize_q6_k(&b, &mut y);
        assert_eq!(y[0], 0.5 * -8.0); // sub-block 0, scale −8, q − 32 = 1
        assert_eq!(y[16], 0.5 * -7.0); // sub-block 1
        assert_eq!(y[255], 0.5 * 7.0); // sub-block 15
        assert_eq!(y[128 + 64 + 3], 0.5 * 4.0 * 15.0);
        assert_eq!(y[128 + 3], 0.5 * 0.0 * 1.0); // sub-block 8, scale 0
    }
}
