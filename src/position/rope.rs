//! Rotary position embedding (source S0 5.1.3–5.1.8, S1 §1).
//!
//! RoPE splits a head vector of dimension `d` into `d/2` planes and rotates plane `i` at
//! position `m` by the angle `m·θ_i`, with `θ_i = base^{-2i/d}`. Hugging Face pairs
//! dimension `i` with `i + d/2` ("half-split", [`apply_rope`]); the RoFormer paper and the
//! overview text pair `2i` with `2i+1` ("interleaved", [`apply_rope_interleaved`]). The
//! same rotation written with complex numbers is [`apply_rope_complex`], and as an
//! explicit block-diagonal matrix [`rotation_matrix`].

use ndarray::Array2;
use num_complex::Complex32;

// ANCHOR: inv_freq
/// Inverse frequencies `θ_i = base^{-2i/d}` for `i = 0 … d/2 − 1` (Hugging Face's
/// `inv_freq`). `rotary_dim` is the number of rotated dimensions (the head dimension,
/// or less with partial RoPE). Computed in f64; the model rounds them to f32 as
/// transformers does.
pub fn inv_freq(rotary_dim: usize, base: f64) -> Vec<f64> {
    (0..rotary_dim / 2)
        .map(|i| 1.0 / base.powf((2 * i) as f64 / rotary_dim as f64))
        .collect()
}
// ANCHOR_END: inv_freq

/// Wavelength in tokens of a plane rotating at `theta` radians per token: `2π/θ`.
pub fn wavelength(theta: f64) -> f64 {
    2.0 * std::f64::consts::PI / theta
}

/// cos/sin tables for positions `0..positions`: row `m` holds `cos(m·θ_i)` and
/// `sin(m·θ_i)` for `i < d/2`, each multiplied by `attention_factor` (YaRN's temperature;
/// 1 otherwise).
#[derive(Clone, Debug)]
pub struct RopeTable {
    pub half: usize,
    pub cos: Vec<f32>,
    pub sin: Vec<f32>,
}

// ANCHOR: rope_table
impl RopeTable {
    /// Builds the table the way transformers does, so that the model matches it bit for
    /// bit: `inv_freq` rounded to f32, the angle `m·θ_i` formed as one f32 product (at
    /// position 40 000 that rounding alone moves the angle by up to 2·10⁻³ rad), then
    /// cos/sin, then the attention factor.
    pub fn new(inv_freq: &[f64], positions: usize, attention_factor: f64) -> Self {
        let half = inv_freq.len();
        let inv_f32: Vec<f32> = inv_freq.iter().map(|&f| f as f32).collect();
        let mut cos = Vec::with_capacity(positions * half);
        let mut sin = Vec::with_capacity(positions * half);
        let scale = attention_factor as f32;
        for m in 0..positions {
            for &f in &inv_f32 {
                let angle = (m as f32 * f) as f64;
                cos.push(angle.cos() as f32 * scale);
                sin.push(angle.sin() as f32 * scale);
            }
        }
        RopeTable { half, cos, sin }
    }

    /// The cos and sin rows of position `m`.
    pub fn row(&self, m: usize) -> (&[f32], &[f32]) {
        let r = m * self.half..(m + 1) * self.half;
        (&self.cos[r.clone()], &self.sin[r])
    }

    pub fn positions(&self) -> usize {
        self.cos.len() / self.half.max(1)
    }
}
// ANCHOR_END: rope_table

// ANCHOR: rotate_half
/// Hugging Face's `rotate_half`: `[x₁, x₂] → [−x₂, x₁]` for the two halves of `x`.
pub fn rotate_half(x: &[f32]) -> Vec<f32> {
    let h = x.len() / 2;
    x[h..]
        .iter()
        .map(|v| -v)
        .chain(x[..h].iter().copied())
        .collect()
}

/// Half-split RoPE in place: `x ← x·cos + rotate_half(x)·sin`, written per plane
/// `(x_i, x_{i+h})`. Only the first `2·cos.len()` dimensions rotate (partial RoPE leaves
/// the rest as they are).
pub fn apply_rope(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    let h = cos.len();
    let (first, second) = x[..2 * h].split_at_mut(h);
    for i in 0..h {
        let (a, b) = (first[i], second[i]);
        first[i] = a * cos[i] - b * sin[i];
        second[i] = b * cos[i] + a * sin[i];
    }
}
// ANCHOR_END: rotate_half

