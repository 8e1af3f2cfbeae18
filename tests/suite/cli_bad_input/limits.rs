//! Limits, special files and messages: counts checked before they size anything, FIFOs,
//! devices and links never read or written through, and errors that say what is wrong.

use super::*;

#[test]
fn sizes_from_flags_and_configs_are_checked_before_they_size_anything() {
    refused(
        &[
            "rope",
            "--head-dim",
            "4611686018427387904",
            "--theta",
            "10000",
            "--json",
        ],
        &["head_dim", "above the limit"],
    );
    for (field, value) in [("head_dim", 1u64 << 40), ("num_hidden_layers", 1 << 40)] {
        let dir = copy_good(&format!("size-{field}"));
        edit_config(&dir, |c| c[field] = json!(value));
        logits(&dir, IDS, &["config.json", field, "above the limit"]);
    }
    let dir = copy_good("size-ids");
    logits(&dir, "0-4294967295", &["id list", "above the limit"]);
    let d = s(&dir);
    refused(
        &[
            "generate",
            d,
            "--ids",
            IDS,
            "--max-new-tokens",
            "18446744073709551615",
        ],
        &["max_position_embeddings"],
    );
    refused(
        &[
            "bench",
            d,
            "--prompt-len",
            "1099511627776",
            "--gen",
            "1",
            "--json",
        ],
        &["max_position_embeddings"],
    );
    refused(
        &["bench", d, "--threads", "1000000", "--json"],
        &["--threads", "above the limit"],
    );
    // A count flag sizes no allocation.
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let (vocab, tiny) = (
        root.join("data/qwen.tiktoken"),
        root.join("data/tiny-qwen3-moe"),
    );
    let (code, _, err) = run_within(
        &[
            "glitch",
            "--vocab",
            s(&vocab),
            "--model",
            s(&tiny),
            "--top-k",
            "2",
            "--repeat",
            "3",
            "--json",
        ],
        60,
    );
    assert_eq!(code, Some(0), "{err}");
    // A max_position_embeddings the limits allow but the machine cannot hold.
    let dir = copy_good("size-mem");
    edit_config(&dir, |c| c["max_position_embeddings"] = json!(1u64 << 32));
    refused(
        &[
            "generate",
            s(&dir),
            "--ids",
            IDS,
            "--max-new-tokens",
            "4294967000",
        ],
        &["memory"],
    );
}

#[test]
fn parameter_arithmetic_never_wraps_or_loops_for_long() {
    let dir = copy_good("params");
    let base: Value =
        serde_json::from_slice(&std::fs::read(dir.join("config.json")).unwrap()).unwrap();
    let params = |edit: &dyn Fn(&mut Value), needles: &[&str]| {
        let mut cfg = base.clone();
        edit(&mut cfg);
        let path = dir.join("params.json");
        std::fs::write(&path, cfg.to_string()).unwrap();
        refused(&["params", s(&path), "--json"], needles)
    };
    params(
        &|c| c["hidden_size"] = json!(1u64 << 62),
        &["hidden_size", "above the limit"],
    );
    params(
        &|c| c["num_hidden_layers"] = json!(1u64 << 40),
        &["num_hidden_layers"],
    );
    // Each field within its limit, the product past u64: refused, not wrapped.
    params(
        &|c| {
            c["hidden_size"] = json!(1 << 20);
            c["moe_intermediate_size"] = json!(1 << 22);
            c["num_local_experts"] = json!(1 << 16);
            c["num_experts"] = json!(1 << 16);
            c["num_hidden_layers"] = json!(1 << 14);
        },
        &["parameter count", "above the limit"],
    );
}

