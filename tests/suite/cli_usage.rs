//! The command line as a practitioner meets it: every option of every subcommand has a
//! help line; the vocabulary defaults as `generate`'s; `router-stats --prompt`, `logits
//! --top` and `quantize`'s notes on stderr report what the files they write hold.

use crate::common::{Scratch, anatomy, scratch};
use llm_anatomy::gguf::Gguf;
use llm_anatomy::quant::GgmlType;
use llm_anatomy::tokenizer::Tokenizer;
use serde_json::Value;
use std::collections::BTreeMap;
use std::path::Path;

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn path(rel: &str) -> String {
    root().join(rel).display().to_string()
}

/// A scratch directory for the outputs of `tag`, removed when dropped.
fn tmp_dir(tag: &str) -> Scratch {
    scratch(&format!("cli-usage-{tag}"))
}

/// Runs anatomy, requires success, returns (stdout, stderr).
fn ok(args: &[&str]) -> (String, String) {
    let out = anatomy(args);
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "{args:?}: {err}");
    (String::from_utf8(out.stdout).unwrap(), err)
}

/// The subcommand names `anatomy help` lists.
fn subcommands() -> Vec<String> {
    let (help, _) = ok(&["help"]);
    help.lines()
        .skip_while(|l| !l.starts_with("Commands:"))
        .skip(1)
        .take_while(|l| l.starts_with("  "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| *name != "help")
        .map(str::to_string)
        .collect()
}

/// The argument and option entries of a `--help` text without a help line: an entry is a
/// line of the Arguments/Options sections starting (after at most six spaces) with `-`,
/// `<` or `[`; its help follows on the same line after two spaces, or on the next lines
/// indented deeper.
fn entries_without_help(help: &str) -> Vec<String> {
    let lines: Vec<&str> = help.lines().collect();
    let mut missing = Vec::new();
    let mut in_section = false;
    for (i, line) in lines.iter().enumerate() {
        if !line.starts_with(' ') {
            in_section = matches!(line.trim(), "Arguments:" | "Options:");
            continue;
        }
        let indent = line.len() - line.trim_start().len();
        let spec = line.trim_start();
        let is_entry = in_section && indent <= 6 && spec.starts_with(['-', '<', '[']);
        if !is_entry {
            continue;
        }
        let same_line = spec
            .split_once("  ")
            .is_some_and(|(_, h)| !h.trim().is_empty());
        let next_line = lines.get(i + 1).is_some_and(|n| {
            let n_indent = n.len() - n.trim_start().len();
            n_indent > indent + 2 && !n.trim().is_empty()
        });
        if !same_line && !next_line {
            missing.push(spec.to_string());
        }
    }
    missing
}

#[test]
fn every_option_of_every_subcommand_has_a_help_line() {
    let names = subcommands();
    assert!(names.len() >= 17, "too few subcommands: {names:?}");
    let mut missing = Vec::new();
    for name in &names {
        for flag in ["-h", "--help"] {
            let (help, _) = ok(&[name.as_str(), flag]);
            for entry in entries_without_help(&help) {
                missing.push(format!("{name} {flag}: {entry}"));
            }
            // A default in the help text and clap's own would say two things at once.
            for line in help.lines() {
                if line.contains("(default: ") && line.contains("[default: ") {
                    missing.push(format!("{name}: two defaults in {line:?}"));
                }
            }
        }
    }
    assert!(
        missing.is_empty(),
        "options without help:\n{}",
        missing.join("\n")
    );
}

#[test]
fn the_help_checker_sees_a_missing_line() {
    let help =
        "Usage: x\n\nOptions:\n      --json\n      --out <OUT>  Where\n  -h, --help   Print help\n";
    assert_eq!(entries_without_help(help), vec!["--json".to_string()]);
}

/// `tokenize`, `detokenize` and `glitch` without --vocab use Qwen's vocabulary, as
/// `generate` does for a checkpoint without its own tokenizer.
#[test]
fn text_commands_default_to_qwens_vocabulary() {
    let qwen = path("data/qwen.tiktoken");
    let text = "Hello 世界 <|im_start|>user";
    let given = ok(&["tokenize", "--vocab", &qwen, "--json", text]).0;
    let defaulted = ok(&["tokenize", "--json", text]).0;
    assert_eq!(defaulted, given);
    let ids: Value = serde_json::from_str(&given).unwrap();
    let ids = crate::common::join(&crate::common::ids(&ids["ids"]));
    let back = ok(&["detokenize", &ids]).0;
    assert_eq!(back, ok(&["detokenize", "--vocab", &qwen, &ids]).0);
    assert_eq!(back.trim_end_matches('\n'), text);
    let scan = ok(&["glitch", "--json", "--top-k", "10"]).0;
    assert_eq!(
        scan,
        ok(&["glitch", "--vocab", &qwen, "--json", "--top-k", "10"]).0
    );
}

/// The tensors of a GGUF file whose rows cannot hold 256-weight K blocks, by type name.
fn narrow_quantised(g: &Gguf) -> BTreeMap<String, usize> {
    let mut by_type = BTreeMap::new();
    for t in g.tensors() {
        let cols = t.dims[0] as usize;
        if t.ty != GgmlType::F32 && !cols.is_multiple_of(256) {
            *by_type.entry(t.ty.name().to_string()).or_insert(0) += 1;
        }
    }
    by_type
}

#[test]
fn quantize_says_which_tensors_fell_back_and_which_vocabulary_it_wrote() {
    let dir = tmp_dir("quantize");
    let out = dir.join("tiny.gguf");
    let (model, out_s) = (path("data/tiny-qwen3-moe"), out.to_str().unwrap());
    let (_, err) = ok(&["quantize", &model, "--type", "q4_k_m", "--out", out_s]);
    let g = Gguf::open(&out).unwrap();
    let fell_back = narrow_quantised(&g);
    assert!(
        !fell_back.is_empty(),
        "the tiny model's rows are all narrower than 256"
    );
    assert!(err.contains("fell back"), "{err}");
    for (ty, n) in &fell_back {
        let line = format!("  {ty:<5} {n:>5} tensors");
        assert!(err.contains(&line), "expected {line:?} in: {err}");
    }
    // No tokenizer.json in the checkpoint: Qwen's vocabulary, as `generate` would use.
    assert!(err.contains("Qwen's vocabulary"), "{err}");
    let written = Tokenizer::from_file(&out).unwrap();
    let qwen = Tokenizer::qwen().unwrap();
    let text = "The quick brown fox 你好 <|im_end|>";
    assert_eq!(written.encode(text).unwrap(), qwen.encode(text).unwrap());

    // A vocab_size too small for Qwen's ids: no vocabulary, and a word on how to add one.
    let small = dir.join("small.gguf");
    let hf = path("tests/fixtures/quantize/hf");
    let (_, err) = ok(&[
        "quantize",
        &hf,
        "--type",
        "q8_0",
        "--out",
        small.to_str().unwrap(),
    ]);
    assert!(err.contains("--vocab FILE"), "{err}");
    let g = Gguf::open(&small).unwrap();
    assert_eq!(
        g.get("tokenizer.ggml.model").and_then(|v| v.as_str()),
        Some("none")
    );
    assert!(!err.contains("fell back"), "q8_0 has no K blocks: {err}");
}

#[test]
fn router_stats_takes_a_prompt_and_shows_its_tokens() {
    let model = path("data/anatomy-moe");
    let text = "the cat sat";
    let ids: Value = serde_json::from_str(&ok(&["tokenize", "--json", text]).0).unwrap();
    let ids = crate::common::ids(&ids["ids"]);
    let (json, _) = ok(&["router-stats", &model, "--prompt", text, "--json"]);
    let report: Value = serde_json::from_str(&json).unwrap();
    let positions = report["layers"][0]["positions"].as_array().unwrap();
    let routed: Vec<u32> = positions
        .iter()
        .map(|p| p["token"].as_u64().unwrap() as u32)
        .collect();
    assert_eq!(routed, ids);
    let qwen = Tokenizer::qwen().unwrap();
    let tokens: Vec<String> = ids.iter().map(|&i| qwen.decode(&[i]).unwrap()).collect();
    let shown: Vec<String> = report["tokens"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t.as_str().unwrap().to_string())
        .collect();
    assert_eq!(shown, tokens);
    // The same routing as the ids give.
    let by_ids = ok(&[
        "router-stats",
        &model,
        "--ids",
        &crate::common::join(&ids),
        "--json",
    ])
    .0;
    let by_ids: Value = serde_json::from_str(&by_ids).unwrap();
    assert_eq!(by_ids["layers"], report["layers"]);
    let (table, _) = ok(&["router-stats", &model, "--prompt", text]);
    for t in &tokens {
        assert!(table.contains(&format!("{t:?}")), "{t:?} not in:\n{table}");
    }
    let both = anatomy(&["router-stats", &model, "--prompt", text, "--ids", "1"]);
    assert_eq!(both.status.code(), Some(2));
}

/// The logits file of `anatomy logits`: rows of `vocab` f32.
fn read_logits(file: &Path) -> (Vec<f32>, usize) {
    let bytes = std::fs::read(file).unwrap();
    let st = safetensors::SafeTensors::deserialize(&bytes).unwrap();
    let t = st.tensor("logits").unwrap();
    let values = t
        .data()
        .chunks_exact(4)
        .map(|b| f32::from_le_bytes(b.try_into().unwrap()))
        .collect();
    (values, t.shape()[1])
}

#[test]
fn logits_top_k_lists_the_files_largest_logits_decoded() {
    let dir = tmp_dir("logits");
    let out = dir.join("logits.safetensors");
    let model = path("data/anatomy-moe");
    let k = 3;
    let (text, _) = ok(&[
        "logits",
        &model,
        "--ids",
        "1782,8251",
        "--out",
        out.to_str().unwrap(),
        "--top",
        "3",
    ]);
    let (values, vocab) = read_logits(&out);
    let qwen = Tokenizer::qwen().unwrap();
    let listed: Vec<&str> = text
        .lines()
        .filter(|l| l.trim_start().starts_with("->"))
        .collect();
    assert_eq!(listed.len(), 2 * k, "{text}");
    for (pos, row) in values.chunks(vocab).enumerate() {
        let mut order: Vec<usize> = (0..vocab).collect();
        order.sort_by(|&a, &b| row[b].total_cmp(&row[a]).then(a.cmp(&b)));
        let max = row[order[0]];
        let sum: f64 = row.iter().map(|&l| f64::from(l - max).exp()).sum();
        for (rank, &id) in order[..k].iter().enumerate() {
            let line = listed[pos * k + rank];
            let fields: Vec<&str> = line.split_whitespace().collect();
            assert_eq!(fields[1], id.to_string(), "{line}");
            let token = format!("{:?}", qwen.decode(&[id as u32]).unwrap());
            assert!(line.contains(&token), "{token} not in {line}");
            let p: f64 = fields.last().unwrap().parse().unwrap();
            let want = f64::from(row[id] - max).exp() / sum;
            assert!((p - want).abs() <= 5e-5, "{line}: p {want}");
        }
    }
    // --top alone prints without writing; neither --out nor --top is an error.
    let (again, _) = ok(&["logits", &model, "--ids", "1782,8251", "--top", "3"]);
    assert_eq!(again, text);
    let neither = anatomy(&["logits", &model, "--ids", "1"]);
    assert_eq!(neither.status.code(), Some(2));
}
