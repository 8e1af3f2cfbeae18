//! A Qwen3-MoE, dense Qwen3 or Qwen2 / Qwen2.5 `config.json`, in either style found in the
//! wild.
//!
//! Source S0 5.5.1 lists the fields of Qwen3-30B-A3B that change the computation; this
//! module reads every one of them. Checkpoints saved by transformers 4.x (and the official
//! Qwen releases) write `rope_theta` + `rope_scaling`, `num_experts` and `torch_dtype`;
//! transformers 5.x's `save_pretrained` writes `rope_parameters` (carrying `rope_theta`),
//! `num_local_experts` and `dtype`. Both parse to the same [`Qwen3Config`].
//!
//! Sizes that fix tensor shapes (`vocab_size`, `hidden_size`, `num_hidden_layers`,
//! `num_attention_heads`, and the expert sizes of an MoE model) are required; behaviour
//! flags fall back to the defaults of transformers' `Qwen3MoeConfig` / `Qwen3Config`
//! classes — notably `norm_topk_prob = false` (the 30B-A3B checkpoint sets it true) and
//! `head_dim = hidden_size / num_attention_heads` for Qwen3-MoE (Qwen3's class says 128).
//!
//! Qwen2 (`model_type: "qwen2"`, the Qwen2 and Qwen2.5 releases) is a variant of the same
//! dense model, as transformers' `Qwen2ForCausalLM` builds it: q/k/v projections always carry
//! biases and o_proj never does (there is no `attention_bias` field), there is no q/k
//! RMSNorm, `head_dim` defaults to `hidden_size / num_attention_heads`, an absent
//! `num_key_value_heads` means the class default 32 (`null` means all heads), and the
//! sliding window (`use_sliding_window`, `sliding_window`, then `layer_types` or else
//! `max_window_layers`: layers from that index on) follows the same rule as dense Qwen3.

use crate::error::{Error, Result};
use crate::json::Fields;
use crate::long_context::scaling::RopeConfig;
use crate::params::{Description, FAMILIES, Family, QkNorm};
use serde_json::Value;
use std::path::Path;

pub use crate::params::ConfigStyle;

/// Every config field that changes the forward pass.
#[derive(Clone, Debug, PartialEq)]
pub struct Qwen3Config {
    /// `"qwen3_moe"`, `"qwen3"` or `"qwen2"`.
    pub model_type: String,
    pub style: ConfigStyle,
    pub vocab_size: usize,
    pub hidden_size: usize,
    /// Width of the dense MLP (layers that are not MoE).
    pub intermediate_size: usize,
    pub num_hidden_layers: usize,
    pub num_attention_heads: usize,
    pub num_key_value_heads: usize,
    /// Per-head dimension; `num_attention_heads · head_dim` may differ from `hidden_size`.
    pub head_dim: usize,
    pub max_position_embeddings: usize,
    pub rms_norm_eps: f32,
    pub tie_word_embeddings: bool,
    /// q/k/v projections carry biases (false in every released Qwen3; always true in Qwen2).
    pub attention_bias: bool,
    /// o_proj carries a bias (Qwen3's `attention_bias`; never in Qwen2).
    pub o_proj_bias: bool,
    /// Every query and key head goes through an RMSNorm before RoPE (Qwen3; not Qwen2).
    pub qk_norm: bool,
    /// RoPE base and scaling (YaRN etc.), parsed by the long-context chapter.
    pub rope: RopeConfig,
    /// 0 for a dense model.
    pub num_experts: usize,
    pub num_experts_per_tok: usize,
    pub moe_intermediate_size: usize,
    pub norm_topk_prob: bool,
    pub decoder_sparse_step: usize,
    pub mlp_only_layers: Vec<usize>,
    /// Per layer: the sliding-window length, or `None` for full causal attention.
    pub sliding_window: Vec<Option<usize>>,
    /// `dtype` / `torch_dtype` as written (the weights' storage type; we compute in f32).
    pub dtype: Option<String>,
    /// Token ids that end generation (`eos_token_id`, an int or a list).
    pub eos_token_ids: Vec<u32>,
    /// Training only (chapter 12): the std of transformers' `_init_weights` normal draws
    /// (`initializer_range`, class default 0.02).
    pub initializer_range: f32,
    /// Training only: whether `model(labels=…)` adds the load-balancing loss
    /// (`output_router_logits`, default false) and with what weight (`router_aux_loss_coef`,
    /// Qwen3MoeConfig's default 0.001).
    pub output_router_logits: bool,
    pub router_aux_loss_coef: f32,
}

