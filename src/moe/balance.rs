//! Load balancing: why a learned router collapses, and four remedies measured.
//!
//! Source S1 §3 (costs and the interview answer on balance) and S0 5.5.1
//! (`router_aux_loss_coef`). A router is trained with the model: experts that are chosen
//! more are trained more, get better, and are chosen even more — the load collapses onto a
//! few experts. Remedies:
//! - the Switch-Transformer auxiliary loss `N · Σᵢ fᵢ Pᵢ` ([`switch_aux_loss`], as
//!   transformers' `load_balancing_loss_func` computes it: fᵢ the fraction of tokens whose
//!   top-k contains i, Pᵢ the mean router probability of i), minimal when the load is even;
//! - the router z-loss `mean_t (log Σᵢ e^{z_ti})²` ([`router_z_loss`], ST-MoE), which keeps
//!   logits small;
//! - a capacity factor ([`dispatch_with_capacity`]): each expert takes at most
//!   `⌈cf · T · k / N⌉` assignments, the rest are dropped (the token then skips that expert
//!   and keeps only its residual path);
//! - DeepSeek-V3's auxiliary-loss-free balancing ([`bias_update`]): a per-expert bias added
//!   to the scores only to *choose* experts, nudged by ±γ after each step against the load.
//!
//! [`simulate`] trains a small router under each scheme and records the load per step
//! (figure `moe_balance`). Claim `moe.balance`.

use super::router::{Routing, route, top_k_indices};
use crate::kernels::softmax_in_place;
use ndarray_rand::rand::{SeedableRng, rngs::StdRng};
use ndarray_rand::rand_distr::{Distribution, StandardNormal};

// ANCHOR: switch_aux_loss
/// Switch-style auxiliary loss over one layer's router logits `[tokens, num_experts]`,
/// exactly as transformers' `load_balancing_loss_func` (one layer, no padding mask):
/// `N · Σᵢ fᵢ Pᵢ` with `fᵢ = (#tokens whose top-k holds i) / T` and `Pᵢ = mean_t softmax(z_t)ᵢ`.
/// With top-k routing Σᵢ fᵢ = k, so a perfectly even load gives `k`, a total collapse `N`-ish.
pub fn switch_aux_loss(logits: &[f32], num_experts: usize, k: usize) -> f32 {
    let (f, p) = load_and_importance(logits, num_experts, k);
    num_experts as f32 * f.iter().zip(&p).map(|(a, b)| a * b).sum::<f32>()
}
// ANCHOR_END: switch_aux_loss

/// `(fᵢ, Pᵢ)`: the fraction of tokens routed to each expert and its mean probability.
pub fn load_and_importance(logits: &[f32], num_experts: usize, k: usize) -> (Vec<f32>, Vec<f32>) {
    let tokens = logits.len() / num_experts;
    let mut f = vec![0.0f32; num_experts];
    let mut p = vec![0.0f32; num_experts];
    for z in logits.chunks_exact(num_experts) {
        let mut probs = z.to_vec();
        softmax_in_place(&mut probs);
        for e in top_k_indices(&probs, k) {
            f[e] += 1.0;
        }
        for (pi, q) in p.iter_mut().zip(&probs) {
            *pi += q;
        }
    }
    for v in f.iter_mut().chain(p.iter_mut()) {
        *v /= tokens as f32;
    }
    (f, p)
}

// ANCHOR: router_z_loss
/// Router z-loss (ST-MoE): `mean_t (log Σᵢ exp z_ti)²`.
pub fn router_z_loss(logits: &[f32], num_experts: usize) -> f32 {
    let tokens = logits.len() / num_experts;
    let total: f32 = logits
        .chunks_exact(num_experts)
        .map(|z| {
            let m = z.iter().copied().fold(f32::NEG_INFINITY, f32::max);
            let lse = m + z.iter().map(|v| (v - m).exp()).sum::<f32>().ln();
            lse * lse
        })
        .sum();
    total / tokens as f32
}
// ANCHOR_END: router_z_loss

/// Expert capacity `⌈cf · T · k / N⌉` (Switch Transformer / GShard, with top-k).
pub fn expert_capacity(tokens: usize, k: usize, num_experts: usize, capacity_factor: f64) -> usize {
    (capacity_factor * (tokens * k) as f64 / num_experts as f64).ceil() as usize
}

