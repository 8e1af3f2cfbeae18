//! Where a NaN or an infinity in the forward pass came from.
//!
//! Scanning every weight of a 60 GB checkpoint at load would take a minute; scanning what
//! the forward pass produces costs nothing next to the matmuls that produce it. So
//! [`Model`](super::Model) checks the hidden state after the embedding and after each
//! sub-block (attention, then the MLP or MoE) of every layer, and the logits at the end —
//! one vectorised pass over `n · hidden` numbers, no allocation — and only when a check
//! fails does [`locate`] look at the weights of the step that failed: the embedding row of
//! the token, the layer's norms, projections, biases, router and experts, or the final norm
//! and the head's row. The error names the tensor, row and column of the first non-finite
//! weight it finds; if every weight there is finite, the activations overflowed f32, and
//! the error names the layer, sub-block and position.
//!
//! The small tensors — norms, biases and routers, well under 0.1% of the weights — are
//! scanned once at load by [`check_small_tensors`]: a router's softmax turns an infinite
//! logit of −∞ into a probability of exactly 0, so a bad router weight can leave every
//! activation finite and still be wrong.

use crate::error::{Error, Result};
use crate::kernels::{Matrix, first_non_finite};
use crate::moe::Expert;
use crate::qwen3::config::Qwen3Config;
use crate::qwen3::weights::{ExpertLayout, Ffn, Weights};

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

/// A tensor to look in: its name (without the checkpoint prefix) and its values.
enum Source<'w, 'a> {
    Matrix(String, &'w Matrix<'a>),
    Vector(String, &'w [f32]),
}

impl Source<'_, '_> {
    /// `(name, where, value)` of the first non-finite weight.
    fn scan(&self) -> Option<(String, String, f32)> {
        match self {
            Source::Matrix(name, m) => m.find_non_finite().map(|(r, c)| {
                let mut row = vec![0.0f32; m.cols];
                m.row_into(r, &mut row);
                (name.clone(), format!("row {r}, column {c}"), row[c])
            }),
            Source::Vector(name, v) => {
                first_non_finite(v).map(|i| (name.clone(), format!("entry {i}"), v[i]))
            }
        }
    }
}

fn expert_sources<'w, 'a>(
    out: &mut Vec<Source<'w, 'a>>,
    pre: &str,
    e: usize,
    x: &'w Expert<'a>,
    layout: Option<ExpertLayout>,
) {
    for (part, m) in [("gate", &x.gate), ("up", &x.up), ("down", &x.down)] {
        let name = match layout {
            Some(ExpertLayout::Fused) if part == "down" => {
                format!("{pre}.experts.down_proj (expert {e})")
            }
            Some(ExpertLayout::Fused) => {
                format!("{pre}.experts.gate_up_proj (expert {e}, {part} rows)")
            }
            _ => format!("{pre}.experts.{e}.{part}_proj.weight"),
        };
        out.push(Source::Matrix(name, m));
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
            let mut row = vec![0.0f32; w.embed_tokens.cols];
            w.embed_tokens.row_into(id, &mut row);
            if let Some(col) = first_non_finite(&row) {
                return found(
                    w,
                    &name,
                    &format!("row {id}, column {col}"),
                    row[col],
                    "the embedding of token",
                    position,
                );
            }
            format!("the embedding of position {position} (token {id})")
        }
        Stage::Attention(l) => {
            let layer = &w.layers[l];
            let a = &layer.self_attn;
            let pre = format!("{p}layers.{l}");
            sources.push(Source::Vector(
                format!("{pre}.input_layernorm.weight"),
                &layer.input_layernorm,
            ));
            for (n, m) in [
                ("q_proj", &a.q_proj),
                ("k_proj", &a.k_proj),
                ("v_proj", &a.v_proj),
            ] {
                sources.push(Source::Matrix(format!("{pre}.self_attn.{n}.weight"), m));
            }
            for (n, b) in [
                ("q_proj", &a.q_bias),
                ("k_proj", &a.k_bias),
                ("v_proj", &a.v_bias),
                ("o_proj", &a.o_bias),
            ] {
                if let Some(b) = b {
                    sources.push(Source::Vector(format!("{pre}.self_attn.{n}.bias"), b));
                }
            }
            // Qwen2 has no q/k norm.
            for (n, w) in [("q_norm", &a.q_norm), ("k_norm", &a.k_norm)] {
                if let Some(w) = w {
                    sources.push(Source::Vector(format!("{pre}.self_attn.{n}.weight"), w));
                }
            }
            sources.push(Source::Matrix(
                format!("{pre}.self_attn.o_proj.weight"),
                &a.o_proj,
            ));
            format!("layer {l}'s attention at position {position}")
        }
        Stage::Ffn(l) => {
            let layer = &w.layers[l];
            let pre = format!("{p}layers.{l}.mlp");
            sources.push(Source::Vector(
                format!("{p}layers.{l}.post_attention_layernorm.weight"),
                &layer.post_attention_layernorm,
            ));
            match &layer.mlp {
                Ffn::Dense(mlp) => {
                    for (n, m) in [
                        ("gate_proj", &mlp.gate),
                        ("up_proj", &mlp.up),
                        ("down_proj", &mlp.down),
                    ] {
                        sources.push(Source::Matrix(format!("{pre}.{n}.weight"), m));
                    }
                }
                Ffn::Moe {
                    router,
                    experts: all,
                } => {
                    sources.push(Source::Matrix(format!("{pre}.gate.weight"), router));
                    // The position's own experts first, then the rest.
                    let order = experts
                        .iter()
                        .copied()
                        .chain((0..all.len()).filter(|e| !experts.contains(e)));
                    for e in order.filter(|&e| e < all.len()) {
                        expert_sources(&mut sources, &pre, e, &all[e], w.expert_layout);
                    }
                }
            }
            format!(
                "layer {l}'s {} at position {position}",
                if c.is_moe_layer(l) {
                    "MoE block"
                } else {
                    "MLP"
                }
            )
        }
        Stage::Logits => {
            sources.push(Source::Vector(format!("{p}norm.weight"), &w.norm));
            let head = if c.tie_word_embeddings {
                format!("{p}embed_tokens.weight (tied LM head)")
            } else {
                "lm_head.weight".to_string()
            };
            sources.push(Source::Matrix(head, &w.lm_head));
            format!("the logits at position {position}")
        }
    };
    for s in &sources {
        if let Some((name, at, v)) = s.scan() {
            return Error::NonFinite {
                what: tensor_words(w, &name),
                detail: format!(
                    "{} at {at} (found because {step} came out {})",
                    describe(v),
                    describe(value)
                ),
            };
        }
    }
    Error::NonFinite {
        what: "forward pass".into(),
        detail: format!(
            "{step} came out {}, though every weight it reads is finite: the activations overflow f32 (weights or rms_norm_eps out of range?)",
            describe(value)
        ),
    }
}

