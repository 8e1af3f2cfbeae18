//! Generation: prefill the prompt once, then one decode step per new token, choosing each
//! token greedily (argmax, what transformers' `generate(do_sample=False)` does) or by
//! sampling at a temperature from the smallest set of tokens whose probability reaches
//! `top_p` (nucleus sampling, transformers' `TopPLogitsWarper`), with a seeded generator so
//! a run can be repeated.
//!
//! The end of the file wires generation to the other chapters for `anatomy generate` and
//! `anatomy glitch --repeat`: text in through the tokenizer and the chat template, the
//! thinking budget of chapter 8, the "please repeat" test of chapter 4, text out.

use crate::chat::thinking::{self, ThinkingBudget};
use crate::error::{Error, Result};
use crate::kernels::softmax_in_place;
use crate::qwen3::model::{Logits, Model, Session};
use crate::qwen3::trace::Trace;
use crate::tokenizer::glitch::{self, GlitchReport, Repetition};
use crate::tokenizer::{Tokenizer, parse_id_ranges};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::Path;

/// How the next token is chosen.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Sampling {
    Greedy,
    TopP {
        temperature: f32,
        top_p: f32,
        seed: u64,
    },
}

impl Sampling {
    /// Greedy without a temperature, nucleus sampling with one (as transformers'
    /// `do_sample` follows from passing a temperature on the command line).
    pub fn from_temperature(temperature: Option<f32>, top_p: f32, seed: u64) -> Sampling {
        match temperature {
            None => Sampling::Greedy,
            Some(temperature) => Sampling::TopP {
                temperature,
                top_p,
                seed,
            },
        }
    }
}

/// What to generate.
#[derive(Clone, Debug, PartialEq)]
pub struct GenerateOptions {
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    /// Stop after producing one of these (it is included in the output).
    pub stop: Vec<u32>,
}

/// The index of the largest value (the first one on ties, as `torch.argmax`).
pub fn argmax(x: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in x.iter().enumerate() {
        if v > x[best] {
            best = i;
        }
    }
    best
}

/// Reusable buffers for [`sample_top_p`].
#[derive(Debug, Default)]
pub struct SampleScratch {
    probs: Vec<f32>,
    order: Vec<usize>,
}

/// Samples from `softmax(logits / temperature)` restricted to the nucleus: tokens taken in
/// order of decreasing probability while the mass before them is below `top_p` (so at least
/// one token, and the one that crosses `top_p` is kept — transformers' rule).
pub fn sample_top_p(
    logits: &[f32],
    temperature: f32,
    top_p: f32,
    rng: &mut impl Rng,
    s: &mut SampleScratch,
) -> usize {
    s.probs.clear();
    s.probs.extend(logits.iter().map(|l| l / temperature));
    if s.probs.iter().any(|p| !p.is_finite()) {
        // A temperature so small that logits / T overflow f32 (1e-40): shift by the
        // largest logit first, so the top token gets exp(0) = 1 and the others exp(−∞) = 0
        // — the greedy limit that sampling approaches as T → 0.
        let max = logits.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        s.probs.clear();
        s.probs
            .extend(logits.iter().map(|l| (l - max) / temperature));
    }
    softmax_in_place(&mut s.probs);
    s.order.clear();
    s.order.extend(0..logits.len());
    let probs = &s.probs;
    s.order
        .sort_unstable_by(|&a, &b| probs[b].total_cmp(&probs[a]).then(a.cmp(&b)));
    // ANCHOR: nucleus
    let mut kept = 0;
    let mut mass = 0.0f32;
    for &i in &s.order {
        if kept > 0 && mass >= top_p {
            break;
        }
        mass += probs[i];
        kept += 1;
    }
    let r = rng.random::<f32>() * mass;
    let mut acc = 0.0f32;
    for &i in &s.order[..kept] {
        acc += probs[i];
        if r < acc {
            return i;
        }
    }
    s.order[kept - 1]
    // ANCHOR_END: nucleus
}

