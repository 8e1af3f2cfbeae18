//! Prefill-sized Q8_0 matmuls through the f32 tiles (each row block dequantised once), in
//! GFLOP/s, best of many calls: the expert shapes at a prefill's typical group sizes and an
//! attention projection at 512 tokens (chapter 10's Reproducing page).
//!
//! ```text
//! RAYON_NUM_THREADS=1 cargo run --release --example matmul_gflops
//! ```
use llm_anatomy::kernels::Matrix;
use llm_anatomy::quant::{GgmlType, quantize};
use std::time::Instant;

fn main() {
    let shapes = [
        (768, 2048, 32),
        (768, 2048, 64),
        (2048, 768, 32),
        (4096, 2048, 512),
    ];
    println!("{} thread(s)", rayon::current_num_threads());
    for (rows, cols, n) in shapes {
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 211) as f32 - 105.0) / 300.0)
            .collect();
        let mut bytes = Vec::new();
        quantize(GgmlType::Q8_0, &w, &mut bytes);
        let m = Matrix::quant(GgmlType::Q8_0, &bytes, rows, cols);
        let x: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
            .collect();
        let mut out = vec![0.0f32; n * rows];
        let best = (0..(10240 / n).max(5))
            .map(|_| {
                let t = Instant::now();
                m.matmul(&x, &mut out);
                t.elapsed().as_secs_f64()
            })
            .fold(f64::MAX, f64::min);
        let gflops = 2.0 * (rows * cols * n) as f64 / best / 1e9;
        println!("{rows} × {cols} Q8_0, {n} tokens: {gflops:5.1} GFLOP/s");
    }
}
