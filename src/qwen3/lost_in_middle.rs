//! Chapter 3's "lost in the middle" experiment (source S1 §2, exercise 2) run on the
//! engine: `anatomy lost-in-middle MODEL`.
//!
//! The harness of [`crate::long_context::lost_in_middle`] builds the documents (one key
//! sentence at the start, the middle or the end of filler) and scores the answers; this
//! module turns each trial into a prompt — the chat template of chapter 8 around document
//! and question, or plain text for a base model — tokenises it with the model's tokenizer
//! (chapter 4), lets the model answer greedily through the forward pass, and tallies the
//! accuracy per placement. Documents are about [`DOCUMENT_TOKENS`] tokens long, as the
//! exercise asks, or as long as the model's context allows. On a checkpoint trained to
//! answer (the exercise names Qwen2.5-0.5B) the accuracy is expected to be U-shaped; the
//! bundled toy model runs the same code but was never taught to answer, so there it shows
//! the mechanics only.

use crate::chat::{ChatOptions, Message, render};
use crate::error::{Error, Result};
use crate::long_context::lost_in_middle::{self, DOCUMENT_TOKENS, Placement, Trial};
use crate::qwen3::generate::{Sampling, generate_until_eos};
use crate::qwen3::model::Model;
use crate::tokenizer::Tokenizer;

/// The system message of the chat prompt.
pub const SYSTEM_PROMPT: &str = "You are a helpful assistant.";

/// How the experiment is run.
#[derive(Clone, Debug, PartialEq)]
pub struct Options {
    /// Filler words per document; `None`: about [`DOCUMENT_TOKENS`] tokens, fewer when the
    /// model's context (`max_position_embeddings` minus the answer) is shorter.
    pub words: Option<usize>,
    /// Vaults asked about at each placement.
    pub trials_per_placement: usize,
    /// Wrap document and question in the chat template (instruct models); `false`: plain
    /// `"{document}\n\n{question}\nAnswer:"` (base models).
    pub chat: bool,
    /// Longest answer, in tokens (generation also stops at the model's end of sequence).
    pub max_new_tokens: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            words: None,
            trials_per_placement: 5,
            chat: true,
            max_new_tokens: 16,
        }
    }
}

/// One trial's prompt as token ids, and the index of the token where the key sentence
/// starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prompt {
    pub ids: Vec<u32>,
    pub key_token: usize,
}

/// One answered trial.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Answer {
    pub placement: Placement,
    pub vault: usize,
    pub expected: String,
    pub reply: String,
    pub reply_ids: Vec<u32>,
    pub correct: bool,
    pub prompt_tokens: usize,
    pub key_token: usize,
}

/// The score at one placement.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct PlacementScore {
    pub placement: Placement,
    pub trials: usize,
    pub correct: usize,
    pub accuracy: f64,
    /// Mean index of the key sentence's first token in the prompts.
    pub mean_key_token: f64,
}

/// What `anatomy lost-in-middle` reports.
#[derive(Clone, Debug, PartialEq, serde::Serialize)]
pub struct Report {
    pub model_type: String,
    pub max_position_embeddings: usize,
    /// Filler words per document (at least; the filler ends on a whole sentence).
    pub words: usize,
    /// Shortest and longest document, in words, key sentence included.
    pub min_document_words: usize,
    pub max_document_words: usize,
    /// The prompt length the documents were fitted to (when `words` was not given).
    pub target_prompt_tokens: Option<usize>,
    pub min_prompt_tokens: usize,
    pub max_prompt_tokens: usize,
    pub chat: bool,
    pub max_new_tokens: usize,
    pub trials_per_placement: usize,
    pub placements: Vec<PlacementScore>,
    pub answers: Vec<Answer>,
}

// ANCHOR: prompt
/// The prompt text of a trial. With `chat`, a system message and one user turn holding
/// document and question, followed by the assistant's header: Qwen3 models get their
/// template's `enable_thinking=false` (an empty think block, so the answer comes first);
/// Qwen2 / Qwen2.5 templates have no thinking switch and, given a system message, render
/// the same ChatML as Qwen3's without it — as does SmolLM2's own template (`llama`).
pub fn prompt_text(trial: &Trial, chat: bool, model_type: &str) -> Result<String> {
    let user = format!("{}\n\n{}", trial.document, trial.question);
    if !chat {
        return Ok(format!("{user}\nAnswer:"));
    }
    let opts = ChatOptions {
        add_generation_prompt: true,
        enable_thinking: model_type.starts_with("qwen3").then_some(false),
    };
    render(
        &[
            Message::new("system", SYSTEM_PROMPT),
            Message::new("user", &user),
        ],
        &[],
        &opts,
    )
}
// ANCHOR_END: prompt

