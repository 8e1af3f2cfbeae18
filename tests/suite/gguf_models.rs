//! Chapter 9 on llama.cpp's files: the engine runs the tiny GGUF models of
//! tests/fixtures/gguf_models (Qwen3-MoE untied with 256-wide rows, Qwen3-MoE tied with
//! 128-wide rows, dense Qwen3, Qwen2 with biases; every block type llama.cpp's quantiser
//! wrote), checked against transformers' logits on the same dequantised weights
//! (scripts/gen_gguf_model_fixtures.py: torch 2.15.0, transformers 5.24.0, gguf-py 0.19.0,
//! llama-cpp-python 0.3.36; see the fixtures' PROVENANCE.md).
//!
//! - `--reference` (every weight dequantised to f32, the clear kernels) equals transformers
//!   within 1e-4 of the logit scale (the largest |logit| of transformers' logits);
//! - the default path (weights in their blocks) is at least as close to transformers'
//!   distribution as llama.cpp itself: mean KL(P_hf ‖ P_ours) ≤ mean KL(P_hf ‖ P_llama).
//!
//! llama.cpp always renormalises Qwen3-MoE's top-k routing weights (GGUF has no key for
//! `norm_topk_prob`), and so does our GGUF config; for `moe_tied`, whose generating
//! config said false, the comparison is with transformers' logits with it forced true
//! (`hf_logits_norm_topk`), as the fixtures' PROVENANCE.md explains.

use crate::common;

use llm_anatomy::kernels::WeightData;
use llm_anatomy::quant::GgmlType;
use llm_anatomy::qwen3::weights::{ExpertLayout, Ffn};
use llm_anatomy::qwen3::{self, F32Tensors, Model, Tensors};
use serde_json::Value;
use std::path::{Path, PathBuf};

fn fixtures() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_models")
}

fn manifest() -> Value {
    let text = std::fs::read_to_string(fixtures().join("manifest.json")).unwrap();
    serde_json::from_str(&text).unwrap()
}

/// A little-endian f32 `.npy` file (format 1.0, C order): its values and shape.
fn read_npy(path: &Path) -> (Vec<f32>, Vec<usize>) {
    let bytes = std::fs::read(path).unwrap();
    assert_eq!(&bytes[..6], b"\x93NUMPY", "{}", path.display());
    let header_len = u16::from_le_bytes([bytes[8], bytes[9]]) as usize;
    let header = std::str::from_utf8(&bytes[10..10 + header_len]).unwrap();
    assert!(header.contains("'descr': '<f4'") && header.contains("'fortran_order': False"));
    let shape_text = &header[header.find("'shape': (").unwrap() + 10..];
    let shape: Vec<usize> = shape_text[..shape_text.find(')').unwrap()]
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let values: Vec<f32> = bytes[10 + header_len..]
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
        .collect();
    assert_eq!(values.len(), shape.iter().product::<usize>());
    (values, shape)
}

/// Mean over positions of KL(softmax(p) ‖ softmax(q)), in f64.
fn mean_kl(p: &[f32], q: &[f32], vocab: usize) -> f64 {
    let log_softmax = |x: &[f32]| -> Vec<f64> {
        let m = x.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let z: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum::<f64>().ln() + m;
        x.iter().map(|&v| v as f64 - z).collect()
    };
    let rows = p.len() / vocab;
    let total: f64 = p
        .chunks_exact(vocab)
        .zip(q.chunks_exact(vocab))
        .map(|(a, b)| {
            let (la, lb) = (log_softmax(a), log_softmax(b));
            la.iter()
                .zip(&lb)
                .map(|(x, y)| x.exp() * (x - y))
                .sum::<f64>()
        })
        .sum();
    total / rows as f64
}

/// One committed file and what it is compared with.
struct Case {
    model: String,
    file: String,
    path: PathBuf,
    hf_logits: PathBuf,
    llama_kl: f64,
}

fn cases() -> Vec<Case> {
    let m = manifest();
    let mut out = Vec::new();
    for (model, entry) in m["models"].as_object().unwrap() {
        for (file, f) in entry["files"].as_object().unwrap() {
            let dir = fixtures().join(model);
            // Follow llama.cpp: top-k weights renormalised (see the module docs).
            let (hf, kl) = match f.get("hf_logits_norm_topk") {
                Some(v) => (v, &f["kl_hf_norm_topk_to_llama_mean"]),
                None => (&f["hf_logits"], &f["kl_hf_to_llama_mean"]),
            };
            out.push(Case {
                model: model.clone(),
                file: file.clone(),
                path: dir.join(file),
                hf_logits: dir.join(hf.as_str().unwrap()),
                llama_kl: kl.as_f64().unwrap(),
            });
        }
    }
    out
}

fn prompt() -> Vec<u32> {
    common::ids(&manifest()["prompt"])
}

