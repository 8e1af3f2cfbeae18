//! The integration tests, one module per topic, compiled into one test binary (one link
//! instead of forty). Run one topic with `cargo test --test suite claims::`. Tests that
//! must own their process stay binaries of their own: tests/no_alloc.rs (a counting global
//! allocator), tests/book_grad_check.rs (sets an environment variable), tests/bench.rs
//! (timing probes) and tests/figures.rs; the book's checks are tests/book/.

#[path = "../common/mod.rs"]
mod common;

mod bf16_compute;
mod bundled_model;
mod chat;
mod claims;
mod claims_moe;
mod claims_optim_chat;
mod claims_quant;
mod claims_tokenizer;
mod cli_bad_input;
mod cli_usage;
mod config_agreement;
mod experiments_context;
mod experiments_dynamics;
mod gguf;
mod gguf_model_fixtures;
mod gguf_models;
mod gguf_tokenizer;
mod grad_bad_input;
mod grad_blocks;
mod grad_transformers;
mod house;
mod kernel_dispatch;
mod layering;
mod long_context;
mod lost_in_middle;
mod moe;
mod optim;
mod params;
mod params_quant;
mod parsers_never_panic;
mod quant;
mod quantize;
mod qwen2_transformers;
mod qwen3_transformers;
mod real_evidence;
mod real_extrapolation;
mod real_model;
mod real_models_chat;
mod real_models_logits;
mod real_models_tokenizer;
mod rope_transformers;
mod serve;
mod tokenizer;
mod train_backward;
mod train_checkpoint;
mod train_loop;
mod train_optimizer;
