//! Maps a checkpoint's tensors onto the model, checking each against the config.
//!
//! Tensor names follow transformers' `Qwen3MoeForCausalLM` (`model.layers.{l}.self_attn.q_proj.weight`,
//! ...), which `Qwen3ForCausalLM` and `Qwen2ForCausalLM` share (Qwen2 has q/k/v biases and
//! no `q_norm` / `k_norm`). The experts of an MoE layer are stored in one of two layouts: per expert
//! (`mlp.experts.{e}.{gate,up,down}_proj.weight`, what the official checkpoints and
//! transformers 5.x's `save_pretrained` write) or fused (`mlp.experts.gate_up_proj`
//! `[E, 2I, H]` with the gate rows first, and `mlp.experts.down_proj` `[E, H, I]`, the
//! in-memory layout of transformers 5.x). Both end up as the same [`Expert`] views, in the
//! checkpoint's dtype: no weight is copied.
//!
//! A GGUF file goes through the same function and the same layer loop: [`Tensors`] finds
//! each Hugging Face role under its GGUF name, and a GGUF file's third layout, the experts
//! stacked `[E, I, H]` per projection (`blk.{l}.ffn_gate_exps.weight`), is cut into
//! per-expert row blocks like the fused one, its block formats kept as they are.

use crate::checkpoint::row_block;
use crate::error::{CheckpointProblem, Error, Result};
use crate::kernels::Matrix;
use crate::moe::Expert;
use crate::qwen3::config::Qwen3Config;
use crate::qwen3::tensors::Tensors;
use crate::qwen3::variant::Variant;

/// One layer's attention weights. Projections are `[out, in]`; the norms act on one head.
#[derive(Debug)]
pub struct Attention<'a> {
    /// `[heads·head_dim, hidden]`
    pub q_proj: Matrix<'a>,
    /// `[kv_heads·head_dim, hidden]`
    pub k_proj: Matrix<'a>,
    pub v_proj: Matrix<'a>,
    /// `[hidden, heads·head_dim]`
    pub o_proj: Matrix<'a>,
    /// Biases of q/k/v, present when `attention_bias` is true (always in Qwen2).
    pub q_bias: Option<Vec<f32>>,
    pub k_bias: Option<Vec<f32>>,
    pub v_bias: Option<Vec<f32>>,
    /// o_proj's bias, present when `o_proj_bias` is true (Qwen3 with `attention_bias`).
    pub o_bias: Option<Vec<f32>>,
    /// RMSNorm weights `[head_dim]` applied to every query / key head before RoPE (Qwen3;
    /// `None` for Qwen2, which has no q/k norm).
    pub q_norm: Option<Vec<f32>>,
    pub k_norm: Option<Vec<f32>>,
}

/// A layer's feed-forward block: a dense SwiGLU MLP or a routed mixture of experts.
#[derive(Debug)]
pub enum Ffn<'a> {
    /// The dense MLP is the same SwiGLU network as an expert, `intermediate_size` wide.
    Dense(Expert<'a>),
    Moe {
        /// `[num_experts, hidden]`, the `mlp.gate` linear.
        router: Matrix<'a>,
        experts: Vec<Expert<'a>>,
    },
}

/// One decoder layer. Norm weights already include the variant's offset (Gemma's `1 + w`).
#[derive(Debug)]
pub struct Layer<'a> {
    pub input_layernorm: Vec<f32>,
    pub self_attn: Attention<'a>,
    /// Gemma 3's norm of the attention output before its residual add.
    pub post_attention_norm: Option<Vec<f32>>,
    /// The norm before the feed-forward block (transformers' name in Qwen and Llama;
    /// Gemma calls it `pre_feedforward_layernorm`).
    pub post_attention_layernorm: Vec<f32>,
    pub mlp: Ffn<'a>,
    /// Gemma 3's norm of the FFN output before its residual add.
    pub post_feedforward_norm: Option<Vec<f32>>,
}

