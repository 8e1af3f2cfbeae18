//! Chapter 12: each hand-written backward block against PyTorch's autograd, on the
//! float64 fixtures of tests/fixtures/grad/blocks/ (scripts/gen_grad_fixtures.py blocks;
//! torch 2.15.0, transformers 5.24.0; README.md there says what each file holds). Our
//! blocks compute in f32, so each gradient must agree within 1e-5 of its largest value
//! (1e-4 for the MoE block, whose float32 router softmax the fixture keeps).

use llm_anatomy::kernels::attention::Mask;
use llm_anatomy::long_context::scaling::RopeConfig;
use llm_anatomy::position::rope::{RopeTable, apply_rope};
use llm_anatomy::train::backward::blocks::*;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::Path;

/// Every tensor of a fixture: its shape and values (F64 narrowed to f32, I64 as f32).
fn fixture(name: &str) -> HashMap<String, (Vec<usize>, Vec<f64>)> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/grad/blocks")
        .join(format!("{name}.safetensors"));
    let bytes = std::fs::read(&path).unwrap();
    let st = SafeTensors::deserialize(&bytes).unwrap();
    st.tensors()
        .into_iter()
        .map(|(n, t)| {
            let data: Vec<f64> = match t.dtype() {
                Dtype::F64 => t
                    .data()
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                    .collect(),
                Dtype::I64 => t
                    .data()
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f64)
                    .collect(),
                other => panic!("{name}: tensor {n}: dtype {other:?}"),
            };
            (n, (t.shape().to_vec(), data))
        })
        .collect()
}

struct Fx(HashMap<String, (Vec<usize>, Vec<f64>)>);

impl Fx {
    fn open(name: &str) -> Fx {
        Fx(fixture(name))
    }
    fn f32(&self, n: &str) -> Vec<f32> {
        self.0[n].1.iter().map(|&x| x as f32).collect()
    }
    fn scalar(&self, n: &str) -> f64 {
        self.0[n].1[0]
    }
    fn shape(&self, n: &str) -> Vec<usize> {
        self.0[n].0.clone()
    }
}

fn assert_close(what: &str, got: &[f32], want: &[f32], rel: f32) {
    assert_eq!(got.len(), want.len(), "{what}: lengths");
    let scale = want.iter().fold(0.0f32, |m, x| m.max(x.abs())).max(1e-12);
    let err = got
        .iter()
        .zip(want)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    assert!(
        err <= rel * scale,
        "{what}: max error {err:e} = {:e} of scale {scale:e}",
        err / scale
    );
}

#[test]
fn rmsnorm_matches_autograd() {
    let f = Fx::open("rmsnorm");
    let (x, w, dy) = (f.f32("x"), f.f32("w"), f.f32("dy"));
    let (n, eps) = (w.len(), f.scalar("eps") as f32);
    let rows = x.len() / n;
    let r: Vec<f32> = x.chunks_exact(n).map(|x| rms_inv(x, eps)).collect();
    let (mut dx, mut dw) = (vec![0.0; x.len()], vec![0.0; n]);
    rmsnorm_backward_rows(&x, &r, &w, &dy, &mut dx, &mut dw);
    assert_close("dx", &dx, &f.f32("dx"), 1e-5);
    assert_close("dw", &dw, &f.f32("dw"), 1e-5);
    let mut y = vec![0.0; x.len()];
    for t in 0..rows {
        llm_anatomy::kernels::rmsnorm(&x[t * n..(t + 1) * n], &w, eps, &mut y[t * n..(t + 1) * n]);
    }
    assert_close("y", &y, &f.f32("y"), 1e-5);
}

