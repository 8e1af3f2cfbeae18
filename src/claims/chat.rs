//! Claims of chapter 8: chat templates and the thinking budget (S0 5.7).

use super::{Entry, Outcome, outcome};
use crate::chat::thinking::{self, QWEN3_THINK_END, QWEN3_THINK_START, ThinkingBudget};
use crate::chat::{ChatOptions, EARLY_STOP_TEXT, Message, generate_with_budget, render};
use crate::tokenizer::Tokenizer;

/// The source's example block, as printed in 5.7.1 (one line per line of the prompt).
const SOURCE_CHATML: &str = "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n<|im_start|>user\n你好<|im_end|>\n<|im_start|>assistant\n";

fn failed(what: &str, e: impl std::fmt::Display) -> Outcome {
    outcome(
        f64::NAN,
        format!("{what} failed: {e}"),
        false,
        format!("{what} failed"),
    )
}

fn chat_chatml() -> Outcome {
    let msgs = [
        Message::new("system", "You are a helpful assistant."),
        Message::new("user", "你好"),
    ];
    let opts = ChatOptions {
        add_generation_prompt: true,
        enable_thinking: None,
    };
    let text = match render(&msgs, &[], &opts) {
        Ok(t) => t,
        Err(e) => return failed("rendering", e),
    };
    let same = text == SOURCE_CHATML;
    let ends = text.ends_with("<|im_start|>assistant\n");
    outcome(
        if same { 1.0 } else { 0.0 },
        format!(
            "{} chars, identical to the source's block: {same}; ends with \"<|im_start|>assistant\\n\": {ends}",
            text.chars().count()
        ),
        same && ends,
        "Reproduced with Qwen3's published template (checked against jinja2 on 20 conversations): unlike Qwen2.5's, it adds no default system prompt, and enable_thinking = false appends an empty \"<think>\\n\\n</think>\\n\\n\" after the header.",
    )
}

fn chat_think_tags() -> Outcome {
    let (reasoning, answer) = ("7 × 13 = 91, so 91 is not prime.", "No, 91 = 7 × 13.");
    let msgs = [
        Message::new("user", "Is 91 prime?"),
        Message::assistant_with_reasoning(answer, reasoning),
    ];
    let text = match render(&msgs, &[], &ChatOptions::default()) {
        Ok(t) => t,
        Err(e) => return failed("rendering", e),
    };
    let turn = text
        .rsplit("<|im_start|>assistant\n")
        .next()
        .unwrap_or("")
        .trim_end_matches("<|im_end|>\n");
    let framed = turn == format!("<think>\n{reasoning}\n</think>\n\n{answer}");
    let round_trip = thinking::split_thinking(turn) == (reasoning, answer);
    // In history (before a later user turn) the reasoning is dropped.
    let mut later = msgs.to_vec();
    later.push(Message::new("user", "And 97?"));
    let history = render(&later, &[], &ChatOptions::default()).unwrap_or_default();
    let stripped = !history.contains("<think>") && history.contains(answer);
    // The tags are single tokens in Qwen's vocabulary.
    let ids = Tokenizer::qwen().and_then(|t| t.encode(turn));
    let (n_open, n_close) = match &ids {
        Ok(ids) => (
            ids.iter().filter(|&&i| i == QWEN3_THINK_START).count(),
            ids.iter().filter(|&&i| i == QWEN3_THINK_END).count(),
        ),
        Err(_) => (0, 0),
    };
    let ok = framed && round_trip && stripped && n_open == 1 && n_close == 1;
    outcome(
        if ok { 1.0 } else { 0.0 },
        format!(
            "last turn renders as `<think>\\n…\\n</think>\\n\\nanswer`: {framed}; split back: {round_trip}; stripped from history: {stripped}; tokens {QWEN3_THINK_START}/{QWEN3_THINK_END} once each: {}",
            n_open == 1 && n_close == 1
        ),
        ok,
        "Reproduced; two details the text leaves out: the template keeps the think block only for assistant turns after the last user query (older ones lose it), and `<think>`/`</think>` (ids 151667/151668) are added tokens that are never split but are not flagged special, so skip_special_tokens keeps them.",
    )
}