/// Scans the norms, biases and routers of `w` for NaN or infinite values (milliseconds even
/// for a 30B model), naming the first one found.
pub fn check_small_tensors(w: &Weights) -> Result<()> {
    let p = w.prefix;
    let mut sources: Vec<Source> = vec![Source::Vector(format!("{p}norm.weight"), &w.norm)];
    for (l, layer) in w.layers.iter().enumerate() {
        let pre = format!("{p}layers.{l}");
        let a = &layer.self_attn;
        sources.push(Source::Vector(
            format!("{pre}.input_layernorm.weight"),
            &layer.input_layernorm,
        ));
        sources.push(Source::Vector(
            format!("{pre}.post_attention_layernorm.weight"),
            &layer.post_attention_layernorm,
        ));
        // Qwen2 has no q/k norm.
        for (n, w) in [("q_norm", &a.q_norm), ("k_norm", &a.k_norm)] {
            if let Some(w) = w {
                sources.push(Source::Vector(format!("{pre}.self_attn.{n}.weight"), w));
            }
        }
        for (n, b) in [
            ("q_proj", &a.q_bias),
            ("k_proj", &a.k_bias),
            ("v_proj", &a.v_bias),
            ("o_proj", &a.o_bias),
        ] {
            if let Some(b) = b {
                sources.push(Source::Vector(format!("{pre}.self_attn.{n}.bias"), b));
            }
        }
        if let Ffn::Moe { router, .. } = &layer.mlp {
            sources.push(Source::Matrix(format!("{pre}.mlp.gate.weight"), router));
        }
    }
    for s in &sources {
        if let Some((name, at, v)) = s.scan() {
            return Err(Error::NonFinite {
                what: tensor_words(w, &name),
                detail: format!("{} at {at}", describe(v)),
            });
        }
    }
    Ok(())
}

/// How an error names a weight: its Hugging Face name, and for a GGUF file first the
/// GGUF tensor (and expert) that holds it.
fn tensor_words(w: &Weights, name: &str) -> String {
    match crate::qwen3::gguf_names::to_gguf(name).filter(|_| w.gguf_names) {
        Some(g) => match g.expert {
            Some(e) => format!("tensor `{}` (expert {e}: `{name}`)", g.name),
            None => format!("tensor `{}` (`{name}`)", g.name),
        },
        None => format!("tensor `{name}`"),
    }
}

fn found(w: &Weights, name: &str, at: &str, v: f32, step: &str, position: usize) -> Error {
    Error::NonFinite {
        what: tensor_words(w, name),
        detail: format!("{} at {at} ({step} at position {position})", describe(v)),
    }
}
