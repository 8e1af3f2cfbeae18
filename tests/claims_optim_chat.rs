//! Pins every `opt.*` and `chat.*` claim: status and computed value, with the expected
//! value derived here by a different route where there is one.

use llm_anatomy::claims::{self, Status};
use llm_anatomy::optim::{muon, svd};
use llm_anatomy::rand::random_tokens;

fn claim(id: &str) -> claims::Claim {
    claims::find(id).unwrap_or_else(|| panic!("claim {id} missing from the registry"))
}

fn value(id: &str) -> f64 {
    claim(id)
        .value
        .unwrap_or_else(|| panic!("claim {id} has no value"))
}

#[test]
fn opt_clip() {
    assert_eq!(claim("opt.clip").status, Status::Reproduced);
    // ‖g'‖/τ = ‖g‖/(‖g‖ + 1e-6): a hair under 1 for ‖g‖ ≈ 14.
    let v = value("opt.clip");
    assert!(v <= 1.0 + 1e-6 && v > 1.0 - 1e-5, "{v}");
}

#[test]
fn opt_muon_orthogonal() {
    assert_eq!(claim("opt.muon_orthogonal").status, Status::Reproduced);
    // Another route: Newton–Schulz maps each singular value σ/‖G‖_F through the scalar
    // quintic p five times (it commutes with the SVD), so the worst distance from 1 is
    // max |p⁵(σ_i/‖σ‖) − 1| — computed here in f64 from the SVD alone.
    let g = random_tokens(32, 64, 7);
    let sigma = svd::singular_values(&svd::to_f64(&g));
    let fro = sigma.iter().map(|s| s * s).sum::<f64>().sqrt();
    let worst = sigma
        .iter()
        .map(|&s| {
            let mut x = s / fro;
            for _ in 0..5 {
                x = muon::ns_polynomial(x, muon::NS_COEFFICIENTS);
            }
            (x - 1.0).abs()
        })
        .fold(0.0f64, f64::max);
    let v = value("opt.muon_orthogonal");
    assert!(
        (v - worst).abs() < 1e-5,
        "claim {v} vs scalar route {worst}"
    );
    assert!(v > 0.2 && v < 0.5, "{v}");
}

#[test]
fn opt_qk_clip() {
    assert_eq!(claim("opt.qk_clip").status, Status::Reproduced);
    assert!(value("opt.qk_clip") < 1e-5);
    assert!(
        claim("opt.qk_clip")
            .computed
            .contains("→ γ [1.00, 0.44, 1.00, 0.27]")
    );
}

#[test]
fn chat_chatml() {
    assert_eq!(claim("chat.chatml").status, Status::Reproduced);
    assert_eq!(value("chat.chatml"), 1.0);
    assert!(claim("chat.chatml").computed.starts_with("110 chars"));
}

#[test]
fn chat_think_tags() {
    assert_eq!(claim("chat.think_tags").status, Status::Reproduced);
    assert_eq!(value("chat.think_tags"), 1.0);
}

#[test]
fn chat_budget() {
    assert_eq!(claim("chat.budget").status, Status::Reproduced);
    // Injected right after <think> and the 8 budgeted tokens: index 1 + 8.
    assert_eq!(value("chat.budget"), 9.0);
    assert!(claim("chat.budget").computed.contains("(23 tokens)"));
}

#[test]
fn opt_clip_logits() {
    let c = claim("opt.clip_logits");
    assert_eq!(c.status, Status::Erratum);
    // With every gradient clipped to norm 1 and lr 0.1, each step moves W_q and W_k by at
    // most 0.1 in Frobenius norm, yet the logit ends three orders of magnitude up; QK-clip
    // holds it at τ = 10.
    let v = value("opt.clip_logits");
    assert!(v > 1000.0, "{v}");
    let capped = llm_anatomy::optim::qk_clip::logit_growth(300, 0.1, 1.0, Some(10.0));
    assert!(
        capped.iter().all(|&m| m <= 10.0 * (1.0 + 1e-5)),
        "{capped:?}"
    );
    assert!(c.computed.contains("never exceeds 10.00"));
}
