//! Chapter 12's checkpoints: what `anatomy train` writes, transformers 5.24 loads
//! (`from_pretrained`, no missing or unexpected keys — scripts/gen_train_fixtures.py
//! checkpoint), and its logits there equal ours from the engine (`qwen3::Model`) and from
//! the training forward within 1e-4; `Params::load` / `save_pretrained` round-trip it.

use llm_anatomy::checkpoint::Checkpoint;
use llm_anatomy::qwen3::{Model, Qwen3Config};
use llm_anatomy::train::params::Params;
use llm_anatomy::train::trainer::read_log;
use serde_json::Value;
use std::path::PathBuf;

fn trained() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/train/trained")
}

fn reference() -> (Vec<u32>, Vec<f32>, Value) {
    let text = std::fs::read_to_string(trained().join("logits.json")).unwrap();
    let v: Value = serde_json::from_str(&text).unwrap();
    let ids = v["ids"].as_array().unwrap().iter();
    let ids = ids.map(|x| x.as_u64().unwrap() as u32).collect();
    let logits = v["logits"].as_array().unwrap().iter();
    let logits = logits.map(|x| x.as_f64().unwrap() as f32).collect();
    (ids, logits, v)
}

fn max_abs_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter()
        .zip(b)
        .map(|(x, y)| (x - y).abs())
        .fold(0.0, f32::max)
}

#[test]
fn transformers_logits_equal_ours_on_a_trained_checkpoint() {
    let (ids, want, v) = reference();
    assert_eq!(v["model_class"], "Qwen3MoeForCausalLM");
    let cfg = Qwen3Config::from_file(&trained().join("config.json")).unwrap();
    let ckpt = Checkpoint::open(&trained()).unwrap();
    let model = Model::new(cfg, &ckpt).unwrap();
    let out = model.logits(&ids).unwrap();
    let d = max_abs_diff(&out.logits, &want);
    assert!(d < 1e-4, "engine vs transformers: max |Δlogit| = {d:e}");
    // The training forward agrees too, and the parameter count is transformers'.
    let params = Params::load(&trained()).unwrap();
    assert_eq!(
        params.num_parameters() as u64,
        v["num_parameters"].as_u64().unwrap()
    );
    let ours = llm_anatomy::train::backward::logits(&params, &ids).unwrap();
    let d = max_abs_diff(&ours, &want);
    assert!(d < 1e-4, "training forward vs transformers: {d:e}");
}

#[test]
fn params_round_trip_through_save_pretrained() {
    let params = Params::load(&trained()).unwrap();
    let dir = crate::common::scratch("train-checkpoint");
    params.save_pretrained(&dir).unwrap();
    let again = Params::load(&dir).unwrap();
    assert!(again.params == params.params, "values after a round trip");
    assert_eq!(again.config, params.config);
}

#[test]
fn the_runs_log_shows_learning() {
    let log = read_log(&trained().join("train_log.jsonl")).unwrap();
    assert_eq!(log.len(), 30);
    let first = log[0].ce_loss;
    assert!(
        (first - (1024f32).ln()).abs() < 0.2,
        "starts near ln V: {first}"
    );
    assert!(log.last().unwrap().ce_loss < first - 1.0);
    assert!(
        log.iter()
            .all(|l| l.aux_loss.is_some() && l.grad_norm.is_finite())
    );
}
