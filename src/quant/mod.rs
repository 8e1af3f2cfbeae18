//! Chapter 11 — block quantisation: the formats llama.cpp's GGUF files store weights in.
//!
//! Source: ggml's block formats (ggml-common.h, ggml-quants.c) as chapter 11 lays them out.
//!
//! The idea: a quantised row is a run of fixed-size blocks; each block holds a few scales
//! (f16) and packed small integers, and stands for 32 (the "legacy" types) or 256 (the K
//! types) consecutive weights. A weight is `d·q` (symmetric types) or `d·q + m` / `d·q − m`
//! (types with a minimum). The K types add a second level: the 256-weight super-block has one
//! f16 scale, and each 16- or 32-weight sub-block a small integer scale relative to it.
//!
//! This module has, for every type of [`GgmlType`], the block layout (a diagram in each
//! file's docs), a clear dequantiser (bytes → f32) and a quantiser (f32 → bytes) that writes
//! the bytes llama.cpp's reference quantiser writes without an importance matrix:
//! - [`legacy`]: Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (32-weight blocks);
//! - [`k_blocks`]: Q4_K, Q5_K, Q6_K layouts and dequantisers; [`k_quantize`]: their quantisers;
//! - [`floats`]: F32, F16, BF16;
//! - [`range`]: the largest weight each format holds, and a quantiser that refuses more.
//!
//! Dequantisers equal gguf-py's `gguf.quants.dequantize` bit for bit on blocks written by
//! llama.cpp; the legacy quantisers equal llama.cpp byte for byte, the K quantisers too, or
//! within 2 % of its reconstruction error (tests/quant.rs, fixtures from
//! scripts/gen_quant_fixtures.py).

pub mod floats;
pub mod k_blocks;
pub mod k_quantize;
pub mod legacy;
pub mod mix;
pub mod range;

/// A tensor element type of ggml, with its on-disk id (the `ggml_type` enum of ggml.h).
/// Only the types this crate reads and writes are listed; a GGUF tensor of any other type
/// is refused by name when the file is opened.
// ggml's own names (Q4_K, not Q4K), so the code reads beside ggml-common.h.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum GgmlType {
    F32,
    F16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K,
    Q5_K,
    Q6_K,
    Bf16,
}

/// Every supported type, in id order.
pub const ALL_TYPES: [GgmlType; 11] = [
    GgmlType::F32,
    GgmlType::F16,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q5_K,
    GgmlType::Q6_K,
    GgmlType::Bf16,
];

/// Weights per super-block of the K types.
pub const QK_K: usize = 256;

impl GgmlType {
    /// The id ggml writes into a GGUF tensor info.
    pub fn id(self) -> u32 {
        match self {
            GgmlType::F32 => 0,
            GgmlType::F16 => 1,
            GgmlType::Q4_0 => 2,
            GgmlType::Q4_1 => 3,
            GgmlType::Q5_0 => 6,
            GgmlType::Q5_1 => 7,
            GgmlType::Q8_0 => 8,
            GgmlType::Q4_K => 12,
            GgmlType::Q5_K => 13,
            GgmlType::Q6_K => 14,
            GgmlType::Bf16 => 30,
        }
    }

    pub fn from_id(id: u32) -> Option<GgmlType> {
        ALL_TYPES.into_iter().find(|t| t.id() == id)
    }

    /// ggml's name for the type (`"q4_K"`, `"bf16"`, ...), as gguf-py and llama.cpp print it.
    pub fn name(self) -> &'static str {
        match self {
            GgmlType::F32 => "f32",
            GgmlType::F16 => "f16",
            GgmlType::Q4_0 => "q4_0",
            GgmlType::Q4_1 => "q4_1",
            GgmlType::Q5_0 => "q5_0",
            GgmlType::Q5_1 => "q5_1",
            GgmlType::Q8_0 => "q8_0",
            GgmlType::Q4_K => "q4_K",
            GgmlType::Q5_K => "q5_K",
            GgmlType::Q6_K => "q6_K",
            GgmlType::Bf16 => "bf16",
        }
    }

    /// Weights per block (1 for the float types).
    pub fn block_size(self) -> usize {
        match self {
            GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16 => 1,
            GgmlType::Q4_0 | GgmlType::Q4_1 | GgmlType::Q5_0 | GgmlType::Q5_1 | GgmlType::Q8_0 => {
                32
            }
            GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K => QK_K,
        }
    }

    /// Bytes per block.
    pub fn block_bytes(self) -> usize {
        match self {
            GgmlType::F32 => 4,
            GgmlType::F16 | GgmlType::Bf16 => 2,
            GgmlType::Q4_0 => 2 + 16,
            GgmlType::Q4_1 => 2 + 2 + 16,
            GgmlType::Q5_0 => 2 + 4 + 16,
            GgmlType::Q5_1 => 2 + 2 + 4 + 16,
            GgmlType::Q8_0 => 2 + 32,
            GgmlType::Q4_K => 2 + 2 + 12 + 128,
            GgmlType::Q5_K => 2 + 2 + 12 + 32 + 128,
            GgmlType::Q6_K => 128 + 64 + 16 + 2,
        }
    }

    /// Bits per weight, scales included (Q4_K: 4.5).
    pub fn bits_per_weight(self) -> f64 {
        8.0 * self.block_bytes() as f64 / self.block_size() as f64
    }

    /// Bytes of a row of `n` weights, or `None` when `n` is not a whole number of blocks
    /// (or the product overflows).
    pub fn row_bytes(self, n: u64) -> Option<u64> {
        let b = self.block_size() as u64;
        if !n.is_multiple_of(b) {
            return None;
        }
        (n / b).checked_mul(self.block_bytes() as u64)
    }
}