/// [`prompt_text`] tokenised, with the position of the key sentence.
pub fn prompt(tok: &Tokenizer, trial: &Trial, chat: bool, model_type: &str) -> Result<Prompt> {
    let text = prompt_text(trial, chat, model_type)?;
    // build_trial puts the key sentence in every document, so it is always found.
    let at = text.find(&trial.key).unwrap_or(text.len());
    Ok(Prompt {
        ids: tok.encode(&text)?,
        key_token: tok.encode(&text[..at])?.len(),
    })
}

/// The largest number of filler words per document such that every prompt of the run has
/// at most `limit` tokens (prompts grow with the words, so a bisection between
/// `MIN_WORDS` and `2 · limit` words finds it; every word is at least one token).
pub fn fit_words(
    tok: &Tokenizer,
    trials_per_placement: usize,
    chat: bool,
    model_type: &str,
    limit: usize,
) -> Result<usize> {
    let fits = |words: usize| -> Result<bool> {
        for t in lost_in_middle::each_trial(words, trials_per_placement) {
            if prompt(tok, &t, chat, model_type)?.ids.len() > limit {
                return Ok(false);
            }
        }
        Ok(true)
    };
    let (mut lo, mut hi) = (MIN_WORDS, 2 * limit);
    if !fits(lo)? {
        return Err(Error::Invalid(format!(
            "a context of {limit} tokens for the prompt is too short for a document of {MIN_WORDS} words (max_position_embeddings minus the answer's tokens)"
        )));
    }
    if fits(hi)? {
        return Ok(hi);
    }
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        if fits(mid)? {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    Ok(lo)
}

/// Shortest document [`fit_words`] accepts.
const MIN_WORDS: usize = 50;

/// Checks the options against the limits and the model's context before anything is
/// built; returns the room a prompt has (the context minus the answer).
fn prompt_room(c: &crate::qwen3::Qwen3Config, opts: &Options) -> Result<usize> {
    if opts.trials_per_placement == 0 || opts.max_new_tokens == 0 || opts.words == Some(0) {
        return Err(Error::Invalid(
            "trials per placement, new tokens and words must each be at least 1".into(),
        ));
    }
    let trials = opts.trials_per_placement as u128;
    crate::limits::check("lost-in-middle", "--trials", trials, crate::limits::TRIALS)?;
    let room = c
        .max_position_embeddings
        .checked_sub(opts.max_new_tokens)
        .filter(|&r| r > 0)
        .ok_or_else(|| {
            Error::Invalid(format!(
                "{} new tokens leave no room for a prompt in max_position_embeddings = {}",
                opts.max_new_tokens, c.max_position_embeddings
            ))
        })?;
    // Every word is at least one token: more words than room is refused unbuilt.
    if let Some(w) = opts.words.filter(|&w| w > room) {
        return Err(Error::Invalid(format!(
            "lost-in-middle: --words {w}: every word is at least one token, and {} new tokens leave room for {room} in max_position_embeddings = {}",
            opts.max_new_tokens, c.max_position_embeddings
        )));
    }
    Ok(room)
}

/// Runs every trial through `model`: prompt → ids → greedy answer → scored. `progress`
/// sees `(trials done, trials)`.
pub fn run(
    model: &Model,
    tok: &Tokenizer,
    opts: &Options,
    mut progress: impl FnMut(usize, usize),
) -> Result<Report> {
    let c = &model.config;
    let n = opts.trials_per_placement;
    let room = prompt_room(c, opts)?;
    let (words, target) = match opts.words {
        Some(w) => (w, None),
        None => {
            let limit = DOCUMENT_TOKENS.min(room);
            (
                fit_words(tok, n, opts.chat, &c.model_type, limit)?,
                Some(limit),
            )
        }
    };
    // Every document and its prompt are held at once: about 16 bytes a word each.
    crate::limits::check_memory(
        &format!("lost-in-middle: {} documents of {words} words", 3 * n),
        3 * n as u128 * words as u128 * 16,
    )?;
    let trials = lost_in_middle::trials(words, n);
    let prompts = trials
        .iter()
        .map(|t| prompt(tok, t, opts.chat, &c.model_type))
        .collect::<Result<Vec<_>>>()?;
    let doc_words = trials.iter().map(|t| t.document.split_whitespace().count());
    let lengths = prompts.iter().map(|p| p.ids.len());
    let (shortest, longest) = (
        lengths.clone().min().unwrap_or(0),
        lengths.max().unwrap_or(0),
    );
    if longest > room {
        return Err(Error::Invalid(format!(
            "documents of {words} words make prompts of up to {longest} tokens; with {} new tokens that is past max_position_embeddings = {} (use fewer words)",
            opts.max_new_tokens, c.max_position_embeddings
        )));
    }

    let mut answers = Vec::with_capacity(trials.len());
    for (i, (t, p)) in trials.iter().zip(&prompts).enumerate() {
        let mut ids =
            generate_until_eos(model, &p.ids, opts.max_new_tokens, Sampling::Greedy, None)?;
        if ids.last().is_some_and(|id| c.eos_token_ids.contains(id)) {
            ids.pop(); // the end-of-sequence token is not part of the answer
        }
        let reply = tok.decode(&ids)?;
        answers.push(Answer {
            placement: t.placement,
            vault: t.vault,
            expected: t.answer.clone(),
            correct: t.is_answered_by(&reply),
            reply,
            reply_ids: ids,
            prompt_tokens: p.ids.len(),
            key_token: p.key_token,
        });
        progress(i + 1, trials.len());
    }
    let placements = placement_scores(&answers);
    Ok(Report {
        model_type: c.model_type.clone(),
        max_position_embeddings: c.max_position_embeddings,
        words,
        min_document_words: doc_words.clone().min().unwrap_or(0),
        max_document_words: doc_words.max().unwrap_or(0),
        target_prompt_tokens: target,
        min_prompt_tokens: shortest,
        max_prompt_tokens: longest,
        chat: opts.chat,
        max_new_tokens: opts.max_new_tokens,
        trials_per_placement: n,
        placements,
        answers,
    })
}

/// Accuracy and mean key position at each placement.
fn placement_scores(answers: &[Answer]) -> Vec<PlacementScore> {
    let results: Vec<(Placement, bool)> =
        answers.iter().map(|a| (a.placement, a.correct)).collect();
    lost_in_middle::accuracy(&results)
        .iter()
        .map(|&(placement, accuracy)| {
            let here: Vec<&Answer> = answers
                .iter()
                .filter(|a| a.placement == placement)
                .collect();
            PlacementScore {
                placement,
                trials: here.len(),
                correct: here.iter().filter(|a| a.correct).count(),
                accuracy,
                mean_key_token: here.iter().map(|a| a.key_token as f64).sum::<f64>()
                    / here.len().max(1) as f64,
            }
        })
        .collect()
}

/// The report as a table: accuracy per placement, then every answer.
pub fn text_report(r: &Report) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "lost in the middle (S1 exercise 2) on a {} model with a context of {} positions",
        r.model_type, r.max_position_embeddings
    );
    let fitted = r.target_prompt_tokens.map_or(String::new(), |t| {
        format!(", fitted to at most {t} = min({DOCUMENT_TOKENS}, context − answer)")
    });
    let _ = writeln!(
        s,
        "documents of {}–{} words: prompts of {}–{} tokens{fitted}; {}, greedy answers of up to {} tokens; trials per placement: {}",
        r.min_document_words,
        r.max_document_words,
        r.min_prompt_tokens,
        r.max_prompt_tokens,
        if r.chat {
            "chat template"
        } else {
            "plain prompt"
        },
        r.max_new_tokens,
        r.trials_per_placement
    );
    let _ = writeln!(
        s,
        "{:<9} {:>19} {:>9} {:>9}",
        "placement", "key at token (mean)", "correct", "accuracy"
    );
    for p in &r.placements {
        let _ = writeln!(
            s,
            "{:<9} {:>19.0} {:>9} {:>9.2}",
            p.placement.name(),
            p.mean_key_token,
            format!("{}/{}", p.correct, p.trials),
            p.accuracy
        );
    }
    let _ = writeln!(s, "answers:");
    for a in &r.answers {
        let _ = writeln!(
            s,
            "  {:<6} vault {:<2} key at token {:>5} of {:>5}  expected {}  {}  {:?}",
            a.placement.name(),
            a.vault,
            a.key_token,
            a.prompt_tokens,
            a.expected,
            if a.correct { "right" } else { "wrong" },
            a.reply
        );
    }
    s
}
