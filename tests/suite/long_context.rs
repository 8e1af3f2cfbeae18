//! Chapter 3 beyond the claims: attention variants agree, memory arithmetic, scaling edge cases.

use llm_anatomy::kernels::attention::{Mask, naive_attention};
use llm_anatomy::long_context::attention::tiled_attention;
use llm_anatomy::long_context::{memory, scaling};
use llm_anatomy::rand::random_tokens;
use ndarray::s;

fn max_diff(a: &ndarray::Array2<f32>, b: &ndarray::Array2<f32>) -> f32 {
    (a - b).iter().fold(0.0f32, |m, d| m.max(d.abs()))
}

#[test]
fn tiled_equals_naive_for_every_mask_and_tile_size() {
    let x = random_tokens(3 * 50, 16, 11);
    let (q, k, v) = (
        x.slice(s![0..50, ..]),
        x.slice(s![50..100, ..]),
        x.slice(s![100.., ..]),
    );
    for mask in [Mask::None, Mask::Causal, Mask::SlidingWindow(7)] {
        let naive = naive_attention(q, k, v, 0.25, mask);
        for tile in [1, 3, 16, 50, 64] {
            let (tiled, stats) = tiled_attention(q, k, v, 0.25, mask, tile);
            assert!(max_diff(&naive, &tiled) < 2e-6, "{mask:?} tile {tile}");
            assert_eq!(stats.scratch_floats, tile + 2);
        }
    }
}

#[test]
fn one_new_query_attends_to_the_whole_cache() {
    // Decoding: the last query against all keys equals the last row of full causal attention.
    let x = random_tokens(3 * 20, 8, 12);
    let (q, k, v) = (
        x.slice(s![0..20, ..]),
        x.slice(s![20..40, ..]),
        x.slice(s![40.., ..]),
    );
    let full = naive_attention(q, k, v, 0.3, Mask::Causal);
    let last = naive_attention(q.slice(s![19..20, ..]), k, v, 0.3, Mask::Causal);
    assert!(max_diff(&full.slice(s![19..20, ..]).to_owned(), &last) == 0.0);
}

#[test]
fn sliding_window_ignores_keys_outside_the_window() {
    // Changing a value outside every query's window must not change that query's output.
    let x = random_tokens(3 * 12, 8, 13);
    let (q, k) = (x.slice(s![0..12, ..]), x.slice(s![12..24, ..]));
    let v = x.slice(s![24.., ..]).to_owned();
    let mut v2 = v.clone();
    v2.row_mut(0).fill(100.0);
    let a = naive_attention(q, k, v.view(), 0.3, Mask::SlidingWindow(4));
    let b = naive_attention(q, k, v2.view(), 0.3, Mask::SlidingWindow(4));
    // Query 4 onwards cannot see key 0 (window 4 covers positions i−3..i).
    assert_eq!(
        max_diff(
            &a.slice(s![4.., ..]).to_owned(),
            &b.slice(s![4.., ..]).to_owned()
        ),
        0.0
    );
    assert!(
        max_diff(
            &a.slice(s![0..4, ..]).to_owned(),
            &b.slice(s![0..4, ..]).to_owned()
        ) > 1.0
    );
}

#[test]
fn kv_cache_of_qwen3_30b_a3b() {
    // 48 layers × 4 KV heads × 128 dims × (K and V) × 2 bytes.
    let per_token = memory::kv_cache_bytes_per_token(48, 4, 128, 2);
    assert_eq!(per_token, 48 * 4 * 128 * 2 * 2);
    assert_eq!(
        memory::kv_cache_bytes(32_768, 48, 4, 128, 2),
        32_768 * per_token
    );
    let (gb, gib) = memory::gb_and_gib(1 << 30);
    assert_eq!(gib, 1.0);
    assert!((gb - 1.073741824).abs() < 1e-12);
}

#[test]
fn dynamic_ntk_is_the_plain_base_up_to_the_trained_length() {
    let scaling = serde_json::json!({"rope_type": "dynamic", "factor": 4.0});
    let cfg = scaling::RopeConfig::new(64, 10_000.0, Some(&scaling), Some(2048), "test").unwrap();
    let plain = llm_anatomy::position::rope::inv_freq(64, 10_000.0);
    for seq in [None, Some(100), Some(2048)] {
        assert_eq!(cfg.init(seq).unwrap().inv_freq, plain, "seq {seq:?}");
    }
    let longer = cfg.init(Some(4096)).unwrap().inv_freq;
    assert!(longer[31] < plain[31] && longer[0] == plain[0]);
}

#[test]
fn bad_scaling_objects_are_errors_naming_the_field() {
    let bad = [
        (serde_json::json!({"rope_type": "linear"}), "factor"),
        (
            serde_json::json!({"rope_type": "linear", "factor": "eight"}),
            "factor",
        ),
        (
            serde_json::json!({"rope_type": "nope", "factor": 2}),
            "rope_type",
        ),
        (
            serde_json::json!({"rope_type": "dynamic", "factor": 2}),
            "max_position_embeddings",
        ),
        (
            serde_json::json!({"rope_type": "llama3", "factor": 8, "low_freq_factor": 1}),
            "high_freq_factor",
        ),
        (
            serde_json::json!({"rope_type": "yarn", "factor": -1, "original_max_position_embeddings": 4096}),
            "factor",
        ),
        (serde_json::json!([1, 2]), "rope_scaling"),
    ];
    for (obj, field) in bad {
        let err = scaling::RopeConfig::new(128, 1e4, Some(&obj), None, "cfg.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(field) && err.contains("cfg.json"),
            "{obj}: {err}"
        );
    }
    assert!(scaling::RopeConfig::new(127, 1e4, None, None, "cfg.json").is_err());
}
