//! A measurable Muon demo: a two-layer tanh MLP (no biases, 32 → 64 → 16) learns a random
//! teacher network of the same shape from 2 048 seeded samples (mini-batches of 64), with
//! hand-written gradients; the score is the mean-squared error on 512 held-out samples.
//! SGD with momentum, Adam and Muon each get a learning-rate sweep on the same seeds
//! and the same mini-batches; the best learning rate of each (lowest held-out loss at the
//! end, averaged over seeds) is compared step by step. Every optimizer uses the same
//! schedule (linear decay to zero) and no weight decay. Muon updates both matrices, which
//! here are the only parameters: there is no embedding or output head that would
//! normally go to Adam.

use super::baselines::{Adam, SgdMomentum};
use super::muon::{Muon, MuonConfig};
use ndarray::{Array2, Axis};
use ndarray_rand::RandomExt;
use ndarray_rand::rand::{SeedableRng, rngs::StdRng, seq::index::sample};
use ndarray_rand::rand_distr::StandardNormal;
use rayon::prelude::*;
use std::sync::OnceLock;

/// Sizes and budget of the demo.
#[derive(Clone, Debug, PartialEq)]
pub struct DemoConfig {
    pub d_in: usize,
    pub hidden: usize,
    pub d_out: usize,
    pub n_train: usize,
    pub n_test: usize,
    pub batch: usize,
    pub steps: usize,
    /// Held-out loss is measured every `eval_every` steps (and after the last).
    pub eval_every: usize,
    pub seeds: Vec<u64>,
}

impl Default for DemoConfig {
    fn default() -> Self {
        DemoConfig {
            d_in: 32,
            hidden: 64,
            d_out: 16,
            n_train: 2048,
            n_test: 512,
            batch: 64,
            steps: 1000,
            eval_every: 10,
            seeds: vec![1, 2, 3],
        }
    }
}

/// The three optimizers compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OptimizerKind {
    SgdMomentum,
    Adam,
    Muon,
}

impl OptimizerKind {
    pub const ALL: [OptimizerKind; 3] = [
        OptimizerKind::SgdMomentum,
        OptimizerKind::Adam,
        OptimizerKind::Muon,
    ];

    pub fn name(self) -> &'static str {
        match self {
            OptimizerKind::SgdMomentum => "SGD-momentum (0.9)",
            OptimizerKind::Adam => "Adam",
            OptimizerKind::Muon => "Muon",
        }
    }

    /// The learning rates swept (log-spaced by about √10).
    pub fn sweep(self) -> &'static [f64] {
        match self {
            OptimizerKind::SgdMomentum => &[0.1, 0.3, 1.0, 3.0, 10.0],
            OptimizerKind::Adam => &[1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3],
            OptimizerKind::Muon => &[0.003, 0.01, 0.03, 0.1, 0.3, 1.0],
        }
    }
}

/// Teacher data: inputs ~ N(0, I), targets = the teacher MLP's outputs.
#[derive(Clone, Debug)]
pub struct Task {
    pub x_train: Array2<f32>,
    pub y_train: Array2<f32>,
    pub x_test: Array2<f32>,
    pub y_test: Array2<f32>,
}

/// One optimizer's sweep and its best run.
#[derive(Clone, Debug)]
pub struct SweepResult {
    pub kind: OptimizerKind,
    pub lrs: Vec<f64>,
    /// Final held-out loss per learning rate (mean over seeds; NaN if a run diverged).
    pub final_losses: Vec<f64>,
    pub best_lr: f64,
    /// Held-out loss at the best lr, mean over seeds, at the steps [`DemoConfig::eval_steps`].
    pub best_curve: Vec<f64>,
    pub best_final: f64,
}

/// The whole demo: one sweep per optimizer.
#[derive(Clone, Debug)]
pub struct DemoResult {
    pub config: DemoConfig,
    pub sweeps: Vec<SweepResult>,
}

impl DemoResult {
    /// The optimizer with the lowest final held-out loss.
    pub fn winner(&self) -> &SweepResult {
        self.sweeps
            .iter()
            .min_by(|a, b| a.best_final.total_cmp(&b.best_final))
            .expect("three sweeps")
    }

