//! Chapter 12 — the loss and its gradients, by hand (source S0 5.4, 5.6).
//!
//! [`loss_and_grads`] runs the training forward ([`forward`]: the engine's forward on
//! owned f32 parameters, keeping a tape), the losses — mean next-token cross-entropy as
//! `model(input_ids, labels=input_ids)` computes it, transformers'
//! `load_balancing_loss_func` (every MoE layer's router rows concatenated: top-k one-hot
//! counts, without gradient, times the mean routing probabilities, × num_experts), the
//! ST-MoE router z-loss — and then every block backwards ([`blocks`]), from the LM head to
//! the embedding. The non-chosen experts get no gradient through their outputs; the router
//! does, through the softmax over all experts.

pub mod blocks;
pub mod forward;
pub mod grad_file;
pub mod lm_head;

use crate::error::{Error, Result};
use crate::qwen3::config::Qwen3Config;
use crate::train::params::{Grads, Params};
use blocks::{
    add_into, attention_backward, bias_backward, linear_backward, load_balancing_loss,
    rmsnorm_backward_reference, rmsnorm_backward_rows, rope_backward, router_z_loss,
    softmax_backward, swiglu_backward, topk_weights_backward,
};
use forward::{FfnTape, FfnViews, Forward, LayerTape, MlpTape, MlpViews, View, attn_shape};

/// Which losses beside the cross-entropy, and the aux-free balancing bias.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct LossOptions {
    /// `Some(router_aux_loss_coef)` when the config's `output_router_logits`.
    pub aux_loss_coef: Option<f32>,
    /// The router z-loss's weight (0 = off).
    pub z_loss_coef: f32,
    /// Per MoE layer, added to the router's probabilities for the top-k choice only
    /// (DeepSeek-V3's aux-free balancing); empty = off.
    pub router_bias: Vec<Vec<f32>>,
}

impl LossOptions {
    /// What `model(input_ids, labels=input_ids)` computes for this config.
    pub fn from_config(c: &Qwen3Config) -> LossOptions {
        LossOptions {
            aux_loss_coef: (c.output_router_logits && c.num_experts > 0)
                .then_some(c.router_aux_loss_coef),
            z_loss_coef: 0.0,
            router_bias: Vec::new(),
        }
    }
}

/// The losses of a batch and what the trainer reports beside them.
#[derive(Clone, Debug, PartialEq)]
pub struct Losses {
    /// `ce_loss + aux_loss_coef·aux_loss + z_loss_coef·z_loss`.
    pub loss: f32,
    pub ce_loss: f32,
    /// Unscaled, as transformers' `aux_loss` output.
    pub aux_loss: Option<f32>,
    pub z_loss: Option<f32>,
    /// Predicted positions.
    pub tokens: usize,
    /// Per MoE layer, top-k picks per expert.
    pub expert_counts: Vec<Vec<usize>>,
    /// Per layer, per query head: the largest scaled pre-softmax attention logit.
    pub max_logits: Vec<Vec<f32>>,
}

/// Sequences must be non-empty, in the vocabulary and within `max_position_embeddings`,
/// and predict at least one token between them.
pub(crate) fn check_batch(c: &Qwen3Config, batch: &[Vec<u32>]) -> Result<()> {
    if batch.is_empty() {
        return Err(Error::Invalid("the batch has no sequences".into()));
    }
    for (i, s) in batch.iter().enumerate() {
        if s.is_empty() {
            return Err(Error::Invalid(format!(
                "sequence {i} of the batch is empty"
            )));
        }
        if s.len() > c.max_position_embeddings {
            return Err(Error::Invalid(format!(
                "sequence {i}: {} tokens, past max_position_embeddings = {}",
                s.len(),
                c.max_position_embeddings
            )));
        }
        if let Some(&bad) = s.iter().find(|&&id| id as usize >= c.vocab_size) {
            return Err(Error::Invalid(format!(
                "sequence {i}: token id {bad} is out of range (vocab_size = {})",
                c.vocab_size
            )));
        }
    }
    if batch.iter().all(|s| s.len() < 2) {
        return Err(Error::Invalid(
            "nothing to predict: every sequence needs at least 2 token ids".into(),
        ));
    }
    let n: u128 = batch.iter().map(|s| s.len() as u128).sum();
    let (h, q, kv) = (c.hidden_size as u128, c.q_dim() as u128, c.kv_dim() as u128);
    let k = c.num_experts_per_tok as u128;
    let ffn = (c.intermediate_size as u128).max(k * 3 * c.moe_intermediate_size as u128);
    let per_row = 8 * h + 3 * q + 4 * kv + 4 * ffn + 2 * c.num_experts as u128;
    let attn: u128 = batch
        .iter()
        .map(|s| c.num_attention_heads as u128 * (s.len() as u128).pow(2))
        .sum();
    let bytes = 4 * c.num_hidden_layers as u128 * (n * per_row + attn);
    crate::limits::check_memory("the training forward's saved activations", bytes)?;
    Ok(())
}

