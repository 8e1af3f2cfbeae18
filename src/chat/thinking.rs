//! Thinking tokens and the thinking budget (source 5.7.2–5.7.3). A reasoning model writes
//! `<think> … </think>` before its answer. To cap the reasoning at N tokens, the
//! generation loop counts the tokens produced after `<think>`; when N are spent and the
//! model has not closed the block itself, the loop appends the early-stop text
//! [`EARLY_STOP_TEXT`] ("Considering the limited time by the user, …", which ends with
//! `</think>` and so closes the block) to the model's own output and lets it continue with
//! the answer.
//!
//! The loop is generic: the model is any `FnMut(&[u32]) -> Result<u32>` that returns the
//! next token id for a context, and the early-stop text is tokenised by any text → ids
//! function, so the same code runs on a scripted source in tests and on the Qwen3 forward
//! pass in `anatomy generate --thinking-budget N`.

use crate::error::{Error, Result};
use crate::tokenizer::Tokenizer;

/// The early-stop text appended when the budget runs out (from the Qwen3 technical report,
/// quoted by the source in 5.7.3). It ends the think block itself.
pub const EARLY_STOP_TEXT: &str = "Considering the limited time by the user, I have to give the solution based on the thinking directly now.\n</think>\n\n";

/// Qwen3's ids for `<think>` and `</think>` (added tokens 151667 and 151668).
pub const QWEN3_THINK_START: u32 = 151_667;
pub const QWEN3_THINK_END: u32 = 151_668;

/// The budget and the token ids it needs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ThinkingBudget {
    /// Maximum number of tokens after `<think>` before the early stop.
    pub budget: usize,
    pub think_start: u32,
    pub think_end: u32,
    /// [`EARLY_STOP_TEXT`] as token ids.
    pub early_stop_ids: Vec<u32>,
}

/// Where the generation loop is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Phase {
    /// No `<think>` yet.
    BeforeThinking,
    /// Inside the think block, `spent` tokens so far.
    Thinking { spent: usize },
    /// After `</think>`.
    Answering,
}

/// Why generation ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StopReason {
    /// The model produced one of the stop ids (it is the last id of the output).
    StopToken,
    /// `max_new_tokens` ids were produced.
    MaxTokens,
}

/// What one budgeted generation produced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BudgetedGeneration {
    /// The new ids, injected early-stop tokens included.
    pub ids: Vec<u32>,
    /// Tokens counted inside the think block (`<think>` and `</think>` excluded).
    pub thinking_tokens: usize,
    /// Index in `ids` where the early-stop text starts, if it was injected.
    pub injected_at: Option<usize>,
    pub stop: StopReason,
}

impl ThinkingBudget {
    /// Tokenises [`EARLY_STOP_TEXT`] with `encode` and checks that `</think>` came out as the
    /// single `think_end` id (a tokenizer that splits it would leave the block open).
    pub fn new(
        budget: usize,
        think_start: u32,
        think_end: u32,
        encode: impl FnOnce(&str) -> Result<Vec<u32>>,
    ) -> Result<ThinkingBudget> {
        let early_stop_ids = encode(EARLY_STOP_TEXT)?;
        if !early_stop_ids.contains(&think_end) {
            return Err(Error::Invalid(format!(
                "the tokenizer did not map \"</think>\" in the early-stop text to id {think_end}: got {early_stop_ids:?}"
            )));
        }
        Ok(ThinkingBudget {
            budget,
            think_start,
            think_end,
            early_stop_ids,
        })
    }

    /// [`ThinkingBudget::new`] with `<think>` and `</think>` looked up in `tok`, the model's
    /// own vocabulary (Qwen3's ids are not every model's).
    pub fn for_tokenizer(budget: usize, tok: &Tokenizer) -> Result<ThinkingBudget> {
        let think_start = tag_id(tok, "<think>")?;
        let think_end = tag_id(tok, "</think>")?;
        ThinkingBudget::new(budget, think_start, think_end, |t| tok.encode(t))
    }

