//! Chapter 12 — Training a small Qwen3-MoE (source S0 5.2, 5.3, 5.4, 5.6; S1 troubleshooting).
//!
//! The engine's forward pass run backwards by hand, the way llm.c trains GPT-2: every block
//! of [`crate::qwen3`]'s forward has a backward function here, checked against PyTorch's
//! autograd on fixtures transformers produced. The parameters ([`params`]), the loss and its
//! gradients ([`backward`]), the corpus and its batches ([`data`]), the optimisers
//! ([`optimizer`]: AdamW, and the crate's Muon for hidden matrices) and the loop that ties
//! them together ([`trainer`]).

pub mod backward;
pub mod data;
pub mod experiments;
pub mod inspect;
pub mod optimizer;
pub mod params;
pub mod trainer;
