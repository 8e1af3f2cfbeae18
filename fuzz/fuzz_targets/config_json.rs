//! config.json in both styles (transformers 4.x `rope_scaling`, 5.x `rope_parameters`):
//! the engine's reader, chapter 6's reader and counts, and RoPE initialisation. Accepted
//! configs must give finite frequencies and counts that add up.
#![no_main]
use libfuzzer_sys::fuzz_target;
use llm_anatomy::long_context::scaling::RopeConfig;
use llm_anatomy::params::{ModelConfig, count};
use llm_anatomy::qwen3::Qwen3Config;

fuzz_target!(|data: &[u8]| {
    let Ok(v) = serde_json::from_slice::<serde_json::Value>(data) else {
        return;
    };
    if let Ok(c) = Qwen3Config::from_json(&v, "config.json") {
        let init = c.rope.init(Some(c.max_position_embeddings.min(1 << 20))).unwrap();
        assert!(init.inv_freq.iter().all(|f| f.is_finite() && *f >= 0.0));
        assert!(init.attention_factor.is_finite() && init.attention_factor > 0.0);
    }
    if let Ok(c) = ModelConfig::from_json(&v, "config.json") {
        let r = count(&c);
        assert!(r.active <= r.total && r.embedding <= r.total);
        assert_eq!(r.embedding + r.attention + r.ffn + r.norms, r.total);
    }
    if let Ok(rope) = RopeConfig::from_model_config(&v, "config.json") {
        let _ = rope.init(None);
        let _ = rope.init(Some(1 << 16));
    }
});