impl Qwen3Config {
    /// Reads and parses `config.json` (and `generation_config.json`'s `eos_token_id`
    /// beside it, when present, as generation does).
    pub fn from_file(path: &Path) -> Result<Qwen3Config> {
        let json = crate::error::read_json(path)?;
        let mut cfg = Self::from_json(&json, &path.display().to_string())?;
        let generation = path.with_file_name("generation_config.json");
        if generation.is_file()
            && let Ok(g) = crate::error::read_json(&generation)
        {
            let name = generation.display().to_string();
            let eos = Fields::new(&name, &g).index_list("eos_token_id")?;
            if !eos.is_empty() {
                cfg.eos_token_ids = eos.into_iter().map(|x| x as u32).collect();
            }
        }
        Ok(cfg)
    }

    /// Parses a config object; `what` names it in errors. A multimodal `gemma3` config is
    /// read through its `text_config`.
    pub fn from_json(cfg: &Value, what: &str) -> Result<Qwen3Config> {
        Self::from_description(&Description::from_json(cfg, what)?)
    }

    /// The engine's view of a description: the shared sizes and defaults, plus RoPE, the
    /// sliding windows, the router's settings and what generation and training read.
    pub fn from_description(d: &Description) -> Result<Qwen3Config> {
        let f = d.fields();
        if !d.defaults.engine_runs {
            let runs: Vec<&str> = FAMILIES
                .iter()
                .filter(|r| r.engine_runs)
                .map(|r| r.model_type)
                .collect();
            return Err(f.error(
                "model_type",
                format!("{:?} is not one of {runs:?}", d.model_type()),
            ));
        }
        let gemma = d.family() == Family::Gemma3;
        if gemma {
            check_gemma3_supported(&f)?;
        }
        check_activation(&f, gemma)?;
        let head_dim = d.head_dim as usize;
        if head_dim < 2 || !head_dim.is_multiple_of(2) {
            return Err(f.error(
                "head_dim",
                format!("must be even and at least 2, got {head_dim}"),
            ));
        }
        let layers = d.num_hidden_layers as usize;
        let experts = d.experts.as_ref();
        let width = |x: u64| x as usize;
        Ok(Qwen3Config {
            model_type: d.model_type().to_string(),
            style: d.style,
            vocab_size: width(d.vocab_size),
            hidden_size: width(d.hidden_size),
            intermediate_size: width(d.intermediate_size),
            num_hidden_layers: layers,
            num_attention_heads: width(d.num_attention_heads),
            num_key_value_heads: width(d.num_key_value_heads),
            head_dim,
            max_position_embeddings: f
                .opt_usize("max_position_embeddings")?
                .unwrap_or(width(d.defaults.max_position_embeddings)),
            rms_norm_eps: f.opt_nonnegative_f64("rms_norm_eps")?.unwrap_or(1e-6) as f32,
            tie_word_embeddings: d.tie_word_embeddings,
            attention_bias: d.qkv_bias,
            o_proj_bias: d.o_bias,
            qk_norm: d.defaults.qk_norm == QkNorm::PerHead,
            rope: rope_of(d)?,
            num_experts: experts.map_or(0, |e| width(e.count)),
            num_experts_per_tok: experts.map_or(0, |e| width(e.k)),
            moe_intermediate_size: experts.map_or(0, |e| width(e.width)),
            norm_topk_prob: f.opt_bool("norm_topk_prob")?.unwrap_or(false),
            decoder_sparse_step: match experts {
                Some(e) => width(e.decoder_sparse_step),
                None => f.opt_usize("decoder_sparse_step")?.unwrap_or(1),
            },
            mlp_only_layers: experts.map_or(Vec::new(), |e| {
                e.mlp_only_layers.iter().map(|&l| l as usize).collect()
            }),
            sliding_window: sliding_windows(&f, d.family(), layers)?,
            dtype: match f.opt_str("dtype")? {
                Some(t) => Some(t.to_string()),
                None => f.opt_str("torch_dtype")?.map(str::to_string),
            },
            eos_token_ids: f
                .index_list("eos_token_id")?
                .into_iter()
                .map(|x| x as u32)
                .collect(),
            initializer_range: f.opt_nonnegative_f64("initializer_range")?.unwrap_or(0.02) as f32,
            output_router_logits: f.opt_bool("output_router_logits")?.unwrap_or(false),
            router_aux_loss_coef: f
                .opt_nonnegative_f64("router_aux_loss_coef")?
                .unwrap_or(0.001) as f32,
        })
    }
}

