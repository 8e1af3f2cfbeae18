//! Chapter 12 — the optimisers of the training loop (source S0 5.6.1–5.6.3): AdamW as
//! `torch.optim.AdamW` defines it, the crate's Muon ([`crate::optim::muon`]) for the hidden
//! matrices, the learning-rate schedule of transformers' `get_cosine_with_min_lr_schedule_
//! with_warmup`, and QK-clip adapted to Qwen3's QK-norm. Checked against torch 2.15 and
//! transformers 5.24 by `scripts/gen_train_fixtures.py` (tests/train_optimizer.rs).
//!
//! The split (S0 5.6.1, as Moonlight trains with Muon): every 2-D matrix inside a block —
//! the attention projections, the dense MLP's and each expert's gate/up/down — goes to
//! Muon; the embedding, the LM head, the norms, the biases and the router go to AdamW. The
//! embedding and the head are lookup tables / per-token read-outs rather than operators
//! on the hidden state, so orthogonalising their updates has no meaning. The router gate
//! `[num_experts, hidden]` is AdamW too: each of its rows is one expert's score vector, and
//! Muon would whiten the update across experts — forcing every expert's score to move by
//! the same amount in orthogonal directions — which fights the load balancing that decides
//! how much each score should move; it is also tiny, so nothing is saved by Muon there.
//! Weight decay is applied to matrices (Muon's and AdamW's) but not to 1-D parameters
//! (norm gains, biases), the usual practice.

use crate::error::{Error, Result};
use crate::optim::muon::{AdjustLr, MuonConfig, lerp, muon_update_slice};

/// Which update a parameter gets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Group {
    Muon,
    AdamW,
}

/// How the optimiser treats one parameter tensor.
#[derive(Clone, Debug, PartialEq)]
pub struct ParamRule {
    pub group: Group,
    /// Decoupled weight decay applies (matrices yes, 1-D gains and biases no).
    pub weight_decay: bool,
    /// For Muon: the `(offset, rows, cols)` matrices inside the flat tensor, each
    /// orthogonalised on its own (one per expert, and gate and up apart in a fused
    /// `gate_up_proj`, so a fused checkpoint trains exactly as a per-expert one).
    pub matrices: Vec<(usize, usize, usize)>,
}

// ANCHOR: param_rule
/// The optimiser split of S0 5.6.1 for a Hugging Face tensor name and shape.
pub fn param_rule(name: &str, shape: &[usize]) -> ParamRule {
    let adamw = |weight_decay| ParamRule {
        group: Group::AdamW,
        weight_decay,
        matrices: Vec::new(),
    };
    let is_table = name.contains("embed_tokens") || name.starts_with("lm_head");
    let is_router = name.ends_with("mlp.gate.weight");
    match *shape {
        [_] => adamw(false),
        [rows, cols] if !is_table && !is_router && name.contains(".layers.") => ParamRule {
            group: Group::Muon,
            weight_decay: true,
            matrices: vec![(0, rows, cols)],
        },
        // ANCHOR_END: param_rule
        // transformers 5's fused experts: [E, 2I, H] gate_up_proj (gate rows first, then
        // up) and [E, H, I] down_proj.
        [experts, rows, cols] if name.contains(".layers.") => {
            let fused_gate_up = name.ends_with("gate_up_proj") && rows % 2 == 0;
            let mut matrices = Vec::new();
            for e in 0..experts {
                let base = e * rows * cols;
                if fused_gate_up {
                    let half = rows / 2;
                    matrices.push((base, half, cols));
                    matrices.push((base + half * cols, half, cols));
                } else {
                    matrices.push((base, rows, cols));
                }
            }
            ParamRule {
                group: Group::Muon,
                weight_decay: true,
                matrices,
            }
        }
        _ => adamw(true),
    }
}