/// Rows of the flat batch that predict a token, with their targets.
fn targets(f: &Forward, batch: &[Vec<u32>]) -> Vec<(usize, usize)> {
    let mut out = Vec::new();
    for (&(s0, t), s) in f.seqs.iter().zip(batch) {
        for i in 0..t.saturating_sub(1) {
            out.push((s0 + i, s[i + 1] as usize));
        }
    }
    out
}

/// The mean cross-entropy, and (when `grads` is given) `∂/∂xn_final` added into the
/// slice and the LM head's gradient: [`lm_head::lm_head_loss`], fused and parallel.
fn lm_head_loss(
    p: &Params,
    f: &Forward,
    rows: &[(usize, usize)],
    grads: Option<(&mut Grads, &mut [f32])>,
) -> f64 {
    let c = &p.config;
    let w = f.views.lm_head;
    let head = grads.map(|(g, dx)| lm_head::HeadGrads { dw: w.grad(g), dx });
    lm_head::lm_head_loss(
        w.data(p),
        c.vocab_size,
        c.hidden_size,
        &f.xn_final,
        rows,
        head,
    )
}

/// The router losses over every MoE layer's rows: (aux, z) and, per layer, `∂/∂logits`
/// of `aux_coef·aux + z_coef·z` (all zero when neither is on).
fn router_losses(
    c: &Qwen3Config,
    f: &Forward,
    opts: &LossOptions,
) -> (Option<f32>, Option<f32>, Vec<Vec<f32>>) {
    let (e, k) = (c.num_experts, c.num_experts_per_tok);
    let layers = &f.router_logits;
    let mut dz: Vec<Vec<f32>> = layers.iter().map(|l| vec![0.0; l.len()]).collect();
    if layers.is_empty() {
        return (None, None, dz);
    }
    let aux = opts
        .aux_loss_coef
        .map(|coef| load_balancing_loss(layers, e, k, coef, &mut dz));
    let zl = (opts.z_loss_coef > 0.0).then(|| router_z_loss(layers, e, opts.z_loss_coef, &mut dz));
    (aux, zl, dz)
}

fn losses(
    c: &Qwen3Config,
    f: &Forward,
    opts: &LossOptions,
    ce: f64,
    tokens: usize,
) -> (Losses, Vec<Vec<f32>>) {
    let (aux, z, dz) = router_losses(c, f, opts);
    let mut loss = ce;
    if let (Some(a), Some(coef)) = (aux, opts.aux_loss_coef) {
        loss += coef as f64 * a as f64;
    }
    if let Some(z) = z {
        loss += opts.z_loss_coef as f64 * z as f64;
    }
    let out = Losses {
        loss: loss as f32,
        ce_loss: ce as f32,
        aux_loss: aux,
        z_loss: z,
        tokens,
        expert_counts: f.expert_counts.clone(),
        max_logits: f.max_logits.clone(),
    };
    (out, dz)
}

/// The losses of `batch` without gradients (held-out evaluation): the forward keeps no
/// activations beyond the layer it is in.
pub fn loss_only(p: &Params, batch: &[Vec<u32>], opts: &LossOptions) -> Result<Losses> {
    let f = forward::forward(p, batch, opts, false)?;
    let rows = targets(&f, batch);
    let ce = lm_head_loss(p, &f, &rows, None);
    Ok(losses(&p.config, &f, opts, ce, rows.len()).0)
}

/// The logits `[T, vocab]` of one sequence, from the training forward (for the test that
/// pins it to the engine's `qwen3::Model`).
pub fn logits(p: &Params, ids: &[u32]) -> Result<Vec<f32>> {
    let batch = [ids.to_vec()];
    let f = forward::forward(p, &batch, &LossOptions::default(), false)?;
    let (h, v) = (p.config.hidden_size, p.config.vocab_size);
    let mut out = vec![0.0f32; ids.len() * v];
    blocks::linear_forward(f.views.lm_head.data(p), v, h, &f.xn_final, &mut out);
    Ok(out)
}