#[test]
fn rope_matches_autograd_default_and_yarn() {
    let configs: serde_json::Value = serde_json::from_slice(
        &std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("tests/fixtures/grad/blocks/rope_configs.json"),
        )
        .unwrap(),
    )
    .unwrap();
    for name in ["rope_default", "rope_yarn"] {
        let f = Fx::open(name);
        // The crate's RoPE init reproduces transformers' frequencies and attention factor.
        let rope = RopeConfig::from_model_config(&configs[name], name)
            .unwrap()
            .init(None)
            .unwrap();
        let inv: Vec<f32> = rope.inv_freq.iter().map(|&x| x as f32).collect();
        assert_close("inv_freq", &inv, &f.f32("inv_freq"), 1e-6);
        assert!((rope.attention_factor - f.scalar("attention_factor")).abs() < 1e-6);
        let positions = f.f32("positions");
        let shape = f.shape("x"); // [T, heads, d]
        let d = shape[2];
        let width = shape[1] * d;
        let max = positions.iter().fold(0.0f32, |m, &p| m.max(p)) as usize + 1;
        let table = RopeTable::new(&rope.inv_freq, max, rope.attention_factor);
        let (x, dy) = (f.f32("x"), f.f32("dy"));
        let (mut y, mut dx) = (x.clone(), dy.clone());
        for (t, &pos) in positions.iter().enumerate() {
            let (cos, sin) = table.row(pos as usize);
            for hd in 0..shape[1] {
                let span = t * width + hd * d..t * width + (hd + 1) * d;
                apply_rope(&mut y[span.clone()], cos, sin);
                rope_backward(&mut dx[span], cos, sin);
            }
        }
        assert_close(&format!("{name} y"), &y, &f.f32("y"), 1e-5);
        assert_close(&format!("{name} dx"), &dx, &f.f32("dx"), 1e-5);
    }
}

/// `[H, T, d]` to our `[T, H·d]`.
fn heads_to_rows(x: &[f32], heads: usize, t: usize, d: usize) -> Vec<f32> {
    let mut out = vec![0.0; x.len()];
    for h in 0..heads {
        for i in 0..t {
            for c in 0..d {
                out[i * heads * d + h * d + c] = x[(h * t + i) * d + c];
            }
        }
    }
    out
}

#[test]
fn attention_matches_autograd_causal_and_sliding() {
    for name in ["attention_causal", "attention_sliding"] {
        let f = Fx::open(name);
        let (qs, ks) = (f.shape("q"), f.shape("k"));
        let (heads, t, d, kv_heads) = (qs[0], qs[1], qs[2], ks[0]);
        let window = f.scalar("window") as usize;
        let s = AttnShape {
            heads,
            kv_heads,
            head_dim: d,
            scale: f.scalar("scale") as f32,
            mask: if window == 0 {
                Mask::Causal
            } else {
                Mask::SlidingWindow(window)
            },
        };
        let q = heads_to_rows(&f.f32("q"), heads, t, d);
        let k = heads_to_rows(&f.f32("k"), kv_heads, t, d);
        let v = heads_to_rows(&f.f32("v"), kv_heads, t, d);
        let dy = heads_to_rows(&f.f32("dy"), heads, t, d);
        let mut o = vec![0.0; q.len()];
        let mut probs = vec![0.0; heads * t * t];
        attention_forward(&s, t, &q, &k, &v, &mut o, &mut probs);
        assert_close("y", &o, &heads_to_rows(&f.f32("y"), heads, t, d), 1e-5);
        assert_close("probs", &probs, &f.f32("probs"), 1e-5);
        let (mut dq, mut dk, mut dv) = (vec![0.0; q.len()], vec![0.0; k.len()], vec![0.0; v.len()]);
        attention_backward(&s, t, &q, &k, &v, &probs, &dy, &mut dq, &mut dk, &mut dv);
        assert_close(
            &format!("{name} dq"),
            &dq,
            &heads_to_rows(&f.f32("dq"), heads, t, d),
            1e-5,
        );
        assert_close(
            &format!("{name} dk"),
            &dk,
            &heads_to_rows(&f.f32("dk"), kv_heads, t, d),
            1e-5,
        );
        assert_close(
            &format!("{name} dv"),
            &dv,
            &heads_to_rows(&f.f32("dv"), kv_heads, t, d),
            1e-5,
        );
    }
}

#[test]
fn softmax_matches_autograd() {
    let f = Fx::open("softmax");
    let n = f.shape("x")[1];
    let (x, dy) = (f.f32("x"), f.f32("dy"));
    let mut dx = vec![0.0; x.len()];
    for ((x, dy), dx) in x
        .chunks_exact(n)
        .zip(dy.chunks_exact(n))
        .zip(dx.chunks_exact_mut(n))
    {
        let mut p = x.to_vec();
        llm_anatomy::kernels::softmax_in_place(&mut p);
        softmax_backward(&p, dy, dx);
    }
    assert_close("dx", &dx, &f.f32("dx"), 1e-5);
}

