//! One expert: a SwiGLU feed-forward network, exactly the dense MLP of Qwen3 but narrower.
//!
//! Source S0 5.4.1/5.4.4. `F(x) = W_down (SiLU(W_gate x) ⊙ W_up x)`; the three matrices are
//! stored as nn.Linear weights `[out, in]`: gate and up `[I, H]`, down `[H, I]`, with
//! `I = moe_intermediate_size`. Parameters per expert: `3·H·I` (claim
//! `qwen3.expert_params`). The text writes the SiLU on the *up* projection
//! (`W_down(SiLU(W_up x) ⊙ W_gate x)`); that is the same network with the two names
//! swapped, but a checkpoint's `gate_proj` is the one that goes through SiLU.

use crate::kernels::{Group, Matrix, for_each_row, matmul_grouped, silu};

/// A SwiGLU expert borrowing its three weight matrices.
#[derive(Clone, Copy, Debug)]
pub struct Expert<'a> {
    /// `[I, H]`, goes through SiLU.
    pub gate: Matrix<'a>,
    /// `[I, H]`, the linear branch.
    pub up: Matrix<'a>,
    /// `[H, I]`, back to the hidden size.
    pub down: Matrix<'a>,
}

impl Expert<'_> {
    /// Hidden size H (input and output length).
    pub fn hidden(&self) -> usize {
        self.gate.cols
    }

    /// Intermediate size I.
    pub fn intermediate(&self) -> usize {
        self.gate.rows
    }

    /// Number of parameters, `3·H·I`.
    pub fn num_params(&self) -> usize {
        self.gate.rows * self.gate.cols
            + self.up.rows * self.up.cols
            + self.down.rows * self.down.cols
    }

    // ANCHOR: forward
    /// `out = down(silu(gate·x) ⊙ (up·x))`; `x` and `out` have H entries.
    pub fn forward(&self, x: &[f32], out: &mut [f32]) {
        let i = self.intermediate();
        assert!(
            self.up.rows == i && self.up.cols == self.hidden(),
            "expert: up shape"
        );
        assert!(
            self.down.rows == self.hidden() && self.down.cols == i,
            "expert: down shape"
        );
        let mut g = vec![0.0f32; i];
        let mut u = vec![0.0f32; i];
        self.gate.matvec(x, &mut g);
        self.up.matvec(x, &mut u);
        swiglu(&mut g, &u);
        self.down.matvec(&g, out);
    }
    // ANCHOR_END: forward

    /// The expert on a batch: `xs` is `[n, H]` row-major, `out` is `[n, H]`.
    pub fn forward_batch(&self, xs: &[f32], out: &mut [f32]) {
        let h = self.hidden();
        assert_eq!(xs.len(), out.len(), "expert batch: lengths");
        for (x, o) in xs.chunks_exact(h).zip(out.chunks_exact_mut(h)) {
            self.forward(x, o);
        }
    }

    /// [`Expert::forward_batch`] with batched, parallel matmuls: each weight matrix is read
    /// once for the whole batch, gate and up in one grouped matmul (chapter 10's fast path;
    /// same values up to summation order). `scratch` is reused between calls.
    pub fn forward_batch_fast(&self, xs: &[f32], out: &mut [f32], scratch: &mut Vec<f32>) {
        let (h, i) = (self.hidden(), self.intermediate());
        assert_eq!(xs.len(), out.len(), "expert batch: lengths");
        let n = xs.len() / h;
        scratch.resize(2 * n * i, 0.0);
        let both = [
            Group {
                matrix: 0,
                first_in: 0,
                n,
                first_out: 0,
            },
            Group {
                matrix: 1,
                first_in: 0,
                n,
                first_out: n,
            },
        ];
        matmul_grouped(
            |m| if m == 0 { self.gate } else { self.up },
            &both,
            xs,
            scratch,
        );
        let (g, u) = scratch.split_at_mut(n * i);
        swiglu(g, u);
        self.down.matmul(g, out);
    }
}

/// The SwiGLU gate, in place: `gate ← silu(gate) ⊙ up` (element by element; any number of
/// rows laid out alike in both). A prefill's many rows are split over the thread pool.
pub fn swiglu(gate: &mut [f32], up: &[f32]) {
    assert_eq!(gate.len(), up.len(), "swiglu: lengths");
    const PIECE: usize = 8192;
    for_each_row(gate, PIECE, |i, gate| {
        for (g, u) in gate.iter_mut().zip(&up[i * PIECE..]) {
            *g = silu(*g) * u;
        }
    });
}
