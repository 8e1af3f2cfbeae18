//! Chapter 12 — the trainable parameters (source S0 5.4, 5.6): every tensor of a Qwen3(-MoE)
//! checkpoint as owned f32, under its Hugging Face name.
//!
//! The engine ([`crate::qwen3`]) views weights in their stored dtype and never copies them;
//! training must own and update them, so [`Params`] holds one f32 [`Param`] per tensor, in
//! a fixed order (the embedding, then each layer's attention, norms and feed-forward, then
//! the final norm and the untied LM head), and [`Grads`] one gradient per parameter in the
//! same order. The experts keep the layout their checkpoint had — per expert
//! (`mlp.experts.{e}.gate_proj.weight`) or transformers 5's fused `mlp.experts.gate_up_proj`
//! `[E, 2I, H]` / `mlp.experts.down_proj` `[E, H, I]` — so gradients go out under the
//! checkpoint's own names. [`Params::init`] draws a fresh model as transformers'
//! `_init_weights` does (normal(0, `initializer_range`) for every Linear, Embedding, router
//! and expert tensor; RMSNorm weights 1; biases 0), and [`Params::save_pretrained`] writes
//! a `config.json` + `model.safetensors` that `AutoModelForCausalLM.from_pretrained` loads.

use crate::checkpoint::Checkpoint;
use crate::error::{CheckpointProblem, Error, Result};
use crate::long_context::scaling::{RopeConfig, RopeScaling};
use crate::qwen3::config::Qwen3Config;
use ndarray_rand::rand::{SeedableRng, rngs::StdRng};
use serde_json::{Map, Value, json};
use std::collections::HashMap;
use std::path::Path;

/// One trainable tensor: its Hugging Face name, row-major shape and values.
#[derive(Clone, Debug, PartialEq)]
pub struct Param {
    pub name: String,
    pub shape: Vec<usize>,
    pub data: Vec<f32>,
}

/// Every parameter of a model, with the config that fixes their shapes.
#[derive(Clone, Debug, PartialEq)]
pub struct Params {
    pub config: Qwen3Config,
    pub params: Vec<Param>,
}

/// One gradient per parameter, aligned with [`Params::params`] (same order and lengths).
#[derive(Clone, Debug, PartialEq)]
pub struct Grads {
    pub grads: Vec<Vec<f32>>,
}

/// What a tensor is, for initialisation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// Linear, Embedding, router, experts: normal(0, initializer_range).
    Normal,
    /// RMSNorm weights: 1.
    One,
    /// Biases: 0.
    Zero,
}