/// Generates up to `opts.max_new_tokens` tokens after `prompt`; returns the new ids.
/// `on_token` sees each one as it is chosen.
pub fn generate(
    model: &Model,
    prompt: &[u32],
    opts: &GenerateOptions,
    mut on_token: impl FnMut(u32),
) -> Result<Vec<u32>> {
    check_sampling(opts.sampling)?;
    if opts.max_new_tokens == 0 {
        return Ok(Vec::new());
    }
    // The last new token is never fed back, so the cache needs one position less.
    let positions = (prompt.len() as u128 + opts.max_new_tokens as u128 - 1)
        .try_into()
        .unwrap_or(usize::MAX);
    let max = model.config.max_position_embeddings;
    if positions > max {
        return Err(Error::Invalid(format!(
            "a prompt of {} tokens plus {} new ones needs {positions} positions, past max_position_embeddings = {max}",
            prompt.len(),
            opts.max_new_tokens
        )));
    }
    let mut session: Session = model.session(positions)?;
    let mut rng = rng_for(opts.sampling);
    let mut scratch = SampleScratch::default();
    let mut out = Vec::with_capacity(opts.max_new_tokens);
    let mut logits = model.forward(&mut session, prompt, Logits::Last, None)?;
    loop {
        let next = choose(logits, opts.sampling, &mut rng, &mut scratch);
        out.push(next);
        on_token(next);
        if out.len() == opts.max_new_tokens || opts.stop.contains(&next) {
            return Ok(out);
        }
        logits = model.forward(&mut session, &[next], Logits::Last, None)?;
    }
}

/// The next token from one row of logits, greedy or sampled.
fn choose(logits: &[f32], sampling: Sampling, rng: &mut StdRng, s: &mut SampleScratch) -> u32 {
    (match sampling {
        Sampling::Greedy => argmax(logits),
        Sampling::TopP {
            temperature, top_p, ..
        } => sample_top_p(logits, temperature, top_p, rng, s),
    }) as u32
}

fn rng_for(sampling: Sampling) -> StdRng {
    match sampling {
        Sampling::TopP { seed, .. } => StdRng::seed_from_u64(seed),
        Sampling::Greedy => StdRng::seed_from_u64(0),
    }
}

fn check_sampling(sampling: Sampling) -> Result<()> {
    if let Sampling::TopP {
        temperature, top_p, ..
    } = sampling
    {
        if !(temperature.is_finite() && temperature > 0.0) {
            return Err(Error::Invalid(format!(
                "temperature must be a positive number, got {temperature}"
            )));
        }
        if !(top_p > 0.0 && top_p <= 1.0) {
            return Err(Error::Invalid(format!(
                "top_p must be in (0, 1], got {top_p}"
            )));
        }
    }
    Ok(())
}

/// Next-token prediction for loops that own the context (such as the chat chapter's
/// thinking budget, which appends tokens of its own): each call gets the whole context,
/// runs only the positions the KV cache has not seen, and chooses the next token.
pub struct Stepper<'m, 'a> {
    model: &'m Model<'a>,
    session: Session,
    fed: Vec<u32>,
    sampling: Sampling,
    rng: StdRng,
    scratch: SampleScratch,
}

impl<'m, 'a> Stepper<'m, 'a> {
    /// A stepper for contexts of up to `capacity` positions.
    pub fn new(model: &'m Model<'a>, capacity: usize, sampling: Sampling) -> Result<Self> {
        check_sampling(sampling)?;
        Ok(Stepper {
            model,
            session: model.session(capacity)?,
            fed: Vec::with_capacity(capacity),
            sampling,
            rng: rng_for(sampling),
            scratch: SampleScratch::default(),
        })
    }

    /// The token after `context`, which must extend every context seen before.
    pub fn next_token(&mut self, context: &[u32]) -> Result<u32> {
        if !context.starts_with(&self.fed) || context.len() == self.fed.len() {
            return Err(Error::Invalid(
                "each context must extend the previous one by at least one token".into(),
            ));
        }
        let new = &context[self.fed.len()..];
        let logits = self
            .model
            .forward(&mut self.session, new, Logits::Last, None)?;
        self.fed.extend_from_slice(new);
        Ok(choose(
            logits,
            self.sampling,
            &mut self.rng,
            &mut self.scratch,
        ))
    }

