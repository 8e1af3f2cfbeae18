//! Seeded random helpers shared by several chapters (1's equivariance demo, 3's attention
//! checks, 7's optimiser examples, the claims and the kernels' tests): a seed gives the same
//! numbers on every run and machine, so every worked example is reproducible.
//!
//! (Inside the crate this module shadows the `rand` crate only at the crate root; the
//! generators come through `ndarray_rand::rand`, the version ndarray-rand draws with.)

use ndarray::Array2;
use ndarray_rand::RandomExt;
use ndarray_rand::rand::{Rng, SeedableRng, rngs::StdRng};
use ndarray_rand::rand_distr::StandardNormal;

/// A `[rows, cols]` matrix of N(0, 1) draws from `rng`, row by row.
pub fn normal_matrix(rows: usize, cols: usize, rng: &mut impl Rng) -> Array2<f32> {
    Array2::random_using((rows, cols), StandardNormal, rng)
}

/// Seeded N(0, 1) token embeddings `[n, d]`.
pub fn random_tokens(n: usize, d: usize, seed: u64) -> Array2<f32> {
    normal_matrix(n, d, &mut StdRng::seed_from_u64(seed))
}
