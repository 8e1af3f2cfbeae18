//! How fast the forward pass runs, and how fast this machine could run it at best.
//!
//! Chapter 10 (performance; no section of the source texts — it measures chapter 9's engine).
//! Decode is memory-bound: each new token reads every weight it touches once (attention,
//! router, the top-k experts of each MoE layer, norms, LM head), so its ceiling is the
//! machine's read bandwidth divided by those bytes. Prefill is compute-bound: 2 FLOPs per
//! multiply-add for every active parameter of every token, plus attention, so its ceiling is
//! the f32 FMA peak divided by those FLOPs. [`run`] measures both limits (a STREAM-style
//! read and triad, a register-resident FMA loop) and the model's prefill and decode rates on
//! the same machine, and reports the fraction of each ceiling reached.

use crate::error::{Error, Result};
use crate::kernels::{Matrix, WeightData};
use crate::qwen3::config::Qwen3Config;
use crate::qwen3::weights::Ffn;
use crate::qwen3::{Logits, Model};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub struct BenchOptions {
    /// Prompt length for the prefill measurement (and the context decode starts from).
    pub prompt_len: usize,
    /// Tokens generated greedily after the prompt, one forward call each.
    pub gen_tokens: usize,
    /// Worker threads (rayon pool and the machine probes).
    pub threads: usize,
    /// Bytes of the buffer the bandwidth probe streams (must dwarf the caches).
    pub stream_bytes: usize,
    /// Repetitions of the prefill and of the decode run; the median is reported.
    pub reps: usize,
}

impl Default for BenchOptions {
    fn default() -> Self {
        BenchOptions {
            prompt_len: 128,
            gen_tokens: 32,
            threads: std::thread::available_parallelism().map_or(1, |n| n.get()),
            stream_bytes: 512 << 20,
            reps: 3,
        }
    }
}

/// The machine's limits.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub threads: usize,
    /// Summing a buffer far larger than the caches, all threads (GB/s, 1e9 bytes).
    pub mem_read_gb_s: f64,
    /// The same on one thread.
    pub mem_read_1t_gb_s: f64,
    /// STREAM triad `a = b + s·c`, counted as 3 arrays moved (GB/s).
    pub mem_triad_gb_s: f64,
    /// f32 fused multiply-adds from registers, 2 FLOPs each (GFLOP/s), one thread.
    pub fma_gflop_s_per_core: f64,
    /// The same on all threads.
    pub fma_gflop_s: f64,
    /// Which FMA loop ran: the widest the matmul kernels use ("avx512f", "avx2+fma" or
    /// "scalar"), so the ceiling is the one our kernels could reach.
    pub fma_kernel: &'static str,
}

/// Work per token implied by the model's shapes.
#[derive(Clone, Debug, Serialize)]
pub struct Work {
    /// Weight bytes one decode step reads, in their stored dtype.
    pub decode_bytes_per_token: f64,
    /// Active parameters per token excluding the LM head (attention, router, top-k experts).
    pub active_params_per_token: f64,
    /// Parameters of the LM head (counted once per forward call: only the last position's
    /// logits are computed when generating).
    pub lm_head_params: f64,
    /// All FLOPs of a prefill of `prompt_len` tokens (projections, attention scores and
    /// weighted values, the LM head once), per token.
    pub prefill_flops_per_token: f64,
}

/// Everything `anatomy bench --json` prints.
#[derive(Clone, Debug, Serialize)]
pub struct BenchReport {
    pub model_dir: String,
    pub weights_dtype: String,
    pub weights_bytes: u64,
    pub prompt_len: usize,
    #[serde(rename = "gen")]
    pub gen_tokens: usize,
    pub threads: usize,
    pub machine: Machine,
    pub work: Work,
    pub reps: usize,
    /// Medians of the runs below.
    pub prefill_tok_s: f64,
    pub decode_tok_s: f64,
    pub prefill_runs: Vec<f64>,
    pub decode_runs: Vec<f64>,
    pub mem_bandwidth_gb_s: f64,
    /// Read bandwidth / decode bytes per token.
    pub decode_ceiling_tok_s: f64,
    pub decode_roofline_fraction: f64,
    /// FMA peak (all threads) / prefill FLOPs per token.
    pub prefill_ceiling_tok_s: f64,
    pub prefill_roofline_fraction: f64,
    /// Peak resident set (VmHWM) of the process, bytes.
    pub peak_rss_bytes: u64,
    pub peak_rss_over_weights: f64,
}

