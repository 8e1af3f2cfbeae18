//! Chapter 11 — the quantisation mix: which block type each tensor of a GGUF file gets.
//!
//! A "Q4_K_M" file is not all Q4_K. llama.cpp picks a type per tensor from the file type
//! (the `--type` the user asked for), the tensor's role, its layer and its row length.
//! [`choose_type`] makes the same choice as `llama_tensor_get_type` (with its helpers
//! `tensor_allows_quantization`, `llama_tensor_get_type_impl`, `tensor_type_fallback` and
//! `llama_ftype_get_default_type`) in `src/llama-quant.cpp` of llama.cpp as vendored by
//! llama-cpp-python 0.3.36, for the file types listed in [`FileType`], without an importance
//! matrix, without type overrides and without `--pure`. The rules, in order:
//!
//! 1. Only tensors of two or more dimensions whose name ends in `weight` are quantised; norms
//!    (`*_norm.weight`) and the MoE router (`ffn_gate_inp.weight`) are not. A tensor that is
//!    not quantised keeps the type of the input file, which for a checkpoint converted to
//!    GGUF is F32 — so they are F32 here.
//! 2. F32, F16 and BF16 files: every quantised tensor gets that type; nothing else applies.
//! 3. Otherwise the file type's default type (Q4_K for Q4_K_M and Q4_K_S, Q5_K for Q5_K_M and
//!    Q5_K_S, ...) is adjusted by role:
//!    - `output.weight` (and `token_embd.weight` when the embeddings are tied, i.e. there is
//!      no `output.weight`): Q8_0 if the row is not a whole number of the default type's
//!      blocks or the default type is Q8_0, otherwise Q6_K.
//!    - `attn_v`: Q4_K_M and Q5_K_M give Q6_K to the layers [`use_more_bits`] picks; Q4_K_S
//!      gives Q5_K to the first four layers; an 80-layer Qwen2 ("70B") lifts Q4_K to Q5_K; a
//!      model with exactly 8 experts gets Q8_0 in every layer.
//!    - `attn_k`: Q8_0 when the model has exactly 8 experts.
//!    - `ffn_down` (the stacked experts' too): Q4_K_M and Q5_K_M give Q6_K to the layers
//!      [`use_more_bits`] picks; Q4_K_S gives Q5_K to the first eighth of the layers.
//!    - `attn_output`: Q5_K for Q4_K_M and Q4_K_S when the model has exactly 8 experts.
//! 4. Fallback when a row (`ne0`, the innermost dimension) is not a whole number of blocks:
//!    Q4_K → Q5_0, Q5_K → Q5_1, Q6_K → Q8_0, a 32-weight type stays itself; and if that
//!    still does not divide the row, F16.
//!
//! llama.cpp's layer counter for `attn_v` counts the `attn_v` tensors met so far in its
//! tensor order (by layer, then name), which for these models is the layer index; its
//! `ffn_down` layer is parsed from the name for MoE models and counted otherwise, again the
//! layer index. So a [`TensorRole`] carries the layer. Falcon's special cases are left out
//! (no Falcon model is read here).

use super::GgmlType;

/// A llama.cpp file type (`LLAMA_FTYPE_*` of llama.h): the `--type` of `anatomy quantize`.
#[allow(non_camel_case_types)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FileType {
    F32,
    F16,
    BF16,
    Q4_0,
    Q4_1,
    Q5_0,
    Q5_1,
    Q8_0,
    Q4_K_S,
    Q4_K_M,
    Q5_K_S,
    Q5_K_M,
    Q6_K,
}

/// Every supported file type, in llama.h's id order.
pub const ALL_FILE_TYPES: [FileType; 13] = [
    FileType::F32,
    FileType::F16,
    FileType::Q4_0,
    FileType::Q4_1,
    FileType::Q8_0,
    FileType::Q5_0,
    FileType::Q5_1,
    FileType::Q4_K_S,
    FileType::Q4_K_M,
    FileType::Q5_K_S,
    FileType::Q5_K_M,
    FileType::Q6_K,
    FileType::BF16,
];