/// The losses of `batch` and the gradient of `loss` with respect to every parameter,
/// written over `grads` (which must be [`Params::zeros_like`]'s shape). The forward's
/// steps backwards, as named calls: LM head and final norm, each layer from the last,
/// the embedding.
pub fn loss_and_grads(
    p: &Params,
    batch: &[Vec<u32>],
    opts: &LossOptions,
    grads: &mut Grads,
) -> Result<Losses> {
    check_grads_shape(p, grads)?;
    grads.grads.iter_mut().for_each(|g| g.fill(0.0));
    let f = forward::forward(p, batch, opts, true)?;
    let rows = targets(&f, batch);
    let (out, dz_router, mut dx) = head_backward(p, &f, opts, &rows, grads);
    let mut dz_layers = dz_router.iter().rev();
    for (l, lw) in f.views.layers.iter().enumerate().rev() {
        let dz = match lw.mlp {
            FfnViews::Moe { .. } => dz_layers.next().map(Vec::as_slice),
            FfnViews::Dense(_) => None,
        };
        layer_backward(p, &f, l, dz, &mut dx, grads);
    }
    embedding_backward(&f, batch, &dx, grads);
    Ok(out)
}

/// `grads` must hold one slice per parameter, of its length.
fn check_grads_shape(p: &Params, grads: &Grads) -> Result<()> {
    let ok = grads.grads.len() == p.params.len()
        && grads
            .grads
            .iter()
            .zip(&p.params)
            .all(|(g, q)| g.len() == q.data.len());
    if !ok {
        return Err(Error::Invalid(
            "gradients: not aligned with the parameters (use Params::zeros_like)".into(),
        ));
    }
    Ok(())
}

/// The losses, the LM head's and final norm's gradients; returns the losses, each MoE
/// layer's `∂/∂router logits` from the router losses, and ∂loss/∂(the last residual
/// stream).
fn head_backward(
    p: &Params,
    f: &Forward,
    opts: &LossOptions,
    rows: &[(usize, usize)],
    grads: &mut Grads,
) -> (Losses, Vec<Vec<f32>>, Vec<f32>) {
    let c = &p.config;
    let n = f.x_last.len() / c.hidden_size;
    let mut dxn = vec![0.0f32; n * c.hidden_size];
    let ce = lm_head_loss(p, f, rows, Some((grads, &mut dxn)));
    let (out, dz_router) = losses(c, f, opts, ce, rows.len());
    let mut dx = vec![0.0f32; n * c.hidden_size];
    let norm = f.views.norm;
    rmsnorm_backward_rows(
        &f.x_last,
        &f.r_final,
        norm.data(p),
        &dxn,
        &mut dx,
        norm.grad(grads),
    );
    (out, dz_router, dx)
}

/// Layer `l` backwards, the forward's four steps in reverse: feed-forward, its norm,
/// attention, its norm. `dx` enters as ∂loss/∂(the residual stream after the layer) and
/// leaves as ∂loss/∂(the stream before it); `dz_router` is the router losses' gradient
/// of an MoE layer.
fn layer_backward(
    p: &Params,
    f: &Forward,
    l: usize,
    dz_router: Option<&[f32]>,
    dx: &mut [f32],
    grads: &mut Grads,
) {
    let (tape, lw) = (&f.layers[l], &f.views.layers[l]);
    let dxn2 = ffn_backward(p, tape, &lw.mlp, dz_router, dx, grads);
    let w = lw.post_attention_layernorm;
    // dx (after the layer) flows on to x_mid unchanged, plus the norm's branch.
    rmsnorm_backward_rows(&tape.x_mid, &tape.r2, w.data(p), &dxn2, dx, w.grad(grads));
    let dxn1 = attention_layer_backward(p, f, l, dx, grads);
    let w = lw.input_layernorm;
    rmsnorm_backward_rows(&tape.x_in, &tape.r1, w.data(p), &dxn1, dx, w.grad(grads));
}

/// The feed-forward sub-block backwards: `dy` is ∂loss/∂(its output); returns
/// ∂loss/∂(its normalised input).
fn ffn_backward(
    p: &Params,
    tape: &LayerTape,
    views: &FfnViews,
    dz_router: Option<&[f32]>,
    dy: &[f32],
    grads: &mut Grads,
) -> Vec<f32> {
    let mut dxn = vec![0.0f32; dy.len()];
    match (&tape.ffn, views) {
        (FfnTape::Dense(t), FfnViews::Dense(m)) => mlp_backward(p, m, t, dy, &mut dxn, grads),
        (ffn @ FfnTape::Moe { .. }, FfnViews::Moe { router, experts }) => {
            let dz = dz_router.expect("an MoE layer has its router-loss gradient");
            let moe = MoeViews {
                router: *router,
                experts,
            };
            moe_backward(p, &moe, ffn, &tape.xn2, dz, dy, &mut dxn, grads);
        }
        _ => unreachable!("the tape follows the views"),
    }
    dxn
}