/// A SwiGLU MLP forward and backward from the block functions, as the model composes them.
#[allow(clippy::type_complexity)]
fn mlp(
    x: &[f32],
    gw: &[f32],
    uw: &[f32],
    dw: &[f32],
    i: usize,
    h: usize,
    dy: &[f32],
) -> (Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>, Vec<f32>) {
    let n = x.len() / h;
    let (mut g, mut u, mut y) = (vec![0.0; n * i], vec![0.0; n * i], vec![0.0; n * h]);
    linear_forward(gw, i, h, x, &mut g);
    linear_forward(uw, i, h, x, &mut u);
    let a: Vec<f32> = g
        .iter()
        .zip(&u)
        .map(|(g, u)| llm_anatomy::kernels::silu(*g) * u)
        .collect();
    linear_forward(dw, h, i, &a, &mut y);
    let (mut da, mut dg, mut du, mut dx) = (
        vec![0.0; n * i],
        vec![0.0; n * i],
        vec![0.0; n * i],
        vec![0.0; n * h],
    );
    let (mut dgw, mut duw, mut ddw) = (vec![0.0; i * h], vec![0.0; i * h], vec![0.0; h * i]);
    linear_backward(dw, h, i, &a, dy, Some(&mut da), &mut ddw);
    swiglu_backward(&g, &u, &da, &mut dg, &mut du);
    linear_backward(gw, i, h, x, &dg, Some(&mut dx), &mut dgw);
    linear_backward(uw, i, h, x, &du, Some(&mut dx), &mut duw);
    (y, dx, dgw, duw, ddw)
}

#[test]
fn swiglu_mlp_matches_autograd() {
    let f = Fx::open("swiglu");
    let (i, h) = (f.shape("gate_w")[0], f.shape("gate_w")[1]);
    let (y, dx, dgw, duw, ddw) = mlp(
        &f.f32("x"),
        &f.f32("gate_w"),
        &f.f32("up_w"),
        &f.f32("down_w"),
        i,
        h,
        &f.f32("dy"),
    );
    assert_close("y", &y, &f.f32("y"), 1e-5);
    assert_close("dx", &dx, &f.f32("dx"), 1e-5);
    assert_close("dgate_w", &dgw, &f.f32("dgate_w"), 1e-5);
    assert_close("dup_w", &duw, &f.f32("dup_w"), 1e-5);
    assert_close("ddown_w", &ddw, &f.f32("ddown_w"), 1e-5);
}

#[test]
fn moe_block_matches_autograd_both_ways() {
    for name in ["moe_norm_topk", "moe_no_norm"] {
        let f = Fx::open(name);
        let (e, h) = (f.shape("router_w")[0], f.shape("router_w")[1]);
        let i = f.shape("down")[2];
        let k = f.scalar("top_k") as usize;
        let norm = f.scalar("norm_topk_prob") != 0.0;
        let (x, rw, gu, down, dy) = (
            f.f32("x"),
            f.f32("router_w"),
            f.f32("gate_up"),
            f.f32("down"),
            f.f32("dy"),
        );
        let n = x.len() / h;
        let mut logits = vec![0.0; n * e];
        linear_forward(&rw, e, h, &x, &mut logits);
        let (mut y, mut dx) = (vec![0.0; n * h], vec![0.0; n * h]);
        let (mut dgu, mut ddown, mut dz) =
            (vec![0.0; gu.len()], vec![0.0; down.len()], vec![0.0; n * e]);
        for t in 0..n {
            let z = &logits[t * e..(t + 1) * e];
            let r = llm_anatomy::moe::router::route(z, k, norm);
            let idx: Vec<f32> = f.f32("topk_idx")[t * k..(t + 1) * k].to_vec();
            assert_eq!(
                r.experts.iter().map(|&x| x as f32).collect::<Vec<_>>(),
                idx,
                "{name} row {t}"
            );
            let xt = &x[t * h..(t + 1) * h];
            let dyt = &dy[t * h..(t + 1) * h];
            let mut dw = vec![0.0; k];
            for (j, (&ex, &w)) in r.experts.iter().zip(&r.weights).enumerate() {
                let gw = &gu[ex * 2 * i * h..(ex * 2 + 1) * i * h];
                let uw = &gu[(ex * 2 + 1) * i * h..(ex * 2 + 2) * i * h];
                let dwn = &down[ex * h * i..(ex + 1) * h * i];
                let dout: Vec<f32> = dyt.iter().map(|d| d * w).collect();
                let (out, dxe, dgw, duw, ddw) = mlp(xt, gw, uw, dwn, i, h, &dout);
                dw[j] = llm_anatomy::kernels::dot(dyt, &out);
                for c in 0..h {
                    y[t * h + c] += w * out[c];
                    dx[t * h + c] += dxe[c];
                }
                add_into(&mut dgu[ex * 2 * i * h..(ex * 2 + 1) * i * h], &dgw);
                add_into(&mut dgu[(ex * 2 + 1) * i * h..(ex * 2 + 2) * i * h], &duw);
                add_into(&mut ddown[ex * h * i..(ex + 1) * h * i], &ddw);
            }
            let mut p = z.to_vec();
            llm_anatomy::kernels::softmax_in_place(&mut p);
            let mut dp = vec![0.0; e];
            topk_weights_backward(&p, &r.experts, &r.weights, &dw, norm, &mut dp);
            softmax_backward(&p, &dp, &mut dz[t * e..(t + 1) * e]);
        }
        let mut drw = vec![0.0; rw.len()];
        linear_backward(&rw, e, h, &x, &dz, Some(&mut dx), &mut drw);
        assert_close(&format!("{name} y"), &y, &f.f32("y"), 1e-5);
        assert_close(&format!("{name} dx"), &dx, &f.f32("dx"), 1e-4);
        assert_close(
            &format!("{name} drouter_w"),
            &drw,
            &f.f32("drouter_w"),
            1e-4,
        );
        assert_close(&format!("{name} dgate_up"), &dgu, &f.f32("dgate_up"), 1e-4);
        assert_close(&format!("{name} ddown"), &ddown, &f.f32("ddown"), 1e-4);
    }
}

