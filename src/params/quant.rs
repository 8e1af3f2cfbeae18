//! Chapter 11's arithmetic on a config: how large a llama.cpp GGUF file of the model is
//! under a quantisation scheme (`anatomy params CONFIG.json --quant q4_k_m`), how much
//! memory it needs with its KV cache at the config's context, and how many bytes one
//! decoded token reads.
//!
//! The config is turned into the tensors a GGUF file of it holds ([`gguf_tensors`], named
//! and shaped as llama.cpp's converter writes them: stacked experts, ggml dimension
//! order); each gets the type llama.cpp's quantiser gives it ([`tensor_type`], from
//! [`crate::quant::mix`]) and its bytes are
//! that type's row size times the rows. The file adds a header, tensor infos, metadata
//! (mostly the tokenizer's vocabulary) and alignment padding: [`overhead_bound`] bounds
//! that part from above, and [`QuantEstimate::file_bytes`] adds a typical value of it.
//! Claims backed here: `quant.*` (src/claims/quant.rs).

use super::{Family, ModelConfig, QkNorm, layer_is_moe};
use crate::error::{Result, read_json};
use crate::quant::GgmlType;
use crate::quant::mix::{FileType, MixContext, TensorRole, choose_type};
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// One tensor of the GGUF file a config implies.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlannedTensor {
    /// llama.cpp's name, e.g. `blk.0.ffn_down_exps.weight`.
    pub name: String,
    /// ggml order: `dims[0]` is the contiguous row (an nn.Linear `[out, in]` is `[in, out]`).
    pub dims: Vec<u64>,
    pub ty: GgmlType,
    pub bytes: u64,
}

impl PlannedTensor {
    pub fn numel(&self) -> u64 {
        self.dims.iter().product()
    }
}

