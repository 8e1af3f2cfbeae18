//! Tests of the decode rows: each kernel against the reference dot, at the integer bounds,
//! with non-finite activations, and the two forms of the K and legacy types bit for bit.

use super::super::{QuantizedRows, activation_block, dot_row_reference};
use super::*;
use crate::quant::{dequantize, quantize};

const DECODE_TYPES: [GgmlType; 7] = [
    GgmlType::Q8_0,
    GgmlType::Q4_K,
    GgmlType::Q6_K,
    GgmlType::Q4_0,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_1,
];

/// Every type the table gives decode rows is in the tests' list.
#[test]
fn every_decode_type_is_tested() {
    for ty in crate::quant::ALL_TYPES {
        if crate::kernels::dispatch::kernels(ty).avx2_decode_rows {
            assert!(DECODE_TYPES.contains(&ty), "{}", ty.name());
        }
    }
}

/// The `wide` settings worth testing here: both where the CPU has AVX-512 VNNI (the
/// 512-bit rows of Q8_0, the K and legacy types' `vpdpbusd` sums), else the AVX2 rows
/// alone.
fn widths() -> Vec<bool> {
    if has_wide_decode() {
        vec![false, true]
    } else {
        vec![false]
    }
}

/// Every form of a type's rows gives the same bits: the K and legacy types' and Q8_0's
/// 256-bit rows with `vpdpbusd` as with `vpmaddubsw` and `vpmaddwd` (the same integers,
/// then the same f32 steps), and Q8_0's 256-bit rows as its 512-bit ones (the same lanes
/// and order), with an even and an odd number of blocks.
#[test]
fn every_form_of_the_rows_gives_the_same_bits() {
    if !has_wide_decode() {
        return;
    }
    const ROWS: usize = 5;
    for ty in DECODE_TYPES {
        let k_type = matches!(ty, GgmlType::Q4_K | GgmlType::Q6_K);
        for cols in if k_type { vec![2048] } else { vec![2048, 2080] } {
            let w = values(ROWS * cols, 9, 0.3);
            let mut bytes = Vec::new();
            quantize(ty, &w, &mut bytes);
            let mut acts = QuantizedRows::default();
            acts.quantize(&values(cols, 49, 2.0), cols, activation_block(ty).unwrap());
            let rb = bytes.len() / ROWS;
            let bits = |form: usize| {
                let mut out = [0.0f32; ROWS];
                match form {
                    0 | 1 => avx2::dot_rows(ty, &bytes, rb, acts.row(0), &mut out, form == 1),
                    _ => avx512::dot_rows(ty, &bytes, rb, acts.row(0), &mut out),
                }
                out.map(f32::to_bits)
            };
            assert_eq!(bits(0), bits(1), "{} cols {cols}", ty.name());
            if crate::kernels::dispatch::kernels(ty).avx512_decode_rows {
                assert_eq!(bits(0), bits(2), "{} cols {cols}: 512-bit rows", ty.name());
            }
        }
    }
}

fn values(n: usize, seed: u32, scale: f32) -> Vec<f32> {
    let mut s = seed.wrapping_mul(2654435761).wrapping_add(77);
    (0..n)
        .map(|i| {
            s ^= s << 13;
            s ^= s >> 17;
            s ^= s << 5;
            let u = s as f32 / u32::MAX as f32 - 0.5;
            if i % 83 == 5 {
                9.0 * u * scale
            } else {
                u * scale
            }
        })
        .collect()
}

/// Each decode kernel equals the reference row dot within the f32 re-association
/// bound (the integer block sums are the same), over several rows and lengths (nine
/// rows: the 512-bit rows' interleaved runs and their remainder; for the 32-weight
/// types also an odd number of blocks).
#[test]
fn decode_kernels_equal_the_reference_dots() {
    const ROWS: usize = 9;
    for ty in DECODE_TYPES {
        if !has_decode(ty) {
            continue;
        }
        // 800 columns: an odd count of 32-weight blocks (Q8_0's 512-bit rows pair them).
        let odd = (ty.block_size() == 32).then_some((5u32, 800usize));
        for (seed, cols) in [(1u32, 256usize), (2, 768), (3, 2048), (4, 4096)]
            .into_iter()
            .chain(odd)
        {
            let w = values(ROWS * cols, seed, 0.3);
            let mut bytes = Vec::new();
            quantize(ty, &w, &mut bytes);
            let rb = bytes.len() / ROWS;
            let xs = values(cols, seed + 40, 2.0);
            let mut acts = QuantizedRows::default();
            acts.quantize(&xs, cols, activation_block(ty).unwrap());
            let mut wd = vec![0.0f32; w.len()];
            dequantize(ty, &bytes, &mut wd);
            let xd = acts.dequantize_row(0);
            for wide in widths() {
                let mut got = [0.0f32; ROWS];
                assert!(dot_rows(ty, &bytes, rb, acts.row(0), &mut got, wide));
                for (i, got) in got.into_iter().enumerate() {
                    let row = &bytes[i * rb..][..rb];
                    let want = dot_row_reference(ty, row, acts.row(0));
                    let mag: f32 = wd[i * cols..(i + 1) * cols]
                        .iter()
                        .zip(&xd)
                        .map(|(a, b)| (a * b).abs())
                        .sum();
                    let tol = 4.0 * (cols / 32) as f32 * f32::EPSILON * mag;
                    assert!(
                        (got - want).abs() <= tol,
                        "{} wide {wide} cols {cols} row {i}: {got} vs {want} (tol {tol})",
                        ty.name()
                    );
                }
            }
        }
    }
}