    /// Records a [`Trace`] of each following step into the session (`None` stops); after
    /// a step, [`Stepper::trace`] describes the positions it ran.
    pub fn set_trace(&mut self, trace: Option<Trace>) {
        self.session.trace = trace;
    }

    /// The record of the last step, when tracing.
    pub fn trace(&self) -> Option<&Trace> {
        self.session.trace.as_ref()
    }

    /// The logits `[vocab]` the last step chose from (before temperature and top-p).
    pub fn last_logits(&self) -> &[f32] {
        self.session.last_logits()
    }
}

/// Generates up to `max_new_tokens` after `prompt`, stopping after one of the model's
/// end-of-sequence ids. With a `budget`, through chapter 8's loop, which appends the
/// early-stop text once the thinking tokens are spent.
pub fn generate_until_eos(
    model: &Model,
    prompt: &[u32],
    max_new_tokens: usize,
    sampling: Sampling,
    budget: Option<&ThinkingBudget>,
) -> Result<Vec<u32>> {
    let stop = model.config.eos_token_ids.clone();
    match budget {
        Some(budget) => {
            let capacity = prompt.len().saturating_add(max_new_tokens);
            let max = model.config.max_position_embeddings;
            if capacity > max {
                return Err(Error::Invalid(format!(
                    "a prompt of {} tokens plus {max_new_tokens} new ones needs more than max_position_embeddings = {max} positions",
                    prompt.len()
                )));
            }
            let mut step = Stepper::new(model, capacity, sampling)?;
            let g = thinking::generate_with_budget(prompt, max_new_tokens, &stop, budget, |c| {
                step.next_token(c)
            })?;
            Ok(g.ids)
        }
        None => {
            let opts = GenerateOptions {
                max_new_tokens,
                sampling,
                stop,
            };
            generate(model, prompt, &opts, |_| {})
        }
    }
}

/// The tokenizer for a model: a GGUF file's own (its `tokenizer.ggml.*` metadata; an
/// error naming the key when it carries none), or a directory's `tokenizer.json` if it
/// has one, else Qwen's vocabulary (`data/qwen.tiktoken`). A `tokenizer.json` that is there
/// but is not a readable regular file (a FIFO, a dangling link) is an error, not a silent
/// fallback.
pub fn model_tokenizer(dir: &Path) -> Result<Tokenizer> {
    if crate::qwen3::is_gguf(dir) {
        return Ok(crate::tokenizer::gguf_vocab::open(dir)?.tokenizer);
    }
    let own = dir.join("tokenizer.json");
    if std::fs::symlink_metadata(&own).is_ok() {
        Tokenizer::from_file(&own)
    } else {
        Tokenizer::qwen()
    }
}

/// A GGUF file's tokenizer and the ids of `text` as llama.cpp tokenizes a prompt (BOS first
/// when the file's `add_bos_token` says so, control tokens parsed). With `chat`, `text` is
/// first one user turn followed by the assistant's header ([`gguf_chat`]).
pub fn gguf_prompt(file: &Path, text: &str, chat: bool) -> Result<(Tokenizer, Vec<u32>)> {
    let (vocab, prompt) = if chat {
        let opts = crate::chat::ChatOptions {
            add_generation_prompt: true,
            enable_thinking: None,
        };
        gguf_chat(file, &[crate::chat::Message::new("user", text)], &opts)?
    } else {
        (crate::tokenizer::gguf_vocab::open(file)?, text.to_string())
    };
    let ids = vocab.encode(&prompt, true, true)?;
    Ok((vocab.tokenizer, ids))
}

