//! A [`Qwen3Config`] read from, and written as, GGUF metadata (chapter 9: one engine for
//! Hugging Face checkpoints and llama.cpp files).
//!
//! llama.cpp's converter writes the config as `{arch}.*` keys (`qwen3moe.block_count`,
//! `qwen3moe.attention.head_count_kv`, `qwen3moe.rope.freq_base`, ...), with
//! `general.architecture` naming the family (`qwen3moe`, `qwen3`, `qwen2`). [`KEYS`] pairs
//! each config.json field with its key once; [`config_from_gguf`] reads through it (and
//! then through [`Qwen3Config::from_json`], so a GGUF config is checked exactly as a
//! config.json is), [`gguf_metadata`] writes through it.
//!
//! What the metadata leaves out, the file's tensors say, as llama.cpp reads them: the head
//! is tied when `output.weight` is absent, q/k/v (and o) biases exist when
//! `blk.0.attn_q.bias` (`blk.0.attn_output.bias`) does, a Qwen3-MoE layer is dense when it
//! has no router `blk.{l}.ffn_gate_inp.weight`, and the vocabulary is `token_embd.weight`'s
//! row count when `{arch}.vocab_size` is absent. Two differences from config.json defaults
//! follow llama.cpp: an absent `attention.key_length` means `embedding_length /
//! head_count` for every family, and Qwen3-MoE renormalises the top-k router weights
//! unless `{arch}.expert_weights_norm` says false (llama.cpp's graph always does).
//! Sliding windows have no key in these families and are not written; RoPE scaling types
//! other than linear and YaRN are written by name and refused when read.

use crate::error::{Error, Result};
use crate::gguf::{Gguf, GgufTensor, MetaValue};
use crate::long_context::scaling::RopeScaling;
use crate::qwen3::Qwen3Config;
use serde_json::{Map, Value, json};
use std::path::Path;

/// config.json field ↔ the GGUF key after `{arch}.`, for the sizes and numbers that map
/// one to one. The value types are llama.cpp's: counts u32, floats f32, flags bool.
pub const KEYS: &[(&str, &str)] = &[
    ("num_hidden_layers", "block_count"),
    ("max_position_embeddings", "context_length"),
    ("hidden_size", "embedding_length"),
    ("intermediate_size", "feed_forward_length"),
    ("vocab_size", "vocab_size"),
    ("num_attention_heads", "attention.head_count"),
    ("num_key_value_heads", "attention.head_count_kv"),
    ("head_dim", "attention.key_length"),
    ("rms_norm_eps", "attention.layer_norm_rms_epsilon"),
    ("rope_theta", "rope.freq_base"),
    ("num_experts", "expert_count"),
    ("num_experts_per_tok", "expert_used_count"),
    ("moe_intermediate_size", "expert_feed_forward_length"),
    ("norm_topk_prob", "expert_weights_norm"),
];

/// `general.architecture` ↔ `model_type`.
const ARCHITECTURES: &[(&str, &str)] = &[
    ("qwen3moe", "qwen3_moe"),
    ("qwen3", "qwen3"),
    ("qwen2", "qwen2"),
    ("llama", "llama"),
    ("gemma3", "gemma3"),
];

/// Errors `from_json` names by a config.json field that GGUF calls by another key (after
/// `{arch}.`), besides [`KEYS`].
const ERROR_KEYS: &[(&str, &str)] = &[
    ("factor", "rope.scaling.factor"),
    ("rope_scaling", "rope.scaling.type"),
    (
        "original_max_position_embeddings",
        "rope.scaling.original_context_length",
    ),
    ("beta_fast", "rope.scaling.yarn_beta_fast"),
    ("beta_slow", "rope.scaling.yarn_beta_slow"),
    ("attention_factor", "rope.scaling.yarn_attn_factor"),
    ("sliding_window", "attention.sliding_window"),
];

