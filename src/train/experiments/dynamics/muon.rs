//! Chapter 13.1 — `train.muon_efficiency` (source S0 5.6.1): Muon on the hidden matrices
//! (AdamW on the rest) against AdamW on everything, each at its own tuned learning rate,
//! at equal tokens.
//!
//! First a sweep at a short budget (seed 0): AdamW alone over [`LRS`]; then Muon over the
//! same grid for the hidden matrices, the rest at AdamW's best rate (so the two differ only
//! in how the hidden matrices are updated). Then the best of each at the full budget over
//! [`SEEDS`] (the seed draws both the initial model and the batches).
//!
//! The rule (fixed before any run was recorded): with d = mean final held-out loss of
//! AdamW − that of Muon over the seeds, and the spread = the larger of the two groups'
//! (max − min) over the seeds, the text is reproduced when d > spread (Muon lower by more
//! than the seeds scatter); otherwise it is not (no gain beyond seed noise, or AdamW lower).

use super::{Budget, Header, Keep, RunRecord, Setup, header, mean_and_range, train_run};
use crate::error::{Error, Result};
use crate::train::experiments::ExperimentOptions;
use crate::train::params::Params;
use serde::{Deserialize, Serialize};

pub const ID: &str = "train.muon_efficiency";
/// The learning-rate grid of the sweep (peak rates; Muon's is in AdamW units through
/// Moonlight's `MatchRmsAdamw` adjustment).
pub const LRS: [f64; 3] = [2e-3, 5e-3, 1.25e-2];
pub const SWEEP_STEPS: u64 = 60;
pub const STEPS: u64 = 160;
pub const SEEDS: [u64; 3] = [0, 1, 2];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MuonResults {
    pub header: Header,
    pub sweep_budget: Budget,
    /// AdamW-alone runs, then Muon runs, one per rate of [`LRS`].
    pub sweep: Vec<RunRecord>,
    pub best_adamw_lr: f64,
    pub best_muon_lr: f64,
    /// Per seed: AdamW, then Muon.
    pub runs: Vec<RunRecord>,
}

/// The verdict on the full-budget runs.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Verdict {
    pub adamw: Vec<f64>,
    pub muon: Vec<f64>,
    pub adamw_mean: f64,
    pub muon_mean: f64,
    /// AdamW's mean − Muon's mean (positive: Muon lower).
    pub gain: f64,
    /// The larger of the two groups' max − min over the seeds.
    pub spread: f64,
}

impl Verdict {
    pub fn reproduced(&self) -> bool {
        self.gain > self.spread
    }
}

/// A run's final held-out loss; a diverged run (or one without an evaluation) counts as
/// infinitely bad.
fn final_loss(r: &RunRecord) -> f64 {
    match (&r.diverged, r.final_heldout()) {
        (None, Some(h)) if h.is_finite() => f64::from(h),
        _ => f64::INFINITY,
    }
}

/// Applies the rule of this module to the full-budget runs.
pub fn verdict(r: &MuonResults) -> Result<Verdict> {
    let group = |muon: bool| -> Vec<f64> {
        r.runs
            .iter()
            .filter(|x| x.options.muon == muon)
            .map(final_loss)
            .collect()
    };
    let (adamw, muon) = (group(false), group(true));
    if adamw.is_empty() || muon.is_empty() || adamw.len() != muon.len() {
        return Err(Error::Invalid(format!(
            "{ID}: results.json has {} AdamW and {} Muon runs; expected the same number ≥ 1",
            adamw.len(),
            muon.len()
        )));
    }
    let (adamw_mean, adamw_range) = mean_and_range(&adamw);
    let (muon_mean, muon_range) = mean_and_range(&muon);
    Ok(Verdict {
        gain: adamw_mean - muon_mean,
        spread: adamw_range.max(muon_range),
        adamw,
        muon,
        adamw_mean,
        muon_mean,
    })
}

/// The rate whose run ended with the lowest held-out loss (the first on ties).
fn best_lr(runs: &[RunRecord], lr: impl Fn(&RunRecord) -> f64) -> f64 {
    runs.iter()
        .min_by(|a, b| final_loss(a).total_cmp(&final_loss(b)))
        .map_or(LRS[0], lr)
}

pub fn run(opts: &ExperimentOptions) -> Result<String> {
    let start = std::time::Instant::now();
    let setup = Setup::load(opts)?;
    let budget = Budget::new(STEPS, opts.short);
    let sweep_budget = Budget::new(SWEEP_STEPS, opts.short);
    let mut header = header(ID, opts, &setup, budget);
    let keep = Keep {
        expert_counts: false,
        probe: None,
        progress: !opts.short,
    };
    let one = |b: &Budget, seed: u64, muon: bool, adamw_lr: f64, muon_lr: f64| {
        let mut o = b.options(seed);
        o.muon = muon;
        o.adamw_lr = adamw_lr;
        o.muon_lr = muon_lr;
        let name = if muon {
            format!("Muon {muon_lr:e} (AdamW {adamw_lr:e}), seed {seed}")
        } else {
            format!("AdamW {adamw_lr:e}, seed {seed}")
        };
        let params = Params::init(&setup.config, seed)?;
        train_run(&setup, &name, params, o, b.log_every, &keep).map(|(r, _)| r)
    };
    // The short form sweeps two rates and runs one seed: it only exercises the path.
    let lrs: &[f64] = if opts.short { &LRS[..2] } else { &LRS };
    let mut sweep = Vec::new();
    for &lr in lrs {
        sweep.push(one(&sweep_budget, 0, false, lr, lr)?);
    }
    let best_adamw_lr = best_lr(&sweep, |r| r.options.adamw_lr);
    let mut muon_sweep = Vec::new();
    for &lr in lrs {
        muon_sweep.push(one(&sweep_budget, 0, true, best_adamw_lr, lr)?);
    }
    let best_muon_lr = best_lr(&muon_sweep, |r| r.options.muon_lr);
    sweep.extend(muon_sweep);
    let mut runs = Vec::new();
    let seeds: &[u64] = if opts.short { &SEEDS[..1] } else { &SEEDS };
    for &seed in seeds {
        runs.push(one(&budget, seed, false, best_adamw_lr, best_adamw_lr)?);
        runs.push(one(&budget, seed, true, best_adamw_lr, best_muon_lr)?);
    }
    header.wall_s = start.elapsed().as_secs_f64();
    let results = MuonResults {
        header,
        sweep_budget,
        sweep,
        best_adamw_lr,
        best_muon_lr,
        runs,
    };
    let path = super::write_results(&opts.out, &results)?;
    let v = verdict(&results)?;
    Ok(format!(
        "sweep: best AdamW lr {best_adamw_lr:e}, best Muon lr {best_muon_lr:e}\n\
         final held-out loss over {} seeds: AdamW {:.4} (each {:?}), Muon {:.4} (each {:?}); \
         gain {:.4} against a seed spread of {:.4}\nwrote {}\n",
        seeds.len(),
        v.adamw_mean,
        v.adamw,
        v.muon_mean,
        v.muon,
        v.gain,
        v.spread,
        path.display()
    ))
}
