//! GGUF metadata → config (`qwen3::gguf_config::config_from_metadata`): the metadata of
//! a real config (Qwen3-30B-A3B's, with YaRN) with values replaced as the input says —
//! NaN, ±inf, negatives, huge, fractional, of another type, removed. Nothing may panic;
//! an accepted config has a finite norm epsilon ≥ 0, and RoPE tables that initialise
//! are finite.
#![no_main]
use libfuzzer_sys::fuzz_target;
use llm_anatomy::gguf::MetaValue;
use llm_anatomy::qwen3::Qwen3Config;
use llm_anatomy::qwen3::gguf_config::{config_from_metadata, gguf_metadata};
use std::path::Path;
use std::sync::OnceLock;

fn base() -> &'static Vec<(String, MetaValue)> {
    static BASE: OnceLock<Vec<(String, MetaValue)>> = OnceLock::new();
    BASE.get_or_init(|| {
        let text = include_str!("../../data/configs/qwen3-30b-a3b.json");
        let mut v: serde_json::Value = serde_json::from_str(text).unwrap();
        v["rope_scaling"] = serde_json::json!({
            "rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768
        });
        gguf_metadata(&Qwen3Config::from_json(&v, "qwen3-30b-a3b.json").unwrap())
    })
}

/// A value of the kind `tag` picks, from the 8 bytes `b`.
fn value(tag: u8, b: [u8; 8]) -> Option<MetaValue> {
    let f = f64::from_le_bytes(b);
    let specials = [f64::NAN, f64::INFINITY, -f64::INFINITY, -1.0, 0.0, 1e300, 64.7, 1e-300];
    Some(match tag % 12 {
        0 => return None,
        1 => MetaValue::F32(f as f32),
        2 => MetaValue::F64(f),
        3 => MetaValue::F32(specials[b[0] as usize % specials.len()] as f32),
        4 => MetaValue::F64(specials[b[0] as usize % specials.len()]),
        5 => MetaValue::U32(u32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        6 => MetaValue::I32(i32::from_le_bytes([b[0], b[1], b[2], b[3]])),
        7 => MetaValue::U64(u64::from_le_bytes(b)),
        8 => MetaValue::I64(i64::from_le_bytes(b)),
        9 => MetaValue::U32(u32::from(b[0])),
        10 => MetaValue::Bool(b[0] & 1 == 1),
        _ => MetaValue::Str(String::from_utf8_lossy(&b[..b[0] as usize % 9]).into_owned()),
    })
}

fuzz_target!(|data: &[u8]| {
    let mut metadata = base().clone();
    // Each 10 bytes: which key, what kind of value, 8 bytes of value.
    for edit in data.chunks_exact(10) {
        let i = edit[0] as usize % metadata.len();
        match value(edit[1], edit[2..].try_into().unwrap()) {
            Some(v) => metadata[i].1 = v,
            None => {
                metadata.remove(i);
                if metadata.is_empty() {
                    return;
                }
            }
        }
    }
    let Ok(c) = config_from_metadata(Path::new("fuzz.gguf"), &metadata, &[]) else {
        return;
    };
    // 0 is accepted, as transformers accepts it (a zero hidden state then gives NaN).
    assert!(c.rms_norm_eps.is_finite() && c.rms_norm_eps >= 0.0, "{}", c.rms_norm_eps);
    let positions = c.max_position_embeddings.min(1 << 16);
    // The tables are checked when a model is built (`Model::new` initialises them first),
    // so an error here is a refusal, not a finding; what initialises must be finite.
    if let Ok(init) = c.rope.init(Some(positions)) {
        assert!(init.inv_freq.iter().all(|f| f.is_finite() && *f >= 0.0));
        assert!(init.attention_factor.is_finite() && init.attention_factor > 0.0);
    }
});
