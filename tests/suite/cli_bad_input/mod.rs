//! Bad input to the model commands (`anatomy logits`, `generate`, `router-stats`): each is
//! a clear message naming the problem and exit code 2, never a panic. The broken
//! checkpoints are made here from a good fixture (tests/fixtures/qwen3/head_dim_gqa,
//! scripts/gen_qwen3_fixtures.py) by truncating it or rewriting its header or config.

use crate::common::{Scratch, scratch};
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use std::process::Command;

const GOOD: &str = "tests/fixtures/qwen3/head_dim_gqa";
const IDS: &str = "1,2,3";

/// A fresh copy of the good fixture in a scratch directory, removed when dropped.
fn copy_good(tag: &str) -> Scratch {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join(GOOD);
    let dst = scratch(&format!("bad-{tag}"));
    for f in ["config.json", "model.safetensors"] {
        std::fs::copy(src.join(f), dst.join(f)).unwrap();
    }
    dst
}

/// Splits a safetensors file into (header JSON, data bytes).
fn split(file: &Path) -> (Value, Vec<u8>) {
    let bytes = std::fs::read(file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = serde_json::from_slice(&bytes[8..8 + n]).unwrap();
    (header, bytes[8 + n..].to_vec())
}

fn join(file: &Path, header: &Value, data: &[u8]) {
    let h = serde_json::to_vec(header).unwrap();
    let mut out = (h.len() as u64).to_le_bytes().to_vec();
    out.extend(h);
    out.extend_from_slice(data);
    std::fs::write(file, out).unwrap();
}

/// Rewrites the header of `dir/model.safetensors` with `edit`.
fn edit_header(dir: &Path, edit: impl FnOnce(&mut serde_json::Map<String, Value>)) {
    let file = dir.join("model.safetensors");
    let (mut header, data) = split(&file);
    edit(header.as_object_mut().unwrap());
    join(&file, &header, &data);
}

fn edit_config(dir: &Path, edit: impl FnOnce(&mut Value)) {
    let path = dir.join("config.json");
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
    edit(&mut cfg);
    std::fs::write(path, serde_json::to_vec_pretty(&cfg).unwrap()).unwrap();
}

/// Runs anatomy and checks: exit code 2, no panic, stderr mentions every `needles` entry.
fn fails(args: &[&str], needles: &[&str]) {
    let out = Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(args)
        .output()
        .expect("run anatomy");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!err.contains("panicked"), "panic on {args:?}: {err}");
    assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: expected {n:?} in: {err}");
    }
}

fn logits(dir: &Path, ids: &str, needles: &[&str]) {
    let out = dir.join("out.safetensors");
    let (d, o) = (dir.to_str().unwrap(), out.to_str().unwrap());
    fails(&["logits", d, "--ids", ids, "--out", o], needles);
}

#[test]
fn truncated_file() {
    let dir = copy_good("trunc");
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    std::fs::write(&file, &bytes[..bytes.len() / 2]).unwrap();
    logits(
        &dir,
        IDS,
        &["model.safetensors", "outside the data section"],
    );
    std::fs::write(&file, &bytes[..5]).unwrap();
    logits(&dir, IDS, &["model.safetensors", "too short"]);
    std::fs::write(&file, &bytes[..100]).unwrap();
    logits(&dir, IDS, &["model.safetensors", "header length"]);
}

#[test]
fn header_length_lies() {
    let dir = copy_good("hlen");
    let file = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[..8].copy_from_slice(&u64::MAX.to_le_bytes());
    std::fs::write(&file, &bytes).unwrap();
    logits(&dir, IDS, &["model.safetensors", "header length"]);
    // A length a little short cuts the JSON.
    let good = std::fs::read(
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .join(GOOD)
            .join("model.safetensors"),
    )
    .unwrap();
    let n = u64::from_le_bytes(good[..8].try_into().unwrap());
    let mut bytes = good.clone();
    bytes[..8].copy_from_slice(&(n - 10).to_le_bytes());
    std::fs::write(&file, &bytes).unwrap();
    logits(&dir, IDS, &["model.safetensors", "not valid JSON"]);
}

