//! The Qwen3-MoE forward pass, top to bottom (source S0 5.5; the engine of design.md).
//!
//! ```text
//! ids → embed_tokens
//!     → per layer:  x += o_proj · attention(RoPE(k_norm(k)), RoPE(q_norm(q)), v)   of RMSNorm(x)
//!                   (Qwen2: q, k, v with biases and no q_norm / k_norm)
//!                   x += MoE(RMSNorm(x))  or  MLP(RMSNorm(x))
//!     → RMSNorm → lm_head → logits
//! ```
//!
//! Every step calls the chapter that explains it: [`rmsnorm`] and attention ([`attend`],
//! the fast form of [`attend_reference`]) from the
//! kernels, [`apply_rope`] with frequencies from the long-context chapter's
//! [`RopeConfig`](crate::long_context::scaling::RopeConfig), and the MoE chapter's router
//! and bucketed expert layer ([`moe_fast_into`](crate::moe::moe_fast_into), the batched form of
//! [`moe_bucketed`](crate::moe::moe_bucketed), called through [`Ffn::forward`](crate::qwen3::weights::Ffn::forward)). Attention is grouped-query
//! (`num_attention_heads / num_key_value_heads` query heads share a key/value head) and
//! causal, with an optional sliding window; keys and values go through the [`KvCache`], so
//! a prompt is one call (prefill) and each generated token one more (decode). The result
//! equals transformers' `Qwen3MoeForCausalLM` to ~1e-6 (tests/qwen3_transformers.rs).
//!
//! Llama and Gemma 3 run through the same function: what sets them apart is data
//! ([`Variant`](crate::qwen3::variant::Variant): the embedding scale, the sandwich norms
//! on the sub-block outputs, the attention scale, GeGLU, a second RoPE table for
//! sliding-window layers) read at the points where they act.

use crate::error::{Error, Result};
use crate::kernels::attention::{KvHead, Mask, attend, attend_reference, key_weight};
use crate::kernels::attention_block::{BlockScratch, QueryBlock, attend_block, block_positions};
use crate::kernels::{Matrix, first_non_finite, rmsnorm};
use crate::position::rope::{RopeTable, apply_rope, apply_rope_interleaved};
use crate::qwen3::config::Qwen3Config;
use crate::qwen3::ffn::{FfnScratch, project};
use crate::qwen3::finite::{Stage, locate};
use crate::qwen3::kv_cache::KvCache;
use crate::qwen3::tensors::Tensors;
pub use crate::qwen3::trace::LayerRouting;
use crate::qwen3::trace::{QkLayer, Trace};
use crate::qwen3::weights::{Attention, Layer, Weights};

/// A loaded model: its config and weight views into a checkpoint, a GGUF file or an f32
/// store ([`Tensors`]).
#[derive(Debug)]
pub struct Model<'a> {
    pub config: Qwen3Config,
    pub weights: Weights<'a>,
    /// Compute with the clear kernels (the reference matvec, attention and bucketed MoE)
    /// instead of the fast ones: `--reference`, on weights widened to f32.
    pub reference: bool,
}

/// One generation's state: the KV cache, the RoPE table for its positions and scratch
/// buffers reused by every step.
#[derive(Debug)]
pub struct Session {
    pub cache: KvCache,
    /// When set, each forward call records what [`Trace`] holds (off by default).
    pub trace: Option<Trace>,
    rope: RopeTable,
    /// The sliding-window layers' own RoPE (Gemma 3), when the variant has one.
    local_rope: Option<RopeTable>,
    scratch: Scratch,
}

/// Which positions get logits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Logits {
    /// Every position of the call: `[n, vocab]`.
    All,
    /// The last position only (generation): `[1, vocab]`.
    Last,
}

/// What a forward call returns.
#[derive(Clone, Debug)]
pub struct Output {
    /// Row-major `[rows, vocab]`.
    pub logits: Vec<f32>,
    pub rows: usize,
    /// One entry per MoE layer, in layer order.
    pub routing: Vec<LayerRouting>,
}

