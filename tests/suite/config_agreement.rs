//! One model, two readers: `params::ModelConfig` (the counting chapter) and
//! `qwen3::Qwen3Config` (the engine) must describe every config both read alike — on the
//! published configs in data/configs and on copies with each defaultable field removed
//! (so each reader's class defaults are compared, not only the values written). GGUF
//! metadata that is non-finite, overflows f32 or is not an integer where a count belongs is
//! refused with the GGUF key and the value.

use llm_anatomy::gguf::MetaValue;
use llm_anatomy::params::{Description, FAMILIES, ModelConfig, QkNorm};
use llm_anatomy::qwen3::Qwen3Config;
use llm_anatomy::qwen3::gguf_config::{config_from_metadata, gguf_metadata};
use serde_json::{Value, json};
use std::path::Path;

/// Fields whose absence a reader fills from its family's defaults.
const DEFAULTABLE: &[&str] = &[
    "num_key_value_heads",
    "head_dim",
    "tie_word_embeddings",
    "attention_bias",
    "decoder_sparse_step",
    "mlp_only_layers",
    "norm_topk_prob",
    "rope_scaling",
    "rope_theta",
    "max_position_embeddings",
    "intermediate_size",
    "model_type",
];

/// Every model config in the repository: the published ones in data/configs, the trained
/// and bundled models, and the configs the reference fixtures were generated from.
fn every_config() -> Vec<(String, Value)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    let mut stack = vec![root.join("data"), root.join("tests/fixtures")];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if path.is_dir() {
                stack.push(path);
            } else if name.ends_with("config.json") && !name.contains("generation") {
                files.push(path);
            }
        }
    }
    files.sort();
    files
        .into_iter()
        .filter_map(|path| {
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).ok()?).ok()?;
            // Only model configs: RoPE-only fixtures have no sizes at all.
            v.get("hidden_size")?;
            let rel = path.strip_prefix(root).unwrap().display().to_string();
            Some((rel, v))
        })
        .collect()
}

