//! Chapter 5 (MoE): router conventions, the expert, naive vs bucketed layer, shared
//! experts, placement rules, the worked examples, balancing and expert parallelism.
//! Oracle tests compare with transformers 5.24 / torch 2.15 through fixtures written by
//! scripts/gen_moe_fixtures.py into tests/fixtures/moe/.

use llm_anatomy::kernels::Matrix;
use llm_anatomy::moe::layer::{self, is_moe_layer, is_moe_layer_deepseek};
use llm_anatomy::moe::router::{self, BiasedRouting, Routing, route, route_topk_softmax};
use llm_anatomy::moe::{Expert, moe_bucketed, moe_naive, moe_with_shared};
use serde_json::Value;

/// Deterministic pseudo-random numbers in [-1, 1) (a 64-bit LCG; no dependency needed).
fn lcg(n: usize, seed: u64) -> Vec<f32> {
    let mut s = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..n)
        .map(|_| {
            s = s
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            ((s >> 40) as f32 / (1u64 << 24) as f32) * 2.0 - 1.0
        })
        .collect()
}

fn max_diff(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

struct Weights {
    router: Vec<f32>,
    gate: Vec<Vec<f32>>,
    up: Vec<Vec<f32>>,
    down: Vec<Vec<f32>>,
}

impl Weights {
    fn random(e: usize, h: usize, i: usize, seed: u64) -> Self {
        Weights {
            router: lcg(e * h, seed),
            gate: (0..e).map(|j| lcg(i * h, seed + 100 + j as u64)).collect(),
            up: (0..e).map(|j| lcg(i * h, seed + 200 + j as u64)).collect(),
            down: (0..e).map(|j| lcg(h * i, seed + 300 + j as u64)).collect(),
        }
    }
    fn experts(&self, h: usize) -> Vec<Expert<'_>> {
        (0..self.gate.len())
            .map(|j| {
                let i = self.gate[j].len() / h;
                Expert {
                    gate: Matrix::f32(&self.gate[j], i, h),
                    up: Matrix::f32(&self.up[j], i, h),
                    down: Matrix::f32(&self.down[j], h, i),
                }
            })
            .collect()
    }
}

// ------------------------------------------------------------------ router

#[test]
fn topk_softmax_equals_softmax_all_then_renormalise() {
    for seed in 0..200 {
        let n = 4 + (seed as usize % 60);
        let k = 1 + (seed as usize % n.min(8));
        let logits: Vec<f32> = lcg(n, seed).iter().map(|v| v * 6.0).collect();
        let a = route(&logits, k, true);
        let b = route_topk_softmax(&logits, k);
        assert_eq!(a.experts, b.experts, "seed {seed}");
        assert!(max_diff(&a.weights, &b.weights) < 2e-7, "seed {seed}");
        assert!((a.weights.iter().sum::<f32>() - 1.0).abs() < 1e-6);
    }
}

#[test]
fn unnormalised_weights_sum_below_one_and_k_equals_n() {
    let logits = [0.3f32, -1.0, 2.0, 0.5];
    let r = route(&logits, 2, false);
    assert_eq!(r.experts, vec![2, 3]);
    assert!(r.weights.iter().sum::<f32>() < 1.0);
    // k = N: every expert, weights are the full softmax, normalised or not.
    let all = route(&logits, 4, false);
    let norm = route(&logits, 4, true);
    assert_eq!(all.experts, vec![2, 3, 0, 1]);
    assert!(max_diff(&all.weights, &norm.weights) < 1e-7);
    assert!((all.weights.iter().sum::<f32>() - 1.0).abs() < 1e-6);
}

#[test]
fn ties_go_to_the_lower_index() {
    let r = route(&[1.0, 5.0, 5.0, 5.0], 2, true);
    assert_eq!(
        r,
        Routing {
            experts: vec![1, 2],
            weights: vec![0.5, 0.5]
        }
    );
    assert_eq!(
        route_topk_softmax(&[2.0, 2.0, 2.0], 3).experts,
        vec![0, 1, 2]
    );
}

#[test]
#[should_panic(expected = "top-k")]
fn k_larger_than_experts_is_rejected() {
    route(&[1.0, 2.0], 3, true);
}