/// Gemma 3's every-sixth-layer-global pattern, which the GGUF file leaves to the code:
/// llama.cpp's `LLM_ARCH_GEMMA3` loader calls `hparams.set_swa_pattern(6)` (layer `l` is
/// global when `(l + 1) % 6 == 0`), as transformers' `Gemma3TextConfig` builds
/// `layer_types` from `sliding_window_pattern = 6`. Its local RoPE base (10 000) and
/// attention scale (`query_pre_attn_scalar^-0.5` = `head_dim^-0.5` for the released sizes
/// below 27B, llama.cpp's `f_attention_scale`) are likewise code, applied by the variant.
const GEMMA3_SLIDING_WINDOW_PATTERN: usize = 6;

/// A metadata value as the file holds it, for messages (`NaN`, `inf`, `-64`, `64.7`).
fn shown(v: &MetaValue) -> String {
    match v {
        MetaValue::F32(x) if long_digits(f64::from(*x)) => format!("{x:e}"),
        MetaValue::F64(x) if long_digits(*x) => format!("{x:e}"),
        MetaValue::F32(x) => format!("{x}"),
        MetaValue::F64(x) => format!("{x}"),
        MetaValue::Str(s) => format!("{s:?}"),
        MetaValue::Bool(b) => b.to_string(),
        MetaValue::Array(_) => "an array".into(),
        other => other
            .as_u64()
            .map(|n| n.to_string())
            .or_else(|| other.as_f64().map(|x| x.to_string()))
            .unwrap_or_else(|| other.type_name().into()),
    }
}

/// Whether plain digits would run long (`1e-38`, not 38 zeros); `64.7` and `NaN` stay.
fn long_digits(x: f64) -> bool {
    x != 0.0 && x.is_finite() && !(1e-4..1e16).contains(&x.abs())
}

/// A count key: a non-negative integer (a float, even a whole one, or a negative is refused).
fn meta_count(v: &MetaValue, what: &str, key: &str) -> Result<u64> {
    v.as_u64().ok_or_else(|| {
        Error::field(
            what,
            key,
            format!(
                "{} ({}) is not a non-negative integer",
                shown(v),
                v.type_name()
            ),
        )
    })
}

/// A float key: finite and within f32 (llama.cpp reads these keys as f32).
fn meta_float(v: &MetaValue, what: &str, key: &str) -> Result<f64> {
    let x = v
        .as_f64()
        .ok_or_else(|| Error::field(what, key, format!("{} is not a number", shown(v))))?;
    if !x.is_finite() {
        return Err(Error::field(
            what,
            key,
            format!("{} is not finite", shown(v)),
        ));
    }
    if x.abs() > f64::from(f32::MAX) {
        return Err(Error::field(
            what,
            key,
            format!("{} overflows f32 (largest {:e})", shown(v), f32::MAX),
        ));
    }
    Ok(x)
}

/// The config of an open GGUF file (see the module docs for what comes from where).
pub fn config_from_gguf(g: &Gguf) -> Result<Qwen3Config> {
    config_from_metadata(g.path(), g.metadata(), g.tensors())
}

/// The config that `metadata` and the tensor list describe; errors name `file` and the
/// GGUF key. The keys become a config.json object, which [`Qwen3Config::from_json`] reads
/// with every check a config.json gets.
pub fn config_from_metadata(
    file: &Path,
    metadata: &[(String, MetaValue)],
    tensors: &[GgufTensor],
) -> Result<Qwen3Config> {
    let what = file.display().to_string();
    let get = |key: &str| metadata.iter().find(|(k, _)| k == key).map(|(_, v)| v);
    let (arch, model_type) = architecture(&get, &what)?;
    let key = |suffix: &str| format!("{arch}.{suffix}");
    let mut cfg = config_keys(model_type, &get, &key, &what)?;
    fields_from_tensors(&mut cfg, model_type, tensors, &get, &key, &what)?;
    if let Some(scaling) = rope_scaling(&get, &key, &what)? {
        cfg.insert("rope_scaling".into(), scaling);
    }
    cfg.insert("eos_token_id".into(), json!(end_of_turn_ids(&get, &what)?));

    let config = Qwen3Config::from_json(&Value::Object(cfg), &what).map_err(|e| match e {
        Error::Field {
            what,
            field,
            problem,
        } => match KEYS.iter().chain(ERROR_KEYS).find(|(f, _)| *f == field) {
            Some((_, suffix)) => Error::field(what, key(suffix), problem),
            None => Error::Field {
                what,
                field,
                problem,
            },
        },
        Error::NonFinite { detail, .. } => rope_table_error(&detail, &get, &key, &what),
        other => other,
    })?;
    if let Err(e) = config.rope.init(Some(config.max_position_embeddings)) {
        return Err(rope_table_error(&e.to_string(), &get, &key, &what));
    }
    Ok(config)
}