#[test]
fn offsets_lie() {
    let dir = copy_good("offs");
    edit_header(&dir, |h| {
        h["model.norm.weight"]["data_offsets"] = json!([0, 10_000_000]);
    });
    logits(&dir, IDS, &["model.norm.weight", "data_offsets"]);
    let dir = copy_good("offs2");
    edit_header(&dir, |h| {
        let a = h["model.norm.weight"]["data_offsets"].clone();
        h["model.layers.0.input_layernorm.weight"]["data_offsets"] = a;
    });
    logits(&dir, IDS, &["overlap"]);
    let dir = copy_good("offs3");
    edit_header(&dir, |h| {
        h["model.norm.weight"]["data_offsets"] = json!([8, 4]);
    });
    logits(&dir, IDS, &["model.norm.weight", "data_offsets"]);
}

#[test]
fn garbage_json_in_header_and_config() {
    let dir = copy_good("gjson");
    let file = dir.join("model.safetensors");
    let mut bytes = std::fs::read(&file).unwrap();
    bytes[8..20].copy_from_slice(b"{not json!!!");
    std::fs::write(&file, &bytes).unwrap();
    logits(&dir, IDS, &["model.safetensors", "not valid JSON"]);

    let dir = copy_good("gconf");
    std::fs::write(dir.join("config.json"), b"{\"hidden_size\": 24,, oops").unwrap();
    logits(&dir, IDS, &["config.json", "invalid JSON"]);
    std::fs::write(dir.join("config.json"), b"[1, 2]").unwrap();
    logits(&dir, IDS, &["config.json", "not a JSON object"]);
    let dir = copy_good("gconf2");
    edit_config(&dir, |c| c["hidden_size"] = json!("wide"));
    logits(&dir, IDS, &["config.json", "hidden_size"]);
    let dir = copy_good("gconf3");
    edit_config(&dir, |c| c["num_key_value_heads"] = json!(3));
    logits(&dir, IDS, &["config.json", "num_key_value_heads"]);
}

#[test]
fn tensor_missing_wrong_shape_wrong_dtype() {
    // (tensor, its header entry's field set to a value or removed, words of the message);
    // the transposed shape keeps the same bytes: [32, 24] claimed as [24, 32].
    let cases = [
        ("model.layers.1.self_attn.k_norm.weight", None, "missing"),
        (
            "model.layers.2.mlp.experts.5.up_proj.weight",
            None,
            "missing",
        ),
        (
            "model.layers.0.self_attn.q_proj.weight",
            Some(("shape", json!([24, 32]))),
            "shape [24, 32], expected [32, 24]",
        ),
        (
            "model.layers.0.mlp.gate.weight",
            Some(("dtype", json!("I32"))),
            "dtype I32",
        ),
        (
            "model.norm.weight",
            Some(("dtype", json!("Q4_K"))),
            "unknown dtype",
        ),
    ];
    for (i, (tensor, edit, words)) in cases.into_iter().enumerate() {
        let dir = copy_good(&format!("tensor{i}"));
        edit_header(&dir, |h| match edit {
            Some((field, value)) => h[tensor][field] = value,
            None => drop(h.remove(tensor)),
        });
        logits(&dir, IDS, &[tensor, words]);
    }

    // The config disagrees with the tensors: they are checked against it.
    let dir = copy_good("cfgshape");
    edit_config(&dir, |c| c["moe_intermediate_size"] = json!(16));
    logits(
        &dir,
        IDS,
        &["mlp.experts.0.gate_proj.weight", "expected [16, 24]"],
    );
}

#[test]
fn unknown_rope_type() {
    let dir = copy_good("rope");
    edit_config(&dir, |c| {
        c["rope_parameters"]["rope_type"] = json!("warp-drive")
    });
    logits(
        &dir,
        IDS,
        &["config.json", "unknown rope type", "warp-drive"],
    );
}

#[test]
fn ids_out_of_range_or_empty_or_not_numbers() {
    let dir = copy_good("ids");
    logits(&dir, "1,2,96", &["token id 96", "vocab_size = 96"]);
    logits(&dir, "", &["no token ids"]);
    logits(&dir, "1,x,3", &["\"x\" is not a token id"]);
    let d = dir.to_str().unwrap();
    fails(
        &[
            "generate",
            d,
            "--ids",
            "5,4000000000",
            "--max-new-tokens",
            "2",
        ],
        &["out of range"],
    );
    fails(
        &["router-stats", d, "--ids", ",", "--json"],
        &["no token ids"],
    );
}

