//! Chapter 6's input: a Hugging Face `config.json` read into [`ModelConfig`], the handful
//! of numbers the parameter counts depend on (source S0 5.5.1), with each family's
//! transformers defaults filled in; and the published configs bundled with the crate.

use super::family::{AT_LEAST_ONE, Description, Experts};
pub use super::family::{Family, QkNorm};
use crate::error::{Error, Result, read_json};
use crate::json::Fields;
use serde::Serialize;
use serde_json::Value;
use std::path::Path;

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

impl ModelConfig {
    /// Reads a config.json file.
    pub fn from_file(path: &Path) -> Result<Self> {
        let v = read_json(path)?;
        Self::from_json(&v, &path.display().to_string())
    }

    /// Reads a parsed config.json; `what` names it in errors. The shared fields and their
    /// defaults come from [`Description`]; this view adds latent attention and the MoE
    /// layout of the DeepSeek families.
    pub fn from_json(v: &Value, what: &str) -> Result<Self> {
        Self::from_description(&Description::from_json(v, what)?)
    }

    /// The counting view of a description.
    pub fn from_description(d: &Description) -> Result<Self> {
        let r = d.fields();
        let family = d.family();
        let config = ModelConfig {
            family,
            vocab_size: d.vocab_size,
            hidden_size: d.hidden_size,
            num_hidden_layers: d.num_hidden_layers,
            num_attention_heads: d.num_attention_heads,
            num_key_value_heads: d.num_key_value_heads,
            head_dim: d.head_dim,
            intermediate_size: d.intermediate_size,
            tie_word_embeddings: d.tie_word_embeddings,
            qkv_bias: d.qkv_bias,
            o_bias: d.o_bias,
            mlp_bias: matches!(family, Family::Llama | Family::DeepseekV2)
                && r.opt_bool("mlp_bias")?.unwrap_or(false),
            qk_norm: d.defaults.qk_norm,
            mla: latent_attention(&r, family)?,
            moe: d
                .experts
                .as_ref()
                .map(|e| moe_layout(&r, family, e))
                .transpose()?,
            mtp_layers: if family == Family::DeepseekV3 {
                r.opt_u64("num_nextn_predict_layers")?.unwrap_or(0)
            } else {
                0
            },
        };
        super::check_counts_fit(&config, d.what())?;
        Ok(config)
    }
}

/// DeepSeek's multi-head latent attention; `None` for the other families.
fn latent_attention(r: &Fields, family: Family) -> Result<Option<Mla>> {
    if !matches!(family, Family::DeepseekV2 | Family::DeepseekV3) {
        return Ok(None);
    }
    Ok(Some(Mla {
        q_lora_rank: r.opt_u64("q_lora_rank")?,
        kv_lora_rank: r.req_u64_nonzero("kv_lora_rank", AT_LEAST_ONE)?,
        qk_nope_head_dim: r.req_u64("qk_nope_head_dim")?,
        qk_rope_head_dim: r.req_u64("qk_rope_head_dim")?,
        v_head_dim: r.req_u64_nonzero("v_head_dim", AT_LEAST_ONE)?,
    }))
}

/// The routed experts with what the DeepSeek families add: shared experts, a routing bias,
/// a dense prefix and a layer frequency.
fn moe_layout(r: &Fields, family: Family, e: &Experts) -> Result<Moe> {
    let moe_layer_freq = r.opt_u64("moe_layer_freq")?.unwrap_or(1);
    if moe_layer_freq == 0 {
        return Err(r.error("moe_layer_freq", AT_LEAST_ONE));
    }
    if family == Family::DeepseekV3 {
        let groups = r.opt_u64("n_group")?.unwrap_or(1);
        if groups == 0 || !e.count.is_multiple_of(groups) {
            return Err(r.error(
                "n_group",
                format!("{groups} does not divide n_routed_experts = {}", e.count),
            ));
        }
    }
    let (shared_default, dense_prefix_default) = match family {
        Family::DeepseekV3 => (1, 3),
        Family::DeepseekV2 => (2, 0),
        _ => (0, 0),
    };
    let deepseek = shared_default > 0;
    Ok(Moe {
        num_experts: e.count,
        k: e.k,
        expert_intermediate: e.width,
        n_shared_experts: if deepseek {
            r.opt_u64("n_shared_experts")?.unwrap_or(shared_default)
        } else {
            0
        },
        router_bias: family == Family::DeepseekV3,
        decoder_sparse_step: e.decoder_sparse_step,
        mlp_only_layers: e.mlp_only_layers.clone(),
        first_k_dense: if deepseek {
            r.opt_u64("first_k_dense_replace")?
                .unwrap_or(dense_prefix_default)
        } else {
            0
        },
        moe_layer_freq,
    })
}

/// The published configs shipped in `data/configs/` (see its PROVENANCE.md), compiled in so
/// that claims and notebooks do not depend on the working directory.
pub const BUNDLED: &[(&str, &str)] = &[
    (
        "qwen3-30b-a3b",
        include_str!("../../data/configs/qwen3-30b-a3b.json"),
    ),
    (
        "qwen3-32b",
        include_str!("../../data/configs/qwen3-32b.json"),
    ),
    (
        "mixtral-8x7b",
        include_str!("../../data/configs/mixtral-8x7b.json"),
    ),
    (
        "deepseek-v3",
        include_str!("../../data/configs/deepseek-v3.json"),
    ),
];

/// Published configs the claims read for single facts (a rope type, a vocabulary and hidden
/// size); the parameter tables do not list them. Provenance: data/configs/PROVENANCE.md.
pub const PUBLISHED: &[(&str, &str)] = &[
    (
        "llama-3.1-8b",
        include_str!("../../data/configs/llama-3.1-8b.json"),
    ),
    (
        "qwen2.5-7b-instruct",
        include_str!("../../data/configs/qwen2.5-7b-instruct.json"),
    ),
    (
        "gpt-oss-20b",
        include_str!("../../data/configs/gpt-oss-20b.json"),
    ),
];

/// One of the [`BUNDLED`] or [`PUBLISHED`] configs as parsed JSON, by name.
pub fn published_json(name: &str) -> Result<Value> {
    let (_, text) = BUNDLED
        .iter()
        .chain(PUBLISHED)
        .find(|(n, _)| *n == name)
        .ok_or_else(|| Error::Invalid(format!("no bundled config named {name:?}")))?;
    serde_json::from_str(text).map_err(|source| Error::Json {
        what: format!("data/configs/{name}.json"),
        source,
    })
}

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