/// `general.architecture` and the `model_type` it names.
fn architecture<'a>(
    get: &impl Fn(&str) -> Option<&'a MetaValue>,
    what: &str,
) -> Result<(&'a str, &'static str)> {
    let arch_key = "general.architecture";
    let arch = get(arch_key)
        .ok_or_else(|| Error::field(what, arch_key, "missing"))?
        .as_str()
        .ok_or_else(|| Error::field(what, arch_key, "not a string"))?;
    match ARCHITECTURES.iter().find(|(a, _)| *a == arch) {
        Some(&(_, model_type)) => Ok((arch, model_type)),
        None => Err(Error::field(
            what,
            arch_key,
            format!(
                "{arch:?} is not one of {:?}",
                ARCHITECTURES.iter().map(|(a, _)| *a).collect::<Vec<_>>()
            ),
        )),
    }
}

/// The config.json fields the `{arch}.*` keys of [`KEYS`] hold, each value checked as
/// llama.cpp types it, with the sizes every family needs required and `head_dim` and
/// `num_key_value_heads` defaulted as llama.cpp does.
fn config_keys<'a>(
    model_type: &str,
    get: &impl Fn(&str) -> Option<&'a MetaValue>,
    key: &impl Fn(&str) -> String,
    what: &str,
) -> Result<Map<String, Value>> {
    let mut cfg = Map::new();
    cfg.insert("model_type".into(), json!(model_type));
    for &(field, suffix) in KEYS {
        let k = key(suffix);
        let Some(v) = get(&k) else { continue };
        let value = match field {
            "norm_topk_prob" => json!(v.as_bool().ok_or_else(|| Error::field(
                what,
                &k,
                "not a boolean"
            ))?),
            "rms_norm_eps" | "rope_theta" => json!(meta_float(v, what, &k)?),
            _ => json!(meta_count(v, what, &k)?),
        };
        cfg.insert(field.into(), value);
    }
    for (field, suffix) in [
        ("num_hidden_layers", "block_count"),
        ("hidden_size", "embedding_length"),
        ("num_attention_heads", "attention.head_count"),
    ] {
        if !cfg.contains_key(field) {
            return Err(Error::field(what, key(suffix), "missing"));
        }
    }
    architecture_fields(&mut cfg, model_type, get, key, what)?;
    if cfg.get("head_dim").and_then(Value::as_u64) == Some(0) {
        return Err(Error::field(
            what,
            key("attention.key_length"),
            "0: a head needs at least 1 dimension",
        ));
    }
    let value_length = key("attention.value_length");
    if let (Some(k), Some(v)) = (cfg.get("head_dim"), get(&value_length))
        && v.as_u64() != k.as_u64()
    {
        return Err(Error::field(
            what,
            &value_length,
            format!("{v:?} differs from attention.key_length = {k}"),
        ));
    }
    let whole = |field: &str| cfg.get(field).and_then(Value::as_u64).unwrap_or(0);
    let (hidden, heads) = (whole("hidden_size"), whole("num_attention_heads"));
    if !cfg.contains_key("head_dim") && heads > 0 {
        cfg.insert("head_dim".into(), json!(hidden / heads));
    }
    if !cfg.contains_key("num_key_value_heads") {
        cfg.insert("num_key_value_heads".into(), json!(heads));
    }
    if model_type == "qwen3_moe" && !cfg.contains_key("norm_topk_prob") {
        cfg.insert("norm_topk_prob".into(), json!(true));
    }
    Ok(cfg)
}

