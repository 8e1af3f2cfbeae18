//! Chapter 11: the GGUF model fixtures (scripts/gen_gguf_model_fixtures.py) are what their
//! manifest says — each file opens with our reader, holds the tensors and the ggml types
//! llama.cpp's quantiser chose, and has its two logits files, f32 [prompt, vocab], with
//! llama.cpp and transformers agreeing to within the manifest's small KL divergence.

use llm_anatomy::gguf::Gguf;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_models")
}

/// A little-endian f32 `.npy` file (format 1.0, C order): its shape and values.
fn read_npy(path: &Path) -> (Vec<usize>, Vec<f32>) {
    let b = std::fs::read(path).unwrap();
    assert_eq!(&b[..6], b"\x93NUMPY", "{}", path.display());
    assert_eq!(b[6], 1, "{}: npy version", path.display());
    let header_len = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + header_len]).unwrap();
    assert!(header.contains("'descr': '<f4'"), "{header}");
    assert!(header.contains("'fortran_order': False"), "{header}");
    let open = header.find("'shape': (").unwrap() + "'shape': (".len();
    let close = open + header[open..].find(')').unwrap();
    let shape: Vec<usize> = header[open..close]
        .split(',')
        .filter(|s| !s.trim().is_empty())
        .map(|s| s.trim().parse().unwrap())
        .collect();
    let data: Vec<f32> = b[10 + header_len..]
        .chunks_exact(4)
        .map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]]))
        .collect();
    assert_eq!(data.len(), shape.iter().product::<usize>());
    (shape, data)
}

/// Mean over rows of KL(P ‖ Q) for row-major logits of `vocab` columns.
fn kl_mean(p: &[f32], q: &[f32], vocab: usize) -> f64 {
    let log_softmax = |x: &[f32]| -> Vec<f64> {
        let m = x.iter().fold(f64::NEG_INFINITY, |a, &v| a.max(v as f64));
        let z: f64 = x.iter().map(|&v| (v as f64 - m).exp()).sum();
        x.iter().map(|&v| v as f64 - m - z.ln()).collect()
    };
    let rows = p.len() / vocab;
    let mut total = 0.0;
    for (a, b) in p.chunks(vocab).zip(q.chunks(vocab)) {
        let (lp, lq) = (log_softmax(a), log_softmax(b));
        total += lp
            .iter()
            .zip(&lq)
            .map(|(x, y)| x.exp() * (x - y))
            .sum::<f64>();
    }
    total / rows as f64
}

#[test]
fn every_file_is_what_the_manifest_says() {
    let manifest: Value =
        serde_json::from_slice(&std::fs::read(dir().join("manifest.json")).unwrap()).unwrap();
    let prompt = manifest["prompt"].as_array().unwrap().len();
    assert_eq!(prompt, 16);
    let mut files = 0;
    for (model, entry) in manifest["models"].as_object().unwrap() {
        let vocab = entry["config"]["vocab_size"].as_u64().unwrap() as usize;
        let prompt_json: Value =
            serde_json::from_slice(&std::fs::read(dir().join(model).join("prompt.json")).unwrap())
                .unwrap();
        assert_eq!(prompt_json["ids"], manifest["prompt"]);
        for (name, f) in entry["files"].as_object().unwrap() {
            files += 1;
            let path = dir().join(model).join(name);
            let g = Gguf::open(&path).unwrap();
            assert_eq!(g.file_size(), f["size"].as_u64().unwrap(), "{name}");
            let arch = g.get_str("general.architecture").unwrap().unwrap();
            let class = entry["class"].as_str().unwrap();
            let want_arch = match class {
                "Qwen3MoeForCausalLM" => "qwen3moe",
                "Qwen3ForCausalLM" => "qwen3",
                _ => "qwen2",
            };
            assert_eq!(arch, want_arch, "{model}/{name}");
            let types = f["types"].as_object().unwrap();
            assert_eq!(g.tensors().len(), types.len(), "{model}/{name}");
            for t in g.tensors() {
                let want = types[&t.name].as_str().unwrap();
                assert!(
                    t.ty.name().eq_ignore_ascii_case(want),
                    "{model}/{name} {}: {} vs {want}",
                    t.name,
                    t.ty.name()
                );
            }
            let tied = entry["config"]["tie_word_embeddings"].as_bool().unwrap();
            assert_eq!(g.tensor("output.weight").is_none(), tied, "{model}/{name}");

            let (shape, llama) =
                read_npy(&path.with_file_name(f["llama_logits"].as_str().unwrap()));
            assert_eq!(shape, [prompt, vocab]);
            let (shape, hf) = read_npy(&path.with_file_name(f["hf_logits"].as_str().unwrap()));
            assert_eq!(shape, [prompt, vocab]);
            let kl = kl_mean(&hf, &llama, vocab);
            let recorded = f["kl_hf_to_llama_mean"].as_f64().unwrap();
            assert!(
                (kl - recorded).abs() < 1e-6 + 1e-3 * recorded,
                "{model}/{name}: {kl} vs {recorded}"
            );
            // Same dequantised weights on both sides: only llama.cpp's own arithmetic
            // differs, except where llama.cpp ignores norm_topk_prob = false (moe_tied).
            if model == "moe_tied" {
                let (_, normed) =
                    read_npy(&path.with_file_name(f["hf_logits_norm_topk"].as_str().unwrap()));
                assert!(kl > 0.01, "{model}/{name}: {kl}");
                assert!(kl_mean(&normed, &llama, vocab) < 2e-3, "{model}/{name}");
            } else {
                assert!(kl < 2e-3, "{model}/{name}: {kl}");
            }
        }
    }
    assert_eq!(files, 19);
}
