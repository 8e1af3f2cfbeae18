//! Chapter 12 — the training forward (source S0 5.4): the engine's forward pass
//! ([`crate::qwen3::model`]) on owned f32 parameters, for a batch of sequences, keeping
//! what the backward pass needs (the tape).
//!
//! It composes the same parts as the engine — [`rmsnorm`], the RoPE table of the config's
//! [`RopeConfig`](crate::long_context::scaling::RopeConfig) and [`apply_rope`], the MoE
//! chapter's [`route_into`](crate::moe::router::route_into) (softmax over all experts, top-k, `norm_topk_prob`), the
//! kernels' matmul — and a test pins its logits to `qwen3::Model`'s.

use super::blocks::{AttnShape, add_into, attention_forward, linear_forward, rms_inv};
use super::{LossOptions, check_batch};
use crate::error::{Error, Result};
use crate::kernels::attention::Mask;
use crate::kernels::{rmsnorm, silu};
use crate::moe::router::top_k_into;
use crate::position::rope::{RopeTable, apply_rope};
use crate::qwen3::config::Qwen3Config;
use crate::train::params::{Grads, Params};
use std::collections::HashMap;

/// Where a weight lives: `params[idx].data[off .. off + rows·cols]`, an `[rows, cols]`
/// matrix (a vector has one row). A fused expert tensor gives one view per expert.
#[derive(Clone, Copy, Debug)]
pub struct View {
    pub idx: usize,
    pub off: usize,
    pub rows: usize,
    pub cols: usize,
}

impl View {
    pub fn data<'a>(&self, p: &'a Params) -> &'a [f32] {
        &p.params[self.idx].data[self.off..self.off + self.rows * self.cols]
    }

    pub fn grad<'a>(&self, g: &'a mut Grads) -> &'a mut [f32] {
        &mut g.grads[self.idx][self.off..self.off + self.rows * self.cols]
    }
}

/// A SwiGLU network's three projections.
#[derive(Clone, Copy, Debug)]
pub struct MlpViews {
    pub gate: View,
    pub up: View,
    pub down: View,
}

#[derive(Clone, Debug)]
pub enum FfnViews {
    Dense(MlpViews),
    Moe {
        router: View,
        experts: Vec<MlpViews>,
    },
}

#[derive(Clone, Debug)]
pub struct LayerViews {
    pub input_layernorm: View,
    pub q_proj: View,
    pub k_proj: View,
    pub v_proj: View,
    pub o_proj: View,
    pub q_bias: Option<View>,
    pub k_bias: Option<View>,
    pub v_bias: Option<View>,
    pub o_bias: Option<View>,
    pub q_norm: Option<View>,
    pub k_norm: Option<View>,
    pub post_attention_layernorm: View,
    pub mlp: FfnViews,
}

/// Every weight of the model, resolved once per call from the parameters' names.
#[derive(Clone, Debug)]
pub struct Views {
    pub embed_tokens: View,
    pub layers: Vec<LayerViews>,
    pub norm: View,
    /// The embedding's view when `tie_word_embeddings`.
    pub lm_head: View,
}

impl Views {
    /// Finds every tensor the config calls for, checking each one's length.
    pub fn resolve(p: &Params) -> Result<Views> {
        let c = &p.config;
        let find = Finder {
            p,
            map: p.index_map(),
        };
        let (h, v) = (c.hidden_size, c.vocab_size);
        let embed_tokens = find.view("model.embed_tokens.weight", v, h)?;
        let layers = (0..c.num_hidden_layers)
            .map(|l| find.layer(c, l))
            .collect::<Result<Vec<_>>>()?;
        let lm_head = match c.tie_word_embeddings {
            true => embed_tokens,
            false => find.view("lm_head.weight", v, h)?,
        };
        Ok(Views {
            embed_tokens,
            layers,
            norm: find.view("model.norm.weight", 1, h)?,
            lm_head,
        })
    }
}

/// Looks parameters up by name, checking each one's shape.
struct Finder<'a> {
    p: &'a Params,
    map: HashMap<&'a str, usize>,
}