/// RoPE as transformers reads it from the config: over the class's `head_dim` when the
/// file leaves it out, and for Gemma 3 over its global layers' settings.
fn rope_of(d: &Description) -> Result<RopeConfig> {
    let mut view = d.doc().clone();
    let obj = view
        .as_object_mut()
        .expect("a description is read from an object");
    if obj.get("head_dim").is_none_or(Value::is_null) {
        obj.insert("head_dim".into(), d.head_dim.into());
    }
    if d.family() == Family::Gemma3 {
        gemma3_global_rope_view(obj);
    }
    let rope = RopeConfig::from_model_config(&view, d.what())?;
    if rope.head_dim as u64 != d.head_dim {
        return Err(Error::field(
            d.what(),
            "head_dim",
            format!(
                "RoPE would rotate {} dimensions of a {}-dim head",
                rope.head_dim, d.head_dim
            ),
        ));
    }
    Ok(rope)
}

/// Per layer: the sliding-window length, or `None` for full causal attention. Qwen3-MoE
/// applies one to every layer when enabled; dense Qwen3 and Qwen2 pick layers by
/// `layer_types` (or from `max_window_layers` on); Gemma 3 by its pattern. An absent
/// `sliding_window` is the classes' 4096; `null` is none.
fn sliding_windows(f: &Fields, family: Family, layers: usize) -> Result<Vec<Option<usize>>> {
    let window = if f.opt_bool("use_sliding_window")?.unwrap_or(false) {
        match f.raw("sliding_window") {
            Some(Value::Null) => None,
            _ => Some(f.opt_usize("sliding_window")?.unwrap_or(4096)).filter(|w| *w > 0),
        }
    } else {
        None
    };
    Ok(match family {
        Family::Gemma3 => gemma3_windows(f, layers)?,
        Family::Llama => vec![None; layers],
        Family::Qwen3Moe => vec![window; layers],
        _ if f.get("layer_types").is_some() => layer_types(f, layers, window)?,
        _ => {
            let first = f.opt_usize("max_window_layers")?.unwrap_or(28);
            (0..layers).map(|l| window.filter(|_| l >= first)).collect()
        }
    })
}

/// The gate's activation: SwiGLU's `silu`, or Gemma's `gelu_pytorch_tanh` (Gemma 3 names
/// the field `hidden_activation`; either spelling is read).
fn check_activation(f: &Fields, gemma: bool) -> Result<()> {
    let (field, want) = if gemma {
        ("hidden_activation", "gelu_pytorch_tanh")
    } else {
        ("hidden_act", "silu")
    };
    for name in [field, "hidden_act"] {
        if let Some(act) = f.opt_str(name)?
            && act != want
        {
            return Err(f.error(name, format!("{act:?}: only {want:?} is supported")));
        }
    }
    Ok(())
}

/// Gemma 3 settings the engine does not compute refuse clearly: logit soft-capping, a
/// `query_pre_attn_scalar` other than `head_dim` and a local RoPE base other than
/// transformers' default 10 000 (the engine's variant scales scores by `head_dim^-0.5` and
/// rotates sliding-window layers with base 10 000).
fn check_gemma3_supported(f: &Fields) -> Result<()> {
    for field in ["final_logit_softcapping", "attn_logit_softcapping"] {
        if let Some(v) = f.get(field) {
            return Err(f.error(
                field,
                format!("{v}: soft-capping is not supported (must be null)"),
            ));
        }
    }
    let head_dim = f.opt_usize("head_dim")?.unwrap_or(256);
    if let Some(s) = f.opt_f64("query_pre_attn_scalar")?
        && s != head_dim as f64
    {
        return Err(f.error(
            "query_pre_attn_scalar",
            format!("{s}: only head_dim = {head_dim} is supported"),
        ));
    }
    let local = match f
        .get("rope_parameters")
        .and_then(|p| p.get("sliding_attention"))
    {
        Some(p) => Fields::new(f.what(), p).opt_f64("rope_theta")?,
        None => f.opt_f64("rope_local_base_freq")?,
    };
    if let Some(base) = local.filter(|b| *b != 10_000.0) {
        return Err(f.error(
            "rope_local_base_freq",
            format!("{base}: only the default 10000 is supported"),
        ));
    }
    Ok(())
}

/// Gemma 3's global layers as RoPE reads them: `rope_theta` defaulted to
/// Gemma3TextConfig's 10⁶, and a 5.x per-layer-type `rope_parameters` table replaced by its
/// `full_attention` entry (`head_dim` is already filled in).
fn gemma3_global_rope_view(obj: &mut serde_json::Map<String, Value>) {
    if let Some(full) = obj
        .get("rope_parameters")
        .and_then(|p| p.get("full_attention"))
        .cloned()
    {
        obj.insert("rope_parameters".into(), full);
    }
    let has_theta = obj.get("rope_theta").is_some_and(|v| !v.is_null())
        || obj
            .get("rope_parameters")
            .and_then(|p| p.get("rope_theta"))
            .is_some();
    if !has_theta {
        obj.insert("rope_theta".into(), 1e6.into());
    }
}

