//! Where a NaN or an infinity in the forward pass came from.
//!
//! Scanning every weight of a 60 GB checkpoint at load would take a minute; scanning what
//! the forward pass produces costs nothing next to the matmuls that produce it. So
//! [`Model`](super::Model) checks the hidden state after the embedding and after each
//! sub-block (attention, then the MLP or MoE) of every layer, and the logits at the end —
//! one vectorised pass over `n · hidden` numbers, no allocation — and only when a check
//! fails does [`locate`] look at the weights of the step that failed: the embedding row of
//! the token, the layer's norms, projections, biases, router and experts, or the final norm
//! and the head's row. The error names the file, tensor, row and column of the first
//! non-finite weight it finds; if every weight there is finite, the activations overflowed
//! f32, and the error names the file, layer, sub-block and position, and the largest
//! weight the step reads (the likeliest culprit).
//!
//! The small tensors — norms, biases and routers, well under 0.1% of the weights — are
//! scanned once at load by [`check_small_tensors`]: a router's softmax turns an infinite
//! logit of −∞ into a probability of exactly 0, so a bad router weight can leave every
//! activation finite and still be wrong.

use crate::error::{Error, Result};
use crate::kernels::{Matrix, first_non_finite};
use crate::moe::Expert;
use crate::qwen3::config::Qwen3Config;
use crate::qwen3::weights::{ExpertLayout, Ffn, Layer, Weights, norm_roles};

/// The step of the forward pass whose output was not finite.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stage {
    /// The rows of `embed_tokens` for the input ids.
    Embedding,
    /// Layer `l`'s attention sub-block (input norm, q/k/v/o, q/k norms, RoPE).
    Attention(usize),
    /// Layer `l`'s feed-forward sub-block (post-attention norm, MLP or router + experts).
    Ffn(usize),
    /// The final norm and the LM head.
    Logits,
}

/// What a value that is not finite is.
fn describe(v: f32) -> &'static str {
    if v.is_nan() {
        "NaN"
    } else if v > 0.0 {
        "+inf"
    } else {
        "-inf"
    }
}

/// The values of a tensor a step reads: all of a matrix, one row of it, or a vector.
enum Values<'w, 'a> {
    Matrix(&'w Matrix<'a>),
    Row(&'w Matrix<'a>, usize),
    Vector(&'w [f32]),
}

/// A tensor to look in: the Hugging Face name of the tensor that holds it (without the
/// checkpoint prefix stripped), which part of it is meant (an expert of a fused stack, or
/// ""), and its values.
struct Source<'w, 'a> {
    tensor: String,
    part: String,
    values: Values<'w, 'a>,
}

impl<'w, 'a> Source<'w, 'a> {
    fn whole(tensor: String, values: Values<'w, 'a>) -> Self {
        Source {
            tensor,
            part: String::new(),
            values,
        }
    }

    /// Calls `visit(where, row)` on each row it reads (a vector is one row).
    fn rows(&self, mut visit: impl FnMut(&dyn Fn(usize) -> String, &[f32]) -> bool) {
        let rows: std::ops::Range<usize>;
        let m = match self.values {
            Values::Vector(v) => {
                visit(&|i| format!("entry {i}"), v);
                return;
            }
            Values::Matrix(m) => {
                rows = 0..m.rows;
                m
            }
            Values::Row(m, r) => {
                rows = r..r + 1;
                m
            }
        };
        let mut row = vec![0.0f32; m.cols];
        for r in rows {
            m.row_into(r, &mut row);
            if !visit(&|c| format!("row {r}, column {c}"), &row) {
                return;
            }
        }
    }

    /// `(where, value)` of the first non-finite weight.
    fn first_non_finite(&self) -> Option<(String, f32)> {
        let mut hit = None;
        self.rows(|at, row| match first_non_finite(row) {
            Some(i) => {
                hit = Some((at(i), row[i]));
                false
            }
            None => true,
        });
        hit
    }

