//! Chapter 12 — the training loop (source S0 5.2–5.4, 5.6): batches from the corpus, the
//! loss and its gradients, gradient-norm clipping, the optimiser step (Muon for hidden
//! matrices, AdamW for the rest: [`super::optimizer`]), QK-clip, the aux-loss-free router
//! bias update, held-out evaluation, a JSON-lines log, and checkpoints that transformers
//! loads and that the loop resumes from.
//!
//! Determinism: batches are a pure function of (seed, step) ([`super::data::batch`]), the
//! initial model of the seed, and every reduction runs in a fixed order, so the same seed
//! gives the same losses bit for bit — and a run stopped at step N and resumed reaches step
//! 2N with the same numbers as one that never stopped (tests/train_loop.rs).
//!
//! A checkpoint directory holds `config.json` + `model.safetensors` (the model, f32, as
//! `save_pretrained` writes it), `trainer_state.safetensors` (AdamW's moments, Muon's
//! momentum, the router biases) and `trainer_state.json` (step and options), and the run's
//! log `train_log.jsonl`.

use super::backward::{LossOptions, Losses, loss_and_grads, loss_only};
use super::data::batch;
use super::optimizer::{Decay, Optimizer, OptimizerConfig, QkTensors, Schedule, qk_clip_layer};
use super::params::{Grads, Params};
use crate::error::{Error, Result};
use crate::optim::clip::clip_grad_norm_flat;
use crate::optim::muon::AdjustLr;
use serde::{Deserialize, Serialize};
use std::path::Path;
use std::time::Instant;

mod checkpoint;
mod run;
pub use checkpoint::{load_checkpoint, read_log, save_checkpoint};
use checkpoint::{open_log, write_log_line};
pub use run::{TrainJob, TrainSummary, run, run_with, text_summary, unigram_loss};

/// Everything that decides a run (saved in `trainer_state.json`, so a resumed run goes on
/// with the same choices).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrainOptions {
    /// Optimizer steps of the whole run (the schedule's length).
    pub steps: u64,
    pub batch_size: usize,
    pub seq_len: usize,
    pub adamw_lr: f64,
    pub muon_lr: f64,
    /// false: AdamW for every parameter (the baseline).
    pub muon: bool,
    pub weight_decay: f64,
    pub beta1: f64,
    pub beta2: f64,
    pub warmup_steps: u64,
    /// "cosine", "linear" or "constant" after warm-up.
    pub decay: String,
    /// The schedule's floor as a fraction of the peak.
    pub min_lr_rate: f64,
    /// Global gradient-norm threshold (0 = off).
    pub grad_clip: f32,
    /// QK-clip threshold τ on the largest attention logit (0 = off).
    pub qk_clip_tau: f32,
    /// The load-balancing loss weight; `None` = as the config says
    /// (`router_aux_loss_coef` when `output_router_logits`), 0 = off.
    pub aux_loss_coef: Option<f32>,
    /// Router z-loss weight (0 = off).
    pub z_loss_coef: f32,
    /// DeepSeek-V3's aux-loss-free balancing: each step, every expert's router bias moves
    /// by this much towards the mean load (0 = off). The bias only steers the top-k choice;
    /// Qwen3-MoE has no tensor for it, so it stays in `trainer_state.safetensors`.
    pub router_bias_speed: f32,
    pub seed: u64,
    /// Held-out loss every this many steps (0 = only at the end).
    pub eval_every: u64,
    pub eval_batches: usize,
    /// A checkpoint every this many steps (0 = only at the end).
    pub checkpoint_every: u64,
    /// The share of the corpus's documents held out for evaluation.
    pub heldout_fraction: f64,
}

impl Default for TrainOptions {
    fn default() -> Self {
        TrainOptions {
            steps: 1000,
            batch_size: 8,
            seq_len: 128,
            adamw_lr: 3e-3,
            muon_lr: 3e-3,
            muon: true,
            weight_decay: 0.1,
            beta1: 0.9,
            beta2: 0.95,
            warmup_steps: 50,
            decay: "cosine".into(),
            min_lr_rate: 0.1,
            grad_clip: 1.0,
            qk_clip_tau: 100.0,
            aux_loss_coef: None,
            z_loss_coef: 0.0,
            router_bias_speed: 0.0,
            seed: 0,
            eval_every: 100,
            eval_batches: 4,
            checkpoint_every: 250,
            heldout_fraction: 0.05,
        }
    }
}

