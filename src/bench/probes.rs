//! The machine probes of `anatomy bench` (chapter 10): read bandwidth by several access
//! patterns (the best is the decode ceiling), the STREAM triad, and the compute peaks — f32
//! FMA, int8 dot products and bf16 dot products — each with the widest instructions this
//! CPU has, detected at run time.
//!
//! The streaming patterns use the widest loads ([`read::read_isa`]): `ANATOMY_NO_AVX512`
//! drops them to AVX2 and `ANATOMY_PROBE_PORTABLE` to portable code, so the older probe can
//! be measured beside the new one on the same CPU.

pub mod read;

use crate::checkpoint::Checkpoint;
use crate::error::{Error, Result};
use crate::kernels::Matrix;
use crate::kernels::scratch::HugeScratch;
use read::{ReadIsa, xor_streams};
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// One read-bandwidth access pattern and what it reached (best of its passes).
#[derive(Clone, Debug, Serialize)]
pub struct ReadPattern {
    pub name: String,
    /// Threads reading (each its own contiguous part, or the engine's row blocks).
    pub threads: usize,
    /// The loads: "avx512", "avx2" or "portable" for the streaming loops, the engine's
    /// kernel ("matmul kernel") for the matvec patterns.
    pub loads: &'static str,
    pub gb_s: f64,
}

/// Timed passes per pattern; the fastest counts (the others were disturbed by something).
/// The passes of the patterns of one group take turns, so a disturbance of a few hundred
/// milliseconds (the machine is shared) costs each pattern a pass, not all of them.
const PASSES: usize = 6;

/// The last-level cache of CPU 0, bytes (the largest data or unified cache in sysfs).
pub fn llc_bytes() -> Option<u64> {
    let mut best = None;
    for i in 0..8 {
        let dir = format!("/sys/devices/system/cpu/cpu0/cache/index{i}");
        let read = |f: &str| std::fs::read_to_string(format!("{dir}/{f}")).ok();
        let (Some(kind), Some(size)) = (read("type"), read("size")) else {
            continue;
        };
        if kind.trim() == "Instruction" {
            continue;
        }
        let size = size.trim();
        let (digits, unit) = size.split_at(size.trim_end_matches(['K', 'M', 'G']).len());
        let Ok(n) = digits.parse::<u64>() else {
            continue;
        };
        let scale = match unit {
            "K" => 1 << 10,
            "M" => 1 << 20,
            "G" => 1 << 30,
            _ => 1,
        };
        best = best.max(n.checked_mul(scale));
    }
    best
}

/// Bytes the read patterns use: `requested`, but at least 4 × the last-level cache (64 MiB
/// assumed when sysfs does not say), so no pass is served from the cache.
pub fn probe_bytes(requested: usize) -> usize {
    let llc = llc_bytes().unwrap_or(64 << 20);
    requested.max(usize::try_from(llc.saturating_mul(4)).unwrap_or(usize::MAX))
}

/// A streaming loop: the XOR of a slice's words, read with the given loads.
type ReadFn = fn(&[u32], ReadIsa) -> u32;

/// The streaming patterns: S interleaved streams per thread (S = 1 is one sequential
/// stream), a line of each per step. One stream per core can leave the memory idle between
/// misses, while the matvec tiles read 4 weight rows at once and prefetch the next 4; which
/// count the prefetchers serve best differs between machines, so the probe tries several.
const STREAMS: [(&str, ReadFn); 5] = [
    ("sequential", xor_streams::<1, 0>),
    ("4 streams per thread", xor_streams::<4, 0>),
    ("8 streams per thread", xor_streams::<8, 0>),
    (
        "8 streams per thread, prefetch 1 KiB ahead",
        xor_streams::<8, 16>,
    ),
    ("16 streams per thread", xor_streams::<16, 0>),
];