// ------------------------------------------------------------------ layer

#[test]
fn bucketed_equals_naive() {
    let (e, h, i, t, k) = (8, 16, 12, 11, 3);
    let w = Weights::random(e, h, i, 7);
    let experts = w.experts(h);
    let router = Matrix::f32(&w.router, e, h);
    let x = lcg(t * h, 99);
    for norm in [true, false] {
        let (a, ra) = moe_naive(&x, h, &router, &experts, k, norm);
        let (b, rb) = moe_bucketed(&x, h, &router, &experts, k, norm);
        assert_eq!(ra, rb);
        assert!(max_diff(&a, &b) < 1e-6, "{}", max_diff(&a, &b));
    }
}

#[test]
fn expert_matches_hand_formula() {
    let (h, i) = (3, 2);
    let gate = [1.0f32, 0.0, -1.0, 0.5, 0.5, 0.5];
    let up = [2.0f32, 1.0, 0.0, 0.0, -1.0, 1.0];
    let down = [1.0f32, 0.0, 0.0, 1.0, 1.0, -1.0];
    let e = Expert {
        gate: Matrix::f32(&gate, i, h),
        up: Matrix::f32(&up, i, h),
        down: Matrix::f32(&down, h, i),
    };
    let x = [1.0f32, 2.0, 3.0];
    let silu = |v: f32| v / (1.0 + (-v).exp());
    let g = [1.0 - 3.0, 0.5 * 6.0];
    let u = [2.0 + 2.0, -2.0 + 3.0];
    let a = [silu(g[0]) * u[0], silu(g[1]) * u[1]];
    let want = [a[0], a[1], a[0] - a[1]];
    let mut out = [0.0f32; 3];
    e.forward(&x, &mut out);
    assert!(max_diff(&out, &want) < 1e-6);
    assert_eq!(e.num_params(), 3 * h * i);
}

#[test]
fn shared_expert_is_added_to_the_routed_sum() {
    let (e, h, i, t, k) = (6, 8, 5, 4, 2);
    let w = Weights::random(e, h, i, 3);
    let s = Weights::random(1, h, 2 * i, 4);
    let experts = w.experts(h);
    let shared = s.experts(h);
    let router = Matrix::f32(&w.router, e, h);
    let x = lcg(t * h, 5);
    let (y, _) = moe_with_shared(&x, h, &router, &experts, &shared, k, true);
    let (routed, _) = moe_bucketed(&x, h, &router, &experts, k, true);
    let mut f = vec![0.0f32; h];
    for tok in 0..t {
        shared[0].forward(&x[tok * h..(tok + 1) * h], &mut f);
        for d in 0..h {
            assert!((y[tok * h + d] - (routed[tok * h + d] + f[d])).abs() < 1e-6);
        }
    }
}

#[test]
fn placement_rules() {
    // Qwen3-30B-A3B: step 1, no mlp-only layers → every layer.
    assert!((0..48).all(|l| is_moe_layer(l, 1, &[], 0)));
    // Step 2: layers 1, 3, 5, … (transformers tests (layer + 1) % step == 0).
    let sparse: Vec<usize> = (0..8).filter(|&l| is_moe_layer(l, 2, &[], 0)).collect();
    assert_eq!(sparse, vec![1, 3, 5, 7]);
    // mlp_only_layers overrides.
    assert!(!is_moe_layer(3, 1, &[3, 4], 0) && is_moe_layer(5, 1, &[3, 4], 0));
    // DeepSeek-V3: first 3 of 61 dense.
    let dense = (0..61).filter(|&l| !is_moe_layer(l, 1, &[], 3)).count();
    assert_eq!(dense, 3);
    assert_eq!(
        (0..61).filter(|&l| is_moe_layer_deepseek(l, 3, 1)).count(),
        58
    );
    assert!(!is_moe_layer(0, 0, &[], 0));
}