/// What a capacity limit did to one batch.
#[derive(Clone, Debug, PartialEq)]
pub struct CapacityResult {
    pub capacity: usize,
    /// Per expert, the (token, weight) assignments it processes.
    pub kept: Vec<Vec<(usize, f32)>>,
    /// Assignments that found their expert full.
    pub dropped_assignments: usize,
    /// Tokens that lost every one of their k experts.
    pub tokens_fully_dropped: usize,
    /// Assignments each expert was asked for, before the limit.
    pub demand: Vec<usize>,
}

// ANCHOR: capacity
/// Fills experts in token order (earlier tokens first, as Switch does) up to `capacity`;
/// an assignment to a full expert is dropped.
pub fn dispatch_with_capacity(
    routings: &[Routing],
    num_experts: usize,
    capacity: usize,
) -> CapacityResult {
    let mut kept = vec![Vec::new(); num_experts];
    let mut demand = vec![0usize; num_experts];
    let (mut dropped, mut fully) = (0, 0);
    for (t, r) in routings.iter().enumerate() {
        let mut lost = 0;
        for (&e, &p) in r.experts.iter().zip(&r.weights) {
            demand[e] += 1;
            if kept[e].len() < capacity {
                kept[e].push((t, p));
            } else {
                dropped += 1;
                lost += 1;
            }
        }
        if lost == r.experts.len() {
            fully += 1;
        }
    }
    CapacityResult {
        capacity,
        kept,
        dropped_assignments: dropped,
        tokens_fully_dropped: fully,
        demand,
    }
}
// ANCHOR_END: capacity

// ANCHOR: bias_update
/// DeepSeek-V3's auxiliary-loss-free update, after each step: `bᵢ ← bᵢ − γ` for an
/// overloaded expert, `bᵢ ← bᵢ + γ` for an underloaded one (relative to the mean load).
pub fn bias_update(bias: &mut [f32], load: &[f32], gamma: f32) {
    let mean = load.iter().sum::<f32>() / load.len() as f32;
    for (b, &l) in bias.iter_mut().zip(load) {
        if l > mean {
            *b -= gamma;
        } else if l < mean {
            *b += gamma;
        }
    }
}
// ANCHOR_END: bias_update

/// The balancing scheme of a simulation run.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Balancing {
    None,
    /// The Switch auxiliary loss with this coefficient.
    AuxLoss(f32),
    /// DeepSeek-V3's bias with this step size γ.
    Bias(f32),
}

/// The simulated router's settings.
#[derive(Clone, Copy, Debug)]
pub struct SimConfig {
    pub num_experts: usize,
    pub k: usize,
    pub dim: usize,
    pub tokens_per_step: usize,
    pub steps: usize,
    pub lr: f32,
    /// Capacity factor used to count the assignments a capacity limit would drop.
    pub capacity_factor: f64,
    /// Standard deviation of the per-token noise around the shared direction μ (|μ| = 1).
    pub noise: f32,
    /// Standard deviation of the router's initial weights.
    pub init: f32,
    pub seed: u64,
}

impl Default for SimConfig {
    fn default() -> Self {
        SimConfig {
            num_experts: 8,
            k: 2,
            dim: 16,
            tokens_per_step: 256,
            steps: 400,
            lr: 2.0,
            capacity_factor: 1.25,
            noise: 0.3,
            init: 0.25,
            seed: 7,
        }
    }
}

/// One run: the load (fraction of the step's assignments) of each expert at each step.
#[derive(Clone, Debug)]
pub struct SimResult {
    pub balancing: Balancing,
    pub load: Vec<Vec<f32>>,
    pub aux_loss: Vec<f32>,
    pub z_loss: Vec<f32>,
    /// Assignments over capacity (`capacity_factor`) at each step.
    pub dropped: Vec<usize>,
}

impl SimResult {
    /// The largest expert's share, averaged over the last `n` steps.
    pub fn final_max_load(&self, n: usize) -> f32 {
        let tail = &self.load[self.load.len() - n..];
        tail.iter()
            .map(|l| l.iter().copied().fold(0.0, f32::max))
            .sum::<f32>()
            / n as f32
    }
}

