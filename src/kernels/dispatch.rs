//! The one table of which kernels each weight type has, in the spirit of ggml's
//! `type_traits_cpu`: a row per type, read by every "does `ty` have …" question of the
//! matmuls (`quant::activation_block`, `has_tiles`, `has_decode`, `has_vnni`, `wins`), so a
//! new type's kernels are added here and nowhere else. Every type has the dequantise-row
//! path (f32 tiles on its rows widened a row block at a time), so every type in
//! [`crate::quant::ALL_TYPES`] has a matvec.

use super::policy::{Bf16Mode, CpuFeatures, Policy, QuantActs, cpu};
use crate::quant::GgmlType;

/// Groups of at least this many tokens take the VNNI row lanes (16 rows a register).
pub const LANES_MIN_TOKENS: usize = 4;

/// Groups of at least this many tokens of Q8_0, Q4_K and Q6_K take the AVX2 row lanes
/// (fewer: the int8 tiles): where `examples/matmul_gflops` on the AVX2-only CPU measured
/// the lanes ahead of the tiles (Q6_K's unpacking costs more, three transposes and a
/// gather of scales per 256 weights; Q8_0's a transpose per 32).
pub const AVX2_LANES_MIN_TOKENS_Q8_0: usize = 8;
pub const AVX2_LANES_MIN_TOKENS_Q4_K: usize = 3;
pub const AVX2_LANES_MIN_TOKENS_Q6_K: usize = 6;

/// Groups of at most this many token rows take the int8 path when it is on, for the
/// types without register tiles (decode).
pub const INT8_MAX_TOKENS: usize = 4;

/// Groups of a matmul of a type with register tiles take the int8 path up to this many
/// token rows; bigger ones (prefill's attention projections, busy experts) dequantise a
/// row block to f32 once and run the f32 kernels, which amortise it better. The switch is
/// the largest group at which the AVX2 int8 tiles still beat the f32 kernels on the
/// AVX2-only CPUs measured (VNNI CPUs take the row lanes instead), by
/// `examples/matmul_gflops` at 2–64 tokens: at 12 tokens Q8_0's int8 tiles ran about a
/// third faster than the outer-product panels, at 16 level with them (chapter 10's
/// Reproducing page has the figures and the CPU). Since Q8_0, Q4_K and Q6_K gained AVX2
/// row lanes, which keep every group of those types on the int8 path, it bounds only a
/// tiled type without lanes.
pub const INT8_TILED_MAX_TOKENS: usize = 12;

/// With the VNNI kernels, groups take the int8 path up to this many token rows, that is,
/// every group: the row lanes cost the same per token however many there are (passes of
/// 64) and beat the f32 path (dequantised rows, outer products) at every group size
/// `vnni::tests::vnni_timing` measures.
pub const INT8_LANES_MAX_TOKENS: usize = usize::MAX;

/// Groups with at least this many input rows use the outer-product kernel (`gemm_block`;
/// below it, the register tiles' dot products waste less than the panels' padding and the
/// widening cost; f32 weights, twice the bytes per row, favour the panels sooner).
/// Measured on a 768 × 2048 matrix, one thread.
pub const GEMM_MIN_TOKENS: usize = 40;
pub const GEMM_MIN_TOKENS_F32: usize = 24;
/// The threshold of the AVX2 outer-product kernel (`gemm_block_avx2`): on a Q8_0 expert
/// matrix (768 × 2048, one thread) it matched the f32 tiles at 12 tokens and passed them
/// from 16 (`examples/matmul_gflops`).
pub const GEMM_MIN_TOKENS_AVX2: usize = 12;
/// The same threshold for the native bf16 kernels' pair panels (`bf16.rs`).
pub const GEMM_MIN_TOKENS_BF16: usize = 40;

/// The kernels of one weight type.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TypeKernels {
    pub ty: GgmlType,
    /// The int8 dot (reference and AVX2 row dot) and its activation block, if any.
    pub act_block: Option<usize>,
    /// AVX2 int8 register tiles (small groups).
    pub avx2_int8_tiles: bool,
    /// AVX2 row lanes (`quant::lanes8`, eight rows a register): the smallest and the
    /// largest group they take (the largest also ends the type's int8 path on AVX2).
    pub avx2_lanes: Option<(usize, usize)>,
    /// AVX2 int8 decode row kernels (one token).
    pub avx2_decode_rows: bool,
    /// AVX-512 VNNI decode row kernels (one token, 64 weights a register), which give the
    /// AVX2 rows' bits, taken over them where the CPU has them, the policy allows VNNI and
    /// a timing at the first session finds them faster (`quant::decode`).
    pub avx512_decode_rows: bool,
    /// AVX512_VNNI int8 row lanes (and tiles, if `vnni_tiles`), and the smallest group they
    /// beat AVX2 at.
    pub vnni_from_tokens: Option<usize>,
    /// AVX512_VNNI int8 tiles (small groups, and the rows a 16-row lane pass leaves).
    pub vnni_tiles: bool,
    /// Native AVX512_BF16 dot products (the weights read as stored).
    pub native_bf16: bool,
}

