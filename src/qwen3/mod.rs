//! Chapter 9 — the Qwen3-MoE forward pass on CPU (source S0 5.5, the culmination).
//!
//! The engine composes the chapters: a Hugging Face checkpoint ([`crate::checkpoint`]) and
//! its `config.json` ([`config`]) are mapped onto weight views ([`weights`], per-expert or
//! fused expert layouts, F32/BF16/F16), and [`model`] runs embedding → N × (RMSNorm →
//! grouped-query attention with q/k-norm and RoPE → residual → RMSNorm → MoE or dense MLP →
//! residual) → RMSNorm → LM head, using the RoPE of chapter 1, the frequency scaling of
//! chapter 3 and the router and experts of chapter 5 — no second copy of any of them. A
//! [`kv_cache`] makes decoding one position per step; [`generate`](mod@generate) picks
//! tokens greedily or by seeded temperature / top-p sampling. Logits equal transformers'
//! to ~1e-6. [`finite`] checks what each step produces and names the weight behind a NaN.
//!
//! The same engine runs dense Qwen3 and Qwen2 / Qwen2.5 (`model_type: "qwen2"`): Qwen2 is
//! a variant of the config (q/k/v biases, no q/k norm; see [`config`]), not a second
//! forward pass (tests/qwen2_transformers.rs checks it against `Qwen2ForCausalLM`).
//!
//! It also runs llama.cpp's GGUF files (architectures `qwen3moe`, `qwen3`, `qwen2`; `llama`
//! and `gemma3` as [`variant`]s once their GGUF config is read): [`open()`] takes a `.gguf`
//! as MODEL, the config comes from its metadata ([`gguf_config`]), the
//! tensors from its names ([`gguf_names`], one table read both ways), and [`tensors`] hands
//! the loader block-format matrices that the kernels dequantise block by block, so the
//! default path keeps no dequantised copy. [`Model::with_reference_kernels`] on an
//! [`F32Tensors`] store is the `--reference` pass. tests/gguf_models.rs checks both against
//! transformers' logits on the same dequantised weights.
//!
//! A [`Trace`] in a session records what a forward call did inside (per layer and position
//! the attention each head puts on the first token, the routing, on request q and k) for the
//! server's anatomy stream and the book's evidence; [`Model::qk_per_layer`] is its q·k view.

pub mod config;
pub mod evidence;
pub mod ffn;
pub mod finite;
pub mod generate;
pub mod gguf_config;
pub mod gguf_names;
pub mod kv_cache;
pub mod logits_file;
pub mod lost_in_middle;
pub mod model;
pub mod open;
pub mod perplexity;
pub mod router_report;
pub mod tensors;
pub mod to_gguf;
pub mod tour;
pub mod trace;
pub mod trained;
pub mod variant;
pub mod weights;
pub mod word_classes;

pub use config::Qwen3Config;
pub use generate::{GenerateOptions, Sampling, Stepper, generate};
pub use logits_file::save_logits;
pub use model::{LayerRouting, Logits, Model, Output, Session};
pub use open::{bundled_dir, glitch_report, is_gguf, open};
pub use router_report::{LayerReport, PositionRouting, RouterReport, router_report, router_text};
pub use tensors::{F32Tensors, ModelFile, Tensors};
pub use tour::{TOUR_TEXT, tour_demo};
pub use trace::{QkLayer, Trace};
pub use word_classes::{ClassRouting, class_text, word_class_routing, word_class_routing_file};
