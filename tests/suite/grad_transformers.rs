//! Chapter 12 against transformers: `anatomy grad` gives the loss and every parameter's
//! gradient as PyTorch's autograd computes them for `model(input_ids=ids, labels=ids)` on
//! tiny random Qwen3-MoE / Qwen3 checkpoints saved by transformers 5.24 (generator:
//! scripts/gen_grad_fixtures.py, torch 2.15, transformers 5.24, float64; fixtures and their
//! provenance in tests/fixtures/grad/models/). Per tensor: max |ours − expected| ≤
//! 1e-4 × max |expected|; the set of tensor names must be exactly the expected set.

use crate::common;
use common::{anatomy, ids};

use llm_anatomy::checkpoint::Checkpoint;
use llm_anatomy::train::backward::{LossOptions, loss_and_grads};
use llm_anatomy::train::params::Params;
use std::path::{Path, PathBuf};

const CASES: &[&str] = &[
    "moe_norm_topk_aux",
    "moe_no_norm_no_aux",
    "moe_no_norm_aux",
    "moe_mixed_layers",
    "moe_tied",
    "moe_fused",
    "moe_yarn_sliding",
    "dense",
    "dense_tied_sliding",
    "dense_linear_rope",
];
/// Cases of more than one sequence: the CLI takes one, the library a batch.
const BATCH_CASES: &[&str] = &["moe_batch2"];

/// Relative tolerance: of the largest |expected| value in the tensor.
const TOLERANCE: f32 = 1e-4;

fn case_dir(case: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/grad/models")
        .join(case)
}

fn meta(case: &str) -> serde_json::Value {
    serde_json::from_slice(&std::fs::read(case_dir(case).join("ids.json")).unwrap()).unwrap()
}

fn case_ids(case: &str) -> String {
    common::join(&ids(&meta(case)["ids"]))
}

/// The sequences of `model(input_ids=batch, labels=batch)`.
fn case_batch(case: &str) -> Vec<Vec<u32>> {
    meta(case)["batch"]
        .as_array()
        .unwrap()
        .iter()
        .map(ids)
        .collect()
}

/// Every tensor of a safetensors file, as f32, with its shape, sorted by name.
fn tensors(path: &Path) -> Vec<(String, Vec<usize>, Vec<f32>)> {
    let file = Checkpoint::open_file(path).unwrap();
    let mut names: Vec<String> = file.names().into_iter().map(String::from).collect();
    names.sort();
    names
        .into_iter()
        .map(|n| {
            let (data, shape) = file.to_f32(&n).unwrap();
            (n, shape, data)
        })
        .collect()
}

/// Elements, with a scalar stored as [] and as [1] counted alike.
fn elements(shape: &[usize]) -> usize {
    shape.iter().product()
}

/// Compares one case; returns (worst tensor, its error ratio) or a description of the
/// mismatch.
fn check_case(case: &str) -> Result<(String, f32), String> {
    let dir = case_dir(case);
    let scratch = crate::common::scratch(&format!("grad-{case}"));
    let out = scratch.join("grad.safetensors");
    let run = anatomy(&[
        "grad",
        dir.to_str().unwrap(),
        "--ids",
        &case_ids(case),
        "--out",
        out.to_str().unwrap(),
    ]);
    if !run.status.success() {
        return Err(format!(
            "anatomy grad failed ({}): {}",
            run.status,
            String::from_utf8_lossy(&run.stderr)
        ));
    }
    let ours = tensors(&out);
    compare(&ours, &tensors(&dir.join("expected.safetensors")))
}

/// Compares name by name: the same set of names, the same shapes (a scalar as [] or [1]),
/// and max |ours − expected| ≤ TOLERANCE × max |expected| per tensor. Returns the worst
/// tensor and its ratio.
type Tensors = Vec<(String, Vec<usize>, Vec<f32>)>;
fn compare(ours: &Tensors, expected: &Tensors) -> Result<(String, f32), String> {
    let our_names: Vec<&str> = ours.iter().map(|t| t.0.as_str()).collect();
    let expected_names: Vec<&str> = expected.iter().map(|t| t.0.as_str()).collect();
    if our_names != expected_names {
        let missing: Vec<_> = expected_names
            .iter()
            .filter(|n| !our_names.contains(n))
            .collect();
        let extra: Vec<_> = our_names
            .iter()
            .filter(|n| !expected_names.contains(n))
            .collect();
        return Err(format!(
            "tensor names differ: missing {missing:?}, unexpected {extra:?}"
        ));
    }
    let mut worst = (String::new(), 0.0f32);
    for ((name, shape, got), (_, want_shape, want)) in ours.iter().zip(expected) {
        let scalar = elements(want_shape) == 1 && want_shape.len() <= 1;
        if shape != want_shape && !(scalar && elements(shape) == 1) {
            return Err(format!("{name}: shape {shape:?}, expected {want_shape:?}"));
        }
        let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs()));
        let err = got.iter().zip(want).fold(0.0f32, |m, (a, b)| {
            if (a - b).abs().is_nan() {
                f32::INFINITY
            } else {
                m.max((a - b).abs())
            }
        });
        let ratio = if scale > 0.0 {
            err / scale
        } else if err == 0.0 {
            0.0
        } else {
            f32::INFINITY
        };
        if ratio > worst.1 || worst.0.is_empty() {
            worst = (name.clone(), ratio);
        }
    }
    if worst.1 > TOLERANCE {
        return Err(format!(
            "worst tensor {}: max |ours − expected| = {:e} × max |expected| (tolerance {TOLERANCE:e})",
            worst.0, worst.1
        ));
    }
    Ok(worst)
}

