//! Claims of chapters 1–2: position encoding and RoPE (S0 5.1, S1 §1).

// The text's stated values (6.28, …) are compared with, not used as, constants.
#![allow(clippy::approx_constant)]

use super::{Entry, Outcome, Status, max_abs_diff, outcome, seeded_vec};
use crate::position::{decay, equivariance, rope, sinusoidal};
use std::f64::consts::PI;

/// The text's defaults: head dimension 128, base 10 000.
pub(crate) const D: usize = 128;
pub(crate) const BASE: f64 = 10_000.0;

// ---------------------------------------------------------------- position (S0 5.1, S1 §1)

fn rope_relative() -> Outcome {
    let (q, k) = (seeded_vec(D, 1), seeded_vec(D, 2));
    let table = rope::RopeTable::new(&rope::inv_freq(D, BASE), 1200, 1.0);
    let base_score = rope::rope_score(&q, &k, &table, 3, 17);
    // S1 exercise 1: both positions +10; then a few larger common shifts.
    let shifts = [10usize, 100, 500, 1000];
    let worst = shifts
        .iter()
        .map(|&s| (rope::rope_score(&q, &k, &table, 3 + s, 17 + s) - base_score).abs())
        .fold(0.0f32, f32::max);
    let norm = crate::kernels::dot(&q, &q).sqrt() * crate::kernels::dot(&k, &k).sqrt();
    let rel = worst / norm;
    outcome(
        rel as f64,
        format!(
            "score {base_score:.6} at (3, 17); max change under shifts +10…+1000: {worst:.2e} ({rel:.1e} of |q||k|)"
        ),
        rel < 1e-5,
        "Shifting both positions leaves the score unchanged up to f32 rounding of the angles m·θ (which grows with m: in f32, m·θ at m = 10⁴ is only good to ~10⁻³ rad).",
    )
}

fn rope_rotation_compose() -> Outcome {
    let f = rope::inv_freq(D, BASE);
    let mut worst = 0.0f64;
    for (m, n) in [(0.0, 5.0), (7.0, 19.0), (123.0, 45.0), (1000.0, 4096.0)] {
        let lhs = rope::rotation_matrix(&f, m)
            .t()
            .dot(&rope::rotation_matrix(&f, n));
        let rhs = rope::rotation_matrix(&f, n - m);
        worst = worst.max((&lhs - &rhs).iter().fold(0.0f64, |a, d| a.max(d.abs())));
    }
    outcome(
        worst,
        format!("max |R_mᵀR_n − R_(n−m)| = {worst:.1e} over 4 pairs (f64, d = 128)"),
        worst < 1e-12,
        "Holds to f64 rounding: each 2×2 block composes as cos/sin of an angle difference.",
    )
}

fn rope_complex_equiv() -> Outcome {
    let x = seeded_vec(D, 3);
    let f = rope::inv_freq(D, BASE);
    let positions = 4096;
    let table = rope::RopeTable::new(&f, positions, 1.0);
    let inv32: Vec<f32> = f.iter().map(|&v| v as f32).collect();
    let mut worst = 0.0f32;
    for m in 0..positions {
        let (c, s) = table.row(m);
        let mut real = x.clone();
        rope::apply_rope(&mut real, c, s);
        let angles: Vec<f32> = inv32.iter().map(|&t| m as f32 * t).collect();
        let complex = rope::apply_rope_complex(&x, &angles);
        worst = worst.max(max_abs_diff(&real, &complex));
    }
    outcome(
        worst as f64,
        format!("max |half-split − complex| = {worst:.2e} over 4096 positions"),
        worst > 0.0 && worst < 1e-6,
        "Same order as the text's 2.38e-07: the two forms differ only by f32 rounding of cos/sin (the exact value depends on the random input).",
    )
}