/// Hyper-parameters of the two groups.
#[derive(Clone, Debug, PartialEq)]
pub struct OptimizerConfig {
    /// Peak learning rate of the AdamW group.
    pub adamw_lr: f64,
    /// Peak learning rate of the Muon group (before Muon's shape adjustment).
    pub muon_lr: f64,
    pub betas: (f64, f64),
    pub eps: f64,
    pub weight_decay: f64,
    pub muon_momentum: f64,
    pub muon_nesterov: bool,
    pub muon_ns_steps: usize,
    /// Moonlight's `MatchRmsAdamw` (0.2·√max(rows, cols)) lets both groups share one lr.
    pub muon_adjust_lr: AdjustLr,
    /// false: every parameter goes to AdamW (the baseline the Muon run is compared with).
    pub use_muon: bool,
}

impl Default for OptimizerConfig {
    fn default() -> Self {
        OptimizerConfig {
            adamw_lr: 3e-3,
            muon_lr: 3e-3,
            betas: (0.9, 0.95),
            eps: 1e-8,
            weight_decay: 0.1,
            muon_momentum: 0.95,
            muon_nesterov: true,
            muon_ns_steps: 5,
            muon_adjust_lr: AdjustLr::MatchRmsAdamw,
            use_muon: true,
        }
    }
}

// ANCHOR: adamw
/// One `torch.optim.AdamW` step on one tensor, in place (torch 2.15 `_single_tensor_adamw`):
/// decoupled decay p ← p·(1 − lr·wd), then m ← lerp(m, g, 1−β₁), v ← β₂v + (1−β₂)g²,
/// p ← p − lr/(1−β₁ᵗ) · m / (√v / √(1−β₂ᵗ) + ε). `step` counts from 1.
#[allow(clippy::too_many_arguments)]
pub fn adamw_update(
    param: &mut [f32],
    grad: &[f32],
    m: &mut [f32],
    v: &mut [f32],
    step: u64,
    lr: f64,
    (beta1, beta2): (f64, f64),
    eps: f64,
    weight_decay: f64,
) {
    assert!(
        param.len() == grad.len() && m.len() == grad.len() && v.len() == grad.len(),
        "adamw_update: lengths"
    );
    let t = i32::try_from(step).unwrap_or(i32::MAX);
    let step_size = (lr / (1.0 - beta1.powi(t))) as f32;
    let bc2_sqrt = (1.0 - beta2.powi(t)).sqrt() as f32;
    let decay = (1.0 - lr * weight_decay) as f32;
    let (w1, b2, one_minus_b2, eps) = (
        (1.0 - beta1) as f32,
        beta2 as f32,
        (1.0 - beta2) as f32,
        eps as f32,
    );
    for (((p, &g), m), v) in param.iter_mut().zip(grad).zip(m).zip(v) {
        *p *= decay;
        *m = lerp(*m, g, w1);
        *v = *v * b2 + one_minus_b2 * g * g;
        let denom = v.sqrt() / bc2_sqrt + eps;
        *p -= step_size * (*m / denom);
    }
}
// ANCHOR_END: adamw

/// AdamW and Muon over a model's parameter list, with their state.
#[derive(Clone, Debug)]
pub struct Optimizer {
    pub config: OptimizerConfig,
    pub rules: Vec<ParamRule>,
    /// Optimizer steps taken (AdamW's bias-correction counter).
    pub step: u64,
    /// Per parameter: AdamW's first moment, or Muon's momentum buffer.
    pub exp_avg: Vec<Vec<f32>>,
    /// Per parameter: AdamW's second moment (empty for Muon parameters).
    pub exp_avg_sq: Vec<Vec<f32>>,
}

