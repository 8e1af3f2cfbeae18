//! The bundled toy checkpoint end to end, as `anatomy tour` shows it.

use crate::error::Result;
use crate::qwen3::generate::{GenerateOptions, Sampling, generate};
use crate::qwen3::model::Model;
use crate::qwen3::open::{bundled_dir, open};
use crate::qwen3::router_report::{router_report, router_text};
use crate::qwen3::word_classes::{class_text, word_class_routing};
use std::path::Path;

/// The sentence the tour routes through the bundled model: punctuation, nouns and verbs.
pub const TOUR_TEXT: &str = " The small cat saw a bird, and the dog heard the river.";

/// The bundled checkpoint run end to end, as `anatomy tour` shows it: the greedy
/// continuation checked against transformers' (data/tiny-qwen3-moe/transformers_check.json),
/// then [`TOUR_TEXT`] tokenised with the Qwen vocabulary, routed, and continued.
pub fn tour_demo() -> Result<String> {
    use std::fmt::Write;
    let dir = bundled_dir();
    let (config, ckpt) = open(&dir)?;
    let model = Model::new(config, &ckpt)?;
    let c = &model.config;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "bundled checkpoint {}: {} layers, hidden {}, {} heads × {} (KV {}), {} experts top-{}, vocab {}, {} ({:.1} MB)",
        dir.display(),
        c.num_hidden_layers,
        c.hidden_size,
        c.num_attention_heads,
        c.head_dim,
        c.num_key_value_heads,
        c.num_experts,
        c.num_experts_per_tok,
        c.vocab_size,
        c.dtype.as_deref().unwrap_or("?"),
        ckpt.data_bytes() as f64 / 1e6
    );
    s += &greedy_check(&model, &dir)?;
    s += &routed_text(&model)?;
    s += &chat_plumbing(&model)?;
    Ok(s)
}

/// Step 1: the same greedy tokens as transformers on the generator's prompt.
fn greedy_check(model: &Model, dir: &Path) -> Result<String> {
    use std::fmt::Write;
    let mut s = String::new();
    let check = crate::error::read_json(&dir.join("transformers_check.json"))?;
    let ids = |key: &str| -> Result<Vec<u32>> {
        check[key]
            .as_array()
            .and_then(|a| a.iter().map(|v| v.as_u64().map(|x| x as u32)).collect())
            .ok_or_else(|| crate::Error::field("transformers_check.json", key, "not a list of ids"))
    };
    let (prompt, want) = (ids("prompt")?, ids("greedy")?);
    let opts = GenerateOptions {
        max_new_tokens: want.len(),
        sampling: Sampling::Greedy,
        stop: vec![],
    };
    let got = generate(model, &prompt, &opts, |_| {})?;
    let _ = writeln!(
        s,
        "greedy continuation of {prompt:?}: {got:?} — transformers 5.24: {want:?} ({})",
        if got == want { "equal" } else { "DIFFERENT" }
    );
    if got != want {
        return Err(crate::Error::Invalid(
            "the bundled model's greedy tokens differ from transformers'".into(),
        ));
    }
    Ok(s)
}

/// Steps 2 and 3: text → Qwen token ids → routing of every token in every MoE layer, and the
/// overview's exercise: which experts do the word classes go to?
fn routed_text(model: &Model) -> Result<String> {
    use std::fmt::Write;
    let mut s = String::new();
    let tok = crate::tokenizer::Tokenizer::qwen()?;
    let text_ids = tok.encode(TOUR_TEXT)?;
    let out = model.logits(&text_ids)?;
    let report = router_report(&model.config, &text_ids, &out);
    let show = |id: u32| {
        tok.token_bytes(id)
            .map(|b| String::from_utf8_lossy(b).into_owned())
            .unwrap_or_default()
    };
    let _ = writeln!(s, "router statistics for {TOUR_TEXT:?}:");
    s.push_str(&router_text(&report, Some(&show)));
    let opts = GenerateOptions {
        max_new_tokens: 8,
        sampling: Sampling::Greedy,
        stop: vec![],
    };
    let cont = generate(model, &text_ids, &opts, |_| {})?;
    let _ = writeln!(
        s,
        "greedy continuation: {cont:?} = {:?}",
        tok.decode(&cont)?
    );

    let classes = word_class_routing(model, &tok)?;
    s.push_str(&class_text(&classes));
    Ok(s)
}

/// Step 4: the whole pipeline a chat model runs: template → ids → forward → generate. The toy
/// model never saw ChatML, so its answer is noise; the point is the plumbing.
fn chat_plumbing(model: &Model) -> Result<String> {
    use std::fmt::Write;
    let tok = crate::tokenizer::Tokenizer::qwen()?;
    let message = |role: &str, text: &str| crate::chat::template::Message {
        role: role.into(),
        content: crate::chat::template::Content::Text(text.into()),
        reasoning_content: None,
        tool_calls: vec![],
    };
    let prompt = crate::chat::template::render(
        &[
            message("system", "You are a helpful assistant."),
            message("user", "Name an animal."),
        ],
        &[],
        &crate::chat::template::ChatOptions {
            add_generation_prompt: true,
            enable_thinking: Some(false),
        },
    )?;
    let chat_ids = tok.encode(&prompt)?;
    let answer = generate(
        model,
        &chat_ids,
        &GenerateOptions {
            max_new_tokens: 6,
            sampling: Sampling::Greedy,
            stop: vec![],
        },
        |_| {},
    )?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "chat template → {} ids (first {:?}, <|im_start|> = 151644) → forward → greedy {:?} = {:?} (the toy model was not trained on chat)",
        chat_ids.len(),
        &chat_ids[..3.min(chat_ids.len())],
        answer,
        tok.decode(&answer)?
    );
    Ok(s)
}
