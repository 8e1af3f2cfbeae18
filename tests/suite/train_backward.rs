//! Chapter 12: the training forward equals the engine, and the hand-written backward
//! passes agree with finite differences (block by block, and for the whole model on tiny
//! random configs) and their fast forms with the clear references.
//!
//! The independent reference for the gradients is PyTorch's autograd: tests/grad_blocks.rs
//! and tests/grad_transformers.rs compare against fixtures it produced. The finite
//! differences here are a sanity check (central differences of the f32 loss).

use llm_anatomy::kernels::attention::Mask;
use llm_anatomy::qwen3::{Model, config::Qwen3Config};
use llm_anatomy::train::backward::blocks::*;
use llm_anatomy::train::backward::{LossOptions, logits, loss_and_grads, loss_only};
use llm_anatomy::train::params::Params;
use ndarray_rand::rand::{Rng, SeedableRng, rngs::StdRng};
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

fn randv(rng: &mut StdRng, n: usize) -> Vec<f32> {
    (0..n).map(|_| rng.random_range(-1.0f32..1.0)).collect()
}

fn max_abs(a: &[f32]) -> f32 {
    a.iter().fold(0.0f32, |m, x| m.max(x.abs()))
}

fn assert_close(what: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = max_abs(want).max(1e-6);
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!(
            (g - w).abs() <= rel * scale,
            "{what}[{i}]: {g} vs {w} (scale {scale})"
        );
    }
}

/// Central differences of `f` (a scalar of `x`) at every entry of `x`.
fn numeric_grad(x: &[f32], h: f32, f: impl Fn(&[f32]) -> f64) -> Vec<f32> {
    let mut xs = x.to_vec();
    (0..x.len())
        .map(|i| {
            xs[i] = x[i] + h;
            let up = f(&xs);
            xs[i] = x[i] - h;
            let down = f(&xs);
            xs[i] = x[i];
            ((up - down) / (2.0 * h as f64)) as f32
        })
        .collect()
}

fn weighted(y: &[f32], c: &[f32]) -> f64 {
    y.iter().zip(c).map(|(a, b)| *a as f64 * *b as f64).sum()
}

// -------------------------------------------------------------------------- blocks

#[test]
fn linear_backward_fast_equals_reference_and_finite_differences() {
    let mut rng = StdRng::seed_from_u64(1);
    let (rows, cols, n) = (7, 5, 30);
    let (w, x, dy) = (
        randv(&mut rng, rows * cols),
        randv(&mut rng, n * cols),
        randv(&mut rng, n * rows),
    );
    let (mut dx1, mut dw1) = (vec![0.0; n * cols], vec![0.0; rows * cols]);
    let (mut dx2, mut dw2) = (vec![0.0; n * cols], vec![0.0; rows * cols]);
    linear_backward_reference(&w, rows, cols, &x, &dy, Some(&mut dx1), &mut dw1);
    linear_backward(&w, rows, cols, &x, &dy, Some(&mut dx2), &mut dw2);
    assert_close("dx", &dx2, &dx1, 1e-5);
    assert_close("dw", &dw2, &dw1, 1e-5);
    let loss_w = |w: &[f32]| {
        let mut y = vec![0.0; n * rows];
        linear_forward(w, rows, cols, &x, &mut y);
        weighted(&y, &dy)
    };
    assert_close("dw fd", &numeric_grad(&w, 1e-2, loss_w), &dw1, 2e-3);
}

#[test]
fn rmsnorm_backward_matches_finite_differences() {
    let mut rng = StdRng::seed_from_u64(2);
    let n = 12;
    let (x, w, c) = (randv(&mut rng, n), randv(&mut rng, n), randv(&mut rng, n));
    let eps = 1e-6;
    let (mut dx, mut dw) = (vec![0.0; n], vec![0.0; n]);
    rmsnorm_backward_reference(&x, rms_inv(&x, eps), &w, &c, &mut dx, &mut dw);
    let f = |x: &[f32], w: &[f32]| {
        let mut y = vec![0.0; n];
        llm_anatomy::kernels::rmsnorm(x, w, eps, &mut y);
        weighted(&y, &c)
    };
    assert_close("dx", &dx, &numeric_grad(&x, 1e-2, |x| f(x, &w)), 3e-3);
    assert_close("dw", &dw, &numeric_grad(&w, 1e-2, |w| f(&x, w)), 3e-3);
}

