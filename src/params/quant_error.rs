//! Chapter 11's measurement: how much of a weight row a block type loses. A seeded row of
//! Gaussian or heavy-tailed (Student-t) weights is quantised with the crate's quantisers
//! (the bytes llama.cpp writes), dequantised, and compared with the original: the RMS of
//! the error relative to the RMS of the weights, against the type's bits per weight
//! (the figure `quant_error`, claim `quant.rmse`).

use crate::quant::{self, GgmlType};
use ndarray_rand::rand::{Rng, SeedableRng, rngs::StdRng};
use ndarray_rand::rand_distr::{StandardNormal, StudentT};

/// The block types the figure compares, by bits per weight.
pub const TYPES: [GgmlType; 10] = [
    GgmlType::Q4_0,
    GgmlType::Q4_K,
    GgmlType::Q4_1,
    GgmlType::Q5_0,
    GgmlType::Q5_K,
    GgmlType::Q5_1,
    GgmlType::Q6_K,
    GgmlType::Q8_0,
    GgmlType::Bf16,
    GgmlType::F16,
];

/// Degrees of freedom of the heavy-tailed rows: ν = 3 has finite variance and a
/// kurtosis that does not exist, tails far heavier than a Gaussian's.
pub const STUDENT_NU: f64 = 3.0;

/// Weights per measured row: 64 super-blocks of 256.
pub const ROW: usize = 64 * 256;

/// The two kinds of rows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Weights {
    Gaussian,
    StudentT,
}

/// A seeded row of [`ROW`] weights of the given kind, scaled to the size of a trained
/// matrix's entries (σ = 0.02; the relative error does not depend on the scale).
pub fn weights(kind: Weights, seed: u64) -> Vec<f32> {
    let mut rng = StdRng::seed_from_u64(seed);
    let t = StudentT::new(STUDENT_NU).expect("ν > 0");
    (0..ROW)
        .map(|_| {
            let z: f64 = match kind {
                Weights::Gaussian => rng.sample(StandardNormal),
                Weights::StudentT => rng.sample(t),
            };
            (0.02 * z) as f32
        })
        .collect()
}

// ANCHOR: relative_rmse
/// RMS of (dequantise(quantise(x)) − x) over RMS of x.
pub fn relative_rmse(ty: GgmlType, x: &[f32]) -> f64 {
    let mut bytes = Vec::new();
    quant::quantize(ty, x, &mut bytes);
    let mut back = vec![0f32; x.len()];
    quant::dequantize(ty, &bytes, &mut back);
    let err: f64 = x
        .iter()
        .zip(&back)
        .map(|(&a, &b)| (f64::from(a) - f64::from(b)).powi(2))
        .sum();
    let signal: f64 = x.iter().map(|&a| f64::from(a).powi(2)).sum();
    (err / signal).sqrt()
}
// ANCHOR_END: relative_rmse

/// One point of the figure.
#[derive(Clone, Copy, Debug)]
pub struct ErrorPoint {
    pub ty: GgmlType,
    pub bits_per_weight: f64,
    pub gaussian: f64,
    pub student_t: f64,
}

/// Every type of [`TYPES`] on the same seeded Gaussian and Student-t rows.
pub fn error_table() -> Vec<ErrorPoint> {
    let g = weights(Weights::Gaussian, 11);
    let t = weights(Weights::StudentT, 12);
    TYPES
        .iter()
        .map(|&ty| ErrorPoint {
            ty,
            bits_per_weight: ty.bits_per_weight(),
            gaussian: relative_rmse(ty, &g),
            student_t: relative_rmse(ty, &t),
        })
        .collect()
}