// ------------------------------------------------------------------ transformers oracle

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/moe/{name}", env!("CARGO_MANIFEST_DIR"));
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    fn walk(v: &Value, out: &mut Vec<f32>) {
        match v {
            Value::Array(a) => a.iter().for_each(|x| walk(x, out)),
            Value::Number(n) => out.push(n.as_f64().unwrap() as f32),
            _ => panic!("not a number"),
        }
    }
    let mut out = Vec::new();
    walk(v, &mut out);
    out
}

fn usizes(v: &Value) -> Vec<usize> {
    floats(v).iter().map(|&f| f as usize).collect()
}

/// Qwen3MoeSparseMoeBlock / MixtralSparseMoeBlock / OlmoeSparseMoeBlock in f32: weights to a
/// few ulps (different summation order in the router logits), outputs to 5e-7 of their scale.
#[test]
fn sparse_moe_blocks_match_transformers() {
    let fx = fixture("sparse_moe_blocks.json");
    for case in fx["cases"].as_array().unwrap() {
        let name = case["name"].as_str().unwrap();
        let (h, i, e, k) = (
            case["hidden_size"].as_u64().unwrap() as usize,
            case["moe_intermediate_size"].as_u64().unwrap() as usize,
            case["num_experts"].as_u64().unwrap() as usize,
            case["top_k"].as_u64().unwrap() as usize,
        );
        let norm = case["norm_topk_prob"].as_bool().unwrap();
        let router_w = floats(&case["router"]);
        let gate = floats(&case["gate_proj"]);
        let up = floats(&case["up_proj"]);
        let down = floats(&case["down_proj"]);
        let experts: Vec<Expert> = (0..e)
            .map(|j| Expert {
                gate: Matrix::f32(&gate[j * i * h..(j + 1) * i * h], i, h),
                up: Matrix::f32(&up[j * i * h..(j + 1) * i * h], i, h),
                down: Matrix::f32(&down[j * h * i..(j + 1) * h * i], h, i),
            })
            .collect();
        let router = Matrix::f32(&router_w, e, h);
        let x = floats(&case["x"]);
        let want = floats(&case["y"]);
        let want_idx = usizes(&case["router_indices"]);
        let want_w = floats(&case["router_scores"]);
        let (naive, routings) = moe_naive(&x, h, &router, &experts, k, norm);
        let (bucketed, _) = moe_bucketed(&x, h, &router, &experts, k, norm);
        for (t, r) in routings.iter().enumerate() {
            assert_eq!(r.experts, want_idx[t * k..(t + 1) * k], "{name} token {t}");
            let d = max_diff(&r.weights, &want_w[t * k..(t + 1) * k]);
            assert!(d < 5e-7, "{name} token {t}: weights differ by {d:e}");
        }
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(
            max_diff(&bucketed, &want) <= 5e-7 * scale,
            "{name}: {}",
            max_diff(&bucketed, &want)
        );
        assert!(max_diff(&naive, &want) <= 5e-7 * scale, "{name}");
    }
}

/// DeepseekV3TopkRouter: sigmoid affinities, bias for the choice only, group-limited top-k.
#[test]
fn deepseek_router_matches_transformers() {
    let fx = fixture("deepseek_router.json");
    let (e, h) = (
        fx["num_experts"].as_u64().unwrap() as usize,
        fx["hidden_size"].as_u64().unwrap() as usize,
    );
    let p = BiasedRouting {
        k: fx["top_k"].as_u64().unwrap() as usize,
        n_group: fx["n_group"].as_u64().unwrap() as usize,
        topk_group: fx["topk_group"].as_u64().unwrap() as usize,
        norm_topk_prob: fx["norm_topk_prob"].as_bool().unwrap(),
        routed_scaling_factor: fx["routed_scaling_factor"].as_f64().unwrap() as f32,
    };
    let w = floats(&fx["router"]);
    let bias = floats(&fx["bias"]);
    let x = floats(&fx["x"]);
    let router = Matrix::f32(&w, e, h);
    let idx = usizes(&fx["router_indices"]);
    let wts = floats(&fx["router_scores"]);
    for (t, xt) in x.chunks_exact(h).enumerate() {
        let r = router::route_biased(&layer::router_logits(&router, xt), &bias, &p);
        // transformers returns an unsorted top-k: compare as sets of (expert, weight).
        let mut want: Vec<(usize, f32)> = idx[t * p.k..(t + 1) * p.k]
            .iter()
            .copied()
            .zip(wts[t * p.k..(t + 1) * p.k].iter().copied())
            .collect();
        want.sort_by_key(|a| a.0);
        let mut got: Vec<(usize, f32)> = r
            .experts
            .iter()
            .copied()
            .zip(r.weights.iter().copied())
            .collect();
        got.sort_by_key(|a| a.0);
        for ((ge, gw), (we, ww)) in got.iter().zip(&want) {
            assert_eq!(ge, we, "token {t}");
            assert!((gw - ww).abs() < 5e-7, "token {t}");
        }
    }
}

