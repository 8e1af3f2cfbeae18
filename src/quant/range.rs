//! Chapter 11 — what each format can hold. Every scale and minimum of a block is an f16,
//! whose largest finite value is 65504, so a block format holds weights only up to a
//! multiple of it; F16 and BF16 hold their own largest values. Past that, llama.cpp's
//! quantisers (which clamp nothing) write ±inf — or, in Q6_K, overflow the fit in f32 and
//! write a zero scale, so the row silently becomes zeros. [`quantize_checked`] refuses
//! such a row instead, naming the weight and what the format holds.

use super::{GgmlType, QK_K, f16_at, quantize};

/// The largest finite f16.
const F16_MAX: f32 = 65504.0;

/// The largest finite bf16 (0x7f7f).
const BF16_MAX: f32 = 3.389_531_4e38;

/// Beyond this |w| the K quantisers' f32 sums (of |w|³ in Q6_K) could overflow; every
/// weight this large overflows their f16 scales anyway.
const K_FIT_SAFE: f32 = 1e10;

/// A weight a format cannot hold: stored, it (or its block's scale) would be ±inf.
#[derive(Clone, Debug, PartialEq)]
pub struct OutOfRange {
    pub ty: GgmlType,
    /// The column of the weight (the block's largest, for a block format).
    pub column: usize,
    pub value: f32,
}

impl std::fmt::Display for OutOfRange {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let (limit, why) = largest(self.ty);
        let limit = f64::from(limit);
        write!(
            f,
            "column {} is {:e}; {} holds |w| up to {}{} ({why}); llama.cpp applies no clamp",
            self.column,
            self.value,
            self.ty.name(),
            if approx(self.ty) { "about " } else { "" },
            if limit < 1e9 {
                format!("{limit}")
            } else {
                format!("{limit:e}")
            },
        )
    }
}

impl std::error::Error for OutOfRange {}

/// The largest |w| `ty` is sure to hold, and why.
pub fn largest(ty: GgmlType) -> (f32, &'static str) {
    use GgmlType::*;
    match ty {
        F32 => (f32::MAX, "the largest f32"),
        F16 => (F16_MAX, "the largest f16; larger values round to infinity"),
        Bf16 => (
            BF16_MAX,
            "the largest bf16; larger values round to infinity",
        ),
        Q8_0 => (127.0 * F16_MAX, "its f16 block scale is max |w| / 127"),
        Q4_0 => (8.0 * F16_MAX, "its f16 block scale is max |w| / 8"),
        Q5_0 => (16.0 * F16_MAX, "its f16 block scale is max |w| / 16"),
        Q4_1 => (
            F16_MAX,
            "its block minimum and its block scale (max − min) / 15 are f16",
        ),
        Q5_1 => (
            F16_MAX,
            "its block minimum and its block scale (max − min) / 31 are f16",
        ),
        Q4_K | Q5_K => (
            63.0 * F16_MAX,
            "its f16 super-block scale and minimum are the largest sub-block scale and minimum / 63",
        ),
        Q6_K => (
            32.0 * 128.0 * F16_MAX,
            "its f16 super-block scale is the largest sub-block scale, about max |w| / 32, / 128",
        ),
    }
}

/// Whether [`largest`] is approximate: the K formats fit their scales.
fn approx(ty: GgmlType) -> bool {
    matches!(ty, GgmlType::Q4_K | GgmlType::Q5_K | GgmlType::Q6_K)
}

/// The index and value of the largest |w| of `x` (the first on a tie).
fn argmax_abs(x: &[f32]) -> (usize, f32) {
    x.iter().enumerate().fold(
        (0, 0.0f32),
        |(i, m), (j, &v)| {
            if v.abs() > m.abs() { (j, v) } else { (i, m) }
        },
    )
}

fn fits_f16(v: f32) -> bool {
    half::f16::from_f32(v).is_finite()
}

/// Whether one block of `ty` is stored with finite values and scales, computed as the
/// quantiser computes them (the K formats: only that their fit cannot overflow).
fn block_fits(ty: GgmlType, x: &[f32]) -> bool {
    use GgmlType::*;
    let amax = argmax_abs(x).1.abs();
    let min = || x.iter().copied().fold(f32::MAX, f32::min);
    let max = || x.iter().copied().fold(-f32::MAX, f32::max);
    match ty {
        F32 => true,
        F16 => fits_f16(x[0]),
        Bf16 => super::floats::bf16_to_fp32(super::floats::fp32_to_bf16(x[0])).is_finite(),
        Q8_0 => fits_f16(amax / 127.0),
        Q4_0 => fits_f16(amax / 8.0),
        Q5_0 => fits_f16(amax / 16.0),
        Q4_1 => fits_f16(min()) && fits_f16((max() - min()) / 15.0),
        Q5_1 => fits_f16(min()) && fits_f16((max() - min()) / 31.0),
        Q4_K | Q5_K | Q6_K => amax <= K_FIT_SAFE,
    }
}

