use super::super::{QuantizedRows, activation_block, dot_row_reference, with_quant_activations};
use super::*;
use crate::quant::{dequantize, quantize};

/// The types with VNNI tiles.
const TYPES: [GgmlType; 3] = [GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q6_K];
/// The types with VNNI row lanes: those, and the legacy 4- and 5-bit types.
const LANE_TYPES: [GgmlType; 7] = [
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
];

/// Every type the table gives VNNI kernels is tested here.
#[test]
fn every_vnni_type_is_tested() {
    for ty in crate::quant::ALL_TYPES {
        let k = crate::kernels::dispatch::kernels(ty);
        assert_eq!(
            k.vnni_from_tokens.is_some(),
            LANE_TYPES.contains(&ty),
            "{}",
            ty.name()
        );
        assert_eq!(k.vnni_tiles, TYPES.contains(&ty), "{}", ty.name());
    }
}

fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(31);
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let u = s as f32 / u32::MAX as f32 - 0.5;
            if i % 79 == 3 {
                9.0 * u * scale
            } else {
                u * scale
            }
        })
        .collect()
}

/// `rows` weight rows of `ty` and `n` quantised token rows of `cols` columns, with the
/// dequantised weights.
fn setup(
    ty: GgmlType,
    rows: usize,
    cols: usize,
    n: usize,
    seed: u32,
) -> (Vec<u8>, Vec<f32>, Vec<f32>, QuantizedRows) {
    let w = values(rows * cols, seed, 0.3);
    let mut bytes = Vec::new();
    quantize(ty, &w, &mut bytes);
    let mut wd = vec![0.0f32; w.len()];
    dequantize(ty, &bytes, &mut wd);
    let xs = values(n * cols, seed + 50, 2.0);
    let mut acts = QuantizedRows::default();
    acts.quantize(&xs, cols, activation_block(ty).unwrap());
    (bytes, wd, xs, acts)
}

/// The re-association bound of `tiles`: `4·(cols/32)·ε·Σ|w·x̂|` (the integer block sums
/// are the reference's; only the f32 scaling and additions are reordered).
fn bound(wd: &[f32], acts: &QuantizedRows, t: usize) -> f32 {
    let xd = acts.dequantize_row(t);
    let mag: f32 = wd.iter().zip(&xd).map(|(a, b)| (a * b).abs()).sum();
    4.0 * (wd.len() / 32) as f32 * f32::EPSILON * mag
}

/// Every VNNI tile shape (1..=4 rows by 1..=4 tokens, over several tiles) of each type
/// equals the reference row dots within the re-association bound, for several lengths
/// (Q8_0's 96 and 160 columns: an odd number of weight blocks, the lone last block).
#[test]
fn vnni_tiles_equal_the_reference_dots() {
    if !cpu_has_vnni() {
        eprintln!("skipped: this CPU lacks AVX512_VNNI/BW/VL");
        return;
    }
    for ty in TYPES {
        let lens: &[usize] = if ty == GgmlType::Q8_0 {
            &[96, 160, 256, 2048]
        } else {
            &[256, 768, 2048]
        };
        for (k, &cols) in lens.iter().enumerate() {
            let (nrows, n) = (7, 9);
            let (bytes, wd, _, acts) = setup(ty, nrows, cols, n, 3 + k as u32);
            let rb = bytes.len() / nrows;
            for r0 in 0..nrows {
                for t0 in 0..n {
                    // Rows r0.., tokens t0.. (every count of rows and of tokens per tile).
                    let rows = &bytes[r0 * rb..];
                    let mut got = vec![f32::NAN; (nrows - r0) * (n - t0)];
                    let m = nrows - r0;
                    assert!(dot_block(ty, rows, rb, &acts, t0..n, |t, i, v| {
                        got[t * m + i] = v
                    }));
                    for i in 0..m {
                        for t in 0..n - t0 {
                            let row = &bytes[(r0 + i) * rb..][..rb];
                            let want = dot_row_reference(ty, row, acts.row(t0 + t));
                            let v = got[t * m + i];
                            let tol = bound(&wd[(r0 + i) * cols..][..cols], &acts, t0 + t);
                            assert!(
                                (v - want).abs() <= tol,
                                "{} cols {cols} row {} token {}: {v} vs {want} (tol {tol})",
                                ty.name(),
                                r0 + i,
                                t0 + t
                            );
                        }
                    }
                }
            }
        }
    }
}

