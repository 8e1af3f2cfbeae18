//! Chapter 6 — a model by the numbers: Hugging Face `config.json` → parameters, memory,
//! KV cache and FLOPs (source S0 5.4.2, 5.5.1–5.5.3; S1 §3 and its exercise 4).
//!
//! [`ModelConfig::from_json`] reads any config of the families Qwen3, Qwen3-MoE, Mixtral,
//! OLMoE and DeepSeek-V3 (plus DeepSeek-V2 and the dense Qwen2, Llama and Mistral, which
//! share its code paths);
//! [`count`] walks the layers and counts every tensor the checkpoint holds — projections,
//! biases, q_norm/k_norm, every RMSNorm weight, routers, DeepSeek's router bias
//! `e_score_correction_bias`, experts, shared experts — split into embedding / attention /
//! FFN (dense MLP or MoE) / norms, for all experts (total) and for one token's k experts
//! (active). `tests/params.rs` pins every count to transformers' own model built on the
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
//! `moe.mixtral_params`, `moe.estimate_exercise`.

use crate::error::{Error, Result, read_json};
use crate::moe::layer::is_moe_layer;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

/// The model families understood, by `model_type`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Family {
    Qwen2,
    Qwen3,
    Qwen3Moe,
    Llama,
    Mistral,
    Mixtral,
    Olmoe,
    DeepseekV2,
    DeepseekV3,
}

impl Family {
    const ALL: &[(&str, Family)] = &[
        ("qwen2", Family::Qwen2),
        ("qwen3", Family::Qwen3),
        ("qwen3_moe", Family::Qwen3Moe),
        ("llama", Family::Llama),
        ("mistral", Family::Mistral),
        ("mixtral", Family::Mixtral),
        ("olmoe", Family::Olmoe),
        ("deepseek_v2", Family::DeepseekV2),
        ("deepseek_v3", Family::DeepseekV3),
    ];
}

/// Which query/key normalisation a family applies inside attention.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum QkNorm {
    None,
    /// Qwen3: one RMSNorm weight of `head_dim` for q and one for k, shared by all heads.
    PerHead,
    /// OLMoE: RMSNorm over the whole projected q (`hidden_size` weights) and k
    /// (`hidden_size / heads · kv_heads`).
    Full,
}

/// Multi-head latent attention (DeepSeek-V2/V3).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Mla {
    /// `None`: q comes from one `[heads·qk_head_dim, H]` projection; else a LoRA pair.
    pub q_lora_rank: Option<u64>,
    pub kv_lora_rank: u64,
    pub qk_nope_head_dim: u64,
    pub qk_rope_head_dim: u64,
    pub v_head_dim: u64,
}

/// The MoE part of a config.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Moe {
    /// Routed experts per MoE layer (`num_experts`, `num_local_experts`, `n_routed_experts`).
    pub num_experts: u64,
    /// `num_experts_per_tok`.
    pub k: u64,
    /// Each routed expert's intermediate size (`moe_intermediate_size`; Mixtral:
    /// `intermediate_size`).
    pub expert_intermediate: u64,
    /// DeepSeek: `n_shared_experts` always-on experts, fused into one MLP of
    /// `n_shared_experts · moe_intermediate_size`.
    pub n_shared_experts: u64,
    /// DeepSeek-V3 keeps a per-expert routing bias in the checkpoint.
    pub router_bias: bool,
    pub decoder_sparse_step: u64,
    pub mlp_only_layers: Vec<u64>,
    pub first_k_dense: u64,
    pub moe_layer_freq: u64,
}

/// Everything the counts depend on, read from config.json.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ModelConfig {
    pub family: Family,
    pub vocab_size: u64,
    pub hidden_size: u64,
    pub num_hidden_layers: u64,
    pub num_attention_heads: u64,
    pub num_key_value_heads: u64,
    pub head_dim: u64,
    /// The dense MLP's intermediate size (dense layers only in MoE models).
    pub intermediate_size: u64,
    pub tie_word_embeddings: bool,
    /// Biases on q, k, v (and o) projections.
    pub qkv_bias: bool,
    pub o_bias: bool,
    pub mlp_bias: bool,
    pub qk_norm: QkNorm,
    pub mla: Option<Mla>,
    pub moe: Option<Moe>,
    /// DeepSeek-V3 `num_nextn_predict_layers` (multi-token prediction modules).
    pub mtp_layers: u64,
}

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

