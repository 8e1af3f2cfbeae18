//! The grouped matmul pinned to the reference `matvec`, and its job sizes.

use super::*;
use crate::kernels::bf16::Bf16Mode;
use crate::quant::{ALL_TYPES, GgmlType, QK_K};

fn bound(w: &[f32], x: &[f32]) -> f32 {
    let abs: f32 = w.iter().zip(x).map(|(a, b)| (a * b).abs()).sum();
    2.0 * w.len() as f32 * f32::EPSILON * abs
}

/// `matmul` equals the reference `matvec` token by token, for every dtype and for
/// shapes that exercise every tile size and the scalar column tail.
#[test]
fn matmul_equals_reference_matvec() {
    for &(rows, cols, n) in &[
        (1, 3, 1),
        (7, 8, 1),
        // One token over columns in sixteens: the bf16 decode kernel, with rows that
        // fill its four streams and rows left over (with and without AVX-512).
        (3, 16, 1),
        (37, 48, 1),
        (32, 2048, 1),
        (37, 24, 5),
        (70, 131, 9),
        (65, 2048, 67),
        // The panel kernel: columns not a multiple of 16 or of its column block,
        // partial panels (one of at most 16 tokens: the AVX2 kernel's single half),
        // row blocks that end in an odd row (its padded tile), the AVX2 threshold
        // (12), AVX-512's for f32 (24) and for the others (40); a last 1–8 tokens of a
        // panel (AVX2's 8-token tile) under row blocks of 31 and 5 rows.
        (31, 40, 21),
        (5, 33, 17),
        (33, 150, 45),
        (50, 16, 24),
        (9, 300, 40),
        (13, 64, 12),
    ] {
        let wf: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
            .collect();
        let wb: Vec<half::bf16> = wf.iter().map(|&v| half::bf16::from_f32(v)).collect();
        let wh: Vec<half::f16> = wf.iter().map(|&v| half::f16::from_f32(v)).collect();
        let xs: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
            .collect();
        for m in [
            Matrix::f32(&wf, rows, cols),
            Matrix::bf16(&wb, rows, cols),
            Matrix::f16(&wh, rows, cols),
        ] {
            // The AVX-512 widening tiles too where the native bf16 kernels would run.
            for (avx512, widen) in [(false, false), (true, false), (true, true)] {
                let mut fast = vec![0.0f32; n * rows];
                if widen {
                    bf16::with_bf16_mode(None, || m.matmul_with(&xs, &mut fast, avx512));
                } else {
                    m.matmul_with(&xs, &mut fast, avx512);
                }
                let mut row = vec![0.0f32; cols];
                for t in 0..n {
                    let x = &xs[t * cols..(t + 1) * cols];
                    let mut reference = vec![0.0f32; rows];
                    m.matvec(x, &mut reference);
                    for r in 0..rows {
                        m.row_into(r, &mut row);
                        let (a, b) = (fast[t * rows + r], reference[r]);
                        assert!(
                            (a - b).abs() <= bound(&row, x),
                            "{rows}x{cols} n={n} [{t},{r}]: {a} vs {b}"
                        );
                    }
                }
            }
        }
    }
}

/// The outer-product kernels of both widths sum each output in the same order, so on a
/// CPU with AVX-512 the AVX2 panels (the tiles without AVX-512) give the AVX-512
/// panels' bits. Skipped where the CPU lacks AVX-512F (the AVX2 kernel alone is held
/// to the reference by `matmul_equals_reference_matvec`).
#[test]
fn panels_of_both_widths_give_the_same_bits() {
    if !crate::kernels::policy::cpu().avx512f {
        eprintln!("panels_of_both_widths_give_the_same_bits: no AVX-512F here, skipped");
        return;
    }
    for &(rows, cols, n) in &[(33, 150, 45), (65, 2048, 67), (9, 300, 40), (40, 131, 97)] {
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 37 % 101) as f32 - 50.0) / 64.0)
            .collect();
        let xs: Vec<f32> = (0..n * cols)
            .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
            .collect();
        let m = Matrix::f32(&w, rows, cols);
        let (mut wide, mut narrow) = (vec![0.0f32; n * rows], vec![0.0f32; n * rows]);
        m.matmul_with(&xs, &mut wide, true);
        m.matmul_with(&xs, &mut narrow, false);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&wide), bits(&narrow), "{rows}x{cols} n={n}");
    }
}

