//! Chapter 4 oracles: our byte-level BPE against tiktoken 0.14 and Hugging Face
//! tokenizers 0.23 on the committed cases (scripts/gen_tokenizer_fixtures.py), the
//! round-trip property, the fast merge against the reference, and bad input.

use llm_anatomy::tokenizer::{Tokenizer, bpe, glitch, safe_chunks};
use proptest::prelude::*;
use serde_json::Value;
use std::path::Path;
use std::sync::OnceLock;

fn fixture(name: &str) -> Value {
    let p = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/tokenizer")
        .join(name);
    serde_json::from_slice(&std::fs::read(&p).unwrap()).unwrap()
}

/// The Qwen vocabulary without NFC: tiktoken's raw behaviour.
fn qwen() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let mut t = Tokenizer::qwen().unwrap();
        t.nfc = false;
        t
    })
}

/// The Qwen vocabulary as it loads: NFC first, as Qwen's own tokenizers do.
fn qwen_nfc() -> &'static Tokenizer {
    static T: OnceLock<Tokenizer> = OnceLock::new();
    T.get_or_init(|| {
        let t = Tokenizer::qwen().unwrap();
        assert!(t.nfc, "the Qwen vocabulary normalises to NFC by default");
        t
    })
}

fn ids(v: &Value) -> Vec<u32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as u32)
        .collect()
}

fn cases(name: &str) -> Vec<Value> {
    fixture(name)["cases"].as_array().unwrap().clone()
}

/// Every mismatch, so one failing run shows them all.
fn mismatches(tok: &Tokenizer, cases: &[Value], key: &str) -> Vec<String> {
    cases
        .iter()
        .filter_map(|c| {
            let text = c["text"].as_str().unwrap();
            let want = ids(&c[key]);
            let got = tok.encode(text).unwrap();
            (got != want).then(|| format!("{text:?}: ours {got:?}, expected {want:?}"))
        })
        .collect()
}

#[test]
fn fixtures_cover_the_issue() {
    let all = cases("encode.json");
    assert!(all.len() >= 200, "{} cases", all.len());
    for cat in [
        "english",
        "chinese",
        "japanese",
        "korean",
        "russian",
        "arabic",
        "code",
        "numbers",
        "emoji",
        "whitespace",
        "glitch",
        "special",
        "near-miss",
        "random",
        "non-nfc",
    ] {
        assert!(
            all.iter().filter(|c| c["category"] == cat).count() >= 3,
            "category {cat}"
        );
    }
    let meta = fixture("encode.json");
    assert_eq!(meta["versions"]["tiktoken"], "0.14.0");
    let sha = meta["vocab_sha256"].as_str().unwrap();
    assert!(sha.starts_with("b2b1b8dfb5cc5f02"), "{sha}");
}

