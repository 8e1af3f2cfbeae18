//! The machine probes of `anatomy bench` (chapter 10): read bandwidth by several access
//! patterns (the best is the decode ceiling), the STREAM triad, and the compute peaks — f32
//! FMA, int8 dot products and bf16 dot products — each with the widest instructions this
//! CPU has, detected at run time.

use crate::error::{Error, Result};
use crate::kernels::Matrix;
use serde::Serialize;
use std::path::PathBuf;
use std::time::Instant;

/// One read-bandwidth access pattern and what it reached (best of its passes).
#[derive(Clone, Debug, Serialize)]
pub struct ReadPattern {
    pub name: String,
    pub gb_s: f64,
}

/// Timed passes per pattern; the fastest counts (the others were disturbed by something).
const PASSES: usize = 4;

/// A summing loop of one access pattern.
type SumFn = fn(&[f32]) -> f32;

// ANCHOR: stream
/// Read patterns over two arrays of `bytes / 3` each (plus the triad `a = b + 3·c` over a
/// third), split across `threads` scoped threads so each reads its own contiguous part:
/// returns (every read pattern, triad GB/s).
pub fn stream(threads: usize, bytes: usize) -> (Vec<ReadPattern>, f64) {
    let n = (bytes / 4 / 3).max(1 << 16);
    let b: Vec<f32> = (0..n).map(|i| (i % 7) as f32).collect();
    let c: Vec<f32> = (0..n).map(|i| (i % 5) as f32).collect();
    let mut a = vec![0.0f32; n];
    let chunk = n.div_ceil(threads);
    let kinds: [(&str, SumFn); 4] = [
        ("sequential", sum_streams::<1>),
        ("8 streams per thread", sum_streams::<8>),
        ("16 streams per thread", sum_streams::<16>),
        ("32 streams per thread", sum_streams::<32>),
    ];
    let mut patterns = Vec::new();
    let mut sink = 0.0f32;
    for (name, sum) in kinds {
        let mut best = 0.0f64;
        for _ in 0..PASSES {
            // Sum b and c (2 arrays, 8 bytes per index).
            let t = Instant::now();
            let s: f32 = std::thread::scope(|sc| {
                let hs: Vec<_> = b
                    .chunks(chunk)
                    .zip(c.chunks(chunk))
                    .map(|(x, y)| sc.spawn(move || sum(x) + sum(y)))
                    .collect();
                hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
            });
            best = best.max(8.0 * n as f64 / t.elapsed().as_secs_f64() / 1e9);
            sink += s;
        }
        patterns.push(ReadPattern {
            name: name.into(),
            gb_s: best,
        });
    }
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

/// Sum of `x`, read as `S` interleaved streams (its `S` equal parts advancing together, 16
/// lanes each). One sequential stream per core can leave the memory system idle between
/// misses, while the matmul kernels read several weight rows at once; which count of
/// streams the prefetchers serve best differs between machines, so the probe tries several.
fn sum_streams<const S: usize>(x: &[f32]) -> f32 {
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

// ANCHOR: matvec_probe
/// Columns of the probe matrix: the hidden size of the bench model (a decode step's
/// projections and LM head have rows of this length).
const PROBE_COLS: usize = 2048;

/// Names of the two matvec patterns.
pub const IN_MEMORY_PATTERN: &str = "matvec (bf16, engine kernel)";
pub const MAPPED_PATTERN: &str = "matvec over mmap'd file (page cache resident)";

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

/// GB/s of [`Matrix::matmul`] with one input row over `weights` (`rows` × [`PROBE_COLS`]),
/// its rows split over the current rayon pool's threads as the engine splits them: the
/// matrix's bytes over the time, best of [`PASSES`] after one untimed pass (pages resident,
/// threads awake).
fn time_matvec(weights: &[half::bf16], rows: usize) -> f64 {
    let x: Vec<f32> = (0..PROBE_COLS).map(|i| (i % 13) as f32 / 13.0).collect();
    let mut out = vec![0.0f32; rows];
    let m = Matrix::bf16(weights, rows, PROBE_COLS);
    m.matmul(&x, &mut out);
    let mut best = 0.0f64;
    for _ in 0..PASSES {
        let t = Instant::now();
        m.matmul(&x, &mut out);
        best = best.max((weights.len() * 2) as f64 / t.elapsed().as_secs_f64() / 1e9);
    }
    std::hint::black_box(&out);
    best
}

/// The decode step's own access pattern over a matrix of about `bytes` in anonymous memory.
pub fn matvec_in_memory(bytes: usize) -> ReadPattern {
    let (weights, rows) = probe_matrix(bytes);
    ReadPattern {
        name: IN_MEMORY_PATTERN.into(),
        gb_s: time_matvec(&weights, rows),
    }
}

/// The same over the matrix written once to a temporary file and memory-mapped, as a
/// checkpoint is read; the file was just written, so its pages are in the page cache, and
/// the untimed pass maps them all before the timed ones.
pub fn matvec_mapped(bytes: usize) -> Result<ReadPattern> {
    let (weights, rows) = probe_matrix(bytes);
    // The process id and a per-process count: two probes (tests in threads) never collide.
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let nth = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let name = format!("anatomy-bench-probe-{}-{nth}.bin", std::process::id());
    let file = TempFile(std::env::temp_dir().join(name));
    let write_err = |source| Error::Write {
        path: file.0.clone(),
        source,
    };
    {
        use std::io::Write;
        // create_new: never follows or truncates a file (or link) someone left there.
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&file.0)
            .map_err(write_err)?;
        f.write_all(bytemuck::cast_slice(&weights))
            .map_err(write_err)?;
    }
    let len = weights.len();
    drop(weights);
    let read_err = |source| Error::Io {
        path: file.0.clone(),
        source,
    };
    let f = std::fs::File::open(&file.0).map_err(read_err)?;
    // SAFETY: the file is the one just created with `create_new` under this process's id
    // and count; nothing in this process writes it while the map lives, and `TempFile`
    // removes it only after the map is dropped, so the mapped bytes stay valid and fixed
    // (only another process deliberately writing this private file could change them, the
    // same assumption every memory-mapped checkpoint of the crate makes).
    let map = unsafe { memmap2::Mmap::map(&f) }.map_err(read_err)?;
    let mapped: &[half::bf16] = bytemuck::try_cast_slice(&map[..]).map_err(|e| {
        read_err(std::io::Error::other(format!(
            "mapped bytes are not bf16s: {e}"
        )))
    })?;
    if mapped.len() != len {
        return Err(read_err(std::io::Error::other("mapped length differs")));
    }
    let gb_s = time_matvec(mapped, rows);
    drop(map);
    Ok(ReadPattern {
        name: MAPPED_PATTERN.into(),
        gb_s,
    })
}

/// A temporary file removed when dropped (also on an error's early return).
struct TempFile(PathBuf);

impl Drop for TempFile {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}
// ANCHOR_END: matvec_probe

/// Iterations of each register-resident peak loop.
const PEAK_ITERS: u64 = 20_000_000;

/// Best-of-3 rate (G per second) of `threads` threads each running `body`, which returns the
/// operations it did (0 when its instructions are missing).
fn peak(threads: usize, body: fn(u64, u32) -> f64) -> f64 {
    let mut best = 0.0f64;
    for _ in 0..3 {
        let t = Instant::now();
        let ops: f64 = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..threads)
                .map(|i| sc.spawn(move || body(PEAK_ITERS, i as u32)))
                .collect();
            hs.into_iter().map(|h| h.join().unwrap_or(0.0)).sum()
        });
        best = best.max(ops / t.elapsed().as_secs_f64() / 1e9);
    }
    best
}

