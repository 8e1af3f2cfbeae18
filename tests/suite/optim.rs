//! Chapter 7 oracles: Newton–Schulz, Muon, clip_grad_norm, SGD-momentum and Adam against
//! PyTorch 2.15 (fixtures by scripts/gen_optim_fixtures.py), plus QK-clip, the Jacobi SVD
//! and the demo's hand-written gradients from first principles.

use llm_anatomy::optim::baselines::{Adam, SgdMomentum};
use llm_anatomy::optim::demo::{self, DemoConfig, OptimizerKind};
use llm_anatomy::optim::muon::{self, AdjustLr, MuonConfig};
use llm_anatomy::optim::{Muon, clip_grad_norm, newton_schulz, orthogonality_report, qk_clip, svd};
use ndarray::{Array2, ArrayD, IxDyn};
use serde_json::Value;

fn fixture(name: &str) -> Value {
    let path = format!("{}/tests/fixtures/optim/{name}", env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    serde_json::from_str(&text).unwrap()
}

fn floats(v: &Value) -> Vec<f32> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap() as f32)
        .collect()
}

fn floats64(v: &Value) -> Vec<f64> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect()
}

fn shape2(v: &Value) -> (usize, usize) {
    let s = v.as_array().unwrap();
    (
        s[0].as_u64().unwrap() as usize,
        s[1].as_u64().unwrap() as usize,
    )
}

fn matrix(shape: (usize, usize), v: &Value) -> Array2<f32> {
    Array2::from_shape_vec(shape, floats(v)).unwrap()
}

fn max_abs(a: &[f32], b: &[f32]) -> f32 {
    assert_eq!(a.len(), b.len());
    a.iter().zip(b).fold(0.0, |m, (x, y)| m.max((x - y).abs()))
}

fn flat(a: &Array2<f32>) -> Vec<f32> {
    a.iter().copied().collect()
}

#[test]
fn newton_schulz_matches_torch_f32() {
    let fx = fixture("newton_schulz.json");
    let mut worst = 0.0f32;
    for case in fx["cases"].as_array().unwrap() {
        let g = matrix(shape2(&case["shape"]), &case["input"]);
        let steps = case["steps"].as_u64().unwrap() as usize;
        let out = newton_schulz(&g, steps);
        let err = max_abs(&flat(&out), &floats(&case["f32"]));
        assert!(err < 1e-5, "{}: max |Δ| = {err:e}", case["name"]);
        worst = worst.max(err);
    }
    eprintln!("Newton–Schulz vs torch f32: max |Δ| = {worst:e}");
}

#[test]
fn newton_schulz_close_to_torch_bf16() {
    let fx = fixture("newton_schulz.json");
    let mut worst = 0.0f32;
    for case in fx["cases"].as_array().unwrap() {
        let g = matrix(shape2(&case["shape"]), &case["input"]);
        let out = newton_schulz(&g, case["steps"].as_u64().unwrap() as usize);
        let err = max_abs(&flat(&out), &floats(&case["bf16"]));
        if case["name"] == "24x40_steps5" {
            // Singular values spread over 1 … 1e-3: bf16 cannot resolve the small ones, so
            // here the gap to torch's bf16 output is torch's own f32-vs-bf16 gap.
            let torch_gap = max_abs(&floats(&case["f32"]), &floats(&case["bf16"]));
            assert!(
                (err - torch_gap).abs() < 1e-4,
                "{err:e} vs torch's own {torch_gap:e}"
            );
            eprintln!(
                "ill-conditioned 24×40: |ours − bf16| = {err:e}, |torch f32 − torch bf16| = {torch_gap:e}"
            );
            continue;
        }
        assert!(err < 5e-2, "{}: max |Δ| = {err:e}", case["name"]);
        worst = worst.max(err);
    }
    // bf16 keeps 8 significant bits: the difference must be visible, not zero.
    assert!(worst > 1e-4, "suspiciously close to bf16: {worst:e}");
    eprintln!("Newton–Schulz vs torch bf16 (Gaussian inputs): max |Δ| = {worst:e}");
}

