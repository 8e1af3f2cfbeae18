//! Chapter 11 — the float "formats": F32, F16 and BF16, one weight per "block".
//!
//! ```text
//!   F32   [ sign 1 | exponent 8 | mantissa 23 ]   4 bytes, little-endian
//!   F16   [ sign 1 | exponent 5 | mantissa 10 ]   2 bytes
//!   BF16  [ sign 1 | exponent 8 | mantissa  7 ]   2 bytes = the top half of an f32
//! ```
//! BF16 keeps f32's range and drops 16 mantissa bits; F16 keeps more mantissa but overflows
//! above 65504. Widening either to f32 is exact. Narrowing rounds to nearest, ties to even,
//! as ggml does (`ggml_compute_fp32_to_bf16`; a NaN stays a NaN, made quiet).

use half::slice::HalfFloatSliceExt;

/// ggml's f32 → bf16: round to nearest, ties to even, on the bit pattern — add 0x7fff plus
/// the lowest kept bit, then drop the low 16 bits. A NaN would round to infinity that way,
/// so it is truncated instead, with the quiet bit set.
pub fn fp32_to_bf16(v: f32) -> u16 {
    let bits = v.to_bits();
    if bits & 0x7fff_ffff > 0x7f80_0000 {
        return ((bits >> 16) | 64) as u16;
    }
    let lowest_kept = (bits >> 16) & 1;
    (bits.wrapping_add(0x7fff + lowest_kept) >> 16) as u16
}

/// bf16 → f32: the 16 bits become the top half of the f32 (exact).
#[inline(always)]
pub fn bf16_to_fp32(h: u16) -> f32 {
    f32::from_bits((h as u32) << 16)
}

pub fn dequantize_f32(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(4).zip(out.iter_mut()) {
        *y = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
    }
}

pub fn dequantize_f16(bytes: &[u8], out: &mut [f32]) {
    // `half` converts a slice with the CPU's F16C instructions when it has them; the bytes
    // may be unaligned, so they go through a small aligned buffer.
    const CHUNK: usize = 256;
    let mut bits = [half::f16::ZERO; CHUNK];
    for (b, y) in bytes.chunks(2 * CHUNK).zip(out.chunks_mut(CHUNK)) {
        let bits = &mut bits[..y.len()];
        for (h, b) in bits.iter_mut().zip(b.chunks_exact(2)) {
            *h = half::f16::from_bits(u16::from_le_bytes([b[0], b[1]]));
        }
        bits.convert_to_f32_slice(y);
    }
}

pub fn dequantize_bf16(bytes: &[u8], out: &mut [f32]) {
    for (b, y) in bytes.chunks_exact(2).zip(out.iter_mut()) {
        *y = bf16_to_fp32(u16::from_le_bytes([b[0], b[1]]));
    }
}

pub fn quantize_f32(x: &[f32], out: &mut [u8]) {
    for (v, b) in x.iter().zip(out.chunks_exact_mut(4)) {
        b.copy_from_slice(&v.to_le_bytes());
    }
}

pub fn quantize_f16(x: &[f32], out: &mut [u8]) {
    for (v, b) in x.iter().zip(out.chunks_exact_mut(2)) {
        b.copy_from_slice(&super::f16_bytes(*v));
    }
}

pub fn quantize_bf16(x: &[f32], out: &mut [u8]) {
    for (v, b) in x.iter().zip(out.chunks_exact_mut(2)) {
        b.copy_from_slice(&fp32_to_bf16(*v).to_le_bytes());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bf16_rounds_to_nearest_even() {
        // 1 + 2^-8 is exactly half-way between bf16 1.0 (0x3f80) and 1 + 2^-7 (0x3f81):
        // ties go to the even mantissa, 0x3f80.
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8000)), 0x3f80);
        // 0x3f81_8000 is half-way between 0x3f81 and 0x3f82: ties to even gives 0x3f82.
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f81_8000)), 0x3f82);
        // Just above half-way rounds up; just below rounds down.
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_8001)), 0x3f81);
        assert_eq!(fp32_to_bf16(f32::from_bits(0x3f80_7fff)), 0x3f80);
        assert_eq!(fp32_to_bf16(-2.0), 0xc000);
        // The largest finite f32 rounds up to infinity, as ggml's does.
        assert_eq!(fp32_to_bf16(f32::MAX), 0x7f80);
    }

    #[test]
    fn bf16_keeps_nan_quiet() {
        // A signalling NaN whose payload sits only in the low 16 bits would truncate to
        // infinity; the quiet bit (bit 6 of the bf16) keeps it a NaN.
        assert_eq!(fp32_to_bf16(f32::from_bits(0x7f80_0001)), 0x7fc0);
        assert!(bf16_to_fp32(fp32_to_bf16(f32::NAN)).is_nan());
    }

    #[test]
    fn f16_layout() {
        // 1.0 = 0x3c00, -2.0 = 0xc000, 65504 = 0x7bff (the largest f16).
        let bytes = [0x00, 0x3c, 0x00, 0xc0, 0xff, 0x7b];
        let mut y = [0.0; 3];
        dequantize_f16(&bytes, &mut y);
        assert_eq!(y, [1.0, -2.0, 65504.0]);
        let mut back = [0u8; 6];
        quantize_f16(&y, &mut back);
        assert_eq!(back, bytes);
    }
}
