//! Claims of chapter 7: optimisers (S0 5.6).

use super::{Entry, Outcome, outcome};
use crate::optim::{self, clip, qk_clip};
use crate::rand::random_tokens;
use ndarray::{ArrayD, IxDyn};

/// The global-norm rule on three seeded tensors: a clipped set ends at norm τ (up to
/// torch's 1e-6 guard) in the same direction; a set under τ is left alone.
fn opt_clip() -> Outcome {
    let shapes: [&[usize]; 3] = [&[8, 16], &[16], &[4, 4, 4]];
    let grads: Vec<ArrayD<f32>> = shapes
        .iter()
        .enumerate()
        .map(|(i, s)| {
            let n: usize = s.iter().product();
            let v = random_tokens(1, n, 40 + i as u64)
                .into_raw_vec_and_offset()
                .0;
            ArrayD::from_shape_vec(IxDyn(s), v).expect("sizes match")
        })
        .collect();
    let tau = 1.0f32;
    let mut clipped = grads.clone();
    let before = optim::clip_grad_norm(&mut clipped, tau, 2.0);
    let after = clip::total_norm(&clipped, 2.0);
    // Direction: every entry scaled by the same factor τ/‖g‖.
    let factor = tau / (before + 1e-6);
    let worst_dir = grads
        .iter()
        .zip(&clipped)
        .flat_map(|(g, c)| g.iter().zip(c.iter()).map(|(a, b)| (a * factor - b).abs()))
        .fold(0.0f32, f32::max);
    let mut small = grads.clone();
    let big_tau = 2.0 * before;
    optim::clip_grad_norm(&mut small, big_tau, 2.0);
    let untouched = small == grads;
    let ratio = f64::from(after / tau);
    outcome(
        ratio,
        format!(
            "‖g‖ = {before:.4} over 3 tensors (208 entries); clipped to τ = 1: ‖g'‖ = {after:.7} (direction kept to {worst_dir:.0e}); with τ = 2‖g‖ the gradients are unchanged: {untouched}"
        ),
        (ratio - 1.0).abs() < 1e-5 && worst_dir < 1e-6 && untouched,
        "Reproduced as torch.nn.utils.clip_grad_norm_ computes it: ‖g‖ is the global norm over all parameter tensors together (not per tensor), torch divides by ‖g‖ + 1e-6, and the result matches torch 2.15 for L2, L∞, L1 and L3 (tests/optim.rs).",
    )
}

/// Newton–Schulz on a seeded 32 × 64 Gaussian matrix: singular values before and after
/// five steps, and the distance to the exact polar factor U Vᵀ.
fn opt_muon_orthogonal() -> Outcome {
    let g = random_tokens(32, 64, 7);
    let r = optim::orthogonality_report(&g, optim::muon::NS_STEPS);
    let (b_max, b_min) = (
        r.sigma_before[0],
        *r.sigma_before.last().expect("32 values"),
    );
    let (a_max, a_min) = (r.sigma_after[0], *r.sigma_after.last().expect("32 values"));
    let spread = r
        .sigma_after
        .iter()
        .fold(0.0f64, |m, s| m.max((s - 1.0).abs()));
    outcome(
        spread,
        format!(
            "32×64 Gaussian: σ ∈ [{b_min:.2}, {b_max:.2}] (ratio {:.1}); after 5 steps σ ∈ [{a_min:.3}, {a_max:.3}]; ‖NS(G) − UVᵀ‖/‖UVᵀ‖ = {:.3}",
            b_max / b_min,
            r.rel_error_to_polar
        ),
        spread < 0.5 && a_min > 0.5,
        "Reproduced in the text's qualitative sense: a spread of singular values collapses into a band around 1 (torch's docstring: S' ~ Uniform(0.5, 1.5)), but the result is not UVᵀ: the quintic coefficients maximise the slope at zero for speed and give up convergence to exactly 1.",
    )
}

