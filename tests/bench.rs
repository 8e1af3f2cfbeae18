//! Chapter 10: `anatomy bench` on the bundled tiny checkpoint with tiny lengths. Timings
//! vary from machine to machine, so these pin structure and sanity (positive rates,
//! fractions of the ceilings in (0, 1.5], the work per token from the config's shapes),
//! not speeds.

use llm_anatomy::bench::{self, BenchOptions};
use llm_anatomy::qwen3::Model;
use std::path::Path;
use std::process::Command;

const TINY: &str = "data/tiny-qwen3-moe";

fn opts() -> BenchOptions {
    BenchOptions {
        prompt_len: 8,
        gen_tokens: 3,
        threads: 2,
        stream_bytes: 48 << 20,
        cover_llc: false,
        reps: 2,
    }
}

#[test]
fn bench_tiny_reports_sane_rates_and_fractions() {
    let r = bench::run(Path::new(TINY), &opts()).unwrap();
    assert_eq!((r.prompt_len, r.gen_tokens, r.threads), (8, 3, 2));
    assert_eq!(r.weights_dtype, "bf16");
    for v in [
        r.prefill_tok_s,
        r.decode_tok_s,
        r.mem_bandwidth_gb_s,
        r.machine.mem_read_1t_gb_s,
        r.machine.mem_triad_gb_s,
        r.machine.fma_gflop_s,
        r.machine.fma_gflop_s_per_core,
        r.decode_ceiling_tok_s,
        r.prefill_ceiling_tok_s,
    ] {
        assert!(v.is_finite() && v > 0.0, "{v}");
    }
    for f in [r.decode_roofline_fraction, r.prefill_roofline_fraction] {
        assert!(f > 0.0 && f <= 1.5, "fraction of a ceiling {f}");
    }
    assert_eq!(
        r.decode_ceiling_tok_s,
        r.mem_bandwidth_gb_s * 1e9 / r.work.decode_bytes_per_token
    );
    assert!(r.peak_rss_bytes > 0);
    // The ceiling is the best of every pattern, and every pattern is kept.
    let m = &r.machine;
    assert_eq!(m.read_patterns.len(), 7, "{:?}", m.read_patterns);
    let best = m.read_patterns.iter().map(|p| p.gb_s).fold(0.0, f64::max);
    assert_eq!(m.mem_read_gb_s, best);
    assert!(m.read_patterns.iter().any(|p| p.name == m.mem_read_pattern));
    assert!(
        m.read_patterns
            .iter()
            .all(|p| p.gb_s.is_finite() && p.gb_s > 0.0)
    );
    assert_eq!(
        m.int8_gop_s.is_some(),
        m.int8_kernel != bench::probes::NOT_SUPPORTED
    );
    assert_eq!(
        m.bf16_gflop_s.is_some(),
        m.bf16_kernel != bench::probes::NOT_SUPPORTED
    );
    // The tiny model's decode step is far below the cache-resident size: never judged.
    assert!(bench::check_ceiling(&r).is_ok());
}

/// Bytes and FLOPs per token recomputed here from config.json's numbers.
#[test]
fn work_per_token_follows_the_config() {
    let dir = Path::new(TINY);
    let cfg: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("config.json")).unwrap()).unwrap();
    let g = |k: &str| cfg[k].as_u64().unwrap() as f64;
    let (h, d, layers) = (g("hidden_size"), g("head_dim"), g("num_hidden_layers"));
    let (qh, kvh) = (g("num_attention_heads"), g("num_key_value_heads"));
    let (e, k, i, vocab) = (
        g("num_local_experts"),
        g("num_experts_per_tok"),
        g("moe_intermediate_size"),
        g("vocab_size"),
    );
    let attn = 2.0 * h * qh * d + 2.0 * h * kvh * d;
    let active = layers * (attn + e * h + k * 3.0 * h * i);
    let bf16 = 2.0;
    let norms = layers * (2.0 * h + 2.0 * d) + h;
    let expect_bytes = bf16 * (active + norms + vocab * h + h);

    let (config, ckpt) = llm_anatomy::qwen3::open(dir).unwrap();
    let model = Model::new(config, &ckpt).unwrap();
    let n = 8.0;
    let w = bench::work(&model, 8);
    assert_eq!(w.active_params_per_token, active);
    assert_eq!(w.decode_bytes_per_token, expect_bytes);
    let attn_flops = 2.0 * layers * qh * d * 2.0 * (n * (n + 1.0) / 2.0);
    let expect_flops = (2.0 * active * n + 2.0 * vocab * h + attn_flops) / n;
    assert!((w.prefill_flops_per_token - expect_flops).abs() <= 1e-9 * expect_flops);
}

/// A dense GGUF file reads every weight once per decoded token: the bytes bench counts are
/// the file's tensor bytes (each in its block format, the head included) less the embedding
/// table but one row, plus nothing else stored.
#[test]
fn decode_bytes_of_a_dense_gguf_file_are_its_blocks() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_models/qwen3/q4_k_m.gguf");
    let g = llm_anatomy::gguf::Gguf::open(&path).unwrap();
    let size = |name: &str| g.tensor(name).map_or(0, |t| t.size) as f64;
    let all: f64 = g.tensors().iter().map(|t| t.size as f64).sum();
    let embed = g.tensor("token_embd.weight").unwrap();
    let embed_row = embed.size as f64 / embed.dims[1] as f64;
    // Tied files read the embedding table as the head; this fixture is untied.
    assert!(size("output.weight") > 0.0);
    let expect = all - size("token_embd.weight") + embed_row;
    let (config, file) = llm_anatomy::qwen3::open(&path).unwrap();
    let model = Model::new(config, &file).unwrap();
    let w = bench::work(&model, 8);
    assert!(
        (w.decode_bytes_per_token - expect).abs() <= 1e-9 * expect,
        "bench counts {} bytes per token, the file's blocks are {expect}",
        w.decode_bytes_per_token
    );
}

#[test]
fn cli_bench_json() {
    let out = Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args([
            "bench",
            TINY,
            "--prompt-len",
            "4",
            "--gen",
            "2",
            "--threads",
            "1",
            "--probe-mb",
            "48",
            "--json",
        ])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    for key in [
        "prefill_tok_s",
        "decode_tok_s",
        "mem_bandwidth_gb_s",
        "decode_roofline_fraction",
        "prefill_roofline_fraction",
        "peak_rss_bytes",
    ] {
        assert!(v[key].as_f64().unwrap() > 0.0, "{key}");
    }
    assert_eq!(v["gen"], 2);
    let patterns = v["machine"]["read_patterns"].as_array().unwrap();
    assert!(patterns.iter().all(|p| p["gb_s"].as_f64().unwrap() > 0.0));
    assert!(v["machine"]["int8_kernel"].is_string() && v["machine"]["bf16_kernel"].is_string());
}

#[test]
fn cli_bench_bad_input_exits_2() {
    let out = Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(["bench", TINY, "--gen", "0"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let out = Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(["bench", "/nonexistent-model-dir"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    // Probe buffers out of bounds are refused before anything is allocated.
    for mb in ["0", "65537", "18446744073709551615"] {
        let out = Command::new(env!("CARGO_BIN_EXE_anatomy"))
            .args(["bench", TINY, "--probe-mb", mb])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(2), "--probe-mb {mb}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("--probe-mb"));
    }
}
