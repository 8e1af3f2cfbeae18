//! `anatomy params --quant` against GGUF files llama.cpp wrote: for every model and file
//! type of tests/fixtures/gguf_models/ (scripts/gen_gguf_model_fixtures.py; llama.cpp as
//! vendored by llama-cpp-python 0.3.36), the estimate from the model's config.json names
//! the file's tensors, gives each llama.cpp's type, and its size is the file's within the
//! bounded header and metadata overhead. (The tensor bytes are exact: llama.cpp's sizes
//! minus ours leave 1,504–2,464 bytes of header, infos and keys.)

use crate::common;

use llm_anatomy::params::ModelConfig;
use llm_anatomy::params::quant::{MODEL_KEYS_BYTES, estimate, overhead_bound, plan};
use llm_anatomy::quant::mix::FileType;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

fn manifest() -> Value {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_models/manifest.json");
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn estimate_matches_llama_cpp_files() {
    let m = manifest();
    let mut checked = 0;
    for (model, entry) in m["models"].as_object().unwrap() {
        let config = ModelConfig::from_json(&entry["config"], model).unwrap();
        for (file, info) in entry["files"].as_object().unwrap() {
            let at = format!("{model}/{file}");
            let scheme = FileType::from_name(file.strip_suffix(".gguf").unwrap()).unwrap();
            let tensors = plan(&config, scheme);
            let ours: BTreeMap<String, String> = tensors
                .iter()
                .map(|t| (t.name.clone(), t.ty.name().to_ascii_uppercase()))
                .collect();
            let theirs: BTreeMap<String, String> = info["types"]
                .as_object()
                .unwrap()
                .iter()
                .map(|(k, v)| (k.clone(), v.as_str().unwrap().to_ascii_uppercase()))
                .collect();
            assert_eq!(ours, theirs, "{at}: tensor names and types");
            let size = info["size"].as_u64().unwrap();
            let e = estimate(&config, scheme, 256);
            let overhead = size
                .checked_sub(e.tensor_bytes)
                .unwrap_or_else(|| panic!("{at}: {} tensor bytes > file {size}", e.tensor_bytes));
            // These files carry no tokenizer: header, tensor infos, padding and the model's
            // keys (1.5–2.5 KB measured) under the bound, which is < 10 KB for them.
            let bound = overhead_bound(&tensors, MODEL_KEYS_BYTES);
            assert!(bound < 10_000, "{at}: bound {bound}");
            assert!(
                overhead > 0 && overhead <= bound,
                "{at}: file {size} − tensors {} = {overhead}, bound {bound}",
                e.tensor_bytes
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 19);
}

#[test]
fn cli_prints_the_estimate_in_text_and_json() {
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/configs/qwen3-30b-a3b.json");
    let config = config.to_str().unwrap();
    let run = |extra: &[&str]| {
        let out = common::anatomy(&[&["params", config], extra].concat());
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8(out.stdout).unwrap()
    };
    let text = run(&["--quant", "Q4_K_M"]);
    assert!(text.contains("quantised as q4_k_m"), "{text}");
    assert!(
        text.contains("17.28 GiB") && text.contains("at 40,960 tokens"),
        "{text}"
    );
    let json: Value = serde_json::from_str(&run(&["--json", "--quant", "q8_0"])).unwrap();
    // The counts stay where they were; the estimate is one more key.
    assert_eq!(json["total"], 30_532_122_624u64);
    let q = &json["quant"];
    assert_eq!(q["scheme"], "q8_0");
    assert_eq!(q["context"], 40_960);
    let (tensors, kv) = (
        q["tensor_bytes"].as_u64().unwrap(),
        q["kv_cache_bytes"].as_u64().unwrap(),
    );
    assert_eq!(q["memory_bytes"].as_u64().unwrap(), tensors + kv);
    assert_eq!(q["by_type"][0]["type"], "f32");
    let summed: u64 = q["by_type"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["bytes"].as_u64().unwrap())
        .sum();
    assert_eq!(summed, tensors);
    for key in [
        "file_gb",
        "file_gib",
        "memory_gb",
        "memory_gib",
        "bits_per_weight",
    ] {
        assert!(q[key].as_f64().unwrap() > 0.0, "{key}");
    }
    // Without --quant there is no estimate.
    let plain: Value = serde_json::from_str(&run(&["--json"])).unwrap();
    assert!(plain.get("quant").is_none());
}
