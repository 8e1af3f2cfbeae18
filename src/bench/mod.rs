//! How fast the forward pass runs, and how fast this machine could run it at best.
//!
//! Chapter 10 (performance; no section of the source texts — it measures chapter 9's engine).
//! Decode is memory-bound: each new token reads every weight it touches once (attention,
//! router, the top-k experts of each MoE layer, norms, LM head), so its ceiling is the
//! machine's read bandwidth divided by those bytes. Prefill is compute-bound: 2 FLOPs per
//! multiply-add for every active parameter of every token, plus attention, so its ceiling is
//! the f32 FMA peak divided by those FLOPs. [`run`] measures both limits (a STREAM-style
//! read and triad, a register-resident FMA loop) and the model's prefill and decode rates on
//! the same machine, and reports the fraction of each ceiling reached. The read ceiling is
//! the best of several access patterns ([`probes`]: streaming loops with the widest loads,
//! and the engine's own matvec over anonymous memory and over a memory-mapped safetensors
//! file, on buffers at least 4 × the last-level cache), probed again up to four times
//! while the decode outruns it; [`check_ceiling`] refuses a decode that still beats the
//! highest probe. `ANATOMY_NO_AVX512` and `ANATOMY_PROBE_PORTABLE` narrow the probes'
//! loads (see [`probes`]).

use crate::error::{Error, Result};
use crate::kernels::{Matrix, WeightData};
use crate::qwen3::config::Qwen3Config;
use crate::qwen3::weights::Ffn;
use crate::qwen3::{Logits, Model};
use serde::Serialize;
use std::path::Path;
use std::time::Instant;

pub mod probes;
pub use probes::ReadPattern;

/// What to measure.
#[derive(Clone, Copy, Debug)]
pub struct BenchOptions {
    /// Prompt length for the prefill measurement (and the context decode starts from).
    pub prompt_len: usize,
    /// Tokens generated greedily after the prompt, one forward call each.
    pub gen_tokens: usize,
    /// Worker threads (rayon pool and the machine probes).
    pub threads: usize,
    /// Bytes the read patterns stream: the three arrays of the streaming patterns and the
    /// triad together, and the random bf16 matrix of the matvec patterns (written once to a
    /// temporary file too, for the memory-mapped one). Raised to 4 × the last-level cache
    /// if smaller ([`probes::probe_bytes`]) when `cover_llc` is set.
    pub stream_bytes: usize,
    /// Raise `stream_bytes` to 4 × the last-level cache, so the ceiling is memory's and not a
    /// cache's. Off, the probes use exactly `stream_bytes`: on a machine with a large cache
    /// that measures the cache (a higher ceiling, never a false "faster than memory").
    pub cover_llc: bool,
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
            cover_llc: true,
            reps: 3,
        }
    }
}