impl Finder<'_> {
    /// The whole tensor `name` as an `[rows, cols]` view.
    fn view(&self, name: &str, rows: usize, cols: usize) -> Result<View> {
        let idx = *self
            .map
            .get(name)
            .ok_or_else(|| Error::Invalid(format!("parameters: no tensor {name}")))?;
        let len = self.p.params[idx].data.len();
        if len != rows * cols {
            return Err(Error::Invalid(format!(
                "parameters: tensor {name} has {len} values, expected {rows}×{cols}"
            )));
        }
        Ok(View {
            idx,
            off: 0,
            rows,
            cols,
        })
    }

    /// A vector of `len` values when the config has it.
    fn optional(&self, on: bool, name: String, len: usize) -> Result<Option<View>> {
        on.then(|| self.view(&name, 1, len)).transpose()
    }

    /// Layer `l`'s attention, norms and feed-forward.
    fn layer(&self, c: &Qwen3Config, l: usize) -> Result<LayerViews> {
        let (h, d, q, kv) = (c.hidden_size, c.head_dim, c.q_dim(), c.kv_dim());
        let pre = format!("model.layers.{l}");
        let a = format!("{pre}.self_attn");
        let bias = c.attention_bias;
        // The feed-forward first: a missing tensor is reported in the order it always was.
        let mlp = self.ffn(c, l, &pre)?;
        Ok(LayerViews {
            input_layernorm: self.view(&format!("{pre}.input_layernorm.weight"), 1, h)?,
            q_proj: self.view(&format!("{a}.q_proj.weight"), q, h)?,
            k_proj: self.view(&format!("{a}.k_proj.weight"), kv, h)?,
            v_proj: self.view(&format!("{a}.v_proj.weight"), kv, h)?,
            o_proj: self.view(&format!("{a}.o_proj.weight"), h, q)?,
            q_bias: self.optional(bias, format!("{a}.q_proj.bias"), q)?,
            k_bias: self.optional(bias, format!("{a}.k_proj.bias"), kv)?,
            v_bias: self.optional(bias, format!("{a}.v_proj.bias"), kv)?,
            o_bias: self.optional(c.o_proj_bias, format!("{a}.o_proj.bias"), h)?,
            q_norm: self.optional(c.qk_norm, format!("{a}.q_norm.weight"), d)?,
            k_norm: self.optional(c.qk_norm, format!("{a}.k_norm.weight"), d)?,
            post_attention_layernorm: self.view(
                &format!("{pre}.post_attention_layernorm.weight"),
                1,
                h,
            )?,
            mlp,
        })
    }

    /// A dense MLP, or an MoE layer's router and experts.
    fn ffn(&self, c: &Qwen3Config, l: usize, pre: &str) -> Result<FfnViews> {
        let h = c.hidden_size;
        if !c.is_moe_layer(l) {
            let i = c.intermediate_size;
            return Ok(FfnViews::Dense(self.mlp(&format!("{pre}.mlp"), i, h)?));
        }
        let e = c.num_experts;
        let router = self.view(&format!("{pre}.mlp.gate.weight"), e, h)?;
        let fused = format!("{pre}.mlp.experts.gate_up_proj");
        let experts = if self.map.contains_key(fused.as_str()) {
            self.fused_experts(c, pre, &fused)?
        } else {
            let i = c.moe_intermediate_size;
            (0..e)
                .map(|x| self.mlp(&format!("{pre}.mlp.experts.{x}"), i, h))
                .collect::<Result<Vec<_>>>()?
        };
        Ok(FfnViews::Moe { router, experts })
    }

    /// A SwiGLU network's `gate_proj`, `up_proj`, `down_proj` under `prefix`.
    fn mlp(&self, prefix: &str, i: usize, h: usize) -> Result<MlpViews> {
        Ok(MlpViews {
            gate: self.view(&format!("{prefix}.gate_proj.weight"), i, h)?,
            up: self.view(&format!("{prefix}.up_proj.weight"), i, h)?,
            down: self.view(&format!("{prefix}.down_proj.weight"), h, i)?,
        })
    }

    /// transformers' fused layout: `gate_up_proj` `[E·2I, H]` (each expert's gate rows,
    /// then its up rows) and `down_proj` `[E·H, I]`, one view per expert.
    fn fused_experts(&self, c: &Qwen3Config, pre: &str, fused: &str) -> Result<Vec<MlpViews>> {
        let (h, e, i) = (c.hidden_size, c.num_experts, c.moe_intermediate_size);
        let gu = self.view(fused, e * 2 * i, h)?;
        let dn = self.view(&format!("{pre}.mlp.experts.down_proj"), e * h, i)?;
        Ok((0..e)
            .map(|x| MlpViews {
                gate: View {
                    off: x * 2 * i * h,
                    rows: i,
                    ..gu
                },
                up: View {
                    off: (x * 2 + 1) * i * h,
                    rows: i,
                    ..gu
                },
                down: View {
                    off: x * h * i,
                    rows: h,
                    ..dn
                },
            })
            .collect())
    }
}

