//! Chapter 13.1 — `train.muon_efficiency` (source S0 5.6.1): Muon on the hidden matrices
//! (AdamW on the rest) against AdamW on everything, each at its own tuned learning rate,
//! at equal tokens.
//!
//! First a sweep at a short budget (seed 0): AdamW alone over [`LRS`], grown by
//! [`GRID_STEP`] past whichever end holds the best run until the best has a worse rate on
//! each side (bracketed) or the sweep has [`MAX_RATES`] rates; then Muon the same way for the
//! hidden matrices, the rest at AdamW's best rate (so the two differ only in how the hidden
//! matrices are updated). Then the best of each at the full budget over [`SEEDS`] (the seed
//! draws both the initial model and the batches).
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
/// The learning-rate grid the sweep starts from (peak rates; Muon's is in AdamW units
/// through Moonlight's `MatchRmsAdamw` adjustment).
pub const LRS: [f64; 3] = [2e-3, 5e-3, 1.25e-2];
/// The ratio between neighbouring rates of the grid, and by which it grows past an end.
pub const GRID_STEP: f64 = 2.5;
/// The most rates one optimiser's sweep tries before it gives up on bracketing.
pub const MAX_RATES: usize = 6;
pub const SWEEP_STEPS: u64 = 60;
pub const STEPS: u64 = 160;
pub const SEEDS: [u64; 3] = [0, 1, 2];

#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct MuonResults {
    pub header: Header,
    pub sweep_budget: Budget,
    /// AdamW-alone runs, then Muon runs, one per rate tried (each by ascending rate).
    pub sweep: Vec<RunRecord>,
    pub best_adamw_lr: f64,
    pub best_muon_lr: f64,
    /// Whether the best rate had a worse one on each side (false in files recorded before
    /// the sweep grew its grid).
    #[serde(default)]
    pub adamw_bracketed: bool,
    #[serde(default)]
    pub muon_bracketed: bool,
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

/// One optimiser's sweep: its runs by ascending rate, the rate whose run ended lowest (the
/// smallest rate on ties) and whether a worse rate was tried on each side of it.
pub struct Sweep {
    pub runs: Vec<RunRecord>,
    pub best: f64,
    pub bracketed: bool,
}

// ANCHOR: bracket_sweep
/// Runs `run_at` over `start` (ascending), then keeps adding a rate [`GRID_STEP`] beyond
/// whichever end holds the best run, while fewer than `max_rates` have run.
pub fn bracket_sweep(
    start: &[f64],
    max_rates: usize,
    mut run_at: impl FnMut(f64) -> Result<RunRecord>,
) -> Result<Sweep> {
    let mut tried: Vec<(f64, RunRecord)> = Vec::new();
    for &lr in start {
        tried.push((lr, run_at(lr)?));
    }
    loop {
        tried.sort_by(|a, b| a.0.total_cmp(&b.0));
        let best = (0..tried.len())
            .min_by(|&a, &b| final_loss(&tried[a].1).total_cmp(&final_loss(&tried[b].1)))
            .ok_or_else(|| Error::Invalid(format!("{ID}: a sweep needs at least one rate")))?;
        let bracketed = best > 0 && best + 1 < tried.len();
        if bracketed || tried.len() >= max_rates {
            return Ok(Sweep {
                best: tried[best].0,
                runs: tried.into_iter().map(|(_, r)| r).collect(),
                bracketed,
            });
        }
        let next = if best == 0 {
            tried[0].0 / GRID_STEP
        } else {
            tried[tried.len() - 1].0 * GRID_STEP
        };
        tried.push((next, run_at(next)?));
    }
}
// ANCHOR_END: bracket_sweep

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
    // The short form sweeps two rates without growing them and runs one seed: it only
    // exercises the path.
    let (lrs, max_rates): (&[f64], usize) = if opts.short {
        (&LRS[..2], 2)
    } else {
        (&LRS, MAX_RATES)
    };
    let adamw = bracket_sweep(lrs, max_rates, |lr| one(&sweep_budget, 0, false, lr, lr))?;
    let best_adamw_lr = adamw.best;
    let muon = bracket_sweep(lrs, max_rates, |lr| {
        one(&sweep_budget, 0, true, best_adamw_lr, lr)
    })?;
    let best_muon_lr = muon.best;
    let mut sweep = adamw.runs;
    sweep.extend(muon.runs);
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
        adamw_bracketed: adamw.bracketed,
        muon_bracketed: muon.bracketed,
        runs,
    };
    let path = super::write_results(&opts.out, &results)?;
    let v = verdict(&results)?;
    Ok(format!(
        "sweep: best AdamW lr {best_adamw_lr:e} (bracketed: {}), best Muon lr {best_muon_lr:e} \
         (bracketed: {})\n\
         final held-out loss over {} seeds: AdamW {:.4} (each {:?}), Muon {:.4} (each {:?}); \
         gain {:.4} against a seed spread of {:.4}\nwrote {}\n",
        adamw.bracketed,
        muon.bracketed,
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