impl Optimizer {
    /// State for parameters with these names and shapes, all moments zero.
    pub fn new(config: OptimizerConfig, params: &[(&str, &[usize])]) -> Optimizer {
        let mut rules = Vec::with_capacity(params.len());
        let (mut exp_avg, mut exp_avg_sq) = (Vec::new(), Vec::new());
        for &(name, shape) in params {
            let mut rule = param_rule(name, shape);
            if !config.use_muon && rule.group == Group::Muon {
                rule.group = Group::AdamW;
                rule.matrices.clear();
            }
            let n: usize = shape.iter().product();
            exp_avg.push(vec![0.0; n]);
            exp_avg_sq.push(if rule.group == Group::AdamW {
                vec![0.0; n]
            } else {
                Vec::new()
            });
            rules.push(rule);
        }
        Optimizer {
            config,
            rules,
            step: 0,
            exp_avg,
            exp_avg_sq,
        }
    }

    /// How many parameters (entries) each group holds: (Muon, AdamW).
    pub fn group_sizes(&self) -> (usize, usize) {
        let mut sizes = (0, 0);
        for (rule, m) in self.rules.iter().zip(&self.exp_avg) {
            match rule.group {
                Group::Muon => sizes.0 += m.len(),
                Group::AdamW => sizes.1 += m.len(),
            }
        }
        sizes
    }

    /// One step of every parameter with its gradient; `lr_factor` is the schedule's value
    /// for this step (multiplies both groups' peak learning rates).
    pub fn step<'a>(
        &mut self,
        params: impl Iterator<Item = &'a mut [f32]>,
        grads: &[Vec<f32>],
        lr_factor: f64,
    ) -> Result<()> {
        self.step += 1;
        let c = &self.config;
        let muon = MuonConfig {
            lr: c.muon_lr * lr_factor,
            weight_decay: c.weight_decay,
            momentum: c.muon_momentum,
            nesterov: c.muon_nesterov,
            ns_steps: c.muon_ns_steps,
            adjust_lr: c.muon_adjust_lr,
            ..MuonConfig::default()
        };
        let mut count = 0;
        for (i, param) in params.enumerate() {
            let (Some(rule), Some(grad)) = (self.rules.get(i), grads.get(i)) else {
                return Err(Error::Invalid(format!(
                    "optimizer: parameter {i} has no state or gradient ({} known)",
                    self.rules.len()
                )));
            };
            if param.len() != grad.len() || param.len() != self.exp_avg[i].len() {
                return Err(Error::Invalid(format!(
                    "optimizer: parameter {i} has {} values, its gradient {}, its state {}",
                    param.len(),
                    grad.len(),
                    self.exp_avg[i].len()
                )));
            }
            let wd = if rule.weight_decay {
                c.weight_decay
            } else {
                0.0
            };
            match rule.group {
                Group::AdamW => adamw_update(
                    param,
                    grad,
                    &mut self.exp_avg[i],
                    &mut self.exp_avg_sq[i],
                    self.step,
                    c.adamw_lr * lr_factor,
                    c.betas,
                    c.eps,
                    wd,
                ),
                Group::Muon => {
                    let cfg = MuonConfig {
                        weight_decay: wd,
                        ..muon.clone()
                    };
                    for &(off, rows, cols) in &rule.matrices {
                        let r = off..off + rows * cols;
                        muon_update_slice(
                            &mut param[r.clone()],
                            &grad[r.clone()],
                            &mut self.exp_avg[i][r],
                            (rows, cols),
                            &cfg,
                        );
                    }
                }
            }
            count += 1;
        }
        if count != self.rules.len() {
            return Err(Error::Invalid(format!(
                "optimizer: {count} parameters given, {} expected",
                self.rules.len()
            )));
        }
        Ok(())
    }
}

/// The learning-rate schedule's shape after warm-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Decay {
    #[default]
    Cosine,
    Linear,
    Constant,
}

/// Linear warm-up from 0, then decay to `min_lr_rate` × peak at `total_steps`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Schedule {
    pub warmup_steps: u64,
    pub total_steps: u64,
    pub decay: Decay,
    pub min_lr_rate: f64,
}