impl TrainOptions {
    /// Refuses options no run can use, naming the option.
    pub fn validate(&self, max_positions: usize) -> Result<()> {
        let bad = |what: &str, why: &str| Err(Error::Invalid(format!("train: {what} {why}")));
        if self.batch_size == 0 || self.seq_len < 2 {
            return bad("--batch-size / --seq-len", "must be ≥ 1 / ≥ 2");
        }
        if self.seq_len > max_positions {
            return bad(
                "--seq-len",
                &format!(
                    "{} exceeds max_position_embeddings {max_positions}",
                    self.seq_len
                ),
            );
        }
        crate::limits::check(
            "train",
            "batch-size × seq-len",
            (self.batch_size as u128) * (self.seq_len as u128),
            crate::limits::IDS,
        )?;
        crate::limits::check(
            "train",
            "--eval-batches",
            self.eval_batches as u128,
            crate::limits::EVAL_BATCHES,
        )?;
        let finite = [
            ("--lr", self.adamw_lr),
            ("--muon-lr", self.muon_lr),
            ("--weight-decay", self.weight_decay),
            ("--min-lr-rate", self.min_lr_rate),
            ("--grad-clip", f64::from(self.grad_clip)),
            ("--qk-clip", f64::from(self.qk_clip_tau)),
            ("--z-loss", f64::from(self.z_loss_coef)),
            ("--router-bias-speed", f64::from(self.router_bias_speed)),
            ("--aux-loss", f64::from(self.aux_loss_coef.unwrap_or(0.0))),
        ];
        for (flag, v) in finite {
            if !v.is_finite() || v < 0.0 {
                return bad(flag, &format!("must be a finite number ≥ 0, got {v}"));
            }
        }
        // A floor above the peak would make the "decay" climb past the peak learning rate.
        if self.min_lr_rate > 1.0 {
            return bad(
                "--min-lr-rate",
                &format!(
                    "must be in [0, 1] (a fraction of the peak), got {}",
                    self.min_lr_rate
                ),
            );
        }
        for (flag, b) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&b) {
                return bad(flag, &format!("must be in [0, 1), got {b}"));
            }
        }
        if !(self.heldout_fraction > 0.0 && self.heldout_fraction < 1.0) {
            return bad(
                "--heldout-fraction",
                &format!("must be in (0, 1), got {}", self.heldout_fraction),
            );
        }
        if self.steps == 0 {
            return bad("--steps", "must be at least 1");
        }
        self.schedule_decay().map(|_| ())
    }

    fn schedule_decay(&self) -> Result<Decay> {
        match self.decay.as_str() {
            "cosine" => Ok(Decay::Cosine),
            "linear" => Ok(Decay::Linear),
            "constant" => Ok(Decay::Constant),
            other => Err(Error::Invalid(format!(
                "train: --decay must be cosine, linear or constant, got {other:?}"
            ))),
        }
    }

    pub fn schedule(&self) -> Result<Schedule> {
        Ok(Schedule {
            warmup_steps: self.warmup_steps,
            total_steps: self.steps,
            decay: self.schedule_decay()?,
            min_lr_rate: self.min_lr_rate,
        })
    }

    pub fn optimizer_config(&self) -> OptimizerConfig {
        OptimizerConfig {
            adamw_lr: self.adamw_lr,
            muon_lr: self.muon_lr,
            betas: (self.beta1, self.beta2),
            weight_decay: self.weight_decay,
            use_muon: self.muon,
            muon_adjust_lr: AdjustLr::MatchRmsAdamw,
            ..OptimizerConfig::default()
        }
    }

    /// The loss the run optimises, for a model with this config.
    pub fn loss_options(&self, params: &Params, router_bias: &[Vec<f32>]) -> LossOptions {
        let mut opts = LossOptions::from_config(&params.config);
        if let Some(c) = self.aux_loss_coef {
            opts.aux_loss_coef = (c > 0.0).then_some(c);
        }
        opts.z_loss_coef = self.z_loss_coef;
        opts.router_bias = router_bias.to_vec();
        opts
    }
}

