//! Chapter 6 — a model by the numbers: Hugging Face `config.json` → parameters, memory,
//! KV cache and FLOPs (source S0 5.4.2, 5.5.1–5.5.3; S1 §3 and its exercise 4).
//!
//! [`ModelConfig::from_json`] ([`config`]) reads any config of the families Qwen3, Qwen3-MoE, Mixtral,
//! OLMoE and DeepSeek-V3 (plus DeepSeek-V2 and the dense Qwen2, Llama and Mistral, which
//! share its code paths);
//! [`count`] walks the layers and counts every tensor the checkpoint holds — projections,
//! biases, q_norm/k_norm, every RMSNorm weight, routers, DeepSeek's router bias
//! `e_score_correction_bias`, experts, shared experts — split into embedding / attention /
//! FFN (dense MLP or MoE) / norms, for all experts (total) and for one token's k experts
//! (active); [`tensors`] lists them by name and shape, [`report`] prints the result.
//! `tests/params.rs` pins every count to transformers' own model built on the
//! meta device. [`text_formula`] is the source text's simplified formula, shown beside the
//! exact count (claim `qwen3.param_formula_note`).
//!
//! Conventions: `active` counts every weight one token's forward pass reads, with the input
//! embedding and the output head counted whole, as the source text's Qwen3 formula does;
//! `active_non_embedding` drops both. DeepSeek-V3's multi-token-prediction module
//! (`num_nextn_predict_layers`) is not part of `total` (transformers does not build it and
//! DeepSeek's "671B" excludes it); it is reported separately as `mtp` and `total_with_mtp`.
//!
//! Claims backed here: `qwen3.*`, `moe.equiv_width`, `moe.flops`, `moe.deepseek_v3_params`,
//! `moe.mixtral_params`, `moe.estimate_exercise`, `moe.granularity`, `moe.deepseek_layers`,
//! `moe.scale_13b_671b`, `rope.no_parameters` (no tensor for positions).

pub mod config;
pub mod family;
pub mod quant;
pub mod quant_error;
pub mod report;
pub mod tensors;

pub use config::{BUNDLED, Mla, ModelConfig, Moe, PUBLISHED, bundled, published_json};
pub use family::{ConfigStyle, Description, FAMILIES, Family, QkNorm};
pub use report::{book_snippets, group, report_file, text_report};
pub use tensors::{ParamTensor, layer_tensors};

use crate::error::Result;
use crate::limits;
use crate::moe::layer::is_moe_layer;
use serde::Serialize;

/// Parameters of one group of tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Split {
    /// Input embedding + output head (the head is 0 when tied).
    pub embedding: u64,
    /// Attention projections and their biases (norms excluded).
    pub attention: u64,
    /// Dense MLPs + routers (+ router biases) + experts + shared experts.
    pub ffn: u64,
    /// Every RMSNorm weight: per-layer input/post-attention norms, q_norm/k_norm (or MLA's
    /// q_a/kv_a norms), the final norm.
    pub norms: u64,
}

impl Split {
    pub fn sum(&self) -> u64 {
        self.embedding + self.attention + self.ffn + self.norms
    }
}

/// The FFN side in detail (all layers summed).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize)]
pub struct FfnDetail {
    pub dense_mlp: u64,
    pub router: u64,
    pub experts: u64,
    pub shared_experts: u64,
}

/// The report `anatomy params` prints.
#[derive(Clone, Debug, Serialize)]
pub struct ParamReport {
    pub model_type: Family,
    pub total: u64,
    pub active: u64,
    pub active_non_embedding: u64,
    pub embedding: u64,
    pub embed_tokens: u64,
    pub lm_head: u64,
    pub attention: u64,
    pub ffn: u64,
    pub norms: u64,
    pub ffn_detail: FfnDetail,
    pub active_split: Split,
    pub dense_layers: u64,
    pub moe_layers: u64,
    /// DeepSeek-V3's MTP module(s), not in `total`.
    pub mtp: u64,
    pub total_with_mtp: u64,
    pub bytes_bf16: u64,
    pub bytes_fp8: u64,
    pub bytes_f32: u64,
    pub kv_cache_bytes_per_token_bf16: u64,
    /// MLA only: what a cache of the decompressed per-head keys and values would hold.
    pub kv_cache_bytes_per_token_bf16_expanded: u64,
    /// Forward FLOPs per token from the weights (2 per multiply-add, every matrix one
    /// token passes through, the output head included, the embedding lookup excluded).
    pub flops_per_token: u64,
    /// Extra attention FLOPs per token per position of context (QKᵀ and AV).
    pub attention_flops_per_context_token: u64,
    /// The source text's simplified formula (no norms, no biases), when it applies.
    pub text_formula_total: Option<u64>,
    pub text_formula_active: Option<u64>,
}