/// A dense MLP's (or one expert's) saved activations for its rows.
#[derive(Debug, Default)]
pub struct MlpTape {
    /// Inputs `[n, H]`, pre-activation gate and up `[n, I]`, `silu(g)⊙u` `[n, I]`.
    pub x: Vec<f32>,
    pub g: Vec<f32>,
    pub u: Vec<f32>,
    pub a: Vec<f32>,
    /// Outputs `[n, H]` (before the routing weight).
    pub out: Vec<f32>,
}

#[derive(Debug)]
pub enum FfnTape {
    Dense(MlpTape),
    Moe {
        /// Router softmax over all experts `[N, E]`, and its logits.
        probs: Vec<f32>,
        logits: Vec<f32>,
        /// Per row: the k chosen experts and their weights.
        chosen: Vec<usize>,
        weights: Vec<f32>,
        /// Per expert: its rows as `(row, slot)` and its tape.
        rows: Vec<Vec<(usize, usize)>>,
        experts: Vec<MlpTape>,
    },
}

// ANCHOR: tape
/// One layer's saved activations; `N` is the batch's total positions.
#[derive(Debug)]
pub struct LayerTape {
    /// The residual stream entering the layer `[N, H]`, and after attention.
    pub x_in: Vec<f32>,
    pub x_mid: Vec<f32>,
    /// RMSNorm factors `[N]` and normalised inputs `[N, H]` of the two sub-blocks.
    pub r1: Vec<f32>,
    pub xn1: Vec<f32>,
    pub r2: Vec<f32>,
    pub xn2: Vec<f32>,
    /// q/k after projection and bias, before q_norm/k_norm; their norms' factors per head.
    pub q_raw: Vec<f32>,
    pub k_raw: Vec<f32>,
    pub q_r: Vec<f32>,
    pub k_r: Vec<f32>,
    /// q and k after RoPE, v.
    pub q: Vec<f32>,
    pub k: Vec<f32>,
    pub v: Vec<f32>,
    /// Per sequence: attention probabilities `[heads, T, T]`.
    pub probs: Vec<Vec<f32>>,
    /// Attention output, o_proj's input `[N, heads·d]`.
    pub attn: Vec<f32>,
    pub ffn: FfnTape,
}

// ANCHOR_END: tape

/// The forward's result: the tape (empty unless asked for), the final hidden states.
#[derive(Debug)]
pub struct Forward {
    pub views: Views,
    pub layers: Vec<LayerTape>,
    /// The last residual stream `[N, H]`, its final RMSNorm factors and output.
    pub x_last: Vec<f32>,
    pub r_final: Vec<f32>,
    pub xn_final: Vec<f32>,
    /// Per sequence: first row and length.
    pub seqs: Vec<(usize, usize)>,
    pub rope: RopeTable,
    /// Per MoE layer: the router logits `[N, E]` (the losses need every layer's).
    pub router_logits: Vec<Vec<f32>>,
    pub expert_counts: Vec<Vec<usize>>,
    pub max_logits: Vec<Vec<f32>>,
}

/// The attention geometry of a config's layer `l`.
pub fn attn_shape(c: &Qwen3Config, l: usize) -> AttnShape {
    AttnShape {
        heads: c.num_attention_heads,
        kv_heads: c.num_key_value_heads,
        head_dim: c.head_dim,
        scale: (c.head_dim as f64).powf(-0.5) as f32,
        mask: c.sliding_window[l].map_or(Mask::Causal, Mask::SlidingWindow),
    }
}