/// The native bf16 kernels (both activation modes, the dot tiles and the pair panels)
/// against the exact dot in f64 of the bf16 weights and the activations the mode
/// defines: `x` itself for Split, `bf16(x)` for Round. A lane's chain of rounded
/// additions is at most `3·cols` long (two roundings per `vdpbf16ps` pair, three
/// pieces in Split) plus 4 of the horizontal sum, so the bound is `(3·cols + 8)·ε·Σ|w·x|`,
/// plus Split's representation error `2⁻²⁷·Σ|w·x|`. (`vdpbf16ps` flushes subnormal
/// inputs; the test's values have none.) Skipped where the CPU lacks AVX512_BF16.
#[test]
fn bf16_native_kernels_equal_the_exact_dot() {
    use bf16::with_bf16_mode;
    if !bf16::available() {
        eprintln!("bf16_native_kernels_equal_the_exact_dot: no AVX512_BF16 here, skipped");
        return;
    }
    for &(rows, cols, n) in &[
        (1, 3, 1),
        (7, 40, 1),
        (37, 131, 5),
        (70, 2048, 1),
        (65, 2048, 67),
        (33, 150, 45),
        (9, 300, 40),
        (40, 131, 41),
    ] {
        let wb: Vec<half::bf16> = (0..rows * cols)
            .map(|i| half::bf16::from_f32(((i * 37 % 101) as f32 - 50.0) / 61.0))
            .collect();
        let xs: Vec<f32> = (0..n * cols)
            .map(|i| ((i as f32) * 0.7311).sin() * 3.1)
            .collect();
        let m = Matrix::bf16(&wb, rows, cols);
        for mode in [Bf16Mode::Split, Bf16Mode::Round] {
            let mut fast = vec![0.0f32; n * rows];
            with_bf16_mode(Some(mode), || m.matmul_with(&xs, &mut fast, true));
            for t in 0..n {
                for r in 0..rows {
                    let (mut exact, mut abs) = (0.0f64, 0.0f64);
                    for c in 0..cols {
                        let x = xs[t * cols + c];
                        let x = match mode {
                            Bf16Mode::Split => x,
                            Bf16Mode::Round => half::bf16::from_f32(x).to_f32(),
                        };
                        let p = wb[r * cols + c].to_f32() as f64 * x as f64;
                        exact += p;
                        abs += p.abs();
                    }
                    let split = if mode == Bf16Mode::Split {
                        2f64.powi(-27)
                    } else {
                        0.0
                    };
                    let bound = ((3 * cols + 8) as f64 * f32::EPSILON as f64 + split) * abs;
                    let got = fast[t * rows + r] as f64;
                    assert!(
                        (got - exact).abs() <= bound,
                        "{mode:?} {rows}x{cols} n={n} [{t},{r}]: {got} vs {exact} (bound {bound:e})"
                    );
                }
            }
        }
    }
}

/// A block-format matrix (every ggml type): quantised by `quant::quantize`, with its
/// dequantised f32 copy, the reference the Quant paths are pinned to.
fn quantised(ty: GgmlType, rows: usize, cols: usize) -> (Vec<u8>, Vec<f32>) {
    let w: Vec<f32> = (0..rows * cols)
        .map(|i| (((i * 7919) % 211) as f32 - 105.0) / 97.0 * (1.0 + (i % 13) as f32))
        .collect();
    let mut bytes = Vec::new();
    crate::quant::quantize(ty, &w, &mut bytes);
    let mut f = vec![0.0f32; rows * cols];
    crate::quant::dequantize(ty, &bytes, &mut f);
    (bytes, f)
}

