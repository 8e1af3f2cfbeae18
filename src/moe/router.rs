//! The router (gate): per token, a score for every expert, the top k kept, their weights.
//!
//! Source S0 5.4.4 and S1 §3. Two conventions exist and both are here:
//! - [`route`] is what Hugging Face's Qwen3-MoE and Mixtral do: softmax over *all* expert
//!   logits in f32, take the top k probabilities, and (with `norm_topk_prob`) divide them by
//!   their sum.
//! - [`route_topk_softmax`] is what the source text writes: top k of the raw scores, then a
//!   softmax over those k only.
//!
//! Softmax is monotone, so both pick the same experts, and renormalising the top-k slice of
//! a softmax cancels the shared denominator: the two normalised forms are the same numbers
//! (claim `moe.topk_softmax`). Without `norm_topk_prob` the weights are the raw softmax
//! probabilities and sum to less than 1.
//!
//! [`route_biased`] is DeepSeek-V3's router (sigmoid affinities, a per-expert bias that only
//! affects *which* experts are picked, group-limited top-k), used by the balancing chapter.

use crate::kernels::softmax_in_place;

/// One token's routing decision: `k` experts, highest weight first (ties → lower expert
/// index first), and the weight each expert's output is multiplied by.
#[derive(Clone, Debug, PartialEq)]
pub struct Routing {
    pub experts: Vec<usize>,
    pub weights: Vec<f32>,
}

// ANCHOR: route
/// Hugging Face Qwen3-MoE / Mixtral convention: softmax over ALL expert logits (f32), take
/// the top k, and if `norm_topk_prob` divide the k weights by their sum.
///
/// Panics if `k == 0` or `k > logits.len()` (the model's config is checked before this).
pub fn route(logits: &[f32], k: usize, norm_topk_prob: bool) -> Routing {
    let (mut experts, mut weights) = (vec![0; k], vec![0.0; k]);
    route_into(
        logits,
        norm_topk_prob,
        &mut Vec::new(),
        &mut experts,
        &mut weights,
    );
    Routing { experts, weights }
}

/// [`route`] into caller-owned buffers (`experts` and `weights` hold `k` entries; `probs`
/// is scratch): the model's decode step routes without allocating.
pub fn route_into(
    logits: &[f32],
    norm_topk_prob: bool,
    probs: &mut Vec<f32>,
    experts: &mut [usize],
    weights: &mut [f32],
) {
    probs.clear();
    probs.extend_from_slice(logits);
    softmax_in_place(probs);
    top_k_into(probs, experts);
    for (w, &e) in weights.iter_mut().zip(experts.iter()) {
        *w = probs[e];
    }
    if norm_topk_prob {
        let sum: f32 = weights.iter().sum();
        for w in weights.iter_mut() {
            *w /= sum;
        }
    }
}
// ANCHOR_END: route

// ANCHOR: route_topk_softmax
/// The source text's convention: top k of the raw scores, softmax over those k only.
pub fn route_topk_softmax(logits: &[f32], k: usize) -> Routing {
    let experts = top_k_indices(logits, k);
    let mut weights: Vec<f32> = experts.iter().map(|&e| logits[e]).collect();
    softmax_in_place(&mut weights);
    Routing { experts, weights }
}
// ANCHOR_END: route_topk_softmax

/// The indices of the `k` largest values, largest first; equal values keep the lower
/// index first (a stable order, so a tie never depends on the sort algorithm).
pub fn top_k_indices(values: &[f32], k: usize) -> Vec<usize> {
    let mut idx = vec![0; k];
    top_k_into(values, &mut idx);
    idx
}

/// [`top_k_indices`] into `out` (`k = out.len()`), without allocating: k passes of a
/// selection, each taking the largest value not yet taken (`total_cmp`, a total order
/// even with NaN; the first of equal values wins, so ties go to the lower index).
pub fn top_k_into(values: &[f32], out: &mut [usize]) {
    let k = out.len();
    assert!(
        k >= 1 && k <= values.len(),
        "top-k: k = {k} must be in 1..={}",
        values.len()
    );
    for i in 0..k {
        let (taken, rest) = out.split_at_mut(i);
        let mut best: Option<usize> = None;
        for (j, v) in values.iter().enumerate() {
            if taken.contains(&j) {
                continue;
            }
            if best.is_none_or(|b| v.total_cmp(&values[b]).is_gt()) {
                best = Some(j);
            }
        }
        rest[0] = best.expect("k ≤ values.len() leaves a value to take");
    }
}

