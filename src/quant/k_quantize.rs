//! Chapter 11 — the K formats' quantisers, as llama.cpp's reference quantisers without an
//! importance matrix (`quantize_row_q{4,5,6}_K_ref`).
//!
//! Two steps per super-block:
//! 1. each sub-block gets its own best float scale (and min): Q4_K / Q5_K search 21 / 16
//!    candidate grids `iscale = (nmax + rmin + k·rdelta) / (max − min)` and keep the one whose
//!    weighted least-squares fit `(scale, min)` has the smallest weighted squared error
//!    (`make_qkx2_quants`; weights `rms(sub-block) + |x|`); Q6_K is symmetric and tries
//!    19 grids around `−32 / max`, keeping the best `Σw·x·l / Σw·l²` fit with weights `x²`
//!    (`make_qx_quants`).
//! 2. the eight (sixteen) float scales are themselves quantised against the largest one —
//!    to 6 bits (Q4_K / Q5_K: `d = max_scale / 63`) or to an i8 (Q6_K:
//!    `d = max_scale / −128`) — and the weights re-quantised with the scales as stored.
//!
//! The arithmetic is f32 in llama.cpp's order, so the bytes come out the same.

use super::k_blocks::{Q4_K_BYTES, Q5_K_BYTES, Q6_K_BYTES, pack_scale_min_k4, scale_min_k4};
use super::{QK_K, f16_at, f16_bytes, nearest_int};

/// Below this, a group's largest magnitude counts as zero (ggml's `GROUP_MAX_EPS`).
const GROUP_MAX_EPS: f32 = 1e-15;