/// A run in progress: the model, the optimiser and where the loop stands.
#[derive(Clone, Debug)]
pub struct TrainState {
    pub options: TrainOptions,
    pub params: Params,
    pub optimizer: Optimizer,
    /// Optimizer steps done so far.
    pub step: u64,
    /// Per MoE layer, per expert (empty unless `router_bias_speed` > 0).
    pub router_bias: Vec<Vec<f32>>,
    /// Parameters that get no update (fine-tuning with a frozen router: the
    /// `mlp.gate.weight` tensors, [`TrainState::freeze_router`]). Not saved with a
    /// checkpoint: set it again after resuming.
    pub frozen: Vec<String>,
}

/// One line of `train_log.jsonl`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StepLog {
    /// 1-based: the step that just finished.
    pub step: u64,
    pub loss: f32,
    pub ce_loss: f32,
    pub aux_loss: Option<f32>,
    pub z_loss: Option<f32>,
    pub lr_factor: f64,
    pub adamw_lr: f64,
    /// The global gradient norm before clipping.
    pub grad_norm: f32,
    /// The largest attention logit of the batch, over every layer and head.
    pub max_logit: f32,
    /// Query heads QK-clip rescaled this step.
    pub qk_clipped_heads: usize,
    /// Per MoE layer: the busiest expert's share of picks ÷ the mean share (1 = balanced).
    pub max_load_ratio: Vec<f32>,
    /// Per MoE layer, per expert: top-k picks this step.
    pub expert_counts: Vec<Vec<usize>>,
    pub heldout_loss: Option<f32>,
    pub tokens: usize,
    pub tokens_per_s: f64,
    pub elapsed_s: f64,
}

impl TrainState {
    /// A fresh run: the model drawn from `options.seed`.
    pub fn new(params: Params, options: TrainOptions) -> Result<TrainState> {
        options.validate(params.config.max_position_embeddings)?;
        let specs: Vec<(&str, &[usize])> = params
            .params
            .iter()
            .map(|p| (p.name.as_str(), p.shape.as_slice()))
            .collect();
        let optimizer = Optimizer::new(options.optimizer_config(), &specs);
        let moe_layers = (0..params.config.num_hidden_layers)
            .filter(|&l| params.config.is_moe_layer(l))
            .count();
        let router_bias = if options.router_bias_speed > 0.0 {
            vec![vec![0.0; params.config.num_experts]; moe_layers]
        } else {
            Vec::new()
        };
        Ok(TrainState {
            options,
            params,
            optimizer,
            step: 0,
            router_bias,
            frozen: Vec::new(),
        })
    }

    /// Freezes every MoE layer's router (`model.layers.N.mlp.gate.weight`); returns how many
    /// tensors that is.
    pub fn freeze_router(&mut self) -> usize {
        let names: Vec<String> = (0..self.params.config.num_hidden_layers)
            .map(|l| format!("model.layers.{l}.mlp.gate.weight"))
            .filter(|n| self.params.index(n).is_some())
            .collect();
        let count = names.len();
        self.frozen.extend(names);
        count
    }

    // ANCHOR: train_step
    /// One optimizer step on `batch`: loss and gradients, clipping, the update, QK-clip,
    /// the router-bias update. Returns the log line (without held-out loss or timing).
    pub fn train_step(&mut self, batch: &[Vec<u32>], grads: &mut Grads) -> Result<StepLog> {
        let o = &self.options;
        let loss_opts = o.loss_options(&self.params, &self.router_bias);
        let losses = loss_and_grads(&self.params, batch, &loss_opts, grads)?;
        // A frozen tensor has no gradient (so it does not count in the clipping norm), and
        // its values are put back after the step (weight decay would move them otherwise).
        let frozen: Vec<(usize, Vec<f32>)> = self
            .frozen
            .iter()
            .filter_map(|n| self.params.index(n))
            .map(|i| (i, self.params.params[i].data.clone()))
            .collect();
        for &(i, _) in &frozen {
            grads.grads[i].fill(0.0);
        }
        if !losses.loss.is_finite() {
            return Err(Error::NonFinite {
                what: format!("train: the loss at step {}", self.step + 1),
                detail: format!("{} (lower the learning rate?)", losses.loss),
            });
        }
        let grad_norm = if o.grad_clip > 0.0 {
            clip_grad_norm_flat(&mut grads.grads, o.grad_clip, 2.0)
        } else {
            crate::optim::clip::total_norm_flat(&grads.grads, 2.0)
        };
        let lr_factor = o.schedule()?.factor(self.step);
        let params = self.params.params.iter_mut().map(|p| p.data.as_mut_slice());
        self.optimizer.step(params, &grads.grads, lr_factor)?;
        for (i, data) in frozen {
            self.params.params[i].data = data;
        }
        self.step += 1;
        let qk_clipped_heads = self.qk_clip(&losses)?;
        self.update_router_bias(&losses);
        Ok(self.log_line(&losses, lr_factor, grad_norm, qk_clipped_heads))
    }
    // ANCHOR_END: train_step

