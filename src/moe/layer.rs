//! The MoE feed-forward layer: route every token, run its k experts, add their outputs
//! weighted by the router.
//!
//! Source S0 5.4.1, 5.4.3, 5.4.7 and S1 §3. `MoE-FFN(x) = Σ_{j ∈ TopK(x)} p_j F_j(x)`.
//! [`moe_naive`] is that formula read literally: for each token, for each chosen expert.
//! [`moe_bucketed`] is what real implementations do (the text's `MoEFeedForward`, and
//! transformers' `Qwen3MoeExperts`): gather each expert's tokens, run the expert once on
//! that batch, scatter-add the weighted outputs back. A test pins the two equal (claim
//! `moe.bucketed_equiv`). DeepSeekMoE adds always-on shared experts ([`moe_with_shared`],
//! claim `moe.shared_expert`); which layers are MoE at all is [`is_moe_layer`].

use super::expert::{Expert, swiglu};
use super::router::{Routing, route, route_into};
use crate::kernels::{Group, Matrix, for_each_row, matmul_grouped};

/// The router logits of one token: `router · x` (`router` is `[num_experts, hidden]`).
pub fn router_logits(router: &Matrix, x: &[f32]) -> Vec<f32> {
    let mut logits = vec![0.0f32; router.rows];
    router.matvec(x, &mut logits);
    logits
}

/// Routes every token of `x` (`[tokens, hidden]`) with the Hugging Face convention.
pub fn route_tokens(
    x: &[f32],
    hidden: usize,
    router: &Matrix,
    k: usize,
    norm_topk_prob: bool,
) -> Vec<Routing> {
    check_shapes(x, hidden, router);
    x.chunks_exact(hidden)
        .map(|t| route(&router_logits(router, t), k, norm_topk_prob))
        .collect()
}

// ANCHOR: moe_naive
/// x is `[tokens, hidden]` row-major; router is `[num_experts, hidden]`. Returns the
/// `[tokens, hidden]` output and each token's Routing. The literal formula: for each token,
/// run each selected expert and add `p_j · F_j(x)` in routing order.
pub fn moe_naive(
    x: &[f32],
    hidden: usize,
    router: &Matrix,
    experts: &[Expert],
    k: usize,
    norm_topk_prob: bool,
) -> (Vec<f32>, Vec<Routing>) {
    let routings = route_tokens(x, hidden, router, k, norm_topk_prob);
    assert_eq!(experts.len(), router.rows, "moe: one expert per router row");
    let mut out = vec![0.0f32; x.len()];
    let mut y = vec![0.0f32; hidden];
    for ((xt, ot), r) in x
        .chunks_exact(hidden)
        .zip(out.chunks_exact_mut(hidden))
        .zip(&routings)
    {
        for (&e, &p) in r.experts.iter().zip(&r.weights) {
            experts[e].forward(xt, &mut y);
            for (o, v) in ot.iter_mut().zip(&y) {
                *o += p * v;
            }
        }
    }
    (out, routings)
}
// ANCHOR_END: moe_naive

// ANCHOR: moe_bucketed
/// Same contract as [`moe_naive`], computed per expert: gather the tokens routed to expert
/// e, run e once on that batch, scatter-add `p · F_e(x)`. Experts are visited in index
/// order, as transformers does, so each token's sum is accumulated in expert-index order.
pub fn moe_bucketed(
    x: &[f32],
    hidden: usize,
    router: &Matrix,
    experts: &[Expert],
    k: usize,
    norm_topk_prob: bool,
) -> (Vec<f32>, Vec<Routing>) {
    let routings = route_tokens(x, hidden, router, k, norm_topk_prob);
    assert_eq!(experts.len(), router.rows, "moe: one expert per router row");
    let buckets = buckets(&routings, experts.len());
    let mut out = vec![0.0f32; x.len()];
    for (expert, bucket) in experts.iter().zip(&buckets) {
        if bucket.is_empty() {
            continue; // an expert nobody chose costs nothing
        }
        // Gather: the expert's tokens as one [n, hidden] batch.
        let mut batch = Vec::with_capacity(bucket.len() * hidden);
        for &(t, _) in bucket {
            batch.extend_from_slice(&x[t * hidden..(t + 1) * hidden]);
        }
        let mut y = vec![0.0f32; batch.len()];
        expert.forward_batch(&batch, &mut y);
        // Scatter-add, weighted (index_add_ in PyTorch).
        for (&(t, p), yt) in bucket.iter().zip(y.chunks_exact(hidden)) {
            for (o, v) in out[t * hidden..(t + 1) * hidden].iter_mut().zip(yt) {
                *o += v * p;
            }
        }
    }
    (out, routings)
}
// ANCHOR_END: moe_bucketed

