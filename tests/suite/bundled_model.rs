//! The model `anatomy train` trained (data/anatomy-moe/, scripts/train-bundled.sh): the
//! documented command reproduces its recorded loss curve, transformers computes the same
//! greedy tokens on it as our engine, and it learned more than a unigram model.

use llm_anatomy::qwen3::trained::{prompt_checks, trained_dir};
use llm_anatomy::train::trainer::{TrainJob, TrainOptions, read_log, run};
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn json(path: &Path) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

/// The first steps of the documented command, rerun from scratch, give the recorded losses
/// to rounding (the same seed, the same batches, the same arithmetic order).
#[test]
fn the_documented_command_reproduces_the_recorded_curve() {
    let dir = trained_dir();
    let options: TrainOptions =
        serde_json::from_value(json(&dir.join("train_options.json"))).unwrap();
    let recorded = read_log(&dir.join("train_log.jsonl")).unwrap();
    let out = crate::common::scratch("bundled-rerun");
    let steps = 2;
    let job = TrainJob {
        out: out.to_path_buf(),
        config: root().join("data/train/qwen3-moe-anatomy.json"),
        data: root().join("data/corpus"),
        vocab: root().join("data/qwen.tiktoken"),
        options,
        resume: false,
        stop_after: Some(steps),
        progress: false,
    };
    run(&job).unwrap();
    let rerun = read_log(&out.join("train_log.jsonl")).unwrap();
    assert_eq!(rerun.len(), steps as usize);
    for (a, b) in rerun.iter().zip(&recorded) {
        assert_eq!(a.step, b.step);
        let rel = ((a.loss - b.loss) / b.loss).abs();
        assert!(
            rel < 1e-5,
            "step {}: loss {} vs recorded {}",
            a.step,
            a.loss,
            b.loss
        );
        let rel = ((a.grad_norm - b.grad_norm) / b.grad_norm).abs();
        assert!(
            rel < 1e-3,
            "step {}: grad norm {} vs {}",
            a.step,
            a.grad_norm,
            b.grad_norm
        );
        assert_eq!(a.expert_counts, b.expert_counts, "step {}", a.step);
    }
}

#[test]
fn greedy_tokens_equal_transformers() {
    let dir = trained_dir();
    let (config, ckpt) = llm_anatomy::qwen3::open(&dir).unwrap();
    let model = llm_anatomy::qwen3::Model::new(config, &ckpt).unwrap();
    let tok = llm_anatomy::tokenizer::Tokenizer::qwen().unwrap();
    let checks = prompt_checks(&model, &tok, &dir).unwrap();
    assert!(checks.len() >= 3);
    for p in &checks {
        assert_eq!(
            p.ours, p.transformers,
            "{:?} → {:?}",
            p.text, p.continuation
        );
    }
}

/// What the run reached, as recorded: fewer nats per held-out token than a unigram model of
/// the training split, within the size and time the issue allows.
#[test]
fn the_recorded_run_beats_a_unigram_model_within_budget() {
    let dir = trained_dir();
    let t = json(&dir.join("training.json"));
    let heldout = t["heldout_loss"].as_f64().unwrap();
    let unigram = t["unigram_heldout_loss"].as_f64().unwrap();
    assert!(heldout < unigram, "held-out {heldout} vs unigram {unigram}");
    let log = read_log(&dir.join("train_log.jsonl")).unwrap();
    let last = log.last().unwrap();
    let logged = f64::from(last.heldout_loss.unwrap());
    assert!(
        (logged - heldout).abs() < 1e-5,
        "log {logged} vs summary {heldout}"
    );
    let bytes = std::fs::metadata(dir.join("model.safetensors"))
        .unwrap()
        .len();
    assert!(bytes <= 25_000_000, "{bytes} bytes");
}

/// Chapter 9 quotes book/src/generated/trained-model.md; this recomputes it.
/// `BLESS=1 cargo test --test suite bundled_model::` rewrites the file.
#[test]
fn chapter_9_block_is_current() {
    let path = root().join("book/src/generated/trained-model.md");
    let text = llm_anatomy::qwen3::trained::trained_markdown().unwrap();
    if std::env::var_os("BLESS").is_some() {
        std::fs::write(&path, &text).unwrap();
    }
    let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|_| {
        panic!(
            "{} missing: run BLESS=1 cargo test --test suite bundled_model::",
            path.display()
        )
    });
    assert_eq!(
        on_disk,
        text,
        "{} is stale: run BLESS=1 cargo test --test suite bundled_model::",
        path.display()
    );
}

/// transformers' 32 largest logits at every position of each prompt + continuation equal
/// ours within 1e-4 (the bound for a checkpoint `anatomy train` wrote).
#[test]
fn logits_equal_transformers_within_1e_4() {
    let dir = trained_dir();
    let (config, ckpt) = llm_anatomy::qwen3::open(&dir).unwrap();
    let model = llm_anatomy::qwen3::Model::new(config, &ckpt).unwrap();
    let vocab = model.config.vocab_size;
    let check = json(&dir.join("transformers_check.json"));
    let ids = |v: &serde_json::Value| -> Vec<u32> {
        v.as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let mut worst = 0.0f64;
    for p in check["prompts"].as_array().unwrap() {
        let mut seq = ids(&p["ids"]);
        seq.extend(ids(&p["greedy"]));
        let out = model.logits(&seq).unwrap();
        let top = &p["top_logits"];
        for (pos, (row_ids, row_values)) in top["ids"]
            .as_array()
            .unwrap()
            .iter()
            .zip(top["values"].as_array().unwrap())
            .enumerate()
        {
            for (id, want) in ids(row_ids).iter().zip(row_values.as_array().unwrap()) {
                let got = out.logits[pos * vocab + *id as usize] as f64;
                worst = worst.max((got - want.as_f64().unwrap()).abs());
            }
        }
    }
    assert!(worst <= 1e-4, "largest logit difference {worst:e}");
}
