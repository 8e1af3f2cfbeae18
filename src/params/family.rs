//! One model read once: a Hugging Face `config.json` parsed into a [`Description`], with
//! every family's defaults in one table, [`FAMILIES`], holding what transformers' config
//! classes (`Qwen3MoeConfig`, `LlamaConfig`, … `Gemma3TextConfig`) fill in when a field is
//! left out. The counting chapter's [`ModelConfig`](super::ModelConfig) and the engine's
//! `qwen3::Qwen3Config` are both built from a `Description`; each adds only what it alone
//! reads (multi-head latent attention, RoPE, sliding windows).
//!
//! Sizes that fix a tensor shape are required even where the class has a default: a
//! checkpoint's shapes come from its own file, never from a class's example values.

use crate::error::{Error, Result};
use crate::json::Fields;
use serde::Serialize;
use serde_json::Value;

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

/// Which transformers generation wrote the config (informational: both compute alike).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ConfigStyle {
    /// `rope_theta` / `rope_scaling`, `num_experts`, `torch_dtype`.
    Transformers4,
    /// `rope_parameters`, `num_local_experts`, `dtype`.
    Transformers5,
}

/// `num_key_value_heads` when the config leaves it out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KvHeadsDefault {
    /// Every query head has its own key/value head.
    AllHeads,
    /// The class default (a `null` is refused by these classes; we read it the same).
    Fixed(u64),
    /// The class default when the key is absent; every query head when it is `null`.
    AbsentFixed(u64),
}

/// Which attention projections carry biases.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Biases {
    /// q, k, v and o all follow `attention_bias` (default false).
    AttentionBias,
    /// Qwen2: q, k and v always, o never (the class has no `attention_bias`).
    QkvOnly,
    /// Mistral, Mixtral: none.
    None,
}

/// One family's config class, as far as the readers need it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FamilyDefaults {
    pub model_type: &'static str,
    pub family: Family,
    pub kv_heads: KvHeadsDefault,
    /// `head_dim` when absent; `None`: `hidden_size / num_attention_heads`, rounded down.
    pub head_dim: Option<u64>,
    pub max_position_embeddings: u64,
    pub tie_word_embeddings: bool,
    pub biases: Biases,
    pub qk_norm: QkNorm,
    /// The field that counts the routed experts; `None` for a dense family.
    pub experts_field: Option<&'static str>,
    /// The field that sizes one expert's MLP.
    pub expert_width_field: &'static str,
    /// The engine (`qwen3::Model`) runs this family.
    pub engine_runs: bool,
}

use KvHeadsDefault::{AbsentFixed, AllHeads, Fixed};

/// One row of [`FAMILIES`]; the columns every family fills the same way come from `family`.
const fn row(
    model_type: &'static str,
    family: Family,
    kv_heads: KvHeadsDefault,
    head_dim: Option<u64>,
    max_position_embeddings: u64,
) -> FamilyDefaults {
    let (experts_field, expert_width_field) = match family {
        Family::Qwen3Moe => (Some("num_experts"), "moe_intermediate_size"),
        Family::Olmoe => (Some("num_experts"), "intermediate_size"),
        Family::Mixtral => (Some("num_local_experts"), "intermediate_size"),
        Family::DeepseekV2 | Family::DeepseekV3 => {
            (Some("n_routed_experts"), "moe_intermediate_size")
        }
        _ => (None, "moe_intermediate_size"),
    };
    FamilyDefaults {
        model_type,
        family,
        kv_heads,
        head_dim,
        max_position_embeddings,
        tie_word_embeddings: matches!(family, Family::Gemma3),
        biases: match family {
            Family::Qwen2 => Biases::QkvOnly,
            Family::Mistral | Family::Mixtral => Biases::None,
            _ => Biases::AttentionBias,
        },
        qk_norm: match family {
            Family::Qwen3 | Family::Qwen3Moe | Family::Gemma3 => QkNorm::PerHead,
            Family::Olmoe => QkNorm::Full,
            _ => QkNorm::None,
        },
        experts_field,
        expert_width_field,
        engine_runs: matches!(
            family,
            Family::Qwen2 | Family::Qwen3 | Family::Qwen3Moe | Family::Llama | Family::Gemma3
        ),
    }
}

/// Every family's defaults, as transformers 5.24's config classes set them (a `None`
/// head_dim is the class's `hidden_size // num_attention_heads`).
pub const FAMILIES: &[FamilyDefaults] = &[
    row("qwen2", Family::Qwen2, AbsentFixed(32), None, 32_768),
    row("qwen3", Family::Qwen3, AbsentFixed(32), Some(128), 32_768),
    row("qwen3_moe", Family::Qwen3Moe, Fixed(4), None, 32_768),
    row("llama", Family::Llama, AllHeads, None, 2048),
    row("mistral", Family::Mistral, Fixed(8), None, 131_072),
    row("mixtral", Family::Mixtral, Fixed(8), None, 131_072),
    row("olmoe", Family::Olmoe, AllHeads, None, 4096),
    row("deepseek_v2", Family::DeepseekV2, AllHeads, Some(64), 2048),
    row(
        "deepseek_v3",
        Family::DeepseekV3,
        AbsentFixed(128),
        Some(64),
        4096,
    ),
    row("gemma3_text", Family::Gemma3, Fixed(4), Some(256), 131_072),
    row("gemma3", Family::Gemma3, Fixed(4), Some(256), 131_072),
];