#[test]
fn a_non_finite_activation_gives_nan() {
    for ty in DECODE_TYPES {
        if !has_decode(ty) {
            continue;
        }
        let w = values(512, 1, 0.3);
        let mut bytes = Vec::new();
        quantize(ty, &w, &mut bytes);
        let mut x = values(512, 2, 1.0);
        x[300] = f32::INFINITY;
        let mut acts = QuantizedRows::default();
        acts.quantize(&x, 512, activation_block(ty).unwrap());
        for wide in widths() {
            let mut got = [0.0f32];
            assert!(dot_rows(
                ty,
                &bytes,
                bytes.len(),
                acts.row(0),
                &mut got,
                wide
            ));
            assert!(got[0].is_nan(), "{} wide {wide}", ty.name());
        }
    }
}

/// Blocks at the integer bounds: every Q4_K nibble 15 and every Q6_K value 63 at the
/// largest scales, the unsigned legacy weights at both ends, against activations that all quantise to 127 (the sums a 16-bit
/// lane or a wrapped add would get wrong), and with alternating signs.
#[test]
fn blocks_at_the_integer_bounds_equal_the_reference() {
    let one = half::f16::from_f32(1.0).to_le_bytes();
    let mut q4_k = [0xffu8; 144];
    q4_k[..2].copy_from_slice(&one);
    q4_k[2..4].copy_from_slice(&half::f16::from_f32(0.5).to_le_bytes());
    let mut q6_k = [0xffu8; 210];
    q6_k[192..208].fill(0x80); // every scale −128
    q6_k[208..].copy_from_slice(&one);
    // Q5_0 with every weight 31 (unsigned, the largest) and with every weight 0 (q − 16 =
    // −16); Q4_0 with every weight 15.
    let mut q5_0_high = [0xffu8; 22];
    q5_0_high[..2].copy_from_slice(&one);
    let mut q5_0_low = [0u8; 22];
    q5_0_low[..2].copy_from_slice(&one);
    let mut q4_0 = [0xffu8; 18];
    q4_0[..2].copy_from_slice(&one);
    for (ty, block) in [
        (GgmlType::Q4_K, &q4_k[..]),
        (GgmlType::Q6_K, &q6_k[..]),
        (GgmlType::Q5_0, &q5_0_high[..]),
        (GgmlType::Q5_0, &q5_0_low[..]),
        (GgmlType::Q4_0, &q4_0[..]),
    ] {
        if !has_decode(ty) {
            continue;
        }
        let row = block.repeat(1024 / ty.block_size());
        for sign in [1.0f32, -1.0] {
            let x: Vec<f32> = (0..1024)
                .map(|i| if i % 3 == 0 { sign } else { 1.0 })
                .collect();
            let mut acts = QuantizedRows::default();
            acts.quantize(&x, 1024, activation_block(ty).unwrap());
            for wide in widths() {
                let mut got = [0.0f32];
                assert!(dot_rows(ty, &row, row.len(), acts.row(0), &mut got, wide));
                let want = dot_row_reference(ty, &row, acts.row(0));
                let tol = 1e-6 * want.abs().max(1.0);
                assert!(
                    (got[0] - want).abs() <= tol,
                    "{} wide {wide} sign {sign}: {} vs {want}",
                    ty.name(),
                    got[0]
                );
            }
        }
    }
}

/// The timing that picks Q8_0's rows takes well under the 50 ms a model's load can spare
/// (about 3 ms where measured), and whichever form it picks, the rows give the bits the
/// test above pins.
#[test]
fn the_timing_of_the_two_forms_is_short() {
    if !has_wide_decode() {
        return;
    }
    let start = std::time::Instant::now();
    let wide = avx512::time_the_two_forms();
    let took = start.elapsed();
    eprintln!("512-bit rows win: {wide}, timed in {took:?}");
    assert!(took < std::time::Duration::from_millis(50), "{took:?}");
}
