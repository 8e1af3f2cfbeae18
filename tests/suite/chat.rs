//! Chapter 8 oracles: the Qwen3 chat template against jinja2 (fixtures by
//! scripts/gen_chat_fixtures.py: jinja2 3.1.6 and transformers 5.24 on Qwen3's published
//! template), the `anatomy chat-template` command, and the thinking-budget loop on a
//! scripted token source.

use llm_anatomy::chat::template::{self, JsonValue, py_float_repr, to_json};
use llm_anatomy::chat::thinking::{self, Phase, StopReason, ThinkingBudget};
use llm_anatomy::chat::{
    ChatOptions, Conversation, EARLY_STOP_TEXT, Message, generate_with_budget, render,
};
use std::process::Command;

fn fixture() -> JsonValue {
    let path = format!(
        "{}/tests/fixtures/chat/conversations.json",
        env!("CARGO_MANIFEST_DIR")
    );
    let text = std::fs::read_to_string(&path).unwrap();
    serde_json::from_str(&text).unwrap()
}

fn cases() -> Vec<JsonValue> {
    match fixture().get("cases") {
        Some(JsonValue::Array(c)) => c.clone(),
        _ => panic!("no cases"),
    }
}

fn str_of<'a>(v: &'a JsonValue, key: &str) -> &'a str {
    match v.get(key) {
        Some(JsonValue::Str(s)) => s,
        other => panic!("{key}: {other:?}"),
    }
}

fn options(case: &JsonValue) -> ChatOptions {
    ChatOptions {
        add_generation_prompt: case.get("add_generation_prompt") == Some(&JsonValue::Bool(true)),
        enable_thinking: match case.get("enable_thinking") {
            Some(JsonValue::Bool(b)) => Some(*b),
            _ => None,
        },
    }
}

fn conversation_doc(case: &JsonValue) -> JsonValue {
    JsonValue::Object(vec![
        ("messages".into(), case.get("messages").unwrap().clone()),
        (
            "tools".into(),
            case.get("tools").cloned().unwrap_or(JsonValue::Null),
        ),
    ])
}

#[test]
fn template_equals_jinja2_on_every_committed_conversation() {
    let all = cases();
    let mut names = std::collections::BTreeSet::new();
    let (mut rendered, mut raised) = (0, 0);
    for case in &all {
        let name = str_of(case, "name");
        names.insert(name.to_string());
        let conv = Conversation::from_json(&conversation_doc(case), name).unwrap();
        let ours = conv.render(&options(case));
        match case.get("rendered") {
            Some(JsonValue::Str(want)) => {
                let got = ours.unwrap_or_else(|e| panic!("{name}: {e}"));
                assert_eq!(&got, want, "{name} {:?}", options(case));
                rendered += 1;
            }
            _ => {
                assert!(
                    ours.is_err(),
                    "{name}: jinja2 raised {:?}, we rendered",
                    case.get("error")
                );
                raised += 1;
            }
        }
    }
    assert!(names.len() >= 12, "only {} conversations", names.len());
    // The chapter's counts: 20 conversations × 5 option sets, 10 of them rejected.
    assert_eq!((names.len(), rendered, raised), (20, 90, 10));
    eprintln!(
        "{} conversations, {rendered} renderings equal to jinja2, {raised} errors matched",
        names.len()
    );
}

#[test]
fn fixture_template_is_the_cited_copy() {
    // The generator checks the sha256; here: the file is there and is Qwen3's template.
    let path = format!(
        "{}/tests/fixtures/chat/qwen3_chat_template.jinja",
        env!("CARGO_MANIFEST_DIR")
    );
    let t = std::fs::read_to_string(path).unwrap();
    assert_eq!(t.len(), 4116);
    assert!(t.contains("enable_thinking is defined and enable_thinking is false"));
    assert_eq!(str_of(fixture().get("meta").unwrap(), "jinja2"), "3.1.6");
}