/// Trains a linear router `z = W x` by SGD on a toy task that rewards good experts.
///
/// Tokens are `x = μ + ε` (a shared direction μ, as real hidden states have, plus noise).
/// Expert e's loss on a token is `ℓ_e = 1 / (1 + n_e / T)`, where `n_e` counts the tokens it
/// has been trained on so far: experts improve with data. The token's loss is
/// `Σ_{j∈top-k} p_j ℓ_j` (p the renormalised weights), so its gradient raises the logits of
/// the better experts — the rich-get-richer loop that collapses the load.
pub fn simulate(cfg: &SimConfig, balancing: Balancing) -> SimResult {
    let (n, d, t_count) = (cfg.num_experts, cfg.dim, cfg.tokens_per_step);
    let mut rng = StdRng::seed_from_u64(cfg.seed);
    let mut normal = || -> f32 { StandardNormal.sample(&mut rng) };
    let (mu, mut w) = initial_router(cfg, &mut normal);
    let mut bias = vec![0.0f32; n];
    let mut trained = vec![0.0f32; n];
    let mut load_hist = Vec::with_capacity(cfg.steps);
    let mut aux_hist = Vec::with_capacity(cfg.steps);
    let mut z_hist = Vec::with_capacity(cfg.steps);
    let mut dropped_hist = Vec::with_capacity(cfg.steps);
    let capacity = expert_capacity(t_count, cfg.k, n, cfg.capacity_factor);
    for _ in 0..cfg.steps {
        let xs: Vec<f32> = (0..t_count * d)
            .map(|i| mu[i % d] + cfg.noise * normal())
            .collect();
        let step = route_step(cfg, &w, &bias, &trained, xs);
        aux_hist.push(switch_aux_loss(&step.logits, n, cfg.k));
        z_hist.push(router_z_loss(&step.logits, n));
        dropped_hist.push(dispatch_with_capacity(&step.routings, n, capacity).dropped_assignments);
        sgd_step(cfg, balancing, &step, &mut w, &mut trained);
        let total = (t_count * cfg.k) as f32;
        let share: Vec<f32> = step.load.iter().map(|l| l / total).collect();
        if let Balancing::Bias(gamma) = balancing {
            bias_update(&mut bias, &share, gamma);
        }
        load_hist.push(share);
    }
    SimResult {
        balancing,
        load: load_hist,
        aux_loss: aux_hist,
        z_loss: z_hist,
        dropped: dropped_hist,
    }
}

/// The tokens' mean direction μ (unit length) and a router `[n, d]` that favours no
/// expert: random rows with their component along μ removed.
fn initial_router(cfg: &SimConfig, normal: &mut impl FnMut() -> f32) -> (Vec<f32>, Vec<f32>) {
    let (n, d) = (cfg.num_experts, cfg.dim);
    let mu: Vec<f32> = (0..d).map(|_| normal()).collect();
    let mu_norm = mu.iter().map(|v| v * v).sum::<f32>().sqrt();
    let mu: Vec<f32> = mu.iter().map(|v| v / mu_norm).collect();
    let mut w: Vec<f32> = (0..n * d).map(|_| cfg.init * normal()).collect();
    for row in w.chunks_exact_mut(d) {
        let along = crate::kernels::dot(row, &mu);
        for (r, m) in row.iter_mut().zip(&mu) {
            *r -= along * m;
        }
    }
    (mu, w)
}

/// One step's batch as routed: tokens `[T, d]`, router logits `[T, n]`, the choices, each
/// expert's quality (falling with the tokens it has trained on), its top-k fraction `f`
/// and its load.
struct Step {
    xs: Vec<f32>,
    logits: Vec<f32>,
    routings: Vec<Routing>,
    quality: Vec<f32>,
    f: Vec<f32>,
    load: Vec<f32>,
}

/// Routes `xs`: the bias (if any) only changes which experts are chosen.
fn route_step(cfg: &SimConfig, w: &[f32], bias: &[f32], trained: &[f32], xs: Vec<f32>) -> Step {
    let (n, d, t_count) = (cfg.num_experts, cfg.dim, cfg.tokens_per_step);
    let mut logits = vec![0.0f32; t_count * n];
    for (x, z) in xs.chunks_exact(d).zip(logits.chunks_exact_mut(n)) {
        crate::kernels::matvec(w, x, z);
    }
    let quality: Vec<f32> = trained
        .iter()
        .map(|&c| 1.0 / (1.0 + c / t_count as f32))
        .collect();
    let routings: Vec<Routing> = logits
        .chunks_exact(n)
        .map(|z| {
            let biased: Vec<f32> = z.iter().zip(bias).map(|(a, b)| a + b).collect();
            let chosen = top_k_indices(&biased, cfg.k);
            let mut p: Vec<f32> = chosen.iter().map(|&e| z[e]).collect();
            softmax_in_place(&mut p);
            Routing {
                experts: chosen,
                weights: p,
            }
        })
        .collect();
    let mut load = vec![0.0f32; n];
    for r in &routings {
        for &e in &r.experts {
            load[e] += 1.0;
        }
    }
    let (f, _) = load_and_importance(&logits, n, cfg.k);
    Step {
        xs,
        logits,
        routings,
        quality,
        f,
        load,
    }
}