/// The routed experts of an MoE config (`None` in a [`Description`] when dense).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Experts {
    /// Routed experts per MoE layer.
    pub count: u64,
    /// `num_experts_per_tok`.
    pub k: u64,
    /// One expert's intermediate size.
    pub width: u64,
    /// Qwen3-MoE's placement: MoE every `decoder_sparse_step`-th layer …
    pub decoder_sparse_step: u64,
    /// … except these (Qwen3-MoE only).
    pub mlp_only_layers: Vec<u64>,
}

/// What both views read from a config, with the family's defaults filled in.
#[derive(Clone, Debug, PartialEq)]
pub struct Description {
    pub defaults: &'static FamilyDefaults,
    pub style: ConfigStyle,
    pub vocab_size: u64,
    pub hidden_size: u64,
    pub num_hidden_layers: u64,
    pub num_attention_heads: u64,
    pub num_key_value_heads: u64,
    pub head_dim: u64,
    /// The dense MLP's width; 0 when absent and no layer needs it.
    pub intermediate_size: u64,
    pub tie_word_embeddings: bool,
    pub qkv_bias: bool,
    pub o_bias: bool,
    pub experts: Option<Experts>,
    /// The object the fields were read from (a multimodal config's `text_config`) and its
    /// name in errors.
    doc: Value,
    what: String,
}

/// The problem a zero size is.
pub const AT_LEAST_ONE: &str = "must be at least 1";

fn size(f: &Fields, field: &str) -> Result<u64> {
    f.req_u64_nonzero(field, AT_LEAST_ONE)
}

impl Description {
    /// Reads a parsed config; `what` names it in errors. A multimodal `gemma3` config is
    /// read through its `text_config`; a config without `model_type` is Qwen3-MoE when it
    /// counts experts and Qwen3 otherwise.
    pub fn from_json(v: &Value, what: &str) -> Result<Description> {
        if !v.is_object() {
            return Err(Error::Invalid(format!("{what}: not a JSON object")));
        }
        let f = Fields::new(what, v);
        if f.opt_str("model_type")? == Some("gemma3")
            && let Some(text) = f.get("text_config")
        {
            let mut text = text.clone();
            let Some(obj) = text.as_object_mut() else {
                return Err(f.error("text_config", "expected an object"));
            };
            obj.entry("model_type").or_insert("gemma3_text".into());
            return Self::from_json(&text, &format!("{what}: text_config"));
        }
        let defaults = family_of(&f)?;
        let hidden_size = size(&f, "hidden_size")?;
        let heads = size(&f, "num_attention_heads")?;
        let attention_bias = f.opt_bool("attention_bias")?.unwrap_or(false);
        let (qkv_bias, o_bias) = match defaults.biases {
            Biases::AttentionBias => (attention_bias, attention_bias),
            Biases::QkvOnly => (true, false),
            Biases::None => (false, false),
        };
        let mut d = Description {
            defaults,
            style: style_of(&f),
            vocab_size: size(&f, "vocab_size")?,
            hidden_size,
            num_hidden_layers: size(&f, "num_hidden_layers")?,
            num_attention_heads: heads,
            num_key_value_heads: kv_heads(&f, defaults, heads)?,
            head_dim: head_dim(&f, defaults, hidden_size, heads)?,
            intermediate_size: 0,
            tie_word_embeddings: f
                .opt_bool("tie_word_embeddings")?
                .unwrap_or(defaults.tie_word_embeddings),
            qkv_bias,
            o_bias,
            experts: experts(&f, defaults)?,
            doc: Value::Null,
            what: what.to_string(),
        };
        d.intermediate_size = dense_width(&f, &d)?;
        d.doc = v.clone();
        Ok(d)
    }

    /// The fields of the object read, for what a view adds.
    pub fn fields(&self) -> Fields<'_> {
        Fields::new(&self.what, &self.doc)
    }

    /// The object read (the `text_config` of a multimodal config).
    pub fn doc(&self) -> &Value {
        &self.doc
    }

    /// Its name in errors.
    pub fn what(&self) -> &str {
        &self.what
    }

    pub fn family(&self) -> Family {
        self.defaults.family
    }

    pub fn model_type(&self) -> &'static str {
        self.defaults.model_type
    }

    /// Whether some layer is a dense MLP under Qwen3-MoE's placement rule (every layer of
    /// a dense model; the other MoE families add their own dense prefix in the counting view).
    pub fn has_dense_layer(&self) -> bool {
        let Some(e) = &self.experts else {
            return true;
        };
        let only: Vec<usize> = e.mlp_only_layers.iter().map(|&x| x as usize).collect();
        let step = e.decoder_sparse_step as usize;
        (0..self.num_hidden_layers as usize)
            .any(|l| !crate::moe::layer::is_moe_layer(l, step, &only, 0))
    }
}