impl FileType {
    /// The `LLAMA_FTYPE_MOSTLY_*` id, written as `general.file_type`.
    pub fn id(self) -> u32 {
        match self {
            FileType::F32 => 0,
            FileType::F16 => 1,
            FileType::Q4_0 => 2,
            FileType::Q4_1 => 3,
            FileType::Q8_0 => 7,
            FileType::Q5_0 => 8,
            FileType::Q5_1 => 9,
            FileType::Q4_K_S => 14,
            FileType::Q4_K_M => 15,
            FileType::Q5_K_S => 16,
            FileType::Q5_K_M => 17,
            FileType::Q6_K => 18,
            FileType::BF16 => 32,
        }
    }

    pub fn from_id(id: u32) -> Option<FileType> {
        ALL_FILE_TYPES.into_iter().find(|t| t.id() == id)
    }

    /// The lower-case name `llama-quantize` and `anatomy quantize --type` take (`"q4_k_m"`).
    pub fn name(self) -> &'static str {
        match self {
            FileType::F32 => "f32",
            FileType::F16 => "f16",
            FileType::BF16 => "bf16",
            FileType::Q4_0 => "q4_0",
            FileType::Q4_1 => "q4_1",
            FileType::Q5_0 => "q5_0",
            FileType::Q5_1 => "q5_1",
            FileType::Q8_0 => "q8_0",
            FileType::Q4_K_S => "q4_k_s",
            FileType::Q4_K_M => "q4_k_m",
            FileType::Q5_K_S => "q5_k_s",
            FileType::Q5_K_M => "q5_k_m",
            FileType::Q6_K => "q6_k",
        }
    }

    /// Parses a name, case-insensitively (`"Q4_K_M"` and `"q4_k_m"` alike).
    pub fn from_name(name: &str) -> Option<FileType> {
        let lower = name.to_ascii_lowercase();
        ALL_FILE_TYPES.into_iter().find(|t| t.name() == lower)
    }

    /// The type most tensors get (`llama_ftype_get_default_type`).
    pub fn default_type(self) -> GgmlType {
        match self {
            FileType::F32 => GgmlType::F32,
            FileType::F16 => GgmlType::F16,
            FileType::BF16 => GgmlType::Bf16,
            FileType::Q4_0 => GgmlType::Q4_0,
            FileType::Q4_1 => GgmlType::Q4_1,
            FileType::Q5_0 => GgmlType::Q5_0,
            FileType::Q5_1 => GgmlType::Q5_1,
            FileType::Q8_0 => GgmlType::Q8_0,
            FileType::Q4_K_S | FileType::Q4_K_M => GgmlType::Q4_K,
            FileType::Q5_K_S | FileType::Q5_K_M => GgmlType::Q5_K,
            FileType::Q6_K => GgmlType::Q6_K,
        }
    }
}

/// What a tensor is, as far as the mix cares (llama.cpp's `tensor_category`, plus the
/// tensors it never quantises). Layers are 0-based.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TensorRole {
    /// `token_embd.weight`.
    TokenEmbd,
    /// `output.weight` (the LM head).
    Output,
    AttnQ,
    AttnK,
    AttnV {
        layer: usize,
    },
    AttnOutput,
    /// `ffn_gate` or `ffn_gate_exps`.
    FfnGate,
    /// `ffn_up` or `ffn_up_exps`.
    FfnUp,
    /// `ffn_down` or `ffn_down_exps`.
    FfnDown {
        layer: usize,
    },
    /// `ffn_gate_inp.weight`, the MoE router: never quantised.
    Router,
    /// Any `*_norm.weight`: never quantised.
    Norm,
    /// A tensor whose name does not end in `weight` (a bias): never quantised.
    Bias,
    /// Any other weight: the file type's default type, with the fallback.
    Other,
}

impl TensorRole {
    /// The role of a GGUF tensor name (`blk.3.attn_v.weight` → `AttnV { layer: 3 }`), by the
    /// same substring tests llama.cpp makes.
    pub fn from_gguf_name(name: &str) -> TensorRole {
        let layer = name
            .strip_prefix("blk.")
            .and_then(|rest| rest.split('.').next())
            .and_then(|l| l.parse::<usize>().ok())
            .unwrap_or(0);
        if !name.ends_with("weight") {
            TensorRole::Bias
        } else if name.contains("_norm.weight") {
            TensorRole::Norm
        } else if name.contains("ffn_gate_inp.weight") {
            TensorRole::Router
        } else if name == "output.weight" {
            TensorRole::Output
        } else if name == "token_embd.weight" {
            TensorRole::TokenEmbd
        } else if name.contains("attn_v.weight") {
            TensorRole::AttnV { layer }
        } else if name.contains("attn_k.weight") {
            TensorRole::AttnK
        } else if name.contains("attn_q.weight") {
            TensorRole::AttnQ
        } else if name.contains("attn_output.weight") {
            TensorRole::AttnOutput
        } else if name.contains("ffn_up") {
            TensorRole::FfnUp
        } else if name.contains("ffn_gate") {
            TensorRole::FfnGate
        } else if name.contains("ffn_down") {
            TensorRole::FfnDown { layer }
        } else {
            TensorRole::Other
        }
    }
}

