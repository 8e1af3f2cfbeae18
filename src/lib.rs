//! # llm-anatomy
//!
//! A from-scratch, notebook-style anatomy of the parts of a modern LLM, mirroring a course
//! chapter (sections 5.1–5.7) and its companion overview. Each module is a chapter; the
//! claims registry ([`claims`]) computes every number the texts state and says whether it
//! reproduces.
//!
//! | chapter | module | source |
//! |---|---|---|
//! | 1. Position encoding: RoPE, sinusoidal, equivariance | [`position`] | S0 5.1, S1 §1 |
//! | 2. Long-range decay of RoPE scores | [`position::decay`] | S0 5.1.6–5.1.7 |
//! | 3. Length extrapolation: PI, NTK, YaRN, llama3; tiled attention; memory | [`long_context`] | S0 5.2, S1 §2 |
//! | 4. Tokenizers: byte-level BPE on the Qwen vocabulary, special tokens, glitch tokens | [`tokenizer`] | S0 5.3 |
//! | 5. Mixture of Experts: router, experts, bucketed layer, balancing, expert parallelism | [`moe`] | S0 5.4, S1 §3 |
//! | 6. Qwen3-30B-A3B by the numbers: parameters, memory, KV cache, FLOPs | [`params`] | S0 5.5 |
//! | 7. Optimisers: Muon (Newton–Schulz), gradient clipping, QK-clip; a measured demo | [`optim`] | S0 5.6 |
//! | 8. Chat templates (Qwen3, checked against jinja2) and the thinking budget | [`chat`] | S0 5.7 |
//! | 9. The forward pass: Qwen3-MoE from Hugging Face checkpoints (with [`checkpoint`]) | [`qwen3`] | S0 5.5 |
//! | 10. Performance: bandwidth, FMA peak, prefill/decode rates and their ceilings | [`bench`](mod@bench) | — |
//! | 11. Quantisation: block formats, their error, a 30B MoE in 24 GiB | [`quant`], [`params::quant`] | S0 5.5, S1 §3 |
//! | 12. Training a small Qwen3-MoE: hand-written backward passes, AdamW and Muon, the loop | [`train`] | S0 5.2–5.6, S1 |
//! | appendix. The claims table | [`claims`] | both |
//!
//! Primitives shared by every chapter live in [`kernels`]; plots in [`figures`].
//!
//! The modules stand on four floors, and import only from their own floor or below
//! (tests/layering.rs checks it): (0) [`kernels`], [`checkpoint`], [`gguf`], [`quant`],
//! [`error`], [`limits`], [`output`] — the parts every chapter needs; (1) the chapter modules; (2) the engine,
//! [`qwen3`], and the trainer, [`train`]; (3) [`claims`], [`figures`], [`bench`](mod@bench) and the `anatomy` command
//! line.

pub mod bench;
pub mod chat;
pub mod checkpoint;
pub mod claims;
pub mod error;
pub mod figures;
pub mod gguf;
pub mod json;
pub mod kernels;
pub mod limits;
pub mod long_context;
pub mod moe;
pub mod optim;
pub mod output;
pub mod params;
pub mod position;
pub mod quant;
pub mod qwen3;
pub mod rand;
pub mod serve;
pub mod tokenizer;
pub mod train;

pub use error::{CheckpointProblem, Error, FileProblem, Result};
