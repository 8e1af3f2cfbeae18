//! Read rates of the decode kernels (chapter 10's Reproducing page, "What limits decode"):
//! one token through a large matrix of each weight type, in GB/s of wall-clock time, beside
//! a plain read of the same bytes by the bench's own probe loop; then eight experts' shapes
//! as one grouped call, as a decode step runs them.
//!
//! ```text
//! cargo run --release --example matvec_rates            # MB=512 PASSES=15 by default
//! RAYON_NUM_THREADS=1 cargo run --release --example matvec_rates
//! COLS=640 MB=178 cargo run --release --example matvec_rates  # Gemma 3 270M's LM head
//! ONLY=q4_1 PASSES=2000 cargo run --release --example matvec_rates  # one type, no experts
//! KB=384 ONLY=q6_K PASSES=20000 cargo run --release --example matvec_rates  # from L2
//! ```
use llm_anatomy::bench::probes::read::{read_isa, xor_streams};
use llm_anatomy::kernels::matmul::{Group, matmul_grouped};
use llm_anatomy::kernels::{Matrix, WeightData};
use llm_anatomy::quant::{GgmlType, quantize};
use std::time::Instant;

const COLS: usize = 2048;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Best and median GB/s of `passes` timed calls of `f`, each moving `bytes`.
fn rate(passes: usize, bytes: usize, mut f: impl FnMut()) -> (f64, f64) {
    let mut v: Vec<f64> = (0..passes)
        .map(|_| {
            let t = Instant::now();
            f();
            bytes as f64 / t.elapsed().as_secs_f64() / 1e9
        })
        .collect();
    v.sort_by(f64::total_cmp);
    (v[v.len() - 1], v[v.len() / 2])
}

/// `rows × cols` weights of `ty` as stored bytes: 64 quantised rows repeated (the rate does
/// not depend on the values), or bf16 values.
fn matrix_bytes(ty: GgmlType, rows: usize, cols: usize) -> Vec<u8> {
    let w: Vec<f32> = (0..64 * cols)
        .map(|i| ((i * 7919 % 211) as f32 - 105.0) / 300.0)
        .collect();
    let mut block = Vec::new();
    match ty {
        GgmlType::Bf16 => {
            block = w
                .iter()
                .flat_map(|&v| half::bf16::from_f32(v).to_le_bytes())
                .collect()
        }
        _ => quantize(ty, &w, &mut block),
    }
    let row_bytes = block.len() / 64;
    block
        .iter()
        .copied()
        .cycle()
        .take(row_bytes * rows)
        .collect()
}

fn matrix(ty: GgmlType, bytes: &[u8], rows: usize, cols: usize) -> Matrix<'_> {
    match ty {
        GgmlType::Bf16 => Matrix {
            data: WeightData::Bf16(bytemuck::cast_slice(bytes)),
            rows,
            cols,
        },
        _ => Matrix::quant(ty, bytes, rows, cols),
    }
}

fn main() {
    let passes = env_or("PASSES", 15);
    // KB (KiB) overrides MB: a matrix that fits in L2 times the kernel, not the memory.
    let kib = env_or("KB", env_or("MB", 512).saturating_mul(1024));
    let threads = rayon::current_num_threads();
    // The one-token matmuls' row length; a type whose blocks do not divide it is skipped,
    // and the experts keep theirs.
    let width = env_or("COLS", COLS);
    let only = std::env::var("ONLY").ok();
    assert!(width > 0, "COLS must be at least one block");
    println!(
        "{threads} thread(s), {kib} KiB matrices of {width} columns, best / median of {passes}"
    );
    let x: Vec<f32> = (0..8 * COLS.max(width))
        .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
        .collect();
    for ty in [
        GgmlType::Bf16,
        GgmlType::Q8_0,
        GgmlType::Q4_K,
        GgmlType::Q6_K,
        GgmlType::Q4_0,
        GgmlType::Q4_1,
        GgmlType::Q5_0,
        GgmlType::Q5_1,
    ] {
        // Rows of `width` columns hold whole blocks of this type, or it is skipped.
        let Some(row_bytes) = ty.row_bytes(width as u64) else {
            continue;
        };
        if only.as_deref().is_some_and(|name| name != ty.name()) {
            continue;
        }
        let row_bytes = row_bytes as usize;
        let rows = kib.saturating_mul(1024) / row_bytes;
        let bytes = matrix_bytes(ty, rows, width);
        let m = matrix(ty, &bytes, rows, width);
        let mut out = vec![0.0f32; rows];
        let (best, median) = rate(passes, bytes.len(), || m.matmul(&x[..width], &mut out));
        println!(
            "{:>5} one-token matmul: {best:5.1} / {median:5.1} GB/s",
            ty.name()
        );
        if ty == GgmlType::Bf16 {
            let words: &[u32] = bytemuck::cast_slice(&bytes);
            let chunk = words.len().div_ceil(threads);
            let (best, median) = rate(passes, bytes.len(), || {
                rayon::scope(|s| {
                    for part in words.chunks(chunk) {
                        s.spawn(move |_| {
                            std::hint::black_box(xor_streams::<4, 0>(part, read_isa()));
                        });
                    }
                })
            });
            println!(" read same bytes, 4 streams a thread: {best:5.1} / {median:5.1} GB/s");
        }
    }
    if only.is_some() {
        return;
    }
    // Eight of 128 experts, one token each, as one grouped call (bf16 gate/up, then down).
    for (rows, cols) in [(768, 2048), (2048, 768)] {
        let per = rows * cols * 2;
        let bytes = matrix_bytes(GgmlType::Bf16, 128 * rows * cols / COLS, COLS);
        let groups: Vec<Group> = (0..8)
            .map(|i| Group {
                matrix: i,
                first_in: i,
                n: 1,
                first_out: i,
            })
            .collect();
        let mut out = vec![0.0f32; 8 * rows];
        let mut call = 0usize;
        let (best, median) = rate(passes * 10, 8 * per, || {
            call += 1;
            let pick = |i: usize| (call * 37 + i * 16) % 128;
            let m = |i: usize| matrix(GgmlType::Bf16, &bytes[pick(i) * per..][..per], rows, cols);
            matmul_grouped(m, &groups, &x[..8 * cols], &mut out);
        });
        println!("8 experts {rows}×{cols} bf16, grouped: {best:5.1} / {median:5.1} GB/s");
    }
}
