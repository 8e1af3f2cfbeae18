//! A layer's feed-forward block as one forward, whatever it is: a dense SwiGLU MLP or a
//! routed mixture of experts, each with a clear (reference) and a fast arm. The decoder
//! layer calls [`Ffn::forward`] once, as candle's `Qwen3FeedForward` is called.

use crate::kernels::{Matrix, for_each_row};
use crate::moe::{Expert, MoeScratch, Routing, moe_bucketed, moe_fast_into};
use crate::qwen3::config::Qwen3Config;
use crate::qwen3::variant::{Activation, gelu_tanh};
use crate::qwen3::weights::Ffn;

/// Buffers a feed-forward call reuses: the MoE layer's and a dense MLP's gate/up rows.
#[derive(Debug, Default)]
pub struct FfnScratch {
    pub moe: MoeScratch,
    mlp: Vec<f32>,
}

impl Ffn<'_> {
    /// `y = FFN(xn)` for the rows of `xn` (`[n, hidden]` each), with the clear kernels when
    /// `reference`. An MoE layer returns its router's choices per position when `record`
    /// is set (building them allocates, so decoding without a trace leaves it off).
    #[allow(clippy::too_many_arguments)]
    pub fn forward(
        &self,
        c: &Qwen3Config,
        reference: bool,
        activation: Activation,
        xn: &[f32],
        y: &mut [f32],
        s: &mut FfnScratch,
        record: bool,
    ) -> Option<Vec<Routing>> {
        let k = c.num_experts_per_tok;
        match self {
            Ffn::Dense(mlp) if activation == Activation::GeluTanh => {
                geglu(mlp, reference, xn, y, &mut s.mlp)
            }
            Ffn::Dense(mlp) if reference => mlp.forward_batch(xn, y),
            Ffn::Dense(mlp) => mlp.forward_batch_fast(xn, y, &mut s.mlp),
            Ffn::Moe { router, experts } if reference => {
                let h = c.hidden_size;
                let (out, routing) = moe_bucketed(xn, h, router, experts, k, c.norm_topk_prob);
                y.copy_from_slice(&out);
                return record.then_some(routing);
            }
            Ffn::Moe { router, experts } => {
                moe_fast_into(xn, router, experts, k, c.norm_topk_prob, &mut s.moe, y);
                return record.then(|| s.moe.routings(k));
            }
        }
        None
    }
}

/// Gemma's GeGLU: `down · (gelu_tanh(gate · x) ⊙ (up · x))` for each row of `xs`.
fn geglu(mlp: &Expert, reference: bool, xs: &[f32], out: &mut [f32], buf: &mut Vec<f32>) {
    let (n, i) = (xs.len() / mlp.gate.cols, mlp.gate.rows);
    buf.resize(2 * n * i, 0.0);
    let (gate, up) = buf.split_at_mut(n * i);
    project(&mlp.gate, reference, xs, gate);
    project(&mlp.up, reference, xs, up);
    const PIECE: usize = 8192;
    for_each_row(gate, PIECE, |i, gate| {
        for (g, u) in gate.iter_mut().zip(&up[i * PIECE..]) {
            *g = gelu_tanh(*g) * u;
        }
    });
    project(&mlp.down, reference, gate, out);
}

/// `out = xs · mᵀ` for the rows of `xs`: the batched matmul, or the reference matvec row
/// by row.
pub fn project(m: &Matrix, reference: bool, xs: &[f32], out: &mut [f32]) {
    if reference {
        for (x, o) in xs.chunks_exact(m.cols).zip(out.chunks_exact_mut(m.rows)) {
            m.matvec(x, o);
        }
    } else {
        m.matmul(xs, out);
    }
}