const fn row(ty: GgmlType, act_block: Option<usize>) -> TypeKernels {
    TypeKernels {
        ty,
        act_block,
        avx2_int8_tiles: false,
        avx2_lanes: None,
        avx2_decode_rows: false,
        avx512_decode_rows: false,
        vnni_from_tokens: None,
        vnni_tiles: false,
        native_bf16: false,
    }
}

/// A legacy type: 32-value activation blocks, AVX2 decode rows and VNNI row lanes, no
/// tiles (their groups of 2–3 tokens take the per-row int8 dot).
const fn legacy(ty: GgmlType) -> TypeKernels {
    TypeKernels {
        avx2_decode_rows: true,
        vnni_from_tokens: Some(LANES_MIN_TOKENS),
        ..row(ty, Some(32))
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
        avx2_lanes: Some((AVX2_LANES_MIN_TOKENS_Q8_0, usize::MAX)),
        avx2_decode_rows: true,
        avx512_decode_rows: true,
        vnni_from_tokens: Some(2),
        vnni_tiles: true,
        ..row(GgmlType::Q8_0, Some(16))
    },
    legacy(GgmlType::Q4_0),
    legacy(GgmlType::Q4_1),
    legacy(GgmlType::Q5_0),
    legacy(GgmlType::Q5_1),
    TypeKernels {
        avx2_int8_tiles: true,
        avx2_lanes: Some((AVX2_LANES_MIN_TOKENS_Q4_K, usize::MAX)),
        avx2_decode_rows: true,
        avx512_decode_rows: false,
        vnni_from_tokens: Some(LANES_MIN_TOKENS),
        vnni_tiles: true,
        ..row(GgmlType::Q4_K, Some(32))
    },
    row(GgmlType::Q5_K, Some(32)),
    TypeKernels {
        avx2_int8_tiles: true,
        avx2_lanes: Some((AVX2_LANES_MIN_TOKENS_Q6_K, usize::MAX)),
        avx2_decode_rows: true,
        avx512_decode_rows: false,
        vnni_from_tokens: Some(2),
        vnni_tiles: true,
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
        out.push("avx2 int8 tiles");
    }
    if k.avx2_lanes.is_some() && cpu.avx2_fma() {
        out.push("avx2 int8 row lanes");
    }
    if k.avx2_decode_rows && cpu.avx2_fma() {
        out.push("avx2 int8 decode rows");
        if cpu.vnni() {
            out.push("avx2 int8 decode rows, vpdpbusd sums");
        }
    }
    if k.avx512_decode_rows && cpu.vnni() {
        out.push("avx512 vnni decode rows (same bits; taken where they time faster)");
    }
    if k.vnni_from_tokens.is_some() && cpu.vnni() {
        out.push(if k.vnni_tiles {
            "avx512 vnni tiles + row lanes"
        } else {
            "avx512 vnni row lanes"
        });
    }
    if k.native_bf16 && cpu.bf16() {
        out.push("avx512 bf16 tiles (split/round)");
    }
    out
}

/// Whether a one-token group of `ty` may take the AVX-512 VNNI decode rows on this CPU
/// (the caller has checked that the policy allows VNNI, and times them).
pub fn wide_decode(ty: GgmlType) -> bool {
    kernels(ty).avx512_decode_rows && cpu().vnni()
}

/// The largest group of a matmul of weight type `ty` that quantises its activations (0:
/// none) under `policy`: all or none when forced, else [`INT8_LANES_MAX_TOKENS`] when the
/// VNNI kernels take `ty`, [`INT8_TILED_MAX_TOKENS`] (or the AVX2 row lanes' largest group,
/// if larger) when it has AVX2 register tiles, and [`INT8_MAX_TOKENS`] (decode) for the
/// other types with an int8 dot.
pub fn int8_max_tokens(ty: GgmlType, policy: &Policy) -> usize {
    int8_max_tokens_on(cpu(), ty, policy)
}

