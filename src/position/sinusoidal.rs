//! The original Transformer's sinusoidal absolute position encoding (source S1 §1).
//!
//! `PE(pos, 2i) = sin(pos / 10000^{2i/d})`, `PE(pos, 2i+1) = cos(pos / 10000^{2i/d})`,
//! added to the token embedding. Each pair is a point on a circle turning at the same
//! rates RoPE uses, so `PE(pos + k)` is a fixed rotation of `PE(pos)` — a linear map that
//! depends on `k` only. The model still sees absolute positions: the vector is added to
//! the content, not multiplied into the q·k product.
//!
//! Claim backed: `rope.sinusoidal`.

use ndarray::Array2;

// ANCHOR: sinusoidal
/// The `[positions, d]` table of sinusoidal encodings with the given base (10000 in
/// "Attention Is All You Need").
pub fn sinusoidal_table(positions: usize, d: usize, base: f64) -> Array2<f64> {
    let mut pe = Array2::zeros((positions, d));
    for pos in 0..positions {
        for i in 0..d / 2 {
            let angle = pos as f64 / base.powf((2 * i) as f64 / d as f64);
            pe[[pos, 2 * i]] = angle.sin();
            pe[[pos, 2 * i + 1]] = angle.cos();
        }
    }
    pe
}
// ANCHOR_END: sinusoidal

/// The largest deviation, over all positions, of `PE(pos + k)` from the rotation of
/// `PE(pos)` by `k` steps: zero up to rounding when the encoding has the relative
/// (linear-shift) property.
pub fn shift_is_linear_error(table: &Array2<f64>, k: usize, base: f64) -> f64 {
    let (positions, d) = table.dim();
    let mut worst = 0.0f64;
    for pos in 0..positions.saturating_sub(k) {
        for i in 0..d / 2 {
            let w = 1.0 / base.powf((2 * i) as f64 / d as f64);
            let (s, c) = (k as f64 * w).sin_cos();
            let (sp, cp) = (table[[pos, 2 * i]], table[[pos, 2 * i + 1]]);
            // sin(a+b) = sin a cos b + cos a sin b;  cos(a+b) = cos a cos b − sin a sin b.
            let sin_shift = sp * c + cp * s;
            let cos_shift = cp * c - sp * s;
            worst = worst
                .max((sin_shift - table[[pos + k, 2 * i]]).abs())
                .max((cos_shift - table[[pos + k, 2 * i + 1]]).abs());
        }
    }
    worst
}