/// The tensors a config calls for, in [`Params`] order: name, shape, kind. `fused` picks
/// transformers 5's fused expert tensors over per-expert ones.
fn tensor_specs(c: &Qwen3Config, fused: bool) -> Vec<(String, Vec<usize>, Kind)> {
    let (h, v, d) = (c.hidden_size, c.vocab_size, c.head_dim);
    let (q, kv) = (c.q_dim(), c.kv_dim());
    let mut out = vec![(
        "model.embed_tokens.weight".to_string(),
        vec![v, h],
        Kind::Normal,
    )];
    for l in 0..c.num_hidden_layers {
        let p = format!("model.layers.{l}");
        let mut push = |name: String, shape: Vec<usize>, kind| out.push((name, shape, kind));
        push(format!("{p}.input_layernorm.weight"), vec![h], Kind::One);
        for (proj, rows, bias) in [
            ("q_proj", q, c.attention_bias),
            ("k_proj", kv, c.attention_bias),
            ("v_proj", kv, c.attention_bias),
        ] {
            push(
                format!("{p}.self_attn.{proj}.weight"),
                vec![rows, h],
                Kind::Normal,
            );
            if bias {
                push(format!("{p}.self_attn.{proj}.bias"), vec![rows], Kind::Zero);
            }
        }
        push(
            format!("{p}.self_attn.o_proj.weight"),
            vec![h, q],
            Kind::Normal,
        );
        if c.o_proj_bias {
            push(format!("{p}.self_attn.o_proj.bias"), vec![h], Kind::Zero);
        }
        if c.qk_norm {
            push(format!("{p}.self_attn.q_norm.weight"), vec![d], Kind::One);
            push(format!("{p}.self_attn.k_norm.weight"), vec![d], Kind::One);
        }
        push(
            format!("{p}.post_attention_layernorm.weight"),
            vec![h],
            Kind::One,
        );
        if c.is_moe_layer(l) {
            let (e, i) = (c.num_experts, c.moe_intermediate_size);
            push(format!("{p}.mlp.gate.weight"), vec![e, h], Kind::Normal);
            if fused {
                push(
                    format!("{p}.mlp.experts.gate_up_proj"),
                    vec![e, 2 * i, h],
                    Kind::Normal,
                );
                push(
                    format!("{p}.mlp.experts.down_proj"),
                    vec![e, h, i],
                    Kind::Normal,
                );
            } else {
                for x in 0..e {
                    let pe = format!("{p}.mlp.experts.{x}");
                    push(format!("{pe}.gate_proj.weight"), vec![i, h], Kind::Normal);
                    push(format!("{pe}.up_proj.weight"), vec![i, h], Kind::Normal);
                    push(format!("{pe}.down_proj.weight"), vec![h, i], Kind::Normal);
                }
            }
        } else {
            let i = c.intermediate_size;
            push(
                format!("{p}.mlp.gate_proj.weight"),
                vec![i, h],
                Kind::Normal,
            );
            push(format!("{p}.mlp.up_proj.weight"), vec![i, h], Kind::Normal);
            push(
                format!("{p}.mlp.down_proj.weight"),
                vec![h, i],
                Kind::Normal,
            );
        }
    }
    out.push(("model.norm.weight".to_string(), vec![h], Kind::One));
    if !c.tie_word_embeddings {
        out.push(("lm_head.weight".to_string(), vec![v, h], Kind::Normal));
    }
    out
}

/// Bytes of `count` f32 values, checked against the machine's memory (four copies: the
/// parameters, their gradients and an optimiser's two moments).
fn check_param_memory(what: &str, specs: &[(String, Vec<usize>, Kind)]) -> Result<usize> {
    let mut count: u128 = 0;
    for (_, shape, _) in specs {
        count += shape.iter().map(|&s| s as u128).product::<u128>();
    }
    crate::limits::check_memory(what, 16 * count)?;
    Ok(count as usize)
}

impl Params {
    /// Loads `config.json` and the safetensors of `dir` (any float dtype, widened to f32).
    /// Every tensor the config calls for must be there with its shape; a tensor it does not
    /// call for is an error naming it (a tied checkpoint's redundant `lm_head.weight` aside).
    pub fn load(dir: &Path) -> Result<Params> {
        let config = Qwen3Config::from_file(&dir.join("config.json"))?;
        let ckpt = Checkpoint::open(dir)?;
        let fused = (0..config.num_hidden_layers).any(|l| {
            config.is_moe_layer(l)
                && ckpt.contains(&format!("model.layers.{l}.mlp.experts.gate_up_proj"))
        });
        let specs = tensor_specs(&config, fused);
        check_param_memory(&format!("the parameters of {}", dir.display()), &specs)?;
        let mut params = Vec::with_capacity(specs.len());
        for (name, shape, _) in &specs {
            let info = ckpt.info(name)?;
            if &info.shape != shape {
                return Err(Error::tensor(
                    ckpt.file_of(name)?,
                    name,
                    CheckpointProblem::Shape {
                        found: info.shape,
                        expected: shape.clone(),
                    },
                ));
            }
            let (data, _) = ckpt.to_f32(name)?;
            if let Some(i) = crate::kernels::first_non_finite(&data) {
                return Err(Error::Invalid(format!(
                    "{}: tensor {name}: element {i} is {} (parameters must be finite)",
                    ckpt.file_of(name)?.display(),
                    data[i]
                )));
            }
            params.push(Param {
                name: name.clone(),
                shape: shape.clone(),
                data,
            });
        }
        let known: std::collections::HashSet<&str> =
            specs.iter().map(|(n, _, _)| n.as_str()).collect();
        for name in ckpt.names() {
            let redundant_head = name == "lm_head.weight" && config.tie_word_embeddings;
            if !known.contains(name) && !redundant_head {
                return Err(Error::Invalid(format!(
                    "{}: tensor {name} is not a parameter of this {} config",
                    ckpt.file_of(name)?.display(),
                    config.model_type
                )));
            }
        }
        Ok(Params { config, params })
    }

