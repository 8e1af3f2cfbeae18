//! Chapter 6's tensor-by-tensor view: the tensors one decoder layer holds, named and
//! shaped as a Hugging Face checkpoint stores them (the table of source S0 5.5.2, which
//! `book/src/generated/qwen3-tensors.md` shows for Qwen3-30B-A3B).

use super::{Mla, ModelConfig, Moe, QkNorm, layer_is_moe};
use serde::Serialize;

/// One tensor (or a family of per-expert tensors) of a decoder layer that a config
/// implies, named as a checkpoint names it. (What a safetensors file actually holds is
/// [`crate::checkpoint::TensorInfo`].)
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct ParamTensor {
    /// e.g. `self_attn.q_proj.weight`, `mlp.experts.{0..127}.gate_proj.weight`.
    pub name: String,
    /// `[out, in]` for a linear weight, `[n]` for a norm weight or a bias.
    pub shape: Vec<u64>,
    /// How many such tensors (the number of experts, or 1).
    pub copies: u64,
}

impl ParamTensor {
    pub fn numel(&self) -> u64 {
        self.copies * self.shape.iter().product::<u64>()
    }
}

/// The tensors of decoder layer `l` (names relative to `model.layers.{l}.`), in the
/// Hugging Face per-expert layout.
pub fn layer_tensors(c: &ModelConfig, l: u64) -> Vec<ParamTensor> {
    let h = c.hidden_size;
    let mut v = vec![
        tensor("input_layernorm.weight", &[h], 1),
        tensor("post_attention_layernorm.weight", &[h], 1),
    ];
    if c.family == super::Family::Gemma3 {
        v.push(tensor("pre_feedforward_layernorm.weight", &[h], 1));
        v.push(tensor("post_feedforward_layernorm.weight", &[h], 1));
    }
    match c.mla {
        Some(m) => mla_attention(c, &m, &mut v),
        None => attention(c, &mut v),
    }
    match (&c.moe, layer_is_moe(c, l)) {
        (Some(m), true) => moe(c, m, &mut v),
        _ => mlp(&mut v, "mlp", c.intermediate_size, h, 1, c.mlp_bias),
    }
    v
}

/// One tensor family entry.
fn tensor(name: &str, shape: &[u64], copies: u64) -> ParamTensor {
    ParamTensor {
        name: name.to_string(),
        shape: shape.to_vec(),
        copies,
    }
}

/// Multi-head latent attention: q (optionally through a low-rank `q_a`/`q_b` pair), the
/// joint compressed kv and its up-projection, o.
fn mla_attention(c: &ModelConfig, m: &Mla, v: &mut Vec<ParamTensor>) {
    let (h, nh) = (c.hidden_size, c.num_attention_heads);
    let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
    let kv_a = m.kv_lora_rank + m.qk_rope_head_dim;
    match m.q_lora_rank {
        Some(r) => {
            v.push(tensor("self_attn.q_a_proj.weight", &[r, h], 1));
            if c.qkv_bias {
                v.push(tensor("self_attn.q_a_proj.bias", &[r], 1));
            }
            v.push(tensor("self_attn.q_a_layernorm.weight", &[r], 1));
            v.push(tensor("self_attn.q_b_proj.weight", &[nh * qk, r], 1));
        }
        None => v.push(tensor("self_attn.q_proj.weight", &[nh * qk, h], 1)),
    }
    v.push(tensor("self_attn.kv_a_proj_with_mqa.weight", &[kv_a, h], 1));
    if c.qkv_bias {
        v.push(tensor("self_attn.kv_a_proj_with_mqa.bias", &[kv_a], 1));
    }
    v.push(tensor(
        "self_attn.kv_a_layernorm.weight",
        &[m.kv_lora_rank],
        1,
    ));
    v.push(tensor(
        "self_attn.kv_b_proj.weight",
        &[nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank],
        1,
    ));
    v.push(tensor(
        "self_attn.o_proj.weight",
        &[h, nh * m.v_head_dim],
        1,
    ));
    if c.o_bias {
        v.push(tensor("self_attn.o_proj.bias", &[h], 1));
    }
}

/// Grouped-query attention: q, k, v, o, their optional biases and q/k norms.
fn attention(c: &ModelConfig, v: &mut Vec<ParamTensor>) {
    let h = c.hidden_size;
    let (nh, nkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    v.push(tensor("self_attn.q_proj.weight", &[nh * d, h], 1));
    v.push(tensor("self_attn.k_proj.weight", &[nkv * d, h], 1));
    v.push(tensor("self_attn.v_proj.weight", &[nkv * d, h], 1));
    v.push(tensor("self_attn.o_proj.weight", &[h, nh * d], 1));
    if c.qkv_bias {
        v.push(tensor("self_attn.q_proj.bias", &[nh * d], 1));
        v.push(tensor("self_attn.k_proj.bias", &[nkv * d], 1));
        v.push(tensor("self_attn.v_proj.bias", &[nkv * d], 1));
    }
    if c.o_bias {
        v.push(tensor("self_attn.o_proj.bias", &[h], 1));
    }
    match c.qk_norm {
        QkNorm::None => {}
        QkNorm::PerHead => {
            v.push(tensor("self_attn.q_norm.weight", &[d], 1));
            v.push(tensor("self_attn.k_norm.weight", &[d], 1));
        }
        QkNorm::Full => {
            v.push(tensor("self_attn.q_norm.weight", &[h], 1));
            v.push(tensor("self_attn.k_norm.weight", &[h / nh * nkv], 1));
        }
    }
}

/// The router (and its balancing bias), the routed experts, the shared experts.
fn moe(c: &ModelConfig, m: &Moe, v: &mut Vec<ParamTensor>) {
    let h = c.hidden_size;
    v.push(tensor("mlp.gate.weight", &[m.num_experts, h], 1));
    if m.router_bias {
        v.push(tensor(
            "mlp.gate.e_score_correction_bias",
            &[m.num_experts],
            1,
        ));
    }
    let experts = format!("mlp.experts.{{0..{}}}", m.num_experts - 1);
    mlp(v, &experts, m.expert_intermediate, h, m.num_experts, false);
    if m.n_shared_experts > 0 {
        mlp(
            v,
            "mlp.shared_experts",
            m.n_shared_experts * m.expert_intermediate,
            h,
            1,
            c.mlp_bias,
        );
    }
}

/// A SwiGLU network's three projections (and biases) under `prefix`, `copies` of each.
fn mlp(v: &mut Vec<ParamTensor>, prefix: &str, i: u64, h: u64, copies: u64, bias: bool) {
    v.push(tensor(
        &format!("{prefix}.gate_proj.weight"),
        &[i, h],
        copies,
    ));
    v.push(tensor(&format!("{prefix}.up_proj.weight"), &[i, h], copies));
    v.push(tensor(
        &format!("{prefix}.down_proj.weight"),
        &[h, i],
        copies,
    ));
    if bias {
        v.push(tensor(&format!("{prefix}.gate_proj.bias"), &[i], copies));
        v.push(tensor(&format!("{prefix}.up_proj.bias"), &[i], copies));
        v.push(tensor(&format!("{prefix}.down_proj.bias"), &[h], copies));
    }
}