/// For each expert, the tokens routed to it and their weight, tokens in increasing order.
pub fn buckets(routings: &[Routing], num_experts: usize) -> Vec<Vec<(usize, f32)>> {
    let mut b = vec![Vec::new(); num_experts];
    for (t, r) in routings.iter().enumerate() {
        for (&e, &p) in r.experts.iter().zip(&r.weights) {
            b[e].push((t, p));
        }
    }
    b
}

/// [`moe_bucketed`] as the model runs it (chapter 10): the router's logits for every
/// token in one batched [`Matrix::matmul`]; the (token, expert) pairs sorted by expert
/// (a counting sort, so each expert's tokens stay in increasing order, as [`buckets`]
/// gives them); every chosen expert's gate and up projections in one grouped matmul, its
/// SwiGLU, every down projection in a second; then the weighted outputs scatter-added in
/// expert order (as transformers adds them). An expert's weights are read once per call however many tokens chose
/// it; nothing is allocated once `scratch` has grown to the call's size. Equal to
/// [`moe_bucketed`] up to the summation order inside each dot product.
pub fn moe_fast_into(
    x: &[f32],
    router: &Matrix,
    experts: &[Expert],
    k: usize,
    norm_topk_prob: bool,
    s: &mut MoeScratch,
    out: &mut [f32],
) {
    let hidden = router.cols; // x is `[n, hidden]`
    check_shapes(x, hidden, router);
    let (e_count, n) = (router.rows, x.len() / hidden);
    assert_eq!(experts.len(), e_count, "moe: one expert per router row");
    assert_eq!(out.len(), x.len(), "moe: output length");
    let inter = experts.first().map_or(0, |e| e.intermediate());
    let slots = n * k;
    s.resize(n, k, e_count, hidden, inter);

    // 1. Route: logits for every token, then top-k per token.
    router.matmul(x, &mut s.logits);
    for t in 0..n {
        route_into(
            &s.logits[t * e_count..(t + 1) * e_count],
            norm_topk_prob,
            &mut s.probs,
            &mut s.chosen[t * k..(t + 1) * k],
            &mut s.weights[t * k..(t + 1) * k],
        );
    }

    // ANCHOR: moe_fast_sort
    // 2. Sort the (token, expert) pairs by expert: count, prefix-sum, place.
    s.start.fill(0);
    for &e in &s.chosen {
        s.start[e + 1] += 1;
    }
    for e in 0..e_count {
        s.start[e + 1] += s.start[e];
    }
    s.fill.copy_from_slice(&s.start[..e_count]);
    for (pair, &e) in s.chosen.iter().enumerate() {
        let slot = s.fill[e];
        s.fill[e] += 1;
        s.slot_token[slot] = pair / k;
        s.slot_weight[slot] = s.weights[pair];
        s.token_slots[pair] = slot;
    }
    let slot_token = &s.slot_token;
    for_each_row(&mut s.xs, hidden, |slot, row| {
        let t = slot_token[slot];
        row.copy_from_slice(&x[t * hidden..(t + 1) * hidden]);
    });
    // ANCHOR_END: moe_fast_sort

    // 3. The chosen experts: gate and up for all of them at once (matrix 2e is expert e's
    //    gate, 2e+1 its up; the up rows land `slots` rows after the gate rows), SwiGLU,
    //    then the down projections.
    s.groups.clear();
    for e in 0..e_count {
        let (first, count) = (s.start[e], s.start[e + 1] - s.start[e]);
        if count > 0 {
            s.groups.push(Group {
                matrix: 2 * e,
                first_in: first,
                n: count,
                first_out: first,
            });
        }
    }
    let active = s.groups.len();
    for i in 0..active {
        let g = s.groups[i];
        s.groups.push(Group {
            matrix: g.matrix + 1,
            first_out: slots + g.first_out,
            ..g
        });
    }
    let proj = |m: usize| {
        if m.is_multiple_of(2) {
            experts[m / 2].gate
        } else {
            experts[m / 2].up
        }
    };
    matmul_grouped(proj, &s.groups, &s.xs, &mut s.gate_up);
    let (gate, up) = s.gate_up.split_at_mut(slots * inter);
    swiglu(gate, up);
    s.groups.truncate(active);
    for g in &mut s.groups {
        g.matrix /= 2;
    }
    matmul_grouped(|e| experts[e].down, &s.groups, gate, &mut s.ys);

    // 4. Add `p · F_e(x)` to each token.
    add_expert_outputs(s, k, hidden, out);
}