#[test]
fn every_family_and_quirk_is_covered() {
    let cases = cases();
    let has = |model: &str| cases.iter().any(|c| c.model == model);
    assert!(has("moe") && has("moe_tied") && has("qwen3") && has("qwen2"));
    let (cfg, _) = qwen3::open(&fixtures().join("moe_tied/q8_0.gguf")).unwrap();
    assert!(cfg.tie_word_embeddings && cfg.norm_topk_prob && cfg.num_experts == 4);
    let (cfg, _) = qwen3::open(&fixtures().join("qwen2/q8_0.gguf")).unwrap();
    assert!(cfg.attention_bias && !cfg.qk_norm && cfg.model_type == "qwen2");
    // The default path keeps the blocks: no dequantised copy of a matrix is made.
    let (cfg, file) = qwen3::open(&fixtures().join("moe/q4_k_m.gguf")).unwrap();
    let model = Model::new(cfg, &file).unwrap();
    let a = &model.weights.layers[0].self_attn;
    assert!(matches!(
        a.q_proj.data,
        WeightData::Quant {
            ty: GgmlType::Q4_K,
            ..
        }
    ));
    let Ffn::Moe { experts, .. } = &model.weights.layers[0].mlp else {
        panic!("an MoE layer")
    };
    assert!(matches!(
        experts[3].down.data,
        WeightData::Quant {
            ty: GgmlType::Q6_K,
            ..
        }
    ));
    assert_eq!(model.weights.expert_layout, Some(ExpertLayout::Stacked));
}

#[test]
fn reference_logits_equal_transformers_on_the_dequantised_weights() {
    let ids = prompt();
    for c in cases() {
        let (cfg, file) = qwen3::open(&c.path).unwrap();
        let vocab = cfg.vocab_size;
        let store = F32Tensors::of(Tensors::from(&file)).unwrap();
        let model = Model::new(cfg, &store).unwrap().with_reference_kernels();
        let ours = model.logits(&ids).unwrap().logits;
        let (hf, shape) = read_npy(&c.hf_logits);
        assert_eq!(shape, [ids.len(), vocab]);
        let scale = hf.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        let diff = common::max_abs_diff(&ours, &hf);
        eprintln!(
            "{}/{}: reference max |Δ| {diff:.2e} (scale {scale:.2})",
            c.model, c.file
        );
        assert!(
            diff <= 1e-4 * scale,
            "{}/{}: max |Δ| {diff} > 1e-4 × {scale}",
            c.model,
            c.file
        );
    }
}

#[test]
fn fast_path_is_as_close_to_transformers_as_llama_cpp() {
    let ids = prompt();
    for c in cases() {
        let (cfg, file) = qwen3::open(&c.path).unwrap();
        let vocab = cfg.vocab_size;
        let model = Model::new(cfg, &file).unwrap();
        let ours = model.logits(&ids).unwrap().logits;
        let (hf, _) = read_npy(&c.hf_logits);
        let kl = mean_kl(&hf, &ours, vocab);
        eprintln!(
            "{}/{}: mean KL(hf ‖ ours) {kl:.3e}, llama.cpp's {:.3e}",
            c.model, c.file, c.llama_kl
        );
        assert!(
            kl <= c.llama_kl,
            "{}/{}: KL {kl} > llama.cpp's {}",
            c.model,
            c.file,
            c.llama_kl
        );
    }
}

/// `--reference` on a Hugging Face checkpoint too: every weight widened to f32 (bf16 and
/// f16 ones included), the clear kernels, the same logits as transformers
/// (tests/fixtures/qwen3, scripts/gen_qwen3_fixtures.py) within 1e-5.
#[test]
fn reference_pass_on_hugging_face_checkpoints() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/qwen3");
    for case in ["bf16_sharded", "fused_f16", "mixed_layers", "bias_sliding"] {
        let dir = root.join(case);
        let json: Value =
            serde_json::from_slice(&std::fs::read(dir.join("expected.json")).unwrap()).unwrap();
        let ids = common::ids(&json["prompt"]);
        let (expected, _) =
            llm_anatomy::checkpoint::Checkpoint::open_file(&dir.join("expected.safetensors"))
                .unwrap()
                .to_f32("logits")
                .unwrap();
        let (cfg, file) = qwen3::open(&dir).unwrap();
        let store = F32Tensors::of(Tensors::from(&file)).unwrap();
        let model = Model::new(cfg, &store).unwrap().with_reference_kernels();
        let ours = model.logits(&ids).unwrap();
        let diff = common::max_abs_diff(&ours.logits, &expected);
        assert!(diff < 1e-5, "{case}: max |Δlogit| {diff:e}");
        let fast = Model::new(qwen3::open(&dir).unwrap().0, &file).unwrap();
        let routing = fast.logits(&ids).unwrap().routing;
        for (a, b) in ours.routing.iter().zip(&routing) {
            for (x, y) in a.routing.iter().zip(&b.routing) {
                assert_eq!(x.experts, y.experts, "{case} layer {}", a.layer);
            }
        }
    }
}