/// An MoE block's weights, as the backward reads them.
struct MoeViews<'a> {
    router: View,
    experts: &'a [MlpViews],
}

/// The MoE block backwards, `moe_forward` read in reverse: each expert on its rows
/// (∂ of the weighted sum into its output and its routing weight), then the top-k
/// weights and the softmax back to the router logits, then the router. `dz_router` is the
/// router losses' own gradient of the logits; adds ∂loss/∂(the block's input) into `dxn`.
#[allow(clippy::too_many_arguments)]
fn moe_backward(
    p: &Params,
    moe: &MoeViews,
    tape: &FfnTape,
    xn: &[f32],
    dz_router: &[f32],
    dy: &[f32],
    dxn: &mut [f32],
    grads: &mut Grads,
) {
    let FfnTape::Moe {
        probs,
        chosen,
        weights,
        rows,
        experts,
        ..
    } = tape
    else {
        unreachable!("moe_backward is given an MoE tape")
    };
    let c = &p.config;
    let (h, e, k) = (c.hidden_size, c.num_experts, c.num_experts_per_tok);
    let n = dy.len() / h;
    // ANCHOR: moe_backward
    let mut dw = vec![0.0f32; n * k];
    for ((rs, t), m) in rows.iter().zip(experts).zip(moe.experts) {
        // ∂/∂(expert output) = w·dy, and ∂/∂w = dy·(expert output).
        let mut dout = vec![0.0f32; rs.len() * h];
        for ((d, o), &(r, slot)) in dout.chunks_exact_mut(h).zip(t.out.chunks_exact(h)).zip(rs) {
            let dy = &dy[r * h..(r + 1) * h];
            let w = weights[r * k + slot];
            d.iter_mut().zip(dy).for_each(|(a, b)| *a = w * b);
            dw[r * k + slot] = crate::kernels::dot(dy, o);
        }
        let mut dxs = vec![0.0f32; rs.len() * h];
        mlp_backward(p, m, t, &dout, &mut dxs, grads);
        for (d, &(r, _)) in dxs.chunks_exact(h).zip(rs) {
            add_into(&mut dxn[r * h..(r + 1) * h], d);
        }
    }
    let mut dz = dz_router.to_vec();
    let mut dp = vec![0.0f32; e];
    for r in 0..n {
        dp.fill(0.0);
        let pr = &probs[r * e..(r + 1) * e];
        topk_weights_backward(
            pr,
            &chosen[r * k..(r + 1) * k],
            &weights[r * k..(r + 1) * k],
            &dw[r * k..(r + 1) * k],
            c.norm_topk_prob,
            &mut dp,
        );
        softmax_backward(pr, &dp, &mut dz[r * e..(r + 1) * e]);
    }
    // ANCHOR_END: moe_backward
    let router = moe.router;
    linear_backward(router.data(p), e, h, xn, &dz, Some(dxn), router.grad(grads));
}

/// The embedding: row `id` collects the gradient of every position holding it.
fn embedding_backward(f: &Forward, batch: &[Vec<u32>], dx: &[f32], grads: &mut Grads) {
    let h = f.views.embed_tokens.cols;
    let g = f.views.embed_tokens.grad(grads);
    for (d, &id) in dx.chunks_exact(h).zip(batch.iter().flatten()) {
        add_into(&mut g[id as usize * h..(id as usize + 1) * h], d);
    }
}

/// A SwiGLU MLP's backward: `dy` `[n, H]` → adds `∂/∂x` into `dx`, and its weights'
/// gradients.
fn mlp_backward(p: &Params, m: &MlpViews, t: &MlpTape, dy: &[f32], dx: &mut [f32], g: &mut Grads) {
    let (i, h) = (m.gate.rows, m.gate.cols);
    let n = t.x.len() / h;
    if n == 0 {
        return;
    }
    let mut da = vec![0.0f32; n * i];
    linear_backward(
        m.down.data(p),
        h,
        i,
        &t.a,
        dy,
        Some(&mut da),
        m.down.grad(g),
    );
    let (mut dg, mut du) = (vec![0.0f32; n * i], vec![0.0f32; n * i]);
    swiglu_backward(&t.g, &t.u, &da, &mut dg, &mut du);
    linear_backward(m.gate.data(p), i, h, &t.x, &dg, Some(dx), m.gate.grad(g));
    linear_backward(m.up.data(p), i, h, &t.x, &du, Some(dx), m.up.grad(g));
}