fn chat_budget() -> Outcome {
    let tok = match Tokenizer::qwen() {
        Ok(t) => t,
        Err(e) => return failed("loading data/qwen.tiktoken", e),
    };
    let n = 8;
    let budget = match ThinkingBudget::new(n, QWEN3_THINK_START, QWEN3_THINK_END, |t| tok.encode(t))
    {
        Ok(b) => b,
        Err(e) => return failed("tokenising the early-stop text", e),
    };
    // A scripted model: opens a think block and never closes it; after </think> it says
    // "4", "2" and <|im_end|>.
    let (hmm, four, two, im_end) = (
        tok.encode(" hmm"),
        tok.encode("4"),
        tok.encode("2"),
        151_645u32,
    );
    let (Ok(hmm), Ok(four), Ok(two)) = (hmm, four, two) else {
        return failed("tokenising", "scripted tokens");
    };
    let script = [four[0], two[0], im_end];
    let model = |ctx: &[u32]| -> crate::Result<u32> {
        Ok(match ctx.iter().rposition(|&t| t == QWEN3_THINK_END) {
            None if ctx.contains(&QWEN3_THINK_START) => hmm[0],
            None => QWEN3_THINK_START,
            Some(p) => {
                script[ctx[p + 1..]
                    .iter()
                    .filter(|t| script.contains(t))
                    .count()
                    .min(2)]
            }
        })
    };
    let prompt =
        match tok.encode("<|im_start|>user\nWhat is 6 × 7?<|im_end|>\n<|im_start|>assistant\n") {
            Ok(p) => p,
            Err(e) => return failed("tokenising the prompt", e),
        };
    let g = match generate_with_budget(&prompt, 64, &[im_end], &budget, model) {
        Ok(g) => g,
        Err(e) => return failed("generation", e),
    };
    let text = tok.decode(&g.ids).unwrap_or_default();
    let at = g.injected_at.unwrap_or(usize::MAX);
    let (_, answer) = thinking::split_thinking(&text);
    let ok = at == 1 + n
        && text.contains(EARLY_STOP_TEXT)
        && answer.trim_end_matches("<|im_end|>") == "42";
    outcome(
        at as f64,
        format!(
            "budget {n}: early-stop text ({} tokens) injected after `<think>` + {} thinking tokens; the answer follows: {:?}",
            budget.early_stop_ids.len(),
            g.thinking_tokens,
            answer
        ),
        ok,
        "Reproduced as a generation loop: once N thinking tokens are spent the text goes into the model's own output stream, inside the think block, which its </think> closes, and the model continues with the answer. Where 5.7.3 puts the text (the system prompt) is chat.budget_placement.",
    )
}

/// S0 5.7.3 injects the early-stop text "在系统提示中" (into the system prompt). Rendered
/// there by Qwen3's template: does the prompt depend on the budget N, and where does its
/// `</think>` land relative to the think block the model opens?
fn chat_budget_placement() -> Outcome {
    let tok = match Tokenizer::qwen() {
        Ok(t) => t,
        Err(e) => return failed("loading data/qwen.tiktoken", e),
    };
    let opts = ChatOptions {
        add_generation_prompt: true,
        enable_thinking: None,
    };
    let msgs = [
        Message::new("system", EARLY_STOP_TEXT),
        Message::new("user", "What is 6 × 7?"),
    ];
    let p = match render(&msgs, &[], &opts).and_then(|text| tok.encode(&text)) {
        Ok(p) => p,
        Err(e) => return failed("rendering the system-prompt placement", e),
    };
    let close = p.iter().position(|&t| t == QWEN3_THINK_END);
    let im_start = 151_644u32;
    let turn = p.iter().rposition(|&t| t == im_start);
    let (close, turn) = (close.unwrap_or(usize::MAX), turn.unwrap_or(0));
    // A cut-off has to close the think block the model opens after the assistant header.
    outcome(
        close as f64 - turn as f64,
        format!(
            "rendered in the system prompt ({} tokens): its </think> is token {close}, {} tokens before the assistant turn opens (token {turn}), so it closes no think block the model writes; the loop (chat.budget) puts it at output token 1 + N",
            p.len(),
            turn.saturating_sub(close)
        ),
        close > turn,
        "In the system prompt the text is an instruction the model may follow or not: nothing there counts tokens or depends on N, and its </think> comes before the assistant turn, outside the think block it would have to close. Qwen3's budget works by appending the text to the model's own output once N thinking tokens are spent (chat.budget).",
    )
}

pub const ENTRIES: &[Entry] = &[
    Entry {
        id: "chat.chatml",
        section: "S0 5.7.1",
        statement: "the ChatML rendering of a system + user turn ends with \"<|im_start|>assistant\\n\"",
        stated: "exact string",
        compute: chat_chatml,
    },
    Entry {
        id: "chat.think_tags",
        section: "S0 5.7.2",
        statement: "<think> … </think> frame the reasoning; the final answer follows </think>",
        stated: "exact",
        compute: chat_think_tags,
    },
    Entry {
        id: "chat.budget",
        section: "S0 5.7.3",
        statement: "when the thinking budget is spent, the early-stop text is injected and generation continues with the answer (the behaviour; where 5.7.3 injects it is chat.budget_placement)",
        stated: "behaviour",
        compute: chat_budget,
    },
    Entry {
        id: "chat.budget_placement",
        section: "S0 5.7.3",
        statement: "the early-stop text is injected into the system prompt",
        stated: "in the system prompt",
        compute: chat_budget_placement,
    },
];
