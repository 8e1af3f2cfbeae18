//! What sets one architecture of the engine apart from another, as numbers and switches
//! the one forward pass reads (never a second forward): Qwen3-MoE, Qwen3, Qwen2 and Llama
//! differ only in what the config and the weights already say (q/k norms, biases, experts);
//! Gemma 3 adds the items of [`Variant`].
//!
//! Gemma 3's values follow transformers' `Gemma3TextConfig` / `Gemma3TextModel` and
//! llama.cpp's `LLM_ARCH_GEMMA3` (src/llama-model.cpp), which agree on them: RMSNorm scales
//! by `1 + w`; embeddings are multiplied by √hidden; the attention output and the FFN
//! output are each RMS-normalised again before their residual add ("sandwich" norms); the
//! FFN is GeGLU with tanh-approximated GELU; sliding-window layers rotate with their own
//! RoPE base (`rope_local_base_freq`, 10 000, which the GGUF file leaves to the code).

use crate::long_context::scaling::{RopeConfig, RopeScaling};
use crate::qwen3::config::Qwen3Config;

/// The feed-forward block's activation of the gate.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Activation {
    /// SwiGLU: `silu(gate) · up`.
    Silu,
    /// GeGLU: `gelu_tanh(gate) · up` (Gemma's `gelu_pytorch_tanh`).
    GeluTanh,
}

/// The per-architecture settings of the forward pass (see the module docs).
#[derive(Clone, Debug, PartialEq)]
pub struct Variant {
    /// Added to every RMSNorm weight at load time: 1 for Gemma's `(1 + w)`, else 0.
    pub norm_weight_offset: f32,
    /// Norms on the attention output and the FFN output before each residual add.
    pub sandwich_norms: bool,
    /// Factor on the embedding rows (Gemma: √hidden in f32, as transformers casts it).
    pub embedding_scale: f32,
    /// Factor on q·k before the softmax.
    pub attention_scale: f32,
    pub activation: Activation,
    /// RoPE of the sliding-window layers when it differs from the global one.
    pub local_rope: Option<RopeConfig>,
}

/// Gemma 3's RoPE base for sliding-window layers (`rope_local_base_freq`).
pub const GEMMA3_LOCAL_ROPE_BASE: f64 = 10_000.0;

impl Variant {
    /// The settings of `c`'s architecture.
    pub fn of(c: &Qwen3Config) -> Variant {
        let attention_scale = (c.head_dim as f64).powf(-0.5) as f32;
        match c.model_type.as_str() {
            "gemma3" | "gemma3_text" => Variant {
                norm_weight_offset: 1.0,
                sandwich_norms: true,
                embedding_scale: (c.hidden_size as f32).sqrt(),
                attention_scale,
                activation: Activation::GeluTanh,
                local_rope: Some(RopeConfig {
                    theta: GEMMA3_LOCAL_ROPE_BASE,
                    scaling: RopeScaling::Default,
                    ..c.rope.clone()
                }),
            },
            _ => Variant {
                norm_weight_offset: 0.0,
                sandwich_norms: false,
                embedding_scale: 1.0,
                attention_scale,
                activation: Activation::Silu,
                local_rope: None,
            },
        }
    }
}

/// GELU with the tanh approximation: `x/2 · (1 + tanh(√(2/π)·(x + 0.044715·x³)))`.
pub fn gelu_tanh(x: f32) -> f32 {
    const SQRT_2_OVER_PI: f32 = 0.797_884_6;
    let u = SQRT_2_OVER_PI * (x + 0.044_715 * x * x * x);
    // 1 + tanh u = 2 / (1 + e^(−2u)): one `exp` (the engine's, no libm call) and no
    // cancellation in 1 + tanh u where u is very negative.
    x / (1.0 + crate::kernels::exp::exp_f32(-2.0 * u))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// gelu_tanh against the same formula in f64 and its limits: 0 at 0, x for large x,
    /// 0 for very negative x.
    #[test]
    fn gelu_tanh_is_the_tanh_approximation() {
        for x in [-6.0f32, -1.5, -0.3, 0.0, 0.2, 1.0, 3.7, 12.0] {
            let v = f64::from(x);
            let want = 0.5
                * v
                * (1.0 + ((2.0 / std::f64::consts::PI).sqrt() * (v + 0.044715 * v.powi(3))).tanh());
            assert!(
                (f64::from(gelu_tanh(x)) - want).abs() <= 4e-7 * (1.0 + v.abs()),
                "{x}"
            );
        }
        assert_eq!(gelu_tanh(0.0), 0.0);
    }
}