/// Gemma 3's windows: every layer whose `layer_types` entry is `sliding_attention` (or, in
/// 4.x configs, every layer but each `sliding_window_pattern`-th, default 6) attends over
/// `sliding_window` (default 4096) positions.
fn gemma3_windows(f: &Fields, layers: usize) -> Result<Vec<Option<usize>>> {
    let window = f.opt_usize("sliding_window")?.unwrap_or(4096);
    if window == 0 {
        return Err(f.error("sliding_window", "must be at least 1"));
    }
    if f.get("layer_types").is_some() {
        return layer_types(f, layers, Some(window));
    }
    let pattern = f.opt_usize("sliding_window_pattern")?.unwrap_or(6);
    if pattern == 0 {
        return Err(f.error("sliding_window_pattern", "must be at least 1"));
    }
    Ok((0..layers)
        .map(|l| (!(l + 1).is_multiple_of(pattern)).then_some(window))
        .collect())
}

/// Per layer from `layer_types`: `window` for `sliding_attention`, none for
/// `full_attention`.
fn layer_types(f: &Fields, layers: usize, window: Option<usize>) -> Result<Vec<Option<usize>>> {
    let Some(Value::Array(types)) = f.get("layer_types") else {
        let got = f
            .get("layer_types")
            .map_or("nothing".into(), Value::to_string);
        return Err(f.error("layer_types", format!("expected a list, got {got}")));
    };
    if types.len() != layers {
        return Err(f.error(
            "layer_types",
            format!("{} entries for {layers} layers", types.len()),
        ));
    }
    types
        .iter()
        .map(|t| match t.as_str() {
            Some("full_attention") => Ok(None),
            Some("sliding_attention") => Ok(window),
            _ => Err(f.error("layer_types", format!("unknown layer type {t}"))),
        })
        .collect()
}

impl Qwen3Config {
    /// Qwen3-MoE's placement rule: layer `l` is MoE unless it is in `mlp_only_layers`,
    /// when there are experts and `(l + 1)` is a multiple of `decoder_sparse_step`.
    pub fn is_moe_layer(&self, layer: usize) -> bool {
        self.num_experts > 0
            && crate::moe::is_moe_layer(layer, self.decoder_sparse_step, &self.mlp_only_layers, 0)
    }

    /// `num_attention_heads · head_dim`, the width of q and of o_proj's input.
    pub fn q_dim(&self) -> usize {
        self.num_attention_heads * self.head_dim
    }

    /// `num_key_value_heads · head_dim`, the width of k and v.
    pub fn kv_dim(&self) -> usize {
        self.num_key_value_heads * self.head_dim
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::long_context::scaling::RopeScaling;
    use serde_json::json;

    fn base() -> Value {
        json!({"model_type": "qwen3_moe", "vocab_size": 64, "hidden_size": 16,
               "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
               "head_dim": 8, "intermediate_size": 24, "moe_intermediate_size": 8,
               "num_experts_per_tok": 2, "max_position_embeddings": 64})
    }

    #[test]
    fn both_styles_parse_alike() {
        let mut v4 = base();
        v4["num_experts"] = json!(4);
        v4["rope_theta"] = json!(1e6);
        v4["rope_scaling"] = json!({"type": "yarn", "factor": 4.0,
                                    "original_max_position_embeddings": 16});
        v4["torch_dtype"] = json!("bfloat16");
        let mut v5 = base();
        v5["num_local_experts"] = json!(4);
        v5["rope_parameters"] = json!({"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
                                       "original_max_position_embeddings": 16});
        v5["dtype"] = json!("bfloat16");
        let a = Qwen3Config::from_json(&v4, "v4").unwrap();
        let b = Qwen3Config::from_json(&v5, "v5").unwrap();
        assert_eq!(a.style, ConfigStyle::Transformers4);
        assert_eq!(b.style, ConfigStyle::Transformers5);
        assert_eq!(a.rope, b.rope);
        assert!(matches!(a.rope.scaling, RopeScaling::Yarn(_)));
        assert_eq!((a.num_experts, a.dtype.as_deref()), (4, Some("bfloat16")));
        assert_eq!(
            Qwen3Config {
                style: ConfigStyle::Transformers5,
                ..a
            },
            b
        );
    }

    #[test]
    fn placement_follows_sparse_step_and_mlp_only_layers() {
        let mut v = base();
        v["num_experts"] = json!(4);
        v["decoder_sparse_step"] = json!(2);
        v["mlp_only_layers"] = json!([3]);
        let c = Qwen3Config::from_json(&v, "c").unwrap();
        let moe: Vec<bool> = (0..4).map(|l| c.is_moe_layer(l)).collect();
        assert_eq!(moe, [false, true, false, false]);
        assert!(!c.norm_topk_prob, "class default");
    }
}
