//! The real models' architectures, `llama` (SmolLM2) and `gemma3` (Gemma 3 270M), given
//! bad input: metadata out of range or missing and non-finite block scales are refused as
//! a `qwen3moe` file's are, naming the file and the GGUF key or tensor. The broken files
//! are made here from target/real-models (scripts/get-real-models.sh); without them the
//! test says what it skips.

use super::*;
use llm_anatomy::gguf::{Gguf, GgufWriter, MetaValue};

/// The real model `file` under target/real-models, or `None` after one line saying so.
fn real_model(file: &str, test: &str) -> Option<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("target/real-models")
        .join(file);
    if path.is_file() {
        return Some(path);
    }
    eprintln!(
        "skipped {test}: {} is absent (fetch it with `bash scripts/get-real-models.sh`)",
        path.display()
    );
    None
}

/// A fresh directory for the cases of `tag`, removed when dropped.
fn case_dir(tag: &str) -> Scratch {
    scratch(&format!("bad-real-{tag}"))
}

/// `src`'s metadata with `key` set to `value` (or removed, for `None`), and no tensors:
/// the config is read, and refused, before any tensor is looked for.
fn metadata_only(src: &Path, key: &str, value: Option<MetaValue>, dst: &Path) {
    let g = Gguf::open(src).unwrap();
    let mut metadata: Vec<_> = g
        .metadata()
        .iter()
        .filter(|(k, _)| k != key)
        .cloned()
        .collect();
    metadata.extend(value.map(|v| (key.to_string(), v)));
    let file = std::fs::File::create(dst).unwrap();
    let w = GgufWriter::new(file, metadata, Vec::new(), g.alignment()).unwrap();
    w.finish().unwrap();
}

/// A copy of `src` with `bytes` written `skip` bytes into tensor `tensor`'s data.
fn poisoned_copy(src: &Path, tensor: &str, skip: u64, bytes: &[u8], dst: &Path) {
    use std::io::{Seek, SeekFrom, Write};
    let g = Gguf::open(src).unwrap();
    let at = g.data_offset() + g.tensor(tensor).unwrap().offset + skip;
    drop(g);
    std::fs::copy(src, dst).unwrap();
    let mut f = std::fs::OpenOptions::new().write(true).open(dst).unwrap();
    f.seek(SeekFrom::Start(at)).unwrap();
    f.write_all(bytes).unwrap();
}

fn logits_refused(model: &Path, needles: &[&str]) {
    let out = model.with_extension("out.safetensors");
    refused(
        &["logits", s(model), "--ids", IDS, "--out", s(&out)],
        needles,
    );
    assert!(!out.exists(), "no output written for {needles:?}");
}

/// The metadata cases of architecture `arch`: (key, value or `None` to remove it, words).
fn metadata_cases(arch: &str) -> Vec<(String, Option<MetaValue>, &'static str)> {
    let key = |k: &str| format!("{arch}.{k}");
    let mut cases = vec![
        (
            key("attention.layer_norm_rms_epsilon"),
            Some(MetaValue::F32(f32::NAN)),
            "NaN",
        ),
        (
            key("rope.freq_base"),
            Some(MetaValue::F32(f32::INFINITY)),
            "inf",
        ),
        (key("rope.freq_base"), Some(MetaValue::F32(-1.0)), "-1"),
        (
            key("block_count"),
            Some(MetaValue::U32(u32::MAX)),
            "above the limit",
        ),
        (key("context_length"), Some(MetaValue::F32(64.7)), "64.7"),
        (
            key("attention.head_count_kv"),
            Some(MetaValue::U32(5)),
            "head_count",
        ),
        (key("embedding_length"), None, "missing"),
        (key("attention.head_count"), None, "missing"),
        (key("block_count"), None, "missing"),
    ];
    if arch == "gemma3" {
        cases.push((
            key("attention.sliding_window"),
            Some(MetaValue::F32(f32::NAN)),
            "NaN",
        ));
        cases.push((key("attention.head_count"), Some(MetaValue::U32(0)), "0"));
        cases.push((
            key("attention.key_length"),
            Some(MetaValue::U32(0)),
            "at least 1",
        ));
    }
    cases
}

#[test]
fn llama_and_gemma3_metadata_out_of_range_or_missing_names_the_file_and_key() {
    let test = "llama_and_gemma3_metadata_out_of_range_or_missing_names_the_file_and_key";
    for (file, arch) in [
        ("smollm2-135m-instruct-q4_1.gguf", "llama"),
        ("gemma3-270m-q4_k_m.gguf", "gemma3"),
    ] {
        let Some(src) = real_model(file, test) else {
            continue;
        };
        let dir = case_dir(arch);
        for (i, (key, value, words)) in metadata_cases(arch).into_iter().enumerate() {
            let bad = dir.join(format!("case{i}.gguf"));
            metadata_only(&src, &key, value, &bad);
            logits_refused(&bad, &[&format!("case{i}.gguf"), &key, words]);
        }
    }
}

#[test]
fn llama_and_gemma3_non_finite_block_scales_name_the_file_and_tensor() {
    let test = "llama_and_gemma3_non_finite_block_scales_name_the_file_and_tensor";
    // (file, tensor, its format's offset of a block's f16 scale d, Hugging Face role)
    for (file, tensor, d_at, role) in [
        (
            "smollm2-135m-instruct-q4_1.gguf",
            "blk.0.ffn_up.weight",
            0,
            "model.layers.0.mlp.up_proj.weight",
        ),
        (
            "gemma3-270m-q4_k_m.gguf",
            "blk.0.attn_output.weight",
            0,
            "model.layers.0.self_attn.o_proj.weight",
        ),
        (
            "gemma3-270m-q4_k_m.gguf",
            "blk.0.ffn_down.weight",
            208,
            "model.layers.0.mlp.down_proj.weight",
        ),
    ] {
        let Some(src) = real_model(file, test) else {
            continue;
        };
        let dir = case_dir("scale");
        let bad = dir.join(format!("nan-{file}"));
        poisoned_copy(&src, tensor, d_at, &[0x00, 0x7e], &bad);
        let named = format!("{}: tensor `{tensor}` (`{role}`)", s(&bad));
        let needles = [named.as_str(), "row 0", "holds NaN"];
        logits_refused(&bad, &needles);
        refused(
            &["generate", s(&bad), "--ids", IDS, "--max-new-tokens", "2"],
            &needles,
        );
    }
}