/// The command line on a GGUF MODEL: `logits` (fast and `--reference`), `generate`,
/// `router-stats` and `glitch --model` run, and `logits` writes what the library computes.
#[test]
fn the_model_commands_take_a_gguf_file() {
    let case = cases()
        .into_iter()
        .find(|c| c.model == "moe_tied" && c.file == "q4_k_m.gguf")
        .unwrap();
    let (path, ids) = (case.path.to_str().unwrap(), common::join(&prompt()));
    let (hf, _) = read_npy(&case.hf_logits);
    let scale = hf.iter().fold(0.0f32, |m, v| m.max(v.abs()));
    let out = common::scratch("gguf-cli");
    // The default: the fast path (int8 activations; its accuracy is the KL criterion
    // above), so the command's logits are the library's; --reference: transformers'.
    let (cfg, file) = qwen3::open(&case.path).unwrap();
    let fast = Model::new(cfg, &file)
        .unwrap()
        .logits(&prompt())
        .unwrap()
        .logits;
    for (flag, want, bound) in [
        (None, &fast, 1e-5 * scale),
        (Some("--reference"), &hf, 1e-4 * scale),
    ] {
        let file = out.join("logits.safetensors");
        let mut args = vec![
            "logits",
            path,
            "--ids",
            &ids,
            "--out",
            file.to_str().unwrap(),
        ];
        args.extend(flag);
        let run = common::anatomy(&args);
        assert!(
            run.status.success(),
            "{}",
            String::from_utf8_lossy(&run.stderr)
        );
        let (logits, shape) = llm_anatomy::checkpoint::Checkpoint::open_file(&file)
            .unwrap()
            .to_f32("logits")
            .unwrap();
        assert_eq!(shape, [16, 256]);
        let diff = common::max_abs_diff(&logits, want);
        assert!(diff <= bound, "{flag:?}: max |Δ| {diff}");
    }
    let run = common::anatomy(&[
        "generate",
        path,
        "--ids",
        "1,2,3",
        "--max-new-tokens",
        "3",
        "--json",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let generated: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(generated["ids"].as_array().unwrap().len(), 3);
    let run = common::anatomy(&["router-stats", path, "--ids", "1,2,3", "--json"]);
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["layers"].as_array().unwrap().len(), 2);
    // The fixtures carry no vocabulary: glitch takes one with --vocab and screens the
    // file's embedding (tied: no output.weight).
    let vocab = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/qwen.tiktoken");
    let run = common::anatomy(&[
        "glitch",
        "--vocab",
        vocab.to_str().unwrap(),
        "--model",
        path,
        "--top-k",
        "5",
        "--json",
    ]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["checkpoint"]["tied"], Value::Bool(true));
    assert_eq!(
        report["checkpoint"]["norms"]["smallest"]
            .as_array()
            .unwrap()
            .len(),
        5
    );
}

/// The int8 path (kernels::quant: activations quantised to 8-bit blocks, 16 values for
/// Q8_0 weights and 32 for the others, integer dots with the weight blocks) forced on for
/// every matmul of every fixture, whatever its size: its mean KL from transformers'
/// distribution is at most llama.cpp's on all 19 files (the criterion of issue 14; with
/// llama.cpp's own 32-value blocks for Q8_0 it missed on qwen3/q8_0, 4.03e-4 against
/// 3.84e-4, which is why Q8_0 weights take 16-value activation blocks), so the path is on
/// by default (`ANATOMY_QUANT_ACTIVATIONS=0` turns it off).
#[test]
fn int8_path_is_as_close_to_transformers_as_llama_cpp() {
    use llm_anatomy::kernels::quant::with_quant_activations;
    let ids = prompt();
    let mut worse = Vec::new();
    for c in cases() {
        let (cfg, file) = qwen3::open(&c.path).unwrap();
        let vocab = cfg.vocab_size;
        let model = Model::new(cfg, &file).unwrap();
        let f32_path = with_quant_activations(false, || model.logits(&ids).unwrap().logits);
        let int8 = with_quant_activations(true, || model.logits(&ids).unwrap().logits);
        let (hf, _) = read_npy(&c.hf_logits);
        let (kl_f32, kl_int8) = (mean_kl(&hf, &f32_path, vocab), mean_kl(&hf, &int8, vocab));
        eprintln!(
            "{}/{}: mean KL(hf ‖ ·): int8 {kl_int8:.3e}, f32 path {kl_f32:.3e}, llama.cpp {:.3e}",
            c.model, c.file, c.llama_kl
        );
        if kl_int8 > c.llama_kl {
            worse.push(format!(
                "{}/{}: {kl_int8:.3e} > {:.3e}",
                c.model, c.file, c.llama_kl
            ));
        }
    }
    assert!(worse.is_empty(), "int8 KL above llama.cpp's on {worse:?}");
}
