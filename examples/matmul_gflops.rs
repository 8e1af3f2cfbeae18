//! Prefill-sized matmuls of the block formats that have AVX2 int8 tiles (Q8_0, Q4_K, Q6_K),
//! in GFLOP/s, best of many calls, through both paths a group can take: the int8 tiles
//! (activations quantised) and the f32 tiles (each row block dequantised once). Shapes: an
//! expert's at group sizes around the switch between the paths
//! (`kernels::dispatch::INT8_TILED_MAX_TOKENS`), and an attention projection at 512 tokens
//! (chapter 10's Reproducing page).
//!
//! ```text
//! RAYON_NUM_THREADS=1 cargo run --release --example matmul_gflops
//! ```
use llm_anatomy::kernels::Matrix;
use llm_anatomy::kernels::quant::with_quant_activations;
use llm_anatomy::quant::{GgmlType, quantize};
use std::time::Instant;

/// Best GFLOP/s of `m · x` for `n` token rows, with the int8 path forced on or off.
fn gflops(m: &Matrix, rows: usize, cols: usize, n: usize, int8: bool) -> f64 {
    let x: Vec<f32> = (0..n * cols)
        .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
        .collect();
    let mut out = vec![0.0f32; n * rows];
    let best = with_quant_activations(int8, || {
        (0..(10240 / n).max(5))
            .map(|_| {
                let t = Instant::now();
                m.matmul(&x, &mut out);
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min)
    });
    2.0 * (rows * cols * n) as f64 / best / 1e9
}

fn main() {
    // (rows, cols, token counts): an expert's matrix around the switch, and an attention
    // projection at 512 tokens. Each shape is quantised once per type.
    let shapes: [(usize, usize, &[usize]); 2] = [
        (
            768,
            2048,
            &[2, 3, 4, 5, 7, 8, 9, 12, 16, 20, 24, 32, 40, 64],
        ),
        (4096, 2048, &[512]),
    ];
    println!(
        "{} thread(s); GFLOP/s, int8 tiles / f32 tiles",
        rayon::current_num_threads()
    );
    // An argument (`q4_K`, …) keeps one type.
    let only = std::env::args().nth(1);
    let types = [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K];
    for ty in types
        .into_iter()
        .filter(|t| only.as_deref().is_none_or(|o| o == t.name()))
    {
        for (rows, cols, counts) in shapes {
            let w: Vec<f32> = (0..rows * cols)
                .map(|i| ((i * 7919 % 211) as f32 - 105.0) / 300.0)
                .collect();
            let mut bytes = Vec::new();
            quantize(ty, &w, &mut bytes);
            let m = Matrix::quant(ty, &bytes, rows, cols);
            for &n in counts {
                let int8 = gflops(&m, rows, cols, n, true);
                let f32 = gflops(&m, rows, cols, n, false);
                let name = ty.name();
                println!("{name} {rows} × {cols}, {n:3} tokens: {int8:5.1} / {f32:5.1}");
            }
        }
    }
}