/// One SGD step on the router from the task loss (and the auxiliary loss when it is on);
/// each expert's trained count grows by its load.
fn sgd_step(
    cfg: &SimConfig,
    balancing: Balancing,
    step: &Step,
    w: &mut [f32],
    trained: &mut [f32],
) {
    let (n, d, t_count) = (cfg.num_experts, cfg.dim, cfg.tokens_per_step);
    let Step {
        xs,
        logits,
        routings,
        quality,
        f,
        load,
    } = step;
    // ANCHOR: simulate_step
    // dL/dz per token.
    let mut grad_w = vec![0.0f32; n * d];
    for ((x, z), r) in xs.chunks_exact(d).zip(logits.chunks_exact(n)).zip(routings) {
        let mut g = vec![0.0f32; n];
        let task: f32 = r
            .experts
            .iter()
            .zip(&r.weights)
            .map(|(&e, p)| p * quality[e])
            .sum();
        for (&e, &p) in r.experts.iter().zip(&r.weights) {
            g[e] += p * (quality[e] - task);
        }
        if let Balancing::AuxLoss(alpha) = balancing {
            let mut probs = z.to_vec();
            softmax_in_place(&mut probs);
            let fp: f32 = f.iter().zip(&probs).map(|(a, b)| a * b).sum();
            for e in 0..n {
                g[e] += alpha * n as f32 * probs[e] * (f[e] - fp);
            }
        }
        for e in 0..n {
            for j in 0..d {
                grad_w[e * d + j] += g[e] * x[j] / t_count as f32;
            }
        }
    }
    for (wi, gi) in w.iter_mut().zip(&grad_w) {
        *wi -= cfg.lr * gi;
    }
    for (c, l) in trained.iter_mut().zip(load) {
        *c += l;
    }
    // ANCHOR_END: simulate_step
}

/// Routes logits with the Hugging Face convention (helper for capacity examples).
pub fn route_all(logits: &[f32], num_experts: usize, k: usize) -> Vec<Routing> {
    logits
        .chunks_exact(num_experts)
        .map(|z| route(z, k, true))
        .collect()
}

/// The three runs of [`simulate`] the book and the figure show, with their settings.
pub fn book_runs() -> (SimConfig, [SimResult; 3]) {
    let cfg = SimConfig::default();
    let runs = [
        simulate(&cfg, Balancing::None),
        simulate(&cfg, Balancing::AuxLoss(0.1)),
        simulate(&cfg, Balancing::Bias(0.01)),
    ];
    (cfg, runs)
}

/// The runs as a Markdown table.
pub fn render_markdown(cfg: &SimConfig, runs: &[SimResult]) -> String {
    let last = cfg.steps - 1;
    let mut s = format!(
        "| scheme | largest expert's share (mean of last 50 steps; even = {:.3}) | aux loss N·Σfᵢpᵢ at the end (even = {}) | z-loss at the end | assignments over capacity (cf {}) at the end, of {} |\n|---|---|---|---|---|\n",
        1.0 / cfg.num_experts as f32,
        cfg.k,
        cfg.capacity_factor,
        cfg.tokens_per_step * cfg.k
    );
    for r in runs {
        let name = match r.balancing {
            Balancing::None => "none".to_string(),
            Balancing::AuxLoss(a) => format!("auxiliary loss, coefficient {a}"),
            Balancing::Bias(g) => format!("DeepSeek-V3 bias, γ = {g}"),
        };
        s.push_str(&format!(
            "| {name} | {:.3} | {:.3} | {:.3} | {} |\n",
            r.final_max_load(50),
            r.aux_loss[last],
            r.z_loss[last],
            r.dropped[last]
        ));
    }
    s.push_str(&format!(
        "\nAt step 0 (the same router for all three): aux loss {:.3}, z-loss {:.3}, {} assignments over capacity.\n",
        runs[0].aux_loss[0], runs[0].z_loss[0], runs[0].dropped[0]
    ));
    s
}
