//! The long-range decay of RoPE scores (source S0 5.1.6–5.1.7).
//!
//! When `q ≈ k` the cross terms vanish and the RoPE score at offset `τ` reduces to
//! `S(τ) = Σ_j cos(τ·θ_j)`. The source says this decays roughly as `O(1/τ)`. Fitting it
//! honestly says otherwise: with `θ_j = base^{-j/(d/2)}`, the planes still coherent at
//! offset `τ` are those with `τθ_j ≲ 1`, and their number falls linearly in `ln τ`. Turning
//! the sum into an integral gives `S(τ) ≈ (d/2)/ln(base) · (Ci(τ) − Ci(τ/base))`, which for
//! `1 ≪ τ ≪ base` is `(d/2)/ln(base) · (ln(base/τ) − γ)`: a *logarithmic* decay with slope
//! `−(d/2)/ln(base)` per unit of `ln τ` (−6.95 for d = 128, base 10⁴).
//!
//! Claim backed: `rope.decay_shape`.

use super::rope::inv_freq;

// ANCHOR: decay
/// `S(τ) = Σ_j cos(τ·θ_j)` over the `d/2` planes of a head of dimension `d`.
pub fn decay_sum(head_dim: usize, base: f64, tau: f64) -> f64 {
    inv_freq(head_dim, base)
        .iter()
        .map(|theta| (tau * theta).cos())
        .sum()
}
// ANCHOR_END: decay

/// `n` offsets spaced evenly in `ln τ` over `[1, max_tau]`, rounded to integers and
/// deduplicated, so every decade weighs the same in a fit.
pub fn log_spaced_taus(max_tau: f64, n: usize) -> Vec<f64> {
    let mut taus: Vec<f64> = (0..n)
        .map(|k| (max_tau.ln() * k as f64 / (n - 1) as f64).exp().round())
        .collect();
    taus.dedup();
    taus
}

/// How well each candidate law describes `S(τ)` on a set of offsets.
#[derive(Clone, Debug)]
pub struct DecayFit {
    /// Offsets used and `S` at each.
    pub taus: Vec<f64>,
    pub values: Vec<f64>,
    /// Least squares `S ≈ a + b·ln τ`.
    pub log_intercept: f64,
    pub log_slope: f64,
    pub log_r2: f64,
    /// Least squares in log space on the points where `S > 0`: `S ≈ C·τ^{−p}`.
    pub power_c: f64,
    pub power_p: f64,
    pub power_r2: f64,
    /// Best `S ≈ C/τ` (least squares in linear space).
    pub inverse_c: f64,
    pub inverse_r2: f64,
    /// The slope the integral approximation predicts: `−(d/2)/ln(base)`.
    pub predicted_log_slope: f64,
}

// ANCHOR: fit
/// Fits the three candidate laws to `S(τ)` on `n` log-spaced offsets in `[1, max_tau]`.
/// Every R² is measured in linear space on all points, so they are comparable.
pub fn fit_decay(head_dim: usize, base: f64, max_tau: f64, n: usize) -> DecayFit {
    let taus = log_spaced_taus(max_tau, n);
    let values: Vec<f64> = taus.iter().map(|&t| decay_sum(head_dim, base, t)).collect();
    let ln_t: Vec<f64> = taus.iter().map(|t| t.ln()).collect();

    let (log_intercept, log_slope) = least_squares_line(&ln_t, &values);
    let log_pred: Vec<f64> = ln_t.iter().map(|l| log_intercept + log_slope * l).collect();

    let positive: Vec<usize> = (0..taus.len()).filter(|&i| values[i] > 0.0).collect();
    let xs: Vec<f64> = positive.iter().map(|&i| ln_t[i]).collect();
    let ys: Vec<f64> = positive.iter().map(|&i| values[i].ln()).collect();
    let (ln_c, neg_p) = least_squares_line(&xs, &ys);
    let power_pred: Vec<f64> = taus.iter().map(|t| ln_c.exp() * t.powf(neg_p)).collect();

    let inverse_c = taus.iter().zip(&values).map(|(t, s)| s / t).sum::<f64>()
        / taus.iter().map(|t| 1.0 / (t * t)).sum::<f64>();
    let inverse_pred: Vec<f64> = taus.iter().map(|t| inverse_c / t).collect();

    DecayFit {
        log_r2: r_squared(&values, &log_pred),
        power_r2: r_squared(&values, &power_pred),
        inverse_r2: r_squared(&values, &inverse_pred),
        log_intercept,
        log_slope,
        power_c: ln_c.exp(),
        power_p: -neg_p,
        inverse_c,
        predicted_log_slope: -(head_dim as f64 / 2.0) / base.ln(),
        taus,
        values,
    }
}
// ANCHOR_END: fit

/// Ordinary least squares `y ≈ a + b·x`; returns `(a, b)`.
fn least_squares_line(x: &[f64], y: &[f64]) -> (f64, f64) {
    let n = x.len() as f64;
    let (mx, my) = (x.iter().sum::<f64>() / n, y.iter().sum::<f64>() / n);
    let sxy: f64 = x.iter().zip(y).map(|(a, b)| (a - mx) * (b - my)).sum();
    let sxx: f64 = x.iter().map(|a| (a - mx) * (a - mx)).sum();
    let b = sxy / sxx;
    (my - b * mx, b)
}

/// Coefficient of determination of `pred` against `y`.
fn r_squared(y: &[f64], pred: &[f64]) -> f64 {
    let mean = y.iter().sum::<f64>() / y.len() as f64;
    let ss_res: f64 = y.iter().zip(pred).map(|(a, p)| (a - p) * (a - p)).sum();
    let ss_tot: f64 = y.iter().map(|a| (a - mean) * (a - mean)).sum();
    1.0 - ss_res / ss_tot
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decay_at_zero_counts_planes() {
        assert_eq!(decay_sum(128, 1e4, 0.0), 64.0);
    }

    #[test]
    fn least_squares_recovers_a_line() {
        let x = [0.0, 1.0, 2.0, 3.0];
        let y = [1.0, 3.0, 5.0, 7.0];
        let (a, b) = least_squares_line(&x, &y);
        assert!((a - 1.0).abs() < 1e-12 && (b - 2.0).abs() < 1e-12);
        assert!((r_squared(&y, &y) - 1.0).abs() < 1e-12);
    }
}