    /// A freshly initialised model, as transformers' `_init_weights` draws one: normal(0,
    /// `initializer_range`) for Linear / Embedding / router / expert weights, RMSNorm weights
    /// 1, biases 0, tensor by tensor in [`Params`] order from one generator seeded by `seed`.
    /// Experts are per-expert tensors (what `save_pretrained` writes).
    pub fn init(config: &Qwen3Config, seed: u64) -> Result<Params> {
        let specs = tensor_specs(config, false);
        check_param_memory("the parameters of a new model", &specs)?;
        let std = config.initializer_range;
        let mut rng = StdRng::seed_from_u64(seed);
        let params = specs
            .into_iter()
            .map(|(name, shape, kind)| {
                let len: usize = shape.iter().product();
                let data = match kind {
                    Kind::One => vec![1.0; len],
                    Kind::Zero => vec![0.0; len],
                    Kind::Normal => {
                        let (rows, cols) = (
                            len / shape.last().copied().unwrap_or(1),
                            shape[shape.len() - 1],
                        );
                        let m = crate::rand::normal_matrix(rows, cols, &mut rng);
                        m.into_iter().map(|x| x * std).collect()
                    }
                };
                Param { name, shape, data }
            })
            .collect();
        Ok(Params {
            config: config.clone(),
            params,
        })
    }

    pub fn get(&self, name: &str) -> Option<&Param> {
        self.params.iter().find(|p| p.name == name)
    }

    pub fn index(&self, name: &str) -> Option<usize> {
        self.params.iter().position(|p| p.name == name)
    }

    /// Name → position, for code that looks many names up.
    pub fn index_map(&self) -> HashMap<&str, usize> {
        self.params
            .iter()
            .enumerate()
            .map(|(i, p)| (p.name.as_str(), i))
            .collect()
    }

    /// Zero gradients, one per parameter.
    pub fn zeros_like(&self) -> Grads {
        Grads {
            grads: self
                .params
                .iter()
                .map(|p| vec![0.0; p.data.len()])
                .collect(),
        }
    }

    /// The number of scalar parameters (a tied LM head counted once, as transformers'
    /// `num_parameters()` does).
    pub fn num_parameters(&self) -> usize {
        self.params.iter().map(|p| p.data.len()).sum()
    }

    /// Writes `dir/config.json` and `dir/model.safetensors` (every parameter in f32 under
    /// its name), each atomically, creating `dir` if needed.
    pub fn save_pretrained(&self, dir: &Path) -> Result<()> {
        // A file or device where the directory should be is the caller's input (exit 2).
        crate::output::create_dir(dir)?;
        let config = config_json(&self.config)?;
        let text = serde_json::to_string_pretty(&config)
            .map_err(|e| Error::Invalid(format!("config.json of {}: {e}", dir.display())))?;
        crate::output::write_output(&dir.join("config.json"), |w| {
            w.write_all(text.as_bytes())?;
            w.write_all(b"\n")
        })?;
        let named: Vec<(&str, &[usize], &[f32])> = self
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.shape.as_slice(), p.data.as_slice()))
            .collect();
        write_safetensors_f32(&dir.join("model.safetensors"), &named)
    }
}

