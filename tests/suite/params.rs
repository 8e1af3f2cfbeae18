//! Chapter 6 (params): exact parameter counts against transformers' own models, built on
//! the meta device by scripts/gen_params_fixtures.py (transformers 5.24.0, torch 2.15.0)
//! into tests/fixtures/params/counts.json; the CLI's JSON; bad input.

use llm_anatomy::params::{self, ModelConfig, count, text_formula};
use serde_json::{Value, json};
use std::path::Path;
use std::process::Command;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn report(rel: &str) -> params::ParamReport {
    params::report_file(&root().join(rel)).unwrap()
}

fn hf_counts() -> Value {
    let text = std::fs::read_to_string(root().join("tests/fixtures/params/counts.json")).unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["counts"].clone()
}

#[test]
fn every_config_matches_transformers_by_category() {
    let counts = hf_counts();
    let map = counts.as_object().unwrap();
    assert!(map.len() >= 12);
    for (rel, want) in map {
        let r = report(rel);
        let g = |k: &str| want.get(k).and_then(Value::as_u64).unwrap_or(0);
        assert_eq!(r.total, g("total"), "{rel}: total");
        assert_eq!(
            r.embedding,
            g("embedding") + g("lm_head"),
            "{rel}: embedding"
        );
        assert_eq!(r.lm_head, g("lm_head"), "{rel}: lm_head");
        assert_eq!(r.attention, g("attention"), "{rel}: attention");
        assert_eq!(r.norms, g("norm"), "{rel}: norms");
        assert_eq!(r.ffn_detail.dense_mlp, g("dense_mlp"), "{rel}: dense");
        assert_eq!(r.ffn_detail.router, g("router"), "{rel}: router");
        assert_eq!(r.ffn_detail.experts, g("experts"), "{rel}: experts");
        assert_eq!(
            r.ffn_detail.shared_experts,
            g("shared_experts"),
            "{rel}: shared"
        );
        assert_eq!(r.embedding + r.attention + r.ffn + r.norms, r.total);
    }
}

#[test]
fn qwen3_30b_a3b_exact() {
    let r = report("data/configs/qwen3-30b-a3b.json");
    assert_eq!(r.total, 30_532_122_624);
    assert_eq!(r.active, 3_353_032_704);
    assert_eq!(r.norms, 210_944); // 48·(2·2048 + 2·128) + 2048
    assert_eq!(r.text_formula_total, Some(30_531_911_680));
    assert_eq!(r.text_formula_active, Some(3_352_821_760));
    assert_eq!(r.total - r.text_formula_total.unwrap(), r.norms);
    assert_eq!(r.kv_cache_bytes_per_token_bf16, 48 * 2 * 4 * 128 * 2);
    assert_eq!(r.bytes_bf16, 2 * r.total);
    assert_eq!((r.dense_layers, r.moe_layers), (0, 48));
    // Per token: 2 FLOPs per weight of the 48 layers (attention, router, 8 experts) + head.
    let per_layer = 2048 * 4096 * 2 + 2048 * 512 * 2 + 2048 * 128 + 8 * 3 * 2048 * 768;
    assert_eq!(r.flops_per_token, 2 * (48 * per_layer + 151_936 * 2048));
}

#[test]
fn qwen3_32b_exact() {
    let r = report("data/configs/qwen3-32b.json");
    assert_eq!(r.total, 32_762_123_264);
    assert_eq!(r.active, r.total);
    assert_eq!(r.kv_cache_bytes_per_token_bf16, 64 * 2 * 8 * 128 * 2);
}

#[test]
fn mixtral_exact() {
    let r = report("data/configs/mixtral-8x7b.json");
    assert_eq!(r.total, 46_702_792_704);
    // 2 of 8 experts: 32 layers × (attention + norms + router + 2 experts) + embeddings + norm.
    let layer = 4096 * 4096 * 2 + 4096 * 1024 * 2 + 2 * 4096 + 8 * 4096 + 2 * 3 * 4096 * 14336;
    assert_eq!(r.active, 32 * layer + 2 * 32000 * 4096 + 4096);
    assert_eq!(r.active, 12_879_925_248);
}

#[test]
fn deepseek_v3_exact_with_and_without_mtp() {
    let r = report("data/configs/deepseek-v3.json");
    assert_eq!(r.total, 671_026_419_200);
    assert_eq!(r.active, 37_552_297_472);
    assert_eq!((r.dense_layers, r.moe_layers), (3, 58));
    // MLA caches 512 + 64 per layer.
    assert_eq!(r.kv_cache_bytes_per_token_bf16, 61 * (512 + 64) * 2);
    assert_eq!(
        r.kv_cache_bytes_per_token_bf16_expanded,
        61 * 128 * (128 + 64 + 128) * 2
    );
    // The MTP module: one more MoE layer + enorm, hnorm, eh_proj, shared_head.norm.
    let layer = params::layer_params(
        &ModelConfig::from_file(&root().join("data/configs/deepseek-v3.json")).unwrap(),
        61,
    );
    assert!(layer.is_moe);
    assert_eq!(r.mtp, 11_610_068_224);
    assert_eq!(r.total_with_mtp, r.total + r.mtp);
    assert!(r.text_formula_total.is_none());
}