#[test]
fn jacobi_svd_matches_torch_svd() {
    let fx = fixture("newton_schulz.json");
    for case in fx["cases"].as_array().unwrap() {
        if case["polar"].is_null() {
            continue;
        }
        let shape = shape2(&case["shape"]);
        let g = svd::to_f64(&matrix(shape, &case["input"]));
        let d = svd::svd(&g);
        let want = floats64(&case["sigma_before"]);
        for (s, w) in d.s.iter().zip(&want) {
            assert!(
                (s - w).abs() <= 1e-9 * want[0],
                "{}: σ {s} vs {w}",
                case["name"]
            );
        }
        // U diag(s) Vᵀ reconstructs the input, and U Vᵀ is torch's polar factor.
        let recon = d.u.dot(&Array2::from_diag(&ndarray::arr1(&d.s))).dot(&d.vt);
        let err = (&recon - &g).iter().fold(0.0f64, |m, v| m.max(v.abs()));
        assert!(
            err < 1e-9 * want[0].max(1.0),
            "{}: reconstruction {err:e}",
            case["name"]
        );
        let polar = d.u.dot(&d.vt);
        let want_polar = floats64(&case["polar"]);
        let err = polar
            .iter()
            .zip(&want_polar)
            .fold(0.0f64, |m, (a, b)| m.max((a - b).abs()));
        assert!(err < 1e-8, "{}: polar factor {err:e}", case["name"]);
    }
}

#[test]
fn singular_values_after_newton_schulz_match_torch() {
    let fx = fixture("newton_schulz.json");
    for case in fx["cases"].as_array().unwrap() {
        if case["polar"].is_null() {
            continue;
        }
        let g = matrix(shape2(&case["shape"]), &case["input"]);
        let r = orthogonality_report(&g, case["steps"].as_u64().unwrap() as usize);
        let want = floats64(&case["sigma_after_f32"]);
        for (s, w) in r.sigma_after.iter().zip(&want) {
            assert!((s - w).abs() < 1e-5, "{}: σ' {s} vs {w}", case["name"]);
        }
    }
}

#[test]
fn zero_gradient_stays_zero() {
    let z = Array2::<f32>::zeros((3, 5));
    assert!(newton_schulz(&z, 5).iter().all(|&v| v == 0.0));
}

fn muon_config(case: &Value) -> MuonConfig {
    MuonConfig {
        lr: case["lr"].as_f64().unwrap(),
        weight_decay: case["weight_decay"].as_f64().unwrap(),
        momentum: case["momentum"].as_f64().unwrap(),
        nesterov: case["nesterov"].as_bool().unwrap(),
        ns_steps: case["ns_steps"].as_u64().unwrap() as usize,
        eps: case["eps"].as_f64().unwrap() as f32,
        adjust_lr: match case["adjust_lr_fn"].as_str().unwrap() {
            "original" => AdjustLr::Original,
            "match_rms_adamw" => AdjustLr::MatchRmsAdamw,
            "spectral_unclamped" => AdjustLr::SpectralUnclamped,
            other => panic!("unknown adjust_lr_fn {other}"),
        },
        ..MuonConfig::default()
    }
}

/// Runs Rust's Muon over the fixture's gradients; returns the parameter after each step.
fn run_muon(case: &Value) -> Vec<Array2<f32>> {
    let shape = shape2(&case["shape"]);
    let mut params = [matrix(shape, &case["param0"])];
    let mut opt = Muon::new(muon_config(case));
    let mut out = Vec::new();
    for g in case["grads"].as_array().unwrap() {
        opt.step(&mut params, &[matrix(shape, g)]);
        out.push(params[0].clone());
    }
    out
}

#[test]
fn muon_defaults_are_torch_defaults() {
    let c = MuonConfig::default();
    assert_eq!(
        (c.lr, c.weight_decay, c.momentum, c.nesterov),
        (1e-3, 0.1, 0.95, true)
    );
    assert_eq!(
        (c.ns_steps, c.eps, c.adjust_lr),
        (5, 1e-7, AdjustLr::Original)
    );
    assert_eq!(c.ns_coefficients, (3.4445, -4.7750, 2.0315));
    // The fixture's default-config cases record torch's own defaults.
    let fx = fixture("muon.json");
    let case = &fx["cases"][0];
    assert_eq!(case["name"], "square_default");
    assert_eq!(case["weight_decay"].as_f64(), Some(0.1));
    assert_eq!(case["momentum"].as_f64(), Some(0.95));
    assert_eq!(case["nesterov"].as_bool(), Some(true));
}