fn load(name: &str) -> Value {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("data/configs")
        .join(name);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Both views of `v`, compared on what both carry; `None` when both refuse it.
fn agree(v: &Value, what: &str) {
    let (p, q) = (
        ModelConfig::from_json(v, what),
        Qwen3Config::from_json(v, what),
    );
    let (p, q) = match (p, q) {
        (Ok(p), Ok(q)) => (p, q),
        (Err(_), Err(_)) => return,
        // A family the engine does not run: only the counting view reads it.
        (Ok(_), Err(_))
            if !Description::from_json(v, what)
                .unwrap()
                .defaults
                .engine_runs =>
        {
            return;
        }
        (p, q) => panic!(
            "{what}: one reader refuses: params {:?}, engine {:?}",
            p.err(),
            q.err()
        ),
    };
    let moe = p.moe.as_ref();
    let pairs: [(&str, u64, u64); 9] = [
        ("vocab_size", p.vocab_size, q.vocab_size as u64),
        ("hidden_size", p.hidden_size, q.hidden_size as u64),
        ("layers", p.num_hidden_layers, q.num_hidden_layers as u64),
        ("heads", p.num_attention_heads, q.num_attention_heads as u64),
        (
            "kv_heads",
            p.num_key_value_heads,
            q.num_key_value_heads as u64,
        ),
        ("head_dim", p.head_dim, q.head_dim as u64),
        (
            "experts",
            moe.map_or(0, |m| m.num_experts),
            q.num_experts as u64,
        ),
        (
            "top_k",
            moe.map_or(0, |m| m.k),
            q.num_experts_per_tok as u64,
        ),
        (
            "expert_intermediate",
            moe.map_or(0, |m| m.expert_intermediate),
            q.moe_intermediate_size as u64,
        ),
    ];
    for (name, a, b) in pairs {
        assert_eq!(a, b, "{what}: {name}");
    }
    assert_eq!(p.tie_word_embeddings, q.tie_word_embeddings, "{what}: tied");
    assert_eq!(p.qkv_bias, q.attention_bias, "{what}: qkv bias");
    assert_eq!(p.o_bias, q.o_proj_bias, "{what}: o bias");
    assert_eq!(p.qk_norm == QkNorm::PerHead, q.qk_norm, "{what}: q/k norm");
    if let Some(m) = moe {
        let layers = q.num_hidden_layers as u64;
        let p_moe = (0..layers)
            .filter(|&l| {
                m.mlp_only_layers.contains(&l)
                    || !(l + 1).is_multiple_of(m.decoder_sparse_step.max(1))
            })
            .count();
        let q_moe = (0..q.num_hidden_layers)
            .filter(|&l| !q.is_moe_layer(l))
            .count();
        assert_eq!(p_moe, q_moe, "{what}: dense layers");
    }
}

#[test]
fn both_views_agree_on_every_config_and_each_default() {
    let configs = every_config();
    assert!(configs.len() >= 40, "{} configs", configs.len());
    let mut compared = 0;
    for (name, v) in &configs {
        agree(v, name);
        // Without `model_type` a config is read as Qwen3 or Qwen3-MoE: only those families'
        // configs stay the same model when it is removed.
        let qwen3 = matches!(v["model_type"].as_str(), Some("qwen3" | "qwen3_moe"));
        for field in DEFAULTABLE {
            if v.get(field).is_some() && (qwen3 || *field != "model_type") {
                let mut w = v.clone();
                w.as_object_mut().unwrap().remove(*field);
                agree(&w, &format!("{name} without {field}"));
                compared += 1;
            }
        }
    }
    assert!(compared >= 200, "{compared} configs with a field removed");
}

/// The defaults table is transformers' own: each family's class, built with only
/// hidden_size 2560 and 256 heads (scripts/gen_config_defaults.py), fills num_key_value_heads
/// (absent, and null where the class accepts it), head_dim, the context length and the
/// tie as `FAMILIES` says.
#[test]
fn family_defaults_are_the_config_classes() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/params/class_defaults.json");
    let doc: Value = serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
    let given = &doc["given"];
    let (hidden, heads) = (
        given["hidden_size"].as_u64().unwrap(),
        given["num_attention_heads"].as_u64().unwrap(),
    );
    let families = doc["families"].as_object().unwrap();
    for row in FAMILIES.iter().filter(|r| r.model_type != "gemma3") {
        let want = &families[row.model_type];
        let mut cfg = json!({"model_type": row.model_type, "vocab_size": 10,
            "hidden_size": hidden, "num_attention_heads": heads, "num_hidden_layers": 2,
            "intermediate_size": 8, "moe_intermediate_size": 8, "num_experts": 4,
            "num_local_experts": 4, "n_routed_experts": 4, "num_experts_per_tok": 2});
        let read = |cfg: &Value| Description::from_json(cfg, row.model_type).unwrap();
        let absent = read(&cfg);
        assert_eq!(
            absent.num_key_value_heads,
            want["kv_heads_absent"].as_u64().unwrap(),
            "{}",
            row.model_type
        );
        let head_dim = want["head_dim"].as_u64().unwrap_or(hidden / heads);
        assert_eq!(absent.head_dim, head_dim, "{} head_dim", row.model_type);
        assert_eq!(
            absent.tie_word_embeddings,
            want["tie_word_embeddings"].as_bool().unwrap(),
            "{}",
            row.model_type
        );
        assert_eq!(
            row.max_position_embeddings,
            want["max_position_embeddings"].as_u64().unwrap(),
            "{}",
            row.model_type
        );
        if let Some(null) = want["kv_heads_null"].as_u64() {
            cfg["num_key_value_heads"] = Value::Null;
            assert_eq!(
                read(&cfg).num_key_value_heads,
                null,
                "{} null",
                row.model_type
            );
        }
    }
}

/// A Qwen3-MoE config with YaRN, so every float key of the GGUF table is written.
fn yarn_moe() -> Qwen3Config {
    Qwen3Config::from_json(
        &json!({"model_type": "qwen3_moe", "vocab_size": 300, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 96, "moe_intermediate_size": 32,
        "num_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 4096,
        "rope_theta": 1e6, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
        "original_max_position_embeddings": 1024, "attention_factor": 1.1}}),
        "c",
    )
    .unwrap()
}