#[test]
fn tied_embeddings_count_once() {
    let cfg = |tie: bool| {
        let mut v: Value = serde_json::from_str(
            &std::fs::read_to_string(root().join("data/configs/qwen3-32b.json")).unwrap(),
        )
        .unwrap();
        v["tie_word_embeddings"] = json!(tie);
        count(&ModelConfig::from_json(&v, "test").unwrap())
    };
    let (untied, tied) = (cfg(false), cfg(true));
    assert_eq!(untied.total - tied.total, 151_936 * 5120);
    assert_eq!(tied.lm_head, 0);
    // A tied head is still a matmul per token.
    assert_eq!(untied.flops_per_token, tied.flops_per_token);
}

#[test]
fn text_formula_differs_only_by_norms_for_qwen3_moe() {
    for rel in [
        "data/configs/qwen3-30b-a3b.json",
        "data/configs/qwen3-32b.json",
        "tests/fixtures/params/qwen3-tied.config.json",
    ] {
        let c = ModelConfig::from_file(&root().join(rel)).unwrap();
        let r = count(&c);
        let (ft, _) = text_formula(&c).unwrap();
        assert_eq!(r.total - ft, r.norms, "{rel}");
    }
}

// ------------------------------------------------------------------ the CLI

fn anatomy(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(args)
        .current_dir(root())
        .output()
        .unwrap()
}

#[test]
fn cli_params_json_has_the_contract_fields() {
    let out = anatomy(&["params", "data/configs/qwen3-30b-a3b.json", "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "total",
        "active",
        "embedding",
        "attention",
        "ffn",
        "bytes_bf16",
        "kv_cache_bytes_per_token_bf16",
    ] {
        assert!(v[key].is_u64(), "{key}");
    }
    assert_eq!(v["total"], 30_532_122_624u64);
    let text = anatomy(&["params", "data/configs/qwen3-30b-a3b.json"]);
    assert!(String::from_utf8_lossy(&text.stdout).contains("30,532,122,624"));
}

#[test]
fn cli_params_bad_input_exits_2_naming_the_field() {
    let dir = crate::common::scratch("params");
    let cases = [
        ("{\"model_type\": \"gpt2\"}", "model_type"),
        (
            "{\"model_type\": \"qwen3\", \"vocab_size\": 10}",
            "hidden_size",
        ),
        (
            "{\"model_type\": \"qwen3_moe\", \"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 8, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 3}",
            "num_key_value_heads",
        ),
        (
            "{\"model_type\": \"mixtral\", \"vocab_size\": 10, \"hidden_size\": 8, \"intermediate_size\": 8, \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"num_local_experts\": 2, \"num_experts_per_tok\": 3}",
            "num_experts_per_tok",
        ),
        (
            "{\"model_type\": \"qwen3\", \"hidden_size\": -5}",
            "hidden_size",
        ),
        ("not json", "invalid JSON"),
    ];
    for (i, (text, needle)) in cases.iter().enumerate() {
        let p = dir.join(format!("c{i}.json"));
        std::fs::write(&p, text).unwrap();
        let out = anatomy(&["params", p.to_str().unwrap(), "--json"]);
        assert_eq!(out.status.code(), Some(2), "case {i}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(needle) && err.contains(&format!("c{i}.json")),
            "case {i}: {err}"
        );
    }
    let missing = anatomy(&["params", "no/such/config.json"]);
    assert_eq!(missing.status.code(), Some(2));
}

#[test]
fn layer_tensors_add_up_to_the_layer_count() {
    let counts = hf_counts();
    for rel in counts.as_object().unwrap().keys() {
        let c = ModelConfig::from_file(&root().join(rel)).unwrap();
        for l in 0..c.num_hidden_layers {
            let p = params::layer_params(&c, l);
            let f = p.ffn;
            let want =
                p.attention + p.norms + f.dense_mlp + f.router + f.experts + f.shared_experts;
            let got: u64 = params::layer_tensors(&c, l).iter().map(|t| t.numel()).sum();
            assert_eq!(got, want, "{rel} layer {l}");
        }
    }
}

/// `BLESS=1 cargo test --test suite params::` rewrites the tables the book includes.
#[test]
fn book_tables_are_current() {
    let dir = root().join("book/src/generated");
    for (name, text) in params::book_snippets() {
        let path = dir.join(name);
        if std::env::var_os("BLESS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|_| {
            panic!(
                "{} missing: run BLESS=1 cargo test --test suite params::",
                path.display()
            )
        });
        assert_eq!(
            on_disk,
            text,
            "{} is stale: run BLESS=1 cargo test --test suite params::",
            path.display()
        );
    }
}