    /// First measured step at which `kind`'s best curve reaches `target` loss, if it does.
    pub fn steps_to(&self, kind: OptimizerKind, target: f64) -> Option<usize> {
        let s = self.sweeps.iter().find(|s| s.kind == kind)?;
        let i = s.best_curve.iter().position(|&l| l <= target)?;
        Some(self.config.eval_steps()[i])
    }

    /// The sweep of one optimizer.
    pub fn sweep(&self, kind: OptimizerKind) -> &SweepResult {
        self.sweeps
            .iter()
            .find(|s| s.kind == kind)
            .expect("every kind is swept")
    }
}

impl DemoConfig {
    /// The steps at which the held-out loss is measured: 0, eval_every, …, steps.
    pub fn eval_steps(&self) -> Vec<usize> {
        let mut v: Vec<usize> = (0..self.steps).step_by(self.eval_every.max(1)).collect();
        v.push(self.steps);
        v
    }
}

/// Mean-squared error of the MLP `y = W2 · tanh(W1 · x)` on a batch (rows of `x`), and its
/// gradients with respect to W1 (`[hidden, d_in]`) and W2 (`[d_out, hidden]`).
pub fn loss_and_grads(
    w1: &Array2<f32>,
    w2: &Array2<f32>,
    x: &Array2<f32>,
    y: &Array2<f32>,
) -> (f32, Array2<f32>, Array2<f32>) {
    let h = x.dot(&w1.t()).mapv(f32::tanh); // [B, hidden]
    let r = h.dot(&w2.t()) - y; // residual [B, d_out]
    let n = r.len() as f32;
    let loss = r.iter().map(|v| v * v).sum::<f32>() / n;
    let d_out = r * (2.0 / n); // ∂L/∂ŷ
    let g2 = d_out.t().dot(&h); // ∂L/∂W2 = d_outᵀ h
    let d_h = d_out.dot(w2); // ∂L/∂h
    let d_z = d_h * &h.mapv(|t| 1.0 - t * t); // through tanh
    let g1 = d_z.t().dot(x); // ∂L/∂W1 = d_zᵀ x
    (loss, g1, g2)
}

/// Mean-squared error only.
pub fn loss(w1: &Array2<f32>, w2: &Array2<f32>, x: &Array2<f32>, y: &Array2<f32>) -> f32 {
    let r = x.dot(&w1.t()).mapv(f32::tanh).dot(&w2.t()) - y;
    r.iter().map(|v| v * v).sum::<f32>() / r.len() as f32
}

/// The teacher task for one seed (the teacher's weights and the data depend on it).
pub fn task(cfg: &DemoConfig, seed: u64) -> Task {
    let mut rng = StdRng::seed_from_u64(seed);
    let (t1, t2) = init(cfg, &mut rng, 2.0);
    let mut sample = |n| {
        let x: Array2<f32> = Array2::random_using((n, cfg.d_in), StandardNormal, &mut rng);
        let y = x.dot(&t1.t()).mapv(f32::tanh).dot(&t2.t());
        (x, y)
    };
    let (x_train, y_train) = sample(cfg.n_train);
    let (x_test, y_test) = sample(cfg.n_test);
    Task {
        x_train,
        y_train,
        x_test,
        y_test,
    }
}

/// Trains one student with one optimizer at one learning rate; returns the held-out
/// loss at [`DemoConfig::eval_steps`] (NaN once the run has diverged).
pub fn train(cfg: &DemoConfig, task: &Task, kind: OptimizerKind, lr: f64, seed: u64) -> Vec<f64> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
    let (w1, w2) = init(cfg, &mut rng, 1.0);
    let mut params = [w1, w2];
    let mut sgd = SgdMomentum::new(lr, 0.9);
    let mut adam = Adam::new(lr);
    let mut muon = Muon::new(MuonConfig {
        lr,
        weight_decay: 0.0,
        ..MuonConfig::default()
    });
    let eval = |p: &[Array2<f32>; 2]| {
        let l = f64::from(loss(&p[0], &p[1], &task.x_test, &task.y_test));
        if l.is_finite() { l } else { f64::NAN }
    };
    let mut curve = vec![eval(&params)];
    // The mini-batch stream depends on the seed only, so every optimizer sees the same data.
    let mut batch_rng = StdRng::seed_from_u64(seed ^ 0xba7c);
    for t in 0..cfg.steps {
        let idx = sample(&mut batch_rng, cfg.n_train, cfg.batch).into_vec();
        let xb = task.x_train.select(Axis(0), &idx);
        let yb = task.y_train.select(Axis(0), &idx);
        let (_, g1, g2) = loss_and_grads(&params[0], &params[1], &xb, &yb);
        let grads = [g1, g2];
        let lr_t = lr * (1.0 - t as f64 / cfg.steps as f64); // linear decay to zero
        match kind {
            OptimizerKind::SgdMomentum => {
                sgd.lr = lr_t;
                sgd.step(&mut params, &grads);
            }
            OptimizerKind::Adam => {
                adam.lr = lr_t;
                adam.step(&mut params, &grads);
            }
            OptimizerKind::Muon => {
                muon.config.lr = lr_t;
                muon.step(&mut params, &grads);
            }
        }
        let done = t + 1;
        if done % cfg.eval_every.max(1) == 0 || done == cfg.steps {
            curve.push(eval(&params));
        }
    }
    curve
}

