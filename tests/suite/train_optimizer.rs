//! Chapter 12's optimiser against torch 2.15 / transformers 5.24 (fixtures by
//! scripts/gen_train_fixtures.py): torch.optim.AdamW with weight decay and bias correction
//! under transformers' warm-up + cosine schedule, the schedules' multipliers, and
//! clip_grad_norm_; plus the Muon/AdamW split and QK-clip from first principles.

use llm_anatomy::optim::clip::clip_grad_norm_flat;
use llm_anatomy::optim::muon::{AdjustLr, MuonConfig, muon_update};
use llm_anatomy::train::optimizer::{
    Decay, Group, Optimizer, OptimizerConfig, QkTensors, Schedule, param_rule, qk_clip_layer,
};
use ndarray::Array2;
use serde_json::Value;

fn fixture() -> Value {
    let path = format!(
        "{}/tests/fixtures/train/optimizer.json",
        env!("CARGO_MANIFEST_DIR")
    );
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

fn shape(v: &Value) -> Vec<usize> {
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_u64().unwrap() as usize)
        .collect()
}

fn assert_close(ours: &[f32], theirs: &[f32], tol: f32, what: &str) {
    assert_eq!(ours.len(), theirs.len(), "{what}: length");
    for (i, (a, b)) in ours.iter().zip(theirs).enumerate() {
        assert!(
            (a - b).abs() <= tol * (1.0 + b.abs()),
            "{what}[{i}]: ours {a}, torch {b}"
        );
    }
}

#[test]
fn adamw_with_cosine_schedule_matches_torch() {
    let fx = fixture();
    let a = &fx["adamw"];
    // Two 2-D tables (AdamW with decay, as the embedding and head are) and one norm gain
    // (AdamW without decay): the split puts the fixture's two torch groups where they belong.
    let names = [
        "model.embed_tokens.weight",
        "lm_head.weight",
        "model.norm.weight",
    ];
    let shapes: Vec<Vec<usize>> = a["shapes"]["decay"]
        .as_array()
        .unwrap()
        .iter()
        .chain(a["shapes"]["no_decay"].as_array().unwrap())
        .map(shape)
        .collect();
    let specs: Vec<(&str, &[usize])> = names
        .iter()
        .zip(&shapes)
        .map(|(n, s)| (*n, s.as_slice()))
        .collect();
    let lr = a["lr"].as_f64().unwrap();
    let betas = a["betas"].as_array().unwrap();
    let config = OptimizerConfig {
        adamw_lr: lr,
        muon_lr: lr,
        betas: (betas[0].as_f64().unwrap(), betas[1].as_f64().unwrap()),
        eps: a["eps"].as_f64().unwrap(),
        weight_decay: a["weight_decay"].as_f64().unwrap(),
        ..OptimizerConfig::default()
    };
    let mut opt = Optimizer::new(config, &specs);
    assert!(opt.rules.iter().all(|r| r.group == Group::AdamW));
    assert_eq!(
        opt.rules.iter().map(|r| r.weight_decay).collect::<Vec<_>>(),
        [true, true, false]
    );
    let schedule = Schedule {
        warmup_steps: a["warmup"].as_u64().unwrap(),
        total_steps: a["total"].as_u64().unwrap(),
        decay: Decay::Cosine,
        min_lr_rate: a["min_lr_rate"].as_f64().unwrap(),
    };
    let group = |v: &Value| -> Vec<Vec<f32>> {
        let mut out: Vec<Vec<f32>> = v["decay"].as_array().unwrap().iter().map(floats).collect();
        out.extend(v["no_decay"].as_array().unwrap().iter().map(floats));
        out
    };
    let mut params = group(&a["init"]);
    for (t, step) in a["steps"].as_array().unwrap().iter().enumerate() {
        let factor = schedule.factor(t as u64);
        let torch_lr = step["lr"].as_f64().unwrap();
        assert!((lr * factor - torch_lr).abs() < 1e-12, "step {t} lr");
        let grads = group(&step["grads"]);
        opt.step(params.iter_mut().map(|p| p.as_mut_slice()), &grads, factor)
            .unwrap();
        for (i, (ours, theirs)) in params.iter().zip(group(&step["params"])).enumerate() {
            assert_close(ours, &theirs, 2e-6, &format!("step {t} param {i}"));
        }
    }
}