/// The model facts the mix depends on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MixContext {
    /// Transformer blocks (`{arch}.block_count`).
    pub n_layer: usize,
    /// Routed experts per MoE layer (0 for a dense model).
    pub n_expert: usize,
    /// No `output.weight`: the LM head is `token_embd.weight`, which then gets the output's type.
    pub tied_embeddings: bool,
    /// llama.cpp classes the model as "70B" (Qwen2 with 80 layers: Qwen2-72B); its `attn_v`
    /// then gets Q5_K where it would get Q4_K.
    pub is_70b: bool,
}

/// llama.cpp's "use more bits" layers: the first and last eighth, and every third layer in
/// between.
pub fn use_more_bits(layer: usize, n_layer: usize) -> bool {
    layer < n_layer / 8 || layer >= 7 * n_layer / 8 || (layer - n_layer / 8) % 3 == 2
}

/// ggml's number of dimensions of a row-major shape: leading (outer) axes of length 1 do
/// not count, and a scalar counts as 1-D.
fn ggml_n_dims(shape: &[usize]) -> usize {
    let leading_ones = shape.iter().take_while(|&&d| d == 1).count();
    shape.len().saturating_sub(leading_ones).max(1)
}

fn is_quantized(ty: GgmlType) -> bool {
    !matches!(ty, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16)
}

/// The type a row of `ncols` weights can be stored in when `target` cannot hold it
/// (`tensor_type_fallback`): the K types step down to a 32-weight type, and F16 takes any
/// row the 32-weight type cannot.
pub fn fallback_type(target: GgmlType, ncols: usize) -> GgmlType {
    if ncols.is_multiple_of(target.block_size()) {
        return target;
    }
    let step = match target {
        GgmlType::Q4_K => GgmlType::Q5_0,
        GgmlType::Q5_K => GgmlType::Q5_1,
        GgmlType::Q6_K => GgmlType::Q8_0,
        other => other,
    };
    if ncols.is_multiple_of(step.block_size()) {
        step
    } else {
        GgmlType::F16
    }
}

/// The type llama.cpp's quantiser gives a tensor of role `tensor` and row-major `shape`
/// (outermost first; the row is the last axis) in a file of type `ftype`. See the module
/// documentation for the rules and their source.
pub fn choose_type(
    ftype: FileType,
    tensor: &TensorRole,
    shape: &[usize],
    ctx: &MixContext,
) -> GgmlType {
    let quantizable = ggml_n_dims(shape) >= 2
        && !matches!(
            tensor,
            TensorRole::Norm | TensorRole::Router | TensorRole::Bias
        );
    if !quantizable {
        return GgmlType::F32;
    }
    let default = ftype.default_type();
    if !is_quantized(default) {
        return default;
    }
    let ncols = shape.last().copied().unwrap_or(1);
    let by_role = role_type(ftype, default, tensor, ncols, ctx);
    fallback_type(by_role, ncols)
}

