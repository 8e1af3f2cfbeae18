//! Chapter 12's training-speed benchmark: our training step (`TrainState::train_step`:
//! loss and gradients, clipping, Muon + AdamW, QK-clip) timed on batches of random token
//! ids, as `scripts/bench_train_torch.py` times PyTorch's.
//!
//! Run: `cargo run --release --example bench_train -- [CONFIG.json] [--batch-size 4]
//!       [--seq-len 128] [--steps 5] [--warmup 2] [--threads 2]`
//!
//! Prints one JSON object: the median step time over `--steps` steps after `--warmup`,
//! tokens/s (batch × seq_len per step, as the torch script counts them), the step's model
//! FLOPs and GFLOP/s, and the f32 FMA ceiling of `--threads` threads
//! (`bench::probes::fma_peak`) with the fraction reached.
//!
//! The FLOPs are counted from the config, the same way for both programs: forward
//! `2·(weights a token passes through, LM head included)` per token
//! (`params::count(..).flops_per_token`, i.e. 2·m·n·k for every matmul) plus attention's
//! `QKᵀ` and `PV` over the causal triangle (`attention_flops_per_context_token` ×
//! `T(T+1)/2` per sequence); backward twice the forward; a step is 3× the forward.
//! (Our LM head recomputes its logits in the backward: that work is not counted.)

use llm_anatomy::params::{self, config::ModelConfig};
use llm_anatomy::qwen3::config::Qwen3Config;
use llm_anatomy::train::{params::Params, trainer::TrainOptions, trainer::TrainState};
use std::path::PathBuf;
use std::time::Instant;

struct Args {
    config: PathBuf,
    batch_size: usize,
    seq_len: usize,
    steps: usize,
    warmup: usize,
    threads: usize,
}

fn parse() -> anyhow::Result<Args> {
    let mut a = Args {
        config: PathBuf::from("data/train/qwen3-moe-anatomy.json"),
        batch_size: 4,
        seq_len: 128,
        steps: 5,
        warmup: 2,
        threads: 2,
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = |name: &str| -> anyhow::Result<usize> {
            let v = it
                .next()
                .ok_or_else(|| anyhow::anyhow!("{name} needs a value"))?;
            v.parse()
                .map_err(|_| anyhow::anyhow!("{name}: not a whole number: {v:?}"))
        };
        match flag.as_str() {
            "--batch-size" => a.batch_size = value("--batch-size")?,
            "--seq-len" => a.seq_len = value("--seq-len")?,
            "--steps" => a.steps = value("--steps")?,
            "--warmup" => a.warmup = value("--warmup")?,
            "--threads" => a.threads = value("--threads")?,
            f if f.starts_with("--") => anyhow::bail!("unknown flag {f}"),
            path => a.config = PathBuf::from(path),
        }
    }
    for (name, v, max) in [
        ("--batch-size", a.batch_size, 1 << 10),
        ("--seq-len", a.seq_len, 1 << 14),
        ("--steps", a.steps, 1 << 16),
        ("--threads", a.threads, 1 << 10),
    ] {
        anyhow::ensure!(
            (1..=max).contains(&v),
            "{name} must be in 1..={max}, got {v}"
        );
    }
    Ok(a)
}

/// The step's model FLOPs (module doc): 3 × (tokens × forward per token + attention).
fn step_flops(config: &ModelConfig, batch_size: usize, seq_len: usize) -> f64 {
    let report = params::count(config);
    let t = seq_len as f64;
    let per_seq = t * report.flops_per_token as f64
        + params::attention_flops_per_context_token(config) as f64 * t * (t + 1.0) / 2.0;
    3.0 * batch_size as f64 * per_seq
}

/// Random token ids in `0..vocab`, a fresh batch per step (splitmix64, seeded).
fn random_batch(state: &mut u64, vocab: usize, batch_size: usize, seq_len: usize) -> Vec<Vec<u32>> {
    let mut next = || {
        *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        ((z ^ (z >> 31)) % vocab as u64) as u32
    };
    (0..batch_size)
        .map(|_| (0..seq_len).map(|_| next()).collect())
        .collect()
}

fn main() -> anyhow::Result<()> {
    let a = parse()?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(a.threads)
        .build()?;
    let config = Qwen3Config::from_file(&a.config)?;
    let model_config = ModelConfig::from_file(&a.config)?;
    let options = TrainOptions {
        steps: (a.warmup + a.steps) as u64,
        batch_size: a.batch_size,
        seq_len: a.seq_len,
        warmup_steps: 1,
        ..TrainOptions::default()
    };
    let mut state = TrainState::new(Params::init(&config, 0)?, options)?;
    let mut grads = state.params.zeros_like();
    let mut rng = 1u64;
    let mut times = Vec::new();
    let mut first_loss = None;
    pool.install(|| -> anyhow::Result<()> {
        for step in 0..a.warmup + a.steps {
            let batch = random_batch(&mut rng, config.vocab_size, a.batch_size, a.seq_len);
            let t0 = Instant::now();
            let log = state.train_step(&batch, &mut grads)?;
            let dt = t0.elapsed().as_secs_f64();
            first_loss.get_or_insert(log.loss);
            if step >= a.warmup {
                times.push(dt);
            }
        }
        Ok(())
    })?;
    times.sort_by(f64::total_cmp);
    let median = times[times.len() / 2];
    let flops = step_flops(&model_config, a.batch_size, a.seq_len);
    let peak = llm_anatomy::bench::probes::fma_peak(a.threads);
    let gflops = flops / median / 1e9;
    let out = serde_json::json!({
        "program": "llm-anatomy",
        "config": a.config,
        "threads": a.threads,
        "batch_size": a.batch_size,
        "seq_len": a.seq_len,
        "steps": a.steps,
        "num_parameters": state.params.num_parameters(),
        "median_step_s": median,
        "min_step_s": times[0],
        "max_step_s": times[times.len() - 1],
        "tokens_per_s": (a.batch_size * a.seq_len) as f64 / median,
        "step_gflop": flops / 1e9,
        "gflop_per_s": gflops,
        "fma_kernel": llm_anatomy::bench::probes::fma_kernel(),
        "fma_peak_gflop_per_s": peak,
        "fraction_of_peak": gflops / peak,
        "first_loss": first_loss,
    });
    println!("{out}");
    Ok(())
}