impl Schedule {
    // ANCHOR: schedule
    /// The multiplier of the peak lr for the optimizer step `step` (0-based), as
    /// transformers' `LambdaLR` schedules give it: `get_cosine_with_min_lr_schedule_with_
    /// warmup` (num_cycles 0.5), `get_linear_schedule_with_warmup` (here with a floor), and
    /// constant after warm-up.
    pub fn factor(&self, step: u64) -> f64 {
        if step < self.warmup_steps {
            return step as f64 / self.warmup_steps.max(1) as f64;
        }
        let span = self.total_steps.saturating_sub(self.warmup_steps).max(1) as f64;
        let progress = (step - self.warmup_steps) as f64 / span;
        let shape = match self.decay {
            Decay::Cosine => 0.5 * (1.0 + (std::f64::consts::PI * progress).cos()),
            Decay::Linear => (1.0 - progress).max(0.0),
            Decay::Constant => 1.0,
        };
        (shape * (1.0 - self.min_lr_rate) + self.min_lr_rate).max(0.0)
    }
    // ANCHOR_END: schedule
}

// ANCHOR: qk_clip
/// QK-clip for one attention layer after an optimizer step, given its heads' largest
/// logits (`Losses::max_logits`): γ_h = min(1, τ / S_max^h) as [`crate::optim::qk_clip`].
///
/// With QK-norm (Qwen3), q and k are RMS-normalised per head before the dot product, so
/// scaling W_q or W_k changes nothing; the logit scale lives in the norm gains `q_norm` and
/// `k_norm`, which every head of the layer shares. So the layer's worst head decides:
/// both gains are scaled by √γ with γ = min_h γ_h, which brings that head's logit to τ
/// exactly and shrinks the others by the same factor. Without QK-norm, key heads are
/// shared by a group of query heads (GQA), so — as Kimi K2 does for MLA's shared rotary
/// key — the whole γ_h goes on query head h's rows of W_q (and its bias), leaving W_k alone:
/// each head's logits shrink by exactly its own γ_h.
/// Returns the γ applied per query head.
pub fn qk_clip_layer(
    tensors: QkTensors<'_>,
    max_logits: &[f32],
    head_dim: usize,
    tau: f32,
) -> Result<Vec<f32>> {
    let gammas = crate::optim::qk_clip::qk_clip_gammas(max_logits, tau);
    match tensors {
        QkTensors::Norms { q_norm, k_norm } => {
            let gamma = gammas.iter().copied().fold(1.0f32, f32::min);
            if gamma < 1.0 {
                let root = gamma.sqrt();
                q_norm.iter_mut().for_each(|w| *w *= root);
                k_norm.iter_mut().for_each(|w| *w *= root);
            }
            Ok(vec![gamma; gammas.len()])
        }
        // ANCHOR_END: qk_clip
        QkTensors::Query { q_proj, mut q_bias } => {
            let rows = gammas.len() * head_dim;
            if head_dim == 0 || rows == 0 || !q_proj.len().is_multiple_of(rows) {
                return Err(Error::Invalid(format!(
                    "qk_clip: q_proj of {} values does not split into {} heads of {head_dim}",
                    q_proj.len(),
                    gammas.len()
                )));
            }
            let row_len = q_proj.len() / rows;
            for (h, &g) in gammas.iter().enumerate() {
                let r = h * head_dim..(h + 1) * head_dim;
                q_proj[r.start * row_len..r.end * row_len]
                    .iter_mut()
                    .for_each(|w| *w *= g);
                if let Some(b) = q_bias.as_deref_mut()
                    && b.len() == rows
                {
                    b[r].iter_mut().for_each(|w| *w *= g);
                }
            }
            Ok(gammas)
        }
    }
}

/// The weights QK-clip rescales in one layer.
pub enum QkTensors<'a> {
    /// Qwen3's per-head RMSNorm gains (`self_attn.q_norm.weight`, `k_norm.weight`).
    Norms {
        q_norm: &'a mut [f32],
        k_norm: &'a mut [f32],
    },
    /// No QK-norm: `self_attn.q_proj.weight` and its bias, if any.
    Query {
        q_proj: &'a mut [f32],
        q_bias: Option<&'a mut [f32]>,
    },
}