fn rope_layouts() -> Outcome {
    let (q, k) = (seeded_vec(D, 4), seeded_vec(D, 5));
    let perm = rope::half_split_to_interleaved(D);
    let permute = |v: &[f32]| perm.iter().map(|&j| v[j]).collect::<Vec<f32>>();
    let table = rope::RopeTable::new(&rope::inv_freq(D, BASE), 64, 1.0);
    let (mut worst_vec, mut worst_score) = (0.0f32, 0.0f32);
    for (m, n) in [(0usize, 0usize), (5, 9), (40, 3), (63, 62)] {
        let (mut qh, mut kh) = (q.clone(), k.clone());
        let (mut qi, mut ki) = (permute(&q), permute(&k));
        let (cm, sm) = table.row(m);
        let (cn, sn) = table.row(n);
        rope::apply_rope(&mut qh, cm, sm);
        rope::apply_rope(&mut kh, cn, sn);
        rope::apply_rope_interleaved(&mut qi, cm, sm);
        rope::apply_rope_interleaved(&mut ki, cn, sn);
        worst_vec = worst_vec
            .max(max_abs_diff(&permute(&qh), &qi))
            .max(max_abs_diff(&permute(&kh), &ki));
        let (sh, si) = (crate::kernels::dot(&qh, &kh), crate::kernels::dot(&qi, &ki));
        worst_score = worst_score.max((sh - si).abs());
    }
    outcome(
        worst_vec as f64,
        format!(
            "rotated vectors equal after the permutation: max diff {worst_vec:e}; scores differ by ≤ {worst_score:.1e} (summation order)"
        ),
        worst_vec == 0.0,
        "Exact: interleaving is a fixed permutation of dimensions, applied before and after the same per-plane arithmetic.",
    )
}

fn rope_permutation_equivariance() -> Outcome {
    let head = equivariance::Head::random(32, 16, 6);
    let x = crate::rand::random_tokens(8, 32, 7);
    let perm = [3usize, 0, 7, 1, 6, 2, 5, 4];
    let without = equivariance::equivariance_gap(&head, &x, &perm, false);
    let with = equivariance::equivariance_gap(&head, &x, &perm, true);
    Outcome {
        value: Some(without as f64),
        computed: format!("max |out[π] − out(x[π])| = {without:.1e} without position encoding, {with:.2} with RoPE"),
        status: if without < 1e-5 && with > 1e-2 { Status::Reproduced } else { Status::Erratum },
        note: "Without positions the head only permutes its outputs (rounding aside); RoPE makes the outputs depend on the order.".into(),
    }
}

fn clock(i: usize, base: f64) -> (f64, f64) {
    let theta = rope::inv_freq(D, base)[i];
    (theta, rope::wavelength(theta))
}

fn rope_clock_fast() -> Outcome {
    let (theta, wl) = clock(0, BASE);
    outcome(
        wl,
        format!("θ₀ = {theta}, wavelength {wl:.2} tokens"),
        theta == 1.0 && (wl - 6.28).abs() < 0.005,
        "The fastest plane turns one radian per token.",
    )
}

fn rope_clock_mid() -> Outcome {
    let (theta, wl) = clock(D / 4, BASE);
    outcome(
        wl,
        format!("θ₃₂ = {theta:.4}, wavelength {wl:.1} tokens"),
        (theta - 0.03).abs() < 0.005 && (wl - 200.0).abs() < 50.0,
        "At i = d/4 = 32, θ = base^(−1/2) = 0.01 and the wavelength is ≈ 628 tokens; θ ≈ 0.03 (≈ 200 tokens) belongs to i ≈ 24.",
    )
}

/// The slowest plane of d = 128, `θ₆₃ = base^(−(d−2)/d)`: the plane `rope.clock.slow`,
/// `rope.slowest_quarter_turn` and `rope.slowest_half_turn` all talk about.
fn slowest_theta(base: f64) -> f64 {
    rope::inv_freq(D, base)[D / 2 - 1]
}

fn rope_clock_slow() -> Outcome {
    let (theta, wl) = clock(D / 2 - 1, BASE);
    let stated = 2.0 * PI * BASE;
    outcome(
        wl,
        format!(
            "θ₆₃ = {theta:.4e} = {:.3}/base, wavelength {wl:.0} tokens (2π·base = {stated:.0})",
            theta * BASE
        ),
        (wl - stated).abs() < 1.0,
        "The slowest plane of d = 128 has θ = base^(−(d−2)/d) = 1.155e-4 — 1/base only to one significant figure — so its period is ≈ 54,410 tokens, not 62,832; 2π·base is the d → ∞ limit. rope.slowest_quarter_turn and rope.slowest_half_turn are the same plane.",
    )
}