/// Affine quantisation of one sub-block `x` to levels `0..=nmax`: returns `(scale, min)`
/// with `x ≈ scale·L − min` (`min ≥ 0` is the offset subtracted) and writes the levels to
/// `levels`. Tries the grids `iscale = (rmin + rdelta·k + nmax) / (max − min)`, k = 0..=nstep,
/// fits scale and offset by weighted least squares for each, keeps the lowest weighted
/// squared error. The offset is never positive: a block of positive weights still starts
/// at 0.
fn make_qkx2_quants(
    nmax: i32,
    x: &[f32],
    weights: &[f32],
    levels: &mut [u8],
    (rmin, rdelta, nstep): (f32, f32, i32),
) -> (f32, f32) {
    let n = x.len();
    let mut min = x[0];
    let mut max = x[0];
    let mut sum_w = weights[0];
    let mut sum_x = sum_w * x[0];
    for i in 1..n {
        if x[i] < min {
            min = x[i];
        }
        if x[i] > max {
            max = x[i];
        }
        let w = weights[i];
        sum_w += w;
        sum_x += w * x[i];
    }
    if min > 0.0 {
        min = 0.0;
    }
    if max == min {
        levels.fill(0);
        return (0.0, -min);
    }
    // `min` moves when a better fit is found: later grids are offset by the new one, as in
    // llama.cpp.
    let level = |iscale: f32, v: f32, min: f32| nearest_int(iscale * (v - min)).clamp(0, nmax);
    let mut iscale = nmax as f32 / (max - min);
    let mut scale = 1.0 / iscale;
    let mut best_error = 0.0f32;
    for i in 0..n {
        let l = level(iscale, x[i], min);
        levels[i] = l as u8;
        let diff = scale * l as f32 + min - x[i];
        best_error += weights[i] * (diff * diff);
    }
    let mut trial = [0u8; 32];
    let trial = &mut trial[..n];
    // ANCHOR: qkx2_search
    for is in 0..=nstep {
        iscale = (rmin + rdelta * is as f32 + nmax as f32) / (max - min);
        let (mut sum_l, mut sum_l2, mut sum_xl) = (0.0f32, 0.0f32, 0.0f32);
        for i in 0..n {
            let l = level(iscale, x[i], min);
            trial[i] = l as u8;
            let (w, l) = (weights[i], l as f32);
            sum_l += w * l;
            sum_l2 += w * l * l;
            sum_xl += w * l * x[i];
        }
        let det = sum_w * sum_l2 - sum_l * sum_l;
        if det > 0.0 {
            let mut this_scale = (sum_w * sum_xl - sum_x * sum_l) / det;
            let mut this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det;
            if this_min > 0.0 {
                this_min = 0.0;
                this_scale = sum_xl / sum_l2;
            }
            let mut cur_error = 0.0f32;
            for i in 0..n {
                let diff = this_scale * trial[i] as f32 + this_min - x[i];
                cur_error += weights[i] * (diff * diff);
            }
            if cur_error < best_error {
                levels.copy_from_slice(trial);
                best_error = cur_error;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    // ANCHOR_END: qkx2_search
    (scale, -min)
}

/// Symmetric quantisation of one 16-weight sub-block to levels `−nmax..nmax` (stored
/// shifted by `nmax` into `levels`), weighted by `x²`: returns the scale. Starts from the
/// grid that puts the signed largest weight on `−nmax`, then tries 18 nearby grids
/// `−(nmax + 0.1·k) / max` and keeps the one whose fitted scale explains most of `Σw·x²`.
fn make_qx_quants(nmax: i32, x: &[f32], levels: &mut [i8]) -> f32 {
    let mut max = 0.0f32;
    let mut amax = 0.0f32;
    for &v in x {
        if v.abs() > amax {
            amax = v.abs();
            max = v;
        }
    }
    if amax < GROUP_MAX_EPS {
        levels.fill(0);
        return 0.0;
    }
    let level = |iscale: f32, v: f32| nearest_int(iscale * v).clamp(-nmax, nmax - 1);
    // Σ w·x·l and Σ w·l² for a grid, w = x².
    let sums = |iscale: f32| {
        let (mut sumlx, mut suml2) = (0.0f32, 0.0f32);
        for &v in x {
            let l = level(iscale, v) as f32;
            let w = v * v;
            sumlx += w * v * l;
            suml2 += w * l * l;
        }
        (sumlx, suml2)
    };
    let mut iscale = -(nmax as f32) / max;
    for (q, &v) in levels.iter_mut().zip(x) {
        *q = (level(iscale, v) + nmax) as i8;
    }
    let (sumlx, suml2) = sums(iscale);
    let mut scale = if suml2 != 0.0 { sumlx / suml2 } else { 0.0 };
    let mut best = scale * sumlx;
    for is in -9..=9 {
        if is == 0 {
            continue;
        }
        iscale = -(nmax as f32 + 0.1 * is as f32) / max;
        let (sumlx, suml2) = sums(iscale);
        if suml2 > 0.0 && sumlx * sumlx > best * suml2 {
            for (q, &v) in levels.iter_mut().zip(x) {
                *q = (level(iscale, v) + nmax) as i8;
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    scale
}

/// Steps 1 and 2 for Q4_K / Q5_K: the levels of one super-block (0..=nmax) and its header
/// (d, dmin, 12 scale bytes) written into `head[..16]`.
fn quantize_super_block_affine(
    x: &[f32],
    nmax: i32,
    search: (f32, f32, i32),
    levels: &mut [u8; QK_K],
    head: &mut [u8],
) {
    let mut scales = [0.0f32; QK_K / 32];
    let mut mins = [0.0f32; QK_K / 32];
    let mut weights = [0.0f32; 32];
    let mut max_scale = 0.0f32;
    let mut max_min = 0.0f32;
    for (j, (x, levels)) in x
        .chunks_exact(32)
        .zip(levels.chunks_exact_mut(32))
        .enumerate()
    {
        let sum_x2 = x.iter().fold(0.0f32, |s, v| s + v * v);
        let av_x = (sum_x2 / 32.0).sqrt();
        for (w, v) in weights.iter_mut().zip(x) {
            *w = av_x + v.abs();
        }
        (scales[j], mins[j]) = make_qkx2_quants(nmax, x, &weights, levels, search);
        if scales[j] > max_scale {
            max_scale = scales[j];
        }
        if mins[j] > max_min {
            max_min = mins[j];
        }
    }
    let inv_scale = if max_scale > 0.0 {
        63.0 / max_scale
    } else {
        0.0
    };
    let inv_min = if max_min > 0.0 { 63.0 / max_min } else { 0.0 };
    let mut ls = [0u8; 8];
    let mut lm = [0u8; 8];
    for j in 0..QK_K / 32 {
        // llama.cpp stores nearest_int into a u8 (wrapping), then clips to 63.
        ls[j] = (nearest_int(inv_scale * scales[j]) as u8).min(63);
        lm[j] = (nearest_int(inv_min * mins[j]) as u8).min(63);
    }
    head[..2].copy_from_slice(&f16_bytes(max_scale / 63.0));
    head[2..4].copy_from_slice(&f16_bytes(max_min / 63.0));
    pack_scale_min_k4(&ls, &lm, &mut head[4..16]);
    // Re-quantise each sub-block against its scale and min as stored.
    let (d_all, dmin_all) = (f16_at(head), f16_at(&head[2..]));
    for (j, (x, levels)) in x
        .chunks_exact(32)
        .zip(levels.chunks_exact_mut(32))
        .enumerate()
    {
        let (sc, m) = scale_min_k4(j, &head[4..16]);
        let d = d_all * sc as f32;
        if d == 0.0 {
            continue; // keeps the levels of step 1, as llama.cpp does
        }
        let dm = dmin_all * m as f32;
        for (l, &v) in levels.iter_mut().zip(x) {
            *l = nearest_int((v + dm) / d).clamp(0, nmax) as u8;
        }
    }
}

pub fn quantize_q4_k(x: &[f32], out: &mut [u8]) {
    let mut levels = [0u8; QK_K];
    for (x, block) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q4_K_BYTES)) {
        quantize_super_block_affine(x, 15, (-1.0, 0.1, 20), &mut levels, block);
        let qs = &mut block[16..];
        for (q, l) in qs.chunks_exact_mut(32).zip(levels.chunks_exact(64)) {
            for i in 0..32 {
                q[i] = l[i] | (l[i + 32] << 4);
            }
        }
    }
}

pub fn quantize_q5_k(x: &[f32], out: &mut [u8]) {
    let mut levels = [0u8; QK_K];
    for (x, block) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q5_K_BYTES)) {
        quantize_super_block_affine(x, 31, (-0.5, 0.1, 15), &mut levels, block);
        let (qh, qs) = block[16..].split_at_mut(QK_K / 8);
        qh.fill(0);
        for (c, (q, l)) in qs
            .chunks_exact_mut(32)
            .zip(levels.chunks_exact(64))
            .enumerate()
        {
            for i in 0..32 {
                let (lo, hi) = (l[i], l[i + 32]);
                qh[i] |= ((lo >> 4) << (2 * c)) | ((hi >> 4) << (2 * c + 1));
                q[i] = (lo & 0x0f) | ((hi & 0x0f) << 4);
            }
        }
    }
}

pub fn quantize_q6_k(x: &[f32], out: &mut [u8]) {
    let mut levels = [0i8; QK_K];
    for (x, block) in x.chunks_exact(QK_K).zip(out.chunks_exact_mut(Q6_K_BYTES)) {
        let mut scales = [0.0f32; QK_K / 16];
        let mut max_scale = 0.0f32;
        let mut max_abs_scale = 0.0f32;
        for (s, (x, l)) in scales
            .iter_mut()
            .zip(x.chunks_exact(16).zip(levels.chunks_exact_mut(16)))
        {
            *s = make_qx_quants(32, x, l);
            if s.abs() > max_abs_scale {
                max_abs_scale = s.abs();
                max_scale = *s;
            }
        }
        if max_abs_scale < GROUP_MAX_EPS {
            block.fill(0);
            continue;
        }
        let (ql, rest) = block.split_at_mut(QK_K / 2);
        let (qh, rest) = rest.split_at_mut(QK_K / 4);
        let (sc_bytes, d_bytes) = rest.split_at_mut(QK_K / 16);
        // The largest scale, with its sign, maps to −128.
        let iscale = -128.0 / max_scale;
        d_bytes.copy_from_slice(&f16_bytes(1.0 / iscale));
        for (b, &s) in sc_bytes.iter_mut().zip(&scales) {
            *b = nearest_int(iscale * s).min(127) as i8 as u8;
        }
        let d_all = f16_at(d_bytes);
        for ((x, l), &sc) in x
            .chunks_exact(16)
            .zip(levels.chunks_exact_mut(16))
            .zip(sc_bytes.iter())
        {
            let d = d_all * sc as i8 as f32;
            if d == 0.0 {
                continue; // keeps make_qx_quants' levels, as llama.cpp does
            }
            for (l, &v) in l.iter_mut().zip(x) {
                *l = (nearest_int(v / d).clamp(-32, 31) + 32) as i8;
            }
        }
        for h in 0..2 {
            let l = &levels[128 * h..128 * h + 128];
            let ql = &mut ql[64 * h..64 * h + 64];
            let qh = &mut qh[32 * h..32 * h + 32];
            for i in 0..32 {
                let q = [
                    l[i] as u8,
                    l[i + 32] as u8,
                    l[i + 64] as u8,
                    l[i + 96] as u8,
                ];
                ql[i] = (q[0] & 0x0f) | ((q[2] & 0x0f) << 4);
                ql[i + 32] = (q[1] & 0x0f) | ((q[3] & 0x0f) << 4);
                qh[i] = (q[0] >> 4) | ((q[1] >> 4) << 2) | ((q[2] >> 4) << 4) | ((q[3] >> 4) << 6);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::k_blocks::{dequantize_q4_k, dequantize_q5_k, dequantize_q6_k};
    use super::*;

    #[test]
    fn qkx2_on_an_exact_grid_is_exact() {
        // x = 0.25·l − 1 for levels 0..=15 repeated: the affine fit is exact.
        let x: Vec<f32> = (0..32).map(|i| 0.25 * (i % 16) as f32 - 1.0).collect();
        let w = vec![1.0f32; 32];
        let mut l = [0u8; 32];
        let (scale, min) = make_qkx2_quants(15, &x, &w, &mut l, (-1.0, 0.1, 20));
        assert_eq!((scale, min), (0.25, 1.0));
        for (i, &l) in l.iter().enumerate() {
            assert_eq!(l as usize, i % 16);
        }
    }

    #[test]
    fn qx_symmetric_fit() {
        // x = −32, −31, …: the largest magnitude is negative, so iscale = +1 and l = x.
        let x: Vec<f32> = (0..16).map(|i| i as f32 - 32.0).collect();
        let mut l = [0i8; 16];
        let scale = make_qx_quants(32, &x, &mut l);
        assert_eq!(scale, 1.0);
        for (i, &l) in l.iter().enumerate() {
            assert_eq!(l as i32 - 32, i as i32 - 32);
        }
    }

    #[test]
    fn zero_super_blocks() {
        let x = [0.0f32; QK_K];
        let mut b = vec![0xaau8; Q6_K_BYTES];
        quantize_q6_k(&x, &mut b);
        assert!(b.iter().all(|&v| v == 0));
        let mut y = [1.0f32; QK_K];
        for (q, dq, n) in [
            (
                quantize_q4_k as fn(&[f32], &mut [u8]),
                dequantize_q4_k as fn(&[u8], &mut [f32]),
                Q4_K_BYTES,
            ),
            (quantize_q5_k, dequantize_q5_k, Q5_K_BYTES),
            (quantize_q6_k, dequantize_q6_k, Q6_K_BYTES),
        ] {
            let mut b = vec![0xaau8; n];
            q(&x, &mut b);
            dq(&b, &mut y);
            assert!(y.iter().all(|&v| v == 0.0), "{n}-byte block");
        }
    }

    #[test]
    fn k_quantisers_reconstruct_a_ramp() {
        // A smooth ramp in [−1, 1): Q4_K error below a 16th of the range, Q6_K below a 64th.
        let x: Vec<f32> = (0..QK_K).map(|i| i as f32 / 128.0 - 1.0).collect();
        let mut y = [0.0f32; QK_K];
        for (q, dq, n, tol) in [
            (
                quantize_q4_k as fn(&[f32], &mut [u8]),
                dequantize_q4_k as fn(&[u8], &mut [f32]),
                Q4_K_BYTES,
                2.0 / 16.0,
            ),
            (quantize_q5_k, dequantize_q5_k, Q5_K_BYTES, 2.0 / 32.0),
            (quantize_q6_k, dequantize_q6_k, Q6_K_BYTES, 2.0 / 64.0),
        ] {
            let mut b = vec![0u8; n];
            q(&x, &mut b);
            dq(&b, &mut y);
            let err = x
                .iter()
                .zip(&y)
                .map(|(a, b)| (a - b).abs())
                .fold(0.0, f32::max);
            assert!(err < tol, "{n}-byte block: max error {err}");
        }
    }
}