// ------------------------------------------------------------------ worked examples

#[test]
fn block_sparse_example_gives_the_texts_numbers() {
    use llm_anatomy::moe::block_sparse;
    let b = block_sparse::text_example();
    assert_eq!(b.a.shape(), &[2, 6]);
    // A(α) = [α₁I α₂I α₃I]: α_j on the diagonal of block j, zero elsewhere.
    for r in 0..2 {
        for c in 0..6 {
            let want = if c % 2 == r { b.alpha[c / 2] } else { 0.0 };
            assert_eq!(b.a[[r, c]], want);
        }
    }
    assert_eq!(b.y_matrix, b.y_sum);
    assert!((b.y_matrix[0] - 0.6).abs() < 1e-15 && (b.y_matrix[1] - 4.1).abs() < 1e-15);
    // Any weights and vectors: the two forms agree.
    let alpha = ndarray::Array1::from(vec![0.7, -0.2, 0.4, 0.1]);
    let v: Vec<ndarray::Array1<f64>> = (0..4)
        .map(|i| ndarray::Array1::from_iter((0..5).map(|j| ((i * 5 + j) as f64).sin())))
        .collect();
    let g = block_sparse::compute(alpha, v);
    for (a, s) in g.y_matrix.iter().zip(&g.y_sum) {
        assert!((a - s).abs() < 1e-15);
    }
}

#[test]
fn hand_trace_equals_an_f64_reconstruction() {
    use llm_anatomy::moe::hand_trace::{self, DOWN, GATE, ROUTER, TOKENS, UP};
    let t = hand_trace::trace();
    assert!(t.max_abs_diff <= 1e-7);
    // Independent oracle in f64: logits, top-2, softmax of the two, experts, weighted sum.
    let silu = |v: f64| v / (1.0 + (-v).exp());
    let mv = |m: &[f32], x: &[f64]| -> Vec<f64> {
        m.chunks(2)
            .map(|r| r[0] as f64 * x[0] + r[1] as f64 * x[1])
            .collect()
    };
    let mut pairs = Vec::new();
    for (i, x) in TOKENS.chunks(2).enumerate() {
        let x = [x[0] as f64, x[1] as f64];
        let logits = mv(&ROUTER, &x);
        let mut order = [0usize, 1, 2];
        order.sort_by(|a, b| logits[*b].partial_cmp(&logits[*a]).unwrap());
        let (e0, e1) = (order[0], order[1]);
        let p0 = 1.0 / (1.0 + (logits[e1] - logits[e0]).exp());
        let f = |e: usize| {
            let g = mv(&GATE[e], &x);
            let u = mv(&UP[e], &x);
            let a = [silu(g[0]) * u[0], silu(g[1]) * u[1]];
            mv(&DOWN[e], &a)
        };
        let (f0, f1) = (f(e0), f(e1));
        for d in 0..2 {
            let y = p0 * f0[d] + (1.0 - p0) * f1[d];
            assert!((t.module_output[i * 2 + d] as f64 - y).abs() < 1e-6);
        }
        pairs.push((e0.min(e1), e0.max(e1)));
    }
    // Every token picks a different pair of experts.
    pairs.sort();
    pairs.dedup();
    assert_eq!(pairs, vec![(0, 1), (0, 2), (1, 2)]);
}

// ------------------------------------------------------------------ balancing

