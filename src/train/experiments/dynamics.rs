//! Chapter 13.1 — training dynamics measured on runs of the trainer (source S0 5.3.2, 5.4,
//! 5.6; S1 Q4): router collapse, Muon's token efficiency, the max attention logit with and
//! without QK-clip, and the embedding norms of tokens absent from the corpus.
//!
//! Every run is chapter 12's loop ([`TrainState::train_step`] on the batches
//! [`crate::train::data::batch`] draws for each step, [`TrainState::heldout_loss`] at each
//! evaluation) on the default model (`data/train/qwen3-moe-anatomy.json`) and the real
//! corpus, with fixed seeds; only the checkpoints and the per-step log file of
//! `anatomy train` are left out, so that an experiment writes nothing but its compact
//! `results.json`. Each experiment's module holds its runs, its results and the rule that
//! turns them into a verdict (the claims registry calls that rule on the recorded file).
//! Claims: `train.collapse`, `train.muon_efficiency`, `train.max_logit`,
//! `train.glitch_decay`.

pub mod collapse;
pub mod glitch;
pub mod max_logit;
pub mod muon;

use super::ExperimentOptions;
use crate::error::{Error, Result};
use crate::qwen3::config::Qwen3Config;
use crate::tokenizer::Tokenizer;
use crate::train::data::{Corpus, batch, load_corpus};
use crate::train::params::Params;
use crate::train::trainer::{StepLog, TrainOptions, TrainState};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Instant;

/// The experiments of this group (claim ids of `shared/claims.md`).
pub const IDS: &[&str] = &[collapse::ID, muon::ID, max_logit::ID, glitch::ID];

/// The model every experiment trains, relative to the crate root (chapter 12's default).
pub const MODEL_CONFIG: &str = "data/train/qwen3-moe-anatomy.json";

/// Runs experiment `id` of this group.
pub fn run(id: &str, opts: &ExperimentOptions) -> Result<String> {
    let work = || match id {
        collapse::ID => collapse::run(opts),
        muon::ID => muon::run(opts),
        max_logit::ID => max_logit::run(opts),
        glitch::ID => glitch::run(opts),
        other => Err(Error::Invalid(format!(
            "experiment {other:?} is not in the dynamics group ({})",
            IDS.join(", ")
        ))),
    };
    if opts.threads == 0 {
        return work();
    }
    crate::limits::check(
        "experiments",
        "--threads",
        opts.threads as u128,
        crate::limits::THREADS,
    )?;
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(opts.threads)
        .build()
        .map_err(|e| {
            Error::Invalid(format!(
                "experiments: a pool of {} threads: {e}",
                opts.threads
            ))
        })?;
    pool.install(work)
}

/// The size of every run of an experiment: the recorded one, or the `--short` one that
/// only exercises the code path.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub struct Budget {
    pub steps: u64,
    pub batch_size: usize,
    pub seq_len: usize,
    pub eval_every: u64,
    pub eval_batches: usize,
    /// One log sample per this many steps (sums and maxima over the window).
    pub log_every: u64,
}

impl Budget {
    /// `steps` steps of 4 × 64 tokens (the recorded runs), or 3 steps of 2 × 16 (`--short`).
    pub fn new(steps: u64, short: bool) -> Budget {
        if short {
            return Budget {
                steps: 3,
                batch_size: 2,
                seq_len: 16,
                eval_every: 0,
                eval_batches: 1,
                log_every: 1,
            };
        }
        Budget {
            steps,
            batch_size: 4,
            seq_len: 64,
            eval_every: 50,
            eval_batches: 4,
            log_every: 10,
        }
    }

    /// Chapter 12's defaults with this budget, a warm-up of 5% of the steps, and no
    /// checkpoints.
    pub fn options(&self, seed: u64) -> TrainOptions {
        TrainOptions {
            steps: self.steps,
            batch_size: self.batch_size,
            seq_len: self.seq_len,
            warmup_steps: (self.steps / 20).max(1),
            eval_every: self.eval_every,
            eval_batches: self.eval_batches,
            checkpoint_every: 0,
            seed,
            ..TrainOptions::default()
        }
    }
}

/// Where and on what a results file was made.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Header {
    pub id: String,
    /// The command that records this file.
    pub command: String,
    pub short: bool,
    pub git_commit: Option<String>,
    pub cpu_model: Option<String>,
    pub cpu_flags: Vec<String>,
    /// Worker threads the runs had (older files hold what was asked for, 0 meaning all
    /// cores).
    pub threads: usize,
    pub wall_s: f64,
    pub train_tokens: usize,
    pub heldout_tokens: usize,
    pub budget: Budget,
}

