//! Chapter 10's native bf16 kernels (`kernels::bf16`, AVX512_BF16) against transformers on
//! the bf16_sharded fixture, in both of its computations: the bf16 weights widened to f32
//! (expected.safetensors, scripts/gen_qwen3_fixtures.py) and bfloat16 end to end
//! (expected_bf16_compute.safetensors, scripts/gen_bf16_compute_fixture.py).
//! * Split mode (activations as three bf16 pieces) stays within the 1e-5 of the
//!   f32 fixtures, as the widening kernels do.
//! * Round mode (activations rounded to bf16, as llama.cpp does) is no further from the
//!   f32 computation than transformers' own bf16 computation is: rounding only the matmul
//!   inputs costs less accuracy than rounding every activation.
//!
//! Skipped where the CPU lacks AVX512_BF16 (the modes would not run).

use crate::common;
use common::max_abs_diff;

use llm_anatomy::checkpoint::Checkpoint;
use llm_anatomy::kernels::bf16::{Bf16Mode, available, with_bf16_mode};
use llm_anatomy::qwen3::{Model, Qwen3Config};
use std::path::Path;

fn logits(dir: &Path, name: &str) -> Vec<f32> {
    Checkpoint::open_file(&dir.join(name))
        .unwrap()
        .to_f32("logits")
        .unwrap()
        .0
}

#[test]
fn native_bf16_against_transformers_f32_and_bf16_compute() {
    if !available() {
        eprintln!("no AVX512_BF16 on this CPU: the native bf16 modes are not tested here");
        return;
    }
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen3/bf16_sharded");
    let json: serde_json::Value =
        serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
    let prompt: Vec<u32> = json["prompt"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap() as u32)
        .collect();
    let f32_compute = logits(&dir, "expected.safetensors");
    let bf16_compute = logits(&dir, "expected_bf16_compute.safetensors");
    let cfg = Qwen3Config::from_file(&dir.join("config.json")).unwrap();
    let ckpt = Checkpoint::open(&dir).unwrap();
    let model = Model::new(cfg, &ckpt).unwrap();
    let ours = |mode| with_bf16_mode(mode, || model.logits(&prompt).unwrap().logits);
    let (widened, split, round) = (
        ours(None),
        ours(Some(Bf16Mode::Split)),
        ours(Some(Bf16Mode::Round)),
    );
    let torch_bf16 = max_abs_diff(&bf16_compute, &f32_compute);
    let (w, s, r) = (
        max_abs_diff(&widened, &f32_compute),
        max_abs_diff(&split, &f32_compute),
        max_abs_diff(&round, &f32_compute),
    );
    eprintln!(
        "max |Δlogit| from transformers' f32 compute: widening {w:e}, split {s:e}, round {r:e}; \
         transformers' bf16 compute {torch_bf16:e} (round vs it: {:e})",
        max_abs_diff(&round, &bf16_compute)
    );
    assert!(
        w < 1e-5 && s < 1e-5,
        "widening {w:e} / split {s:e} past 1e-5"
    );
    assert!(r > s, "round mode should differ from split: {r:e} vs {s:e}");
    assert!(
        r <= torch_bf16,
        "round {r:e} is further from f32 than transformers' bf16 ({torch_bf16:e})"
    );
}
