//! The real models' own tokenizers, read from their GGUF metadata, against llama.cpp's
//! `vocab_only` tokenizer on the same files (data/real/tokenizer-*.json, written by
//! scripts/gen_real_tokenizer_fixtures.py with llama-cpp-python 0.3.36: 62 strings —
//! English, Chinese and other scripts, code, numbers, whitespace runs, emoji, special
//! tokens, leading spaces, the empty string — under the `add_bos` / `special` flags).
//!
//! SmolLM2-135M-Instruct is byte-level BPE with llama.cpp's `smollm` pre-tokenizer (every
//! digit cut out, then GPT-2's pattern); Gemma 3's vocabulary is SentencePiece-style
//! (`tokenizer.ggml.model` = "llama": scores, `▁` for spaces, byte fallback, BOS added).
//! For both, the ids (BOS as the file asks, control tokens matched only with `special`,
//! user-defined ones always) and the detokenized bytes equal llama.cpp's.
//!
//! The model files are not in git: without them these tests say what they skip and how to
//! fetch the files (`bash scripts/get-real-models.sh`).

use crate::real_model::real_model_path;
use llm_anatomy::chat::thinking::ThinkingBudget;
use llm_anatomy::tokenizer::gguf_vocab;
use serde::Deserialize;
use std::path::Path;

#[derive(Deserialize)]
struct Fixture {
    sha256: String,
    cases: Vec<Case>,
}

#[derive(Deserialize)]
struct Case {
    text: String,
    add_bos: bool,
    special: bool,
    ids: Vec<u32>,
    detokenized: Vec<u8>,
}

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn fixture(name: &str) -> Fixture {
    let path = root().join(format!("data/real/tokenizer-{name}.json"));
    let text = std::fs::read_to_string(&path).expect("fixture");
    serde_json::from_str(&text).expect("fixture parses")
}

/// Every case of the model's fixture: our ids and decoded bytes against llama.cpp's.
fn check_against_llama_cpp(name: &str, file: &str, test: &str) {
    let Some(path) = real_model_path(file, test) else {
        return;
    };
    let fx = fixture(name);
    assert!(fx.cases.len() >= 50, "{} cases", fx.cases.len());
    let v = gguf_vocab::open(&path).expect("the model's tokenizer reads");
    let mut wrong = Vec::new();
    for case in &fx.cases {
        let ids = v
            .encode(&case.text, case.add_bos, case.special)
            .expect("encodes");
        if ids != case.ids {
            wrong.push(format!(
                "{:?} special={}: ours {ids:?}, llama.cpp {:?}",
                case.text, case.special, case.ids
            ));
            continue;
        }
        let bytes = v.tokenizer.decode_bytes(&ids).expect("decodes");
        if bytes != case.detokenized {
            let ours = String::from_utf8_lossy(&bytes);
            wrong.push(format!("{:?}: detokenized {ours:?}", case.text));
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} cases differ:\n{}",
        wrong.len(),
        fx.cases.len(),
        wrong.join("\n")
    );
}

#[test]
fn smollm2_tokenizes_as_llama_cpp() {
    check_against_llama_cpp(
        "smollm2",
        "smollm2-135m-instruct-q4_1.gguf",
        "smollm2_tokenizes_as_llama_cpp",
    );
}

#[test]
fn gemma3_tokenizes_as_llama_cpp() {
    check_against_llama_cpp(
        "gemma3",
        "gemma3-270m-q4_k_m.gguf",
        "gemma3_tokenizes_as_llama_cpp",
    );
}

/// SmolLM2's vocabulary lacks a few control bytes: where llama.cpp's detokenized text
/// differs from the input, the bytes it lost are exactly those `bytes_without_token`
/// reports (and `anatomy tokenize` notes on stderr); where nothing is reported, nothing
/// was lost.
#[test]
fn smollm2_reports_the_bytes_llama_cpp_leaves_out() {
    let file = "smollm2-135m-instruct-q4_1.gguf";
    let Some(path) = real_model_path(file, "smollm2_reports_the_bytes_llama_cpp_leaves_out") else {
        return;
    };
    let v = gguf_vocab::open(&path).expect("the model's tokenizer reads");
    let mut reported = 0;
    // The file does not ask for a BOS, so `add_bos` adds nothing to these ids.
    for case in &fixture("smollm2").cases {
        let lost = v.tokenizer.bytes_without_token(&case.text);
        let kept: Vec<u8> = (case.text.bytes()).filter(|b| !lost.contains(b)).collect();
        if case.special || lost.is_empty() {
            // Control tokens in the text are matched whole, whatever their bytes.
            assert!(
                lost.is_empty() || case.detokenized == kept,
                "{:?}",
                case.text
            );
            if lost.is_empty() {
                assert_eq!(case.detokenized, case.text.as_bytes(), "{:?}", case.text);
            }
        } else {
            assert_eq!(case.detokenized, kept, "{:?} lost {lost:?}", case.text);
        }
        reported += usize::from(!lost.is_empty());
    }
    assert!(reported > 0, "no case has a byte without a token");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(["tokenize", "--vocab"])
        .arg(&path)
        .arg("a\u{4}b")
        .output()
        .expect("anatomy runs");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && err.contains("byte 0x04") && err.contains(file),
        "{err}"
    );
}

#[test]
fn fixtures_belong_to_the_files() {
    for (name, file) in [
        ("smollm2", "smollm2-135m-instruct-q4_1.gguf"),
        ("gemma3", "gemma3-270m-q4_k_m.gguf"),
    ] {
        let Some(path) = real_model_path(file, "fixtures_belong_to_the_files") else {
            return;
        };
        let bytes = std::fs::read(&path).expect("model file");
        let digest = sha256_hex(&bytes);
        assert_eq!(digest, fixture(name).sha256, "{}", path.display());
    }
}

/// `--thinking-budget` looks its tags up in the model's own vocabulary: neither model has
/// a `<think>` token, and the error says so, naming the file.
#[test]
fn thinking_budget_names_the_missing_tag() {
    for file in ["smollm2-135m-instruct-q4_1.gguf", "gemma3-270m-q4_k_m.gguf"] {
        let Some(path) = real_model_path(file, "thinking_budget_names_the_missing_tag") else {
            return;
        };
        let v = gguf_vocab::open(&path).expect("reads");
        let e = match ThinkingBudget::for_tokenizer(16, &v.tokenizer) {
            Ok(_) => panic!("{file}: a budget without a <think> token"),
            Err(e) => e.to_string(),
        };
        assert!(e.contains("<think>") && e.contains(file), "{e}");
    }
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