/// The machine's limits.
#[derive(Clone, Debug, Serialize)]
pub struct Machine {
    pub threads: usize,
    /// The decode ceiling's bandwidth: the best of [`Machine::read_patterns`], all threads
    /// (GB/s, 1e9 bytes).
    pub mem_read_gb_s: f64,
    /// Which pattern reached it.
    pub mem_read_pattern: String,
    /// Every read pattern on all threads, best of its passes.
    pub read_patterns: Vec<ReadPattern>,
    /// The same patterns on one thread.
    pub read_patterns_1t: Vec<ReadPattern>,
    /// Patterns that could not run, each with why (the memory-mapped one needs a temporary
    /// file).
    pub skipped_patterns: Vec<String>,
    /// The best pattern on one thread.
    pub mem_read_1t_gb_s: f64,
    /// Bytes of each pattern's buffers (at least 4 × `llc_bytes`).
    pub probe_bytes: usize,
    /// The last-level cache, from sysfs (`None` where it does not say).
    pub llc_bytes: Option<u64>,
    /// STREAM triad `a = b + s·c`, counted as 3 arrays moved (GB/s).
    pub mem_triad_gb_s: f64,
    /// f32 fused multiply-adds from registers, 2 FLOPs each (GFLOP/s), one thread.
    pub fma_gflop_s_per_core: f64,
    /// The same on all threads.
    pub fma_gflop_s: f64,
    /// Which FMA loop ran: the widest the matmul kernels use ("avx512f", "avx2+fma" or
    /// "scalar"), so the ceiling is the one our kernels could reach.
    pub fma_kernel: &'static str,
    /// Int8 dot products of `vpdpbusd` (u8 × i8 multiply-adds, 2 ops each), all threads
    /// (GOP/s); `None` when the CPU has no VNNI.
    pub int8_gop_s: Option<f64>,
    /// "avx512vnni", "avxvnni" or "not supported by this CPU".
    pub int8_kernel: &'static str,
    /// The same products by AVX2's three-instruction sequence (the int8 kernels' path
    /// without VNNI), all threads (GOP/s); `None` without AVX2.
    pub int8_maddubs_gop_s: Option<f64>,
    /// Bf16 dot products (`vdpbf16ps`, 2 FLOPs per pair), all threads (GFLOP/s).
    pub bf16_gflop_s: Option<f64>,
    /// "avx512bf16" or "not supported by this CPU".
    pub bf16_kernel: &'static str,
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
    /// Weight bytes the median decode read per second: `decode_tok_s ×
    /// work.decode_bytes_per_token` (GB/s), what [`check_ceiling`] holds against the ceiling.
    pub decode_read_gb_s: f64,
    /// Read bandwidth / decode bytes per token.
    pub decode_ceiling_tok_s: f64,
    pub decode_roofline_fraction: f64,
    /// FMA peak (all threads) / prefill FLOPs per token.
    pub prefill_ceiling_tok_s: f64,
    pub prefill_roofline_fraction: f64,
    /// Peak resident set (VmHWM) of the process, bytes.
    pub peak_rss_bytes: u64,
    pub peak_rss_over_weights: f64,
    /// Bytes of mapped files this process reaches through 2 MiB page-table entries
    /// (`FilePmdMapped`, Linux), read while the model is mapped; 0 where unknown.
    pub huge_mapped_bytes: u64,
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
    crate::limits::check("bench", "--reps", opts.reps as u128, crate::limits::REPS)?;
    if !(PROBE_BYTES_MIN..=PROBE_BYTES_MAX).contains(&opts.stream_bytes) {
        return Err(Error::Invalid(format!(
            "bench: the probe buffers must be between {} and {} MiB (--probe-mb), got {} bytes",
            PROBE_BYTES_MIN >> 20,
            PROBE_BYTES_MAX >> 20,
            opts.stream_bytes
        )));
    }
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| {
            Error::Invalid(format!("bench: cannot start {} threads: {e}", opts.threads))
        })?;
    pool.install(|| run_in_pool(dir, opts))
}

/// The probe buffers' bounds: a MiB at least (smaller is all L2), 64 GiB at most.
pub const PROBE_BYTES_MIN: usize = 1 << 20;
pub const PROBE_BYTES_MAX: usize = 64 << 30;

/// The warm-up prompt's length: the same 8 tokens as the llama.cpp peer's warm-up.
const WARM_UP_TOKENS: usize = 8;

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

    // One untimed warm-up first, as scripts/bench_llamacpp.py gives llama.cpp: a short
    // prompt through every layer grows the scratch buffers and wakes the pool's threads,
    // which the first timed prefill would otherwise pay for.
    session.cache.clear();
    model.forward(
        &mut session,
        &prompt[..prompt.len().min(WARM_UP_TOKENS)],
        Logits::Last,
        None,
    )?;
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
    let huge_mapped_bytes = huge_mapped_file_bytes().unwrap_or(0);
    let (prefill_tok_s, decode_tok_s) = (median(&prefill_runs), median(&decode_runs));
    let machine = probe_ceiling(opts, decode_read_gb_s(decode_tok_s, &work), &work);
    let decode_ceiling = machine.mem_read_gb_s * 1e9 / work.decode_bytes_per_token;
    let prefill_ceiling = machine.fma_gflop_s * 1e9 / work.prefill_flops_per_token;
    let weights_bytes = ckpt.data_bytes() as u64;
    Ok(BenchReport {
        model_dir: dir.display().to_string(),
        weights_dtype: dominant_dtype(&model).into(),
        weights_bytes,
        prompt_len: opts.prompt_len,
        gen_tokens: opts.gen_tokens,
        threads: opts.threads,
        mem_bandwidth_gb_s: machine.mem_read_gb_s,
        decode_read_gb_s: decode_read_gb_s(decode_tok_s, &work),
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
        huge_mapped_bytes,
    })
}