// ------------------------------------------------------------------ reading config.json

struct Reader<'a> {
    v: &'a Value,
    what: &'a str,
}

impl Reader<'_> {
    fn get(&self, field: &str) -> Option<&Value> {
        self.v.get(field).filter(|x| !x.is_null())
    }
    fn u64_opt(&self, field: &str) -> Result<Option<u64>> {
        match self.get(field) {
            None => Ok(None),
            Some(x) => x.as_u64().map(Some).ok_or_else(|| {
                Error::field(
                    self.what,
                    field,
                    format!("expected a non-negative integer, got {x}"),
                )
            }),
        }
    }
    fn u64(&self, field: &str) -> Result<u64> {
        self.u64_opt(field)?
            .ok_or_else(|| Error::field(self.what, field, "missing"))
    }
    fn positive(&self, field: &str) -> Result<u64> {
        let v = self.u64(field)?;
        if v == 0 {
            return Err(Error::field(self.what, field, "must be positive"));
        }
        Ok(v)
    }
    fn u64_or(&self, field: &str, default: u64) -> Result<u64> {
        Ok(self.u64_opt(field)?.unwrap_or(default))
    }
    fn bool_or(&self, field: &str, default: bool) -> Result<bool> {
        match self.get(field) {
            None => Ok(default),
            Some(x) => x.as_bool().ok_or_else(|| {
                Error::field(self.what, field, format!("expected true or false, got {x}"))
            }),
        }
    }
    fn u64_list(&self, field: &str) -> Result<Vec<u64>> {
        match self.get(field) {
            None => Ok(Vec::new()),
            Some(Value::Array(a)) => a
                .iter()
                .map(|x| {
                    x.as_u64().ok_or_else(|| {
                        Error::field(self.what, field, format!("expected integers, got {x}"))
                    })
                })
                .collect(),
            Some(x) => Err(Error::field(
                self.what,
                field,
                format!("expected a list, got {x}"),
            )),
        }
    }
}