#[test]
fn quant_paths_equal_the_dequantised_reference() {
    for ty in ALL_TYPES {
        let bs = ty.block_size();
        let shapes: &[(usize, usize)] = if bs == QK_K {
            &[(37, 256), (33, 768)]
        } else {
            &[(37, 96), (70, 288), (9, 256)]
        };
        for &(rows, cols) in shapes {
            let (bytes, f) = quantised(ty, rows, cols);
            let q = Matrix::quant(ty, &bytes, rows, cols);
            let reference = Matrix::f32(&f, rows, cols);
            // Spans: whole rows, inside one block, across block edges, the row's end.
            let mut out = vec![0.0f32; cols];
            for (r, c0, len) in [
                (0, 0, cols),
                (rows - 1, 3, 5),
                (1, bs - 1, 2),
                (2, cols - 7, 7),
            ] {
                let len = len.min(cols - c0);
                q.row_slice_into(r, c0, &mut out[..len]);
                assert_eq!(
                    &out[..len],
                    &f[r * cols + c0..][..len],
                    "{ty:?} row {r} {c0}+{len}"
                );
            }
            let block = q.row_block(3, 4);
            block.row_into(2, &mut out);
            assert_eq!(out, f[5 * cols..6 * cols], "{ty:?} row_block");
            for n in [1, 5, 45] {
                let xs: Vec<f32> = (0..n * cols)
                    .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
                    .collect();
                for avx512 in [false, true] {
                    let mut fast = vec![0.0f32; n * rows];
                    // The f32 path (the int8 one is pinned in quant.rs and quant/tiles.rs).
                    quant::with_quant_activations(false, || q.matmul_with(&xs, &mut fast, avx512));
                    for t in 0..n {
                        let x = &xs[t * cols..(t + 1) * cols];
                        let (mut clear, mut exact) = (vec![0.0; rows], vec![0.0; rows]);
                        q.matvec(x, &mut clear);
                        reference.matvec(x, &mut exact);
                        for r in 0..rows {
                            let b = bound(&f[r * cols..(r + 1) * cols], x);
                            let (a, c, e) = (fast[t * rows + r], clear[r], exact[r]);
                            assert!(
                                (a - e).abs() <= b,
                                "{ty:?} {rows}x{cols} fast [{t},{r}]: {a} vs {e}"
                            );
                            assert!(
                                (c - e).abs() <= b,
                                "{ty:?} {rows}x{cols} clear [{t},{r}]: {c} vs {e}"
                            );
                        }
                    }
                }
            }
        }
    }
}

#[test]
fn a_non_finite_block_scale_is_found() {
    let (mut bytes, _) = quantised(GgmlType::Q8_0, 4, 64);
    // Row 2's second block (34 bytes a block, 2 blocks a row): its f16 scale is NaN.
    let at = 2 * 68 + 34;
    bytes[at..at + 2].copy_from_slice(&half::f16::NAN.to_bits().to_le_bytes());
    let q = Matrix::quant(GgmlType::Q8_0, &bytes, 4, 64);
    assert_eq!(q.find_non_finite(), Some((2, 32)));
}

/// A decode job fills its bytes on one thread, leaves each of two threads its share of
/// jobs, and stays inside its row bounds.
#[test]
fn decode_jobs_fill_their_bytes_and_share_the_threads() {
    // One thread: the bytes decide (an LM head of 680-byte rows).
    let one = decode_job_rows(680, 262_144, 1);
    assert_eq!(one, DECODE_JOB_BYTES / 680);
    assert!(one * 680 <= DECODE_JOB_BYTES && (one + 1) * 680 > DECODE_JOB_BYTES);
    // Two threads, a small matrix: every thread gets its jobs.
    for rows in [64, 192, 576, 1536] {
        let per_job = decode_job_rows(360, rows, 2);
        let jobs = rows.div_ceil(per_job);
        assert!(
            jobs >= 2 * DECODE_JOBS_PER_THREAD,
            "{rows} rows: {jobs} jobs"
        );
    }
    // The bounds: tiny rows take at most MAX_DECODE_ROWS, huge ones at least MIN_DECODE_ROWS.
    assert_eq!(decode_job_rows(2, 1 << 20, 1), MAX_DECODE_ROWS);
    assert_eq!(decode_job_rows(1 << 20, 1 << 20, 1), MIN_DECODE_ROWS);
    assert_eq!(decode_job_rows(0, 10, 4), MIN_DECODE_ROWS);
}