fn rope_clock_slow_qwen3() -> Outcome {
    let (theta, wl) = clock(D / 2 - 1, 1e6);
    outcome(
        wl,
        format!("θ₆₃ = {theta:.4e}, wavelength {:.3e} tokens", wl),
        (wl / 1e6 - 6.28).abs() < 0.005,
        "With base 10⁶ and d = 128 the slowest period is 2π·10^(6·126/128) ≈ 5.06·10⁶ tokens, not 2π·10⁶ ≈ 6.28·10⁶.",
    )
}

/// Tokens for the slowest plane of d = 128 to turn by `angle`, and what θ = 1/base (the
/// text's approximation) would give.
fn turn_tokens(angle: f64) -> (f64, f64) {
    (angle / slowest_theta(BASE), angle * BASE)
}

fn rope_slowest_quarter_turn() -> Outcome {
    let (tokens, approx) = turn_tokens(PI / 2.0);
    outcome(
        tokens,
        format!("θ₆₃ turns π/2 in {tokens:.0} tokens; θ = 1/base would take {approx:.2}"),
        (tokens - 15_707.0).abs() < 1.0,
        "The same plane as rope.clock.slow: (π/2)·base = 15,707.96 is right for θ = 1/base, but the slowest plane of d = 128 has θ₆₃ = base^(−126/128) = 1.155e-4 and reaches π/2 after ≈ 13,602 tokens.",
    )
}

fn rope_slowest_half_turn() -> Outcome {
    let (tokens, approx) = turn_tokens(PI);
    outcome(
        tokens,
        format!("θ₆₃ turns π in {tokens:.0} tokens; θ = 1/base would take {approx:.2}"),
        (tokens - 31_415.0).abs() < 1.0,
        "The same plane as rope.clock.slow: π·base = 31,415.93 holds for θ = 1/base, but d = 128's slowest plane (θ₆₃ = 1.155e-4) turns by π after ≈ 27,205 tokens.",
    )
}

fn rope_decay_shape() -> Outcome {
    let fit = decay::fit_decay(D, BASE, 1e4, 200);
    let follows_inverse = fit.inverse_r2 > fit.log_r2 && fit.inverse_r2 > 0.9;
    outcome(
        fit.log_slope,
        format!(
            "S(τ) ≈ {:.1} {:+.2}·ln τ (R² {:.3}; predicted slope {:.2}); power law τ^−{:.2}: R² {:.2}; C/τ: R² {:.2}",
            fit.log_intercept,
            fit.log_slope,
            fit.log_r2,
            fit.predicted_log_slope,
            fit.power_p,
            fit.power_r2,
            fit.inverse_r2
        ),
        follows_inverse,
        "Over 1 ≤ τ ≤ 10⁴ the decay is logarithmic, S ≈ (d/2)/ln(base)·(ln(base/τ) − γ), not O(1/τ): a C/τ fit explains less than the mean does.",
    )
}

fn rope_sinusoidal() -> Outcome {
    let table = sinusoidal::sinusoidal_table(512, D, BASE);
    let worst = [1usize, 7, 100]
        .iter()
        .map(|&k| sinusoidal::shift_is_linear_error(&table, k, BASE))
        .fold(0.0f64, f64::max);
    let bounded = table.iter().all(|v| v.abs() <= 1.0);
    outcome(
        worst,
        format!(
            "PE(pos+k) = R_k·PE(pos) to {worst:.1e} for k = 1, 7, 100; all entries in [−1, 1]: {bounded}"
        ),
        worst < 1e-12 && bounded,
        "PE(pos, 2i) = sin(pos/10000^(2i/d)), PE(pos, 2i+1) = cos(…); a shift is a fixed rotation, yet the vector is added to the content, so the model still sees absolute positions.",
    )
}

