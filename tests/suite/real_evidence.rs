//! The book's phenomena on the real models (`qwen3::evidence`), checked against what
//! transformers measured on the same files (data/real/evidence-hf-<model>.json, written by
//! scripts/gen_real_evidence.py from the dequantised weights in float32, eager attention):
//! our engine's per-layer sink on the same token ids, and its per-layer mean post-RoPE
//! score at each distance on the same corpus windows.
//!
//! Without the model files (`bash scripts/get-real-models.sh` fetches them), or while the
//! GGUF config reader does not read their architecture, the checks say they skipped; the
//! claims `real.sink`, `real.decay` and `tok.bos_sink` judge from the committed JSON.

use crate::real_model::real_model_path;
use llm_anatomy::claims::Status;
use llm_anatomy::qwen3::evidence::{self, SNIPPETS};
use llm_anatomy::qwen3::{Model, open};
use serde_json::Value;
use std::path::{Path, PathBuf};

/// (name in data/real, file in target/real-models).
const MODELS: &[(&str, &str)] = &[
    ("smollm2", "smollm2-135m-instruct-q4_1.gguf"),
    ("gemma3", "gemma3-270m-q4_k_m.gguf"),
];

/// Our default path runs the weights in their quantised blocks with 8-bit activations;
/// transformers runs them dequantised in float32. A share of attention is a probability,
/// so the two are compared on an absolute scale.
const SHARE_TOLERANCE: f64 = 0.02;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn stored(name: &str) -> Value {
    stored_at(&format!("data/real/evidence-hf-{name}.json"))
}

fn stored_at(relative: &str) -> Value {
    let path = root().join(relative);
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The model, or `None` after one line saying what is skipped and why.
fn real_model(file: &str, test: &str) -> Option<(PathBuf, llm_anatomy::qwen3::Qwen3Config)> {
    let path = real_model_path(file, test)?;
    match open(&path) {
        Ok((config, _)) => Some((path, config)),
        Err(e) if e.to_string().contains("general.architecture") => {
            eprintln!("skipped {test}: the GGUF config reader does not read this file yet ({e})");
            None
        }
        Err(e) => panic!("{}: {e}", path.display()),
    }
}

fn ids_of(v: &Value) -> Vec<Vec<u32>> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|w| {
            w.as_array()
                .unwrap()
                .iter()
                .map(|x| u32::try_from(x.as_u64().unwrap()).unwrap())
                .collect()
        })
        .collect()
}

#[test]
fn stored_evidence_covers_every_snippet() {
    for &(name, _) in MODELS {
        let doc = stored(name);
        assert_eq!(
            doc["sink"]["snippets"].as_u64(),
            Some(SNIPPETS.len() as u64),
            "{name}"
        );
        assert_eq!(ids_of(&doc["sink"]["ids"]).len(), SNIPPETS.len(), "{name}");
        assert_eq!(
            doc["first_query"].as_u64(),
            Some(evidence::FIRST_QUERY as u64)
        );
    }
}

/// Our engine's sink on transformers' ids, layer by layer.
#[test]
fn sink_matches_transformers() {
    for &(name, file) in MODELS {
        let Some((path, config)) = real_model(file, "real_evidence::sink_matches_transformers")
        else {
            continue;
        };
        let doc = stored(name);
        let (_, f) = open(&path).unwrap();
        let model = Model::new(config, &f).unwrap();
        let got = evidence::sink_profile(&model, &ids_of(&doc["sink"]["ids"])).unwrap();
        let want = doc["sink"]["per_layer"].as_array().unwrap();
        assert_eq!(got.per_layer.len(), want.len(), "{name}");
        for (l, (g, w)) in got.per_layer.iter().zip(want).enumerate() {
            let w = w.as_f64().unwrap();
            assert!(
                (g - w).abs() <= SHARE_TOLERANCE,
                "{name} layer {l}: ours {g} vs transformers {w}"
            );
        }
        let uniform = doc["sink"]["uniform"].as_f64().unwrap();
        assert!((got.uniform - uniform).abs() < 1e-12, "{name}");
    }
}

#[test]
#[ignore = "writes figures/real_*.svg (also written by `anatomy figures`)"]
fn write_real_figures() {
    for name in ["real_sink", "real_decay"] {
        let svg = llm_anatomy::figures::render_svg(name).unwrap();
        std::fs::write(root().join(format!("figures/{name}.svg")), svg).unwrap();
    }
}

/// `real.kl` is judged by the library's KL on the committed references: with the model
/// files, its value is the larger of ours / llama.cpp's over the two models, and it is
/// reproduced exactly when that is at most 1; without them it says it needs the files.
#[test]
fn real_kl_claim_follows_the_measurement() {
    use llm_anatomy::claims::real_kl::{REAL_MODELS, model_kl};
    let claim = llm_anatomy::claims::find("real.kl").unwrap();
    if REAL_MODELS.iter().any(|m| !m.path().is_file()) {
        assert_eq!(claim.status, Status::NeedsData, "{}", claim.computed);
        return;
    }
    let worst = REAL_MODELS
        .iter()
        .map(|m| {
            let t = model_kl(m).unwrap();
            t.ours / t.llama_cpp
        })
        .fold(0.0f64, f64::max);
    assert_eq!(claim.value, Some(worst), "{}", claim.computed);
    let want = match worst <= 1.0 {
        true => Status::Reproduced,
        false => Status::Erratum,
    };
    assert_eq!(claim.status, want, "{}", claim.computed);
}

