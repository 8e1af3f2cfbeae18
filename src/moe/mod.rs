//! Chapter 5 — Mixture of Experts (source S0 5.4, S1 §3).
//!
//! An MoE layer replaces a transformer block's feed-forward network by a router and N
//! small feed-forward "experts"; each token is sent to its top-k experts only, so the
//! model holds N experts' parameters but spends k experts' compute per token. The router
//! ([`router`]), the SwiGLU expert ([`expert`]) and the layer in its literal and bucketed
//! forms ([`layer`]) are what the Qwen3-MoE forward pass runs.
//!
//! The worked examples of the text follow: the weighted sum as a block-sparse product
//! ([`block_sparse`]), the 3-expert hand trace ([`hand_trace`]), load balancing
//! ([`balance`]) and expert parallelism over threads ([`expert_parallel`]).
//!
//! Claims backed here: `moe.topk_softmax`, `moe.expert_formula`, `moe.bucketed_equiv`,
//! `moe.shared_expert`, `moe.block_sparse`, `moe.hand_trace`, `moe.balance`,
//! `moe.ep_example`, `moe.granularity` (an expert is the sum of its halves).

pub mod balance;
pub mod block_sparse;
pub mod expert;
pub mod expert_parallel;
pub mod hand_trace;
pub mod layer;
pub mod router;

/// The text blocks the book includes from `book/src/generated/` (file name, contents),
/// all printed by the code; `tests/moe.rs` checks the files are current.
pub fn book_snippets() -> Vec<(&'static str, String)> {
    let (ep, diff) = expert_parallel::text_example_compared();
    let (cfg, runs) = balance::book_runs();
    vec![
        (
            "moe-block-sparse.md",
            block_sparse::render_markdown(&block_sparse::text_example()),
        ),
        (
            "moe-hand-trace.md",
            hand_trace::render_markdown(&hand_trace::trace()),
        ),
        (
            "moe-expert-parallel.md",
            expert_parallel::render_markdown(&ep, diff),
        ),
        ("moe-balance.md", balance::render_markdown(&cfg, &runs)),
    ]
}

pub use expert::Expert;
pub use layer::{
    MoeScratch, is_moe_layer, moe_bucketed, moe_fast, moe_fast_into, moe_naive, moe_with_shared,
};
pub use router::{Routing, route, route_topk_softmax};