/// The tensors (name, ggml dims) of a GGUF file of the model, as llama.cpp's converter
/// lays them out: the experts of a layer stacked into one 3-D tensor per projection.
pub fn gguf_tensors(c: &ModelConfig) -> Vec<(String, Vec<u64>)> {
    let (h, v) = (c.hidden_size, c.vocab_size);
    let mut out: Vec<(String, Vec<u64>)> = vec![("token_embd.weight".into(), vec![h, v])];
    for l in 0..c.num_hidden_layers {
        let mut t = |name: &str, dims: &[u64]| out.push((format!("blk.{l}.{name}"), dims.into()));
        t("attn_norm.weight", &[h]);
        t("ffn_norm.weight", &[h]);
        let (nh, nkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
        match c.mla {
            Some(m) => {
                let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
                match m.q_lora_rank {
                    Some(r) => {
                        t("attn_q_a.weight", &[h, r]);
                        t("attn_q_a_norm.weight", &[r]);
                        t("attn_q_b.weight", &[r, nh * qk]);
                    }
                    None => t("attn_q.weight", &[h, nh * qk]),
                }
                t(
                    "attn_kv_a_mqa.weight",
                    &[h, m.kv_lora_rank + m.qk_rope_head_dim],
                );
                t("attn_kv_a_norm.weight", &[m.kv_lora_rank]);
                t(
                    "attn_kv_b.weight",
                    &[m.kv_lora_rank, nh * (m.qk_nope_head_dim + m.v_head_dim)],
                );
                t("attn_output.weight", &[nh * m.v_head_dim, h]);
            }
            None => {
                t("attn_q.weight", &[h, nh * d]);
                t("attn_k.weight", &[h, nkv * d]);
                t("attn_v.weight", &[h, nkv * d]);
                t("attn_output.weight", &[nh * d, h]);
                if c.qkv_bias {
                    t("attn_q.bias", &[nh * d]);
                    t("attn_k.bias", &[nkv * d]);
                    t("attn_v.bias", &[nkv * d]);
                }
                match c.qk_norm {
                    QkNorm::None => {}
                    QkNorm::PerHead => {
                        t("attn_q_norm.weight", &[d]);
                        t("attn_k_norm.weight", &[d]);
                    }
                    QkNorm::Full => {
                        t("attn_q_norm.weight", &[h]);
                        t("attn_k_norm.weight", &[h / nh * nkv]);
                    }
                }
            }
        }
        if c.o_bias {
            t("attn_output.bias", &[h]);
        }
        match (&c.moe, layer_is_moe(c, l)) {
            (Some(m), true) => {
                let (e, i) = (m.num_experts, m.expert_intermediate);
                t("ffn_gate_inp.weight", &[h, e]);
                if m.router_bias {
                    t("exp_probs_b.bias", &[e]);
                }
                t("ffn_gate_exps.weight", &[h, i, e]);
                t("ffn_up_exps.weight", &[h, i, e]);
                t("ffn_down_exps.weight", &[i, h, e]);
                if m.n_shared_experts > 0 {
                    let s = m.n_shared_experts * i;
                    t("ffn_gate_shexp.weight", &[h, s]);
                    t("ffn_up_shexp.weight", &[h, s]);
                    t("ffn_down_shexp.weight", &[s, h]);
                }
            }
            _ => {
                let i = c.intermediate_size;
                t("ffn_gate.weight", &[h, i]);
                t("ffn_up.weight", &[h, i]);
                t("ffn_down.weight", &[i, h]);
            }
        }
    }
    out.push(("output_norm.weight".into(), vec![h]));
    if !c.tie_word_embeddings {
        out.push(("output.weight".into(), vec![h, v]));
    }
    out
}

/// The facts about the model llama.cpp's type choice looks at.
pub fn mix_context(c: &ModelConfig) -> MixContext {
    MixContext {
        n_layer: c.num_hidden_layers as usize,
        n_expert: c.moe.as_ref().map_or(0, |m| m.num_experts as usize),
        tied_embeddings: c.tie_word_embeddings,
        // llama.cpp's "70B" class, among the families read here: Qwen2 with 80 layers.
        is_70b: c.family == Family::Qwen2 && c.num_hidden_layers == 80,
    }
}

/// The type `scheme` stores a tensor in: llama.cpp's choice ([`choose_type`]) for the
/// tensor's role, layer and row length. `dims` is in ggml order.
pub fn tensor_type(scheme: FileType, name: &str, dims: &[u64], ctx: &MixContext) -> GgmlType {
    let shape: Vec<usize> = dims.iter().rev().map(|&d| d as usize).collect();
    choose_type(scheme, &TensorRole::from_gguf_name(name), &shape, ctx)
}

/// Every tensor of the file with its type and bytes.
pub fn plan(c: &ModelConfig, scheme: FileType) -> Vec<PlannedTensor> {
    let ctx = mix_context(c);
    gguf_tensors(c)
        .into_iter()
        .map(|(name, dims)| {
            let ty = tensor_type(scheme, &name, &dims, &ctx);
            let bytes = tensor_bytes(ty, &dims);
            PlannedTensor {
                name,
                dims,
                ty,
                bytes,
            }
        })
        .collect()
}

/// Bytes of a tensor of `dims` (ggml order) in `ty`. The caller's dims come from a
/// checked config (every count fits `u64`, see [`super::check_counts_fit`]), and a type
/// never takes more than 4 bytes a weight, so the product cannot wrap.
fn tensor_bytes(ty: GgmlType, dims: &[u64]) -> u64 {
    let rows: u64 = dims[1..].iter().product();
    let row = ty
        .row_bytes(dims[0])
        .expect("choose_type picks a type whose blocks divide the row");
    row * rows
}

/// GGUF's default alignment of tensor data.
pub const GGUF_ALIGNMENT: u64 = 32;

/// Bytes a GGUF file spends besides tensor data, bounded from above: the fixed header
/// (magic, version, two counts), each tensor's info (name, dims, type, offset) and its
/// padding to [`GGUF_ALIGNMENT`], and `metadata_bytes` of key–value metadata.
pub fn overhead_bound(tensors: &[PlannedTensor], metadata_bytes: u64) -> u64 {
    let header = 4 + 4 + 8 + 8;
    let infos: u64 = tensors
        .iter()
        .map(|t| 8 + t.name.len() as u64 + 4 + 8 * t.dims.len() as u64 + 4 + 8)
        .sum();
    // Padding after the metadata and after every tensor but the last.
    let padding = (GGUF_ALIGNMENT - 1) * (tensors.len() as u64 + 1);
    header + infos + padding + metadata_bytes
}

/// Bytes allowed for the metadata that is not the tokenizer's: the architecture's keys
/// (`qwen3moe.block_count`, ...), `general.*`, the file type (the test files without a
/// vocabulary hold ≈ 1 KB of it).
pub const MODEL_KEYS_BYTES: u64 = 4096;

/// A typical size of the metadata llama.cpp's converter writes for a vocabulary of `v`
/// tokens: each token string (8-byte length + ~7 bytes of text), its f32 score and i32
/// type, and a BPE merge line (8-byte length + ~12 bytes) per token, plus
/// [`MODEL_KEYS_BYTES`]. Qwen3's vocabulary (151,936) comes to ≈ 6.5 MB.
pub fn typical_metadata_bytes(v: u64) -> u64 {
    v * (8 + 7 + 4 + 4 + 8 + 12) + MODEL_KEYS_BYTES
}

/// The parameters and bytes of one ggml type in a file.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TypeShare {
    /// ggml's name (`q4_K`, `f32`, ...).
    #[serde(rename = "type")]
    pub ty: &'static str,
    pub parameters: u64,
    pub bytes: u64,
}