#[test]
fn encode_equals_tiktoken_on_every_case() {
    let bad = mismatches(qwen(), &cases("encode.json"), "ids");
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn encode_with_nfc_equals_hugging_face_on_every_case() {
    let all = cases("encode.json");
    let bad = mismatches(qwen_nfc(), &all, "hf_ids");
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
    // And the two libraries differ exactly on the strings that are not NFC.
    for c in &all {
        let differ = c["ids"] != c["hf_ids"];
        let text = c["text"].as_str().unwrap();
        use unicode_normalization::UnicodeNormalization;
        let is_nfc = text.nfc().collect::<String>() == text;
        assert_eq!(differ, !is_nfc, "{text:?}");
    }
}

#[test]
fn tokenizer_json_loader_equals_hugging_face() {
    let path =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer/small-tokenizer.json");
    let tok = Tokenizer::from_file(&path).unwrap();
    assert!(tok.nfc, "the fixture's normalizer is NFC");
    assert_eq!(tok.vocab.n_tokens(), 4096);
    assert_eq!(tok.added.len(), 26);
    assert!(!tok.vocab.whole_piece_first, "ignore_merges is false");
    let bad = mismatches(&tok, &cases("small-encode.json"), "ids");
    assert!(
        bad.is_empty(),
        "{} mismatches:\n{}",
        bad.len(),
        bad.join("\n")
    );
}

#[test]
fn decode_equals_tiktoken_and_hugging_face() {
    for c in cases("decode.json") {
        let id_list = ids(&c["ids"]);
        let bytes: Vec<u8> = c["bytes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| b.as_u64().unwrap() as u8)
            .collect();
        assert_eq!(qwen().decode_bytes(&id_list).unwrap(), bytes, "{id_list:?}");
        let text = qwen().decode(&id_list).unwrap();
        assert_eq!(text, c["text"].as_str().unwrap(), "{id_list:?}");
        assert_eq!(text, c["hf_text"].as_str().unwrap(), "{id_list:?}");
    }
}

#[test]
fn special_tokens_are_single_ids_and_near_misses_are_not() {
    let t = qwen();
    for (content, id, _) in llm_anatomy::tokenizer::special::QWEN3_ADDED_TOKENS {
        assert_eq!(t.encode(content).unwrap(), vec![*id], "{content}");
        assert_eq!(t.decode(&[*id]).unwrap(), *content);
        assert!(
            t.encode_ordinary(content).unwrap().len() > 1,
            "{content} as plain text"
        );
    }
    for near in [
        "<|im_start|",
        "<|IM_START|>",
        "<think >",
        "</think",
        "<|im_start >",
    ] {
        let got = t.encode(near).unwrap();
        assert!(got.iter().all(|&i| i < 151643), "{near}: {got:?}");
    }
}

#[test]
fn glitch_ids_and_literal_scan_match_python() {
    let t = qwen();
    assert!(glitch::check_glitch_ids(t).iter().all(|c| c.ok));
    let expected = ids(&fixture("vocab.json")["literal_scan_ids"]);
    let got: Vec<u32> = glitch::literal_scan(t, 20).iter().map(|h| h.id).collect();
    assert_eq!(got, expected);
    assert_eq!(got.len(), 410);
}

#[test]
fn every_token_of_the_vocabulary_is_reached_by_its_merges() {
    // With the whole-piece shortcut off, BPE on a token's own bytes gives back that token:
    // the vocabulary is a proper merge tree (no token needs the shortcut), which is why
    // Hugging Face (merges only) and tiktoken (shortcut first) agree.
    let mut v = qwen().vocab.clone();
    v.whole_piece_first = false;
    let mut scratch = bpe::Bpe::default();
    let mut unreachable = Vec::new();
    for (id, bytes) in qwen().vocab.iter() {
        let mut out = Vec::new();
        scratch.encode_piece(&v, bytes, &mut out);
        if out != [id] {
            unreachable.push(id);
        }
    }
    assert!(
        unreachable.is_empty(),
        "{} tokens not reached by merges: {:?}",
        unreachable.len(),
        &unreachable[..unreachable.len().min(20)]
    );
}

#[test]
fn fast_merge_equals_reference() {
    let t = qwen();
    let mut v = t.vocab.clone();
    v.whole_piece_first = false;
    let mut scratch = bpe::Bpe::default();
    let texts: Vec<String> = cases("encode.json")
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect();
    let mut long = texts.concat();
    long.push_str(&"ab".repeat(500));
    long.push_str(&" ".repeat(300));
    long.push_str(&"法战组合".repeat(100));
    let mut pieces: Vec<&[u8]> = texts.iter().map(|s| s.as_bytes()).collect();
    pieces.push(long.as_bytes());
    for (i, id) in [0u32, 1000, 50_000, 117_332, 151_642].iter().enumerate() {
        let _ = i;
        pieces.push(t.vocab.token(*id).unwrap());
    }
    for p in pieces {
        for vocab in [&t.vocab, &v] {
            let mut fast = Vec::new();
            scratch.encode_piece(vocab, p, &mut fast);
            assert_eq!(
                fast,
                bpe::bpe_reference(vocab, p),
                "{:?}",
                String::from_utf8_lossy(&p[..p.len().min(60)])
            );
        }
    }
}

#[test]
fn parallel_equals_sequential() {
    let texts: Vec<String> = cases("encode.json")
        .iter()
        .map(|c| c["text"].as_str().unwrap().to_string())
        .collect();
    let big = texts.join(" and then ").repeat(20);
    let t = qwen();
    assert!(safe_chunks(&big, 4096).count() > 10);
    assert_eq!(t.encode_parallel(&big).unwrap(), t.encode(&big).unwrap());
    // Chunk boundaries are places where the sequential pieces start anyway.
    let mut pos = 0;
    let starts: std::collections::HashSet<usize> = t
        .pieces(&big)
        .unwrap()
        .iter()
        .map(|p| {
            let s = pos;
            pos += p.len();
            s
        })
        .collect();
    let mut at = 0;
    for c in safe_chunks(&big, 4096) {
        assert!(starts.contains(&at) || at == 0);
        at += c.len();
    }
}

#[test]
fn pieces_follow_the_pattern() {
    let t = qwen();
    assert_eq!(
        t.pieces("Hello  world 2024!\n\n").unwrap(),
        vec!["Hello", " ", " world", " ", "2", "0", "2", "4", "!\n\n"]
    );
    assert_eq!(t.pieces("I'M here").unwrap(), vec!["I", "'M", " here"]);
    assert_eq!(
        bpe::QWEN_PATTERN,
        fixture("encode.json")["pattern"].as_str().unwrap()
    );
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn decode_encode_round_trips(s in any::<String>()) {
        let t = qwen();
        prop_assert_eq!(t.decode(&t.encode(&s).unwrap()).unwrap(), s.clone());
        prop_assert_eq!(t.encode_parallel(&s).unwrap(), t.encode(&s).unwrap());
    }

    #[test]
    fn chunk_boundaries_are_piece_starts(s in prop_oneof![
        "[a-zA-Z \n\r\t.,;!'0-9\u{3000}\u{a0}\u{85}你好]{0,80}", any::<String>()
    ]) {
        let t = qwen();
        let mut starts = std::collections::HashSet::new();
        let mut pos = 0;
        for p in t.pieces(&s).unwrap() {
            starts.insert(pos);
            pos += p.len();
        }
        let mut at = 0;
        let mut joined = Vec::new();
        for c in safe_chunks(&s, 1) {
            prop_assert!(at == 0 || starts.contains(&at), "cut at {} of {:?}", at, s);
            joined.extend(t.encode_ordinary(c).unwrap());
            at += c.len();
        }
        prop_assert_eq!(joined, t.encode_ordinary(&s).unwrap());
    }

    #[test]
    fn round_trips_on_mixed_text(parts in proptest::collection::vec(prop_oneof![
        Just("<|im_start|>".to_string()), Just("<think>".to_string()), Just("<|".to_string()),
        Just("法战组合".to_string()), Just("  \n".to_string()), "[a-z ]{0,12}", "\\PC{0,8}", "[0-9]{1,6}",
    ], 0..12)) {
        let s = parts.concat();
        let t = qwen();
        prop_assert_eq!(t.decode(&t.encode(&s).unwrap()).unwrap(), s.clone());
        use unicode_normalization::UnicodeNormalization;
        let n = qwen_nfc();
        prop_assert_eq!(n.decode(&n.encode(&s).unwrap()).unwrap(), s.nfc().collect::<String>());
    }
}

// ------------------------------------------------------------------ bad input

/// The error of loading `contents` as file `name` (in a scratch directory removed after).
fn load_err(name: &str, contents: &str) -> String {
    let dir = crate::common::scratch("tokenizer");
    let path = dir.join(name);
    std::fs::write(&path, contents).unwrap();
    match Tokenizer::from_file(&path) {
        Ok(_) => panic!("{name} loaded"),
        Err(e) => e.to_string(),
    }
}

fn bytes_lines() -> String {
    use base64::Engine;
    (0..=255u8)
        .map(|b| {
            format!(
                "{} {b}\n",
                base64::engine::general_purpose::STANDARD.encode([b])
            )
        })
        .collect()
}

#[test]
fn bad_vocabulary_files_are_errors_naming_file_and_line() {
    let e = load_err("malformed.tiktoken", &(bytes_lines() + "aGVsbG8=\n"));
    assert!(
        e.contains("malformed.tiktoken") && e.contains("line 257"),
        "{e}"
    );
    let e = load_err("dup.tiktoken", &(bytes_lines() + "aGVsbG8= 7\n"));
    assert!(e.contains("duplicate id"), "{e}");
    let e = load_err("b64.tiktoken", &(bytes_lines() + "!!!! 300\n"));
    assert!(
        e.contains("invalid base64") && e.contains("line 257"),
        "{e}"
    );
    let e = load_err("neg.tiktoken", &(bytes_lines() + "aGVsbG8= -1\n"));
    assert!(e.contains("not a non-negative integer"), "{e}");
    let e = load_err("short.tiktoken", "YQ== 0\n");
    assert!(e.contains("not a token"), "{e}");
    let e = load_err("empty.tiktoken", "");
    assert!(e.contains("no tokens"), "{e}");
    let e = load_err("collide.tiktoken", &(bytes_lines() + "aGVsbG8= 151644\n"));
    assert!(e.contains("<|im_start|>"), "{e}");
    let missing = Tokenizer::from_file(Path::new("/nonexistent/qwen.tiktoken"))
        .err()
        .unwrap()
        .to_string();
    assert!(missing.contains("/nonexistent/qwen.tiktoken"), "{missing}");
}

#[test]
fn bad_tokenizer_json_is_an_error_naming_the_field() {
    let small = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/tokenizer/small-tokenizer.json"),
    )
    .unwrap();
    let doc: Value = serde_json::from_str(&small).unwrap();
    let with = |f: &dyn Fn(&mut Value)| {
        let mut d = doc.clone();
        f(&mut d);
        load_err("bad-tokenizer.json", &d.to_string())
    };
    assert!(with(&|d| d["model"]["type"] = "WordPiece".into()).contains("model.type"));
    assert!(with(&|d| d["model"]["dropout"] = 0.1.into()).contains("dropout"));
    assert!(with(&|d| d["model"]["merges"][0] = "nope".into()).contains("merge 0"));
    assert!(
        with(&|d| d["model"]["merges"][3] = "Ġ qqqqqqq".into()).contains("not in the vocabulary")
    );
    assert!(
        with(&|d| d["normalizer"] = serde_json::json!({"type": "NFKC"})).contains("normalizer")
    );
    assert!(
        with(&|d| d["pre_tokenizer"] = serde_json::json!({"type": "Whitespace"}))
            .contains("pre_tokenizer")
    );
    assert!(with(&|d| d["model"]["vocab"]["€"] = 5000.into()).contains("byte-level alphabet"));
    assert!(with(&|d| d["added_tokens"][1]["id"] = 4096.into()).contains("duplicate"));
    assert!(load_err("broken.json", "{\"model\": ").contains("invalid JSON"));
}

#[test]
fn ids_past_the_vocabulary_and_empty_input() {
    let t = qwen();
    assert_eq!(t.encode("").unwrap(), Vec::<u32>::new());
    assert_eq!(t.decode(&[]).unwrap(), "");
    let e = t.decode(&[1, 151_669]).unwrap_err().to_string();
    assert!(e.contains("151669"), "{e}");
    assert!(t.decode(&[u32::MAX]).is_err());
    assert!(glitch::repetition_prompt_ids(t, 999_999).is_err());
}

// ------------------------------------------------------------------ the CLI

/// `anatomy tokenize` gives Qwen's ids (Hugging Face's, NFC first) with no flag, and
/// tiktoken's raw ids with `--no-nfc`, on every non-NFC case of the fixture.
#[test]
fn cli_tokenize_is_nfc_by_default_and_raw_with_no_nfc() {
    let exe = env!("CARGO_BIN_EXE_anatomy");
    let vocab = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/qwen.tiktoken");
    let tokenize = |extra: &[&str], text: &str| -> Vec<u32> {
        let out = std::process::Command::new(exe)
            .args(["tokenize", "--vocab"])
            .arg(&vocab)
            .arg("--json")
            .args(extra)
            .args(["--", text])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        ids(&v["ids"])
    };
    let mut checked = 0;
    for c in cases("encode.json") {
        let text = c["text"].as_str().unwrap();
        if c["category"] != "non-nfc" || text.contains('\0') {
            continue;
        }
        if c["ids"] == c["hf_ids"] {
            continue; // NFC leaves this one as it is (a lone combining mark)
        }
        assert_eq!(tokenize(&[], text), ids(&c["hf_ids"]), "{text:?}");
        assert_eq!(tokenize(&["--no-nfc"], text), ids(&c["ids"]), "{text:?}");
        checked += 1;
    }
    assert!(checked >= 3, "{checked} cases where NFC changes the ids");
}

#[test]
fn cli_tokenize_equals_tiktoken_and_rejects_bad_input() {
    let exe = env!("CARGO_BIN_EXE_anatomy");
    let vocab = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/qwen.tiktoken");
    let mut checked = 0;
    for c in cases("encode.json") {
        let text = c["text"].as_str().unwrap();
        if text.contains('\0') || c["category"] == "non-nfc" {
            continue; // argv cannot carry NUL; non-NFC cases are checked in-process
        }
        if checked % 4 != 0
            && !matches!(
                c["category"].as_str(),
                Some("special" | "near-miss" | "glitch")
            )
        {
            checked += 1;
            continue;
        }
        checked += 1;
        let out = std::process::Command::new(exe)
            .args(["tokenize", "--vocab"])
            .arg(&vocab)
            .args(["--json", "--", text])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{text:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(ids(&v["ids"]), ids(&c["ids"]), "{text:?}");
    }
    let run = |args: &[&str]| std::process::Command::new(exe).args(args).output().unwrap();
    let v = vocab.to_str().unwrap();
    let out = run(&["detokenize", "--vocab", v, "151644,872,198,108386,151645"]);
    assert!(out.status.success());
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "<|im_start|>user\n你好<|im_end|>\n"
    );
    for bad in [
        vec!["detokenize", "--vocab", v, "1,999999"],
        vec!["detokenize", "--vocab", v, "1,x"],
        vec!["tokenize", "--vocab", "/nonexistent.tiktoken", "hi"],
    ] {
        let out = run(&bad);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}

#[test]
fn repetition_harness_builds_chatml_and_judges_answers() {
    let t = qwen();
    let ids = glitch::repetition_prompt_ids(t, 117_332).unwrap();
    assert_eq!(ids[0], 151_644, "starts with <|im_start|>");
    assert_eq!(
        ids.iter().filter(|&&i| i == 117_332).count(),
        1,
        "the candidate id itself, once"
    );
    let text = t.decode(&ids).unwrap();
    assert!(
        text.starts_with("<|im_start|>user\n请重复以下内容"),
        "{text}"
    );
    assert!(
        text.ends_with("法战组合<|im_end|>\n<|im_start|>assistant\n"),
        "{text}"
    );
    // A stand-in model that repeats the token, and one that talks about something else.
    let echo = glitch::repetition_test(t, &[117_332, 14880], |prompt| {
        let pos = prompt.iter().rposition(|&i| i == 151_645).unwrap();
        Ok(vec![prompt[pos - 1], 151_645])
    })
    .unwrap();
    assert!(echo.iter().all(|r| r.repeated), "{echo:?}");
    let confused =
        glitch::repetition_test(t, &[117_332], |_| t.encode("我不知道。<|im_end|>")).unwrap();
    assert!(!confused[0].repeated);
    assert_eq!(confused[0].answer, "我不知道。<|im_end|>");
}

#[test]
fn cli_glitch_screens_the_synthetic_checkpoint_and_rejects_bad_input() {
    let exe = env!("CARGO_BIN_EXE_anatomy");
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = root.join("data/synthetic-glitch");
    let vocab = dir.join("tokenizer.json");
    let out = std::process::Command::new(exe)
        .args(["glitch", "--vocab"])
        .arg(&vocab)
        .arg("--model")
        .arg(&dir)
        .args(["--top-k", "689", "--json"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(v["checkpoint"]["overlap"], 689);
    assert_eq!(v["checkpoint"]["unused_reference"], 85);
    assert_eq!(v["literal_scan_count"], 3);
    let run = |args: &[&str]| std::process::Command::new(exe).args(args).output().unwrap();
    let vs = vocab.to_str().unwrap();
    for bad in [
        vec!["glitch", "--vocab", vs, "--model", "/nonexistent-model-dir"],
        vec![
            "glitch",
            "--vocab",
            vs,
            "--model",
            dir.to_str().unwrap(),
            "--unused",
            "5-3",
        ],
        vec![
            "glitch",
            "--vocab",
            vs,
            "--model",
            dir.to_str().unwrap(),
            "--unused",
            "999999",
        ],
    ] {
        let out = run(&bad);
        assert_eq!(
            out.status.code(),
            Some(2),
            "{bad:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(!String::from_utf8_lossy(&out.stderr).contains("panicked"));
    }
}