/// Buffers for a call of `n` positions; grown when a longer call comes, never per token.
#[derive(Debug, Default)]
struct Scratch {
    /// Residual stream `[n, hidden]`.
    x: Vec<f32>,
    /// Normalised input of a sub-block `[n, hidden]`.
    xn: Vec<f32>,
    /// Sub-block output `[n, hidden]`.
    y: Vec<f32>,
    /// `[n, heads·head_dim]`, `[n, kv_dim]`, `[n, kv_dim]`, `[n, heads·head_dim]`.
    q: Vec<f32>,
    k: Vec<f32>,
    v: Vec<f32>,
    attn: Vec<f32>,
    /// One head, to normalise it out of place.
    head: Vec<f32>,
    /// Attention scores of one query against the cache.
    scores: Vec<f32>,
    /// A prefill's block attention buffers, one per rayon thread (locked by the block
    /// that uses them; never contended, since a thread runs one block at a time).
    blocks: Vec<std::sync::Mutex<BlockScratch>>,
    /// A decode step's attention scores, one buffer per part of the query heads (one
    /// part a rayon thread), each sized for a KV head's group over the whole cache.
    part_scores: Vec<Vec<f32>>,
    /// The feed-forward block's buffers.
    ffn: FfnScratch,
    /// Logits of the last call `[rows, vocab]`.
    logits: Vec<f32>,
}

impl<'a> Model<'a> {
    /// Views the weights of `ckpt` (a [`Checkpoint`](crate::checkpoint::Checkpoint), a
    /// [`Gguf`](crate::gguf::Gguf), a [`ModelFile`](crate::qwen3::tensors::ModelFile) or an
    /// f32 store) for `config`, checking every tensor.
    pub fn new(config: Qwen3Config, ckpt: impl Into<Tensors<'a>>) -> Result<Model<'a>> {
        Self::new_with_progress(config, ckpt, |_, _| {})
    }

    /// [`Model::new`], reporting `(layers done, layers)`.
    pub fn new_with_progress(
        config: Qwen3Config,
        ckpt: impl Into<Tensors<'a>>,
        progress: impl FnMut(usize, usize),
    ) -> Result<Model<'a>> {
        config.rope.init(None)?; // surface a bad rope config now, not mid-generation
        let weights = Weights::load_with_progress(&config, ckpt, progress)?;
        crate::qwen3::finite::check_small_tensors(&weights)?;
        Ok(Model {
            config,
            weights,
            reference: false,
        })
    }