/// What `anatomy params CONFIG.json --quant SCHEME` adds to the report.
#[derive(Clone, Debug, Serialize)]
pub struct QuantEstimate {
    /// The llama.cpp file type (`q4_k_m`, ...).
    pub scheme: &'static str,
    /// Parameters of every tensor in the file (the total count of chapter 6).
    pub parameters: u64,
    /// Bytes of tensor data.
    pub tensor_bytes: u64,
    /// `8 · tensor_bytes / parameters`.
    pub bits_per_weight: f64,
    /// Tensor data + header, tensor infos, padding and typical metadata.
    pub file_bytes: u64,
    pub file_gb: f64,
    pub file_gib: f64,
    /// Parameters and bytes by type, in type id order.
    pub by_type: Vec<TypeShare>,
    /// The context the KV cache is sized for (`max_position_embeddings`).
    pub context: u64,
    /// f16 K and V of every layer at `context` tokens (llama.cpp's default cache type).
    pub kv_cache_bytes: u64,
    /// Weights (tensor data) + KV cache.
    pub memory_bytes: u64,
    pub memory_gb: f64,
    pub memory_gib: f64,
    /// Bytes of weights one decoded token reads: every tensor whole except the experts
    /// (k of N per layer) and the input embedding (one row).
    pub bytes_read_per_token: u64,
}

/// The file size, memory and per-token reads of `c` under `scheme`, with the KV cache for
/// `context` tokens.
pub fn estimate(c: &ModelConfig, scheme: FileType, context: u64) -> QuantEstimate {
    let tensors = plan(c, scheme);
    let parameters: u64 = tensors.iter().map(PlannedTensor::numel).sum();
    let tensor_bytes: u64 = tensors.iter().map(|t| t.bytes).sum();
    let file_bytes = tensor_bytes + overhead_bound(&tensors, typical_metadata_bytes(c.vocab_size));
    let mut by_type = Vec::new();
    for ty in crate::quant::ALL_TYPES {
        let of_type = tensors.iter().filter(|t| t.ty == ty);
        let (n, b) = of_type.fold((0, 0), |(n, b), t| (n + t.numel(), b + t.bytes));
        if n > 0 {
            by_type.push(TypeShare {
                ty: ty.name(),
                parameters: n,
                bytes: b,
            });
        }
    }
    let (kv_elements, _) = super::kv_cache_elements_per_token(c);
    let kv_cache_bytes = 2 * kv_elements * context;
    let memory_bytes = tensor_bytes + kv_cache_bytes;
    let bytes_read_per_token = tensors.iter().map(|t| read_per_token(c, t)).sum();
    let gb = |b: u64| b as f64 / 1e9;
    let gib = |b: u64| b as f64 / (1u64 << 30) as f64;
    QuantEstimate {
        scheme: scheme.name(),
        parameters,
        tensor_bytes,
        bits_per_weight: 8.0 * tensor_bytes as f64 / parameters as f64,
        file_bytes,
        file_gb: gb(file_bytes),
        file_gib: gib(file_bytes),
        by_type,
        context,
        kv_cache_bytes,
        memory_bytes,
        memory_gb: gb(memory_bytes),
        memory_gib: gib(memory_bytes),
        bytes_read_per_token,
    }
}