/// `out[t] = Σ p · F_e(x_t)` over token t's k slots, experts in index order (the order
/// transformers adds them in): a token's slots in increasing order are its experts in
/// that order.
fn add_expert_outputs(s: &mut MoeScratch, k: usize, hidden: usize, out: &mut [f32]) {
    for slots in s.token_slots.chunks_exact_mut(k) {
        slots.sort_unstable();
    }
    let (ys, token_slots, slot_weight) = (&s.ys, &s.token_slots, &s.slot_weight);
    for_each_row(out, hidden, |t, out| {
        out.fill(0.0);
        for &slot in &token_slots[t * k..(t + 1) * k] {
            let p = slot_weight[slot];
            for (o, v) in out.iter_mut().zip(&ys[slot * hidden..(slot + 1) * hidden]) {
                *o += v * p;
            }
        }
    });
}

/// [`moe_fast_into`] with fresh buffers, returning the output and each token's routing.
pub fn moe_fast(
    x: &[f32],
    hidden: usize,
    router: &Matrix,
    experts: &[Expert],
    k: usize,
    norm_topk_prob: bool,
) -> (Vec<f32>, Vec<Routing>) {
    check_shapes(x, hidden, router);
    let mut s = MoeScratch::default();
    let mut out = vec![0.0f32; x.len()];
    moe_fast_into(x, router, experts, k, norm_topk_prob, &mut s, &mut out);
    (out, s.routings(k))
}

/// The buffers of [`moe_fast_into`], kept between calls (a model keeps one per session).
#[derive(Clone, Debug, Default)]
pub struct MoeScratch {
    /// Router logits `[n, experts]`.
    logits: Vec<f32>,
    /// One token's softmax over the experts.
    probs: Vec<f32>,
    /// Each token's k experts and weights, routing order: `[n, k]`.
    pub chosen: Vec<usize>,
    pub weights: Vec<f32>,
    /// Expert e's tokens occupy slots `start[e] .. start[e + 1]` (`[experts + 1]`).
    start: Vec<usize>,
    /// The next free slot of each expert while placing.
    fill: Vec<usize>,
    /// The token and router weight of each slot `[n·k]`.
    slot_token: Vec<usize>,
    slot_weight: Vec<f32>,
    /// Each token's k slots `[n, k]`, in increasing order once the outputs are added.
    token_slots: Vec<usize>,
    /// Inputs gathered by slot `[n·k, hidden]`, gate then up outputs `[2, n·k, inter]`,
    /// expert outputs `[n·k, hidden]`.
    xs: Vec<f32>,
    gate_up: Vec<f32>,
    ys: Vec<f32>,
    groups: Vec<Group>,
}

impl MoeScratch {
    fn resize(&mut self, n: usize, k: usize, experts: usize, hidden: usize, inter: usize) {
        let slots = n * k;
        self.logits.resize(n * experts, 0.0);
        self.chosen.resize(slots, 0);
        self.weights.resize(slots, 0.0);
        self.start.resize(experts + 1, 0);
        self.fill.resize(experts, 0);
        self.slot_token.resize(slots, 0);
        self.slot_weight.resize(slots, 0.0);
        self.token_slots.resize(slots, 0);
        self.xs.resize(slots * hidden, 0.0);
        self.gate_up.resize(2 * slots * inter, 0.0);
        self.ys.resize(slots * hidden, 0.0);
        self.groups.reserve(2 * experts);
    }