    /// The same model computing with the clear kernels (see [`Model::reference`]).
    pub fn with_reference_kernels(self) -> Model<'a> {
        Model {
            reference: true,
            ..self
        }
    }

    /// `out = xs · mᵀ` for the rows of `xs` ([`project`] with this model's kernels).
    fn project(&self, m: &Matrix, xs: &[f32], out: &mut [f32]) {
        project(m, self.reference, xs, out);
    }

    /// A fresh session for up to `capacity` positions (prompt plus generated tokens).
    pub fn session(&self, capacity: usize) -> Result<Session> {
        crate::kernels::quant::decode::pick_rows();
        let c = &self.config;
        if capacity > c.max_position_embeddings {
            return Err(Error::Invalid(format!(
                "{capacity} positions requested, past max_position_embeddings = {}",
                c.max_position_embeddings
            )));
        }
        crate::limits::check_memory(
            &format!("a session of {capacity} positions (KV cache, RoPE table, buffers)"),
            session_bytes(c, capacity),
        )?;
        // Dynamic NTK and LongRoPE pick their frequencies from the sequence length; we
        // use the session's, as transformers does for a single call of that length.
        let init = c.rope.init(Some(capacity))?;
        let local_rope = match &self.weights.variant.local_rope {
            Some(rope) => {
                let init = rope.init(Some(capacity))?;
                Some(RopeTable::new(
                    &init.inv_freq,
                    capacity,
                    init.attention_factor,
                ))
            }
            None => None,
        };
        Ok(Session {
            local_rope,
            cache: KvCache::new(
                c.num_hidden_layers,
                c.num_key_value_heads,
                c.head_dim,
                capacity,
            ),
            trace: None,
            rope: RopeTable::new(&init.inv_freq, capacity, init.attention_factor),
            scratch: Scratch::default(),
        })
    }

    /// Logits (and routing) for every position of `ids`, in one prefill.
    pub fn logits(&self, ids: &[u32]) -> Result<Output> {
        // The logits of every position, in the session's buffer and in the copy returned.
        let bytes = 8 * ids.len() as u128 * self.config.vocab_size as u128;
        crate::limits::check_memory(&format!("the logits of {} positions", ids.len()), bytes)?;
        let mut session = self.session(ids.len())?;
        self.forward_routed(&mut session, ids, Logits::All)
    }

    /// [`Model::forward`], returning owned logits with every MoE layer's routing (for
    /// reports and tests; generation uses `forward` itself, which allocates nothing).
    pub fn forward_routed(
        &self,
        session: &mut Session,
        ids: &[u32],
        want: Logits,
    ) -> Result<Output> {
        let mut routing = Vec::new();
        let logits = self.forward(session, ids, want, Some(&mut routing))?;
        Ok(Output {
            rows: logits.len() / self.config.vocab_size,
            logits: logits.to_vec(),
            routing,
        })
    }

    /// The forward pass: runs `ids` (the positions after what `session` holds) through the
    /// model and returns the logits, `[rows, vocab]` with one row per position or only the
    /// last (`want`). They stay in the session's buffer, and `routing` (when given)
    /// receives every MoE layer's choices, so once the buffers have grown a decode step
    /// allocates nothing (tests/no_alloc.rs counts). A session holding a
    /// [`Trace`] also gets the call's attention-sink shares,
    /// routing and (on request) queries and keys there.
    pub fn forward<'s>(
        &self,
        session: &'s mut Session,
        ids: &[u32],
        want: Logits,
        mut routing: Option<&mut Vec<LayerRouting>>,
    ) -> Result<&'s [f32]> {
        let c = &self.config;
        self.check_ids(ids)?;
        let n = ids.len();
        session.cache.reserve(n)?;
        let rows = match want {
            Logits::All => n,
            Logits::Last => 1,
        };
        session.scratch.resize(c, n, rows, session.cache.capacity());
        let past = session.cache.len();
        if let Some(trace) = session.trace.as_mut() {
            trace.begin(past, n, c.num_hidden_layers, c.num_attention_heads);
        }

        // 1. Embedding: row `id` of embed_tokens (times Gemma's √hidden).
        let (h, scale) = (c.hidden_size, self.weights.variant.embedding_scale);
        for (x, &id) in session.scratch.x.chunks_exact_mut(h).zip(ids) {
            self.weights.embed_tokens.row_into(id as usize, x);
            if scale != 1.0 {
                x.iter_mut().for_each(|v| *v *= scale);
            }
        }
        self.check_finite(&session.scratch, Stage::Embedding, ids, past)?;

        // 2. The decoder layers.
        for (l, layer) in self.weights.layers.iter().enumerate() {
            self.decoder_layer(l, layer, ids, past, session, routing.as_deref_mut())?;
        }
        session.cache.advance(n);

        // 3. Final RMSNorm and the LM head, for the positions asked for.
        let s = &mut session.scratch;
        let last = (n - rows) * h..n * h;
        rmsnorm_rows(
            &s.x[last.clone()],
            &self.weights.norm,
            c,
            &mut s.xn[last.clone()],
        );
        self.project(&self.weights.lm_head, &s.xn[last], &mut s.logits);
        self.check_finite(s, Stage::Logits, &ids[n - rows..], past + n - rows)?;
        Ok(&session.scratch.logits)
    }

    /// One decoder layer over the call's positions: two pre-norm residual sub-blocks,
    /// attention then the feed-forward block, each checked for a non-finite stream.
    fn decoder_layer(
        &self,
        l: usize,
        layer: &Layer,
        ids: &[u32],
        past: usize,
        session: &mut Session,
        routing: Option<&mut Vec<LayerRouting>>,
    ) -> Result<()> {
        let c = &self.config;
        // ANCHOR: decoder_layer
        let s = &mut session.scratch;
        rmsnorm_rows(&s.x, &layer.input_layernorm, c, &mut s.xn);
        self.attention(l, &layer.self_attn, past, ids.len(), session);
        let s = &mut session.scratch;
        add_normed(s, layer.post_attention_norm.as_deref(), c);
        self.check_finite(s, Stage::Attention(l), ids, past)?;

        rmsnorm_rows(&s.x, &layer.post_attention_layernorm, c, &mut s.xn);
        let record = routing.is_some() || session.trace.is_some();
        let act = self.weights.variant.activation;
        let chosen =
            (layer.mlp).forward(c, self.reference, act, &s.xn, &mut s.y, &mut s.ffn, record);
        add_normed(s, layer.post_feedforward_norm.as_deref(), c);
        self.check_finite(s, Stage::Ffn(l), ids, past)?;
        // ANCHOR_END: decoder_layer
        if let Some(chosen) = chosen {
            let layer_routing = LayerRouting {
                layer: l,
                routing: chosen,
            };
            if let Some(trace) = session.trace.as_mut() {
                trace.routing.push(layer_routing.clone());
            }
            if let Some(routing) = routing {
                routing.push(layer_routing);
            }
        }
        Ok(())
    }

    /// Every id must index the vocabulary, and a call needs at least one.
    fn check_ids(&self, ids: &[u32]) -> Result<()> {
        if ids.is_empty() {
            return Err(Error::Invalid(
                "no token ids given (the input is empty)".into(),
            ));
        }
        let vocab = self.config.vocab_size;
        match ids.iter().find(|&&id| id as usize >= vocab) {
            Some(bad) => Err(Error::Invalid(format!(
                "token id {bad} is out of range (vocab_size = {vocab})"
            ))),
            None => Ok(()),
        }
    }

    /// Queries and keys of every layer as attention sees them (after q/k-norm and RoPE),
    /// for all positions of `ids` run as one prefill: the input of an analysis of `q·k`
    /// against distance. See [`QkLayer`] for the layout.
    pub fn qk_per_layer(&self, ids: &[u32]) -> Result<Vec<QkLayer>> {
        let mut session = self.session(ids.len())?;
        session.trace = Some(Trace::with_qk());
        self.forward(&mut session, ids, Logits::Last, None)?;
        Ok(session.trace.take().map(|t| t.qk).unwrap_or_default())
    }

    /// After `stage`, the hidden state (or, after [`Stage::Logits`], the logits) must be
    /// finite: one vectorised pass, and on failure [`locate`] names the weight at fault.
    /// `ids` are the tokens of the rows checked, the first at position `first`.
    fn check_finite(&self, s: &Scratch, stage: Stage, ids: &[u32], first: usize) -> Result<()> {
        let (values, width) = match stage {
            Stage::Logits => (&s.logits, self.config.vocab_size),
            _ => (&s.x, self.config.hidden_size),
        };
        let Some(i) = first_non_finite(values) else {
            return Ok(());
        };
        let position = i / width;
        let k = self.config.num_experts_per_tok;
        let experts = match stage {
            Stage::Ffn(l) if self.config.is_moe_layer(l) => s
                .ffn
                .moe
                .chosen
                .get(position * k..(position + 1) * k)
                .unwrap_or(&[]),
            _ => &[],
        };
        let token = ids.get(position).copied().unwrap_or(0);
        let at = (first + position, token);
        Err(locate(
            &self.config,
            &self.weights,
            stage,
            at,
            values[i],
            experts,
        ))
    }

    /// Grouped-query causal self-attention of layer `l` for positions `past .. past + n`:
    /// reads `scratch.xn`, stores the new keys/values in the cache, writes `scratch.y`.
    fn attention(&self, l: usize, a: &Attention, past: usize, n: usize, session: &mut Session) {
        let c = &self.config;
        self.qkv_rope(l, a, past, n, session);
        let Session {
            cache,
            scratch: s,
            trace,
            ..
        } = session;
        let (h, d) = (c.hidden_size, c.head_dim);
        let qd = c.q_dim();
        let group = c.num_attention_heads / c.num_key_value_heads;
        let scale = self.weights.variant.attention_scale;
        let heads = c.num_attention_heads;
        let shape = HeadShape {
            heads,
            d,
            group,
            scale,
        };

        // softmax(q·kᵀ/√d)·v over the visible cached positions, head by head; positions
        // are independent, so a prefill spreads them over rayon's threads.
        let mask = c.sliding_window[l].map_or(Mask::Causal, Mask::SlidingWindow);
        let q_all = &s.q;
        let cache = &*cache;
        let kv_head = |g: usize| cache.head(l, g, past + n);
        if n > 1 && !self.reference {
            // A prefill: blocks of consecutive positions, each reading a key row once for
            // all its positions and the heads of a group (chapter 10's block attention).
            use rayon::prelude::*;
            let bp = block_positions(group);
            let blocks = &s.blocks;
            s.attn
                .par_chunks_mut(bp * qd)
                .enumerate()
                .for_each(|(b, out)| {
                    let t0 = b * bp;
                    let thread = rayon::current_thread_index().unwrap_or(0) % blocks.len();
                    let mut scratch = blocks[thread].lock().unwrap_or_else(|e| e.into_inner());
                    for g in 0..c.num_key_value_heads {
                        let block = QueryBlock {
                            first: past + t0,
                            positions: out.len() / qd,
                            heads: group,
                            d,
                            stride: qd,
                        };
                        let q = &q_all[t0 * qd + g * group * d..];
                        let o = &mut out[g * group * d..];
                        attend_block(q, kv_head(g), block, mask, scale, &mut scratch, o);
                    }
                });
        } else {
            let one = |t: usize, out: &mut [f32], scores: &mut Vec<f32>| {
                let pos = past + t;
                for (g, o) in out.chunks_exact_mut(group * d).enumerate() {
                    // The `group` query heads sharing KV head g are adjacent in q.
                    let q = &q_all[t * qd + g * group * d..t * qd + (g + 1) * group * d];
                    if self.reference {
                        attend_reference(q, d, kv_head(g), mask.span(pos), scale, scores, o);
                    } else {
                        attend(q, d, kv_head(g), mask.span(pos), scale, scores, o);
                    }
                }
            };
            let work = mask.span(past).len().saturating_mul(heads * d);
            let split = s.part_scores.len() > 1 && work >= PARALLEL_DECODE_ATTENTION;
            if n == 1 && !self.reference && split {
                let span = mask.span(past);
                shape.attend_split(q_all, span, kv_head, &mut s.attn, &mut s.part_scores);
            } else if n == 1 {
                one(0, &mut s.attn, &mut s.scores);
            } else {
                use rayon::prelude::*;
                s.attn
                    .par_chunks_mut(qd)
                    .enumerate()
                    .for_each_init(Vec::new, |scores, (t, out)| one(t, out, scores));
            }
        }
        if let Some(trace) = trace.as_mut() {
            shape.sink_shares(trace.sink_layer_mut(l), q_all, past, mask, kv_head);
        }
        self.project(&a.o_proj, &s.attn, &mut s.y);
        for y in s.y.chunks_exact_mut(h) {
            add_bias(y, a.o_bias.as_deref());
        }
    }

    /// q, k, v of layer `l` for the new positions, with biases, per-head q/k RMSNorm and
    /// RoPE; the keys and values go into the cache (and q, k into a trace that keeps them).
    fn qkv_rope(&self, l: usize, a: &Attention, past: usize, n: usize, session: &mut Session) {
        let c = &self.config;
        let Session {
            cache,
            rope,
            local_rope,
            scratch: s,
            trace,
        } = session;
        let rope = match (c.sliding_window[l], local_rope.as_ref()) {
            (Some(_), Some(local)) => local,
            _ => rope,
        };
        let rotate = match self.weights.rope_interleaved {
            true => apply_rope_interleaved,
            false => apply_rope,
        };
        let d = c.head_dim;
        let (qd, kvd) = (c.q_dim(), c.kv_dim());
        // ANCHOR: qk_norm_rope
        // q, k, v for the new positions (one batched matmul each, weights read once);
        // then per-head RMSNorm (Qwen3; Qwen2 has none) and RoPE at each position.
        self.project(&a.q_proj, &s.xn, &mut s.q);
        self.project(&a.k_proj, &s.xn, &mut s.k);
        self.project(&a.v_proj, &s.xn, &mut s.v);
        for t in 0..n {
            let q = &mut s.q[t * qd..(t + 1) * qd];
            let k = &mut s.k[t * kvd..(t + 1) * kvd];
            let v = &mut s.v[t * kvd..(t + 1) * kvd];
            add_bias(q, a.q_bias.as_deref());
            add_bias(k, a.k_bias.as_deref());
            add_bias(v, a.v_bias.as_deref());
            let (cos, sin) = rope.row(past + t);
            for (x, norm) in [(q, &a.q_norm), (&mut *k, &a.k_norm)] {
                for head in x.chunks_exact_mut(d) {
                    if let Some(w) = norm {
                        s.head.copy_from_slice(head);
                        rmsnorm(&s.head, w, c.rms_norm_eps, head);
                    }
                    rotate(head, cos, sin);
                }
            }
            cache.write(l, past + t, k, v);
        }
        // ANCHOR_END: qk_norm_rope
        if let Some(trace) = trace.as_mut().filter(|t| t.keep_qk) {
            let (mut q, mut k) = (s.q.clone(), s.k.clone());
            if self.weights.rope_interleaved {
                // Back to transformers' layout, plane i at dimensions (i, i + d/2).
                for head in q.chunks_exact_mut(d).chain(k.chunks_exact_mut(d)) {
                    let pairs = head.to_vec();
                    let (first, second) = head.split_at_mut(d / 2);
                    for (i, pair) in pairs.chunks_exact(2).enumerate() {
                        (first[i], second[i]) = (pair[0], pair[1]);
                    }
                }
            }
            trace.qk.push(QkLayer { layer: l, q, k });
        }
    }
}