/// S0 5.1.7's two interference analogies, added term by term.
fn rope_analogy_sums() -> Outcome {
    let near = [1.0f64, 0.99, 0.98, 0.95];
    let far = [0.5f64, -0.6, -0.8, 0.9];
    let (sn, sf): (f64, f64) = (near.iter().sum(), far.iter().sum());
    // Four planes of a real RoPE (d = 8, base 10⁴) at τ = 1, for scale.
    let real = decay::decay_sum(8, BASE, 1.0);
    outcome(
        sn,
        format!(
            "1 + 0.99 + 0.98 + 0.95 = {sn:.2}; 0.5 − 0.6 − 0.8 + 0.9 = {:.2} ({sf:.0e} in f64); four real planes (d = 8) at τ = 1 sum to {real:.2}",
            sf.abs()
        ),
        sn.round() == 4.0 && sf.abs() < 0.05,
        "Both sums are as stated (3.92 rounds to 4; the second is 0 exactly in decimal). They are illustrations, not values of one RoPE: four cosines can sum to at most 4, and a real 4-plane RoPE (θ = 1, 0.1, 0.01, 0.001) gives 3.54 already at τ = 1.",
    )
}

/// S1 interview Q1 ②: RoPE has nothing to learn. Every tensor of the bundled checkpoint
/// (written by transformers' save_pretrained) and every tensor the published Qwen3-30B-A3B
/// config implies, checked for position parameters; the stored total against the count.
fn rope_no_parameters() -> Outcome {
    let positional = |name: &str| {
        ["rotary", "inv_freq", "rope", "position", "wpe"]
            .iter()
            .any(|p| name.contains(p))
    };
    let run = || -> crate::Result<(usize, usize, u64, u64, usize, usize, u64)> {
        let dir = crate::qwen3::bundled_dir();
        let ckpt = crate::checkpoint::Checkpoint::open(&dir)?;
        let names = ckpt.names();
        let in_ckpt = names.iter().filter(|n| positional(n)).count();
        let mut stored = 0u64;
        for n in &names {
            stored += ckpt.info(n)?.shape.iter().product::<usize>() as u64;
        }
        let cfg = crate::error::read_json(&dir.join("config.json"))?;
        let tiny = crate::params::ModelConfig::from_json(&cfg, "data/tiny-qwen3-moe/config.json")?;
        let counted = crate::params::count(&tiny).total;
        let big = crate::params::bundled("qwen3-30b-a3b")?;
        let listed: Vec<crate::params::ParamTensor> = (0..big.num_hidden_layers)
            .flat_map(|l| crate::params::layer_tensors(&big, l))
            .collect();
        let in_list = listed.iter().filter(|t| positional(&t.name)).count();
        let raw: serde_json::Value = serde_json::from_str(
            crate::params::BUNDLED
                .iter()
                .find(|(n, _)| *n == "qwen3-30b-a3b")
                .map(|(_, t)| *t)
                .unwrap_or("{}"),
        )
        .map_err(|source| crate::Error::Json {
            what: "data/configs/qwen3-30b-a3b.json".into(),
            source,
        })?;
        let learned = raw["max_position_embeddings"].as_u64().unwrap_or(0) * big.hidden_size;
        Ok((
            names.len(),
            in_ckpt,
            stored,
            counted,
            listed.len(),
            in_list,
            learned,
        ))
    };
    match run() {
        Ok((n_tensors, in_ckpt, stored, counted, listed, in_list, learned)) => outcome(
            (in_ckpt + in_list) as f64,
            format!(
                "bundled checkpoint: {n_tensors} tensors, {in_ckpt} for positions; {stored} stored parameters = {counted} counted without any: {}; Qwen3-30B-A3B: {in_list} of {listed} layer tensors for positions; a learned absolute table of its 40,960 × 2,048 would add {}",
                stored == counted,
                crate::params::group(learned)
            ),
            in_ckpt == 0 && in_list == 0 && stored == counted,
            "Reproduced: RoPE's angles come from rope_theta and the position alone (transformers keeps inv_freq as a non-persistent buffer, so no checkpoint stores it), and every stored parameter is accounted for by a count that has no position term.",
        ),
        Err(e) => outcome(
            f64::NAN,
            format!("reading the bundled checkpoint failed: {e}"),
            false,
            "The computation itself failed; see the message.",
        ),
    }
}