/// One log sample: the window of steps ending at `step`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Sample {
    pub step: u64,
    /// Mean training loss over the window.
    pub loss: f32,
    pub heldout_loss: Option<f32>,
    /// The largest attention logit of any batch in the window.
    pub max_logit: f32,
    /// The largest gradient norm (before clipping) in the window.
    pub grad_norm: f32,
    pub qk_clipped_heads: usize,
    /// Per MoE layer, per expert: top-k picks summed over the window (kept when the
    /// experiment needs them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub expert_counts: Vec<Vec<usize>>,
    /// Numbers the experiment measures on the model at this step (see its module).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub probe: Vec<f32>,
}

/// One run: its options, its log, how long it took.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct RunRecord {
    pub name: String,
    pub options: TrainOptions,
    pub tie_word_embeddings: bool,
    pub steps_done: u64,
    /// Why the run stopped early (a non-finite loss), if it did.
    pub diverged: Option<String>,
    pub wall_s: f64,
    pub tokens_per_s: f64,
    /// The experiment's probe on the initial model (empty without one).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub initial_probe: Vec<f32>,
    pub log: Vec<Sample>,
}

impl RunRecord {
    /// The last held-out loss of the run.
    pub fn final_heldout(&self) -> Option<f32> {
        self.log.iter().rev().find_map(|s| s.heldout_loss)
    }

    /// The samples of the last `fraction` of the steps done (at least the last sample).
    pub fn tail(&self, fraction: f64) -> &[Sample] {
        let from = self.steps_done as f64 * (1.0 - fraction);
        let first = self
            .log
            .iter()
            .position(|s| s.step as f64 > from)
            .unwrap_or(self.log.len().saturating_sub(1));
        &self.log[first.min(self.log.len().saturating_sub(1))..]
    }
}

/// The corpus, the tokenizer and the model config every run of an experiment shares.
pub struct Setup {
    pub config: Qwen3Config,
    pub tok: Tokenizer,
    pub corpus: Corpus,
}

impl Setup {
    pub fn load(opts: &ExperimentOptions) -> Result<Setup> {
        let config = Qwen3Config::from_file(&crate_path(MODEL_CONFIG))?;
        let tok = Tokenizer::from_file(&opts.vocab)?;
        let corpus = load_corpus(&opts.data, &tok, TrainOptions::default().heldout_fraction)?;
        if let Some(&id) = corpus
            .train
            .iter()
            .chain(&corpus.heldout)
            .find(|&&t| t as usize >= config.vocab_size)
        {
            return Err(Error::Invalid(format!(
                "experiments: token id {id} of {} is past the model's vocab_size {}",
                opts.data.display(),
                config.vocab_size
            )));
        }
        Ok(Setup {
            config,
            tok,
            corpus,
        })
    }
}

/// A measurement of the model (one number per quantity the experiment tracks).
pub type Probe<'a> = &'a dyn Fn(&Params) -> Vec<f32>;

/// What a run keeps beside the losses.
pub struct Keep<'a> {
    pub expert_counts: bool,
    /// Measured on the model at every evaluation (and on the initial model).
    pub probe: Option<Probe<'a>>,
    /// A line on stderr at each evaluation.
    pub progress: bool,
}

/// Trains `params` with `options` on the setup's corpus, as `anatomy train` does, and
/// returns the record and the final state. A non-finite loss ends the run early and is
/// recorded (a run at a high learning rate may diverge: that is a result too).
pub fn train_run(
    setup: &Setup,
    name: &str,
    params: Params,
    options: TrainOptions,
    log_every: u64,
    keep: &Keep,
) -> Result<(RunRecord, TrainState)> {
    let tie_word_embeddings = params.config.tie_word_embeddings;
    let mut state = TrainState::new(params, options.clone())?;
    let o = &options;
    let (train, heldout) = (&setup.corpus.train, &setup.corpus.heldout);
    for (what, tokens) in [("training", train), ("held-out", heldout)] {
        crate::train::data::check_batch_shape(what, tokens.len(), o.batch_size, o.seq_len)?;
    }
    let mut grads = state.params.zeros_like();
    let mut log = Vec::new();
    let initial_probe = keep.probe.map(|p| p(&state.params)).unwrap_or_default();
    let mut window: Vec<StepLog> = Vec::new();
    let mut diverged = None;
    let start = Instant::now();
    while state.step < o.steps {
        let b = batch(train, o.batch_size, o.seq_len, state.step, o.seed);
        let line = match state.train_step(&b, &mut grads) {
            Ok(line) if line.max_logit.is_finite() && line.grad_norm.is_finite() => line,
            Ok(line) => {
                diverged = Some(format!(
                    "step {}: max logit {} / gradient norm {}",
                    line.step, line.max_logit, line.grad_norm
                ));
                break;
            }
            Err(Error::NonFinite { what, detail }) => {
                diverged = Some(format!("{what}: {detail}"));
                break;
            }
            Err(e) => return Err(e),
        };
        window.push(line);
        let step = state.step;
        let evaluate = step == o.steps || (o.eval_every > 0 && step.is_multiple_of(o.eval_every));
        if evaluate || step.is_multiple_of(log_every.max(1)) {
            let heldout_loss = if evaluate {
                Some(state.heldout_loss(heldout)?)
            } else {
                None
            };
            let probe = match (evaluate, keep.probe) {
                (true, Some(probe)) => probe(&state.params),
                _ => Vec::new(),
            };
            let sample = summarise(&window, heldout_loss, keep.expert_counts, probe);
            if keep.progress && evaluate {
                eprintln!(
                    "  {name}: step {step}/{} loss {:.3} held-out {:.3} max logit {:.2} ({:.0} s)",
                    o.steps,
                    sample.loss,
                    heldout_loss.unwrap_or(f32::NAN),
                    sample.max_logit,
                    start.elapsed().as_secs_f64()
                );
            }
            log.push(sample);
            window.clear();
        }
    }
    if !window.is_empty() {
        log.push(summarise(&window, None, keep.expert_counts, Vec::new()));
    }
    let wall_s = start.elapsed().as_secs_f64();
    let tokens = state.step as f64 * (o.batch_size * o.seq_len) as f64;
    let record = RunRecord {
        name: name.to_string(),
        options,
        tie_word_embeddings,
        steps_done: state.step,
        diverged,
        wall_s,
        tokens_per_s: tokens / wall_s.max(1e-9),
        initial_probe,
        log,
    };
    Ok((record, state))
}