impl Session {
    /// The logits of the last forward call, `[rows, vocab]` (one row after a
    /// [`Logits::Last`] call); empty before the first.
    pub fn last_logits(&self) -> &[f32] {
        &self.scratch.logits
    }
}

impl Scratch {
    fn resize(&mut self, c: &Qwen3Config, n: usize, rows: usize, capacity: usize) {
        let h = c.hidden_size;
        for (buf, len) in [
            (&mut self.x, n * h),
            (&mut self.xn, n * h),
            (&mut self.y, n * h),
            (&mut self.q, n * c.q_dim()),
            (&mut self.k, n * c.kv_dim()),
            (&mut self.v, n * c.kv_dim()),
            (&mut self.attn, n * c.q_dim()),
            (&mut self.head, c.head_dim),
            (&mut self.scores, capacity),
            (&mut self.logits, rows * c.vocab_size),
        ] {
            buf.resize(len, 0.0);
        }
        let threads = rayon::current_num_threads().max(1);
        if self.blocks.len() < threads {
            self.blocks.resize_with(threads, Default::default);
        }
        let group = c.num_attention_heads / c.num_key_value_heads.max(1);
        self.part_scores
            .resize_with(decode_attention_parts(c), Vec::new);
        for scores in &mut self.part_scores {
            scores.resize(capacity * group, 0.0);
        }
    }
}