#[test]
fn schedules_match_transformers() {
    let fx = fixture();
    for (name, s) in fx["schedules"].as_object().unwrap() {
        let schedule = Schedule {
            warmup_steps: s["warmup"].as_u64().unwrap(),
            total_steps: s["total"].as_u64().unwrap(),
            decay: match s["decay"].as_str().unwrap() {
                "cosine" => Decay::Cosine,
                "linear" => Decay::Linear,
                other => panic!("{other}"),
            },
            min_lr_rate: s["min_lr_rate"].as_f64().unwrap(),
        };
        for (t, f) in s["factors"].as_array().unwrap().iter().enumerate() {
            let theirs = f.as_f64().unwrap();
            let ours = schedule.factor(t as u64);
            assert!(
                (ours - theirs).abs() < 1e-12,
                "{name} step {t}: {ours} vs {theirs}"
            );
        }
    }
}

#[test]
fn clip_flat_matches_torch() {
    let fx = fixture();
    let c = &fx["clip"];
    let mut grads: Vec<Vec<f32>> = c["grads"].as_array().unwrap().iter().map(floats).collect();
    let total = clip_grad_norm_flat(&mut grads, c["max_norm"].as_f64().unwrap() as f32, 2.0);
    let want = c["total_norm"].as_f64().unwrap() as f32;
    assert!((total - want).abs() < 1e-5 * want, "{total} vs {want}");
    for (ours, theirs) in grads.iter().zip(c["clipped"].as_array().unwrap()) {
        assert_close(ours, &floats(theirs), 1e-6, "clipped");
    }
}

#[test]
fn the_split_follows_moonlight() {
    let muon = |n: &str, s: &[usize]| param_rule(n, s).group == Group::Muon;
    assert!(muon("model.layers.0.self_attn.q_proj.weight", &[64, 32]));
    assert!(muon("model.layers.3.self_attn.o_proj.weight", &[32, 64]));
    assert!(muon(
        "model.layers.1.mlp.experts.7.down_proj.weight",
        &[32, 16]
    ));
    assert!(muon("model.layers.1.mlp.gate_proj.weight", &[16, 32]));
    assert!(muon(
        "model.layers.1.mlp.experts.gate_up_proj",
        &[4, 32, 16]
    ));
    assert!(!muon("model.embed_tokens.weight", &[100, 32]));
    assert!(!muon("lm_head.weight", &[100, 32]));
    assert!(!muon("model.layers.1.mlp.gate.weight", &[8, 32]));
    assert!(!muon("model.layers.1.input_layernorm.weight", &[32]));
    assert!(!muon("model.layers.1.self_attn.q_norm.weight", &[16]));
    assert!(!param_rule("model.norm.weight", &[32]).weight_decay);
    // A fused [E, 2I, H] gate_up_proj is 2E matrices, gate and up apart.
    let fused = param_rule("model.layers.0.mlp.experts.gate_up_proj", &[3, 8, 5]);
    assert_eq!(fused.matrices.len(), 6);
    assert_eq!(fused.matrices[1], (20, 4, 5));
    assert_eq!(fused.matrices[2], (40, 4, 5));
}

fn seeded(n: usize, seed: u32) -> Vec<f32> {
    // A small LCG: deterministic values without pulling a generator into the test.
    let mut x = seed.wrapping_mul(2_654_435_761).wrapping_add(1);
    (0..n)
        .map(|_| {
            x = x.wrapping_mul(1_664_525).wrapping_add(1_013_904_223);
            (x >> 8) as f32 / (1u32 << 24) as f32 - 0.5
        })
        .collect()
}