/// The training forward over `batch`; keeps every layer's tape when `save`.
pub fn forward(p: &Params, batch: &[Vec<u32>], opts: &LossOptions, save: bool) -> Result<Forward> {
    let c = &p.config;
    check_batch(c, batch)?;
    let views = Views::resolve(p)?;
    let layout = Layout::new(c, batch)?;
    let mut x = embed(p, &views, batch);
    let mut layers = Vec::new();
    let mut router_logits = Vec::new();
    let mut expert_counts = Vec::new();
    let mut max_logits = Vec::new();
    let mut moe_layer = 0;
    for (l, lw) in views.layers.iter().enumerate() {
        let bias = match lw.mlp {
            FfnViews::Moe { .. } => {
                moe_layer += 1;
                opts.router_bias
                    .get(moe_layer - 1)
                    .filter(|b| !b.is_empty())
            }
            FfnViews::Dense(_) => None,
        };
        let (tape, layer_max) = layer_forward(p, l, lw, &layout, bias, &mut x)?;
        max_logits.push(layer_max);
        if let FfnTape::Moe { logits, rows, .. } = &tape.ffn {
            router_logits.push(logits.clone());
            expert_counts.push(rows.iter().map(Vec::len).collect());
        }
        if save {
            layers.push(tape);
        }
    }
    let h = c.hidden_size;
    if let Some(i) = crate::kernels::first_non_finite(&x) {
        return Err(Error::Invalid(format!(
            "training forward: the last hidden state is not finite at position {} ({})",
            i / h,
            x[i]
        )));
    }
    let (r_final, xn_final) = norm_rows(&x, views.norm.data(p), c.rms_norm_eps);
    Ok(Forward {
        views,
        layers,
        x_last: x,
        r_final,
        xn_final,
        seqs: layout.seqs,
        rope: layout.rope,
        router_logits,
        expert_counts,
        max_logits,
    })
}

/// The flat batch: each sequence's first row and length, every row's position, and the
/// RoPE table up to the longest sequence.
struct Layout {
    seqs: Vec<(usize, usize)>,
    positions: Vec<usize>,
    rope: RopeTable,
}

impl Layout {
    fn new(c: &Qwen3Config, batch: &[Vec<u32>]) -> Result<Layout> {
        let mut seqs = Vec::with_capacity(batch.len());
        let mut n = 0;
        for s in batch {
            seqs.push((n, s.len()));
            n += s.len();
        }
        let max_len = batch.iter().map(Vec::len).max().unwrap_or(1);
        let init = c.rope.init(Some(max_len))?;
        let rope = RopeTable::new(&init.inv_freq, max_len, init.attention_factor);
        let positions = batch.iter().flat_map(|s| 0..s.len()).collect();
        Ok(Layout {
            seqs,
            positions,
            rope,
        })
    }
}

/// The embedding rows of every token, `[N, H]`.
fn embed(p: &Params, views: &Views, batch: &[Vec<u32>]) -> Vec<f32> {
    let h = p.config.hidden_size;
    let n: usize = batch.iter().map(Vec::len).sum();
    let mut x = vec![0.0f32; n * h];
    let emb = views.embed_tokens.data(p);
    for (row, &id) in x.chunks_exact_mut(h).zip(batch.iter().flatten()) {
        row.copy_from_slice(&emb[id as usize * h..(id as usize + 1) * h]);
    }
    x
}

/// Layer `l` on the residual stream `x` (updated in place): attention, then the
/// feed-forward, each on its RMSNorm'd input and added back. Returns the layer's tape and
/// each query head's largest attention logit.
fn layer_forward(
    p: &Params,
    l: usize,
    lw: &LayerViews,
    layout: &Layout,
    router_bias: Option<&Vec<f32>>,
    x: &mut Vec<f32>,
) -> Result<(LayerTape, Vec<f32>)> {
    let c = &p.config;
    let a = attention_sublayer(p, l, lw, x, layout);
    let x_in = std::mem::take(x);
    let mut x_mid = x_in.clone();
    add_into(&mut x_mid, &a.out);

    let (r2, xn2) = norm_rows(&x_mid, lw.post_attention_layernorm.data(p), c.rms_norm_eps);
    let mut y = vec![0.0f32; x_mid.len()];
    let ffn = match &lw.mlp {
        FfnViews::Dense(m) => {
            let tape = mlp_forward(p, m, xn2.clone());
            y.copy_from_slice(&tape.out);
            FfnTape::Dense(tape)
        }
        FfnViews::Moe { router, experts } => {
            moe_forward(c, p, *router, experts, &xn2, router_bias, &mut y)?
        }
    };
    *x = x_mid.clone();
    add_into(x, &y);
    let tape = LayerTape {
        x_in,
        x_mid,
        r1: a.r1,
        xn1: a.xn1,
        r2,
        xn2,
        q_raw: a.q_raw,
        k_raw: a.k_raw,
        q_r: a.q_r,
        k_r: a.k_r,
        q: a.q,
        k: a.k,
        v: a.v,
        probs: a.probs,
        attn: a.attn,
        ffn,
    };
    Ok((tape, a.max_logits))
}