#[test]
fn every_case_matches_transformers_autograd() {
    let mut failures = Vec::new();
    for case in CASES {
        match check_case(case) {
            Ok((name, ratio)) => {
                eprintln!("{case}: worst {name} at {ratio:.1e} of its largest value")
            }
            Err(e) => failures.push(format!("{case}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn fixtures_are_complete() {
    // Without the CLI: every case has its files, the expected losses are finite, and every
    // tensor of the checkpoint has a gradient of its shape (and nothing else is there).
    for case in CASES.iter().chain(BATCH_CASES) {
        let dir = case_dir(case);
        let model = tensors(&dir.join("model.safetensors"));
        let expected = tensors(&dir.join("expected.safetensors"));
        let mut names: Vec<&str> = model.iter().map(|t| t.0.as_str()).collect();
        names.extend(["loss", "ce_loss"]);
        if expected.iter().any(|t| t.0 == "aux_loss") {
            names.push("aux_loss");
        }
        names.sort();
        let got: Vec<&str> = expected.iter().map(|t| t.0.as_str()).collect();
        assert_eq!(got, names, "{case}");
        for (name, shape, data) in &expected {
            assert!(data.iter().all(|x| x.is_finite()), "{case}: {name}");
            if let Some(m) = model.iter().find(|t| &t.0 == name) {
                assert_eq!(&m.1, shape, "{case}: {name}");
            }
        }
        let batch = case_batch(case);
        assert_eq!(batch[0], ids(&meta(case)["ids"]), "{case}");
        assert_eq!(batch.len() > 1, BATCH_CASES.contains(case), "{case}");
    }
}

#[test]
fn params_load_gives_the_gradient_names() {
    // train::params reads each checkpoint under the names the expected gradients carry:
    // per-expert names for per-expert files, fused ones for moe_fused, no lm_head when tied.
    for case in CASES.iter().chain(BATCH_CASES) {
        let dir = case_dir(case);
        let p = Params::load(&dir).unwrap_or_else(|e| panic!("{case}: {e}"));
        let mut got: Vec<(String, Vec<usize>)> = p
            .params
            .iter()
            .map(|x| (x.name.clone(), x.shape.clone()))
            .collect();
        got.sort();
        let want: Vec<(String, Vec<usize>)> = tensors(&dir.join("expected.safetensors"))
            .into_iter()
            .filter(|t| !matches!(t.0.as_str(), "loss" | "ce_loss" | "aux_loss"))
            .map(|t| (t.0, t.1))
            .collect();
        assert_eq!(got, want, "{case}");
    }
}

/// The library's `loss_and_grads` on the same cases, without the CLI: the gradients under
/// the checkpoint's names, the losses as scalars.
fn library_case(case: &str) -> Result<(String, f32), String> {
    let dir = case_dir(case);
    let p = Params::load(&dir).map_err(|e| e.to_string())?;
    let opts = LossOptions::from_config(&p.config);
    let mut grads = p.zeros_like();
    let losses =
        loss_and_grads(&p, &case_batch(case), &opts, &mut grads).map_err(|e| e.to_string())?;
    let mut ours: Tensors = vec![
        ("loss".into(), vec![], vec![losses.loss]),
        ("ce_loss".into(), vec![], vec![losses.ce_loss]),
    ];
    if let Some(aux) = losses.aux_loss {
        ours.push(("aux_loss".into(), vec![], vec![aux]));
    }
    for (param, g) in p.params.iter().zip(grads.grads) {
        ours.push((param.name.clone(), param.shape.clone(), g));
    }
    ours.sort_by(|a, b| a.0.cmp(&b.0));
    compare(&ours, &tensors(&dir.join("expected.safetensors")))
}

#[test]
fn loss_and_grads_match_transformers_autograd() {
    let mut failures = Vec::new();
    for case in CASES.iter().chain(BATCH_CASES) {
        match library_case(case) {
            Ok((name, ratio)) => {
                eprintln!("{case}: worst {name} at {ratio:.1e} of its largest value")
            }
            Err(e) => failures.push(format!("{case}: {e}")),
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}