/// Probes of the machine's ceilings beyond the first, when the decode read faster than it,
/// and the pause before each: a shared host's bandwidth can sit in a low state for seconds.
const EXTRA_PROBES: usize = 4;
const PROBE_PAUSE: std::time::Duration = std::time::Duration::from_secs(2);

/// The machine's probes, taken again (up to [`EXTRA_PROBES`] times) while the decode's
/// `decode_gb_s` outruns the read ceiling: a shared host's bandwidth drifts between the
/// decode and the probe, and the highest probe is still a rate the machine demonstrably has.
fn probe_ceiling(opts: &BenchOptions, decode_gb_s: f64, work: &Work) -> Machine {
    let mut first = true;
    let probe = || {
        if !std::mem::take(&mut first) {
            std::thread::sleep(PROBE_PAUSE);
        }
        match opts.cover_llc {
            true => measure_machine(opts.threads, opts.stream_bytes),
            false => measure_machine_on(opts.threads, opts.stream_bytes),
        }
    };
    let outran = |m: &Machine| {
        let (ceiling, pattern) = (m.mem_read_gb_s, &m.mem_read_pattern);
        check_decode_reads(decode_gb_s, work.decode_bytes_per_token, ceiling, pattern).is_err()
    };
    highest_probe(probe, outran)
}