    /// The last call's routing decisions, one [`Routing`] per token.
    pub fn routings(&self, k: usize) -> Vec<Routing> {
        self.chosen
            .chunks_exact(k)
            .zip(self.weights.chunks_exact(k))
            .map(|(e, w)| Routing {
                experts: e.to_vec(),
                weights: w.to_vec(),
            })
            .collect()
    }
}

// ANCHOR: moe_with_shared
/// DeepSeekMoE: `y = Σ_s F_shared,s(x) + Σ_{j ∈ TopK} p_j F_j(x)`. The shared experts see
/// every token with weight 1; the routed part is [`moe_bucketed`].
pub fn moe_with_shared(
    x: &[f32],
    hidden: usize,
    router: &Matrix,
    experts: &[Expert],
    shared: &[Expert],
    k: usize,
    norm_topk_prob: bool,
) -> (Vec<f32>, Vec<Routing>) {
    let (mut out, routings) = moe_bucketed(x, hidden, router, experts, k, norm_topk_prob);
    let mut y = vec![0.0f32; hidden];
    for (xt, ot) in x.chunks_exact(hidden).zip(out.chunks_exact_mut(hidden)) {
        for s in shared {
            s.forward(xt, &mut y);
            for (o, v) in ot.iter_mut().zip(&y) {
                *o += v;
            }
        }
    }
    (out, routings)
}
// ANCHOR_END: moe_with_shared

// ANCHOR: is_moe_layer
/// Whether decoder layer `layer` (0-based) has an MoE block or a dense MLP:
/// - Qwen2/3-MoE: MoE iff `layer ∉ mlp_only_layers` and `(layer + 1) % decoder_sparse_step == 0`;
/// - DeepSeek-V2/V3: dense for the first `first_k_dense_replace` layers.
///
/// Pass `decoder_sparse_step = 1`, `mlp_only_layers = []`, `first_k_dense = 0` for a family
/// that lacks the rule. A step of 0 means no MoE layer (transformers would divide by zero).
pub fn is_moe_layer(
    layer: usize,
    decoder_sparse_step: usize,
    mlp_only_layers: &[usize],
    first_k_dense: usize,
) -> bool {
    layer >= first_k_dense
        && !mlp_only_layers.contains(&layer)
        && decoder_sparse_step != 0
        && (layer + 1).is_multiple_of(decoder_sparse_step)
}
// ANCHOR_END: is_moe_layer

/// DeepSeek's own placement rule (its modelling code): MoE iff
/// `layer >= first_k_dense_replace && layer % moe_layer_freq == 0`. Note the `layer`, not
/// `layer + 1`, unlike Qwen's `decoder_sparse_step`; with frequency 1 they agree.
pub fn is_moe_layer_deepseek(
    layer: usize,
    first_k_dense_replace: usize,
    moe_layer_freq: usize,
) -> bool {
    layer >= first_k_dense_replace && moe_layer_freq != 0 && layer.is_multiple_of(moe_layer_freq)
}

fn check_shapes(x: &[f32], hidden: usize, router: &Matrix) {
    assert!(
        hidden > 0 && x.len().is_multiple_of(hidden),
        "moe: x is not [tokens, hidden]"
    );
    assert_eq!(
        router.cols, hidden,
        "moe: router is not [num_experts, hidden]"
    );
}

/// An MoE layer that owns its f32 weights (the examples and tests build small random ones).
#[derive(Clone, Debug)]
pub struct OwnedMoe {
    pub hidden: usize,
    pub intermediate: usize,
    /// `[num_experts, hidden]`.
    pub router: Vec<f32>,
    /// Per expert: gate `[I, H]`, up `[I, H]`, down `[H, I]`.
    pub gate: Vec<Vec<f32>>,
    pub up: Vec<Vec<f32>>,
    pub down: Vec<Vec<f32>>,
}

