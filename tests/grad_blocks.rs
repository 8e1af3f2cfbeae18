//! Chapter 12, block by block against PyTorch's autograd: each backward function of
//! `train::backward::blocks`, handed the fixture's upstream gradient `dy`, returns torch's
//! float64 gradients (generator: scripts/gen_grad_fixtures.py, torch 2.15, transformers
//! 5.24; tensors listed in tests/fixtures/grad/blocks/README.md). Per tensor:
//! max |ours − torch| ≤ 1e-5 × max |torch| (ours computes in f32). The MoE block is put
//! together here from the router and SwiGLU pieces; the load-balancing loss (private to
//! `train::backward`) and the whole models are checked end to end by
//! tests/grad_transformers.rs. The z-loss fixture (`z_loss`) awaits a public z-loss block.

use llm_anatomy::kernels::attention::Mask;
use llm_anatomy::kernels::silu;
use llm_anatomy::train::backward::blocks::*;
use safetensors::{Dtype, SafeTensors};
use std::collections::HashMap;
use std::path::Path;

const TOLERANCE: f64 = 1e-5;

/// One fixture file: every tensor as f64 (F64 or I64) with its shape.
struct Block {
    name: String,
    tensors: HashMap<String, (Vec<usize>, Vec<f64>)>,
}

impl Block {
    fn open(name: &str) -> Block {
        let path = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("tests/fixtures/grad/blocks")
            .join(format!("{name}.safetensors"));
        let bytes = std::fs::read(&path).unwrap();
        let st = SafeTensors::deserialize(&bytes).unwrap();
        let mut tensors = HashMap::new();
        for (k, v) in st.tensors() {
            let data: Vec<f64> = match v.dtype() {
                Dtype::F64 => v
                    .data()
                    .chunks_exact(8)
                    .map(|b| f64::from_le_bytes(b.try_into().unwrap()))
                    .collect(),
                Dtype::I64 => v
                    .data()
                    .chunks_exact(8)
                    .map(|b| i64::from_le_bytes(b.try_into().unwrap()) as f64)
                    .collect(),
                other => panic!("{name}: {k}: unexpected dtype {other:?}"),
            };
            tensors.insert(k.to_string(), (v.shape().to_vec(), data));
        }
        Block {
            name: name.to_string(),
            tensors,
        }
    }

    fn shape(&self, k: &str) -> &[usize] {
        &self.tensors[k].0
    }

    fn f32(&self, k: &str) -> Vec<f32> {
        let t = self.tensors.get(k);
        let t = t.unwrap_or_else(|| panic!("{}: no tensor {k}", self.name));
        t.1.iter().map(|&x| x as f32).collect()
    }

    fn scalar(&self, k: &str) -> f64 {
        self.tensors[k].1[0]
    }

    /// Asserts `ours` is torch's `k` within the tolerance (relative to its largest value).
    fn check(&self, k: &str, ours: &[f32]) {
        let want = &self.tensors[k].1;
        assert_eq!(ours.len(), want.len(), "{}: {k}: length", self.name);
        let scale = want.iter().fold(0.0f64, |m, x| m.max(x.abs()));
        let err = ours
            .iter()
            .zip(want)
            .fold(0.0f64, |m, (&a, &b)| m.max((a as f64 - b).abs()));
        assert!(
            err <= TOLERANCE * scale && err.is_finite(),
            "{}: {k}: max |ours − torch| = {err:e}, {:.1e} of max |torch| {scale:e}",
            self.name,
            err / scale
        );
    }
}

/// `[A, B, C]` row-major → `[B, A, C]`.
fn swap01(x: &[f32], a: usize, b: usize, c: usize) -> Vec<f32> {
    let mut out = vec![0.0f32; x.len()];
    for i in 0..a {
        for j in 0..b {
            out[(j * a + i) * c..(j * a + i + 1) * c]
                .copy_from_slice(&x[(i * b + j) * c..(i * b + j + 1) * c]);
        }
    }
    out
}

