//! Properties on stable (issue 13, item 7): every reader of user input returns a value or
//! an error — never a panic, never a wrapped size — on arbitrary bytes and on arbitrary
//! JSON, and BPE decoding undoes encoding. The cargo-fuzz targets in fuzz/ search the same
//! ground far longer; these run in `cargo test`.

use llm_anatomy::chat::ChatOptions;
use llm_anatomy::chat::template::parse_conversation;
use llm_anatomy::checkpoint::{parse_header, parse_index};
use llm_anatomy::gguf;
use llm_anatomy::long_context::scaling::RopeConfig;
use llm_anatomy::params::{ModelConfig, count};
use llm_anatomy::qwen3::Qwen3Config;
use llm_anatomy::tokenizer::{Tokenizer, parse_id_ranges};
use proptest::prelude::*;
use serde_json::{Value, json};
use std::path::Path;
use std::sync::OnceLock;

/// The field names the config readers look at, so generated objects reach deep code.
const KEYS: &[&str] = &[
    "model_type",
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "vocab_size",
    "intermediate_size",
    "moe_intermediate_size",
    "num_experts",
    "num_local_experts",
    "n_routed_experts",
    "num_experts_per_tok",
    "max_position_embeddings",
    "rope_theta",
    "rope_scaling",
    "rope_parameters",
    "rope_type",
    "type",
    "factor",
    "original_max_position_embeddings",
    "attention_factor",
    "beta_fast",
    "beta_slow",
    "mscale",
    "mscale_all_dim",
    "low_freq_factor",
    "high_freq_factor",
    "short_factor",
    "long_factor",
    "partial_rotary_factor",
    "mlp_only_layers",
    "decoder_sparse_step",
    "eos_token_id",
    "sliding_window",
    "use_sliding_window",
    "layer_types",
    "tie_word_embeddings",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_nope_head_dim",
    "qk_rope_head_dim",
    "v_head_dim",
    "n_shared_experts",
    "first_k_dense_replace",
    "moe_layer_freq",
    "n_group",
    "num_nextn_predict_layers",
    "rms_norm_eps",
    "hidden_act",
];

fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        any::<u64>().prop_map(Value::from),
        (0u64..70).prop_map(|e| Value::from(1u64 << e.min(63))),
        (0u64..300).prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        prop_oneof![
            Just(0.0),
            Just(-1.0),
            Just(1e-300),
            Just(1e300),
            Just(0.5),
            Just(4.0),
            any::<f64>().prop_filter("finite", |x| x.is_finite()),
        ]
        .prop_map(|x| json!(x)),
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        number(),
        prop_oneof![
            Just("qwen3_moe"),
            Just("qwen3"),
            Just("deepseek_v3"),
            Just("mixtral"),
            Just("yarn"),
            Just("linear"),
            Just("dynamic"),
            Just("llama3"),
            Just("longrope"),
            Just("proportional"),
            Just("default"),
            Just("silu"),
            Just("full_attention"),
            Just("sliding_attention"),
        ]
        .prop_map(Value::from),
        ".{0,12}".prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 48, 8, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..8).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..12).prop_map(|kv| {
                Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect())
            }),
        ]
    })
}

/// A real config with some fields replaced by arbitrary values.
fn mutated_config() -> impl Strategy<Value = Value> {
    let base: Value =
        serde_json::from_str(include_str!("../fixtures/qwen3/head_dim_gqa/config.json")).unwrap();
    let v4: Value =
        serde_json::from_str(include_str!("../../data/configs/qwen3-30b-a3b.json")).unwrap();
    (
        prop::bool::ANY,
        prop::collection::vec((prop::sample::select(KEYS), json_value()), 1..4),
    )
        .prop_map(move |(old_style, edits)| {
            let mut c = if old_style { v4.clone() } else { base.clone() };
            for (k, v) in edits {
                c[k] = v;
            }
            c
        })
}

fn check_configs(v: &Value) {
    if let Ok(c) = Qwen3Config::from_json(v, "config.json") {
        let init = c
            .rope
            .init(Some(c.max_position_embeddings.min(1 << 16)))
            .unwrap();
        assert!(init.inv_freq.iter().all(|f| f.is_finite() && *f >= 0.0));
    }
    if let Ok(c) = ModelConfig::from_json(v, "config.json") {
        let r = count(&c);
        assert!(r.active <= r.total);
        assert_eq!(r.embedding + r.attention + r.ffn + r.norms, r.total);
    }
    if let Ok(r) = RopeConfig::from_model_config(v, "config.json") {
        let _ = r.init(None);
        let _ = r.init(Some(1 << 20));
    }
}

