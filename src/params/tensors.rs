//! Chapter 6's tensor-by-tensor view: the tensors one decoder layer holds, named and
//! shaped as a Hugging Face checkpoint stores them (the table of source S0 5.5.2, which
//! `book/src/generated/qwen3-tensors.md` shows for Qwen3-30B-A3B).

use super::{ModelConfig, QkNorm, layer_is_moe};
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
    let t = |name: &str, shape: &[u64], copies: u64| ParamTensor {
        name: name.to_string(),
        shape: shape.to_vec(),
        copies,
    };
    let mut v = vec![
        t("input_layernorm.weight", &[h], 1),
        t("post_attention_layernorm.weight", &[h], 1),
    ];
    let (nh, nkv, d) = (c.num_attention_heads, c.num_key_value_heads, c.head_dim);
    match c.mla {
        Some(m) => {
            let qk = m.qk_nope_head_dim + m.qk_rope_head_dim;
            let kv_a = m.kv_lora_rank + m.qk_rope_head_dim;
            match m.q_lora_rank {
                Some(r) => {
                    v.push(t("self_attn.q_a_proj.weight", &[r, h], 1));
                    if c.qkv_bias {
                        v.push(t("self_attn.q_a_proj.bias", &[r], 1));
                    }
                    v.push(t("self_attn.q_a_layernorm.weight", &[r], 1));
                    v.push(t("self_attn.q_b_proj.weight", &[nh * qk, r], 1));
                }
                None => v.push(t("self_attn.q_proj.weight", &[nh * qk, h], 1)),
            }
            v.push(t("self_attn.kv_a_proj_with_mqa.weight", &[kv_a, h], 1));
            if c.qkv_bias {
                v.push(t("self_attn.kv_a_proj_with_mqa.bias", &[kv_a], 1));
            }
            v.push(t("self_attn.kv_a_layernorm.weight", &[m.kv_lora_rank], 1));
            v.push(t(
                "self_attn.kv_b_proj.weight",
                &[nh * (m.qk_nope_head_dim + m.v_head_dim), m.kv_lora_rank],
                1,
            ));
            v.push(t("self_attn.o_proj.weight", &[h, nh * m.v_head_dim], 1));
            if c.o_bias {
                v.push(t("self_attn.o_proj.bias", &[h], 1));
            }
        }
        None => {
            v.push(t("self_attn.q_proj.weight", &[nh * d, h], 1));
            v.push(t("self_attn.k_proj.weight", &[nkv * d, h], 1));
            v.push(t("self_attn.v_proj.weight", &[nkv * d, h], 1));
            v.push(t("self_attn.o_proj.weight", &[h, nh * d], 1));
            if c.qkv_bias {
                v.push(t("self_attn.q_proj.bias", &[nh * d], 1));
                v.push(t("self_attn.k_proj.bias", &[nkv * d], 1));
                v.push(t("self_attn.v_proj.bias", &[nkv * d], 1));
            }
            if c.o_bias {
                v.push(t("self_attn.o_proj.bias", &[h], 1));
            }
            match c.qk_norm {
                QkNorm::None => {}
                QkNorm::PerHead => {
                    v.push(t("self_attn.q_norm.weight", &[d], 1));
                    v.push(t("self_attn.k_norm.weight", &[d], 1));
                }
                QkNorm::Full => {
                    v.push(t("self_attn.q_norm.weight", &[h], 1));
                    v.push(t("self_attn.k_norm.weight", &[h / nh * nkv], 1));
                }
            }
        }
    }
    let mlp = |v: &mut Vec<ParamTensor>, prefix: &str, i: u64, copies: u64, bias: bool| {
        v.push(t(&format!("{prefix}.gate_proj.weight"), &[i, h], copies));
        v.push(t(&format!("{prefix}.up_proj.weight"), &[i, h], copies));
        v.push(t(&format!("{prefix}.down_proj.weight"), &[h, i], copies));
        if bias {
            v.push(t(&format!("{prefix}.gate_proj.bias"), &[i], copies));
            v.push(t(&format!("{prefix}.up_proj.bias"), &[i], copies));
            v.push(t(&format!("{prefix}.down_proj.bias"), &[h], copies));
        }
    };
    match (&c.moe, layer_is_moe(c, l)) {
        (Some(m), true) => {
            v.push(t("mlp.gate.weight", &[m.num_experts, h], 1));
            if m.router_bias {
                v.push(t("mlp.gate.e_score_correction_bias", &[m.num_experts], 1));
            }
            let experts = format!("mlp.experts.{{0..{}}}", m.num_experts - 1);
            mlp(
                &mut v,
                &experts,
                m.expert_intermediate,
                m.num_experts,
                false,
            );
            if m.n_shared_experts > 0 {
                mlp(
                    &mut v,
                    "mlp.shared_experts",
                    m.n_shared_experts * m.expert_intermediate,
                    1,
                    c.mlp_bias,
                );
            }
        }
        _ => mlp(&mut v, "mlp", c.intermediate_size, 1, c.mlp_bias),
    }
    v
}