#[test]
fn rmsnorm() {
    let b = Block::open("rmsnorm");
    let (x, w, dy) = (b.f32("x"), b.f32("w"), b.f32("dy"));
    let d = w.len();
    let eps = b.scalar("eps") as f32;
    let r: Vec<f32> = x.chunks_exact(d).map(|row| rms_inv(row, eps)).collect();
    let (mut dx, mut dw) = (vec![0.0; x.len()], vec![0.0; d]);
    rmsnorm_backward_rows(&x, &r, &w, &dy, &mut dx, &mut dw);
    b.check("dx", &dx);
    b.check("dw", &dw);
}

#[test]
fn rope_default_and_yarn() {
    for name in ["rope_default", "rope_yarn"] {
        let b = Block::open(name);
        let [t, h, d] = b.shape("x").try_into().unwrap();
        let inv_freq = &b.tensors["inv_freq"].1;
        let positions = &b.tensors["positions"].1;
        let factor = b.scalar("attention_factor");
        let mut dx = b.f32("dy");
        for (ti, &pos) in positions.iter().enumerate().take(t) {
            let angle: Vec<f64> = inv_freq.iter().map(|f| pos * f).collect();
            let cos: Vec<f32> = angle.iter().map(|a| (a.cos() * factor) as f32).collect();
            let sin: Vec<f32> = angle.iter().map(|a| (a.sin() * factor) as f32).collect();
            for hi in 0..h {
                rope_backward(
                    &mut dx[(ti * h + hi) * d..(ti * h + hi + 1) * d],
                    &cos,
                    &sin,
                );
            }
        }
        b.check("dx", &dx);
    }
}

#[test]
fn attention_causal_and_sliding() {
    for name in ["attention_causal", "attention_sliding"] {
        let b = Block::open(name);
        let [heads, t, d] = b.shape("q").try_into().unwrap();
        let kv_heads = b.shape("k")[0];
        let window = b.scalar("window") as usize;
        let s = AttnShape {
            heads,
            kv_heads,
            head_dim: d,
            scale: b.scalar("scale") as f32,
            mask: if window == 0 {
                Mask::Causal
            } else {
                Mask::SlidingWindow(window)
            },
        };
        // The fixture is per head ([H, T, d]); the blocks are per position ([T, H·d]).
        let q = swap01(&b.f32("q"), heads, t, d);
        let k = swap01(&b.f32("k"), kv_heads, t, d);
        let v = swap01(&b.f32("v"), kv_heads, t, d);
        let d_o = swap01(&b.f32("dy"), heads, t, d);
        let mut o = vec![0.0; t * heads * d];
        let mut probs = vec![0.0; heads * t * t];
        attention_forward(&s, t, &q, &k, &v, &mut o, &mut probs);
        b.check("probs", &probs);
        b.check("y", &swap01(&o, t, heads, d));
        let backwards: [(&str, AttentionBackward); 2] = [
            ("reference", attention_backward_reference),
            ("fast", attention_backward),
        ];
        for (form, backward) in backwards {
            let mut dq = vec![0.0; q.len()];
            let (mut dk, mut dv) = (vec![0.0; k.len()], vec![0.0; v.len()]);
            backward(&s, t, &q, &k, &v, &probs, &d_o, &mut dq, &mut dk, &mut dv);
            eprintln!("{name}: {form}");
            b.check("dq", &swap01(&dq, t, heads, d));
            b.check("dk", &swap01(&dk, t, kv_heads, d));
            b.check("dv", &swap01(&dv, t, kv_heads, d));
        }
    }
}

type AttentionBackward = fn(
    &AttnShape,
    usize,
    &[f32],
    &[f32],
    &[f32],
    &[f32],
    &[f32],
    &mut [f32],
    &mut [f32],
    &mut [f32],
);

#[test]
fn softmax() {
    let b = Block::open("softmax");
    let cols = b.shape("x")[1];
    let (p, dy) = (b.f32("y"), b.f32("dy"));
    let mut dx = vec![0.0; p.len()];
    for ((p, dy), dx) in p
        .chunks_exact(cols)
        .zip(dy.chunks_exact(cols))
        .zip(dx.chunks_exact_mut(cols))
    {
        softmax_backward(p, dy, dx);
    }
    b.check("dx", &dx);
}