/// The matmul with the VNNI tiles forced on and off: both within the bound of the
/// reference for 1..=40 tokens (decode, the tiles, the groups above the AVX2 limit).
#[test]
fn the_matmul_with_vnni_on_and_off_equals_the_reference() {
    use crate::kernels::Matrix;
    for ty in LANE_TYPES {
        let (rows, cols) = (37, 512);
        for n in [1usize, 2, 3, 5, 8, 17, 40] {
            // `acts` is what the matmul makes of `xs` (the same quantiser).
            let (bytes, wd, xs, acts) = setup(ty, rows, cols, n, 11 + n as u32);
            let m = Matrix::quant(ty, &bytes, rows, cols);
            let rb = bytes.len() / rows;
            for on in [false, true] {
                if on && !cpu_has_vnni() {
                    eprintln!("skipped the VNNI half: this CPU lacks AVX512_VNNI/BW/VL");
                    continue;
                }
                let mut out = vec![0.0f32; n * rows];
                with_vnni(on, || {
                    with_quant_activations(true, || m.matmul(&xs, &mut out))
                });
                for t in 0..n {
                    for r in 0..rows {
                        let want = dot_row_reference(ty, &bytes[r * rb..][..rb], acts.row(t));
                        let tol = bound(&wd[r * cols..][..cols], &acts, t);
                        let v = out[t * rows + r];
                        assert!(
                            (v - want).abs() <= tol,
                            "{} vnni {on} n {n} [{t},{r}]: {v} vs {want}",
                            ty.name()
                        );
                    }
                }
            }
        }
    }
}

/// The token limit of the int8 path: LANES_MAX_TOKENS (every group) with the VNNI
/// kernels on, with them off the AVX2 tiles' limit (every group for the types with AVX2
/// row lanes).
#[test]
fn the_int8_limit_follows_the_vnni_switch() {
    use super::super::{TILED_MAX_TOKENS, int8_max_tokens};
    if crate::kernels::policy::from_env().quant_activations()
        == crate::kernels::policy::QuantActs::Off
    {
        return;
    }
    for ty in TYPES {
        // Types with AVX2 row lanes keep the int8 path up to their largest lane group.
        let lanes = crate::kernels::dispatch::kernels(ty).avx2_lanes;
        let off = match lanes {
            Some((_, to)) if crate::kernels::policy::cpu().avx2_fma() => to,
            _ => TILED_MAX_TOKENS,
        };
        assert_eq!(
            with_vnni(false, || int8_max_tokens(ty)),
            off,
            "{}",
            ty.name()
        );
        let on = with_vnni(true, || int8_max_tokens(ty));
        let want = if cpu_has_vnni() {
            LANES_MAX_TOKENS
        } else {
            off
        };
        assert_eq!(on, want, "{}", ty.name());
    }
}

/// A non-finite activation makes its token's dots NaN, in the tiles (1 row) and the lanes
/// (16 rows, 2 tokens; the other token stays finite).
#[test]
fn a_non_finite_activation_gives_nan() {
    if !cpu_has_vnni() {
        eprintln!("skipped: this CPU lacks AVX512_VNNI/BW/VL");
        return;
    }
    for ty in LANE_TYPES {
        for (nrows, n) in [(1usize, 1usize), (16, 2), (16, 5)] {
            let (bytes, _, mut x, mut acts) = setup(ty, nrows, 256, n, 1);
            x[40] = f32::NAN;
            acts.quantize(&x, 256, activation_block(ty).unwrap());
            let mut got = vec![0.0f32; nrows * n];
            assert!(dot_block(
                ty,
                &bytes,
                bytes.len() / nrows,
                &acts,
                0..n,
                |t, i, v| { got[t * nrows + i] = v }
            ));
            assert!(
                got[..nrows].iter().all(|v| v.is_nan()),
                "{} rows {nrows}",
                ty.name()
            );
            assert!(
                got[nrows..].iter().all(|v| v.is_finite()),
                "{} rows {nrows}",
                ty.name()
            );
        }
    }
}

