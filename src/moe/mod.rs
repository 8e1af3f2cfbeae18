//! Chapter 5 — Mixture of Experts (source S0 5.4, S1 §3).
//!
//! An MoE layer replaces a transformer block's feed-forward network by a router and N
//! small feed-forward "experts"; each token is sent to its top-k experts only, so the
//! model holds N experts' parameters but spends k experts' compute per token. The router
//! ([`router`]), the SwiGLU expert ([`expert`]) and the layer in its literal and bucketed
//! forms ([`layer`]) are what the Qwen3-MoE forward pass runs.
//!
//! Claims backed here: `moe.topk_softmax`, `moe.bucketed_equiv`, `moe.shared_expert`.

pub mod balance;
pub mod block_sparse;
pub mod expert;
pub mod expert_parallel;
pub mod hand_trace;
pub mod layer;
pub mod router;

pub use expert::Expert;
pub use layer::{is_moe_layer, moe_bucketed, moe_naive, moe_with_shared};
pub use router::{Routing, route, route_topk_softmax};