/// A GGUF file's tokenizer and `messages` in its chat template: the hand-written Qwen3
/// template for Qwen files (the one chapter 8 teaches), else the file's own
/// `tokenizer.chat_template` ([`crate::chat::jinja`], where `enable_thinking` has no say).
pub fn gguf_chat(
    file: &Path,
    messages: &[crate::chat::Message],
    opts: &crate::chat::ChatOptions,
) -> Result<(crate::tokenizer::gguf_vocab::GgufVocab, String)> {
    let gguf = crate::gguf::Gguf::open(file)?;
    let vocab = crate::tokenizer::gguf_vocab::tokenizer_from_gguf(&gguf)?;
    let text = match gguf.get_str("general.architecture")? {
        Some(arch) if arch.starts_with("qwen") => crate::chat::render(messages, &[], opts)?,
        _ => crate::chat::jinja::render_gguf_chat(
            file,
            &vocab,
            messages,
            opts.add_generation_prompt,
        )?,
    };
    Ok((vocab, text))
}

/// The prompt of a [`TextRequest`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prompt<'a> {
    /// Token ids as the command line writes them, e.g. `1,2,5-9` ([`parse_id_ranges`]). Kept
    /// as text so that it is read after the tokenizer is loaded, the order in which
    /// `anatomy generate` has always reported errors.
    Ids(&'a str),
    /// Text for the model's tokenizer; with `chat`, first wrapped as one user turn in the
    /// Qwen3 chat template, followed by the assistant's header.
    Text { text: &'a str, chat: bool },
}

/// What `anatomy generate` asks for.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TextRequest<'a> {
    pub prompt: Prompt<'a>,
    pub max_new_tokens: usize,
    pub sampling: Sampling,
    /// Cap on the tokens inside `<think>` … `</think>` (chapter 8).
    pub thinking_budget: Option<usize>,
}

/// A [`TextRequest`] with its tokenizer loaded and its prompt as ids, ready to run.
pub struct PreparedText {
    tok: Option<Tokenizer>,
    prompt: Vec<u32>,
    /// Whether the prompt was text, so the answer is shown as text too.
    decode: bool,
    max_new_tokens: usize,
    sampling: Sampling,
    thinking_budget: Option<usize>,
}

/// What a [`PreparedText`] generated: the new ids, and their text when the prompt was text.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize)]
pub struct Generated {
    pub ids: Vec<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub text: Option<String>,
}

impl TextRequest<'_> {
    /// Loads the tokenizer of `model_dir` if the request needs one (a text prompt or a
    /// thinking budget) and turns the prompt into ids, before any weight is loaded.
    pub fn prepare(&self, model_dir: &Path) -> Result<PreparedText> {
        let (tok, prompt) = match self.prompt {
            Prompt::Ids(list) => {
                let tok = self
                    .thinking_budget
                    .map(|_| model_tokenizer(model_dir))
                    .transpose()?;
                (tok, parse_id_ranges(list)?)
            }
            Prompt::Text { text, chat } if crate::qwen3::is_gguf(model_dir) => {
                let (tok, ids) = gguf_prompt(model_dir, text, chat)?;
                (Some(tok), ids)
            }
            Prompt::Text { text, chat } => {
                let tok = model_tokenizer(model_dir)?;
                let ids = if chat {
                    let user = crate::chat::Message::new("user", text);
                    let opts = crate::chat::ChatOptions {
                        add_generation_prompt: true,
                        enable_thinking: None,
                    };
                    tok.encode(&crate::chat::render(&[user], &[], &opts)?)?
                } else {
                    tok.encode(text)?
                };
                (Some(tok), ids)
            }
        };
        Ok(PreparedText {
            tok,
            prompt,
            decode: matches!(self.prompt, Prompt::Text { .. }),
            max_new_tokens: self.max_new_tokens,
            sampling: self.sampling,
            thinking_budget: self.thinking_budget,
        })
    }
}

