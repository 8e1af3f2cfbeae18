//! Chapter 7 — optimisers: Muon, gradient-norm clipping and QK-clip (source 5.6).
//!
//! Muon orthogonalises each weight matrix's momentum update with a few Newton–Schulz
//! iterations, so every direction of the update moves by about the same amount; gradient
//! clipping rescales the whole gradient when its norm exceeds a threshold; QK-clip
//! rescales a head's query and key weights when its largest attention logit exceeds one.
//! Each is checked against the library that defines it (`torch.optim.Muon`,
//! `torch.nn.utils.clip_grad_norm_`, torch 2.15; fixtures by `scripts/gen_optim_fixtures.py`).
//!
//! Claims: `opt.clip`, `opt.muon_orthogonal`, `opt.qk_clip`, `opt.clip_logits` (an erratum:
//! the source credits gradient clipping with bounding the logits).
//!
//! - [`muon`]: Newton–Schulz, the Muon step, torch's learning-rate adjustment.
//! - [`clip`]: `clip_grad_norm` for any p-norm.
//! - [`qk_clip`]: per-head max logits and the √γ rescaling.
//! - [`svd`]: a small Jacobi SVD for the exact polar factor U Vᵀ.
//! - [`baselines`]: SGD-momentum and Adam as torch writes them.
//! - [`demo`]: the three optimizers on a teacher–student MLP.

pub mod baselines;
pub mod clip;
pub mod demo;
pub mod muon;
pub mod qk_clip;
pub mod svd;

pub use clip::clip_grad_norm;
pub use muon::{Muon, MuonConfig, newton_schulz};

use ndarray::Array2;

/// How far Newton–Schulz is from exact orthogonalisation on one matrix.
#[derive(Clone, Debug)]
pub struct OrthogonalityReport {
    /// Singular values of the input, descending.
    pub sigma_before: Vec<f64>,
    /// Singular values of `newton_schulz(G)`, descending.
    pub sigma_after: Vec<f64>,
    /// ‖NS(G) − U Vᵀ‖_F / ‖U Vᵀ‖_F.
    pub rel_error_to_polar: f64,
}

// ANCHOR: orthogonality
/// Runs Newton–Schulz on `g` and compares it with the exact polar factor from an SVD.
pub fn orthogonality_report(g: &Array2<f32>, steps: usize) -> OrthogonalityReport {
    let g64 = svd::to_f64(g);
    let polar = svd::polar_factor(&g64);
    let ns = svd::to_f64(&newton_schulz(g, steps));
    let diff = &ns - &polar;
    let fro = |m: &Array2<f64>| m.iter().map(|v| v * v).sum::<f64>().sqrt();
    OrthogonalityReport {
        sigma_before: svd::singular_values(&g64),
        sigma_after: svd::singular_values(&ns),
        rel_error_to_polar: fro(&diff) / fro(&polar),
    }
}
// ANCHOR_END: orthogonality