#[test]
fn prompt_past_max_position_embeddings() {
    let dir = copy_good("maxpos");
    let long: Vec<String> = (0..65).map(|i| (i % 90).to_string()).collect();
    logits(
        &dir,
        &long.join(","),
        &["65 positions", "max_position_embeddings = 64"],
    );
    // Prompt + new tokens past the limit is refused before any work.
    let prompt: Vec<String> = (0..60).map(|i| (i % 90).to_string()).collect();
    let d = dir.to_str().unwrap();
    fails(
        &[
            "generate",
            d,
            "--ids",
            &prompt.join(","),
            "--max-new-tokens",
            "10",
        ],
        &["max_position_embeddings"],
    );
}

#[test]
fn missing_directory_and_missing_files() {
    let parent = scratch("bad-missing");
    let missing = parent.join("anatomy-no-such-model-dir");
    logits(
        &missing,
        IDS,
        &["anatomy-no-such-model-dir", "no such model directory"],
    );

    let dir = copy_good("nofile");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    logits(&dir, IDS, &["no model.safetensors"]);

    let dir = copy_good("noconf");
    std::fs::remove_file(dir.join("config.json")).unwrap();
    logits(&dir, IDS, &["config.json"]);

    // An index naming a shard that is not there.
    let dir = copy_good("index");
    std::fs::rename(
        dir.join("model.safetensors"),
        dir.join("model-00001-of-00002.safetensors"),
    )
    .unwrap();
    let index = json!({"metadata": {}, "weight_map": {
        "model.norm.weight": "model-00001-of-00002.safetensors",
        "lm_head.weight": "model-00002-of-00002.safetensors"}});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    logits(&dir, IDS, &["model-00002-of-00002.safetensors"]);
}

#[test]
fn bad_sampling_options() {
    let dir = copy_good("sampling");
    let d = dir.to_str().unwrap();
    fails(
        &[
            "generate",
            d,
            "--ids",
            IDS,
            "--max-new-tokens",
            "3",
            "--temperature",
            "0",
        ],
        &["temperature"],
    );
    fails(
        &[
            "generate",
            d,
            "--ids",
            IDS,
            "--max-new-tokens",
            "3",
            "--temperature",
            "1",
            "--top-p",
            "1.5",
        ],
        &["top_p"],
    );
}

/// A write that fails is our side's failure (the machine's), not bad input: exit 1.
#[test]
fn unwritable_output_is_exit_1() {
    let dir = copy_good("unwritable");
    let out = dir.join("no-such-dir").join("out.safetensors");
    let run = Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(["logits", dir.to_str().unwrap(), "--ids", IDS, "--out"])
        .arg(&out)
        .output()
        .expect("run anatomy");
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(!err.contains("panicked"), "{err}");
    assert_eq!(run.status.code(), Some(1), "{err}");
    assert!(
        err.contains("out.safetensors") && err.contains("cannot write"),
        "{err}"
    );
}

// ------------------------------------------------------------------------------------
// Issue 13: one case per class of bad input. Each run has a deadline, so a hang fails the
// test instead of stalling it.

/// Runs anatomy with a deadline of `secs`; returns (exit code, stdout, stderr).
fn run_within(args: &[&str], secs: u64) -> (Option<i32>, String, String) {
    use std::io::Read;
    let mut child = Command::new(env!("CARGO_BIN_EXE_anatomy"))
        .args(args)
        .stdin(std::process::Stdio::null())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run anatomy");
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(secs);
    let status = loop {
        if let Some(s) = child.try_wait().expect("wait") {
            break s;
        }
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{args:?} still running after {secs} s");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let (mut out, mut err) = (String::new(), String::new());
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut out)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    (status.code(), out, err)
}

/// Exit code 2 within 30 s, no panic, every needle in stderr, and a short message.
fn refused(args: &[&str], needles: &[&str]) -> String {
    let (code, _, err) = run_within(args, 30);
    assert!(!err.contains("panicked"), "panic on {args:?}: {err}");
    assert_eq!(code, Some(2), "{args:?}: {err}");
    for n in needles {
        assert!(err.contains(n), "{args:?}: expected {n:?} in: {err}");
    }
    assert!(
        err.len() < 2000,
        "{args:?}: a message of {} bytes",
        err.len()
    );
    err
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// Writes `value` over the first element of `tensor` (F32) in `dir/model.safetensors`.
fn poison(dir: &Path, tensor: &str, index: usize, value: f32) {
    let file = dir.join("model.safetensors");
    let (header, mut data) = split(&file);
    let begin = header[tensor]["data_offsets"][0].as_u64().unwrap() as usize + 4 * index;
    data[begin..begin + 4].copy_from_slice(&value.to_le_bytes());
    join(&file, &header, &data);
}

mod gguf;
mod limits;
mod real_models;
mod weights;