// ANCHOR: sweep
/// Sweeps one optimizer's learning rates over all seeds and keeps the best.
pub fn sweep(cfg: &DemoConfig, tasks: &[Task], kind: OptimizerKind) -> SweepResult {
    let lrs = kind.sweep().to_vec();
    // Every (lr, seed) run is independent: run them on all cores.
    let jobs: Vec<(usize, usize)> = (0..lrs.len())
        .flat_map(|i| (0..cfg.seeds.len()).map(move |j| (i, j)))
        .collect();
    let runs: Vec<Vec<f64>> = jobs
        .par_iter()
        .map(|&(i, j)| train(cfg, &tasks[j], kind, lrs[i], cfg.seeds[j]))
        .collect();
    let n_seeds = cfg.seeds.len();
    let mut curves = Vec::new();
    let mut final_losses = Vec::new();
    for per_lr in runs.chunks(n_seeds) {
        let mean: Vec<f64> = (0..per_lr[0].len())
            .map(|t| per_lr.iter().map(|r| r[t]).sum::<f64>() / n_seeds as f64)
            .collect();
        final_losses.push(*mean.last().expect("at least one point"));
        curves.push(mean);
    }
    // A diverged run is NaN and never the best.
    let best = (0..lrs.len())
        .filter(|&i| final_losses[i].is_finite())
        .min_by(|&a, &b| final_losses[a].total_cmp(&final_losses[b]))
        .unwrap_or(0);
    SweepResult {
        kind,
        best_lr: lrs[best],
        best_final: final_losses[best],
        best_curve: curves.swap_remove(best),
        lrs,
        final_losses,
    }
}
// ANCHOR_END: sweep

/// Runs the whole demo: SGD-momentum, Adam and Muon, each at its tuned learning rate.
pub fn run(cfg: &DemoConfig) -> DemoResult {
    let tasks: Vec<Task> = cfg.seeds.iter().map(|&s| task(cfg, s)).collect();
    let sweeps = OptimizerKind::ALL
        .iter()
        .map(|&k| sweep(cfg, &tasks, k))
        .collect();
    DemoResult {
        config: cfg.clone(),
        sweeps,
    }
}

/// The book's two runs, computed once per process: the default budget (1 000 steps) and a
/// short one (300 steps), everything else equal.
pub fn book_runs() -> &'static (DemoResult, DemoResult) {
    static RUNS: OnceLock<(DemoResult, DemoResult)> = OnceLock::new();
    RUNS.get_or_init(|| {
        let long = DemoConfig::default();
        let short = DemoConfig {
            steps: 300,
            ..DemoConfig::default()
        };
        (run(&long), run(&short))
    })
}

/// LeCun-normal weights (std = gain/√fan_in) for W1 and W2.
fn init(cfg: &DemoConfig, rng: &mut StdRng, gain: f32) -> (Array2<f32>, Array2<f32>) {
    let w1: Array2<f32> = Array2::random_using((cfg.hidden, cfg.d_in), StandardNormal, rng)
        * (gain / (cfg.d_in as f32).sqrt());
    let w2: Array2<f32> = Array2::random_using((cfg.d_out, cfg.hidden), StandardNormal, rng)
        * (gain / (cfg.hidden as f32).sqrt());
    (w1, w2)
}