/// The f16 scales of one K super-block as written: d and dmin (Q4_K, Q5_K) or d (Q6_K).
fn k_scales_finite(ty: GgmlType, block: &[u8]) -> bool {
    match ty {
        GgmlType::Q4_K | GgmlType::Q5_K => {
            f16_at(block).is_finite() && f16_at(&block[2..]).is_finite()
        }
        GgmlType::Q6_K => f16_at(&block[block.len() - 2..]).is_finite(),
        _ => true,
    }
}

/// [`quantize`], refusing a row whose values or scales would be stored as ±inf: checked
/// before (exactly as the quantiser computes them) and, for the K formats, whose scales
/// come from a fit, on the bytes written. `x` must be finite and whole blocks, as for
/// [`quantize`]; on an error nothing is appended to `out`.
pub fn quantize_checked(ty: GgmlType, x: &[f32], out: &mut Vec<u8>) -> Result<(), OutOfRange> {
    let n = ty.block_size();
    let refuse = |b: usize, block: &[f32]| {
        let (i, value) = argmax_abs(block);
        OutOfRange {
            ty,
            column: b * n + i,
            value,
        }
    };
    if let Some((b, block)) = x
        .chunks_exact(n)
        .enumerate()
        .find(|(_, block)| !block_fits(ty, block))
    {
        return Err(refuse(b, block));
    }
    let start = out.len();
    quantize(ty, x, out);
    if approx(ty) {
        let written = out[start..].chunks_exact(ty.block_bytes());
        if let Some(b) = written
            .enumerate()
            .position(|(_, b)| !k_scales_finite(ty, b))
        {
            out.truncate(start);
            return Err(refuse(b, &x[b * QK_K..(b + 1) * QK_K]));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use GgmlType::*;

    fn row(ty: GgmlType, at: usize, v: f32) -> Vec<f32> {
        let mut x: Vec<f32> = (0..2 * QK_K).map(|i| (i as f32 / 97.0).sin()).collect();
        x[at] = v;
        let mut out = Vec::new();
        match quantize_checked(ty, &x, &mut out) {
            Ok(()) => {
                let mut back = vec![0.0; x.len()];
                super::super::dequantize(ty, &out, &mut back);
                assert!(back.iter().all(|w| w.is_finite()), "{}", ty.name());
                Vec::new()
            }
            Err(e) => {
                assert!(out.is_empty());
                assert_eq!((e.column, e.value), (at, v), "{e}");
                vec![e.value]
            }
        }
    }

    #[test]
    fn each_format_refuses_what_it_cannot_hold_and_keeps_the_rest() {
        let cases: [(GgmlType, f32, f32); 11] = [
            (F32, f32::MAX, 0.0),
            (F16, 65504.0, 70000.0),
            (Bf16, 3.38e38, f32::MAX),
            (Q8_0, 8.0e6, 8.4e6),
            (Q4_0, 5.0e5, 5.3e5),
            (Q5_0, 1.0e6, 1.1e6),
            (Q4_1, -65000.0, -70000.0),
            (Q5_1, 60000.0, 1e38),
            (Q4_K, 1.0e5, -1e7),
            (Q5_K, 1.0e5, 1e38),
            (Q6_K, 1.0e6, 1e38),
        ];
        for (ty, good, bad) in cases {
            assert!(row(ty, 300, good).is_empty(), "{} {good}", ty.name());
            if ty != F32 {
                assert_eq!(row(ty, 300, bad), [bad], "{} {bad}", ty.name());
            }
        }
        // Q6_K's f32 fit would overflow at 1e38 and write zeros; at 1e9 its scale would
        // be +inf: both refused.
        assert_eq!(row(Q6_K, 5, 1e9), [1e9]);
        let msg = OutOfRange {
            ty: Q8_0,
            column: 3,
            value: 1e38,
        }
        .to_string();
        assert!(msg.contains("column 3") && msg.contains("8319008"), "{msg}");
    }
}