#[test]
fn switch_aux_loss_matches_transformers() {
    use llm_anatomy::moe::balance::switch_aux_loss;
    let fx = fixture("aux_loss.json");
    for case in fx["cases"].as_array().unwrap() {
        let n = case["num_experts"].as_u64().unwrap() as usize;
        let k = case["top_k"].as_u64().unwrap() as usize;
        let logits = floats(&case["logits"]);
        let want = case["aux_loss"].as_f64().unwrap() as f32;
        let got = switch_aux_loss(&logits, n, k);
        assert!((got - want).abs() <= 2e-6 * want, "{got} vs {want}");
    }
}

#[test]
fn aux_loss_is_k_when_even_and_grows_when_collapsed() {
    use llm_anatomy::moe::balance::switch_aux_loss;
    // 8 tokens, 4 experts, top-1, each expert first choice of two tokens.
    let mut even = vec![0.0f32; 32];
    for t in 0..8 {
        even[t * 4 + t % 4] = 2.0;
    }
    let p = 2f32.exp() / (2f32.exp() + 3.0);
    // f = 1/4 each, P = 1/4 each (by symmetry): N·Σ f P = 4·4·(1/16) = 1.
    assert!((switch_aux_loss(&even, 4, 1) - 1.0).abs() < 1e-6);
    // Everything to expert 0: f₀ = 1, P₀ = p.
    let mut collapsed = vec![0.0f32; 32];
    for t in 0..8 {
        collapsed[t * 4] = 2.0;
    }
    assert!((switch_aux_loss(&collapsed, 4, 1) - 4.0 * p).abs() < 1e-6);
}

#[test]
fn z_loss_is_the_mean_squared_logsumexp() {
    use llm_anatomy::moe::balance::router_z_loss;
    let logits = [0.0f32, 0.0, 0.0, 0.0, 10.0, 20.0, 30.0, 30.0];
    let lse0 = 4f64.ln();
    let lse1 = 30.0 + (2.0 + (-10f64).exp() + (-20f64).exp()).ln();
    let want = (lse0 * lse0 + lse1 * lse1) / 2.0;
    // In f32: lse₁ ≈ 30.7 carries half an ulp (2⁻²⁰), doubled by the square to ≈ 6e-5 in
    // lse₁² ≈ 942, plus the roundings of the square, the sum and the halving: ≤ 4 ulps of
    // the result, which lies in [256, 512) where an ulp is 2⁻¹⁵.
    assert!((router_z_loss(&logits, 4) as f64 - want).abs() <= 4.0 * 2f64.powi(-15));
}

#[test]
fn capacity_drops_what_does_not_fit() {
    use llm_anatomy::moe::balance::{dispatch_with_capacity, expert_capacity};
    assert_eq!(expert_capacity(10, 2, 4, 1.0), 5);
    assert_eq!(expert_capacity(10, 2, 4, 1.25), 7);
    let r = |e: [usize; 2]| Routing {
        experts: e.to_vec(),
        weights: vec![0.6, 0.4],
    };
    // Expert 0 is everybody's favourite; capacity 2.
    let routings = vec![r([0, 1]), r([0, 2]), r([0, 1]), r([0, 1]), r([0, 3])];
    let c = dispatch_with_capacity(&routings, 4, 2);
    assert_eq!(c.demand, vec![5, 3, 1, 1]);
    assert_eq!(
        c.kept[0].iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![0, 1]
    );
    assert_eq!(
        c.kept[1].iter().map(|p| p.0).collect::<Vec<_>>(),
        vec![0, 2]
    );
    // Dropped: expert 0 for tokens 2, 3, 4; expert 1 for token 3 → token 3 lost both.
    assert_eq!(c.dropped_assignments, 4);
    assert_eq!(c.tokens_fully_dropped, 1);
}

#[test]
fn bias_update_moves_against_the_load() {
    use llm_anatomy::moe::balance::bias_update;
    let mut b = vec![0.0f32; 4];
    bias_update(&mut b, &[0.5, 0.25, 0.25, 0.0], 0.1);
    assert_eq!(b, vec![-0.1, 0.0, 0.0, 0.1]);
}