/// The error for `cfg`'s metadata with `key` set to `value` (it must be refused).
fn refused(cfg: &Qwen3Config, key: &str, value: MetaValue) -> String {
    let mut meta: Vec<(String, MetaValue)> = gguf_metadata(cfg)
        .into_iter()
        .filter(|(k, _)| k != key)
        .collect();
    meta.push((key.to_string(), value));
    match config_from_metadata(Path::new("m.gguf"), &meta, &[]) {
        Ok(_) => panic!("{key} accepted"),
        Err(e) => e.to_string(),
    }
}

#[test]
fn gguf_float_keys_refuse_nan_inf_and_f32_overflow() {
    let cfg = yarn_moe();
    let floats: Vec<String> = gguf_metadata(&cfg)
        .into_iter()
        .filter(|(_, v)| matches!(v, MetaValue::F32(_)))
        .map(|(k, _)| k)
        .collect();
    assert!(floats.len() >= 6, "{floats:?}");
    for key in &floats {
        for (value, shown) in [
            (MetaValue::F32(f32::NAN), "NaN"),
            (MetaValue::F32(f32::INFINITY), "inf"),
            (MetaValue::F32(f32::NEG_INFINITY), "-inf"),
            (MetaValue::F64(1e300), "overflows f32"),
        ] {
            let e = refused(&cfg, key, value);
            assert!(
                e.contains(key.as_str()) && e.contains(shown) && e.contains("m.gguf"),
                "{e}"
            );
        }
    }
}

#[test]
fn gguf_count_keys_refuse_non_integers() {
    let cfg = yarn_moe();
    let counts: Vec<String> = gguf_metadata(&cfg)
        .into_iter()
        .filter(|(k, v)| matches!(v, MetaValue::U32(_)) && !k.starts_with("tokenizer."))
        .map(|(k, _)| k)
        .collect();
    assert!(counts.len() >= 10, "{counts:?}");
    for key in &counts {
        for (value, shown) in [
            (MetaValue::F32(64.7), "64.7"),
            (MetaValue::F32(f32::NAN), "NaN"),
            (MetaValue::I32(-64), "-64"),
        ] {
            let e = refused(&cfg, key, value);
            assert!(e.contains(key.as_str()) && e.contains(shown), "{key}: {e}");
        }
    }
}

#[test]
fn llama_and_gemma3_configs_follow_their_classes() {
    let llama = Qwen3Config::from_json(
        &json!({"model_type": "llama", "vocab_size": 49152, "hidden_size": 576,
        "num_hidden_layers": 30, "num_attention_heads": 9, "num_key_value_heads": 3,
        "intermediate_size": 1536, "rope_theta": 100000.0, "tie_word_embeddings": true}),
        "llama",
    )
    .unwrap();
    assert_eq!(
        (llama.head_dim, llama.qk_norm, llama.attention_bias),
        (64, false, false)
    );
    assert_eq!(llama.max_position_embeddings, 2048, "LlamaConfig's default");
    let text = json!({"model_type": "gemma3_text", "vocab_size": 262144, "hidden_size": 640,
        "num_hidden_layers": 18, "num_attention_heads": 4, "num_key_value_heads": 1,
        "intermediate_size": 2048, "sliding_window": 512,
        "hidden_activation": "gelu_pytorch_tanh", "query_pre_attn_scalar": 256});
    let gemma = Qwen3Config::from_json(&text, "gemma").unwrap();
    assert_eq!(
        (gemma.head_dim, gemma.qk_norm, gemma.tie_word_embeddings),
        (256, true, true)
    );
    assert_eq!(gemma.rope.theta, 1e6);
    let global: Vec<usize> = (0..18)
        .filter(|&l| gemma.sliding_window[l].is_none())
        .collect();
    assert_eq!(global, [5, 11, 17]);
    assert!(gemma.sliding_window.iter().flatten().all(|&w| w == 512));
    let wrapped = json!({"model_type": "gemma3", "text_config": text});
    let via_text = Qwen3Config::from_json(&wrapped, "gemma").unwrap();
    assert_eq!(via_text.sliding_window, gemma.sliding_window);
    let mut capped = text.clone();
    capped["final_logit_softcapping"] = json!(30.0);
    let e = Qwen3Config::from_json(&capped, "gemma")
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("final_logit_softcapping") && e.contains("not supported"),
        "{e}"
    );
}