/// Rule 3 of the module documentation (`llama_tensor_get_type_impl`, our file types only).
fn role_type(
    ftype: FileType,
    default: GgmlType,
    tensor: &TensorRole,
    ncols: usize,
    ctx: &MixContext,
) -> GgmlType {
    use FileType as F;
    use GgmlType as G;
    let eight_experts = ctx.n_expert == 8;
    let is_lm_head = matches!(tensor, TensorRole::Output)
        || (ctx.tied_embeddings && matches!(tensor, TensorRole::TokenEmbd));
    if is_lm_head {
        return if !ncols.is_multiple_of(default.block_size()) || default == G::Q8_0 {
            G::Q8_0
        } else {
            G::Q6_K
        };
    }
    match *tensor {
        TensorRole::AttnV { layer } => {
            let mut ty = default;
            if matches!(ftype, F::Q4_K_M | F::Q5_K_M) && use_more_bits(layer, ctx.n_layer) {
                ty = G::Q6_K;
            } else if ftype == F::Q4_K_S && layer < 4 {
                ty = G::Q5_K;
            }
            if ctx.is_70b && ty == G::Q4_K {
                ty = G::Q5_K;
            }
            if eight_experts {
                ty = G::Q8_0;
            }
            ty
        }
        TensorRole::AttnK if eight_experts => G::Q8_0,
        TensorRole::FfnDown { layer } => match ftype {
            F::Q4_K_M | F::Q5_K_M if use_more_bits(layer, ctx.n_layer) => G::Q6_K,
            F::Q4_K_S if layer < ctx.n_layer / 8 => G::Q5_K,
            _ => default,
        },
        TensorRole::AttnOutput if eight_experts && matches!(ftype, F::Q4_K_M | F::Q4_K_S) => {
            G::Q5_K
        }
        _ => default,
    }
}

/// Bytes of a tensor of row-major `shape` stored as `ty`, or `None` when its row is not a
/// whole number of blocks or the size overflows.
pub fn tensor_bytes(ty: GgmlType, shape: &[usize]) -> Option<u64> {
    let ncols = shape.last().copied().unwrap_or(1) as u64;
    let rows = shape[..shape.len().saturating_sub(1)]
        .iter()
        .try_fold(1u64, |acc, &d| acc.checked_mul(d as u64))?;
    ty.row_bytes(ncols)?.checked_mul(rows)
}

