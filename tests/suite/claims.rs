//! Pins every `rope.*` and `ext.*` claim: its status and its computed value. Expected
//! values are derived here from first principles, independently of the code under test.

use llm_anatomy::claims::{self, Status};
use std::collections::HashSet;
use std::f64::consts::PI;

fn claim(id: &str) -> claims::Claim {
    claims::find(id).unwrap_or_else(|| panic!("claim {id} missing from the registry"))
}

fn value(id: &str) -> f64 {
    claim(id)
        .value
        .unwrap_or_else(|| panic!("claim {id} has no value"))
}

fn assert_close(got: f64, want: f64, rel: f64) {
    assert!(
        (got - want).abs() <= rel * want.abs(),
        "got {got}, want {want} (rel tol {rel})"
    );
}

#[test]
fn registry_ids_are_unique_and_every_claim_has_a_note() {
    let all = claims::all();
    let ids: HashSet<_> = all.iter().map(|c| c.id).collect();
    assert_eq!(ids.len(), all.len(), "duplicate claim ids");
    for c in &all {
        assert!(
            !c.note.is_empty() && !c.computed.is_empty(),
            "{} lacks a note or a computed value",
            c.id
        );
        if c.status != Status::NeedsData {
            assert!(c.value.is_some(), "{} has no value to pin", c.id);
        }
    }
}

#[test]
fn rope_relative() {
    let c = claim("rope.relative");
    assert_eq!(c.status, Status::Reproduced);
    // Relative change of the score under common shifts, at the scale of f32 rounding.
    assert!(value("rope.relative") < 1e-6);
}

#[test]
fn rope_rotation_compose() {
    assert_eq!(claim("rope.rotation_compose").status, Status::Reproduced);
    assert!(value("rope.rotation_compose") < 1e-12);
}

#[test]
fn rope_complex_equiv() {
    assert_eq!(claim("rope.complex_equiv").status, Status::Reproduced);
    // A couple of f32 ulps at magnitudes around 2–4 (2⁻²² = 2.38e-7).
    let v = value("rope.complex_equiv");
    assert!(v > 0.0 && v <= 2.0 * 2f64.powi(-22), "{v}");
}

#[test]
fn rope_layouts() {
    assert_eq!(claim("rope.layouts").status, Status::Reproduced);
    assert_eq!(value("rope.layouts"), 0.0);
}

#[test]
fn rope_permutation_equivariance() {
    assert_eq!(
        claim("rope.permutation_equivariance").status,
        Status::Reproduced
    );
    assert!(value("rope.permutation_equivariance") < 1e-6);
}

#[test]
fn rope_clock_fast() {
    assert_eq!(claim("rope.clock.fast").status, Status::Reproduced);
    assert_close(value("rope.clock.fast"), 2.0 * PI, 1e-15);
}

#[test]
fn rope_clock_mid() {
    assert_eq!(claim("rope.clock.mid").status, Status::Erratum);
    // i = d/4 = 32: θ = 10000^(−64/128) = 1/100.
    assert_close(value("rope.clock.mid"), 2.0 * PI * 100.0, 1e-12);
}

#[test]
fn rope_clock_slow() {
    assert_eq!(claim("rope.clock.slow").status, Status::Erratum);
    // i = 63: θ = 10^(−4·126/128).
    assert_close(
        value("rope.clock.slow"),
        2.0 * PI * 10f64.powf(4.0 * 126.0 / 128.0),
        1e-12,
    );
}

#[test]
fn rope_clock_slow_qwen3() {
    assert_eq!(claim("rope.clock.slow_qwen3").status, Status::Erratum);
    assert_close(
        value("rope.clock.slow_qwen3"),
        2.0 * PI * 10f64.powf(6.0 * 126.0 / 128.0),
        1e-12,
    );
}

#[test]
fn rope_slowest_quarter_turn() {
    // The same plane as rope.clock.slow, θ₆₃ = 10^(−4·126/128): π/2 / θ₆₃ tokens.
    assert_eq!(claim("rope.slowest_quarter_turn").status, Status::Erratum);
    assert_close(
        value("rope.slowest_quarter_turn"),
        PI / 2.0 * 10f64.powf(4.0 * 126.0 / 128.0),
        1e-14,
    );
    // θ = 1/base would give (π/2)·10⁴ = 15,707.96, the text's number.
    assert!(
        claim("rope.slowest_quarter_turn")
            .computed
            .contains(&format!("{:.2}", 5000.0 * PI))
    );
}

#[test]
fn rope_slowest_half_turn() {
    assert_eq!(claim("rope.slowest_half_turn").status, Status::Erratum);
    assert_close(
        value("rope.slowest_half_turn"),
        PI * 10f64.powf(4.0 * 126.0 / 128.0),
        1e-14,
    );
    assert!(
        claim("rope.slowest_half_turn")
            .computed
            .contains(&format!("{:.2}", 10000.0 * PI))
    );
}