#[test]
fn muon_steps_match_torch_f32() {
    let fx = fixture("muon.json");
    let mut worst = 0.0f32;
    for case in fx["cases"].as_array().unwrap() {
        let ours = run_muon(case);
        for (t, (p, want)) in ours
            .iter()
            .zip(case["params_f32"].as_array().unwrap())
            .enumerate()
        {
            let err = max_abs(&flat(p), &floats(want));
            assert!(err < 1e-5, "{} step {t}: {err:e}", case["name"]);
            worst = worst.max(err);
        }
    }
    eprintln!("Muon vs torch (f32 Newton–Schulz): max |Δ| = {worst:e}");
}

#[test]
fn muon_update_directions_match_torch_bf16() {
    // The orthogonalised update O_t = (decay·p_(t−1) − p_t) / adjusted_lr, recovered from
    // both trajectories, compared at bf16 precision.
    let fx = fixture("muon.json");
    let mut worst = 0.0f32;
    for case in fx["cases"].as_array().unwrap() {
        let cfg = muon_config(case);
        let shape = shape2(&case["shape"]);
        let adj = muon::adjust_lr(cfg.lr, cfg.adjust_lr, shape.0, shape.1) as f32;
        let decay = (1.0 - cfg.lr * cfg.weight_decay) as f32;
        let recover = |prev: &[f32], next: &[f32]| -> Vec<f32> {
            prev.iter()
                .zip(next)
                .map(|(p, n)| (p * decay - n) / adj)
                .collect()
        };
        let ours = run_muon(case);
        let torch: Vec<Vec<f32>> = case["params_bf16"]
            .as_array()
            .unwrap()
            .iter()
            .map(floats)
            .collect();
        let (mut prev_o, mut prev_t) = (floats(&case["param0"]), floats(&case["param0"]));
        for (t, (p, q)) in ours.iter().zip(&torch).enumerate() {
            let (uo, ut) = (recover(&prev_o, &flat(p)), recover(&prev_t, q));
            let err = max_abs(&uo, &ut);
            assert!(err < 5e-2, "{} step {t}: {err:e}", case["name"]);
            worst = worst.max(err);
            prev_o = flat(p);
            prev_t = q.clone();
        }
    }
    eprintln!("Muon update vs torch bf16: max |Δ| = {worst:e}");
}

#[test]
fn adjust_lr_rules() {
    // 40 × 10: √max(1, 4) = 2; 10 × 40 clamps to 1; Moonshot: 0.2·√40; unclamped: √(1/4).
    assert_eq!(muon::adjust_lr(0.02, AdjustLr::Original, 40, 10), 0.04);
    assert_eq!(muon::adjust_lr(0.02, AdjustLr::Original, 10, 40), 0.02);
    assert!(
        (muon::adjust_lr(1.0, AdjustLr::MatchRmsAdamw, 10, 40) - 0.2 * 40f64.sqrt()).abs() < 1e-15
    );
    assert_eq!(
        muon::adjust_lr(1.0, AdjustLr::SpectralUnclamped, 10, 40),
        0.5
    );
}

fn tensors(case: &Value, key: &str) -> Vec<ArrayD<f32>> {
    case["shapes"]
        .as_array()
        .unwrap()
        .iter()
        .zip(case[key].as_array().unwrap())
        .map(|(s, d)| {
            let shape: Vec<usize> = s
                .as_array()
                .unwrap()
                .iter()
                .map(|x| x.as_u64().unwrap() as usize)
                .collect();
            ArrayD::from_shape_vec(IxDyn(&shape), floats(d)).unwrap()
        })
        .collect()
}