impl ModelConfig {
    /// Reads a config.json file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let v = read_json(path)?;
        Self::from_json(&v, &path.display().to_string())
    }

    /// Reads a parsed config.json; `what` names it in errors. Optional fields take the
    /// defaults of the family's transformers config class.
    pub fn from_json(v: &Value, what: &str) -> Result<Self> {
        if !v.is_object() {
            return Err(Error::field(what, "(root)", "expected a JSON object"));
        }
        let r = Reader { v, what };
        let model_type = r
            .get("model_type")
            .and_then(Value::as_str)
            .ok_or_else(|| Error::field(what, "model_type", "missing"))?;
        let family = Family::ALL
            .iter()
            .find(|(name, _)| *name == model_type)
            .map(|(_, f)| *f)
            .ok_or_else(|| {
                let names: Vec<&str> = Family::ALL.iter().map(|(n, _)| *n).collect();
                Error::field(
                    what,
                    "model_type",
                    format!(
                        "unsupported {model_type:?} (supported: {})",
                        names.join(", ")
                    ),
                )
            })?;
        let hidden_size = r.positive("hidden_size")?;
        let heads = r.positive("num_attention_heads")?;
        let kv_heads = r.u64_or("num_key_value_heads", heads)?;
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(Error::field(
                what,
                "num_key_value_heads",
                format!("{kv_heads} does not divide num_attention_heads = {heads}"),
            ));
        }
        // Qwen3's config class defaults head_dim to 128; the others to hidden / heads.
        let head_dim = match (r.u64_opt("head_dim")?, family) {
            (Some(0), _) => return Err(Error::field(what, "head_dim", "must be positive")),
            (Some(d), _) => d,
            (None, Family::Qwen3) => 128,
            (None, _) => {
                if !hidden_size.is_multiple_of(heads) {
                    return Err(Error::field(
                        what,
                        "head_dim",
                        "missing, and hidden_size is not a multiple of num_attention_heads",
                    ));
                }
                hidden_size / heads
            }
        };
        let attention_bias = r.bool_or("attention_bias", false)?;
        let (qkv_bias, o_bias) = match family {
            Family::Qwen2 => (true, false),
            Family::Mistral | Family::Mixtral => (false, false),
            _ => (attention_bias, attention_bias),
        };
        let qk_norm = match family {
            Family::Qwen3 | Family::Qwen3Moe => QkNorm::PerHead,
            Family::Olmoe => QkNorm::Full,
            _ => QkNorm::None,
        };
        let deepseek = matches!(family, Family::DeepseekV2 | Family::DeepseekV3);
        let mla = if deepseek {
            Some(Mla {
                q_lora_rank: r.u64_opt("q_lora_rank")?,
                kv_lora_rank: r.positive("kv_lora_rank")?,
                qk_nope_head_dim: r.u64("qk_nope_head_dim")?,
                qk_rope_head_dim: r.u64("qk_rope_head_dim")?,
                v_head_dim: r.positive("v_head_dim")?,
            })
        } else {
            None
        };
        let experts_field = match family {
            Family::Mixtral => Some("num_local_experts"),
            Family::Qwen3Moe | Family::Olmoe => Some("num_experts"),
            Family::DeepseekV2 | Family::DeepseekV3 => Some("n_routed_experts"),
            _ => None,
        };
        let moe = match experts_field {
            None => None,
            Some(field) => {
                let num_experts = r.u64(field)?;
                if num_experts == 0 {
                    None
                } else {
                    let k = r.positive("num_experts_per_tok")?;
                    if k > num_experts {
                        return Err(Error::field(
                            what,
                            "num_experts_per_tok",
                            format!("{k} exceeds {field} = {num_experts}"),
                        ));
                    }
                    let expert_intermediate = match family {
                        Family::Mixtral | Family::Olmoe => r.positive("intermediate_size")?,
                        _ => r.positive("moe_intermediate_size")?,
                    };
                    let decoder_sparse_step = r.u64_or("decoder_sparse_step", 1)?;
                    if family == Family::Qwen3Moe && decoder_sparse_step == 0 {
                        return Err(Error::field(
                            what,
                            "decoder_sparse_step",
                            "must be positive",
                        ));
                    }
                    let moe_layer_freq = r.u64_or("moe_layer_freq", 1)?;
                    if moe_layer_freq == 0 {
                        return Err(Error::field(what, "moe_layer_freq", "must be positive"));
                    }
                    if family == Family::DeepseekV3 {
                        let groups = r.u64_or("n_group", 1)?;
                        if groups == 0 || !num_experts.is_multiple_of(groups) {
                            return Err(Error::field(
                                what,
                                "n_group",
                                format!(
                                    "{groups} does not divide n_routed_experts = {num_experts}"
                                ),
                            ));
                        }
                    }
                    Some(Moe {
                        num_experts,
                        k,
                        expert_intermediate,
                        n_shared_experts: match family {
                            Family::DeepseekV3 => r.u64_or("n_shared_experts", 1)?,
                            Family::DeepseekV2 => r.u64_or("n_shared_experts", 2)?,
                            _ => 0,
                        },
                        router_bias: family == Family::DeepseekV3,
                        decoder_sparse_step,
                        mlp_only_layers: if family == Family::Qwen3Moe {
                            r.u64_list("mlp_only_layers")?
                        } else {
                            Vec::new()
                        },
                        first_k_dense: match family {
                            Family::DeepseekV3 => r.u64_or("first_k_dense_replace", 3)?,
                            Family::DeepseekV2 => r.u64_or("first_k_dense_replace", 0)?,
                            _ => 0,
                        },
                        moe_layer_freq,
                    })
                }
            }
        };
        // Mixtral and OLMoE have no dense layer, so their intermediate_size is the experts'.
        let intermediate_size = r.positive("intermediate_size")?;
        Ok(ModelConfig {
            family,
            vocab_size: r.positive("vocab_size")?,
            hidden_size,
            num_hidden_layers: r.positive("num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            intermediate_size,
            tie_word_embeddings: r.bool_or("tie_word_embeddings", false)?,
            qkv_bias,
            o_bias,
            mlp_bias: matches!(family, Family::Llama | Family::DeepseekV2)
                && r.bool_or("mlp_bias", false)?,
            qk_norm,
            mla,
            moe,
            mtp_layers: if family == Family::DeepseekV3 {
                r.u64_or("num_nextn_predict_layers", 0)?
            } else {
                0
            },
        })
    }
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
    let norms = 2 * h + attn_norms; // input_layernorm + post_attention_layernorm
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

// ANCHOR: count
/// Every parameter of the model, split by kind, for all experts and for one token.
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
// ANCHOR_END: count

// ANCHOR: kv_cache
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
// ANCHOR_END: kv_cache

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