// ------------------------------------------------------------------ S1's three questions

fn architecture_of(rel: &str) -> params::report::Architecture {
    let text = std::fs::read_to_string(root().join(rel)).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    params::report::architecture(&v, rel).unwrap()
}

#[test]
fn three_answers_for_the_published_configs() {
    let a = architecture_of("data/configs/qwen3-30b-a3b.json");
    assert_eq!(
        (
            a.position.rope_theta,
            a.position.rotary_dims,
            a.position.qk_head_dim
        ),
        (1e6, 128, 128)
    );
    assert_eq!(
        (
            a.context.extension,
            a.context.max_position_embeddings,
            a.context.sliding_window
        ),
        ("none", Some(40_960), None)
    );
    assert_eq!(
        (
            a.ffn.kind,
            a.ffn.experts_per_token,
            a.ffn.routed_experts,
            a.ffn.moe_layers,
            a.ffn.dense_layers
        ),
        ("moe", 8, 128, 48, 0)
    );
    assert_eq!(
        a.answers,
        [
            "RoPE, base 1,000,000, all 128 dims of a query/key head rotate",
            "no RoPE scaling; max_position_embeddings 40,960",
            "MoE: k/N = 8/128 routed experts per token, in 48 of 48 layers",
        ]
    );

    let d = architecture_of("data/configs/deepseek-v3.json");
    assert_eq!(
        d.answers,
        [
            "RoPE, base 10,000, partial: 64 of 192 query/key dims rotate",
            "YaRN ×40 from 4,096; max_position_embeddings 163,840",
            "MoE: k/N = 8/256 routed experts per token + 1 shared, in 58 of 61 layers, 3 dense",
        ]
    );
    assert_eq!(
        (d.context.factor, d.context.original_max_position_embeddings),
        (Some(40.0), Some(4096))
    );

    let m = architecture_of("data/configs/mixtral-8x7b.json");
    assert_eq!(
        m.answers[0],
        "RoPE, base 1,000,000, all 128 dims of a query/key head rotate"
    );
    assert_eq!(
        m.answers[1],
        "no RoPE scaling; max_position_embeddings 32,768"
    );
    assert_eq!(
        m.answers[2],
        "MoE: k/N = 2/8 routed experts per token, in 32 of 32 layers"
    );

    let q = architecture_of("data/configs/qwen3-32b.json");
    assert_eq!(q.ffn.kind, "dense");
    assert_eq!(
        q.answers[2],
        "dense: one FFN per layer, every parameter active (64 layers)"
    );
}

#[test]
fn three_answers_for_every_fixture_config() {
    // Every config the counts are tested on also answers the three questions, and the
    // MoE layer split agrees with the count's.
    let mut seen = 0;
    for dir in ["data/configs", "tests/fixtures/params"] {
        for entry in std::fs::read_dir(root().join(dir)).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_string_lossy().into_owned();
            if !name.ends_with(".json") || name == "counts.json" {
                continue;
            }
            let rel = format!("{dir}/{name}");
            let v: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
            let Ok(c) = ModelConfig::from_json(&v, &rel) else {
                continue; // a config of a family `anatomy params` does not read
            };
            let a = params::report::architecture(&v, &rel).unwrap();
            let r = count(&c);
            assert_eq!(a.position.encoding, "rope", "{rel}");
            assert!(a.position.rotary_dims <= a.position.qk_head_dim, "{rel}");
            assert_eq!(
                (a.ffn.moe_layers, a.ffn.dense_layers),
                (r.moe_layers, r.dense_layers),
                "{rel}"
            );
            assert_eq!(a.ffn.kind == "moe", c.moe.is_some(), "{rel}");
            if let Some(moe) = &c.moe {
                assert_eq!(
                    (a.ffn.experts_per_token, a.ffn.routed_experts),
                    (moe.k, moe.num_experts),
                    "{rel}"
                );
            }
            assert!(a.answers.iter().all(|s| !s.is_empty()), "{rel}");
            seen += 1;
        }
    }
    assert!(seen >= 14, "only {seen} configs answered");
    let step = architecture_of("tests/fixtures/params/qwen3-moe-step2.config.json");
    assert!(step.ffn.dense_layers > 0 && step.answers[2].contains(" dense"));
    let v2 = architecture_of("tests/fixtures/params/deepseek-v2-lite.config.json");
    assert_eq!(
        (
            v2.ffn.shared_experts,
            v2.position.rotary_dims,
            v2.position.qk_head_dim
        ),
        (2, 64, 192)
    );
}