/// What llama.cpp reads from the tensors rather than the keys: the vocabulary (when
/// `{arch}.vocab_size` is absent), Qwen3-MoE's dense layers, a tied head, attention biases.
fn fields_from_tensors<'a>(
    cfg: &mut Map<String, Value>,
    model_type: &str,
    tensors: &[GgufTensor],
    get: &impl Fn(&str) -> Option<&'a MetaValue>,
    key: &impl Fn(&str) -> String,
    what: &str,
) -> Result<()> {
    let tensor = |name: &str| tensors.iter().find(|t| t.name == name);
    let layers = cfg
        .get("num_hidden_layers")
        .and_then(Value::as_u64)
        .unwrap_or(0);
    // Before anything loops over the layers (Qwen3Config checks the same limit, later).
    crate::limits::check(
        what,
        &format!("key `{}`", key("block_count")),
        u128::from(layers),
        crate::limits::LAYERS,
    )?;
    if !cfg.contains_key("vocab_size") {
        let rows = tensor("token_embd.weight").and_then(|t| t.dims.get(1).copied());
        let tokens = get("tokenizer.ggml.tokens").and_then(|v| v.as_array().map(<[_]>::len));
        let Some(n) = rows.or(tokens.map(|n| n as u64)) else {
            return Err(Error::field(
                what,
                key("vocab_size"),
                "missing (and no token_embd.weight or tokenizer.ggml.tokens to count)",
            ));
        };
        cfg.insert("vocab_size".into(), json!(n));
    }
    if model_type == "qwen3_moe" && !tensors.is_empty() {
        let routers: std::collections::HashSet<&str> = tensors
            .iter()
            .map(|t| t.name.as_str())
            .filter(|n| n.ends_with(".ffn_gate_inp.weight"))
            .collect();
        let dense: Vec<u64> = (0..layers)
            .filter(|l| !routers.contains(format!("blk.{l}.ffn_gate_inp.weight").as_str()))
            .collect();
        cfg.insert("mlp_only_layers".into(), json!(dense));
    }
    cfg.insert(
        "tie_word_embeddings".into(),
        json!(tensor("output.weight").is_none()),
    );
    cfg.insert(
        "attention_bias".into(),
        json!(tensor("blk.0.attn_q.bias").is_some() || tensor("blk.0.attn_output.bias").is_some()),
    );
    Ok(())
}

/// The token ids that end generation: `tokenizer.ggml.eos_token_id`, then the end-of-turn
/// id when it differs.
fn end_of_turn_ids<'a>(
    get: &impl Fn(&str) -> Option<&'a MetaValue>,
    what: &str,
) -> Result<Vec<u64>> {
    let mut eos = Vec::new();
    for k in ["tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"] {
        if let Some(v) = get(k) {
            let id = v
                .as_u64()
                .filter(|&id| id <= u64::from(u32::MAX))
                .ok_or_else(|| Error::field(what, k, "not a token id"))?;
            if !eos.contains(&id) {
                eos.push(id);
            }
        }
    }
    Ok(eos)
}

/// The GGUF keys (after `{arch}.`) that shape the RoPE table.
const ROPE_KEYS: &[&str] = &[
    "rope.freq_base",
    "rope.scaling.factor",
    "rope.scaling.original_context_length",
    "rope.scaling.yarn_beta_fast",
    "rope.scaling.yarn_beta_slow",
    "rope.scaling.yarn_attn_factor",
    "context_length",
];

/// Values that are each in range can still give a table that is not (a YaRN factor of
/// 1e-38 makes inv_freq 1e34, which overflows at the context length); `Model::new` would
/// refuse it as "RoPE", so the reader builds the table for the whole context first and
/// names the keys that set it, with their values.
fn rope_table_error<'a>(
    problem: &str,
    get: &impl Fn(&str) -> Option<&'a MetaValue>,
    key: &impl Fn(&str) -> String,
    what: &str,
) -> Error {
    let set: Vec<String> = ROPE_KEYS
        .iter()
        .filter_map(|suffix| get(&key(suffix)).map(|v| format!("{} = {}", key(suffix), shown(v))))
        .collect();
    let field = if set.is_empty() {
        key("rope.freq_base")
    } else {
        set.join(", ")
    };
    Error::field(
        what,
        field,
        format!("these give a RoPE table that is not finite: {problem}"),
    )
}