#[test]
fn clip_grad_norm_matches_torch() {
    let fx = fixture("clip_grad_norm.json");
    let mut worst = 0.0f32;
    for case in fx["cases"].as_array().unwrap() {
        let p = match &case["norm_type"] {
            Value::String(s) if s == "inf" => f32::INFINITY,
            Value::String(s) if s == "-inf" => f32::NEG_INFINITY,
            v => v.as_f64().unwrap() as f32,
        };
        let max_norm = case["max_norm"].as_f64().unwrap() as f32;
        let mut grads = tensors(case, "grads");
        let total = clip_grad_norm(&mut grads, max_norm, p);
        let want = case["total_norm"].as_f64().unwrap() as f32;
        assert!(
            (total - want).abs() <= 1e-6 * want.abs().max(1.0),
            "{}: total {total} vs {want}",
            case["name"]
        );
        for (g, w) in grads.iter().zip(tensors(case, "clipped")) {
            let err = max_abs(g.as_slice().unwrap(), w.as_slice().unwrap());
            assert!(err < 1e-5, "{}: clipped {err:e}", case["name"]);
            worst = worst.max(err);
        }
    }
    eprintln!("clip_grad_norm vs torch: max |Δ| = {worst:e}");
}

#[test]
fn clip_grad_norm_edge_cases() {
    // No tensors: total norm 0, nothing to do.
    assert_eq!(clip_grad_norm(&mut [], 1.0, 2.0), 0.0);
    // A 3-4-5 triangle clipped to norm 1 comes out as (0.6, 0.8) up to the 1e-6 guard.
    let mut g = vec![ArrayD::from_shape_vec(IxDyn(&[2]), vec![3.0f32, 4.0]).unwrap()];
    assert_eq!(clip_grad_norm(&mut g, 1.0, 2.0), 5.0);
    let v = g[0].as_slice().unwrap();
    assert!(
        (v[0] - 0.6).abs() < 1e-6 && (v[1] - 0.8).abs() < 1e-6,
        "{v:?}"
    );
    // A NaN gradient makes the norm NaN, and torch then multiplies everything by NaN.
    let mut g = vec![ArrayD::from_shape_vec(IxDyn(&[2]), vec![f32::NAN, 1.0]).unwrap()];
    assert!(clip_grad_norm(&mut g, 1.0, 2.0).is_nan());
    assert!(g[0].iter().all(|v| v.is_nan()));
}

#[test]
fn sgd_and_adam_match_torch() {
    let fx = fixture("baselines.json");
    for case in fx["cases"].as_array().unwrap() {
        let shape = shape2(&case["shape"]);
        let mut params = [matrix(shape, &case["param0"])];
        let mut sgd = SgdMomentum::new(0.1, 0.9);
        let mut adam = Adam::new(0.01);
        for (g, want) in case["grads"]
            .as_array()
            .unwrap()
            .iter()
            .zip(case["params"].as_array().unwrap())
        {
            let grads = [matrix(shape, g)];
            match case["name"].as_str().unwrap() {
                "sgd_momentum" => sgd.step(&mut params, &grads),
                "adam" => adam.step(&mut params, &grads),
                other => panic!("unknown {other}"),
            }
            let err = max_abs(&flat(&params[0]), &floats(want));
            assert!(err < 1e-5, "{}: {err:e}", case["name"]);
        }
    }
}

#[test]
fn qk_clip_puts_the_largest_logit_on_tau() {
    let (seq, hidden, heads, hd) = (12, 16, 4, 8);
    let x = llm_anatomy::rand::random_tokens(seq, hidden, 1);
    let mut w_q = llm_anatomy::rand::random_tokens(heads * hd, hidden, 2);
    let mut w_k = llm_anatomy::rand::random_tokens(heads * hd, hidden, 3);
    // Blow up head 1 and head 3 so they exceed τ; keep heads 0 and 2 small.
    for (h, f) in [(0usize, 0.2f32), (1, 3.0), (2, 0.2), (3, 5.0)] {
        w_q.slice_mut(ndarray::s![h * hd..(h + 1) * hd, ..])
            .mapv_inplace(|v| v * f);
    }
    let scale = 1.0 / (hd as f32).sqrt();
    let before = qk_clip::max_logits_per_head(&x, &w_q, &w_k, heads, scale, true).unwrap();
    let tau = 20.0;
    assert!(
        before[1] > tau && before[3] > tau && before[0] < tau && before[2] < tau,
        "{before:?}"
    );
    let report = qk_clip::qk_clip(&mut w_q, &mut w_k, &before, tau).unwrap();
    let after = qk_clip::max_logits_per_head(&x, &w_q, &w_k, heads, scale, true).unwrap();
    for h in 0..heads {
        if before[h] > tau {
            assert!(
                (after[h] - tau).abs() < 1e-5 * tau,
                "head {h}: {}",
                after[h]
            );
            assert!((report.gammas[h] - tau / before[h]).abs() < 1e-7);
        } else {
            assert_eq!(after[h], before[h], "head {h} must be untouched");
            assert_eq!(report.gammas[h], 1.0);
        }
    }
    // Bad shapes are an error, not a panic.
    assert!(qk_clip::max_logits_per_head(&x, &w_q, &w_k, 5, scale, true).is_err());
}

