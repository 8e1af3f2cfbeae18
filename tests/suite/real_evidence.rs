//! The book's phenomena on the real models (`qwen3::evidence`), checked against what
//! transformers measured on the same files (data/real/evidence-hf-<model>.json, written by
//! scripts/gen_real_evidence.py from the dequantised weights in float32, eager attention):
//! our engine's per-layer sink on the same token ids, and its per-layer mean post-RoPE
//! score at each distance on the same corpus windows.
//!
//! Without the model files (`bash scripts/get-real-models.sh` fetches them), or while the
//! GGUF config reader does not read their architecture, the checks say they skipped; the
//! claims `real.sink`, `real.decay` and `tok.bos_sink` judge from the committed JSON.

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
    let path = root().join(format!("data/real/evidence-hf-{name}.json"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// The model, or `None` after one line saying what is skipped and why.
fn real_model(file: &str, test: &str) -> Option<(PathBuf, llm_anatomy::qwen3::Qwen3Config)> {
    let path = root().join("target/real-models").join(file);
    if !path.is_file() {
        eprintln!(
            "skipped {test}: {} is absent (fetch it with `bash scripts/get-real-models.sh`)",
            path.display()
        );
        return None;
    }
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