/// The real files (when fetched): SmolLM2 is llama with tied embeddings and 3 KV heads;
/// Gemma 3 270M has its global layers where llama.cpp's pattern puts them.
#[test]
fn real_gguf_configs_read() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/real-models");
    let smol = dir.join("smollm2-135m-instruct-q4_1.gguf");
    let gemma = dir.join("gemma3-270m-q4_k_m.gguf");
    if !smol.is_file() || !gemma.is_file() {
        eprintln!("skipped real_gguf_configs_read: run `bash scripts/get-real-models.sh`");
        return;
    }
    let (s, _) = llm_anatomy::qwen3::open(&smol).unwrap();
    assert_eq!(
        (s.model_type.as_str(), s.num_key_value_heads, s.head_dim),
        ("llama", 3, 64)
    );
    assert!(s.tie_word_embeddings && !s.qk_norm);
    let (g, _) = llm_anatomy::qwen3::open(&gemma).unwrap();
    let global: Vec<usize> = (0..g.num_hidden_layers)
        .filter(|&l| g.sliding_window[l].is_none())
        .collect();
    assert_eq!(global, [5, 11, 17]);
    assert_eq!((g.head_dim, g.sliding_window[0]), (256, Some(512)));
}

/// `anatomy params` of a real GGUF file counts what the file holds: the parameters it
/// computes from the metadata equal the elements of the tensors llama.cpp's converter wrote
/// (both files tie the head, so each embedding is stored and counted once).
#[test]
fn params_of_real_gguf_count_the_files_tensors() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/real-models");
    for file in ["smollm2-135m-instruct-q4_1.gguf", "gemma3-270m-q4_k_m.gguf"] {
        let path = dir.join(file);
        if !path.is_file() {
            eprintln!("skipped {file}: run `bash scripts/get-real-models.sh`");
            continue;
        }
        let gguf = llm_anatomy::gguf::Gguf::open(&path).unwrap();
        let stored: u64 = gguf
            .tensors()
            .iter()
            .map(|t| t.dims.iter().product::<u64>())
            .sum();
        let cfg = llm_anatomy::qwen3::gguf_config::config_from_gguf(&gguf).unwrap();
        let json = llm_anatomy::train::params::config_json(&cfg).unwrap();
        let report = llm_anatomy::params::report::config_report_json(&json, file).unwrap();
        assert_eq!(report.params.total, stored, "{file}");
    }
}

/// The fuzz-found metadata (fuzz/artifacts/gguf_config/crash-a0d9…): Qwen3-30B-A3B's keys
/// with YaRN, a factor of 2.35e-38 and no `context_length`. Every value is in range; the
/// table is not (inv_freq 1.29e34), and the reader names the keys that set it.
#[test]
fn a_gguf_rope_table_out_of_range_names_its_keys() {
    let mut v = load("qwen3-30b-a3b.json");
    v["rope_scaling"] =
        json!({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768});
    let cfg = Qwen3Config::from_json(&v, "qwen3-30b-a3b.json").unwrap();
    let factor = f64::from_le_bytes([0x09, 0x0a, 0x6f, 0x00, 0x0a, 0x74, 0x21, 0x38]);
    let mut meta: Vec<(String, MetaValue)> = gguf_metadata(&cfg)
        .into_iter()
        .filter(|(k, _)| k != "qwen3moe.context_length")
        .collect();
    for (k, value) in &mut meta {
        if k == "qwen3moe.rope.scaling.factor" {
            *value = MetaValue::F64(factor);
        }
    }
    let e = config_from_metadata(Path::new("m.gguf"), &meta, &[])
        .unwrap_err()
        .to_string();
    let needle = format!("qwen3moe.rope.scaling.factor = {factor:e}");
    assert!(
        e.contains("m.gguf") && e.contains(&needle) && e.contains("inv_freq"),
        "{e}"
    );
}