/// How the experts of the MoE layers were stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ExpertLayout {
    PerExpert,
    Fused,
    /// A GGUF file's `ffn_{gate,up,down}_exps`, one `[E, ·, ·]` tensor per projection.
    Stacked,
}

#[derive(Debug)]
pub struct Weights<'a> {
    /// `[vocab, hidden]`
    pub embed_tokens: Matrix<'a>,
    pub layers: Vec<Layer<'a>>,
    pub norm: Vec<f32>,
    /// `[vocab, hidden]`; the embedding itself when `tie_word_embeddings`.
    pub lm_head: Matrix<'a>,
    /// `None` for a dense model.
    pub expert_layout: Option<ExpertLayout>,
    /// The prefix of the tensor names: `"model."`, or `""` for a bare `Qwen3MoeModel`.
    pub prefix: &'static str,
    /// The tensors came from a GGUF file (errors then give their GGUF names too).
    pub gguf_names: bool,
    /// Where the tensors came from: errors about a weight name its file.
    pub source: Tensors<'a>,
    /// The architecture's settings of the forward pass.
    pub variant: Variant,
    /// q and k rows hold each RoPE plane as adjacent pairs: llama.cpp's converter permutes
    /// the rows of `attn_q` / `attn_k` that way for architecture `llama` (to use its
    /// interleaved rotation). Rotating interleaved pairs of those rows gives the same q·k
    /// as transformers' half-split rotation of the unpermuted rows, so no row is moved.
    pub rope_interleaved: bool,
}

impl<'a> Weights<'a> {
    /// Views every tensor the config calls for, checking names, shapes and dtypes, from a
    /// Hugging Face checkpoint, a GGUF file or an f32 store ([`Tensors`]).
    pub fn load(cfg: &Qwen3Config, src: impl Into<Tensors<'a>>) -> Result<Weights<'a>> {
        Self::load_with_progress(cfg, src, |_, _| {})
    }

    /// [`Weights::load`], calling `progress(l, layers)` after each layer.
    pub fn load_with_progress(
        cfg: &Qwen3Config,
        src: impl Into<Tensors<'a>>,
        mut progress: impl FnMut(usize, usize),
    ) -> Result<Weights<'a>> {
        let ckpt = src.into();
        // A bare `Qwen3MoeModel` saves its tensors without the `model.` prefix.
        let p = if !ckpt.contains("model.embed_tokens.weight")
            && ckpt.contains("embed_tokens.weight")
        {
            ""
        } else {
            "model."
        };
        let (h, v) = (cfg.hidden_size, cfg.vocab_size);
        let variant = Variant::of(cfg);
        // llama.cpp's converter already adds Gemma's 1 to every norm weight it writes.
        let offset = match ckpt.gguf_names() {
            true => 0.0,
            false => variant.norm_weight_offset,
        };
        let norm = |name: &str, len: usize| -> Result<Vec<f32>> {
            let mut w = ckpt.vector(name, len)?;
            w.iter_mut().for_each(|x| *x += offset);
            Ok(w)
        };
        let embed_tokens = ckpt.matrix(&format!("{p}embed_tokens.weight"), v, h)?;
        let lm_head = if cfg.tie_word_embeddings {
            embed_tokens
        } else {
            ckpt.matrix("lm_head.weight", v, h)?
        };
        let mut layers = Vec::with_capacity(cfg.num_hidden_layers);
        let mut layouts = Vec::new();
        for l in 0..cfg.num_hidden_layers {
            let pre = format!("{p}layers.{l}");
            let (mlp, layout) = if cfg.is_moe_layer(l) {
                let (ffn, layout) = load_moe(cfg, &ckpt, &format!("{pre}.mlp"))?;
                (ffn, Some(layout))
            } else {
                let i = cfg.intermediate_size;
                let ffn = Ffn::Dense(Expert {
                    gate: ckpt.matrix(&format!("{pre}.mlp.gate_proj.weight"), i, h)?,
                    up: ckpt.matrix(&format!("{pre}.mlp.up_proj.weight"), i, h)?,
                    down: ckpt.matrix(&format!("{pre}.mlp.down_proj.weight"), h, i)?,
                });
                (ffn, None)
            };
            layouts.extend(layout);
            let [pre_ffn, post_attn, post_ffn] =
                norm_roles(variant.sandwich_norms, ckpt.gguf_names());
            let sandwich = |role: &str| -> Result<Option<Vec<f32>>> {
                match variant.sandwich_norms {
                    true => norm(&format!("{pre}.{role}.weight"), h).map(Some),
                    false => Ok(None),
                }
            };
            layers.push(Layer {
                input_layernorm: norm(&format!("{pre}.input_layernorm.weight"), h)?,
                self_attn: load_attention(cfg, &ckpt, &format!("{pre}.self_attn"), &norm)?,
                post_attention_norm: sandwich(post_attn)?,
                post_attention_layernorm: norm(&format!("{pre}.{pre_ffn}.weight"), h)?,
                mlp,
                post_feedforward_norm: sandwich(post_ffn)?,
            });
            progress(l + 1, cfg.num_hidden_layers);
        }
        // (Layers could in principle mix layouts; each is read on its own.)
        let expert_layout = layouts.first().copied();
        Ok(Weights {
            embed_tokens,
            layers,
            norm: norm(&format!("{p}norm.weight"), h)?,
            lm_head,
            expert_layout,
            prefix: p,
            gguf_names: ckpt.gguf_names(),
            source: ckpt,
            rope_interleaved: ckpt.gguf_names() && cfg.model_type == "llama",
            variant,
        })
    }
}