/// The streaming patterns over two arrays of `bytes / 3` each (plus the triad `a = b + 3·c`
/// over a third), split across `threads` scoped threads so each reads its own contiguous
/// part, with the widest loads ([`read::read_isa`]): returns (every pattern, triad GB/s).
pub fn stream(threads: usize, bytes: usize) -> (Vec<ReadPattern>, f64) {
    let n = (bytes / 4 / 3).max(1 << 16);
    // Huge pages where the system grants them, as the weights have: on 4 KiB pages the
    // probe's TLB misses made it slower than a decode step reading mapped weights.
    let mut scratch: [HugeScratch; 3] = Default::default();
    let [sa, sb, sc] = &mut scratch;
    let (a, b, c) = (sa.floats(n), sb.floats(n), sc.floats(n));
    for (i, (b, c)) in b.iter_mut().zip(c.iter_mut()).enumerate() {
        (*b, *c) = ((i % 7) as f32, (i % 5) as f32);
    }
    let (b, c): (&[f32], &[f32]) = (b, c);
    let chunk = n.div_ceil(threads);
    let isa = read::read_isa();
    let (bw, cw): (&[u32], &[u32]) = (bytemuck::cast_slice(b), bytemuck::cast_slice(c));
    let mut best = [0.0f64; STREAMS.len()];
    let mut sink = 0u32;
    for _ in 0..PASSES {
        for (k, (_, fold)) in STREAMS.iter().enumerate() {
            // Read b and c (2 arrays, 8 bytes per index).
            let t = Instant::now();
            sink ^= std::thread::scope(|sc| {
                let hs: Vec<_> = bw
                    .chunks(chunk)
                    .zip(cw.chunks(chunk))
                    .map(|(x, y)| sc.spawn(move || fold(x, isa) ^ fold(y, isa)))
                    .collect();
                hs.into_iter().fold(0, |s, h| s ^ h.join().unwrap_or(0))
            });
            best[k] = best[k].max(8.0 * n as f64 / t.elapsed().as_secs_f64() / 1e9);
        }
    }
    let patterns = STREAMS
        .iter()
        .zip(best)
        .map(|((name, _), gb_s)| ReadPattern {
            name: (*name).into(),
            threads,
            loads: isa.name(),
            gb_s,
        })
        .collect();
    let mut best_triad = 0.0f64;
    for _ in 0..PASSES {
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
    (patterns, best_triad)
}

/// Columns of the probe matrix: the hidden size of the bench model (a decode step's
/// projections and LM head have rows of this length).
const PROBE_COLS: usize = 2048;

/// Names of the two matvec patterns.
pub const IN_MEMORY_PATTERN: &str = "matvec (bf16, engine kernel)";
pub const MAPPED_PATTERN: &str = "matvec over mmap'd safetensors (page cache resident)";

/// A random bf16 matrix of about `bytes` bytes (at least 16 rows) of [`PROBE_COLS`]
/// columns: (weights, rows).
fn probe_matrix(bytes: usize) -> (Vec<half::bf16>, usize) {
    let rows = (bytes / 2 / PROBE_COLS).max(16);
    let len = rows * PROBE_COLS; // at most max(bytes / 2, 16 · PROBE_COLS): no overflow
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let weights = (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            // Uniform in [-1, 1): finite, so no NaN slows the FMAs.
            half::bf16::from_f32((state >> 40) as f32 / (1u64 << 23) as f32 - 1.0)
        })
        .collect();
    (weights, rows)
}

/// GB/s of one pass of [`Matrix::matmul`] with one input row (the engine's decode step:
/// its rows split in blocks over the current rayon pool, its tiles prefetching the next
/// rows): the matrix's bytes over the time.
fn matvec_pass(m: &Matrix, x: &[f32], out: &mut [f32]) -> f64 {
    let t = Instant::now();
    m.matmul(x, out);
    m.stored_bytes() as f64 / t.elapsed().as_secs_f64() / 1e9
}

/// The probe matrix written to a temporary safetensors file and opened as the engine opens
/// a checkpoint ([`Checkpoint::open_file`]: the same map, populated the same way); the
/// checkpoint is dropped before the file is removed (field order).
struct MappedProbe {
    ckpt: Checkpoint,
    _file: TempFile,
}

/// The tensor's name inside the probe file.
const PROBE_TENSOR: &str = "probe.weight";