#[test]
fn rope_backward_is_the_transposed_rotation() {
    let mut rng = StdRng::seed_from_u64(3);
    let d = 8;
    let table = llm_anatomy::position::rope::RopeTable::new(&[1.0, 0.3, 0.1, 0.01], 10, 1.2);
    let (cos, sin) = table.row(7);
    let (x, c) = (randv(&mut rng, d), randv(&mut rng, d));
    let mut dx = c.clone();
    rope_backward(&mut dx, cos, sin);
    let f = |x: &[f32]| {
        let mut y = x.to_vec();
        llm_anatomy::position::rope::apply_rope(&mut y, cos, sin);
        weighted(&y, &c)
    };
    assert_close("dx", &dx, &numeric_grad(&x, 1e-2, f), 2e-3);
}

#[test]
fn swiglu_and_softmax_backward_match_finite_differences() {
    let mut rng = StdRng::seed_from_u64(4);
    let n = 9;
    let (g, u, c) = (randv(&mut rng, n), randv(&mut rng, n), randv(&mut rng, n));
    let (mut dg, mut du) = (vec![0.0; n], vec![0.0; n]);
    swiglu_backward(&g, &u, &c, &mut dg, &mut du);
    let f = |g: &[f32], u: &[f32]| {
        let y: Vec<f32> = g
            .iter()
            .zip(u)
            .map(|(g, u)| llm_anatomy::kernels::silu(*g) * u)
            .collect();
        weighted(&y, &c)
    };
    assert_close("dg", &dg, &numeric_grad(&g, 1e-2, |g| f(g, &u)), 2e-3);
    assert_close("du", &du, &numeric_grad(&u, 1e-2, |u| f(&g, u)), 2e-3);

    let mut p = g.clone();
    llm_anatomy::kernels::softmax_in_place(&mut p);
    let mut dz = vec![0.0; n];
    softmax_backward(&p, &c, &mut dz);
    let sm = |z: &[f32]| {
        let mut p = z.to_vec();
        llm_anatomy::kernels::softmax_in_place(&mut p);
        weighted(&p, &c)
    };
    assert_close("dz", &dz, &numeric_grad(&g, 1e-2, sm), 2e-3);
}

#[test]
fn router_weights_backward_matches_finite_differences_both_ways() {
    let mut rng = StdRng::seed_from_u64(5);
    let (e, k) = (6, 2);
    let z = randv(&mut rng, e);
    let c = randv(&mut rng, k);
    for norm in [false, true] {
        let r = llm_anatomy::moe::router::route(&z, k, norm);
        let mut p = z.clone();
        llm_anatomy::kernels::softmax_in_place(&mut p);
        let mut dp = vec![0.0; e];
        topk_weights_backward(&p, &r.experts, &r.weights, &c, norm, &mut dp);
        let mut dz = vec![0.0; e];
        softmax_backward(&p, &dp, &mut dz);
        // The choice stays fixed under small steps (it is a.s. not at a tie).
        let f = |z: &[f32]| {
            let mut p = z.to_vec();
            llm_anatomy::kernels::softmax_in_place(&mut p);
            let mut w: Vec<f32> = r.experts.iter().map(|&x| p[x]).collect();
            if norm {
                let s: f32 = w.iter().sum();
                w.iter_mut().for_each(|x| *x /= s);
            }
            weighted(&w, &c)
        };
        assert_close("dz", &dz, &numeric_grad(&z, 1e-2, f), 3e-3);
    }
}

