//! The one table of which kernels each weight type has, in the spirit of ggml's
//! `type_traits_cpu`: a row per type, read by every "does `ty` have …" question of the
//! matmuls (`quant::activation_block`, `has_tiles`, `has_decode`, `has_vnni`, `wins`), so a
//! new type's kernels are added here and nowhere else. Every type has the dequantise-row
//! path (f32 tiles on its rows widened a row block at a time), so every type in
//! [`crate::quant::ALL_TYPES`] has a matvec.

use super::policy::CpuFeatures;
use crate::quant::GgmlType;

/// Groups of at least this many tokens take the VNNI row lanes (16 rows a register).
pub const LANES_MIN_TOKENS: usize = 4;

/// The kernels of one weight type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeKernels {
    pub ty: GgmlType,
    /// The int8 dot (reference and AVX2 row dot) and its activation block, if any.
    pub act_block: Option<usize>,
    /// AVX2 int8 register tiles (small groups) and decode row kernels (one token).
    pub avx2_int8_tiles: bool,
    /// AVX512_VNNI int8 tiles and row lanes, and the smallest group they beat AVX2 at.
    pub vnni_from_tokens: Option<usize>,
    /// Native AVX512_BF16 dot products (the weights read as stored).
    pub native_bf16: bool,
}

const fn row(ty: GgmlType, act_block: Option<usize>) -> TypeKernels {
    TypeKernels {
        ty,
        act_block,
        avx2_int8_tiles: false,
        vnni_from_tokens: None,
        native_bf16: false,
    }
}

/// Q8_0 takes two 16-value activation blocks per weight block (with 32 the dense q8_0
/// fixture's KL exceeded llama.cpp's); the others 32, also the K types (a block per
/// sub-block keeps the error below llama.cpp's 256-value Q8_K blocks). VNNI: Q8_0 and
/// Q6_K win from 2 tokens; Q4_K, whose f32 scaling per row and token eats the gain of
/// the tiles, from the lanes on.
pub const TABLE: [TypeKernels; 11] = [
    row(GgmlType::F32, None),
    TypeKernels {
        native_bf16: true,
        ..row(GgmlType::Bf16, None)
    },
    row(GgmlType::F16, None),
    TypeKernels {
        avx2_int8_tiles: true,
        vnni_from_tokens: Some(2),
        ..row(GgmlType::Q8_0, Some(16))
    },
    row(GgmlType::Q4_0, Some(32)),
    row(GgmlType::Q4_1, Some(32)),
    row(GgmlType::Q5_0, Some(32)),
    row(GgmlType::Q5_1, Some(32)),
    TypeKernels {
        avx2_int8_tiles: true,
        vnni_from_tokens: Some(LANES_MIN_TOKENS),
        ..row(GgmlType::Q4_K, Some(32))
    },
    row(GgmlType::Q5_K, Some(32)),
    TypeKernels {
        avx2_int8_tiles: true,
        vnni_from_tokens: Some(2),
        ..row(GgmlType::Q6_K, Some(32))
    },
];

/// The table's row for `ty`.
pub fn kernels(ty: GgmlType) -> TypeKernels {
    TABLE
        .iter()
        .find(|k| k.ty == ty)
        .copied()
        .unwrap_or(row(ty, None))
}

/// The kernels `ty` can run on `cpu`, named (what `kernel_dispatch` prints).
pub fn names(ty: GgmlType, cpu: CpuFeatures) -> Vec<&'static str> {
    let k = kernels(ty);
    let mut out = vec!["portable f32 dot (rows widened)"];
    if cpu.avx2_fma() {
        out.push("avx2 f32 tiles");
    }
    if cpu.avx512f {
        out.push("avx512 f32 tiles + outer-product gemm");
    }
    if k.act_block.is_some() {
        out.push("int8 reference dot");
        if cpu.avx2 {
            out.push("avx2 int8 row dot");
        }
    }
    if k.avx2_int8_tiles && cpu.avx2_fma() {
        out.push("avx2 int8 tiles + decode rows");
    }
    if k.vnni_from_tokens.is_some() && cpu.vnni() {
        out.push("avx512 vnni tiles + row lanes");
    }
    if k.native_bf16 && cpu.bf16() {
        out.push("avx512 bf16 tiles (split/round)");
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_type_has_one_row() {
        for ty in crate::quant::ALL_TYPES {
            assert_eq!(
                TABLE.iter().filter(|k| k.ty == ty).count(),
                1,
                "{}",
                ty.name()
            );
        }
    }
}