fn write_mapped_probe(weights: &[half::bf16], rows: usize) -> Result<MappedProbe> {
    // The process id and a per-process count: two probes (tests in threads) never collide.
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let nth = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!(
        "anatomy-bench-probe-{}-{nth}.safetensors",
        std::process::id()
    );
    let file = TempFile(std::env::temp_dir().join(name));
    let write_err = |source| Error::Write {
        path: file.0.clone(),
        source,
    };
    let data_bytes = std::mem::size_of_val(weights);
    let mut header = serde_json::json!({
        PROBE_TENSOR: {"dtype": "BF16", "shape": [rows, PROBE_COLS], "data_offsets": [0, data_bytes]}
    })
    .to_string()
    .into_bytes();
    // Padded with spaces so the data starts on a 64-byte line, as a kernel's loads would
    // wish (the ceiling is the best case).
    header.resize((8 + header.len()).div_ceil(64) * 64 - 8, b' ');
    {
        use std::io::Write;
        // create_new: never follows or truncates a file (or link) someone left there.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file.0)
            .map_err(write_err)?;
        f.write_all(&(header.len() as u64).to_le_bytes())
            .and_then(|()| f.write_all(&header))
            .and_then(|()| f.write_all(bytemuck::cast_slice(weights)))
            .map_err(write_err)?;
    }
    // The engine's loader: nothing in this process writes the file while it is mapped,
    // and it is a fresh private file (`Checkpoint::open`'s precondition holds).
    let ckpt = Checkpoint::open_file(&file.0)?;
    Ok(MappedProbe { ckpt, _file: file })
}

/// The matvec patterns: the engine's decode kernel over a random bf16 matrix of about
/// `bytes` in anonymous memory, and over the same matrix in a memory-mapped safetensors
/// file (just written, so in the page cache; an untimed pass first maps every page), each
/// on a rayon pool of every count in `thread_counts`. Returns the patterns and, for the
/// ones that could not run (no temporary file, no pool), why.
pub fn matvec_patterns(thread_counts: &[usize], bytes: usize) -> (Vec<ReadPattern>, Vec<String>) {
    let (weights, rows) = probe_matrix(bytes);
    let mut skipped = Vec::new();
    let mapped = write_mapped_probe(&weights, rows)
        .map_err(|e| skipped.push(format!("{MAPPED_PATTERN}: {e}")))
        .ok();
    let mapped_matrix = mapped.as_ref().and_then(|p| {
        p.ckpt
            .matrix(PROBE_TENSOR, rows, PROBE_COLS)
            .map_err(|e| skipped.push(format!("{MAPPED_PATTERN}: {e}")))
            .ok()
    });
    let mut matrices = vec![(IN_MEMORY_PATTERN, Matrix::bf16(&weights, rows, PROBE_COLS))];
    matrices.extend(mapped_matrix.map(|m| (MAPPED_PATTERN, m)));
    let mut pools = Vec::new();
    for &t in thread_counts {
        match rayon::ThreadPoolBuilder::new().num_threads(t).build() {
            Ok(p) => pools.push((t, p)),
            Err(e) => skipped.push(format!("matvec patterns on {t} threads: {e}")),
        }
    }
    let x: Vec<f32> = (0..PROBE_COLS).map(|i| (i % 13) as f32 / 13.0).collect();
    let mut out = vec![0.0f32; rows];
    // One untimed pass of each (pages mapped, threads awake), then the passes take turns.
    for (_, m) in &matrices {
        m.matmul(&x, &mut out);
    }
    let mut best = vec![0.0f64; matrices.len() * pools.len()];
    for _ in 0..PASSES {
        for (j, (_, pool)) in pools.iter().enumerate() {
            for (i, (_, m)) in matrices.iter().enumerate() {
                let gb_s = pool.install(|| matvec_pass(m, &x, &mut out));
                let b = &mut best[j * matrices.len() + i];
                *b = b.max(gb_s);
            }
        }
    }
    std::hint::black_box(&out);
    let mut patterns = Vec::new();
    for (j, &(threads, _)) in pools.iter().enumerate() {
        for (i, &(name, _)) in matrices.iter().enumerate() {
            patterns.push(ReadPattern {
                name: name.into(),
                threads,
                loads: "matmul kernel",
                gb_s: best[j * matrices.len() + i],
            });
        }
    }
    (patterns, skipped)
}

/// A temporary file removed when dropped (also on an error's early return).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Iterations of each register-resident peak loop.
const PEAK_ITERS: u64 = 20_000_000;

