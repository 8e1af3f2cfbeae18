//! Chapter 10 — a GGUF file with a real model's shape and random weights, for benchmarking
//! the whole Qwen3-30B-A3B (48 layers, 128 experts, vocabulary 151,936) on a 24 GiB machine
//! without downloading it, and without a 57 GB bf16 intermediate.
//!
//! ```text
//! cargo run --release --example gen_random_gguf -- \
//!     --config data/configs/qwen3-30b-a3b.json --mix q4_k_m --out /work/big/qwen3-30b-a3b-q4_k_m.gguf
//! ```
//!
//! Every piece is the crate's: the tensor list comes from the config and the Hugging Face ↔
//! GGUF name table (`qwen3::gguf_names`), each tensor's type from llama.cpp's type rule
//! (`quant::mix::choose_type`), the metadata from `qwen3::gguf_config` and the Qwen
//! vocabulary (`tokenizer::gguf_vocab`, from data/qwen.tiktoken) so llama.cpp loads the
//! file, and the bytes go through the streaming `gguf::GgufWriter`: one tensor chunk (8 MiB)
//! is held at a time, never a tensor.
//!
//! The weights are random but valid blocks. Quantising 30 B random floats with llama.cpp's
//! k-quant search would take hours on two cores, so instead a pool of blocks is quantised
//! once per (type, kind) from seeded N(0, σ²) draws (`llm_anatomy::rand`; norms draw
//! N(1, σ²)), and every block of a tensor is a pool block picked by a fast seeded generator:
//! the file's blocks are bit-for-bit blocks llama.cpp's quantiser could have written, their
//! dequantised weights have the pool's spread (printed at the start), and writing runs at
//! disk speed. Weights that repeat across blocks change nothing a benchmark measures; the
//! model's outputs are of course meaningless.
//!
//! An existing OUT is refused unless `--force` (which deletes it first, so two copies of an
//! 18 GB file never exist at once). Prints a summary: tensors and bytes per type, the data
//! size against `quant::mix::estimate_bytes`, the file size, the time and the peak RSS.

use anyhow::{Context, Result, bail};
use clap::Parser;
use llm_anatomy::gguf::GgufWriter;
use llm_anatomy::quant::mix::{self, FileType, TensorRole};
use llm_anatomy::quant::{self, GgmlType};
use llm_anatomy::qwen3::{Qwen3Config, gguf_names, to_gguf};
use llm_anatomy::tokenizer::Tokenizer;
use llm_anatomy::tokenizer::gguf_vocab::gguf_tokenizer_metadata_for;
use ndarray_rand::rand::{SeedableRng, rngs::StdRng};
use rand::Rng;
use rand::rngs::SmallRng;
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Instant;

#[derive(Parser)]
#[command(about = "Write a GGUF with a config's exact shape and random (valid) weights")]
struct Args {
    /// A Hugging Face config.json (Qwen3-MoE, Qwen3 or Qwen2).
    #[arg(long)]
    config: PathBuf,
    /// llama.cpp file type: q4_k_m, q8_0, q6_k, ... (the per-tensor mix is llama.cpp's).
    #[arg(long, default_value = "q4_k_m")]
    mix: String,
    #[arg(long)]
    out: PathBuf,
    /// Vocabulary written into the tokenizer metadata.
    #[arg(long, default_value = "data/qwen.tiktoken")]
    vocab: PathBuf,
    /// Standard deviation of the weights (norm weights: 1 ± this).
    #[arg(long, default_value_t = 0.02)]
    sigma: f32,
    #[arg(long, default_value_t = 0)]
    seed: u64,
    /// Keep only the first N layers (a small file of the same widths, for a quick check).
    #[arg(long)]
    layers: Option<usize>,
    /// Delete OUT first if it exists.
    #[arg(long)]
    force: bool,
}

/// Blocks in each pool: enough that neighbouring blocks rarely repeat.
const POOL_UNITS: usize = 4096;
/// Bytes handed to the writer at a time.
const CHUNK_BYTES: usize = 8 << 20;