fn int8_max_tokens_on(cpu: CpuFeatures, ty: GgmlType, policy: &Policy) -> usize {
    let k = kernels(ty);
    let tiles = k.avx2_int8_tiles && cpu.avx2_fma();
    let lanes = k.avx2_lanes.filter(|_| cpu.avx2_fma()).map(|(_, to)| to);
    let vnni = k.vnni_from_tokens.is_some() && cpu.vnni() && policy.vnni();
    match (policy.quant_activations(), tiles) {
        (QuantActs::Off, _) => 0,
        (QuantActs::All, _) => usize::MAX,
        (QuantActs::Auto, _) if vnni => INT8_LANES_MAX_TOKENS,
        (QuantActs::Auto, true) => {
            lanes.map_or(INT8_TILED_MAX_TOKENS, |to| to.max(INT8_TILED_MAX_TOKENS))
        }
        (QuantActs::Auto, false) => INT8_MAX_TOKENS,
    }
}

/// The kernel family a grouped matmul runs, chosen once per call by [`select`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GroupedKernel {
    /// One widened dot per row and token, no SIMD (`ANATOMY_PORTABLE_MATMUL=1`).
    Portable,
    /// Weight rows widened to f32 a row block at a time into the f32 register tiles
    /// (AVX-512 or AVX2, else portable).
    F32Tiles,
    /// The inputs quantised once to int8 blocks of `block` values; groups of at most
    /// `max_tokens` rows take the int8 kernels (AVX2 `tiles` and decode rows, VNNI where
    /// they win if `vnni`, else the per-row int8 dot), bigger ones the f32 tiles.
    Int8 {
        block: usize,
        max_tokens: usize,
        tiles: bool,
        vnni: bool,
    },
    /// bf16 weights read as stored by AVX512_BF16 dot products, the inputs converted once.
    NativeBf16(Bf16Mode),
}

/// What a grouped matmul runs: its kernel, whether the f32 tiles take AVX-512, and the
/// smallest group that takes the outer-product panels (f32, or bf16 pairs for
/// [`GroupedKernel::NativeBf16`]; `usize::MAX`: none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupedPlan {
    pub kernel: GroupedKernel,
    pub avx512: bool,
    pub panel_min_tokens: usize,
}

/// The plan of a grouped matmul of weight type `ty`, `cols` columns and groups of `tokens`
/// rows each, under `policy` on this CPU; `avx512` says whether the f32 tiles may take
/// AVX-512 (the policy's, or false for products that must reproduce across CPUs).
pub fn select(
    ty: GgmlType,
    policy: &Policy,
    avx512: bool,
    cols: usize,
    tokens: impl Iterator<Item = usize> + Clone,
) -> GroupedPlan {
    select_on(cpu(), ty, policy, avx512, cols, tokens)
}

/// [`select`] on a CPU with `cpu`'s features (the kernels it names must exist there).
pub fn select_on(
    cpu: CpuFeatures,
    ty: GgmlType,
    policy: &Policy,
    avx512: bool,
    cols: usize,
    mut tokens: impl Iterator<Item = usize> + Clone,
) -> GroupedPlan {
    let plan = |kernel, avx512, panel_min_tokens| GroupedPlan {
        kernel,
        avx512,
        panel_min_tokens,
    };
    if policy.portable_matmul() {
        return plan(GroupedKernel::Portable, false, usize::MAX);
    }
    if ty == GgmlType::Bf16 && avx512 && cpu.bf16() {
        // Split mode (three products per pair) only while no group is big enough for
        // panels: the f32 outer products are faster there.
        match policy.bf16() {
            Some(Bf16Mode::Round) => {
                let panels = if cols.is_multiple_of(2) {
                    GEMM_MIN_TOKENS_BF16
                } else {
                    usize::MAX
                };
                return plan(GroupedKernel::NativeBf16(Bf16Mode::Round), avx512, panels);
            }
            Some(Bf16Mode::Split) if tokens.clone().all(|n| n < GEMM_MIN_TOKENS) => {
                let kernel = GroupedKernel::NativeBf16(Bf16Mode::Split);
                return plan(kernel, avx512, usize::MAX);
            }
            _ => {}
        }
    }
    let f32_panels = match (avx512 && cpu.avx512f, cpu.avx2_fma(), ty) {
        (true, _, GgmlType::F32) => GEMM_MIN_TOKENS_F32,
        (true, _, _) => GEMM_MIN_TOKENS,
        (false, true, _) => GEMM_MIN_TOKENS_AVX2,
        (false, false, _) => usize::MAX,
    };
    if let Some(block) = kernels(ty).act_block {
        let max_tokens = int8_max_tokens_on(cpu, ty, policy);
        if tokens.any(|n| n > 0 && n <= max_tokens) {
            let kernel = GroupedKernel::Int8 {
                block,
                max_tokens,
                tiles: kernels(ty).avx2_int8_tiles && cpu.avx2_fma(),
                vnni: policy.vnni(),
            };
            // The groups the int8 path takes need no panels.
            return plan(kernel, avx512, f32_panels.max(max_tokens.saturating_add(1)));
        }
    }
    plan(GroupedKernel::F32Tiles, avx512, f32_panels)
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