pub const ENTRIES: &[Entry] = &[
    Entry {
        id: "rope.relative",
        section: "S0 5.1.3, S1 ex. 1",
        statement: "(R_m q)·(R_n k) depends only on n−m; shifting both positions leaves the score unchanged",
        stated: "exact up to f32 rounding",
        compute: rope_relative,
    },
    Entry {
        id: "rope.rotation_compose",
        section: "S0 5.1.3",
        statement: "R_mᵀ R_n = R_{n−m}",
        stated: "exact up to rounding",
        compute: rope_rotation_compose,
    },
    Entry {
        id: "rope.complex_equiv",
        section: "S0 5.1.8",
        statement: "half-split real implementation vs complex multiplication: max abs difference",
        stated: "≈ 2.38e-07",
        compute: rope_complex_equiv,
    },
    Entry {
        id: "rope.layouts",
        section: "S0 5.1.8, S1 §1",
        statement: "half-split and interleaved layouts agree after a fixed permutation",
        stated: "exact",
        compute: rope_layouts,
    },
    Entry {
        id: "rope.permutation_equivariance",
        section: "S0 5.1.1, S1 §1",
        statement: "attention without position encoding is permutation-equivariant",
        stated: "exact",
        compute: rope_permutation_equivariance,
    },
    Entry {
        id: "rope.clock.fast",
        section: "S0 5.1.5",
        statement: "i = 0: θ₀ and wavelength",
        stated: "θ = 1, ≈ 6.28 tokens",
        compute: rope_clock_fast,
    },
    Entry {
        id: "rope.clock.mid",
        section: "S0 5.1.5",
        statement: "i = d/4: θ and wavelength",
        stated: "θ ≈ 0.03, ≈ 200 tokens",
        compute: rope_clock_mid,
    },
    Entry {
        id: "rope.clock.slow",
        section: "S0 5.1.5",
        statement: "i = d/2−1: θ and wavelength, base 10000",
        stated: "θ ≈ 1/base, ≈ 2π·base ≈ 62,831 tokens",
        compute: rope_clock_slow,
    },
    Entry {
        id: "rope.clock.slow_qwen3",
        section: "S0 5.1.5",
        statement: "slowest wavelength, base 1,000,000",
        stated: "≈ 6.28·10⁶ tokens",
        compute: rope_clock_slow_qwen3,
    },
    Entry {
        id: "rope.slowest_quarter_turn",
        section: "S0 5.1.7",
        statement: "tokens for the slowest plane (θ_min ≈ 1/base) to rotate π/2",
        stated: "≈ 15,707",
        compute: rope_slowest_quarter_turn,
    },
    Entry {
        id: "rope.slowest_half_turn",
        section: "S0 5.1.7",
        statement: "tokens for the slowest plane (θ_min ≈ 1/base) to rotate π",
        stated: "≈ 31,415",
        compute: rope_slowest_half_turn,
    },
    Entry {
        id: "rope.decay_shape",
        section: "S0 5.1.7",
        statement: "S(τ) = Σ cos(τθ_j) decays approximately as O(1/τ)",
        stated: "O(1/τ)",
        compute: rope_decay_shape,
    },
    Entry {
        id: "rope.sinusoidal",
        section: "S1 §1",
        statement: "sinusoidal absolute encoding PE(pos)",
        stated: "formula",
        compute: rope_sinusoidal,
    },
    Entry {
        id: "rope.analogy_sums",
        section: "S0 5.1.7",
        statement: "the interference analogies: 1 + 0.99 + 0.98 + 0.95 ≈ 4 and 0.5 − 0.6 − 0.8 + 0.9 ≈ 0",
        stated: "≈ 4, ≈ 0",
        compute: rope_analogy_sums,
    },
    Entry {
        id: "rope.no_parameters",
        section: "S1 interview Q1",
        statement: "RoPE adds no learned parameters",
        stated: "0 parameters",
        compute: rope_no_parameters,
    },
];