/// The defaults row for the config's `model_type` (or the family its fields imply).
fn family_of(f: &Fields) -> Result<&'static FamilyDefaults> {
    let model_type = match f.opt_str("model_type")? {
        Some(t) => t,
        None if f.get("num_experts").is_some() || f.get("num_local_experts").is_some() => {
            "qwen3_moe"
        }
        None => "qwen3",
    };
    FAMILIES
        .iter()
        .find(|d| d.model_type == model_type)
        .ok_or_else(|| {
            let names: Vec<&str> = FAMILIES.iter().map(|d| d.model_type).collect();
            f.error(
                "model_type",
                format!(
                    "unsupported {model_type:?} (supported: {})",
                    names.join(", ")
                ),
            )
        })
}

/// transformers 5.x's `save_pretrained` writes `rope_parameters`, `num_local_experts` and
/// `dtype`; 4.x (and the official releases) `rope_theta`, `num_experts`, `torch_dtype`.
fn style_of(f: &Fields) -> ConfigStyle {
    if ["rope_parameters", "num_local_experts", "dtype"]
        .iter()
        .any(|k| f.get(k).is_some())
    {
        ConfigStyle::Transformers5
    } else {
        ConfigStyle::Transformers4
    }
}

fn kv_heads(f: &Fields, defaults: &FamilyDefaults, heads: u64) -> Result<u64> {
    let kv = match (f.opt_u64("num_key_value_heads")?, defaults.kv_heads) {
        (Some(n), _) => n,
        (None, Fixed(n)) => n,
        (None, AbsentFixed(n)) if f.raw("num_key_value_heads").is_none() => n,
        (None, _) => heads,
    };
    if kv == 0 || !heads.is_multiple_of(kv) {
        return Err(f.error(
            "num_key_value_heads",
            format!("{kv} does not divide num_attention_heads = {heads}"),
        ));
    }
    Ok(kv)
}

fn head_dim(f: &Fields, defaults: &FamilyDefaults, hidden: u64, heads: u64) -> Result<u64> {
    let d = match (f.opt_u64("head_dim")?, defaults.head_dim) {
        (Some(d), _) | (None, Some(d)) => d,
        (None, None) => hidden / heads,
    };
    if d == 0 {
        return Err(f.error("head_dim", AT_LEAST_ONE));
    }
    Ok(d)
}

fn experts(f: &Fields, defaults: &FamilyDefaults) -> Result<Option<Experts>> {
    let Some(field) = defaults.experts_field else {
        return Ok(None);
    };
    // transformers 5.x saves Qwen3-MoE's expert count as `num_local_experts`.
    let (field, count) = match f.opt_u64(field)? {
        Some(n) => (field, n),
        None => match f.opt_u64("num_local_experts")? {
            Some(n) if defaults.family == Family::Qwen3Moe => ("num_local_experts", n),
            _ => return Err(f.error(field, "missing")),
        },
    };
    if count == 0 {
        return Ok(None);
    }
    let k = size(f, "num_experts_per_tok")?;
    if k > count {
        return Err(f.error(
            "num_experts_per_tok",
            format!("{k} exceeds {field} = {count}"),
        ));
    }
    let decoder_sparse_step = f.opt_u64("decoder_sparse_step")?.unwrap_or(1);
    if decoder_sparse_step == 0 {
        return Err(f.error(
            "decoder_sparse_step",
            "must be at least 1 (MoE every n-th layer)",
        ));
    }
    let mlp_only_layers = if defaults.family == Family::Qwen3Moe {
        f.index_list("mlp_only_layers")?
            .into_iter()
            .map(|l| l as u64)
            .collect()
    } else {
        Vec::new()
    };
    Ok(Some(Experts {
        count,
        k,
        width: size(f, defaults.expert_width_field)?,
        decoder_sparse_step,
        mlp_only_layers,
    }))
}

/// `intermediate_size`: required when some layer is a dense MLP (DeepSeek's first layers
/// always are), 0 when absent and none is.
fn dense_width(f: &Fields, d: &Description) -> Result<u64> {
    if let Some(n) = f.opt_u64("intermediate_size")? {
        return match n {
            0 => Err(f.error("intermediate_size", AT_LEAST_ONE)),
            n => Ok(n),
        };
    }
    let deepseek = matches!(d.family(), Family::DeepseekV2 | Family::DeepseekV3);
    if deepseek || d.has_dense_layer() {
        return Err(f.error("intermediate_size", "missing (a dense MLP layer needs it)"));
    }
    Ok(0)
}
