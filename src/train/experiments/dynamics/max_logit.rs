//! Chapter 13.1 — `train.max_logit` (source S0 5.6.3): the largest attention logit over
//! training at a high learning rate, with no clipping, with gradient-norm clipping alone,
//! and with QK-clip alone, on the real model (which has Qwen3's q/k RMSNorm: QK-clip
//! rescales its `q_norm` / `k_norm` gains).
//!
//! The rule (fixed before any run was recorded): the logit *grows* when the unclipped
//! run's largest logit over the last 10% of its steps is ≥ 2× that of its first logged
//! window; QK-clip *bounds* it when the QK-clip run never logs a logit above 1.1·τ (the
//! logit is measured in the forward pass before that step's clip, hence the margin) while
//! the unclipped run passes τ. The text is reproduced when both hold. Chapter 7's toy claim
//! `opt.clip_logits` (gradient clipping does not bound the logits) is compared with the
//! gradient-clipping run: it agrees when that run grows by the same 2× test.

use super::{Budget, Header, Keep, RunRecord, Setup, header, train_run};
use crate::error::{Error, Result};
use crate::train::experiments::ExperimentOptions;
use crate::train::params::Params;
use serde::{Deserialize, Serialize};

pub const ID: &str = "train.max_logit";
pub const STEPS: u64 = 200;
/// The high learning rate (4× chapter 12's recorded run), for both optimiser groups.
pub const LR: f64 = 2e-2;
/// QK-clip's threshold τ.
pub const TAU: f32 = 10.0;
/// The global gradient-norm threshold of the gradient-clipping run.
pub const GRAD_CLIP: f32 = 1.0;
pub const GROWTH: f64 = 2.0;
pub const TAU_MARGIN: f64 = 1.1;
pub const TAIL: f64 = 0.1;

/// The three runs: name, gradient clip, QK-clip τ.
pub const VARIANTS: [(&str, f32, f32); 3] = [
    ("no clipping", 0.0, 0.0),
    ("gradient clipping 1.0", GRAD_CLIP, 0.0),
    ("QK-clip τ = 10", 0.0, TAU),
];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MaxLogitResults {
    pub header: Header,
    pub runs: Vec<RunRecord>,
}

#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// Per run: the largest logit of the first logged window and of the last 10%.
    pub first: Vec<f64>,
    pub last: Vec<f64>,
    /// Per run: the largest logit logged anywhere.
    pub peak: Vec<f64>,
    pub grows: bool,
    pub bounded: bool,
    /// Gradient clipping alone lets the logit grow as well (`opt.clip_logits` agrees).
    pub grad_clip_grows: bool,
}

impl Verdict {
    pub fn reproduced(&self) -> bool {
        self.grows && self.bounded
    }
}

fn peak(samples: &[super::Sample]) -> f64 {
    samples
        .iter()
        .map(|s| f64::from(s.max_logit))
        .fold(f64::NEG_INFINITY, f64::max)
}

/// Applies the rule of this module to the three runs.
pub fn verdict(r: &MaxLogitResults) -> Result<Verdict> {
    if r.runs.len() != VARIANTS.len() || r.runs.iter().any(|x| x.log.is_empty()) {
        return Err(Error::Invalid(format!(
            "{ID}: results.json needs {} runs with a log each",
            VARIANTS.len()
        )));
    }
    let first: Vec<f64> = r.runs.iter().map(|x| peak(&x.log[..1])).collect();
    let last: Vec<f64> = r.runs.iter().map(|x| peak(x.tail(TAIL))).collect();
    let peaks: Vec<f64> = r.runs.iter().map(|x| peak(&x.log)).collect();
    let tau = f64::from(TAU);
    Ok(Verdict {
        grows: last[0] >= GROWTH * first[0],
        bounded: peaks[2] <= TAU_MARGIN * tau && peaks[0] > tau,
        grad_clip_grows: last[1] >= GROWTH * first[1],
        first,
        last,
        peak: peaks,
    })
}

pub fn run(opts: &ExperimentOptions) -> Result<String> {
    let start = std::time::Instant::now();
    let setup = Setup::load(opts)?;
    let budget = Budget::new(STEPS, opts.short);
    let mut header = header(ID, opts, &setup, budget);
    let keep = Keep {
        expert_counts: false,
        probe: None,
        progress: !opts.short,
    };
    let mut runs = Vec::new();
    for (name, grad_clip, tau) in VARIANTS {
        let mut o = budget.options(0);
        o.adamw_lr = LR;
        o.muon_lr = LR;
        o.grad_clip = grad_clip;
        o.qk_clip_tau = tau;
        let params = Params::init(&setup.config, o.seed)?;
        runs.push(train_run(&setup, name, params, o, budget.log_every, &keep)?.0);
    }
    header.wall_s = start.elapsed().as_secs_f64();
    let results = MaxLogitResults { header, runs };
    let path = super::write_results(&opts.out, &results)?;
    let v = verdict(&results)?;
    let mut text = String::new();
    for (i, run) in results.runs.iter().enumerate() {
        text.push_str(&format!(
            "{}: max logit {:.2} at the start, {:.2} over the last 10%, peak {:.2}{}\n",
            run.name,
            v.first[i],
            v.last[i],
            v.peak[i],
            run.diverged
                .as_ref()
                .map(|d| format!(" (diverged: {d})"))
                .unwrap_or_default()
        ));
    }
    text.push_str(&format!("wrote {}\n", path.display()));
    Ok(text)
}