    /// The phase a prompt leaves generation in: inside a think block if the prompt opens
    /// one it does not close (some templates pre-fill `<think>\n`).
    pub fn initial_phase(&self, prompt: &[u32]) -> Phase {
        let open = prompt.iter().rposition(|&t| t == self.think_start);
        let close = prompt.iter().rposition(|&t| t == self.think_end);
        match (open, close) {
            (Some(o), Some(c)) if c > o => Phase::Answering,
            (Some(_), _) => Phase::Thinking { spent: 0 },
            (None, Some(_)) => Phase::Answering,
            (None, None) => Phase::BeforeThinking,
        }
    }
}

/// The id of `tag` in `tok`: an added token, or a vocabulary entry the tag encodes to alone.
fn tag_id(tok: &Tokenizer, tag: &str) -> Result<u32> {
    if let Some(id) = tok.added.id_of(tag) {
        return Ok(id);
    }
    match tok.encode(tag)?.as_slice() {
        &[id] => Ok(id),
        pieces => Err(Error::Invalid(format!(
            "--thinking-budget: the vocabulary {} has no `{tag}` token (the text splits into {} pieces), so a think block cannot be told apart; a budget needs a reasoning model's vocabulary, such as Qwen3's",
            tok.name,
            pieces.len()
        ))),
    }
}

// ANCHOR: budget_loop
/// Generates up to `max_new_tokens` ids after `prompt`, asking `next_token` for each one
/// (it receives the whole context: prompt plus everything generated or injected so far).
/// Once `budget.budget` tokens have been produced inside the think block, the early-stop
/// ids are appended instead of asking the model, and generation goes on with the answer.
/// Injected ids count towards `max_new_tokens`.
pub fn generate_with_budget(
    prompt: &[u32],
    max_new_tokens: usize,
    stop_ids: &[u32],
    budget: &ThinkingBudget,
    mut next_token: impl FnMut(&[u32]) -> Result<u32>,
) -> Result<BudgetedGeneration> {
    let mut context = prompt.to_vec();
    let mut phase = budget.initial_phase(prompt);
    let mut thinking_tokens = 0;
    let mut injected_at = None;
    let new = |ctx: &Vec<u32>| ctx.len() - prompt.len();
    while new(&context) < max_new_tokens {
        if let Phase::Thinking { spent } = phase
            && spent >= budget.budget
        {
            // Budget spent: close the block for the model, with a reason it can read.
            injected_at = Some(new(&context));
            context.extend_from_slice(&budget.early_stop_ids);
            phase = Phase::Answering;
            continue;
        }
        let t = next_token(&context)?;
        context.push(t);
        phase = match phase {
            Phase::BeforeThinking if t == budget.think_start => Phase::Thinking { spent: 0 },
            Phase::Thinking { .. } if t == budget.think_end => Phase::Answering,
            Phase::Thinking { spent } => {
                thinking_tokens += 1;
                Phase::Thinking { spent: spent + 1 }
            }
            other => other,
        };
        // ANCHOR_END: budget_loop
        if stop_ids.contains(&t) {
            return Ok(BudgetedGeneration {
                ids: context[prompt.len()..].to_vec(),
                thinking_tokens,
                injected_at,
                stop: StopReason::StopToken,
            });
        }
    }
    context.truncate(prompt.len() + max_new_tokens);
    Ok(BudgetedGeneration {
        ids: context[prompt.len()..].to_vec(),
        thinking_tokens,
        injected_at,
        stop: StopReason::MaxTokens,
    })
}

/// Splits a generated text into (reasoning, answer) at the last `</think>`, the way Qwen's
/// model card parses output: the reasoning without its tags and surrounding newlines, the
/// answer with leading newlines removed. Without `</think>` everything is answer.
pub fn split_thinking(text: &str) -> (&str, &str) {
    match text.rfind("</think>") {
        Some(end) => {
            let before = &text[..end];
            let reasoning = before
                .rsplit_once("<think>")
                .map_or(before, |(_, r)| r)
                .trim_matches('\n');
            (
                reasoning,
                text[end + "</think>".len()..].trim_start_matches('\n'),
            )
        }
        None => ("", text),
    }
}