/// Measures the machine, then prefill and greedy decode on the checkpoint in `dir`.
pub fn run(dir: &Path, opts: &BenchOptions) -> Result<BenchReport> {
    if opts.prompt_len == 0 || opts.gen_tokens == 0 || opts.threads == 0 || opts.reps == 0 {
        return Err(Error::Invalid(
            "bench: --prompt-len, --gen, --threads and --reps must be at least 1".into(),
        ));
    }
    crate::limits::check(
        "bench",
        "--threads",
        opts.threads as u128,
        crate::limits::THREADS,
    )?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| {
            Error::Invalid(format!("bench: cannot start {} threads: {e}", opts.threads))
        })?;
    pool.install(|| run_in_pool(dir, opts))
}

/// The middle value (the upper middle of an even count).
fn median(runs: &[f64]) -> f64 {
    let mut v = runs.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn run_in_pool(dir: &Path, opts: &BenchOptions) -> Result<BenchReport> {
    let (config, ckpt) = crate::qwen3::open(dir)?;
    let model = Model::new(config, &ckpt)?;
    let c = &model.config;
    let work = work(&model, opts.prompt_len);
    // The session first: a prompt past the context is refused before it is built.
    let capacity = opts.prompt_len.saturating_add(opts.gen_tokens);
    let mut session = model.session(capacity)?;

    // A fixed pseudo-random prompt (the rates do not depend on which ids).
    let mut state = 0x2545_f491_4f6c_dd1du64;
    let prompt: Vec<u32> = (0..opts.prompt_len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            (state % c.vocab_size as u64) as u32
        })
        .collect();

    // Each repetition: the session's cache emptied (its buffers kept), the prompt in one
    // prefill call, then greedy decode steps; the medians are reported (every rep's rate
    // is in the JSON too).
    let (mut prefill_runs, mut decode_runs) = (Vec::new(), Vec::new());
    for _ in 0..opts.reps {
        session.cache.clear();
        let t0 = Instant::now();
        let logits = model.forward(&mut session, &prompt, Logits::Last, None)?;
        prefill_runs.push(opts.prompt_len as f64 / t0.elapsed().as_secs_f64());
        let mut next = crate::qwen3::generate::argmax(logits) as u32;
        let t1 = Instant::now();
        for _ in 0..opts.gen_tokens {
            let logits = model.forward(&mut session, &[next], Logits::Last, None)?;
            next = crate::qwen3::generate::argmax(logits) as u32;
        }
        decode_runs.push(opts.gen_tokens as f64 / t1.elapsed().as_secs_f64());
    }
    // Read before the machine probes, whose buffers would otherwise set the high-water mark.
    let peak_rss_bytes = peak_rss_bytes().unwrap_or(0);
    let machine = measure_machine(opts.threads, opts.stream_bytes);

    let (prefill_tok_s, decode_tok_s) = (median(&prefill_runs), median(&decode_runs));
    let decode_ceiling = machine.mem_read_gb_s * 1e9 / work.decode_bytes_per_token;
    let prefill_ceiling = machine.fma_gflop_s * 1e9 / work.prefill_flops_per_token;
    let weights_bytes = ckpt.data_bytes() as u64;
    Ok(BenchReport {
        model_dir: dir.display().to_string(),
        weights_dtype: dtype_name(&model.weights.lm_head).into(),
        weights_bytes,
        prompt_len: opts.prompt_len,
        gen_tokens: opts.gen_tokens,
        threads: opts.threads,
        mem_bandwidth_gb_s: machine.mem_read_gb_s,
        machine,
        work,
        reps: opts.reps,
        prefill_tok_s,
        decode_tok_s,
        prefill_runs,
        decode_runs,
        decode_ceiling_tok_s: decode_ceiling,
        decode_roofline_fraction: decode_tok_s / decode_ceiling,
        prefill_ceiling_tok_s: prefill_ceiling,
        prefill_roofline_fraction: prefill_tok_s / prefill_ceiling,
        peak_rss_bytes,
        peak_rss_over_weights: peak_rss_bytes as f64 / weights_bytes as f64,
    })
}