impl PreparedText {
    /// Generates on `model` (the one in the directory the request was prepared for) until
    /// end of sequence or `max_new_tokens`, within the thinking budget if there is one.
    pub fn run(&self, model: &Model) -> Result<Generated> {
        let budget = match (self.thinking_budget, &self.tok) {
            (Some(n), Some(tok)) => Some(ThinkingBudget::for_tokenizer(n, tok)?),
            _ => None,
        };
        let ids = generate_until_eos(
            model,
            &self.prompt,
            self.max_new_tokens,
            self.sampling,
            budget.as_ref(),
        )?;
        let text = match (self.decode, &self.tok) {
            (true, Some(tok)) => Some(tok.decode(&ids)?),
            _ => None,
        };
        Ok(Generated { ids, text })
    }
}

/// New tokens each answer of the "please repeat" test may have.
pub const REPETITION_NEW_TOKENS: usize = 16;

/// Chapter 4's "please repeat" test on `model`: the first `n` candidates of a glitch
/// report's checkpoint screen ([`glitch::repetition_candidates`]), each answered greedily.
pub fn glitch_repetition_test(
    model: &Model,
    tok: &Tokenizer,
    report: &GlitchReport,
    n: usize,
) -> Result<Vec<Repetition>> {
    let candidates = glitch::repetition_candidates(report, n);
    glitch::repetition_test(tok, &candidates, |prompt| {
        generate_until_eos(model, prompt, REPETITION_NEW_TOKENS, Sampling::Greedy, None)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_json_has_text_only_for_a_text_prompt() {
        let ids_only = Generated {
            ids: vec![1, 2],
            text: None,
        };
        assert_eq!(
            serde_json::to_string(&ids_only).unwrap(),
            r#"{"ids":[1,2]}"#
        );
        let with_text = Generated {
            ids: vec![3],
            text: Some("a".into()),
        };
        assert_eq!(
            serde_json::to_string(&with_text).unwrap(),
            r#"{"ids":[3],"text":"a"}"#
        );
        assert_eq!(Sampling::from_temperature(None, 0.5, 1), Sampling::Greedy);
    }

    #[test]
    fn argmax_takes_the_first_of_ties() {
        assert_eq!(argmax(&[1.0, 3.0, 3.0, 2.0]), 1);
    }

    #[test]
    fn tiny_top_p_is_greedy_and_top_p_one_follows_the_distribution() {
        let logits = [0.0f32, 1.0, 2.0, 0.5];
        let mut rng = StdRng::seed_from_u64(7);
        let mut s = SampleScratch::default();
        for _ in 0..50 {
            assert_eq!(sample_top_p(&logits, 1.0, 1e-6, &mut rng, &mut s), 2);
        }
        // top_p = 1: frequencies approach softmax(logits).
        let mut p = logits.to_vec();
        softmax_in_place(&mut p);
        let trials = 40_000;
        let mut counts = [0usize; 4];
        for _ in 0..trials {
            counts[sample_top_p(&logits, 1.0, 1.0, &mut rng, &mut s)] += 1;
        }
        for (c, pi) in counts.iter().zip(&p) {
            let f = *c as f32 / trials as f32;
            // 5 standard deviations of a binomial proportion.
            assert!((f - pi).abs() < 5.0 * (pi * (1.0 - pi) / trials as f32).sqrt());
        }
    }

    #[test]
    fn a_vanishing_temperature_approaches_greedy() {
        let logits = [0.5f32, 3.0, 2.9, -1.0];
        let mut rng = StdRng::seed_from_u64(3);
        let mut s = SampleScratch::default();
        for _ in 0..200 {
            assert_eq!(sample_top_p(&logits, 1e-40, 1.0, &mut rng, &mut s), 1);
        }
    }

    #[test]
    fn nucleus_keeps_the_token_that_crosses_top_p() {
        // probabilities ≈ [0.64, 0.24, 0.09, 0.03]: top_p 0.7 keeps the first two only.
        let logits = [3.0f32, 2.0, 1.0, 0.0];
        let mut rng = StdRng::seed_from_u64(1);
        let mut s = SampleScratch::default();
        let mut seen = [false; 4];
        for _ in 0..2000 {
            seen[sample_top_p(&logits, 1.0, 0.7, &mut rng, &mut s)] = true;
        }
        assert_eq!(seen, [true, true, false, false]);
    }
}