/// The committed lost-in-the-middle run is self-consistent (each placement's score counts
/// its answers, each answer is judged by the rule the harness uses) and `real.lost_in_middle`
/// is reproduced only when both ends beat the middle by more than 1.96 standard errors,
/// else not-shown — never an erratum.
#[test]
fn lost_in_middle_run_is_consistent_and_judged() {
    use llm_anatomy::claims::real::{LOST_IN_MIDDLE, Z_95, lost_in_middle_scores};
    let doc = stored_at(LOST_IN_MIDDLE);
    let answers = doc["answers"].as_array().unwrap();
    let (scores, _, _) = lost_in_middle_scores().unwrap();
    assert_eq!(scores.len(), 3);
    for s in &scores {
        let here: Vec<&Value> = answers
            .iter()
            .filter(|a| a["placement"] == s.placement.as_str())
            .collect();
        assert_eq!(here.len() as u64, s.trials, "{}", s.placement);
        let right = here
            .iter()
            .filter(|a| {
                let reply = a["reply"].as_str().unwrap();
                let ok = reply.contains(a["expected"].as_str().unwrap());
                assert_eq!(a["correct"].as_bool(), Some(ok), "{reply:?}");
                ok
            })
            .count();
        assert_eq!(right as u64, s.correct, "{}", s.placement);
    }
    let claim = llm_anatomy::claims::find("real.lost_in_middle").unwrap();
    let z = claim.value.unwrap();
    let want = match z > Z_95 {
        true => Status::Reproduced,
        false => Status::NotShown,
    };
    assert_eq!(claim.status, want, "{}", claim.computed);
}

/// The two-proportion z statistic on hand-worked cases: 8/10 against 2/10 pools to 1/2,
/// a standard error of √(1/4 · 2/10) and a gap of 0.6 / that; equal scores give 0, and
/// all-right against all-right (no spread) gives 0 rather than a division by zero.
#[test]
fn gap_in_standard_errors_by_hand() {
    use llm_anatomy::claims::real::{PlacementScore, gap_in_standard_errors};
    let s = |correct| PlacementScore {
        placement: String::new(),
        correct,
        trials: 10,
    };
    let z = gap_in_standard_errors(&s(8), &s(2));
    assert!((z - 0.6 / (0.25f64 * 0.2).sqrt()).abs() < 1e-12, "{z}");
    assert_eq!(gap_in_standard_errors(&s(5), &s(5)), 0.0);
    assert_eq!(gap_in_standard_errors(&s(10), &s(10)), 0.0);
    assert!(gap_in_standard_errors(&s(2), &s(8)) < 0.0);
}

/// The synthesis's exercise 6: with both ends at 6 of 6, a middle of 3 of 6 clears 1.96
/// standard errors (2.0) and 4 of 6 does not (1.55).
#[test]
fn synthesis_exercise_six() {
    use llm_anatomy::claims::real::{PlacementScore, Z_95, gap_in_standard_errors};
    let s = |correct| PlacementScore {
        placement: String::new(),
        correct,
        trials: 6,
    };
    let (three, four) = (
        gap_in_standard_errors(&s(6), &s(3)),
        gap_in_standard_errors(&s(6), &s(4)),
    );
    assert!((three - 2.0).abs() < 1e-12 && three > Z_95, "{three}");
    assert!(
        ((four * 100.0).round() - 155.0).abs() < 0.5 && four < Z_95,
        "{four}"
    );
}

/// book/src/generated/real-claims.md is the claims table of the real-model ids judged here
/// (src/claims/real.rs and real_kl.rs; the extrapolation ids are chapter 3's) as the
/// registry computes them (with the model files there; `real.kl` needs them). Refresh it with
/// `UPDATE_REAL_CLAIMS=1 cargo test --test suite real_evidence::real_claims_table`.
#[test]
fn real_claims_table_is_current() {
    use llm_anatomy::claims::real_kl::{self, REAL_MODELS};
    use llm_anatomy::claims::{markdown_table, real};
    if let Some(m) = REAL_MODELS.iter().find(|m| !m.path().is_file()) {
        eprintln!(
            "skipped real_claims_table_is_current: {} is absent (fetch it with `bash scripts/get-real-models.sh`)",
            m.path().display()
        );
        return;
    }
    let claims: Vec<_> = real::ENTRIES
        .iter()
        .chain(real_kl::ENTRIES)
        .map(|e| e.evaluate())
        .collect();
    let table = markdown_table(&claims);
    let path = root().join("book/src/generated/real-claims.md");
    if std::env::var_os("UPDATE_REAL_CLAIMS").is_some() {
        std::fs::write(&path, &table).unwrap();
    }
    let stored = std::fs::read_to_string(&path).unwrap_or_default();
    let cpu_free = real_kl::without_cpu_dependent_figures;
    assert!(
        cpu_free(&stored) == cpu_free(&table),
        "{} is out of date: UPDATE_REAL_CLAIMS=1 cargo test --test suite real_evidence::real_claims_table",
        path.display()
    );
}