/// One sample from the step logs of a window.
fn summarise(
    window: &[StepLog],
    heldout_loss: Option<f32>,
    keep_counts: bool,
    probe: Vec<f32>,
) -> Sample {
    let n = window.len().max(1) as f32;
    let mut expert_counts: Vec<Vec<usize>> = Vec::new();
    if keep_counts {
        for line in window {
            if expert_counts.is_empty() {
                expert_counts = line.expert_counts.clone();
                continue;
            }
            for (sum, counts) in expert_counts.iter_mut().zip(&line.expert_counts) {
                for (s, c) in sum.iter_mut().zip(counts) {
                    *s += c;
                }
            }
        }
    }
    Sample {
        step: window.last().map_or(0, |l| l.step),
        loss: window.iter().map(|l| l.loss).sum::<f32>() / n,
        heldout_loss,
        max_logit: window
            .iter()
            .map(|l| l.max_logit)
            .fold(f32::NEG_INFINITY, f32::max),
        grad_norm: window.iter().map(|l| l.grad_norm).fold(0.0, f32::max),
        qk_clipped_heads: window.iter().map(|l| l.qk_clipped_heads).sum(),
        expert_counts,
        probe,
    }
}

/// A header for experiment `id`, measured now (the wall time is filled in at the end).
pub fn header(id: &str, opts: &ExperimentOptions, setup: &Setup, budget: Budget) -> Header {
    let (cpu_model, cpu_flags) = super::cpu();
    Header {
        id: id.to_string(),
        command: format!("anatomy experiments {id} --record"),
        short: opts.short,
        git_commit: super::git_commit(),
        cpu_model,
        cpu_flags,
        // The pool the experiment runs in (`--threads`, or the global one of all cores).
        threads: rayon::current_num_threads(),
        wall_s: 0.0,
        train_tokens: setup.corpus.train.len(),
        heldout_tokens: setup.corpus.heldout.len(),
        budget,
    }
}

/// A path relative to the crate root.
pub fn crate_path(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join(rel)
}

/// Writes `value` as `dir/results.json` (pretty, atomically), creating `dir`.
pub fn write_results<T: Serialize>(dir: &Path, value: &T) -> Result<PathBuf> {
    std::fs::create_dir_all(dir).map_err(|source| Error::Write {
        path: dir.to_path_buf(),
        source,
    })?;
    let path = dir.join("results.json");
    let text = serde_json::to_string_pretty(value)
        .map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))?;
    crate::output::write_output(&path, |w| {
        w.write_all(text.as_bytes())?;
        w.write_all(b"\n")
    })?;
    Ok(path)
}

/// Reads `dir/results.json` as `T`; `Ok(None)` when the file does not exist.
pub fn read_results<T: for<'de> Deserialize<'de>>(dir: &Path) -> Result<Option<T>> {
    let path = dir.join("results.json");
    if !path.exists() {
        return Ok(None);
    }
    let bytes = crate::error::read_bounded(&path, crate::limits::JSON_FILE_BYTES, "results.json")?;
    serde_json::from_slice(&bytes)
        .map(Some)
        .map_err(|e| Error::Invalid(format!("{}: {e}", path.display())))
}

/// Mean and (max − min) of a list.
pub fn mean_and_range(xs: &[f64]) -> (f64, f64) {
    let n = xs.len().max(1) as f64;
    let mean = xs.iter().sum::<f64>() / n;
    let max = xs.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = xs.iter().copied().fold(f64::INFINITY, f64::min);
    (mean, if xs.is_empty() { 0.0 } else { max - min })
}