/// The query heads' shape: `heads` of `head_dim` `d`, `group` of them to a KV head, and
/// their scale.
#[derive(Clone, Copy)]
struct HeadShape {
    heads: usize,
    d: usize,
    group: usize,
    scale: f32,
}

impl HeadShape {
    /// One position's attention over `span`: `attn` (`[heads, d]`) from `q` in contiguous
    /// parts of the heads, one part a rayon thread with its buffer of `part_scores`, each
    /// part attending run by run of the heads that share a KV head (`kv_head(g)`), so a
    /// part reads a KV head's keys once.
    fn attend_split<'k>(
        &self,
        q: &[f32],
        span: std::ops::Range<usize>,
        kv_head: impl Fn(usize) -> KvHead<'k> + Sync,
        attn: &mut [f32],
        part_scores: &mut [Vec<f32>],
    ) {
        use rayon::prelude::*;
        let (d, group) = (self.d, self.group);
        let per_part = self.heads.div_ceil(part_scores.len());
        attn.par_chunks_mut(per_part * d)
            .zip(part_scores.par_iter_mut())
            .enumerate()
            .for_each(|(part, (out, scores))| {
                let (first, last) = (part * per_part, part * per_part + out.len() / d);
                let mut h = first;
                while h < last {
                    let g = h / group;
                    let end = ((g + 1) * group).min(last);
                    let o = &mut out[(h - first) * d..(end - first) * d];
                    let (q, span) = (&q[h * d..end * d], span.clone());
                    attend(q, d, kv_head(g), span, self.scale, scores, o);
                    h = end;
                }
            });
    }

    /// For tracing: the weight each query head puts on position 0 at the positions
    /// `past ..` of `q` (`[positions, heads · d]`), into `sinks` (`[positions, heads]`),
    /// recomputed from the same scores so the kernels stay as they are.
    fn sink_shares<'k>(
        &self,
        sinks: &mut [f32],
        q: &[f32],
        past: usize,
        mask: Mask,
        kv_head: impl Fn(usize) -> KvHead<'k> + Sync,
    ) {
        use rayon::prelude::*;
        let (heads, d) = (self.heads, self.d);
        sinks
            .par_chunks_mut(heads)
            .enumerate()
            .for_each(|(t, row)| {
                let span = mask.span(past + t);
                for (head, share) in row.iter_mut().enumerate() {
                    let qh = &q[(t * heads + head) * d..][..d];
                    let kv = kv_head(head / self.group);
                    *share = key_weight(qh, kv, span.clone(), self.scale, 0);
                }
            });
    }
}