/// Bytes per decode step and FLOPs per prefill token, from the loaded weights' shapes.
pub fn work(model: &Model, prompt_len: usize) -> Work {
    let c: &Qwen3Config = &model.config;
    let w = &model.weights;
    let mut bytes = 0.0f64;
    let mut params = 0.0f64;
    let mut add = |m: &Matrix, count: f64| {
        bytes += m.stored_bytes() as f64 * count;
        params += (m.rows * m.cols) as f64 * count;
    };
    // Norm weights are vectors the size of hidden / head_dim, stored like the matrices.
    // (A GGUF file keeps them f32 beside block-format matrices.)
    let elt = match w.lm_head.data {
        WeightData::Quant { .. } => 4.0,
        _ => dtype_size(&w.lm_head),
    };
    let mut norm_bytes = c.hidden_size as f64 * elt; // final norm
    for layer in &w.layers {
        let a = &layer.self_attn;
        for m in [&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj] {
            add(m, 1.0);
        }
        norm_bytes += (2 * c.hidden_size + 2 * c.head_dim) as f64 * elt;
        match &layer.mlp {
            Ffn::Dense(e) => {
                for m in [&e.gate, &e.up, &e.down] {
                    add(m, 1.0);
                }
            }
            Ffn::Moe { router, experts } => {
                add(router, 1.0);
                let k = c.num_experts_per_tok as f64;
                if let Some(e) = experts.first() {
                    for m in [&e.gate, &e.up, &e.down] {
                        add(m, k);
                    }
                }
            }
        }
    }
    let lm_head_params = (w.lm_head.rows * w.lm_head.cols) as f64;
    let lm_head_bytes = lm_head_params * elt;
    let embed_row = w.embed_tokens.cols as f64 * dtype_size(&w.embed_tokens);
    // Attention of a prefill: position t (0-based) scores t+1 keys and sums t+1 values,
    // a multiply-add per head_dim entry each, for every query head of every layer.
    let n = prompt_len as f64;
    let attn_madds = (c.num_hidden_layers * c.num_attention_heads * c.head_dim) as f64
        * 2.0
        * (n * (n + 1.0) / 2.0);
    let prefill_flops = 2.0 * (params * n + lm_head_params + attn_madds) / n;
    Work {
        decode_bytes_per_token: bytes + norm_bytes + lm_head_bytes + embed_row,
        active_params_per_token: params,
        lm_head_params,
        prefill_flops_per_token: prefill_flops,
    }
}

fn dtype_size(m: &Matrix) -> f64 {
    m.stored_bytes() as f64 / (m.rows * m.cols).max(1) as f64
}

fn dtype_name(m: &Matrix) -> &'static str {
    m.data.type_name()
}

/// Peak resident set size of this process (VmHWM in /proc/self/status), if the system has it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Measures read and triad bandwidth and the FMA peak with `threads` workers.
pub fn measure_machine(threads: usize, stream_bytes: usize) -> Machine {
    let (fma_1, kernel) = fma_peak(1);
    let (fma_all, _) = fma_peak(threads);
    let (read_all, triad) = stream(threads, stream_bytes);
    let (read_1, _) = stream(1, stream_bytes);
    Machine {
        threads,
        mem_read_gb_s: read_all,
        mem_read_1t_gb_s: read_1,
        mem_triad_gb_s: triad,
        fma_gflop_s_per_core: fma_1,
        fma_gflop_s: fma_all,
        fma_kernel: kernel,
    }
}