#[test]
fn source_chatml_example() {
    // S0 5.7.1: system + user "你好", generation prompt.
    let msgs = [
        Message::new("system", "You are a helpful assistant."),
        Message::new("user", "你好"),
    ];
    let opts = ChatOptions {
        add_generation_prompt: true,
        enable_thinking: None,
    };
    assert_eq!(
        render(&msgs, &[], &opts).unwrap(),
        "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n"
    );
    let no_think = ChatOptions {
        enable_thinking: Some(false),
        ..opts
    };
    assert!(
        render(&msgs, &[], &no_think)
            .unwrap()
            .ends_with("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    );
}

#[test]
fn python_json_helpers() {
    for (x, want) in [
        (1e-5, "1e-05"),
        (1.5e-5, "1.5e-05"),
        (1e16, "1e+16"),
        (1e15, "1000000000000000.0"),
        (0.0001, "0.0001"),
        (2.0, "2.0"),
        (-0.0, "-0.0"),
        (123.456, "123.456"),
        (0.1, "0.1"),
        (1.2345678901234567e-7, "1.2345678901234566e-07"),
        (1e22, "1e+22"),
        (12345678.9, "12345678.9"),
        (5e-324, "5e-324"),
    ] {
        assert_eq!(py_float_repr(x), want, "{x}");
    }
    let v: JsonValue =
        serde_json::from_str(r#"{"b": [1, -2, 2.5, true, null], "a": "é\"\n\u0001"}"#).unwrap();
    assert_eq!(
        to_json(&v),
        "{\"b\": [1, -2, 2.5, true, null], \"a\": \"é\\\"\\n\\u0001\"}"
    );
}

#[test]
fn bad_conversations_are_errors() {
    let bad = [
        ("{", "invalid JSON"),
        ("42", "expected an array"),
        (r#"[{"content": "x"}]"#, "role"),
        (r#"[{"role": "user", "content": [1]}]"#, "content"),
        (r#"{"messages": 3}"#, "messages"),
        (
            r#"[{"role": "assistant", "content": "x", "tool_calls": [{"name": 1, "arguments": {}}]}]"#,
            "name",
        ),
    ];
    for (text, needle) in bad {
        let err = template::parse_conversation(text, "test.json")
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(needle) && err.contains("test.json"),
            "{text}: {err}"
        );
    }
    // Parsed fine but the template cannot render it.
    let c = template::parse_conversation(r#"[{"role": "assistant"}]"#, "x").unwrap();
    let err = c.render(&ChatOptions::default()).unwrap_err().to_string();
    assert!(
        err.contains("messages[0]") && err.contains("content"),
        "{err}"
    );
}

fn anatomy() -> Command {
    Command::new(env!("CARGO_BIN_EXE_anatomy"))
}

#[test]
fn cli_prints_exactly_the_rendering() {
    let dir = crate::common::scratch("chat");
    let mut checked = 0;
    for case in cases().iter().filter(|c| c.get("rendered").is_some()) {
        let opts = options(case);
        // The CLI takes the plain message list; tools go through the object form.
        let path = dir.join("conv.json");
        std::fs::write(&path, to_json(&conversation_doc(case))).unwrap();
        let mut cmd = anatomy();
        cmd.arg("chat-template").arg("--messages").arg(&path);
        if opts.add_generation_prompt {
            cmd.arg("--add-generation-prompt");
        }
        if let Some(b) = opts.enable_thinking {
            cmd.args(["--enable-thinking", if b { "true" } else { "false" }]);
        }
        let out = cmd.output().unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            str_of(case, "name"),
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(
            String::from_utf8(out.stdout).unwrap(),
            str_of(case, "rendered"),
            "{}",
            str_of(case, "name")
        );
        checked += 1;
    }
    assert!(checked >= 60);
    // Bad input: exit code 2 and a message naming the file.
    let path = dir.join("bad.json");
    std::fs::write(&path, "[{\"role\": \"user\"}]").unwrap();
    let out = anatomy()
        .args(["chat-template", "--messages"])
        .arg(&path)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("content"));
    let out = anatomy()
        .args(["chat-template", "--messages", "/no/such/file.json"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
}

// ------------------------------------------------------------------ thinking budget

/// A toy vocabulary: 1 = <think>, 2 = </think>, 3 = <|im_end|>, letters from 100 on.
const THINK: u32 = 1;
const END_THINK: u32 = 2;
const EOS: u32 = 3;

fn toy_encode(text: &str) -> llm_anatomy::Result<Vec<u32>> {
    let mut ids = Vec::new();
    let mut rest = text;
    while !rest.is_empty() {
        if let Some(r) = rest.strip_prefix("</think>") {
            ids.push(END_THINK);
            rest = r;
        } else if let Some(r) = rest.strip_prefix("<think>") {
            ids.push(THINK);
            rest = r;
        } else {
            let c = rest.chars().next().unwrap();
            ids.push(100 + c as u32);
            rest = &rest[c.len_utf8()..];
        }
    }
    Ok(ids)
}

/// A model that opens a think block, thinks "hmm" forever, and once the block is closed
/// answers "42" and stops. It records how often it was asked.
fn endless_thinker(calls: &mut usize) -> impl FnMut(&[u32]) -> llm_anatomy::Result<u32> + '_ {
    move |ctx: &[u32]| {
        *calls += 1;
        let answered: Vec<u32> = match ctx.iter().rposition(|&t| t == END_THINK) {
            Some(p) => ctx[p + 1..].to_vec(),
            None => {
                return Ok(if ctx.contains(&THINK) {
                    100 + 'h' as u32
                } else {
                    THINK
                });
            }
        };
        let script = [100 + '4' as u32, 100 + '2' as u32, EOS];
        let said = answered.iter().filter(|t| script.contains(t)).count();
        Ok(script[said.min(2)])
    }
}

#[test]
fn budget_injects_the_early_stop_text_at_exactly_n_thinking_tokens() {
    let prompt = [100 + 'Q' as u32];
    for n in [0usize, 1, 5, 17] {
        let budget = ThinkingBudget::new(n, THINK, END_THINK, toy_encode).unwrap();
        let mut calls = 0;
        let g = generate_with_budget(&prompt, 200, &[EOS], &budget, endless_thinker(&mut calls))
            .unwrap();
        // <think>, then n thinking tokens, then the early-stop text, then "42" and EOS.
        let at = g.injected_at.expect("the budget must run out");
        assert_eq!(at, 1 + n, "budget {n}");
        assert_eq!(g.thinking_tokens, n);
        assert_eq!(g.ids[0], THINK);
        assert!(g.ids[1..at].iter().all(|&t| t == 100 + 'h' as u32));
        let early = toy_encode(EARLY_STOP_TEXT).unwrap();
        assert_eq!(&g.ids[at..at + early.len()], &early[..]);
        assert_eq!(
            &g.ids[at + early.len()..],
            &[100 + '4' as u32, 100 + '2' as u32, EOS]
        );
        assert_eq!(g.stop, StopReason::StopToken);
        // The model was never asked while the text was injected.
        assert_eq!(calls, 1 + n + 3);
    }
}

#[test]
fn budget_is_not_used_when_the_model_stops_thinking_in_time() {
    // Thinks 3 tokens, closes the block itself, answers.
    let script = [THINK, 100, 101, 102, END_THINK, 200, EOS];
    let budget = ThinkingBudget::new(5, THINK, END_THINK, toy_encode).unwrap();
    let g =
        generate_with_budget(&[7], 50, &[EOS], &budget, |ctx| Ok(script[ctx.len() - 1])).unwrap();
    assert_eq!(g.ids, script);
    assert_eq!((g.injected_at, g.thinking_tokens), (None, 3));
    // A budget of 4 is enough; with 3 the budget is spent before the model's own </think>
    // (its 4th token after <think>), so the early stop comes first.
    let budget4 = ThinkingBudget::new(4, THINK, END_THINK, toy_encode).unwrap();
    let g4 =
        generate_with_budget(&[7], 50, &[EOS], &budget4, |ctx| Ok(script[ctx.len() - 1])).unwrap();
    assert_eq!(g4.injected_at, None);
    let budget3 = ThinkingBudget::new(3, THINK, END_THINK, toy_encode).unwrap();
    let g3 = generate_with_budget(&[7], 80, &[EOS], &budget3, |ctx| {
        // After the injection this scripted model simply stops.
        Ok(if ctx.contains(&END_THINK) {
            EOS
        } else {
            script[ctx.len() - 1]
        })
    })
    .unwrap();
    assert_eq!((g3.injected_at, g3.thinking_tokens), (Some(4), 3));
}

#[test]
fn budget_counts_from_a_think_block_opened_in_the_prompt() {
    let budget = ThinkingBudget::new(2, THINK, END_THINK, toy_encode).unwrap();
    assert_eq!(
        budget.initial_phase(&[5, THINK]),
        Phase::Thinking { spent: 0 }
    );
    assert_eq!(budget.initial_phase(&[THINK, END_THINK]), Phase::Answering);
    assert_eq!(budget.initial_phase(&[5]), Phase::BeforeThinking);
    let mut calls = 0;
    let g = generate_with_budget(
        &[5, THINK],
        100,
        &[EOS],
        &budget,
        endless_thinker(&mut calls),
    )
    .unwrap();
    assert_eq!(g.injected_at, Some(2));
    // max_new_tokens counts injected ids too, and cuts the output there.
    let mut calls = 0;
    let g =
        generate_with_budget(&[5, THINK], 4, &[EOS], &budget, endless_thinker(&mut calls)).unwrap();
    assert_eq!((g.ids.len(), g.stop), (4, StopReason::MaxTokens));
}

#[test]
fn budget_rejects_a_tokenizer_that_splits_the_close_tag() {
    let err = ThinkingBudget::new(4, THINK, END_THINK, |t| {
        Ok(t.bytes().map(u32::from).collect())
    })
    .unwrap_err();
    assert!(err.to_string().contains("</think>"));
}

#[test]
fn split_thinking_matches_the_template_rule() {
    let (r, a) = thinking::split_thinking("<think>\nstep 1\nstep 2\n</think>\n\nThe answer.");
    assert_eq!((r, a), ("step 1\nstep 2", "The answer."));
    assert_eq!(thinking::split_thinking("no tags"), ("", "no tags"));
    // Rendering reasoning + answer and splitting the assistant part gives them back.
    let msgs = [
        Message::new("user", "q"),
        Message::assistant_with_reasoning("The answer.", "step 1"),
    ];
    let text = render(&msgs, &[], &ChatOptions::default()).unwrap();
    let turn = text
        .rsplit("<|im_start|>assistant\n")
        .next()
        .unwrap()
        .trim_end_matches("<|im_end|>\n");
    assert_eq!(thinking::split_thinking(turn), ("step 1", "The answer."));
}

#[test]
fn chapter8_book_numbers() {
    // Exercise 1.
    let msgs = [
        Message::new("user", "Hi"),
        Message::new("assistant", "Hello"),
    ];
    assert_eq!(
        render(&msgs, &[], &ChatOptions::default()).unwrap(),
        "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\nHello<|im_end|>\n"
    );
    // The source block is 110 characters.
    let src = [
        Message::new("system", "You are a helpful assistant."),
        Message::new("user", "你好"),
    ];
    let opts = ChatOptions {
        add_generation_prompt: true,
        enable_thinking: None,
    };
    assert_eq!(render(&src, &[], &opts).unwrap().chars().count(), 110);
    // The early-stop text has one "</think>" and ends the block with a blank line.
    assert_eq!(EARLY_STOP_TEXT.matches("</think>").count(), 1);
    assert!(EARLY_STOP_TEXT.ends_with("now.\n</think>\n\n"));
}

#[test]
fn cli_generate_injects_the_early_stop_text_at_exactly_n_thinking_tokens() {
    // End to end on the bundled tiny Qwen3-MoE: a chat prompt whose assistant turn opens a
    // think block, greedy decoding, budget N. The output must be the model's own first N
    // tokens (as plain greedy generation gives them), then the early-stop text's ids.
    let tok = llm_anatomy::tokenizer::Tokenizer::qwen().unwrap();
    let prompt = tok
        .encode("<|im_start|>user\nName a bird.<|im_end|>\n<|im_start|>assistant\n<think>\n")
        .unwrap();
    assert_eq!(prompt.last(), Some(&198)); // "\n" after <think>
    let ids_arg = prompt
        .iter()
        .map(u32::to_string)
        .collect::<Vec<_>>()
        .join(",");
    let dir = llm_anatomy::qwen3::bundled_dir();
    let early = ThinkingBudget::new(
        0,
        thinking::QWEN3_THINK_START,
        thinking::QWEN3_THINK_END,
        |t| tok.encode(t),
    )
    .unwrap()
    .early_stop_ids;
    let run = |extra: &[&str], n: &str| -> Vec<u32> {
        let out = anatomy()
            .arg("generate")
            .arg(&dir)
            .args(["--ids", &ids_arg, "--max-new-tokens", n, "--json"])
            .args(extra)
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        v["ids"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect()
    };
    let plain = run(&[], "5");
    for n in [1usize, 3, 5] {
        let ids = run(&["--thinking-budget", &n.to_string()], "40");
        assert!(
            !plain[..n].contains(&thinking::QWEN3_THINK_END),
            "the model closed the block itself"
        );
        assert_eq!(
            &ids[..n],
            &plain[..n],
            "budget {n}: the model's own tokens first"
        );
        assert_eq!(
            &ids[n..n + early.len()],
            &early[..],
            "budget {n}: early-stop text at index {n}"
        );
        assert!(
            ids.len() > n + early.len(),
            "generation continues after the injection"
        );
    }
}

/// Integers past 2^53 and past 64 bits stay integers, digit for digit, as Python's
/// `json.loads` and jinja2's `tojson` keep them; fractions and exponents stay floats.
#[test]
fn chat_template_keeps_big_integers_exact() {
    let big = [
        "9007199254740993",
        "18446744073709551617",
        "-9223372036854775809",
        "123456789012345678901234567890",
    ];
    let args: Vec<String> = big
        .iter()
        .enumerate()
        .map(|(i, n)| format!("\"a{i}\": {n}"))
        .collect();
    let doc = format!(
        r#"[{{"role": "user", "content": "hi"}}, {{"role": "assistant", "content": "", "tool_calls": [{{"name": "f", "arguments": {{{}, "x": 1.5e300, "s": "-12345678901234567890123"}}}}]}}]"#,
        args.join(", ")
    );
    let dir = crate::common::scratch("bigint");
    let path = dir.join("big.json");
    std::fs::write(&path, doc).unwrap();
    let out = anatomy()
        .args(["chat-template", "--messages"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    for (i, n) in big.iter().enumerate() {
        assert!(text.contains(&format!("\"a{i}\": {n}")), "{n} in {text}");
    }
    assert!(text.contains("\"x\": 1.5e+300"), "{text}");
    assert!(
        text.contains("\"s\": \"-12345678901234567890123\""),
        "{text}"
    );
}