#[test]
fn mlp_gradients_match_finite_differences() {
    let cfg = DemoConfig {
        d_in: 5,
        hidden: 7,
        d_out: 3,
        n_train: 16,
        n_test: 4,
        ..DemoConfig::default()
    };
    let task = demo::task(&cfg, 9);
    let w1 = llm_anatomy::rand::random_tokens(7, 5, 10) * 0.5;
    let w2 = llm_anatomy::rand::random_tokens(3, 7, 11) * 0.5;
    let (_, g1, g2) = demo::loss_and_grads(&w1, &w2, &task.x_train, &task.y_train);
    let h = 1e-2f32;
    for (which, grad) in [(0, &g1), (1, &g2)] {
        for idx in [(0, 0), (1, 2), (2, 4)] {
            let (mut plus, mut minus) = ([w1.clone(), w2.clone()], [w1.clone(), w2.clone()]);
            plus[which][idx] += h;
            minus[which][idx] -= h;
            let fd = (demo::loss(&plus[0], &plus[1], &task.x_train, &task.y_train)
                - demo::loss(&minus[0], &minus[1], &task.x_train, &task.y_train))
                / (2.0 * h);
            let an = grad[idx];
            assert!(
                (fd - an).abs() < 2e-3 * an.abs().max(0.1),
                "W{} {idx:?}: fd {fd} vs {an}",
                which + 1
            );
        }
    }
}

#[test]
fn demo_sweeps_are_not_at_the_edge() {
    // The comparison is only fair if each optimizer's best learning rate lies inside its
    // sweep; checked on both of the book's runs.
    let (long, short) = demo::book_runs();
    for r in [long, short] {
        for s in &r.sweeps {
            let i = s.lrs.iter().position(|&l| l == s.best_lr).unwrap();
            assert!(
                i > 0 && i + 1 < s.lrs.len(),
                "{} steps, {}: best lr {} at the edge of {:?}",
                r.config.steps,
                s.kind.name(),
                s.best_lr,
                s.lrs
            );
            eprintln!(
                "{:>5} steps {:<20} best lr {:<6} final held-out MSE {:.5}  sweep {:?}",
                r.config.steps,
                s.kind.name(),
                s.best_lr,
                s.best_final,
                s.final_losses
            );
        }
        eprintln!(
            "winner at {} steps: {}",
            r.config.steps,
            r.winner().kind.name()
        );
        assert!(OptimizerKind::ALL.contains(&r.winner().kind));
    }
}