/// Writes F32 tensors as one safetensors file (header padded to 8 bytes, data in the order
/// given), atomically through [`crate::output::write_output`].
pub fn write_safetensors_f32(path: &Path, tensors: &[(&str, &[usize], &[f32])]) -> Result<()> {
    let mut header = Map::new();
    header.insert("__metadata__".into(), json!({"format": "pt"}));
    let mut offset: u128 = 0;
    for (name, shape, data) in tensors {
        let len: u128 = shape.iter().map(|&s| s as u128).product();
        if len != data.len() as u128 {
            return Err(Error::Invalid(format!(
                "{}: tensor {name}: {} values for shape {shape:?}",
                path.display(),
                data.len()
            )));
        }
        let end = offset + 4 * len;
        header.insert(
            (*name).to_string(),
            json!({"dtype": "F32", "shape": shape, "data_offsets": [offset as u64, end as u64]}),
        );
        offset = end;
    }
    let mut bytes = Value::Object(header).to_string().into_bytes();
    bytes.resize(bytes.len().div_ceil(8) * 8, b' ');
    crate::output::write_output(path, |w| {
        w.write_all(&(bytes.len() as u64).to_le_bytes())?;
        w.write_all(&bytes)?;
        let mut buf = Vec::with_capacity(4 * 4096);
        for (_, _, data) in tensors {
            for chunk in data.chunks(4096) {
                buf.clear();
                buf.extend(chunk.iter().flat_map(|x| x.to_le_bytes()));
                w.write_all(&buf)?;
            }
        }
        Ok(())
    })
}

/// A transformers-5 `config.json` for `c` (the fields [`Qwen3Config`] reads, with their
/// transformers names), so that `from_pretrained` and [`Qwen3Config::from_json`] both
/// rebuild the same model.
pub fn config_json(c: &Qwen3Config) -> Result<Value> {
    let arch = match c.model_type.as_str() {
        "qwen3_moe" => "Qwen3MoeForCausalLM",
        "qwen2" => "Qwen2ForCausalLM",
        _ => "Qwen3ForCausalLM",
    };
    let mut m = Map::new();
    let mut set = |k: &str, v: Value| {
        m.insert(k.to_string(), v);
    };
    set("architectures", json!([arch]));
    set("model_type", json!(c.model_type));
    set("vocab_size", json!(c.vocab_size));
    set("hidden_size", json!(c.hidden_size));
    set("intermediate_size", json!(c.intermediate_size));
    set("num_hidden_layers", json!(c.num_hidden_layers));
    set("num_attention_heads", json!(c.num_attention_heads));
    set("num_key_value_heads", json!(c.num_key_value_heads));
    set("head_dim", json!(c.head_dim));
    set("hidden_act", json!("silu"));
    set("max_position_embeddings", json!(c.max_position_embeddings));
    set("rms_norm_eps", json!(c.rms_norm_eps as f64));
    set("tie_word_embeddings", json!(c.tie_word_embeddings));
    set("initializer_range", json!(c.initializer_range as f64));
    set("dtype", json!("float32"));
    set("rope_parameters", rope_json(&c.rope)?);
    if c.model_type != "qwen2" {
        set("attention_bias", json!(c.attention_bias));
    }
    if !c.eos_token_ids.is_empty() {
        let eos = match c.eos_token_ids.as_slice() {
            [one] => json!(one),
            many => json!(many),
        };
        set("eos_token_id", eos);
    }
    if c.model_type == "qwen3_moe" {
        set("num_experts", json!(c.num_experts));
        set("num_experts_per_tok", json!(c.num_experts_per_tok));
        set("moe_intermediate_size", json!(c.moe_intermediate_size));
        set("norm_topk_prob", json!(c.norm_topk_prob));
        set("decoder_sparse_step", json!(c.decoder_sparse_step));
        set("mlp_only_layers", json!(c.mlp_only_layers));
        set("output_router_logits", json!(c.output_router_logits));
        set("router_aux_loss_coef", json!(c.router_aux_loss_coef as f64));
    }
    // Sliding windows: one length for every windowed layer.
    let windows: Vec<usize> = c.sliding_window.iter().flatten().copied().collect();
    match windows.first() {
        None => {
            set("use_sliding_window", json!(false));
            set("sliding_window", Value::Null);
        }
        Some(&w) => {
            if windows.iter().any(|&x| x != w) {
                return Err(Error::Invalid(format!(
                    "config: sliding windows of different lengths {windows:?} cannot be written"
                )));
            }
            set("use_sliding_window", json!(true));
            set("sliding_window", json!(w));
            if c.model_type != "qwen3_moe" {
                let types: Vec<&str> = c
                    .sliding_window
                    .iter()
                    .map(|s| match s {
                        Some(_) => "sliding_attention",
                        None => "full_attention",
                    })
                    .collect();
                set("layer_types", json!(types));
            }
        }
    }
    Ok(Value::Object(m))
}