/// The roles of a layer's pre-FFN norm and (sandwich norms) of the norms on the attention
/// and FFN outputs. Gemma's Hugging Face names reuse `post_attention_layernorm` for the
/// norm on the attention output, while the GGUF table maps that name to the pre-FFN
/// `ffn_norm` of every other family; a GGUF Gemma file is therefore asked for
/// `post_attention_norm` (its own `blk.{l}.post_attention_norm`).
pub(crate) fn norm_roles(sandwich: bool, gguf: bool) -> [&'static str; 3] {
    match (sandwich, gguf) {
        (false, _) => ["post_attention_layernorm", "", ""],
        (true, true) => [
            "post_attention_layernorm",
            "post_attention_norm",
            "post_feedforward_layernorm",
        ],
        (true, false) => [
            "pre_feedforward_layernorm",
            "post_attention_layernorm",
            "post_feedforward_layernorm",
        ],
    }
}

fn load_attention<'a>(
    cfg: &Qwen3Config,
    ckpt: &Tensors<'a>,
    pre: &str,
    norm_vector: &dyn Fn(&str, usize) -> Result<Vec<f32>>,
) -> Result<Attention<'a>> {
    let (h, q, kv, d) = (cfg.hidden_size, cfg.q_dim(), cfg.kv_dim(), cfg.head_dim);
    let bias = |present: bool, name: &str, len: usize| -> Result<Option<Vec<f32>>> {
        if present {
            ckpt.vector(&format!("{pre}.{name}.bias"), len).map(Some)
        } else {
            Ok(None)
        }
    };
    let norm = |name: &str| -> Result<Option<Vec<f32>>> {
        if cfg.qk_norm {
            norm_vector(&format!("{pre}.{name}.weight"), d).map(Some)
        } else {
            Ok(None)
        }
    };
    let qkv = cfg.attention_bias;
    Ok(Attention {
        q_proj: ckpt.matrix(&format!("{pre}.q_proj.weight"), q, h)?,
        k_proj: ckpt.matrix(&format!("{pre}.k_proj.weight"), kv, h)?,
        v_proj: ckpt.matrix(&format!("{pre}.v_proj.weight"), kv, h)?,
        o_proj: ckpt.matrix(&format!("{pre}.o_proj.weight"), h, q)?,
        q_bias: bias(qkv, "q_proj", q)?,
        k_bias: bias(qkv, "k_proj", kv)?,
        v_bias: bias(qkv, "v_proj", kv)?,
        o_bias: bias(cfg.o_proj_bias, "o_proj", h)?,
        q_norm: norm("q_norm")?,
        k_norm: norm("k_norm")?,
    })
}