#[test]
fn sliding_window_only_when_switched_on() {
    let base = json!({"model_type": "qwen2", "vocab_size": 100, "hidden_size": 64,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 4,
        "intermediate_size": 128, "max_position_embeddings": 32768, "sliding_window": 4096});
    let mut off = base.clone();
    off["use_sliding_window"] = json!(false);
    let off = params::report::architecture(&off, "qwen2").unwrap();
    assert_eq!(off.context.sliding_window, None);
    let mut on = base.clone();
    on["use_sliding_window"] = json!(true);
    let on = params::report::architecture(&on, "qwen2").unwrap();
    assert_eq!(on.context.sliding_window, Some(4096));
    assert!(on.answers[1].ends_with("; sliding-window attention of 4,096 tokens"));
    // Mistral style: a window given is a window used.
    let mut mistral = base.clone();
    mistral["model_type"] = json!("mistral");
    let m = params::report::architecture(&mistral, "mistral").unwrap();
    assert_eq!(m.context.sliding_window, Some(4096));
    // A scaling object of the 5.x style, inside rope_parameters.
    let mut yarn = base.clone();
    yarn["rope_parameters"] = json!({"rope_type": "yarn", "rope_theta": 1e6, "factor": 4.0,
        "original_max_position_embeddings": 32768});
    let y = params::report::architecture(&yarn, "qwen2").unwrap();
    assert_eq!(y.position.rope_theta, 1e6);
    assert_eq!(
        y.answers[1],
        "YaRN ×4 from 32,768; max_position_embeddings 32,768"
    );
}

#[test]
fn cli_params_adds_the_three_answers_and_keeps_every_line() {
    for rel in [
        "data/configs/qwen3-30b-a3b.json",
        "data/configs/deepseek-v3.json",
    ] {
        let counts = report(rel);
        let a = architecture_of(rel);
        // Text: the old table line for line, then the new block.
        let out = anatomy(&["params", rel]);
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let old = params::text_report(&counts);
        let block = text
            .strip_prefix(old.as_str())
            .expect("old lines first, unchanged");
        assert_eq!(
            block,
            format!(
                "three questions (S1 三者合观)\n  position encoding {}\n  context extension {}\n  dense or MoE      {}\n",
                a.answers[0], a.answers[1], a.answers[2]
            )
        );
        // JSON: every old key with its old value, plus "architecture".
        let out = anatomy(&["params", rel, "--json"]);
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let old = serde_json::to_value(&counts).unwrap();
        for (key, value) in old.as_object().unwrap() {
            assert_eq!(&v[key], value, "{rel}: {key}");
        }
        assert_eq!(
            v.as_object().unwrap().len(),
            old.as_object().unwrap().len() + 1
        );
        assert_eq!(v["architecture"], serde_json::to_value(&a).unwrap());
    }
}

/// The engine's config reader and `anatomy params` agree on the KV heads of every shipped
/// config, as published and with `num_key_value_heads` removed (each family's default):
/// a Qwen3-MoE config without the key has 4 KV heads, so 48 layers × 2 × 4 × 128 × 2 bytes
/// = 98,304 bytes of bf16 KV cache per token.
#[test]
fn engine_and_params_agree_on_defaulted_kv_heads() {
    use llm_anatomy::qwen3::Qwen3Config;
    for (name, text) in llm_anatomy::params::BUNDLED {
        let published: serde_json::Value = serde_json::from_str(text).unwrap();
        let mut removed = published.clone();
        removed
            .as_object_mut()
            .unwrap()
            .remove("num_key_value_heads");
        for v in [&published, &removed] {
            let params = llm_anatomy::params::ModelConfig::from_json(v, name).unwrap();
            if let Ok(engine) = Qwen3Config::from_json(v, name) {
                assert_eq!(
                    params.num_key_value_heads as usize, engine.num_key_value_heads,
                    "{name}"
                );
            }
        }
    }
    let mut a3b: serde_json::Value =
        serde_json::from_str(include_str!("../../data/configs/qwen3-30b-a3b.json")).unwrap();
    a3b.as_object_mut().unwrap().remove("num_key_value_heads");
    let c = llm_anatomy::params::ModelConfig::from_json(&a3b, "a3b").unwrap();
    assert_eq!(c.num_key_value_heads, 4);
    assert_eq!(
        llm_anatomy::params::count(&c).kv_cache_bytes_per_token_bf16,
        98_304
    );
}