#[test]
fn swiglu_mlp() {
    let b = Block::open("swiglu");
    let [n, hidden] = b.shape("x").try_into().unwrap();
    let inter = b.shape("gate_w")[0];
    let (x, gate_w, up_w, down_w, dy) = (
        b.f32("x"),
        b.f32("gate_w"),
        b.f32("up_w"),
        b.f32("down_w"),
        b.f32("dy"),
    );
    let (mut g, mut u) = (vec![0.0; n * inter], vec![0.0; n * inter]);
    linear_forward(&gate_w, inter, hidden, &x, &mut g);
    linear_forward(&up_w, inter, hidden, &x, &mut u);
    let a: Vec<f32> = g.iter().zip(&u).map(|(&g, &u)| silu(g) * u).collect();
    let mut y = vec![0.0; n * hidden];
    linear_forward(&down_w, hidden, inter, &a, &mut y);
    b.check("y", &y);
    let (mut da, mut ddown) = (vec![0.0; a.len()], vec![0.0; down_w.len()]);
    linear_backward(&down_w, hidden, inter, &a, &dy, Some(&mut da), &mut ddown);
    let (mut dg, mut du) = (vec![0.0; g.len()], vec![0.0; u.len()]);
    swiglu_backward(&g, &u, &da, &mut dg, &mut du);
    let mut dx = vec![0.0; x.len()];
    let (mut dgate, mut dup) = (vec![0.0; gate_w.len()], vec![0.0; up_w.len()]);
    linear_backward(&gate_w, inter, hidden, &x, &dg, Some(&mut dx), &mut dgate);
    linear_backward(&up_w, inter, hidden, &x, &du, Some(&mut dx), &mut dup);
    b.check("dx", &dx);
    b.check("dgate_w", &dgate);
    b.check("dup_w", &dup);
    b.check("ddown_w", &ddown);
    // The reference form of the linear backward agrees on the same products.
    let mut dx_ref = vec![0.0; x.len()];
    let mut dgate_ref = vec![0.0; gate_w.len()];
    linear_backward_reference(
        &gate_w,
        inter,
        hidden,
        &x,
        &dg,
        Some(&mut dx_ref),
        &mut dgate_ref,
    );
    b.check("dgate_w", &dgate_ref);
}

#[test]
fn cross_entropy_mean_over_shifted_labels() {
    let b = Block::open("cross_entropy");
    let [batch, t, vocab] = b.shape("logits").try_into().unwrap();
    let labels = &b.tensors["labels"].1;
    let mut z = b.f32("logits");
    let scale = 1.0 / (batch * (t - 1)) as f32;
    let mut loss = 0.0f64;
    for bi in 0..batch {
        for ti in 0..t {
            let row = &mut z[(bi * t + ti) * vocab..(bi * t + ti + 1) * vocab];
            if ti + 1 == t {
                row.fill(0.0); // the last position predicts nothing
                continue;
            }
            let target = labels[bi * t + ti + 1] as usize;
            loss += cross_entropy_row(row, target, scale) * scale as f64;
        }
    }
    b.check("loss", &[loss as f32]);
    b.check("dlogits", &z);
}