/// Best-of-3 rate (G per second) of `threads` threads each running `body` for `iters`
/// iterations; `body` returns the operations it did (0 when its instructions are missing).
fn peak(threads: usize, iters: u64, body: fn(u64, u32) -> f64) -> f64 {
    let mut best = 0.0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let ops: f64 = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..threads)
                .map(|i| sc.spawn(move || body(iters, i as u32)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        best = best.max(ops / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}

/// The f32 FMA loop the matmul kernels' width allows: "avx512f", "avx2+fma" or "scalar".
pub fn fma_kernel() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if crate::kernels::use_avx512() {
            return "avx512f";
        }
        if is_x86_feature_detected!("avx2") && is_x86_feature_detected!("fma") {
            return "avx2+fma";
        }
    }
    "scalar"
}

/// GFLOP/s of `threads` threads each running ten independent FMA chains in registers.
pub fn fma_peak(threads: usize) -> f64 {
    peak(threads, PEAK_ITERS, fma_loop)
}

/// Runs the FMA loop of [`fma_kernel`]; returns the FLOPs done.
fn fma_loop(iters: u64, seed: u32) -> f64 {
    let seed = seed as f32;
    #[cfg(target_arch = "x86_64")]
    match fma_kernel() {
        "avx512f" => {
            // SAFETY: `fma_kernel` returns "avx512f" only after `use_avx512` found AVX-512F,
            // the one requirement of calling a function compiled with that feature.
            std::hint::black_box(unsafe { fma_loop_avx512(iters, seed) });
            // 10 accumulators × 16 lanes × 2 FLOPs per iteration.
            return iters as f64 * 10.0 * 16.0 * 2.0;
        }
        "avx2+fma" => {
            // SAFETY: `fma_kernel` returns "avx2+fma" only after detecting AVX2 and FMA,
            // the requirement of calling a function compiled with those features.
            std::hint::black_box(unsafe { fma_loop_avx2(iters, seed) });
            return iters as f64 * 10.0 * 8.0 * 2.0;
        }
        _ => {}
    }
    std::hint::black_box(fma_loop_portable(iters, seed));
    iters as f64 * 8.0 * 2.0
}

/// The portable fallback: 8 independent scalar chains (mul then add, 2 FLOPs each).
fn fma_loop_portable(iters: u64, seed: f32) -> f32 {
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
    acc.iter().sum()
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

/// The int8 dot-product instruction this CPU has: "avx512vnni" (`vpdpbusd`, 512 bits),
/// "avxvnni" (`vpdpbusd`, 256 bits), or "not supported by this CPU" (an AVX2-only CPU
/// emulates it in three instructions: [`int8_maddubs_peak`]).
pub fn int8_kernel() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512f") {
            return "avx512vnni";
        }
        if is_x86_feature_detected!("avxvnni") && is_x86_feature_detected!("avx2") {
            return "avxvnni";
        }
    }
    NOT_SUPPORTED
}

/// The bf16 dot-product instruction: "avx512bf16" (`vdpbf16ps`) or "not supported by this
/// CPU".
pub fn bf16_kernel() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx512bf16") && is_x86_feature_detected!("avx512f") {
        return "avx512bf16";
    }
    NOT_SUPPORTED
}

pub const NOT_SUPPORTED: &str = "not supported by this CPU";

/// Int8 GOP/s of `vpdpbusd` (a multiply-add of a u8 by an i8 counts 2 ops), all
/// `threads`; `None` when the CPU has neither VNNI.
pub fn int8_peak(threads: usize) -> Option<f64> {
    int8_peak_with(threads, PEAK_ITERS)
}

fn int8_peak_with(threads: usize, iters: u64) -> Option<f64> {
    (int8_kernel() != NOT_SUPPORTED).then(|| peak(threads, iters, int8_loop))
}

/// Int8 GOP/s of AVX2's `vpmaddubsw` + `vpmaddwd` + `vpaddd` (the block-format kernels'
/// path without VNNI), all `threads`; `None` without AVX2.
pub fn int8_maddubs_peak(threads: usize) -> Option<f64> {
    int8_maddubs_peak_with(threads, PEAK_ITERS)
}