/// What a tensor's values look like.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Kind {
    /// N(0, σ²): projections, embeddings, router, biases.
    Weight,
    /// N(1, σ²): RMSNorm weights.
    Norm,
}

/// Pre-quantised units (one block, or 64 weights of a float type) to copy from.
struct Pool {
    unit_bytes: usize,
    unit_weights: usize,
    bytes: Vec<u8>,
}

fn make_pool(ty: GgmlType, kind: Kind, unit_weights: usize, sigma: f32, seed: u64) -> Pool {
    let mut rng = StdRng::seed_from_u64(seed);
    let n = POOL_UNITS * unit_weights;
    let draws = llm_anatomy::rand::normal_matrix(1, n, &mut rng);
    let centre = if kind == Kind::Norm { 1.0 } else { 0.0 };
    let x: Vec<f32> = draws.iter().map(|v| centre + sigma * v).collect();
    let mut bytes = Vec::new();
    quant::quantize(ty, &x, &mut bytes);
    Pool {
        unit_bytes: bytes.len() / POOL_UNITS,
        unit_weights,
        bytes,
    }
}

/// Mean and standard deviation of a pool's dequantised weights.
fn pool_spread(ty: GgmlType, pool: &Pool) -> (f64, f64) {
    let mut w = vec![0f32; POOL_UNITS * pool.unit_weights];
    quant::dequantize(ty, &pool.bytes, &mut w);
    let n = w.len() as f64;
    let mean = w.iter().map(|&v| v as f64).sum::<f64>() / n;
    let var = w.iter().map(|&v| (v as f64 - mean).powi(2)).sum::<f64>() / n;
    (mean, var.sqrt())
}

struct Planned {
    name: String,
    /// Row-major, outermost first.
    shape: Vec<usize>,
    ty: GgmlType,
    kind: Kind,
}