/// The router and experts of one MoE layer, from any of the three layouts.
fn load_moe<'a>(
    cfg: &Qwen3Config,
    ckpt: &Tensors<'a>,
    pre: &str,
) -> Result<(Ffn<'a>, ExpertLayout)> {
    let (h, n, i) = (cfg.hidden_size, cfg.num_experts, cfg.moe_intermediate_size);
    let router = ckpt.matrix(&format!("{pre}.gate.weight"), n, h)?;
    let expert0 = |proj: &str| format!("{pre}.experts.0.{proj}.weight");
    if let Some(gate) = ckpt.expert_stack(&expert0("gate_proj"), [n, i, h])? {
        // [E, I, H] gate and up, [E, H, I] down: expert e is row block e of each.
        let stack = |proj: &str, rows, cols| -> Result<Matrix<'a>> {
            let m = ckpt.expert_stack(&expert0(proj), [n, rows, cols])?;
            m.ok_or_else(|| Error::Checkpoint {
                file: ckpt.path().to_path_buf(),
                tensor: Some(format!(
                    "{} ({pre}.experts.*.{proj}.weight)",
                    gguf_stack_name(&expert0(proj))
                )),
                problem: CheckpointProblem::Missing,
            })
        };
        let (up, down) = (stack("up_proj", i, h)?, stack("down_proj", h, i)?);
        let experts = (0..n)
            .map(|e| Expert {
                gate: row_block(&gate, e * i, i),
                up: row_block(&up, e * i, i),
                down: row_block(&down, e * h, h),
            })
            .collect();
        return Ok((Ffn::Moe { router, experts }, ExpertLayout::Stacked));
    }
    let fused = format!("{pre}.experts.gate_up_proj");
    if ckpt.contains(&fused) {
        // [E, 2I, H]: expert e's gate rows, then its up rows.
        let gate_up = ckpt.tensor(&fused, &[n, 2 * i, h])?;
        let down = ckpt.tensor(&format!("{pre}.experts.down_proj"), &[n, h, i])?;
        let experts = (0..n)
            .map(|e| Expert {
                gate: row_block(&gate_up, e * 2 * i, i),
                up: row_block(&gate_up, e * 2 * i + i, i),
                down: row_block(&down, e * h, h),
            })
            .collect();
        return Ok((Ffn::Moe { router, experts }, ExpertLayout::Fused));
    }
    let first = format!("{pre}.experts.0.gate_proj.weight");
    if !ckpt.contains(&first) {
        return Err(Error::Checkpoint {
            file: ckpt.path().to_path_buf(),
            tensor: None,
            problem: CheckpointProblem::NoneOf {
                what: format!("experts for MoE layer `{pre}`"),
                names: match crate::qwen3::gguf_names::to_gguf(&first) {
                    Some(g) if !matches!(ckpt, Tensors::Safetensors(_)) => vec![g.name],
                    _ => vec![fused, first],
                },
            },
        });
    }
    let experts = (0..n)
        .map(|e| {
            let x = format!("{pre}.experts.{e}");
            Ok(Expert {
                gate: ckpt.matrix(&format!("{x}.gate_proj.weight"), i, h)?,
                up: ckpt.matrix(&format!("{x}.up_proj.weight"), i, h)?,
                down: ckpt.matrix(&format!("{x}.down_proj.weight"), h, i)?,
            })
        })
        .collect::<Result<Vec<_>>>()?;
    Ok((Ffn::Moe { router, experts }, ExpertLayout::PerExpert))
}

/// The GGUF name of the stacked tensor behind an expert's Hugging Face name.
fn gguf_stack_name(hf: &str) -> String {
    crate::qwen3::gguf_names::to_gguf(hf).map_or_else(|| hf.to_string(), |g| g.name)
}