// ------------------------------------------------------------------ counting

/// One decoder layer's parameters: all experts (`total`) and one token's share (`active`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LayerCount {
    pub attention: u64,
    pub norms: u64,
    pub ffn: FfnDetail,
    /// The FFN parameters one token uses (k routed experts + shared + router, or the MLP).
    pub ffn_active: u64,
    pub is_moe: bool,
}

// ANCHOR: attention_params
/// Attention projections (+ biases) and the norms that live inside attention.
pub fn attention_params(c: &ModelConfig) -> (u64, u64) {
    let h = c.hidden_size;
    let (nh, nkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    if let Some(m) = c.mla {
        let qk_head = m.qk_nope_head_dim + m.qk_rope_head_dim;
        let bias = |n: u64| if c.qkv_bias { n } else { 0 };
        let (q, q_norm) = match m.q_lora_rank {
            // q_a_proj (+bias), q_b_proj; q_a_layernorm over the rank.
            Some(r) => (h * r + bias(r) + r * nh * qk_head, r),
            None => (h * nh * qk_head, 0),
        };
        // kv_a_proj_with_mqa: the compressed latent plus the shared rope key.
        let kv_a =
            h * (m.kv_lora_rank + m.qk_rope_head_dim) + bias(m.kv_lora_rank + m.qk_rope_head_dim);
        let kv_b = m.kv_lora_rank * nh * (m.qk_nope_head_dim + m.v_head_dim);
        let o = nh * m.v_head_dim * h + if c.o_bias { h } else { 0 };
        return (q + kv_a + kv_b + o, q_norm + m.kv_lora_rank);
    }
    let q = h * nh * d;
    let kv = 2 * h * nkv * d;
    let o = nh * d * h;
    let bias = if c.qkv_bias { nh * d + 2 * nkv * d } else { 0 } + if c.o_bias { h } else { 0 };
    let norms = match c.qk_norm {
        QkNorm::None => 0,
        QkNorm::PerHead => 2 * d,
        // OLMoE sizes these from hidden_size, whatever head_dim says.
        QkNorm::Full => h + h / nh * nkv,
    };
    (q + kv + o + bias, norms)
}
// ANCHOR_END: attention_params

/// A SwiGLU MLP of intermediate size `i`: gate, up `[i, H]`, down `[H, i]`.
pub fn mlp_params(h: u64, i: u64, bias: bool) -> u64 {
    3 * h * i + if bias { 2 * i + h } else { 0 }
}

/// Whether layer `l` is an MoE layer under the config's placement rule.
pub fn layer_is_moe(c: &ModelConfig, l: u64) -> bool {
    match &c.moe {
        None => false,
        Some(m) => {
            let only: Vec<usize> = m.mlp_only_layers.iter().map(|&x| x as usize).collect();
            is_moe_layer(
                l as usize,
                m.decoder_sparse_step as usize,
                &only,
                m.first_k_dense as usize,
            ) && l.is_multiple_of(m.moe_layer_freq)
        }
    }
}

// ANCHOR: layer_params
/// One decoder layer, exactly as the checkpoint stores it.
pub fn layer_params(c: &ModelConfig, l: u64) -> LayerCount {
    let h = c.hidden_size;
    let (attention, attn_norms) = attention_params(c);
    // input_layernorm + post_attention_layernorm; Gemma 3 adds pre/post-feedforward norms.
    let sandwich = if c.family == Family::Gemma3 { 2 * h } else { 0 };
    let norms = 2 * h + sandwich + attn_norms;
    let mut ffn = FfnDetail::default();
    let ffn_active;
    let is_moe = layer_is_moe(c, l);
    match (&c.moe, is_moe) {
        (Some(m), true) => {
            let expert = mlp_params(h, m.expert_intermediate, false);
            ffn.router = m.num_experts * h + if m.router_bias { m.num_experts } else { 0 };
            ffn.experts = m.num_experts * expert;
            ffn.shared_experts = if m.n_shared_experts > 0 {
                mlp_params(h, m.n_shared_experts * m.expert_intermediate, c.mlp_bias)
            } else {
                0
            };
            ffn_active = ffn.router + m.k * expert + ffn.shared_experts;
        }
        _ => {
            ffn.dense_mlp = mlp_params(h, c.intermediate_size, c.mlp_bias);
            ffn_active = ffn.dense_mlp;
        }
    }
    LayerCount {
        attention,
        norms,
        ffn,
        ffn_active,
        is_moe,
    }
}
// ANCHOR_END: layer_params

/// DeepSeek-V3's multi-token-prediction module: `enorm`, `hnorm` (RMSNorm, H each),
/// `eh_proj` `[H, 2H]`, one more decoder layer (MoE), `shared_head.norm` (H). Its
/// embedding and output head are shared with the main model (DeepSeek's
/// README_WEIGHTS.md), so they are not counted again.
pub fn mtp_params(c: &ModelConfig) -> u64 {
    if c.mtp_layers == 0 {
        return 0;
    }
    let h = c.hidden_size;
    // The MTP layer is numbered after the main layers and is an MoE layer.
    let layer = layer_params(c, c.num_hidden_layers);
    let f = layer.ffn;
    let one = 3 * h
        + 2 * h * h
        + layer.attention
        + layer.norms
        + f.dense_mlp
        + f.router
        + f.experts
        + f.shared_experts;
    c.mtp_layers * one
}

/// Checks that every number [`count`] derives from `c` fits in its `u64`: the parameter
/// count, summed in `u128` over the layers exactly as [`count`] sums it (both embeddings
/// counted, and the MTP modules), is at most [`limits::PARAMETERS`]. Each field is already
/// within its limit ([`crate::limits::field_limit`]), which keeps one layer's count far
/// inside `u64`; this bounds the sums. [`ModelConfig::from_json`] calls it, so a config
/// read from a file never makes [`count`] wrap.
pub fn check_counts_fit(c: &ModelConfig, what: &str) -> Result<()> {
    let (h, v) = (c.hidden_size as u128, c.vocab_size as u128);
    let mut total = 2 * v * h + h;
    for l in 0..c.num_hidden_layers {
        let p = layer_params(c, l);
        let f = p.ffn;
        total += (p.attention + p.norms) as u128
            + (f.dense_mlp + f.router + f.experts + f.shared_experts) as u128;
        limits::check(what, "parameter count", total, limits::PARAMETERS)?;
    }
    if c.mtp_layers > 0 {
        let one = mtp_params(&ModelConfig {
            mtp_layers: 1,
            ..c.clone()
        });
        total += one as u128 * c.mtp_layers as u128;
    }
    Ok(limits::check(
        what,
        "parameter count",
        total,
        limits::PARAMETERS,
    )?)
}

/// Every parameter of the model, split by kind, for all experts and for one token. (For
/// a config from [`ModelConfig::from_json`] no sum can wrap: see [`check_counts_fit`].)
pub fn count(c: &ModelConfig) -> ParamReport {
    let (h, v) = (c.hidden_size, c.vocab_size);
    let embed_tokens = v * h;
    let lm_head = if c.tie_word_embeddings { 0 } else { v * h };
    let mut total = Split {
        embedding: embed_tokens + lm_head,
        norms: h, // the final norm
        ..Split::default()
    };
    let mut active = total;
    let mut detail = FfnDetail::default();
    let (mut dense_layers, mut moe_layers) = (0, 0);
    for l in 0..c.num_hidden_layers {
        let p = layer_params(c, l);
        total.attention += p.attention;
        total.norms += p.norms;
        total.ffn += p.ffn.dense_mlp + p.ffn.router + p.ffn.experts + p.ffn.shared_experts;
        active.attention += p.attention;
        active.norms += p.norms;
        active.ffn += p.ffn_active;
        detail.dense_mlp += p.ffn.dense_mlp;
        detail.router += p.ffn.router;
        detail.experts += p.ffn.experts;
        detail.shared_experts += p.ffn.shared_experts;
        if p.is_moe {
            moe_layers += 1
        } else {
            dense_layers += 1
        }
    }
    let t = total.sum();
    let a = active.sum();
    let mtp = mtp_params(c);
    let (kv, kv_expanded) = kv_cache_elements_per_token(c);
    // Matmul weights one token passes through: everything active except the embedding
    // lookup (a gather, no arithmetic), the norms (elementwise) and router biases.
    let router_bias = match &c.moe {
        Some(m) if m.router_bias => moe_layers * m.num_experts,
        _ => 0,
    };
    let matmul_active = a - embed_tokens - active.norms - router_bias
        + if c.tie_word_embeddings {
            embed_tokens
        } else {
            0
        };
    let (formula_total, formula_active) = match text_formula(c) {
        Some((ft, fa)) => (Some(ft), Some(fa)),
        None => (None, None),
    };
    ParamReport {
        model_type: c.family,
        total: t,
        active: a,
        active_non_embedding: a - total.embedding,
        embedding: total.embedding,
        embed_tokens,
        lm_head,
        attention: total.attention,
        ffn: total.ffn,
        norms: total.norms,
        ffn_detail: detail,
        active_split: active,
        dense_layers,
        moe_layers,
        mtp,
        total_with_mtp: t + mtp,
        bytes_bf16: 2 * t,
        bytes_fp8: t,
        bytes_f32: 4 * t,
        kv_cache_bytes_per_token_bf16: 2 * kv,
        kv_cache_bytes_per_token_bf16_expanded: 2 * kv_expanded,
        flops_per_token: 2 * matmul_active,
        attention_flops_per_context_token: attention_flops_per_context_token(c),
        text_formula_total: formula_total,
        text_formula_active: formula_active,
    }
}

/// Elements cached per token over all layers: `(cached, expanded)`. GQA caches K and V of
/// every KV head; MLA caches the compressed latent (`kv_lora_rank`) plus the shared RoPE
/// key (`qk_rope_head_dim`), and `expanded` is what per-head K and V would take.
pub fn kv_cache_elements_per_token(c: &ModelConfig) -> (u64, u64) {
    let l = c.num_hidden_layers;
    match c.mla {
        Some(m) => (
            l * (m.kv_lora_rank + m.qk_rope_head_dim),
            l * c.num_attention_heads * (m.qk_nope_head_dim + m.qk_rope_head_dim + m.v_head_dim),
        ),
        None => {
            let e = l * 2 * c.num_key_value_heads * c.head_dim;
            (e, e)
        }
    }
}

/// FLOPs of QKᵀ and AV for one new token against one cached position, all layers.
pub fn attention_flops_per_context_token(c: &ModelConfig) -> u64 {
    let (dqk, dv) = match c.mla {
        Some(m) => (m.qk_nope_head_dim + m.qk_rope_head_dim, m.v_head_dim),
        None => (c.head_dim, c.head_dim),
    };
    2 * c.num_hidden_layers * c.num_attention_heads * (dqk + dv)
}

// ANCHOR: text_formula
/// The source text's formula (S0 5.5.2): embeddings (×2 when untied) + per layer the four
/// attention matrices, the router and the experts (or the dense MLP), with no norms and no
/// biases. `None` for MLA, which the formula does not describe.
pub fn text_formula(c: &ModelConfig) -> Option<(u64, u64)> {
    if c.mla.is_some() {
        return None;
    }
    let h = c.hidden_size;
    let emb = c.vocab_size * h * if c.tie_word_embeddings { 1 } else { 2 };
    let q_out = c.num_attention_heads * c.head_dim;
    let kv_out = c.num_key_value_heads * c.head_dim;
    let attention = h * q_out + 2 * h * kv_out + q_out * h;
    let (mut total, mut active) = (emb, emb);
    for l in 0..c.num_hidden_layers {
        match (&c.moe, layer_is_moe(c, l)) {
            (Some(m), true) => {
                let expert = 3 * h * m.expert_intermediate;
                total += attention + h * m.num_experts + m.num_experts * expert;
                active += attention + h * m.num_experts + m.k * expert;
            }
            _ => {
                total += attention + 3 * h * c.intermediate_size;
                active += attention + 3 * h * c.intermediate_size;
            }
        }
    }
    Some((total, active))
}
// ANCHOR_END: text_formula
