//! Pins every `tok.*` claim: status and computed value. The expected counts were
//! established independently in Python (scripts/gen_tokenizer_fixtures.py writes the
//! literal-scan ids from tiktoken's decoding; scripts/gen_synthetic_glitch.py writes the
//! never-seen rows of the synthetic checkpoint).

use llm_anatomy::claims::{self, Status};
use llm_anatomy::tokenizer::{Tokenizer, glitch};
use std::path::Path;

fn claim(id: &str) -> claims::Claim {
    claims::find(id).unwrap_or_else(|| panic!("claim {id} missing from the registry"))
}

fn pinned(id: &str, status: Status) -> f64 {
    let c = claim(id);
    assert_eq!(c.status, status, "{id}: {}", c.computed);
    c.value.unwrap_or_else(|| panic!("{id} has no value"))
}

#[test]
fn every_tok_catalogue_id_is_registered() {
    for id in [
        "tok.glitch_ids",
        "tok.literal_scan",
        "tok.norm_scan",
        "tok.glitch_norms",
        "tok.vocab_sizes",
        "tok.special",
        "tok.untrained_norm",
        "tok.init_norm",
        "tok.glitch_rmsnorm",
        "tok.bos_sink",
    ] {
        let c = claim(id);
        assert!(!c.note.is_empty(), "{id}");
    }
}

#[test]
fn tok_glitch_ids() {
    assert_eq!(pinned("tok.glitch_ids", Status::Reproduced), 6.0);
    assert!(
        claim("tok.glitch_ids")
            .computed
            .contains("117332 = 法战组合")
    );
}

#[test]
fn tok_literal_scan() {
    assert_eq!(pinned("tok.literal_scan", Status::Reproduced), 410.0);
    let c = claim("tok.literal_scan");
    // The Python side (tiktoken decode, errors="replace") counted 410 too, and 937 by bytes.
    let fx: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer/vocab.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(fx["literal_scan_ids"].as_array().unwrap().len(), 410);
    let by_bytes = fx["literal_scan_bytes_count"].as_u64().unwrap();
    assert!(
        c.computed.contains(&format!("would give {by_bytes}")),
        "{}",
        c.computed
    );
    assert!(c.computed.contains("97 whitespace runs"), "{}", c.computed);
    // 97: tiktoken's decoding, classified by Python's str.strip (scripts/gen_claims_fixtures.py).
    let claims_fx: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/claims/tiktoken.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let ws = claims_fx["literal_scan_whitespace"].as_u64().unwrap();
    assert!(
        c.computed.contains(&format!("{ws} whitespace runs")),
        "{}",
        c.computed
    );
}

#[test]
fn tok_norm_scan() {
    let c = claim("tok.norm_scan");
    assert_eq!(c.status, Status::NeedsData);
    assert!(c.note.contains("--top-k 10000"), "{}", c.note);
    assert!(
        c.note.contains("glitch --vocab data/qwen.tiktoken --model"),
        "{}",
        c.note
    );
    assert!(
        c.computed
            .contains("finds 51 multi-character Chinese tokens"),
        "{}",
        c.computed
    );
}

#[test]
fn tok_glitch_norms() {
    let c = claim("tok.glitch_norms");
    assert_eq!(c.status, Status::NeedsData);
    assert!(c.note.contains("117332"));
}

#[test]
fn tok_vocab_sizes() {
    // 152,064 rows − (151,643 ranks + 22 added tokens) = 399 padding rows; the sizes are
    // read from the published configs in data/configs/.
    assert_eq!(pinned("tok.vocab_sizes", Status::Reproduced), 399.0);
    let c = claim("tok.vocab_sizes");
    // The shipped Qwen3 config: 151,936 rows − 151,665 ids.
    assert!(
        c.computed.contains("151936 rows (271 to spare)"),
        "{}",
        c.computed
    );
    assert!(c.note.contains("published config.json"), "{}", c.note);
    assert!(c.computed.contains("545.0 M"), "{}", c.computed); // 152,064 × 3,584 = 544,997,376
    assert!(c.computed.contains("579.1 M"), "{}", c.computed); // 201,088 × 2,880 = 579,133,440
}

#[test]
fn tok_special() {
    assert_eq!(pinned("tok.special", Status::Reproduced), 26.0);
    let c = claim("tok.special");
    assert!(c.computed.starts_with("26 of 26"), "{}", c.computed);
    assert!(c.computed.contains("[151644, 872, 198"), "{}", c.computed);
    assert!(c.computed.contains("151667, 271, 151668"), "{}", c.computed);
}

#[test]
fn tok_untrained_norm() {
    let planted: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("data/synthetic-glitch/planted.json"),
        )
        .unwrap(),
    )
    .unwrap();
    let n = planted["never_seen"].as_array().unwrap().len();
    assert_eq!(pinned("tok.untrained_norm", Status::Reproduced), n as f64);
    // It checks the screen; the mechanism is measured on a real run (train.glitch_decay).
    let c = claim("tok.untrained_norm");
    assert!(c.note.contains("not the mechanism"), "{}", c.note);
    assert!(c.note.contains("train.glitch_decay"), "{}", c.note);
}