#[cfg(unix)]
#[test]
fn fifos_devices_and_directories_are_refused_not_read() {
    let dir = copy_good("fifo");
    let fifo = dir.join("config.fifo");
    let made = Command::new("mkfifo").arg(&fifo).status().expect("mkfifo");
    assert!(made.success());
    refused(&["params", s(&fifo)], &["config.fifo", "FIFO"]);
    refused(&["tokenize", "--vocab", s(&fifo), "hi"], &["FIFO"]);
    refused(&["chat-template", "--messages", s(&fifo)], &["FIFO"]);
    refused(&["params", "/dev/zero"], &["/dev/zero", "character device"]);
    refused(
        &["tokenize", "--vocab", "/dev/zero", "hi"],
        &["character device"],
    );
    refused(
        &["chat-template", "--messages", "/dev/zero"],
        &["character device"],
    );
    refused(&["params", s(&dir)], &["directory"]);
    // config.json itself a FIFO: the model commands refuse it too.
    std::fs::remove_file(dir.join("config.json")).unwrap();
    std::fs::rename(&fifo, dir.join("config.json")).unwrap();
    logits(&dir, IDS, &["config.json", "FIFO"]);
}

#[test]
fn a_tokenizer_with_200k_added_tokens_loads_quickly() {
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer/small-tokenizer.json");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(src).unwrap()).unwrap();
    let base = doc["model"]["vocab"].as_object().unwrap().len();
    let added: Vec<Value> = (0..200_000)
        .map(|i| json!({"id": base + 1000 + i, "content": format!("<extra_{i}>"), "special": true}))
        .collect();
    doc["added_tokens"] = Value::Array(added);
    let dir = copy_good("added");
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    let (code, out, err) = run_within(
        &[
            "tokenize",
            "--vocab",
            s(&path),
            "--json",
            "a<extra_199999>b",
        ],
        30,
    );
    assert_eq!(code, Some(0), "{err}");
    assert!(out.contains(&(base + 1000 + 199_999).to_string()), "{out}");
}

#[test]
fn rope_factors_that_give_non_finite_tables_are_refused() {
    for scaling in [
        r#"{"rope_type":"linear","factor":0}"#,
        r#"{"rope_type":"linear","factor":-2}"#,
        r#"{"rope_type":"linear","factor":1e-300}"#,
        r#"{"rope_type":"linear","factor":1e300}"#,
        r#"{"rope_type":"yarn","factor":4,"original_max_position_embeddings":16,"attention_factor":1e300}"#,
        r#"{"rope_type":"yarn","factor":4,"original_max_position_embeddings":16,"attention_factor":0}"#,
        r#"{"rope_type":"longrope","factor":4,"original_max_position_embeddings":16,"short_factor":[1,1,1,1],"long_factor":[0,1,1,1]}"#,
        r#"{"rope_type":"longrope","factor":4,"original_max_position_embeddings":16,"short_factor":[1e-300,1,1,1],"long_factor":[1,1,1,1]}"#,
        r#"{"rope_type":"proportional","factor":1e-300}"#,
        r#"{"rope_type":"llama3","factor":8,"low_freq_factor":1,"high_freq_factor":1,"original_max_position_embeddings":16}"#,
    ] {
        refused(
            &[
                "rope",
                "--head-dim",
                "8",
                "--theta",
                "10000",
                "--scaling",
                scaling,
                "--max-position-embeddings",
                "64",
                "--json",
            ],
            &["anatomy rope"],
        );
    }
    refused(
        &[
            "rope",
            "--head-dim",
            "8",
            "--theta",
            "10000",
            "--scaling",
            r#"{"rope_type":"dynamic","factor":4}"#,
            "--max-position-embeddings",
            "0",
            "--json",
        ],
        &["max_position_embeddings"],
    );
    let dir = copy_good("rope-nan");
    edit_config(&dir, |c| {
        c["rope_parameters"] = json!({"rope_type": "linear", "factor": 1e-300, "rope_theta": 1e4})
    });
    logits(&dir, IDS, &["config.json", "inv_freq"]);
}