#[test]
fn rope_clock_slow_and_the_turns_name_the_same_plane() {
    // One plane, one verdict: period / quarter turn = 4, period / half turn = 2.
    let (wl, q, h) = (
        value("rope.clock.slow"),
        value("rope.slowest_quarter_turn"),
        value("rope.slowest_half_turn"),
    );
    assert_close(wl / q, 4.0, 1e-14);
    assert_close(wl / h, 2.0, 1e-14);
    for id in [
        "rope.clock.slow",
        "rope.slowest_quarter_turn",
        "rope.slowest_half_turn",
    ] {
        assert_eq!(claim(id).status, Status::Erratum, "{id}");
    }
}

#[test]
fn rope_decay_shape() {
    let c = claim("rope.decay_shape");
    assert_eq!(c.status, Status::Erratum);
    // The fitted slope per unit of ln τ is close to −(d/2)/ln(base) = −64/ln 10⁴.
    let predicted = -64.0 / 10_000f64.ln();
    assert!(
        (value("rope.decay_shape") - predicted).abs() < 0.1,
        "{}",
        c.computed
    );
}

#[test]
fn rope_analogy_sums() {
    assert_eq!(claim("rope.analogy_sums").status, Status::Reproduced);
    assert_close(value("rope.analogy_sums"), 3.92, 1e-15);
    // Four planes θ = 1, 0.1, 0.01, 0.001 at τ = 1.
    let real: f64 = [1.0f64, 0.1, 0.01, 0.001].iter().map(|t| t.cos()).sum();
    assert!(
        claim("rope.analogy_sums")
            .computed
            .contains(&format!("sum to {real:.2}"))
    );
}

#[test]
fn rope_no_parameters() {
    let c = claim("rope.no_parameters");
    assert_eq!(c.status, Status::Reproduced, "{}", c.computed);
    assert_eq!(value("rope.no_parameters"), 0.0);
    // A learned absolute table for Qwen3-30B-A3B: 40,960 positions × 2,048.
    assert!(
        c.computed.contains("would add 83,886,080"),
        "{}",
        c.computed
    );
}

#[test]
fn rope_sinusoidal() {
    assert_eq!(claim("rope.sinusoidal").status, Status::Reproduced);
    assert!(value("rope.sinusoidal") < 1e-12);
}

#[test]
fn ext_direct_ood() {
    // S0 5.2.1: angles leave the trained range (on the slow planes).
    assert_eq!(claim("ext.direct_ood").status, Status::Reproduced);
    assert!(claim("ext.direct_ood").section.starts_with("S0 5.2.1"));
    // Planes whose wavelength exceeds 4096 − 1 tokens: θ_i < 2π/4095, i.e. i > 16·log10(4095/2π).
    let first = (16.0 * (4095.0 / (2.0 * PI)).log10()).floor() as usize + 1;
    assert_eq!(value("ext.direct_ood") as usize, 64 - first);
}

#[test]
fn ext_pi() {
    assert_eq!(claim("ext.pi").status, Status::Reproduced);
    assert!(value("ext.pi") < 1e-9);
}

#[test]
fn ext_pi_resolution() {
    assert_eq!(claim("ext.pi_resolution").status, Status::Reproduced);
    assert_eq!(value("ext.pi_resolution"), 8.0);
}

#[test]
fn ext_ntk_base() {
    assert_eq!(claim("ext.ntk_base").status, Status::Reproduced);
    assert_close(value("ext.ntk_base"), 8.0, 1e-12);
}

#[test]
fn ext_ntk_direction() {
    // θ_i/θ'_i = (base'/base)^(2i/d) = s^(2i/(d−2)): 1 at i = 0, s at i = d/2 − 1.
    let c = claim("ext.ntk_direction");
    assert_eq!(c.status, Status::Erratum);
    assert_close(value("ext.ntk_direction"), 8.0, 1e-12);
    let plane32 = 8f64.powf(64.0 / 126.0);
    assert!(
        c.computed.contains(&format!("plane 32 ÷{plane32:.3}")),
        "{}",
        c.computed
    );
    assert!(c.computed.contains("plane 0 ÷1.000"), "{}", c.computed);
}

#[test]
fn ext_ntk_example() {
    assert_eq!(claim("ext.ntk_example").status, Status::Reproduced);
    // base'/base = s^(d/(d−2)) ⇒ s = exp(ln 50 · 126/128).
    assert_close(
        value("ext.ntk_example"),
        (50f64.ln() * 126.0 / 128.0).exp(),
        1e-14,
    );
}