/// The parts a decode step's attention splits into: one a rayon thread (at most one a
/// head), or none on one thread or with a single KV head (every part would read all the
/// keys again, which measured slower than one thread for Gemma 3 270M).
fn decode_attention_parts(c: &Qwen3Config) -> usize {
    let threads = rayon::current_num_threads();
    if threads > 1 && c.num_key_value_heads > 1 {
        threads.min(c.num_attention_heads)
    } else {
        0
    }
}

/// Multiply-adds of a decode step's scores (span × heads × head_dim) from which its
/// attention is split over the threads: below it, waking the other threads costs more
/// than it saves.
const PARALLEL_DECODE_ATTENTION: usize = 16 * 1024;

/// Bytes a session of `capacity` positions holds at most: the KV cache, the RoPE table and
/// the buffers of a prefill of `capacity` positions (its logits aside: [`Model::logits`]
/// checks those) and a decode step's score buffers (one per thread, a KV head's group
/// over the whole cache), in `u128` so that no product wraps.
fn session_bytes(c: &Qwen3Config, capacity: usize) -> u128 {
    let (cap, h) = (capacity as u128, c.hidden_size as u128);
    let parts = decode_attention_parts(c) as u128;
    let group = (c.num_attention_heads / c.num_key_value_heads.max(1)) as u128;
    let (q, kv) = (c.q_dim() as u128, c.kv_dim() as u128);
    let kv_cache = 2 * c.num_hidden_layers as u128 * cap * kv;
    let rope = 2 * cap * c.head_dim as u128; // a global and (Gemma 3) a local table
    let k = c.num_experts_per_tok as u128;
    let moe = c.num_experts as u128 + k * (2 * h + 2 * c.moe_intermediate_size as u128 + 5);
    let per_position =
        3 * h + 3 * q + 2 * kv + 1 + moe + 2 * c.intermediate_size as u128 + parts * group;
    4 * (kv_cache + rope + cap * per_position + c.vocab_size as u128)
}