#[test]
fn a_vanishing_temperature_is_greedy_and_bad_sampling_is_refused() {
    let dir = copy_good("temp");
    let d = s(&dir);
    let greedy = run_within(
        &[
            "generate",
            d,
            "--ids",
            IDS,
            "--max-new-tokens",
            "4",
            "--json",
        ],
        30,
    );
    let tiny = run_within(
        &[
            "generate",
            d,
            "--ids",
            IDS,
            "--max-new-tokens",
            "4",
            "--json",
            "--temperature",
            "1e-40",
        ],
        30,
    );
    assert_eq!(greedy.0, Some(0), "{}", greedy.2);
    assert_eq!(tiny.0, Some(0), "{}", tiny.2);
    assert_eq!(greedy.1, tiny.1);
    for (flag, value) in [
        ("--temperature", "NaN"),
        ("--temperature", "inf"),
        ("--top-p", "NaN"),
    ] {
        let mut args = vec![
            "generate",
            d,
            "--ids",
            IDS,
            "--max-new-tokens",
            "2",
            "--temperature",
            "1",
        ];
        args.extend([flag, value]);
        refused(&args, &[]);
    }
}

#[test]
fn hugging_face_semantics_split_duplicates_and_ids() {
    // A Split pattern that does not cover the text: the rest is kept, as in `tokenizers`.
    let src =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer/small-tokenizer.json");
    let mut doc: Value = serde_json::from_slice(&std::fs::read(src).unwrap()).unwrap();
    doc["pre_tokenizer"] = json!({"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": "[a-z]+"}, "behavior": "Isolated", "invert": false},
        {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": false, "use_regex": false}]});
    let dir = copy_good("split");
    let path = dir.join("tokenizer.json");
    std::fs::write(&path, doc.to_string()).unwrap();
    let (code, out, err) = run_within(&["tokenize", "--vocab", s(&path), "--json", "ab 12!cd"], 30);
    assert_eq!(code, Some(0), "{err}");
    let ids: Value = serde_json::from_str(&out).unwrap();
    let ids: Vec<String> = ids["ids"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.to_string())
        .collect();
    let (code, text, err) = run_within(&["detokenize", "--vocab", s(&path), &ids.join(",")], 30);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(text.trim_end_matches('\n'), "ab 12!cd");

    // The same tensor twice in one header: invalid, not "the last one wins".
    let dir = copy_good("dup");
    let file = dir.join("model.safetensors");
    let bytes = std::fs::read(&file).unwrap();
    let n = u64::from_le_bytes(bytes[..8].try_into().unwrap()) as usize;
    let header = std::str::from_utf8(&bytes[8..8 + n]).unwrap().trim_end();
    let first = header.find("\"model.norm.weight\"").unwrap();
    let entry_end = first + header[first..].find('}').unwrap() + 1;
    let entry = &header[first..entry_end];
    let doubled = format!("{},{}}}", &header[..header.len() - 1], entry);
    let mut out = (doubled.len() as u64).to_le_bytes().to_vec();
    out.extend(doubled.as_bytes());
    out.extend_from_slice(&bytes[8 + n..]);
    std::fs::write(&file, out).unwrap();
    logits(&dir, IDS, &["model.norm.weight", "appears again"]);

    // eos_token_id past 32 bits is refused, not truncated to 576.
    let dir = copy_good("eos");
    edit_config(&dir, |c| c["eos_token_id"] = json!((1u64 << 32) + 576));
    logits(&dir, IDS, &["eos_token_id", "above the limit"]);
}

#[cfg(unix)]
#[test]
fn outputs_never_replace_devices_fifos_or_links() {
    use std::os::unix::fs::FileTypeExt;
    let dir = copy_good("out");
    let d = s(&dir);
    // A character device is written through and stays a device.
    let (code, _, err) = run_within(&["logits", d, "--ids", IDS, "--out", "/dev/null"], 30);
    assert_eq!(code, Some(0), "{err}");
    assert!(
        std::fs::metadata("/dev/null")
            .unwrap()
            .file_type()
            .is_char_device()
    );
    if Path::new("/dev/full").exists() {
        let (code, _, err) = run_within(&["logits", d, "--ids", IDS, "--out", "/dev/full"], 30);
        assert_eq!(code, Some(1), "{err}");
        assert!(
            std::fs::metadata("/dev/full")
                .unwrap()
                .file_type()
                .is_char_device()
        );
    }
    // A FIFO nobody reads: refused at once instead of blocking.
    let fifo = dir.join("out.fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    refused(
        &["logits", d, "--ids", IDS, "--out", s(&fifo)],
        &["no process is reading"],
    );
    assert!(std::fs::metadata(&fifo).unwrap().file_type().is_fifo());
    // A symbolic link: neither it nor its target is replaced.
    let target = dir.join("target.bin");
    std::fs::write(&target, b"keep").unwrap();
    let link = dir.join("link.safetensors");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    refused(
        &["logits", d, "--ids", IDS, "--out", s(&link)],
        &["symbolic link"],
    );
    assert_eq!(std::fs::read(&target).unwrap(), b"keep");
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    // A directory: refused.
    refused(&["logits", d, "--ids", IDS, "--out", d], &["directory"]);
    // A regular file: replaced.
    let out = dir.join("out.safetensors");
    std::fs::write(&out, b"old").unwrap();
    let (code, _, err) = run_within(&["logits", d, "--ids", IDS, "--out", s(&out)], 30);
    assert_eq!(code, Some(0), "{err}");
    assert!(std::fs::read(&out).unwrap().len() > 1000);
}

#[test]
fn messages_say_what_is_wrong_and_stay_short() {
    // model.safetensors a directory, a dangling link, a loop.
    let dir = copy_good("msg-dir");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    std::fs::create_dir(dir.join("model.safetensors")).unwrap();
    logits(&dir, IDS, &["model.safetensors", "is a directory"]);
    #[cfg(unix)]
    {
        let dir = copy_good("msg-dangling");
        std::fs::remove_file(dir.join("model.safetensors")).unwrap();
        std::os::unix::fs::symlink(dir.join("gone"), dir.join("model.safetensors")).unwrap();
        logits(&dir, IDS, &["model.safetensors", "does not exist"]);
        let dir = copy_good("msg-loop");
        std::fs::remove_file(dir.join("model.safetensors")).unwrap();
        std::os::unix::fs::symlink(dir.join("model.safetensors"), dir.join("model.safetensors"))
            .unwrap();
        logits(&dir, IDS, &["model.safetensors", "loop"]);
    }
    // A model "directory" that is a device.
    #[cfg(unix)]
    refused(
        &["logits", "/dev/zero", "--ids", IDS, "--out", "/dev/null"],
        &["character device, not a model directory"],
    );
    // A shard named ".".
    let dir = copy_good("msg-dot");
    std::fs::remove_file(dir.join("model.safetensors")).unwrap();
    let index = json!({"weight_map": {"model.norm.weight": "."}});
    std::fs::write(dir.join("model.safetensors.index.json"), index.to_string()).unwrap();
    logits(&dir, IDS, &["plain file names"]);
    // --ids=-1 names the sign.
    let dir = copy_good("msg-ids");
    let (d, o) = (s(&dir), dir.join("o.safetensors"));
    refused(
        &["logits", d, "--ids=-1", "--out", s(&o)],
        &["\"-1\" is not a token id"],
    );
    // A huge --max-new-tokens with a thinking budget names the context, not "capacity 0".
    let err = refused(
        &[
            "generate",
            d,
            "--ids",
            IDS,
            "--max-new-tokens",
            "18446744073709551615",
            "--thinking-budget",
            "4",
        ],
        &["max_position_embeddings"],
    );
    assert!(!err.contains("capacity 0"), "{err}");
    // A 10 MB vocabulary line is not echoed whole.
    let vocab = dir.join("long.tiktoken");
    std::fs::write(&vocab, "A".repeat(10_000_000) + " 0\n").unwrap();
    refused(
        &["tokenize", "--vocab", s(&vocab), "hi"],
        &["long.tiktoken"],
    );
}