/// transformers 5's `rope_parameters` object for a [`RopeConfig`].
fn rope_json(r: &RopeConfig) -> Result<Value> {
    let mut v = match &r.scaling {
        RopeScaling::Default => json!({"rope_type": "default"}),
        RopeScaling::Linear { factor } => json!({"rope_type": "linear", "factor": factor}),
        RopeScaling::Dynamic { factor } => json!({"rope_type": "dynamic", "factor": factor}),
        RopeScaling::Yarn(y) => {
            let mut o = json!({"rope_type": "yarn", "factor": y.factor,
                "original_max_position_embeddings": y.original_max_position_embeddings,
                "beta_fast": y.beta_fast, "beta_slow": y.beta_slow, "truncate": y.truncate});
            for (k, x) in [
                ("mscale", y.mscale),
                ("mscale_all_dim", y.mscale_all_dim),
                ("attention_factor", y.attention_factor),
            ] {
                if let Some(x) = x {
                    o[k] = json!(x);
                }
            }
            o
        }
        RopeScaling::Llama3(l) => json!({"rope_type": "llama3", "factor": l.factor,
            "low_freq_factor": l.low_freq_factor, "high_freq_factor": l.high_freq_factor,
            "original_max_position_embeddings": l.original_max_position_embeddings}),
        RopeScaling::LongRope(l) => {
            let mut o = json!({"rope_type": "longrope", "factor": l.factor,
                "short_factor": l.short_factor, "long_factor": l.long_factor,
                "original_max_position_embeddings": l.original_max_position_embeddings});
            if let Some(a) = l.attention_factor {
                o["attention_factor"] = json!(a);
            }
            o
        }
        RopeScaling::Proportional { .. } => {
            return Err(Error::Invalid(
                "config: the \"proportional\" RoPE scaling cannot be written for a Qwen3 model"
                    .into(),
            ));
        }
    };
    v["rope_theta"] = json!(r.theta);
    if r.partial_rotary_factor != 1.0 {
        v["partial_rotary_factor"] = json!(r.partial_rotary_factor);
    }
    Ok(v)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tiny_dir() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("data/tiny-qwen3-moe")
    }

    #[test]
    fn load_save_reload_is_identical() {
        let p = Params::load(&tiny_dir()).unwrap();
        assert!(p.get("lm_head.weight").is_none(), "tied");
        assert_eq!(p.index("model.embed_tokens.weight"), Some(0));
        let dir = tempfile::Builder::new()
            .prefix("anatomy-params-")
            .tempdir()
            .unwrap();
        p.save_pretrained(dir.path()).unwrap();
        let q = Params::load(dir.path()).unwrap();
        assert_eq!(p.params, q.params);
        // The config survives too, but for the dtype written (f32) and its style.
        assert_eq!(q.config.dtype.as_deref(), Some("float32"));
        assert_eq!(
            Qwen3Config {
                dtype: p.config.dtype.clone(),
                style: p.config.style,
                ..q.config
            },
            p.config
        );
        let g = p.zeros_like();
        assert_eq!(g.grads.len(), p.params.len());
        assert!(
            g.grads
                .iter()
                .zip(&p.params)
                .all(|(g, p)| g.len() == p.data.len())
        );
    }

    #[test]
    fn init_follows_transformers_init_weights() {
        let c = Params::load(&tiny_dir()).unwrap().config;
        let a = Params::init(&c, 7).unwrap();
        assert_eq!(a, Params::init(&c, 7).unwrap(), "seeded");
        let norm = a.get("model.layers.0.input_layernorm.weight").unwrap();
        assert!(norm.data.iter().all(|&x| x == 1.0));
        let router = a.get("model.layers.1.mlp.gate.weight").unwrap();
        let n = router.data.len() as f32;
        let var = router.data.iter().map(|x| x * x).sum::<f32>() / n;
        assert!((var.sqrt() - c.initializer_range).abs() < 0.2 * c.initializer_range);
        let loaded = Params::load(&tiny_dir()).unwrap();
        assert_eq!(a.num_parameters(), loaded.num_parameters());
    }
}