/// Reads a config.json and counts it (what `anatomy params` calls).
pub fn report_file(path: &Path) -> Result<ParamReport> {
    Ok(count(&ModelConfig::from_file(path)?))
}

/// Human-readable table of a report.
pub fn text_report(r: &ParamReport) -> String {
    let pct = |x: u64, of: u64| 100.0 * x as f64 / of as f64;
    let gb = |b: u64| b as f64 / 1e9;
    let mut s = String::new();
    let model_type = serde_json::to_value(r.model_type)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_default();
    s.push_str(&format!("model_type          {model_type}\n"));
    s.push_str(&format!(
        "layers              {} ({} dense, {} MoE)\n",
        r.dense_layers + r.moe_layers,
        r.dense_layers,
        r.moe_layers
    ));
    s.push_str(&format!(
        "{:<20}{:>18} {:>8} {:>18} {:>8}\n",
        "", "total", "share", "active", "share"
    ));
    let a = &r.active_split;
    for (name, t, act) in [
        ("embedding", r.embedding, a.embedding),
        ("attention", r.attention, a.attention),
        ("ffn / moe", r.ffn, a.ffn),
        ("norms", r.norms, a.norms),
    ] {
        s.push_str(&format!(
            "{:<20}{:>18} {:>7.2}% {:>18} {:>7.2}%\n",
            name,
            group(t),
            pct(t, r.total),
            group(act),
            pct(act, r.active)
        ));
    }
    s.push_str(&format!(
        "{:<20}{:>18} {:>8} {:>18}\n",
        "sum",
        group(r.total),
        "",
        group(r.active)
    ));
    let d = &r.ffn_detail;
    s.push_str(&format!(
        "ffn detail          dense {}, router {}, experts {}, shared {}\n",
        group(d.dense_mlp),
        group(d.router),
        group(d.experts),
        group(d.shared_experts)
    ));
    if r.mtp > 0 {
        s.push_str(&format!(
            "MTP module          {} (total with MTP {})\n",
            group(r.mtp),
            group(r.total_with_mtp)
        ));
    }
    if let (Some(ft), Some(fa)) = (r.text_formula_total, r.text_formula_active) {
        s.push_str(&format!(
            "text formula        total {} (exact − formula = {}), active {}\n",
            group(ft),
            group(r.total - ft),
            group(fa)
        ));
    }
    s.push_str(&format!(
        "weights             {:.2} GB bf16, {:.2} GB fp8, {:.2} GB f32\n",
        gb(r.bytes_bf16),
        gb(r.bytes_fp8),
        gb(r.bytes_f32)
    ));
    s.push_str(&format!(
        "KV cache / token    {} bytes bf16 (expanded {})\n",
        group(r.kv_cache_bytes_per_token_bf16),
        group(r.kv_cache_bytes_per_token_bf16_expanded)
    ));
    s.push_str(&format!(
        "FLOPs / token       {:.3} GFLOP + {} per context position\n",
        r.flops_per_token as f64 / 1e9,
        group(r.attention_flops_per_context_token)
    ));
    s
}

/// `30532122624` → `30,532,122,624`.
pub fn group(n: u64) -> String {
    let s = n.to_string();
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(ch);
    }
    out
}

/// The published configs shipped in `data/configs/` (see its PROVENANCE.md), compiled in so
/// that claims and notebooks do not depend on the working directory.
pub const BUNDLED: &[(&str, &str)] = &[
    (
        "qwen3-30b-a3b",
        include_str!("../data/configs/qwen3-30b-a3b.json"),
    ),
    ("qwen3-32b", include_str!("../data/configs/qwen3-32b.json")),
    (
        "mixtral-8x7b",
        include_str!("../data/configs/mixtral-8x7b.json"),
    ),
    (
        "deepseek-v3",
        include_str!("../data/configs/deepseek-v3.json"),
    ),
];

/// One of the [`BUNDLED`] configs by name (`"qwen3-30b-a3b"`, …).
pub fn bundled(name: &str) -> Result<ModelConfig> {
    let (_, text) = BUNDLED
        .iter()
        .find(|(n, _)| *n == name)
        .ok_or_else(|| Error::Invalid(format!("no bundled config named {name:?}")))?;
    let what = format!("data/configs/{name}.json");
    let v: Value = serde_json::from_str(text).map_err(|source| Error::Json {
        what: what.clone(),
        source,
    })?;
    ModelConfig::from_json(&v, &what)
}

