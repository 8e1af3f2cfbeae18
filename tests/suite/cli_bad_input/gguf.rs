//! Bad GGUF models, and the surfaces added with them: each refused naming the file and the
//! GGUF key or tensor.

use super::*;

// ---- GGUF MODEL input (made here from tests/fixtures/gguf_models/qwen2/q8_0.gguf, which
// scripts/gen_gguf_model_fixtures.py wrote with llama.cpp's quantiser).

const GOOD_GGUF: &str = "tests/fixtures/gguf_models/qwen2/q8_0.gguf";

/// A fresh directory for the GGUF cases of `tag`, removed when dropped.
fn gguf_dir(tag: &str) -> Scratch {
    scratch(&format!("bad-gguf-{tag}"))
}

fn good_gguf_bytes() -> Vec<u8> {
    std::fs::read(Path::new(env!("CARGO_MANIFEST_DIR")).join(GOOD_GGUF)).unwrap()
}

/// The good file rewritten by the crate's own GGUF writer without tensor `drop_tensor`
/// and metadata key `drop_key` (either may be "").
fn gguf_without(path: &Path, drop_tensor: &str, drop_key: &str) {
    use llm_anatomy::gguf::{Gguf, GgufWriter};
    let g = Gguf::open(&Path::new(env!("CARGO_MANIFEST_DIR")).join(GOOD_GGUF)).unwrap();
    let metadata = g
        .metadata()
        .iter()
        .filter(|(k, _)| k != drop_key)
        .cloned()
        .collect();
    let kept: Vec<_> = g
        .tensors()
        .iter()
        .filter(|t| t.name != drop_tensor)
        .collect();
    let infos = kept
        .iter()
        .map(|t| (t.name.clone(), t.dims.clone(), t.ty))
        .collect();
    let file = std::fs::File::create(path).unwrap();
    let mut w = GgufWriter::new(file, metadata, infos, g.alignment()).unwrap();
    for t in &kept {
        w.write_tensor(&t.name, g.data(t)).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn bad_gguf_models_are_refused_naming_the_file_and_tensor_or_key() {
    let dir = gguf_dir("cases");
    let good = good_gguf_bytes();
    let run = |path: &Path, needles: &[&str]| {
        let out = dir.join("out.safetensors");
        refused(
            &["logits", s(path), "--ids", IDS, "--out", s(&out)],
            needles,
        );
    };
    // Truncated: the header is whole, a tensor's bytes are not.
    let truncated = dir.join("truncated.gguf");
    std::fs::write(&truncated, &good[..good.len() * 2 / 3]).unwrap();
    run(&truncated, &["truncated.gguf", "tensor `", "truncated"]);
    std::fs::write(&truncated, &good[..20]).unwrap();
    run(&truncated, &["truncated.gguf"]);
    // Wrong magic.
    let magic = dir.join("magic.gguf");
    let mut bytes = good.clone();
    bytes[..4].copy_from_slice(b"GGML");
    std::fs::write(&magic, &bytes).unwrap();
    run(&magic, &["magic.gguf", "GGUF"]);
    // A tensor missing: named by its GGUF name and the Hugging Face role.
    let missing = dir.join("missing.gguf");
    gguf_without(&missing, "blk.1.attn_q.weight", "");
    run(
        &missing,
        &[
            "missing.gguf",
            "blk.1.attn_q.weight",
            "model.layers.1.self_attn.q_proj.weight",
            "missing",
        ],
    );
    // A size in the metadata that the tensors do not have: both shapes are named.
    let wrong_size = dir.join("wrong_size.gguf");
    gguf_without(&wrong_size, "", "qwen2.feed_forward_length");
    {
        use llm_anatomy::gguf::{Gguf, GgufWriter, MetaValue};
        let g = Gguf::open(&wrong_size).unwrap();
        let mut metadata = g.metadata().to_vec();
        metadata.push(("qwen2.feed_forward_length".into(), MetaValue::U32(128)));
        let infos = g
            .tensors()
            .iter()
            .map(|t| (t.name.clone(), t.dims.clone(), t.ty))
            .collect();
        let mut bytes = Vec::new();
        let mut w = GgufWriter::new(&mut bytes, metadata, infos, g.alignment()).unwrap();
        for t in g.tensors() {
            w.write_tensor(&t.name, g.data(t)).unwrap();
        }
        w.finish().unwrap();
        drop(g); // unmapped before the file it maps is rewritten
        std::fs::write(&wrong_size, bytes).unwrap();
    }
    run(
        &wrong_size,
        &[
            "wrong_size.gguf",
            "blk.0.ffn_gate.weight",
            "model.layers.0.mlp.gate_proj.weight",
            "[256, 128]",
            "[128, 128]",
        ],
    );
    // A metadata key missing.
    let no_key = dir.join("no_key.gguf");
    gguf_without(&no_key, "", "qwen2.block_count");
    run(&no_key, &["no_key.gguf", "qwen2.block_count", "missing"]);
    // A directory named x.gguf, and a FIFO (refused by kind, never opened for reading).
    let folder = dir.join("x.gguf");
    std::fs::create_dir_all(&folder).unwrap();
    run(&folder, &["x.gguf", "directory"]);
    let fifo = dir.join("pipe.gguf");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    run(&fifo, &["pipe.gguf", "FIFO"]);
    // The other model commands take the same path through qwen3::open.
    refused(
        &["router-stats", s(&missing), "--ids", IDS],
        &["blk.1.attn_q.weight"],
    );
    refused(
        &["generate", s(&magic), "--ids", IDS, "--max-new-tokens", "1"],
        &["magic.gguf"],
    );
    // Non-finite weights: a norm (F32, found at load) and a Q8_0 block's f16 scale (found
    // when the forward pass runs into it), named by their GGUF names and roles.
    let poisoned = |tensor: &str, bytes: &[u8], tag: &str| -> PathBuf {
        let g =
            llm_anatomy::gguf::Gguf::open(&Path::new(env!("CARGO_MANIFEST_DIR")).join(GOOD_GGUF))
                .unwrap();
        let t = g.tensor(tensor).unwrap();
        let at = (g.data_offset() + t.offset) as usize;
        let mut copy = good.clone();
        copy[at..at + bytes.len()].copy_from_slice(bytes);
        let path = dir.join(format!("{tag}.gguf"));
        std::fs::write(&path, copy).unwrap();
        path
    };
    let nan_norm = poisoned(
        "blk.1.attn_norm.weight",
        &f32::NAN.to_le_bytes(),
        "nan_norm",
    );
    run(
        &nan_norm,
        &[
            "blk.1.attn_norm.weight",
            "model.layers.1.input_layernorm.weight",
            "NaN",
        ],
    );
    let nan_scale = poisoned("blk.1.attn_k.weight", &[0x00, 0x7e], "nan_scale");
    run(
        &nan_scale,
        &[
            "blk.1.attn_k.weight",
            "model.layers.1.self_attn.k_proj.weight",
            "NaN",
        ],
    );
    // A GGUF without a vocabulary cannot tokenise text: the key is named.
    refused(
        &["glitch", "--model", GOOD_GGUF],
        &["q8_0.gguf", "tokenizer.ggml.model"],
    );
}

#[test]
fn params_quant_refuses_unknown_schemes_and_a_config_without_a_context() {
    let dir = copy_good("quant");
    let config = dir.join("config.json");
    refused(
        &["params", s(&config), "--quant", "q3_k_xl"],
        &["--quant", "q3_k_xl", "q4_k_m"],
    );
    let mut cfg: Value = serde_json::from_slice(&std::fs::read(&config).unwrap()).unwrap();
    cfg.as_object_mut()
        .unwrap()
        .remove("max_position_embeddings");
    std::fs::write(&config, cfg.to_string()).unwrap();
    refused(
        &["params", s(&config), "--quant", "q4_k_m"],
        &["config.json", "max_position_embeddings"],
    );
    // Without --quant the same config is still counted.
    let (code, out, err) = run_within(&["params", s(&config)], 30);
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains("total"), "{out}");
}

// ---- Outputs of `train`: the log goes through the same rules as every output.

/// A corpus of eight short documents and the `train` arguments that run two quick steps
/// of the repository's small config into `out`.
fn quick_train(tag: &str) -> (Scratch, Vec<String>) {
    let dir = scratch(&format!("bad-train-{tag}"));
    std::fs::create_dir_all(dir.join("data")).unwrap();
    for i in 0..8 {
        let text = format!("the quick brown fox jumps over the lazy dog {i} ").repeat(20);
        std::fs::write(dir.join("data").join(format!("d{i}.txt")), text).unwrap();
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (config, vocab, data) = (
        root.join("data/train/qwen3-moe-anatomy.json"),
        root.join("data/qwen.tiktoken"),
        dir.join("data"),
    );
    let args = [
        "train",
        "--config",
        s(&config),
        "--vocab",
        s(&vocab),
        "--data",
        s(&data),
        "--steps",
        "2",
        "--batch-size",
        "1",
        "--seq-len",
        "16",
        "--heldout-fraction",
        "0.3",
        "--quiet",
    ]
    .map(String::from)
    .to_vec();
    (dir, args)
}

fn with_out<'a>(args: &'a [String], extra: &[&'a str]) -> Vec<&'a str> {
    let mut v: Vec<&str> = args.iter().map(String::as_str).collect();
    v.extend_from_slice(extra);
    v
}

#[cfg(unix)]
#[test]
fn the_training_log_is_never_a_link_fifo_or_device() {
    let (dir, args) = quick_train("log");
    let out = dir.join("out");
    std::fs::create_dir_all(&out).unwrap();
    let log = out.join("train_log.jsonl");
    let target = dir.join("precious.txt");
    std::fs::write(&target, b"keep").unwrap();
    std::os::unix::fs::symlink(&target, &log).unwrap();
    refused(
        &with_out(&args, &["--out", s(&out)]),
        &["train_log.jsonl", "symbolic link"],
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"keep", "target truncated");
    // A FIFO nobody reads: refused at once, not a hang.
    std::fs::remove_file(&log).unwrap();
    assert!(Command::new("mkfifo").arg(&log).status().unwrap().success());
    refused(
        &with_out(&args, &["--out", s(&out)]),
        &["train_log.jsonl", "FIFO"],
    );
    // A good run, then a resume that finds its log replaced by a link.
    std::fs::remove_file(&log).unwrap();
    let (code, _, err) = run_within(
        &with_out(&args, &["--out", s(&out), "--stop-after", "1"]),
        120,
    );
    assert_eq!(code, Some(0), "{err}");
    std::fs::remove_file(&log).unwrap();
    std::os::unix::fs::symlink(&target, &log).unwrap();
    refused(
        &[
            "train",
            "--out",
            s(&out),
            "--resume",
            "--quiet",
            "--data",
            s(&dir.join("data")),
        ],
        &["train_log.jsonl", "symbolic link"],
    );
    assert_eq!(
        std::fs::read(&target).unwrap(),
        b"keep",
        "target appended to"
    );
}

#[cfg(unix)]
#[test]
fn a_bad_output_directory_is_bad_input() {
    let (dir, args) = quick_train("outdir");
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    refused(
        &with_out(&args, &["--out", s(&file)]),
        &["a-file", "not a directory"],
    );
    refused(
        &with_out(&args, &["--out", "/dev/null"]),
        &["/dev/null", "not a directory"],
    );
    let below = file.join("out");
    refused(
        &with_out(&args, &["--out", s(&below)]),
        &["a-file", "not a directory"],
    );
    let good = copy_good("outdir-logits");
    refused(
        &[
            "logits",
            s(&good),
            "--ids",
            IDS,
            "--out",
            "/dev/null/out.safetensors",
        ],
        &["/dev/null", "not a directory"],
    );
}

#[test]
fn an_output_name_of_250_bytes_is_written() {
    let dir = copy_good("longname");
    let out = dir.join("a".repeat(250));
    let (code, _, err) = run_within(&["logits", s(&dir), "--ids", IDS, "--out", s(&out)], 30);
    assert_eq!(code, Some(0), "{err}");
    assert!(std::fs::metadata(&out).unwrap().len() > 1000);
}

// ---- Counts are checked before they size a loop or an allocation.

/// The MoE GGUF fixture rewritten with metadata `key` set to `value`.
fn gguf_with(path: &Path, key: &str, value: llm_anatomy::gguf::MetaValue) {
    gguf_with_keys(path, &[(key, value)]);
}

#[test]
fn a_gguf_block_count_is_checked_before_the_layers_are_listed() {
    use llm_anatomy::gguf::MetaValue;
    let dir = gguf_dir("layers");
    let file = dir.join("deep.gguf");
    gguf_with(&file, "qwen3moe.block_count", MetaValue::U32(u32::MAX));
    let (f, out) = (s(&file), dir.join("out.safetensors"));
    let needles = [
        "deep.gguf",
        "qwen3moe.block_count",
        "above the limit of 16384",
    ];
    refused(&["logits", f, "--ids", IDS, "--out", s(&out)], &needles);
    refused(
        &["generate", f, "--ids", IDS, "--max-new-tokens", "1"],
        &needles,
    );
    refused(&["router-stats", f, "--ids", IDS], &needles);
    refused(&["bench", f, "--reps", "1", "--json"], &needles);
}

#[test]
fn counts_that_drive_loops_are_bounded_up_front() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (vocab, tiny) = (
        root.join("data/qwen.tiktoken"),
        root.join("data/tiny-qwen3-moe"),
    );
    let t = s(&tiny);
    for trials in ["18446744073709551615", "1000000000000"] {
        refused(
            &["lost-in-middle", t, "--trials", trials, "--json"],
            &["--trials", "above the limit of 1000"],
        );
    }
    refused(
        &["lost-in-middle", t, "--words", "1000000000", "--json"],
        &["--words 1000000000", "at least one token"],
    );
    refused(
        &["bench", t, "--reps", "1000000000000", "--json"],
        &["--reps", "above the limit of 1000"],
    );
    refused(
        &[
            "glitch",
            "--vocab",
            s(&vocab),
            "--model",
            t,
            "--repeat",
            "100000",
        ],
        &["--repeat", "above the limit of 10000"],
    );
    let (dir, args) = quick_train("eval");
    let out = dir.join("out");
    refused(
        &with_out(
            &args,
            &["--out", s(&out), "--eval-batches", "18446744073709551615"],
        ),
        &["--eval-batches", "above the limit of 10000"],
    );
}

#[test]
fn the_learning_rate_floor_is_a_fraction_of_the_peak() {
    let (dir, args) = quick_train("minlr");
    let out = dir.join("out");
    for bad in ["=5", "=1.5", "=-0.1", "=NaN"] {
        let flag = format!("--min-lr-rate{bad}");
        refused(
            &with_out(&args, &["--out", s(&out), &flag]),
            &["--min-lr-rate"],
        );
    }
    let err = refused(
        &with_out(&args, &["--out", s(&out), "--min-lr-rate", "5"]),
        &["[0, 1]"],
    );
    assert!(err.contains("got 5"), "{err}");
}

// ---- The thinking budget finds `</think>` in the model's own vocabulary.

/// The good fixture with a small tokenizer.json (data/synthetic-glitch's, 1003 ids) plus
/// the added tokens `extra` as (id, content).
fn with_tokenizer(tag: &str, extra: &[(u32, &str)]) -> Scratch {
    let dir = copy_good(tag);
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/synthetic-glitch/tokenizer.json");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(src).unwrap()).unwrap();
    let added = doc["added_tokens"].as_array_mut().unwrap();
    for &(id, content) in extra {
        let mut t = added[0].clone();
        t["id"] = json!(id);
        t["content"] = json!(content);
        t["special"] = json!(false);
        added.push(t);
    }
    std::fs::write(dir.join("tokenizer.json"), doc.to_string()).unwrap();
    dir
}

#[test]
fn the_thinking_budget_looks_up_think_tags_in_the_models_vocabulary() {
    let args = |d: &Path| {
        [
            "generate",
            s(d),
            "--ids",
            IDS,
            "--max-new-tokens",
            "4",
            "--thinking-budget",
            "2",
        ]
        .map(String::from)
    };
    let plain = with_tokenizer("think-none", &[]);
    let a = args(&plain);
    refused(
        &a.each_ref().map(String::as_str),
        &["tokenizer.json", "no `<think>` token", "reasoning model"],
    );
    // Tags at ids of their own (not Qwen3's 151667 / 151668): the budget is set up.
    let tagged = with_tokenizer("think-own", &[(1003, "<think>"), (1004, "</think>")]);
    let a = args(&tagged);
    let (code, _, err) = run_within(&a.each_ref().map(String::as_str), 30);
    assert_eq!(code, Some(0), "{err}");
}

// ---- `quantize` never writes an infinity (or a zeroed row) from finite weights.

/// The bf16 quantize fixture with weight `index` of `tensor` set to `value` (rounded to
/// bf16 by truncation).
fn bf16_checkpoint(tag: &str, tensor: &str, index: usize, value: f32) -> Scratch {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/quantize/hf");
    let dir = scratch(&format!("bad-quant-{tag}"));
    std::fs::copy(src.join("config.json"), dir.join("config.json")).unwrap();
    let file = dir.join("model.safetensors");
    std::fs::copy(src.join("model.safetensors"), &file).unwrap();
    let (header, mut data) = split(&file);
    assert_eq!(header[tensor]["dtype"], "BF16");
    let at = header[tensor]["data_offsets"][0].as_u64().unwrap() as usize + 2 * index;
    data[at..at + 2].copy_from_slice(&((value.to_bits() >> 16) as u16).to_le_bytes());
    join(&file, &header, &data);
    dir
}

#[test]
fn quantize_refuses_weights_its_format_cannot_hold() {
    let q = "model.layers.1.self_attn.q_proj.weight";
    let cases: [(&str, f32, &str, &[&str]); 5] = [
        ("f16", 70000.0, "f16", &["65504"]),
        ("q8_0", 1e38, "q8_0", &["8319008"]),
        ("q4_k_m", 1e38, "q4_K", &["about"]),
        ("q4_k_m", -1e7, "q4_K", &["about"]),
        ("q6_k", 1e38, "q6_K", &["about"]),
    ];
    for (i, (ftype, value, ty, extra)) in cases.into_iter().enumerate() {
        let dir = bf16_checkpoint(&format!("{ftype}-{i}"), q, 5, value);
        let out = dir.join("out.gguf");
        let mut needles = vec![q, "row 0", "column 5", ty];
        needles.extend_from_slice(extra);
        refused(
            &["quantize", s(&dir), "--type", ftype, "--out", s(&out)],
            &needles,
        );
        assert!(!out.exists(), "{ftype}: an output was written");
    }
    // f32::MAX (an f32 checkpoint) rounds to infinity in bf16.
    let dir = copy_good("quant-bf16");
    let t = "model.layers.0.self_attn.q_proj.weight";
    poison(&dir, t, 3, f32::MAX);
    let out = dir.join("out.gguf");
    refused(
        &["quantize", s(&dir), "--type", "bf16", "--out", s(&out)],
        &[t, "row 0", "column 3", "bf16", "3.38953"],
    );
}

#[test]
fn figures_into_a_file_or_a_device_is_bad_input() {
    let dir = scratch("figs");
    let file = dir.join("a-file");
    std::fs::write(&file, b"x").unwrap();
    refused(
        &["figures", "--out", s(&file)],
        &["a-file", "not a directory"],
    );
    refused(
        &["figures", "--out", "/dev/null"],
        &["/dev/null", "not a directory"],
    );
    refused(
        &["figures", "--out", s(&file.join("below"))],
        &["a-file", "not a directory"],
    );
}

/// A GGUF header of `n` one-byte values under short keys.
fn gguf_of_tiny_keys(path: &Path, n: u64) {
    let mut b = b"GGUF".to_vec();
    b.extend(3u32.to_le_bytes());
    b.extend(0u64.to_le_bytes());
    b.extend(n.to_le_bytes());
    for i in 0..n {
        let key = format!("{i:x}");
        b.extend((key.len() as u64).to_le_bytes());
        b.extend(key.as_bytes());
        b.extend(0u32.to_le_bytes());
        b.push(1);
    }
    std::fs::write(path, b).unwrap();
}

#[test]
fn a_gguf_header_of_tiny_keys_is_refused_before_it_fills_memory() {
    // 2.5 M keys in 46 MB would parse to about 220 MB: past the header's size plus the
    // parser's 128 MiB floor, so refused as it is read (unbounded, 2^24 such keys in
    // 285 MB took 3 GB).
    let dir = scratch("tiny-keys");
    let file = dir.join("keys.gguf");
    gguf_of_tiny_keys(&file, 2_500_000);
    let out = dir.join("logits.safetensors");
    refused(
        &["logits", s(&file), "--ids", IDS, "--out", s(&out)],
        &["keys.gguf", "in memory"],
    );
}

/// The MoE GGUF fixture rewritten with each of `keys` set (replaced, or added when absent).
fn gguf_with_keys(path: &Path, keys: &[(&str, llm_anatomy::gguf::MetaValue)]) {
    use llm_anatomy::gguf::{Gguf, GgufWriter};
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/gguf_models/moe/q8_0.gguf");
    let g = Gguf::open(&src).unwrap();
    let mut metadata: Vec<_> = g
        .metadata()
        .iter()
        .filter(|(k, _)| !keys.iter().any(|(key, _)| key == k))
        .cloned()
        .collect();
    metadata.extend(keys.iter().map(|(k, v)| (k.to_string(), v.clone())));
    let infos = g
        .tensors()
        .iter()
        .map(|t| (t.name.clone(), t.dims.clone(), t.ty))
        .collect();
    let file = std::fs::File::create(path).unwrap();
    let mut w = GgufWriter::new(file, metadata, infos, g.alignment()).unwrap();
    for t in g.tensors() {
        w.write_tensor(&t.name, g.data(t)).unwrap();
    }
    w.finish().unwrap();
}

#[test]
fn a_rope_table_that_overflows_names_the_gguf_keys_that_set_it() {
    use llm_anatomy::gguf::MetaValue;
    let dir = gguf_dir("rope-table");
    let file = dir.join("tiny-factor.gguf");
    // Each value is finite and positive; together they make YaRN's inv_freq 1e34 or more.
    gguf_with_keys(
        &file,
        &[
            ("qwen3moe.rope.scaling.type", MetaValue::Str("yarn".into())),
            ("qwen3moe.rope.scaling.factor", MetaValue::F32(1e-38)),
            (
                "qwen3moe.rope.scaling.original_context_length",
                MetaValue::U32(16),
            ),
        ],
    );
    let (f, out) = (s(&file), dir.join("out.safetensors"));
    let needles = [
        "tiny-factor.gguf",
        "qwen3moe.rope.scaling.factor = 1e-38",
        "inv_freq",
    ];
    refused(&["logits", f, "--ids", IDS, "--out", s(&out)], &needles);
    refused(&["params", f], &needles);
}