#[test]
fn attention_backward_fast_equals_reference_and_finite_differences() {
    let mut rng = StdRng::seed_from_u64(6);
    for mask in [Mask::Causal, Mask::SlidingWindow(3)] {
        let s = AttnShape {
            heads: 4,
            kv_heads: 2,
            head_dim: 4,
            scale: 0.5,
            mask,
        };
        let t = 6;
        let (qd, kvd) = (16, 8);
        let (q, k, v) = (
            randv(&mut rng, t * qd),
            randv(&mut rng, t * kvd),
            randv(&mut rng, t * kvd),
        );
        let c = randv(&mut rng, t * qd);
        let mut o = vec![0.0; t * qd];
        let mut probs = vec![0.0; 4 * t * t];
        attention_forward(&s, t, &q, &k, &v, &mut o, &mut probs);
        let zero = |n| vec![0.0f32; n];
        let (mut dq1, mut dk1, mut dv1) = (zero(t * qd), zero(t * kvd), zero(t * kvd));
        let (mut dq2, mut dk2, mut dv2) = (zero(t * qd), zero(t * kvd), zero(t * kvd));
        attention_backward_reference(&s, t, &q, &k, &v, &probs, &c, &mut dq1, &mut dk1, &mut dv1);
        attention_backward(&s, t, &q, &k, &v, &probs, &c, &mut dq2, &mut dk2, &mut dv2);
        assert_close("dq fast", &dq2, &dq1, 1e-5);
        assert_close("dk fast", &dk2, &dk1, 1e-5);
        assert_close("dv fast", &dv2, &dv1, 1e-5);
        let run = |q: &[f32], k: &[f32], v: &[f32]| {
            let mut o = vec![0.0; t * qd];
            let mut probs = vec![0.0; 4 * t * t];
            attention_forward(&s, t, q, k, v, &mut o, &mut probs);
            weighted(&o, &c)
        };
        assert_close(
            "dq",
            &dq1,
            &numeric_grad(&q, 1e-2, |q| run(q, &k, &v)),
            3e-3,
        );
        assert_close(
            "dk",
            &dk1,
            &numeric_grad(&k, 1e-2, |k| run(&q, k, &v)),
            3e-3,
        );
        assert_close(
            "dv",
            &dv1,
            &numeric_grad(&v, 1e-2, |v| run(&q, &k, v)),
            3e-3,
        );
    }
}

#[test]
fn cross_entropy_row_matches_finite_differences() {
    let mut rng = StdRng::seed_from_u64(7);
    let z = randv(&mut rng, 10);
    let mut g = z.clone();
    cross_entropy_row(&mut g, 3, 1.0);
    let f = |z: &[f32]| cross_entropy_row(&mut z.to_vec(), 3, 1.0);
    assert_close("dz", &g, &numeric_grad(&z, 1e-2, f), 2e-3);
}

// ---------------------------------------------------------------- model vs engine

/// The training forward's logits and loss equal the engine's on a checkpoint.
fn forward_equals_engine(dir: &Path, ids: &[u32]) {
    let p = Params::load(dir).unwrap();
    let (cfg, file) = llm_anatomy::qwen3::open(dir).unwrap();
    let model = Model::new(cfg, &file).unwrap();
    let engine = model.logits(ids).unwrap().logits;
    let ours = logits(&p, ids).unwrap();
    assert_close(&format!("{} logits", dir.display()), &ours, &engine, 2e-5);
    // The loss from the engine's logits, as transformers' mean next-token cross-entropy.
    let v = p.config.vocab_size;
    let mut ce = 0.0;
    for t in 0..ids.len() - 1 {
        ce += cross_entropy_row(
            &mut engine[t * v..(t + 1) * v].to_vec(),
            ids[t + 1] as usize,
            1.0,
        );
    }
    ce /= (ids.len() - 1) as f64;
    let l = loss_only(&p, &[ids.to_vec()], &LossOptions::default()).unwrap();
    assert!(
        (l.ce_loss as f64 - ce).abs() < 1e-5 * ce.max(1.0),
        "{}: {} vs {ce}",
        dir.display(),
        l.ce_loss
    );
    assert_eq!(l.tokens, ids.len() - 1);
}

#[test]
fn training_forward_equals_the_engine_on_the_tiny_checkpoint() {
    forward_equals_engine(
        &root().join("data/tiny-qwen3-moe"),
        &[9707, 11, 1879, 0, 220, 16, 17],
    );
}

#[test]
fn training_forward_equals_the_engine_on_every_qwen3_fixture() {
    let dir = root().join("tests/fixtures/qwen3");
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        let case = entry.unwrap().path();
        if !case.join("expected.json").is_file() {
            continue;
        }
        let expected: serde_json::Value =
            serde_json::from_slice(&std::fs::read(case.join("expected.json")).unwrap()).unwrap();
        let ids: Vec<u32> = expected["prompt"]
            .as_array()
            .unwrap()
            .iter()
            .map(|x| x.as_u64().unwrap() as u32)
            .collect();
        forward_equals_engine(&case, &ids);
        seen += 1;
    }
    assert!(seen >= 8, "{seen} fixtures");
}

// ------------------------------------------------------- model finite differences

fn tiny_config(extra: serde_json::Value) -> Qwen3Config {
    let mut v = serde_json::json!({"model_type": "qwen3_moe", "vocab_size": 11, "hidden_size": 8,
        "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 4, "intermediate_size": 10, "moe_intermediate_size": 6, "num_experts": 4,
        "num_experts_per_tok": 2, "max_position_embeddings": 32, "initializer_range": 0.5,
        "rope_theta": 100.0, "tie_word_embeddings": false});
    for (k, x) in extra.as_object().unwrap() {
        v[k] = x.clone();
    }
    Qwen3Config::from_json(&v, "tiny").unwrap()
}