// ANCHOR: interleaved
/// Interleaved RoPE in place: the plane of `θ_i` is `(x_{2i}, x_{2i+1})`.
pub fn apply_rope_interleaved(x: &mut [f32], cos: &[f32], sin: &[f32]) {
    for (i, pair) in x.chunks_exact_mut(2).take(cos.len()).enumerate() {
        let (a, b) = (pair[0], pair[1]);
        pair[0] = a * cos[i] - b * sin[i];
        pair[1] = b * cos[i] + a * sin[i];
    }
}
// ANCHOR_END: interleaved

// ANCHOR: complex
/// The same rotation as [`apply_rope`] written as complex multiplication: the plane
/// `(x_i, x_{i+h})` is the number `z = x_i + i·x_{i+h}`, rotated as `z·e^{iα}`.
pub fn apply_rope_complex(x: &[f32], angles: &[f32]) -> Vec<f32> {
    let h = angles.len();
    let rotated: Vec<Complex32> = (0..h)
        .map(|i| Complex32::new(x[i], x[i + h]) * Complex32::from_polar(1.0, angles[i]))
        .collect();
    let mut out: Vec<f32> = rotated.iter().map(|z| z.re).collect();
    out.extend(rotated.iter().map(|z| z.im));
    out.extend_from_slice(&x[2 * h..]);
    out
}
// ANCHOR_END: complex

/// The permutation that takes a half-split vector to interleaved order: interleaved
/// position `2i` holds half-split dimension `i`, and `2i+1` holds `i + d/2`.
pub fn half_split_to_interleaved(d: usize) -> Vec<usize> {
    (0..d)
        .map(|j| if j % 2 == 0 { j / 2 } else { j / 2 + d / 2 })
        .collect()
}

// ANCHOR: rotation_matrix
/// The explicit block-diagonal rotation `R_m` (interleaved planes, as in the source's
/// formula): block `i` is `[[cos mθ_i, −sin mθ_i], [sin mθ_i, cos mθ_i]]`. In f64 so the
/// identity `R_mᵀ R_n = R_{n−m}` can be checked to rounding.
pub fn rotation_matrix(inv_freq: &[f64], m: f64) -> Array2<f64> {
    let d = 2 * inv_freq.len();
    let mut r = Array2::zeros((d, d));
    for (i, &theta) in inv_freq.iter().enumerate() {
        let (s, c) = (m * theta).sin_cos();
        r[[2 * i, 2 * i]] = c;
        r[[2 * i, 2 * i + 1]] = -s;
        r[[2 * i + 1, 2 * i]] = s;
        r[[2 * i + 1, 2 * i + 1]] = c;
    }
    r
}
// ANCHOR_END: rotation_matrix

/// The RoPE score `(R_m q)·(R_n k)` of one query/key pair with half-split RoPE.
pub fn rope_score(q: &[f32], k: &[f32], table: &RopeTable, m: usize, n: usize) -> f32 {
    let (mut q, mut k) = (q.to_vec(), k.to_vec());
    let (c, s) = table.row(m);
    apply_rope(&mut q, c, s);
    let (c, s) = table.row(n);
    apply_rope(&mut k, c, s);
    crate::kernels::dot(&q, &k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotate_half_formula_equals_plane_rotation() {
        let x: Vec<f32> = (0..8).map(|i| i as f32 + 1.0).collect();
        let table = RopeTable::new(&inv_freq(8, 10000.0), 5, 1.0);
        let (c, s) = table.row(4);
        let mut rotated = x.clone();
        apply_rope(&mut rotated, c, s);
        // x·cos + rotate_half(x)·sin with cos/sin duplicated over both halves.
        let rh = rotate_half(&x);
        for j in 0..8 {
            let expect = x[j] * c[j % 4] + rh[j] * s[j % 4];
            assert_eq!(rotated[j], expect);
        }
    }

    #[test]
    fn partial_rope_leaves_the_tail() {
        let mut x = vec![1.0f32; 6];
        let table = RopeTable::new(&inv_freq(4, 10000.0), 3, 1.0);
        let (c, s) = table.row(2);
        apply_rope(&mut x, c, s);
        assert_eq!(&x[4..], &[1.0, 1.0]);
    }
}