#[test]
fn simulated_router_collapses_without_balancing_and_not_with_it() {
    use llm_anatomy::moe::balance::{Balancing, SimConfig, simulate};
    let cfg = SimConfig::default();
    let none = simulate(&cfg, Balancing::None);
    let aux = simulate(&cfg, Balancing::AuxLoss(0.1));
    let bias = simulate(&cfg, Balancing::Bias(0.01));
    // All three start from the same even-ish router.
    assert_eq!(none.load[0], aux.load[0]);
    assert!(none.load[0].iter().all(|&l| l < 0.2));
    assert!(none.final_max_load(50) > 0.45);
    assert!(aux.final_max_load(50) < 0.16 && bias.final_max_load(50) < 0.16);
    // Collapsed: one expert is in nearly every token's top 2, two more share the other
    // slot, five are starved; the aux loss reads it.
    let mut last = none.load[cfg.steps - 1].clone();
    last.sort_by(|a, b| b.partial_cmp(a).unwrap());
    assert!(
        last[0] > 0.45 && last[0] + last[1] + last[2] > 0.95,
        "{last:?}"
    );
    assert!(none.aux_loss[cfg.steps - 1] > 2.0 * aux.aux_loss[cfg.steps - 1]);
    assert!(none.dropped[cfg.steps - 1] > 250 && aux.dropped[cfg.steps - 1] == 0);
}

// ------------------------------------------------------------------ expert parallelism

#[test]
fn expert_parallel_equals_single_worker_bit_for_bit() {
    use llm_anatomy::moe::expert_parallel::{self, expert_parallel};
    let (moe, x) = expert_parallel::text_example();
    let (router, experts) = (moe.router(), moe.experts());
    let ep = expert_parallel(&x, 8, &router, &experts, 2, true, 2);
    let (single, routings) = moe_bucketed(&x, 8, &router, &experts, 2, true);
    assert_eq!(ep.output, single);
    assert_eq!(ep.routings, routings);
    // Bytes: every remote pair moves 8 f32 each way.
    let t = ep.traffic;
    assert_eq!(t.local_pairs + t.remote_pairs, 12);
    assert_eq!(t.dispatch_bytes, t.remote_pairs * 8 * 4);
    assert_eq!(t.combine_bytes, t.dispatch_bytes);
    assert_eq!(t.metadata_bytes, t.remote_pairs * (12 + 8));
    // The text's example: T1 needs E2 and travels from worker 0 to worker 1.
    assert!(routings[1].experts.contains(&2));
    // More workers and other shapes also match.
    let big = OwnedMoeFixture::new();
    for workers in [1, 3, 4] {
        let ep = expert_parallel(
            &big.x,
            16,
            &big.moe.router(),
            &big.moe.experts(),
            3,
            false,
            workers,
        );
        let (single, _) = moe_bucketed(&big.x, 16, &big.moe.router(), &big.moe.experts(), 3, false);
        assert_eq!(ep.output, single, "{workers} workers");
    }
}

struct OwnedMoeFixture {
    moe: llm_anatomy::moe::layer::OwnedMoe,
    x: Vec<f32>,
}

impl OwnedMoeFixture {
    fn new() -> Self {
        use llm_anatomy::moe::layer::OwnedMoe;
        OwnedMoeFixture {
            moe: OwnedMoe::random(8, 16, 10, 5),
            x: OwnedMoe::random(13, 16, 1, 6).router,
        }
    }
}

// ------------------------------------------------------------------ the book's generated text

/// The book includes these files; they must be what the code prints now.
/// `BLESS=1 cargo test --test suite moe::book_snippets` rewrites them.
#[test]
fn book_snippets_are_current() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("book/src/generated");
    for (name, text) in llm_anatomy::moe::book_snippets() {
        let path = dir.join(name);
        if std::env::var_os("BLESS").is_some() {
            std::fs::create_dir_all(&dir).unwrap();
            std::fs::write(&path, &text).unwrap();
        }
        let on_disk = std::fs::read_to_string(&path).unwrap_or_else(|_| {
            panic!(
                "{} missing: run BLESS=1 cargo test --test suite moe::",
                path.display()
            )
        });
        assert_eq!(
            on_disk,
            text,
            "{} is stale: run BLESS=1 cargo test --test suite moe::",
            path.display()
        );
    }
}
