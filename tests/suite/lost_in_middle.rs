//! Chapter 3's S1 exercise 2 on the engine (`anatomy lost-in-middle MODEL`): the harness's
//! documents through the chat template, the Qwen tokenizer and the forward pass. Oracle:
//! tests/fixtures/lost_in_middle/expected.json, written by
//! scripts/gen_lost_in_middle_fixtures.py (torch 2.15, transformers 5.24, tiktoken 0.14,
//! jinja2 3.1.6), which rebuilds the documents and prompts in Python and lets transformers
//! answer greedily on the bundled Qwen3-MoE and on a Qwen2 with Qwen's vocabulary.

use crate::common;
use common::{anatomy, ids};

use llm_anatomy::checkpoint::Checkpoint;
use llm_anatomy::long_context::lost_in_middle::{self, Placement};
use llm_anatomy::qwen3::lost_in_middle::{Options, Report, fit_words, prompt, run};
use llm_anatomy::qwen3::{Model, Qwen3Config};
use llm_anatomy::tokenizer::Tokenizer;
use serde_json::Value;
use std::path::{Path, PathBuf};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn model_dir(name: &str) -> PathBuf {
    match name {
        "bundled" => llm_anatomy::qwen3::bundled_dir(),
        "qwen2_qwen_vocab" => root().join("tests/fixtures/qwen2/qwen_vocab"),
        other => panic!("unknown model {other}"),
    }
}

fn fixture() -> Value {
    let path = root().join("tests/fixtures/lost_in_middle/expected.json");
    serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap()
}

fn placement(name: &str) -> Placement {
    *Placement::ALL.iter().find(|p| p.name() == name).unwrap()
}

#[test]
fn prompts_and_answers_equal_pythons_on_qwen3_moe_and_qwen2() {
    let fx = fixture();
    let words = fx["words"].as_u64().unwrap() as usize;
    let tok = Tokenizer::qwen().unwrap();
    let cases = fx["cases"].as_array().unwrap();
    assert_eq!(cases.len(), 24);
    for name in ["bundled", "qwen2_qwen_vocab"] {
        let dir = model_dir(name);
        let ckpt = Checkpoint::open(&dir).unwrap();
        let model = Model::new(
            Qwen3Config::from_file(&dir.join("config.json")).unwrap(),
            &ckpt,
        )
        .unwrap();
        for chat in [true, false] {
            let mine: Vec<&Value> = cases
                .iter()
                .filter(|c| c["model"] == name && c["chat"] == chat)
                .collect();
            // The prompts, token for token, and where the key sentence starts.
            for c in &mine {
                assert_eq!(c["model_type"], model.config.model_type.as_str());
                let t = lost_in_middle::build_trial(
                    words,
                    placement(c["placement"].as_str().unwrap()),
                    c["vault"].as_u64().unwrap() as usize,
                );
                assert_eq!(t.answer, c["expected"].as_str().unwrap());
                let p = prompt(&tok, &t, chat, &model.config.model_type).unwrap();
                assert_eq!(p.ids, ids(&c["prompt_ids"]), "{name} chat={chat}");
                assert_eq!(p.key_token as u64, c["key_token"].as_u64().unwrap());
            }
            // The answers: the same greedy tokens as transformers', scored as the harness does.
            let opts = Options {
                words: Some(words),
                trials_per_placement: 2,
                chat,
                max_new_tokens: fx["max_new_tokens"].as_u64().unwrap() as usize,
            };
            let mut calls = Vec::new();
            let report = run(&model, &tok, &opts, |done, total| calls.push((done, total))).unwrap();
            assert_eq!(calls.last(), Some(&(6, 6)));
            assert_eq!(report.answers.len(), mine.len());
            for (a, c) in report.answers.iter().zip(&mine) {
                assert_eq!(a.placement.name(), c["placement"].as_str().unwrap());
                assert_eq!(a.vault as u64, c["vault"].as_u64().unwrap());
                assert_eq!(a.reply_ids, ids(&c["answer_ids"]), "{name} chat={chat}");
                assert_eq!(a.reply, c["answer"].as_str().unwrap());
                assert_eq!(a.correct, a.reply.contains(&a.expected));
            }
            check_totals(&report);
        }
    }
}