#[test]
fn tok_glitch_rmsnorm() {
    // RMSNorm with γ = 1: output RMS = r/√(r² + ε) with r = ‖x‖/√d. A typical row
    // (0.02·√d) comes out at RMS ≈ 1; a row of norm 0.015 at r/√(r² + ε).
    let rms = |norm: f64| {
        let r = norm / 3584f64.sqrt();
        r / (r * r + 1e-6).sqrt()
    };
    let want = rms(0.015) / rms(0.02 * 3584f64.sqrt());
    let v = pinned("tok.glitch_rmsnorm", Status::Erratum);
    // f32 rounding of a 3,584-term dot product and a square root: ~1e-6 relative.
    assert!((v - want).abs() < 1e-5 * want, "{v} vs {want}");
    let c = claim("tok.glitch_rmsnorm");
    let largest = rms(0.1211) / rms(0.02 * 3584f64.sqrt());
    assert!(
        c.computed.contains(&format!("0.1211 → {largest:.2}")),
        "{}",
        c.computed
    );
}

#[test]
fn tok_bos_sink() {
    // The reference: transformers' eager attention on the same windows of the trained model
    // (data/anatomy-moe/attention_sink.json, scripts/gen_anatomy_moe_checks.py).
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/anatomy-moe/attention_sink.json");
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    let uniform = doc["uniform_share"].as_f64().unwrap();
    let best = doc["first_position_share"]
        .as_array()
        .unwrap()
        .iter()
        .map(|heads| {
            let h = heads.as_array().unwrap();
            h.iter().map(|x| x.as_f64().unwrap()).sum::<f64>() / h.len() as f64
        })
        .fold(0.0f64, f64::max);
    let want = best / uniform;
    let c = claim("tok.bos_sink");
    let got = c.value.unwrap();
    assert!(
        (got - want).abs() < 1e-4,
        "ours {got} vs transformers' {want}"
    );
    // No layer of the 4-layer model concentrates attention on position 0 (the rule: ≥ 4×).
    // Not shown on the 4-layer model; re-judged on the real models' sink (real.sink).
    assert!(c.note.contains("Not shown at this scale"), "{}", c.note);
    let real = claim("real.sink");
    let want_status = match real.status {
        Status::Reproduced => Status::Reproduced,
        _ => Status::NotShown,
    };
    assert_eq!(c.status, want_status, "{}", c.computed);
    assert!(c.computed.contains("agrees within"), "{}", c.computed);
}

#[test]
fn synthetic_screens_find_exactly_the_never_seen_rows() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/synthetic-glitch");
    let planted: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("planted.json")).unwrap()).unwrap();
    let mut never: Vec<u32> = planted["never_seen"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    never.sort();
    let tok = Tokenizer::from_file(&dir.join("tokenizer.json")).unwrap();
    assert_eq!(tok.n_ids() as u64, planted["n_ids"].as_u64().unwrap());
    let s = glitch::screen_checkpoint(&dir, &tok, never.len(), None).unwrap();
    let mut by_norm: Vec<u32> = s.norms.smallest.iter().map(|r| r.id).collect();
    by_norm.sort();
    assert_eq!(by_norm, never);
    let mut by_ind: Vec<u32> = s.indicator.as_ref().unwrap().iter().map(|r| r.id).collect();
    by_ind.sort();
    assert_eq!(by_ind, never);
    // The multi-character Chinese ones are those the generator listed.
    let mut cjk: Vec<u32> = s.norms.cjk.iter().map(|r| r.id).collect();
    cjk.sort();
    let mut want: Vec<u32> = planted["multichar_cjk"]
        .as_object()
        .unwrap()
        .keys()
        .map(|k| k.parse().unwrap())
        .collect();
    want.sort();
    assert_eq!(cjk, want);
    // Every spam word of tokenizer corpus A is among them; no word of corpus B is.
    let texts: Vec<&str> = s
        .norms
        .cjk
        .iter()
        .filter_map(|r| r.text.as_deref())
        .collect();
    for spam in ["法战组合", "魔龙令牌", "鸟成长记", "早餐加盟", "搜狐首页"] {
        assert!(texts.contains(&spam), "{spam} not found in {texts:?}");
    }
    // The norm gap the generator asserted: never-seen rows stay below every trained row.
    let max_never = planted["max_norm_never_seen"].as_f64().unwrap() as f32;
    assert!(s.norms.smallest.iter().all(|r| r.score <= max_never + 1e-6));
}

#[test]
fn tok_init_norm() {
    // E‖x‖ for x ~ N(0, σ²·I_d) is σ·√2·Γ((d+1)/2)/Γ(d/2) ≈ σ·√(d − 1/2) = 1.1972 for
    // σ = 0.02, d = 3584; 200 seeded rows agree to the sampling spread (σ/√2 ≈ 0.014 per row).
    let v = pinned("tok.init_norm", Status::Erratum);
    assert!((v - 0.02 * (3584f64 - 0.5).sqrt()).abs() < 0.004, "{v}");
    let c = claim("tok.init_norm");
    assert!(c.computed.contains("0.0150–0.1211"), "{}", c.computed);
}
