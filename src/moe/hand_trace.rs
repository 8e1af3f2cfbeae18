//! The hand trace: 3 experts, 2-dimensional embeddings, 3 tokens, top-2 routing.
//!
//! Source S0 5.4.7 ("手工验证"). The text reports only that the module's output equals the
//! hand reconstruction (`allclose = True`); here every step is recorded — each token's router
//! logits, the two experts it picks and their weights, each expert's output, the weighted
//! sum — so the book can print it, and the module ([`moe_bucketed`]) is checked against the
//! reconstruction assembled from those steps (claim `moe.hand_trace`). The weights are small
//! hand-picked numbers so that every token picks a different pair of experts.

use super::expert::Expert;
use super::layer::{moe_bucketed, router_logits};
use super::router::{Routing, route_topk_softmax};
use crate::kernels::Matrix;

pub const HIDDEN: usize = 2;
pub const NUM_EXPERTS: usize = 3;
pub const K: usize = 2;

/// Router `W_g` `[3, 2]`.
pub const ROUTER: [f32; 6] = [1.0, -0.5, 0.2, 1.0, -0.8, 0.6];
/// Per expert: gate `[2, 2]`, up `[2, 2]`, down `[2, 2]` (intermediate size 2), row-major.
pub const GATE: [[f32; 4]; 3] = [
    [1.0, 0.5, -0.5, 1.0],
    [0.5, 1.0, 1.0, -0.5],
    [1.0, -1.0, 0.5, 0.5],
];
pub const UP: [[f32; 4]; 3] = [
    [1.0, 0.0, 0.0, 1.0],
    [1.0, 1.0, 0.0, 1.0],
    [0.5, 0.0, 1.0, 0.5],
];
pub const DOWN: [[f32; 4]; 3] = [
    [1.0, 0.0, 0.0, 1.0],
    [0.0, 1.0, 1.0, 0.0],
    [1.0, 0.5, -0.5, 1.0],
];
/// Three tokens `[3, 2]`.
pub const TOKENS: [f32; 6] = [1.0, 0.4, -0.5, 1.0, -1.0, -1.0];

/// One token's steps.
#[derive(Clone, Debug)]
pub struct TokenTrace {
    pub x: [f32; HIDDEN],
    pub logits: Vec<f32>,
    pub routing: Routing,
    /// `F_e(x)` for each chosen expert, in routing order.
    pub expert_outputs: Vec<Vec<f32>>,
    /// `Σ p_e F_e(x)`, assembled by hand from the lines above.
    pub y: Vec<f32>,
}

/// The whole trace and the module's output.
#[derive(Clone, Debug)]
pub struct HandTrace {
    pub tokens: Vec<TokenTrace>,
    pub module_output: Vec<f32>,
    pub max_abs_diff: f32,
}

/// The three experts over the constant weights.
pub fn experts() -> Vec<Expert<'static>> {
    (0..NUM_EXPERTS)
        .map(|e| Expert {
            gate: Matrix::f32(&GATE[e], 2, HIDDEN),
            up: Matrix::f32(&UP[e], 2, HIDDEN),
            down: Matrix::f32(&DOWN[e], HIDDEN, 2),
        })
        .collect()
}

// ANCHOR: trace
/// Runs the example step by step, then the module, and compares.
pub fn trace() -> HandTrace {
    let router = Matrix::f32(&ROUTER, NUM_EXPERTS, HIDDEN);
    let experts = experts();
    let mut tokens = Vec::new();
    for x in TOKENS.chunks_exact(HIDDEN) {
        let logits = router_logits(&router, x);
        // The text's convention: top-2 of the scores, softmax over those two.
        let routing = route_topk_softmax(&logits, K);
        let mut expert_outputs = Vec::new();
        let mut y = vec![0.0f32; HIDDEN];
        for (&e, &p) in routing.experts.iter().zip(&routing.weights) {
            let mut f = vec![0.0f32; HIDDEN];
            experts[e].forward(x, &mut f);
            for (yi, fi) in y.iter_mut().zip(&f) {
                *yi += p * fi;
            }
            expert_outputs.push(f);
        }
        tokens.push(TokenTrace {
            x: [x[0], x[1]],
            logits,
            routing,
            expert_outputs,
            y,
        });
    }
    let (module_output, _) = moe_bucketed(&TOKENS, HIDDEN, &router, &experts, K, true);
    let hand: Vec<f32> = tokens.iter().flat_map(|t| t.y.clone()).collect();
    let max_abs_diff = hand
        .iter()
        .zip(&module_output)
        .fold(0.0f32, |m, (a, b)| m.max((a - b).abs()));
    HandTrace {
        tokens,
        module_output,
        max_abs_diff,
    }
}
// ANCHOR_END: trace

/// The trace as the book prints it (a text block, 4 decimals).
pub fn render_markdown(t: &HandTrace) -> String {
    let v = |x: &[f32]| {
        let parts: Vec<String> = x.iter().map(|a| format!("{a:8.4}")).collect();
        format!("[{}]", parts.join(","))
    };
    let mut s = String::from("```text\n");
    for (i, tok) in t.tokens.iter().enumerate() {
        s.push_str(&format!("token {}  x = {}\n", i + 1, v(&tok.x)));
        s.push_str(&format!(
            "  router logits W_g x      = {}\n",
            v(&tok.logits)
        ));
        let chosen: Vec<String> = tok
            .routing
            .experts
            .iter()
            .zip(&tok.routing.weights)
            .map(|(e, p)| format!("E{e} (p = {p:.4})"))
            .collect();
        s.push_str(&format!(
            "  top-2, softmax over them -> {}\n",
            chosen.join(", ")
        ));
        for (e, f) in tok.routing.experts.iter().zip(&tok.expert_outputs) {
            s.push_str(&format!("  F_{e}(x)                   = {}\n", v(f)));
        }
        let terms: Vec<String> = tok
            .routing
            .experts
            .iter()
            .zip(&tok.routing.weights)
            .map(|(e, p)| format!("{p:.4}*F_{e}"))
            .collect();
        s.push_str(&format!(
            "  y = {:<21} = {}\n",
            terms.join(" + "),
            v(&tok.y)
        ));
    }
    s.push_str("module output (moe_bucketed):\n");
    for row in t.module_output.chunks_exact(HIDDEN) {
        s.push_str(&format!("  {}\n", v(row)));
    }
    s.push_str(&format!(
        "max |module - hand| = {:e}  allclose = {}\n```\n",
        t.max_abs_diff,
        t.max_abs_diff <= 1e-6
    ));
    s
}
