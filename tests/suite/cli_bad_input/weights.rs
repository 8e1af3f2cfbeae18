//! Weights that are not finite, or finite but too large for the activations they make:
//! each refused with exit 2, naming the file, the tensor (or the step) and where.

use super::*;

/// Runs `logits`, `generate` and `router-stats` on `model`: each refused naming `needles`,
/// and `logits` writes nothing.
fn every_model_command_refuses(model: &Path, needles: &[&str]) {
    let dir = scratch("bad-w");
    let out = dir.join("logits.st");
    let m = s(model);
    refused(&["logits", m, "--ids", IDS, "--out", s(&out)], needles);
    refused(
        &["generate", m, "--ids", IDS, "--max-new-tokens", "3"],
        needles,
    );
    refused(&["router-stats", m, "--ids", IDS, "--json"], needles);
    assert!(!out.exists(), "no output written for {needles:?}");
}

#[test]
fn non_finite_weights_are_errors_naming_the_file_and_tensor() {
    for (tensor, index) in [
        ("model.layers.1.post_attention_layernorm.weight", 3),
        ("model.layers.0.self_attn.q_proj.weight", 5),
        ("model.layers.2.mlp.gate.weight", 0),
        ("model.embed_tokens.weight", 24 * 2 + 1),
        ("lm_head.weight", 7),
    ] {
        for (value, words) in [(f32::NAN, "holds NaN"), (f32::INFINITY, "holds +inf")] {
            let dir = copy_good("nan");
            poison(&dir, tensor, index, value);
            let file = dir.join("model.safetensors");
            every_model_command_refuses(
                &dir,
                &[&format!("{}: tensor `{tensor}`", s(&file)), words],
            );
        }
    }
    // glitch ranks rows by norm: a NaN row is an error, not "the smallest norm".
    let dir = copy_good("nan-glitch");
    poison(&dir, "model.embed_tokens.weight", 30, f32::NAN);
    let vocab = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/qwen.tiktoken");
    refused(
        &["glitch", "--vocab", s(&vocab), "--model", s(&dir), "--json"],
        &["model.embed_tokens.weight", "row 1"],
    );
}

#[test]
fn a_finite_weight_that_overflows_an_activation_names_the_file_and_the_step() {
    // A norm weight of 1e30 is finite, so the load accepts it; the SwiGLU product of two
    // projections of the normed vector (≈ 1e28 each) is not.
    let dir = copy_good("overflow");
    let tensor = "model.layers.0.post_attention_layernorm.weight";
    poison(&dir, tensor, 5, 1e30);
    let file = dir.join("model.safetensors");
    every_model_command_refuses(
        &dir,
        &[
            &format!("{}: forward pass", s(&file)),
            "layer 0's MoE block at position 0",
            "overflow f32",
            &format!("1e30 at entry 5 of tensor `{tensor}`"),
        ],
    );
}

/// A copy of the GGUF file `src` with `bytes` written at the start of tensor `tensor`'s data.
fn poisoned_gguf(src: &Path, tensor: &str, bytes: &[u8], dst: &Path) {
    let g = llm_anatomy::gguf::Gguf::open(src).unwrap();
    let t = g.tensor(tensor).unwrap();
    let at = (g.data_offset() + t.offset) as usize;
    drop(g);
    std::fs::copy(src, dst).unwrap();
    use std::io::{Seek, SeekFrom, Write};
    let mut f = std::fs::OpenOptions::new().write(true).open(dst).unwrap();
    f.seek(SeekFrom::Start(at as u64)).unwrap();
    f.write_all(bytes).unwrap();
}

#[test]
fn a_non_finite_gguf_block_scale_names_the_file_and_tensor() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = scratch("bad-wg");
    // f16 NaN and +inf as the scale of a block's first row (Q8_0 and Q4_K: d comes first).
    for (fixture, tensor, role) in [
        (
            "qwen2/q8_0.gguf",
            "blk.1.ffn_up.weight",
            "model.layers.1.mlp.up_proj.weight",
        ),
        (
            "moe/q4_k_m.gguf",
            "blk.0.attn_q.weight",
            "model.layers.0.self_attn.q_proj.weight",
        ),
    ] {
        for (scale, words) in [([0x00, 0x7e], "NaN"), ([0x00, 0x7c], "inf")] {
            let file = dir.join("scale.gguf");
            poisoned_gguf(
                &root.join("tests/fixtures/gguf_models").join(fixture),
                tensor,
                &scale,
                &file,
            );
            every_model_command_refuses(
                &file,
                &[
                    &format!("{}: tensor `{tensor}` (`{role}`)", s(&file)),
                    "row 0",
                    "holds",
                    words,
                ],
            );
        }
    }
}