/// One tensor (or a family of per-expert tensors) of a decoder layer, as a checkpoint
/// names it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct TensorInfo {
    /// e.g. `self_attn.q_proj.weight`, `mlp.experts.{0..127}.gate_proj.weight`.
    pub name: String,
    /// `[out, in]` for a linear weight, `[n]` for a norm weight or a bias.
    pub shape: Vec<u64>,
    /// How many such tensors (the number of experts, or 1).
    pub copies: u64,
}

impl TensorInfo {
    pub fn numel(&self) -> u64 {
        self.copies * self.shape.iter().product::<u64>()
    }
}

// ANCHOR: layer_tensors
/// The tensors of decoder layer `l` (names relative to `model.layers.{l}.`), in the
/// Hugging Face per-expert layout.
pub fn layer_tensors(c: &ModelConfig, l: u64) -> Vec<TensorInfo> {
    let h = c.hidden_size;
    let t = |name: &str, shape: &[u64], copies: u64| TensorInfo {
        name: name.to_string(),
        shape: shape.to_vec(),
        copies,
    };
    let mut v = vec![
        t("input_layernorm.weight", &[h], 1),
        t("post_attention_layernorm.weight", &[h], 1),
    ];
    let (nh, nkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    match c.mla {
        Some(m) => {
            let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
            let kv_a = m.kv_lora_rank + m.qk_rope_head_dim;
            match m.q_lora_rank {
                Some(r) => {
                    v.push(t("self_attn.q_a_proj.weight", &[r, h], 1));
                    if c.qkv_bias {
                        v.push(t("self_attn.q_a_proj.bias", &[r], 1));
                    }
                    v.push(t("self_attn.q_a_layernorm.weight", &[r], 1));
                    v.push(t("self_attn.q_b_proj.weight", &[nh * qk, r], 1));
                }
                None => v.push(t("self_attn.q_proj.weight", &[nh * qk, h], 1)),
            }
            v.push(t("self_attn.kv_a_proj_with_mqa.weight", &[kv_a, h], 1));
            if c.qkv_bias {
                v.push(t("self_attn.kv_a_proj_with_mqa.bias", &[kv_a], 1));
            }
            v.push(t("self_attn.kv_a_layernorm.weight", &[m.kv_lora_rank], 1));
            v.push(t(
                "self_attn.kv_b_proj.weight",
                &[nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank],
                1,
            ));
            v.push(t("self_attn.o_proj.weight", &[h, nh * m.v_head_dim], 1));
            if c.o_bias {
                v.push(t("self_attn.o_proj.bias", &[h], 1));
            }
        }
        None => {
            v.push(t("self_attn.q_proj.weight", &[nh * d, h], 1));
            v.push(t("self_attn.k_proj.weight", &[nkv * d, h], 1));
            v.push(t("self_attn.v_proj.weight", &[nkv * d, h], 1));
            v.push(t("self_attn.o_proj.weight", &[h, nh * d], 1));
            if c.qkv_bias {
                v.push(t("self_attn.q_proj.bias", &[nh * d], 1));
                v.push(t("self_attn.k_proj.bias", &[nkv * d], 1));
                v.push(t("self_attn.v_proj.bias", &[nkv * d], 1));
            }
            if c.o_bias {
                v.push(t("self_attn.o_proj.bias", &[h], 1));
            }
            match c.qk_norm {
                QkNorm::None => {}
                QkNorm::PerHead => {
                    v.push(t("self_attn.q_norm.weight", &[d], 1));
                    v.push(t("self_attn.k_norm.weight", &[d], 1));
                }
                QkNorm::Full => {
                    v.push(t("self_attn.q_norm.weight", &[h], 1));
                    v.push(t("self_attn.k_norm.weight", &[h / nh * nkv], 1));
                }
            }
        }
    }
    let mlp = |v: &mut Vec<TensorInfo>, prefix: &str, i: u64, copies: u64, bias: bool| {
        v.push(t(&format!("{prefix}.gate_proj.weight"), &[i, h], copies));
        v.push(t(&format!("{prefix}.up_proj.weight"), &[i, h], copies));
        v.push(t(&format!("{prefix}.down_proj.weight"), &[h, i], copies));
        if bias {
            v.push(t(&format!("{prefix}.gate_proj.bias"), &[i], copies));
            v.push(t(&format!("{prefix}.up_proj.bias"), &[i], copies));
            v.push(t(&format!("{prefix}.down_proj.bias"), &[h], copies));
        }
    };
    match (&c.moe, layer_is_moe(c, l)) {
        (Some(m), true) => {
            v.push(t("mlp.gate.weight", &[m.num_experts, h], 1));
            if m.router_bias {
                v.push(t("mlp.gate.e_score_correction_bias", &[m.num_experts], 1));
            }
            let experts = format!("mlp.experts.{{0..{}}}", m.num_experts - 1);
            mlp(
                &mut v,
                &experts,
                m.expert_intermediate,
                m.num_experts,
                false,
            );
            if m.n_shared_experts > 0 {
                mlp(
                    &mut v,
                    "mlp.shared_experts",
                    m.n_shared_experts * m.expert_intermediate,
                    1,
                    c.mlp_bias,
                );
            }
        }
        _ => mlp(&mut v, "mlp", c.intermediate_size, 1, c.mlp_bias),
    }
    v
}
// ANCHOR_END: layer_tensors

/// The tables chapter 6 includes from `book/src/generated/` (file name, contents).
pub fn book_snippets() -> Vec<(&'static str, String)> {
    let c = bundled("qwen3-30b-a3b").expect("bundled config");
    let mut tensors = String::from(
        "| tensor (in `model.layers.{0..47}.`) | shape [out, in] | copies | parameters per layer |\n|---|---|---|---|\n",
    );
    let mut per_layer = 0;
    for ti in layer_tensors(&c, 0) {
        let shape: Vec<String> = ti.shape.iter().map(|x| group(*x)).collect();
        tensors.push_str(&format!(
            "| `{}` | [{}] | {} | {} |\n",
            ti.name,
            shape.join(", "),
            ti.copies,
            group(ti.numel())
        ));
        per_layer += ti.numel();
    }
    let r = count(&c);
    tensors.push_str(&format!(
        "| **one layer** | | | **{}** |\n| `model.embed_tokens.weight`, `lm_head.weight` | [{}, {}] | 2 | {} |\n| `model.norm.weight` | [{}] | 1 | {} |\n| **model (48 layers)** | | | **{}** |\n",
        group(per_layer),
        group(c.vocab_size),
        group(c.hidden_size),
        group(r.embedding),
        group(c.hidden_size),
        group(c.hidden_size),
        group(r.total)
    ));

    let mut models = String::from(
        "| config | total | active | embedding | attention | FFN / MoE | norms | bf16 weights | KV cache per token (bf16) | GFLOP per token |\n|---|---|---|---|---|---|---|---|---|---|\n",
    );
    for (name, _) in BUNDLED {
        let r = count(&bundled(name).expect("bundled config"));
        models.push_str(&format!(
            "| `{name}` | {} | {} | {} | {} | {} | {} | {:.1} GB | {} B | {:.2} |\n",
            group(r.total),
            group(r.active),
            group(r.embedding),
            group(r.attention),
            group(r.ffn),
            group(r.norms),
            r.bytes_bf16 as f64 / 1e9,
            group(r.kv_cache_bytes_per_token_bf16),
            r.flops_per_token as f64 / 1e9
        ));
    }

    let mut shares = String::from(
        "| part | Qwen3-30B-A3B, share of total | Qwen3-30B-A3B, share of active | Qwen3-32B, share of total |\n|---|---|---|---|\n",
    );
    let d = count(&bundled("qwen3-32b").expect("bundled config"));
    let p = |x: u64, of: u64| format!("{:.2}%", 100.0 * x as f64 / of as f64);
    let a = r.active_split;
    for (label, t, act, dense) in [
        (
            "embeddings (input + output)",
            r.embedding,
            a.embedding,
            d.embedding,
        ),
        ("attention", r.attention, a.attention, d.attention),
        ("MoE (router + experts) / FFN", r.ffn, a.ffn, d.ffn),
        ("RMSNorm weights", r.norms, a.norms, d.norms),
    ] {
        shares.push_str(&format!(
            "| {label} | {} | {} | {} |\n",
            p(t, r.total),
            p(act, r.active),
            p(dense, d.total)
        ));
    }
    vec![
        ("qwen3-tensors.md", tensors),
        ("params-models.md", models),
        ("qwen3-shares.md", shares),
    ]
}