#[test]
fn moe_block_with_and_without_norm_topk_prob() {
    // transformers' Qwen3MoeSparseMoeBlock, taken apart into the blocks' pieces: the router
    // (linear, softmax, top-k weights) and each chosen expert (SwiGLU), token by token.
    for name in ["moe_norm_topk", "moe_no_norm"] {
        let b = Block::open(name);
        let [n, hidden] = b.shape("x").try_into().unwrap();
        let [experts, two_inter, _] = b.shape("gate_up").try_into().unwrap();
        let inter = two_inter / 2;
        let k = b.scalar("top_k") as usize;
        let norm = b.scalar("norm_topk_prob") == 1.0;
        let (x, router_w, gate_up, down, dy) = (
            b.f32("x"),
            b.f32("router_w"),
            b.f32("gate_up"),
            b.f32("down"),
            b.f32("dy"),
        );
        let want_idx = &b.tensors["topk_idx"].1;
        let (mut dx, mut drouter) = (vec![0.0; x.len()], vec![0.0; router_w.len()]);
        let (mut dgate_up, mut ddown) = (vec![0.0; gate_up.len()], vec![0.0; down.len()]);
        let mut y = vec![0.0f32; x.len()];
        for t in 0..n {
            let xt = &x[t * hidden..(t + 1) * hidden];
            let dyt = &dy[t * hidden..(t + 1) * hidden];
            let mut p = vec![0.0; experts];
            linear_forward(&router_w, experts, hidden, xt, &mut p);
            llm_anatomy::kernels::softmax_in_place(&mut p);
            let mut order: Vec<usize> = (0..experts).collect();
            order.sort_by(|&a, &c| p[c].total_cmp(&p[a]));
            let chosen = &order[..k];
            let want: Vec<usize> = want_idx[t * k..(t + 1) * k]
                .iter()
                .map(|&e| e as usize)
                .collect();
            assert_eq!(chosen, want.as_slice(), "{name}: token {t}: top-k");
            let sum: f32 = chosen.iter().map(|&e| p[e]).sum();
            let weights: Vec<f32> = chosen
                .iter()
                .map(|&e| if norm { p[e] / sum } else { p[e] })
                .collect();
            let mut dweights = vec![0.0; k];
            for (j, (&e, &w)) in chosen.iter().zip(&weights).enumerate() {
                let gu = &gate_up[e * two_inter * hidden..(e + 1) * two_inter * hidden];
                let (gate_w, up_w) = gu.split_at(inter * hidden);
                let down_w = &down[e * hidden * inter..(e + 1) * hidden * inter];
                let (mut g, mut u) = (vec![0.0; inter], vec![0.0; inter]);
                linear_forward(gate_w, inter, hidden, xt, &mut g);
                linear_forward(up_w, inter, hidden, xt, &mut u);
                let a: Vec<f32> = g.iter().zip(&u).map(|(&g, &u)| silu(g) * u).collect();
                let mut out = vec![0.0; hidden];
                linear_forward(down_w, hidden, inter, &a, &mut out);
                for (yi, oi) in y[t * hidden..(t + 1) * hidden].iter_mut().zip(&out) {
                    *yi += w * oi;
                }
                dweights[j] = out.iter().zip(dyt).map(|(o, d)| o * d).sum();
                let d_out: Vec<f32> = dyt.iter().map(|d| w * d).collect();
                let mut da = vec![0.0; inter];
                let dd = &mut ddown[e * hidden * inter..(e + 1) * hidden * inter];
                linear_backward(down_w, hidden, inter, &a, &d_out, Some(&mut da), dd);
                let (mut dg, mut du) = (vec![0.0; inter], vec![0.0; inter]);
                swiglu_backward(&g, &u, &da, &mut dg, &mut du);
                let dgu = &mut dgate_up[e * two_inter * hidden..(e + 1) * two_inter * hidden];
                let (dgate_w, dup_w) = dgu.split_at_mut(inter * hidden);
                let dxt = &mut dx[t * hidden..(t + 1) * hidden];
                linear_backward(gate_w, inter, hidden, xt, &dg, Some(&mut *dxt), dgate_w);
                linear_backward(up_w, inter, hidden, xt, &du, Some(dxt), dup_w);
            }
            let mut dp = vec![0.0; experts];
            topk_weights_backward(&p, chosen, &weights, &dweights, norm, &mut dp);
            let mut dz = vec![0.0; experts];
            softmax_backward(&p, &dp, &mut dz);
            let dxt = &mut dx[t * hidden..(t + 1) * hidden];
            linear_backward(&router_w, experts, hidden, xt, &dz, Some(dxt), &mut drouter);
        }
        b.check("y", &y);
        b.check("dx", &dx);
        b.check("drouter_w", &drouter);
        b.check("dgate_up", &dgate_up);
        b.check("ddown", &ddown);
    }
}