/// The per-placement table is the tally of the answers.
fn check_totals(r: &Report) {
    assert_eq!(r.placements.len(), 3);
    for p in &r.placements {
        let here: Vec<_> = r
            .answers
            .iter()
            .filter(|a| a.placement == p.placement)
            .collect();
        assert_eq!(p.trials, here.len());
        assert_eq!(p.trials, r.trials_per_placement);
        assert_eq!(p.correct, here.iter().filter(|a| a.correct).count());
        assert_eq!(p.accuracy, p.correct as f64 / p.trials as f64);
    }
    let lengths = r.answers.iter().map(|a| a.prompt_tokens);
    assert_eq!(lengths.clone().min(), Some(r.min_prompt_tokens));
    assert_eq!(lengths.max(), Some(r.max_prompt_tokens));
}

#[test]
fn documents_fit_the_exercises_ten_thousand_tokens() {
    // The largest document whose prompts all stay within the limit, found by the same
    // bisection in Python with tiktoken: for the exercise's 10,000 tokens (about 8,900
    // words of the filler) and for the bundled model's 1024 − 16 positions.
    let tok = Tokenizer::qwen().unwrap();
    let fx = fixture();
    for f in fx["fits"].as_array().unwrap() {
        let (chat, model_type) = (
            f["chat"].as_bool().unwrap(),
            f["model_type"].as_str().unwrap(),
        );
        let n = f["trials_per_placement"].as_u64().unwrap() as usize;
        let limit = f["limit"].as_u64().unwrap() as usize;
        let words = fit_words(&tok, n, chat, model_type, limit).unwrap();
        assert_eq!(words as u64, f["words"].as_u64().unwrap(), "{f}");
        let lengths: Vec<usize> = lost_in_middle::trials(words, n)
            .iter()
            .map(|t| prompt(&tok, t, chat, model_type).unwrap().ids.len())
            .collect();
        let longest = *lengths.iter().max().unwrap();
        assert_eq!(longest as u64, f["max_prompt_tokens"].as_u64().unwrap());
        assert!(
            longest <= limit && longest * 100 >= limit * 99,
            "{words} words: {longest}"
        );
        // The key sits at the first, middle and last sentence.
        let t = lost_in_middle::build_trial(words, Placement::Middle, 0);
        let p = prompt(&tok, &t, chat, model_type).unwrap();
        let at = p.key_token as f64 / p.ids.len() as f64;
        assert!((0.45..0.55).contains(&at), "middle key at {at}");
    }
    // A context too short for any document is an error, not an empty run.
    assert!(fit_words(&tok, 1, true, "qwen2", 40).is_err());
}