/// Layer `l`'s attention sub-block backwards: `dy` is ∂loss/∂(its output); returns
/// ∂loss/∂(its normalised input) and adds the projections', biases' and q/k norms'
/// gradients.
fn attention_layer_backward(
    p: &Params,
    f: &Forward,
    l: usize,
    dy: &[f32],
    g: &mut Grads,
) -> Vec<f32> {
    let c = &p.config;
    let (tape, lw) = (&f.layers[l], &f.views.layers[l]);
    let (h, qd, kvd) = (c.hidden_size, c.q_dim(), c.kv_dim());
    let n = dy.len() / h;
    let o = lw.o_proj;
    let mut d_attn = vec![0.0f32; n * qd];
    linear_backward(
        o.data(p),
        h,
        qd,
        &tape.attn,
        dy,
        Some(&mut d_attn),
        o.grad(g),
    );
    if let Some(b) = lw.o_bias {
        bias_backward(dy, b.grad(g));
    }
    let (mut dq, mut dk, mut dv) = (
        vec![0.0f32; n * qd],
        vec![0.0f32; n * kvd],
        vec![0.0f32; n * kvd],
    );
    let shape = attn_shape(c, l);
    for (&(s0, t), probs) in f.seqs.iter().zip(&tape.probs) {
        let (q, kv) = (s0 * qd..(s0 + t) * qd, s0 * kvd..(s0 + t) * kvd);
        attention_backward(
            &shape,
            t,
            &tape.q[q.clone()],
            &tape.k[kv.clone()],
            &tape.v[kv.clone()],
            probs,
            &d_attn[q.clone()],
            &mut dq[q],
            &mut dk[kv.clone()],
            &mut dv[kv],
        );
    }
    qk_backward(p, f, l, &mut dq, &mut dk, g);
    let mut dxn = vec![0.0f32; n * h];
    for (w, b, grad) in [
        (lw.q_proj, lw.q_bias, &dq),
        (lw.k_proj, lw.k_bias, &dk),
        (lw.v_proj, lw.v_bias, &dv),
    ] {
        linear_backward(
            w.data(p),
            w.rows,
            h,
            &tape.xn1,
            grad,
            Some(&mut dxn),
            w.grad(g),
        );
        if let Some(b) = b {
            bias_backward(grad, b.grad(g));
        }
    }
    dxn
}

/// RoPE, then q_norm / k_norm, backwards, head by head: turns ∂/∂(rotated q, k) in `dq`,
/// `dk` into ∂/∂(projected q, k) and adds the norms' gradients.
fn qk_backward(p: &Params, f: &Forward, l: usize, dq: &mut [f32], dk: &mut [f32], g: &mut Grads) {
    let (tape, lw) = (&f.layers[l], &f.views.layers[l]);
    let d = p.config.head_dim;
    let n = f.x_last.len() / p.config.hidden_size;
    let positions: Vec<usize> = f.seqs.iter().flat_map(|&(_, t)| 0..t).collect();
    for (grad, raw, factors, norm) in [
        (dq, &tape.q_raw, &tape.q_r, lw.q_norm),
        (dk, &tape.k_raw, &tape.k_r, lw.k_norm),
    ] {
        let width = raw.len() / n;
        let mut dnorm = vec![0.0f32; d];
        for (r, &pos) in positions.iter().enumerate() {
            let (cos, sin) = f.rope.row(pos);
            for hd in 0..width / d {
                let span = r * width + hd * d..r * width + (hd + 1) * d;
                rope_backward(&mut grad[span.clone()], cos, sin);
                if let Some(w) = norm {
                    let dyh = grad[span.clone()].to_vec();
                    let mut dxh = vec![0.0f32; d];
                    let f = factors[r * (width / d) + hd];
                    rmsnorm_backward_reference(
                        &raw[span.clone()],
                        f,
                        w.data(p),
                        &dyh,
                        &mut dxh,
                        &mut dnorm,
                    );
                    grad[span].copy_from_slice(&dxh);
                }
            }
        }
        if let Some(w) = norm {
            add_into(w.grad(g), &dnorm);
        }
    }
}