#[test]
fn chapter7_book_numbers() {
    use llm_anatomy::optim::clip::total_norm;
    use llm_anatomy::optim::muon::{NS_COEFFICIENTS, ns_polynomial};
    let p = |x: f64| ns_polynomial(x, NS_COEFFICIENTS);
    let r3 = |x: f64| (x * 1000.0).round() / 1000.0;
    // p(1) = a + b + c and the five iterates of 1 (exercise 1).
    let mut x = 1.0;
    let mut seq = Vec::new();
    for _ in 0..5 {
        x = p(x);
        seq.push(r3(x));
    }
    assert_eq!(seq, [0.701, 1.114, 0.721, 1.090, 0.696]);
    // The positive fixed point 0.868 is repelling: |p'| ≈ 1.6.
    let (mut lo, mut hi) = (0.5, 1.0);
    for _ in 0..60 {
        let mid = 0.5 * (lo + hi);
        if p(mid) > mid { lo = mid } else { hi = mid }
    }
    assert_eq!(r3(lo), 0.868);
    let dp = (p(lo + 1e-6) - p(lo - 1e-6)) / 2e-6;
    assert!((dp.abs() - 1.6).abs() < 0.05, "{dp}");
    // After five steps every x from 0.00151 up is in [0.68, 1.20]; 0.0014 is not yet.
    let p5 = |x: f64| (0..5).fold(x, |y, _| p(y));
    let start = 0.00151f64.log10();
    let grid: Vec<f64> = (0..=20_000)
        .map(|i| 10f64.powf(start - start * i as f64 / 20_000.0))
        .collect();
    let (mn, mx) = grid
        .iter()
        .map(|&x| p5(x))
        .fold((f64::MAX, f64::MIN), |(a, b), y| (a.min(y), b.max(y)));
    assert!(
        mn >= 0.68 && (mx * 100.0).round() / 100.0 == 1.20,
        "{mn} {mx}"
    );
    assert!(p5(0.0014) < 0.68);
    // Exercise 4.
    assert_eq!(muon::adjust_lr(0.02, AdjustLr::Original, 4096, 1024), 0.04);
    assert_eq!(muon::adjust_lr(0.02, AdjustLr::Original, 1024, 4096), 0.02);
    assert!((muon::adjust_lr(0.02, AdjustLr::MatchRmsAdamw, 4096, 1024) - 0.256).abs() < 1e-12);
    // Exercise 5: per-tensor 0-norms 5, 0, 2 → total 2.
    let t = |v: Vec<f32>| ArrayD::from_shape_vec(IxDyn(&[v.len()]), v).unwrap();
    let grads = [
        t(vec![1.0, 2.0, 3.0, 4.0, 5.0, 0.0]),
        t(vec![0.0; 3]),
        t(vec![0.0, 7.0, 8.0]),
    ];
    assert_eq!(total_norm(&grads, 0.0), 2.0);
    // §7.3: the demo's measured numbers as the chapter prints them. These are REGRESSION
    // PINS, not derivations: the losses, best learning rates and crossing steps come from
    // running the demo's training loops, which nothing else computes; they were copied from
    // its output and hold the book's prose to what the code does now. A deliberate change
    // to the demo updates them and the chapter together.
    let (long, short) = demo::book_runs();
    let fin = |r: &demo::DemoResult, k| {
        let s = r.sweep(k);
        (s.best_lr, (s.best_final * 10_000.0).round() / 10_000.0)
    };
    assert_eq!(fin(long, OptimizerKind::Muon), (0.03, 0.0109));
    assert_eq!(fin(long, OptimizerKind::Adam), (0.03, 0.0247));
    assert_eq!(fin(long, OptimizerKind::SgdMomentum), (1.0, 0.0646));
    assert_eq!(long.winner().kind, OptimizerKind::Muon);
    assert_eq!(short.winner().kind, OptimizerKind::Adam);
    let r3f = |r: &demo::DemoResult, k| r3(r.sweep(k).best_final);
    assert_eq!(r3f(short, OptimizerKind::Adam), 0.328);
    assert_eq!(r3f(short, OptimizerKind::Muon), 0.351);
    assert_eq!(r3f(short, OptimizerKind::SgdMomentum), 0.351);
    let steps = long.config.eval_steps();
    let (a, m) = (
        &long.sweep(OptimizerKind::Adam).best_curve,
        &long.sweep(OptimizerKind::Muon).best_curve,
    );
    let last_above = (0..steps.len()).rev().find(|&i| m[i] >= a[i]).unwrap();
    assert_eq!(steps[last_above + 1], 600);
    assert_eq!(
        long.steps_to(OptimizerKind::Muon, *a.last().unwrap()),
        Some(750)
    );
    assert_eq!((r3(a[50]), r3(m[50]), steps[50]), (0.088, 0.104, 500));
    let ms = long.sweep(OptimizerKind::Muon);
    let best = ms.best_final;
    let ratios: Vec<f64> = [1usize, 3]
        .iter()
        .map(|&i| ms.final_losses[i] / best)
        .collect();
    assert_eq!(ms.lrs[2], 0.03);
    assert!(
        ratios.iter().all(|r| (18.0..=20.5).contains(r)),
        "{ratios:?}"
    );
}
