//! Chapter 11 — block quantisation: the formats llama.cpp's GGUF files store weights in.
//!
//! A quantised row is a run of fixed-size blocks; each block holds a few scales (f16) and
//! packed small integers, and stands for 32 (the "legacy" types) or 256 (the K types)
//! consecutive weights. This module has, for every type a Q4_K_M / Q5_K_M / Q6_K / Q8_0
//! file contains, the block layout, a clear dequantiser (bytes → f32) and a quantiser
//! (f32 → bytes) that writes the blocks llama.cpp's own quantiser writes.
//!
//! Dequantisers equal gguf-py's `gguf.quants.dequantize` bit for bit on blocks written by
//! llama.cpp (tests/quant.rs, fixtures from scripts/gen_gguf_fixtures.py).

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
        if n % b != 0 {
            return None;
        }
        (n / b).checked_mul(self.block_bytes() as u64)
    }
}

/// Which type each tensor of a file gets (llama.cpp's quantisation mix).
pub mod mix;