#[test]
fn cross_entropy_matches_autograd() {
    let f = Fx::open("cross_entropy");
    let s = f.shape("logits");
    let (b, t, v) = (s[0], s[1], s[2]);
    let (logits, labels) = (f.f32("logits"), f.f32("labels"));
    let scale = 1.0 / (b * (t - 1)) as f32;
    let mut dlogits = vec![0.0f32; logits.len()];
    let mut loss = 0.0;
    for r in 0..b {
        for i in 0..t - 1 {
            let row = (r * t + i) * v;
            let mut z = logits[row..row + v].to_vec();
            loss += cross_entropy_row(&mut z, labels[r * t + i + 1] as usize, scale);
            dlogits[row..row + v].copy_from_slice(&z);
        }
    }
    loss /= (b * (t - 1)) as f64;
    assert!(
        (loss - f.scalar("loss")).abs() < 1e-5,
        "{loss} vs {}",
        f.scalar("loss")
    );
    assert_close("dlogits", &dlogits, &f.f32("dlogits"), 1e-5);
}

#[test]
fn load_balancing_loss_matches_transformers() {
    let f = Fx::open("load_balancing");
    let s = f.shape("router_logits"); // [layers, tokens, E]
    let (l, n, e) = (s[0], s[1], s[2]);
    let all = f.f32("router_logits");
    let layers: Vec<Vec<f32>> = (0..l)
        .map(|i| all[i * n * e..(i + 1) * n * e].to_vec())
        .collect();
    let mut dz = vec![vec![0.0; n * e]; l];
    let aux = load_balancing_loss(&layers, e, f.scalar("top_k") as usize, 1.0, &mut dz);
    assert!(
        (aux as f64 - f.scalar("aux")).abs() < 1e-6,
        "{aux} vs {}",
        f.scalar("aux")
    );
    assert_close(
        "drouter_logits",
        &dz.concat(),
        &f.f32("drouter_logits"),
        1e-5,
    );
}

#[test]
fn router_z_loss_matches_autograd() {
    let f = Fx::open("z_loss");
    let e = f.shape("router_logits")[1];
    let layers = vec![f.f32("router_logits")];
    let mut dz = vec![vec![0.0; layers[0].len()]];
    let z = router_z_loss(&layers, e, 1.0, &mut dz);
    assert!(
        (z as f64 - f.scalar("z")).abs() < 1e-5 * f.scalar("z").abs(),
        "{z} vs {}",
        f.scalar("z")
    );
    assert_close("drouter_logits", &dz[0], &f.f32("drouter_logits"), 1e-5);
}
