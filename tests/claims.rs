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
    assert_eq!(
        claim("rope.slowest_quarter_turn").status,
        Status::Reproduced
    );
    assert_close(value("rope.slowest_quarter_turn"), 5000.0 * PI, 1e-15);
}

#[test]
fn rope_slowest_half_turn() {
    assert_eq!(claim("rope.slowest_half_turn").status, Status::Reproduced);
    assert_close(value("rope.slowest_half_turn"), 10000.0 * PI, 1e-15);
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
fn rope_sinusoidal() {
    assert_eq!(claim("rope.sinusoidal").status, Status::Reproduced);
    assert!(value("rope.sinusoidal") < 1e-12);
}

#[test]
fn ext_direct_ood() {
    assert_eq!(claim("ext.direct_ood").status, Status::Erratum);
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
    assert!(value("ext.flash_equiv") < 1e-5);
}