    fn log_line(&self, l: &Losses, lr_factor: f64, grad_norm: f32, clipped: usize) -> StepLog {
        let max_logit = l
            .max_logits
            .iter()
            .flatten()
            .copied()
            .fold(f32::NEG_INFINITY, f32::max);
        StepLog {
            step: self.step,
            loss: l.loss,
            ce_loss: l.ce_loss,
            aux_loss: l.aux_loss,
            z_loss: l.z_loss,
            lr_factor,
            adamw_lr: self.options.adamw_lr * lr_factor,
            grad_norm,
            max_logit,
            qk_clipped_heads: clipped,
            max_load_ratio: l.expert_counts.iter().map(|c| max_load_ratio(c)).collect(),
            expert_counts: l.expert_counts.clone(),
            heldout_loss: None,
            tokens: l.tokens,
            tokens_per_s: 0.0,
            elapsed_s: 0.0,
        }
    }

    /// QK-clip on every layer whose largest logit passed τ; returns the heads rescaled.
    fn qk_clip(&mut self, losses: &Losses) -> Result<usize> {
        let tau = self.options.qk_clip_tau;
        if tau <= 0.0 {
            return Ok(0);
        }
        let c = &self.params.config;
        let (head_dim, qk_norm) = (c.head_dim, c.qk_norm);
        let mut clipped = 0;
        for (layer, logits) in losses.max_logits.iter().enumerate() {
            if !logits.iter().any(|&m| m > tau) {
                continue;
            }
            clipped += logits.iter().filter(|&&m| m > tau).count();
            let attn = format!("model.layers.{layer}.self_attn");
            let names = if qk_norm {
                [
                    format!("{attn}.q_norm.weight"),
                    format!("{attn}.k_norm.weight"),
                ]
            } else {
                [
                    format!("{attn}.q_proj.weight"),
                    format!("{attn}.q_proj.bias"),
                ]
            };
            let mut first = self.take_param(&names[0])?;
            let mut second = self
                .params
                .index(&names[1])
                .map(|i| std::mem::take(&mut self.params.params[i].data));
            let tensors = match (&mut second, qk_norm) {
                (Some(k), true) => QkTensors::Norms {
                    q_norm: &mut first,
                    k_norm: k,
                },
                (None, true) => {
                    return Err(Error::Invalid(format!("train: {} is missing", names[1])));
                }
                (bias, false) => QkTensors::Query {
                    q_proj: &mut first,
                    q_bias: bias.as_deref_mut(),
                },
            };
            let result = qk_clip_layer(tensors, logits, head_dim, tau);
            self.put_param(&names[0], first);
            if let Some(s) = second {
                self.put_param(&names[1], s);
            }
            result?;
        }
        Ok(clipped)
    }

    fn take_param(&mut self, name: &str) -> Result<Vec<f32>> {
        let i = self
            .params
            .index(name)
            .ok_or_else(|| Error::Invalid(format!("train: QK-clip needs {name}")))?;
        Ok(std::mem::take(&mut self.params.params[i].data))
    }

    fn put_param(&mut self, name: &str, data: Vec<f32>) {
        if let Some(i) = self.params.index(name) {
            self.params.params[i].data = data;
        }
    }

    // ANCHOR: router_bias
    /// DeepSeek-V3's rule: b_i ← b_i + u·sign(mean load − load_i).
    fn update_router_bias(&mut self, losses: &Losses) {
        let u = self.options.router_bias_speed;
        if u <= 0.0 {
            return;
        }
        for (bias, counts) in self.router_bias.iter_mut().zip(&losses.expert_counts) {
            let mean = counts.iter().sum::<usize>() as f32 / counts.len().max(1) as f32;
            for (b, &c) in bias.iter_mut().zip(counts) {
                let c = c as f32;
                if c < mean {
                    *b += u;
                } else if c > mean {
                    *b -= u;
                }
            }
        }
    }
    // ANCHOR_END: router_bias