fn int8_maddubs_peak_with(threads: usize, iters: u64) -> Option<f64> {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        return Some(peak(threads, iters, int8_maddubs_loop));
    }
    let _ = (threads, iters);
    None
}

/// Bf16 GFLOP/s of `vdpbf16ps` (2 FLOPs per bf16 pair), all `threads`; `None` without it.
pub fn bf16_peak(threads: usize) -> Option<f64> {
    bf16_peak_with(threads, PEAK_ITERS)
}

fn bf16_peak_with(threads: usize, iters: u64) -> Option<f64> {
    (bf16_kernel() != NOT_SUPPORTED).then(|| peak(threads, iters, bf16_loop))
}

/// Runs the loop of [`int8_kernel`]; returns the ops done (0 without the instructions).
fn int8_loop(iters: u64, seed: u32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    match int8_kernel() {
        "avx512vnni" => {
            // SAFETY: `int8_kernel` returns "avx512vnni" only after detecting AVX-512F and
            // AVX-512 VNNI, the features the function is compiled with.
            std::hint::black_box(unsafe { int8_loop_avx512vnni(iters, seed) });
            // DOT_CHAINS chains × 64 byte pairs × 2 ops.
            return iters as f64 * DOT_CHAINS as f64 * 64.0 * 2.0;
        }
        "avxvnni" => {
            // SAFETY: `int8_kernel` returns "avxvnni" only after detecting AVX2 and
            // AVX-VNNI, the features the function is compiled with.
            std::hint::black_box(unsafe { int8_loop_avxvnni(iters, seed) });
            return iters as f64 * DOT_CHAINS as f64 * 32.0 * 2.0;
        }
        _ => {}
    }
    let _ = (iters, seed);
    0.0
}

/// Runs the AVX2 int8 loop; returns the ops done (0 without AVX2).
fn int8_maddubs_loop(iters: u64, seed: u32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 was detected on the line above, the feature the function is
        // compiled with.
        std::hint::black_box(unsafe { int8_loop_avx2(iters, seed) });
        // 12 chains × 32 byte pairs × 2 ops.
        return iters as f64 * 12.0 * 32.0 * 2.0;
    }
    let _ = (iters, seed);
    0.0
}

/// Runs the loop of [`bf16_kernel`]; returns the FLOPs done (0 without the instruction).
fn bf16_loop(iters: u64, seed: u32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if bf16_kernel() == "avx512bf16" {
        // SAFETY: `bf16_kernel` returns "avx512bf16" only after detecting AVX-512F and
        // AVX512-BF16, the features the function is compiled with.
        std::hint::black_box(unsafe { bf16_loop_avx512(iters, seed) });
        // DOT_CHAINS chains × 32 bf16 pairs × 2 FLOPs.
        return iters as f64 * DOT_CHAINS as f64 * 32.0 * 2.0;
    }
    let _ = (iters, seed);
    0.0
}

/// Independent accumulators of the VNNI and bf16 loops: each chain waits for its previous
/// dot product (latency 4-6 cycles on recent cores) while two units can start one each
/// per cycle, so at least 12 must be in flight (12 + 2 operands fit the 16 ymm registers
/// of AVX-VNNI).
const DOT_CHAINS: usize = 12;

