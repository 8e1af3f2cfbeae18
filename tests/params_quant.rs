//! `anatomy params --quant` against GGUF files llama.cpp wrote: for every model and file
//! type of tests/fixtures/gguf_models/ (scripts/gen_gguf_model_fixtures.py; llama.cpp as
//! vendored by llama-cpp-python 0.3.36), the estimate from the model's config.json names
//! the file's tensors, gives each llama.cpp's type, and its size is the file's within the
//! bounded header and metadata overhead. (The tensor bytes are exact: llama.cpp's sizes
//! minus ours leave 1,504–2,464 bytes of header, infos and keys.)

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