#[test]
fn cli_runs_on_the_bundled_model_and_on_qwen2() {
    // Defaults on the bundled model (context 1024): documents fitted to 1024 − 16 tokens,
    // five vaults at each placement, every answer the library's.
    let bundled = llm_anatomy::qwen3::bundled_dir();
    let o = anatomy(&["lost-in-middle", bundled.to_str().unwrap(), "--json"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["target_prompt_tokens"], 1008);
    // Words, prompt and document lengths and key positions as Python computes them (the
    // figures chapter 3.8 quotes).
    let fx = fixture();
    let want = &fx["fits"][0];
    assert_eq!(
        (&want["limit"], &want["model_type"]),
        (&v["target_prompt_tokens"], &v["model_type"])
    );
    for key in [
        "words",
        "min_prompt_tokens",
        "max_prompt_tokens",
        "min_document_words",
        "max_document_words",
    ] {
        assert_eq!(v[key], want[key], "{key}");
    }
    for p in v["placements"].as_array().unwrap() {
        let name = p["placement"].as_str().unwrap();
        let mean = p["mean_key_token"].as_f64().unwrap();
        assert!((mean - want["mean_key_token"][name].as_f64().unwrap()).abs() < 1e-9);
        assert_eq!(
            (p["trials"].as_u64(), p["correct"].as_u64()),
            (Some(5), Some(0))
        );
    }
    // Every answer is transformers' (none contains the digits: the toy model never learned
    // to answer, hence 0/5 at every placement).
    let theirs = fx["bundled_default_answers"].as_array().unwrap();
    let ours = v["answers"].as_array().unwrap();
    assert_eq!(ours.len(), 15);
    for (a, t) in ours.iter().zip(theirs) {
        assert_eq!(a["placement"], t["placement"]);
        assert_eq!(ids(&a["reply_ids"]), ids(&t["answer_ids"]));
        assert_eq!(a["correct"], false);
    }
    let (cfg, ckpt) = llm_anatomy::qwen3::open(&bundled).unwrap();
    let model = Model::new(cfg, &ckpt).unwrap();
    let tok = Tokenizer::qwen().unwrap();
    let lib = run(&model, &tok, &Options::default(), |_, _| {}).unwrap();
    assert_eq!(serde_json::to_value(&lib).unwrap(), v);

    let o = anatomy(&["lost-in-middle", bundled.to_str().unwrap(), "--trials", "1"]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("placement") && text.contains("middle"),
        "{text}"
    );

    // A Qwen2 checkpoint, through the CLI: the Python stack's answers.
    let qwen2 = model_dir("qwen2_qwen_vocab");
    let o = anatomy(&[
        "lost-in-middle",
        qwen2.to_str().unwrap(),
        "--words",
        "300",
        "--trials",
        "2",
        "--plain",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let v: Value = serde_json::from_slice(&o.stdout).unwrap();
    let want: Vec<&Value> = fx["cases"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["model"] == "qwen2_qwen_vocab" && c["chat"] == false)
        .collect();
    for (a, c) in v["answers"].as_array().unwrap().iter().zip(&want) {
        assert_eq!(ids(&a["reply_ids"]), ids(&c["answer_ids"]));
    }
    assert_eq!(v["model_type"], "qwen2");
}

#[test]
fn bad_lost_in_middle_input_exits_2_with_a_reason() {
    let bundled = llm_anatomy::qwen3::bundled_dir();
    let b = bundled.to_str().unwrap();
    for (args, needle) in [
        (vec!["--words", "100000"], "max_position_embeddings"),
        (vec!["--trials", "0"], "at least 1"),
        (vec!["--max-new-tokens", "5000"], "max_position_embeddings"),
        (
            vec!["--vocab", "/no/such/vocab.tiktoken"],
            "/no/such/vocab.tiktoken",
        ),
    ] {
        let mut all = vec!["lost-in-middle", b];
        all.extend(args.iter().copied());
        let o = anatomy(&all);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(needle), "{args:?}: {err}");
    }
    let o = anatomy(&["lost-in-middle", "/no/such/model"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("/no/such/model"));
}

#[test]
fn the_claim_names_the_command() {
    // ext.lost_in_middle stays needs-data (no checkpoint trained to answer ships with the
    // repository), and its note says how to run the exercise on Qwen2.5-0.5B.
    let c = llm_anatomy::claims::find("ext.lost_in_middle").unwrap();
    assert_eq!(c.status, llm_anatomy::claims::Status::NeedsData);
    assert!(
        c.note.contains("anatomy lost-in-middle Qwen2.5-0.5B"),
        "{}",
        c.note
    );
    assert!(!c.note.contains("lands with the forward pass"));
}

#[test]
fn the_books_quoted_run_is_the_clis() {
    // Chapter 3's Reproducing page quotes the bundled model's table; it must be what the
    // command prints.
    let bundled = llm_anatomy::qwen3::bundled_dir();
    let o = anatomy(&["lost-in-middle", bundled.to_str().unwrap()]);
    assert!(o.status.success());
    let text = String::from_utf8_lossy(&o.stdout);
    let table: Vec<&str> = text.lines().skip(2).take(4).collect();
    assert!(table[0].starts_with("placement"), "{text}");
    let book =
        std::fs::read_to_string(root().join("book/src/reproduce/03-long-context.md")).unwrap();
    assert!(book.contains(&table.join("\n")), "{}", table.join("\n"));
    assert!(text.contains("documents of 852–856 words: prompts of 994–999 tokens"));
    let flat = book.split_whitespace().collect::<Vec<_>>().join(" ");
    assert!(flat.contains("documents of 852–856 words and prompts of 994–999 tokens"));
}