#[test]
fn muon_group_is_the_crates_muon_per_matrix() {
    // The Muon group steps each expert's gate and up of a fused tensor exactly as
    // optim::muon_update (pinned to torch.optim.Muon in tests/optim.rs) steps each matrix.
    let (e, i, h) = (2, 3, 5);
    let name = "model.layers.0.mlp.experts.gate_up_proj";
    let shape = [e, 2 * i, h];
    let config = OptimizerConfig {
        muon_lr: 0.02,
        weight_decay: 0.1,
        muon_adjust_lr: AdjustLr::MatchRmsAdamw,
        ..OptimizerConfig::default()
    };
    let mut opt = Optimizer::new(config.clone(), &[(name, &shape)]);
    let mut param = seeded(e * 2 * i * h, 1);
    let mut reference: Vec<Array2<f32>> = param
        .chunks(i * h)
        .map(|c| Array2::from_shape_vec((i, h), c.to_vec()).unwrap())
        .collect();
    let mut bufs = vec![Array2::<f32>::zeros((i, h)); reference.len()];
    let cfg = MuonConfig {
        lr: 0.02 * 0.5,
        weight_decay: 0.1,
        adjust_lr: AdjustLr::MatchRmsAdamw,
        ..MuonConfig::default()
    };
    for step in 0..3 {
        let grad = seeded(param.len(), 10 + step);
        opt.step(
            std::iter::once(param.as_mut_slice()),
            std::slice::from_ref(&grad),
            0.5,
        )
        .unwrap();
        for (k, (p, b)) in reference.iter_mut().zip(&mut bufs).enumerate() {
            let g = Array2::from_shape_vec((i, h), grad[k * i * h..(k + 1) * i * h].to_vec());
            muon_update(p, &g.unwrap(), b, &cfg);
        }
        let flat: Vec<f32> = reference.iter().flat_map(|m| m.iter().copied()).collect();
        assert_eq!(param, flat, "step {step}");
    }
}

#[test]
fn optimizer_rejects_mismatched_gradients() {
    let mut opt = Optimizer::new(OptimizerConfig::default(), &[("model.norm.weight", &[4])]);
    let mut p = vec![1.0f32; 4];
    let err = opt.step(std::iter::once(p.as_mut_slice()), &[vec![0.0; 3]], 1.0);
    assert!(err.is_err());
}

#[test]
fn qk_clip_on_norm_gains_brings_the_worst_head_to_tau() {
    let (mut q_norm, mut k_norm) = (vec![2.0f32; 4], vec![3.0f32; 4]);
    let gammas = qk_clip_layer(
        QkTensors::Norms {
            q_norm: &mut q_norm,
            k_norm: &mut k_norm,
        },
        &[50.0, 200.0, 10.0],
        4,
        100.0,
    )
    .unwrap();
    assert_eq!(gammas, vec![0.5; 3]);
    // Every logit is bilinear in the two gains: the product shrinks by γ = 0.5 exactly.
    let product = q_norm[0] * k_norm[0];
    assert!((product - 3.0).abs() < 1e-6, "{product}");
    // Below τ nothing moves.
    let (mut q, mut k) = (vec![2.0f32; 4], vec![3.0f32; 4]);
    let g = qk_clip_layer(
        QkTensors::Norms {
            q_norm: &mut q,
            k_norm: &mut k,
        },
        &[5.0],
        4,
        100.0,
    )
    .unwrap();
    assert_eq!((g, q[0], k[0]), (vec![1.0], 2.0, 3.0));
}

#[test]
fn qk_clip_without_norm_scales_each_query_head() {
    // 2 query heads of head_dim 2, hidden 3: head 1 is over τ by 4×.
    let mut q_proj = vec![1.0f32; 2 * 2 * 3];
    let mut bias = vec![1.0f32; 4];
    let g = qk_clip_layer(
        QkTensors::Query {
            q_proj: &mut q_proj,
            q_bias: Some(&mut bias),
        },
        &[1.0, 8.0],
        2,
        2.0,
    )
    .unwrap();
    assert_eq!(g, vec![1.0, 0.25]);
    assert_eq!(&q_proj[..6], &[1.0; 6]);
    assert_eq!(&q_proj[6..], &[0.25; 6]);
    assert_eq!(bias, vec![1.0, 1.0, 0.25, 0.25]);
}
