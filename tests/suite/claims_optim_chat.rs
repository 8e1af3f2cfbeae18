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
    // The same three seeded tensors, their global norm in f64: the claim's ratio is that
    // quotient up to f32 rounding of the clipped entries and of their norm — two ulps of
    // a number just under 1 (2⁻²³).
    let norm = [128usize, 16, 64]
        .iter()
        .enumerate()
        .flat_map(|(i, &n)| {
            random_tokens(1, n, 40 + i as u64)
                .into_raw_vec_and_offset()
                .0
        })
        .map(|x| f64::from(x).powi(2))
        .sum::<f64>()
        .sqrt();
    let want = norm / (norm + 1e-6);
    assert!((v - want).abs() <= 2f64.powi(-23), "{v} vs {want}");
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
    // γ = min(1, τ/S_max) derived here: the claim's seeded layer (16 tokens, hidden 32,
    // 4 heads of 8; heads 1 and 3 with queries ×6 and ×12), causal logits in f64 loops.
    let (seq, hidden, heads, hd) = (16usize, 32usize, 4usize, 8usize);
    let f64s = |a: ndarray::Array2<f32>| a.mapv(f64::from);
    let init = 1.0 / (hidden as f64).sqrt();
    let x = f64s(random_tokens(seq, hidden, 21));
    let mut w_q = f64s(random_tokens(heads * hd, hidden, 22)) * init;
    let w_k = f64s(random_tokens(heads * hd, hidden, 23)) * init;
    for (h, f) in [(1usize, 6.0), (3, 12.0)] {
        w_q.slice_mut(ndarray::s![h * hd..(h + 1) * hd, ..])
            .mapv_inplace(|v| v * f);
    }
    let (q, k) = (x.dot(&w_q.t()), x.dot(&w_k.t()));
    let gammas: Vec<String> = (0..heads)
        .map(|h| {
            let mut max = f64::MIN;
            for i in 0..seq {
                for j in 0..=i {
                    let s: f64 = (0..hd)
                        .map(|c| q[[i, h * hd + c]] * k[[j, h * hd + c]])
                        .sum::<f64>()
                        / (hd as f64).sqrt();
                    max = max.max(s);
                }
            }
            format!("{:.2}", (10.0 / max).min(1.0))
        })
        .collect();
    assert!(
        claim("opt.qk_clip")
            .computed
            .contains(&format!("→ γ [{}]", gammas.join(", "))),
        "{gammas:?}: {}",
        claim("opt.qk_clip").computed
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
    // 23 is tiktoken's count for the early-stop text (scripts/gen_claims_fixtures.py), and
    // our tokenizer gives tiktoken's ids.
    let fx = claims_fixture();
    assert_eq!(
        fx["early_stop_text"].as_str().unwrap(),
        llm_anatomy::chat::EARLY_STOP_TEXT
    );
    let want: Vec<u32> = fx["early_stop_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    assert_eq!(want.len(), 23);
    let ours = llm_anatomy::tokenizer::Tokenizer::qwen()
        .unwrap()
        .encode(llm_anatomy::chat::EARLY_STOP_TEXT)
        .unwrap();
    assert_eq!(ours, want);
}

fn claims_fixture() -> serde_json::Value {
    let path = format!(
        "{}/tests/fixtures/claims/tiktoken.json",
        env!("CARGO_MANIFEST_DIR")
    );
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn chat_budget_placement() {
    let c = claim("chat.budget_placement");
    assert_eq!(c.status, Status::Erratum);
    // Rendered by Qwen3's template: "<|im_start|>system\n" (3 tokens), the early-stop text
    // (23, its </think> the 22nd), then the rest; the </think> sits well before the turn.
    let v = value("chat.budget_placement");
    assert!(v < 0.0, "{v}");
    let early: Vec<u64> = claims_fixture()["early_stop_ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let close = 3 + early.iter().position(|&t| t == 151_668).unwrap();
    assert!(
        c.computed
            .contains(&format!("its </think> is token {close}")),
        "{}",
        c.computed
    );
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