/// The Qwen vocabulary without its NFC step, so that decoding gives back the very text
/// (with NFC on it gives back the text's NFC form: tests/tokenizer.rs checks that).
/// The GGUF files gguf-py wrote for tests/gguf.rs.
fn gguf_fixtures() -> &'static [Vec<u8>] {
    static FILES: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    FILES.get_or_init(|| {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_reader");
        ["values", "quant", "empty"]
            .iter()
            .map(|n| std::fs::read(dir.join(format!("{n}.gguf"))).unwrap())
            .collect()
    })
}

/// A GGUF fixture with a few bytes overwritten, some with little-endian integers that are
/// typical lies (0, 1, 2^k, 2^k ± 1, all ones), so counts, lengths, dims, types and
/// offsets are hit, not only bytes.
fn mutated_gguf() -> impl Strategy<Value = Vec<u8>> {
    let edit = (any::<usize>(), 0u32..64, any::<u8>(), 0usize..4);
    (0usize..3, prop::collection::vec(edit, 1..6), any::<usize>()).prop_map(|(f, edits, cut)| {
        let mut b = gguf_fixtures()[f].clone();
        for (at, k, byte, kind) in edits {
            let at = at % b.len();
            let v: u64 = match kind {
                0 => 1u64 << k,
                1 => (1u64 << k).wrapping_sub(1),
                2 => u64::MAX,
                _ => u64::from(byte),
            };
            let width = if kind == 3 { 1 } else { [4, 8][k as usize % 2] };
            for (i, x) in v.to_le_bytes().iter().take(width).enumerate() {
                if let Some(slot) = b.get_mut(at + i) {
                    *slot = *x;
                }
            }
        }
        if cut % 4 == 0 {
            b.truncate(cut % (b.len() + 1));
        }
        b
    })
}

fn qwen() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let mut t = Tokenizer::qwen().unwrap();
        t.nfc = false;
        t
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn readers_never_panic_on_bytes(bytes in prop::collection::vec(any::<u8>(), 0..512)) {
        let _ = parse_header(Path::new("x.safetensors"), &bytes);
        let _ = gguf::parse(Path::new("x.gguf"), &bytes);
        let _ = parse_index(&bytes, Path::new("d/model.safetensors.index.json"));
        let _ = Tokenizer::from_bytes(&bytes, false, "x.tiktoken");
        let _ = Tokenizer::from_bytes(&bytes, true, "tokenizer.json");
        let text = String::from_utf8_lossy(&bytes);
        let _ = parse_id_ranges(&text);
        if let Ok(c) = parse_conversation(&text, "m.json") {
            let _ = c.render(&ChatOptions::default());
        }
    }

    #[test]
    fn safetensors_headers_never_panic(header in json_value(), data in prop::collection::vec(any::<u8>(), 0..64)) {
        let h = header.to_string();
        let mut file = (h.len() as u64).to_le_bytes().to_vec();
        file.extend(h.as_bytes());
        file.extend(&data);
        let _ = parse_header(Path::new("x.safetensors"), &file);
        let _ = parse_index(h.as_bytes(), Path::new("d/i.json"));
    }

    #[test]
    fn gguf_headers_never_panic(body in prop::collection::vec(any::<u8>(), 0..256), version in 2u32..4, counts in (0u64..4, 0u64..4)) {
        let mut file = b"GGUF".to_vec();
        file.extend(version.to_le_bytes());
        file.extend(counts.0.to_le_bytes());
        file.extend(counts.1.to_le_bytes());
        file.extend(&body);
        let _ = gguf::parse(Path::new("x.gguf"), &file);
    }

    #[test]
    fn mutated_gguf_files_never_panic(file in mutated_gguf()) {
        if let Ok(p) = gguf::parse(Path::new("m.gguf"), &file) {
            for t in &p.tensors {
                prop_assert!(p.data_offset + t.offset + t.size <= file.len() as u64);
                prop_assert!(t.offset % p.alignment == 0);
            }
        }
    }

    #[test]
    fn configs_never_panic_or_wrap(v in json_value()) {
        check_configs(&v);
    }

    #[test]
    fn mutated_real_configs_never_panic_or_wrap(v in mutated_config()) {
        check_configs(&v);
    }

    #[test]
    fn conversations_never_panic(v in json_value()) {
        if let Ok(c) = parse_conversation(&v.to_string(), "m.json") {
            for t in [None, Some(false), Some(true)] {
                let _ = c.render(&ChatOptions { add_generation_prompt: true, enable_thinking: t });
            }
        }
    }

    #[test]
    fn decode_undoes_encode(text in "\\PC{0,64}|[ \\t\\r\\n a-z0-9<|>_'.,!]{0,64}") {
        let tok = qwen();
        let ids = tok.encode(&text).unwrap();
        prop_assert_eq!(tok.decode(&ids).unwrap(), text.clone());
        let plain = tok.encode_ordinary(&text).unwrap();
        prop_assert_eq!(tok.decode(&plain).unwrap(), text);
    }
}