/// DeepSeek-V3's routing parameters (`config.json`: `n_routed_experts`, `num_experts_per_tok`,
/// `n_group`, `topk_group`, `norm_topk_prob`, `routed_scaling_factor`).
#[derive(Clone, Copy, Debug)]
pub struct BiasedRouting {
    pub k: usize,
    /// Experts are split into `n_group` equal groups; only the `topk_group` best groups
    /// (ranked by the sum of their two best biased scores) may be chosen from.
    pub n_group: usize,
    pub topk_group: usize,
    pub norm_topk_prob: bool,
    pub routed_scaling_factor: f32,
}

/// DeepSeek-V3: affinity sᵢ = σ(logitᵢ); the *choice* uses sᵢ + bᵢ (the load-balancing
/// bias, see `moe::balance`), the *weights* use sᵢ alone, normalised over the chosen k and
/// multiplied by `routed_scaling_factor`.
pub fn route_biased(logits: &[f32], bias: &[f32], p: &BiasedRouting) -> Routing {
    let n = logits.len();
    assert_eq!(bias.len(), n, "route_biased: one bias per expert");
    assert!(
        p.n_group >= 1 && n.is_multiple_of(p.n_group) && p.topk_group <= p.n_group,
        "route_biased: bad groups"
    );
    // ANCHOR: route_biased
    let scores: Vec<f32> = logits.iter().map(|&l| 1.0 / (1.0 + (-l).exp())).collect();
    let mut choice: Vec<f32> = scores.iter().zip(bias).map(|(s, b)| s + b).collect();
    if p.n_group > 1 {
        let size = n / p.n_group;
        let group_score: Vec<f32> = choice
            .chunks_exact(size)
            .map(|g| {
                let best = top_k_indices(g, 2.min(size));
                best.iter().map(|&i| g[i]).sum()
            })
            .collect();
        let keep = top_k_indices(&group_score, p.topk_group);
        for (g, chunk) in choice.chunks_exact_mut(size).enumerate() {
            if !keep.contains(&g) {
                chunk.fill(f32::NEG_INFINITY);
            }
        }
    }
    let experts = top_k_indices(&choice, p.k);
    let mut weights: Vec<f32> = experts.iter().map(|&e| scores[e]).collect();
    if p.norm_topk_prob {
        let sum: f32 = weights.iter().sum::<f32>() + 1e-20;
        for w in &mut weights {
            *w /= sum;
        }
    }
    for w in &mut weights {
        *w *= p.routed_scaling_factor;
    }
    // Keep the Routing invariant: highest weight first (the bias may have reordered them).
    let order = top_k_indices(&weights, weights.len());
    Routing {
        experts: order.iter().map(|&i| experts[i]).collect(),
        weights: order.iter().map(|&i| weights[i]).collect(),
    }
}
// ANCHOR_END: route_biased

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ties_keep_lower_index_first() {
        assert_eq!(top_k_indices(&[1.0, 3.0, 3.0, 0.0, 3.0], 3), vec![1, 2, 4]);
        let r = route(&[0.0; 4], 4, true);
        assert_eq!(r.experts, vec![0, 1, 2, 3]);
        assert!(r.weights.iter().all(|&w| w == 0.25));
    }

    #[test]
    fn unnormalised_weights_are_softmax_probabilities() {
        let r = route(&[2.0, 1.0, 0.0], 2, false);
        let z = 2f32.exp() + 1f32.exp() + 1.0;
        assert!((r.weights[0] - 2f32.exp() / z).abs() < 1e-7);
        assert!((r.weights[1] - 1f32.exp() / z).abs() < 1e-7);
    }

    /// The selection in `top_k_into` orders exactly as a stable descending sort by
    /// `total_cmp` does (ties, repeated values, NaN and signed zeros included).
    #[test]
    fn selection_equals_stable_sort() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(7);
        let pool = [0.0, -0.0, 1.0, 1.0, -2.5, f32::NAN, f32::INFINITY, 3.0];
        for _ in 0..500 {
            let n = rng.random_range(1..40);
            let v: Vec<f32> = (0..n)
                .map(|_| pool[rng.random_range(0..pool.len())] + rng.random_range(0..3) as f32)
                .collect();
            let k = rng.random_range(1..=n);
            let mut sorted: Vec<usize> = (0..n).collect();
            sorted.sort_by(|&a, &b| v[b].total_cmp(&v[a]));
            sorted.truncate(k);
            assert_eq!(top_k_indices(&v, k), sorted, "values {v:?}, k = {k}");
        }
    }
}