/// Size of the tensor data of a `ftype` file holding `tensors` (role and row-major shape
/// each), every tensor of the type [`choose_type`] gives it — the GGUF file less its header
/// and alignment padding. `None` on overflow.
pub fn estimate_bytes(
    ftype: FileType,
    tensors: &[(TensorRole, Vec<usize>)],
    ctx: &MixContext,
) -> Option<u64> {
    tensors.iter().try_fold(0u64, |total, (role, shape)| {
        let ty = choose_type(ftype, role, shape, ctx);
        total.checked_add(tensor_bytes(ty, shape)?)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOE: MixContext = MixContext {
        n_layer: 48,
        n_expert: 128,
        tied_embeddings: false,
        is_70b: false,
    };

    #[test]
    fn ids_names_round_trip() {
        for t in ALL_FILE_TYPES {
            assert_eq!(FileType::from_id(t.id()), Some(t));
            assert_eq!(FileType::from_name(t.name()), Some(t));
            assert_eq!(FileType::from_name(&t.name().to_uppercase()), Some(t));
        }
        assert_eq!(FileType::from_name("q3_k_m"), None);
    }

    #[test]
    fn more_bits_layers_of_48() {
        let picked: Vec<usize> = (0..48).filter(|&l| use_more_bits(l, 48)).collect();
        let mut want: Vec<usize> = (0..6).collect();
        want.extend((6..42).filter(|l| (l - 6) % 3 == 2));
        want.extend(42..48);
        assert_eq!(picked, want);
    }

    #[test]
    fn norms_router_and_biases_stay_f32() {
        for ft in ALL_FILE_TYPES {
            let norm = TensorRole::from_gguf_name("blk.0.attn_norm.weight");
            assert_eq!(choose_type(ft, &norm, &[2048], &MOE), GgmlType::F32);
            let router = TensorRole::from_gguf_name("blk.0.ffn_gate_inp.weight");
            assert_eq!(choose_type(ft, &router, &[128, 2048], &MOE), GgmlType::F32);
            let bias = TensorRole::from_gguf_name("blk.0.attn_q.bias");
            assert_eq!(choose_type(ft, &bias, &[1, 4096], &MOE), GgmlType::F32);
        }
    }

    #[test]
    fn q4_k_m_of_a_qwen3_moe_layer() {
        let ty = |name: &str, shape: &[usize]| {
            choose_type(
                FileType::Q4_K_M,
                &TensorRole::from_gguf_name(name),
                shape,
                &MOE,
            )
        };
        assert_eq!(ty("output.weight", &[151936, 2048]), GgmlType::Q6_K);
        assert_eq!(ty("token_embd.weight", &[151936, 2048]), GgmlType::Q4_K);
        assert_eq!(ty("blk.0.attn_v.weight", &[512, 2048]), GgmlType::Q6_K);
        assert_eq!(ty("blk.6.attn_v.weight", &[512, 2048]), GgmlType::Q4_K);
        assert_eq!(ty("blk.8.attn_v.weight", &[512, 2048]), GgmlType::Q6_K);
        assert_eq!(
            ty("blk.8.ffn_down_exps.weight", &[128, 2048, 768]),
            GgmlType::Q6_K
        );
        assert_eq!(
            ty("blk.9.ffn_down_exps.weight", &[128, 2048, 768]),
            GgmlType::Q4_K
        );
        assert_eq!(
            ty("blk.9.ffn_gate_exps.weight", &[128, 768, 2048]),
            GgmlType::Q4_K
        );
        assert_eq!(ty("blk.9.attn_k.weight", &[512, 2048]), GgmlType::Q4_K);
    }

    #[test]
    fn tied_embeddings_take_the_output_rule() {
        let ctx = MixContext {
            tied_embeddings: true,
            ..MOE
        };
        let embd = TensorRole::TokenEmbd;
        assert_eq!(
            choose_type(FileType::Q4_0, &embd, &[1000, 256], &ctx),
            GgmlType::Q6_K
        );
        assert_eq!(
            choose_type(FileType::Q8_0, &embd, &[1000, 256], &ctx),
            GgmlType::Q8_0
        );
        // 96 is whole Q4_0 blocks but not Q6_K blocks: Q6_K falls back to Q8_0.
        assert_eq!(
            choose_type(FileType::Q4_0, &embd, &[1000, 96], &ctx),
            GgmlType::Q8_0
        );
    }

    #[test]
    fn eight_experts_lift_attention() {
        let ctx = MixContext { n_expert: 8, ..MOE };
        let k = TensorRole::AttnK;
        assert_eq!(
            choose_type(FileType::Q4_0, &k, &[512, 256], &ctx),
            GgmlType::Q8_0
        );
        let v = TensorRole::AttnV { layer: 10 };
        assert_eq!(
            choose_type(FileType::Q5_K_M, &v, &[512, 256], &ctx),
            GgmlType::Q8_0
        );
        let o = TensorRole::AttnOutput;
        assert_eq!(
            choose_type(FileType::Q4_K_M, &o, &[256, 512], &ctx),
            GgmlType::Q5_K
        );
        assert_eq!(
            choose_type(FileType::Q5_K_M, &o, &[256, 512], &ctx),
            GgmlType::Q5_K
        );
    }

    #[test]
    fn fallbacks_for_short_rows() {
        assert_eq!(fallback_type(GgmlType::Q4_K, 96), GgmlType::Q5_0);
        assert_eq!(fallback_type(GgmlType::Q5_K, 96), GgmlType::Q5_1);
        assert_eq!(fallback_type(GgmlType::Q6_K, 96), GgmlType::Q8_0);
        assert_eq!(fallback_type(GgmlType::Q6_K, 16), GgmlType::F16);
        assert_eq!(fallback_type(GgmlType::Q4_0, 16), GgmlType::F16);
        assert_eq!(fallback_type(GgmlType::Q4_K, 512), GgmlType::Q4_K);
    }

    #[test]
    fn float_files_ignore_roles_and_fallbacks() {
        let v = TensorRole::AttnV { layer: 0 };
        assert_eq!(
            choose_type(FileType::F16, &v, &[16, 16], &MOE),
            GgmlType::F16
        );
        assert_eq!(
            choose_type(FileType::BF16, &TensorRole::Output, &[16, 16], &MOE),
            GgmlType::Bf16
        );
        assert_eq!(
            choose_type(FileType::F32, &v, &[16, 16], &MOE),
            GgmlType::F32
        );
    }

    #[test]
    fn estimate_adds_the_chosen_types() {
        let tensors = vec![
            (TensorRole::Output, vec![1000, 256]),
            (TensorRole::AttnQ, vec![256, 256]),
            (TensorRole::Norm, vec![256]),
        ];
        let got = estimate_bytes(FileType::Q4_K_M, &tensors, &MOE).unwrap();
        let want = 1000 * 210 + 256 * 144 + 256 * 4;
        assert_eq!(got, want);
        assert_eq!(tensor_bytes(GgmlType::Q4_0, &[3, 30]), None);
    }
}