/// What the `llama` and `gemma3` keys add: the rotated dimensions must be the whole head
/// (`rope.dimension_count`), and Gemma 3's sliding window with the layer pattern and
/// defaults its code supplies (see [`GEMMA3_SLIDING_WINDOW_PATTERN`]).
fn architecture_fields<'a>(
    cfg: &mut Map<String, Value>,
    model_type: &str,
    get: &impl Fn(&str) -> Option<&'a MetaValue>,
    key: &impl Fn(&str) -> String,
    what: &str,
) -> Result<()> {
    let rope_dims = key("rope.dimension_count");
    if let Some(v) = get(&rope_dims) {
        let dims = meta_count(v, what, &rope_dims)?;
        let head = match cfg.get("head_dim").and_then(Value::as_u64) {
            Some(d) => Some(d),
            None => {
                let whole = |f: &str| cfg.get(f).and_then(Value::as_u64).filter(|&n| n > 0);
                whole("hidden_size")
                    .zip(whole("num_attention_heads"))
                    .map(|(h, n)| h / n)
            }
        };
        if head.is_some_and(|h| h != dims) {
            return Err(Error::field(
                what,
                &rope_dims,
                format!(
                    "{dims}: only RoPE over the whole head ({}) is supported",
                    head.unwrap_or(0)
                ),
            ));
        }
    }
    if model_type != "gemma3" {
        return Ok(());
    }
    let window_key = key("attention.sliding_window");
    let window = match get(&window_key) {
        Some(v) => meta_count(v, what, &window_key)?,
        None => return Err(Error::field(what, &window_key, "missing")),
    };
    cfg.insert("sliding_window".into(), json!(window));
    cfg.insert(
        "sliding_window_pattern".into(),
        json!(GEMMA3_SLIDING_WINDOW_PATTERN),
    );
    Ok(())
}

/// The `rope_scaling` object of config.json that the `{arch}.rope.scaling.*` keys describe.
fn rope_scaling<'a>(
    get: &impl Fn(&str) -> Option<&'a MetaValue>,
    key: &impl Fn(&str) -> String,
    what: &str,
) -> Result<Option<Value>> {
    let type_key = key("rope.scaling.type");
    let Some(kind) = get(&type_key) else {
        return Ok(None);
    };
    let kind = kind
        .as_str()
        .ok_or_else(|| Error::field(what, &type_key, "not a string"))?;
    let number = |suffix: &str| -> Result<Option<f64>> {
        let k = key(suffix);
        get(&k).map(|v| meta_float(v, what, &k)).transpose()
    };
    let factor = || {
        number("rope.scaling.factor")?
            .ok_or_else(|| Error::field(what, key("rope.scaling.factor"), "missing"))
    };
    Ok(match kind {
        "none" => None,
        "linear" => Some(json!({"rope_type": "linear", "factor": factor()?})),
        "yarn" => {
            let mut o = Map::new();
            o.insert("rope_type".into(), json!("yarn"));
            o.insert("factor".into(), json!(factor()?));
            for (field, suffix) in [
                (
                    "original_max_position_embeddings",
                    "rope.scaling.original_context_length",
                ),
                ("beta_fast", "rope.scaling.yarn_beta_fast"),
                ("beta_slow", "rope.scaling.yarn_beta_slow"),
                ("attention_factor", "rope.scaling.yarn_attn_factor"),
            ] {
                let k = key(suffix);
                let value = match get(&k) {
                    None => continue,
                    Some(v) if field == "original_max_position_embeddings" => {
                        json!(meta_count(v, what, &k)?)
                    }
                    Some(_) => json!(number(suffix)?),
                };
                o.insert(field.into(), value);
            }
            Some(Value::Object(o))
        }
        other => {
            return Err(Error::field(
                what,
                &type_key,
                format!("{other:?}: only \"none\", \"linear\" and \"yarn\" are supported"),
            ));
        }
    })
}