/// The VNNI kernels against the AVX2 int8 path and the f32 path on expert-sized matrices,
/// one thread, best of three interleaved rounds (`cargo test --release --lib vnni_timing -- --ignored --nocapture`).
#[test]
#[ignore]
fn vnni_timing() {
    use crate::kernels::Matrix;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    for (rows, cols) in [(768, 2048), (2048, 768)] {
        let w: Vec<f32> = (0..rows * cols)
            .map(|i| ((i * 7919 % 211) as f32 - 105.0) / 300.0)
            .collect();
        for ty in TYPES {
            let mut bytes = Vec::new();
            quantize(ty, &w, &mut bytes);
            let m = Matrix::quant(ty, &bytes, rows, cols);
            for n in [1usize, 2, 4, 16, 32, 48, 64, 128, 512] {
                let xs: Vec<f32> = (0..n * cols)
                    .map(|i| ((i * 53 % 97) as f32 - 48.0) / 32.0)
                    .collect();
                let mut out = vec![0.0f32; n * rows];
                // The best of three rounds, the paths interleaved (the machine may be busy).
                let mut rate = [0.0f64; 3];
                for _round in 0..3 {
                    for (k, (vnni, int8)) in [(true, true), (false, true), (false, false)]
                        .into_iter()
                        .enumerate()
                    {
                        let reps = (512 / n).max(4);
                        pool.install(|| {
                            let run = |out: &mut [f32]| {
                                with_vnni(vnni, || {
                                    with_quant_activations(int8, || m.matmul(&xs, out))
                                })
                            };
                            run(&mut out);
                            let t0 = std::time::Instant::now();
                            for _ in 0..reps {
                                run(&mut out);
                            }
                            let r = (reps * n) as f64 / t0.elapsed().as_secs_f64();
                            rate[k] = rate[k].max(r);
                        });
                    }
                }
                eprintln!(
                    "{rows}x{cols} {} n={n}: vnni {:.0} tok/s, avx2 int8 {:.0} tok/s, f32 {:.0} tok/s",
                    ty.name(),
                    rate[0],
                    rate[1],
                    rate[2]
                );
            }
        }
    }
}

/// The row-lane kernels (16 rows a pass, `lanes.rs`) through `dot_block`: 16 and 37 rows
/// (two passes and 5 rows left to the tiles), 2..=9 tokens and 70 (two token passes),
/// each value within the bound of the reference dot (Q8_0 also at 160 columns: 5 blocks).
#[test]
fn lanes_equal_the_reference_dots() {
    if !cpu_has_vnni() {
        eprintln!("skipped: this CPU lacks AVX512_VNNI/BW/VL");
        return;
    }
    for ty in LANE_TYPES {
        let lens: &[usize] = if ty == GgmlType::Q8_0 {
            &[160, 256, 2048]
        } else {
            &[256, 768, 2048]
        };
        for (k, &cols) in lens.iter().enumerate() {
            for nrows in [16usize, 37] {
                for n in (LANES_MIN_TOKENS..=9).chain([70]) {
                    let seed = 90 + k as u32 + n as u32;
                    let (bytes, wd, _, acts) = setup(ty, nrows, cols, n, seed);
                    let rb = bytes.len() / nrows;
                    let mut got = vec![f32::NAN; nrows * n];
                    assert!(dot_block(ty, &bytes, rb, &acts, 0..n, |t, i, v| {
                        got[t * nrows + i] = v
                    }));
                    for i in 0..nrows {
                        for t in 0..n {
                            let row = &bytes[i * rb..][..rb];
                            let want = dot_row_reference(ty, row, acts.row(t));
                            let v = got[t * nrows + i];
                            let tol = bound(&wd[i * cols..][..cols], &acts, t);
                            assert!(
                                (v - want).abs() <= tol,
                                "{} cols {cols} rows {nrows} n {n} [{t},{i}]: {v} vs {want} (tol {tol})",
                                ty.name()
                            );
                        }
                    }
                }
            }
        }
    }
}
