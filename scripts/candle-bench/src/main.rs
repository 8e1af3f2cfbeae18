//! candle (crates.io, candle-transformers' `qwen3_moe`) on a checkpoint: prefill and greedy
//! decode rates, a peer of `anatomy bench` (chapter 10). Batch 1; the thread count is
//! candle's rayon pool, set with RAYON_NUM_THREADS by scripts/bench-peers.sh.
//!
//! Run: candle-bench MODEL_DIR --dtype bf16|f16|f32 [--prefill 128,512] [--decode-prompt 128]
//!      [--gen 32] [--reps 3]
//! Prints one JSON object in the shape of scripts/bench_torch.py's.

use candle_core::{DType, Device, IndexOp, Tensor};
use candle_nn::VarBuilder;
use candle_transformers::models::qwen3_moe::{Config, ModelForCausalLM};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::time::Instant;

type Res<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    if let Err(e) = run() {
        eprintln!("candle-bench: {e}");
        std::process::exit(2);
    }
}

struct Args {
    dir: PathBuf,
    dtype: DType,
    prefill: Vec<usize>,
    decode_prompt: usize,
    gen_tokens: usize,
    reps: usize,
}

fn parse_args() -> Res<Args> {
    let mut it = std::env::args().skip(1);
    let mut a = Args {
        dir: PathBuf::new(),
        dtype: DType::BF16,
        prefill: vec![128, 512],
        decode_prompt: 128,
        gen_tokens: 32,
        reps: 3,
    };
    while let Some(s) = it.next() {
        let mut val = || it.next().ok_or(format!("{s} needs a value"));
        match s.as_str() {
            "--dtype" => {
                a.dtype = match val()?.as_str() {
                    "bf16" => DType::BF16,
                    "f16" => DType::F16,
                    "f32" => DType::F32,
                    o => return Err(format!("--dtype {o}: expected bf16, f16 or f32").into()),
                }
            }
            "--prefill" => {
                a.prefill = val()?
                    .split(',')
                    .map(|n| n.parse())
                    .collect::<Result<_, _>>()?
            }
            "--decode-prompt" => a.decode_prompt = val()?.parse()?,
            "--gen" => a.gen_tokens = val()?.parse()?,
            "--reps" => a.reps = val()?.parse()?,
            _ if a.dir.as_os_str().is_empty() => a.dir = PathBuf::from(s),
            _ => return Err(format!("unexpected argument {s}").into()),
        }
    }
    if a.dir.as_os_str().is_empty() {
        return Err("usage: candle-bench MODEL_DIR --dtype bf16|f16|f32".into());
    }
    Ok(a)
}

/// candle's `Config` wants fields that transformers 5.x writes elsewhere or not at all
/// (rope_theta moved into rope_parameters, num_experts became num_local_experts, the
/// sliding-window fields are absent when unused): fill them in.
fn load_config(dir: &Path) -> Res<Config> {
    let path = dir.join("config.json");
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let o = v.as_object_mut().ok_or("config.json: not an object")?;
    if !o.contains_key("rope_theta") {
        let theta = o
            .get("rope_parameters")
            .and_then(|p| p.get("rope_theta"))
            .cloned()
            .ok_or("config.json: no rope_theta or rope_parameters.rope_theta")?;
        o.insert("rope_theta".into(), theta);
    }
    if !o.contains_key("num_experts") {
        // transformers 5.x writes the expert count as num_local_experts.
        let e = o.get("num_local_experts").cloned().ok_or("config.json: no num_experts")?;
        o.insert("num_experts".into(), e);
    }
    o.entry("sliding_window").or_insert(Value::Null);
    o.entry("use_sliding_window").or_insert(json!(false));
    let layers = o.get("num_hidden_layers").cloned().unwrap_or(json!(0));
    o.entry("max_window_layers").or_insert(layers);
    o.entry("attention_bias").or_insert(json!(false));
    o.entry("hidden_act").or_insert(json!("silu"));
    Ok(serde_json::from_value(v)?)
}

/// Deterministic prompt ids (a 64-bit LCG): every run times the same tokens.
fn prompt(n: usize, vocab: usize, seed: &mut u64) -> Vec<u32> {
    (0..n)
        .map(|_| {
            *seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((*seed >> 33) % vocab as u64) as u32
        })
        .collect()
}

fn peak_rss_bytes() -> u64 {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("VmHWM:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run() -> Res<()> {
    let a = parse_args()?;
    let cfg = load_config(&a.dir)?;
    let mut files: Vec<PathBuf> = std::fs::read_dir(&a.dir)?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "safetensors"))
        .collect();
    files.sort();
    let dev = Device::Cpu;
    // SAFETY: the checkpoint files are not modified while the benchmark runs (candle's
    // requirement for memory-mapping them).
    let vb = unsafe { VarBuilder::from_mmaped_safetensors(&files, a.dtype, &dev)? };
    let mut model = ModelForCausalLM::new(&cfg, vb)?;
    let vocab = cfg.vocab_size;
    let mut seed = 0u64;
    let forward = |model: &mut ModelForCausalLM, ids: &[u32], offset: usize| -> Res<u32> {
        let input = Tensor::new(ids, &dev)?.unsqueeze(0)?;
        let logits = model.forward(&input, offset)?; // (1, 1, vocab): the last position
        Ok(logits.i((0, 0))?.argmax(0)?.to_scalar::<u32>()?)
    };
    // Warm-up: a short prompt touches every layer.
    forward(&mut model, &prompt(8, vocab, &mut seed), 0)?;
    model.clear_kv_cache();
    let mut prefill = serde_json::Map::new();
    let mut prefill_runs = serde_json::Map::new();
    for &n in &a.prefill {
        let mut runs = Vec::new();
        for _ in 0..a.reps {
            let ids = prompt(n, vocab, &mut seed);
            model.clear_kv_cache();
            let t = Instant::now();
            forward(&mut model, &ids, 0)?;
            runs.push(n as f64 / t.elapsed().as_secs_f64());
        }
        prefill_runs.insert(n.to_string(), json!(runs));
        prefill.insert(n.to_string(), json!(median(runs)));
    }
    let mut decode_runs = Vec::new();
    for _ in 0..a.reps {
        model.clear_kv_cache();
        let ids = prompt(a.decode_prompt, vocab, &mut seed);
        let mut next = forward(&mut model, &ids, 0)?;
        let t = Instant::now();
        for step in 0..a.gen_tokens {
            next = forward(&mut model, &[next], a.decode_prompt + step)?;
        }
        decode_runs.push(a.gen_tokens as f64 / t.elapsed().as_secs_f64());
    }
    let out = json!({
        "peer": "candle",
        "candle_transformers": "0.11.1",
        "dtype": format!("{:?}", a.dtype).to_lowercase(),
        "threads": std::env::var("RAYON_NUM_THREADS").ok(),
        "reps": a.reps,
        "prefill_tok_s": prefill,
        "prefill_runs": prefill_runs,
        "decode_runs": decode_runs.clone(),
        "decode_tok_s": median(decode_runs),
        "peak_rss_bytes": peak_rss_bytes(),
    });
    println!("{out}");
    Ok(())
}