/// AVX2 has no int8 dot instruction: `vpmaddubsw` multiplies u8 by i8 into pairs summed
/// as i16, `vpmaddwd` by ones widens them to i32 sums of four, `vpaddd` accumulates. Each
/// chain feeds its own accumulator back as the u8 operand, so no product is loop-invariant
/// (wrapping arithmetic: the values do not matter, only the work).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn int8_loop_avx2(iters: u64, seed: u32) -> i32 {
    use std::arch::x86_64::*;
    let w = _mm256_set1_epi8(std::hint::black_box(3));
    let ones = _mm256_set1_epi16(1);
    // Twelve chains: each is three dependent instructions (about 11 cycles) and the two
    // multiply units take one chain step per cycle.
    let mut r = [_mm256_set1_epi32(seed as i32); 12];
    for _ in 0..iters {
        for v in r.iter_mut() {
            let pairs = _mm256_maddubs_epi16(*v, w);
            *v = _mm256_add_epi32(*v, _mm256_madd_epi16(pairs, ones));
        }
    }
    let mut s = _mm256_setzero_si256();
    for v in r {
        s = _mm256_add_epi32(s, v);
    }
    _mm256_extract_epi32::<0>(s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avxvnni")]
fn int8_loop_avxvnni(iters: u64, seed: u32) -> i32 {
    use std::arch::x86_64::*;
    let a = _mm256_set1_epi8(std::hint::black_box(5));
    let b = _mm256_set1_epi8(std::hint::black_box(3));
    let mut r = [_mm256_set1_epi32(seed as i32); DOT_CHAINS];
    for _ in 0..iters {
        for v in r.iter_mut() {
            *v = _mm256_dpbusd_avx_epi32(*v, a, b);
        }
    }
    let mut s = _mm256_setzero_si256();
    for v in r {
        s = _mm256_add_epi32(s, v);
    }
    _mm256_extract_epi32::<0>(s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512vnni")]
fn int8_loop_avx512vnni(iters: u64, seed: u32) -> i32 {
    use std::arch::x86_64::*;
    let a = _mm512_set1_epi8(std::hint::black_box(5));
    let b = _mm512_set1_epi8(std::hint::black_box(3));
    let mut r = [_mm512_set1_epi32(seed as i32); DOT_CHAINS];
    for _ in 0..iters {
        for v in r.iter_mut() {
            *v = _mm512_dpbusd_epi32(*v, a, b);
        }
    }
    let mut s = _mm512_setzero_si512();
    for v in r {
        s = _mm512_add_epi32(s, v);
    }
    _mm512_reduce_add_epi32(s)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx512bf16")]
fn bf16_loop_avx512(iters: u64, seed: u32) -> f32 {
    use std::arch::x86_64::*;
    // Small factors, so 20 M steps of 2·1e-6 per lane stay finite.
    let x = _mm512_set1_ps(std::hint::black_box(1e-3));
    let pair = _mm512_cvtne2ps_pbh(x, x);
    let mut r = [_mm512_set1_ps(seed as f32); DOT_CHAINS];
    for _ in 0..iters {
        for v in r.iter_mut() {
            *v = _mm512_dpbf16_ps(*v, pair, pair);
        }
    }
    let mut s = _mm512_setzero_ps();
    for v in r {
        s = _mm512_add_ps(s, v);
    }
    _mm512_reduce_add_ps(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Iterations of the peak loops in tests: a few milliseconds each.
    const SHORT: u64 = 200_000;

    fn positive(g: f64) -> bool {
        g > 0.0 && g.is_finite()
    }

    /// Every pattern runs on a small buffer and reports a positive rate, tagged with its
    /// threads and loads.
    #[test]
    fn streaming_patterns_and_triad_run() {
        let (p, triad) = stream(2, 6 << 20);
        assert_eq!(p.len(), STREAMS.len());
        assert!(positive(triad), "{triad}");
        for r in &p {
            assert!(positive(r.gb_s) && r.threads == 2, "{r:?}");
            assert_eq!(r.loads, read::read_isa().name());
        }
    }

    /// Each dispatch runs and is positive where the CPU has the instructions, absent where
    /// not; then every loop this CPU supports is forced, whatever the dispatch picks, and
    /// must return a finite value (a skipped one says so).
    #[test]
    fn peaks_run_on_every_supported_path() {
        assert!(positive(peak(1, SHORT, fma_loop)), "{}", fma_kernel());
        match int8_peak_with(2, SHORT) {
            Some(g) => assert!(positive(g), "{} {g}", int8_kernel()),
            None => assert_eq!(int8_kernel(), NOT_SUPPORTED),
        }
        match bf16_peak_with(2, SHORT) {
            Some(g) => assert!(positive(g), "{} {g}", bf16_kernel()),
            None => assert_eq!(bf16_kernel(), NOT_SUPPORTED),
        }
        #[cfg(target_arch = "x86_64")]
        {
            let has = |f: &[bool]| f.iter().all(|&b| b);
            assert_eq!(
                int8_maddubs_peak_with(1, SHORT).is_some_and(positive),
                is_x86_feature_detected!("avx2")
            );
            let mut skipped = Vec::new();
            if has(&[is_x86_feature_detected!("avx512f")]) {
                // SAFETY: AVX-512F was detected on the line above.
                assert!(unsafe { fma_loop_avx512(1000, 1.0) }.is_finite());
            } else {
                skipped.push("fma avx512f");
            }
            if has(&[
                is_x86_feature_detected!("avx2"),
                is_x86_feature_detected!("fma"),
            ]) {
                // SAFETY: AVX2 and FMA were detected on the line above.
                assert!(unsafe { fma_loop_avx2(1000, 1.0) }.is_finite());
                // SAFETY: AVX2 was detected on the line above.
                std::hint::black_box(unsafe { int8_loop_avx2(1000, 1) });
            } else {
                skipped.push("fma avx2, int8 avx2");
            }
            let vnni512 = [
                is_x86_feature_detected!("avx512f"),
                is_x86_feature_detected!("avx512vnni"),
            ];
            if has(&vnni512) {
                // SAFETY: AVX-512F and AVX512_VNNI were detected on the lines above.
                std::hint::black_box(unsafe { int8_loop_avx512vnni(1000, 1) });
            } else {
                skipped.push("int8 avx512vnni");
            }
            if has(&[
                is_x86_feature_detected!("avx2"),
                is_x86_feature_detected!("avxvnni"),
            ]) {
                // SAFETY: AVX2 and AVX_VNNI were detected on the line above.
                std::hint::black_box(unsafe { int8_loop_avxvnni(1000, 1) });
            } else {
                skipped.push("int8 avxvnni");
            }
            let bf16 = [
                is_x86_feature_detected!("avx512f"),
                is_x86_feature_detected!("avx512bf16"),
            ];
            if has(&bf16) {
                // SAFETY: AVX-512F and AVX512_BF16 were detected on the lines above.
                assert!(unsafe { bf16_loop_avx512(1000, 1) }.is_finite());
            } else {
                skipped.push("bf16 avx512bf16");
            }
            if !skipped.is_empty() {
                eprintln!("skipped (not on this CPU): {}", skipped.join(", "));
            }
        }
        // The portable FMA loop runs everywhere.
        assert!(fma_loop_portable(1000, 1.0).is_finite());
    }

    /// The mapped probe is the engine's view of the file: the same bf16 values, no copy
    /// (the data starts on a 64-byte line, so the map is used in place), and the file is
    /// gone once the probe is dropped.
    #[test]
    fn the_mapped_probe_reads_the_matrix_through_the_checkpoint_loader() {
        let (weights, rows) = probe_matrix(1 << 20);
        let probe = write_mapped_probe(&weights, rows).unwrap();
        let path = probe._file.0.clone();
        let m = probe.ckpt.matrix(PROBE_TENSOR, rows, PROBE_COLS).unwrap();
        let crate::kernels::WeightData::Bf16(data) = m.data else {
            panic!("not bf16: {}", m.data.type_name());
        };
        assert!(data == &weights[..]);
        assert!(data.as_ptr().cast::<u8>().align_offset(64) == 0);
        drop(probe);
        assert!(!path.exists());
    }

    #[test]
    fn matvec_patterns_run_on_a_tiny_matrix_at_each_thread_count() {
        let (p, skipped) = matvec_patterns(&[1, 2], 1 << 20);
        assert!(skipped.is_empty(), "{skipped:?}");
        assert_eq!(p.len(), 4, "{p:?}");
        for (r, (threads, name)) in p.iter().zip([
            (1, IN_MEMORY_PATTERN),
            (1, MAPPED_PATTERN),
            (2, IN_MEMORY_PATTERN),
            (2, MAPPED_PATTERN),
        ]) {
            assert!(positive(r.gb_s), "{r:?}");
            assert_eq!((r.threads, r.name.as_str()), (threads, name));
        }
    }

    /// The buffers are at least 4 × the last-level cache.
    #[test]
    fn probe_buffers_dwarf_the_last_level_cache() {
        let llc = llc_bytes();
        if let Some(b) = llc {
            assert!(b >= 1 << 10, "{b}");
        }
        let floor = 4 * llc.unwrap_or(64 << 20) as usize;
        assert_eq!(probe_bytes(1), floor);
        assert_eq!(probe_bytes(floor + 1), floor + 1);
    }
}