// ANCHOR: stream
/// (read GB/s, triad GB/s), best of a few passes, with the buffer split across `threads`
/// scoped threads so each streams its own contiguous part.
fn stream(threads: usize, bytes: usize) -> (f64, f64) {
    let n = (bytes / 4 / 3).max(1 << 16);
    let b: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let c: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
    let mut a = vec![0.0f32; n];
    let chunk = n.div_ceil(threads);
    let mut best_read = 0.0f64;
    let mut best_triad = 0.0f64;
    let mut sink = 0.0f32;
    for _ in 0..4 {
        // Read: sum b and c (2 arrays, 8 bytes per index).
        let t = Instant::now();
        let s: f32 = std::thread::scope(|sc| {
            let hs: Vec<_> = b
                .chunks(chunk)
                .zip(c.chunks(chunk))
                .map(|(x, y)| sc.spawn(move || sum_streams(x) + sum_streams(y)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        best_read = best_read.max(8.0 * n as f64 / t.elapsed().as_secs_f64() / 1e9);
        sink += s;
        // Triad: a = b + 3·c (3 arrays moved, 12 bytes per index, as STREAM counts).
        let t = Instant::now();
        std::thread::scope(|sc| {
            for ((a, b), c) in a
                .chunks_mut(chunk)
                .zip(b.chunks(chunk))
                .zip(c.chunks(chunk))
            {
                sc.spawn(move || {
                    for ((a, b), c) in a.iter_mut().zip(b).zip(c) {
                        *a = b + 3.0 * c;
                    }
                });
            }
        });
        best_triad = best_triad.max(12.0 * n as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    std::hint::black_box((sink, &a));
    (best_read, best_triad)
}

/// Sum of `x`, read as 8 interleaved streams (its 8 equal parts advancing together, 16
/// lanes each): one sequential stream per core leaves the memory system idle between
/// misses (a core alone reaches about half the machine's bandwidth that way), while the
/// matmul kernels read several weight rows at once; the probe must reach at least what
/// they reach to be a ceiling.
fn sum_streams(x: &[f32]) -> f32 {
    const S: usize = 8;
    let part = x.len() / S / 16 * 16;
    let mut acc = [[0.0f32; 16]; S];
    for i in (0..part).step_by(16) {
        for (s, a) in acc.iter_mut().enumerate() {
            let v = &x[s * part + i..s * part + i + 16];
            for k in 0..16 {
                a[k] += v[k];
            }
        }
    }
    let tail: f32 = x[S * part..].iter().sum();
    acc.iter().flatten().sum::<f32>() + tail
}
// ANCHOR_END: stream

// ANCHOR: fma_peak
/// (GFLOP/s, kernel name) of `threads` threads each running a register-resident FMA loop.
fn fma_peak(threads: usize) -> (f64, &'static str) {
    const ITERS: u64 = 20_000_000;
    let mut best = 0.0f64;
    let mut kernel = "scalar";
    for _ in 0..3 {
        let t = Instant::now();
        let results: Vec<(f64, &'static str)> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..threads)
                .map(|i| sc.spawn(move || fma_loop(ITERS, i as f32)))
                .collect();
            hs.into_iter()
                .map(|h| h.join().unwrap_or((0.0, "scalar")))
                .collect()
        });
        let secs = t.elapsed().as_secs_f64();
        let flops: f64 = results.iter().map(|r| r.0).sum();
        kernel = results[0].1;
        best = best.max(flops / secs / 1e9);
    }
    (best, kernel)
}

/// Runs the fastest FMA loop this CPU supports; returns (FLOPs done, kernel name).
fn fma_loop(iters: u64, seed: f32) -> (f64, &'static str) {
    #[cfg(target_arch = "x86_64")]
    if crate::kernels::use_avx512() {
        // SAFETY: `use_avx512` checked that the CPU supports AVX-512F, the only
        // requirement of calling a function compiled with that target feature.
        let s = unsafe { fma_loop_avx512(iters, seed) };
        std::hint::black_box(s);
        // The same loop as the matmul's tiles run: 16 lanes per register.
        return (iters as f64 * 10.0 * 16.0 * 2.0, "avx512f");
    }
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
        // SAFETY: the CPU supports AVX2 and FMA (checked just above), the only
        // requirement of calling a function compiled with those target features.
        let s = unsafe { fma_loop_avx2(iters, seed) };
        std::hint::black_box(s);
        // 10 accumulators × 8 lanes × 2 FLOPs per iteration.
        return (iters as f64 * 10.0 * 8.0 * 2.0, "avx2+fma");
    }
    // Portable fallback: 8 independent scalar chains (mul then add, 2 FLOPs each).
    let mut acc = [seed; 8];
    let (m, a) = (
        std::hint::black_box(0.999_999f32),
        std::hint::black_box(1e-7f32),
    );
    for _ in 0..iters {
        for v in acc.iter_mut() {
            *v = *v * m + a;
        }
    }
    std::hint::black_box(acc);
    (iters as f64 * 8.0 * 2.0, "scalar")
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
fn fma_loop_avx2(iters: u64, seed: f32) -> f32 {
    use std::arch::x86_64::*;
    // Ten independent chains: FMA latency (4 cycles) × 2 FMA ports needs at least 8 in flight.
    let m = _mm256_set1_ps(std::hint::black_box(0.999_999));
    let a = _mm256_set1_ps(std::hint::black_box(1e-7));
    let mut r = [_mm256_set1_ps(seed); 10];
    for _ in 0..iters {
        for v in r.iter_mut() {
            *v = _mm256_fmadd_ps(*v, m, a);
        }
    }
    let mut s = _mm256_setzero_ps();
    for v in r {
        s = _mm256_add_ps(s, v);
    }
    let mut out = [0.0f32; 8];
    // SAFETY: `out` holds 8 f32, exactly what a 256-bit unaligned store writes.
    unsafe { _mm256_storeu_ps(out.as_mut_ptr(), s) };
    out.iter().sum()
}
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
fn fma_loop_avx512(iters: u64, seed: f32) -> f32 {
    use std::arch::x86_64::*;
    let m = _mm512_set1_ps(std::hint::black_box(0.999_999));
    let a = _mm512_set1_ps(std::hint::black_box(1e-7));
    let mut r = [_mm512_set1_ps(seed); 10];
    for _ in 0..iters {
        for v in r.iter_mut() {
            *v = _mm512_fmadd_ps(*v, m, a);
        }
    }
    let mut s = _mm512_setzero_ps();
    for v in r {
        s = _mm512_add_ps(s, v);
    }
    _mm512_reduce_add_ps(s)
}
// ANCHOR_END: fma_peak

/// A short human-readable summary of a report.
pub fn text_report(r: &BenchReport) -> String {
    let m = &r.machine;
    format!(
        "machine: {} threads; read {:.1} GB/s ({:.1} on one thread), triad {:.1} GB/s; \
         FMA {:.0} GFLOP/s ({:.0} per core, {})\n\
         model: {} ({}, {:.2} GB)\n\
         prefill {} tokens: {:.1} tok/s (ceiling {:.1}, {:.1} %)\n\
         decode {} tokens:  {:.2} tok/s (ceiling {:.2}, {:.1} %; {:.3} GB read per token)\n\
         peak RSS {:.2} GB ({:.2} × the weights)\n",
        m.threads,
        m.mem_read_gb_s,
        m.mem_read_1t_gb_s,
        m.mem_triad_gb_s,
        m.fma_gflop_s,
        m.fma_gflop_s_per_core,
        m.fma_kernel,
        r.model_dir,
        r.weights_dtype,
        r.weights_bytes as f64 / 1e9,
        r.prompt_len,
        r.prefill_tok_s,
        r.prefill_ceiling_tok_s,
        100.0 * r.prefill_roofline_fraction,
        r.gen_tokens,
        r.decode_tok_s,
        r.decode_ceiling_tok_s,
        100.0 * r.decode_roofline_fraction,
        r.work.decode_bytes_per_token / 1e9,
        r.peak_rss_bytes as f64 / 1e9,
        r.peak_rss_over_weights,
    )
}