/// The Hugging Face tensors a config calls for (experts as expert 0 of each stack, which
/// names the stacked GGUF tensor), with row-major shapes.
fn hf_tensors(cfg: &Qwen3Config, layers: usize) -> Vec<(String, Vec<usize>, bool)> {
    let (h, q, kv, d) = (cfg.hidden_size, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
    let mut t = vec![
        (
            "model.embed_tokens.weight".to_string(),
            vec![cfg.vocab_size, h],
            false,
        ),
        ("model.norm.weight".to_string(), vec![h], false),
    ];
    if !cfg.tie_word_embeddings {
        t.push(("lm_head.weight".into(), vec![cfg.vocab_size, h], false));
    }
    for l in 0..layers {
        let p = format!("model.layers.{l}");
        let mut add = |n: &str, s: Vec<usize>, stacked: bool| {
            t.push((format!("{p}.{n}"), s, stacked));
        };
        add("input_layernorm.weight", vec![h], false);
        add("post_attention_layernorm.weight", vec![h], false);
        add("self_attn.q_proj.weight", vec![q, h], false);
        add("self_attn.k_proj.weight", vec![kv, h], false);
        add("self_attn.v_proj.weight", vec![kv, h], false);
        add("self_attn.o_proj.weight", vec![h, q], false);
        if cfg.attention_bias {
            add("self_attn.q_proj.bias", vec![q], false);
            add("self_attn.k_proj.bias", vec![kv], false);
            add("self_attn.v_proj.bias", vec![kv], false);
        }
        if cfg.qk_norm {
            add("self_attn.q_norm.weight", vec![d], false);
            add("self_attn.k_norm.weight", vec![d], false);
        }
        if cfg.is_moe_layer(l) {
            let (e, i) = (cfg.num_experts, cfg.moe_intermediate_size);
            add("mlp.gate.weight", vec![e, h], false);
            add("mlp.experts.0.gate_proj.weight", vec![e, i, h], true);
            add("mlp.experts.0.up_proj.weight", vec![e, i, h], true);
            add("mlp.experts.0.down_proj.weight", vec![e, h, i], true);
        } else {
            let i = cfg.intermediate_size;
            add("mlp.gate_proj.weight", vec![i, h], false);
            add("mlp.up_proj.weight", vec![i, h], false);
            add("mlp.down_proj.weight", vec![h, i], false);
        }
    }
    t
}

fn layer_of(name: &str) -> i64 {
    name.strip_prefix("blk.")
        .and_then(|r| r.split('.').next())
        .and_then(|l| l.parse().ok())
        .unwrap_or(-1)
}

fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

fn main() -> Result<()> {
    let args = Args::parse();
    let start = Instant::now();
    let mut cfg = Qwen3Config::from_file(&args.config)?;
    let Some(ftype) = FileType::from_name(&args.mix) else {
        bail!(
            "--mix {}: not a llama.cpp file type (q4_k_m, q8_0, ...)",
            args.mix
        );
    };
    if !(args.sigma.is_finite() && args.sigma > 0.0) {
        bail!("--sigma {}: must be a positive number", args.sigma);
    }
    let layers = args.layers.unwrap_or(cfg.num_hidden_layers);
    if layers == 0 || layers > cfg.num_hidden_layers {
        bail!("--layers {layers}: must be 1 ..= {}", cfg.num_hidden_layers);
    }
    cfg.num_hidden_layers = layers;

    let ctx = to_gguf::mix_context(&cfg);
    let mut plan = Vec::new();
    for (hf, shape, stacked) in hf_tensors(&cfg, layers) {
        let g = gguf_names::to_gguf(&hf).with_context(|| format!("no GGUF name for `{hf}`"))?;
        if stacked != g.expert.is_some() {
            bail!("`{hf}`: the name table disagrees on whether it stacks experts");
        }
        let role = TensorRole::from_gguf_name(&g.name);
        let ty = mix::choose_type(ftype, &role, &shape, &ctx);
        let kind = if role == TensorRole::Norm {
            Kind::Norm
        } else {
            Kind::Weight
        };
        plan.push(Planned {
            name: g.name,
            shape,
            ty,
            kind,
        });
    }
    plan.sort_by_key(|t| (layer_of(&t.name), t.name.clone()));

    let roles: Vec<(TensorRole, Vec<usize>)> = plan
        .iter()
        .map(|t| (TensorRole::from_gguf_name(&t.name), t.shape.clone()))
        .collect();
    let estimate = mix::estimate_bytes(ftype, &roles, &ctx).context("tensor sizes overflow")?;

    let tok = Tokenizer::from_file(&args.vocab)?;
    let tok_meta = gguf_tokenizer_metadata_for(&tok, cfg.vocab_size, None)?;
    let model_name = format!("random {} ({layers} layers)", args.config.display());
    let meta = to_gguf::metadata(&cfg, ftype, &model_name, Some(tok_meta));
    let infos: Vec<(String, Vec<u64>, GgmlType)> = plan
        .iter()
        .map(|t| {
            let dims = t.shape.iter().rev().map(|&d| d as u64).collect();
            (t.name.clone(), dims, t.ty)
        })
        .collect();

    // One pool per (type, kind); a unit is one block, or 64 weights of a float type when
    // every tensor of that type holds a whole number of them.
    let mut pools: BTreeMap<(u32, Kind), Pool> = BTreeMap::new();
    for t in &plan {
        let key = (t.ty.id(), t.kind);
        if pools.contains_key(&key) {
            continue;
        }
        let float = matches!(t.ty, GgmlType::F32 | GgmlType::F16 | GgmlType::Bf16);
        let unit = if !float {
            t.ty.block_size()
        } else if plan
            .iter()
            .filter(|u| u.ty == t.ty && u.kind == t.kind)
            .all(|u| u.shape.iter().product::<usize>().is_multiple_of(64))
        {
            64
        } else {
            1
        };
        let seed = args.seed ^ (u64::from(t.ty.id()) << 8) ^ (t.kind as u64);
        let pool = make_pool(t.ty, t.kind, unit, args.sigma, seed);
        let (mean, sd) = pool_spread(t.ty, &pool);
        eprintln!(
            "pool {:<5} {:?}: {} units of {} weights, dequantised mean {mean:+.5}, sd {sd:.5}",
            t.ty.name(),
            t.kind,
            POOL_UNITS,
            unit
        );
        pools.insert(key, pool);
    }

    if std::fs::symlink_metadata(&args.out).is_ok() {
        if !args.force {
            bail!("{} exists (pass --force to replace it)", args.out.display());
        }
        std::fs::remove_file(&args.out)
            .with_context(|| format!("removing {}", args.out.display()))?;
    }

    let total_bytes: u64 = plan
        .iter()
        .map(|t| mix::tensor_bytes(t.ty, &t.shape).unwrap_or(0))
        .sum();
    let mut failure: Option<llm_anatomy::Error> = None;
    let mut rng = SmallRng::seed_from_u64(args.seed);
    let written = llm_anatomy::output::write_output(&args.out, |w| {
        let result = (|| -> llm_anatomy::Result<()> {
            let mut writer = GgufWriter::new(w, meta, infos, to_gguf::ALIGNMENT)?;
            let mut done = 0u64;
            let mut last_layer = -2;
            let mut chunk = Vec::with_capacity(CHUNK_BYTES);
            for t in &plan {
                if layer_of(&t.name) != last_layer {
                    last_layer = layer_of(&t.name);
                    eprintln!(
                        "{:7.1} s  {:6.2} / {:.2} GB  {}",
                        start.elapsed().as_secs_f64(),
                        done as f64 / 1e9,
                        total_bytes as f64 / 1e9,
                        t.name
                    );
                }
                let pool = &pools[&(t.ty.id(), t.kind)];
                let size = mix::tensor_bytes(t.ty, &t.shape).unwrap_or(0);
                let units = size / pool.unit_bytes as u64;
                let per_chunk = (CHUNK_BYTES / pool.unit_bytes).max(1) as u64;
                writer.write_tensor_in_pieces(&t.name, |sink| {
                    let mut left = units;
                    while left > 0 {
                        let n = left.min(per_chunk);
                        chunk.clear();
                        for _ in 0..n {
                            let k = rng.random_range(0..POOL_UNITS);
                            let at = k * pool.unit_bytes;
                            chunk.extend_from_slice(&pool.bytes[at..at + pool.unit_bytes]);
                        }
                        sink(&chunk)?;
                        left -= n;
                    }
                    Ok(())
                })?;
                done += size;
            }
            writer
                .finish()?
                .flush()
                .map_err(|source| llm_anatomy::Error::Write {
                    path: args.out.clone(),
                    source,
                })?;
            Ok(())
        })();
        result.map_err(|e| {
            let message = e.to_string();
            failure = Some(e);
            std::io::Error::other(message)
        })
    });
    if let Some(e) = failure {
        return Err(e.into());
    }
    written?;

    let mut by_type: BTreeMap<&str, (usize, u64)> = BTreeMap::new();
    for t in &plan {
        let e = by_type.entry(t.ty.name()).or_default();
        e.0 += 1;
        e.1 += mix::tensor_bytes(t.ty, &t.shape).unwrap_or(0);
    }
    let file_size = std::fs::metadata(&args.out)?.len();
    let weights: u64 = plan
        .iter()
        .map(|t| t.shape.iter().product::<usize>() as u64)
        .sum();
    println!(
        "wrote {} ({}, {} layers, {} tensors, {weights} weights)",
        args.out.display(),
        ftype.name(),
        layers,
        plan.len()
    );
    for (ty, (n, bytes)) in by_type {
        println!("  {ty:<5} {n:>5} tensors {:>12.3} GB", bytes as f64 / 1e9);
    }
    println!(
        "tensor data {total_bytes} bytes; quant::mix::estimate_bytes {estimate} bytes ({}); file {file_size} bytes ({:+} header and padding)",
        if total_bytes == estimate {
            "equal"
        } else {
            "DIFFERENT"
        },
        file_size as i64 - total_bytes as i64
    );
    println!(
        "{:.1} s, {:.2} bits per weight, peak RSS {:.1} MB",
        start.elapsed().as_secs_f64(),
        8.0 * total_bytes as f64 / weights.max(1) as f64,
        peak_rss_bytes().unwrap_or(0) as f64 / 1e6
    );
    Ok(())
}