/// The attention sub-block's saved activations, its output `[N, H]` (o_proj's, before
/// the residual add) and each query head's largest logit.
struct AttentionPass {
    r1: Vec<f32>,
    xn1: Vec<f32>,
    q_raw: Vec<f32>,
    k_raw: Vec<f32>,
    q_r: Vec<f32>,
    k_r: Vec<f32>,
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    probs: Vec<Vec<f32>>,
    attn: Vec<f32>,
    out: Vec<f32>,
    max_logits: Vec<f32>,
}

/// RMSNorm, the q/k/v projections, q_norm/k_norm and RoPE, attention per sequence, o_proj.
fn attention_sublayer(
    p: &Params,
    l: usize,
    lw: &LayerViews,
    x: &[f32],
    layout: &Layout,
) -> AttentionPass {
    let c = &p.config;
    let (h, qd, kvd, d) = (c.hidden_size, c.q_dim(), c.kv_dim(), c.head_dim);
    let n = x.len() / h;
    let (eps, pos, rope) = (c.rms_norm_eps, &layout.positions, &layout.rope);
    let (r1, xn1) = norm_rows(x, lw.input_layernorm.data(p), eps);
    let mut q_raw = vec![0.0f32; n * qd];
    let mut k_raw = vec![0.0f32; n * kvd];
    let mut v = vec![0.0f32; n * kvd];
    project(p, lw.q_proj, lw.q_bias, &xn1, &mut q_raw);
    project(p, lw.k_proj, lw.k_bias, &xn1, &mut k_raw);
    project(p, lw.v_proj, lw.v_bias, &xn1, &mut v);
    let (q, q_r) = qk_heads(p, &q_raw, lw.q_norm, d, eps, pos, rope);
    let (k, k_r) = qk_heads(p, &k_raw, lw.k_norm, d, eps, pos, rope);
    let shape = attn_shape(c, l);
    let mut attn = vec![0.0f32; n * qd];
    let mut probs = Vec::with_capacity(layout.seqs.len());
    let mut max_logits = vec![f32::NEG_INFINITY; c.num_attention_heads];
    for &(s0, t) in &layout.seqs {
        let mut pr = vec![0.0f32; c.num_attention_heads * t * t];
        let m = attention_forward(
            &shape,
            t,
            &q[s0 * qd..(s0 + t) * qd],
            &k[s0 * kvd..(s0 + t) * kvd],
            &v[s0 * kvd..(s0 + t) * kvd],
            &mut attn[s0 * qd..(s0 + t) * qd],
            &mut pr,
        );
        for (a, b) in max_logits.iter_mut().zip(m) {
            *a = a.max(b);
        }
        probs.push(pr);
    }
    let mut out = vec![0.0f32; n * h];
    project(p, lw.o_proj, lw.o_bias, &attn, &mut out);
    AttentionPass {
        r1,
        xn1,
        q_raw,
        k_raw,
        q_r,
        k_r,
        q,
        k,
        v,
        probs,
        attn,
        out,
        max_logits,
    }
}

/// RMSNorm of every row, with the factors saved.
fn norm_rows(x: &[f32], w: &[f32], eps: f32) -> (Vec<f32>, Vec<f32>) {
    let h = w.len();
    let mut out = vec![0.0f32; x.len()];
    let r = x
        .chunks_exact(h)
        .zip(out.chunks_exact_mut(h))
        .map(|(x, o)| {
            rmsnorm(x, w, eps, o);
            rms_inv(x, eps)
        })
        .collect();
    (r, out)
}

/// `out = xs·Wᵀ + b`.
fn project(p: &Params, w: View, b: Option<View>, xs: &[f32], out: &mut [f32]) {
    linear_forward(w.data(p), w.rows, w.cols, xs, out);
    if let Some(b) = b {
        for row in out.chunks_exact_mut(w.rows) {
            add_into(row, b.data(p));
        }
    }
}