/// RMSNorm of each `hidden`-wide row of `xs` into `out`.
fn rmsnorm_rows(xs: &[f32], weight: &[f32], c: &Qwen3Config, out: &mut [f32]) {
    let h = c.hidden_size;
    for (x, o) in xs.chunks_exact(h).zip(out.chunks_exact_mut(h)) {
        rmsnorm(x, weight, c.rms_norm_eps, o);
    }
}

/// The residual add `x += y` of a sub-block, with `y` RMS-normalised first (into `buf`)
/// when the layer has a sandwich norm there.
fn add_normed(s: &mut Scratch, norm: Option<&[f32]>, c: &Qwen3Config) {
    match norm {
        Some(w) => {
            rmsnorm_rows(&s.y, w, c, &mut s.xn);
            add_in_place(&mut s.x, &s.xn);
        }
        None => add_in_place(&mut s.x, &s.y),
    }
}

fn add_in_place(x: &mut [f32], y: &[f32]) {
    for (a, b) in x.iter_mut().zip(y) {
        *a += b;
    }
}

fn add_bias(x: &mut [f32], bias: Option<&[f32]>) {
    if let Some(b) = bias {
        add_in_place(x, b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The heads split in parts (across KV groups, unevenly) give each head the bits of
    /// the whole group attending at once, on any number of threads.
    #[test]
    fn split_heads_attend_as_their_group() {
        let (heads, kv_heads, d, positions) = (9, 3, 16, 37);
        let group = heads / kv_heads;
        let value = |i: usize, m: usize| ((i * m % 101) as f32 - 50.0) / 40.0;
        let keys: Vec<f32> = (0..positions * kv_heads * d).map(|i| value(i, 7)).collect();
        let values: Vec<f32> = (0..positions * kv_heads * d)
            .map(|i| value(i, 13))
            .collect();
        let q: Vec<f32> = (0..heads * d).map(|i| value(i, 29)).collect();
        let kv_head = |g: usize| KvHead {
            keys: &keys,
            values: &values,
            stride: kv_heads * d,
            offset: g * d,
        };
        let (scale, span) = (0.25, 3..positions);
        let mut want = vec![0.0f32; heads * d];
        let mut scores = Vec::new();
        for (g, o) in want.chunks_exact_mut(group * d).enumerate() {
            let qg = &q[g * group * d..(g + 1) * group * d];
            attend(qg, d, kv_head(g), span.clone(), scale, &mut scores, o);
        }
        let shape = HeadShape {
            heads,
            d,
            group,
            scale,
        };
        for parts in [1, 2, 4, 9] {
            let mut got = vec![f32::NAN; heads * d];
            let mut part_scores = vec![Vec::new(); parts];
            shape.attend_split(&q, span.clone(), kv_head, &mut got, &mut part_scores);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&got), bits(&want), "{parts} parts");
        }
    }
}
