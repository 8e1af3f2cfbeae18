//! Chapter 12 — a whole `anatomy train` run (source S0 5.4): the corpus through the
//! tokenizer, a fresh or resumed model, the loop, and the summary with a unigram baseline.

use super::super::data::{Corpus, load_corpus};
use super::super::params::Params;
use super::{TrainOptions, TrainState, load_checkpoint, train};
use crate::error::{Error, Result};
use serde::Serialize;
use std::path::{Path, PathBuf};

/// A whole `anatomy train` invocation.
#[derive(Clone, Debug)]
pub struct TrainJob {
    /// The checkpoint directory written (and, with `resume`, read).
    pub out: PathBuf,
    /// The model's config.json (ignored when resuming: the checkpoint has its own).
    pub config: PathBuf,
    /// A directory of UTF-8 .txt documents.
    pub data: PathBuf,
    /// The tokenizer (a tiktoken file or tokenizer.json).
    pub vocab: PathBuf,
    /// Ignored when resuming: trainer_state.json has the run's options.
    pub options: TrainOptions,
    pub resume: bool,
    /// Stop (with a checkpoint) after this step, to be resumed later.
    pub stop_after: Option<u64>,
    pub progress: bool,
}

/// What a run reached.
#[derive(Clone, Debug, Serialize)]
pub struct TrainSummary {
    pub out: PathBuf,
    pub num_parameters: usize,
    pub muon_parameters: usize,
    pub adamw_parameters: usize,
    pub train_tokens: usize,
    pub heldout_tokens: usize,
    pub steps_done: u64,
    pub steps: u64,
    pub first_loss: Option<f32>,
    pub last_loss: Option<f32>,
    pub heldout_loss: Option<f32>,
    pub heldout_perplexity: Option<f32>,
    /// The held-out cross-entropy of a unigram model of the training split (add-one
    /// smoothing over the tokens the corpus uses): what "learned something" must beat.
    pub unigram_heldout_loss: f32,
    pub tokens_per_s: Option<f64>,
}

/// Runs `job`: reads the corpus through the tokenizer, starts (or resumes) the model, and
/// trains it into `job.out`.
pub fn run(job: &TrainJob) -> Result<TrainSummary> {
    run_with(job, None, false)
}

/// [`run`], optionally starting from the model of the checkpoint `init` (its config.json;
/// `job.config` is then unused; the optimiser starts fresh) and with the router frozen
/// ([`TrainState::freeze_router`]; give it again when resuming): fine-tuning.
pub fn run_with(job: &TrainJob, init: Option<&Path>, freeze_router: bool) -> Result<TrainSummary> {
    let mut state = if job.resume {
        load_checkpoint(&job.out)?
    } else {
        let params = match init {
            Some(dir) => Params::load(dir)?,
            None => {
                let config = crate::qwen3::config::Qwen3Config::from_file(&job.config)?;
                Params::init(&config, job.options.seed)?
            }
        };
        job.options
            .validate(params.config.max_position_embeddings)?;
        TrainState::new(params, job.options.clone())?
    };
    if freeze_router {
        state.freeze_router();
    }
    let tok = crate::tokenizer::Tokenizer::from_file(&job.vocab)?;
    let corpus: Corpus = load_corpus(&job.data, &tok, state.options.heldout_fraction)?;
    let vocab = state.params.config.vocab_size;
    if let Some(&id) = corpus
        .train
        .iter()
        .chain(&corpus.heldout)
        .find(|&&t| t as usize >= vocab)
    {
        return Err(Error::Invalid(format!(
            "train: token id {id} of {} is past the model's vocab_size {vocab}",
            job.data.display()
        )));
    }
    let until = job.stop_after.unwrap_or(state.options.steps);
    let logs = train(
        &mut state,
        &corpus.train,
        &corpus.heldout,
        &job.out,
        until,
        job.progress,
    )?;
    let (muon, adamw) = state.optimizer.group_sizes();
    let heldout_loss = logs.iter().rev().find_map(|l| l.heldout_loss);
    Ok(TrainSummary {
        out: job.out.clone(),
        num_parameters: state.params.num_parameters(),
        muon_parameters: muon,
        adamw_parameters: adamw,
        train_tokens: corpus.train.len(),
        heldout_tokens: corpus.heldout.len(),
        steps_done: state.step,
        steps: state.options.steps,
        first_loss: logs.first().map(|l| l.loss),
        last_loss: logs.last().map(|l| l.loss),
        heldout_loss,
        heldout_perplexity: heldout_loss.map(f32::exp),
        unigram_heldout_loss: unigram_loss(&corpus.train, &corpus.heldout),
        tokens_per_s: logs.last().map(|l| l.tokens_per_s),
    })
}

/// Mean −ln p(t) over `heldout` under the unigram distribution of `train`, add-one smoothed
/// over the distinct tokens either split uses (a baseline for the held-out loss).
pub fn unigram_loss(train: &[u32], heldout: &[u32]) -> f32 {
    let mut counts: std::collections::HashMap<u32, u64> = std::collections::HashMap::new();
    for &t in train {
        *counts.entry(t).or_default() += 1;
    }
    for &t in heldout {
        counts.entry(t).or_default();
    }
    let total = train.len() as f64 + counts.len() as f64;
    let sum: f64 = heldout
        .iter()
        .map(|t| -(((counts[t] + 1) as f64) / total).ln())
        .sum();
    (sum / heldout.len().max(1) as f64) as f32
}

/// The summary as text.
pub fn text_summary(s: &TrainSummary) -> String {
    let f = |x: Option<f32>| x.map(|v| format!("{v:.4}")).unwrap_or("-".into());
    format!(
        "trained {}/{} steps into {}\n\
         parameters {} (Muon {}, AdamW {})\n\
         corpus {} training tokens, {} held out\n\
         loss {} → {}; held-out {} (perplexity {}); unigram baseline {:.4}\n\
         {:.0} tokens/s\n",
        s.steps_done,
        s.steps,
        s.out.display(),
        s.num_parameters,
        s.muon_parameters,
        s.adamw_parameters,
        s.train_tokens,
        s.heldout_tokens,
        f(s.first_loss),
        f(s.last_loss),
        f(s.heldout_loss),
        s.heldout_perplexity
            .map(|v| format!("{v:.1}"))
            .unwrap_or("-".into()),
        s.unigram_heldout_loss,
        s.tokens_per_s.unwrap_or(0.0),
    )
}