/// Bytes of `t` one token's forward pass reads.
fn read_per_token(c: &ModelConfig, t: &PlannedTensor) -> u64 {
    if t.name == "token_embd.weight" {
        // A lookup reads one row (tied embeddings are read whole again as `output`, which
        // this file then lacks: the head's matvec reads the table).
        let row = t.bytes / c.vocab_size;
        return if c.tie_word_embeddings { t.bytes } else { row };
    }
    match &c.moe {
        Some(m) if t.name.contains("_exps.") => t.bytes / m.num_experts * m.k,
        _ => t.bytes,
    }
}

/// Reads a config.json and estimates it under `scheme` at its `max_position_embeddings`.
pub fn estimate_file(path: &Path, scheme: FileType) -> Result<QuantEstimate> {
    let v = read_json(path)?;
    estimate_json(&v, &path.display().to_string(), scheme)
}

/// [`estimate_file`] of a config already parsed; `what` names it in errors.
pub fn estimate_json(v: &Value, what: &str, scheme: FileType) -> Result<QuantEstimate> {
    let what = what.to_string();
    let c = ModelConfig::from_json(v, &what)?;
    let fields = crate::json::Fields::new(&what, v);
    let context = fields.opt_u64("max_position_embeddings")?.ok_or_else(|| {
        fields.error(
            "max_position_embeddings",
            "missing: the KV cache is sized for the config's context",
        )
    })?;
    crate::limits::check(
        &what,
        "field `max_position_embeddings`",
        context as u128,
        crate::limits::POSITIONS,
    )?;
    let (kv_elements, _) = super::kv_cache_elements_per_token(&c);
    // The estimate multiplies these in u64; a cache past 2^64 bytes is no model's.
    if (2 * kv_elements as u128)
        .checked_mul(context as u128)
        .is_none_or(|b| b > u64::MAX as u128)
    {
        return Err(fields.error(
            "max_position_embeddings",
            "the KV cache at this context does not fit in 2^64 bytes",
        ));
    }
    Ok(estimate(&c, scheme, context))
}

/// The estimate as the block `anatomy params --quant` prints after the counts.
pub fn text_block(e: &QuantEstimate) -> String {
    let mut s = format!("quantised as {} (llama.cpp GGUF)\n", e.scheme);
    s.push_str(&format!(
        "  file              {:.2} GB = {:.2} GiB ({:.3} bits per weight over {} parameters)\n",
        e.file_gb,
        e.file_gib,
        e.bits_per_weight,
        super::group(e.parameters)
    ));
    for t in &e.by_type {
        s.push_str(&format!(
            "    {:<16}{:>18} parameters {:>10.3} GB\n",
            t.ty,
            super::group(t.parameters),
            t.bytes as f64 / 1e9
        ));
    }
    s.push_str(&format!(
        "  KV cache (f16)    {:.2} GB = {:.2} GiB at {} tokens\n",
        e.kv_cache_bytes as f64 / 1e9,
        e.kv_cache_bytes as f64 / (1u64 << 30) as f64,
        super::group(e.context)
    ));
    s.push_str(&format!(
        "  memory            {:.2} GB = {:.2} GiB (weights + KV cache)\n",
        e.memory_gb, e.memory_gib
    ));
    s.push_str(&format!(
        "  read per token    {:.3} GB of weights in decode\n",
        e.bytes_read_per_token as f64 / 1e9
    ));
    s
}