/// `probe` once, then again (up to [`EXTRA_PROBES`] times) while `outran` holds for the
/// highest read ceiling so far; that highest probe.
fn highest_probe(mut probe: impl FnMut() -> Machine, outran: impl Fn(&Machine) -> bool) -> Machine {
    let mut machine = probe();
    for _ in 0..EXTRA_PROBES {
        if !outran(&machine) {
            break;
        }
        let again = probe();
        if again.mem_read_gb_s > machine.mem_read_gb_s {
            machine = again;
        }
    }
    machine
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
    // As stored: a block-format head (Q6_K in a Q4_K_M file) is read in its blocks, not as f32.
    let lm_head_bytes = w.lm_head.stored_bytes() as f64;
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

/// The type holding most of the layers' weight bytes: a mixed file (Q4_1 layers beside a
/// Q8_0 tied head, Q4_K_M's Q6_K rows) is named by its bulk, not by its head.
fn dominant_dtype(model: &Model) -> &'static str {
    let mut bytes: Vec<(&'static str, usize)> = Vec::new();
    let mut add = |m: &Matrix| match bytes.iter_mut().find(|(t, _)| *t == m.data.type_name()) {
        Some((_, b)) => *b += m.stored_bytes(),
        None => bytes.push((m.data.type_name(), m.stored_bytes())),
    };
    for layer in &model.weights.layers {
        let a = &layer.self_attn;
        [&a.q_proj, &a.k_proj, &a.v_proj, &a.o_proj]
            .into_iter()
            .for_each(&mut add);
        match &layer.mlp {
            Ffn::Dense(e) => [&e.gate, &e.up, &e.down].into_iter().for_each(&mut add),
            Ffn::Moe { experts, .. } => experts
                .iter()
                .flat_map(|e| [&e.gate, &e.up, &e.down])
                .for_each(&mut add),
        }
    }
    add(&model.weights.lm_head);
    bytes
        .iter()
        .max_by_key(|(_, b)| *b)
        .map_or("f32", |(t, _)| t)
}

/// Peak resident set size of this process (VmHWM in /proc/self/status), if the system has it.
pub fn peak_rss_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Bytes of file mappings behind 2 MiB page-table entries (`FilePmdMapped` in
/// /proc/self/smaps_rollup), if the system reports it.
pub fn huge_mapped_file_bytes() -> Option<u64> {
    let rollup = std::fs::read_to_string("/proc/self/smaps_rollup").ok()?;
    let line = rollup.lines().find(|l| l.starts_with("FilePmdMapped:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    kb.checked_mul(1024)
}

/// Measures the read patterns, the triad and the compute peaks with `threads` workers
/// (and the read patterns on one), on buffers of [`probes::probe_bytes`]`(stream_bytes)`.
/// A pattern that cannot run (the memory-mapped one without a temporary file) is left out,
/// and why is kept in [`Machine::skipped_patterns`] (the report prints it).
pub fn measure_machine(threads: usize, stream_bytes: usize) -> Machine {
    measure_machine_on(threads, probes::probe_bytes(stream_bytes))
}

/// [`measure_machine`] on buffers of exactly `bytes`.
pub fn measure_machine_on(threads: usize, bytes: usize) -> Machine {
    let fma_1 = probes::fma_peak(1);
    let fma_all = probes::fma_peak(threads);
    let int8 = probes::int8_peak(threads);
    let int8_maddubs = probes::int8_maddubs_peak(threads);
    let bf16 = probes::bf16_peak(threads);
    let (mut read_patterns, triad) = probes::stream(threads, bytes);
    let (mut read_1t, _) = probes::stream(1, bytes);
    let counts: &[usize] = if threads == 1 { &[1] } else { &[1, threads] };
    let (matvec, skipped_patterns) = probes::matvec_patterns(counts, bytes);
    for p in matvec {
        if p.threads == threads {
            read_patterns.push(p.clone());
        }
        if p.threads == 1 && threads != 1 {
            read_1t.push(p);
        }
    }
    if threads == 1 {
        read_1t = read_patterns.clone();
    }
    let best = best_pattern(&read_patterns);
    Machine {
        threads,
        mem_read_gb_s: best.gb_s,
        mem_read_pattern: best.name.clone(),
        mem_read_1t_gb_s: best_pattern(&read_1t).gb_s,
        read_patterns,
        read_patterns_1t: read_1t,
        skipped_patterns,
        probe_bytes: bytes,
        llc_bytes: probes::llc_bytes(),
        mem_triad_gb_s: triad,
        fma_gflop_s_per_core: fma_1,
        fma_gflop_s: fma_all,
        fma_kernel: probes::fma_kernel(),
        int8_gop_s: int8,
        int8_kernel: probes::int8_kernel(),
        int8_maddubs_gop_s: int8_maddubs,
        bf16_gflop_s: bf16,
        bf16_kernel: probes::bf16_kernel(),
    }
}

/// The fastest pattern (the list is never empty: [`probes::stream`] returns five).
fn best_pattern(patterns: &[ReadPattern]) -> &ReadPattern {
    patterns
        .iter()
        .max_by(|a, b| a.gb_s.total_cmp(&b.gb_s))
        .unwrap_or(&patterns[0])
}

/// A decode that reads weights faster than the probe could read memory: the probe was not
/// a ceiling, a measurement fault of ours (the CLI exits 1 after printing the report).
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error(
    "bench: the decode rate implies {implied_gb_s:.1} GB/s of weight reads, more than the \
     read ceiling of {ceiling_gb_s:.1} GB/s (pattern: {pattern}) by over 5 %: the \
     bandwidth probe is not a ceiling on this machine"
)]
pub struct CeilingExceeded {
    pub implied_gb_s: f64,
    pub ceiling_gb_s: f64,
    pub pattern: String,
}

/// Decode steps reading fewer bytes than this may be served from the last-level cache,
/// which no DRAM probe bounds, so [`check_ceiling`] does not judge them.
pub const CACHE_RESIDENT_BYTES: f64 = 256.0 * 1024.0 * 1024.0;

/// The weight bytes a decode at `decode_tok_s` reads per second (GB/s): the one definition,
/// [`Work::decode_bytes_per_token`] per step.
pub fn decode_read_gb_s(decode_tok_s: f64, work: &Work) -> f64 {
    decode_tok_s * work.decode_bytes_per_token / 1e9
}

/// Refuses a decode reading `decode_gb_s` of weights (`bytes_per_token` a step, at least
/// [`CACHE_RESIDENT_BYTES`]) faster than 1.05 × the read ceiling `ceiling_gb_s`, which
/// `pattern` set.
pub fn check_decode_reads(
    decode_gb_s: f64,
    bytes_per_token: f64,
    ceiling_gb_s: f64,
    pattern: &str,
) -> std::result::Result<(), CeilingExceeded> {
    if bytes_per_token >= CACHE_RESIDENT_BYTES && decode_gb_s > 1.05 * ceiling_gb_s {
        return Err(CeilingExceeded {
            implied_gb_s: decode_gb_s,
            ceiling_gb_s,
            pattern: pattern.into(),
        });
    }
    Ok(())
}

/// [`check_decode_reads`] on a report's median decode and its machine's ceiling.
pub fn check_ceiling(r: &BenchReport) -> std::result::Result<(), CeilingExceeded> {
    check_decode_reads(
        decode_read_gb_s(r.decode_tok_s, &r.work),
        r.work.decode_bytes_per_token,
        r.machine.mem_read_gb_s,
        &r.machine.mem_read_pattern,
    )
}

/// A short human-readable summary of a report.
pub fn text_report(r: &BenchReport) -> String {
    let m = &r.machine;
    let rate = |v: Option<f64>, unit: &str, kernel: &str| match v {
        Some(g) => format!("{g:.0} {unit} ({kernel})"),
        None => kernel.to_string(),
    };
    let mut s = format!(
        "machine: {} threads; read ceiling {:.1} GB/s ({}; {:.1} on one thread), triad \
         {:.1} GB/s; buffers {:.0} MiB (last-level cache {})\n",
        m.threads,
        m.mem_read_gb_s,
        m.mem_read_pattern,
        m.mem_read_1t_gb_s,
        m.mem_triad_gb_s,
        m.probe_bytes as f64 / (1u64 << 20) as f64,
        m.llc_bytes
            .map_or("unknown".into(), |b| format!("{} MiB", b >> 20)),
    );
    let one: std::collections::HashMap<&str, f64> = m
        .read_patterns_1t
        .iter()
        .map(|p| (p.name.as_str(), p.gb_s))
        .collect();
    for p in &m.read_patterns {
        let loads = format!("{} ({})", p.name, p.loads);
        s += &format!("  read {loads:<62} {:6.1} GB/s", p.gb_s);
        match one.get(p.name.as_str()) {
            Some(g) if m.threads != 1 => s += &format!(" ({g:.1} on one thread)\n"),
            _ => s += "\n",
        }
    }
    for p in &m.skipped_patterns {
        s += &format!("  read skipped: {p}\n");
    }
    s += &format!(
        "peaks: f32 FMA {:.0} GFLOP/s ({:.0} per core, {}); int8 dot {}{}; bf16 dot {}\n\
         model: {} ({}, {:.2} GB)\n\
         prefill {} tokens: {:.1} tok/s (ceiling {:.1}, {:.1} %)\n\
         decode {} tokens:  {:.2} tok/s (ceiling {:.2}, {:.1} %; {:.3} GB read per token, \
         {:.1} GB/s)\n\
         peak RSS {:.2} GB ({:.2} × the weights; {:.2} GB of mapped files in 2 MiB pages)\n",
        m.fma_gflop_s,
        m.fma_gflop_s_per_core,
        m.fma_kernel,
        rate(m.int8_gop_s, "GOP/s", m.int8_kernel),
        m.int8_maddubs_gop_s
            .map_or(String::new(), |g| format!(", {g:.0} GOP/s by avx2 maddubs")),
        rate(m.bf16_gflop_s, "GFLOP/s", m.bf16_kernel),
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
        r.decode_read_gb_s,
        r.peak_rss_bytes as f64 / 1e9,
        r.peak_rss_over_weights,
        r.huge_mapped_bytes as f64 / 1e9,
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A report as `run` builds it, with made-up figures: 10 GB/s read, 1 GB per token.
    fn fake_report(decode_tok_s: f64, bytes_per_token: f64) -> BenchReport {
        let machine = Machine {
            threads: 2,
            mem_read_gb_s: 10.0,
            mem_read_pattern: "16 streams per thread".into(),
            read_patterns: vec![ReadPattern {
                name: "16 streams per thread".into(),
                threads: 2,
                loads: "avx2",
                gb_s: 10.0,
            }],
            read_patterns_1t: vec![ReadPattern {
                name: "16 streams per thread".into(),
                threads: 1,
                loads: "avx2",
                gb_s: 6.0,
            }],
            skipped_patterns: vec!["mmap: no temp dir".into()],
            mem_read_1t_gb_s: 6.0,
            probe_bytes: 128 << 20,
            llc_bytes: Some(32 << 20),
            mem_triad_gb_s: 9.0,
            fma_gflop_s_per_core: 50.0,
            fma_gflop_s: 100.0,
            fma_kernel: "avx2+fma",
            int8_gop_s: None,
            int8_kernel: probes::NOT_SUPPORTED,
            int8_maddubs_gop_s: Some(200.0),
            bf16_gflop_s: None,
            bf16_kernel: probes::NOT_SUPPORTED,
        };
        BenchReport {
            model_dir: "fake".into(),
            weights_dtype: "bf16".into(),
            weights_bytes: 2_000_000_000,
            prompt_len: 8,
            gen_tokens: 4,
            threads: 2,
            machine,
            work: Work {
                decode_bytes_per_token: bytes_per_token,
                active_params_per_token: bytes_per_token / 2.0,
                lm_head_params: 0.0,
                prefill_flops_per_token: bytes_per_token,
            },
            reps: 1,
            prefill_tok_s: 1.0,
            decode_tok_s,
            prefill_runs: vec![1.0],
            decode_runs: vec![decode_tok_s],
            mem_bandwidth_gb_s: 10.0,
            decode_read_gb_s: decode_tok_s * bytes_per_token / 1e9,
            decode_ceiling_tok_s: 10.0e9 / bytes_per_token,
            decode_roofline_fraction: decode_tok_s * bytes_per_token / 10.0e9,
            prefill_ceiling_tok_s: 100.0,
            prefill_roofline_fraction: 0.01,
            peak_rss_bytes: 1,
            peak_rss_over_weights: 0.0,
            huge_mapped_bytes: 0,
        }
    }

    /// Probes come from `ceilings` in turn; the decode reads 42 GB/s.
    fn probes_against(ceilings: &[f64]) -> (f64, usize) {
        let mut taken = 0;
        let probe = || {
            let mut m = fake_report(1.0, 1e9).machine;
            m.mem_read_gb_s = ceilings[taken];
            taken += 1;
            m
        };
        let outran = |m: &Machine| check_decode_reads(42.0, 1e9, m.mem_read_gb_s, "x").is_err();
        let best = highest_probe(probe, outran).mem_read_gb_s;
        (best, taken)
    }

    #[test]
    fn the_probe_is_taken_again_while_the_decode_outruns_it() {
        // A decode within the first probe's 5 %: one probe.
        assert_eq!(probes_against(&[40.1]), (40.1, 1));
        // Low, lower, then high: the highest stands and no more are taken.
        assert_eq!(probes_against(&[33.0, 32.0, 55.0, 60.0]), (55.0, 3));
        // Never high enough: the first probe and EXTRA_PROBES more, the highest kept.
        let low = [33.0, 34.0, 32.0, 33.5, 31.0, 99.0];
        assert_eq!(probes_against(&low), (34.0, 1 + EXTRA_PROBES));
    }

    #[test]
    fn a_decode_past_the_ceiling_by_over_5_percent_is_refused() {
        // 10.4 GB/s implied: within 5 % of the 10 GB/s ceiling.
        assert_eq!(check_ceiling(&fake_report(10.4, 1e9)), Ok(()));
        let err = check_ceiling(&fake_report(10.6, 1e9)).unwrap_err();
        assert_eq!(err.pattern, "16 streams per thread");
        assert!((err.implied_gb_s - 10.6).abs() < 1e-9);
        let msg = err.to_string();
        assert!(
            msg.contains("10.6 GB/s") && msg.contains("10.0 GB/s"),
            "{msg}"
        );
        assert!(msg.contains("16 streams per thread"), "{msg}");
        // A step small enough to sit in the caches is not judged.
        assert_eq!(check_ceiling(&fake_report(1e4, 1e6)), Ok(()));
        // The pure check, both ways, with the message naming both figures.
        assert_eq!(check_decode_reads(41.0, 1e9, 39.1, "sequential"), Ok(()));
        let err = check_decode_reads(41.0, 1e9, 38.9, "sequential").unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("41.0 GB/s") && msg.contains("38.9 GB/s"),
            "{msg}"
        );
    }

    /// The JSON keeps the fields the CLI's users and scripts read (/work/shared/cli.md,
    /// scripts/bench_peers_table.py, notebook 10), and the new ones.
    #[test]
    fn the_json_report_has_every_field() {
        let v = serde_json::to_value(fake_report(5.0, 1e9)).unwrap();
        for key in [
            "prefill_tok_s",
            "decode_tok_s",
            "mem_bandwidth_gb_s",
            "decode_read_gb_s",
            "decode_roofline_fraction",
            "prefill_roofline_fraction",
        ] {
            assert!(v[key].is_f64(), "{key}");
        }
        assert_eq!(v["decode_read_gb_s"], 5.0);
        let m = &v["machine"];
        for key in [
            "mem_read_gb_s",
            "mem_read_1t_gb_s",
            "fma_gflop_s",
            "int8_maddubs_gop_s",
        ] {
            assert!(m[key].is_f64(), "{key}");
        }
        assert!(m["int8_gop_s"].is_null() && m["bf16_gflop_s"].is_null());
        assert_eq!(m["llc_bytes"], 32 << 20);
        assert_eq!(m["probe_bytes"], 128 << 20);
        for (list, threads) in [("read_patterns", 2), ("read_patterns_1t", 1)] {
            let p = &m[list][0];
            assert_eq!(p["threads"], threads, "{list}");
            assert!(p["name"].is_string() && p["loads"].is_string() && p["gb_s"].is_f64());
        }
    }

    #[test]
    fn the_text_report_lists_every_pattern_and_the_peaks() {
        let t = text_report(&fake_report(5.0, 1e9));
        assert!(
            t.contains("read ceiling 10.0 GB/s (16 streams per thread"),
            "{t}"
        );
        assert!(
            t.contains("int8 dot not supported by this CPU, 200 GOP/s by avx2 maddubs"),
            "{t}"
        );
        assert!(t.contains("bf16 dot not supported by this CPU"), "{t}");
        assert!(t.contains("16 streams per thread (avx2)"), "{t}");
        assert!(t.contains("10.0 GB/s (6.0 on one thread)"), "{t}");
        assert!(t.contains("5.0 GB/s)"), "{t}");
        assert!(t.contains("read skipped: mmap: no temp dir"), "{t}");
    }
}