// ANCHOR: fma_peak
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
    peak(threads, fma_loop)
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
    iters as f64 * 8.0 * 2.0
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

/// The int8 dot-product instructions this CPU has: "avx512vnni" (`vpdpbusd`, 512 bits),
/// "avxvnni" (`vpdpbusd`, 256 bits), "avx2" (`vpmaddubsw` + `vpmaddwd` + `vpaddd`), or
/// "not supported by this CPU".
pub fn int8_kernel() -> &'static str {
    #[cfg(target_arch = "x86_64")]
    {
        if is_x86_feature_detected!("avx512vnni") && is_x86_feature_detected!("avx512f") {
            return "avx512vnni";
        }
        if is_x86_feature_detected!("avxvnni") && is_x86_feature_detected!("avx2") {
            return "avxvnni";
        }
        if is_x86_feature_detected!("avx2") {
            return "avx2";
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

/// Int8 GOP/s (a multiply-add of a u8 by an i8 counts 2 ops), all `threads`; `None` when
/// the CPU has none of the instructions.
pub fn int8_peak(threads: usize) -> Option<f64> {
    (int8_kernel() != NOT_SUPPORTED).then(|| peak(threads, int8_loop))
}

/// Bf16 GFLOP/s of `vdpbf16ps` (2 FLOPs per bf16 pair), all `threads`; `None` without it.
pub fn bf16_peak(threads: usize) -> Option<f64> {
    (bf16_kernel() != NOT_SUPPORTED).then(|| peak(threads, bf16_loop))
}

/// Runs the loop of [`int8_kernel`]; returns the ops done (0 without the instructions).
fn int8_loop(iters: u64, seed: u32) -> f64 {
    #[cfg(target_arch = "x86_64")]
    match int8_kernel() {
        "avx512vnni" => {
            // SAFETY: `int8_kernel` returns "avx512vnni" only after detecting AVX-512F and
            // AVX-512 VNNI, the features the function is compiled with.
            std::hint::black_box(unsafe { int8_loop_avx512vnni(iters, seed) });
            // 10 chains × 64 byte pairs × 2 ops.
            return iters as f64 * 10.0 * 64.0 * 2.0;
        }
        "avxvnni" => {
            // SAFETY: `int8_kernel` returns "avxvnni" only after detecting AVX2 and
            // AVX-VNNI, the features the function is compiled with.
            std::hint::black_box(unsafe { int8_loop_avxvnni(iters, seed) });
            return iters as f64 * 10.0 * 32.0 * 2.0;
        }
        "avx2" => {
            // SAFETY: `int8_kernel` returns "avx2" only after detecting AVX2, the feature
            // the function is compiled with.
            std::hint::black_box(unsafe { int8_loop_avx2(iters, seed) });
            // 12 chains × 32 byte pairs × 2 ops.
            return iters as f64 * 12.0 * 32.0 * 2.0;
        }
        _ => {}
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
        // 10 chains × 32 bf16 pairs × 2 FLOPs.
        return iters as f64 * 10.0 * 32.0 * 2.0;
    }
    let _ = (iters, seed);
    0.0
}

// ANCHOR: dot_peaks
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
    let mut r = [_mm256_set1_epi32(seed as i32); 10];
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
    let mut r = [_mm512_set1_epi32(seed as i32); 10];
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
    let mut r = [_mm512_set1_ps(seed as f32); 10];
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
// ANCHOR_END: dot_peaks

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stream_count_sums_the_same() {
        let x: Vec<f32> = (0..10_000).map(|i| (i % 3) as f32).collect();
        let want: f32 = x.iter().sum();
        for s in [
            sum_streams::<1>(&x),
            sum_streams::<8>(&x),
            sum_streams::<16>(&x),
            sum_streams::<32>(&x),
        ] {
            assert_eq!(s, want);
        }
    }

    /// Every path this CPU supports runs and reports positive rates; the missing ones say so.
    #[test]
    fn peaks_run_on_every_supported_path() {
        assert!(fma_peak(1) > 0.0, "{}", fma_kernel());
        match int8_peak(1) {
            Some(g) => assert!(g > 0.0 && g.is_finite(), "{} {g}", int8_kernel()),
            None => assert_eq!(int8_kernel(), NOT_SUPPORTED),
        }
        match bf16_peak(1) {
            Some(g) => assert!(g > 0.0 && g.is_finite(), "{} {g}", bf16_kernel()),
            None => assert_eq!(bf16_kernel(), NOT_SUPPORTED),
        }
        #[cfg(target_arch = "x86_64")]
        if is_x86_feature_detected!("avx2") {
            // The fallback below the VNNI paths, run whatever the CPU's best is.
            // SAFETY: AVX2 was detected on the line above.
            let s = unsafe { int8_loop_avx2(1000, 1) };
            std::hint::black_box(s);
        }
    }

    #[test]
    fn matvec_patterns_run_on_a_tiny_matrix() {
        let p = [matvec_in_memory(1 << 20), matvec_mapped(1 << 20).unwrap()];
        for r in &p {
            assert!(r.gb_s > 0.0 && r.gb_s.is_finite(), "{r:?}");
        }
    }
}