    /// `(where, value)` of the weight of largest magnitude.
    fn largest(&self) -> Option<(String, f32)> {
        let mut best: Option<(String, f32)> = None;
        self.rows(|at, row| {
            let top = (0..row.len()).max_by(|&i, &j| row[i].abs().total_cmp(&row[j].abs()));
            if let Some(i) = top.filter(|&i| best.as_ref().is_none_or(|b| row[i].abs() > b.1.abs()))
            {
                best = Some((at(i), row[i]));
            }
            true
        });
        best
    }
}

/// How an error names a weight: its file, then [`tensor_name`].
fn tensor_words(w: &Weights, s: &Source) -> String {
    let file = w.source.file_of(&s.tensor).display();
    format!("{file}: {}", tensor_name(w, s))
}

/// A weight's Hugging Face name preceded, for a GGUF file, by the GGUF tensor (and
/// expert) that holds it.
fn tensor_name(w: &Weights, s: &Source) -> String {
    let name = &s.tensor;
    match crate::qwen3::gguf_names::to_gguf(name).filter(|_| w.gguf_names) {
        Some(g) => match g.expert {
            Some(e) => format!("tensor `{}` (expert {e}: `{name}`)", g.name),
            None => format!("tensor `{}` (`{name}`)", g.name),
        },
        None if s.part.is_empty() => format!("tensor `{name}`"),
        None => format!("tensor `{name}` ({})", s.part),
    }
}

/// The error for a non-finite `value` in the hidden state (or logits) found after `stage`
/// at `(position, token)`; `experts` are the experts the position was routed to (for an
/// MoE sub-block), looked at before the others.
pub fn locate(
    c: &Qwen3Config,
    w: &Weights,
    stage: Stage,
    (position, token): (usize, u32),
    value: f32,
    experts: &[usize],
) -> Error {
    let p = w.prefix;
    let mut sources: Vec<Source> = Vec::new();
    let step = match stage {
        Stage::Embedding => {
            let id = token as usize;
            let name = format!("{p}embed_tokens.weight");
            sources.push(Source::whole(name, Values::Row(&w.embed_tokens, id)));
            format!("the embedding of position {position} (token {id})")
        }
        Stage::Attention(l) => {
            attention_sources(&mut sources, w, l);
            format!("layer {l}'s attention at position {position}")
        }
        Stage::Ffn(l) => {
            ffn_sources(&mut sources, w, l, experts);
            let block = if c.is_moe_layer(l) {
                "MoE block"
            } else {
                "MLP"
            };
            format!("layer {l}'s {block} at position {position}")
        }
        Stage::Logits => {
            sources.push(Source::whole(
                format!("{p}norm.weight"),
                Values::Vector(&w.norm),
            ));
            let head = match c.tie_word_embeddings {
                true => Source {
                    tensor: format!("{p}embed_tokens.weight"),
                    part: "tied LM head".into(),
                    values: Values::Matrix(&w.lm_head),
                },
                false => Source::whole("lm_head.weight".into(), Values::Matrix(&w.lm_head)),
            };
            sources.push(head);
            format!("the logits at position {position}")
        }
    };
    let came_out = describe(value);
    for s in &sources {
        if let Some((at, v)) = s.first_non_finite() {
            return Error::NonFinite {
                what: tensor_words(w, s),
                detail: format!(
                    "{at} holds {} (found because {step} came out {came_out})",
                    describe(v)
                ),
            };
        }
    }
    overflow(c, w, &sources, &step, came_out)
}

/// Every weight `step` reads is finite, yet it came out non-finite: the activations
/// overflowed f32. Names the file, the step and the weight of largest magnitude there.
fn overflow(c: &Qwen3Config, w: &Weights, sources: &[Source], step: &str, came_out: &str) -> Error {
    let largest = sources
        .iter()
        .filter_map(|s| s.largest().map(|(at, v)| (s, at, v)))
        .max_by(|a, b| a.2.abs().total_cmp(&b.2.abs()));
    let (what, culprit) = match largest {
        Some((s, at, v)) => (
            format!("{}: forward pass", w.source.file_of(&s.tensor).display()),
            format!(
                "; the largest weight it reads is {v:e} at {at} of {}",
                tensor_name(w, s)
            ),
        ),
        None => (
            format!("{}: forward pass", w.source.path().display()),
            String::new(),
        ),
    };
    let eps = c.rms_norm_eps;
    let why = "though every weight it reads is finite: the activations overflow f32";
    Error::NonFinite {
        what,
        detail: format!("{step} came out {came_out}, {why} (rms_norm_eps {eps:e}){culprit}"),
    }
}

/// The norm weights of layer `l`, by role: input, pre-FFN, and (sandwich norms) the norms
/// on the attention and FFN outputs, named as the source names them.
fn norm_sources<'w, 'a>(w: &'w Weights<'a>, l: usize) -> [Option<Source<'w, 'a>>; 4] {
    let layer: &'w Layer<'a> = &w.layers[l];
    let pre = format!("{}layers.{l}", w.prefix);
    let [pre_ffn, post_attn, post_ffn] = norm_roles(w.variant.sandwich_norms, w.gguf_names);
    let vector =
        |role: &str, v: &'w [f32]| Source::whole(format!("{pre}.{role}.weight"), Values::Vector(v));
    [
        Some(vector("input_layernorm", &layer.input_layernorm)),
        Some(vector(pre_ffn, &layer.post_attention_layernorm)),
        (layer.post_attention_norm.as_deref()).map(|v| vector(post_attn, v)),
        (layer.post_feedforward_norm.as_deref()).map(|v| vector(post_ffn, v)),
    ]
}

/// The biases and q/k norms of layer `l`'s attention (Qwen2 has biases and no q/k norm).
fn attention_vectors<'w, 'a>(out: &mut Vec<Source<'w, 'a>>, w: &'w Weights<'a>, l: usize) {
    let a = &w.layers[l].self_attn;
    let pre = format!("{}layers.{l}.self_attn", w.prefix);
    for (n, b) in [
        ("q_proj", &a.q_bias),
        ("k_proj", &a.k_bias),
        ("v_proj", &a.v_bias),
        ("o_proj", &a.o_bias),
    ] {
        if let Some(b) = b {
            out.push(Source::whole(format!("{pre}.{n}.bias"), Values::Vector(b)));
        }
    }
    for (n, v) in [("q_norm", &a.q_norm), ("k_norm", &a.k_norm)] {
        if let Some(v) = v {
            out.push(Source::whole(
                format!("{pre}.{n}.weight"),
                Values::Vector(v),
            ));
        }
    }
}

/// What layer `l`'s attention sub-block reads, in the order it reads it.
fn attention_sources<'w, 'a>(out: &mut Vec<Source<'w, 'a>>, w: &'w Weights<'a>, l: usize) {
    let [input, _, post_attn, _] = norm_sources(w, l);
    out.extend(input);
    let a = &w.layers[l].self_attn;
    let pre = format!("{}layers.{l}.self_attn", w.prefix);
    for (n, m) in [
        ("q_proj", &a.q_proj),
        ("k_proj", &a.k_proj),
        ("v_proj", &a.v_proj),
    ] {
        out.push(Source::whole(
            format!("{pre}.{n}.weight"),
            Values::Matrix(m),
        ));
    }
    attention_vectors(out, w, l);
    let o = format!("{pre}.o_proj.weight");
    out.push(Source::whole(o, Values::Matrix(&a.o_proj)));
    out.extend(post_attn);
}

/// What layer `l`'s feed-forward sub-block reads; of an MoE layer, the position's own
/// `experts` first, then the rest.
fn ffn_sources<'w, 'a>(
    out: &mut Vec<Source<'w, 'a>>,
    w: &'w Weights<'a>,
    l: usize,
    experts: &[usize],
) {
    let [_, pre_ffn, _, post_ffn] = norm_sources(w, l);
    out.extend(pre_ffn);
    let pre = format!("{}layers.{l}.mlp", w.prefix);
    match &w.layers[l].mlp {
        Ffn::Dense(mlp) => {
            for (n, m) in [
                ("gate_proj", &mlp.gate),
                ("up_proj", &mlp.up),
                ("down_proj", &mlp.down),
            ] {
                out.push(Source::whole(
                    format!("{pre}.{n}.weight"),
                    Values::Matrix(m),
                ));
            }
        }
        Ffn::Moe {
            router,
            experts: all,
        } => {
            out.push(Source::whole(
                format!("{pre}.gate.weight"),
                Values::Matrix(router),
            ));
            let order = experts
                .iter()
                .copied()
                .chain((0..all.len()).filter(|e| !experts.contains(e)));
            for e in order.filter(|&e| e < all.len()) {
                expert_sources(out, &pre, e, &all[e], w.expert_layout);
            }
        }
    }
    out.extend(post_ffn);
}

fn expert_sources<'w, 'a>(
    out: &mut Vec<Source<'w, 'a>>,
    pre: &str,
    e: usize,
    x: &'w Expert<'a>,
    layout: Option<ExpertLayout>,
) {
    for (part, m) in [("gate", &x.gate), ("up", &x.up), ("down", &x.down)] {
        let (tensor, part) = match layout {
            Some(ExpertLayout::Fused) if part == "down" => {
                (format!("{pre}.experts.down_proj"), format!("expert {e}"))
            }
            Some(ExpertLayout::Fused) => (
                format!("{pre}.experts.gate_up_proj"),
                format!("expert {e}, {part} rows"),
            ),
            _ => (
                format!("{pre}.experts.{e}.{part}_proj.weight"),
                String::new(),
            ),
        };
        out.push(Source {
            tensor,
            part,
            values: Values::Matrix(m),
        });
    }
}

/// Scans the norms, biases and routers of `w` for NaN or infinite values (milliseconds even
/// for a 30B model), naming the file and the first one found.
pub fn check_small_tensors(w: &Weights) -> Result<()> {
    let p = w.prefix;
    let mut sources = vec![Source::whole(
        format!("{p}norm.weight"),
        Values::Vector(&w.norm),
    )];
    for (l, layer) in w.layers.iter().enumerate() {
        sources.extend(norm_sources(w, l).into_iter().flatten());
        attention_vectors(&mut sources, w, l);
        if let Ffn::Moe { router, .. } = &layer.mlp {
            let name = format!("{p}layers.{l}.mlp.gate.weight");
            sources.push(Source::whole(name, Values::Matrix(router)));
        }
    }
    for s in &sources {
        if let Some((at, v)) = s.first_non_finite() {
            return Err(Error::NonFinite {
                what: tensor_words(w, s),
                detail: format!("{at} holds {}", describe(v)),
            });
        }
    }
    Ok(())
}