impl OwnedMoe {
    /// N(0, 1) router and N(0, 1/H) expert weights from a seeded generator.
    pub fn random(num_experts: usize, hidden: usize, intermediate: usize, seed: u64) -> Self {
        use ndarray_rand::rand::{SeedableRng, rngs::StdRng};
        use ndarray_rand::rand_distr::{Distribution, StandardNormal};
        let mut rng = StdRng::seed_from_u64(seed);
        let mut draw = |n: usize, scale: f32| -> Vec<f32> {
            (0..n)
                .map(|_| {
                    scale * <StandardNormal as Distribution<f32>>::sample(&StandardNormal, &mut rng)
                })
                .collect()
        };
        let s = 1.0 / (hidden as f32).sqrt();
        let router = draw(num_experts * hidden, 1.0);
        let gate = (0..num_experts)
            .map(|_| draw(intermediate * hidden, s))
            .collect();
        let up = (0..num_experts)
            .map(|_| draw(intermediate * hidden, s))
            .collect();
        let down = (0..num_experts)
            .map(|_| draw(hidden * intermediate, s))
            .collect();
        OwnedMoe {
            hidden,
            intermediate,
            router,
            gate,
            up,
            down,
        }
    }

    pub fn num_experts(&self) -> usize {
        self.gate.len()
    }

    pub fn router(&self) -> Matrix<'_> {
        Matrix::f32(&self.router, self.num_experts(), self.hidden)
    }

    pub fn experts(&self) -> Vec<Expert<'_>> {
        (0..self.num_experts())
            .map(|e| Expert {
                gate: Matrix::f32(&self.gate[e], self.intermediate, self.hidden),
                up: Matrix::f32(&self.up[e], self.intermediate, self.hidden),
                down: Matrix::f32(&self.down[e], self.hidden, self.intermediate),
            })
            .collect()
    }
}

#[cfg(test)]
mod fast_tests {
    use super::*;

    /// The fast layer routes identically and sums to the reference within f32 rounding of
    /// the reordered dot products (relative 1e-5 of the output's scale).
    #[test]
    fn moe_fast_equals_bucketed() {
        let (h, i, e, n) = (24, 20, 6, 11);
        let val = |s: usize| ((s * 7919 % 1009) as f32 - 504.0) / 1009.0;
        let wr: Vec<f32> = (0..e * h).map(|s| val(s + 1)).collect();
        let ws: Vec<Vec<f32>> = (0..3 * e)
            .map(|m| (0..h * i).map(|s| val(s * 3 + m * 131)).collect())
            .collect();
        let router = Matrix::f32(&wr, e, h);
        let experts: Vec<Expert> = (0..e)
            .map(|j| Expert {
                gate: Matrix::f32(&ws[3 * j], i, h),
                up: Matrix::f32(&ws[3 * j + 1], i, h),
                down: Matrix::f32(&ws[3 * j + 2], h, i),
            })
            .collect();
        let x: Vec<f32> = (0..n * h).map(|s| val(s * 13 + 5)).collect();
        let (a, ra) = moe_bucketed(&x, h, &router, &experts, 2, true);
        let (b, rb) = moe_fast(&x, h, &router, &experts, 2, true);
        assert_eq!(
            ra.iter().map(|r| &r.experts).collect::<Vec<_>>(),
            rb.iter().map(|r| &r.experts).collect::<Vec<_>>()
        );
        let scale = a.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (u, v) in a.iter().zip(&b) {
            assert!((u - v).abs() <= 1e-5 * scale, "{u} vs {v}");
        }
    }

    /// A call big enough for the thread pool to split its gather, SwiGLU and weighted sum
    /// gives the same bits on one thread and on three, and the reference's values.
    #[test]
    fn moe_fast_is_the_same_bits_on_any_thread_count() {
        let (h, i, e, n, k) = (128, 48, 8, 300, 4);
        assert!(n * h >= crate::kernels::PARALLEL_ROWS_MIN_VALUES);
        let moe = OwnedMoe::random(e, h, i, 29);
        let (router, experts) = (moe.router(), moe.experts());
        let x: Vec<f32> = (0..n * h)
            .map(|s| ((s * 7919 % 1009) as f32 - 504.0) / 1009.0)
            .collect();
        let on = |threads: usize| {
            let pool = rayon::ThreadPoolBuilder::new()
                .num_threads(threads)
                .build()
                .unwrap();
            pool.install(|| moe_fast(&x, h, &router, &experts, k, true).0)
        };
        let (one, three) = (on(1), on(3));
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&one), bits(&three));
        let (want, _) = moe_bucketed(&x, h, &router, &experts, k, true);
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        for (u, v) in want.iter().zip(&three) {
            assert!((u - v).abs() <= 1e-5 * scale, "{u} vs {v}");
        }
    }
}