/// The GGUF metadata that describes `cfg`, in llama.cpp's key names and value types (see
/// the module docs for what the tensors carry instead, and what is not written).
pub fn gguf_metadata(cfg: &Qwen3Config) -> Vec<(String, MetaValue)> {
    let arch = ARCHITECTURES
        .iter()
        .find(|(_, t)| *t == cfg.model_type)
        .map_or("qwen3", |(a, _)| a);
    let key = |suffix: &str| format!("{arch}.{suffix}");
    let count = |n: usize| MetaValue::U32(n as u32);
    let mut out = vec![(
        "general.architecture".to_string(),
        MetaValue::Str(arch.into()),
    )];
    for &(field, suffix) in KEYS {
        let value = match field {
            "num_hidden_layers" => count(cfg.num_hidden_layers),
            "max_position_embeddings" => count(cfg.max_position_embeddings),
            "hidden_size" => count(cfg.hidden_size),
            "intermediate_size" if cfg.intermediate_size > 0 => count(cfg.intermediate_size),
            "vocab_size" => count(cfg.vocab_size),
            "num_attention_heads" => count(cfg.num_attention_heads),
            "num_key_value_heads" => count(cfg.num_key_value_heads),
            "head_dim" => count(cfg.head_dim),
            "rms_norm_eps" => MetaValue::F32(cfg.rms_norm_eps),
            "rope_theta" => MetaValue::F32(cfg.rope.theta as f32),
            "num_experts" if cfg.num_experts > 0 => count(cfg.num_experts),
            "num_experts_per_tok" if cfg.num_experts > 0 => count(cfg.num_experts_per_tok),
            "moe_intermediate_size" if cfg.num_experts > 0 => count(cfg.moe_intermediate_size),
            "norm_topk_prob" if cfg.num_experts > 0 => MetaValue::Bool(cfg.norm_topk_prob),
            _ => continue,
        };
        out.push((key(suffix), value));
    }
    out.push((key("attention.value_length"), count(cfg.head_dim)));
    let float = |x: f64| MetaValue::F32(x as f32);
    let scaling = |name: &str| (key("rope.scaling.type"), MetaValue::Str(name.into()));
    match &cfg.rope.scaling {
        RopeScaling::Default => {}
        RopeScaling::Linear { factor } => {
            out.push(scaling("linear"));
            out.push((key("rope.scaling.factor"), float(*factor)));
        }
        RopeScaling::Yarn(y) => {
            out.push(scaling("yarn"));
            out.push((key("rope.scaling.factor"), float(y.factor)));
            out.push((
                key("rope.scaling.original_context_length"),
                count(y.original_max_position_embeddings),
            ));
            out.push((key("rope.scaling.yarn_beta_fast"), float(y.beta_fast)));
            out.push((key("rope.scaling.yarn_beta_slow"), float(y.beta_slow)));
            if let Some(a) = y.attention_factor {
                out.push((key("rope.scaling.yarn_attn_factor"), float(a)));
            }
        }
        other => out.push(scaling(other.name())),
    }
    if let Some(&eos) = cfg.eos_token_ids.first() {
        out.push(("tokenizer.ggml.eos_token_id".into(), MetaValue::U32(eos)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::quant::GgmlType;
    use crate::qwen3::gguf_names;

    /// The GGUF tensors (names, and the embedding's dims) a model of `cfg` has.
    fn tensors_of(cfg: &Qwen3Config) -> Vec<GgufTensor> {
        let mut hf = vec!["model.embed_tokens.weight".to_string()];
        if !cfg.tie_word_embeddings {
            hf.push("lm_head.weight".into());
        }
        for l in 0..cfg.num_hidden_layers {
            hf.push(format!("model.layers.{l}.self_attn.q_proj.weight"));
            if cfg.attention_bias {
                hf.push(format!("model.layers.{l}.self_attn.q_proj.bias"));
            }
            if cfg.is_moe_layer(l) {
                hf.push(format!("model.layers.{l}.mlp.gate.weight"));
            }
        }
        hf.iter()
            .map(|name| {
                let g = gguf_names::to_gguf(name).unwrap();
                let dims = if g.name == "token_embd.weight" {
                    vec![cfg.hidden_size as u64, cfg.vocab_size as u64]
                } else {
                    vec![1]
                };
                GgufTensor {
                    name: g.name,
                    dims,
                    ty: GgmlType::F32,
                    offset: 0,
                    size: 4,
                }
            })
            .collect()
    }

    fn round_trip(config: Value) {
        let cfg = Qwen3Config::from_json(&config, "config.json").unwrap();
        let meta = gguf_metadata(&cfg);
        let back = config_from_metadata(Path::new("m.gguf"), &meta, &tensors_of(&cfg)).unwrap();
        // Placement comes back as the list of dense layers; the per-layer answer is the same.
        let placement: Vec<bool> = (0..cfg.num_hidden_layers)
            .map(|l| cfg.is_moe_layer(l))
            .collect();
        let back_placement: Vec<bool> = (0..cfg.num_hidden_layers)
            .map(|l| back.is_moe_layer(l))
            .collect();
        assert_eq!(placement, back_placement);
        let normalised = Qwen3Config {
            style: back.style,
            dtype: None,
            decoder_sparse_step: back.decoder_sparse_step,
            mlp_only_layers: back.mlp_only_layers.clone(),
            ..cfg
        };
        assert_eq!(back, normalised);
    }

    #[test]
    fn qwen3moe_with_dense_layers_and_yarn_round_trips() {
        round_trip(
            json!({"model_type": "qwen3_moe", "vocab_size": 300, "hidden_size": 64,
            "num_hidden_layers": 5, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "intermediate_size": 96, "moe_intermediate_size": 32,
            "num_experts": 8, "num_experts_per_tok": 2, "norm_topk_prob": false,
            "decoder_sparse_step": 2, "mlp_only_layers": [3], "rms_norm_eps": 1e-6,
            "max_position_embeddings": 4096, "rope_theta": 1000000.0,
            "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                             "original_max_position_embeddings": 1024},
            "tie_word_embeddings": true, "eos_token_id": 151645, "torch_dtype": "bfloat16"}),
        );
    }

    #[test]
    fn qwen3_and_qwen2_dense_round_trip() {
        round_trip(
            json!({"model_type": "qwen3", "vocab_size": 300, "hidden_size": 64,
            "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 1,
            "head_dim": 32, "intermediate_size": 96, "max_position_embeddings": 512,
            "rope_theta": 1000000.0, "rms_norm_eps": 1e-6, "attention_bias": true}),
        );
        round_trip(
            json!({"model_type": "qwen2", "vocab_size": 300, "hidden_size": 64,
            "num_hidden_layers": 3, "num_attention_heads": 4, "num_key_value_heads": 2,
            "intermediate_size": 96, "max_position_embeddings": 512,
            "rope_theta": 10000.0, "rms_norm_eps": 1e-5, "tie_word_embeddings": true,
            "rope_scaling": {"type": "linear", "factor": 2.0}}),
        );
    }

    #[test]
    fn missing_or_wrong_keys_are_named() {
        let cfg = Qwen3Config::from_json(
            &json!({"model_type": "qwen3", "vocab_size": 30, "hidden_size": 16,
                    "num_hidden_layers": 1, "num_attention_heads": 2,
                    "num_key_value_heads": 2, "head_dim": 8, "intermediate_size": 8}),
            "c",
        )
        .unwrap();
        let file = Path::new("m.gguf");
        // Fresh metadata each time: MetaValue need not be Clone.
        let without = |key: &str| -> Vec<(String, MetaValue)> {
            gguf_metadata(&cfg)
                .into_iter()
                .filter(|(k, _)| k != key)
                .collect()
        };
        let err = |m: &[(String, MetaValue)]| {
            config_from_metadata(file, m, &tensors_of(&cfg))
                .unwrap_err()
                .to_string()
        };
        let e = err(&without("qwen3.embedding_length"));
        assert!(
            e.contains("m.gguf") && e.contains("qwen3.embedding_length"),
            "{e}"
        );
        let e = err(&without("general.architecture"));
        assert!(e.contains("general.architecture"), "{e}");
        let mut bad = without("qwen3.attention.head_count_kv");
        bad.push(("qwen3.attention.head_count_kv".into(), MetaValue::U32(3)));
        let e = err(&bad);
        assert!(e.contains("qwen3.attention.head_count_kv"), "{e}");
        let mut bad = without("");
        bad.push((
            "qwen3.rope.scaling.type".into(),
            MetaValue::Str("llama3".into()),
        ));
        let e = err(&bad);
        assert!(
            e.contains("rope.scaling.type") && e.contains("llama3"),
            "{e}"
        );
        let mut bad = without("general.architecture");
        bad.push(("general.architecture".into(), MetaValue::Str("gptj".into())));
        assert!(err(&bad).contains("\"gptj\""));
    }
}
