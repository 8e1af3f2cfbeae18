//! Chapter 6's input: a Hugging Face `config.json` read into [`ModelConfig`], the handful
//! of numbers the parameter counts depend on (source S0 5.5.1), with each family's
//! transformers defaults filled in; and the published configs bundled with the crate.

use crate::error::{Error, Result, read_json};
use crate::json::Fields;
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
    /// Gemma 3's text model: q/k norms, norms before and after attention and the FFN.
    Gemma3,
}

/// transformers' value for a config whose `num_key_value_heads` is absent (`key_absent`)
/// or null: Qwen3MoeConfig's and Gemma3TextConfig's default is 4, Qwen2Config's 32 when the key is absent; the
/// other families take every query head. The engine and `anatomy params` both read it here.
pub fn default_kv_heads(model_type: &str, key_absent: bool, heads: u64) -> u64 {
    match model_type {
        "qwen3_moe" | "gemma3_text" | "gemma3" => 4,
        "qwen2" if key_absent => 32,
        _ => heads,
    }
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
        ("gemma3_text", Family::Gemma3),
        ("gemma3", Family::Gemma3),
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

/// A size that fixes a tensor shape.
fn positive(r: &Fields, field: &str) -> Result<u64> {
    r.req_u64_nonzero(field, "must be positive")
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
        let r = Fields::new(what, v);
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
        let hidden_size = positive(&r, "hidden_size")?;
        let heads = positive(&r, "num_attention_heads")?;
        let kv_heads = r.opt_u64("num_key_value_heads")?.unwrap_or_else(|| {
            default_kv_heads(model_type, r.raw("num_key_value_heads").is_none(), heads)
        });
        if kv_heads == 0 || !heads.is_multiple_of(kv_heads) {
            return Err(Error::field(
                what,
                "num_key_value_heads",
                format!("{kv_heads} does not divide num_attention_heads = {heads}"),
            ));
        }
        // Qwen3's config class defaults head_dim to 128; the others to hidden / heads.
        let head_dim = match (r.opt_u64("head_dim")?, family) {
            (Some(0), _) => return Err(Error::field(what, "head_dim", "must be positive")),
            (Some(d), _) => d,
            (None, Family::Qwen3) => 128,
            (None, Family::Gemma3) => 256,
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
        let attention_bias = r.opt_bool("attention_bias")?.unwrap_or(false);
        let (qkv_bias, o_bias) = match family {
            Family::Qwen2 => (true, false),
            Family::Mistral | Family::Mixtral => (false, false),
            _ => (attention_bias, attention_bias),
        };
        let qk_norm = match family {
            Family::Qwen3 | Family::Qwen3Moe | Family::Gemma3 => QkNorm::PerHead,
            Family::Olmoe => QkNorm::Full,
            _ => QkNorm::None,
        };
        let deepseek = matches!(family, Family::DeepseekV2 | Family::DeepseekV3);
        let mla = if deepseek {
            Some(Mla {
                q_lora_rank: r.opt_u64("q_lora_rank")?,
                kv_lora_rank: positive(&r, "kv_lora_rank")?,
                qk_nope_head_dim: r.req_u64("qk_nope_head_dim")?,
                qk_rope_head_dim: r.req_u64("qk_rope_head_dim")?,
                v_head_dim: positive(&r, "v_head_dim")?,
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
        // transformers 5.x's save_pretrained writes a Qwen3-MoE config's expert count as
        // `num_local_experts` (the bundled tiny checkpoint's config.json does).
        let local_only = family == Family::Qwen3Moe
            && r.opt_u64("num_experts")?.is_none()
            && r.opt_u64("num_local_experts")?.is_some();
        let experts_field = if local_only {
            Some("num_local_experts")
        } else {
            experts_field
        };
        let moe = match experts_field {
            None => None,
            Some(field) => {
                // transformers 5.x saves Qwen3-MoE's expert count as `num_local_experts`.
                let num_experts = match (family, r.opt_u64(field)?) {
                    (Family::Qwen3Moe, None) => r.opt_u64("num_local_experts")?,
                    (_, n) => n,
                };
                let num_experts = match num_experts {
                    Some(n) => n,
                    None => r.req_u64(field)?,
                };
                if num_experts == 0 {
                    None
                } else {
                    let k = positive(&r, "num_experts_per_tok")?;
                    if k > num_experts {
                        return Err(Error::field(
                            what,
                            "num_experts_per_tok",
                            format!("{k} exceeds {field} = {num_experts}"),
                        ));
                    }
                    let expert_intermediate = match family {
                        Family::Mixtral | Family::Olmoe => positive(&r, "intermediate_size")?,
                        _ => positive(&r, "moe_intermediate_size")?,
                    };
                    let decoder_sparse_step = r.opt_u64("decoder_sparse_step")?.unwrap_or(1);
                    if family == Family::Qwen3Moe && decoder_sparse_step == 0 {
                        return Err(Error::field(
                            what,
                            "decoder_sparse_step",
                            "must be positive",
                        ));
                    }
                    let moe_layer_freq = r.opt_u64("moe_layer_freq")?.unwrap_or(1);
                    if moe_layer_freq == 0 {
                        return Err(Error::field(what, "moe_layer_freq", "must be positive"));
                    }
                    if family == Family::DeepseekV3 {
                        let groups = r.opt_u64("n_group")?.unwrap_or(1);
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
                            Family::DeepseekV3 => r.opt_u64("n_shared_experts")?.unwrap_or(1),
                            Family::DeepseekV2 => r.opt_u64("n_shared_experts")?.unwrap_or(2),
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
                            Family::DeepseekV3 => r.opt_u64("first_k_dense_replace")?.unwrap_or(3),
                            Family::DeepseekV2 => r.opt_u64("first_k_dense_replace")?.unwrap_or(0),
                            _ => 0,
                        },
                        moe_layer_freq,
                    })
                }
            }
        };
        // Mixtral and OLMoE have no dense layer, so their intermediate_size is the experts'.
        let intermediate_size = positive(&r, "intermediate_size")?;
        let config = ModelConfig {
            family,
            vocab_size: positive(&r, "vocab_size")?,
            hidden_size,
            num_hidden_layers: positive(&r, "num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads,
            head_dim,
            intermediate_size,
            tie_word_embeddings: r
                .opt_bool("tie_word_embeddings")?
                .unwrap_or(family == Family::Gemma3),
            qkv_bias,
            o_bias,
            mlp_bias: matches!(family, Family::Llama | Family::DeepseekV2)
                && r.opt_bool("mlp_bias")?.unwrap_or(false),
            qk_norm,
            mla,
            moe,
            mtp_layers: if family == Family::DeepseekV3 {
                r.opt_u64("num_nextn_predict_layers")?.unwrap_or(0)
            } else {
                0
            },
        };
        super::check_counts_fit(&config, what)?;
        Ok(config)
    }
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