/// Dequantises a whole number of blocks: `out.len()` weights from `ty.row_bytes(out.len())`
/// bytes.
///
/// # Panics
/// When `bytes.len()` is not exactly `ty.row_bytes(out.len())` — a programming error: callers
/// check sizes (against the file) before they get here.
#[inline]
pub fn dequantize(ty: GgmlType, bytes: &[u8], out: &mut [f32]) {
    let want = ty.row_bytes(out.len() as u64);
    assert_eq!(
        want,
        Some(bytes.len() as u64),
        "{} dequantize: {} bytes for {} weights",
        ty.name(),
        bytes.len(),
        out.len()
    );
    match ty {
        GgmlType::F32 => floats::dequantize_f32(bytes, out),
        GgmlType::F16 => floats::dequantize_f16(bytes, out),
        GgmlType::Bf16 => floats::dequantize_bf16(bytes, out),
        GgmlType::Q4_0 => legacy::dequantize_q4_0(bytes, out),
        GgmlType::Q4_1 => legacy::dequantize_q4_1(bytes, out),
        GgmlType::Q5_0 => legacy::dequantize_q5_0(bytes, out),
        GgmlType::Q5_1 => legacy::dequantize_q5_1(bytes, out),
        GgmlType::Q8_0 => legacy::dequantize_q8_0(bytes, out),
        GgmlType::Q4_K => k_blocks::dequantize_q4_k(bytes, out),
        GgmlType::Q5_K => k_blocks::dequantize_q5_k(bytes, out),
        GgmlType::Q6_K => k_blocks::dequantize_q6_k(bytes, out),
    }
}

/// Quantises `x` and appends its `ty.row_bytes(x.len())` bytes to `out`: the bytes
/// llama.cpp's quantiser writes without an importance matrix.
///
/// # Panics
/// When `x.len()` is not a multiple of `ty.block_size()` or `x` holds a NaN or an infinity
/// (programming errors: the caller picks the type for the shape, and checks its inputs).
pub fn quantize(ty: GgmlType, x: &[f32], out: &mut Vec<u8>) {
    let n = ty.row_bytes(x.len() as u64).unwrap_or_else(|| {
        panic!(
            "{} quantize: {} weights is not whole blocks",
            ty.name(),
            x.len()
        )
    });
    assert!(
        x.iter().all(|v| v.is_finite()),
        "{} quantize: non-finite input",
        ty.name()
    );
    let start = out.len();
    out.resize(start + n as usize, 0);
    let dst = &mut out[start..];
    match ty {
        GgmlType::F32 => floats::quantize_f32(x, dst),
        GgmlType::F16 => floats::quantize_f16(x, dst),
        GgmlType::Bf16 => floats::quantize_bf16(x, dst),
        GgmlType::Q4_0 => legacy::quantize_q4_0(x, dst),
        GgmlType::Q4_1 => legacy::quantize_q4_1(x, dst),
        GgmlType::Q5_0 => legacy::quantize_q5_0(x, dst),
        GgmlType::Q5_1 => legacy::quantize_q5_1(x, dst),
        GgmlType::Q8_0 => legacy::quantize_q8_0(x, dst),
        GgmlType::Q4_K => k_quantize::quantize_q4_k(x, dst),
        GgmlType::Q5_K => k_quantize::quantize_q5_k(x, dst),
        GgmlType::Q6_K => k_quantize::quantize_q6_k(x, dst),
    }
}

/// The f16 stored little-endian at `b[0..2]`, widened (exactly) to f32.
#[inline(always)]
fn f16_at(b: &[u8]) -> f32 {
    half::f16::from_bits(u16::from_le_bytes([b[0], b[1]])).to_f32()
}

/// `v` rounded to the nearest f16 (ties to even), as ggml's `GGML_FP32_TO_FP16`, little-endian.
#[inline(always)]
fn f16_bytes(v: f32) -> [u8; 2] {
    half::f16::from_f32(v).to_bits().to_le_bytes()
}

/// ggml's `nearest_int`: round to nearest, ties to even, by adding 1.5·2²³ so that the
/// integer lands in the low mantissa bits. Exact for |v| ≤ 2²² − 1; outside that range it
/// returns what ggml's returns (garbage, but the same garbage, and no panic).
#[inline(always)]
fn nearest_int(v: f32) -> i32 {
    let bits = (v + 12_582_912.0f32).to_bits() as i32;
    (bits & 0x007f_ffff) - 0x0040_0000
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_int_rounds_ties_to_even() {
        assert_eq!(nearest_int(0.5), 0);
        assert_eq!(nearest_int(1.5), 2);
        assert_eq!(nearest_int(2.5), 2);
        assert_eq!(nearest_int(-0.5), 0);
        assert_eq!(nearest_int(-1.5), -2);
        assert_eq!(nearest_int(-2.4), -2);
        assert_eq!(nearest_int(31.49), 31);
    }

    #[test]
    fn dispatch_sizes() {
        for ty in ALL_TYPES {
            let x: Vec<f32> = (0..QK_K).map(|i| (i as f32 - 128.0) / 64.0).collect();
            let mut bytes = Vec::new();
            quantize(ty, &x, &mut bytes);
            assert_eq!(
                bytes.len() as u64,
                ty.row_bytes(QK_K as u64).unwrap(),
                "{}",
                ty.name()
            );
            let mut y = vec![0.0; QK_K];
            dequantize(ty, &bytes, &mut y);
        }
    }

    #[test]
    #[should_panic(expected = "bytes for")]
    fn dequantize_refuses_a_wrong_length() {
        dequantize(GgmlType::Q8_0, &[0; 33], &mut [0.0; 32]);
    }
}
