//! Chapter 13.1 — `train.collapse` (source S0 5.4, S1 Q4): the same model trained three
//! ways — no balancing loss, the Switch-style aux loss, DeepSeek-V3's aux-loss-free router
//! bias — and every MoE layer's per-expert load over training.
//!
//! The rule (fixed before any run was recorded): a layer's load at the end is the picks
//! per expert summed over the last 10% of the steps; a run has *collapsed* when in some
//! layer the busiest expert takes ≥ 3× the mean share (with top-2 of 8 the ceiling is 4×:
//! every token picks it), and its loads are *even* when in every layer the busiest expert
//! takes ≤ 2× the mean share. The text is reproduced when the run without a loss
//! collapses and both balanced runs are even.

use super::{Budget, Header, Keep, RunRecord, Setup, header, train_run, write_results};
use crate::error::Result;
use crate::train::experiments::ExperimentOptions;
use crate::train::params::Params;
use serde::{Deserialize, Serialize};

pub const ID: &str = "train.collapse";
/// Steps of each recorded run.
pub const STEPS: u64 = 200;
/// The aux loss's weight (the model config's `router_aux_loss_coef`).
pub const AUX_COEF: f32 = 0.01;
/// The bias speed u (DeepSeek-V3's γ = 0.001).
pub const BIAS_SPEED: f32 = 0.001;
/// Busiest share ÷ mean share at or above which a layer has collapsed.
pub const COLLAPSE_RATIO: f64 = 3.0;
/// Busiest share ÷ mean share at or below which a layer is even.
pub const EVEN_RATIO: f64 = 2.0;
/// The share of the steps whose picks make the final load.
pub const TAIL: f64 = 0.1;

/// The three runs: name, aux-loss weight, bias speed.
pub const VARIANTS: [(&str, f32, f32); 3] = [
    ("no balancing loss", 0.0, 0.0),
    ("aux loss 0.01", AUX_COEF, 0.0),
    ("aux-free bias 0.001", 0.0, BIAS_SPEED),
];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CollapseResults {
    pub header: Header,
    pub runs: Vec<RunRecord>,
}

/// One MoE layer's load over a stretch of steps.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct LayerLoad {
    /// The busiest expert's share ÷ the mean share (1 = even).
    pub max_ratio: f64,
    /// The idlest expert's share ÷ the mean share.
    pub min_ratio: f64,
    /// Entropy of the load distribution ÷ ln(experts) (1 = even, 0 = one expert).
    pub entropy: f64,
}

/// The load of each layer from summed picks.
pub fn layer_loads(counts: &[Vec<usize>]) -> Vec<LayerLoad> {
    counts
        .iter()
        .map(|c| {
            let total: usize = c.iter().sum();
            let n = c.len().max(1) as f64;
            let share = |x: usize| x as f64 / total.max(1) as f64;
            let max = c.iter().copied().max().unwrap_or(0);
            let min = c.iter().copied().min().unwrap_or(0);
            let entropy: f64 = c
                .iter()
                .map(|&x| share(x))
                .filter(|&p| p > 0.0)
                .map(|p| -p * p.ln())
                .sum();
            LayerLoad {
                max_ratio: share(max) * n,
                min_ratio: share(min) * n,
                entropy: if n > 1.0 { entropy / n.ln() } else { 1.0 },
            }
        })
        .collect()
}

/// Picks summed over the samples.
pub fn summed_counts(samples: &[super::Sample]) -> Vec<Vec<usize>> {
    let mut sum: Vec<Vec<usize>> = Vec::new();
    for s in samples {
        if sum.is_empty() {
            sum = s.expert_counts.clone();
            continue;
        }
        for (a, b) in sum.iter_mut().zip(&s.expert_counts) {
            for (x, y) in a.iter_mut().zip(b) {
                *x += y;
            }
        }
    }
    sum
}

/// Each layer's load over the last [`TAIL`] of a run.
pub fn final_loads(run: &RunRecord) -> Vec<LayerLoad> {
    layer_loads(&summed_counts(run.tail(TAIL)))
}

/// The verdict on the recorded runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    /// Per run (in [`VARIANTS`] order): the worst layer's busiest-expert ratio at the end.
    pub worst_ratio: Vec<f64>,
    /// Per run: the lowest normalised entropy of any layer at the end.
    pub lowest_entropy: Vec<f64>,
    pub collapsed_without_loss: bool,
    pub aux_even: bool,
    pub bias_even: bool,
}

impl Verdict {
    pub fn reproduced(&self) -> bool {
        self.collapsed_without_loss && self.aux_even && self.bias_even
    }
}

/// Applies the rule of this module to the three runs.
pub fn verdict(r: &CollapseResults) -> Result<Verdict> {
    if r.runs.len() != VARIANTS.len() {
        return Err(crate::error::Error::Invalid(format!(
            "{ID}: results.json has {} runs, expected {}",
            r.runs.len(),
            VARIANTS.len()
        )));
    }
    let loads: Vec<Vec<LayerLoad>> = r.runs.iter().map(final_loads).collect();
    let worst_ratio: Vec<f64> = loads
        .iter()
        .map(|l| l.iter().map(|x| x.max_ratio).fold(0.0, f64::max))
        .collect();
    let lowest_entropy = loads
        .iter()
        .map(|l| l.iter().map(|x| x.entropy).fold(1.0, f64::min))
        .collect();
    Ok(Verdict {
        collapsed_without_loss: worst_ratio[0] >= COLLAPSE_RATIO,
        aux_even: worst_ratio[1] <= EVEN_RATIO,
        bias_even: worst_ratio[2] <= EVEN_RATIO,
        worst_ratio,
        lowest_entropy,
    })
}

pub fn run(opts: &ExperimentOptions) -> Result<String> {
    let start = std::time::Instant::now();
    let setup = Setup::load(opts)?;
    let budget = Budget::new(STEPS, opts.short);
    let mut header = header(ID, opts, &setup, budget);
    let keep = Keep {
        expert_counts: true,
        probe: None,
        progress: !opts.short,
    };
    let mut runs = Vec::new();
    for (name, aux, bias) in VARIANTS {
        let mut options = budget.options(0);
        options.aux_loss_coef = Some(aux);
        options.router_bias_speed = bias;
        let params = Params::init(&setup.config, options.seed)?;
        let (record, _) = train_run(&setup, name, params, options, budget.log_every, &keep)?;
        runs.push(record);
    }
    header.wall_s = start.elapsed().as_secs_f64();
    let results = CollapseResults { header, runs };
    let path = write_results(&opts.out, &results)?;
    let v = verdict(&results)?;
    let mut text = String::new();
    for (run, (ratio, entropy)) in results
        .runs
        .iter()
        .zip(v.worst_ratio.iter().zip(&v.lowest_entropy))
    {
        text.push_str(&format!(
            "{}: over the last 10% of the steps, busiest expert {ratio:.2}× the mean share, lowest load entropy {entropy:.2}\n",
            run.name
        ));
    }
    text.push_str(&format!("wrote {}\n", path.display()));
    Ok(text)
}