/// Per head: the optional RMSNorm (q_norm / k_norm), then RoPE at the row's position.
/// Returns the rotated heads and the norm's factor per (row, head).
fn qk_heads(
    p: &Params,
    raw: &[f32],
    norm: Option<View>,
    d: usize,
    eps: f32,
    positions: &[usize],
    rope: &RopeTable,
) -> (Vec<f32>, Vec<f32>) {
    let mut out = raw.to_vec();
    let width = raw.len() / positions.len().max(1);
    let mut factors = Vec::with_capacity(raw.len() / d);
    for (row, &pos) in out.chunks_exact_mut(width).zip(positions) {
        let (cos, sin) = rope.row(pos);
        for head in row.chunks_exact_mut(d) {
            if let Some(w) = norm {
                let x = head.to_vec();
                factors.push(rms_inv(&x, eps));
                rmsnorm(&x, w.data(p), eps, head);
            }
            apply_rope(head, cos, sin);
        }
    }
    (out, factors)
}

/// A SwiGLU MLP on the rows of `x`, keeping its activations.
pub fn mlp_forward(p: &Params, m: &MlpViews, x: Vec<f32>) -> MlpTape {
    let (i, h) = (m.gate.rows, m.gate.cols);
    let n = x.len() / h;
    let mut g = vec![0.0f32; n * i];
    let mut u = vec![0.0f32; n * i];
    linear_forward(m.gate.data(p), i, h, &x, &mut g);
    linear_forward(m.up.data(p), i, h, &x, &mut u);
    let a: Vec<f32> = g.iter().zip(&u).map(|(&g, &u)| silu(g) * u).collect();
    let mut out = vec![0.0f32; n * h];
    linear_forward(m.down.data(p), h, i, &a, &mut out);
    MlpTape { x, g, u, a, out }
}

/// The MoE block: router logits, softmax over every expert, the top-k choice (on
/// `probs + bias` when an aux-free bias is given), the weights from the unbiased softmax
/// (renormalised when `norm_topk_prob`), each expert on its rows; adds into `y`.
fn moe_forward(
    c: &Qwen3Config,
    p: &Params,
    router: View,
    experts: &[MlpViews],
    xn: &[f32],
    bias: Option<&Vec<f32>>,
    y: &mut [f32],
) -> Result<FfnTape> {
    let (h, e, k) = (c.hidden_size, c.num_experts, c.num_experts_per_tok);
    let n = xn.len() / h;
    if let Some(b) = bias
        && b.len() != e
    {
        return Err(Error::Invalid(format!(
            "router_bias: {} values for {e} experts",
            b.len()
        )));
    }
    let mut logits = vec![0.0f32; n * e];
    linear_forward(router.data(p), e, h, xn, &mut logits);
    let mut probs = vec![0.0f32; n * e];
    let mut chosen = vec![0usize; n * k];
    let mut weights = vec![0.0f32; n * k];
    let mut scratch = Vec::new();
    let mut biased = vec![0.0f32; e];
    for t in 0..n {
        let z = &logits[t * e..(t + 1) * e];
        let (ch, w) = (
            &mut chosen[t * k..(t + 1) * k],
            &mut weights[t * k..(t + 1) * k],
        );
        crate::moe::router::route_into(z, c.norm_topk_prob, &mut scratch, ch, w);
        probs[t * e..(t + 1) * e].copy_from_slice(&scratch);
        if let Some(b) = bias {
            // DeepSeek-V3's balancing bias moves the choice, not the weights.
            for ((s, &pr), &bb) in biased.iter_mut().zip(&scratch).zip(b.iter()) {
                *s = pr + bb;
            }
            top_k_into(&biased, ch);
            for (wj, &ej) in w.iter_mut().zip(ch.iter()) {
                *wj = scratch[ej];
            }
            if c.norm_topk_prob {
                let s: f32 = w.iter().sum();
                w.iter_mut().for_each(|x| *x /= s);
            }
        }
    }
    let mut rows: Vec<Vec<(usize, usize)>> = vec![Vec::new(); e];
    for (j, &ex) in chosen.iter().enumerate() {
        rows[ex].push((j / k, j % k));
    }
    let tapes = experts
        .iter()
        .zip(&rows)
        .map(|(m, rs)| {
            let mut xs = Vec::with_capacity(rs.len() * h);
            for &(t, _) in rs {
                xs.extend_from_slice(&xn[t * h..(t + 1) * h]);
            }
            let tape = mlp_forward(p, m, xs);
            for (o, &(t, slot)) in tape.out.chunks_exact(h).zip(rs) {
                let w = weights[t * k + slot];
                for (a, b) in y[t * h..(t + 1) * h].iter_mut().zip(o) {
                    *a += w * b;
                }
            }
            tape
        })
        .collect();
    Ok(FfnTape::Moe {
        probs,
        logits,
        chosen,
        weights,
        rows,
        experts: tapes,
    })
}