/// Every gradient entry of a random model against central differences of the loss.
fn model_matches_finite_differences(cfg: Qwen3Config, opts: LossOptions, seed: u64) {
    let p = Params::init(&cfg, seed).unwrap();
    let batch = vec![vec![1, 5, 3, 9, 2, 7], vec![4, 4, 10, 0, 6]];
    let mut g = p.zeros_like();
    loss_and_grads(&p, &batch, &opts, &mut g).unwrap();
    let base = loss_only(&p, &batch, &opts).unwrap();
    let h = 1e-2f32;
    let mut q = p.clone();
    for (i, param) in p.params.iter().enumerate() {
        let scale = max_abs(&g.grads[i]).max(1e-3);
        for j in 0..param.data.len() {
            q.params[i].data[j] = param.data[j] + h;
            let up = loss_only(&q, &batch, &opts).unwrap();
            q.params[i].data[j] = param.data[j] - h;
            let down = loss_only(&q, &batch, &opts).unwrap();
            q.params[i].data[j] = param.data[j];
            if up.expert_counts != base.expert_counts || down.expert_counts != base.expert_counts {
                continue; // the step moved a top-k choice: no derivative there
            }
            let fd = (up.loss as f64 - down.loss as f64) / (2.0 * h as f64);
            let an = g.grads[i][j] as f64;
            assert!(
                (fd - an).abs() <= 1e-2 * scale as f64 + 1e-3 * an.abs(),
                "{}[{j}]: finite difference {fd} vs backward {an} (scale {scale})",
                param.name
            );
        }
    }
}

#[test]
fn moe_model_gradients_match_finite_differences() {
    let cfg = tiny_config(serde_json::json!({"norm_topk_prob": true}));
    model_matches_finite_differences(cfg, LossOptions::default(), 11);
}

#[test]
fn moe_losses_and_options_gradients_match_finite_differences() {
    let cfg = tiny_config(
        serde_json::json!({"norm_topk_prob": false, "attention_bias": true,
        "use_sliding_window": true, "sliding_window": 3, "tie_word_embeddings": true}),
    );
    let opts = LossOptions {
        aux_loss_coef: Some(0.1),
        z_loss_coef: 0.01,
        router_bias: vec![vec![0.0, 0.05, -0.05, 0.1]; 2],
    };
    model_matches_finite_differences(cfg, opts, 12);
}

#[test]
fn dense_and_mixed_models_gradients_match_finite_differences() {
    let mixed = tiny_config(serde_json::json!({"mlp_only_layers": [0],
        "rope_scaling": {"rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 4}}));
    model_matches_finite_differences(mixed, LossOptions::default(), 13);
    let qwen2 = tiny_config(serde_json::json!({"model_type": "qwen2", "num_key_value_heads": 2}));
    model_matches_finite_differences(qwen2, LossOptions::default(), 14);
}

/// Timing of one training step, batch 8 × 128, on the config named by
/// `ANATOMY_TIME_CONFIG` (e.g. the trainer's data/train/qwen3-moe-anatomy.json); run with
/// `--ignored --nocapture`.
#[test]
#[ignore = "timing, not a check"]
fn time_one_step() {
    let Ok(path) = std::env::var("ANATOMY_TIME_CONFIG") else {
        eprintln!("set ANATOMY_TIME_CONFIG to a config.json");
        return;
    };
    let cfg = Qwen3Config::from_file(Path::new(&path)).unwrap();
    let p = Params::init(&cfg, 1).unwrap();
    let mut rng = StdRng::seed_from_u64(9);
    let batch: Vec<Vec<u32>> = (0..8)
        .map(|_| {
            (0..128)
                .map(|_| rng.random_range(0..cfg.vocab_size as u32))
                .collect()
        })
        .collect();
    let opts = LossOptions::from_config(&cfg);
    let mut g = p.zeros_like();
    for _ in 0..2 {
        let t = std::time::Instant::now();
        let l = loss_and_grads(&p, &batch, &opts, &mut g).unwrap();
        let t1 = t.elapsed();
        let t = std::time::Instant::now();
        loss_only(&p, &batch, &opts).unwrap();
        eprintln!(
            "loss_and_grads {t1:?}, loss_only {:?}, loss {}",
            t.elapsed(),
            l.loss
        );
    }
}