#[test]
fn ext_s1_4k_32k() {
    assert_eq!(claim("ext.s1_4k_32k").status, Status::Erratum);
    // Out of range: planes whose wavelength 2π/θ_i exceeds 4095 (the same as at 5000).
    let count = (0..64)
        .filter(|&i| 2.0 * PI * 10f64.powf(4.0 * (2 * i) as f64 / 128.0) > 4095.0)
        .count();
    assert_eq!(value("ext.s1_4k_32k") as usize, count);
    assert_eq!(value("ext.s1_4k_32k"), value("ext.direct_ood"));
    assert!(claim("ext.s1_4k_32k").section.starts_with("S1"));
}

#[test]
fn ext_deepseek_theta() {
    assert_eq!(claim("ext.deepseek_theta").status, Status::Reproduced);
    assert_eq!(value("ext.deepseek_theta"), 10_000.0);
    // 64 rotary dims: the slowest of 32 planes has θ = 10^(−4·62/64), YaRN divides it by 40.
    let before = 2.0 * PI * 10f64.powf(4.0 * 62.0 / 64.0);
    let c = claim("ext.deepseek_theta");
    assert!(
        c.computed
            .contains(&format!("{before:.0} → {:.0}", 40.0 * before)),
        "{}",
        c.computed
    );
}

#[test]
fn ext_sliding_reach() {
    assert_eq!(claim("ext.sliding_reach").status, Status::Reproduced);
    // Each layer adds W − 1 positions to the query's own: 32·4095 + 1.
    assert_eq!(value("ext.sliding_reach"), (32 * 4095 + 1) as f64);
    assert!(
        claim("ext.sliding_reach")
            .computed
            .contains("reach [4, 7, 10, 13]")
    );
}

#[test]
fn ext_scale_4k_1m() {
    assert_eq!(claim("ext.scale_4k_1m").status, Status::Reproduced);
    assert_eq!(value("ext.scale_4k_1m"), 1_048_576.0 / 4096.0);
    assert!(claim("ext.scale_4k_1m").computed.contains("65536×"));
}

#[test]
fn ext_yarn_adopters() {
    let c = claim("ext.yarn_adopters");
    // Qwen's half holds (plain RoPE released, YaRN the documented opt-in); Llama 3.1's
    // published config uses rope_type "llama3", so the statement fails on that half.
    assert_eq!(c.status, Status::Erratum);
    assert_eq!(value("ext.yarn_adopters"), 1.0);
    assert!(
        c.computed.contains("qwen3-30b-a3b: released plain RoPE"),
        "{}",
        c.computed
    );
    assert!(c.computed.contains("to 131072 positions"), "{}", c.computed);
    assert!(
        c.computed
            .contains("llama-3.1-8b: rope_type llama3, θ = 500000, 131072 positions"),
        "{}",
        c.computed
    );
}

#[test]
fn ext_yarn_bands() {
    let c = claim("ext.yarn_bands");
    assert_eq!(c.status, Status::Reproduced);
    assert_close(value("ext.yarn_bands"), 0.1 * 4f64.ln() + 1.0, 1e-15);
    // Plane i turns 32768·θ_i/2π times; it keeps its speed while that exceeds 32 (β_fast).
    let kept = (0..64)
        .filter(|&i| 32768.0 * 1e6f64.powf(-(2.0 * i as f64) / 128.0) / (2.0 * PI) > 32.0)
        .count();
    assert!(
        c.computed.contains(&format!("{kept} planes kept")),
        "{}",
        c.computed
    );
}

#[test]
fn ext_deepseek_v3() {
    assert_eq!(claim("ext.deepseek_v3").status, Status::Reproduced);
    assert_eq!(value("ext.deepseek_v3"), 40.0 * 4096.0);
}

#[test]
fn ext_qwen3_theta() {
    assert_eq!(claim("ext.qwen3_theta").status, Status::Erratum);
    assert_close(
        value("ext.qwen3_theta"),
        2.0 * PI * 10f64.powf(6.0 * 126.0 / 128.0),
        1e-12,
    );
}

#[test]
fn ext_attention_matrix_memory() {
    let c = claim("ext.attention_matrix_memory");
    assert_eq!(c.status, Status::Erratum);
    assert_eq!(value("ext.attention_matrix_memory"), 128_000.0 * 128_000.0);
    assert!(
        c.computed.contains("32.8 GB") && c.computed.contains("32 GiB"),
        "{}",
        c.computed
    );
}

#[test]
fn ext_lost_in_middle() {
    assert_eq!(claim("ext.lost_in_middle").status, Status::NeedsData);
}

#[test]
fn ext_flash_equiv() {
    assert_eq!(claim("ext.flash_equiv").status, Status::Reproduced);
    // Both outputs are convex combinations of v's rows (|v| < 8 for these 256 × 64 seeded
    // normals), summed in different orders: they differ by a couple of ulps of the largest
    // outputs (2⁻²¹ in [4, 8)), so 2⁻²⁰. (Measured: 7·2⁻²⁴.)
    assert!(value("ext.flash_equiv") <= 2f64.powi(-20));
}