    /// Mean loss over `eval_batches` fixed held-out batches (the same ones every time).
    pub fn heldout_loss(&self, heldout: &[u32]) -> Result<f32> {
        let o = &self.options;
        let opts = o.loss_options(&self.params, &self.router_bias);
        let mut total = 0.0f64;
        for i in 0..o.eval_batches.max(1) {
            let b = batch(
                heldout,
                o.batch_size,
                o.seq_len,
                i as u64,
                o.seed ^ EVAL_SEED,
            );
            total += f64::from(loss_only(&self.params, &b, &opts)?.ce_loss);
        }
        Ok((total / o.eval_batches.max(1) as f64) as f32)
    }
}

/// Mixed into the seed for held-out batches, so they never repeat the training windows.
const EVAL_SEED: u64 = 0x9e37_79b9_7f4a_7c15;

/// The busiest expert's count ÷ the mean count (1 = perfectly balanced).
pub fn max_load_ratio(counts: &[usize]) -> f32 {
    let total: usize = counts.iter().sum();
    if total == 0 {
        return 0.0;
    }
    let max = counts.iter().copied().max().unwrap_or(0);
    max as f32 * counts.len() as f32 / total as f32
}

/// Runs `state` on to step `until` (≤ its `steps`), logging to `out/train_log.jsonl`,
/// evaluating and checkpointing into `out` as the options say, and always checkpointing at
/// the end. `progress` shows a bar with loss, tokens/s and time left.
pub fn train(
    state: &mut TrainState,
    train_tokens: &[u32],
    heldout: &[u32],
    out: &Path,
    until: u64,
    progress: bool,
) -> Result<Vec<StepLog>> {
    let o = state.options.clone();
    let until = until.min(o.steps);
    let need = o.seq_len;
    for (what, tokens) in [("training", train_tokens), ("held-out", heldout)] {
        if tokens.len() < need {
            return Err(Error::Invalid(format!(
                "train: the {what} split has {} tokens, fewer than --seq-len {need}",
                tokens.len()
            )));
        }
    }
    crate::output::create_dir(out)?;
    let log_path = out.join("train_log.jsonl");
    let mut log = open_log(&log_path, state.step)?;
    let bar = progress_bar(state.step, until, progress);
    let mut grads = state.params.zeros_like();
    let mut logs = Vec::new();
    let start = Instant::now();
    let first = state.step;
    let mut tokens_done = 0usize;
    while state.step < until {
        let b = batch(train_tokens, o.batch_size, o.seq_len, state.step, o.seed);
        let mut line = state.train_step(&b, &mut grads)?;
        tokens_done += o.batch_size * o.seq_len;
        let elapsed = start.elapsed().as_secs_f64();
        line.elapsed_s = elapsed;
        line.tokens_per_s = tokens_done as f64 / elapsed.max(1e-9);
        let last = state.step == until;
        if last || (o.eval_every > 0 && state.step.is_multiple_of(o.eval_every)) {
            line.heldout_loss = Some(state.heldout_loss(heldout)?);
        }
        write_log_line(&mut log, &log_path, &line)?;
        if !last && o.checkpoint_every > 0 && state.step.is_multiple_of(o.checkpoint_every) {
            save_checkpoint(state, out)?;
        }
        bar.set_position(state.step);
        let done = (state.step - first) as f64;
        let eta = elapsed / done * (until - state.step) as f64;
        bar.set_message(format!(
            "loss {:.4}{} | {:.0} tok/s | {} left",
            line.loss,
            line.heldout_loss
                .map(|h| format!(" held-out {h:.4}"))
                .unwrap_or_default(),
            line.tokens_per_s,
            format_duration(eta)
        ));
        logs.push(line);
    }
    bar.finish();
    save_checkpoint(state, out)?;
    Ok(logs)
}

fn progress_bar(pos: u64, len: u64, show: bool) -> indicatif::ProgressBar {
    if !show {
        return indicatif::ProgressBar::hidden();
    }
    let bar = indicatif::ProgressBar::new(len);
    bar.set_position(pos);
    if let Ok(style) =
        indicatif::ProgressStyle::with_template("train {bar:30} {pos}/{len} steps | {msg}")
    {
        bar.set_style(style);
    }
    bar
}

fn format_duration(secs: f64) -> String {
    let s = if secs.is_finite() { secs as u64 } else { 0 };
    format!("{}:{:02}:{:02}", s / 3600, s / 60 % 60, s % 60)
}