/// QK-clip on four heads of a seeded layer, two of them above τ = 10.
fn opt_qk_clip() -> Outcome {
    let (seq, hidden, heads, hd) = (16, 32, 4, 8);
    let x = random_tokens(seq, hidden, 21);
    // 1/√hidden keeps q·k of order one; heads 1 and 3 get blown-up queries.
    let init = 1.0 / (hidden as f32).sqrt();
    let mut w_q = random_tokens(heads * hd, hidden, 22) * init;
    let mut w_k = random_tokens(heads * hd, hidden, 23) * init;
    for (h, f) in [(1usize, 6.0f32), (3, 12.0)] {
        w_q.slice_mut(ndarray::s![h * hd..(h + 1) * hd, ..])
            .mapv_inplace(|v| v * f);
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let tau = 10.0;
    let mut run = || -> crate::Result<(Vec<f32>, Vec<f32>, Vec<f32>)> {
        let before = qk_clip::max_logits_per_head(&x, &w_q, &w_k, heads, scale, true)?;
        let report = qk_clip::qk_clip(&mut w_q, &mut w_k, &before, tau)?;
        let after = qk_clip::max_logits_per_head(&x, &w_q, &w_k, heads, scale, true)?;
        Ok((before, report.gammas, after))
    };
    let Ok((before, gammas, after)) = run() else {
        return outcome(f64::NAN, "shape error".into(), false, "QK-clip failed");
    };
    let mut worst = 0.0f32;
    let mut untouched = true;
    for h in 0..heads {
        if before[h] > tau {
            worst = worst.max((after[h] - tau).abs() / tau);
        } else {
            untouched &= after[h] == before[h];
        }
    }
    let fmt = |v: &[f32]| {
        v.iter()
            .map(|x| format!("{x:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    };
    outcome(
        f64::from(worst),
        format!(
            "τ = 10: S_max per head [{}] → γ [{}] → [{}]",
            fmt(&before),
            fmt(&gammas),
            fmt(&after)
        ),
        worst < 1e-5 && untouched,
        "Reproduced: scaling a head's W_q and W_k by √γ with γ = τ/S_max scales all its logits by γ, so the largest lands on τ and heads below τ are untouched. It rescales weights after the step; gradient-norm clipping (5.6.2) does not bound logits.",
    )
}

pub const ENTRIES: &[Entry] = &[
    Entry {
        id: "opt.clip",
        section: "S0 5.6.2",
        statement: "g ← g · min(1, τ/‖g‖)",
        stated: "formula",
        compute: opt_clip,
    },
    Entry {
        id: "opt.muon_orthogonal",
        section: "S0 5.6.1",
        statement: "Muon's Newton–Schulz iteration drives the update's singular values towards 1 (compared with the exact polar factor UVᵀ from an SVD)",
        stated: "qualitative → numbers",
        compute: opt_muon_orthogonal,
    },
    Entry {
        id: "opt.qk_clip",
        section: "S0 5.6.3",
        statement: "MuonClip/QK-clip: rescale W_q, W_k when the max attention logit exceeds a threshold",
        stated: "formula",
        compute: opt_qk_clip,
    },
    Entry {
        id: "opt.clip_logits",
        section: "S0 5.6, 5.6.3",
        statement: "CLIP gradient clipping prevents max-logit explosion in MoE training",
        stated: "gradient clipping bounds the logits",
        compute: opt_clip_logits,
    },
];

/// The source credits gradient clipping with stopping max-logit explosion; a toy head whose
/// loss rewards one logit shows it does not, and that QK-clip does.
fn opt_clip_logits() -> Outcome {
    let (steps, lr, clip) = (300, 0.1, 1.0);
    let clipped_only = qk_clip::logit_growth(steps, lr, clip, None);
    let with_qk = qk_clip::logit_growth(steps, lr, clip, Some(10.0));
    let (start, end) = (clipped_only[0], *clipped_only.last().expect("steps + 1"));
    let capped = with_qk.iter().fold(f32::MIN, |m, &v| m.max(v));
    outcome(
        f64::from(end),
        format!(
            "every gradient clipped to norm 1, SGD lr 0.1: max logit {start:.2} → {end:.1} after {steps} steps; with QK-clip τ = 10 it never exceeds {capped:.2}"
        ),
        end < 2.0 * 10.0,
        "Gradient-norm clipping bounds each step, not the logits: a logit the loss keeps rewarding still grows without bound. What stops max-logit explosion in MuonClip is QK-clip, which rescales the query/key weights of attention heads (Kimi K2); the source (5.6, 5.6.3, summary 6) credits 'CLIP gradient clipping' and places the explosion in MoE experts.",
    )
}
