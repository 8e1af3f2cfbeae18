//! Chapter 9 and chapter 12 — the bundled model this crate trained (S1 exercise 3): the
//! Qwen3-MoE that `anatomy train` made from the real corpus (data/anatomy-moe/), run by
//! the engine and checked against what transformers computes on the same file
//! (scripts/gen_anatomy_moe_checks.py).

use super::{
    GenerateOptions, Model, Sampling, class_text, generate, open, word_class_routing_file,
};
use crate::error::{Error, Result, read_json};
use crate::tokenizer::Tokenizer;
use std::path::{Path, PathBuf};

/// Where the trained checkpoint lives.
pub fn trained_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("data/anatomy-moe")
}

/// One prompt of `transformers_check.json`: our greedy continuation beside transformers'.
#[derive(Clone, Debug, serde::Serialize)]
pub struct PromptCheck {
    pub text: String,
    pub ids: Vec<u32>,
    pub ours: Vec<u32>,
    pub transformers: Vec<u32>,
    /// Our continuation as text.
    pub continuation: String,
}

fn id_list(v: &serde_json::Value, what: &str, key: &str) -> Result<Vec<u32>> {
    v[key]
        .as_array()
        .and_then(|a| {
            a.iter()
                .map(|x| x.as_u64().and_then(|x| u32::try_from(x).ok()))
                .collect()
        })
        .ok_or_else(|| Error::field(what, key, "not a list of token ids"))
}

/// Every prompt of `dir/transformers_check.json`: the prompt's ids must be what our
/// tokenizer makes of its text, and our greedy tokens are set beside transformers'.
pub fn prompt_checks(model: &Model, tok: &Tokenizer, dir: &Path) -> Result<Vec<PromptCheck>> {
    let path = dir.join("transformers_check.json");
    let what = path.display().to_string();
    let doc = read_json(&path)?;
    let prompts = doc["prompts"]
        .as_array()
        .ok_or_else(|| Error::field(&what, "prompts", "not a list"))?;
    let mut out = Vec::with_capacity(prompts.len());
    for p in prompts {
        let text = p["text"]
            .as_str()
            .ok_or_else(|| Error::field(&what, "prompts[].text", "not a string"))?;
        let ids = id_list(p, &what, "ids")?;
        let want = id_list(p, &what, "greedy")?;
        if tok.encode(text)? != ids {
            return Err(Error::Invalid(format!(
                "{what}: our tokenizer does not give the generator's ids for {text:?}"
            )));
        }
        let opts = GenerateOptions {
            max_new_tokens: want.len(),
            sampling: Sampling::Greedy,
            stop: vec![],
        };
        let ours = generate(model, &ids, &opts, |_| {})?;
        out.push(PromptCheck {
            text: text.to_string(),
            continuation: tok.decode(&ours)?,
            ids,
            ours,
            transformers: want,
        });
    }
    Ok(out)
}

/// The trained model as `anatomy tour` shows it: what training reached, each prompt's
/// greedy continuation (equal to transformers'), and where the word classes of real text go.
pub fn trained_demo() -> Result<String> {
    let dir = trained_dir();
    Ok(format!(
        "trained checkpoint {}:\n{}",
        dir.display(),
        trained_text(&dir, true)?
    ))
}

/// The trained model's report without its path: what training reached, each prompt's
/// greedy continuation beside transformers', the word classes' experts.
/// `cjk`: show the prompts whose text or continuation has CJK characters (the book's
/// font is subset to the characters its pages use, so its block leaves them to the tour).
fn trained_text(dir: &Path, cjk: bool) -> Result<String> {
    use std::fmt::Write;
    let (config, ckpt) = open(dir)?;
    let model = &Model::new(config, &ckpt)?;
    let c = &model.config;
    let tok = Tokenizer::qwen()?;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{} layers, hidden {}, {} experts top-{}, vocab {} ({:.1} MB), trained by `anatomy train` on data/corpus",
        c.num_hidden_layers,
        c.hidden_size,
        c.num_experts,
        c.num_experts_per_tok,
        c.vocab_size,
        ckpt.data_bytes() as f64 / 1e6
    );
    let summary = read_json(&dir.join("training.json"))?;
    let num = |k: &str| summary[k].as_f64().unwrap_or(f64::NAN);
    let _ = writeln!(
        s,
        "{} steps of {} × {} tokens in {:.0} s; held-out loss {:.3} nats/token (perplexity {:.0}) against a unigram baseline of {:.3} (perplexity {:.0})",
        num("steps_done"),
        summary["options"]["batch_size"].as_u64().unwrap_or(0),
        summary["options"]["seq_len"].as_u64().unwrap_or(0),
        num("elapsed_s"),
        num("heldout_loss"),
        num("heldout_loss").exp(),
        num("unigram_heldout_loss"),
        num("unigram_heldout_loss").exp()
    );
    let checks = prompt_checks(model, &tok, dir)?;
    for p in &checks {
        let verdict = if p.ours == p.transformers {
            "equal to transformers'"
        } else {
            "DIFFERENT from transformers'"
        };
        let has_cjk = |t: &str| {
            t.chars().any(|c| {
                ('\u{2E80}'..='\u{9FFF}').contains(&c) || ('\u{FF00}'..='\u{FFEF}').contains(&c)
            })
        };
        if cjk || !(has_cjk(&p.text) || has_cjk(&p.continuation)) {
            let _ = writeln!(s, "greedy {:?} → {:?} ({verdict})", p.text, p.continuation);
        }
    }
    if checks.iter().any(|p| p.ours != p.transformers) {
        return Err(Error::Invalid(
            "the trained model's greedy tokens differ from transformers'".into(),
        ));
    }
    let classes = word_class_routing_file(
        model,
        &tok,
        &dir.join("word_classes.json"),
        "a held-out document of the corpus",
    )?;
    s.push_str(&class_text(&classes));
    Ok(s)
}

/// Chapter 9's block on the trained model (book/src/generated/trained-model.md): the
/// report of [`trained_demo`] without the machine's path, as a text block.
pub fn trained_markdown() -> Result<String> {
    Ok(format!(
        "```text\n{}```\n",
        trained_text(&trained_dir(), false)?
    ))
}
